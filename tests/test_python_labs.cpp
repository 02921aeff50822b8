// The labs written in Python in their lessons' folders (app/course/python_lab.h): the shipped ones keep
// the claims their C++ versions' tests asserted, and the mechanism -- a declaration checked when the
// lesson loads, a run in a Python session of its own, Stop, errors -- holds for any lab a lessons
// folder brings.
#include <QTemporaryDir>
#include <QtTest>

#include <chrono>
#include <thread>

#include "app/course/course.h"
#include "app/notebook/python_environment.h"
#include "engine/core/errors.h"
#include "engine/runtime/emulated_gpu.h"
#include "lab_runner.h"
#include "test_util.h"

using namespace gpulab;
using test::RecordingSink;

namespace {

// A shipped lesson's Python lab, as its run blocks make it.
std::unique_ptr<lab::Lab> shippedLab(const char* lessonId, const char* labId) {
  static const course::Course shipped = course::loadCourse();
  const course::Lesson* lesson = shipped.find(lessonId);
  if (!lesson) qFatal("no lesson %s", lessonId);
  return course::makeLab(*lesson, labId);
}

// A lesson folder with a Python lab of its own, "scratch": `code` in scratch_lab.py, one int
// parameter `n` and the measurement "value".
course::Course scratchCourse(const QTemporaryDir& dir, const QByteArray& code) {
  test::writeFile(dir.filePath("01-scratch/scratch_lab.py"), code);
  test::writeFile(dir.filePath("01-scratch/lesson.md"), R"md(---
id: scratch
title: Scratch
chapter: Tests
---
```lab
{"id": "scratch", "title": "Scratch", "code": "scratch_lab.py", "emulated_gpu": true,
 "params": [{"name": "n", "type": "int", "default": 3, "min": 1, "max": 100, "description": "How many"}],
 "measurements": [{"name": "value", "unit": ""}]}
```

```run
{"lab": "scratch", "title": "Run it"}
```
)md");
  return course::loadCourse(dir.path());
}

// What the run threw, "ValueError: " in front when it was one (the type a Python ValueError keeps).
std::string errorOf(lab::Lab& theLab, const std::map<std::string, std::string>& settings = {}) {
  RecordingSink sink;
  try {
    test::runLab(theLab, settings, sink);
  } catch (const ValueError& e) {
    return std::string("ValueError: ") + e.what();
  } catch (const std::exception& e) {
    return e.what();
  }
  return {};
}

// Time -> the live bytes of all categories together, from the memory lab's stacked view.
std::map<double, double> stackedMemory(const RecordingSink& sink) {
  std::map<double, double> stacked;
  for (const char* c : {"parameter", "gradient", "optimizer_state", "activation", "input_batch", "workspace", "other"})
    for (const lab::Point& p : sink.points("memory", c)) stacked[p.x[0]] += p.y;
  return stacked;
}

// A window that takes `hold` over each progress update (Pause held it, or it was slow).
class HoldingSink : public RecordingSink {
 public:
  explicit HoldingSink(std::chrono::milliseconds hold) : hold_(hold) {}
  void send(const lab::Update& u) override {
    if (std::holds_alternative<lab::Progress>(u)) std::this_thread::sleep_for(hold_);
    RecordingSink::send(u);
  }

 private:
  std::chrono::milliseconds hold_;
};

}  // namespace

class PythonLabsTest : public QObject {
  Q_OBJECT

 private slots:
  void initTestCase() {
    if (notebook::buildTreePackageDir().isEmpty()) QSKIP("GPU Lab's Python package is not built (GPULAB_PYTHON=OFF)");
  }

