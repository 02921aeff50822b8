#pragma once
// The one dtype dispatch, used by the CPU and the CUDA kernels alike: a runtime DType becomes a C++
// element type, and the kernel body is instantiated once per type it supports. Kernels load elements,
// compute in OpMath<T> (float for the 16-bit types, as PyTorch's "opmath" type) and round once when
// storing. A dtype a kernel does not support is refused with PyTorch's words:
//   "softmax" not implemented for 'Long'
//
//   dispatchFloating(t.dtype(), "softmax", [&](auto tag) {
//     using T = typename decltype(tag)::type;     // float, double, Half or BFloat16
//     ...
//   });
#include <cstdint>
#include <string>
#include <utility>

#include "engine/core/dtype.h"
#include "engine/core/errors.h"
#include "engine/core/half.h"

namespace gpulab {

template <class T>
struct TypeTag {
  using type = T;
};

template <class T>
struct OpMathType {
  using type = T;
};
template <>
struct OpMathType<Half> {
  using type = float;
};
template <>
struct OpMathType<BFloat16> {
  using type = float;
};
// The type arithmetic on T happens in.
template <class T>
using OpMath = typename OpMathType<T>::type;

// The DType of an element type (the inverse of the dispatch).
template <class T>
constexpr DType dtypeOf();
template <> constexpr DType dtypeOf<float>() { return kFloat32; }
template <> constexpr DType dtypeOf<double>() { return kFloat64; }
template <> constexpr DType dtypeOf<Half>() { return kFloat16; }
template <> constexpr DType dtypeOf<BFloat16>() { return kBFloat16; }
template <> constexpr DType dtypeOf<std::int64_t>() { return kInt64; }
template <> constexpr DType dtypeOf<bool>() { return kBool; }

[[noreturn]] inline void throwNotImplementedFor(const char* op, DType dtype) {
  throw NotImplementedError(std::string("\"") + op + "\" not implemented for '" + scalarTypeName(dtype) + "'");
}

// float32, float64, float16, bfloat16.
template <class F>
decltype(auto) dispatchFloating(DType dtype, const char* op, F&& f) {
  switch (dtype) {
    case DType::Float32: return f(TypeTag<float>{});
    case DType::Float64: return f(TypeTag<double>{});
    case DType::Float16: return f(TypeTag<Half>{});
    case DType::BFloat16: return f(TypeTag<BFloat16>{});
    default: throwNotImplementedFor(op, dtype);
  }
}

// The floating types and int64: every dtype arithmetic runs in (the op layer computes on bool tensors
// through int64).
template <class F>
decltype(auto) dispatchAll(DType dtype, const char* op, F&& f) {
  if (dtype == DType::Int64) return f(TypeTag<std::int64_t>{});
  return dispatchFloating(dtype, op, std::forward<F>(f));
}

// Every dtype, bool included: the kernels that only move, convert or select values (fill, copy, where).
template <class F>
decltype(auto) dispatchWithBool(DType dtype, const char* op, F&& f) {
  if (dtype == DType::Bool) return f(TypeTag<bool>{});
  return dispatchAll(dtype, op, std::forward<F>(f));
}

}  // namespace gpulab
