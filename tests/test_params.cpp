// Lab parameters as lesson files, the player and gpulab-cli set them: numbers read and print the same
// in every locale (QCoreApplication calls setlocale(LC_ALL, ""), so the C library would write
// "0,001" under de_DE), ranges print exactly, a number that does not fit is named as it was written,
// and text parameters (hidden widths, device) are checked when they are set -- at lesson load and on
// the command line -- by the same code that runs them.
#include <QScopeGuard>
#include <clocale>

#include "app/course/course.h"
#include "engine/core/errors.h"
#include "engine/core/number_format.h"
#include "engine/memory/caching_allocator.h"
#include "engine/nn/layers.h"
#include "engine/optim/optimizer.h"
#include "fake_arena.h"
#include "test_util.h"

using namespace gpulab;

namespace {

// The message of what `f` throws (an Error), or "" when it throws nothing.
template <class F>
QString errorOf(F&& f) {
  try {
    f();
  } catch (const Error& e) {
    return QString::fromUtf8(e.what());
  }
  return {};
}

// A lab's parameters, as its form and gpulab-cli set them: a C++ lab's, or a shipped lesson's Python
// lab's (its ```lab block); "large" is one int parameter whose range passes 2^31.
lab::Params paramsOf(const char* labId) {
  if (std::string(labId) == "large") return lab::Params({lab::intParam("budget", 0, 0, std::int64_t{1} << 50, "Bytes")});
  static const course::Course shipped = course::loadCourse();
  return shipped.makeLab(labId)->defaults();
}

// Switches the C library's locale for one test and puts the previous one back however it ends.
class LocaleScope {
 public:
  explicit LocaleScope(const QByteArray& name) : previous_(std::setlocale(LC_ALL, nullptr)) {
    ok_ = std::setlocale(LC_ALL, name.constData()) != nullptr;
  }
  ~LocaleScope() { std::setlocale(LC_ALL, previous_.c_str()); }
  bool ok() const { return ok_; }

 private:
  std::string previous_;
  bool ok_ = false;
};

const char* kLocaleHint =
    "is not installed here; on Debian: apt-get install locales && "
    "sed -i -E 's/^# *((de_DE|fr_FR|es_ES|ru_RU)\\.UTF-8)/\\1/' /etc/locale.gen && locale-gen";

void addLocaleRows() {
  QTest::addColumn<QByteArray>("locale");
  for (const char* l : {"C", "de_DE.UTF-8", "fr_FR.UTF-8", "es_ES.UTF-8", "ru_RU.UTF-8"}) QTest::newRow(l) << QByteArray(l);
}

const char* kLessonHeader = "---\nid: sample\ntitle: Sample\nchapter: Tests\n---\n# Text\n";

}  // namespace

class TestParams : public QObject {
  Q_OBJECT

 private slots:
  void numbersIgnoreTheLocale_data() { addLocaleRows(); }
  void numbersIgnoreTheLocale() {
    QFETCH(QByteArray, locale);
    LocaleScope scope(locale);
    if (!scope.ok()) QSKIP(qPrintable("locale " + locale + " " + kLocaleHint));
    if (locale != "C") QCOMPARE(std::localeconv()->decimal_point, ",");  // the locale really writes "0,5"

    lab::Params p = paramsOf("train");
    QCOMPARE(errorOf([&] { p.set("lr", "0.001"); }), QString());
    QCOMPARE(p.getFloat("lr"), 0.001);
    QCOMPARE(errorOf([&] { p.set("momentum", "0.95"); }), QString());
    QCOMPARE(p.getFloat("momentum"), 0.95);
    QVERIFY(errorOf([&] { p.set("lr", "0,001"); }).contains("invalid value '0,001' for parameter 'lr'"));

    QCOMPARE(formatNumber(0.001), std::string("0.001"));
    QCOMPARE(formatFixed(2.5, 2), std::string("2.50"));
    double x = 0;
    QCOMPARE(parseNumber("2.5e-3", x), ParseStatus::Ok);
    QCOMPARE(x, 0.0025);
    QCOMPARE(formatBytes(1536), std::string("1.50 KiB"));

    // The engine's own messages.
    Tensor w = zeros({2}).requires_grad_(true);
    QString e = errorOf([&] { optim::SGD({w}, optim::SGDOptions{.lr = -0.5}); });
    QVERIFY2(e.contains("Invalid learning rate: -0.5"), qPrintable(e));
    e = errorOf([&] { optim::SGD({w}, optim::SGDOptions{.lr = 0.1, .momentum = -0.25}); });
    QVERIFY2(e.contains("Invalid momentum value: -0.25"), qPrintable(e));
    Generator gen(1);
    e = errorOf([&] { nn::Dropout(1.5, gen); });
    QVERIFY2(e.endsWith("but got 1.5"), qPrintable(e));
    e = errorOf([&] { (void)dropout(ones({2}), 1.25, true, gen); });
    QVERIFY2(e.endsWith("but got 1.25"), qPrintable(e));
    QCOMPARE(QString::fromStdString(nn::Dropout(0.5, gen).extraRepr()), QString("p=0.5, inplace=False"));

    CachingAllocator alloc(std::make_unique<test::FakeArena>(8 << 20), Device(DeviceType::CUDA, 7));
    e = errorOf([&] { alloc.setMemoryFraction(1.5); });
    QVERIFY2(e.contains("Invalid fraction value: 1.5."), qPrintable(e));
    QCOMPARE(errorOf([&] { alloc.setMemoryFraction(0.25); }), QString());
    e = errorOf([&] { alloc.allocate(4 << 20); });
    QVERIFY2(e.contains("at most a fraction of 0.25 of it (2.00 MiB"), qPrintable(e));
    QVERIFY2(e.contains("Tried to allocate 4.00 MiB"), qPrintable(e));
  }

