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

}  // namespace gpulab
