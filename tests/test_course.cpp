// The lesson format: the embedded lessons load cleanly, mistakes are reported with file, line and
// what is wrong (and leave the other lessons usable), progress survives a restart, and reference
// runs (recorded on a real GPU) load, or are refused with file, line and what is wrong. Lesson files
// are capped in size and paragraph length, values of the wrong type and ids outside the grammar are
// mistakes, a broken lesson cannot take a valid one's id, and progress problems keep every copy. A
// lesson reads only regular files inside its folder, never too large, and never waits on a FIFO.
#include <QDir>
#include <QFile>
#include <QFileInfo>
#include <QRegularExpression>
#include <QSet>
#include <QTemporaryDir>
#include <chrono>
#include <fcntl.h>
#include <functional>
#include <future>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include "app/course/course.h"
#include "app/course/progress_store.h"
#include "app/course/challenge.h"
#include "app/course/reference_runs.h"
#include "test_util.h"
#include <cstring>

using namespace gpulab::course;
namespace lab = gpulab::lab;

namespace {

const char* kHeader = "---\nid: sample\ntitle: Sample\nchapter: Tests\n---\n# Text\n";

// A valid reference file for lesson "training-loop" is kRefHeader + kRefRun1 (+ kRefRun2).
const char* kRefHeader =
    R"({"event":"reference","lesson":"training-loop","gpu":"NVIDIA H100 80GB HBM3","date":"2026-11-23","command":"test"})" "\n"
    R"({"event":"protocol","version":1})" "\n";
const char* kRefRun1 =
    R"({"event":"run","index":1,"lab":"train","title":"t"})" "\n"
    R"({"event":"view","id":"loss","title":"Loss","kind":"line","x":[{"label":"step","unit":""}],"y":{"label":"loss","unit":""},"series":[{"id":"train","label":"train loss"}]})" "\n"
    R"({"event":"point","view":"loss","series":"train","x":[2],"y":1.0})" "\n"
    R"({"device":"cuda:0","event":"done","peak_allocated_bytes":10,"peak_reserved_bytes":20,"seconds":0.1,"steps":2,"stopped":false})" "\n";


// Two valid answers for quiz rows; `first` replaces the first answer's object.
QByteArray quiz(const QByteArray& first, const QByteArray& extra = {}) {
  return "```quiz\n{\"question\": \"Q?\", " + extra + "\"answers\": [" + first +
         ", {\"text\": \"b\", \"explanation\": \"y\"}]}\n```\n";
}

// A Unix socket at `path`: a file that exists but that even root cannot open for reading, while the
// folder stays writable -- the "unreadable but writable" progress file.
bool makeSocket(const QString& path) {
  const int fd = ::socket(AF_UNIX, SOCK_STREAM, 0);
  if (fd < 0) return false;
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  const QByteArray p = QFile::encodeName(path);
  if (p.size() >= static_cast<int>(sizeof(addr.sun_path))) return false;
  std::memcpy(addr.sun_path, p.constData(), static_cast<std::size_t>(p.size()));
  const bool ok = ::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0;
  ::close(fd);
  return ok;
}

// The sentences of a lesson's prose: its paragraphs outside code blocks, each paragraph's lines joined,
// cut after a '.', '!' or '?' that a capital (or a backquote, '*' or '(') follows. The run blocks'
// markers ("> **▶ Run N: title** — ...") are left out.
QStringList proseSentences(const QString& markdown) {
  QStringList paragraphs{QString()};
  bool inCode = false;
  for (const QString& line : markdown.split('\n')) {
    if (line.startsWith("```") || line.startsWith("~~~")) {
      inCode = !inCode;
      paragraphs << QString();
      continue;
    }
    if (inCode) continue;
    if (line.trimmed().isEmpty() || line.startsWith('#') || line.startsWith("> **▶ Run ")) paragraphs << QString();
    else paragraphs.last() += (paragraphs.last().isEmpty() ? "" : " ") + line.trimmed();
  }
  QStringList out;
  const QRegularExpression cut(R"((?<=[.!?])\s+(?=[A-Z`*(]))");
  for (const QString& p : paragraphs)
    if (!p.isEmpty()) out += p.split(cut);
  return out;
}

bool isSocket(const QString& path) {
  struct stat st{};
  return ::lstat(QFile::encodeName(path).constData(), &st) == 0 && S_ISSOCK(st.st_mode);
}

// A course for Note [files a lesson names] (app/course/lesson.h): 01-sample declares the Python lab
// "scratch" (its code kScratchLab, in scratch_lab.py), 02-other is a lesson of text only.
const char* kScratchLab = "def run():\n    pass\n";

void writeScratchCourse(const QString& root) {
  gpulab::test::writeFile(root + "/01-sample/lesson.md", QByteArray(kHeader) + "```lab\n"
                          R"({"id": "scratch", "title": "T", "code": "scratch_lab.py", "params": [], "measurements": []})" "\n```\n");
  gpulab::test::writeFile(root + "/01-sample/scratch_lab.py", kScratchLab);
  gpulab::test::writeFile(root + "/02-other/lesson.md", QByteArray(kHeader).replace("id: sample", "id: other"));
}

// Makes the file or folder at `path` (in a course writeScratchCourse wrote) what `kind` says: "link
// outside" (moved into the folder `outside`, linked from where it was), "link inside" (renamed, linked
// from beside it), "fifo", "folder", "link to /dev/zero", or "too large" (the lab's code, 1.5 MiB).
bool makeEntry(const QString& path, const QString& kind, const QString& outside) {
  const QByteArray link = QFile::encodeName(path);
  const QString moved = outside + "/" + QFileInfo(path).fileName(), renamed = QFileInfo(path).fileName() + ".real";
  if (kind == "link outside") return QDir().rename(path, moved) && ::symlink(QFile::encodeName(moved).constData(), link.constData()) == 0;
  if (kind == "link inside") return QDir().rename(path, path + ".real") && ::symlink(QFile::encodeName(renamed).constData(), link.constData()) == 0;
  if (kind == "too large") {
    QByteArray code(kScratchLab);
    code += QByteArray(1536 * 1024 - code.size(), '#');
    QFile f(path);
    return f.open(QIODevice::WriteOnly | QIODevice::Truncate) && f.write(code) == code.size();
  }
  if (!QFile::remove(path)) return false;
  if (kind == "fifo") return ::mkfifo(link.constData(), 0600) == 0;
  if (kind == "folder") return QDir().mkdir(path);
  if (kind == "link to /dev/zero") return ::symlink("/dev/zero", link.constData()) == 0;
  return false;
}

// Runs `work` on a thread of its own. One still running after 10 s waits in open() for a writer to
// the FIFO at `fifo` (issue 48 1.2: the loader hung for good): the test releases it, opening the FIFO
// for writing, and says so.
bool finishesWithoutWaiting(const std::function<void()>& work, const QString& fifo) {
  std::future<void> done = std::async(std::launch::async, work);
  if (done.wait_for(std::chrono::seconds(10)) == std::future_status::ready) return true;
  const QByteArray name = QFile::encodeName(fifo);
  while (done.wait_for(std::chrono::milliseconds(10)) != std::future_status::ready) {
    const int fd = ::open(name.constData(), O_WRONLY | O_NONBLOCK);  // opens once a reader waits
    if (fd >= 0) ::close(fd);
  }
  return false;
}

struct DiscardingSink final : lab::MetricSink {
  void send(const lab::Update&) override {}
};

}  // namespace

class TestCourse : public QObject {
  Q_OBJECT

 private slots:
  // Issue 27 §8: the words beside the course stay true -- lessons/README.md's table names every built-in
  // lab (it listed 8 of 14), and README.md lists every lesson by title.
  // Issue 27 §3: every challenge of the course says how to fail it and how to meet it, so that ctest
  // (challenges_<lesson>) can check that its grading tells them apart.
  void everyChallengeHasExamples() {
    int challenges = 0;
    for (const auto& lesson : gpulab::course::loadCourse().lessons) {
      QVERIFY2(lesson.ok(), qPrintable(lesson.error));
      for (int r = 0; r < lesson.runs.size(); ++r) {
        if (!lesson.runs[r].challenge) continue;
        ++challenges;
        QVERIFY2(lesson.runs[r].challenge->examples, qPrintable(QString("%1 run %2").arg(lesson.id).arg(r + 1)));
        QVERIFY(lesson.runs[r].challenge->examples->fails != lesson.runs[r].challenge->examples->meets);
        // A challenge graded on a speed says so in that check (a speed, a time, a share of a time).
        if (lesson.id == "syncs-and-transfers" || lesson.id == "feeding-the-gpu" || lesson.id == "vectorise") {
          QVERIFY2(lesson.runs[r].challenge->timed(), qPrintable(lesson.id));
        }
        if (lesson.id == "out-of-memory" || lesson.id == "same-device-rule") QVERIFY2(!lesson.runs[r].challenge->timed(), qPrintable(lesson.id));
      }
    }
    QVERIFY(challenges >= 15);
  }

