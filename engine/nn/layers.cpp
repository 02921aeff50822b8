#include "engine/nn/layers.h"

#include <cmath>

#include "engine/autograd/checkpoint.h"
#include "engine/autograd/grad_mode.h"
#include "engine/core/errors.h"
#include "engine/core/number_format.h"
#include "engine/memory/memory_events.h"

namespace gpulab::nn {

Linear::Linear(std::int64_t in, std::int64_t out, bool withBias, Generator& gen) : in_features(in), out_features(out) {
  if (in <= 0 || out <= 0) {
    throw ValueError("Linear: in_features and out_features must be positive, got " + std::to_string(in) + " and " +
                     std::to_string(out));
  }
  const double bound = 1.0 / std::sqrt(static_cast<double>(in));
  NoGradGuard noGrad;
  MemoryCategoryScope tag(MemoryCategory::Parameter);
  weight = register_parameter("weight", rand({out, in}, gen) * (2.0 * bound) - bound);
  if (withBias) bias = register_parameter("bias", rand({out}, gen) * (2.0 * bound) - bound);
}

Tensor Linear::forward(const Tensor& input) { return linear(input, weight, bias); }

std::string Linear::extraRepr() const {
  return "in_features=" + std::to_string(in_features) + ", out_features=" + std::to_string(out_features) +
         ", bias=" + (bias.defined() ? "True" : "False");
}

Dropout::Dropout(double p, Generator& gen) : p_(p), gen_(gen) {
  if (p < 0.0 || p > 1.0) throw ValueError("dropout probability has to be between 0 and 1, but got " + formatNumber(p));
}

std::string Dropout::extraRepr() const {
  return "p=" + formatNumber(p_) + ", inplace=False";
}

std::string Flatten::extraRepr() const {
  return "start_dim=" + std::to_string(start_) + ", end_dim=" + std::to_string(end_);
}

Conv2d::Conv2d(std::int64_t in, std::int64_t out, Size2 kernel, Size2 stride_, Size2 padding_, Size2 dilation_,
               std::int64_t groups_, bool withBias, Generator& gen)
    : in_channels(in), out_channels(out), kernel_size(kernel), stride(stride_), padding(padding_),
      dilation(dilation_), groups(groups_) {
  // PyTorch's _ConvNd checks, with its words.
  if (groups <= 0) throw ValueError("groups must be a positive integer");
  if (in % groups != 0) throw ValueError("in_channels must be divisible by groups");
  if (out % groups != 0) throw ValueError("out_channels must be divisible by groups");
  if (in <= 0 || out <= 0 || kernel.h <= 0 || kernel.w <= 0) {
    throw ValueError("Conv2d: in_channels, out_channels and kernel_size must be positive, got " + std::to_string(in) +
                     ", " + std::to_string(out) + " and " + kernel.str());
  }
  const std::int64_t fanIn = in / groups * kernel.h * kernel.w;
  const double bound = 1.0 / std::sqrt(static_cast<double>(fanIn));
  NoGradGuard noGrad;
  MemoryCategoryScope tag(MemoryCategory::Parameter);
  weight = register_parameter("weight", rand({out, in / groups, kernel.h, kernel.w}, gen) * (2.0 * bound) - bound);
  if (withBias) bias = register_parameter("bias", rand({out}, gen) * (2.0 * bound) - bound);
}

Conv2d::Conv2d(std::int64_t in, std::int64_t out, Size2 kernel, Size2 stride_, ConvPadding padding_, Size2 dilation_,
               std::int64_t groups_, bool withBias, Generator& gen)
    : Conv2d(in, out, kernel, stride_, Size2(0), dilation_, groups_, withBias, gen) {
  if (padding_ == ConvPadding::Same && (stride.h != 1 || stride.w != 1)) {
    throw ValueError("padding='same' is not supported for strided convolutions");
  }
  padding_keyword = padding_;
}

Tensor Conv2d::forward(const Tensor& input) {
  if (padding_keyword) return conv2d(input, weight, bias, stride, *padding_keyword, dilation, groups);
  return conv2d(input, weight, bias, stride, padding, dilation, groups);
}

std::string Conv2d::extraRepr() const {
  // PyTorch stores the sizes as tuples, so it prints them as tuples; the defaults are left out.
  auto pair = [](Size2 s) { return Size2(s.h, s.w).str(); };
  std::string r = std::to_string(in_channels) + ", " + std::to_string(out_channels) + ", kernel_size=" + pair(kernel_size) +
                  ", stride=" + pair(stride);
  if (padding_keyword) r += ", padding=" + toString(*padding_keyword);
  else if (!(padding == Size2(0))) r += ", padding=" + pair(padding);
  if (!(dilation == Size2(1))) r += ", dilation=" + pair(dilation);
  if (groups != 1) r += ", groups=" + std::to_string(groups);
  if (!bias.defined()) r += ", bias=False";
  return r;
}

std::string MaxPool2d::extraRepr() const {
  return "kernel_size=" + kernel_.str() + ", stride=" + stride_.str() + ", padding=" + padding_.str() +
         ", dilation=" + dilation_.str() + ", ceil_mode=" + (ceilMode_ ? "True" : "False");
}

std::string AvgPool2d::extraRepr() const {
  return "kernel_size=" + kernel_.str() + ", stride=" + stride_.str() + ", padding=" + padding_.str();
}

Sequential::Sequential(std::initializer_list<std::shared_ptr<Module>> modules) {
  for (const auto& m : modules) push_back(m);
}

void Sequential::push_back(std::shared_ptr<Module> module) {
  if (!module) throw ValueError("Sequential: cannot add a null module");
  register_module(std::to_string(size()), std::move(module));
}

Tensor Sequential::forward(const Tensor& x) {
  Tensor h = x;
  for (const auto& [n, child] : named_children()) h = (*child)(h);
  return h;
}

Checkpoint::Checkpoint(std::shared_ptr<Module> module, bool preserve_rng_state)
    : module_(std::move(module)), preserveRngState_(preserve_rng_state) {
  if (!module_) throw ValueError("Checkpoint: cannot wrap a null module");
  register_module("module", module_);
}

Tensor Checkpoint::forward(const Tensor& x) {
  // The child's parameters are the tensors it reads that need gradients: listed, so the output
  // requires grad even when x does not (the first block of a network).
  return checkpoint([module = module_](const Tensor& in) { return (*module)(in); }, x, module_->parameters(),
                    preserveRngState_);
}

}  // namespace gpulab::nn

