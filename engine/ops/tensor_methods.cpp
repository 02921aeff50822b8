// The methods of Tensor (engine/core/tensor.h) that run ops -- copies, casts, arithmetic, autograd --
// are defined here, in the ops layer, as PyTorch defines Tensor's methods with ATen's ops: core holds
// the class and what needs nothing above it (shapes, storage, views), and cannot reach up.
//
// Note [In-place ops on views]
// ~~~~~~~~~~~~~~~~~~~~~~~~~~~~
// Every in-place write goes through copy_ or fill_ (x.mul_(y) is x.copy_(x * y), x[1:3] = v is
// x[1:3].copy_(v)), and each bumps the written tensor's version counter, which its views and detach()es
// share. Autograd records the write as PyTorch does:
//  - On a tensor that is not a view, the tensor's history becomes the write's node: CopyBackwards
//    (FillBackward2, ZeroBackward0), which gives the old value a zero gradient and passes the rest to
//    the source. When the source was computed from the tensor itself (x.mul_(y): x * y, whose node has
//    an edge into x's old history), that node is x's history directly, as PyTorch's MulBackward0 is.
//  - On a view, the base's history is rebased (PyTorch's CopySlices): the base's new grad_fn takes the
//    gradient for the whole base, runs the write's backward on the view's region (the gradient seen
//    through the view's geometry, sizes/strides/offset relative to the base), writes the result for
//    the view's old value back into that region, and passes everything else to the base's old
//    history. The view's own grad_fn becomes AsStridedBackward0 of the new base.
//  - Every other view of that base learns of the new history lazily: a view notes the version when its
//    grad_fn was derived (TensorImpl::viewVersion), and a view whose counter has moved on since derives
//    it again as AsStridedBackward0 of its base's grad_fn as it is now (refreshView below, installed
//    into core's accessors), as PyTorch regenerates a view's grad_fn when its version changed.
//  - What the out-of-place step saved of the tensor about to be overwritten (x * y saves x) is copied
//    first (keepSavedValues), as PyTorch's in-place ops save a clone of self: its backward then reads
//    the old values. A tensor saved by any other op and overwritten afterwards fails that op's version
//    check at backward time with PyTorch's "modified by an inplace operation" error.
// The rules PyTorch enforces before any of this come first, with its messages: no in-place write on a
// leaf that requires grad or on a view of one while grad mode is on (under no_grad, as an optimizer
// writes, it is allowed), none through a view made under no_grad, and no copy into memory that several
// elements share (an expand()ed tensor).
// Limits: geometry is all a view keeps of how it was made, so regenerated views are AsStrided (as
// PyTorch's are for views it cannot replay); views in this engine never overlap except through
// expand's zero strides, which AsStridedBackward0 sums over.
#include <algorithm>
#include <locale>
#include <sstream>

#include "engine/autograd/grad_mode.h"
#include "engine/autograd/gradient_ops.h"
#include "engine/autograd/node.h"
#include "engine/core/dispatch.h"
#include "engine/core/errors.h"
#include "engine/core/tensor.h"
#include "engine/kernels/backend.h"
#include "engine/runtime/device_runtime.h"
#include "engine/kernels/cpu_backend.h"
#include "engine/ops/op_util.h"
#include "engine/ops/ops.h"
#include "engine/profiler/profiler.h"
#include "engine/runtime/device_memory.h"
#include "engine/runtime/execution_context.h"
#include "engine/runtime/stream.h"

