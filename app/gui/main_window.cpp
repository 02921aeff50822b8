#include "app/gui/main_window.h"

#include <QCloseEvent>
#include <QDeadlineTimer>
#include <QDialog>
#include <QDialogButtonBox>
#include <QFontDatabase>
#include <QFrame>
#include <QHBoxLayout>
#include <QHeaderView>
#include <QLabel>
#include <QMenu>
#include <QMenuBar>
#include <QPlainTextEdit>
#include <QScreen>
#include <QShortcut>
#include <QSplitter>
#include <QStatusBar>
#include <QTabWidget>
#include <QTextBrowser>
#include <QTextDocument>
#include <QThread>
#include <QToolButton>
#include <QTreeWidget>
#include <QVBoxLayout>
#include <algorithm>

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
  // Half each: in a 1280x800 window the run panel then shows a run's parameters in full.
  right->setStretchFactor(0, 1);
  right->setStretchFactor(1, 1);

  // A banner above the lesson for problems with the progress file: the learner must see them.
  progressBanner_ = new QFrame;
  progressBanner_->setObjectName("progressBanner");
  progressBanner_->setStyleSheet("#progressBanner { background: #fff4ce; border: 1px solid #e0b000; border-radius: 3px; }");
  progressNotice_ = new QLabel;
  progressNotice_->setObjectName("progressNotice");
  progressNotice_->setWordWrap(true);
  progressNotice_->setTextFormat(Qt::PlainText);
  progressNotice_->setTextInteractionFlags(Qt::TextSelectableByMouse);  // the path can be copied
  auto* dismiss = new QToolButton;
  dismiss->setText("✕");
  dismiss->setToolTip("Hide this message");
  dismiss->setAutoRaise(true);
  auto* bannerLayout = new QHBoxLayout(progressBanner_);
  bannerLayout->setContentsMargins(8, 4, 4, 4);
  bannerLayout->addWidget(new QLabel("⚠"), 0, Qt::AlignTop);
  bannerLayout->addWidget(progressNotice_, 1);
  bannerLayout->addWidget(dismiss, 0, Qt::AlignTop);
  progressBanner_->hide();
  connect(dismiss, &QToolButton::clicked, progressBanner_, &QWidget::hide);
  auto* page = new QWidget;
  auto* pageLayout = new QVBoxLayout(page);
  pageLayout->setContentsMargins(0, 0, 0, 0);
  pageLayout->setSpacing(4);
  pageLayout->addWidget(progressBanner_);
  pageLayout->addWidget(pageTabs_, 1);

  auto* main = new QSplitter(Qt::Horizontal);
  main->addWidget(navigator_);
  main->addWidget(page);
  main->addWidget(right);
  main->setSizes({230, 460, 580});
  main->setStretchFactor(1, 1);
  main->setStretchFactor(2, 1);
  setCentralWidget(main);

  runState_ = new QLabel("idle");
  statusBar()->addPermanentWidget(runState_);
  // A widget, not showMessage(): a temporary message is cleared by any status tip (hovering the menu).
  auto* device = new QLabel(deviceStatus());
  device->setObjectName("deviceStatus");
  statusBar()->addWidget(device, 1);
  runDevice_ = new QLabel;
  runDevice_->setObjectName("runDevice");
  runDevice_->setToolTip("Where the run computes, as the lab reports it");
  statusBar()->addWidget(runDevice_);

  QMenu* help = menuBar()->addMenu("&Help");
  QAction* about = help->addAction("&About GPU Lab", this, &MainWindow::showAbout);
  about->setObjectName("aboutAction");
  about->setMenuRole(QAction::AboutRole);

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
  connect(runPanel_, &RunPanel::resetClicked, plots_, &PlotPanel::clearRuns);
  connect(plots_, &PlotPanel::statusMessage, this, [this](const QString& text) { statusBar()->showMessage(text, 15000); });
  connect(runPanel_, &RunPanel::runSelected, this, [this] {
    showRunSource();
    showReference();
  });
  connect(&runner_, &LabRunner::batchReady, this, [this](const MetricBatch& b) {
    for (const lab::Update& u : b.updates)
      if (const auto* d = std::get_if<lab::RunDevice>(&u)) runDevice_->setText("Run on " + QString::fromStdString(d->label.empty() ? d->device : d->label));
    plots_->addBatch(b);
    runPanel_->appendBatch(b);
  });
  connect(&runner_, &LabRunner::finished, this, [this](const QString& error) {
    runPanel_->setRunning(false, false);
    runState_->setText(error.isEmpty() ? "idle" : "failed");
    runPanel_->finishRun(error, runner_.stopRequested());
    plots_->endRun(error);  // a failed run loses its legend entries
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
  showProgressProblem();
  resize(initialSize(screen() ? screen()->availableGeometry().size() : QSize(1280, 800)));
}

QSize MainWindow::initialSize(const QSize& available) {
  // 1280x800, or less: the whole window, with a window manager's frame and title bar, on the screen.
  return QSize(1280, 800).boundedTo(available - kFrameAllowance);
}

MainWindow::~MainWindow() {
  for (const QPointer<QThread>& t : textThreads_)
    if (t) t->wait();  // a parse is bounded by the lesson caps (course/lesson.h)
}

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
  ++textGeneration_;
  lessonLoading_ = false;
  if (lesson->ok()) {
    showLessonText(*lesson);
  } else {
    lessonView_->setHtml("<h2>" + lesson->title.toHtmlEscaped() + "</h2><p style='color:#d62728'><b>This lesson could not be loaded:</b><br>" +
                         lesson->error.toHtmlEscaped() + "</p><p>The other lessons work as usual.</p>");
    emit lessonTextShown(lesson->id);
  }
  runPanel_->setLesson(lesson->ok() ? lesson : nullptr);
  quiz_->setLesson(lesson->ok() ? lesson : nullptr);
  showRunSource();
  showReference();
  pageTabs_->setCurrentIndex(0);
}

