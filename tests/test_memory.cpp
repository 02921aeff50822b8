// The memory system: the caching allocator's policy over a bounded fake arena (so it is tested
// without a GPU), its statistics and event stream, the CPU's emulated budget, out-of-memory errors
// and recovery, and the steady state of a training loop.
#include <unistd.h>

#include <vector>
#include <map>
#include <random>

#include "engine/autograd/grad_mode.h"
#include "engine/core/errors.h"
#include "engine/data/dataloader.h"
#include "engine/runtime/device_memory.h"
#include "engine/runtime/emulated_gpu.h"
#include "fake_arena.h"
#include "lab_runner.h"
#include "engine/nn/layers.h"
#include "engine/optim/optimizer.h"
#include "test_util.h"

using namespace gpulab;

namespace {

constexpr std::size_t MiB = 1 << 20;

struct Fixture {
  explicit Fixture(std::size_t capacity = 64 * MiB) {
    auto raw = std::make_unique<test::FakeArena>(capacity);
    arena = raw.get();
    alloc = std::make_unique<CachingAllocator>(std::move(raw), Device(DeviceType::CUDA, 7));
  }
  test::FakeArena* arena;
  std::unique_ptr<CachingAllocator> alloc;
};

}  // namespace

class TestMemory : public QObject {
  Q_OBJECT

 private slots:
  void sizesAreRounded_data() {
    QTest::addColumn<qint64>("request");
    QTest::addColumn<qint64>("rounded");
    QTest::newRow("0") << qint64(0) << qint64(512);
    QTest::newRow("1") << qint64(1) << qint64(512);
    QTest::newRow("512") << qint64(512) << qint64(512);
    QTest::newRow("513") << qint64(513) << qint64(1024);
    QTest::newRow("1 MiB + 1") << qint64(MiB + 1) << qint64(MiB + 512);
  }
  void sizesAreRounded() {
    QFETCH(qint64, request);
    QFETCH(qint64, rounded);
    Fixture f;
    f.alloc->allocate(static_cast<std::size_t>(request));
    QCOMPARE(f.alloc->stats().allocated_bytes.current, rounded);
  }

  void smallRequestsShareTwoMiBSegments() {
    Fixture f;
    char* a = static_cast<char*>(f.alloc->allocate(1000));
    char* b = static_cast<char*>(f.alloc->allocate(1000));
    QCOMPARE(f.arena->calls, 1);
    QCOMPARE(f.alloc->stats().reserved_bytes.current, qint64(2 * MiB));
    QCOMPARE(b - a, 1024);  // split from the same segment, back to back
  }

  void largeRequestsGetLargeSegments() {
    Fixture f;
    f.alloc->allocate(3 * MiB);  // 1 MiB < request < 10 MiB: a 20 MiB segment
    QCOMPARE(f.alloc->stats().reserved_bytes.current, qint64(20 * MiB));
    f.alloc->allocate(5 * MiB);  // fits in the rest of that segment
    QCOMPARE(f.arena->calls, 1);
    f.alloc->allocate(13 * MiB);  // >= 10 MiB and more than the 12 MiB left: its own segment, rounded up to 2 MiB
    QCOMPARE(f.alloc->stats().reserved_bytes.current, qint64(34 * MiB));
    QCOMPARE(f.alloc->stats().segments.current, qint64(2));
  }

  void freedBlocksAreReusedWithoutTheSystem() {
    Fixture f;
    void* a = f.alloc->allocate(4096);
    f.alloc->free(a);
    QCOMPARE(f.alloc->allocate(4000), a);  // same rounded size: the cached block
    QCOMPARE(f.arena->calls, 1);
    QCOMPARE(f.alloc->stats().reserved_bytes.current, qint64(2 * MiB));
  }

  void neighboursCoalesceAndEmptyCacheReturnsWholeSegments() {
    Fixture f;
    void* a = f.alloc->allocate(100000);
    void* b = f.alloc->allocate(100000);
    void* c = f.alloc->allocate(100000);
    f.alloc->free(b);
    QCOMPARE(f.alloc->emptyCache(), qint64(0));  // the segment still has live blocks
    f.alloc->free(a);
    f.alloc->free(c);
    // a, b, c and the rest merged back into one free block, which serves the largest small request.
    void* whole = f.alloc->allocate(MiB);
    QCOMPARE(whole, a);
    QCOMPARE(f.arena->calls, 1);
    f.alloc->free(whole);
    QCOMPARE(f.alloc->emptyCache(), qint64(2 * MiB));
    QCOMPARE(f.alloc->stats().reserved_bytes.current, qint64(0));
    QCOMPARE(f.arena->outstanding, qint64(0));
  }

