// Batch normalisation on the CPU, the reference for norm/cuda.cu (cuDNN there).
//
// The input is (N, C, S) contiguous -- (N, C, H, W) with S = H * W, or (N, C) with S = 1 -- and every
// statistic is per channel over the N * S values of that channel. Statistics (weight, bias, running
// and saved stats) are in OpMath<T>: float for float16/bfloat16 input, the input's dtype otherwise
// (backend.h's contract). Sums accumulate in double, as PyTorch's CPU kernels do (acc_type<float,
// false> is double; batch_norm_cpu_collect_stats). The sums are of deviations from the channel's first
// value (one pass for both, where PyTorch makes two), so a channel with a large mean loses nothing to
// cancellation. Channels are shared out over the engine's threads. float32 rows run AVX2/FMA loops
// where the CPU has them (the sums in double four at a time, the elementwise passes eight floats at a
// time); the build's baseline target is SSE2.
//   forward (training)  mean = sum x / M,  var = sum (x - mean)^2 / M,  invstd = 1 / sqrt(var + eps)
//                       running_mean = (1 - momentum) running_mean + momentum mean
//                       running_var  = (1 - momentum) running_var  + momentum var M / (M - 1)
//   forward (eval)      mean = running_mean, invstd = 1 / sqrt(running_var + eps)
//   out = (x - mean) invstd weight + bias                                           M = N * S
//   backward            xhat = (x - mean) invstd
//                       gradBias = sum dy,  gradWeight = sum dy xhat
//                       gradInput = weight invstd / M (M dy - sum dy - xhat sum dy xhat)
#include <algorithm>
#include <cmath>
#include <cstring>
#include <type_traits>
#include <utility>
#include <vector>

#include "engine/core/dispatch.h"
#include "engine/core/parallel.h"
#include "engine/kernels/cpu_backend.h"
#include "engine/core/cpu_features.h"

#if defined(__x86_64__)  // SSE2 intrinsics (the baseline) and AVX2/FMA loops chosen at run time
#include <immintrin.h>
#define GPULAB_NORM_X86_64_PATHS 1
#endif

