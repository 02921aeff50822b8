// The crossover lesson (lessons/14-when-is-the-gpu-faster) makes claims from its run; these tests check
// the MECHANISM behind each, through the crossover lab:
// - each call's time is split into a fixed cost (the same call at n = 8, the same at every size), memory
//   traffic (its bytes, 12n^2 for a product) and arithmetic (its FLOPs, 2n^3): the parts scale with the
//   work, so the fixed cost's share falls and arithmetic's rises from tiny calls to large ones, on every
//   device -- "tiny calls overhead-bound, large products compute-bound";
// - the challenge reads the split of your size, added to the sweep;
// - a training step's fixed cost is its own n = 8 time, its arithmetic a step's (batch 64: ~n^2);
// - the emulated GPU is labelled, and the closing sentence agrees with the table's ranges;
// - on a real GPU (skipped here) the crossover the lab names agrees with the table's ranges.
// Where the shares end up at a given size, by how much a step's fixed cost exceeds a product's, the GPU's
// speed-up at each end and the emulated GPU's figures against the CPU's are timings, which a unit test on
// a shared machine cannot hold (ASan alone made the n = 512 product 45% arithmetic where 50% was asked):
// gpulab-bench-labs (tests/bench/bench_labs.cpp) runs the settings these tests used to time and prints
// each figure against its anchor and whether the lesson's direction held.
// Bad settings are refused with their name; a stopped run sends no half-measured point.
#include <algorithm>
#include <cmath>
#include <iterator>
#include <map>
#include <vector>

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

// A row of the "where" table: one size on one device, in milliseconds per call.
struct WhereRow {
  double measured = 0, fixed = 0, memory = 0, arithmetic = 0;
  double low = 0, high = 0;  // the range column: the fastest and the slowest batch
};
// device name ("CPU", "emulated GPU", "GPU") -> n -> its row.
std::map<std::string, std::map<std::int64_t, WhereRow>> whereTable(const RecordingSink& s) {
  std::map<std::string, std::map<std::int64_t, WhereRow>> out;
  for (const lab::Row& r : s.rows("where")) {
    const std::string range = std::get<std::string>(r.cells[3]);
    const std::size_t to = range.find(" to ");
    out[std::get<std::string>(r.cells[1])][std::get<std::int64_t>(r.cells[0])] = {
        test::number(r.cells[2]), test::number(r.cells[4]), test::number(r.cells[5]), test::number(r.cells[6]),
        std::stod(range.substr(0, to)), std::stod(range.substr(to + 4))};
  }
  return out;
}

// The share of the modelled time the series of `view` ("split_cpu", "split_gpu") gave size n.
std::map<std::int64_t, double> shares(const RecordingSink& s, const std::string& view, const std::string& part) {
  std::map<std::int64_t, double> out;
  for (const lab::Point& p : s.points(view, part)) out[static_cast<std::int64_t>(p.x.at(0))] = p.y;
  return out;
}

bool near(double a, double b) { return std::abs(a - b) <= 1e-9 * std::max(std::abs(a), std::abs(b)); }

