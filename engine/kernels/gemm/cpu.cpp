// Matrix products on the CPU through OpenBLAS: sgemm for float32, dgemm for float64, each product
// cut into blocks of columns (or rows) over the engine's threads (engine/core/parallel.h says why not
// OpenBLAS's own), one single-threaded BLAS call a block. float16 and
// bfloat16 have no BLAS kernel in Debian's OpenBLAS, so their operands are widened to float32, multiplied
// by sgemm (float32 accumulation, as PyTorch's bfloat16 CPU matmul and every tensor-core GEMM) and
// rounded once on store -- the precision a GPU's half GEMM gives, at float32's CPU speed plus the
// conversions (the mixed-precision lesson measures that this is not faster on a CPU).
#include <vector>

#include "engine/core/dispatch.h"
#include "engine/kernels/cpu_backend.h"
#include "engine/kernels/gemm/cpu_blas.h"
#include "engine/kernels/cpu_convert.h"

namespace gpulab {

namespace {

std::size_t span(std::int64_t rows, std::int64_t cols, std::int64_t ld) {
  return static_cast<std::size_t>(rows > 0 ? (rows - 1) * ld + cols : 0);
}

// The float32 copy of one operand of a 16-bit GEMM, in the operand's own layout (leading dimension
// `ld`, `rows` rows as stored), into a buffer that only grows: a training step's GEMMs reuse it
// instead of allocating (and page-faulting) three buffers each.
template <class T>
float* widen(std::vector<float>& out, const T* in, std::int64_t rows, std::int64_t cols, std::int64_t ld) {
  if (out.size() < span(rows, cols, ld)) out.resize(span(rows, cols, ld));
  for (std::int64_t r = 0; r < rows; ++r) {
    float* o = out.data() + r * ld;
    const T* row = in + r * ld;
    if constexpr (std::is_same_v<T, Half>) {
      cpu::halfToFloat(row, o, cols);
    } else {
      for (std::int64_t c = 0; c < cols; ++c) o[c] = static_cast<float>(row[c]);
    }
  }
  return out.data();
}

}  // namespace

void CpuBackend::gemm(DType dtype, bool transA, bool transB, std::int64_t m, std::int64_t n, std::int64_t k,
                      double alpha, const void* a, std::int64_t lda, const void* b, std::int64_t ldb, double beta,
                      void* c, std::int64_t ldc, std::int64_t batch, std::int64_t strideA, std::int64_t strideB,
                      std::int64_t strideC) {
  dispatchFloating(dtype, "addmm", [&](auto tag) {
    using T = typename decltype(tag)::type;
    const T* A = static_cast<const T*>(a);
    const T* B = static_cast<const T*>(b);
    T* C = static_cast<T*>(c);
    if constexpr (std::is_same_v<T, float> || std::is_same_v<T, double>) {
      for (std::int64_t i = 0; i < batch; ++i)
        blas<T>(transA, transB, m, n, k, static_cast<T>(alpha), A + i * strideA, lda, B + i * strideB, ldb, static_cast<T>(beta),
                C + i * strideC, ldc);
    } else {
      // Per thread: lab workers and the GUI thread may multiply at the same time.
      thread_local std::vector<float> fa, fb, fc;
      for (std::int64_t i = 0; i < batch; ++i) {
        // Stored shapes: op(A) is m x k, so A is stored k x m when transposed; likewise B.
        const float* wa = widen(fa, A + i * strideA, transA ? k : m, transA ? m : k, lda);
        const float* wb = widen(fb, B + i * strideB, transB ? n : k, transB ? k : n, ldb);
        T* Ci = C + i * strideC;
        if (beta != 0.0) widen(fc, Ci, m, n, ldc);
        else if (fc.size() < span(m, n, ldc)) fc.resize(span(m, n, ldc));  // beta = 0: BLAS does not read C
        blas<float>(transA, transB, m, n, k, static_cast<float>(alpha), wa, lda, wb, ldb, static_cast<float>(beta), fc.data(), ldc);
        for (std::int64_t r = 0; r < m; ++r) {
          const float* row = fc.data() + r * ldc;
          if constexpr (std::is_same_v<T, Half>) {
            cpu::floatToHalf(row, Ci + r * ldc, n);
          } else {
            for (std::int64_t col = 0; col < n; ++col) Ci[r * ldc + col] = T(row[col]);
          }
        }
      }
    }
  });
}

}  // namespace gpulab
