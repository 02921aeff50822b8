// nn::Conv2d, nn::MaxPool2d, nn::AvgPool2d, nn::AdaptiveAvgPool2d: PyTorch's printed form, parameter
// count and shapes for a small CNN (the numbers are PyTorch 1.13's for the same model), the default
// initialisation's bounds, constructor errors, modules equal to their functional form, and a few SGD
// steps of a CNN lowering its loss (the backward of every layer reaching the optimizer).
#include <cmath>
#include <limits>
#include <optional>

#include "engine/ops/autocast.h"
#include "engine/core/errors.h"
#include "engine/nn/layers.h"
#include "engine/optim/optimizer.h"
#include "test_util.h"

using namespace gpulab;

namespace {

using Modules = std::initializer_list<std::shared_ptr<nn::Module>>;

// torch.nn.Sequential(Conv2d(1, 8, 3, padding=1), ReLU(), MaxPool2d(2),
//   Conv2d(8, 16, (3, 5), stride=(1, 2), padding=(1, 2), groups=2, bias=False), ReLU(), AvgPool2d(2),
//   Conv2d(16, 16, 3, padding=2, dilation=2, groups=16), AdaptiveAvgPool2d((1, 1)), Flatten(), Linear(16, 10))
std::shared_ptr<nn::Sequential> smallCnn(Generator& gen) {
  return std::make_shared<nn::Sequential>(Modules{
      std::make_shared<nn::Conv2d>(1, 8, 3, 1, 1, 1, 1, true, gen), std::make_shared<nn::ReLU>(),
      std::make_shared<nn::MaxPool2d>(2),
      std::make_shared<nn::Conv2d>(8, 16, Size2{3, 5}, Size2{1, 2}, Size2{1, 2}, 1, 2, false, gen),
      std::make_shared<nn::ReLU>(), std::make_shared<nn::AvgPool2d>(2),
      std::make_shared<nn::Conv2d>(16, 16, 3, 1, 2, 2, 16, true, gen), std::make_shared<nn::AdaptiveAvgPool2d>(Size2{1, 1}),
      std::make_shared<nn::Flatten>(), std::make_shared<nn::Linear>(16, 10, true, gen)});
}

}  // namespace

class TestConvModules : public QObject {
  Q_OBJECT

 private slots:
  // Which element max_pool2d picks, from PyTorch 1.13 (F.max_pool2d(x, 2[, stride=1], return_indices=True)):
  // the first of equal maxima (strict >), and a NaN over any number, a later NaN over an earlier one.
  // Kernel 2 stride 2 runs the CPU backend's 2 x 2 fast path, stride 1 the general loop: both must agree.
  // nn.Conv2d(padding='same' / 'valid'): PyTorch's repr, its error for a strided 'same', the output
  // size, and F.conv2d's error for a padding string it does not know.
  void paddingSameAndValid() {
    Generator gen(0);
    nn::Conv2d same(2, 3, 3, 1, ConvPadding::Same, 1, 1, true, gen), valid(2, 3, 3, 1, ConvPadding::Valid, 1, 1, true, gen);
    QCOMPARE(QString::fromStdString(same.repr()), QString("Conv2d(2, 3, kernel_size=(3, 3), stride=(1, 1), padding=same)"));
    QCOMPARE(QString::fromStdString(valid.repr()), QString("Conv2d(2, 3, kernel_size=(3, 3), stride=(1, 1), padding=valid)"));
    const Tensor x = randn({1, 2, 5, 6}, gen);
    QCOMPARE(same(x).sizes(), (Shape{1, 3, 5, 6}));
    QCOMPARE(valid(x).sizes(), (Shape{1, 3, 3, 4}));
    try {
      nn::Conv2d strided(2, 3, 3, 2, ConvPadding::Same, 1, 1, true, gen);
      QFAIL("a strided 'same' convolution was accepted");
    } catch (const ValueError& e) {
      QCOMPARE(std::string(e.what()), std::string("padding='same' is not supported for strided convolutions"));
    }
    try {
      (void)parseConvPadding("full");
      QFAIL("'full' was accepted");
    } catch (const Error& e) {
      QCOMPARE(std::string(e.what()), std::string("Invalid padding string: 'full'"));  // F.conv2d(x, w, padding='full')
    }
  }

