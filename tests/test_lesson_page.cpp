// The lesson page as a learner uses it (offscreen, the build tree's gpulab package): the lesson's
// ```python blocks are code cells in the text; running one runs the lesson's setup first, prints under
// it and feeds the live views (what it logs, cuda:0's memory); edits survive a restart of the app and
// Reset forgets them; the device choice starts the session over; a lesson folder from outside the
// program says once that its code runs on this machine.
#include <QComboBox>
#include <QElapsedTimer>
#include <QFrame>
#include <QLabel>
#include <QPlainTextEdit>
#include <QPushButton>
#include <QTableWidget>
#include <QTemporaryDir>
#include <QtTest>
#include <qcustomplot.h>

#include "app/course/progress_store.h"
#include "app/gui/cell_views.h"
#include "app/gui/exercise_panel.h"
#include "app/gui/lesson_page.h"
#include "app/gui/main_window.h"
#include "app/gui/plot_panel.h"
#include "app/gui/view_widgets.h"
#include "app/notebook/python_environment.h"
#include "engine/runtime/cuda_runtime.h"
#include "tests/test_util.h"

using gpulab::app::CellViews;
using gpulab::app::CodeCell;
using gpulab::app::MainWindow;

namespace {

QPushButton* button(CodeCell* cell, const char* name) { return cell->findChild<QPushButton*>(name); }

bool runAndWait(CodeCell* cell) {
  button(cell, "cellRun")->click();
  return QTest::qWaitFor([&] { return !cell->running(); }, 60000);
}

}  // namespace

class TestLessonPage : public QObject {
  Q_OBJECT

  QTemporaryDir tmp_;
  QString progressPath() const { return tmp_.filePath("progress.json"); }

 private slots:
  void initTestCase() {
    if (gpulab::notebook::buildTreePackageDir().isEmpty()) QSKIP("the gpulab package is not built beside this test");
  }

  void theCellsSitInTheText() {
    MainWindow w(gpulab::course::kEmbeddedRoot, progressPath());
    QVERIFY(w.selectLesson("training-loop"));
    QTRY_VERIFY(!w.lessonLoading());
    const auto cells = w.lessonPage()->cells();
    QCOMPARE(cells.size(), 5);  // the setup, the loop, the evaluation, the checkpoint, the exercise's starter
    const QString text = w.lessonPage()->plainText();
    // In the lesson's order: the text that introduces the loop, its code, then what follows it.
    const qsizetype intro = text.indexOf("move **every batch**") >= 0 ? text.indexOf("move **every batch**") : text.indexOf("move every batch");
    const qsizetype loop = text.indexOf("for epoch in range(num_epochs):");
    const qsizetype after = text.indexOf("The first run trains this model on the same kind of data");
    QVERIFY2(intro >= 0 && loop > intro && after > loop, qPrintable(text.left(600)));
    QVERIFY(cells[0]->toolTip().startsWith("Setup"));
    QVERIFY(!w.lessonPage()->sessionBar()->isHidden());
    // Without a GPU the emulated one is cuda:0 by default; with one, this machine's GPU.
    QCOMPARE(w.lessonPage()->deviceChoice()->currentData().toBool(), !gpulab::cuda::availability().usable);
  }

  void aCellRunsAfterTheSetupAndFeedsTheLiveViews() {
    MainWindow w(gpulab::course::kEmbeddedRoot, progressPath());
    QVERIFY(w.selectLesson("training-loop"));
    QTRY_VERIFY(!w.lessonLoading());
    const auto cells = w.lessonPage()->cells();
    QVERIFY(runAndWait(cells[1]));  // the loop: the setup (X, y, num_epochs) runs by itself first
    QCOMPARE(cells[0]->findChild<QLabel*>("cellStatus")->text(), QString("In [1]"));
    QVERIFY2(cells[1]->outputText().startsWith("trained 10 epochs on cuda, last loss "), qPrintable(cells[1]->outputText()));
    // lab.log(loss=...) once per epoch: ten points of the loss in the cell's view.
    QCOMPARE(w.cellPlotPanel()->pointCount(CellViews::kLogView), 10);
    QVERIFY(w.cellPlotPanel()->pointCount(CellViews::kMemoryView) >= 4);  // allocated and reserved, at the start and the end
    QVERIFY(w.cellPlotPanel()->pointCount(CellViews::kCategoryView) >= 8);  // seven categories and reserved, each sample
    QVERIFY2(w.lessonPage()->sessionState()->text().contains("emulated GPU") || gpulab::cuda::availability().usable,
             qPrintable(w.lessonPage()->sessionState()->text()));
    QCOMPARE(w.viewPanels()->currentWidget(), w.cellPlotPanel());  // the cell's views in front
    QVERIFY(w.plotPanel()->viewIds().isEmpty());                    // and the runs' views untouched
    QVERIFY(runAndWait(cells[2]));  // the evaluation uses the model the loop trained
    QVERIFY2(cells[2]->outputText().startsWith("test loss "), qPrintable(cells[2]->outputText()));
    QVERIFY(runAndWait(cells[3]));  // the checkpoint: saved, loaded with weights_only (the default), restored
    QVERIFY2(cells[3]->outputText().startsWith("epoch 10: 4 tensors back on cuda:0"), qPrintable(cells[3]->outputText()));
  }

