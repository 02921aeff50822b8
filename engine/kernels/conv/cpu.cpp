// 2-D convolution and pooling on the CPU, the reference for conv/cuda.cu (cuDNN there).
//
// Convolution is im2col + GEMM through OpenBLAS -- the textbook lowering that PyTorch's own CPU
// fallback (thnn_conv2d) uses -- with the columns of a chunk of samples side by side, so that one GEMM
// per group serves the whole chunk (cols is (Cg*R*S, chunk*OH*OW)):
//   forward          out_g (Kg, chunk*OH*OW)     = W_g (Kg, Cg*R*S) @ cols                  (+ bias)
//   backward input   dcols                       = W_g^T @ gradOut_g, then col2im (scatter-add)
//   backward weight  dW_g (Kg, Cg*R*S)          += gradOut_g @ cols^T, summed over the chunks
// where cols[(c*R + r)*S + s][i*OH*OW + oh*OW + ow] = x[i][c][oh*sh - ph + r*dh][ow*sw - pw + s*dw]
// (0 in the padding), and gradOut_g is the chunk's output planes of group g gathered side by side.
// A float32 3 x 3 convolution of stride 1 with 16 or more channels and filters runs all three passes
// through Winograd's F(2x2, 3x3) instead (conv/cpu_winograd.h: 2.25x fewer multiply-adds).
// A float32 convolution with few taps (Cg*R*S <= 12: a first layer on one-channel images) runs its
// forward and weight-gradient products as conv/cpu_few_taps.h's direct loops over each sample's columns
// instead, on a CPU with AVX2 and FMA: OpenBLAS with an inner dimension of 9 spent its time packing.
// Everything runs in OpMath<T> buffers (float for float16/bfloat16: sgemm with float32 accumulation,
// as a tensor-core GEMM; double for float64: dgemm) and each output element is rounded once on store,
// so a 16-bit result never sees an intermediate rounding (not after the GEMM, not before the bias,
// not between the overlapping windows of col2im). float32 and float64 read and write their tensors
// directly; only the 16-bit types are widened.
//
// Pools are direct loops with PyTorch's window rules (aten/src/ATen/native/cpu/MaxPoolKernel.cpp,
// AvgPoolKernel.cpp, AdaptiveAvgPoolKernel.cpp): max_pool2d keeps the first maximum (strict >) and
// lets NaN win; avg_pool2d's window is clipped to the padded input for its count and to the input
// for its sum (dilation does not apply to it, as in PyTorch); adaptive windows are
// [floor(i*H/OH), ceil((i+1)*H/OH)).
#include <algorithm>
#include <bit>
#include <cstdint>
#include <cmath>
#include <limits>
#include <type_traits>
#include <vector>

#include "engine/core/dispatch.h"
#include "engine/core/parallel.h"
#include "engine/kernels/conv/cpu_few_taps.h"
#include "engine/kernels/conv/cpu_winograd.h"
#include "engine/kernels/cpu_backend.h"
#include "engine/kernels/gemm/cpu_blas.h"
#include "engine/memory/memory_events.h"

namespace gpulab {

namespace {

using Conv = Backend::Conv2dShape;
using Pool = Backend::Pool2dShape;

// A tensor's elements as M: the tensor's own memory when T is M (float32, float64), else a widened copy.
template <class T, class M = OpMath<T>>
const M* readAs(const Tensor& t, std::vector<M>& buffer) {
  if constexpr (std::is_same_v<T, M>) {
    return t.data<T>();
  } else {
    const T* p = t.data<T>();
    buffer.resize(static_cast<std::size_t>(t.numel()));
    for (std::size_t i = 0; i < buffer.size(); ++i) buffer[i] = static_cast<M>(p[i]);
    return buffer.data();
  }
}

// Where results are accumulated in M: the tensor itself when T is M, else a buffer stored by commit().
template <class T, class M = OpMath<T>>
M* writeAs(const Tensor& t, std::vector<M>& buffer) {
  if constexpr (std::is_same_v<T, M>) {
    return t.data<T>();
  } else {
    buffer.assign(static_cast<std::size_t>(t.numel()), M(0));
    return buffer.data();
  }
}

template <class T, class M = OpMath<T>>
void commit(const Tensor& t, const std::vector<M>& buffer) {
  if constexpr (!std::is_same_v<T, M>) {
    T* p = t.data<T>();
    for (std::size_t i = 0; i < buffer.size(); ++i) p[i] = static_cast<T>(buffer[i]);
  }
}

// Scratch memory for n values of M on `device`, from its caching allocator under the category
// "workspace" (as cuDNN's workspaces on a GPU): the same blocks come back step after step, where a
// std::vector of the columns' size (tens of MiB) was a fresh heap mapping each call -- zero-filled,
// page-faulted in, and unmapped again -- and it shows in the memory views like every other byte.
template <class M>
class Workspace {
 public:
  Workspace(std::int64_t n, Device device) {
    MemoryCategoryScope tag(MemoryCategory::Workspace);
    t_ = Tensor::empty({std::max<std::int64_t>(n, 0)}, dtypeOf<M>(), device);
  }
  M* data() const { return t_.data<M>(); }

