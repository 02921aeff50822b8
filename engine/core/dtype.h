#pragma once
// Element types, named as PyTorch names them. float32 is the compute type today and int64 carries
// class labels; float16/bfloat16 are reserved here so mixed precision (a later lesson) fits in
// without changing any signature: code that does not support a dtype throws NotImplementedError.
#include <cstddef>
#include <cstdint>
#include <string>

namespace gpulab {

enum class DType : std::uint8_t { Float32, Int64, Float16, BFloat16 };

constexpr DType kFloat32 = DType::Float32;
constexpr DType kInt64 = DType::Int64;
constexpr DType kFloat16 = DType::Float16;
constexpr DType kBFloat16 = DType::BFloat16;

constexpr std::size_t elementSize(DType t) {
  switch (t) {
    case DType::Float32: return 4;
    case DType::Int64: return 8;
    case DType::Float16:
    case DType::BFloat16: return 2;
  }
  return 0;
}

// "torch.float32"-style name without the module prefix: "float32", "int64", ...
std::string dtypeName(DType t);

}  // namespace gpulab
