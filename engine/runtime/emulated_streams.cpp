// The emulated GPU's streams (see emulated_streams.h): a queue and a worker thread per stream.
//
// The host's side of a queue is a mutex-guarded deque; the counters the host polls (how many tasks
// were queued, how many have run) are atomics, so query() and a marker check take no lock. A worker
// that runs dry spins briefly before it sleeps, because a training step queues its next kernel a few
// microseconds after the last one finished: sleeping on every gap would make each op pay a wake-up.
#include "engine/runtime/emulated_streams.h"

#include <array>
#include <atomic>
#include <condition_variable>
#include <cstdlib>
#include <deque>
#include <exception>
#include <mutex>
#include <thread>

#include "engine/core/errors.h"

namespace gpulab::cuda::emulated {
namespace {

class StreamQueue {
 public:
  StreamQueue() : worker_([this] { run(); }) { worker_.detach(); }

  void push(Task task) {
    {
      std::lock_guard lock(mutex_);
      tasks_.push_back(std::move(task));
      queued_.fetch_add(1, std::memory_order_release);
    }
    if (sleeping_.load(std::memory_order_acquire)) workReady_.notify_one();
  }

  std::uint64_t queued() const { return queued_.load(std::memory_order_acquire); }
  std::uint64_t done() const { return done_.load(std::memory_order_acquire); }

  // Waits until `sequence` tasks have run; `rethrow`: report (and clear) a kernel's error.
  void waitUntil(std::uint64_t sequence, bool rethrow) {
    for (int spin = 0; spin < 4000 && done() < sequence; ++spin) pause();
    if (done() < sequence) {
      std::unique_lock lock(mutex_);
      waiters_.fetch_add(1, std::memory_order_acq_rel);
      taskDone_.wait(lock, [&] { return done() >= sequence; });
      waiters_.fetch_sub(1, std::memory_order_acq_rel);
    }
    if (!rethrow) return;
    std::exception_ptr error;
    {
      std::lock_guard lock(mutex_);
      std::swap(error, error_);
    }
    if (error) std::rethrow_exception(error);
  }

 private:
  static void pause() {
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#else
    std::this_thread::yield();
#endif
  }

  void run() {
    for (;;) {
      Task task;
      for (int spin = 0; spin < 4000 && done() == queued(); ++spin) pause();
      {
        std::unique_lock lock(mutex_);
        if (tasks_.empty()) {
          sleeping_.store(true, std::memory_order_release);
          workReady_.wait(lock, [&] { return !tasks_.empty(); });
          sleeping_.store(false, std::memory_order_release);
        }
        task = std::move(tasks_.front());
        tasks_.pop_front();
      }
      try {
        task();
      } catch (...) {
        std::lock_guard lock(mutex_);
        if (!error_) error_ = std::current_exception();  // the first error is the one CUDA reports
      }
      task = nullptr;  // whatever the task held goes before it counts as done
      {
        // Under the lock, so a host that saw done() short and is about to sleep cannot miss the wake-up.
        std::lock_guard lock(mutex_);
        done_.fetch_add(1, std::memory_order_release);
      }
      if (waiters_.load(std::memory_order_acquire) > 0) taskDone_.notify_all();
    }
  }

  std::mutex mutex_;
  std::condition_variable workReady_, taskDone_;
  std::deque<Task> tasks_;
  std::atomic<std::uint64_t> queued_{0}, done_{0};
  std::atomic<bool> sleeping_{false};
  std::atomic<int> waiters_{0};
  std::exception_ptr error_;
  std::thread worker_;
};

// Never destroyed, and their threads detached: a stream lives as long as the process, and a tensor
// freed during static destruction may still wait for one.
std::array<std::atomic<StreamQueue*>, kPoolSize + 1> queues{};
std::mutex creation;

StreamQueue& queue(std::uintptr_t stream) {
  if (stream > kPoolSize) throw Error("invalid stream " + std::to_string(stream) + " for the emulated GPU");
  StreamQueue* q = queues[stream].load(std::memory_order_acquire);
  if (q) return *q;
  std::lock_guard lock(creation);
  q = queues[stream].load(std::memory_order_acquire);
  if (!q) {
    // At exit the queues are drained before the libraries' own teardown (exit handlers run in reverse
    // order of registration, and the shared libraries' destructors after them): a kernel still running
    // inside OpenBLAS while OpenBLAS shuts its threads down crashes or hangs the process.
    static const bool drainAtExit = (std::atexit([] { drainAll(); }), true);
    (void)drainAtExit;
    q = new StreamQueue();
    queues[stream].store(q, std::memory_order_release);
  }
  return *q;
}

}  // namespace

void enqueue(std::uintptr_t stream, Task task) { queue(stream).push(std::move(task)); }

void synchronizeStream(std::uintptr_t stream) {
  StreamQueue& q = queue(stream);
  q.waitUntil(q.queued(), true);
}

void synchronizeAll() {
  // Every stream first, then the first error, so no stream is left running behind a thrown one.
  std::exception_ptr first;
  for (std::uintptr_t s = 0; s <= kPoolSize; ++s) {
    if (!queues[s].load(std::memory_order_acquire)) continue;
    try {
      synchronizeStream(s);
    } catch (...) {
      if (!first) first = std::current_exception();
    }
  }
  if (first) std::rethrow_exception(first);
}

void drainAll() {
  for (std::uintptr_t s = 0; s <= kPoolSize; ++s) {
    if (StreamQueue* q = queues[s].load(std::memory_order_acquire)) q->waitUntil(q->queued(), false);
  }
}

bool streamIdle(std::uintptr_t stream) {
  const StreamQueue& q = queue(stream);
  return q.done() >= q.queued();
}

Marker markNow(std::uintptr_t stream) { return {stream, queue(stream).queued()}; }
bool reached(const Marker& marker) { return queue(marker.stream).done() >= marker.sequence; }
void waitFor(const Marker& marker) { queue(marker.stream).waitUntil(marker.sequence, true); }
void waitForQuietly(const Marker& marker) { queue(marker.stream).waitUntil(marker.sequence, false); }

std::uintptr_t nextPoolStream() {
  static std::atomic<std::uintptr_t> next{0};
  return 1 + next.fetch_add(1, std::memory_order_relaxed) % kPoolSize;
}

}  // namespace gpulab::cuda::emulated
