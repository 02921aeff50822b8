#include "app/notebook/kernel_process.h"

#include <QJsonArray>
#include <QJsonDocument>
#include <QJsonObject>
#include <csignal>
#include <utility>
#include <sys/types.h>

#include "app/notebook/python_environment.h"

namespace gpulab::notebook {

namespace {

CellResult::Status statusFrom(const QString& text) {
  if (text == "ok") return CellResult::Status::Ok;
  if (text == "interrupted") return CellResult::Status::Interrupted;
  return CellResult::Status::Error;
}

}  // namespace

KernelProcess::KernelProcess(QObject* parent) : QObject(parent) {
  qRegisterMetaType<gpulab::notebook::CellResult>();
  process_.setProcessChannelMode(QProcess::SeparateChannels);
  connect(&process_, &QProcess::readyReadStandardOutput, this, &KernelProcess::readEvents);
  connect(&process_, &QProcess::readyReadStandardError, this,
          [this] { emit rawOutput(QString::fromUtf8(process_.readAllStandardError())); });
  connect(&process_, &QProcess::finished, this, &KernelProcess::onProcessFinished);
  connect(&process_, &QProcess::errorOccurred, this, [this](QProcess::ProcessError error) {
    if (error == QProcess::FailedToStart) {
      emit kernelDied("cannot start " + QString::fromLocal8Bit(pythonExecutable()) + " (" + process_.errorString() +
                      "): GPU Lab runs PyTorch code on Debian's Python 3 with its torch (apt-get install python3 python3-gpulab)");
    }
  });
}

KernelProcess::~KernelProcess() {
  blockSignals(true);  // nothing is told of an end it did not ask for
  // A process still ending when this returns is waited for by ~QProcess, which then emits finished and
  // the last output: after this object's other members are gone, so nothing of it may still listen
  // (readEvents appended to a destroyed buffer: "malloc(): unaligned tcache chunk detected").
  process_.disconnect(this);
  shutdown();
}

void KernelProcess::start(bool emulatedGpu) {
  shutdown();
  stopping_ = false;
  emulatedGpu_ = emulatedGpu;
  pending_.clear();
  busyCells_.clear();
  process_.setProcessEnvironment(pythonEnvironment(emulatedGpu));
  process_.start(QString::fromLocal8Bit(pythonExecutable()), {"-m", "gpulab.kernel"});
}

void KernelProcess::run(const QString& cellId, const QString& code, const std::optional<QMap<QString, QString>>& measureValues) {
  QJsonObject command{{"op", "run"}, {"cell", cellId}, {"code", code}};
  if (measureValues) {
    QJsonObject values;
    for (auto it = measureValues->begin(); it != measureValues->end(); ++it) values[it.key()] = it.value();
    command["measure"] = QJsonObject{{"values", values}};
  }
  busyCells_.append(cellId);
  process_.write(QJsonDocument(command).toJson(QJsonDocument::Compact) + "\n");
}

void KernelProcess::stop() {
  if (!busyCells_.isEmpty() && process_.processId() > 0) ::kill(static_cast<pid_t>(process_.processId()), SIGINT);
}

void KernelProcess::holdAtProgress() { process_.write(R"({"op": "hold_at_progress", "on": true})" "\n"); }

void KernelProcess::goOn() { answerProgress(R"({"op": "go_on"})" "\n"); }

void KernelProcess::stopAtProgress() { answerProgress(R"({"op": "stop"})" "\n"); }

void KernelProcess::answerProgress(const char* line) {
  // Written now, not when the event loop next runs (after every update read with this one): the lab
  // waits for it at its next lab.progress(). The pipe has room -- the lab reads each answer at its
  // next call -- so the wait returns at once.
  process_.write(line);
  process_.waitForBytesWritten(1000);
}

void KernelProcess::restart() { start(emulatedGpu_); }

void KernelProcess::shutdown() {
  if (process_.state() == QProcess::NotRunning) return;
  stopping_ = true;
  // A running cell would hold the kernel past the end of its input: interrupt it first.
  stop();
  busyCells_.clear();
  process_.closeWriteChannel();
  if (!process_.waitForFinished(1000)) {
    process_.kill();
    process_.waitForFinished(killWaitMs_);
  }
}

void KernelProcess::kill() {
  if (process_.state() == QProcess::NotRunning) return;
  stopping_ = true;
  busyCells_.clear();
  process_.kill();
  process_.waitForFinished(1000);
}

void KernelProcess::readEvents() {
  pending_ += process_.readAllStandardOutput();
  qsizetype end;
  while ((end = pending_.indexOf('\n')) >= 0) {
    const QByteArray line = pending_.left(end);
    pending_.remove(0, end + 1);
    if (!line.trimmed().isEmpty()) handleEvent(line);
  }
}

void KernelProcess::handleEvent(const QByteArray& line) {
  const QJsonObject e = QJsonDocument::fromJson(line).object();
  const QString event = e.value("event").toString();
  const QString cell = e.value("cell").toString();
  if (event == "ready") {
    emit ready(e.value("torch").toString(), e.value("cuda").toBool(), e.value("device").toString(), e.value("emulated").toBool());
  } else if (event == "started") {
    emit started(cell);
  } else if (event == "stream") {
    emit output(cell, e.value("name").toString(), e.value("text").toString());
  } else if (event == "log") {
    QMap<QString, double> values;
    const QJsonObject v = e.value("values").toObject();
    for (auto it = v.begin(); it != v.end(); ++it) values.insert(it.key(), it.value().toDouble());
    emit logged(cell, e.value("step").toInteger(), values);
  } else if (event == "lab") {
    emit labUpdate(cell, e.value("update").toObject());
  } else if (event == "memory") {
    QMap<QString, qint64> categories;
    const QJsonObject c = e.value("categories").toObject();
    for (auto it = c.begin(); it != c.end(); ++it) categories.insert(it.key(), it.value().toInteger());
    emit memory(cell, e.value("t").toDouble(), e.value("allocated").toInteger(), e.value("reserved").toInteger(), categories);
  } else if (event == "finished") {
    busyCells_.removeOne(cell);
    CellResult r;
    r.status = statusFrom(e.value("status").toString());
    r.seconds = e.value("seconds").toDouble();
    const QJsonObject error = e.value("error").toObject();
    r.errorType = error.value("type").toString();
    r.message = error.value("message").toString();
    r.traceback = error.value("traceback").toString();
    r.kind = error.value("kind").toString();
    r.measured = e.contains("measurements");
    for (const QJsonValue& m : e.value("measurements").toArray()) {
      const QJsonObject o = m.toObject();
      r.measurements.push_back({o.value("name").toString().toStdString(), o.value("value").toDouble(), o.value("unit").toString().toStdString()});
    }
    const QJsonObject unmeasured = e.value("unmeasured").toObject();
    for (auto it = unmeasured.begin(); it != unmeasured.end(); ++it) r.unmeasured.insert(it.key(), it.value().toString());
    emit finished(cell, r);
  } else {
    // protocol_error, or a line that is not the protocol's: shown as the kernel's own output.
    emit rawOutput(QString::fromUtf8(line) + "\n");
  }
}

void KernelProcess::onProcessFinished(int exitCode, QProcess::ExitStatus status) {
  readEvents();
  const QStringList unfinished = std::exchange(busyCells_, {});
  for (qsizetype i = 0; i < unfinished.size(); ++i) {
    CellResult r;
    r.status = CellResult::Status::KernelDied;
    r.message = i == 0 ? "the kernel ended while this cell ran" : "the kernel ended before this cell ran";
    emit finished(unfinished[i], r);
  }
  if (stopping_) return;
  emit kernelDied(status == QProcess::CrashExit ? "the kernel crashed (" + process_.errorString() + ")"
                                                : "the kernel ended (exit status " + QString::number(exitCode) + ")");
}

}  // namespace gpulab::notebook
