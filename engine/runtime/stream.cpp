// Streams and events (see stream.h): what every GPU shares -- the current stream per thread, which
// device an event belongs to, PyTorch's rules and errors. The rest is the device's runtime's
// (device_runtime.h): a real GPU's streams are CUDA streams of its context and its events CUDA events;
// the emulated GPU's are its queues' own (emulated_streams.h).
#include "engine/runtime/stream.h"

#include <mutex>
#include <utility>

#include "engine/core/errors.h"
#include "engine/runtime/cuda_graph.h"
#include "engine/runtime/cuda_runtime.h"
#include "engine/runtime/device_runtime.h"
#include "engine/runtime/execution_context.h"
#include "engine/runtime/run_record.h"

namespace gpulab::cuda {
namespace {

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

// The state one event's copies share: where it was last recorded, and its device's own event, made by
// that device's runtime at the first record.
struct Event::Impl {
  bool timing = false;
  mutable std::mutex mutex;
  std::optional<Stream> stream;          // where it was last recorded
  std::unique_ptr<RuntimeEvent> onDevice;  // once made, kept for the Impl's life: may be used unlocked
};

Stream Stream::create(Device device) {
  checkStreamDevice(device, "torch.cuda.Stream(" + device.str() + ")");
  return Stream(device, runtimeFor(device).nextPoolStream());
}

bool Stream::query() const {
  if (!device_.isCuda()) return true;
  return runtimeFor(device_).streamQuery(id_);
}

void Stream::synchronize() const {
  if (!device_.isCuda()) return;
  checkNotCapturing(device_);
  run_record::noteWait("stream synchronize", device_, id_);
  runtimeFor(device_).streamSynchronize(id_);
}

void Stream::wait_event(const Event& event) const {
  std::optional<Stream> on;
  RuntimeEvent* onDevice = nullptr;
  {
    std::lock_guard lock(event.impl_->mutex);
    on = event.impl_->stream;
    onDevice = event.impl_->onDevice.get();
  }
  if (!on || *on == *this) return;  // never recorded: nothing to wait for; the same stream: in order already
  if (on->device() == device_) {
    run_record::noteStreamWait(device_, id_, on->id());
    return onDevice->block(id_);  // queued on the device, as cudaStreamWaitEvent is
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
  std::lock_guard lock(impl_->mutex);
  if (impl_->stream && impl_->stream->device() != stream.device()) {
    throw ValueError("Event device " + impl_->stream->device().str() + " does not match recording stream's device " +
                     stream.device().str() + ".");
  }
  checkStreamDevice(stream.device(), "Event.record");
  // Made and recorded before the event says it was recorded, so a failure leaves it as it was.
  if (!impl_->onDevice) impl_->onDevice = runtimeFor(stream.device()).createEvent(impl_->timing);
  impl_->onDevice->record(stream.id());
  impl_->stream = stream;
}

bool Event::query() const {
  std::lock_guard lock(impl_->mutex);
  return !impl_->stream || impl_->onDevice->query();
}

void Event::synchronize() const {
  RuntimeEvent* onDevice = nullptr;
  {
    std::lock_guard lock(impl_->mutex);
    if (!impl_->stream) return;
    checkNotCapturing(impl_->stream->device());
    onDevice = impl_->onDevice.get();
    run_record::noteWait("event synchronize", impl_->stream->device(), impl_->stream->id());
  }
  onDevice->synchronize();  // waited for outside the lock, so that query() from another thread does not wait too
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
  auto recordOf = [](const Impl& e) {
    std::lock_guard lock(e.mutex);
    return std::pair{e.onDevice.get(), e.stream};
  };
  const auto [start, startStream] = recordOf(*impl_);
  const auto [stop, endStream] = recordOf(*end.impl_);
  if (!startStream || !endStream) {
    throw Error(std::string("Both events must be recorded before calculating elapsed time (the ") + (startStream ? "end" : "start") +
                " one was not).");
  }
  // Two devices' events have no clock in common.
  if (startStream->device() != endStream->device()) {
    throw Error("elapsed_time: the events were recorded on different devices (" + startStream->device().str() + " and " +
                endStream->device().str() + ")");
  }
  return start->elapsedMs(*stop);
}

}  // namespace gpulab::cuda

namespace gpulab {
std::uintptr_t currentStreamId(Device device) {
  if (!device.isCuda() || device.index() < 0 || device.index() >= ExecutionContext::kMaxDevices) return 0;
  return cuda::currentStreamSlot(device);
}
}  // namespace gpulab
