#pragma once
// The engine's profiler, in torch.profiler's shape:
//
//   with torch.profiler.profile(record_shapes=True, profile_memory=True) as prof:   // profiler::Profile prof({...});
//       train_step()                                                               // trainStep();
//   print(prof.key_averages().table(sort_by="cpu_time_total", row_limit=10))       // prof.key_averages().table(...)
//   prof.export_chrome_trace("trace.json")                                         // prof.export_chrome_trace(...)
//
// While a Profile is alive, every op records an event: its name (PyTorch's, "aten::linear",
// "aten::relu", "autograd::engine::evaluate_function: AddmmBackward0", "Optimizer.step#Adam.step"), the
// thread, its start and wall duration, its self time (the duration less its child ops'), optionally the
// input shapes and the memory it allocated on the CPU (net, as PyTorch's "CPU Mem"). Events nest: an op
// that calls another (linear -> matmul) contains it. RecordScope is what an op puts at its top.
//
// Off (no Profile alive) a RecordScope costs one atomic load and a branch. The events go to one
// collector under a mutex (ops from worker threads included); the per-thread nesting is thread-local.
// A GPU op's CPU time is its launch. Its device time comes from two timing events (cuda::Event)
// recorded on its device's current stream at the op's start and end -- on a real GPU CUDA events, on
// the emulated GPU its streams' own stamps -- read when the Profile stops: the time the stream took to
// run everything the op queued (PyTorch's "CUDA total"; it includes any wait of the stream inside the
// op, where CUPTI would add up kernels only). An op runs on the device of its first CUDA input (or the
// device a copy goes to). Each op is also an NVTX range (with a CUDA module), so Nsight Systems shows
// the ops on the host's timeline above the kernels.
#include <atomic>
#include <cstdint>
#include <initializer_list>
#include <string>
#include <vector>

#include "engine/core/device.h"
#include "engine/runtime/run_record.h"

namespace gpulab {
class Tensor;
}

namespace gpulab::profiler {

struct ProfileOptions {
  bool record_shapes = false;   // each event's input shapes ("[[128, 784], [256, 784], [256]]")
  bool profile_memory = false;  // each event's net CPU allocation (allocated minus freed), bytes
  // ProfilerActivity.CUDA: each op's device time (real or emulated GPU) beside its CPU time. Off
  // (activities=[CPU]): ops on a GPU are recorded as CPU ops only, as PyTorch's profiler does.
  bool record_device = true;
};

struct Event {
  std::string name;
  std::uint64_t thread = 0;      // a small number per thread, in the order threads first recorded
  double startUs = 0;            // since the Profile started
  double durationUs = 0;         // wall time, child ops included
  double selfUs = 0;             // less the child ops' durations
  int depth = 0;                 // 0: called from outside any op
  std::string shapes;            // with record_shapes
  std::int64_t memoryBytes = 0;  // with profile_memory: net allocation during the op, children included
  std::int64_t selfMemoryBytes = 0;
  // On a CUDA device (real or emulated): its device ("cuda:0"), and the stream's time for the op's work,
  // child ops included and less theirs, and when it began (on the host's clock since the Profile
  // started, through an event recorded when the device was first seen). Empty device: a CPU op.
  std::string device;
  std::uintptr_t deviceStream = 0;  // the stream's id (0: the default stream)
  double deviceUs = 0, selfDeviceUs = 0, deviceStartUs = 0;
  bool deviceChildren = false;  // an op it called has device work too (its own span holds theirs)
};

// One row of key_averages(): the events of one name (and, grouped by shape, one input shape).
struct OpAverage {
  std::string name, shapes;
  std::int64_t count = 0;
  double cpuTimeTotalUs = 0, selfCpuTimeTotalUs = 0;
  double deviceTimeTotalUs = 0, selfDeviceTimeTotalUs = 0;  // "CUDA total", "Self CUDA"
  std::int64_t cpuMemoryBytes = 0, selfCpuMemoryBytes = 0;
  double cpuTimeAvgUs() const { return count ? cpuTimeTotalUs / static_cast<double>(count) : 0.0; }
  double deviceTimeAvgUs() const { return count ? deviceTimeTotalUs / static_cast<double>(count) : 0.0; }
};

class KeyAverages {
 public:
  std::vector<OpAverage> rows;  // in the order each name first ran
  bool withShapes = false, withMemory = false;
  bool withDevice = false;  // some op ran on a CUDA device
  // PyTorch's table: Name, Self CPU %, Self CPU, CPU total %, CPU total, CPU time avg, [Self CUDA, Self
  // CUDA %, CUDA total, CUDA time avg,] [CPU Mem, Self CPU Mem,] # of Calls[, Input Shapes], then "Self
  // CPU time total: ..." [and "Self CUDA time total: ..."]. sort_by: "cpu_time_total",
  // "self_cpu_time_total", "cpu_time", "cuda_time_total" (or "device_time_total"), "self_cuda_time_total"
  // (or "self_device_time_total"), "cuda_time" ("device_time"), "count", "cpu_memory_usage",
  // "self_cpu_memory_usage"; anything else throws ValueError listing these. row_limit <= 0: every row.
  // No rows (nothing ran inside the profile): an empty string, as PyTorch's, whatever sort_by says.
  std::string table(const std::string& sort_by = "cpu_time_total", int row_limit = 100) const;
  // The rows table() prints, in its order: sorted by `sort_by` (largest first, ties in first-run order),
  // cut to row_limit (<= 0: all). Throws ValueError for an unknown key, as table() does.
  std::vector<const OpAverage*> sorted(const std::string& sort_by, int row_limit = 0) const;
  // The sum of every event's self time: the profiled wall time that ops account for.
  double selfCpuTimeTotalUs() const;
  double selfDeviceTimeTotalUs() const;  // the same for the devices' streams
};

class Profile {
 public:
  explicit Profile(ProfileOptions options = {});  // starts recording; throws Error if another Profile is recording
  ~Profile();                                     // stops
  Profile(const Profile&) = delete;
  Profile& operator=(const Profile&) = delete;

