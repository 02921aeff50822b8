#include "engine/core/storage.h"

#include "engine/memory/memory.h"

namespace gpulab {

Storage::Storage(std::size_t bytes, Device device, bool pinned)
    : bytes_(bytes), device_(device), pinned_(pinned), allocator_(pinned ? &pinnedAllocator() : &allocatorFor(device)) {
  data_ = allocator_->allocate(bytes);
}

Storage::~Storage() { allocator_->free(data_); }

}  // namespace gpulab
