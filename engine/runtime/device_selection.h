#pragma once
// Which of the GPUs the CUDA runtime enumerates GPU Lab can use, and how its device indices map to
// CUDA ordinals. Kept apart from the CUDA module so the rule is tested on machines without a GPU.
//
// GPUs below compute capability 7.5 are skipped (the kernels are built for sm_75 and newer). The
// engine's cuda:N is then the N-th *usable* GPU, which is not CUDA's ordinal N when an older GPU comes
// first: every CUDA call must take DeviceProperties::cuda_ordinal, never the engine index.
#include <string>
#include <vector>

#include "engine/runtime/cuda_runtime.h"

namespace gpulab::cuda {

constexpr int kMinComputeMajor = 7, kMinComputeMinor = 5;

struct DeviceSelection {
  std::vector<DeviceProperties> usable;  // index = position here, cuda_ordinal = the runtime's ordinal
  std::string skipped;                   // why GPUs were left out ("" when none was)
};

// `enumerated` holds what the runtime reported, in its order, with cuda_ordinal set.
inline DeviceSelection selectUsableDevices(const std::vector<DeviceProperties>& enumerated) {
  DeviceSelection s;
  for (const DeviceProperties& d : enumerated) {
    if (d.major < kMinComputeMajor || (d.major == kMinComputeMajor && d.minor < kMinComputeMinor)) {
      if (!s.skipped.empty()) s.skipped += "; ";
      s.skipped += d.name + " (CUDA device " + std::to_string(d.cuda_ordinal) + ") has compute capability " +
                   std::to_string(d.major) + "." + std::to_string(d.minor) + "; GPU Lab's kernels need " +
                   std::to_string(kMinComputeMajor) + "." + std::to_string(kMinComputeMinor) + " or newer";
      continue;
    }
    DeviceProperties u = d;
    u.index = static_cast<int>(s.usable.size());
    s.usable.push_back(u);
  }
  return s;
}

}  // namespace gpulab::cuda