namespace gpulab {

namespace {
// Backward's arithmetic on gradients (engine/autograd/gradient_ops.h), installed when the engine loads.
[[maybe_unused]] const bool gradientOpsInstalled = (autograd::installGradientOps({
    .add = [](const Tensor& a, const Tensor& b) { return add(a, b); },
    .cast = [](const Tensor& t, DType dtype) { return t.to(dtype); },
    .clone = [](const Tensor& t) { return t.clone(); },
    .copyInto = [](Tensor& dst, const Tensor& src) { dst.copy_(src); },
    .anyNonzero = [](const Tensor& t) { return any(ne(t, 0.0)).item() != 0.0; },
}), true);
}  // namespace

template <class T>
std::vector<T> Tensor::toVector() const {
  Tensor host = contiguous().cpu();
  std::vector<T> out(static_cast<std::size_t>(host.numel()));
  dispatchWithBool(host.dtype(), "toVector", [&](auto tag) {
    using S = typename decltype(tag)::type;
    const S* p = host.data<S>();
    for (std::size_t i = 0; i < out.size(); ++i) out[i] = static_cast<T>(static_cast<OpMath<S>>(p[i]));
  });
  return out;
}
template std::vector<float> Tensor::toVector<float>() const;
template std::vector<double> Tensor::toVector<double>() const;
template std::vector<std::int64_t> Tensor::toVector<std::int64_t>() const;

double Tensor::item() const {
  if (numel() != 1) {
    throw Error("a Tensor with " + std::to_string(numel()) + " elements cannot be converted to Scalar");
  }
  return toVector<double>()[0];
}

std::string Tensor::toString() const {
  std::ostringstream os;
  os.imbue(std::locale::classic());  // 0.5, not 0,5, whatever std::locale::global says
  os << "tensor(";
  if (numel() <= 64) {
    auto v = toVector<double>();
    os << "[";
    for (std::size_t i = 0; i < v.size(); ++i) os << (i ? ", " : "") << v[i];
    os << "], shape=" << shapeStr(sizes());
  } else {
    os << "shape=" << shapeStr(sizes());
  }
  if (dtype() != kFloat32) os << ", dtype=" << dtypeName(dtype());
  if (is_cuda()) os << ", device='" << device().str() << "'";
  if (grad_fn()) os << ", grad_fn=<" << grad_fn()->name() << ">";
  else if (requires_grad()) os << ", requires_grad=True";
  return os.str() + ")";
}

Tensor Tensor::to(Device device, bool non_blocking) const { return to_device(*this, device, non_blocking); }
Tensor Tensor::to(DType dtype) const { return to_dtype(*this, dtype); }
Tensor Tensor::cuda() const { return cuda(executionContext().currentCudaDevice); }

Tensor Tensor::pin_memory() const {
  if (is_cuda()) throw Error("cannot pin '" + device().str() + "' memory: only dense CPU tensors can be pinned");
  if (is_pinned()) return *this;
  Tensor out = Tensor::empty(sizes(), dtype(), kCPU, /*pinned=*/true);
  cpuBackend().copy(out, *this);
  return out;
}

void Tensor::record_stream(const cuda::Stream& stream) const {
  if (!is_cuda()) throw Error("record_stream: expected a CUDA tensor, but this one is on " + device().str());
  if (stream.device() != device()) {
    throw ValueError("record_stream: the tensor is on " + device().str() + " but the stream belongs to " + stream.device().str());
  }
  allocatorFor(device()).recordStream(impl().storage->data(), stream.id());
}

Tensor Tensor::contiguous() const {
  if (is_contiguous()) return *this;
  return clone();
}

Tensor Tensor::clone() const {
  Tensor out = Tensor::empty(sizes(), dtype(), device());
  backendFor(device()).copy(out, *this);
  return autograd::record(out, "CloneBackward0", {*this},
                          [](const Tensor& g, const std::vector<bool>&) { return std::vector<Tensor>{g}; });
}

void Tensor::backward(const Tensor& gradient, bool retain_graph) const {
  Tensor g = gradient;
  if (!g.defined()) {
    if (numel() != 1) throw Error("grad can be implicitly created only for scalar outputs");
    g = ones(sizes(), {.dtype = dtype(), .device = device()});
  }
  autograd::runBackward(*this, g, retain_graph);
}

namespace {

using autograd::FunctionNode;
using autograd::Node;

// A tensor's layout over its storage.
struct Geometry {
  Shape sizes, strides;
  std::int64_t offset = 0;
};
Geometry geometryOf(const TensorImpl& t) { return {t.sizes, t.strides, t.offset}; }

// A gradient buffer laid out as `base` was (zero-filled, or a copy of `grad` when given), and the view
// of it that `view` was of base's memory: what CopySlices and AsStridedBackward0 write through. The
// buffer is a plain contiguous tensor when the base was one (offset aside); otherwise it spans the
// base's elements and is handed on as a contiguous copy (gradient()).
class GradientLayout {
 public:
  GradientLayout(const Geometry& base, const Geometry& view, DType dtype, Device device, const Tensor& grad) {
    contiguous_ = base.strides == contiguousStrides(base.sizes);
    if (contiguous_) {
      base_ = grad.defined() ? grad.clone() : zeros(base.sizes, {.dtype = dtype, .device = device});
    } else {
      std::int64_t span = 1;  // elements from the base's first to its last, in its storage
      for (std::size_t i = 0; i < base.sizes.size(); ++i) {
        if (base.sizes[i] == 0) span = 0;
        if (span > 0) span += (base.sizes[i] - 1) * base.strides[i];
      }
      Tensor buffer = zeros({span}, {.dtype = dtype, .device = device});
      base_ = detail::makeView(buffer, base.sizes, base.strides, 0);
      if (grad.defined()) base_.copy_(grad);
    }
    region_ = detail::makeView(base_, view.sizes, view.strides, view.offset - base.offset);
  }
  Tensor& region() { return region_; }
  Tensor gradient() const { return contiguous_ ? base_ : base_.contiguous(); }

