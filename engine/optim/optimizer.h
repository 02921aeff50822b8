#pragma once
// torch.optim: SGD (momentum, dampening, Nesterov, weight decay), Adam and AdamW. Each step is one
// fused kernel per parameter tensor (engine/kernels/functors.h has the update formulas), so on the
// GPU an optimizer step costs one launch per parameter instead of a dozen elementwise ops.
#include <optional>
#include <vector>

#include "engine/kernels/functors.h"
#include "engine/core/tensor.h"

namespace gpulab::optim {

class Optimizer {
 public:
  explicit Optimizer(std::vector<Tensor> params);
  virtual ~Optimizer() = default;
  // Updates every parameter that has a gradient, under no-grad.
  void step();
  // The class's name, as the profiler labels its steps ("Optimizer.step#Adam.step").
  virtual const char* name() const = 0;
  // set_to_none (PyTorch 2's default) frees the gradients instead of filling them with zeros.
  void zero_grad(bool set_to_none = true);
  const std::vector<Tensor>& params() const { return params_; }
  void setLearningRate(double lr);
  double learningRate() const { return lr_; }

  // torch.optim's per-parameter state under PyTorch's names and in its order -- SGD's
  // momentum_buffer (undefined, Python's None, without momentum), Adam's step (a 0-dim float32
  // tensor), exp_avg, exp_avg_sq and, with amsgrad, max_exp_avg_sq -- or nothing for a parameter not
  // stepped yet (optimizer.state_dict()). The moments are the optimizer's own tensors; Adam's step is
  // a snapshot of the count. setState puts saved state back (load_state_dict): tensors
  // are copied to the parameter's device and dtype, and a missing name or a wrong shape throws.
  using ParamState = std::vector<std::pair<std::string, Tensor>>;
  virtual ParamState state(std::size_t index) const = 0;
  virtual void setState(std::size_t index, const ParamState& state) = 0;

 protected:
  // One parameter's update; `grad` is contiguous and on the parameter's device.
  virtual void update(std::size_t index, const Tensor& param, const Tensor& grad) = 0;
  // Every parameter that has a gradient, in order; by default one update() each. Optimizers with a
  // multi-tensor backend path override it.
  struct Pending {
    std::size_t index;
    const Tensor& param;
    Tensor grad;
  };
  virtual void updateAll(const std::vector<Pending>& pending);
  // State tensors follow their parameter if the model was moved or cast (module.to(device),
  // module.half()) after the optimizer was made: the fused kernels take one device and one dtype.
  static void followParam(Tensor& state, const Tensor& param);
  // setState's reading of one saved tensor for parameter `index`: a copy of `name`, on the
  // parameter's device and in its dtype, of the parameter's shape (undefined if `optional` and absent
  // or None).
  Tensor savedState(const ParamState& state, std::size_t index, const char* name, bool optional = false) const;
  std::vector<Tensor> params_;
  double lr_ = 0.0;
};

struct SGDOptions {
  double lr = 0.01, momentum = 0.0, dampening = 0.0, weight_decay = 0.0;
  bool nesterov = false;
};

class SGD final : public Optimizer {
 public:
  SGD(std::vector<Tensor> params, const SGDOptions& options);
  const char* name() const override { return "SGD"; }
  ParamState state(std::size_t index) const override;
  void setState(std::size_t index, const ParamState& state) override;

 private:
  void update(std::size_t index, const Tensor& param, const Tensor& grad) override;
  SGDOptions options_;
  std::vector<Tensor> momentum_;  // momentum_buffer per parameter, created on first step
  std::vector<bool> stepped_;     // whether the parameter has state (PyTorch keeps None without momentum)
};

// Written with designated initializers ({.lr = 0.01}), so a field left out must still mean the
// optimizer's own default: weight_decay unset is PyTorch's default for the class (Adam 0, AdamW 0.01).
struct AdamOptions {
  double lr = 1e-3, beta1 = 0.9, beta2 = 0.999, eps = 1e-8;
  std::optional<double> weight_decay = std::nullopt;
  bool amsgrad = false;  // AMSGrad: divide by the square root of the running maximum of exp_avg_sq
  // torch.optim.Adam(capturable=True): the step counts live on the parameters' device and the bias
  // corrections are computed there, so step() can be captured in a CUDA graph and replayed (without
  // it, the count would be frozen into the graph at its capture value). All parameters on one device.
  bool capturable = false;
};

class Adam : public Optimizer {
 public:
  explicit Adam(std::vector<Tensor> params, const AdamOptions& options = {}) : Adam(std::move(params), options, false, 0.0) {}
  const char* name() const override { return decoupled_ ? "AdamW" : "Adam"; }
  ParamState state(std::size_t index) const override;
  void setState(std::size_t index, const ParamState& state) override;

 protected:
  // AdamW's constructor: decoupled weight decay and its own default weight_decay.
  Adam(std::vector<Tensor> params, const AdamOptions& options, bool decoupledWeightDecay, double defaultWeightDecay);

 private:
  void update(std::size_t index, const Tensor& param, const Tensor& grad) override;
  void updateAll(const std::vector<Pending>& pending) override;
  AdamHyper hyper(std::size_t index);  // creates the state on first use, counts the step
  void countSteps(const std::vector<Pending>& pending);  // capturable: the device's step counts, before the updates
  const Tensor* maxExpAvgSq(std::size_t index) const;  // amsgrad's state, null without amsgrad
  AdamOptions options_;  // weight_decay resolved
  bool decoupled_;
  std::vector<Tensor> expAvg_, expAvgSq_, maxExpAvgSq_;  // maxExpAvgSq_ with amsgrad only
  std::vector<std::int64_t> steps_;
  Tensor stepCounts_;  // capturable: float32 (params,), parameter i's step count at [i], on their device
};

// AdamW: Adam with decoupled weight decay (default weight_decay 0.01, as in PyTorch, also when only
// other options are given: AdamW(params, {.lr = 0.1}) decays by 0.01).
class AdamW final : public Adam {
 public:
  static constexpr double kDefaultWeightDecay = 1e-2;
  explicit AdamW(std::vector<Tensor> params, const AdamOptions& options = {})
      : Adam(std::move(params), options, true, kDefaultWeightDecay) {}
};

}  // namespace gpulab::optim
