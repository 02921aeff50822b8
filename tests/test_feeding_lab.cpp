// The feeding-the-GPU lesson (lessons/12-feeding-the-gpu) makes claims from its run; these tests check
// the DIRECTION of each on this machine, through the feeding lab:
// - every loader yields the same batches in the same order: the losses agree, only the feeding differs;
// - with 0 workers the device sits idle much of the time, waiting for the loop to load; 4 workers
//   keep it far busier and the loop runs faster -- on the CPU and on the emulated GPU (and a GPU);
// - on the CPU one worker already helps (it loads while the loop computes);
// - with 4 workers, pinned batches copied non_blocking keep the emulated GPU busier than pageable ones,
//   whose blocking copies make the loop wait for the device every step; on a GPU the loop runs faster
//   with them (its idle share there is a lower bound that counts a blocking copy's wait as work, so
//   it is not compared: an H200 ran pinned 3307 steps/s, idle 19.2 %, pageable 3047, idle 11.3 %);
// - on a GPU, batches in pinned memory copy in faster than pageable ones;
// - copied ahead on a copy stream (data::DevicePrefetcher), the copies overlap the compute, on a lane
//   of their own, and the batches are the same.
// ctest runs this suite alone (RUN_SERIAL): the workers and the emulated GPU's stream need the cores.
#include <set>

#include "engine/core/errors.h"
#include "engine/runtime/cuda_runtime.h"
#include "engine/runtime/emulated_gpu.h"
#include "lab_runner.h"
#include "test_util.h"

using namespace gpulab;

namespace {

using test::measured;
using test::RecordingSink;

RecordingSink runFeeding(const std::map<std::string, std::string>& settings, const std::string& device) {
  return test::runLabOn("feeding", settings, device);
}

std::set<std::string> lanes(const RecordingSink& s, const std::string& view) {
  std::set<std::string> out;
  for (const lab::Span& span : s.all<lab::Span>()) {
    if (span.view == view) out.insert(span.lane);
  }
  return out;
}

// Workers keep `device` busier than the loop loading its own batches, and (checkSpeed) the loop is
// faster for it.
void workersKeepTheDeviceBusy(const std::string& device, bool checkSpeed) {
  const RecordingSink s = runFeeding({{"num_workers", "4"}, {"pin_memory", "true"}, {"load_cost", "2"}, {"steps", "40"}}, device);
  const double idleNone = measured(s, "device idle share, 0 workers"), idleFour = measured(s, "device idle share, 4 workers");
  const double speedup = measured(s, "speed-up from 4 workers");
  qInfo("%s: device idle %.1f%% with 0 workers, %.1f%% with 4; 4 workers %.2fx as fast (step %.2f ms)", device.c_str(), idleNone,
        idleFour, speedup, measured(s, "training step time"));
  QVERIFY(idleNone > idleFour + 15);
  if (checkSpeed) QVERIFY(speedup > 1.3);
  // The loop loading its own batches waits out every read itself, so it cannot beat one step per read
  // wait (a loader that skipped the wait would). No
  // fixed share of the ceiling is asserted: the read is counted in one calibration run's step time,
  // and on the emulated GPU, whose stream computes while the loop loads, that step varies by half
  // between runs on a busy machine (a CI run measured over 60% where the usual is 35-45%).
  const double ceiling = measured(s, "steps/s with the batches already on the device");
  const double stepsPerSecondNone = ceiling * measured(s, "speed, % of the ceiling, 0 workers") / 100.0;
  QVERIFY2(stepsPerSecondNone * measured(s, "read wait per batch") / 1000.0 < 1.02,
           qPrintable(QString("0 workers: %1 steps/s with a read wait of %2 ms").arg(stepsPerSecondNone).arg(measured(s, "read wait per batch"))));
}

}  // namespace

class TestFeedingLab : public QObject {
  Q_OBJECT

 private slots:
  // Issue 27 6.3: Stop is seen inside each loader's timed loop (100,000 steps ignored it > 150 s).
  void stopEndsTheTimedLoopsAtOnce() {
    for (const std::string& device : {std::string("cpu"), std::string("cuda")}) {
      if (device == "cuda" && !test::cudaUsable() && !cuda::emulatedDevice()) continue;
      test::RecordingSink s;
      const double seconds = test::secondsToStop("feeding", {{"device", device}, {"steps", "100000"}}, 1500, s);
      qInfo("%s: returned %.3f s after Stop", device.c_str(), seconds);
      QVERIFY2(seconds >= 0 && seconds < 2.0, qPrintable(QString("%1: %2 s (-1: the run ended before Stop)").arg(QString::fromStdString(device)).arg(seconds)));
    }
  }

