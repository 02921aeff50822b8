// gpulab: the desktop app. Options: --lessons DIR (read lessons from a folder and reload them on
// change), --open ID (start on a lesson), --run (start its first run at once; for screenshots),
// --quit-when-shown (for timing start-up), --reference-runs DIR (read the reference runs from a
// folder of <lesson-id>.jsonl files, to check a recording before it is embedded), --compare (check
// "Compare with a real GPU" where a reference run exists; for screenshots).
#include <QApplication>
#include <QCommandLineParser>
#include <QTimer>

#include "app/gui/main_window.h"
#include "app/gui/plot_panel.h"
#include "app/gui/run_panel.h"

int main(int argc, char** argv) {
  QApplication app(argc, argv);
  QApplication::setApplicationName("GPU Lab");
  QApplication::setOrganizationName("GPU Lab");
  QCommandLineParser parser;
  parser.setApplicationDescription("Interactive lessons on GPU acceleration for deep learning");
  parser.addHelpOption();
  QCommandLineOption lessons("lessons", "Read the lessons from DIR (reloaded when they change).", "DIR");
  QCommandLineOption open("open", "Open the lesson with this id.", "ID");
  QCommandLineOption run("run", "Start the lesson's run at once (the first, or the one --run-index names).");
  QCommandLineOption runIndex("run-index", "Select the lesson's run number N (1, 2, ...).", "N");
  QCommandLineOption referenceRuns("reference-runs", "Read the reference runs (<lesson-id>.jsonl) from DIR instead of the embedded ones.", "DIR");
  QCommandLineOption compare("compare", "Check \"Compare with a real GPU\" (shown where a lesson's run has a reference run).");
  QCommandLineOption quitWhenShown("quit-when-shown", "Quit as soon as the first lesson is on screen (to time start-up).");
  parser.addOptions({lessons, open, run, runIndex, referenceRuns, compare, quitWhenShown});
  parser.process(app);
  gpulab::app::MainWindow window(parser.isSet(lessons) ? parser.value(lessons) : QString(gpulab::course::kEmbeddedRoot));
  if (parser.isSet(referenceRuns)) window.setReferenceRunsRoot(parser.value(referenceRuns));
  if (parser.isSet(open)) window.selectLesson(parser.value(open));
  if (parser.isSet(runIndex)) window.runPanel()->selectRun(parser.value(runIndex).toInt() - 1);
  if (parser.isSet(compare)) window.plotPanel()->setShowReference(true);
  window.show();
  if (parser.isSet(run)) QTimer::singleShot(0, &window, &gpulab::app::MainWindow::startRun);
  // A zero timer fires once the window's first show and paint events have been handled.
  if (parser.isSet(quitWhenShown)) QTimer::singleShot(0, &app, &QApplication::quit);
  return QApplication::exec();
}
