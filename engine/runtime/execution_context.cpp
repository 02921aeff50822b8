#include "engine/runtime/execution_context.h"

#include "engine/core/errors.h"

namespace gpulab {

ExecutionContext& executionContext() {
  thread_local ExecutionContext context;
  return context;
}

CudaDeviceGuard::CudaDeviceGuard(int index) : previous_(executionContext().currentCudaDevice) {
  if (index < 0 || index >= ExecutionContext::kMaxDevices) {
    throw ValueError("Invalid device index " + std::to_string(index));
  }
  executionContext().currentCudaDevice = index;
}

CudaDeviceGuard::~CudaDeviceGuard() { executionContext().currentCudaDevice = previous_; }

AutocastStateGuard::AutocastStateGuard(DeviceType deviceType, AutocastState state) : deviceType_(deviceType) {
  ExecutionContext& ctx = executionContext();
  AutocastState& current = ctx.autocast[autocastSlot(deviceType)];
  previous_ = current;
  current.enabled = state.enabled;
  if (state.enabled) current.dtype = state.dtype;  // disabling keeps the dtype, as torch.autocast(enabled=False)
  ++ctx.autocastNesting;
}

AutocastStateGuard::~AutocastStateGuard() {
  ExecutionContext& ctx = executionContext();
  ctx.autocast[autocastSlot(deviceType_)] = previous_;
  // Leaving the outermost region drops the cached weight casts (the weights change at the next step).
  if (--ctx.autocastNesting == 0) ctx.castCache.clear();
}

}  // namespace gpulab