// Each device's rows: the sweep's sizes (8, 16, ... max_size, and `yours`), the fixed cost the same at
// every size and equal to the n = 8 call's time, arithmetic and memory traffic scaling with the work
// from one size to the next (`flopsGrowth`, `bytesGrowth` per doubling; a product: 8 and 4), so the
// fixed share falls and the arithmetic share rises with n. None of it depends on what the clock said.
void theSplitFollowsTheWork(const RecordingSink& s, std::int64_t maxSize, std::int64_t yours, double flopsGrowth, double bytesGrowth) {
  std::vector<std::int64_t> sizes;
  for (std::int64_t n = 8; n <= maxSize; n *= 2) sizes.push_back(n);
  if (std::find(sizes.begin(), sizes.end(), yours) == sizes.end()) sizes.push_back(yours);
  std::sort(sizes.begin(), sizes.end());
  const auto table = whereTable(s);
  QCOMPARE(table.size(), std::size_t(2));
  for (const auto& [device, rows] : table) {
    std::vector<std::int64_t> swept;
    for (const auto& [n, row] : rows) swept.push_back(n);
    QCOMPARE(swept, sizes);
    const WhereRow& smallest = rows.at(8);
    QCOMPARE(smallest.fixed, smallest.measured);  // the fixed cost is the n = 8 call's time...
    const std::string view = device == "CPU" ? "split_cpu" : "split_gpu";
    const auto fixedShare = shares(s, view, "fixed"), arithmeticShare = shares(s, view, "arithmetic");
    for (std::size_t i = 1; i < sizes.size(); ++i) {
      const WhereRow &before = rows.at(sizes[i - 1]), &row = rows.at(sizes[i]);
      QCOMPARE(row.fixed, smallest.fixed);  // ...at every size
      const double doublings = std::log2(static_cast<double>(sizes[i]) / static_cast<double>(sizes[i - 1]));
      QVERIFY2(near(row.arithmetic / before.arithmetic, std::pow(flopsGrowth, doublings)),
               qPrintable(QString("%1, n = %2: arithmetic %3x the size before").arg(QString::fromStdString(device)).arg(sizes[i]).arg(row.arithmetic / before.arithmetic)));
      if (bytesGrowth > 0) QVERIFY(near(row.memory / before.memory, std::pow(bytesGrowth, doublings)));
      QVERIFY(row.memory > before.memory);
      QVERIFY2(fixedShare.at(sizes[i]) < fixedShare.at(sizes[i - 1]), qPrintable(QString::fromStdString(device)));
      QVERIFY2(arithmeticShare.at(sizes[i]) > arithmeticShare.at(sizes[i - 1]), qPrintable(QString::fromStdString(device)));
    }
    const std::string of = device == "CPU" ? ", CPU" : ", GPU";
    QCOMPARE(measured(s, "fixed cost per call" + of), smallest.measured * 1000.0);  // us, from the row's ms
    QCOMPARE(measured(s, "fixed-cost share at the smallest size" + of), fixedShare.at(sizes.front()));
    QCOMPARE(measured(s, "fixed-cost share at the largest size" + of), fixedShare.at(sizes.back()));
    QCOMPARE(measured(s, "arithmetic share at the largest size" + of), arithmeticShare.at(sizes.back()));
    // The challenge reads your size's row: arithmetic at the device's full rate against the time measured.
    const WhereRow& mine = rows.at(yours);
    QCOMPARE(measured(s, "arithmetic share of the measured time at your size" + of), std::min(100.0, 100.0 * mine.arithmetic / mine.measured));
  }
}

// Whether a row's GPU was clearly faster than the CPU by the lab's rule (compareBeyondSpread): every
// GPU batch faster than every CPU batch, and the medians further apart than either range is wide
// (issue 48, 4.6: a crossover named at a 1.009x speed-up, two tight ranges that merely missed each
// other). The ranges are printed to 3 digits: `slack`, a share of the CPU's median, leans the test
// towards yes (> 0) or no (< 0) at the boundary.
bool beyondSpread(const WhereRow& gpu, const WhereRow& cpu, double slack) {
  const double width = std::max(gpu.high - gpu.low, cpu.high - cpu.low), tolerance = slack * cpu.measured;
  return gpu.high < cpu.low + tolerance && cpu.measured - gpu.measured > width - tolerance;
}