  void examplesAreCheckedLikePresets() {
    QTemporaryDir dir;
    const QByteArray cnn = gpulab::test::copyShippedLab(dir.filePath("01-a"), "08-convolutions-and-cudnn");
    QFile f(dir.filePath("01-a/lesson.md"));
    QVERIFY(f.open(QIODevice::WriteOnly));
    f.write("---\nid: a\ntitle: A\nchapter: 1. A\n---\n# A\n\n" + cnn + "\n```run\n{\"lab\": \"cnn\", \"params\": {\"epochs\": 1},\n \"challenge\": {\"text\": \"t\", \"checks\": "
            "[{\"measurement\": \"CNN: test accuracy\", \"at_least\": 0.1}],\n \"examples\": {\"fails\": {\"epochs\": 0}, \"meets\": {}}}}\n```\n");
    f.close();
    const gpulab::course::Course c = gpulab::course::loadCourse(dir.path());
    QCOMPARE(c.lessons.size(), 1);
    QVERIFY2(c.lessons[0].error.contains("challenge: examples: fails:") && c.lessons[0].error.contains("epochs"), qPrintable(c.lessons[0].error));
  }

  void theReadmesNameEveryLabAndLesson() {
    QFile labsReadme(GPULAB_SOURCE_DIR "/lessons/README.md");
    QVERIFY(labsReadme.open(QIODevice::ReadOnly));
    const QString table = QString::fromUtf8(labsReadme.readAll());
    for (const auto& lesson : gpulab::course::loadCourse().lessons)
      for (const auto& lab : lesson.labs)  // each with its file: "| `cudnn` | Python, `08-.../cudnn_lab.py`: ..."
        QVERIFY2(table.contains("| `" + lab.id + "` | Python, `" + lab.sourcePath + "`"), qPrintable(lab.id));
    QFile readme(GPULAB_SOURCE_DIR "/README.md");
    QVERIFY(readme.open(QIODevice::ReadOnly));
    const QString text = QString::fromUtf8(readme.readAll());
    for (const auto& lesson : gpulab::course::loadCourse().lessons) QVERIFY2(text.contains(lesson.title), qPrintable(lesson.title));
  }

  void embeddedLessonsLoadCleanly() {
    const Course c = loadCourse();
    QCOMPARE(c.lessons.size(), GPULAB_LESSON_COUNT);
    QStringList ids;
    for (const Lesson& l : c.lessons) {
      QVERIFY2(l.ok(), qPrintable(l.error));
      QVERIFY(!l.runs.isEmpty());
      QVERIFY(!l.quizzes.isEmpty());
      // The folder is NN-<id>: the build's one list of lessons names the ctest of each by it.
      QVERIFY2(QRegularExpression("^[0-9]+-" + QRegularExpression::escape(l.id) + "$").match(l.folder.section('/', -1)).hasMatch(),
               qPrintable(l.folder));
      ids << l.id;
    }
    QCOMPARE(ids, (QStringList{"device-setup", "same-device-rule", "training-loop", "where-memory-goes", "out-of-memory", "memory-fraction", "mixed-precision", "convolutions-and-cudnn", "profiler", "vectorise", "syncs-and-transfers", "feeding-the-gpu", "streams", "when-is-the-gpu-faster", "several-gpus", "cuda-graphs"}));
    // The code panel's source is the lab's real source file.
    QVERIFY(c.labSource("cudnn").contains("def time_setting("));  // every lab is Python, in its lesson's folder
    QVERIFY(c.labSource("feeding").contains("class CopyAhead:"));
    QVERIFY(c.labSource("device-rule").contains("def run(device="));  // a Python lab, in its lesson's folder
    QVERIFY(c.labSource("train").contains("def train_one_epoch("));
    QVERIFY(!c.find("training-loop")->markdown.contains("```run"));  // directives are taken out of the text
  }

  // Issue 48, 4.6: a sentence that names a run block -- by the number the page gives it ("▶ Run 3:
  // ...", so "Run 3") or by an ordinal ("the second run") -- names one that exists, and every setting
  // it names in backquotes that one of the lesson's runs offers is a setting of that run's lab. (Lesson
  // 05 said "The second run caps ... at `memory_cap_mb`" of its Run 3: Run 2 is the memory lab's.)
  void sentencesNameTheRunTheyDescribe() {
    const QStringList ordinals{"first", "second", "third", "fourth", "fifth", "sixth", "seventh", "eighth"};
    const QRegularExpression names(R"(\b(?:[Tt]he (first|second|third|fourth|fifth|sixth|seventh|eighth) run\b|Run (\d+)\b))");
    const QRegularExpression setting("`([a-z_][a-z0-9_]*)`");
    int checked = 0;
    for (const Lesson& l : loadCourse().lessons) {
      QVERIFY2(l.ok(), qPrintable(l.error));
      QVector<QSet<QString>> own;  // each run's lab's settings
      QSet<QString> any;           // all of them
      for (const RunBlock& r : l.runs) {
        QSet<QString> settings;
        for (const lab::ParamSpec& p : makeLab(l, r.lab)->params()) settings.insert(QString::fromStdString(p.name));
        own << settings;
        any += settings;
      }
      for (const QString& sentence : proseSentences(l.markdown)) {
        if (sentence.startsWith("> **▶ Run ")) continue;  // the run's own label
        for (auto m = names.globalMatch(sentence); m.hasNext();) {
          const QRegularExpressionMatch hit = m.next();
          const int run = hit.captured(1).isEmpty() ? hit.captured(2).toInt() : int(ordinals.indexOf(hit.captured(1))) + 1;
          const QString where = l.id + ": \"" + sentence + "\"";
          QVERIFY2(run >= 1 && run <= l.runs.size(), qPrintable(where + QString(": the lesson has %1 runs").arg(l.runs.size())));
          for (auto s = setting.globalMatch(sentence); s.hasNext();) {
            const QString name = s.next().captured(1);
            QVERIFY2(!any.contains(name) || own[run - 1].contains(name),
                     qPrintable(where + ": `" + name + "` is no setting of Run " + QString::number(run) + " (lab " + l.runs[run - 1].lab + ")"));
          }
          ++checked;
        }
      }
    }
    QVERIFY(checked >= 4);
  }

  // Issue 48, 4.6: the PyTorch a lesson shows beside a run is what the run does. A code cell that
  // makes an optimizer, in the same section as the run block after it, makes the optimizer and the
  // learning rate that run's settings choose, and the section's prose ("Both use Adam") names that
  // optimizer. (Lesson 08 said "Both use Adam" over `torch.optim.SGD(lr=0.1, momentum=0.9)` beside a
  // run of Adam at lr 0.002.)
  void theCodeBesideARunUsesItsOptimizer() {
    const QRegularExpression made(R"(torch\.optim\.(SGD|Adam|AdamW)\(([^\n]*))");
    const QRegularExpression lrArg(R"(\blr=([0-9.eE+-]+))");
    const QRegularExpression said(R"(\b[Uu]ses? (SGD|Adam|AdamW)\b)");
    int checked = 0;
    for (const Lesson& l : loadCourse().lessons) {
      // The sections' text, each up to its first run block: [heading .. run marker).
      const QStringList lines = l.markdown.split('\n');
      QString section;
      bool inCode = false;
      int run = 0;
      for (const QString& line : lines) {
        if (line.startsWith("```") || line.startsWith("~~~")) inCode = !inCode;
        if (!inCode && line.startsWith('#')) section.clear();
        if (!inCode && line.startsWith("> **▶ Run ")) {
          const RunBlock& r = l.runs[run++];
          const auto optimizer = r.params.find("optimizer");
          const QRegularExpressionMatch code = made.match(section);
          if (optimizer != r.params.end() && code.hasMatch()) {
            const QString where = l.id + ", before Run " + QString::number(run);
            QVERIFY2(code.captured(1).toLower() == QString::fromStdString(optimizer->second),
                     qPrintable(where + ": the code makes torch.optim." + code.captured(1) + ", the run " + QString::fromStdString(optimizer->second)));
            const QRegularExpressionMatch lr = lrArg.match(code.captured(2));
            QVERIFY2(lr.hasMatch() && r.params.count("lr") && lr.captured(1).toDouble() == std::stod(r.params.at("lr")),
                     qPrintable(where + ": the code's " + (lr.hasMatch() ? "lr=" + lr.captured(1) : QString("default lr")) +
                                ", the run's lr " + QString::fromStdString(r.params.count("lr") ? r.params.at("lr") : "(the lab's default)")));
            for (auto m = said.globalMatch(section); m.hasNext();) {
              const QString name = m.next().captured(1);
              QVERIFY2(name == code.captured(1), qPrintable(where + ": the text says it uses " + name + ", the code " + code.captured(1)));
            }
            ++checked;
          }
          section.clear();
          continue;
        }
        section += line + '\n';
      }
    }
    QVERIFY(checked >= 1);  // lesson 08's CNN against the MLP
  }