namespace gpulab::nn {

BatchNorm::BatchNorm(std::int64_t numFeatures, double eps_, std::optional<double> momentum_, bool affine_,
                     bool trackRunningStats)
    : num_features(numFeatures), eps(eps_), momentum(momentum_), affine(affine_),
      track_running_stats(trackRunningStats) {
  NoGradGuard noGrad;
  MemoryCategoryScope tag(MemoryCategory::Parameter);
  // PyTorch's _NormBase: parameters first, then the buffers, in this order (the state dict's).
  if (affine) {
    weight = register_parameter("weight", ones({numFeatures}));
    bias = register_parameter("bias", zeros({numFeatures}));
  }
  if (track_running_stats) {
    running_mean = register_buffer("running_mean", zeros({numFeatures}));
    running_var = register_buffer("running_var", ones({numFeatures}));
    num_batches_tracked = register_buffer("num_batches_tracked", zeros({}, {kInt64}));
  }
}

// PyTorch's _BatchNorm.forward.
Tensor BatchNorm::forward(const Tensor& input) {
  checkInputDim(input);
  double factor = momentum.value_or(0.0);  // exponential_average_factor
  if (is_training() && track_running_stats) {
    NoGradGuard noGrad;
    num_batches_tracked.copy_(num_batches_tracked + ones({}, {kInt64, num_batches_tracked.device()}));  // add_(1)
    if (!momentum) factor = 1.0 / num_batches_tracked.item();  // a cumulative moving average
  }
  // Batch statistics in training, and in eval when there are no running statistics to use.
  const bool batchStats = is_training() || (!running_mean.defined() && !running_var.defined());
  const bool passStats = !is_training() || track_running_stats;
  return batch_norm(input, passStats ? running_mean : Tensor(), passStats ? running_var : Tensor(), weight, bias,
                    batchStats, factor, eps);
}

std::string BatchNorm::extraRepr() const {
  return std::to_string(num_features) + ", eps=" + formatNumber(eps) +
         ", momentum=" + (momentum ? formatNumber(*momentum) : std::string("None")) +
         ", affine=" + (affine ? "True" : "False") +
         ", track_running_stats=" + (track_running_stats ? "True" : "False");
}

void BatchNorm1d::checkInputDim(const Tensor& input) const {
  if (input.dim() != 2 && input.dim() != 3) {
    throw ValueError("expected 2D or 3D input (got " + std::to_string(input.dim()) + "D input)");
  }
}

void BatchNorm2d::checkInputDim(const Tensor& input) const {
  if (input.dim() != 4) throw ValueError("expected 4D input (got " + std::to_string(input.dim()) + "D input)");
}

}  // namespace gpulab::nn
