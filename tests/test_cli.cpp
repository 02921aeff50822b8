// gpulab-cli as a learner or a script uses it: JSON lines with the documented events and fields,
// one-line errors with a non-zero exit, and the device report.
#include <QFileInfo>
#include <QJsonArray>
#include <QJsonDocument>
#include <QJsonObject>
#include <QDir>
#include <QFile>
#include <QElapsedTimer>
#include <QProcess>
#include <QTemporaryDir>
#include <QRegularExpression>
#include <clocale>
#include <csignal>

#include <signal.h>

#include "app/course/lesson.h"
#include "engine/runtime/emulated_gpu.h"
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

// An --check-exercises event whose answers all graded as they should: the starter and at least three
// wrong answers not met, the solution and at least one right answer met.
bool gradedAsItShould(const QJsonObject& event) {
  int wrong = 0, right = 0;
  for (const QJsonValue& v : event["answers"].toArray()) {
    const QJsonObject a = v.toObject();
    if (!a["ok"].toBool() || a["met"].toBool() != a["should_meet"].toBool()) return false;
    const QString which = a["answer"].toString();
    wrong += which.startsWith("wrong answer");
    right += which.startsWith("right answer");
    if ((which == "starter" && a["met"].toBool()) || (which == "solution" && !a["met"].toBool())) return false;
  }
  return wrong >= 3 && right >= 1;
}

// The environment of a learner whose desktop speaks `locale` (LANG and LC_ALL both set).
QProcessEnvironment localeEnv(const QByteArray& locale) {
  QProcessEnvironment env = QProcessEnvironment::systemEnvironment();
  env.insert("LANG", locale);
  env.insert("LC_ALL", locale);
  env.remove("LANGUAGE");
  return env;
}

// Whether this machine has `locale` (setlocale succeeds); the test's locale is put back.
bool haveLocale(const QByteArray& locale) {
  const std::string previous = std::setlocale(LC_ALL, nullptr);
  const bool ok = std::setlocale(LC_ALL, locale.constData()) != nullptr;
  std::setlocale(LC_ALL, previous.c_str());
  return ok;
}

const char* kLocaleHint =
    "is not installed here; on Debian: apt-get install locales && "
    "sed -i -E 's/^# *((de_DE|fr_FR|es_ES|ru_RU)\\.UTF-8)/\\1/' /etc/locale.gen && locale-gen";


}  // namespace

class TestCli : public QObject {
  Q_OBJECT

  QTemporaryDir emptyFolder_;

 private slots:
  // Issue 27 6.9: each mistake is a usage error (2) that names what was wrong.
  void mistakesAreNamed_data() {
    QTest::addColumn<QStringList>("args");
    QTest::addColumn<QString>("said");
    QTest::newRow("an unknown precision") << QStringList{"train", "--amp", "fp8"} << "invalid value 'fp8' for parameter 'amp'";
    QTest::newRow("two modes") << QStringList{"memory", "--oom-sweep", "--report"} << "'--report' and '--oom-sweep' both set mode: give one";
    QTest::newRow("a mode and a shorthand") << QStringList{"memory", "--mode", "fraction", "--report"} << "'--report' and '--mode' both set mode";
    QTest::newRow("an unknown lesson option") << QStringList{"lesson", "device-setup", "--fast"} << "unknown option '--fast'";
    QTest::newRow("a folder with no lesson") << QStringList{"lessons", "--lessons", emptyFolder_.path()} << "holds no lesson";
  }
  void mistakesAreNamed() {
    QFETCH(QStringList, args);
    QFETCH(QString, said);
    const Run r = cli(args);
    QCOMPARE(r.exitCode, 2);
    QVERIFY2(r.err.contains(said), qPrintable(r.err));
  }

  // A setting the Python lab refuses as it starts is named too; the run failed (1), as any run that
  // raised: the arguments parsed, and only the lab knows that a CNN needs images.
  void settingsTheLabRefusesAreNamed() {
    GPULAB_SKIP_WITHOUT_PYTHON();
    const Run r = cli({"train", "--model", "cnn", "--dataset", "regression"});
    QCOMPARE(r.exitCode, 1);
    QVERIFY2(r.err.contains("ValueError: --model cnn convolves images"), qPrintable(r.err));
  }

