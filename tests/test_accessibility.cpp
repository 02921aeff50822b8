// Issue 48, 4.9: a learner who uses the keyboard or a screen reader, or a dark desktop.
//   - Every interactive widget of every lesson page (each of its tabs) and of the course map has an
//     accessible name, walked through the accessibility tree as an assistive technology sees it, and
//     no two buttons of a page share one ("Run" of cell 2 is not "Run" of the lab).
//   - A view's description says what it shows now ("loss: 2.31 → 0.42 over epoch 1–30").
//   - Tab visits a lesson page in reading order: the text, each cell's editor then its Run, the
//     exercise, then the run area's controls; Tab in a code editor indents and Ctrl+Tab leaves it.
//   - Under a dark palette the window's text, the plots' axes and curves and the code highlighting
//     keep their contrast (measured on rendered pixels and on the colours chosen).
#include <QAccessible>
#include <QApplication>
#include <QLabel>
#include <QPlainTextEdit>
#include <QPushButton>
#include <QSignalSpy>
#include <QSyntaxHighlighter>
#include <QTabWidget>
#include <QTemporaryDir>
#include <QTextBlock>
#include <QTextLayout>
#include <QtTest>
#include <qcustomplot.h>

#include <cmath>
#include <map>
#include <memory>

#include "app/gui/code_cell.h"
#include "app/gui/exercise_panel.h"
#include "app/gui/lesson_page.h"
#include "app/gui/main_window.h"
#include "app/gui/plot_panel.h"
#include "app/gui/run_panel.h"
#include "app/gui/theme.h"
#include "app/gui/view_widgets.h"
#include "app/notebook/python_environment.h"

using gpulab::app::CodeCell;
using gpulab::app::MainWindow;
namespace theme = gpulab::app::theme;

