// GradScaler, after torch/amp/grad_scaler.py. The scale lives on the host (PyTorch keeps a float32
// tensor on the device so that update() need not synchronise; here step() has already read the
// counts back, so the host knows whether an inf was found). Values are rounded to float32 where
// PyTorch's scale tensor rounds them, so the scale sequence is PyTorch's.
#include "engine/amp/grad_scaler.h"

#include <cmath>
#include <utility>

#include "engine/autograd/grad_mode.h"
#include "engine/core/errors.h"
#include "engine/kernels/backend.h"
#include "engine/runtime/device_runtime.h"
#include "engine/ops/ops.h"

namespace gpulab::amp {
namespace {
// PyTorch's scale is a float32 tensor: every value written to it is rounded to float.
double asFloat32(double v) { return static_cast<double>(static_cast<float>(v)); }
}  // namespace

GradScaler::GradScaler(GradScalerOptions options)
    : options_(options), enabled_(options.enabled), scale_(asFloat32(options.init_scale)) {
  if (enabled_) {
    if (!(options_.growth_factor > 1.0)) throw ValueError("The growth factor must be > 1.0.");
    if (!(options_.backoff_factor < 1.0)) throw ValueError("The backoff factor must be < 1.0.");
    if (options_.growth_interval < 1) throw ValueError("The growth interval must be positive.");
  }
}

Tensor GradScaler::scale(const Tensor& loss) const {
  if (!enabled_) return loss;
  // loss * scale in float32, as PyTorch's (its scale is a float32 tensor of shape [1], so even a
  // float16 tensor with dimensions is scaled in float32): 65536 * a float16 loss would overflow in
  // float16. The result keeps the loss's shape (PyTorch's turns a 0-dim loss into shape [1]).
  const Tensor wide = isReducedPrecision(loss.dtype()) ? loss.to(kFloat32) : loss;
  return wide * full({}, scale_, {.dtype = wide.dtype(), .device = loss.device()});
}

void GradScaler::unscale_(optim::Optimizer& optimizer) { unscale_(std::vector<optim::Optimizer*>{&optimizer}); }
bool GradScaler::step(optim::Optimizer& optimizer) { return step(std::vector<optim::Optimizer*>{&optimizer}); }

void GradScaler::unscale_(const std::vector<optim::Optimizer*>& groups) {
  if (!enabled_) return;
  if (groups.empty()) throw ValueError("GradScaler.unscale_: the optimizer has no parameter groups");
  OptimizerState& state = perOptimizer_[groups.front()];
  if (state.stage == Stage::Unscaled) {
    throw Error("unscale_() has already been called on this optimizer since the last update().");
  }
  if (state.stage == Stage::Stepped) throw Error("unscale_() is being called after step().");

  // The gradients by device; a non-contiguous one is checked through a contiguous copy, written back.
  struct DeviceGrads {
    Device device;
    std::vector<Tensor> grads;
  };
  std::vector<DeviceGrads> byDevice;
  std::vector<std::pair<Tensor, Tensor>> writeBack;  // (gradient, its contiguous copy)
  std::int64_t total = 0;
  NoGradGuard noGrad;
  for (const optim::Optimizer* group : groups) {
    for (const Tensor& p : group->params()) {
      Tensor g = p.grad();
      if (!g.defined()) continue;
      if (g.dtype() == kFloat16) throw ValueError("Attempting to unscale FP16 gradients.");
      if (!g.is_contiguous()) {
        Tensor c = g.contiguous();
        writeBack.emplace_back(g, c);
        g = c;
      }
      total += g.numel();
      auto it = byDevice.begin();
      while (it != byDevice.end() && it->device != g.device()) ++it;
      if (it == byDevice.end()) it = byDevice.insert(byDevice.end(), DeviceGrads{g.device(), {}});
      it->grads.push_back(g);
    }
  }

  // PyTorch: inv_scale = self._scale.double().reciprocal().float().
  const double invScale = asFloat32(1.0 / scale_);
  std::vector<Tensor> counts;
  for (const DeviceGrads& d : byDevice) {
    Tensor c = zeros({2}, {.dtype = kInt64, .device = d.device});
    backendFor(d.device).nonFiniteCheckAndUnscale(d.grads, c, invScale);
    counts.push_back(c);
  }
  for (auto& [g, c] : writeBack) g.copy_(c);

  state.counts = std::move(counts);
  state.total = total;
  state.read = false;
  state.nonfinite = state.zeros = 0;
  state.stage = Stage::Unscaled;
}

void GradScaler::readCounts(OptimizerState& state) {
  if (state.read) return;
  state.nonfinite = state.zeros = 0;
  for (const Tensor& c : state.counts) {
    const std::vector<std::int64_t> v = c.toVector<std::int64_t>();  // synchronises with the device
    state.nonfinite += v[0];
    state.zeros += v[1];
  }
  state.read = true;
}

bool GradScaler::step(const std::vector<optim::Optimizer*>& groups) {
  if (groups.empty()) throw ValueError("GradScaler.step: the optimizer has no parameter groups");
  if (!enabled_) {
    for (optim::Optimizer* group : groups) group->step();
    return true;
  }
  if (perOptimizer_[groups.front()].stage == Stage::Stepped) {
    throw Error("step() has already been called since the last update().");
  }
  if (perOptimizer_[groups.front()].stage == Stage::Ready) unscale_(groups);
  OptimizerState& state = perOptimizer_[groups.front()];
  if (state.total == 0 && state.counts.empty()) {  // no parameter had a gradient: nothing was checked
    throw Error("No inf checks were recorded for this optimizer.");
  }
  readCounts(state);
  const bool skip = state.nonfinite > 0;
  last_ = ScalerStepStats{scale_, skip, state.nonfinite, state.zeros, state.total};
  if (!skip) {
    for (optim::Optimizer* group : groups) group->step();
  }
  state.stage = Stage::Stepped;
  return !skip;
}

void GradScaler::update() {
  if (!enabled_) return;
  bool recorded = false, foundInf = false;
  for (auto& [optimizer, state] : perOptimizer_) {
    if (state.stage == Stage::Ready) continue;
    recorded = true;
    readCounts(state);
    foundInf = foundInf || state.nonfinite > 0;
  }
  if (!recorded) throw Error("No inf checks were recorded prior to update.");
  // torch._amp_update_scale_ (aten/src/ATen/native/cuda/AmpKernels.cu): the step that just happened
  // counts towards the interval before the comparison.
  if (foundInf) {
    scale_ = asFloat32(scale_ * options_.backoff_factor);
    growthTracker_ = 0;
  } else if (growthTracker_ + 1 == options_.growth_interval) {
    const double grown = asFloat32(scale_ * options_.growth_factor);
    if (std::isfinite(grown)) scale_ = grown;  // never grows past float32's range to inf
    growthTracker_ = 0;
  } else {
    ++growthTracker_;
  }
  perOptimizer_.clear();
}

void GradScaler::update(double newScale) {
  if (!enabled_) return;
  scale_ = asFloat32(newScale);
  perOptimizer_.clear();
}

}  // namespace gpulab::amp
