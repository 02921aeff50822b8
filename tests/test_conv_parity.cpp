// conv2d, max_pool2d, avg_pool2d and adaptive_avg_pool2d against PyTorch: one row per case of
// tests/conv_parity/cases.json, which tests/conv_parity/make_cases.py generated with Debian's torch 1.13
// (/usr/bin/python3 tests/conv_parity/make_cases.py regenerates it). For each case the engine builds
// PyTorch's exact inputs (hex floats), runs the op forward and backward(grad_output), and its output
// and the gradients of input, weight and bias must equal PyTorch's within
//   float32  |engine - torch| <= 1e-5 + 1e-5 |torch|
//   float64  |engine - torch| <= 1e-13 + 1e-12 |torch|
// Why: a convolution is a sum of up to ~100 products here, which PyTorch (oneDNN) and the engine
// (im2col + OpenBLAS) add in different orders; either order is within (n-1) u sum|terms| of the exact
// sum (u = 6e-8 in float32, 1.1e-16 in float64), ~1e-5 (3e-15) absolute at worst for these inputs,
// whatever the result's own size -- hence the absolute term (the generator's docstring has the
// details). A wrong window, index or padding rule is an error of order 1. Each row prints the largest
// error it saw. The same rows run on CUDA where a GPU is usable (cuDNN against PyTorch's CPU result).
//
// The error rows: each bad call must raise gpulab::Error with PyTorch's message, word for word.
#include <QFile>
#include <QJsonArray>
#include <QJsonDocument>
#include <QJsonObject>

#include <cmath>
#include <cstdlib>
#include <random>

#include "engine/core/errors.h"
#include "engine/kernels/conv/cpu_few_taps.h"
#include "engine/kernels/conv/cpu_winograd.h"
#include "test_util.h"

#ifndef GPULAB_CONV_CASES
#error "GPULAB_CONV_CASES (the path of tests/conv_parity/cases.json) must be defined"
#endif

using namespace gpulab;

namespace {

Shape shapeOf(const QJsonArray& a) {
  Shape s;
  for (const QJsonValue& v : a) s.push_back(v.toInteger());
  return s;
}

// {"shape": [...], "values": ["0x1.8p+1", ...]} as a float64 tensor, then `dtype` (exact: the values
// were drawn in that dtype).
Tensor decode(const QJsonObject& o, DType dtype) {
  const Shape shape = shapeOf(o["shape"].toArray());
  const QJsonArray values = o["values"].toArray();
  Tensor t = Tensor::empty(shape, kFloat64);
  if (t.numel() != values.size()) throw Error("conv_parity: a tensor's values do not match its shape");
  double* p = t.data<double>();
  for (qsizetype i = 0; i < values.size(); ++i) p[i] = std::strtod(values[i].toString().toLatin1().constData(), nullptr);
  return t.to(dtype);
}

Size2 size2(const QJsonObject& args, const char* key, std::int64_t fallback) {
  if (!args.contains(key)) return fallback;
  const QJsonArray a = args[key].toArray();
  return Size2(a[0].toInteger(), a[1].toInteger());
}

// The case's op on the given tensors, with its PyTorch arguments.
Tensor runOp(const QString& op, const QJsonObject& args, const Tensor& x, const Tensor& w, const Tensor& b) {
  if (op == "conv2d") {
    if (args["padding"].isString()) {  // padding='same' / 'valid'
      return conv2d(x, w, b, size2(args, "stride", 1), parseConvPadding(args["padding"].toString().toStdString()),
                    size2(args, "dilation", 1), args["groups"].toInteger(1));
    }
    return conv2d(x, w, b, size2(args, "stride", 1), size2(args, "padding", 0), size2(args, "dilation", 1),
                  args["groups"].toInteger(1));
  }
  const bool ceil = args["ceil_mode"].toBool(false);
  if (op == "max_pool2d" || op == "avg_pool2d") {
    const Size2 kernel = size2(args, "kernel_size", 0);
    std::optional<Size2> stride;
    if (args.contains("stride")) stride = size2(args, "stride", 0);
    if (op == "max_pool2d") return max_pool2d(x, kernel, stride, size2(args, "padding", 0), size2(args, "dilation", 1), ceil);
    return avg_pool2d(x, kernel, stride, size2(args, "padding", 0), ceil, args["count_include_pad"].toBool(true));
  }
  if (op == "adaptive_avg_pool2d") return adaptive_avg_pool2d(x, size2(args, "output_size", 0));
  throw Error("conv_parity: unknown op " + op.toStdString());
}

// The largest |a - e| and whether every element is within atol + rtol |e|.
struct Comparison {
  double maxError = 0;
  bool ok = true;
  QString firstBad;
};
Comparison compare(const Tensor& actual, const Tensor& expected, double atol, double rtol) {
  Comparison c;
  if (actual.sizes() != expected.sizes()) {
    c.ok = false;
    c.firstBad = QString("shape %1, expected %2").arg(shapeStr(actual.sizes()).c_str(), shapeStr(expected.sizes()).c_str());
    return c;
  }
  const auto a = actual.cpu().toVector<double>(), e = expected.toVector<double>();
  for (std::size_t i = 0; i < a.size(); ++i) {
    const double err = std::abs(a[i] - e[i]);
    c.maxError = std::max(c.maxError, err);
    if (!(err <= atol + rtol * std::abs(e[i])) && c.ok) {
      c.ok = false;
      c.firstBad = QString("element %1: %2, expected %3").arg(i).arg(a[i], 0, 'g', 17).arg(e[i], 0, 'g', 17);
    }
  }
  return c;
}

}  // namespace

