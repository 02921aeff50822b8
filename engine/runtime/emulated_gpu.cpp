// The emulated GPU (see emulated_gpu.h): the switch, its labels, and its memory.
//
// Memory: its own caching allocator -- the same policy code as a real GPU's -- over host memory,
// with a budget as its total capacity, so set_per_process_memory_fraction takes a fraction of the
// budget, mem_get_info reports (what the budget leaves, the budget), and a request beyond it raises
// "CUDA out of memory" the way cudaMalloc's refusal does on a GPU, labelled as the emulated GPU's.
//
// The budget is 4 GiB, a small GPU's memory (a laptop GPU's), so the out-of-memory lesson fails at
// model and batch sizes of the order it would on a real GPU, and quickly. It is at most half of the
// CPU's default memory budget: the emulated GPU's memory is the same host memory the CPU device uses,
// and its segments count against that default budget too (allocateHostSegment), so the CPU device --
// the data set, the model's CPU copy, the CPU reference run beside it -- always keeps the other half,
// and the two together never take more than the system had available.
#include "engine/runtime/emulated_gpu.h"

#include <algorithm>
#include <atomic>
#include <cctype>
#include <cstdlib>
#include <cstring>
#include <memory>

#include "engine/core/errors.h"
#include "engine/memory/host_memory.h"
#include "engine/runtime/device_memory.h"
#include "engine/runtime/cuda_runtime.h"
#include "engine/runtime/emulated_streams.h"
#include "engine/runtime/stream.h"

namespace gpulab::cuda {
namespace {

constexpr std::int64_t kMiB = std::int64_t{1} << 20;
constexpr std::int64_t kSmallGpuMemory = std::int64_t{4} << 30;

// Decided once per process, on first use: the switch, and the index after the real GPUs.
struct State {
  std::string switchText;       // GPULAB_EMULATED_GPU as set ("" when unset)
  std::optional<bool> forced;   // parseEmulatedGpuSwitch(switchText)
  std::optional<Device> device;  // set when enabled
};

const State& state() {
  static const State s = [] {
    State st;
    const char* env = std::getenv("GPULAB_EMULATED_GPU");
    st.switchText = env ? env : "";
    st.forced = parseEmulatedGpuSwitch(env);
    const bool real = isAvailable();
    if (emulatedGpuWanted(st.forced, real)) st.device = Device(DeviceType::CUDA, real ? deviceCount() : 0);
    return st;
  }();
  return s;
}

// The emulated GPU's streams as a raw allocator sees them: markers in their queues, for blocks that must
// not be reused before a stream has passed a point (record_stream, asynchronous copies of pinned memory).
class EmulatedStreamMarkers : public RawAllocator {
 public:
  void synchronize() override { emulated::drainAll(); }
  std::uintptr_t recordMarker(std::uintptr_t stream) override {
    return reinterpret_cast<std::uintptr_t>(new emulated::Marker(emulated::markNow(stream)));
  }
  bool markerReached(std::uintptr_t marker) override { return emulated::reached(*reinterpret_cast<emulated::Marker*>(marker)); }
  void releaseMarker(std::uintptr_t marker) override { delete reinterpret_cast<emulated::Marker*>(marker); }
};

// Host memory under a budget. rawAllocate and rawFree run under the caching allocator's lock, so the
// check and the update need no compare-exchange; `reserved_` is atomic for capacity(), which
// mem_get_info calls from any thread.
class EmulatedGpuRawAllocator final : public EmulatedStreamMarkers {
 public:
  EmulatedGpuRawAllocator(int index, std::int64_t budget) : index_(index), budget_(budget) {}
  void* rawAllocate(std::size_t bytes) override {
    const auto size = static_cast<std::int64_t>(bytes);
    if (size > budget_ - reserved_.load(std::memory_order_relaxed)) return nullptr;
    void* ptr = allocateHostSegment(bytes);
    if (ptr) reserved_.fetch_add(size, std::memory_order_relaxed);
    return ptr;
  }
  void rawFree(void* ptr, std::size_t bytes) override {
    emulated::drainAll();  // a queued kernel may still use the segment: cudaFree waits for the device too
    freeHostSegment(ptr, bytes);
    reserved_.fetch_sub(static_cast<std::int64_t>(bytes), std::memory_order_relaxed);
  }
  MemoryCapacity capacity() const override {
    const std::int64_t left = std::max<std::int64_t>(0, budget_ - reserved_.load(std::memory_order_relaxed));
    return {std::min(left, hostSegmentBytesLeft()), budget_};
  }
  // "CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 (emulated GPU — runs on your CPU) has ..."
  std::string kindName() const override { return "CUDA"; }
  std::string deviceName() const override { return "GPU " + std::to_string(index_) + " (" + kEmulatedGpuPhrase + ")"; }
  std::string outOfMemoryNote() const override {
    const bool sized = parseEmulatedGpuMemory(std::getenv("GPULAB_EMULATED_GPU_MEMORY")).has_value();
    return "Its total capacity is GPU Lab's memory budget for the emulated GPU (" + formatBytes(budget_) +
           (sized ? ", the size GPULAB_EMULATED_GPU_MEMORY asks for; only as much as your computer lends it can be filled"
                  : " of your computer's memory, sized like a small GPU's") +
           "), not a real GPU's memory.";
  }

