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
    shape.push_back(item.cast<std::int64_t>());
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

// Nested sequences: their shape (checked rectangular) and their values in row-major order.
struct Flattened {
  Shape shape;
  std::vector<double> values;
  bool anyFloat = false, anyInt = false, anyBool = false;
};

void flatten(py::handle data, std::size_t depth, Flattened& out) {
  if (py::isinstance<Tensor>(data)) {
    const Tensor& t = data.cast<const Tensor&>();
    if (t.numel() != 1 || t.dim() != 0) throw py::value_error("only one element tensors can be converted to Python scalars");
    out.values.push_back(t.item());
    out.anyFloat = out.anyFloat || isFloatingPoint(t.dtype());
    out.anyInt = out.anyInt || t.dtype() == kInt64;
    out.anyBool = out.anyBool || t.dtype() == kBool;
    if (depth != out.shape.size()) throw py::value_error("expected sequence of length " + std::to_string(out.shape[depth]) + " at dim " + std::to_string(depth));
    return;
  }
  if (py::isinstance<py::bool_>(data)) {
    out.anyBool = true;
    out.values.push_back(data.cast<bool>() ? 1.0 : 0.0);
  } else if (py::isinstance<py::int_>(data)) {
    out.anyInt = true;
    out.values.push_back(static_cast<double>(data.cast<long long>()));
  } else if (py::isinstance<py::float_>(data)) {
    out.anyFloat = true;
    out.values.push_back(data.cast<double>());
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
  if (depth != out.shape.size()) throw py::value_error("expected sequence of length " + std::to_string(out.shape[depth]) + " at dim " + std::to_string(depth) + " (got a number)");
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
  // Python bools alone bool.
  const bool allBool = flat.anyBool && !flat.anyInt && !flat.anyFloat;
  const DType type = dtype.value_or(flat.anyFloat || flat.values.empty() ? kFloat32 : allBool ? kBool : kInt64);
  Tensor out;
  {
    py::gil_scoped_release release;
    if (type == kInt64) {
      std::vector<std::int64_t> values(flat.values.size());
      for (std::size_t i = 0; i < values.size(); ++i) values[i] = static_cast<std::int64_t>(flat.values[i]);
      out = tensor(values, flat.shape);
    } else {
      out = Tensor::empty(flat.shape, kFloat64, kCPU);
      std::copy(flat.values.begin(), flat.values.end(), out.data<double>());
      if (type != kFloat64) out = out.to(type);
    }
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
