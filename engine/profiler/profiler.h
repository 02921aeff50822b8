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
// This covers CPU time; device time through CUDA events and NVTX ranges comes with the streams work
// (issue 13), and a GPU op's CPU time here is its launch.
#include <atomic>
#include <cstdint>
#include <initializer_list>
#include <string>
#include <vector>

namespace gpulab {
class Tensor;
}

namespace gpulab::profiler {

struct ProfileOptions {
  bool record_shapes = false;   // each event's input shapes ("[[128, 784], [256, 784], [256]]")
  bool profile_memory = false;  // each event's net CPU allocation (allocated minus freed), bytes
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
};

// One row of key_averages(): the events of one name (and, grouped by shape, one input shape).
struct OpAverage {
  std::string name, shapes;
  std::int64_t count = 0;
  double cpuTimeTotalUs = 0, selfCpuTimeTotalUs = 0;
  std::int64_t cpuMemoryBytes = 0, selfCpuMemoryBytes = 0;
  double cpuTimeAvgUs() const { return count ? cpuTimeTotalUs / static_cast<double>(count) : 0.0; }
};

class KeyAverages {
 public:
  std::vector<OpAverage> rows;  // in the order each name first ran
  bool withShapes = false, withMemory = false;
  // PyTorch's table: Name, Self CPU %, Self CPU, CPU total %, CPU total, CPU time avg, [CPU Mem, Self CPU
  // Mem,] # of Calls[, Input Shapes], then "Self CPU time total: ...". sort_by: "cpu_time_total",
  // "self_cpu_time_total", "cpu_time", "count", "cpu_memory_usage", "self_cpu_memory_usage"; anything
  // else throws ValueError listing these. row_limit <= 0: every row.
  std::string table(const std::string& sort_by = "cpu_time_total", int row_limit = 100) const;
  // The sum of every event's self time: the profiled wall time that ops account for.
  double selfCpuTimeTotalUs() const;
};

class Profile {
 public:
  explicit Profile(ProfileOptions options = {});  // starts recording; throws Error if another Profile is recording
  ~Profile();                                     // stops
  Profile(const Profile&) = delete;
  Profile& operator=(const Profile&) = delete;

  void stop();  // what __exit__ does: no events after it
  double wallUs() const;  // from construction to stop (or now, while recording)
  const std::vector<Event>& events() const;  // after stop(), in the order they ended
  KeyAverages key_averages(bool group_by_input_shape = false) const;
  // The Chrome trace event format (chrome://tracing, https://ui.perfetto.dev): one complete event
  // ("ph": "X") per op with ts/dur in microseconds, pid, tid, and args (input dims, memory). Throws
  // Error naming the path when it cannot be written; the file is written whole or not at all.
  void export_chrome_trace(const std::string& path) const;
  std::string chromeTraceJson() const;

 private:
  ProfileOptions options_;
  bool stopped_ = false;
  double startUs_ = 0, stopUs_ = 0;
  std::vector<Event> events_;
};

namespace detail {
extern std::atomic<bool> recording;
}
inline bool isProfiling() { return detail::recording.load(std::memory_order_acquire); }  // a plain load on x86

// An op's event: from construction to destruction. `name` must outlive the scope (a literal); for a
// built name, use the std::string overload (build it only when isProfiling()).
class RecordScope {
 public:
  explicit RecordScope(const char* name, std::initializer_list<const Tensor*> inputs = {}) {
    if (isProfiling()) begin(name, inputs);
  }
  RecordScope(const std::string& name, std::initializer_list<const Tensor*> inputs = {}) {
    if (isProfiling() && !name.empty()) begin(name.c_str(), inputs);
  }
  ~RecordScope() {
    if (active_) end();
  }
  RecordScope(const RecordScope&) = delete;
  RecordScope& operator=(const RecordScope&) = delete;

 private:
  void begin(const char* name, std::initializer_list<const Tensor*> inputs);
  void end();
  bool active_ = false;
};

}  // namespace gpulab::profiler
