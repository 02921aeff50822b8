// The CPU kernels' threads (engine/core/parallel.h): how parallelFor cuts the work, that every item is
// run once, that an exception comes back to the caller, that nested and concurrent calls run, and
// that the kernels split over the threads -- GEMM, convolution, batch norm, pools, elementwise ops --
// give the one-thread result at every thread count (the convolution's weight gradient, summed over
// parts, to rounding; everything else bit for bit) and the same bits from run to run.
#include <atomic>
#include <chrono>
#include <mutex>
#include <set>
#include <stdexcept>
#include <thread>
#include <tuple>
#include <vector>

#include "engine/core/errors.h"
#include "engine/core/parallel.h"
#include "test_util.h"

using namespace gpulab;

namespace {

// Sets the thread count for a scope, and puts the old one back.
class ThreadsScope {
 public:
  explicit ThreadsScope(int threads) : old_(numThreads()) { setNumThreads(threads); }
  ~ThreadsScope() { setNumThreads(old_); }

 private:
  int old_;
};

struct Part {
  int part;
  std::int64_t begin, end;
};

std::vector<Part> partsOf(std::int64_t n, std::int64_t grain) {
  std::vector<Part> parts(static_cast<std::size_t>(parallelParts(n, grain)), Part{-1, 0, 0});
  parallelFor(n, grain, [&](int part, std::int64_t begin, std::int64_t end) { parts[static_cast<std::size_t>(part)] = {part, begin, end}; });
  return parts;
}

// The CNN's layers on one batch: outputs and every gradient, as tensors to compare.
std::vector<Tensor> cnnStep(DType dtype) {
  manual_seed(3);
  const Options o{.dtype = dtype};
  Tensor x = randn({13, 3, 11, 11}, defaultGenerator(), o);  // 13 samples: the parts do not divide them evenly
  Tensor w1 = randn({8, 3, 3, 3}, defaultGenerator(), o).requires_grad_(true);
  Tensor w2 = randn({6, 8, 3, 3}, defaultGenerator(), o).requires_grad_(true);
  Tensor gamma = ones({8}, o).requires_grad_(true), beta = zeros({8}, o).requires_grad_(true);
  Tensor lin = randn({6 * 5 * 5, 4}, defaultGenerator(), o).requires_grad_(true);
  Tensor h = conv2d(x, w1, Tensor(), 1, 1);
  h = relu(batch_norm(h, Tensor(), Tensor(), gamma, beta, true, 0.1, 1e-5));
  h = max_pool2d(h, 2);
  h = conv2d(h, w2, Tensor(), 1, 1);
  Tensor out = matmul(h.reshape({13, -1}), lin);
  mul(out, out).sum().backward();
  return {out.detach(), w1.grad(), w2.grad(), gamma.grad(), beta.grad(), lin.grad()};
}

}  // namespace

class TestParallel : public QObject {
  Q_OBJECT

 private slots:
  void partsAreContiguousAndCoverEveryItemOnce() {
    ThreadsScope threads(4);
    QCOMPARE(parallelParts(1000, 1), 4);
    QCOMPARE(parallelParts(1000, 300), 4);  // ceil(1000 / 300) = 4
    QCOMPARE(parallelParts(1000, 400), 3);
    QCOMPARE(parallelParts(1000, 5000), 1);  // smaller than one grain: the caller alone
    QCOMPARE(parallelParts(3, 1), 3);        // never more parts than items
    const std::vector<Part> parts = partsOf(1001, 1);
    QCOMPARE(parts.size(), std::size_t(4));
    std::int64_t next = 0;
    for (std::size_t i = 0; i < parts.size(); ++i) {
      QCOMPARE(parts[i].part, static_cast<int>(i));
      QCOMPARE(parts[i].begin, next);
      QVERIFY(parts[i].end - parts[i].begin >= 250);  // about equal: 1001 / 4
      next = parts[i].end;
    }
    QCOMPARE(next, std::int64_t{1001});

    std::vector<std::atomic<int>> seen(100000);
    parallelFor(100000, 1000, [&](int, std::int64_t begin, std::int64_t end) {
      for (std::int64_t i = begin; i < end; ++i) seen[static_cast<std::size_t>(i)]++;
    });
    for (const auto& s : seen) QCOMPARE(s.load(), 1);
    bool ran = false;
    parallelFor(0, 1, [&](int, std::int64_t, std::int64_t) { ran = true; });
    QVERIFY(!ran);  // no items, no call
  }