namespace {

// What a screen reader announces as a control or a view: these need a name.
bool needsName(QAccessible::Role role) {
  switch (role) {
    case QAccessible::PushButton: case QAccessible::CheckBox: case QAccessible::RadioButton:
    case QAccessible::ComboBox: case QAccessible::EditableText: case QAccessible::SpinBox:
    case QAccessible::Slider: case QAccessible::PageTab: case QAccessible::ButtonMenu:
    case QAccessible::ButtonDropDown: case QAccessible::Link: case QAccessible::Table: case QAccessible::Tree:
    case QAccessible::List: case QAccessible::Chart: case QAccessible::ProgressBar:
      return true;
    default:
      return false;
  }
}

struct Walk {
  QStringList unnamed;
  std::map<QString, QStringList> buttons;  // name -> where
  int named = 0;
};

QString describe(QAccessibleInterface* iface) {
  QObject* o = iface->object();
  if (!o) return "?";
  return QString(o->metaObject()->className()) + (o->objectName().isEmpty() ? "" : "#" + o->objectName());
}

void walk(QAccessibleInterface* iface, Walk& out, const QString& path, int depth = 0) {
  if (!iface || depth > 60) return;
  const QAccessible::State state = iface->state();
  if (state.invisible) return;
  const QString name = iface->text(QAccessible::Name).trimmed();
  const QString here = path + "/" + describe(iface);
  if (needsName(iface->role()) || state.focusable) {
    if (name.isEmpty()) out.unnamed << QString("%1 (role %2)").arg(here).arg(int(iface->role()));
    else ++out.named;
  }
  if (iface->role() == QAccessible::PushButton && !name.isEmpty()) out.buttons[name] << here;
  // A table's, a tree's or a list's items are named by their text: their containers are checked.
  if (iface->role() == QAccessible::Table || iface->role() == QAccessible::Tree || iface->role() == QAccessible::List) return;
  for (int i = 0; i < iface->childCount(); ++i) walk(iface->child(i), out, here, depth + 1);
}

// Walks the window once per tab of each of its tab widgets: a screen reader reaches them all.
void walkEveryTab(MainWindow& w, const QString& page, QStringList& problems, int& named) {
  const auto tabWidgets = w.findChildren<QTabWidget*>();
  for (QTabWidget* tabs : tabWidgets) {
    if (!tabs->isVisible()) continue;
    const int was = tabs->currentIndex();
    for (int t = 0; t < tabs->count(); ++t) {
      tabs->setCurrentIndex(t);
      QCoreApplication::processEvents();
      Walk out;
      walk(QAccessible::queryAccessibleInterface(&w), out, page + "[" + tabs->tabText(t) + "]");
      problems << out.unnamed;
      named += out.named;
      for (const auto& [name, where] : out.buttons)
        if (where.size() > 1) problems << QString("%1: %2 buttons named \"%3\"").arg(page).arg(where.size()).arg(name);
    }
    tabs->setCurrentIndex(was);
  }
}

bool showLesson(MainWindow& w, const QString& id) {
  if (!w.selectLesson(id)) return false;
  if (!QTest::qWaitFor([&] { return !w.lessonLoading(); }, 10000)) return false;
  QCoreApplication::processEvents();  // a widget added to a shown layout is shown by a queued call
  return true;
}

// The window as a learner sees it: 1280x800, on screen, on lesson `id` if one is named.
std::unique_ptr<MainWindow> openWindow(const QString& progressPath, const QString& id = {}) {
  auto w = std::make_unique<MainWindow>(gpulab::course::kEmbeddedRoot, progressPath);
  w->resize(1280, 800);
  w->show();
  if (!QTest::qWaitForWindowExposed(w.get())) return nullptr;
  if (!id.isEmpty() && !showLesson(*w, id)) return nullptr;
  return w;
}

// Presses the run area's Run and waits for the run to end.
bool runTheLab(MainWindow& w) {
  QSignalSpy finished(&w, &MainWindow::runFinished);
  for (QPushButton* b : w.runPanel()->findChildren<QPushButton*>())
    if (b->accessibleName() == "Run the lab") b->click();
  return finished.wait(60000);
}

QPalette darkPalette() {
  QPalette p;
  const QColor window(0x2b, 0x2b, 0x2b), base(0x1e, 0x1e, 0x1e), text(0xe8, 0xe8, 0xe8);
  p.setColor(QPalette::Window, window);
  p.setColor(QPalette::WindowText, text);
  p.setColor(QPalette::Base, base);
  p.setColor(QPalette::AlternateBase, window);
  p.setColor(QPalette::Text, text);
  p.setColor(QPalette::Button, window);
  p.setColor(QPalette::ButtonText, text);
  p.setColor(QPalette::ToolTipBase, base);
  p.setColor(QPalette::ToolTipText, text);
  p.setColor(QPalette::PlaceholderText, QColor(0x9a, 0x9a, 0x9a));
  p.setColor(QPalette::Highlight, QColor(0x3d, 0x7a, 0xd6));
  p.setColor(QPalette::HighlightedText, Qt::white);
  p.setColor(QPalette::Link, QColor(0x8a, 0xb4, 0xf8));
  p.setColor(QPalette::BrightText, Qt::white);
  for (QPalette::ColorRole role : {QPalette::WindowText, QPalette::Text, QPalette::ButtonText})
    p.setColor(QPalette::Disabled, role, QColor(0x80, 0x80, 0x80));
  return p;
}

// The colours of a rendered plot: the background (the commonest pixel) and how many pixels keep at
// least `ratio` against it.
struct Pixels {
  QColor background;
  int contrasting = 0;
};
Pixels measure(const QImage& image, double ratio) {
  std::map<QRgb, int> counts;
  for (int y = 0; y < image.height(); ++y)
    for (int x = 0; x < image.width(); ++x) ++counts[image.pixel(x, y)];
  QRgb common = 0;
  int most = 0;
  for (const auto& [c, n] : counts)
    if (n > most) most = n, common = c;
  Pixels out;
  out.background = QColor(common);
  for (const auto& [c, n] : counts)
    if (theme::contrast(QColor(c), out.background) >= ratio) out.contrasting += n;
  return out;
}

}  // namespace

class TestAccessibility : public QObject {
  Q_OBJECT
  QTemporaryDir tmp_;
  QPalette light_;

 private slots:
  void initTestCase() { light_ = QApplication::palette(); }
  void cleanup() { QApplication::setPalette(light_); }

