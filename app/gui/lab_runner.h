#pragma once
// Runs a lab on a worker thread and hands what it reports to the GUI thread in batches.
//
// Protocol: the lab runs inside LabWorker::run on the worker's QThread. Its MetricSink checks every
// update the lab sends (lab::UpdateChecker: a lab that breaks the protocol fails its run with the
// checker's message) and collects them in arrival order; at most every ~33 ms (and once at the end)
// it emits one MetricBatch, which the runner hands to the GUI thread (a mutex-guarded queue and a
// queued call), so the GUI thread receives ~30 batches a second however fast the lab streams, and
// never waits on the engine. Stop sets the lab's StopToken
// (checked every step); Pause makes the sink hold the worker at its next Progress update until
// Resume or Stop. Destroying the runner stops the lab and joins the thread.
//
// Memory history: each run records every device's memory events in a gpulab::MemoryHistory (as
// torch.cuda.memory._record_memory_history() does), made and destroyed on the worker's thread around
// the lab's run; when the lab returns, the worker pickles its snapshot (what
// torch.cuda.memory._snapshot() gives, for pytorch.org/memory_viz) and hands the bytes to the GUI
// thread before finished(), so the GUI never touches the recorder while the engine runs. A Python
// lab's memory is in its own process: its session records the history and writes the snapshot,
// whose bytes are handed over the same way.
#include <QByteArray>
#include <QMetaType>
#include <QObject>
#include <QString>
#include <QThread>
#include <QVector>
#include <atomic>
#include <condition_variable>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <string>

#include "engine/lab/lab.h"

namespace gpulab::app {

// What the lab sent since the last batch, in the order it sent it.
struct MetricBatch {
  QVector<lab::Update> updates;
  bool empty() const { return updates.isEmpty(); }
};

// Pause/stop shared by the GUI thread and the worker.
class RunControl {
 public:
  lab::StopToken stop;
  void setPaused(bool paused);
  bool paused() const { return paused_.load(); }
  // Called by the worker at each Progress update: returns when not paused (or when stopping).
  void waitWhilePaused();
  void wake();
  // torch.cuda.memory._record_memory_history() for the next run: every allocation and free is
  // recorded for File > Export memory history. Off by default, as in PyTorch: at tens of thousands of
  // small steps a second the recording costs a fifth of the training speed.
  void setRecordMemoryHistory(bool record) { recordHistory_.store(record); }
  bool recordMemoryHistory() const { return recordHistory_.load(); }

 private:
  std::atomic<bool> paused_{false};
  std::atomic<bool> recordHistory_{false};
  std::mutex mutex_;
  std::condition_variable cv_;
};

class LabWorker : public QObject {
  Q_OBJECT

 public:
  explicit LabWorker(RunControl& control) : control_(control) {}

 public slots:
  // Runs `lab` (one of a lesson's: course::makeLab) on the worker's thread.
  void run(std::shared_ptr<gpulab::lab::Lab> lab, const std::map<std::string, std::string>& params);

 public:
  // Runs `lab` with these settings on the calling thread, as run() does a built-in lab on the
  // worker's thread: batches, then finished().
  void runLab(lab::Lab& lab, const std::map<std::string, std::string>& settings);

 signals:
  void batchReady(const gpulab::app::MetricBatch& batch);
  // The run's memory history as a PyTorch snapshot pickle; sent just before finished() (empty when
  // the snapshot could not be made).
  void memoryHistoryReady(const QByteArray& pickle);
  // `error` is empty when the lab ended normally (or was stopped); the checker's message when the
  // lab broke the protocol.
  void finished(const QString& error);

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
  // Stop was asked for during the current (or last) run.
  bool stopRequested() const { return control_.stop.stopRequested(); }
  void start(std::shared_ptr<gpulab::lab::Lab> lab, const std::map<std::string, std::string>& params);
  void pause(bool paused);
  void setRecordMemoryHistory(bool record) { control_.setRecordMemoryHistory(record); }
  bool recordMemoryHistory() const { return control_.recordMemoryHistory(); }
  void stop();

 signals:
  void batchReady(const gpulab::app::MetricBatch& batch);
  void memoryHistoryReady(const QByteArray& pickle);  // the run's, just before finished()
  void finished(const QString& error);
  void startRequested(std::shared_ptr<gpulab::lab::Lab> lab, const std::map<std::string, std::string>& params);
  // The worker handed batches over: a queued connection calls deliverBatches on the GUI thread. A
  // signal without arguments, emitted from the worker, so that nothing GPU Lab's (instrumented) code
  // builds crosses Qt's event queue -- a queued lambda (QMetaObject::invokeMethod) is a functor object
  // built on the worker and read on the GUI thread, ordered by Qt's futex mutex that ThreadSanitizer
  // cannot see, which it reported as a race.
  void batchesHandedOver();

 private:
  void deliverBatches();  // on the GUI thread: emits batchReady for each batch handed over

  RunControl control_;
  QThread thread_;
  LabWorker* worker_ = nullptr;
  bool running_ = false;
  // The worker's batches cross to the GUI thread through this queue, under a std::mutex: Qt's own
  // event queue also orders them, but with a lock ThreadSanitizer cannot see (Qt is not
  // instrumented), so it reported the GUI reading what the worker wrote as a race.
  std::mutex handoffMutex_;
  std::deque<MetricBatch> handoff_;
};

}  // namespace gpulab::app

Q_DECLARE_METATYPE(gpulab::app::MetricBatch)
