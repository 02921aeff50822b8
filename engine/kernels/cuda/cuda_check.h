#pragma once
// One macro family for every CUDA-library status: cudart, cuBLAS and cuDNN. A failure becomes a
// CudaError naming the call, the file and line, and the library's own message. Kernel launches are
// followed by GPULAB_CUDA_CHECK_LAUNCH(), which reports launch-configuration errors at once.
#include <cublas_v2.h>
#include <cuda_runtime.h>
#include <cudnn.h>

#include <string>

namespace gpulab::cuda {

[[noreturn]] void throwCudaError(const char* call, const char* file, int line, const std::string& message, bool outOfMemory);

// Errors after which the CUDA context is unusable for the rest of the process (every later call fails
// the same way): a kernel faulted. PyTorch says the same; the only remedy is a new process.
inline bool isStickyError(cudaError_t status) {
  switch (status) {
    case cudaErrorIllegalAddress:
    case cudaErrorLaunchFailure:
    case cudaErrorHardwareStackError:
    case cudaErrorIllegalInstruction:
    case cudaErrorMisalignedAddress:
    case cudaErrorInvalidAddressSpace:
    case cudaErrorInvalidPc:
    case cudaErrorAssert:
    case cudaErrorLaunchTimeout:
    case cudaErrorECCUncorrectable:
      return true;
    default:
      return false;
  }
}

inline void check(cudaError_t status, const char* call, const char* file, int line) {
  if (status != cudaSuccess) {
    const bool oom = status == cudaErrorMemoryAllocation;
    cudaGetLastError();  // clears a non-sticky error so the engine stays usable
    std::string message = std::string(cudaGetErrorName(status)) + ": " + cudaGetErrorString(status);
    if (isStickyError(status)) {
      message += "\n  CUDA kernel errors are reported asynchronously, at a later CUDA call, so this call may not be the"
                 " one that failed. The error is sticky: the GPU's context is lost for this process, and every later"
                 " CUDA call will fail. Restart GPU Lab to use the GPU again.";
    }
    throwCudaError(call, file, line, message, oom);
  }
}
inline void check(cublasStatus_t status, const char* call, const char* file, int line) {
  if (status != CUBLAS_STATUS_SUCCESS) {
    throwCudaError(call, file, line, std::string(cublasGetStatusName(status)) + ": " + cublasGetStatusString(status),
                   status == CUBLAS_STATUS_ALLOC_FAILED);
  }
}
inline void check(cudnnStatus_t status, const char* call, const char* file, int line) {
  if (status != CUDNN_STATUS_SUCCESS) throwCudaError(call, file, line, cudnnGetErrorString(status), false);
}

}  // namespace gpulab::cuda

#define GPULAB_CUDA_CHECK(call) ::gpulab::cuda::check((call), #call, __FILE__, __LINE__)
#define GPULAB_CUDA_CHECK_LAUNCH() ::gpulab::cuda::check(cudaGetLastError(), "kernel launch", __FILE__, __LINE__)
