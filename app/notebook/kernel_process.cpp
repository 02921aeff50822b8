#include "app/notebook/kernel_process.h"

#include <QDir>
#include <QJsonArray>
#include <QJsonDocument>
#include <QJsonObject>
#include <csignal>
#include <utility>
#include <sys/types.h>
#include <unistd.h>

#include "app/notebook/python_environment.h"

namespace gpulab::notebook {

namespace {

CellResult::Status statusFrom(const QString& text) {
  if (text == "ok") return CellResult::Status::Ok;
  if (text == "interrupted") return CellResult::Status::Interrupted;
  return CellResult::Status::Error;
}

// How long an ended session's process has to end by itself (its input closed, an interrupt) before
// its group is killed.
constexpr int kEndGraceMs = 1000;

// Signals the process group `group` (Note [the kernel's process group]). Never a group id that is
// not a real one: kill(0, ...) and kill(-1, ...) would reach this program and everything it may signal.
void signalProcessGroup(qint64 group, int signal) {
  if (group > 1) ::kill(-static_cast<pid_t>(group), signal);
}

}  // namespace

KernelProcess::KernelProcess(QObject* parent) : QObject(parent) {
  qRegisterMetaType<gpulab::notebook::CellResult>();
  stopGrace_.setSingleShot(true);
  connect(&stopGrace_, &QTimer::timeout, this, &KernelProcess::onStopGraceOver);
}

KernelProcess::~KernelProcess() {
  blockSignals(true);  // nothing is told of an end it did not ask for
  // A process still ending when this returns is waited for by ~QProcess, which then emits finished and
  // the last output: after this object's other members are gone, so nothing of it may still listen
  // (readEvents appended to a destroyed buffer: "malloc(): unaligned tcache chunk detected").
  if (process_) process_->disconnect(this);
  shutdown();
  // Sessions a restart ended that are still ending: their groups too, now (the window is closing).
  for (QProcess* old : findChildren<QProcess*>(Qt::FindDirectChildrenOnly)) {
    if (old == process_ || old->state() == QProcess::NotRunning) continue;
    signalProcessGroup(old->processId(), SIGKILL);
    old->waitForFinished(killWaitMs_);
  }
}

void KernelProcess::start(const Machine& machine) {
  end();  // the cells of a session still running are told now, and its process ends by itself
  stopping_ = false;
  machine_ = machine;
  pending_.clear();
  busyCells_.clear();
  runningStarted_ = false;
  finishedCount_ = 0;
  stopGrace_.stop();
  ++session_;
  if (!workingDirectory_.isEmpty() && !QDir().mkpath(workingDirectory_)) {
    // As a start that failed: kernelDied after start() returns, never inside it.
    const QString reason = "cannot create the cells' working folder " + workingDirectory_;
    QMetaObject::invokeMethod(this, [this, reason] { emit kernelDied(reason); }, Qt::QueuedConnection);
    return;
  }
  auto* p = new QProcess(this);
  process_ = p;
  p->setProcessChannelMode(QProcess::SeparateChannels);
  // A group of its own (Note [the kernel's process group]); runs in the child between fork and exec.
  p->setChildProcessModifier([] { ::setpgid(0, 0); });
  p->setProcessEnvironment(pythonEnvironment(machine));
  if (!workingDirectory_.isEmpty()) p->setWorkingDirectory(workingDirectory_);
  connect(p, &QProcess::readyReadStandardOutput, this, &KernelProcess::readEvents);
  connect(p, &QProcess::readyReadStandardError, this, [this] { emit rawOutput(QString::fromUtf8(process_->readAllStandardError())); });
  connect(p, &QProcess::finished, this, &KernelProcess::onProcessFinished);
  connect(p, &QProcess::errorOccurred, this, [this](QProcess::ProcessError error) {
    if (error == QProcess::FailedToStart) {
      // No finished() follows a process that never started: the cells sent to it are told here.
      abandonCells(CellResult::Ending::ByItself, "the kernel could not start", "the kernel could not start");
      emit kernelDied("cannot start " + QString::fromLocal8Bit(pythonExecutable()) + " (" + process_->errorString() +
                      "): GPU Lab runs PyTorch code on Debian's Python 3 with its torch (apt-get install python3 python3-gpulab)");
    }
  });
  QStringList arguments{"-m", "gpulab.kernel"};
  if (outputLimit_ > 0) arguments << "--output-limit" << QString::number(outputLimit_) << "--output-folder" << outputFolder_;
  p->start(QString::fromLocal8Bit(pythonExecutable()), arguments);
  group_ = p->processId();  // the child made its pid its group before exec
}

void KernelProcess::run(const QString& cellId, const QString& code, const std::optional<QMap<QString, QString>>& measureValues) {
  QJsonObject command{{"op", "run"}, {"cell", cellId}, {"code", code}};
  if (allowStdin_) command["allow_stdin"] = true;
  if (measureValues) {
    QJsonObject values;
    for (auto it = measureValues->begin(); it != measureValues->end(); ++it) values[it.key()] = it.value();
    command["measure"] = QJsonObject{{"values", values}};
  }
  if (!isRunning()) {
    // No session to run it (it ended, or could not start): said at once, not left waiting.
    CellResult r;
    r.status = CellResult::Status::KernelDied;
    r.started = false;
    r.message = "no Python session is running";
    emit finished(cellId, r);
    return;
  }
  busyCells_.append(cellId);
  process_->write(QJsonDocument(command).toJson(QJsonDocument::Compact) + "\n");
}

void KernelProcess::sendInput(const QString& text) {
  if (!isRunning()) return;
  process_->write(QJsonDocument(QJsonObject{{"op", "input_reply"}, {"value", text}}).toJson(QJsonDocument::Compact) + "\n");
}

void KernelProcess::stop() {
  if (busyCells_.isEmpty() || !isRunning() || process_->processId() <= 0) return;
  ::kill(static_cast<pid_t>(process_->processId()), SIGINT);
  // The first Stop for this cell sets the deadline; pressing it again does not put it off.
  if (!stopGrace_.isActive()) {
    stopTarget_ = finishedCount_;
    stopGrace_.start(stopGraceMs_);
  }
}

void KernelProcess::onStopGraceOver() {
  // The cell the Stop was for is still running: interrupts do not reach it.
  if (!isRunning() || busyCells_.isEmpty() || finishedCount_ != stopTarget_) return;
  const QString why = QString("the cell was still running %1 s after the interrupt (it ignores SIGINT, or waits inside one long operation)")
                          .arg(stopGraceMs_ / 1000.0);
  retire(true);
  abandonCells(CellResult::Ending::KilledByStop, why, "Stop ended the session before this cell's turn");
  emit kernelDied("Stop ended it, as " + why);
}

void KernelProcess::holdAtProgress() {
  if (process_) process_->write(R"({"op": "hold_at_progress", "on": true})" "\n");
}

void KernelProcess::goOn() { answerProgress(R"({"op": "go_on"})" "\n"); }

void KernelProcess::stopAtProgress() { answerProgress(R"({"op": "stop"})" "\n"); }

void KernelProcess::answerProgress(const char* line) {
  // Written now, not when the event loop next runs (after every update read with this one): the lab
  // waits for it at its next lab.progress(). The pipe has room -- the lab reads each answer at its
  // next call -- so the wait returns at once.
  if (!process_) return;
  process_->write(line);
  process_->waitForBytesWritten(1000);
}

void KernelProcess::restart() { start(machine_); }

void KernelProcess::end() {
  if (!process_) return;
  stopGrace_.stop();
  retire(false);
  abandonCells(CellResult::Ending::Ended, "the session was ended while this cell ran", "the session was ended before this cell ran");
}

void KernelProcess::abandonCells(CellResult::Ending ending, const QString& runningMessage, const QString& queuedMessage) {
  const QStringList unfinished = std::exchange(busyCells_, {});
  const bool firstStarted = std::exchange(runningStarted_, false);
  for (qsizetype i = 0; i < unfinished.size(); ++i) {
    CellResult r;
    r.status = CellResult::Status::KernelDied;
    r.ending = ending;
    r.started = i == 0 && firstStarted;
    r.message = r.started ? runningMessage : queuedMessage;
    emit finished(unfinished[i], r);
  }
}

void KernelProcess::retire(bool killNow) {
  QProcess* p = std::exchange(process_, nullptr);
  if (!p) return;
  const qint64 group = group_;
  p->disconnect(this);  // from now on its events are no session's
  stopGrace_.stop();
  if (p->state() == QProcess::NotRunning) {
    signalProcessGroup(group, SIGKILL);  // what it left behind
    p->deleteLater();
    return;
  }
  connect(p, &QProcess::finished, p, [p, group] {
    signalProcessGroup(group, SIGKILL);  // the processes its cells started end with it
    p->deleteLater();
  });
  connect(p, &QProcess::errorOccurred, p, [p](QProcess::ProcessError error) {
    if (error == QProcess::FailedToStart) p->deleteLater();
  });
  if (killNow) {
    signalProcessGroup(group, SIGKILL);
    return;
  }
  // A cell running would hold the kernel past the end of its input: interrupted first.
  if (p->processId() > 0) ::kill(static_cast<pid_t>(p->processId()), SIGINT);
  p->closeWriteChannel();
  QTimer::singleShot(kEndGraceMs, p, [group] { signalProcessGroup(group, SIGKILL); });
}

void KernelProcess::signalGroup(int signal) const { signalProcessGroup(group_, signal); }

void KernelProcess::shutdown() {
  stopGrace_.stop();
  if (!process_) return;
  if (process_->state() == QProcess::NotRunning) {
    signalGroup(SIGKILL);  // what a kernel that ended by itself left behind
    return;
  }
  stopping_ = true;
  // A running cell would hold the kernel past the end of its input: interrupt it first.
  if (!busyCells_.isEmpty() && process_->processId() > 0) ::kill(static_cast<pid_t>(process_->processId()), SIGINT);
  busyCells_.clear();
  process_->closeWriteChannel();
  if (!process_->waitForFinished(kEndGraceMs)) {
    signalGroup(SIGKILL);
    process_->waitForFinished(killWaitMs_);
  }
  signalGroup(SIGKILL);  // the processes its cells started, which outlive a kernel that ended by itself
}

void KernelProcess::kill() {
  stopGrace_.stop();
  if (!isRunning()) return;
  stopping_ = true;
  busyCells_.clear();
  signalGroup(SIGKILL);
  process_->waitForFinished(1000);
}

void KernelProcess::readEvents() {
  if (!process_) return;
  pending_ += process_->readAllStandardOutput();
  // The lines in place and the buffer cut once: removing each line from its front was quadratic in
  // the number of lines one read brought.
  const quint64 session = session_;
  qsizetype from = 0, end;
  while ((end = pending_.indexOf('\n', from)) >= 0) {
    const QByteArray line = pending_.sliced(from, end - from);
    from = end + 1;
    if (!line.trimmed().isEmpty()) handleEvent(line);
    if (session != session_) return;  // a slot started another session: pending_ is its own now
  }
  pending_.remove(0, from);
}

void KernelProcess::handleEvent(const QByteArray& line) {
  const QJsonObject e = QJsonDocument::fromJson(line).object();
  const QString event = e.value("event").toString();
  const QString cell = e.value("cell").toString();
  if (event == "ready") {
    emit ready(e.value("torch").toString(), e.value("cuda").toBool(), e.value("device").toString(), e.value("emulated").toBool());
  } else if (event == "started") {
    runningStarted_ = true;
    emit started(cell);
  } else if (event == "stream") {
    emit output(cell, e.value("name").toString(), e.value("text").toString());
  } else if (event == "input_request") {
    emit inputRequested(cell, e.value("prompt").toString());
  } else if (event == "output_capped") {
    emit outputCapped(cell, e.value("limit").toInteger(), e.value("file").toString(), e.value("why").toString());
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
    runningStarted_ = false;
    ++finishedCount_;
    stopGrace_.stop();
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
    if (e.contains("output")) {
      const QJsonObject output = e.value("output").toObject();
      r.outputChars = output.value("chars").toInteger();
      r.outputFile = output.value("file").toString();
    }
    emit finished(cell, r);
  } else {
    // protocol_error, or a line that is not the protocol's: shown as the kernel's own output.
    emit rawOutput(QString::fromUtf8(line) + "\n");
  }
}

void KernelProcess::onProcessFinished(int exitCode, QProcess::ExitStatus status) {
  const quint64 session = session_;
  readEvents();
  if (session != session_) return;  // a slot of its last events started another session
  stopGrace_.stop();
  signalGroup(SIGKILL);  // the processes its cells started end with the session, as at a restart
  const QString crash = process_ ? process_->errorString() : QString();
  abandonCells(CellResult::Ending::ByItself, "the kernel ended while this cell ran", "the kernel ended before this cell ran");
  if (stopping_) return;
  emit kernelDied(status == QProcess::CrashExit ? "the kernel crashed (" + crash + ")"
                                                : "the kernel ended (exit status " + QString::number(exitCode) + ")");
}

}  // namespace gpulab::notebook