  void rangesPrintExactly_data() {
    QTest::addColumn<QByteArray>("lab");
    QTest::addColumn<QByteArray>("name");
    QTest::addColumn<QByteArray>("value");
    QTest::addColumn<QString>("expected");
    QTest::newRow("int") << QByteArray("train") << QByteArray("seed") << QByteArray("-1")
                         << "invalid value '-1' for parameter 'seed': expected a number in [0, 2147483647]";
    QTest::newRow("large int") << QByteArray("large") << QByteArray("budget") << QByteArray("-1")
                               << "invalid value '-1' for parameter 'budget': expected a number in [0, 1125899906842624]";
    QTest::newRow("float") << QByteArray("train") << QByteArray("lr") << QByteArray("20")
                           << "invalid value '20' for parameter 'lr': expected a number in [1e-07, 10]";
    QTest::newRow("float as written") << QByteArray("train") << QByteArray("lr") << QByteArray("2.50e1")
                                      << "invalid value '2.50e1' for parameter 'lr': expected a number in [1e-07, 10]";
  }
  void rangesPrintExactly() {
    QFETCH(QByteArray, lab);
    QFETCH(QByteArray, name);
    QFETCH(QByteArray, value);
    QFETCH(QString, expected);
    lab::Params p = paramsOf(lab.constData());
    QCOMPARE(errorOf([&] { p.set(name.toStdString(), value.toStdString()); }), expected);
  }

  void unrepresentableNumbersAreNamedAsWritten_data() {
    QTest::addColumn<QByteArray>("name");
    QTest::addColumn<QByteArray>("value");
    QTest::addColumn<QString>("expected");
    QTest::newRow("underflow") << QByteArray("lr") << QByteArray("1e-400") << "invalid value '1e-400' for parameter 'lr': out of range";
    QTest::newRow("overflow") << QByteArray("lr") << QByteArray("1e400") << "invalid value '1e400' for parameter 'lr': out of range";
    QTest::newRow("int overflow") << QByteArray("seed") << QByteArray("99999999999999999999")
                                  << "invalid value '99999999999999999999' for parameter 'seed': out of range";
    QTest::newRow("empty") << QByteArray("lr") << QByteArray("") << "invalid value '' for parameter 'lr': expected a number in [1e-07, 10]";
    QTest::newRow("nan") << QByteArray("lr") << QByteArray("nan") << "invalid value 'nan' for parameter 'lr': expected a number in [1e-07, 10]";
    QTest::newRow("trailing text") << QByteArray("epochs") << QByteArray("3x") << "invalid value '3x' for parameter 'epochs'";
  }
  void unrepresentableNumbersAreNamedAsWritten() {
    QFETCH(QByteArray, name);
    QFETCH(QByteArray, value);
    QFETCH(QString, expected);
    lab::Params p = paramsOf("train");
    const QString e = errorOf([&] { p.set(name.toStdString(), value.toStdString()); });
    QVERIFY2(e.startsWith(expected), qPrintable(e));
  }

  void hiddenWidthsAreCheckedWhenSet_data() {
    QTest::addColumn<QByteArray>("lab");
    QTest::addColumn<QByteArray>("value");
    QTest::addColumn<QString>("expected");  // "" when the value is valid
    QStringList many, huge;
    for (int i = 0; i < 65; ++i) many << "8";
    for (int i = 0; i < 64; ++i) huge << "65536";
    for (const char* lab : {"amp", "train"}) {  // two Python labs' "widths" type (each lab's ```lab block)
      auto row = [&](const char* what, const QByteArray& value, const QString& expected) {
        QTest::newRow(qPrintable(QString("%1: %2").arg(lab, what))) << QByteArray(lab) << value << expected;
      };
      row("one", "64", "");
      row("three", "256,128,100", "");
      row("64 layers", many.mid(1).join(',').toUtf8(), "");
      row("letters", "abc", "invalid value 'abc' for parameter 'hidden'");
      row("zero", "0", "invalid value '0' for parameter 'hidden'");
      row("empty", "", "invalid value '' for parameter 'hidden'");
      row("trailing comma", "8,", "invalid value '8,' for parameter 'hidden'");
      row("leading comma", ",8", "invalid value ',8' for parameter 'hidden'");
      row("empty item", "8,,8", "invalid value '8,,8' for parameter 'hidden'");
      row("negative", "-5", "invalid value '-5' for parameter 'hidden'");
      row("too wide", "100000,100000", "invalid value '100000,100000' for parameter 'hidden'");
      row("65 layers", many.join(',').toUtf8(), "at most 64 layers");
      row("too many parameters", huge.join(',').toUtf8(), "parameters");
    }
  }
  void hiddenWidthsAreCheckedWhenSet() {
    QFETCH(QByteArray, lab);
    QFETCH(QByteArray, value);
    QFETCH(QString, expected);
    lab::Params p = paramsOf(lab.constData());
    const QString e = errorOf([&] { p.set("hidden", value.toStdString()); });
    if (expected.isEmpty()) {
      QVERIFY2(e.isEmpty(), qPrintable(e));
      QCOMPARE(p.getString("hidden"), value.toStdString());
    } else {
      QVERIFY2(e.contains(expected), qPrintable(e));
      QVERIFY2(e.contains("parameter 'hidden'"), qPrintable(e));
      QVERIFY2(!e.contains('\n'), qPrintable(e));
    }
  }

