// batch_norm and nn.BatchNorm1d/2d against PyTorch: one row per case of tests/norm_parity/cases.json,
// which tests/norm_parity/make_cases.py generated with Debian's torch 1.13 (/usr/bin/python3
// tests/norm_parity/make_cases.py regenerates it). For each case the engine builds PyTorch's exact
// inputs (hex floats), runs F.batch_norm forward and backward(grad_output), and its output, the
// gradients of input, weight and bias, and the running_mean/running_var left behind must equal
// PyTorch's within
//   float32  |engine - torch| <= 1e-5 + 1e-5 |torch|
//   float64  |engine - torch| <= 1e-13 + 1e-12 |torch|
// (why: the generator's docstring; each row prints the largest error it saw). The same rows run on
// CUDA where a GPU is usable (the engine's CUDA kernels against PyTorch's CPU result).
//
// Also: PyTorch's error messages word for word; the modules (three training batches then eval(),
// momentum=None, affine=False, track_running_stats=False) against PyTorch's outputs, running
// statistics, num_batches_tracked, printed form and state-dict keys; buffers (not parameters, moved
// and cast with the module, loaded from a state dict); float16 input with float32 statistics;
// batch_norm outside autocast's lists.
#include <QFile>
#include <QJsonArray>
#include <QJsonDocument>
#include <QJsonObject>
#include <QTemporaryDir>

#include <cmath>
#include <cstdlib>

#include "engine/ops/autocast.h"
#include "engine/autograd/grad_mode.h"
#include "engine/core/errors.h"
#include "engine/nn/layers.h"
#include "test_util.h"

#ifndef GPULAB_NORM_CASES
#error "GPULAB_NORM_CASES (the path of tests/norm_parity/cases.json) must be defined"
#endif

using namespace gpulab;

namespace {

Shape shapeOf(const QJsonArray& a) {
  Shape s;
  for (const QJsonValue& v : a) s.push_back(v.toInteger());
  return s;
}

// {"shape": [...], "values": ["0x1.8p+1", ...]} as a float64 tensor, then `dtype` (exact).
Tensor decode(const QJsonObject& o, DType dtype) {
  const Shape shape = shapeOf(o["shape"].toArray());
  const QJsonArray values = o["values"].toArray();
  Tensor t = Tensor::empty(shape, kFloat64);
  if (t.numel() != values.size()) throw Error("norm_parity: a tensor's values do not match its shape");
  double* p = t.data<double>();
  for (qsizetype i = 0; i < values.size(); ++i) p[i] = std::strtod(values[i].toString().toLatin1().constData(), nullptr);
  return t.to(dtype);
}

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
  const auto a = actual.cpu().toVector<double>(), e = expected.cpu().toVector<double>();
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

#define NORM_COMPARE(what, actual, expected, atol, rtol)                                     \
  do {                                                                                       \
    const Comparison r_ = compare((actual), (expected), (atol), (rtol));                     \
    QVERIFY2(r_.ok, qPrintable(QString("%1: %2").arg(what, r_.firstBad)));                   \
    measured += QString(" %1 %2").arg(what).arg(r_.maxError, 0, 'g', 2);                     \
  } while (false)

}  // namespace

class TestNormParity : public QObject {
  Q_OBJECT

  QJsonObject file_;

  void load() {
    if (file_.isEmpty()) test::loadCaseTable(GPULAB_NORM_CASES, file_);
  }

 private slots:
  void initTestCase() {
    load();
    QVERIFY(file_["cases"].toArray().size() > 0);
    QVERIFY(file_["modules"].toArray().size() > 0);
    QVERIFY(file_["errors"].toArray().size() > 0);
  }

  void batchNormMatchesPyTorch_data() {
    load();
    test::addCaseRowsPerDevice(file_["cases"].toArray());
  }