class TestConvParity : public QObject {
  Q_OBJECT

  QJsonObject file_;

  void load() {
    if (file_.isEmpty()) test::loadCaseTable(GPULAB_CONV_CASES, file_);
  }

 private slots:
  void initTestCase() {
    load();
    QVERIFY(file_["cases"].toArray().size() > 0);
    QVERIFY(file_["errors"].toArray().size() > 0);
  }

  void outputsAndGradientsMatchPyTorch_data() {
    load();
    test::addCaseRowsPerDevice(file_["cases"].toArray());
  }

  void outputsAndGradientsMatchPyTorch() {
    QFETCH(int, index);
    QFETCH(bool, cuda);
    if (cuda && !test::cudaUsable()) QSKIP("no CUDA device");
    const Device device = cuda ? test::cudaDevice() : kCPU;
    const QJsonObject c = file_["cases"].toArray()[index].toObject();
    const DType dtype = c["dtype"].toString() == "float64" ? kFloat64 : kFloat32;
    const QJsonObject tol = file_["header"].toObject()["tolerance"].toObject()[c["dtype"].toString()].toObject();
    const double atol = tol["atol"].toDouble(), rtol = tol["rtol"].toDouble();
    QVERIFY(atol > 0 && rtol > 0);

    auto input = [&](const char* key) {
      return c.contains(key) ? decode(c[key].toObject(), dtype).to(device).requires_grad_(true) : Tensor();
    };
    Tensor x = input("input"), w = input("weight"), b = input("bias");
    Tensor out = runOp(c["op"].toString(), c["args"].toObject(), x, w, b);
    QCOMPARE(out.dtype(), dtype);
    out.backward(decode(c["grad_output"].toObject(), dtype).to(device));

    struct Check {
      const char* what;
      Tensor actual;
      const char* key;
    };
    const std::vector<Check> checks{{"output", out.detach(), "output"},
                                    {"grad input", x.grad(), "grad_input"},
                                    {"grad weight", w.defined() ? w.grad() : Tensor(), "grad_weight"},
                                    {"grad bias", b.defined() ? b.grad() : Tensor(), "grad_bias"}};
    QString measured;
    for (const Check& k : checks) {
      if (!c.contains(k.key)) continue;
      QVERIFY2(k.actual.defined(), k.what);
      const Comparison r = compare(k.actual, decode(c[k.key].toObject(), kFloat64), atol, rtol);
      QVERIFY2(r.ok, qPrintable(QString("%1: %2").arg(k.what, r.firstBad)));
      measured += QString(" %1 %2").arg(k.what).arg(r.maxError, 0, 'g', 2);
    }
    qInfo("largest |engine - PyTorch|:%s", qPrintable(measured));
  }

