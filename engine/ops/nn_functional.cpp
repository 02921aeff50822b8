// torch.nn.functional: softmax, losses and dropout, each a fused kernel pair (forward, backward).
// Reduction::None is composed from differentiable ops instead (one loss per element or per sample
// is plain elementwise math), so it needs no kernels of its own and runs wherever those ops do.
#include "engine/autograd/grad_mode.h"
#include "engine/ops/autocast.h"
#include "engine/ops/op_util.h"

#include "engine/core/number_format.h"
#include "engine/profiler/profiler.h"

namespace gpulab {

using detail::Grads;
using detail::Needs;

namespace {

Tensor softmaxImpl(const Tensor& a, std::int64_t dim, bool log) {
  const char* name = log ? "log_softmax" : "softmax";
  detail::requireFloat(name, a);
  if (a.dim() == 0) return softmaxImpl(a.reshape({1}), 0, log).reshape({});
  dim = wrapDim(dim, a.dim());
  if (dim != a.dim() - 1) {  // the kernels work on rows: move `dim` last and back
    return softmaxImpl(a.transpose(dim, -1), -1, log).transpose(dim, -1);
  }
  Tensor x = a.contiguous();
  const std::int64_t cols = x.size(-1), rows = cols == 0 ? 0 : x.numel() / cols;
  Tensor out = detail::emptyLike(x);
  detail::backendOf(x).softmax(out, x, rows, cols, log);
  if (!autograd::anyRequiresGrad({a})) return out;
  Tensor so = out.detach();
  return autograd::record(out, log ? "LogSoftmaxBackward0" : "SoftmaxBackward0", {x},
                          [so, rows, cols, log](const Tensor& g, const Needs&) {
                            Tensor gi = detail::emptyLike(so);
                            detail::backendOf(so).softmaxBackward(gi, g.contiguous(), so, rows, cols, log);
                            return Grads{gi};
                          }, {so});
}

Tensor pointLoss(const char* name, PointLoss kind, const Tensor& input0, const Tensor& target0, Reduction reduction) {
  checkSameDevice(name, {{"input", input0}, {"target", target0}});
  Tensor input = input0, target = target0;
  amp::autocast(name, {&input, &target});
  detail::requireFloat(name, input);
  if (input.sizes() != target.sizes()) {
    throw ValueError(std::string(name) + ": input and target must have the same shape, got " + shapeStr(input.sizes()) +
                     " and " + shapeStr(target.sizes()) +
                     " (PyTorch would broadcast them with a warning; that is almost always a bug, so GPU Lab refuses)");
  }
  // The same-device rule admits a 0-dim CPU tensor beside a CUDA one (only 0-dim pairs reach here:
  // the shapes match): it joins the other's device, as in PyTorch, before any kernel reads it.
  Tensor in = input, tg = target;
  if (in.device() != tg.device()) {
    if (in.device().isCpu()) in = in.to(tg.device(), /*non_blocking=*/true);  // staged: no wait for the stream
    else tg = tg.to(in.device(), /*non_blocking=*/true);
  }
  if (reduction == Reduction::None) {
    Tensor d = sub(in, tg);  // an int64 target promotes to float32, as in PyTorch
    return kind == PointLoss::MSE ? d.pow(2.0) : d.abs();
  }
  // Both sides in one dtype: an int64 target or a float32 one beside float16 input promote as in PyTorch.
  const DType common = result_type(in, tg);
  Tensor x = in.to(common).contiguous(), y = tg.to(common).contiguous();
  const double scale = reduction == Reduction::Mean ? 1.0 / static_cast<double>(std::max<std::int64_t>(x.numel(), 1)) : 1.0;
  Tensor out = Tensor::empty({}, common, x.device());
  detail::backendOf(x).pointLoss(kind, out, x, y, scale);
  if (!autograd::anyRequiresGrad({x, y})) return out;
  Tensor sx = x.detach(), sy = y.detach();
  return autograd::record(out, kind == PointLoss::MSE ? "MseLossBackward0" : "L1LossBackward0", {x, y},
                          [sx, sy, scale, kind](const Tensor& g, const Needs& n) {
                            Tensor gx = detail::emptyLike(sx);
                            detail::backendOf(sx).pointLossBackward(kind, gx, g.contiguous(), sx, sy, scale);
                            return Grads{n[0] ? gx : Tensor(), n[1] ? neg(gx) : Tensor()};
                          }, {sx, sy});
}

}  // namespace

Tensor softmax(const Tensor& a, std::int64_t dim) {
  const profiler::RecordScope record("aten::softmax", {&a});
  return softmaxImpl(amp::autocast("softmax", a), dim, false);
}
Tensor log_softmax(const Tensor& a, std::int64_t dim) {
  const profiler::RecordScope record("aten::log_softmax", {&a});
  return softmaxImpl(amp::autocast("log_softmax", a), dim, true);
}

Tensor mse_loss(const Tensor& input, const Tensor& target, Reduction reduction) {
  const profiler::RecordScope record("aten::mse_loss", {&input, &target});
  return pointLoss("mse_loss", PointLoss::MSE, input, target, reduction);
}
Tensor l1_loss(const Tensor& input, const Tensor& target, Reduction reduction) {
  const profiler::RecordScope record("aten::l1_loss", {&input, &target});
  return pointLoss("l1_loss", PointLoss::L1, input, target, reduction);
}

Tensor nll_loss(const Tensor& logp0, const Tensor& target, Reduction reduction) {
  const profiler::RecordScope record("aten::nll_loss", {&logp0, &target});
  checkSameDevice("nll_loss", {{"input", logp0}, {"target", target}});
  const Tensor logp = amp::autocast("nll_loss", logp0);
  detail::requireFloat("nll_loss", logp);
  if (target.dtype() != kInt64) {
    throw Error("expected scalar type Long but found " + dtypeName(target.dtype()) + " (class labels must be int64)");
  }
  if (logp.dim() != 2 || target.dim() != 1 || target.size(0) != logp.size(0)) {
    throw ValueError("Expected input of shape (N, C) and target of shape (N), got " + shapeStr(logp.sizes()) + " and " +
                     shapeStr(target.sizes()));
  }
  Tensor x = logp.contiguous(), t = target.contiguous();
  const std::int64_t rows = x.size(0), cols = x.size(1);
  const double scale = reduction == Reduction::Mean ? 1.0 / static_cast<double>(std::max<std::int64_t>(rows, 1)) : 1.0;
  Tensor out = Tensor::empty({}, x.dtype(), x.device());
  detail::backendOf(x).nllLoss(out, x, t, rows, cols, scale);  // also what checks the labels' range
  if (reduction == Reduction::None) {
    // loss[i] = -logp[i, target[i]], picked with a one-hot mask (N, C) that the backward kernel writes
    // (gradient 1, scale -1). The mask multiplies, so a -inf log-probability outside the target class
    // gives NaN where PyTorch gives the row's loss; log_softmax of finite logits never has one.
    Tensor onehot = Tensor::empty({rows, cols}, x.dtype(), x.device());
    detail::backendOf(x).nllLossBackward(onehot, ones({}, {.dtype = x.dtype(), .device = x.device()}), t, rows, cols, -1.0);
    return neg(sum(x * onehot, 1));
  }
  return autograd::record(out, "NllLossBackward0", {x}, [t, rows, cols, scale](const Tensor& g, const Needs&) {
    Tensor gi = Tensor::empty({rows, cols}, g.dtype(), g.device());
    detail::backendOf(g).nllLossBackward(gi, g.contiguous(), t, rows, cols, scale);
    return Grads{gi};
  });
}

Tensor cross_entropy(const Tensor& logits0, const Tensor& target, Reduction reduction) {
  const profiler::RecordScope record("aten::cross_entropy_loss", {&logits0, &target});
  checkSameDevice("cross_entropy", {{"input", logits0}, {"target", target}});
  const Tensor logits = amp::autocast("cross_entropy", logits0);
  return nll_loss(log_softmax(logits, 1), target, reduction);
}

Reduction parseReduction(const std::string& name) {
  if (name == "mean") return Reduction::Mean;
  if (name == "sum") return Reduction::Sum;
  if (name == "none") return Reduction::None;
  throw ValueError(name + " is not a valid value for reduction");
}

Tensor mse_loss(const Tensor& input, const Tensor& target, const std::string& reduction) {
  return mse_loss(input, target, parseReduction(reduction));
}
Tensor l1_loss(const Tensor& input, const Tensor& target, const std::string& reduction) {
  return l1_loss(input, target, parseReduction(reduction));
}
Tensor nll_loss(const Tensor& logp, const Tensor& target, const std::string& reduction) {
  return nll_loss(logp, target, parseReduction(reduction));
}
Tensor cross_entropy(const Tensor& logits, const Tensor& target, const std::string& reduction) {
  return cross_entropy(logits, target, parseReduction(reduction));
}

Tensor dropout(const Tensor& a, double p, bool training, Generator& gen) {
  const profiler::RecordScope record("aten::dropout", {&a});
  if (p < 0.0 || p > 1.0) throw ValueError("dropout probability has to be between 0 and 1, but got " + formatNumber(p));
  if (!training || p == 0.0) return a;
  detail::requireFloat("dropout", a);
  if (p == 1.0) return mul(a, 0.0);
  Tensor x = a.contiguous();
  Tensor out = detail::emptyLike(x), mask = detail::emptyLike(x);
  detail::backendOf(x).dropout(out, mask, x, static_cast<float>(p),
                               detail::randomCounters("dropout", gen, x.device(), static_cast<std::uint64_t>(x.numel())));
  return autograd::record(out, "NativeDropoutBackward0", {x}, [mask](const Tensor& g, const Needs&) { return Grads{g * mask}; });
}

Tensor embedding(const Tensor& weight, const Tensor& indices, std::optional<std::int64_t> padding_idx) {
  const profiler::RecordScope record("aten::embedding", {&weight, &indices});
  if (weight.dim() != 2) throw Error("'weight' must be 2-D");
  if (indices.dtype() != kInt64) {
    throw Error("Expected tensor for argument #1 'indices' to have one of the following scalar types: Long, Int; but got " +
                scalarTypeName(indices.dtype()) + " instead (while checking arguments for embedding)");
  }
  const std::int64_t rows = weight.size(0), dim = weight.size(1);
  if (padding_idx) {
    if (*padding_idx >= rows || *padding_idx < -rows) throw Error("Padding_idx must be within num_embeddings");
    if (*padding_idx < 0) *padding_idx += rows;
  }
  const Tensor flat = indices.reshape({-1});
  Tensor out;
  {
    NoGradGuard noGrad;  // one node for the whole op, EmbeddingBackward0, as PyTorch's
    out = index_select(weight, 0, flat);  // refuses an index outside the rows, with PyTorch's words
  }
  Shape shape = indices.sizes();
  shape.push_back(dim);
  out = out.reshape(shape);
  if (!autograd::anyRequiresGrad({weight})) return out;
  const Shape weightShape = weight.sizes();
  return autograd::record(out, "EmbeddingBackward0", {weight}, [flat, weightShape, padding_idx, rows, dim](const Tensor& g, const Needs&) {
    Tensor rowsGrad = g.reshape({-1, dim});
    if (padding_idx) rowsGrad = rowsGrad * ne(flat, static_cast<double>(*padding_idx)).to(g.dtype()).unsqueeze(1);
    const DType accumulate = isReducedPrecision(g.dtype()) ? kFloat32 : g.dtype();
    Tensor grad = zeros(weightShape, {.dtype = accumulate, .device = g.device()});
    detail::backendOf(grad).indexAdd(grad, rowsGrad.to(accumulate).contiguous(), flat.to(g.device()), 1, rows, dim);
    return Grads{grad.to(g.dtype())};
  });
}

}  // namespace gpulab
