#pragma once
// The lesson page: the lesson's text with its code cells in place, as one column that scrolls under
// a bar that says where the cells run. Each
// stretch of Markdown between two ```python blocks is a text view as tall as its text; each block is a
// CodeCell (code_cell.h) the learner edits and runs. The cells of the page share one Python session
// (NotebookSession), started by the first Run, on the device chosen above the text: this machine as
// it is, or with the emulated GPU as cuda:0 (the default without a usable GPU).
//
// The learner's edits are kept in the progress file (per lesson, per cell), written when they pause
// typing and when the lesson changes; Reset brings back the lesson's code and forgets the edit.
// Where the cells run is kept per lesson in the session settings (setSettings, lesson_settings.h).
//
// The cells run in a working folder of the lesson's own, <working root>/<lesson id> (MainWindow: under
// the user's data folder), shown in the bar above the text as a notebook's folder is: what they write
// (a checkpoint, a profiler's trace.json) lands there, not where the program was started.
//
// Lessons read from a folder outside the program (--lessons DIR) can carry code: a banner says that
// their code runs on this machine, once per folder (dismissed for good with "Understood"). Nothing
// runs before the learner presses Run.
//
// The text is parsed off the GUI thread (see MainWindow::showLesson): Qt's Markdown import of a large
// paragraph is slow, and the page shows "Loading" meanwhile.
#include <QPointer>
#include <QScrollArea>
#include <QString>
#include <QTimer>
#include <QUrl>
#include <QVector>
#include <memory>
#include <vector>

#include "app/course/challenge.h"
#include "app/course/lesson.h"
#include "app/course/progress_store.h"
#include "app/gui/code_cell.h"
#include "app/gui/warning_banner.h"
#include "app/notebook/machine_runs.h"

class QComboBox;
class QFrame;
class QLabel;
class QPushButton;
class QSettings;
class QTextBrowser;
class QTextDocument;
class QThread;
class QVBoxLayout;

namespace gpulab::app {

class ExercisePanel;

// Links in the lesson text: gpulab-run:2 selects run block 2.
inline constexpr QLatin1String kRunLinkScheme("gpulab-run");

class LessonPage final : public QWidget {
  Q_OBJECT

 public:
  explicit LessonPage(course::ProgressStore& progress, QWidget* parent = nullptr);
  ~LessonPage() override;

  // Shows `lesson`, its text with `linkRunMarkers` applied; the previous lesson's session ends and
  // its unsaved edits are saved. textShown() follows once the text is in place (at once for an
  // ordinary lesson). A lesson that failed to load shows its error.
  void setLesson(const course::Lesson& lesson);
  bool loading() const { return loading_; }
  // Lessons from this folder carry code from outside the program (empty: the embedded lessons).
  void setExternalFolder(const QString& folder, bool acknowledged);
  // Where the lessons' working folders are: <root>/<lesson id>, created when a session starts (empty,
  // the default: the cells run in the program's own working folder). For the next lesson shown.
  void setWorkingRoot(const QString& root) { workingRoot_ = root; }
  // Where the "Code runs on" choice is kept, per lesson: "lessons/<id>/cellsOnEmulatedGpu" (nullptr,
  // the default: nowhere; every lesson opens on the default). For the next lesson shown.
  void setSettings(QSettings* settings) { settings_ = settings; }
  static constexpr QLatin1String kDeviceSetting{"cellsOnEmulatedGpu"};
  // The folder the shown lesson's cells run in (empty without a working root).
  QString workingFolder() const { return session_.workingDirectory(); }

  // What the page shows, as plain text: the texts and the cells' code, in order.
  QString plainText() const;
  QVector<QTextBrowser*> textViews() const;
  QVector<CodeCell*> cells() const;
  // The exercises' panels, in the lesson's order (under their cells).
  QVector<ExercisePanel*> exercisePanels() const { return panels_; }
  NotebookSession& session() { return session_; }
  QScrollArea* scrollArea() const { return scroll_; }
  QFrame* sessionBar() const { return sessionBar_; }
  QComboBox* deviceChoice() const { return device_; }
  QLabel* sessionState() const { return state_; }
  QLabel* workingFolderLabel() const { return folder_; }
  WarningBanner* externalCodeBanner() const { return external_; }
  // A problem with what cell `cellId` sent (a lab protocol update the window refused), under the cell
  // as its error output.
  void showCellProblem(const QString& cellId, const QString& text);
  // Runs cell `index` (from 0), as its Run button does, scrolled into view; false without such a cell.
  bool runCell(int index);
  // Writes the edits typed since the last save (the page does it by itself after a pause).
  void saveEdits();
  // A lesson's Markdown with each run marker a link that selects its run block.
  static QString linkRunMarkers(const QString& markdown);

 signals:
  void linkActivated(const QUrl& url);
  void textShown(const QString& lessonId);
  // "Understood" on the banner about this folder's code.
  void externalCodeAcknowledged(const QString& folder);
  // A run of exercise `exercise` (from 0) met it; the progress file already says so.
  void exerciseMet(const QString& lessonId, int exercise);

 private:
  void clearContent();
  void installTexts(std::vector<std::unique_ptr<QTextDocument>> docs);
  QTextBrowser* addTextView();
  void nameTextView(QTextBrowser* view);
  void orderFocus();  // its accessible name and description, from its text
  void showSessionState(const QString& text);
  void showWorkingFolder(const QString& folder);
  void updateExternalBanner();  // shown for a lesson with cells from a folder not yet acknowledged
  void gradeExercise(const QString& cellId, const notebook::CellResult& result);
  // An exercise graded on its machines (course::Exercise::machines): the learner's code in a fresh
  // session on each, one after another, then the grade.
  void gradeOnMachines(int exercise, int cellIndex);
  void showMachinesGrade(const QVector<notebook::CellResult>& results);
  // The grade in the exercise's panel (its bank's hint unless `code` is the starter as given), and the
  // progress it earns.
  void showGrade(int exercise, const course::ChallengeResult& graded, const QString& code);
  void restoreDeviceChoice();  // the shown lesson's, or the default
  int defaultDeviceIndex() const;

  course::ProgressStore& progress_;
  QScrollArea* scroll_;
  QWidget* column_;
  QVBoxLayout* layout_;
  QFrame* sessionBar_;
  QComboBox* device_;
  QPushButton* restart_;
  QLabel* state_;
  QLabel* folder_;  // the cells' working folder, a link that opens it
  QString workingRoot_;
  QSettings* settings_ = nullptr;
  bool restoringDevice_ = false;  // the choice is being set from the settings, not by the learner
  WarningBanner* external_;
  QString externalFolder_;
  bool externalAcknowledged_ = false;
  QVector<QTextBrowser*> texts_;
  QVector<CodeCell*> cells_;
  QVector<ExercisePanel*> panels_;
  bool sessionHasCuda_ = false;  // the running session's cuda:0 exists (real or emulated)
  NotebookSession session_;
  notebook::MachineRuns machineRuns_;
  int machinesExercise_ = -1;  // the exercise machineRuns_ grades
  QString machinesCode_;       // the code it grades
  // The lesson shown (none: an empty id): its code for the saved edits, its exercises for grading,
  // its text to know it again.
  course::Lesson lesson_;
  QTimer saveDelay_;
  QVector<int> unsaved_;               // cells edited since the last save
  std::vector<QPointer<QThread>> threads_;  // texts being parsed; joined on destruction
  int generation_ = 0;                      // the newest request; older results are dropped
  bool loading_ = false;
};

}  // namespace gpulab::app
