// One runtime per GPU (engine/runtime/device_runtime.h): runtimeFor maps every device to its runtime,
// and what the engine does on a GPU -- allocate, copy, stream, record events, capture graphs -- goes
// through it. ctest runs this suite with GPULAB_EMULATED_GPU=1, so the emulated GPU is there on every
// machine (cuda:N after the N real GPUs); the real GPUs' runtimes are checked where there are some.
#include <QtTest>

#include <string>

#include "engine/core/errors.h"
#include "engine/runtime/device_memory.h"
#include "engine/runtime/cuda_graph.h"
#include "engine/runtime/cuda_runtime.h"
#include "engine/runtime/device_runtime.h"
#include "engine/runtime/emulated_gpu.h"
#include "engine/runtime/execution_context.h"
#include "engine/runtime/stream.h"
#include "test_util.h"

using namespace gpulab;
using test::textOf;

namespace {

Device emulated() {
  const std::optional<Device> d = cuda::emulatedDevice();
  if (!d) throw std::runtime_error("test_device_runtime runs with GPULAB_EMULATED_GPU=1");
  return *d;
}

}  // namespace

class TestDeviceRuntime : public QObject {
  Q_OBJECT

 private slots:
  // Every GPU has one runtime, in device order -- the real GPUs first, then the emulated one -- and
  // the CPU and devices that are not there have none, with the reason.
  void everyGpuHasOneRuntime() {
    const std::vector<cuda::DeviceRuntime*> gpus = cuda::gpuRuntimes();
    QCOMPARE(static_cast<int>(gpus.size()), cuda::deviceCount() + 1);
    for (std::size_t i = 0; i < gpus.size(); ++i) {
      QCOMPARE(gpus[i]->device(), Device(DeviceType::CUDA, static_cast<int>(i)));
      QCOMPARE(&cuda::runtimeFor(gpus[i]->device()), gpus[i]);
      QCOMPARE(gpus[i]->isRealGpu(), static_cast<int>(i) < cuda::deviceCount());
      QCOMPARE(&gpus[i]->allocator(), &allocatorFor(gpus[i]->device()));  // the one allocator of the device
    }
    QCOMPARE(gpus.back()->device(), emulated());
    QVERIFY(cuda::findRuntime(kCPU) == nullptr);
    const Device missing(DeviceType::CUDA, emulated().index() + 1);
    QVERIFY(cuda::findRuntime(missing) == nullptr);
    QVERIFY_THROWS_EXCEPTION(Error, cuda::runtimeFor(missing));
    const std::string why = textOf([&] { cuda::runtimeFor(missing); });
    QVERIFY2(why.find("invalid device ordinal") != std::string::npos, why.c_str());
    QVERIFY2(why.find("(the emulated GPU is " + emulated().str() + ")") != std::string::npos, why.c_str());
  }

  // The questions a lesson asks: the emulated GPU is no GPU hardware, says so in its label, and
  // measures how long its streams ran kernels; the CPU is neither kind of GPU and measures nothing.
  void lessonsAskTheRuntime() {
    const Device e = emulated();
    QVERIFY(!cuda::isRealGpu(e));
    QVERIFY(cuda::isEmulatedGpu(e));
    QVERIFY(!cuda::isRealGpu(kCPU));
    QVERIFY(!cuda::isEmulatedGpu(kCPU));
    QVERIFY(!cuda::busySeconds(kCPU));
    QCOMPARE(cuda::deviceLabel(e), e.str() + " (" + cuda::kEmulatedGpuPhrase + ")");
    QCOMPARE(cuda::runtimeFor(e).totalMemory(), cuda::emulatedGpuBudget());
    QVERIFY(memory_summary(e).find(cuda::kEmulatedGpuPhrase) != std::string::npos);

    const std::optional<double> before = cuda::busySeconds(e);
    QVERIFY(before.has_value());
    Tensor a = randn({256, 256}, defaultGenerator(), {.device = e});
    for (int i = 0; i < 20; ++i) a = matmul(a, a).tanh();
    cuda::synchronize(e.index());
    QVERIFY2(*cuda::busySeconds(e) > *before, "the emulated GPU's streams ran kernels, and its busy time did not grow");
  }

  // Copies go through the runtime of their GPU side, in both directions and within the device.
  void copiesGoThroughTheRuntime() {
    const Device e = emulated();
    const Tensor x = arange(0.0, 1000.0, 1.0, {.dtype = kFloat32});
    const Tensor onGpu = x.to(e);
    const Tensor twice = onGpu.clone();
    QCOMPARE(twice.device(), e);
    QCOMPARE(twice.to(kCPU).toVector<float>(), x.toVector<float>());
    // Pinned memory is the first GPU's kind, and a non_blocking copy from it lands once synchronized.
    QVERIFY(cuda::pinnedMemoryAvailable());
    const Tensor pinned = x.pin_memory();
    const Tensor async = pinned.to(e, /*non_blocking=*/true);
    cuda::synchronize(e.index());
    QCOMPARE(async.to(kCPU).toVector<float>(), x.toVector<float>());
  }

  // An event is made by the runtime of the device it is first recorded on, and stays that device's.
  void eventsBelongToTheirDevice() {
    const Device e = emulated();
    cuda::Event start(true), stop(true);
    QVERIFY(start.query());  // never recorded
    const cuda::Stream s = cuda::Stream::create(e);
    start.record(s);
    Tensor a = randn({128, 128}, defaultGenerator(), {.device = e});
    {
      cuda::StreamGuard on(s);
      for (int i = 0; i < 5; ++i) a = matmul(a, a).tanh();
    }
    stop.record(s);
    stop.synchronize();
    QVERIFY(stop.query());
    QVERIFY(start.elapsed_time(stop) >= 0.0);
    // Waiting on it from the default stream is queued there; the result is what the side stream made.
    cuda::current_stream(e).wait_event(stop);
    const Tensor b = a.to(kCPU);
    QCOMPARE(b.size(0), 128);
    const std::string why = textOf([&] {
      cuda::Event untimed;
      untimed.record(s);
      untimed.elapsed_time(stop);
    });
    QVERIFY2(why.find("enable_timing=True") != std::string::npos, why.c_str());
  }

  // A graph is captured by the device's runtime and replayed through it.
  void graphsAreCapturedByTheRuntime() {
    const Device e = emulated();
    CudaDeviceGuard on(e.index());  // torch.cuda.set_device: graphs capture the current CUDA device
    Tensor x = ones({4}, {.device = e});
    Tensor y;
    cuda::CUDAGraph g;
    cuda::graph(g, [&] { y = x * 2.0 + 1.0; });
    QVERIFY(g.captured());
    QVERIFY(g.num_nodes() >= 2);
    x.copy_(full({4}, 3.0, {.device = e}));
    g.replay();
    cuda::synchronize(e.index());
    QCOMPARE(y.to(kCPU).toVector<float>(), std::vector<float>(4, 7.0f));
  }
};

QTEST_GUILESS_MAIN(TestDeviceRuntime)
#include "test_device_runtime.moc"
