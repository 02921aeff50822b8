// Streams and events (engine/runtime/stream.h) on the emulated GPU, whose streams are real queues run
// by threads of their own: ops return before their kernels ran, the host waits only where CUDA makes
// it wait, work on two streams is ordered only by wait_stream/wait_event, record_stream keeps a block
// from reuse, and a kernel's error is reported at the next synchronisation. ctest runs it with
// GPULAB_EMULATED_GPU=1, so it runs on GPU machines too.
#include <chrono>
#include <optional>

#include "engine/core/errors.h"
#include "engine/memory/caching_allocator.h"
#include "engine/runtime/device_memory.h"
#include "engine/ops/ops.h"
#include "engine/runtime/cuda_runtime.h"
#include "engine/runtime/emulated_gpu.h"
#include "engine/runtime/stream.h"
#include "test_util.h"

using namespace gpulab;
using test::textOf;

namespace {

Device emulatedGpu() { return *cuda::emulatedDevice(); }

// Work that keeps a stream busy for a good while (tens of milliseconds at least on any CPU): a chain
// of n x n products of ones, each reading the last, so none can start before its input is there.
Tensor busyWork(const Tensor& start, int products) {
  Tensor x = start;
  for (int i = 0; i < products; ++i) x = matmul(x, start) * (1.0 / static_cast<double>(start.size(0)));
  return x;
}

// The two GPUs the stream tests run on where they exist, as the rows of a data-driven test: the
// emulated GPU (512 x 512 products keep it busy) and a real one (4096 x 4096: a few ms each on an H100).
void addGpuRows() {
  QTest::addColumn<bool>("real");
  QTest::newRow("emulated GPU") << false;
  QTest::newRow("GPU") << true;
}
struct StreamsGpu {
  Device device;
  std::int64_t n;  // the busy work's matrix size
};
std::optional<StreamsGpu> streamsGpu(bool real) {
  if (real) return cuda::isAvailable() ? std::optional<StreamsGpu>({Device(DeviceType::CUDA, 0), 4096}) : std::nullopt;
  return StreamsGpu{emulatedGpu(), 512};
}

}  // namespace

class TestStreams : public QObject {
  Q_OBJECT

 private slots:
  // Every test but the real GPU's needs the emulated GPU. Beside a real GPU it is off unless
  // GPULAB_EMULATED_GPU=1 (ctest sets it): run alone there, under compute-sanitizer, the GPU's cases
  // must still run (they were all skipped here on an H200, 2026-11-26).
  void init() {
    const bool realGpuCase = QByteArray(QTest::currentDataTag()) == "GPU" ||
                             QByteArray(QTest::currentTestFunction()) == "eventsOnARealGpuDoNotMakeTheHostWait";
    if (!realGpuCase && !cuda::emulatedDevice()) QSKIP("the emulated GPU is off (GPULAB_EMULATED_GPU=0)");
  }

  void opsReturnBeforeTheirKernelsRan() {
    const Device gpu = emulatedGpu();
    const Tensor a = ones({512, 512}, {.device = gpu});
    cuda::synchronize(gpu.index());
    const cuda::Stream stream = cuda::current_stream(gpu);
    QVERIFY(stream.query());  // nothing queued
    const auto t0 = std::chrono::steady_clock::now();
    const Tensor r = busyWork(a, 40);
    const double queueing = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    QVERIFY2(!stream.query(), "40 products of 512 x 512 ran before the host had queued them");
    const double value = r.sum().item();  // .item() waits for the stream
    const double total = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    QVERIFY(stream.query());
    QCOMPARE(value, 512.0 * 512.0);  // every product of ones / 512 is ones again
    QVERIFY2(queueing < total / 2, qPrintable(QString("queueing %1 s of %2 s").arg(queueing).arg(total)));
  }

