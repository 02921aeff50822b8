// The crossover lesson (lessons/14-when-is-the-gpu-faster) makes claims from its run; these tests check
// the DIRECTION of each, through the crossover lab:
// - tiny calls are overhead-bound on every device, large products compute-bound, and the challenge
//   is not met at the lesson's start but can be met on the emulated GPU;
// - a training step of many small ops has a larger fixed cost than one product;
// - the emulated GPU is labelled, with the CPU's own arithmetic and bandwidth;
// - on a real GPU (skipped here) the GPU loses at n = 8 and wins from some n on: the crossover exists.
// Bad settings are refused with their name; a stopped run sends no half-measured point.
#include <cmath>

#include "engine/core/errors.h"
#include "engine/runtime/emulated_gpu.h"
#include "lab_runner.h"
#include "test_util.h"

using namespace gpulab;

namespace {

using test::measured;
using test::RecordingSink;

RecordingSink runCrossover(const std::map<std::string, std::string>& settings, const std::string& gpu) {
  RecordingSink sink;
  auto all = settings;
  all.emplace("gpu", gpu);
  test::runLab("crossover", all, sink);
  return sink;
}

}  // namespace

class TestCrossoverLab : public QObject {
  Q_OBJECT

 private slots:
  void smallCallsAreOverheadBoundLargeProductsComputeBound() {
    if (!cuda::emulatedDevice()) QSKIP("the emulated GPU is off here");
    const RecordingSink s = runCrossover({{"workload", "matmul"}, {"max_size", "512"}, {"size", "16"}, {"budget", "0.05"}},
                                         cuda::emulatedDevice()->str());
    qInfo("CPU: fixed %.2f us, fixed share at n=8 %.0f%%, at n=512 %.0f%%, arithmetic share at n=512 %.0f%%; emulated GPU: fixed "
          "%.2f us, %.0f%%, %.0f%%, %.0f%%; challenge at n=16: %.0f%% of the measured time",
          measured(s, "fixed cost per call, CPU"), measured(s, "fixed-cost share at the smallest size, CPU"),
          measured(s, "fixed-cost share at the largest size, CPU"), measured(s, "arithmetic share at the largest size, CPU"),
          measured(s, "fixed cost per call, GPU"), measured(s, "fixed-cost share at the smallest size, GPU"),
          measured(s, "fixed-cost share at the largest size, GPU"), measured(s, "arithmetic share at the largest size, GPU"),
          measured(s, "arithmetic share of the measured time at your size, GPU"));
    for (const char* side : {"CPU", "GPU"}) {
      // The fixed cost is the whole of a tiny product and a small part of a large one...
      QVERIFY(measured(s, std::string("fixed-cost share at the largest size, ") + side) < 20);
      // ...where arithmetic takes over.
      QVERIFY(measured(s, std::string("arithmetic share at the largest size, ") + side) > 50);
    }
    // The lesson's start: the challenge is not met at n = 16.
    QVERIFY(measured(s, "arithmetic share of the measured time at your size, GPU") < 50);
  }

  // The challenge can be met on the emulated GPU, as the lesson asks: a large product's arithmetic at the
  // device's full rate fills most of its measured time there too.
  void theChallengeCanBeMetOnTheEmulatedGpu() {
    if (!cuda::emulatedDevice()) QSKIP("the emulated GPU is off here");
    // Timed (a 0.05 s budget): on a CPU another process shares, the best of three runs is the machine's.
    double share = 0;
    for (int attempt = 0; attempt < 3 && share < 50; ++attempt) {
      const RecordingSink s = runCrossover({{"workload", "matmul"}, {"max_size", "16"}, {"size", "512"}, {"budget", "0.05"}},
                                           cuda::emulatedDevice()->str());
      share = measured(s, "arithmetic share of the measured time at your size, GPU");
    }
    qInfo("emulated GPU at n = 512: arithmetic %.0f%% of the measured time", share);
    QVERIFY(share >= 50);
  }

  void aTrainingStepPaysTheFixedCostOfManyOps() {
    if (!cuda::emulatedDevice()) QSKIP("the emulated GPU is off here");
    const std::string gpu = cuda::emulatedDevice()->str();
    const RecordingSink product = runCrossover({{"workload", "matmul"}, {"max_size", "16"}, {"size", "8"}, {"budget", "0.05"}}, gpu);
    const RecordingSink step = runCrossover({{"workload", "mlp"}, {"max_size", "16"}, {"size", "8"}, {"budget", "0.05"}}, gpu);
    qInfo("fixed cost on the CPU: a product %.2f us, an MLP step %.2f us", measured(product, "fixed cost per call, CPU"),
          measured(step, "fixed cost per call, CPU"));
    QVERIFY(measured(step, "fixed cost per call, CPU") > 5 * measured(product, "fixed cost per call, CPU"));
  }

