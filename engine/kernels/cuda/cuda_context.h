#pragma once
// Per-device CUDA state, created on first use and owned here rather than in globals scattered over
// the code: the device's streams -- its default stream (GPU Lab's stream 0, a non-blocking stream of its
// own) and the pool that torch.cuda.Stream() hands out (ids 1..kStreamPoolSize, made on first use) --
// and the cuBLAS and cuDNN handles. Every kernel and copy runs on the calling thread's current stream
// of the device (engine/runtime/stream.h): a block freed on the host is reused at once only by work on
// the stream it was allocated for, which is ordered after the kernels that still read it; work on
// another stream must record_stream() it (the caching allocator's rule, as PyTorch's).
#include <cublas_v2.h>
#include <cuda_runtime.h>
#include <cudnn.h>

#include <array>
#include <atomic>
#include <cstdint>
#include <mutex>

#include "engine/runtime/stream.h"

namespace gpulab::cuda {

// An error a kernel found (an out-of-range class label), written by the kernel straight into mapped
// host memory so that finding none costs no synchronisation. It is raised at the next point where the
// host waits for the device anyway -- synchronize(), a copy to the host such as .item() -- as CUDA's
// device-side asserts are; unlike them it leaves the device usable.
struct DeferredError {
  int flagged;
  int pad;
  long long value;  // the offending label
  long long bound;  // the number of classes
};

class DeviceContext {
 public:
  explicit DeviceContext(int device);
  ~DeviceContext();
  DeviceContext(const DeviceContext&) = delete;
  DeviceContext& operator=(const DeviceContext&) = delete;

  int device() const { return device_; }    // the engine's cuda:N
  int ordinal() const { return ordinal_; }  // the CUDA runtime's ordinal of that GPU (see device_selection.h)
  // The stream with GPU Lab's id `id` (0: the default stream; 1..kStreamPoolSize: the pool's).
  cudaStream_t stream(std::uintptr_t id) const {
    if (id == 0) return compute_;
    if (id <= kStreamPoolSize) {
      if (cudaStream_t s = pool_[id - 1].load(std::memory_order_acquire)) return s;
    }
    return createPoolStream(id);
  }
  // The calling thread's current stream of this device (torch.cuda.current_stream()): where kernels
  // and copies go.
  cudaStream_t currentStream() const { return stream(gpulab::currentStreamId(gpulab::Device(gpulab::DeviceType::CUDA, device_))); }
  // Waits for every stream of the device (torch.cuda.synchronize()).
  void synchronizeAll();

  // A library handle set to the calling thread's current stream, and held -- other threads wait -- until
  // this goes out of scope: one handle serves every thread, and a handle's stream is per handle, so
  // setting it and launching must not interleave with another thread's.
  template <typename Handle>
  struct Bound {
    Handle handle;
    std::unique_lock<std::mutex> hold;
  };
  Bound<cublasHandle_t> cublas();
  Bound<cudnnHandle_t> cudnn();  // created on first use: cuDNN initialisation is slow and not every run needs it
  int multiprocessorCount() const { return smCount_; }
  // Where kernels record a DeferredError (a device pointer to mapped host memory).
  DeferredError* deferredErrorSlot() const { return deferredDevice_; }
  // Throws the recorded error, if any, and clears it. Call it after the host has waited for the device.
  void raiseDeferredError();

 private:
  int device_;
  int ordinal_;
  cudaStream_t createPoolStream(std::uintptr_t id) const;  // made on first use: logically const

  int smCount_ = 0;
  cudaStream_t compute_ = nullptr;
  mutable std::array<std::atomic<cudaStream_t>, kStreamPoolSize> pool_{};
  mutable std::mutex poolMutex_;
  cublasHandle_t cublas_ = nullptr;
  cudaStream_t cublasStream_ = nullptr;  // the stream cublas_ is set to
  std::mutex cublasMutex_;
  cudnnHandle_t cudnn_ = nullptr;
  cudaStream_t cudnnStream_ = nullptr;
  std::mutex cudnnMutex_;
  DeferredError* deferredHost_ = nullptr;
  DeferredError* deferredDevice_ = nullptr;
};

// The context of `device`; also makes it the current device of the calling thread.
DeviceContext& context(int device);

// The CUDA ordinal of the engine's cuda:index.
int ordinalOf(int index);

// RAII: makes the GPU with CUDA ordinal `ordinal` current for this thread, restores the previous one.
class DeviceGuard {
 public:
  explicit DeviceGuard(int ordinal);
  ~DeviceGuard();
  DeviceGuard(const DeviceGuard&) = delete;
  DeviceGuard& operator=(const DeviceGuard&) = delete;

 private:
  int previous_ = 0;
};

}  // namespace gpulab::cuda
