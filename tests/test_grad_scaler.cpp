// GradScaler (engine/amp/grad_scaler.h) and its fused kernel, Backend::nonFiniteCheckAndUnscale
// (engine/kernels/amp/{cpu.cpp,cuda.cu}): PyTorch's semantics -- a step with an inf/NaN gradient is
// skipped and the scale backs off, growth_interval clean steps grow it, the unscaled gradients are the
// float32 ones, the errors are PyTorch's -- and the kernel's counts and rounding per dtype, the CUDA
// kernel against the CPU reference.
#include <bit>
#include <cmath>
#include <cstdint>
#include <limits>
#include <memory>
#include <optional>

#include "engine/amp/grad_scaler.h"
#include "engine/core/dispatch.h"
#include "engine/core/errors.h"
#include "engine/kernels/backend.h"
#include "engine/runtime/device_runtime.h"
#include "engine/nn/layers.h"
#include "engine/optim/optimizer.h"
#include "engine/runtime/emulated_gpu.h"
#include "test_util.h"

using namespace gpulab;
using amp::GradScaler;
using amp::GradScalerOptions;

Q_DECLARE_METATYPE(gpulab::DType)

namespace {
constexpr double kInf = std::numeric_limits<double>::infinity();
constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

// A 1-D CPU tensor of `dtype` holding `values`, each rounded once to the dtype (written element by
// element, so the test does not depend on the engine's dtype conversions).
Tensor typed(const std::vector<double>& values, DType dtype) {
  Tensor t = Tensor::empty({static_cast<std::int64_t>(values.size())}, dtype);
  dispatchFloating(dtype, "typed", [&](auto tag) {
    using T = typename decltype(tag)::type;
    T* p = t.data<T>();
    for (std::size_t i = 0; i < values.size(); ++i) p[i] = static_cast<T>(values[i]);
  });
  return t;
}

// The elements of a 1-D tensor of any floating dtype, on any device, widened exactly to double.
std::vector<double> values(const Tensor& t0) {
  const Tensor t = t0.cpu().contiguous();
  std::vector<double> out(static_cast<std::size_t>(t.numel()));
  dispatchFloating(t.dtype(), "values", [&](auto tag) {
    using T = typename decltype(tag)::type;
    const T* p = t.data<T>();
    for (std::size_t i = 0; i < out.size(); ++i) out[i] = static_cast<double>(static_cast<OpMath<T>>(p[i]));
  });
  return out;
}

// What the kernel must store for v * invScale in `dtype`: the product in OpMath, rounded once.
double expectedUnscaled(double v, double invScale, DType dtype) {
  return dispatchFloating(dtype, "expected", [&](auto tag) {
    using T = typename decltype(tag)::type;
    using M = OpMath<T>;
    const T stored = static_cast<T>(v);
    return static_cast<double>(static_cast<M>(static_cast<T>(static_cast<M>(stored) * static_cast<M>(invScale))));
  });
}

// Equal as values, with NaN equal to NaN and the sign of zero significant.
bool sameValue(double a, double b) {
  if (std::isnan(a) || std::isnan(b)) return std::isnan(a) && std::isnan(b);
  return a == b && std::signbit(a) == std::signbit(b);
}

void compareExactly(const std::vector<double>& got, const std::vector<double>& want, const char* what) {
  QCOMPARE(got.size(), want.size());
  for (std::size_t i = 0; i < got.size(); ++i) {
    if (sameValue(got[i], want[i])) continue;  // the message only for a failure: formatting it for
                                               // millions of equal elements took 20 s (90 under ASan)
    QFAIL(qPrintable(QString("%1, element %2: %3, expected %4").arg(what).arg(i).arg(got[i], 0, 'g', 17).arg(want[i], 0, 'g', 17)));
  }
}

std::vector<std::int64_t> runKernel(Device device, const std::vector<Tensor>& grads, double invScale,
                                    std::vector<std::int64_t> initial = {0, 0}) {
  Tensor counts = tensor(initial, {2}).to(device);
  backendFor(device).nonFiniteCheckAndUnscale(grads, counts, invScale);
  return counts.toVector<std::int64_t>();
}

// The hand-made gradients: 3 + 1 non-finite values and 3 + 1 exact zeros (-0 among them), and values
// every dtype holds exactly, among them 2^-24 (float16's smallest subnormal: not zero) and 65504.
const std::vector<double> kGradA = {0.0, -0.0, 1.0, -2.0, 0.5, kInf, -kInf, kNaN, 3.0, 0.0, 0x1p-24, 65504.0, 7.0};
const std::vector<double> kGradB = {kNaN, 0.0, 5.0};

// The tiny model: loss = sum(w * x), so d loss / dw = x and the scaled gradient is x * scale.
struct Tiny {
  Tensor w = tensor({0.5f, -1.5f, 3.0f}, {3}, {.requires_grad = true});
  Tensor loss(const std::vector<float>& x) const { return (w * tensor(x, {3})).sum(); }
};

// One iteration of PyTorch's loop: zero_grad, scale(loss).backward(), step, update. Returns step()'s result.
bool iteration(GradScaler& scaler, optim::Optimizer& opt, const Tiny& model, const std::vector<float>& x) {
  opt.zero_grad();
  scaler.scale(model.loss(x)).backward();
  const bool stepped = scaler.step(opt);
  scaler.update();
  return stepped;
}

std::unique_ptr<optim::Optimizer> makeOptimizer(const QString& kind, const Tensor& w) {
  if (kind == "sgd_momentum") return std::make_unique<optim::SGD>(std::vector<Tensor>{w}, optim::SGDOptions{.lr = 0.1, .momentum = 0.9});
  return std::make_unique<optim::Adam>(std::vector<Tensor>{w}, optim::AdamOptions{.lr = 0.1});
}

const std::vector<float> kX1 = {1.0f, -2.0f, 0.25f}, kX2 = {0.5f, 0.75f, -3.0f};
}  // namespace