  void everyLoaderYieldsTheSameBatches() {
    const RecordingSink s = runFeeding({{"num_workers", "3"}, {"steps", "6"}, {"hidden", "32"}}, "cpu");
    QCOMPARE(measured(s, "largest difference between the loaders' mean losses"), 0.0);
    QCOMPARE(s.rows("loaders").size(), std::size_t(6));  // the ceiling; 0, 1, 2, 3 (yours), 4 workers: no pinning on the CPU
    // Yours has a lane per worker that loaded a batch in its window, and the loop's step lane.
    const std::set<std::string> yours = lanes(s, "timeline-yours");
    QVERIFY(yours.count("step") == 1 && yours.count("wait") == 1);
    QVERIFY2(yours.count("worker 1") == 1, "no worker lane on the timeline of 3 workers");
    QVERIFY(lanes(s, "timeline-naive").count("loop") == 1);  // 0 workers: the loop loads
  }

  void workersKeepTheCpuBusy() { workersKeepTheDeviceBusy("cpu", true); }

  void onTheCpuOneWorkerAlreadyHelps() {
    const RecordingSink s = runFeeding({{"load_cost", "2"}, {"steps", "40"}}, "cpu");
    qInfo("cpu: 1 worker %.2fx as fast as 0", measured(s, "speed-up from 1 worker"));
    QVERIFY(measured(s, "speed-up from 1 worker") > 1.1);
  }

  void pinnedNonBlockingCopiesKeepTheEmulatedGpuBusier() {
    const auto gpu = cuda::emulatedDevice();
    if (!gpu) QSKIP("the emulated GPU is off here");
    const RecordingSink s = runFeeding({{"load_cost", "2"}, {"steps", "40"}}, gpu->str());
    const double pageable = measured(s, "device idle share, 4 workers, pageable"), pinned = measured(s, "device idle share, 4 workers, pinned");
    qInfo("emulated GPU, 4 workers: device idle %.1f%% with pageable batches, %.1f%% with pinned + non_blocking", pageable, pinned);
    QVERIFY(pinned < pageable);
  }

  void workersKeepTheEmulatedGpuBusy() {
    const auto gpu = cuda::emulatedDevice();
    if (!gpu) QSKIP("the emulated GPU is off here");
    // The speed is not asserted here: the emulated GPU's kernels run on this machine's one core, which
    // four workers' decoding shares -- while the machine was busy with a build, 4 workers kept the
    // stream busy 97% of the time and ran at 0.9x the speed of 0 workers. The GPU case asserts it.
    workersKeepTheDeviceBusy(gpu->str(), false);
  }

  void onAGpu() {
    if (!cuda::isAvailable()) QSKIP("no GPU here: the emulated GPU's case above stands in");
    workersKeepTheDeviceBusy("cuda:0", true);
    const RecordingSink s = runFeeding({{"num_workers", "4"}, {"steps", "40"}}, "cuda:0");
    const double pageable = measured(s, "copy time per batch, pageable"), pinned = measured(s, "copy time per batch, pinned");
    qInfo("GPU: a batch copies in in %.1f us from pageable memory, %.1f us from pinned", pageable, pinned);
    QVERIFY(pinned < pageable);
    qInfo("GPU, 4 workers: %.0f steps/s with pageable batches, %.0f with pinned + non_blocking",
          measured(s, "steps/s, 4 workers, pageable"), measured(s, "steps/s, 4 workers, pinned"));
    QVERIFY(measured(s, "steps/s, 4 workers, pinned") > measured(s, "steps/s, 4 workers, pageable"));
  }

  void theTimelinesHaveTheDevicesLanes() {
    const auto gpu = cuda::emulatedDevice();
    if (!gpu) QSKIP("the emulated GPU is off here");
    const RecordingSink s = runFeeding({{"num_workers", "2"}, {"pin_memory", "true"}, {"steps", "12"}, {"hidden", "32"}}, gpu->str());
    const std::set<std::string> yours = lanes(s, "timeline-yours");
    QVERIFY(yours.count("copy") == 1 && yours.count("compute") == 1);
    QVERIFY(yours.count("worker 1") == 1);
    QCOMPARE(s.rows("loaders").size(), std::size_t(10));  // the ceiling; 0, 1, 2, 4 workers, each pageable and pinned; the prefetcher
    // The prefetcher's copies on a lane of their own, the copy stream, and none on the compute stream's.
    const std::set<std::string> ahead = lanes(s, "timeline-prefetch");
    QVERIFY(ahead.count("copy stream") == 1 && ahead.count("compute") == 1 && ahead.count("copy") == 0);
    QCOMPARE(measured(s, "largest difference between the loaders' mean losses"), 0.0);  // the same batches, in order
  }

