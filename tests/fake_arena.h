#pragma once
// A bounded fake "device" for allocator tests: hands out addresses from one buffer with first fit,
// refuses what does not fit (like cudaMalloc at capacity), and counts everything.
#include <map>
#include <vector>

#include "engine/memory/raw_allocator.h"

namespace gpulab::test {

class FakeArena final : public RawAllocator {
 public:
  explicit FakeArena(std::size_t capacity) : buffer_(capacity) {}
  void* rawAllocate(std::size_t bytes) override {
    ++calls;
    std::size_t at = 0;
    for (const auto& [offset, size] : used_) {
      if (offset - at >= bytes) break;
      at = offset + size;
    }
    if (at + bytes > buffer_.size()) return nullptr;
    used_[at] = bytes;
    outstanding += static_cast<std::int64_t>(bytes);
    return buffer_.data() + at;
  }
  void rawFree(void* ptr, std::size_t bytes) override {
    auto it = used_.find(static_cast<std::size_t>(static_cast<char*>(ptr) - buffer_.data()));
    if (it == used_.end() || it->second != bytes) throw std::logic_error("FakeArena: bad free");
    outstanding -= static_cast<std::int64_t>(bytes);
    used_.erase(it);
  }
  MemoryCapacity capacity() const override {
    return {static_cast<std::int64_t>(buffer_.size()) - outstanding, static_cast<std::int64_t>(buffer_.size())};
  }
  std::string kindName() const override { return "FAKE"; }
  std::string deviceName() const override { return "Arena"; }

  std::int64_t outstanding = 0;  // bytes handed out and not freed
  int calls = 0;                 // rawAllocate calls, successful or not

 private:
  std::vector<char> buffer_;
  std::map<std::size_t, std::size_t> used_;  // offset -> size
};

}  // namespace gpulab::test
