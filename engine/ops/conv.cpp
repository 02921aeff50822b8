// torch.nn.functional's 2-D convolution and pooling: argument and shape checks with PyTorch's
// messages, output sizes by PyTorch's rules, then the device's conv-family kernels (im2col + GEMM on
// the CPU, cuDNN on CUDA), forward and backward side by side. Every op takes NCHW input or unbatched
// (C, H, W) input, which runs as a batch of one and is returned unbatched, as in PyTorch.
//
// Output sizes:
//   conv2d      OH = (H + 2 pad - dilation (R - 1) - 1) / stride + 1
//   pools       OH = floor_or_ceil((H + 2 pad - dilation (R - 1) - 1) / stride) + 1, and with ceil_mode
//               one less when the last window would start in the right padding (PyTorch's
//               pooling_output_shape: "the last pooling starts inside the image")
//   adaptive    OH = output_size
#include <algorithm>

#include "engine/ops/autocast.h"
#include "engine/ops/op_util.h"
#include "engine/profiler/profiler.h"

namespace gpulab {

using detail::Grads;
using detail::Needs;

namespace {

std::string str(std::int64_t v) { return std::to_string(v); }

// (C, H, W) -> (1, C, H, W); the caller squeezes the result back.
Tensor batched(const Tensor& t, bool unbatched) { return unbatched ? t.unsqueeze(0) : t; }
Tensor unbatch(const Tensor& t, bool unbatched) { return unbatched ? t.squeeze(0) : t; }

// ---- conv2d

void checkConvArguments(Size2 stride, Size2 padding, Size2 dilation, std::int64_t groups) {
  if (padding.h < 0 || padding.w < 0) throw Error("negative padding is not supported");
  if (stride.h <= 0 || stride.w <= 0) throw Error("non-positive stride is not supported");
  if (dilation.h <= 0 || dilation.w <= 0) throw Error("non-positive dilation is not supported");
  if (groups <= 0) throw Error("non-positive groups is not supported");
}

// PyTorch's check_shape_forward, for a 4-D input and weight.
Backend::Conv2dShape convShape(const Tensor& x, const Tensor& w, const Tensor& bias, Size2 stride, Size2 padding,
                               Size2 dilation, std::int64_t groups) {
  const std::int64_t K = w.size(0);
  if (K < groups) {
    throw Error("Given groups=" + str(groups) + ", expected weight to be at least " + str(groups) +
                " at dimension 0, but got weight of size " + shapeStr(w.sizes()) + " instead");
  }
  if (K % groups != 0) {
    throw Error("Given groups=" + str(groups) + ", expected weight to be divisible by " + str(groups) +
                " at dimension 0, but got weight of size [" + shapeStr(w.sizes()) + "] instead");
  }
  if (x.size(1) != w.size(1) * groups) {
    throw Error("Given groups=" + str(groups) + ", weight of size " + shapeStr(w.sizes()) + ", expected input" +
                shapeStr(x.sizes()) + " to have " + str(w.size(1) * groups) + " channels, but got " + str(x.size(1)) +
                " channels instead");
  }
  if (bias.defined() && (bias.dim() != 1 || bias.size(0) != K)) {
    throw Error("Given weight of size " + shapeStr(w.sizes()) + ", expected bias to be 1-dimensional with " + str(K) +
                " elements, but got bias of size " + shapeStr(bias.sizes()) + " instead");
  }
  const std::int64_t padH = x.size(2) + 2 * padding.h, padW = x.size(3) + 2 * padding.w;
  const std::int64_t effH = dilation.h * (w.size(2) - 1) + 1, effW = dilation.w * (w.size(3) - 1) + 1;
  if (padH < effH || padW < effW) {
    throw Error("Calculated padded input size per channel: (" + str(padH) + " x " + str(padW) + "). Kernel size: (" +
                str(effH) + " x " + str(effW) + "). Kernel size can't be greater than actual input size");
  }
  return {x.size(0), x.size(1), x.size(2), x.size(3), K, w.size(2), w.size(3),
          (padH - effH) / stride.h + 1, (padW - effW) / stride.w + 1,
          stride.h, stride.w, padding.h, padding.w, dilation.h, dilation.w, groups};
}

// ---- pooling

// PyTorch's pooling_output_shape, one spatial dimension.
std::int64_t poolOutputSize(std::int64_t in, std::int64_t kernel, std::int64_t pad, std::int64_t stride,
                            std::int64_t dilation, bool ceilMode) {
  const std::int64_t numerator = in + 2 * pad - dilation * (kernel - 1) - 1 + (ceilMode ? stride - 1 : 0);
  // Division rounding toward -infinity (the numerator is negative when the window does not fit).
  std::int64_t out = numerator / stride - ((numerator % stride != 0) && (numerator < 0) ? 1 : 0) + 1;
  if (ceilMode && (out - 1) * stride >= in + pad) --out;  // the last window must start inside the input or left padding
  return out;
}

struct PoolInput {
  Tensor x;  // (N, C, H, W), contiguous
  bool unbatched;
};

PoolInput poolInput(const char* op, const Tensor& input) {
  detail::requireFloat(op, input);
  if (input.dim() != 3 && input.dim() != 4) throw Error("non-empty 3D or 4D (batch mode) tensor expected for input");
  const bool unbatched = input.dim() == 3;
  Tensor x = batched(input, unbatched);
  if (x.size(1) == 0 || x.size(2) == 0 || x.size(3) == 0) {
    throw Error("Expected 3D or 4D (batch mode) tensor with optional 0 dim batch size for input, but got:" +
                shapeStr(input.sizes()));
  }
  return {x.contiguous(), unbatched};
}

// PyTorch's pooling_output_shape and pool2d_shape_check, for max_pool2d and avg_pool2d.
Backend::Pool2dShape poolShape(const Tensor& x, Size2 kernel, Size2 stride, Size2 padding, Size2 dilation,
                               bool ceilMode, bool countIncludePad) {
  if (stride.h == 0 || stride.w == 0) throw Error("stride should not be zero");
  for (std::int64_t pad : {padding.h, padding.w})
    if (pad < 0) throw Error("pad must be non-negative, but got pad: " + str(pad));
  if (padding.h > kernel.h / 2 || padding.w > kernel.w / 2) {
    const bool h = padding.h > kernel.h / 2;
    throw Error("pad should be at most half of kernel size, but got pad=" + str(h ? padding.h : padding.w) +
                " and kernel_size=" + str(h ? kernel.h : kernel.w));
  }
  if (kernel.h <= 0 || kernel.w <= 0) {
    throw Error("kernel size should be greater than zero, but got kH: " + str(kernel.h) + " kW: " + str(kernel.w));
  }
  if (stride.h <= 0 || stride.w <= 0) {
    throw Error("stride should be greater than zero, but got dH: " + str(stride.h) + " dW: " + str(stride.w));
  }
  if (dilation.h <= 0 || dilation.w <= 0) {
    throw Error("dilation should be greater than zero, but got dilationH: " + str(dilation.h) +
                " dilationW: " + str(dilation.w));
  }
  const std::int64_t C = x.size(1), H = x.size(2), W = x.size(3);
  const std::int64_t OH = poolOutputSize(H, kernel.h, padding.h, stride.h, dilation.h, ceilMode);
  const std::int64_t OW = poolOutputSize(W, kernel.w, padding.w, stride.w, dilation.w, ceilMode);
  if (OH < 1 || OW < 1) {
    throw Error("Given input size: (" + str(C) + "x" + str(H) + "x" + str(W) + "). Calculated output size: (" + str(C) +
                "x" + str(OH) + "x" + str(OW) + "). Output size is too small");
  }
  return {x.size(0), C, H, W, OH, OW, kernel.h, kernel.w, stride.h, stride.w, padding.h, padding.w,
          dilation.h, dilation.w, countIncludePad};
}

}  // namespace

Tensor conv2d(const Tensor& input0, const Tensor& weight0, const Tensor& bias0, Size2 stride, Size2 padding,
              Size2 dilation, std::int64_t groups) {
  const profiler::RecordScope record("aten::conv2d", {&input0, &weight0, &bias0});
  checkSameDevice("conv2d", {{"input", input0}, {"weight", weight0}, {"bias", bias0}});
  Tensor input = input0, weight = weight0, bias = bias0;
  amp::autocast("conv2d", {&input, &weight, &bias});
  if (input.dim() != 3 && input.dim() != 4) {
    throw Error("Expected 3D (unbatched) or 4D (batched) input to conv2d, but got input of size: " +
                shapeStr(input.sizes()));
  }
  detail::requireFloat("conv2d", input);
  if (input.dtype() != weight.dtype()) {
    throw Error("expected scalar type " + scalarTypeName(input.dtype()) + " but found " + scalarTypeName(weight.dtype()));
  }
  if (bias.defined() && bias.dtype() != input.dtype()) {
    throw Error("Input type (" + detail::cppTypeName(input.dtype()) + ") and bias type (" +
                detail::cppTypeName(bias.dtype()) + ") should be the same");
  }
  checkConvArguments(stride, padding, dilation, groups);
  if (weight.dim() != 4) {
    throw Error("Expected 4-dimensional weight for 4-dimensional input " + shapeStr(batched(input, input.dim() == 3).sizes()) +
                ", but got " + str(weight.dim()) + "-dimensional weight of size " + shapeStr(weight.sizes()) + " instead");
  }
  const bool unbatched = input.dim() == 3;
  if (unbatched) return conv2d(input.unsqueeze(0), weight, bias, stride, padding, dilation, groups).squeeze(0);

  const Backend::Conv2dShape shape = convShape(input, weight, bias, stride, padding, dilation, groups);
  Tensor x = input.contiguous();                   // (N, C, H, W)
  Tensor w = weight.contiguous();                  // (K, C / groups, R, S)
  Tensor b = bias.defined() ? bias.contiguous() : Tensor();  // (K)
  Tensor out = Tensor::empty({shape.batch, shape.outChannels, shape.outH, shape.outW}, x.dtype(), x.device());
  detail::backendOf(x).conv2d(out, x, w, b.defined() ? &b : nullptr, shape);
  if (!autograd::anyRequiresGrad({x, w, b})) return out;
  Tensor sx = x.detach(), sw = w.detach();
  return autograd::record(out, "ConvolutionBackward0", {x, w, b}, [sx, sw, shape](const Tensor& g0, const Needs& n) {
    Tensor g = g0.contiguous();  // (N, K, OH, OW)
    Backend& be = detail::backendOf(g);
    Grads grads(3);
    if (n[0]) {  // d input: W^T @ gradOut columns, scattered back (col2im)
      grads[0] = detail::emptyLike(sx, g.dtype());
      be.conv2dBackwardInput(grads[0], g, sw, shape);
    }
    if (n[1]) {  // d weight: gradOut @ im2col(input)^T, summed over the batch
      grads[1] = detail::emptyLike(sw, g.dtype());
      be.conv2dBackwardWeight(grads[1], g, sx, shape);
    }
    if (n[2]) {  // d bias: gradOut summed over N, OH, OW -- one reduction, so 16-bit types round once
      grads[2] = sum(g.transpose(0, 1).reshape({shape.outChannels, -1}), 1);
    }
    return grads;
  }, {sx, sw});
}

ConvPadding parseConvPadding(const std::string& text) {
  if (text == "valid") return ConvPadding::Valid;
  if (text == "same") return ConvPadding::Same;
  throw Error("Invalid padding string: '" + text + "'");
}

std::string toString(ConvPadding padding) { return padding == ConvPadding::Same ? "same" : "valid"; }

// PyTorch's _convolution_mode: 'same' pads dilation * (k - 1) in all, half before (rounded down) and
// the rest after. A symmetric padding runs as it is; an asymmetric one as the larger padding on both
// sides, with the output's first row/column -- the window that the extra leading padding added --
// dropped (an autograd slice, so backward needs nothing of its own).
Tensor conv2d(const Tensor& input, const Tensor& weight, const Tensor& bias, Size2 stride, ConvPadding padding, Size2 dilation,
              std::int64_t groups) {
  if (padding == ConvPadding::Valid) return conv2d(input, weight, bias, stride, Size2(0), dilation, groups);
  if (stride.h != 1 || stride.w != 1) throw Error("padding='same' is not supported for strided convolutions");
  if (weight.dim() != 4 || dilation.h <= 0 || dilation.w <= 0) {
    return conv2d(input, weight, bias, stride, Size2(0), dilation, groups);  // its error, in its words
  }
  const std::int64_t totalH = dilation.h * (weight.size(2) - 1), totalW = dilation.w * (weight.size(3) - 1);
  const std::int64_t beforeH = totalH / 2, afterH = totalH - beforeH, beforeW = totalW / 2, afterW = totalW - beforeW;
  Tensor out = conv2d(input, weight, bias, stride, Size2(afterH, afterW), dilation, groups);
  const std::int64_t h = out.dim() - 2, w = out.dim() - 1;
  if (afterH != beforeH) out = out.slice(h, afterH - beforeH, out.size(h));
  if (afterW != beforeW) out = out.slice(w, afterW - beforeW, out.size(w));
  return out;
}

std::pair<Tensor, Tensor> max_pool2d_with_indices(const Tensor& input, Size2 kernel_size, OptionalSize2 stride,
                                                  Size2 padding, Size2 dilation, bool ceil_mode) {
  const profiler::RecordScope record("aten::max_pool2d_with_indices", {&input});
  const PoolInput in = poolInput("max_pool2d", input);
  const Backend::Pool2dShape shape =
      poolShape(in.x, kernel_size, stride.value_or(kernel_size), padding, dilation, ceil_mode, true);
  const Shape outShape{shape.batch, shape.channels, shape.outH, shape.outW};
  Tensor out = Tensor::empty(outShape, in.x.dtype(), in.x.device());
  Tensor indices = Tensor::empty(outShape, kInt64, in.x.device());
  Backend& be = detail::backendOf(in.x);
  if (out.numel() > 0) be.maxPool2d(out, indices, in.x, shape);
  if (autograd::anyRequiresGrad({in.x})) {
    Shape inShape = in.x.sizes();
    Tensor idx = indices;
    out = autograd::record(out, "MaxPool2DWithIndicesBackward0", {in.x}, [idx, inShape, shape](const Tensor& g, const Needs&) {
      Tensor gi = Tensor::empty(inShape, g.dtype(), g.device());
      detail::backendOf(g).maxPool2dBackward(gi, g.contiguous(), idx, shape);
      return Grads{gi};
    });
  }
  return {unbatch(out, in.unbatched), unbatch(indices, in.unbatched)};
}

Tensor max_pool2d(const Tensor& input, Size2 kernel_size, OptionalSize2 stride, Size2 padding, Size2 dilation,
                  bool ceil_mode) {
  const profiler::RecordScope record("aten::max_pool2d", {&input});
  return max_pool2d_with_indices(input, kernel_size, stride, padding, dilation, ceil_mode).first;
}

Tensor avg_pool2d(const Tensor& input, Size2 kernel_size, OptionalSize2 stride, Size2 padding, bool ceil_mode,
                  bool count_include_pad) {
  const profiler::RecordScope record("aten::avg_pool2d", {&input});
  const PoolInput in = poolInput("avg_pool2d", input);
  const Backend::Pool2dShape shape =
      poolShape(in.x, kernel_size, stride.value_or(kernel_size), padding, 1, ceil_mode, count_include_pad);
  Tensor out = Tensor::empty({shape.batch, shape.channels, shape.outH, shape.outW}, in.x.dtype(), in.x.device());
  if (out.numel() > 0) detail::backendOf(in.x).avgPool2d(out, in.x, shape);
  if (autograd::anyRequiresGrad({in.x})) {
    Shape inShape = in.x.sizes();
    out = autograd::record(out, "AvgPool2DBackward0", {in.x}, [inShape, shape](const Tensor& g, const Needs&) {
      Tensor gi = Tensor::empty(inShape, g.dtype(), g.device());
      detail::backendOf(g).avgPool2dBackward(gi, g.contiguous(), shape);
      return Grads{gi};
    });
  }
  return unbatch(out, in.unbatched);
}

Tensor adaptive_avg_pool2d(const Tensor& input, Size2 output_size) {
  const profiler::RecordScope record("aten::adaptive_avg_pool2d", {&input});
  if (input.dim() != 3 && input.dim() != 4) {
    throw Error("adaptive_avg_pool2d(): Expected 3D or 4D tensor, but got " + shapeStr(input.sizes()));
  }
  detail::requireFloat("adaptive_avg_pool2d", input);
  for (std::int64_t d = input.dim() - 3; d < input.dim(); ++d) {
    if (input.size(d) == 0) {
      throw Error("adaptive_avg_pool2d(): Expected input to have non-zero size for non-batch dimensions, but input "
                  "has sizes " + shapeStr(input.sizes()) + " with dimension " + str(d) + " being empty");
    }
  }
  if (output_size.h < 0 || output_size.w < 0) {
    throw Error("adaptive_avg_pool2d: elements of output_size must be greater than or equal to 0 but received {" +
                str(output_size.h) + ", " + str(output_size.w) + "}");
  }
  const bool unbatched = input.dim() == 3;
  Tensor x = batched(input, unbatched).contiguous();  // (N, C, H, W)
  Backend::Pool2dShape shape{x.size(0), x.size(1), x.size(2), x.size(3), output_size.h, output_size.w,
                             0, 0, 1, 1, 0, 0, 1, 1, true};  // kernel/stride/padding unused: the windows are adaptive
  Tensor out = Tensor::empty({shape.batch, shape.channels, shape.outH, shape.outW}, x.dtype(), x.device());
  if (out.numel() > 0) detail::backendOf(x).adaptiveAvgPool2d(out, x, shape);
  if (autograd::anyRequiresGrad({x})) {
    Shape inShape = x.sizes();
    out = autograd::record(out, "AdaptiveAvgPool2DBackward0", {x}, [inShape, shape](const Tensor& g, const Needs&) {
      Tensor gi = Tensor::empty(inShape, g.dtype(), g.device());
      if (g.numel() > 0) detail::backendOf(g).adaptiveAvgPool2dBackward(gi, g.contiguous(), shape);
      else gi.fill_(0.0);
      return Grads{gi};
    });
  }
  return unbatch(out, unbatched);
}

}  // namespace gpulab

namespace gpulab {

std::string Size2::str() const {
  if (!tuple) return std::to_string(h);
  std::string s = "(";
  s += std::to_string(h);
  s += ", ";
  s += std::to_string(w);
  s += ")";
  return s;
}

}  // namespace gpulab
