// The emulated GPU (engine/runtime/emulated_gpu.h): a real second device on a machine without a GPU.
// The same-device rule, .to(device), out-of-memory, the memory fraction, allocated vs reserved,
// empty_cache and memory events are the engine's real behaviour on it, and its results are the CPU
// kernels' -- equal to the CPU's bit for bit. ctest runs this suite with GPULAB_EMULATED_GPU=1, so it
// runs on GPU machines too (the emulated GPU is then cuda:N after the N real GPUs); the switch itself
// is tested in child processes with the variable set each way.
#include <QProcess>

#include <cstring>
#include <functional>
#include <thread>

#include "engine/core/errors.h"
#include "engine/runtime/device_memory.h"
#include "engine/nn/layers.h"
#include "engine/optim/optimizer.h"
#include "engine/runtime/cuda_runtime.h"
#include "engine/runtime/emulated_gpu.h"
#include "test_util.h"

using namespace gpulab;
using test::textOf;

namespace {

constexpr std::int64_t MiB = std::int64_t{1} << 20;

// The bits of every element, so -0.0 vs 0.0 or a last-ulp difference fails.
std::vector<std::uint32_t> bitsOf(const Tensor& t) {
  const std::vector<float> v = t.toVector<float>();
  std::vector<std::uint32_t> bits(v.size());
  if (!v.empty()) std::memcpy(bits.data(), v.data(), v.size() * sizeof(float));
  return bits;
}

// One op of the parity table: the same inputs (made on the CPU), the op run on one device.
struct OpCase {
  const char* name;
  std::function<Tensor(const Tensor& x, const Tensor& y)> run;  // x (4, 5), y (4, 5)
};
const std::vector<OpCase>& opCases() {
  static const std::vector<OpCase> cases = {
      {"add", [](const Tensor& x, const Tensor& y) { return x + y; }},
      {"mul broadcast", [](const Tensor& x, const Tensor& y) { return x * y.slice(0, 0, 1); }},
      {"matmul", [](const Tensor& x, const Tensor& y) { return matmul(x, y.t()); }},
      {"relu", [](const Tensor& x, const Tensor&) { return x.relu(); }},
      {"tanh", [](const Tensor& x, const Tensor&) { return x.tanh(); }},
      {"softmax", [](const Tensor& x, const Tensor&) { return x.softmax(1); }},
      {"sum dim", [](const Tensor& x, const Tensor&) { return x.sum(0); }},
      {"mean", [](const Tensor& x, const Tensor&) { return x.mean(); }},
      {"transposed contiguous", [](const Tensor& x, const Tensor&) { return x.t().contiguous(); }},
      {"mse_loss", [](const Tensor& x, const Tensor& y) { return mse_loss(x, y); }},
      {"cross_entropy", [](const Tensor& x, const Tensor&) {
         return cross_entropy(x, tensor(std::vector<std::int64_t>{0, 4, 2, 1}, {4}, {.dtype = kInt64, .device = x.device()}));
       }},
  };
  return cases;
}

}  // namespace

