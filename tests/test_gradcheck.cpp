// Finite-difference gradient checks: for every differentiable op, autograd's gradient of
// L = sum(w * op(inputs)) (w fixed and random, so every output element matters differently) must
// match central differences (L(x + eps) - L(x - eps)) / 2 eps, computed in double from float32 runs.
#include "op_cases.h"
#include "test_util.h"

using namespace gpulab;

namespace {

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
    for (Tensor& t : inputs) t.requires_grad_(true);
    std::vector<Tensor> args = inputs;
    args.insert(args.end(), c.extra.begin(), c.extra.end());

    Tensor out = c.fn(args);
    Generator wg(99);
    const std::vector<double> w = randn(out.sizes(), wg).toVector<double>();
    (out * tensor(std::vector<float>(w.begin(), w.end()), out.sizes())).sum().backward();

    const double eps = 5e-3;
    NoGradGuard noGrad;
    for (std::size_t i = 0; i < inputs.size(); ++i) {
      QVERIFY2(inputs[i].grad().defined(), "input received no gradient");
      const auto analytic = inputs[i].grad().toVector<double>();
      float* x = inputs[i].data<float>();
      for (std::int64_t j = 0; j < inputs[i].numel(); ++j) {
        const float saved = x[j];
        x[j] = saved + static_cast<float>(eps);
        const double plus = weightedSum(c.fn(args), w);
        x[j] = saved - static_cast<float>(eps);
        const double minus = weightedSum(c.fn(args), w);
        x[j] = saved;
        const double numeric = (plus - minus) / (2 * eps);
        const double a = analytic[static_cast<std::size_t>(j)];
        if (std::abs(a - numeric) > 3e-3 + 2e-2 * std::abs(numeric)) {
          QFAIL(qPrintable(QString("input %1 element %2: autograd %3, finite difference %4").arg(i).arg(j).arg(a).arg(numeric)));
        }
      }
    }
  }

  // A check that cannot fail is worthless: a deliberately wrong gradient must be caught.
  void checkCatchesAWrongGradient() {
    Tensor x = tensor({0.5f, -1.0f, 2.0f}, {3}, {.requires_grad = true});
    (x * x).sum().backward();  // d/dx = 2x
    const auto g = x.grad().toVector<double>();
    const double wrong = g[0] * 1.1;  // what a buggy backward might produce
    const double numeric = ((0.5 + 5e-3) * (0.5 + 5e-3) - (0.5 - 5e-3) * (0.5 - 5e-3)) / 1e-2;
    QVERIFY(std::abs(g[0] - numeric) <= 3e-3 + 2e-2 * std::abs(numeric));
    QVERIFY(std::abs(wrong - numeric) > 3e-3 + 2e-2 * std::abs(numeric));
  }
};

QTEST_GUILESS_MAIN(TestGradcheck)
#include "test_gradcheck.moc"
