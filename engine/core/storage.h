#pragma once
// Bytes owned by one tensor storage: taken from the device's caching allocator (or the pinned host
// allocator), as the runtime chooses it (engine/core/allocator.h), and returned to it when the last
// view of the storage dies.
#include <cstddef>
#include <memory>

#include "engine/core/device.h"

namespace gpulab {

class Allocator;

class Storage {
 public:
  Storage(std::size_t bytes, Device device, bool pinned = false);
  ~Storage();
  // A second Storage over `owner`'s bytes that frees nothing: what a kernel queued on the emulated
  // GPU's stream holds, so that the host may free the tensor at once, as it may on CUDA (the caching
  // allocator's stream rule keeps the memory safe; see engine/memory/caching_allocator.h).
  // It says it lives on `as`: the emulated GPU's kernels are the CPU backend's, and whatever scratch
  // memory they take must come from the CPU's allocator, not from the device's, whose blocks belong to
  // the host's order of work (the host may already have freed and handed out a block again whose last
  // kernels are still queued).
  static std::shared_ptr<Storage> borrow(const Storage& owner, Device as);
  // A Storage over host memory GPU Lab did not allocate (torch.from_numpy: a numpy array's buffer),
  // shared, not copied: `owner` keeps that memory alive and is released when the last view of the
  // storage dies.
  static std::shared_ptr<Storage> external(void* data, std::size_t bytes, std::shared_ptr<void> owner);
  Storage(const Storage&) = delete;
  Storage& operator=(const Storage&) = delete;

  void* data() const { return data_; }
  std::size_t bytes() const { return bytes_; }
  Device device() const { return device_; }
  bool pinned() const { return pinned_; }

 private:
  Storage() = default;
  void* data_ = nullptr;
  std::size_t bytes_ = 0;
  Device device_;
  bool pinned_ = false;
  Allocator* allocator_ = nullptr;
  std::shared_ptr<void> external_;  // what keeps external() memory alive
};

}  // namespace gpulab
