// The player as a learner uses it (offscreen): every lesson opens, lesson 3 runs with live plots,
// Stop ends a run within 200 ms, Pause holds it, quiz answers are graded and survive a restart,
// a malformed lesson shows its error while the others work, plots export, runs overlay, a recorded
// reference run overlays with its label (and nothing shows without one), and closing the window
// mid-run shuts down cleanly.
#include <QCheckBox>
#include <QDir>
#include <QElapsedTimer>
#include <QFile>
#include <QPlainTextEdit>
#include <QSignalSpy>
#include <QTableWidget>
#include <QTemporaryDir>
#include <QTextBrowser>
#include <QTreeWidget>
#include <qcustomplot.h>

#include "app/gui/main_window.h"
#include "app/gui/plot_panel.h"
#include "app/gui/quiz_widget.h"
#include "app/gui/run_panel.h"
#include "test_util.h"

using gpulab::app::MainWindow;
using Plot = gpulab::app::PlotPanel::Plot;

namespace {

QString navigatorLabel(MainWindow& w, const QString& id) {
  QTreeWidgetItemIterator it(w.navigator());
  for (; *it; ++it)
    if ((*it)->data(0, Qt::UserRole + 1).toString() == id) return (*it)->text(0);
  return {};
}

const QString kReferenceLabel = "reference: NVIDIA H100, recorded 2026-11-23 — not your machine";

// The graphs of a plot whose legend name carries `text`.
QList<QCPGraph*> graphsNamed(QCustomPlot* p, const QString& text) {
  QList<QCPGraph*> out;
  for (int i = 0; i < p->graphCount(); ++i)
    if (p->graph(i)->name().contains(text)) out << p->graph(i);
  return out;
}

int referenceGraphCount(MainWindow& w) {
  int n = 0;
  for (Plot p : {Plot::Loss, Plot::Memory, Plot::Throughput}) n += graphsNamed(w.plotPanel()->plot(p), "reference:").size();
  return n;
}

// Table rows as "run | measurement | value".
QStringList tableRows(QTableWidget* t) {
  QStringList rows;
  for (int r = 0; r < t->rowCount(); ++r) rows << t->item(r, 0)->text() + " | " + t->item(r, 1)->text() + " | " + t->item(r, 2)->text();
  return rows;
}

// A folder with the test fixtures as <lesson-id>.jsonl (what resources/reference-runs/ holds).
void copyFixtures(const QTemporaryDir& dir, const QStringList& lessonIds) {
  for (const QString& id : lessonIds) {
    const QString fixture = QFINDTESTDATA("data/reference-runs/fixture-" + id + ".jsonl");
    QVERIFY2(!fixture.isEmpty(), qPrintable("missing test fixture for " + id));
    QVERIFY(QFile::copy(fixture, dir.filePath(id + ".jsonl")));
  }
}

}  // namespace

class TestGui : public QObject {
  Q_OBJECT

  QTemporaryDir tmp_;
  QString progressPath() const { return tmp_.filePath("progress.json"); }

  // Opens lesson 3's regression run with `epochs` and starts it.
  void startRegression(MainWindow& w, int epochs) {
    QVERIFY(w.selectLesson("training-loop"));
    w.runPanel()->selectRun(0);
    QVERIFY(w.runPanel()->setParameter("epochs", QString::number(epochs)));
    QVERIFY(w.runPanel()->setParameter("device", "cpu"));
    w.startRun();
    QVERIFY(w.runner().running());
  }

 private slots:
  void everyLessonOpens() {
    MainWindow w(gpulab::course::kEmbeddedRoot, progressPath());
    w.show();
    for (const auto& lesson : w.course().lessons) {
      QVERIFY(w.selectLesson(lesson.id));
      QCOMPARE(w.currentLessonId(), lesson.id);
      QVERIFY(w.lessonView()->toPlainText().contains(lesson.title));
      QVERIFY2(w.codeView()->toPlainText().contains("::run("), "the code panel shows the lab's source");
      QVERIFY(w.runPanel()->runButton()->isEnabled());
    }
  }