// The crossover the run names agrees with the table's ranges: from it on, every size's GPU batches all
// beat the CPU's by more than the spread (beyondSpread), and the size below it not; no crossover, no
// size named.
void theCrossoverAgreesWithTheTable(const RecordingSink& s, const std::string& gpuName) {
  const auto table = whereTable(s);
  const auto& cpu = table.at("CPU");
  const auto& gpu = table.at(gpuName);
  if (measured(s, "crossover found") == 0) {
    QVERIFY(!s.measured.count("crossover size"));  // no "crossover size 0"
    return;
  }
  const auto crossover = static_cast<std::int64_t>(measured(s, "crossover size"));
  QVERIFY(gpu.count(crossover) == 1);
  for (auto it = gpu.find(crossover); it != gpu.end(); ++it)
    QVERIFY2(beyondSpread(it->second, cpu.at(it->first), 0.01), qPrintable(QString("n = %1, from the crossover on, not clearly faster").arg(it->first)));
  if (const auto at = gpu.find(crossover); at != gpu.begin()) {
    const auto& [n, below] = *std::prev(at);
    // (A size timed once, its call longer than the budget, shows no spread: no clear difference there.)
    const bool once = below.low == below.high || cpu.at(n).low == cpu.at(n).high;
    QVERIFY2(once || !beyondSpread(below, cpu.at(n), -0.01), qPrintable(QString("n = %1, below the crossover, was clearly faster too").arg(n)));
  }
}

}  // namespace

class TestCrossoverLab : public QObject {
  Q_OBJECT

 private slots:
  void initTestCase() { GPULAB_SKIP_WITHOUT_PYTHON_LABS(); }

  void smallCallsAreOverheadBoundLargeProductsComputeBound() {
    if (!cuda::emulatedDevice()) QSKIP("the emulated GPU is off here");
    // No share is read against a threshold, so the shortest budget does.
    const RecordingSink s = runCrossover({{"workload", "matmul"}, {"max_size", "256"}, {"size", "16"}, {"budget", "0.01"}},
                                         cuda::emulatedDevice()->str());
    qInfo("fixed share at n = 8 / 256: CPU %.0f%% / %.0f%%, emulated GPU %.0f%% / %.0f%%; arithmetic share at n = 256: %.0f%%, %.0f%%",
          measured(s, "fixed-cost share at the smallest size, CPU"), measured(s, "fixed-cost share at the largest size, CPU"),
          measured(s, "fixed-cost share at the smallest size, GPU"), measured(s, "fixed-cost share at the largest size, GPU"),
          measured(s, "arithmetic share at the largest size, CPU"), measured(s, "arithmetic share at the largest size, GPU"));
    theSplitFollowsTheWork(s, 256, 16, 8.0, 4.0);  // a product: 2n^3 FLOPs, 12n^2 bytes
  }

  // The challenge's size is added to the sweep and graded on its own row's split.
  void theChallengeReadsYourSizesSplit() {
    if (!cuda::emulatedDevice()) QSKIP("the emulated GPU is off here");
    const RecordingSink s = runCrossover({{"workload", "matmul"}, {"max_size", "16"}, {"size", "512"}, {"budget", "0.01"}},
                                         cuda::emulatedDevice()->str());
    qInfo("emulated GPU at n = 512: arithmetic %.0f%% of the measured time", measured(s, "arithmetic share of the measured time at your size, GPU"));
    theSplitFollowsTheWork(s, 16, 512, 8.0, 4.0);
  }

  // The mlp workload is a training step, split the same way: its fixed cost is its own n = 8 step, its
  // arithmetic 8 products of batch 64 x n x n (~n^2, where a product's is n^3).
  void aTrainingStepIsSplitAsAStep() {
    if (!cuda::emulatedDevice()) QSKIP("the emulated GPU is off here");
    const std::string gpu = cuda::emulatedDevice()->str();
    const RecordingSink step = runCrossover({{"workload", "mlp"}, {"max_size", "32"}, {"size", "8"}, {"budget", "0.01"}}, gpu);
    qInfo("fixed cost of an MLP step: CPU %.2f us, emulated GPU %.2f us", measured(step, "fixed cost per call, CPU"),
          measured(step, "fixed cost per call, GPU"));
    theSplitFollowsTheWork(step, 32, 8, 4.0, 0.0);  // its bytes: weights (n^2) and activations (n) together
  }