  void devicesLabMeasuresMatmul() {
    RecordingSink sink;
    test::runLab(*shippedLab("device-setup", "devices"), {{"size", "256"}, {"repeats", "3"}}, sink);
    QVERIFY(test::measured(sink, "matmul on cpu") > 0.1);  // GFLOP/s
    if (test::cudaUsable()) QVERIFY(test::measured(sink, "speed-up of cuda:0 over cpu") > 1.0);
    QVERIFY(std::any_of(sink.messages.begin(), sink.messages.end(), [](const std::string& m) { return m.starts_with("device = "); }));
    QVERIFY(std::any_of(sink.messages.begin(), sink.messages.end(), [](const std::string& m) { return m.starts_with("torch.cuda.is_available() -> "); }));
    // Each bar names its size, so a reference run's bar of another n is not read as this one's.
    const auto bars = sink.all<lab::Bar>();
    QVERIFY(!bars.empty());
    for (const lab::Bar& b : bars) QVERIFY2(b.category.ends_with(", n = 256"), b.category.c_str());
    // It shows the machine as it is: without a GPU, nothing claims to be cuda.
    const auto device = sink.all<lab::RunDevice>();
    QCOMPARE(static_cast<int>(device.size()), 1);
    QCOMPARE(QString::fromStdString(device.front().device), test::cudaUsable() ? QString("cuda:0") : QString("cpu"));
    // Issue 48, 4.8: the CPU is a device too, and without a GPU the emulated one stands in (the table
    // was empty on a CPU-only machine): each row says what it is, the emulated GPU labelled so, and
    // the note says how to turn it off.
    const auto devices = sink.rows("devices");
    QCOMPARE(static_cast<int>(devices.size()), 1 + (test::cudaUsable() ? static_cast<int>(cuda::availability().devices.size()) : 1));
    QCOMPARE(std::get<std::string>(devices.front().cells[0]), std::string("cpu"));
    const std::string cpuName = std::get<std::string>(devices.front().cells[1]);
    QVERIFY2(cpuName.find(" cores") != std::string::npos, cpuName.c_str());
    const lab::Value& cpuMemory = devices.front().cells[4];  // bytes, as the OS reports them
    QVERIFY(std::holds_alternative<std::int64_t>(cpuMemory) ? std::get<std::int64_t>(cpuMemory) > 0
                                                            : std::holds_alternative<double>(cpuMemory) && std::get<double>(cpuMemory) > 0);
    if (!test::cudaUsable()) {
      QCOMPARE(std::get<std::string>(devices.back().cells[0]), std::string("cuda:0 (emulated)"));
      const std::string name = std::get<std::string>(devices.back().cells[1]);
      QVERIFY2(name.find("emulated GPU") != std::string::npos, name.c_str());
      const std::string note = sink.checker.find("devices")->note;
      QVERIFY2(note.find("GPULAB_EMULATED_GPU=0") != std::string::npos && note.find("this machine as it is") != std::string::npos, note.c_str());
    }
    // Each timing is repeated, its spread shown: the median between the slowest and fastest round.
    const auto rounds = sink.rows("rounds");
    QCOMPARE(static_cast<int>(rounds.size()), test::cudaUsable() ? 2 : 1);
    for (const lab::Row& r : rounds) {
      const double median = std::get<double>(r.cells[2]), slowest = std::get<double>(r.cells[3]), fastest = std::get<double>(r.cells[4]);
      QVERIFY2(slowest <= median && median <= fastest, qPrintable(QString("%1 %2 %3").arg(slowest).arg(median).arg(fastest)));
    }
    QCOMPARE(std::get<double>(rounds.front().cells[2]), test::measured(sink, "matmul on cpu"));
    // An empty table says why it is empty.
    QCOMPARE(sink.checker.find("devices")->note.starts_with("No usable GPU: "), !test::cudaUsable());
  }

  // The devices lab calls a device faster only when its slowest round beats the other's fastest.
  void devicesLabClaimsASpeedUpOnlyBeyondTheSpread() {
    const course::Course shipped = course::loadCourse();
    QTemporaryDir dir;
    const course::Course c = scratchCourse(dir, shipped.labSource("devices").toUtf8() + R"py(

def run(n):  # the verdict on rounds of seconds per product: the CPU's, then the GPU's
    said = [verdict([2.0, 3.0], [0.5, 1.0], "cuda:0"), verdict([1.0, 2.0], [1.5, 2.5], "cuda:0"), verdict([0.5, 1.0], [2.0, 3.0], "cuda:0")]
    print(" / ".join(said))
    ok = said[0].startswith("cuda:0 is faster") and said[1].startswith("No clear difference") and said[2].startswith("The CPU is faster")
    lab.measurement("value", int(ok))
)py");
    RecordingSink sink;
    test::runLab(*course::makeLab(c.lessons[0], "scratch"), {}, sink);
    QCOMPARE(test::measured(sink, "value"), 1.0);
  }

  // Stop ends the devices lab within 2 s, between products and within one product too large to run
  // between two checks (8192 x 8192 takes ~10 s on a laptop's CPU): the interrupt, then the session.
  void devicesLabStopsWithinTwoSeconds_data() {
    QTest::addColumn<QString>("size");
    QTest::addColumn<QString>("repeats");
    QTest::newRow("many products") << "2048" << "100";
    QTest::newRow("one huge product") << "8192" << "1";
  }
  void devicesLabStopsWithinTwoSeconds() {
    QFETCH(QString, size);
    QFETCH(QString, repeats);
    RecordingSink sink;
    auto devices = shippedLab("device-setup", "devices");
    const double took = test::secondsToStop(*devices, {{"size", size.toStdString()}, {"repeats", repeats.toStdString()}}, 1500, sink);
    qInfo("devices lab, size %s, repeats %s: returned %.3f s after Stop", qPrintable(size), qPrintable(repeats), took);
    QVERIFY2(took >= 0, "the run ended before Stop");
    QVERIFY2(took < 2.0, qPrintable(QString("Stop took %1 s").arg(took)));
    QVERIFY(!sink.measured.count("matmul on cpu"));  // no number from a timing cut short
  }

