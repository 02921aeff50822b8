// A code cell as the learner uses it (offscreen): edit the code, run it, read the output and the
// traceback, stop an endless loop within 100 ms, reset to the lesson's code and undo the reset. The
// cells of a NotebookSession share one Python session (the build tree's gpulab package).
#include <QApplication>
#include <QDir>
#include <QElapsedTimer>
#include <QFontInfo>
#include <QLabel>
#include <QLineEdit>
#include <QPlainTextEdit>
#include <QPushButton>
#include <QScrollArea>
#include <QScrollBar>
#include <QTemporaryDir>
#include <QTextBlock>
#include <QVBoxLayout>
#include <QWheelEvent>
#include <QtTest>

#include "app/course/course.h"
#include "app/gui/code_cell.h"
#include "app/gui/lesson_page.h"
#include "app/gui/main_window.h"
#include "app/notebook/python_environment.h"

using gpulab::app::CodeCell;
using gpulab::app::MainWindow;
using gpulab::app::NotebookSession;

namespace {

QPushButton* button(CodeCell& cell, const char* name) { return cell.findChild<QPushButton*>(name); }

// Clicks Run and waits until the cell has finished.
bool runAndWait(CodeCell& cell) {
  button(cell, "cellRun")->click();
  return QTest::qWaitFor([&] { return !cell.running(); }, 30000);
}

QString status(CodeCell& cell) { return cell.findChild<QLabel*>("cellStatus")->text(); }

// A wheel turned over `w` (a notch is 120), as the mouse does it.
void turnWheel(QWidget* w, QPoint angle, Qt::KeyboardModifiers modifiers = Qt::NoModifier) {
  const QPointF at(w->width() / 2.0, w->height() / 2.0);
  QWheelEvent e(at, w->mapToGlobal(at), QPoint(), angle, Qt::NoButton, modifiers, Qt::NoScrollPhase, false);
  QApplication::sendEvent(w, &e);
}

// A cell that ignores Stop's interrupt, once it prints that it does.
const char* kDeafLoop = "import signal\nsignal.signal(signal.SIGINT, signal.SIG_IGN)\nprint('ignoring')\nwhile True:\n    pass";

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

  // Issue 48, 4.8: Reset makes a fresh cell -- the lesson's code, no output, no traceback, "In [ ]".
  // Before, the lesson's code came back under the traceback of the learner's.
  void resetClearsTheOutputErrorAndCount() {
    NotebookSession session;
    CodeCell cell("z", "print('lesson')");
    session.addCell(&cell);
    session.start(false);
    cell.setCode("print('mine')\n1 / 0");
    QVERIFY(runAndWait(cell));
    QVERIFY2(cell.outputText().contains("mine") && cell.outputText().contains("ZeroDivisionError"), qPrintable(cell.outputText()));
    QCOMPARE(status(cell), QString("In [1]"));
    button(cell, "cellReset")->click();
    QCOMPARE(cell.code(), QString("print('lesson')"));
    QCOMPARE(cell.outputText(), QString());
    QVERIFY(cell.output()->isHidden());
    QVERIFY(cell.outputNotice()->isHidden());
    QCOMPARE(status(cell), QString("In [ ]"));
    QVERIFY(!button(cell, "cellReset")->isEnabled());  // nothing left to reset
    cell.editor()->undo();                               // the learner's code comes back; the old output does not
    QCOMPARE(cell.code(), QString("print('mine')\n1 / 0"));
    QCOMPARE(cell.outputText(), QString());
    cell.editor()->redo();
    // The lesson's own code, run: Reset is offered to clear its output too.
    QVERIFY(runAndWait(cell));
    QCOMPARE(cell.outputText(), QString("lesson\n"));
    QCOMPARE(status(cell), QString("In [2]"));  // the session counts on
    QVERIFY(button(cell, "cellReset")->isEnabled());
    button(cell, "cellReset")->click();
    QCOMPARE(cell.outputText(), QString());
    QCOMPARE(status(cell), QString("In [ ]"));
    QCOMPARE(cell.code(), QString("print('lesson')"));
  }

