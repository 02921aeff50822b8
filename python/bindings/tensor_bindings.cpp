// torch.Tensor: the engine's Tensor as a Python class. Its properties and methods keep PyTorch's
// names and argument forms (x.sum(dim=1, keepdim=True), x.view(2, -1), x.to("cuda", non_blocking=True),
// x[1:, None]). Printing (repr), iteration and numpy() are written in Python (gpulab/_tensor.py).
#include <pybind11/operators.h>
#include <pybind11/stl.h>

#include <algorithm>
#include <cstdio>
#include <string>

#include "engine/autograd/grad.h"
#include "engine/autograd/grad_mode.h"
#include "engine/autograd/node.h"
#include "engine/core/errors.h"
#include "engine/core/generator.h"
#include "engine/ops/ops.h"
#include "engine/runtime/stream.h"
#include "python/bindings/bindings.h"

namespace gpulab::python {

namespace {

// The second operand of a binary operator: a tensor or a Python number (bool counts as a number).
using Operand = std::variant<Tensor, double>;
std::optional<Operand> operandOf(py::handle o) {
  if (py::isinstance<Tensor>(o)) return Operand(o.cast<Tensor>());
  if (isNumber(o)) return Operand(o.cast<double>());
  return std::nullopt;
}

// Python's binary-operator protocol: NotImplemented for a type it does not know, so that Python tries
// the other side and then raises its own TypeError ("unsupported operand type(s) for +"). `op` takes
// the tensor and the operand, a Tensor or a double.
template <class Op>
py::object binary(const Tensor& self, py::handle other, Op op) {
  const std::optional<Operand> operand = operandOf(other);
  if (!operand) return py::reinterpret_borrow<py::object>(Py_NotImplemented);
  Tensor out;
  {
    py::gil_scoped_release release;
    out = std::visit([&](const auto& o) { return op(self, o); }, *operand);
  }
  return py::cast(std::move(out));
}

// &, |, ^ and ~ are logical on bool tensors; a Python bool (or number) joins as a 0-dim bool tensor.
Tensor logicalOperand(const Tensor& self, const Tensor& other, const char* op) {
  if (self.dtype() != kBool || other.dtype() != kBool) {
    throw NotImplementedError(std::string("GPU Lab's torch has ") + op + " for bool tensors only (no bitwise ops on " +
                              dtypeName(self.dtype() != kBool ? self.dtype() : other.dtype()) + " yet)");
  }
  return other;
}
Tensor logicalOperand(const Tensor& self, double other, const char* op) {
  return logicalOperand(self, full({}, other, {.dtype = kBool, .device = self.device()}), op);
}

// An int a double holds exactly (|i| <= 2^53).
bool exactInDouble(std::int64_t i) { return i >= -(std::int64_t(1) << 53) && i <= (std::int64_t(1) << 53); }

// The second operand of // and % beside `self`, as PyTorch pairs them: a tensor; or a Python number,
// handed to the engine as a double where the engine's rule for a number (engine/ops/ops.h) gives
// PyTorch's dtype and value, else as a 0-dim tensor of PyTorch's dtype for it -- a float beside an
// integer tensor (int64 // 2.0 is float32; the engine would read 2.0 as an int), a bool beside a bool
// tensor (refused, as PyTorch refuses bool // bool), an int past 2^53 beside an int64 one (exact).
std::optional<Operand> divisionOperand(const Tensor& self, py::handle o) {
  if (py::isinstance<Tensor>(o)) return Operand(o.cast<Tensor>());
  if (!isNumber(o)) return std::nullopt;
  const Number n = *numberFrom(o);
  const bool integral = !isFloatingPoint(self.dtype());
  const bool asTensor = integral && (n.kind == Number::Float || (n.kind == Number::Bool && self.dtype() == kBool) ||
                                     (n.kind == Number::Int && !(n.exact && exactInDouble(n.i))));
  if (!asTensor) return Operand(n.value());
  return Operand(filled({}, n, {.dtype = dtypeOf(n), .device = self.device()}));
}

// x.fill_(v), x[i] = v: a number written into a tensor exactly and checked as PyTorch writes it (into
// int64, 2**53 + 1 stays itself and NaN raises), through a 0-dim tensor where a double would not do.
void fillWith(Tensor& target, const Number& n) {
  if (target.dtype() == kInt64 && !(n.kind != Number::Float && n.exact && exactInDouble(n.i))) {
    const Tensor value = filled({}, n, {.dtype = kInt64, .device = target.device()});
    py::gil_scoped_release release;
    target.copy_(value);
    return;
  }
  py::gil_scoped_release release;
  target.fill_(n.value());
}

// Python's // and % (and their reflected forms): as binary(), with the operand as divisionOperand
// makes it. `op` takes the tensor and the operand, a Tensor or a double.
template <class Op>
py::object division(const Tensor& self, py::handle other, Op op) {
  const std::optional<Operand> operand = divisionOperand(self, other);
  if (!operand) return py::reinterpret_borrow<py::object>(Py_NotImplemented);
  Tensor out;
  {
    py::gil_scoped_release release;
    out = std::visit([&](const auto& o) { return op(self, o); }, *operand);
  }
  return py::cast(std::move(out));
}

// x.sum(), x.sum(1), x.sum(dim=(0, 1), keepdim=True): a reduction over no dim (all), one dim or several.
template <class All, class OneDim>
Tensor reduce(const Tensor& self, py::object dim, bool keepdim, All all, OneDim oneDim) {
  if (dim.is_none()) return all(self);
  if (py::isinstance<py::int_>(dim)) return oneDim(self, dim.cast<std::int64_t>(), keepdim);
  std::vector<std::int64_t> dims;
  for (py::handle d : dim) dims.push_back(wrapDim(d.cast<std::int64_t>(), self.dim()));
  std::sort(dims.rbegin(), dims.rend());  // the highest first, so the lower dims keep their numbers
  Tensor out = self;
  for (std::int64_t d : dims) out = oneDim(out, d, keepdim);
  return out;
}

// sum and mean over several dims are one engine op (one node, SumBackward1 / MeanBackward1, as PyTorch's).
template <class All, class Dims>
Tensor reduceDims(const Tensor& self, py::object dim, bool keepdim, All all, Dims dims) {
  if (dim.is_none()) return all(self);
  if (py::isinstance<py::int_>(dim)) return dims(self, std::vector<std::int64_t>{dim.cast<std::int64_t>()}, keepdim);
  std::vector<std::int64_t> list;
  for (py::handle d : dim) list.push_back(d.cast<std::int64_t>());
  return dims(self, list, keepdim);
}

// Python's nested lists of a tensor's values (tolist()).
py::object nestedList(const Tensor& t) {
  const bool integral = !isFloatingPoint(t.dtype()), boolean = t.dtype() == kBool;
  std::vector<double> values;
  std::vector<std::int64_t> ints;
  {
    py::gil_scoped_release release;
    if (integral) ints = t.toVector<std::int64_t>();
    else values = t.toVector<double>();
  }
  auto value = [&](std::size_t i) -> py::object {
    if (boolean) return py::bool_(ints[i] != 0);
    return integral ? py::object(py::int_(ints[i])) : py::object(py::float_(values[i]));
  };
  if (t.dim() == 0) return value(0);
  std::size_t next = 0;
  std::function<py::list(std::size_t)> build = [&](std::size_t d) {
    py::list out;
    for (std::int64_t i = 0; i < t.sizes()[d]; ++i) {
      if (d + 1 == t.sizes().size()) out.append(value(next++));
      else out.append(build(d + 1));
    }
    return out;
  };
  return build(0);
}

// x[idx] with an int64 tensor of indices along `dim`: the selected slices in idx's order, one
// index_select (a gradient flows back to each). Negative indices count from the end, as Python's; a
// 0-d index selects, as an int does; a 1-d one keeps the dim.
Tensor gathered(const Tensor& self, std::int64_t dim, const Tensor& index) {
  if (index.dtype() != kInt64) throw IndexError("tensors used as indices must be long, int, byte or bool tensors");
  if (index.dim() > 1) throw NotImplementedError("GPU Lab's torch indexes with 0-d or 1-d tensors of indices only yet");
  py::gil_scoped_release release;
  const std::int64_t size = self.size(dim);
  std::vector<std::int64_t> positions = index.toVector<std::int64_t>();
  for (std::int64_t& p : positions) {
    if (p < -size || p >= size) {
      throw IndexError("index " + std::to_string(p) + " is out of bounds for dimension " + std::to_string(dim) + " with size " + std::to_string(size));
    }
    if (p < 0) p += size;
  }
  const Tensor wrapped = tensor(positions, {static_cast<std::int64_t>(positions.size())}).to(self.device());
  const Tensor out = index_select(self, dim, wrapped);
  return index.dim() == 0 ? out.squeeze(dim) : out;
}

// x[mask] with a bool mask over the dims from `dim` on: those dims become one, holding the elements
// (or slices) where the mask is true, in row-major order -- the positions come from nonzero, which
// waits for the device, as in PyTorch.
Tensor masked(const Tensor& self, std::int64_t dim, const Tensor& mask) {
  const std::int64_t k = std::max<std::int64_t>(mask.dim(), 1);
  for (std::int64_t d = 0; d < mask.dim(); ++d) {
    if (dim + d >= self.dim() || mask.size(d) != self.size(dim + d)) {
      throw IndexError("The shape of the mask " + shapeStr(mask.sizes()) + " at index " + std::to_string(d) +
                       " does not match the shape of the indexed tensor " + shapeStr(self.sizes()) + " at index " + std::to_string(dim + d));
    }
  }
  py::gil_scoped_release release;
  const Tensor flat = mask.dim() == 0 ? self.unsqueeze(dim) : self.flatten(dim, dim + k - 1);
  return index_select(flat, dim, nonzero(mask.reshape({-1})).reshape({-1}).to(self.device()));  // a CPU mask may index a CUDA tensor
}

// x[...]: ints select, slices slice, None adds a dim, ... stands for the dims not named, an int64
// tensor gathers, a bool tensor masks.
Tensor indexed(const Tensor& self, py::handle index) {
  std::vector<py::handle> items;
  if (py::isinstance<py::tuple>(index)) {
    for (py::handle item : index) items.push_back(item);
  } else {
    items.push_back(index);
  }
  std::int64_t named = 0;
  bool ellipsis = false;
  for (py::handle item : items) {
    if (item.is(py::ellipsis())) {
      if (ellipsis) throw py::index_error("an index can only have a single ellipsis ('...')");
      ellipsis = true;
    } else if (!item.is_none() && !py::isinstance<py::bool_>(item)) {
      ++named;
    }
  }
  if (named > self.dim()) throw py::index_error("too many indices for tensor of dimension " + std::to_string(self.dim()));
  // PyTorch pairs several index tensors up (x[i, j] takes x[i[k], j[k]]); one at a time here would
  // take every combination instead, a wrong result without a word.
  const auto advanced = std::count_if(items.begin(), items.end(), [](py::handle item) {
    return py::isinstance<Tensor>(item) || py::isinstance<py::list>(item);
  });
  if (advanced > 1) throw NotImplementedError("GPU Lab's torch indexes with one tensor (or list) of indices at a time yet, not x[i, j] with several");
  Tensor out = self;
  std::int64_t dim = 0;
  for (py::handle item : items) {
    if (item.is_none()) {
      out = out.unsqueeze(dim++);
    } else if (item.is(py::ellipsis())) {
      dim += self.dim() - named;
    } else if (py::isinstance<py::bool_>(item)) {
      // x[True] adds a dim of size 1 and x[False] one of size 0, as PyTorch's 0-d bool mask does.
      out = out.unsqueeze(dim);
      if (!item.cast<bool>()) out = out.slice(dim, 0, 0, 1);
      ++dim;
    } else if (py::isinstance<py::int_>(item)) {
      out = out.select(dim, item.cast<std::int64_t>());
    } else if (py::isinstance<py::slice>(item)) {
      Py_ssize_t start = 0, stop = 0, step = 0;
      if (PySlice_Unpack(item.ptr(), &start, &stop, &step) < 0) throw py::error_already_set();
      if (step <= 0) throw py::value_error("step must be greater than zero");
      const Py_ssize_t length = PySlice_AdjustIndices(static_cast<Py_ssize_t>(out.size(dim)), &start, &stop, step);
      out = out.slice(dim, start, start + length * step, step);
      ++dim;
    } else if (py::isinstance<Tensor>(item) && item.cast<const Tensor&>().dtype() == kBool) {
      out = masked(out, dim, item.cast<const Tensor&>());
      ++dim;
    } else if (py::isinstance<Tensor>(item)) {
      out = gathered(out, dim, item.cast<const Tensor&>());
      ++dim;
    } else if (py::isinstance<py::str>(item)) {
      // PyTorch reads any other sequence as a tensor of indices, and a str holds no numbers for one.
      throw py::type_error("new(): invalid data type 'str'");
    } else if (py::isinstance<py::list>(item)) {
      // x[[0, 2]]: the list as a tensor of indices, int64 whatever numbers it holds (x[[0.0, 1.9]] takes
      // 0 and 1, as PyTorch's indexing_tensor_from_data makes it), or a mask when it holds bools.
      Tensor index = tensorFromData(item, std::nullopt, std::nullopt, false);
      if (index.dtype() != kBool) index = tensorFromData(item, kInt64, std::nullopt, false);
      out = index.dtype() == kBool ? masked(out, dim, index) : gathered(out, dim, index);
      ++dim;
    } else if (PyIndex_Check(item.ptr())) {
      // Anything with __index__ is an int (numpy's integers: x[np.argmax(a)]).
      const py::object asInt = py::reinterpret_steal<py::object>(PyNumber_Index(item.ptr()));
      if (!asInt) throw py::error_already_set();
      out = out.select(dim, asInt.cast<std::int64_t>());
    } else {
      // A float, or anything else, is an IndexError in PyTorch, in these words.
      throw py::index_error("only integers, slices (`:`), ellipsis (`...`), None and long or byte Variables are valid indices (got " +
                            typeName(item) + ")");
    }
  }
  return out;
}

// x[..., idx, ...] = v with one tensor (or list) of indices along a dim, or a 1-d mask among other
// indices (x[:, mask] = v), PyTorch's index_put_: indexed() gathers a copy, and a write into that would
// change nothing, so this writes once per index through a basic-indexing view of `self` (the advanced
// item replaced by that index), element k of the value (broadcast to x[idx]'s shape) into the k-th
// view. False when `index` has no such item (a mask alone is where()'s, in __setitem__).
bool assignThroughIndices(Tensor& self, py::handle index, py::handle value) {
  std::vector<py::object> items;
  if (py::isinstance<py::tuple>(index)) {
    for (py::handle item : index) items.push_back(py::reinterpret_borrow<py::object>(item));
  } else {
    items.push_back(py::reinterpret_borrow<py::object>(index));
  }
  const auto at = std::find_if(items.begin(), items.end(), [](const py::object& item) {
    return py::isinstance<Tensor>(item) || py::isinstance<py::list>(item);
  });
  if (at == items.end()) return false;
  const Tensor target = indexed(self, index);  // checks the index (bounds, dtype, a mask's shape), and gives x[idx]'s shape
  Tensor positions = py::isinstance<Tensor>(*at) ? at->cast<Tensor>() : tensorFromData(*at, std::nullopt, std::nullopt, false);
  if (positions.dtype() == kBool) {
    // A mask along one dim selects the positions where it holds.
    if (positions.dim() != 1) throw NotImplementedError("GPU Lab's torch assigns through a mask of several dims only as the whole index (x[mask] = v) yet");
    py::gil_scoped_release release;
    positions = nonzero(positions).reshape({-1});
  } else if (!py::isinstance<Tensor>(*at)) {
    positions = tensorFromData(*at, kInt64, std::nullopt, false);
  }
  // Where the index's dim lands in x[idx]: after the dims the items before it leave.
  std::int64_t named = 0, resultDim = 0;
  for (const py::object& item : items) {
    if (!item.is_none() && !item.is(py::ellipsis()) && !py::isinstance<py::bool_>(item)) ++named;
  }
  for (auto it = items.begin(); it != at; ++it) {
    if (it->is(py::ellipsis())) resultDim += self.dim() - named;
    else if (it->is_none() || py::isinstance<py::slice>(*it) || py::isinstance<py::bool_>(*it) || py::isinstance<Tensor>(*it)) ++resultDim;
  }
  const std::vector<std::int64_t> ps = positions.reshape({-1}).toVector<std::int64_t>();
  Tensor source;
  std::optional<Number> number;
  if (isNumber(value)) {
    number = numberFrom(value);
  } else if (py::isinstance<Tensor>(value)) {
    const Tensor& v = value.cast<const Tensor&>();
    py::gil_scoped_release release;
    source = (v.dtype() == self.dtype() ? v : v.to(self.dtype())).expand(target.sizes());
  } else {
    throw py::type_error("can't assign a " + typeName(value) + " to a Tensor");
  }
  for (std::size_t k = 0; k < ps.size(); ++k) {
    *at = py::int_(ps[k]);
    Tensor view = indexed(self, py::tuple(py::cast(items)));
    if (number) {
      fillWith(view, *number);
    } else {
      py::gil_scoped_release release;
      view.copy_(positions.dim() == 0 ? source : source.select(resultDim, static_cast<std::int64_t>(k)));
    }
  }
  return true;
}

// x.to(...): to(device), to(dtype), to(device, dtype), to(other), with non_blocking= and copy=.
Tensor convertedTo(const Tensor& self, const py::args& args, const py::kwargs& kwargs) {
  std::optional<Device> device;
  std::optional<DType> dtype;
  bool nonBlocking = false, copy = false;
  auto take = [&](py::handle a) {
    if (py::isinstance<DType>(a)) dtype = a.cast<DType>();
    else if (py::isinstance<Tensor>(a)) {
      const Tensor& other = a.cast<const Tensor&>();
      device = other.device();
      dtype = other.dtype();
    } else if (a.is_none()) {
    } else device = deviceFrom(a);
  };
  std::size_t positional = 0;
  for (py::handle a : args) {
    if (py::isinstance<py::bool_>(a)) {
      (positional++ == 0 ? nonBlocking : copy) = a.cast<bool>();
      continue;
    }
    take(a);
  }
  for (auto [key, value] : kwargs) {
    const std::string k = key.cast<std::string>();
    if (k == "device" || k == "dtype" || k == "other") take(value);
    else if (k == "non_blocking") nonBlocking = value.cast<bool>();
    else if (k == "copy") copy = value.cast<bool>();
    else if (k == "memory_format") continue;
    else throw py::type_error("to() got an unexpected keyword argument '" + k + "'");
  }
  py::gil_scoped_release release;
  Tensor out = self;
  if (dtype && *dtype != out.dtype()) out = out.to(*dtype);
  if (device && *device != out.device()) out = out.to(*device, nonBlocking);
  if (copy && out.sameAs(self)) out = out.clone();
  return out;
}

std::vector<std::int64_t> intsFrom(const py::args& args, const char* function) { return shapeFrom(args, function); }

// PyTorch's in-place arithmetic (x.add_(y), x *= 2) as "compute, then copy into x": the engine's
// copy_ applies PyTorch's rules on leaves that require grad.
template <class Op>
Tensor& inPlace(Tensor& self, py::handle other, Op op) {
  const std::optional<Operand> operand = operandOf(other);
  if (!operand) throw py::type_error("expected a Tensor or a number, but got " + typeName(other));
  py::gil_scoped_release release;
  const Tensor result = std::visit([&](const auto& o) { return op(self, o); }, *operand);
  self.copy_(result.dtype() == self.dtype() ? result : result.to(self.dtype()));
  return self;
}

// x //= y, x %= y, x.floor_divide_(y), x.remainder_(y): computed, then written into x -- which must
// be able to hold the result's dtype, as PyTorch requires of in-place ops (an int64 tensor //= 2.5
// raises rather than truncating a float result).
template <class Op>
Tensor& inPlaceDivision(Tensor& self, py::handle other, Op op, const char* name) {
  const std::optional<Operand> operand = divisionOperand(self, other);
  if (!operand) throw py::type_error(std::string(name) + "(): argument 'other' (position 1) must be Tensor or Number, not " + typeName(other));
  py::gil_scoped_release release;
  const Tensor result = std::visit([&](const auto& o) { return op(self, o); }, *operand);
  if (categoryOf(result.dtype()) > categoryOf(self.dtype())) {
    throw Error("result type " + scalarTypeName(result.dtype()) + " can't be cast to the desired output type " + scalarTypeName(self.dtype()));
  }
  self.copy_(result.dtype() == self.dtype() ? result : result.to(self.dtype()));
  return self;
}

// torch.NAME(input, out=...) of a generated unary op: the result, or written into `out` as PyTorch
// writes it -- which must be of the result's shape (GPU Lab does not resize an out= tensor yet, and
// says so), able to hold its dtype, and not part of a graph (PyTorch's out= functions have no
// automatic differentiation).
std::string shapeText(const Shape& shape) {
  std::string text = "[";
  for (std::size_t i = 0; i < shape.size(); ++i) text += (i ? ", " : "") + std::to_string(shape[i]);
  return text + "]";
}

template <class Op>
py::object unaryResult(const char* name, Op op, const Tensor& input, py::object out) {
  if (out.is_none()) {
    Tensor result;
    {
      py::gil_scoped_release release;
      result = op(input);
    }
    return py::cast(std::move(result));
  }
  if (!py::isinstance<Tensor>(out)) throw py::type_error(std::string(name) + "(): argument 'out' must be Tensor, not " + typeName(out));
  Tensor target = out.cast<Tensor>();
  {
    py::gil_scoped_release release;
    if (isGradEnabled() && (input.requires_grad() || target.requires_grad())) {
      throw Error(std::string(name) + "(): functions with out=... arguments don't support automatic differentiation, but one of the "
                  "arguments requires grad.");
    }
    const Tensor result = op(input);
    if (target.sizes() != result.sizes()) {
      throw NotImplementedError(std::string("torch.") + name + "(out=...): GPU Lab's torch does not resize an out= tensor yet: give one of "
                                "the result's shape " + shapeText(result.sizes()) + ", not " + shapeText(target.sizes()));
    }
    if (categoryOf(result.dtype()) > categoryOf(target.dtype())) {
      throw Error("result type " + scalarTypeName(result.dtype()) + " can't be cast to the desired output type " + scalarTypeName(target.dtype()));
    }
    target.copy_(result.dtype() == target.dtype() ? result : result.to(target.dtype()));
  }
  return out;  // the very object given, as PyTorch returns it
}

// torch.exp, torch.exp_, Tensor.exp, Tensor.exp_ and the rest of native_ops.toml's unary ops.
#include "gpulab/ops/unary_bindings.inc"

}  // namespace

void bindTensor(py::module_& m) {
  py::class_<autograd::Node, std::shared_ptr<autograd::Node>>(m, "Node")
      .def("name", &autograd::Node::name)
      // As PyTorch prints a node: <MulBackward0 object at 0x7f...>, the address being the node's.
      .def("__repr__", [](const autograd::Node& n) {
        char address[2 + 2 * sizeof(void*) + 1];
        std::snprintf(address, sizeof(address), "%#lx", static_cast<unsigned long>(reinterpret_cast<std::uintptr_t>(&n)));
        return "<" + n.name() + " object at " + address + ">";
      })
      // The graph one step back: (node, output index) per input, None where that input needs no gradient
      // (a leaf's node is its AccumulateGrad), as PyTorch's grad_fn.next_functions.
      .def_property_readonly("next_functions", [](const autograd::Node& n) {
        py::tuple edges(n.next.size());
        for (std::size_t i = 0; i < n.next.size(); ++i) {
          edges[i] = py::make_tuple(n.next[i] ? py::cast(n.next[i]) : py::none(), 0);
        }
        return edges;
      });

  py::class_<Tensor> t(m, "Tensor");
  // Tensor(t) shares t's memory as a new tensor (how nn.Parameter(t) is made).
  t.def(py::init([](const Tensor& other) { return other.detach(); }))
      .def(py::init([]() { return Tensor::empty({0}); }));

  // Properties.
  t.def_property_readonly("shape", [](const Tensor& self) { return sizeObject(self.sizes()); })
      .def("size", [](const Tensor& self, py::object dim) -> py::object {
        if (dim.is_none()) return sizeObject(self.sizes());
        return py::int_(self.size(dim.cast<std::int64_t>()));
      }, py::arg("dim") = py::none())
      .def("dim", &Tensor::dim)
      .def("ndimension", &Tensor::dim)
      .def_property_readonly("ndim", &Tensor::dim)
      .def("numel", &Tensor::numel)
      .def("nelement", &Tensor::numel)
      .def("element_size", [](const Tensor& self) { return elementSize(self.dtype()); })
      .def_property_readonly("itemsize", [](const Tensor& self) { return elementSize(self.dtype()); })
      .def_property_readonly("nbytes", [](const Tensor& self) { return self.numel() * static_cast<std::int64_t>(elementSize(self.dtype())); })
      .def_property_readonly("dtype", [](const Tensor& self) { return dtypeObject(self.dtype()); })
      .def_property_readonly("device", [](const Tensor& self) { return deviceObject(self.device()); })
      .def_property_readonly("is_cuda", &Tensor::is_cuda)
      .def_property_readonly("is_leaf", &Tensor::is_leaf)
      .def_property_readonly("grad_fn", [](const Tensor& self) { return self.grad_fn(); })
      .def("is_pinned", &Tensor::is_pinned)
      .def("is_contiguous", [](const Tensor& self, py::kwargs) { return self.is_contiguous(); })
      .def("is_floating_point", [](const Tensor& self) { return isFloatingPoint(self.dtype()); })
      .def("stride", [](const Tensor& self, py::object dim) -> py::object {
        if (dim.is_none()) return py::tuple(py::cast(self.strides()));
        return py::int_(self.strides()[static_cast<std::size_t>(wrapDim(dim.cast<std::int64_t>(), self.dim()))]);
      }, py::arg("dim") = py::none())
      .def("storage_offset", &Tensor::storage_offset)
      .def("data_ptr", [](const Tensor& self) { return reinterpret_cast<std::uintptr_t>(self.data_ptr()); })
      .def("_is_same", [](const Tensor& self, const Tensor& other) { return self.sameAs(other); });

  // The engine's backward walk for torch.autograd.backward (several roots, one walk) and
  // torch.autograd.grad, with retain_graph (python/gpulab/autograd). An undefined gradient is ones for
  // a one-element root.
  m.def("_run_backward", [](const std::vector<Tensor>& tensors, const std::vector<std::optional<Tensor>>& grads, bool retainGraph) {
    std::vector<Tensor> weights;
    for (const auto& g : grads) weights.push_back(g.value_or(Tensor()));
    py::gil_scoped_release release;
    autograd::backward(tensors, weights, retainGraph);
  }, py::arg("tensors"), py::arg("grad_tensors"), py::arg("retain_graph"));
  m.def("_run_grad", [](const std::vector<Tensor>& outputs, const std::vector<std::optional<Tensor>>& gradOutputs,
                        const std::vector<Tensor>& inputs, bool allowUnused, bool retainGraph) {
    std::vector<Tensor> weights;
    for (const auto& g : gradOutputs) weights.push_back(g.value_or(Tensor()));
    std::vector<Tensor> grads;
    {
      py::gil_scoped_release release;
      grads = autograd::grad(outputs, weights, inputs, allowUnused, retainGraph);
    }
    py::list out;
    for (const Tensor& g : grads) out.append(g.defined() ? py::cast(g) : py::none());
    return out;
  }, py::arg("outputs"), py::arg("grad_outputs"), py::arg("inputs"), py::arg("allow_unused"), py::arg("retain_graph"));

  // Autograd.
  t.def_property("requires_grad", &Tensor::requires_grad, [](Tensor& self, bool on) { self.requires_grad_(on); })
      .def("requires_grad_", [](Tensor& self, bool on) -> Tensor& { return self.requires_grad_(on); }, py::arg("requires_grad") = true,
           py::return_value_policy::reference_internal)
      .def_property("grad", [](const Tensor& self) -> py::object {
        const Tensor g = self.grad();
        return g.defined() ? py::cast(g) : py::none();
      }, [](Tensor& self, py::object grad) { self.set_grad(grad.is_none() ? Tensor() : grad.cast<Tensor>()); })
      .def("backward", [](const Tensor& self, py::object gradient, py::object retainGraph, bool createGraph) {
        if (createGraph) throw NotImplementedError("GPU Lab's torch has no backward(create_graph=True) (higher-order gradients) yet");
        const bool retain = retainGraph.is_none() ? createGraph : py::bool_(retainGraph).cast<bool>();  // None: create_graph, as PyTorch
        const Tensor g = gradient.is_none() ? Tensor() : gradient.cast<Tensor>();
        py::gil_scoped_release release;
        self.backward(g, retain);
      }, py::arg("gradient") = py::none(), py::arg("retain_graph") = py::none(), py::arg("create_graph") = false)
      .def("detach", &Tensor::detach)
      // Views and versions: x._base is the tensor x views (None when x is no view), x._version counts
      // the in-place writes into x's memory (autograd's saved-tensor check).
      .def_property_readonly("_base", [](const Tensor& self) -> py::object {
        const Tensor base = self._base();
        return base.defined() ? py::cast(base) : py::none();
      })
      .def("_is_view", &Tensor::is_view)
      .def_property_readonly("_version", &Tensor::_version)
      // x.data: the same memory without history, and with a version counter of its own (in-place
      // writes through it escape autograd's checks, as in PyTorch); x.data = y points x at y's memory
      // (how module.to() moves a parameter and keeps the Parameter object).
      .def_property("data", &Tensor::variable_data, [](Tensor& self, const Tensor& other) {
        TensorImpl& impl = self.impl();
        const TensorImpl& src = other.impl();
        impl.storage = src.storage;
        impl.sizes = src.sizes;
        impl.strides = src.strides;
        impl.offset = src.offset;
        impl.dtype = src.dtype;
        impl.viewBase.reset();  // x now holds y's memory: no view of what it viewed before
      });

  // Devices and dtypes.
  t.def("to", &convertedTo)
      .def("cuda", [](const Tensor& self, py::object device, bool nonBlocking) {
        const Device d = device.is_none() ? Device(DeviceType::CUDA, -1) : deviceFrom(device);
        py::gil_scoped_release release;
        return d.index() < 0 ? (self.is_cuda() ? self : self.cuda()) : self.to(d, nonBlocking);
      }, py::arg("device") = py::none(), py::arg("non_blocking") = false)
      .def("cpu", &Tensor::cpu, NoGil())
      .def("float", [](const Tensor& self) { return self.to(kFloat32); }, NoGil())
      .def("double", [](const Tensor& self) { return self.to(kFloat64); }, NoGil())
      .def("half", &Tensor::half, NoGil())
      .def("bfloat16", &Tensor::bfloat16, NoGil())
      .def("long", [](const Tensor& self) { return self.to(kInt64); }, NoGil())
      .def("bool", [](const Tensor& self) { return self.to(kBool); }, NoGil())
      .def("pin_memory", &Tensor::pin_memory, NoGil())
      .def("record_stream", &Tensor::record_stream)
      .def("contiguous", [](const Tensor& self, py::kwargs) { return self.contiguous(); })
      .def("clone", [](const Tensor& self, py::kwargs) { return self.clone(); })
      .def("item", [](const Tensor& self) -> py::object {
        // An integer tensor's value with all its 64 bits (through a double, 2**53 + 1 would round).
        if (!isFloatingPoint(self.dtype()) && self.numel() == 1) {
          std::int64_t v;
          {
            py::gil_scoped_release release;
            v = self.toVector<std::int64_t>()[0];
          }
          if (self.dtype() == kBool) return py::bool_(v != 0);
          return py::int_(v);
        }
        double v;
        {
          py::gil_scoped_release release;
          v = self.item();  // throws PyTorch's error for a tensor of several elements
        }
        if (!isFloatingPoint(self.dtype())) return py::int_(static_cast<long long>(v));
        return py::float_(v);
      })
      .def("tolist", &nestedList);

  // Shapes and views.
  t.def("view", [](const Tensor& self, py::args shape) {
         if (shape.size() == 1 && py::isinstance<DType>(shape[0])) throw NotImplementedError("GPU Lab's torch has no Tensor.view(dtype) yet");
         return self.view(shapeFrom(shape, "view"));
       })
      .def("view_as", [](const Tensor& self, const Tensor& other) { return self.view(other.sizes()); })
      .def("reshape", [](const Tensor& self, py::args shape) { return self.reshape(shapeFrom(shape, "reshape")); })
      .def("reshape_as", [](const Tensor& self, const Tensor& other) { return self.reshape(other.sizes()); })
      .def("permute", [](const Tensor& self, py::args dims) { return self.permute(intsFrom(dims, "permute")); })
      .def("transpose", &Tensor::transpose)
      .def("t", [](const Tensor& self) {
        if (self.dim() > 2) throw Error("t() expects a tensor with <= 2 dimensions, but self is " + std::to_string(self.dim()) + "D");
        return self.dim() < 2 ? self : self.t();
      })
      .def_property_readonly("T", [](const Tensor& self) {
        std::vector<std::int64_t> dims(static_cast<std::size_t>(self.dim()));
        for (std::size_t i = 0; i < dims.size(); ++i) dims[i] = static_cast<std::int64_t>(dims.size() - 1 - i);
        return self.permute(dims);
      })
      .def("flatten", &Tensor::flatten, py::arg("start_dim") = 0, py::arg("end_dim") = -1)
      .def("squeeze", [](const Tensor& self, py::object dim) {
        if (!dim.is_none()) return self.squeeze(dim.cast<std::int64_t>());
        Tensor out = self;
        for (std::int64_t d = self.dim() - 1; d >= 0; --d) out = out.squeeze(d);
        return out;
      }, py::arg("dim") = py::none())
      .def("unsqueeze", &Tensor::unsqueeze, py::arg("dim"))
      .def("select", &Tensor::select, py::arg("dim"), py::arg("index"))
      .def("expand", [](const Tensor& self, py::args sizes) { return self.expand(shapeFrom(sizes, "expand")); })
      .def("expand_as", [](const Tensor& self, const Tensor& other) { return self.expand(other.sizes()); })
      .def("__getitem__", &indexed)
      .def("__setitem__", [](Tensor& self, py::handle index, py::handle value) {
        // PyTorch 2 unpacks an int value as an int64 first, whatever the tensor's dtype.
        if (py::isinstance<py::int_>(value) && !numberFrom(value)->exact) throw py::value_error("Overflow when unpacking long long");
        if (py::isinstance<Tensor>(index) && index.cast<const Tensor&>().dtype() == kBool) {
          // x[mask] = v: v where the mask holds (the mask's dims lead; the rest broadcast).
          Tensor mask = index.cast<Tensor>();
          Shape shape = mask.sizes();
          shape.resize(static_cast<std::size_t>(std::max(self.dim(), mask.dim())), 1);
          Tensor filler;
          if (isNumber(value)) filler = filled({}, *numberFrom(value), {.dtype = self.dtype(), .device = self.device()});
          else if (py::isinstance<Tensor>(value) && value.cast<const Tensor&>().numel() == 1) filler = value.cast<Tensor>().reshape({});
          else throw NotImplementedError("GPU Lab's torch assigns a number or a one-element tensor through a bool mask (x[mask] = v), not several values yet");
          py::gil_scoped_release release;
          self.copy_(where(mask.reshape(shape), filler.to(self.dtype()), self));
          return;
        }
        if (assignThroughIndices(self, index, value)) return;
        Tensor target = indexed(self, index);
        if (isNumber(value)) {
          fillWith(target, *numberFrom(value));
        } else if (py::isinstance<Tensor>(value)) {
          const Tensor& src = value.cast<const Tensor&>();
          py::gil_scoped_release release;
          target.copy_(src.dtype() == target.dtype() ? src : src.to(target.dtype()));
        } else {
          throw py::type_error("can't assign a " + typeName(value) + " to a Tensor");
        }
      });

  // Reductions.
  t.def("sum", [](const Tensor& self, py::object dim, bool keepdim) {
         return reduceDims(self, dim, keepdim, [](const Tensor& a) { return sum(a); },
                           [](const Tensor& a, const std::vector<std::int64_t>& d, bool k) { return sum(a, d, k); });
       }, py::arg("dim") = py::none(), py::arg("keepdim") = false)
      .def("mean", [](const Tensor& self, py::object dim, bool keepdim) {
        return reduceDims(self, dim, keepdim, [](const Tensor& a) { return mean(a); },
                          [](const Tensor& a, const std::vector<std::int64_t>& d, bool k) { return mean(a, d, k); });
      }, py::arg("dim") = py::none(), py::arg("keepdim") = false)
      .def("argmax", [](const Tensor& self, py::object dim, bool keepdim) {
        return dim.is_none() ? argmax(self) : argmax(self, dim.cast<std::int64_t>(), keepdim);
      }, py::arg("dim") = py::none(), py::arg("keepdim") = false)
      .def("argmin", [](const Tensor& self, py::object dim, bool keepdim) {
        return dim.is_none() ? argmin(self) : argmin(self, dim.cast<std::int64_t>(), keepdim);
      }, py::arg("dim") = py::none(), py::arg("keepdim") = false)
      .def("any", [](const Tensor& self, py::object dim, bool keepdim) {
        return reduce(self, dim, keepdim, [](const Tensor& a) { return any(a); }, [](const Tensor& a, std::int64_t d, bool k) { return any(a, d, k); });
      }, py::arg("dim") = py::none(), py::arg("keepdim") = false)
      .def("all", [](const Tensor& self, py::object dim, bool keepdim) {
        return reduce(self, dim, keepdim, [](const Tensor& a) { return all(a); }, [](const Tensor& a, std::int64_t d, bool k) { return all(a, d, k); });
      }, py::arg("dim") = py::none(), py::arg("keepdim") = false)
      .def("nonzero", [](const Tensor& self, bool asTuple) -> py::object {
        Tensor indices;
        {
          py::gil_scoped_release release;
          indices = nonzero(self);
        }
        if (!asTuple) return py::cast(indices);
        py::tuple columns(static_cast<std::size_t>(std::max<std::int64_t>(self.dim(), 1)));
        for (std::size_t d = 0; d < columns.size(); ++d) {
          columns[d] = py::cast(self.dim() == 0 ? indices.reshape({-1}) : indices.select(1, static_cast<std::int64_t>(d)));
        }
        return columns;
      }, py::kw_only(), py::arg("as_tuple") = false);

  // Elementwise math.
  t.def("neg", [](const Tensor& self) { return -self; }, NoGil())
      .def("pow", [](const Tensor& self, double e) { return self.pow(e); }, py::arg("exponent"), NoGil())
      .def("pow", [](const Tensor& self, const Tensor& e) { return pow(self, e); }, py::arg("exponent"), NoGil())
      .def("softmax", &Tensor::softmax, py::arg("dim"), NoGil())
      .def("log_softmax", &Tensor::log_softmax, py::arg("dim"), NoGil())
      .def("matmul", &Tensor::matmul, NoGil())
      .def("mm", &mmOf, NoGil())
      .def("maximum", [](const Tensor& a, const Tensor& b) { return maximum(a, b); }, NoGil())
      .def("minimum", [](const Tensor& a, const Tensor& b) { return minimum(a, b); }, NoGil())
      .def("index_select", [](const Tensor& self, std::int64_t dim, const Tensor& index) { return index_select(self, dim, index); },
           py::arg("dim"), py::arg("index"), NoGil())
      .def("masked_fill", [](const Tensor& self, const Tensor& mask, double value) { return masked_fill(self, mask, value); },
           py::arg("mask"), py::arg("value"), NoGil())
      .def("where", [](py::handle self, const Tensor& condition, py::handle other) { return whereOf(condition, self, other); },
           py::arg("condition"), py::arg("other"))
      .def("logical_not", [](const Tensor& self) { return logical_not(self); }, NoGil())
      .def("logical_and", [](const Tensor& a, const Tensor& b) { return logical_and(a, b); }, NoGil())
      .def("logical_or", [](const Tensor& a, const Tensor& b) { return logical_or(a, b); }, NoGil())
      .def("logical_xor", [](const Tensor& a, const Tensor& b) { return logical_xor(a, b); }, NoGil());
  for (const char* name : {"clamp", "clip"}) {
    t.def(name, [](const Tensor& self, std::optional<double> min, std::optional<double> max) { return clamp(self, min, max); },
          py::arg("min") = py::none(), py::arg("max") = py::none(), NoGil());
  }
  t.def("clamp_min", [](const Tensor& self, double min) { return clamp(self, min, std::nullopt); }, NoGil())
      .def("clamp_max", [](const Tensor& self, double max) { return clamp(self, std::nullopt, max); }, NoGil());

  // Operators: a tensor with a tensor or a Python number; NotImplemented for anything else. Each
  // operation serves the operator, its reflected and in-place forms and the named method.
  auto plus = [](const Tensor& x, const auto& y) { return x + y; };
  auto minus = [](const Tensor& x, const auto& y) { return x - y; };
  auto times = [](const Tensor& x, const auto& y) { return x * y; };
  auto over = [](const Tensor& x, const auto& y) { return x / y; };
  auto minusFrom = [](const Tensor& x, const auto& y) { return y - x; };
  auto into = [](const Tensor& x, const auto& y) { return y / x; };
  auto def = [&](const char* name, auto op) { t.def(name, [op](const Tensor& a, py::handle b) { return binary(a, b, op); }); };
  for (const char* name : {"__add__", "__radd__", "add"}) def(name, plus);
  for (const char* name : {"__sub__", "sub"}) def(name, minus);
  def("__rsub__", minusFrom);
  for (const char* name : {"__mul__", "__rmul__", "mul"}) def(name, times);
  for (const char* name : {"__truediv__", "div"}) def(name, over);
  def("__rtruediv__", into);
  // Python's // and %: floor division and the remainder with the divisor's sign, for tensors and
  // numbers on either side (2 // x, x % y); remainder has a gradient, floor_divide none (PyTorch's).
  auto floorDivided = [](const Tensor& x, const auto& y) { return floor_divide(x, y); };
  auto modulo = [](const Tensor& x, const auto& y) { return remainder(x, y); };
  auto floorDividing = [](const Tensor& x, const auto& y) { return floor_divide(y, x); };  // y // x
  auto moduloOf = [](const Tensor& x, const auto& y) { return remainder(y, x); };         // y % x
  auto defDivision = [&](const char* name, auto op) {
    t.def(name, [op](const Tensor& a, py::handle b) { return division(a, b, op); });
  };
  defDivision("__floordiv__", floorDivided);
  defDivision("__rfloordiv__", floorDividing);
  defDivision("__mod__", modulo);
  defDivision("__rmod__", moduloOf);
  // The named methods raise for what is neither a tensor nor a number, as PyTorch's do.
  auto defNamedDivision = [&](const char* name, auto op) {
    t.def(name, [op, name](const Tensor& a, py::handle b) {
      py::object out = division(a, b, op);
      if (out.is(py::handle(Py_NotImplemented))) {
        throw py::type_error(std::string(name) + "(): argument 'other' (position 1) must be Tensor or Number, not " + typeName(b));
      }
      return out;
    }, py::arg("other"));
  };
  defNamedDivision("floor_divide", floorDivided);
  defNamedDivision("remainder", modulo);
  // Comparisons give bool tensors; Python reflects them itself (3 < x is x > 3).
  for (const char* name : {"__eq__", "eq"}) def(name, [](const Tensor& x, const auto& y) { return eq(x, y); });
  for (const char* name : {"__ne__", "ne"}) def(name, [](const Tensor& x, const auto& y) { return ne(x, y); });
  for (const char* name : {"__lt__", "lt"}) def(name, [](const Tensor& x, const auto& y) { return lt(x, y); });
  for (const char* name : {"__le__", "le"}) def(name, [](const Tensor& x, const auto& y) { return le(x, y); });
  for (const char* name : {"__gt__", "gt"}) def(name, [](const Tensor& x, const auto& y) { return gt(x, y); });
  for (const char* name : {"__ge__", "ge"}) def(name, [](const Tensor& x, const auto& y) { return ge(x, y); });
  auto both = [](const Tensor& x, const auto& y) { return logical_and(x, logicalOperand(x, y, "&")); };
  auto either = [](const Tensor& x, const auto& y) { return logical_or(x, logicalOperand(x, y, "|")); };
  auto oneOf = [](const Tensor& x, const auto& y) { return logical_xor(x, logicalOperand(x, y, "^")); };
  for (const char* name : {"__and__", "__rand__"}) def(name, both);
  for (const char* name : {"__or__", "__ror__"}) def(name, either);
  for (const char* name : {"__xor__", "__rxor__"}) def(name, oneOf);
  t.def("__invert__", [](const Tensor& x) {
    if (x.dtype() != kBool) throw NotImplementedError("GPU Lab's torch has ~ for bool tensors only (no bitwise not on " + dtypeName(x.dtype()) + " yet)");
    return logical_not(x);
  }, NoGil());
  t      .def("__matmul__", [](const Tensor& a, py::handle b) -> py::object {
        if (!py::isinstance<Tensor>(b)) return py::reinterpret_borrow<py::object>(Py_NotImplemented);
        const Tensor& other = b.cast<const Tensor&>();
        py::gil_scoped_release release;
        Tensor out = a.matmul(other);
        py::gil_scoped_acquire acquire;
        return py::cast(std::move(out));
      })
      .def("__pow__", [](const Tensor& a, py::handle e) -> py::object {
        if (py::isinstance<Tensor>(e)) return py::cast(pow(a, e.cast<const Tensor&>()));
        if (!isNumber(e)) return py::reinterpret_borrow<py::object>(Py_NotImplemented);
        return py::cast(a.pow(e.cast<double>()));
      })
      // 2 ** x: the number as a 0-dim tensor of x's kind (an int base with a float x computes in x's dtype).
      .def("__rpow__", [](const Tensor& a, py::handle base) -> py::object {
        if (!isNumber(base)) return py::reinterpret_borrow<py::object>(Py_NotImplemented);
        const DType dtype = isFloatingPoint(a.dtype()) ? a.dtype() : py::isinstance<py::float_>(base) ? kFloat32 : kInt64;
        return py::cast(pow(full({}, base.cast<double>(), {.dtype = dtype, .device = kCPU}), a));
      })
      .def("__neg__", [](const Tensor& a) { return -a; }, NoGil())
      .def("__pos__", [](const Tensor& a) { return a; })
      .def("__abs__", &Tensor::abs, NoGil())
      // Tensors are compared by value, so they are not hashed by value: PyTorch hashes them by identity.
      .def("__hash__", [](const Tensor& self) { return reinterpret_cast<std::uintptr_t>(self.implPtr().get()); });

  // In place: the same operations.
  const auto ref = py::return_value_policy::reference_internal;
  auto defInPlace = [&](const char* name, auto op) {
    t.def(name, [op](Tensor& a, py::handle b) -> Tensor& { return inPlace(a, b, op); }, ref);
  };
  for (const char* name : {"add_", "__iadd__"}) defInPlace(name, plus);
  for (const char* name : {"sub_", "__isub__"}) defInPlace(name, minus);
  for (const char* name : {"mul_", "__imul__"}) defInPlace(name, times);
  for (const char* name : {"div_", "__itruediv__"}) defInPlace(name, over);
  defInPlace("__iand__", both);
  defInPlace("__ior__", either);
  defInPlace("__ixor__", oneOf);
  for (const char* name : {"floor_divide_", "__ifloordiv__"}) {
    t.def(name, [floorDivided, name](Tensor& a, py::handle b) -> Tensor& { return inPlaceDivision(a, b, floorDivided, name); }, ref);
  }
  for (const char* name : {"remainder_", "__imod__"}) {
    t.def(name, [modulo, name](Tensor& a, py::handle b) -> Tensor& { return inPlaceDivision(a, b, modulo, name); }, ref);
  }
  t.def("masked_fill_", [](Tensor& self, const Tensor& mask, double value) -> Tensor& {
     return self.copy_(masked_fill(self, mask, value));
   }, py::arg("mask"), py::arg("value"), ref, NoGil())
      .def("clamp_", [](Tensor& self, std::optional<double> min, std::optional<double> max) -> Tensor& {
        return self.copy_(clamp(self, min, max));
      }, py::arg("min") = py::none(), py::arg("max") = py::none(), ref, NoGil());
  t.def("zero_", &Tensor::zero_, ref, NoGil())
      .def("fill_", [](Tensor& self, py::handle value) -> Tensor& {
        const std::optional<Number> n = numberFrom(value);
        if (!n) throw py::type_error("fill_(): argument 'value' (position 1) must be Number, not " + typeName(value));
        fillWith(self, *n);
        return self;
      }, py::arg("value"), ref)
      .def("copy_", [](Tensor& self, const Tensor& src, bool) -> Tensor& {
        py::gil_scoped_release release;
        return self.copy_(src.dtype() == self.dtype() ? src : src.to(self.dtype()));
      }, py::arg("src"), py::arg("non_blocking") = false, ref)
      .def("normal_", [](Tensor& self, double mean, double std) -> Tensor& {
        py::gil_scoped_release release;
        Tensor r = randn(self.sizes(), defaultGenerator(), {.dtype = isFloatingPoint(self.dtype()) ? self.dtype() : kFloat32, .device = self.device()});
        return self.copy_(r * std + mean);
      }, py::arg("mean") = 0.0, py::arg("std") = 1.0, ref)
      .def("uniform_", [](Tensor& self, double from, double to) -> Tensor& {
        py::gil_scoped_release release;
        Tensor r = rand(self.sizes(), defaultGenerator(), {.dtype = isFloatingPoint(self.dtype()) ? self.dtype() : kFloat32, .device = self.device()});
        return self.copy_(r * (to - from) + from);
      }, py::arg("from") = 0.0, py::arg("to") = 1.0, ref);
  bindUnaryOps(m, t);
}

}  // namespace gpulab::python