class TestGradScaler : public QObject {
  Q_OBJECT

 private slots:
  // ---- the kernel ----------------------------------------------------------------------------------

  // Counts before scaling, accumulated onto what `counts` held; v * invScale computed in OpMath and
  // rounded once (invScale 0.1 is inexact: a float product for the 16-bit types and float32, a
  // double one for float64).
  void kernelCountsAndUnscales_data() {
    QTest::addColumn<DType>("dtype");
    QTest::addColumn<double>("invScale");
    for (DType d : {kFloat32, kFloat64, kFloat16, kBFloat16}) {
      for (double inv : {0.5, 0.1, 1.0 / 65536.0}) {
        QTest::newRow(qPrintable(QString("%1 inv=%2").arg(QString::fromStdString(dtypeName(d))).arg(inv))) << d << inv;
      }
    }
  }
  void kernelCountsAndUnscales() {
    QFETCH(DType, dtype);
    QFETCH(double, invScale);
    Tensor a = typed(kGradA, dtype), b = typed(kGradB, dtype), empty = typed({}, dtype);
    const std::vector<double> a0 = values(a), b0 = values(b);
    const auto counts = runKernel(kCPU, {a, empty, b}, invScale, {10, 20});
    QCOMPARE(counts, (std::vector<std::int64_t>{10 + 4, 20 + 4}));
    std::vector<double> wantA, wantB;
    for (double v : a0) wantA.push_back(expectedUnscaled(v, invScale, dtype));
    for (double v : b0) wantB.push_back(expectedUnscaled(v, invScale, dtype));
    compareExactly(values(a), wantA, "first gradient");
    compareExactly(values(b), wantB, "second gradient");
    QCOMPARE(empty.numel(), std::int64_t{0});
  }

  // Nothing to count: both counters keep their value, the gradient is only scaled.
  void kernelCleanGradient_data() {
    QTest::addColumn<DType>("dtype");
    for (DType d : {kFloat32, kFloat64, kFloat16, kBFloat16}) QTest::newRow(dtypeName(d).c_str()) << d;
  }
  void kernelCleanGradient() {
    QFETCH(DType, dtype);
    Tensor g = typed({1.0, -4.0, 0.25}, dtype);
    QCOMPARE(runKernel(kCPU, {g}, 0.25, {3, 5}), (std::vector<std::int64_t>{3, 5}));
    compareExactly(values(g), {0.25, -1.0, 0.0625}, "unscaled");
  }

  // An int64 "gradient" is refused, with PyTorch's words, before any gradient is touched.
  void kernelRefusesNonFloating() {
    Tensor g = typed({2.0, 4.0}, kFloat32);
    Tensor labels = tensor(std::vector<std::int64_t>{1, 2}, {2});
    QVERIFY_THROWS_EXCEPTION(NotImplementedError, runKernel(kCPU, {g, labels}, 0.5));
    compareExactly(values(g), {2.0, 4.0}, "untouched");
  }

  // ---- GradScaler ----------------------------------------------------------------------------------

