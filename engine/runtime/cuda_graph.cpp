// CUDA graphs (see cuda_graph.h). The engine keeps the bookkeeping every GPU shares -- which device
// and stream capture, into which memory pool, whether the capture broke a rule -- and hands the
// capture itself to the device's runtime (device_runtime.h): the CUDA module's stream capture on a
// real GPU, the emulated streams' task recording on the emulated one.
#include "engine/runtime/cuda_graph.h"

#include <atomic>
#include <exception>
#include <mutex>
#include <string>
#include <vector>

#include "engine/core/errors.h"
#include "engine/core/generator.h"
#include "engine/core/tensor.h"
#include "engine/memory/caching_allocator.h"
#include "engine/runtime/cuda_runtime.h"
#include "engine/runtime/device_runtime.h"
#include "engine/runtime/execution_context.h"

namespace gpulab::cuda {

struct CUDAGraph::Impl {
  Device device{kCPU};
  std::uintptr_t stream = 0;  // the stream captured on
  MempoolId pool;
  bool retained = false;   // the pool is held by this graph (from capture_begin to reset)
  bool capturing = false;
  bool broken = false;     // a call during the capture made the host wait on the device
  std::string brokenBy;    // what it was, for capture_end's error
  std::unique_ptr<CapturedGraph> graph;  // the device's, once captured
  std::size_t nodes = 0;
  bool captured = false;
  // Random draws in the graph: the device memory their kernels read the seed and base offset from
  // (two uint64, allocated from the graph's pool at the first draw), and how many counters they take.
  Tensor randomCell;
  std::uint64_t randomCounters = 0;
};

namespace {

// The captures underway, process-wide: CUDA's global capture mode makes any thread's synchronising call
// on a capturing device fail, so the check is not per thread either.
std::atomic<int> capturesUnderway{0};
std::mutex registryMutex;
std::vector<CUDAGraph::Impl*> registry;

void registerCapture(CUDAGraph::Impl* g) {
  std::lock_guard lock(registryMutex);
  registry.push_back(g);
  capturesUnderway.fetch_add(1, std::memory_order_release);
}

void unregisterCapture(CUDAGraph::Impl* g) {
  std::lock_guard lock(registryMutex);
  std::erase(registry, g);
  capturesUnderway.fetch_sub(1, std::memory_order_release);
}

Device currentCudaDevice() { return Device(DeviceType::CUDA, executionContext().currentCudaDevice); }

[[noreturn]] void captureInvalidated(const CUDAGraph::Impl& g) {
  throw CudaError("CUDA error: operation failed due to a previous error during capture (" + g.brokenBy +
                  " made the host wait on " + g.device.str() + " while it captured; nothing was kept)");
}

// Ends `g`'s capture on its device -- the captured graph into `captured` -- then its allocations into
// the pool. Returns the device's error, if any.
std::exception_ptr endCapture(CUDAGraph::Impl& g, std::unique_ptr<CapturedGraph>& captured) {
  unregisterCapture(&g);
  g.capturing = false;
  std::exception_ptr failed;
  try {
    captured = runtimeFor(g.device).endCapture(g.stream);
  } catch (...) {
    failed = std::current_exception();
  }
  // Only once the device's capture has ended: blocks freed during it may now record their markers.
  runtimeFor(g.device).allocator().endAllocateToPool(g.stream);
  return failed;
}

}  // namespace

MempoolId graph_pool_handle() {
  static std::atomic<std::uint64_t> next{1};
  return {next.fetch_add(1, std::memory_order_relaxed)};
}

CUDAGraph::CUDAGraph() : impl_(std::make_unique<Impl>()) {}

CUDAGraph::~CUDAGraph() {
  try {
    if (impl_->capturing) {  // destroyed mid-capture (an exception unwound past it): end it quietly
      std::unique_ptr<CapturedGraph> dropped;
      (void)endCapture(*impl_, dropped);
    }
    reset();
  } catch (...) {
    // A destructor must not throw; a device that fails here fails again at the next call.
  }
}

void CUDAGraph::capture_begin(std::optional<MempoolId> pool) {
  Impl& g = *impl_;
  if (g.captured || g.capturing) {
    throw Error("This CUDAGraph instance already owns a captured graph. To capture a new graph, create a new instance.");
  }
  const Device device = currentCudaDevice();
  DeviceRuntime& runtime = runtimeFor(device);
  const std::uintptr_t stream = currentStreamId(device);
  if (stream == 0) {
    throw Error("CUDA graphs must be captured on a non-default stream. (However, after capture, it's ok to replay them on the default stream.)");
  }
  if (isCapturing(device)) {
    throw Error("another CUDA graph is being captured on " + device.str() + ": GPU Lab captures one graph at a time per device");
  }
  g.device = device;
  g.stream = stream;
  g.pool = pool ? *pool : graph_pool_handle();
  g.broken = false;
  CachingAllocator& allocator = runtime.allocator();
  allocator.retainPool(g.pool.id);
  g.retained = true;
  allocator.beginAllocateToPool(stream, g.pool.id);
  try {
    runtime.beginCapture(stream);
  } catch (...) {
    allocator.endAllocateToPool(stream);
    allocator.releasePool(g.pool.id);
    g.retained = false;
    throw;
  }
  g.capturing = true;
  registerCapture(&g);
}

void CUDAGraph::capture_end() {
  Impl& g = *impl_;
  if (!g.capturing) throw Error("capture_end() without capture_begin(): this CUDAGraph is not capturing");
  if (currentStreamId(g.device) != g.stream) throw Error("Capture must end on the same stream it began on.");
  std::unique_ptr<CapturedGraph> captured;
  const std::exception_ptr failed = endCapture(g, captured);
  if (failed || g.broken) {
    const bool broken = g.broken;
    reset();
    if (broken) captureInvalidated(g);  // our own words for what CUDA reports as invalidated
    std::rethrow_exception(failed);
  }
  g.nodes = captured->nodeCount();
  g.graph = std::move(captured);
  g.captured = true;
}

void CUDAGraph::replay() {
  Impl& g = *impl_;
  if (!g.captured) throw Error("Called CUDAGraph::replay without a preceding successful capture.");
  if (g.randomCell.defined()) {
    // This replay's draws: the default generator's seed and its next counters, written into the cell
    // ahead of the graph on the stream it is launched on -- from pinned memory, so the copy is queued,
    // not waited for, and its block is reused only once the copy has run.
    Generator& gen = defaultGenerator();
    Tensor values = Tensor::empty({2}, kInt64, kCPU, /*pinned=*/true);
    auto* v = static_cast<std::uint64_t*>(values.data_ptr());
    v[0] = gen.seed();
    v[1] = gen.advance(g.randomCounters);
    copyBytes(g.randomCell.data_ptr(), g.device, v, kCPU, 2 * sizeof(std::uint64_t), /*nonBlocking=*/true, /*srcPinned=*/true);
  }
  g.graph->launch(currentStreamId(g.device));
}

void CUDAGraph::reset() {
  Impl& g = *impl_;
  if (g.capturing) throw Error("reset() during a capture: end it with capture_end() first");
  g.graph.reset();
  g.randomCell = Tensor();  // into the pool, before the pool goes
  g.randomCounters = 0;
  if (g.retained) {
    runtimeFor(g.device).allocator().releasePool(g.pool.id);
    g.retained = false;
  }
  g.captured = false;
  g.nodes = 0;
}

MempoolId CUDAGraph::pool() const { return impl_->pool; }
std::size_t CUDAGraph::num_nodes() const { return impl_->nodes; }
bool CUDAGraph::captured() const { return impl_->captured; }

namespace {

Stream captureStream(std::optional<Stream> stream) {
  const Device device = currentCudaDevice();
  DeviceRuntime& runtime = runtimeFor(device);
  // As torch.cuda.graph's __enter__: the device idle, its cached memory given back, then the capture on
  // a side stream -- so the capture starts from a quiet device and its pool from fresh segments.
  synchronize(device.index());
  runtime.allocator().emptyCache();
  return stream ? *stream : Stream::create(device);
}

}  // namespace

GraphCapture::GraphCapture(CUDAGraph& g, std::optional<MempoolId> pool, std::optional<Stream> stream) : graph_(g) {
  on_.emplace(captureStream(stream));
  graph_.capture_begin(pool);
}

GraphCapture::~GraphCapture() {
  if (ended_) return;
  // Abandon the capture: end it, keep nothing (the block's error goes on).
  try {
    graph_.capture_end();
  } catch (...) {
  }
  graph_.reset();
}

void GraphCapture::end() {
  ended_ = true;
  try {
    graph_.capture_end();
  } catch (...) {
    on_.reset();
    throw;
  }
  on_.reset();
}

void graph(CUDAGraph& g, const std::function<void()>& body, std::optional<MempoolId> pool, std::optional<Stream> stream) {
  GraphCapture capture(g, pool, stream);
  body();
  capture.end();
}

bool isCapturing(Device device) {
  if (capturesUnderway.load(std::memory_order_acquire) == 0) return false;
  std::lock_guard lock(registryMutex);
  for (const CUDAGraph::Impl* g : registry)
    if (g->device == device) return true;
  return false;
}

fn::RandomCounters capturedRandomCounters(Device device, std::uint64_t count) {
  CUDAGraph::Impl* graph = nullptr;
  {
    const std::uintptr_t stream = currentStreamId(device);
    std::lock_guard lock(registryMutex);
    for (CUDAGraph::Impl* g : registry)
      if (g->device == device && g->stream == stream) graph = g;
  }
  if (!graph) throw Error("capturedRandomCounters: " + device.str() + "'s current stream is not capturing a graph");
  // Only this thread's stream captures into `graph`, so nothing else touches it meanwhile. The cell is
  // allocated on the capturing stream, from the graph's pool, and lives as long as the graph.
  if (!graph->randomCell.defined()) graph->randomCell = Tensor::empty({2}, kInt64, device);
  const std::uint64_t first = graph->randomCounters;
  graph->randomCounters += count;
  return {0, first, static_cast<const std::uint64_t*>(graph->randomCell.data_ptr())};
}

bool is_current_stream_capturing() { return is_current_stream_capturing(currentCudaDevice()); }

bool is_current_stream_capturing(Device device) {
  if (capturesUnderway.load(std::memory_order_acquire) == 0 || !device.isCuda()) return false;
  const std::uintptr_t stream = currentStreamId(device);
  std::lock_guard lock(registryMutex);
  for (const CUDAGraph::Impl* g : registry)
    if (g->device == device && g->stream == stream) return true;
  return false;
}

void checkNotCapturing(Device device) {
  if (capturesUnderway.load(std::memory_order_acquire) == 0 || !device.isCuda()) return;
  std::lock_guard lock(registryMutex);
  bool found = false;
  for (CUDAGraph::Impl* g : registry) {
    if (g->device != device) continue;
    found = true;
    if (!g->broken) g->brokenBy = "a synchronising call (synchronize(), .item(), .cpu(), a copy to or from host memory)";
    g->broken = true;
  }
  if (found) {
    throw CudaError("CUDA error: operation not permitted when stream is capturing (" + device.str() +
                    " is capturing a CUDA graph: nothing may make the host wait on it until the capture ends -- "
                    "no synchronize(), .item(), .cpu() or copy to or from host memory inside torch.cuda.graph)");
  }
}

}  // namespace gpulab::cuda
