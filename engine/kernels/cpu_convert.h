#pragma once
// Bulk float16 <-> float32 conversion for the CPU kernels that move whole buffers between the two
// (casts, the widening of 16-bit GEMM operands). x86 processors since 2012 convert 8 values per
// instruction (F16C); elsewhere the portable rounding of engine/core/half.h runs. Both round to
// nearest, ties to even, so the bits are the same either way (NaN payloads aside: F16C keeps the top
// payload bits where the portable path writes the canonical quiet NaN).
#include <cstdint>

#include "engine/core/half.h"

namespace gpulab::cpu {

void halfToFloat(const Half* in, float* out, std::int64_t n);
void floatToHalf(const float* in, Half* out, std::int64_t n);

}  // namespace gpulab::cpu