  // Issue 48 §4.5: lesson 04's cell that deletes the model and empties the cache runs in about a
  // millisecond -- before the sampler's first turn -- and its memory view showed one sample, after the
  // fall, on QCustomPlot's default axes ("2.5 B"). The kernel now samples as the cell starts: the
  // fall from the setup's model to nothing shows, one dot a sample.
  void aShortCellsMemoryViewShowsItsFall() {
    if (gpulab::cuda::availability().usable) QSKIP("the default device is this machine's GPU; the emulated GPU's sizes are asserted");
    MainWindow w(gpulab::course::kEmbeddedRoot, progressPath());
    QVERIFY(w.selectLesson("where-memory-goes"));
    QTRY_VERIFY(!w.lessonLoading());
    const auto cells = w.lessonPage()->cells();
    QVERIFY(runAndWait(cells[1]));  // the setup (the model, Adam, one step) runs first
    QCustomPlot* p = w.cellPlotPanel()->plot(CellViews::kMemoryView);
    QVERIFY(p);
    w.cellPlotPanel()->view(CellViews::kMemoryView)->refresh();
    QCPGraph* allocated = nullptr;
    for (int i = 0; i < p->graphCount(); ++i)
      if (p->graph(i)->name().startsWith("allocated")) allocated = p->graph(i);
    QVERIFY(allocated);
    const auto data = allocated->data();
    QVERIFY2(data->size() >= 2, qPrintable(QString::number(data->size())));
    QCOMPARE(data->constBegin()->key, 0.0);
    // The setup's model, its gradients and Adam's two moments: (1024x1024 + 1024 + 10240 + 10) floats x 4.
    QVERIFY2(data->constBegin()->value >= 4.0 * (1024 * 1024 + 1024 + 10240 + 10) * 4, qPrintable(QString::number(data->constBegin()->value)));
    QCOMPARE((data->constEnd() - 1)->value, 0.0);
    QCOMPARE(allocated->scatterStyle().shape(), QCPScatterStyle::ssDisc);  // a few samples: each a dot
    QVERIFY(p->xAxis->range().lower >= 0.0);
    QVERIFY(p->yAxis->range().upper >= data->constBegin()->value);
    const QLabel* note = p->findChild<QLabel*>("emptyNote");
    QVERIFY(!note || note->isHidden());
  }

  void theDeviceChoiceStartsTheSessionOver() {
    MainWindow w(gpulab::course::kEmbeddedRoot, progressPath());
    QVERIFY(w.selectLesson("device-setup"));
    QTRY_VERIFY(!w.lessonLoading());
    CodeCell* cell = w.lessonPage()->cells().front();
    QVERIFY(runAndWait(cell));
    const QString first = cell->outputText();
    w.lessonPage()->deviceChoice()->setCurrentIndex(0);  // this machine as it is
    QVERIFY(runAndWait(cell));
    if (gpulab::cuda::availability().usable) QSKIP("this machine's GPU is cuda:0 either way");
    QVERIFY2(first.startsWith("Using cuda"), qPrintable(first));
    QVERIFY2(cell->outputText().startsWith("Using cpu"), qPrintable(cell->outputText()));
    QVERIFY2(w.lessonPage()->sessionState()->text().contains("CPU"), qPrintable(w.lessonPage()->sessionState()->text()));
    w.lessonPage()->deviceChoice()->setCurrentIndex(1);  // the default again: the choice is kept per lesson (issue 48, 4.8)
  }

