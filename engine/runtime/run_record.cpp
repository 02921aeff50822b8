#include "engine/runtime/run_record.h"

#include <mutex>

#include "engine/core/errors.h"
#include "engine/memory/memory_events.h"
#include "engine/runtime/cuda_runtime.h"
#include "engine/runtime/stream.h"

namespace gpulab::run_record {

namespace detail {
std::atomic<bool> active{false};
}

namespace {

thread_local int pauseDepth = 0;
// The backward running on this thread: its index in the record, or -1 (none, or one begun before the
// recording, or past kMaxEntries).
thread_local std::int64_t currentBackward = -1;
thread_local std::uint64_t backwardGeneration = 0;

struct Collector {
  std::mutex mutex;
  bool active = false;
  std::uint64_t generation = 0;  // which recording: one more for each
  std::int64_t seq = 0;          // the next entry's place
  Record record;
};
Collector& collector() {
  static Collector* c = new Collector;  // never destroyed: ops may end while the process exits
  return *c;
}

template <typename T>
void append(std::vector<T>& to, T&& entry, Record& record) {
  if (to.size() >= kMaxEntries) {
    ++record.dropped;
    return;
  }
  to.push_back(std::move(entry));
}

bool noting() { return recording() && pauseDepth == 0; }

// One entry of the running recording, with the next place in its order: `make(seq)` builds it, under
// the collector's lock (nothing when no recording runs or this thread is paused).
template <typename T, typename Make>
void note(std::vector<T> Record::*list, Make make) {
  if (!noting()) return;
  Collector& c = collector();
  std::lock_guard lock(c.mutex);
  if (c.active) append(c.record.*list, make(c.seq++), c.record);
}

}  // namespace

struct RunRecording::Impl {
  // GPU allocations, as the allocators publish them (under their lock: the sink only appends).
  MemoryEventRecorder allocations{[](const MemoryEvent& e) {
    if (e.kind != MemoryEventKind::Allocate || !e.device.isCuda() || pauseDepth) return;
    Collector& c = collector();
    std::lock_guard lock(c.mutex);
    if (!c.active) return;
    append(c.record.allocations, Allocation{e.device.str(), e.size, e.allocated_bytes, e.reserved_bytes, e.cap_bytes}, c.record);
  }};
  bool stopped = false;
};

RunRecording::RunRecording() {
  Collector& c = collector();
  {
    std::lock_guard lock(c.mutex);
    if (c.active) throw Error("run record: another recording is running (one run is recorded at a time)");
    c.active = true;
    c.record = Record{};
    c.seq = 0;
    ++c.generation;
    // The switches as the run finds them: what is in force until a change says otherwise.
    for (const auto& [name, value] : {std::pair{"cudnn.benchmark", cuda::cudnnBenchmark()}, std::pair{"cudnn.deterministic", cuda::cudnnDeterministic()},
                                      std::pair{"cuda.matmul.allow_tf32", cuda::allowTf32()}}) {
      c.record.settings.push_back(Setting{name, value, c.seq++});
    }
  }
  impl_ = std::make_unique<Impl>();
  detail::active.store(true, std::memory_order_release);
}

RunRecording::~RunRecording() { stop(); }

Record RunRecording::stop() {
  if (impl_->stopped) return {};
  impl_->stopped = true;
  detail::active.store(false, std::memory_order_release);
  Collector& c = collector();
  std::lock_guard lock(c.mutex);
  c.active = false;
  Record out = std::move(c.record);
  c.record = Record{};
  return out;
}

void noteOp(const char* name, const std::optional<Device>& device, int depth, std::string shapes) {
  if (!noting()) return;
  const std::uintptr_t stream = device && device->isCuda() ? cuda::current_stream(*device).id() : 0;
  note(&Record::ops, [&](std::int64_t seq) { return Op{name, device ? device->str() : std::string("cpu"), depth, stream, seq, std::move(shapes)}; });
}

void noteCopy(Device from, Device to, std::size_t bytes, std::uintptr_t stream, bool nonBlocking, bool pinned) {
  note(&Record::copies, [&](std::int64_t seq) { return Copy{from.str(), to.str(), static_cast<std::int64_t>(bytes), stream, nonBlocking, pinned, seq}; });
}

void noteWait(const char* what, Device device, std::uintptr_t stream) {
  note(&Record::waits, [&](std::int64_t seq) { return Wait{what, device.str(), stream, seq}; });
}

void noteStreamWait(Device device, std::uintptr_t waiting, std::uintptr_t on) {
  note(&Record::streamWaits, [&](std::int64_t seq) { return StreamWait{device.str(), waiting, on, seq}; });
}

BackwardScope::BackwardScope() : outer_(currentBackward), outerGeneration_(backwardGeneration) {
  currentBackward = -1;
  if (!noting()) return;
  Collector& c = collector();
  std::lock_guard lock(c.mutex);
  if (!c.active || c.record.backwards.size() >= kMaxEntries) {
    if (c.active) ++c.record.dropped;
    return;
  }
  currentBackward = static_cast<std::int64_t>(c.record.backwards.size());
  backwardGeneration = c.generation;
  c.record.backwards.emplace_back();
}

void noteLeaf(GradBefore before) {
  if (currentBackward < 0) return;
  Collector& c = collector();
  std::lock_guard lock(c.mutex);
  // The recording this backward began in may have ended (and another begun) while it ran.
  if (!c.active || c.generation != backwardGeneration || currentBackward >= static_cast<std::int64_t>(c.record.backwards.size())) return;
  Backward& b = c.record.backwards[static_cast<std::size_t>(currentBackward)];
  ++b.leaves;
  switch (before) {
    case GradBefore::None: ++b.gradNone; break;
    case GradBefore::Zero: ++b.gradZero; break;
    case GradBefore::Nonzero: ++b.gradNonzero; break;
    case GradBefore::Unknown: ++b.gradUnknown; break;
  }
}

BackwardScope::~BackwardScope() {
  currentBackward = outer_;
  backwardGeneration = outerGeneration_;
}

void noteSetting(const char* name, bool value) {
  note(&Record::settings, [&](std::int64_t seq) { return Setting{name, value, seq}; });
}

Pause::Pause() { ++pauseDepth; }
Pause::~Pause() { --pauseDepth; }
bool paused() { return pauseDepth > 0; }

}  // namespace gpulab::run_record
