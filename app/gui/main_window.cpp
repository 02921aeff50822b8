#include "app/gui/main_window.h"
#include "app/gui/theme.h"

#include <QAction>
#include <QCheckBox>
#include <QCloseEvent>
#include <QDeadlineTimer>
#include <QDesktopServices>
#include <QDir>
#include <QDialog>
#include <QDialogButtonBox>
#include <QFontDatabase>
#include <QFileInfo>
#include <QFrame>
#include <QHBoxLayout>
#include <QHeaderView>
#include <QLabel>
#include <QMenu>
#include <QMenuBar>
#include <QPlainTextEdit>
#include <QPushButton>
#include <QRegularExpression>
#include <QSaveFile>
#include <QScreen>
#include <QSplitter>
#include <QStackedWidget>
#include <QStatusBar>
#include <QTabWidget>
#include <QTextBrowser>
#include <QTextBlock>
#include <QTextCursor>
#include <QTextDocument>
#include <QThread>
#include <QToolButton>
#include <QTreeWidget>
#include <QVBoxLayout>
#include <algorithm>

#include "app/gui/cell_views.h"
#include "app/gui/code_cell.h"
#include "app/gui/lesson_page.h"
#include "app/gui/lesson_settings.h"
#include "app/gui/plot_panel.h"
#include "app/gui/quiz_widget.h"
#include "app/gui/run_panel.h"
#include "app/gui/warning_banner.h"
#include "engine/memory/caching_allocator.h"
#include "engine/runtime/cuda_runtime.h"
#include "engine/runtime/emulated_gpu.h"

