// gpulab._C's entry point, the Python types the bindings share, and the errors: every engine
// exception becomes the Python exception PyTorch raises for it.
#include <pybind11/stl.h>

#include <cmath>
#include <string>

#include "engine/core/errors.h"
#include "engine/ops/ops.h"
#include "engine/runtime/execution_context.h"
#include "python/bindings/bindings.h"

namespace gpulab::python {

PythonTypes& pythonTypes() {
  // Never destroyed: the objects must not be released after the interpreter has finalised.
  static auto* types = new PythonTypes;
  return *types;
}

Device deviceFrom(py::handle object) {
  if (py::isinstance<py::str>(object)) {
    const std::string text = object.cast<std::string>();
    if (text == "cuda") return Device(DeviceType::CUDA, executionContext().currentCudaDevice);
    return Device::parse(text);
  }
  if (py::isinstance<py::int_>(object) && !py::isinstance<py::bool_>(object)) {
    const long long index = object.cast<long long>();
    if (index < 0) throw py::value_error("Device index must not be negative");
    return Device(DeviceType::CUDA, static_cast<int>(index));
  }
  if (pythonTypes().device && py::isinstance(object, pythonTypes().device)) {
    const std::string type = object.attr("type").cast<std::string>();
    const py::object index = object.attr("index");
    if (type == "cpu") return kCPU;
    return Device(DeviceType::CUDA, index.is_none() ? executionContext().currentCudaDevice : index.cast<int>());
  }
  throw py::type_error("expected a device (a torch.device, a string such as 'cuda:0', or an int), but got " +
                       typeName(object));
}

Device cudaDeviceOrCurrent(py::handle device) {
  if (device.is_none()) return Device(DeviceType::CUDA, executionContext().currentCudaDevice);
  const Device d = deviceFrom(device);
  if (!d.isCuda()) throw py::value_error("Expected a cuda device, but got: " + d.str());
  return d;
}

py::object deviceObject(Device device) {
  if (device.isCpu()) return pythonTypes().device("cpu");
  return pythonTypes().device("cuda", device.index());
}

Shape shapeFromSequence(py::handle sequence, const char* function) {
  Shape shape;
  for (py::handle item : sequence) {
    if (!py::isinstance<py::int_>(item) || py::isinstance<py::bool_>(item)) {
      throw py::type_error(std::string(function) + "(): argument 'size' must be a tuple of ints, but found element of type " +
                           typeName(item));
    }
    // A size past int64 is PyTorch 2's TypeError, in its words (torch.empty(2**63)); pybind11's own
    // cast would fail with "Unable to cast Python instance to C++ type".
    int overflow = 0;
    const long long size = PyLong_AsLongLongAndOverflow(item.ptr(), &overflow);
    if (overflow != 0) {
      throw py::type_error(std::string(function) + "(): argument '" + (std::string(function) == "reshape" ? "shape" : "size") +
                           "' failed to unpack the object at pos " + std::to_string(shape.size() + 1) +
                           " with error \"Overflow when unpacking long long\"");
    }
    shape.push_back(size);
  }
  return shape;
}

Shape shapeFrom(const py::args& args, const char* function) {
  if (args.size() == 1 && (py::isinstance<py::tuple>(args[0]) || py::isinstance<py::list>(args[0]))) return shapeFromSequence(args[0], function);
  return shapeFromSequence(args, function);
}

py::object sizeObject(const Shape& shape) {
  py::tuple t(shape.size());
  for (std::size_t i = 0; i < shape.size(); ++i) t[i] = py::int_(shape[i]);
  return pythonTypes().size ? pythonTypes().size(t) : py::object(t);
}

py::object dtypeObject(DType dtype) {
  // Never destroyed, as pythonTypes(): made on first use, while the interpreter runs.
  static auto* objects = [] {
    auto* out = new std::vector<py::object>;
    for (int i = 0; i <= static_cast<int>(kLastDType); ++i) out->push_back(py::cast(static_cast<DType>(i)));
    return out;
  }();
  return (*objects)[static_cast<std::size_t>(dtype)];
}

namespace {

// Nested sequences: their shape (checked rectangular) and their values in row-major order. A value
// keeps what Python gave: an int all its 64 bits (a double holds integers exactly only up to 2^53,
// and torch.tensor([2**53 + 1]) must not round), a float its double.
struct Value {
  enum Kind : std::uint8_t { Float, Int, Bool, BigInt } kind;  // BigInt: an int past int64, kept as its double
  std::int64_t i = 0;
  double d = 0;
  bool fromFloatTensor = false;  // a one-element floating tensor, which PyTorch will not read as an integer
};
struct Flattened {
  Shape shape;
  std::vector<Value> values;
  bool anyFloat = false, anyInt = false, anyBool = false;
  std::optional<DType> tensorType;  // the promoted dtype of the one-element tensors among the data
};

void checkDepth(std::size_t depth, const Flattened& out, const char* got) {
  if (depth != out.shape.size()) {
    throw py::value_error("expected sequence of length " + std::to_string(out.shape[depth]) + " at dim " + std::to_string(depth) + got);
  }
}

void flatten(py::handle data, std::size_t depth, Flattened& out) {
  if (py::isinstance<Tensor>(data)) {
    const Tensor& t = data.cast<const Tensor&>();
    if (t.numel() != 1 || t.dim() != 0) throw py::value_error("only one element tensors can be converted to Python scalars");
    Value v{isFloatingPoint(t.dtype()) ? Value::Float : t.dtype() == kBool ? Value::Bool : Value::Int};
    if (v.kind == Value::Float) {
      v.d = t.item();
      v.fromFloatTensor = true;
    } else {
      v.i = t.toVector<std::int64_t>()[0];
      v.d = static_cast<double>(v.i);
    }
    out.values.push_back(v);
    out.tensorType = out.tensorType ? promoteTypes(*out.tensorType, t.dtype()) : t.dtype();
    checkDepth(depth, out, "");
    return;
  }
  if (py::isinstance<py::bool_>(data)) {
    out.anyBool = true;
    const bool b = data.cast<bool>();
    out.values.push_back({Value::Bool, b ? 1 : 0, b ? 1.0 : 0.0});
  } else if (py::isinstance<py::int_>(data)) {
    out.anyInt = true;
    int overflow = 0;
    const long long i = PyLong_AsLongLongAndOverflow(data.ptr(), &overflow);
    if (overflow == 0) {
      out.values.push_back({Value::Int, i, static_cast<double>(i)});
    } else {
      const double d = PyLong_AsDouble(data.ptr());  // OverflowError past double's range, as PyTorch
      if (d == -1.0 && PyErr_Occurred()) throw py::error_already_set();
      out.values.push_back({Value::BigInt, 0, d});
    }
  } else if (py::isinstance<py::float_>(data)) {
    out.anyFloat = true;
    out.values.push_back({Value::Float, 0, data.cast<double>()});
  } else if (py::isinstance<py::sequence>(data) && !py::isinstance<py::str>(data)) {
    const py::sequence seq = py::reinterpret_borrow<py::sequence>(data);
    const auto n = static_cast<std::int64_t>(seq.size());
    if (depth == out.shape.size()) {
      if (!out.values.empty()) throw py::value_error("expected sequence of length " + std::to_string(out.shape.empty() ? 0 : out.shape[0]) + " at dim " + std::to_string(depth) + " (got a sequence)");
      out.shape.push_back(n);
    } else if (depth > out.shape.size() || out.shape[depth] != n) {
      throw py::value_error("expected sequence of length " + std::to_string(depth < out.shape.size() ? out.shape[depth] : 0) + " at dim " +
                            std::to_string(depth) + " (got " + std::to_string(n) + ")");
    }
    for (py::handle item : seq) flatten(item, depth + 1, out);
    return;
  } else {
    throw py::type_error("Could not infer dtype of " + typeName(data));
  }
  checkDepth(depth, out, " (got a number)");
}

// A value stored into an int64 (or bool) tensor, as PyTorch's torch.tensor stores it.
std::int64_t integerOf(const Value& v) {
  switch (v.kind) {
    case Value::Int:
    case Value::Bool: return v.i;
    case Value::BigInt: throw py::value_error("Overflow when unpacking long long");  // PyTorch 2's ValueError (1.13: RuntimeError "... long")
    case Value::Float: break;
  }
  // A one-element floating tensor is read through __index__, which refuses it.
  if (v.fromFloatTensor) throw py::type_error("only integer tensors of a single element can be converted to an index");
  // A float truncates; NaN, the infinities and values past int64's range raise (c10::checked_convert),
  // where a plain conversion would give INT64_MIN.
  if (!(v.d >= -9223372036854775808.0 && v.d < 9223372036854775808.0)) throw Error("value cannot be converted to type int64 without overflow");
  return static_cast<std::int64_t>(v.d);
}

}  // namespace

Tensor tensorFromData(py::handle data, std::optional<DType> dtype, std::optional<Device> device, bool requiresGrad) {
  if (std::optional<Tensor> shared = sharedFromNumpy(data)) {  // torch.tensor(ndarray): a copy, in the array's dtype
    Tensor out;
    {
      py::gil_scoped_release release;
      out = shared->clone();
      if (dtype && *dtype != out.dtype()) out = out.to(*dtype);
      if (device && *device != kCPU) out = out.to(*device);
    }
    if (requiresGrad) out.requires_grad_(true);
    return out;
  }
  Flattened flat;
  flatten(data, 0, flat);
  // Floats, or no values at all (torch.tensor([]) is float32), give the default dtype; ints int64;
  // Python bools alone bool; one-element tensors among them promote with that (a float64 one gives
  // float64), as PyTorch infers it.
  const bool allBool = flat.anyBool && !flat.anyInt && !flat.anyFloat;
  const bool onlyTensors = !flat.anyBool && !flat.anyInt && !flat.anyFloat && flat.tensorType;
  const DType fromPython = flat.anyFloat || flat.values.empty() ? kFloat32 : allBool ? kBool : kInt64;
  const DType inferred = onlyTensors ? *flat.tensorType : flat.tensorType ? promoteTypes(fromPython, *flat.tensorType) : fromPython;
  const DType type = dtype.value_or(inferred);
  Tensor out;
  if (type == kInt64 || type == kBool) {
    std::vector<std::int64_t> values(flat.values.size());
    for (std::size_t i = 0; i < values.size(); ++i) {
      const Value& v = flat.values[i];
      // Into bool any non-zero number is true, NaN and ints past int64 included (PyTorch reads them as
      // bools directly); a floating tensor is refused there too.
      const bool asBool = type == kBool && !v.fromFloatTensor && (v.kind == Value::Float || v.kind == Value::BigInt);
      values[i] = asBool ? (v.d != 0.0) : integerOf(v);
    }
    py::gil_scoped_release release;
    out = tensor(values, flat.shape);
    if (type == kBool) out = out.to(kBool);
    if (device && *device != kCPU) out = out.to(*device);
  } else {
    py::gil_scoped_release release;
    out = Tensor::empty(flat.shape, kFloat64, kCPU);
    double* p = out.data<double>();
    for (std::size_t i = 0; i < flat.values.size(); ++i) p[i] = flat.values[i].d;
    if (type != kFloat64) out = out.to(type);
    if (device && *device != kCPU) out = out.to(*device);
  }
  if (requiresGrad) out.requires_grad_(true);
  return out;
}

namespace {

void bindErrors(py::module_& m) {
  // torch.cuda.OutOfMemoryError is a RuntimeError, so `except RuntimeError` catches it too.
  static auto* outOfMemory = new py::object(py::exception<OutOfMemoryError>(m, "OutOfMemoryError", PyExc_RuntimeError));
  py::register_exception_translator([](std::exception_ptr p) {
    try {
      if (p) std::rethrow_exception(p);
    } catch (const OutOfMemoryError& e) {
      PyErr_SetString(outOfMemory->ptr(), e.what());
    } catch (const IndexError& e) {
      PyErr_SetString(PyExc_IndexError, e.what());
    } catch (const NotImplementedError& e) {
      PyErr_SetString(PyExc_NotImplementedError, e.what());
    } catch (const IOError& e) {
      PyErr_SetString(PyExc_OSError, e.what());
    } catch (const Error& e) {
      // The engine's other errors, ValueError and DeviceMismatchError included, are RuntimeErrors in
      // PyTorch (its C++ core raises them all as RuntimeError); Python-level argument checks raise
      // TypeError and ValueError from the bindings themselves.
      PyErr_SetString(PyExc_RuntimeError, e.what());
    }
  });
}

}  // namespace

void bindTypes(py::module_& m) {
  bindErrors(m);
  py::class_<DType>(m, "dtype")
      .def("__repr__", [](DType t) { return "torch." + dtypeName(t); })
      .def("__eq__", [](DType a, py::object b) { return py::isinstance<DType>(b) && a == b.cast<DType>(); })
      .def("__hash__", [](DType t) { return static_cast<int>(t); })
      .def_property_readonly("is_floating_point", [](DType t) { return isFloatingPoint(t); })
      .def_property_readonly("is_complex", [](DType) { return false; })
      .def_property_readonly("is_signed", [](DType t) { return t != kBool; })
      .def_property_readonly("itemsize", [](DType t) { return elementSize(t); })
      // PyTorch's C++ name of the type ("Float", "Double"), as its error messages give it.
      .def_property_readonly("_scalar_type_name", [](DType t) { return scalarTypeName(t); });
  for (int i = 0; i <= static_cast<int>(kLastDType); ++i) {
    const auto t = static_cast<DType>(i);
    m.attr(dtypeName(t).c_str()) = dtypeObject(t);
  }
  m.def("_register_types", [](py::object size, py::object device) {
    pythonTypes().size = std::move(size);
    pythonTypes().device = std::move(device);
  });
}

}  // namespace gpulab::python

PYBIND11_MODULE(_C, m) {
  namespace gp = gpulab::python;
  m.doc() = "GPU Lab's engine, under PyTorch's names (the gpulab package is to be used as torch)";
  gp::bindTypes(m);
  gp::bindTensor(m);
  gp::bindFunctions(m);
  gp::bindRuntime(m);
  gp::bindOptimizers(m);
  gp::bindData(m);
  gp::bindAmpAndProfiler(m);
  gp::bindStreams(m);
  gp::bindNumpy(m);
  gp::bindSerialization(m);
}
