#include "app/gui/lesson_page.h"
#include "app/gui/focus_order.h"
#include "app/gui/theme.h"

#include <algorithm>
#include <cmath>

#include <QAbstractItemModel>
#include <QAbstractTextDocumentLayout>
#include <QComboBox>
#include <QDeadlineTimer>
#include <QDesktopServices>
#include <QDir>
#include <QFrame>
#include <QGridLayout>
#include <QHBoxLayout>
#include <QLabel>
#include <QPlainTextEdit>
#include <QPushButton>
#include <QRegularExpression>
#include <QScrollBar>
#include <QSettings>
#include <QTextBlock>
#include <QTextBrowser>
#include <QTextCursor>
#include <QTextDocument>
#include <QThread>
#include <QToolButton>
#include <QVBoxLayout>

#include "app/gui/exercise_panel.h"
#include "app/gui/lesson_settings.h"
#include "app/gui/warning_banner.h"
#include "engine/runtime/cuda_runtime.h"

namespace gpulab::app {

namespace {

// Qt's Markdown import makes a code block non-breaking lines: in a narrow lesson view a long line is
// cut off, or the whole page scrolls sideways for it. Code blocks wrap instead, in a slightly smaller
// font on a light band, a wrapped line's continuation indented, so that it still reads as code.
constexpr double kCodeHangingIndent = 28;  // pixels
void polishCodeBlocks(QTextDocument* doc) {
  QTextCursor cursor(doc);
  for (QTextBlock b = doc->begin(); b.isValid(); b = b.next()) {
    QTextBlockFormat format = b.blockFormat();
    if (!format.nonBreakableLines() && !format.hasProperty(QTextFormat::BlockCodeFence)) continue;
    format.setNonBreakableLines(false);
    // A hanging indent: a wrapped line's continuation starts further right than any line of code.
    format.setLeftMargin(format.leftMargin() + kCodeHangingIndent);
    format.setTextIndent(-kCodeHangingIndent);
    format.setBackground(QColor(128, 128, 128, 28));  // light on a light palette, and on a dark one
    cursor.setPosition(b.position());
    cursor.setBlockFormat(format);
    cursor.setPosition(b.position() + b.length() - 1, QTextCursor::KeepAnchor);
    QTextCharFormat chars;
    chars.setFontPointSize(std::max(7.0, doc->defaultFont().pointSizeF() * 0.9));
    cursor.mergeCharFormat(chars);
  }
}

// A stretch of the lesson's text: as tall as its text at the page's width, so that the page, not
// each stretch, scrolls. A wheel turned over it scrolls the page (its own scroll bar has no range).
class TextSegment final : public QTextBrowser {
 public:
  TextSegment() {
    setOpenLinks(false);
    setFrameShape(QFrame::NoFrame);
    setVerticalScrollBarPolicy(Qt::ScrollBarAlwaysOff);
    setHorizontalScrollBarPolicy(Qt::ScrollBarAlwaysOff);
    setSizePolicy(QSizePolicy::Expanding, QSizePolicy::Fixed);
    // The column's background shows through. Not by a style sheet: a widget with one keeps the
    // palette it was polished with, and its text stayed black when the desktop turned dark.
    viewport()->setAutoFillBackground(false);
    // The arrow keys move a caret through the text, as a screen reader's reading follows it.
    setTextInteractionFlags(Qt::TextBrowserInteraction | Qt::TextSelectableByKeyboard);
    watchLayout();
  }
  void setContent(QTextDocument* doc) {
    doc->setParent(this);  // the view deletes a document it parents when it is replaced
    setDocument(doc);
    watchLayout();
    fit();
  }

 protected:
  void resizeEvent(QResizeEvent* event) override {
    QTextBrowser::resizeEvent(event);
    fit();
  }