  void blocksAreReusedOnlyOnTheirStream() {
    Fixture f;
    void* a = f.alloc->allocate(4096, /*stream=*/1);
    f.alloc->free(a);
    void* b = f.alloc->allocate(4096, /*stream=*/2);
    QVERIFY(a != b);
    QCOMPARE(f.alloc->stats().segments.current, qint64(2));
    QCOMPARE(f.alloc->allocate(4096, 1), a);
  }

  void retryFreesTheCacheBeforeGivingUp() {
    Fixture f(40 * MiB);
    f.alloc->free(f.alloc->allocate(3 * MiB));  // a cached 20 MiB segment
    void* big = f.alloc->allocate(30 * MiB);    // needs the cache released first
    QVERIFY(big != nullptr);
    const MemoryStats s = f.alloc->stats();
    QCOMPARE(s.num_alloc_retries, qint64(1));
    QCOMPARE(s.num_ooms, qint64(0));
    QCOMPARE(s.reserved_bytes.current, qint64(30 * MiB));
  }

  void outOfMemoryReadsLikePyTorch() {
    Fixture f(64 * MiB);
    f.alloc->allocate(40 * MiB);
    f.alloc->free(f.alloc->allocate(1000));
    try {
      f.alloc->allocate(100 * MiB);
      QFAIL("expected OutOfMemoryError");
    } catch (const OutOfMemoryError& e) {
      const std::string m = e.what();
      QVERIFY2(m.starts_with("FAKE out of memory. Tried to allocate 100.00 MiB. Arena has a total capacity of 64.00 MiB "
                             "of which 24.00 MiB is free. Of the allocated memory 40.00 MiB is allocated by GPU Lab, and "
                             "0 bytes is reserved by GPU Lab but unallocated."), e.what());
      QVERIFY(m.find("reduce the batch size") != std::string::npos);
    }
    QCOMPARE(f.alloc->stats().num_ooms, qint64(1));
  }

  // A budget above what the device has does not speak for the device: the message gives the device's
  // capacity and says the budget was not what refused (it once read "a total capacity of 16.00 TiB of
  // which 16.00 TiB is free" on a machine with 24 GiB).
  void budgetAboveTheDeviceIsNotReportedAsItsCapacity() {
    Fixture f(64 * MiB);
    f.alloc->setLimitBytes(std::int64_t(16) << 40);
    f.alloc->allocate(40 * MiB);
    try {
      f.alloc->allocate(100 * MiB);
      QFAIL("expected OutOfMemoryError");
    } catch (const OutOfMemoryError& e) {
      const std::string m = e.what();
      QVERIFY2(m.starts_with("FAKE out of memory. Tried to allocate 100.00 MiB. Arena has a total capacity of 64.00 MiB of which 24.00 MiB is free."), e.what());
      QVERIFY2(m.find("memory budget for Arena (16.00 TiB, 16.00 TiB of it unused) is more than the device can give: the device itself refused.") !=
                   std::string::npos,
               e.what());
      QVERIFY2(m.find("of which 16.00 TiB is free") == std::string::npos, e.what());
    }
    // A budget below what the device has is what refuses, and the message says so.
    f.alloc->setLimitBytes(50 * MiB);
    try {
      f.alloc->allocate(20 * MiB);
      QFAIL("expected OutOfMemoryError");
    } catch (const OutOfMemoryError& e) {
      QVERIFY2(std::string(e.what()).starts_with("FAKE out of memory (emulated: GPU Lab's memory budget for Arena). Tried to allocate 20.00 MiB. "
                                                 "Arena has a total capacity of 50.00 MiB of which 10.00 MiB is free."),
               e.what());
    }
  }