 private:
  bool contiguous_ = true;
  Tensor base_, region_;
};

// The base's history after an in-place write through one of its views (Note [In-place ops on views]).
// Edge 0 is the base's old history; edges 1.. are the write's other inputs. `fn` is the write's
// backward, with output 0 the gradient of the view's old value.
class CopySlices final : public Node {
 public:
  CopySlices(Geometry base, Geometry view, FunctionNode::Backward fn)
      : base_(std::move(base)), view_(std::move(view)), fn_(std::move(fn)) {}

  std::vector<Tensor> apply(const Tensor& grad) override {
    if (!fn_) throw Error(autograd::releasedGraphMessage());
    if (!grad.defined()) return {};
    const profiler::RecordScope record(profiler::isObserving() ? "autograd::engine::evaluate_function: CopySlices" : std::string(),
                                       {&grad});
    std::vector<bool> needs(next.size());
    for (std::size_t i = 0; i < next.size(); ++i) needs[i] = next[i] != nullptr;
    GradientLayout layout(base_, view_, grad.dtype(), grad.device(), grad);
    std::vector<Tensor> grads = fn_(layout.region().clone(), needs);
    grads.resize(next.size());
    if (needs[0]) {
      if (grads[0].defined()) layout.region().copy_(grads[0]);
      else layout.region().zero_();
      grads[0] = layout.gradient();
    } else {
      grads[0] = Tensor();
    }
    return grads;
  }
  std::string name() const override { return "CopySlices"; }
  void release() override { fn_ = nullptr; }

