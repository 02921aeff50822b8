#pragma once
// A lesson's code cell: PyTorch code the learner edits in place and runs on GPU Lab's torch, with
// what it printed and raised underneath, as a notebook shows it. A NotebookSession connects the
// cells of a lesson to one notebook kernel (app/notebook/kernel_process.h), so they share one
// Python session, as a notebook's cells do.
#include <QMap>
#include <QObject>
#include <QPointer>
#include <QString>
#include <QRegularExpression>
#include <QSyntaxHighlighter>
#include <QTextCharFormat>
#include <QVector>
#include <QWidget>
#include <optional>

#include "app/notebook/kernel_process.h"

class QLabel;
class QLineEdit;
class QPlainTextEdit;
class QPushButton;
class QWheelEvent;

namespace gpulab::app {

// What the window shows of one cell's output: its first million characters. The kernel sends no more
// (the whole goes to a file, which the cell links to): one print of 100 MB made the window unresponsive
// for 25 s and 1 GB larger (issue 48, 3.5).
inline constexpr qint64 kCellOutputLimit = 1'000'000;

// Python's colours in a cell: keywords, builtins, strings, numbers and comments, chosen for the
// palette of `view` (the editor that shows the document) and chosen again when its palette changes
// (the desktop turned dark).
class PythonHighlighter : public QSyntaxHighlighter {
 public:
  PythonHighlighter(QWidget* view, QTextDocument* document);
  struct Rule {
    QRegularExpression pattern;
    QTextCharFormat format;
  };

 protected:
  void highlightBlock(const QString& text) override;
  bool eventFilter(QObject* watched, QEvent* event) override;

 private:
  void colourFor(const QPalette& palette);
  QVector<Rule> rules_;
};

class CodeCell : public QWidget {
  Q_OBJECT

 public:
  // `original` is the lesson's code; `code` what the learner left there (the same at first).
  CodeCell(const QString& id, const QString& original, QWidget* parent = nullptr);

  QString id() const { return id_; }
  QString code() const;
  void setCode(const QString& code);
  bool edited() const { return code() != original_; }
  QPlainTextEdit* editor() const { return editor_; }
  // What the cell printed and raised, as shown.
  QString outputText() const;
  bool running() const { return running_; }
  // The box under the output where the learner answers the cell's input() (shown while it waits).
  QLineEdit* inputField() const { return input_; }
  // Under the output: that it was cut, how much the cell printed and the file with the whole.
  QLabel* outputNotice() const { return outputNotice_; }
  // What the cell printed and raised: monospace, lines unwrapped (a table such as memory_summary()'s
  // or the profiler's keeps its columns; a long line scrolls sideways), as tall as what it shows up to
  // kOutputMaxLines lines, then it scrolls.
  QPlainTextEdit* output() const { return output_; }
  static constexpr int kOutputMaxLines = 24;
  static constexpr int kIndent = 4;  // spaces a Tab inserts in the editor, as PEP 8 indents

 protected:
  bool eventFilter(QObject* watched, QEvent* event) override;

 public slots:
  // The lesson's code back (undoable, as any edit), and the cell as fresh: no output, no error, "In [ ]"
  // (unless it is running: then the output is the run's).
  void reset();
  // What Run (and Ctrl+Enter) does: asks its session to run the code, unless it is running already.
  void run();
  // The kernel's events for this cell.
  void markQueued();
  // It runs as the session's `executionCount`-th cell ("In [n]", as a notebook counts).
  void markStarted(int executionCount);
  void appendOutput(const QString& name, const QString& text);
  // The kernel sends no more of this run's output (KernelProcess::outputCapped): said under it.
  void showOutputCapped(qint64 limit, const QString& file, const QString& why);
  // The cell's input(prompt) waits: the box under the output takes the answer (Enter sends it).
  void requestInput(const QString& prompt);
  void markFinished(const gpulab::notebook::CellResult& result);

