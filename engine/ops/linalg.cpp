// Matrix products through the device's BLAS (OpenBLAS on the CPU, cuBLAS on CUDA). Transposed views
// are passed to GEMM as transpose flags, so w.t() and the backward's transposes never copy. Both
// operands have one floating dtype (the result's); under autocast they are cast to the region's
// dtype first -- the GEMMs are what mixed precision speeds up.
#include "engine/ops/autocast.h"
#include "engine/autograd/grad_mode.h"
#include "engine/ops/op_util.h"
#include "engine/profiler/profiler.h"

namespace gpulab {

using detail::Grads;
using detail::Needs;

namespace {

// A matrix (the last two dims) as GEMM wants it: row-major with a leading dimension, or the transpose
// of one. Anything else is copied to contiguous first.
struct GemmOperand {
  Tensor holder;
  bool trans = false;
  std::int64_t ld = 0;
  const void* ptr() const { return holder.data_ptr(); }
};

GemmOperand asGemmOperand(const Tensor& t) {
  const std::int64_t nd = t.dim();
  const std::int64_t rows = t.size(nd - 2), cols = t.size(nd - 1);
  const std::int64_t rs = t.strides()[static_cast<std::size_t>(nd - 2)], cs = t.strides()[static_cast<std::size_t>(nd - 1)];
  bool batchOk = true;
  if (nd == 3) batchOk = t.strides()[0] == rows * cols || t.size(0) == 1;
  if (batchOk && (cs == 1 || cols == 1) && (rs == cols || rows == 1)) return {t, false, std::max<std::int64_t>(cols, 1)};
  if (batchOk && (rs == 1 || rows == 1) && (cs == rows || cols == 1)) return {t, true, std::max<std::int64_t>(rows, 1)};
  return {t.contiguous(), false, std::max<std::int64_t>(cols, 1)};
}

Tensor mm(const Tensor& a, const Tensor& b) {
  const profiler::RecordScope record("aten::mm", {&a, &b});
  const std::int64_t m = a.size(0), k = a.size(1), n = b.size(1);
  Tensor out = Tensor::empty({m, n}, a.dtype(), a.device());
  if (k == 0) {
    out.fill_(0.0);
  } else if (m > 0 && n > 0) {
    GemmOperand A = asGemmOperand(a), B = asGemmOperand(b);
    detail::backendOf(a).gemm(a.dtype(), A.trans, B.trans, m, n, k, 1.0, A.ptr(), A.ld, B.ptr(), B.ld, 0.0, out.data_ptr(), n);
  }
  return out;
}

Tensor bmm(const Tensor& a, const Tensor& b) {
  const profiler::RecordScope record("aten::bmm", {&a, &b});
  const std::int64_t batch = a.size(0), m = a.size(1), k = a.size(2), n = b.size(2);
  Tensor out = Tensor::empty({batch, m, n}, a.dtype(), a.device());
  if (k == 0) {
    out.fill_(0.0);
  } else if (batch > 0 && m > 0 && n > 0) {
    GemmOperand A = asGemmOperand(a), B = asGemmOperand(b);
    detail::backendOf(a).gemm(a.dtype(), A.trans, B.trans, m, n, k, 1.0, A.ptr(), A.ld, B.ptr(), B.ld, 0.0, out.data_ptr(), n,
                              batch, m * k, k * n, m * n);
  }
  return out;
}

// A shape as PyTorch's matrix-product errors print it: "64x16" (the leading dims folded into the rows).
std::string matrixShape(const Shape& shape) {
  std::int64_t rows = 1;
  for (std::size_t i = 0; i + 1 < shape.size(); ++i) rows *= shape[i];
  return std::to_string(rows) + "x" + std::to_string(shape.empty() ? 1 : shape.back());
}

[[noreturn]] void shapeError(const Tensor& a, const Tensor& b) {
  throw ValueError("mat1 and mat2 shapes cannot be multiplied (" + matrixShape(a.sizes()) + " and " + matrixShape(b.sizes()) + ")");
}

// PyTorch's words for two operands of different dtypes.
void requireSameDtype(const Tensor& a, const Tensor& b) {
  if (a.dtype() != b.dtype()) {
    throw Error("expected mat1 and mat2 to have the same dtype, but got: " + detail::cppTypeName(a.dtype()) +
                " != " + detail::cppTypeName(b.dtype()));
  }
}

}  // namespace

Tensor matmul(const Tensor& a0, const Tensor& b0) {
  const profiler::RecordScope record("aten::matmul", {&a0, &b0});
  checkSameDevice("matmul", {{"self", a0}, {"other", b0}});
  Tensor a = a0, b = b0;
  amp::autocast("matmul", {&a, &b});
  detail::requireFloat("matmul", a);
  detail::requireFloat("matmul", b);
  requireSameDtype(a, b);
  if (a.dim() == 1 && b.dim() >= 2) return matmul(a.unsqueeze(0), b).squeeze(-2);
  if (a.dim() >= 2 && b.dim() == 1) return matmul(a, b.unsqueeze(1)).squeeze(-1);
  if (a.dim() == 1 && b.dim() == 1) {
    if (a.size(0) != b.size(0)) shapeError(a, b);
    return matmul(a.unsqueeze(0), b.unsqueeze(1)).reshape({});
  }
  if (a.dim() == 2 && b.dim() == 2) {
    if (a.size(1) != b.size(0)) shapeError(a, b);
    Tensor out = mm(a, b);
    if (!autograd::anyRequiresGrad({a, b})) return out;
    Tensor sa = a.detach(), sb = b.detach();
    return autograd::record(out, "MmBackward0", {a, b}, [sa, sb](const Tensor& g, const Needs& n) {
      return Grads{n[0] ? mm(g, sb.t()) : Tensor(), n[1] ? mm(sa.t(), g) : Tensor()};
    }, {sa, sb});
  }
  if (a.dim() == 3 && b.dim() == 3) {
    if (a.size(0) != b.size(0) || a.size(2) != b.size(1)) shapeError(a, b);
    Tensor out = bmm(a, b);
    if (!autograd::anyRequiresGrad({a, b})) return out;
    Tensor sa = a.detach(), sb = b.detach();
    return autograd::record(out, "BmmBackward0", {a, b}, [sa, sb](const Tensor& g, const Needs& n) {
      return Grads{n[0] ? bmm(g, sb.transpose(1, 2)) : Tensor(), n[1] ? bmm(sa.transpose(1, 2), g) : Tensor()};
    }, {sa, sb});
  }
  if (a.dim() == 3 && b.dim() == 2) {  // (B, n, k) @ (k, m): one GEMM over the flattened batch
    if (a.size(2) != b.size(0)) shapeError(a, b);
    return matmul(a.reshape({a.size(0) * a.size(1), a.size(2)}), b).view({a.size(0), a.size(1), b.size(1)});
  }
  throw NotImplementedError("matmul of a " + std::to_string(a.dim()) + "-D and a " + std::to_string(b.dim()) +
                            "-D tensor is not supported (1-D, 2-D and 3-D operands are)");
}

Tensor linear(const Tensor& input0, const Tensor& weight0, const Tensor& bias0) {
  const profiler::RecordScope record("aten::linear", {&input0, &weight0, &bias0});
  checkSameDevice("linear", {{"input", input0}, {"weight", weight0}, {"bias", bias0}});
  Tensor input = input0, weight = weight0, bias = bias0;
  amp::autocast("linear", {&input, &weight, &bias});
  detail::requireFloat("linear", input);
  requireSameDtype(input, weight);
  if (bias.defined() && bias.dtype() != input.dtype()) {
    throw Error("self and mat2 must have the same dtype, but got " + detail::cppTypeName(bias.dtype()) + " and " +
                detail::cppTypeName(input.dtype()));
  }
  if (input.dim() == 0 || input.size(-1) != weight.size(1) || weight.dim() != 2) {
    throw ValueError("mat1 and mat2 shapes cannot be multiplied (" + matrixShape(input.sizes()) + " and " +
                     matrixShape(weight.t().sizes()) + ")");
  }
  if (input.dim() != 2) {  // (..., in) -> (..., out) through a 2-D view
    Shape outShape = input.sizes();
    outShape.back() = weight.size(0);
    Tensor flat = input.reshape({-1, input.size(-1)});
    return linear(flat, weight, bias).view(outShape);
  }
  const std::int64_t batch = input.size(0), in = weight.size(1), outF = weight.size(0);
  Tensor x = input.contiguous();
  Tensor w = weight.contiguous();
  const DType dtype = x.dtype();
  Tensor out = Tensor::empty({batch, outF}, dtype, x.device());
  Backend& be = detail::backendOf(x);
  double beta = 0.0;
  if (bias.defined()) {
    if (bias.dim() != 1 || bias.size(0) != outF) throw ValueError("linear: bias must have shape [" + std::to_string(outF) + "], got " + shapeStr(bias.sizes()));
    NoGradGuard noGrad;
    be.copy(out, bias.expand({batch, outF}));  // out starts as the bias rows; GEMM adds x W^T to it
    beta = 1.0;
  }
  if (batch > 0 && in > 0) {
    be.gemm(dtype, false, true, batch, outF, in, 1.0, x.data_ptr(), in, w.data_ptr(), in, beta, out.data_ptr(), outF);
  } else if (!bias.defined()) {
    be.fill(out, 0.0);
  }
  if (!autograd::anyRequiresGrad({input, weight, bias})) return out;
  Tensor sx = x.detach(), sw = w.detach();
  // The node's inputs in PyTorch's order, which grad_fn.next_functions shows: addmm(bias, x, W^T) with a
  // bias, mm(x, W^T) without (AddmmBackward0's first edge is the bias's AccumulateGrad).
  const bool hasBias = bias.defined();
  auto backward = [sx, sw, hasBias](const Tensor& g0, const Needs& n) {
    Tensor g = g0.contiguous();
    Backend& b = detail::backendOf(g);
    const DType dt = g.dtype();
    const std::int64_t batch = sx.size(0), in = sx.size(1), outF = sw.size(0);
    const std::size_t ix = hasBias ? 1 : 0, iw = ix + 1;
    Grads grads(hasBias ? 3 : 2);
    if (n[ix]) {  // dx = g @ W : (B, out) @ (out, in)
      grads[ix] = Tensor::empty({batch, in}, dt, g.device());
      b.gemm(dt, false, false, batch, in, outF, 1.0, g.data_ptr(), outF, sw.data_ptr(), in, 0.0, grads[ix].data_ptr(), in);
    }
    if (n[iw]) {  // dW = g^T @ x : (out, B) @ (B, in)
      grads[iw] = Tensor::empty({outF, in}, dt, g.device());
      b.gemm(dt, true, false, outF, in, batch, 1.0, g.data_ptr(), outF, sx.data_ptr(), in, 0.0, grads[iw].data_ptr(), in);
    }
    if (hasBias && n[0]) grads[0] = sum(g, 0);
    return grads;
  };
  if (hasBias) return autograd::record(out, "AddmmBackward0", {bias, x, weight}, backward, {sx, sw});
  return autograd::record(out, "MmBackward0", {x, weight}, backward, {sx, sw});
}

}  // namespace gpulab
