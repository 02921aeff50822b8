#pragma once
// A lesson's code cell: PyTorch code the learner edits in place and runs on GPU Lab's torch, with
// what it printed and raised underneath, as a notebook shows it. A NotebookSession connects the
// cells of a lesson to one notebook kernel (app/notebook/kernel_process.h), so they share one
// Python session, as a notebook's cells do.
#include <QMap>
#include <QObject>
#include <QPointer>
#include <QString>
#include <QSyntaxHighlighter>
#include <QWidget>

#include "app/notebook/kernel_process.h"

class QLabel;
class QPlainTextEdit;
class QPushButton;

namespace gpulab::app {

// Python's colours in a cell: keywords, builtins, strings, numbers and comments.
class PythonHighlighter : public QSyntaxHighlighter {
 public:
  explicit PythonHighlighter(QTextDocument* document);

 protected:
  void highlightBlock(const QString& text) override;
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

 protected:
  bool eventFilter(QObject* watched, QEvent* event) override;

 public slots:
  // The lesson's code back (undoable, as any edit).
  void reset();
  // The kernel's events for this cell.
  void markQueued();
  void markStarted();
  void appendOutput(const QString& name, const QString& text);
  void markFinished(const gpulab::notebook::CellResult& result);

 signals:
  void runRequested(const QString& id, const QString& code);
  void stopRequested(const QString& id);
  void codeEdited(const QString& id, const QString& code);  // after every edit (a reset too)

 private:
  void fitEditorToCode();

  QString id_, original_;
  QPlainTextEdit* editor_;
  QPlainTextEdit* output_;
  QLabel* status_;
  QPushButton* run_;
  QPushButton* stop_;
  QPushButton* reset_;
  bool running_ = false;
  int runs_ = 0;  // "In [n]": how many times this cell ran in the session
};

// One kernel for a lesson's cells: routes each cell's Run to the kernel and the kernel's events back
// to the cell they belong to.
class NotebookSession : public QObject {
  Q_OBJECT

 public:
  explicit NotebookSession(QObject* parent = nullptr);
  void addCell(CodeCell* cell);
  // Starts (or restarts) the kernel: this machine as it is, or with the emulated GPU as cuda:0.
  void start(bool emulatedGpu);
  void restart();
  notebook::KernelProcess& kernel() { return kernel_; }

 signals:
  // The session is up, on this device ("cpu", or cuda:0's name).
  void ready(const QString& deviceName);
  void died(const QString& reason);

 private:
  CodeCell* cell(const QString& id) const;

  notebook::KernelProcess kernel_;
  QMap<QString, QPointer<CodeCell>> cells_;
};

}  // namespace gpulab::app