  void batchNormMatchesPyTorch() {
    QFETCH(int, index);
    QFETCH(bool, cuda);
    if (cuda && !test::cudaUsable()) QSKIP("no CUDA device");
    const Device device = cuda ? test::cudaDevice() : kCPU;
    const QJsonObject c = file_["cases"].toArray()[index].toObject();
    const DType dtype = c["dtype"].toString() == "float64" ? kFloat64 : kFloat32;
    const QJsonObject tol = file_["header"].toObject()["tolerance"].toObject()[c["dtype"].toString()].toObject();
    const double atol = tol["atol"].toDouble(), rtol = tol["rtol"].toDouble();
    QVERIFY(atol > 0 && rtol > 0);

    auto get = [&](const char* key, bool grad) {
      if (!c.contains(key)) return Tensor();
      Tensor t = decode(c[key].toObject(), dtype).to(device);
      return grad ? t.requires_grad_(true) : t;
    };
    Tensor x = get("input", true), w = get("weight", true), b = get("bias", true);
    Tensor rm = get("running_mean", false), rv = get("running_var", false);
    Tensor out = batch_norm(x, rm, rv, w, b, c["training"].toBool(), c["momentum"].toDouble(), c["eps"].toDouble());
    QCOMPARE(out.dtype(), dtype);
    QCOMPARE(out.device(), device);
    out.backward(decode(c["grad_output"].toObject(), dtype).to(device));

    QString measured;
    auto expected = [&](const char* key) { return decode(c[key].toObject(), kFloat64); };
    NORM_COMPARE("output", out.detach(), expected("output"), atol, rtol);
    NORM_COMPARE("grad input", x.grad(), expected("grad_input"), atol, rtol);
    if (w.defined()) {
      QVERIFY(w.grad().defined() && b.grad().defined());
      NORM_COMPARE("grad weight", w.grad(), expected("grad_weight"), atol, rtol);
      NORM_COMPARE("grad bias", b.grad(), expected("grad_bias"), atol, rtol);
    }
    if (rm.defined()) {  // updated in place (training), untouched (eval): PyTorch's values either way
      NORM_COMPARE("running mean", rm, expected("running_mean_after"), atol, rtol);
      NORM_COMPARE("running var", rv, expected("running_var_after"), atol, rtol);
    }
    qInfo("largest |engine - PyTorch|:%s", qPrintable(measured));
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
    auto make = [&](const char* key) {
      return e.contains(key) ? ones({e[key].toInteger()}) : Tensor();
    };
    Tensor x = randn(shapeOf(e["input_shape"].toArray()));
    // The engine has no torch.Size: its shapes print as [1, 4].
    QString message = e["message"].toString();
    message.replace("torch.Size([", "[").replace("])", "]");
    try {
      batch_norm(x, make("running_mean_size"), make("running_var_size"), make("weight_size"), make("bias_size"),
                 e["training"].toBool());
      QFAIL("no error raised");
    } catch (const ValueError& err) {
      QCOMPARE(QString("ValueError"), e["type"].toString());
      QCOMPARE(QString(err.what()), message);
    } catch (const IndexError& err) {
      QCOMPARE(QString("IndexError"), e["type"].toString());
      QCOMPARE(QString(err.what()), message);
    } catch (const Error& err) {
      QCOMPARE(QString("RuntimeError"), e["type"].toString());
      QCOMPARE(QString(err.what()), message);
    }
  }

  void modulesMatchPyTorch_data() {
    load();
    QTest::addColumn<int>("index");
    const QJsonArray modules = file_["modules"].toArray();
    for (int i = 0; i < modules.size(); ++i) QTest::newRow(qPrintable(modules[i].toObject()["name"].toString())) << i;
  }

  void modulesMatchPyTorch() {
    QFETCH(int, index);
    const QJsonObject c = file_["modules"].toArray()[index].toObject();
    const QJsonObject kw = c["kwargs"].toObject();
    const std::int64_t C = shapeOf(c["inputs"].toArray()[0].toObject()["shape"].toArray())[1];
    std::optional<double> momentum = 0.1;
    if (kw.contains("momentum")) momentum = kw["momentum"].isNull() ? std::nullopt : std::optional(kw["momentum"].toDouble());
    const bool affine = kw["affine"].toBool(true), track = kw["track_running_stats"].toBool(true);
    std::shared_ptr<nn::BatchNorm> m;
    if (c["module"].toString() == "BatchNorm2d") m = std::make_shared<nn::BatchNorm2d>(C, 1e-5, momentum, affine, track);
    else m = std::make_shared<nn::BatchNorm1d>(C, 1e-5, momentum, affine, track);
    QCOMPARE(QString::fromStdString(m->repr()), c["repr"].toString());
    QStringList keys;
    for (const auto& [k, t] : m->state_dict()) keys << QString::fromStdString(k);
    QStringList expectedKeys;
    for (const QJsonValue& k : c["state_dict_keys"].toArray()) expectedKeys << k.toString();
    QCOMPARE(keys, expectedKeys);
    if (affine) {
      NoGradGuard noGrad;
      m->weight.copy_(decode(c["weight"].toObject(), kFloat32));
      m->bias.copy_(decode(c["bias"].toObject(), kFloat32));
    }
    const QJsonArray inputs = c["inputs"].toArray(), outputs = c["outputs"].toArray();
    QString measured;
    for (int step = 0; step < inputs.size(); ++step) {
      m->train(step < 3);  // three training batches, then eval()
      Tensor y = (*m)(decode(inputs[step].toObject(), kFloat32));
      NORM_COMPARE(QString("output %1").arg(step), y.detach(), decode(outputs[step].toObject(), kFloat64), 1e-5, 1e-5);
    }
    if (track) {
      NORM_COMPARE("running mean", m->running_mean, decode(c["running_mean"].toObject(), kFloat64), 1e-5, 1e-5);
      NORM_COMPARE("running var", m->running_var, decode(c["running_var"].toObject(), kFloat64), 1e-5, 1e-5);
      QCOMPARE(dtypeName(m->num_batches_tracked.dtype()), dtypeName(kInt64));
      QCOMPARE(static_cast<std::int64_t>(m->num_batches_tracked.item()), c["num_batches_tracked"].toInteger());
    } else {
      QVERIFY(!m->running_mean.defined() && !m->num_batches_tracked.defined());
    }
    qInfo("largest |engine - PyTorch|:%s", qPrintable(measured));
  }

