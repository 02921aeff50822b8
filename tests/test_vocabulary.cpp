// PyTorch vocabulary the engine gained in issue 11: reduction='none' for the losses, argmax()/argmin()
// over all elements, and scalar-first arithmetic (2.0 / x). Expected numbers come from PyTorch 1.13 on
// the CPU (/usr/bin/python3); each table row carries the snippet that produced it. Gradients are
// d/dx sum(w * f(x)) for the weights w given with the row. The finite-difference checks and the
// CUDA parity of the differentiable ones are rows of tests/op_cases.h (test_gradcheck,
// test_cuda_parity); here they also run on the other device of this machine -- the real cuda:0, or
// the emulated GPU where there is none -- against the CPU.
//
// Tolerances (float32): 1e-6 absolute + 1e-5 relative against PyTorch (the same float32 math, maybe
// a different summation order); 1e-4 + 1e-4 against the CPU on a real GPU.
#include <functional>
#include <limits>

#include "engine/core/errors.h"
#include "engine/runtime/emulated_gpu.h"
#include "test_util.h"

using namespace gpulab;

Q_DECLARE_METATYPE(gpulab::Tensor)
Q_DECLARE_METATYPE(std::vector<float>)

namespace {

using Fn = std::function<Tensor(const Tensor&)>;

// The message of the exception of type E that `fn` throws ("" when it throws none).
template <typename E>
QString errorText(const std::function<void()>& fn) {
  try {
    fn();
  } catch (const E& e) {
    return QString::fromUtf8(e.what());
  }
  return {};
}

// A device other than the CPU: the real cuda:0 when usable, else the emulated GPU when it is on.
std::optional<Device> otherDevice() {
  if (test::cudaUsable()) return test::cudaDevice();
  return cuda::emulatedDevice();
}

// f(x) and d/dx sum(w * f(x)) for x = `values`, on `device`.
std::pair<Tensor, Tensor> valueAndGrad(const Fn& f, const std::vector<float>& values, const Shape& shape,
                                       const std::vector<float>& w, Device device = kCPU) {
  Tensor x = tensor(values, shape).to(device).requires_grad_(true);
  Tensor out = f(x);
  (out * tensor(w, out.sizes()).to(device)).sum().backward();
  return {out.detach().cpu(), x.grad().cpu()};
}

const std::vector<float> kPointX{0.5f, -1.0f, 2.0f, 1.5f, 0.0f, -0.5f};    // (2, 3)
const std::vector<float> kPointY{1.0f, 1.0f, -1.0f, 0.0f, 0.5f, -0.5f};    // (2, 3)
const std::vector<float> kLogits{1.0f, 2.0f, 0.5f, 0.1f, -1.0f, 3.0f, 0.0f, 0.0f, 0.0f, 2.0f, 1.0f, -2.0f};  // (4, 3)
const std::vector<std::int64_t> kLabels{1, 2, 0, 2};
const std::vector<float> kScalarX{0.5f, -2.0f, 4.0f, -0.25f};

Tensor pointTarget() { return tensor(kPointY, {2, 3}); }
Tensor labelTensor() { return tensor(kLabels, {4}); }

}  // namespace

class TestVocabulary : public QObject {
  Q_OBJECT