  // Issue 48, 4.8: a vertical wheel over a cell scrolls the page when the cell has nothing to scroll
  // that way (over a long line it scrolled the cell sideways); sideways only with a horizontal wheel
  // or Shift. An output taller than its box scrolls its own lines first.
  void theWheelScrollsThePageNotTheCellSideways() {
    QScrollArea page;
    page.setWidgetResizable(true);
    auto* column = new QWidget;
    auto* layout = new QVBoxLayout(column);
    auto* cell = new CodeCell("w", "x = 1\nprint('" + QString(300, 'a') + "')");
    layout->addWidget(cell);
    layout->addSpacing(3000);  // a page taller than the window
    page.setWidget(column);
    page.resize(500, 400);
    page.show();
    QVERIFY(QTest::qWaitForWindowExposed(&page));
    cell->markQueued();
    cell->markStarted(1);
    cell->appendOutput("stdout", QString(300, 'b') + "\nshort\n");
    QCoreApplication::processEvents();
    QScrollBar* pageBar = page.verticalScrollBar();
    for (QPlainTextEdit* box : {cell->editor(), cell->output()}) {
      const QByteArray name = box->objectName().toUtf8();
      pageBar->setValue(0);
      QVERIFY2(box->horizontalScrollBar()->maximum() > 0, name + ": its long line scrolls sideways");
      box->horizontalScrollBar()->setValue(0);
      turnWheel(box->viewport(), QPoint(0, -120));
      QVERIFY2(pageBar->value() > 0, name + ": the page did not scroll");
      QVERIFY2(box->horizontalScrollBar()->value() == 0, name + ": the cell scrolled sideways");
      const int pageAt = pageBar->value();
      turnWheel(box->viewport(), QPoint(-120, 0));  // a horizontal wheel (tilt, a touchpad)
      QVERIFY2(box->horizontalScrollBar()->value() > 0, name);
      QCOMPARE(pageBar->value(), pageAt);
      box->horizontalScrollBar()->setValue(0);
      turnWheel(box->viewport(), QPoint(0, -120), Qt::ShiftModifier);
      QVERIFY2(box->horizontalScrollBar()->value() > 0, name + ": Shift+wheel scrolls sideways");
      QCOMPARE(pageBar->value(), pageAt);
      // Over the cell's horizontal bar too (the page, scrolling, brings it under a resting pointer):
      // Qt's own scroll bar took the vertical wheel and scrolled the cell sideways.
      box->horizontalScrollBar()->setValue(0);
      turnWheel(box->horizontalScrollBar(), QPoint(0, -120));
      QVERIFY2(box->horizontalScrollBar()->value() == 0, name + ": the wheel over its scroll bar scrolled it sideways");
      QVERIFY2(pageBar->value() > pageAt, name + ": the page did not scroll");
    }
    // An output longer than its box: its own lines first, then the page.
    QString many;
    for (int i = 0; i < 100; ++i) many += QString("line %1\n").arg(i);
    cell->appendOutput("stdout", many);
    QCoreApplication::processEvents();
    QScrollBar* own = cell->output()->verticalScrollBar();
    QVERIFY(own->maximum() > 0);
    pageBar->setValue(0);
    turnWheel(cell->output()->viewport(), QPoint(0, -120));
    QVERIFY(own->value() > 0);
    QCOMPARE(pageBar->value(), 0);
    own->setValue(own->maximum());
    turnWheel(cell->output()->viewport(), QPoint(0, -120));
    QVERIFY(pageBar->value() > 0);
  }

  // The room for the horizontal scroll bar stays from the moment the bar appears until the code changes:
  // a cell that shrank back when its bar went away, on a page whose own scroll bar came and went with
  // the cell's height, froze the window at 1280 x 800 (lessons 07 and 16: the page's bar narrowed the
  // cell, the cell's bar came, the cell grew, ... for ever). And within 30 lines no vertical bar shows.
  void theRoomForTheScrollBarStaysUntilTheCodeChanges() {
    const QString longLine = "print('" + QString(120, 'x') + "')";
    CodeCell cell("r", "x = 1\n" + longLine);
    cell.resize(400, 300);
    cell.show();
    QVERIFY(QTest::qWaitForWindowExposed(&cell));
    QCoreApplication::processEvents();
    QPlainTextEdit* editor = cell.editor();
    QVERIFY(editor->horizontalScrollBar()->maximum() > 0);
    QCOMPARE(editor->verticalScrollBarPolicy(), Qt::ScrollBarAlwaysOff);
    const int withBar = editor->height();
    cell.resize(4000, 300);  // wide enough for the line: the bar goes
    QCoreApplication::processEvents();
    QCOMPARE(editor->horizontalScrollBar()->maximum(), 0);
    QCOMPARE(editor->height(), withBar);  // and its room stays
    cell.resize(400, 300);
    QCoreApplication::processEvents();
    QCOMPARE(editor->height(), withBar);  // the bar back: the same height, nothing moved
    // New code is measured afresh: short lines, no bar, no room for one.
    cell.resize(4000, 300);
    editor->setPlainText("x = 1\ny = 2");
    QCoreApplication::processEvents();
    QVERIFY2(editor->height() < withBar, qPrintable(QString("%1 >= %2").arg(editor->height()).arg(withBar)));
  }