  // train() uses the batch's statistics and moves the running ones; eval() uses the running ones and
  // changes nothing.
  void trainAndEvalSwitchStatistics() {
    nn::BatchNorm2d bn(2);
    Tensor x = randn({4, 2, 3, 3}) * 3.0 + 5.0;
    Tensor y = bn(x);  // training: per-channel mean 0, biased variance 1 (weight 1, bias 0)
    QVERIFY(std::abs(y.mean().item()) < 1e-5);
    QCOMPARE(static_cast<std::int64_t>(bn.num_batches_tracked.item()), std::int64_t{1});
    const auto rm = bn.running_mean.toVector<double>();
    QVERIFY(rm[0] > 0.2 && rm[1] > 0.2);  // 0.1 * ~5
    bn.eval();
    Tensor before = bn.running_mean.clone(), beforeVar = bn.running_var.clone();
    Tensor z = bn(x);
    QCOMPARE(static_cast<std::int64_t>(bn.num_batches_tracked.item()), std::int64_t{1});
    QCOMPARE(bn.running_mean.toVector<double>(), before.toVector<double>());
    QCOMPARE(bn.running_var.toVector<double>(), beforeVar.toVector<double>());
    // eval: (x - running_mean) / sqrt(running_var + eps), far from mean 0 with these running stats
    QVERIFY(z.mean().item() > 1.0);
    // eval with a gradient: the affine map's gradients (composed ops)
    Tensor xg = x.detach().requires_grad_(true);
    bn(xg).sum().backward();
    QVERIFY(xg.grad().defined() && bn.weight.grad().defined() && bn.bias.grad().defined());
    QCOMPARE(bn.bias.grad().toVector<double>(), (std::vector<double>{36.0, 36.0}));
  }

  // Buffers: in the state dict, not parameters, no gradient; moved and cast with the module (the
  // int64 counter is not cast); a state dict round trip restores them.
  void buffersAreStateNotParameters() {
    nn::BatchNorm2d bn(3);
    QCOMPARE(bn.parameters().size(), std::size_t{2});
    QCOMPARE(bn.buffers().size(), std::size_t{3});
    QCOMPARE(bn.parameter_count(), std::int64_t{6});
    for (const Tensor& b : bn.buffers()) QVERIFY(!b.requires_grad());
    QCOMPARE(bn.num_batches_tracked.dim(), std::int64_t{0});
    bn(randn({4, 3, 2, 2}));
    bn(randn({4, 3, 2, 2}));
    const nn::StateDict saved = bn.state_dict();

    nn::BatchNorm2d other(3);
    other.load_state_dict(saved);
    QCOMPARE(other.running_mean.toVector<double>(), bn.running_mean.toVector<double>());
    QCOMPARE(other.running_var.toVector<double>(), bn.running_var.toVector<double>());
    QCOMPARE(static_cast<std::int64_t>(other.num_batches_tracked.item()), std::int64_t{2});

    // through a file (nn::save / nn::load): the int64 0-dim counter included
    QTemporaryDir dir;
    QVERIFY(dir.isValid());
    const std::string path = dir.filePath("bn.gpulab").toStdString();
    nn::save(bn.state_dict(), path);
    nn::BatchNorm2d fromFile(3);
    fromFile.load_state_dict(nn::load(path));
    QCOMPARE(fromFile.running_var.toVector<double>(), bn.running_var.toVector<double>());
    QCOMPARE(static_cast<std::int64_t>(fromFile.num_batches_tracked.item()), std::int64_t{2});
    QCOMPARE(fromFile.num_batches_tracked.dim(), std::int64_t{0});

    Tensor handle = other.running_mean;  // the module's own handle sees the cast, as PyTorch's buffers
    other.to(kFloat64);
    QCOMPARE(dtypeName(handle.dtype()), dtypeName(kFloat64));
    QCOMPARE(dtypeName(other.running_var.dtype()), dtypeName(kFloat64));
    QCOMPARE(dtypeName(other.num_batches_tracked.dtype()), dtypeName(kInt64));
    Tensor y = other(randn({4, 3, 2, 2}).to(kFloat64));
    QCOMPARE(dtypeName(y.dtype()), dtypeName(kFloat64));

    nn::BatchNorm1d noAffine(4, 1e-5, 0.1, false);
    QCOMPARE(noAffine.parameters().size(), std::size_t{0});
    QCOMPARE(noAffine.device(), kCPU);  // from its buffers

    if (test::cudaUsable()) {
      nn::BatchNorm2d g(3);
      g.to(test::cudaDevice());
      for (const Tensor& b : g.buffers()) QCOMPARE(b.device(), test::cudaDevice());
      QCOMPARE(g.running_mean.device(), test::cudaDevice());
      g(randn({4, 3, 2, 2}).to(test::cudaDevice()));
      QCOMPARE(static_cast<std::int64_t>(g.num_batches_tracked.item()), std::int64_t{1});
    }
  }

