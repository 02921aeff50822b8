#pragma once
// Runs a lab on a worker thread and hands what it reports to the GUI thread in batches.
//
// Protocol: the lab runs inside LabWorker::run on the worker's QThread. Its MetricSink collects
// metrics and, at most every ~33 ms (and once at the end), emits one MetricBatch through a queued
// connection, so the GUI thread receives ~30 batches a second however fast the lab streams, and
// never waits on the engine. Stop sets the lab's StopToken (checked every step); Pause makes the
// sink hold the worker at its next step report until Resume or Stop. Destroying the runner stops
// the lab and joins the thread.
#include <QMetaType>
#include <QObject>
#include <QString>
#include <QThread>
#include <QVector>
#include <atomic>
#include <condition_variable>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>

#include "engine/lab/lab.h"

namespace gpulab::app {

struct MetricBatch {
  QVector<lab::StepMetrics> steps;
  QVector<lab::EpochMetrics> epochs;
  QVector<lab::MemorySample> memory;
  QVector<lab::Measurement> measurements;
  QVector<lab::OutOfMemoryReport> ooms;
  QVector<lab::RecoveryReport> recoveries;
  QVector<lab::MemoryReport> reports;
  QVector<std::pair<lab::MessageKind, QString>> messages;
  std::optional<lab::RunSummary> done;
  bool empty() const;
};

// Pause/stop shared by the GUI thread and the worker.
class RunControl {
 public:
  lab::StopToken stop;
  void setPaused(bool paused);
  bool paused() const { return paused_.load(); }
  // Called by the worker at each step: returns when not paused (or when stopping).
  void waitWhilePaused();
  void wake();

 private:
  std::atomic<bool> paused_{false};
  std::mutex mutex_;
  std::condition_variable cv_;
};

class LabWorker : public QObject {
  Q_OBJECT

 public:
  explicit LabWorker(RunControl& control) : control_(control) {}

 public slots:
  void run(const QString& labId, const std::map<std::string, std::string>& params);

 signals:
  void batchReady(const gpulab::app::MetricBatch& batch);
  void finished(const QString& error);  // empty when the lab ended normally (or was stopped)

 private:
  RunControl& control_;
};

class LabRunner : public QObject {
  Q_OBJECT

 public:
  explicit LabRunner(QObject* parent = nullptr);
  ~LabRunner() override;

  bool running() const { return running_; }
  bool paused() const { return control_.paused(); }
  void start(const QString& labId, const std::map<std::string, std::string>& params);
  void pause(bool paused);
  void stop();

 signals:
  void batchReady(const gpulab::app::MetricBatch& batch);
  void finished(const QString& error);
  void startRequested(const QString& labId, const std::map<std::string, std::string>& params);

 private:
  RunControl control_;
  QThread thread_;
  LabWorker* worker_ = nullptr;
  bool running_ = false;
};

}  // namespace gpulab::app

Q_DECLARE_METATYPE(gpulab::app::MetricBatch)
