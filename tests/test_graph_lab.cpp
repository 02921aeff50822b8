// The CUDA graphs lesson (lessons/16-cuda-graphs) makes claims from its run; these tests check each,
// through the graphs lab:
// - the challenge is not met at the lesson's start (capture off: nothing captured, nothing compared),
//   and is met by capturing: a replay stands for the whole step, and its losses equal the eager ones;
// - reading the loss inside the capture raises PyTorch's error, and the run says why;
// - the emulated GPU is never timed, and says so;
// - on a real GPU (skipped here) the small step is launch-bound: a replay queues in a fraction of the
//   eager step's host time and runs faster, and the verdict sentence agrees with the runs' numbers.
#include <algorithm>
#include <chrono>
#include <thread>

#include "engine/runtime/cuda_runtime.h"
#include "engine/runtime/emulated_gpu.h"
#include "lab_runner.h"
#include "test_util.h"

using namespace gpulab;

namespace {

using test::measured;
using test::RecordingSink;

bool said(const RecordingSink& s, const std::string& text) {
  return std::any_of(s.messages.begin(), s.messages.end(), [&](const std::string& m) { return m.find(text) != std::string::npos; });
}

}  // namespace

class TestGraphLab : public QObject {
  Q_OBJECT

 private slots:
  void initTestCase() { GPULAB_SKIP_WITHOUT_PYTHON_LABS(); }

  void init() {
    if (!cuda::emulatedDevice() && !cuda::isAvailable()) QSKIP("no GPU and the emulated GPU is off");
  }

  void theStarterDoesNotMeetTheChallenge() {
    const RecordingSink s = test::runLabOn("graphs", {{"steps", "20"}, {"repeats", "1"}}, "auto");
    QVERIFY(s.done.has_value());
    QCOMPARE(s.measured.count("kernels and copies per replay"), std::size_t(0));
    QCOMPARE(s.measured.count("largest loss difference, graph vs eager"), std::size_t(0));
  }

  void capturingMeetsTheChallenge() {
    const std::string device = cuda::emulatedDevice() ? cuda::emulatedDevice()->str() : "cuda:0";
    const RecordingSink s = test::runLabOn("graphs", {{"steps", "30"}, {"repeats", "1"}, {"capture", "true"}}, device);
    QVERIFY(s.errors().empty());
    qInfo("%s: %.0f kernels and copies per replay, losses differ by %g", device.c_str(), measured(s, "kernels and copies per replay"),
          measured(s, "largest loss difference, graph vs eager"));
    QVERIFY(measured(s, "kernels and copies per replay") >= 10);
    QVERIFY(measured(s, "largest loss difference, graph vs eager") <= 1e-6);
    QVERIFY(said(s, "the same losses"));
    if (cuda::emulatedDevice() && device == cuda::emulatedDevice()->str()) {
      QVERIFY(said(s, "No timing is drawn from the emulated GPU"));
      QCOMPARE(s.measured.count("graph steps/s (median)"), std::size_t(0));
    }
  }

  void readingTheLossInsideTheCaptureRaises() {
    const RecordingSink s = test::runLabOn("graphs", {{"steps", "20"}, {"repeats", "1"}, {"capture", "true"}, {"read_loss_inside", "true"}}, "auto");
    QCOMPARE(s.errors().size(), std::size_t(1));
    QVERIFY2(s.errors().front().find("operation not permitted when stream is capturing") != std::string::npos, s.errors().front().c_str());
    QVERIFY(said(s, "Read the static loss after g.replay()"));
    QVERIFY(s.done->find("error"));
    QCOMPARE(s.measured.count("largest loss difference, graph vs eager"), std::size_t(0));
  }

  // On a GPU the seed model's step is launch-bound: the replay queues in a fraction of the eager step's
  // host time, and the loop runs faster in every run -- and the verdict says what the numbers say.
  void onAGpuTheReplayIsFaster() {
    if (!cuda::isAvailable()) QSKIP("no GPU here: the emulated GPU is never timed");
    const RecordingSink s = test::runLabOn("graphs", {{"steps", "300"}, {"repeats", "5"}, {"capture", "true"}}, "cuda:0");
    const double eager = measured(s, "eager steps/s (median)"), graph = measured(s, "graph steps/s (median)");
    const double eagerHost = measured(s, "host time to queue one eager step (median)"), replayHost = measured(s, "host time to queue one replay (median)");
    qInfo("cuda:0: eager %.0f steps/s (host %.1f us a step), graph %.0f steps/s (host %.1f us a replay), %.2fx", eager, eagerHost, graph,
          replayHost, graph / eager);
    QVERIFY(replayHost < 0.5 * eagerHost);
    QVERIFY(graph > eager);
    // The verdict's words follow the table: faster in every run only if the slowest graph run beat the fastest eager one.
    double eagerFastest = 0, eagerSlowest = 1e300, graphFastest = 0, graphSlowest = 1e300;
    for (const lab::Row& r : s.rows("runs")) {
      const double e = test::number(r.cells[3]), g = test::number(r.cells[4]);
      eagerFastest = std::max(eagerFastest, e);
      eagerSlowest = std::min(eagerSlowest, e);
      graphFastest = std::max(graphFastest, g);
      graphSlowest = std::min(graphSlowest, g);
    }
    QCOMPARE(said(s, "The replayed graph is faster in every run"), graphSlowest > eagerFastest);
    QCOMPARE(said(s, "The eager steps are faster in every run"), eagerSlowest > graphFastest);
    QCOMPARE(said(s, "No clear difference here"), graphSlowest <= eagerFastest && eagerSlowest <= graphFastest);
  }

  // Stop is looked at every step: a run of a million steps ends within a moment of the request, and
  // sends no half-measured run.
  void stopEndsALongRunAtOnce() {
    lab::StopToken stop;
    RecordingSink sink;
    std::thread stopper([&] {
      std::this_thread::sleep_for(std::chrono::milliseconds(300));
      stop.requestStop();
    });
    const auto start = std::chrono::steady_clock::now();
    test::runLab("graphs", {{"device", "auto"}, {"steps", "100000"}, {"repeats", "20"}, {"capture", "true"}}, sink, &stop);
    const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    stopper.join();
    qInfo("stopped after %.2f s", seconds);
    QVERIFY(sink.done->number("stopped"));
    QVERIFY2(seconds < 2.0, "the run ended within a moment of Stop");
    QCOMPARE(sink.rows("runs").size(), std::size_t(0));
    QCOMPARE(sink.measured.count("largest loss difference, graph vs eager"), std::size_t(0));
  }

  void badSettingsAreRefusedByName() {
    const std::string e = test::textOf([] { test::runLabOn("graphs", {{"hidden", "0"}}, "auto"); });
    QVERIFY2(e.find("hidden") != std::string::npos, e.c_str());
  }
};

QTEST_GUILESS_MAIN(TestGraphLab)
#include "test_graph_lab.moc"
