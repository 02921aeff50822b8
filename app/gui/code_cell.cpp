#include "app/gui/code_cell.h"

#include <algorithm>

#include <QFontDatabase>
#include <QHBoxLayout>
#include <QLabel>
#include <QPlainTextEdit>
#include <QPushButton>
#include <QRegularExpression>
#include <QScrollBar>
#include <QKeyEvent>
#include <QTextBlock>
#include <QVBoxLayout>

namespace gpulab::app {

namespace {

QTextCharFormat colored(const QColor& color, bool bold = false, bool italic = false) {
  QTextCharFormat f;
  f.setForeground(color);
  if (bold) f.setFontWeight(QFont::Bold);
  f.setFontItalic(italic);
  return f;
}

struct Rule {
  QRegularExpression pattern;
  QTextCharFormat format;
};

const QVector<Rule>& rules() {
  static const QVector<Rule> all = [] {
    QVector<Rule> r;
    r.push_back({QRegularExpression(R"(\b(and|as|assert|break|class|continue|def|del|elif|else|except|finally|for|from|global|if|)"
                                    R"(import|in|is|lambda|nonlocal|not|or|pass|raise|return|try|while|with|yield|None|True|False)\b)"),
                 colored(QColor(0x7a, 0x3e, 0x9d), true)});
    r.push_back({QRegularExpression(R"(\b(print|range|len|enumerate|zip|list|dict|tuple|float|int|str|isinstance|super|sum|min|max)\b)"),
                 colored(QColor(0x00, 0x6e, 0x8a))});
    r.push_back({QRegularExpression(R"(\b[0-9]+(\.[0-9]*)?([eE][-+]?[0-9]+)?\b)"), colored(QColor(0x0b, 0x6e, 0x1d))});
    r.push_back({QRegularExpression(R"('[^'\\]*(\\.[^'\\]*)*'|"[^"\\]*(\\.[^"\\]*)*")"), colored(QColor(0xa3, 0x15, 0x15))});
    r.push_back({QRegularExpression(R"(#[^\n]*)"), colored(QColor(0x6a, 0x73, 0x7d), false, true)});
    return r;
  }();
  return all;
}

}  // namespace

PythonHighlighter::PythonHighlighter(QTextDocument* document) : QSyntaxHighlighter(document) {}

void PythonHighlighter::highlightBlock(const QString& text) {
  // Later rules win: a keyword inside a string or a comment is coloured as the string or comment.
  for (const Rule& rule : rules()) {
    for (auto it = rule.pattern.globalMatch(text); it.hasNext();) {
      const QRegularExpressionMatch m = it.next();
      setFormat(static_cast<int>(m.capturedStart()), static_cast<int>(m.capturedLength()), rule.format);
    }
  }
}