  // A non-finite gradient: step() returns false, the parameters and the optimizer's state are as
  // before (the next clean step gives what a run without the bad step gives), the scale halves and
  // the growth tracker restarts.
  void nonFiniteGradientSkipsStep_data() {
    QTest::addColumn<QString>("optimizer");
    QTest::addColumn<double>("bad");
    for (const char* opt : {"sgd_momentum", "adam"}) {
      QTest::newRow(qPrintable(QString("%1 inf").arg(opt))) << QString(opt) << kInf;
      QTest::newRow(qPrintable(QString("%1 -inf").arg(opt))) << QString(opt) << -kInf;
      QTest::newRow(qPrintable(QString("%1 nan").arg(opt))) << QString(opt) << kNaN;
    }
  }
  void nonFiniteGradientSkipsStep() {
    QFETCH(QString, optimizer);
    QFETCH(double, bad);
    Tiny model;
    auto opt = makeOptimizer(optimizer, model.w);
    GradScaler scaler;
    QCOMPARE(scaler.get_scale(), 65536.0);
    QVERIFY(iteration(scaler, *opt, model, kX1));
    QCOMPARE(scaler.growth_tracker(), std::int64_t{1});

    const Tensor before = model.w.detach().clone();
    QVERIFY(!iteration(scaler, *opt, model, {2.0f, static_cast<float>(bad), 1.0f}));
    GPULAB_COMPARE_TENSORS(model.w.detach(), before, 0, 0);
    QVERIFY(scaler.last_step().skipped);
    QCOMPARE(scaler.last_step().scale, 65536.0);
    QCOMPARE(scaler.last_step().nonfinite, std::int64_t{1});
    QCOMPARE(scaler.last_step().total, std::int64_t{3});
    QCOMPARE(scaler.get_scale(), 32768.0);
    QCOMPARE(scaler.growth_tracker(), std::int64_t{0});

    QVERIFY(iteration(scaler, *opt, model, kX2));
    QVERIFY(!scaler.last_step().skipped);
    QCOMPARE(scaler.last_step().scale, 32768.0);
    // The same optimizer without the skipped step (the unscaled gradients are x exactly: the scales are
    // powers of two).
    Tiny reference;
    auto refOpt = makeOptimizer(optimizer, reference.w);
    for (const auto& x : {kX1, kX2}) {
      reference.w.set_grad(tensor(x, {3}));
      refOpt->step();
    }
    GPULAB_COMPARE_TENSORS(model.w.detach(), reference.w.detach(), 0, 0);
  }

  // One optimizer of two parameter groups (two engine optimizers): an inf in one group's gradients
  // skips both groups' steps, and a clean step steps both, as PyTorch's scaler treats one optimizer.
  void parameterGroupsStepOrSkipTogether() {
    Tiny a, b;
    optim::SGD first({a.w}, {.lr = 0.5}), second({b.w}, {.lr = 0.5});
    const std::vector<optim::Optimizer*> groups{&first, &second};
    GradScaler scaler;
    const Tensor aBefore = a.w.detach().clone(), bBefore = b.w.detach().clone();
    a.w.set_grad(tensor({1.0f, 2.0f, 3.0f}, {3}) * scaler.get_scale());
    b.w.set_grad(tensor({1.0f, static_cast<float>(kInf), 3.0f}, {3}) * scaler.get_scale());
    QVERIFY(!scaler.step(groups));
    QCOMPARE(scaler.last_step().total, std::int64_t{6});
    QCOMPARE(scaler.last_step().nonfinite, std::int64_t{1});
    GPULAB_COMPARE_TENSORS(a.w.detach(), aBefore, 0, 0);  // the clean group did not step either
    GPULAB_COMPARE_TENSORS(b.w.detach(), bBefore, 0, 0);
    scaler.update();
    a.w.set_grad(tensor({1.0f, 2.0f, 3.0f}, {3}) * scaler.get_scale());
    b.w.set_grad(tensor({2.0f, 2.0f, 2.0f}, {3}) * scaler.get_scale());
    QVERIFY(scaler.step(groups));
    GPULAB_COMPARE_TENSORS(a.w.detach(), aBefore - tensor({0.5f, 1.0f, 1.5f}, {3}), 0, 0);
    GPULAB_COMPARE_TENSORS(b.w.detach(), bBefore - tensor({1.0f, 1.0f, 1.0f}, {3}), 0, 0);
    QVERIFY_THROWS_EXCEPTION(Error, scaler.step(groups));  // once per update(), for the groups as one
  }

