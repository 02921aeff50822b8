#pragma once
// Device memory for tensors. Every tensor's bytes come from the Allocator of its device, which keeps
// PyTorch-style statistics: "allocated" is what live tensors use, "reserved" is what the allocator
// holds from the system (allocated + its cache). A freed block goes back to a per-size cache and is
// reused by the next request of that rounded size, so a training loop stops calling cudaMalloc after
// its first step. (The full caching allocator with split/coalesce and memory events is issue #3.)
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

#include "engine/core/device.h"

namespace gpulab {

struct MemoryStats {
  std::int64_t allocated_bytes = 0;
  std::int64_t peak_allocated_bytes = 0;
  std::int64_t reserved_bytes = 0;
  std::int64_t peak_reserved_bytes = 0;
  std::int64_t num_allocs = 0;       // requests served
  std::int64_t num_frees = 0;
  std::int64_t num_raw_allocs = 0;   // calls to the system allocator (cudaMalloc / aligned_alloc)
  std::int64_t num_raw_frees = 0;
  std::int64_t num_alloc_retries = 0;
  std::int64_t num_ooms = 0;
};

// Where the bytes really come from: cudaMalloc, cudaHostAlloc or aligned_alloc.
class RawAllocator {
 public:
  virtual ~RawAllocator() = default;
  virtual void* rawAllocate(std::size_t bytes) = 0;  // nullptr when the system has no memory left
  virtual void rawFree(void* ptr, std::size_t bytes) = 0;
  // The complete out-of-memory message for a failed request of `bytes`.
  virtual std::string outOfMemoryMessage(std::size_t bytes, const MemoryStats& stats) const = 0;
};

class Allocator {
 public:
  explicit Allocator(std::unique_ptr<RawAllocator> raw);
  ~Allocator();
  Allocator(const Allocator&) = delete;
  Allocator& operator=(const Allocator&) = delete;

  // Never returns nullptr: throws OutOfMemoryError after freeing the cache and retrying once.
  void* allocate(std::size_t bytes);
  void free(void* ptr, std::size_t bytes);
  void emptyCache();
  MemoryStats stats() const;
  void resetPeakStats();

  // Called with a cached block before it is handed out again: the pinned host allocator waits there
  // for asynchronous copies still reading the block.
  void setReuseHook(std::function<void(void*, std::size_t)> hook) { reuseHook_ = std::move(hook); }

  // The size a request is served with: at least 512 bytes, a multiple of 512.
  static std::size_t roundSize(std::size_t bytes);

 private:
  void* allocateLocked(std::size_t rounded);
  void releaseCacheLocked();

  std::unique_ptr<RawAllocator> raw_;
  std::function<void(void*, std::size_t)> reuseHook_;
  mutable std::mutex mutex_;
  std::unordered_map<std::size_t, std::vector<void*>> cache_;  // rounded size -> free blocks
  // Counters are atomics so another thread (the GUI) may read them while a run goes on.
  std::atomic<std::int64_t> allocated_{0}, peakAllocated_{0}, reserved_{0}, peakReserved_{0};
  std::atomic<std::int64_t> numAllocs_{0}, numFrees_{0}, numRawAllocs_{0}, numRawFrees_{0};
  std::atomic<std::int64_t> numRetries_{0}, numOoms_{0};
};

// The allocator that serves `device` (CPU: one per process; CUDA: one per GPU).
Allocator& allocatorFor(Device device);
// Page-locked host memory for fast, asynchronous host-to-device copies (CUDA builds with a usable
// GPU); throws otherwise.
Allocator& pinnedAllocator();

// "2.00 GiB", "512.00 KiB": the way PyTorch prints sizes in its messages.
std::string formatBytes(std::int64_t bytes);

// Bytes owned by one tensor storage, returned to its allocator when the last view of it dies.
class Storage {
 public:
  Storage(std::size_t bytes, Device device, bool pinned = false);
  ~Storage();
  Storage(const Storage&) = delete;
  Storage& operator=(const Storage&) = delete;

  void* data() const { return data_; }
  std::size_t bytes() const { return bytes_; }
  Device device() const { return device_; }
  bool pinned() const { return pinned_; }

 private:
  void* data_ = nullptr;
  std::size_t bytes_ = 0;
  Device device_;
  bool pinned_ = false;
  Allocator* allocator_ = nullptr;
};

}  // namespace gpulab
