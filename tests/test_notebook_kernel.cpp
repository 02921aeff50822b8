// The notebook kernel behind code cells (app/notebook/kernel_process.h, python/gpulab/kernel.py): cells
// share a session, print and raise as a notebook shows it, report lab.log values and the device's
// memory, stop within 100 ms wherever they are, and a restart or a closed window ends the session
// cleanly. Runs the build tree's gpulab package on Debian's python3.
#include <QDir>
#include <QElapsedTimer>
#include <QRegularExpression>
#include <QSignalSpy>
#include <QTemporaryDir>
#include <QtTest>
#include <cerrno>
#include <csignal>
#include <sys/types.h>

#include "app/notebook/kernel_process.h"
#include "app/notebook/python_environment.h"
#include "test_util.h"

using gpulab::notebook::CellResult;
using gpulab::notebook::KernelProcess;

namespace {

// What one cell did, collected from the kernel's signals.
struct CellRun {
  QString stdoutText, stderrText;
  CellResult result;
  bool finished = false;
  int outputEvents = 0;  // output() signals: one per stream event the kernel sent
};

class Recorder : public QObject {
 public:
  explicit Recorder(KernelProcess& k) {
    connect(&k, &KernelProcess::output, this, [this](const QString& cell, const QString& name, const QString& text) {
      (name == "stdout" ? runs[cell].stdoutText : runs[cell].stderrText) += text;
      ++runs[cell].outputEvents;
    });
    connect(&k, &KernelProcess::finished, this, [this](const QString& cell, const CellResult& r) {
      runs[cell].result = r;
      runs[cell].finished = true;
    });
    connect(&k, &KernelProcess::logged, this, [this](const QString&, qint64 step, const QMap<QString, double>& values) {
      steps.push_back(step);
      losses.push_back(values.value("loss"));
    });
    connect(&k, &KernelProcess::memory, this,
            [this](const QString&, double, qint64 allocated, qint64 reserved, const QMap<QString, qint64>& categories) {
              peakAllocated = std::max(peakAllocated, allocated);
              peakReserved = std::max(peakReserved, reserved);
              lastCategories = categories;
              ++memoryEvents;
            });
    connect(&k, &KernelProcess::ready, this, [this](const QString&, bool cuda, const QString& device) {
      ready = true;
      cudaAvailable = cuda;
      deviceName = device;
    });
  }
  QMap<QString, CellRun> runs;
  QVector<qint64> steps;
  QVector<double> losses;
  qint64 peakAllocated = 0, peakReserved = 0;
  int memoryEvents = 0;
  QMap<QString, qint64> lastCategories;  // the last memory event's live bytes by category
  bool ready = false, cudaAvailable = false;
  QString deviceName;
};

// Whether process `pid` is gone: no such process, or a zombie its new parent (init, in a container
// perhaps one that never reaps) has not reaped yet -- it runs nothing any more.
bool processGone(qint64 pid) {
  if (::kill(static_cast<pid_t>(pid), 0) != 0 && errno == ESRCH) return true;
  QFile stat(QString("/proc/%1/stat").arg(pid));
  if (!stat.open(QIODevice::ReadOnly)) return true;
  const QByteArray fields = stat.readAll();
  const qsizetype afterName = fields.lastIndexOf(')');  // the command name may hold spaces
  return afterName >= 0 && fields.mid(afterName + 2, 1) == "Z";
}

// The pids a cell printed, one line of numbers.
QList<qint64> pidsIn(const QString& text) {
  QList<qint64> pids;
  for (const QString& word : text.split(QRegularExpression("\\s+"), Qt::SkipEmptyParts)) pids << word.toLongLong();
  return pids;
}

// Runs `code` as cell `id` and waits for it to finish.
const CellRun& runCell(KernelProcess& k, Recorder& r, const QString& id, const QString& code, int timeoutMs = 30000) {
  k.run(id, code);
  if (!QTest::qWaitFor([&] { return r.runs[id].finished; }, timeoutMs)) qWarning("cell %s did not finish", qPrintable(id));
  return r.runs[id];
}

}  // namespace

class TestNotebookKernel : public QObject {
  Q_OBJECT

 private slots:
  void initTestCase() {
    if (gpulab::notebook::buildTreePackageDir().isEmpty()) QSKIP("the gpulab package is not built beside this test");
  }

