#include "engine/core/allocator.h"

#include <cstdio>
#include <cstdlib>

#include "engine/core/errors.h"
#include "engine/runtime/cuda_runtime.h"

namespace gpulab {
namespace {

void raisePeak(std::atomic<std::int64_t>& peak, std::int64_t value) {
  std::int64_t seen = peak.load(std::memory_order_relaxed);
  while (value > seen && !peak.compare_exchange_weak(seen, value, std::memory_order_relaxed)) {
  }
}

class CpuRawAllocator final : public RawAllocator {
 public:
  void* rawAllocate(std::size_t bytes) override { return std::aligned_alloc(64, bytes); }
  void rawFree(void* ptr, std::size_t) override { std::free(ptr); }
  std::string outOfMemoryMessage(std::size_t bytes, const MemoryStats& stats) const override {
    return "CPU out of memory. Tried to allocate " + formatBytes(static_cast<std::int64_t>(bytes)) + ". " +
           formatBytes(stats.allocated_bytes) + " is allocated by GPU Lab on the CPU. Reduce the batch size.";
  }
};

}  // namespace

Allocator::Allocator(std::unique_ptr<RawAllocator> raw) : raw_(std::move(raw)) {}

Allocator::~Allocator() {
  std::lock_guard lock(mutex_);
  releaseCacheLocked();
}

std::size_t Allocator::roundSize(std::size_t bytes) {
  constexpr std::size_t kQuantum = 512;
  return bytes == 0 ? kQuantum : (bytes + kQuantum - 1) / kQuantum * kQuantum;
}

void* Allocator::allocate(std::size_t bytes) {
  const std::size_t rounded = roundSize(bytes);
  std::lock_guard lock(mutex_);
  void* ptr = allocateLocked(rounded);
  numAllocs_.fetch_add(1, std::memory_order_relaxed);
  raisePeak(peakAllocated_, allocated_.fetch_add(static_cast<std::int64_t>(rounded)) + static_cast<std::int64_t>(rounded));
  return ptr;
}

void* Allocator::allocateLocked(std::size_t rounded) {
  if (auto it = cache_.find(rounded); it != cache_.end() && !it->second.empty()) {
    void* ptr = it->second.back();
    it->second.pop_back();
    if (reuseHook_) reuseHook_(ptr, rounded);
    return ptr;
  }
  void* ptr = raw_->rawAllocate(rounded);
  if (!ptr && !cache_.empty()) {
    // Free every cached block and try once more, as PyTorch does before reporting OOM.
    numRetries_.fetch_add(1, std::memory_order_relaxed);
    releaseCacheLocked();
    ptr = raw_->rawAllocate(rounded);
  }
  if (!ptr) {
    numOoms_.fetch_add(1, std::memory_order_relaxed);
    throw OutOfMemoryError(raw_->outOfMemoryMessage(rounded, stats()));
  }
  numRawAllocs_.fetch_add(1, std::memory_order_relaxed);
  raisePeak(peakReserved_, reserved_.fetch_add(static_cast<std::int64_t>(rounded)) + static_cast<std::int64_t>(rounded));
  return ptr;
}

void Allocator::free(void* ptr, std::size_t bytes) {
  if (!ptr) return;
  const std::size_t rounded = roundSize(bytes);
  std::lock_guard lock(mutex_);
  cache_[rounded].push_back(ptr);
  allocated_.fetch_sub(static_cast<std::int64_t>(rounded), std::memory_order_relaxed);
  numFrees_.fetch_add(1, std::memory_order_relaxed);
}

void Allocator::emptyCache() {
  std::lock_guard lock(mutex_);
  releaseCacheLocked();
}

void Allocator::releaseCacheLocked() {
  for (auto& [size, blocks] : cache_) {
    for (void* ptr : blocks) {
      raw_->rawFree(ptr, size);
      reserved_.fetch_sub(static_cast<std::int64_t>(size), std::memory_order_relaxed);
      numRawFrees_.fetch_add(1, std::memory_order_relaxed);
    }
  }
  cache_.clear();
}

MemoryStats Allocator::stats() const {
  MemoryStats s;
  s.allocated_bytes = allocated_.load(std::memory_order_relaxed);
  s.peak_allocated_bytes = peakAllocated_.load(std::memory_order_relaxed);
  s.reserved_bytes = reserved_.load(std::memory_order_relaxed);
  s.peak_reserved_bytes = peakReserved_.load(std::memory_order_relaxed);
  s.num_allocs = numAllocs_.load(std::memory_order_relaxed);
  s.num_frees = numFrees_.load(std::memory_order_relaxed);
  s.num_raw_allocs = numRawAllocs_.load(std::memory_order_relaxed);
  s.num_raw_frees = numRawFrees_.load(std::memory_order_relaxed);
  s.num_alloc_retries = numRetries_.load(std::memory_order_relaxed);
  s.num_ooms = numOoms_.load(std::memory_order_relaxed);
  return s;
}

void Allocator::resetPeakStats() {
  peakAllocated_.store(allocated_.load());
  peakReserved_.store(reserved_.load());
}

Allocator& allocatorFor(Device device) {
  if (device.isCuda()) return cuda::deviceAllocator(device.index());
  static Allocator cpu(std::make_unique<CpuRawAllocator>());
  return cpu;
}

Allocator& pinnedAllocator() { return cuda::pinnedHostAllocator(); }

std::string formatBytes(std::int64_t bytes) {
  const char* units[] = {"bytes", "KiB", "MiB", "GiB", "TiB"};
  double value = static_cast<double>(bytes);
  int unit = 0;
  while (std::abs(value) >= 1024.0 && unit < 4) {
    value /= 1024.0;
    ++unit;
  }
  char buf[64];
  if (unit == 0) std::snprintf(buf, sizeof buf, "%lld bytes", static_cast<long long>(bytes));
  else std::snprintf(buf, sizeof buf, "%.2f %s", value, units[unit]);
  return buf;
}

Storage::Storage(std::size_t bytes, Device device, bool pinned)
    : bytes_(bytes), device_(device), pinned_(pinned),
      allocator_(pinned ? &pinnedAllocator() : &allocatorFor(device)) {
  data_ = allocator_->allocate(bytes);
}

Storage::~Storage() { allocator_->free(data_, bytes_); }

}  // namespace gpulab
