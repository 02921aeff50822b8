// The CUDA module (libgpulab-cuda.so, loaded by engine/runtime/cuda_runtime_loader.cpp): discovery (and
// why no GPU is usable), per-device contexts and allocators, pinned host memory, and copies between
// devices. Only this module links the CUDA libraries, so GPU Lab starts where they are missing.
// The door functions are named *Impl here: the engine's own cuda::availability() etc. forward to them
// through the ModuleApi table, and calls inside the module stay inside it.
#include <cublas_v2.h>
#include <nvtx3/nvToolsExt.h>
#include <cuda_runtime.h>
#include <cudnn.h>
#include <unistd.h>

#include <dlfcn.h>

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <mutex>
#include <optional>
#include <vector>

#include "engine/kernels/backend.h"
#include "engine/kernels/cuda/cuda_check.h"
#include "engine/kernels/cuda/cuda_context.h"
#include "engine/memory/host_memory.h"
#include "engine/runtime/device_memory.h"
#include "engine/core/errors.h"
#include "engine/runtime/cuda_module.h"
#include "engine/runtime/cuda_runtime.h"
#include "engine/runtime/device_selection.h"
#include "engine/runtime/nvml_processes.h"
// Generated (Note [CUDA module build id], cmake/cuda_module_build_id.cmake): kModuleBuildId, the id of
// this build, which the engine's loader compares with its own.
#include "gpulab/cuda_module_build_id.h"

namespace gpulab {
Backend& cudaBackend(int device);  // engine/kernels/cuda/cuda_backend.cu
}
namespace gpulab::cuda {
// engine/kernels/conv/cuda.cu: cuDNN's recorded algorithm choices and their cache, per device.
std::vector<ConvAlgorithmChoice> cudnnChoicesImpl(int device);
void clearCudnnChoicesImpl(int device);
// engine/runtime/nccl_collectives.cpp: NCCL's collectives (engine/distributed).
NcclInfo ncclInfoImpl();
void allReduceImpl(const std::vector<CollectiveBuffer>& buffers, std::size_t count, DType dtype, distributed::ReduceOp op);
void broadcastImpl(const std::vector<CollectiveBuffer>& buffers, std::size_t count, DType dtype, int root);
}

namespace gpulab::cuda {

void throwCudaError(const char* call, const char* file, int line, const std::string& message, bool outOfMemory) {
  std::string text = "CUDA error: " + message + "\n  in " + call + " at " + file + ":" + std::to_string(line);
  if (outOfMemory) throw OutOfMemoryError("CUDA out of memory. " + text);
  throw CudaError(text);
}

namespace {



struct Discovery {
  Availability info;
  std::vector<DeviceContext*> contexts;  // created on first use
  std::vector<CachingAllocator*> allocators;
  CachingAllocator* pinned = nullptr;
  std::mutex mutex;
};

Availability discover() {
  Availability a;
  a.compiled = true;
  const char* env = std::getenv("CUDA_VISIBLE_DEVICES");
  a.cuda_visible_devices = env ? env : "(not set)";
  cudaDriverGetVersion(&a.driver_version);
  cudaRuntimeGetVersion(&a.runtime_version);
  a.cudnn_version = static_cast<int>(cudnnGetVersion());
  int cublasMajor = 0, cublasMinor = 0, cublasPatch = 0;
  cublasGetProperty(MAJOR_VERSION, &cublasMajor);
  cublasGetProperty(MINOR_VERSION, &cublasMinor);
  cublasGetProperty(PATCH_LEVEL, &cublasPatch);
  a.cublas_version = cublasMajor * 10000 + cublasMinor * 100 + cublasPatch;

  int count = 0;
  const cudaError_t status = cudaGetDeviceCount(&count);
  cudaGetLastError();
  if (status == cudaErrorInsufficientDriver || (status != cudaSuccess && a.driver_version == 0)) {
    a.reason = a.driver_version == 0
                   ? "no NVIDIA driver is installed (libcuda.so.1 could not be loaded)"
                   : "the NVIDIA driver is too old: it supports CUDA " + versionString(a.driver_version) +
                         ", GPU Lab was built with CUDA " + versionString(a.runtime_version) + " (update the driver)";
    return a;
  }
  if (status == cudaErrorNoDevice || (status == cudaSuccess && count == 0)) {
    a.reason = env ? "all GPUs are hidden by CUDA_VISIBLE_DEVICES=\"" + std::string(env) + "\""
                   : "the NVIDIA driver found no CUDA-capable device";
    return a;
  }
  if (status != cudaSuccess) {
    a.reason = std::string("CUDA initialisation failed: ") + cudaGetErrorString(status);
    return a;
  }
  std::vector<DeviceProperties> enumerated;
  for (int i = 0; i < count; ++i) {
    cudaDeviceProp p{};
    if (cudaGetDeviceProperties(&p, i) != cudaSuccess) {
      cudaGetLastError();
      continue;
    }
    DeviceProperties d;
    d.cuda_ordinal = i;
    d.name = p.name;
    d.major = p.major;
    d.minor = p.minor;
    d.multiprocessor_count = p.multiProcessorCount;
    d.total_memory = p.totalGlobalMem;
    enumerated.push_back(d);
  }
  DeviceSelection selection = selectUsableDevices(enumerated);
  a.devices = std::move(selection.usable);
  a.usable = !a.devices.empty();
  if (!a.usable) a.reason = selection.skipped.empty() ? "no GPU could be queried" : selection.skipped;
  return a;
}

void releaseAtExit();

Discovery& state() {
  // Deliberately never destroyed: the CUDA runtime may already be torn down during static destruction.
  static Discovery* d = [] {
    auto* s = new Discovery;
    s->info = discover();
    s->contexts.resize(s->info.devices.size(), nullptr);
    s->allocators.resize(s->info.devices.size(), nullptr);
    // Registered after discovery has initialised the CUDA runtime, so it runs before the runtime's teardown.
    if (s->info.usable) std::atexit(releaseAtExit);
    return s;
  }();
  return *d;
}


// The caching allocators' stream markers (RawAllocator::recordMarker): a CUDA event recorded on a
// stream of the GPU `ordinal`, reached when the stream has run everything queued before it.
std::uintptr_t recordEventMarker(int ordinal, cudaStream_t stream) {
  DeviceGuard guard(ordinal);
  cudaEvent_t event = nullptr;
  GPULAB_CUDA_CHECK(cudaEventCreateWithFlags(&event, cudaEventDisableTiming));
  if (const cudaError_t status = cudaEventRecord(event, stream); status != cudaSuccess) {
    cudaEventDestroy(event);
    GPULAB_CUDA_CHECK(status);
  }
  return reinterpret_cast<std::uintptr_t>(event);
}
bool eventMarkerReached(std::uintptr_t marker) {
  const cudaError_t status = cudaEventQuery(reinterpret_cast<cudaEvent_t>(marker));
  if (status == cudaErrorNotReady) {
    cudaGetLastError();
    return false;
  }
  GPULAB_CUDA_CHECK(status);
  return true;
}
void releaseEventMarker(std::uintptr_t marker) { cudaEventDestroy(reinterpret_cast<cudaEvent_t>(marker)); }

// RAII: this thread's stream-capture mode is relaxed (cudaThreadExchangeStreamCaptureMode) while it lives.
class RelaxedCaptureMode {
 public:
  RelaxedCaptureMode() { cudaThreadExchangeStreamCaptureMode(&previous_); }
  ~RelaxedCaptureMode() { cudaThreadExchangeStreamCaptureMode(&previous_); }
  RelaxedCaptureMode(const RelaxedCaptureMode&) = delete;
  RelaxedCaptureMode& operator=(const RelaxedCaptureMode&) = delete;