  // The same-device lesson is done, not watched: on a real GPU or the emulated one, the broken code
  // raises the engine's own error, and the fixed code runs.
  void deviceRuleLabBreaksAndFixesTheRule_data() {
    QTest::addColumn<QString>("which");
    QTest::newRow("tensor + tensor") << "tensors";
    QTest::newRow("model(input)") << "model";
  }
  void deviceRuleLabBreaksAndFixesTheRule() {
    QFETCH(QString, which);
    auto rule = shippedLab("same-device-rule", "device-rule");
    RecordingSink broken, fixed;
    test::runLab(*rule, {{"case", which.toStdString()}}, broken);
    test::runLab(*rule, {{"case", which.toStdString()}, {"fixed", "true"}}, fixed);
    QCOMPARE(static_cast<int>(broken.errors().size()), 1);
    QVERIFY2(broken.errors().front().starts_with("Expected all tensors to be on the same device, but found at least two devices, cuda:0 and cpu!"),
             broken.errors().front().c_str());
    QCOMPARE(test::measured(broken, "device-mismatch errors"), 1.0);
    QCOMPARE(test::measured(broken, "operations completed"), 1.0);  // the 0-dim scalar exception still runs
    QVERIFY(fixed.errors().empty());
    QCOMPARE(test::measured(fixed, "device-mismatch errors"), 0.0);
    QCOMPARE(test::measured(fixed, "operations completed"), 2.0);
    QCOMPARE(test::measured(fixed, "model forward passes completed"), which == "model" ? 1.0 : 0.0);
    // Where it ran is labelled: an emulated device says so.
    const auto device = broken.all<lab::RunDevice>();
    QCOMPARE(static_cast<int>(device.size()), 1);
    QCOMPARE(device.front().emulated, !test::cudaUsable());
    QVERIFY2(device.front().label.find(device.front().emulated ? "emulated" : "cuda:0") != std::string::npos, device.front().label.c_str());
  }

  void deviceRuleLabRefusesTheCpuAsItsGpu() {
    auto rule = shippedLab("same-device-rule", "device-rule");
    RecordingSink sink;
    QVERIFY_THROWS_EXCEPTION(ValueError, test::runLab(*rule, {{"device", "cpu"}}, sink));
    const std::string e = errorOf(*rule, {{"device", "cpu"}});
    QVERIFY2(e.starts_with("ValueError: the same-device rule needs a GPU to pair with the CPU; 'cpu' is not one"), e.c_str());
  }

  // The code panel shows the code that runs, and the form the parameters the file's run() takes.
  void theDeclarationMatchesTheCode() {
    const course::Course shipped = course::loadCourse();
    for (const course::Lesson& lesson : shipped.lessons) {
      for (const course::PythonLabSpec& spec : lesson.labs) {
        const QString source = shipped.labSource(spec.id);
        QVERIFY2(!source.isEmpty(), qPrintable(spec.id));
        const QRegularExpressionMatch def = QRegularExpression("^def run\\(([^)]*)\\):", QRegularExpression::MultilineOption).match(source);
        QVERIFY2(def.hasMatch(), qPrintable(spec.id + ": no def run(...):"));
        QStringList names;  // each parameter has a default: "name=" (a default may hold commas: "256,128")
        for (auto it = QRegularExpression("(\\w+)\\s*=").globalMatch(def.captured(1)); it.hasNext();) names << it.next().captured(1);
        QStringList declared;
        for (const lab::ParamSpec& p : spec.params) declared << QString::fromStdString(p.name);
        QCOMPARE(names, declared);
      }
    }
  }

  // What a lessons folder's lab sends is checked against the lab protocol's schema.
  void aLabsUpdatesAreChecked() {
    QTemporaryDir dir;
    {
      const course::Course c = scratchCourse(dir, "def run(n):\n    lab.point('nowhere', 'a', 1, 2)\n");
      QVERIFY2(c.lessons[0].ok(), qPrintable(c.lessons[0].error));
      const std::string e = errorOf(*course::makeLab(c.lessons[0], "scratch"));
      QVERIFY2(e.find("nowhere") != std::string::npos, e.c_str());
    }
    {
      const course::Course c = scratchCourse(dir, "def run(n):\n    lab.measurement('speed', n)\n");
      const std::string e = errorOf(*course::makeLab(c.lessons[0], "scratch"));
      QVERIFY2(e.find("the lab sent the measurement 'speed', which its ```lab block does not declare") != std::string::npos, e.c_str());
    }
    {
      const course::Course c = scratchCourse(dir, "def run(n):\n    lab.measurement('value', n, 's')\n");
      const std::string e = errorOf(*course::makeLab(c.lessons[0], "scratch"));
      QVERIFY2(e.find("the lab sent the measurement 'value' in 's'; its ```lab block declares it in ''") != std::string::npos, e.c_str());
    }
    {
      // A number no JSON line can carry is refused where it is given (it once dropped the whole line).
      const course::Course c = scratchCourse(dir, "def run(n):\n    lab.measurement('value', float('nan'))\n");
      const std::string e = errorOf(*course::makeLab(c.lessons[0], "scratch"));
      QVERIFY2(e.starts_with("ValueError: lab: value is nan, which no view can show"), e.c_str());
    }
    {
      // A record may take any name but the updates' own ("series" and "axis" are objects inside a view).
      const course::Course c = scratchCourse(dir, "def run(n):\n    lab.record('series', n=n)\n");
      RecordingSink sink;
      test::runLab(*course::makeLab(c.lessons[0], "scratch"), {}, sink);
      QCOMPARE(static_cast<int>(sink.records("series").size()), 1);
    }
    {
      const course::Course c = scratchCourse(dir, "def run(n):\n    print('counted', n)\n    lab.measurement('value', n * 2)\n");
      RecordingSink sink;
      test::runLab(*course::makeLab(c.lessons[0], "scratch"), {{"n", "21"}}, sink);
      QCOMPARE(test::measured(sink, "value"), 42.0);
      QVERIFY(std::find(sink.messages.begin(), sink.messages.end(), "counted 21") != sink.messages.end());  // print() is the console
    }
  }