  // Issue 27 6.9: the man page names every option each command takes (it lacked four).
  void theManPageNamesEveryOption() {
    QFile man(GPULAB_MAN_PAGE);
    QVERIFY(man.open(QIODevice::ReadOnly));
    const QString page = QString::fromUtf8(man.readAll()).replace("\\-", "-");
    for (const QString& command : QStringList{"train", "memory"}) {
      const Run help = cli({command, "--help"});
      QCOMPARE(help.exitCode, 0);
      static const QRegularExpression option(R"(^  (--[a-z][a-z0-9-]*))", QRegularExpression::MultilineOption);
      int named = 0;
      for (auto it = option.globalMatch(help.out); it.hasNext(); ++named) {
        const QString name = it.next().captured(1);
        if (name == "--help") continue;
        QVERIFY2(page.contains(name), qPrintable(command + ": " + name + " is not in the man page"));
      }
      QVERIFY(named > 10);
    }
  }

  // Issue 27 6.3: Ctrl+C stops a run, and the command says so with exit status 130 (it exited 0, and
  // `lesson` went on to its next run block).
  void ctrlCStopsTheRunAndExits130_data() {
    QTest::addColumn<QStringList>("args");
    QTest::addColumn<QString>("startedWhen");  // stdout shows this: the run is under way
    QTest::newRow("train") << QStringList{"train", "--device", "cpu", "--dataset", "regression", "--epochs", "1000"} << "parameters";
    QTest::newRow("lesson") << QStringList{"lesson", "convolutions-and-cudnn"} << "== Run 1";  // minutes long
  }
  void ctrlCStopsTheRunAndExits130() {
    QFETCH(QStringList, args);
    QFETCH(QString, startedWhen);
    GPULAB_SKIP_WITHOUT_PYTHON();  // both run Python labs (lesson 08's first run is the cnn lab)
    QProcess p;
    p.start(GPULAB_CLI_PATH, args);
    QVERIFY(p.waitForStarted());
    QString out;
    QElapsedTimer waited;
    waited.start();
    while (!out.contains(startedWhen) && waited.elapsed() < 60000 && p.state() == QProcess::Running) {
      p.waitForReadyRead(200);
      out += QString::fromUtf8(p.readAllStandardOutput());
    }
    QVERIFY2(out.contains(startedWhen), qPrintable(out));
    QTest::qWait(300);
    QCOMPARE(p.state(), QProcess::Running);  // (a pid of 0 would signal this test's own process group)
    QVERIFY(p.processId() > 0);
    ::kill(static_cast<pid_t>(p.processId()), SIGINT);
    QVERIFY(p.waitForFinished(10000));
    out += QString::fromUtf8(p.readAllStandardOutput());
    const QString err = QString::fromUtf8(p.readAllStandardError());
    QCOMPARE(p.exitStatus(), QProcess::NormalExit);
    QCOMPARE(p.exitCode(), 130);
    QVERIFY2(err.contains("interrupted"), qPrintable(err));
    QVERIFY2(!out.contains("== Run 2"), qPrintable(out));
  }

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

  // Issue 48 5.3: `memory --help` offered --device cpu, which the lab refuses (a lab of a GPU's memory).
  void theMemoryHelpOffersOnlyWhatTheLabTakes() {
    const Run help = cli({"memory", "--help"});
    const qsizetype at = help.out.indexOf("--device");
    QVERIFY(at >= 0);
    const QString device = help.out.mid(at, help.out.indexOf("--seed", at) - at);
    QVERIFY2(!device.contains("cpu") && device.contains("emulated GPU"), qPrintable(device));
  }

