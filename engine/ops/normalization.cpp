// torch.nn.functional.batch_norm: PyTorch's argument checks and messages, then the device's norm-family
// kernels (engine/kernels/norm/: loops on the CPU, cuDNN on CUDA), forward and backward side by side.
//
// Input (N, C, *) -- (N, C) for BatchNorm1d, (N, C, H, W) for BatchNorm2d -- is run as (N, C, S) with
// S the product of the trailing sizes; statistics are per channel over N * S values.
//   training  batch statistics normalise; running_mean/running_var (when given) move by `momentum`
//             towards the batch mean and the unbiased batch variance (in place, as PyTorch);
//             backward through Backend::batchNormBackward (the three-term formula of the kernels).
//   eval      running statistics normalise: an affine map y = x * scale + shift per channel,
//             scale = weight / sqrt(running_var + eps), shift = bias - running_mean * scale, computed
//             by the backend's kernel; its backward is composed from differentiable ops.
// dtypes: weight, bias and running stats are float32 for a float16/bfloat16 input (PyTorch's mixed
// batch norm, cuDNN's rule) and may also be in the input's 16-bit dtype, which is widened here; for a
// float32/float64 input they must have its dtype. batch_norm is not in autocast's lists: it runs in
// its input's dtype.
#include <algorithm>

#include "engine/autograd/grad_mode.h"
#include "engine/ops/op_util.h"
#include "engine/profiler/profiler.h"