namespace gpulab::app {

namespace {

// Without a usable GPU: why there is none, and the emulated GPU that stands in when it is on.
// The stand-in first: the reason can be long, and the status bar cuts what does not fit.
QString noGpuStatus(const cuda::Availability& a) {
  const QString why = QString::fromStdString(a.reason);
  if (!cuda::emulatedDevice()) return "no usable GPU: " + why;
  return QString("no usable GPU, the emulated GPU stands in: %1. Why no GPU: %2").arg(QString::fromStdString(cuda::emulatedGpuStatus()), why);
}

// The whole story, for the status bar's tooltip.
QString deviceStatus() {
  const cuda::Availability a = cuda::availability();
  if (!a.usable) return "CPU — " + noGpuStatus(a);
  const auto& d = a.devices.front();
  return QString("GPU cuda:0 — %1, %2").arg(QString::fromStdString(d.name),
                                             QString::fromStdString(formatBytes(static_cast<std::int64_t>(d.total_memory))));
}

// What fits the status bar at 1280 pixels (issue 27 §4: the reason was cut off mid-word); the tooltip
// has the rest.
QString shortDeviceStatus() {
  const cuda::Availability a = cuda::availability();
  if (a.usable) return deviceStatus();
  if (!cuda::emulatedDevice()) return "CPU — no usable GPU (hover for why)";
  return QString("CPU — no usable GPU; %1 is the emulated GPU (runs on your CPU, %2) — hover for why")
      .arg(QString::fromStdString(cuda::emulatedDevice()->str()), QString::fromStdString(formatBytes(cuda::emulatedGpuBudget())));
}

constexpr int kLessonIdRole = Qt::UserRole + 1;
constexpr int kHomeRole = Qt::UserRole + 2;  // the navigator's "Course map" item

// Links inside the lesson text and the welcome page.
constexpr QLatin1String kLessonScheme("gpulab-lesson");  // gpulab-lesson:device-setup opens the lesson

// Whether the learner's answer to quiz `q` of `lesson` is a right one.
bool answeredRight(const course::ProgressStore& progress, const course::Lesson& lesson, int q) {
  const int a = progress.answer(lesson.id, q);
  return a >= 0 && a < lesson.quizzes[q].answers.size() && lesson.quizzes[q].answers[a].correct;
}

// What lessonComplete asks of a lesson, in words: "answer the quiz, meet the challenge and solve the exercise".
QString whatCompletes(const course::Lesson& lesson) {
  QStringList parts;
  if (!lesson.quizzes.isEmpty()) parts << "answer the quiz";
  int challenges = 0;
  for (const course::RunBlock& r : lesson.runs) challenges += r.challenge.has_value();
  if (challenges) parts << (challenges == 1 ? "meet the challenge" : "meet the challenges");
  if (!lesson.exercises.isEmpty()) parts << (lesson.exercises.size() == 1 ? "solve the exercise" : "solve the exercises");
  if (parts.size() > 1) {
    const QString last = parts.takeLast();
    parts.last() += " and " + last;
  }
  return parts.join(", ");
}

// cuBLAS reports major*10000 + minor*100 + patch (as the engine stores it); cuDNN 9 does the same,
// cuDNN 8 and older major*1000 + minor*100 + patch.
QString threePart(int v, int major) { return QString("%1.%2.%3").arg(v / major).arg((v % major) / 100).arg(v % 100); }
QString cudnnVersion(int v) { return threePart(v, v >= 90000 ? 10000 : 1000); }

#ifndef GPULAB_VERSION
#error "GPULAB_VERSION (the project() version) must be defined by the build"
#endif

}  // namespace

MainWindow::MainWindow(const QString& lessonsRoot, const QString& progressPath, QWidget* parent)
    : QMainWindow(parent), root_(lessonsRoot), progress_(progressPath) {
  setWindowTitle("GPU Lab");
  if (progressPath.isEmpty()) {
    session_ = std::make_unique<QSettings>();  // the application's organisation and name
  } else {
    const QFileInfo progressFile(progressPath);
    session_ = std::make_unique<QSettings>(progressFile.dir().filePath(progressFile.completeBaseName() + "-session.ini"), QSettings::IniFormat);
  }
  navigator_ = new QTreeWidget;
  navigator_->setHeaderHidden(true);
  navigator_->setMinimumWidth(230);
  navigator_->setAccessibleName("Course outline");
  navigator_->setAccessibleDescription("The chapters and their lessons; Enter opens one");

  pageTabs_ = new QTabWidget;
  lesson_ = new LessonPage(progress_);
  // The lessons' working folders beside the progress file: in the user's data folder
  // (AppDataLocation), or where a test's (or --progress's) file is.
  lesson_->setWorkingRoot(QFileInfo(progress_.path()).absoluteDir().filePath("work"));
  lesson_->setSettings(session_.get());  // where each lesson's cells run
  codeView_ = new QPlainTextEdit;
  codeView_->setReadOnly(true);
  codeView_->setFont(QFontDatabase::systemFont(QFontDatabase::FixedFont));
  codeView_->setLineWrapMode(QPlainTextEdit::NoWrap);
  quiz_ = new QuizWidget(progress_);
  pageTabs_->addTab(lesson_, "Lesson");
  codeHighlighter_ = new PythonHighlighter(codeView_, nullptr);  // on the code view's document when the lab is Python
  pageTabs_->addTab(codeView_, "Lab code");
  pageTabs_->addTab(quiz_, "Quiz");
  pageTabs_->setAccessibleName("The lesson, its lab's code and its quiz");
  codeView_->setAccessibleName("The lab's code");
  codeView_->setAccessibleDescription("The code the run area runs, exactly as it runs");

  runPanel_ = new RunPanel;
  runPanel_->setSettings(session_.get());  // the learner's parameter values, per lesson and run block
  plots_ = new PlotPanel;
  plots_->setObjectName("runViews");
  // The code cells' views have a panel of their own: a cell run never wipes a lab run's curves, and
  // the lab's views are not buried among the cells'. Each starts in front when its run starts.
  cellPlots_ = new PlotPanel;
  cellPlots_->setObjectName("cellViews");
  viewPanels_ = new QTabWidget;
  viewPanels_->setDocumentMode(true);
  viewPanels_->addTab(plots_, "Run views");
  viewPanels_->addTab(cellPlots_, "Code cell views");
  viewPanels_->setTabToolTip(0, "The views of the lesson's runs (the run area below)");
  viewPanels_->setAccessibleName("Views");
  plots_->setAccessibleName("Run views");
  cellPlots_->setAccessibleName("Code cell views");
  viewPanels_->setTabToolTip(1, "The views of the lesson's code cells: what they log, cuda:0's memory, the views they declare");
  auto* right = new QSplitter(Qt::Vertical);
  right->setObjectName("viewsSplitter");
  right->addWidget(viewPanels_);
  right->addWidget(runPanel_);
  // Half each: in a 1280x800 window the run panel then shows a run's parameters in full.
  right->setStretchFactor(0, 1);
  right->setStretchFactor(1, 1);

  // A banner above the lesson for problems with the progress file: the learner must see them.
  auto* dismiss = new QToolButton;
  dismiss->setText("✕");
  dismiss->setToolTip("Hide this message");
  dismiss->setAccessibleName("Hide this message");
  dismiss->setAutoRaise(true);
  progressBanner_ = new WarningBanner("progressBanner", dismiss);
  progressNotice_ = progressBanner_->text();
  progressNotice_->setObjectName("progressNotice");
  progressNotice_->setTextInteractionFlags(Qt::TextSelectableByMouse);  // the path can be copied
  connect(dismiss, &QToolButton::clicked, progressBanner_, &QWidget::hide);
  // The lesson: its tabs, then the way on (the course map, the next lesson).
  lessonScreen_ = new QWidget;
  auto* lessonLayout = new QVBoxLayout(lessonScreen_);
  lessonLayout->setContentsMargins(0, 0, 0, 0);
  lessonLayout->setSpacing(4);
  lessonLayout->addWidget(pageTabs_, 1);
  auto* wayOn = new QHBoxLayout;
  auto* home = new QPushButton("⌂ Course map");
  home->setToolTip("The course map: every lesson, what you completed (Alt+Home)");
  nextButton_ = new QPushButton;
  nextButton_->setObjectName("nextLesson");
  wayOn->addWidget(home);
  wayOn->addStretch();
  wayOn->addWidget(nextButton_);
  lessonLayout->addLayout(wayOn);
  welcome_ = new QTextBrowser;
  welcome_->setObjectName("welcome");
  welcome_->setOpenLinks(false);
  welcome_->setAccessibleName("Course map");
  pages_ = new QStackedWidget;
  pages_->addWidget(welcome_);
  pages_->addWidget(lessonScreen_);
  auto* page = new QWidget;
  auto* pageLayout = new QVBoxLayout(page);
  pageLayout->setContentsMargins(0, 0, 0, 0);
  pageLayout->setSpacing(4);
  pageLayout->addWidget(progressBanner_);
  pageLayout->addWidget(pages_, 1);

  auto* main = new QSplitter(Qt::Horizontal);
  main->setObjectName("mainSplitter");
  main->addWidget(navigator_);
  main->addWidget(page);
  main->addWidget(right);
  main->setSizes({230, 460, 580});
  main->setStretchFactor(1, 1);
  main->setStretchFactor(2, 1);
  setCentralWidget(main);
  // Where the learner put the splitters, as they left them (issue 48, 4.8: a restart forgot them). The
  // window's layout, not a lesson's: the same in every lesson, so nothing jumps from one to the next.
  // A stored state Qt cannot read, or one that hides a pane, leaves the defaults.
  splitters_ = {main, right};
  const std::vector<QList<int>> defaults = {{230, 460, 580}, {400, 400}};  // as set above: the views and the run area half each
  for (std::size_t i = 0; i < splitters_.size(); ++i) {
    QSplitter* s = splitters_[i];
    connect(s, &QSplitter::splitterMoved, this, &MainWindow::saveSplitters);
    const QVariant stored = session_->value(splitterKey(s));
    if (!stored.isValid()) continue;  // never moved: as laid out above
    const bool read = s->restoreState(stored.toByteArray());
    const QList<int> sizes = s->sizes();
    if (!read || sizes.size() != defaults[i].size() || std::any_of(sizes.begin(), sizes.end(), [](int size) { return size <= 0; }))
      s->setSizes(defaults[i]);
  }

  runState_ = new QLabel("idle");
  statusBar()->addPermanentWidget(runState_);
  // A widget, not showMessage(): a temporary message is cleared by any status tip (hovering the menu).
  auto* device = new QLabel(shortDeviceStatus());
  device->setObjectName("deviceStatus");
  device->setToolTip(deviceStatus());
  // The reason for no GPU can be long: the label is cut at the window's edge rather than widen it.
  device->setSizePolicy(QSizePolicy::Ignored, QSizePolicy::Preferred);
  statusBar()->addWidget(device, 1);
  runDevice_ = new QLabel;
  runDevice_->setObjectName("runDevice");
  runDevice_->setToolTip("Where the run computes, as the lab reports it");
  statusBar()->addWidget(runDevice_);

  QMenu* file = menuBar()->addMenu("&File");
  exportHistory_ = file->addAction("Export memory &history (PyTorch snapshot)…", this, &MainWindow::askExportMemoryHistory);
  exportHistory_->setObjectName("exportMemoryHistory");
  exportHistory_->setIconText("Memory history…");
  exportHistory_->setToolTip("Export the last run's memory history as a PyTorch snapshot (.pickle) to open at pytorch.org/memory_viz "
                             "(turn on File > Record memory history before the run)");
  exportHistory_->setEnabled(false);  // until a run that recorded its history has ended
  runPanel_->addRunAction(exportHistory_);
  recordHistory_ = file->addAction("&Record memory history for the next runs", this, [this](bool on) { runner_.setRecordMemoryHistory(on); });
  recordHistory_->setObjectName("recordMemoryHistory");
  recordHistory_->setCheckable(true);
  recordHistory_->setChecked(runner_.recordMemoryHistory());
  recordHistory_->setToolTip("torch.cuda.memory._record_memory_history(): every allocation and free of the next runs is kept for "
                             "Export memory history. Off by default, as in PyTorch: recording slows a fast training loop.");
  file->addSeparator();
  QAction* quit = file->addAction("&Quit", this, &QWidget::close);
  quit->setShortcut(QKeySequence::Quit);
  quit->setMenuRole(QAction::QuitRole);
  QMenu* go = menuBar()->addMenu("&Go");
  homeAction_ = go->addAction("&Course map", this, &MainWindow::showWelcome);
  homeAction_->setShortcuts({QKeySequence("Alt+Home"), QKeySequence("Ctrl+Home")});
  QAction* previous = go->addAction("&Previous lesson", this, [this] { stepLesson(-1); });
  previous->setShortcuts({QKeySequence("Alt+Up"), QKeySequence("Ctrl+Alt+Left")});
  nextAction_ = go->addAction("&Next lesson", this, [this] { stepLesson(1); });
  nextAction_->setObjectName("nextLessonAction");
  nextAction_->setShortcuts({QKeySequence("Alt+Down"), QKeySequence("Ctrl+Alt+Right")});
  connect(nextButton_, &QPushButton::clicked, nextAction_, &QAction::trigger);
  connect(home, &QPushButton::clicked, homeAction_, &QAction::trigger);
  QMenu* help = menuBar()->addMenu("&Help");
  QAction* about = help->addAction("&About GPU Lab", this, &MainWindow::showAbout);
  about->setObjectName("aboutAction");
  about->setMenuRole(QAction::AboutRole);

  connect(navigator_, &QTreeWidget::currentItemChanged, this, [this](QTreeWidgetItem* item) {
    if (item && item->data(0, kHomeRole).toBool()) showWelcome();
    else if (item && item->data(0, kLessonIdRole).isValid()) showLesson(course_.find(item->data(0, kLessonIdRole).toString()));
  });
  connect(lesson_, &LessonPage::linkActivated, this, &MainWindow::openLink);
  connect(lesson_, &LessonPage::textShown, this, &MainWindow::lessonTextShown);
  connect(lesson_, &LessonPage::exerciseMet, this, &MainWindow::updateCompletion);
  connect(lesson_, &LessonPage::externalCodeAcknowledged, this,
          [this](const QString& folder) { session_->setValue("externalCode/" + QString::fromUtf8(folder.toUtf8().toBase64()), true); });
  if (!root_.startsWith(":")) lesson_->setExternalFolder(root_, session_->value("externalCode/" + QString::fromUtf8(root_.toUtf8().toBase64())).toBool());
  auto* cellViews = new CellViews(lesson_->session().kernel(), *cellPlots_, this);
  connect(cellViews, &CellViews::runStarted, this, [this] { viewPanels_->setCurrentWidget(cellPlots_); });
  connect(cellViews, &CellViews::refused, lesson_, &LessonPage::showCellProblem);
  connect(welcome_, &QTextBrowser::anchorClicked, this, &MainWindow::openLink);
  connect(runPanel_, &RunPanel::runClicked, this, &MainWindow::startRun);
  connect(runPanel_, &RunPanel::stopClicked, this, &MainWindow::stopRun);
  connect(runPanel_, &RunPanel::pauseClicked, this, [this] {
    runner_.pause(!runner_.paused());
    runPanel_->setRunning(runner_.running(), runner_.paused());
    runState_->setText(runner_.paused() ? "paused" : "running");
  });
  connect(runPanel_, &RunPanel::resetClicked, plots_, &PlotPanel::clearRuns);
  connect(plots_, &PlotPanel::statusMessage, this, [this](const QString& text) { statusBar()->showMessage(text, 15000); });
  connect(runPanel_, &RunPanel::runSelected, this, [this](int index) {
    showRunSource();
    showReference();
    showChallenge();
    session_->setValue("session/run", index);
  });
  connect(&runner_, &LabRunner::batchReady, this, [this](const MetricBatch& b) {
    for (const lab::Update& u : b.updates)
      if (const auto* d = std::get_if<lab::RunDevice>(&u)) runDevice_->setText("Run on " + QString::fromStdString(d->label.empty() ? d->device : d->label));
      else if (const auto* m = std::get_if<lab::Measurement>(&u)) runMeasurements_.push_back(*m);
    plots_->addBatch(b);
    runPanel_->appendBatch(b);
  });
  connect(&runner_, &LabRunner::finished, this, [this](const QString& error) {
    runPanel_->setRunning(false, false);
    runState_->setText(error.isEmpty() ? "idle" : "failed");
    runPanel_->finishRun(error, runner_.stopRequested());
    plots_->endRun(error);  // a failed run loses its legend entries
    gradeRun(error);
    if (welcomeShown()) {
      // It ended while the learner was on the course map, which is no lesson: nothing to run there.
      // Its views stay for when its lesson is opened again.
      runPanel_->setLesson(nullptr);
      runPanel_->showChallenge(nullptr, false);
    }
    emit runFinished(error);
  });
  connect(&runner_, &LabRunner::memoryHistoryReady, this, [this](const QByteArray& pickle) {
    if (pickle.isEmpty()) return;  // the previous run's stays
    memoryHistory_ = pickle;
    exportHistory_->setEnabled(true);
  });
  connect(quiz_, &QuizWidget::answered, this, &MainWindow::onAnswered);
  // "Compare with a real GPU", kept per lesson when the learner ticks or unticks it (--compare, for
  // screenshots, is not kept).
  connect(plots_->referenceCheckBox(), &QCheckBox::clicked, this, [this](bool on) {
    if (currentId_.isEmpty()) return;
    const QString key = lessonSettingsGroup(currentId_) + "/" + kCompareSetting;
    if (on) session_->setValue(key, true);
    else session_->remove(key);
  });

  // Authors' mode: a lessons folder is reloaded when its files change.
  reloadDelay_.setSingleShot(true);
  reloadDelay_.setInterval(200);
  connect(&reloadDelay_, &QTimer::timeout, this, [this] {
    const QString keep = currentId_;
    const bool home = welcomeShown();
    loadCourse();
    if (home) showWelcome();
    else if (!selectLesson(keep) && !course_.lessons.isEmpty()) selectLesson(course_.lessons.front().id);
  });
  connect(&watcher_, &QFileSystemWatcher::fileChanged, &reloadDelay_, qOverload<>(&QTimer::start));
  connect(&watcher_, &QFileSystemWatcher::directoryChanged, &reloadDelay_, qOverload<>(&QTimer::start));

  loadCourse();
  restoreSession();
  showProgressProblem();
  resize(initialSize(screen() ? screen()->availableGeometry().size() : QSize(1280, 800)));
}

bool MainWindow::opensMaximized(const QSize& available) {
  const QSize wanted = QSize(1280, 800) + kFrameAllowance;
  return available.width() < wanted.width() || available.height() < wanted.height();
}

void MainWindow::showInitially() {
  if (opensMaximized(screen() ? screen()->availableGeometry().size() : QSize(1280, 800))) {
    // Without a window manager (a bare X server) nothing maximizes: the screen's area is the window's.
    if (screen()) setGeometry(screen()->availableGeometry());
    showMaximized();
  } else {
    show();
  }
}

QSize MainWindow::initialSize(const QSize& available) {
  // 1280x800, or less: the whole window, with a window manager's frame and title bar, on the screen.
  return QSize(1280, 800).boundedTo(available - kFrameAllowance);
}

MainWindow::~MainWindow() {
  // Before progress_ goes: the lesson page, a child widget, outlives the members.
  lesson_->saveEdits();
}

QString MainWindow::splitterKey(const QSplitter* splitter) { return "window/" + splitter->objectName(); }

void MainWindow::saveSplitters() {
  for (QSplitter* s : splitters_) session_->setValue(splitterKey(s), s->saveState());
}

void MainWindow::closeEvent(QCloseEvent* event) {
  saveSplitters();
  lesson_->saveEdits();
  lesson_->session().clear();  // a running cell is interrupted, the session ended
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
  auto* home = new QTreeWidgetItem(navigator_, {"⌂ Course map"});
  home->setData(0, kHomeRole, true);
  home->setToolTip(0, "What GPU Lab is, this machine's GPU, and every lesson (Alt+Home)");
  if (welcomeShown()) navigator_->setCurrentItem(home);
  QTreeWidgetItem* chapter = nullptr;
  for (const course::Lesson& l : course_.lessons) {
    if (!chapter || chapter->text(0) != l.chapter) {
      chapter = new QTreeWidgetItem(navigator_, {l.chapter.isEmpty() ? QString("Lessons") : l.chapter});
      chapter->setFlags(Qt::ItemIsEnabled);
      chapter->setExpanded(true);
    }
    QString label = l.title;
    if (!l.ok()) label = "⚠ " + label + " (broken)";
    else if (lessonComplete(l)) label = "✓ " + label;
    auto* item = new QTreeWidgetItem(chapter, {label});
    item->setData(0, kLessonIdRole, l.id);
    if (!l.ok()) {
      item->setForeground(0, theme::ink(theme::Ink::Bad, navigator_->palette()));
      item->setToolTip(0, l.error);
    } else {
      item->setToolTip(0, l.title + (lessonComplete(l) ? "\nComplete" : "\nNot complete yet: " + whatCompletes(l)));
    }
    if (l.id == currentId_ && !welcomeShown()) navigator_->setCurrentItem(item);
  }
  navigator_->expandAll();
}

bool MainWindow::selectLesson(const QString& id) {
  QTreeWidgetItemIterator it(navigator_);
  for (; *it; ++it) {
    if ((*it)->data(0, kLessonIdRole).toString() == id) {
      {
        const QSignalBlocker block(navigator_);  // its currentItemChanged would show the lesson a second time
        navigator_->setCurrentItem(*it);
      }
      showLesson(course_.find(id));
      return true;
    }
  }
  return false;
}

void MainWindow::stepLesson(int delta) {
  if (welcomeShown() && delta > 0) {  // from the course map: on to the lesson left, or the first
    if (!selectLesson(currentId_) && !course_.lessons.isEmpty()) selectLesson(course_.lessons.front().id);
    return;
  }
  for (int i = 0; i < course_.lessons.size(); ++i) {
    if (course_.lessons[i].id != currentId_) continue;
    const int j = i + delta;
    if (j >= 0 && j < course_.lessons.size()) selectLesson(course_.lessons[j].id);
    return;
  }
}

void MainWindow::showLesson(const course::Lesson* lesson) {
  if (!lesson) return;
  if (runner_.running()) {
    // A run keeps its lesson on screen; back from the course map to it is all that is allowed.
    if (lesson->id == currentId_) pages_->setCurrentWidget(lessonScreen_);
    return;
  }
  pages_->setCurrentWidget(lessonScreen_);
  // Another lesson's views and measurements would read as this lesson's: they go with their lesson.
  if (lesson->id != viewsLesson_) {
    plots_->clearViews();
    cellPlots_->clearViews();  // the cells' session ends with their lesson too
  }
  viewsLesson_ = lesson->id;
  currentId_ = lesson->id;
  session_->setValue("session/lesson", lesson->id);
  session_->setValue("session/run", 0);
  lesson_->setLesson(*lesson);
  runPanel_->setLesson(lesson->ok() ? lesson : nullptr);
  quiz_->setLesson(lesson->ok() ? lesson : nullptr);
  showRunSource();
  showReference();
  // This lesson's "Compare with a real GPU": as the learner left it here, unticked by default.
  plots_->setShowReference(storedFlag(session_->value(lessonSettingsGroup(lesson->id) + "/" + kCompareSetting)).value_or(false));
  showChallenge();
  updateNextLesson();
  pageTabs_->setCurrentIndex(0);
}

bool MainWindow::lessonLoading() const { return lesson_->loading(); }

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
  const QString& labId = lesson->runs[i].lab;
  const QString source = course_.labSource(labId);
  // Every lab is a Python file in its lesson's folder (lessons/README.md).
  codeHighlighter_->setDocument(codeView_->document());
  pageTabs_->setTabText(pageTabs_->indexOf(codeView_), "Lab code (Python)");
  codeView_->setPlainText(source.isEmpty() ? "(the source of lab '" + labId + "' is not available)" : source);
}