  void cellsShareOneSessionAndShowTheLastValue() {
    KernelProcess k;
    Recorder r(k);
    k.start(false);
    QVERIFY(QTest::qWaitFor([&] { return r.ready; }, 30000));
    QVERIFY(!r.cudaAvailable);  // this machine as it is: no GPU here
    QCOMPARE(runCell(k, r, "a", "import torch\nx = torch.arange(4.0)\nprint('hello')").result.status, CellResult::Status::Ok);
    QCOMPARE(r.runs["a"].stdoutText, QString("hello\n"));
    // The next cell sees x; its last expression's value is shown, as a notebook shows it.
    const CellRun& b = runCell(k, r, "b", "y = x * 2\ny.sum()");
    QCOMPARE(b.result.status, CellResult::Status::Ok);
    QCOMPARE(b.stdoutText, QString("tensor(12.)\n"));
    QCOMPARE(runCell(k, r, "c", "y = None\ny").stdoutText, QString());  // None is not shown
  }

  void errorsComeWithTheirTracebackAndTheSessionGoesOn() {
    KernelProcess k;
    Recorder r(k);
    k.start(false);
    const CellRun& a = runCell(k, r, "a", "def f(d):\n    return 1 / d\nf(0)");
    QCOMPARE(a.result.status, CellResult::Status::Error);
    QCOMPARE(a.result.errorType, QString("ZeroDivisionError"));
    QVERIFY2(a.result.traceback.contains("<cell a>\", line 3") && a.result.traceback.contains("return 1 / d"),
             qPrintable(a.result.traceback));
    QVERIFY2(!a.result.traceback.contains("kernel.py"), qPrintable(a.result.traceback));  // the kernel's frames are cut
    QCOMPARE(a.result.kind, QString());
    // The lessons' own errors are named: tensors on two devices (here without a GPU: the CPU tensor
    // meets cuda, which PyTorch without a GPU refuses with its own RuntimeError).
    const CellRun& b = runCell(k, r, "b", "import torch\ntorch.ones(2).to('cuda')");
    QCOMPARE(b.result.status, CellResult::Status::Error);
    QCOMPARE(b.result.errorType, QString("RuntimeError"));
    const CellRun& c = runCell(k, r, "c", "print(f(4))");
    QCOMPARE(c.result.status, CellResult::Status::Ok);
    QCOMPARE(c.stdoutText, QString("0.25\n"));
    QCOMPARE(runCell(k, r, "d", "def broken(:\n  pass").result.errorType, QString("SyntaxError"));
  }

  void theEmulatedGpuIsCudaZeroWithItsErrorsAndMemory() {
    KernelProcess k;
    Recorder r(k);
    k.start(true);
    QVERIFY(QTest::qWaitFor([&] { return r.ready; }, 30000));
    QVERIFY(r.cudaAvailable);
    // Beside a real GPU, the real one is cuda:0 and the emulated one comes after it (the H200, 2026-11-28):
    // the rest holds there too.
    QVERIFY2(r.deviceName.contains("emulated") != gpulab::test::realGpu(), qPrintable(r.deviceName));
    const CellRun& a = runCell(k, r, "a", "import torch\nx = torch.ones(3, device='cuda')\nx + torch.ones(3)");
    QCOMPARE(a.result.status, CellResult::Status::Error);
    QCOMPARE(a.result.kind, QString("device"));
    QVERIFY(a.result.message.contains("Expected all tensors to be on the same device"));
    const CellRun& b = runCell(k, r, "b", "import torch\nbig = torch.empty(10**15, device='cuda')");
    QCOMPARE(b.result.kind, QString("oom"));
    QCOMPARE(b.result.errorType, QString("OutOfMemoryError"));
    // lab.log points and the allocator's numbers reach the views.
    const CellRun& c = runCell(k, r, "c",
                               "keep = torch.empty(1 << 20, device='cuda')\n"
                               "for step in range(3):\n    lab.log(loss=1.0 / (step + 1))\n");
    QCOMPARE(c.result.status, CellResult::Status::Ok);
    QCOMPARE(r.steps, (QVector<qint64>{0, 1, 2}));
    QCOMPARE(r.losses, (QVector<double>{1.0, 0.5, 1.0 / 3.0}));
    QVERIFY(r.memoryEvents >= 1);
    QVERIFY2(r.peakAllocated >= (qint64{4} << 20), qPrintable(QString::number(r.peakAllocated)));
    QVERIFY(r.peakReserved >= r.peakAllocated);
    QCOMPARE(runCell(k, r, "d", "lab.log(loss='low')").result.errorType, QString("TypeError"));
    // Memory by category: a model moved to cuda:0 holds parameters, its backward gradients, Adam its
    // two moments; a forward's output that the cell keeps is an activation.
    const CellRun& e = runCell(k, r, "e",
                               "import torch.nn as nn\n"
                               "net = nn.Linear(512, 512).to('cuda')\n"  // 1 MiB of weights
                               "opt = torch.optim.Adam(net.parameters())\n"
                               "net(torch.ones(64, 512, device='cuda')).sum().backward()\n"
                               "opt.step()\n"
                               "kept = net(torch.ones(1024, 512, device='cuda'))\n");  // 2 MiB
    QCOMPARE(e.result.status, CellResult::Status::Ok);
    const QMap<QString, qint64>& bytes = r.lastCategories;
    const qint64 weights = 512 * 512 * 4 + 512 * 4;
    QVERIFY2(bytes.value("parameter") >= weights, qPrintable(QString::number(bytes.value("parameter"))));
    QVERIFY2(bytes.value("gradient") >= weights, qPrintable(QString::number(bytes.value("gradient"))));
    QVERIFY2(bytes.value("optimizer_state") >= 2 * weights, qPrintable(QString::number(bytes.value("optimizer_state"))));
    QVERIFY2(bytes.value("activation") >= 1024 * 512 * 4, qPrintable(QString::number(bytes.value("activation"))));
  }