namespace gpulab {

using detail::Grads;
using detail::Needs;

namespace {

std::string str(std::int64_t v) { return std::to_string(v); }

bool isLowPrecision(DType t) { return t == kFloat16 || t == kBFloat16; }

// PyTorch's check_dims_match_num_input_features.
void checkFeatures(const char* what, const Tensor& t, std::int64_t channels) {
  if (t.defined() && t.numel() != channels) {
    throw Error(std::string(what) + " should contain " + str(channels) + " elements not " + str(t.numel()));
  }
}

// A parameter or statistic as the kernels take it: contiguous, 1-D (C), in the statistics' dtype.
// A float16/bfloat16 parameter of a 16-bit input is widened (differentiably, so its gradient comes
// back in its own dtype); anything else must already be in the statistics' dtype.
Tensor asStatistic(const Tensor& t, DType inputDtype, DType statDtype) {
  if (!t.defined()) return t;
  if (t.dtype() != statDtype && !(isLowPrecision(inputDtype) && t.dtype() == inputDtype)) {
    throw Error("mixed dtype (" + std::string(t.is_cuda() ? "CUDA" : "CPU") +
                "): expect parameter to have scalar type of " + scalarTypeName(statDtype));
  }
  Tensor s = t.dtype() == statDtype ? t : to_dtype(t, statDtype);
  return s.reshape({t.numel()}).contiguous();
}

}  // namespace

Tensor batch_norm(const Tensor& input, const Tensor& running_mean, const Tensor& running_var, const Tensor& weight,
                  const Tensor& bias, bool training, double momentum, double eps) {
  const profiler::RecordScope record("aten::batch_norm", {&input, &weight, &bias});
  checkSameDevice("batch_norm", {{"input", input},
                                 {"running_mean", running_mean},
                                 {"running_var", running_var},
                                 {"weight", weight},
                                 {"bias", bias}});
  // F.batch_norm's _verify_batch_size: a channel needs two values to have a variance.
  if (training) {
    std::int64_t values = input.dim() > 0 ? input.size(0) : 1;
    for (std::int64_t d = 2; d < input.dim(); ++d) values *= input.size(d);
    if (values == 1) {
      throw ValueError("Expected more than 1 value per channel when training, got input size " +
                       shapeStr(input.sizes()));
    }
  }
  const std::int64_t C = input.dim() > 1 ? input.size(1) : 0;
  checkFeatures("running_mean", running_mean, C);
  checkFeatures("running_var", running_var, C);
  checkFeatures("weight", weight, C);
  checkFeatures("bias", bias, C);
  if (!training && !running_mean.defined()) throw Error("running_mean must be defined in evaluation mode");
  if (!training && !running_var.defined()) throw Error("running_var must be defined in evaluation mode");
  if (input.dim() < 2) throw IndexError("Dimension out of range (expected to be in range of [-1, 0], but got 1)");
  detail::requireFloat("batch_norm", input);

  const DType statDtype = isLowPrecision(input.dtype()) ? kFloat32 : input.dtype();
  Backend::BatchNormShape shape;
  shape.batch = input.size(0);
  shape.channels = C;
  shape.spatial = 1;
  for (std::int64_t d = 2; d < input.dim(); ++d) shape.spatial *= input.size(d);
  shape.eps = eps;
  shape.momentum = momentum;

  Tensor x = input.contiguous();  // (N, C, S) in memory
  Tensor w = asStatistic(weight, input.dtype(), statDtype);
  Tensor b = asStatistic(bias, input.dtype(), statDtype);
  // Running statistics the kernel can update in place: the caller's own tensors when they already are
  // contiguous and of the statistics' dtype, else copies written back afterwards.
  Tensor rm, rv;
  {
    NoGradGuard noGrad;
    rm = running_mean.defined() ? asStatistic(running_mean.detach(), input.dtype(), statDtype) : Tensor();
    rv = running_var.defined() ? asStatistic(running_var.detach(), input.dtype(), statDtype) : Tensor();
  }
  Backend& be = detail::backendOf(x);

  if (!training) {
    Tensor out = detail::emptyLike(x);
    if (out.numel() > 0) {
      be.batchNorm(out, x, w.defined() ? &w : nullptr, b.defined() ? &b : nullptr, &rm, &rv, nullptr, nullptr, false,
                   shape);
    }
    if (!autograd::anyRequiresGrad({x, w, b})) return out;
    // The backward of the affine map y = x * scale + shift, composed of ops: with invstd = 1 / sqrt(
    // running_var + eps) and xhat = (x - running_mean) invstd,
    //   d input = g * weight * invstd,  d weight = sum g * xhat,  d bias = sum g   (sums over all but C)
    // (the forward is the kernel's, whether or not a gradient is wanted, so a result never depends on
    // grad mode -- activation checkpointing recomputes it without one).
    Tensor invstd, mean;
    {
      NoGradGuard noGrad;
      invstd = 1.0 / sqrt(rv + eps);  // (C), from the running statistics as they are now
      mean = rm.clone();
    }
    Tensor sx = x.detach(), sw = w.defined() ? w.detach() : Tensor();
    return autograd::record(out, "NativeBatchNormBackward0", {x, w, b},
                            [sx, sw, invstd, mean, statDtype](const Tensor& g, const Needs& n) {
                              const std::int64_t C = invstd.numel();
                              Shape bshape(static_cast<std::size_t>(sx.dim()), 1);
                              bshape[1] = C;
                              // (C, N * S): every channel's values in a row, for the parameter sums
                              auto rows = [C](const Tensor& t) { return t.transpose(0, 1).reshape({C, -1}); };
                              Tensor gs = g.dtype() == statDtype ? g : to_dtype(g, statDtype);
                              Grads grads(3);
                              if (n[0]) {
                                Tensor scale = sw.defined() ? sw * invstd : invstd;
                                Tensor gi = gs * scale.reshape(bshape);
                                grads[0] = gi.dtype() == sx.dtype() ? gi : to_dtype(gi, sx.dtype());
                              }
                              if (n[1]) {
                                Tensor xs = sx.dtype() == statDtype ? sx : to_dtype(sx, statDtype);
                                Tensor xhat = (xs - mean.reshape(bshape)) * invstd.reshape(bshape);
                                grads[1] = sum(rows(gs * xhat), 1);
                              }
                              if (n[2]) grads[2] = sum(rows(gs), 1);
                              return grads;
                            }, {sx, sw});
  }

  Tensor out = detail::emptyLike(x);
  Tensor saveMean = Tensor::empty({C}, statDtype, x.device());
  Tensor saveInvStd = Tensor::empty({C}, statDtype, x.device());
  be.batchNorm(out, x, w.defined() ? &w : nullptr, b.defined() ? &b : nullptr, rm.defined() ? &rm : nullptr,
               rv.defined() ? &rv : nullptr, &saveMean, &saveInvStd, true, shape);
  {
    NoGradGuard noGrad;  // the running statistics are updated in place, as PyTorch's
    if (rm.defined() && rm.data_ptr() != running_mean.data_ptr()) running_mean.detach().copy_(rm.reshape(running_mean.sizes()));
    if (rv.defined() && rv.data_ptr() != running_var.data_ptr()) running_var.detach().copy_(rv.reshape(running_var.sizes()));
  }
  if (!autograd::anyRequiresGrad({x, w, b})) return out;
  Tensor sx = x.detach(), sw = w.defined() ? w.detach() : Tensor();
  return autograd::record(out, "NativeBatchNormBackward0", {x, w, b},
                          [sx, sw, saveMean, saveInvStd, shape, statDtype](const Tensor& g0, const Needs& n) {
                            Tensor g = g0.contiguous();  // (N, C, S)
                            Backend& be = detail::backendOf(g);
                            Grads grads(3);
                            grads[0] = detail::emptyLike(sx, g.dtype());
                            if (n[1]) grads[1] = Tensor::empty({shape.channels}, statDtype, g.device());
                            if (n[2]) grads[2] = Tensor::empty({shape.channels}, statDtype, g.device());
                            be.batchNormBackward(grads[0], n[1] ? &grads[1] : nullptr, n[2] ? &grads[2] : nullptr, g,
                                                 sx, sw.defined() ? &sw : nullptr, saveMean, saveInvStd, shape);
                            if (!n[0]) grads[0] = Tensor();
                            return grads;
                          }, {sx, sw});
}

}  // namespace gpulab
