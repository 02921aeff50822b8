#pragma once
// The engine's door to the CUDA runtime. This header compiles in every build; in a CPU-only build
// the functions report "built without CUDA" (and anything that needs a GPU throws), so the rest of
// the engine never needs an #ifdef.
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "engine/core/device.h"

namespace gpulab {
class CachingAllocator;
struct DriverMemoryInfo;
struct DeviceTelemetry;
}

namespace gpulab::cuda {

struct DeviceProperties {
  int index = 0;         // the engine's cuda:index
  int cuda_ordinal = 0;  // the CUDA runtime's ordinal of the same GPU (differs when older GPUs are skipped)
  std::string name;
  int major = 0, minor = 0;  // compute capability
  int multiprocessor_count = 0;
  std::size_t total_memory = 0;
  std::size_t free_memory = 0;
};

// What discovery found. When no GPU is usable, `reason` says exactly why.
struct Availability {
  bool compiled = false;
  bool usable = false;
  std::string reason;
  int driver_version = 0;   // e.g. 13000 for CUDA 13.0; 0 when no driver is installed
  int runtime_version = 0;
  int cublas_version = 0;
  int cudnn_version = 0;
  std::string cuda_visible_devices;  // the variable as set, or "(not set)"
  std::vector<DeviceProperties> devices;  // the real, usable GPUs only
  // The emulated GPU (engine/runtime/emulated_gpu.h), when enabled: its index (cuda:N after the real
  // GPUs) and its memory budget. A UI says "no usable GPU: <reason>; emulated GPU cuda:0 enabled".
  std::optional<int> emulated_index;
  std::int64_t emulated_budget = 0;
};

// "13.0" for a CUDA version number such as 13000; "none" for 0 (no driver).
inline std::string versionString(int v) {
  return v ? std::to_string(v / 1000) + "." + std::to_string((v % 1000) / 10) : std::string("none");
}

// Discovery runs once per process (CUDA reads CUDA_VISIBLE_DEVICES only when it initialises), except
// free memory, which is read anew on every call.
Availability availability();
// The same without the emulated GPU's fields: what the CUDA module (or its absence) says.
Availability moduleAvailability();
bool compiledWithCuda();
bool isAvailable();   // torch.cuda.is_available(): real GPUs only, never the emulated one
int deviceCount();    // torch.cuda.device_count(): real usable GPUs only
// torch.cuda.synchronize(device): waits until every stream of the device has run all its work, and
// reports an error a kernel found (a real GPU's deferred error, or an emulated kernel's exception).
void synchronize(int device = 0);

// torch.backends.cuda.matmul.allow_tf32: float32 matrix products may use TF32 tensor cores (10-bit
// mantissa inputs, fp32 accumulation). Off by default, as in PyTorch since 1.12.
void setAllowTf32(bool allow);
bool allowTf32();

// torch.backends.cudnn: benchmark (time cuDNN's candidate algorithms once per convolution shape and
// keep the fastest; off: cuDNN's heuristics), deterministic (only algorithms that give bit-identical
// results run to run) and allow_tf32 (convolutions in float32 may use TF32 tensor cores -- on by
// default in PyTorch, unlike matrix products).
void setCudnnBenchmark(bool enabled);
bool cudnnBenchmark();
void setCudnnDeterministic(bool enabled);
bool cudnnDeterministic();
void setCudnnAllowTf32(bool allow);
bool cudnnAllowTf32();
// torch.use_deterministic_algorithms: every op takes a deterministic algorithm on a real GPU too --
// the convolutions as with cudnn.deterministic (which this does not change, as in PyTorch), index_add
// without atomics. Every op GPU Lab has has one, so none raises for want of it.
void setDeterministicAlgorithms(bool enabled);
bool deterministicAlgorithms();

// What cuDNN chose for each convolution pass and shape, for a lesson to show: every candidate
// algorithm with its time (benchmark mode; -1 when only the heuristics ranked it), its workspace and
// its status, and which one ran. Kept per device in the order the shapes were first seen.
struct ConvAlgorithmTrial {
  std::string algorithm;      // cuDNN's name, e.g. "CUDNN_CONVOLUTION_FWD_ALGO_IMPLICIT_PRECOMP_GEMM"
  double milliseconds = -1;   // measured by cudnnFind (benchmark mode); -1: not timed
  std::size_t workspace = 0;  // bytes
  bool deterministic = false;
  bool chosen = false;
  std::string status;         // "ok", or why it could not run (e.g. not enough memory for its workspace)
};
struct ConvAlgorithmChoice {
  std::string pass;   // "forward", "backward data", "backward filter"
  std::string shape;  // "input [64, 32, 14, 14], weight [64, 32, 3, 3], stride 1, padding 1, float32"
  std::string how;    // "heuristics", "benchmark" (timed now), or "cache" is never listed: a cached shape adds no entry
  double searchMilliseconds = 0;  // the time the choice itself took (benchmark mode's first-step cost)
  std::vector<ConvAlgorithmTrial> trials;
};
std::vector<ConvAlgorithmChoice> cudnnChoices(int device);
void clearCudnnChoices(int device);  // also forgets the cached choices, so the next step chooses again

// Throws a clear Error when `device` is a CUDA device that cannot be used (the emulated GPU can).
void checkDeviceUsable(Device device);

// "cpu", "cuda:0 (NVIDIA H100 80GB HBM3)", "cuda:0 (emulated GPU — runs on your CPU)"; a CUDA device
// that is neither real nor emulated: "cuda:3 (not available)".
std::string deviceLabel(Device device);

struct DeviceChoice {
  Device device;
  std::string label;  // deviceLabel(device)
  bool emulated = false;
};
// What a device picker offers: the CPU first, then the real GPUs, then the emulated GPU when enabled.
std::vector<DeviceChoice> availableDevices();

CachingAllocator& deviceAllocator(int index);
CachingAllocator& pinnedHostAllocator();
// The driver's view of a GPU's memory through NVML, loaded at run time (see device_memory.h).
DriverMemoryInfo driverMemoryInfo(int index);
// nvidia-smi's numbers for a GPU (see device_memory.h).
DeviceTelemetry deviceTelemetry(int index);

// Copies `bytes` between any two devices, ordered on the current stream of the GPU side (see the
// stream-safety rule in engine/memory/caching_allocator.h). Host-to-device copies with `nonBlocking`
// return at once from pinned memory, once the source has been staged from pageable memory; without it,
// when the copy is done (and so the work queued before it); device-to-host copies return when the data
// is there -- except a non_blocking copy into pinned memory, which returns at once (read it after
// synchronize() or an event, as in PyTorch). A pinned block an asynchronous copy uses is reused only
// once the copy has run (CachingAllocator::recordAsyncCopy).
void copyBytes(void* dst, Device dstDevice, const void* src, Device srcDevice, std::size_t bytes,
               bool nonBlocking, bool srcPinned, bool dstPinned = false);

// NVTX ranges for the profiler's ops, so that Nsight Systems shows them on the host's timeline: pushed
// and popped on the calling thread; nothing without a CUDA module. Never throw.
void rangePush(const char* name);
void rangePop();

// Whether pin_memory() can work here: a real GPU is usable, or the emulated GPU is on (its copies from
// pinned memory may be asynchronous too).
bool pinnedMemoryAvailable();

}  // namespace gpulab::cuda

namespace gpulab {
// The device a lesson should use: cuda:0 when a real GPU is usable, else the CPU (never the emulated GPU).
Device defaultDevice();
}  // namespace gpulab
