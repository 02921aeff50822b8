// Crash safety of the user files (issue 8): gpulab-save-loop (tests/kill9/save_loop.cpp) saves the
// progress file and a state dict in a loop with the real code (ProgressStore's QSaveFile, nn::save);
// this test SIGKILLs it at random moments, 100 times, and after every kill loads each file with the
// real loaders: nothing may be half-written. The same loop writing in place (--direct) must be
// caught, which shows the check can fail.
#include <QDir>
#include <QProcess>
#include <QRandomGenerator>
#include <QTemporaryDir>
#include <QThread>
#include <QtTest>

#include "app/course/progress_store.h"
#include "engine/core/errors.h"
#include "engine/nn/module.h"

using namespace gpulab;

namespace {

struct Verdict {
  bool modelOk = true;
  bool progressOk = true;
  QString why;
};

// Loads both files the way the app would; a consistent state dict has one value everywhere.
Verdict checkFiles(const QString& dir) {
  Verdict v;
  try {
    const nn::StateDict sd = nn::load((dir + "/model.gpulab").toStdString());
    if (sd.size() != 2) throw IOError("expected 2 entries, found " + std::to_string(sd.size()));
    const float first = sd[0].second.toVector<float>().at(0);
    for (const auto& [name, t] : sd)
      for (float f : t.toVector<float>())
        if (f != first) throw IOError("entry '" + name + "' mixes two saves");
  } catch (const std::exception& e) {
    v.modelOk = false;
    v.why += QString::fromUtf8(e.what()) + "\n";
  }
  // ProgressStore moves a corrupt file aside, so load a copy.
  const QString copy = dir + "/progress-check.json";
  QFile::remove(copy);
  QFile::copy(dir + "/progress.json", copy);
  course::ProgressStore store(copy);
  if (!store.lastError().isEmpty() || store.answer("lesson-0", 0) < 0) {
    v.progressOk = false;
    v.why += store.lastError().isEmpty() ? QString("progress.json lost lesson-0's answer\n") : store.lastError() + "\n";
  }
  return v;
}

}  // namespace

class TestKill9 : public QObject {
  Q_OBJECT

 private:
  // Runs the loop `kills` times and returns how many kills left a file that fails to load.
  int killRepeatedly(int kills, const QStringList& extraArgs, QStringList& failures) {
    QTemporaryDir dir;
    const quint32 seed = QRandomGenerator::global()->generate();
    QRandomGenerator rng(seed);
    qInfo("random seed %u", seed);
    int bad = 0, leftoverTmp = 0;
    for (int k = 0; k < kills; ++k) {
      QProcess loop;
      loop.start(GPULAB_SAVE_LOOP_PATH, QStringList{dir.path()} + extraArgs);
      if (!loop.waitForStarted(10000)) {
        failures << "cannot start gpulab-save-loop: " + loop.errorString();
        return -1;
      }
      while (!loop.canReadLine() && loop.waitForReadyRead(10000)) {
      }
      if (!loop.readLine().startsWith("ready")) {
        failures << "gpulab-save-loop did not get ready: " + QString::fromLocal8Bit(loop.readAllStandardError());
        return -1;
      }
      QThread::usleep(rng.bounded(30000));  // a random moment, 0-30 ms into the loop
      loop.kill();                          // SIGKILL
      loop.waitForFinished(10000);
      if (QFile::exists(dir.filePath("model.gpulab.tmp"))) ++leftoverTmp;
      const Verdict v = checkFiles(dir.path());
      if (!v.modelOk || !v.progressOk) {
        ++bad;
        failures << QString("kill %1: %2").arg(k).arg(v.why.trimmed());
      }
    }
    qInfo("%d kills, %d left a file that does not load, %d interrupted a state-dict save (a .tmp left)", kills, bad, leftoverTmp);
    return bad;
  }

 private slots:
  void everyFileParsesAfterSigkill() {
    QStringList failures;
    const int bad = killRepeatedly(100, {}, failures);
    QVERIFY2(bad >= 0, qPrintable(failures.join("\n")));
    QVERIFY2(bad == 0, qPrintable(failures.join("\n")));
  }

  // The control: the same loop writing the state dict in place is caught by the same check, so the
  // test above can fail.
  void tornInPlaceWritesAreDetected() {
    QStringList failures;
    const int bad = killRepeatedly(30, {"--direct"}, failures);
    QVERIFY2(bad >= 0, qPrintable(failures.join("\n")));
    QVERIFY2(bad > 0, "30 kills of an in-place writer left no torn file: the check cannot see torn writes");
    QVERIFY2(failures.join("\n").contains("checksum mismatch") || failures.join("\n").contains("truncated"),
             qPrintable(failures.join("\n")));
  }
};

QTEST_GUILESS_MAIN(TestKill9)
#include "test_kill9.moc"