  // float16 and bfloat16: the float32 cases' inputs and output gradient rounded to the dtype; the
  // engine's 16-bit results (float32 accumulation, one rounding on store) against its float64 results
  // on the same rounded inputs -- the float64 path the rows above hold to PyTorch within 1e-12 --
  // within atol 1e-5 (float32's accumulation error, as above) + rtol |float64| where rtol is one ulp of
  // the dtype relative to the value (2^-10 float16, 2^-7 bfloat16): a correctly rounded result is
  // within half an ulp, and one rounded from a float32 sum within half an ulp plus that sum's error.
  // (PyTorch 1.13 has no float16 convolution on the CPU, and its bfloat16 one rounds intermediates.)
  void sixteenBitRoundsOnce_data() {
    load();
    QTest::addColumn<int>("index");
    QTest::addColumn<int>("dtype");
    QTest::addColumn<bool>("cuda");
    const QJsonArray cases = file_["cases"].toArray();
    for (bool cuda : {false, true})
      for (DType d : {kFloat16, kBFloat16})
        for (int i = 0; i < cases.size(); ++i) {
          const QJsonObject c = cases[i].toObject();
          if (c["dtype"].toString() != "float32") continue;
          const QString name = c["name"].toString() + "/" + QString::fromStdString(dtypeName(d)) + (cuda ? "/cuda" : "/cpu");
          QTest::newRow(qPrintable(name)) << i << static_cast<int>(d) << cuda;
        }
  }

  void sixteenBitRoundsOnce() {
    QFETCH(int, index);
    QFETCH(int, dtype);
    QFETCH(bool, cuda);
    if (cuda && !test::cudaUsable()) QSKIP("no CUDA device");
    const Device device = cuda ? test::cudaDevice() : kCPU;
    const DType d = static_cast<DType>(dtype);
    const double rtol = d == kFloat16 ? std::ldexp(1.0, -10) : std::ldexp(1.0, -7), atol = 1e-5;
    const QJsonObject c = file_["cases"].toArray()[index].toObject();
    auto rounded = [&](const char* key) { return c.contains(key) ? decode(c[key].toObject(), kFloat32).to(d) : Tensor(); };
    const std::vector<Tensor> inputs{rounded("input"), rounded("weight"), rounded("bias")};
    const Tensor gradOut = rounded("grad_output");
    // Output and gradients of the case's op in `dt` on `dev`, from the same rounded values.
    auto run = [&](DType dt, Device dev) {
      std::vector<Tensor> xs;
      for (const Tensor& t : inputs) xs.push_back(t.defined() ? t.to(dt).to(dev).requires_grad_(true) : Tensor());
      Tensor out = runOp(c["op"].toString(), c["args"].toObject(), xs[0], xs[1], xs[2]);
      out.backward(gradOut.to(dt).to(dev));
      std::vector<Tensor> results{out.detach()};
      for (const Tensor& t : xs) results.push_back(t.defined() ? t.grad() : Tensor());
      return results;
    };
    const auto actual = run(d, device), expected = run(kFloat64, kCPU);
    const char* what[] = {"output", "grad input", "grad weight", "grad bias"};
    QString measured;
    for (std::size_t i = 0; i < actual.size(); ++i) {
      if (!expected[i].defined()) continue;
      QVERIFY2(actual[i].defined(), what[i]);
      QCOMPARE(actual[i].dtype(), d);
      const Comparison r = compare(actual[i].to(kFloat64), expected[i], atol, rtol);
      QVERIFY2(r.ok, qPrintable(QString("%1: %2").arg(what[i], r.firstBad)));
      measured += QString(" %1 %2").arg(what[i]).arg(r.maxError, 0, 'g', 2);
    }
    qInfo("largest |%s - float64|:%s", dtypeName(d).c_str(), qPrintable(measured));
  }