  // A lab's updates are queued and go out together (python/gpulab/kernel.py, _Channel): in order, and
  // the last one before a long silence still reaches the window while the cell runs -- with and
  // without a GPU (the memory sampler sends them; without a GPU it only does that).
  void queuedUpdatesArriveInOrderWhileTheCellRuns_data() {
    QTest::addColumn<bool>("emulatedGpu");
    QTest::newRow("no GPU") << false;
    QTest::newRow("emulated GPU") << true;
  }
  void queuedUpdatesArriveInOrderWhileTheCellRuns() {
    QFETCH(bool, emulatedGpu);
    KernelProcess k;
    Recorder r(k);
    k.start(emulatedGpu);
    QVERIFY(QTest::qWaitFor([&] { return r.ready; }, 30000));
    // 200 updates: more than a queue holds back at once.
    QCOMPARE(runCell(k, r, "a", "for step in range(200):\n    lab.log(loss=step)\n").result.status, CellResult::Status::Ok);
    QCOMPARE(r.steps.size(), 200);
    for (int i = 0; i < 200; ++i) QCOMPARE(r.steps[i], qint64{i});
    r.steps.clear();
    QElapsedTimer clock;
    clock.start();
    qint64 loggedAt = -1;
    QMetaObject::Connection c = connect(&k, &KernelProcess::logged, this, [&] { loggedAt = clock.elapsed(); });
    k.run("b", "lab.log(loss=1.0)\nimport time\ntime.sleep(3)\n");
    QVERIFY(QTest::qWaitFor([&] { return r.runs["b"].finished; }, 30000));
    disconnect(c);
    QVERIFY2(loggedAt >= 0 && loggedAt < 2000, qPrintable(QString::number(loggedAt)));  // not at the cell's end, 3 s on
  }

  // Stop lands within 100 ms in a busy Python loop and in a sleep, and the session keeps its state.
  void stopInterruptsWithin100msWhereverTheCellIs_data() {
    QTest::addColumn<QString>("code");
    QTest::newRow("endless loop") << "while True:\n    pass";
    QTest::newRow("sleep") << "import time\ntime.sleep(60)";
    QTest::newRow("loop of engine ops") << "import torch\nwhile True:\n    t = torch.ones(64, 64) @ torch.ones(64, 64)";
  }
  void stopInterruptsWithin100msWhereverTheCellIs() {
    QFETCH(QString, code);
    KernelProcess k;
    Recorder r(k);
    k.start(false);
    QCOMPARE(runCell(k, r, "setup", "kept = 41").result.status, CellResult::Status::Ok);
    QSignalSpy started(&k, &KernelProcess::started);
    k.run("busy", code);
    QVERIFY(QTest::qWaitFor([&] { return started.count() > 0; }, 30000));
    QTest::qWait(300);  // well inside the cell
    QVERIFY(!r.runs["busy"].finished);
    QElapsedTimer clock;
    clock.start();
    k.stop();
    QVERIFY(QTest::qWaitFor([&] { return r.runs["busy"].finished; }, 5000));
    const qint64 ms = clock.elapsed();
    QVERIFY2(ms < 100, qPrintable(QString("Stop took %1 ms").arg(ms)));
    QCOMPARE(r.runs["busy"].result.status, CellResult::Status::Interrupted);
    QCOMPARE(r.runs["busy"].result.errorType, QString("KeyboardInterrupt"));
    QCOMPARE(runCell(k, r, "after", "print(kept + 1)").stdoutText, QString("42\n"));
    // A Stop with nothing running changes nothing, and is not saved up for the next cell.
    k.stop();
    QCOMPARE(runCell(k, r, "later", "import time\ntime.sleep(0.2)\nprint('done')").stdoutText, QString("done\n"));
  }

