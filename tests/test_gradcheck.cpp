// Finite-difference gradient checks: for every differentiable op, autograd's gradient of
// L = sum(w * op(inputs)) (w fixed and random, so every output element matters differently) must
// match central differences (L(x + eps) - L(x - eps)) / 2 eps. Everything runs in float64, as
// torch.autograd.gradcheck does (eps 1e-6, atol 1e-5, rtol 1e-3 there; tighter here): in float32 the
// differences' rounding error would hide gradients that are wrong by a few percent.
#include "op_cases.h"
#include "test_util.h"

using namespace gpulab;

namespace {

constexpr double kAtol = 1e-6, kRtol = 1e-5;

double weightedSum(const Tensor& out, const std::vector<double>& w) {
  auto v = out.toVector<double>();
  double s = 0;
  for (std::size_t i = 0; i < v.size(); ++i) s += v[i] * w[i];
  return s;
}

}  // namespace

class TestGradcheck : public QObject {
  Q_OBJECT

 private slots:
  void gradientsMatchFiniteDifferences_data() {
    test::addOpCaseRows();
  }

  void gradientsMatchFiniteDifferences() {
    QFETCH(int, index);
    const test::OpCase c = test::opCases()[static_cast<std::size_t>(index)];
    std::vector<Tensor> inputs = test::makeInputs(c);
    for (Tensor& t : inputs) t = t.to(kFloat64).requires_grad_(true);
    std::vector<Tensor> args = inputs;
    args.insert(args.end(), c.extra.begin(), c.extra.end());

    Tensor out = c.fn(args);
    QCOMPARE(dtypeName(out.dtype()), dtypeName(kFloat64));  // no op may fall back to float32 on the way
    Generator wg(99);
    const std::vector<double> w = randn(out.sizes(), wg).toVector<double>();
    (out * tensor(std::vector<float>(w.begin(), w.end()), out.sizes()).to(kFloat64)).sum().backward();

    const double eps = 1e-6;
    NoGradGuard noGrad;
    for (std::size_t i = 0; i < inputs.size(); ++i) {
      QVERIFY2(inputs[i].grad().defined(), "input received no gradient");
      const auto analytic = inputs[i].grad().toVector<double>();
      double* x = inputs[i].data<double>();
      for (std::int64_t j = 0; j < inputs[i].numel(); ++j) {
        const double saved = x[j];
        x[j] = saved + eps;
        const double plus = weightedSum(c.fn(args), w);
        x[j] = saved - eps;
        const double minus = weightedSum(c.fn(args), w);
        x[j] = saved;
        const double numeric = (plus - minus) / (2 * eps);
        const double a = analytic[static_cast<std::size_t>(j)];
        if (std::abs(a - numeric) > kAtol + kRtol * std::abs(numeric)) {
          QFAIL(qPrintable(QString("input %1 element %2: autograd %3, finite difference %4").arg(i).arg(j).arg(a).arg(numeric)));
        }
      }
    }
  }

  // A check that cannot fail is worthless: a deliberately wrong gradient must be caught.
  void checkCatchesAWrongGradient() {
    Tensor x = tensor({0.5f, -1.0f, 2.0f}, {3}).to(kFloat64).requires_grad_(true);
    (x * x).sum().backward();  // d/dx = 2x
    const auto g = x.grad().toVector<double>();
    const double wrong = g[0] * 1.001;  // what a slightly wrong backward might produce
    const double numeric = ((0.5 + 1e-6) * (0.5 + 1e-6) - (0.5 - 1e-6) * (0.5 - 1e-6)) / 2e-6;
    QVERIFY(std::abs(g[0] - numeric) <= kAtol + kRtol * std::abs(numeric));
    QVERIFY(std::abs(wrong - numeric) > kAtol + kRtol * std::abs(numeric));
  }
};

QTEST_GUILESS_MAIN(TestGradcheck)
#include "test_gradcheck.moc"