void MainWindow::startRun() {
  const course::Lesson* lesson = course_.find(currentId_);
  const int i = runPanel_->currentRun();
  if (!lesson || !lesson->ok() || i < 0 || i >= lesson->runs.size() || runner_.running()) return;
  // A lesson that loaded names a lab it can make (its run blocks were checked against them).
  std::shared_ptr<lab::Lab> theLab = course::makeLab(*lesson, lesson->runs[i].lab);
  const auto settings = runPanel_->settings();
  plots_->beginRun(settings, lesson->id + "#" + QString::number(i));  // overlaid: runs of this block, named by what differs
  runDevice_->clear();
  viewPanels_->setCurrentWidget(plots_);
  runLesson_ = lesson->id;
  runBlock_ = i;
  runMeasurements_.clear();
  showChallenge();  // the last run's grade goes
  runPanel_->setRunning(true, false);
  runPanel_->beginRunOutput();
  runPanel_->appendInfo("▶ " + lesson->runs[i].title);
  runState_->setText("running");
  runner_.start(std::move(theLab), settings);
}

void MainWindow::stopRun() { runner_.stop(); }

void MainWindow::onAnswered() {
  updateCompletion(currentId_);
  showProgressProblem();
}

bool MainWindow::lessonComplete(const course::Lesson& lesson) const {
  if (!lesson.ok()) return false;
  bool anything = false;  // a lesson with no quiz and no challenge has nothing to complete
  for (int q = 0; q < lesson.quizzes.size(); ++q) {
    if (!answeredRight(progress_, lesson, q)) return false;
    anything = true;
  }
  for (int r = 0; r < lesson.runs.size(); ++r) {
    if (!lesson.runs[r].challenge) continue;
    if (!progress_.challengeMet(lesson.id, r)) return false;
    anything = true;
  }
  for (int e = 0; e < lesson.exercises.size(); ++e) {
    if (!progress_.exerciseMet(lesson.id, e)) return false;
    anything = true;
  }
  return anything;
}

