#pragma once
#include "engine/lab/lab.h"

namespace gpulab::labs {

// Feeding the GPU: a training loop whose batches take a while to load (a read from storage, then a
// real decode and augmentation on the CPU), run with DataLoader(num_workers=0, 1, 2, 4) and with
// pageable or pinned batches copied with non_blocking; each run's loader threads, host and device
// are put on a timeline, and the device's idle time is measured.
class FeedingLab final : public lab::Lab {
 public:
  std::string id() const override { return "feeding"; }
  std::string title() const override { return "Feeding the GPU: DataLoader workers and pinned memory"; }
  std::string sourcePath() const override { return "labs/feeding_lab.cpp"; }
  std::vector<lab::ParamSpec> params() const override;
  std::vector<lab::MeasurementSpec> measurements() const override;
  void run(const lab::Params& params, lab::MetricSink& sink, const lab::StopToken& stop) override;
};

}  // namespace gpulab::labs
