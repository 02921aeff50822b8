// What torch.save and torch.load (python/gpulab/serialization.py) need below the tensor: a file holds
// each storage once, as its bytes, and every tensor as a view of one (size, stride, offset), as
// PyTorch's files do. So views that share memory still share it after loading, a shape with a zero in
// it keeps its shape, and every dtype round-trips bit for bit (values never pass through Python floats).
#include <pybind11/stl.h>

#include <cstring>
#include <limits>
#include <string>

#include "engine/core/errors.h"
#include "engine/core/storage.h"
#include "python/bindings/bindings.h"

namespace gpulab::python {

namespace {

// The whole storage under `t` as a one-dimensional tensor of t's dtype: every view's elements and
// whatever lies between them.
Tensor wholeStorage(const Tensor& t) {
  auto impl = std::make_shared<TensorImpl>();
  impl->storage = t.impl().storage;
  impl->sizes = {static_cast<std::int64_t>(t.impl().storage->bytes() / elementSize(t.dtype()))};
  impl->strides = {1};
  impl->dtype = t.dtype();
  return Tensor(std::move(impl));
}

}  // namespace

void bindSerialization(py::module_& m) {
  // The same number for every view of one storage while it lives (pickle's memo keys on it).
  m.def("_storage_key", [](const Tensor& t) { return reinterpret_cast<std::uintptr_t>(t.impl().storage.get()); }, py::arg("tensor"));
  m.def("_storage_nbytes", [](const Tensor& t) { return t.impl().storage->bytes(); }, py::arg("tensor"));
  m.def("_storage_bytes", [](const Tensor& t) {
    Tensor host;
    {
      py::gil_scoped_release release;
      host = wholeStorage(t).cpu();
    }
    return py::bytes(static_cast<const char*>(host.data_ptr()), host.nbytes());
  }, py::arg("tensor"), "The bytes of the storage under `tensor`, copied to the host.");
  m.def("_storage_from_bytes", [](const py::bytes& data, const DType& dtype, py::handle device) {
    const std::string_view bytes = data;
    const std::size_t item = elementSize(dtype);
    if (bytes.size() % item != 0) {
      throw py::value_error("torch.load: a storage of " + std::to_string(bytes.size()) + " bytes cannot hold " +
                            scalarTypeName(dtype) + " elements of " + std::to_string(item) + " bytes: the file is damaged");
    }
    Tensor host = Tensor::empty({static_cast<std::int64_t>(bytes.size() / item)}, dtype, kCPU);
    if (!bytes.empty()) std::memcpy(host.data_ptr(), bytes.data(), bytes.size());
    const Device target = deviceFrom(device);
    py::gil_scoped_release release;
    return target.isCpu() ? host : host.to(target);
  }, py::arg("data"), py::arg("dtype"), py::arg("device"), "A one-dimensional tensor over a new storage holding `data`.");
  m.def("_view_of_storage", [](const Tensor& storage, const Shape& size, const Shape& stride, std::int64_t offset) {
    // A file names the view; nothing it says may reach outside the storage it names.
    auto damaged = [&](const std::string& why) {
      return py::value_error("torch.load: a tensor of size " + shapeStr(size) + ", stride " + shapeStr(stride) + " and offset " +
                             std::to_string(offset) + " " + why + ": the file is damaged");
    };
    if (size.size() != stride.size()) throw damaged("has as many strides as sizes, it must");
    const std::int64_t elements = storage.numel();
    if (offset < 0 || offset > elements) throw damaged("starts outside its storage of " + std::to_string(elements) + " elements");
    std::int64_t last = offset;  // the furthest element the view reaches
    bool empty = false;
    for (std::size_t d = 0; d < size.size(); ++d) {
      if (size[d] < 0 || stride[d] < 0) throw damaged("has a negative size or stride");
      if (size[d] == 0) empty = true;
    }
    if (!empty) {
      for (std::size_t d = 0; d < size.size(); ++d) {
        if (stride[d] != 0 && size[d] - 1 > (std::numeric_limits<std::int64_t>::max() - last) / stride[d]) throw damaged("overflows");
        last += (size[d] - 1) * stride[d];
      }
      if (last >= elements) throw damaged("reaches past its storage of " + std::to_string(elements) + " elements");
    }
    auto impl = std::make_shared<TensorImpl>();
    impl->storage = storage.impl().storage;
    impl->sizes = size;
    impl->strides = stride;
    impl->offset = offset;
    impl->dtype = storage.dtype();
    return Tensor(std::move(impl));
  }, py::arg("storage"), py::arg("size"), py::arg("stride"), py::arg("offset"),
        "A view of `storage` (from _storage_from_bytes), checked to lie inside it.");
}

}  // namespace gpulab::python
