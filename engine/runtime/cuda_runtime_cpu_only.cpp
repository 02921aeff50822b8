// The CUDA runtime door of a CPU-only build: every query answers "built without CUDA".
#include "engine/backend/backend.h"
#include "engine/memory/memory.h"
#include "engine/core/errors.h"
#include "engine/runtime/cuda_runtime.h"

#include <cstdlib>
#include <cstring>

namespace gpulab::cuda {

namespace {
const char* kReason = "GPU Lab was built without CUDA support (the CUDA toolkit was not found or GPULAB_CUDA=OFF)";
[[noreturn]] void noCuda(const std::string& what) { throw Error(what + ": " + kReason); }
}  // namespace

Availability availability() {
  Availability a;
  const char* env = std::getenv("CUDA_VISIBLE_DEVICES");
  a.cuda_visible_devices = env ? env : "(not set)";
  a.reason = kReason;
  return a;
}
bool compiledWithCuda() { return false; }
bool isAvailable() { return false; }
int deviceCount() { return 0; }
void synchronize(int) {}
void checkDeviceUsable(Device device) {
  if (device.isCuda()) throw Error("Cannot use device " + device.str() + ": no usable GPU: " + kReason);
}
CachingAllocator& deviceAllocator(int index) { noCuda("Cannot allocate on cuda:" + std::to_string(index)); }
CachingAllocator& pinnedHostAllocator() { noCuda("Cannot allocate pinned memory"); }
DriverMemoryInfo driverMemoryInfo(int) { return {false, std::string("not available: ") + kReason, 0, 0, std::nullopt}; }

void copyBytes(void* dst, Device dstDevice, const void* src, Device srcDevice, std::size_t bytes, bool, bool) {
  if (dstDevice.isCuda() || srcDevice.isCuda()) noCuda("Cannot copy to or from a CUDA device");
  std::memcpy(dst, src, bytes);
}

}  // namespace gpulab::cuda

namespace gpulab {
Device defaultDevice() { return kCPU; }
Backend& backendFor(Device device) {
  if (device.isCuda()) cuda::checkDeviceUsable(device);
  return cpuBackend();
}
}  // namespace gpulab
