// The transfers-and-synchronisation lesson (lessons/11-syncs-and-transfers) makes claims from its run;
// these tests check the DIRECTION of each on this machine, through the syncs lab:
// - every loop computes the same losses, only the number of reads (.item() calls) differs;
// - on the CPU .item() has nothing to wait for (the host's waiting share is near zero), on the
//   emulated GPU (and a GPU) it waits for the queued kernels (a large share);
// - reading the loss less often is faster on a GPU (on the emulated GPU here the gain is within the
//   machine's noise: see below);
// - a batch copied one sample at a time takes longer than one copy of the batch, on every device.
// ctest runs this suite alone (RUN_SERIAL): the emulated GPU's queue needs the machine's second core.
#include "engine/core/errors.h"
#include "engine/runtime/cuda_runtime.h"
#include "engine/runtime/emulated_gpu.h"
#include "lab_runner.h"
#include "test_util.h"

using namespace gpulab;

namespace {

using test::measured;
using test::RecordingSink;

RecordingSink runSyncs(const std::map<std::string, std::string>& settings, const std::string& device) {
  return test::runLabOn("syncs", settings, device);
}

// The sweep's steps/s at each N.
std::map<double, double> sweep(const RecordingSink& s) {
  std::map<double, double> out;
  for (const lab::Point& p : s.points("sweep", "loop")) out[p.x[0]] = p.y;
  return out;
}

const std::map<std::string, std::string> kMeasured = {
    {"hidden", "256"}, {"steps", "600"}, {"read_every", "50"}, {"repeats", "3"}, {"copy_batches", "10"}};

}  // namespace

class TestSyncLab : public QObject {
  Q_OBJECT

 private slots:
  void initTestCase() { GPULAB_SKIP_WITHOUT_PYTHON_LABS(); }

  void theLoopsComputeTheSameLossesWithFewerReads() {
    const RecordingSink s = runSyncs({{"hidden", "16"}, {"steps", "100"}, {"read_every", "30"}, {"repeats", "1"}, {"copy_batches", "1"}}, "cpu");
    QVERIFY(measured(s, "largest difference between the loops' mean losses") < 1e-6);
    QCOMPARE(measured(s, "loss reads"), 4.0);  // steps 30, 60, 90 and the last
    const auto rows = s.all<lab::Row>();
    QCOMPARE(rows.size(), std::size_t(5 + 2));  // N = 1, 4, 16, 30, 64 in the reads table, two copy rows
    QCOMPARE(std::get<std::int64_t>(rows[0].cells[1]), std::int64_t{100});  // every step: 100 reads
    QCOMPARE(std::get<std::int64_t>(rows[3].cells[1]), std::int64_t{4});    // every 30 (yours)
    QCOMPARE(sweep(s).size(), std::size_t(5));
  }

  void onTheCpuItemHasNothingToWaitFor() {
    const RecordingSink s = runSyncs(kMeasured, "cpu");
    const double waiting = measured(s, "host waiting share, reading every step");
    qInfo("cpu: host waiting in .item() %.2f%% of the loop, reading every step", waiting);
    QVERIFY(waiting < 5);
  }

  void onTheEmulatedGpuItemWaits() {
    const auto gpu = cuda::emulatedDevice();
    if (!gpu) QSKIP("the emulated GPU is off here");
    const RecordingSink s = runSyncs(kMeasured, gpu->str());
    const double waiting = measured(s, "host waiting share, reading every step");
    const double cpuWaiting = measured(runSyncs(kMeasured, "cpu"), "host waiting share, reading every step");
    const auto points = sweep(s);
    qInfo("emulated GPU: host waiting %.1f%% of the loop reading every step (the CPU: %.2f%%); %.0f steps/s every step, %.0f every 64 steps",
          waiting, cpuWaiting, points.at(1.0), points.at(64.0));
    // How long the queue gets depends on the host's pace between ops -- with the lab in Python, 8 to 22%
    // of the loop here, from run to run -- so the claim is the comparison: .item() waits for the queue
    // on the emulated GPU, where on the CPU it has nothing to wait for.
    QVERIFY(waiting > 3);
    QVERIFY(waiting > 3 * cpuWaiting);
    // Whether reading less often is faster is not asserted here: on this machine's two processors
    // (one core) the emulated GPU gains 10-20% from it, with run-to-run noise of the same size -- 2 of
    // 15 runs came out the other way. The GPU case below asserts it where the gain is large.
  }