  void lessonThreeRunsWithLivePlots() {
    MainWindow w(gpulab::course::kEmbeddedRoot, progressPath());
    w.show();
    QSignalSpy finished(&w, &MainWindow::runFinished);
    startRegression(w, 3);
    QVERIFY(finished.wait(30000));
    QCOMPARE(finished.front().front().toString(), QString());  // no error
    QVERIFY(w.plotPanel()->pointCount(Plot::Loss) > 0);
    QVERIFY(w.plotPanel()->pointCount(Plot::Memory) > 0);
    QVERIFY(w.plotPanel()->pointCount(Plot::Throughput) > 0);
    QCOMPARE(w.plotPanel()->plot(Plot::Loss)->graph(1)->dataCount(), 3);  // eval loss per epoch
    QVERIFY(w.runPanel()->consoleText().contains("Done."));
    QVERIFY(w.runPanel()->consoleText().contains("measured: evaluation peak under no-grad"));
    QCOMPARE(w.runPanel()->progressValue(), 1000);
  }

  void stopEndsARunWithin200ms() {
    MainWindow w(gpulab::course::kEmbeddedRoot, progressPath());
    w.show();
    QSignalSpy finished(&w, &MainWindow::runFinished);
    startRegression(w, 1000);
    QTRY_VERIFY_WITH_TIMEOUT(w.plotPanel()->pointCount(Plot::Loss) > 0, 10000);
    QElapsedTimer t;
    t.start();
    w.runPanel()->stopButton()->click();
    QVERIFY(finished.wait(5000));
    qInfo("Stop took %lld ms", static_cast<long long>(t.elapsed()));
    QVERIFY(t.elapsed() < 200);
    QVERIFY(w.runPanel()->consoleText().contains("Stopped."));
    QVERIFY(w.runPanel()->runButton()->isEnabled());
  }

  void pauseHoldsTheRun() {
    MainWindow w(gpulab::course::kEmbeddedRoot, progressPath());
    w.show();
    QSignalSpy finished(&w, &MainWindow::runFinished);
    startRegression(w, 1000);
    QTRY_VERIFY_WITH_TIMEOUT(w.plotPanel()->pointCount(Plot::Loss) > 0, 10000);
    w.runPanel()->pauseButton()->click();
    QCOMPARE(w.runPanel()->pauseButton()->text(), QString("Resume"));
    QTest::qWait(150);  // a batch already on its way may still arrive
    const int held = w.plotPanel()->pointCount(Plot::Loss);
    QTest::qWait(300);
    QCOMPARE(w.plotPanel()->pointCount(Plot::Loss), held);
    w.runPanel()->pauseButton()->click();
    QTRY_VERIFY_WITH_TIMEOUT(w.plotPanel()->pointCount(Plot::Loss) > held, 5000);
    w.stopRun();
    QVERIFY(finished.wait(5000));
  }

  void quizAnswersAreGradedAndPersist() {
    {
      MainWindow w(gpulab::course::kEmbeddedRoot, progressPath());
      QVERIFY(w.selectLesson("device-setup"));
      w.quiz()->answer(0, 1);  // "cuda:0": wrong
      QVERIFY(w.quiz()->feedback(0).contains("Not quite"));
      w.quiz()->answer(0, 0);  // "cpu": right
      QVERIFY(w.quiz()->feedback(0).contains("Correct"));
      QVERIFY(!navigatorLabel(w, "device-setup").startsWith("✓"));
      w.quiz()->answer(1, 1);
      QVERIFY(navigatorLabel(w, "device-setup").startsWith("✓"));  // every answer right: completed
    }
    MainWindow again(gpulab::course::kEmbeddedRoot, progressPath());
    QVERIFY(again.selectLesson("device-setup"));
    QVERIFY(again.quiz()->feedback(0).contains("Correct"));
    QVERIFY(navigatorLabel(again, "device-setup").startsWith("✓"));
  }

