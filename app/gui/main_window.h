#pragma once
// The lesson player: a navigator of chapters and lessons (with completion marks), the lesson page
// (the text with its PyTorch code, the lab's real source, the quiz), the run area, and live plots.
#include <QFileSystemWatcher>
#include <QMainWindow>
#include <QPointer>
#include <QTimer>
#include <map>
#include <memory>
#include <optional>
#include <vector>

#include "app/course/course.h"
#include "app/course/progress_store.h"
#include "app/course/reference_runs.h"
#include "app/gui/lab_runner.h"

class QTreeWidget;
class QTextBrowser;
class QPlainTextEdit;
class QTabWidget;
class QLabel;
class QDialog;
class QFrame;
class QTextDocument;
class QThread;

namespace gpulab::app {

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
  bool lessonLoading() const { return lessonLoading_; }
  const course::Course& course() const { return course_; }
  RunPanel* runPanel() const { return runPanel_; }
  PlotPanel* plotPanel() const { return plots_; }
  QuizWidget* quiz() const { return quiz_; }
  QTextBrowser* lessonView() const { return lessonView_; }
  QPlainTextEdit* codeView() const { return codeView_; }
  QTreeWidget* navigator() const { return navigator_; }
  LabRunner& runner() { return runner_; }
  // Where the lessons' reference runs (recorded on a real GPU) are read from: the embedded ones by
  // default, a folder of <lesson-id>.jsonl files for tests and for checking a new recording.
  void setReferenceRunsRoot(const QString& root);
  void startRun();
  void stopRun();
  // Help > About: GPU Lab's version and the versions of what it runs on (Qt, CUDA runtime and driver,
  // cuBLAS, cuDNN, as the engine reports them), or why there is no GPU. Non-modal; returns the dialog.
  QDialog* showAbout();
  // The lines the About dialog shows, as plain text ("GPU Lab 0.1.0", "Qt 6.4.2", "CUDA: ...").
  static QStringList versionReport();
  // The window's size when it opens on a screen with `available` room: 1280x800 at most, with room
  // for a window manager's frame and title bar (kFrameAllowance).
  static constexpr QSize kFrameAllowance{16, 48};
  static QSize initialSize(const QSize& available);
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
  void showLessonText(const course::Lesson& lesson);
  void installLessonText(QTextDocument* doc);
  void showRunSource();
  void stepLesson(int delta);
  void onAnswered();
  void showProgressProblem();
  void showReference();  // offers the recording of the selected run block, if there is one
  const course::ReferenceRuns* referenceRuns(const course::Lesson& lesson);

  QString root_;
  course::Course course_;
  course::ProgressStore progress_;
  QString currentId_;
  QTreeWidget* navigator_;
  QTabWidget* pageTabs_;
  QTextBrowser* lessonView_;
  QPlainTextEdit* codeView_;
  QuizWidget* quiz_;
  RunPanel* runPanel_;
  PlotPanel* plots_;
  QLabel* runState_;
  QLabel* runDevice_;  // where the last run computes, as its lab says ("cuda:0 (emulated GPU — ...)")
  QFrame* progressBanner_;
  QLabel* progressNotice_;
  QDialog* about_ = nullptr;
  std::vector<QPointer<QThread>> textThreads_;  // lesson texts being parsed; joined on destruction
  int textGeneration_ = 0;                      // the newest request; older results are dropped
  bool lessonLoading_ = false;
  LabRunner runner_;
  QFileSystemWatcher watcher_;
  QTimer reloadDelay_;
  QString referenceRoot_ = course::kEmbeddedReferenceRoot;
  std::map<QString, std::optional<course::ReferenceRuns>> references_;  // by lesson id, read once
};

}  // namespace gpulab::app
