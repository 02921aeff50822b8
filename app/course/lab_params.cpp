#include "app/course/lab_params.h"

#include <algorithm>
#include <cstdint>
#include <string_view>
#include <vector>

#include "engine/core/device.h"
#include "engine/core/errors.h"
#include "engine/core/number_format.h"
#include "engine/memory/caching_allocator.h"
#include "engine/memory/host_memory.h"
#include "engine/runtime/cuda_runtime.h"

namespace gpulab::course {

namespace {

constexpr std::int64_t kMaxWidth = 65536;
constexpr std::size_t kMaxHiddenLayers = 64;
// What one parameter costs while training, in float32: its value, its gradient and Adam's two moments.
constexpr std::int64_t kTrainingBytesPerParameter = 16;

std::int64_t widthAt(std::string_view item, const std::string& expected) {
  if (item.empty()) throw ValueError("an empty width (one comma too many?); " + expected);
  std::int64_t w = 0;
  if (item[0] == '+' || parseNumber(item, w) != ParseStatus::Ok || w < 1 || w > kMaxWidth) {
    throw ValueError("'" + std::string(item) + "' is not a width; " + expected);
  }
  return w;
}

}  // namespace

void checkHiddenWidths(const std::string& text) {
  const std::string expected = "expected comma-separated widths from 1 to " + formatNumber(kMaxWidth) + ", e.g. 256,128,100";
  if (text.empty()) throw ValueError("no widths; " + expected);
  const std::size_t layers = static_cast<std::size_t>(std::count(text.begin(), text.end(), ',')) + 1;
  const std::int64_t maxParameters = hostMemoryCapacity().total / kTrainingBytesPerParameter;
  const std::string fits = "at most " + std::to_string(kMaxHiddenLayers) + " layers and " + formatNumber(maxParameters) +
                           " parameters fit this machine's " + formatBytes(hostMemoryCapacity().total) + " of memory";
  if (layers > kMaxHiddenLayers) throw ValueError(std::to_string(layers) + " hidden layers; " + fits);
  std::vector<std::int64_t> widths;
  for (std::size_t at = 0;;) {
    const std::size_t comma = text.find(',', at);
    widths.push_back(widthAt(std::string_view(text).substr(at, comma == std::string::npos ? std::string::npos : comma - at), expected));
    if (comma == std::string::npos) break;
    at = comma + 1;
  }
  // The weights and biases between the hidden layers; the layers from the input and to the output
  // depend on the data set and come on top.
  std::int64_t parameters = 0;
  for (std::size_t i = 1; i < widths.size(); ++i) parameters += widths[i - 1] * widths[i] + widths[i];
  if (maxParameters > 0 && parameters > maxParameters) {
    throw ValueError("the connections between these hidden layers alone have " + formatNumber(parameters) +
                     " parameters, which would need " + formatBytes(parameters * kTrainingBytesPerParameter) +
                     " to train (value, gradient and two Adam moments in float32); " + fits);
  }
}

void checkDeviceString(const std::string& text) {
  if (text != "auto") (void)Device::parse(text);
}

lab::ParamSpec deviceParam(std::string name, std::string description) {
  lab::ParamSpec spec = lab::textParam(std::move(name), "auto", description + ": auto (the GPU if one is usable, else the CPU), cpu, cuda or cuda:N",
                                       checkDeviceString);
  spec.suggestions.push_back("auto");
  spec.suggestionLabels.push_back("auto (the GPU if one is usable, else the CPU)");
  for (const cuda::DeviceChoice& d : cuda::availableDevices()) {
    spec.suggestions.push_back(d.device.str());
    spec.suggestionLabels.push_back(d.label);
  }
  return spec;
}

}  // namespace gpulab::course
