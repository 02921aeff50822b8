#pragma once
#include "engine/lab/lab.h"

namespace gpulab::labs {

// torch.backends.cudnn's two switches, measured on the lab's CNN. "benchmark": the same steps with
// cuDNN's benchmark mode off, then on -- each step's time, the algorithms cuDNN considered for every
// convolution (with their times and workspaces, and the one it ran), the first-step cost of the
// search, and what input shapes that change every step do to it. "determinism": the same training
// twice from the same seed, with `deterministic` off and on, and how far the two runs' weights end apart.
class CudnnLab final : public lab::Lab {
 public:
  std::string id() const override { return "cudnn"; }
  std::string title() const override { return "cuDNN's benchmark and deterministic switches"; }
  std::string sourcePath() const override { return "labs/cudnn_lab.cpp"; }
  std::vector<lab::ParamSpec> params() const override;
  std::vector<lab::MeasurementSpec> measurements() const override;
  void run(const lab::Params& params, lab::MetricSink& sink, const lab::StopToken& stop) override;
};

}  // namespace gpulab::labs
