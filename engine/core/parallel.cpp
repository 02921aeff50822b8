#include "engine/core/parallel.h"

#include <sched.h>

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <cstdlib>
#include <exception>
#include <mutex>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "engine/core/errors.h"

namespace gpulab {

namespace {

int threadsAtStart() {
  if (const char* env = std::getenv("OMP_NUM_THREADS")) {
    char* end = nullptr;
    const long n = std::strtol(env, &end, 10);
    if (end != env && n > 0) return static_cast<int>(std::min<long>(n, 1024));
  }
  cpu_set_t set;
  if (sched_getaffinity(0, sizeof(set), &set) == 0) return std::max(1, CPU_COUNT(&set));
  return std::max(1u, std::thread::hardware_concurrency());
}

std::atomic<int>& configuredThreads() {
  static std::atomic<int> threads{threadsAtStart()};
  return threads;
}

// Inside a part: a nested parallelFor runs serially in the part's thread.
thread_local bool tInsidePart = false;
// leaveACpuToTheHost(): this thread's kernels run on one thread fewer than numThreads().
thread_local bool tLeavesACpu = false;

using PartFn = std::function<void(int, std::int64_t, std::int64_t)>;

// The workers wait on a condition variable (no spinning: an idle pool takes no CPU from the thread
// that is working). A job is `parts` ranges handed out one at a time under the mutex; the caller takes
// parts too, so a job never waits for a worker that has not woken up yet. At most `runners` threads
// (the caller counted) take part in one job.
class Pool {
 public:
  ~Pool() { resize(0); }

  // Runs the job if the pool is free; false (nothing run) when another thread is using it.
  bool tryRun(int parts, int runners, std::int64_t n, const PartFn& fn) {
    std::unique_lock<std::mutex> owner(owner_, std::try_to_lock);
    if (!owner.owns_lock()) return false;
    if (static_cast<int>(workers_.size()) != numThreads() - 1) resize(numThreads() - 1);
    {
      std::lock_guard<std::mutex> lock(m_);
      fn_ = &fn;
      n_ = n;
      parts_ = parts;
      next_ = 0;
      unfinished_ = parts;
      error_ = nullptr;
      runners_ = 1;  // the caller
      maxRunners_ = runners;
    }
    work_.notify_all();
    std::unique_lock<std::mutex> lock(m_);
    runParts(lock);
    done_.wait(lock, [&] { return unfinished_ == 0; });
    fn_ = nullptr;
    if (error_) std::rethrow_exception(std::exchange(error_, nullptr));
    return true;
  }

 private:
  // Takes and runs parts until none is left; called with m_ held, returns with it held.
  void runParts(std::unique_lock<std::mutex>& lock) {
    while (fn_ && next_ < parts_) {
      const int part = next_++;
      const PartFn& fn = *fn_;
      const std::int64_t begin = n_ * part / parts_, end = n_ * (part + 1) / parts_;
      lock.unlock();
      std::exception_ptr error;
      tInsidePart = true;
      try {
        fn(part, begin, end);
      } catch (...) {
        error = std::current_exception();
      }
      tInsidePart = false;
      lock.lock();
      if (error && !error_) error_ = error;
      if (--unfinished_ == 0) done_.notify_all();
    }
  }

  void workerLoop() {
    std::unique_lock<std::mutex> lock(m_);
    while (true) {
      work_.wait(lock, [&] { return stopping_ || (fn_ && next_ < parts_ && runners_ < maxRunners_); });
      if (stopping_) return;
      ++runners_;
      runParts(lock);
      --runners_;
    }
  }

  // Called with owner_ held (or from the destructor): no job is running.
  void resize(int workers) {
    {
      std::lock_guard<std::mutex> lock(m_);
      stopping_ = true;
    }
    work_.notify_all();
    for (std::thread& t : workers_) t.join();
    workers_.clear();
    stopping_ = false;
    for (int i = 0; i < workers; ++i) workers_.emplace_back([this] { workerLoop(); });
  }

  std::mutex owner_;  // one job at a time
  std::vector<std::thread> workers_;
  std::mutex m_;
  std::condition_variable work_, done_;
  const PartFn* fn_ = nullptr;
  std::int64_t n_ = 0;
  int parts_ = 0, next_ = 0, unfinished_ = 0;
  int runners_ = 0, maxRunners_ = 0;  // the threads in the job, and how many it may have
  bool stopping_ = false;
  std::exception_ptr error_;
};

Pool& pool() {
  static Pool p;
  return p;
}

}  // namespace

int numThreads() { return configuredThreads().load(std::memory_order_relaxed); }

void setNumThreads(int threads) {
  if (threads < 1 || threads > 1024)
    throw Error("set_num_threads expects a positive integer (at most 1024), got " + std::to_string(threads));
  configuredThreads().store(threads, std::memory_order_relaxed);
}

int parallelParts(std::int64_t n, std::int64_t grain) {
  if (n <= 0) return 1;
  const std::int64_t byGrain = (n + std::max<std::int64_t>(grain, 1) - 1) / std::max<std::int64_t>(grain, 1);
  return static_cast<int>(std::clamp<std::int64_t>(byGrain, 1, numThreads()));
}

void leaveACpuToTheHost() { tLeavesACpu = true; }

void parallelFor(std::int64_t n, std::int64_t grain, const PartFn& fn) {
  if (n <= 0) return;
  const int parts = parallelParts(n, grain);
  const int runners = std::min(parts, numThreads() - (tLeavesACpu ? 1 : 0));
  if (runners > 1 && !tInsidePart && pool().tryRun(parts, runners, n, fn)) return;
  // One part or one thread, a nested call, or the pool busy with another thread's job: the same parts, here, in order.
  for (int part = 0; part < parts; ++part) fn(part, n * part / parts, n * (part + 1) / parts);
}

}  // namespace gpulab
