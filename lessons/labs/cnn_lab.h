#pragma once
#include "engine/lab/lab.h"

namespace gpulab::labs {

// A convolutional network against the MLP of the training lesson: both trained from the same seed on
// the same batches of Fashion-MNIST, side by side -- the loss of each, the test accuracy after each
// epoch, and a table of what each costs (parameters, time, memory) and reaches.
class CnnLab final : public lab::Lab {
 public:
  std::string id() const override { return "cnn"; }
  std::string title() const override { return "A CNN against an MLP on Fashion-MNIST"; }
  std::string sourcePath() const override { return "labs/cnn_lab.cpp"; }
  std::vector<lab::ParamSpec> params() const override;
  std::vector<lab::MeasurementSpec> measurements() const override;
  void run(const lab::Params& params, lab::MetricSink& sink, const lab::StopToken& stop) override;
};

}  // namespace gpulab::labs
