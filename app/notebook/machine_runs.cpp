#include "app/notebook/machine_runs.h"

namespace gpulab::notebook {

MachineRuns::MachineRuns(QObject* parent) : QObject(parent) {
  connect(&kernel_, &KernelProcess::finished, this, &MachineRuns::onFinished);
  connect(&kernel_, &KernelProcess::kernelDied, this, &MachineRuns::onDied);
  limit_.setSingleShot(true);
  limit_.setInterval(120000);
  connect(&limit_, &QTimer::timeout, this, [this] {
    if (current_) kernel_.stop();  // an interrupt, then the session's end if it goes unheeded
  });
}

void MachineRuns::start(const QVector<Machine>& machines, const QStringList& setup, const QString& code,
                        const QMap<QString, QString>& values) {
  cancel();
  machines_ = machines;
  setup_ = setup;
  code_ = code;
  values_ = values;
  results_.clear();
  next_ = 0;
  startNext();
}

void MachineRuns::cancel() {
  ++generation_;
  current_ = false;
  limit_.stop();
  next_ = 0;
  kernel_.end();
}

void MachineRuns::startNext() {
  if (next_ >= machines_.size()) {
    emit done(results_);
    return;
  }
  const int index = next_++;
  current_ = true;
  limit_.start();
  emit machineStarted(index, static_cast<int>(machines_.size()));
  kernel_.start(machines_[index]);
  for (int i = 0; i < setup_.size(); ++i) kernel_.run("setup-" + QString::number(i + 1), setup_[i]);
  kernel_.run("exercise", code_, values_);
}

void MachineRuns::onFinished(const QString& cellId, const CellResult& result) {
  if (!current_) return;  // a cancelled session's cells, told as it ends
  if (cellId == "exercise") return finishMachine(result);
  if (result.status == CellResult::Status::Ok) return;
  // A setup cell failed: the exercise's code cannot be graded on this machine; that is its result.
  CellResult failed = result;
  failed.measured = true;
  failed.status = CellResult::Status::Error;
  failed.message = QString("the lesson's %1 raised %2: %3").arg(cellId, result.errorType, result.message);
  failed.measurements = {{"errors", 1.0, ""}};
  for (auto it = values_.begin(); it != values_.end(); ++it) failed.unmeasured[it.key()] = "the lesson's setup failed on this machine";
  finishMachine(failed);
}

void MachineRuns::onDied(const QString& reason) {
  if (!current_) return;
  CellResult died;
  died.status = CellResult::Status::KernelDied;
  died.message = reason;
  finishMachine(died);
}

void MachineRuns::finishMachine(const CellResult& result) {
  current_ = false;
  limit_.stop();
  results_ << result;
  const quint64 generation = generation_;
  kernel_.end();
  // The next session starts from the event loop, not inside the signal of the one that just ended.
  QMetaObject::invokeMethod(this, [this, generation] {
    if (generation == generation_) startNext();
  }, Qt::QueuedConnection);
}

}  // namespace gpulab::notebook