  void aMalformedLessonShowsItsErrorAndTheOthersWork() {
    QTemporaryDir lessons;
    gpulab::test::writeFile(lessons.filePath("01-good/lesson.md"),
              "---\nid: good\ntitle: Good lesson\nchapter: Tests\n---\n# Good\n```run\n{\"lab\": \"devices\", \"params\": {\"size\": 32, \"repeats\": 1}}\n```\n");
    gpulab::test::writeFile(lessons.filePath("02-bad/lesson.md"),
              "---\nid: bad\ntitle: Bad lesson\nchapter: Tests\n---\n```run\n{\"lab\": \"train\", \"params\": {\"epochs\": 0}}\n```\n");
    MainWindow w(lessons.path(), progressPath());
    QVERIFY(navigatorLabel(w, "bad").contains("broken"));
    QVERIFY(w.selectLesson("bad"));
    QVERIFY(w.lessonView()->toPlainText().contains("could not be loaded"));
    QVERIFY(w.lessonView()->toPlainText().contains("lesson.md:6: run block: invalid value '0' for parameter 'epochs'"));
    QVERIFY(!w.runPanel()->runButton()->isEnabled());
    QVERIFY(w.selectLesson("good"));
    QSignalSpy finished(&w, &MainWindow::runFinished);
    w.startRun();
    QVERIFY(finished.wait(20000));
    QCOMPARE(finished.front().front().toString(), QString());
    QVERIFY(w.runPanel()->consoleText().contains("measured: matmul on cpu"));
  }

  void authorsSeeEditsWithoutRestarting() {
    QTemporaryDir lessons;
    const QString path = lessons.filePath("01-draft/lesson.md");
    gpulab::test::writeFile(path, "---\nid: draft\ntitle: First title\nchapter: Drafts\n---\nText\n");
    MainWindow w(lessons.path(), progressPath());
    QVERIFY(navigatorLabel(w, "draft").contains("First title"));
    gpulab::test::writeFile(path, "---\nid: draft\ntitle: Second title\nchapter: Drafts\n---\nText\n");
    QTRY_VERIFY_WITH_TIMEOUT(navigatorLabel(w, "draft").contains("Second title"), 5000);
  }

  void plotsExportAndRunsOverlay() {
    MainWindow w(gpulab::course::kEmbeddedRoot, progressPath());
    w.show();
    w.plotPanel()->setOverlay(true);
    QSignalSpy finished(&w, &MainWindow::runFinished);
    startRegression(w, 1);
    QVERIFY(finished.wait(20000));
    QVERIFY(w.runPanel()->setParameter("batch_size", "256"));
    w.startRun();
    QVERIFY(finished.wait(20000));
    QCOMPARE(w.plotPanel()->plot(Plot::Loss)->graphCount(), 4);  // train + eval, for each of two runs
    QVERIFY(w.plotPanel()->plot(Plot::Loss)->graph(2)->name().contains("batch_size=256"));
    QTemporaryDir out;
    QVERIFY(w.plotPanel()->exportPng(Plot::Loss, out.filePath("loss.png")));
    QVERIFY(w.plotPanel()->exportPdf(Plot::Memory, out.filePath("memory.pdf")));
    QVERIFY(w.plotPanel()->exportCsv(Plot::Loss, out.filePath("loss.csv")));
    QVERIFY(QFileInfo(out.filePath("loss.png")).size() > 1000);
    QVERIFY(QFileInfo(out.filePath("memory.pdf")).size() > 1000);
    QFile csv(out.filePath("loss.csv"));
    QVERIFY(csv.open(QIODevice::ReadOnly));
    const QStringList lines = QString::fromUtf8(csv.readAll()).split('\n', Qt::SkipEmptyParts);
    QCOMPARE(lines.front(), QString("series,step,loss"));
    QVERIFY(lines.size() > 10);
  }