// Qt's Markdown import costs time that grows with the square of a paragraph's length (every piece it
// inserts -- a soft line break, a `code` or **bold** span -- re-examines the paragraph so far), and
// on the view's own document it would also lay the paragraph out again each time: a 256 KiB paragraph
// took 14 s. So: lesson files are capped (course/lesson.h), the text is parsed into a document of its
// own on a short-lived thread (QTextDocument is reentrant), and the GUI thread only lays it out. It
// waits for the parse up to half a frame budget, so an ordinary lesson (a few KiB, a few ms) shows at
// once; a larger one shows "Loading" until it is ready, with the window responsive meanwhile.
void MainWindow::showLessonText(const course::Lesson& lesson) {
  constexpr int kWaitMs = 50;  // half a frame budget: the layout that follows needs the rest
  const int generation = textGeneration_;
  auto result = std::make_shared<std::unique_ptr<QTextDocument>>();
  QThread* gui = thread();
  QThread* worker = QThread::create([result, markdown = lesson.markdown, font = lessonView_->font(),
                                     margin = lessonView_->document()->documentMargin(), gui] {
    auto doc = std::make_unique<QTextDocument>();
    doc->setDefaultFont(font);
    doc->setDocumentMargin(margin);
    doc->setMarkdown(markdown);
    doc->moveToThread(gui);
    *result = std::move(doc);
  });
  worker->setParent(this);
  textThreads_.erase(std::remove_if(textThreads_.begin(), textThreads_.end(), [](const QPointer<QThread>& t) { return t.isNull(); }),
                     textThreads_.end());
  textThreads_.emplace_back(worker);
  const QString id = lesson.id;
  connect(worker, &QThread::finished, this, [this, worker, result, generation, id] {
    worker->deleteLater();
    if (*result && generation == textGeneration_) {
      installLessonText(result->release());
      emit lessonTextShown(id);
    }
    result->reset();  // a result nobody wants any more is deleted here, on the GUI thread
  });
  worker->start();
  if (worker->wait(QDeadlineTimer(kWaitMs)) && *result) {
    installLessonText(result->release());
    emit lessonTextShown(id);
    return;
  }
  lessonLoading_ = true;
  lessonView_->setHtml("<h2>" + lesson.title.toHtmlEscaped() + "</h2><p><i>Loading the lesson…</i></p>");
}

void MainWindow::installLessonText(QTextDocument* doc) {
  doc->setParent(lessonView_);  // the view deletes a document it parents when it is replaced
  lessonView_->setDocument(doc);
  lessonLoading_ = false;
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
  plots_->beginRun(settings);  // overlaid runs are named by the settings that differ
  runDevice_->clear();
  runPanel_->setRunning(true, false);
  runPanel_->beginRunOutput();
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
  showProgressProblem();
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