 private slots:
  // ---- reduction='none' ------------------------------------------------------------------------
  void lossesWithoutReductionMatchPyTorch_data() {
    QTest::addColumn<QString>("loss");
    QTest::addColumn<std::vector<float>>("expected");
    QTest::addColumn<std::vector<float>>("expectedGrad");
    // x = torch.tensor([[0.5, -1.0, 2.0], [1.5, 0.0, -0.5]], requires_grad=True)
    // y = torch.tensor([[1.0, 1.0, -1.0], [0.0, 0.5, -0.5]])
    // out = F.mse_loss(x, y, reduction='none')  # and F.l1_loss
    // (out * torch.tensor([[1., 2, 3], [4, 5, 6]])).sum().backward(); out, x.grad
    QTest::newRow("mse_loss") << "mse_loss" << std::vector<float>{0.25f, 4.0f, 9.0f, 2.25f, 0.25f, 0.0f}
                              << std::vector<float>{-1.0f, -8.0f, 18.0f, 12.0f, -5.0f, 0.0f};
    QTest::newRow("l1_loss") << "l1_loss" << std::vector<float>{0.5f, 2.0f, 3.0f, 1.5f, 0.5f, 0.0f}
                             << std::vector<float>{-1.0f, -2.0f, 3.0f, 4.0f, -5.0f, 0.0f};
    // lg = torch.tensor([[1.0, 2.0, 0.5], [0.1, -1.0, 3.0], [0.0, 0.0, 0.0], [2.0, 1.0, -2.0]], requires_grad=True)
    // t = torch.tensor([1, 2, 0, 2])
    // out = F.cross_entropy(lg, t, reduction='none'); (out * torch.tensor([1., 2, 3, 4])).sum().backward()
    QTest::newRow("cross_entropy") << "cross_entropy"
                                   << std::vector<float>{0.4643687903881073f, 0.07077422738075256f, 1.0986123085021973f, 4.326562881469727f}
                                   << std::vector<float>{0.23122388124465942f, -0.37146830558776855f, 0.14024437963962555f,
                                                         0.1025271862745285f, 0.034128349274396896f, -0.13665556907653809f,
                                                         -2.0f, 0.9999999403953552f, 0.9999999403953552f,
                                                         2.885596752166748f, 1.0615516901016235f, -3.947148561477661f};
    // F.nll_loss(lg, t, reduction='none'), the same weights: the gradient is -w at each label
    QTest::newRow("nll_loss") << "nll_loss" << std::vector<float>{-2.0f, -3.0f, 0.0f, 2.0f}
                              << std::vector<float>{0, -1, 0, 0, 0, -2, -3, 0, 0, 0, 0, -4};
  }

  void lossesWithoutReductionMatchPyTorch() {
    QFETCH(QString, loss);
    QFETCH(std::vector<float>, expected);
    QFETCH(std::vector<float>, expectedGrad);
    const auto [fn, values, shape, outShape] = lossCase(loss);
    std::vector<float> w(static_cast<std::size_t>(numelOf(outShape)));
    for (std::size_t i = 0; i < w.size(); ++i) w[i] = static_cast<float>(i + 1);
    auto [out, grad] = valueAndGrad(fn, values, shape, w);
    GPULAB_COMPARE_TENSORS(out, tensor(expected, outShape), 1e-6, 1e-5);
    GPULAB_COMPARE_TENSORS(grad, tensor(expectedGrad, shape), 1e-6, 1e-5);
  }

  void reductionNamesAreParsedLikePyTorch() {
    QCOMPARE(parseReduction("mean"), Reduction::Mean);
    QCOMPARE(parseReduction("sum"), Reduction::Sum);
    QCOMPARE(parseReduction("none"), Reduction::None);
    Tensor x = tensor(kPointX, {2, 3}), y = pointTarget();
    GPULAB_COMPARE_TENSORS(mse_loss(x, y, "none"), mse_loss(x, y, Reduction::None), 0, 0);
    GPULAB_COMPARE_TENSORS(l1_loss(x, y, "sum"), l1_loss(x, y, Reduction::Sum), 0, 0);
    Tensor lg = tensor(kLogits, {4, 3});
    GPULAB_COMPARE_TENSORS(cross_entropy(lg, labelTensor(), "mean"), cross_entropy(lg, labelTensor()), 0, 0);
    GPULAB_COMPARE_TENSORS(nll_loss(lg, labelTensor(), "none"), nll_loss(lg, labelTensor(), Reduction::None), 0, 0);
    // F.mse_loss(x, y, reduction='avg') -> ValueError: avg is not a valid value for reduction
    QCOMPARE(errorText<ValueError>([&] { mse_loss(x, y, "avg"); }), QString("avg is not a valid value for reduction"));
    QCOMPARE(errorText<ValueError>([&] { cross_entropy(lg, labelTensor(), "None"); }),
             QString("None is not a valid value for reduction"));
  }