  void restartClearsTheSession() {
    KernelProcess k;
    Recorder r(k);
    QSignalSpy died(&k, &KernelProcess::kernelDied);
    k.start(false);
    QCOMPARE(runCell(k, r, "a", "x = 1").result.status, CellResult::Status::Ok);
    k.restart();
    const CellRun& b = runCell(k, r, "b", "x");
    QCOMPARE(b.result.status, CellResult::Status::Error);
    QCOMPARE(b.result.errorType, QString("NameError"));
    QCOMPARE(died.count(), 0);  // a restart asked for is not a death
  }

  // Closing the window mid-run: the kernel is interrupted and ends, nothing hangs.
  void closingMidRunEndsTheKernel() {
    qint64 pid = 0;
    QElapsedTimer clock;
    {
      KernelProcess k;
      Recorder r(k);
      QSignalSpy started(&k, &KernelProcess::started);
      k.start(false);
      k.run("busy", "while True:\n    pass");
      QVERIFY(QTest::qWaitFor([&] { return started.count() > 0; }, 30000));
      pid = k.processId();
      clock.start();
    }
    QVERIFY2(clock.elapsed() < 1500, qPrintable(QString::number(clock.elapsed())));
    QVERIFY(pid > 0);
    QVERIFY(!QFileInfo::exists(QString("/proc/%1").arg(pid)));  // ended and reaped
  }

  // A kernel destroyed while its process is still ending (on the H200 machine, a lab's process freeing
  // ~47 GiB outlived shutdown's wait): ~QProcess waits for it and reports its end, which must reach
  // nothing of the destroyed kernel. Here no wait after the kill leaves the process to ~QProcess.
  void destroyingAKernelWhoseProcessIsStillEndingIsSafe() {
    // Qt says so when the process outlived the kernel: the case under test happened (every round here).
    static int outlived = 0;
    static QtMessageHandler previous = nullptr;
    outlived = 0;
    previous = qInstallMessageHandler([](QtMsgType type, const QMessageLogContext& context, const QString& text) {
      if (text.contains("Destroyed while process")) ++outlived;
      previous(type, context, text);
    });
    QTemporaryDir dir;
    QVERIFY(dir.isValid());
    for (int round = 0; round < 3; ++round) {
      auto* k = new KernelProcess;
      Recorder r(*k);
      QSignalSpy started(k, &KernelProcess::started);
      k->start(false);
      // The cell ignores Stop's SIGINT, so shutdown's wait runs out and it kills the process; a GiB of
      // touched memory, released as the process dies, keeps it alive a moment after the kill. The
      // cell says when it holds the memory (a file): killed before, a process ends at once.
      const QString holding = dir.filePath(QString("holding-%1").arg(round));
      k->run("busy", QString("import signal\nsignal.signal(signal.SIGINT, signal.SIG_IGN)\nheld = b'x' * (1 << 30)\n"
                             "open('%1', 'w').close()\nprint('x' * 100000)\nwhile True:\n    pass")
                         .arg(holding));  // a temporary path: no quotes in it
      QVERIFY(QTest::qWaitFor([&] { return started.count() > 0; }, 30000));
      QVERIFY(QTest::qWaitFor([&] { return QFileInfo::exists(holding); }, 30000));
      QTest::qWait(100);  // output is waiting to be read
      k->setKillWaitMs(0);
      const qint64 pid = k->processId();
      delete k;
      QVERIFY(!QFileInfo::exists(QString("/proc/%1").arg(pid)));  // ended and reaped by ~QProcess
    }
    qInstallMessageHandler(previous);
    QVERIFY2(outlived > 0, "no process outlived its kernel: the case was not tested");
  }

  // A cell that kills its own interpreter: the window hears of it, and a restart brings a session back.
  void aKernelThatDiesIsReported() {
    KernelProcess k;
    Recorder r(k);
    QSignalSpy died(&k, &KernelProcess::kernelDied);
    k.start(false);
    const CellRun& a = runCell(k, r, "a", "import os\nos._exit(3)");
    QCOMPARE(a.result.status, CellResult::Status::KernelDied);
    QVERIFY(QTest::qWaitFor([&] { return died.count() == 1; }, 5000));
    QVERIFY(died.first().first().toString().contains("exit status 3"));
    k.restart();
    QCOMPARE(runCell(k, r, "b", "print(2 + 2)").stdoutText, QString("4\n"));
  }

  // ---- Issue 48, section 3: what a cell must not be able to do to its session or the window.