  void everyInteractiveWidgetOfEveryLessonHasAName() {
    const auto window = openWindow(tmp_.filePath("names.json"));
    QVERIFY(window);
    MainWindow& w = *window;
    QStringList problems;
    int named = 0;
    w.showWelcome();
    QCoreApplication::processEvents();
    walkEveryTab(w, "course map", problems, named);
    for (const auto& lesson : w.course().lessons) {
      QVERIFY(showLesson(w, lesson.id));
      walkEveryTab(w, lesson.id, problems, named);
    }
    problems.removeDuplicates();
    QVERIFY2(problems.isEmpty(), qPrintable(problems.join('\n')));
    QVERIFY2(named > 16 * 20, qPrintable(QString::number(named)));  // the walk saw the pages' controls
    // A cell's controls say which cell they belong to.
    QVERIFY(showLesson(w, "training-loop"));
    CodeCell* second = w.lessonPage()->cells().at(1);
    QCOMPARE(second->findChild<QPushButton*>("cellRun")->accessibleName(), QString("Run cell 2"));
    QCOMPARE(second->editor()->accessibleName(), QString("Code of cell 2"));
  }

  // After a run each view is named by its title and described by what it shows.
  void aViewDescribesWhatItShows() {
    if (gpulab::notebook::buildTreePackageDir().isEmpty()) QSKIP("the gpulab package is not built beside this test");
    const auto window = openWindow(tmp_.filePath("views.json"), "training-loop");
    QVERIFY(window);
    MainWindow& w = *window;
    w.runPanel()->parameterControl("epochs")->setProperty("value", 4);
    QVERIFY(runTheLab(w));
    QCoreApplication::processEvents();
    const QStringList views = w.plotPanel()->viewIds();
    QVERIFY(!views.isEmpty());
    int described = 0;
    for (const QString& id : views) {
      gpulab::app::ViewWidget* v = w.plotPanel()->view(id);
      v->refresh();
      QAccessibleInterface* iface = QAccessible::queryAccessibleInterface(v->view());
      QVERIFY(iface);
      QCOMPARE(iface->text(QAccessible::Name), v->title());
      const QString text = iface->text(QAccessible::Description);
      QVERIFY2(!text.isEmpty(), qPrintable(id));
      if (text.contains("→")) ++described;
    }
    QVERIFY(described > 0);
    // The loss curve over the epochs run: from its first value to its last.
    gpulab::app::ViewWidget* loss = w.plotPanel()->view(views.first());
    const QString text = loss->description();
    QVERIFY2(text.contains(QRegularExpression("^train loss: [0-9.]+ → [0-9.]+ over step [0-9]+–64")), qPrintable(text));
  }

  void anEmptyViewSaysSo() {
    gpulab::lab::ViewSpec spec;
    spec.id = "loss";
    spec.title = "Loss";
    spec.kind = gpulab::lab::ViewKind::Line;
    spec.x = {{"step", ""}};
    spec.y = {"loss", ""};
    std::unique_ptr<gpulab::app::ViewWidget> v(gpulab::app::ViewWidget::create(1, spec));
    v->declare(1, spec);
    v->refresh();
    QCOMPARE(v->view()->accessibleDescription(), QString("Nothing measured yet"));
    QCOMPARE(v->view()->accessibleName(), QString("Loss"));
    for (int step = 1; step <= 3; ++step) v->add(1, gpulab::lab::Point{"loss", "train", {double(step)}, 4.0 - step});
    v->refresh();
    QCOMPARE(v->view()->accessibleDescription(), QString("train: 3 → 1 over step 1–3"));
  }

