// The emulated GPU's streams (see emulated_streams.h): a queue and a worker thread per stream.
//
// The host's side of a queue is a mutex-guarded vector, which the worker takes whole (one lock a batch,
// not one a task); the counters the host polls (how many tasks were queued, how many have run) are
// atomics, so query() and a marker check take no lock. A worker that runs dry spins briefly before it
// sleeps, because a training step queues its next kernel a few microseconds after the last one
// finished: sleeping on every gap would make each op pay a wake-up. It wakes a waiting host only when
// the count the host waits for is reached, not after every task.
#include "engine/runtime/emulated_streams.h"

#include <array>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdlib>
#include <exception>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include "engine/core/errors.h"
#include "engine/core/parallel.h"

namespace gpulab::cuda::emulated {
namespace {

// The end of the task before the one this stream's thread runs now (previousTaskEnd()); set when
// the thread starts, for its first task.
thread_local std::chrono::steady_clock::time_point tPreviousTaskEnd = std::chrono::steady_clock::now();

class StreamQueue {
 public:
  StreamQueue() : worker_([this] { run(); }) { worker_.detach(); }

  void push(Task task) {
    // A GPU's launch queue holds about a thousand launches; past that, a launch waits until the device
    // has made room. So does this one: a host that runs ahead (a loop that never reads a result) stays
    // at most kMaxPending tasks ahead -- Stop then waits for that much work at most, not for minutes of
    // queued steps, and the queued closures cannot grow without bound.
    if (const std::uint64_t q = queued(); q - done() >= kMaxPending) waitUntil(q - kMaxPending / 2, false);
    {
      std::lock_guard lock(mutex_);
      tasks_.push_back(std::move(task));
      queued_.fetch_add(1, std::memory_order_release);
      collectLocked();
    }
    if (sleeping_.load(std::memory_order_acquire)) workReady_.notify_one();  // before the clean-up: the worker starts sooner
    destroyCollected();
  }

  std::uint64_t queued() const { return queued_.load(std::memory_order_acquire); }
  std::uint64_t done() const { return done_.load(std::memory_order_seq_cst); }
  std::uint64_t busyNanoseconds() const { return busyNs_.load(std::memory_order_relaxed); }

