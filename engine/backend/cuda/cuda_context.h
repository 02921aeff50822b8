#pragma once
// Per-device CUDA state, created on first use and owned here rather than in globals scattered over
// the code: the compute stream every kernel runs on, a copy stream for asynchronous host-to-device
// copies, and the cuBLAS and cuDNN handles bound to the compute stream.
#include <cublas_v2.h>
#include <cuda_runtime.h>
#include <cudnn.h>

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

  int device() const { return device_; }
  cudaStream_t computeStream() const { return compute_; }
  cudaStream_t copyStream() const { return copy_; }
  cublasHandle_t cublas() const { return cublas_; }
  cudnnHandle_t cudnn();  // created on first use: cuDNN initialisation is slow and not every run needs it
  int multiprocessorCount() const { return smCount_; }
  // Where kernels record a DeferredError (a device pointer to mapped host memory).
  DeferredError* deferredErrorSlot() const { return deferredDevice_; }
  // Throws the recorded error, if any, and clears it. Call it after the host has waited for the device.
  void raiseDeferredError();

 private:
  int device_;
  int smCount_ = 0;
  cudaStream_t compute_ = nullptr;
  cudaStream_t copy_ = nullptr;
  cublasHandle_t cublas_ = nullptr;
  cudnnHandle_t cudnn_ = nullptr;
  DeferredError* deferredHost_ = nullptr;
  DeferredError* deferredDevice_ = nullptr;
};

// The context of `device`; also makes it the current device of the calling thread.
DeviceContext& context(int device);

// RAII: makes `device` current for this thread, restores the previous one on exit.
class DeviceGuard {
 public:
  explicit DeviceGuard(int device);
  ~DeviceGuard();
  DeviceGuard(const DeviceGuard&) = delete;
  DeviceGuard& operator=(const DeviceGuard&) = delete;

 private:
  int previous_ = 0;
};

}  // namespace gpulab::cuda