  // input() without an input box (gpulab-cli, the labs: setAllowStdin(false)) raises as ipykernel's
  // does without a frontend, and nothing a cell runs reads the kernel's commands: the cell queued
  // behind it runs. Before, the cells' stdin was the protocol's: input() took the next cell's command
  // as its answer, and that cell never finished.
  void nothingACellRunsReadsTheKernelsCommands_data() {
    QTest::addColumn<QString>("code");
    QTest::addColumn<QString>("errorType");  // empty: the cell ends well
    QTest::addColumn<QString>("printed");
    QTest::newRow("input()") << "name = input('name? ')" << "StdinNotImplementedError" << "";
    QTest::newRow("sys.stdin.readline()") << "import sys\nline = sys.stdin.readline()" << "StdinNotImplementedError" << "";
    QTest::newRow("os.read(0)") << "import os\nprint(os.read(0, 100))" << "" << "b''\n";
    QTest::newRow("a subprocess reading its stdin")
        << "import subprocess, sys\nprint(subprocess.run([sys.executable, '-c', 'import sys; print(len(sys.stdin.read()))'], "
           "capture_output=True, text=True, timeout=20).stdout.strip())"
        << "" << "0\n";
  }
  void nothingACellRunsReadsTheKernelsCommands() {
    QFETCH(QString, code);
    QFETCH(QString, errorType);
    QFETCH(QString, printed);
    KernelProcess k;
    Recorder r(k);
    k.start(false);
    QVERIFY(QTest::qWaitFor([&] { return r.ready; }, 30000));
    k.run("reads", code);
    k.run("next", "print('next ran')");  // on the command channel while the first cell runs
    QVERIFY2(QTest::qWaitFor([&] { return r.runs["next"].finished; }, 30000), "the cell queued after it never ran");
    const CellRun& reads = r.runs["reads"];
    QCOMPARE(reads.result.errorType, errorType);
    if (!errorType.isEmpty()) {
      QVERIFY2(reads.result.message.contains("input() is not available in a code cell"), qPrintable(reads.result.message));
    }
    QCOMPARE(reads.stdoutText, printed);
    QCOMPARE(r.runs["next"].stdoutText, QString("next ran\n"));
  }

  // With an input box (the window's: setAllowStdin(true)): input() asks, the answer comes back, the
  // prompt and the answer show in the output; the cell queued meanwhile waits its turn; Stop ends a
  // wait for input, and the session goes on.
  void inputIsAnsweredByTheWindow() {
    KernelProcess k;
    k.setAllowStdin(true);
    Recorder r(k);
    QStringList prompts;
    connect(&k, &KernelProcess::inputRequested, this, [&](const QString& cell, const QString& prompt) { prompts << cell + ":" + prompt; });
    k.start(false);
    QVERIFY(QTest::qWaitFor([&] { return r.ready; }, 30000));
    k.run("asks", "name = input('name? ')\nprint('hello', name)");
    k.run("after", "print('after', name)");
    QVERIFY(QTest::qWaitFor([&] { return !prompts.isEmpty(); }, 30000));
    QCOMPARE(prompts, QStringList{"asks:name? "});
    QTest::qWait(200);
    QVERIFY(!r.runs["asks"].finished && !r.runs["after"].finished);  // both wait for the answer
    k.sendInput("Ada");
    QVERIFY(QTest::qWaitFor([&] { return r.runs["after"].finished; }, 30000));
    QCOMPARE(r.runs["asks"].result.status, CellResult::Status::Ok);
    QCOMPARE(r.runs["asks"].stdoutText, QString("name? Ada\nhello Ada\n"));
    QCOMPARE(r.runs["after"].stdoutText, QString("after Ada\n"));
    // Stop while it waits: KeyboardInterrupt, and the next cell runs as usual.
    prompts.clear();
    k.run("waits", "input()");
    QVERIFY(QTest::qWaitFor([&] { return !prompts.isEmpty(); }, 30000));
    k.stop();
    QVERIFY(QTest::qWaitFor([&] { return r.runs["waits"].finished; }, 10000));
    QCOMPARE(r.runs["waits"].result.status, CellResult::Status::Interrupted);
    k.sendInput("too late");  // an answer the Stop overtook: dropped, not the next cell's
    QCOMPARE(runCell(k, r, "later", "print(name)").stdoutText, QString("Ada\n"));
  }

