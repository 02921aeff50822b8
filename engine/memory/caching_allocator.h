#pragma once
// The caching allocator, one per device, in the spirit of PyTorch's CUDA caching allocator.
//
// Policy
// - Sizes are rounded up to a multiple of 512 bytes (512 minimum).
// - Two pools: requests up to 1 MiB come from the small pool, whose segments are 2 MiB; larger
//   requests come from the large pool, whose segments are 20 MiB for requests under 10 MiB and the
//   request rounded up to 2 MiB otherwise. (If a cap would refuse the preferred segment, the
//   smallest segment that fits the request is tried.) A pool never serves the other's sizes, so
//   small, short-lived tensors cannot fragment the big segments.
// - A request takes the best-fitting free block of its pool (smallest size, then lowest address)
//   that belongs to the same stream; a block is reused only on the stream it was freed on, which is
//   what keeps reuse safe without synchronisation. The fit is split when the rest is worth keeping
//   (>= 512 bytes in the small pool, > 1 MiB in the large pool).
// - Stream safety, the rule the callers keep: a block is written and read only on the stream it was
//   allocated for. Then a block freed on the host while kernels queued earlier still read it can be
//   handed out at once: whatever the new owner queues on that stream runs after those kernels. The
//   backends keep the rule by queueing every kernel and copy on the calling thread's current stream
//   (engine/runtime/stream.h), the one the block was allocated for unless the program switched
//   streams; a tensor used on another stream must say so with recordStream(), PyTorch's
//   record_stream, which keeps a freed block out of the pool until those streams have passed it.
// - Freed blocks merge with free neighbours of their segment (coalescing), so a segment whose blocks
//   are all free is one free block again and can be returned by empty_cache().
// - When the system refuses a segment (or the memory fraction / CPU budget would be exceeded), every
//   wholly free cached segment is released and the request is tried once more; only then does it
//   fail with OutOfMemoryError, whose message reads like PyTorch's.
// - CUDA graphs (engine/runtime/cuda_graph.h): while a graph is captured on a stream, that stream's
//   allocations come from the graph's private pool (PyTorch's graph memory pool): its blocks are keyed
//   by the pool as well as the stream, reused only by allocations into the same pool, and kept from the
//   system while the pool is retained -- the graph's replays write into them even after the tensors
//   that held them during the capture were freed. While a capture is underway no segment goes back to
//   the system and no marker is recorded or queried (cudaFree and events would break it): a block used
//   on other streams that is freed then waits, as PyTorch's do, until no capture is underway.
// - Statistics (current/peak/allocated/freed for bytes, blocks and segments; retries; OOMs) are exact
//   after every call, and every change is published to the memory event stream. An OutOfMemory
//   event has no address of its own: its `address` is the bytes the cap (or the device) left free at
//   that moment, PyTorch's device_free.
#include <cstdint>
#include <optional>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <unordered_map>
#include <vector>

#include "engine/core/allocator.h"
#include "engine/core/device.h"
#include "engine/memory/memory_events.h"
#include "engine/memory/raw_allocator.h"