void MainWindow::updateCompletion(const QString& id) {
  const course::Lesson* lesson = course_.find(id);
  if (!lesson || !lesson->ok()) return;
  const bool complete = lessonComplete(*lesson);
  if (complete != progress_.isCompleted(id)) progress_.setCompleted(id, complete);  // what gpulab-cli reads
  rebuildNavigator();
  updateNextLesson();
  if (welcomeShown()) welcome_->setHtml(courseMapHtml());
}

void MainWindow::showChallenge() {
  const course::Lesson* lesson = course_.find(currentId_);
  const int i = runPanel_->currentRun();
  const bool has = lesson && lesson->ok() && i >= 0 && i < lesson->runs.size() && lesson->runs[i].challenge;
  runPanel_->showChallenge(has ? &*lesson->runs[i].challenge : nullptr, has && progress_.challengeMet(lesson->id, i));
}

void MainWindow::gradeRun(const QString& error) {
  const course::Lesson* lesson = course_.find(runLesson_);
  if (!lesson || !lesson->ok() || runBlock_ < 0 || runBlock_ >= lesson->runs.size() || !lesson->runs[runBlock_].challenge) return;
  if (!error.isEmpty() || runner_.stopRequested()) {
    runPanel_->showChallengeNotGraded(QString("The run %1 before its end: the challenge is graded only when a run finishes.")
                                          .arg(error.isEmpty() ? "was stopped" : "failed"));
    return;
  }
  const bool metBefore = progress_.challengeMet(lesson->id, runBlock_);
  const course::ChallengeResult result = course::grade(*lesson->runs[runBlock_].challenge, runMeasurements_);
  runPanel_->showChallengeResult(result, metBefore);
  if (result.met && !metBefore) progress_.setChallengeMet(lesson->id, runBlock_);
  updateCompletion(lesson->id);
  showProgressProblem();
}

