#pragma once
// The run area: which run block of the lesson, the parameters it exposes as proper controls (their
// tooltips give the lab's allowed ranges; a text parameter with suggestions is a choice of them),
// Run / Pause / Stop / Reset, a progress bar that follows the lab's Progress updates, and the
// console. The console shows, in the order the lab sent them, its messages (engine errors in red,
// warnings in amber), its measurements and the rows of its tables, so a number never shows before
// the rows it follows; the run panel knows nothing of any particular lab.
//
// The challenge box, under the parameters: the selected run block's challenge (lesson.h) in its own
// words, "met" once a run met it; after a graded run, each check's line (what was measured against
// what was asked), green when the run met it. The grading is the main window's (course::grade).
//
// The learner's parameter values are kept (setSettings): per lesson and run block, only those that
// differ from the lesson's, so a lesson opened again -- after a restart too -- shows what the learner
// left there. A kept value the parameter would refuse (a malformed file, a lesson that changed its
// range) is dropped and the lesson's value shown. Reset forgets them.
#include <QElapsedTimer>
#include <QTimer>
#include <QWidget>
#include <map>
#include <optional>
#include <string>

#include "app/course/challenge.h"
#include "app/course/lesson.h"
#include "app/gui/lab_runner.h"

class QComboBox;
class QFormLayout;
class QProgressBar;
class QPushButton;
class QTextEdit;
class QScrollArea;
class QLabel;
class QFrame;
class QAction;
class QHBoxLayout;
class QSettings;

namespace gpulab::app {

class RunPanel final : public QWidget {
  Q_OBJECT

 public:
  explicit RunPanel(QWidget* parent = nullptr);

  void setLesson(const course::Lesson* lesson);
  // Where the learner's parameter values are kept: "lessons/<lesson id>/run<N>/<parameter>" (N from
  // 0); nullptr (the default): nowhere. Applies from the next run block shown.
  void setSettings(QSettings* settings) { settings_ = settings; }
  int currentRun() const;
  int runCount() const;
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
  // The selected run block's challenge (nullptr: it has none, and the box hides), and whether a run
  // met it before.
  void showChallenge(const course::Challenge* challenge, bool met);
  // The grade of the run that just ended: its lines in the console and in the box (green when met).
  // `metBefore`: an earlier run met it (the box says so when this one did not).
  void showChallengeResult(const course::ChallengeResult& result, bool metBefore);
  // The run ended without finishing (stopped or failed): it is not graded, and the box says why.
  void showChallengeNotGraded(const QString& why);
  // An action about the run that ended (the main window's memory history export), as a button beside
  // the progress bar.
  void addRunAction(QAction* action);
  QFrame* challengeBox() const { return challengeBox_; }
  QString challengeText() const;  // the box's text, plain
  bool challengeShownMet() const { return challengeMet_; }  // the box is green

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

 protected:
  void changeEvent(QEvent* event) override;  // the desktop's palette changed: the challenge box's tint

 private:
  void rebuildControls();
  QString controlValue(const QWidget* w) const;  // as settings() gives it
  QString settingsGroup() const;                 // of the selected run block; empty without one
  void keepParameter(const QString& name);
  void append(const QString& html);
  void setChallengeLook(bool met);
  const course::Lesson* lesson_ = nullptr;
  QComboBox* runs_;
  QFormLayout* form_;
  QWidget* formHost_;
  QScrollArea* formScroll_;
  bool followOutput_ = true;
  QPushButton *run_, *pause_, *stop_, *reset_;
  QProgressBar* progress_;
  QHBoxLayout* progressRow_;
  QLabel* progressLabel_;
  // The lab's progress is shown at most every kProgressIntervalMs: a fast run reports it in every
  // batch (~30 a second), and each new label re-shaped its text and re-laid out the panel, and each
  // new bar value repainted the bar at once (QProgressBar::setValue) -- a quarter of what the GUI
  // thread did while a run streamed. The latest progress is always shown, at most that much later.
  static constexpr int kProgressIntervalMs = 200;
  std::optional<lab::Progress> pendingProgress_;
  QTimer progressDelay_;
  QElapsedTimer progressShown_;
  void showProgressSoon(const lab::Progress& progress);
  void showPendingProgress();
  void resetProgress(int maximum);
  QTextEdit* console_;
  QLabel* hint_;
  QFrame* challengeBox_;
  QLabel* challenge_;
  bool challengeMet_ = false;
  std::map<QString, QWidget*> controls_;
  std::map<QString, QString> presets_;  // each control's value as the lesson sets it
  QSettings* settings_ = nullptr;
  std::map<std::string, lab::ViewSpec> views_;  // the running lab's views: its table rows' columns
  std::map<std::string, int> rowsShown_;         // rows of each table printed so far
};

}  // namespace gpulab::app