  // A lab.* call is checked against the protocol's fields (engine/lab/lab_schema.h) where it is made,
  // so the traceback points at the learner's line.
  void aMalformedUpdateRaisesAtItsCall() {
    QTemporaryDir dir;
    const course::Course c = scratchCourse(dir, "def run(n):\n    lab.view('v', kind='pie', series=['a'])\n");
    const std::string e = errorOf(*course::makeLab(c.lessons[0], "scratch"));
    QVERIFY2(e.starts_with("ValueError: lab.view(): 'kind' must be one of line, stacked, bars, table, timeline, not 'pie'"), e.c_str());
    QVERIFY2(e.find("scratch_lab.py>\", line 2, in run") != std::string::npos, e.c_str());
    const course::Course c2 = scratchCourse(dir, "def run(n):\n    lab.view('v', series=[('a', 'A', 'wavy')])\n");
    const std::string e2 = errorOf(*course::makeLab(c2.lessons[0], "scratch"));
    QVERIFY2(e2.starts_with("ValueError: lab.view(): 'series' has a series whose 'style' must be one of line, dashed, points, steps"), e2.c_str());
  }

  void aLabThatRaisesFailsWithItsTraceback() {
    QTemporaryDir dir;
    const course::Course c = scratchCourse(dir, "def helper():\n    raise KeyError('oops')\n\ndef run(n):\n    helper()\n");
    const std::string e = errorOf(*course::makeLab(c.lessons[0], "scratch"));
    QVERIFY2(e.starts_with("KeyError: 'oops'"), e.c_str());
    QVERIFY2(e.find("01-scratch/scratch_lab.py>\", line 2, in helper") != std::string::npos, e.c_str());
  }

  // The course's shared module (lessons/lab_helpers.py, beside the lessons' folders) is importable in
  // a lab's session, with the session's `lab`; the code panel shows it below the lab that imports it;
  // an error inside it names its own file and line; a course without one meets Python's own error.
  void aLabImportsTheCoursesHelpers() {
    QTemporaryDir dir;
    test::writeFile(dir.filePath("lab_helpers.py"), "def twice(n):\n    lab.measurement('value', 2 * n)\n\ndef fails():\n    raise KeyError('inside')\n");
    const QByteArray code = "from lab_helpers import twice, fails\n\ndef run(n):\n    fails() if n == 99 else twice(n)\n";
    const course::Course c = scratchCourse(dir, code);
    RecordingSink sink;
    test::runLab(*course::makeLab(c.lessons[0], "scratch"), {{"n", "21"}}, sink);
    QCOMPARE(test::measured(sink, "value"), 42.0);
    const QString shown = c.labSource("scratch");
    QVERIFY(shown.startsWith(QString::fromUtf8(code)));
    QVERIFY2(shown.contains("lab_helpers.py, which this lab imports") && shown.contains("def twice(n):"), qPrintable(shown));
    const std::string e = errorOf(*course::makeLab(c.lessons[0], "scratch"), {{"n", "99"}});
    QVERIFY2(e.starts_with("KeyError: 'inside'") && e.find("lab_helpers.py\", line 5, in fails") != std::string::npos, e.c_str());

    QTemporaryDir bare;  // no lab_helpers.py in this course
    const course::Course without = scratchCourse(bare, code);
    QVERIFY(without.labSource("scratch") == QString::fromUtf8(code));
    const std::string missing = errorOf(*course::makeLab(without.lessons[0], "scratch"));
    QVERIFY2(missing.find("No module named 'lab_helpers'") != std::string::npos, missing.c_str());
  }

  // A Python loop stops at once; Stop is never an error.
  void aLabStopsWithinAFractionOfASecond() {
    QTemporaryDir dir;
    const course::Course c = scratchCourse(dir, "def run(n):\n    while True:\n        pass\n");
    RecordingSink sink;
    const double took = test::secondsToStop(*course::makeLab(c.lessons[0], "scratch"), {}, 800, sink);
    qInfo("an endless loop returned %.3f s after Stop", took);
    QVERIFY(took >= 0);
    QVERIFY2(took < 0.3, qPrintable(QString::number(took)));
  }