void MainWindow::updateNextLesson() {
  int index = -1;
  for (int i = 0; i < course_.lessons.size(); ++i)
    if (course_.lessons[i].id == currentId_) index = i;
  const bool hasNext = index >= 0 && index + 1 < course_.lessons.size();
  const course::Lesson* lesson = course_.find(currentId_);
  const bool prominent = hasNext && lesson && lessonComplete(*lesson);
  nextAction_->setEnabled(hasNext || welcomeShown());
  nextButton_->setEnabled(hasNext);
  // The title in the tooltip: the button stays narrow, so that the window fits a 1280x800 screen.
  nextButton_->setText(hasNext ? "Next lesson ▶" : "The last lesson");
  const QString next = hasNext ? "Next: " + course_.lessons[index + 1].title + " (Alt+Down)" : QString("This is the course's last lesson");
  nextButton_->setToolTip(prominent ? "You completed this lesson. " + next : next);
  nextButton_->setProperty("prominent", prominent);
  nextButton_->setDefault(prominent);
  nextButton_->setStyleSheet(prominent ? "QPushButton { background: #188038; color: white; font-weight: bold; padding: 4px 12px; border-radius: 3px; }" : QString());
}

void MainWindow::showWelcome() {
  welcome_->setHtml(courseMapHtml());
  pages_->setCurrentWidget(welcome_);
  if (!runner_.running()) {
    // The map is no lesson: nothing to run, and no lesson's views under it (a run going on keeps
    // its lesson's run area, so that it can be stopped from here).
    runPanel_->setLesson(nullptr);
    runPanel_->showChallenge(nullptr, false);
    plots_->setReference(nullptr, 0);
    plots_->clearViews();
    viewsLesson_.clear();
    cellPlots_->clearViews();
  }
  rebuildNavigator();  // the "Course map" item is the current one
  updateNextLesson();
}

