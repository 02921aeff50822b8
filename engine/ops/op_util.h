#pragma once
// Small helpers shared by the op implementations (not part of the public API).
#include <string>
#include <vector>

#include "engine/autograd/node.h"
#include "engine/backend/backend.h"
#include "engine/core/errors.h"
#include "engine/ops/ops.h"

namespace gpulab::detail {

using Grads = std::vector<Tensor>;
using Needs = std::vector<bool>;

inline Backend& backendOf(const Tensor& t) { return backendFor(t.device()); }

inline Tensor emptyLike(const Tensor& t, DType dtype) { return Tensor::empty(t.sizes(), dtype, t.device()); }
inline Tensor emptyLike(const Tensor& t) { return emptyLike(t, t.dtype()); }

inline void requireFloat(const char* op, const Tensor& t) {
  if (t.dtype() != kFloat32) {
    throw NotImplementedError(std::string("\"") + op + "\" not implemented for '" + dtypeName(t.dtype()) +
                              "' (GPU Lab computes in float32 for now)");
  }
}

// A view of `base` with other sizes/strides/offset, sharing its storage (no autograd).
Tensor makeView(const Tensor& base, Shape sizes, Shape strides, std::int64_t offset);

Shape broadcastShapes(const Shape& a, const Shape& b);

}  // namespace gpulab::detail
