#pragma once
// The emulated GPU: a second device for machines without a usable GPU, so that what the lessons
// teach about devices happens for real there too. Its tensors live on their own device, cuda:N with
// N = the number of real usable GPUs (cuda:0 on a machine without one), with their own caching
// allocator, memory budget, statistics and memory events -- so the same-device rule, .to(device),
// out-of-memory errors, the per-process memory fraction, allocated vs reserved, empty_cache and the
// memory timeline are the engine's real behaviour, not a simulation of its messages. It is
// asynchronous like a GPU: ops queue their kernels on its streams, run by threads of their own
// (emulated_streams.h), and the host waits only where CUDA would. Its kernels are the CPU backend's and
// its memory is host memory: it is labelled wherever it shows ("emulated GPU -- runs on your CPU"), and
// no GPU timing may be drawn from it.
//
// The switch: GPULAB_EMULATED_GPU=1/on forces it on (appended after the real GPUs), =0/off forces it
// off; unset, it is on exactly when no real GPU is usable. Read once per process, like
// CUDA_VISIBLE_DEVICES. cuda::isAvailable() and cuda::deviceCount() keep counting real GPUs only
// (torch.cuda.is_available() must not lie), and defaultDevice() stays the CPU without a real GPU.
//
// It needs no CUDA: it works the same in a CPU-only build and in a CUDA build whose module
// (libgpulab-cuda.so) is missing or finds no GPU.
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "engine/core/device.h"

namespace gpulab {
class Backend;
class CachingAllocator;
struct DriverMemoryInfo;
}  // namespace gpulab

namespace gpulab::cuda {

// The words that mark the emulated GPU wherever it is shown.
inline constexpr const char* kEmulatedGpuPhrase = "emulated GPU \u2014 runs on your CPU";

// The emulated device when it is enabled in this process. (A lesson asks the device's runtime
// instead -- cuda::isEmulatedGpu, isRealGpu, busySeconds in device_runtime.h.)
std::optional<Device> emulatedDevice();
bool isEmulated(Device device);

// One line for a UI: "emulated GPU cuda:0 enabled (runs on your CPU; 4.00 GiB budget)" or why it is off.
std::string emulatedGpuStatus();

// The emulated GPU's total memory: 4 GiB (a small GPU's), but at most half of the CPU's default
// memory budget -- its memory is host memory, shared with the CPU device (see emulated_gpu.cpp) --
// or what GPULAB_EMULATED_GPU_MEMORY says ("16GiB", "512MiB", bytes; 64 MiB to 1 TiB): the total a
// GPU of that size reports, though no more of it can be filled than the host lends. Fixed at first
// use; 0 when the emulated GPU is off.
std::int64_t emulatedGpuBudget();
inline constexpr std::int64_t kMinEmulatedGpuMemory = std::int64_t{64} << 20;
inline constexpr std::int64_t kMaxEmulatedGpuMemory = std::int64_t{1} << 40;
// GPULAB_EMULATED_GPU_MEMORY's value in bytes (whole MiB), or nullopt for unset, malformed or out of range.
std::optional<std::int64_t> parseEmulatedGpuMemory(const char* value);

// The parts its runtime (emulated_runtime.cpp) is made of. Everything else asks the device's runtime
// (device_runtime.h: runtimeFor), never these.
// Its caching allocator; throws when it is off.
CachingAllocator& emulatedGpuAllocator();
// Its kernels: the CPU backend's, queued on the current stream (engine/runtime/emulated_backend.cpp).
Backend& emulatedGpuBackend();
// Page-locked host memory's stand-in when no real GPU is usable: host memory from which copies to the
// emulated GPU may be asynchronous (non_blocking), with PyTorch's rule that a pinned block is reused
// only after the copies that read or write it have run.
CachingAllocator& emulatedPinnedAllocator();
// What driver_memory_info() says for it: no driver to ask, and what nvidia-smi would count on a GPU.
DriverMemoryInfo emulatedDriverMemoryInfo();

// The switch, as pure functions so it is tested without a new process. "1", "on", "true", "yes"
// (any case) turn it on; "0", "off", "false", "no" off; unset, empty or anything else: automatic.
std::optional<bool> parseEmulatedGpuSwitch(const char* value);
// Whether to enable it given the switch and whether a real GPU is usable.
constexpr bool emulatedGpuWanted(std::optional<bool> forced, bool realGpuUsable) {
  return forced.value_or(!realGpuUsable);
}

}  // namespace gpulab::cuda