bool MainWindow::welcomeShown() const { return pages_->currentWidget() == welcome_; }

QString MainWindow::courseMapHtml() const {
  QString html = "<h1>Welcome to GPU Lab</h1>"
                 "<p>GPU Lab teaches how deep learning uses a GPU — devices, the training loop, where memory goes, "
                 "running out of it — the way PyTorch does it. Each lesson explains an idea with PyTorch code, then "
                 "<b>runs it for real</b> on GPU Lab's own engine: press <b>Run</b> in the run area and watch the plots "
                 "and the console. A lesson is complete when its quiz is answered correctly, its challenges are met and its "
                 "exercises are solved.</p>";
  const cuda::Availability a = cuda::availability();
  const QString why = QString::fromStdString(a.reason).toHtmlEscaped();
  if (a.usable) {
    html += "<p><b>This machine:</b> " + deviceStatus().toHtmlEscaped() + ". The lessons run on it.</p>";
  } else if (cuda::emulatedDevice()) {
    html += "<p><b>This machine has no usable GPU</b> (" + why + "). <b>GPU Lab's emulated GPU stands in:</b> " +
            QString::fromStdString(cuda::emulatedGpuStatus()).toHtmlEscaped() +
            ". It behaves as a GPU device does (its own memory, the same-device rule, out-of-memory errors) but computes on "
            "your CPU: its memory numbers are real, its timings are not a GPU's.</p>";
  } else {
    html += "<p><b>This machine has no usable GPU</b> (" + why + "), and the emulated GPU is off: the lessons run on the CPU.</p>";
  }
  html += "<h2>Course map</h2>";
  QString chapter;
  bool open = false;
  for (const course::Lesson& l : course_.lessons) {
    if (!open || l.chapter != chapter) {
      if (open) html += "</ul>";
      chapter = l.chapter;
      html += "<h3>" + (chapter.isEmpty() ? QString("Lessons") : chapter).toHtmlEscaped() + "</h3><ul>";
      open = true;
    }
    QStringList status;
    int challenges = 0, met = 0;
    for (int r = 0; r < l.runs.size(); ++r) {
      if (!l.runs[r].challenge) continue;
      ++challenges;
      if (progress_.challengeMet(l.id, r)) ++met;
    }
    int right = 0;
    for (int q = 0; q < l.quizzes.size(); ++q) right += answeredRight(progress_, l, q);
    int solved = 0;  // exercises count for completion too (lessonComplete)
    for (int e = 0; e < l.exercises.size(); ++e) solved += progress_.exerciseMet(l.id, e);
    if (!l.ok()) status << "could not be loaded";
    if (l.ok() && !l.quizzes.isEmpty()) status << QString("quiz: %1 of %2 right").arg(right).arg(l.quizzes.size());
    if (l.ok()) status << (challenges == 0 ? QString("no challenge") : QString("challenges met: %1 of %2").arg(met).arg(challenges));
    if (l.ok() && !l.exercises.isEmpty()) status << QString("exercises solved: %1 of %2").arg(solved).arg(l.exercises.size());
    const QString mark = !l.ok() ? "⚠" : lessonComplete(l) ? "✓" : "○";
    const QString here = l.id == currentId_ ? " <i>(where you left off)</i>" : QString();
    html += QString("<li>%1 <a href=\"%2:%3\">%4</a> — %5%6</li>")
                .arg(mark, kLessonScheme, l.id, l.title.toHtmlEscaped(), status.join(", ").toHtmlEscaped(), here);
  }
  if (open) html += "</ul>";
  return html;
}

