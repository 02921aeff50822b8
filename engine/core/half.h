#pragma once
// float16 and bfloat16 as storage types: 16 bits in memory, float for arithmetic (every kernel loads,
// computes in float and rounds once on store, as PyTorch's kernels do). Conversions round to nearest,
// ties to even, so results are bit-identical to PyTorch's CPU wherever PyTorch rounds the same float
// result once. Both are layout-compatible with CUDA's __half and __nv_bfloat16; on the GPU the
// conversions are the hardware's instructions.
#include <cstdint>
#include <cstring>

#include "engine/core/host_device.h"

#if defined(__CUDACC__)
#include <cuda_fp16.h>
#endif

namespace gpulab {
namespace halfbits {

GPULAB_HD std::uint32_t floatBits(float f) {
#if defined(__CUDA_ARCH__)
  return __float_as_uint(f);
#else
  std::uint32_t u;
  std::memcpy(&u, &f, sizeof u);
  return u;
#endif
}
GPULAB_HD float bitsFloat(std::uint32_t u) {
#if defined(__CUDA_ARCH__)
  return __uint_as_float(u);
#else
  float f;
  std::memcpy(&f, &u, sizeof f);
  return f;
#endif
}

// IEEE binary16: 1 sign, 5 exponent, 10 mantissa bits; largest finite 65504, smallest normal 2^-14,
// smallest subnormal 2^-24. NaN becomes the quiet NaN 0x7E00 with its sign (as c10::Half).
GPULAB_HD std::uint16_t fromFloat16(float f) {
  const std::uint32_t x = floatBits(f);
  const std::uint32_t sign = (x >> 16) & 0x8000u;
  std::uint32_t a = x & 0x7FFFFFFFu;
  if (a > 0x7F800000u) return static_cast<std::uint16_t>(sign | 0x7E00u);  // NaN
  if (a >= 0x477FF000u) return static_cast<std::uint16_t>(sign | 0x7C00u);  // >= 65520 rounds to inf
  if (a < 0x38800000u) {
    // Below 2^-14: a subnormal half. 0.5f has an ulp of 2^-24, the half subnormal step, so adding it
    // lets the FPU round the mantissa to nearest even; the difference of the bit patterns is it.
    const float sum = bitsFloat(a) + 0.5f;
    return static_cast<std::uint16_t>(sign | (floatBits(sum) - 0x3F000000u));
  }
  // Normal: rebias the exponent (127 -> 15) and round the 13 dropped bits to nearest even.
  a += 0xC8000FFFu + ((a >> 13) & 1u);
  return static_cast<std::uint16_t>(sign | (a >> 13));
}
GPULAB_HD float toFloat16(std::uint16_t h) {
  const std::uint32_t sign = static_cast<std::uint32_t>(h & 0x8000u) << 16;
  const std::uint32_t exp = (h >> 10) & 0x1Fu, mant = h & 0x3FFu;
  if (exp == 0) {
    const float v = static_cast<float>(mant) * 5.9604644775390625e-8f;  // mant * 2^-24, exact
    return sign ? -v : v;
  }
  if (exp == 31) return bitsFloat(sign | 0x7F800000u | (mant << 13));
  return bitsFloat(sign | ((exp + 112u) << 23) | (mant << 13));
}

// bfloat16: float32's upper half (8 exponent bits: float32's range, 8 bits of precision).
GPULAB_HD std::uint16_t fromBFloat16(float f) {
  const std::uint32_t x = floatBits(f);
  if ((x & 0x7FFFFFFFu) > 0x7F800000u) return 0x7FC0u;  // NaN, as c10::BFloat16
  return static_cast<std::uint16_t>((x + 0x7FFFu + ((x >> 16) & 1u)) >> 16);
}
GPULAB_HD float toBFloat16(std::uint16_t b) { return bitsFloat(static_cast<std::uint32_t>(b) << 16); }

}  // namespace halfbits

// Storage types: explicit construction from a number (rounding once), implicit widening to float, so
// generic kernels write `static_cast<T>(result)` to store and compute in float after loading.
struct Half {
  std::uint16_t bits;
  Half() = default;
  GPULAB_HD explicit Half(float f) {
#if defined(__CUDA_ARCH__)
    bits = __half_as_ushort(__float2half_rn(f));
#else
    bits = halfbits::fromFloat16(f);
#endif
  }
  GPULAB_HD explicit Half(double d) : Half(static_cast<float>(d)) {}
  GPULAB_HD explicit Half(std::int64_t v) : Half(static_cast<float>(v)) {}
  GPULAB_HD operator float() const {
#if defined(__CUDA_ARCH__)
    return __half2float(__ushort_as_half(bits));
#else
    return halfbits::toFloat16(bits);
#endif
  }
  static GPULAB_HD Half fromBits(std::uint16_t b) {
    Half h;
    h.bits = b;
    return h;
  }
};

struct BFloat16 {
  std::uint16_t bits;
  BFloat16() = default;
  // The same integer rounding on the host and the GPU (a few integer ops), so NaN is 0x7FC0 on both.
  GPULAB_HD explicit BFloat16(float f) : bits(halfbits::fromBFloat16(f)) {}
  GPULAB_HD explicit BFloat16(double d) : BFloat16(static_cast<float>(d)) {}
  GPULAB_HD explicit BFloat16(std::int64_t v) : BFloat16(static_cast<float>(v)) {}
  GPULAB_HD operator float() const { return halfbits::toBFloat16(bits); }
  static GPULAB_HD BFloat16 fromBits(std::uint16_t b) {
    BFloat16 h;
    h.bits = b;
    return h;
  }
};

static_assert(sizeof(Half) == 2 && sizeof(BFloat16) == 2, "16-bit storage types");

}  // namespace gpulab
