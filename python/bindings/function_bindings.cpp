// torch.* functions over the engine: tensor creation (with PyTorch's size, dtype=, device=,
// requires_grad= forms), math, and the ops behind torch.nn.functional.
#include <pybind11/stl.h>

#include <cmath>
#include <string>

#include "engine/autograd/checkpoint.h"
#include "engine/autograd/grad.h"
#include "engine/autograd/node.h"
#include "engine/core/errors.h"
#include "engine/core/generator.h"
#include "engine/core/parallel.h"
#include "engine/core/version.h"
#include "engine/ops/ops.h"
#include "python/bindings/bindings.h"

namespace gpulab::python {

namespace {

// The keyword arguments every factory takes: dtype=, device=, requires_grad=, pin_memory= (and
// layout=/out=, which only have one meaning here).
struct FactoryOptions {
  std::optional<DType> dtype;
  std::optional<Device> device;
  bool requiresGrad = false;
  bool pinMemory = false;
};

FactoryOptions factoryOptions(const char* function, const py::kwargs& kwargs, std::initializer_list<const char*> also = {}) {
  FactoryOptions o;
  for (auto [key, value] : kwargs) {
    const std::string k = key.cast<std::string>();
    if (k == "dtype") {
      if (!value.is_none()) o.dtype = value.cast<DType>();
    } else if (k == "device") {
      if (!value.is_none()) o.device = deviceFrom(value);
    } else if (k == "requires_grad") {
      o.requiresGrad = value.cast<bool>();
    } else if (k == "pin_memory") {
      o.pinMemory = value.cast<bool>();
    } else if (k == "layout" || k == "memory_format") {
      continue;
    } else if (std::none_of(also.begin(), also.end(), [&](const char* a) { return k == a; })) {
      throw py::type_error(std::string(function) + "() got an unexpected keyword argument '" + k + "'");
    }
  }
  return o;
}

// The factory's result placed and flagged as asked.
Tensor finish(Tensor t, const FactoryOptions& o) {
  {
    py::gil_scoped_release release;
    if (o.device && *o.device != t.device()) t = t.to(*o.device);
    if (o.pinMemory) t = t.pin_memory();
  }
  if (o.requiresGrad) t.requires_grad_(true);
  return t;
}

Options engineOptions(const FactoryOptions& o, DType fallback = kFloat32) {
  return {.dtype = o.dtype.value_or(fallback), .device = o.device.value_or(kCPU)};
}

// zeros(2, 3), zeros((2, 3)), zeros(size=(2, 3)).
Shape sizeArgument(const char* function, const py::args& args, const py::kwargs& kwargs) {
  if (args.size() == 0 && kwargs.contains("size")) return shapeFromSequence(kwargs["size"], function);
  return shapeFrom(args, function);
}

template <class Make>
void defFactory(py::module_& m, const char* name, Make make) {
  m.def(name, [name, make](py::args args, py::kwargs kwargs) {
    const Shape shape = sizeArgument(name, args, kwargs);
    const FactoryOptions o = factoryOptions(name, kwargs, {"size", "generator"});
    if (kwargs.contains("generator") && !kwargs["generator"].is_none()) {
      throw NotImplementedError(std::string("GPU Lab's torch has no ") + name + "(generator=...) yet: it draws from the default generator (torch.manual_seed)");
    }
    Tensor t;
    {
      py::gil_scoped_release release;
      t = make(shape, engineOptions(o));
    }
    return finish(t, o);  // made on o's device already: pins and flags it
  });
}

// zeros_like(t, dtype=..., device=...): t's shape, dtype and device unless given.
template <class Make>
void defLike(py::module_& m, const char* name, Make make) {
  m.def(name, [name, make](const Tensor& like, py::kwargs kwargs) {
    FactoryOptions o = factoryOptions(name, kwargs);
    if (!o.dtype) o.dtype = like.dtype();
    if (!o.device) o.device = like.device();
    Tensor t;
    {
      py::gil_scoped_release release;
      t = make(like.sizes(), engineOptions(o));
    }
    if (o.requiresGrad) t.requires_grad_(true);
    return t;
  });
}

// A 2-D size as PyTorch takes one: an int for both, or a pair.
Size2 size2(py::handle value, const char* name) {
  if (py::isinstance<py::int_>(value)) return Size2(value.cast<std::int64_t>());
  if (py::isinstance<py::tuple>(value) || py::isinstance<py::list>(value)) {
    const py::sequence seq = py::reinterpret_borrow<py::sequence>(value);
    if (seq.size() == 1) return Size2(seq[0].cast<std::int64_t>(), seq[0].cast<std::int64_t>());
    if (seq.size() == 2) return Size2(seq[0].cast<std::int64_t>(), seq[1].cast<std::int64_t>());
  }
  throw py::type_error(std::string(name) + " must be an int or a tuple of two ints");
}

// A Python callable an engine node keeps for backward: released with the GIL held, wherever (on
// whichever thread) the node dies.
std::shared_ptr<py::object> heldUnderGil(py::object callable) {
  return std::shared_ptr<py::object>(new py::object(std::move(callable)), [](py::object* f) {
    py::gil_scoped_acquire gil;
    delete f;
  });
}

// torch.arange's arguments as exact int64s when every one is a Python int (bools count), as PyTorch's
// integer arange takes them; nothing when one is not, or lies past int64 (then they go as doubles).
std::optional<std::vector<std::int64_t>> exactInts(const std::vector<py::object>& given) {
  std::vector<std::int64_t> out;
  for (const py::object& g : given) {
    if (!py::isinstance<py::int_>(g)) return std::nullopt;
    int overflow = 0;
    const long long v = PyLong_AsLongLongAndOverflow(g.ptr(), &overflow);
    if (overflow != 0) return std::nullopt;
    out.push_back(v);
  }
  return out;
}

// torch.manual_seed's seed as PyTorch takes it: int(seed) first (so '3' and 1.5 are seeds, and 'a'
// raises int()'s ValueError), then as an unsigned 64-bit number, a negative one by its bits (-1 is
// 2**64 - 1); past both ranges PyTorch 2's ValueError (1.13: RuntimeError "Overflow when unpacking long").
std::uint64_t seedFrom(py::handle seed) {
  const py::object asInt = py::reinterpret_steal<py::object>(PyNumber_Long(seed.ptr()));
  if (!asInt) throw py::error_already_set();
  const unsigned long long u = PyLong_AsUnsignedLongLong(asInt.ptr());
  if (!PyErr_Occurred()) return u;
  PyErr_Clear();
  int overflow = 0;
  const long long s = PyLong_AsLongLongAndOverflow(asInt.ptr(), &overflow);
  if (overflow != 0) throw py::value_error("Overflow when unpacking long long");
  return static_cast<std::uint64_t>(s);
}

}  // namespace

std::optional<Number> numberFrom(py::handle o) {
  if (py::isinstance<py::bool_>(o)) return Number{Number::Bool, o.cast<bool>() ? 1 : 0, o.cast<bool>() ? 1.0 : 0.0};
  if (py::isinstance<py::int_>(o)) {
    int overflow = 0;
    const long long i = PyLong_AsLongLongAndOverflow(o.ptr(), &overflow);
    if (overflow == 0) return Number{Number::Int, i, static_cast<double>(i)};
    const double d = PyLong_AsDouble(o.ptr());  // OverflowError past double's range
    if (d == -1.0 && PyErr_Occurred()) throw py::error_already_set();
    return Number{Number::Int, 0, d, /*exact=*/false};
  }
  if (py::isinstance<py::float_>(o)) return Number{Number::Float, 0, o.cast<double>()};
  if (py::isinstance<Tensor>(o)) {
    const Tensor& t = o.cast<const Tensor&>();
    if (t.numel() != 1) throw Error("a Tensor with " + std::to_string(t.numel()) + " elements cannot be converted to Scalar");
    py::gil_scoped_release release;
    if (isFloatingPoint(t.dtype())) return Number{Number::Float, 0, t.item()};
    const std::int64_t i = t.toVector<std::int64_t>()[0];
    return Number{t.dtype() == kBool ? Number::Bool : Number::Int, i, static_cast<double>(i)};
  }
  // Other numbers (numpy's scalars): an int when they have __index__, else a float when __float__.
  if (PyIndex_Check(o.ptr())) {
    const py::object asInt = py::reinterpret_steal<py::object>(PyNumber_Index(o.ptr()));
    if (asInt) return numberFrom(asInt);
    PyErr_Clear();
  }
  if (Py_TYPE(o.ptr())->tp_as_number && Py_TYPE(o.ptr())->tp_as_number->nb_float) {
    const double d = PyFloat_AsDouble(o.ptr());
    if (d == -1.0 && PyErr_Occurred()) throw py::error_already_set();
    return Number{Number::Float, 0, d};
  }
  return std::nullopt;
}

Tensor mmOf(const Tensor& a, const Tensor& b) {
  if (a.dim() != 2) throw Error("self must be a matrix");
  if (b.dim() != 2) throw Error("mat2 must be a matrix");
  return matmul(a, b);
}

DType dtypeOf(const Number& n) { return n.kind == Number::Bool ? kBool : n.kind == Number::Int ? kInt64 : kFloat32; }

Tensor filled(const Shape& shape, const Number& n, const Options& o) {
  py::gil_scoped_release release;
  if (n.kind != Number::Float && n.exact) return full_int64(shape, n.i, o);
  return full(shape, n.value(), o);
}

namespace {
// The engine's norm and moments over a list of dims (empty: all); python/gpulab/_norms_and_moments.py
// gives them PyTorch's signatures (p="fro", unbiased= / correction=, a bare bool for unbiased).
void bindNormsAndMoments(py::module_& m) {
  m.def("_vector_norm", [](const Tensor& input, double ord, const std::vector<std::int64_t>& dims, bool keepdim, std::optional<DType> dtype) {
    return vector_norm(input, ord, dims, keepdim, dtype);
  }, py::arg("input"), py::arg("ord"), py::arg("dims"), py::arg("keepdim"), py::arg("dtype"), NoGil());
  m.def("_var", [](const Tensor& input, const std::vector<std::int64_t>& dims, double correction, bool keepdim) {
    return var(input, dims, correction, keepdim);
  }, py::arg("input"), py::arg("dims"), py::arg("correction"), py::arg("keepdim"), NoGil());
  m.def("_std", [](const Tensor& input, const std::vector<std::int64_t>& dims, double correction, bool keepdim) {
    return gpulab::std(input, dims, correction, keepdim);
  }, py::arg("input"), py::arg("dims"), py::arg("correction"), py::arg("keepdim"), NoGil());
}
}  // namespace

void bindFunctions(py::module_& m) {
  bindNormsAndMoments(m);
  // Creation.
  defFactory(m, "zeros", [](const Shape& s, const Options& o) { return zeros(s, o); });
  defFactory(m, "ones", [](const Shape& s, const Options& o) { return ones(s, o); });
  defFactory(m, "empty", [](const Shape& s, const Options& o) { return Tensor::empty(s, o.dtype, o.device); });
  defFactory(m, "randn", [](const Shape& s, const Options& o) { return randn(s, defaultGenerator(), o); });
  defFactory(m, "rand", [](const Shape& s, const Options& o) { return rand(s, defaultGenerator(), o); });
  defLike(m, "zeros_like", [](const Shape& s, const Options& o) { return zeros(s, o); });
  defLike(m, "ones_like", [](const Shape& s, const Options& o) { return ones(s, o); });
  defLike(m, "empty_like", [](const Shape& s, const Options& o) { return Tensor::empty(s, o.dtype, o.device); });
  defLike(m, "randn_like", [](const Shape& s, const Options& o) { return randn(s, defaultGenerator(), o); });
  defLike(m, "rand_like", [](const Shape& s, const Options& o) { return rand(s, defaultGenerator(), o); });
  // full's dtype, unless given, is the fill value's: torch.full((2,), 7) is int64, (2,), True bool.
  auto fillValue = [](const char* function, py::handle value) {
    const std::optional<Number> n = numberFrom(value);
    if (!n) throw py::type_error(std::string(function) + "(): argument 'fill_value' (position 2) must be Number, not " + typeName(value));
    return *n;
  };
  m.def("full", [fillValue](py::object size, py::handle value, py::kwargs kwargs) {
    const FactoryOptions o = factoryOptions("full", kwargs);
    const Shape shape = shapeFromSequence(size, "full");
    const Number n = fillValue("full", value);
    Tensor t = filled(shape, n, engineOptions(o, dtypeOf(n)));
    if (o.requiresGrad) t.requires_grad_(true);
    return t;
  }, py::arg("size"), py::arg("fill_value"));
  m.def("full_like", [fillValue](const Tensor& like, py::handle value, py::kwargs kwargs) {
    FactoryOptions o = factoryOptions("full_like", kwargs);
    Tensor t = filled(like.sizes(), fillValue("full_like", value), {.dtype = o.dtype.value_or(like.dtype()), .device = o.device.value_or(like.device())});
    if (o.requiresGrad) t.requires_grad_(true);
    return t;
  }, py::arg("input"), py::arg("fill_value"));
  // randint(high, size), randint(low, high, size).
  // randint(high, size), randint(low, high, size), each argument positional or by name (randint(10,
  // size=(3,)) as the tutorials write it): the size is the last positional one unless named.
  m.def("randint", [](py::args args, py::kwargs kwargs) {
    std::vector<py::object> given;
    for (py::handle a : args) given.push_back(py::reinterpret_borrow<py::object>(a));
    py::object size;
    if (kwargs.contains("size")) {
      size = kwargs["size"];
    } else if (!given.empty()) {
      size = given.back();
      given.pop_back();
    }
    std::int64_t low = kwargs.contains("low") ? kwargs["low"].cast<std::int64_t>() : 0, high = 0;
    if (given.size() == 2) {
      low = given[0].cast<std::int64_t>();
      high = given[1].cast<std::int64_t>();
    } else if (given.size() == 1 && !kwargs.contains("high")) {
      high = given[0].cast<std::int64_t>();
    } else if (given.empty() && kwargs.contains("high")) {
      high = kwargs["high"].cast<std::int64_t>();
    } else {
      throw py::type_error("randint() received an invalid combination of arguments: give (high, size) or (low, high, size)");
    }
    if (!size || size.is_none()) throw py::type_error("randint() missing required argument 'size'");
    if (kwargs.contains("generator") && !kwargs["generator"].is_none()) {
      throw NotImplementedError("GPU Lab's torch has no randint(generator=...) yet: it draws from the default generator (torch.manual_seed)");
    }
    const FactoryOptions o = factoryOptions("randint", kwargs, {"low", "high", "size", "generator"});
    const Shape shape = shapeFromSequence(size, "randint");
    py::gil_scoped_release release;
    return randint(low, high, shape, defaultGenerator(), engineOptions(o, kInt64));
  });
  // arange(end), arange(start, end[, step]); an int64 result when every argument is an int.
  m.def("arange", [](py::args args, py::kwargs kwargs) {
    std::vector<py::object> given;
    for (py::handle a : args) given.push_back(py::reinterpret_borrow<py::object>(a));
    for (const char* k : {"start", "end", "step"})
      if (kwargs.contains(k)) given.push_back(kwargs[k]);
    if (given.empty() || given.size() > 3) throw py::type_error("arange() takes 1 to 3 positional arguments (start, end, step)");
    bool allInts = true;
    std::vector<double> v;
    for (const py::object& g : given) {
      allInts = allInts && py::isinstance<py::int_>(g);
      v.push_back(g.cast<double>());
    }
    FactoryOptions o = factoryOptions("arange", kwargs, {"start", "end", "step"});
    const DType dtype = o.dtype.value_or(allInts ? kInt64 : kFloat32);
    // Ints into an int64 arange are taken exactly (arange(2**53, 2**53 + 3) has three elements); an int
    // past int64 there is PyTorch 2's error.
    const std::optional<std::vector<std::int64_t>> ints = dtype == kInt64 ? exactInts(given) : std::nullopt;
    if (dtype == kInt64 && allInts && !ints) throw Error("value cannot be converted to type int64_t without overflow");
    Tensor t;
    {
      py::gil_scoped_release release;
      const Options opts{.dtype = dtype, .device = o.device.value_or(kCPU)};
      if (ints) {
        const std::vector<std::int64_t>& n = *ints;
        t = n.size() == 1 ? arange_int64(0, n[0], 1, opts) : arange_int64(n[0], n[1], n.size() == 3 ? n[2] : 1, opts);
      } else {
        t = v.size() == 1 ? arange(v[0], opts) : arange(v[0], v[1], v.size() == 3 ? v[2] : 1.0, opts);
      }
    }
    if (o.requiresGrad) t.requires_grad_(true);
    return t;
  });
  // torch.linspace(start, end, steps) and torch.logspace(start, end, steps, base=10.0): float32 unless a
  // dtype is given (ints too: the default dtype), start and end numbers or 0-dim tensors (PyTorch 2).
  auto spacedOf = [](const char* name, py::handle start, py::handle end, std::int64_t steps, std::optional<double> base,
                     const py::kwargs& kwargs) -> py::object {
    auto number = [name](py::handle v, const char* what) {
      if (py::isinstance<Tensor>(v)) {
        const Tensor& t = v.cast<const Tensor&>();
        if (t.dim() != 0) throw Error(std::string(name) + "() expects \"" + what + "\" to be a 0-dimensional tensor, but got a tensor with " + std::to_string(t.dim()) + " dimensions");
        return t.item();
      }
      if (!isNumber(v)) throw py::type_error(std::string(name) + "(): argument '" + what + "' must be Number, not " + typeName(v));
      return v.cast<double>();
    };
    const double a = number(start, "start"), b = number(end, "end");
    FactoryOptions o = factoryOptions(name, kwargs, {"out"});
    Tensor t;
    {
      py::gil_scoped_release release;
      const Options opts{.dtype = o.dtype.value_or(kFloat32), .device = o.device.value_or(kCPU)};
      t = base ? logspace(a, b, steps, *base, opts) : linspace(a, b, steps, opts);
    }
    if (kwargs.contains("out") && !kwargs["out"].is_none()) {
      py::object out = kwargs["out"];
      Tensor target = out.cast<Tensor>();
      if (target.sizes() != t.sizes()) {
        throw NotImplementedError(std::string("torch.") + name + "(out=...): GPU Lab's torch does not resize an out= tensor yet: give one of " +
                                  std::to_string(steps) + " elements");
      }
      py::gil_scoped_release release;
      target.copy_(t.to(target.dtype()));
      return out;
    }
    if (o.requiresGrad) t.requires_grad_(true);
    return py::cast(std::move(t));
  };
  m.def("linspace", [spacedOf](py::handle start, py::handle end, std::int64_t steps, const py::kwargs& kwargs) {
    return spacedOf("linspace", start, end, steps, std::nullopt, kwargs);
  }, py::arg("start"), py::arg("end"), py::arg("steps"));
  m.def("logspace", [spacedOf](py::handle start, py::handle end, std::int64_t steps, double base, const py::kwargs& kwargs) {
    return spacedOf("logspace", start, end, steps, base, kwargs);
  }, py::arg("start"), py::arg("end"), py::arg("steps"), py::arg("base") = 10.0);
  m.def("tensor", [](py::object data, py::object dtype, py::object device, bool requiresGrad, bool pinMemory) {
    std::optional<DType> d;
    if (!dtype.is_none()) d = dtype.cast<DType>();
    std::optional<Device> dev;
    if (!device.is_none()) dev = deviceFrom(device);
    Tensor t = tensorFromData(data, d, dev, requiresGrad);
    return pinMemory ? t.pin_memory() : t;
  }, py::arg("data"), py::kw_only(), py::arg("dtype") = py::none(), py::arg("device") = py::none(), py::arg("requires_grad") = false,
        py::arg("pin_memory") = false);
  m.def("manual_seed", [](py::handle seed) { manual_seed(seedFrom(seed)); }, py::arg("seed"));
  m.def("initial_seed", []() { return defaultGenerator().seed(); });
  // The CPU kernels' threads (engine/core/parallel.h); OMP_NUM_THREADS sets them at start, as in PyTorch.
  m.def("get_num_threads", []() { return numThreads(); });
  m.def("set_num_threads", [](int threads) { setNumThreads(threads); }, py::arg("int"));

  // Math (torch.add(a, b), torch.matmul(a, b), ...).
  m.def("matmul", [](const Tensor& a, const Tensor& b) { return matmul(a, b); }, py::arg("input"), py::arg("other"), NoGil());
  m.def("mm", [](const Tensor& a, const Tensor& b) { return mmOf(a, b); }, NoGil());
  m.def("maximum", [](const Tensor& a, const Tensor& b) { return maximum(a, b); }, NoGil());
  m.def("minimum", [](const Tensor& a, const Tensor& b) { return minimum(a, b); }, NoGil());
  m.def("gelu", [](const Tensor& a, const std::string& approximate) { return gelu(a, approximate); }, py::arg("input"),
        py::arg("approximate") = "none", NoGil());
  m.def("softmax", [](const Tensor& a, std::int64_t dim) { return softmax(a, dim); }, py::arg("input"), py::arg("dim"), NoGil());
  m.def("log_softmax", [](const Tensor& a, std::int64_t dim) { return log_softmax(a, dim); }, py::arg("input"), py::arg("dim"), NoGil());

  m.def("where", [](const Tensor& condition, py::object input, py::object other) -> py::object {
    if (input.is_none() && other.is_none()) return py::cast(condition).attr("nonzero")(py::arg("as_tuple") = true);
    if (input.is_none() || other.is_none()) throw py::type_error("where() takes a condition alone, or a condition, input and other");
    return py::cast(whereOf(condition, input, other));
  }, py::arg("condition"), py::arg("input") = py::none(), py::arg("other") = py::none());

  m.def("cat", [](const std::vector<Tensor>& tensors, std::int64_t dim) { return cat(tensors, dim); }, py::arg("tensors"), py::arg("dim") = 0,
        NoGil());
  m.def("stack", [](const std::vector<Tensor>& tensors, std::int64_t dim) { return stack(tensors, dim); }, py::arg("tensors"),
        py::arg("dim") = 0, NoGil());

  // max/min over all elements, or over a dim as (values, indices): gpulab/_tensor.py wraps them
  // in torch.return_types' named tuples.
  m.def("_max", [](const Tensor& a) { return max(a); }, NoGil());
  m.def("_max_dim", [](const Tensor& a, std::int64_t dim, bool keepdim) { return max(a, dim, keepdim); }, NoGil());
  m.def("_min", [](const Tensor& a) { return min(a); }, NoGil());
  m.def("_min_dim", [](const Tensor& a, std::int64_t dim, bool keepdim) {
    // (max of -a would name max() in the error for an empty dim)
    if (a.dim() > 0 && a.size(wrapDim(dim, a.dim())) == 0) {
      throw IndexError("min(): Expected reduction dim " + std::to_string(wrapDim(dim, a.dim())) + " to have non-zero size.");
    }
    auto [values, indices] = max(-a, dim, keepdim);
    return std::pair{-values, indices};
  }, NoGil());
  // torch.utils.checkpoint's engine part: `function` (a Python callable) runs without keeping its
  // activations, and again in backward -- which runs without the GIL, so the call takes it.
  m.def("_checkpoint", [](py::object function, const std::vector<Tensor>& inputs, const std::vector<Tensor>& params, bool preserveRng) {
    auto held = heldUnderGil(std::move(function));
    auto call = [held](const std::vector<Tensor>& xs) {
      py::gil_scoped_acquire gil;
      py::tuple args(xs.size());
      for (std::size_t i = 0; i < xs.size(); ++i) args[i] = py::cast(xs[i]);
      const py::object out = (*held)(*args);
      if (!py::isinstance<Tensor>(out)) throw py::type_error("checkpoint: the function must return one Tensor in GPU Lab's torch");
      return out.cast<Tensor>();
    };
    py::gil_scoped_release release;
    return checkpoint(call, inputs, params, preserveRng);
  }, py::arg("function"), py::arg("inputs"), py::arg("params"), py::arg("preserve_rng_state") = true);
  // torch.autograd.Function's node: `output` (computed by the Function's forward without a graph)
  // becomes, as a new tensor on the same memory, the output of a node named `name` whose backward
  // calls `backward(grad)` -- the Function's backward, one gradient (or None) per tensor in
  // `inputs`. The engine runs backward without the GIL: the call takes it.
  m.def("_record_function", [](const Tensor& output, const std::string& name, const std::vector<Tensor>& inputs, py::object backward) {
    auto held = heldUnderGil(std::move(backward));
    std::vector<Shape> shapes;
    for (const Tensor& t : inputs) shapes.push_back(t.sizes());
    auto call = [held, name, shapes](const Tensor& grad, const std::vector<bool>& needsGrad) {
      py::gil_scoped_acquire gil;
      const py::object returned = (*held)(py::cast(grad));
      const py::list grads = returned;
      std::vector<Tensor> out(shapes.size());
      for (std::size_t i = 0; i < shapes.size() && i < grads.size(); ++i) {
        if (grads[i].is_none() || !needsGrad[i]) continue;
        if (!py::isinstance<Tensor>(grads[i])) {
          throw Error("expected Variable or None (got " + std::string(py::str(py::type::of(grads[i]).attr("__name__"))) + ")");
        }
        Tensor g = grads[i].cast<Tensor>();
        if (g.sizes() != shapes[i]) {
          throw Error("Function " + name + " returned an invalid gradient at index " + std::to_string(i) + " - got " + shapeStr(g.sizes()) +
                      " but expected shape compatible with " + shapeStr(shapes[i]));
        }
        out[i] = std::move(g);
      }
      return out;
    };
    return autograd::record(output.detach(), name.c_str(), inputs, call);
  }, py::arg("output"), py::arg("name"), py::arg("inputs"), py::arg("backward"));
  m.def("_version", []() { return std::string(version()); });

  // What torch.nn.functional builds on.
  m.def("linear", [](const Tensor& input, const Tensor& weight, std::optional<Tensor> bias) {
    return linear(input, weight, bias.value_or(Tensor()));
  }, py::arg("input"), py::arg("weight"), py::arg("bias") = py::none(), NoGil());
  // (torch.nn.functional.dropout checks p first, in PyTorch's words; this is the same check's class.)
  m.def("embedding", [](const Tensor& input, const Tensor& weight, std::optional<std::int64_t> paddingIdx) {
    return embedding(weight, input, paddingIdx);
  }, py::arg("input"), py::arg("weight"), py::arg("padding_idx") = py::none(), NoGil());
  m.def("dropout", [](const Tensor& a, double p, bool training) {
    if (p < 0 || p > 1) throw py::value_error("dropout probability has to be between 0 and 1, but got " + std::string(py::repr(py::float_(p))));
    py::gil_scoped_release release;
    return dropout(a, p, training);
  }, py::arg("input"), py::arg("p") = 0.5, py::arg("training") = true);
  m.def("conv2d", [](const Tensor& input, const Tensor& weight, std::optional<Tensor> bias, py::object stride, py::object padding,
                     py::object dilation, std::int64_t groups) {
    const Tensor b = bias.value_or(Tensor());
    const Size2 s = size2(stride, "stride"), d = size2(dilation, "dilation");
    if (py::isinstance<py::str>(padding)) {
      const ConvPadding p = parseConvPadding(padding.cast<std::string>());
      py::gil_scoped_release release;
      return conv2d(input, weight, b, s, p, d, groups);
    }
    const Size2 p = size2(padding, "padding");
    py::gil_scoped_release release;
    return conv2d(input, weight, b, s, p, d, groups);
  }, py::arg("input"), py::arg("weight"), py::arg("bias") = py::none(), py::arg("stride") = 1, py::arg("padding") = 0,
        py::arg("dilation") = 1, py::arg("groups") = 1);
  m.def("max_pool2d", [](const Tensor& input, py::object kernel, py::object stride, py::object padding, py::object dilation, bool ceil) {
    const Size2 k = size2(kernel, "kernel_size"), p = size2(padding, "padding"), d = size2(dilation, "dilation");
    const OptionalSize2 s = stride.is_none() ? OptionalSize2() : OptionalSize2(size2(stride, "stride"));
    py::gil_scoped_release release;
    return max_pool2d(input, k, s, p, d, ceil);
  }, py::arg("input"), py::arg("kernel_size"), py::arg("stride") = py::none(), py::arg("padding") = 0, py::arg("dilation") = 1,
        py::arg("ceil_mode") = false);
  m.def("avg_pool2d", [](const Tensor& input, py::object kernel, py::object stride, py::object padding, bool ceil, bool countPad) {
    const Size2 k = size2(kernel, "kernel_size"), p = size2(padding, "padding");
    const OptionalSize2 s = stride.is_none() ? OptionalSize2() : OptionalSize2(size2(stride, "stride"));
    py::gil_scoped_release release;
    return avg_pool2d(input, k, s, p, ceil, countPad);
  }, py::arg("input"), py::arg("kernel_size"), py::arg("stride") = py::none(), py::arg("padding") = 0, py::arg("ceil_mode") = false,
        py::arg("count_include_pad") = true);
  m.def("adaptive_avg_pool2d", [](const Tensor& input, py::object size) {
    const Size2 s = size2(size, "output_size");
    py::gil_scoped_release release;
    return adaptive_avg_pool2d(input, s);
  }, py::arg("input"), py::arg("output_size"));
  m.def("batch_norm", [](const Tensor& input, std::optional<Tensor> mean, std::optional<Tensor> var, std::optional<Tensor> weight,
                         std::optional<Tensor> bias, bool training, double momentum, double eps) {
    return batch_norm(input, mean.value_or(Tensor()), var.value_or(Tensor()), weight.value_or(Tensor()), bias.value_or(Tensor()), training,
                      momentum, eps);
  }, py::arg("input"), py::arg("running_mean"), py::arg("running_var"), py::arg("weight") = py::none(), py::arg("bias") = py::none(),
        py::arg("training") = false, py::arg("momentum") = 0.1, py::arg("eps") = 1e-5, NoGil());
  m.def("mse_loss", [](const Tensor& a, const Tensor& b, const std::string& r) { return mse_loss(a, b, r); }, py::arg("input"),
        py::arg("target"), py::arg("reduction") = "mean", NoGil());
  m.def("l1_loss", [](const Tensor& a, const Tensor& b, const std::string& r) { return l1_loss(a, b, r); }, py::arg("input"),
        py::arg("target"), py::arg("reduction") = "mean", NoGil());
  m.def("nll_loss", [](const Tensor& a, const Tensor& b, const std::string& r) { return nll_loss(a, b, r); }, py::arg("input"),
        py::arg("target"), py::arg("reduction") = "mean", NoGil());
  m.def("cross_entropy", [](const Tensor& a, const Tensor& b, const std::string& r) { return cross_entropy(a, b, r); }, py::arg("input"),
        py::arg("target"), py::arg("reduction") = "mean", NoGil());
}

Tensor whereOf(const Tensor& condition, py::handle input, py::handle other) {
  const bool inputTensor = py::isinstance<Tensor>(input), otherTensor = py::isinstance<Tensor>(other);
  auto number = [](py::handle o) {
    if (!isNumber(o)) throw py::type_error("where(): argument 'input' and 'other' must be Tensors or numbers, not " + typeName(o));
    return o.cast<double>();
  };
  if (inputTensor && otherTensor) {
    const Tensor a = input.cast<Tensor>(), b = other.cast<Tensor>();
    py::gil_scoped_release release;
    return where(condition, a, b);
  }
  if (inputTensor) {
    const Tensor a = input.cast<Tensor>();
    const double b = number(other);
    py::gil_scoped_release release;
    return where(condition, a, b);
  }
  if (otherTensor) {
    const double a = number(input);
    const Tensor b = other.cast<Tensor>();
    py::gil_scoped_release release;
    return where(condition, a, b);
  }
  // Two numbers: float32 if either has a fraction, else int64, on the condition's device.
  const double a = number(input), b = number(other);
  const bool floating = py::isinstance<py::float_>(input) || py::isinstance<py::float_>(other);
  py::gil_scoped_release release;
  const Tensor av = full({}, a, {.dtype = floating ? kFloat32 : kInt64, .device = condition.device()});
  return where(condition, av, b);
}

}  // namespace gpulab::python
