#pragma once
// The notebook kernel behind a lesson's code cells: `python3 -m gpulab.kernel` (python/gpulab/kernel.py,
// which documents the protocol) in a child process, one session per process. The cells the learner
// runs share its namespace; what they print, raise and report (lab.log, the device's memory) comes
// back as signals on the thread that owns this object.
//
// Why a child process and not an interpreter inside the window: Stop is SIGINT, which Python turns
// into a KeyboardInterrupt wherever the cell is -- a loop, time.sleep, a blocking read -- and the
// session goes on; a cell that crashes the interpreter or eats the machine's memory takes its own
// process down, not the window; Restart is a new process, as clean as a notebook's. The interpreter
// is the same Debian python3 with the same package as `gpulab-cli run`.
#include <QByteArray>
#include <QJsonObject>
#include <QMap>
#include <QObject>
#include <QProcess>
#include <QString>
#include <QStringList>
#include <optional>
#include <vector>

#include "engine/lab/lab.h"  // lab::Measurement: a plain struct of the lab protocol, nothing to link

namespace gpulab::notebook {

// How a cell ended, with its error when it raised.
struct CellResult {
  enum class Status { Ok, Error, Interrupted, KernelDied };
  Status status = Status::Ok;
  double seconds = 0.0;
  QString errorType;   // "RuntimeError", "KeyboardInterrupt", ...
  QString message;     // the exception's text
  QString traceback;   // as Python prints it, from the cell's own frames on
  // The lessons' errors, which the window shows as the labs show theirs: "device" (tensors on two
  // devices), "oom" (torch.cuda.OutOfMemoryError), or empty.
  QString kind;
  // A run asked to measure (an exercise's): what it measured, as a lab's run reports its measurements
  // ("errors", "last loss", "peak allocated" in bytes, ...), and the values it could not, with why.
  bool measured = false;
  std::vector<lab::Measurement> measurements;
  QMap<QString, QString> unmeasured;
};

class KernelProcess : public QObject {
  Q_OBJECT

 public:
  explicit KernelProcess(QObject* parent = nullptr);
  // Ends the session: stdin closed (the kernel returns), then SIGKILL if it has not after a second.
  ~KernelProcess() override;

  // Starts a session; with emulatedGpu, cuda:0 is GPU Lab's emulated GPU where no real one is usable.
  // ready() or kernelDied() follows.
  void start(bool emulatedGpu);
  bool isRunning() const { return process_.state() != QProcess::NotRunning; }
  qint64 processId() const { return process_.processId(); }
  bool emulatedGpu() const { return emulatedGpu_; }
  // Queues a cell; cells run one after another in the order given. With `measureValues` (an
  // exercise's run), its result carries what it measured, the values among it (name -> Python
  // expression, evaluated after the run).
  void run(const QString& cellId, const QString& code, const std::optional<QMap<QString, QString>>& measureValues = std::nullopt);
  // Interrupts the running cell (KeyboardInterrupt; finished() reports it as Interrupted), or the
  // next queued one as it starts. Nothing happens when no cell is running or queued.
  void stop();
  // Cells sent and not finished yet, in the order they run.
  const QStringList& busyCells() const { return busyCells_; }
  // A fresh session (new process, empty namespace), on the same device choice.
  void restart();
  // Ends the session now, as the destructor does: an interrupt, the end of its input, a second's
  // wait, then SIGKILL and up to `killWaitMs` for the process to be gone (a process freeing tens of
  // GiB took longer than a second to end, on a 128 GiB GPU machine).
  void shutdown();
  void setKillWaitMs(int ms) { killWaitMs_ = ms; }
  // Ends the session at once (SIGKILL), whatever it is doing: for a Stop that an interrupt did not
  // end. No kernelDied follows.
  void kill();
  // A lab's session: from now on each lab.progress() needs an answer, goOn() or stopAtProgress(), one
  // per call in order; the lab waits for it at its next lab.progress() (python/gpulab/kernel.py), so
  // that a lab the window holds at a progress update (Pause) waits there, as a C++ lab's thread does,
  // one step later.
  void holdAtProgress();
  void goOn();
  // The answer to a lab.progress() when the run was stopped meanwhile: the lab's next lab.progress()
  // raises KeyboardInterrupt. Certain where an interrupt is not: SIGINT goes to whichever thread of
  // the process has it unblocked (a BLAS worker started inside the cell, say), and a main thread
  // blocked reading its next command then never sees it.
  void stopAtProgress();

 signals:
  // The session is up: GPU Lab's torch's version, cuda:0's name ("cpu" without a CUDA device) and
  // whether it is GPU Lab's emulated GPU.
  void ready(const QString& torchVersion, bool cudaAvailable, const QString& deviceName, bool emulated);
  void started(const QString& cellId);
  // Text the cell printed: name is "stdout" or "stderr".
  void output(const QString& cellId, const QString& name, const QString& text);
  // An update of the lab protocol the cell sent (lab.view(...), lab.point(...), ...), in its JSON form
  // (app/course/lab_json.h), not checked yet.
  void labUpdate(const QString& cellId, const QJsonObject& update);
  // lab.log(loss=...) from the cell: one point of each named series at `step`.
  void logged(const QString& cellId, qint64 step, const QMap<QString, double>& values);
  // cuda:0's allocator while the cell runs (every 20 ms) and when it ends; `t` in seconds from its start;
  // `categories`: the live bytes by what they are for ("parameter", "activation", ..., "other"), as the
  // engine tags its allocations, followed since the session started.
  void memory(const QString& cellId, double t, qint64 allocated, qint64 reserved, const QMap<QString, qint64>& categories);
  void finished(const QString& cellId, const gpulab::notebook::CellResult& result);
  // The process ended or could not start; every cell sent and not finished got finished(KernelDied)
  // first.
  void kernelDied(const QString& reason);
  // Text the process wrote below Python (the engine's own std::cout/std::cerr), as it came.
  void rawOutput(const QString& text);

 private:
  void answerProgress(const char* line);
  void readEvents();
  void handleEvent(const QByteArray& line);
  void onProcessFinished(int exitCode, QProcess::ExitStatus status);

  QProcess process_;
  int killWaitMs_ = 5000;
  QByteArray pending_;     // stdout bytes after the last complete line
  QStringList busyCells_;  // run() calls not finished yet, the running one first
  bool emulatedGpu_ = false;
  bool stopping_ = false;  // shutdown() asked for the end: no kernelDied
};

}  // namespace gpulab::notebook

Q_DECLARE_METATYPE(gpulab::notebook::CellResult)
