#pragma once
#include "engine/lab/lab.h"

namespace gpulab::labs {

// torch.profiler on a training step: warm-up steps, then a few steps profiled; the op table
// (key_averages().table(sort_by=...)), where the step's time goes by kind of op (matrix products,
// elementwise and reductions, backward bookkeeping, the optimizer, the rest), how much of the step is
// arithmetic, and the Chrome trace written to a file for Perfetto.
class ProfileLab final : public lab::Lab {
 public:
  std::string id() const override { return "profile"; }
  std::string title() const override { return "The profiler: where a training step's time goes"; }
  std::string sourcePath() const override { return "labs/profile_lab.cpp"; }
  std::vector<lab::ParamSpec> params() const override;
  std::vector<lab::MeasurementSpec> measurements() const override;
  void run(const lab::Params& params, lab::MetricSink& sink, const lab::StopToken& stop) override;
};

}  // namespace gpulab::labs
