#pragma once
// Bytes owned by one tensor storage: taken from the device's caching allocator (or the pinned host
// allocator) and returned to it when the last view of the storage dies.
#include <cstddef>

#include "engine/core/device.h"

namespace gpulab {

class CachingAllocator;

class Storage {
 public:
  Storage(std::size_t bytes, Device device, bool pinned = false);
  ~Storage();
  Storage(const Storage&) = delete;
  Storage& operator=(const Storage&) = delete;

  void* data() const { return data_; }
  std::size_t bytes() const { return bytes_; }
  Device device() const { return device_; }
  bool pinned() const { return pinned_; }

 private:
  void* data_ = nullptr;
  std::size_t bytes_ = 0;
  Device device_;
  bool pinned_ = false;
  CachingAllocator* allocator_ = nullptr;
};

}  // namespace gpulab