namespace gpulab {

struct MemoryStat {
  std::int64_t current = 0, peak = 0, allocated = 0, freed = 0;
};

// The record of torch.cuda.memory_stats(), per device.
struct MemoryStats {
  MemoryStat allocated_bytes;  // bytes in blocks handed out (rounded sizes)
  MemoryStat reserved_bytes;   // bytes in segments held from the system
  MemoryStat active_blocks;    // number of blocks handed out
  MemoryStat segments;         // number of segments held
  std::int64_t num_alloc_retries = 0;  // requests that needed the cache released to succeed or fail
  std::int64_t num_ooms = 0;
};

// A read-only view of one segment and its blocks, as the allocator holds them (for memory snapshots:
// engine/runtime/memory_snapshot.h).
struct AllocatorBlockInfo {
  std::uintptr_t address = 0;
  std::int64_t size = 0;            // the block's (rounded) size
  std::int64_t requested_size = 0;  // what allocate() was asked for; 0 for a free block
  bool allocated = false;
  MemoryCategory category = MemoryCategory::Other;
};
struct AllocatorSegmentInfo {
  std::uintptr_t address = 0;
  std::int64_t total_size = 0;
  std::uintptr_t stream = 0;
  bool small = false;  // a segment of the small pool
  std::vector<AllocatorBlockInfo> blocks;  // in address order; their sizes add up to total_size
};

class CachingAllocator final : public Allocator {
 public:
  static constexpr std::size_t kMinBlockSize = 512;
  static constexpr std::size_t kSmallSize = 1 << 20;        // largest request of the small pool
  static constexpr std::size_t kSmallSegment = 2 << 20;     // segment size of the small pool
  static constexpr std::size_t kLargeSegment = 20 << 20;    // segment for 1 MiB < request < 10 MiB
  static constexpr std::size_t kMinLargeAlloc = 10 << 20;   // from here segments fit the request
  static constexpr std::size_t kRoundLarge = 2 << 20;

  CachingAllocator(std::unique_ptr<RawAllocator> raw, Device device);
  ~CachingAllocator();
  CachingAllocator(const CachingAllocator&) = delete;
  CachingAllocator& operator=(const CachingAllocator&) = delete;

  // Never returns nullptr: throws OutOfMemoryError.
  void* allocate(std::size_t bytes, std::uintptr_t stream = 0) override;
  // Returns a block from allocate() to the cache; throws Error for a pointer it did not hand out.
  void free(void* ptr) override;
  // Releases every wholly free cached segment to the system; returns the bytes released.
  std::int64_t emptyCache();
  // Tensor.record_stream(stream): the block at `ptr` is also used by work on `stream`. When it is
  // freed, it waits for that stream to pass the point it has reached then before it is reused.
  void recordStream(void* ptr, std::uintptr_t stream);
  // Pinned host memory that an asynchronous copy queued on a device's `stream` reads or writes (`ptr`
  // may point inside its block). Once freed, the block joins the pool only when that stream has passed
  // the point its queue had reached at the free, so the copy has run -- and meanwhile an allocation
  // takes another block instead of waiting for the device (PyTorch's CachingHostAllocator records an
  // event per copy). Unlike recordStream, `stream` is another device's, whatever its id.
  void recordAsyncCopy(const void* ptr, std::uintptr_t stream);
  // CUDA graphs: from now until endAllocateToPool(stream), allocations on `stream` come from the
  // private pool `pool` (an id from cuda::graph_pool_handle(), never 0). The pool must be retained.
  void beginAllocateToPool(std::uintptr_t stream, std::uint64_t pool);
  void endAllocateToPool(std::uintptr_t stream);
  // A graph holds its pool from its capture until it is reset; a pool nobody retains may be released
  // to the system like any cached memory (its blocks are still never handed to other streams).
  void retainPool(std::uint64_t pool);
  void releasePool(std::uint64_t pool);
  // Bytes freed but still waiting for another stream (counted as free in the statistics, as PyTorch).
  std::int64_t pendingBytes() const;

  MemoryStats stats() const;
  // Every segment held now, by address, with its blocks: one consistent view, taken under the lock.
  std::vector<AllocatorSegmentInfo> segments() const;
  void resetPeakStats();
  // Caps reserved memory at fraction * total capacity (PyTorch's set_per_process_memory_fraction).
  void setMemoryFraction(double fraction);
  double memoryFraction() const;
  // Caps reserved memory at `bytes` (0: no cap): the CPU's emulated memory budget.
  void setLimitBytes(std::int64_t bytes);
  std::int64_t limitBytes() const;
  // The cap in force (none: no fraction below 1 and no byte limit), the smaller of the two.
  std::optional<std::int64_t> effectiveCap() const;
  MemoryCapacity capacity() const { return raw_->capacity(); }
  Device device() const { return device_; }
  // A text table like torch.cuda.memory_summary().
  std::string summary() const;

