#pragma once
// Where a tensor's bytes come from. The allocators themselves (engine/memory's caching allocator) and
// the choice of one for a device and its current stream (engine/runtime) sit in layers above core, which
// cannot include them; so core declares what it needs of them here, and the runtime installs the
// function that chooses (engine/runtime/device_memory.cpp) when the engine loads -- as PyTorch's c10
// keeps an allocator per device type that its CUDA library registers.
#include <cstddef>
#include <cstdint>

#include "engine/core/device.h"

namespace gpulab {

class Allocator {
 public:
  virtual ~Allocator() = default;
  // Never returns nullptr: throws OutOfMemoryError. `stream`: the device's stream the block is for.
  virtual void* allocate(std::size_t bytes, std::uintptr_t stream) = 0;
  virtual void free(void* ptr) = 0;
};

// The allocator a new tensor on `device` takes its bytes from (the pinned host allocator when
// `pinned`), and the stream they are handed out for.
struct TensorAllocation {
  Allocator* allocator = nullptr;
  std::uintptr_t stream = 0;
};
// Throws the device's clear error (an unusable GPU, pinned memory without a GPU) rather than return.
using TensorAllocationSource = TensorAllocation (*)(Device device, bool pinned);

void setTensorAllocationSource(TensorAllocationSource source);
// What the installed source says; throws Error when no runtime installed one.
TensorAllocation tensorAllocationFor(Device device, bool pinned);

}  // namespace gpulab
