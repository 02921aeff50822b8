#include "app/gui/code_cell.h"

#include <algorithm>
#include <cstdlib>

#include <QApplication>
#include <QDir>
#include <QFontDatabase>
#include <QHBoxLayout>
#include <QLabel>
#include <QLineEdit>
#include <QLocale>
#include <QPlainTextEdit>
#include <QPushButton>
#include <QRegularExpression>
#include <QScrollBar>
#include <QKeyEvent>
#include <QScrollArea>
#include <QTextBlock>
#include <QWheelEvent>
#include <QUrl>
#include <QVBoxLayout>

#include "app/gui/theme.h"

namespace gpulab::app {

namespace {

QTextCharFormat colored(const QColor& color, bool bold = false, bool italic = false) {
  QTextCharFormat f;
  f.setForeground(color);
  if (bold) f.setFontWeight(QFont::Bold);
  f.setFontItalic(italic);
  return f;
}

}  // namespace

PythonHighlighter::PythonHighlighter(QWidget* view, QTextDocument* document) : QSyntaxHighlighter(document) {
  setParent(view);
  colourFor(view->palette());
  view->installEventFilter(this);
}

void PythonHighlighter::colourFor(const QPalette& palette) {
  const theme::CodeColours c = theme::codeColours(palette);
  rules_.clear();
  rules_.push_back({QRegularExpression(R"(\b(and|as|assert|break|class|continue|def|del|elif|else|except|finally|for|from|global|if|)"
                                       R"(import|in|is|lambda|nonlocal|not|or|pass|raise|return|try|while|with|yield|None|True|False)\b)"),
                    colored(c.keyword, true)});
  rules_.push_back({QRegularExpression(R"(\b(print|range|len|enumerate|zip|list|dict|tuple|float|int|str|isinstance|super|sum|min|max)\b)"),
                    colored(c.builtin)});
  rules_.push_back({QRegularExpression(R"(\b[0-9]+(\.[0-9]*)?([eE][-+]?[0-9]+)?\b)"), colored(c.number)});
  rules_.push_back({QRegularExpression(R"('[^'\\]*(\\.[^'\\]*)*'|"[^"\\]*(\\.[^"\\]*)*")"), colored(c.string)});
  rules_.push_back({QRegularExpression(R"(#[^\n]*)"), colored(c.comment, false, true)});
}

bool PythonHighlighter::eventFilter(QObject* watched, QEvent* event) {
  if (event->type() == QEvent::PaletteChange) {
    colourFor(static_cast<QWidget*>(watched)->palette());
    if (document()) rehighlight();
  }
  return QSyntaxHighlighter::eventFilter(watched, event);
}