  // The CPU backend lowers a chunk of samples into one GEMM (kernels/conv/cpu.cpp); a batch large enough
  // to need several chunks, with a last chunk of one sample, must give each sample what it gets alone
  // (and the weight gradient, the sum of the samples' own).
  void batchedChunksMatchOneSampleAtATime() {
    // 64 channels, 3 x 3, a 32 x 32 output: 576 x 1024 column entries a sample, so the ~4M-entry
    // chunk holds 7 samples, and a batch of 15 runs as 7 + 7 + 1.
    Generator gen(7);
    const Tensor x = randn({15, 64, 32, 32}, gen), w = randn({8, 64, 3, 3}, gen), b = randn({8}, gen);
    const Tensor g = randn({15, 8, 32, 32}, gen);
    std::vector<Tensor> batched;
    {
      Tensor xi = x.clone().requires_grad_(true), wi = w.clone().requires_grad_(true);
      Tensor out = conv2d(xi, wi, b, 1, 1);
      out.backward(g);
      batched = {out.detach(), xi.grad(), wi.grad()};
    }
    Tensor gradWeightSum = zeros(w.sizes());
    for (std::int64_t n = 0; n < 15; ++n) {
      Tensor xi = x.slice(0, n, n + 1).clone().requires_grad_(true), wi = w.clone().requires_grad_(true);
      Tensor out = conv2d(xi, wi, b, 1, 1);
      out.backward(g.slice(0, n, n + 1).clone());
      const Comparison o = compare(batched[0].slice(0, n, n + 1).to(kFloat64), out.detach().to(kFloat64), 1e-4, 1e-5);
      QVERIFY2(o.ok, qPrintable(QString("sample %1 output: %2").arg(n).arg(o.firstBad)));
      const Comparison gi = compare(batched[1].slice(0, n, n + 1).to(kFloat64), xi.grad().to(kFloat64), 1e-4, 1e-5);
      QVERIFY2(gi.ok, qPrintable(QString("sample %1 grad input: %2").arg(n).arg(gi.firstBad)));
      gradWeightSum = gradWeightSum + wi.grad();
    }
    const Comparison gw = compare(batched[2].to(kFloat64), gradWeightSum.to(kFloat64), 1e-2, 1e-4);
    QVERIFY2(gw.ok, qPrintable(QString("grad weight: %1").arg(gw.firstBad)));
  }

  // A float32 convolution with few taps runs conv/cpu_few_taps.h's loops on a CPU with AVX2 and FMA. The
  // CNN's first layer (1 channel, 3 x 3, padding 1, with a bias here) in float32 must match the same
  // convolution in float64, which runs through OpenBLAS: output and weight and bias gradients.
  void fewTapsConvolutionMatchesFloat64() {
    Generator gen(11);
    const Options f64{kFloat64};
    const Tensor x = randn({5, 1, 28, 28}, gen, f64), w = randn({32, 1, 3, 3}, gen, f64);
    const Tensor b = randn({32}, gen, f64), g = randn({5, 32, 28, 28}, gen, f64);
    std::vector<Tensor> results[2];
    for (const DType dtype : {kFloat32, kFloat64}) {
      Tensor wi = w.to(dtype).requires_grad_(true), bi = b.to(dtype).requires_grad_(true);
      Tensor out = conv2d(x.to(dtype), wi, bi, 1, 1);
      out.backward(g.to(dtype));
      results[dtype == kFloat64].assign({out.detach().to(kFloat64), wi.grad().to(kFloat64), bi.grad().to(kFloat64)});
    }
    const char* names[] = {"output", "grad weight", "grad bias"};
    // Sums of 9 products for the output, of 5 * 784 for the weight gradient.
    const double atol[] = {1e-5, 1e-3, 1e-3};
    for (int i = 0; i < 3; ++i) {
      const Comparison c = compare(results[0][i], results[1][i], atol[i], 1e-5);
      QVERIFY2(c.ok, qPrintable(QString("%1: %2").arg(names[i]).arg(c.firstBad)));
    }
  }