namespace gpulab {

namespace {

using BN = Backend::BatchNormShape;

// Element (n, c, s) of a contiguous (N, C, S) tensor.
inline std::int64_t at(const BN& s, std::int64_t n, std::int64_t c, std::int64_t i) {
  return (n * s.channels + c) * s.spatial + i;
}

// The sums are in double, two elements at a time as one SSE2 vector, in two interleaved chains: the
// compiler keeps a scalar double loop as written (it may not reorder additions), one add latency an
// element; this does four elements in about that time.
using Double2 = double __attribute__((vector_size(16)));

template <class T>
inline Double2 load2(const T* p) {
  if constexpr (std::is_same_v<T, float>) {
#if defined(GPULAB_NORM_X86_64_PATHS)
    // One 8-byte load and one cvtps2pd (GCC made two scalar loads and converts of the portable form).
    return Double2(_mm_cvtps_pd(_mm_castsi128_ps(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(p)))));
#else
    using Float2 = float __attribute__((vector_size(8)));
    Float2 f;
    std::memcpy(&f, p, sizeof f);
    return __builtin_convertvector(f, Double2);
#endif
  } else {
    return Double2{static_cast<double>(static_cast<OpMath<T>>(p[0])), static_cast<double>(static_cast<OpMath<T>>(p[1]))};
  }
}
template <class T>
inline double load1(const T* p) {
  return static_cast<double>(static_cast<OpMath<T>>(*p));
}

// (sum of d, sum of d^2) for d = x[i] - shift over a row of n values.
template <class T>
std::pair<double, double> shiftedSums(const T* x, std::int64_t n, double shift) {
  const Double2 sh = {shift, shift};
  Double2 s0 = {0, 0}, s1 = s0, q0 = s0, q1 = s0;
  std::int64_t i = 0;
  for (; i + 4 <= n; i += 4) {
    const Double2 a = load2(x + i) - sh, b = load2(x + i + 2) - sh;
    s0 += a;
    s1 += b;
    q0 += a * a;
    q1 += b * b;
  }
  const Double2 sv = s0 + s1, qv = q0 + q1;
  double sum = sv[0] + sv[1], sq = qv[0] + qv[1];
  for (; i < n; ++i) {
    const double d = load1(x + i) - shift;
    sum += d;
    sq += d * d;
  }
  return {sum, sq};
}

// (sum of dy, sum of dy (x - mean)) over a row of n values.
template <class T>
std::pair<double, double> gradientSums(const T* dy, const T* x, std::int64_t n, double mean) {
  const Double2 m = {mean, mean};
  Double2 s0 = {0, 0}, s1 = s0, p0 = s0, p1 = s0;
  std::int64_t i = 0;
  for (; i + 4 <= n; i += 4) {
    const Double2 ga = load2(dy + i), gb = load2(dy + i + 2);
    s0 += ga;
    s1 += gb;
    p0 += ga * (load2(x + i) - m);
    p1 += gb * (load2(x + i + 2) - m);
  }
  const Double2 sv = s0 + s1, pv = p0 + p1;
  double sum = sv[0] + sv[1], product = pv[0] + pv[1];
  for (; i < n; ++i) {
    const double g = load1(dy + i);
    sum += g;
    product += g * (load1(x + i) - mean);
  }
  return {sum, product};
}

#if defined(GPULAB_NORM_X86_64_PATHS)
// float32 rows on a CPU with AVX2 and FMA (compiled for it whatever the build's target): the same sums
// in double, four at a time, and the elementwise passes eight floats at a time. Everything else -- the
// per-channel factors, the order the rows are summed in -- is shared with the portable loops.
__attribute__((target("avx2,fma"))) double horizontalSum(__m256d v) {
  const __m128d pair = _mm_add_pd(_mm256_castpd256_pd128(v), _mm256_extractf128_pd(v, 1));
  return _mm_cvtsd_f64(_mm_add_sd(pair, _mm_unpackhi_pd(pair, pair)));
}

__attribute__((target("avx2,fma"))) std::pair<double, double> shiftedSumsAvx2(const float* x, std::int64_t n, double shift) {
  const __m256d sh = _mm256_set1_pd(shift);
  __m256d s0 = _mm256_setzero_pd(), s1 = s0, q0 = s0, q1 = s0;
  std::int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m256d a = _mm256_sub_pd(_mm256_cvtps_pd(_mm_loadu_ps(x + i)), sh);
    const __m256d b = _mm256_sub_pd(_mm256_cvtps_pd(_mm_loadu_ps(x + i + 4)), sh);
    s0 = _mm256_add_pd(s0, a);
    s1 = _mm256_add_pd(s1, b);
    q0 = _mm256_fmadd_pd(a, a, q0);
    q1 = _mm256_fmadd_pd(b, b, q1);
  }
  double sum = horizontalSum(_mm256_add_pd(s0, s1)), sq = horizontalSum(_mm256_add_pd(q0, q1));
  for (; i < n; ++i) {
    const double d = static_cast<double>(x[i]) - shift;
    sum += d;
    sq += d * d;
  }
  return {sum, sq};
}

__attribute__((target("avx2,fma"))) std::pair<double, double> gradientSumsAvx2(const float* dy, const float* x, std::int64_t n,
                                                                               double mean) {
  const __m256d m = _mm256_set1_pd(mean);
  __m256d s0 = _mm256_setzero_pd(), s1 = s0, p0 = s0, p1 = s0;
  std::int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m256d ga = _mm256_cvtps_pd(_mm_loadu_ps(dy + i)), gb = _mm256_cvtps_pd(_mm_loadu_ps(dy + i + 4));
    s0 = _mm256_add_pd(s0, ga);
    s1 = _mm256_add_pd(s1, gb);
    p0 = _mm256_fmadd_pd(ga, _mm256_sub_pd(_mm256_cvtps_pd(_mm_loadu_ps(x + i)), m), p0);
    p1 = _mm256_fmadd_pd(gb, _mm256_sub_pd(_mm256_cvtps_pd(_mm_loadu_ps(x + i + 4)), m), p1);
  }
  double sum = horizontalSum(_mm256_add_pd(s0, s1)), product = horizontalSum(_mm256_add_pd(p0, p1));
  for (; i < n; ++i) {
    const double g = dy[i];
    sum += g;
    product += g * (static_cast<double>(x[i]) - mean);
  }
  return {sum, product};
}

