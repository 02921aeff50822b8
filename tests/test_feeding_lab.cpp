// The feeding-the-GPU lesson (lessons/12-feeding-the-gpu) makes claims from its run; these tests check
// the MECHANISM behind each on this machine, through the feeding lab's timelines and measurements:
// - every loader yields the same batches in the same order: the losses agree, only the feeding differs;
// - with workers, the batches are loaded on the workers' threads (each of them loads its share) while
//   the device runs the steps -- on the CPU and on the emulated GPU (and a GPU); with 0 workers the
//   loop loads every batch itself and, on the CPU, nothing trains while it does;
// - on the CPU one worker already loads while the loop computes;
// - pinned batches copied non_blocking let the loop queue a step before the device has finished the
//   one before, where pageable ones' blocking copies make the loop wait for the device every step;
// - copied ahead on a side stream (the lab's CopyAhead), the copies run beside the compute, on a lane
//   of their own, and the batches are the same.
// How much faster, how much less idle: those are speeds, which a unit test on a shared machine cannot
// hold (a busy CI machine made 4 workers 0.9x the speed of 0 on the emulated GPU). gpulab-bench-labs
// (tests/bench/bench_labs.cpp) runs the same lab settings these tests used to time and prints each
// figure against its anchor and whether the lesson's direction held.
// ctest runs this suite alone (RUN_SERIAL): the workers and the emulated GPU's stream need the cores.
#include <algorithm>
#include <functional>
#include <map>
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

// The lab's timelines show the loop's first 8 steps (feeding_lab.cpp: kTimelineSteps).
constexpr std::size_t kShownSteps = 8;

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

bool isWorkerLane(const std::string& lane) { return lane.rfind("worker ", 0) == 0; }

// The spans of `view` whose lane `pick` accepts, in the order they were sent.
std::vector<lab::Span> spansOf(const RecordingSink& s, const std::string& view, const std::function<bool(const std::string&)>& pick) {
  std::vector<lab::Span> out;
  for (const lab::Span& span : s.all<lab::Span>())
    if (span.view == view && pick(span.lane)) out.push_back(span);
  return out;
}
std::vector<lab::Span> spansOn(const RecordingSink& s, const std::string& view, const std::string& lane) {
  return spansOf(s, view, [&](const std::string& l) { return l == lane; });
}

bool overlap(const lab::Span& a, const lab::Span& b) { return std::min(a.end, b.end) > std::max(a.start, b.start); }

// How many of `spans` overlap one of `others`.
std::size_t overlapping(const std::vector<lab::Span>& spans, const std::vector<lab::Span>& others) {
  return static_cast<std::size_t>(std::count_if(spans.begin(), spans.end(), [&](const lab::Span& a) {
    return std::any_of(others.begin(), others.end(), [&](const lab::Span& b) { return overlap(a, b); });
  }));
}

// Settings for the timelines: no speed is read, so one run of each loader, a few steps past the
// timelines' 8, and the read still twice a step so that loading is what the loop waits for.
std::map<std::string, std::string> timelineSettings(int workers, bool pinned) {
  return {{"num_workers", std::to_string(workers)}, {"pin_memory", pinned ? "true" : "false"}, {"load_cost", "2"}, {"steps", "12"},
          {"repeats", "1"}};
}