  void stop();  // what __exit__ does: no events after it
  // What torch.profiler.profile's step() marks: the current step ends here and the next begins. The
  // trace shows each step as "ProfilerStep#N" around its ops, as PyTorch's does (Holistic Trace Analysis
  // splits a trace into iterations by them); key_averages() is not changed by it.
  void step();
  double wallUs() const;  // from construction to stop (or now, while recording)
  const std::vector<Event>& events() const;  // after stop(), in the order they ended
  KeyAverages key_averages(bool group_by_input_shape = false) const;
  // The trace as PyTorch's profiler writes it (the Kinetto JSON that chrome://tracing, Perfetto and
  // Holistic Trace Analysis read): a "cpu_op" per op on its thread (args: External id, input dims,
  // memory); for an op with device work, a "cuda_runtime" launch on its thread and a "kernel" on the
  // device's process (pid: the device index) and its stream's lane (tid: the stream), tied by a
  // correlation id and an "ac2g" flow; "ProfilerStep#N" spans for the steps; named processes and
  // threads. Throws Error naming the path when it cannot be written; the file is written whole or not
  // at all.
  void export_chrome_trace(const std::string& path) const;
  std::string chromeTraceJson() const;

 private:
  ProfileOptions options_;
  bool stopped_ = false;
  double startUs_ = 0, stopUs_ = 0;
  std::vector<double> stepEndsUs_;  // since the start, one per step()
  std::vector<Event> events_;
};

namespace detail {
extern std::atomic<bool> recording;
}
inline bool isProfiling() { return detail::recording.load(std::memory_order_acquire); }  // a plain load on x86
// Whether an op's scope is wanted: a Profile records, or a run is recorded (engine/runtime/run_record.h).
inline bool isObserving() { return isProfiling() || run_record::recording(); }

// An op's event: from construction to destruction. `name` must outlive the scope (a literal); for a
// built name, use the std::string overload (build it only when isObserving()). While a run is
// recorded, its start is noted there too: the op's name, device and depth.
class RecordScope {
 public:
  explicit RecordScope(const char* name, std::initializer_list<const Tensor*> inputs = {}) {
    if (isObserving()) begin(name, inputs);
  }
  RecordScope(const std::string& name, std::initializer_list<const Tensor*> inputs = {}) {
    if (isObserving() && !name.empty()) begin(name.c_str(), inputs);
  }
  // A copy's scope: `on` is the device whose stream does the work (the GPU side of a copy).
  RecordScope(const char* name, std::initializer_list<const Tensor*> inputs, Device on) {
    if (isObserving()) begin(name, inputs, &on);
  }
  ~RecordScope() {
    if (active_) end();
  }
  RecordScope(const RecordScope&) = delete;
  RecordScope& operator=(const RecordScope&) = delete;

 private:
  void begin(const char* name, std::initializer_list<const Tensor*> inputs, const Device* on = nullptr);
  void end();
  bool active_ = false;
};

}  // namespace gpulab::profiler
