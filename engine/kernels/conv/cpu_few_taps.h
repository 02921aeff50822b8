#pragma once
// The products of a float32 convolution with few taps -- Cg * R * S <= kMaxFewTaps: the first layer of
// a CNN on one-channel images, 3 x 3 (9 taps) -- as direct AVX2/FMA loops over one sample's im2col
// columns, where OpenBLAS is slow: its sgemm with an inner dimension of 9 spends its time packing
// (the whole output gradient, for the weight gradient) and runs its 16-wide tiles 9 wide. The CNN's
// first convolution took 2.9 ms forward a step that way (batch 128, 2 threads), for ~0.06 GFLOP of
// arithmetic; these loops take 1.5 ms, about what writing its 12.8 MB output costs.
//
// The columns are conv/cpu.cpp's: cols[t * ld + p] is tap t's input for output position p.
#include <cstdint>

namespace gpulab::conv_few_taps {

constexpr std::int64_t kMaxFewTaps = 12;  // the columns of 8 positions stay in registers beside the sums

// Whether this CPU runs the loops below (AVX2 and FMA); where it does not, the GEMM path runs.
bool available();

// out[k * plane + p] = bias[k] + sum over t < taps of w[k * taps + t] * cols[t * ld + p], for k < filters
// and p < plane; bias may be null (0). taps is 1..kMaxFewTaps.
void forward(const float* w, const float* bias, const float* cols, std::int64_t ld, float* out, std::int64_t filters,
             std::int64_t taps, std::int64_t plane);

// gradWeight[k * taps + t] += sum over p < plane of gradOut[k * plane + p] * cols[t * ld + p].
void weightGradient(const float* gradOut, const float* cols, std::int64_t ld, float* gradWeight, std::int64_t filters,
                    std::int64_t taps, std::int64_t plane);

}  // namespace gpulab::conv_few_taps
