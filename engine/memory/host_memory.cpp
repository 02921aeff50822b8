// Host memory under one budget (host_memory.h).
#include "engine/memory/host_memory.h"

#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

namespace gpulab {
namespace {

constexpr std::int64_t kMiB = std::int64_t{1} << 20;

// A number from a "key: value kB" line of /proc/meminfo (bytes), or -1.
std::int64_t meminfoBytes(const char* key) {
  std::FILE* f = std::fopen("/proc/meminfo", "re");
  if (!f) return -1;
  char line[256];
  std::int64_t result = -1;
  const std::size_t keyLength = std::strlen(key);
  while (std::fgets(line, sizeof line, f)) {
    if (std::strncmp(line, key, keyLength) == 0 && line[keyLength] == ':') {
      long long kb = 0;
      if (std::sscanf(line + keyLength + 1, "%lld", &kb) == 1) result = kb * 1024;
      break;
    }
  }
  std::fclose(f);
  return result;
}

// One number from a cgroup v2 file of this process's cgroup ("max" or absent: -1).
std::int64_t cgroupBytes(const char* file) {
  std::FILE* f = std::fopen((std::string("/sys/fs/cgroup/") + file).c_str(), "re");
  if (!f) return -1;
  long long value = -1;
  if (std::fscanf(f, "%lld", &value) != 1) value = -1;
  std::fclose(f);
  return value;
}

// What the system could give this process now: MemAvailable (free memory plus the page cache it can
// reclaim; sysconf(_SC_AVPHYS_PAGES) counts free pages only and would understate it), and no more
// than what is left under a cgroup (container) limit.
std::int64_t availableHostBytes() {
  std::int64_t available = meminfoBytes("MemAvailable");
  if (available < 0) available = static_cast<std::int64_t>(sysconf(_SC_AVPHYS_PAGES)) * static_cast<std::int64_t>(sysconf(_SC_PAGESIZE));
  const std::int64_t limit = cgroupBytes("memory.max"), used = cgroupBytes("memory.current");
  if (limit > 0 && used >= 0) available = std::min(available, std::max<std::int64_t>(0, limit - used));
  return std::max<std::int64_t>(0, available);
}

// The CPU's default budget: the memory available when the CPU allocator is first used, less a
// safety margin. Linux overcommits, so malloc/aligned_alloc hardly ever return nullptr: a model too
// large for the machine would get its address space, then swap or meet the OOM killer while its
// pages are touched, instead of raising OutOfMemoryError as the GPU's allocator does when cudaMalloc
// fails. The margin (1/8 of what is available, at least 512 MiB; half when less than 1 GiB is
// available) is left for what this allocator does not count -- the data set being read, BLAS and
// thread stacks, the GUI and its plots -- and for the system and other programs, whose own use of
// memory keeps changing after the budget is fixed.
std::int64_t defaultCpuBudget() {
  const std::int64_t available = availableHostBytes();
  const std::int64_t margin = std::max<std::int64_t>(512 * kMiB, available / 8);
  return available >= 2 * margin ? available - margin : std::max<std::int64_t>(64 * kMiB, available / 2);
}

// Host memory under the CPU's default budget. Every allocator over host memory reserves its segments
// here -- the CPU device's and the emulated GPU's (engine/runtime/emulated_gpu.cpp), whose memory is
// host memory too -- so together they never take more than the system had available. A segment that
// would pass the budget is refused (nullptr): the caching allocator releases its cache, retries, and
// then raises "CPU out of memory" (or the emulated GPU's "CUDA out of memory") with its statistics.
// The emulated CPU budget (set_cpu_memory_budget) is the CPU caching allocator's cap, on top of this.
class HostBudget {
 public:
  // Segments from 1 MiB are mapped from the system and unmapped when freed: so that empty_cache()
  // really gives them back. From malloc, a freed block of a few MiB raises glibc's threshold for
  // mapping (up to 32 MiB) and later blocks come from heaps it seldom returns: a window running the
  // streams lesson 100 times grew from 0.3 to 0.55 GB with every cache emptied (issue 27 6.8).
  static constexpr std::size_t kMappedSegment = std::size_t{1} << 20;
  HostBudget() : budget_(defaultCpuBudget()) {}
  void* allocate(std::size_t bytes) {
    const auto size = static_cast<std::int64_t>(bytes);
    std::int64_t reserved = reserved_.load(std::memory_order_relaxed);
    do {
      if (size > budget_ - reserved) return nullptr;
    } while (!reserved_.compare_exchange_weak(reserved, reserved + size, std::memory_order_relaxed));
    void* ptr = nullptr;
    if (bytes >= kMappedSegment) {
      ptr = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
      if (ptr == MAP_FAILED) ptr = nullptr;
    } else {
      ptr = std::aligned_alloc(64, bytes);
    }
    if (!ptr) reserved_.fetch_sub(size, std::memory_order_relaxed);
    return ptr;
  }
  void free(void* ptr, std::size_t bytes) {
    if (bytes >= kMappedSegment) munmap(ptr, bytes);
    else std::free(ptr);
    reserved_.fetch_sub(static_cast<std::int64_t>(bytes), std::memory_order_relaxed);
  }
  // What the budget leaves, and never more than the system has now.
  std::int64_t left() const {
    return std::min(std::max<std::int64_t>(0, budget_ - reserved_.load(std::memory_order_relaxed)), availableHostBytes());
  }
  std::int64_t budget() const { return budget_; }

 private:
  const std::int64_t budget_;
  std::atomic<std::int64_t> reserved_{0};
};

// Fixed at first use; never destroyed (tensors in static storage may free into it as the process ends).
HostBudget& hostBudget() {
  static HostBudget* budget = new HostBudget;
  return *budget;
}

}  // namespace

void* allocateHostSegment(std::size_t bytes) { return hostBudget().allocate(bytes); }
void freeHostSegment(void* ptr, std::size_t bytes) { hostBudget().free(ptr, bytes); }
std::int64_t hostSegmentBytesLeft() { return hostBudget().left(); }
std::int64_t hostBudgetBytes() { return hostBudget().budget(); }

MemoryCapacity hostMemoryCapacity() {
  const auto page = static_cast<std::int64_t>(sysconf(_SC_PAGESIZE));
  return {availableHostBytes(), static_cast<std::int64_t>(sysconf(_SC_PHYS_PAGES)) * page};
}

}  // namespace gpulab
