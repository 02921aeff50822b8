#pragma once
// Where a device's memory really comes from: cudaMalloc, cudaHostAlloc, aligned_alloc -- or, in tests,
// a bounded fake arena. The caching allocator runs over this interface, so its pool logic is the same
// code on every device and can be tested on a machine without a GPU.
#include <cstddef>
#include <cstdint>
#include <string>

namespace gpulab {

struct MemoryCapacity {
  std::int64_t free = 0;   // bytes the system could still give
  std::int64_t total = 0;  // the device's capacity (the budget, for an emulated device)
};

class RawAllocator {
 public:
  virtual ~RawAllocator() = default;
  // nullptr when the system has no memory left (never throws for that); any other failure (a CUDA
  // error that is not out-of-memory) throws, so it is reported as itself and not as an OOM.
  virtual void* rawAllocate(std::size_t bytes) = 0;
  // Throws when the system refuses; the caching allocator then keeps the block cached and counted.
  virtual void rawFree(void* ptr, std::size_t bytes) = 0;
  virtual MemoryCapacity capacity() const = 0;
  // "CUDA" / "CPU" for the messages ("CUDA out of memory"), and "GPU 0" / "the CPU" for the device.
  virtual std::string kindName() const = 0;
  virtual std::string deviceName() const = 0;
  // A sentence appended to the out-of-memory message ("" for none): what this device's capacity is.
  virtual std::string outOfMemoryNote() const { return {}; }
  // Streams, for record_stream (a device without streams keeps the defaults): wait for all work of
  // the device; mark the current end of a stream's queue (0: nothing to wait for), ask whether the
  // stream has passed a mark, and release one.
  virtual void synchronize() {}
  virtual std::uintptr_t recordMarker(std::uintptr_t /*stream*/) { return 0; }
  virtual bool markerReached(std::uintptr_t /*marker*/) { return true; }
  virtual void releaseMarker(std::uintptr_t /*marker*/) {}
};

}  // namespace gpulab