  void mistakesAreReportedWithFileLineAndWhat_data() {
    QTest::addColumn<QByteArray>("body");
    QTest::addColumn<QString>("expected");
    QTest::newRow("unknown lab") << QByteArray("```run\n{\"lab\": \"trian\"}\n```\n") << "lesson.md:7: run block: unknown lab 'trian'";
    QTest::newRow("unknown parameter") << QByteArray("\n```run\n{\"lab\": \"cnn\", \"params\": {\"batchsize\": 3}}\n```\n")
                                       << "lesson.md:8: run block: unknown parameter 'batchsize'";
    QTest::newRow("out of range") << QByteArray("```run\n{\"lab\": \"cnn\", \"params\": {\"batch_size\": 0}}\n```\n")
                                  << "lesson.md:7: run block: invalid value '0' for parameter 'batch_size': expected a number in [1, 65536]";
    QTest::newRow("unknown exposed parameter") << QByteArray("```run\n{\"lab\": \"cnn\", \"expose\": [\"speed\"]}\n```\n")
                                               << "lesson.md:7: run block: expose: unknown parameter 'speed'";
    QTest::newRow("bad JSON") << QByteArray("```run\n{\"lab\": \"cnn\",\n \"params\": {]\n}\n```\n") << "lesson.md:9: run block: invalid JSON";
    QTest::newRow("quiz without a correct answer")
        << QByteArray("```quiz\n{\"question\": \"Q?\", \"answers\": [{\"text\": \"a\", \"explanation\": \"x\"}, {\"text\": \"b\", \"explanation\": \"y\"}]}\n```\n")
        << "lesson.md:7: quiz: exactly one answer must be \"correct\": true (found 0)";
    QTest::newRow("quiz answer without explanation")
        << QByteArray("```quiz\n{\"question\": \"Q?\", \"answers\": [{\"text\": \"a\", \"correct\": true}, {\"text\": \"b\", \"explanation\": \"y\"}]}\n```\n")
        << "lesson.md:7: quiz: the answer \"a\" has no \"explanation\"";
    QTest::newRow("unclosed block") << QByteArray("```quiz\n{}\n") << "lesson.md:7: quiz block is not closed";
    const QByteArray run = "```run\n{\"lab\": \"cnn\", \"challenge\": ";
    QTest::newRow("challenge not an object") << run + "3}\n```\n" << "lesson.md:7: run block: challenge must be an object";
    QTest::newRow("challenge without checks") << run + "{\"text\": \"t\"}}\n```\n"
                                              << "lesson.md:7: run block: challenge: \"checks\" must be a non-empty list";
    QTest::newRow("challenge check without a bound") << run + "{\"text\": \"t\", \"checks\": [{\"measurement\": \"m\"}]}}\n```\n"
                                                     << "lesson.md:7: run block: challenge: check of 'm' has neither";
    QTest::newRow("challenge bound not a number")
        << run + "{\"text\": \"t\", \"checks\": [{\"measurement\": \"m\", \"at_most\": \"256 MiB\"}]}}\n```\n"
        << "lesson.md:7: run block: challenge: \"at_most\" must be a number (found a string)";
    QTest::newRow("challenge nobody can meet")
        << run + "{\"text\": \"t\", \"checks\": [{\"measurement\": \"m\", \"at_least\": 2, \"at_most\": 1}]}}\n```\n"
        << "lesson.md:7: run block: challenge: check of 'm' asks for at least more than at most";
    // Issue 27 6.6: challenges no run can meet loaded as "ok".
    QTest::newRow("challenge names a measurement the lab never sends")
        << run + "{\"text\": \"t\", \"checks\": [{\"measurement\": \"speed of light\", \"at_least\": 1}]}}\n```\n"
        << "lesson.md:7: run block: challenge: the cnn lab sends no measurement 'speed of light', so no run can meet the check (it sends: CNN parameters vs MLP;";
    QTest::newRow("challenge asks for a time of at most 0")
        << run + "{\"text\": \"t\", \"checks\": [{\"measurement\": \"CNN: epoch time\", \"at_most\": 0}]}}\n```\n"
        << "lesson.md:7: run block: challenge: check of 'CNN: epoch time' asks for at most 0 s, but it is always above 0: no run can meet it";
    QTest::newRow("challenge checks that contradict each other")
        << run + "{\"text\": \"t\", \"checks\": [{\"measurement\": \"CNN: test accuracy\", \"at_least\": 0.9}, {\"measurement\": \"CNN: test accuracy\", \"at_most\": 0.5}]}}\n```\n"
        << "lesson.md:7: run block: challenge: the checks of 'CNN: test accuracy' ask for at least 0.9 and at most 0.5: no run can meet them";
    // Issue 49: every exercise ships a bank of wrong and right answers, each saying what it is.
    const QByteArray exercise = "```exercise\n{\"title\": \"T\", \"text\": \"Set x\", \"values\": {\"x set\": \"x == 1\"},"
                                " \"checks\": [{\"measurement\": \"x set\", \"at_least\": 1}]}\n```\n"
                                "```python exercise\nx = 0\n```\n```python solution\nx = 1\n```\n";
    const QByteArray wrong = "```python wrong\n# wrong: w\n# fails: x set\n# hint: h\nx = 2\n```\n";
    const QByteArray right = "```python right\n# right: r\nx = 0 + 1\n```\n";
    QTest::newRow("exercise without a bank") << exercise << "lesson.md:7: exercise 'T' has 0 wrong and 0 right answers in its bank";
    QTest::newRow("exercise with two wrong answers") << exercise + wrong + wrong + right << "lesson.md:7: exercise 'T' has 2 wrong and 1 right answers";
    QTest::newRow("exercise without a right answer") << exercise + wrong + wrong + wrong << "has 3 wrong and 0 right answers";
    QTest::newRow("a wrong answer that fails an unknown check")
        << exercise + QByteArray(wrong).replace("x set", "y set") << "the ```python wrong block: \"# fails: y set\" names no check of the exercise";
    QTest::newRow("a wrong answer without a hint")
        << exercise + QByteArray(wrong).replace("# hint: h\n", "") << "the ```python wrong block needs \"# fails: <a check's measurement>\"";
    QTest::newRow("a wrong answer without why") << exercise + QByteArray(wrong).replace("# wrong: w\n", "")
                                                << "must begin with a comment line \"# wrong: ...\" saying why it is wrong";
    QTest::newRow("a right answer without how") << exercise + wrong + wrong + wrong + QByteArray(right).replace("# right: r\n", "")
                                                << "must begin with a comment line \"# right: ...\"";
    QTest::newRow("a bank answer before the solution")
        << QByteArray(exercise).replace("```python solution\nx = 1\n```\n", "") + wrong << "a ```python wrong block comes after the exercise's ```python solution block";
    const QByteArray bank = wrong + wrong + wrong + right;
    QTest::newRow("an unknown machine") << QByteArray(exercise).replace("\"values\"", "\"machines\": [\"gpu-16gb\"], \"values\"") + bank
                                        << "lesson.md:7: exercise: machines: 'gpu-16gb' is not a machine";
    QTest::newRow("a machine twice") << QByteArray(exercise).replace("\"values\"", "\"machines\": [\"no-gpu\", \"no-gpu\"], \"values\"") + bank
                                     << "machines: 'no-gpu' is listed twice";
    QTest::newRow("machines and needs") << QByteArray(exercise).replace("\"values\"", "\"machines\": [\"gpu-4gib\"], \"needs\": \"cuda\", \"values\"") + bank
                                        << "\"needs\" and \"machines\" both say where it runs";
    QTest::newRow("no machines") << QByteArray(exercise).replace("\"values\"", "\"machines\": [], \"values\"") + bank
                                 << "\"machines\" must be a non-empty list";
    QTest::newRow("challenge unknown key") << run + "{\"text\": \"t\", \"goal\": 1, \"checks\": [{\"measurement\": \"m\", \"at_least\": 1}]}}\n```\n"
                                           << "lesson.md:7: run block: challenge: unknown key \"goal\"";
  }

