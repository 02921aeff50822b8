// View ops: they share storage with their input and record a backward that maps the gradient back
// to the input's shape.
#include <algorithm>
#include <limits>
#include <numeric>

#include "engine/autograd/grad_mode.h"
#include "engine/ops/op_util.h"
#include "engine/profiler/profiler.h"

namespace gpulab {
namespace detail {

Tensor makeView(const Tensor& base, Shape sizes, Shape strides, std::int64_t offset) {
  const TensorImpl& from = base.impl();
  auto impl = std::make_shared<TensorImpl>(from.version);  // a view shares its base's version counter
  impl->storage = from.storage;
  impl->sizes = std::move(sizes);
  impl->strides = std::move(strides);
  impl->offset = offset;
  impl->dtype = from.dtype;
  // A view of a view views the root (PyTorch's _base); see Note [In-place ops on views].
  impl->viewBase = from.viewBase ? from.viewBase : base.implPtr();
  impl->viewVersion = from.version->value.load(std::memory_order_relaxed);
  impl->viewCreatedInNoGrad = !isGradEnabled() || (from.viewBase && from.viewCreatedInNoGrad);
  return Tensor(std::move(impl));
}

Shape broadcastShapes(const Shape& a, const Shape& b) {
  const std::size_t n = std::max(a.size(), b.size());
  Shape out(n);
  for (std::size_t i = 0; i < n; ++i) {
    const std::int64_t da = i < n - a.size() ? 1 : a[i - (n - a.size())];
    const std::int64_t db = i < n - b.size() ? 1 : b[i - (n - b.size())];
    if (da != db && da != 1 && db != 1) {
      throw ValueError("The size of tensor a (" + std::to_string(da) + ") must match the size of tensor b (" +
                       std::to_string(db) + ") at non-singleton dimension " + std::to_string(i) + " (shapes " +
                       shapeStr(a) + " and " + shapeStr(b) + ")");
    }
    out[i] = da == 1 ? db : da;
  }
  return out;
}

}  // namespace detail

using detail::Grads;
using detail::Needs;

namespace {

// Resolves a single -1 in a requested shape against numel.
Shape inferShape(const Shape& requested, std::int64_t numel) {
  Shape shape = requested;
  std::int64_t known = 1;
  int inferred = -1;
  for (std::size_t i = 0; i < shape.size(); ++i) {
    if (shape[i] == -1) {
      if (inferred >= 0) throw ValueError("only one dimension can be inferred");
      inferred = static_cast<int>(i);
    } else if (shape[i] < 0) {
      throw ValueError("invalid shape dimension " + std::to_string(shape[i]));
    } else {
      known *= shape[i];
    }
  }
  if (inferred >= 0) {
    if (known == 0 || numel % known != 0)
      throw ValueError("shape '" + shapeStr(requested) + "' is invalid for input of size " + std::to_string(numel));
    shape[static_cast<std::size_t>(inferred)] = numel / known;
  } else if (known != numel) {
    throw ValueError("shape '" + shapeStr(requested) + "' is invalid for input of size " + std::to_string(numel));
  }
  return shape;
}

Tensor recordReshapeBack(Tensor out, const char* name, const Tensor& input) {
  Shape inShape = input.sizes();
  return autograd::record(out, name, {input}, [inShape](const Tensor& g, const Needs&) {
    return Grads{g.reshape(inShape)};
  });
}

}  // namespace

Tensor Tensor::view(const Shape& shape) const {
  Shape target = inferShape(shape, numel());
  if (!is_contiguous()) {
    throw Error("view size is not compatible with input tensor's size and stride (at least one dimension spans "
                "across two contiguous subspaces). Use .reshape(...) instead.");
  }
  Tensor out = detail::makeView(*this, target, contiguousStrides(target), storage_offset());
  return recordReshapeBack(out, "ViewBackward0", *this);
}

Tensor Tensor::reshape(const Shape& shape) const {
  if (is_contiguous()) return view(shape);
  return contiguous().view(shape);
}

Tensor Tensor::flatten(std::int64_t start, std::int64_t end) const {
  if (dim() == 0) return reshape({1});
  start = wrapDim(start, dim());
  end = wrapDim(end, dim());
  if (start > end) throw ValueError("flatten() has invalid args: start_dim cannot come after end_dim");
  Shape shape;
  for (std::int64_t i = 0; i < start; ++i) shape.push_back(size(i));
  std::int64_t prod = 1;
  for (std::int64_t i = start; i <= end; ++i) prod *= size(i);
  shape.push_back(prod);
  for (std::int64_t i = end + 1; i < dim(); ++i) shape.push_back(size(i));
  return reshape(shape);
}

Tensor Tensor::transpose(std::int64_t d0, std::int64_t d1) const {
  d0 = wrapDim(d0, dim());
  d1 = wrapDim(d1, dim());
  Shape sz = sizes(), st = strides();
  std::swap(sz[static_cast<std::size_t>(d0)], sz[static_cast<std::size_t>(d1)]);
  std::swap(st[static_cast<std::size_t>(d0)], st[static_cast<std::size_t>(d1)]);
  Tensor out = detail::makeView(*this, sz, st, storage_offset());
  return autograd::record(out, "TransposeBackward0", {*this}, [d0, d1](const Tensor& g, const Needs&) {
    return Grads{g.transpose(d0, d1)};
  });
}

Tensor Tensor::permute(const std::vector<std::int64_t>& dims) const {
  const std::int64_t n = dim();
  if (static_cast<std::int64_t>(dims.size()) != n) {
    throw Error("permute(sparse_coo): number of dimensions in the tensor input does not match the length of the desired ordering of "
                "dimensions i.e. input.dim() = " + std::to_string(n) + " is not equal to len(dims) = " + std::to_string(dims.size()));
  }
  std::vector<std::int64_t> order(dims.size()), inverse(dims.size(), -1);
  Shape sz(dims.size()), st(dims.size());
  for (std::int64_t i = 0; i < n; ++i) {
    const std::int64_t d = wrapDim(dims[static_cast<std::size_t>(i)], n);
    if (inverse[static_cast<std::size_t>(d)] >= 0) throw Error("permute(): duplicate dims are not allowed.");
    inverse[static_cast<std::size_t>(d)] = i;
    order[static_cast<std::size_t>(i)] = d;
    sz[static_cast<std::size_t>(i)] = size(d);
    st[static_cast<std::size_t>(i)] = strides()[static_cast<std::size_t>(d)];
  }
  Tensor out = detail::makeView(*this, sz, st, storage_offset());
  return autograd::record(out, "PermuteBackward0", {*this}, [inverse](const Tensor& g, const Needs&) { return Grads{g.permute(inverse)}; });
}

Tensor Tensor::slice(std::int64_t d, std::int64_t start, std::int64_t end, std::int64_t step) const {
  d = wrapDim(d, dim());
  if (step <= 0) throw ValueError("slice step must be positive");
  const std::int64_t n = size(d);
  auto clampIndex = [n](std::int64_t i) { return std::clamp(i < 0 ? i + n : i, std::int64_t{0}, n); };
  start = clampIndex(start);
  end = std::max(clampIndex(end), start);
  Shape sz = sizes(), st = strides();
  const auto ud = static_cast<std::size_t>(d);
  sz[ud] = (end - start + step - 1) / step;
  st[ud] *= step;
  Tensor out = detail::makeView(*this, sz, st, storage_offset() + start * strides()[ud]);
  Shape inShape = sizes();
  return autograd::record(out, "SliceBackward0", {*this}, [inShape, d, start, end, step](const Tensor& g, const Needs&) {
    Tensor gi = zeros(inShape, {.dtype = g.dtype(), .device = g.device()});
    gi.slice(d, start, end, step).copy_(g);
    return Grads{gi};
  });
}

Tensor Tensor::select(std::int64_t d, std::int64_t index) const {
  d = wrapDim(d, dim());
  const std::int64_t n = size(d);
  if (index < -n || index >= n) {
    throw IndexError("index " + std::to_string(index) + " is out of bounds for dimension " + std::to_string(d) +
                     " with size " + std::to_string(n));
  }
  if (index < 0) index += n;
  // one view and one node (SelectBackward0, as PyTorch names it), not a slice and a squeeze
  Shape sz = sizes(), st = strides();
  const auto ud = static_cast<std::size_t>(d);
  const std::int64_t offset = storage_offset() + index * st[ud];
  sz.erase(sz.begin() + d);
  st.erase(st.begin() + d);
  Tensor out = detail::makeView(*this, sz, st, offset);
  Shape inShape = sizes();
  return autograd::record(out, "SelectBackward0", {*this}, [inShape, d, index](const Tensor& g, const Needs&) {
    Tensor gi = zeros(inShape, {.dtype = g.dtype(), .device = g.device()});
    gi.select(d, index).copy_(g);
    return Grads{gi};
  });
}

Tensor Tensor::unsqueeze(std::int64_t d) const {
  d = wrapDim(d, dim() + 1);
  Shape sz = sizes(), st = strides();
  const auto ud = static_cast<std::size_t>(d);
  const std::int64_t stride = ud < st.size() ? st[ud] * sz[ud] : 1;
  sz.insert(sz.begin() + d, 1);
  st.insert(st.begin() + d, stride);
  return recordReshapeBack(detail::makeView(*this, sz, st, storage_offset()), "UnsqueezeBackward0", *this);
}

Tensor Tensor::squeeze(std::int64_t d) const {
  if (dim() == 0) return *this;
  d = wrapDim(d, dim());
  if (size(d) != 1) return *this;
  Shape sz = sizes(), st = strides();
  sz.erase(sz.begin() + d);
  st.erase(st.begin() + d);
  return recordReshapeBack(detail::makeView(*this, sz, st, storage_offset()), "SqueezeBackward1", *this);
}

namespace {
// PyTorch's check of a new tensor's element count (c10's safe_compute_numel): the sizes multiplied as
// unsigned 64-bit numbers must neither overflow nor pass INT64_MAX. A negative size that expand lets
// through (-2 where the tensor has a 1) is a huge unsigned number there, so it fails here, with
// PyTorch's words -- unless a zero size makes the product 0, which PyTorch lets through as well.
void checkNumel(const Shape& sizes) {
  std::uint64_t n = 1;
  bool overflows = false;
  for (const std::int64_t s : sizes) overflows |= __builtin_mul_overflow(n, static_cast<std::uint64_t>(s), &n);
  if (overflows || n > static_cast<std::uint64_t>(std::numeric_limits<std::int64_t>::max())) {
    throw Error("numel: integer multiplication overflow");
  }
}
}  // namespace

Tensor Tensor::expand(const Shape& shape) const {
  if (shape.size() < sizes().size()) {
    throw ValueError("expand(torch." + std::string(is_cuda() ? "cuda." : "") + scalarTypeName(dtype()) + "Tensor{" + shapeStr(sizes()) +
                     "}, size=" + shapeStr(shape) + "): the number of sizes provided (" + std::to_string(shape.size()) +
                     ") must be greater or equal to the number of dimensions in the tensor (" + std::to_string(dim()) + ")");
  }
  const std::size_t lead = shape.size() - sizes().size();
  Shape sz(shape.size()), st(shape.size());
  for (std::size_t i = 0; i < shape.size(); ++i) {
    if (i < lead) {
      // -1 keeps an existing dim's size; a new leading dim has none to keep.
      if (shape[i] == -1) {
        throw ValueError("The expanded size of the tensor (-1) isn't allowed in a leading, non-existing dimension " + std::to_string(i));
      }
      sz[i] = shape[i];
      st[i] = 0;
      continue;
    }
    const std::int64_t have = sizes()[i - lead];
    const std::int64_t want = shape[i] == -1 ? have : shape[i];
    if (have != want && have != 1) {
      throw ValueError("The expanded size of the tensor (" + std::to_string(want) + ") must match the existing size (" +
                       std::to_string(have) + ") at non-singleton dimension " + std::to_string(i) +
                       ".  Target sizes: " + shapeStr(shape) + ".  Tensor sizes: " + shapeStr(sizes()));
    }
    sz[i] = want;
    st[i] = have == want ? strides()[i - lead] : 0;
  }
  if (sz == sizes()) return *this;
  checkNumel(sz);
  Shape inShape = sizes();
  return autograd::record(detail::makeView(*this, sz, st, storage_offset()), "ExpandBackward0", {*this},
                          [inShape](const Tensor& g, const Needs&) { return Grads{sum_to_size(g, inShape)}; });
}

}  // namespace gpulab

