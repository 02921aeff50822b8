#pragma once
// A device names where a tensor's memory lives: "cpu" or "cuda:N", parsed and printed exactly as
// PyTorch does so that error messages read the same.
#include <string>
#include <string_view>

namespace gpulab {

enum class DeviceType { CPU, CUDA };

class Device {
 public:
  constexpr Device() = default;
  constexpr Device(DeviceType type, int index = 0) : type_(type), index_(type == DeviceType::CPU ? 0 : index) {}
  // Accepts "cpu", "cuda", "cuda:N"; throws ValueError naming the string otherwise.
  static Device parse(std::string_view text);

  constexpr DeviceType type() const { return type_; }
  constexpr int index() const { return index_; }
  constexpr bool isCpu() const { return type_ == DeviceType::CPU; }
  constexpr bool isCuda() const { return type_ == DeviceType::CUDA; }
  std::string str() const;  // "cpu" or "cuda:0"

  friend constexpr bool operator==(Device a, Device b) { return a.type_ == b.type_ && a.index_ == b.index_; }

 private:
  DeviceType type_ = DeviceType::CPU;
  int index_ = 0;
};

inline const Device kCPU{DeviceType::CPU};

}  // namespace gpulab