  // A challenge is graded from the run's measurements, and says what was measured against what was asked.
  void challengesAreGradedFromMeasurements() {
    const Challenge c{"Peak under 256 MiB with an effective batch of at least 1024",
                      {{"training peak allocated", std::nullopt, 268435456.0}, {"effective batch", 1024.0, std::nullopt}}};
    const std::vector<gpulab::lab::Measurement> met{{"effective batch", 512, ""}, {"training peak allocated", 200 << 20, "bytes"},
                                                   {"effective batch", 2048, ""}};  // the last value counts
    const ChallengeResult yes = grade(c, met);
    QVERIFY(yes.met);
    QCOMPARE(yes.checks[0].line, QString("training peak allocated: measured 200.00 MiB, asked at most 256.00 MiB — met"));
    QCOMPARE(yes.checks[1].line, QString("effective batch: measured 2048, asked at least 1024 — met"));
    const ChallengeResult tooBig = grade(c, {{"training peak allocated", 300 << 20, "bytes"}, {"effective batch", 1024, ""}});
    QVERIFY(!tooBig.met);
    QVERIFY(!tooBig.checks[0].met && tooBig.checks[1].met);
    QVERIFY(tooBig.checks[0].line.endsWith("— not met"));
    // Noisy ratios to the digits they carry; but never rounded onto the number asked.
    const Challenge ratio{"r", {{"speed relative to the fastest N", 0.8, std::nullopt}}};
    QCOMPARE(grade(ratio, {{"speed relative to the fastest N", 0.520612, "x"}}).checks[0].line,
             QString("speed relative to the fastest N: measured 0.5206x, asked at least 0.8x — not met"));
    const QString close = grade(ratio, {{"speed relative to the fastest N", 0.79999, "x"}}).checks[0].line;
    QVERIFY2(close.contains("measured 0.79999") && close.endsWith("— not met"), qPrintable(close));
    const ChallengeResult missing = grade(c, {{"effective batch", 4096, ""}});
    QVERIFY(!missing.met);
    QCOMPARE(missing.checks[0].line, QString("training peak allocated: not measured in this run (asked at most 268435456) — not met"));
    QVERIFY(missing.report().startsWith("Challenge not met yet: Peak under 256 MiB"));
    // A run that fell short of timed checks only is told that another run may meet them; one that
    // missed a count as well is not, as rerunning changes no count.
    QVERIFY(missing.noiseNote().isEmpty());
    Challenge reads{"r", {{"loss reads", 10.0, 100.0}, {"speed relative to the fastest N", 0.8, std::nullopt}}};
    reads.checks[1].timed = true;
    QVERIFY(reads.timed());
    const ChallengeResult slow = grade(reads, {{"loss reads", 20, ""}, {"speed relative to the fastest N", 0.75, "x"}});
    QVERIFY(!slow.met);
    QVERIFY2(slow.report().endsWith("  " + slow.noiseNote()) && slow.noiseNote().contains("run it again"), qPrintable(slow.report()));
    QVERIFY(grade(reads, {{"loss reads", 1000, ""}, {"speed relative to the fastest N", 0.75, "x"}}).noiseNote().isEmpty());
    QVERIFY(grade(reads, {{"loss reads", 1000, ""}, {"speed relative to the fastest N", 0.9, "x"}}).noiseNote().isEmpty());
    QVERIFY(grade(reads, {{"loss reads", 20, ""}, {"speed relative to the fastest N", 0.9, "x"}}).noiseNote().isEmpty());  // met
    QVERIFY(!c.timed());
    // Issue 27 §4: a loaded challenge knows its measurements' units (the lab declares them), so what
    // it asks reads in them before any run ("asked at most 268435456" beside "256.00 MiB").
    Challenge withUnits = c;
    withUnits.checks[0].unit = "bytes";
    QCOMPARE(grade(withUnits, {}).checks[0].line, QString("training peak allocated: not measured in this run (asked at most 256.00 MiB) — not met"));
    const Course course = gpulab::course::loadCourse();
    int checked = 0;
    for (const Lesson& lesson : course.lessons)
      for (const RunBlock& run : lesson.runs)
        if (run.challenge)
          for (const ChallengeCheck& check : run.challenge->checks) {
            ++checked;
            if (check.measurement == "training peak allocated") QCOMPARE(check.unit, std::string("bytes"));
          }
    QVERIFY(checked > 10);
  }

  void challengeProgressIsKept() {
    QTemporaryDir dir;
    const QString path = dir.filePath("progress.json");
    {
      ProgressStore store(path);
      QVERIFY(!store.challengeMet("oom", 1));
      store.setChallengeMet("oom", 1);
    }
    ProgressStore again(path);
    QVERIFY(again.challengeMet("oom", 1));
    QVERIFY(!again.challengeMet("oom", 0));
    QVERIFY(!again.challengeMet("other", 1));
  }

  void mistakesAreReportedWithFileLineAndWhat() {
    QFETCH(QByteArray, body);
    QFETCH(QString, expected);
    const Lesson l = parseLesson(QString::fromUtf8(QByteArray(kHeader) + body), "lessons/09-sample/lesson.md", gpulab::test::shippedLabs());
    QVERIFY(!l.ok());
    QVERIFY2(l.error.contains(expected), qPrintable(l.error));
    QVERIFY(l.error.startsWith("lessons/09-sample/lesson.md:"));
  }

  // A run that fails the way a wrong answer of the bank does is told that answer's hint; the bank's
  // answers stay out of the text and the cells, like the solution.
  void aRunThatFailsLikeAKnownWrongAnswerGetsItsHint() {
    const QByteArray body = "```exercise\n{\"title\": \"T\", \"text\": \"Set x and y\", \"values\": {\"x set\": \"x == 1\", \"y set\": \"y == 1\"},"
                            " \"checks\": [{\"measurement\": \"x set\", \"at_least\": 1}, {\"measurement\": \"y set\", \"at_least\": 1}]}\n```\n"
                            "```python exercise\nx = y = 0\n```\n```python solution\nx = y = 1\n```\n"
                            "```python wrong\n# wrong: only y\n# fails: x set\n# hint: x too\nx, y = 0, 1\n```\n"
                            "```python wrong\n# wrong: neither\n# fails: x set\n# fails: y set\n# hint: both\nx = y = 2\n```\n"
                            "```python wrong\n# wrong: only x\n# fails: y set\n# hint: y too\nx, y = 1, 0\n```\n"
                            "```python wrong\n# wrong: x forgotten another way\n# fails: x set\n# hint: x, again\nx = None\ny = 1\n```\n"
                            "```python right\n# right: one at a time\nx = 1\ny = 1\n```\n";
    const Lesson l = parseLesson(QString::fromUtf8(QByteArray(kHeader) + body), "lessons/09-sample/lesson.md", gpulab::test::shippedLabs());
    QVERIFY2(l.ok(), qPrintable(l.error));
    QCOMPARE(l.exercises.size(), 1);
    const Exercise& e = l.exercises[0];
    QCOMPARE(e.wrong.size(), 4);
    QCOMPARE(e.right.size(), 1);
    QCOMPARE(e.wrong[1].fails, QStringList({"x set", "y set"}));
    QCOMPARE(l.cells.size(), 1);  // the starter only
    QVERIFY(!l.markdown.contains("only y") && !l.markdown.contains("one at a time"));
    auto measured = [](double x, double y) {
      return std::vector<lab::Measurement>{{"x set", x, ""}, {"y set", y, ""}};
    };
    auto hintFor = [&](double x, double y) {
      QStringList hints;
      for (const BankAnswer* a : likelyMistakes(e, gradeExercise(e, measured(x, y), {}))) hints << a->hint;
      return hints.join(" | ");
    };
    QCOMPARE(hintFor(0, 1), QString("x too | x, again"));  // two known mistakes fail exactly this way: both hints
    QCOMPARE(hintFor(1, 0), QString("y too"));
    QCOMPARE(hintFor(0, 0), QString("both"));  // the answer that names the most of the checks failed
    QCOMPARE(hintFor(1, 1), QString());        // met: no mistake to name
  }

  void frontMatterIsRequired() {
    QVERIFY(parseLesson("# no front matter", "x/lesson.md").error.contains("x/lesson.md:1: expected front matter"));
    QVERIFY(parseLesson("---\nid: a\n---\n", "x/lesson.md").error.contains("needs id, title and chapter"));
    const Lesson good = parseLesson(QString(kHeader) + "```run\n{\"lab\": \"cnn\", \"params\": {\"epochs\": 2}, \"expose\": [\"lr\"]}\n```\n", "x/lesson.md",
                                    gpulab::test::shippedLabs());
    QVERIFY2(good.ok(), qPrintable(good.error));
    QCOMPARE(good.runs.front().params.at("epochs"), std::string("2"));
    QCOMPARE(good.runs.front().expose, QStringList{"lr"});
  }

  void aBrokenLessonLeavesTheOthersUsable() {
    QTemporaryDir dir;
    const QByteArray amp = gpulab::test::copyShippedLab(dir.filePath("01-good"), "07-mixed-precision");
    gpulab::test::writeFile(dir.filePath("01-good/lesson.md"), QByteArray(kHeader) + amp + "\n```run\n{\"lab\": \"amp\"}\n```\n");
    gpulab::test::writeFile(dir.filePath("02-bad/lesson.md"), "---\nid: bad\ntitle: Bad\nchapter: Tests\n---\n```run\n{\"lab\": \"rm -rf\"}\n```\n");
    QDir().mkpath(dir.filePath("03-empty"));
    const Course c = loadCourse(dir.path());
    QCOMPARE(c.lessons.size(), 3);
    QVERIFY(c.lessons[0].ok());
    QVERIFY(c.lessons[1].error.contains("unknown lab 'rm -rf'"));
    QVERIFY(c.lessons[2].error.contains("cannot read lesson.md"));
  }

  void progressPersistsAcrossRestarts() {
    QTemporaryDir dir;
    const QString path = dir.filePath("sub/progress.json");
    {
      ProgressStore store(path);
      QCOMPARE(store.answer("device-setup", 0), -1);
      store.setAnswer("device-setup", 0, 2);
      store.setCompleted("device-setup");
      QVERIFY2(store.lastError().isEmpty(), qPrintable(store.lastError()));
    }
    ProgressStore again(path);
    QCOMPARE(again.answer("device-setup", 0), 2);
    QVERIFY(again.isCompleted("device-setup"));
    QVERIFY(!again.isCompleted("training-loop"));
    again.setCompleted("device-setup", false);
    QVERIFY(!ProgressStore(path).isCompleted("device-setup"));
  }

