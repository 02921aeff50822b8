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
//
// Note [the kernel's process group]: the kernel runs in a process group of its own (setpgid in the
// child), as Jupyter's kernels do, and every end of a session ends the whole group: a restart, the
// window's end, Stop's escalation, and a kernel that ended by itself -- processes a cell started
// (subprocess.Popen(["sleep", "1000"]), a multiprocessing worker) outlived Restart and the window,
// re-parented to init (issue 48, 3.4). A group is signalled by its leader's pid, which Linux does not
// hand out again while the group has a member, so a group that is already empty is the only one a
// late kill can name (and then it fails with ESRCH).
//
// Nothing here waits on the thread that owns it, except shutdown() and the destructor (the window's
// end, a headless session): a restart hands the old process a second to end (its input closed, an
// interrupt) and kills its group after that, on a timer; Stop interrupts, and kills the group when
// the cell has not ended after stopGraceMs() -- a cell that ignores SIGINT could not be stopped at
// all, and Restart blocked the window for a second (issue 48, 3.3).
#include <QByteArray>
#include <QJsonObject>
#include <QMap>
#include <QObject>
#include <QProcess>
#include <QString>
#include <QStringList>
#include <QTimer>
#include <optional>
#include <vector>

#include "app/notebook/machine.h"

#include "engine/lab/lab.h"  // lab::Measurement: a plain struct of the lab protocol, nothing to link

namespace gpulab::notebook {

// How a cell ended, with its error when it raised.
struct CellResult {
  enum class Status { Ok, Error, Interrupted, KernelDied };
  // For KernelDied: whether the window ended the session under the cell -- Stop killed it after the
  // interrupt went unheeded, or the session was ended (a restart, another lesson) while the cell ran
  // or waited -- or it ended by itself (a crash, os._exit).
  enum class Ending { ByItself, KilledByStop, Ended };
  Status status = Status::Ok;
  Ending ending = Ending::ByItself;
  bool started = true;  // false: it was still queued when its session ended
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
  // Output past the session's limit (KernelProcess::setOutputLimit): the characters the cell printed in
  // all, and the file that holds them (empty when none could be written). -1: it stayed under it.
  qint64 outputChars = -1;
  QString outputFile;
};

class KernelProcess : public QObject {
  Q_OBJECT

 public:
  explicit KernelProcess(QObject* parent = nullptr);
  // Ends the session as shutdown() does; the groups of sessions still ending are killed.
  ~KernelProcess() override;

