#include "engine/kernels/conv/cpu_few_taps.h"

#include <string>
#include <type_traits>

#include "engine/core/errors.h"
#include "engine/core/cpu_features.h"

#if defined(__x86_64__)
#include <immintrin.h>
#define GPULAB_HAVE_FEW_TAPS_PATH 1
#endif

namespace gpulab::conv_few_taps {

namespace {

[[noreturn]] void refuse(std::int64_t taps) {
  throw Error("conv2d: the few-taps kernel was called for " + std::to_string(taps) + " taps (it runs 1.." +
              std::to_string(kMaxFewTaps) + " on a CPU with AVX2 and FMA)");
}

}  // namespace

#if defined(GPULAB_HAVE_FEW_TAPS_PATH)

namespace {

// Compiled for AVX2 and FMA whatever the build's target (baseline x86-64); called only where the CPU has
// them. TAPS is a template argument so that a block's columns are TAPS named registers.
template <int TAPS>
__attribute__((target("avx2,fma"))) void forwardTaps(const float* w, const float* bias, const float* cols, std::int64_t ld,
                                                      float* out, std::int64_t filters, std::int64_t plane) {
  std::int64_t p = 0;
  for (; p + 8 <= plane; p += 8) {
    __m256 x[TAPS];
    for (int t = 0; t < TAPS; ++t) x[t] = _mm256_loadu_ps(cols + t * ld + p);
    for (std::int64_t k = 0; k < filters; ++k) {
      const float* wk = w + k * TAPS;
      __m256 acc = _mm256_set1_ps(bias ? bias[k] : 0.0f);
      for (int t = 0; t < TAPS; ++t) acc = _mm256_fmadd_ps(_mm256_broadcast_ss(wk + t), x[t], acc);
      _mm256_storeu_ps(out + k * plane + p, acc);
    }
  }
  for (; p < plane; ++p)  // the last plane % 8 positions, in the same order of operations
    for (std::int64_t k = 0; k < filters; ++k) {
      float acc = bias ? bias[k] : 0.0f;
      for (int t = 0; t < TAPS; ++t) acc = __builtin_fmaf(w[k * TAPS + t], cols[t * ld + p], acc);
      out[k * plane + p] = acc;
    }
}

template <int TAPS>
__attribute__((target("avx2,fma"))) void weightGradientTaps(const float* gradOut, const float* cols, std::int64_t ld,
                                                             float* gradWeight, std::int64_t filters, std::int64_t plane) {
  for (std::int64_t k = 0; k < filters; ++k) {
    const float* g = gradOut + k * plane;
    __m256 acc[TAPS];
    for (int t = 0; t < TAPS; ++t) acc[t] = _mm256_setzero_ps();
    std::int64_t p = 0;
    for (; p + 8 <= plane; p += 8) {
      const __m256 gv = _mm256_loadu_ps(g + p);
      for (int t = 0; t < TAPS; ++t) acc[t] = _mm256_fmadd_ps(gv, _mm256_loadu_ps(cols + t * ld + p), acc[t]);
    }
    for (int t = 0; t < TAPS; ++t) {
      // The eight lanes' sums, then the tail, then into the gradient.
      const __m128 half = _mm_add_ps(_mm256_castps256_ps128(acc[t]), _mm256_extractf128_ps(acc[t], 1));
      const __m128 pair = _mm_add_ps(half, _mm_movehl_ps(half, half));
      float sum = _mm_cvtss_f32(_mm_add_ss(pair, _mm_shuffle_ps(pair, pair, 1)));
      for (std::int64_t q = p; q < plane; ++q) sum = __builtin_fmaf(g[q], cols[t * ld + q], sum);
      gradWeight[k * TAPS + t] += sum;
    }
  }
}

// f(std::integral_constant<int, TAPS>) for the runtime tap count 1..kMaxFewTaps.
template <class F>
void byTaps(std::int64_t taps, F f) {
  switch (taps) {
    case 1: return f(std::integral_constant<int, 1>{});
    case 2: return f(std::integral_constant<int, 2>{});
    case 3: return f(std::integral_constant<int, 3>{});
    case 4: return f(std::integral_constant<int, 4>{});
    case 5: return f(std::integral_constant<int, 5>{});
    case 6: return f(std::integral_constant<int, 6>{});
    case 7: return f(std::integral_constant<int, 7>{});
    case 8: return f(std::integral_constant<int, 8>{});
    case 9: return f(std::integral_constant<int, 9>{});
    case 10: return f(std::integral_constant<int, 10>{});
    case 11: return f(std::integral_constant<int, 11>{});
    case 12: return f(std::integral_constant<int, 12>{});
    default: refuse(taps);
  }
}
static_assert(kMaxFewTaps == 12, "byTaps covers 1..kMaxFewTaps");

}  // namespace

bool available() { return cpuFeatures().avx2Fma(); }

void forward(const float* w, const float* bias, const float* cols, std::int64_t ld, float* out, std::int64_t filters,
             std::int64_t taps, std::int64_t plane) {
  if (!available()) refuse(taps);
  byTaps(taps, [&](auto n) { forwardTaps<decltype(n)::value>(w, bias, cols, ld, out, filters, plane); });
}

void weightGradient(const float* gradOut, const float* cols, std::int64_t ld, float* gradWeight, std::int64_t filters,
                    std::int64_t taps, std::int64_t plane) {
  if (!available()) refuse(taps);
  byTaps(taps, [&](auto n) { weightGradientTaps<decltype(n)::value>(gradOut, cols, ld, gradWeight, filters, plane); });
}

#else  // not x86-64: the GEMM path always

bool available() { return false; }
void forward(const float*, const float*, const float*, std::int64_t, float*, std::int64_t, std::int64_t taps, std::int64_t) {
  refuse(taps);
}
void weightGradient(const float*, const float*, std::int64_t, float*, std::int64_t, std::int64_t taps, std::int64_t) {
  refuse(taps);
}

#endif

}  // namespace gpulab::conv_few_taps
