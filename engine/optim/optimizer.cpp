#include "engine/optim/optimizer.h"

#include <cmath>

#include "engine/autograd/grad_mode.h"
#include "engine/kernels/backend.h"
#include "engine/runtime/device_runtime.h"
#include "engine/core/errors.h"
#include "engine/core/number_format.h"
#include "engine/memory/memory_events.h"
#include "engine/ops/ops.h"
#include "engine/profiler/profiler.h"
#include "engine/runtime/cuda_graph.h"

namespace gpulab::optim {
namespace {
// PyTorch's words: "Invalid learning rate: -0.5", "Invalid momentum value: -0.25".
void checkRange(const char* what, double v, double lo, double hi) {
  if (!(v >= lo && v <= hi)) throw ValueError(std::string("Invalid ") + what + ": " + formatNumber(v));
}
// A graph replays what step() queued at its capture: state made then would be made again (zeroed) at
// every replay, so it must exist before.
void checkStateBeforeCapture(const char* optimizer, const Tensor& p) {
  if (cuda::is_current_stream_capturing(p.device())) {
    throw Error(std::string(optimizer) + "'s state must exist before a CUDA graph captures step(): run a few warm-up "
                "iterations (forward, backward, step) on the side stream first, as PyTorch requires");
  }
}
void checkGrad(const Tensor& p, const Tensor& g) {
  if (g.device() != p.device()) {
    throw DeviceMismatchError("Expected all tensors to be on the same device, but found at least two devices, " +
                              p.device().str() + " and " + g.device().str() + "! (when checking arguments for optimizer step: a parameter is on " +
                              p.device().str() + ", its gradient on " + g.device().str() + ")");
  }
  if (g.dtype() != p.dtype()) {  // set_grad refuses this; a backstop for gradients set another way
    throw Error("optimizer step: a " + dtypeName(p.dtype()) + " parameter has a " + dtypeName(g.dtype()) +
                " gradient (a gradient must have its parameter's dtype)");
  }
}
}  // namespace

Optimizer::Optimizer(std::vector<Tensor> params) : params_(std::move(params)) {
  if (params_.empty()) throw ValueError("optimizer got an empty parameter list");
  for (const Tensor& p : params_) {
    if (!p.is_leaf()) throw ValueError("can't optimize a non-leaf Tensor");
    if (!isFloatingPoint(p.dtype())) throw ValueError("optimizer can only optimize Tensors of floating point dtype");
  }
}

void Optimizer::step() {
  // The first parameter places the step on a device, where the profiler times it too.
  const profiler::RecordScope record(profiler::isObserving() ? std::string("Optimizer.step#") + name() + ".step" : std::string(),
                                     {params_.empty() ? nullptr : &params_.front()});
  NoGradGuard noGrad;
  MemoryCategoryScope tag(MemoryCategory::OptimizerState);
  std::vector<Pending> pending;
  pending.reserve(params_.size());
  for (std::size_t i = 0; i < params_.size(); ++i) {
    const Tensor& p = params_[i];
    const Tensor g = p.grad();
    if (!g.defined()) continue;
    checkGrad(p, g);
    pending.push_back({i, p, g.contiguous()});
  }
  updateAll(pending);
}

void Optimizer::updateAll(const std::vector<Pending>& pending) {
  for (const Pending& u : pending) update(u.index, u.param, u.grad);
}

void Optimizer::zero_grad(bool set_to_none) {
  const profiler::RecordScope record(profiler::isObserving() ? std::string("Optimizer.zero_grad#") + name() + ".zero_grad"
                                                             : std::string(),
                                     {params_.empty() ? nullptr : &params_.front()});
  NoGradGuard noGrad;
  for (Tensor& p : params_) {
    if (set_to_none) p.set_grad(Tensor());
    else if (p.grad().defined()) p.grad().zero_();
  }
}

void Optimizer::setLearningRate(double lr) {
  checkRange("learning rate", lr, 0.0, 1e6);
  lr_ = lr;
}

void Optimizer::followParam(Tensor& state, const Tensor& param) {
  if (!state.defined()) return;
  if (state.device() != param.device()) state = state.to(param.device());
  if (state.dtype() != param.dtype()) state = state.to(param.dtype());
}

Tensor Optimizer::savedState(const ParamState& state, std::size_t index, const char* name, bool optional) const {
  const Tensor& p = params_.at(index);
  for (const auto& [key, value] : state) {
    if (key != name) continue;
    if (!value.defined()) {
      if (optional) return Tensor();
      break;
    }
    if (value.sizes() != p.sizes()) {
      throw ValueError(std::string("loaded state dict's ") + name + " for parameter " + std::to_string(index) + " has shape " +
                       shapeStr(value.sizes()) + ", but the parameter has shape " + shapeStr(p.sizes()));
    }
    NoGradGuard noGrad;
    return value.detach().to(p.device()).to(p.dtype()).clone();
  }
  if (optional) return Tensor();
  throw ValueError(std::string("loaded state dict has no ") + name + " for parameter " + std::to_string(index) + " of " + this->name());
}

SGD::SGD(std::vector<Tensor> params, const SGDOptions& o) : Optimizer(std::move(params)), options_(o) {
  setLearningRate(o.lr);
  checkRange("momentum value", o.momentum, 0.0, 1e6);
  checkRange("weight_decay value", o.weight_decay, 0.0, 1e6);
  if (o.nesterov && (o.momentum <= 0.0 || o.dampening != 0.0)) throw ValueError("Nesterov momentum requires a momentum and zero dampening");
  momentum_.resize(params_.size());
  stepped_.assign(params_.size(), false);
}

Optimizer::ParamState SGD::state(std::size_t i) const {
  if (!stepped_.at(i)) return {};
  return {{"momentum_buffer", momentum_[i]}};
}

void SGD::setState(std::size_t i, const ParamState& state) {
  // With momentum the buffer must be there; without, a saved one is read (and checked) but not kept.
  Tensor buffer = savedState(state, i, "momentum_buffer", /*optional=*/options_.momentum == 0.0);
  momentum_.at(i) = options_.momentum != 0.0 ? std::move(buffer) : Tensor();
  stepped_[i] = true;
}

void SGD::update(std::size_t i, const Tensor& p, const Tensor& g) {
  stepped_[i] = true;
  SgdHyper h{lr_, options_.momentum, options_.dampening, options_.weight_decay, options_.nesterov, false};
  Tensor* buf = nullptr;
  if (options_.momentum != 0.0) {
    followParam(momentum_[i], p);
    h.first_step = !momentum_[i].defined();
    if (h.first_step) checkStateBeforeCapture("SGD", p);
    if (h.first_step) momentum_[i] = Tensor::empty(p.sizes(), p.dtype(), p.device());
    buf = &momentum_[i];
  }
  backendFor(p.device()).sgdStep(p, g, buf, h);
}

Adam::Adam(std::vector<Tensor> params, const AdamOptions& o, bool decoupled, double defaultWeightDecay)
    : Optimizer(std::move(params)), options_(o), decoupled_(decoupled) {
  options_.weight_decay = o.weight_decay.value_or(defaultWeightDecay);
  setLearningRate(o.lr);
  checkRange("epsilon value", o.eps, 0.0, 1e6);
  checkRange("beta parameter at index 0", o.beta1, 0.0, 0.999999999);
  checkRange("beta parameter at index 1", o.beta2, 0.0, 0.999999999);
  checkRange("weight_decay value", *options_.weight_decay, 0.0, 1e6);
  expAvg_.resize(params_.size());
  expAvgSq_.resize(params_.size());
  maxExpAvgSq_.resize(params_.size());
  steps_.assign(params_.size(), 0);
  if (o.capturable) {
    for (const Tensor& p : params_) {
      if (p.device() != params_.front().device()) {
        throw ValueError("Adam(capturable=True) needs all parameters on one device; found " + params_.front().device().str() +
                         " and " + p.device().str());
      }
    }
  }
}

Optimizer::ParamState Adam::state(std::size_t i) const {
  if (!expAvg_.at(i).defined()) return {};
  // The step count as PyTorch keeps it: a float32 scalar, on the device with capturable (read there).
  Tensor step = options_.capturable && stepCounts_.defined() ? stepCounts_.slice(0, static_cast<std::int64_t>(i), static_cast<std::int64_t>(i) + 1).reshape({}).clone()
                                                              : full({}, static_cast<double>(steps_[i]), {.dtype = kFloat32});
  ParamState out{{"step", step}, {"exp_avg", expAvg_[i]}, {"exp_avg_sq", expAvgSq_[i]}};
  if (options_.amsgrad) out.emplace_back("max_exp_avg_sq", maxExpAvgSq_[i]);
  return out;
}

void Adam::setState(std::size_t i, const ParamState& state) {
  const Tensor& p = params_.at(i);
  std::int64_t step = -1;
  for (const auto& [key, value] : state) {
    if (key == "step" && value.defined() && value.numel() == 1) step = static_cast<std::int64_t>(value.item());
  }
  if (step < 0) throw ValueError("loaded state dict has no step count for parameter " + std::to_string(i) + " of " + name());
  Tensor expAvg = savedState(state, i, "exp_avg"), expAvgSq = savedState(state, i, "exp_avg_sq");
  Tensor maxExpAvgSq = options_.amsgrad ? savedState(state, i, "max_exp_avg_sq") : Tensor();
  expAvg_[i] = std::move(expAvg);
  expAvgSq_[i] = std::move(expAvgSq);
  maxExpAvgSq_[i] = std::move(maxExpAvgSq);
  steps_[i] = step;
  if (options_.capturable) {
    NoGradGuard noGrad;
    if (!stepCounts_.defined()) stepCounts_ = zeros({static_cast<std::int64_t>(params_.size())}, {.dtype = kFloat32, .device = p.device()});
    stepCounts_.slice(0, static_cast<std::int64_t>(i), static_cast<std::int64_t>(i) + 1).fill_(static_cast<double>(step));
  }
}

AdamHyper Adam::hyper(std::size_t i) {
  const Tensor& p = params_[i];
  followParam(expAvg_[i], p);
  followParam(expAvgSq_[i], p);
  followParam(maxExpAvgSq_[i], p);
  if (!options_.capturable && cuda::is_current_stream_capturing(p.device())) {
    throw Error(std::string("Attempting CUDA graph capture of step() for an instance of ") + name() +
                " but param_groups' capturable is False.");
  }
  if (!expAvg_[i].defined()) {  // step() has tagged these MemoryCategory::OptimizerState
    checkStateBeforeCapture(name(), p);
    expAvg_[i] = zeros(p.sizes(), {.dtype = p.dtype(), .device = p.device()});
    expAvgSq_[i] = zeros(p.sizes(), {.dtype = p.dtype(), .device = p.device()});
    if (options_.amsgrad) maxExpAvgSq_[i] = zeros(p.sizes(), {.dtype = p.dtype(), .device = p.device()});
  }
  AdamHyper h{lr_, options_.beta1, options_.beta2, options_.eps, *options_.weight_decay, decoupled_, options_.amsgrad, ++steps_[i]};
  if (options_.capturable) h.step_on_device = stepCounts_.data<float>() + i;  // counted by countSteps()
  return h;
}

void Adam::countSteps(const std::vector<Pending>& pending) {
  if (!options_.capturable || pending.empty()) return;
  const Device device = params_.front().device();
  // Float32 on the parameters' device whatever their dtype (a bfloat16 count would stop at 256), and
  // never replaced inside a capture (the graph would go on reading the old tensor).
  if (stepCounts_.defined() && stepCounts_.device() != device) {
    checkStateBeforeCapture(name(), params_.front());
    stepCounts_ = stepCounts_.to(device);
  }
  if (!stepCounts_.defined()) {
    checkStateBeforeCapture(name(), params_.front());
    stepCounts_ = zeros({static_cast<std::int64_t>(params_.size())}, {.dtype = kFloat32, .device = device});
  }
  // Queued before the updates that read them: one launch when every parameter steps, as usual.
  if (pending.size() == params_.size()) {
    stepCounts_.copy_(stepCounts_ + 1.0);
  } else {
    for (const Pending& u : pending) {
      const auto i = static_cast<std::int64_t>(u.index);
      Tensor count = stepCounts_.slice(0, i, i + 1);
      count.copy_(count + 1.0);
    }
  }
}

const Tensor* Adam::maxExpAvgSq(std::size_t i) const { return options_.amsgrad ? &maxExpAvgSq_[i] : nullptr; }

void Adam::update(std::size_t i, const Tensor& p, const Tensor& g) {
  countSteps({{i, p, g}});
  const AdamHyper h = hyper(i);
  backendFor(p.device()).adamStep(p, g, expAvg_[i], expAvgSq_[i], maxExpAvgSq(i), h);
}

// All parameters of one device in one call, so the CUDA backend can update them in a few launches.
void Adam::updateAll(const std::vector<Pending>& pending) {
  countSteps(pending);
  std::vector<Backend::AdamTensors> batch;
  Device device = kCPU;
  auto flush = [&] {
    if (!batch.empty()) backendFor(device).adamSteps(batch);
    batch.clear();
  };
  for (const Pending& u : pending) {
    if (!batch.empty() && u.param.device() != device) flush();
    device = u.param.device();
    const AdamHyper h = hyper(u.index);
    batch.push_back({&u.param, &u.grad, &expAvg_[u.index], &expAvgSq_[u.index], maxExpAvgSq(u.index), h});
  }
  flush();
}

}  // namespace gpulab::optim