  // Pause holds a lab at a progress update (the window's sink waits there, lab_runner.h): a Python
  // lab waits for the window's answer in its next lab.progress() call meanwhile. The lab below spins
  // until 1.2 s after it started; the answer to its first update comes 0.7 s late, and its second
  // call waits for it: it gets the CPU for about 0.5 s of the 1.2.
  void aHeldProgressHoldsThePythonLab() {
    QTemporaryDir dir;
    const course::Course c = scratchCourse(dir, R"py(import time
def run(n):
    w0, c0 = time.monotonic(), time.process_time()
    lab.progress(1, 2, "held here")
    lab.progress(2, 2, "waits here for the answer to the first")
    while time.monotonic() - w0 < 1.2:
        pass
    lab.measurement("value", (time.process_time() - c0) / (time.monotonic() - w0))
)py");
    HoldingSink sink(std::chrono::milliseconds(700));
    test::runLab(*course::makeLab(c.lessons[0], "scratch"), {}, sink);
    const double share = test::measured(sink, "value");
    qInfo("the lab's CPU share while its progress update was held 0.7 s of 1.2 s: %.2f", share);
    QVERIFY2(share < 0.75, qPrintable(QString::number(share)));

    // And the hold stays out of what the lab times between its calls: 0.3 s of spinning measures 0.3 s.
    const course::Course timed = scratchCourse(dir, R"py(import time
def run(n):
    lab.progress(1, 2, "held here")
    lab.progress(2, 2)
    start = time.monotonic()
    while time.monotonic() - start < 0.3:
        pass
    lab.measurement("value", time.monotonic() - start)
)py");
    HoldingSink held(std::chrono::milliseconds(700));
    test::runLab(*course::makeLab(timed.lessons[0], "scratch"), {}, held);
    const double seconds = test::measured(held, "value");
    qInfo("0.3 s timed right after a progress update held 0.7 s: %.3f s", seconds);
    QVERIFY2(seconds < 0.6, qPrintable(QString::number(seconds)));
  }

  // The window does not slow a Python lab (issue 30): its step after a progress update runs while
  // the window takes the update in -- one step, never more. Each update is held 0.5 s below; the
  // lab's first call returns at once, its second waits for the answer to the first, and
  // lab.synchronize() for the answer to the second.
  void aPythonLabRunsOneStepAheadOfTheWindow() {
    QTemporaryDir dir;
    const course::Course c = scratchCourse(dir, R"py(import time
def run(n):
    t = [time.monotonic()]
    for step in range(2):
        lab.progress(step + 1, 2)
        t.append(time.monotonic())
    lab.synchronize()
    t.append(time.monotonic())
    lab.record("waits", first=t[1] - t[0], second=t[2] - t[1], synchronize=t[3] - t[2])
)py");
    HoldingSink sink(std::chrono::milliseconds(500));
    test::runLab(*course::makeLab(c.lessons[0], "scratch"), {}, sink);
    const std::vector<lab::Record> waits = sink.records("waits");
    QCOMPARE(waits.size(), std::size_t{1});
    const double first = waits[0].number("first"), second = waits[0].number("second"), synchronize = waits[0].number("synchronize");
    qInfo("waited in lab.progress(): %.3f s, then %.3f s; in lab.synchronize(): %.3f s", first, second, synchronize);
    QVERIFY2(first < 0.25, qPrintable(QString::number(first)));
    QVERIFY2(second > 0.3, qPrintable(QString::number(second)));
    QVERIFY2(synchronize > 0.3, qPrintable(QString::number(synchronize)));
  }

  // The declaration is checked where the lesson loads, each mistake named with its line.
  void aBadDeclarationIsALessonError_data() {
    QTest::addColumn<QByteArray>("block");
    QTest::addColumn<QString>("expected");
    const QByteArray ok = R"({"id": "scratch", "title": "T", "code": "scratch_lab.py", "params": [], "measurements": []})";
    QTest::newRow("a path") << QByteArray(ok).replace("scratch_lab.py", "../x.py") << "\"code\" must name a .py file in the lesson's folder";
    QTest::newRow("missing file") << QByteArray(ok).replace("scratch_lab.py", "other.py") << "the lab's code other.py is not in the lesson's folder";
    QTest::newRow("bad type") << QByteArray(ok).replace("[]", R"([{"name": "x", "type": "complex", "description": "d"}])")
                              << "parameter 'x': unknown type 'complex'";
    QTest::newRow("default out of range")
        << QByteArray(ok).replace("\"params\": []", R"("params": [{"name": "x", "type": "int", "default": 0, "min": 1, "max": 2, "description": "d"}])")
        << "invalid value '0' for parameter 'x'";
    QTest::newRow("widths that are not")
        << QByteArray(ok).replace("\"params\": []", R"("params": [{"name": "hidden", "type": "widths", "default": "64,0", "description": "d"}])")
        << "invalid value '64,0' for parameter 'hidden'";
    QTest::newRow("a keyword")
        << QByteArray(ok).replace("\"params\": []", R"("params": [{"name": "lambda", "type": "bool", "default": true, "description": "d"}])")
        << "parameter 'lambda' is not a Python name";
    QTest::newRow("not a Python name")
        << QByteArray(ok).replace("\"params\": []", R"("params": [{"name": "batch-size", "type": "bool", "default": true, "description": "d"}])")
        << "parameter 'batch-size' is not a Python name";
  }
  void aBadDeclarationIsALessonError() {
    QFETCH(QByteArray, block);
    QFETCH(QString, expected);
    QTemporaryDir dir;
    test::writeFile(dir.filePath("01-scratch/scratch_lab.py"), "def run():\n    pass\n");
    test::writeFile(dir.filePath("01-scratch/lesson.md"), "---\nid: scratch\ntitle: S\nchapter: C\n---\n```lab\n" + block + "\n```\n");
    const course::Course c = course::loadCourse(dir.path());
    QVERIFY2(c.lessons[0].error.contains("lesson.md:6: ") && c.lessons[0].error.contains(expected), qPrintable(c.lessons[0].error));
  }