  // Issue 48, 4.8: long lines are neither cut off nor wrapped -- the editor and the output scroll
  // sideways, the output is monospace (memory_summary()'s and the profiler's tables keep their
  // columns) and as tall as what it shows up to kOutputMaxLines lines, then it scrolls.
  void longLinesScrollSidewaysAndTheOutputGrowsWithItsText() {
    CodeCell cell("l", "print('" + QString(400, 'x') + "')");
    cell.resize(500, 300);
    cell.show();
    QVERIFY(QTest::qWaitForWindowExposed(&cell));
    QCoreApplication::processEvents();
    QPlainTextEdit* editor = cell.editor();
    QCOMPARE(editor->lineWrapMode(), QPlainTextEdit::NoWrap);
    QVERIFY(editor->horizontalScrollBar()->maximum() > 0 && editor->horizontalScrollBar()->isVisible());
    // The bar is under the code, not over it: both lines' room is there (the cell shows 2 at least).
    QVERIFY2(editor->viewport()->height() >= 2 * editor->fontMetrics().lineSpacing(), qPrintable(QString::number(editor->viewport()->height())));
    QPlainTextEdit* out = cell.output();
    QCOMPARE(out->lineWrapMode(), QPlainTextEdit::NoWrap);
    // Monospace as it reads: every character as wide as the next. (Not QFontInfo::fixedPitch(): Qt asks
    // fontconfig's spacing, and Noto Sans Mono -- Debian's monospace once imagemagick brings it --
    // says "dual" there, for a few wide glyphs, though its Latin letters and digits are all one width.)
    const QFontMetrics columns(out->font());
    QCOMPARE(columns.horizontalAdvance("iiiiiiii"), columns.horizontalAdvance("MMMMMMMM"));
    QCOMPARE(columns.horizontalAdvance("........"), columns.horizontalAdvance("00000000"));
    cell.markQueued();
    cell.markStarted(1);
    cell.appendOutput("stdout", "one line\n");
    QCoreApplication::processEvents();
    const int one = out->height();
    QCOMPARE(out->verticalScrollBar()->maximum(), 0);
    // A table like memory_summary()'s: 12 rows of 120 columns, each a line of its own.
    QString table;
    for (int i = 0; i < 12; ++i) table += "|" + QString(118, i % 4 ? ' ' : '-') + "|\n";
    cell.appendOutput("stdout", table);
    QCoreApplication::processEvents();
    QVERIFY2(out->height() > one + 8 * out->fontMetrics().lineSpacing(), qPrintable(QString("%1 then %2").arg(one).arg(out->height())));
    QCOMPARE(out->verticalScrollBar()->maximum(), 0);  // all 13 lines in view
    QVERIFY(out->horizontalScrollBar()->maximum() > 0 && out->horizontalScrollBar()->isVisible());
    for (QTextBlock b = out->document()->begin(); b.isValid(); b = b.next()) QCOMPARE(b.layout()->lineCount(), 1);  // not wrapped
    // Past the cap it stops growing and scrolls.
    QString more;
    for (int i = 0; i < 200; ++i) more += QString("row %1\n").arg(i);
    cell.appendOutput("stdout", more);
    QCoreApplication::processEvents();
    const int capped = out->height();
    QVERIFY(capped <= (CodeCell::kOutputMaxLines + 3) * out->fontMetrics().lineSpacing() + out->horizontalScrollBar()->sizeHint().height());
    QVERIFY(out->verticalScrollBar()->maximum() > 0);
    cell.appendOutput("stdout", more);
    QCoreApplication::processEvents();
    QCOMPARE(out->height(), capped);
  }

  // ---- Issue 48, section 3: what the window shows when a cell misbehaves.

