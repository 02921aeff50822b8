#pragma once
// Per-device CUDA state, created on first use and owned here rather than in globals scattered over
// the code: the compute stream every kernel and every copy into device memory runs on (one stream:
// a block freed on the host may be reused at once, because all later work is ordered after the
// kernels that still read it), and the cuBLAS and cuDNN handles bound to it.
#include <cublas_v2.h>
#include <cuda_runtime.h>
#include <cudnn.h>

#include <atomic>
#include <mutex>

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
  cudaStream_t computeStream() const { return compute_; }
  cublasHandle_t cublas() const { return cublas_; }
  cudnnHandle_t cudnn();  // created on first use: cuDNN initialisation is slow and not every run needs it
  int multiprocessorCount() const { return smCount_; }
  // Where kernels record a DeferredError (a device pointer to mapped host memory).
  DeferredError* deferredErrorSlot() const { return deferredDevice_; }
  // Throws the recorded error, if any, and clears it. Call it after the host has waited for the device.
  void raiseDeferredError();

 private:
  int device_;
  int ordinal_;
  int smCount_ = 0;
  cudaStream_t compute_ = nullptr;
  cublasHandle_t cublas_ = nullptr;
  cudnnHandle_t cudnn_ = nullptr;
  std::atomic<bool> cudnnReady_{false};
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
