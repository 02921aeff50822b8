#pragma once
// GPU Lab's memory API, with torch.cuda's names: one caching allocator per device (the CPU and the
// emulated GPU included, so the memory lessons run on a machine without a GPU), statistics,
// empty_cache, a per-process memory fraction, an emulated CPU memory budget, and the driver's own
// view (NVML). It finds each device's allocator through the device's runtime, so it lives in the
// runtime layer, above the allocators themselves (engine/memory).
#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "engine/core/device.h"
#include "engine/memory/caching_allocator.h"

namespace gpulab {

CachingAllocator& allocatorFor(Device device);
// Page-locked host memory for asynchronous copies to a GPU; throws when no GPU is usable.
CachingAllocator& pinnedAllocator();

std::int64_t memory_allocated(Device device);
std::int64_t max_memory_allocated(Device device);
std::int64_t memory_reserved(Device device);
std::int64_t max_memory_reserved(Device device);
void reset_peak_memory_stats(Device device);
MemoryStats memory_stats(Device device);
std::string memory_summary(Device device);
// Returns cached, unused memory to the system (the driver); returns how many bytes that was.
std::int64_t empty_cache(Device device);
void set_per_process_memory_fraction(double fraction, Device device);
// (free, total) bytes as the driver reports them; on the CPU with a budget: what the budget leaves.
std::pair<std::int64_t, std::int64_t> mem_get_info(Device device);

// The emulated CPU memory budget (0: none): CPU allocations beyond it raise OutOfMemoryError,
// labelled as emulated, so the out-of-memory lesson runs without a GPU. Setting 0 leaves the
// default budget below in force.
void set_cpu_memory_budget(std::int64_t bytes);
std::int64_t cpu_memory_budget();
// The CPU's default budget, always in force: the memory the system reported available when host
// memory was first allocated, less a safety margin (see memory.cpp). Beyond it CPU allocations raise
// "CPU out of memory" instead of letting the machine swap or meet the OOM killer. mem_get_info(kCPU)
// reports it as the total when no emulated budget is set. The emulated GPU's segments (host memory
// too, see engine/runtime/emulated_gpu.h) count against it as well.
std::int64_t cpu_default_memory_budget();

// What the driver (nvidia-smi) sees: the whole device's used memory and this process's share, which
// includes the CUDA context and the libraries' workspaces that GPU Lab's allocator does not count.
struct DriverMemoryInfo {
  bool available = false;
  std::string reason;  // why not, when not available
  std::int64_t device_used = 0, device_total = 0;
  std::optional<std::int64_t> process_used;  // absent when the driver does not list this process
  std::string process_reason;                 // why process_used is absent
};
DriverMemoryInfo driver_memory_info(Device device);

// What nvidia-smi shows for a GPU, through NVML: memory, utilisation, temperature, power and the
// processes using it. Each reading is optional (a driver or a GPU may not offer it); without NVML,
// on the CPU and on the emulated GPU, `available` is false and `reason` says why.
struct DeviceTelemetry {
  struct Process {
    unsigned pid = 0;
    std::string name;  // as the system names it; empty when NVML cannot say
    std::int64_t used_bytes = 0;
    bool self = false;  // this process
  };
  bool available = false;
  std::string reason;
  std::string name;
  std::int64_t memory_used = 0, memory_total = 0;
  std::optional<int> gpu_utilization, memory_utilization;  // percent, over NVML's last sample period
  std::optional<int> temperature_c;
  std::optional<double> power_w, power_limit_w;
  std::vector<Process> processes;
  std::string processes_reason;  // why the list is missing, when it is
};
DeviceTelemetry device_telemetry(Device device);

}  // namespace gpulab