  void editsSurviveARestartAndResetForgetsThem() {
    const QString mine = "print('my own code')";
    {
      MainWindow w(gpulab::course::kEmbeddedRoot, progressPath());
      QVERIFY(w.selectLesson("device-setup"));
      QTRY_VERIFY(!w.lessonLoading());
      CodeCell* cell = w.lessonPage()->cells().front();
      cell->editor()->selectAll();
      QTest::keyClicks(cell->editor(), mine);
    }  // closed right after typing: the pending edit is written as the window goes
    {
      MainWindow w(gpulab::course::kEmbeddedRoot, progressPath());
      QVERIFY(w.selectLesson("device-setup"));
      CodeCell* cell = w.lessonPage()->cells().front();
      QCOMPARE(cell->code(), mine);
      QVERIFY(cell->edited());
      button(cell, "cellReset")->click();
      QVERIFY(!cell->edited());
      QVERIFY(w.selectLesson("training-loop"));  // leaving the lesson saves too
    }
    MainWindow w(gpulab::course::kEmbeddedRoot, progressPath());
    QVERIFY(w.selectLesson("device-setup"));
    QVERIFY(!w.lessonPage()->cells().front()->edited());
    QVERIFY(w.lessonPage()->cells().front()->code().startsWith("import torch"));
  }

  // An exercise graded from the run: the starter (the lesson's mistake) does not meet it, the
  // learner's fix does, and the lesson counts it; hints come one at a time, the solution after a try.
  void anExerciseIsGradedFromTheRun() {
    MainWindow w(gpulab::course::kEmbeddedRoot, progressPath());
    QVERIFY(w.selectLesson("device-setup"));
    QTRY_VERIFY(!w.lessonLoading());
    const auto panels = w.lessonPage()->exercisePanels();
    QCOMPARE(panels.size(), 1);
    gpulab::app::ExercisePanel* panel = panels.front();
    CodeCell* cell = nullptr;
    for (CodeCell* c : w.lessonPage()->cells())
      if (c->code().contains("def pick_device")) cell = c;
    QVERIFY(cell);
    QVERIFY(!panel->solutionButton()->isEnabled());  // not before a try
    panel->hintButton()->click();
    QVERIFY(panel->hints()->text().startsWith("Hint 1: torch.cuda.is_available()"));
    QVERIFY(!panel->hints()->text().contains("Hint 2"));

    QVERIFY(runAndWait(cell));
    // Graded on two machines, each a fresh session (issue 49): the panel says so while it runs.
    QTRY_VERIFY_WITH_TIMEOUT(panel->result()->text().contains("grading your code on 2 machines"), 10000);
    QTRY_VERIFY_WITH_TIMEOUT(panel->result()->text().startsWith("✗ Not met yet."), 120000);
    QVERIFY2(panel->result()->text().contains("on a machine without a GPU: picks the device the machine has: measured 0"),
             qPrintable(panel->result()->text()));
    QVERIFY2(panel->result()->text().contains("on a 4 GiB GPU (emulated): every check met"),
             qPrintable(panel->result()->text()));
    // The starter as given is the lesson's own mistake: its hints are the exercise's, on demand.
    QVERIFY2(!panel->result()->text().contains("Hint:"), qPrintable(panel->result()->text()));
    // A wrong answer of the bank, written by a learner: its hint comes at once (beside the hint of the bank's
    // other answer that fails exactly these checks: the grade cannot tell the two apart).
    cell->editor()->setPlainText("import torch\ndef pick_device():\n    return torch.device('cuda' if torch.cuda.is_available else 'cpu')\n"
                                 "x = torch.ones(3, device=pick_device())\n");
    QVERIFY(runAndWait(cell));
    QTRY_VERIFY_WITH_TIMEOUT(panel->result()->text().startsWith("✗ Not met yet.") && !panel->result()->text().contains("grading your code"), 120000);
    QVERIFY2(panel->result()->text().contains("is_available is a function: call it"), qPrintable(panel->result()->text()));
    QVERIFY(panel->solutionButton()->isEnabled());
    gpulab::course::ProgressStore progress(progressPath());
    QVERIFY(!progress.exerciseMet("device-setup", 0));

    // A right answer written another way passes: the question is asked of whole machines.
    cell->editor()->setPlainText("import torch\ndef pick_device():\n    try:\n        torch.ones(1, device='cuda')\n"
                                 "        return torch.device('cuda')\n    except RuntimeError:\n        return torch.device('cpu')\n");
    QVERIFY(runAndWait(cell));
    QTRY_VERIFY_WITH_TIMEOUT(panel->result()->text().startsWith("✓ Exercise met."), 120000);
    QVERIFY(gpulab::course::ProgressStore(progressPath()).exerciseMet("device-setup", 0));
    panel->solutionButton()->click();
    QVERIFY(!panel->solution()->isHidden());
    QCOMPARE(panel->solutionButton()->text(), QString("Hide the solution"));
    QVERIFY(panel->solution()->toPlainText().contains("torch.cuda.is_available() else \"cpu\""));
  }