  // Issue 48 5.3: without a GPU the emulated GPU is a device the lessons use: listed, with what it is and
  // how to turn it off; and with it off, that is said.
  void devicesListTheEmulatedGpu() {
    if (gpulab::test::cudaUsable()) QSKIP("a real GPU is usable: the emulated GPU is off unless asked for");
    QProcessEnvironment env = QProcessEnvironment::systemEnvironment();
    env.remove("GPULAB_EMULATED_GPU");
    Run text = cli({"devices"}, env);
    QVERIFY2(text.out.contains("cuda:0: GPU Lab's emulated GPU") && text.out.contains("GPULAB_EMULATED_GPU=0"), qPrintable(text.out));
    QVERIFY2(!text.out.contains("Lessons run on the CPU"), qPrintable(text.out));
    Run json = cli({"devices", "--json"}, env);
    const QJsonObject emulated = json.events.front()["emulated_gpu"].toObject();
    QCOMPARE(emulated["device"].toString(), QString("cuda:0"));
    QVERIFY(emulated["total_memory"].toDouble() > 0);
    env.insert("GPULAB_EMULATED_GPU", "0");
    Run off = cli({"devices"}, env);
    QVERIFY2(off.out.contains("emulated GPU off (GPULAB_EMULATED_GPU=0): lessons run on the CPU"), qPrintable(off.out));
    QVERIFY(cli({"devices", "--json"}, env).events.front()["emulated_gpu"].isNull());
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
    GPULAB_SKIP_WITHOUT_PYTHON();
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
    GPULAB_SKIP_WITHOUT_PYTHON();
    Run r = cli({"train", "--epochs", "2", "--device", "cpu"});
    QCOMPARE(r.exitCode, 0);
    QVERIFY2(r.out.contains("Epochs:\n       epoch    train loss     eval loss          time\n"), qPrintable(r.out));
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
    GPULAB_SKIP_WITHOUT_PYTHON();
    QProcessEnvironment env = QProcessEnvironment::systemEnvironment();
    env.insert("GPULAB_FASHION_MNIST_DIR", "/nonexistent");
    Run r = cli({"train", "--dataset", "fashion-mnist", "--json"}, env);
    QCOMPARE(r.exitCode, 1);
    QVERIFY(r.err.contains("dataset-fashion-mnist"));
    QCOMPARE(r.events.last()["type"].toString(), QString("IOError"));
  }

  void memorySweepReportsOomAndRecovery() {
    GPULAB_SKIP_WITHOUT_PYTHON();
    Run r = cli({"memory", "--oom-sweep", "--dataset", "regression", "--cap-mb", "4", "--json"});
    QCOMPARE(r.exitCode, 0);
    QStringList kinds;
    for (const QJsonObject& e : r.events) kinds << e["event"].toString();
    QVERIFY(kinds.contains("memory"));
    const int oom = kinds.indexOf("oom"), recovered = kinds.indexOf("recovered");
    QVERIFY(oom >= 0 && recovered > oom);
    QVERIFY(r.events[oom]["message"].toString().startsWith("CUDA out of memory."));
    QVERIFY(r.events[oom]["batch_size"].toInteger() > 0);
    QCOMPARE(r.events[recovered]["effective_batch"].toInteger(), r.events[oom]["batch_size"].toInteger());
    QCOMPARE(kinds.last(), QString("done"));
    // The lab runs in a Python session of its own, which records --memory-snapshot; the CPU is not a
    // GPU whose memory it fills.
    QTemporaryDir dir;
    const QString snapshot = dir.filePath("report.pickle");
    Run report = cli({"memory", "--report", "--dataset", "regression", "--hidden", "64", "--steps", "1", "--memory-snapshot", snapshot});
    QVERIFY2(report.exitCode == 0, qPrintable(report.err));
    QVERIFY(report.out.contains("after empty_cache()"));
    QVERIFY2(report.out.contains("memory summary, device cuda:0"), qPrintable(report.out));
    QVERIFY2(report.err.contains("memory snapshot written to " + snapshot), qPrintable(report.err));
    QVERIFY(QFileInfo(snapshot).size() > 1000);
    Run cpu = cli({"memory", "--report", "--device", "cpu"});
    QCOMPARE(cpu.exitCode, 1);
    QVERIFY2(cpu.err.contains("the memory lab fills a GPU's memory; 'cpu' is not a GPU"), qPrintable(cpu.err));
  }

  // A timed challenge's examples get kTimedAttempts runs each: the right answer stops at the first
  // that meets it, the wrong answer must fail every one; an untimed challenge's, one run each. (The
  // check here is a count marked timed, so the tries' verdicts are fixed and the test is not itself timed.)
  void timedChallengesGetSeveralTries_data() {
    QTest::addColumn<bool>("timed");
    QTest::newRow("timed") << true;
    QTest::newRow("untimed") << false;
  }

