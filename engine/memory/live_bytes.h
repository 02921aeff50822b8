#pragma once
// The live bytes of one device's allocator by category (what the memory is for: parameters,
// gradients, activations, ...), followed from the memory event stream from the moment the object is
// made: every allocation adds its block to its category, every free takes it away (a free carries its
// block's category). What the lessons' code cells draw as "memory by category" (python/gpulab/kernel.py).
//
// Blocks allocated before the object was made are not followed: their frees would take a category
// below zero, which reads as 0.
#include <array>
#include <cstdint>

#include "engine/memory/memory_events.h"

namespace gpulab {

class LiveBytesByCategory {
 public:
  using Bytes = std::array<std::int64_t, kMemoryCategoryCount>;  // indexed by MemoryCategory

  explicit LiveBytesByCategory(Device device);
  // Takes in the events since the last call (from any thread); the live bytes of each category now.
  Bytes update();

 private:
  MemoryEventRecorder recorder_;
  Bytes live_{};
};

}  // namespace gpulab
