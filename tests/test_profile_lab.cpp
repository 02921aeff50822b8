// The profiler lesson (lessons/09-profiler) makes claims from its run; these tests check the DIRECTION
// of each on this machine, through the profile lab (Python, lessons/09-profiler/profile_lab.py):
// - the seed lessons' tiny regression step is overhead-bound (its matrix products, each timed alone at
//   its shape, need well under half of the step), and the lesson's hint -- hidden 2048,2048 and batch
//   512 -- makes it compute-bound (the challenge's 50%); the verdict sentence agrees with the number
//   beside it;
// - the op table lists the step's ops with PyTorch's names and per-step counts; the trace file is
//   written and parses as the Chrome trace format; on a GPU (the emulated one here) the table has the
//   device's columns and sorts by them.
#include <QFile>
#include <QFileInfo>
#include <QTemporaryDir>
#include <QJsonArray>
#include <QJsonDocument>
#include <QJsonObject>

#include <algorithm>
#include <filesystem>

#include "engine/runtime/cuda_runtime.h"
#include "engine/runtime/emulated_gpu.h"
#include "lab_runner.h"
#include "test_util.h"
#include "engine/core/atomic_file.h"

using namespace gpulab;

namespace {

using test::measured;
using test::RecordingSink;

RecordingSink runProfile(const std::map<std::string, std::string>& settings) { return test::runLabOn("profile", settings); }

// The closing sentence names the kind of step the number beside it says: compute-bound exactly when
// the products alone fill half of the step or more.
bool verdictSays(const RecordingSink& s, const std::string& kind) {
  const bool compute = measured(s, "matrix products alone: share of the step") >= 50;
  if ((kind == "compute-bound") != compute) return false;
  return std::any_of(s.messages.begin(), s.messages.end(), [&](const std::string& m) {
    return m.find("so it is " + kind) != std::string::npos &&
           m.find(compute ? "overhead-bound" : "compute-bound") == std::string::npos;
  });
}

}  // namespace

class TestProfileLab : public QObject {
  Q_OBJECT

  QTemporaryDir cache_;

 private slots:
  // The default trace goes to this test's own cache folder, not the user's (nor another test's).
  void initTestCase() {
    GPULAB_SKIP_WITHOUT_PYTHON_LABS();
    QVERIFY(cache_.isValid());
    qputenv("XDG_CACHE_HOME", cache_.path().toUtf8());
  }

  void theTinyStepIsOverheadBound() {
    const RecordingSink s = runProfile({{"warmup", "2"}, {"steps", "5"}});
    const double share = measured(s, "matrix products alone: share of the step");
    qInfo("tiny regression step: %.3f ms, %.0f ops, products alone %.1f%% (their ops %.1f%% of self CPU time; %.1f GFLOP/s, large %.1f)",
          measured(s, "profiled step time"), measured(s, "ops per step"), share, measured(s, "matrix products: share of self CPU time"),
          measured(s, "matrix-product rate at the step's shapes"), measured(s, "peak matrix-product rate"));
    QVERIFY(share < 50);
    QVERIFY(verdictSays(s, "overhead-bound"));
    // 16 x 64 and 64 x 1 weights, batch 64: forward and weight gradients of both, the input gradient of the second.
    QCOMPARE(measured(s, "matrix-product GFLOP per step"), (4.0 * 64 * 16 * 64 + 6.0 * 64 * 64 * 1) / 1e9);
    QVERIFY(std::any_of(s.messages.begin(), s.messages.end(), [](const std::string& m) { return m.find("so it is overhead-bound") != std::string::npos; }));

    // The op table: PyTorch's names, per-step counts (5 steps: 2 linears each -> 10 calls).
    std::map<std::string, std::int64_t> calls;
    for (const lab::Update& u : s.updates) {
      if (const auto* r = std::get_if<lab::Row>(&u); r && r->view == "ops") calls[std::get<std::string>(r->cells[0])] = static_cast<std::int64_t>(test::number(r->cells[5]));
    }
    QCOMPARE(calls["aten::linear"], 10);
    QCOMPARE(calls["Optimizer.step#Adam.step"], 5);
    QCOMPARE(calls["autograd::engine::evaluate_function: AddmmBackward0"], 10);

    // The trace: written where the run said, in this user's cache folder (never a shared /tmp), and
    // the Chrome trace format.
    const std::string path = userCacheFolder() + "/profile-trace.json";
    QVERIFY(std::any_of(s.messages.begin(), s.messages.end(), [&](const std::string& m) { return m.find("export_chrome_trace(\"" + path + "\")") != std::string::npos; }));
    QFile f(QString::fromStdString(path));
    QVERIFY(f.open(QIODevice::ReadOnly));
    const QJsonDocument doc = QJsonDocument::fromJson(f.readAll());
    QVERIFY(doc.object()["traceEvents"].toArray().size() >= 5 * measured(s, "ops per step"));  // every op of every step
  }

