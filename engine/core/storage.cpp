#include "engine/core/storage.h"

#include "engine/core/allocator.h"

namespace gpulab {

Storage::Storage(std::size_t bytes, Device device, bool pinned) : bytes_(bytes), device_(device), pinned_(pinned) {
  // A block is handed out for the stream that is current for its device: CUDA's rule that memory is
  // reused without synchronisation only on the stream it was freed on.
  const TensorAllocation source = tensorAllocationFor(device, pinned);
  allocator_ = source.allocator;
  data_ = allocator_->allocate(bytes, source.stream);
}

Storage::~Storage() {
  if (allocator_) allocator_->free(data_);
}

std::shared_ptr<Storage> Storage::borrow(const Storage& owner, Device as) {
  std::shared_ptr<Storage> s(new Storage());
  s->data_ = owner.data_;
  s->bytes_ = owner.bytes_;
  s->device_ = as;
  s->pinned_ = owner.pinned_;
  return s;
}

std::shared_ptr<Storage> Storage::external(void* data, std::size_t bytes, std::shared_ptr<void> owner) {
  std::shared_ptr<Storage> s(new Storage());
  s->data_ = data;
  s->bytes_ = bytes;
  s->device_ = kCPU;
  s->external_ = std::move(owner);
  return s;
}

}  // namespace gpulab
