#include "engine/core/device.h"

#include <charconv>
#include <cmath>

#include "engine/core/dtype.h"
#include "engine/core/errors.h"

namespace gpulab {

Device Device::parse(std::string_view text) {
  if (text == "cpu") return Device(DeviceType::CPU);
  if (text == "cuda") return Device(DeviceType::CUDA, 0);
  constexpr std::string_view prefix = "cuda:";
  if (text.substr(0, prefix.size()) == prefix && text.size() > prefix.size()) {
    int index = -1;
    const char* first = text.data() + prefix.size();
    const char* last = text.data() + text.size();
    auto [ptr, ec] = std::from_chars(first, last, index);
    if (ec == std::errc() && ptr == last && index >= 0) return Device(DeviceType::CUDA, index);
    if (ec == std::errc() && ptr == last) throw ValueError("Device index must not be negative");
    throw ValueError("Invalid device string: '" + std::string(text) + "'");  // PyTorch's words, for "cuda:x"
  }
  throw ValueError("Expected one of cpu, cuda device type at start of device string: " + std::string(text));
}

std::string Device::str() const { return isCpu() ? "cpu" : "cuda:" + std::to_string(index_); }

std::string dtypeName(DType t) {
  switch (t) {
    case DType::Float32: return "float32";
    case DType::Int64: return "int64";
    case DType::Float16: return "float16";
    case DType::BFloat16: return "bfloat16";
    case DType::Float64: return "float64";
    case DType::Bool: return "bool";
  }
  return "unknown";
}

void checkScalarFits(double value, DType dtype) {
  if (!std::isfinite(value)) return;
  double largest = 0;
  const char* name = nullptr;
  switch (dtype) {
    case DType::Float16: largest = 65504.0, name = "at::Half"; break;
    case DType::BFloat16: largest = 3.3895313892515355e38, name = "c10::BFloat16"; break;
    case DType::Float32: largest = 3.4028234663852886e38, name = "float"; break;
    default: return;
  }
  if (value > largest || value < -largest) {
    throw ValueError("value cannot be converted to type " + std::string(name) + " without overflow");
  }
}

std::string scalarTypeName(DType t) {
  switch (t) {
    case DType::Float32: return "Float";
    case DType::Int64: return "Long";
    case DType::Float16: return "Half";
    case DType::BFloat16: return "BFloat16";
    case DType::Float64: return "Double";
    case DType::Bool: return "Bool";
  }
  return "unknown";
}

DType parseDType(const std::string& name) {
  if (name == "float32" || name == "float" || name == "fp32") return kFloat32;
  if (name == "float16" || name == "half" || name == "fp16") return kFloat16;
  if (name == "bfloat16" || name == "bf16") return kBFloat16;
  if (name == "float64" || name == "double" || name == "fp64") return kFloat64;
  if (name == "int64" || name == "long") return kInt64;
  if (name == "bool") return kBool;
  throw ValueError("unknown dtype '" + name + "' (expected float32, float16, bfloat16, float64, int64 or bool)");
}

}  // namespace gpulab
