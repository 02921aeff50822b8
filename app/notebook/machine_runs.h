#pragma once
// One cell run on several machines (machine.h), one after another, each in a fresh session that runs
// the lesson's setup cells first -- how an exercise whose rule depends on the machine grades the
// learner's code ("picks the CPU on a machine without a GPU", "a 256 MiB cap on a 4, 16, 40 and 80
// GiB GPU"). Asynchronous, for the window: done() follows with one result per machine. One session at
// a time, so that grading takes no more of the CPU than the learner's own run did.
#include <QMap>
#include <QObject>
#include <QString>
#include <QStringList>
#include <QTimer>
#include <QVector>

#include "app/notebook/kernel_process.h"
#include "app/notebook/machine.h"

namespace gpulab::notebook {

class MachineRuns final : public QObject {
  Q_OBJECT

 public:
  explicit MachineRuns(QObject* parent = nullptr);
  // Runs `code` (measured with `values`) on each machine after `setup`; a run still going is
  // cancelled first. A setup cell that fails ends that machine's run as an error naming it.
  void start(const QVector<Machine>& machines, const QStringList& setup, const QString& code, const QMap<QString, QString>& values);
  void cancel();  // ends the session now; no done() follows

 signals:
  void machineStarted(int index, int count);  // the index-th machine (from 0) of count
  void done(const QVector<CellResult>& results);

 private:
  void startNext();
  void onFinished(const QString& cellId, const CellResult& result);
  void onDied(const QString& reason);
  void finishMachine(const CellResult& result);

  KernelProcess kernel_;
  QVector<Machine> machines_;
  QStringList setup_;
  QString code_;
  QMap<QString, QString> values_;
  QVector<CellResult> results_;
  int next_ = 0;        // the machine running is next_ - 1
  quint64 generation_ = 0;  // which start(): a session's late signals are ignored after cancel()
  bool current_ = false;    // a machine's run is under way and not yet finished
  QTimer limit_;            // a machine's run past 2 minutes is stopped (its result says Interrupted)
};

}  // namespace gpulab::notebook
