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

inline void check(cudaError_t status, const char* call, const char* file, int line) {
  if (status != cudaSuccess) {
    const bool oom = status == cudaErrorMemoryAllocation;
    cudaGetLastError();  // clear the sticky-free error state so the engine stays usable
    throwCudaError(call, file, line, std::string(cudaGetErrorName(status)) + ": " + cudaGetErrorString(status), oom);
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
