// gpulab: the desktop app. Options: --lessons DIR (read lessons from a folder and reload them on
// change), --open ID (start on a lesson), --run (start its first run at once; for screenshots).
#include <QApplication>
#include <QCommandLineParser>
#include <QTimer>

#include "app/gui/main_window.h"

int main(int argc, char** argv) {
  QApplication app(argc, argv);
  QApplication::setApplicationName("GPU Lab");
  QApplication::setOrganizationName("GPU Lab");
  QCommandLineParser parser;
  parser.setApplicationDescription("Interactive lessons on GPU acceleration for deep learning");
  parser.addHelpOption();
  QCommandLineOption lessons("lessons", "Read the lessons from DIR (reloaded when they change).", "DIR");
  QCommandLineOption open("open", "Open the lesson with this id.", "ID");
  QCommandLineOption run("run", "Start the lesson's first run at once.");
  parser.addOptions({lessons, open, run});
  parser.process(app);
  gpulab::app::MainWindow window(parser.isSet(lessons) ? parser.value(lessons) : QString(gpulab::course::kEmbeddedRoot));
  if (parser.isSet(open)) window.selectLesson(parser.value(open));
  window.show();
  if (parser.isSet(run)) QTimer::singleShot(0, &window, &gpulab::app::MainWindow::startRun);
  return QApplication::exec();
}
