#pragma once
// Tensor: a strided view of a Storage, with PyTorch's semantics and names. A Tensor is a cheap handle
// (shared ownership of a TensorImpl); views share storage; operations return new tensors. Autograd
// state (requires_grad, grad, grad_fn) lives on the impl, as in PyTorch.
// The methods that run ops (to, clone, copy_, fill_, item, backward, the arithmetic operators, ...)
// are defined with the ops, in engine/ops/tensor_methods.cpp, as PyTorch defines Tensor's methods with
// ATen's: the layers below ops (memory, kernels, runtime, profiler, autograd) may not call them --
// tests/layers checks what each layer's objects call.
#include <atomic>
#include <cstdint>
#include <initializer_list>
#include <memory>
#include <string>
#include <vector>

#include "engine/core/storage.h"
#include "engine/core/device.h"
#include "engine/core/dtype.h"

namespace gpulab {

using Shape = std::vector<std::int64_t>;
std::string shapeStr(const Shape& shape);  // "[64, 16]"

namespace cuda {
class Stream;
}
namespace autograd {
class Node;
}

class Tensor;

// PyTorch's version counter (Tensor._version): every in-place write bumps it. A tensor, its views and
// its detach()es share one counter (Tensor.data gets its own, as in PyTorch), so a tensor saved for
// backward can tell at backward time that it was overwritten since (engine/autograd/node.h).
struct VersionCounter {
  std::atomic<std::uint32_t> value{0};
};

struct TensorImpl {
  TensorImpl() : version(std::make_shared<VersionCounter>()) {}
  // A tensor over the same data that shares `counter` (a view, a detach()).
  explicit TensorImpl(std::shared_ptr<VersionCounter> counter) : version(std::move(counter)) {}

  std::shared_ptr<Storage> storage;
  Shape sizes;
  Shape strides;  // in elements
  std::int64_t offset = 0;  // in elements
  DType dtype = kFloat32;
  bool requires_grad = false;
  std::shared_ptr<TensorImpl> grad;
  std::shared_ptr<autograd::Node> grad_fn;        // set on results of recorded ops
  std::weak_ptr<autograd::Node> grad_accumulator;  // leaves: created on first use
  std::shared_ptr<VersionCounter> version;

  // Views (PyTorch's _base; see Note [In-place ops on views] in engine/ops/tensor_methods.cpp). Set on
  // every view (view, reshape, transpose, slice, select, (un)squeeze, expand, ...): the tensor at the
  // root of its chain of views, never itself a view. The view's geometry over the shared storage is
  // its own sizes/strides/offset.
  std::shared_ptr<TensorImpl> viewBase;
  // The version when this view's grad_fn was derived: an in-place write through the base or another
  // view since then has changed the base's history, and grad_fn is derived again from it.
  std::uint32_t viewVersion = 0;
  bool viewCreatedInNoGrad = false;  // PyTorch's CreationMeta::NO_GRAD_MODE
};

namespace detail {
// Brings a view's grad_fn up to date with its base's history when an in-place write has changed that
// since (autograd's work, installed by the ops layer when the engine loads: core cannot call it).
using ViewHistoryRefresh = void (*)(TensorImpl& view);
void installViewHistoryRefresh(ViewHistoryRefresh refresh);
void refreshViewHistorySlow(TensorImpl& view);
inline bool viewHistoryIsStale(const TensorImpl& impl) {
  return impl.viewBase && impl.viewVersion != impl.version->value.load(std::memory_order_relaxed);
}
inline void refreshViewHistory(TensorImpl& impl) {
  if (viewHistoryIsStale(impl)) refreshViewHistorySlow(impl);
}
}  // namespace detail

class Tensor {
 public:
  Tensor() = default;
  explicit Tensor(std::shared_ptr<TensorImpl> impl) : impl_(std::move(impl)) {}