  void onAGpuFewerReadsAreFaster() {
    if (!cuda::isAvailable()) QSKIP("no GPU here: the emulated GPU's case above stands in");
    const RecordingSink s = runSyncs(kMeasured, "cuda:0");
    qInfo("GPU: %.2fx faster reading every 50 steps; host waiting %.1f%% reading every step", measured(s, "speed-up from reading every N steps"),
          measured(s, "host waiting share, reading every step"));
    QVERIFY(measured(s, "speed-up from reading every N steps") > 1);
    QVERIFY(measured(s, "per-sample copies relative to one copy") > 4);
  }

  void aBatchIsCheaperInOneCopy() {
    for (const std::string& device : {std::string("cpu"), cuda::emulatedDevice() ? cuda::emulatedDevice()->str() : std::string()}) {
      if (device.empty()) continue;
      const RecordingSink s = runSyncs({{"hidden", "16"}, {"steps", "20"}, {"read_every", "10"}, {"repeats", "1"}, {"copy_batches", "10"}}, device);
      const double ratio = measured(s, "per-sample copies relative to one copy");
      qInfo("%s: 64 copies of a row took %.0fx one copy of the batch", device.c_str(), ratio);
      QVERIFY(ratio > 4);
    }
  }

  // Issue 27 6.3: Stop is seen inside the timed loops (a million steps took 83 s to stop), and a
  // stopped run sends no half-measured sweep.
  void stopEndsTheTimedLoopsAtOnce() {
    for (const std::string& device : {std::string("cpu"), std::string("cuda")}) {
      if (device == "cuda" && !test::cudaUsable() && !cuda::emulatedDevice()) continue;
      RecordingSink s;
      const double seconds = test::secondsToStop("syncs", {{"device", device}, {"steps", "1000000"}, {"hidden", "64"}}, 300, s);
      qInfo("%s: returned %.3f s after Stop", device.c_str(), seconds);
      QVERIFY2(seconds >= 0 && seconds < 2.0, qPrintable(QString("%1: %2 s (-1: the run ended before Stop)").arg(QString::fromStdString(device)).arg(seconds)));
      QVERIFY(s.points("sweep", "loop").empty());
    }
  }

  // Issue 27 §2: the closing sentence says what the runs' spreads allow -- "faster in every run" only
  // when every run of your N beat every run of reading every step, "no clear difference" otherwise --
  // and the challenge's number compares medians.
  void theSentenceAgreesWithTheSpreads() {
    std::vector<std::string> devices = {"cpu"};
    if (const auto gpu = cuda::emulatedDevice()) devices.push_back(gpu->str());
    for (const std::string& device : devices) {
      const RecordingSink s = runSyncs(kMeasured, device);
      const double yoursLow = measured(s, "steps/s reading the loss every N steps, slowest run");
      const double yoursHigh = measured(s, "steps/s reading the loss every N steps, fastest run");
      const double everyLow = measured(s, "steps/s reading the loss every step, slowest run");
      const double everyHigh = measured(s, "steps/s reading the loss every step, fastest run");
      const double yours = measured(s, "steps/s reading the loss every N steps");
      QVERIFY(yoursLow <= yours && yours <= yoursHigh);
      QCOMPARE(measured(s, "speed-up from reading every N steps"), yours / measured(s, "steps/s reading the loss every step"));
      const auto it = std::find_if(s.messages.begin(), s.messages.end(), [](const std::string& t) { return t.find("(yours)") != std::string::npos; });
      QVERIFY(it != s.messages.end());
      qInfo("%s: %s", device.c_str(), it->c_str());
      const std::string said = it->substr(it->find("(yours)"), it->find(';', it->find("(yours)")) - it->find("(yours)"));
      const char* expected = yoursLow > everyHigh ? "faster than reading every step in every run"
                             : yoursHigh < everyLow ? "slower than reading every step in every run"
                                                    : "no clear difference from reading every step";
      QVERIFY2(said.find(expected) != std::string::npos, said.c_str());
      // The sweep's points and the table are the medians the measurements give.
      QCOMPARE(sweep(s).at(50.0), yours);
    }
  }

  void badSettingsAreRefusedByName() {
    try {
      runSyncs({{"hidden", "0"}}, "cpu");
      QFAIL("expected an error");
    } catch (const Error& e) {
      QVERIFY2(std::string(e.what()).find("hidden") != std::string::npos, e.what());
    }
  }
};

QTEST_GUILESS_MAIN(TestSyncLab)
#include "test_sync_lab.moc"
