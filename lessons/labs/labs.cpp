#include "lessons/labs/labs.h"

#include "engine/core/errors.h"
#include "engine/memory/memory.h"
#include "engine/runtime/cuda_runtime.h"
#include "engine/runtime/emulated_gpu.h"
// GPULAB_BUILTIN_LABS(X): X(Class) for each lab of the course's one list (lessons/CMakeLists.txt).
#include "lessons/labs/lab_registry.inc"

namespace gpulab::labs {

std::vector<std::unique_ptr<lab::Lab>> makeBuiltinLabs() {
  std::vector<std::unique_ptr<lab::Lab>> all;
#define GPULAB_ADD_LAB(Class) all.push_back(std::make_unique<Class>());
  GPULAB_BUILTIN_LABS(GPULAB_ADD_LAB)
#undef GPULAB_ADD_LAB
  return all;
}

std::unique_ptr<lab::Lab> makeLab(const std::string& id) {
  std::string known;
  for (auto& l : makeBuiltinLabs()) {
    if (l->id() == id) return std::move(l);
    known += (known.empty() ? "" : ", ") + l->id();
  }
  throw ValueError("unknown lab '" + id + "' (known labs: " + known + ")");
}

std::vector<DeviceLeftovers> deviceLeftovers() {
  std::vector<DeviceLeftovers> out;
  for (const cuda::DeviceChoice& choice : cuda::availableDevices()) {
    const CachingAllocator& a = allocatorFor(choice.device);
    out.push_back({.device = choice.device,
                   .allocated = memory_allocated(choice.device),
                   .reserved = memory_reserved(choice.device),
                   .peakAllocated = max_memory_allocated(choice.device) - memory_allocated(choice.device),
                   .fraction = a.memoryFraction(),
                   .limit = a.limitBytes()});
  }
  return out;
}

std::vector<DeviceLeftovers> cleanDevices() {
  for (const cuda::DeviceChoice& choice : cuda::availableDevices()) {
    const Device d = choice.device;
    if (d.isCuda()) cuda::synchronize(d.index());  // its streams idle: nothing of an earlier run still queued
    CachingAllocator& a = allocatorFor(d);
    a.setMemoryFraction(1.0);
    a.setLimitBytes(0);
    empty_cache(d);
    reset_peak_memory_stats(d);
  }
  std::vector<DeviceLeftovers> left;
  for (const DeviceLeftovers& d : deviceLeftovers())
    if (!d.clean()) left.push_back(d);
  return left;
}

void runIsolated(lab::Lab& theLab, const lab::Params& params, lab::MetricSink& sink, const lab::StopToken& stop) {
  theLab.check(params);  // before anything is cleaned or run
  for (const DeviceLeftovers& d : cleanDevices()) {
    if (!d.device.isCuda()) continue;  // the CPU holds the process's own tensors (data sets) between runs
    sink.warning("this run starts with " + formatBytes(d.allocated) + " still allocated on " + d.device.str() +
                 " by an earlier run (a leak): its memory numbers include them");
  }
  theLab.run(params, sink, stop);
}

}  // namespace gpulab::labs