  // A runaway cell cannot hold the window: the window answers while it runs, Stop ends it within
  // 100 ms, and closing the window mid-run ends its session at once.
  void aRunawayCellCannotHoldTheWindow() {
    QTemporaryDir lessons;
    gpulab::test::writeFile(lessons.filePath("01-loop/lesson.md"),
                            "---\nid: loop\ntitle: Loop\nchapter: Mine\n---\nText\n\n```python\nn = 0\nwhile True:\n    n += 1\n```\n");
    QElapsedTimer closing;
    {
      MainWindow w(lessons.path(), progressPath());
      w.show();
      QVERIFY(w.selectLesson("loop"));
      CodeCell* cell = w.lessonPage()->cells().front();
      QVERIFY(w.lessonPage()->runCell(0));
      QVERIFY(QTest::qWaitFor([&] { return button(cell, "cellStop")->isEnabled(); }, 30000));
      // The event loop turns while the cell runs: a timer fires on time.
      QElapsedTimer turn;
      turn.start();
      QTest::qWait(100);
      QVERIFY2(turn.elapsed() < 1000, qPrintable(QString::number(turn.elapsed())));
      QElapsedTimer stop;
      stop.start();
      button(cell, "cellStop")->click();
      QVERIFY(QTest::qWaitFor([&] { return !cell->running(); }, 5000));
      QVERIFY2(stop.elapsed() < 100, qPrintable(QString("Stop took %1 ms").arg(stop.elapsed())));
      QVERIFY(w.lessonPage()->runCell(0));  // again, and this time the window closes under it
      QVERIFY(QTest::qWaitFor([&] { return button(cell, "cellStop")->isEnabled(); }, 30000));
      w.close();
      closing.start();
    }
    QVERIFY2(closing.elapsed() < 1500, qPrintable(QString("closing took %1 ms").arg(closing.elapsed())));
  }

  // A cell draws views of its own through the lab protocol, checked as a lab's updates are: a point
  // for a view it never declared is said under the cell, and the rest of the run still draws.
  void aCellDeclaresItsOwnViews() {
    QTemporaryDir lessons;
    gpulab::test::writeFile(lessons.filePath("01-views/lesson.md"),
                            "---\nid: views\ntitle: Views\nchapter: Mine\n---\nText\n\n```python\n"
                            "lab.view('speed', title='Speed by size', kind='bars', y=('rate', 'GFLOP/s'), series=['cpu', ('gpu', 'GPU')])\n"
                            "lab.bar('speed', 'cpu', '512', 80.5)\n"
                            "lab.bar('speed', 'gpu', '512', torch.tensor(900.0))\n"
                            "lab.measurement('matmul rate', 80.5, 'GFLOP/s')\n"
                            "lab.point('nope', 's', 1, 2)\n"
                            "print('done')\n```\n");
    MainWindow w(lessons.path(), progressPath());
    QVERIFY(w.selectLesson("views"));
    CodeCell* cell = w.lessonPage()->cells().front();
    QVERIFY(runAndWait(cell));
    QTRY_VERIFY(w.cellPlotPanel()->viewIds().contains("speed"));
    QVERIFY2(cell->outputText().contains("lab.point(): a point for view 'nope', which was not declared"), qPrintable(cell->outputText()));
    QVERIFY2(cell->outputText().contains("done"), qPrintable(cell->outputText()));
    const auto* table = w.cellPlotPanel()->measurementTable();
    bool measured = false;
    for (int r = 0; r < table->rowCount(); ++r)
      if (table->item(r, 1) && table->item(r, 1)->text() == "matmul rate") measured = true;
    QVERIFY(measured);
  }

  void aFolderFromOutsideSaysOnceThatItsCodeRuns() {
    QTemporaryDir lessons;
    gpulab::test::writeFile(lessons.filePath("01-mine/lesson.md"),
                            "---\nid: mine\ntitle: Mine\nchapter: Mine\n---\nText\n\n```python\nprint(6 * 7)\n```\n");
    gpulab::test::writeFile(lessons.filePath("02-text/lesson.md"), "---\nid: text\ntitle: Text only\nchapter: Mine\n---\nNo code here.\n");
    {
      MainWindow w(lessons.path(), progressPath());
      QVERIFY(w.selectLesson("text"));
      QVERIFY(w.lessonPage()->externalCodeBanner()->isHidden());  // no code, nothing to say
      QVERIFY(w.lessonPage()->sessionBar()->isHidden());
      QVERIFY(w.selectLesson("mine"));
      QVERIFY(!w.lessonPage()->externalCodeBanner()->isHidden());
      QVERIFY(w.lessonPage()->cells().front()->outputText().isEmpty());  // nothing ran
      w.lessonPage()->externalCodeBanner()->findChild<QPushButton*>("externalCodeUnderstood")->click();
      QVERIFY(w.lessonPage()->externalCodeBanner()->isHidden());
      QVERIFY(runAndWait(w.lessonPage()->cells().front()));
      QCOMPARE(w.lessonPage()->cells().front()->outputText(), QString("42\n"));
    }
    MainWindow w(lessons.path(), progressPath());
    QVERIFY(w.selectLesson("mine"));
    QVERIFY(w.lessonPage()->externalCodeBanner()->isHidden());  // said once
  }