 private:
  const int index_;
  const std::int64_t budget_;
  std::atomic<std::int64_t> reserved_{0};
};

// Pinned memory's stand-in: host memory under the CPU's budget. A block that an asynchronous copy reads
// or writes is reused only after the copy ran: emulatedCopy records the copy's stream on the block
// (CachingAllocator::recordAsyncCopy), and the freed block waits for the stream's marker outside the
// pool, so an allocation meanwhile takes another block instead of waiting for the device. A segment is
// returned only when all of it is back in the pool: its copies have run.
class EmulatedPinnedRawAllocator final : public EmulatedStreamMarkers {
 public:
  void* rawAllocate(std::size_t bytes) override { return allocateHostSegment(bytes); }
  void rawFree(void* ptr, std::size_t bytes) override { freeHostSegment(ptr, bytes); }
  MemoryCapacity capacity() const override { return {hostSegmentBytesLeft(), hostBudgetBytes()}; }
  std::string kindName() const override { return "CPU"; }
  std::string deviceName() const override { return "pinned host memory (for the " + std::string(kEmulatedGpuPhrase) + ")"; }
};

}  // namespace

CachingAllocator& emulatedPinnedAllocator() {
  static CachingAllocator* allocator = new CachingAllocator(std::make_unique<EmulatedPinnedRawAllocator>(), kCPU);
  return *allocator;
}

std::optional<bool> parseEmulatedGpuSwitch(const char* value) {
  if (!value) return std::nullopt;
  std::string v(value);
  std::transform(v.begin(), v.end(), v.begin(), [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  if (v == "1" || v == "on" || v == "true" || v == "yes") return true;
  if (v == "0" || v == "off" || v == "false" || v == "no") return false;
  return std::nullopt;
}

std::optional<std::int64_t> parseEmulatedGpuMemory(const char* value) {
  if (!value || !*value) return std::nullopt;
  std::string v(value);
  std::transform(v.begin(), v.end(), v.begin(), [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  std::size_t digits = 0;
  while (digits < v.size() && std::isdigit(static_cast<unsigned char>(v[digits]))) ++digits;
  if (digits == 0 || digits > 12) return std::nullopt;
  const std::int64_t number = std::stoll(v.substr(0, digits));
  const std::string unit = v.substr(digits);
  std::int64_t bytes = 0;
  if (unit == "gib") bytes = number << 30;
  else if (unit == "mib") bytes = number << 20;
  else if (unit.empty()) bytes = number;
  else return std::nullopt;
  if (bytes < kMinEmulatedGpuMemory || bytes > kMaxEmulatedGpuMemory) return std::nullopt;
  return bytes / kMiB * kMiB;
}

std::optional<Device> emulatedDevice() { return state().device; }

bool isEmulated(Device device) {
  const std::optional<Device>& e = state().device;
  return device.isCuda() && e && *e == device;
}

std::int64_t emulatedGpuBudget() {
  if (!state().device) return 0;
  // Whole MiB, so the numbers in messages and plots read cleanly.
  // GPULAB_EMULATED_GPU_MEMORY sets it (an exercise grades code on GPUs of several sizes): then its
  // memory is what a GPU of that size reports, though no more of it can be filled than the host lends.
  static const std::int64_t budget = parseEmulatedGpuMemory(std::getenv("GPULAB_EMULATED_GPU_MEMORY"))
                                         .value_or(std::min(kSmallGpuMemory, hostBudgetBytes() / 2) / kMiB * kMiB);
  return budget;
}

CachingAllocator& emulatedGpuAllocator() {
  const State& s = state();
  if (!s.device) throw Error("The emulated GPU is off in this process: " + emulatedGpuStatus());
  // Never destroyed: tensors in static storage may still free into it while the process ends.
  static CachingAllocator* allocator =
      new CachingAllocator(std::make_unique<EmulatedGpuRawAllocator>(s.device->index(), emulatedGpuBudget()), *s.device);
  return *allocator;
}

DriverMemoryInfo emulatedDriverMemoryInfo() {
  DriverMemoryInfo info;
  const std::string name = state().device ? state().device->str() : std::string("the emulated GPU");
  info.reason = "not available: " + name + " is the " + kEmulatedGpuPhrase +
                " \u2014 so no NVIDIA driver reports its memory. On a real GPU, nvidia-smi shows more than memory_allocated(): "
                "it also counts the CUDA context (the runtime's and the kernels' own memory, made on first use), the "
                "caching allocator's cache (memory_reserved() - memory_allocated(), until empty_cache()) and the "
                "libraries' workspaces (cuBLAS, cuDNN)";
  info.process_reason = info.reason;
  return info;
}

std::string emulatedGpuStatus() {
  const State& s = state();
  const std::string setting = s.forced ? "GPULAB_EMULATED_GPU=" + s.switchText : std::string();
  if (s.device) {
    const char* memory = std::getenv("GPULAB_EMULATED_GPU_MEMORY");
    const std::string sized = !memory || !*memory ? std::string()
                              : parseEmulatedGpuMemory(memory) ? "; GPULAB_EMULATED_GPU_MEMORY=" + std::string(memory)
                                                               : "; GPULAB_EMULATED_GPU_MEMORY=" + std::string(memory) +
                                                                     " is not a size from 64MiB to 1024GiB, so the default is used";
    return "emulated GPU " + s.device->str() + " enabled (runs on your CPU; " + formatBytes(emulatedGpuBudget()) +
           " memory budget" + (setting.empty() ? std::string() : "; " + setting) + sized + ")";
  }
  if (s.forced) return "emulated GPU off (" + setting + ")";
  return "emulated GPU off (a real GPU is usable; GPULAB_EMULATED_GPU=1 adds one)";
}

}  // namespace gpulab::cuda
