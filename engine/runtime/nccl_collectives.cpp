// NCCL collectives in the CUDA module, for engine/distributed (torch.distributed's all_reduce and
// broadcast as one process driving several GPUs, as DataParallel does).
//
// Design:
// - NCCL is loaded with dlopen when a collective is first asked for, as NVML is (cuda_runtime_gpu.cpp),
//   not linked: libnccl.so.2 is a ~200 MB library that most learners (one GPU, or none) never need, and
//   linking it would make the whole CUDA module -- every GPU lesson -- fail to load where it is
//   missing. nccl.h gives the types and signatures (GPULAB_HAVE_NCCL: CMake found it); the library
//   is looked up by its soname first, then at the path CMake found it (GPULAB_NCCL_LIBRARY).
// - One communicator set per ordered list of devices ({cuda:0, cuda:1} and {cuda:1, cuda:0} are
//   different rank orders), made by ncclCommInitAll on first use and kept: making one costs tens of
//   milliseconds and allocates on every GPU. They are finalised and destroyed at exit, before the
//   CUDA runtime tears itself down (the at-exit handler is registered after NCCL initialised CUDA).
// - A collective is one group (ncclGroupStart, one call per GPU, ncclGroupEnd): one thread driving
//   several GPUs must group them, or the first call would wait for peers that were never launched.
//   Each GPU's call goes to that GPU's current stream (DeviceContext::currentStream), as copies and
//   kernels do, so it is ordered after the work that produced the tensor and before the work that
//   reads it -- the caller never waits. One mutex serialises collectives: a communicator must not be
//   used by two threads at once.
#include <cuda_runtime.h>
#include <dlfcn.h>

#include <cstdlib>
#include <map>
#include <mutex>
#include <string>
#include <type_traits>
#include <vector>

#include "engine/core/errors.h"
#include "engine/distributed/distributed.h"
#include "engine/kernels/cuda/cuda_check.h"
#include "engine/kernels/cuda/cuda_context.h"
#include "engine/runtime/cuda_module.h"
#include "engine/runtime/cuda_runtime.h"

#if GPULAB_HAVE_NCCL
#include <nccl.h>
#endif

