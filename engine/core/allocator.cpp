#include "engine/core/allocator.h"

#include <atomic>

#include "engine/core/errors.h"

namespace gpulab {
namespace {
std::atomic<TensorAllocationSource> installedSource{nullptr};
}  // namespace

void setTensorAllocationSource(TensorAllocationSource source) { installedSource.store(source); }

TensorAllocation tensorAllocationFor(Device device, bool pinned) {
  const TensorAllocationSource source = installedSource.load();
  if (!source) throw Error("cannot allocate a tensor on " + device.str() + ": no device runtime is installed (the engine's runtime layer registers one when it loads)");
  return source(device, pinned);
}

}  // namespace gpulab
