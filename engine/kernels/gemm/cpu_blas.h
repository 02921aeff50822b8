#pragma once
// One row-major BLAS product on the CPU, split over the engine's threads: the GEMMs of addmm/matmul
// (gemm/cpu.cpp) and of the convolutions (conv/cpu.cpp). OpenBLAS runs single-threaded (the CPU
// backend sets it; engine/core/parallel.h says why), so the split is what uses the other cores.
#include <cblas.h>

#include <algorithm>
#include <cstdint>
#include <type_traits>

#include "engine/core/parallel.h"

namespace gpulab {

// C (m x n) = alpha op(A) op(B) + beta C in row-major T (float or double), the longer of m and n cut
// into blocks over the threads. Blocks are multiples of 16 (the BLAS kernels' tiles), and a block does
// at least ~128k multiply-adds: a small product stays one call, since waking a thread costs microseconds.
template <class T>
inline void blas(bool transA, bool transB, std::int64_t m, std::int64_t n, std::int64_t k, T alpha, const T* a, std::int64_t lda,
          const T* b, std::int64_t ldb, T beta, T* c, std::int64_t ldc) {
  auto call = [&](std::int64_t rows, std::int64_t cols, const T* A, const T* B, T* C) {
    const CBLAS_TRANSPOSE ta = transA ? CblasTrans : CblasNoTrans, tb = transB ? CblasTrans : CblasNoTrans;
    const auto M = static_cast<blasint>(rows), N = static_cast<blasint>(cols), K = static_cast<blasint>(k);
    if constexpr (std::is_same_v<T, float>) {
      cblas_sgemm(CblasRowMajor, ta, tb, M, N, K, alpha, A, static_cast<blasint>(lda), B, static_cast<blasint>(ldb), beta, C,
                  static_cast<blasint>(ldc));
    } else {
      cblas_dgemm(CblasRowMajor, ta, tb, M, N, K, alpha, A, static_cast<blasint>(lda), B, static_cast<blasint>(ldb), beta, C,
                  static_cast<blasint>(ldc));
    }
  };
  if (m == 0 || n == 0) return;
  constexpr std::int64_t kTile = 16, kMinMacsPerBlock = std::int64_t{1} << 17;
  const bool byColumns = n >= m;
  const std::int64_t length = byColumns ? n : m, other = byColumns ? m : n;
  const std::int64_t tiles = (length + kTile - 1) / kTile;
  const std::int64_t grain = std::max<std::int64_t>(1, kMinMacsPerBlock / std::max<std::int64_t>(kTile * other * std::max<std::int64_t>(k, 1), 1));
  parallelFor(tiles, grain, [&](int, std::int64_t t0, std::int64_t t1) {
    const std::int64_t i0 = t0 * kTile, i1 = std::min(length, t1 * kTile);
    if (byColumns)  // columns [i0, i1) of op(B) and C
      call(m, i1 - i0, a, transB ? b + i0 * ldb : b + i0, c + i0);
    else  // rows [i0, i1) of op(A) and C
      call(i1 - i0, n, transA ? a + i0 : a + i0 * lda, b, c + i0 * ldc);
  });
}

}  // namespace gpulab
