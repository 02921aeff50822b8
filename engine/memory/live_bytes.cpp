#include "engine/memory/live_bytes.h"

#include <algorithm>

namespace gpulab {

LiveBytesByCategory::LiveBytesByCategory(Device device) : recorder_(device) {}

LiveBytesByCategory::Bytes LiveBytesByCategory::update() {
  for (const MemoryEvent& e : recorder_.drain()) {
    const auto c = static_cast<std::size_t>(e.category);
    if (e.kind == MemoryEventKind::Allocate) live_[c] += e.size;
    else if (e.kind == MemoryEventKind::Free) live_[c] -= e.size;
  }
  Bytes out = live_;
  for (std::int64_t& bytes : out) bytes = std::max<std::int64_t>(bytes, 0);
  return out;
}

}  // namespace gpulab
