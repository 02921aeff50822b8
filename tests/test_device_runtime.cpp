// One runtime per GPU (engine/runtime/device_runtime.h): runtimeFor maps every device to its runtime,
// and what the engine does on a GPU -- allocate, copy, stream, record events, capture graphs -- goes
// through it. ctest runs this suite with GPULAB_EMULATED_GPU=1, so the emulated GPU is there on every
// machine (cuda:N after the N real GPUs); the real GPUs' runtimes are checked where there are some.
// The real GPUs' runtimes come from the CUDA module, and the loader refuses one from another build of
// GPU Lab (tests/foreign_cuda_module.cpp), naming both builds.
#include <dlfcn.h>

#include <QProcess>
#include <QtTest>

#include <string>

#include "engine/core/errors.h"
#include "engine/core/version.h"
#include "engine/runtime/device_memory.h"
#include "engine/runtime/cuda_graph.h"
#include "engine/runtime/cuda_module.h"
#include "engine/runtime/cuda_runtime.h"
#include "engine/runtime/device_runtime.h"
#include "engine/runtime/emulated_gpu.h"
#include "engine/runtime/execution_context.h"
#include "engine/runtime/stream.h"
#include "test_util.h"
// The engine's id for its CUDA module, generated from its headers (cmake/cuda_module_build_id.cmake).
#include "gpulab/cuda_module_build_id.h"

using namespace gpulab;
using test::textOf;

namespace {

Device emulated() {
  const std::optional<Device> d = cuda::emulatedDevice();
  if (!d) throw std::runtime_error("test_device_runtime runs with GPULAB_EMULATED_GPU=1");
  return *d;
}

// The CUDA module from another build of GPU Lab (tests/foreign_cuda_module.cpp) and the id it says it
// was built with, asked the way the loader asks.
constexpr const char* kForeignModule = GPULAB_FOREIGN_CUDA_MODULE;
std::string foreignBuildId() {
  void* handle = dlopen(kForeignModule, RTLD_NOW | RTLD_LOCAL);
  if (!handle) throw std::runtime_error(std::string("cannot open ") + kForeignModule + ": " + dlerror());
  using BuildId = const char* (*)();
  auto id = reinterpret_cast<BuildId>(dlsym(handle, "gpulab_cuda_module_build_id"));
  if (!id) throw std::runtime_error(std::string(kForeignModule) + " has no gpulab_cuda_module_build_id");
  return id();
}

// What the loader must say of it: both builds, by their ids.
void expectRefusalNamesBothBuilds(const std::string& why) {
  const std::string ours = cuda::kModuleBuildId, theirs = foreignBuildId();
  QVERIFY2(theirs != ours, theirs.c_str());
  QVERIFY2(why.find("GPU Lab's CUDA module " + std::string(kForeignModule) + " is from another build of GPU Lab") != std::string::npos,
           why.c_str());
  QVERIFY2(why.find("it was built as " + theirs + ", this engine expects " + ours) != std::string::npos, why.c_str());
  QVERIFY2(why.find("reinstall GPU Lab or rebuild both from one tree") != std::string::npos, why.c_str());
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

  // The CUDA module's build id is derived from the headers the engine and the module compile with
  // (Note [CUDA module build id], cmake/cuda_module_build_id.cmake): <version>/abi<n>/<16 hex digits>.
  void theModuleBuildIdIsDerived() {
    const QString ours = QString::fromLatin1(cuda::kModuleBuildId);
    const QRegularExpression shape(QString("^%1/abi%2/[0-9a-f]{16}$")
                                       .arg(QRegularExpression::escape(QString::fromLatin1(version())))
                                       .arg(cuda::kModuleAbiVersion));
    QVERIFY2(shape.match(ours).hasMatch(), qPrintable(ours));
  }

  // A module built from other headers is refused before anything of it is called but its build id, and
  // the reason names both builds: the loader's step on its own (cuda::loadModule), in every build.
  void aModuleFromAnotherBuildIsRefused() {
    const cuda::LoadedModule loaded = cuda::loadModule(kForeignModule);
    QVERIFY2(loaded.api == nullptr, "the loader accepted a CUDA module from another build");
    expectRefusalNamesBothBuilds(loaded.reason);
  }
  // A module from before the id was derived (an older gpulab-cuda package) names no build: it is
  // refused as well -- without a call to its entry point, which would hand its table to an engine whose
  // id it was told -- and the reason says so.
  void aModuleThatNamesNoBuildIsRefused() {
    const cuda::LoadedModule loaded = cuda::loadModule(GPULAB_OLD_CUDA_MODULE);
    QVERIFY2(loaded.api == nullptr, "the loader accepted a CUDA module that does not say which build it is");
    const std::string expected = std::string("GPU Lab's CUDA module ") + GPULAB_OLD_CUDA_MODULE +
                                 " is from another build of GPU Lab (it does not say which build it is, this engine expects " +
                                 cuda::kModuleBuildId + "): reinstall GPU Lab or rebuild both from one tree";
    QCOMPARE(loaded.reason, expected);
  }

  // The same module where the engine looks for its own ($GPULAB_CUDA_MODULE, in a child process: the
  // engine loads its module once per process): no GPU, the reason names both builds, and the engine
  // runs on the CPU.
  void theEngineRefusesItsModuleFromAnotherBuild() {
    if (!cuda::compiledWithCuda()) QSKIP("a CPU-only build loads no CUDA module (aModuleFromAnotherBuildIsRefused covers the loader)");
    QProcessEnvironment env = QProcessEnvironment::systemEnvironment();
    env.insert("GPULAB_CUDA_MODULE", QString::fromUtf8(kForeignModule));
    env.insert("GPULAB_EMULATED_GPU", "0");  // so that cuda:0 is the module's to refuse
    env.insert("GPULAB_TEST_FOREIGN_MODULE", "1");
    QProcess child;
    child.setProcessEnvironment(env);
    child.setProcessChannelMode(QProcess::MergedChannels);
    child.start(QCoreApplication::applicationFilePath(), {"childMeetsAModuleFromAnotherBuild"});
    QVERIFY(child.waitForFinished(60000));
    const QString out = QString::fromUtf8(child.readAll());
    QVERIFY2(child.exitStatus() == QProcess::NormalExit && child.exitCode() == 0, qPrintable(out));
    QVERIFY2(out.contains("PASS   : TestDeviceRuntime::childMeetsAModuleFromAnotherBuild()"), qPrintable(out));
  }
  // Runs only as the child of theEngineRefusesItsModuleFromAnotherBuild.
  void childMeetsAModuleFromAnotherBuild() {
    if (qEnvironmentVariableIsEmpty("GPULAB_TEST_FOREIGN_MODULE")) QSKIP("run by theEngineRefusesItsModuleFromAnotherBuild in a child process");
    QVERIFY(!cuda::isAvailable());
    QCOMPARE(cuda::deviceCount(), 0);
    expectRefusalNamesBothBuilds(cuda::moduleAvailability().reason);
    const std::string why = textOf([] { zeros({2}).to(Device(DeviceType::CUDA, 0)); });
    QVERIFY2(why.find("no usable GPU: GPU Lab's CUDA module") != std::string::npos, why.c_str());
    QVERIFY2(why.find("is from another build of GPU Lab") != std::string::npos, why.c_str());
    QCOMPARE(ones({3}).sum().item(), 3.0);
  }
};

QTEST_GUILESS_MAIN(TestDeviceRuntime)
#include "test_device_runtime.moc"