 signals:
  void runRequested(const QString& id, const QString& code);
  void stopRequested(const QString& id);
  void inputSubmitted(const QString& id, const QString& text);
  void codeEdited(const QString& id, const QString& code);  // after every edit (a reset too)

 private:
  void fitEditorToCode();
  void fitOutputToText();
  void clearOutput();
  void updateResetButton();
  // A wheel turned over the editor or the output: vertical scrolls the box while it has lines to scroll
  // that way, else the page; horizontal (or Shift+wheel) scrolls the box sideways.
  bool wheel(QPlainTextEdit* box, QWheelEvent* event);
  void showNotice(qint64 limit, qint64 printed, const QString& file, const QString& why);

  QString id_, original_;
  QPlainTextEdit* editor_;
  QPlainTextEdit* output_;
  QWidget* inputRow_;
  QLabel* inputPrompt_;
  QLineEdit* input_;
  QLabel* outputNotice_;
  QLabel* status_;
  QPushButton* run_;
  QPushButton* stop_;
  QPushButton* reset_;
  bool running_ = false;
  bool started_ = false;    // this run has started (not only queued)
  qint64 shown_ = 0;        // UTF-16 units of this run's output in the box
  qsizetype lineLength_ = 0;  // of the box's last line, as far as the output goes
  qint64 capLimit_ = -1;    // the kernel's limit, once this run's output passed it
  QString capFile_, capWhy_;
  int executionCount_ = 0;  // "In [n]": its last run was the session's n-th
  bool fresh_ = true;       // no run shown: nothing printed, no count (Reset makes a cell fresh again)
  // The editor keeps room for its horizontal scroll bar from the moment the bar appears until the code
  // changes (fitEditorToCode says why).
  bool roomForBar_ = false;
};

// One kernel for a lesson's cells: routes each cell's Run to the kernel and the kernel's events back
// to the cell they belong to. The kernel starts at the first Run, not before: showing a lesson runs
// nothing. A setup cell (```python setup) runs by itself before the first other cell the learner
// runs in a session, as the code the cells take as given.
class NotebookSession : public QObject {
  Q_OBJECT

 public:
  explicit NotebookSession(QObject* parent = nullptr);
  // `measure`: the cell is an exercise's, whose runs measure what it is graded on, these values among
  // it (KernelProcess::run).
  void addCell(CodeCell* cell, bool setup = false, const std::optional<QMap<QString, QString>>& measure = std::nullopt);
  // Forgets the cells and ends the session (another lesson).
  void clear();
  // Where the next session computes: this machine as it is, or with the emulated GPU as cuda:0. A
  // running session restarts on the new choice.
  void setEmulatedGpu(bool emulatedGpu);
  bool emulatedGpu() const { return emulatedGpu_; }
  // Starts (or restarts) the kernel on the current choice.
  void start();
  void start(bool emulatedGpu);
  void restart();
  bool busy() const { return !kernel_.busyCells().isEmpty(); }
  notebook::KernelProcess& kernel() { return kernel_; }
  // The folder the cells run in from the next session on (created when it starts; their files land
  // there, a capped output's whole in its .gpulab-output); empty: this program's working folder.
  void setWorkingDirectory(const QString& folder);
  const QString& workingDirectory() const { return kernel_.workingDirectory(); }

 signals:
  // The session is up, on this device ("cpu", or cuda:0's name, which may be the emulated GPU).
  void ready(const QString& deviceName, bool emulated);
  void died(const QString& reason);

 private:
  CodeCell* cell(const QString& id) const;
  void run(CodeCell* cell);

  notebook::KernelProcess kernel_;
  QMap<QString, QPointer<CodeCell>> cells_;
  QList<QPointer<CodeCell>> setupCells_;  // in the lesson's order
  QMap<QString, QMap<QString, QString>> exerciseValues_;  // the exercises' cells, by id: their values
  bool emulatedGpu_ = false;
  bool setupSent_ = false;  // this session has run (or queued) the setup cells
  int executionCount_ = 0;  // cells started in this session
};

}  // namespace gpulab::app