 private:
  Geometry base_, view_;
  FunctionNode::Backward fn_;
};

// A view's grad_fn derived from its base's history as it is now: the view's gradient placed into a
// zero gradient for the whole base, through the view's geometry. A zero stride (expand) maps many
// elements of the view onto one of the base: their gradients are summed onto it first.
std::shared_ptr<Node> asStridedBackward(const Tensor& base, const TensorImpl& view) {
  Geometry baseGeometry = geometryOf(base.impl()), viewGeometry = geometryOf(view);
  std::vector<std::int64_t> repeatedDims;
  for (std::size_t d = 0; d < viewGeometry.sizes.size(); ++d) {
    if (viewGeometry.strides[d] == 0 && viewGeometry.sizes[d] > 1) {
      repeatedDims.push_back(static_cast<std::int64_t>(d));
      viewGeometry.sizes[d] = 1;
    }
  }
  const DType dtype = base.dtype();
  const Device device = base.device();
  auto node = std::make_shared<FunctionNode>(
      "AsStridedBackward0", [baseGeometry, viewGeometry, repeatedDims, dtype, device](const Tensor& g, const std::vector<bool>&) {
        Tensor part = g;
        for (std::int64_t d : repeatedDims) part = part.sum(d, /*keepdim=*/true);
        GradientLayout layout(baseGeometry, viewGeometry, dtype, device, Tensor());
        layout.region().copy_(part);
        return std::vector<Tensor>{layout.gradient()};
      });
  node->next = {autograd::gradientEdge(base)};
  node->nextDtypes = {dtype};
  return node;
}

// Installed into core's accessors (requires_grad, grad_fn, is_leaf): a view whose version moved on
// since its grad_fn was derived takes AsStridedBackward0 of its base's history. A view made under
// no_grad is not part of that history and stays as it is (autograd::anyRequiresGrad refuses to use
// it in grad mode once its base has been written, as PyTorch does).
void refreshView(TensorImpl& view) {
  if (view.viewCreatedInNoGrad) return;
  const std::uint32_t now = view.version->value.load(std::memory_order_relaxed);
  if (view.grad_fn || view.viewBase->requires_grad) {
    view.grad_fn = asStridedBackward(Tensor(view.viewBase), view);
    view.requires_grad = true;
  }
  view.viewVersion = now;
}

[[maybe_unused]] const bool viewRefreshInstalled = (detail::installViewHistoryRefresh(&refreshView), true);

// Whether autograd sees `t` as needing a gradient for an in-place write: itself, or a view of a base
// that does (PyTorch's requires_grad of a view).
bool writeRequiresGrad(const Tensor& t) {
  const TensorImpl& impl = t.impl();
  return t.requires_grad() || (impl.viewBase && impl.viewBase->requires_grad);
}

// PyTorch's checks before an in-place write into `dst` (from a source that requires grad or not).
void checkInPlace(const Tensor& dst, bool srcRequiresGrad) {
  if (!isGradEnabled() || !(srcRequiresGrad || writeRequiresGrad(dst))) return;
  const TensorImpl& impl = dst.impl();
  if (impl.viewBase) {
    if (impl.viewCreatedInNoGrad) {
      throw Error("A view was created in no_grad mode and is being modified inplace with grad mode enabled. Given that this use "
                  "case is ambiguous and error-prone, it is forbidden. You can clarify your code by moving both the view and the "
                  "inplace either both inside the no_grad block (if you don't want the inplace to be tracked) or both outside (if "
                  "you want the inplace to be tracked).");
    }
    if (dst.requires_grad() && !impl.viewBase->grad_fn) {  // PyTorch's tensor._base().is_leaf()
      throw Error("a view of a leaf Variable that requires grad is being used in an in-place operation.");
    }
  }
  if (dst.requires_grad() && dst.is_leaf()) throw Error("a leaf Variable that requires grad is being used in an in-place operation.");
}

// PyTorch refuses to write into memory that several of the tensor's elements share.
void checkNoInternalOverlap(const Tensor& dst) {
  for (std::size_t d = 0; d < dst.sizes().size(); ++d) {
    if (dst.strides()[d] == 0 && dst.sizes()[d] > 1) {
      throw Error("unsupported operation: more than one element of the written-to tensor refers to a single memory location. "
                  "Please clone() the tensor before performing the operation.");
    }
  }
}

// Before `dst` is overwritten with `src`: what the node that computed `src` saved of dst's memory, at
// its present version, is copied, so its backward reads the values it was computed from (x * y saved
// x; x.mul_(y) writes x * y into x). Only that node, the out-of-place step of an in-place op: what
// earlier ops saved of dst fails their version check, as in PyTorch (x.exp().add_(1): exp saved its
// result).
void keepSavedValues(const Tensor& dst, const Tensor& src) {
  if (!src.defined() || !src.requires_grad()) return;
  auto* producer = dynamic_cast<FunctionNode*>(src.grad_fn().get());
  if (!producer) return;
  const TensorImpl& d = dst.impl();
  const std::uint32_t now = d.version->value.load(std::memory_order_relaxed);
  for (autograd::SavedTensor& saved : producer->saved()) {
    if (saved.impl->version != d.version || saved.version != now) continue;
    const Tensor copy = Tensor(saved.impl).clone();  // saved.impl is the node's own detach(): nothing else sees it change
    TensorImpl& mine = *saved.impl;
    mine.storage = copy.impl().storage;
    mine.strides = copy.impl().strides;
    mine.offset = copy.impl().offset;
    mine.version = copy.impl().version;
    saved.version = 0;
  }
}

// What autograd needs of an in-place write into `dst` from `src` (undefined: fill_, zero_), taken
// before the write: the edges into the old history of dst (of its base, for a view) and of src. Taken
// after, a src that is a view of the same base would be brought up to date against the history the
// write is replacing, and then look current.
struct InPlaceHistory {
  bool record = false;
  std::shared_ptr<Node> old, source, sourceFn;
};

InPlaceHistory historyBeforeWrite(const Tensor& dst, const Tensor& src) {
  InPlaceHistory h;
  const bool srcRequiresGrad = src.defined() && src.requires_grad();
  h.record = isGradEnabled() && isFloatingPoint(dst.dtype()) && (srcRequiresGrad || writeRequiresGrad(dst));
  if (!h.record) return h;
  const TensorImpl& impl = dst.impl();
  h.old = autograd::gradientEdge(impl.viewBase ? Tensor(impl.viewBase) : dst);
  if (srcRequiresGrad) {
    h.source = autograd::gradientEdge(src);
    h.sourceFn = src.grad_fn();
  }
  return h;
}

// The edges of a write's backward node: the old value's history (of dtype `oldDtype`), then the
// source's when there is one (src undefined: a constant was written).
void connectWrite(Node& node, const InPlaceHistory& h, DType oldDtype, const Tensor& src) {
  node.next.push_back(h.old);
  node.nextDtypes.push_back(oldDtype);
  if (src.defined()) {
    node.next.push_back(h.source);
    node.nextDtypes.push_back(src.dtype());
  }
}

// Autograd's record of an in-place write into `dst` whose new value is `src` (already of dst's sizes
// and device), or a constant (src undefined: fill_, zero_). Called after the write with what
// historyBeforeWrite took; see Note [In-place ops on views].
void recordInPlace(const Tensor& dst, const Tensor& src, const InPlaceHistory& h, const char* name) {
  if (!h.record) return;
  TensorImpl& impl = dst.impl();
  const bool fromSource = src.defined();
  if (!impl.viewBase) {
    if (h.old && h.sourceFn && src.dtype() == dst.dtype()) {
      const auto& edges = h.sourceFn->next;
      if (std::find(edges.begin(), edges.end(), h.old) != edges.end()) {  // src = f(dst, ...): f's node is dst's history
        impl.grad_fn = h.sourceFn;
        impl.requires_grad = true;
        return;
      }
    }
    // The old value is overwritten (a zero gradient, as PyTorch gives it); the source takes the
    // gradient as it is.
    auto node = std::make_shared<FunctionNode>(name, [fromSource](const Tensor& g, const std::vector<bool>& needs) {
      std::vector<Tensor> grads(fromSource ? 2 : 1);
      if (needs[0]) grads[0] = zeros(g.sizes(), {.dtype = g.dtype(), .device = g.device()});
      if (fromSource && needs[1]) grads[1] = g;
      return grads;
    });
    connectWrite(*node, h, dst.dtype(), src);
    impl.grad_fn = std::move(node);
    impl.requires_grad = true;
    return;
  }
  // A view: the base's history is rebased, and the view's is derived from it. The write's backward
  // gives the view's old value nothing (CopySlices zeroes the region) and the source the gradient.
  const Tensor base(impl.viewBase);
  auto node = std::make_shared<CopySlices>(geometryOf(base.impl()), geometryOf(impl), [fromSource](const Tensor& g, const std::vector<bool>& needs) {
    std::vector<Tensor> grads(fromSource ? 2 : 1);
    if (fromSource && needs[1]) grads[1] = g;
    return grads;
  });
  connectWrite(*node, h, base.dtype(), src);
  TensorImpl& b = base.impl();
  b.grad_fn = std::move(node);
  b.requires_grad = true;
  impl.grad_fn = asStridedBackward(base, impl);
  impl.requires_grad = true;
  impl.viewVersion = impl.version->value.load(std::memory_order_relaxed);
}

void bumpVersion(const Tensor& t) { t.impl().version->value.fetch_add(1, std::memory_order_relaxed); }

Tensor& fillInPlace(Tensor& t, double value, const char* name) {
  checkScalarFits(value, t.dtype());
  checkInPlace(t, false);
  const InPlaceHistory history = historyBeforeWrite(t, Tensor());
  if (t.is_contiguous()) {
    backendFor(t.device()).fill(t, value);
  } else {
    const Tensor filled = full(t.sizes(), value, {.dtype = t.dtype(), .device = t.device()});
    backendFor(t.device()).copy(t, filled);
  }
  bumpVersion(t);
  recordInPlace(t, Tensor(), history, name);
  return t;
}

}  // namespace

Tensor& Tensor::zero_() { return fillInPlace(*this, 0.0, "ZeroBackward0"); }

Tensor& Tensor::fill_(double value) { return fillInPlace(*this, value, "FillBackward2"); }

Tensor& Tensor::copy_(const Tensor& src) {
  checkInPlace(*this, src.requires_grad());
  checkNoInternalOverlap(*this);
  keepSavedValues(*this, src);
  Tensor s = src;
  if (s.device() != device()) s = s.to(device());
  if (s.sizes() != sizes()) s = s.expand(sizes());
  const InPlaceHistory history = historyBeforeWrite(*this, s);
  backendFor(device()).copy(*this, s);
  bumpVersion(*this);
  recordInPlace(*this, s, history, "CopyBackwards");
  return *this;
}

Tensor& Tensor::add_(const Tensor& other) { return copy_(*this + other); }
Tensor& Tensor::add_(double other) { return copy_(*this + other); }
Tensor& Tensor::mul_(const Tensor& other) { return copy_(*this * other); }
Tensor& Tensor::mul_(double other) { return copy_(*this * other); }

Tensor Tensor::operator-() const { return neg(*this); }
Tensor Tensor::matmul(const Tensor& other) const { return gpulab::matmul(*this, other); }
Tensor Tensor::sum() const { return gpulab::sum(*this); }
Tensor Tensor::sum(std::int64_t d, bool keepdim) const { return gpulab::sum(*this, d, keepdim); }
Tensor Tensor::mean() const { return gpulab::mean(*this); }
Tensor Tensor::mean(std::int64_t d, bool keepdim) const { return gpulab::mean(*this, d, keepdim); }
Tensor Tensor::max() const { return gpulab::max(*this); }
Tensor Tensor::argmax(std::int64_t d, bool keepdim) const { return gpulab::argmax(*this, d, keepdim); }
Tensor Tensor::argmax() const { return gpulab::argmax(*this); }
Tensor Tensor::argmin(std::int64_t d, bool keepdim) const { return gpulab::argmin(*this, d, keepdim); }
Tensor Tensor::argmin() const { return gpulab::argmin(*this); }
Tensor Tensor::relu() const { return gpulab::relu(*this); }
Tensor Tensor::sigmoid() const { return gpulab::sigmoid(*this); }
Tensor Tensor::tanh() const { return gpulab::tanh(*this); }
Tensor Tensor::exp() const { return gpulab::exp(*this); }
Tensor Tensor::log() const { return gpulab::log(*this); }
Tensor Tensor::abs() const { return gpulab::abs(*this); }
Tensor Tensor::pow(double e) const { return gpulab::pow(*this, e); }
Tensor Tensor::softmax(std::int64_t d) const { return gpulab::softmax(*this, d); }
Tensor Tensor::log_softmax(std::int64_t d) const { return gpulab::log_softmax(*this, d); }

Tensor operator+(const Tensor& a, const Tensor& b) { return add(a, b); }
Tensor operator-(const Tensor& a, const Tensor& b) { return sub(a, b); }
Tensor operator*(const Tensor& a, const Tensor& b) { return mul(a, b); }
Tensor operator/(const Tensor& a, const Tensor& b) { return div(a, b); }
Tensor operator+(const Tensor& a, double b) { return add(a, b); }
Tensor operator-(const Tensor& a, double b) { return sub(a, b); }
Tensor operator*(const Tensor& a, double b) { return mul(a, b); }
Tensor operator/(const Tensor& a, double b) { return div(a, b); }
Tensor operator+(double a, const Tensor& b) { return add(b, a); }
Tensor operator-(double a, const Tensor& b) { return rsub(b, a); }
Tensor operator*(double a, const Tensor& b) { return mul(b, a); }
Tensor operator/(double a, const Tensor& b) { return rdiv(b, a); }
Tensor operator==(const Tensor& a, const Tensor& b) { return eq(a, b); }

}  // namespace gpulab
