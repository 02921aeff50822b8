#pragma once
// The layers of torch.nn that the C++ tests and benchmarks train (README.md here says why they stay
// beside Python's torch.nn), with PyTorch's initialisation and printed form.
#include <initializer_list>
#include <memory>
#include <optional>
#include <vector>

#include "engine/core/generator.h"
#include "engine/nn/module.h"

namespace gpulab::nn {

class Linear final : public Module {
 public:
  // Weights and bias ~ U(-1/sqrt(in), 1/sqrt(in)), PyTorch's default (kaiming_uniform with a=sqrt(5)).
  Linear(std::int64_t in_features, std::int64_t out_features, bool bias = true, Generator& gen = defaultGenerator());
  Tensor forward(const Tensor& input) override;
  std::string name() const override { return "Linear"; }
  std::string extraRepr() const override;

  Tensor weight;  // (out_features, in_features)
  Tensor bias;    // (out_features) or undefined
  std::int64_t in_features, out_features;
};

class ReLU final : public Module {
 public:
  Tensor forward(const Tensor& x) override { return relu(x); }
  std::string name() const override { return "ReLU"; }
};

class Tanh final : public Module {
 public:
  Tensor forward(const Tensor& x) override { return tanh(x); }
  std::string name() const override { return "Tanh"; }
};

// nn.GELU(approximate='none'|'tanh'); like PyTorch, an unknown string raises when the module runs.
class GELU final : public Module {
 public:
  explicit GELU(std::string approximate = "none") : approximate_(std::move(approximate)) {}
  Tensor forward(const Tensor& x) override { return gelu(x, approximate_); }
  std::string name() const override { return "GELU"; }
  std::string extraRepr() const override { return "approximate='" + approximate_ + "'"; }

 private:
  std::string approximate_;
};

class Dropout final : public Module {
 public:
  explicit Dropout(double p = 0.5, Generator& gen = defaultGenerator());
  Tensor forward(const Tensor& x) override { return dropout(x, p_, is_training(), gen_); }
  std::string name() const override { return "Dropout"; }
  std::string extraRepr() const override;

 private:
  double p_;
  Generator& gen_;
};

class Flatten final : public Module {
 public:
  explicit Flatten(std::int64_t start_dim = 1, std::int64_t end_dim = -1) : start_(start_dim), end_(end_dim) {}
  Tensor forward(const Tensor& x) override { return x.flatten(start_, end_); }
  std::string name() const override { return "Flatten"; }
  std::string extraRepr() const override;

 private:
  std::int64_t start_, end_;
};

// nn.Conv2d (zero padding). Weight (out_channels, in_channels / groups, kH, kW) and bias (out_channels)
// ~ U(-1/sqrt(fan_in), 1/sqrt(fan_in)), fan_in = in_channels / groups * kH * kW: PyTorch's default
// (kaiming_uniform with a=sqrt(5) for the weight, the same bound for the bias).
class Conv2d final : public Module {
 public:
  Conv2d(std::int64_t in_channels, std::int64_t out_channels, Size2 kernel_size, Size2 stride = 1, Size2 padding = 0,
         Size2 dilation = 1, std::int64_t groups = 1, bool bias = true, Generator& gen = defaultGenerator());
  // padding='same' / 'valid' (libtorch's torch::kSame / kValid).
  Conv2d(std::int64_t in_channels, std::int64_t out_channels, Size2 kernel_size, Size2 stride, ConvPadding padding,
         Size2 dilation = 1, std::int64_t groups = 1, bool bias = true, Generator& gen = defaultGenerator());
  Tensor forward(const Tensor& input) override;
  std::string name() const override { return "Conv2d"; }
  std::string extraRepr() const override;  // "3, 8, kernel_size=(3, 3), stride=(1, 1)"

  Tensor weight;  // (out_channels, in_channels / groups, kH, kW)
  Tensor bias;    // (out_channels) or undefined
  std::int64_t in_channels, out_channels;
  Size2 kernel_size, stride, padding, dilation;
  std::optional<ConvPadding> padding_keyword;  // padding='same' / 'valid' when given so (padding is then unused)
  std::int64_t groups;
};

// nn.BatchNorm1d / nn.BatchNorm2d (PyTorch's _BatchNorm): weight (gamma) = 1 and bias (beta) = 0 when
// affine; buffers running_mean = 0, running_var = 1 and num_batches_tracked = 0 (int64, 0-dim) when
// track_running_stats. In train() mode a forward normalises with the batch statistics and, when
// tracking, counts the batch and moves the running statistics by momentum (momentum = nullopt:
// PyTorch's momentum=None, a cumulative average with factor 1 / num_batches_tracked); in eval() mode
// the running statistics normalise (the batch's, when not tracking). State dict: weight, bias,
// running_mean, running_var, num_batches_tracked -- PyTorch's keys and order.
class BatchNorm : public Module {
 public:
  Tensor forward(const Tensor& input) override;
  // "16, eps=1e-05, momentum=0.1, affine=True, track_running_stats=True"
  std::string extraRepr() const override;

