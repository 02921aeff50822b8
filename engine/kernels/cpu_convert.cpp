#include "engine/kernels/cpu_convert.h"

#include "engine/core/cpu_features.h"

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#define GPULAB_HAVE_F16C_PATH 1
#endif

namespace gpulab::cpu {

namespace {

#if defined(GPULAB_HAVE_F16C_PATH)
// Compiled for F16C+AVX whatever the build's target; called only where the CPU has them.
__attribute__((target("avx,f16c"))) void halfToFloatF16c(const Half* in, float* out, std::int64_t n) {
  std::int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m128i h = _mm_loadu_si128(reinterpret_cast<const __m128i*>(in + i));
    _mm256_storeu_ps(out + i, _mm256_cvtph_ps(h));
  }
  for (; i < n; ++i) out[i] = static_cast<float>(in[i]);
}

__attribute__((target("avx,f16c"))) void floatToHalfF16c(const float* in, Half* out, std::int64_t n) {
  std::int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m128i h = _mm256_cvtps_ph(_mm256_loadu_ps(in + i), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    _mm_storeu_si128(reinterpret_cast<__m128i*>(out + i), h);
  }
  for (; i < n; ++i) out[i] = Half(in[i]);
}

bool hasF16c() { return cpuFeatures().f16c; }
#endif

}  // namespace

void halfToFloat(const Half* in, float* out, std::int64_t n) {
#if defined(GPULAB_HAVE_F16C_PATH)
  if (hasF16c()) return halfToFloatF16c(in, out, n);
#endif
  for (std::int64_t i = 0; i < n; ++i) out[i] = static_cast<float>(in[i]);
}

void floatToHalf(const float* in, Half* out, std::int64_t n) {
#if defined(GPULAB_HAVE_F16C_PATH)
  if (hasF16c()) return floatToHalfF16c(in, out, n);
#endif
  for (std::int64_t i = 0; i < n; ++i) out[i] = Half(in[i]);
}

}  // namespace gpulab::cpu
