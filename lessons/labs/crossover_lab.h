#pragma once
#include "engine/lab/lab.h"

namespace gpulab::labs {

// When is the GPU faster? The same work -- an n x n matrix product, or a training step of an MLP n
// wide -- timed on the CPU and on a GPU for n = 8, 16, ... up to a size, the crossover marked; and each
// step's time split into a fixed cost, memory traffic and arithmetic from the device's own measured
// figures, naming what bounds it: overhead, bandwidth or compute.
class CrossoverLab final : public lab::Lab {
 public:
  std::string id() const override { return "crossover"; }
  std::string title() const override { return "When is the GPU faster? The CPU-GPU crossover"; }
  std::string sourcePath() const override { return "labs/crossover_lab.cpp"; }
  std::vector<lab::ParamSpec> params() const override;
  std::vector<lab::MeasurementSpec> measurements() const override;
  void run(const lab::Params& params, lab::MetricSink& sink, const lab::StopToken& stop) override;
};

}  // namespace gpulab::labs