  void tooManyParametersSaysWhatFits() {
    QStringList huge;
    for (int i = 0; i < 64; ++i) huge << "65536";
    lab::Params p = paramsOf("train");
    const QString e = errorOf([&] { p.set("hidden", huge.join(',').toStdString()); });
    // 63 * (65536 * 65536 + 65536) parameters, 16 bytes each with gradients and Adam's two moments.
    QVERIFY2(e.contains("270587068416 parameters"), qPrintable(e));
    QVERIFY2(e.contains("at most 64 layers and"), qPrintable(e));
  }

  void deviceSyntaxIsCheckedWhenSet_data() {
    QTest::addColumn<QByteArray>("lab");
    QTest::addColumn<QByteArray>("value");
    QTest::addColumn<QString>("expected");  // "" when the value is valid
    for (const char* lab : {"amp", "cudnn"}) {  // two Python labs' "device" type
      auto row = [&](const QByteArray& value, const QString& expected) {
        QTest::newRow(qPrintable(QString("%1: '%2'").arg(lab, value))) << QByteArray(lab) << value << expected;
      };
      row("auto", "");
      row("cpu", "");
      row("cuda", "");
      row("cuda:0", "");
      row("cuda:99", "");  // a lesson says which GPU; whether this machine has it is the run's business
      row("gpu", "invalid value 'gpu' for parameter 'device': Expected one of cpu, cuda device type at start of device string: gpu");
      row("cuda:x", "invalid value 'cuda:x' for parameter 'device'");
      row("cuda:-1", "invalid value 'cuda:-1' for parameter 'device'");
      row("", "invalid value '' for parameter 'device'");
    }
  }
  void deviceSyntaxIsCheckedWhenSet() {
    QFETCH(QByteArray, lab);
    QFETCH(QByteArray, value);
    QFETCH(QString, expected);
    lab::Params p = paramsOf(lab.constData());
    const QString e = errorOf([&] { p.set("device", value.toStdString()); });
    if (expected.isEmpty()) QVERIFY2(e.isEmpty(), qPrintable(e));
    else QVERIFY2(e.contains(expected), qPrintable(e));
  }

  // A lesson's run blocks are checked at load by Params::set, the code that runs them.
  void lessonRunBlocksAreCheckedAtLoad_data() {
    QTest::addColumn<QByteArray>("params");
    QTest::addColumn<QString>("expected");  // "" when the lesson loads
    QTest::newRow("lr") << QByteArray(R"({"lr": 0.001, "momentum": 0.5})") << "";
    QTest::newRow("trailing comma") << QByteArray(R"({"mlp_hidden": "8,"})") << "run block: invalid value '8,' for parameter 'mlp_hidden'";
    QTest::newRow("no widths") << QByteArray(R"({"mlp_hidden": ""})") << "run block: invalid value '' for parameter 'mlp_hidden'";
    QTest::newRow("gpu") << QByteArray(R"({"device": "gpu"})") << "run block: invalid value 'gpu' for parameter 'device'";
    QTest::newRow("a GPU this machine may lack") << QByteArray(R"({"device": "cuda:3"})") << "";
  }
  void lessonRunBlocksAreCheckedAtLoad() {
    QFETCH(QByteArray, params);
    QFETCH(QString, expected);
    for (const QByteArray locale : {"C", "de_DE.UTF-8"}) {
      LocaleScope scope(locale);
      if (!scope.ok()) continue;  // numbersIgnoreTheLocale says which locale is missing
      const QByteArray body = "```run\n{\"lab\": \"cnn\", \"params\": " + params + "}\n```\n";
      const course::Lesson l = course::parseLesson(QString::fromUtf8(kLessonHeader + body), "x/lesson.md", test::shippedLabs());
      if (expected.isEmpty()) QVERIFY2(l.ok(), qPrintable(l.error));
      else QVERIFY2(l.error.contains(expected), qPrintable(l.error));
    }
  }
};

QTEST_GUILESS_MAIN(TestParams)
#include "test_params.moc"