  void maxPoolTiesAndNaNsFollowPyTorch_data() {
    QTest::addColumn<int>("dtype");
    for (DType d : {kFloat32, kFloat64, kFloat16, kBFloat16}) QTest::newRow(dtypeName(d).c_str()) << static_cast<int>(d);
  }
  void maxPoolTiesAndNaNsFollowPyTorch() {
    QFETCH(int, dtype);
    const DType d = static_cast<DType>(dtype);
    const float nan = std::numeric_limits<float>::quiet_NaN();
    auto indices = [&](std::vector<float> values, OptionalSize2 stride) {
      const Tensor x = tensor(values, {1, 1, 2, 4}).to(d);
      return max_pool2d_with_indices(x, 2, stride).second.toVector<std::int64_t>();
    };
    using V = std::vector<std::int64_t>;
    QCOMPARE(indices({1, 3, 2, 2, 3, 0, 7, 7}, {}), (V{1, 6}));
    QCOMPARE(indices({1, 3, 2, 2, 3, 0, 7, 7}, Size2(1)), (V{1, 6, 6}));
    QCOMPARE(indices({nan, 5, 1, nan, nan, 1, nan, 2}, {}), (V{4, 6}));
    QCOMPARE(indices({nan, 5, 1, nan, nan, 1, nan, 2}, Size2(1)), (V{4, 6, 6}));
    const Tensor values = max_pool2d(tensor({1, nan, 5, 2, 3, 2, 4, 1}, {1, 1, 2, 4}).to(d), 2);
    const auto v = values.to(kFloat64).toVector<double>();
    QVERIFY(std::isnan(v[0]));
    QCOMPARE(v[1], 5.0);
  }

  void smallCnnIsPyTorchs() {
    Generator gen(0);
    auto model = smallCnn(gen);
    QCOMPARE(model->parameter_count(), 1370);  // sum(p.numel() for p in model.parameters()) in PyTorch
    QCOMPARE(QString::fromStdString(model->repr()),
             QString("Sequential(\n"
                     "  (0): Conv2d(1, 8, kernel_size=(3, 3), stride=(1, 1), padding=(1, 1))\n"
                     "  (1): ReLU()\n"
                     "  (2): MaxPool2d(kernel_size=2, stride=2, padding=0, dilation=1, ceil_mode=False)\n"
                     "  (3): Conv2d(8, 16, kernel_size=(3, 5), stride=(1, 2), padding=(1, 2), groups=2, bias=False)\n"
                     "  (4): ReLU()\n"
                     "  (5): AvgPool2d(kernel_size=2, stride=2, padding=0)\n"
                     "  (6): Conv2d(16, 16, kernel_size=(3, 3), stride=(1, 1), padding=(2, 2), dilation=(2, 2), groups=16)\n"
                     "  (7): AdaptiveAvgPool2d(output_size=(1, 1))\n"
                     "  (8): Flatten(start_dim=1, end_dim=-1)\n"
                     "  (9): Linear(in_features=16, out_features=10, bias=True)\n"
                     ")"));
    QStringList names;
    for (auto& [n, p] : model->named_parameters()) names << QString::fromStdString(n);
    QCOMPARE(names, (QStringList{"0.weight", "0.bias", "3.weight", "6.weight", "6.bias", "9.weight", "9.bias"}));
    // Every layer's output shape, as PyTorch prints them for a (4, 1, 28, 28) batch.
    const std::vector<Shape> expected{{4, 8, 28, 28}, {4, 8, 28, 28}, {4, 8, 14, 14}, {4, 16, 14, 7}, {4, 16, 14, 7},
                                      {4, 16, 7, 3},  {4, 16, 7, 3},  {4, 16, 1, 1},  {4, 16},        {4, 10}};
    Tensor h = randn({4, 1, 28, 28}, gen);
    std::size_t i = 0;
    for (const auto& [n, layer] : model->named_children()) {
      h = (*layer)(h);
      QCOMPARE(h.sizes(), expected[i++]);
    }
    QCOMPARE((*model)(randn({1, 28, 28}, gen).unsqueeze(0)).sizes(), (Shape{1, 10}));
  }

