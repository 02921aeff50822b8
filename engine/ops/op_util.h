#pragma once
// Small helpers shared by the op implementations (not part of the public API).
#include <string>
#include <vector>

#include "engine/autograd/node.h"
#include "engine/kernels/backend.h"
#include "engine/kernels/functors.h"
#include "engine/runtime/device_runtime.h"
#include "engine/core/errors.h"
#include "engine/core/generator.h"
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

// The counters a random draw of `count` from `gen` on `device` starts at: the generator's seed and
// its next `count` counters -- or, while this thread's stream of `device` captures a CUDA graph, the
// graph's, which each replay advances on the default generator (cuda::capturedRandomCounters), so a
// captured dropout draws new numbers at every replay. Another generator inside a capture is refused
// (factory.cpp).
fn::RandomCounters randomCounters(const char* op, Generator& gen, Device device, std::uint64_t count);

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