// With `workers` workers the batches are loaded on the workers' threads, each loading its share of
// them, while the device steps: some of the device's spans (the loop's steps on the CPU, the stream's
// compute on a GPU) have a worker's load beside them. That is what keeps the device busy; by how much is
// gpulab-bench-labs' to measure.
void workersLoadWhileTheDeviceSteps(const RecordingSink& s, int workers, bool gpu) {
  const std::set<std::string> yours = lanes(s, "timeline-yours");
  QVERIFY2(yours.count("loop") == 0, "with workers, the loop loaded a batch itself");
  std::map<std::string, int> loadsPerWorker;
  for (const lab::Span& load : spansOf(s, "timeline-yours", isWorkerLane)) ++loadsPerWorker[load.lane];
  // Worker w builds batches w, w + W, ... (data::DataLoader): every worker loads some of the first 8.
  QCOMPARE(loadsPerWorker.size(), std::size_t(workers));
  int loads = 0;
  for (const auto& [lane, n] : loadsPerWorker) {
    QVERIFY2(n >= static_cast<int>(kShownSteps) / workers, qPrintable(QString("%1 loaded %2 batches").arg(QString::fromStdString(lane)).arg(n)));
    loads += n;
  }
  QVERIFY(loads >= static_cast<int>(kShownSteps));  // every batch the shown steps ran on
  const std::vector<lab::Span> steps = spansOn(s, "timeline-yours", gpu ? "compute" : "step");
  QCOMPARE(steps.size(), kShownSteps);
  const std::size_t beside = overlapping(steps, spansOf(s, "timeline-yours", isWorkerLane));
  qInfo("%d workers: %d loads in the timeline's window; %zu of its %zu steps had a worker loading beside them", workers, loads, beside,
        steps.size());
  // The first step starts as its batch arrives, when that batch's worker starts its next one, a read of
  // two steps: a worker loads beside it. Not every step: once the workers are 2 x W batches ahead they
  // wait for the loop (data::DataLoader), and the device, fed, runs on alone (the emulated GPU here: 3 of
  // 8 steps beside a load, the workers done 12 batches while the stream ran its fourth step).
  QVERIFY2(beside >= 1, qPrintable(QString("none of %1 steps").arg(steps.size())));
}

// With 0 workers the loop loads every batch itself, on its own lane; on the CPU, where the loop's
// thread also runs the step, no load overlaps a step: the device waits while the loop loads.
void theLoopLoadsAlone(const RecordingSink& s, bool gpu) {
  const std::set<std::string> naive = lanes(s, "timeline-naive");
  QVERIFY(naive.count("loop") == 1);
  QVERIFY(std::none_of(naive.begin(), naive.end(), isWorkerLane));
  const std::vector<lab::Span> loads = spansOn(s, "timeline-naive", "loop");
  QVERIFY2(loads.size() >= kShownSteps, qPrintable(QString("%1 loads").arg(loads.size())));
  if (!gpu) QCOMPARE(overlapping(spansOn(s, "timeline-naive", "step"), loads), std::size_t(0));
}

// How many of the timeline's steps the loop had queued (its "step" span ended) before the device had
// finished the step before (that step's "compute" span ended): the loop running ahead of the device.
std::size_t stepsQueuedAhead(const RecordingSink& s, const std::string& view) {
  const std::vector<lab::Span> queued = spansOn(s, view, "step"), compute = spansOn(s, view, "compute");
  std::size_t ahead = 0;
  for (std::size_t i = 1; i < std::min(queued.size(), compute.size()); ++i) ahead += queued[i].end < compute[i - 1].end ? 1 : 0;
  return ahead;
}

// Pinned batches copied non_blocking: the copy is queued and the loop goes on, so it queues steps
// while the device still runs earlier ones. Pageable batches' blocking copies wait for the stream --
// for the step before -- so the loop never gets ahead, with the same 4 workers feeding it. (On the same
// clock: the stream's spans are on the device's, which starts when the loop's does, give or take a
// wake-up that only moves the device's spans earlier -- against a pageable step's wait.)
void pinnedCopiesLetTheLoopRunAhead(const std::string& device, const std::string& hidden) {
  std::map<bool, std::size_t> ahead;
  for (const bool pinned : {true, false}) {
    auto settings = timelineSettings(4, pinned);
    settings["hidden"] = hidden;
    ahead[pinned] = stepsQueuedAhead(runFeeding(settings, device), "timeline-yours");
  }
  qInfo("%s, 4 workers: the loop queued %zu of %zu steps before the device had finished the one before with pinned + non_blocking "
        "copies, %zu with pageable ones",
        device.c_str(), ahead[true], kShownSteps - 1, ahead[false]);
  QCOMPARE(ahead[false], std::size_t(0));
  QVERIFY(ahead[true] >= 1);
}

}  // namespace

class TestFeedingLab : public QObject {
  Q_OBJECT

 private slots:
  void initTestCase() { GPULAB_SKIP_WITHOUT_PYTHON_LABS(); }  // the feeding lab is Python

