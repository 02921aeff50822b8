// Reductions: the input is viewed as (outer, k, inner) around the reduced dimension, so one kernel
// covers "all elements" (outer = inner = 1), rows, columns and any middle dimension.
#include <algorithm>
#include <cmath>
#include <limits>
#include <optional>

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

// Reductions over a set of dims (sum, mean, vector_norm, var, std) move the reduced dims last and
// flatten them into one, (kept..., n), so one reduction over the last dim serves any set.

// The dims a reduction names, wrapped and ascending; none named means every dim.
std::vector<std::int64_t> reducedDims(const Tensor& a, const std::vector<std::int64_t>& dims) {
  std::vector<std::int64_t> out;
  if (dims.empty()) {
    for (std::int64_t d = 0; d < a.dim(); ++d) out.push_back(d);
    return out;
  }
  std::vector<bool> seen(static_cast<std::size_t>(std::max<std::int64_t>(a.dim(), 1)), false);
  for (std::int64_t d : dims) {
    const std::int64_t w = wrapDim(d, a.dim());
    if (seen[static_cast<std::size_t>(w)]) throw Error("dim " + std::to_string(w) + " appears multiple times in the list of dims");
    seen[static_cast<std::size_t>(w)] = true;
    if (a.dim() > 0) out.push_back(w);
  }
  std::sort(out.begin(), out.end());
  return out;
}

bool isReduced(const std::vector<std::int64_t>& rd, std::int64_t d) { return std::binary_search(rd.begin(), rd.end(), d); }

// `a` as (kept dims..., product of the reduced dims).
Tensor reducedLast(const Tensor& a, const std::vector<std::int64_t>& rd) {
  std::vector<std::int64_t> order;
  Shape shape;
  for (std::int64_t d = 0; d < a.dim(); ++d) {
    if (!isReduced(rd, d)) {
      order.push_back(d);
      shape.push_back(a.size(d));
    }
  }
  for (std::int64_t d : rd) order.push_back(d);
  shape.push_back(-1);
  if (a.dim() == 0) return a.reshape({1});
  std::int64_t n = 1;
  for (std::int64_t d : rd) n *= a.size(d);
  shape.back() = n;  // -1 cannot be inferred when a kept dim is 0
  return a.permute(order).reshape(shape);
}

// The result's shape: the kept dims, with 1 in each reduced one when keepdim.
Shape keptShape(const Tensor& a, const std::vector<std::int64_t>& rd, bool keepdim) {
  Shape shape;
  for (std::int64_t d = 0; d < a.dim(); ++d) {
    if (!isReduced(rd, d)) shape.push_back(a.size(d));
    else if (keepdim) shape.push_back(1);
  }
  return shape;
}

