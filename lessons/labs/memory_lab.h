#pragma once
#include "engine/lab/lab.h"

namespace gpulab::labs {

// GPU memory, three ways, all with the memory by category as a live stacked timeline:
// - oom-sweep: running out of memory on purpose, and recovering -- the batch size (or the hidden
//   width) doubles until the allocator raises OutOfMemoryError (explained from what memory held),
//   then halves, keeping the effective batch with gradient accumulation, until training fits again.
//   On the CPU the limit is an emulated budget; on a GPU (real or emulated), a memory fraction.
// - report: training, then del model/optimizer, then empty_cache(): allocated vs reserved vs what
//   the driver reports at each moment.
// - fraction: what set_per_process_memory_fraction caps (this allocator's reserved memory) and what
//   it does not (the device's free memory).
class MemoryLab final : public lab::Lab {
 public:
  std::string id() const override { return "memory"; }
  std::string title() const override { return "GPU memory: where it goes, out of memory, the memory fraction"; }
  std::string sourcePath() const override { return "labs/memory_lab.cpp"; }
  std::vector<lab::ParamSpec> params() const override;
  std::vector<lab::MeasurementSpec> measurements() const override;
  void run(const lab::Params& params, lab::MetricSink& sink, const lab::StopToken& stop) override;
};

}  // namespace gpulab::labs