  void poolsPrintWhatTheyWereGiven() {
    QCOMPARE(nn::MaxPool2d(3, 2, 1, 1, true).describe(), std::string("MaxPool2d(kernel_size=3, stride=2, padding=1, dilation=1, ceil_mode=True)"));
    QCOMPARE(nn::MaxPool2d(Size2{2, 2}).describe(), std::string("MaxPool2d(kernel_size=(2, 2), stride=(2, 2), padding=0, dilation=1, ceil_mode=False)"));
    QCOMPARE(nn::AvgPool2d(3, 2, 1, true, false).describe(), std::string("AvgPool2d(kernel_size=3, stride=2, padding=1)"));
    QCOMPARE(nn::AdaptiveAvgPool2d(5).describe(), std::string("AdaptiveAvgPool2d(output_size=5)"));
    QCOMPARE(nn::AdaptiveAvgPool2d(Size2{1, 1}).describe(), std::string("AdaptiveAvgPool2d(output_size=(1, 1))"));
  }

  // kaiming_uniform(a=sqrt(5)) gives U(-1/sqrt(fan_in), 1/sqrt(fan_in)) with fan_in = in/groups * kH * kW;
  // the bias has the same bound.
  void defaultInitialisationIsPyTorchs_data() {
    QTest::addColumn<int>("in");
    QTest::addColumn<int>("out");
    QTest::addColumn<int>("kh");
    QTest::addColumn<int>("kw");
    QTest::addColumn<int>("groups");
    QTest::newRow("3x3") << 16 << 64 << 3 << 3 << 1;
    QTest::newRow("1x1") << 64 << 128 << 1 << 1 << 1;
    QTest::newRow("non-square") << 8 << 64 << 3 << 5 << 1;
    QTest::newRow("groups 4") << 32 << 64 << 3 << 3 << 4;
    QTest::newRow("depthwise") << 64 << 64 << 3 << 3 << 64;
  }
  void defaultInitialisationIsPyTorchs() {
    QFETCH(int, in);
    QFETCH(int, out);
    QFETCH(int, kh);
    QFETCH(int, kw);
    QFETCH(int, groups);
    Generator gen(1);
    nn::Conv2d conv(in, out, Size2{kh, kw}, 1, 0, 1, groups, true, gen);
    QCOMPARE(conv.weight.sizes(), (Shape{out, in / groups, kh, kw}));
    QCOMPARE(conv.bias.sizes(), (Shape{out}));
    QVERIFY(conv.weight.requires_grad() && conv.bias.requires_grad());
    const double bound = 1.0 / std::sqrt(static_cast<double>(in / groups * kh * kw));
    QVERIFY(conv.weight.abs().max().item() <= bound);
    QVERIFY(conv.weight.abs().max().item() > 0.9 * bound);  // the bound is the right one, not a smaller one
    QVERIFY(conv.bias.abs().max().item() <= bound);
    QVERIFY(conv.bias.abs().max().item() > 0.5 * bound);
    QCOMPARE(conv.parameter_count(), static_cast<std::int64_t>(out) * (in / groups) * kh * kw + out);
  }

  void constructorErrorsArePyTorchs() {
    auto message = [](auto make) {
      try {
        make();
      } catch (const ValueError& e) {
        return std::string(e.what());
      }
      return std::string("no error");
    };
    QCOMPARE(message([] { nn::Conv2d(3, 8, 3, 1, 0, 1, 2); }), std::string("in_channels must be divisible by groups"));
    QCOMPARE(message([] { nn::Conv2d(4, 6, 3, 1, 0, 1, 4); }), std::string("out_channels must be divisible by groups"));
    QCOMPARE(message([] { nn::Conv2d(4, 8, 3, 1, 0, 1, 0); }), std::string("groups must be a positive integer"));
    QVERIFY_THROWS_EXCEPTION(ValueError, nn::Conv2d(0, 8, 3));
  }