  void aReferenceRunOverlaysWithItsLabel() {
    QTemporaryDir refs;
    copyFixtures(refs, {"training-loop"});
    MainWindow w(gpulab::course::kEmbeddedRoot, progressPath());
    w.setReferenceRunsRoot(refs.path());
    w.show();
    startRegression(w, 1);  // selects training-loop's run 1, then runs it
    QSignalSpy finished(&w, &MainWindow::runFinished);
    QVERIFY(finished.wait(20000));
    auto* panel = w.plotPanel();
    QVERIFY(panel->referenceOffered());
    QCOMPARE(panel->referenceCheckBox()->text(), QString("Compare with a real GPU"));
    QVERIFY(panel->referenceCheckBox()->toolTip().contains(kReferenceLabel));
    QCOMPARE(referenceGraphCount(w), 0);  // offered, not shown until asked for
    const int ownLoss = panel->plot(Plot::Loss)->graph(0)->dataCount();

    panel->referenceCheckBox()->click();
    QCustomPlot* loss = panel->plot(Plot::Loss);
    const auto train = graphsNamed(loss, "train loss — " + kReferenceLabel);
    QCOMPARE(train.size(), 1);
    QCOMPARE(train.front()->name(), "train loss — " + kReferenceLabel);
    QCOMPARE(train.front()->dataCount(), 4);  // the fixture's run 1
    QCOMPARE(train.front()->pen().style(), Qt::DashLine);
    QCOMPARE(train.front()->pen().color().saturation(), 0);  // grey
    QCOMPARE(graphsNamed(loss, "eval loss — " + kReferenceLabel).front()->dataCount(), 2);
    QCOMPARE(graphsNamed(panel->plot(Plot::Memory), "allocated — " + kReferenceLabel).size(), 1);
    QCOMPARE(graphsNamed(panel->plot(Plot::Memory), "reserved — " + kReferenceLabel).size(), 1);
    QCOMPARE(graphsNamed(panel->plot(Plot::Throughput), "samples/s — " + kReferenceLabel).front()->dataCount(), 4);
    QCOMPARE(loss->graph(0)->dataCount(), ownLoss);  // the learner's curves stay
    QVERIFY(!loss->graph(0)->name().contains("reference"));
    // In the legend, exactly as the graphs are named.
    QVERIFY(loss->legend->hasItemWithPlottable(train.front()));
    // The measurements table: the learner's rows and the reference's, labelled.
    const QStringList rows = tableRows(panel->measurementTable());
    QVERIFY2(rows.contains(kReferenceLabel + " | evaluation peak under no-grad | 976.56 KiB"), qPrintable(rows.join('\n')));
    QVERIFY2(rows.contains(kReferenceLabel + " | device | cuda:0"), qPrintable(rows.join('\n')));
    QVERIFY2(rows.contains("your machine | device | cpu"), qPrintable(rows.join('\n')));
    for (int r = 0; r < panel->measurementTable()->rowCount(); ++r) {
      if (panel->measurementTable()->item(r, 0)->text() == kReferenceLabel)
        QVERIFY(panel->measurementTable()->item(r, 2)->toolTip().contains(kReferenceLabel));
    }
    // Hovering a reference curve names it.
    loss->rescaleAxes();
    loss->replot();
    const auto& point = *(train.front()->data()->constBegin() + 1);
    const QPointF at(loss->xAxis->coordToPixel(point.key), loss->yAxis->coordToPixel(point.value));
    QVERIFY2(panel->toolTipAt(Plot::Loss, at).contains(kReferenceLabel), qPrintable(panel->toolTipAt(Plot::Loss, at)));

    // A new run (no overlay) clears the learner's curves, not the reference.
    w.startRun();
    QVERIFY(finished.wait(20000));
    QCOMPARE(graphsNamed(loss, "train loss — " + kReferenceLabel).size(), 1);
    QCOMPARE(graphsNamed(loss, "train loss").size(), 2);  // the new run's and the reference's
    // Run block 2 has its own recording; unchecking removes every trace of it.
    w.runPanel()->selectRun(1);
    QCOMPARE(graphsNamed(loss, "train loss — " + kReferenceLabel).front()->dataCount(), 1);
    QVERIFY(tableRows(panel->measurementTable()).contains(kReferenceLabel + " | test accuracy | 0.5000"));
    panel->referenceCheckBox()->click();
    QCOMPARE(referenceGraphCount(w), 0);
    QVERIFY(!tableRows(panel->measurementTable()).join('\n').contains("reference:"));
  }

