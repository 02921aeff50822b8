#include "engine/core/device.h"

#include <charconv>

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
  }
  return "unknown";
}

}  // namespace gpulab