  // A cell that ignores SIGINT: Stop interrupts, and after the grace period kills the kernel's group
  // and says so; nothing of it waits on this thread; a new session then works. Before, Stop did
  // nothing at all.
  void stopEndsACellThatIgnoresTheInterrupt() {
    KernelProcess k;
    Recorder r(k);
    QSignalSpy died(&k, &KernelProcess::kernelDied);
    k.start(false);
    k.run("deaf", "import signal\nsignal.signal(signal.SIGINT, signal.SIG_IGN)\nprint('ignoring')\nwhile True:\n    pass");
    QVERIFY(QTest::qWaitFor([&] { return r.runs["deaf"].stdoutText == "ignoring\n"; }, 30000));
    const qint64 pid = k.processId();
    QElapsedTimer clock;
    clock.start();
    k.stop();
    QVERIFY2(clock.elapsed() < 500, qPrintable(QString("stop() took %1 ms").arg(clock.elapsed())));  // it returns; the kill is a timer's
    // The grace period (3 s) and the kill, with room for a loaded machine: this bounds a hang.
    QVERIFY2(QTest::qWaitFor([&] { return r.runs["deaf"].finished; }, 20000), "Stop did not end a cell that ignores SIGINT");
    qInfo("Stop ended the cell that ignores SIGINT after %lld ms (grace period %d ms)", clock.elapsed(), k.stopGraceMs());
    const CellResult& result = r.runs["deaf"].result;
    QCOMPARE(result.status, CellResult::Status::KernelDied);
    QCOMPARE(result.ending, CellResult::Ending::KilledByStop);
    QVERIFY2(result.message.contains("still running 3 s after the interrupt"), qPrintable(result.message));
    QCOMPARE(died.count(), 1);  // the learner is told: the session is gone
    QVERIFY2(died.first().first().toString().startsWith("Stop ended it"), qPrintable(died.first().first().toString()));
    QVERIFY(!k.isRunning());
    QVERIFY(QTest::qWaitFor([&] { return processGone(pid); }, 10000));
    k.restart();
    QCOMPARE(runCell(k, r, "after", "print('a new session')").stdoutText, QString("a new session\n"));
    QCOMPARE(died.count(), 1);
  }

  // Restart with a cell that ignores SIGINT running and another queued: returns at once, both cells
  // are told their session ended (not still running), the old process is gone soon after, and the
  // new session works. Before, restart() blocked for a second and the cells were left as running.
  void restartEndsTheCellsOfTheOldSessionAtOnce() {
    KernelProcess k;
    Recorder r(k);
    QSignalSpy died(&k, &KernelProcess::kernelDied);
    k.start(false);
    k.run("deaf", "import signal\nsignal.signal(signal.SIGINT, signal.SIG_IGN)\nprint('ignoring')\nwhile True:\n    pass");
    k.run("queued", "print('never')");
    QVERIFY(QTest::qWaitFor([&] { return r.runs["deaf"].stdoutText == "ignoring\n"; }, 30000));
    const qint64 old = k.processId();
    QElapsedTimer clock;
    clock.start();
    k.restart();
    QVERIFY2(clock.elapsed() < 800, qPrintable(QString("restart() took %1 ms").arg(clock.elapsed())));  // before: 1 s and more
    QVERIFY(r.runs["deaf"].finished && r.runs["queued"].finished);  // told within restart(), not later
    QCOMPARE(r.runs["deaf"].result.status, CellResult::Status::KernelDied);
    QCOMPARE(r.runs["deaf"].result.ending, CellResult::Ending::Ended);
    QVERIFY(r.runs["deaf"].result.started);
    QVERIFY(!r.runs["queued"].result.started);
    QVERIFY(k.busyCells().isEmpty());
    QVERIFY(QTest::qWaitFor([&] { return processGone(old); }, 10000));
    QCOMPARE(runCell(k, r, "fresh", "print('fresh')").stdoutText, QString("fresh\n"));
    QCOMPARE(died.count(), 0);  // a restart asked for is not a death
  }