// The emulated device as `name`, or a skip when it is off in this process (ctest turns it on).
#define REQUIRE_EMULATED(name)                                                          \
  const std::optional<Device> name##_optional_ = cuda::emulatedDevice();               \
  if (!name##_optional_) QSKIP("the emulated GPU is off (GPULAB_EMULATED_GPU=1 turns it on)"); \
  const Device name = *name##_optional_

class TestEmulatedGpu : public QObject {
  Q_OBJECT

 private slots:
  // ---- The switch ------------------------------------------------------------------------------

  void switchValuesAreParsed_data() {
    QTest::addColumn<QByteArray>("value");
    QTest::addColumn<int>("expected");  // -1: automatic, 0: off, 1: on
    QTest::newRow("unset") << QByteArray() << -1;
    QTest::newRow("empty") << QByteArray("") << -1;
    for (const char* on : {"1", "on", "ON", "true", "yes"}) QTest::newRow(on) << QByteArray(on) << 1;
    for (const char* off : {"0", "off", "Off", "false", "no"}) QTest::newRow(off) << QByteArray(off) << 0;
    QTest::newRow("unknown word") << QByteArray("maybe") << -1;
    QTest::newRow("2") << QByteArray("2") << -1;
  }
  void switchValuesAreParsed() {
    QFETCH(QByteArray, value);
    QFETCH(int, expected);
    const std::optional<bool> parsed = cuda::parseEmulatedGpuSwitch(value.isNull() ? nullptr : value.constData());
    QCOMPARE(parsed.has_value() ? int(*parsed) : -1, expected);
  }

  // GPULAB_EMULATED_GPU_MEMORY: the size of GPU an exercise grades code on (issue 49).
  void memorySizesAreParsed_data() {
    QTest::addColumn<QByteArray>("value");
    QTest::addColumn<qint64>("expected");  // -1: not a size (the default budget is used)
    QTest::newRow("unset") << QByteArray() << qint64(-1);
    QTest::newRow("16GiB") << QByteArray("16GiB") << (qint64(16) << 30);
    QTest::newRow("80gib") << QByteArray("80gib") << (qint64(80) << 30);
    QTest::newRow("512MiB") << QByteArray("512MiB") << (qint64(512) << 20);
    QTest::newRow("bytes, whole MiB kept") << QByteArray("134217729") << (qint64(128) << 20);
    QTest::newRow("below 64 MiB") << QByteArray("32MiB") << qint64(-1);
    QTest::newRow("above 1 TiB") << QByteArray("1025GiB") << qint64(-1);
    QTest::newRow("a unit we do not take") << QByteArray("16GB") << qint64(-1);
    QTest::newRow("negative") << QByteArray("-4GiB") << qint64(-1);
    QTest::newRow("too many digits") << QByteArray("9999999999999999GiB") << qint64(-1);
  }
  void memorySizesAreParsed() {
    QFETCH(QByteArray, value);
    QFETCH(qint64, expected);
    const std::optional<std::int64_t> parsed = cuda::parseEmulatedGpuMemory(value.isNull() ? nullptr : value.constData());
    QCOMPARE(parsed ? qint64(*parsed) : qint64(-1), expected);
  }

  void switchDecidesWithTheRealGpus() {
    QVERIFY(cuda::emulatedGpuWanted(std::nullopt, /*realGpuUsable=*/false));
    QVERIFY(!cuda::emulatedGpuWanted(std::nullopt, true));
    QVERIFY(cuda::emulatedGpuWanted(true, true));
    QVERIFY(!cuda::emulatedGpuWanted(false, false));
  }

  // The variable is read once per process, so each setting runs this binary again.
  void switchFromTheEnvironment_data() {
    QTest::addColumn<QByteArray>("value");  // null: unset
    QTest::addColumn<bool>("expectOn");
    QTest::newRow("0") << QByteArray("0") << false;
    QTest::newRow("off") << QByteArray("off") << false;
    QTest::newRow("1") << QByteArray("1") << true;
    QTest::newRow("on") << QByteArray("on") << true;
    QTest::newRow("unset") << QByteArray() << !cuda::isAvailable();
  }
  void switchFromTheEnvironment() {
    QFETCH(QByteArray, value);
    QFETCH(bool, expectOn);
    QProcessEnvironment env = QProcessEnvironment::systemEnvironment();
    if (value.isNull()) env.remove("GPULAB_EMULATED_GPU");
    else env.insert("GPULAB_EMULATED_GPU", QString::fromLatin1(value));
    env.insert("GPULAB_TEST_EXPECT_EMULATED", expectOn ? "1" : "0");
    QProcess child;
    child.setProcessEnvironment(env);
    child.setProcessChannelMode(QProcess::MergedChannels);
    child.start(QCoreApplication::applicationFilePath(), {"childChecksTheSwitch"});
    QVERIFY(child.waitForFinished(60000));
    const QString out = QString::fromUtf8(child.readAll());
    QVERIFY2(child.exitStatus() == QProcess::NormalExit && child.exitCode() == 0, qPrintable(out));
    QVERIFY2(out.contains("PASS   : TestEmulatedGpu::childChecksTheSwitch()"), qPrintable(out));
  }
  // Runs only as the child of switchFromTheEnvironment.
  void childChecksTheSwitch() {
    const QByteArray expect = qgetenv("GPULAB_TEST_EXPECT_EMULATED");
    if (expect.isEmpty()) QSKIP("run by switchFromTheEnvironment in a child process");
    const int real = cuda::deviceCount();
    const Device next(DeviceType::CUDA, real);  // where the emulated GPU is when it is on
    if (expect == "1") {
      QCOMPARE(cuda::emulatedDevice(), std::optional<Device>(next));
      QCOMPARE(cuda::availability().emulated_index, std::optional<int>(real));
      QCOMPARE(zeros({2}).to(next).device(), next);
      QCOMPARE(static_cast<int>(cuda::availableDevices().size()), real + 2);
    } else {
      QVERIFY(!cuda::emulatedDevice().has_value());
      QVERIFY(!cuda::availability().emulated_index.has_value());
      QCOMPARE(cuda::emulatedGpuBudget(), qint64(0));
      QVERIFY_THROWS_EXCEPTION(Error, zeros({2}).to(next));
      QCOMPARE(static_cast<int>(cuda::availableDevices().size()), real + 1);
      QVERIFY(cuda::emulatedGpuStatus().starts_with("emulated GPU off"));
    }
  }

  // ---- What it reports -------------------------------------------------------------------------

  void labelsAndDeviceChoices() {
    REQUIRE_EMULATED(emu);
    const int real = cuda::deviceCount();
    QCOMPARE(emu.index(), real);
    QVERIFY(cuda::isEmulated(emu));
    QVERIFY(!cuda::isEmulated(kCPU));
    QVERIFY(!cuda::isEmulated(Device(DeviceType::CUDA, real + 1)));
    QCOMPARE(cuda::deviceLabel(kCPU), std::string("cpu"));
    QCOMPARE(cuda::deviceLabel(emu), emu.str() + " (emulated GPU \u2014 runs on your CPU)");
    QVERIFY(cuda::deviceLabel(Device(DeviceType::CUDA, real + 1)).ends_with("(not available)"));

    const std::vector<cuda::DeviceChoice> choices = cuda::availableDevices();
    QCOMPARE(static_cast<int>(choices.size()), real + 2);
    QCOMPARE(choices.front().device, kCPU);
    QCOMPARE(choices.front().label, std::string("cpu"));
    QVERIFY(!choices.front().emulated);
    for (int i = 0; i < real; ++i) {
      const cuda::DeviceChoice& c = choices[static_cast<std::size_t>(i) + 1];
      QCOMPARE(c.device, Device(DeviceType::CUDA, i));
      QVERIFY(!c.emulated);
      QVERIFY(c.label.find("emulated") == std::string::npos);
    }
    QCOMPARE(choices.back().device, emu);
    QVERIFY(choices.back().emulated);
    QCOMPARE(choices.back().label, cuda::deviceLabel(emu));

    // torch.cuda.is_available() does not count it, and it is never the default device.
    const cuda::Availability a = cuda::availability();
    QCOMPARE(a.emulated_index, std::optional<int>(emu.index()));
    QCOMPARE(a.emulated_budget, cuda::emulatedGpuBudget());
    QCOMPARE(static_cast<int>(a.devices.size()), real);
    QCOMPARE(cuda::isAvailable(), real > 0);
    QCOMPARE(defaultDevice(), real > 0 ? Device(DeviceType::CUDA, 0) : kCPU);
    const std::string status = cuda::emulatedGpuStatus();
    qInfo("%s; real GPUs: %d (%s)", status.c_str(), real, a.usable ? "usable" : a.reason.c_str());
    QVERIFY2(status.starts_with("emulated GPU " + emu.str() + " enabled (runs on your CPU; "), status.c_str());
  }

  void deviceStringsResolveToIt() {
    REQUIRE_EMULATED(emu);
    cuda::checkDeviceUsable(emu);  // no throw
    cuda::checkDeviceUsable(Device::parse(emu.str()));
    if (emu.index() == 0) cuda::checkDeviceUsable(Device::parse("cuda"));
    const Device beyond(DeviceType::CUDA, emu.index() + 1);
    const std::string why = textOf([&] { cuda::checkDeviceUsable(beyond); });
    // Without a real GPU the runtime's refusal follows CUDA's words ("... Cannot use device cuda:1: no
    // usable GPU: ..."); beside one, the real GPUs' ordinal check says it ("cuda:2 does not exist").
    QVERIFY2(why.starts_with("CUDA error: invalid device ordinal") && why.find(beyond.str()) != std::string::npos,
             why.c_str());
    QVERIFY2(why.ends_with("(the emulated GPU is " + emu.str() + ")"), why.c_str());
  }

  void budgetIsASmallGpusAtMostHalfTheCpuBudget() {
    REQUIRE_EMULATED(emu);
    const std::int64_t budget = cuda::emulatedGpuBudget();
    QCOMPARE(budget, std::min<std::int64_t>(4096 * MiB, cpu_default_memory_budget() / 2) / MiB * MiB);
    QVERIFY(budget > 0);
    const auto [freeBytes, total] = mem_get_info(emu);
    QCOMPARE(total, budget);
    QVERIFY(freeBytes >= 0 && freeBytes <= total);
    const std::string summary = memory_summary(emu);
    QVERIFY2(summary.find(cuda::kEmulatedGpuPhrase) != std::string::npos, summary.c_str());
    QVERIFY2(summary.find("device " + emu.str()) != std::string::npos, summary.c_str());
  }

  void driverViewSaysThereIsNoDriver() {
    REQUIRE_EMULATED(emu);
    const DriverMemoryInfo info = driver_memory_info(emu);
    QVERIFY(!info.available);
    QVERIFY(!info.process_used.has_value());
    for (const char* words : {"emulated GPU", "no NVIDIA driver", "nvidia-smi", "CUDA context", "cache"})
      QVERIFY2(info.reason.find(words) != std::string::npos, info.reason.c_str());
  }

  // ---- The same-device rule, for real ----------------------------------------------------------

  void addAcrossDevicesRaises_data() {
    QTest::addColumn<bool>("cpuFirst");
    QTest::newRow("cpu + emulated") << true;
    QTest::newRow("emulated + cpu") << false;
  }
  void addAcrossDevicesRaises() {
    QFETCH(bool, cpuFirst);
    REQUIRE_EMULATED(emu);
    Tensor cpu = ones({3, 4});
    Tensor gpu = ones({3, 4}).to(emu);
    QCOMPARE(gpu.device(), emu);
    QVERIFY(gpu.is_cuda());
    try {
      (void)(cpuFirst ? cpu + gpu : gpu + cpu);
      QFAIL("expected DeviceMismatchError");
    } catch (const DeviceMismatchError& e) {
      QVERIFY2(std::string(e.what()).starts_with("Expected all tensors to be on the same device, but found at least two devices, " +
                                                 emu.str() + " and cpu!"), e.what());
      QVERIFY2(std::string(e.what()).find("add") != std::string::npos, e.what());
    }
    QVERIFY_THROWS_EXCEPTION(DeviceMismatchError, matmul(cpu, gpu.t()));
    // The fix works.
    Tensor fixed = cpu.to(emu) + gpu;
    QCOMPARE(fixed.device(), emu);
    QCOMPARE(fixed.sum().item(), 24.0);
  }

  void zeroDimCpuScalarJoinsIt() {
    REQUIRE_EMULATED(emu);
    Tensor gpu = arange(0, 6, 1, {.device = emu});
    for (const Tensor& r : {gpu * scalar_tensor(2.0), scalar_tensor(2.0) + gpu}) {
      QCOMPARE(r.device(), emu);
    }
    QCOMPARE((gpu * scalar_tensor(2.0)).sum().item(), 30.0);
    QCOMPARE(mse_loss(scalar_tensor(1.0).to(emu), scalar_tensor(3.0)).item(), 4.0);
    // A one-element 1-D CPU tensor is not a scalar.
    QVERIFY_THROWS_EXCEPTION(DeviceMismatchError, gpu * ones({1}));
  }

  void modelOnItRejectsACpuInputAndMatchesTheCpu() {
    REQUIRE_EMULATED(emu);
    Generator gen(11);
    nn::Linear cpuModel(5, 3, true, gen);
    Generator gen2(11);
    nn::Linear model(5, 3, true, gen2);
    model.to(emu);
    QCOMPARE(model.device(), emu);
    Generator data(3);
    Tensor x = randn({4, 5}, data);
    const std::string why = textOf([&] { (void)model(x); });
    QVERIFY2(why.starts_with("Expected all tensors to be on the same device, but found at least two devices, " + emu.str() + " and cpu!"),
             why.c_str());
    QVERIFY_THROWS_EXCEPTION(DeviceMismatchError, model(x));
    Tensor y = model(x.to(emu));
    QCOMPARE(y.device(), emu);
    QCOMPARE(bitsOf(y), bitsOf(cpuModel(x)));
  }

  void opsMatchTheCpuBitForBit_data() {
    QTest::addColumn<int>("index");
    for (std::size_t i = 0; i < opCases().size(); ++i) QTest::newRow(opCases()[i].name) << static_cast<int>(i);
  }
  void opsMatchTheCpuBitForBit() {
    QFETCH(int, index);
    REQUIRE_EMULATED(emu);
    const OpCase& c = opCases()[static_cast<std::size_t>(index)];
    Generator gen(5);
    Tensor x = randn({4, 5}, gen), y = randn({4, 5}, gen);
    Tensor onCpu = c.run(x, y);
    Tensor onEmu = c.run(x.to(emu), y.to(emu));
    QCOMPARE(onEmu.device(), emu);
    QCOMPARE(onEmu.sizes(), onCpu.sizes());
    QCOMPARE(bitsOf(onEmu), bitsOf(onCpu));
  }

  void trainingStepsMatchTheCpu() {
    REQUIRE_EMULATED(emu);
    Generator g1(21), g2(21);
    nn::Linear cpuModel(6, 2, true, g1), emuModel(6, 2, true, g2);
    emuModel.to(emu);
    optim::Adam cpuOpt(cpuModel.parameters(), {.lr = 0.05});
    optim::Adam emuOpt(emuModel.parameters(), {.lr = 0.05});
    Generator data(9);
    Tensor x = randn({8, 6}, data), target = randn({8, 2}, data);
    Tensor xe = x.to(emu), te = target.to(emu);
    for (int step = 0; step < 3; ++step) {
      cpuOpt.zero_grad();
      emuOpt.zero_grad();
      mse_loss(cpuModel(x), target).backward();
      Tensor loss = mse_loss(emuModel(xe), te);
      QCOMPARE(loss.device(), emu);
      loss.backward();
      for (const Tensor& p : emuModel.parameters()) QCOMPARE(p.grad().device(), emu);
      cpuOpt.step();
      emuOpt.step();
    }
    const auto cpuParams = cpuModel.parameters(), emuParams = emuModel.parameters();
    QCOMPARE(cpuParams.size(), emuParams.size());
    for (std::size_t i = 0; i < cpuParams.size(); ++i) {
      QCOMPARE(emuParams[i].device(), emu);
      QCOMPARE(bitsOf(emuParams[i]), bitsOf(cpuParams[i]));
    }
  }

  // ---- Copies ----------------------------------------------------------------------------------

  void roundTripPreservesValues_data() {
    QTest::addColumn<bool>("nonBlocking");
    QTest::newRow("blocking") << false;
    QTest::newRow("non_blocking") << true;
  }
  void roundTripPreservesValues() {
    QFETCH(bool, nonBlocking);
    REQUIRE_EMULATED(emu);
    Generator gen(1);
    Tensor x = randn({7, 9}, gen);
    Tensor there = x.to(emu, nonBlocking);
    QCOMPARE(there.device(), emu);
    QCOMPARE(bitsOf(there.cpu()), bitsOf(x));
    Tensor into = zeros({7, 9}, {.device = emu});
    into.copy_(x);
    QCOMPARE(bitsOf(into), bitsOf(x));
    // A strided view, and int64.
    QCOMPARE(bitsOf(x.t().to(emu, nonBlocking).cpu()), bitsOf(x.t()));
    Tensor ints = arange(0, 10, 1, {.dtype = kInt64});
    QCOMPARE(ints.to(emu).cpu().toVector<std::int64_t>(), ints.toVector<std::int64_t>());
    QCOMPARE(ints.to(emu).to(kFloat32).cpu().toVector<float>(), ints.to(kFloat32).toVector<float>());
    // Gradients flow back across the copy.
    Tensor leaf = x.detach().requires_grad_();
    (leaf.to(emu) * 3.0).sum().backward();
    QCOMPARE(leaf.grad().device(), kCPU);
    QCOMPARE(leaf.grad().sum().item(), 3.0 * 63);
    cuda::synchronize(emu.index());  // waits for its streams; not an error
    QVERIFY_THROWS_EXCEPTION(Error, there.pin_memory());
  }

  // ---- Its own memory --------------------------------------------------------------------------

  void allocatedRisesAndFallsApartFromTheCpu() {
    REQUIRE_EMULATED(emu);
    const std::int64_t base = memory_allocated(emu), cpuBase = memory_allocated(kCPU);
    const std::int64_t cpuReserved = memory_reserved(kCPU);
    {
      Tensor t = Tensor::empty({3 * MiB / 4}, kFloat32, emu);  // 3 MiB: the large pool
      QCOMPARE(memory_allocated(emu) - base, qint64(3 * MiB));
      QVERIFY(max_memory_allocated(emu) >= memory_allocated(emu));
      QVERIFY(memory_reserved(emu) >= memory_allocated(emu));
      QCOMPARE(memory_allocated(kCPU), cpuBase);
      QCOMPARE(memory_reserved(kCPU), cpuReserved);
      QCOMPARE(allocatorFor(emu).device(), emu);
    }
    QCOMPARE(memory_allocated(emu), base);
    QVERIFY(memory_reserved(emu) > 0);  // cached, not returned
    const std::int64_t reserved = memory_reserved(emu);
    const std::int64_t released = empty_cache(emu);
    QVERIFY(released > 0);
    QCOMPARE(memory_reserved(emu), reserved - released);
    QCOMPARE(memory_allocated(emu), base);
    QVERIFY(memory_summary(emu).find("Allocated memory") != std::string::npos);
  }

  void tooLargeARequestRaisesCudaOutOfMemory() {
    REQUIRE_EMULATED(emu);
    empty_cache(emu);
    const std::int64_t base = memory_allocated(emu), ooms = memory_stats(emu).num_ooms;
    const std::int64_t request = cuda::emulatedGpuBudget() + 1024 * MiB;  // bytes
    const std::string what = textOf([&] { Tensor t = Tensor::empty({request / 4}, kFloat32, emu); });
    QVERIFY2(what.starts_with("CUDA out of memory. Tried to allocate " + formatBytes(request) + ". GPU " + std::to_string(emu.index()) +
                              " (emulated GPU \u2014 runs on your CPU) has a total capacity of " + formatBytes(cuda::emulatedGpuBudget())),
             what.c_str());
    QVERIFY2(what.find("memory budget for the emulated GPU") != std::string::npos, what.c_str());
    qInfo("%s", what.c_str());
    QVERIFY_THROWS_EXCEPTION(OutOfMemoryError, Tensor::empty({request / 4}, kFloat32, emu));
    QCOMPARE(memory_stats(emu).num_ooms - ooms, qint64(2));
    // Still usable.
    QCOMPARE(memory_allocated(emu), base);
    QCOMPARE((ones({4}, {.device = emu}) * 2.0).sum().item(), 8.0);
  }

  void memoryFractionLowersTheOomPoint() {
    REQUIRE_EMULATED(emu);
    empty_cache(emu);
    const std::int64_t budget = cuda::emulatedGpuBudget();
    const std::int64_t request = budget / 5 * 3;  // 60 % of the budget, never touched (empty)
    { Tensor fits = Tensor::empty({request / 4}, kFloat32, emu); }
    empty_cache(emu);
    set_per_process_memory_fraction(0.5, emu);
    const std::string what = textOf([&] { Tensor t = Tensor::empty({request / 4}, kFloat32, emu); });
    set_per_process_memory_fraction(1.0, emu);
    QVERIFY2(what.starts_with("CUDA out of memory. Tried to allocate "), what.c_str());
    QVERIFY2(what.find("at most a fraction of 0.5 of it (" + formatBytes(budget / 2) + ", set_per_process_memory_fraction)") != std::string::npos,
             what.c_str());
    { Tensor fitsAgain = Tensor::empty({request / 4}, kFloat32, emu); }
    empty_cache(emu);
  }

  void memoryEventsCarryTheDevice() {
    REQUIRE_EMULATED(emu);
    empty_cache(emu);
    MemoryEventRecorder onEmu(emu), onCpu(kCPU);
    {
      MemoryCategoryScope tag(MemoryCategory::Activation);
      Tensor t = Tensor::empty({1000}, kFloat32, emu);
    }
    empty_cache(emu);
    const std::vector<MemoryEvent> events = onEmu.drain();
    QVERIFY(onCpu.drain().empty());
    std::vector<MemoryEventKind> kinds;
    for (const MemoryEvent& e : events) {
      QCOMPARE(e.device, emu);
      kinds.push_back(e.kind);
    }
    const std::vector<MemoryEventKind> expected = {MemoryEventKind::SegmentReserve, MemoryEventKind::Allocate, MemoryEventKind::Free,
                                                   MemoryEventKind::SegmentRelease, MemoryEventKind::EmptyCache};
    QCOMPARE(kinds, expected);
    QCOMPARE(events[1].category, MemoryCategory::Activation);
    QCOMPARE(events[1].size, qint64(4096));
  }

  // The GUI reads statistics from its own thread while a lab allocates.
  void statsAreReadableFromAnotherThread() {
    REQUIRE_EMULATED(emu);
    std::atomic<bool> done{false};
    std::int64_t reads = 0, inconsistent = 0;
    std::thread reader([&] {
      while (!done.load()) {
        const MemoryStats s = memory_stats(emu);
        const auto [freeBytes, total] = mem_get_info(emu);
        if (s.reserved_bytes.current < s.allocated_bytes.current || freeBytes > total) ++inconsistent;
        ++reads;
      }
    });
    for (int i = 0; i < 200; ++i) {
      Tensor a = randn({64, 64}, defaultGenerator(), {.device = emu});
      (void)matmul(a, a).sum().item();
    }
    done = true;
    reader.join();
    QVERIFY(reads > 0);
    QCOMPARE(inconsistent, qint64(0));
  }
};

QTEST_GUILESS_MAIN(TestEmulatedGpu)
#include "test_emulated_gpu.moc"
