// The lesson format: the embedded lessons load cleanly, mistakes are reported with file, line and
// what is wrong (and leave the other lessons usable), and progress survives a restart.
#include <QDir>
#include <QFile>
#include <QTemporaryDir>

#include "app/course/course.h"
#include "app/course/progress_store.h"
#include "test_util.h"

using namespace gpulab::course;

namespace {

const char* kHeader = "---\nid: sample\ntitle: Sample\nchapter: Tests\n---\n# Text\n";


}  // namespace

class TestCourse : public QObject {
  Q_OBJECT

 private slots:
  void embeddedLessonsLoadCleanly() {
    const Course c = loadCourse();
    QCOMPARE(c.lessons.size(), 3);
    QStringList ids;
    for (const Lesson& l : c.lessons) {
      QVERIFY2(l.ok(), qPrintable(l.error));
      QVERIFY(!l.runs.isEmpty());
      QVERIFY(!l.quizzes.isEmpty());
      ids << l.id;
    }
    QCOMPARE(ids, (QStringList{"device-setup", "same-device-rule", "training-loop"}));
    // The code panel's source is the lab's real source file.
    QVERIFY(c.labSource("train").contains("void TrainLab::run("));
    QVERIFY(c.labSource("device-rule").contains("DeviceRuleLab::run"));
    QVERIFY(!c.find("training-loop")->markdown.contains("```run"));  // directives are taken out of the text
  }

  void mistakesAreReportedWithFileLineAndWhat_data() {
    QTest::addColumn<QByteArray>("body");
    QTest::addColumn<QString>("expected");
    QTest::newRow("unknown lab") << QByteArray("```run\n{\"lab\": \"trian\"}\n```\n") << "lesson.md:7: run block: unknown lab 'trian'";
    QTest::newRow("unknown parameter") << QByteArray("\n```run\n{\"lab\": \"train\", \"params\": {\"batchsize\": 3}}\n```\n")
                                       << "lesson.md:8: run block: unknown parameter 'batchsize'";
    QTest::newRow("out of range") << QByteArray("```run\n{\"lab\": \"train\", \"params\": {\"batch_size\": 0}}\n```\n")
                                  << "lesson.md:7: run block: invalid value '0' for parameter 'batch_size': expected a number in [1, 65536]";
    QTest::newRow("unknown exposed parameter") << QByteArray("```run\n{\"lab\": \"train\", \"expose\": [\"speed\"]}\n```\n")
                                               << "lesson.md:7: run block: expose: unknown parameter 'speed'";
    QTest::newRow("bad JSON") << QByteArray("```run\n{\"lab\": \"train\",\n \"params\": {]\n}\n```\n") << "lesson.md:9: run block: invalid JSON";
    QTest::newRow("quiz without a correct answer")
        << QByteArray("```quiz\n{\"question\": \"Q?\", \"answers\": [{\"text\": \"a\", \"explanation\": \"x\"}, {\"text\": \"b\", \"explanation\": \"y\"}]}\n```\n")
        << "lesson.md:7: quiz: exactly one answer must be \"correct\": true (found 0)";
    QTest::newRow("quiz answer without explanation")
        << QByteArray("```quiz\n{\"question\": \"Q?\", \"answers\": [{\"text\": \"a\", \"correct\": true}, {\"text\": \"b\", \"explanation\": \"y\"}]}\n```\n")
        << "lesson.md:7: quiz: the answer \"a\" has no \"explanation\"";
    QTest::newRow("unclosed block") << QByteArray("```quiz\n{}\n") << "lesson.md:7: quiz block is not closed";
  }

  void mistakesAreReportedWithFileLineAndWhat() {
    QFETCH(QByteArray, body);
    QFETCH(QString, expected);
    const Lesson l = parseLesson(QString::fromUtf8(QByteArray(kHeader) + body), "lessons/09-sample/lesson.md");
    QVERIFY(!l.ok());
    QVERIFY2(l.error.contains(expected), qPrintable(l.error));
    QVERIFY(l.error.startsWith("lessons/09-sample/lesson.md:"));
  }

  void frontMatterIsRequired() {
    QVERIFY(parseLesson("# no front matter", "x/lesson.md").error.contains("x/lesson.md:1: expected front matter"));
    QVERIFY(parseLesson("---\nid: a\n---\n", "x/lesson.md").error.contains("needs id, title and chapter"));
    const Lesson good = parseLesson(QString(kHeader) + "```run\n{\"lab\": \"train\", \"params\": {\"epochs\": 2}, \"expose\": [\"lr\"]}\n```\n", "x/lesson.md");
    QVERIFY2(good.ok(), qPrintable(good.error));
    QCOMPARE(good.runs.front().params.at("epochs"), std::string("2"));
    QCOMPARE(good.runs.front().expose, QStringList{"lr"});
  }

  void aBrokenLessonLeavesTheOthersUsable() {
    QTemporaryDir dir;
    gpulab::test::writeFile(dir.filePath("01-good/lesson.md"), QByteArray(kHeader) + "```run\n{\"lab\": \"devices\"}\n```\n");
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

  void corruptProgressIsKeptAsideNotFatal() {
    QTemporaryDir dir;
    const QString path = dir.filePath("progress.json");
    gpulab::test::writeFile(path, "{ not json");
    ProgressStore store(path);
    QVERIFY(store.lastError().contains("corrupt"));
    QVERIFY(QFile::exists(path + ".corrupt"));
    store.setCompleted("x");
    QVERIFY(ProgressStore(path).isCompleted("x"));
  }
};

QTEST_GUILESS_MAIN(TestCourse)
#include "test_course.moc"
