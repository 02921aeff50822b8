#include "app/notebook/headless_session.h"

#include <QEventLoop>
#include <QTimer>

namespace gpulab::notebook {

HeadlessSession::HeadlessSession(const Machine& machine, int startTimeoutMs, std::function<bool()> stopRequested)
    : stopRequested_(std::move(stopRequested)) {
  QEventLoop loop;
  bool ready = false;
  QObject::connect(&kernel_, &KernelProcess::ready, &loop, [&](const QString&, bool cuda, const QString& device, bool emulated) {
    ready = true;
    cuda_ = cuda;
    emulated_ = emulated;
    device_ = device;
    loop.quit();
  });
  QObject::connect(&kernel_, &KernelProcess::kernelDied, &loop, [&](const QString& reason) {
    error_ = reason;
    loop.quit();
  });
  QObject::connect(&kernel_, &KernelProcess::rawOutput, &loop, [&](const QString& text) { error_ += text; });
  QTimer::singleShot(startTimeoutMs, &loop, &QEventLoop::quit);
  QTimer stopPoll;
  bool stopped = false;
  QObject::connect(&stopPoll, &QTimer::timeout, &loop, [&] {
    if (!stopRequested_()) return;
    stopped = true;
    loop.quit();
  });
  if (stopRequested_) stopPoll.start(10);
  kernel_.start(machine);
  loop.exec();
  if (stopped && !ready) {
    kernel_.kill();
    error_ = "stopped while starting";
    return;
  }
  if (ready) error_.clear();
  else if (error_.isEmpty()) error_ = QString("the Python session did not start within %1 s").arg(startTimeoutMs / 1000);
  QObject::connect(&kernel_, &KernelProcess::output, &kernel_, [this](const QString&, const QString& name, const QString& text) {
    if (onOutput_) onOutput_(name, text);
  });
  QObject::connect(&kernel_, &KernelProcess::rawOutput, &kernel_, [this](const QString& text) {
    if (onOutput_) onOutput_("stderr", text);
  });
  QObject::connect(&kernel_, &KernelProcess::labUpdate, &kernel_, [this](const QString&, const QJsonObject& update) {
    if (onLabUpdate_) onLabUpdate_(update);
  });
}

CellResult HeadlessSession::run(const QString& cellId, const QString& code, const std::optional<QMap<QString, QString>>& measureValues,
                                int timeoutMs) {
  CellResult result;
  result.status = CellResult::Status::KernelDied;
  result.message = error_;
  if (!ok() || !kernel_.isRunning()) return result;
  QEventLoop loop;
  QObject::connect(&kernel_, &KernelProcess::finished, &loop, [&](const QString& id, const CellResult& r) {
    if (id != cellId) return;
    result = r;
    loop.quit();
  });
  QTimer timeout;
  timeout.setSingleShot(true);
  QObject::connect(&timeout, &QTimer::timeout, &kernel_, &KernelProcess::stop);  // its finished() follows
  timeout.start(timeoutMs);
  // Stop: an interrupt first; the process itself a second later if the cell has not ended by then.
  QTimer stopPoll, kill;
  kill.setSingleShot(true);
  bool killed = false;
  QObject::connect(&stopPoll, &QTimer::timeout, &loop, [&] {
    if (!stopRequested_ || !stopRequested_()) return;
    stopPoll.stop();
    if (!stopDelivered_) kernel_.stop();
    kill.start(1000);
  });
  QObject::connect(&kill, &QTimer::timeout, &loop, [&] {
    killed = true;
    kernel_.kill();
    loop.quit();
  });
  if (stopRequested_) stopPoll.start(10);
  stopDelivered_ = false;
  kernel_.run(cellId, code, measureValues);
  loop.exec();
  if (killed) {
    result = CellResult{.status = CellResult::Status::Interrupted, .errorType = "KeyboardInterrupt",
                        .message = "stopped inside an operation Python could not interrupt: the session was ended"};
    error_ = "the session was ended by Stop";
    return result;
  }
  if (result.status == CellResult::Status::KernelDied) error_ = result.message.isEmpty() ? "the Python session ended" : result.message;
  return result;
}

}  // namespace gpulab::notebook