  // After growth_interval clean steps in a row the scale grows by growth_factor (once: the tracker
  // restarts), never before.
  void growthAfterInterval_data() {
    QTest::addColumn<qint64>("interval");
    QTest::addColumn<double>("growth");
    QTest::addColumn<int>("steps");
    QTest::addColumn<double>("expectedScale");
    QTest::addColumn<qint64>("expectedTracker");
    QTest::newRow("default, 1999 steps") << qint64(2000) << 2.0 << 1999 << 65536.0 << qint64(1999);
    QTest::newRow("default, 2000 steps") << qint64(2000) << 2.0 << 2000 << 131072.0 << qint64(0);
    QTest::newRow("default, 2001 steps") << qint64(2000) << 2.0 << 2001 << 131072.0 << qint64(1);
    QTest::newRow("interval 3, 6 steps") << qint64(3) << 2.0 << 6 << 262144.0 << qint64(0);
    QTest::newRow("interval 1, growth 1.5") << qint64(1) << 1.5 << 2 << 147456.0 << qint64(0);
  }
  void growthAfterInterval() {
    QFETCH(qint64, interval);
    QFETCH(double, growth);
    QFETCH(int, steps);
    QFETCH(double, expectedScale);
    QFETCH(qint64, expectedTracker);
    Tiny model;
    optim::SGD opt({model.w}, {.lr = 1e-6});
    GradScaler scaler({.growth_factor = growth, .growth_interval = static_cast<std::int64_t>(interval)});
    for (int i = 0; i < steps; ++i) QVERIFY(iteration(scaler, opt, model, kX1));
    QCOMPARE(scaler.get_scale(), expectedScale);
    QCOMPARE(qint64(scaler.growth_tracker()), expectedTracker);
  }

  // The scale never grows to inf (it is a float32, as PyTorch's): it stays at the last finite value.
  void growthStopsBeforeInf() {
    Tiny model;
    optim::SGD opt({model.w}, {.lr = 0.0});
    GradScaler scaler({.init_scale = 0x1p127, .growth_interval = 1});
    QVERIFY(iteration(scaler, opt, model, {0.0f, 0.0f, 0.0f}));
    QCOMPARE(scaler.get_scale(), 0x1p127);
    QCOMPARE(scaler.growth_tracker(), std::int64_t{0});
  }

  // growth_interval 3: an inf resets the count of clean steps. 'c' a clean step, 'i' one with an inf;
  // the scale and growth tracker after each update().
  void infResetsGrowthTracker_data() {
    QTest::addColumn<QString>("pattern");
    QTest::addColumn<QList<double>>("scales");
    QTest::addColumn<QList<qint64>>("trackers");
    QTest::newRow("clean") << "cccc" << QList<double>{1024, 1024, 2048, 2048} << QList<qint64>{1, 2, 0, 1};
    QTest::newRow("inf at step 2") << "ciccc" << QList<double>{1024, 512, 512, 512, 1024} << QList<qint64>{1, 0, 1, 2, 0};
    QTest::newRow("inf at step 3") << "cciccc" << QList<double>{1024, 1024, 512, 512, 512, 1024}
                                   << QList<qint64>{1, 2, 0, 1, 2, 0};
    QTest::newRow("two infs") << "iic" << QList<double>{512, 256, 256} << QList<qint64>{0, 0, 1};
  }
  void infResetsGrowthTracker() {
    QFETCH(QString, pattern);
    QFETCH(QList<double>, scales);
    QFETCH(QList<qint64>, trackers);
    Tiny model;
    optim::SGD opt({model.w}, {.lr = 1e-3});
    GradScaler scaler({.init_scale = 1024, .growth_interval = 3});
    for (int i = 0; i < pattern.size(); ++i) {
      const bool inf = pattern[i] == 'i';
      QCOMPARE(iteration(scaler, opt, model, inf ? std::vector<float>{1.0f, INFINITY, 0.0f} : kX1), !inf);
      QCOMPARE(scaler.get_scale(), scales[i]);
      QCOMPARE(qint64(scaler.growth_tracker()), trackers[i]);
    }
  }

