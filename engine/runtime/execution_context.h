#pragma once
// Per-thread execution state, as PyTorch keeps it per thread: the current CUDA device and the
// autocast state with its cast cache. A lab's worker thread and the GUI thread never see each other's
// state. Guards set it RAII-style and restore it; reading it is a thread-local access -- no lock, no
// driver call -- so the op layer reads it on every op. It also holds the current stream of each CUDA
// device (engine/runtime/stream.h).
#include <array>
#include <cstdint>
#include <map>
#include <memory>

#include "engine/core/device.h"
#include "engine/core/dtype.h"
#include "engine/core/tensor.h"

namespace gpulab {

struct AutocastState {
  bool enabled = false;
  DType dtype = kFloat16;
};

struct ExecutionContext {
  static constexpr int kMaxDevices = 16;

  // torch.cuda.current_device(): the device tensor.cuda() without an index moves to.
  int currentCudaDevice = 0;

  // torch.cuda.current_stream(cuda:i) for this thread: 0 is the device's default stream.
  std::array<std::uintptr_t, kMaxDevices> currentStream{};

  // Autocast per device type: [0] the CPU, [1] CUDA (real or emulated).
  std::array<AutocastState, 2> autocast{};
  int autocastNesting = 0;  // open AutocastGuard regions; the cache lives while > 0
  // The region's casts of leaf tensors that require grad: (source tensor, target dtype) -> cast. The
  // source is held so its address is not reused for another tensor while the entry exists.
  struct CastEntry {
    std::shared_ptr<TensorImpl> source;
    Tensor cast;
  };
  std::map<std::pair<const TensorImpl*, DType>, CastEntry> castCache;
};

// This thread's context.
ExecutionContext& executionContext();

// The slot of ExecutionContext::autocast for a device type.
constexpr std::size_t autocastSlot(DeviceType t) { return t == DeviceType::CPU ? 0 : 1; }

// RAII: sets this thread's autocast state for a device type and restores it, and counts the region
// (leaving the outermost one drops the cast cache). The mechanics under torch.autocast
// (engine/ops/autocast.h, which checks the dtype) and under a checkpoint's recompute, which re-enters
// the state its forward ran in (engine/autograd/checkpoint.cpp).
class AutocastStateGuard {
 public:
  AutocastStateGuard(DeviceType deviceType, AutocastState state);
  ~AutocastStateGuard();
  AutocastStateGuard(const AutocastStateGuard&) = delete;
  AutocastStateGuard& operator=(const AutocastStateGuard&) = delete;

 private:
  DeviceType deviceType_;
  AutocastState previous_;
};

// RAII: makes cuda:index the current CUDA device of this thread (torch.cuda.device(index)).
class CudaDeviceGuard {
 public:
  explicit CudaDeviceGuard(int index);
  ~CudaDeviceGuard();
  CudaDeviceGuard(const CudaDeviceGuard&) = delete;
  CudaDeviceGuard& operator=(const CudaDeviceGuard&) = delete;

 private:
  int previous_;
};

}  // namespace gpulab
