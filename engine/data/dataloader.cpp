#include "engine/data/dataloader.h"

#include <condition_variable>
#include <exception>
#include <map>
#include <mutex>
#include <thread>

#include "engine/kernels/functors.h"
#include "engine/core/errors.h"
#include "engine/memory/memory_events.h"
#include "engine/runtime/cuda_runtime.h"

namespace gpulab::data {

// One pass over the data set. With workers, worker w builds batches w, w+W, w+2W, ... and parks them
// in `ready_`; the consumer takes them strictly in order. Workers stay at most 2*W batches ahead so
// prefetching cannot eat unbounded memory.
class DataLoader::EpochRun {
 public:
  EpochRun(const DataLoader& loader, std::vector<std::int64_t> order)
      : dataset_(loader.dataset_), batchSize_(loader.options_.batch_size), pin_(loader.pin_),
        order_(std::move(order)), batches_(loader.size()) {
    const int workers = loader.options_.num_workers;
    prefetch_ = 2 * static_cast<std::int64_t>(std::max(workers, 1));
    for (int w = 0; w < workers; ++w) threads_.emplace_back([this, w, workers] { workerLoop(w, workers); });
  }

  ~EpochRun() {
    {
      std::lock_guard lock(mutex_);
      stopping_ = true;
    }
    cv_.notify_all();
    for (auto& t : threads_) t.join();
  }

  // The next batch, or false at the end of the epoch. Rethrows a worker's exception.
  bool next(Batch& out) {
    if (next_ >= batches_) return false;
    if (threads_.empty()) {
      out = build(next_++);
      return true;
    }
    std::unique_lock lock(mutex_);
    cv_.wait(lock, [&] { return ready_.count(next_) > 0; });
    auto node = ready_.extract(next_);
    ++next_;
    lock.unlock();
    cv_.notify_all();
    if (node.mapped().error) std::rethrow_exception(node.mapped().error);
    out = std::move(node.mapped().batch);
    return true;
  }

 private:
  struct Slot {
    Batch batch;
    std::exception_ptr error;
  };

  Batch build(std::int64_t b) const {
    const std::int64_t begin = b * batchSize_;
    const std::int64_t end = std::min<std::int64_t>(begin + batchSize_, static_cast<std::int64_t>(order_.size()));
    std::vector<std::int64_t> indices(order_.begin() + begin, order_.begin() + end);
    Shape in = dataset_->inputShape(), tg = dataset_->targetShape();
    in.insert(in.begin(), end - begin);
    tg.insert(tg.begin(), end - begin);
    MemoryCategoryScope tag(MemoryCategory::InputBatch);
    Batch batch{Tensor::empty(in, kFloat32, kCPU, pin_), Tensor::empty(tg, dataset_->targetDType(), kCPU, pin_), b};
    dataset_->gather(indices, batch.inputs, batch.targets);
    return batch;
  }

  void workerLoop(int w, int workers) {
    for (std::int64_t b = w; b < batches_; b += workers) {
      {
        std::unique_lock lock(mutex_);
        cv_.wait(lock, [&] { return stopping_ || b - next_ < prefetch_; });
        if (stopping_) return;
      }
      Slot slot;
      try {
        slot.batch = build(b);
      } catch (...) {
        slot.error = std::current_exception();
      }
      {
        std::lock_guard lock(mutex_);
        ready_.emplace(b, std::move(slot));
      }
      cv_.notify_all();
    }
  }

  std::shared_ptr<const Dataset> dataset_;
  std::int64_t batchSize_;
  bool pin_;
  std::vector<std::int64_t> order_;
  std::int64_t batches_;
  std::int64_t prefetch_ = 2;
  std::int64_t next_ = 0;
  std::vector<std::thread> threads_;
  std::mutex mutex_;
  std::condition_variable cv_;
  std::map<std::int64_t, Slot> ready_;
  bool stopping_ = false;
};

DataLoader::DataLoader(std::shared_ptr<const Dataset> dataset, DataLoaderOptions options)
    : dataset_(std::move(dataset)), options_(options) {
  if (!dataset_) throw ValueError("DataLoader needs a dataset");
  if (options_.batch_size <= 0) {
    throw ValueError("batch_size should be a positive integer value, but got batch_size=" + std::to_string(options_.batch_size));
  }
  if (options_.num_workers < 0 || options_.num_workers > 64) {
    throw ValueError("num_workers option should be between 0 and 64, but got num_workers=" + std::to_string(options_.num_workers));
  }
  pin_ = options_.pin_memory && cuda::pinnedMemoryAvailable();
}

DataLoader::~DataLoader() = default;

std::int64_t DataLoader::size() const {
  const std::int64_t n = dataset_->size();
  return options_.drop_last ? n / options_.batch_size : (n + options_.batch_size - 1) / options_.batch_size;
}

std::vector<std::int64_t> DataLoader::order(std::int64_t epoch) const {
  const std::int64_t n = dataset_->size();
  std::vector<std::int64_t> idx(static_cast<std::size_t>(n));
  for (std::int64_t i = 0; i < n; ++i) idx[static_cast<std::size_t>(i)] = i;
  if (!options_.shuffle) return idx;
  // Fisher-Yates driven by the counter-based generator: the order depends only on (seed, epoch).
  const std::uint64_t stream = fn::mix64(options_.seed ^ (0xA5A5A5A5ull + static_cast<std::uint64_t>(epoch)));
  for (std::int64_t i = n - 1; i > 0; --i) {
    const auto j = static_cast<std::int64_t>(fn::randomBits(stream, static_cast<std::uint64_t>(i)) % static_cast<std::uint64_t>(i + 1));
    std::swap(idx[static_cast<std::size_t>(i)], idx[static_cast<std::size_t>(j)]);
  }
  return idx;
}

DataLoader::Iterator DataLoader::begin() {
  auto run = std::make_shared<EpochRun>(*this, order(epoch_++));
  return Iterator(std::move(run));
}

DataLoader::Iterator::Iterator(std::shared_ptr<EpochRun> run) : run_(std::move(run)) { ++*this; }

DataLoader::Iterator& DataLoader::Iterator::operator++() {
  if (run_ && !run_->next(current_)) {
    run_.reset();
    current_ = Batch{};
  }
  return *this;
}

}  // namespace gpulab::data