  void lossesWithoutReductionKeepPyTorchShapes() {
    // F.mse_loss(torch.tensor(2.), torch.tensor(0.5), reduction='none') -> tensor(2.2500), shape ()
    Tensor s = mse_loss(scalar_tensor(2.0), scalar_tensor(0.5), Reduction::None);
    QCOMPARE(s.sizes(), Shape{});
    QCOMPARE(s.item(), 2.25);
    QCOMPARE(l1_loss(zeros({2, 0, 3}), zeros({2, 0, 3}), Reduction::None).sizes(), (Shape{2, 0, 3}));
    // An int64 target promotes, as in PyTorch: F.l1_loss(torch.tensor([1.5, -1.]), torch.tensor([1, 1]), reduction='none')
    Tensor p = l1_loss(tensor({1.5f, -1.0f}, {2}), tensor(std::vector<std::int64_t>{1, 1}, {2}), Reduction::None);
    QCOMPARE(p.dtype(), kFloat32);
    QCOMPARE(p.toVector<float>(), (std::vector<float>{0.5f, 2.0f}));
    QCOMPARE(nll_loss(zeros({0, 3}), tensor(std::vector<std::int64_t>{}, {0}), Reduction::None).sizes(), Shape{0});
  }

  void lossesWithoutReductionRefuseBadInput() {
    Tensor lg = tensor(kLogits, {4, 3});
    // F.nll_loss(lg, torch.tensor([1, 2, 3, 0]), reduction='none') -> IndexError: Target 3 is out of bounds.
    QCOMPARE(errorText<IndexError>([&] { nll_loss(lg, tensor(std::vector<std::int64_t>{1, 2, 3, 0}, {4}), Reduction::None); }),
             QString("Target 3 is out of bounds."));
    QVERIFY(errorText<ValueError>([&] { mse_loss(zeros({2, 3}), zeros({3}), Reduction::None); }).startsWith("mse_loss: input and target"));
    // F.nll_loss(lg, torch.tensor([1., 2, 0, 2]), reduction='none') -> expected scalar type Long but found Float
    QVERIFY(errorText<Error>([&] { nll_loss(lg, tensor({1.0f, 2.0f, 0.0f, 2.0f}, {4}), Reduction::None); })
                .startsWith("expected scalar type Long but found"));
    QVERIFY(errorText<NotImplementedError>([&] { l1_loss(labelTensor(), labelTensor(), Reduction::None); })
                .startsWith("\"l1_loss\" not implemented for"));
    const std::optional<Device> d = otherDevice();
    if (!d) QSKIP("no CUDA device and no emulated GPU");
    QVERIFY(errorText<DeviceMismatchError>([&] { mse_loss(zeros({2}), zeros({2}).to(*d), Reduction::None); })
                .contains("Expected all tensors to be on the same device"));
  }

