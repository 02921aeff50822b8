// gpulab: the desktop app. Options: --lessons DIR (read lessons from a folder and reload them on
// change), --open ID (start on a lesson), --run (start its first run at once; for screenshots),
// --quit-when-shown (for timing start-up), --reference-runs DIR (read the reference runs from a
// folder of <lesson-id>.jsonl files, to check a recording before it is embedded), --compare (check
// "Compare with a real GPU" where a reference run exists; for screenshots), --help, --version.
// Without --open the window reopens the lesson the learner left, or shows the welcome page (the
// course map) on the first launch.
//
// The command line is read before the QApplication exists, so --help and --version work without a
// display (over ssh, in a package check). Qt's own options (-platform, -style, ...) are accepted and
// passed on to QApplication. Exit status: 0 for --help and --version, 2 for a usage mistake (usage on
// stderr), else the application's.
#include <QApplication>
#include <QCommandLineParser>
#include <QIcon>
#include <QTimer>
#include <cstdio>

#include "engine/runtime/blas_kernels.h"
#include "app/gui/lesson_page.h"
#include "app/gui/main_window.h"
#include "app/gui/plot_panel.h"
#include "app/gui/run_panel.h"

namespace {

void print(std::FILE* to, const QString& text) {
  std::fputs(text.toLocal8Bit().constData(), to);
  std::fflush(to);
}

}  // namespace