  void eventsTimeTheStreamsWork() {
    const Device gpu = emulatedGpu();
    const Tensor a = ones({512, 512}, {.device = gpu});
    // On the emulated GPU's stream by name: record() alone takes the current device's, which is a real
    // GPU where there is one (the emulated GPU comes after the real ones).
    const cuda::Stream stream = cuda::current_stream(gpu);
    cuda::Event start(true), end(true);
    start.record(stream);
    const Tensor r = busyWork(a, 20);
    end.record(stream);
    QVERIFY(!end.query());
    // Not reached yet: elapsed_time refuses, as cudaEventElapsedTime says cudaErrorNotReady.
    QVERIFY(textOf([&] { (void)start.elapsed_time(end); }).find("not ready") != std::string::npos);
    end.synchronize();
    QVERIFY(end.query());
    QVERIFY(start.elapsed_time(end) > 0.0);
    cuda::Event untimed;
    untimed.record(stream);
    untimed.synchronize();
    QVERIFY(textOf([&] { (void)start.elapsed_time(untimed); }).find("enable_timing") != std::string::npos);
  }

  // On a real GPU an event is a CUDA event on the compute stream: recording one must not make the host
  // wait (it used to, which hid exactly the asynchrony the lessons measure), and elapsed_time is the
  // GPU's own time between the two.
  void eventsOnARealGpuDoNotMakeTheHostWait() {
    if (!test::realGpu()) QSKIP("no usable GPU");
    const Device gpu(DeviceType::CUDA, 0);
    const Tensor a = ones({2048, 2048}, {.device = gpu}) * (1.0 / 2048.0);
    Tensor x = ones({2048, 2048}, {.device = gpu});
    cuda::synchronize(0);
    const cuda::Stream stream = cuda::current_stream(gpu);
    cuda::Event start(true), end(true);
    const auto t0 = std::chrono::steady_clock::now();
    start.record(stream);
    for (int i = 0; i < 200; ++i) x = matmul(x, a);  // ones again (1/2048 is exact), 200 dependent products
    end.record(stream);
    QVERIFY2(!end.query(), "200 products of 2048 x 2048 had run before the host recorded the end event");
    QVERIFY(textOf([&] { (void)start.elapsed_time(end); }).find("not ready") != std::string::npos);
    end.synchronize();
    const double wallMs = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
    QVERIFY(end.query());
    const double gpuMs = start.elapsed_time(end);
    QVERIFY2(gpuMs > 0.0 && gpuMs <= wallMs, qPrintable(QString("GPU %1 ms, wall %2 ms").arg(gpuMs).arg(wallMs)));
    QCOMPARE(x.sum().item(), 2048.0 * 2048.0);
  }

  void wait_streamOrdersTwoStreams_data() { addGpuRows(); }
  void wait_streamOrdersTwoStreams() {
    QFETCH(bool, real);
    const auto on = streamsGpu(real);
    if (!on) QSKIP("no usable GPU");
    const auto [gpu, n] = *on;
    const cuda::Stream side = cuda::Stream::create(gpu);
    QVERIFY(side.id() != 0);
    QVERIFY(side != cuda::current_stream(gpu));
    const Tensor a = ones({n, n}, {.device = gpu});
    const Tensor produced = busyWork(a, 20);  // on the default stream
    Tensor doubled;
    {
      cuda::StreamGuard guard(side);
      QCOMPARE(cuda::current_stream(gpu), side);
      side.wait_stream(cuda::default_stream(gpu));  // without it, the side stream could read `produced` early
      doubled = produced * 2.0;
      produced.record_stream(side);
    }
    QCOMPARE(cuda::current_stream(gpu).id(), std::uintptr_t{0});  // the guard restored the default
    side.synchronize();
    QVERIFY(side.query());
    QCOMPARE(doubled.sum().item(), 2.0 * static_cast<double>(n * n));
  }

