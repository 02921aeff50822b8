// The player as a learner uses it (offscreen): every lesson opens, lesson 3 runs with live plots,
// Stop ends a run within 200 ms, Pause holds it, quiz answers are graded and survive a restart,
// a malformed lesson shows its error while the others work, plots export, runs overlay, and closing
// the window mid-run shuts down cleanly.
#include <QDir>
#include <QElapsedTimer>
#include <QFile>
#include <QPlainTextEdit>
#include <QSignalSpy>
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
