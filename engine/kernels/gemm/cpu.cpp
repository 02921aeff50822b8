// Matrix products on the CPU through OpenBLAS: sgemm for float32, dgemm for float64. float16 and
// bfloat16 have no BLAS kernel in Debian's OpenBLAS, so their operands are widened to float32, multiplied
// by sgemm (float32 accumulation, as PyTorch's bfloat16 CPU matmul and every tensor-core GEMM) and
// rounded once on store -- the precision a GPU's half GEMM gives, at float32's CPU speed plus the
// conversions (the mixed-precision lesson measures that this is not faster on a CPU).
#include <cblas.h>

#include <vector>

#include "engine/core/dispatch.h"
#include "engine/kernels/cpu_backend.h"

namespace gpulab {

namespace {

// The float32 copy of one operand of a 16-bit GEMM, in the operand's own layout (leading dimension
// `ld`, `rows` rows as stored).
template <class T>
void widen(std::vector<float>& out, const T* in, std::int64_t rows, std::int64_t cols, std::int64_t ld) {
  out.resize(static_cast<std::size_t>(rows > 0 ? (rows - 1) * ld + cols : 0));
  for (std::int64_t r = 0; r < rows; ++r)
    for (std::int64_t c = 0; c < cols; ++c) out[static_cast<std::size_t>(r * ld + c)] = static_cast<float>(in[r * ld + c]);
}

}  // namespace

void CpuBackend::gemm(DType dtype, bool transA, bool transB, std::int64_t m, std::int64_t n, std::int64_t k,
                      double alpha, const void* a, std::int64_t lda, const void* b, std::int64_t ldb, double beta,
                      void* c, std::int64_t ldc, std::int64_t batch, std::int64_t strideA, std::int64_t strideB,
                      std::int64_t strideC) {
  const CBLAS_TRANSPOSE ta = transA ? CblasTrans : CblasNoTrans, tb = transB ? CblasTrans : CblasNoTrans;
  const auto M = static_cast<blasint>(m), N = static_cast<blasint>(n), K = static_cast<blasint>(k);
  dispatchFloating(dtype, "addmm", [&](auto tag) {
    using T = typename decltype(tag)::type;
    const T* A = static_cast<const T*>(a);
    const T* B = static_cast<const T*>(b);
    T* C = static_cast<T*>(c);
    if constexpr (std::is_same_v<T, float>) {
      for (std::int64_t i = 0; i < batch; ++i)
        cblas_sgemm(CblasRowMajor, ta, tb, M, N, K, static_cast<float>(alpha), A + i * strideA, static_cast<blasint>(lda),
                    B + i * strideB, static_cast<blasint>(ldb), static_cast<float>(beta), C + i * strideC,
                    static_cast<blasint>(ldc));
    } else if constexpr (std::is_same_v<T, double>) {
      for (std::int64_t i = 0; i < batch; ++i)
        cblas_dgemm(CblasRowMajor, ta, tb, M, N, K, alpha, A + i * strideA, static_cast<blasint>(lda), B + i * strideB,
                    static_cast<blasint>(ldb), beta, C + i * strideC, static_cast<blasint>(ldc));
    } else {
      std::vector<float> fa, fb, fc;
      for (std::int64_t i = 0; i < batch; ++i) {
        // Stored shapes: op(A) is m x k, so A is stored k x m when transposed; likewise B.
        widen(fa, A + i * strideA, transA ? k : m, transA ? m : k, lda);
        widen(fb, B + i * strideB, transB ? n : k, transB ? k : n, ldb);
        T* Ci = C + i * strideC;
        if (beta != 0.0) widen(fc, Ci, m, n, ldc);
        else fc.assign(static_cast<std::size_t>(m > 0 ? (m - 1) * ldc + n : 0), 0.0f);
        cblas_sgemm(CblasRowMajor, ta, tb, M, N, K, static_cast<float>(alpha), fa.data(), static_cast<blasint>(lda),
                    fb.data(), static_cast<blasint>(ldb), static_cast<float>(beta), fc.data(), static_cast<blasint>(ldc));
        for (std::int64_t r = 0; r < m; ++r)
          for (std::int64_t col = 0; col < n; ++col) Ci[r * ldc + col] = T(fc[static_cast<std::size_t>(r * ldc + col)]);
      }
    }
  });
}

}  // namespace gpulab