  // Waits until `sequence` tasks have run; `rethrow`: report (and clear) a kernel's error.
  void waitUntil(std::uint64_t sequence, bool rethrow) {
    for (int spin = 0; spin < 4000 && done() < sequence; ++spin) pause();
    std::exception_ptr error;
    {
      std::unique_lock lock(mutex_);
      while (done() < sequence) {
        // Ask the worker for a wake-up at `sequence`, then look again: the worker counts a task done
        // before it reads wakeAt_, and both are sequentially consistent, so either it sees this
        // request or this second look sees its count -- no wake-up is lost. (The worker resets wakeAt_
        // when it wakes the waiters; each waiter still short asks again.)
        if (sequence < wakeAt_.load(std::memory_order_seq_cst)) wakeAt_.store(sequence, std::memory_order_seq_cst);
        if (done() >= sequence) break;
        taskDone_.wait(lock);
      }
      if (rethrow) std::swap(error, error_);
      collectLocked();
    }
    destroyCollected();
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

  // The tasks that ran are destroyed by the host, not by the worker: a task's closure and the borrowed
  // views in it were allocated on the host, and freeing them on another thread made the two contend
  // for the allocator's arena lock on every op (a fifth of an emulated training step, measured with
  // perf). The views own no memory, so when they go changes no memory statistic. A thread's spare
  // vector takes the finished tasks under the lock (its buffer stays, so nothing is allocated here
  // either); they are destroyed after the lock is released. Tasks must own nothing whose destructor
  // reaches back into the streams or the allocator (the kernels hold borrowed views, copies raw
  // pointers or a staging buffer): a task destroyed here must not queue or wait.
  // The thread's spare vector, or null once the thread's thread-locals are being destroyed (at exit,
  // the at-exit drain runs after them): the pointer and the flag are trivially destructible, so they
  // can still be read then. The vector is deleted with its thread (a lab's thread comes and goes).
  static std::vector<Task>* spare() {
    thread_local std::vector<Task>* v = nullptr;
    thread_local bool gone = false;
    struct Owner {
      std::vector<Task>*& v;
      bool& gone;
      ~Owner() {
        delete v;
        v = nullptr;
        gone = true;
      }
    };
    if (!v && !gone) {
      thread_local Owner owner{v, gone};
      v = new std::vector<Task>();
    }
    return v;
  }
  void collectLocked() {
    std::vector<Task>* s = spare();
    if (s && s->empty() && !finished_.empty()) s->swap(finished_);
  }
  static void destroyCollected() {
    std::vector<Task>* s = spare();
    if (!s || s->empty()) return;
    // Out of the spare vector before destroying, so it is whole (empty) even if a destructor came back.
    std::vector<Task> doomed = std::move(*s);
    doomed.clear();
    if (s == spare() && s->capacity() == 0) *s = std::move(doomed);  // keep the buffer for the next collection
  }

  void run() {
    leaveACpuToTheHost();  // it stands for a device beside the host (engine/core/parallel.h)
    tPreviousTaskEnd = std::chrono::steady_clock::now();  // the stream starts here
    std::vector<Task> batch;  // every task queued when the worker looked, run in order
    for (;;) {
      for (int spin = 0; spin < 4000 && done() == queued(); ++spin) pause();
      {
        std::unique_lock lock(mutex_);
        if (tasks_.empty()) {
          sleeping_.store(true, std::memory_order_release);
          workReady_.wait(lock, [&] { return !tasks_.empty(); });
          sleeping_.store(false, std::memory_order_release);
        }
        batch.swap(tasks_);  // one lock for the whole batch; tasks_ keeps batch's emptied buffer
      }
      for (Task& task : batch) {
        const auto started = std::chrono::steady_clock::now();
        try {
          task();
        } catch (...) {
          std::lock_guard lock(mutex_);
          if (!error_) error_ = std::current_exception();  // the first error is the one CUDA reports
        }
        const auto ended = std::chrono::steady_clock::now();
        tPreviousTaskEnd = ended;
        busyNs_.fetch_add(static_cast<std::uint64_t>(std::chrono::duration_cast<std::chrono::nanoseconds>(ended - started).count()),
                          std::memory_order_relaxed);
        const std::uint64_t now = done_.fetch_add(1, std::memory_order_seq_cst) + 1;
        if (now >= wakeAt_.load(std::memory_order_seq_cst)) {
          std::lock_guard lock(mutex_);  // a waiter that asked is either still looking or asleep: not in between
          wakeAt_.store(kNoWakeUp, std::memory_order_seq_cst);
          taskDone_.notify_all();
        }
      }
      {
        std::lock_guard lock(mutex_);
        for (Task& task : batch) finished_.push_back(std::move(task));
      }
      batch.clear();  // moved-from: nothing left to free
    }
  }

  static constexpr std::uint64_t kNoWakeUp = ~std::uint64_t{0};
  static constexpr std::uint64_t kMaxPending = 1024;
  std::mutex mutex_;
  std::condition_variable workReady_, taskDone_;
  std::vector<Task> tasks_;     // queued, not taken by the worker yet
  std::vector<Task> finished_;  // run, for the host to destroy
  std::atomic<std::uint64_t> queued_{0}, done_{0};
  std::atomic<std::uint64_t> busyNs_{0};  // time spent in tasks
  std::atomic<std::uint64_t> wakeAt_{kNoWakeUp};  // the smallest count a sleeping waiter waits for
  std::atomic<bool> sleeping_{false};
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

// The tasks a capturing stream has recorded (null: not capturing). Read without a lock on every
// enqueue; changed, and appended to, under `captureMutex`.
std::array<std::atomic<std::vector<Task>*>, kPoolSize + 1> captures{};
std::mutex captureMutex;

std::vector<Task>* captureOf(std::uintptr_t stream) {
  return stream <= kPoolSize ? captures[stream].load(std::memory_order_acquire) : nullptr;
}

}  // namespace

void enqueue(std::uintptr_t stream, Task task) {
  if (captureOf(stream)) {
    std::unique_lock lock(captureMutex);
    // Looked at again under the lock: the capture may have ended (and its vector gone) meanwhile.
    if (std::vector<Task>* recorded = captureOf(stream)) {
      recorded->push_back(std::move(task));
      return;
    }
  }
  queue(stream).push(std::move(task));
}

void beginCapture(std::uintptr_t stream) {
  queue(stream);  // checks the id
  std::lock_guard lock(captureMutex);
  if (captures[stream].load(std::memory_order_relaxed)) throw Error("the emulated GPU's stream " + std::to_string(stream) + " is already capturing");
  captures[stream].store(new std::vector<Task>(), std::memory_order_release);
}

std::vector<Task> endCapture(std::uintptr_t stream) {
  queue(stream);
  std::lock_guard lock(captureMutex);
  std::unique_ptr<std::vector<Task>> recorded(captures[stream].exchange(nullptr, std::memory_order_acq_rel));
  if (!recorded) throw Error("the emulated GPU's stream " + std::to_string(stream) + " is not capturing");
  return std::move(*recorded);
}

void refuseEventWhileCapturing(std::uintptr_t stream) {
  if (captureOf(stream)) {
    throw Error("GPU Lab's emulated GPU cannot record an event on a stream while it captures a CUDA graph "
                "(record it before torch.cuda.graph(...) or after it)");
  }
}

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

Marker markNow(std::uintptr_t stream) {
  refuseEventWhileCapturing(stream);
  return {stream, queue(stream).queued()};
}
bool reached(const Marker& marker) { return queue(marker.stream).done() >= marker.sequence; }
void waitFor(const Marker& marker) { queue(marker.stream).waitUntil(marker.sequence, true); }
void waitForQuietly(const Marker& marker) { queue(marker.stream).waitUntil(marker.sequence, false); }

std::chrono::steady_clock::time_point previousTaskEnd() { return tPreviousTaskEnd; }

double busySeconds() {
  std::uint64_t ns = 0;
  for (const auto& q : queues)
    if (const StreamQueue* s = q.load(std::memory_order_acquire)) ns += s->busyNanoseconds();
  return static_cast<double>(ns) * 1e-9;
}

std::uintptr_t nextPoolStream() {
  static std::atomic<std::uintptr_t> next{0};
  return 1 + next.fetch_add(1, std::memory_order_relaxed) % kPoolSize;
}

}  // namespace gpulab::cuda::emulated
