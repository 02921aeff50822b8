// Batch normalisation on the CPU, the reference for norm/cuda.cu (cuDNN there).
//
// The input is (N, C, S) contiguous -- (N, C, H, W) with S = H * W, or (N, C) with S = 1 -- and every
// statistic is per channel over the N * S values of that channel. Statistics (weight, bias, running
// and saved stats) are in OpMath<T>: float for float16/bfloat16 input, the input's dtype otherwise
// (backend.h's contract). Sums accumulate in double, as PyTorch's CPU kernels do (acc_type<float,
// false> is double; batch_norm_cpu_collect_stats), and the variance is two-pass (sum of squared
// deviations from the mean), so a channel with a large mean loses nothing to cancellation.
//   forward (training)  mean = sum x / M,  var = sum (x - mean)^2 / M,  invstd = 1 / sqrt(var + eps)
//                       running_mean = (1 - momentum) running_mean + momentum mean
//                       running_var  = (1 - momentum) running_var  + momentum var M / (M - 1)
//   forward (eval)      mean = running_mean, invstd = 1 / sqrt(running_var + eps)
//   out = (x - mean) invstd weight + bias                                           M = N * S
//   backward            xhat = (x - mean) invstd
//                       gradBias = sum dy,  gradWeight = sum dy xhat
//                       gradInput = weight invstd / M (M dy - sum dy - xhat sum dy xhat)
#include <cmath>
#include <vector>

#include "engine/core/dispatch.h"
#include "engine/kernels/cpu_backend.h"