  // An uninitialised contiguous tensor.
  static Tensor empty(const Shape& shape, DType dtype = kFloat32, Device device = kCPU, bool pinned = false);

  bool defined() const { return impl_ != nullptr; }
  const Shape& sizes() const { return impl().sizes; }
  const Shape& shape() const { return impl().sizes; }
  const Shape& strides() const { return impl().strides; }
  std::int64_t size(std::int64_t dim) const;
  std::int64_t dim() const { return static_cast<std::int64_t>(impl().sizes.size()); }
  std::int64_t numel() const;
  std::int64_t storage_offset() const { return impl().offset; }
  DType dtype() const { return impl().dtype; }
  Device device() const { return impl().storage->device(); }
  bool is_cuda() const { return device().isCuda(); }
  bool is_pinned() const { return impl().storage->pinned(); }
  // Tensor.record_stream(s): this tensor's memory is also used by work queued on `stream` (another
  // stream of its device), so the caching allocator does not reuse it before that work has run.
  void record_stream(const cuda::Stream& stream) const;
  bool is_contiguous() const;
  std::size_t nbytes() const { return static_cast<std::size_t>(numel()) * elementSize(dtype()); }
  std::string toString() const;  // like print(tensor) for small tensors; a summary otherwise

  // Raw element pointer (device memory for CUDA tensors), at this view's offset.
  void* data_ptr() const;
  template <class T>
  T* data() const { return static_cast<T*>(data_ptr()); }
  // Values copied to the host, in logical (row-major) order, converted to T.
  template <class T>
  std::vector<T> toVector() const;
  // The single value of a one-element tensor (synchronises with the device, like PyTorch).
  double item() const;

  // Device and dtype conversions (return *this when nothing changes, like PyTorch).
  Tensor to(Device device, bool non_blocking = false) const;
  Tensor to(DType dtype) const;
  Tensor half() const { return to(kFloat16); }
  Tensor bfloat16() const { return to(kBFloat16); }
  // PyTorch's .float() and .double() are to(kFloat) and to(kDouble) here: both are C++ keywords.
  Tensor cpu() const { return to(kCPU); }
  Tensor cuda(int index) const { return to(Device(DeviceType::CUDA, index)); }
  Tensor cuda() const;  // to the current CUDA device of this thread (CudaDeviceGuard), cuda:0 by default
  Tensor pin_memory() const;
  Tensor contiguous() const;
  Tensor clone() const;

  // Views (share storage with *this).
  Tensor view(const Shape& shape) const;
  Tensor reshape(const Shape& shape) const;
  Tensor transpose(std::int64_t dim0, std::int64_t dim1) const;
  Tensor t() const { return transpose(0, 1); }
  // The dims in the order `dims` names them (each once): one view, one PermuteBackward0 node.
  Tensor permute(const std::vector<std::int64_t>& dims) const;
  Tensor slice(std::int64_t dim, std::int64_t start, std::int64_t end, std::int64_t step = 1) const;
  Tensor select(std::int64_t dim, std::int64_t index) const;
  Tensor unsqueeze(std::int64_t dim) const;
  Tensor squeeze(std::int64_t dim) const;
  Tensor flatten(std::int64_t start_dim = 0, std::int64_t end_dim = -1) const;
  Tensor expand(const Shape& shape) const;

