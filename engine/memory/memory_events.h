#pragma once
// The memory event stream: every allocation, free, segment reserve/release, empty_cache and OOM, with
// size, address, stream, category, time and training step. Publishing costs one relaxed atomic load
// while nobody listens; a MemoryEventRecorder collects events (from any thread) until drained, so the
// GUI can read them from its own thread while a run goes on.
#include <atomic>
#include <cstdint>
#include <functional>
#include <mutex>
#include <string>
#include <vector>

#include "engine/core/device.h"

namespace gpulab {

enum class MemoryEventKind { Allocate, Free, SegmentReserve, SegmentRelease, EmptyCache, OutOfMemory };

// What a block of memory is for, tagged by the engine where it knows (MemoryCategoryScope).
enum class MemoryCategory { Other, Parameter, Gradient, OptimizerState, Activation, InputBatch, Workspace };
constexpr int kMemoryCategoryCount = 7;

const char* memoryEventKindName(MemoryEventKind kind);  // "alloc", "free", "segment_reserve", ...
const char* memoryCategoryName(MemoryCategory category);  // "parameter", "activation", ...

struct MemoryEvent {
  MemoryEventKind kind = MemoryEventKind::Allocate;
  Device device;
  std::int64_t size = 0;          // bytes (rounded size for blocks, segment size for segments)
  std::uintptr_t address = 0;     // an OutOfMemory event: the bytes still free under the cap (see caching_allocator.h)
  std::uintptr_t stream = 0;
  MemoryCategory category = MemoryCategory::Other;
  double time_s = 0;              // seconds since the process started
  std::int64_t step = 0;          // the training step set by the running lab (0 outside training)
  std::int64_t allocated_bytes = 0;  // the device's totals right after the event
  std::int64_t reserved_bytes = 0;
  std::int64_t cap_bytes = -1;       // the cap on reserved memory in force (a memory fraction, a budget); -1: none
};

// Marks the allocations this thread makes while the scope lives (innermost scope wins).
class MemoryCategoryScope {
 public:
  explicit MemoryCategoryScope(MemoryCategory category);
  ~MemoryCategoryScope();
  MemoryCategoryScope(const MemoryCategoryScope&) = delete;
  MemoryCategoryScope& operator=(const MemoryCategoryScope&) = delete;
  static MemoryCategory current();

 private:
  MemoryCategory previous_;
};

// The training step stamped on events (process-wide: DataLoader workers allocate for the same step).
void setMemoryStep(std::int64_t step);
std::int64_t memoryStep();

// Collects the events of one device (or of all devices) from the moment it is made.
class MemoryEventRecorder {
 public:
  MemoryEventRecorder();
  explicit MemoryEventRecorder(Device device);
  // Hands each event to `sink` as it is published (on the publishing thread, under the allocator's
  // lock: the sink must not allocate device memory) instead of keeping it for drain().
  explicit MemoryEventRecorder(std::function<void(const MemoryEvent&)> sink);
  ~MemoryEventRecorder();
  MemoryEventRecorder(const MemoryEventRecorder&) = delete;
  MemoryEventRecorder& operator=(const MemoryEventRecorder&) = delete;

  std::vector<MemoryEvent> drain();  // the events since the last drain, oldest first
  std::size_t pending() const;

 private:
  friend void publishMemoryEvent(const MemoryEvent&);
  void push(const MemoryEvent& e);
  bool filtered_ = false;
  Device device_;
  std::function<void(const MemoryEvent&)> sink_;
  mutable std::mutex mutex_;
  std::vector<MemoryEvent> events_;
};

// True while at least one recorder exists; the allocator checks this before building an event.
bool memoryEventsWanted();
void publishMemoryEvent(const MemoryEvent& event);
double memoryClockSeconds();

}  // namespace gpulab
