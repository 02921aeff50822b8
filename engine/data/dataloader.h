#pragma once
// torch.utils.data.DataLoader: batches of a Dataset, optionally shuffled (seeded: the same seed gives
// the same order), with background worker threads that prefetch batches and page-locked ("pinned")
// batch buffers so that .to(device, non_blocking=true) is a truly asynchronous copy.
//
//   DataLoader loader(dataset, {.batch_size = 64, .shuffle = true, .num_workers = 2, .pin_memory = true});
//   for (const Batch& batch : loader) { ... batch.inputs.to(device, true) ... }
//
// Each range-for (each call to begin()) is one epoch; the shuffle order changes from epoch to epoch
// and is a pure function of (seed, epoch number).
#include <memory>

#include "engine/data/dataset.h"

namespace gpulab::data {

struct DataLoaderOptions {
  std::int64_t batch_size = 1;
  bool shuffle = false;
  bool drop_last = false;
  int num_workers = 0;     // 0: batches are built on the calling thread
  bool pin_memory = false; // ignored (pinsMemory() false) when no GPU is usable, as PyTorch warns
  std::uint64_t seed = 0;
};

struct Batch {
  Tensor inputs;   // (B, inputShape...)
  Tensor targets;  // (B, targetShape...)
  std::int64_t index = 0;
};

class DataLoader {
 public:
  DataLoader(std::shared_ptr<const Dataset> dataset, DataLoaderOptions options);
  ~DataLoader();

  std::int64_t size() const;  // batches per epoch, len(loader)
  const DataLoaderOptions& options() const { return options_; }
  bool pinsMemory() const { return pin_; }
  const Dataset& dataset() const { return *dataset_; }

  class EpochRun;
  class Iterator {
   public:
    Iterator() = default;
    explicit Iterator(std::shared_ptr<EpochRun> run);
    const Batch& operator*() const { return current_; }
    const Batch* operator->() const { return &current_; }
    Iterator& operator++();
    bool operator==(const Iterator& other) const { return done() == other.done(); }

   private:
    bool done() const { return !run_; }
    std::shared_ptr<EpochRun> run_;
    Batch current_;
  };
  Iterator begin();  // starts the next epoch
  Iterator end() { return Iterator(); }

  // The example order of epoch `epoch` (exposed for tests and for the lessons' explanations).
  std::vector<std::int64_t> order(std::int64_t epoch) const;

 private:
  std::shared_ptr<const Dataset> dataset_;
  DataLoaderOptions options_;
  bool pin_ = false;
  std::int64_t epoch_ = 0;
};

}  // namespace gpulab::data
