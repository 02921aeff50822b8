// gpulab-cli as a learner or a script uses it: JSON lines with the documented events and fields,
// one-line errors with a non-zero exit, and the device report.
#include <QJsonDocument>
#include <QJsonObject>
#include <QProcess>

#include "test_util.h"

namespace {

struct Run {
  int exitCode = -1;
  QString out, err;
  QList<QJsonObject> events;
};

Run cli(const QStringList& args, const QProcessEnvironment& env = QProcessEnvironment::systemEnvironment()) {
  QProcess p;
  p.setProcessEnvironment(env);
  p.start(GPULAB_CLI_PATH, args);
  p.waitForFinished(300000);
  Run r{p.exitCode(), QString::fromUtf8(p.readAllStandardOutput()), QString::fromUtf8(p.readAllStandardError()), {}};
  for (const QString& line : r.out.split('\n', Qt::SkipEmptyParts)) {
    const QJsonDocument doc = QJsonDocument::fromJson(line.toUtf8());
    if (doc.isObject()) r.events.append(doc.object());
  }
  return r;
}

}  // namespace

class TestCli : public QObject {
  Q_OBJECT

 private slots:
  void devicesJsonReportsDiscovery() {
    Run r = cli({"devices", "--json"});
    QCOMPARE(r.exitCode, 0);
    QCOMPARE(r.events.size(), 1);
    const QJsonObject o = r.events.front();
    QCOMPARE(o["cuda_usable"].toBool(), gpulab::test::cudaUsable());
    QCOMPARE(o["default_device"].toString(), gpulab::test::cudaUsable() ? QString("cuda:0") : QString("cpu"));
    if (!o["cuda_usable"].toBool()) QVERIFY(!o["reason"].toString().isEmpty());
    Run text = cli({"devices"});
    QVERIFY(text.out.contains("default device:"));
  }

  void hiddenGpusAreReportedAsSuch() {
    if (!gpulab::cuda::compiledWithCuda()) QSKIP("built without CUDA");
    QProcessEnvironment env = QProcessEnvironment::systemEnvironment();
    env.insert("CUDA_VISIBLE_DEVICES", "");
    Run r = cli({"devices", "--json"}, env);
    QCOMPARE(r.events.front()["cuda_usable"].toBool(), false);
    const QString reason = r.events.front()["reason"].toString();
    // With a driver, CUDA_VISIBLE_DEVICES hides every GPU; without one, the missing driver is named.
    QVERIFY2(reason.contains("CUDA_VISIBLE_DEVICES") || reason.contains("driver"), qPrintable(reason));
  }

  void trainJsonStreamsStepEpochAndDoneEvents() {
    Run r = cli({"train", "--dataset", "regression", "--model", "mlp", "--hidden", "32,16", "--optimizer", "sgd", "--lr", "0.01",
                 "--batch-size", "16", "--epochs", "2", "--device", "cpu", "--seed", "3", "--workers", "1", "--json"});
    QCOMPARE(r.exitCode, 0);
    QStringList kinds;
    qint64 lastStep = 0, maxGap = 0;
    for (const QJsonObject& e : r.events) {
      kinds << e["event"].toString();
      if (e["event"] == "step") {
        for (const char* key : {"epoch", "step", "loss", "samples_per_s", "allocated_bytes", "reserved_bytes"}) QVERIFY2(e.contains(key), key);
        maxGap = std::max(maxGap, e["step"].toInteger() - lastStep);
        lastStep = e["step"].toInteger();
      }
    }
    QVERIFY(maxGap <= 50);
    QCOMPARE(lastStep, 128);  // 1024 / 16 * 2
    QCOMPARE(kinds.count("epoch"), 2);
    QCOMPARE(kinds.last(), QString("done"));
    const QJsonObject done = r.events.last();
    for (const char* key : {"train_loss", "eval_loss", "seconds", "steps", "device", "peak_allocated_bytes", "peak_reserved_bytes"}) QVERIFY2(done.contains(key), key);
    QCOMPARE(done["device"].toString(), QString("cpu"));
    QCOMPARE(done["steps"].toInteger(), 128);
  }