 private:
  cudaStreamCaptureMode previous_ = cudaStreamCaptureModeRelaxed;
};

class CudaRawAllocator final : public RawAllocator {
 public:
  explicit CudaRawAllocator(int index) : index_(index), ordinal_(ordinalOf(index)) {}
  void* rawAllocate(std::size_t bytes) override {
    DeviceGuard guard(ordinal_);
    // A segment reserved while a CUDA graph is captured (its private pool growing): cudaMalloc is not
    // allowed in the global capture mode, and harmless in the relaxed one -- the graph gets the new
    // memory and never frees it before its replays (PyTorch's cudaMallocMaybeCapturing).
    RelaxedCaptureMode relaxed;
    void* ptr = nullptr;
    const cudaError_t status = cudaMalloc(&ptr, bytes);
    if (status == cudaErrorMemoryAllocation) {
      cudaGetLastError();
      return nullptr;  // the caching allocator frees its cache, retries, then raises OutOfMemoryError
    }
    GPULAB_CUDA_CHECK(status);  // anything else (a sticky error from an earlier kernel) as itself
    return ptr;
  }
  void rawFree(void* ptr, std::size_t) override {
    DeviceGuard guard(ordinal_);
    GPULAB_CUDA_CHECK(cudaFree(ptr));
  }
  MemoryCapacity capacity() const override {
    std::size_t freeB = 0, totalB = 0;
    DeviceGuard guard(ordinal_);
    if (cudaMemGetInfo(&freeB, &totalB) != cudaSuccess) cudaGetLastError();
    return {static_cast<std::int64_t>(freeB), static_cast<std::int64_t>(totalB)};
  }
  std::string kindName() const override { return "CUDA"; }
  std::string deviceName() const override { return "GPU " + std::to_string(index_); }
  // record_stream: a CUDA event on the other stream marks how far it had got when the block was freed.
  // synchronize() waits for the whole device without looking up its context: it runs under the
  // allocator's lock, and at exit under releaseAtExit's.
  void synchronize() override {
    DeviceGuard guard(ordinal_);
    GPULAB_CUDA_CHECK(cudaDeviceSynchronize());
  }
  std::uintptr_t recordMarker(std::uintptr_t stream) override { return recordEventMarker(ordinal_, context(index_).stream(stream)); }
  bool markerReached(std::uintptr_t marker) override { return eventMarkerReached(marker); }
  void releaseMarker(std::uintptr_t marker) override { releaseEventMarker(marker); }

