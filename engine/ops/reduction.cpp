// Reductions: the input is viewed as (outer, k, inner) around the reduced dimension, so one kernel
// covers "all elements" (outer = inner = 1), rows, columns and any middle dimension.
#include <limits>

#include "engine/autograd/grad_mode.h"
#include "engine/ops/autocast.h"
#include "engine/ops/op_util.h"
#include "engine/profiler/profiler.h"

namespace gpulab {

using detail::Grads;
using detail::Needs;

namespace {

struct ReduceGeometry {
  std::int64_t outer = 1, k = 1, inner = 1;
  Shape outShape;
};

ReduceGeometry geometry(const Tensor& a, std::int64_t dim, bool keepdim) {
  ReduceGeometry g;
  for (std::int64_t i = 0; i < a.dim(); ++i) {
    const std::int64_t s = a.size(i);
    if (i < dim) g.outer *= s;
    else if (i == dim) g.k = s;
    else g.inner *= s;
    if (i != dim) g.outShape.push_back(s);
    else if (keepdim) g.outShape.push_back(1);
  }
  return g;
}

// Gradient of a reduction over `dim` broadcast back to `inShape`.
Tensor expandBack(const Tensor& g, const Shape& inShape, std::int64_t dim, bool keepdim) {
  Tensor gk = (keepdim || inShape.empty()) ? g : g.unsqueeze(dim);
  return gk.expand(inShape);
}

}  // namespace

namespace {
// A bool tensor sums as int64: the count of its true values.
Tensor summable(const Tensor& a) { return a.dtype() == kBool ? a.to(kInt64) : a; }
}  // namespace

Tensor sum(const Tensor& a0) {
  const profiler::RecordScope record("aten::sum", {&a0});
  const Tensor a = summable(amp::autocast("sum", a0));
  Tensor x = a.contiguous();
  Tensor out = Tensor::empty({}, x.dtype(), x.device());
  detail::backendOf(x).reduce(ReduceOp::Sum, out, nullptr, x, 1, x.numel(), 1);
  Shape inShape = a.sizes();
  return autograd::record(out, "SumBackward0", {a}, [inShape](const Tensor& g, const Needs&) { return Grads{g.expand(inShape)}; });
}

Tensor sum(const Tensor& a0, std::int64_t dim, bool keepdim) {
  const profiler::RecordScope record("aten::sum", {&a0});
  const Tensor a = summable(amp::autocast("sum", a0));
  dim = wrapDim(dim, a.dim());
  if (a.dim() == 0) return sum(a);
  Tensor x = a.contiguous();
  ReduceGeometry geo = geometry(x, dim, keepdim);
  Tensor out = Tensor::empty(geo.outShape, x.dtype(), x.device());
  detail::backendOf(x).reduce(ReduceOp::Sum, out, nullptr, x, geo.outer, geo.k, geo.inner);
  Shape inShape = a.sizes();
  return autograd::record(out, "SumBackward1", {a}, [inShape, dim, keepdim](const Tensor& g, const Needs&) {
    return Grads{expandBack(g, inShape, dim, keepdim)};
  });
}

namespace {
// mean takes floating tensors only, with PyTorch 2's words (1.13 raised the same as a RuntimeError).
void requireMeanDtype(const Tensor& a) {
  if (!isFloatingPoint(a.dtype())) {
    throw NotImplementedError("mean(): could not infer output dtype. Input dtype must be either a floating point or complex dtype. Got: " +
                              scalarTypeName(a.dtype()));
  }
}
// The factor a sum of `count` elements is scaled by: 1 / count, and NaN for no elements -- the mean of
// nothing is 0 / 0, NaN in PyTorch (torch.empty(0).mean()), never 0.
double meanFactor(std::int64_t count) {
  return count == 0 ? std::numeric_limits<double>::quiet_NaN() : 1.0 / static_cast<double>(count);
}
}  // namespace

// float16/bfloat16 means are summed and divided in float32 and rounded once, as PyTorch's kernels
// (rounding the sum first would round twice).
Tensor mean(const Tensor& a) {
  const profiler::RecordScope record("aten::mean", {&a});
  requireMeanDtype(a);
  const double inv = meanFactor(a.numel());
  if (isReducedPrecision(a.dtype())) return mul(sum(a.to(kFloat32)), inv).to(a.dtype());
  return mul(sum(a), inv);
}

Tensor mean(const Tensor& a, std::int64_t dim, bool keepdim) {
  const profiler::RecordScope record("aten::mean", {&a});
  requireMeanDtype(a);
  dim = wrapDim(dim, a.dim());
  const std::int64_t k = a.dim() == 0 ? 1 : a.size(dim);
  const double inv = meanFactor(k);
  if (isReducedPrecision(a.dtype())) return mul(sum(a.to(kFloat32), dim, keepdim), inv).to(a.dtype());
  return mul(sum(a, dim, keepdim), inv);
}

Tensor max(const Tensor& a) {
  const profiler::RecordScope record("aten::max", {&a});
  if (a.numel() == 0) {
    throw Error("max(): Expected reduction dim to be specified for input.numel() == 0. Specify the reduction dim with the 'dim' argument.");
  }
  Tensor x = a.contiguous();
  Tensor out = Tensor::empty({}, x.dtype(), x.device());
  detail::backendOf(x).reduce(ReduceOp::Max, out, nullptr, x, 1, x.numel(), 1);
  if (!autograd::anyRequiresGrad({a})) return out;
  Tensor sa = a.detach(), so = out.detach();
  return autograd::record(out, "MaxBackward1", {a}, [sa, so](const Tensor& g, const Needs&) {
    // Every position holding the maximum shares the gradient evenly; a NaN maximum is held by the
    // NaNs (NaN != NaN: x != x marks them), as PyTorch's evenly_distribute_backward does.
    const Tensor mask = logical_or(eq(sa, so), logical_and(ne(sa, sa), ne(so, so))).to(g.dtype());
    return Grads{mask * (g / sum(mask))};
  }, {sa, so});
}

std::pair<Tensor, Tensor> max(const Tensor& a, std::int64_t dim, bool keepdim) {
  dim = wrapDim(dim, a.dim());
  if (a.dim() > 0 && a.size(dim) == 0) throw IndexError("max(): Expected reduction dim " + std::to_string(dim) + " to have non-zero size.");
  Tensor x = a.contiguous();
  ReduceGeometry geo = geometry(x, dim, keepdim);
  Tensor values = Tensor::empty(geo.outShape, x.dtype(), x.device());
  Tensor indices = Tensor::empty(geo.outShape, kInt64, x.device());
  detail::backendOf(x).reduce(ReduceOp::Max, values, &indices, x, geo.outer, geo.k, geo.inner);
  if (!autograd::anyRequiresGrad({a})) return {values, indices};
  Shape inShape = a.sizes();
  const std::int64_t k = geo.k;
  Tensor idx = indices;
  values = autograd::record(values, "MaxBackward0", {a}, [inShape, dim, keepdim, idx, k](const Tensor& g, const Needs&) {
    // One-hot of the winning index along `dim`, times the incoming gradient.
    Shape positions(inShape.size(), 1);
    positions[static_cast<std::size_t>(dim)] = k;
    Tensor range = arange(0.0, static_cast<double>(k), 1.0, {.dtype = kInt64, .device = g.device()}).view(positions);
    Tensor chosen = keepdim ? idx : idx.unsqueeze(dim);
    Tensor onehot = eq(chosen, range).to(g.dtype());
    Tensor gk = keepdim ? g : g.unsqueeze(dim);
    return Grads{onehot * gk};
  });
  return {values, indices};
}

Tensor argmax(const Tensor& a, std::int64_t dim, bool keepdim) {
  const profiler::RecordScope record("aten::argmax", {&a});
  NoGradGuard noGrad;
  return max(a, dim, keepdim).second;
}

namespace {

// `a` with its order reversed and no value moved past another (argmin is argmax of it): -a for floats
// (exact; NaN stays NaN, so it still wins), -1 - a for int64 (~a: no overflow at the int64 minimum).
Tensor orderReversed(const Tensor& a) { return a.dtype() == kInt64 ? rsub(a, -1.0) : neg(a); }

Tensor argAll(const char* name, const Tensor& a, bool min) {
  if (a.numel() == 0) {
    throw IndexError(std::string(name) + "(): Expected reduction dim to be specified for input.numel() == 0.");
  }
  NoGradGuard noGrad;
  const Tensor flat = a.reshape({-1});
  return max(min ? orderReversed(flat) : flat, 0).second;  // (n) -> 0-dim
}

}  // namespace

Tensor argmin(const Tensor& a, std::int64_t dim, bool keepdim) {
  const profiler::RecordScope record("aten::argmin", {&a});
  NoGradGuard noGrad;
  return max(orderReversed(a), dim, keepdim).second;
}

Tensor min(const Tensor& a) {
  const profiler::RecordScope record("aten::min", {&a});
  if (a.numel() == 0) {
    throw Error("min(): Expected reduction dim to be specified for input.numel() == 0. Specify the reduction dim with the 'dim' argument.");
  }
  // max of the order reversed, reversed back: exact, and autograd follows both reversals.
  return a.dtype() == kInt64 ? rsub(max(orderReversed(a)), -1.0) : neg(max(neg(a)));
}

// any is a max over the values as 0/1, all a min (the max of their negation, negated).
Tensor any(const Tensor& a) {
  const profiler::RecordScope record("aten::any", {&a});
  NoGradGuard noGrad;
  if (a.numel() == 0) return zeros({}, {.dtype = kBool, .device = a.device()});
  return max(a.to(kBool).to(kInt64)).to(kBool);
}
Tensor all(const Tensor& a) {
  const profiler::RecordScope record("aten::all", {&a});
  NoGradGuard noGrad;
  return logical_not(any(logical_not(a)));
}
Tensor any(const Tensor& a, std::int64_t dim, bool keepdim) {
  const profiler::RecordScope record("aten::any", {&a});
  NoGradGuard noGrad;
  if (a.dim() == 0) return any(a);
  return max(a.to(kBool).to(kInt64), wrapDim(dim, a.dim()), keepdim).first.to(kBool);
}
Tensor all(const Tensor& a, std::int64_t dim, bool keepdim) {
  const profiler::RecordScope record("aten::all", {&a});
  NoGradGuard noGrad;
  return logical_not(any(logical_not(a), dim, keepdim));
}

Tensor nonzero(const Tensor& a) {
  const profiler::RecordScope record("aten::nonzero", {&a});
  const std::vector<std::int64_t> flags = a.to(kBool).toVector<std::int64_t>();  // waits for the device
  std::vector<std::int64_t> indices;
  const Shape& sizes = a.sizes();
  const std::int64_t rank = a.dim();
  for (std::size_t i = 0; i < flags.size(); ++i) {
    if (!flags[i]) continue;
    // The flat index's coordinates, the last dim fastest.
    std::int64_t rest = static_cast<std::int64_t>(i);
    const std::size_t at = indices.size();
    indices.resize(at + static_cast<std::size_t>(rank));
    for (std::int64_t d = rank - 1; d >= 0; --d) {
      indices[at + static_cast<std::size_t>(d)] = rest % sizes[static_cast<std::size_t>(d)];
      rest /= sizes[static_cast<std::size_t>(d)];
    }
  }
  const std::int64_t count = rank == 0 ? static_cast<std::int64_t>(flags.size() == 1 && flags[0]) : static_cast<std::int64_t>(indices.size()) / rank;
  return tensor(indices, {count, rank}, {.dtype = kInt64}).to(a.device());
}

Tensor argmax(const Tensor& a) { return argAll("argmax", a, false); }
Tensor argmin(const Tensor& a) { return argAll("argmin", a, true); }

Tensor sum_to_size(const Tensor& a, const Shape& shape) {
  if (a.sizes() == shape) return a;
  Tensor r = a;
  while (r.dim() > static_cast<std::int64_t>(shape.size())) r = sum(r, 0, false);
  for (std::size_t i = 0; i < shape.size(); ++i) {
    if (shape[i] == 1 && r.size(static_cast<std::int64_t>(i)) != 1) r = sum(r, static_cast<std::int64_t>(i), true);
  }
  if (r.sizes() != shape) throw ValueError("size " + shapeStr(a.sizes()) + " is not expandable to size " + shapeStr(shape));
  return r;
}

}  // namespace gpulab
