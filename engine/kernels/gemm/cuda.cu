// Matrix products on the GPU through cuBLAS (reference: gemm/cpu.cpp, OpenBLAS):
// - float32: cublasSgemm / cublasSgemmStridedBatched, full float32 math -- unless
//   torch.backends.cuda.matmul.allow_tf32 (cuda::allowTf32()) is on, then cublasGemmStridedBatchedEx
//   with CUBLAS_COMPUTE_32F_FAST_TF32: tensor cores on inputs rounded to TF32 (10-bit mantissa),
//   float32 accumulation. The handle's math mode is never changed, so nothing leaks between calls.
// - float64: cublasDgemm / cublasDgemmStridedBatched.
// - float16 / bfloat16: cublasGemmStridedBatchedEx with CUDA_R_16F / CUDA_R_16BF operands and result
//   and CUBLAS_COMPUTE_32F: tensor cores, float32 accumulation, alpha and beta in float, each output
//   rounded once -- PyTorch's half and bfloat16 matmul (the CPU reference widens to float32 and
//   multiplies with sgemm, the same precision).
// cuBLAS is column-major; a row-major C = op(A) op(B) is the column-major C^T = op(B)^T op(A)^T, so
// every call swaps the operands (and m with n). cuBLAS runs on the handle's stream, which
// DeviceContext::cublas() sets to the calling thread's current stream.
#include <cublas_v2.h>

#include <type_traits>

#include "engine/core/dispatch.h"
#include "engine/kernels/cuda/cuda_backend.h"
#include "engine/kernels/cuda/cuda_check.h"
#include "engine/runtime/cuda_runtime.h"

namespace gpulab {

namespace {

template <class T>
constexpr cudaDataType_t cudaTypeOf() {
  if constexpr (std::is_same_v<T, float>) return CUDA_R_32F;
  else if constexpr (std::is_same_v<T, double>) return CUDA_R_64F;
  else if constexpr (std::is_same_v<T, Half>) return CUDA_R_16F;
  else return CUDA_R_16BF;
}

// The float32-accumulating GEMM for float32 (compute FAST_TF32 or 32F) and the 16-bit types (32F).
template <class T>
void gemmEx(cublasHandle_t handle, cublasComputeType_t compute, cublasOperation_t opA, cublasOperation_t opB, int m,
            int n, int k, float alpha, const T* a, int lda, long long strideA, const T* b, int ldb, long long strideB,
            float beta, T* c, int ldc, long long strideC, int batch) {
  constexpr cudaDataType_t type = cudaTypeOf<T>();
  GPULAB_CUDA_CHECK(cublasGemmStridedBatchedEx(handle, opB, opA, n, m, k, &alpha, b, type, ldb, strideB, a, type, lda,
                                               strideA, &beta, c, type, ldc, strideC, batch, compute,
                                               CUBLAS_GEMM_DEFAULT));
}

}  // namespace

void CudaBackend::gemm(DType dtype, bool transA, bool transB, std::int64_t m, std::int64_t n, std::int64_t k,
                       double alpha, const void* a, std::int64_t lda, const void* b, std::int64_t ldb, double beta,
                       void* c, std::int64_t ldc, std::int64_t batch, std::int64_t strideA, std::int64_t strideB,
                       std::int64_t strideC) {
  if (m == 0 || n == 0 || batch == 0) return;
  auto& x = ctx();
  const auto cublas = x.cublas();  // set to this thread's stream, and held until the product is queued
  const cublasHandle_t handle = cublas.handle;
  const cublasOperation_t opA = transA ? CUBLAS_OP_T : CUBLAS_OP_N, opB = transB ? CUBLAS_OP_T : CUBLAS_OP_N;
  const int M = static_cast<int>(m), N = static_cast<int>(n), K = static_cast<int>(k);
  const int LDA = static_cast<int>(lda), LDB = static_cast<int>(ldb), LDC = static_cast<int>(ldc), B = static_cast<int>(batch);
  dispatchFloating(dtype, "addmm", [&](auto tag) {
    using T = typename decltype(tag)::type;
    const T* A = static_cast<const T*>(a);
    const T* Bm = static_cast<const T*>(b);
    T* C = static_cast<T*>(c);
    if constexpr (std::is_same_v<T, float>) {
      const float al = static_cast<float>(alpha), be = static_cast<float>(beta);
      if (cuda::allowTf32()) {
        gemmEx<float>(handle, CUBLAS_COMPUTE_32F_FAST_TF32, opA, opB, M, N, K, al, A, LDA, strideA, Bm, LDB, strideB, be, C,
                      LDC, strideC, B);
      } else if (batch == 1) {
        GPULAB_CUDA_CHECK(cublasSgemm(handle, opB, opA, N, M, K, &al, Bm, LDB, A, LDA, &be, C, LDC));
      } else {
        GPULAB_CUDA_CHECK(cublasSgemmStridedBatched(handle, opB, opA, N, M, K, &al, Bm, LDB, strideB, A, LDA, strideA, &be,
                                                    C, LDC, strideC, B));
      }
    } else if constexpr (std::is_same_v<T, double>) {
      if (batch == 1) {
        GPULAB_CUDA_CHECK(cublasDgemm(handle, opB, opA, N, M, K, &alpha, Bm, LDB, A, LDA, &beta, C, LDC));
      } else {
        GPULAB_CUDA_CHECK(cublasDgemmStridedBatched(handle, opB, opA, N, M, K, &alpha, Bm, LDB, strideB, A, LDA, strideA,
                                                    &beta, C, LDC, strideC, B));
      }
    } else {  // Half, BFloat16: layout-compatible with __half / __nv_bfloat16
      gemmEx<T>(handle, CUBLAS_COMPUTE_32F, opA, opB, M, N, K, static_cast<float>(alpha), A, LDA, strideA, Bm, LDB,
                strideB, static_cast<float>(beta), C, LDC, strideC, B);
    }
  });
}

}  // namespace gpulab