  // A Stop the cell ignores: the button says it is stopping, and after the grace period the session is
  // ended and the cell says so; the next Run starts a new session. Before, Stop did nothing.
  void stopEndsACellThatIgnoresTheInterrupt() {
    NotebookSession session;
    CodeCell deaf("s1", kDeafLoop), after("s2", "print('a new session')");
    session.addCell(&deaf);
    session.addCell(&after);
    session.start(false);
    button(deaf, "cellRun")->click();
    QVERIFY(QTest::qWaitFor([&] { return deaf.outputText() == "ignoring\n"; }, 30000));
    button(deaf, "cellStop")->click();
    QVERIFY(!button(deaf, "cellStop")->isEnabled());
    QCOMPARE(button(deaf, "cellStop")->text(), QString("■ Stopping…"));
    QVERIFY2(QTest::qWaitFor([&] { return !deaf.running(); }, 20000), "Stop did not end a cell that ignores SIGINT");
    QVERIFY2(deaf.outputText().contains("Stop ended the Python session") && deaf.outputText().contains("the next Run starts a new session"),
             qPrintable(deaf.outputText()));
    QCOMPARE(status(deaf), QString("In [1]"));
    QCOMPARE(button(deaf, "cellStop")->text(), QString("■ Stop"));
    QVERIFY(runAndWait(after));
    QCOMPARE(after.outputText(), QString("a new session\n"));
    QCOMPARE(status(after), QString("In [1]"));  // counted from 1 again: a new session
  }

  // Restart while one cell runs (ignoring the interrupt) and another waits: both are idle at once,
  // the running one says its session was restarted, the queued one shows no count. Before, restart
  // blocked the window for a second and the cells kept showing In [*].
  void restartResetsEveryCellsState() {
    NotebookSession session;
    CodeCell deaf("r1", kDeafLoop), queued("r2", "print('queued')"), fresh("r3", "print('fresh')");
    session.addCell(&deaf);
    session.addCell(&queued);
    session.addCell(&fresh);
    session.start(false);
    button(deaf, "cellRun")->click();
    button(queued, "cellRun")->click();
    QVERIFY(QTest::qWaitFor([&] { return deaf.outputText() == "ignoring\n"; }, 30000));
    QCOMPARE(status(queued), QString("In [*]"));
    session.restart();
    // At once, not after the old process has gone.
    QVERIFY(!deaf.running() && !queued.running());
    QCOMPARE(status(deaf), QString("In [1]"));
    QCOMPARE(status(queued), QString("In [ ]"));
    QVERIFY(button(deaf, "cellRun")->isEnabled() && !button(deaf, "cellStop")->isEnabled());
    QVERIFY2(deaf.outputText().contains("restarted while this cell ran"), qPrintable(deaf.outputText()));
    QVERIFY2(queued.outputText().contains("Not run"), qPrintable(queued.outputText()));
    QVERIFY(runAndWait(fresh));
    QCOMPARE(fresh.outputText(), QString("fresh\n"));
  }

  // input() in a cell: a box under it takes the answer; the prompt and the answer show in the output.
  // Before, input() read the kernel's own command channel and the next cell never finished.
  void inputGetsABoxUnderTheCell() {
    NotebookSession session;
    CodeCell asks("i1", "name = input('Your name? ')\nprint('Hello,', name)"), next("i2", "print(len(name))");
    session.addCell(&asks);
    session.addCell(&next);
    session.start(false);
    QWidget* box = asks.findChild<QWidget*>("cellInputRow");  // the prompt and the field
    QVERIFY(box->isHidden());
    button(asks, "cellRun")->click();
    button(next, "cellRun")->click();
    QVERIFY(QTest::qWaitFor([&] { return !box->isHidden(); }, 30000));
    QCOMPARE(asks.findChild<QWidget*>("cellInputRow")->findChild<QLabel*>()->text(), QString("Your name? "));
    QTest::keyClicks(asks.inputField(), "Ada");
    QTest::keyClick(asks.inputField(), Qt::Key_Return);
    QVERIFY(box->isHidden());
    QVERIFY(QTest::qWaitFor([&] { return !next.running(); }, 30000));
    QCOMPARE(asks.outputText(), QString("Your name? Ada\nHello, Ada\n"));
    QCOMPARE(next.outputText(), QString("3\n"));
  }