  void timedChallengesGetSeveralTries() {
    QFETCH(bool, timed);
    GPULAB_SKIP_WITHOUT_PYTHON();  // the syncs lab is Python
    QTemporaryDir dir;
    const QByteArray syncs = gpulab::test::copyShippedLab(dir.filePath("01-reads"), "11-syncs-and-transfers");
    QFile f(dir.filePath("01-reads/lesson.md"));
    QVERIFY(f.open(QIODevice::WriteOnly));
    f.write(QByteArray("---\nid: reads\ntitle: Reads\nchapter: 1. A\n---\n# Reads\n\n") + syncs + QByteArray("\n```run\n"
                       "{\"lab\": \"syncs\", \"params\": {\"device\": \"cpu\", \"steps\": 40, \"repeats\": 1, \"copy_batches\": 1},\n"
                       " \"challenge\": {\"text\": \"Read the loss 2 to 10 times\",\n"
                       "   \"checks\": [{\"measurement\": \"loss reads\", \"at_least\": 2, \"at_most\": 10, \"timed\": ") +
            (timed ? "true" : "false") +
            "}],\n"
            "   \"examples\": {\"fails\": {\"read_every\": 1}, \"meets\": {\"read_every\": 10}}}}\n```\n");
    f.close();
    const Run check = cli({"lesson", "reads", "--check-challenges", "--json", "--lessons", dir.path()});
    QVERIFY2(check.exitCode == 0, qPrintable(check.out + check.err));
    QCOMPARE(check.events.size(), 1);
    const QJsonObject e = check.events[0];
    QVERIFY2(e["ok"].toBool() && !e["fails_met"].toBool() && e["meets_met"].toBool(), qPrintable(QJsonDocument(e).toJson()));
    QCOMPARE(e["fails_tries"].toArray().size(), timed ? gpulab::course::kTimedAttempts : 1);
    QCOMPARE(e["meets_tries"].toArray().size(), 1);
    QVERIFY(e["fails_tries"].toArray()[0].toObject()["checks"].toArray()[0].toString().startsWith("loss reads: measured 40"));
    // The words say how many tries were taken.
    const Run words = cli({"lesson", "reads", "--check-challenges", "--lessons", dir.path()});
    QCOMPARE(words.exitCode, 0);
    QVERIFY2(words.out.contains(timed ? "the wrong answer does not meet the challenge in any of 3 tries -- as it should"
                                      : "the wrong answer does not meet the challenge -- as it should"),
             qPrintable(words.out));
    QVERIFY2(words.out.contains(timed ? "the right answer meets the challenge on try 1 of up to 3 -- as it should"
                                      : "the right answer meets the challenge -- as it should"),
             qPrintable(words.out));
  }

  void lessonsAreListedAndRunHeadless() {
    Run list = cli({"lessons"});
    QCOMPARE(list.exitCode, 0);
    const QStringList lines = list.out.split('\n', Qt::SkipEmptyParts);
    QCOMPARE(lines.size(), GPULAB_LESSON_COUNT);
    QVERIFY(lines[0].startsWith("device-setup\t"));
    QVERIFY(lines[0].endsWith("\tok"));
    QCOMPARE(cli({"lesson", "no-such-lesson"}).exitCode, 2);
    GPULAB_SKIP_WITHOUT_PYTHON();
    Run lesson = cli({"lesson", "same-device-rule", "--quick", "--json"});
    QCOMPARE(lesson.exitCode, 0);
    QStringList levels;
    for (const QJsonObject& e : lesson.events)
      if (e["event"] == "message") levels << e["level"].toString();
    QVERIFY(levels.contains("engine_error"));  // the device-mismatch error, shown on purpose
  }