 private:
  int index_, ordinal_;
};

// Page-locked host memory. A block that an asynchronous copy reads (to a GPU) or writes (from one) is
// reused only after the copy ran: copyBytesImpl records the copy's stream on the block
// (CachingAllocator::recordAsyncCopy); when the block is freed, a CUDA event recorded on that stream
// marks the point its queue had reached, and the block stays out of the pool -- and out of
// empty_cache's reach -- until the event has completed. An allocation meanwhile takes another block
// instead of waiting for the GPU (PyTorch's CachingHostAllocator records an event per copy the same way).
// Pinned host memory is allocated by any thread -- DataLoader workers too, while the loop's thread may be
// capturing a CUDA graph: in the global capture mode their cudaHostAlloc and event queries would fail
// and break that capture. They cannot touch it (what they do is host-side, or on other streams), so
// they run in the relaxed mode, as PyTorch's CachingHostAllocator does.
class PinnedRawAllocator final : public RawAllocator {
 public:
  void* rawAllocate(std::size_t bytes) override {
    RelaxedCaptureMode relaxed;
    void* ptr = nullptr;
    const cudaError_t status = cudaHostAlloc(&ptr, bytes, cudaHostAllocDefault);
    if (status == cudaErrorMemoryAllocation) {
      cudaGetLastError();
      return nullptr;
    }
    GPULAB_CUDA_CHECK(status);
    return ptr;
  }
  void rawFree(void* ptr, std::size_t) override {
    RelaxedCaptureMode relaxed;
    GPULAB_CUDA_CHECK(cudaFreeHost(ptr));
  }
  MemoryCapacity capacity() const override { return hostMemoryCapacity(); }
  std::string kindName() const override { return "Pinned host memory"; }
  std::string deviceName() const override { return "The host"; }
  // `stream` is the cudaStream_t of the copy (any GPU's): the event is made on that stream's device.
  std::uintptr_t recordMarker(std::uintptr_t stream) override {
    const auto handle = reinterpret_cast<cudaStream_t>(stream);
    int ordinal = 0;
    GPULAB_CUDA_CHECK(cudaStreamGetDevice(handle, &ordinal));
    RelaxedCaptureMode relaxed;
    return recordEventMarker(ordinal, handle);
  }
  bool markerReached(std::uintptr_t marker) override {
    RelaxedCaptureMode relaxed;
    return eventMarkerReached(marker);
  }
  void releaseMarker(std::uintptr_t marker) override {
    RelaxedCaptureMode relaxed;
    releaseEventMarker(marker);
  }
};

}  // namespace

DeviceContext::DeviceContext(int device) : device_(device), ordinal_(ordinalOf(device)) {
  DeviceGuard guard(ordinal_);
  GPULAB_CUDA_CHECK(cudaDeviceGetAttribute(&smCount_, cudaDevAttrMultiProcessorCount, ordinal_));
  GPULAB_CUDA_CHECK(cudaStreamCreateWithFlags(&compute_, cudaStreamNonBlocking));
  GPULAB_CUDA_CHECK(cublasCreate(&cublas_));
  GPULAB_CUDA_CHECK(cublasSetStream(cublas_, compute_));
  cublasStream_ = compute_;
  GPULAB_CUDA_CHECK(cudaHostAlloc(&deferredHost_, sizeof(DeferredError), cudaHostAllocMapped));
  *deferredHost_ = {};
  GPULAB_CUDA_CHECK(cudaHostGetDevicePointer(&deferredDevice_, deferredHost_, 0));
}

void DeviceContext::raiseDeferredError() {
  volatile DeferredError* e = deferredHost_;
  if (!e->flagged) return;
  const long long value = e->value, bound = e->bound;
  e->flagged = 0;
  throw IndexError("Target " + std::to_string(value) + " is out of bounds: class labels must lie in [0, " + std::to_string(bound) +
                   ") (found by a kernel on cuda:" + std::to_string(device_) +
                   "; reported at the next synchronisation, as CUDA reports device-side asserts)");
}

DeviceContext::~DeviceContext() {
  if (deferredHost_) cudaFreeHost(deferredHost_);
  if (cudnn_) cudnnDestroy(cudnn_);
  cublasDestroy(cublas_);
  for (auto& s : pool_)
    if (cudaStream_t stream = s.load()) cudaStreamDestroy(stream);
  cudaStreamDestroy(compute_);
}

cudaStream_t DeviceContext::createPoolStream(std::uintptr_t id) const {
  if (id == 0 || id > kStreamPoolSize) {
    throw ValueError("invalid stream id " + std::to_string(id) + " for cuda:" + std::to_string(device_));
  }
  std::lock_guard lock(poolMutex_);
  std::atomic<cudaStream_t>& slot = pool_[id - 1];
  if (cudaStream_t s = slot.load(std::memory_order_relaxed)) return s;
  DeviceGuard guard(ordinal_);
  cudaStream_t s = nullptr;
  // Non-blocking, as the default stream is: no implicit ordering with CUDA's legacy stream.
  GPULAB_CUDA_CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  slot.store(s, std::memory_order_release);
  return s;
}

void DeviceContext::synchronizeAll() {
  GPULAB_CUDA_CHECK(cudaStreamSynchronize(compute_));
  for (auto& s : pool_)
    if (cudaStream_t stream = s.load(std::memory_order_acquire)) GPULAB_CUDA_CHECK(cudaStreamSynchronize(stream));
}

DeviceContext::Bound<cublasHandle_t> DeviceContext::cublas() {
  std::unique_lock hold(cublasMutex_);
  const cudaStream_t s = currentStream();
  if (s != cublasStream_) {
    GPULAB_CUDA_CHECK(cublasSetStream(cublas_, s));
    cublasStream_ = s;
  }
  return {cublas_, std::move(hold)};
}

DeviceContext::Bound<cudnnHandle_t> DeviceContext::cudnn() {
  // Made by the first thread that asks; a failure leaves no half-made handle behind, and the next call
  // tries again.
  std::unique_lock hold(cudnnMutex_);
  if (!cudnn_) {
    DeviceGuard guard(ordinal_);
    cudnnHandle_t handle = nullptr;
    GPULAB_CUDA_CHECK(cudnnCreate(&handle));
    cudnn_ = handle;
    cudnnStream_ = nullptr;
  }
  const cudaStream_t s = currentStream();
  if (s != cudnnStream_) {
    GPULAB_CUDA_CHECK(cudnnSetStream(cudnn_, s));
    cudnnStream_ = s;
  }
  return {cudnn_, std::move(hold)};
}

DeviceGuard::DeviceGuard(int ordinal) {
  cudaGetDevice(&previous_);
  if (previous_ != ordinal) GPULAB_CUDA_CHECK(cudaSetDevice(ordinal));
}
DeviceGuard::~DeviceGuard() {
  int now = 0;
  cudaGetDevice(&now);
  if (now != previous_) cudaSetDevice(previous_);
}

// Free memory of a GPU from NVML, which needs no CUDA context; nothing when NVML cannot say.
std::optional<std::size_t> nvmlFreeBytes(int ordinal);

Availability availabilityImpl() {
  Discovery& d = state();
  Availability a = d.info;
  std::vector<bool> inUse(a.devices.size(), false);
  {
    std::lock_guard lock(d.mutex);
    for (std::size_t i = 0; i < a.devices.size(); ++i) inUse[i] = d.contexts[i] != nullptr;
  }
  for (auto& dev : a.devices) {
    // cudaMemGetInfo would create a CUDA context (hundreds of MiB) on every GPU just to list them,
    // so GPUs this process has not used yet are asked through NVML.
    if (!inUse[static_cast<std::size_t>(dev.index)]) {
      if (const auto free = nvmlFreeBytes(dev.cuda_ordinal)) dev.free_memory = *free;
      continue;
    }
    std::size_t freeB = 0, totalB = 0;
    DeviceGuard guard(dev.cuda_ordinal);
    if (cudaMemGetInfo(&freeB, &totalB) == cudaSuccess) dev.free_memory = freeB;
    cudaGetLastError();
  }
  return a;
}

bool isAvailableImpl() { return state().info.usable; }
int deviceCountImpl() { return static_cast<int>(state().info.devices.size()); }

void checkDeviceUsableImpl(Device device) {
  if (!device.isCuda()) return;
  const Availability& a = state().info;
  if (!a.usable) throw Error("Cannot use device " + device.str() + ": no usable GPU: " + a.reason);
  if (device.index() < 0 || device.index() >= static_cast<int>(a.devices.size())) {
    throw Error("CUDA error: invalid device ordinal: " + device.str() + " does not exist (this machine has " +
                std::to_string(a.devices.size()) + " usable GPU" + (a.devices.size() == 1 ? "" : "s") + ")");
  }
}

int ordinalOf(int index) {
  checkDeviceUsableImpl(Device(DeviceType::CUDA, index));
  return state().info.devices[static_cast<std::size_t>(index)].cuda_ordinal;
}

namespace {

// Per-thread cache of what context() found: every kernel launch asks for its device's context, so the
// common case must cost neither the global lock nor a cudaSetDevice (which is a driver call).
constexpr int kCachedDevices = 16;
thread_local DeviceContext* tlsContexts[kCachedDevices] = {};
std::atomic<std::uint64_t> contextGeneration{1};  // bumped when contexts are released at exit
thread_local std::uint64_t tlsGeneration = 0;

// At exit, before the CUDA runtime tears itself down (its own atexit handlers were registered
// earlier, so they run later): return every cached block, destroy the handles and streams. Blocks
// still in use stay, and are what compute-sanitizer's leak check then reports.
void releaseAtExit() {
  try {
    // The pointers are taken under the lock and the work done outside it: waiting for a device and
    // emptying a cache may need a context (createContext takes the same lock).
    Discovery& d = state();
    std::vector<DeviceContext*> contexts;
    std::vector<CachingAllocator*> allocators;
    CachingAllocator* pinned = nullptr;
    {
      std::lock_guard lock(d.mutex);
      contexts.assign(d.contexts.begin(), d.contexts.end());
      allocators.assign(d.allocators.begin(), d.allocators.end());
      pinned = d.pinned;
    }
    for (std::size_t i = 0; i < contexts.size(); ++i) {
      if (contexts[i]) contexts[i]->synchronizeAll();
      if (i < allocators.size() && allocators[i]) allocators[i]->emptyCache();
    }
    if (pinned) pinned->emptyCache();
    std::lock_guard lock(d.mutex);
    for (auto*& ctx : d.contexts) {
      delete ctx;
      ctx = nullptr;
    }
    contextGeneration.fetch_add(1);
    cudaGetLastError();
  } catch (const std::exception&) {
    // After a sticky CUDA error nothing can be freed; the process is ending anyway.
  }
}

CachingAllocator& createAllocator(int index) {
  checkDeviceUsableImpl(Device(DeviceType::CUDA, index));
  Discovery& d = state();
  std::lock_guard lock(d.mutex);
  auto& slot = d.allocators[static_cast<std::size_t>(index)];
  if (!slot) slot = new CachingAllocator(std::make_unique<CudaRawAllocator>(index), Device(DeviceType::CUDA, index));
  return *slot;
}

DeviceContext& createContext(int device) {
  checkDeviceUsableImpl(Device(DeviceType::CUDA, device));
  Discovery& d = state();
  std::lock_guard lock(d.mutex);
  auto& slot = d.contexts[static_cast<std::size_t>(device)];
  if (!slot) slot = new DeviceContext(device);
  return *slot;
}

}  // namespace

DeviceContext& context(int device) {
  const std::uint64_t generation = contextGeneration.load(std::memory_order_relaxed);
  if (tlsGeneration != generation) {
    std::fill(std::begin(tlsContexts), std::end(tlsContexts), nullptr);
    tlsGeneration = generation;
  }
  DeviceContext* ctx = device >= 0 && device < kCachedDevices ? tlsContexts[device] : nullptr;
  if (!ctx) {
    ctx = &createContext(device);
    if (device < kCachedDevices) tlsContexts[device] = ctx;
  }
  // Something else (DeviceGuard, a library) may have changed the current device since; cudaGetDevice
  // is a cheap thread-local read in the runtime, cudaSetDevice is not.
  int current = -1;
  cudaGetDevice(&current);
  if (current != ctx->ordinal()) GPULAB_CUDA_CHECK(cudaSetDevice(ctx->ordinal()));
  return *ctx;
}

void synchronizeImpl(int device) {
  if (!isAvailableImpl()) return;
  DeviceContext& ctx = context(device);
  ctx.synchronizeAll();  // torch.cuda.synchronize(): every stream of the device
  ctx.raiseDeferredError();
}

CachingAllocator& deviceAllocatorImpl(int index) {
  // Allocators are never destroyed, so a thread may keep the pointer: no lock on every allocation.
  thread_local CachingAllocator* cached[kCachedDevices] = {};
  if (index >= 0 && index < kCachedDevices && cached[index]) return *cached[index];
  CachingAllocator& a = createAllocator(index);
  if (index >= 0 && index < kCachedDevices) cached[index] = &a;
  return a;
}


CachingAllocator& pinnedHostAllocatorImpl() {
  if (!isAvailableImpl()) throw Error("Cannot allocate pinned memory: no usable GPU: " + state().info.reason);
  Discovery& d = state();
  std::lock_guard lock(d.mutex);
  if (!d.pinned) d.pinned = new CachingAllocator(std::make_unique<PinnedRawAllocator>(), kCPU);
  return *d.pinned;
}

void copyBytesImpl(void* dst, Device dstDevice, const void* src, Device srcDevice, std::size_t bytes, bool nonBlocking,
                   bool srcPinned, bool dstPinned) {
  if (dstDevice.isCpu() && srcDevice.isCpu()) {
    std::memcpy(dst, src, bytes);
    return;
  }
  if (dstDevice.isCuda() && srcDevice.isCpu()) {
    DeviceContext& ctx = context(dstDevice.index());
    if (nonBlocking && srcPinned) {
      // As PyTorch does: the copy is queued on the compute stream, so it runs after the kernels that
      // may still read the destination block's previous contents (a block freed on the host is
      // reused at once -- on its own stream, which keeps the order), and the host goes on at once.
      // The pinned source must not be reused before the copy has read it: the allocator keeps it.
      // Recorded before the copy is queued, so a block the allocator refuses leaves no copy unguarded.
      pinnedHostAllocatorImpl().recordAsyncCopy(src, reinterpret_cast<std::uintptr_t>(ctx.currentStream()));
      GPULAB_CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyHostToDevice, ctx.currentStream()));
    } else {
      // non_blocking=False waits for the copy, from pinned or pageable memory (PyTorch's memcpy_and_sync),
      // so the host also waits for the work queued before it; non_blocking from pageable memory returns
      // once the driver has staged the bytes.
      const cudaStream_t stream = ctx.currentStream();
      GPULAB_CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyHostToDevice, stream));
      if (!nonBlocking) GPULAB_CUDA_CHECK(cudaStreamSynchronize(stream));
    }
    return;
  }
  if (dstDevice.isCpu()) {
    DeviceContext& ctx = context(srcDevice.index());
    if (nonBlocking && dstPinned) {
      // PyTorch's .to("cpu", non_blocking=True): queued behind the stream's work, the host goes on at
      // once and may read the result only after a synchronize() or an event. The pinned destination
      // must not be handed to another tensor before the copy has written it (the allocator keeps it).
      // A kernel's deferred error is raised at that synchronisation.
      pinnedHostAllocatorImpl().recordAsyncCopy(dst, reinterpret_cast<std::uintptr_t>(ctx.currentStream()));
      GPULAB_CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToHost, ctx.currentStream()));
      return;
    }
    GPULAB_CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToHost, ctx.currentStream()));
    GPULAB_CUDA_CHECK(cudaStreamSynchronize(ctx.currentStream()));
    ctx.raiseDeferredError();
    return;
  }
  if (dstDevice == srcDevice) {
    DeviceContext& ctx = context(dstDevice.index());
    GPULAB_CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, ctx.currentStream()));
    return;
  }
  // Between GPUs: make the source's pending work finish, then a peer copy ordered on the destination.
  synchronizeImpl(srcDevice.index());
  DeviceContext& ctx = context(dstDevice.index());
  // CUDA's device numbers, not GPU Lab's indices: they differ where a GPU was left out (device_selection.h).
  GPULAB_CUDA_CHECK(cudaMemcpyPeerAsync(dst, ordinalOf(dstDevice.index()), src, ordinalOf(srcDevice.index()), bytes, ctx.currentStream()));
  GPULAB_CUDA_CHECK(cudaStreamSynchronize(ctx.currentStream()));
}

