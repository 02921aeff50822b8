#include "lessons/labs/training.h"

#include <algorithm>
#include <cmath>
#include <functional>
#include <numeric>
#include <limits>
#include <optional>
#include <string_view>

#include "engine/autograd/grad_mode.h"
#include "engine/core/errors.h"
#include "engine/core/number_format.h"
#include "engine/data/dataloader.h"
#include "engine/memory/caching_allocator.h"
#include "engine/memory/host_memory.h"
#include "engine/runtime/device_memory.h"
#include "engine/memory/memory_events.h"
#include "engine/runtime/cuda_runtime.h"
#include "engine/runtime/device_runtime.h"
#include "engine/runtime/execution_context.h"
#include "engine/runtime/stream.h"

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

lab::ParamSpec cudaDeviceParam(std::string name, std::string description) {
  lab::ParamSpec spec = lab::textParam(std::move(name), "cuda", description + ": cuda or cuda:N", [](const std::string& text) {
    if (text == "auto" || !Device::parse(text).isCuda()) {
      throw ValueError("streams belong to CUDA devices, and '" + text + "' is not one: work on the CPU is done when an op "
                       "returns. Choose cuda or cuda:N (the emulated GPU, without an NVIDIA GPU)");
    }
  });
  for (const cuda::DeviceChoice& d : cuda::availableDevices()) {
    if (!d.device.isCuda()) continue;
    spec.suggestions.push_back(d.device.str());
    spec.suggestionLabels.push_back(d.label);
  }
  return spec;
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

namespace {

// The hidden blocks (Linear, ReLU) from `width` inputs and the output Linear, appended to `model`.
// Hidden block i goes to checkpoint segment i * segments / blocks (segments as even as they can be).
void appendClassifier(nn::Sequential& model, std::int64_t width, const std::vector<std::int64_t>& hidden, std::int64_t outputs,
                      Generator& gen, int checkpointSegments) {
  const auto blocks = static_cast<std::int64_t>(hidden.size());
  const std::int64_t segments = std::min<std::int64_t>(checkpointSegments, blocks);
  std::shared_ptr<nn::Sequential> segment;
  std::int64_t segmentIndex = -1;
  for (std::int64_t i = 0; i < blocks; ++i) {
    auto linear = std::make_shared<nn::Linear>(width, hidden[static_cast<std::size_t>(i)], true, gen);
    auto relu = std::make_shared<nn::ReLU>();
    width = hidden[static_cast<std::size_t>(i)];
    if (segments <= 0) {
      model.push_back(linear);
      model.push_back(relu);
      continue;
    }
    if (const std::int64_t s = i * segments / blocks; s != segmentIndex) {
      segmentIndex = s;
      segment = std::make_shared<nn::Sequential>();
      model.push_back(std::make_shared<nn::Checkpoint>(segment));
    }
    segment->push_back(linear);
    segment->push_back(relu);
  }
  model.push_back(std::make_shared<nn::Linear>(width, outputs, true, gen));
}

}  // namespace

std::shared_ptr<nn::Sequential> makeMlp(const data::Dataset& data, const std::vector<std::int64_t>& hidden,
                                        std::int64_t outputs, Generator& gen, int checkpointSegments) {
  MemoryCategoryScope tag(MemoryCategory::Parameter);
  std::int64_t width = 1;
  for (std::int64_t s : data.inputShape()) width *= s;
  auto model = std::make_shared<nn::Sequential>();
  if (data.inputShape().size() > 1) model->push_back(std::make_shared<nn::Flatten>());
  appendClassifier(*model, width, hidden, outputs, gen, checkpointSegments);
  return model;
}

std::shared_ptr<nn::Sequential> makeCnn(const data::Dataset& data, const std::vector<std::int64_t>& hidden,
                                        std::int64_t outputs, Generator& gen, int checkpointSegments) {
  const Shape in = data.inputShape();
  if (in.size() != 3 || in[1] < 4 || in[2] < 4) {
    std::string shape;
    for (std::int64_t s : in) shape += (shape.empty() ? "" : ", ") + std::to_string(s);
    throw ValueError("the CNN takes images (channels, height, width) of at least 4 x 4, but this data set's examples have shape [" +
                     shape + "]: choose --dataset fashion-mnist, or --model mlp");
  }
  MemoryCategoryScope tag(MemoryCategory::Parameter);
  constexpr std::int64_t kChannels1 = 32, kChannels2 = 64;
  auto model = std::make_shared<nn::Sequential>();
  // Each block: convolution (no bias: the batch norm's shift replaces it), batch norm, ReLU, pooling --
  // the batch norm is what lets this small net pass 0.92 in a few epochs without overfitting.
  model->push_back(std::make_shared<nn::Conv2d>(in[0], kChannels1, 3, 1, 1, 1, 1, false, gen));
  model->push_back(std::make_shared<nn::BatchNorm2d>(kChannels1));
  model->push_back(std::make_shared<nn::ReLU>());
  model->push_back(std::make_shared<nn::MaxPool2d>(2));
  model->push_back(std::make_shared<nn::Conv2d>(kChannels1, kChannels2, 3, 1, 1, 1, 1, false, gen));
  model->push_back(std::make_shared<nn::BatchNorm2d>(kChannels2));
  model->push_back(std::make_shared<nn::ReLU>());
  model->push_back(std::make_shared<nn::MaxPool2d>(2));
  model->push_back(std::make_shared<nn::Flatten>());
  // 3 x 3 convolutions with padding 1 keep the size; each 2 x 2 pooling halves it, rounding down.
  appendClassifier(*model, kChannels2 * (in[1] / 2 / 2) * (in[2] / 2 / 2), hidden, outputs, gen, checkpointSegments);
  return model;
}

lab::ParamSpec lrScheduleParam() {
  return lab::choiceParam("lr_schedule", "constant", {"constant", "cosine"},
                          "The learning rate over the run: constant, or cosine (CosineAnnealingLR over all the steps: from lr "
                          "down to 0)");
}

LrSchedule::LrSchedule(const std::string& kind, double lr, std::int64_t totalSteps)
    : cosine_(kind == "cosine"), lr_(lr), total_(std::max<std::int64_t>(totalSteps, 1)) {
  if (kind != "constant" && kind != "cosine") throw ValueError("unknown lr_schedule '" + kind + "' (constant, cosine)");
}

void LrSchedule::step(optim::Optimizer& optimizer) {
  ++done_;
  if (!cosine_) return;
  const double t = static_cast<double>(std::min(done_, total_)) / static_cast<double>(total_);
  optimizer.setLearningRate(0.5 * lr_ * (1.0 + std::cos(3.14159265358979323846 * t)));
}

double median(std::vector<double> v) {
  if (v.empty()) return std::numeric_limits<double>::quiet_NaN();
  std::sort(v.begin(), v.end());
  return v.size() % 2 ? v[v.size() / 2] : 0.5 * (v[v.size() / 2 - 1] + v[v.size() / 2]);
}

double secondsSince(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

std::string fasterOrSlower(double ratio) {
  return ratio >= 1 ? formatGeneral(ratio, 3) + "x faster" : formatGeneral(1.0 / ratio, 3) + "x slower";
}

void requireHostMemory(double bytes, const std::string& needs, const std::string& advice) {
  const auto free = static_cast<double>(hostSegmentBytesLeft());
  if (bytes <= 0.5 * free) return;
  constexpr double kGiB = 1024.0 * 1024.0 * 1024.0;
  throw ValueError(needs + " needs about " + formatGeneral(bytes / kGiB, 3) + " GiB of the CPU's memory, more than half of the " +
                   formatGeneral(free / kGiB, 3) + " GiB this machine has free: " + advice);
}

// Calibrated on this engine (2026-11-27, the CPU): makeCnn's step on Fashion-MNIST peaked at 0.56 MB
// an image at batch 2048 -- about the forward's outputs once, since backward frees each as it passes;
// the estimates take 1.5 times that. The convolutions' column buffers are a capped workspace (~16 MiB),
// counted in cnnStateBytes.
constexpr double kStepFactor = 1.5;

double mlpStepBytesPerExample(std::int64_t inputs, const std::vector<std::int64_t>& hidden, std::int64_t outputs) {
  double floats = static_cast<double>(inputs + outputs);
  for (std::int64_t h : hidden) floats += 2.0 * static_cast<double>(h);  // the layer's output and its ReLU's
  return 4.0 * kStepFactor * floats;
}

double cnnStepBytesPerExample(const Shape& input, const std::vector<std::int64_t>& hidden, std::int64_t outputs) {
  constexpr double kChannels1 = 32, kChannels2 = 64;  // makeCnn's
  const double plane = static_cast<double>(input.size() == 3 ? input[1] * input[2] : 1), channels = input.empty() ? 1.0 : static_cast<double>(input[0]);
  const double block1 = 3.0 * kChannels1 * plane + 3.0 * kChannels1 * plane / 4;       // conv, norm, ReLU; pooled + its indices
  const double block2 = 3.0 * kChannels2 * plane / 4 + 3.0 * kChannels2 * plane / 16;  // the same a quarter the size
  const auto flat = static_cast<std::int64_t>(kChannels2 * plane / 16);
  return 4.0 * kStepFactor * (channels * plane + block1 + block2) + mlpStepBytesPerExample(flat, hidden, outputs);
}

double mlpStateBytes(std::int64_t inputs, const std::vector<std::int64_t>& hidden, std::int64_t outputs) {
  double numbers = 0;
  std::int64_t in = inputs;
  for (std::int64_t h : hidden) {
    numbers += static_cast<double>(in) * static_cast<double>(h) + static_cast<double>(h);
    in = h;
  }
  numbers += static_cast<double>(in) * static_cast<double>(outputs) + static_cast<double>(outputs);
  return 4.0 * 4.0 * numbers;
}

double cnnStateBytes(const Shape& input, const std::vector<std::int64_t>& hidden, std::int64_t outputs) {
  const std::int64_t plane = input.size() == 3 ? (input[1] / 4) * (input[2] / 4) : 1;
  constexpr double kWorkspace = 64.0 * 1024 * 1024;  // the convolutions' column buffers, and room to spare
  return mlpStateBytes(64 * plane, hidden, outputs) + 4.0 * 4.0 * (9.0 * 32 + 9.0 * 32 * 64) + kWorkspace;
}

std::int64_t largestHostBatch(double bytesPerExample, double fixedBytes) {
  const double room = 0.5 * static_cast<double>(hostSegmentBytesLeft()) - fixedBytes;
  return std::max<std::int64_t>(1, static_cast<std::int64_t>(room / bytesPerExample));
}

void requireTrainingMemory(bool onCpu, const data::Dataset& data, bool cnn, const std::vector<std::int64_t>& hidden, std::int64_t outputs,
                           std::int64_t asked, const std::string& hiddenParam) {
  if (!onCpu) return;
  const std::int64_t batch = std::min(asked, data.size());
  const Shape in = data.inputShape();
  const std::int64_t features = std::accumulate(in.begin(), in.end(), std::int64_t{1}, std::multiplies<>());
  const double perExample = cnn ? cnnStepBytesPerExample(in, hidden, outputs) : mlpStepBytesPerExample(features, hidden, outputs);
  const double state = cnn ? cnnStateBytes(in, hidden, outputs) : mlpStateBytes(features, hidden, outputs);
  std::string widths;
  for (std::int64_t h : hidden) widths += (widths.empty() ? "" : ",") + std::to_string(h);
  requireHostMemory(state, hiddenParam + " " + widths + ": the model with its gradients and optimizer state", "choose narrower layers");
  requireHostMemory(state + static_cast<double>(batch) * perExample,
                    "batch_size " + std::to_string(asked) + (batch < asked ? " (the whole training set, " + std::to_string(batch) + ")" : "") +
                        ": a training step of this " + (cnn ? "CNN" : "MLP"),
                    "choose a batch_size of at most " + std::to_string(largestHostBatch(perExample, state)));
}

std::shared_ptr<data::TensorDataset> firstExamples(const std::shared_ptr<data::TensorDataset>& ds, std::int64_t n) {
  if (n <= 0 || n >= ds->size()) return ds;
  return std::make_shared<data::TensorDataset>(ds->inputs().slice(0, 0, n), ds->targets().slice(0, 0, n));
}

std::unique_ptr<optim::Optimizer> makeOptimizer(const std::string& name, const std::vector<Tensor>& params, double lr,
                                                double momentum, double wd, bool capturable) {
  if (name == "sgd") return std::make_unique<optim::SGD>(params, optim::SGDOptions{.lr = lr, .momentum = momentum, .weight_decay = wd});
  // The lab always passes its weight_decay parameter (default 0.0), so "adamw" here runs without decay
  // unless the learner sets it; optim::AdamW's own default (0.01, as PyTorch) applies only when unset.
  if (name == "adamw") return std::make_unique<optim::AdamW>(params, optim::AdamOptions{.lr = lr, .weight_decay = wd, .capturable = capturable});
  if (name == "adam") return std::make_unique<optim::Adam>(params, optim::AdamOptions{.lr = lr, .weight_decay = wd, .capturable = capturable});
  throw ValueError("unknown optimizer '" + name + "' (sgd, adam, adamw)");
}

Tensor taskLoss(bool classification, const Tensor& output, const Tensor& target, Reduction reduction) {
  return classification ? cross_entropy(output, target, reduction) : mse_loss(output, target, reduction);
}

GraphedStep::GraphedStep(LossFn loss, optim::Optimizer& optimizer, const Tensor& inputs, const Tensor& targets) {
  const Device device = inputs.device();
  if (!device.isCuda()) throw ValueError("a CUDA graph captures GPU work, and the batch is on " + device.str() + ": choose a cuda device (the emulated GPU captures too)");
  CudaDeviceGuard onDevice(device.index());  // the graph captures the current CUDA device
  inputs_ = inputs.clone();
  targets_ = targets.clone();
  auto fullStep = [&] {
    Tensor l = loss(inputs_, targets_);
    l.backward();
    optimizer.step();
    return l;
  };
  // 1. Warm-up on a side stream, as PyTorch's recipe does: the optimizer makes its state here, not in
  //    the capture (where it would be made -- zeroed -- again at every replay).
  const cuda::Stream side = cuda::Stream::create(device);
  side.wait_stream(cuda::current_stream(device));
  {
    cuda::StreamGuard on(side);
    for (int i = 0; i < kWarmupSteps; ++i) {
      optimizer.zero_grad();
      fullStep();
    }
  }
  cuda::current_stream(device).wait_stream(side);
  // 2. The capture. The gradients are freed first, so the captured backward makes them afresh, in the
  //    graph's pool: each replay then writes this step's gradients instead of adding to the last.
  optimizer.zero_grad(/*set_to_none=*/true);
  cuda::graph(graph_, [&] { loss_ = fullStep(); });
}

const Tensor& GraphedStep::step(const Tensor& inputs, const Tensor& targets) {
  if (inputs.sizes() != inputs_.sizes() || targets.sizes() != targets_.sizes()) {
    throw ValueError("a CUDA graph replays the shapes it captured: this batch is " + shapeStr(inputs.sizes()) + ", the captured one " +
                     shapeStr(inputs_.sizes()) + " (a DataLoader with drop_last=True keeps every batch full)");
  }
  inputs_.copy_(inputs);
  targets_.copy_(targets);
  graph_.replay();
  return loss_;
}

void synchronizeDevice(Device device) {
  if (device.isCuda()) cuda::synchronize(device.index());
}

void announceDevice(lab::MetricSink& sink, Device device) {
  const std::string label = cuda::deviceLabel(device);
  sink.send(lab::RunDevice{device.str(), label, cuda::isEmulatedGpu(device)});
  std::string line = "Running on " + label;
  if (device.isCpu() && !cuda::isAvailable()) line += " (no usable GPU: " + cuda::availability().reason + ")";
  sink.info(line);
}

}  // namespace gpulab::labs