int main(int argc, char** argv) {
  // Before anything else: with the wrong OpenBLAS kernels this runs itself again, once (blas_kernels.h).
  gpulab::ensureBestBlasKernels(argv);
  QStringList arguments;
  for (int i = 0; i < argc; ++i) arguments << QString::fromLocal8Bit(argv[i]);

  QCommandLineParser parser;
  parser.setApplicationDescription("GPU Lab " GPULAB_VERSION ": interactive lessons on GPU acceleration for deep learning");
  // Qt's options are single-dash words (-platform offscreen): read "-x" as the long option x.
  parser.setSingleDashWordOptionMode(QCommandLineParser::ParseAsLongOptions);
  const QCommandLineOption help = parser.addHelpOption();
  const QCommandLineOption version = parser.addVersionOption();
  QCommandLineOption lessons("lessons", "Read the lessons from DIR (reloaded when they change).", "DIR");
  QCommandLineOption open("open", "Open the lesson with this id.", "ID");
  QCommandLineOption run("run", "Start the lesson's run at once (the first, or the one --run-index names).");
  QCommandLineOption runIndex("run-index", "Select the lesson's run number N (1, 2, ...).", "N");
  QCommandLineOption referenceRuns("reference-runs", "Read the reference runs (<lesson-id>.jsonl) from DIR instead of the embedded ones.", "DIR");
  QCommandLineOption compare("compare", "Check \"Compare with a real GPU\" (shown where a lesson's run has a reference run).");
  QCommandLineOption quitWhenShown("quit-when-shown", "Quit as soon as the first lesson is on screen (to time start-up).");
  QCommandLineOption view("view", "Show the view with this id (such as memory) as soon as a run or a code cell declares it.", "ID");
  QCommandLineOption runCell("run-cell", "Run the lesson's code cell number N (1, 2, ...) at once, scrolled into view.", "N");
  parser.addOptions({lessons, open, run, runIndex, referenceRuns, compare, quitWhenShown, view, runCell});
  // QApplication's own options (see QGuiApplication and QApplication): accepted, not listed.
  for (const auto& [name, takesValue] : std::initializer_list<std::pair<const char*, bool>>{
           {"platform", true}, {"platformpluginpath", true}, {"platformtheme", true}, {"plugin", true},
           {"qwindowgeometry", true}, {"qwindowicon", true}, {"qwindowtitle", true}, {"geometry", true},
           {"display", true}, {"style", true}, {"stylesheet", true}, {"session", true}, {"reverse", false},
           {"widgetcount", false}, {"nograb", false}, {"dograb", false}, {"sync", false}, {"qmljsdebugger", true}}) {
    QCommandLineOption qt(name, "Qt's option", takesValue ? "VALUE" : QString());
    qt.setFlags(QCommandLineOption::HiddenFromHelp);
    parser.addOption(qt);
  }

  // Without a QCoreApplication yet, Qt names the program "<executable_name>" in the usage line.
  const QString helpText = parser.helpText().replace("<executable_name>", "gpulab");
  auto usageError = [&helpText](const QString& what) {
    print(stderr, "gpulab: " + what + "\n\n" + helpText);
    return 2;
  };
  if (!parser.parse(arguments)) return usageError(parser.errorText());
  if (parser.isSet(help) || parser.isSet("help-all")) {
    print(stdout, helpText);
    return 0;
  }
  if (parser.isSet(version)) {
    print(stdout, "GPU Lab " GPULAB_VERSION "\n");
    return 0;
  }
  if (!parser.positionalArguments().isEmpty()) return usageError("unexpected argument '" + parser.positionalArguments().front() + "'");
  int runNumber = 0;
  if (parser.isSet(runIndex)) {
    bool ok = false;
    runNumber = parser.value(runIndex).toInt(&ok);
    if (!ok || runNumber < 1) return usageError("--run-index expects a run number 1, 2, ... (got '" + parser.value(runIndex) + "')");
  }

  int cellNumber = 0;
  if (parser.isSet(runCell)) {
    bool ok = false;
    cellNumber = parser.value(runCell).toInt(&ok);
    if (!ok || cellNumber < 1) return usageError("--run-cell expects a cell number 1, 2, ... (got '" + parser.value(runCell) + "')");
  }

  QApplication app(argc, argv);
  QApplication::setApplicationName("GPU Lab");
  QApplication::setApplicationVersion(GPULAB_VERSION);
  // Desktops match the window to its menu entry (resources/linux/io.github.gpulab.GpuLab.desktop).
  QGuiApplication::setDesktopFileName("io.github.gpulab.GpuLab");
  QIcon icon = QIcon::fromTheme("io.github.gpulab.GpuLab");
  if (icon.isNull()) {
    icon.addFile(":/icons/48x48/io.github.gpulab.GpuLab.png");
    icon.addFile(":/icons/256x256/io.github.gpulab.GpuLab.png");
  }
  QApplication::setWindowIcon(icon);
  QApplication::setOrganizationName("GPU Lab");
  gpulab::app::MainWindow window(parser.isSet(lessons) ? parser.value(lessons) : QString(gpulab::course::kEmbeddedRoot));
  if (parser.isSet(referenceRuns)) window.setReferenceRunsRoot(parser.value(referenceRuns));
  if (parser.isSet(open) && !window.selectLesson(parser.value(open))) {
    print(stderr, "gpulab: no lesson has the id '" + parser.value(open) + "'; showing the first one\n");
  }
  if (runNumber > 0) window.runPanel()->selectRun(runNumber - 1);
  if (parser.isSet(compare)) window.plotPanel()->setShowReference(true);
  window.showInitially();
  if (parser.isSet(run)) QTimer::singleShot(0, &window, &gpulab::app::MainWindow::startRun);
  if (cellNumber > 0) {
    QTimer::singleShot(0, &window, [&window, cellNumber] {
      if (!window.lessonPage()->runCell(cellNumber - 1)) print(stderr, "gpulab: the lesson has no code cell " + QString::number(cellNumber) + "\n");
    });
  }
  // A lab declares its views when it runs: look for the one asked for until it is there.
  QTimer viewPoll;
  if (parser.isSet(view)) {
    QObject::connect(&viewPoll, &QTimer::timeout, &window, [&] {
      for (gpulab::app::PlotPanel* panel : {window.plotPanel(), window.cellPlotPanel()}) {
        if (!panel->viewIds().contains(parser.value(view))) continue;
        window.viewPanels()->setCurrentWidget(panel);
        panel->showView(parser.value(view));
        viewPoll.stop();
      }
    });
    viewPoll.start(50);
  }
  // A zero timer fires once the window's first show and paint events have been handled.
  if (parser.isSet(quitWhenShown)) QTimer::singleShot(0, &app, &QApplication::quit);
  return QApplication::exec();
}
