#pragma once
#include "engine/lab/lab.h"

namespace gpulab::labs {

// Running out of memory on purpose, and recovering: a sweep that doubles the batch size (or the
// hidden width) until the allocator raises OutOfMemoryError, then halves it -- keeping the effective
// batch with gradient accumulation -- until training fits again. And a report of allocated vs
// reserved vs driver-used memory before and after empty_cache(). On the CPU the limit is an emulated
// budget; on a GPU, a memory fraction, so the sweep ends quickly even on an 80 GB card.
class MemoryLab final : public lab::Lab {
 public:
  std::string id() const override { return "memory"; }
  std::string title() const override { return "GPU memory: out of memory and recovery"; }
  std::string sourcePath() const override { return "labs/memory_lab.cpp"; }
  std::vector<lab::ParamSpec> params() const override;
  void run(const lab::Params& params, lab::MetricSink& sink, const lab::StopToken& stop) override;
};

}  // namespace gpulab::labs