  // A pinned batch freed while its non_blocking copy is still queued is not handed out again until the
  // copy ran -- and an allocation meanwhile takes another block instead of waiting for the device (a
  // DataLoader's workers allocate the next batches while the GPU still works through the last ones).
  void aPinnedBlockWaitsForItsCopyWithoutMakingAllocationsWait() {
    if (cuda::isAvailable()) QSKIP("beside a real GPU, pinned memory is the real GPU's (cuda_runtime_gpu.cpp guards its reuse)");
    const Device gpu = emulatedGpu();
    const Tensor a = ones({512, 512}, {.device = gpu});
    cuda::synchronize(gpu.index());
    void* first = nullptr;
    Tensor onGpu;
    {
      const Tensor batch = ones({256, 256}).pin_memory();
      QVERIFY(batch.is_pinned());
      first = batch.data_ptr();
      const Tensor busy = busyWork(a, 30);               // the stream is busy for a while...
      onGpu = batch.slice(0, 0, 128).to(gpu, /*non_blocking=*/true);  // ...and the copy (of a view) waits behind it
    }  // the batch is freed here, its copy still queued
    const auto t0 = std::chrono::steady_clock::now();
    const Tensor next = Tensor::empty({256, 256}, kFloat32, kCPU, /*pinned=*/true);
    const double allocating = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    QVERIFY2(!cuda::current_stream(gpu).query(), "the queued work ran before the test could allocate: make busyWork longer");
    QVERIFY2(next.data_ptr() != first, "the block was handed out again before the copy that reads it ran");
    QVERIFY2(allocating < 0.01, qPrintable(QString("allocating waited %1 s for the device").arg(allocating)));
    cuda::synchronize(gpu.index());
    QCOMPARE(onGpu.sum().item(), 128.0 * 256.0);
    const Tensor again = Tensor::empty({256, 256}, kFloat32, kCPU, /*pinned=*/true);
    QCOMPARE(again.data_ptr(), first);  // once the copy ran, the block is back in the pool
  }

  void aNonBlockingCopyToTheHostIsReadOnlyAfterSynchronize_data() { addGpuRows(); }
  void aNonBlockingCopyToTheHostIsReadOnlyAfterSynchronize() {
    QFETCH(bool, real);
    const auto on = streamsGpu(real);
    if (!on) QSKIP("no usable GPU");
    const auto [gpu, n] = *on;
    const Tensor a = ones({n, n}, {.device = gpu});
    const Tensor r = busyWork(a, 20);
    const Tensor host = r.to(kCPU, /*non_blocking=*/true);
    QVERIFY(host.is_pinned());  // as PyTorch: a non_blocking copy to the CPU lands in pinned memory
    // The copy is queued behind the products: it returns at once, and reading now would be a race. (Found
    // on an H200: the real GPU's copy to the host waited for its stream whatever non_blocking said.)
    // Beside a real GPU, pinned memory is the real GPU's, whose reuse its events guard: the emulated GPU
    // copies into it synchronously there (emulatedCopy), so on the emulated GPU the race is open only
    // without one.
    if (real || !cuda::isAvailable()) {
      QVERIFY2(!cuda::current_stream(gpu).query(),
               "the copy (and the products before it) already ran: reading now would be a race");
    }
    cuda::synchronize(gpu.index());
    QCOMPARE(host.sum().item(), static_cast<double>(n * n));
    // The blocking copy waits by itself.
    QCOMPARE(busyWork(a, 5).to(kCPU).sum().item(), static_cast<double>(n * n));
  }

  void record_streamKeepsABlockFromReuseUntilTheOtherStreamPassedIt_data() { addGpuRows(); }
  void record_streamKeepsABlockFromReuseUntilTheOtherStreamPassedIt() {
    QFETCH(bool, real);
    const auto on = streamsGpu(real);
    if (!on) QSKIP("no usable GPU");
    const auto [gpu, n] = *on;
    CachingAllocator& allocator = allocatorFor(gpu);
    const cuda::Stream side = cuda::Stream::create(gpu);
    const Tensor a = ones({n, n}, {.device = gpu});
    cuda::synchronize(gpu.index());
    void* address = nullptr;
    {
      Tensor shared = a * 3.0;  // a block of the default stream
      address = shared.data_ptr();
      cuda::StreamGuard guard(side);
      Tensor keepBusy = busyWork(a, 20);  // the side stream is busy for a while...
      side.wait_stream(cuda::default_stream(gpu));  // (`shared` is written on the default stream)
      Tensor use = shared + 1.0;          // ... before it reads `shared`
      shared.record_stream(side);
    }
    // Freed on the host while the side stream has not read it yet: counted as free, not reusable.
    QVERIFY(allocator.pendingBytes() > 0);
    const Tensor next = Tensor::empty({n, n}, kFloat32, gpu);
    QVERIFY(next.data_ptr() != address);
    side.synchronize();
    const Tensor after = Tensor::empty({n, n}, kFloat32, gpu);
    QCOMPARE(allocator.pendingBytes(), std::int64_t{0});
    QCOMPARE(after.data_ptr(), address);  // the side stream has passed it: the block is free again

    // Without record_stream the block would have been handed out at once (the rule that keeps
    // same-stream reuse safe, and cross-stream reuse unsafe).
    void* again = nullptr;
    {
      Tensor shared = a * 3.0;
      again = shared.data_ptr();
    }
    QCOMPARE(Tensor::empty({n, n}, kFloat32, gpu).data_ptr(), again);
    cuda::synchronize(gpu.index());
  }

