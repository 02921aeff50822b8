#include "app/gui/lab_runner.h"

#include <QFile>
#include <QTemporaryDir>
#include <chrono>
#include <optional>
#include <exception>

#include "app/course/python_lab.h"
#include "engine/core/errors.h"
#include "engine/runtime/memory_snapshot.h"

namespace gpulab::app {

using ParamMap = std::map<std::string, std::string>;

void RunControl::setPaused(bool paused) {
  paused_.store(paused);
  wake();
}

void RunControl::wake() {
  std::lock_guard lock(mutex_);
  cv_.notify_all();
}

void RunControl::waitWhilePaused() {
  std::unique_lock lock(mutex_);
  cv_.wait(lock, [&] { return !paused_.load() || stop.stopRequested(); });
}

namespace {

// Checks and collects what the lab sends; emits a batch at most every 33 ms.
class BatchingSink final : public lab::MetricSink {
 public:
  BatchingSink(LabWorker& worker, RunControl& control, const MemoryHistory* history)
      : worker_(worker), control_(control), history_(history) {}

  void send(const lab::Update& update) override { sendOwned(lab::Update(update)); }
  void sendOwned(lab::Update&& update) override {
    if (!violation_.isEmpty()) throw ValueError(violation_.toStdString());
    try {
      checker_.check(update);
    } catch (const std::exception& e) {
      // The run fails with the checker's message, even if the lab catches the exception: nothing
      // it sends after this is shown.
      violation_ = QString::fromUtf8(e.what());
      control_.stop.requestStop();
      throw;
    }
    const bool progress = std::holds_alternative<lab::Progress>(update);
    batch_.updates << std::move(update);
    if (progress && control_.paused()) {
      flush();  // what the lab showed up to here is on screen while it waits
      control_.waitWhilePaused();  // Pause holds the lab here, at a Progress update
    }
    maybeFlush();
  }

  void flush() {
    // The recorder keeps every event until the history collects it (max_entries bounds only what
    // the history keeps): collect at each batch, so a long run's recording stays bounded.
    if (history_) history_->entryCount(kCPU);
    if (batch_.empty()) return;
    emit worker_.batchReady(batch_);
    batch_ = MetricBatch{};
    last_ = Clock::now();
  }

  // The protocol violation that ended the run; empty when there was none.
  const QString& violation() const { return violation_; }

 private:
  using Clock = std::chrono::steady_clock;
  void maybeFlush() {
    if (Clock::now() - last_ >= std::chrono::milliseconds(33)) flush();
  }

  LabWorker& worker_;
  RunControl& control_;
  const MemoryHistory* history_;  // null when the run records no memory history
  lab::UpdateChecker checker_;
  MetricBatch batch_;
  QString violation_;
  Clock::time_point last_ = Clock::now();
};

}  // namespace

void LabWorker::run(std::shared_ptr<lab::Lab> theLab, const ParamMap& settings) { runLab(*theLab, settings); }

void LabWorker::runLab(lab::Lab& theLab, const ParamMap& settings) {
  QString error;
  QByteArray snapshot;
  // The settings, checked first (Lab::check: settings that contradict one another). A lab runs in a
  // Python session of its own, so it starts from clean devices whatever an earlier run left.
  std::optional<lab::Params> params;
  try {
    params.emplace(theLab.defaults());
    for (const auto& [name, value] : settings) params->set(name, value);
    theLab.check(*params);
  } catch (const std::exception& e) {
    emit memoryHistoryReady({});
    emit finished(QString::fromUtf8(e.what()));
    return;
  }
  {
    // Recording starts here, on the thread that runs the lab -- or, for a Python lab, in its own
    // session, which writes the snapshot to a file of this run's when it ends.
    std::optional<MemoryHistory> history;
    auto* pythonLab = dynamic_cast<course::PythonLab*>(&theLab);
    std::optional<QTemporaryDir> pythonHistory;
    if (control_.recordMemoryHistory() && pythonLab) {
      pythonHistory.emplace();
      pythonLab->recordMemorySnapshot(pythonHistory->filePath("history.pickle"));
    } else if (control_.recordMemoryHistory()) {
      history.emplace();
    }
    BatchingSink sink(*this, control_, history ? &*history : nullptr);
    try {
      theLab.run(*params, sink, control_.stop);
    } catch (const std::exception& e) {
      error = QString::fromUtf8(e.what());
    }
    if (!sink.violation().isEmpty()) error = "The lab broke the protocol: " + sink.violation();
    sink.flush();
    try {
      if (history) snapshot = QByteArray::fromStdString(history->snapshotPickle());
    } catch (const std::exception& e) {
      qWarning("the run's memory history could not be pickled: %s", e.what());
    }
    if (pythonLab && pythonLab->memorySnapshotWritten()) {
      QFile written(pythonHistory->filePath("history.pickle"));
      if (written.open(QIODevice::ReadOnly)) snapshot = written.readAll();
    }
  }  // and stops here, before the GUI hears that the run ended
  emit memoryHistoryReady(snapshot);
  emit finished(error);
}

LabRunner::LabRunner(QObject* parent) : QObject(parent) {
  qRegisterMetaType<gpulab::app::MetricBatch>();
  qRegisterMetaType<ParamMap>("std::map<std::string,std::string>");
  qRegisterMetaType<std::shared_ptr<lab::Lab>>("std::shared_ptr<gpulab::lab::Lab>");
  worker_ = new LabWorker(control_);
  worker_->moveToThread(&thread_);
  connect(&thread_, &QThread::finished, worker_, &QObject::deleteLater);
  connect(this, &LabRunner::startRequested, worker_, &LabWorker::run, Qt::QueuedConnection);
  connect(worker_, &LabWorker::batchReady, worker_, [this](const MetricBatch& batch) {  // on the worker's thread
    {
      std::lock_guard lock(handoffMutex_);
      handoff_.push_back(batch);
    }
    emit batchesHandedOver();
  }, Qt::DirectConnection);
  connect(this, &LabRunner::batchesHandedOver, this, &LabRunner::deliverBatches, Qt::QueuedConnection);
  connect(worker_, &LabWorker::memoryHistoryReady, this, &LabRunner::memoryHistoryReady, Qt::QueuedConnection);
  connect(worker_, &LabWorker::finished, this, [this](const QString& error) {
    running_ = false;
    control_.setPaused(false);
    emit finished(error);
  }, Qt::QueuedConnection);
  thread_.setObjectName("lab worker");
  thread_.start();
}

void LabRunner::deliverBatches() {
  std::deque<MetricBatch> ready;
  {
    std::lock_guard lock(handoffMutex_);
    ready.swap(handoff_);
  }
  for (const MetricBatch& batch : ready) emit batchReady(batch);
}

LabRunner::~LabRunner() {
  control_.stop.requestStop();
  control_.wake();
  thread_.quit();
  thread_.wait();
}

void LabRunner::start(std::shared_ptr<lab::Lab> theLab, const ParamMap& params) {
  if (running_) return;
  running_ = true;
  control_.stop.reset();
  control_.setPaused(false);
  emit startRequested(std::move(theLab), params);
}

void LabRunner::pause(bool paused) {
  if (running_) control_.setPaused(paused);
}

void LabRunner::stop() {
  control_.stop.requestStop();
  control_.wake();
}

}  // namespace gpulab::app
