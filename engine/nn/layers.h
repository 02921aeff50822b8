#pragma once
// The layers of torch.nn that the lessons use, with PyTorch's initialisation and printed form.
#include <initializer_list>
#include <memory>
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

class Sigmoid final : public Module {
 public:
  Tensor forward(const Tensor& x) override { return sigmoid(x); }
  std::string name() const override { return "Sigmoid"; }
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