namespace {

// NVML, loaded at run time: the driver ships libnvidia-ml, the toolkit does not, and GPU Lab must run
// where it is absent. Only the few stable entry points below are used, declared here by their ABI.
struct Nvml {
  using Return = int;  // NVML_SUCCESS == 0
  struct Memory {
    unsigned long long total, free, used;
  };
  void* lib = nullptr;
  std::string error;
  Return (*init)() = nullptr;
  Return (*handleByPciBusId)(const char*, void**) = nullptr;
  Return (*memoryInfo)(void*, Memory*) = nullptr;
  Return (*runningProcesses)(void*, unsigned int*, void*) = nullptr;  // entries: see nvml_processes.h
  Return (*driverVersion)(char*, unsigned int) = nullptr;
  // nvidia-smi's other readings; each may be missing from an old driver (then null: not shown).
  struct Utilization {
    unsigned int gpu, memory;
  };
  Return (*utilization)(void*, Utilization*) = nullptr;
  Return (*temperature)(void*, int sensor, unsigned int*) = nullptr;  // sensor 0: NVML_TEMPERATURE_GPU
  Return (*powerUsage)(void*, unsigned int*) = nullptr;               // milliwatts
  Return (*powerLimit)(void*, unsigned int*) = nullptr;               // milliwatts
  Return (*processName)(unsigned int pid, char*, unsigned int) = nullptr;
  Return (*deviceName)(void*, char*, unsigned int) = nullptr;
  std::size_t processInfoSize = 24;
  const char* (*errorString)(Return) = nullptr;
};

Nvml& nvml() {
  static Nvml* n = [] {
    auto* x = new Nvml;
    x->lib = dlopen("libnvidia-ml.so.1", RTLD_NOW | RTLD_LOCAL);
    if (!x->lib) {
      x->error = "NVML (libnvidia-ml.so.1, part of the NVIDIA driver) could not be loaded";
      return x;
    }
    auto sym = [&](const char* name) { return dlsym(x->lib, name); };
    x->init = reinterpret_cast<Nvml::Return (*)()>(sym("nvmlInit_v2"));
    x->handleByPciBusId = reinterpret_cast<Nvml::Return (*)(const char*, void**)>(sym("nvmlDeviceGetHandleByPciBusId_v2"));
    x->memoryInfo = reinterpret_cast<Nvml::Return (*)(void*, Nvml::Memory*)>(sym("nvmlDeviceGetMemoryInfo"));
    void* procs = sym("nvmlDeviceGetComputeRunningProcesses_v3");
    if (!procs) procs = sym("nvmlDeviceGetComputeRunningProcesses_v2");
    x->runningProcesses = reinterpret_cast<Nvml::Return (*)(void*, unsigned int*, void*)>(procs);
    x->driverVersion = reinterpret_cast<Nvml::Return (*)(char*, unsigned int)>(sym("nvmlSystemGetDriverVersion"));
    x->errorString = reinterpret_cast<const char* (*)(Nvml::Return)>(sym("nvmlErrorString"));
    x->utilization = reinterpret_cast<Nvml::Return (*)(void*, Nvml::Utilization*)>(sym("nvmlDeviceGetUtilizationRates"));
    x->temperature = reinterpret_cast<Nvml::Return (*)(void*, int, unsigned int*)>(sym("nvmlDeviceGetTemperature"));
    x->powerUsage = reinterpret_cast<Nvml::Return (*)(void*, unsigned int*)>(sym("nvmlDeviceGetPowerUsage"));
    x->powerLimit = reinterpret_cast<Nvml::Return (*)(void*, unsigned int*)>(sym("nvmlDeviceGetEnforcedPowerLimit"));
    x->processName = reinterpret_cast<Nvml::Return (*)(unsigned int, char*, unsigned int)>(sym("nvmlSystemGetProcessName"));
    x->deviceName = reinterpret_cast<Nvml::Return (*)(void*, char*, unsigned int)>(sym("nvmlDeviceGetName"));
    if (!x->init || !x->handleByPciBusId || !x->memoryInfo) {
      x->error = "NVML is too old (missing entry points)";
    } else if (const Nvml::Return r = x->init(); r != 0) {
      x->error = std::string("nvmlInit failed: ") + (x->errorString ? x->errorString(r) : std::to_string(r));
    } else {
      char version[96] = {};
      if (x->driverVersion && x->driverVersion(version, sizeof version) == 0) {
        x->processInfoSize = nvmlProcessInfoSize(driverMajorVersion(version));
      } else if (procs == sym("nvmlDeviceGetComputeRunningProcesses_v3")) {
        x->runningProcesses = nullptr;  // the _v3 layout depends on the driver version, which is unknown
      }
    }
    return x;
  }();
  return *n;
}

}  // namespace

