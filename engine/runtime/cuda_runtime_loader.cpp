// The CUDA door on the engine's side, in every build. A CUDA build has a module, libgpulab-cuda.so,
// that holds the CUDA backend and is the only part linked against the CUDA libraries; it is loaded
// here on first use. Without it (a CPU-only build), or where it cannot be loaded (no CUDA runtime,
// cuBLAS or cuDNN on this machine), every query answers why no GPU is usable and the engine runs on
// the CPU.
//
// Each usable GPU of the module is a DeviceRuntime (device_runtime.h) here: CudaModuleRuntime passes
// the engine's questions to the module's table. The emulated GPU is the other implementation
// (emulated_runtime.cpp); nothing here knows of it.
#include <dlfcn.h>

#include <atomic>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>

#include "engine/core/errors.h"
#include "engine/runtime/device_memory.h"
#include "engine/runtime/cuda_module.h"
#include "engine/runtime/cuda_runtime.h"
#include "engine/runtime/run_record.h"
#include "engine/runtime/device_runtime.h"
#include "engine/runtime/stream.h"
// Generated from the headers the loader and the module compile with (Note [CUDA module build id],
// cmake/cuda_module_build_id.cmake): kModuleBuildId, the id the module must have been built with.
#include "gpulab/cuda_module_build_id.h"