  void referenceRunsLoad() {
    const Course c = loadCourse();
    const Lesson* lesson = c.find("training-loop");
    QVERIFY(lesson);
    const QString path = QFINDTESTDATA("data/reference-runs/fixture-training-loop.jsonl");
    QVERIFY2(!path.isEmpty(), "the test fixture is missing");
    const ReferenceRuns refs = loadReferenceRuns(path, lesson);
    QVERIFY2(refs.ok(), qPrintable(refs.error));
    QCOMPARE(refs.header.lesson, QString("training-loop"));
    QCOMPARE(refs.header.gpu, QString("NVIDIA H100 80GB HBM3"));
    QCOMPARE(refs.header.date, QString("2026-11-23"));
    QCOMPARE(refs.header.driver, QString("000.00.00"));
    QCOMPARE(refs.label(), QString("reference: NVIDIA H100, recorded 2026-11-23 — not your machine"));
    QVERIFY(refs.details().contains("GPU: NVIDIA H100 80GB HBM3"));
    QCOMPARE(refs.runs.size(), std::size_t(2));
    const ReferenceRun* run1 = refs.run(1);
    QVERIFY(run1);
    QCOMPARE(run1->lab, QString("train"));
    // The updates as the lab sent them: views first, then points, rows, measurements, records.
    auto count = [](const ReferenceRun& r, auto kind) {
      return std::count_if(r.updates.begin(), r.updates.end(), [](const lab::Update& u) { return std::holds_alternative<decltype(kind)>(u); });
    };
    std::vector<lab::Point> train;
    std::vector<lab::Measurement> measured;
    for (const lab::Update& u : run1->updates) {
      if (const auto* p = std::get_if<lab::Point>(&u); p && p->view == "loss" && p->series == "train") train.push_back(*p);
      if (const auto* m = std::get_if<lab::Measurement>(&u)) measured.push_back(*m);
    }
    QCOMPARE(train.size(), std::size_t(4));
    QCOMPARE(train[1].x, (std::vector<double>{4, 256, 0.002}));  // step, samples seen, seconds
    QCOMPARE(train[1].y, 0.8);
    QVERIFY(std::holds_alternative<lab::RunDevice>(run1->updates.front()));
    QCOMPARE(count(*run1, lab::Row{}), 2);
    QCOMPARE(count(*run1, lab::Level{}), 1);  // the capacity
    QCOMPARE(measured.size(), std::size_t(2));
    QCOMPARE(measured[1].name, std::string("evaluation peak under no-grad"));
    QCOMPARE(measured[1].unit, std::string("bytes"));
    QCOMPARE(count(*run1, lab::Message{}), 1);
    QVERIFY(run1->done());
    QCOMPARE(std::get<std::string>(*run1->done()->find("device")), std::string("cuda:0"));
    QCOMPARE(run1->done()->number("steps"), 8.0);
    QCOMPARE(run1->done()->number("train_loss"), 0.5);
    QVERIFY(refs.run(2) && refs.run(2)->done()->number("test_accuracy") == 0.5);
    QVERIFY(!refs.run(3));  // recorded runs only
    QVERIFY(!refs.run(0));

    // Found by lesson id in a folder; no file, no reference.
    QTemporaryDir dir;
    QVERIFY(QFile::copy(path, dir.filePath("training-loop.jsonl")));
    const auto found = findReferenceRuns(*lesson, dir.path());
    QVERIFY(found && found->ok());
    QCOMPARE(found->path, dir.filePath("training-loop.jsonl"));
    QVERIFY(!findReferenceRuns(*c.find("device-setup"), dir.path()));
    const ReferenceRuns missing = loadReferenceRuns(dir.filePath("nothing.jsonl"));
    QVERIFY(missing.error.startsWith(dir.filePath("nothing.jsonl") + ":0: cannot read"));
  }

  void referenceRunMistakesNameFileAndLine_data() {
    QTest::addColumn<QByteArray>("text");
    QTest::addColumn<QString>("expected");  // after "<file>:"
    const QByteArray h(kRefHeader), r1(kRefRun1);
    const QByteArray run2 = R"({"event":"run","index":2,"lab":"train","title":"t2"})" "\n";
    const QByteArray done = QByteArray(kRefRun1).split('\n')[3] + "\n";
    QTest::newRow("empty file") << QByteArray() << "1: empty file: expected the header";
    QTest::newRow("bad JSON") << h + r1.left(40) + "\n" << "3: invalid JSON";
    QTest::newRow("bad JSON later") << h + r1 + "{\"event\": \"run\",}\n" << "7: invalid JSON";
    QTest::newRow("not an object") << h + "[1, 2]\n" + r1 << "3: expected a JSON object";
    QTest::newRow("missing header") << r1 << "1: expected the header first";
    QTest::newRow("header without gpu")
        << QByteArray(R"({"event":"reference","lesson":"training-loop","date":"2026-11-23"})" "\n") + r1
        << "1: \"reference\" event: missing field \"gpu\"";
    QTest::newRow("header with a bad date")
        << QByteArray(R"({"event":"reference","lesson":"training-loop","gpu":"G","date":"23.11.2026"})" "\n") + r1
        << "1: \"reference\" event: field \"date\" must be a date like 2026-11-23 (found \"23.11.2026\")";
    QTest::newRow("header for another lesson")
        << QByteArray(R"({"event":"reference","lesson":"device-setup","gpu":"G","date":"2026-11-23"})" "\n") + r1
        << "1: \"reference\" event: recorded for lesson \"device-setup\", but this file is for lesson \"training-loop\"";
    QTest::newRow("a second header") << h + r1 + h << "7: a second header";
    QTest::newRow("event without a name") << h + "{\"step\": 1}\n" << "3: missing field \"event\"";
    QTest::newRow("point without y")
        << QByteArray(r1).replace(",\"y\":1.0", "").prepend(h)
        << "5: \"point\" event: a point needs 'view', 'series' (strings), 'x' (a list of numbers) and 'y' (a number)";
    QTest::newRow("y is a string")
        << QByteArray(r1).replace("\"y\":1.0", "\"y\":\"1.0\"").prepend(h)
        << "5: \"point\" event: a point needs";
    QTest::newRow("point for an undeclared view")
        << QByteArray(r1).replace("\"view\":\"loss\",\"series\"", "\"view\":\"lost\",\"series\"").prepend(h)
        << "5: \"point\" event: a point for view 'lost', which was not declared";
    QTest::newRow("point with two x for one axis")
        << QByteArray(r1).replace("\"x\":[2]", "\"x\":[2,3]").prepend(h)
        << "5: \"point\" event: a point for view 'loss' has 2 x value(s); the view has 1 x axes";
    QTest::newRow("a point at 0 on a logarithmic axis")
        << QByteArray(r1).replace("\"unit\":\"\"}],\"y\"", "\"unit\":\"\",\"log\":true}],\"y\"").replace("\"x\":[2]", "\"x\":[0]").prepend(h)
        << "5: \"point\" event: a point for view 'loss' has x = 0 on the logarithmic axis 'step', which takes only values above 0";
    QTest::newRow("log is not a boolean")
        << QByteArray(r1).replace("\"unit\":\"\"}],\"y\"", "\"unit\":\"\",\"log\":1}],\"y\"").prepend(h)
        << "4: \"view\" event: a view's 'x' must be a list of axes {\"label\", \"unit\"} (and an optional \"log\": true)";
    QTest::newRow("unknown view kind")
        << QByteArray(r1).replace("\"kind\":\"line\"", "\"kind\":\"pie\"").prepend(h)
        << "4: \"view\" event: a view with an unknown kind 'pie' (one of line, stacked, bars, table, timeline)";
    QTest::newRow("measurement without unit")
        << h + r1.left(r1.lastIndexOf("{\"device\"")) + "{\"event\":\"measurement\",\"name\":\"x\",\"value\":1}\n" + done
        << "6: \"measurement\" event: a measurement needs 'name', 'unit' (strings) and 'value' (a number)";
    QTest::newRow("run index that does not exist")
        << h + QByteArray(r1).replace("\"index\":1", "\"index\":9")
        << "3: \"run\" event: run index 9 does not exist (lesson \"training-loop\" has 3 run block(s))";
    QTest::newRow("run index 0") << h + QByteArray(r1).replace("\"index\":1", "\"index\":0")
                                 << "3: \"run\" event: field \"index\" must be a whole number >= 1";
    QTest::newRow("another lab") << h + QByteArray(r1).replace("\"lab\":\"train\"", "\"lab\":\"devices\"")
                                 << "3: \"run\" event: run 1 was recorded with lab \"devices\", but the lesson's run 1 uses lab \"train\"";
    QTest::newRow("a run twice") << h + r1 + r1 << "7: \"run\" event: run 1 is recorded twice";
    QTest::newRow("event before any run") << h + r1.mid(r1.indexOf('\n') + 1) << "3: a \"view\" event before the first \"run\" event";
    QTest::newRow("event after done") << h + r1 + done << "7: a \"done\" event after run 1's \"done\" event";
    QTest::newRow("a record named like an update")
        << h + "{\"event\":\"run\",\"index\":1,\"lab\":\"train\",\"title\":\"t\"}\n{\"event\":\"point\",\"view\":\"v\",\"series\":\"s\",\"x\":[1],\"y\":1}\n"
        << "4: \"point\" event: a point for view 'v', which was not declared";
    QTest::newRow("a failed run") << h + r1.left(r1.indexOf('\n') + 1) + "{\"event\":\"error\",\"type\":\"CudaError\",\"message\":\"boom\"}\n"
                                  << "4: the recorded run failed (CudaError: boom)";
    QTest::newRow("run without done") << h + r1.left(r1.lastIndexOf("{\"device\"")) << "5: run 1 has no \"done\" event (was the recording cut short?)";
    QTest::newRow("next run before done") << h + r1.left(r1.lastIndexOf("{\"device\"")) + run2 << "6: run 1 has no \"done\" event before the next run starts";
    QTest::newRow("no run") << h << "2: no run recorded";
    // The lab protocol's version: a file without one, or of another, is refused (record it again).
    const QByteArray oldHeader = h.left(h.indexOf('\n') + 1);
    QTest::newRow("no protocol version") << oldHeader + r1 << "2: no \"protocol\" event before the first run";
    QTest::newRow("another protocol version") << oldHeader + R"({"event":"protocol","version":2})" "\n" + r1
                                              << "2: recorded with version 2 of the lab protocol, and this GPU Lab reads version 1";
    QTest::newRow("a protocol event after a run") << h + r1 + R"({"event":"protocol","version":1})" "\n"
                                                  << "7: \"protocol\" event: it comes once, before the first run";
  }