// NVML's handle and memory reading of the GPU with CUDA ordinal `ordinal` (the engine's `name`).
// NVML numbers GPUs differently from CUDA under CUDA_VISIBLE_DEVICES, so they are matched by PCI bus
// id. Null, with `why`, when NVML cannot say.
void* nvmlMemory(const Nvml& n, int ordinal, const std::string& name, Nvml::Memory& mem, std::string& why) {
  char bus[32] = {};
  if (cudaDeviceGetPCIBusId(bus, sizeof bus, ordinal) != cudaSuccess) {
    cudaGetLastError();
    why = "the PCI bus id of " + name + " is unknown";
    return nullptr;
  }
  void* handle = nullptr;
  if (n.handleByPciBusId(bus, &handle) != 0 || n.memoryInfo(handle, &mem) != 0) {
    why = std::string("NVML does not know the GPU at ") + bus;
    return nullptr;
  }
  return handle;
}

std::optional<std::size_t> nvmlFreeBytes(int ordinal) {
  Nvml& n = nvml();
  if (!n.error.empty()) return std::nullopt;
  Nvml::Memory mem{};
  std::string why;
  if (!nvmlMemory(n, ordinal, "CUDA device " + std::to_string(ordinal), mem, why)) return std::nullopt;
  return static_cast<std::size_t>(mem.free);
}

