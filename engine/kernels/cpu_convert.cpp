#include "engine/kernels/cpu_convert.h"

#if defined(__x86_64__) || defined(__i386__)
#include <cpuid.h>
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

// CPUID leaf 1: AVX (ECX bit 28) and F16C (bit 29), and the OS saving the AVX registers (OSXSAVE, bit
// 27, then XCR0's SSE and AVX state bits). By hand: __builtin_cpu_supports("f16c") is GCC's, not clang 14's.
bool detectF16c() {
  unsigned eax = 0, ebx = 0, ecx = 0, edx = 0;
  if (!__get_cpuid(1, &eax, &ebx, &ecx, &edx)) return false;
  constexpr unsigned kOsxsave = 1u << 27, kAvx = 1u << 28, kF16c = 1u << 29;
  if ((ecx & (kOsxsave | kAvx | kF16c)) != (kOsxsave | kAvx | kF16c)) return false;
  unsigned xcr0 = 0, xcr0High = 0;
  __asm__("xgetbv" : "=a"(xcr0), "=d"(xcr0High) : "c"(0));
  return (xcr0 & 6u) == 6u;
}

bool hasF16c() {
  static const bool has = detectF16c();
  return has;
}
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