  void fractionCapIsEnforced() {
    Fixture f(64 * MiB);
    f.alloc->setMemoryFraction(0.5);  // 32 MiB
    f.alloc->allocate(12 * MiB);
    f.alloc->allocate(12 * MiB);
    try {
      f.alloc->allocate(12 * MiB);
      QFAIL("expected the fraction cap to refuse");
    } catch (const OutOfMemoryError& e) {
      QVERIFY2(std::string(e.what()).find("a fraction of 0.5 of it (32.00 MiB, set_per_process_memory_fraction)") != std::string::npos, e.what());
    }
    QVERIFY(f.alloc->stats().reserved_bytes.current <= qint64(32 * MiB));
    QVERIFY_THROWS_EXCEPTION(ValueError, f.alloc->setMemoryFraction(0));
    QVERIFY_THROWS_EXCEPTION(ValueError, f.alloc->setMemoryFraction(1.5));
  }

  // Issue 27 6.4: a fraction whose bytes round to 0 caps at 0 (PyTorch's rule), not "no cap".
  void aFractionThatRoundsToNothingStillCaps() {
    Fixture f(64 * MiB);
    f.alloc->setMemoryFraction(1e-10);
    QVERIFY_THROWS_EXCEPTION(OutOfMemoryError, f.alloc->allocate(512));
    QCOMPARE(f.alloc->stats().reserved_bytes.current, qint64(0));
    QCOMPARE(f.alloc->effectiveCap(), std::optional<std::int64_t>(0));
    f.alloc->setMemoryFraction(1.0);
    QCOMPARE(f.alloc->effectiveCap(), std::optional<std::int64_t>());
    f.alloc->free(f.alloc->allocate(512));
  }

  // Random mixes of allocations and frees. Small blocks are always split to their rounded size, so
  // there the statistics must equal a plain model of the live blocks exactly; large blocks may keep
  // an unsplit tail of up to 1 MiB, which the statistics count as in use, as PyTorch's do.
  void statisticsAreExactAfterEveryOperation_data() {
    QTest::addColumn<bool>("withLarge");
    QTest::newRow("small blocks: exact model") << false;
    QTest::newRow("small and large blocks: invariants") << true;
  }
  void statisticsAreExactAfterEveryOperation() {
    QFETCH(bool, withLarge);
    Fixture f(256 * MiB);
    std::mt19937 rng(1);
    std::vector<std::pair<void*, std::int64_t>> live;
    std::int64_t requested = 0, peakSeen = 0, largeLive = 0;
    for (int i = 0; i < 3000; ++i) {
      if (!live.empty() && rng() % 2) {
        const std::size_t k = rng() % live.size();
        f.alloc->free(live[k].first);
        requested -= live[k].second;
        largeLive -= live[k].second > static_cast<std::int64_t>(MiB);
        live.erase(live.begin() + static_cast<std::ptrdiff_t>(k));
      } else {
        const std::size_t size = withLarge && rng() % 3 == 0 ? rng() % (4 * MiB) : rng() % 20000;
        live.emplace_back(f.alloc->allocate(size), static_cast<std::int64_t>(CachingAllocator::roundSize(size)));
        requested += live.back().second;
        largeLive += live.back().second > static_cast<std::int64_t>(MiB);
      }
      const MemoryStats s = f.alloc->stats();
      if (withLarge) {
        QVERIFY(s.allocated_bytes.current >= requested);
        QVERIFY(s.allocated_bytes.current <= requested + largeLive * static_cast<std::int64_t>(MiB));
      } else {
        QCOMPARE(s.allocated_bytes.current, requested);
      }
      peakSeen = std::max(peakSeen, s.allocated_bytes.current);
      QCOMPARE(s.allocated_bytes.peak, peakSeen);
      QCOMPARE(s.active_blocks.current, static_cast<std::int64_t>(live.size()));
      QCOMPARE(s.reserved_bytes.current, f.arena->outstanding);
      QCOMPARE(s.allocated_bytes.allocated - s.allocated_bytes.freed, s.allocated_bytes.current);
      QVERIFY(s.reserved_bytes.current >= s.allocated_bytes.current);
    }
    for (auto& [p, size] : live) f.alloc->free(p);
    QCOMPARE(f.alloc->stats().allocated_bytes.current, qint64(0));
    f.alloc->emptyCache();
    QCOMPARE(f.arena->outstanding, qint64(0));
    QCOMPARE(f.alloc->stats().segments.current, qint64(0));
  }