  // Tab goes through a lesson in reading order and never gets caught in a code editor.
  void theKeyboardReadsALessonInOrder() {
    const auto window = openWindow(tmp_.filePath("keys.json"));
    QVERIFY(window);
    MainWindow& w = *window;
    QApplication::setActiveWindow(&w);
    QVERIFY(showLesson(w, "training-loop"));
    const auto cells = w.lessonPage()->cells();
    const auto panels = w.lessonPage()->findChildren<gpulab::app::ExercisePanel*>();
    QVERIFY(cells.size() >= 2 && !panels.isEmpty());
    // From the lesson's first text, Tab after Tab (Ctrl+Tab out of an editor, as a learner would).
    QWidget* start = w.lessonPage()->findChild<QWidget*>("lessonText0");
    QVERIFY(start);
    start->setFocus(Qt::TabFocusReason);
    QTRY_COMPARE(QApplication::focusWidget(), start);
    QList<QWidget*> visited;
    for (int i = 0; i < 400 && visited.size() < 400; ++i) {
      QWidget* f = QApplication::focusWidget();
      if (!f) break;
      if (!visited.isEmpty() && f == visited.first()) break;  // round the window once
      visited << f;
      const bool editor = qobject_cast<QPlainTextEdit*>(f) && !static_cast<QPlainTextEdit*>(f)->isReadOnly();
      QTest::keyClick(f, Qt::Key_Tab, editor ? Qt::ControlModifier : Qt::NoModifier);
    }
    auto at = [&](QWidget* x) { return static_cast<int>(visited.indexOf(x)); };
    QStringList order;
    for (QWidget* x : visited) order << (x->accessibleName().isEmpty() ? QString(x->metaObject()->className()) : x->accessibleName());
    const QString seen = order.join(" | ");
    int last = -1;
    for (CodeCell* cell : cells) {
      const int editor = at(cell->editor()), run = at(cell->findChild<QPushButton*>("cellRun"));
      QVERIFY2(editor > last && run == editor + 1, qPrintable(QString("cell %1: editor at %2, Run at %3, after %4\n%5").arg(cell->id()).arg(editor).arg(run).arg(last).arg(seen)));
      last = run;
    }
    // The exercise's panel after its cell, the run area after the lesson.
    const auto exerciseButtons = panels.first()->findChildren<QPushButton*>();
    int exercise = -1;
    for (QPushButton* b : exerciseButtons)
      if (at(b) >= 0) exercise = exercise < 0 ? at(b) : std::min(exercise, at(b));
    QVERIFY2(exercise > at(cells.last()->editor()), qPrintable(seen));
    int runArea = -1;
    for (QPushButton* b : w.runPanel()->findChildren<QPushButton*>())
      if (b->accessibleName() == "Run the lab") runArea = at(b);
    QVERIFY2(runArea > exercise, qPrintable(seen));
    QVERIFY2(at(w.runPanel()->parameterControl("epochs")) > runArea, qPrintable(seen));
  }

  void tabInACodeEditorIndentsWithSpaces() {
    CodeCell cell("1", "x = 1\ny = 2\n");
    cell.show();
    QVERIFY(QTest::qWaitForWindowExposed(&cell));
    QPlainTextEdit* editor = cell.editor();
    editor->setFocus();
    QTextCursor c = editor->textCursor();
    c.movePosition(QTextCursor::Start);
    editor->setTextCursor(c);
    QTest::keyClick(editor, Qt::Key_Tab);
    QCOMPARE(cell.code(), QString("    x = 1\ny = 2\n"));
    // A selection of two lines: both move one indent.
    c.movePosition(QTextCursor::Start);
    c.movePosition(QTextCursor::Down, QTextCursor::KeepAnchor);
    c.movePosition(QTextCursor::EndOfBlock, QTextCursor::KeepAnchor);
    editor->setTextCursor(c);
    QTest::keyClick(editor, Qt::Key_Tab);
    QCOMPARE(cell.code(), QString("        x = 1\n    y = 2\n"));
    // Ctrl+Tab leaves the editor for the cell's Run.
    QTest::keyClick(editor, Qt::Key_Tab, Qt::ControlModifier);
    QCOMPARE(QApplication::focusWidget(), cell.findChild<QPushButton*>("cellRun"));
    QCOMPARE(cell.code(), QString("        x = 1\n    y = 2\n"));
  }

