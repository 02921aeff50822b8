#include "app/gui/lab_runner.h"

#include <chrono>
#include <exception>

#include "engine/core/errors.h"
#include "lessons/labs/labs.h"

namespace gpulab::app {

using ParamMap = std::map<std::string, std::string>;

bool MetricBatch::empty() const {
  return steps.isEmpty() && epochs.isEmpty() && memory.isEmpty() && measurements.isEmpty() && ooms.isEmpty() &&
         recoveries.isEmpty() && reports.isEmpty() && messages.isEmpty() && !done;
}

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

// Collects what the lab reports; emits a batch at most every 33 ms.
class BatchingSink final : public lab::MetricSink {
 public:
  BatchingSink(LabWorker& worker, RunControl& control) : worker_(worker), control_(control) {}

  void onStep(const lab::StepMetrics& m) override {
    batch_.steps << m;
    maybeFlush();
    control_.waitWhilePaused();  // Pause holds the lab here, between two steps
  }
  void onEpoch(const lab::EpochMetrics& m) override { add(batch_.epochs, m); }
  void onMemory(const lab::MemorySample& m) override {
    add(batch_.memory, m);
    control_.waitWhilePaused();
  }
  void onMeasurement(const lab::Measurement& m) override { add(batch_.measurements, m); }
  void onOutOfMemory(const lab::OutOfMemoryReport& r) override { add(batch_.ooms, r); }
  void onRecovered(const lab::RecoveryReport& r) override { add(batch_.recoveries, r); }
  void onMemoryReport(const lab::MemoryReport& r) override { add(batch_.reports, r); }
  void onMessage(lab::MessageKind kind, const std::string& text) override {
    batch_.messages << std::pair{kind, QString::fromStdString(text)};
    maybeFlush();
  }
  void onDone(const lab::RunSummary& s) override {
    batch_.done = s;
    flush();
  }

  void flush() {
    if (batch_.empty()) return;
    emit worker_.batchReady(batch_);
    batch_ = MetricBatch{};
    last_ = Clock::now();
  }

 private:
  using Clock = std::chrono::steady_clock;
  template <class V, class T>
  void add(V& vec, const T& value) {
    vec << value;
    maybeFlush();
  }
  void maybeFlush() {
    if (Clock::now() - last_ >= std::chrono::milliseconds(33)) flush();
  }

  LabWorker& worker_;
  RunControl& control_;
  MetricBatch batch_;
  Clock::time_point last_ = Clock::now();
};

}  // namespace

void LabWorker::run(const QString& labId, const ParamMap& settings) {
  BatchingSink sink(*this, control_);
  QString error;
  try {
    auto theLab = labs::makeLab(labId.toStdString());
    lab::Params params = theLab->defaults();
    for (const auto& [name, value] : settings) params.set(name, value);
    theLab->run(params, sink, control_.stop);
  } catch (const std::exception& e) {
    error = QString::fromUtf8(e.what());
  }
  sink.flush();
  emit finished(error);
}

LabRunner::LabRunner(QObject* parent) : QObject(parent) {
  qRegisterMetaType<gpulab::app::MetricBatch>();
  qRegisterMetaType<ParamMap>("std::map<std::string,std::string>");
  worker_ = new LabWorker(control_);
  worker_->moveToThread(&thread_);
  connect(&thread_, &QThread::finished, worker_, &QObject::deleteLater);
  connect(this, &LabRunner::startRequested, worker_, &LabWorker::run, Qt::QueuedConnection);
  connect(worker_, &LabWorker::batchReady, this, &LabRunner::batchReady, Qt::QueuedConnection);
  connect(worker_, &LabWorker::finished, this, [this](const QString& error) {
    running_ = false;
    control_.setPaused(false);
    emit finished(error);
  }, Qt::QueuedConnection);
  thread_.setObjectName("lab worker");
  thread_.start();
}

LabRunner::~LabRunner() {
  control_.stop.requestStop();
  control_.wake();
  thread_.quit();
  thread_.wait();
}

void LabRunner::start(const QString& labId, const ParamMap& params) {
  if (running_) return;
  running_ = true;
  control_.stop.reset();
  control_.setPaused(false);
  emit startRequested(labId, params);
}

void LabRunner::pause(bool paused) {
  if (running_) control_.setPaused(paused);
}

void LabRunner::stop() {
  control_.stop.requestStop();
  control_.wake();
}

}  // namespace gpulab::app
