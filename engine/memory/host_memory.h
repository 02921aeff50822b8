#pragma once
// The host's memory, and the one budget every allocator over it shares: the CPU device's
// (engine/runtime/device_memory.cpp) and the emulated GPU's (engine/runtime/emulated_gpu.cpp), whose memory is
// host memory too. Below both, so neither reaches into the other for it.
#include <cstddef>
#include <cstdint>

#include "engine/memory/raw_allocator.h"

namespace gpulab {

// The host's physical memory: what is free now and the total.
MemoryCapacity hostMemoryCapacity();

// Segments of host memory under the host budget -- the memory available when host memory is first
// allocated, less a safety margin (host_memory.cpp says why): aligned to 64 bytes, nullptr when the
// budget would be passed. Left: what the budget leaves, never more than is free now.
void* allocateHostSegment(std::size_t bytes);
void freeHostSegment(void* ptr, std::size_t bytes);
std::int64_t hostSegmentBytesLeft();
// The budget itself, fixed at first use (torch-style: cpu_default_memory_budget() in engine/runtime/device_memory.h).
std::int64_t hostBudgetBytes();

}  // namespace gpulab
