#include "lessons/labs/training.h"

#include <sstream>

#include "engine/autograd/grad_mode.h"
#include "engine/core/errors.h"
#include "engine/data/dataloader.h"
#include "engine/memory/memory_events.h"
#include "engine/runtime/cuda_runtime.h"

namespace gpulab::labs {

std::vector<std::int64_t> parseWidths(const std::string& text) {
  std::vector<std::int64_t> widths;
  std::stringstream ss(text);
  std::string item;
  while (std::getline(ss, item, ',')) {
    char* end = nullptr;
    const long long w = std::strtoll(item.c_str(), &end, 10);
    if (item.empty() || *end != '\0' || w < 1 || w > 65536) {
      throw ValueError("invalid value '" + text + "' for parameter 'hidden': expected comma-separated widths from 1 to 65536, e.g. 256,128,100");
    }
    widths.push_back(w);
  }
  if (widths.empty()) throw ValueError("parameter 'hidden' needs at least one width, e.g. 64");
  return widths;
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
