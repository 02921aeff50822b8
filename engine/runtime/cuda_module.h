#pragma once
// The boundary between the engine and its CUDA module (libgpulab-cuda.so). The engine never links the
// CUDA libraries: engine/runtime/cuda_runtime_loader.cpp dlopen()s the module on first use and calls
// it through this table, so a CUDA build of GPU Lab starts -- and runs on the CPU, saying why -- on a
// machine without the CUDA runtime, cuBLAS, cuDNN or a driver. The module is built from the same tree
// with the same compiler as the engine, so C++ types cross the boundary; the build id guards that: it is
// derived from every engine header the two sides compile with and from the compilers (Note [CUDA module
// build id], cmake/cuda_module_build_id.cmake), and both include it from one generated header,
// gpulab/cuda_module_build_id.h (kModuleBuildId, "<version>/abi<kModuleAbiVersion>/<hash>").
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "engine/core/dtype.h"
#include "engine/runtime/cuda_runtime.h"

namespace gpulab {
class Backend;
struct DriverMemoryInfo;
struct DeviceTelemetry;
}

namespace gpulab::distributed {
enum class ReduceOp;  // engine/distributed/distributed.h
}

namespace gpulab::cuda {

// 2: Availability gained the emulated GPU's fields, RawAllocator outOfMemoryNote().
// 3: deviceTelemetry.
// 4: cudnnChoices, clearCudnnChoices (the cuDNN flags live on the engine's side).
// 5: CUDA events and streams (eventCreate ... eventElapsedMs, streamQuery ... streamWaitEvent).
// 6: copyBytes takes dstPinned (a non_blocking copy into pinned host memory no longer waits).
// 7: NCCL collectives (ncclInfo, allReduce, broadcast) for engine/distributed.
// 8: NVTX ranges (rangePush, rangePop) for the profiler.
// 9: CUDA graphs (graphCaptureBegin ... graphDestroy).
// The table's history, for people; the build id (above), derived from the headers, is what guards it.
constexpr int kModuleAbiVersion = 9;

// Whether the module can run NCCL collectives, and the one line that says so or why not.
struct NcclInfo {
  bool available = false;
  std::string status;  // "NCCL 2.28.9 over 2 GPUs", "GPU Lab was built without NCCL", ...
};
// One GPU's part of a collective: its buffer (device memory, `count` elements of the collective's
// dtype) and the engine's cuda:N it lives on. A collective's buffers are on distinct real GPUs; their
// order is the NCCL rank order (root is an index into it).
struct CollectiveBuffer {
  void* data = nullptr;
  int device = 0;
};

struct ModuleApi {
  int abi_version;
  Availability (*availability)();
  bool (*isAvailable)();
  int (*deviceCount)();
  void (*synchronize)(int device);
  void (*checkDeviceUsable)(Device device);
  CachingAllocator& (*deviceAllocator)(int index);
  CachingAllocator& (*pinnedHostAllocator)();
  DriverMemoryInfo (*driverMemoryInfo)(int index);
  DeviceTelemetry (*deviceTelemetry)(int index);
  void (*copyBytes)(void* dst, Device dstDevice, const void* src, Device srcDevice, std::size_t bytes, bool nonBlocking,
                    bool srcPinned, bool dstPinned);
  Backend& (*backend)(int device);
  std::vector<ConvAlgorithmChoice> (*cudnnChoices)(int device);
  void (*clearCudnnChoices)(int device);
  // torch.cuda.Event and Stream on a real GPU: a cudaEvent_t, and streams by GPU Lab's id (0: the
  // default stream; the engine's ModuleEvent in cuda_runtime_loader.cpp). eventDestroy never throws.
  void* (*eventCreate)(int device, bool timing);
  void (*eventDestroy)(void* event);
  void (*eventRecord)(void* event, std::uintptr_t stream);
  bool (*eventQuery)(void* event);
  void (*eventSynchronize)(void* event);
  double (*eventElapsedMs)(void* start, void* end);
  bool (*streamQuery)(int device, std::uintptr_t stream);
  void (*streamSynchronize)(int device, std::uintptr_t stream);
  void (*streamWaitEvent)(int device, std::uintptr_t stream, void* event);
  // NCCL (engine/runtime/nccl_collectives.cpp); the engine has checked the buffers (distinct real
  // GPUs, same count and dtype). Queued on each device's current stream; failures throw Error.
  NcclInfo (*ncclInfo)();
  void (*allReduce)(const std::vector<CollectiveBuffer>& buffers, std::size_t count, DType dtype, distributed::ReduceOp op);
  void (*broadcast)(const std::vector<CollectiveBuffer>& buffers, std::size_t count, DType dtype, int root);
  // NVTX ranges on the calling thread (nvtxRangePushA/Pop): what Nsight Systems shows of each op. Without
  // a tool attached they cost next to nothing; they never throw.
  void (*rangePush)(const char* name);
  void (*rangePop)();
  // CUDA graphs (engine/runtime/cuda_graph.h): stream capture in the global mode on the device's stream
  // with GPU Lab's id `stream`; its end instantiates the graph and returns it (free it with
  // graphDestroy), or throws CudaError when the capture was invalidated; graphLaunch queues one replay.
  void (*graphCaptureBegin)(int device, std::uintptr_t stream);
  void* (*graphCaptureEnd)(int device, std::uintptr_t stream);
  void (*graphLaunch)(void* graph, int device, std::uintptr_t stream);
  std::size_t (*graphNodeCount)(void* graph);
  void (*graphDestroy)(void* graph);  // never throws
};

// The engine's side of the NCCL entries (cuda_runtime_loader.cpp), for engine/distributed: without a
// module, ncclInfo() says why and the collectives throw.
NcclInfo ncclInfo();
void ncclAllReduce(const std::vector<CollectiveBuffer>& buffers, std::size_t count, DType dtype, distributed::ReduceOp op);
void ncclBroadcast(const std::vector<CollectiveBuffer>& buffers, std::size_t count, DType dtype, int root);

// The file name the loader looks for next to the engine library (or at $GPULAB_CUDA_MODULE).
inline constexpr const char* kModuleFileName = "libgpulab-cuda.so";

// What loading the module at `path` gave: its table, or none and why (not there, not a GPU Lab module,
// from another build: "... it was built as <its id>, this engine expects <ours> ..."). The engine takes
// this step once, on first use, with the module beside its library or at $GPULAB_CUDA_MODULE; here it is
// on its own, in every build -- a CPU-only engine never takes it for itself -- so that the refusal of a
// module from another build is tested on any machine (tests/test_device_runtime.cpp). A module that was
// opened stays loaded for the life of the process, refused or not.
struct LoadedModule {
  const ModuleApi* api = nullptr;
  std::string reason;  // why there is no table, when api is null
};
LoadedModule loadModule(const std::string& path);

}  // namespace gpulab::cuda

// The module's entry points, plain C so that the engine can ask a module of any build which build it
// is: its kModuleBuildId, and its table. The loader asks for the id first and for the table only when
// the id is its own. The table's entry still refuses (null) an abiVersion or buildId not its own: an
// engine from before the id's entry point asks for the table directly.
extern "C" const char* gpulab_cuda_module_build_id();
extern "C" const gpulab::cuda::ModuleApi* gpulab_cuda_module_api(int abiVersion, const char* buildId);
