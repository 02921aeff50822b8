#pragma once
// torch.amp.GradScaler: dynamic loss scaling for float16 training. Small gradients underflow to zero
// in float16 (below 2^-24); multiplying the loss by a large factor S before backward lifts them into
// range, and dividing the gradients by S before the optimizer step restores their size. When S is
// too large a gradient overflows to inf: that step is skipped and S halved; after `growth_interval`
// clean steps in a row S doubles. PyTorch's semantics and defaults:
//
//   scaler.scale(loss).backward();
//   scaler.unscale_(optimizer);      // optional: to clip the true gradients
//   scaler.step(optimizer);          // unscale_ if not yet done; skip when any gradient is inf/NaN
//   scaler.update();                 // backoff or growth of the scale
//
// One fused check per device over all gradients (Backend::nonFiniteCheckAndUnscale), no
// synchronisation per parameter; step() reads the per-step counts once, as PyTorch's step reads
// found_inf once. What happened each step (scale, skipped, inf/NaN and zero counts) stays
// readable for a lesson to plot.
#include <cstdint>
#include <map>
#include <vector>

#include "engine/core/tensor.h"
#include "engine/optim/optimizer.h"

namespace gpulab::amp {

struct GradScalerOptions {
  double init_scale = 65536.0;  // 2^16
  double growth_factor = 2.0;
  double backoff_factor = 0.5;
  std::int64_t growth_interval = 2000;
  bool enabled = true;  // disabled: scale() returns the loss, step() is optimizer.step()
};

// One optimizer step as the scaler saw it.
struct ScalerStepStats {
  double scale = 1.0;               // the scale the step's gradients were computed with
  bool skipped = false;             // inf/NaN found: optimizer.step() not called
  std::int64_t nonfinite = 0;       // gradient values that were inf or NaN
  std::int64_t zeros = 0;           // gradient values exactly zero (underflowed, or truly zero)
  std::int64_t total = 0;           // gradient values checked
};

class GradScaler {
 public:
  explicit GradScaler(GradScalerOptions options = {});

  // loss * scale (a new tensor in the graph; the loss itself unchanged). Identity when disabled. The
  // scale joins as PyTorch's does, a 0-dim float32 tensor on the loss's device, so a 0-dim float16
  // loss gives a float32 product (torch.result_type) instead of overflowing at 65536.
  Tensor scale(const Tensor& loss) const;
  // Divides every gradient of `optimizer`'s parameters by the scale, in place, and records inf/NaN:
  // one Backend::nonFiniteCheckAndUnscale per device, by 1/scale rounded to float as PyTorch's
  // inv_scale tensor is; nothing is synchronised. Throws (as PyTorch) when called twice for one
  // optimizer before update(), after step(), or for a float16 gradient ("Attempting to unscale FP16
  // gradients.": the parameters a scaler serves are float32 master weights).
  void unscale_(optim::Optimizer& optimizer);
  // The same for one optimizer whose parameter groups are several engine optimizers (torch.optim's
  // param_groups in the Python package): checked together, stepped or skipped together, as
  // PyTorch's GradScaler treats one optimizer.
  void unscale_(const std::vector<optim::Optimizer*>& groups);
  // unscale_ if not done since the last update(), then optimizer.step() unless an inf/NaN was found.
  // Reads the counts back once (the one synchronisation per step, as PyTorch's found_inf.item()).
  // Returns true when the optimizer stepped. Several optimizers may each step once per update().
  bool step(optim::Optimizer& optimizer);
  bool step(const std::vector<optim::Optimizer*>& groups);
  // Scale for the next iteration: * backoff_factor after a skipped step; * growth_factor after
  // growth_interval clean steps in a row (torch._amp_update_scale_; the scale is kept as a float32,
  // as PyTorch's scale tensor, and never grows to inf). An inf/NaN in any optimizer's gradients since
  // the last update() counts. Throws "No inf checks were recorded prior to update." when no
  // optimizer was unscaled. update(newScale) sets it directly (the growth tracker is kept).
  void update();
  void update(double newScale);

  double get_scale() const { return enabled_ ? scale_ : 1.0; }
  std::int64_t growth_tracker() const { return growthTracker_; }  // clean steps since the last change
  bool is_enabled() const { return enabled_; }
  const GradScalerOptions& options() const { return options_; }
  // The latest step's stats (valid after step()).
  const ScalerStepStats& last_step() const { return last_; }

 private:
  GradScalerOptions options_;
  bool enabled_;
  double scale_;
  std::int64_t growthTracker_ = 0;
  // Per optimizer, since the last update() (PyTorch's _per_optimizer_states, keyed by identity: an
  // optimizer of several groups by its first group).
  enum class Stage { Ready, Unscaled, Stepped };
  struct OptimizerState {
    Stage stage = Stage::Ready;
    std::vector<Tensor> counts;  // per device: int64 (2) = {inf/NaN, zeros}, filled by unscale_
    std::int64_t total = 0;      // gradient values checked
    bool read = false;           // counts copied to the host
    std::int64_t nonfinite = 0, zeros = 0;
  };
  // Reads `state`'s counts back (once).
  static void readCounts(OptimizerState& state);
  std::map<const optim::Optimizer*, OptimizerState> perOptimizer_;
  ScalerStepStats last_;
};

}  // namespace gpulab::amp