// The NVML handle and memory of the engine's cuda:index, and the processes on it; `reason` says why
// not when NVML cannot answer (no GPU, no NVML, an unknown device).
struct NvmlReading {
  void* handle = nullptr;
  Nvml::Memory memory{};
  std::string reason;
};

NvmlReading readNvml(int index) {
  NvmlReading r;
  if (!isAvailableImpl()) {
    r.reason = "not available: no usable GPU: " + state().info.reason;
    return r;
  }
  checkDeviceUsableImpl(Device(DeviceType::CUDA, index));
  Nvml& n = nvml();
  if (!n.error.empty()) {
    r.reason = "not available: " + n.error;
    return r;
  }
  std::string why;
  r.handle = nvmlMemory(n, ordinalOf(index), "cuda:" + std::to_string(index), r.memory, why);
  if (!r.handle) r.reason = "not available: " + why;
  return r;
}

// The processes NVML lists on the GPU; `reason` says why not when it cannot.
std::optional<NvmlProcessList> nvmlProcesses(void* handle, std::string& reason) {
  Nvml& n = nvml();
  if (!n.runningProcesses) {
    reason = "NVML cannot list processes with this driver";
    return std::nullopt;
  }
  NvmlProcessList list = queryNvmlProcesses(
      [&](unsigned int* count, void* buffer) { return n.runningProcesses(handle, count, buffer); }, n.processInfoSize);
  if (!list.ok) {
    reason = list.error;
    return std::nullopt;
  }
  return list;
}