namespace gpulab::cuda {

Availability availabilityImpl();  // cuda_runtime_gpu.cpp
int deviceCountImpl();

namespace {

#if GPULAB_HAVE_NCCL

// libnccl.so.2's entry points, by nccl.h's own signatures. `error` says why it could not be loaded.
struct Nccl {
  void* lib = nullptr;
  std::string error;
  int version = 0;  // NCCL_VERSION_CODE of the library loaded, e.g. 22809
  decltype(&::ncclGetVersion) getVersion = nullptr;
  decltype(&::ncclGetErrorString) errorString = nullptr;
  decltype(&::ncclGetLastError) lastError = nullptr;  // 2.13 and later; may be null
  decltype(&::ncclCommInitAll) commInitAll = nullptr;
  decltype(&::ncclCommFinalize) commFinalize = nullptr;  // 2.14 and later; may be null
  decltype(&::ncclCommDestroy) commDestroy = nullptr;
  decltype(&::ncclCommAbort) commAbort = nullptr;
  decltype(&::ncclCommGetAsyncError) commGetAsyncError = nullptr;
  decltype(&::ncclGroupStart) groupStart = nullptr;
  decltype(&::ncclGroupEnd) groupEnd = nullptr;
  decltype(&::ncclAllReduce) allReduce = nullptr;
  decltype(&::ncclBroadcast) broadcast = nullptr;
};

// "2.28.9" for 22809 (2.9 and later: major * 10000 + minor * 100 + patch; before: * 1000 + * 100).
std::string ncclVersionString(int code) {
  const int major = code >= 10000 ? code / 10000 : code / 1000;
  const int minor = code >= 10000 ? code % 10000 / 100 : code % 1000 / 100;
  const int patch = code % 100;
  return std::to_string(major) + "." + std::to_string(minor) + "." + std::to_string(patch);
}

Nccl& nccl() {
  // Deliberately never destroyed (nor dlclose'd): communicators live until the at-exit handler.
  static Nccl* n = [] {
    auto* x = new Nccl;
    std::string tried;
    for (const char* path : {"libnccl.so.2", GPULAB_NCCL_LIBRARY}) {
      x->lib = dlopen(path, RTLD_NOW | RTLD_LOCAL);
      if (x->lib) break;
      const char* err = dlerror();
      tried += (tried.empty() ? "" : "; ") + std::string(err ? err : path);
    }
    if (!x->lib) {
      x->error = "NCCL could not be loaded (" + tried + ")";
      return x;
    }
    auto sym = [&](auto& fn, const char* name) { fn = reinterpret_cast<std::remove_reference_t<decltype(fn)>>(dlsym(x->lib, name)); };
    sym(x->getVersion, "ncclGetVersion");
    sym(x->errorString, "ncclGetErrorString");
    sym(x->lastError, "ncclGetLastError");
    sym(x->commInitAll, "ncclCommInitAll");
    sym(x->commFinalize, "ncclCommFinalize");
    sym(x->commDestroy, "ncclCommDestroy");
    sym(x->commAbort, "ncclCommAbort");
    sym(x->commGetAsyncError, "ncclCommGetAsyncError");
    sym(x->groupStart, "ncclGroupStart");
    sym(x->groupEnd, "ncclGroupEnd");
    sym(x->allReduce, "ncclAllReduce");
    sym(x->broadcast, "ncclBroadcast");
    if (!x->getVersion || !x->errorString || !x->commInitAll || !x->commDestroy || !x->commAbort || !x->commGetAsyncError ||
        !x->groupStart || !x->groupEnd || !x->allReduce || !x->broadcast) {
      x->error = "NCCL is too old (missing entry points; GPU Lab needs NCCL 2.10 or later)";
    } else if (x->getVersion(&x->version) != ncclSuccess || x->version < NCCL_VERSION(2, 10, 0)) {
      // ncclAvg and ncclBfloat16 came in 2.10.
      x->error = "NCCL " + ncclVersionString(x->version) + " is too old (GPU Lab needs NCCL 2.10 or later)";
    }
    return x;
  }();
  return *n;
}

// A failing NCCL call as a CudaError in PyTorch's words ("NCCL error in: ..., unhandled cuda error"),
// with NCCL's own last message where it has one.
[[noreturn]] void throwNcclError(ncclResult_t result, const char* call, const char* file, int line) {
  Nccl& n = nccl();
  std::string text = "NCCL error in: " + std::string(call) + " at " + file + ":" + std::to_string(line) + ", " +
                     n.errorString(result) + ", NCCL version " + ncclVersionString(n.version);
  if (n.lastError) {
    if (const char* last = n.lastError(nullptr); last && *last) text += "\n  last error: " + std::string(last);
  }
  text += "\n  (run with NCCL_DEBUG=INFO for details)";
  throw CudaError(text);
}

#define GPULAB_NCCL_CHECK(call)                                                         \
  do {                                                                                 \
    if (const ncclResult_t r_ = (call); r_ != ncclSuccess) throwNcclError(r_, #call, __FILE__, __LINE__); \
  } while (0)

struct Communicators {
  std::mutex mutex;  // held while a collective is queued, and while communicators are made or destroyed
  std::map<std::vector<int>, std::vector<ncclComm_t>> byDevices;  // engine device indices, rank order
  bool atExitRegistered = false;
};
Communicators& communicators() {
  static auto* c = new Communicators;  // never destroyed: the at-exit handler still uses it
  return *c;
}

// At exit: finalise every communicator set (grouped: the ranks of one set are all driven from this
// thread, and finalising one waits for its peers), then free them. One whose GPU reported an error
// is aborted instead, which does not wait. A collective still being queued by another thread keeps
// the lock: then they are left to the process's end rather than destroyed under it.
void destroyAtExit() {
  Communicators& c = communicators();
  std::unique_lock lock(c.mutex, std::try_to_lock);
  if (!lock.owns_lock()) return;
  Nccl& n = nccl();
  for (auto& [devices, comms] : c.byDevices) {
    bool healthy = true;
    for (ncclComm_t comm : comms) {
      ncclResult_t async = ncclSuccess;
      if (n.commGetAsyncError(comm, &async) != ncclSuccess || async != ncclSuccess) healthy = false;
    }
    if (healthy && n.commFinalize) {
      n.groupStart();
      for (ncclComm_t comm : comms) n.commFinalize(comm);
      healthy = n.groupEnd() == ncclSuccess;
    }
    for (ncclComm_t comm : comms) healthy ? n.commDestroy(comm) : n.commAbort(comm);
  }
  c.byDevices.clear();
  cudaGetLastError();
}

// The communicators of `devices`, in rank order; made on first use. Called with c.mutex held.
const std::vector<ncclComm_t>& communicatorsFor(Communicators& c, const std::vector<int>& devices) {
  if (const auto it = c.byDevices.find(devices); it != c.byDevices.end()) return it->second;
  std::vector<int> ordinals;
  for (const int device : devices) {
    context(device);  // checks the device, creates GPU Lab's context (and CUDA's) on it
    ordinals.push_back(ordinalOf(device));
  }
  std::vector<ncclComm_t> comms(devices.size(), nullptr);
  GPULAB_NCCL_CHECK(nccl().commInitAll(comms.data(), static_cast<int>(comms.size()), ordinals.data()));
  if (!c.atExitRegistered) {
    // After NCCL's CUDA initialisation, so this runs before the runtime's own teardown (atexit is LIFO).
    std::atexit(destroyAtExit);
    c.atExitRegistered = true;
  }
  return c.byDevices.emplace(devices, std::move(comms)).first->second;
}

ncclDataType_t ncclTypeOf(DType dtype) {
  switch (dtype) {
    case DType::Float32: return ncclFloat32;
    case DType::Float64: return ncclFloat64;
    case DType::Float16: return ncclFloat16;
    case DType::BFloat16: return ncclBfloat16;
    case DType::Int64:
    case DType::Bool: break;
  }
  throw NotImplementedError("NCCL collectives support float32, float64, float16 and bfloat16, not " + dtypeName(dtype));
}

// Queues one group: `launch(rank, comm, stream)` for each GPU on its current stream.
template <typename Launch>
void runGroup(const std::vector<CollectiveBuffer>& buffers, const char* what, Launch launch) {
  Nccl& n = nccl();
  if (!n.error.empty()) throw Error(std::string(what) + ": " + n.error);
  std::vector<int> devices;
  for (const CollectiveBuffer& b : buffers) devices.push_back(b.device);
  int previous = 0;
  cudaGetDevice(&previous);
  DeviceGuard restore(previous);  // the caller's current device, whatever the contexts set
  Communicators& c = communicators();
  std::lock_guard lock(c.mutex);
  const std::vector<ncclComm_t>& comms = communicatorsFor(c, devices);
  std::vector<cudaStream_t> streams;
  for (const int device : devices) streams.push_back(context(device).currentStream());
  GPULAB_NCCL_CHECK(n.groupStart());
  // Every call is made and the group always ended, so a failing call leaves no group open; the first
  // failure is reported after the group.
  ncclResult_t first = ncclSuccess;
  std::string firstCall;
  for (std::size_t rank = 0; rank < comms.size(); ++rank) {
    const ncclResult_t r = launch(static_cast<int>(rank), comms[rank], streams[rank]);
    if (r != ncclSuccess && first == ncclSuccess) {
      first = r;
      firstCall = std::string(what) + " (rank " + std::to_string(rank) + ", cuda:" + std::to_string(devices[rank]) + ")";
    }
  }
  const ncclResult_t ended = n.groupEnd();
  if (first != ncclSuccess) throwNcclError(first, firstCall.c_str(), __FILE__, __LINE__);
  GPULAB_NCCL_CHECK(ended);
}

#endif  // GPULAB_HAVE_NCCL

}  // namespace

NcclInfo ncclInfoImpl() {
#if GPULAB_HAVE_NCCL
  const int count = deviceCountImpl();
  if (count < 2) {
    std::string why = "needs at least two GPUs; this machine has " + std::to_string(count);
    if (count == 0) why += " (no usable GPU: " + availabilityImpl().reason + ")";
    return {false, why};
  }
  Nccl& n = nccl();  // loaded only here, where it could run
  if (!n.error.empty()) return {false, n.error};
  return {true, "NCCL " + ncclVersionString(n.version) + " over " + std::to_string(count) + " GPUs"};
#else
  return {false, "GPU Lab was built without NCCL"};
#endif
}

#if GPULAB_HAVE_NCCL
void allReduceImpl(const std::vector<CollectiveBuffer>& buffers, std::size_t count, DType dtype, distributed::ReduceOp op) {
  const ncclDataType_t type = ncclTypeOf(dtype);
  const ncclRedOp_t reduce = op == distributed::ReduceOp::Avg ? ncclAvg : ncclSum;
  Nccl& n = nccl();
  // In place: each GPU's buffer is both what it sends and where the result lands.
  runGroup(buffers, "ncclAllReduce", [&](int rank, ncclComm_t comm, cudaStream_t stream) {
    void* data = buffers[static_cast<std::size_t>(rank)].data;
    return n.allReduce(data, data, count, type, reduce, comm, stream);
  });
}

void broadcastImpl(const std::vector<CollectiveBuffer>& buffers, std::size_t count, DType dtype, int root) {
  const ncclDataType_t type = ncclTypeOf(dtype);
  Nccl& n = nccl();
  runGroup(buffers, "ncclBroadcast", [&](int rank, ncclComm_t comm, cudaStream_t stream) {
    void* data = buffers[static_cast<std::size_t>(rank)].data;
    return n.broadcast(data, data, count, type, root, comm, stream);
  });
}
#else
void allReduceImpl(const std::vector<CollectiveBuffer>&, std::size_t, DType, distributed::ReduceOp) {
  throw Error("all_reduce: GPU Lab was built without NCCL");
}
void broadcastImpl(const std::vector<CollectiveBuffer>&, std::size_t, DType, int) {
  throw Error("broadcast: GPU Lab was built without NCCL");
}
#endif

}  // namespace gpulab::cuda
