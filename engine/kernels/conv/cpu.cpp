// 2-D convolution and pooling on the CPU, the reference for conv/cuda.cu (cuDNN there).
//
// Convolution is im2col + GEMM, per (sample, group), through OpenBLAS -- the textbook lowering that
// PyTorch's own CPU fallback (thnn_conv2d) uses:
//   forward          out_g (Kg, OH*OW)       = W_g (Kg, Cg*R*S) @ cols (Cg*R*S, OH*OW)      (+ bias)
//   backward input   dcols (Cg*R*S, OH*OW)   = W_g^T @ gradOut_g, then col2im (scatter-add)
//   backward weight  dW_g (Kg, Cg*R*S)      += gradOut_g @ cols^T, summed over the batch
// where cols[(c*R + r)*S + s][oh*OW + ow] = x[c][oh*sh - ph + r*dh][ow*sw - pw + s*dw] (0 in the padding).
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
#include <cblas.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <type_traits>
#include <vector>

#include "engine/core/dispatch.h"
#include "engine/kernels/cpu_backend.h"

namespace gpulab {

namespace {

using Conv = Backend::Conv2dShape;
using Pool = Backend::Pool2dShape;

// Row-major C = op(A) @ op(B) + beta * C in M (float or double).
template <class M>
void gemmM(bool transA, bool transB, std::int64_t m, std::int64_t n, std::int64_t k, const M* a, std::int64_t lda,
           const M* b, std::int64_t ldb, M beta, M* c, std::int64_t ldc) {
  if (m == 0 || n == 0) return;
  const CBLAS_TRANSPOSE ta = transA ? CblasTrans : CblasNoTrans, tb = transB ? CblasTrans : CblasNoTrans;
  const auto M_ = static_cast<blasint>(m), N_ = static_cast<blasint>(n), K_ = static_cast<blasint>(k);
  if constexpr (std::is_same_v<M, float>) {
    cblas_sgemm(CblasRowMajor, ta, tb, M_, N_, K_, 1.0f, a, static_cast<blasint>(lda), b, static_cast<blasint>(ldb), beta,
                c, static_cast<blasint>(ldc));
  } else {
    cblas_dgemm(CblasRowMajor, ta, tb, M_, N_, K_, 1.0, a, static_cast<blasint>(lda), b, static_cast<blasint>(ldb), beta,
                c, static_cast<blasint>(ldc));
  }
}

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

// cols (Cg*R*S, OH*OW) of one sample's group: x points at its first channel (Cg planes of H*W).
template <class M>
void im2col(const M* x, M* cols, std::int64_t channels, const Conv& s) {
  const std::int64_t plane = s.outH * s.outW;
  for (std::int64_t c = 0; c < channels; ++c)
    for (std::int64_t r = 0; r < s.kernelH; ++r)
      for (std::int64_t q = 0; q < s.kernelW; ++q) {
        M* row = cols + ((c * s.kernelH + r) * s.kernelW + q) * plane;
        const M* xc = x + c * s.inH * s.inW;
        for (std::int64_t oh = 0; oh < s.outH; ++oh) {
          const std::int64_t h = oh * s.strideH - s.padH + r * s.dilationH;
          M* dst = row + oh * s.outW;
          if (h < 0 || h >= s.inH) {
            std::fill(dst, dst + s.outW, M(0));
            continue;
          }
          for (std::int64_t ow = 0; ow < s.outW; ++ow) {
            const std::int64_t w = ow * s.strideW - s.padW + q * s.dilationW;
            dst[ow] = (w >= 0 && w < s.inW) ? xc[h * s.inW + w] : M(0);
          }
        }
      }
}

// The adjoint of im2col: adds each column entry back to the input element it was read from.
template <class M>
void col2im(const M* cols, M* x, std::int64_t channels, const Conv& s) {
  const std::int64_t plane = s.outH * s.outW;
  for (std::int64_t c = 0; c < channels; ++c)
    for (std::int64_t r = 0; r < s.kernelH; ++r)
      for (std::int64_t q = 0; q < s.kernelW; ++q) {
        const M* row = cols + ((c * s.kernelH + r) * s.kernelW + q) * plane;
        M* xc = x + c * s.inH * s.inW;
        for (std::int64_t oh = 0; oh < s.outH; ++oh) {
          const std::int64_t h = oh * s.strideH - s.padH + r * s.dilationH;
          if (h < 0 || h >= s.inH) continue;
          const M* src = row + oh * s.outW;
          for (std::int64_t ow = 0; ow < s.outW; ++ow) {
            const std::int64_t w = ow * s.strideW - s.padW + q * s.dilationW;
            if (w >= 0 && w < s.inW) xc[h * s.inW + w] += src[ow];
          }
        }
      }
}

struct ConvDims {
  std::int64_t cg, kg, colRows, plane, inPlane;  // channels and filters per group, Cg*R*S, OH*OW, H*W
};
ConvDims convDims(const Conv& s) {
  const std::int64_t cg = s.inChannels / s.groups, kg = s.outChannels / s.groups;
  return {cg, kg, cg * s.kernelH * s.kernelW, s.outH * s.outW, s.inH * s.inW};
}

}  // namespace

void CpuBackend::conv2d(const Tensor& out, const Tensor& input, const Tensor& weight, const Tensor* bias,
                        const Conv2dShape& s) {
  dispatchFloating(input.dtype(), "conv2d", [&](auto tag) {
    using T = typename decltype(tag)::type;
    using M = OpMath<T>;
    const ConvDims d = convDims(s);
    std::vector<M> xb, wb, bb, ob, cols(static_cast<std::size_t>(d.colRows * d.plane));
    const M* x = readAs<T>(input, xb);
    const M* w = readAs<T>(weight, wb);
    const M* b = bias ? readAs<T>(*bias, bb) : nullptr;
    M* y = writeAs<T>(out, ob);
    for (std::int64_t n = 0; n < s.batch; ++n)
      for (std::int64_t g = 0; g < s.groups; ++g) {
        const M* xg = x + (n * s.inChannels + g * d.cg) * d.inPlane;
        M* yg = y + (n * s.outChannels + g * d.kg) * d.plane;
        if (d.colRows == 0) {
          std::fill(yg, yg + d.kg * d.plane, M(0));
        } else {
          im2col(xg, cols.data(), d.cg, s);
          gemmM<M>(false, false, d.kg, d.plane, d.colRows, w + g * d.kg * d.colRows, d.colRows, cols.data(), d.plane, M(0),
                   yg, d.plane);
        }
        if (b)
          for (std::int64_t k = 0; k < d.kg; ++k) {
            const M bk = b[g * d.kg + k];
            for (std::int64_t p = 0; p < d.plane; ++p) yg[k * d.plane + p] += bk;
          }
      }
    commit<T>(out, ob);
  });
}

void CpuBackend::conv2dBackwardInput(const Tensor& gradInput, const Tensor& gradOut, const Tensor& weight,
                                     const Conv2dShape& s) {
  dispatchFloating(gradOut.dtype(), "conv2d_backward_input", [&](auto tag) {
    using T = typename decltype(tag)::type;
    using M = OpMath<T>;
    const ConvDims d = convDims(s);
    std::vector<M> gb, wb, ib, cols(static_cast<std::size_t>(d.colRows * d.plane));
    const M* go = readAs<T>(gradOut, gb);
    const M* w = readAs<T>(weight, wb);
    M* gi = writeAs<T>(gradInput, ib);
    std::fill(gi, gi + gradInput.numel(), M(0));
    if (d.colRows > 0 && d.plane > 0 && d.kg > 0)
      for (std::int64_t n = 0; n < s.batch; ++n)
        for (std::int64_t g = 0; g < s.groups; ++g) {
          // dcols = W_g^T @ gradOut_g : (Cg*R*S, Kg) @ (Kg, OH*OW)
          gemmM<M>(true, false, d.colRows, d.plane, d.kg, w + g * d.kg * d.colRows, d.colRows,
                   go + (n * s.outChannels + g * d.kg) * d.plane, d.plane, M(0), cols.data(), d.plane);
          col2im(cols.data(), gi + (n * s.inChannels + g * d.cg) * d.inPlane, d.cg, s);
        }
    commit<T>(gradInput, ib);
  });
}

void CpuBackend::conv2dBackwardWeight(const Tensor& gradWeight, const Tensor& gradOut, const Tensor& input,
                                      const Conv2dShape& s) {
  dispatchFloating(gradOut.dtype(), "conv2d_backward_weight", [&](auto tag) {
    using T = typename decltype(tag)::type;
    using M = OpMath<T>;
    const ConvDims d = convDims(s);
    std::vector<M> gb, xb, wb, cols(static_cast<std::size_t>(d.colRows * d.plane));
    const M* go = readAs<T>(gradOut, gb);
    const M* x = readAs<T>(input, xb);
    M* gw = writeAs<T>(gradWeight, wb);
    std::fill(gw, gw + gradWeight.numel(), M(0));
    if (d.colRows > 0 && d.plane > 0 && d.kg > 0)
      for (std::int64_t n = 0; n < s.batch; ++n)
        for (std::int64_t g = 0; g < s.groups; ++g) {
          im2col(x + (n * s.inChannels + g * d.cg) * d.inPlane, cols.data(), d.cg, s);
          // dW_g += gradOut_g @ cols^T : (Kg, OH*OW) @ (OH*OW, Cg*R*S)
          gemmM<M>(false, true, d.kg, d.colRows, d.plane, go + (n * s.outChannels + g * d.kg) * d.plane, d.plane,
                   cols.data(), d.plane, M(1), gw + g * d.kg * d.colRows, d.colRows);
        }
    commit<T>(gradWeight, wb);
  });
}

void CpuBackend::maxPool2d(const Tensor& out, const Tensor& indices, const Tensor& input, const Pool2dShape& s) {
  dispatchFloating(input.dtype(), "max_pool2d", [&](auto tag) {
    using T = typename decltype(tag)::type;
    using M = OpMath<T>;
    const T* x = input.data<T>();
    T* y = out.data<T>();
    std::int64_t* idx = indices.data<std::int64_t>();
    const std::int64_t planes = s.batch * s.channels;
    for (std::int64_t p = 0; p < planes; ++p) {
      const T* xp = x + p * s.inH * s.inW;
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
              if (v > mx || std::isnan(v)) {
                mx = v;
                best = h * s.inW + w;
              }
            }
          const std::int64_t o = (p * s.outH + oh) * s.outW + ow;
          y[o] = static_cast<T>(mx);
          idx[o] = best;
        }
    }
  });
}

void CpuBackend::maxPool2dBackward(const Tensor& gradInput, const Tensor& gradOut, const Tensor& indices,
                                   const Pool2dShape& s) {
  dispatchFloating(gradOut.dtype(), "max_pool2d_backward", [&](auto tag) {
    using T = typename decltype(tag)::type;
    using M = OpMath<T>;
    std::vector<M> buffer;
    M* gi = writeAs<T>(gradInput, buffer);
    std::fill(gi, gi + gradInput.numel(), M(0));
    const T* go = gradOut.data<T>();
    const std::int64_t* idx = indices.data<std::int64_t>();
    const std::int64_t planes = s.batch * s.channels, outPlane = s.outH * s.outW, inPlane = s.inH * s.inW;
    for (std::int64_t p = 0; p < planes; ++p)
      for (std::int64_t o = 0; o < outPlane; ++o) {
        const std::int64_t i = idx[p * outPlane + o];
        if (i >= 0 && i < inPlane) gi[p * inPlane + i] += static_cast<M>(go[p * outPlane + o]);
      }
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