std::int64_t reducedCount(const Tensor& a, const std::vector<std::int64_t>& rd) {
  std::int64_t n = 1;
  for (std::int64_t d : rd) n *= a.size(d);
  return n;
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

Tensor sum(const Tensor& a0, const std::vector<std::int64_t>& dims, bool keepdim) {
  if (dims.size() == 1) return sum(a0, dims[0], keepdim);
  const profiler::RecordScope record("aten::sum", {&a0});
  const Tensor a = summable(amp::autocast("sum", a0));
  const std::vector<std::int64_t> rd = reducedDims(a, dims);
  Tensor out;
  {
    NoGradGuard noGrad;
    out = sum(reducedLast(a, rd), -1).reshape(keptShape(a, rd, keepdim));
  }
  Shape inShape = a.sizes(), kept = keptShape(a, rd, true);
  return autograd::record(out, "SumBackward1", {a}, [inShape, kept](const Tensor& g, const Needs&) {
    return Grads{g.reshape(kept).expand(inShape)};
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
// (rounding the sum first would round twice). One node, PyTorch's MeanBackward0 (all elements) or
// MeanBackward1 (dims): the gradient scaled while small, then broadcast back.
namespace {
Tensor meanOver(const Tensor& a, const std::vector<std::int64_t>& rd, bool all, bool keepdim) {
  requireMeanDtype(a);
  const double inv = meanFactor(reducedCount(a, rd));
  const bool reduced = isReducedPrecision(a.dtype());
  Tensor out;
  {
    NoGradGuard noGrad;
    const Tensor x = reduced ? a.to(kFloat32) : a;
    const Tensor total = all ? sum(x) : rd.size() == 1 ? sum(x, rd[0], keepdim) : sum(x, rd, keepdim);
    out = mul(total, inv);
    if (reduced) out = out.to(a.dtype());
  }
  Shape inShape = a.sizes(), kept = all ? Shape{} : keptShape(a, rd, true);
  return autograd::record(out, all ? "MeanBackward0" : "MeanBackward1", {a}, [inShape, kept, inv, all](const Tensor& g, const Needs&) {
    const Tensor scaled = mul(g, inv);
    return Grads{(all ? scaled : scaled.reshape(kept)).expand(inShape)};
  });
}
}  // namespace

Tensor mean(const Tensor& a) {
  const profiler::RecordScope record("aten::mean", {&a});
  return meanOver(a, reducedDims(a, {}), true, false);
}

Tensor mean(const Tensor& a, std::int64_t dim, bool keepdim) { return mean(a, std::vector<std::int64_t>{dim}, keepdim); }

Tensor mean(const Tensor& a, const std::vector<std::int64_t>& dims, bool keepdim) {
  const profiler::RecordScope record("aten::mean", {&a});
  return meanOver(a, reducedDims(a, dims), false, keepdim);
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

// ---- Reductions over a set of dims: vector_norm, var, std ----
//
// Each records one node (PyTorch's name) whose
// backward is written out rather than chained through the forward's scaffolding: the norm's gradient
// at a zero norm is 0 there (sqrt's chain rule would give NaN), as PyTorch's.


namespace {
// Sums over the reduced dims, keeping them (size 1): the shape gradients broadcast from.
Tensor sumKept(const Tensor& t, const std::vector<std::int64_t>& rd) {
  return sum(reducedLast(t, rd), -1).reshape(keptShape(t, rd, true));
}

}  // namespace

Tensor vector_norm(const Tensor& input, double ord, const std::vector<std::int64_t>& dims, bool keepdim, std::optional<DType> dtype) {
  const profiler::RecordScope record("aten::linalg_vector_norm", {&input});
  if (!isFloatingPoint(input.dtype())) {
    throw Error("linalg.vector_norm: Expected a floating point or complex tensor as input. Got " + scalarTypeName(input.dtype()));
  }
  if (dtype && !isFloatingPoint(*dtype)) {
    throw Error("linalg.vector_norm: dtype should be floating point or complex. Got " + scalarTypeName(*dtype));
  }
  const Tensor x = dtype ? input.to(*dtype) : input;
  const std::vector<std::int64_t> rd = reducedDims(x, dims);
  const bool infinite = std::isinf(ord);
  if (infinite && x.numel() == 0) {
    throw Error("linalg.vector_norm cannot compute the " + std::string(ord > 0 ? "inf" : "-inf") +
                " norm on an empty tensor because the operation does not have an identity");
  }
  Tensor out;
  {
    NoGradGuard noGrad;
    // half and bfloat16 accumulate in float32 and round once, as PyTorch's kernels
    const Tensor y = reducedLast(isReducedPrecision(x.dtype()) ? x.to(kFloat32) : x, rd);
    if (ord == 2) out = sqrt(sum(y * y, -1));
    else if (ord == 1) out = sum(abs(y), -1);
    else if (ord == 0) out = sum(ne(y, 0.0), -1).to(y.dtype());
    else if (infinite && ord > 0) out = max(abs(y), -1).first;
    else if (infinite) out = neg(max(neg(abs(y)), -1).first);
    else out = pow(sum(pow(abs(y), ord), -1), 1.0 / ord);
    out = out.to(x.dtype()).reshape(keptShape(x, rd, keepdim));
  }
  if (!autograd::anyRequiresGrad({x})) return out;
  const Tensor sx = x.detach(), so = out.detach();
  return autograd::record(out, "LinalgVectorNormBackward0", {x}, [sx, so, rd, ord, keepdim](const Tensor& g, const Needs&) {
    const Shape kept = keptShape(sx, rd, true);
    const Tensor gk = g.reshape(kept), nk = so.reshape(kept);
    if (ord == 0) return Grads{zeros_like(sx)};
    if (ord == 1) return Grads{sign(sx) * gk};
    if (std::isinf(ord)) {
      // the positions holding the extreme |x| share the gradient evenly
      const Tensor hit = eq(abs(sx), nk).to(sx.dtype());
      return Grads{sign(sx) * hit * (gk / sumKept(hit, rd))};
    }
    // d||x||_p / dx = sign(x) |x|^(p-1) / ||x||^(p-1); 0 where the norm is 0, and where x is 0 (for p < 1
    // |x|^(p-1) is inf there), as PyTorch's linalg_vector_norm_backward
    const Tensor scaled = ord == 2 ? sx / nk : sign(sx) * where(eq(sx, 0.0), 0.0, pow(abs(sx), ord - 1)) / pow(nk, ord - 1);
    return Grads{where(eq(nk, 0.0), 0.0, scaled) * gk};
  }, {sx, so});
}

namespace {
void requireVarianceDtype(const Tensor& a) {
  if (!isFloatingPoint(a.dtype())) throw Error("std and var only support floating point and complex dtypes");
}

// The deviations from the mean over the reduced dims and the variance's divisor max(0, n - correction);
// with a divisor of 0 the variance is inf, or NaN for no spread (0 / 0), as PyTorch's.
struct Spread {
  Tensor deviation, sumOfSquares;
  double divisor;
};

Spread spread(const Tensor& x, const std::vector<std::int64_t>& rd, double correction) {
  const Tensor y = reducedLast(isReducedPrecision(x.dtype()) ? x.to(kFloat32) : x, rd);
  const Tensor dev = y - mean(y, -1, true);
  return {dev, sum(dev * dev, -1), std::max(0.0, static_cast<double>(reducedCount(x, rd)) - correction)};
}
}  // namespace

Tensor var(const Tensor& input, const std::vector<std::int64_t>& dims, double correction, bool keepdim) {
  const profiler::RecordScope record("aten::var", {&input});
  requireVarianceDtype(input);
  const std::vector<std::int64_t> rd = reducedDims(input, dims);
  Tensor out;
  double divisor = 0;
  {
    NoGradGuard noGrad;
    const Spread s = spread(input, rd, correction);
    divisor = s.divisor;
    out = div(s.sumOfSquares, divisor).to(input.dtype()).reshape(keptShape(input, rd, keepdim));
  }
  if (!autograd::anyRequiresGrad({input})) return out;
  const Tensor sx = input.detach();
  return autograd::record(out, "VarBackward0", {input}, [sx, rd, divisor](const Tensor& g, const Needs&) {
    const Shape kept = keptShape(sx, rd, true);
    const Tensor centered = sx - mean(reducedLast(sx, rd), -1, true).reshape(kept);
    return Grads{centered * (g.reshape(kept) * (2.0 / divisor))};
  }, {sx});
}

Tensor std(const Tensor& input, const std::vector<std::int64_t>& dims, double correction, bool keepdim) {
  const profiler::RecordScope record("aten::std", {&input});
  requireVarianceDtype(input);
  const std::vector<std::int64_t> rd = reducedDims(input, dims);
  Tensor out;
  double divisor = 0;
  {
    NoGradGuard noGrad;
    const Spread s = spread(input, rd, correction);
    divisor = s.divisor;
    out = sqrt(div(s.sumOfSquares, divisor)).to(input.dtype()).reshape(keptShape(input, rd, keepdim));
  }
  if (!autograd::anyRequiresGrad({input})) return out;
  const Tensor sx = input.detach(), so = out.detach();
  return autograd::record(out, "StdBackward0", {input}, [sx, so, rd, divisor](const Tensor& g, const Needs&) {
    // d std / dx = (x - mean) / (divisor * std); 0 where std is 0, as PyTorch's std_backward
    const Shape kept = keptShape(sx, rd, true);
    const Tensor sk = so.reshape(kept);
    const Tensor centered = sx - mean(reducedLast(sx, rd), -1, true).reshape(kept);
    return Grads{where(eq(sk, 0.0), 0.0, centered / (sk * divisor)) * g.reshape(kept)};
  }, {sx, so});
}

}  // namespace gpulab
