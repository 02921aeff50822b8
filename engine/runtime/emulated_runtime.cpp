// The emulated GPU as a DeviceRuntime (device_runtime.h): its memory, copies, streams, events and
// graphs. The parts it is built from are in emulated_gpu.cpp (the switch, the budget, the allocators),
// emulated_streams.cpp (the queues and their threads) and emulated_backend.cpp (the kernels).
#include <algorithm>
#include <chrono>
#include <cstring>
#include <memory>
#include <mutex>
#include <utility>
#include <vector>

#include "engine/core/errors.h"
#include "engine/runtime/device_memory.h"
#include "engine/runtime/device_runtime.h"
#include "engine/runtime/emulated_gpu.h"
#include "engine/runtime/emulated_streams.h"
#include "engine/runtime/stream.h"

namespace gpulab::cuda {
namespace {

using Clock = std::chrono::steady_clock;

// An event is a marker in a stream's queue, and the time the stream got there. The stamp is taken by
// the stream's own thread when it reaches the event, which is what cudaEventElapsedTime measures on a GPU.
class EmulatedEvent final : public RuntimeEvent {
 public:
  explicit EmulatedEvent(bool timing) : timing_(timing) {}

  void record(std::uintptr_t stream) override {
    emulated::refuseEventWhileCapturing(stream);  // before the event changes: a failed record leaves it as it was
    std::uint64_t number = 0;
    {
      std::lock_guard lock(state_->mutex);
      number = ++state_->records;
    }
    // The stamping task is queued before the marker is taken, so the marker is at or after it. No lock
    // is held while it is queued: a full queue makes enqueue wait for its worker, which may be stamping
    // an earlier record of this event (the same start/end events recorded every iteration, the host
    // far ahead). Its time: when the stream got to it, but not before it was recorded -- on an idle
    // stream that is the record itself, not the moment the stream's sleeping thread woke up (which once
    // made a blocking copy's span on the profiler's device lane the thread's wake-up).
    if (timing_) {
      std::weak_ptr<State> weak = state_;
      const Clock::time_point issued = Clock::now();
      emulated::enqueue(stream, [weak, number, issued] {
        if (auto state = weak.lock()) {
          std::lock_guard inner(state->mutex);
          if (state->records == number) {
            state->stamp = std::max(issued, emulated::previousTaskEnd());
            state->stampedRecord = number;
          }
        }
      });
    }
    std::lock_guard lock(state_->mutex);
    if (state_->records == number) state_->marker = emulated::markNow(stream);  // a later record's marker wins
  }
  bool query() const override { return emulated::reached(marker()); }
  void synchronize() const override { emulated::waitFor(marker()); }
  // The wait is queued: the stream's later work runs after it, and the host goes on.
  void block(std::uintptr_t stream) const override {
    emulated::enqueue(stream, [m = marker()] { emulated::waitForQuietly(m); });
  }
  double elapsedMs(const RuntimeEvent& end) const override {
    const Clock::time_point start = stamp("start"), stop = static_cast<const EmulatedEvent&>(end).stamp("end");
    return std::chrono::duration<double, std::milli>(stop - start).count();
  }

 private:
  struct State {
    std::mutex mutex;
    emulated::Marker marker;          // the last record's place in its stream's queue
    std::uint64_t records = 0;        // how many times it was recorded
    std::uint64_t stampedRecord = 0;  // which record the stamp belongs to
    Clock::time_point stamp;
  };
  emulated::Marker marker() const {
    std::lock_guard lock(state_->mutex);
    return state_->marker;
  }
  Clock::time_point stamp(const char* which) const {
    std::lock_guard lock(state_->mutex);
    if (state_->stampedRecord != state_->records) {
      throw Error(std::string("cudaErrorNotReady: device not ready -- the ") + which +
                  " event has not happened yet; call synchronize() on it first");
    }
    return state_->stamp;
  }

  const bool timing_;
  // Shared with the stamping tasks still queued, which may outlive the event.
  const std::shared_ptr<State> state_ = std::make_shared<State>();
};

// A captured graph: the tasks its stream recorded, queued again as one task at each replay -- as one
// launch queues the whole graph on a GPU.
class EmulatedGraph final : public CapturedGraph {
 public:
  explicit EmulatedGraph(std::vector<emulated::Task> tasks)
      : tasks_(std::make_shared<const std::vector<emulated::Task>>(std::move(tasks))) {}
  void launch(std::uintptr_t stream) override {
    emulated::enqueue(stream, [tasks = tasks_] {
      for (const emulated::Task& t : *tasks) t();
    });
  }
  std::size_t nodeCount() const override { return tasks_->size(); }