// y = x * scale + shift
__attribute__((target("avx2,fma"))) void affineRowAvx2(const float* x, float* y, std::int64_t n, float scale, float shift) {
  const __m256 a = _mm256_set1_ps(scale), b = _mm256_set1_ps(shift);
  std::int64_t i = 0;
  for (; i + 8 <= n; i += 8) _mm256_storeu_ps(y + i, _mm256_fmadd_ps(_mm256_loadu_ps(x + i), a, b));
  for (; i < n; ++i) y[i] = x[i] * scale + shift;
}

// dx = k0 (dy - meanDy - (x - mean) slope)
__attribute__((target("avx2,fma"))) void gradientRowAvx2(const float* dy, const float* x, float* dx, std::int64_t n, float k0,
                                                         float meanDy, float mean, float slope) {
  const __m256 k = _mm256_set1_ps(k0), md = _mm256_set1_ps(meanDy), mu = _mm256_set1_ps(mean), sl = _mm256_set1_ps(slope);
  std::int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m256 centred = _mm256_sub_ps(_mm256_loadu_ps(x + i), mu);
    const __m256 g = _mm256_sub_ps(_mm256_sub_ps(_mm256_loadu_ps(dy + i), md), _mm256_mul_ps(centred, sl));
    _mm256_storeu_ps(dx + i, _mm256_mul_ps(k, g));
  }
  for (; i < n; ++i) dx[i] = k0 * (dy[i] - meanDy - (x[i] - mean) * slope);
}
#endif

// The rows of a channel, with the float32 AVX2 loops where the CPU has them.
template <class T>
std::pair<double, double> rowShiftedSums(const T* x, std::int64_t n, double shift, bool avx2) {
#if defined(GPULAB_NORM_X86_64_PATHS)
  if constexpr (std::is_same_v<T, float>)
    if (avx2) return shiftedSumsAvx2(x, n, shift);
#endif
  (void)avx2;
  return shiftedSums(x, n, shift);
}

template <class T>
std::pair<double, double> rowGradientSums(const T* dy, const T* x, std::int64_t n, double mean, bool avx2) {
#if defined(GPULAB_NORM_X86_64_PATHS)
  if constexpr (std::is_same_v<T, float>)
    if (avx2) return gradientSumsAvx2(dy, x, n, mean);
#endif
  (void)avx2;
  return gradientSums(dy, x, n, mean);
}

template <class T, class S>
void affineRow(const T* x, T* y, std::int64_t n, S scale, S shift, bool avx2) {
#if defined(GPULAB_NORM_X86_64_PATHS)
  if constexpr (std::is_same_v<T, float>)
    if (avx2) return affineRowAvx2(x, y, n, scale, shift);
#endif
  (void)avx2;
  for (std::int64_t i = 0; i < n; ++i) y[i] = static_cast<T>(static_cast<S>(x[i]) * scale + shift);
}

template <class T, class S>
void gradientRow(const T* dy, const T* x, T* dx, std::int64_t n, S k0, S meanDy, S mean, S slope, bool avx2) {
#if defined(GPULAB_NORM_X86_64_PATHS)
  if constexpr (std::is_same_v<T, float>)
    if (avx2) return gradientRowAvx2(dy, x, dx, n, k0, meanDy, mean, slope);
#endif
  (void)avx2;
  for (std::int64_t i = 0; i < n; ++i) dx[i] = static_cast<T>(k0 * (static_cast<S>(dy[i]) - meanDy - (static_cast<S>(x[i]) - mean) * slope));
}