namespace gpulab {

namespace {

using BN = Backend::BatchNormShape;

// Element (n, c, s) of a contiguous (N, C, S) tensor.
inline std::int64_t at(const BN& s, std::int64_t n, std::int64_t c, std::int64_t i) {
  return (n * s.channels + c) * s.spatial + i;
}

// Sum of f(i) for i in [0, n), in double, as four interleaved partial sums: one running sum is a chain
// of dependent adds (one per add latency); four independent ones keep the adder busy and fit one
// vector register.
template <class F>
double sumOf(std::int64_t n, F f) {
  double a0 = 0, a1 = 0, a2 = 0, a3 = 0;
  std::int64_t i = 0;
  for (; i + 4 <= n; i += 4) {
    a0 += f(i);
    a1 += f(i + 1);
    a2 += f(i + 2);
    a3 += f(i + 3);
  }
  for (; i < n; ++i) a0 += f(i);
  return (a0 + a1) + (a2 + a3);
}

}  // namespace

void CpuBackend::batchNorm(const Tensor& out, const Tensor& input, const Tensor* weight, const Tensor* bias,
                           const Tensor* runningMean, const Tensor* runningVar, const Tensor* saveMean,
                           const Tensor* saveInvStd, bool training, const BatchNormShape& s) {
  dispatchFloating(input.dtype(), "batch_norm", [&](auto tag) {
    using T = typename decltype(tag)::type;
    using S = OpMath<T>;  // the statistics' type
    const T* x = input.data<T>();
    T* y = out.data<T>();
    const S* w = weight ? weight->data<S>() : nullptr;
    const S* b = bias ? bias->data<S>() : nullptr;
    S* rm = runningMean ? runningMean->data<S>() : nullptr;
    S* rv = runningVar ? runningVar->data<S>() : nullptr;
    const std::int64_t count = s.batch * s.spatial;
    for (std::int64_t c = 0; c < s.channels; ++c) {
      double mean, invstd;
      if (training) {
        double sum = 0;
        for (std::int64_t n = 0; n < s.batch; ++n) {
          const T* row = x + at(s, n, c, 0);
          sum += sumOf(s.spatial, [&](std::int64_t i) { return static_cast<double>(static_cast<S>(row[i])); });
        }
        mean = count > 0 ? sum / static_cast<double>(count) : 0.0;
        double sq = 0;
        for (std::int64_t n = 0; n < s.batch; ++n) {
          const T* row = x + at(s, n, c, 0);
          sq += sumOf(s.spatial, [&](std::int64_t i) {
            const double d = static_cast<double>(static_cast<S>(row[i])) - mean;
            return d * d;
          });
        }
        const double var = count > 0 ? sq / static_cast<double>(count) : 0.0;
        invstd = 1.0 / std::sqrt(var + s.eps);
        if (saveMean) saveMean->data<S>()[c] = static_cast<S>(mean);
        if (saveInvStd) saveInvStd->data<S>()[c] = static_cast<S>(invstd);
        if (rm) rm[c] = static_cast<S>((1.0 - s.momentum) * static_cast<double>(rm[c]) + s.momentum * mean);
        if (rv && count > 1) {
          const double unbiased = sq / static_cast<double>(count - 1);
          rv[c] = static_cast<S>((1.0 - s.momentum) * static_cast<double>(rv[c]) + s.momentum * unbiased);
        }
      } else {
        mean = static_cast<double>(rm[c]);
        invstd = 1.0 / std::sqrt(static_cast<double>(rv[c]) + s.eps);
      }
      // y = x * scale + shift in S, one rounding on store.
      const S scale = static_cast<S>(invstd * (w ? static_cast<double>(w[c]) : 1.0));
      const S shift = static_cast<S>((b ? static_cast<double>(b[c]) : 0.0) - mean * static_cast<double>(scale));
      for (std::int64_t n = 0; n < s.batch; ++n) {
        const T* xr = x + at(s, n, c, 0);
        T* yr = y + at(s, n, c, 0);
        for (std::int64_t i = 0; i < s.spatial; ++i) yr[i] = static_cast<T>(static_cast<S>(xr[i]) * scale + shift);
      }
    }
  });
}

void CpuBackend::batchNormBackward(const Tensor& gradInput, const Tensor* gradWeight, const Tensor* gradBias,
                                   const Tensor& gradOut, const Tensor& input, const Tensor* weight,
                                   const Tensor& saveMean, const Tensor& saveInvStd, const BatchNormShape& s) {
  dispatchFloating(input.dtype(), "batch_norm_backward", [&](auto tag) {
    using T = typename decltype(tag)::type;
    using S = OpMath<T>;
    const T* x = input.data<T>();
    const T* dy = gradOut.data<T>();
    T* dx = gradInput.data<T>();
    const S* w = weight ? weight->data<S>() : nullptr;
    const std::int64_t count = s.batch * s.spatial;
    for (std::int64_t c = 0; c < s.channels; ++c) {
      const double mean = static_cast<double>(saveMean.data<S>()[c]);
      const double invstd = static_cast<double>(saveInvStd.data<S>()[c]);
      double sumDy = 0, sumDyXhat = 0;
      for (std::int64_t n = 0; n < s.batch; ++n) {
        const T* xr = x + at(s, n, c, 0);
        const T* dyr = dy + at(s, n, c, 0);
        sumDy += sumOf(s.spatial, [&](std::int64_t i) { return static_cast<double>(static_cast<S>(dyr[i])); });
        sumDyXhat += sumOf(s.spatial, [&](std::int64_t i) {
          return static_cast<double>(static_cast<S>(dyr[i])) * (static_cast<double>(static_cast<S>(xr[i])) - mean) * invstd;
        });
      }
      if (gradBias) gradBias->data<S>()[c] = static_cast<S>(sumDy);
      if (gradWeight) gradWeight->data<S>()[c] = static_cast<S>(sumDyXhat);
      if (count == 0) continue;
      const double k0 = (w ? static_cast<double>(w[c]) : 1.0) * invstd;
      const double meanDy = sumDy / static_cast<double>(count), meanDyXhat = sumDyXhat / static_cast<double>(count);
      // The elementwise pass in S, as PyTorch's CPU kernel (its sums are double, its per-element math
      // the input's opmath type): k0 (dy - mean(dy) - (x - mean) invstd mean(dy xhat)), with the
      // per-channel factors computed in double once. (x - mean) is formed first, so a channel whose mean
      // is large against its spread cancels nothing.
      const S k0s = static_cast<S>(k0), meanDys = static_cast<S>(meanDy), means = static_cast<S>(mean);
      const S slope = static_cast<S>(invstd * meanDyXhat);
      for (std::int64_t n = 0; n < s.batch; ++n) {
        const T* xr = x + at(s, n, c, 0);
        const T* dyr = dy + at(s, n, c, 0);
        T* dxr = dx + at(s, n, c, 0);
        for (std::int64_t i = 0; i < s.spatial; ++i) {
          dxr[i] = static_cast<T>(k0s * (static_cast<S>(dyr[i]) - meanDys - (static_cast<S>(xr[i]) - means) * slope));
        }
      }
    }
  });
}

}  // namespace gpulab
