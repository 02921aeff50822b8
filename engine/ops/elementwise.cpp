// Elementwise ops with broadcasting. Forward and backward of each op side by side; the math itself
// is in engine/kernels/functors.h, shared by the CPU and CUDA backends.
#include <cmath>

#include "engine/ops/autocast.h"
#include "engine/autograd/grad_mode.h"
#include "engine/ops/op_util.h"
#include "engine/profiler/profiler.h"

namespace gpulab {

using detail::Grads;
using detail::Needs;

namespace {

// Brings both operands to one dtype (torch.result_type: float16 + float32 gives float32, int64 + any
// float gives the float) and, for the 0-dim CPU-scalar exception of the same-device rule, to one device.
std::pair<Tensor, Tensor> prepareOperands(const char* op, const Tensor& a, const Tensor& b) {
  checkSameDevice(op, {{"self", a}, {"other", b}});
  Tensor x = a, y = b;
  if (x.device() != y.device()) {
    // A scalar's copy is non_blocking: staged at once, so the host need not wait for the stream (PyTorch
    // passes it as a kernel argument instead).
    if (x.dim() == 0 && x.device().isCpu()) x = x.to(y.device(), /*non_blocking=*/true);
    else y = y.to(x.device(), /*non_blocking=*/true);
  }
  if (x.dtype() != y.dtype()) {
    const DType common = result_type(x, y);
    x = x.to(common);
    y = y.to(common);
  }
  return {x, y};
}

Tensor computeBinary(BinaryOp op, const Tensor& a, const Tensor& b, DType outType) {
  // The kernels compute on bool tensors as int64 and the result is bool again, as PyTorch's
  // True + True is True.
  if (outType == kBool) return computeBinary(op, a.to(kInt64), b.to(kInt64), kInt64).to(kBool);
  const Shape outShape = detail::broadcastShapes(a.sizes(), b.sizes());
  Tensor out = Tensor::empty(outShape, outType, a.device());
  NoGradGuard noGrad;  // the expanded views are scaffolding, not part of the graph
  detail::backendOf(a).binary(op, out, a.expand(outShape), b.expand(outShape));
  return out;
}

// An int64 tensor with a fractional (or non-finite) scalar computes in float32, as PyTorch's int
// tensor * 0.5 does; a whole-number scalar keeps int64 (C++ has one double for Python's 2 and 2.0, and
// the whole number is read as an int).
// A bool tensor computes with a number as int64 or float32 likewise (mask * 2 is int64).
DType dtypeWithScalar(DType t, double s) {
  if (isFloatingPoint(t)) return t;
  if (!(std::isfinite(s) && s == std::trunc(s))) return kFloat32;
  return kInt64;
}
Tensor promotedForScalar(const Tensor& a, double s) { return a.to(dtypeWithScalar(a.dtype(), s)); }

Tensor computeScalar(BinaryOp op, const Tensor& a, double s, bool scalarFirst) {
  Tensor x = a.contiguous();
  Tensor out = detail::emptyLike(x);
  detail::backendOf(x).binaryScalar(op, out, x, s, scalarFirst);
  return out;
}

Tensor computeUnary(const char* name, UnaryOp op, const Tensor& a) {
  detail::requireFloat(name, a);
  Tensor x = a.contiguous();
  Tensor out = detail::emptyLike(x);
  detail::backendOf(x).unary(op, out, x);
  return out;
}

// Unary op whose backward is one fused binary kernel f(grad, saved).
Tensor unaryWithBackward(const char* name, const char* backwardName, UnaryOp op, BinaryOp backwardOp, const Tensor& a,
                         bool saveOutput) {
  Tensor out = computeUnary(name, op, a);
  if (!autograd::anyRequiresGrad({a})) return out;
  Tensor saved = saveOutput ? out.detach() : a.detach();
  return autograd::record(out, backwardName, {a}, [saved, backwardOp](const Tensor& g, const Needs&) {
    return Grads{computeBinary(backwardOp, g.contiguous(), saved.contiguous(), saved.dtype())};
  }, {saved});
}

// What native_ops.toml's `ints` says an integer (or bool) input gives (engine/ops/generate_ops.py).
enum class IntInputs { Float, Same, Copy, Error };

// The input a generated unary op computes on: a floating tensor as it is; an integer or bool one as
// the table says (float32, as PyTorch's default dtype, for exp and the like), or refused with
// PyTorch's words -- `boolError`'s "{device}" being cpu or cuda, as PyTorch's kernels are named.
Tensor unaryOperand(const char* name, const Tensor& a, IntInputs ints, const char* boolError, bool boolErrorIsRuntime) {
  if (isFloatingPoint(a.dtype())) return a;
  const std::string device = a.device().isCpu() ? "cpu" : "cuda";
  if (a.dtype() == kBool && boolError) {
    std::string message = boolError;
    if (const auto at = message.find("{device}"); at != std::string::npos) message.replace(at, 8, device);
    if (boolErrorIsRuntime) throw Error(message);
    throw NotImplementedError(message);
  }
  switch (ints) {
    case IntInputs::Float: return a.to(kFloat32);
    case IntInputs::Same:
    case IntInputs::Copy: return a;
    case IntInputs::Error: break;
  }
  throw NotImplementedError("\"" + std::string(name) + "_" + device + "\" not implemented for '" + scalarTypeName(a.dtype()) + "'");
}

// The kernel on `a` (floating or int64; a bool tensor computes as int64 and is bool again).
Tensor computeUnaryKernel(UnaryOp op, const Tensor& a) {
  if (a.dtype() == kBool) return computeUnaryKernel(op, a.to(kInt64)).to(kBool);
  Tensor x = a.contiguous();
  Tensor out = detail::emptyLike(x);
  detail::backendOf(x).unary(op, out, x);
  return out;
}

// A backward of one fused kernel f(grad, saved) (ReluBackward, ...): one launch, not three.
Tensor fusedBackward(BinaryOp op, const Tensor& g, const Tensor& saved) {
  return computeBinary(op, g.contiguous(), saved.contiguous(), saved.dtype());
}

// x.exp_(): the result written into x, which must be able to hold its dtype, as PyTorch requires of
// in-place ops (an int64 tensor's exp_ raises rather than truncating the float result). copy_ keeps
// autograd's record: the op's node becomes x's (ExpBackward0), reading what it saved of the old x.
Tensor& assignInPlace(Tensor& self, const Tensor& result) {
  if (categoryOf(result.dtype()) > categoryOf(self.dtype())) {
    throw Error("result type " + scalarTypeName(result.dtype()) + " can't be cast to the desired output type " + scalarTypeName(self.dtype()));
  }
  return self.copy_(result.dtype() == self.dtype() ? result : result.to(self.dtype()));
}

}  // namespace

Tensor add(const Tensor& a0, const Tensor& b0) {
  const profiler::RecordScope record("aten::add", {&a0, &b0});
  auto [a, b] = prepareOperands("add", a0, b0);
  Tensor out = computeBinary(BinaryOp::Add, a, b, a.dtype());
  Shape as = a.sizes(), bs = b.sizes();
  return autograd::record(out, "AddBackward0", {a, b}, [as, bs](const Tensor& g, const Needs& n) {
    return Grads{n[0] ? sum_to_size(g, as) : Tensor(), n[1] ? sum_to_size(g, bs) : Tensor()};
  });
}

Tensor sub(const Tensor& a0, const Tensor& b0) {
  const profiler::RecordScope record("aten::sub", {&a0, &b0});
  auto [a, b] = prepareOperands("sub", a0, b0);
  Tensor out = computeBinary(BinaryOp::Sub, a, b, a.dtype());
  Shape as = a.sizes(), bs = b.sizes();
  return autograd::record(out, "SubBackward0", {a, b}, [as, bs](const Tensor& g, const Needs& n) {
    return Grads{n[0] ? sum_to_size(g, as) : Tensor(), n[1] ? sum_to_size(neg(g), bs) : Tensor()};
  });
}

Tensor mul(const Tensor& a0, const Tensor& b0) {
  const profiler::RecordScope record("aten::mul", {&a0, &b0});
  auto [a, b] = prepareOperands("mul", a0, b0);
  Tensor out = computeBinary(BinaryOp::Mul, a, b, a.dtype());
  if (!autograd::anyRequiresGrad({a, b})) return out;
  Tensor sa = a.detach(), sb = b.detach();
  return autograd::record(out, "MulBackward0", {a, b}, [sa, sb](const Tensor& g, const Needs& n) {
    return Grads{n[0] ? sum_to_size(g * sb, sa.sizes()) : Tensor(), n[1] ? sum_to_size(g * sa, sb.sizes()) : Tensor()};
  }, {sa, sb});
}

Tensor div(const Tensor& a0, const Tensor& b0) {
  const profiler::RecordScope record("aten::div", {&a0, &b0});
  auto [a1, b1] = prepareOperands("div", a0, b0);
  // True division: integral tensors divide as float32, as in PyTorch (tensor([1, 2]) / tensor([2, 2])).
  const Tensor a = isFloatingPoint(a1.dtype()) ? a1 : a1.to(kFloat32);
  const Tensor b = isFloatingPoint(b1.dtype()) ? b1 : b1.to(kFloat32);
  Tensor out = computeBinary(BinaryOp::Div, a, b, a.dtype());
  if (!autograd::anyRequiresGrad({a, b})) return out;
  Tensor sa = a.detach(), sb = b.detach();
  return autograd::record(out, "DivBackward0", {a, b}, [sa, sb](const Tensor& g, const Needs& n) {
    return Grads{n[0] ? sum_to_size(g / sb, sa.sizes()) : Tensor(),
                 n[1] ? sum_to_size(neg(g * sa / (sb * sb)), sb.sizes()) : Tensor()};
  }, {sa, sb});
}

namespace {

// torch.maximum / torch.minimum and their gradient, PyTorch's formula: the winner takes the gradient,
// a tie splits it evenly, and where a NaN is involved (no comparison holds) both sides take it whole.
Tensor extremum(BinaryOp op, const char* name, const char* profiled, const char* backward, const Tensor& a0, const Tensor& b0) {
  const profiler::RecordScope record(profiled, {&a0, &b0});
  auto [a, b] = prepareOperands(name, a0, b0);
  Tensor out = computeBinary(op, a, b, a.dtype());
  if (!autograd::anyRequiresGrad({a, b})) return out;
  Tensor sa = a.detach(), sb = b.detach();
  const BinaryOp aLoses = op == BinaryOp::Maximum ? BinaryOp::Lt : BinaryOp::Gt;
  const BinaryOp bLoses = op == BinaryOp::Maximum ? BinaryOp::Gt : BinaryOp::Lt;
  return autograd::record(out, backward, {a, b}, [sa, sb, aLoses, bLoses](const Tensor& g, const Needs& n) {
    const Tensor x = sa.expand(g.sizes()).contiguous(), y = sb.expand(g.sizes()).contiguous();
    const Tensor share = rsub(computeBinary(BinaryOp::Eq, x, y, sa.dtype()) * 0.5, 1.0);  // 1/2 at a tie, else 1
    auto side = [&](BinaryOp loses, const Tensor& saved) {
      return sum_to_size(g * share * rsub(computeBinary(loses, x, y, sa.dtype()), 1.0), saved.sizes());
    };
    return Grads{n[0] ? side(aLoses, sa) : Tensor(), n[1] ? side(bLoses, sb) : Tensor()};
  }, {sa, sb});
}

}  // namespace

Tensor maximum(const Tensor& a, const Tensor& b) { return extremum(BinaryOp::Maximum, "maximum", "aten::maximum", "MaximumBackward0", a, b); }
Tensor minimum(const Tensor& a, const Tensor& b) { return extremum(BinaryOp::Minimum, "minimum", "aten::minimum", "MinimumBackward0", a, b); }

namespace {

// Comparisons compute 0/1 in the operands' common dtype and hand back bool; not differentiable.
Tensor compare(BinaryOp op, const char* name, const char* profiled, const Tensor& a0, const Tensor& b0) {
  const profiler::RecordScope record(profiled, {&a0, &b0});
  auto [a, b] = prepareOperands(name, a0, b0);
  return computeBinary(op, a, b, a.dtype()).to(kBool);
}

Tensor compare(BinaryOp op, const char* profiled, const Tensor& a0, double s) {
  const profiler::RecordScope record(profiled, {&a0});
  return computeScalar(op, promotedForScalar(a0, s), s, false).to(kBool);
}

}  // namespace

Tensor eq(const Tensor& a, const Tensor& b) { return compare(BinaryOp::Eq, "eq", "aten::eq", a, b); }
Tensor ne(const Tensor& a, const Tensor& b) { return compare(BinaryOp::Ne, "ne", "aten::ne", a, b); }
Tensor lt(const Tensor& a, const Tensor& b) { return compare(BinaryOp::Lt, "lt", "aten::lt", a, b); }
Tensor le(const Tensor& a, const Tensor& b) { return compare(BinaryOp::Le, "le", "aten::le", a, b); }
Tensor gt(const Tensor& a, const Tensor& b) { return compare(BinaryOp::Gt, "gt", "aten::gt", a, b); }
Tensor ge(const Tensor& a, const Tensor& b) { return compare(BinaryOp::Ge, "ge", "aten::ge", a, b); }
Tensor eq(const Tensor& a, double b) { return compare(BinaryOp::Eq, "aten::eq", a, b); }
Tensor ne(const Tensor& a, double b) { return compare(BinaryOp::Ne, "aten::ne", a, b); }
Tensor lt(const Tensor& a, double b) { return compare(BinaryOp::Lt, "aten::lt", a, b); }
Tensor le(const Tensor& a, double b) { return compare(BinaryOp::Le, "aten::le", a, b); }
Tensor gt(const Tensor& a, double b) { return compare(BinaryOp::Gt, "aten::gt", a, b); }
Tensor ge(const Tensor& a, double b) { return compare(BinaryOp::Ge, "aten::ge", a, b); }

// On bool operands the kernels' int64 0/1: and is the minimum, or the maximum, xor inequality.
Tensor logical_not(const Tensor& a) {
  const profiler::RecordScope record("aten::logical_not", {&a});
  return computeScalar(BinaryOp::Eq, a.to(kBool).to(kInt64), 0.0, false).to(kBool);
}
namespace {
Tensor logical(BinaryOp op, const char* name, const char* profiled, const Tensor& a0, const Tensor& b0) {
  const profiler::RecordScope record(profiled, {&a0, &b0});
  auto [a, b] = prepareOperands(name, a0.to(kBool), b0.to(kBool));
  return computeBinary(op, a, b, kBool);
}
}  // namespace
Tensor logical_and(const Tensor& a, const Tensor& b) { return logical(BinaryOp::Minimum, "logical_and", "aten::logical_and", a, b); }
Tensor logical_or(const Tensor& a, const Tensor& b) { return logical(BinaryOp::Maximum, "logical_or", "aten::logical_or", a, b); }
Tensor logical_xor(const Tensor& a, const Tensor& b) { return logical(BinaryOp::Ne, "logical_xor", "aten::logical_xor", a, b); }

Tensor where(const Tensor& cond, const Tensor& a0, const Tensor& b0) {
  const profiler::RecordScope record("aten::where", {&cond, &a0, &b0});
  if (cond.dtype() != kBool) {
    throw Error("where expected condition to be a boolean tensor, but got a tensor with dtype " + scalarTypeName(cond.dtype()));
  }
  checkSameDevice("where", {{"condition", cond}, {"self", a0}, {"other", b0}});
  auto [a1, b1] = prepareOperands("where", a0, b0);
  // The result lives where the dimensioned tensors do: a 0-dim CPU condition or pair of 0-dim CPU
  // values joins a CUDA op, as in PyTorch.
  const Device device = cond.dim() == 0 && cond.device().isCpu() ? a1.device() : cond.device();
  const Tensor a = a1.to(device, /*non_blocking=*/true), b = b1.to(device, /*non_blocking=*/true);
  const Shape shape = detail::broadcastShapes(detail::broadcastShapes(cond.sizes(), a.sizes()), b.sizes());
  Tensor out = Tensor::empty(shape, a.dtype(), device);
  {
    NoGradGuard noGrad;  // the materialised operands are scaffolding, not part of the graph
    const Tensor c = cond.to(device, /*non_blocking=*/true).expand(shape).contiguous();
    detail::backendOf(out).where(out, c, a.expand(shape).contiguous(), b.expand(shape).contiguous());
  }
  if (!autograd::anyRequiresGrad({a, b})) return out;
  const Tensor c = cond.detach();
  const Shape as = a.sizes(), bs = b.sizes();
  return autograd::record(out, "WhereBackward0", {a, b}, [c, as, bs](const Tensor& g, const Needs& n) {
    const Tensor zero = zeros({}, {.dtype = g.dtype(), .device = g.device()});
    return Grads{n[0] ? sum_to_size(where(c, g, zero), as) : Tensor(), n[1] ? sum_to_size(where(c, zero, g), bs) : Tensor()};
  }, {c});
}

namespace {
// A number beside a tensor as a 0-dim tensor of the dtype PyTorch would give their pair: the tensor's
// own when the number fits its category, else int64 or float32.
Tensor scalarBeside(const Tensor& other, double value) {
  return full({}, value, {.dtype = dtypeWithScalar(other.dtype(), value), .device = other.device()});
}
}  // namespace

Tensor where(const Tensor& cond, const Tensor& a, double b) { return where(cond, a, scalarBeside(a, b)); }
Tensor where(const Tensor& cond, double a, const Tensor& b) { return where(cond, scalarBeside(b, a), b); }

Tensor masked_fill(const Tensor& a, const Tensor& mask, double value) {
  if (mask.dtype() != kBool) {
    throw Error("masked_fill_ only supports boolean masks, but got mask with dtype " + dtypeName(mask.dtype()));
  }
  return where(mask, full({}, value, {.dtype = a.dtype(), .device = a.device()}), a);
}

Tensor clamp(const Tensor& a, std::optional<double> min, std::optional<double> max) {
  const profiler::RecordScope record("aten::clamp", {&a});
  if (!min && !max) throw Error("torch.clamp: At least one of 'min' or 'max' must not be None");
  Tensor out;
  {
    NoGradGuard noGrad;
    out = promotedForScalar(promotedForScalar(a, min.value_or(0.0)), max.value_or(0.0)).detach();
    // NaN stays NaN: no comparison with it holds, so it is never replaced.
    if (min) out = where(lt(out, *min), *min, out);
    if (max) out = where(gt(out, *max), *max, out);
  }
  if (!autograd::anyRequiresGrad({a})) return out;
  const Tensor sa = a.detach();
  return autograd::record(out, "ClampBackward1", {a}, [sa, min, max](const Tensor& g, const Needs&) {
    Tensor inside = ones(sa.sizes(), {.dtype = kBool, .device = sa.device()});
    if (min) inside = logical_and(inside, ge(sa, *min));
    if (max) inside = logical_and(inside, le(sa, *max));
    return Grads{where(inside, g, 0.0)};
  }, {sa});
}

Tensor add(const Tensor& a0, double s) {
  const profiler::RecordScope record("aten::add", {&a0});
  const Tensor a = promotedForScalar(a0, s);
  Tensor out = computeScalar(BinaryOp::Add, a, s, false);
  return autograd::record(out, "AddBackward0", {a}, [](const Tensor& g, const Needs&) { return Grads{g}; });
}

Tensor sub(const Tensor& a0, double s) {
  const profiler::RecordScope record("aten::sub", {&a0});
  const Tensor a = promotedForScalar(a0, s);
  Tensor out = computeScalar(BinaryOp::Sub, a, s, false);
  return autograd::record(out, "SubBackward0", {a}, [](const Tensor& g, const Needs&) { return Grads{g}; });
}

Tensor div(const Tensor& a0, double s) {
  const profiler::RecordScope record("aten::div", {&a0});
  // True division: an int64 tensor divides as float32, as in PyTorch (tensor([1, 2]) / 1 is float).
  const Tensor a = isFloatingPoint(a0.dtype()) ? a0 : a0.to(kFloat32);
  Tensor out = computeScalar(BinaryOp::Div, a, s, false);
  return autograd::record(out, "DivBackward0", {a}, [s](const Tensor& g, const Needs&) { return Grads{div(g, s)}; });
}

Tensor mul(const Tensor& a0, double s) {
  const profiler::RecordScope record("aten::mul", {&a0});
  const Tensor a = promotedForScalar(a0, s);
  Tensor out = computeScalar(BinaryOp::Mul, a, s, false);
  return autograd::record(out, "MulBackward0", {a}, [s](const Tensor& g, const Needs&) { return Grads{mul(g, s)}; });
}

Tensor rsub(const Tensor& a0, double s) {
  const profiler::RecordScope record("aten::rsub", {&a0});
  const Tensor a = promotedForScalar(a0, s);
  Tensor out = computeScalar(BinaryOp::Sub, a, s, /*scalarFirst=*/true);
  return autograd::record(out, "RsubBackward1", {a}, [](const Tensor& g, const Needs&) { return Grads{neg(g)}; });
}

Tensor rdiv(const Tensor& a1, double s) {
  const profiler::RecordScope record("aten::div", {&a1});
  const Tensor a0 = amp::autocast("rdiv", a1);
  // True division: an int64 tensor divides as float32, as in PyTorch (2 / tensor([1, 2]) is float).
  Tensor a = isFloatingPoint(a0.dtype()) ? a0 : a0.to(kFloat32);
  Tensor out = computeScalar(BinaryOp::Div, a, s, /*scalarFirst=*/true);
  if (!autograd::anyRequiresGrad({a})) return out;
  Tensor sa = a.detach();
  // The reciprocal rule: d(s / x)/dx = -s / x^2. PyTorch computes s / x as x.reciprocal() * s, whence
  // its node's name.
  return autograd::record(out, "MulBackward0", {a}, [sa, s](const Tensor& g, const Needs&) {
    return Grads{mul(g / (sa * sa), -s)};
  }, {sa});
}

Tensor pow(const Tensor& a0, double e) {
  const profiler::RecordScope record("aten::pow", {&a0});
  const Tensor a = amp::autocast("pow", a0);
  detail::requireFloat("pow", a);
  Tensor out = e == 2.0 ? computeUnary("pow", UnaryOp::Square, a) : computeScalar(BinaryOp::Pow, a, e, false);
  if (!autograd::anyRequiresGrad({a})) return out;
  Tensor sa = a.detach();
  return autograd::record(out, "PowBackward0", {a}, [sa, e](const Tensor& g, const Needs&) {
    return Grads{e == 2.0 ? g * sa * 2.0 : g * pow(sa, e - 1.0) * e};
  }, {sa});
}

Tensor pow(const Tensor& a0, const Tensor& b0) {
  const profiler::RecordScope record("aten::pow", {&a0, &b0});
  Tensor a1 = a0, b1 = b0;
  amp::autocast("pow", {&a1, &b1});
  auto [a, b] = prepareOperands("pow", a1, b1);
  if (!isFloatingPoint(a.dtype())) {
    throw NotImplementedError("GPU Lab's torch has no integer ** integer tensor pow yet: make the base or the exponent floating");
  }
  Tensor out = computeBinary(BinaryOp::Pow, a, b, a.dtype());
  if (!autograd::anyRequiresGrad({a, b})) return out;
  const Tensor sa = a.detach(), sb = b.detach(), so = out.detach();
  return autograd::record(out, "PowBackward1", {a, b}, [sa, sb, so](const Tensor& g, const Needs& n) {
    Tensor ga, gb;
    if (n[0]) ga = sum_to_size(where(eq(sb, 0.0), 0.0, g * sb * pow(sa, sb - 1.0)), sa.sizes());
    if (n[1]) gb = sum_to_size(where(logical_and(eq(sa, 0.0), ge(sb, 0.0)), 0.0, g * so * log(sa)), sb.sizes());
    return Grads{ga, gb};
  }, {sa, sb, so});
}

namespace {

// floor_divide's and remainder's operands in one dtype, checked as PyTorch's kernels check them: no
// bool with bool (its kernels have no bool instance), and on the CPU no integer division by zero.
// `kernel` is PyTorch's kernel name ("div_floor", "remainder"), which its error names.
std::pair<Tensor, Tensor> divisionOperands(const char* op, const char* kernel, const Tensor& a0, const Tensor& b0) {
  auto [a, b] = prepareOperands(op, a0, b0);
  if (a.dtype() == kBool) {
    throw NotImplementedError(std::string("\"") + kernel + (a.device().isCpu() ? "_cpu" : "_cuda") + "\" not implemented for 'Bool'");
  }
  // The CPU check reads the divisor, which is on the host; a GPU's kernels check nothing (as PyTorch's
  // CUDA kernels), so nothing waits for the device there.
  if (a.dtype() == kInt64 && b.device().isCpu()) {
    NoGradGuard noGrad;
    const Shape shape = detail::broadcastShapes(a.sizes(), b.sizes());
    const bool empty = std::any_of(shape.begin(), shape.end(), [](std::int64_t s) { return s == 0; });
    if (!empty && any(eq(b, 0.0)).item() != 0.0) throw Error("ZeroDivisionError");
  }
  return {a, b};
}

// The result of an op PyTorch defines no derivative for: it requires grad when an input does, and
// backward through it raises PyTorch's error (its node is PyTorch's "NotImplemented" too).
Tensor withoutDerivative(const Tensor& out, const char* op, std::initializer_list<Tensor> inputs) {
  if (!autograd::anyRequiresGrad(inputs)) return out;
  const std::string message = std::string("derivative for aten::") + op + " is not implemented";
  return autograd::record(out, "NotImplemented", std::vector<Tensor>(inputs), [message](const Tensor&, const Needs&) -> Grads {
    throw Error(message);
  });
}

}  // namespace

Tensor floor_divide(const Tensor& a0, const Tensor& b0) {
  const profiler::RecordScope record("aten::floor_divide", {&a0, &b0});
  auto [a, b] = divisionOperands("floor_divide", "div_floor", a0, b0);
  return withoutDerivative(computeBinary(BinaryOp::FloorDivide, a, b, a.dtype()), "floor_divide", {a, b});
}
Tensor floor_divide(const Tensor& a, double b) { return floor_divide(a, scalarBeside(a, b)); }
Tensor floor_divide(double a, const Tensor& b) { return floor_divide(scalarBeside(b, a), b); }

namespace {
// remainder's three forms. `other` a number (PyTorch's Scalar overload, RemainderBackward0): only
// `self` takes a gradient; `self` a number: no derivative at all, as PyTorch's remainder(Scalar, Tensor).
enum class NumberSide { None, Other, Self };
Tensor remainderOf(const Tensor& a0, const Tensor& b0, NumberSide number) {
  const profiler::RecordScope record("aten::remainder", {&a0, &b0});
  auto [a, b] = divisionOperands("remainder", "remainder", a0, b0);
  Tensor out = computeBinary(BinaryOp::Remainder, a, b, a.dtype());
  if (number == NumberSide::Self) return withoutDerivative(out, "remainder", {b});
  if (!autograd::anyRequiresGrad({a, b})) return out;
  const Shape as = a.sizes();
  if (number == NumberSide::Other) {
    return autograd::record(out, "RemainderBackward0", {a}, [as](const Tensor& g, const Needs&) { return Grads{sum_to_size(g, as)}; });
  }
  // a % b == a - floor(a / b) * b, and the floor is flat between its steps: d/da = 1, d/db = -floor(a / b).
  const Tensor sa = a.detach(), sb = b.detach();
  return autograd::record(out, "RemainderBackward1", {a, b}, [sa, sb](const Tensor& g, const Needs& n) {
    return Grads{n[0] ? sum_to_size(g, sa.sizes()) : Tensor(), n[1] ? sum_to_size(neg(g * floor_divide(sa, sb)), sb.sizes()) : Tensor()};
  }, {sa, sb});
}
}  // namespace

Tensor remainder(const Tensor& a, const Tensor& b) { return remainderOf(a, b, NumberSide::None); }
Tensor remainder(const Tensor& a, double b) { return remainderOf(a, scalarBeside(a, b), NumberSide::Other); }
Tensor remainder(double a, const Tensor& b) { return remainderOf(scalarBeside(b, a), b, NumberSide::Self); }

Tensor neg(const Tensor& a) {
  const profiler::RecordScope record("aten::neg", {&a});
  if (a.dtype() == kBool) {
    throw Error("Negation, the `-` operator, on a bool tensor is not supported. If you are trying to invert a mask, use the `~` or "
                "`logical_not()` operator instead.");
  }
  Tensor out = computeScalar(BinaryOp::Mul, a, -1.0, false);
  return autograd::record(out, "NegBackward0", {a}, [](const Tensor& g, const Needs&) { return Grads{neg(g)}; });
}

Tensor gelu(const Tensor& a, const std::string& approximate) {
  const profiler::RecordScope record("aten::gelu", {&a});
  if (approximate == "tanh") return unaryWithBackward("gelu", "GeluBackward0", UnaryOp::GeluTanh, BinaryOp::GeluTanhBackward, a, false);
  if (approximate != "none") throw Error("approximate argument must be either none or tanh.");
  return unaryWithBackward("gelu", "GeluBackward0", UnaryOp::Gelu, BinaryOp::GeluBackward, a, false);
}

// The unary ops of engine/ops/native_ops.toml: exp, log, sin, floor, ... (engine/ops/generate_ops.py).
#include "gpulab/ops/unary_ops.inc"

}  // namespace gpulab

namespace gpulab {

DType result_type(const Tensor& a, const Tensor& b) {
  const bool aScalar = a.dim() == 0, bScalar = b.dim() == 0;
  if (aScalar == bScalar) return promoteTypes(a.dtype(), b.dtype());
  // A 0-dim tensor beside a dimensioned one decides the dtype only when it is of a higher category
  // (a float scalar with an int64 tensor, an int64 one with a bool tensor); otherwise the dimensioned
  // tensor's dtype wins, so half_tensor * torch.tensor(2.0) stays float16.
  const Tensor& dimensioned = aScalar ? b : a;
  const Tensor& scalar = aScalar ? a : b;
  if (categoryOf(scalar.dtype()) > categoryOf(dimensioned.dtype())) return scalar.dtype();
  return dimensioned.dtype();
}

}  // namespace gpulab
