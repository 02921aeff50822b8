#include "engine/data/device_prefetcher.h"

#include <utility>

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
  if (failed_) std::rethrow_exception(std::exchange(failed_, nullptr));
  if (!next_) return std::nullopt;
  Copy taken = std::move(*next_);
  next_.reset();  // taken: a failure below leaves the prefetcher at the end, not holding a moved-from copy
  const cuda::Stream loop = cuda::current_stream(device_);
  loop.wait_event(taken.finished);  // the loop's work on the batch runs after its copy
  taken.batch.inputs.record_stream(loop);
  taken.batch.targets.record_stream(loop);
  last_ = std::move(taken);
  // The batch after it, from the loader (waiting for it), its copy queued before the loop queues this
  // batch's step: so that the two overlap. The pinned host batch left behind is kept by the allocator
  // until its copy has read it. An error here belongs to that next batch: this one is delivered.
  try {
    ++it_;
    queueNext();
  } catch (...) {
    failed_ = std::current_exception();
    it_ = DataLoader::Iterator();
  }
  return last_.batch;
}

}  // namespace gpulab::data