  // Issue 27 6.1: the learner chooses where the trace goes; one that cannot be written is a warning,
  // and the run keeps its measurements (it failed whole before).
  void aTraceThatCannotBeWrittenLosesNothingElse() {
    QTemporaryDir dir;
    const QString chosen = dir.filePath("mine.json");
    const RecordingSink ok = runProfile({{"warmup", "0"}, {"steps", "1"}, {"trace_file", chosen.toStdString()}});
    QVERIFY(QFileInfo(chosen).size() > 0);
    const std::string missing = dir.filePath("no-such-folder/trace.json").toStdString();
    const RecordingSink failed = runProfile({{"warmup", "0"}, {"steps", "1"}, {"trace_file", missing}});
    bool warned = false;
    for (const auto& [kind, text] : failed.kinds) warned = warned || (kind == lab::MessageKind::Warning && text.find(missing) != std::string::npos);
    QVERIFY(warned);
    QVERIFY(failed.measured.count("profiled step time") == 1);
    QCOMPARE(failed.measured.size(), ok.measured.size());
  }

  void theLessonsHintMakesItComputeBound() {
#if defined(__SANITIZE_ADDRESS__)
    QSKIP("a claim about this machine's speed: AddressSanitizer slows the code between the products, not OpenBLAS's");
#endif
    // A claim about this machine's speed, from two profiled steps: another process taking the CPU
    // for a moment slows the ops between the products most (they wait on memory), and CI machines
    // share their CPUs. The best of three runs is what the machine does (noise only lowers it).
    RecordingSink s = runProfile({{"hidden", "2048,2048"}, {"batch_size", "512"}, {"warmup", "1"}, {"steps", "2"}, {"trace", "false"}});
    double share = measured(s, "matrix products alone: share of the step");
    for (int attempt = 1; attempt < 3 && share < 50; ++attempt) {
      s = runProfile({{"hidden", "2048,2048"}, {"batch_size", "512"}, {"warmup", "1"}, {"steps", "2"}, {"trace", "false"}});
      share = measured(s, "matrix products alone: share of the step");
    }
    qInfo("hidden 2048,2048, batch 512: %.1f ms a step, products alone %.1f%% (their ops %.1f%% of self CPU time; %.1f GFLOP/s, large %.1f)",
          measured(s, "profiled step time"), share, measured(s, "matrix products: share of self CPU time"),
          measured(s, "matrix-product rate at the step's shapes"), measured(s, "peak matrix-product rate"));
    QVERIFY(share >= 50);
    QVERIFY(verdictSays(s, "compute-bound"));
  }

  // On a CUDA device -- the emulated GPU here -- the op table gains the device's columns and sorts by
  // them: the first row spent the most time on the device's stream; on the CPU they are absent.
  void onAGpuTheTableSortsByDeviceTime() {
    if (!cuda::emulatedDevice() && !cuda::isAvailable()) QSKIP("no GPU and no emulated GPU here");
    const std::string gpu = cuda::isAvailable() ? "cuda:0" : cuda::emulatedDevice()->str();
    const RecordingSink s = runProfile({{"device", gpu}, {"sort_by", "self_cuda_time_total"}, {"warmup", "1"}, {"steps", "2"}, {"trace", "false"}});
    const auto rows = s.rows("ops");
    QVERIFY(rows.size() >= 5);
    QCOMPARE(rows.front().cells.size(), std::size_t(9));  // name, 4 CPU, 3 CUDA, calls
    std::vector<double> selfDevice;
    for (const lab::Row& r : rows) selfDevice.push_back(test::number(r.cells[6]));
    qInfo("%s: the top op (%s) spent %.1f us on the stream", gpu.c_str(), std::get<std::string>(rows.front().cells[0]).c_str(), selfDevice.front());
    QVERIFY(selfDevice.front() > 0);
    QVERIFY(std::is_sorted(selfDevice.rbegin(), selfDevice.rend()));
    const RecordingSink cpu = runProfile({{"device", "cpu"}, {"warmup", "0"}, {"steps", "1"}, {"trace", "false"}});
    QCOMPARE(cpu.rows("ops").front().cells.size(), std::size_t(6));
  }
};

QTEST_GUILESS_MAIN(TestProfileLab)
#include "test_profile_lab.moc"
