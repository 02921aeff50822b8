#pragma once
#include "engine/lab/lab.h"

namespace gpulab::labs {

// Vectorise: the squared distances from n points to m centres (k-means' assignment step), computed
// as a Python-style loop over every pair, as a loop over chunks of rows, as one broadcast op, and
// with the matrix-product identity torch.cdist uses -- each timed, its ops counted and its peak memory
// measured, plus a sweep of the chunk size (time and memory against rows per op).
class VectoriseLab final : public lab::Lab {
 public:
  std::string id() const override { return "vectorise"; }
  std::string title() const override { return "Vectorise: one op over the batch instead of a loop"; }
  std::string sourcePath() const override { return "labs/vectorise_lab.cpp"; }
  std::vector<lab::ParamSpec> params() const override;
  std::vector<lab::MeasurementSpec> measurements() const override;
  void run(const lab::Params& params, lab::MetricSink& sink, const lab::StopToken& stop) override;
};

}  // namespace gpulab::labs