  // A small MLP trained with and without the scaler: after unscale_ the gradients are the float32
  // ones (exactly for a power-of-two scale, to float32 rounding for another), and so are the weights.
  void unscaledGradientsMatchFloat32_data() {
    QTest::addColumn<double>("initScale");
    QTest::addColumn<double>("rtol");
    QTest::newRow("65536") << 65536.0 << 0.0;
    QTest::newRow("1024") << 1024.0 << 0.0;
    QTest::newRow("3 (inexact inverse)") << 3.0 << 1e-6;
  }
  void unscaledGradientsMatchFloat32() {
    QFETCH(double, initScale);
    QFETCH(double, rtol);
    Generator gx(7);
    const Tensor x = randn({8, 4}, gx), y = randn({8, 2}, gx);
    auto makeModel = [] {
      Generator g(11);
      return std::make_shared<nn::Sequential>(std::initializer_list<std::shared_ptr<nn::Module>>{
          std::make_shared<nn::Linear>(4, 6, true, g), std::make_shared<nn::Tanh>(), std::make_shared<nn::Linear>(6, 2, true, g)});
    };
    auto scaled = makeModel(), plain = makeModel();
    optim::Adam optScaled(scaled->parameters(), {.lr = 0.05}), optPlain(plain->parameters(), {.lr = 0.05});
    GradScaler scaler({.init_scale = initScale});
    // An inexact 1/scale changes the rounding of every sum in the backward: a few float32 ulps of the
    // largest terms (the gradients are about 0.1), hence an absolute part.
    const double atol = rtol == 0 ? 0 : 1e-7;
    for (int step = 0; step < 5; ++step) {
      optScaled.zero_grad();
      optPlain.zero_grad();
      scaler.scale(mse_loss((*scaled)(x), y)).backward();
      mse_loss((*plain)(x), y).backward();
      scaler.unscale_(optScaled);
      const auto ps = scaled->parameters(), pp = plain->parameters();
      QCOMPARE(ps.size(), pp.size());
      for (std::size_t i = 0; i < ps.size(); ++i) GPULAB_COMPARE_TENSORS(ps[i].grad(), pp[i].grad(), atol, rtol);
      QVERIFY(scaler.step(optScaled));
      optPlain.step();
      scaler.update();
      for (std::size_t i = 0; i < ps.size(); ++i) GPULAB_COMPARE_TENSORS(ps[i].detach(), pp[i].detach(), atol * 10, rtol * 10);
    }
  }

  // The counts a lesson plots: inf/NaN and exact zeros of all the gradients, and how many values.
  void stepStatsCount() {
    Tensor w1 = zeros({4}, {.requires_grad = true}), w2 = zeros({2, 3}, {.requires_grad = true});
    Tensor w3 = zeros({5}, {.requires_grad = true});  // no gradient: not counted
    optim::SGD opt({w1, w2, w3}, {.lr = 0.1});
    w1.set_grad(tensor({0.0f, INFINITY, 2.0f, NAN}, {4}));
    w2.set_grad(tensor({0.0f, -0.0f, 1.0f, 1.0f, -INFINITY, 3.0f}, {2, 3}));
    GradScaler scaler({.init_scale = 4});
    QVERIFY(!scaler.step(opt));
    QCOMPARE(scaler.last_step().nonfinite, std::int64_t{3});
    QCOMPARE(scaler.last_step().zeros, std::int64_t{3});
    QCOMPARE(scaler.last_step().total, std::int64_t{10});
    QCOMPARE(scaler.last_step().scale, 4.0);
    compareExactly(values(w1.grad()), {0.0, kInf, 0.5, kNaN}, "w1.grad unscaled");
  }

  // A gradient that is a non-contiguous view (a transpose) is unscaled in place all the same.
  void nonContiguousGradient() {
    Tensor w = zeros({2, 3}, {.requires_grad = true});
    optim::SGD opt({w}, {.lr = 1.0});
    const Tensor g = tensor({2.0f, 4.0f, 6.0f, 8.0f, 10.0f, 0.0f}, {3, 2}).t();  // (2, 3), strides (1, 2)
    QVERIFY(!g.is_contiguous());
    w.set_grad(g);
    GradScaler scaler({.init_scale = 2});
    scaler.unscale_(opt);
    QVERIFY(w.grad().sameAs(g));
    GPULAB_COMPARE_TENSORS(w.grad(), tensor({1.0f, 3.0f, 5.0f, 2.0f, 4.0f, 0.0f}, {2, 3}), 0, 0);
    QVERIFY(scaler.step(opt));
    QCOMPARE(scaler.last_step().zeros, std::int64_t{1});
    GPULAB_COMPARE_TENSORS(w.detach(), tensor({-1.0f, -3.0f, -5.0f, -2.0f, -4.0f, 0.0f}, {2, 3}), 0, 0);
  }

  // A bfloat16 gradient (of a float32 parameter) is unscaled and counted; a float16 one is refused,
  // as PyTorch refuses it, before any gradient is touched.
  void reducedPrecisionGradients() {
    // Parameters of each dtype (a gradient has its parameter's dtype: set_grad refuses another).
    Tensor w = zeros({3}, {.requires_grad = true}), v = zeros({2}, {.dtype = kBFloat16, .requires_grad = true});
    optim::SGD opt({w, v}, {.lr = 0.1});
    w.set_grad(typed({8.0, 0.0, 3.0}, kFloat32));
    v.set_grad(typed({kInf, 6.0}, kBFloat16));
    GradScaler scaler({.init_scale = 2});
    scaler.unscale_(opt);
    compareExactly(values(v.grad()), {kInf, 3.0}, "bfloat16 unscaled");
    QVERIFY(!scaler.step(opt));
    QCOMPARE(scaler.last_step().nonfinite, std::int64_t{1});
    QCOMPARE(scaler.last_step().zeros, std::int64_t{1});
    scaler.update();

    Tensor h = zeros({2}, {.dtype = kFloat16, .requires_grad = true});
    optim::SGD halfOpt({w, h}, {.lr = 0.1});
    h.set_grad(typed({1.0, 6.0}, kFloat16));
    w.set_grad(typed({8.0, 0.0, 3.0}, kFloat32));
    try {
      scaler.unscale_(halfOpt);
      QFAIL("a float16 gradient must be refused");
    } catch (const ValueError& e) {
      QCOMPARE(QString(e.what()), QString("Attempting to unscale FP16 gradients."));
    }
    compareExactly(values(w.grad()), {8.0, 0.0, 3.0}, "untouched");
  }

