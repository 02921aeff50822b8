#include "engine/data/device_prefetcher.h"

#include "engine/core/errors.h"
#include "engine/core/tensor.h"
#include "engine/runtime/cuda_runtime.h"

namespace gpulab::data {

namespace {
Device checkedDevice(Device device) {
  if (!device.isCuda()) {
    throw ValueError("DevicePrefetcher copies batches to a CUDA device on a stream of its own; got " + device.str() +
                     " (on the CPU, use the DataLoader's batches as they are)");
  }
  cuda::checkDeviceUsable(device);
  return device;
}
}  // namespace

DevicePrefetcher::DevicePrefetcher(DataLoader& loader, Device device)
    : device_(checkedDevice(device)), copy_(cuda::Stream::create(device_)), it_(loader.begin()) {
  queueNext();
}

void DevicePrefetcher::queueNext() {
  if (it_ == DataLoader::Iterator()) {
    next_.reset();
    return;
  }
  Copy c;
  {
    const cuda::StreamGuard onCopyStream(copy_);
    c.started.record(copy_);
    c.batch.inputs = it_->inputs.to(device_, /*non_blocking=*/true);
    c.batch.targets = it_->targets.to(device_, /*non_blocking=*/true);
    c.batch.index = it_->index;
    c.finished.record(copy_);
  }
  next_ = std::move(c);
}

std::optional<Batch> DevicePrefetcher::next() {
  if (!next_) return std::nullopt;
  last_ = std::move(*next_);
  const cuda::Stream loop = cuda::current_stream(device_);
  loop.wait_event(last_.finished);  // the loop's work on the batch runs after its copy
  last_.batch.inputs.record_stream(loop);
  last_.batch.targets.record_stream(loop);
  // The batch after it, from the loader (waiting for it, as the loop would), its copy queued before the
  // loop queues this batch's step: so that the two overlap. The pinned host batch left behind is kept
  // by the allocator until its copy has read it.
  ++it_;
  queueNext();
  return last_.batch;
}

}  // namespace gpulab::data