  Tensor weight, bias;                                   // (num_features) or undefined (affine=false)
  Tensor running_mean, running_var, num_batches_tracked;  // buffers, undefined when not tracking
  std::int64_t num_features;
  double eps;
  std::optional<double> momentum;
  bool affine, track_running_stats;

 protected:
  BatchNorm(std::int64_t num_features, double eps, std::optional<double> momentum, bool affine,
            bool track_running_stats);
  virtual void checkInputDim(const Tensor& input) const = 0;  // ValueError with PyTorch's words
};

// Input (N, C) or (N, C, L).
class BatchNorm1d final : public BatchNorm {
 public:
  explicit BatchNorm1d(std::int64_t num_features, double eps = 1e-5, std::optional<double> momentum = 0.1,
                       bool affine = true, bool track_running_stats = true)
      : BatchNorm(num_features, eps, momentum, affine, track_running_stats) {}
  std::string name() const override { return "BatchNorm1d"; }

 private:
  void checkInputDim(const Tensor& input) const override;
};

// Input (N, C, H, W).
class BatchNorm2d final : public BatchNorm {
 public:
  explicit BatchNorm2d(std::int64_t num_features, double eps = 1e-5, std::optional<double> momentum = 0.1,
                       bool affine = true, bool track_running_stats = true)
      : BatchNorm(num_features, eps, momentum, affine, track_running_stats) {}
  std::string name() const override { return "BatchNorm2d"; }

 private:
  void checkInputDim(const Tensor& input) const override;
};

// nn.MaxPool2d; stride defaults to the kernel size.
class MaxPool2d final : public Module {
 public:
  explicit MaxPool2d(Size2 kernel_size, OptionalSize2 stride = std::nullopt, Size2 padding = 0,
                     Size2 dilation = 1, bool ceil_mode = false)
      : kernel_(kernel_size), stride_(stride.value_or(kernel_size)), padding_(padding), dilation_(dilation),
        ceilMode_(ceil_mode) {}
  Tensor forward(const Tensor& x) override { return max_pool2d(x, kernel_, stride_, padding_, dilation_, ceilMode_); }
  std::string name() const override { return "MaxPool2d"; }
  std::string extraRepr() const override;  // "kernel_size=2, stride=2, padding=0, dilation=1, ceil_mode=False"

 private:
  Size2 kernel_, stride_, padding_, dilation_;
  bool ceilMode_;
};

// nn.AvgPool2d; stride defaults to the kernel size.
class AvgPool2d final : public Module {
 public:
  explicit AvgPool2d(Size2 kernel_size, OptionalSize2 stride = std::nullopt, Size2 padding = 0,
                     bool ceil_mode = false, bool count_include_pad = true)
      : kernel_(kernel_size), stride_(stride.value_or(kernel_size)), padding_(padding), ceilMode_(ceil_mode),
        countIncludePad_(count_include_pad) {}
  Tensor forward(const Tensor& x) override {
    return avg_pool2d(x, kernel_, stride_, padding_, ceilMode_, countIncludePad_);
  }
  std::string name() const override { return "AvgPool2d"; }
  std::string extraRepr() const override;  // "kernel_size=2, stride=2, padding=0" (PyTorch prints no more)

 private:
  Size2 kernel_, stride_, padding_;
  bool ceilMode_, countIncludePad_;
};

// nn.AdaptiveAvgPool2d: AdaptiveAvgPool2d({1, 1}) is the global average pool before a classifier.
class AdaptiveAvgPool2d final : public Module {
 public:
  explicit AdaptiveAvgPool2d(Size2 output_size) : outputSize_(output_size) {}
  Tensor forward(const Tensor& x) override { return adaptive_avg_pool2d(x, outputSize_); }
  std::string name() const override { return "AdaptiveAvgPool2d"; }
  std::string extraRepr() const override { return "output_size=" + outputSize_.str(); }

 private:
  Size2 outputSize_;
};

class Sequential final : public Module {
 public:
  Sequential() = default;
  Sequential(std::initializer_list<std::shared_ptr<Module>> modules);
  void push_back(std::shared_ptr<Module> module);
  Tensor forward(const Tensor& x) override;
  std::string name() const override { return "Sequential"; }
  std::size_t size() const { return named_children().size(); }
};

// torch.utils.checkpoint around a module (a wrapper, printed as PyTorch prints one): forward is
// checkpoint(module) -- the module's activations are recomputed in backward instead of stored (see
// engine/autograd/checkpoint.h). The module is a registered child, so parameters(), to(device),
// train()/eval() and state_dict ("module.0.weight", ...) reach it.
class Checkpoint final : public Module {
 public:
  explicit Checkpoint(std::shared_ptr<Module> module, bool preserve_rng_state = true);
  Tensor forward(const Tensor& x) override;
  std::string name() const override { return "Checkpoint"; }
  const std::shared_ptr<Module>& module() const { return module_; }

 private:
  std::shared_ptr<Module> module_;
  bool preserveRngState_;
};

}  // namespace gpulab::nn
