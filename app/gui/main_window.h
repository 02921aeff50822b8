#pragma once
// The lesson player: a navigator of chapters and lessons (with completion marks), the lesson page
// (the text with its code cells, lesson_page.h; the lab's real source; the quiz), the run area, and
// live plots -- of the lab's runs, and of the code cells' runs (what they log, cuda:0's memory).
//
// Completion: a lesson is complete when every quiz is answered correctly, every run block's challenge
// and every code exercise has been met (a lesson with none of them is never marked). A challenge is graded when a run of
// its block ends normally -- a stopped or failed run is not graded; a run that shows an engine error
// on purpose ends normally -- from the measurements of that run, in arrival order (course::grade).
//
// The welcome page (Go > Course map, Alt+Home): what GPU Lab is, this machine's GPU or the emulated
// one standing in, and the course map with each lesson's completion and challenges. The first
// launch starts there; later ones reopen the last lesson and run block, kept in the session
// settings: the app's QSettings, or, when the progress file is given (tests, portable use), a
// "<progress name>-session.ini" beside it.
//
// Links in the lesson text: a run marker ("▶ Run N: title") selects run block N; web links open in
// the browser.
#include <QFileSystemWatcher>
#include <QMainWindow>
#include <QPointer>
#include <QSettings>
#include <QTimer>
#include <QUrl>
#include <map>
#include <memory>
#include <optional>
#include <vector>

#include "app/course/course.h"
#include "app/course/progress_store.h"
#include "app/course/reference_runs.h"
#include "app/gui/lab_runner.h"
#include "app/gui/warning_banner.h"

class QTreeWidget;
class QTextBrowser;
class QPlainTextEdit;
class QSyntaxHighlighter;
class QTabWidget;
class QLabel;
class QDialog;
class QFrame;
class QTextDocument;
class QThread;
class QStackedWidget;
class QPushButton;
class QAction;
class QSplitter;

namespace gpulab::app {

class LessonPage;
class RunPanel;
class PlotPanel;
class QuizWidget;

class MainWindow final : public QMainWindow {
  Q_OBJECT

 public:
  // lessonsRoot: the embedded lessons, or a folder (then reloaded when its files change).
  explicit MainWindow(const QString& lessonsRoot = course::kEmbeddedRoot, const QString& progressPath = {},
                      QWidget* parent = nullptr);
  ~MainWindow() override;

  bool selectLesson(const QString& id);
  QString currentLessonId() const { return currentId_; }
  // True while the selected lesson's text is still being prepared (a large lesson; see showLesson).
  bool lessonLoading() const;
  const course::Course& course() const { return course_; }
  RunPanel* runPanel() const { return runPanel_; }
  PlotPanel* plotPanel() const { return plots_; }  // the runs' views
  PlotPanel* cellPlotPanel() const { return cellPlots_; }  // the code cells' views
  QTabWidget* viewPanels() const { return viewPanels_; }   // the two, one in front
  QuizWidget* quiz() const { return quiz_; }
  // The lesson's text with its code cells.
  LessonPage* lessonPage() const { return lesson_; }
  QPlainTextEdit* codeView() const { return codeView_; }
  QTabWidget* pageTabs() const { return pageTabs_; }
  QTreeWidget* navigator() const { return navigator_; }
  LabRunner& runner() { return runner_; }
  // Where the lessons' reference runs (recorded on a real GPU) are read from: the embedded ones by
  // default, a folder of <lesson-id>.jsonl files for tests and for checking a new recording.
  void setReferenceRunsRoot(const QString& root);
  void startRun();
  void stopRun();