  void modulesEqualTheirFunctionalForm() {
    Generator gen(2);
    const Tensor x = randn({2, 4, 9, 9}, gen);
    nn::Conv2d conv(4, 6, Size2{3, 2}, 2, Size2{1, 0}, Size2{1, 2}, 2, true, gen);
    auto same = [](const Tensor& a, const Tensor& b) { return a.sizes() == b.sizes() && (a - b).abs().max().item() == 0.0; };
    QVERIFY(same(conv(x), conv2d(x, conv.weight, conv.bias, 2, Size2{1, 0}, Size2{1, 2}, 2)));
    QVERIFY(same(nn::MaxPool2d(3, 2, 1)(x), max_pool2d(x, 3, 2, 1)));
    QVERIFY(same(nn::AvgPool2d(3, 2, 1, true, false)(x), avg_pool2d(x, 3, 2, 1, true, false)));
    QVERIFY(same(nn::AdaptiveAvgPool2d(Size2{2, 3})(x), adaptive_avg_pool2d(x, Size2{2, 3})));
    // The global average pool is the mean over each plane.
    QVERIFY((adaptive_avg_pool2d(x, 1).flatten(1) - x.flatten(2).mean(2)).abs().max().item() < 1e-6);
  }

  // conv2d is on autocast's lower-precision list (as linear): inside a bfloat16 CPU region it computes in
  // bfloat16, and the float32 weights still receive float32 gradients (the cast is recorded).
  void conv2dRunsInTheAutocastDtype() {
    Generator gen(4);
    nn::Conv2d conv(3, 4, 3, 1, 1, 1, 1, true, gen);
    const Tensor x = randn({2, 3, 5, 5}, gen);
    Tensor out;
    {
      amp::AutocastGuard autocast(DeviceType::CPU, kBFloat16);
      out = conv(x);
      QCOMPARE(out.dtype(), kBFloat16);
      QCOMPARE(max_pool2d(out, 2).dtype(), kBFloat16);  // pools are not on the list: they keep their input's dtype
    }
    const Tensor reference = conv(x);
    QVERIFY((out.to(kFloat32) - reference).abs().max().item() < 0.05);
    out.to(kFloat32).sum().backward();
    QCOMPARE(conv.weight.grad().dtype(), kFloat32);
    QCOMPARE(conv.bias.grad().dtype(), kFloat32);
    QCOMPARE(conv.bias.grad().toVector<float>(), std::vector<float>(4, 50.0f));  // d sum / d bias = N * OH * OW
  }

  // A CNN learns: 30 SGD steps on one fixed batch lower its cross-entropy well below the start.
  void aCnnTrains() {
    Generator gen(3);
    auto model = std::make_shared<nn::Sequential>(Modules{
        std::make_shared<nn::Conv2d>(1, 8, 3, 1, 1, 1, 1, true, gen), std::make_shared<nn::ReLU>(),
        std::make_shared<nn::MaxPool2d>(2), std::make_shared<nn::Conv2d>(8, 8, 3, 1, 1, 1, 2, true, gen),
        std::make_shared<nn::ReLU>(), std::make_shared<nn::AvgPool2d>(2), std::make_shared<nn::Flatten>(),
        std::make_shared<nn::Linear>(8 * 3 * 3, 8, true, gen)});
    const Tensor x = randn({8, 1, 12, 12}, gen);
    const Tensor y = tensor(std::vector<std::int64_t>{0, 1, 2, 3, 4, 5, 6, 7}, {8});
    optim::SGD opt(model->parameters(), {.lr = 0.1, .momentum = 0.9});
    double first = 0, last = 0;
    for (int step = 0; step < 30; ++step) {
      opt.zero_grad();
      Tensor loss = cross_entropy((*model)(x), y);
      loss.backward();
      opt.step();
      (step == 0 ? first : last) = loss.item();
    }
    QVERIFY2(last < 0.5 * first, qPrintable(QString("loss %1 -> %2").arg(first).arg(last)));
  }
};

QTEST_GUILESS_MAIN(TestConvModules)
#include "test_conv_modules.moc"