CodeCell::CodeCell(const QString& id, const QString& original, QWidget* parent)
    : QWidget(parent), id_(id), original_(original) {
  setObjectName("codeCell_" + id);
  const QFont mono = QFontDatabase::systemFont(QFontDatabase::FixedFont);
  editor_ = new QPlainTextEdit;
  editor_->setObjectName("cellEditor");
  editor_->setFont(mono);
  editor_->setLineWrapMode(QPlainTextEdit::NoWrap);
  editor_->setTabChangesFocus(false);
  editor_->setPlainText(original);
  editor_->document()->clearUndoRedoStacks();  // Undo starts from the lesson's code
  new PythonHighlighter(editor_->document());
  output_ = new QPlainTextEdit;
  output_->setObjectName("cellOutput");
  output_->setReadOnly(true);
  output_->setFont(mono);
  output_->setLineWrapMode(QPlainTextEdit::WidgetWidth);  // an error's long line reads without scrolling sideways, as in a notebook
  output_->setMaximumHeight(220);
  output_->hide();

  run_ = new QPushButton("▶ Run");
  run_->setObjectName("cellRun");
  run_->setToolTip("Run this cell (Ctrl+Enter); the lesson's cells share one Python session");
  stop_ = new QPushButton("■ Stop");
  stop_->setObjectName("cellStop");
  stop_->setToolTip("Interrupt the cell (KeyboardInterrupt); what it defined so far stays");
  stop_->setEnabled(false);
  reset_ = new QPushButton("↺ Reset");
  reset_->setObjectName("cellReset");
  reset_->setToolTip("Bring back the lesson's code (Ctrl+Z undoes it)");
  reset_->setEnabled(false);
  status_ = new QLabel("In [ ]");
  status_->setToolTip("In [n]: the cell ran n-th in this Python session (a restart counts from 1 again)");
  // Its place in the lesson, as tracebacks name it ("<cell 4>").
  auto* name = new QLabel("cell " + id);
  name->setObjectName("cellName");
  name->setEnabled(false);
  status_->setObjectName("cellStatus");
  status_->setFont(mono);

  auto* bar = new QHBoxLayout;
  bar->setContentsMargins(0, 0, 0, 0);
  bar->addWidget(name);
  bar->addWidget(status_);
  bar->addStretch();
  bar->addWidget(run_);
  bar->addWidget(stop_);
  bar->addWidget(reset_);
  auto* layout = new QVBoxLayout(this);
  layout->setContentsMargins(0, 4, 0, 4);
  layout->setSpacing(2);
  layout->addLayout(bar);
  layout->addWidget(editor_);
  layout->addWidget(output_);

  connect(run_, &QPushButton::clicked, this, &CodeCell::run);
  connect(stop_, &QPushButton::clicked, this, [this] { emit stopRequested(id_); });
  connect(reset_, &QPushButton::clicked, this, &CodeCell::reset);
  editor_->installEventFilter(this);  // Ctrl+Enter runs the cell
  connect(editor_, &QPlainTextEdit::textChanged, this, [this] {
    reset_->setEnabled(edited());
    fitEditorToCode();
    emit codeEdited(id_, code());
  });
  fitEditorToCode();
}

bool CodeCell::eventFilter(QObject* watched, QEvent* event) {
  // Before the editor sees it, which would insert a line break.
  if (watched == editor_ && event->type() == QEvent::KeyPress) {
    const auto* key = static_cast<QKeyEvent*>(event);
    if ((key->key() == Qt::Key_Return || key->key() == Qt::Key_Enter) && (key->modifiers() & Qt::ControlModifier)) {
      if (run_->isEnabled()) run_->click();
      return true;
    }
  }
  return QWidget::eventFilter(watched, event);
}

QString CodeCell::code() const { return editor_->toPlainText(); }

void CodeCell::run() {
  if (run_->isEnabled()) emit runRequested(id_, code());
}

void CodeCell::setCode(const QString& code) {
  if (code != this->code()) editor_->setPlainText(code);
}

QString CodeCell::outputText() const { return output_->toPlainText(); }

void CodeCell::reset() {
  // Through a cursor, not setPlainText, so that Ctrl+Z brings the learner's edit back.
  QTextCursor cursor(editor_->document());
  cursor.select(QTextCursor::Document);
  cursor.insertText(original_);
}

void CodeCell::fitEditorToCode() {
  // The whole cell shows without a scroll bar of its own, up to 30 lines.
  const int lines = std::clamp(editor_->document()->blockCount(), 2, 30);
  const QFontMetrics metrics(editor_->font());
  // Room for the horizontal scroll bar too: a long line scrolls sideways, and the bar must not hide
  // the last line.
  editor_->setFixedHeight(lines * metrics.lineSpacing() + 2 * static_cast<int>(editor_->document()->documentMargin()) + 6 +
                          editor_->horizontalScrollBar()->sizeHint().height());
}

void CodeCell::markQueued() {
  // Waiting for the cells before it: Stop would interrupt one of those, so it waits too.
  status_->setText("In [*]");
  output_->clear();
  output_->hide();
  running_ = true;
  run_->setEnabled(false);
  stop_->setEnabled(false);
}

void CodeCell::markStarted(int executionCount) {
  executionCount_ = executionCount;
  status_->setText("In [*]");
  running_ = true;
  run_->setEnabled(false);
  stop_->setEnabled(true);
}

void CodeCell::appendOutput(const QString& name, const QString& text) {
  QTextCursor cursor(output_->document());
  cursor.movePosition(QTextCursor::End);
  QTextCharFormat format;
  if (name == "stderr") format.setForeground(QColor(0xb3, 0x3a, 0x00));
  cursor.insertText(text, format);
  output_->show();
}