  // Whether the emulated GPU's queue makes a tiny product slower than the CPU's depends on the machine
  // (here: 0.04x when the host and the stream's thread hand over every call, 0.7-0.9x when they
  // pipeline), so the lesson claims no direction there; what holds is that it is labelled and has the
  // CPU's own arithmetic and bandwidth.
  void theEmulatedGpuIsLabelledAndHasTheCpusFigures() {
    if (!cuda::emulatedDevice()) QSKIP("the emulated GPU is off here");
    const RecordingSink s = runCrossover({{"workload", "matmul"}, {"max_size", "32"}, {"size", "8"}, {"budget", "0.05"}},
                                         cuda::emulatedDevice()->str());
    const double arithmetic = measured(s, "arithmetic rate, GPU") / measured(s, "arithmetic rate, CPU");
    const double bandwidth = measured(s, "memory bandwidth, GPU") / measured(s, "memory bandwidth, CPU");
    qInfo("emulated GPU against the CPU: arithmetic %.2fx, bandwidth %.2fx; at n = 8 %.2fx the CPU's speed", arithmetic, bandwidth,
          measured(s, "GPU speed-up at the smallest size"));
    QVERIFY(arithmetic > 0.33 && arithmetic < 3);
    QVERIFY(bandwidth > 0.33 && bandwidth < 3);
    // Issue 27 §2: the closing sentence agrees with the speed-ups beside it ("clearly faster at no size"
    // was said beside a 1.78x at n = 512).
    const RecordingSink wide = runCrossover({{"workload", "matmul"}, {"max_size", "256"}, {"size", "8"}, {"budget", "0.03"}},
                                            cuda::emulatedDevice()->str());
    // Clearly faster at a size: the GPU's slowest batch beat the CPU's fastest (the table's ranges).
    std::map<std::int64_t, std::map<std::string, std::pair<double, double>>> ranges;  // n -> device -> (low, high)
    for (const lab::Row& r : wide.rows("where")) {
      const std::string range = std::get<std::string>(r.cells[3]);
      const std::size_t to = range.find(" to ");
      ranges[std::get<std::int64_t>(r.cells[0])][std::get<std::string>(r.cells[1])] = {std::stod(range.substr(0, to)), std::stod(range.substr(to + 4))};
    }
    bool anyFaster = false;
    for (const auto& [n, byDevice] : ranges) anyFaster = anyFaster || byDevice.at("emulated GPU").second < byDevice.at("CPU").first;
    if (measured(wide, "crossover found") == 0) {
      QVERIFY(!wide.measured.count("crossover size"));  // no "crossover size 0"
      bool consistent = false;
      for (const std::string& m : wide.messages)
        if (m.find("At n = ") == 0) consistent = (m.find("at no size") != std::string::npos) == !anyFaster;
      QVERIFY(consistent);
    }
    bool said = false;  // the emulated GPU is said to run on the CPU
    for (const auto& [kind, text] : s.kinds) said |= kind == lab::MessageKind::Warning && text.find(cuda::kEmulatedGpuPhrase) != std::string::npos;
    QVERIFY(said);
  }

  void onAGpuTheCrossoverExists() {
    if (!cuda::isAvailable()) QSKIP("no GPU here");
    const RecordingSink s = runCrossover({{"workload", "matmul"}, {"max_size", "2048"}, {"size", "1024"}}, "cuda:0");
    qInfo("GPU: %.2fx the CPU's speed at n = 8, %.1fx at n = 2048, crossover at n = %.0f", measured(s, "GPU speed-up at the smallest size"),
          measured(s, "GPU speed-up at the largest size"), measured(s, "crossover size"));
    QVERIFY(measured(s, "GPU speed-up at the smallest size") < 1);
    QVERIFY(measured(s, "GPU speed-up at the largest size") > 1);
    QVERIFY(measured(s, "crossover size") > 8);
    // A training step of many small ops pays a launch per op: its fixed cost is many times a product's,
    // and a tiny one is slower on the GPU. Where it crosses over, against a product, the lesson leaves to
    // the run: on an H200 (2026-11-26) both crossed at n = 64, the CPU paying per op too.
    const RecordingSink step = runCrossover({{"workload", "mlp"}, {"max_size", "2048"}, {"size", "1024"}}, "cuda:0");
    qInfo("GPU: an MLP step crosses over at n = %.0f (0: not up to 2048); fixed cost %.1f us against a product's %.1f us",
          measured(step, "crossover found") ? measured(step, "crossover size") : 0.0, measured(step, "fixed cost per call, GPU"), measured(s, "fixed cost per call, GPU"));
    QVERIFY(measured(step, "fixed cost per call, GPU") > 5 * measured(s, "fixed cost per call, GPU"));
    QVERIFY(measured(step, "GPU speed-up at the smallest size") < 1);
  }

  void badSettingsAreRefusedByName() {
    try {
      runCrossover({{"budget", "0.01"}}, "cpu");
      QFAIL("expected an error for gpu = cpu");
    } catch (const Error& e) {
      QVERIFY2(std::string(e.what()).find("gpu must be a CUDA device") != std::string::npos, e.what());
    }
    try {
      runCrossover({{"size", "9000"}}, "cuda");
      QFAIL("expected an error for size = 9000");
    } catch (const Error& e) {
      QVERIFY2(std::string(e.what()).find("9000") != std::string::npos && std::string(e.what()).find("8192") != std::string::npos, e.what());
    }
  }

  void stopEndsTheSweepWithoutSendingHalfMeasuredPoints() {
    if (!cuda::emulatedDevice()) QSKIP("the emulated GPU is off here");
    // Stops the run at its third point, as the Stop button would, from inside the sweep.
    struct StoppingSink : RecordingSink {
      lab::StopToken* stop = nullptr;
      int points = 0;
      void send(const lab::Update& u) override {
        RecordingSink::send(u);
        if (std::holds_alternative<lab::Point>(u) && ++points == 3) stop->requestStop();
      }
    } sink;
    lab::StopToken stop;
    sink.stop = &stop;
    auto theLab = labs::makeLab("crossover");
    lab::Params params = theLab->defaults();
    params.set("gpu", cuda::emulatedDevice()->str());
    params.set("budget", "0.02");
    theLab->run(params, sink, stop);
    for (const lab::Point& p : sink.all<lab::Point>()) QVERIFY2(std::isfinite(p.y), qPrintable(QString::fromStdString(p.view)));
    QVERIFY(sink.measured.empty());  // a stopped run grades nothing
  }
};

QTEST_GUILESS_MAIN(TestCrossoverLab)
#include "test_crossover_lab.moc"
