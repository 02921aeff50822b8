#pragma once
// gpulab._C: the engine's objects as Python objects, under the names PyTorch gives them. The binding
// is thin: a Python Tensor *is* an engine Tensor (a handle to the same TensorImpl, never a copy), ops
// are the engine's ops, and the GIL is released around engine work that may block. What PyTorch writes
// in plain Python (nn.Module, optim's param groups, printing, DataLoader's iteration) lives in the
// gpulab package's .py files over these bindings, as the design notes ask.
#include <pybind11/pybind11.h>

#include <optional>
#include <string>

#include "engine/core/device.h"
#include "engine/core/dtype.h"
#include "engine/core/tensor.h"
#include "engine/ops/ops.h"

namespace gpulab::python {

namespace py = pybind11;

// A Python object's type name, for error messages ("got str").
inline std::string typeName(py::handle object) { return py::str(py::type::of(object).attr("__name__")); }
// A Python number, as the engine's scalar operands take it (bool counts as a number, as in Python).
inline bool isNumber(py::handle o) { return py::isinstance<py::int_>(o) || py::isinstance<py::float_>(o); }

// Releases the GIL for the call: for bindings whose arguments are all C++ values.
using NoGil = py::call_guard<py::gil_scoped_release>;

// The Python types the package defines in Python (torch.Size, torch.device, torch.dtype's objects),
// registered by gpulab/__init__.py through _C._register_types before any tensor is made.
struct PythonTypes {
  py::object size;    // torch.Size: a tuple subclass
  py::object device;  // torch.device(type, index)
};
PythonTypes& pythonTypes();

// A device argument as PyTorch takes one: "cuda:0", "cpu", "cuda" (the current CUDA device), an int
// (a CUDA ordinal), or a torch.device. Throws TypeError for anything else.
Device deviceFrom(py::handle object);
// torch.cuda's device arguments: None for the current CUDA device, else as deviceFrom; a CPU device is
// a ValueError ("Expected a cuda device").
Device cudaDeviceOrCurrent(py::handle device);
// An engine Device as a torch.device.
py::object deviceObject(Device device);
// A shape given as PyTorch takes one: f(2, 3), f((2, 3)), f([2, 3]), f(torch.Size([2, 3])).
Shape shapeFrom(const py::args& args, const char* function);
Shape shapeFromSequence(py::handle sequence, const char* function);
py::object sizeObject(const Shape& shape);
// The one torch.dtype object of each dtype (so that `x.dtype is torch.float32` holds, as in PyTorch).
py::object dtypeObject(DType dtype);
// A tensor from Python data (nested sequences of numbers, a number, a tensor).
Tensor tensorFromData(py::handle data, std::optional<DType> dtype, std::optional<Device> device, bool requiresGrad);
// A numpy array as a tensor over the same memory (torch.from_numpy); nothing when `object` is not an
// ndarray. Never imports numpy itself.
std::optional<Tensor> sharedFromNumpy(py::handle object);
// torch.where(condition, input, other) where input and other may each be a tensor or a Python number.
Tensor whereOf(const Tensor& condition, py::handle input, py::handle other);

// A Python number as PyTorch's Scalar holds it: a bool, an int with all its 64 bits (a double holds
// integers exactly only up to 2^53), or a float. An int past int64 is kept as its double (`exact`
// false): PyTorch 2 turns it into a floating Scalar too, which an int64 tensor then refuses.
struct Number {
  enum Kind { Bool, Int, Float } kind = Float;
  std::int64_t i = 0;
  double d = 0;
  bool exact = true;
  double value() const { return kind == Float || !exact ? d : static_cast<double>(i); }
};
// torch.mm and Tensor.mm: matrices only (torch.matmul is the one that takes 1-D and batched operands),
// refused with PyTorch's words ("self must be a matrix").
Tensor mmOf(const Tensor& a, const Tensor& b);

// bool, int, float, or a one-element tensor (its value); nothing for anything else.
std::optional<Number> numberFrom(py::handle object);
// The dtype PyTorch gives a number alone (torch.full's fill_value): bool, int64 or the default float32.
DType dtypeOf(const Number& n);
// A tensor of `shape` filled with `n`, exactly (torch.full): into int64 an int keeps its 64 bits, and
// NaN, the infinities and values past int64's range raise PyTorch's "value cannot be converted to type
// int64_t without overflow".
Tensor filled(const Shape& shape, const Number& n, const Options& options);

void bindTypes(py::module_& m);    // dtype, device helpers, Size registration, exceptions
void bindTensor(py::module_& m);   // the Tensor class
void bindFunctions(py::module_& m);  // torch.* functions: creation, math, nn.functional's ops
void bindRuntime(py::module_& m);  // grad mode, seeds, torch.cuda (devices, memory, synchronisation)
void bindOptimizers(py::module_& m);  // the engine's SGD, Adam and AdamW under torch.optim
void bindData(py::module_& m);        // the engine's DataLoader over (inputs, targets)
void bindAmpAndProfiler(py::module_& m);  // autocast, GradScaler, the profiler, the backends' switches
void bindStreams(py::module_& m);     // torch.cuda.Stream, Event, current_stream, stream contexts
void bindNumpy(py::module_& m);       // Tensor.numpy() and torch.from_numpy, sharing memory
void bindSerialization(py::module_& m);  // storages as bytes and views of them, for torch.save and torch.load

}  // namespace gpulab::python
