#include "engine/memory/memory.h"

#include <unistd.h>

#include <cstdlib>

#include "engine/core/errors.h"
#include "engine/runtime/cuda_runtime.h"

namespace gpulab {
namespace {

class CpuRawAllocator final : public RawAllocator {
 public:
  void* rawAllocate(std::size_t bytes) override { return std::aligned_alloc(64, bytes); }
  void rawFree(void* ptr, std::size_t) override { std::free(ptr); }
  MemoryCapacity capacity() const override { return hostMemoryCapacity(); }
  std::string kindName() const override { return "CPU"; }
  std::string deviceName() const override { return "CPU"; }
};

}  // namespace

MemoryCapacity hostMemoryCapacity() {
  const auto page = static_cast<std::int64_t>(sysconf(_SC_PAGESIZE));
  return {static_cast<std::int64_t>(sysconf(_SC_AVPHYS_PAGES)) * page, static_cast<std::int64_t>(sysconf(_SC_PHYS_PAGES)) * page};
}

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
std::string memory_summary(Device d) { return allocatorFor(d).summary(); }
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

DriverMemoryInfo driver_memory_info(Device d) {
  if (d.isCpu()) return {false, "not available on the CPU (nvidia-smi's view exists for GPUs only)", 0, 0, std::nullopt};
  return cuda::driverMemoryInfo(d.index());
}

}  // namespace gpulab
