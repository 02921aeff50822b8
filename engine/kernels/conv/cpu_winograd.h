#pragma once
// Winograd's F(2x2, 3x3) for the float32 3 x 3 convolutions of stride 1 on the CPU (Lavin and Gray,
// "Fast Algorithms for Convolutional Neural Networks", 2015; NNPACK's and oneDNN's CPU convolutions).
//
// Why: a CNN's 3 x 3 convolutions are most of its step, and with im2col each output takes 9 * C
// multiply-adds. Winograd computes a 2 x 2 block of outputs from a 4 x 4 block of inputs with 16
// products instead of 36, so the GEMMs do 2.25x fewer multiply-adds; the price is three cheap
// transforms, each a pass over memory, and GEMMs with a smaller inner dimension. On the CNN of the
// lessons (32 -> 64 channels on 14 x 14, batch 128) the forward, input-gradient and weight-gradient
// passes each took ~10 ms as im2col + sgemm on two hyperthreads, about OpenBLAS's peak rate.
//
// The algorithm, for one group of Cg input channels and Kg filters, the output cut into 2 x 2 tiles
// (P of them over a chunk of samples; the last row and column of tiles clipped to the output):
//   U[xi] (Kg, Cg) = G g G^T           the filters, each 3 x 3 -> 4 x 4 (xi = one of the 16 points)
//   V[xi] (Cg, P)  = B^T d B           each tile's 4 x 4 input window, padding read as 0
//   M[xi] (Kg, P)  = U[xi] @ V[xi]     16 GEMMs
//   y              = A^T M A           each tile's 2 x 2 outputs (+ bias)
// with B^T = [1 0 -1 0; 0 1 1 0; 0 -1 1 0; 0 1 0 -1], G = [1 0 0; 1/2 1/2 1/2; 1/2 -1/2 1/2; 0 0 1] and
// A^T = [1 1 1 0; 0 1 -1 -1]. The gradient with respect to the input is the same convolution of the
// output gradient with the filters rotated by 180 degrees and transposed (padding 2 - pad); the
// gradient with respect to the filters is dU[xi] = sum over tiles of dM[xi] @ V[xi]^T, dM = A dy A^T,
// and dg = G^T dU G. Every step is exact algebra; in float32 the results differ from im2col's by
// rounding only (the 1/2s are exact; tests/test_conv_parity.cpp bounds the difference).
//
// Where the time goes is memory, not arithmetic: each transform is a pass over a tensor, so the input
// transform asks for the next plane before it works on this one (a third of its time went to waiting
// for loads), and the products are this file's own AVX2 kernel (gemm below) rather than OpenBLAS,
// whose packing and beta = 0 pass cost as much as the multiply-adds at these sizes. On the CNN's
// second layer (batch 128, two hyperthreads) the forward went from ~10.4 to ~8.5 ms and the two
// gradients from ~24.7 to ~21 ms; tests/bench/README.md has the epoch.
//
// conv/cpu.cpp runs it where it pays (suits()); GPULAB_WINOGRAD=0 in the environment turns it off,
// for a comparison on the same build.
#include <cstdint>

namespace gpulab::conv_winograd {

constexpr int kPoints = 16;  // the 4 x 4 points of a tile's transform

// One group's shape, as this convolution sees it (for the input gradient: the output gradient's).
struct Plan {
  std::int64_t channels, filters;   // in and out channels of the group
  std::int64_t inH, inW, outH, outW, padH, padW;
  std::int64_t tilesH, tilesW;      // ceil(out / 2)
  std::int64_t tiles() const { return tilesH * tilesW; }
  // Scratch for transformInput: four transformed input rows and a row of zeros.
  std::int64_t inputScratch() const { return 4 * (2 * tilesW + 2) + inW; }
  // Scratch for transformOutput and transformOutputGradient: four rows of tiles.
  std::int64_t outputScratch() const { return 4 * tiles(); }
};
Plan plan(std::int64_t channels, std::int64_t filters, std::int64_t inH, std::int64_t inW, std::int64_t outH, std::int64_t outW,
          std::int64_t padH, std::int64_t padW);

// Whether a convolution of this shape runs through Winograd: 3 x 3, stride 1, no dilation, padding 0..2
// (the input gradient's padding is 2 - pad), channels and filters per group enough for the GEMMs, and
// not turned off (GPULAB_WINOGRAD=0).
bool suits(std::int64_t channels, std::int64_t filters, std::int64_t kernelH, std::int64_t kernelW, std::int64_t strideH,
           std::int64_t strideW, std::int64_t dilationH, std::int64_t dilationW, std::int64_t padH, std::int64_t padW);

// u[xi * filters * channels + f * channels + c] = (G g G^T)[xi], with g = w[(f * channels + c) * 9 ...]:
// the filters of a convolution as they are stored, (filters, channels, 3, 3). flipped: the filters of the
// input gradient's convolution, g = w[(c * filters + f) * 9 ...] rotated by 180 degrees, where w is
// the forward's (channels, filters, 3, 3) -- that convolution's channels are the forward's filters.
void transformFilters(const float* w, std::int64_t filters, std::int64_t channels, bool flipped, float* u);

// dw[(f * channels + c) * 9 ...] = G^T du G, du laid out as transformFilters' u: the filters' gradient.
void transformFiltersBack(const float* du, std::int64_t filters, std::int64_t channels, float* dw);

// One input plane's tiles: v[xi * pointStride + t] for its tiles t, the window at
// (2 * (t / tilesW) - padH, 2 * (t % tilesW) - padW) read as 0 outside the plane.
void transformInput(const float* x, const Plan& p, float* v, std::int64_t pointStride, float* scratch);

// One output plane from its tiles m[xi * pointStride + t]: y = A^T m A + bias, clipped to outH x outW.
void transformOutput(const float* m, std::int64_t pointStride, float bias, const Plan& p, float* y, float* scratch);

// One output-gradient plane's tiles: dm[xi * pointStride + t] = A dy A^T, dy the tile's 2 x 2 gradients
// (0 past the output's last row or column).
void transformOutputGradient(const float* dy, const Plan& p, float* dm, std::int64_t pointStride, float* scratch);

// The products M[xi] = U[xi] @ V[xi] where the CPU has AVX2 and FMA (gemmAvailable()): c (rows, cols) =
// a (rows, k; row-major, no padding) @ b (k, cols; row stride ldb). OpenBLAS spent a third of its time
// on these small products packing its operands and zeroing c for beta = 0; this kernel reads them
// where they lie.
bool gemmAvailable();
void gemm(std::int64_t rows, std::int64_t k, const float* a, const float* b, std::int64_t ldb, float* c, std::int64_t ldc,
          std::int64_t cols);

}  // namespace gpulab::conv_winograd