namespace gpulab {

namespace {

// cat's and stack's shared checks: a non-empty list, one device (PyTorch's same-device rule), and the
// dtype the result takes (the inputs' promoted type).
DType joinedDType(const char* op, const std::vector<Tensor>& tensors) {
  if (tensors.empty()) throw ValueError(std::string(op) + "(): expected a non-empty list of Tensors");
  std::vector<DevicePlacement> placements;
  DType dtype = tensors[0].dtype();
  for (std::size_t i = 0; i < tensors.size(); ++i) {
    placements.push_back({"tensors[" + std::to_string(i) + "]", tensors[i].device()});
    dtype = promoteTypes(dtype, tensors[i].dtype());
  }
  if (auto msg = deviceMismatchMessage(op, placements)) throw DeviceMismatchError(*msg);
  return dtype;
}

}  // namespace

Tensor cat(const std::vector<Tensor>& tensors, std::int64_t dim) {
  const DType dtype = joinedDType("cat", tensors);
  const Tensor& first = tensors[0];
  if (first.dim() == 0) throw Error("zero-dimensional tensor (at position 0) cannot be concatenated");
  const std::int64_t d = wrapDim(dim, first.dim());
  Shape shape = first.sizes();
  shape[static_cast<std::size_t>(d)] = 0;
  std::vector<std::int64_t> starts;
  for (std::size_t i = 0; i < tensors.size(); ++i) {
    const Tensor& t = tensors[i];
    if (t.dim() != first.dim()) {
      throw Error("Tensors must have same number of dimensions: got " + std::to_string(first.dim()) + " and " + std::to_string(t.dim()));
    }
    for (std::int64_t j = 0; j < t.dim(); ++j) {
      if (j != d && t.size(j) != first.size(j)) {
        throw Error("Sizes of tensors must match except in dimension " + std::to_string(d) + ". Expected size " +
                    std::to_string(first.size(j)) + " but got size " + std::to_string(t.size(j)) + " for tensor number " +
                    std::to_string(i) + " in the list.");
      }
    }
    starts.push_back(shape[static_cast<std::size_t>(d)]);
    shape[static_cast<std::size_t>(d)] += t.size(d);
  }
  Tensor out = Tensor::empty(shape, dtype, first.device());
  {
    NoGradGuard noGrad;
    for (std::size_t i = 0; i < tensors.size(); ++i) {
      const Tensor& t = tensors[i];
      out.slice(d, starts[i], starts[i] + t.size(d)).copy_(t.dtype() == dtype ? t : t.to(dtype));
    }
  }
  std::vector<std::int64_t> lengths;
  for (const Tensor& t : tensors) lengths.push_back(t.size(d));
  return autograd::record(out, "CatBackward0", tensors, [d, starts, lengths](const Tensor& g, const Needs&) {
    Grads grads;
    for (std::size_t i = 0; i < starts.size(); ++i) grads.push_back(g.slice(d, starts[i], starts[i] + lengths[i]).contiguous());
    return grads;
  });
}

Tensor index_select(const Tensor& a, std::int64_t dim, const Tensor& index) {
  const profiler::RecordScope record("aten::index_select", {&a, &index});
  if (index.dtype() != kInt64) throw IndexError("index_select(): Expected dtype int64 for index");
  if (index.dim() > 1) throw IndexError("index_select(): Index is supposed to be a vector");
  checkSameDevice("index_select", {{"self", a}, {"index", index}});
  const std::int64_t d = wrapDim(dim, std::max<std::int64_t>(a.dim(), 1));
  const std::int64_t dimSize = a.dim() == 0 ? 1 : a.size(d);
  const Tensor idx = index.reshape({-1}).contiguous();
  // Every index inside the dim, checked here (on the host, one read of the extremes: a bad index
  // would read outside the tensor).
  if (idx.numel() > 0) {
    NoGradGuard noGrad;
    const std::vector<std::int64_t> range = stack({min(idx), max(idx)}).toVector<std::int64_t>();
    const std::int64_t low = range[0], high = range[1];
    if (low < 0 || high >= dimSize) {
      throw IndexError("index out of range in self (index " + std::to_string(low < 0 ? low : high) + " for dimension " +
                       std::to_string(d) + " of size " + std::to_string(dimSize) + ")");
    }
  }
  std::int64_t outer = 1, inner = 1;
  for (std::int64_t i = 0; i < a.dim(); ++i) {
    if (i < d) outer *= a.size(i);
    if (i > d) inner *= a.size(i);
  }
  Shape shape = a.sizes();
  if (a.dim() > 0) shape[static_cast<std::size_t>(d)] = idx.numel();
  Tensor out = Tensor::empty(shape, a.dtype(), a.device());
  const Tensor x = a.contiguous();
  detail::backendOf(x).indexSelect(out, x, idx, outer, dimSize, inner);
  if (!autograd::anyRequiresGrad({a})) return out;
  const Shape inShape = a.sizes();
  return autograd::record(out, "IndexSelectBackward0", {a}, [idx, inShape, outer, dimSize, inner](const Tensor& g, const Needs&) {
    // Summed in float32 for a 16-bit gradient: the GPU's atomic adds take float32 and float64.
    const DType accumulate = isReducedPrecision(g.dtype()) ? kFloat32 : g.dtype();
    Tensor grad = zeros(inShape, {.dtype = accumulate, .device = g.device()});
    detail::backendOf(grad).indexAdd(grad, g.to(accumulate).contiguous(), idx, outer, dimSize, inner);
    return Grads{grad.to(g.dtype())};
  });
}

Tensor stack(const std::vector<Tensor>& tensors, std::int64_t dim) {
  const DType dtype = joinedDType("stack", tensors);
  const Tensor& first = tensors[0];
  const std::int64_t d = wrapDim(dim, first.dim() + 1);
  for (std::size_t i = 1; i < tensors.size(); ++i) {
    if (tensors[i].sizes() != first.sizes()) {
      throw Error("stack expects each tensor to be equal size, but got " + shapeStr(first.sizes()) + " at entry 0 and " +
                  shapeStr(tensors[i].sizes()) + " at entry " + std::to_string(i));
    }
  }
  Shape shape = first.sizes();
  shape.insert(shape.begin() + d, static_cast<std::int64_t>(tensors.size()));
  Tensor out = Tensor::empty(shape, dtype, first.device());
  {
    NoGradGuard noGrad;
    for (std::size_t i = 0; i < tensors.size(); ++i) {
      const Tensor& t = tensors[i];
      out.select(d, static_cast<std::int64_t>(i)).copy_(t.dtype() == dtype ? t : t.to(dtype));
    }
  }
  const std::size_t count = tensors.size();
  return autograd::record(out, "StackBackward0", tensors, [d, count](const Tensor& g, const Needs&) {
    Grads grads;
    for (std::size_t i = 0; i < count; ++i) grads.push_back(g.select(d, static_cast<std::int64_t>(i)).contiguous());
    return grads;
  });
}

}  // namespace gpulab
