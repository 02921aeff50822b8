#pragma once
// What one run of a learner's code did, for grading an exercise from the run rather than from where
// it ended (lessons/README.md, "The run's record"): a wrong answer can end in the right state -- the
// product computed on the CPU and only its result moved to the GPU, gradients clipped instead of
// cleared, a memory cap set after the step it should have held. While a RunRecording lives, the engine
// notes
//   - every op (the profiler's names, "aten::matmul"), with the device it computed on and its depth
//     (0: called from outside any op; linear's matmul is 1),
//   - every copy between devices: from, to, bytes, the GPU side's stream, non_blocking, pinned,
//   - every time the host waited for a device: torch.cuda.synchronize(), a stream's or an event's
//     synchronize(), a copy to the host that returns only once the data is there (.item(),
//     .cpu(), .tolist(), printing a GPU tensor) and one to the GPU without non_blocking (it returns
//     once the copy has run), and every time a stream was made to wait for
//     another (wait_stream, wait_event) -- with the op's stream and every entry's order, a check can
//     say whether what read a side stream's copy was ordered after it,
//   - every backward (not autograd.grad, which leaves .grad alone): how many leaves it reached, and
//     how many of their .grad were None, all zeros, or held something when it began,
//   - the backends' switches (cudnn.benchmark, cudnn.deterministic, allow_tf32) as the run began and
//     every change to them, so a check knows what was in force when each op ran,
//   - every allocation on a GPU: its size, the device's allocated and reserved bytes after it, and the
//     cap in force (set_per_process_memory_fraction, or the emulated GPU's budget-as-cap: none = -1).
// Off, an op pays the one atomic load the profiler's RecordScope already made; the allocator publishes
// memory events only while someone listens. One recording at a time, process-wide (ops from any
// thread: a DataLoader's workers are the run's too). The record's own reads (whether a .grad is zero)
// are not noted.
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "engine/core/device.h"

namespace gpulab::run_record {

// Every entry has `seq`, its place among all the entries of the record (0, 1, 2, ...): what came
// before what, across kinds -- a copy on a side stream, the wait that orders it, the op that reads it.
inline constexpr std::uintptr_t kAllStreams = ~std::uintptr_t{0};

struct Op {
  std::string name;    // "aten::matmul", "autograd::engine::evaluate_function: MmBackward0", ...
  std::string device;  // "cpu" or "cuda:0"
  int depth = 0;
  std::uintptr_t stream = 0;  // on a GPU, the stream it was queued on (0: the default stream)
  std::int64_t seq = 0;
  std::string shapes;  // its inputs' shapes, as the profiler's record_shapes gives them: "[[64, 3, 32, 32], [16, 3, 3, 3], []]"
};
struct Copy {
  std::string from, to;    // "cpu", "cuda:0"
  std::int64_t bytes = 0;
  std::uintptr_t stream = 0;  // the GPU side's stream (0: the default stream; the CPU to the CPU: 0)
  bool nonBlocking = false;
  bool pinned = false;  // the host side is pinned memory
  std::int64_t seq = 0;
};
struct Wait {
  std::string what;    // "synchronize", "stream synchronize", "event synchronize", "copy to the host", "copy to the GPU"
  std::string device;  // the device waited for
  std::uintptr_t stream = kAllStreams;  // the stream waited for (kAllStreams: every stream of the device)
  std::int64_t seq = 0;
};
// A stream made to wait for another's work so far (Stream.wait_stream, wait_event): the device orders
// them, the host goes on.
struct StreamWait {
  std::string device;
  std::uintptr_t waiting = 0, on = 0;
  std::int64_t seq = 0;
};
struct Backward {
  std::int64_t leaves = 0;       // leaves whose .grad it reached (AccumulateGrad ran)
  std::int64_t gradNone = 0;     // ... whose .grad was None before
  std::int64_t gradZero = 0;     // ... all zeros
  std::int64_t gradNonzero = 0;  // ... held a nonzero value: this backward added to an earlier one's
  std::int64_t gradUnknown = 0;  // ... could not be read (the backward was being captured in a CUDA graph)
};
struct Allocation {
  std::string device;
  std::int64_t bytes = 0, allocatedAfter = 0, reservedAfter = 0;
  std::int64_t cap = -1;  // the cap on reserved memory in force then (-1: none)
};

// A switch of the backends as it stood when the recording began, and every change to it during the
// run: "cudnn.benchmark", "cudnn.deterministic", "cuda.matmul.allow_tf32".
struct Setting {
  std::string name;
  bool value = false;
  std::int64_t seq = 0;
};

struct Record {
  std::vector<Op> ops;
  std::vector<Copy> copies;
  std::vector<Wait> waits;
  std::vector<StreamWait> streamWaits;
  std::vector<Setting> settings;
  std::vector<Backward> backwards;
  std::vector<Allocation> allocations;  // GPU allocations only (the CPU's are not a GPU lesson's)
  // Entries left out past kMaxEntries of one kind (a runaway loop must not fill the memory): the
  // record says so, and a check that needs every entry can refuse to grade.
  std::int64_t dropped = 0;
};

inline constexpr std::size_t kMaxEntries = 1'000'000;

// Records from construction until stop() (or destruction). Throws Error when another recording runs.
class RunRecording {
 public:
  RunRecording();
  ~RunRecording();
  RunRecording(const RunRecording&) = delete;
  RunRecording& operator=(const RunRecording&) = delete;
  Record stop();  // what was noted; an empty record after the first call

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

namespace detail {
extern std::atomic<bool> active;
}
inline bool recording() { return detail::active.load(std::memory_order_acquire); }

// What the engine notes (each does nothing unless a recording runs and the calling thread is not
// inside a Pause).
void noteOp(const char* name, const std::optional<Device>& device, int depth, std::string shapes = {});
void noteCopy(Device from, Device to, std::size_t bytes, std::uintptr_t stream, bool nonBlocking, bool pinned);
void noteWait(const char* what, Device device, std::uintptr_t stream = kAllStreams);
void noteStreamWait(Device device, std::uintptr_t waiting, std::uintptr_t on);
void noteSetting(const char* name, bool value);
// A backward on this thread, around the graph's walk (one inside another -- a checkpoint's -- is a
// backward of its own, and the outer one goes on after it); each leaf's .grad as it found it.
class BackwardScope {
 public:
  BackwardScope();
  ~BackwardScope();
  BackwardScope(const BackwardScope&) = delete;
  BackwardScope& operator=(const BackwardScope&) = delete;

 private:
  std::int64_t outer_;
  std::uint64_t outerGeneration_;
};
enum class GradBefore { None, Zero, Nonzero, Unknown /* inside a CUDA graph's capture */ };
void noteLeaf(GradBefore before);

// The record's own work on this thread (reading a .grad to say whether it is zero) is not the run's.
class Pause {
 public:
  Pause();
  ~Pause();
  Pause(const Pause&) = delete;
  Pause& operator=(const Pause&) = delete;
};
bool paused();  // on this thread

}  // namespace gpulab::run_record