  // A cell that prints 30 MB: the window keeps the first kCellOutputLimit characters, says it cut
  // them, how much the cell printed and links the file with the whole; the window stays responsive
  // meanwhile. Before, all of it went into the output box (100 MB: 25 s unresponsive, 1 GB).
  void aHugeOutputIsCutWithANotice() {
    QTemporaryDir dir;
    QVERIFY(dir.isValid());
    NotebookSession session;
    session.setWorkingDirectory(dir.path());
    CodeCell big("o1", "import sys\nsys.stdout.write('x' * 30_000_000)\nprint('end')"), small("o2", "print('small')");
    session.addCell(&big);
    session.addCell(&small);
    session.start(false);
    big.resize(900, 400);
    big.show();  // laid out as in the window: a long line's layout is what held the window
    // The event loop's longest pause while the output comes, as the learner would feel it.
    QElapsedTimer sinceTick;
    qint64 longestPause = 0;
    QTimer tick;
    connect(&tick, &QTimer::timeout, this, [&] {
      longestPause = std::max(longestPause, sinceTick.restart());
    });
    sinceTick.start();
    tick.start(20);
    QVERIFY(runAndWait(big));
    tick.stop();
    qInfo("the longest pause of the event loop while 30 MB were printed: %lld ms", longestPause);
    QVERIFY2(longestPause < 10000, qPrintable(QString("the window did not answer for %1 ms").arg(longestPause)));  // a hang's bound
    const QString out = big.outputText();
    QCOMPARE(qint64{out.count('x')}, gpulab::app::kCellOutputLimit);  // one line, shown in lines of 2,000
    QVERIFY2(out.size() < gpulab::app::kCellOutputLimit * 1.01, qPrintable(QString::number(out.size())));
    QVERIFY(out.startsWith(QString(2000, 'x') + "\n" + QString(2000, 'x') + "\n"));
    QVERIFY2(out.contains("the output goes on: see below"), qPrintable(out.right(200)));
    QLabel* notice = big.outputNotice();
    QVERIFY(!notice->isHidden());
    const QString file = QDir(dir.path()).filePath(".gpulab-output/cell-o1.txt");
    QVERIFY2(notice->text().contains("Output cut: this cell printed 30,000,004 characters, and the window shows the first 1,000,000") &&
                 notice->text().contains(QUrl::fromLocalFile(file).toString(QUrl::FullyEncoded).toHtmlEscaped()) &&
                 notice->text().contains("/.gpulab-output/cell-o1.txt</a>"),
             qPrintable(notice->text()));
    QCOMPARE(QFileInfo(file).size(), qint64{30'000'004});
    // A cell under the limit shows no notice; a new run of the big one starts without the old notice.
    QVERIFY(runAndWait(small));
    QVERIFY(small.outputNotice()->isHidden());
    big.setCode("print('short now')");
    QVERIFY(runAndWait(big));
    QVERIFY(big.outputNotice()->isHidden());
    QCOMPARE(big.outputText(), QString("short now\n"));
  }

  // The cells of a lesson run in its working folder under the user's data folder (beside the progress
  // file, here a temporary one), shown in the bar above the cells. Before, they ran where the window
  // was started, and lesson 09's trace.json landed there.
  void aLessonsCellsRunInItsWorkingFolder() {
    QTemporaryDir data;
    QVERIFY(data.isValid());
    MainWindow w(gpulab::course::kEmbeddedRoot, data.filePath("progress.json"));
    QVERIFY(w.selectLesson("training-loop"));
    QTRY_VERIFY(!w.lessonLoading());
    const QString folder = QDir(data.path()).filePath("work/training-loop");
    QCOMPARE(w.lessonPage()->workingFolder(), folder);
    QLabel* shown = w.lessonPage()->findChild<QLabel*>("workingFolder");
    QVERIFY(shown && !shown->isHidden());
    QVERIFY2(shown->text().startsWith("Working folder: ") && shown->text().contains(QDir::toNativeSeparators(folder).toHtmlEscaped()),
             qPrintable(shown->text()));
    CodeCell* cell = w.lessonPage()->cells().front();  // the setup: it runs by itself
    cell->setCode("import os\nprint(os.getcwd())\nopen('notes.txt', 'w').close()");
    QVERIFY(runAndWait(*cell));
    QCOMPARE(cell->outputText(), QFileInfo(folder).canonicalFilePath() + "\n");
    QVERIFY(QFileInfo::exists(QDir(folder).filePath("notes.txt")));
  }
};

QTEST_MAIN(TestCodeCell)
#include "test_code_cell.moc"