  // A later lesson runs a lab an earlier one declared; an earlier one cannot run a later one's.
  void aLabIsDeclaredByTheFirstLessonThatRunsIt() {
    QTemporaryDir dir;
    scratchCourse(dir, "def run(n):\n    pass\n");
    test::writeFile(dir.filePath("00-before/lesson.md"), "---\nid: before\ntitle: B\nchapter: C\n---\n```run\n{\"lab\": \"scratch\"}\n```\n");
    test::writeFile(dir.filePath("02-after/lesson.md"), "---\nid: after\ntitle: A\nchapter: C\n---\n```run\n{\"lab\": \"scratch\"}\n```\n");
    const course::Course c = course::loadCourse(dir.path());
    QVERIFY2(c.find("before")->error.contains("unknown lab 'scratch'"), qPrintable(c.find("before")->error));
    QVERIFY2(c.find("after")->ok(), qPrintable(c.find("after")->error));
    QVERIFY(c.labSource("scratch").contains("def run(n):"));
  }

  // A lesson that cannot be loaded passes none of its labs on: a broken copy of a lesson cannot take
  // its lab's id from the lesson itself.
  void aBrokenLessonPassesNoLabOn() {
    QTemporaryDir dir;
    scratchCourse(dir, "def run(n):\n    pass\n");
    QDir().mkpath(dir.filePath("00-copy"));
    QFile::copy(dir.filePath("01-scratch/scratch_lab.py"), dir.filePath("00-copy/scratch_lab.py"));
    QFile original(dir.filePath("01-scratch/lesson.md"));
    QVERIFY(original.open(QIODevice::ReadOnly));
    test::writeFile(dir.filePath("00-copy/lesson.md"), original.readAll().replace("id: scratch", "id: copy") + "\n```run\n{\"lab\": \"nope\"}\n```\n");
    const course::Course c = course::loadCourse(dir.path());
    QVERIFY2(c.find("copy")->error.contains("unknown lab 'nope'"), qPrintable(c.find("copy")->error));
    QVERIFY2(c.find("scratch")->ok(), qPrintable(c.find("scratch")->error));
  }

  // ---- The memory lab (lessons 04-06, lessons/04-where-memory-goes/memory_lab.py), on cuda: the
  // GPU, or the emulated GPU its session has where there is none.

  void memoryLabSweepHitsTheLimitAndRecovers() {
    RecordingSink sink;
    test::runLab(*shippedLab("where-memory-goes", "memory"), {{"dataset", "regression"}, {"cap_mb", "4"}}, sink);
    const auto ooms = sink.records("oom"), recoveries = sink.records("recovered");
    QVERIFY(!ooms.empty());
    const lab::Record& oom = ooms.front();
    const std::string text = std::get<std::string>(*oom.find("message"));
    QVERIFY2(text.starts_with("CUDA out of memory."), text.c_str());
    QCOMPARE(oom.number("allocated_after_bytes"), oom.number("baseline_bytes"));  // the failed step's tensors are all gone
    QCOMPARE(static_cast<int>(recoveries.size()), 1);
    const lab::Record& rec = recoveries.front();
    QCOMPARE(rec.number("effective_batch"), ooms.back().number("batch_size") * ooms.back().number("accumulate"));
    QVERIFY(rec.number("accumulate") >= 2);
    QVERIFY(std::isfinite(rec.number("loss")));
    QCOMPARE(sink.measured["largest batch that fits"] * 2, ooms.front().number("batch_size"));
    QCOMPARE(sink.measured["effective batch after recovery"], rec.number("effective_batch"));
    // The error is shown as the engine raised it, marked on the timeline, and each attempt has a row.
    QVERIFY(!sink.errors().empty() && sink.errors().front() == text);
    const auto markers = sink.all<lab::Marker>();
    QVERIFY(std::any_of(markers.begin(), markers.end(), [](const lab::Marker& m) { return m.kind == lab::MarkerKind::OutOfMemory; }));
    std::map<std::string, std::size_t> results;  // the attempts table's "result" column
    for (const lab::Row& row : sink.rows("attempts")) ++results[std::get<std::string>(row.cells[row.cells.size() - 2])];
    QCOMPARE(results["out of memory"], ooms.size());
    QCOMPARE(results["recovered"], std::size_t{1});
    QVERIFY(results["fits"] >= 1);
    // What memory held at the failure, by category, beside the request that failed.
    QVERIFY(!sink.rows("oom-tensors").empty() && !sink.rows("oom-fixes").empty());
    // Per-step records attribute memory to categories, and the stacked view shows them live.
    const lab::Record first = sink.records("memory").front();
    for (const char* c : {"parameter", "activation", "gradient", "optimizer_state", "input_batch"}) {
      QVERIFY2(first.number(std::string("allocated_by_category.") + c) > 0, c);
      const auto live = sink.points("memory", c);
      QVERIFY2(!live.empty() && std::any_of(live.begin(), live.end(), [](const lab::Point& p) { return p.y > 0; }), c);
    }
    // Reserved and the steps' peaks are drawn over the stack, not stacked on it.
    for (const lab::SeriesSpec& series : sink.checker.find("memory")->series) {
      QCOMPARE(series.overlay, series.id == "reserved" || series.id == "peak");
    }
    // Within a step, activations rise and fall again: the timeline is live, not one sample a step.
    const auto activations = sink.points("memory", "activation");
    double highest = 0;
    for (const auto& p : activations) highest = std::max(highest, p.y);
    QVERIFY(highest > 0 && activations.back().y < highest);
  }

