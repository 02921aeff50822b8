// numpy and GPU Lab's tensors share memory, as PyTorch's do: Tensor.numpy() is an array over the
// tensor's own bytes (the array keeps the tensor alive), torch.from_numpy(a) a tensor over the
// array's (the tensor keeps the array alive), so a change through one shows through the other and a
// dataset of millions of values converts at once. numpy is imported when first used (pybind11 loads
// its C API at run time): GPU Lab's torch builds and works without it.
#include <pybind11/numpy.h>

#include <string>

#include "engine/core/storage.h"
#include "python/bindings/bindings.h"

namespace gpulab::python {

namespace {

// numpy's one-character type codes for GPU Lab's dtypes (bfloat16 has none, as in PyTorch).
const char* formatOf(DType dtype) {
  switch (dtype) {
    case DType::Float32: return "f";
    case DType::Float64: return "d";
    case DType::Float16: return "e";
    case DType::Int64: return "q";
    case DType::Bool: return "?";
    case DType::BFloat16: break;
  }
  throw py::type_error("Got unsupported ScalarType " + scalarTypeName(dtype));
}

DType dtypeOf(const py::array& array) {
  const py::dtype t = array.dtype();
  const char kind = t.kind();
  const auto size = t.itemsize();
  if (kind == 'f' && size == 4) return kFloat32;
  if (kind == 'f' && size == 8) return kFloat64;
  if (kind == 'f' && size == 2) return kFloat16;
  if (kind == 'i' && size == 8) return kInt64;
  if (kind == 'b' && size == 1) return kBool;
  throw py::type_error("can't convert np.ndarray of type numpy." + std::string(py::str(py::object(t))) +
                       ". GPU Lab's torch supports float64, float32, float16, int64 and bool.");
}

Tensor tensorSharing(const py::array& array) {
  const DType dtype = dtypeOf(array);
  const auto itemsize = static_cast<py::ssize_t>(elementSize(dtype));
  Shape sizes, strides;
  std::int64_t highest = 0;  // the last element's offset (strides are not negative): the bytes spanned
  for (py::ssize_t d = 0; d < array.ndim(); ++d) {
    const py::ssize_t stride = array.strides(d);
    if (stride < 0) {
      throw py::value_error("At least one stride in the given numpy array is negative, and tensors with negative strides are not "
                            "currently supported. (You can probably work around this by making a copy of your array  with array.copy().) ");
    }
    if (stride % itemsize != 0) {
      throw py::value_error("given numpy array strides not a multiple of the element byte size. Copy the numpy array to reallocate the memory.");
    }
    sizes.push_back(array.shape(d));
    strides.push_back(stride / itemsize);
    if (array.shape(d) > 0) highest += (array.shape(d) - 1) * (stride / itemsize);
  }
  // The array itself keeps its memory; released under the GIL wherever the last view dies.
  std::shared_ptr<void> owner(new py::object(array), [](void* p) {
    py::gil_scoped_acquire gil;
    delete static_cast<py::object*>(p);
  });
  const std::size_t bytes = array.size() == 0 ? 0 : static_cast<std::size_t>((highest + 1) * itemsize);
  auto impl = std::make_shared<TensorImpl>();
  impl->storage = Storage::external(const_cast<void*>(array.data()), bytes, std::move(owner));
  impl->sizes = sizes;
  impl->strides = strides;
  impl->offset = 0;
  impl->dtype = dtype;
  return Tensor(std::move(impl));
}

}  // namespace

std::optional<Tensor> sharedFromNumpy(py::handle object) {
  // An object is an ndarray only if numpy is loaded: asking pybind11 otherwise would import it.
  PyObject* numpy = PyDict_GetItemString(PyImport_GetModuleDict(), "numpy");
  if (numpy == nullptr) return std::nullopt;
  if (py::isinstance<py::array>(object)) return tensorSharing(py::reinterpret_borrow<py::array>(object));
  // A numpy scalar (np.float32(2.5), an element of an array) as the 0-dim array it stands for.
  const py::module_ np = py::reinterpret_borrow<py::module_>(numpy);
  if (py::isinstance(object, np.attr("generic"))) return tensorSharing(np.attr("asarray")(object).cast<py::array>());
  return std::nullopt;
}

void bindNumpy(py::module_& m) {
  m.def("_from_numpy", [](py::handle object) {
    std::optional<Tensor> shared = sharedFromNumpy(object);
    if (!shared) throw py::type_error("expected np.ndarray (got " + typeName(object) + ")");
    return *shared;
  }, py::arg("array"));

  m.def("_to_numpy", [](py::object tensorObject) {
    const Tensor& t = tensorObject.cast<const Tensor&>();
    const auto itemsize = static_cast<py::ssize_t>(elementSize(t.dtype()));
    std::vector<py::ssize_t> shape, strides;
    for (std::int64_t d = 0; d < t.dim(); ++d) {
      shape.push_back(t.size(d));
      strides.push_back(t.strides()[static_cast<std::size_t>(d)] * itemsize);
    }
    // The tensor object is the array's base: the bytes live as long as either does.
    return py::array(py::dtype(formatOf(t.dtype())), shape, strides, t.data_ptr(), tensorObject);
  }, py::arg("tensor"));
}

}  // namespace gpulab::python