void MainWindow::restoreSession() {
  const QString last = session_->value("session/lesson").toString();
  const int run = session_->value("session/run", 0).toInt();
  if (last.isEmpty() || !selectLesson(last)) {
    showWelcome();
    return;
  }
  if (run > 0 && run < runPanel_->runCount()) runPanel_->selectRun(run);
}

void MainWindow::openLink(const QUrl& url) {
  if (url.scheme() == kRunLinkScheme) {
    const int index = url.path().toInt() - 1;
    const course::Lesson* lesson = course_.find(currentId_);
    if (!lesson || index < 0 || index >= lesson->runs.size()) return;
    if (runner_.running()) {
      statusBar()->showMessage("A run is going on: stop it to choose another.", 5000);
      return;
    }
    runPanel_->selectRun(index);
    runPanel_->runButton()->setFocus();
  } else if (url.scheme() == kLessonScheme) {
    selectLesson(url.path());
  } else if (url.isRelative() && url.hasFragment()) {
    if (auto* view = qobject_cast<QTextBrowser*>(sender())) view->scrollToAnchor(url.fragment());
  } else {
    QDesktopServices::openUrl(url);
  }
}

bool MainWindow::exportMemoryHistory(const QString& path) const {
  if (memoryHistory_.isEmpty()) return false;
  QSaveFile f(path);  // a complete file or none
  return f.open(QIODevice::WriteOnly) && f.write(memoryHistory_) == memoryHistory_.size() && f.commit();
}

