#pragma once
// The emulated GPU's streams: each is an in-order queue of work run by a thread of its own, as a CUDA
// stream is an in-order queue run by the GPU. An op on the emulated GPU queues its kernel on the
// current stream and returns at once; the host waits only where CUDA makes it wait -- a copy back to
// pageable host memory (.item(), .cpu()), synchronize(), Event::synchronize(). So what the
// performance lessons teach about asynchrony is the engine's real behaviour on a machine without a
// GPU: .item() in the loop really stalls the host, copy and compute on two streams really overlap,
// and a result read before synchronize() really may not be there yet.
//
// Stream ids: 0 is the device's default stream; 1..kPoolSize are the streams Stream::create() hands
// out round-robin (PyTorch's pool of 32). A thread starts on a stream's first use and lives for the
// process, like the streams of a CUDA context.
//
// An exception a kernel throws (an out-of-range class label) is kept and rethrown at the stream's
// next synchronisation, as CUDA reports a device-side assert at the next synchronising call.
#include <chrono>
#include <cstdint>
#include <functional>
#include <vector>

#include "engine/runtime/stream.h"

namespace gpulab::cuda::emulated {

inline constexpr std::uintptr_t kPoolSize = kStreamPoolSize;

using Task = std::function<void()>;

// Queues `task` on `stream`.
void enqueue(std::uintptr_t stream, Task task);
// Waits until every task queued on `stream` before the call has run; rethrows a kernel's error.
void synchronizeStream(std::uintptr_t stream);
// Every stream of the emulated GPU.
void synchronizeAll();
// The same, leaving any kernel error to be reported at the streams' next synchronisation: for the
// allocator, which must not free memory a queued kernel may still touch (cudaFree waits likewise).
void drainAll();
// Whether everything queued on `stream` has run (torch.cuda.Stream.query()).
bool streamIdle(std::uintptr_t stream);

// A position in a stream's queue, and whether the stream has passed it.
struct Marker {
  std::uintptr_t stream = 0;
  std::uint64_t sequence = 0;  // the number of tasks queued on the stream when it was taken
};
Marker markNow(std::uintptr_t stream);
bool reached(const Marker& marker);
void waitFor(const Marker& marker);  // rethrows the stream's kernel error, as synchronizeStream
// For one stream waiting on another's marker (Stream::wait_event): the error stays with its stream.
void waitForQuietly(const Marker& marker);

// Stream capture, for CUDA graphs on the emulated GPU (engine/runtime/cuda_graph.cpp): while `stream`
// captures, enqueue() records its tasks instead of queueing them -- nothing runs, as nothing runs on a
// GPU stream under capture -- and endCapture() hands them over in order, for the graph to queue
// again at each replay. Marking a capturing stream's place (an event record) throws: its queue does
// not move while it captures.
void beginCapture(std::uintptr_t stream);
std::vector<Task> endCapture(std::uintptr_t stream);
// Throws when `stream` captures: no event may mark a place in it then (markNow asks it too).
void refuseEventWhileCapturing(std::uintptr_t stream);

// A stream id from the pool for Stream::create().
std::uintptr_t nextPoolStream();

// The time the emulated GPU's streams have spent running kernels since the process started, summed
// over the streams: the busy time behind nvidia-smi's "GPU-Util" (the share of time a kernel ran),
// read twice around a loop. On a GPU that needs the device's own clock (events around each kernel);
// here each stream's thread times its tasks.
double busySeconds();

// Called from a task, on its stream's thread: when the task before it on the same stream finished
// (when the stream started, for its first). An event's time is max(when it was recorded, this): a
// GPU stamps an event on an idle stream when the record reaches it, not when a thread wakes up.
std::chrono::steady_clock::time_point previousTaskEnd();

}  // namespace gpulab::cuda::emulated