  // Issue 29: a lesson's code cells run headless before its run blocks, the setup first and a cell
  // that raises on purpose reported as such; --check-exercises grades each exercise's starter (not
  // met) and solution (met) on the CPU and on the emulated GPU, one event each; an exercise that
  // needs two devices is skipped on the CPU, saying so.
  void lessonCellsAndExercisesRunHeadless() {
    GPULAB_SKIP_WITHOUT_PYTHON();
    Run lesson = cli({"lesson", "same-device-rule", "--quick", "--json"});
    QCOMPARE(lesson.exitCode, 0);
    QList<QJsonObject> cells;
    for (const QJsonObject& e : lesson.events)
      if (e["event"] == "cell") cells << e;
    QVERIFY(cells.size() >= 3);
    QVERIFY(cells[0]["setup"].toBool());  // the setup runs first, wherever it stands
    QCOMPARE(cells[0]["status"].toString(), QString("ok"));
    QCOMPARE(cells[1]["index"].toInt(), 1);  // the lesson's own error, raised on purpose
    QCOMPARE(cells[1]["status"].toString(), QString("error"));
    QCOMPARE(cells[2]["status"].toString(), QString("ok"));
    QVERIFY2(cells[2]["output"].toString().startsWith("loss "), qPrintable(cells[2]["output"].toString()));

    Run check = cli({"lesson", "device-setup", "--check-exercises", "--json"});
    QCOMPARE(check.exitCode, 0);
    QStringList devices;
    for (const QJsonObject& e : check.events) {
      QCOMPARE(e["event"].toString(), QString("exercise"));
      QCOMPARE(e["id"].toInt(), 1);
      QVERIFY2(e["ok"].toBool() && gradedAsItShould(e), qPrintable(QJsonDocument(e).toJson()));
      devices << e["device"].toString();
    }
    // Graded on whole machines, each a session of its own (issue 49): one without a GPU, one with a
    // 4 GiB emulated GPU as cuda:0 -- whatever this machine has.
    QCOMPARE(devices, QStringList{"no-gpu, gpu-4gib"});
    if (gpulab::test::cudaUsable()) return;
    Run twoDevices = cli({"lesson", "same-device-rule", "--check-exercises", "--json"});
    QCOMPARE(twoDevices.exitCode, 0);
    QCOMPARE(twoDevices.events.size(), 2);
    QVERIFY(twoDevices.events[0]["skipped"].toString().startsWith("needs a CUDA device"));
    QVERIFY2(twoDevices.events[1]["ok"].toBool() && gradedAsItShould(twoDevices.events[1]), qPrintable(QJsonDocument(twoDevices.events[1]).toJson()));
  }

  // Every run of a lesson ends with a "done" event, the labs that send no totals of their own too: a
  // recording (resources/reference-runs) is refused without one, as a run cut short.
  void everyRunEndsWithDone() {
    GPULAB_SKIP_WITHOUT_PYTHON();  // the syncs lab is Python
    Run lesson = cli({"lesson", "syncs-and-transfers", "--quick", "--json"});
    QCOMPARE(lesson.exitCode, 0);
    QStringList order;
    for (const QJsonObject& e : lesson.events) {
      if (e["event"] == "run" || e["event"] == "done") order << e["event"].toString();
      if (e["event"] == "done") QVERIFY2(e["seconds"].toDouble() > 0 && e["stopped"] == false, qPrintable(QJsonDocument(e).toJson()));
    }
    QVERIFY(!order.isEmpty());
    QCOMPARE(order.join(' '), QStringList(order.size() / 2, "run done").join(' '));
  }

  // The memory chapter headless: the OOM lesson hits a real out-of-memory error, recovers, and its
  // challenge is graded from the run (met by the quick variant's batch 1024 x 4); the first memory
  // lesson reports memory by category.
  void memoryLessonsEmitTheirEvents() {
    if (!gpulab::test::cudaUsable() && !gpulab::cuda::emulatedDevice()) QSKIP("no GPU and the emulated GPU is off");
    GPULAB_SKIP_WITHOUT_PYTHON();
    Run oom = cli({"lesson", "out-of-memory", "--quick", "--json"});
    QCOMPARE(oom.exitCode, 0);
    QStringList kinds;
    QList<QJsonObject> challenges;
    for (const QJsonObject& e : oom.events) {
      kinds << e["event"].toString();
      if (e["event"] == "challenge") challenges << e;
    }
    QVERIFY(kinds.contains("oom"));
    QVERIFY(kinds.indexOf("recovered") > kinds.indexOf("oom"));
    QCOMPARE(challenges.size(), 1);
    QCOMPARE(challenges[0]["index"].toInt(), 3);  // the third run block: the capped training run
    QVERIFY2(challenges[0]["met"].toBool(), qPrintable(QJsonDocument(challenges[0]).toJson()));
    const QJsonArray checks = challenges[0]["checks"].toArray();
    QCOMPARE(checks.size(), 3);  // the effective batch, an epoch, and the cap kept
    QCOMPARE(checks[0].toObject()["measured"].toDouble(), 4096.0);  // the effective batch: 1024 x 4
    QCOMPARE(checks[2].toObject()["measured"].toDouble(), 96.0 * 1024 * 1024);

    Run where = cli({"lesson", "where-memory-goes", "--quick", "--json"});
    QCOMPARE(where.exitCode, 0);
    int memoryRecords = 0;
    for (const QJsonObject& e : where.events) {
      if (e["event"] != "memory") continue;
      ++memoryRecords;
      const QJsonObject byCategory = e["allocated_by_category"].toObject();
      if (memoryRecords == 1) {
        for (const char* c : {"parameter", "gradient", "optimizer_state", "activation", "input_batch"}) QVERIFY2(byCategory[c].toInteger() > 0, c);
      }
    }
    QVERIFY(memoryRecords >= 2);
  }