  // ---- argmax() / argmin() over all elements ---------------------------------------------------
  void argOverAllElementsMatchesPyTorch_data() {
    QTest::addColumn<Tensor>("input");
    QTest::addColumn<std::int64_t>("argmax");
    QTest::addColumn<std::int64_t>("argmin");
    const float nan = std::numeric_limits<float>::quiet_NaN();
    constexpr std::int64_t int64Min = std::numeric_limits<std::int64_t>::min();
    // a = torch.tensor([[1.0, 3.0, 3.0], [-2.0, 3.0, -2.0]]); a.argmax(), a.argmin() -> 1, 3 (first of the ties)
    Tensor a = tensor({1.0f, 3.0f, 3.0f, -2.0f, 3.0f, -2.0f}, {2, 3});
    QTest::newRow("ties_first") << a << std::int64_t{1} << std::int64_t{3};
    // a.t().argmax(), a.t().argmin() -> 2, 1 (flat index in the transposed view's order)
    QTest::newRow("non_contiguous") << a.t() << std::int64_t{2} << std::int64_t{1};
    // torch.tensor([1., nan, 5., nan]).argmax() -> 1; torch.tensor([1., nan, -5.]).argmin() -> 1
    QTest::newRow("nan_wins_max") << tensor({1.0f, nan, 5.0f, nan}, {4}) << std::int64_t{1} << std::int64_t{1};
    QTest::newRow("nan_wins_min") << tensor({1.0f, nan, -5.0f}, {3}) << std::int64_t{1} << std::int64_t{1};
    // torch.tensor(7.).argmax(), .argmin() -> 0, 0
    QTest::newRow("zero_dim") << scalar_tensor(7.0) << std::int64_t{0} << std::int64_t{0};
    // torch.tensor([[4, 2], [2, 7]]).argmax(), .argmin() -> 3, 1
    QTest::newRow("int64") << tensor(std::vector<std::int64_t>{4, 2, 2, 7}, {2, 2}) << std::int64_t{3} << std::int64_t{1};
    // torch.tensor([3, -2**63, 5, -2**63]).argmin() -> 1 (no overflow at the minimum); .argmax() -> 2
    QTest::newRow("int64_extremes") << tensor(std::vector<std::int64_t>{3, int64Min, 5, int64Min}, {4}) << std::int64_t{2}
                                    << std::int64_t{1};
  }

  void argOverAllElementsMatchesPyTorch() {
    QFETCH(Tensor, input);
    QFETCH(std::int64_t, argmax);
    QFETCH(std::int64_t, argmin);
    for (const auto& [result, expected] : {std::pair{input.argmax(), argmax}, std::pair{gpulab::argmin(input), argmin}}) {
      QCOMPARE(result.dtype(), kInt64);
      QCOMPARE(result.sizes(), Shape{});
      QVERIFY(!result.requires_grad());
      QCOMPARE(result.toVector<std::int64_t>(), std::vector<std::int64_t>{expected});
    }
  }

  void argminAlongADimMatchesPyTorch() {
    Tensor a = tensor({1.0f, 3.0f, 3.0f, -2.0f, 3.0f, -2.0f}, {2, 3});
    // a.argmin(1) -> [0, 0]; a.argmin(0, keepdim=True) -> [[1, 0, 1]]
    QCOMPARE(a.argmin(1).toVector<std::int64_t>(), (std::vector<std::int64_t>{0, 0}));
    Tensor k = a.argmin(0, true);
    QCOMPARE(k.sizes(), (Shape{1, 3}));
    QCOMPARE(k.toVector<std::int64_t>(), (std::vector<std::int64_t>{1, 0, 1}));
  }

  void argOverNoElementsThrowsLikePyTorch() {
    // torch.empty(0).argmax() -> IndexError: argmax(): Expected reduction dim to be specified for input.numel() == 0.
    QCOMPARE(errorText<IndexError>([] { zeros({0}).argmax(); }),
             QString("argmax(): Expected reduction dim to be specified for input.numel() == 0."));
    QCOMPARE(errorText<IndexError>([] { zeros({2, 0}).argmin(); }),
             QString("argmin(): Expected reduction dim to be specified for input.numel() == 0."));
  }