  void moduleInputDimensions() {
    nn::BatchNorm2d bn2(3);
    nn::BatchNorm1d bn1(3);
    try {
      bn2(randn({2, 3}));
      QFAIL("no error");
    } catch (const ValueError& e) {
      QCOMPARE(QString(e.what()), QString("expected 4D input (got 2D input)"));
    }
    try {
      bn1(randn({2, 3, 4, 5}));
      QFAIL("no error");
    } catch (const ValueError& e) {
      QCOMPARE(QString(e.what()), QString("expected 2D or 3D input (got 4D input)"));
    }
    QCOMPARE(bn1(randn({2, 3, 4})).sizes(), (Shape{2, 3, 4}));
  }

  // float16/bfloat16 input: float32 statistics (cuDNN's and PyTorch's rule), a result in the input's
  // dtype within one ulp-ish of the float64 computation on the same rounded values.
  void sixteenBitInputFloatStatistics_data() {
    QTest::addColumn<int>("dtype");
    QTest::addColumn<bool>("cuda");
    for (bool cuda : {false, true})
      for (DType d : {kFloat16, kBFloat16})
        QTest::newRow(qPrintable(QString::fromStdString(dtypeName(d)) + (cuda ? "/cuda" : "/cpu"))) << int(d) << cuda;
  }
  void sixteenBitInputFloatStatistics() {
    QFETCH(int, dtype);
    QFETCH(bool, cuda);
    if (cuda && !test::cudaUsable()) QSKIP("no CUDA device");
    const Device dev = cuda ? test::cudaDevice() : kCPU;
    const DType d = static_cast<DType>(dtype);
    Tensor x = randn({4, 3, 3, 3}).to(d);
    Tensor w = randn({3}), b = randn({3});
    Tensor rm = zeros({3}), rv = ones({3});
    Tensor rm64 = zeros({3}, {kFloat64}), rv64 = ones({3}, {kFloat64});
    Tensor y = batch_norm(x.to(dev), rm.to(dev), rv.to(dev), w.to(dev), b.to(dev), true);
    Tensor ref = batch_norm(x.to(kFloat64), rm64, rv64, w.to(kFloat64), b.to(kFloat64), true);
    QCOMPARE(dtypeName(y.dtype()), dtypeName(d));
    const double ulp = d == kFloat16 ? 1.0 / 1024 : 1.0 / 128;
    QString measured;
    NORM_COMPARE("output", y.to(kFloat64), ref, 1e-3, ulp);
    // half weights are accepted for a half input (widened to float32)
    Tensor yh = batch_norm(x.to(dev), Tensor(), Tensor(), w.to(d).to(dev), b.to(d).to(dev), true);
    QCOMPARE(dtypeName(yh.dtype()), dtypeName(d));
    qInfo("largest |16-bit - float64|:%s", qPrintable(measured));
  }

  // batch_norm is in none of autocast's lists: it runs in its input's dtype.
  void notInAutocastLists() {
    amp::AutocastGuard autocast(DeviceType::CPU, kBFloat16);
    Tensor y = batch_norm(randn({4, 3}), zeros({3}), ones({3}), ones({3}), zeros({3}), true);
    QCOMPARE(dtypeName(y.dtype()), dtypeName(kFloat32));
    nn::BatchNorm2d bn(3);
    QCOMPARE(dtypeName(bn(randn({2, 3, 2, 2})).dtype()), dtypeName(kFloat32));
  }

  void mixedDtypeIsRefused() {
    try {
      batch_norm(randn({2, 3}), zeros({3}, {kFloat64}), ones({3}, {kFloat64}), Tensor(), Tensor(), true);
      QFAIL("no error");
    } catch (const Error& e) {
      QCOMPARE(QString(e.what()), QString("mixed dtype (CPU): expect parameter to have scalar type of Float"));
    }
  }
};

QTEST_GUILESS_MAIN(TestNormParity)
#include "test_norm_parity.moc"
