#include "engine/runtime/device_memory.h"

#include <algorithm>

#include "engine/core/errors.h"
#include "engine/memory/host_memory.h"
#include "engine/runtime/cuda_runtime.h"
#include "engine/runtime/device_runtime.h"
#include "engine/runtime/stream.h"

namespace gpulab {
namespace {

// The CPU device's segments: aligned_alloc under the host budget, which is the CPU's capacity.
class CpuRawAllocator final : public RawAllocator {
 public:
  void* rawAllocate(std::size_t bytes) override { return allocateHostSegment(bytes); }
  void rawFree(void* ptr, std::size_t bytes) override { freeHostSegment(ptr, bytes); }
  MemoryCapacity capacity() const override { return {hostSegmentBytesLeft(), hostBudgetBytes()}; }
  std::string kindName() const override { return "CPU"; }
  std::string deviceName() const override { return "CPU"; }
};

// What a new tensor's Storage asks for (engine/core/allocator.h): the device's allocator and its
// current stream, once the device is known to be usable. Installed when the engine loads.
TensorAllocation tensorAllocation(Device device, bool pinned) {
  if (pinned) return {&pinnedAllocator(), 0};
  if (!device.isCuda()) return {&allocatorFor(device), 0};
  cuda::checkDeviceUsable(device);
  return {&allocatorFor(device), currentStreamId(device)};
}
[[maybe_unused]] const bool tensorAllocationInstalled = (setTensorAllocationSource(&tensorAllocation), true);

}  // namespace

CachingAllocator& allocatorFor(Device device) {
  if (device.isCuda()) return cuda::deviceAllocator(device.index());
  // Never destroyed: tensors in static storage may still free into it while the process ends.
  static CachingAllocator* cpu = new CachingAllocator(std::make_unique<CpuRawAllocator>(), kCPU);
  return *cpu;
}

CachingAllocator& pinnedAllocator() { return cuda::pinnedHostAllocator(); }

std::int64_t memory_allocated(Device d) { return allocatorFor(d).stats().allocated_bytes.current; }
std::int64_t max_memory_allocated(Device d) { return allocatorFor(d).stats().allocated_bytes.peak; }
std::int64_t memory_reserved(Device d) { return allocatorFor(d).stats().reserved_bytes.current; }
std::int64_t max_memory_reserved(Device d) { return allocatorFor(d).stats().reserved_bytes.peak; }
void reset_peak_memory_stats(Device d) { allocatorFor(d).resetPeakStats(); }
MemoryStats memory_stats(Device d) { return allocatorFor(d).stats(); }
std::string memory_summary(Device d) {
  std::string summary = allocatorFor(d).summary();
  if (d.isCpu()) summary += "CPU default memory budget: " + formatBytes(cpu_default_memory_budget()) + " (the memory available at first use, less a safety margin)\n";
  if (const cuda::DeviceRuntime* r = cuda::findRuntime(d); r && !r->memoryNote().empty()) summary += r->memoryNote() + "\n";
  return summary;
}
std::int64_t empty_cache(Device d) { return allocatorFor(d).emptyCache(); }
void set_per_process_memory_fraction(double fraction, Device d) { allocatorFor(d).setMemoryFraction(fraction); }

std::pair<std::int64_t, std::int64_t> mem_get_info(Device d) {
  CachingAllocator& a = allocatorFor(d);
  if (d.isCpu() && a.limitBytes() > 0) {
    return {std::max<std::int64_t>(0, a.limitBytes() - a.stats().reserved_bytes.current), a.limitBytes()};
  }
  const MemoryCapacity c = a.capacity();
  return {c.free, c.total};
}

void set_cpu_memory_budget(std::int64_t bytes) { allocatorFor(kCPU).setLimitBytes(bytes); }
std::int64_t cpu_memory_budget() { return allocatorFor(kCPU).limitBytes(); }
std::int64_t cpu_default_memory_budget() { return hostBudgetBytes(); }

namespace {
constexpr const char* kNoDriverViewOnCpu = "not available on the CPU (nvidia-smi's view exists for GPUs only)";
}

DriverMemoryInfo driver_memory_info(Device d) {
  if (!d.isCpu()) return cuda::driverMemoryInfo(d.index());
  DriverMemoryInfo info;
  info.reason = kNoDriverViewOnCpu;
  return info;
}

DeviceTelemetry device_telemetry(Device d) {
  if (!d.isCpu()) return cuda::deviceTelemetry(d.index());
  DeviceTelemetry t;
  t.reason = kNoDriverViewOnCpu;
  return t;
}

}  // namespace gpulab