void MainWindow::askExportMemoryHistory() {
  const QString path = plots_->askSavePath("Export memory history", "PyTorch memory snapshot (*.pickle)", "pickle", currentId_ + "-memory");
  if (path.isEmpty()) return;
  const QString shown = QDir::toNativeSeparators(QFileInfo(path).absoluteFilePath());
  statusBar()->showMessage(exportMemoryHistory(path) ? QString("Exported the memory history to %1 — open it at pytorch.org/memory_viz").arg(shown)
                                                     : QString("Could not export the memory history to %1").arg(shown),
                           15000);
}

void MainWindow::showProgressProblem() {
  // What went wrong at load time stays said; a failed save is added to it (and goes once one works).
  QStringList lines;
  if (!progress_.loadProblem().isEmpty()) lines << progress_.loadProblem();
  if (!progress_.lastError().isEmpty() && progress_.lastError() != progress_.loadProblem()) {
    lines << (progress_.readOnly() ? "Your last answer was " + progress_.lastError() + "." : "Your progress was not saved: " + progress_.lastError() + ".");
  }
  const QString text = lines.join('\n');
  if (text.isEmpty()) {
    progressBanner_->hide();
  } else if (text != progressNotice_->text()) {  // a new problem shows again, even after "✕"
    progressBanner_->show();
  }
  progressNotice_->setText(text);
}

QStringList MainWindow::versionReport() {
  QStringList lines{QString("GPU Lab %1").arg(GPULAB_VERSION), QString("Qt %1 (built with %2)").arg(qVersion(), QT_VERSION_STR)};
  const cuda::Availability a = cuda::availability();
  if (!a.compiled) {
    lines << "CUDA: not built with CUDA (this build runs on the CPU)";
    return lines;
  }
  auto version = [](int v, const QString& text) { return v ? text : QString("not available"); };
  lines << "CUDA runtime: " + version(a.runtime_version, QString::fromStdString(cuda::versionString(a.runtime_version)))
        << "CUDA driver: " + version(a.driver_version, QString::fromStdString(cuda::versionString(a.driver_version)))
        << "cuBLAS: " + version(a.cublas_version, threePart(a.cublas_version, 10000))
        << "cuDNN: " + version(a.cudnn_version, cudnnVersion(a.cudnn_version));
  if (!a.usable) {
    lines << "GPU: no GPU: " + QString::fromStdString(a.reason);
  } else {
    for (const auto& d : a.devices) {
      lines << QString("GPU cuda:%1: %2 (compute capability %3.%4, %5)")
                   .arg(d.index)
                   .arg(QString::fromStdString(d.name))
                   .arg(d.major)
                   .arg(d.minor)
                   .arg(QString::fromStdString(formatBytes(static_cast<std::int64_t>(d.total_memory))));
    }
  }
  return lines;
}

QDialog* MainWindow::showAbout() {
  if (!about_) {
    about_ = new QDialog(this);
    about_->setObjectName("aboutDialog");
    about_->setWindowTitle("About GPU Lab");
    auto* v = new QVBoxLayout(about_);
    auto* title = new QLabel("<h2>GPU Lab</h2><p>Interactive lessons on GPU acceleration for deep learning.</p>", about_);
    v->addWidget(title);
    auto* versions = new QLabel(about_);
    versions->setObjectName("aboutVersions");
    versions->setTextFormat(Qt::PlainText);
    versions->setTextInteractionFlags(Qt::TextSelectableByMouse);  // for bug reports
    versions->setWordWrap(true);
    v->addWidget(versions);
    v->addWidget(new QLabel("Licensed under the GNU GPL, version 3 or later.", about_));
    auto* buttons = new QDialogButtonBox(QDialogButtonBox::Close, about_);
    connect(buttons, &QDialogButtonBox::rejected, about_, &QDialog::close);
    v->addWidget(buttons);
  }
  about_->findChild<QLabel*>("aboutVersions")->setText(versionReport().join('\n'));
  about_->show();
  about_->raise();
  about_->activateWindow();
  return about_;
}

}  // namespace gpulab::app
