#pragma once
// One runtime per GPU: what the engine asks of a device beyond its kernels -- memory, copies,
// synchronisation, streams and events, CUDA graphs, what the driver says. Two implementations:
//
//   - a real GPU's, through GPU Lab's CUDA module (engine/runtime/cuda_runtime_loader.cpp), and
//   - the emulated GPU's (engine/runtime/emulated_runtime.cpp): host memory under a budget, the CPU
//     backend's kernels queued on streams run by threads of their own.
//
// runtimeFor() is the one place that maps a device to its runtime. Everything above it -- the
// torch.cuda functions (cuda_runtime.h), streams and events (stream.h), graphs (cuda_graph.h), the
// labs and the Python package -- asks the runtime, never which kind of GPU it is talking to; what
// differs for a learner (may a GPU timing be drawn from it? is cuDNN there?) is a question the
// interface answers.
#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "engine/core/device.h"
#include "engine/runtime/cuda_runtime.h"

namespace gpulab {
class Backend;
class CachingAllocator;
struct DriverMemoryInfo;
struct DeviceTelemetry;
}  // namespace gpulab

namespace gpulab::cuda {

// A torch.cuda.Event's place in one stream of its device. Made by the runtime of the device it is
// first recorded on, and only ever recorded on that device's streams.
class RuntimeEvent {
 public:
  virtual ~RuntimeEvent() = default;
  // Marks the current end of `stream`'s queue; the host goes on. Throws, leaving the event as it was,
  // when the stream cannot be marked (it captures a graph).
  virtual void record(std::uintptr_t stream) = 0;
  virtual bool query() const = 0;        // whether the stream has reached the last record
  virtual void synchronize() const = 0;  // the host waits until it has
  // Work queued on `stream` (of the same device) from now on waits for the last record; the host goes on.
  virtual void block(std::uintptr_t stream) const = 0;
  // Milliseconds from this event's last record (the start) to `end`'s, an event of the same runtime;
  // both made with timing on.
  virtual double elapsedMs(const RuntimeEvent& end) const = 0;
};

// A captured CUDA graph, as its runtime keeps it: replayed by one launch on any stream of the device.
class CapturedGraph {
 public:
  virtual ~CapturedGraph() = default;
  virtual void launch(std::uintptr_t stream) = 0;
  virtual std::size_t nodeCount() const = 0;  // the kernels, copies and memsets one launch stands for
};

class DeviceRuntime {
 public:
  virtual ~DeviceRuntime() = default;
  virtual Device device() const = 0;

  // What a learner is told. "cuda:0 (NVIDIA H100 80GB HBM3)", "cuda:0 (emulated GPU — runs on your CPU)".
  virtual std::string label() const = 0;
  // Whether this is GPU hardware: its timings are a GPU's, cuDNN and NCCL may run on it. False for
  // the emulated GPU, whose kernels run on the CPU: no GPU timing may be drawn from it.
  virtual bool isRealGpu() const = 0;
  // The time its streams have spent running kernels since the process started, when the runtime
  // measures it (the busy time behind nvidia-smi's "GPU-Util"); nullopt where it cannot say.
  virtual std::optional<double> busySeconds() const { return std::nullopt; }
  // The device's memory total as a learner should read it (a real GPU's memory, the emulated GPU's budget).
  virtual std::int64_t totalMemory() const = 0;
  // A line memory_summary() appends for this device ("" for none).
  virtual std::string memoryNote() const { return {}; }

  virtual CachingAllocator& allocator() = 0;
  virtual Backend& backend() = 0;
  // Page-locked host memory for asynchronous copies to this device (its runtime's kind of pinned memory).
  virtual CachingAllocator& pinnedAllocator() = 0;
  // Whether its memory is host memory, readable by the host once its queued work has run: a copy
  // between it and a GPU of another runtime goes through the host that way.
  virtual bool memoryIsHostMemory() const = 0;

  // Waits for all work of every stream; rethrows an error a kernel found.
  virtual void synchronize() = 0;
  // Streams by GPU Lab's id (0: the default stream; 1..kStreamPoolSize: the pool, see stream.h).
  virtual std::uintptr_t nextPoolStream() = 0;
  virtual bool streamQuery(std::uintptr_t stream) = 0;
  virtual void streamSynchronize(std::uintptr_t stream) = 0;
  virtual std::unique_ptr<RuntimeEvent> createEvent(bool timing) = 0;

  // Copies where this device is one side and the other is the CPU or this device -- or, for a runtime
  // whose memory is not host memory, another GPU of the same runtime (see cuda::copyBytes for the
  // blocking rules).
  virtual void copy(void* dst, Device dstDevice, const void* src, Device srcDevice, std::size_t bytes, bool nonBlocking,
                    bool srcPinned, bool dstPinned) = 0;

  // CUDA graphs: while `stream` captures, its work is recorded, not run; endCapture returns the graph,
  // or throws the device's error when the capture failed.
  virtual void beginCapture(std::uintptr_t stream) = 0;
  virtual std::unique_ptr<CapturedGraph> endCapture(std::uintptr_t stream) = 0;

  // What the driver says (nvidia-smi's view), or why it cannot say.
  virtual DriverMemoryInfo driverMemoryInfo() = 0;
  virtual DeviceTelemetry telemetry() = 0;
  // cuDNN's algorithm choices (cuda_runtime.h); none where cuDNN does not run.
  virtual std::vector<ConvAlgorithmChoice> cudnnChoices() { return {}; }
  virtual void clearCudnnChoices() {}
};

// The runtime of `device`: a usable real GPU's, or the emulated GPU's. Throws the clear error of
// checkDeviceUsable for any other device (the CPU has no runtime: its work is done when an op returns).
DeviceRuntime& runtimeFor(Device device);
// The same, or nullptr where runtimeFor would throw.
DeviceRuntime* findRuntime(Device device);
// Every GPU's runtime in device order: the real GPUs, then the emulated one when it is on.
std::vector<DeviceRuntime*> gpuRuntimes();

// The questions a lesson asks of a device. Whether it is GPU hardware (a usable real GPU, whose
// timings are a GPU's, with cuDNN and NCCL): false for the CPU, the emulated GPU and a device that is
// not there.
bool isRealGpu(Device device);
// Whether it is a GPU that runs on the CPU (the emulated GPU): no GPU timing may be drawn from it.
bool isEmulatedGpu(Device device);
// Its runtime's busy seconds so far (DeviceRuntime::busySeconds); nullopt on the CPU and where the
// runtime cannot say.
std::optional<double> busySeconds(Device device);

// The two implementations, for device_runtime.cpp alone: a real GPU of the CUDA module
// (cuda_runtime_loader.cpp; nullptr when the module has no usable GPU `index`) and the emulated GPU
// (emulated_runtime.cpp; nullptr when it is off in this process). refuseModuleDevice throws the
// module's reason why `device` is not one of its usable GPUs.
DeviceRuntime* cudaModuleRuntime(int index);
DeviceRuntime* emulatedGpuRuntime();
[[noreturn]] void refuseModuleDevice(Device device);

}  // namespace gpulab::cuda

namespace gpulab {
// The kernels that run on `device`: the CPU backend, or its runtime's. Throws when the device's
// backend is not built or not usable.
Backend& backendFor(Device device);
}  // namespace gpulab