  void referenceRunMistakesNameFileAndLine() {
    QFETCH(QByteArray, text);
    QFETCH(QString, expected);
    const Course c = loadCourse();
    QTemporaryDir dir;
    const QString path = dir.filePath("training-loop.jsonl");
    gpulab::test::writeFile(path, text);
    const ReferenceRuns refs = loadReferenceRuns(path, c.find("training-loop"));
    QVERIFY2(!refs.ok(), "the file was accepted");
    QVERIFY2(refs.error.startsWith(path + ":" + expected), qPrintable(refs.error));
    QVERIFY(refs.runs.empty());
    QVERIFY(!refs.run(1));  // nothing of a refused file is shown
  }

  void aValidReferenceSnippetLoads() {
    // The snippet the mistakes above are made from is valid, so each row fails for its own reason.
    const Course c = loadCourse();
    const ReferenceRuns refs = parseReferenceRuns(QByteArray(kRefHeader) + kRefRun1, "x.jsonl", c.find("training-loop"));
    QVERIFY2(refs.ok(), qPrintable(refs.error));
    QCOMPARE(refs.run(1)->updates.size(), 3);
    // Blank lines are skipped and line numbers still count them.
    const ReferenceRuns blank = parseReferenceRuns(QByteArray(kRefHeader) + "\n" + kRefRun1 + "\n{]\n", "x.jsonl");
    QVERIFY2(blank.error.startsWith("x.jsonl:9: invalid JSON"), qPrintable(blank.error));
    // A code cell's events (gpulab-cli lesson --json prints them before the runs) are no lab's: skipped.
    const QByteArray cell = R"({"event":"cell","index":1,"line":9,"setup":true,"status":"ok","seconds":0.1,"output":""})" "\n";
    const ReferenceRuns withCells = parseReferenceRuns(QByteArray(kRefHeader) + cell + kRefRun1, "x.jsonl", c.find("training-loop"));
    QVERIFY2(withCells.ok(), qPrintable(withCells.error));
    QCOMPARE(withCells.run(1)->updates.size(), 3);
  }

  void gpuNamesAreShortenedGenerically_data() {
    QTest::addColumn<QString>("name");
    QTest::addColumn<QString>("expected");
    QTest::newRow("H100 SXM") << "NVIDIA H100 80GB HBM3" << "NVIDIA H100";
    QTest::newRow("A100 SXM4") << "NVIDIA A100-SXM4-80GB" << "NVIDIA A100";
    QTest::newRow("A100 PCIe") << "NVIDIA A100-PCIE-40GB" << "NVIDIA A100";
    QTest::newRow("V100") << "Tesla V100-SXM2-16GB" << "Tesla V100";
    QTest::newRow("GH200") << "NVIDIA GH200 480GB" << "NVIDIA GH200";
    QTest::newRow("H100 PCIe") << "NVIDIA H100 PCIe" << "NVIDIA H100 PCIe";
    QTest::newRow("H100 NVL") << "NVIDIA H100 NVL" << "NVIDIA H100 NVL";
    QTest::newRow("GeForce") << "NVIDIA GeForce RTX 4090" << "NVIDIA GeForce RTX 4090";
    QTest::newRow("H200") << "NVIDIA H200" << "NVIDIA H200";
    QTest::newRow("only a size") << "80GB" << "80GB";
  }

  void gpuNamesAreShortenedGenerically() {
    QFETCH(QString, name);
    QFETCH(QString, expected);
    QCOMPARE(shortGpuName(name), expected);
  }

  void embeddedReferenceRunsLoad() {
    // Every recording shipped in resources/reference-runs/ belongs to a lesson and loads cleanly.
    const Course c = loadCourse();
    const QStringList files = QDir(kEmbeddedReferenceRoot).entryList({"*.jsonl"}, QDir::Files);
    if (files.isEmpty()) qInfo("no reference runs are embedded (resources/reference-runs/ has no .jsonl file)");
    for (const QString& file : files) {
      const Lesson* lesson = c.find(QFileInfo(file).completeBaseName());
      QVERIFY2(lesson, qPrintable(file + ": no lesson has this id"));
      const auto refs = findReferenceRuns(*lesson);
      QVERIFY(refs);
      QVERIFY2(refs->ok(), qPrintable(refs->error));
      QVERIFY2(refs->run(1), qPrintable(file + ": run 1 is not recorded"));
    }
  }

  void corruptProgressIsKeptAsideNotFatal() {
    QTemporaryDir dir;
    const QString path = dir.filePath("progress.json");
    gpulab::test::writeFile(path, "{ not json");
    ProgressStore store(path);
    QVERIFY(store.lastError().contains("corrupt"));
    QCOMPARE(QDir(dir.path()).entryList({"progress.json.corrupt*"}, QDir::Files).size(), 1);  // kept under a name of its own
    store.setCompleted("x");
    QVERIFY(ProgressStore(path).isCompleted("x"));
  }

  // Issue 8, defect 6: a lesson file is capped in size and paragraph length (Qt's Markdown import is
  // quadratic in a paragraph's length), with errors naming the file, its size and the limit.
  void lessonFilesAndParagraphsAreCapped() {
    QTemporaryDir dir;
    QByteArray huge(kHeader);
    huge += QByteArray(3355444 - huge.size(), 'x');  // 3.2 MiB
    gpulab::test::writeFile(dir.filePath("01-huge/lesson.md"), huge);
    QByteArray longParagraph(kHeader);
    for (int i = 0; i < 40; ++i) longParagraph += "A line of prose with `code` and **bold** text in it, eighty wide.\n";
    gpulab::test::writeFile(dir.filePath("02-long/lesson.md"), longParagraph);
    QByteArray atTheCaps(kHeader);  // paragraphs just under the limit, up to just under the file's
    const QByteArray line = "Prose with `code`, **bold** and *emphasis*, as lessons are written.\n";  // 68 bytes
    const QByteArray code = "```python\n" + QByteArray("x = torch.randn(3, 4, device=device)  # a code line\n").repeated(60) + "```\n";
    while (atTheCaps.size() + 30 * line.size() + 1 + code.size() <= 64 * 1024) atTheCaps += line.repeated(30) + "\n";
    atTheCaps += code;
    QVERIFY(atTheCaps.size() > 60 * 1024);
    QVERIFY(atTheCaps.size() <= 64 * 1024);
    gpulab::test::writeFile(dir.filePath("03-at-the-caps/lesson.md"), atTheCaps.replace("id: sample", "id: at-the-caps"));
    const Course c = loadCourse(dir.path());
    QCOMPARE(c.lessons.size(), 3);
    QVERIFY2(c.lessons[0].error.startsWith(dir.filePath("01-huge/lesson.md") + ":0: lesson.md is 3.2 MiB; lessons may be at most 64 KiB"),
             qPrintable(c.lessons[0].error));
    QVERIFY2(c.lessons[1].error.startsWith(dir.filePath("02-long/lesson.md") + ":7: a paragraph is longer than 2048 characters; split it with a blank line"),
             qPrintable(c.lessons[1].error));
    QVERIFY2(c.lessons[2].ok(), qPrintable(c.lessons[2].error));
  }