namespace gpulab::cuda {

LoadedModule loadModule(const std::string& path) {
  LoadedModule l;
  void* handle = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (!handle) {
    const char* err = dlerror();
    l.reason = "GPU Lab's CUDA module could not be loaded (" + std::string(err ? err : path.c_str()) +
               "). A GPU needs the NVIDIA driver and the CUDA 13 runtime, cuBLAS and cuDNN 9 libraries";
    return l;
  }
  using Entry = const ModuleApi* (*)(int, const char*);
  using BuildId = const char* (*)();
  auto entry = reinterpret_cast<Entry>(dlsym(handle, "gpulab_cuda_module_api"));
  if (!entry) {
    l.reason = "GPU Lab's CUDA module " + path + " has no entry point (not a GPU Lab module)";
    return l;
  }
  // Its build first, through plain C: nothing that depends on C++ layouts is called in a module from
  // another build. A module without the build id's entry point is from before it, so from another build.
  auto buildIdOf = reinterpret_cast<BuildId>(dlsym(handle, "gpulab_cuda_module_build_id"));
  const char* theirs = buildIdOf ? buildIdOf() : nullptr;
  if (theirs && std::strcmp(theirs, kModuleBuildId) == 0) l.api = entry(kModuleAbiVersion, kModuleBuildId);
  if (!l.api) {
    l.reason = "GPU Lab's CUDA module " + path + " is from another build of GPU Lab (" +
               (theirs ? "it was built as " + std::string(theirs) : std::string("it does not say which build it is")) +
               ", this engine expects " + kModuleBuildId + "): reinstall GPU Lab or rebuild both from one tree";
  }
  return l;  // the module stays loaded for the life of the process, refused or not (ours registers an at-exit release)
}

namespace {

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

LoadedModule load() {
  const char* env = std::getenv("GPULAB_CUDA_MODULE");
  return loadModule(env && *env ? env : moduleBesideEngine());
}
#else
LoadedModule load() {
  return {nullptr, "GPU Lab was built without CUDA support (the CUDA toolkit was not found or GPULAB_CUDA=OFF)"};
}
#endif

const LoadedModule& loaded() {
  static const LoadedModule l = load();
  return l;
}

[[noreturn]] void noCuda(const std::string& what) { throw Error(what + ": no usable GPU: " + loaded().reason); }

std::atomic<bool> allowTf32Flag{false};
// torch.backends.cudnn's defaults: benchmark off, deterministic off, allow_tf32 on.
std::atomic<bool> cudnnBenchmarkFlag{false};
std::atomic<bool> cudnnDeterministicFlag{false};
std::atomic<bool> deterministicAlgorithmsFlag{false};
std::atomic<bool> cudnnAllowTf32Flag{true};

}  // namespace

Availability moduleAvailability() {
  if (const ModuleApi* m = loaded().api) return m->availability();
  Availability a;
  a.compiled = compiledWithCuda();
  const char* env = std::getenv("CUDA_VISIBLE_DEVICES");
  a.cuda_visible_devices = env ? env : "(not set)";
  a.reason = loaded().reason;
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
void refuseModuleDevice(Device device) {
  if (const ModuleApi* m = loaded().api) m->checkDeviceUsable(device);
  throw Error("Cannot use device " + device.str() + ": no usable GPU: " + loaded().reason);
}
void rangePush(const char* name) {
  if (const ModuleApi* m = loaded().api) m->rangePush(name);
}
void rangePop() {
  if (const ModuleApi* m = loaded().api) m->rangePop();
}

namespace {

// A real GPU's CUDA event (cudaEvent_t), made when a torch.cuda.Event is first recorded on the GPU.
class ModuleEvent final : public RuntimeEvent {
 public:
  ModuleEvent(const ModuleApi& m, int device, bool timing) : m_(m), device_(device), handle_(m.eventCreate(device, timing)) {}
  ~ModuleEvent() override { m_.eventDestroy(handle_); }
  void record(std::uintptr_t stream) override { m_.eventRecord(handle_, stream); }
  bool query() const override { return m_.eventQuery(handle_); }
  void synchronize() const override { m_.eventSynchronize(handle_); }
  void block(std::uintptr_t stream) const override { m_.streamWaitEvent(device_, stream, handle_); }
  double elapsedMs(const RuntimeEvent& end) const override {
    return m_.eventElapsedMs(handle_, static_cast<const ModuleEvent&>(end).handle_);
  }

 private:
  const ModuleApi& m_;
  const int device_;
  void* const handle_;
};

// An instantiated CUDA graph (cudaGraphExec_t), destroyed with its object.
class ModuleGraph final : public CapturedGraph {
 public:
  ModuleGraph(const ModuleApi& m, int device, void* handle) : m_(m), device_(device), handle_(handle) {}
  ~ModuleGraph() override { m_.graphDestroy(handle_); }
  void launch(std::uintptr_t stream) override { m_.graphLaunch(handle_, device_, stream); }
  std::size_t nodeCount() const override { return m_.graphNodeCount(handle_); }

 private:
  const ModuleApi& m_;
  const int device_;
  void* const handle_;
};

// One usable GPU of the module.
class CudaModuleRuntime final : public DeviceRuntime {
 public:
  CudaModuleRuntime(const ModuleApi& m, DeviceProperties properties) : m_(m), properties_(std::move(properties)) {}
  Device device() const override { return Device(DeviceType::CUDA, properties_.index); }
  std::string label() const override { return device().str() + " (" + properties_.name + ")"; }
  bool isRealGpu() const override { return true; }
  std::int64_t totalMemory() const override { return static_cast<std::int64_t>(properties_.total_memory); }

  CachingAllocator& allocator() override { return m_.deviceAllocator(properties_.index); }
  Backend& backend() override { return m_.backend(properties_.index); }
  CachingAllocator& pinnedAllocator() override { return m_.pinnedHostAllocator(); }
  bool memoryIsHostMemory() const override { return false; }

  void synchronize() override { m_.synchronize(properties_.index); }
  // The pool, handed out round-robin as PyTorch's.
  std::uintptr_t nextPoolStream() override { return 1 + nextStream_.fetch_add(1, std::memory_order_relaxed) % kStreamPoolSize; }
  bool streamQuery(std::uintptr_t stream) override { return m_.streamQuery(properties_.index, stream); }
  void streamSynchronize(std::uintptr_t stream) override { m_.streamSynchronize(properties_.index, stream); }
  std::unique_ptr<RuntimeEvent> createEvent(bool timing) override {
    return std::make_unique<ModuleEvent>(m_, properties_.index, timing);
  }

  void copy(void* dst, Device dstDevice, const void* src, Device srcDevice, std::size_t bytes, bool nonBlocking,
            bool srcPinned, bool dstPinned) override {
    m_.copyBytes(dst, dstDevice, src, srcDevice, bytes, nonBlocking, srcPinned, dstPinned);
  }

  void beginCapture(std::uintptr_t stream) override { m_.graphCaptureBegin(properties_.index, stream); }
  std::unique_ptr<CapturedGraph> endCapture(std::uintptr_t stream) override {
    return std::make_unique<ModuleGraph>(m_, properties_.index, m_.graphCaptureEnd(properties_.index, stream));
  }

  DriverMemoryInfo driverMemoryInfo() override { return m_.driverMemoryInfo(properties_.index); }
  DeviceTelemetry telemetry() override { return m_.deviceTelemetry(properties_.index); }
  std::vector<ConvAlgorithmChoice> cudnnChoices() override { return m_.cudnnChoices(properties_.index); }
  void clearCudnnChoices() override { m_.clearCudnnChoices(properties_.index); }

 private:
  const ModuleApi& m_;
  const DeviceProperties properties_;
  std::atomic<std::uintptr_t> nextStream_{0};
};

// Made once, for every usable GPU, on first use; never destroyed (tensors in static storage may still
// free into their allocators while the process ends).
const std::vector<CudaModuleRuntime*>& moduleRuntimes() {
  static const std::vector<CudaModuleRuntime*>* runtimes = [] {
    auto* out = new std::vector<CudaModuleRuntime*>;
    const ModuleApi* m = loaded().api;
    if (m && m->isAvailable()) {
      for (const DeviceProperties& d : m->availability().devices) out->push_back(new CudaModuleRuntime(*m, d));
    }
    return out;
  }();
  return *runtimes;
}

}  // namespace

DeviceRuntime* cudaModuleRuntime(int index) {
  const auto& runtimes = moduleRuntimes();
  return index >= 0 && static_cast<std::size_t>(index) < runtimes.size() ? runtimes[static_cast<std::size_t>(index)] : nullptr;
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

void setAllowTf32(bool allow) {
  allowTf32Flag.store(allow);
  run_record::noteSetting("cuda.matmul.allow_tf32", allow);
}
bool allowTf32() { return allowTf32Flag.load(std::memory_order_relaxed); }

void setCudnnBenchmark(bool enabled) {
  cudnnBenchmarkFlag.store(enabled);
  run_record::noteSetting("cudnn.benchmark", enabled);
}
bool cudnnBenchmark() { return cudnnBenchmarkFlag.load(std::memory_order_relaxed); }
void setCudnnDeterministic(bool enabled) {
  cudnnDeterministicFlag.store(enabled);
  run_record::noteSetting("cudnn.deterministic", enabled);
}
bool cudnnDeterministic() { return cudnnDeterministicFlag.load(std::memory_order_relaxed); }
void setCudnnAllowTf32(bool allow) { cudnnAllowTf32Flag.store(allow); }
bool cudnnAllowTf32() { return cudnnAllowTf32Flag.load(std::memory_order_relaxed); }
void setDeterministicAlgorithms(bool enabled) { deterministicAlgorithmsFlag.store(enabled); }
bool deterministicAlgorithms() { return deterministicAlgorithmsFlag.load(std::memory_order_relaxed); }

}  // namespace gpulab::cuda
