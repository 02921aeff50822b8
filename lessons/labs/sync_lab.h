#pragma once
#include "engine/lab/lab.h"

namespace gpulab::labs {

// Transfers and synchronisation: the seed lessons' regression loop with its loss read back every step
// (`loss.item()`, a wait for the device each time) against every N steps, swept over N; and a batch
// copied to the device one sample at a time against in one copy. Each variant is timed, its waits
// and copies counted; the loops' losses are compared to show that only the reading changed.
class SyncLab final : public lab::Lab {
 public:
  std::string id() const override { return "syncs"; }
  std::string title() const override { return "Transfers and synchronisation: what .item() and small copies cost"; }
  std::string sourcePath() const override { return "labs/sync_lab.cpp"; }
  std::vector<lab::ParamSpec> params() const override;
  std::vector<lab::MeasurementSpec> measurements() const override;
  void run(const lab::Params& params, lab::MetricSink& sink, const lab::StopToken& stop) override;
};

}  // namespace gpulab::labs