  // The colours the window chooses keep WCAG's contrast on a dark palette and a light one.
  void chosenColoursKeepTheirContrast_data() {
    QTest::addColumn<bool>("dark");
    QTest::newRow("light") << false;
    QTest::newRow("dark") << true;
  }
  void chosenColoursKeepTheirContrast() {
    QFETCH(bool, dark);
    const QPalette p = dark ? darkPalette() : light_;
    QCOMPARE(theme::isDark(p), dark);
    for (theme::Ink k : {theme::Ink::Good, theme::Ink::Bad, theme::Ink::Warning, theme::Ink::Muted}) {
      QVERIFY(theme::contrast(theme::ink(k, p), p.color(QPalette::Base)) >= theme::kTextContrast);
      QVERIFY(theme::contrast(theme::ink(k, p), p.color(QPalette::Window)) >= theme::kTextContrast);
      // A tinted box keeps the palette's text readable.
      QVERIFY(theme::contrast(theme::tint(k, p), p.color(QPalette::WindowText)) >= theme::kTextContrast);
    }
    const theme::CodeColours code = theme::codeColours(p);
    for (const QColor& c : {code.keyword, code.builtin, code.number, code.string, code.comment})
      QVERIFY2(theme::contrast(c, p.color(QPalette::Base)) >= theme::kTextContrast, qPrintable(c.name()));
  }

  // A lesson shown under a dark palette: the highlighted code, the plots' pixels and the lesson's
  // text keep their contrast; switching the palette while the window is open redraws in it.
  void aLessonUnderADarkPaletteKeepsItsContrast() {
    if (gpulab::notebook::buildTreePackageDir().isEmpty()) QSKIP("the gpulab package is not built beside this test");
    const auto window = openWindow(tmp_.filePath("dark.json"), "training-loop");
    QVERIFY(window);
    MainWindow& w = *window;
    QVERIFY(runTheLab(w));
    // The desktop turns dark with the window open.
    QApplication::setPalette(darkPalette());
    QCoreApplication::processEvents();
    const QPalette dark = darkPalette();
    // The code: every highlighted character against the editor's background.
    CodeCell* cell = w.lessonPage()->cells().at(1);
    QPlainTextEdit* editor = cell->editor();
    QCOMPARE(editor->palette().color(QPalette::Base), dark.color(QPalette::Base));
    int coloured = 0;
    for (QTextBlock b = editor->document()->begin(); b.isValid(); b = b.next()) {
      for (const QTextLayout::FormatRange& r : b.layout()->formats()) {
        if (!r.format.hasProperty(QTextFormat::ForegroundBrush)) continue;
        ++coloured;
        const QColor c = r.format.foreground().color();
        QVERIFY2(theme::contrast(c, dark.color(QPalette::Base)) >= theme::kTextContrast, qPrintable(c.name() + " in " + b.text()));
      }
    }
    QVERIFY(coloured > 5);
    // A plot: a dark background, its text and axes light on it, each curve at least 3:1.
    gpulab::app::ViewWidget* loss = w.plotPanel()->view(w.plotPanel()->viewIds().first());
    QCustomPlot* plot = loss->plot();
    QVERIFY(plot);
    plot->replot();
    const QImage image = plot->toPixmap(600, 300).toImage();
    const Pixels pixels = measure(image, theme::kTextContrast);
    QVERIFY2(theme::contrast(pixels.background, dark.color(QPalette::Base)) < 1.1, qPrintable(pixels.background.name()));
    QVERIFY2(pixels.contrasting > 400, qPrintable(QString::number(pixels.contrasting)));  // the title, ticks and labels
    QCOMPARE(plot->xAxis->tickLabelColor(), dark.color(QPalette::Text));
    for (int g = 0; g < plot->graphCount(); ++g)
      QVERIFY2(theme::contrast(plot->graph(g)->pen().color(), dark.color(QPalette::Base)) >= theme::kLineContrast, qPrintable(plot->graph(g)->name()));
    // The lesson's text in the palette's text colour on its base.
    auto* text = w.lessonPage()->findChild<QWidget*>("lessonText0");
    QVERIFY2(theme::contrast(text->palette().color(QPalette::Text), w.lessonPage()->findChild<QWidget*>("lessonColumn")->palette().color(QPalette::Base)) >= theme::kTextContrast,
             qPrintable(text->palette().color(QPalette::Text).name() + " on " + w.lessonPage()->findChild<QWidget*>("lessonColumn")->palette().color(QPalette::Base).name()));
    // Back to light: the plot follows.
    QApplication::setPalette(light_);
    QCoreApplication::processEvents();
    QCOMPARE(plot->xAxis->tickLabelColor(), light_.color(QPalette::Text));
  }
};

QTEST_MAIN(TestAccessibility)
#include "test_accessibility.moc"
