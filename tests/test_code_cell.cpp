// A code cell as the learner uses it (offscreen): edit the code, run it, read the output and the
// traceback, stop an endless loop within 100 ms, reset to the lesson's code and undo the reset. The
// cells of a NotebookSession share one Python session (the build tree's gpulab package).
#include <QElapsedTimer>
#include <QLabel>
#include <QPlainTextEdit>
#include <QPushButton>
#include <QtTest>

#include "app/gui/code_cell.h"
#include "app/notebook/python_environment.h"

using gpulab::app::CodeCell;
using gpulab::app::NotebookSession;

namespace {

QPushButton* button(CodeCell& cell, const char* name) { return cell.findChild<QPushButton*>(name); }

// Clicks Run and waits until the cell has finished.
bool runAndWait(CodeCell& cell) {
  button(cell, "cellRun")->click();
  return QTest::qWaitFor([&] { return !cell.running(); }, 30000);
}

}  // namespace

class TestCodeCell : public QObject {
  Q_OBJECT

 private slots:
  void initTestCase() {
    if (gpulab::notebook::buildTreePackageDir().isEmpty()) QSKIP("the gpulab package is not built beside this test");
  }

  void editedCellsRunInOneSession() {
    NotebookSession session;
    CodeCell first("a", "x = 6"), second("b", "print(x)");
    session.addCell(&first);
    session.addCell(&second);
    session.start(false);
    // The learner changes the lesson's code before running it.
    first.editor()->selectAll();
    QTest::keyClicks(first.editor(), "x = 6 * 7");
    QVERIFY(first.edited());
    QVERIFY(button(first, "cellReset")->isEnabled());
    QVERIFY(runAndWait(first));
    QVERIFY(first.outputText().isEmpty());
    QVERIFY(runAndWait(second));
    QCOMPARE(second.outputText(), QString("42\n"));
    QCOMPARE(first.findChild<QLabel*>("cellStatus")->text(), QString("In [1]"));  // counted across the session, as a notebook does
    QCOMPARE(second.findChild<QLabel*>("cellStatus")->text(), QString("In [2]"));
    // Ctrl+Enter runs the cell too.
    second.editor()->setFocus();
    QTest::keyClick(second.editor(), Qt::Key_Return, Qt::ControlModifier);
    QVERIFY(QTest::qWaitFor([&] { return second.findChild<QLabel*>("cellStatus")->text() == "In [3]"; }, 30000));
  }

  void anErrorShowsItsTraceback() {
    NotebookSession session;
    CodeCell cell("c", "def f():\n    return 1 / 0\nf()");
    session.addCell(&cell);
    session.start(false);
    QVERIFY(runAndWait(cell));
    const QString out = cell.outputText();
    QVERIFY2(out.contains("ZeroDivisionError: division by zero") && out.contains("<cell c>") && out.contains("return 1 / 0"),
             qPrintable(out));
  }

  void theLessonsErrorsAreNamed() {
    NotebookSession session;
    CodeCell cell("d", "import torch\ntorch.ones(2, device='cuda') + torch.ones(2)");
    session.addCell(&cell);
    session.start(true);  // the emulated GPU as cuda:0
    QVERIFY(runAndWait(cell));
    QVERIFY2(cell.outputText().startsWith("✗ Tensors on two devices") &&
                 cell.outputText().contains("Expected all tensors to be on the same device"),
             qPrintable(cell.outputText()));
  }

  void stopEndsAnEndlessLoopWithin100ms() {
    NotebookSession session;
    CodeCell loop("e", "n = 0\nwhile True:\n    n += 1"), after("f", "print(n > 0)");
    session.addCell(&loop);
    session.addCell(&after);
    session.start(false);
    button(loop, "cellRun")->click();
    QVERIFY(QTest::qWaitFor([&] { return button(loop, "cellStop")->isEnabled(); }, 30000));  // started
    QTest::qWait(300);
    QVERIFY(loop.running());
    QElapsedTimer clock;
    clock.start();
    button(loop, "cellStop")->click();
    QVERIFY(QTest::qWaitFor([&] { return !loop.running(); }, 5000));
    QVERIFY2(clock.elapsed() < 100, qPrintable(QString("Stop took %1 ms").arg(clock.elapsed())));
    QVERIFY2(loop.outputText().contains("KeyboardInterrupt"), qPrintable(loop.outputText()));
    QVERIFY(runAndWait(after));  // the session is usable, with what the loop left behind
    QCOMPARE(after.outputText(), QString("True\n"));
  }

  void resetBringsBackTheLessonsCodeAndUndoTheEdit() {
    CodeCell cell("g", "print('lesson')");
    cell.editor()->selectAll();
    QTest::keyClicks(cell.editor(), "print('mine')");
    QCOMPARE(cell.code(), QString("print('mine')"));
    button(cell, "cellReset")->click();
    QCOMPARE(cell.code(), QString("print('lesson')"));
    QVERIFY(!cell.edited());
    QVERIFY(!button(cell, "cellReset")->isEnabled());
    cell.editor()->undo();
    QCOMPARE(cell.code(), QString("print('mine')"));
  }
};

QTEST_MAIN(TestCodeCell)
#include "test_code_cell.moc"