  // Processes a cell starts end with its session, as in Jupyter (the kernel's process group): at a
  // restart, when the kernel object goes (the window closes), when Stop ends the session, and when
  // the kernel ends by itself. Before, 50 `sleep 1000` outlived Restart and the window.
  void processesACellStartedEndWithItsSession_data() {
    QTest::addColumn<QString>("how");
    QTest::newRow("restart") << "restart";
    QTest::newRow("the window closes") << "destroy";
    QTest::newRow("Stop ends the session") << "stop";
    QTest::newRow("the kernel ends by itself") << "exit";
  }
  void processesACellStartedEndWithItsSession() {
    QFETCH(QString, how);
    auto k = std::make_unique<KernelProcess>();
    Recorder r(*k);
    k->start(false);
    // Three children of the kernel, and a grandchild the shell leaves behind.
    const CellRun& a = runCell(*k, r, "spawn",
                               "import subprocess\n"
                               "children = [subprocess.Popen(['sleep', '1000']) for _ in range(3)]\n"
                               "shell = subprocess.run('sleep 1000 > /dev/null 2>&1 & echo $!', shell=True, capture_output=True, text=True)\n"
                               "print(' '.join(str(c.pid) for c in children), shell.stdout.strip())");
    QCOMPARE(a.result.status, CellResult::Status::Ok);
    const QList<qint64> pids = pidsIn(a.stdoutText);
    QCOMPARE(pids.size(), 4);
    for (qint64 pid : pids) QVERIFY2(!processGone(pid), qPrintable(QString::number(pid)));
    if (how == "restart") {
      k->restart();
    } else if (how == "destroy") {
      k.reset();
    } else if (how == "stop") {
      k->setStopGraceMs(200);
      k->run("deaf", "import signal\nsignal.signal(signal.SIGINT, signal.SIG_IGN)\nwhile True:\n    pass");
      QTest::qWait(500);  // it runs, ignoring SIGINT
      k->stop();
      QVERIFY(QTest::qWaitFor([&] { return r.runs["deaf"].finished; }, 20000));
      QCOMPARE(r.runs["deaf"].result.ending, CellResult::Ending::KilledByStop);
    } else {
      QCOMPARE(runCell(*k, r, "exit", "import os\nos._exit(0)").result.status, CellResult::Status::KernelDied);
    }
    for (qint64 pid : pids) {
      QVERIFY2(QTest::qWaitFor([&] { return processGone(pid); }, 10000), qPrintable(QString("process %1 outlived its session").arg(pid)));
    }
  }

  // A huge print and a million short ones (the window's limit on): the window gets the first
  // `limit` characters in few events, the whole goes to a file, the cell's result says how much it
  // printed, and the kernel answers the next cell at once. Before, all 100 MB came through (the
  // window: unresponsive for 25 s, 1 GB larger), and a million lines took 140 s as two million events.
  void hugeOutputIsCappedAndTheWholeIsInAFile_data() {
    QTest::addColumn<QString>("code");
    QTest::addColumn<qint64>("printed");  // characters in all
    QTest::newRow("one write of 100 MB") << "import sys\nsys.stdout.write('x' * 100_000_000)\nprint('end')" << qint64{100'000'004};
    qint64 lines = 0;
    for (int i = 0; i < 1'000'000; ++i) lines += QString::number(i).size() + 1;
    QTest::newRow("a million short lines") << "for i in range(10**6):\n    print(i)" << lines;
  }
  void hugeOutputIsCappedAndTheWholeIsInAFile() {
    QFETCH(QString, code);
    QFETCH(qint64, printed);
    QTemporaryDir dir;
    QVERIFY(dir.isValid());
    constexpr qint64 kLimit = 1'000'000;
    KernelProcess k;
    k.setOutputLimit(kLimit, dir.filePath("outputs"));
    Recorder r(k);
    QString cappedFile;
    connect(&k, &KernelProcess::outputCapped, this, [&](const QString&, qint64 limit, const QString& file, const QString& why) {
      QCOMPARE(limit, kLimit);
      QVERIFY2(why.isEmpty(), qPrintable(why));
      cappedFile = file;
    });
    k.start(false);
    QVERIFY(QTest::qWaitFor([&] { return r.ready; }, 30000));
    QElapsedTimer clock;
    clock.start();
    const CellRun& run = runCell(k, r, "big", code, 60000);
    QVERIFY(run.finished);
    qInfo("%s: %lld ms, %d output events", QTest::currentDataTag(), clock.elapsed(), run.outputEvents);
    QCOMPARE(run.result.status, CellResult::Status::Ok);
    QCOMPARE(qint64{run.stdoutText.size()}, kLimit);  // ASCII: characters are UTF-16 units here
    QVERIFY2(run.outputEvents < 1000, qPrintable(QString::number(run.outputEvents)));  // coalesced
    QCOMPARE(run.result.outputChars, printed);
    QVERIFY(!cappedFile.isEmpty());
    QCOMPARE(run.result.outputFile, cappedFile);
    QCOMPARE(QFileInfo(cappedFile).size(), printed);  // the whole, in the file
    QFile whole(cappedFile);
    QVERIFY(whole.open(QIODevice::ReadOnly));
    QCOMPARE(QString::fromUtf8(whole.read(kLimit)), run.stdoutText);  // what was shown is its start
    // Responsive: the next cell's answer comes at once (30 s bounds a hang, not a speed).
    QCOMPARE(runCell(k, r, "next", "print(2 + 2)", 30000).stdoutText, QString("4\n"));
    QCOMPARE(r.runs["next"].result.outputChars, qint64{-1});  // a new cell counts from zero
  }