  // Misuse raises PyTorch's errors. u: unscale_, s: step, x: update(); the last call raises.
  void misuseRaises_data() {
    QTest::addColumn<QString>("calls");
    QTest::addColumn<QString>("message");
    QTest::newRow("unscale_ twice") << "uu" << "unscale_() has already been called on this optimizer since the last update().";
    QTest::newRow("unscale_ twice after an update") << "usxuu" << "unscale_() has already been called on this optimizer since the last update().";
    QTest::newRow("unscale_ after step") << "su" << "unscale_() is being called after step().";
    QTest::newRow("step twice") << "ss" << "step() has already been called since the last update().";
    QTest::newRow("update without a step") << "x" << "No inf checks were recorded prior to update.";
    QTest::newRow("update twice") << "usxx" << "No inf checks were recorded prior to update.";
  }
  void misuseRaises() {
    QFETCH(QString, calls);
    QFETCH(QString, message);
    Tiny model;
    optim::SGD opt({model.w}, {.lr = 0.1});
    GradScaler scaler;
    for (int i = 0; i < calls.size(); ++i) {
      const bool last = i + 1 == calls.size();
      if (calls[i] == 'u' || calls[i] == 's') {
        opt.zero_grad();
        scaler.scale(model.loss(kX1)).backward();
      }
      try {
        if (calls[i] == 'u') scaler.unscale_(opt);
        else if (calls[i] == 's') scaler.step(opt);
        else scaler.update();
        QVERIFY2(!last, "the last call must raise");
      } catch (const Error& e) {
        QVERIFY2(last, e.what());
        QCOMPARE(QString(e.what()), message);
      }
    }
  }

  // unscale_ then step (to clip in between): the gradients are unscaled once, not twice; two
  // optimizers may each step once per update().
  void unscaleThenStepUnscalesOnce() {
    Tiny a, b;
    optim::SGD optA({a.w}, {.lr = 1.0}), optB({b.w}, {.lr = 1.0});
    GradScaler scaler({.init_scale = 8});
    scaler.scale(a.loss(kX1) + b.loss(kX2)).backward();
    scaler.unscale_(optA);
    GPULAB_COMPARE_TENSORS(a.w.grad(), tensor(kX1, {3}), 0, 0);
    QVERIFY(scaler.step(optA));
    QVERIFY(scaler.step(optB));
    scaler.update();
    GPULAB_COMPARE_TENSORS(a.w.detach(), tensor({0.5f - 1.0f, -1.5f + 2.0f, 3.0f - 0.25f}, {3}), 0, 0);
    GPULAB_COMPARE_TENSORS(b.w.detach(), tensor({0.5f - 0.5f, -1.5f - 0.75f, 3.0f + 3.0f}, {3}), 0, 0);
  }

  // scale(loss) is loss * scale, recorded by autograd; a 0-dim float16 loss times the float32 scale is
  // float32 (torch.result_type of two 0-dim tensors), so 65536 * loss does not overflow.
  void scaleMultipliesTheLoss() {
    Tiny model;
    GradScaler scaler;
    const Tensor loss = model.loss(kX1);
    const Tensor scaled = scaler.scale(loss);
    QVERIFY(!scaled.sameAs(loss));
    QVERIFY(scaled.grad_fn() != nullptr);
    QCOMPARE(scaled.item(), loss.item() * 65536.0);
    scaled.backward();
    GPULAB_COMPARE_TENSORS(model.w.grad(), tensor({65536.0f, -131072.0f, 16384.0f}, {3}), 0, 0);

    const Tensor halfLoss = full({}, 2.0, {.dtype = kFloat16});
    const Tensor scaledHalf = scaler.scale(halfLoss);
    QCOMPARE(scaledHalf.dtype(), kFloat32);
    QCOMPARE(scaledHalf.item(), 131072.0);
  }