  void theThreadCountIsWhatWasSet() {
    {
      ThreadsScope threads(1);
      QCOMPARE(numThreads(), 1);
      QCOMPARE(parallelParts(1 << 20, 1), 1);
      std::set<std::thread::id> ids;
      parallelFor(64, 1, [&](int, std::int64_t, std::int64_t) { ids.insert(std::this_thread::get_id()); });
      QCOMPARE(ids.size(), std::size_t(1));
      QVERIFY(*ids.begin() == std::this_thread::get_id());
    }
    ThreadsScope threads(3);
    QCOMPARE(numThreads(), 3);
    // Each part waits until all three have started: the job finishes only if three threads run it.
    std::atomic<int> started{0};
    std::set<std::thread::id> ids;
    std::mutex m;
    parallelFor(3, 1, [&](int, std::int64_t, std::int64_t) {
      started++;
      while (started.load() < 3) std::this_thread::yield();
      std::lock_guard<std::mutex> lock(m);
      ids.insert(std::this_thread::get_id());
    });
    QCOMPARE(ids.size(), std::size_t(3));
  }

  // A thread that stands for a device beside the host (the emulated GPU's streams) cuts its work into
  // the same parts but runs them on one thread fewer: with two threads, all on its own; with four, on
  // at most three at once -- the host's thread keeps a CPU.
  void aDeviceThreadLeavesTheHostACpu() {
    auto onADeviceThread = [](int threads, std::int64_t items) {
      ThreadsScope scope(threads);
      std::set<std::thread::id> ids;
      int parts = 0, mostAtOnce = 0;
      std::atomic<int> running{0};
      std::mutex m;
      std::thread device([&] {
        leaveACpuToTheHost();
        parallelFor(items, 1, [&](int part, std::int64_t, std::int64_t) {
          const int now = ++running;
          {
            std::lock_guard<std::mutex> lock(m);
            ids.insert(std::this_thread::get_id());
            parts = std::max(parts, part + 1);
            mostAtOnce = std::max(mostAtOnce, now);
          }
          // Each part waits (up to 2 s) until threads - 1 run, then a while longer: a runner too many
          // would overlap, one too few leaves the count short.
          const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(2);
          while (part < threads - 1 && running.load() < threads - 1 && std::chrono::steady_clock::now() < until) std::this_thread::yield();
          std::this_thread::sleep_for(std::chrono::milliseconds(20));
          --running;
        });
      });
      device.join();
      return std::tuple{parts, static_cast<int>(ids.size()), mostAtOnce};
    };
    const auto [twoParts, twoIds, twoAtOnce] = onADeviceThread(2, 2);
    QCOMPARE(twoParts, 2);  // the same cut as any other thread's
    QCOMPARE(twoIds, 1);
    QCOMPARE(twoAtOnce, 1);
    const auto [fourParts, fourIds, fourAtOnce] = onADeviceThread(4, 8);
    QCOMPARE(fourParts, 4);
    QCOMPARE(fourAtOnce, 3);  // three runners: the caller and two workers, never the fourth
    QVERIFY(fourIds <= 3);
  }

  void aBadThreadCountIsRefusedWithPyTorchsWords() {
    const int before = numThreads();
    for (int bad : {0, -2, 1025}) {
      try {
        setNumThreads(bad);
        QFAIL("set_num_threads accepted a bad count");
      } catch (const Error& e) {
        QVERIFY2(std::string(e.what()).find("set_num_threads expects a positive integer") != std::string::npos, e.what());
      }
    }
    QCOMPARE(numThreads(), before);
  }