// Whether the float32 rows run the AVX2 loops above.
bool avx2Rows() {
#if defined(GPULAB_NORM_X86_64_PATHS)
  return cpuFeatures().avx2Fma();
#else
  return false;
#endif
}

// The channels over the engine's threads, each channel whole in one thread (its sums in one order
// whatever the thread count), at least ~32k values a part.
template <class F>
void forChannels(const BN& s, F perChannel) {
  const std::int64_t grain = std::max<std::int64_t>(1, (std::int64_t{1} << 15) / std::max<std::int64_t>(s.batch * s.spatial, 1));
  parallelFor(s.channels, grain, [&](int, std::int64_t c0, std::int64_t c1) {
    for (std::int64_t c = c0; c < c1; ++c) perChannel(c);
  });
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
    const bool avx2 = avx2Rows();
    forChannels(s, [&](std::int64_t c) {
      double mean, invstd;
      if (training) {
        // One pass for both sums, of x - shift with the channel's first value as the shift: the
        // deviations from it are of the order of the spread, so sq - sum^2 / M cancels no more than the
        // two-pass form would (the "shifted data" variance), in double as PyTorch's sums.
        const double shift = count > 0 ? static_cast<double>(static_cast<S>(x[at(s, 0, c, 0)])) : 0.0;
        double sum = 0, sq = 0;
        for (std::int64_t n = 0; n < s.batch; ++n) {
          const T* row = x + at(s, n, c, 0);
          const auto [rowSum, rowSq] = rowShiftedSums(row, s.spatial, shift, avx2);
          sum += rowSum;
          sq += rowSq;
        }
        mean = count > 0 ? shift + sum / static_cast<double>(count) : 0.0;
        sq = count > 0 ? std::max(0.0, sq - sum * sum / static_cast<double>(count)) : 0.0;  // sum of (x - mean)^2
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
      for (std::int64_t n = 0; n < s.batch; ++n) affineRow(x + at(s, n, c, 0), y + at(s, n, c, 0), s.spatial, scale, shift, avx2);
    });
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
    const bool avx2 = avx2Rows();
    forChannels(s, [&](std::int64_t c) {
      const double mean = static_cast<double>(saveMean.data<S>()[c]);
      const double invstd = static_cast<double>(saveInvStd.data<S>()[c]);
      double sumDy = 0, sumDyCentred = 0;  // sum dy, sum dy (x - mean)
      for (std::int64_t n = 0; n < s.batch; ++n) {
        const auto [rowDy, rowDyCentred] = rowGradientSums(dy + at(s, n, c, 0), x + at(s, n, c, 0), s.spatial, mean, avx2);
        sumDy += rowDy;
        sumDyCentred += rowDyCentred;
      }
      const double sumDyXhat = sumDyCentred * invstd;
      if (gradBias) gradBias->data<S>()[c] = static_cast<S>(sumDy);
      if (gradWeight) gradWeight->data<S>()[c] = static_cast<S>(sumDyXhat);
      if (count == 0) return;
      const double k0 = (w ? static_cast<double>(w[c]) : 1.0) * invstd;
      const double meanDy = sumDy / static_cast<double>(count), meanDyXhat = sumDyXhat / static_cast<double>(count);
      // The elementwise pass in S, as PyTorch's CPU kernel (its sums are double, its per-element math
      // the input's opmath type): k0 (dy - mean(dy) - (x - mean) invstd mean(dy xhat)), with the
      // per-channel factors computed in double once. (x - mean) is formed first, so a channel whose mean
      // is large against its spread cancels nothing.
      const S k0s = static_cast<S>(k0), meanDys = static_cast<S>(meanDy), means = static_cast<S>(mean);
      const S slope = static_cast<S>(invstd * meanDyXhat);
      for (std::int64_t n = 0; n < s.batch; ++n)
        gradientRow(dy + at(s, n, c, 0), x + at(s, n, c, 0), dx + at(s, n, c, 0), s.spatial, k0s, meanDys, means, slope, avx2);
    });
  });
}

}  // namespace gpulab