  void eventsAreCompleteAndOrdered() {
    Fixture f;
    MemoryEventRecorder recorder(Device(DeviceType::CUDA, 7));
    void* a = nullptr;
    {
      MemoryCategoryScope tag(MemoryCategory::Parameter);
      setMemoryStep(42);
      a = f.alloc->allocate(1000);
    }
    f.alloc->free(a);
    f.alloc->emptyCache();
    setMemoryStep(0);
    const auto events = recorder.drain();
    QStringList kinds;
    for (const auto& e : events) kinds << memoryEventKindName(e.kind);
    QCOMPARE(kinds, (QStringList{"segment_reserve", "alloc", "free", "segment_release", "empty_cache"}));
    QCOMPARE(events[0].size, qint64(2 * MiB));
    QCOMPARE(events[1].size, qint64(1024));
    QCOMPARE(events[1].category, MemoryCategory::Parameter);
    QCOMPARE(events[1].step, qint64(42));
    QCOMPARE(events[1].allocated_bytes, qint64(1024));
    QCOMPARE(events[2].address, events[1].address);
    QCOMPARE(events[3].reserved_bytes, qint64(0));
    for (std::size_t i = 1; i < events.size(); ++i) QVERIFY(events[i].time_s >= events[i - 1].time_s);
    QCOMPARE(recorder.pending(), std::size_t{0});
    // Another device's events do not reach a filtered recorder.
    Fixture other;
    other.alloc = std::make_unique<CachingAllocator>(std::make_unique<test::FakeArena>(MiB * 4), Device(DeviceType::CUDA, 3));
    other.alloc->allocate(10);
    QCOMPARE(recorder.pending(), std::size_t{0});
  }

  void aThousandForcedOomsLeakNothing() {
    Fixture f(32 * MiB);
    std::vector<void*> keep{f.alloc->allocate(5000), f.alloc->allocate(3 * MiB)};
    const MemoryStats before = f.alloc->stats();
    for (int i = 0; i < 1000; ++i) {
      try {
        f.alloc->allocate(100 * MiB);
        QFAIL("expected OutOfMemoryError");
      } catch (const OutOfMemoryError&) {
      }
    }
    const MemoryStats after = f.alloc->stats();
    QCOMPARE(after.allocated_bytes.current, before.allocated_bytes.current);
    QCOMPARE(after.active_blocks.current, before.active_blocks.current);
    QCOMPARE(after.num_ooms, qint64(1000));
    QCOMPARE(f.arena->outstanding, after.reserved_bytes.current);
    for (void* p : keep) f.alloc->free(p);
    f.alloc->emptyCache();
    QCOMPARE(f.arena->outstanding, qint64(0));
  }

  // The same over real cudaMalloc: a memory fraction makes the device small, 1,000 allocations over
  // it fail, and afterwards nothing is left allocated and the device still works.
  void aThousandForcedOomsOnTheGpuReturnToTheBaseline() {
    if (!test::cudaUsable()) QSKIP("no CUDA device");
    const Device gpu = test::cudaDevice();
    Tensor keep = ones({1024, 1024}, {.device = gpu});  // 4 MiB that stays allocated throughout
    const std::int64_t baseline = memory_allocated(gpu);
    const std::int64_t oomsBefore = memory_stats(gpu).num_ooms;
    const auto [freeBytes, total] = mem_get_info(gpu);
    Q_UNUSED(freeBytes);
    set_per_process_memory_fraction(static_cast<double>(256 * MiB) / static_cast<double>(total), gpu);
    for (int i = 0; i < 1000; ++i) {
      try {
        Tensor big = zeros({512, 1024, 1024}, {.device = gpu});  // 2 GiB, over the 256 MiB cap
        QFAIL("expected OutOfMemoryError");
      } catch (const OutOfMemoryError& e) {
        if (i == 0) QVERIFY2(std::string(e.what()).starts_with("CUDA out of memory. Tried to allocate 2.00 GiB."), e.what());
      }
    }
    set_per_process_memory_fraction(1.0, gpu);
    QCOMPARE(memory_allocated(gpu), baseline);
    QCOMPARE(memory_stats(gpu).num_ooms - oomsBefore, qint64(1000));
    QCOMPARE((keep + keep).sum().item(), 2.0 * 1024 * 1024);
  }