  // A disabled scaler changes nothing: scale() returns the loss, unscale_ and update() do nothing,
  // step() is optimizer.step() (even with an inf gradient).
  void disabledIsPassThrough_data() {
    QTest::addColumn<float>("second");
    QTest::newRow("finite") << -2.0f;
    QTest::newRow("inf") << INFINITY;
  }
  void disabledIsPassThrough() {
    QFETCH(float, second);
    Tiny model, reference;
    optim::SGD opt({model.w}, {.lr = 0.1}), refOpt({reference.w}, {.lr = 0.1});
    GradScaler scaler({.enabled = false});
    QVERIFY(!scaler.is_enabled());
    QCOMPARE(scaler.get_scale(), 1.0);
    const std::vector<float> x = {1.0f, second, 0.25f};
    const Tensor loss = model.loss(x);
    QVERIFY(scaler.scale(loss).sameAs(loss));
    loss.backward();
    scaler.unscale_(opt);
    scaler.unscale_(opt);  // no error either: nothing is tracked
    GPULAB_COMPARE_TENSORS(model.w.grad(), tensor(x, {3}), 0, 0);
    QVERIFY(scaler.step(opt));
    scaler.update();
    scaler.update(5.0);
    QCOMPARE(scaler.get_scale(), 1.0);
    reference.w.set_grad(tensor(x, {3}));
    refOpt.step();
    compareExactly(values(model.w.detach()), values(reference.w.detach()), "parameters");
  }

  // update(newScale) sets the scale (rounded to float32, as PyTorch's fill_) and keeps the tracker.
  void updateWithNewScale() {
    Tiny model;
    optim::SGD opt({model.w}, {.lr = 0.1});
    GradScaler scaler({.growth_interval = 10});
    QVERIFY(iteration(scaler, opt, model, kX1));
    scaler.update(0.1);
    QCOMPARE(scaler.get_scale(), static_cast<double>(0.1f));
    QCOMPARE(scaler.growth_tracker(), std::int64_t{1});
  }

  void optionsAreChecked() {
    QVERIFY_THROWS_EXCEPTION(ValueError, GradScaler({.growth_factor = 1.0}));
    QVERIFY_THROWS_EXCEPTION(ValueError, GradScaler({.backoff_factor = 1.0}));
    GradScaler disabled({.growth_factor = 0.5, .enabled = false});  // PyTorch checks only when enabled
    QVERIFY(!disabled.is_enabled());
  }

  // Parameters on two devices (the CPU and a GPU, real or emulated): one check per device, counts
  // summed over both; an inf on either device skips the step.
  void parametersOnTwoDevices_data() {
    QTest::addColumn<bool>("infOnGpu");
    QTest::newRow("inf on the GPU") << true;
    QTest::newRow("inf on the CPU") << false;
  }
  void parametersOnTwoDevices() {
    QFETCH(bool, infOnGpu);
    std::optional<Device> other = cuda::isAvailable() ? std::optional<Device>(Device(DeviceType::CUDA, 0)) : cuda::emulatedDevice();
    if (!other) QSKIP("no GPU and the emulated GPU is off");
    Tensor a = zeros({3}, {.requires_grad = true}), b = zeros({2}, {.device = *other, .requires_grad = true});
    optim::SGD opt({a, b}, {.lr = 1.0});
    GradScaler scaler({.init_scale = 4});
    a.set_grad(tensor({4.0f, infOnGpu ? 0.0f : INFINITY, 8.0f}, {3}));
    b.set_grad(tensor({infOnGpu ? -INFINITY : 12.0f, 0.0f}, {2}).to(*other));
    QVERIFY(!scaler.step(opt));
    QCOMPARE(scaler.last_step().nonfinite, std::int64_t{1});
    QCOMPARE(scaler.last_step().zeros, std::int64_t{infOnGpu ? 2 : 1});
    QCOMPARE(scaler.last_step().total, std::int64_t{5});
    compareExactly(values(a.grad()), {1.0, infOnGpu ? 0.0 : kInf, 2.0}, "CPU gradient");
    compareExactly(values(b.grad()), {infOnGpu ? -kInf : 3.0, 0.0}, "GPU gradient");
    compareExactly(values(b.detach()), {0.0, 0.0}, "GPU parameter (step skipped)");
    scaler.update();
    QCOMPARE(scaler.get_scale(), 2.0);
  }

  // ---- CUDA against the CPU reference ----------------------------------------------------------------

