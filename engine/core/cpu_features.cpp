#include "engine/core/cpu_features.h"

#if defined(__x86_64__) || defined(__i386__)
#include <cpuid.h>
#endif

namespace gpulab {

namespace {

CpuFeatures detect() {
  CpuFeatures f;
#if defined(__x86_64__) || defined(__i386__)
  unsigned eax = 0, ebx = 0, ecx = 0, edx = 0;
  if (!__get_cpuid(1, &eax, &ebx, &ecx, &edx)) return f;
  // Leaf 1 ECX: FMA (bit 12), OSXSAVE (27), AVX (28), F16C (29). By hand: clang 14 (the tsan and fuzz
  // builds) knows no __builtin_cpu_supports("f16c").
  const bool osxsave = ecx & (1u << 27);
  if (!osxsave) return f;
  unsigned xcr0 = 0, xcr0High = 0;
  __asm__("xgetbv" : "=a"(xcr0), "=d"(xcr0High) : "c"(0));
  const bool ymmSaved = (xcr0 & 0x6u) == 0x6u;            // SSE and AVX state
  const bool zmmSaved = ymmSaved && (xcr0 & 0xE0u) == 0xE0u;  // opmask, ZMM0-15 upper halves, ZMM16-31
  f.avx = ymmSaved && (ecx & (1u << 28));
  f.fma = f.avx && (ecx & (1u << 12));
  f.f16c = f.avx && (ecx & (1u << 29));
  unsigned maxLeaf = __get_cpuid_max(0, nullptr);
  if (maxLeaf >= 7) {
    __cpuid_count(7, 0, eax, ebx, ecx, edx);
    // Leaf 7 EBX: AVX2 (bit 5), AVX512F (16), AVX512DQ (17), AVX512BW (30), AVX512VL (31).
    f.avx2 = f.avx && (ebx & (1u << 5));
    constexpr unsigned kAvx512 = (1u << 16) | (1u << 17) | (1u << 30) | (1u << 31);
    f.avx512 = zmmSaved && (ebx & kAvx512) == kAvx512;
  }
#endif
  return f;
}

}  // namespace

const CpuFeatures& cpuFeatures() {
  static const CpuFeatures features = detect();
  return features;
}

}  // namespace gpulab