  void aReferenceMeasurementIsComparedInTheTable() {
    QTemporaryDir refs;
    copyFixtures(refs, {"device-setup"});
    MainWindow w(gpulab::course::kEmbeddedRoot, progressPath());
    w.setReferenceRunsRoot(refs.path());
    w.show();
    QVERIFY(w.selectLesson("device-setup"));
    w.plotPanel()->setShowReference(true);
    QCOMPARE(referenceGraphCount(w), 0);  // a run without curves adds none
    QTableWidget* table = w.plotPanel()->measurementTable();
    QVERIFY(table->isVisible());  // its numbers are what there is to compare: the table is shown
    QVERIFY2(tableRows(table).contains(kReferenceLabel + " | matmul on cuda:0 | 12345 GFLOP/s"), qPrintable(tableRows(table).join('\n')));
    QSignalSpy finished(&w, &MainWindow::runFinished);
    QVERIFY(w.runPanel()->setParameter("size", "64"));
    w.startRun();
    QVERIFY(finished.wait(20000));
    const QString all = tableRows(table).join('\n');
    QVERIFY2(all.contains("your machine | matmul on cpu | "), qPrintable(all));
    QVERIFY2(all.contains(kReferenceLabel + " | matmul on cuda:0"), qPrintable(all));  // kept through the run
  }

  void withoutAReferenceNothingIsShown() {
    QTemporaryDir refs;
    copyFixtures(refs, {"training-loop"});
    MainWindow w(gpulab::course::kEmbeddedRoot, progressPath());
    w.setReferenceRunsRoot(refs.path());
    w.show();
    QVERIFY(w.selectLesson("training-loop"));
    w.plotPanel()->setShowReference(true);
    QVERIFY(referenceGraphCount(w) > 0);
    QVERIFY(w.plotPanel()->referenceCheckBox()->isVisible());
    // device-setup has no file in that folder: no offer, no curve, no row, even with the box checked.
    QVERIFY(w.selectLesson("device-setup"));
    QVERIFY(!w.plotPanel()->referenceCheckBox()->isVisible());
    QVERIFY(!w.plotPanel()->referenceOffered());
    QCOMPARE(referenceGraphCount(w), 0);
    QVERIFY(!tableRows(w.plotPanel()->measurementTable()).join('\n').contains("reference:"));
    QVERIFY(w.plotPanel()->referenceLabel().isEmpty());
    // An empty folder: training-loop has none either.
    QTemporaryDir empty;
    w.setReferenceRunsRoot(empty.path());
    QVERIFY(w.selectLesson("training-loop"));
    QVERIFY(!w.plotPanel()->referenceCheckBox()->isVisible());
    QCOMPARE(referenceGraphCount(w), 0);
  }

  void aBrokenReferenceSaysWhyAndShowsNoData() {
    QTemporaryDir refs;
    gpulab::test::writeFile(refs.filePath("training-loop.jsonl"),
                            R"({"event":"reference","lesson":"training-loop","gpu":"NVIDIA H100 80GB HBM3","date":"2026-11-23"})" "\n{not json\n");
    MainWindow w(gpulab::course::kEmbeddedRoot, progressPath());
    w.setReferenceRunsRoot(refs.path());
    w.show();
    QVERIFY(w.selectLesson("training-loop"));
    QCheckBox* box = w.plotPanel()->referenceCheckBox();
    QVERIFY(box->isVisible());
    QVERIFY(!box->isEnabled());
    QVERIFY2(box->toolTip().contains(refs.filePath("training-loop.jsonl") + ":2: invalid JSON"), qPrintable(box->toolTip()));
    w.plotPanel()->setShowReference(true);
    QCOMPARE(referenceGraphCount(w), 0);
  }

  void closingMidRunShutsDownCleanly() {
    auto* w = new MainWindow(gpulab::course::kEmbeddedRoot, progressPath());
    w->show();
    startRegression(*w, 1000);
    QTRY_VERIFY_WITH_TIMEOUT(w->plotPanel()->pointCount(Plot::Loss) > 0, 10000);
    QElapsedTimer t;
    t.start();
    w->close();
    delete w;
    QVERIFY(t.elapsed() < 2000);
  }
};

QTEST_MAIN(TestGui)
#include "test_gui.moc"
