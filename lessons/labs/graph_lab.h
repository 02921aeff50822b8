#pragma once
#include "engine/lab/lab.h"

namespace gpulab::labs {

// CUDA graphs: the seed lessons' small training step run eagerly -- one kernel launch per op, the host
// launching as fast as it can -- and, with `capture`, captured once in a CUDA graph and replayed, one
// launch a step. Both loops train their own copy of the same model on the same batches, so their losses
// must agree; on a real GPU each is timed in interleaved runs, with the spread, and the host's time to
// queue a step shown beside it. The mistake to meet: reading the loss with .item() inside the capture.
class GraphLab final : public lab::Lab {
 public:
  std::string id() const override { return "graphs"; }
  std::string title() const override { return "CUDA graphs: one launch for the whole training step"; }
  std::string sourcePath() const override { return "labs/graph_lab.cpp"; }
  std::vector<lab::ParamSpec> params() const override;
  std::vector<lab::MeasurementSpec> measurements() const override;
  void run(const lab::Params& params, lab::MetricSink& sink, const lab::StopToken& stop) override;
};

}  // namespace gpulab::labs
