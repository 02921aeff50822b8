#include "lessons/labs/training.h"

#include <algorithm>
#include <string_view>

#include "engine/autograd/grad_mode.h"
#include "engine/core/errors.h"
#include "engine/core/number_format.h"
#include "engine/data/dataloader.h"
#include "engine/memory/caching_allocator.h"
#include "engine/memory/memory_events.h"
#include "engine/memory/raw_allocator.h"
#include "engine/runtime/cuda_runtime.h"

namespace gpulab::labs {

namespace {

constexpr std::int64_t kMaxWidth = 65536;
constexpr std::size_t kMaxHiddenLayers = 64;
// What one parameter costs while training, in float32: its value, its gradient and Adam's two moments.
constexpr std::int64_t kTrainingBytesPerParameter = 16;

// The widths in `text`, or a ValueError saying what is wrong (Params and parseWidths add the value
// and the parameter's name).
std::vector<std::int64_t> widthsOf(std::string_view text) {
  const std::string expected = "expected comma-separated widths from 1 to " + formatNumber(kMaxWidth) + ", e.g. 256,128,100";
  if (text.empty()) throw ValueError("no widths; " + expected);
  const std::size_t layers = static_cast<std::size_t>(std::count(text.begin(), text.end(), ',')) + 1;
  const std::int64_t maxParameters = hostMemoryCapacity().total / kTrainingBytesPerParameter;
  const std::string fits = "at most " + std::to_string(kMaxHiddenLayers) + " layers and " + formatNumber(maxParameters) +
                           " parameters fit this machine's " + formatBytes(hostMemoryCapacity().total) + " of memory";
  if (layers > kMaxHiddenLayers) throw ValueError(std::to_string(layers) + " hidden layers; " + fits);
  std::vector<std::int64_t> widths;
  std::size_t at = 0;
  while (true) {
    const std::size_t comma = text.find(',', at);
    const std::string_view item = text.substr(at, comma == std::string_view::npos ? std::string_view::npos : comma - at);
    if (item.empty()) throw ValueError("an empty width (one comma too many?); " + expected);
    std::int64_t w = 0;
    if (item[0] == '+' || parseNumber(item, w) != ParseStatus::Ok || w < 1 || w > kMaxWidth) {
      throw ValueError("'" + std::string(item) + "' is not a width; " + expected);
    }
    widths.push_back(w);
    if (comma == std::string_view::npos) break;
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
  return widths;
}

}  // namespace

std::vector<std::int64_t> parseWidths(const std::string& text) {
  try {
    return widthsOf(text);
  } catch (const ValueError& e) {
    throw ValueError("invalid value '" + text + "' for parameter 'hidden': " + e.what());
  }
}

void checkHiddenWidths(const std::string& text) { (void)widthsOf(text); }

void checkDeviceString(const std::string& text) {
  if (text != "auto") (void)Device::parse(text);
}

Device resolveDevice(const std::string& text) {
  if (text == "auto") return defaultDevice();
  Device d = Device::parse(text);
  cuda::checkDeviceUsable(d);
  return d;
}

std::shared_ptr<nn::Sequential> makeMlp(const data::Dataset& data, const std::vector<std::int64_t>& hidden,
                                        std::int64_t outputs, Generator& gen) {
  MemoryCategoryScope tag(MemoryCategory::Parameter);
  std::int64_t width = 1;
  for (std::int64_t s : data.inputShape()) width *= s;
  auto model = std::make_shared<nn::Sequential>();
  if (data.inputShape().size() > 1) model->push_back(std::make_shared<nn::Flatten>());
  for (std::int64_t h : hidden) {
    model->push_back(std::make_shared<nn::Linear>(width, h, true, gen));
    model->push_back(std::make_shared<nn::ReLU>());
    width = h;
  }
  model->push_back(std::make_shared<nn::Linear>(width, outputs, true, gen));
  return model;
}

std::unique_ptr<optim::Optimizer> makeOptimizer(const std::string& name, const std::vector<Tensor>& params, double lr,
                                                double momentum, double wd) {
  if (name == "sgd") return std::make_unique<optim::SGD>(params, optim::SGDOptions{.lr = lr, .momentum = momentum, .weight_decay = wd});
  if (name == "adamw") return std::make_unique<optim::AdamW>(params, optim::AdamOptions{.lr = lr, .weight_decay = wd});
  if (name == "adam") return std::make_unique<optim::Adam>(params, optim::AdamOptions{.lr = lr, .weight_decay = wd});
  throw ValueError("unknown optimizer '" + name + "' (sgd, adam, adamw)");
}

Tensor taskLoss(bool classification, const Tensor& output, const Tensor& target, Reduction reduction) {
  return classification ? cross_entropy(output, target, reduction) : mse_loss(output, target, reduction);
}

Tensor accumulateGradients(nn::Module& model, bool classification, const data::Batch& batch, Device device,
                           int accumulate, bool nonBlocking) {
  Tensor x, y;
  {
    MemoryCategoryScope tag(MemoryCategory::InputBatch);
    x = batch.inputs.to(device, nonBlocking);
    y = batch.targets.to(device, nonBlocking);
  }
  Tensor loss = taskLoss(classification, model(x), y);
  (accumulate > 1 ? loss * (1.0 / accumulate) : loss).backward();
  return loss.detach();
}

}  // namespace gpulab::labs
