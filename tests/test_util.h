#pragma once
// Helpers shared by the test suites.
#include <QJsonArray>
#include <QJsonDocument>
#include <QJsonObject>
#include <QtTest>

#include <cmath>
#include <cstdlib>
#include <functional>
#include <string>
#include <vector>

#include "app/course/course.h"
#include "engine/autograd/grad_mode.h"
#include "engine/core/tensor.h"
#include "engine/ops/ops.h"
#include "engine/runtime/cuda_runtime.h"
#include "engine/runtime/emulated_gpu.h"

namespace gpulab::test {

// The GPU suites compare what cuda:0 computes with the CPU. With GPULAB_TEST_GPU=emulated (ctest's
// *_on_emulated_gpu entries) and no GPU here, the emulated GPU stands in for cuda:0, so the suites'
// own logic -- their inputs, tolerances, bookkeeping -- runs on every machine, and a session lent a
// GPU finds the engine's bugs rather than the tests' (the first H200 run found three such test bugs).
// What is compared there is the CPU kernels queued on the emulated streams with the CPU kernels: it
// checks the tests and the asynchronous path, not CUDA. A case about a real GPU only (cuDNN's
// algorithms, TF32, NVML) asks realGpu() instead.
inline bool emulatedRequested() {
  const char* v = std::getenv("GPULAB_TEST_GPU");
  return v && std::string(v) == "emulated";
}
inline bool emulatedStandsIn() { return emulatedRequested() && !cuda::isAvailable() && cuda::emulatedDevice().has_value(); }
inline bool realGpu() { return cuda::isAvailable(); }
// Asked for the emulated GPU where there is a real one, the suite skips: its plain entry runs it there.
inline bool cudaUsable() { return emulatedRequested() ? emulatedStandsIn() : realGpu(); }

// Whether this build has GPU Lab's Python package (<build>/python/gpulab, beside the tests' bin/), which
// the lessons' Python labs and code cells need: the sanitizer builds have none.
inline bool pythonPackageBuilt() { return QFileInfo::exists(QCoreApplication::applicationDirPath() + "/../python/gpulab/__init__.py"); }

// The message of what `f` throws; "" when it throws nothing.
inline std::string textOf(const std::function<void()>& f) {
  try {
    f();
  } catch (const std::exception& e) {
    return e.what();
  }
  return {};
}

// The smallest bank an exercise in a test's lesson may have (lessons/README.md, "Exercises"): three
// wrong answers that fail the check `fails` (x stays 0, 2 or 3) and one right answer (x = 1 another way).
inline QString exerciseBank(const QString& fails) {
  QString bank;
  for (int x : {0, 2, 3}) bank += QString("\n```python wrong\n# wrong: x is %1\n# fails: %2\n# hint: set x to 1\nx = %1\n```\n").arg(x).arg(fails);
  return bank + "\n```python right\n# right: x reached by a sum\nx = 0 + 1\n```\n";
}

// Writes `text` to `path`, creating its folders (a test's fixture files).
inline void writeFile(const QString& path, const QByteArray& text) {
  QDir().mkpath(QFileInfo(path).absolutePath());
  QFile f(path);
  QVERIFY(f.open(QIODevice::WriteOnly));
  f.write(text);
}
#ifdef GPULAB_SOURCE_DIR
// A shipped Python lab in a test's lessons folder: the .py files of lessons/<shippedFolder> copied
// into `lessonFolder` (and lessons/lab_helpers.py beside it); returns the shipped lesson's ```lab block (fence included), to write into the
// test's lesson; empty when there is none (the lesson written with it then fails to load).
inline QByteArray copyShippedLab(const QString& lessonFolder, const char* shippedFolder) {
  const QDir shipped(QString(GPULAB_SOURCE_DIR "/lessons/") + shippedFolder);
  QDir().mkpath(lessonFolder);
  for (const QString& py : shipped.entryList({"*.py"}, QDir::Files)) QFile::copy(shipped.filePath(py), lessonFolder + "/" + py);
  // What the shipped labs import, beside the test's lesson folders as beside the shipped ones.
  QFile::copy(GPULAB_SOURCE_DIR "/lessons/lab_helpers.py", QFileInfo(lessonFolder).absolutePath() + "/lab_helpers.py");
  QFile lesson(shipped.filePath("lesson.md"));
  if (!lesson.open(QIODevice::ReadOnly)) return {};
  const QByteArray text = lesson.readAll();
  const qsizetype start = text.indexOf("```lab\n");
  const qsizetype end = start < 0 ? -1 : text.indexOf("\n```\n", start);
  if (end < 0) return {};
  return text.mid(start, end + 5 - start);
}
#endif

// The shipped course's Python labs, for a lesson a test parses alone that names one of them (what
// parseLesson's earlier lessons would have declared).
inline const QVector<course::PythonLabSpec>& shippedLabs() {
  static const QVector<course::PythonLabSpec> labs = course::loadCourse().lessons.back().labs;  // every earlier lesson's too
  return labs;
}

inline Device cudaDevice() { return emulatedStandsIn() ? *cuda::emulatedDevice() : Device(DeviceType::CUDA, 0); }

// A table of cases generated with PyTorch (tests/*_parity/cases.json): the file's JSON object, or a
// test failure naming the file and the parse error.
inline void loadCaseTable(const char* path, QJsonObject& out) {
  QFile f(path);
  QVERIFY2(f.open(QIODevice::ReadOnly), path);
  QJsonParseError error;
  out = QJsonDocument::fromJson(f.readAll(), &error).object();
  QVERIFY2(error.error == QJsonParseError::NoError, qPrintable(error.errorString()));
}

// One data row per case and device ("name/dtype/cpu", then ".../cuda"): columns "index" and "cuda".
inline void addCaseRowsPerDevice(const QJsonArray& cases) {
  QTest::addColumn<int>("index");
  QTest::addColumn<bool>("cuda");
  for (bool cuda : {false, true})
    for (int i = 0; i < cases.size(); ++i) {
      const QJsonObject c = cases[i].toObject();
      const QString name = c["name"].toString() + "/" + c["dtype"].toString() + (cuda ? "/cuda" : "/cpu");
      QTest::newRow(qPrintable(name)) << i << cuda;
    }
}

// Largest |a - b| / (atol + rtol * |b|) over all elements; <= 1 means "close".
inline double closeness(const Tensor& a, const Tensor& b, double atol, double rtol) {
  auto va = a.toVector<double>(), vb = b.toVector<double>();
  if (va.size() != vb.size()) return INFINITY;
  double worst = 0;
  for (std::size_t i = 0; i < va.size(); ++i) {
    if (std::isnan(va[i]) && std::isnan(vb[i])) continue;
    worst = std::max(worst, std::abs(va[i] - vb[i]) / (atol + rtol * std::abs(vb[i])));
  }
  return worst;
}

// Skips the test function where the Python labs cannot run (a build without the package).
#define GPULAB_SKIP_WITHOUT_PYTHON()                                                                             \
  if (!gpulab::test::pythonPackageBuilt()) QSKIP("the gpulab package is not built: GPU Lab's Python labs cannot run here")

#define GPULAB_COMPARE_TENSORS(actual, expected, atol, rtol)                                                   \
  do {                                                                                                         \
    const ::gpulab::Tensor a_ = (actual), e_ = (expected);                                                     \
    QCOMPARE(a_.sizes(), e_.sizes());                                                                          \
    const double c_ = ::gpulab::test::closeness(a_, e_, (atol), (rtol));                                       \
    if (c_ > 1.0) QFAIL(qPrintable(QString("tensors differ (closeness %1):\n  actual   %2\n  expected %3")     \
                                       .arg(c_).arg(QString::fromStdString(a_.toString()))                     \
                                       .arg(QString::fromStdString(e_.toString()))));                          \
  } while (0)

}  // namespace gpulab::test
