#pragma once
// A DataLoader's batches copied to a CUDA device on a stream of their own, one batch ahead of the
// loop: the pattern of NVIDIA Apex's data_prefetcher and torchtnt's CudaDataPrefetcher (PyTorch's
// DataLoader itself stops at pinned host memory; the copy to the device is the loop's). While the
// loop's step computes on the current stream, the next batch's copy runs on the copy stream -- a GPU
// copies with its copy engines beside its compute units -- and the loop's stream waits for that copy
// only when the loop takes the batch.
//
//   data::DataLoader loader(dataset, {.batch_size = 128, .num_workers = 4, .pin_memory = true});
//   data::DevicePrefetcher batches(loader, Device(DeviceType::CUDA, 0));
//   while (std::optional<data::Batch> b = batches.next()) { ... b->inputs is on cuda:0 ... }
//
// The copies are non_blocking, so they overlap only from pinned batches (pin_memory=true): from
// pageable memory a copy makes the host wait as it would in the loop. Each batch's memory is handed
// to the loop's stream with record_stream, so the caching allocator does not reuse it for the copy
// stream before the loop's work on it is done.
//
// The price of the look-ahead, as in Apex's: next() takes the batch after this one from the loader
// before it returns this one, so the loop waits for the loader before it queues this step (a plain
// loop waits after). Whether the overlap is worth it is measured, not assumed (lessons/12).
//
// An error of the loader (a worker's, the data set's) or of a copy is raised by the next() after the
// one that returned the last good batch; the prefetcher is then at the end.
#include <exception>
#include <optional>

#include "engine/data/dataloader.h"
#include "engine/runtime/stream.h"

namespace gpulab::data {

class DevicePrefetcher {
 public:
  // Starts the loader's next epoch and queues the first batch's copy. `device`: a CUDA device (a GPU,
  // or the emulated one); another device throws ValueError, a CUDA device this machine cannot use the
  // error every op on it raises (cuda::checkDeviceUsable).
  DevicePrefetcher(DataLoader& loader, Device device);
  // One copy stream, one position in the loader's epoch: not copyable.
  DevicePrefetcher(const DevicePrefetcher&) = delete;
  DevicePrefetcher& operator=(const DevicePrefetcher&) = delete;

  // The next batch, on the device and ordered before anything the loop queues next on its current
  // stream; the batch after it is queued for copying at once. nullopt when the epoch is over. Throws
  // what the loader or a copy threw, once, in place of the batch it could not deliver.
  std::optional<Batch> next();

  // The stream the copies run on, and the copy of the batch next() last returned, as two timing
  // events on that stream (its start and end; elapsed_time gives the copy's time on the device).
  const cuda::Stream& copyStream() const { return copy_; }
  const cuda::Event& copyStarted() const { return last_.started; }
  const cuda::Event& copyFinished() const { return last_.finished; }

 private:
  struct Copy {
    Batch batch;
    cuda::Event started{true}, finished{true};
  };
  void queueNext();

  Device device_;
  cuda::Stream copy_;
  DataLoader::Iterator it_;
  std::optional<Copy> next_;  // queued on the copy stream, not yet handed to the loop
  Copy last_;                 // the one the loop has
  std::exception_ptr failed_;  // the loader's or a copy's error, raised by the next next()
};

}  // namespace gpulab::data
