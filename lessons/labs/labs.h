#pragma once
// The labs built into GPU Lab. Lesson files can only name these: nothing in a lesson runs code of
// its own.
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "engine/core/device.h"
#include "engine/lab/lab.h"

namespace gpulab::labs {

std::vector<std::unique_ptr<lab::Lab>> makeBuiltinLabs();
// The lab with this id; throws ValueError listing the known ids otherwise.
std::unique_ptr<lab::Lab> makeLab(const std::string& id);

// What an earlier run left on a device: its tensors still allocated, its allocator's cached
// segments, a memory fraction or cap, and the peaks.
struct DeviceLeftovers {
  Device device;
  std::int64_t allocated = 0, reserved = 0, peakAllocated = 0;
  double fraction = 1.0;
  std::int64_t limit = 0;
  bool clean() const { return allocated == 0 && reserved == 0 && peakAllocated == 0 && fraction >= 1.0 && limit == 0; }
};
// Every device a lab could use (the CPU, the real GPUs, the emulated GPU), as it is now.
std::vector<DeviceLeftovers> deviceLeftovers();
// Brings every device this process has used to where a fresh process starts: its streams idle, its
// cache emptied, no memory fraction or cap, its peaks reset. Returns what it could not clear: the
// devices that still hold tensors (an earlier run's, or the process's own on the CPU), which is only
// a leak on a GPU. A device that fails to clean (an earlier run's kernel error surfacing) is said in
// `problems`; the others are cleaned all the same.
std::vector<DeviceLeftovers> cleanDevices(std::vector<std::string>* problems = nullptr);

// What the GUI and gpulab-cli do before a lab runs: Lab::check (ValueError for settings that
// contradict one another), then cleanDevices(), so that what an earlier run left -- cached segments a
// smaller fraction would then serve without asking, a peak, a cap -- cannot change what this run
// measures. Returns the warnings to show before the run: memory a GPU still holds (an earlier run
// leaked it), a device that failed to clean. A lab that runs in a process of its own (a Python lab)
// starts clean by itself: only its check is made.
std::vector<std::string> prepareRun(const lab::Lab& lab, const lab::Params& params);

// prepareRun, its warnings sent to the sink, then the run.
void runIsolated(lab::Lab& lab, const lab::Params& params, lab::MetricSink& sink, const lab::StopToken& stop);

}  // namespace gpulab::labs
