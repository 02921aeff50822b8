// The CUDA door on the engine's side, in every build. A CUDA build has a module, libgpulab-cuda.so,
// that holds the CUDA backend and is the only part linked against the CUDA libraries; it is loaded
// here on first use. Without it (a CPU-only build), or where it cannot be loaded (no CUDA runtime,
// cuBLAS or cuDNN on this machine), every query answers why no GPU is usable and the engine runs on
// the CPU.
//
// The emulated GPU (emulated_gpu.h) is answered here, before the module is asked: it needs no CUDA,
// its kernels are the CPU backend's and its memory host memory, so a copy to or from it is a copy to
// or from the CPU.
#include <dlfcn.h>

#include <atomic>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <string>

#include "engine/kernels/backend.h"
#include "engine/core/errors.h"
#include "engine/memory/memory.h"
#include "engine/runtime/cuda_graph.h"
#include "engine/runtime/cuda_module.h"
#include "engine/runtime/cuda_runtime.h"
#include "engine/runtime/emulated_gpu.h"
#include "engine/runtime/emulated_streams.h"

namespace gpulab::cuda {

namespace {

struct Loaded {
  const ModuleApi* api = nullptr;
  std::string reason;  // why there is no module, when api is null
};

#if GPULAB_CUDA_MODULE
// Next to the library this function is in (libgpulab-engine.so, wherever it was installed or built).
std::string moduleBesideEngine() {
  Dl_info info{};
  if (dladdr(reinterpret_cast<void*>(&moduleBesideEngine), &info) && info.dli_fname) {
    std::string path = info.dli_fname;
    const auto slash = path.rfind('/');
    if (slash != std::string::npos) return path.substr(0, slash + 1) + kModuleFileName;
  }
  return kModuleFileName;  // the dynamic loader's search path
}

Loaded load() {
  Loaded l;
  const char* env = std::getenv("GPULAB_CUDA_MODULE");
  const std::string path = env && *env ? env : moduleBesideEngine();
  void* handle = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (!handle) {
    const char* err = dlerror();
    l.reason = "GPU Lab's CUDA module could not be loaded (" + std::string(err ? err : path.c_str()) +
               "). A GPU needs the NVIDIA driver and the CUDA 13 runtime, cuBLAS and cuDNN 9 libraries";
    return l;
  }
  using Entry = const ModuleApi* (*)(int, const char*);
  auto entry = reinterpret_cast<Entry>(dlsym(handle, "gpulab_cuda_module_api"));
  if (!entry) {
    l.reason = "GPU Lab's CUDA module " + path + " has no entry point (not a GPU Lab module)";
    return l;
  }
  l.api = entry(kModuleAbiVersion, kModuleBuildId);
  if (!l.api) l.reason = "GPU Lab's CUDA module " + path + " is from another build of GPU Lab (expected " + kModuleBuildId + ")";
  return l;  // the module stays loaded for the life of the process (it registers an at-exit release)
}
#else
Loaded load() {
  return {nullptr, "GPU Lab was built without CUDA support (the CUDA toolkit was not found or GPULAB_CUDA=OFF)"};
}
#endif

const Loaded& loaded() {
  static const Loaded l = load();
  return l;
}

[[noreturn]] void noCuda(const std::string& what) { throw Error(what + ": no usable GPU: " + loaded().reason); }

std::atomic<bool> allowTf32Flag{false};
// torch.backends.cudnn's defaults: benchmark off, deterministic off, allow_tf32 on.
std::atomic<bool> cudnnBenchmarkFlag{false};
std::atomic<bool> cudnnDeterministicFlag{false};
std::atomic<bool> cudnnAllowTf32Flag{true};

}  // namespace

Availability availability() {
  Availability a;
  if (const ModuleApi* m = loaded().api) {
    a = m->availability();
  } else {
    a.compiled = compiledWithCuda();
    const char* env = std::getenv("CUDA_VISIBLE_DEVICES");
    a.cuda_visible_devices = env ? env : "(not set)";
    a.reason = loaded().reason;
  }
  if (const auto e = emulatedDevice()) {
    a.emulated_index = e->index();
    a.emulated_budget = emulatedGpuBudget();
  }
  return a;
}
bool compiledWithCuda() { return GPULAB_CUDA_MODULE != 0; }
bool isAvailable() {
  const ModuleApi* m = loaded().api;
  return m && m->isAvailable();
}
int deviceCount() {
  const ModuleApi* m = loaded().api;
  return m ? m->deviceCount() : 0;
}
void synchronize(int device) {
  checkNotCapturing(Device(DeviceType::CUDA, device));
  if (isEmulated(Device(DeviceType::CUDA, device))) return emulated::synchronizeAll();
  if (const ModuleApi* m = loaded().api) m->synchronize(device);
}
void checkDeviceUsable(Device device) {
  if (!device.isCuda() || isEmulated(device)) return;
  try {
    if (const ModuleApi* m = loaded().api) return m->checkDeviceUsable(device);
    throw Error("Cannot use device " + device.str() + ": no usable GPU: " + loaded().reason);
  } catch (const CudaError&) {
    throw;  // a failing CUDA call is reported as itself
  } catch (const Error& e) {
    // "CUDA error: invalid device ordinal. Cannot use device cuda:1: no usable GPU: ... (the emulated GPU
    // is cuda:0)": past the emulated GPU, the last device there is, CUDA's words for an ordinal past the
    // last GPU come first, then why no real GPU is there.
    if (const auto emulated = emulatedDevice()) {
      const std::string what = e.what();
      const bool ordinal = device.index() > emulated->index() && !what.starts_with("CUDA error");
      throw Error((ordinal ? "CUDA error: invalid device ordinal. " : "") + what + " (the emulated GPU is " + emulated->str() + ")");
    }
    throw;
  }
}
CachingAllocator& deviceAllocator(int index) {
  if (isEmulated(Device(DeviceType::CUDA, index))) return emulatedGpuAllocator();
  if (const ModuleApi* m = loaded().api) return m->deviceAllocator(index);
  noCuda("Cannot allocate on cuda:" + std::to_string(index));
}
CachingAllocator& pinnedHostAllocator() {
  if (const ModuleApi* m = loaded().api; m && m->isAvailable()) return m->pinnedHostAllocator();
  if (emulatedDevice()) return emulatedPinnedAllocator();
  noCuda("Cannot allocate pinned memory");
}
DriverMemoryInfo driverMemoryInfo(int index) {
  if (isEmulated(Device(DeviceType::CUDA, index))) return emulatedDriverMemoryInfo();
  if (const ModuleApi* m = loaded().api) return m->driverMemoryInfo(index);
  DriverMemoryInfo info;
  info.reason = "not available: " + loaded().reason;
  return info;
}
DeviceTelemetry deviceTelemetry(int index) {
  if (isEmulated(Device(DeviceType::CUDA, index))) {
    DeviceTelemetry t;
    t.reason = emulatedDriverMemoryInfo().reason;
    return t;
  }
  if (const ModuleApi* m = loaded().api) return m->deviceTelemetry(index);
  DeviceTelemetry t;
  t.reason = "not available: " + loaded().reason;
  return t;
}
void rangePush(const char* name) {
  if (const ModuleApi* m = loaded().api) m->rangePush(name);
}
void rangePop() {
  if (const ModuleApi* m = loaded().api) m->rangePop();
}

void graphCaptureBegin(int device, std::uintptr_t stream) {
  if (const ModuleApi* m = loaded().api) return m->graphCaptureBegin(device, stream);
  noCuda("Cannot capture a CUDA graph on cuda:" + std::to_string(device));
}
void* graphCaptureEnd(int device, std::uintptr_t stream) {
  if (const ModuleApi* m = loaded().api) return m->graphCaptureEnd(device, stream);
  noCuda("Cannot capture a CUDA graph on cuda:" + std::to_string(device));
}
void graphLaunch(void* graph, int device, std::uintptr_t stream) {
  if (const ModuleApi* m = loaded().api) return m->graphLaunch(graph, device, stream);
  noCuda("Cannot replay a CUDA graph on cuda:" + std::to_string(device));
}
std::size_t graphNodeCount(void* graph) {
  if (const ModuleApi* m = loaded().api) return m->graphNodeCount(graph);
  return 0;
}
void graphDestroy(void* graph) {
  if (const ModuleApi* m = loaded().api) m->graphDestroy(graph);
}

void copyBytes(void* dst, Device dstDevice, const void* src, Device srcDevice, std::size_t bytes, bool nonBlocking,
               bool srcPinned, bool dstPinned) {
  // A copy between host memory and a GPU that captures a graph: the host would wait on it, or the graph
  // would read host memory that is gone by its replays. Copy into the graph's static inputs outside it.
  if (dstDevice.isCpu() != srcDevice.isCpu()) checkNotCapturing(dstDevice.isCpu() ? srcDevice : dstDevice);
  if (dstDevice.isCuda() && srcDevice.isCuda() && dstDevice != srcDevice) {  // between GPUs the host waits too
    checkNotCapturing(srcDevice);
    checkNotCapturing(dstDevice);
  }
  const bool realOnOneSide = (dstDevice.isCuda() && !isEmulated(dstDevice)) || (srcDevice.isCuda() && !isEmulated(srcDevice));
  if (!realOnOneSide && emulatedCopy(dst, dstDevice, src, srcDevice, bytes, nonBlocking, srcPinned, dstPinned)) return;
  // Between the emulated GPU and a real one: to the module the emulated side is pageable host memory,
  // once the emulated GPU's queued work is done with it.
  if (isEmulated(dstDevice)) {
    synchronize(dstDevice.index());
    dstDevice = kCPU;
  }
  if (isEmulated(srcDevice)) {
    synchronize(srcDevice.index());
    srcDevice = kCPU;
    srcPinned = false;
  }
  if (dstDevice.isCpu() && srcDevice.isCpu()) {
    if (bytes) std::memcpy(dst, src, bytes);  // an empty tensor may have no memory at all
    return;
  }
  if (const ModuleApi* m = loaded().api) return m->copyBytes(dst, dstDevice, src, srcDevice, bytes, nonBlocking, srcPinned, dstPinned);
  noCuda("Cannot copy to or from a CUDA device");
}

DeviceEvent::DeviceEvent(int device, bool timing) {
  const ModuleApi* m = loaded().api;
  if (!m || !m->isAvailable()) noCuda("Cannot create a CUDA event on cuda:" + std::to_string(device));
  handle_ = m->eventCreate(device, timing);
}
DeviceEvent::~DeviceEvent() {
  if (handle_) loaded().api->eventDestroy(handle_);
}
void DeviceEvent::record(std::uintptr_t stream) { loaded().api->eventRecord(handle_, stream); }
bool DeviceEvent::query() const { return loaded().api->eventQuery(handle_); }
void DeviceEvent::synchronize() const { loaded().api->eventSynchronize(handle_); }
double DeviceEvent::elapsedMs(const DeviceEvent& end) const { return loaded().api->eventElapsedMs(handle_, end.handle_); }
namespace {
// The module, for a real GPU's stream or event: a clear error where there is none.
const ModuleApi& moduleFor(int device, const char* what) {
  const ModuleApi* m = loaded().api;
  if (!m || !m->isAvailable()) noCuda(std::string(what) + " on cuda:" + std::to_string(device));
  return *m;
}
}  // namespace
bool deviceStreamQuery(int device, std::uintptr_t stream) { return moduleFor(device, "Cannot query a stream").streamQuery(device, stream); }
void deviceStreamSynchronize(int device, std::uintptr_t stream) {
  moduleFor(device, "Cannot synchronize a stream").streamSynchronize(device, stream);
}
void deviceStreamWaitEvent(int device, std::uintptr_t stream, const DeviceEvent& event) {
  moduleFor(device, "Cannot make a stream wait").streamWaitEvent(device, stream, event.handle());
}

// NCCL's door: the module answers, or -- with no module -- why there is none.
NcclInfo ncclInfo() {
  if (const ModuleApi* m = loaded().api) return m->ncclInfo();
  return {false, "no CUDA module: " + loaded().reason};
}
void ncclAllReduce(const std::vector<CollectiveBuffer>& buffers, std::size_t count, DType dtype, distributed::ReduceOp op) {
  const ModuleApi* m = loaded().api;
  if (!m) noCuda("all_reduce needs NCCL");
  m->allReduce(buffers, count, dtype, op);
}
void ncclBroadcast(const std::vector<CollectiveBuffer>& buffers, std::size_t count, DType dtype, int root) {
  const ModuleApi* m = loaded().api;
  if (!m) noCuda("broadcast needs NCCL");
  m->broadcast(buffers, count, dtype, root);
}

bool pinnedMemoryAvailable() { return isAvailable() || emulatedDevice().has_value(); }

void setAllowTf32(bool allow) { allowTf32Flag.store(allow); }
bool allowTf32() { return allowTf32Flag.load(std::memory_order_relaxed); }

void setCudnnBenchmark(bool enabled) { cudnnBenchmarkFlag.store(enabled); }
bool cudnnBenchmark() { return cudnnBenchmarkFlag.load(std::memory_order_relaxed); }
void setCudnnDeterministic(bool enabled) { cudnnDeterministicFlag.store(enabled); }
bool cudnnDeterministic() { return cudnnDeterministicFlag.load(std::memory_order_relaxed); }
void setCudnnAllowTf32(bool allow) { cudnnAllowTf32Flag.store(allow); }
bool cudnnAllowTf32() { return cudnnAllowTf32Flag.load(std::memory_order_relaxed); }

// Kept in the module, per device, next to the cuDNN handle; nothing to show or forget without one.
std::vector<ConvAlgorithmChoice> cudnnChoices(int device) {
  if (isEmulated(Device(DeviceType::CUDA, device))) return {};
  if (const ModuleApi* m = loaded().api) return m->cudnnChoices(device);
  return {};
}
void clearCudnnChoices(int device) {
  if (isEmulated(Device(DeviceType::CUDA, device))) return;
  if (const ModuleApi* m = loaded().api) m->clearCudnnChoices(device);
}

}  // namespace gpulab::cuda

namespace gpulab {
Device defaultDevice() { return cuda::isAvailable() ? Device(DeviceType::CUDA, 0) : kCPU; }
Backend& backendFor(Device device) {
  if (!device.isCuda()) return cpuBackend();
  if (cuda::isEmulated(device)) return cuda::emulatedGpuBackend();
  cuda::checkDeviceUsable(device);
  return cuda::loaded().api->backend(device.index());
}
}  // namespace gpulab
