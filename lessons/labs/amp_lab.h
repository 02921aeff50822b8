#pragma once
#include "engine/lab/lab.h"

namespace gpulab::labs {

// Mixed precision, side by side: the same model, from the same initialisation, on the same batches,
// trained in float32, under autocast float16 with a GradScaler, under autocast bfloat16, and under
// autocast float16 without a scaler. It shows the loss of each, the GradScaler's loss scale with its
// skipped steps marked, the share of gradient values that are exactly zero (float16 underflow), memory
// by category at each variant's peak, and each precision's measured step time.
class AmpLab final : public lab::Lab {
 public:
  std::string id() const override { return "amp"; }
  std::string title() const override { return "Mixed precision: float32, float16 with and without GradScaler, bfloat16"; }
  std::string sourcePath() const override { return "labs/amp_lab.cpp"; }
  std::vector<lab::ParamSpec> params() const override;
  std::vector<lab::MeasurementSpec> measurements() const override;
  void run(const lab::Params& params, lab::MetricSink& sink, const lab::StopToken& stop) override;
};

}  // namespace gpulab::labs