  // Issue 48 1.2: a file a lesson names -- its lesson.md, its lab's code -- is read only when it
  // resolves inside the lesson's folder (the folder inside the course's), is a regular file (a FIFO is
  // never opened: opening one waits for a writer) and is not too large; else the lesson is broken,
  // saying which file and why, and the other lessons are not affected. Links inside the folder are fine.
  void aLessonReadsOnlyRegularFilesInsideItsFolder_data() {
    QTest::addColumn<QString>("entry");  // in the course writeScratchCourse writes
    QTest::addColumn<QString>("kind");   // what makeEntry makes it
    QTest::addColumn<QString>("expected");  // in the lesson's error ("%ROOT%": the course, "%OUTSIDE%": a folder outside it); "" when it loads
    const QString code = "01-sample/scratch_lab.py", text = "01-sample/lesson.md";
    QTest::newRow("lab code linked outside")
        << code << "link outside" << "lab block: the lab's code scratch_lab.py resolves to %OUTSIDE%/scratch_lab.py, outside the lesson's folder";
    QTest::newRow("lab code a FIFO") << code << "fifo" << "lab block: the lab's code scratch_lab.py is a FIFO, not a regular file";
    QTest::newRow("lab code a folder") << code << "folder" << "lab block: the lab's code scratch_lab.py is a folder, not a regular file";
    QTest::newRow("lab code too large") << code << "too large" << "lab block: the lab's code scratch_lab.py is 1.5 MiB, over the 1.0 MiB limit";
    QTest::newRow("lesson.md a FIFO") << text << "fifo" << ":0: lesson.md is a FIFO, not a regular file";
    QTest::newRow("lesson.md linked to /dev/zero") << text << "link to /dev/zero" << ":0: lesson.md resolves to /dev/zero, outside the lesson's folder";
    QTest::newRow("lesson.md linked outside") << text << "link outside" << ":0: lesson.md resolves to %OUTSIDE%/lesson.md, outside the lesson's folder";
    QTest::newRow("folder linked outside")
        << "01-sample" << "link outside" << ":0: the lesson's folder %ROOT%/01-sample resolves to %OUTSIDE%/01-sample, outside the course's folder";
    QTest::newRow("lesson.md linked inside its folder") << text << "link inside" << "";
    QTest::newRow("lab code linked inside its folder") << code << "link inside" << "";
  }
  void aLessonReadsOnlyRegularFilesInsideItsFolder() {
    QFETCH(QString, entry);
    QFETCH(QString, kind);
    QFETCH(QString, expected);
    QTemporaryDir dir, outside;
    writeScratchCourse(dir.path());
    QVERIFY(makeEntry(dir.filePath(entry), kind, outside.path()));
    expected.replace("%ROOT%", dir.path()).replace("%OUTSIDE%", QFileInfo(outside.path()).canonicalFilePath());
    Course c;
    QString source;
    auto load = [&] {
      c = loadCourse(dir.path());
      source = c.labSource("scratch");
    };
    QVERIFY2(finishesWithoutWaiting(load, dir.filePath(entry)), "the loader opened a FIFO and waited for a writer");
    QCOMPARE(c.lessons.size(), 2);
    QVERIFY2(c.lessons[1].ok(), qPrintable(c.lessons[1].error));
    const Lesson& l = c.lessons[0];
    if (expected.isEmpty()) {
      QVERIFY2(l.ok(), qPrintable(l.error));
      QCOMPARE(source, QString(kScratchLab));
      return;
    }
    QVERIFY2(l.error.startsWith(dir.filePath("01-sample/lesson.md") + ":") && l.error.contains(expected), qPrintable(l.error));
    QVERIFY2(source.isEmpty(), qPrintable(source));  // the "Lab code" tab shows nothing of it
  }

  // The code panel and a run read the lab's code again, with the same checks: code swapped for a link
  // out of the folder or a FIFO after the lesson loaded is neither shown nor run, nor waited on.
  void aLabsCodeIsCheckedAgainWhenItIsRead_data() {
    QTest::addColumn<QString>("kind");
    QTest::addColumn<QString>("expected");
    QTest::newRow("linked outside") << "link outside" << "resolves to %OUTSIDE%/scratch_lab.py, outside the lesson's folder";
    QTest::newRow("a FIFO") << "fifo" << "is a FIFO, not a regular file";
  }
  void aLabsCodeIsCheckedAgainWhenItIsRead() {
    QFETCH(QString, kind);
    QFETCH(QString, expected);
    QTemporaryDir dir, outside;
    writeScratchCourse(dir.path());
    const Course c = loadCourse(dir.path());
    QVERIFY2(c.lessons[0].ok(), qPrintable(c.lessons[0].error));
    QCOMPARE(c.labSource("scratch"), QString(kScratchLab));
    const QString code = dir.filePath("01-sample/scratch_lab.py");
    QVERIFY(makeEntry(code, kind, outside.path()));
    expected.replace("%OUTSIDE%", QFileInfo(outside.path()).canonicalFilePath());
    QString source;
    std::string error;
    auto readAndRun = [&] {
      source = c.labSource("scratch");
      const std::unique_ptr<lab::Lab> theLab = c.makeLab("scratch");
      const lab::Params params(theLab->params());
      DiscardingSink sink;
      const lab::StopToken stop;
      error = gpulab::test::textOf([&] { theLab->run(params, sink, stop); });
    };
    QVERIFY2(finishesWithoutWaiting(readAndRun, code), "reading the lab's code opened a FIFO and waited for a writer");
    QVERIFY2(source.isEmpty(), qPrintable(source));
    QVERIFY2(QString::fromStdString(error).startsWith("the scratch lab cannot run: the lab's code scratch_lab.py " + expected), error.c_str());
  }

  // Issue 8, defect 8: values of the wrong type, unknown keys and values the lab refuses are mistakes,
  // never silently read as something else.
  void invalidValuesAreNotLoaded_data() {
    QTest::addColumn<QByteArray>("body");
    QTest::addColumn<QString>("expected");
    QTest::newRow("expose as a string") << QByteArray("```run\n{\"lab\": \"cnn\", \"expose\": \"lr\"}\n```\n")
                                        << "lesson.md:7: run block: \"expose\" must be a list of parameter names, like [\"lr\"] (found a string)";
    QTest::newRow("expose with a number") << QByteArray("```run\n{\"lab\": \"cnn\", \"expose\": [\"lr\", 3]}\n```\n")
                                          << "lesson.md:7: run block: expose: each entry must be a parameter name in quotes (found 3)";
    QTest::newRow("lab as a number") << QByteArray("```run\n{\"lab\": 5}\n```\n") << "lesson.md:7: run block: \"lab\" must be a string (found 5)";
    QTest::newRow("title as a list") << QByteArray("```run\n{\"lab\": \"cnn\", \"title\": [\"x\"]}\n```\n")
                                     << "lesson.md:7: run block: \"title\" must be a string (found a list)";
    QTest::newRow("text value the lab refuses") << QByteArray("```run\n{\"lab\": \"cnn\", \"params\": {\"mlp_hidden\": \"64,,32\"}}\n```\n")
                                                << "lesson.md:7: run block: invalid value '64,,32' for parameter 'mlp_hidden'";
    QTest::newRow("device the lab refuses") << QByteArray("```run\n{\"lab\": \"cnn\", \"quick\": {\"device\": \"gpu\"}}\n```\n")
                                            << "lesson.md:7: run block: invalid value 'gpu' for parameter 'device'";
    QTest::newRow("timed as a string") << QByteArray("```run\n{\"lab\": \"cnn\", \"challenge\": {\"text\": \"t\", \"checks\": "
                                                     "[{\"measurement\": \"CNN: test accuracy\", \"at_least\": 0.1, \"timed\": \"yes\"}]}}\n```\n")
                                       << "lesson.md:7: run block: challenge: check: \"timed\" must be true or false (found a string)";
    QTest::newRow("correct is 1") << quiz("{\"text\": \"a\", \"correct\": 1, \"explanation\": \"x\"}")
                                  << "lesson.md:7: quiz: \"correct\" of the answer \"a\" must be true or false (found 1)";
    QTest::newRow("correct is \"true\"") << quiz("{\"text\": \"a\", \"correct\": \"true\", \"explanation\": \"x\"}")
                                         << "lesson.md:7: quiz: \"correct\" of the answer \"a\" must be true or false (found a string)";
    QTest::newRow("unknown quiz key") << quiz("{\"text\": \"a\", \"correct\": true, \"explanation\": \"x\"}", "\"hint\": \"h\", ")
                                      << "lesson.md:7: quiz: unknown key \"hint\" (question, answers)";
    QTest::newRow("unknown answer key") << quiz("{\"text\": \"a\", \"correct\": true, \"explanation\": \"x\", \"why\": \"?\"}")
                                        << "lesson.md:7: quiz: answer: unknown key \"why\" (text, correct, explanation)";
    QTest::newRow("answers as an object") << QByteArray("```quiz\n{\"question\": \"Q?\", \"answers\": {\"text\": \"a\"}}\n```\n")
                                          << "lesson.md:7: quiz: \"answers\" must be a list of answers (found an object)";
    QTest::newRow("question as a number") << QByteArray("```quiz\n{\"question\": 42, \"answers\": []}\n```\n")
                                          << "lesson.md:7: quiz: \"question\" must be a string (found 42)";
    QTest::newRow("explanation as a number") << quiz("{\"text\": \"a\", \"correct\": true, \"explanation\": 7}")
                                             << "lesson.md:7: quiz: answer: \"explanation\" must be a string (found 7)";
    QTest::newRow("unclosed code block") << QByteArray("```python\nx = 1\n```run\n{\"lab\": \"cnn\"}\n```\n\n~~~\nnever closed\n")
                                         << "lesson.md:13: code block is not closed by ~~~";
    QTest::newRow("NUL in the text") << QByteArray("Text\nwith a ") + QByteArray(1, '\0') + " NUL\n" << "lesson.md:8: the file contains a NUL character";
  }

  void invalidValuesAreNotLoaded() {
    QFETCH(QByteArray, body);
    QFETCH(QString, expected);
    const Lesson l = parseLesson(QString::fromUtf8(QByteArray(kHeader) + body), "lessons/09-sample/lesson.md", gpulab::test::shippedLabs());
    QVERIFY2(!l.ok(), "loaded as ok");
    QVERIFY2(l.error.startsWith("lessons/09-sample/" + expected), qPrintable(l.error));
  }

