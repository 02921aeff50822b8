#include "engine/core/tensor.h"

#include <cstring>
#include <limits>

#include "engine/core/errors.h"
#include "engine/core/storage.h"

namespace gpulab {

std::string shapeStr(const Shape& shape) {
  std::string s = "[";
  for (std::size_t i = 0; i < shape.size(); ++i) s += (i ? ", " : "") + std::to_string(shape[i]);
  return s + "]";
}

Shape contiguousStrides(const Shape& shape) {
  Shape strides(shape.size());
  std::int64_t running = 1;
  for (std::size_t i = shape.size(); i-- > 0;) {
    strides[i] = running;
    // A shape with a zero size holds nothing, but its strides must still be representable.
    if (__builtin_mul_overflow(running, std::max<std::int64_t>(shape[i], 1), &running)) {
      throw ValueError("shape " + shapeStr(shape) + " is too large: its strides overflow int64");
    }
  }
  return strides;
}

std::int64_t wrapDim(std::int64_t dim, std::int64_t ndim) {
  const std::int64_t lo = ndim == 0 ? -1 : -ndim, hi = ndim == 0 ? 0 : ndim - 1;
  if (dim < lo || dim > hi) {
    throw IndexError("Dimension out of range (expected to be in range of [" + std::to_string(lo) + ", " +
                     std::to_string(hi) + "], but got " + std::to_string(dim) + ")");
  }
  return dim < 0 ? dim + std::max<std::int64_t>(ndim, 1) : dim;
}

Tensor Tensor::empty(const Shape& shape, DType dtype, Device device, bool pinned) {
  std::int64_t n = 1;
  const auto maxElements = std::numeric_limits<std::int64_t>::max() / static_cast<std::int64_t>(elementSize(dtype));
  for (std::int64_t s : shape) {
    if (s < 0) throw ValueError("Trying to create tensor with negative dimension " + std::to_string(s) + ": " + shapeStr(shape));
    if (s != 0 && n > maxElements / s) throw ValueError("Trying to create a tensor of shape " + shapeStr(shape) + ": its size in bytes overflows");
    n *= s;
  }
  auto impl = std::make_shared<TensorImpl>();
  impl->storage = std::make_shared<Storage>(static_cast<std::size_t>(n) * elementSize(dtype), device, pinned);
  impl->sizes = shape;
  impl->strides = contiguousStrides(shape);
  impl->dtype = dtype;
  return Tensor(std::move(impl));
}

TensorImpl& Tensor::impl() const {
  if (!impl_) throw Error("Tensor is undefined (a default-constructed Tensor has no data)");
  return *impl_;
}

std::int64_t Tensor::size(std::int64_t dim) const { return sizes()[static_cast<std::size_t>(wrapDim(dim, this->dim()))]; }

std::int64_t Tensor::numel() const {
  std::int64_t n = 1;
  for (std::int64_t s : sizes()) n *= s;
  return n;
}

bool Tensor::is_contiguous() const {
  if (numel() == 0) return true;  // no element is out of place (PyTorch's answer too)
  std::int64_t expected = 1;
  const auto& sz = sizes();
  const auto& st = strides();
  for (std::size_t i = sz.size(); i-- > 0;) {
    if (sz[i] == 1) continue;
    if (st[i] != expected) return false;
    expected *= sz[i];
  }
  return true;
}

void* Tensor::data_ptr() const {
  return static_cast<char*>(impl().storage->data()) + impl().offset * static_cast<std::int64_t>(elementSize(dtype()));
}

Tensor& Tensor::requires_grad_(bool enabled) {
  if (!is_leaf() && !enabled) {
    throw Error("you can only change requires_grad flags of leaf variables. If you want to use a computed variable "
                "in a subgraph that doesn't require differentiation use var_no_grad = var.detach().");
  }
  if (enabled && !isFloatingPoint(dtype())) throw Error("Only Tensors of floating point and complex dtype can require gradients");
  impl().requires_grad = enabled;
  return *this;
}

void Tensor::set_grad(const Tensor& grad) {
  if (grad.defined() && grad.dtype() != dtype()) throw Error("assigned grad has data of a different type");
  if (grad.defined() && grad.device() != device()) throw Error("assigned grad has data located on a different device");
  if (grad.defined() && grad.sizes() != sizes()) throw Error("assigned grad has data of a different size");
  impl().grad = grad.defined() ? grad.implPtr() : nullptr;
}

namespace detail {
namespace {
ViewHistoryRefresh installedRefresh = nullptr;
}
void installViewHistoryRefresh(ViewHistoryRefresh refresh) { installedRefresh = refresh; }
void refreshViewHistorySlow(TensorImpl& view) {
  if (installedRefresh) installedRefresh(view);
}
}  // namespace detail

namespace {
// A tensor over the same storage and geometry as `from`, with no history, counting its in-place
// writes with `version` (a fresh counter where none is given).
Tensor aliasWithoutHistory(const TensorImpl& from, std::shared_ptr<VersionCounter> version) {
  auto impl2 = version ? std::make_shared<TensorImpl>(std::move(version)) : std::make_shared<TensorImpl>();
  impl2->storage = from.storage;
  impl2->sizes = from.sizes;
  impl2->strides = from.strides;
  impl2->offset = from.offset;
  impl2->dtype = from.dtype;
  return Tensor(std::move(impl2));
}
}  // namespace

// PyTorch's detach() shares the version counter, so that a saved tensor sees writes made through it.
Tensor Tensor::detach() const { return aliasWithoutHistory(impl(), impl().version); }

Tensor Tensor::variable_data() const { return aliasWithoutHistory(impl(), nullptr); }

}  // namespace gpulab