  // Issue 27 6.3: Stop is seen inside each loader's timed loop (100,000 steps ignored it > 150 s). The
  // one clock this suite reads, kept on purpose: it catches a hang, not a speed -- a step is well under
  // 100 ms here and a run that missed Stop would go on for minutes, so 2 s is the slack of more than 20
  // steps, which no busy machine comes near, and a Stop that took longer is a bug the learner sees.
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

  // The lesson: with 0 workers the CPU waits while the loop loads; 4 workers load while it trains.
  void workersLoadWhileTheCpuTrains() {
    const RecordingSink s = runFeeding(timelineSettings(4, true), "cpu");
    workersLoadWhileTheDeviceSteps(s, 4, false);
    theLoopLoadsAlone(s, false);
  }

  // The lesson: on the CPU one worker already helps -- it loads the next batch while the loop computes.
  void onTheCpuOneWorkerLoadsWhileTheLoopComputes() {
    const RecordingSink s = runFeeding(timelineSettings(1, false), "cpu");
    workersLoadWhileTheDeviceSteps(s, 1, false);
  }

  void pinnedNonBlockingCopiesLetTheLoopRunAheadOfTheEmulatedGpu() {
    const auto gpu = cuda::emulatedDevice();
    if (!gpu) QSKIP("the emulated GPU is off here");
    pinnedCopiesLetTheLoopRunAhead(gpu->str(), "256,128");
  }

  void workersLoadWhileTheEmulatedGpuComputes() {
    const auto gpu = cuda::emulatedDevice();
    if (!gpu) QSKIP("the emulated GPU is off here");
    const RecordingSink s = runFeeding(timelineSettings(4, true), gpu->str());
    workersLoadWhileTheDeviceSteps(s, 4, true);
    theLoopLoadsAlone(s, true);
  }

  // On a GPU the lesson's 256,128 model is launch-bound: the GPU finishes a step before the host has
  // queued the next, so no loop runs ahead of it and the workers' loads have little compute to sit
  // beside. Two 8192-wide layers make a step of about a millisecond of GPU work, which the host queues
  // well ahead of (as thePrefetchersCopiesOverlapTheCompute does).
  void onAGpu() {
    if (!cuda::isAvailable()) QSKIP("no GPU here: the emulated GPU's cases above stand in");
    auto settings = timelineSettings(4, true);
    settings["hidden"] = "8192,8192";
    const RecordingSink s = runFeeding(settings, "cuda:0");
    workersLoadWhileTheDeviceSteps(s, 4, true);
    theLoopLoadsAlone(s, true);
    pinnedCopiesLetTheLoopRunAhead("cuda:0", "8192,8192");
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

  // The prefetcher's copy of the next batch runs on its copy stream while the step computes: its spans
  // on the copy stream's lane lie beside the compute stream's step spans (on the emulated GPU the two
  // streams are two threads). A copy queued on the compute stream would run between two steps, beside
  // none. What share of the copies' time overlaps (96% on the emulated GPU here) is a timing:
  // gpulab-bench-labs prints it.
  // On a real GPU the step must keep the GPU busy for a copy to have anything to run beside: the
  // lesson's 256,128 model is launch-bound there, the GPU idles between its kernels while the host
  // queues them, and the copies land in those gaps (3% overlapped on an H100, 2026-11-26). Two
  // 8192-wide layers make a step of about a millisecond of GPU work, which the host queues well ahead of.
  void thePrefetchersCopiesOverlapTheCompute() {
    const bool real = cuda::isAvailable();
    const auto gpu = real ? std::optional<Device>(Device(DeviceType::CUDA, 0)) : cuda::emulatedDevice();
    if (!gpu) QSKIP("no GPU and the emulated GPU is off");
    auto settings = timelineSettings(4, true);
    settings["hidden"] = real ? "8192,8192" : "256,128";
    const RecordingSink s = runFeeding(settings, gpu->str());
    const std::vector<lab::Span> copies = spansOn(s, "timeline-prefetch", "copy stream");
    const std::vector<lab::Span> compute = spansOn(s, "timeline-prefetch", "compute");
    QCOMPARE(copies.size(), kShownSteps);
    QCOMPARE(compute.size(), kShownSteps);
    const std::size_t beside = overlapping(copies, compute);
    qInfo("%s: %zu of the copy stream's %zu copies ran beside a step's compute", gpu->str().c_str(), beside, copies.size());
    QVERIFY(beside >= 1);
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
