#pragma once
// Streams and events, torch.cuda's: a stream is an in-order queue of a GPU's work; ops queue their
// kernels on the current stream of their device and return before the kernels ran. Events mark a
// point in a stream, to wait for it (synchronize, Stream::wait_event) or to time the work between
// two of them (elapsed_time).
//
//   auto copyStream = cuda::Stream::create(device);           // copy_stream = torch.cuda.Stream()
//   {
//     cuda::StreamGuard on(copyStream);                       // with torch.cuda.stream(copy_stream):
//     next = batch.to(device, /*non_blocking=*/true);         //     next = batch.to(device, non_blocking=True)
//   }
//   cuda::current_stream(device).wait_stream(copyStream);     // torch.cuda.current_stream().wait_stream(copy_stream)
//   next.record_stream(cuda::current_stream(device));         // next.record_stream(torch.cuda.current_stream())
//
// On the emulated GPU the streams are real queues run by threads of their own
// (engine/runtime/emulated_streams.h). On the CPU device there is no queue: its work is done when an
// op returns, and its one stream is always idle.
//
// Memory and streams: a tensor's block is allocated for the stream current when it was made, and is
// reused after its free only by work on that stream. A tensor used on another stream must say so with
// record_stream(), or its block may be handed to new work before the other stream has finished with
// it -- PyTorch's rule, kept by the same caching allocator.
#include <cstdint>
#include <memory>
#include <optional>
#include <string>

#include "engine/core/device.h"

namespace gpulab::cuda {

// The streams torch.cuda.Stream() hands out round-robin, per device (PyTorch's pool of 32).
inline constexpr std::uintptr_t kStreamPoolSize = 32;

class Event;

class Stream {
 public:
  // The default stream of `device` (PyTorch's torch.cuda.default_stream()).
  explicit Stream(Device device = Device(DeviceType::CUDA, 0)) : device_(device) {}
  Stream(Device device, std::uintptr_t id) : device_(device), id_(id) {}
  // torch.cuda.Stream(device): one of the device's pool of streams, handed out round-robin.
  static Stream create(Device device);

  Device device() const { return device_; }
  std::uintptr_t id() const { return id_; }  // 0: the default stream
  // Whether all work queued on it has run (torch.cuda.Stream.query()).
  bool query() const;
  // Waits until all work queued on it has run.
  void synchronize() const;
  // Work queued on this stream from now on waits until `event` (recorded on any stream) has happened.
  void wait_event(const Event& event) const;
  // ... until all work queued on `other` before this call has run.
  void wait_stream(const Stream& other) const;
  // "<torch.cuda.Stream device=cuda:0 id=3>"-style, with "default" for the default stream.
  std::string str() const;

  bool operator==(const Stream&) const = default;

 private:
  Device device_;
  std::uintptr_t id_ = 0;
};

// The calling thread's current stream of `device` (torch.cuda.current_stream(device)).
Stream current_stream(Device device);
Stream default_stream(Device device);

// RAII: makes `stream` the current stream of its device for this thread (with torch.cuda.stream(s):).
class StreamGuard {
 public:
  explicit StreamGuard(const Stream& stream);
  ~StreamGuard();
  StreamGuard(const StreamGuard&) = delete;
  StreamGuard& operator=(const StreamGuard&) = delete;

 private:
  Device device_;
  std::uintptr_t previous_;
};

// torch.cuda.Event. Copies share one event.
class Event {
 public:
  explicit Event(bool enable_timing = false);
  // Marks the current end of `stream`'s queue (the device's current stream without one).
  void record(const Stream& stream);
  void record();
  bool query() const;        // whether the stream has reached it (true before any record, as PyTorch)
  void synchronize() const;  // waits until it has
  // Milliseconds from this event to `end`, both recorded with enable_timing and both reached.
  double elapsed_time(const Event& end) const;
  bool recorded() const;
  std::optional<Stream> stream() const;  // where it was last recorded

  struct Impl;

 private:
  friend class Stream;
  std::shared_ptr<Impl> impl_;
};

}  // namespace gpulab::cuda

namespace gpulab {
// The current stream's id for `device` on this thread (0 on the CPU); what the caching allocator keys
// blocks by.
std::uintptr_t currentStreamId(Device device);
}  // namespace gpulab
