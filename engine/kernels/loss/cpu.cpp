// Losses on the CPU, the reference for loss/cuda.cu: nll_loss (log-probabilities and int64 class
// labels) and the pointwise mse/l1 losses, summed in double and scaled by 1/N for 'mean'.
#include <algorithm>
#include <cmath>
#include <string>

#include "engine/core/dispatch.h"
#include "engine/kernels/cpu_backend.h"

namespace gpulab {

namespace {
void checkTarget(std::int64_t t, std::int64_t cols) {
  if (t < 0 || t >= cols) throw IndexError("Target " + std::to_string(t) + " is out of bounds.");
}
}  // namespace

void CpuBackend::nllLoss(const Tensor& out, const Tensor& logp, const Tensor& target, std::int64_t rows,
                         std::int64_t cols, double scale) {
  dispatchFloating(logp.dtype(), "nll_loss", [&](auto tag) {
    using T = typename decltype(tag)::type;
    using M = OpMath<T>;
    const T* lp = logp.data<T>();
    const std::int64_t* t = target.data<std::int64_t>();
    double acc = 0.0;
    for (std::int64_t r = 0; r < rows; ++r) {
      checkTarget(t[r], cols);
      acc -= static_cast<M>(lp[r * cols + t[r]]);
    }
    out.data<T>()[0] = static_cast<T>(static_cast<M>(acc * scale));
  });
}

void CpuBackend::nllLossBackward(const Tensor& gradLogp, const Tensor& gradOut, const Tensor& target,
                                 std::int64_t rows, std::int64_t cols, double scale) {
  dispatchFloating(gradLogp.dtype(), "nll_loss_backward", [&](auto tag) {
    using T = typename decltype(tag)::type;
    using M = OpMath<T>;
    T* g = gradLogp.data<T>();
    const std::int64_t* t = target.data<std::int64_t>();
    const T v = static_cast<T>(-static_cast<M>(scale) * static_cast<M>(gradOut.data<T>()[0]));
    std::fill_n(g, rows * cols, static_cast<T>(0.0));
    for (std::int64_t r = 0; r < rows; ++r) {
      checkTarget(t[r], cols);
      g[r * cols + t[r]] = v;
    }
  });
}

void CpuBackend::pointLoss(PointLoss kind, const Tensor& out, const Tensor& a, const Tensor& b, double scale) {
  dispatchFloating(a.dtype(), kind == PointLoss::MSE ? "mse_loss" : "l1_loss", [&](auto tag) {
    using T = typename decltype(tag)::type;
    using M = OpMath<T>;
    const T* x = a.data<T>();
    const T* y = b.data<T>();
    double acc = 0.0;
    for (std::int64_t i = 0, n = a.numel(); i < n; ++i) {
      const M d = static_cast<M>(x[i]) - static_cast<M>(y[i]);
      acc += kind == PointLoss::MSE ? d * d : fn::fabs_(d);
    }
    out.data<T>()[0] = static_cast<T>(static_cast<M>(acc * scale));
  });
}

void CpuBackend::pointLossBackward(PointLoss kind, const Tensor& gradA, const Tensor& gradOut, const Tensor& a,
                                   const Tensor& b, double scale) {
  dispatchFloating(a.dtype(), kind == PointLoss::MSE ? "mse_loss_backward" : "l1_loss_backward", [&](auto tag) {
    using T = typename decltype(tag)::type;
    using M = OpMath<T>;
    const T* x = a.data<T>();
    const T* y = b.data<T>();
    T* g = gradA.data<T>();
    const M s = static_cast<M>(scale) * static_cast<M>(gradOut.data<T>()[0]);
    for (std::int64_t i = 0, n = a.numel(); i < n; ++i) {
      const M d = static_cast<M>(x[i]) - static_cast<M>(y[i]);
      g[i] = static_cast<T>(kind == PointLoss::MSE ? M(2) * s * d : s * static_cast<M>((d > M(0)) - (d < M(0))));
    }
  });
}

}  // namespace gpulab
