#pragma once
// Reading NVML's list of processes on a GPU (nvmlDeviceGetComputeRunningProcesses), kept apart from
// the CUDA module so the layout rules are tested without a GPU or a driver.
//
// The driver writes nvmlProcessInfo_t entries whose size changed without a new entry point: 24 bytes
// (pid, usedGpuMemory, gpuInstanceId, computeInstanceId) up to the R530 drivers, 32 bytes from R535
// on (usedGpuCcProtectedMemory appended). Reading 32-byte entries as 24-byte ones misreads every entry
// after the first, and a buffer sized for the small struct overflows. The caller picks the stride
// from the driver's version; the list is read with memcpy at that stride, and the buffer grows while
// NVML answers NVML_ERROR_INSUFFICIENT_SIZE.
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

namespace gpulab::cuda {

constexpr int kNvmlSuccess = 0, kNvmlInsufficientSize = 7;

inline std::size_t nvmlProcessInfoSize(int driverMajor) { return driverMajor >= 535 ? 32 : 24; }

// "580.159.04" -> 580; 0 when it cannot be read.
inline int driverMajorVersion(const char* text) {
  int major = 0;
  for (const char* c = text; c && *c >= '0' && *c <= '9'; ++c) major = major * 10 + (*c - '0');
  return major;
}

struct NvmlProcess {
  unsigned int pid = 0;
  unsigned long long used_bytes = 0;
};

struct NvmlProcessList {
  bool ok = false;
  std::string error;  // when !ok
  std::vector<NvmlProcess> processes;
};

// `query(count, buffer)` calls NVML: on entry *count is the buffer's capacity in entries, on return the
// number of entries (or the number needed, with kNvmlInsufficientSize).
template <class Query>
NvmlProcessList queryNvmlProcesses(Query&& query, std::size_t stride) {
  NvmlProcessList list;
  unsigned int capacity = 16;
  for (int attempt = 0; attempt < 8; ++attempt) {
    std::vector<unsigned char> buffer(static_cast<std::size_t>(capacity) * stride, 0);
    unsigned int count = capacity;
    const int r = query(&count, buffer.data());
    if (r == kNvmlInsufficientSize) {
      capacity = std::max(capacity * 2, count + 8);  // processes may start between the calls
      continue;
    }
    if (r != kNvmlSuccess) {
      list.error = "NVML could not list the GPU's processes (error " + std::to_string(r) + ")";
      return list;
    }
    if (count > capacity) count = capacity;
    for (unsigned int i = 0; i < count; ++i) {
      const unsigned char* entry = buffer.data() + static_cast<std::size_t>(i) * stride;
      NvmlProcess p;
      std::memcpy(&p.pid, entry, sizeof p.pid);
      std::memcpy(&p.used_bytes, entry + 8, sizeof p.used_bytes);  // after the pid and its padding
      list.processes.push_back(p);
    }
    list.ok = true;
    return list;
  }
  list.error = "NVML's list of processes kept growing";
  return list;
}

}  // namespace gpulab::cuda
