// Row-wise softmax and log_softmax on the CPU, the reference for softmax/cuda.cu. Rows are computed
// in the math type (float for float16/bfloat16 inputs: autocast runs softmax in float32 anyway, and a
// float16 input is widened before exp) and rounded once on store.
#include <algorithm>
#include <cmath>
#include <limits>

#include "engine/core/dispatch.h"
#include "engine/kernels/cpu_backend.h"

namespace gpulab {

void CpuBackend::softmax(const Tensor& out, const Tensor& in, std::int64_t rows, std::int64_t cols, bool log) {
  dispatchFloating(in.dtype(), log ? "log_softmax" : "softmax", [&](auto tag) {
    using T = typename decltype(tag)::type;
    using M = OpMath<T>;
    const T* x = in.data<T>();
    T* y = out.data<T>();
    for (std::int64_t r = 0; r < rows; ++r) {
      const T* xr = x + r * cols;
      T* yr = y + r * cols;
      M mx = -std::numeric_limits<M>::infinity();
      for (std::int64_t c = 0; c < cols; ++c) mx = std::max(mx, static_cast<M>(xr[c]));
      M sum = 0;
      for (std::int64_t c = 0; c < cols; ++c) sum += fn::exp_(static_cast<M>(xr[c]) - mx);
      if (log) {
        // (x - max) - log(sum), PyTorch's order: folding max into lse = max + log(sum) first rounds
        // log(sum) to the ulp of max (about 1e-3 at max = 1e4) and loses the small terms.
        const M logSum = fn::log_(sum);
        for (std::int64_t c = 0; c < cols; ++c) yr[c] = static_cast<T>((static_cast<M>(xr[c]) - mx) - logSum);
      } else {
        const M inv = M(1) / sum;
        for (std::int64_t c = 0; c < cols; ++c) yr[c] = static_cast<T>(fn::exp_(static_cast<M>(xr[c]) - mx) * inv);
      }
    }
  });
}

void CpuBackend::softmaxBackward(const Tensor& gradIn, const Tensor& gradOut, const Tensor& out, std::int64_t rows,
                                 std::int64_t cols, bool log) {
  dispatchFloating(out.dtype(), log ? "log_softmax_backward" : "softmax_backward", [&](auto tag) {
    using T = typename decltype(tag)::type;
    using M = OpMath<T>;
    const T* g = gradOut.data<T>();
    const T* y = out.data<T>();
    T* gi = gradIn.data<T>();
    for (std::int64_t r = 0; r < rows; ++r) {
      const T* gr = g + r * cols;
      const T* yr = y + r * cols;
      T* dr = gi + r * cols;
      M dot = 0;
      if (log) {
        for (std::int64_t c = 0; c < cols; ++c) dot += static_cast<M>(gr[c]);
        for (std::int64_t c = 0; c < cols; ++c)
          dr[c] = static_cast<T>(static_cast<M>(gr[c]) - fn::exp_(static_cast<M>(yr[c])) * dot);
      } else {
        for (std::int64_t c = 0; c < cols; ++c) dot += static_cast<M>(gr[c]) * static_cast<M>(yr[c]);
        for (std::int64_t c = 0; c < cols; ++c)
          dr[c] = static_cast<T>(static_cast<M>(yr[c]) * (static_cast<M>(gr[c]) - dot));
      }
    }
  });
}

}  // namespace gpulab