void CodeCell::markFinished(const notebook::CellResult& result) {
  using Status = notebook::CellResult::Status;
  running_ = false;
  run_->setEnabled(true);
  stop_->setEnabled(false);
  status_->setText(QString("In [%1]").arg(executionCount_));
  if (result.status == Status::Ok) return;
  QTextCursor cursor(output_->document());
  cursor.movePosition(QTextCursor::End);
  QTextCharFormat red;
  red.setForeground(QColor(0xd6, 0x27, 0x28));
  if (result.status == Status::KernelDied) {
    cursor.insertText("The Python session ended while this cell ran (" + result.message + "); Restart starts a new one.\n", red);
  } else {
    // The lessons' own errors stand out as the labs' do: named before the traceback.
    if (result.kind == "device") cursor.insertText("✗ Tensors on two devices: the same-device rule.\n", red);
    if (result.kind == "oom") cursor.insertText("✗ Out of GPU memory.\n", red);
    cursor.insertText(result.traceback.isEmpty() ? result.errorType + ": " + result.message + "\n" : result.traceback, red);
  }
  output_->show();
}

NotebookSession::NotebookSession(QObject* parent) : QObject(parent) {
  connect(&kernel_, &notebook::KernelProcess::started, this, [this](const QString& id) {
    if (CodeCell* c = cell(id)) c->markStarted(++executionCount_);
  });
  connect(&kernel_, &notebook::KernelProcess::output, this, [this](const QString& id, const QString& name, const QString& text) {
    if (CodeCell* c = cell(id)) c->appendOutput(name, text);
  });
  connect(&kernel_, &notebook::KernelProcess::finished, this, [this](const QString& id, const notebook::CellResult& r) {
    if (CodeCell* c = cell(id)) c->markFinished(r);
  });
  connect(&kernel_, &notebook::KernelProcess::ready, this,
          [this](const QString&, bool, const QString& device, bool emulated) { emit ready(device, emulated); });
  connect(&kernel_, &notebook::KernelProcess::kernelDied, this, &NotebookSession::died);
}

void NotebookSession::addCell(CodeCell* c, bool setup, const std::optional<QMap<QString, QString>>& measure) {
  cells_.insert(c->id(), c);
  if (setup) setupCells_.append(c);
  if (measure) exerciseValues_.insert(c->id(), *measure);
  connect(c, &CodeCell::runRequested, this, [this, c] { run(c); });
  connect(c, &CodeCell::stopRequested, this, [this] { kernel_.stop(); });
}

void NotebookSession::run(CodeCell* c) {
  if (!kernel_.isRunning()) start();
  if (!setupSent_) {
    setupSent_ = true;
    for (const QPointer<CodeCell>& setup : setupCells_) {
      if (!setup || setup == c) continue;
      setup->markQueued();
      kernel_.run(setup->id(), setup->code());
    }
  }
  c->markQueued();
  const auto measure = exerciseValues_.constFind(c->id());
  kernel_.run(c->id(), c->code(), measure == exerciseValues_.constEnd() ? std::nullopt : std::optional(*measure));
}

void NotebookSession::clear() {
  kernel_.shutdown();
  for (const QPointer<CodeCell>& c : std::as_const(cells_))
    if (c) disconnect(c, nullptr, this, nullptr);
  cells_.clear();
  setupCells_.clear();
  exerciseValues_.clear();
  setupSent_ = false;
}

void NotebookSession::setEmulatedGpu(bool emulatedGpu) {
  if (emulatedGpu == emulatedGpu_) return;
  emulatedGpu_ = emulatedGpu;
  if (kernel_.isRunning()) start();
}

void NotebookSession::start() {
  setupSent_ = false;  // a new namespace: the setup runs again before the next cell
  executionCount_ = 0;
  kernel_.start(emulatedGpu_);
}

void NotebookSession::start(bool emulatedGpu) {
  emulatedGpu_ = emulatedGpu;
  start();
}

void NotebookSession::restart() { start(); }

CodeCell* NotebookSession::cell(const QString& id) const { return cells_.value(id).data(); }

}  // namespace gpulab::app
