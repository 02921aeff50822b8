// The registry of CUDA backends, one per device. The kernels live by op family
// (engine/kernels/<family>/cuda.cu); see engine/kernels/cuda/cuda_backend.h.
#include <memory>
#include <mutex>
#include <vector>

#include "engine/kernels/cuda/cuda_backend.h"

namespace gpulab {

Backend& cudaBackend(int device) {
  // Every op asks for its backend: after the first time a thread keeps the pointer (backends live
  // until the process ends), so the lock is taken once per thread and device, not once per op.
  constexpr int kCached = 16;
  thread_local CudaBackend* cached[kCached] = {};
  if (device >= 0 && device < kCached && cached[device]) return *cached[device];
  static std::mutex mutex;
  static std::vector<std::unique_ptr<CudaBackend>>* backends = new std::vector<std::unique_ptr<CudaBackend>>;
  std::lock_guard lock(mutex);
  if (static_cast<std::size_t>(device) >= backends->size()) backends->resize(static_cast<std::size_t>(device) + 1);
  auto& slot = (*backends)[static_cast<std::size_t>(device)];
  if (!slot) slot = std::make_unique<CudaBackend>(device);
  if (device >= 0 && device < kCached) cached[device] = slot.get();
  return *slot;
}

}  // namespace gpulab