  // Each step's peak dot sits on the step's spike -- where the stacked live bytes are near the peak --
  // not at the step's end beside the next step's rise.
  void memoryLabStepPeakSitsOnItsSpike() {
    RecordingSink sink;
    test::runLab(*shippedLab("where-memory-goes", "memory"),
                 {{"dataset", "regression"}, {"mode", "report"}, {"hidden", "512,512"}, {"start_batch", "2048"}, {"steps", "3"}}, sink);
    const std::map<double, double> stacked = stackedMemory(sink);
    const auto peaks = sink.points("memory", "peak");
    QCOMPARE(static_cast<int>(peaks.size()), 3);
    for (const lab::Point& p : peaks) {
      QVERIFY(stacked.count(p.x[0]) == 1);
      QVERIFY2(stacked.at(p.x[0]) >= 0.8 * p.y,
               qPrintable(QString("at %1 s: %2 bytes live under a %3-byte peak").arg(p.x[0]).arg(stacked.at(p.x[0])).arg(p.y)));
    }
  }

  // The lesson says the stacked view shows del and empty_cache(): its markers are there, and after
  // them the live bytes and the reserved line fall to 0; the bars and the record say the same.
  void memoryLabReportShowsDelAndEmptyCache() {
    RecordingSink sink;
    // Weights of 16 MiB get segments of their own, which empty_cache() returns once they are freed.
    test::runLab(*shippedLab("where-memory-goes", "memory"),
                 {{"dataset", "regression"}, {"mode", "report"}, {"hidden", "2048,2048"}, {"start_batch", "512"}, {"steps", "2"}}, sink);
    std::map<std::string, double> markers;
    for (const lab::Marker& m : sink.all<lab::Marker>())
      if (m.view == "memory") markers[m.label] = m.x[0];
    QVERIFY(markers.count("del model, optimizer") && markers.count("empty_cache()"));
    QVERIFY(markers.at("del model, optimizer") <= markers.at("empty_cache()"));
    const auto reserved = sink.points("memory", "reserved");
    QVERIFY(!reserved.empty());
    QCOMPARE(reserved.back().y, 0.0);  // everything the run made is gone, its segments too
    QVERIFY(reserved.back().x[0] >= markers.at("empty_cache()"));
    QCOMPARE(test::measured(sink, "reserved after empty_cache()"), 0.0);
    QVERIFY(test::measured(sink, "released by empty_cache()") > 0);
    QCOMPARE(test::measured(sink, "released by empty_cache()"), test::measured(sink, "reserved after del"));
    QCOMPARE(sink.points("memory", "parameter").back().y, 0.0);

    const auto reports = sink.records("report");
    QCOMPARE(static_cast<int>(reports.size()), 1);
    const lab::Record& r = reports.front();
    QCOMPARE(r.number("after.allocated_bytes"), r.number("before.allocated_bytes"));  // empty_cache frees no live tensor
    QCOMPARE(r.number("after.reserved_bytes"), r.number("before.reserved_bytes") - r.number("released_bytes"));
    QCOMPARE(r.find("driver_note") != nullptr, !test::cudaUsable());  // no driver view on the emulated GPU
    // The same numbers as bars: del frees allocated memory but the cache keeps it reserved; then
    // reserved falls by what empty_cache() released, and allocated stays.
    std::map<std::string, double> bars;
    for (const lab::Bar& b : sink.all<lab::Bar>()) bars[b.series + "/" + b.category] = b.value;
    QVERIFY(bars["allocated/after training"] > bars["allocated/after del model, optimizer"]);
    QCOMPARE(bars["reserved/after training"], bars["reserved/after del model, optimizer"]);
    QCOMPARE(test::measured(sink, "freed by del (allocated)"), bars["allocated/after training"] - bars["allocated/after del model, optimizer"]);
    QCOMPARE(bars["reserved/after del model, optimizer"] - bars["reserved/after empty_cache()"], r.number("released_bytes"));
    QCOMPARE(bars["allocated/after del model, optimizer"], bars["allocated/after empty_cache()"]);
    QCOMPARE(sink.checker.find("report")->note.empty(), test::cudaUsable());
    QCOMPARE(sink.checker.find("nvidia-smi")->note.empty(), test::cudaUsable());
    // Without NVML, torch.cuda.utilization() raised RuntimeError with the reason, which the note gives.
    if (!test::cudaUsable()) QVERIFY(sink.checker.find("nvidia-smi")->note.starts_with("No nvidia-smi view: no NVML reading"));
  }