  void freeingAForeignPointerIsAnError() {
    Fixture f;
    int x = 0;
    QVERIFY_THROWS_EXCEPTION(Error, f.alloc->free(&x));
  }

  void summaryIsATable() {
    Fixture f;
    f.alloc->allocate(1000);
    const QString s = QString::fromStdString(f.alloc->summary());
    QVERIFY(s.contains("GPU Lab FAKE memory summary, device cuda:7"));
    QVERIFY(s.contains("| Allocated memory      |"));
    QVERIFY(s.contains("| Reserved memory       |   2.00 MiB |"));
  }

  // The out-of-memory lesson without a GPU: the CPU's emulated budget.
  void cpuBudgetEmulatesOutOfMemoryAndRecovers() {
    const std::int64_t baseline = memory_allocated(kCPU);
    set_cpu_memory_budget(memory_reserved(kCPU) + 16 * static_cast<std::int64_t>(MiB));
    const auto [freeB, totalB] = mem_get_info(kCPU);
    QCOMPARE(totalB, cpu_memory_budget());
    QVERIFY(freeB <= 16 * static_cast<std::int64_t>(MiB));
    try {
      Tensor big = zeros({64, 1024, 1024});  // 256 MiB
      QFAIL("expected OutOfMemoryError");
    } catch (const OutOfMemoryError& e) {
      QVERIFY2(std::string(e.what()).starts_with("CPU out of memory (emulated: GPU Lab's memory budget for CPU). Tried to allocate 256.00 MiB."), e.what());
    }
    QCOMPARE(memory_allocated(kCPU), baseline);
    Tensor fits = ones({1024, 1024});  // 4 MiB: the engine goes on working
    QCOMPARE(fits.sum().item(), 1024.0 * 1024.0);
    set_cpu_memory_budget(0);
    QVERIFY(memory_stats(kCPU).num_ooms >= 1);
  }

  // After the second step a training loop only reuses cached blocks: no new segments, no system calls.
  // The CPU row runs over the host allocator; the CUDA row over real cudaMalloc.
  void steadyStateTrainingMakesNoRawAllocations_data() {
    QTest::addColumn<QString>("device");
    QTest::newRow("cpu") << "cpu";
    QTest::newRow("cuda") << "cuda:0";
  }
  void steadyStateTrainingMakesNoRawAllocations() {
    QFETCH(QString, device);
    if (device.startsWith("cuda") && !test::cudaUsable()) QSKIP("no CUDA device");
    const Device dev = Device::parse(device.toStdString());
    // The training lab's loop (the regression MLP, Adam, batch 64, an evaluation pass after each epoch),
    // here in this process, where the allocator's counters are.
    const auto trainSet = data::makeRegressionDataset(4096, 16, 0.1, 0), testSet = data::makeRegressionDataset(256, 16, 0.1, 1);
    Generator gen(0);
    const auto model = std::make_shared<nn::Sequential>();
    model->push_back(std::make_shared<nn::Linear>(16, 64, true, gen));
    model->push_back(std::make_shared<nn::ReLU>());
    model->push_back(std::make_shared<nn::Linear>(64, 1, true, gen));
    model->to(dev);
    const auto optimizer = std::make_unique<optim::Adam>(model->parameters(), optim::AdamOptions{.lr = 1e-3});
    data::DataLoader trainLoader(trainSet, {.batch_size = 64, .shuffle = true, .seed = 0});
    data::DataLoader testLoader(testSet, {.batch_size = 1024});
    std::vector<std::int64_t> segmentsAt;  // total segments ever reserved, at each step
    for (int epoch = 0; epoch < 3; ++epoch) {
      model->train();
      for (const data::Batch& batch : trainLoader) {
        Tensor loss = mse_loss((*model)(batch.inputs.to(dev)), batch.targets.to(dev));
        optimizer->zero_grad();
        loss.backward();
        optimizer->step();
        (void)loss.item();
        segmentsAt.push_back(memory_stats(dev).segments.allocated);
      }
      model->eval();
      NoGradGuard noGrad;
      for (const data::Batch& batch : testLoader) (void)(*model)(batch.inputs.to(dev)).sum().item();
    }
    QCOMPARE(static_cast<int>(segmentsAt.size()), 3 * 64);
    const std::int64_t afterStep2 = segmentsAt[1];
    const std::int64_t epoch1End = segmentsAt[63];
    qInfo("segments reserved: %lld after step 2, %lld at the end of epoch 1, %lld at the end", static_cast<long long>(afterStep2),
          static_cast<long long>(epoch1End), static_cast<long long>(segmentsAt.back()));
    QCOMPARE(epoch1End, afterStep2);
    // Epoch 2 onwards, after the first evaluation pass has also been cached:
    QCOMPARE(segmentsAt.back(), segmentsAt[64]);
  }