  void humanOutputIsATable() {
    Run r = cli({"train", "--epochs", "2", "--device", "cpu"});
    QCOMPARE(r.exitCode, 0);
    QVERIFY(r.out.contains("epoch  train_loss   eval_loss"));
    QVERIFY(r.out.contains("Done: 32 steps on cpu"));
  }

  void badValuesFailWithOneLineAndAnErrorEvent() {
    Run r = cli({"train", "--batch-size", "0", "--json"});
    QCOMPARE(r.exitCode, 2);
    QCOMPARE(r.err.count('\n'), 1);
    QVERIFY(r.err.contains("'batch_size'"));
    QCOMPARE(r.events.last()["event"].toString(), QString("error"));
    Run unknown = cli({"train", "--warp-speed", "9"});
    QCOMPARE(unknown.exitCode, 2);
    QVERIFY(unknown.err.contains("unknown parameter 'warp_speed'"));
    QCOMPARE(cli({"frobnicate"}).exitCode, 2);
  }

  void missingDataSetIsNamed() {
    QProcessEnvironment env = QProcessEnvironment::systemEnvironment();
    env.insert("GPULAB_FASHION_MNIST_DIR", "/nonexistent");
    Run r = cli({"train", "--dataset", "fashion-mnist", "--json"}, env);
    QCOMPARE(r.exitCode, 1);
    QVERIFY(r.err.contains("dataset-fashion-mnist"));
    QCOMPARE(r.events.last()["type"].toString(), QString("IOError"));
  }

  void memorySweepReportsOomAndRecovery() {
    Run r = cli({"memory", "--oom-sweep", "--dataset", "regression", "--device", "cpu", "--cap-mb", "4", "--json"});
    QCOMPARE(r.exitCode, 0);
    QStringList kinds;
    for (const QJsonObject& e : r.events) kinds << e["event"].toString();
    QVERIFY(kinds.contains("memory"));
    const int oom = kinds.indexOf("oom"), recovered = kinds.indexOf("recovered");
    QVERIFY(oom >= 0 && recovered > oom);
    QVERIFY(r.events[oom]["message"].toString().startsWith("CPU out of memory (emulated"));
    QVERIFY(r.events[oom]["batch_size"].toInteger() > 0);
    QCOMPARE(r.events[recovered]["effective_batch"].toInteger(), r.events[oom]["batch_size"].toInteger());
    QCOMPARE(kinds.last(), QString("done"));
    Run report = cli({"memory", "--report", "--dataset", "regression", "--device", "cpu"});
    QCOMPARE(report.exitCode, 0);
    QVERIFY(report.out.contains("after empty_cache()"));
    QVERIFY(report.out.contains("GPU Lab CPU memory summary"));
  }

  void lessonsAreListedAndRunHeadless() {
    Run list = cli({"lessons"});
    QCOMPARE(list.exitCode, 0);
    const QStringList lines = list.out.split('\n', Qt::SkipEmptyParts);
    QCOMPARE(lines.size(), 3);
    QVERIFY(lines[0].startsWith("device-setup\t"));
    QVERIFY(lines[0].endsWith("\tok"));
    Run lesson = cli({"lesson", "same-device-rule", "--quick", "--json"});
    QCOMPARE(lesson.exitCode, 0);
    QStringList levels;
    for (const QJsonObject& e : lesson.events)
      if (e["event"] == "message") levels << e["level"].toString();
    QVERIFY(levels.contains("engine_error"));  // the device-mismatch error, shown on purpose
    QCOMPARE(cli({"lesson", "no-such-lesson"}).exitCode, 2);
  }

  void cudaWithoutAGpuExplainsWhy() {
    if (gpulab::test::cudaUsable()) QSKIP("a GPU is usable here");
    Run r = cli({"train", "--device", "cuda", "--json"});
    QCOMPARE(r.exitCode, 1);
    QVERIFY(r.err.contains("no usable GPU"));
  }
};

QTEST_GUILESS_MAIN(TestCli)
#include "test_cli.moc"