  // The OOM marker sits at the failed allocation, on the step's peak -- not after the unwinding freed
  // the step's tensors, where the plot would read ~0 beside a console that gives the allocated bytes.
  void memoryLabOomMarkerSitsOnThePeak() {
    RecordingSink sink;
    test::runLab(*shippedLab("where-memory-goes", "memory"),
                 {{"mode", "oom-sweep"}, {"dataset", "regression"}, {"hidden", "256,256"}, {"start_batch", "256"}, {"cap_mb", "24"}, {"steps", "2"}},
                 sink);
    double at = -1;
    for (const lab::Marker& m : sink.all<lab::Marker>())
      if (m.view == "memory" && m.kind == lab::MarkerKind::OutOfMemory && at < 0) at = m.x[0];
    QVERIFY(at >= 0);
    double highest = 0, atMarker = 0, lowestAfter = 1e300;
    for (const auto& [t, bytes] : stackedMemory(sink)) {
      if (t <= at) {
        highest = std::max(highest, bytes);
        atMarker = bytes;
      } else {
        lowestAfter = std::min(lowestAfter, bytes);  // once the failed step's tensors were freed
      }
    }
    qInfo("live bytes at the OOM marker %.2f MiB; the highest before it %.2f MiB; the lowest after it %.2f MiB", atMarker / (1 << 20),
          highest / (1 << 20), lowestAfter / (1 << 20));
    QVERIFY(highest > 0);
    QVERIFY(atMarker >= 0.6 * highest);
    QVERIFY(atMarker >= 1.5 * lowestAfter);
  }

  // set_per_process_memory_fraction caps what the allocator reserves, and reserves nothing itself.
  void memoryLabFractionCapsReservedMemoryAndReservesNothing() {
    RecordingSink sink;
    test::runLab(*shippedLab("memory-fraction", "memory"), {{"mode", "fraction"}, {"fraction", "0.02"}}, sink);
    const double cap = test::measured(sink, "the cap"), allocated = test::measured(sink, "allocated when the allocator refused");
    const double reserved = test::measured(sink, "reserved when the allocator refused");
    qInfo("fraction 0.02: cap %.0f, allocated %.0f, reserved %.0f when refused", cap, allocated, reserved);
    if (!test::cudaUsable()) QCOMPARE(cap, std::floor(0.02 * static_cast<double>(cuda::emulatedGpuBudget())));
    QVERIFY(reserved <= cap && reserved > cap - (32 << 20));  // refused near the cap, counted in reserved memory
    QVERIFY(allocated <= reserved && allocated > 0);
    QCOMPARE(test::measured(sink, "free memory after the fraction"), test::measured(sink, "free memory before the fraction"));
    QCOMPARE(sink.errors().size(), std::size_t{1});
    QVERIFY(sink.errors().front().starts_with("CUDA out of memory."));
  }

  // A first batch larger than the data set is refused by name; a doubling past the set tries the
  // whole set once, and says so.
  void memoryLabSweepKeepsToTheDataSet() {
    const std::string e = errorOf(*shippedLab("out-of-memory", "memory"), {{"dataset", "regression"}, {"start_batch", "70000"}});
    QVERIFY2(e.starts_with("ValueError: ") && e.find("start_batch 70000 is larger than the regression training set (65536 examples)") != std::string::npos,
             e.c_str());
    RecordingSink whole;
    test::runLab(*shippedLab("out-of-memory", "memory"), {{"dataset", "regression"}, {"start_batch", "40000"}, {"cap_mb", "4096"}, {"hidden", "8"}},
                 whole);
    std::vector<std::int64_t> batches;
    for (const lab::Row& row : whole.rows("attempts")) batches.push_back(std::get<std::int64_t>(row.cells[0]));
    QCOMPARE(batches, (std::vector<std::int64_t>{40000, 65536}));
    bool said = false;
    for (const auto& [kind, text] : whole.kinds) said = said || text.find("No out-of-memory error up to batch 65536") != std::string::npos;
    QVERIFY(said);
  }

  // The lesson's claim: checkpointing lowers a training step's peak memory (measured, both ways).
  void memoryLabCheckpointingLowersThePeak() {
    RecordingSink sink;
    test::runLab(*shippedLab("out-of-memory", "memory"),
                 {{"mode", "checkpoint"}, {"dataset", "regression"}, {"hidden", "512,512,512,512,512,512,512,512"}, {"start_batch", "2048"},
                  {"steps", "2"}, {"segments", "3"}},
                 sink);
    const double stored = test::measured(sink, "peak allocated, activations stored");
    const double recomputed = test::measured(sink, "peak allocated, activations recomputed");
    qInfo("peak of a step: %.0f bytes stored, %.0f checkpointed", stored, recomputed);
    QVERIFY(stored > 0 && recomputed > 0);
    QVERIFY(recomputed < 0.8 * stored);
    QCOMPARE(sink.all<lab::Bar>().size(), std::size_t{4});  // memory and time, stored and recomputed
  }
};

QTEST_GUILESS_MAIN(PythonLabsTest)
#include "test_python_labs.moc"
