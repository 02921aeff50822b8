#include "engine/memory/memory_events.h"

#include <algorithm>
#include <chrono>

namespace gpulab {
namespace {

thread_local MemoryCategory gCategory = MemoryCategory::Other;
std::atomic<std::int64_t> gStep{0};
std::atomic<int> gRecorderCount{0};

struct Registry {
  std::mutex mutex;
  std::vector<MemoryEventRecorder*> recorders;
};
Registry& registry() {
  static Registry r;
  return r;
}

const auto gClockStart = std::chrono::steady_clock::now();

}  // namespace

const char* memoryEventKindName(MemoryEventKind kind) {
  switch (kind) {
    case MemoryEventKind::Allocate: return "alloc";
    case MemoryEventKind::Free: return "free";
    case MemoryEventKind::SegmentReserve: return "segment_reserve";
    case MemoryEventKind::SegmentRelease: return "segment_release";
    case MemoryEventKind::EmptyCache: return "empty_cache";
    case MemoryEventKind::OutOfMemory: return "oom";
  }
  return "unknown";
}

const char* memoryCategoryName(MemoryCategory category) {
  switch (category) {
    case MemoryCategory::Other: return "other";
    case MemoryCategory::Parameter: return "parameter";
    case MemoryCategory::Gradient: return "gradient";
    case MemoryCategory::OptimizerState: return "optimizer_state";
    case MemoryCategory::Activation: return "activation";
    case MemoryCategory::InputBatch: return "input_batch";
    case MemoryCategory::Workspace: return "workspace";
  }
  return "other";
}

MemoryCategoryScope::MemoryCategoryScope(MemoryCategory category) : previous_(gCategory) { gCategory = category; }
MemoryCategoryScope::~MemoryCategoryScope() { gCategory = previous_; }
MemoryCategory MemoryCategoryScope::current() { return gCategory; }

void setMemoryStep(std::int64_t step) { gStep.store(step, std::memory_order_relaxed); }
std::int64_t memoryStep() { return gStep.load(std::memory_order_relaxed); }

double memoryClockSeconds() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - gClockStart).count();
}

MemoryEventRecorder::MemoryEventRecorder() {
  std::lock_guard lock(registry().mutex);
  registry().recorders.push_back(this);
  gRecorderCount.fetch_add(1);
}

MemoryEventRecorder::MemoryEventRecorder(Device device) : MemoryEventRecorder() {
  filtered_ = true;
  device_ = device;
}

MemoryEventRecorder::MemoryEventRecorder(std::function<void(const MemoryEvent&)> sink) : MemoryEventRecorder() {
  sink_ = std::move(sink);
}

MemoryEventRecorder::~MemoryEventRecorder() {
  std::lock_guard lock(registry().mutex);
  auto& r = registry().recorders;
  r.erase(std::remove(r.begin(), r.end(), this), r.end());
  gRecorderCount.fetch_sub(1);
}

void MemoryEventRecorder::push(const MemoryEvent& e) {
  if (filtered_ && !(e.device == device_)) return;
  if (sink_) return sink_(e);
  std::lock_guard lock(mutex_);
  events_.push_back(e);
}

std::vector<MemoryEvent> MemoryEventRecorder::drain() {
  std::lock_guard lock(mutex_);
  std::vector<MemoryEvent> out;
  out.swap(events_);
  return out;
}

std::size_t MemoryEventRecorder::pending() const {
  std::lock_guard lock(mutex_);
  return events_.size();
}

bool memoryEventsWanted() { return gRecorderCount.load(std::memory_order_relaxed) > 0; }

void publishMemoryEvent(const MemoryEvent& event) {
  std::lock_guard lock(registry().mutex);
  for (MemoryEventRecorder* r : registry().recorders) r->push(event);
}

}  // namespace gpulab
