#pragma once
// A notebook session without a window: a kernel (kernel_process.h) whose cells run one at a time,
// each call waiting for its cell to end. gpulab-cli runs a lesson's code cells and checks its
// exercises with it, in the same kernel the window uses.
#include <QJsonObject>
#include <QString>
#include <functional>
#include <optional>

#include "app/notebook/kernel_process.h"

namespace gpulab::notebook {

class HeadlessSession {
 public:
  // Starts a kernel (the emulated GPU as cuda:0 when asked) and waits until it is ready; ok() says
  // whether it is, error() why not. `stopRequested`, when given, is asked every 10 ms while the kernel
  // starts and while a cell runs: when it says true, the start is given up (the session is then not
  // ok: "stopped while starting"), or the cell is interrupted (KeyboardInterrupt) -- and a cell still
  // running a second later, inside one long engine operation, which Python cannot interrupt, ends
  // with its session (the result says Interrupted; the session is then over).
  explicit HeadlessSession(bool emulatedGpu, int startTimeoutMs = 60000, std::function<bool()> stopRequested = {})
      : HeadlessSession(Machine::thisMachine(emulatedGpu), startTimeoutMs, std::move(stopRequested)) {}
  // The same on `machine` (machine.h).
  explicit HeadlessSession(const Machine& machine, int startTimeoutMs = 60000, std::function<bool()> stopRequested = {});
  bool ok() const { return error_.isEmpty(); }
  const QString& error() const { return error_; }
  bool cudaAvailable() const { return cuda_; }
  // Whether cuda:0 is the emulated GPU: asked for, and no real GPU before it (beside a real GPU the
  // emulated one comes after it, and cuda:0 is the real one).
  bool cudaIsEmulated() const { return emulated_; }
  const QString& deviceName() const { return device_; }

  // What the cell prints, as it comes ("stdout" or "stderr").
  using OutputHandler = std::function<void(const QString& name, const QString& text)>;
  void setOutputHandler(OutputHandler handler) { onOutput_ = std::move(handler); }
  // What the cell sends through the lab protocol (lab.view(...), lab.point(...), ...), in its JSON form.
  using LabUpdateHandler = std::function<void(const QJsonObject& update)>;
  void setLabUpdateHandler(LabUpdateHandler handler) { onLabUpdate_ = std::move(handler); }
  // Each lab.progress() is answered with goOn() (KernelProcess::holdAtProgress), or -- when the run
  // was stopped meanwhile -- with stopAtProgress(), which ends it at its next lab.progress(); then the
  // Stop sends no interrupt, which could land in what the lab does after it catches the stop (its
  // summary), and a cell still running a second later ends with its session, as after an interrupt.
  void holdAtProgress() { kernel_.holdAtProgress(); }
  void goOn() { kernel_.goOn(); }
  void stopAtProgress() {
    kernel_.stopAtProgress();
    stopDelivered_ = true;
  }
  // Runs one cell and waits for its end (a cell past `timeoutMs` is interrupted, then reported as
  // such -- or, where the interrupt goes unheeded, ends with its session: KernelProcess::stop);
  // measureValues as KernelProcess::run. The cells run in this program's working folder, and input()
  // raises (no one could answer it).
  CellResult run(const QString& cellId, const QString& code, const std::optional<QMap<QString, QString>>& measureValues = std::nullopt,
                 int timeoutMs = 600000);

 private:
  KernelProcess kernel_;
  QString error_, device_;
  bool cuda_ = false, emulated_ = false;
  OutputHandler onOutput_;
  LabUpdateHandler onLabUpdate_;
  std::function<bool()> stopRequested_;
  bool stopDelivered_ = false;  // by stopAtProgress(), in the cell now running
};

}  // namespace gpulab::notebook