  // Issue 48 1.3: an exercise's values are code the lesson runs after the learner's run. From a folder
  // outside GPU Lab, the banner names them and the exercise's panel shows them; and a value is an
  // expression under guard: one that imports os is not measured, and what it would have run did not run.
  void anExercisesValuesAreShownAndGuarded() {
    QTemporaryDir lessons;
    const QString marker = lessons.filePath("ran");
    const QString hostile = QString("__import__('os').system('touch %1') == 0").arg(marker);
    gpulab::test::writeFile(lessons.filePath("01-ex/lesson.md"),
                            QString("---\nid: ex\ntitle: Ex\nchapter: Mine\n---\nText\n\n```exercise\n"
                                    "{\"title\": \"T\", \"text\": \"Run it\", \"values\": {\"done\": \"%1\", \"x set\": \"x == 1\"},\n"
                                    " \"checks\": [{\"measurement\": \"done\", \"at_least\": 1}, {\"measurement\": \"x set\", \"at_least\": 1}]}\n```\n\n"
                                    "```python exercise\nx = 0\n```\n\n```python solution\nx = 1\n```\n" + gpulab::test::exerciseBank("x set")).arg(hostile).toUtf8());
    MainWindow w(lessons.path(), progressPath());
    QVERIFY(w.selectLesson("ex"));
    QTRY_VERIFY(!w.lessonLoading());
    const QString banner = w.lessonPage()->externalCodeBanner()->text()->text();
    QVERIFY(!w.lessonPage()->externalCodeBanner()->isHidden());
    QVERIFY2(banner.contains(hostile) && banner.contains("x == 1"), qPrintable(banner));
    const auto panels = w.lessonPage()->exercisePanels();
    QCOMPARE(panels.size(), 1);
    QVERIFY2(panels.front()->result()->text().contains("Measured after your run, by evaluating:\n  done = " + hostile),
             qPrintable(panels.front()->result()->text()));
    w.lessonPage()->externalCodeBanner()->findChild<QPushButton*>("externalCodeUnderstood")->click();
    CodeCell* cell = w.lessonPage()->cells().front();
    cell->editor()->setPlainText("x = 1\n");
    QVERIFY(runAndWait(cell));
    QVERIFY2(panels.front()->result()->text().startsWith("✗ Not met yet."), qPrintable(panels.front()->result()->text()));
    QVERIFY2(panels.front()->result()->text().contains("x set: measured 1"), qPrintable(panels.front()->result()->text()));
    QVERIFY2(panels.front()->result()->text().contains("x == 1"), qPrintable(panels.front()->result()->text()));  // still listed
    QVERIFY(!QFile::exists(marker));
  }

  // A Python lab is the folder's code too, even in a lesson without cells.
  void aFolderWhoseLabIsPythonSaysSo() {
    QTemporaryDir lessons;
    gpulab::test::writeFile(lessons.filePath("01-lab/probe_lab.py"), "def run():\n    print('ran')\n");
    gpulab::test::writeFile(lessons.filePath("01-lab/lesson.md"), R"md(---
id: lab
title: Lab
chapter: Mine
---
```lab
{"id": "probe", "title": "Probe", "code": "probe_lab.py", "params": [], "measurements": []}
```

```run
{"lab": "probe", "title": "Probe it"}
```
)md");
    MainWindow w(lessons.path(), progressPath());
    QVERIFY(w.selectLesson("lab"));
    QVERIFY(w.lessonPage()->cells().isEmpty());
    QVERIFY(!w.lessonPage()->externalCodeBanner()->isHidden());
    QVERIFY2(w.lessonPage()->externalCodeBanner()->text()->text().contains("code cells and Python labs run on this machine"),
             qPrintable(w.lessonPage()->externalCodeBanner()->text()->text()));
  }
};

QTEST_MAIN(TestLessonPage)
#include "test_lesson_page.moc"