 private:
  // Shared with the replays still queued.
  std::shared_ptr<const std::vector<emulated::Task>> tasks_;
};

// A host buffer a pageable non_blocking copy is staged through, as the driver stages one.
std::shared_ptr<char[]> stage(const void* src, std::size_t bytes) {
  std::shared_ptr<char[]> buffer(new char[bytes]);
  std::memcpy(buffer.get(), src, bytes);
  return buffer;
}

class EmulatedGpuRuntime final : public DeviceRuntime {
 public:
  explicit EmulatedGpuRuntime(Device device) : device_(device) {}
  Device device() const override { return device_; }
  std::string label() const override { return device_.str() + " (" + kEmulatedGpuPhrase + ")"; }
  bool isRealGpu() const override { return false; }
  std::optional<double> busySeconds() const override { return emulated::busySeconds(); }
  std::int64_t totalMemory() const override { return emulatedGpuBudget(); }
  std::string memoryNote() const override {
    return device_.str() + ": " + kEmulatedGpuPhrase + "; its capacity is GPU Lab's budget of " + formatBytes(emulatedGpuBudget()) +
           " of host memory";
  }

  CachingAllocator& allocator() override { return emulatedGpuAllocator(); }
  Backend& backend() override { return emulatedGpuBackend(); }
  CachingAllocator& pinnedAllocator() override { return emulatedPinnedAllocator(); }
  bool memoryIsHostMemory() const override { return true; }

  void synchronize() override { emulated::synchronizeAll(); }
  std::uintptr_t nextPoolStream() override { return emulated::nextPoolStream(); }
  bool streamQuery(std::uintptr_t stream) override { return emulated::streamIdle(stream); }
  void streamSynchronize(std::uintptr_t stream) override { emulated::synchronizeStream(stream); }
  std::unique_ptr<RuntimeEvent> createEvent(bool timing) override { return std::make_unique<EmulatedEvent>(timing); }

  // Ordered on the current stream of the emulated device; the host waits where CUDA would (see cuda::copyBytes).
  void copy(void* dst, Device dstDevice, const void* src, Device srcDevice, std::size_t bytes, bool nonBlocking,
            bool srcPinned, bool dstPinned) override {
    if (bytes == 0) return;  // an empty tensor may have no memory at all
    const bool toEmulated = dstDevice == device_, fromEmulated = srcDevice == device_;
    const std::uintptr_t stream = currentStreamId(device_);
    if (toEmulated && fromEmulated) {
      emulated::enqueue(stream, [=] { std::memcpy(dst, src, bytes); });
      return;
    }
    // Asynchronous only from (or into) pinned memory of our own -- the pinned memory there is when no
    // real GPU comes before this one: a real GPU's pinned blocks guard their reuse with its events,
    // which know nothing of the emulated streams.
    const bool ownPinned = &pinnedHostAllocator() == &emulatedPinnedAllocator();
    const bool pinned = ownPinned && (toEmulated ? srcPinned : dstPinned);
    if (nonBlocking && pinned) {
      // The host goes on at once; the copy reads (or fills) the pinned buffer when the stream gets to it.
      emulatedPinnedAllocator().recordAsyncCopy(toEmulated ? src : dst, stream);
      emulated::enqueue(stream, [=] { std::memcpy(dst, src, bytes); });
      return;
    }
    if (nonBlocking && toEmulated) {
      // Pageable memory cannot be read later: the driver stages it into a buffer of its own first.
      // The staging buffer goes when the copy has run, not when the host gets round to destroying the task.
      emulated::enqueue(stream, [=, staged = stage(src, bytes)]() mutable {
        std::memcpy(dst, staged.get(), bytes);
        staged.reset();
      });
      return;
    }
    // A blocking copy, and every copy into pageable host memory: the host waits for the stream.
    emulated::enqueue(stream, [=] { std::memcpy(dst, src, bytes); });
    emulated::synchronizeStream(stream);
  }

  void beginCapture(std::uintptr_t stream) override { emulated::beginCapture(stream); }
  std::unique_ptr<CapturedGraph> endCapture(std::uintptr_t stream) override {
    return std::make_unique<EmulatedGraph>(emulated::endCapture(stream));
  }

  DriverMemoryInfo driverMemoryInfo() override { return emulatedDriverMemoryInfo(); }
  DeviceTelemetry telemetry() override {
    DeviceTelemetry t;
    t.reason = emulatedDriverMemoryInfo().reason;
    return t;
  }

 private:
  const Device device_;
};

}  // namespace

DeviceRuntime* emulatedGpuRuntime() {
  // Never destroyed, like its allocator.
  static EmulatedGpuRuntime* runtime = [] {
    const std::optional<Device> d = emulatedDevice();
    return d ? new EmulatedGpuRuntime(*d) : nullptr;
  }();
  return runtime;
}

}  // namespace gpulab::cuda