  // ---- scalar op tensor ------------------------------------------------------------------------
  void scalarFirstArithmeticMatchesPyTorch_data() {
    QTest::addColumn<QString>("op");
    QTest::addColumn<double>("scalar");
    QTest::addColumn<std::vector<float>>("expected");
    QTest::addColumn<std::vector<float>>("expectedGrad");
    // xs = torch.tensor([0.5, -2.0, 4.0, -0.25], requires_grad=True)
    // o = s / xs  # and s - xs, s * xs, s + xs
    // (o * torch.tensor([1., 2, 3, 4])).sum().backward(); o, xs.grad
    QTest::newRow("2/x") << "div" << 2.0 << std::vector<float>{4.0f, -1.0f, 0.5f, -8.0f} << std::vector<float>{-8.0f, -1.0f, -0.375f, -128.0f};
    QTest::newRow("-3/x") << "div" << -3.0 << std::vector<float>{-6.0f, 1.5f, -0.75f, 12.0f} << std::vector<float>{12.0f, 1.5f, 0.5625f, 192.0f};
    QTest::newRow("2-x") << "sub" << 2.0 << std::vector<float>{1.5f, 4.0f, -2.0f, 2.25f} << std::vector<float>{-1.0f, -2.0f, -3.0f, -4.0f};
    QTest::newRow("-3-x") << "sub" << -3.0 << std::vector<float>{-3.5f, -1.0f, -7.0f, -2.75f} << std::vector<float>{-1.0f, -2.0f, -3.0f, -4.0f};
    QTest::newRow("2*x") << "mul" << 2.0 << std::vector<float>{1.0f, -4.0f, 8.0f, -0.5f} << std::vector<float>{2.0f, 4.0f, 6.0f, 8.0f};
    QTest::newRow("-3*x") << "mul" << -3.0 << std::vector<float>{-1.5f, 6.0f, -12.0f, 0.75f} << std::vector<float>{-3.0f, -6.0f, -9.0f, -12.0f};
    QTest::newRow("2+x") << "add" << 2.0 << std::vector<float>{2.5f, 0.0f, 6.0f, 1.75f} << std::vector<float>{1.0f, 2.0f, 3.0f, 4.0f};
    QTest::newRow("-3+x") << "add" << -3.0 << std::vector<float>{-2.5f, -5.0f, 1.0f, -3.25f} << std::vector<float>{1.0f, 2.0f, 3.0f, 4.0f};
  }

  void scalarFirstArithmeticMatchesPyTorch() {
    QFETCH(QString, op);
    QFETCH(double, scalar);
    QFETCH(std::vector<float>, expected);
    QFETCH(std::vector<float>, expectedGrad);
    auto [out, grad] = valueAndGrad(scalarOp(op, scalar), kScalarX, {4}, {1, 2, 3, 4});
    GPULAB_COMPARE_TENSORS(out, tensor(expected, {4}), 1e-6, 1e-5);
    GPULAB_COMPARE_TENSORS(grad, tensor(expectedGrad, {4}), 1e-6, 1e-5);
  }

  void scalarDivisionFollowsPyTorchEdgeCases() {
    // 2 / torch.tensor([1, 2, 4]) -> tensor([2.0000, 1.0000, 0.5000]) (float32: true division)
    Tensor q = 2.0 / tensor(std::vector<std::int64_t>{1, 2, 4}, {3});
    QCOMPARE(q.dtype(), kFloat32);
    QCOMPARE(q.toVector<float>(), (std::vector<float>{2.0f, 1.0f, 0.5f}));
    // 1 / torch.tensor([0., -0.]) -> [inf, -inf]; 0 / torch.tensor([0., 1.]) -> [nan, 0.]
    const auto inf = 1.0 / tensor({0.0f, -0.0f}, {2});
    QCOMPARE(inf.toVector<float>(), (std::vector<float>{INFINITY, -INFINITY}));
    const auto z = (0.0 / tensor({0.0f, 1.0f}, {2})).toVector<float>();
    QVERIFY(std::isnan(z[0]));
    QCOMPARE(z[1], 0.0f);
    // The result of 2 / x is 0-dim for a 0-dim x, and has no history without requires_grad.
    Tensor s = 2.0 / scalar_tensor(4.0);
    QCOMPARE(s.sizes(), Shape{});
    QCOMPARE(s.item(), 0.5);
    QVERIFY(!s.requires_grad());
  }