  // The welcome page with the course map; selecting a lesson leaves it.
  void showWelcome();
  bool welcomeShown() const;
  QTextBrowser* welcomeView() const { return welcome_; }
  // Every quiz answered correctly, every run block's challenge and every exercise met (see above).
  bool lessonComplete(const course::Lesson& lesson) const;
  // Go > Next lesson (Alt+Down), and its button under the lesson page: prominent once the lesson
  // is complete.
  QAction* nextLessonAction() const { return nextAction_; }
  QPushButton* nextLessonButton() const { return nextButton_; }
  QAction* courseMapAction() const { return homeAction_; }
  // Follows a link of the lesson text or of the welcome page (gpulab-run:N, gpulab-lesson:ID, web).
  void openLink(const QUrl& url);
  // File > Export memory history: the last ended run's, as a PyTorch snapshot (.pickle); disabled
  // until a run has ended. Asks for the file name as the plot exports do (PlotPanel's provider).
  QAction* exportMemoryHistoryAction() const { return exportHistory_; }
  QAction* recordMemoryHistoryAction() const { return recordHistory_; }
  bool exportMemoryHistory(const QString& path) const;
  // Where the last lesson and run block are remembered, and what each lesson keeps between visits
  // (lesson_settings.h): its run parameters, where its cells run, "Compare with a real GPU"; and where
  // the splitters are (window/<splitter name>).
  QString sessionFile() const { return session_->fileName(); }
  static constexpr QLatin1String kCompareSetting{"compareWithRealGpu"};
  // Help > About: GPU Lab's version and the versions of what it runs on (Qt, CUDA runtime and driver,
  // cuBLAS, cuDNN, as the engine reports them), or why there is no GPU. Non-modal; returns the dialog.
  QDialog* showAbout();
  // The lines the About dialog shows, as plain text ("GPU Lab 0.1.0", "Qt 6.4.2", "CUDA: ...").
  static QStringList versionReport();
  // The window's size when it opens on a screen with `available` room: 1280x800 at most, with room
  // for a window manager's frame and title bar (kFrameAllowance).
  static constexpr QSize kFrameAllowance{16, 48};
  static QSize initialSize(const QSize& available);
  // Whether the window opens maximized on a screen with `available` room: on one that 1280x800 and a
  // frame do not fit in (a laptop's 1280x800 or 1366x768), every pixel is wanted (issue 27 §4: it
  // opened at 1264x752 on a 1280x800 screen).
  static bool opensMaximized(const QSize& available);
  // Shows the window as it should open on its screen: maximized there, or at initialSize.
  void showInitially();
  // The banner above the lesson that tells the learner about a problem with the progress file (a
  // corrupt file kept aside, an unreadable one, a failed save); hidden when there is none.
  QLabel* progressNotice() const { return progressNotice_; }
  // The status bar's label of the device the running (or last) lab computes on.
  QLabel* runDeviceLabel() const { return runDevice_; }

 signals:
  void runFinished(const QString& error);
  // The selected lesson's text is in the lesson view.
  void lessonTextShown(const QString& id);

 protected:
  void closeEvent(QCloseEvent* event) override;

 private:
  void loadCourse();
  void rebuildNavigator();
  void showLesson(const course::Lesson* lesson);
  void showRunSource();
  void stepLesson(int delta);
  void onAnswered();
  void restoreSession();
  void showChallenge();  // the selected run block's, in the run area
  void gradeRun(const QString& error);
  void updateCompletion(const QString& id);
  void updateNextLesson();
  QString courseMapHtml() const;
  void askExportMemoryHistory();
  void showProgressProblem();
  void saveSplitters();
  static QString splitterKey(const QSplitter* splitter);
  void showReference();  // offers the recording of the selected run block, if there is one
  const course::ReferenceRuns* referenceRuns(const course::Lesson& lesson);

  QString root_;
  course::Course course_;
  course::ProgressStore progress_;
  QString currentId_;
  QTreeWidget* navigator_;
  QTabWidget* pageTabs_;
  QStackedWidget* pages_;  // the welcome page or the lesson
  QTextBrowser* welcome_;
  QWidget* lessonScreen_;  // the lesson's tabs and the way on
  QPushButton* nextButton_;
  QAction* nextAction_;
  QAction* homeAction_;
  QAction* exportHistory_;
  QAction* recordHistory_ = nullptr;
  QByteArray memoryHistory_;  // the last ended run's, pickled
  std::unique_ptr<QSettings> session_;
  std::vector<QSplitter*> splitters_;  // the window's: lesson | views, and views / run area
  // The run going on (or the last): its lesson, run block and measurements, for its challenge.
  QString runLesson_;
  int runBlock_ = -1;
  std::vector<lab::Measurement> runMeasurements_;
  LessonPage* lesson_;
  QPlainTextEdit* codeView_;
  QSyntaxHighlighter* codeHighlighter_;
  QuizWidget* quiz_;
  RunPanel* runPanel_;
  PlotPanel* plots_;
  PlotPanel* cellPlots_;
  QTabWidget* viewPanels_;
  QLabel* runState_;
  QString viewsLesson_;  // the lesson whose runs the plots show (empty: none)
  QLabel* runDevice_;  // where the last run computes, as its lab says ("cuda:0 (emulated GPU — ...)")
  WarningBanner* progressBanner_;
  QLabel* progressNotice_;
  QDialog* about_ = nullptr;
  LabRunner runner_;
  QFileSystemWatcher watcher_;
  QTimer reloadDelay_;
  QString referenceRoot_ = course::kEmbeddedReferenceRoot;
  std::map<QString, std::optional<course::ReferenceRuns>> references_;  // by lesson id, read once
};

}  // namespace gpulab::app