DriverMemoryInfo driverMemoryInfoImpl(int index) {
  DriverMemoryInfo info;
  const NvmlReading r = readNvml(index);
  if (!r.handle) {
    info.reason = r.reason;
    return info;
  }
  info.available = true;
  info.device_used = static_cast<std::int64_t>(r.memory.used);
  info.device_total = static_cast<std::int64_t>(r.memory.total);
  const std::optional<NvmlProcessList> list = nvmlProcesses(r.handle, info.process_reason);
  if (!list) return info;
  const auto self = static_cast<unsigned int>(getpid());
  for (const NvmlProcess& p : list->processes) {
    if (p.pid == self) info.process_used = static_cast<std::int64_t>(p.used_bytes);
  }
  if (!info.process_used) {
    // Inside a container NVML reports the host's PIDs, which this process cannot know.
    info.process_reason = "NVML lists " + std::to_string(list->processes.size()) + " process" +
                          (list->processes.size() == 1 ? "" : "es") + " on this GPU, none with this process's PID " +
                          std::to_string(self) + " (in a container, NVML reports host PIDs)";
  }
  return info;
}

DeviceTelemetry deviceTelemetryImpl(int index) {
  DeviceTelemetry t;
  const NvmlReading r = readNvml(index);
  if (!r.handle) {
    t.reason = r.reason;
    return t;
  }
  Nvml& n = nvml();
  void* handle = r.handle;
  t.available = true;
  t.memory_used = static_cast<std::int64_t>(r.memory.used);
  t.memory_total = static_cast<std::int64_t>(r.memory.total);
  char name[96] = {};
  if (n.deviceName && n.deviceName(handle, name, sizeof name) == 0) t.name = name;
  Nvml::Utilization u{};
  if (n.utilization && n.utilization(handle, &u) == 0) {
    t.gpu_utilization = static_cast<int>(u.gpu);
    t.memory_utilization = static_cast<int>(u.memory);
  }
  unsigned int value = 0;
  if (n.temperature && n.temperature(handle, 0, &value) == 0) t.temperature_c = static_cast<int>(value);
  if (n.powerUsage && n.powerUsage(handle, &value) == 0) t.power_w = value / 1000.0;
  if (n.powerLimit && n.powerLimit(handle, &value) == 0) t.power_limit_w = value / 1000.0;
  const std::optional<NvmlProcessList> list = nvmlProcesses(handle, t.processes_reason);
  if (!list) return t;
  const auto self = static_cast<unsigned int>(getpid());
  for (const NvmlProcess& p : list->processes) {
    DeviceTelemetry::Process out{p.pid, {}, static_cast<std::int64_t>(p.used_bytes), p.pid == self};
    char pname[256] = {};
    if (n.processName && n.processName(p.pid, pname, sizeof pname) == 0) out.name = pname;
    t.processes.push_back(std::move(out));
  }
  return t;
}

// torch.cuda.Event on a real GPU. The handle remembers its device, for the compute stream to record on
// and for the deferred kernel error to report once the host has waited.
namespace {
struct EventHandle {
  cudaEvent_t event = nullptr;
  int device = 0;
};
EventHandle& handleOf(void* event) { return *static_cast<EventHandle*>(event); }
}  // namespace

void* eventCreateImpl(int device, bool timing) {
  context(device);  // makes the device current
  auto handle = std::make_unique<EventHandle>();
  handle->device = device;
  GPULAB_CUDA_CHECK(cudaEventCreateWithFlags(&handle->event, timing ? cudaEventDefault : cudaEventDisableTiming));
  return handle.release();
}

void eventDestroyImpl(void* event) {
  std::unique_ptr<EventHandle> handle(static_cast<EventHandle*>(event));
  if (handle && handle->event) cudaEventDestroy(handle->event);  // at exit the context may be gone: nothing to report
}

void eventRecordImpl(void* event, std::uintptr_t stream) {
  EventHandle& h = handleOf(event);
  GPULAB_CUDA_CHECK(cudaEventRecord(h.event, context(h.device).stream(stream)));
}

bool eventQueryImpl(void* event) {
  const cudaError_t status = cudaEventQuery(handleOf(event).event);
  if (status == cudaErrorNotReady) {
    cudaGetLastError();  // not an error: the stream has not got there yet
    return false;
  }
  GPULAB_CUDA_CHECK(status);
  return true;
}

void eventSynchronizeImpl(void* event) {
  EventHandle& h = handleOf(event);
  GPULAB_CUDA_CHECK(cudaEventSynchronize(h.event));
  context(h.device).raiseDeferredError();
}

bool streamQueryImpl(int device, std::uintptr_t stream) {
  const cudaError_t status = cudaStreamQuery(context(device).stream(stream));
  if (status == cudaErrorNotReady) {
    cudaGetLastError();
    return false;
  }
  GPULAB_CUDA_CHECK(status);
  return true;
}