  // ---- the other device ------------------------------------------------------------------------
  void otherDeviceMatchesCpu_data() {
    QTest::addColumn<QString>("op");
    for (const char* name : {"mse_loss", "l1_loss", "cross_entropy", "nll_loss", "div", "sub", "mul", "add"}) QTest::newRow(name) << name;
  }

  void otherDeviceMatchesCpu() {
    const std::optional<Device> d = otherDevice();
    if (!d) QSKIP("no CUDA device and no emulated GPU");
    QFETCH(QString, op);
    const bool loss = op.contains("loss") || op == "cross_entropy";
    const LossCase cpu = loss ? lossCase(op, kCPU) : LossCase{scalarOp(op, -3.0), kScalarX, {4}, {4}};
    const LossCase dev = loss ? lossCase(op, *d) : cpu;
    std::vector<float> w(static_cast<std::size_t>(numelOf(cpu.outShape)));
    for (std::size_t i = 0; i < w.size(); ++i) w[i] = static_cast<float>(i + 1);
    auto [cpuOut, cpuGrad] = valueAndGrad(cpu.fn, cpu.values, cpu.shape, w);
    auto [devOut, devGrad] = valueAndGrad(dev.fn, dev.values, dev.shape, w, *d);
    GPULAB_COMPARE_TENSORS(devOut, cpuOut, 1e-4, 1e-4);
    GPULAB_COMPARE_TENSORS(devGrad, cpuGrad, 1e-4, 1e-4);
  }

  void argOverAllElementsOnTheOtherDevice() {
    const std::optional<Device> d = otherDevice();
    if (!d) QSKIP("no CUDA device and no emulated GPU");
    Tensor a = tensor({1.0f, 3.0f, 3.0f, -2.0f, 3.0f, -2.0f}, {2, 3}).to(*d);
    Tensor mx = a.argmax(), mn = a.t().argmin();
    QCOMPARE(mx.device(), *d);
    QCOMPARE(mx.sizes(), Shape{});
    QCOMPARE(mx.cpu().toVector<std::int64_t>(), std::vector<std::int64_t>{1});
    QCOMPARE(mn.cpu().toVector<std::int64_t>(), std::vector<std::int64_t>{1});
    // A 0-dim CPU tensor may join a CUDA op; 2 / x stays on x's device.
    QCOMPARE((2.0 / a).device(), *d);
  }

 private:
  static std::int64_t numelOf(const Shape& shape) {
    std::int64_t n = 1;
    for (std::int64_t s : shape) n *= s;
    return n;
  }
  struct LossCase {
    Fn fn;
    std::vector<float> values;
    Shape shape, outShape;
  };
  // The loss with its inputs; the targets live on `dev`.
  static LossCase lossCase(const QString& loss, Device dev = kCPU) {
    if (loss == "mse_loss") return {[dev](const Tensor& x) { return mse_loss(x, pointTarget().to(dev), Reduction::None); }, kPointX, {2, 3}, {2, 3}};
    if (loss == "l1_loss") return {[dev](const Tensor& x) { return l1_loss(x, pointTarget().to(dev), Reduction::None); }, kPointX, {2, 3}, {2, 3}};
    if (loss == "cross_entropy") return {[dev](const Tensor& x) { return cross_entropy(x, labelTensor().to(dev), Reduction::None); }, kLogits, {4, 3}, {4}};
    return {[dev](const Tensor& x) { return nll_loss(x, labelTensor().to(dev), Reduction::None); }, kLogits, {4, 3}, {4}};
  }
  static Fn scalarOp(const QString& op, double s) {
    if (op == "div") return [s](const Tensor& x) { return s / x; };
    if (op == "sub") return [s](const Tensor& x) { return s - x; };
    if (op == "mul") return [s](const Tensor& x) { return s * x; };
    return [s](const Tensor& x) { return s + x; };
  }
};

QTEST_GUILESS_MAIN(TestVocabulary)
#include "test_vocabulary.moc"
