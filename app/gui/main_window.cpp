#include "app/gui/main_window.h"

#include <QCloseEvent>
#include <QFontDatabase>
#include <QHeaderView>
#include <QLabel>
#include <QPlainTextEdit>
#include <QShortcut>
#include <QSplitter>
#include <QStatusBar>
#include <QTabWidget>
#include <QTextBrowser>
#include <QTreeWidget>

#include "app/gui/plot_panel.h"
#include "app/gui/quiz_widget.h"
#include "app/gui/run_panel.h"
#include "engine/memory/caching_allocator.h"
#include "engine/runtime/cuda_runtime.h"

namespace gpulab::app {

namespace {

QString deviceStatus() {
  const cuda::Availability a = cuda::availability();
  if (!a.usable) return QString("CPU — no usable GPU: %1").arg(QString::fromStdString(a.reason));
  const auto& d = a.devices.front();
  return QString("GPU cuda:0 — %1, %2").arg(QString::fromStdString(d.name),
                                             QString::fromStdString(formatBytes(static_cast<std::int64_t>(d.total_memory))));
}

constexpr int kLessonIdRole = Qt::UserRole + 1;

}  // namespace

MainWindow::MainWindow(const QString& lessonsRoot, const QString& progressPath, QWidget* parent)
    : QMainWindow(parent), root_(lessonsRoot), progress_(progressPath) {
  setWindowTitle("GPU Lab");
  navigator_ = new QTreeWidget;
  navigator_->setHeaderHidden(true);
  navigator_->setMinimumWidth(230);

  pageTabs_ = new QTabWidget;
  lessonView_ = new QTextBrowser;
  lessonView_->setOpenExternalLinks(true);
  codeView_ = new QPlainTextEdit;
  codeView_->setReadOnly(true);
  codeView_->setFont(QFontDatabase::systemFont(QFontDatabase::FixedFont));
  codeView_->setLineWrapMode(QPlainTextEdit::NoWrap);
  quiz_ = new QuizWidget(progress_);
  pageTabs_->addTab(lessonView_, "Lesson");
  pageTabs_->addTab(codeView_, "Engine code");
  pageTabs_->addTab(quiz_, "Quiz");

  runPanel_ = new RunPanel;
  plots_ = new PlotPanel;
  auto* right = new QSplitter(Qt::Vertical);
  right->addWidget(plots_);
  right->addWidget(runPanel_);
  right->setStretchFactor(0, 3);
  right->setStretchFactor(1, 2);

  auto* main = new QSplitter(Qt::Horizontal);
  main->addWidget(navigator_);
  main->addWidget(pageTabs_);
  main->addWidget(right);
  main->setSizes({230, 460, 580});
  main->setStretchFactor(1, 1);
  main->setStretchFactor(2, 1);
  setCentralWidget(main);

  runState_ = new QLabel("idle");
  statusBar()->addPermanentWidget(runState_);
  statusBar()->showMessage(deviceStatus());

  connect(navigator_, &QTreeWidget::currentItemChanged, this, [this](QTreeWidgetItem* item) {
    if (item && item->data(0, kLessonIdRole).isValid()) showLesson(course_.find(item->data(0, kLessonIdRole).toString()));
  });
  connect(runPanel_, &RunPanel::runClicked, this, &MainWindow::startRun);
  connect(runPanel_, &RunPanel::stopClicked, this, &MainWindow::stopRun);
  connect(runPanel_, &RunPanel::pauseClicked, this, [this] {
    runner_.pause(!runner_.paused());
    runPanel_->setRunning(runner_.running(), runner_.paused());
    runState_->setText(runner_.paused() ? "paused" : "running");
  });
  connect(runPanel_, &RunPanel::resetClicked, this, [this] { plots_->beginRun("run"); });
  connect(runPanel_, &RunPanel::runSelected, this, [this] {
    showRunSource();
    showReference();
  });
  connect(&runner_, &LabRunner::batchReady, this, [this](const MetricBatch& b) {
    plots_->addBatch(b);
    runPanel_->appendBatch(b);
  });
  connect(&runner_, &LabRunner::finished, this, [this](const QString& error) {
    runPanel_->setRunning(false, false);
    runState_->setText(error.isEmpty() ? "idle" : "failed");
    if (!error.isEmpty()) runPanel_->appendError(error);
    emit runFinished(error);
  });
  connect(quiz_, &QuizWidget::answered, this, &MainWindow::onAnswered);

  // Navigation shortcuts (the run controls have theirs on the buttons).
  connect(new QShortcut(QKeySequence("Alt+Down"), this), &QShortcut::activated, this, [this] { stepLesson(1); });
  connect(new QShortcut(QKeySequence("Alt+Up"), this), &QShortcut::activated, this, [this] { stepLesson(-1); });

  // Authors' mode: a lessons folder is reloaded when its files change.
  reloadDelay_.setSingleShot(true);
  reloadDelay_.setInterval(200);
  connect(&reloadDelay_, &QTimer::timeout, this, [this] {
    const QString keep = currentId_;
    loadCourse();
    if (!selectLesson(keep) && !course_.lessons.isEmpty()) selectLesson(course_.lessons.front().id);
  });
  connect(&watcher_, &QFileSystemWatcher::fileChanged, &reloadDelay_, qOverload<>(&QTimer::start));
  connect(&watcher_, &QFileSystemWatcher::directoryChanged, &reloadDelay_, qOverload<>(&QTimer::start));

  loadCourse();
  if (!course_.lessons.isEmpty()) selectLesson(course_.lessons.front().id);
  resize(1280, 800);
}

MainWindow::~MainWindow() = default;

void MainWindow::closeEvent(QCloseEvent* event) {
  runner_.stop();  // the runner's destructor joins the worker once the lab has stopped
  QMainWindow::closeEvent(event);
}

void MainWindow::loadCourse() {
  course_ = course::loadCourse(root_);
  references_.clear();  // an author's edit may have changed a lesson's run blocks
  if (!root_.startsWith(":")) {
    if (!watcher_.directories().isEmpty()) watcher_.removePaths(watcher_.directories());
    if (!watcher_.files().isEmpty()) watcher_.removePaths(watcher_.files());
    watcher_.addPath(root_);
    for (const course::Lesson& l : course_.lessons) {
      watcher_.addPath(l.folder);
      watcher_.addPath(l.folder + "/lesson.md");
    }
  }
  rebuildNavigator();
}

void MainWindow::rebuildNavigator() {
  const QSignalBlocker block(navigator_);
  navigator_->clear();
  QTreeWidgetItem* chapter = nullptr;
  for (const course::Lesson& l : course_.lessons) {
    if (!chapter || chapter->text(0) != l.chapter) {
      chapter = new QTreeWidgetItem(navigator_, {l.chapter.isEmpty() ? QString("Lessons") : l.chapter});
      chapter->setFlags(Qt::ItemIsEnabled);
      chapter->setExpanded(true);
    }
    QString label = l.title;
    if (!l.ok()) label = "⚠ " + label + " (broken)";
    else if (progress_.isCompleted(l.id)) label = "✓ " + label;
    auto* item = new QTreeWidgetItem(chapter, {label});
    item->setData(0, kLessonIdRole, l.id);
    if (!l.ok()) {
      item->setForeground(0, QColor(214, 39, 40));
      item->setToolTip(0, l.error);
    }
    if (l.id == currentId_) navigator_->setCurrentItem(item);
  }
  navigator_->expandAll();
}

bool MainWindow::selectLesson(const QString& id) {
  QTreeWidgetItemIterator it(navigator_);
  for (; *it; ++it) {
    if ((*it)->data(0, kLessonIdRole).toString() == id) {
      navigator_->setCurrentItem(*it);
      showLesson(course_.find(id));
      return true;
    }
  }
  return false;
}

void MainWindow::stepLesson(int delta) {
  for (int i = 0; i < course_.lessons.size(); ++i) {
    if (course_.lessons[i].id != currentId_) continue;
    const int j = i + delta;
    if (j >= 0 && j < course_.lessons.size()) selectLesson(course_.lessons[j].id);
    return;
  }
}

void MainWindow::showLesson(const course::Lesson* lesson) {
  if (!lesson || runner_.running()) return;
  currentId_ = lesson->id;
  if (lesson->ok()) {
    lessonView_->setMarkdown(lesson->markdown);
  } else {
    lessonView_->setHtml("<h2>" + lesson->title.toHtmlEscaped() + "</h2><p style='color:#d62728'><b>This lesson could not be loaded:</b><br>" +
                         lesson->error.toHtmlEscaped() + "</p><p>The other lessons work as usual.</p>");
  }
  runPanel_->setLesson(lesson->ok() ? lesson : nullptr);
  quiz_->setLesson(lesson->ok() ? lesson : nullptr);
  showRunSource();
  showReference();
  pageTabs_->setCurrentIndex(0);
}

void MainWindow::setReferenceRunsRoot(const QString& root) {
  referenceRoot_ = root;
  references_.clear();
  showReference();
}

const course::ReferenceRuns* MainWindow::referenceRuns(const course::Lesson& lesson) {
  auto it = references_.find(lesson.id);
  if (it == references_.end()) {
    it = references_.emplace(lesson.id, course::findReferenceRuns(lesson, referenceRoot_)).first;
    if (it->second && !it->second->ok()) qWarning("reference run not shown: %s", qPrintable(it->second->error));
  }
  return it->second ? &*it->second : nullptr;
}

void MainWindow::showReference() {
  const course::Lesson* lesson = course_.find(currentId_);
  if (!lesson || !lesson->ok()) {
    plots_->setReference(nullptr, 0);
    return;
  }
  plots_->setReference(referenceRuns(*lesson), runPanel_->currentRun() + 1);
}

void MainWindow::showRunSource() {
  const course::Lesson* lesson = course_.find(currentId_);
  const int i = runPanel_->currentRun();
  if (!lesson || !lesson->ok() || i < 0 || i >= lesson->runs.size()) {
    codeView_->setPlainText("");
    return;
  }
  const QString source = course_.labSource(lesson->runs[i].lab);
  codeView_->setPlainText(source.isEmpty() ? "(the source of lab '" + lesson->runs[i].lab + "' is not available)" : source);
}

void MainWindow::startRun() {
  const course::Lesson* lesson = course_.find(currentId_);
  const int i = runPanel_->currentRun();
  if (!lesson || !lesson->ok() || i < 0 || i >= lesson->runs.size() || runner_.running()) return;
  const auto settings = runPanel_->settings();
  QStringList shown;
  for (const QString& name : lesson->runs[i].expose) {
    auto it = settings.find(name.toStdString());
    if (it != settings.end()) shown << name + "=" + QString::fromStdString(it->second);
  }
  plots_->beginRun(shown.join(", "));
  runPanel_->setRunning(true, false);
  runPanel_->appendInfo("▶ " + lesson->runs[i].title);
  runState_->setText("running");
  runner_.start(lesson->runs[i].lab, settings);
}

void MainWindow::stopRun() { runner_.stop(); }

void MainWindow::onAnswered() {
  if (quiz_->allCorrect() && !progress_.isCompleted(currentId_)) {
    progress_.setCompleted(currentId_);
    rebuildNavigator();
  }
}

}  // namespace gpulab::app