void streamSynchronizeImpl(int device, std::uintptr_t stream) {
  DeviceContext& ctx = context(device);
  GPULAB_CUDA_CHECK(cudaStreamSynchronize(ctx.stream(stream)));
  ctx.raiseDeferredError();
}

void streamWaitEventImpl(int device, std::uintptr_t stream, void* event) {
  GPULAB_CUDA_CHECK(cudaStreamWaitEvent(context(device).stream(stream), handleOf(event).event, 0));
}

double eventElapsedMsImpl(void* start, void* end) {
  // Asked first, so that an event not reached yet is reported without a failing CUDA call (which
  // compute-sanitizer counts as an error even where the program expects it).
  for (void* e : {start, end}) {
    if (!eventQueryImpl(e)) throw Error("cudaErrorNotReady: device not ready -- an event has not happened yet; call synchronize() on it first");
  }
  float ms = 0;
  const cudaError_t status = cudaEventElapsedTime(&ms, handleOf(start).event, handleOf(end).event);
  if (status == cudaErrorNotReady) {
    cudaGetLastError();
    throw Error("cudaErrorNotReady: device not ready -- an event has not happened yet; call synchronize() on it first");
  }
  GPULAB_CUDA_CHECK(status);
  return ms;
}

// CUDA graphs (engine/runtime/cuda_graph.h): a captured graph and its executable instance.
struct GraphHandle {
  cudaGraph_t graph = nullptr;
  cudaGraphExec_t exec = nullptr;
  int device = 0;
};

void graphCaptureBeginImpl(int device, std::uintptr_t stream) {
  DeviceContext& ctx = context(device);
  DeviceGuard guard(ctx.ordinal());
  // Global mode, PyTorch's default: any thread's call that could make the host wait on the capturing
  // device (a synchronize, a blocking copy) fails and invalidates the capture, instead of going unseen.
  GPULAB_CUDA_CHECK(cudaStreamBeginCapture(ctx.stream(stream), cudaStreamCaptureModeGlobal));
}

void* graphCaptureEndImpl(int device, std::uintptr_t stream) {
  DeviceContext& ctx = context(device);
  DeviceGuard guard(ctx.ordinal());
  cudaGraph_t graph = nullptr;
  const cudaError_t ended = cudaStreamEndCapture(ctx.stream(stream), &graph);
  if (ended != cudaSuccess) {
    if (graph) cudaGraphDestroy(graph);
    cudaGetLastError();  // a capture's failure is not sticky: the device stays usable
    GPULAB_CUDA_CHECK(ended);
  }
  cudaGraphExec_t exec = nullptr;
  const cudaError_t made = cudaGraphInstantiate(&exec, graph, 0);
  if (made != cudaSuccess) {
    cudaGraphDestroy(graph);
    cudaGetLastError();
    GPULAB_CUDA_CHECK(made);
  }
  return new GraphHandle{graph, exec, device};
}

void graphLaunchImpl(void* handle, int device, std::uintptr_t stream) {
  auto* h = static_cast<GraphHandle*>(handle);
  DeviceContext& ctx = context(device);
  DeviceGuard guard(ctx.ordinal());
  GPULAB_CUDA_CHECK(cudaGraphLaunch(h->exec, ctx.stream(stream)));
}

std::size_t graphNodeCountImpl(void* handle) {
  std::size_t count = 0;
  GPULAB_CUDA_CHECK(cudaGraphGetNodes(static_cast<GraphHandle*>(handle)->graph, nullptr, &count));
  return count;
}

void graphDestroyImpl(void* handle) {
  auto* h = static_cast<GraphHandle*>(handle);
  if (!h) return;
  if (h->exec) cudaGraphExecDestroy(h->exec);
  if (h->graph) cudaGraphDestroy(h->graph);
  delete h;
}

}  // namespace gpulab::cuda

// The module's entry points (cuda_module.h): which build it is, and the table the engine's loader
// (cuda_runtime_loader.cpp) calls through.
extern "C" const char* gpulab_cuda_module_build_id() { return gpulab::cuda::kModuleBuildId; }

extern "C" const gpulab::cuda::ModuleApi* gpulab_cuda_module_api(int abiVersion, const char* buildId) {
  using namespace gpulab::cuda;
  if (abiVersion != kModuleAbiVersion || std::strcmp(buildId, kModuleBuildId) != 0) return nullptr;
  static const ModuleApi api{
      kModuleAbiVersion,
      availabilityImpl,
      isAvailableImpl,
      deviceCountImpl,
      synchronizeImpl,
      checkDeviceUsableImpl,
      deviceAllocatorImpl,
      pinnedHostAllocatorImpl,
      driverMemoryInfoImpl,
      deviceTelemetryImpl,
      copyBytesImpl,
      [](int device) -> gpulab::Backend& { return gpulab::cudaBackend(device); },
      cudnnChoicesImpl,
      clearCudnnChoicesImpl,
      eventCreateImpl,
      eventDestroyImpl,
      eventRecordImpl,
      eventQueryImpl,
      eventSynchronizeImpl,
      eventElapsedMsImpl,
      streamQueryImpl,
      streamSynchronizeImpl,
      streamWaitEventImpl,
      ncclInfoImpl,
      allReduceImpl,
      broadcastImpl,
      [](const char* name) { nvtxRangePushA(name); },
      [] { nvtxRangePop(); },
      graphCaptureBeginImpl,
      graphCaptureEndImpl,
      graphLaunchImpl,
      graphNodeCountImpl,
      graphDestroyImpl,
  };
  return &api;
}