  // Issue 8, defect 5: without an emulated budget the CPU still has one, derived from the memory the
  // system reports available, so a request the machine cannot hold raises OutOfMemoryError (Linux
  // would otherwise hand out the address space and run out of memory while the pages are touched).
  void cpuDefaultBudgetRefusesWhatTheSystemCannotHold() {
    const std::int64_t page = sysconf(_SC_PAGESIZE);
    const std::int64_t physical = static_cast<std::int64_t>(sysconf(_SC_PHYS_PAGES)) * page;
    const std::int64_t availableNow = static_cast<std::int64_t>(sysconf(_SC_AVPHYS_PAGES)) * page;
    const auto [freeBytes, budget] = mem_get_info(kCPU);
    qInfo("CPU default budget %s (%s free of it), physical memory %s", formatBytes(budget).c_str(), formatBytes(freeBytes).c_str(),
          formatBytes(physical).c_str());
    QVERIFY(budget > 0);
    QVERIFY(budget < physical);
    QVERIFY(freeBytes >= 0 && freeBytes <= budget);
    QVERIFY2(QString::fromStdString(memory_summary(kCPU)).contains("default memory budget: " + QString::fromStdString(formatBytes(budget))),
             memory_summary(kCPU).c_str());

    const std::int64_t baseline = memory_allocated(kCPU), oomsBefore = memory_stats(kCPU).num_ooms;
    const std::int64_t request = std::max(budget, std::max(availableNow, physical)) + (1LL << 30);  // bytes
    for (int i = 0; i < 3; ++i) {
      try {
        Tensor t = Tensor::empty({request / 4});
        QFAIL("expected OutOfMemoryError");
      } catch (const OutOfMemoryError& e) {
        QVERIFY2(std::string(e.what()).starts_with("CPU out of memory. Tried to allocate "), e.what());
      }
    }
    QCOMPARE(memory_allocated(kCPU), baseline);
    QCOMPARE(memory_stats(kCPU).num_ooms - oomsBefore, qint64(3));
    // Requests each smaller than the machine that add up to more than the budget (what
    // `train --hidden 65536,65536` makes): the one that would pass the budget fails.
    {
      std::vector<Tensor> held;
      bool refused = false;
      const std::int64_t chunk = budget / 3 + static_cast<std::int64_t>(MiB);  // bytes
      for (int i = 0; i < 6 && !refused; ++i) {
        try {
          held.push_back(Tensor::empty({chunk / 4}));
        } catch (const OutOfMemoryError&) {
          refused = true;
        }
      }
      QVERIFY(refused);
      QCOMPARE(static_cast<int>(held.size()), 2);
      QVERIFY(memory_reserved(kCPU) <= budget);
    }
    empty_cache(kCPU);
    Tensor fits = ones({1024, 1024});  // the engine goes on working
    QCOMPARE(fits.sum().item(), 1024.0 * 1024.0);

    // The OOM lesson's emulated budget still applies on top, and 0 restores the default budget.
    set_cpu_memory_budget(memory_reserved(kCPU) + 16 * static_cast<std::int64_t>(MiB));
    QCOMPARE(mem_get_info(kCPU).second, cpu_memory_budget());
    QVERIFY_THROWS_EXCEPTION(OutOfMemoryError, zeros({64, 1024, 1024}));
    set_cpu_memory_budget(0);
    QCOMPARE(mem_get_info(kCPU).second, budget);
    QVERIFY_THROWS_EXCEPTION(OutOfMemoryError, Tensor::empty({request / 4}));
    QCOMPARE(memory_allocated(kCPU), baseline + static_cast<std::int64_t>(4 * MiB));
  }
};

QTEST_GUILESS_MAIN(TestMemory)
#include "test_memory.moc"