  static std::size_t roundSize(std::size_t bytes);

 private:
  struct Block {
    std::size_t size = 0;
    char* ptr = nullptr;
    std::uintptr_t stream = 0;
    bool allocated = false;
    bool small = false;
    MemoryCategory category = MemoryCategory::Other;
    Block* prev = nullptr;  // neighbours within the segment
    Block* next = nullptr;
    std::size_t requested = 0;  // the size asked for, while allocated
    bool pending = false;       // freed, waiting for the streams in streamUses to pass their markers
    std::vector<std::uintptr_t> streamUses;  // record_stream's other streams
    std::uint64_t pool = 0;  // the graph memory pool it belongs to (0: none)
  };
  struct Pending {
    Block* block;
    std::vector<std::uintptr_t> markers;  // RawAllocator::recordMarker, one per stream that used it
  };
  struct BlockOrder {
    bool operator()(const Block* a, const Block* b) const;
  };
  using Pool = std::set<Block*, BlockOrder>;

  Block* reserveSegment(std::size_t rounded, bool small, std::uintptr_t stream);
  Block* tryReserve(std::size_t segmentSize, bool small, std::uintptr_t stream);
  std::int64_t releaseCachedLocked();
  void insertFree(Block* block);  // into its pool, merged with free neighbours
  void processPendingLocked();    // pending blocks whose streams have passed their markers go free
  Pool& poolFor(bool small) { return small ? smallPool_ : largePool_; }
  std::optional<std::int64_t> capLocked() const;
  [[noreturn]] void throwOutOfMemory(std::size_t rounded);
  void publish(MemoryEventKind kind, std::int64_t size, const void* ptr, std::uintptr_t stream, MemoryCategory category) const;
  static void update(MemoryStat& s, std::int64_t delta);

  // Bookkeeping without malloc in the steady state: a training loop allocates and frees the same sizes
  // every step, and each allocate/free pair used to cost eight heap calls for the pools' and the
  // active map's nodes and the Block structs. Erased nodes and deleted Blocks are kept here and reused.
  using ActiveMap = std::unordered_map<void*, Block*>;
  Block* newBlock(const Block& init);
  void recycle(Block* block);
  void poolInsert(Pool& pool, Block* block);
  void poolErase(Pool& pool, Pool::iterator it);
  void poolErase(Pool& pool, Block* block) { poolErase(pool, pool.find(block)); }
  void activeInsert(Block* block);
  void activeErase(ActiveMap::iterator it);

  std::unique_ptr<RawAllocator> raw_;
  Device device_;
  mutable std::mutex mutex_;
  Pool smallPool_, largePool_;
  ActiveMap active_;
  std::vector<Pending> pending_;
  std::vector<Pool::node_type> sparePoolNodes_;
  std::vector<ActiveMap::node_type> spareActiveNodes_;
  std::vector<std::unique_ptr<Block>> spareBlocks_;
  MemoryStats stats_;
  double fraction_ = 1.0;
  std::int64_t limitBytes_ = 0;
  // Streams capturing into a private pool (stream -> pool), and how many graphs retain each pool.
  std::vector<std::pair<std::uintptr_t, std::uint64_t>> capturing_;
  std::unordered_map<std::uint64_t, int> retainedPools_;
  // Blocks used on other streams, freed during a capture: their markers are recorded once none is underway.
  std::vector<Block*> deferredUntilNoCapture_;
  std::uint64_t poolLocked(std::uintptr_t stream) const;  // the pool `stream` captures into (0: none)
  bool retainedLocked(std::uint64_t pool) const;
  void markPendingLocked(Block* block);  // markers on its other streams; it joins the pool when they pass
  std::int64_t fractionCapBytes_ = 0;  // fraction_ * total, fixed when the fraction is set (in force while fraction_ < 1)
};

std::string formatBytes(std::int64_t bytes);

}  // namespace gpulab