 private:
  void watchLayout() {
    connect(document()->documentLayout(), &QAbstractTextDocumentLayout::documentSizeChanged, this, &TextSegment::fit,
            Qt::UniqueConnection);
  }
  void fit() {
    document()->setTextWidth(viewport()->width());
    const int height = static_cast<int>(std::ceil(document()->size().height())) + 2 * frameWidth();
    if (height != this->height()) setFixedHeight(height);
  }
};

// A cell's id in the session (and in its tracebacks, "<cell 4>"): its place in the lesson, from 1.
QString cellId(int index) { return QString::number(index + 1); }
int cellIndex(const QString& id) { return id.toInt() - 1; }

// A lesson's working folder's name: its id (course/lesson.h: [a-z0-9-]), anything else in it made
// harmless -- a lesson from an outside folder that failed to load may have any id, and none may name
// a folder outside the root.
QString workingFolderName(const QString& lessonId) {
  QString name = lessonId;
  name.replace(QRegularExpression("[^A-Za-z0-9_.-]"), "_");
  return name.isEmpty() || name == "." || name == ".." ? QString("lesson") : name;
}

}  // namespace

LessonPage::LessonPage(course::ProgressStore& progress, QWidget* parent) : QWidget(parent), progress_(progress) {
  setObjectName("lessonPage");
  scroll_ = new QScrollArea;
  scroll_->setWidgetResizable(true);
  scroll_->setHorizontalScrollBarPolicy(Qt::ScrollBarAlwaysOff);
  scroll_->setFrameShape(QFrame::NoFrame);
  column_ = new QWidget;
  column_->setObjectName("lessonColumn");
  column_->setBackgroundRole(QPalette::Base);
  column_->setAutoFillBackground(true);
  auto* outer = new QVBoxLayout(column_);
  outer->setContentsMargins(6, 4, 6, 4);
  outer->setSpacing(4);

  // Where the cells run: above the text, for a lesson with code cells; it stays while the text scrolls.
  sessionBar_ = new QFrame;
  sessionBar_->setObjectName("sessionBar");
  device_ = new QComboBox;
  device_->setObjectName("cellDevice");
  device_->setSizeAdjustPolicy(QComboBox::AdjustToMinimumContentsLengthWithIcon);
  device_->setMinimumContentsLength(12);
  const bool gpu = cuda::availability().usable;
  device_->addItem(gpu ? "this machine (cuda:0 is its GPU)" : "this machine as it is (CPU only)", false);
  device_->addItem("the emulated GPU as cuda:0 (runs on your CPU)", true);
  device_->setToolTip("Where the lesson's code cells run. The emulated GPU answers to cuda:0 with a small GPU's memory "
                      "and PyTorch's errors; its speed is your CPU's. The run blocks have a device setting of their own, "
                      "in the run area.");
  if (gpu) {
    // A real GPU is cuda:0 in the session: the emulated one would not be used.
    device_->setItemData(1, false, Qt::UserRole - 1);  // disabled item
    device_->setItemData(1, "cuda:0 is this machine's GPU", Qt::ToolTipRole);
  }
  device_->setCurrentIndex(defaultDeviceIndex());
  session_.setEmulatedGpu(device_->currentData().toBool());
  restart_ = new QPushButton("⟲ Restart");
  restart_->setObjectName("sessionRestart");
  restart_->setToolTip("A fresh Python session: every name the cells defined is forgotten, as a notebook's restart does");
  device_->setAccessibleName("Code runs on");
  restart_->setAccessibleName("Restart the Python session");
  state_ = new QLabel;
  state_->setObjectName("sessionState");
  state_->setWordWrap(true);
  state_->setSizePolicy(QSizePolicy::Ignored, QSizePolicy::Preferred);
  folder_ = new QLabel;
  folder_->setObjectName("workingFolder");
  folder_->setTextFormat(Qt::RichText);
  folder_->setWordWrap(true);
  folder_->setSizePolicy(QSizePolicy::Ignored, QSizePolicy::Preferred);
  folder_->setTextInteractionFlags(Qt::TextBrowserInteraction);
  auto* bar = new QGridLayout(sessionBar_);
  bar->setContentsMargins(6, 2, 6, 2);
  bar->setVerticalSpacing(0);
  // Rows, so that the bar asks for no more width than the text below it.
  bar->addWidget(new QLabel("Code runs on"), 0, 0);
  bar->addWidget(device_, 0, 1);
  bar->addWidget(restart_, 1, 0);
  bar->addWidget(state_, 1, 1);
  bar->addWidget(folder_, 2, 0, 1, 2);
  bar->setColumnStretch(1, 1);
  connect(folder_, &QLabel::linkActivated, this, [this](const QString& link) {
    // Made now if no cell ran yet; the desktop's file manager opens it, and nothing here waits for it.
    const QString folder = QUrl(link).toLocalFile();
    QDir().mkpath(folder);
    QDesktopServices::openUrl(QUrl::fromLocalFile(folder));
  });

  auto* understood = new QPushButton("Understood");
  understood->setObjectName("externalCodeUnderstood");
  external_ = new WarningBanner("externalCode", understood);

  layout_ = new QVBoxLayout;
  layout_->setContentsMargins(0, 0, 0, 0);
  layout_->setSpacing(2);
  outer->addLayout(layout_);
  outer->addStretch(1);
  scroll_->setWidget(column_);
  scroll_->setAccessibleName("Lesson");
  scroll_->setAccessibleDescription("The lesson's text, its code cells and exercises, in reading order: Tab goes from one to the next");
  auto* page = new QVBoxLayout(this);
  page->setContentsMargins(0, 0, 0, 0);
  page->setSpacing(2);
  page->addWidget(sessionBar_);
  page->addWidget(external_);
  page->addWidget(scroll_, 1);

  connect(device_, &QComboBox::currentIndexChanged, this, [this] {
    session_.setEmulatedGpu(device_->currentData().toBool());
    if (!session_.kernel().isRunning()) showSessionState("Python session: starts when you run a cell");
    // The learner's choice, kept for this lesson (the default is not: a lesson shows the default
    // until the learner changes it).
    if (restoringDevice_ || !settings_ || lesson_.id.isEmpty()) return;
    const QString key = lessonSettingsGroup(lesson_.id) + "/" + kDeviceSetting;
    if (device_->currentIndex() == defaultDeviceIndex()) settings_->remove(key);
    else settings_->setValue(key, device_->currentData().toBool());
  });
  connect(restart_, &QPushButton::clicked, this, [this] {
    session_.restart();
    showSessionState("Python session: restarting…");
  });
  connect(&session_.kernel(), &notebook::KernelProcess::finished, this, &LessonPage::gradeExercise);
  connect(&machineRuns_, &notebook::MachineRuns::machineStarted, this, [this](int index, int count) {
    if (ExercisePanel* panel = panels_.value(machinesExercise_); panel && machinesExercise_ < lesson_.exercises.size()) {
      panel->showNotGraded(QString("grading your code on %1 machines, each in a fresh session -- now %2 (%3 of %1)…")
                               .arg(count).arg(lesson_.exercises[machinesExercise_].machines[index].description()).arg(index + 1));
    }
  });
  connect(&machineRuns_, &notebook::MachineRuns::done, this, &LessonPage::showMachinesGrade);
  connect(&session_, &NotebookSession::ready, this, [this](const QString& device, bool emulated) {
    sessionHasCuda_ = device != "cpu";
    showSessionState(device == "cpu" ? "Python session ready — CPU only (torch.cuda.is_available() is False)"
                     : emulated      ? "Python session ready — cuda:0 is GPU Lab's emulated GPU (runs on your CPU)"
                                     : "Python session ready — cuda:0 is " + device);
  });
  connect(&session_, &NotebookSession::died, this, [this](const QString& reason) {
    showSessionState("Python session ended: " + reason + ". Run a cell to start a new one.");
  });
  connect(understood, &QPushButton::clicked, this, [this] {
    external_->hide();
    externalAcknowledged_ = true;
    emit externalCodeAcknowledged(externalFolder_);
  });
  saveDelay_.setSingleShot(true);
  saveDelay_.setInterval(700);  // after a pause in typing, not at every key
  connect(&saveDelay_, &QTimer::timeout, this, &LessonPage::saveEdits);
}

LessonPage::~LessonPage() {
  saveEdits();
  for (const QPointer<QThread>& t : threads_)
    if (t) t->wait();
}

void LessonPage::setExternalFolder(const QString& folder, bool acknowledged) {
  externalFolder_ = folder;
  externalAcknowledged_ = acknowledged;
  updateExternalBanner();
}

void LessonPage::updateExternalBanner() {
  // Code of the folder's: a cell, a Python lab one of the lesson's run blocks runs, or an exercise's
  // values -- expressions evaluated after the learner's run, which the banner names (each exercise's
  // panel shows them too).
  QStringList values;
  for (const course::Exercise& e : lesson_.exercises)
    for (auto v = e.values.cbegin(); v != e.values.cend(); ++v) values << v.value();
  const bool runsCode = !cells_.isEmpty() || !values.isEmpty() ||
                        std::any_of(lesson_.runs.begin(), lesson_.runs.end(), [&](const course::RunBlock& r) { return lesson_.pythonLab(r.lab) != nullptr; });
  QString text = "These lessons come from a folder outside GPU Lab (" + externalFolder_ +
                 "). Their code cells and Python labs run on this machine, with your permissions, when you press Run";
  if (!values.isEmpty()) {
    text += "; after an exercise's run this lesson evaluates " + QString(values.size() == 1 ? "this expression" : "these expressions") +
            " (an expression only: no imports, files or hidden names): " + values.join("; ");
  }
  external_->text()->setText(text + " — only run code you trust.");
  external_->setVisible(!externalFolder_.isEmpty() && !externalAcknowledged_ && runsCode);
}

void LessonPage::showSessionState(const QString& text) { state_->setText(text); }

int LessonPage::defaultDeviceIndex() const {
  // Without a usable GPU, the emulated one as cuda:0, so that the lessons' CUDA code runs (with one,
  // the constructor disables that choice).
  const bool emulatedOffered = device_->model()->flags(device_->model()->index(1, 0)) & Qt::ItemIsEnabled;
  return emulatedOffered ? 1 : 0;
}

void LessonPage::restoreDeviceChoice() {
  int index = defaultDeviceIndex();
  if (settings_ && !lesson_.id.isEmpty()) {
    // A stored choice that is no flag, or one this machine does not offer (the emulated GPU where a
    // real GPU is cuda:0), leaves the default.
    if (const std::optional<bool> emulated = storedFlag(settings_->value(lessonSettingsGroup(lesson_.id) + "/" + kDeviceSetting))) {
      const int stored = device_->findData(*emulated);
      if (stored >= 0 && (device_->model()->flags(device_->model()->index(stored, 0)) & Qt::ItemIsEnabled)) index = stored;
    }
  }
  restoringDevice_ = true;
  device_->setCurrentIndex(index);
  restoringDevice_ = false;
  session_.setEmulatedGpu(device_->currentData().toBool());
}

void LessonPage::showWorkingFolder(const QString& folder) {
  folder_->setVisible(!folder.isEmpty());
  if (folder.isEmpty()) return;
  // The home folder as "~": the path then fits the bar at 1280 pixels.
  QString shown = QDir::toNativeSeparators(folder);
  const QString home = QDir::toNativeSeparators(QDir::homePath());
  if (shown.startsWith(home + QDir::separator())) shown = "~" + shown.mid(home.size());
  folder_->setText(QString("Working folder: <a href=\"%1\">%2</a>")
                       .arg(QUrl::fromLocalFile(folder).toString(QUrl::FullyEncoded).toHtmlEscaped(), shown.toHtmlEscaped()));
  folder_->setToolTip(QDir::toNativeSeparators(folder) +
                      "\nThe cells' working folder, this lesson's own (as a notebook runs in its folder): open('notes.txt', 'w'), "
                      "torch.save(model.state_dict(), 'model.pt') and prof.export_chrome_trace('trace.json') write here. Click to open it.");
}

void LessonPage::clearContent() {
  saveEdits();
  session_.clear();
  ++generation_;
  loading_ = false;
  machineRuns_.cancel();
  machinesExercise_ = -1;
  for (QTextBrowser* t : std::as_const(texts_)) delete t;
  for (CodeCell* c : std::as_const(cells_)) delete c;
  for (ExercisePanel* p : std::as_const(panels_)) delete p;
  texts_.clear();
  cells_.clear();
  panels_.clear();
  lesson_ = {};
  showSessionState("Python session: starts when you run a cell");
}

// Tab through the page as it reads: the session bar, the banner, then the texts, cells and exercises
// in the lesson's order (each cell: its code, Run, Stop, Reset, its output).
void LessonPage::orderFocus() {
  QWidget* last = placeAfter(device_, {restart_, folder_, external_->button()});
  last = placeAfter(last, {scroll_});
  for (int i = 0; i < layout_->count(); ++i)
    if (QWidget* w = layout_->itemAt(i)->widget()) last = placeAfter(last, focusables(w));
}

// A screen reader names a stretch of text by its place and its first words (its heading, mostly).
void LessonPage::nameTextView(QTextBrowser* view) {
  const qsizetype part = texts_.indexOf(view) + 1;
  view->setAccessibleName(part <= 1 ? QString("Lesson text") : QString("Lesson text, part %1").arg(part));
  QString start = view->document()->toPlainText().simplified();
  if (start.size() > 100) start = start.left(start.lastIndexOf(' ', 100)) + "…";
  view->setAccessibleDescription(start);
}

QTextBrowser* LessonPage::addTextView() {
  auto* view = new TextSegment;
  view->setObjectName(QString("lessonText%1").arg(texts_.size()));
  connect(view, &QTextBrowser::anchorClicked, this, [this](const QUrl& url) {
    if (url.isRelative() && url.hasFragment()) {
      // A link within the lesson: the page scrolls to its anchor, in whichever stretch it is.
      for (QTextBrowser* t : std::as_const(texts_)) {
        for (QTextBlock b = t->document()->begin(); b.isValid(); b = b.next()) {
          for (auto it = b.begin(); !it.atEnd(); ++it) {
            if (!it.fragment().charFormat().anchorNames().contains(url.fragment())) continue;
            const QRect at = t->cursorRect(QTextCursor(b));
            scroll_->ensureVisible(0, t->mapTo(column_, at.topLeft()).y(), 0, scroll_->height() / 2);
            return;
          }
        }
      }
      return;
    }
    emit linkActivated(url);
  });
  layout_->addWidget(view);
  texts_.append(view);
  nameTextView(view);
  return view;
}

// Qt's Markdown import costs time that grows with the square of a paragraph's length (every piece it
// inserts -- a soft line break, a `code` or **bold** span -- re-examines the paragraph so far), and
// on a view's own document it would also lay the paragraph out again each time: a 256 KiB paragraph
// took 14 s. So: lesson files are capped (course/lesson.h), the texts are parsed into documents of
// their own on a short-lived thread (QTextDocument is reentrant), and the GUI thread only lays them
// out. It waits for the parse up to half a frame budget, so an ordinary lesson (a few KiB, a few ms)
// shows at once; a larger one shows "Loading" until it is ready, with the window responsive meanwhile.
void LessonPage::setLesson(const course::Lesson& lesson) {
  // The same lesson again (back from the course map): its cells and session stay as they are.
  if (lesson.ok() && lesson.id == lesson_.id && lesson.markdown == lesson_.markdown && !texts_.isEmpty()) {
    if (!loading_) emit textShown(lesson.id);
    return;
  }
  clearContent();
  if (!lesson.ok()) {
    sessionBar_->hide();
    external_->hide();
    QTextBrowser* view = addTextView();
    view->setHtml("<h2>" + lesson.title.toHtmlEscaped() + "</h2><p style='" + theme::css(theme::Ink::Bad, view->palette()) +
                  "'><b>This lesson could not be loaded:</b><br>" + lesson.error.toHtmlEscaped() + "</p><p>The other lessons work as usual.</p>");
    nameTextView(view);
    emit textShown(lesson.id);
    return;
  }
  lesson_ = lesson;
  restoreDeviceChoice();  // this lesson's, after the last lesson's session ended (clearContent)
  sessionBar_->setVisible(!lesson.cells.isEmpty());
  // The session ended with the last lesson (clearContent): the next one starts in this lesson's folder.
  const QString folder = workingRoot_.isEmpty() ? QString() : QDir(workingRoot_).filePath(workingFolderName(lesson.id));
  session_.setWorkingDirectory(folder);
  showWorkingFolder(folder);
  // The text views and the cells, in the lesson's order; the texts fill in once parsed.
  for (qsizetype i = 0; i < lesson.texts.size(); ++i) {
    addTextView();
    if (i >= lesson.cells.size()) break;
    const course::CodeBlock& block = lesson.cells[i];
    auto* cell = new CodeCell(cellId(static_cast<int>(i)), block.code);
    if (block.setup) cell->setToolTip("Setup: what the cells below take as given. It runs by itself before the first cell you run.");
    if (const auto edited = progress_.editedCode(lesson.id, static_cast<int>(i), block.code)) {
      cell->setCode(*edited);
      cell->editor()->document()->clearUndoRedoStacks();
    }
    connect(cell, &CodeCell::codeEdited, this, [this, i] {
      if (!unsaved_.contains(static_cast<int>(i))) unsaved_.append(static_cast<int>(i));
      saveDelay_.start();
    });
    layout_->addWidget(cell);
    cells_.append(cell);
    if (block.exercise < 0) {
      session_.addCell(cell, block.setup);
      continue;
    }
    const course::Exercise& exercise = lesson.exercises[block.exercise];
    session_.addCell(cell, false, exercise.values);
    auto* panel = new ExercisePanel(exercise, block.exercise + 1, progress_.exerciseMet(lesson.id, block.exercise));
    layout_->addWidget(panel);
    panels_.append(panel);
  }
  orderFocus();
  updateExternalBanner();
  scroll_->verticalScrollBar()->setValue(0);

  constexpr int kWaitMs = 50;  // half a frame budget: the layout that follows needs the rest
  const int generation = generation_;
  auto result = std::make_shared<std::vector<std::unique_ptr<QTextDocument>>>();
  QStringList markdown;
  for (const QString& text : lesson.texts) markdown << linkRunMarkers(text);
  QThread* gui = thread();
  const QFont font = texts_.front()->font();
  const qreal margin = texts_.front()->document()->documentMargin();
  QThread* worker = QThread::create([result, markdown, font, margin, gui] {
    for (const QString& text : markdown) {
      auto doc = std::make_unique<QTextDocument>();
      doc->setDefaultFont(font);
      doc->setDocumentMargin(margin);
      doc->setMarkdown(text);
      polishCodeBlocks(doc.get());
      doc->moveToThread(gui);
      result->push_back(std::move(doc));
    }
  });
  worker->setParent(this);
  threads_.erase(std::remove_if(threads_.begin(), threads_.end(), [](const QPointer<QThread>& t) { return t.isNull(); }), threads_.end());
  threads_.emplace_back(worker);
  const QString id = lesson.id;
  connect(worker, &QThread::finished, this, [this, worker, result, generation, id] {
    worker->deleteLater();
    if (!result->empty() && generation == generation_) {
      installTexts(std::move(*result));
      emit textShown(id);
    }
    result->clear();  // documents nobody wants any more are deleted here, on the GUI thread
  });
  worker->start();
  if (worker->wait(QDeadlineTimer(kWaitMs)) && !result->empty()) {
    installTexts(std::move(*result));
    result->clear();
    emit textShown(id);
    return;
  }
  loading_ = true;
  texts_.front()->setHtml("<h2>" + lesson.title.toHtmlEscaped() + "</h2><p><i>Loading the lesson…</i></p>");
  nameTextView(texts_.front());
}

void LessonPage::installTexts(std::vector<std::unique_ptr<QTextDocument>> docs) {
  for (std::size_t i = 0; i < docs.size() && i < static_cast<std::size_t>(texts_.size()); ++i) {
    const bool empty = docs[i]->isEmpty();
    static_cast<TextSegment*>(texts_[static_cast<qsizetype>(i)])->setContent(docs[i].release());
    texts_[static_cast<qsizetype>(i)]->setVisible(!empty);  // a cell at the very start or end has no text there
    nameTextView(texts_[static_cast<qsizetype>(i)]);
  }
  loading_ = false;
}

void LessonPage::gradeExercise(const QString& cellId, const notebook::CellResult& result) {
  const int index = cellIndex(cellId);
  if (index < 0 || index >= lesson_.cells.size() || lesson_.cells[index].exercise < 0 || !result.measured) return;
  const int e = lesson_.cells[index].exercise;
  ExercisePanel* panel = panels_.value(e);
  if (!panel) return;
  using Status = notebook::CellResult::Status;
  if (result.status == Status::Interrupted || result.status == Status::KernelDied) {
    panel->showNotGraded(result.status == Status::Interrupted ? "the run was stopped before its end." : "the Python session ended under it.");
    return;
  }
  if (!lesson_.exercises[e].machines.isEmpty()) return gradeOnMachines(e, index);
  if (lesson_.exercises[e].needsCuda && !sessionHasCuda_) {
    panel->showNotGraded("this exercise is about a GPU's memory, and this session has no cuda:0. Choose the emulated GPU above and run it again.");
    return;
  }
  showGrade(e, course::gradeExercise(lesson_.exercises[e], result.measurements, result.unmeasured), cells_[index]->code());
}

void LessonPage::showGrade(int exercise, const course::ChallengeResult& graded, const QString& code) {
  panels_.value(exercise)->showResult(graded, code.trimmed() == lesson_.exercises[exercise].starter.trimmed());
  if (graded.met) {
    progress_.setExerciseMet(lesson_.id, exercise);
    emit exerciseMet(lesson_.id, exercise);
  }
}

void LessonPage::gradeOnMachines(int exercise, int cellIndex) {
  QStringList setup;  // as the learner's session ran them: the setup cells as they stand
  for (int i = 0; i < lesson_.cells.size() && i < cells_.size(); ++i)
    if (lesson_.cells[i].setup) setup << cells_[i]->code();
  machinesExercise_ = exercise;
  machinesCode_ = cells_[cellIndex]->code();
  const course::Exercise& e = lesson_.exercises[exercise];
  machineRuns_.start(e.machines, setup, machinesCode_, e.values);
}

void LessonPage::showMachinesGrade(const QVector<notebook::CellResult>& results) {
  const int e = machinesExercise_;
  ExercisePanel* panel = panels_.value(e);
  if (!panel || e >= lesson_.exercises.size()) return;
  const course::Exercise& exercise = lesson_.exercises[e];
  QVector<course::MachineRun> runs;
  for (int i = 0; i < results.size() && i < exercise.machines.size(); ++i) {
    if (results[i].status == notebook::CellResult::Status::KernelDied || results[i].status == notebook::CellResult::Status::Interrupted) {
      panel->showNotGraded(QString("the session on %1 ended under your code (%2).").arg(exercise.machines[i].description(), results[i].message));
      return;
    }
    runs << course::MachineRun{exercise.machines[i], results[i].measurements, results[i].unmeasured};
  }
  showGrade(e, course::gradeOnMachines(exercise, runs), machinesCode_);
}

void LessonPage::saveEdits() {
  saveDelay_.stop();
  for (int i : std::as_const(unsaved_))
    if (i < cells_.size() && i < lesson_.cells.size()) progress_.setEditedCode(lesson_.id, i, lesson_.cells[i].code, cells_[i]->code());
  unsaved_.clear();
}

void LessonPage::showCellProblem(const QString& cellId, const QString& text) {
  for (CodeCell* c : std::as_const(cells_))
    if (c->id() == cellId) c->appendOutput("stderr", text + "\n");
}

bool LessonPage::runCell(int index) {
  if (index < 0 || index >= cells_.size()) return false;
  scroll_->ensureWidgetVisible(cells_[index]);
  cells_[index]->run();
  return true;
}

QString LessonPage::plainText() const {
  QStringList parts;
  for (qsizetype i = 0; i < texts_.size(); ++i) {
    parts << texts_[i]->toPlainText();
    if (i < cells_.size()) parts << cells_[i]->code();
  }
  return parts.join('\n');
}

QVector<QTextBrowser*> LessonPage::textViews() const { return texts_; }
QVector<CodeCell*> LessonPage::cells() const { return cells_; }

QString LessonPage::linkRunMarkers(const QString& markdown) {
  // lesson.cpp writes each run block as "> **▶ Run N: title** — use the Run button below."
  const QRegularExpression marker(QStringLiteral("^> \\*\\*▶ Run (\\d+): (.*)\\*\\* — use the Run button below\\.$"),
                                  QRegularExpression::MultilineOption);
  QString out = markdown;
  out.replace(marker, QString("> **[▶ Run \\1: \\2](%1:\\1)** — click to choose it in the run area, then press Run.").arg(kRunLinkScheme));
  return out;
}

}  // namespace gpulab::app
