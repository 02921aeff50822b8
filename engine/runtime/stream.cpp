// Streams and events (see stream.h): the device-independent part, and the emulated GPU's.
//
// On a real GPU a stream is a CUDA stream of the device's context (engine/kernels/cuda/cuda_context.h)
// and an event a CUDA event (cuda::DeviceEvent); on the emulated GPU both are its queues' own
// (emulated_streams.h).
#include "engine/runtime/stream.h"

#include <array>
#include <atomic>
#include <chrono>
#include <mutex>
#include <utility>

#include "engine/core/errors.h"
#include "engine/runtime/cuda_graph.h"
#include "engine/runtime/cuda_runtime.h"
#include "engine/runtime/emulated_gpu.h"
#include "engine/runtime/emulated_streams.h"
#include "engine/runtime/execution_context.h"

namespace gpulab::cuda {
namespace {

using Clock = std::chrono::steady_clock;

void checkStreamDevice(Device device, const std::string& what) {
  if (!device.isCuda()) {
    throw ValueError(what + ": streams belong to CUDA devices, and " + device.str() +
                     " is not one (work on the CPU is done when an op returns)");
  }
  if (device.index() < 0 || device.index() >= ExecutionContext::kMaxDevices) {
    throw ValueError(what + ": invalid device " + device.str());
  }
  checkDeviceUsable(device);
}

// This thread's current stream of a CUDA device whose index checkStreamDevice accepted.
std::uintptr_t& currentStreamSlot(Device device) {
  return executionContext().currentStream[static_cast<std::size_t>(device.index())];
}

}  // namespace

// The state one event's copies share. The stamp is taken by the stream's own thread when the stream
// reaches the event, which is what cudaEventElapsedTime measures on a GPU.
struct Event::Impl {
  bool timing = false;
  mutable std::mutex mutex;
  std::optional<Stream> stream;   // where it was last recorded
  emulated::Marker marker;        // that record's place in the emulated stream's queue
  std::uint64_t records = 0;      // how many times it was recorded
  std::uint64_t stampedRecord = 0;  // which record the stamp belongs to
  Clock::time_point stamp;
  std::unique_ptr<DeviceEvent> deviceEvent;  // a real GPU's CUDA event, made at the first record there
};

Stream Stream::create(Device device) {
  checkStreamDevice(device, "torch.cuda.Stream(" + device.str() + ")");
  if (isEmulated(device)) return Stream(device, emulated::nextPoolStream());
  // A real GPU's pool, handed out round-robin per device as PyTorch's.
  static std::array<std::atomic<std::uintptr_t>, ExecutionContext::kMaxDevices> next{};
  const std::uintptr_t n = next[static_cast<std::size_t>(device.index())].fetch_add(1, std::memory_order_relaxed);
  return Stream(device, 1 + n % kStreamPoolSize);
}

bool Stream::query() const {
  if (isEmulated(device_)) return emulated::streamIdle(id_);
  if (device_.isCuda()) return deviceStreamQuery(device_.index(), id_);
  return true;
}

void Stream::synchronize() const {
  checkNotCapturing(device_);
  if (isEmulated(device_)) return emulated::synchronizeStream(id_);
  if (device_.isCuda()) deviceStreamSynchronize(device_.index(), id_);
}

void Stream::wait_event(const Event& event) const {
  emulated::Marker marker;
  std::optional<Stream> on;
  DeviceEvent* deviceEvent = nullptr;
  {
    std::lock_guard lock(event.impl_->mutex);
    on = event.impl_->stream;
    marker = event.impl_->marker;
    deviceEvent = event.impl_->deviceEvent.get();  // once made, kept for the Impl's life
  }
  if (!on || *on == *this) return;  // never recorded: nothing to wait for; the same stream: in order already
  if (isEmulated(device_) && isEmulated(on->device())) {
    // The wait is queued: this stream's later work runs after it, and the host goes on.
    emulated::enqueue(id_, [marker] { emulated::waitForQuietly(marker); });
    return;
  }
  if (deviceEvent && on->device() == device_) {
    deviceStreamWaitEvent(device_.index(), id_, *deviceEvent);  // queued on the GPU, as cudaStreamWaitEvent is
    return;
  }
  event.synchronize();  // two different devices: the host waits
}

void Stream::wait_stream(const Stream& other) const {
  if (other == *this) return;
  Event e;
  e.record(other);
  wait_event(e);
}

std::string Stream::str() const {
  return "<torch.cuda.Stream device=" + device_.str() + (id_ == 0 ? std::string(" default") : " id=" + std::to_string(id_)) + ">";
}

Stream current_stream(Device device) {
  if (!device.isCuda()) return Stream(device);
  checkStreamDevice(device, "torch.cuda.current_stream(" + device.str() + ")");
  return Stream(device, currentStreamSlot(device));
}

Stream default_stream(Device device) {
  if (device.isCuda()) checkStreamDevice(device, "torch.cuda.default_stream(" + device.str() + ")");
  return Stream(device);
}

StreamGuard::StreamGuard(const Stream& stream) : device_(stream.device()), previous_(0) {
  checkStreamDevice(device_, "torch.cuda.stream(" + stream.str() + ")");
  previous_ = std::exchange(currentStreamSlot(device_), stream.id());
}

StreamGuard::~StreamGuard() { currentStreamSlot(device_) = previous_; }

Event::Event(bool enable_timing) : impl_(std::make_shared<Impl>()) { impl_->timing = enable_timing; }

void Event::record() { record(current_stream(Device(DeviceType::CUDA, executionContext().currentCudaDevice))); }

void Event::record(const Stream& stream) {
  if (!stream.device().isCuda()) throw ValueError("Event.record: " + stream.device().str() + " has no streams");
  std::unique_lock lock(impl_->mutex);
  if (impl_->stream && impl_->stream->device() != stream.device()) {
    throw ValueError("Event device " + impl_->stream->device().str() + " does not match recording stream's device " +
                     stream.device().str() + ".");
  }
  if (!isEmulated(stream.device())) {
    // A real GPU's stream: a CUDA event marks the place; the host goes on. Made and recorded before the
    // event says it was recorded, so a failure leaves it as it was.
    checkStreamDevice(stream.device(), "Event.record");
    if (!impl_->deviceEvent) impl_->deviceEvent = std::make_unique<DeviceEvent>(stream.device().index(), impl_->timing);
    impl_->deviceEvent->record(stream.id());
    ++impl_->records;
    impl_->stream = stream;
    return;
  }
  emulated::refuseEventWhileCapturing(stream.id());  // before the event changes: a failed record leaves it as it was
  const std::uint64_t number = ++impl_->records;
  impl_->stream = stream;
  // The stamping task is queued before the marker is taken, so the marker is at or after it. It
  // locks the event only when the stream reaches it -- and the lock is let go while it is queued:
  // a full queue makes enqueue wait for its worker, which may be stamping an earlier record of this
  // event (the same start/end events recorded every iteration, the host far ahead).
  lock.unlock();
  // Its time: when the stream got to it, but not before it was recorded -- on an idle stream that is
  // the record itself, not the moment the stream's sleeping thread woke up (which once made a blocking
  // copy's span on the profiler's device lane the thread's wake-up, most of the "device" time).
  std::weak_ptr<Impl> weak = impl_;
  const Clock::time_point issued = Clock::now();
  emulated::enqueue(stream.id(), [weak, number, issued] {
    if (auto impl = weak.lock()) {
      std::lock_guard inner(impl->mutex);
      if (impl->records == number) {
        impl->stamp = std::max(issued, emulated::previousTaskEnd());
        impl->stampedRecord = number;
      }
    }
  });
  lock.lock();
  if (impl_->records == number) impl_->marker = emulated::markNow(stream.id());  // a later record's marker wins
}

bool Event::query() const {
  std::lock_guard lock(impl_->mutex);
  if (!impl_->stream) return true;
  if (isEmulated(impl_->stream->device())) return emulated::reached(impl_->marker);
  return impl_->deviceEvent->query();
}

void Event::synchronize() const {
  emulated::Marker marker;
  DeviceEvent* deviceEvent = nullptr;
  {
    std::lock_guard lock(impl_->mutex);
    if (!impl_->stream) return;
    checkNotCapturing(impl_->stream->device());
    marker = impl_->marker;
    deviceEvent = impl_->deviceEvent.get();  // once made, kept for the Impl's life
  }
  // Waited for outside the lock, so that query() from another thread does not wait too.
  if (deviceEvent) return deviceEvent->synchronize();
  emulated::waitFor(marker);
}

bool Event::recorded() const {
  std::lock_guard lock(impl_->mutex);
  return impl_->stream.has_value();
}

std::optional<Stream> Event::stream() const {
  std::lock_guard lock(impl_->mutex);
  return impl_->stream;
}

double Event::elapsed_time(const Event& end) const {
  if (!impl_->timing || !end.impl_->timing) {
    throw Error("Both events must be created with argument 'enable_timing=True'.");
  }
  auto stampOf = [](const Impl& e, const char* which) {
    std::lock_guard lock(e.mutex);
    if (!e.stream) throw Error(std::string("Both events must be recorded before calculating elapsed time (the ") + which + " one was not).");
    if (e.stampedRecord != e.records) {
      throw Error(std::string("cudaErrorNotReady: device not ready -- the ") + which +
                  " event has not happened yet; call synchronize() on it first");
    }
    return e.stamp;
  };
  // Two CUDA events: the GPU's own clock. An event of the emulated GPU and one of a real GPU have no
  // clock in common. (A CUDA event, once made, stays for the Impl's life: the pointer may be used unlocked.)
  auto deviceEventOf = [](const Impl& e) {
    std::lock_guard lock(e.mutex);
    return std::pair{e.deviceEvent.get(), e.stream};
  };
  const auto [startReal, startStream] = deviceEventOf(*impl_);
  const auto [endReal, endStream] = deviceEventOf(*end.impl_);
  if (startReal && endReal) return startReal->elapsedMs(*endReal);
  if (startReal || endReal) {
    if (!startStream || !endStream) {
      throw Error(std::string("Both events must be recorded before calculating elapsed time (the ") + (startStream ? "end" : "start") +
                  " one was not).");
    }
    throw Error("elapsed_time: the events were recorded on different devices (" + startStream->device().str() + " and " +
                endStream->device().str() + ")");
  }
  const Clock::time_point start = stampOf(*impl_, "start"), stop = stampOf(*end.impl_, "end");
  return std::chrono::duration<double, std::milli>(stop - start).count();
}

}  // namespace gpulab::cuda

namespace gpulab {
std::uintptr_t currentStreamId(Device device) {
  if (!device.isCuda() || device.index() < 0 || device.index() >= ExecutionContext::kMaxDevices) return 0;
  return cuda::currentStreamSlot(device);
}
}  // namespace gpulab