  // Starts a session; with emulatedGpu, cuda:0 is GPU Lab's emulated GPU where no real one is usable.
  // ready() or kernelDied() follows. A session still running ends as end() ends it.
  void start(bool emulatedGpu) { start(Machine::thisMachine(emulatedGpu)); }
  // The same on `machine` (machine.h): this one, or one an exercise grades the learner's code on.
  void start(const Machine& machine);
  bool isRunning() const { return process_ && process_->state() != QProcess::NotRunning; }
  qint64 processId() const { return process_ ? process_->processId() : 0; }
  bool emulatedGpu() const { return machine_.emulatedGpu; }
  // The folder the next session's cells run in (their files land there), created when it starts; empty:
  // this program's own working folder.
  void setWorkingDirectory(const QString& folder) { workingDirectory_ = folder; }
  const QString& workingDirectory() const { return workingDirectory_; }
  // From the next session on, what the window receives of one cell's output: its first `chars`
  // characters; the whole goes to a file in `folder` (outputCapped() says which, CellResult how much).
  // 0: all of it (the default: gpulab-cli prints what a cell prints).
  void setOutputLimit(qint64 chars, const QString& folder) {
    outputLimit_ = chars;
    outputFolder_ = folder;
  }
  // Whether the cells' input() asks the window (inputRequested(), answered by sendInput()); without it
  // (the default) input() raises StdinNotImplementedError, as ipykernel's does without a frontend.
  void setAllowStdin(bool allow) { allowStdin_ = allow; }
  // What the learner typed for the cell's input() (inputRequested).
  void sendInput(const QString& text);
  // Queues a cell; cells run one after another in the order given. With `measureValues` (an
  // exercise's run), its result carries what it measured, the values among it (name -> Python
  // expression, evaluated after the run).
  void run(const QString& cellId, const QString& code, const std::optional<QMap<QString, QString>>& measureValues = std::nullopt);
  // Interrupts the running cell (KeyboardInterrupt; finished() reports it as Interrupted), or the
  // next queued one as it starts. Nothing happens when no cell is running or queued. A cell still
  // running stopGraceMs() later -- it ignores SIGINT, or waits inside one long operation -- ends with
  // its session: the group is killed, the cells get finished(KernelDied, KilledByStop), and
  // kernelDied() says why. Returns at once.
  void stop();
  static constexpr int kStopGraceMs = 3000;
  void setStopGraceMs(int ms) { stopGraceMs_ = ms; }
  int stopGraceMs() const { return stopGraceMs_; }
  // Cells sent and not finished yet, in the order they run.
  const QStringList& busyCells() const { return busyCells_; }
  // A fresh session (new process, empty namespace), on the same device choice.
  void restart();
  // Ends the session without waiting for it: the cells sent get finished(KernelDied, Ended) at once;
  // the process gets its input closed (and an interrupt, if a cell runs), and its group is killed
  // when it has ended or a second later. No kernelDied follows.
  void end();
  // Ends the session now, and waits (the window's end; a headless session): an interrupt, the end of
  // its input, a second's wait, then SIGKILL to its group and up to `killWaitMs` for the process to be
  // gone (a process freeing tens of GiB took longer than a second to end, on a 128 GiB GPU machine).
  void shutdown();
  void setKillWaitMs(int ms) { killWaitMs_ = ms; }
  // Ends the session at once (SIGKILL to its group), whatever it is doing: for a Stop that an interrupt
  // did not end. No kernelDied follows.
  void kill();
  // A lab's session: from now on each lab.progress() needs an answer, goOn() or stopAtProgress(), one
  // per call in order; the lab waits for it at its next lab.progress() (python/gpulab/kernel.py), so
  // that a lab the window holds at a progress update (Pause) waits there, one step later.
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
  // The cell's output passed the limit (setOutputLimit): no more of it comes as output(); the whole is
  // in `file` (empty, with `why`, when it could not be written).
  void outputCapped(const QString& cellId, qint64 limit, const QString& file, const QString& why);
  // The cell called input(prompt) and waits for sendInput() (with setAllowStdin(true)).
  void inputRequested(const QString& cellId, const QString& prompt);
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
  // The process ended or could not start, or Stop ended it; every cell sent and not finished got
  // finished(KernelDied) first.
  void kernelDied(const QString& reason);
  // Text the process wrote below Python (the engine's own std::cout/std::cerr), as it came.
  void rawOutput(const QString& text);

 private:
  void answerProgress(const char* line);
  void readEvents();
  void handleEvent(const QByteArray& line);
  void onProcessFinished(int exitCode, QProcess::ExitStatus status);
  void onStopGraceOver();
  // finished(KernelDied) for every cell sent and not finished, the first as the one running.
  void abandonCells(CellResult::Ending ending, const QString& runningMessage, const QString& queuedMessage);
  // The current process, handed over to end by itself (and then its group killed), or after a second
  // by the kill of its group; this object hears nothing more of it.
  void retire(bool killNow);
  void signalGroup(int signal) const;

  QProcess* process_ = nullptr;  // the session's; a child of this object
  qint64 group_ = 0;             // its process group (its pid), kept after it ended: its children may not have
  quint64 session_ = 0;          // counts the processes started: events of an older one are dropped
  int killWaitMs_ = 5000;
  int stopGraceMs_ = kStopGraceMs;
  QTimer stopGrace_;
  qsizetype stopTarget_ = -1;  // finishedCount_ when Stop was pressed: the cell then running is the one to end
  qsizetype finishedCount_ = 0;  // cells of this session that finished
  QByteArray pending_;     // stdout bytes after the last complete line
  QStringList busyCells_;  // run() calls not finished yet, the running one first
  bool runningStarted_ = false;  // the first of busyCells_ has started
  QString workingDirectory_, outputFolder_;
  qint64 outputLimit_ = 0;
  bool allowStdin_ = false;
  Machine machine_;  // the session's, for restart()
  bool stopping_ = false;  // shutdown() asked for the end: no kernelDied
};

}  // namespace gpulab::notebook

Q_DECLARE_METATYPE(gpulab::notebook::CellResult)