  // An allocation that does not fit first waits for the streams that blocks freed under record_stream
  // wait for, and counts those blocks as free, before it gives up (as PyTorch's retry does): without
  // that, code that uses a second stream ran out of memory that was only waiting to be released.
  void anAllocationThatDoesNotFitWaitsForBlocksPendingOnAnotherStream() {
    const Device gpu = emulatedGpu();
    CachingAllocator& allocator = allocatorFor(gpu);
    const std::int64_t limit = allocator.limitBytes();
    const cuda::Stream side = cuda::Stream::create(gpu);
    const Tensor a = ones({512, 512}, {.device = gpu});
    cuda::synchronize(gpu.index());
    allocator.emptyCache();
    constexpr std::int64_t kRows = 12 * 1024;  // 12 Mi floats: 48 MiB
    allocator.setLimitBytes(allocator.stats().reserved_bytes.current + 80 * 1024 * 1024);
    {
      const Tensor shared = zeros({kRows, 1024}, {.device = gpu});
      cuda::StreamGuard on(side);
      const Tensor keepBusy = busyWork(a, 20);
      side.wait_stream(cuda::default_stream(gpu));
      const Tensor use = shared.sum();
      shared.record_stream(side);
    }
    QVERIFY(allocator.pendingBytes() > 0);  // freed, waiting for the side stream
    QVERIFY2(!side.query(), "the side stream finished before the test could allocate: make busyWork longer");
    try {
      const Tensor next = zeros({kRows, 1024}, {.device = gpu});  // 48 MiB more does not fit beside the pending 48 MiB
      QCOMPARE(allocator.pendingBytes(), std::int64_t{0});
    } catch (const OutOfMemoryError& e) {
      allocator.setLimitBytes(limit);
      QFAIL(e.what());
    }
    allocator.setLimitBytes(limit);
    cuda::synchronize(gpu.index());
  }

  void aKernelsErrorIsReportedAtTheNextSynchronisation() {
    const Device gpu = emulatedGpu();
    const Tensor logp = log_softmax(zeros({4, 3}, {.device = gpu}), 1);
    const Tensor labels = tensor(std::vector<std::int64_t>{0, 1, 7, 2}, {4}).to(gpu);
    Tensor loss;
    QVERIFY(textOf([&] { loss = nll_loss(logp, labels); }).empty());  // queued: no error yet, as on CUDA
    const std::string error = textOf([&] { cuda::synchronize(gpu.index()); });
    QVERIFY2(error.find("Target 7 is out of bounds") != std::string::npos, error.c_str());
    // Reported once; the device goes on working.
    cuda::synchronize(gpu.index());
    QCOMPARE(ones({3}, {.device = gpu}).sum().item(), 3.0);
  }

  void streamsBelongToCudaDevices() {
    QVERIFY(textOf([] { (void)cuda::Stream::create(kCPU); }).find("streams belong to CUDA devices") != std::string::npos);
    QVERIFY(cuda::current_stream(kCPU).query());
    QVERIFY(textOf([] { ones({2}).record_stream(cuda::default_stream(emulatedGpu())); }).find("record_stream") !=
            std::string::npos);
  }
};

QTEST_GUILESS_MAIN(TestStreams)
#include "test_streams.moc"
