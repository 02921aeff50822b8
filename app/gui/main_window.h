#pragma once
// The lesson player: a navigator of chapters and lessons (with completion marks), the lesson page
// (the text with its PyTorch code, the lab's real source, the quiz), the run area, and live plots.
#include <QFileSystemWatcher>
#include <QMainWindow>
#include <QTimer>
#include <map>
#include <memory>
#include <optional>

#include "app/course/course.h"
#include "app/course/progress_store.h"
#include "app/course/reference_runs.h"
#include "app/gui/lab_runner.h"

class QTreeWidget;
class QTextBrowser;
class QPlainTextEdit;
class QTabWidget;
class QLabel;

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

 signals:
  void runFinished(const QString& error);

 protected:
  void closeEvent(QCloseEvent* event) override;

 private:
  void loadCourse();
  void rebuildNavigator();
  void showLesson(const course::Lesson* lesson);
  void showRunSource();
  void stepLesson(int delta);
  void onAnswered();
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
  LabRunner runner_;
  QFileSystemWatcher watcher_;
  QTimer reloadDelay_;
  QString referenceRoot_ = course::kEmbeddedReferenceRoot;
  std::map<QString, std::optional<course::ReferenceRuns>> references_;  // by lesson id, read once
};

}  // namespace gpulab::app
