#pragma once
// Helpers shared by the test suites.
#include <QtTest>

#include <cmath>
#include <functional>
#include <string>
#include <vector>

#include "engine/autograd/grad_mode.h"
#include "engine/core/tensor.h"
#include "engine/ops/ops.h"
#include "engine/runtime/cuda_runtime.h"

namespace gpulab::test {

inline bool cudaUsable() { return cuda::isAvailable(); }

// Writes `text` to `path`, creating its folders (a test's fixture files).
inline void writeFile(const QString& path, const QByteArray& text) {
  QDir().mkpath(QFileInfo(path).absolutePath());
  QFile f(path);
  QVERIFY(f.open(QIODevice::WriteOnly));
  f.write(text);
}
inline Device cudaDevice() { return Device(DeviceType::CUDA, 0); }

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
