#pragma once
// CUDA graphs, torch.cuda's: a stretch of GPU work captured once and replayed with one launch.
//
// A small training step is launch-bound: each of its few dozen kernels costs the host a few
// microseconds to launch, more than the GPU needs to run it. Captured into a graph, the whole step --
// forward, backward, optimizer -- is queued by one cudaGraphLaunch, and the GPU runs it back to back.
//
//   cuda::CUDAGraph g;                                   // g = torch.cuda.CUDAGraph()
//   cuda::graph(g, [&] {                                 // with torch.cuda.graph(g):
//     staticLoss = lossFn(model(staticX), staticY);      //     static_loss = loss_fn(model(static_x), static_y)
//     staticLoss.backward();                             //     static_loss.backward()
//     opt.step();                                        //     optimizer.step()
//   });
//   for (batch : loader) {
//     staticX.copy_(batch.inputs);                       //     static_x.copy_(x)
//     staticY.copy_(batch.targets);
//     g.replay();                                        //     g.replay()
//   }
//
// PyTorch's rules, and its errors:
// - Capture happens on a side stream (cuda::graph makes one; capture_begin refuses the default
//   stream). Nothing runs during the capture: the tensors it makes hold their values only after a
//   replay.
// - Nothing may make the host wait on the device while it captures: synchronize(), .item(), a copy to
//   or from host memory raise "operation not permitted when stream is capturing", and the capture
//   then fails at its end ("operation failed due to a previous error during capture").
// - Every replay runs the same kernels on the same memory: inputs are refreshed with copy_ into the
//   tensors the capture read (static inputs), results read from the tensors it wrote. The memory the
//   capture allocates comes from the graph's private pool (engine/memory/caching_allocator.h), kept
//   until the graph is reset, so the replays' writes never land in another tensor.
// - Random ops (rand, randn, randint, dropout) draw from the default generator: the capture reserves
//   their counters within the graph, and each replay takes the next ones from the generator (the
//   counter cell below), so a captured dropout draws a new mask at every replay, as in PyTorch.
// - Whatever state the captured work creates must exist before the capture: warm up (a few eager
//   iterations on the side stream) first. Optimizers need capturable=true, which keeps their step
//   count on the device (optim::AdamOptions::capturable).
//
// torch.cuda.make_graphed_callables -- a module's forward and backward each one graph, the rest eager
// -- is Python's, in python/gpulab/cuda/graphs.py (it needs autograd, a layer above this one).
//
// On the emulated GPU, capture and replay work the same way (the streams record their tasks, and a
// replay queues them again as one), so the rules and errors can be learnt without a GPU; no timing is
// drawn from it. On the CPU device there is nothing to capture.
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>

#include "engine/core/device.h"
#include "engine/kernels/functors.h"
#include "engine/runtime/stream.h"

namespace gpulab::cuda {

// torch.cuda.graph_pool_handle(): an id for a private memory pool that several graphs may share
// (captures that share one must not run concurrently).
struct MempoolId {
  std::uint64_t id = 0;
};
MempoolId graph_pool_handle();

class CUDAGraph {
 public:
  CUDAGraph();
  ~CUDAGraph();
  CUDAGraph(const CUDAGraph&) = delete;
  CUDAGraph& operator=(const CUDAGraph&) = delete;

  // Starts capturing the current stream of the current CUDA device (torch.cuda.current_device()),
  // allocations into `pool` (a new private pool when none is given).
  void capture_begin(std::optional<MempoolId> pool = std::nullopt);
  // Ends the capture and makes the graph ready to replay; throws the capture's error if it failed.
  void capture_end();
  // Queues the whole graph on the device's current stream, as one launch; returns at once.
  void replay();
  // Drops the graph and gives its pool back (the graph's memory may then go to other tensors).
  void reset();
  // The pool the capture allocated from (share it with another graph's capture_begin).
  MempoolId pool() const;
  // Kernels, copies and memsets in the captured graph (the launches one replay stands for).
  std::size_t num_nodes() const;
  bool captured() const;

  struct Impl;

 private:
  std::unique_ptr<Impl> impl_;
};

// One `with torch.cuda.graph(g, pool=pool, stream=stream):` block, as an object (the Python face enters
// and leaves it from __enter__ and __exit__): the constructor waits for the device, gives its cached
// memory back, makes `stream` (a side stream of the current device by default) current and begins the
// capture; end() ends it. Destroyed before end() -- the block raised -- it abandons the capture:
// nothing is kept, and the graph is reset.
class GraphCapture {
 public:
  GraphCapture(CUDAGraph& g, std::optional<MempoolId> pool = std::nullopt, std::optional<Stream> stream = std::nullopt);
  ~GraphCapture();
  GraphCapture(const GraphCapture&) = delete;
  GraphCapture& operator=(const GraphCapture&) = delete;
  void end();  // capture_end(): throws the capture's error if it failed; the stream is restored either way

 private:
  CUDAGraph& graph_;
  std::optional<StreamGuard> on_;
  bool ended_ = false;
};

// with torch.cuda.graph(g, pool=pool, stream=stream): body(). Waits for the device, makes `stream`
// (a side stream of the current device by default) current, captures `body`, and restores the stream.
// If `body` throws, the capture is abandoned, nothing is kept, and the exception goes on.
void graph(CUDAGraph& g, const std::function<void()>& body, std::optional<MempoolId> pool = std::nullopt,
           std::optional<Stream> stream = std::nullopt);

// torch.cuda.is_current_stream_capturing(): whether this thread's current stream of the current CUDA
// device is capturing a graph.
bool is_current_stream_capturing();
// The same for `device`: whether this thread's current stream of it is capturing (what an op that
// would be replayed wrongly -- a host-side counter, a random draw -- asks of its tensors' device).
bool is_current_stream_capturing(Device device);
// Whether `device` (a GPU, real or emulated) has a capture underway on any stream.
bool isCapturing(Device device);
// A random draw of `count` counters by an op whose device's current stream captures a graph: the
// graph reserves them after the draws before it, and its kernel reads, when it runs, the seed and the
// base offset each replay writes into the graph's counter cell from the default generator -- which a
// replay advances by all its draws, as the same ops run eagerly would. So the replays draw new
// numbers, and a replay right after manual_seed(s) draws what the ops would have drawn eagerly.
fn::RandomCounters capturedRandomCounters(Device device, std::uint64_t count);

// Raises PyTorch's error when `device` has a capture underway, and marks the capture failed: for the
// engine's calls that make the host wait on the device (synchronize, a copy to or from host memory).
// Costs one atomic load when nothing is captured.
void checkNotCapturing(Device device);

}  // namespace gpulab::cuda