  // Many tensors of mixed sizes (more than fit one launch's arguments, and larger than a chunk), with
  // inf/NaN/zeros at known places: the counts and every unscaled value (bit for bit) equal the CPU's.
  void cudaKernelMatchesCpu_data() {
    QTest::addColumn<DType>("dtype");
    QTest::addColumn<int>("tensors");
    QTest::addColumn<double>("invScale");
    for (DType d : {kFloat32, kFloat64, kFloat16, kBFloat16}) {
      const QString name = QString::fromStdString(dtypeName(d));
      QTest::newRow(qPrintable(name + " few")) << d << 3 << 0.1;
      QTest::newRow(qPrintable(name + " many")) << d << 300 << 1.0 / 65536.0;
    }
  }
  void cudaKernelMatchesCpu() {
    if (!test::cudaUsable()) QSKIP("no CUDA device");
    QFETCH(DType, dtype);
    QFETCH(int, tensors);
    QFETCH(double, invScale);
    const Device gpu = test::cudaDevice();
    std::uint64_t state = 12345;
    auto next = [&] {
      state = state * 6364136223846793005ULL + 1442695040888963407ULL;
      return static_cast<double>(state >> 40) / static_cast<double>(1ULL << 24);  // [0, 1)
    };
    std::vector<Tensor> cpuGrads, gpuGrads;
    std::int64_t total = 0;
    for (int t = 0; t < tensors; ++t) {
      const std::int64_t n = t % 7 == 3 ? 70000 + t : 1 + (t * 37) % 900;  // a few span several chunks
      std::vector<double> v(static_cast<std::size_t>(n));
      for (auto& e : v) {
        const double r = next();
        e = r < 0.01 ? 0.0 : r < 0.012 ? kInf : r < 0.013 ? kNaN : (next() - 0.5) * 2000.0;
      }
      // And at least one zero and one non-finite value in every tensor: the "few" case's 114 elements
      // would otherwise hold about 0.3 non-finite values (its first GPU run found none to count).
      v[static_cast<std::size_t>(n / 2)] = t % 2 ? -0.0 : 0.0;
      v[static_cast<std::size_t>((t * 13) % n)] = t % 3 == 0 ? kInf : t % 3 == 1 ? kNaN : -kInf;
      Tensor g = typed(v, dtype);
      cpuGrads.push_back(g);
      gpuGrads.push_back(g.to(gpu));
      total += n;
    }
    const auto cpuCounts = runKernel(kCPU, cpuGrads, invScale, {1, 2});
    const auto gpuCounts = runKernel(gpu, gpuGrads, invScale, {1, 2});
    QVERIFY(cpuCounts[0] > 1 && cpuCounts[1] > 2);  // the case has something to count
    QCOMPARE(gpuCounts, cpuCounts);
    for (std::size_t t = 0; t < cpuGrads.size(); ++t) {
      compareExactly(values(gpuGrads[t]), values(cpuGrads[t]), qPrintable(QString("tensor %1").arg(t)));
    }
    QVERIFY(total > 0);
  }

  // The same training steps on the GPU and the CPU: the same skips, counts, scales and weights.
  void cudaScalerMatchesCpu() {
    if (!test::cudaUsable()) QSKIP("no CUDA device");
    const Device gpu = test::cudaDevice();
    Tiny onCpu, onGpu;
    onGpu.w = onCpu.w.detach().to(gpu).requires_grad_();
    optim::SGD optCpu({onCpu.w}, {.lr = 0.1}), optGpu({onGpu.w}, {.lr = 0.1});
    GradScaler scalerCpu({.init_scale = 256, .growth_interval = 2}), scalerGpu({.init_scale = 256, .growth_interval = 2});
    const std::vector<std::vector<float>> xs = {kX1, {0.0f, INFINITY, 1.0f}, kX2, {NAN, 0.0f, 0.0f}, kX1, kX2};
    for (const auto& x : xs) {
      for (auto* side : {&onCpu, &onGpu}) {
        const bool isGpu = side == &onGpu;
        optim::SGD& opt = isGpu ? optGpu : optCpu;
        GradScaler& scaler = isGpu ? scalerGpu : scalerCpu;
        opt.zero_grad();
        scaler.scale((side->w * tensor(x, {3}).to(side->w.device())).sum()).backward();
        scaler.step(opt);
        scaler.update();
      }
      QCOMPARE(scalerGpu.last_step().skipped, scalerCpu.last_step().skipped);
      QCOMPARE(scalerGpu.last_step().nonfinite, scalerCpu.last_step().nonfinite);
      QCOMPARE(scalerGpu.last_step().zeros, scalerCpu.last_step().zeros);
      QCOMPARE(scalerGpu.get_scale(), scalerCpu.get_scale());
      compareExactly(values(onGpu.w.detach()), values(onCpu.w.detach()), "weights");
    }
    QCOMPARE(scalerCpu.get_scale(), 256.0 / 4 * 2);
  }
};

QTEST_GUILESS_MAIN(TestGradScaler)
#include "test_grad_scaler.moc"
