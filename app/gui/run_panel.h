#pragma once
// The run area: which run block of the lesson, the parameters it exposes as proper controls (their
// tooltips give the lab's allowed ranges; a text parameter with suggestions is a choice of them),
// Run / Pause / Stop / Reset, a progress bar that follows the lab's Progress updates, and the
// console. The console shows, in the order the lab sent them, its messages (engine errors in red,
// warnings in amber), its measurements and the rows of its tables, so a number never shows before
// the rows it follows; the run panel knows nothing of any particular lab.
#include <QWidget>
#include <map>
#include <string>

#include "app/course/lesson.h"
#include "app/gui/lab_runner.h"

class QComboBox;
class QFormLayout;
class QProgressBar;
class QPushButton;
class QTextEdit;
class QScrollArea;
class QLabel;

namespace gpulab::app {

class RunPanel final : public QWidget {
  Q_OBJECT

 public:
  explicit RunPanel(QWidget* parent = nullptr);

  void setLesson(const course::Lesson* lesson);
  int currentRun() const;
  void selectRun(int index);
  // The settings of the selected run block: its presets, overridden by the controls.
  std::map<std::string, std::string> settings() const;
  // Sets an exposed parameter's control (what a learner would type); false if not exposed.
  bool setParameter(const QString& name, const QString& value);

  void setRunning(bool running, bool paused);
  void appendBatch(const MetricBatch& batch);
  // The run ended: "Done.", "Stopped." or the error that failed it.
  void finishRun(const QString& error, bool stopped);
  void appendError(const QString& text);
  void appendInfo(const QString& text);
  // A run starts: the console shows its output as it comes, until the learner scrolls up to read.
  void beginRunOutput();
  QString consoleText() const;
  int progressValue() const;  // of 1000
  QString progressLabel() const;
  // The control of an exposed parameter (nullptr when it is not exposed).
  QWidget* parameterControl(const QString& name) const;

  QPushButton* runButton() const { return run_; }
  QPushButton* pauseButton() const { return pause_; }
  QPushButton* stopButton() const { return stop_; }
  QPushButton* resetButton() const { return reset_; }

 signals:
  void runClicked();
  void pauseClicked();
  void stopClicked();
  void resetClicked();
  void runSelected(int index);

 private:
  void rebuildControls();
  void append(const QString& html);
  const course::Lesson* lesson_ = nullptr;
  QComboBox* runs_;
  QFormLayout* form_;
  QWidget* formHost_;
  QScrollArea* formScroll_;
  bool followOutput_ = true;
  QPushButton *run_, *pause_, *stop_, *reset_;
  QProgressBar* progress_;
  QLabel* progressLabel_;
  QTextEdit* console_;
  QLabel* hint_;
  std::map<QString, QWidget*> controls_;
  std::map<std::string, lab::ViewSpec> views_;  // the running lab's views: its table rows' columns
  std::map<std::string, int> rowsShown_;         // rows of each table printed so far
};

}  // namespace gpulab::app
