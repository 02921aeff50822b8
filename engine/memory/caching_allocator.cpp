#include "engine/memory/caching_allocator.h"

#include <algorithm>
#include <cstdio>
#include <sstream>
#include <tuple>
#include <vector>

#include "engine/core/errors.h"
#include "engine/core/number_format.h"

namespace gpulab {

bool CachingAllocator::BlockOrder::operator()(const Block* a, const Block* b) const {
  return std::tie(a->pool, a->stream, a->size, a->ptr) < std::tie(b->pool, b->stream, b->size, b->ptr);
}

CachingAllocator::CachingAllocator(std::unique_ptr<RawAllocator> raw, Device device) : raw_(std::move(raw)), device_(device) {}

CachingAllocator::~CachingAllocator() {
  // Every segment goes back, blocks still handed out included: nothing may use memory from an
  // allocator that is gone. (The engine's per-device allocators live until the process ends.)
  std::vector<Block*> heads;
  for (Pool* pool : {&smallPool_, &largePool_})
    for (Block* b : *pool)
      if (!b->prev) heads.push_back(b);
  for (const auto& [ptr, b] : active_)
    if (!b->prev) heads.push_back(b);
  for (const Pending& p : pending_) {
    for (std::uintptr_t m : p.markers) raw_->releaseMarker(m);
    if (!p.block->prev) heads.push_back(p.block);
  }
  for (Block* b : deferredUntilNoCapture_)
    if (!b->prev) heads.push_back(b);
  for (Block* head : heads) {
    char* base = head->ptr;
    std::size_t total = 0;
    for (Block* b = head; b;) {
      Block* next = b->next;
      total += b->size;
      delete b;
      b = next;
    }
    raw_->rawFree(base, total);
  }
}

std::size_t CachingAllocator::roundSize(std::size_t bytes) {
  return bytes < kMinBlockSize ? kMinBlockSize : (bytes + kMinBlockSize - 1) / kMinBlockSize * kMinBlockSize;
}

void CachingAllocator::update(MemoryStat& s, std::int64_t delta) {
  s.current += delta;
  if (delta > 0) s.allocated += delta;
  else s.freed -= delta;
  if (s.current > s.peak) s.peak = s.current;
}

void CachingAllocator::publish(MemoryEventKind kind, std::int64_t size, const void* ptr, std::uintptr_t stream,
                               MemoryCategory category) const {
  if (!memoryEventsWanted()) return;
  MemoryEvent e;
  e.kind = kind;
  e.device = device_;
  e.size = size;
  e.address = reinterpret_cast<std::uintptr_t>(ptr);
  e.stream = stream;
  e.category = category;
  e.time_s = memoryClockSeconds();
  e.step = memoryStep();
  e.allocated_bytes = stats_.allocated_bytes.current;
  e.reserved_bytes = stats_.reserved_bytes.current;
  e.cap_bytes = capLocked().value_or(-1);
  publishMemoryEvent(e);
}

CachingAllocator::Block* CachingAllocator::newBlock(const Block& init) {
  if (spareBlocks_.empty()) return new Block(init);
  Block* b = spareBlocks_.back().release();
  spareBlocks_.pop_back();
  *b = init;
  return b;
}

void CachingAllocator::recycle(Block* block) { spareBlocks_.emplace_back(block); }

void CachingAllocator::poolInsert(Pool& pool, Block* block) {
  if (sparePoolNodes_.empty()) {
    pool.insert(block);
    return;
  }
  Pool::node_type node = std::move(sparePoolNodes_.back());
  sparePoolNodes_.pop_back();
  node.value() = block;
  pool.insert(std::move(node));
}

void CachingAllocator::poolErase(Pool& pool, Pool::iterator it) {
  // A free block can be missing from its pool only after an insert failed for want of host memory
  // (std::bad_alloc): then there is nothing to take out, as erase(key) used to find nothing.
  if (it == pool.end()) return;
  sparePoolNodes_.push_back(pool.extract(it));
}

void CachingAllocator::activeInsert(Block* block) {
  if (spareActiveNodes_.empty()) {
    active_.emplace(block->ptr, block);
    return;
  }
  ActiveMap::node_type node = std::move(spareActiveNodes_.back());
  spareActiveNodes_.pop_back();
  node.key() = block->ptr;
  node.mapped() = block;
  active_.insert(std::move(node));
}

void CachingAllocator::activeErase(ActiveMap::iterator it) { spareActiveNodes_.push_back(active_.extract(it)); }

std::uint64_t CachingAllocator::poolLocked(std::uintptr_t stream) const {
  for (const auto& [s, pool] : capturing_)
    if (s == stream) return pool;
  return 0;
}

bool CachingAllocator::retainedLocked(std::uint64_t pool) const { return pool != 0 && retainedPools_.count(pool) > 0; }

void CachingAllocator::beginAllocateToPool(std::uintptr_t stream, std::uint64_t pool) {
  std::lock_guard lock(mutex_);
  if (pool == 0) throw ValueError("invalid graph memory pool id 0");
  for (const auto& c : capturing_)
    if (c.first == stream) throw Error("a stream can capture into one graph memory pool at a time");
  capturing_.emplace_back(stream, pool);
}

void CachingAllocator::endAllocateToPool(std::uintptr_t stream) {
  std::lock_guard lock(mutex_);
  std::erase_if(capturing_, [&](const auto& c) { return c.first == stream; });
  if (!capturing_.empty()) return;
  for (Block* block : deferredUntilNoCapture_) markPendingLocked(block);
  deferredUntilNoCapture_.clear();
}

void CachingAllocator::retainPool(std::uint64_t pool) {
  std::lock_guard lock(mutex_);
  ++retainedPools_[pool];
}

void CachingAllocator::releasePool(std::uint64_t pool) {
  std::lock_guard lock(mutex_);
  if (auto it = retainedPools_.find(pool); it != retainedPools_.end() && --it->second <= 0) retainedPools_.erase(it);
}

void* CachingAllocator::allocate(std::size_t bytes, std::uintptr_t stream) {
  const std::size_t rounded = roundSize(bytes);
  const bool small = rounded <= kSmallSize;
  std::lock_guard lock(mutex_);
  // During a graph capture the capturing stream's blocks belong to the graph's pool.
  const std::uint64_t graphPool = capturing_.empty() ? 0 : poolLocked(stream);
  if (!pending_.empty() && capturing_.empty()) processPendingLocked();
  Pool& pool = poolFor(small);
  Block key;
  key.stream = stream;
  key.pool = graphPool;
  key.size = rounded;
  Block* block = nullptr;
  if (auto it = pool.lower_bound(&key); it != pool.end() && (*it)->stream == stream && (*it)->pool == graphPool) {
    block = *it;
    poolErase(pool, it);
  } else {
    block = reserveSegment(rounded, small, stream);
    block->pool = graphPool;
  }
  const std::size_t rest = block->size - rounded;
  if (small ? rest >= kMinBlockSize : rest > kSmallSize) {
    Block* remainder = newBlock(Block{rest, block->ptr + rounded, stream, false, small, MemoryCategory::Other, block, block->next});
    remainder->pool = graphPool;
    if (block->next) block->next->prev = remainder;
    block->next = remainder;
    block->size = rounded;
    poolInsert(pool, remainder);
  }
  block->allocated = true;
  block->requested = bytes;
  block->category = MemoryCategoryScope::current();
  activeInsert(block);
  update(stats_.allocated_bytes, static_cast<std::int64_t>(block->size));
  update(stats_.active_blocks, 1);
  publish(MemoryEventKind::Allocate, static_cast<std::int64_t>(block->size), block->ptr, stream, block->category);
  return block->ptr;
}

CachingAllocator::Block* CachingAllocator::reserveSegment(std::size_t rounded, bool small, std::uintptr_t stream) {
  std::size_t preferred = small ? kSmallSegment
                          : rounded < kMinLargeAlloc ? kLargeSegment
                                                     : (rounded + kRoundLarge - 1) / kRoundLarge * kRoundLarge;
  const std::size_t minimal = small ? kSmallSegment : (rounded + kRoundLarge - 1) / kRoundLarge * kRoundLarge;
  for (int attempt = 0; attempt < 2; ++attempt) {
    if (Block* b = tryReserve(preferred, small, stream)) return b;
    if (minimal != preferred)
      if (Block* b = tryReserve(minimal, small, stream)) return b;
    if (attempt == 0) {
      // Give every wholly free cached segment back and try once more, as PyTorch does -- after the
      // streams have passed the blocks that wait for them (record_stream), which then count as free.
      ++stats_.num_alloc_retries;
      if (!capturing_.empty()) break;  // nothing may go back to the system during a capture
      if (!pending_.empty()) {
        raw_->synchronize();
        processPendingLocked();
      }
      if (releaseCachedLocked() == 0) break;
    }
  }
  throwOutOfMemory(rounded);
}

CachingAllocator::Block* CachingAllocator::tryReserve(std::size_t segmentSize, bool small, std::uintptr_t stream) {
  const std::optional<std::int64_t> cap = capLocked();
  if (cap && stats_.reserved_bytes.current + static_cast<std::int64_t>(segmentSize) > *cap) return nullptr;
  void* ptr = raw_->rawAllocate(segmentSize);
  if (!ptr) return nullptr;
  update(stats_.reserved_bytes, static_cast<std::int64_t>(segmentSize));
  update(stats_.segments, 1);
  publish(MemoryEventKind::SegmentReserve, static_cast<std::int64_t>(segmentSize), ptr, stream, MemoryCategoryScope::current());
  return newBlock(Block{segmentSize, static_cast<char*>(ptr), stream, false, small, MemoryCategory::Other, nullptr, nullptr});
}

void CachingAllocator::free(void* ptr) {
  if (!ptr) return;
  std::lock_guard lock(mutex_);
  auto it = active_.find(ptr);
  if (it == active_.end()) throw Error("CachingAllocator::free: pointer was not allocated by this allocator");
  Block* block = it->second;
  activeErase(it);
  block->allocated = false;
  block->requested = 0;
  update(stats_.allocated_bytes, -static_cast<std::int64_t>(block->size));
  update(stats_.active_blocks, -1);
  publish(MemoryEventKind::Free, static_cast<std::int64_t>(block->size), block->ptr, block->stream, block->category);
  if (!block->streamUses.empty()) {
    // Used on other streams (record_stream): it counts as free, as in PyTorch, but joins the pool only
    // once each of those streams has passed the point it had reached now -- marked when no capture is
    // underway (a marker is an event, which a capture would record into its graph).
    block->pending = true;
    if (!capturing_.empty()) deferredUntilNoCapture_.push_back(block);
    else markPendingLocked(block);
    return;
  }
  insertFree(block);
}

void CachingAllocator::markPendingLocked(Block* block) {
  Pending p{block, {}};
  for (std::uintptr_t s : block->streamUses) p.markers.push_back(raw_->recordMarker(s));
  block->streamUses.clear();
  pending_.push_back(std::move(p));
}

void CachingAllocator::insertFree(Block* block) {
  Pool& pool = poolFor(block->small);
  // Coalesce with free neighbours of the same segment (not with one still waiting for other streams).
  if (Block* prev = block->prev; prev && !prev->allocated && !prev->pending) {
    poolErase(pool, prev);
    prev->size += block->size;
    prev->next = block->next;
    if (block->next) block->next->prev = prev;
    recycle(block);
    block = prev;
  }
  if (Block* next = block->next; next && !next->allocated && !next->pending) {
    poolErase(pool, next);
    block->size += next->size;
    block->next = next->next;
    if (next->next) next->next->prev = block;
    recycle(next);
  }
  block->category = MemoryCategory::Other;
  poolInsert(pool, block);
}

void CachingAllocator::recordStream(void* ptr, std::uintptr_t stream) {
  if (!ptr) return;  // an empty tensor has no block
  std::lock_guard lock(mutex_);
  auto it = active_.find(ptr);
  if (it == active_.end()) throw Error("record_stream: the tensor's memory was not allocated by this device's caching allocator");
  Block* block = it->second;
  if (stream == block->stream) return;
  for (std::uintptr_t s : block->streamUses)
    if (s == stream) return;
  block->streamUses.push_back(stream);
}

void CachingAllocator::recordAsyncCopy(const void* ptr, std::uintptr_t stream) {
  std::lock_guard lock(mutex_);
  Block* block = nullptr;
  if (auto it = active_.find(const_cast<void*>(ptr)); it != active_.end()) {
    block = it->second;
  } else {
    // A view's copy (a slice of a pinned batch): the block that holds it. Pinned allocators have few
    // live blocks, so a scan is cheap next to the copy.
    const char* p = static_cast<const char*>(ptr);
    for (const auto& [start, b] : active_) {
      if (p >= b->ptr && p < b->ptr + b->size) {
        block = b;
        break;
      }
    }
  }
  if (!block) throw Error("an asynchronous copy from or into host memory that this pinned-memory allocator did not hand out");
  for (std::uintptr_t s : block->streamUses)
    if (s == stream) return;
  block->streamUses.push_back(stream);
}

void CachingAllocator::processPendingLocked() {
  for (auto it = pending_.begin(); it != pending_.end();) {
    bool done = true;
    for (std::uintptr_t m : it->markers) done = done && raw_->markerReached(m);
    if (!done) {
      ++it;
      continue;
    }
    for (std::uintptr_t m : it->markers) raw_->releaseMarker(m);
    it->block->pending = false;
    insertFree(it->block);
    it = pending_.erase(it);
  }
}

std::int64_t CachingAllocator::pendingBytes() const {
  std::lock_guard lock(mutex_);
  std::int64_t bytes = 0;
  for (const Pending& p : pending_) bytes += static_cast<std::int64_t>(p.block->size);
  for (const Block* b : deferredUntilNoCapture_) bytes += static_cast<std::int64_t>(b->size);
  return bytes;
}

std::int64_t CachingAllocator::releaseCachedLocked() {
  std::int64_t released = 0;
  for (Pool* pool : {&smallPool_, &largePool_}) {
    for (auto it = pool->begin(); it != pool->end();) {
      Block* b = *it;
      // Part of a segment that still has live blocks, or of a pool a graph still replays into.
      if (b->prev || b->next || retainedLocked(b->pool)) {
        ++it;
        continue;
      }
      // Freed first: if the system refuses (a sticky CUDA error), the block stays cached and counted.
      raw_->rawFree(b->ptr, b->size);
      it = pool->erase(it);
      update(stats_.reserved_bytes, -static_cast<std::int64_t>(b->size));
      update(stats_.segments, -1);
      publish(MemoryEventKind::SegmentRelease, static_cast<std::int64_t>(b->size), b->ptr, b->stream, MemoryCategory::Other);
      released += static_cast<std::int64_t>(b->size);
      delete b;
    }
  }
  return released;
}

std::int64_t CachingAllocator::emptyCache() {
  std::lock_guard lock(mutex_);
  if (!capturing_.empty()) return 0;  // cudaFree and synchronising would break the capture
  // As PyTorch's: wait for the device, so blocks waiting for other streams can go too.
  raw_->synchronize();
  processPendingLocked();
  const std::int64_t released = releaseCachedLocked();
  // The spare bookkeeping goes too: after a peak of many blocks it would otherwise stay for good.
  sparePoolNodes_.clear();
  spareActiveNodes_.clear();
  spareBlocks_.clear();
  publish(MemoryEventKind::EmptyCache, released, nullptr, 0, MemoryCategory::Other);
  return released;
}

MemoryStats CachingAllocator::stats() const {
  std::lock_guard lock(mutex_);
  return stats_;
}

std::vector<AllocatorSegmentInfo> CachingAllocator::segments() const {
  std::lock_guard lock(mutex_);
  std::vector<AllocatorSegmentInfo> out;
  auto addSegment = [&out](const Block* head) {
    AllocatorSegmentInfo seg;
    seg.address = reinterpret_cast<std::uintptr_t>(head->ptr);
    seg.stream = head->stream;
    seg.small = head->small;
    for (const Block* b = head; b; b = b->next) {
      seg.blocks.push_back({reinterpret_cast<std::uintptr_t>(b->ptr), static_cast<std::int64_t>(b->size),
                            static_cast<std::int64_t>(b->requested), b->allocated, b->category});
      seg.total_size += static_cast<std::int64_t>(b->size);
    }
    out.push_back(std::move(seg));
  };
  // Every block is either cached in a pool or handed out; a segment's first block has no prev.
  for (const Pool* pool : {&smallPool_, &largePool_})
    for (const Block* b : *pool)
      if (!b->prev) addSegment(b);
  for (const auto& [ptr, b] : active_)
    if (!b->prev) addSegment(b);
  std::sort(out.begin(), out.end(), [](const auto& a, const auto& b) { return a.address < b.address; });
  return out;
}

void CachingAllocator::resetPeakStats() {
  std::lock_guard lock(mutex_);
  for (MemoryStat* s : {&stats_.allocated_bytes, &stats_.reserved_bytes, &stats_.active_blocks, &stats_.segments}) s->peak = s->current;
}

void CachingAllocator::setMemoryFraction(double fraction) {
  if (!(fraction > 0.0 && fraction <= 1.0)) {
    throw ValueError("Invalid fraction value: " + formatNumber(fraction) + ". Allowed range: 0~1");
  }
  const std::int64_t total = raw_->capacity().total;
  std::lock_guard lock(mutex_);
  fraction_ = fraction;
  fractionCapBytes_ = fraction >= 1.0 ? 0 : static_cast<std::int64_t>(fraction * static_cast<double>(total));
}

double CachingAllocator::memoryFraction() const {
  std::lock_guard lock(mutex_);
  return fraction_;
}

void CachingAllocator::setLimitBytes(std::int64_t bytes) {
  if (bytes < 0) throw ValueError("memory budget must be >= 0 bytes (0: no budget), got " + std::to_string(bytes));
  std::lock_guard lock(mutex_);
  limitBytes_ = bytes;
}

std::int64_t CachingAllocator::limitBytes() const {
  std::lock_guard lock(mutex_);
  return limitBytes_;
}

std::optional<std::int64_t> CachingAllocator::capLocked() const {
  // A fraction below 1 caps even when its bytes round to 0 (then nothing fits, as in PyTorch).
  std::optional<std::int64_t> cap;
  if (limitBytes_ > 0) cap = limitBytes_;
  if (fraction_ < 1.0) cap = cap ? std::min(*cap, fractionCapBytes_) : fractionCapBytes_;
  return cap;
}

std::optional<std::int64_t> CachingAllocator::effectiveCap() const {
  std::lock_guard lock(mutex_);
  return capLocked();
}

void CachingAllocator::throwOutOfMemory(std::size_t rounded) {
  ++stats_.num_ooms;
  {
    // The event's address carries the bytes the cap (or the device) left free, as PyTorch's OOM trace
    // entry carries device_free in its address (see the header and engine/runtime/memory_snapshot.h).
    const std::optional<std::int64_t> capBytes = capLocked();
    const std::int64_t freeBytes = capBytes ? std::max<std::int64_t>(0, *capBytes - stats_.reserved_bytes.current) : raw_->capacity().free;
    publish(MemoryEventKind::OutOfMemory, static_cast<std::int64_t>(rounded), reinterpret_cast<const void*>(static_cast<std::uintptr_t>(freeBytes)), 0,
            MemoryCategoryScope::current());
  }
  // A budget speaks for the device only when it is what refused: a budget set above what the device
  // has (16 TiB on a 24 GiB machine) leaves the device itself to refuse, and the message then gives the
  // device's capacity, not the budget's untouched bytes as "free".
  const std::int64_t budgetLeft = std::max<std::int64_t>(0, limitBytes_ - stats_.reserved_bytes.current);
  const bool budget = limitBytes_ > 0 && static_cast<std::int64_t>(rounded) > budgetLeft;
  const bool budgetAboveDevice = limitBytes_ > 0 && !budget;
  MemoryCapacity cap = raw_->capacity();
  if (budget) cap = {budgetLeft, limitBytes_};
  std::string msg = raw_->kindName() + " out of memory" + (budget ? " (emulated: GPU Lab's memory budget for " + raw_->deviceName() + ")" : "") +
                    ". Tried to allocate " + formatBytes(static_cast<std::int64_t>(rounded)) + ". " + raw_->deviceName() +
                    " has a total capacity of " + formatBytes(cap.total) + " of which " + formatBytes(cap.free) +
                    " is free. Of the allocated memory " + formatBytes(stats_.allocated_bytes.current) +
                    " is allocated by GPU Lab, and " + formatBytes(stats_.reserved_bytes.current - stats_.allocated_bytes.current) +
                    " is reserved by GPU Lab but unallocated.";
  if (fraction_ < 1.0) {
    msg += " This process may use at most a fraction of " + formatGeneral(fraction_, 6) + " of it (" + formatBytes(fractionCapBytes_) +
           ", set_per_process_memory_fraction).";
  }
  if (budgetAboveDevice) {
    msg += " GPU Lab's memory budget for " + raw_->deviceName() + " (" + formatBytes(limitBytes_) + ", " + formatBytes(budgetLeft) +
           " of it unused) is more than the device can give: the device itself refused.";
  }
  if (std::string note = raw_->outOfMemoryNote(); !note.empty()) msg += " " + note;
  msg += " If reserved but unallocated memory is large, fragmentation may be the cause (empty_cache() returns cached "
         "blocks). To fit: reduce the batch size (gradient accumulation keeps the effective batch), free tensors you no "
         "longer need, and evaluate under no-grad.";
  throw OutOfMemoryError(msg);
}

std::string CachingAllocator::summary() const {
  const MemoryStats s = stats();
  auto row = [](const char* name, const MemoryStat& m, bool bytes) {
    auto cell = [bytes](std::int64_t v) { return bytes ? formatBytes(v) : std::to_string(v); };
    char buf[160];
    std::snprintf(buf, sizeof buf, "| %-21s | %10s | %10s | %10s | %10s |\n", name, cell(m.current).c_str(), cell(m.peak).c_str(),
                  cell(m.allocated).c_str(), cell(m.freed).c_str());
    return std::string(buf);
  };
  const std::string rule(75, '='), thin(75, '-');
  std::ostringstream os;
  char title[96];
  std::snprintf(title, sizeof title, "GPU Lab %s memory summary, device %s", raw_->kindName().c_str(), device_.str().c_str());
  char counters[96];
  std::snprintf(counters, sizeof counters, "%s OOMs: %lld  |  allocation retries: %lld", raw_->kindName().c_str(),
                static_cast<long long>(s.num_ooms), static_cast<long long>(s.num_alloc_retries));
  auto centred = [](const std::string& text) {
    const std::size_t width = 73, pad = text.size() < width ? (width - text.size()) / 2 : 0;
    std::string line = std::string(pad, ' ') + text;
    line.resize(std::max(width, line.size()), ' ');
    return "| " + line + " |\n";
  };
  os << "|" << rule << "|\n" << centred(title) << "|" << thin << "|\n" << centred(counters);
  {
    std::lock_guard lock(mutex_);
    if (limitBytes_ > 0) os << centred("emulated memory budget: " + formatBytes(limitBytes_));
    if (fraction_ < 1.0) os << centred("per-process memory fraction cap: " + formatBytes(fractionCapBytes_));
  }
  os << "|" << rule << "|\n";
  os << "|        Metric         | Cur Usage  | Peak Usage | Tot Alloc  | Tot Freed  |\n|" << thin << "|\n";
  os << row("Allocated memory", s.allocated_bytes, true) << row("Reserved memory", s.reserved_bytes, true)
     << row("Active allocations", s.active_blocks, false) << row("Segments", s.segments, false);
  os << "|" << rule << "|\n";
  return os.str();
}

std::string formatBytes(std::int64_t bytes) {
  const char* units[] = {"bytes", "KiB", "MiB", "GiB", "TiB"};
  double value = static_cast<double>(bytes);
  int unit = 0;
  while ((value >= 1024.0 || value <= -1024.0) && unit < 4) {
    value /= 1024.0;
    ++unit;
  }
  // Not printf's "%.2f": it writes "1,50 MiB" under a comma-decimal locale.
  return unit == 0 ? formatNumber(bytes) + " bytes" : formatFixed(value, 2) + " " + units[unit];
}

}  // namespace gpulab