  // Autograd. A view's grad_fn (and so requires_grad and is_leaf) follows in-place writes through its
  // base or another view of it (Note [In-place ops on views]).
  bool requires_grad() const { return refreshed().requires_grad; }
  Tensor& requires_grad_(bool enabled = true);
  Tensor grad() const { return impl().grad ? Tensor(impl().grad) : Tensor(); }
  void set_grad(const Tensor& grad);
  bool is_leaf() const { return refreshed().grad_fn == nullptr; }
  const std::shared_ptr<autograd::Node>& grad_fn() const { return refreshed().grad_fn; }
  // Accumulates d(this)/d(leaf) into every leaf's grad. Without an argument *this must be a scalar.
  // retain_graph keeps what the graph saved, so that it can be walked again.
  void backward(const Tensor& gradient = Tensor(), bool retain_graph = false) const;
  Tensor detach() const;  // same storage and version counter, no history
  // Tensor.data: same storage, no history, and a version counter of its own, so in-place writes
  // through it go unseen by autograd's checks (PyTorch's variable_data(); why .data is discouraged).
  Tensor variable_data() const;
  // Views: is_view() when this tensor shares its base's memory through a view op (PyTorch's
  // _is_view()); _base() is that base (undefined otherwise). _version() counts in-place writes.
  bool is_view() const { return impl().viewBase != nullptr; }
  Tensor _base() const { return impl().viewBase ? Tensor(impl().viewBase) : Tensor(); }
  std::uint32_t _version() const { return impl().version->value.load(std::memory_order_relaxed); }

  // In-place, recorded by autograd as PyTorch records them (in-place through a view rewrites the
  // base's history: CopySlices). Refused on a leaf that requires grad and on a view of one while grad
  // mode is on. add_ and mul_ compute out of place and copy the result in, as the Python methods do.
  Tensor& zero_();
  Tensor& fill_(double value);
  Tensor& copy_(const Tensor& src);
  Tensor& add_(const Tensor& other);
  Tensor& add_(double other);
  Tensor& mul_(const Tensor& other);
  Tensor& mul_(double other);

  // Arithmetic and math, as methods (see engine/ops/ops.h for the functions).
  Tensor operator-() const;
  Tensor matmul(const Tensor& other) const;
  Tensor sum() const;
  Tensor sum(std::int64_t dim, bool keepdim = false) const;
  Tensor mean() const;
  Tensor mean(std::int64_t dim, bool keepdim = false) const;
  Tensor max() const;
  Tensor argmax(std::int64_t dim, bool keepdim = false) const;
  Tensor argmax() const;  // flat index, 0-dim int64
  Tensor argmin(std::int64_t dim, bool keepdim = false) const;
  Tensor argmin() const;
  Tensor relu() const;
  Tensor sigmoid() const;
  Tensor tanh() const;
  Tensor exp() const;
  Tensor log() const;
  Tensor abs() const;
  Tensor pow(double exponent) const;
  Tensor softmax(std::int64_t dim) const;
  Tensor log_softmax(std::int64_t dim) const;

  TensorImpl& impl() const;
  const std::shared_ptr<TensorImpl>& implPtr() const { return impl_; }
  bool sameAs(const Tensor& other) const { return impl_ == other.impl_; }

 private:
  TensorImpl& refreshed() const {
    TensorImpl& i = impl();
    detail::refreshViewHistory(i);
    return i;
  }
  std::shared_ptr<TensorImpl> impl_;
};

Tensor operator+(const Tensor& a, const Tensor& b);
Tensor operator-(const Tensor& a, const Tensor& b);
Tensor operator*(const Tensor& a, const Tensor& b);
Tensor operator/(const Tensor& a, const Tensor& b);
Tensor operator+(const Tensor& a, double b);
Tensor operator-(const Tensor& a, double b);
Tensor operator*(const Tensor& a, double b);
Tensor operator/(const Tensor& a, double b);
Tensor operator+(double a, const Tensor& b);
Tensor operator-(double a, const Tensor& b);
Tensor operator*(double a, const Tensor& b);
Tensor operator/(double a, const Tensor& b);  // a * b^-1 elementwise; float32 even for int64 b
Tensor operator==(const Tensor& a, const Tensor& b);  // a bool tensor, as eq

// Contiguous row-major strides for `shape`.
Shape contiguousStrides(const Shape& shape);
// Wraps a possibly negative dim into [0, ndim); throws IndexError like PyTorch otherwise.
std::int64_t wrapDim(std::int64_t dim, std::int64_t ndim);

}  // namespace gpulab
