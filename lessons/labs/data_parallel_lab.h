#pragma once
#include "engine/lab/lab.h"

namespace gpulab::labs {

// Several GPUs: one training run three ways -- on one device with the whole batch, with
// DistributedDataParallel's scheme (a replica per GPU, each on its share of the batch, gradients
// averaged by an all-reduce) and with DataParallel's (one master model on the first GPU, copied to the
// others every step, the outputs gathered back) -- comparing their losses, how far the replicas drift
// apart, and the memory each replica holds. With two or more GPUs and NCCL the replicas are real GPUs
// and the all-reduce is NCCL's; otherwise the replicas run one after another on one device, a clearly
// labelled simulation of the same arithmetic.
class DataParallelLab final : public lab::Lab {
 public:
  std::string id() const override { return "data-parallel"; }
  std::string title() const override { return "Several GPUs: DataParallel and DistributedDataParallel"; }
  std::string sourcePath() const override { return "labs/data_parallel_lab.cpp"; }
  std::vector<lab::ParamSpec> params() const override;
  std::vector<lab::MeasurementSpec> measurements() const override;
  void run(const lab::Params& params, lab::MetricSink& sink, const lab::StopToken& stop) override;
};

}  // namespace gpulab::labs