  // The loops themselves, for every tap count they take and planes with and without a partial last block
  // of 8, against sums in double: forward (with and without a bias) and the weight gradient's accumulation.
  void fewTapsKernelsMatchDirectSums() {
    if (!conv_few_taps::available()) QSKIP("this CPU has no AVX2 and FMA: its float32 convolutions all run through OpenBLAS");
    std::mt19937 rng(3);
    std::uniform_real_distribution<float> uniform(-1.0f, 1.0f);
    for (std::int64_t taps = 1; taps <= conv_few_taps::kMaxFewTaps; ++taps)
      for (const std::int64_t plane : {std::int64_t{5}, std::int64_t{16}, std::int64_t{43}})
        for (const bool withBias : {false, true}) {
          const std::int64_t filters = 3, ld = plane + 2;  // columns with a longer row stride, as in a chunk
          std::vector<float> w(filters * taps), bias(filters), cols(taps * ld), gradOut(filters * plane), out(filters * plane);
          for (auto* vec : {&w, &bias, &cols, &gradOut})
            for (float& v : *vec) v = uniform(rng);
          std::vector<float> gradWeight(filters * taps, 0.5f);  // accumulated into
          conv_few_taps::forward(w.data(), withBias ? bias.data() : nullptr, cols.data(), ld, out.data(), filters, taps, plane);
          conv_few_taps::weightGradient(gradOut.data(), cols.data(), ld, gradWeight.data(), filters, taps, plane);
          const QString at = QString("taps %1, plane %2, bias %3").arg(taps).arg(plane).arg(withBias);
          for (std::int64_t k = 0; k < filters; ++k) {
            for (std::int64_t p = 0; p < plane; ++p) {
              double expected = withBias ? bias[k] : 0.0;
              for (std::int64_t t = 0; t < taps; ++t) expected += double(w[k * taps + t]) * cols[t * ld + p];
              QVERIFY2(std::abs(out[k * plane + p] - expected) <= 1e-5, qPrintable(at + QString(": output %1, %2").arg(k).arg(p)));
            }
            for (std::int64_t t = 0; t < taps; ++t) {
              double expected = 0.5;
              for (std::int64_t p = 0; p < plane; ++p) expected += double(gradOut[k * plane + p]) * cols[t * ld + p];
              QVERIFY2(std::abs(gradWeight[k * taps + t] - expected) <= 1e-4,
                       qPrintable(at + QString(": grad weight %1, %2").arg(k).arg(t)));
            }
          }
        }
    // A tap count outside 1..kMaxFewTaps is refused, not run.
    float dummy[1] = {0};
    QVERIFY_THROWS_EXCEPTION(Error, conv_few_taps::forward(dummy, nullptr, dummy, 1, dummy, 1, conv_few_taps::kMaxFewTaps + 1, 1));
  }

  // A float32 3 x 3 convolution of stride 1 with 16 or more channels and filters runs through
  // Winograd's F(2x2, 3x3) (conv/cpu_winograd.h), all three passes. Against the same convolution in
  // float64 (im2col + dgemm), elementwise: |float32 - float64| <= 1e-5 * (the sum of the |terms| of
  // that element) -- rounding's bound with room for the transforms' few additions; a wrong transform,
  // tile edge or padding is an error of the order of the terms themselves. The shapes: the CNN's
  // (several chunks of samples, the last one short), odd sizes (clipped last tiles), every padding,
  // groups, a 1 x 1 input and a plane larger than a chunk.
  void winogradConvolutionsMatchFloat64_data() {
    QTest::addColumn<QList<qint64>>("shape");  // batch, channels, filters, H, W, padding, groups
    QTest::addColumn<bool>("withBias");
    QTest::newRow("the CNN's second layer") << QList<qint64>{9, 32, 64, 14, 14, 1, 1} << false;
    QTest::newRow("odd sizes, no padding") << QList<qint64>{3, 16, 16, 7, 9, 0, 1} << true;
    QTest::newRow("padding 2, two groups") << QList<qint64>{2, 32, 32, 5, 6, 2, 2} << true;
    QTest::newRow("a 1 x 1 input") << QList<qint64>{2, 16, 16, 1, 1, 1, 1} << false;
    QTest::newRow("three rows, 33 columns") << QList<qint64>{2, 16, 24, 3, 33, 1, 1} << true;
    QTest::newRow("a plane larger than a chunk") << QList<qint64>{2, 16, 16, 30, 31, 1, 1} << false;
  }