  void cudaWithoutAGpuExplainsWhy() {
    if (gpulab::test::cudaUsable()) QSKIP("a GPU is usable here");
    // Without a GPU, cuda:0 is the emulated GPU unless it is switched off: the device after it is missing.
    const auto emulated = gpulab::cuda::emulatedDevice();
    const QString device = emulated ? QString("cuda:%1").arg(emulated->index() + 1) : QString("cuda");
    Run r = cli({"train", "--device", device, "--json"});
    QCOMPARE(r.exitCode, 2);  // an unusable device is an invalid value, like any other
    QVERIFY(r.err.contains("no usable GPU"));
    QVERIFY(r.err.contains("'device'"));
    QCOMPARE(r.events.last()["event"].toString(), QString("error"));
  }

  // Comma-decimal locales (QCoreApplication calls setlocale(LC_ALL, "")) read and write numbers as
  // everywhere else: lesson files load, --lr 0.001 works, messages say 0.001 and 1.50 MiB.
  void numbersDoNotDependOnTheLocale_data() {
    QTest::addColumn<QByteArray>("locale");
    for (const char* l : {"C.UTF-8", "de_DE.UTF-8", "fr_FR.UTF-8", "es_ES.UTF-8", "ru_RU.UTF-8"}) QTest::newRow(l) << QByteArray(l);
  }
  void numbersDoNotDependOnTheLocale() {
    QFETCH(QByteArray, locale);
    if (!haveLocale(locale)) QSKIP(qPrintable("locale " + locale + " " + kLocaleHint));
    const QProcessEnvironment env = localeEnv(locale);
    Run list = cli({"lessons"}, env);
    QVERIFY2(list.exitCode == 0, qPrintable(list.out + list.err));
    for (const QString& l : list.out.split('\n', Qt::SkipEmptyParts)) QVERIFY2(l.endsWith("\tok"), qPrintable(l));

    if (gpulab::test::pythonPackageBuilt()) {  // the training lab is Python
      Run train = cli({"train", "--lr", "0.001", "--epochs", "1", "--device", "cpu"}, env);
      QVERIFY2(train.exitCode == 0, qPrintable(train.err));
      QVERIFY(train.out.contains("Done: 16 steps on cpu"));
    }

    Run bad = cli({"train", "--lr", "20"}, env);
    QCOMPARE(bad.exitCode, 2);
    QVERIFY2(bad.err.contains("invalid value '20' for parameter 'lr': expected a number in [1e-07, 10]"), qPrintable(bad.err));
    Run comma = cli({"train", "--lr", "0,001"}, env);
    QCOMPARE(comma.exitCode, 2);

    const QRegularExpression localeDecimal("\\d,\\d\\d [KMG]iB");
    if (gpulab::test::pythonPackageBuilt()) {  // the memory lab is Python
      Run sweep = cli({"memory", "--oom-sweep", "--dataset", "regression", "--cap-mb", "4"}, env);
      QVERIFY2(sweep.exitCode == 0, qPrintable(sweep.err));
      QVERIFY2(QRegularExpression("Tried to allocate \\d+\\.\\d\\d [KMG]iB").match(sweep.out).hasMatch(), qPrintable(sweep.out));
      QVERIFY2(!localeDecimal.match(sweep.out).hasMatch(), qPrintable(sweep.out));
    }
    Run help = cli({"train", "--help"}, env);
    QVERIFY2(help.out.contains("0.001"), qPrintable(help.out));
  }

