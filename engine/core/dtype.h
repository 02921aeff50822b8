#pragma once
// Element types, named as PyTorch names them. float32 is the default; float16 and bfloat16 store
// half the bytes (mixed precision), float64 is for finite-difference gradient checks (as
// torch.autograd.gradcheck), int64 carries class labels, bool is what comparisons give (masks for
// where, masked_fill and indexing). The enumerators' values are written into saved state dicts:
// append, never reorder.
#include <cstddef>
#include <cstdint>
#include <string>

namespace gpulab {

enum class DType : std::uint8_t { Float32, Int64, Float16, BFloat16, Float64, Bool };
constexpr DType kLastDType = DType::Bool;

constexpr DType kFloat32 = DType::Float32;
constexpr DType kFloat64 = DType::Float64;
constexpr DType kInt64 = DType::Int64;
constexpr DType kFloat16 = DType::Float16;
constexpr DType kBFloat16 = DType::BFloat16;
constexpr DType kBool = DType::Bool;
// PyTorch's aliases.
constexpr DType kFloat = kFloat32, kDouble = kFloat64, kHalf = kFloat16, kLong = kInt64;

constexpr std::size_t elementSize(DType t) {
  switch (t) {
    case DType::Float32: return 4;
    case DType::Int64:
    case DType::Float64: return 8;
    case DType::Float16:
    case DType::BFloat16: return 2;
    case DType::Bool: return 1;
  }
  return 0;
}

constexpr bool isFloatingPoint(DType t) { return t != DType::Int64 && t != DType::Bool; }
// float16 and bfloat16: the dtypes autocast computes in and GradScaler exists for.
constexpr bool isReducedPrecision(DType t) { return t == DType::Float16 || t == DType::BFloat16; }

// PyTorch's categories of dtypes, lowest first: a 0-dim tensor decides an op's dtype only when its
// category is higher than the other operand's (torch.result_type).
enum class DTypeCategory { Bool, Integral, Floating };
constexpr DTypeCategory categoryOf(DType t) {
  return t == DType::Bool ? DTypeCategory::Bool : t == DType::Int64 ? DTypeCategory::Integral : DTypeCategory::Floating;
}

// torch.result_type for two tensors of the same category (both 0-dim or both not): the wider of
// the two; float16 with bfloat16 gives float32 (neither holds the other); any float with int64 gives
// the float; bool gives way to anything.
constexpr DType promoteTypes(DType a, DType b) {
  if (a == b) return a;
  if (a == DType::Bool) return b;
  if (b == DType::Bool) return a;
  if (a == DType::Int64) return b;
  if (b == DType::Int64) return a;
  if (a == DType::Float64 || b == DType::Float64) return DType::Float64;
  if (a == DType::Float32 || b == DType::Float32) return DType::Float32;
  return DType::Float32;  // float16 with bfloat16
}

// Throws PyTorch's "value cannot be converted to type at::Half without overflow" when a finite
// `value` lies outside `dtype`'s range (fill_, full); infinities and NaN are allowed, as in PyTorch.
void checkScalarFits(double value, DType dtype);

// "float32", "int64", ... (torch.float32 without the module prefix).
std::string dtypeName(DType t);
// The scalar type's name as PyTorch's kernels report it: 'Float', 'Double', 'Half', 'BFloat16', 'Long'
// (as in `"addmm_impl_cpu_" not implemented for 'Half'`).
std::string scalarTypeName(DType t);
// Parses "float32"/"float"/"fp32", "float16"/"half"/"fp16", "bfloat16"/"bf16", "float64"/"double",
// "int64"/"long", "bool"; throws ValueError naming the accepted spellings otherwise.
DType parseDType(const std::string& name);

}  // namespace gpulab
