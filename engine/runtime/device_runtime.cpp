// The one place that maps a device to its runtime (device_runtime.h), and the torch.cuda functions
// that only need to find it: they ask the runtime and never which kind of GPU it is.
#include "engine/runtime/device_runtime.h"

#include <cstring>

#include "engine/core/errors.h"
#include "engine/kernels/backend.h"
#include "engine/kernels/cpu_backend.h"
#include "engine/runtime/device_memory.h"
#include "engine/runtime/cuda_graph.h"
#include "engine/runtime/run_record.h"
#include "engine/runtime/stream.h"

namespace gpulab::cuda {

DeviceRuntime* findRuntime(Device device) {
  if (!device.isCuda()) return nullptr;
  if (DeviceRuntime* e = emulatedGpuRuntime(); e && e->device() == device) return e;
  return cudaModuleRuntime(device.index());
}

DeviceRuntime& runtimeFor(Device device) {
  if (DeviceRuntime* r = findRuntime(device)) return *r;
  checkDeviceUsable(device);  // throws the reason
  throw Error("Cannot use device " + device.str() + ": it is not a GPU");
}

std::vector<DeviceRuntime*> gpuRuntimes() {
  std::vector<DeviceRuntime*> out;
  for (int i = 0; DeviceRuntime* r = cudaModuleRuntime(i); ++i) out.push_back(r);
  if (DeviceRuntime* e = emulatedGpuRuntime()) out.push_back(e);
  return out;
}

bool isRealGpu(Device device) {
  const DeviceRuntime* r = findRuntime(device);
  return r && r->isRealGpu();
}
bool isEmulatedGpu(Device device) {
  const DeviceRuntime* r = findRuntime(device);
  return r && !r->isRealGpu();
}
std::optional<double> busySeconds(Device device) {
  const DeviceRuntime* r = findRuntime(device);
  return r ? r->busySeconds() : std::nullopt;
}

void checkDeviceUsable(Device device) {
  if (!device.isCuda() || findRuntime(device)) return;
  try {
    refuseModuleDevice(device);
  } catch (const CudaError&) {
    throw;  // a failing CUDA call is reported as itself
  } catch (const Error& e) {
    // "CUDA error: invalid device ordinal. Cannot use device cuda:1: no usable GPU: ... (the emulated GPU
    // is cuda:0)": past the emulated GPU, the last device there is, CUDA's words for an ordinal past the
    // last GPU come first, then why no real GPU is there.
    if (const DeviceRuntime* emulated = emulatedGpuRuntime()) {
      const std::string what = e.what();
      const bool ordinal = device.index() > emulated->device().index() && !what.starts_with("CUDA error");
      throw Error((ordinal ? "CUDA error: invalid device ordinal. " : "") + what + " (the emulated GPU is " +
                  emulated->device().str() + ")");
    }
    throw;
  }
}

Availability availability() {
  Availability a = moduleAvailability();
  if (const DeviceRuntime* e = emulatedGpuRuntime()) {
    a.emulated_index = e->device().index();
    a.emulated_budget = e->totalMemory();
  }
  return a;
}

void synchronize(int device) {
  const Device d(DeviceType::CUDA, device);
  checkNotCapturing(d);
  if (DeviceRuntime* r = findRuntime(d)) {
    run_record::noteWait("synchronize", d);
    r->synchronize();
  }
}

CachingAllocator& deviceAllocator(int index) { return runtimeFor(Device(DeviceType::CUDA, index)).allocator(); }

// The first GPU's kind of pinned memory: a real GPU's page-locked memory when there is one (they come
// first), the emulated GPU's stand-in otherwise.
CachingAllocator& pinnedHostAllocator() {
  if (DeviceRuntime* first = cudaModuleRuntime(0)) return first->pinnedAllocator();
  if (DeviceRuntime* emulated = emulatedGpuRuntime()) return emulated->pinnedAllocator();
  throw Error("Cannot allocate pinned memory: no usable GPU: " + moduleAvailability().reason);
}
bool pinnedMemoryAvailable() { return cudaModuleRuntime(0) || emulatedGpuRuntime(); }

namespace {
// Why `index` has no driver view, as a reason line ("not available: ...").
std::string noDriverView(int index) {
  try {
    checkDeviceUsable(Device(DeviceType::CUDA, index));
  } catch (const Error& e) {
    return std::string("not available: ") + e.what();
  }
  return "not available";
}
}  // namespace

DriverMemoryInfo driverMemoryInfo(int index) {
  if (DeviceRuntime* r = findRuntime(Device(DeviceType::CUDA, index))) return r->driverMemoryInfo();
  DriverMemoryInfo info;
  info.reason = noDriverView(index);
  return info;
}
DeviceTelemetry deviceTelemetry(int index) {
  if (DeviceRuntime* r = findRuntime(Device(DeviceType::CUDA, index))) return r->telemetry();
  DeviceTelemetry t;
  t.reason = noDriverView(index);
  return t;
}

std::vector<ConvAlgorithmChoice> cudnnChoices(int device) {
  DeviceRuntime* r = findRuntime(Device(DeviceType::CUDA, device));
  return r ? r->cudnnChoices() : std::vector<ConvAlgorithmChoice>{};
}
void clearCudnnChoices(int device) {
  if (DeviceRuntime* r = findRuntime(Device(DeviceType::CUDA, device))) r->clearCudnnChoices();
}

void copyBytes(void* dst, Device dstDevice, const void* src, Device srcDevice, std::size_t bytes, bool nonBlocking,
               bool srcPinned, bool dstPinned) {
  // A copy between host memory and a GPU that captures a graph: the host would wait on it, or the graph
  // would read host memory that is gone by its replays. Copy into the graph's static inputs outside it.
  if (dstDevice.isCpu() != srcDevice.isCpu()) checkNotCapturing(dstDevice.isCpu() ? srcDevice : dstDevice);
  if (dstDevice.isCuda() && srcDevice.isCuda() && dstDevice != srcDevice) {  // between GPUs the host waits too
    checkNotCapturing(srcDevice);
    checkNotCapturing(dstDevice);
  }
  DeviceRuntime* to = dstDevice.isCuda() ? &runtimeFor(dstDevice) : nullptr;
  DeviceRuntime* from = srcDevice.isCuda() ? &runtimeFor(srcDevice) : nullptr;
  if (run_record::recording() && dstDevice != srcDevice) {
    // The run's record: the copy on the GPU side's current stream, and the host's wait where it returns
    // only once the copy has run (to the host, unless non_blocking into pinned memory; between GPUs; to
    // the GPU without non_blocking).
    const Device gpu = dstDevice.isCuda() ? dstDevice : srcDevice;
    const bool pinned = srcDevice.isCpu() ? srcPinned : dstDevice.isCpu() && dstPinned;
    const std::uintptr_t stream = current_stream(gpu).id();
    run_record::noteCopy(srcDevice, dstDevice, bytes, stream, nonBlocking, pinned);
    if (srcDevice.isCuda() && !(dstDevice.isCpu() && nonBlocking && dstPinned)) {
      run_record::noteWait(dstDevice.isCpu() ? "copy to the host" : "copy between GPUs", srcDevice, stream);
    } else if (srcDevice.isCpu() && !nonBlocking) {
      run_record::noteWait("copy to the GPU", dstDevice, stream);  // it returns once the copy has run
    }
  }
  // Between GPUs of two kinds of runtime (the emulated GPU and a real one): to the other, the side whose
  // memory is host memory is pageable host memory, once its queued work is done with it.
  if (to && from && to != from && to->memoryIsHostMemory() != from->memoryIsHostMemory()) {
    if (to->memoryIsHostMemory()) {
      to->synchronize();
      to = nullptr;
      dstDevice = kCPU;
      dstPinned = false;
    } else {
      from->synchronize();
      from = nullptr;
      srcDevice = kCPU;
      srcPinned = false;
    }
  }
  if (DeviceRuntime* r = to ? to : from) return r->copy(dst, dstDevice, src, srcDevice, bytes, nonBlocking, srcPinned, dstPinned);
  if (bytes) std::memcpy(dst, src, bytes);  // an empty tensor may have no memory at all
}

std::string deviceLabel(Device device) {
  if (device.isCpu()) return "cpu";
  if (const DeviceRuntime* r = findRuntime(device)) return r->label();
  return device.str() + " (not available)";
}

std::vector<DeviceChoice> availableDevices() {
  std::vector<DeviceChoice> out{{kCPU, deviceLabel(kCPU), false}};
  for (const DeviceRuntime* r : gpuRuntimes()) out.push_back({r->device(), r->label(), !r->isRealGpu()});
  return out;
}

}  // namespace gpulab::cuda

namespace gpulab {
Device defaultDevice() { return cuda::isAvailable() ? Device(DeviceType::CUDA, 0) : kCPU; }
Backend& backendFor(Device device) {
  if (!device.isCuda()) return cpuBackend();
  return cuda::runtimeFor(device).backend();
}
}  // namespace gpulab