void PythonHighlighter::highlightBlock(const QString& text) {
  // Later rules win: a keyword inside a string or a comment is coloured as the string or comment.
  for (const Rule& rule : rules_) {
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
  new PythonHighlighter(editor_, editor_->document());
  output_ = new QPlainTextEdit;
  output_->setObjectName("cellOutput");
  output_->setReadOnly(true);
  output_->setFont(mono);
  // Unwrapped, as a terminal shows it: memory_summary()'s and the profiler's tables keep their columns
  // (wrapped at the box's width they read as noise; issue 48, 4.8), a long line scrolls sideways.
  output_->setLineWrapMode(QPlainTextEdit::NoWrap);
  output_->setHorizontalScrollBarPolicy(Qt::ScrollBarAsNeeded);
  output_->setSizePolicy(QSizePolicy::Expanding, QSizePolicy::Fixed);  // fitOutputToText sets its height
  output_->hide();
  // input(): the prompt and a box for the answer, under the output, as a notebook shows them.
  inputRow_ = new QWidget;
  inputRow_->setObjectName("cellInputRow");
  inputPrompt_ = new QLabel;
  inputPrompt_->setFont(mono);
  input_ = new QLineEdit;
  input_->setObjectName("cellInput");
  input_->setFont(mono);
  input_->setPlaceholderText("the cell's input() waits for this: type, then Enter");
  auto* inputLayout = new QHBoxLayout(inputRow_);
  inputLayout->setContentsMargins(0, 0, 0, 0);
  inputLayout->addWidget(inputPrompt_);
  inputLayout->addWidget(input_, 1);
  inputRow_->hide();
  outputNotice_ = new QLabel;
  outputNotice_->setObjectName("cellOutputNotice");
  outputNotice_->setWordWrap(true);
  outputNotice_->setTextFormat(Qt::RichText);
  outputNotice_->setOpenExternalLinks(true);  // the file opens in the desktop's viewer; nothing here waits for it
  outputNotice_->setTextInteractionFlags(Qt::TextBrowserInteraction);
  outputNotice_->hide();

  run_ = new QPushButton("▶ Run");
  run_->setObjectName("cellRun");
  run_->setToolTip("Run this cell (Ctrl+Enter); the lesson's cells share one Python session");
  stop_ = new QPushButton("■ Stop");
  stop_->setObjectName("cellStop");
  stop_->setToolTip("Interrupt the cell (KeyboardInterrupt); what it defined so far stays");
  stop_->setEnabled(false);
  reset_ = new QPushButton("↺ Reset");
  reset_->setObjectName("cellReset");
  reset_->setToolTip("Bring back the lesson's code and clear the output, as a fresh cell (Ctrl+Z brings your code back)");
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
  layout->addWidget(inputRow_);
  layout->addWidget(outputNotice_);

  // For a screen reader each control names its cell (every cell has a "Run"), and the keyboard goes
  // through a cell in reading order: its code, Run, Stop, Reset, then what it printed.
  const QString cell = "cell " + id;
  setAccessibleName("Code " + cell);
  editor_->setAccessibleName("Code of " + cell);
  editor_->setAccessibleDescription("Python. Ctrl+Enter runs it; Tab indents; Ctrl+Tab moves on to the cell's Run button, Ctrl+Shift+Tab back");
  output_->setAccessibleName("Output of " + cell);
  input_->setAccessibleName("Input for " + cell);
  outputNotice_->setAccessibleName("About the output of " + cell);
  run_->setAccessibleName("Run " + cell);
  stop_->setAccessibleName("Stop " + cell);
  reset_->setAccessibleName("Reset " + cell);
  status_->setAccessibleName("Run count of " + cell);
  setTabOrder(editor_, run_);
  setTabOrder(run_, stop_);
  setTabOrder(stop_, reset_);
  setTabOrder(reset_, output_);
  setTabOrder(output_, input_);

  connect(run_, &QPushButton::clicked, this, &CodeCell::run);
  connect(stop_, &QPushButton::clicked, this, [this] {
    // Once: the session interrupts the cell and, if that goes unheeded, ends it (KernelProcess::stop).
    stop_->setEnabled(false);
    stop_->setText("■ Stopping…");
    emit stopRequested(id_);
  });
  connect(input_, &QLineEdit::returnPressed, this, [this] {
    const QString text = input_->text();
    input_->clear();
    inputRow_->hide();
    emit inputSubmitted(id_, text);
  });
  connect(reset_, &QPushButton::clicked, this, &CodeCell::reset);
  editor_->installEventFilter(this);  // Ctrl+Enter runs the cell
  // The wheel over either box -- and over its horizontal scroll bar, which a page scrolled under a
  // resting pointer brings beneath it (Qt turns a vertical wheel over that bar sideways): see wheel().
  for (QPlainTextEdit* box : {editor_, output_}) {
    box->viewport()->installEventFilter(this);
    box->horizontalScrollBar()->installEventFilter(this);
  }
  connect(editor_, &QPlainTextEdit::textChanged, this, [this] {
    updateResetButton();
    roomForBar_ = false;  // new code: whether it needs the bar is asked afresh
    fitEditorToCode();
    emit codeEdited(id_, code());
  });
  // A line wider than the box brings the horizontal scroll bar: the box grows by its height, so the
  // bar never covers the last line.
  connect(editor_->horizontalScrollBar(), &QScrollBar::rangeChanged, this, &CodeCell::fitEditorToCode);
  connect(output_->horizontalScrollBar(), &QScrollBar::rangeChanged, this, &CodeCell::fitOutputToText);
  fitEditorToCode();
}

bool CodeCell::eventFilter(QObject* watched, QEvent* event) {
  if (event->type() == QEvent::Wheel) {
    for (QPlainTextEdit* box : {editor_, output_})
      if (watched == box->viewport() || watched == box->horizontalScrollBar()) return wheel(box, static_cast<QWheelEvent*>(event));
  }
  // Before the editor sees it, which would insert a line break.
  if (watched == editor_ && event->type() == QEvent::KeyPress) {
    const auto* key = static_cast<QKeyEvent*>(event);
    if ((key->key() == Qt::Key_Return || key->key() == Qt::Key_Enter) && (key->modifiers() & Qt::ControlModifier)) {
      if (run_->isEnabled()) run_->click();
      return true;
    }
    // Tab belongs to the code (an indent of spaces: a tab among a lesson's spaces is Python's TabError);
    // Ctrl+Tab and Ctrl+Shift+Tab leave the editor, so that the keyboard is never caught in it.
    if ((key->key() == Qt::Key_Tab || key->key() == Qt::Key_Backtab) && (key->modifiers() & Qt::ControlModifier)) {
      focusNextPrevChild(key->key() == Qt::Key_Tab && !(key->modifiers() & Qt::ShiftModifier));
      return true;
    }
    if (key->key() == Qt::Key_Tab && key->modifiers() == Qt::NoModifier) {
      QTextCursor cursor = editor_->textCursor();
      if (!cursor.hasSelection()) {
        cursor.insertText(QString(kIndent - cursor.positionInBlock() % kIndent, ' '));
        return true;
      }
      // A selection: each of its lines one indent to the right, as one step of Undo.
      QTextDocument* doc = editor_->document();
      const QTextBlock first = doc->findBlock(cursor.selectionStart());
      const QTextBlock last = doc->findBlock(cursor.selectionEnd() - 1);
      QTextCursor edit(doc);
      edit.beginEditBlock();
      for (QTextBlock b = first; b.isValid(); b = b.next()) {
        edit.setPosition(b.position());
        edit.insertText(QString(kIndent, ' '));
        if (b == last) break;
      }
      edit.endEditBlock();
      return true;
    }
  }
  return QWidget::eventFilter(watched, event);
}

QString CodeCell::code() const { return editor_->toPlainText(); }

bool CodeCell::wheel(QPlainTextEdit* box, QWheelEvent* event) {
  // Qt gives a vertical wheel that a box cannot scroll to its horizontal scroll bar: over a cell with
  // a long line, turning the wheel to read on down the lesson scrolled the cell sideways instead
  // (issue 48, 4.8). Here a vertical wheel scrolls the box while it can move that way, then the page;
  // only a horizontal wheel (or Shift with the wheel) scrolls the box sideways.
  const QPoint angle = event->angleDelta();
  const QPoint pixels = event->pixelDelta();
  const bool shift = event->modifiers() & Qt::ShiftModifier;
  const bool sideways = shift || std::abs(angle.x()) > std::abs(angle.y());
  if (sideways) {
    QScrollBar* bar = box->horizontalScrollBar();
    const int along = std::abs(angle.x()) > std::abs(angle.y()) ? angle.x() : angle.y();
    const int alongPixels = std::abs(pixels.x()) > std::abs(pixels.y()) ? pixels.x() : pixels.y();
    // A wheel's notch (120) moves three lines' worth, as Qt scrolls; a touchpad's pixels as they are.
    const int step = alongPixels != 0 ? alongPixels : along * QApplication::wheelScrollLines() * bar->singleStep() / 120;
    bar->setValue(bar->value() - step);
    return true;  // never the page: it does not scroll sideways
  }
  QScrollBar* own = box->verticalScrollBar();
  if (angle.y() != 0 && own->maximum() > own->minimum() && (angle.y() > 0 ? own->value() > own->minimum() : own->value() < own->maximum()))
    return false;  // the box scrolls its own lines (Qt sends the wheel to its vertical bar)
  // The page: the lesson's scroll area around the cell, if there is one.
  for (QWidget* w = parentWidget(); w; w = w->parentWidget()) {
    if (auto* area = qobject_cast<QAbstractScrollArea*>(w)) {
      QWheelEvent forwarded(area->verticalScrollBar()->mapFromGlobal(event->globalPosition()), event->globalPosition(), QPoint(0, pixels.y()),
                            QPoint(0, angle.y()), event->buttons(), event->modifiers(), event->phase(), event->inverted());
      QCoreApplication::sendEvent(area->verticalScrollBar(), &forwarded);
      break;
    }
  }
  return true;
}

void CodeCell::run() {
  if (run_->isEnabled()) emit runRequested(id_, code());
}

void CodeCell::setCode(const QString& code) {
  if (code != this->code()) editor_->setPlainText(code);
}

QString CodeCell::outputText() const { return output_->toPlainText(); }

void CodeCell::reset() {
  // Through a cursor, not setPlainText, so that Ctrl+Z brings the learner's edit back.
  if (edited()) {
    QTextCursor cursor(editor_->document());
    cursor.select(QTextCursor::Document);
    cursor.insertText(original_);
  }
  // A fresh cell: the last run's output, traceback and count went with its code (issue 48, 4.8: the
  // traceback of the learner's code stayed under the lesson's). A running cell's output is its run's.
  if (!running_) {
    clearOutput();
    status_->setText("In [ ]");
    executionCount_ = 0;
    fresh_ = true;
  }
  updateResetButton();
}

void CodeCell::updateResetButton() { reset_->setEnabled(edited() || (!fresh_ && !running_)); }

void CodeCell::clearOutput() {
  output_->clear();
  output_->hide();
  inputRow_->hide();
  outputNotice_->hide();
  shown_ = 0;
  lineLength_ = 0;
  capLimit_ = -1;
  capFile_.clear();
  capWhy_.clear();
  fitOutputToText();
}

void CodeCell::fitOutputToText() {
  // As tall as its lines, up to kOutputMaxLines; then it scrolls. The horizontal bar, when a line is
  // wider than the box, below the last line.
  // Every block, the empty one after a final newline too: QPlainTextEdit scrolls by blocks, and one
  // left out would leave the box a line to scroll -- a wheel over it would move the output, not the page.
  const int lines = std::clamp(output_->document()->blockCount(), 1, kOutputMaxLines);
  const QFontMetrics metrics(output_->font());
  QScrollBar* bar = output_->horizontalScrollBar();
  const int barHeight = bar->maximum() > bar->minimum() ? bar->sizeHint().height() : 0;
  const int height = lines * metrics.lineSpacing() + 2 * static_cast<int>(output_->document()->documentMargin()) + 2 * output_->frameWidth() +
                     2 + barHeight;
  if (output_->minimumHeight() != height || output_->maximumHeight() != height) output_->setFixedHeight(height);
}

void CodeCell::fitEditorToCode() {
  // The whole cell shows without a scroll bar of its own, up to 30 lines; within those the vertical bar
  // never shows (it would only ever flash up while a new height is laid out, and narrow the code).
  const int blocks = editor_->document()->blockCount();
  const int lines = std::clamp(blocks, 2, 30);
  editor_->setVerticalScrollBarPolicy(blocks <= 30 ? Qt::ScrollBarAlwaysOff : Qt::ScrollBarAsNeeded);
  const QFontMetrics metrics(editor_->font());
  // Room for the horizontal scroll bar too: a long line scrolls sideways, and the bar must not hide
  // the last line. Once the bar has appeared the room stays until the code changes: the taller cell
  // can give the lesson page a scroll bar of its own, which narrows the cell, and a cell that shrank
  // back when its bar went away would take the page's bar away again -- at some window sizes (lessons
  // 07 and 16 at 1280 x 800) the two took turns for ever and the window froze.
  QScrollBar* bar = editor_->horizontalScrollBar();
  if (bar->maximum() > bar->minimum()) roomForBar_ = true;
  const int barHeight = roomForBar_ ? bar->sizeHint().height() : 0;
  const int height = lines * metrics.lineSpacing() + 2 * static_cast<int>(editor_->document()->documentMargin()) + 6 + barHeight;
  if (editor_->minimumHeight() != height || editor_->maximumHeight() != height) editor_->setFixedHeight(height);
}

void CodeCell::markQueued() {
  // Waiting for the cells before it: Stop would interrupt one of those, so it waits too.
  status_->setText("In [*]");
  clearOutput();
  running_ = true;
  started_ = false;
  fresh_ = false;
  run_->setEnabled(false);
  stop_->setEnabled(false);
  updateResetButton();
}

void CodeCell::markStarted(int executionCount) {
  executionCount_ = executionCount;
  status_->setText("In [*]");
  running_ = true;
  started_ = true;
  run_->setEnabled(false);
  stop_->setEnabled(true);
}

void CodeCell::appendOutput(const QString& name, const QString& text) {
  // The kernel sends at most kCellOutputLimit characters of a run (code points; twice as many UTF-16
  // units at worst): past that only what no kernel sends, kept out of the box all the same.
  constexpr qint64 kMaxShown = 2 * kCellOutputLimit;
  if (shown_ >= kMaxShown) return;
  const QString part = shown_ + text.size() > kMaxShown ? text.left(kMaxShown - shown_) : text;
  shown_ += part.size();
  // Qt lays a paragraph out whole, again at every insert into it, at a cost that grows faster than its
  // length: one line of 256K characters, arriving in pieces, held the window for 19 s. A line longer
  // than kMaxLine is shown broken into lines of kMaxLine (the file of a capped output has it whole).
  constexpr qsizetype kMaxLine = 2000;
  QString shown;
  shown.reserve(part.size() + part.size() / kMaxLine + 1);
  for (qsizetype from = 0; from < part.size();) {
    const qsizetype newline = part.indexOf('\n', from);
    const qsizetype end = newline < 0 ? part.size() : newline;
    for (qsizetype room = kMaxLine - lineLength_; end - from > room; room = kMaxLine) {
      shown += QStringView(part).sliced(from, room);
      shown += '\n';
      from += room;
      lineLength_ = 0;
    }
    shown += QStringView(part).sliced(from, end - from);
    lineLength_ += end - from;
    from = end;
    if (newline >= 0) {
      shown += '\n';
      lineLength_ = 0;
      ++from;
    }
  }
  QTextCursor cursor(output_->document());
  cursor.movePosition(QTextCursor::End);
  QTextCharFormat format;
  if (name == "stderr") format.setForeground(theme::ink(theme::Ink::Warning, output_->palette()));
  cursor.insertText(shown, format);
  output_->show();
  fitOutputToText();
  if (shown_ >= kMaxShown && capLimit_ < 0) showOutputCapped(kMaxShown, {}, "the window keeps no more of one cell's output");
}

void CodeCell::showOutputCapped(qint64 limit, const QString& file, const QString& why) {
  if (capLimit_ < 0) {
    // Where the output stops, in the output itself; what became of the rest, under it.
    QTextCursor cursor(output_->document());
    cursor.movePosition(QTextCursor::End);
    QTextCharFormat grey;
    grey.setForeground(theme::ink(theme::Ink::Muted, output_->palette()));
    grey.setFontItalic(true);
    cursor.insertText("\n⋯ the output goes on: see below\n", grey);
    lineLength_ = 0;
    output_->show();
    fitOutputToText();
  }
  capLimit_ = limit;
  capFile_ = file;
  capWhy_ = why;
  showNotice(limit, -1, file, why);
}

void CodeCell::showNotice(qint64 limit, qint64 printed, const QString& file, const QString& why) {
  const QLocale english(QLocale::English);  // 1,000,000: digits grouped, whatever the desktop's locale
  QString text = printed >= 0 ? QString("Output cut: this cell printed %1 characters, and the window shows the first %2.")
                                    .arg(english.toString(printed), english.toString(limit))
                              : QString("Output cut: the window shows the first %1 characters of a cell's output.").arg(english.toString(limit));
  if (!file.isEmpty()) {
    // The home folder as "~", as the lesson page shows the working folder.
    QString shown = QDir::toNativeSeparators(file);
    const QString home = QDir::toNativeSeparators(QDir::homePath());
    if (shown.startsWith(home + QDir::separator())) shown = "~" + shown.mid(home.size());
    text += QString(" The whole output is in <a href=\"%1\">%2</a>.")
                .arg(QUrl::fromLocalFile(file).toString(QUrl::FullyEncoded).toHtmlEscaped(), shown.toHtmlEscaped());
  } else if (!why.isEmpty()) {
    text += " The rest was not kept (" + why.toHtmlEscaped() + ").";
  }
  outputNotice_->setText(text);
  outputNotice_->setToolTip(file);
  outputNotice_->show();
}

void CodeCell::requestInput(const QString& prompt) {
  inputPrompt_->setText(prompt.isEmpty() ? "input:" : prompt);
  input_->clear();
  inputRow_->show();
  input_->setFocus();
}

void CodeCell::markFinished(const notebook::CellResult& result) {
  using Status = notebook::CellResult::Status;
  using Ending = notebook::CellResult::Ending;
  running_ = false;
  run_->setEnabled(true);
  stop_->setEnabled(false);
  stop_->setText("■ Stop");
  inputRow_->hide();
  updateResetButton();
  // A cell that never started (queued when its session ended) shows no count, as a notebook's.
  status_->setText(started_ ? QString("In [%1]").arg(executionCount_) : QString("In [ ]"));
  if (result.outputChars >= 0) showNotice(capLimit_ >= 0 ? capLimit_ : kCellOutputLimit, result.outputChars, result.outputFile, capWhy_);
  if (result.status == Status::Ok) return;
  QTextCursor cursor(output_->document());
  cursor.movePosition(QTextCursor::End);
  QTextCharFormat red;
  red.setForeground(theme::ink(theme::Ink::Bad, output_->palette()));
  if (result.status == Status::KernelDied && result.ending == Ending::KilledByStop) {
    cursor.insertText(result.started ? "■ Stop ended the Python session: " + result.message +
                                           ". What the cells defined is gone; the next Run starts a new session.\n"
                                     : "Not run: " + result.message + ".\n",
                      red);
  } else if (result.status == Status::KernelDied && result.ending == Ending::Ended) {
    cursor.insertText(result.started ? "The Python session was restarted while this cell ran.\n"
                                     : "Not run: the Python session was restarted before this cell's turn.\n",
                      red);
  } else if (result.status == Status::KernelDied) {
    cursor.insertText(result.started ? "The Python session ended while this cell ran (" + result.message + "); Restart starts a new one.\n"
                                     : "Not run: " + result.message + "; Restart starts a new session.\n",
                      red);
  } else {
    // The lessons' own errors stand out as the labs' do: named before the traceback.
    if (result.kind == "device") cursor.insertText("✗ Tensors on two devices: the same-device rule.\n", red);
    if (result.kind == "oom") cursor.insertText("✗ Out of GPU memory.\n", red);
    cursor.insertText(result.traceback.isEmpty() ? result.errorType + ": " + result.message + "\n" : result.traceback, red);
  }
  output_->show();
  fitOutputToText();
}

NotebookSession::NotebookSession(QObject* parent) : QObject(parent) {
  kernel_.setAllowStdin(true);  // input() gets a box under its cell
  setWorkingDirectory({});
  connect(&kernel_, &notebook::KernelProcess::inputRequested, this, [this](const QString& id, const QString& prompt) {
    if (CodeCell* c = cell(id)) c->requestInput(prompt);
  });
  connect(&kernel_, &notebook::KernelProcess::outputCapped, this,
          [this](const QString& id, qint64 limit, const QString& file, const QString& why) {
            if (CodeCell* c = cell(id)) c->showOutputCapped(limit, file, why);
          });
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
  connect(c, &CodeCell::inputSubmitted, this, [this](const QString&, const QString& text) { kernel_.sendInput(text); });
}

void NotebookSession::setWorkingDirectory(const QString& folder) {
  kernel_.setWorkingDirectory(folder);
  // A capped output's whole beside the cells' own files, out of their way (as a notebook's
  // .ipynb_checkpoints); without a folder of its own, in the temporary folder.
  kernel_.setOutputLimit(kCellOutputLimit, folder.isEmpty() ? QDir::temp().filePath("gpulab-output") : QDir(folder).filePath(".gpulab-output"));
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
  kernel_.end();  // without waiting: a cell that ignores the interrupt ends with its process group, a second later
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