  // Whether the emulated GPU's queue makes a tiny product slower than the CPU's depends on the machine
  // (here: 0.04x when the host and the stream's thread hand over every call, 0.7-0.9x when they
  // pipeline), so the lesson claims no direction there; what holds is that it is labelled. (That its
  // arithmetic and bandwidth are the CPU's, within noise: gpulab-bench-labs.)
  void theEmulatedGpuIsLabelledAndTheSentenceAgreesWithTheTable() {
    if (!cuda::emulatedDevice()) QSKIP("the emulated GPU is off here");
    const RecordingSink s = runCrossover({{"workload", "matmul"}, {"max_size", "32"}, {"size", "8"}, {"budget", "0.01"}},
                                         cuda::emulatedDevice()->str());
    bool said = false;  // the emulated GPU is said to run on the CPU
    for (const auto& [kind, text] : s.kinds) said |= kind == lab::MessageKind::Warning && text.find(cuda::kEmulatedGpuPhrase) != std::string::npos;
    QVERIFY(said);
    // Issue 27 §2: the closing sentence agrees with the speed-ups beside it ("clearly faster at no size"
    // was said beside a 1.78x at n = 512).
    const RecordingSink wide = runCrossover({{"workload", "matmul"}, {"max_size", "256"}, {"size", "8"}, {"budget", "0.03"}},
                                            cuda::emulatedDevice()->str());
    // Clearly faster at a size: the GPU's slowest batch beat the CPU's fastest by more than the spread
    // (the table's ranges: surely so, or perhaps so at the printed digits' boundary).
    const auto table = whereTable(wide);
    bool surelyFaster = false, perhapsFaster = false;
    for (const auto& [n, row] : table.at("emulated GPU")) {
      surelyFaster = surelyFaster || beyondSpread(row, table.at("CPU").at(n), -0.01);
      perhapsFaster = perhapsFaster || beyondSpread(row, table.at("CPU").at(n), 0.01);
    }
    if (measured(wide, "crossover found") == 0) {
      bool consistent = false;
      for (const std::string& m : wide.messages)
        if (m.find("At n = ") == 0) consistent = m.find("at no size") != std::string::npos ? !surelyFaster : perhapsFaster;
      QVERIFY(consistent);
    }
    theCrossoverAgreesWithTheTable(wide, "emulated GPU");
  }

  // On a GPU the crossover is measured: that the GPU loses at n = 8 and wins at n = 2048, and a step's
  // fixed cost against a product's, gpulab-bench-labs prints. What holds whatever the clock said: the
  // split and the crossover agree with the table.
  void onAGpuTheSweepAndItsCrossoverAgree() {
    if (!cuda::isAvailable()) QSKIP("no GPU here");
    const RecordingSink s = runCrossover({{"workload", "matmul"}, {"max_size", "2048"}, {"size", "1024"}}, "cuda:0");
    qInfo("GPU: %.2fx the CPU's speed at n = 8, %.1fx at n = 2048, crossover at n = %.0f", measured(s, "GPU speed-up at the smallest size"),
          measured(s, "GPU speed-up at the largest size"), measured(s, "crossover found") ? measured(s, "crossover size") : 0.0);
    theSplitFollowsTheWork(s, 2048, 1024, 8.0, 4.0);
    theCrossoverAgreesWithTheTable(s, "GPU");
    const RecordingSink step = runCrossover({{"workload", "mlp"}, {"max_size", "2048"}, {"size", "1024"}}, "cuda:0");
    qInfo("GPU: an MLP step crosses over at n = %.0f (0: not up to 2048); fixed cost %.1f us against a product's %.1f us",
          measured(step, "crossover found") ? measured(step, "crossover size") : 0.0, measured(step, "fixed cost per call, GPU"), measured(s, "fixed cost per call, GPU"));
    theSplitFollowsTheWork(step, 2048, 1024, 4.0, 0.0);
    theCrossoverAgreesWithTheTable(step, "GPU");
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
    auto theLab = test::makeCourseLab("crossover");
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