  // The prefetcher's copy of the next batch runs on its copy stream while the step computes: most of the
  // copies' time falls inside the compute stream's step spans (on the emulated GPU the two streams are
  // two threads; 96% here). A copy queued on the compute stream would overlap none.
  // On a real GPU the step must keep the GPU busy for a copy to have anything to overlap: the lesson's
  // 256,128 model is launch-bound there, the GPU idles between its kernels while the host queues them,
  // and the copies land in those gaps (3% overlapped on an H100, 2026-11-26). Two 8192-wide layers make
  // a step of about a millisecond of GPU work, which the host queues well ahead of.
  void thePrefetchersCopiesOverlapTheCompute() {
    const bool real = cuda::isAvailable();
    const auto gpu = real ? std::optional<Device>(Device(DeviceType::CUDA, 0)) : cuda::emulatedDevice();
    if (!gpu) QSKIP("no GPU and the emulated GPU is off");
    const RecordingSink s = runFeeding({{"num_workers", "4"}, {"pin_memory", "true"}, {"steps", "40"}, {"hidden", real ? "8192,8192" : "256,128"}},
                                       gpu->str());
    const double overlapped = measured(s, "copy time overlapping the steps, copy stream");
    qInfo("%s: the copy stream's copies %.0f%% overlapped with compute; %.0f steps/s, against %.0f with pinned + non_blocking",
          gpu->str().c_str(), overlapped, measured(s, "steps/s, 4 workers, copy stream"), measured(s, "steps/s, 4 workers, pinned"));
    QVERIFY(overlapped > 50);
  }

  // Issue 27 §2: each loader ran several times, taking turns; the sentence calls 4 workers faster
  // than 0 only when every run of them was ("2.73x / 1.12x / 1.33x across identical runs, with no word
  // of noise"), and never puts a loader above the ceiling without saying why.
  void theSentenceAgreesWithTheSpreads() {
    std::vector<std::string> devices = {"cpu"};
    if (const auto gpu = cuda::emulatedDevice()) devices.push_back(gpu->str());
    for (const std::string& device : devices) {
      const RecordingSink s = runFeeding({{"num_workers", "4"}, {"pin_memory", "true"}, {"load_cost", "2"}, {"steps", "20"}, {"repeats", "3"}}, device);
      const double fourLow = measured(s, "steps/s, slowest run, 4 workers"), fourHigh = measured(s, "steps/s, fastest run, 4 workers");
      const double noneLow = measured(s, "steps/s, slowest run, 0 workers"), noneHigh = measured(s, "steps/s, fastest run, 0 workers");
      QVERIFY(fourLow <= measured(s, "steps/s (yours)") && measured(s, "steps/s (yours)") <= fourHigh);
      const auto it = std::find_if(s.messages.begin(), s.messages.end(), [](const std::string& t) { return t.find("(yours)") != std::string::npos; });
      QVERIFY(it != s.messages.end());
      qInfo("%s: %s", device.c_str(), it->c_str());
      const std::string said = it->substr(it->find("A step with 4 workers"));
      const char* expected = fourLow > noneHigh ? "faster than a step with 0 workers in every run"
                             : fourHigh < noneLow ? "slower than a step with 0 workers in every run"
                                                  : "no clear difference from a step with 0 workers";
      QVERIFY2(said.find(expected) != std::string::npos, said.c_str());
      const std::vector<lab::Row> rows = s.rows("loaders");
      QVERIFY(rows.size() >= 5);
      QVERIFY(std::get<std::string>(rows[0].cells[2]).find(" to ") != std::string::npos);  // every loader's range
      if (measured(s, "speed, % of the ceiling (yours)") > 100) {
        QVERIFY2(it->find("within the runs' noise") != std::string::npos || it->find("no loader truly is") != std::string::npos, it->c_str());
      }
    }
  }

  void badSettingsAreRefusedByName() {
    try {
      runFeeding({{"num_workers", "9"}}, "cpu");
      QFAIL("expected an error");
    } catch (const Error& e) {
      QVERIFY2(std::string(e.what()).find("num_workers") != std::string::npos, e.what());
    }
  }
};

QTEST_GUILESS_MAIN(TestFeedingLab)
#include "test_feeding_lab.moc"
