#include "lessons/labs/labs.h"

#include "engine/core/errors.h"
#include "engine/runtime/device_memory.h"
#include "engine/runtime/cuda_runtime.h"
#include "engine/runtime/device_runtime.h"
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

std::vector<DeviceLeftovers> cleanDevices(std::vector<std::string>* problems) {
  for (const cuda::DeviceChoice& choice : cuda::availableDevices()) {
    const Device d = choice.device;
    try {
      CachingAllocator& a = allocatorFor(d);
      const MemoryStats st = a.stats();
      // A device this process has not used has nothing to clean -- and waiting for a real GPU would
      // create its CUDA context (hundreds of MiB) for nothing.
      const bool used = st.reserved_bytes.current > 0 || st.allocated_bytes.peak > 0 || st.reserved_bytes.peak > 0 ||
                        a.memoryFraction() < 1.0 || a.limitBytes() != 0;
      if (!used) continue;
      if (d.isCuda()) cuda::synchronize(d.index());  // its streams idle: nothing of an earlier run still queued
      a.setMemoryFraction(1.0);
      a.setLimitBytes(0);
      empty_cache(d);
      reset_peak_memory_stats(d);
    } catch (const std::exception& e) {
      // An earlier run's kernel error reported at this synchronisation, or a GPU no longer usable: the
      // other devices are still cleaned, and the run is told.
      if (problems) problems->push_back(d.str() + ": " + e.what());
    }
  }
  // The page-locked host blocks an earlier run's pin_memory() cached: back to the system, as the
  // devices' caches are (the devices are idle now, so no copy still reads one).
  try {
    if (cuda::pinnedMemoryAvailable()) pinnedAllocator().emptyCache();
  } catch (const std::exception& e) {
    if (problems) problems->push_back(std::string("pinned host memory: ") + e.what());
  }
  std::vector<DeviceLeftovers> left;
  for (const DeviceLeftovers& d : deviceLeftovers())
    if (!d.clean()) left.push_back(d);
  return left;
}

std::vector<std::string> prepareRun(const lab::Lab& theLab, const lab::Params& params) {
  theLab.check(params);  // before anything is cleaned or run
  if (!theLab.runsInThisProcess()) return {};  // it starts in a fresh process: nothing here can change what it measures
  std::vector<std::string> problems, warnings;
  const std::vector<DeviceLeftovers> left = cleanDevices(&problems);
  for (const std::string& p : problems) warnings.push_back("before the run, cleaning the devices met an error: " + p);
  for (const DeviceLeftovers& d : left) {
    // The CPU holds the process's own tensors (data sets) between runs; memory a GPU only reserves
    // (a live CUDA graph's pool, blocks waiting for another stream) is no leak.
    if (!d.device.isCuda() || d.allocated == 0) continue;
    warnings.push_back("this run starts with " + formatBytes(d.allocated) + " still allocated on " + d.device.str() +
                       " by an earlier run (a leak): its memory numbers include them");
  }
  return warnings;
}

void runIsolated(lab::Lab& theLab, const lab::Params& params, lab::MetricSink& sink, const lab::StopToken& stop) {
  for (const std::string& w : prepareRun(theLab, params)) sink.warning(w);
  theLab.run(params, sink, stop);
}

}  // namespace gpulab::labs