  void anExceptionInAPartReachesTheCallerAndThePoolGoesOn() {
    ThreadsScope threads(4);
    std::atomic<int> finished{0};
    try {
      parallelFor(4, 1, [&](int part, std::int64_t, std::int64_t) {
        if (part == 2) throw std::runtime_error("part 2 failed");
        finished++;
      });
      QFAIL("the exception was lost");
    } catch (const std::runtime_error& e) {
      QCOMPARE(std::string(e.what()), std::string("part 2 failed"));
    }
    QCOMPARE(finished.load(), 3);  // the other parts ran to the end before the caller saw it
    std::atomic<std::int64_t> sum{0};
    parallelFor(1000, 1, [&](int, std::int64_t begin, std::int64_t end) {
      for (std::int64_t i = begin; i < end; ++i) sum += i;
    });
    QCOMPARE(sum.load(), std::int64_t{999 * 1000 / 2});
  }

  void nestedAndConcurrentCallsRunEveryPart() {
    ThreadsScope threads(4);
    // Nested: a part's own parallelFor runs its parts in the part's thread, all of them.
    std::atomic<int> inner{0};
    std::atomic<bool> otherThread{false};
    parallelFor(4, 1, [&](int, std::int64_t, std::int64_t) {
      const std::thread::id me = std::this_thread::get_id();
      parallelFor(8, 1, [&](int, std::int64_t b, std::int64_t e) {
        inner += static_cast<int>(e - b);
        if (std::this_thread::get_id() != me) otherThread = true;
      });
    });
    QCOMPARE(inner.load(), 32);
    QVERIFY(!otherThread.load());
    // Concurrent: two threads share one pool; whichever finds it busy runs its parts itself.
    std::atomic<std::int64_t> a{0}, b{0};
    auto job = [](std::atomic<std::int64_t>& total) {
      for (int round = 0; round < 200; ++round)
        parallelFor(1000, 10, [&](int, std::int64_t begin, std::int64_t end) { total += end - begin; });
    };
    std::thread other([&] { job(b); });
    job(a);
    other.join();
    QCOMPARE(a.load(), std::int64_t{200 * 1000});
    QCOMPARE(b.load(), std::int64_t{200 * 1000});
  }

  void kernelsGiveTheOneThreadResultAtEveryThreadCount() {
    std::vector<Tensor> one;
    {
      ThreadsScope threads(1);
      one = cnnStep(kFloat64);
    }
    for (int count : {2, 3, 5}) {
      ThreadsScope threads(count);
      for (DType dtype : {kFloat32, kFloat64}) {
        // Run to run at one count: the same bits (the parts depend on the count alone).
        const std::vector<Tensor> first = cnnStep(dtype), again = cnnStep(dtype);
        for (std::size_t i = 0; i < first.size(); ++i)
          QVERIFY2(first[i].toVector<double>() == again[i].toVector<double>(),
                   qPrintable(QString("tensor %1 (%2) at %3 threads differs between runs").arg(i).arg(dtypeName(dtype).c_str()).arg(count)));
        if (dtype != kFloat64) continue;
        // Against one thread, in float64: rounding only (conv2's weight gradient is summed per part,
        // then across parts; a GEMM is cut in blocks), ~1e-15 -- never a missed or doubled chunk of
        // samples or columns, which is off by its whole share. (In float32 the batch norm's backward,
        // a difference of nearly equal sums, lifts the same rounding to ~1e-5 relative.)
        for (std::size_t i = 0; i < first.size(); ++i) {
          const double closeness = test::closeness(first[i], one[i], 1e-10, 1e-10);
          QVERIFY2(closeness <= 1.0, qPrintable(QString("tensor %1 at %2 threads differs from one thread's (closeness %3)")
                                                    .arg(i).arg(count).arg(closeness)));
        }
      }
    }
  }
};

QTEST_GUILESS_MAIN(TestParallel)
#include "test_parallel.moc"
