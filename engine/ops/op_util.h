#pragma once
// Small helpers shared by the op implementations (not part of the public API).
#include <string>
#include <vector>

#include "engine/autograd/node.h"
#include "engine/kernels/backend.h"
#include "engine/runtime/device_runtime.h"
#include "engine/core/errors.h"
#include "engine/ops/ops.h"

namespace gpulab::detail {

using Grads = std::vector<Tensor>;
using Needs = std::vector<bool>;

inline Backend& backendOf(const Tensor& t) { return backendFor(t.device()); }

inline Tensor emptyLike(const Tensor& t, DType dtype) { return Tensor::empty(t.sizes(), dtype, t.device()); }
inline Tensor emptyLike(const Tensor& t) { return emptyLike(t, t.dtype()); }

// Ops defined for floating dtypes only refuse int64 with PyTorch's words ("softmax" not implemented
// for 'Long').
inline void requireFloat(const char* op, const Tensor& t) {
  if (!isFloatingPoint(t.dtype())) {
    throw NotImplementedError(std::string("\"") + op + "\" not implemented for '" + scalarTypeName(t.dtype()) + "'");
  }
}

// Random draws take their seed and offset from a generator on the host: captured in a CUDA graph,
// every replay would draw the capture's numbers again (PyTorch keeps the offset on the device for
// this). Refused while the tensor's device captures on this thread's stream (factory.cpp).
void refuseRandomInCapture(const char* op, Device device);

// The C++ type name PyTorch prints in dtype-mismatch errors: float, double, c10::Half, c10::BFloat16, long int.
inline std::string cppTypeName(DType t) {
  switch (t) {
    case DType::Float32: return "float";
    case DType::Float64: return "double";
    case DType::Float16: return "c10::Half";
    case DType::BFloat16: return "c10::BFloat16";
    case DType::Int64: return "long int";
    case DType::Bool: return "bool";
  }
  return "unknown";
}

// A view of `base` with other sizes/strides/offset, sharing its storage (no autograd).
Tensor makeView(const Tensor& base, Shape sizes, Shape strides, std::int64_t offset);

Shape broadcastShapes(const Shape& a, const Shape& b);

}  // namespace gpulab::detail