 private:
  Tensor t_;
};

// The output columns [ow0, ow1) whose input column ow * stride - pad + offset lies in [0, in): the
// rest read padding. Computed once per kernel tap instead of tested per element.
struct ValidRange {
  std::int64_t begin, end;
};
ValidRange validRange(std::int64_t out, std::int64_t in, std::int64_t stride, std::int64_t pad, std::int64_t offset) {
  // ow * stride >= pad - offset  and  ow * stride < in + pad - offset
  auto ceilDiv = [](std::int64_t a, std::int64_t b) { return a >= 0 ? (a + b - 1) / b : -((-a) / b); };
  const std::int64_t begin = std::clamp<std::int64_t>(ceilDiv(pad - offset, stride), 0, out);
  const std::int64_t end = std::clamp<std::int64_t>(ceilDiv(in + pad - offset, stride), begin, out);
  return {begin, end};
}

// One zero store that the compiler must not turn into a memset call (it does so for a zeroing loop).
template <class M>
inline void zeroStore(M* p) {
  *static_cast<volatile M*>(p) = M(0);
}

// One sample's group into the columns matrix: x points at its first channel (Cg planes of H*W), cols
// at this sample's first column, and ld is the columns' row length (OH*OW times the samples that share
// the matrix, so that one GEMM serves them all).
template <class M>
void im2col(const M* x, M* cols, std::int64_t ld, std::int64_t channels, const Conv& s) {
  // Stride 1, no dilation, and as wide as the input ("same" padding, or a 1-wide kernel): the tap
  // (r, q)'s row is the input plane shifted by (r - padH) rows and (q - padW) columns, so its valid rows
  // are one contiguous copy; the columns the shift wrapped around the row ends are zeroed after. (The
  // CNN's 3 x 3 convolutions with padding 1: one copy per tap instead of one per output row.)
  if (s.strideH == 1 && s.strideW == 1 && s.dilationH == 1 && s.dilationW == 1 && s.outW == s.inW) {
    const std::int64_t W = s.inW;
    for (std::int64_t c = 0; c < channels; ++c)
      for (std::int64_t r = 0; r < s.kernelH; ++r)
        for (std::int64_t q = 0; q < s.kernelW; ++q) {
          M* dst = cols + ((c * s.kernelH + r) * s.kernelW + q) * ld;
          const M* xc = x + c * s.inH * W;
          const std::int64_t oh0 = std::clamp<std::int64_t>(s.padH - r, 0, s.outH);
          const std::int64_t oh1 = std::clamp<std::int64_t>(s.inH + s.padH - r, oh0, s.outH);
          const ValidRange cw = validRange(s.outW, W, 1, s.padW, q);
          std::fill(dst, dst + oh0 * W, M(0));
          std::fill(dst + oh1 * W, dst + s.outH * W, M(0));
          if (oh0 == oh1 || cw.begin == cw.end) {
            std::fill(dst + oh0 * W, dst + oh1 * W, M(0));
            continue;
          }
          const M* src = xc + (oh0 + r - s.padH) * W + cw.begin + q - s.padW;
          std::copy(src, src + (oh1 - 1 - oh0) * W + (cw.end - cw.begin), dst + oh0 * W + cw.begin);
          // The wrapped columns: as many as the padding, a column or two a row -- stores, not memset
          // calls (a call for one float, per row, tap, channel and sample, was a tenth of the backward).
          for (std::int64_t oh = oh0; oh < oh1; ++oh) {
            M* rowStart = dst + oh * W;
            for (std::int64_t j = 0; j < cw.begin; ++j) zeroStore(rowStart + j);
            for (std::int64_t j = cw.end; j < W; ++j) zeroStore(rowStart + j);
          }
        }
    return;
  }
  for (std::int64_t c = 0; c < channels; ++c)
    for (std::int64_t r = 0; r < s.kernelH; ++r)
      for (std::int64_t q = 0; q < s.kernelW; ++q) {
        M* row = cols + ((c * s.kernelH + r) * s.kernelW + q) * ld;
        const M* xc = x + c * s.inH * s.inW;
        const ValidRange cw = validRange(s.outW, s.inW, s.strideW, s.padW, q * s.dilationW);
        for (std::int64_t oh = 0; oh < s.outH; ++oh) {
          const std::int64_t h = oh * s.strideH - s.padH + r * s.dilationH;
          M* dst = row + oh * s.outW;
          if (h < 0 || h >= s.inH || cw.begin == cw.end) {  // the whole row reads padding
            std::fill(dst, dst + s.outW, M(0));
            continue;
          }
          std::fill(dst, dst + cw.begin, M(0));
          const M* src = xc + h * s.inW + cw.begin * s.strideW - s.padW + q * s.dilationW;
          if (s.strideW == 1) {
            std::copy(src, src + (cw.end - cw.begin), dst + cw.begin);
          } else {
            for (std::int64_t ow = cw.begin; ow < cw.end; ++ow) dst[ow] = src[(ow - cw.begin) * s.strideW];
          }
          std::fill(dst + cw.end, dst + s.outW, M(0));
        }
      }
}

// The adjoint of im2col: adds each column entry back to the input element it was read from.
template <class M>
void col2im(const M* cols, std::int64_t ld, M* x, std::int64_t channels, const Conv& s) {
  for (std::int64_t c = 0; c < channels; ++c)
    for (std::int64_t r = 0; r < s.kernelH; ++r)
      for (std::int64_t q = 0; q < s.kernelW; ++q) {
        const M* row = cols + ((c * s.kernelH + r) * s.kernelW + q) * ld;
        M* xc = x + c * s.inH * s.inW;
        const ValidRange cw = validRange(s.outW, s.inW, s.strideW, s.padW, q * s.dilationW);
        for (std::int64_t oh = 0; oh < s.outH; ++oh) {
          const std::int64_t h = oh * s.strideH - s.padH + r * s.dilationH;
          if (h < 0 || h >= s.inH || cw.begin == cw.end) continue;
          const M* src = row + oh * s.outW;
          M* dst = xc + h * s.inW + cw.begin * s.strideW - s.padW + q * s.dilationW;
          if (s.strideW == 1) {  // contiguous: a loop the compiler vectorises
            const M* from = src + cw.begin;
            for (std::int64_t j = 0, len = cw.end - cw.begin; j < len; ++j) dst[j] += from[j];
          } else {
            for (std::int64_t ow = cw.begin; ow < cw.end; ++ow) dst[(ow - cw.begin) * s.strideW] += src[ow];
          }
        }
      }
}

struct ConvDims {
  std::int64_t cg, kg, colRows, plane, inPlane;  // channels and filters per group, Cg*R*S, OH*OW, H*W
  // Samples per GEMM: their columns side by side make one (Cg*R*S, chunk*OH*OW) matrix, so the GEMM
  // is wide enough for OpenBLAS's kernels (a 14 x 14 output plane alone is 196 columns: a chunk is about
  // 512 columns, whose buffers stay near the core's L2 cache -- wider ones measured no faster), with a
  // chunk's columns capped at 4 MiB of float. The chunks are what the threads share out (a part takes
  // consecutive chunks, with its own columns buffer).
  std::int64_t chunk, chunks;
};
ConvDims convDims(const Conv& s) {
  const std::int64_t cg = s.inChannels / s.groups, kg = s.outChannels / s.groups;
  const std::int64_t colRows = cg * s.kernelH * s.kernelW, plane = s.outH * s.outW;
  constexpr std::int64_t kMaxColumnElements = std::int64_t{1} << 20, kTargetColumns = 512;
  const std::int64_t perSample = std::max<std::int64_t>(colRows * plane, 1);
  const std::int64_t wide = (kTargetColumns + std::max<std::int64_t>(plane, 1) - 1) / std::max<std::int64_t>(plane, 1);
  const std::int64_t batch = std::max<std::int64_t>(s.batch, 1);
  const std::int64_t chunk = std::clamp<std::int64_t>(std::min(wide, kMaxColumnElements / perSample), 1, batch);
  return {cg, kg, colRows, plane, s.inH * s.inW, chunk, (batch + chunk - 1) / chunk};
}

// Whether a float32 convolution's products run as conv/cpu_few_taps.h's direct loops (few taps, on a
// CPU with AVX2 and FMA) instead of through OpenBLAS.
template <class T>
bool fewTaps(const ConvDims& d) {
  return std::is_same_v<T, float> && d.colRows >= 1 && d.colRows <= conv_few_taps::kMaxFewTaps && conv_few_taps::available();
}

// How many parts the threads cut the chunks into: each part needs its own scratch.
int chunkParts(const ConvDims& d) { return parallelParts(d.chunks, 1); }

// The batch's `chunks` chunks of `chunk` samples over the engine's threads: body(part, n0, count) for
// each chunk of `count` samples from sample n0, a part's chunks in order, parallelParts(chunks, 1)
// parts. (im2col's chunks, ConvDims; Winograd's, WinogradChunks.)
template <class F>
void forEachChunk(std::int64_t chunk, std::int64_t chunks, std::int64_t batch, F body) {
  parallelFor(chunks, 1, [&](int part, std::int64_t c0, std::int64_t c1) {
    for (std::int64_t n0 = c0 * chunk; n0 < std::min(batch, c1 * chunk); n0 += chunk) body(part, n0, std::min(chunk, batch - n0));
  });
}
template <class F>
void forEachChunk(const ConvDims& d, std::int64_t batch, F body) {
  forEachChunk(d.chunk, d.chunks, batch, body);
}

// `perPart` values of scratch for each of `parts` parts, from one workspace.
template <class M>
class PartScratch {
 public:
  PartScratch(std::int64_t perPart, int parts, Device device) : perPart_(perPart), all_(perPart * parts, device) {}
  M* of(int part) const { return all_.data() + part * perPart_; }

