#pragma once
#include "engine/lab/lab.h"

namespace gpulab::labs {

// A GPU-aware training loop, as the seed lessons write it in PyTorch: pick a device, move the model
// there once, move every batch there, train, then evaluate under no-grad.
class TrainLab final : public lab::Lab {
 public:
  std::string id() const override { return "train"; }
  std::string title() const override { return "Train and evaluate an MLP"; }
  std::string sourcePath() const override { return "labs/train_lab.cpp"; }
  std::vector<lab::ParamSpec> params() const override;
  std::vector<lab::MeasurementSpec> measurements() const override;
  void check(const lab::Params& p) const override;
  void run(const lab::Params& params, lab::MetricSink& sink, const lab::StopToken& stop) override;
};

}  // namespace gpulab::labs