  // An id names files and progress keys: [a-z0-9][a-z0-9-]{0,63}, nothing else.
  void idsFollowTheGrammar_data() {
    QTest::addColumn<QByteArray>("id");
    QTest::addColumn<bool>("valid");
    QTest::newRow("simple") << QByteArray("device-setup") << true;
    QTest::newRow("digits") << QByteArray("0-intro") << true;
    QTest::newRow("64 characters") << QByteArray(64, 'a') << true;
    QTest::newRow("65 characters") << QByteArray(65, 'a') << false;
    QTest::newRow("parent folder") << QByteArray("../x") << false;
    QTest::newRow("slash") << QByteArray("a/b") << false;
    QTest::newRow("space") << QByteArray("has space") << false;
    QTest::newRow("upper case") << QByteArray("Intro") << false;
    QTest::newRow("leading dash") << QByteArray("-x") << false;
    QTest::newRow("NUL") << QByteArray("a\0b", 3) << false;
    QTest::newRow("tab") << QByteArray("a\tb") << false;
    QTest::newRow("non-ASCII") << QByteArray("caf\xc3\xa9") << false;
  }

  void idsFollowTheGrammar() {
    QFETCH(QByteArray, id);
    QFETCH(bool, valid);
    const QByteArray text = "---\nid: " + id + "\ntitle: T\nchapter: C\n---\nText\n";
    const Lesson l = parseLesson(QString::fromUtf8(text), "lessons/09-folder/lesson.md", gpulab::test::shippedLabs());
    QCOMPARE(l.ok(), valid);
    if (valid) return;
    QVERIFY2(l.error.startsWith("lessons/09-folder/lesson.md:2: "), qPrintable(l.error));
    QCOMPARE(l.id, QString("09-folder"));  // the invalid id is not kept
  }

  // A ```run or ```quiz line inside a code block is code (a lesson showing the format), not a directive.
  void directivesInsideCodeBlocksAreCode() {
    const QByteArray shown = "```python\n```run\n{\"lab\": \"no-such-lab\"}\n```\n\n"
                             "````markdown\n```quiz\n{}\n```\n````\n\n"
                             "~~~\n```run\n~~~\n\n"
                             "```run\n{\"lab\": \"cnn\"}\n```\n";
    const Lesson l = parseLesson(QString::fromUtf8(QByteArray(kHeader) + shown), "x/lesson.md", gpulab::test::shippedLabs());
    QVERIFY2(l.ok(), qPrintable(l.error));
    QCOMPARE(l.runs.size(), 1);  // only the last block, outside any code block
    QCOMPARE(l.quizzes.size(), 0);
    QVERIFY(l.markdown.contains("```run\n{\"lab\": \"no-such-lab\"}"));
    QVERIFY(!l.markdown.contains("{\"lab\": \"cnn\"}"));
  }

  // A ```python block at the margin is a code cell, a ```python setup block a setup cell; the text
  // around them is cut into the stretches the page shows between the cells. Python in a list item, in
  // another kind of block or in a ~~~ fence is an example, not a cell.
  void pythonBlocksAreCodeCells() {
    const QByteArray body = "Before.\n\n```python setup\nimport torch\n\nx = torch.ones(3)\n```\n\nBetween.\n\n"
                            "```python\nprint(x)\n```\n"
                            "- a list item\n  ```python\n  print('example')\n  ```\n"
                            "~~~\n```python\nnot a cell\n```\n~~~\n\n"
                            "```text\n```python\n```\n\n"
                            "```run\n{\"lab\": \"cnn\"}\n```\nAfter.\n";
    const Lesson l = parseLesson(QString::fromUtf8(QByteArray(kHeader) + body), "x/lesson.md", gpulab::test::shippedLabs());
    QVERIFY2(l.ok(), qPrintable(l.error));
    QCOMPARE(l.cells.size(), 2);
    QCOMPARE(l.cells[0].code, QString("import torch\n\nx = torch.ones(3)"));
    QVERIFY(l.cells[0].setup);
    QCOMPARE(l.cells[0].line, 9);  // the header's 6 lines, "Before.", a blank line, then the fence
    QCOMPARE(l.cells[1].code, QString("print(x)"));
    QVERIFY(!l.cells[1].setup);
    QCOMPARE(l.texts.size(), 3);
    QCOMPARE(l.texts[0].trimmed(), QString("# Text\nBefore."));
    QCOMPARE(l.texts[1].trimmed(), QString("Between."));
    QVERIFY2(l.texts[2].contains("print('example')") && l.texts[2].contains("not a cell") && l.texts[2].contains("▶ Run 1") &&
            l.texts[2].trimmed().endsWith("After."), qPrintable(l.texts[2]));
    QCOMPARE(l.runs.size(), 1);
    QVERIFY(l.markdown.contains("```python setup\nimport torch"));  // the whole text, cells included
  }

  void nonUtf8LessonsAreRefused() {
    QTemporaryDir dir;
    gpulab::test::writeFile(dir.filePath("01-latin1/lesson.md"), QByteArray(kHeader) + "Caf\xe9 au lait\n");
    gpulab::test::writeFile(dir.filePath("02-overlong/lesson.md"), QByteArray(kHeader).replace("sample", "two") + "\n\xc0\xaf\n");
    const Course c = loadCourse(dir.path());
    QVERIFY2(c.lessons[0].error.startsWith(dir.filePath("01-latin1/lesson.md") + ":7: lesson.md is not valid UTF-8 (byte 0xe9 at offset 58)"),
             qPrintable(c.lessons[0].error));
    QVERIFY2(c.lessons[1].error.startsWith(dir.filePath("02-overlong/lesson.md") + ":8: lesson.md is not valid UTF-8 (byte 0xc0"),
             qPrintable(c.lessons[1].error));
  }

  // A broken lesson (a draft, a copy) never takes a valid lesson's id away, whatever the folder order.
  void aBrokenLessonCannotTakeAValidLessonsId() {
    QTemporaryDir dir;
    const QByteArray header = "---\nid: shared\ntitle: T\nchapter: C\n---\n";
    gpulab::test::writeFile(dir.filePath("01-draft/lesson.md"), header + "```run\n{\"lab\": \"trian\"}\n```\n");
    const QByteArray amp = gpulab::test::copyShippedLab(dir.filePath("02-real"), "07-mixed-precision");
    gpulab::test::writeFile(dir.filePath("02-real/lesson.md"), header + amp + "\n```run\n{\"lab\": \"amp\"}\n```\n");
    gpulab::test::writeFile(dir.filePath("03-copy/lesson.md"), header + "Text\n");
    const Course c = loadCourse(dir.path());
    QCOMPARE(c.lessons.size(), 3);
    const Lesson* real = c.find("shared");
    QVERIFY(real);
    QVERIFY2(real->ok(), qPrintable(real->error));
    QCOMPARE(real->folder, dir.filePath("02-real"));
    const QString also = "duplicate id \"shared\", also used by " + dir.filePath("02-real/lesson.md");
    QVERIFY2(c.lessons[0].error.contains("unknown lab 'trian'") && c.lessons[0].error.contains(also), qPrintable(c.lessons[0].error));
    QVERIFY2(c.lessons[2].error.startsWith(dir.filePath("03-copy/lesson.md") + ":2: " + also), qPrintable(c.lessons[2].error));
    // Each lesson keeps an id of its own, so each can be selected and shows its own error.
    QStringList ids;
    for (const Lesson& l : c.lessons) ids << l.id;
    QCOMPARE(ids, (QStringList{"01-draft", "shared", "03-copy"}));
  }

  // Issue 8, defect 7: every corrupt file is kept (none deleted), and the message names the copy.
  void everyCorruptProgressFileIsKept() {
    QTemporaryDir dir;
    const QString path = dir.filePath("progress.json");
    QStringList messages;
    for (const QByteArray& text : {QByteArray("{ not json"), QByteArray("[\"second\"]"), QByteArray("{\"third\": ")}) {
      gpulab::test::writeFile(path, text);
      ProgressStore store(path);
      messages << store.lastError();
      store.setAnswer("device-setup", 0, 1);  // progress goes on in a fresh file
      QVERIFY2(store.lastError().isEmpty(), qPrintable(store.lastError()));
    }
    const QStringList copies = QDir(dir.path()).entryList({"progress.json.corrupt*"}, QDir::Files, QDir::Name);
    QCOMPARE(copies.size(), 3);
    QStringList contents;
    for (const QString& copy : copies) {
      QFile f(dir.filePath(copy));
      QVERIFY(f.open(QIODevice::ReadOnly));
      contents << QString::fromUtf8(f.readAll());
    }
    QCOMPARE(contents, (QStringList{"{ not json", "[\"second\"]", "{\"third\": "}));
    for (int i = 0; i < 3; ++i) QVERIFY2(messages[i].contains("kept as " + dir.filePath(copies[i])), qPrintable(messages[i]));
    QCOMPARE(ProgressStore(path).answer("device-setup", 0), 1);
  }

  // An unreadable file is never written over: progress is read-only for the session, and says so.
  void unreadableProgressIsNeverOverwritten() {
    QTemporaryDir dir;
    const QString path = dir.filePath("progress.json");
    QVERIFY(makeSocket(path));
    ProgressStore store(path);
    QVERIFY2(store.lastError().contains("cannot be read") && store.lastError().contains("read-only for this session"), qPrintable(store.lastError()));
    store.setAnswer("device-setup", 0, 2);
    store.setCompleted("device-setup");
    QVERIFY2(isSocket(path), "the unreadable file was replaced");
    QCOMPARE(store.answer("device-setup", 0), 2);  // kept for the session
    QVERIFY2(store.lastError().contains("read-only"), qPrintable(store.lastError()));
  }
};

QTEST_GUILESS_MAIN(TestCourse)
#include "test_course.moc"