 private:
  std::int64_t perPart_;
  Workspace<M> all_;
};

// A chunk's (Kg, count*OH*OW) matrix to and from the (N, K, OH, OW) tensor's planes of group g.
template <class M>
void gatherPlanes(const M* t, M* wide, std::int64_t n0, std::int64_t count, std::int64_t g, const ConvDims& d,
                  std::int64_t channels) {
  for (std::int64_t k = 0; k < d.kg; ++k)
    for (std::int64_t i = 0; i < count; ++i) {
      const M* src = t + ((n0 + i) * channels + g * d.kg + k) * d.plane;
      std::copy(src, src + d.plane, wide + (k * count + i) * d.plane);
    }
}

// gradOut_g for a chunk as one (Kg, count*OH*OW) matrix: one sample's planes of group g are that matrix
// where they lie; several are gathered side by side into `wide`.
template <class M>
const M* outputGradient(const M* go, M* wide, std::int64_t n0, std::int64_t count, std::int64_t g, const ConvDims& d,
                        std::int64_t channels) {
  if (count == 1) return go + (n0 * channels + g * d.kg) * d.plane;
  gatherPlanes(go, wide, n0, count, g, d, channels);
  return wide;
}

// Whether a float32 convolution of shape s runs through conv/cpu_winograd.h.
template <class T>
bool winograd(const Conv& s) {
  return std::is_same_v<T, float> && conv_winograd::suits(s.inChannels / s.groups, s.outChannels / s.groups, s.kernelH, s.kernelW,
                                                          s.strideH, s.strideW, s.dilationH, s.dilationW, s.padH, s.padW);
}

// A chunk's transformed inputs and products (16 floats a tile for each channel and each filter) are
// sized to about kWinogradChunkBytes, so that the products read the one and the output transform the
// other from the core's L2 cache (512 KiB here): on the CNN's second layer (32 -> 64 channels, 49 tiles
// a sample) chunks of 1 or 2 samples (this size) ran the three passes faster than im2col + sgemm, and
// chunks of 3 or 5 samples no faster than it.
constexpr std::int64_t kWinogradChunkBytes = std::int64_t{640} << 10;

// How the batch is cut: `chunk` samples a chunk, `chunks` chunks over `parts` parts of the threads;
// `columns`, the columns of a full chunk's matrices (the scratch a part needs).
struct WinogradChunks {
  std::int64_t chunk, chunks, columns;
  int parts;
};
WinogradChunks winogradChunks(const conv_winograd::Plan& p, std::int64_t batch) {
  const std::int64_t tiles = std::max<std::int64_t>(p.tiles(), 1), n = std::max<std::int64_t>(batch, 1);
  const std::int64_t bytesPerTile = conv_winograd::kPoints * (p.channels + p.filters) * std::int64_t{sizeof(float)};
  const std::int64_t chunk = std::clamp<std::int64_t>(kWinogradChunkBytes / bytesPerTile / tiles, 1, n);
  const std::int64_t chunks = (n + chunk - 1) / chunk;
  return {chunk, chunks, chunk * tiles, parallelParts(chunks, 1)};
}

// A chunk's transformed inputs: v[xi * channels * ld + c * ld + i * tiles + t] for its samples i, from
// x's planes of group g (x has xChannels channels a sample).
void winogradInputs(const float* x, std::int64_t xChannels, std::int64_t g, std::int64_t n0, std::int64_t count, std::int64_t ld,
                    const conv_winograd::Plan& p, float* v, float* scratch) {
  for (std::int64_t i = 0; i < count; ++i)
    for (std::int64_t c = 0; c < p.channels; ++c)
      conv_winograd::transformInput(x + ((n0 + i) * xChannels + g * p.channels + c) * p.inH * p.inW, p, v + c * ld + i * p.tiles(),
                                    p.channels * ld, scratch);
}

// c (rows, ld) = a (rows, k) @ b (k, ld): conv_winograd::gemm where the CPU has AVX2 and FMA, else OpenBLAS.
void winogradProduct(std::int64_t rows, std::int64_t k, const float* a, const float* b, float* c, std::int64_t ld) {
  if (conv_winograd::gemmAvailable()) {
    conv_winograd::gemm(rows, k, a, b, ld, c, ld, ld);
  } else {
    blas<float>(false, false, rows, ld, k, 1.0f, a, k, b, ld, 0.0f, c, ld);
  }
}

// y (N, yChannels, outH, outW) = the 3 x 3 convolution of x (N, xChannels, inH, inW), group by group,
// through Winograd (+ bias, which may be null); flipped as transformFilters: the input gradient's.
void winogradConvolve(const float* x, std::int64_t xChannels, const float* w, bool flipped, const float* bias, float* y,
                      std::int64_t yChannels, std::int64_t batch, std::int64_t groups, const conv_winograd::Plan& p, Device device) {
  using conv_winograd::kPoints;
  const std::int64_t filterPoints = kPoints * p.filters * p.channels;
  const Workspace<float> u(filterPoints * groups, device);
  for (std::int64_t g = 0; g < groups; ++g) conv_winograd::transformFilters(w + g * p.filters * p.channels * 9, p.filters, p.channels, flipped, u.data() + g * filterPoints);
  const WinogradChunks c = winogradChunks(p, batch);
  const PartScratch<float> vs(kPoints * p.channels * c.columns + p.inputScratch(), c.parts, device);
  const PartScratch<float> ms(kPoints * p.filters * c.columns + p.outputScratch(), c.parts, device);
  const std::int64_t plane = p.outH * p.outW;
  forEachChunk(c.chunk, c.chunks, batch, [&](int part, std::int64_t n0, std::int64_t count) {
    const std::int64_t ld = count * p.tiles();  // the columns of this chunk's matrices
    float* v = vs.of(part);
    float* m = ms.of(part);
    for (std::int64_t g = 0; g < groups; ++g) {
      winogradInputs(x, xChannels, g, n0, count, ld, p, v, v + kPoints * p.channels * c.columns);
      for (int xi = 0; xi < kPoints; ++xi)  // M[xi] (filters, ld) = U[xi] (filters, channels) @ V[xi] (channels, ld)
        winogradProduct(p.filters, p.channels, u.data() + g * filterPoints + xi * p.filters * p.channels, v + xi * p.channels * ld,
                        m + xi * p.filters * ld, ld);
      for (std::int64_t i = 0; i < count; ++i)
        for (std::int64_t k = 0; k < p.filters; ++k)
          conv_winograd::transformOutput(m + k * ld + i * p.tiles(), p.filters * ld, bias ? bias[g * p.filters + k] : 0.0f, p,
                                         y + ((n0 + i) * yChannels + g * p.filters + k) * plane, m + kPoints * p.filters * c.columns);
    }
  });
}

conv_winograd::Plan forwardPlan(const Conv& s) {
  return conv_winograd::plan(s.inChannels / s.groups, s.outChannels / s.groups, s.inH, s.inW, s.outH, s.outW, s.padH, s.padW);
}

// gw (K, Cg, 3, 3) = d loss / d weight through Winograd: each part sums dU[xi] (filters, channels) +=
// dM[xi] @ V[xi]^T over its chunks into its own dus.of(part), the parts are added in part order --
// the same bits at one thread count -- and G^T dU G gives each group's filters' gradient.
void winogradWeightGradient(float* gw, const float* go, const float* x, const Conv& s, Device device) {
  using conv_winograd::kPoints;
  const conv_winograd::Plan p = forwardPlan(s);
  const std::int64_t filterPoints = kPoints * p.filters * p.channels;
  const WinogradChunks c = winogradChunks(p, s.batch);
  const PartScratch<float> dus(filterPoints * s.groups, c.parts, device);
  const PartScratch<float> vs(kPoints * p.channels * c.columns + p.inputScratch(), c.parts, device);
  const PartScratch<float> ms(kPoints * p.filters * c.columns + p.outputScratch(), c.parts, device);
  std::fill(dus.of(0), dus.of(0) + filterPoints * s.groups * c.parts, 0.0f);
  const std::int64_t plane = p.outH * p.outW;
  forEachChunk(c.chunk, c.chunks, s.batch, [&](int part, std::int64_t n0, std::int64_t count) {
    const std::int64_t ld = count * p.tiles();  // the columns of this chunk's matrices
    float* v = vs.of(part);
    float* dm = ms.of(part);
    for (std::int64_t g = 0; g < s.groups; ++g) {
      winogradInputs(x, s.inChannels, g, n0, count, ld, p, v, v + kPoints * p.channels * c.columns);
      for (std::int64_t i = 0; i < count; ++i)
        for (std::int64_t k = 0; k < p.filters; ++k)
          conv_winograd::transformOutputGradient(go + ((n0 + i) * s.outChannels + g * p.filters + k) * plane, p, dm + k * ld + i * p.tiles(),
                                                 p.filters * ld, dm + kPoints * p.filters * c.columns);
      float* du = dus.of(part) + g * filterPoints;
      for (int xi = 0; xi < kPoints; ++xi)  // dU[xi] (filters, channels) += dM[xi] (filters, ld) @ V[xi]^T (ld, channels)
        blas<float>(false, true, p.filters, p.channels, ld, 1.0f, dm + xi * p.filters * ld, ld, v + xi * p.channels * ld, ld,
                    1.0f, du + xi * p.filters * p.channels, p.channels);
    }
  });
  float* sum = dus.of(0);
  for (int part = 1; part < c.parts; ++part) {
    const float* other = dus.of(part);
    for (std::int64_t i = 0; i < filterPoints * s.groups; ++i) sum[i] += other[i];
  }
  for (std::int64_t g = 0; g < s.groups; ++g) conv_winograd::transformFiltersBack(sum + g * filterPoints, p.filters, p.channels, gw + g * p.filters * p.channels * 9);
}


}  // namespace

void CpuBackend::conv2d(const Tensor& out, const Tensor& input, const Tensor& weight, const Tensor* bias,
                        const Conv2dShape& s) {
  dispatchFloating(input.dtype(), "conv2d", [&](auto tag) {
    using T = typename decltype(tag)::type;
    using M = OpMath<T>;
    if constexpr (std::is_same_v<T, float>) {
      if (winograd<T>(s)) {
        winogradConvolve(input.data<float>(), s.inChannels, weight.data<float>(), false, bias ? bias->data<float>() : nullptr,
                         out.data<float>(), s.outChannels, s.batch, s.groups, forwardPlan(s), input.device());
        return;
      }
    }
    const ConvDims d = convDims(s);
    std::vector<M> xb, wb, bb, ob;
    const int parts = chunkParts(d);
    const PartScratch<M> cols(d.colRows * d.plane * d.chunk, parts, input.device());
    const bool direct = fewTaps<T>(d);
    const PartScratch<M> wide(d.chunk > 1 && !direct ? d.kg * d.plane * d.chunk : 0, parts, input.device());
    const M* x = readAs<T>(input, xb);
    const M* w = readAs<T>(weight, wb);
    const M* b = bias ? readAs<T>(*bias, bb) : nullptr;
    M* y = writeAs<T>(out, ob);
    forEachChunk(d, s.batch, [&](int part, std::int64_t n0, std::int64_t count) {
      const std::int64_t ld = count * d.plane;
      for (std::int64_t g = 0; g < s.groups; ++g) {
        if constexpr (std::is_same_v<T, float>) {
          if (direct) {  // each sample's output planes written in place, the bias with them
            for (std::int64_t i = 0; i < count; ++i) {
              im2col(x + ((n0 + i) * s.inChannels + g * d.cg) * d.inPlane, cols.of(part) + i * d.plane, ld, d.cg, s);
              conv_few_taps::forward(w + g * d.kg * d.colRows, b ? b + g * d.kg : nullptr, cols.of(part) + i * d.plane, ld,
                                     y + ((n0 + i) * s.outChannels + g * d.kg) * d.plane, d.kg, d.colRows, d.plane);
            }
            continue;
          }
        }
        // With one sample the GEMM writes its output planes directly; with several, a (Kg, count*plane)
        // result is scattered to them.
        M* result = count == 1 ? y + (n0 * s.outChannels + g * d.kg) * d.plane : wide.of(part);
        if (d.colRows == 0) {
          std::fill(result, result + d.kg * ld, M(0));
        } else {
          for (std::int64_t i = 0; i < count; ++i)
            im2col(x + ((n0 + i) * s.inChannels + g * d.cg) * d.inPlane, cols.of(part) + i * d.plane, ld, d.cg, s);
          blas<M>(false, false, d.kg, ld, d.colRows, M(1), w + g * d.kg * d.colRows, d.colRows, cols.of(part), ld, M(0), result, ld);
        }
        for (std::int64_t k = 0; k < d.kg; ++k) {
          const M bk = b ? b[g * d.kg + k] : M(0);
          for (std::int64_t i = 0; i < count; ++i) {
            const M* src = result + (k * count + i) * d.plane;
            M* dst = y + ((n0 + i) * s.outChannels + g * d.kg + k) * d.plane;
            if (src != dst) {
              for (std::int64_t p = 0; p < d.plane; ++p) dst[p] = src[p] + bk;  // the scatter and the bias in one pass
            } else if (b) {
              for (std::int64_t p = 0; p < d.plane; ++p) dst[p] += bk;
            }
          }
        }
      }
    });
    commit<T>(out, ob);
  });
}

void CpuBackend::conv2dBackwardInput(const Tensor& gradInput, const Tensor& gradOut, const Tensor& weight,
                                     const Conv2dShape& s) {
  dispatchFloating(gradOut.dtype(), "conv2d_backward_input", [&](auto tag) {
    using T = typename decltype(tag)::type;
    using M = OpMath<T>;
    if constexpr (std::is_same_v<T, float>) {
      if (winograd<T>(s)) {  // the output gradient convolved with the flipped filters, padding 2 - pad
        const conv_winograd::Plan p = conv_winograd::plan(s.outChannels / s.groups, s.inChannels / s.groups, s.outH, s.outW, s.inH,
                                                          s.inW, 2 - s.padH, 2 - s.padW);
        winogradConvolve(gradOut.data<float>(), s.outChannels, weight.data<float>(), true, nullptr, gradInput.data<float>(), s.inChannels,
                         s.batch, s.groups, p, gradOut.device());
        return;
      }
    }
    const ConvDims d = convDims(s);
    std::vector<M> gb, wb, ib;
    const int parts = chunkParts(d);
    const PartScratch<M> cols(d.colRows * d.plane * d.chunk, parts, gradOut.device());
    const PartScratch<M> wide(d.chunk > 1 ? d.kg * d.plane * d.chunk : 0, parts, gradOut.device());  // outputGradient's
    const M* go = readAs<T>(gradOut, gb);
    const M* w = readAs<T>(weight, wb);
    M* gi = writeAs<T>(gradInput, ib);
    forEachChunk(d, s.batch, [&](int part, std::int64_t n0, std::int64_t count) {
      std::fill(gi + n0 * s.inChannels * d.inPlane, gi + (n0 + count) * s.inChannels * d.inPlane, M(0));  // col2im adds
      if (d.colRows == 0 || d.plane == 0 || d.kg == 0) return;
      const std::int64_t ld = count * d.plane;
      for (std::int64_t g = 0; g < s.groups; ++g) {
        // dcols = W_g^T @ gradOut_g : (Cg*R*S, Kg) @ (Kg, count*OH*OW)
        const M* gradOutG = outputGradient(go, wide.of(part), n0, count, g, d, s.outChannels);
        blas<M>(true, false, d.colRows, ld, d.kg, M(1), w + g * d.kg * d.colRows, d.colRows, gradOutG, ld, M(0), cols.of(part), ld);
        for (std::int64_t i = 0; i < count; ++i)
          col2im(cols.of(part) + i * d.plane, ld, gi + ((n0 + i) * s.inChannels + g * d.cg) * d.inPlane, d.cg, s);
      }
    });
    commit<T>(gradInput, ib);
  });
}

void CpuBackend::conv2dBackwardWeight(const Tensor& gradWeight, const Tensor& gradOut, const Tensor& input,
                                      const Conv2dShape& s) {
  dispatchFloating(gradOut.dtype(), "conv2d_backward_weight", [&](auto tag) {
    using T = typename decltype(tag)::type;
    using M = OpMath<T>;
    if constexpr (std::is_same_v<T, float>) {
      if (winograd<T>(s)) {
        winogradWeightGradient(gradWeight.data<float>(), gradOut.data<float>(), input.data<float>(), s, gradOut.device());
        return;
      }
    }
    const ConvDims d = convDims(s);
    std::vector<M> gb, xb, wb;
    // Each part sums its chunks' dW into its own (Kg*groups, Cg*R*S) buffer -- the first part into
    // gradWeight itself -- and the parts' sums are added in part order: the same bits at one thread count.
    const int parts = chunkParts(d);
    const std::int64_t weightSize = gradWeight.numel();
    const bool direct = fewTaps<T>(d);
    const PartScratch<M> cols(d.colRows * d.plane * d.chunk, parts, gradOut.device());
    const PartScratch<M> wide(d.chunk > 1 && !direct ? d.kg * d.plane * d.chunk : 0, parts, gradOut.device());
    const PartScratch<M> partials(weightSize, parts - 1, gradOut.device());
    const M* go = readAs<T>(gradOut, gb);
    const M* x = readAs<T>(input, xb);
    M* gw = writeAs<T>(gradWeight, wb);
    std::fill(gw, gw + weightSize, M(0));
    std::fill(partials.of(0), partials.of(parts - 1), M(0));
    forEachChunk(d, s.batch, [&](int part, std::int64_t n0, std::int64_t count) {
      if (d.colRows == 0 || d.plane == 0 || d.kg == 0) return;
      M* sum = part == 0 ? gw : partials.of(part - 1);
      const std::int64_t ld = count * d.plane;
      for (std::int64_t g = 0; g < s.groups; ++g) {
        for (std::int64_t i = 0; i < count; ++i)
          im2col(x + ((n0 + i) * s.inChannels + g * d.cg) * d.inPlane, cols.of(part) + i * d.plane, ld, d.cg, s);
        if constexpr (std::is_same_v<T, float>) {
          if (direct) {  // each sample's output gradient read where it lies
            for (std::int64_t i = 0; i < count; ++i)
              conv_few_taps::weightGradient(go + ((n0 + i) * s.outChannels + g * d.kg) * d.plane, cols.of(part) + i * d.plane, ld,
                                            sum + g * d.kg * d.colRows, d.kg, d.colRows, d.plane);
            continue;
          }
        }
        const M* gradOutG = outputGradient(go, wide.of(part), n0, count, g, d, s.outChannels);
        // dW_g += gradOut_g @ cols^T : (Kg, count*OH*OW) @ (count*OH*OW, Cg*R*S)
        blas<M>(false, true, d.kg, d.colRows, ld, M(1), gradOutG, ld, cols.of(part), ld, M(1), sum + g * d.kg * d.colRows, d.colRows);
      }
    });
    for (int part = 1; part < parts; ++part) {
      const M* p = partials.of(part - 1);
      for (std::int64_t i = 0; i < weightSize; ++i) gw[i] += p[i];
    }
    commit<T>(gradWeight, wb);
  });
}

namespace {

// (mx, best) = (v, index) when take, without a branch: on real activations "is this the new maximum?"
// is a coin toss, and the compiler's branch for `if (take)` (or even for `take ? v : mx` on floats) was
// mispredicted often enough to make max_pool2d a fifth of a CNN's epoch. Masks on the bits instead.
template <class M>
inline void takeIfGreater(bool take, M v, std::int64_t index, M& mx, std::int64_t& best) {
  using Bits = std::conditional_t<sizeof(M) == 4, std::uint32_t, std::uint64_t>;
  const Bits mask = Bits(0) - static_cast<Bits>(take);
  const Bits merged = (std::bit_cast<Bits>(v) & mask) | (std::bit_cast<Bits>(mx) & ~mask);
  mx = std::bit_cast<M>(merged);
  best ^= (best ^ index) & -static_cast<std::int64_t>(take);
}

// Planes (sample, channel) a pool's part takes at least: ~32k input values, so a small pool stays on one thread.
std::int64_t planeGrain(const Pool& s) {
  return std::max<std::int64_t>(1, (std::int64_t{1} << 15) / std::max<std::int64_t>(s.inH * s.inW, 1));
}

}  // namespace

void CpuBackend::maxPool2d(const Tensor& out, const Tensor& indices, const Tensor& input, const Pool2dShape& s) {
  dispatchFloating(input.dtype(), "max_pool2d", [&](auto tag) {
    using T = typename decltype(tag)::type;
    using M = OpMath<T>;
    const T* x = input.data<T>();
    T* y = out.data<T>();
    std::int64_t* idx = indices.data<std::int64_t>();
    const std::int64_t planes = s.batch * s.channels;
    // `|`, not `||`: both comparisons are evaluated, so no branch decides between them.
    auto greater = [](M v, M mx) { return static_cast<bool>(static_cast<int>(v > mx) | static_cast<int>(v != v)); };
    // The CNN's case -- whole 2 x 2 windows side by side, no padding, no dilation -- without the general
    // loop's per-window bounds: each output reads x[2oh][2ow], x[2oh][2ow+1], x[2oh+1][2ow], x[2oh+1][2ow+1]
    // in that (PyTorch's) order.
    const bool tiled2x2 = s.kernelH == 2 && s.kernelW == 2 && s.strideH == 2 && s.strideW == 2 && s.padH == 0 && s.padW == 0 &&
                          s.dilationH == 1 && s.dilationW == 1 && 2 * s.outH <= s.inH && 2 * s.outW <= s.inW;  // (ceil_mode:
                                                                                                           // a partial last window)
    using Which = std::conditional_t<sizeof(M) == 4, std::int32_t, std::int64_t>;  // the width of M: one vector lane each
    parallelFor(planes, planeGrain(s), [&](int, std::int64_t p0, std::int64_t p1) {
      std::vector<Which> winner(tiled2x2 ? static_cast<std::size_t>(s.outW) : 0);
      for (std::int64_t p = p0; p < p1; ++p) {
        const T* xp = x + p * s.inH * s.inW;
        T* yp = y + p * s.outH * s.outW;
        std::int64_t* ip = idx + p * s.outH * s.outW;
        if (tiled2x2) {
          for (std::int64_t oh = 0; oh < s.outH; ++oh) {
            const std::int64_t top = 2 * oh * s.inW;
            const T *r0 = xp + top, *r1 = r0 + s.inW;
            T* yr = yp + oh * s.outW;
            // Written so the compiler vectorises it: the same-width selects (value, and which of the four
            // won, 0..3) over a row, then the winners' flat indices in a second pass.
            for (std::int64_t ow = 0; ow < s.outW; ++ow) {
              const M a = static_cast<M>(r0[2 * ow]), b = static_cast<M>(r0[2 * ow + 1]);
              const M c = static_cast<M>(r1[2 * ow]), d = static_cast<M>(r1[2 * ow + 1]);
              M mx = a;
              Which k = 0;
              bool t = greater(b, mx);
              mx = t ? b : mx;
              k = t ? Which(1) : k;
              t = greater(c, mx);
              mx = t ? c : mx;
              k = t ? Which(2) : k;
              t = greater(d, mx);
              mx = t ? d : mx;
              k = t ? Which(3) : k;
              yr[ow] = static_cast<T>(mx);
              winner[static_cast<std::size_t>(ow)] = k;
            }
            for (std::int64_t ow = 0; ow < s.outW; ++ow) {
              const Which k = winner[static_cast<std::size_t>(ow)];
              ip[oh * s.outW + ow] = top + 2 * ow + (k & 1) + (k >> 1) * s.inW;
            }
          }
          continue;
        }
        for (std::int64_t oh = 0; oh < s.outH; ++oh)
          for (std::int64_t ow = 0; ow < s.outW; ++ow) {
            std::int64_t h0 = oh * s.strideH - s.padH, w0 = ow * s.strideW - s.padW;
            const std::int64_t h1 = std::min(h0 + (s.kernelH - 1) * s.dilationH + 1, s.inH);
            const std::int64_t w1 = std::min(w0 + (s.kernelW - 1) * s.dilationW + 1, s.inW);
            while (h0 < 0) h0 += s.dilationH;
            while (w0 < 0) w0 += s.dilationW;
            std::int64_t best = h0 * s.inW + w0;
            M mx = -std::numeric_limits<M>::infinity();
            for (std::int64_t h = h0; h < h1; h += s.dilationH)
              for (std::int64_t w = w0; w < w1; w += s.dilationW) {
                const M v = static_cast<M>(xp[h * s.inW + w]);
                takeIfGreater(greater(v, mx), v, h * s.inW + w, mx, best);  // v != v: NaN wins, as in PyTorch
              }
            yp[oh * s.outW + ow] = static_cast<T>(mx);
            ip[oh * s.outW + ow] = best;
          }
      }
    });
  });
}

void CpuBackend::maxPool2dBackward(const Tensor& gradInput, const Tensor& gradOut, const Tensor& indices,
                                   const Pool2dShape& s) {
  dispatchFloating(gradOut.dtype(), "max_pool2d_backward", [&](auto tag) {
    using T = typename decltype(tag)::type;
    using M = OpMath<T>;
    std::vector<M> buffer;
    M* gi = writeAs<T>(gradInput, buffer);
    const T* go = gradOut.data<T>();
    const std::int64_t* idx = indices.data<std::int64_t>();
    const std::int64_t planes = s.batch * s.channels, outPlane = s.outH * s.outW, inPlane = s.inH * s.inW;
    parallelFor(planes, planeGrain(s), [&](int, std::int64_t p0, std::int64_t p1) {
      for (std::int64_t p = p0; p < p1; ++p) {
        // Each plane zeroed just before its gradients are added in, while it is in the cache: zeroing the
        // whole range first wrote megabytes that the adds then read back from memory.
        std::fill(gi + p * inPlane, gi + (p + 1) * inPlane, M(0));
        for (std::int64_t o = 0; o < outPlane; ++o) {
          const std::int64_t i = idx[p * outPlane + o];
          if (i >= 0 && i < inPlane) gi[p * inPlane + i] += static_cast<M>(go[p * outPlane + o]);
        }
      }
    });
    commit<T>(gradInput, buffer);
  });
}

namespace {

// avg_pool2d's window for output (oh, ow): the rows/cols it sums and the divisor.
struct AvgWindow {
  std::int64_t h0, h1, w0, w1, divisor;
};
AvgWindow avgWindow(const Pool& s, std::int64_t oh, std::int64_t ow) {
  std::int64_t h0 = oh * s.strideH - s.padH, w0 = ow * s.strideW - s.padW;
  std::int64_t h1 = std::min(h0 + s.kernelH, s.inH + s.padH), w1 = std::min(w0 + s.kernelW, s.inW + s.padW);
  const std::int64_t poolSize = (h1 - h0) * (w1 - w0);
  h0 = std::max<std::int64_t>(h0, 0);
  w0 = std::max<std::int64_t>(w0, 0);
  h1 = std::min(h1, s.inH);
  w1 = std::min(w1, s.inW);
  return {h0, h1, w0, w1, s.countIncludePad ? poolSize : (h1 - h0) * (w1 - w0)};
}

// adaptive_avg_pool2d's window along one axis.
std::int64_t adaptiveStart(std::int64_t i, std::int64_t in, std::int64_t out) { return (i * in) / out; }
std::int64_t adaptiveEnd(std::int64_t i, std::int64_t in, std::int64_t out) { return ((i + 1) * in + out - 1) / out; }

}  // namespace

void CpuBackend::avgPool2d(const Tensor& out, const Tensor& input, const Pool2dShape& s) {
  dispatchFloating(input.dtype(), "avg_pool2d", [&](auto tag) {
    using T = typename decltype(tag)::type;
    using M = OpMath<T>;
    const T* x = input.data<T>();
    T* y = out.data<T>();
    const std::int64_t planes = s.batch * s.channels;
    for (std::int64_t p = 0; p < planes; ++p) {
      const T* xp = x + p * s.inH * s.inW;
      for (std::int64_t oh = 0; oh < s.outH; ++oh)
        for (std::int64_t ow = 0; ow < s.outW; ++ow) {
          const AvgWindow win = avgWindow(s, oh, ow);
          M sum = 0;
          for (std::int64_t h = win.h0; h < win.h1; ++h)
            for (std::int64_t w = win.w0; w < win.w1; ++w) sum += static_cast<M>(xp[h * s.inW + w]);
          const bool empty = win.h0 >= win.h1 || win.w0 >= win.w1;
          y[(p * s.outH + oh) * s.outW + ow] = static_cast<T>(empty ? M(0) : sum / static_cast<M>(win.divisor));
        }
    }
  });
}

void CpuBackend::avgPool2dBackward(const Tensor& gradInput, const Tensor& gradOut, const Pool2dShape& s) {
  dispatchFloating(gradOut.dtype(), "avg_pool2d_backward", [&](auto tag) {
    using T = typename decltype(tag)::type;
    using M = OpMath<T>;
    std::vector<M> buffer;
    M* gi = writeAs<T>(gradInput, buffer);
    std::fill(gi, gi + gradInput.numel(), M(0));
    const T* go = gradOut.data<T>();
    const std::int64_t planes = s.batch * s.channels;
    for (std::int64_t p = 0; p < planes; ++p) {
      M* gp = gi + p * s.inH * s.inW;
      for (std::int64_t oh = 0; oh < s.outH; ++oh)
        for (std::int64_t ow = 0; ow < s.outW; ++ow) {
          const AvgWindow win = avgWindow(s, oh, ow);
          if (win.h0 >= win.h1 || win.w0 >= win.w1) continue;
          const M g = static_cast<M>(go[(p * s.outH + oh) * s.outW + ow]) / static_cast<M>(win.divisor);
          for (std::int64_t h = win.h0; h < win.h1; ++h)
            for (std::int64_t w = win.w0; w < win.w1; ++w) gp[h * s.inW + w] += g;
        }
    }
    commit<T>(gradInput, buffer);
  });
}

void CpuBackend::adaptiveAvgPool2d(const Tensor& out, const Tensor& input, const Pool2dShape& s) {
  dispatchFloating(input.dtype(), "adaptive_avg_pool2d", [&](auto tag) {
    using T = typename decltype(tag)::type;
    using M = OpMath<T>;
    const T* x = input.data<T>();
    T* y = out.data<T>();
    const std::int64_t planes = s.batch * s.channels;
    for (std::int64_t p = 0; p < planes; ++p) {
      const T* xp = x + p * s.inH * s.inW;
      for (std::int64_t oh = 0; oh < s.outH; ++oh) {
        const std::int64_t h0 = adaptiveStart(oh, s.inH, s.outH), h1 = adaptiveEnd(oh, s.inH, s.outH);
        for (std::int64_t ow = 0; ow < s.outW; ++ow) {
          const std::int64_t w0 = adaptiveStart(ow, s.inW, s.outW), w1 = adaptiveEnd(ow, s.inW, s.outW);
          M sum = 0;
          for (std::int64_t h = h0; h < h1; ++h)
            for (std::int64_t w = w0; w < w1; ++w) sum += static_cast<M>(xp[h * s.inW + w]);
          y[(p * s.outH + oh) * s.outW + ow] = static_cast<T>(sum / static_cast<M>((h1 - h0) * (w1 - w0)));
        }
      }
    }
  });
}

void CpuBackend::adaptiveAvgPool2dBackward(const Tensor& gradInput, const Tensor& gradOut, const Pool2dShape& s) {
  dispatchFloating(gradOut.dtype(), "adaptive_avg_pool2d_backward", [&](auto tag) {
    using T = typename decltype(tag)::type;
    using M = OpMath<T>;
    std::vector<M> buffer;
    M* gi = writeAs<T>(gradInput, buffer);
    std::fill(gi, gi + gradInput.numel(), M(0));
    const T* go = gradOut.data<T>();
    const std::int64_t planes = s.batch * s.channels;
    for (std::int64_t p = 0; p < planes; ++p) {
      M* gp = gi + p * s.inH * s.inW;
      for (std::int64_t oh = 0; oh < s.outH; ++oh) {
        const std::int64_t h0 = adaptiveStart(oh, s.inH, s.outH), h1 = adaptiveEnd(oh, s.inH, s.outH);
        for (std::int64_t ow = 0; ow < s.outW; ++ow) {
          const std::int64_t w0 = adaptiveStart(ow, s.inW, s.outW), w1 = adaptiveEnd(ow, s.inW, s.outW);
          const M g = static_cast<M>(go[(p * s.outH + oh) * s.outW + ow]) / static_cast<M>((h1 - h0) * (w1 - w0));
          for (std::int64_t h = h0; h < h1; ++h)
            for (std::int64_t w = w0; w < w1; ++w) gp[h * s.inW + w] += g;
        }
      }
    }
    commit<T>(gradInput, buffer);
  });
}

}  // namespace gpulab