  // A million print() calls without a limit (gpulab-cli's session): every character comes, in few
  // events, within a bound that is about a hang on a loaded 2-core machine (5-7 s on this 2-core
  // machine with builds beside it, in ~150 events; before, 44 s here in 2,000,000 events, 140 s in the
  // issue's report).
  void aMillionShortLinesComeThroughCoalesced() {
    KernelProcess k;
    Recorder r(k);
    k.start(false);
    QVERIFY(QTest::qWaitFor([&] { return r.ready; }, 30000));
    QElapsedTimer clock;
    clock.start();
    const CellRun& run = runCell(k, r, "lines", "for i in range(10**6):\n    print(i)", 60000);
    const qint64 ms = clock.elapsed();
    qInfo("a million print() calls: %lld ms, %d output events", ms, run.outputEvents);
    QVERIFY(run.finished);
    QVERIFY2(ms < 20000, qPrintable(QString("%1 ms").arg(ms)));
    QCOMPARE(run.result.status, CellResult::Status::Ok);
    QVERIFY(run.stdoutText.startsWith("0\n1\n2\n") && run.stdoutText.endsWith("\n999999\n"));
    QCOMPARE(run.stdoutText.count('\n'), 1'000'000);
    QVERIFY2(run.outputEvents < 2000, qPrintable(QString::number(run.outputEvents)));
  }

  // A cell that takes its streams away leaves the next cell printing; close() is a file's. Before,
  // `del sys.stdout` broke every later cell until a restart, and sys.stdout.close() raised
  // AttributeError.
  void aCellThatTakesItsStreamsAwayLeavesTheNextOnePrinting_data() {
    QTest::addColumn<QString>("code");
    QTest::newRow("del sys.stdout") << "import sys\ndel sys.stdout";
    QTest::newRow("sys.stdout = None") << "import sys\nsys.stdout = None";
    QTest::newRow("sys.stdout.close()") << "import sys\nsys.stdout.close()";
    QTest::newRow("del sys.stderr") << "import sys\ndel sys.stderr";
    QTest::newRow("sys.stderr.close()") << "import sys\nsys.stderr.close()";
    QTest::newRow("with sys.stdout") << "import sys\nwith sys.stdout:\n    print('inside')";
  }
  void aCellThatTakesItsStreamsAwayLeavesTheNextOnePrinting() {
    QFETCH(QString, code);
    KernelProcess k;
    Recorder r(k);
    k.start(false);
    const CellRun& away = runCell(k, r, "away", code);
    QVERIFY2(away.result.status == CellResult::Status::Ok, qPrintable(away.result.traceback));
    const CellRun& next = runCell(k, r, "next", "import sys\nprint('still here')\nprint('and here', file=sys.stderr)\n6 * 7");
    QVERIFY2(next.result.status == CellResult::Status::Ok, qPrintable(next.result.traceback));
    QCOMPARE(next.stdoutText, QString("still here\n42\n"));
    QCOMPARE(next.stderrText, QString("and here\n"));
    // A closed stream, in the cell that closed it, is a closed file's.
    const CellRun& closed = runCell(k, r, "closed", "import sys\nsys.stdout.close()\nprint('x')");
    QCOMPARE(closed.result.errorType, QString("ValueError"));
    QVERIFY2(closed.result.message.contains("closed file"), qPrintable(closed.result.message));
    QCOMPARE(runCell(k, r, "again", "print('again')").stdoutText, QString("again\n"));
  }

  // The cells run in the working folder they are given (created if need be): their files land there,
  // not where the program was started. Before, lesson 09's trace.json went to the window's folder.
  void theCellsRunInTheirWorkingFolder() {
    QTemporaryDir data;
    QVERIFY(data.isValid());
    const QString folder = QDir(data.path()).filePath("work/profiling");
    KernelProcess k;
    k.setWorkingDirectory(folder);
    Recorder r(k);
    k.start(false);
    // A name of this run's own: other tests in this folder write trace.json (lesson 09's cells run
    // headless in the program's folder), and ctest runs them beside this one.
    const QString name = QString("trace-%1.json").arg(QCoreApplication::applicationPid());
    const CellRun& run = runCell(k, r, "files", QString("import os\nprint(os.getcwd())\nwith open('%1', 'w') as f:\n    f.write('{}')").arg(name));
    QVERIFY2(run.result.status == CellResult::Status::Ok, qPrintable(run.result.traceback));
    QCOMPARE(run.stdoutText, QFileInfo(folder).canonicalFilePath() + "\n");
    QVERIFY(QFileInfo::exists(QDir(folder).filePath(name)));
    QVERIFY(!QFileInfo::exists(QDir::current().filePath(name)));
  }
};

QTEST_GUILESS_MAIN(TestNotebookKernel)
#include "test_notebook_kernel.moc"