  void numbersThatDoNotFitAreNamedAsWritten() {
    Run r = cli({"train", "--lr", "1e-400"});
    QCOMPARE(r.exitCode, 2);
    QVERIFY2(r.err.contains("invalid value '1e-400' for parameter 'lr': out of range"), qPrintable(r.err));
  }

  void everyCommandHasHelp_data() {
    QTest::addColumn<QString>("command");
    QTest::addColumn<QStringList>("expected");
    QTest::newRow("train") << "train"
                           << QStringList{"--lr", "float", "default 0.001", "[1e-07, 10]", "Learning rate", "--hidden", "--pin-memory", "--seed",
                                          "[0, 2147483647]", "sgd, adam, adamw"};
    QTest::newRow("memory") << "memory" << QStringList{"--oom-sweep", "--report", "--cap-mb", "--fraction", "Per-process memory fraction of the GPU", "memory_lab.py"};
    QTest::newRow("devices") << "devices" << QStringList{"--json"};
    QTest::newRow("lessons") << "lessons" << QStringList{"--lessons"};
    QTest::newRow("lesson") << "lesson" << QStringList{"--quick"};
  }
  void everyCommandHasHelp() {
    QFETCH(QString, command);
    QFETCH(QStringList, expected);
    for (const char* flag : {"--help", "-h"}) {
      Run r = cli({command, flag});
      QCOMPARE(r.exitCode, 0);
      QVERIFY2(r.err.isEmpty(), qPrintable(r.err));
      QVERIFY2(r.out.contains("usage: gpulab-cli " + command), qPrintable(r.out));
      for (const QString& e : expected) QVERIFY2(r.out.contains(e), qPrintable(e + " in:\n" + r.out));
      QVERIFY2(r.out.contains("exit status"), qPrintable(r.out));
    }
  }

  void versionAndExitStatusAreDocumented() {
    Run v = cli({"--version"});
    QCOMPARE(v.exitCode, 0);
    QCOMPARE(v.out, QString("gpulab-cli " GPULAB_VERSION "\n"));
    Run help = cli({"--help"});
    QCOMPARE(help.exitCode, 0);
    for (const char* e : {"exit status", "0 ", "1 ", "2 ", "--version"}) QVERIFY2(help.out.contains(e), e);
  }

  // 2: the arguments (a value, an option, a device this machine cannot use); 1: a run that failed.
  void exitStatusSaysWhoseFaultItIs_data() {
    QTest::addColumn<QStringList>("args");
    QTest::addColumn<int>("exitCode");
    QTest::addColumn<QString>("expected");
    QTest::newRow("device syntax") << QStringList{"train", "--device", "gpu"} << 2
                                   << "invalid value 'gpu' for parameter 'device': Expected one of cpu, cuda device type at start of device string: gpu";
    QTest::newRow("missing GPU") << QStringList{"train", "--device", "cuda:99"} << 2 << "cuda:99";
    QTest::newRow("missing GPU, memory") << QStringList{"memory", "--report", "--device", "cuda:99"} << 2 << "cuda:99";
    QTest::newRow("hidden trailing comma") << QStringList{"train", "--hidden", "8,"} << 2 << "invalid value '8,' for parameter 'hidden'";
    QTest::newRow("hidden too wide") << QStringList{"train", "--hidden", "100000,100000"} << 2 << "invalid value '100000,100000' for parameter 'hidden'";
    QTest::newRow("missing value") << QStringList{"train", "--lr"} << 2 << "needs a value";
    QTest::newRow("unknown option, devices") << QStringList{"devices", "--jsno"} << 2 << "unknown option";
    QTest::newRow("unknown option, lessons") << QStringList{"lessons", "--all"} << 2 << "unexpected argument";
  }
  void exitStatusSaysWhoseFaultItIs() {
    QFETCH(QStringList, args);
    QFETCH(int, exitCode);
    QFETCH(QString, expected);
    Run r = cli(args);
    QCOMPARE(r.exitCode, exitCode);
    QVERIFY2(r.err.contains(expected), qPrintable(r.err));
    QCOMPARE(r.err.count('\n'), 1);
  }
};

QTEST_GUILESS_MAIN(TestCli)
#include "test_cli.moc"
