#include "engine/core/parallel.h"

#include <sched.h>

#include <algorithm>
#include <atomic>
#include <chrono>
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

// The number an environment variable starts with, or `fallback` when it is unset or starts with none.
long envNumber(const char* name, long fallback) {
  const char* env = std::getenv(name);
  if (!env) return fallback;
  char* end = nullptr;
  const long n = std::strtol(env, &end, 10);
  return end != env ? n : fallback;
}

int threadsAtStart() {
  if (const long n = envNumber("OMP_NUM_THREADS", 0); n > 0) return static_cast<int>(std::min<long>(n, 1024));
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

// A pause in a busy-wait: the sibling hyperthread gets the core's execution units meanwhile.
inline void cpuRelax() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#elif defined(__aarch64__)
  asm volatile("yield");
#endif
}

// How long a thread busy-waits before it sleeps: a worker for the next job, the caller for the last
// part. Measured on two vCPUs of an AMD EPYC (2026-11-29): a two-part job of 50 us parts took 78 us
// with the threads sleeping between jobs and 53 us with them spinning -- a wake-up through the kernel
// cost ~25 us each way -- and the Fashion-MNIST MLP's training step runs ~20 such jobs a few
// microseconds apart: its epoch in `gpulab-cli train` went from 1.46-1.78 s to 1.09-1.39 s spinning up
// to 200 us (four alternating pairs). Spinning longer measured slower again: the MLP's epoch (pause-only
// spinning, the best of three, four to nine alternating rounds) took a median 0.90 s with 50 or
// 100 us, 0.93 s with 200 us, 1.04 s with 20 us and 1.13 s with 1 ms (tests/bench/README.md, stop 49).
// (Put down then to a spinning hyperthread slowing its sibling; later the two vCPUs measured as two
// cores -- stop 50 -- so why a long spin cost is not settled.)
// Past the limit the thread sleeps, so an idle pool takes no CPU; OpenMP runtimes wait the same way
// (libgomp's spin count, Intel's KMP_BLOCKTIME). GPULAB_SPIN_US overrides it (0: sleep at once).
std::chrono::microseconds spinTime() {
  static const std::chrono::microseconds t = [] {
    const long us = envNumber("GPULAB_SPIN_US", -1);
    return std::chrono::microseconds(us >= 0 ? std::min<long>(us, 1000000) : 100);
  }();
  return t;
}

// Busy-waits until done() or spinTime() has passed; true when done(). After the first 10 us it also
// yields the CPU between checks: where other programs are waiting for a CPU (the window, a second
// training), they run, instead of waiting for a thread that has nothing to do. A Stop in the window
// beside an MLP training in another process (test_gui's stopEndsARunWithin200ms) took 57, 155 and
// 70 ms with pause-only spinning against 38-40 ms with the threads sleeping; with the yield 39, 45, 39
// and 170 ms against 68, 51, 79 and 79, and the MLP's epoch kept the spinning's speed.
template <class Done>
bool spinUntil(Done&& done) {
  const auto limit = spinTime();
  if (limit.count() == 0) return done();
  const auto start = std::chrono::steady_clock::now();
  constexpr auto kPauseOnly = std::chrono::microseconds(10);
  while (true) {
    for (int i = 0; i < 32; ++i) {
      if (done()) return true;
      cpuRelax();
    }
    const auto spun = std::chrono::steady_clock::now() - start;
    if (spun >= limit) return done();
    if (spun >= kPauseOnly) sched_yield();
  }
}

// A job is `parts` ranges handed out one at a time under the mutex; the caller takes parts too, so a
// job never waits for a worker that has not woken up yet. At most `runners` threads (the caller
// counted) take part in one job. Between jobs the workers busy-wait for a while, then sleep on a
// condition variable; the caller likewise waits for the last part (spinTime() says why).
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
      unfinished_.store(parts, std::memory_order_relaxed);
      error_ = nullptr;
      runners_ = 1;  // the caller
      maxRunners_ = runners;
      jobs_.fetch_add(1, std::memory_order_release);  // the spinning workers see a new job
    }
    work_.notify_all();  // no system call when every worker is spinning
    std::unique_lock<std::mutex> lock(m_);
    runParts(lock);
    if (unfinished_.load(std::memory_order_relaxed) != 0) {
      lock.unlock();
      spinUntil([&] { return unfinished_.load(std::memory_order_acquire) == 0; });
      lock.lock();
      done_.wait(lock, [&] { return unfinished_.load(std::memory_order_relaxed) == 0; });
    }
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
      if (unfinished_.fetch_sub(1, std::memory_order_acq_rel) == 1) done_.notify_all();
    }
  }

  void workerLoop() {
    std::unique_lock<std::mutex> lock(m_);
    const auto ready = [&] { return stopping_ || (fn_ && next_ < parts_ && runners_ < maxRunners_); };
    while (true) {
      if (!ready()) {
        const std::uint64_t seen = jobs_.load(std::memory_order_relaxed);
        lock.unlock();
        spinUntil([&] { return jobs_.load(std::memory_order_acquire) != seen || stopping_.load(std::memory_order_acquire); });
        lock.lock();
        work_.wait(lock, ready);
      }
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
      stopping_.store(true, std::memory_order_release);
    }
    work_.notify_all();
    for (std::thread& t : workers_) t.join();
    workers_.clear();
    stopping_.store(false, std::memory_order_relaxed);
    for (int i = 0; i < workers; ++i) workers_.emplace_back([this] { workerLoop(); });
  }

  std::mutex owner_;  // one job at a time
  std::vector<std::thread> workers_;
  std::mutex m_;
  std::condition_variable work_, done_;
  const PartFn* fn_ = nullptr;
  std::int64_t n_ = 0;
  int parts_ = 0, next_ = 0;
  std::atomic<int> unfinished_{0};         // parts not finished; read without m_ while the caller spins
  std::atomic<std::uint64_t> jobs_{0};     // jobs posted so far; read without m_ while a worker spins
  int runners_ = 0, maxRunners_ = 0;  // the threads in the job, and how many it may have
  std::atomic<bool> stopping_{false};  // set under m_; read without it while a worker spins
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
