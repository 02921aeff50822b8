// Responsiveness benchmark: while a lab streams metrics as fast as it can (a step report every
// step), how late does the GUI thread serve its events, and how much training throughput does the
// GUI cost? Prints the GUI event latency p50/p99 (target p99 < 16 ms) and the ratio of training
// throughput in the window to the same run headless, as gpulab-cli runs it (target >= 95%).
// Run: QT_QPA_PLATFORM=offscreen build/bin/gpulab-bench-gui   (GPULAB_BENCH_ROUNDS=N: N rounds, not 9)
#include <QApplication>
#include <QElapsedTimer>
#include <QDir>
#include <QSignalSpy>
#include <QTemporaryDir>
#include <QTimer>
#include <sys/resource.h>

#include <algorithm>
#include <cstdio>
#include <vector>

#include "app/gui/main_window.h"
#include "app/gui/plot_panel.h"
#include "app/gui/run_panel.h"
#include "app/course/course.h"

namespace {

const std::map<std::string, std::string> kSettings = {
    {"dataset", "regression"}, {"samples", "65536"}, {"hidden", "64"}, {"batch_size", "64"},
    {"epochs", "40"},          {"device", "cpu"},    {"log_every", "1"}};

// A run's length as its "done" record gives it: steps and seconds.
struct Summary {
  double steps = 0, seconds = 1;
  // Takes the numbers from `update` when it is the "done" record.
  void take(const gpulab::lab::Update& update) {
    const auto* r = std::get_if<gpulab::lab::Record>(&update);
    if (!r || r->event != "done") return;
    steps = r->number("steps");
    seconds = r->number("seconds", 1);
  }
};

struct Done final : gpulab::lab::MetricSink {
  Summary summary;
  void send(const gpulab::lab::Update& update) override { summary.take(update); }
};

// The training lab, as the lessons run it (Python: lessons/03-training-loop/train_lab.py).
std::unique_ptr<gpulab::lab::Lab> trainLab() {
  static const gpulab::course::Course course = gpulab::course::loadCourse();
  return course.makeLab("train");
}

double headlessStepsPerSecond() {
  auto lab = trainLab();
  auto params = lab->defaults();
  for (const auto& [k, v] : kSettings) params.set(k, v);
  Done sink;
  gpulab::lab::StopToken stop;
  lab->run(params, sink, stop);
  return sink.summary.steps / sink.summary.seconds;
}

double percentile(std::vector<double> v, double p) {
  std::sort(v.begin(), v.end());
  return v[static_cast<std::size_t>(p * static_cast<double>(v.size() - 1))];
}

}  // namespace

int main(int argc, char** argv) {
  QApplication app(argc, argv);
  QTemporaryDir tmp;
  gpulab::app::MainWindow window(gpulab::course::kEmbeddedRoot, QDir::temp().filePath("gpulab-bench-progress.json"));
  window.show();
  window.selectLesson("training-loop");

  // The GUI thread's lateness: a 2 ms timer whose intervals are recorded while the run streams.
  std::vector<double> lateness;
  QElapsedTimer clock;
  QTimer probe;
  probe.setTimerType(Qt::PreciseTimer);
  probe.setInterval(2);
  qint64 last = -1;
  QObject::connect(&probe, &QTimer::timeout, [&] {
    const qint64 now = clock.nsecsElapsed();
    if (last >= 0) lateness.push_back(std::max(0.0, (now - last) / 1e6 - 2.0));
    last = now;
  });
  Summary inWindow;
  QObject::connect(&window.runner(), &gpulab::app::LabRunner::batchReady, [&](const gpulab::app::MetricBatch& b) {
    for (const gpulab::lab::Update& u : b.updates) inWindow.take(u);
  });
  QSignalSpy finished(&window, &gpulab::app::MainWindow::runFinished);

  // Headless and in-window runs alternate, nine each by default, so that drift of this machine's speed
  // (other load, frequency) falls on both sides; the medians are compared.
  std::vector<double> headlessRates, windowRates;
  clock.start();
  double guiBusySeconds = 0, windowSeconds = 0;
  auto threadCpuSeconds = [] {
    rusage r{};
    getrusage(RUSAGE_THREAD, &r);
    return static_cast<double>(r.ru_utime.tv_sec + r.ru_stime.tv_sec) + (r.ru_utime.tv_usec + r.ru_stime.tv_usec) / 1e6;
  };
  const QByteArray roundsText = qgetenv("GPULAB_BENCH_ROUNDS");
  bool roundsRead = roundsText.isEmpty();
  const int rounds = roundsText.isEmpty() ? 9 : roundsText.toInt(&roundsRead);
  if (!roundsRead || rounds < 1) {
    std::fprintf(stderr, "GPULAB_BENCH_ROUNDS must be a whole number of rounds, at least 1; it is '%s'\n", roundsText.constData());
    return 2;
  }
  for (int round = 0; round < rounds; ++round) {
    headlessRates.push_back(headlessStepsPerSecond());
    last = -1;
    probe.start();
    const double cpu0 = threadCpuSeconds();
    QElapsedTimer wall;
    wall.start();
    window.plotPanel()->beginRun(kSettings);  // as MainWindow::startRun does: fresh curves for the run
    window.runner().start(trainLab(), kSettings);
    finished.wait(600000);
    probe.stop();
    guiBusySeconds += threadCpuSeconds() - cpu0;
    windowSeconds += wall.nsecsElapsed() / 1e9;
    window.plotPanel()->endRun({});
    windowRates.push_back(inWindow.steps / inWindow.seconds);
  }
  const double headless = percentile(headlessRates, 0.5), gui = percentile(windowRates, 0.5);

  const double p50 = percentile(lateness, 0.5), p99 = percentile(lateness, 0.99);
  std::printf("GUI event latency while streaming (%zu samples): p50 %.2f ms, p99 %.2f ms (target p99 < 16 ms) -> %s\n",
              lateness.size(), p50, p99, p99 < 16 ? "OK" : "TOO SLOW");
  std::printf("the GUI thread was busy %.1f%% of the time while runs streamed\n", 100 * guiBusySeconds / windowSeconds);
  std::printf("training throughput: in the window %.0f steps/s, headless %.0f steps/s, ratio %.1f%% (target >= 95%%) -> %s\n", gui,
              headless, 100 * gui / headless, gui >= 0.95 * headless ? "OK" : "TOO SLOW");
  return p99 < 16 && gui >= 0.95 * headless ? 0 : 1;
}