  void winogradConvolutionsMatchFloat64() {
    QFETCH(QList<qint64>, shape);
    QFETCH(bool, withBias);
    const std::int64_t n = shape[0], c = shape[1], k = shape[2], h = shape[3], w = shape[4], pad = shape[5], groups = shape[6];
    QVERIFY(conv_winograd::suits(c / groups, k / groups, 3, 3, 1, 1, 1, 1, pad, pad));  // the path under test
    Generator gen(5);
    const Options f64{kFloat64};
    const Tensor x = randn({n, c, h, w}, gen, f64), wt = randn({k, c / groups, 3, 3}, gen, f64), b = randn({k}, gen, f64);
    const Tensor g = randn({n, k, h + 2 * pad - 2, w + 2 * pad - 2}, gen, f64);
    // Each pass in float32 and float64, and the sums of |terms| (the float64 pass over absolute values).
    auto passes = [&](const Tensor& xv, const Tensor& wv, const Tensor& bv, const Tensor& gv) {
      Tensor xi = xv.clone().requires_grad_(true), wi = wv.clone().requires_grad_(true);
      Tensor out = conv2d(xi, wi, withBias ? bv : Tensor(), 1, pad, 1, groups);
      out.backward(gv);
      return std::vector<Tensor>{out.detach().to(kFloat64), xi.grad().to(kFloat64), wi.grad().to(kFloat64)};
    };
    std::vector<Tensor> single = passes(x.to(kFloat32), wt.to(kFloat32), b.to(kFloat32), g.to(kFloat32));
    const std::vector<Tensor> exact = passes(x, wt, b, g);
    const std::vector<Tensor> bound = passes(x.abs(), wt.abs(), b.abs(), g.abs());
    const char* names[] = {"output", "grad input", "grad weight"};
    for (int i = 0; i < 3; ++i) {
      const auto a = single[i].toVector<double>(), e = exact[i].toVector<double>(), s = bound[i].toVector<double>();
      QCOMPARE(a.size(), e.size());
      double worst = 0;
      for (std::size_t j = 0; j < a.size(); ++j) {
        const double err = std::abs(a[j] - e[j]);
        worst = std::max(worst, err / std::max(s[j], 1e-30));
        QVERIFY2(err <= 2e-6 * s[j] + 1e-30, qPrintable(QString("%1 element %2: %3, float64 %4, sum of |terms| %5")
                                                           .arg(names[i]).arg(j).arg(a[j], 0, 'g', 9).arg(e[j], 0, 'g', 17).arg(s[j])));
      }
      qInfo("%s: largest error / sum of |terms| %.2g", names[i], worst);
    }
    // The weight gradient is summed per part and the parts in order: the same bits run after run.
    const std::vector<Tensor> again = passes(x.to(kFloat32), wt.to(kFloat32), b.to(kFloat32), g.to(kFloat32));
    for (int i = 0; i < 3; ++i) QVERIFY2(again[i].toVector<double>() == single[i].toVector<double>(), names[i]);
  }

  void errorsMatchPyTorch_data() {
    load();
    QTest::addColumn<int>("index");
    const QJsonArray errors = file_["errors"].toArray();
    for (int i = 0; i < errors.size(); ++i) QTest::newRow(qPrintable(errors[i].toObject()["name"].toString())) << i;
  }

  void errorsMatchPyTorch() {
    QFETCH(int, index);
    const QJsonObject e = file_["errors"].toArray()[index].toObject();
    auto zerosOf = [&](const char* key) { return e.contains(key) ? zeros(shapeOf(e[key].toArray())) : Tensor(); };
    const Tensor x = zerosOf("input_shape"), w = zerosOf("weight_shape"), b = zerosOf("bias_shape");
    const std::string expected = e["message"].toString().toStdString();
    try {
      runOp(e["op"].toString(), e["args"].toObject(), x, w, b);
      QFAIL(qPrintable(QString("no error; PyTorch raises: %1").arg(expected.c_str())));
    } catch (const Error& err) {
      QCOMPARE(std::string(err.what()), expected);
    }
  }
};

QTEST_GUILESS_MAIN(TestConvParity)
#include "test_conv_parity.moc"
