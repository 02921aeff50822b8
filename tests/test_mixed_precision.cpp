// Mixed precision in the engine: dtype conversions and promotion (torch.result_type), gradients
// through casts, and autocast's op policy, cast cache and per-thread state. The bit-level agreement of
// float16/bfloat16 results with PyTorch is tests/test_dtype_parity.cpp; GradScaler is
// tests/test_grad_scaler.cpp.
#include <thread>

#include "engine/ops/autocast.h"
#include "engine/core/errors.h"
#include "engine/core/half.h"
#include "engine/kernels/cpu_convert.h"
#include "engine/nn/layers.h"
#include "engine/optim/optimizer.h"
#include "engine/runtime/execution_context.h"
#include "engine/runtime/emulated_gpu.h"
#include "test_util.h"

using namespace gpulab;

namespace {

std::uint16_t halfBits(const Tensor& t) { return t.contiguous().cpu().data<Half>()[0].bits; }

// A device whose autocast is CUDA's: the real GPU, or else the emulated one.
std::optional<Device> cudaTypeDevice() {
  if (cuda::isAvailable()) return Device(DeviceType::CUDA, 0);
  return cuda::emulatedDevice();
}

Tensor inputOf(const QString& dtype, Device device, const Shape& shape = {4, 8}) {
  Generator g(3);
  Tensor x = randn(shape, g);
  if (dtype != "float32") x = x.to(parseDType(dtype.toStdString()));
  return x.to(device);
}

}  // namespace

class TestMixedPrecision : public QObject {
  Q_OBJECT

 private slots:
  void conversionsRoundToNearestEven() {
    // 1 + 2^-11 lies halfway between float16's 1 and 1 + 2^-10: ties go to the even mantissa (1).
    QCOMPARE(halfBits(tensor({1.0f + 0x1p-11f}, {1}).half()), std::uint16_t(0x3C00));
    // 1 + 3 * 2^-11 lies halfway between 1 + 2^-10 (odd) and 1 + 2^-9 (even): rounds up.
    QCOMPARE(halfBits(tensor({1.0f + 3 * 0x1p-11f}, {1}).half()), std::uint16_t(0x3C02));
    QCOMPARE(halfBits(tensor({65504.0f}, {1}).half()), std::uint16_t(0x7BFF));  // the largest finite
    QCOMPARE(halfBits(tensor({65520.0f}, {1}).half()), std::uint16_t(0x7C00));  // rounds to inf
    QCOMPARE(halfBits(tensor({0x1p-24f}, {1}).half()), std::uint16_t(0x0001));  // the smallest subnormal
    QCOMPARE(halfBits(tensor({0x1p-26f}, {1}).half()), std::uint16_t(0x0000));  // underflows to zero
    // bfloat16 keeps float32's range: 1e-30 survives, where float16 flushes it to zero.
    QVERIFY(tensor({1e-30f}, {1}).bfloat16().item() > 0.0);
    QCOMPARE(tensor({1e-30f}, {1}).half().item(), 0.0);
    QCOMPARE(tensor({3.0f}, {1}).to(kFloat64).item(), 3.0);
    QCOMPARE(elementSize(kFloat16), std::size_t(2));
    QCOMPARE(tensor({1.5f, -2.0f}, {2}).half().nbytes(), std::size_t(4));
  }

  // The bulk conversions (F16C on x86 CPUs that have it) give the portable rounding's bits: every
  // float16 value widened, and float32 values of every exponent, ties included, narrowed.
  void bulkConversionsEqualThePortableRounding() {
    std::vector<Half> all(65536);
    for (std::uint32_t b = 0; b < 65536; ++b) all[b] = Half::fromBits(static_cast<std::uint16_t>(b));
    std::vector<float> widened(all.size());
    cpu::halfToFloat(all.data(), widened.data(), static_cast<std::int64_t>(all.size()));
    for (std::uint32_t b = 0; b < 65536; ++b) {
      const float expected = halfbits::toFloat16(static_cast<std::uint16_t>(b));
      if (std::isnan(expected)) QVERIFY(std::isnan(widened[b]));
      else QCOMPARE(halfbits::floatBits(widened[b]), halfbits::floatBits(expected));
    }
    std::vector<float> floats;
    Generator g(5);
    for (float v : randn({100000}, g).toVector<float>()) floats.push_back(v * 1e4f);
    for (std::uint32_t e = 90; e < 160; ++e)      // exponents from below float16's subnormals to past 65504
      for (std::uint32_t m : {0u, 0x1000u, 0x2000u, 0x3000u, 0x7FFFFFu, 0x401000u})  // ties at 13 dropped bits
        floats.push_back(halfbits::bitsFloat((e << 23) | m));
    std::vector<Half> narrowed(floats.size());
    cpu::floatToHalf(floats.data(), narrowed.data(), static_cast<std::int64_t>(floats.size()));
    for (std::size_t i = 0; i < floats.size(); ++i)
      QCOMPARE(narrowed[i].bits, halfbits::fromFloat16(floats[i]));
  }

  void resultTypeFollowsPyTorch_data() {
    QTest::addColumn<QString>("a");
    QTest::addColumn<bool>("aScalar");
    QTest::addColumn<QString>("b");
    QTest::addColumn<bool>("bScalar");
    QTest::addColumn<QString>("expected");
    QTest::newRow("half+float") << "float16" << false << "float32" << false << "float32";
    QTest::newRow("bf16+half") << "bfloat16" << false << "float16" << false << "float32";
    QTest::newRow("double+float") << "float64" << false << "float32" << false << "float64";
    QTest::newRow("long+half") << "int64" << false << "float16" << false << "float16";
    QTest::newRow("half+0-dim float") << "float16" << false << "float32" << true << "float16";
    QTest::newRow("long+0-dim double") << "int64" << false << "float64" << true << "float64";
    QTest::newRow("0-dim half+0-dim float") << "float16" << true << "float32" << true << "float32";
  }
  void resultTypeFollowsPyTorch() {
    QFETCH(QString, a);
    QFETCH(bool, aScalar);
    QFETCH(QString, b);
    QFETCH(bool, bScalar);
    QFETCH(QString, expected);
    auto make = [](const QString& dtype, bool scalar) {
      return (scalar ? ones({}) : ones({3})).to(parseDType(dtype.toStdString()));
    };
    const Tensor x = make(a, aScalar), y = make(b, bScalar);
    QCOMPARE(QString::fromStdString(dtypeName(result_type(x, y))), expected);
    QCOMPARE(QString::fromStdString(dtypeName((x + y).dtype())), expected);  // the op computes in it
  }

  void gradientFlowsBackThroughCasts() {
    Tensor x = tensor({1.0f, -2.0f, 3.0f}, {3}, {.requires_grad = true});
    Tensor y = (x.half() * 2.0).sum();
    QCOMPARE(y.dtype(), kFloat16);
    y.backward();
    QCOMPARE(x.grad().dtype(), kFloat32);  // the gradient is cast back to the leaf's dtype
    QCOMPARE(x.grad().toVector<float>(), (std::vector<float>{2.0f, 2.0f, 2.0f}));
  }

  void mismatchedMatmulDtypesAreRefused() {
    try {
      (void)matmul(ones({2, 2}), ones({2, 2}).half());
      QFAIL("expected an error");
    } catch (const Error& e) {
      QCOMPARE(QString(e.what()), QString("expected mat1 and mat2 to have the same dtype, but got: float != c10::Half"));
    }
    QVERIFY_THROWS_EXCEPTION(NotImplementedError, (void)softmax(ones({2}, {.dtype = kInt64}), 0));
  }

  // The op -> dtype table: CPU rows as printed by tests/autocast/cpu_policy.py from PyTorch 1.13,
  // CUDA rows from PyTorch's documented CUDA lists.
  void autocastPolicyMatchesPyTorch_data() {
    QTest::addColumn<QString>("device");
    QTest::addColumn<QString>("op");
    QTest::addColumn<QString>("input");
    QTest::addColumn<QString>("region");
    QTest::addColumn<QString>("expected");
    for (const char* region : {"bfloat16"}) {
      QTest::newRow("cpu matmul") << "cpu" << "matmul" << "float32" << region << "bfloat16";
      QTest::newRow("cpu linear") << "cpu" << "linear" << "float32" << region << "bfloat16";
      QTest::newRow("cpu softmax f32") << "cpu" << "softmax" << "float32" << region << "float32";
      QTest::newRow("cpu softmax bf16") << "cpu" << "softmax" << "bfloat16" << region << "bfloat16";
      QTest::newRow("cpu log_softmax bf16") << "cpu" << "log_softmax" << "bfloat16" << region << "bfloat16";
      QTest::newRow("cpu exp bf16") << "cpu" << "exp" << "bfloat16" << region << "bfloat16";
      QTest::newRow("cpu pow bf16") << "cpu" << "pow" << "bfloat16" << region << "bfloat16";
      QTest::newRow("cpu sum bf16") << "cpu" << "sum" << "bfloat16" << region << "bfloat16";
      QTest::newRow("cpu mse_loss bf16") << "cpu" << "mse_loss" << "bfloat16" << region << "float32";
      QTest::newRow("cpu l1_loss bf16") << "cpu" << "l1_loss" << "bfloat16" << region << "float32";
      QTest::newRow("cpu cross_entropy bf16") << "cpu" << "cross_entropy" << "bfloat16" << region << "float32";
      QTest::newRow("cpu nll_loss bf16") << "cpu" << "nll_loss" << "bfloat16" << region << "float32";
      QTest::newRow("cpu relu bf16") << "cpu" << "relu" << "bfloat16" << region << "bfloat16";
      QTest::newRow("cpu matmul f64") << "cpu" << "matmul" << "float64" << region << "float64";
    }
    for (const char* region : {"float16", "bfloat16"}) {
      const QString r(region);
      QTest::newRow(qPrintable("cuda matmul " + r)) << "cuda" << "matmul" << "float32" << r << r;
      QTest::newRow(qPrintable("cuda linear " + r)) << "cuda" << "linear" << "float32" << r << r;
      QTest::newRow(qPrintable("cuda softmax " + r)) << "cuda" << "softmax" << r << r << "float32";
      QTest::newRow(qPrintable("cuda log_softmax " + r)) << "cuda" << "log_softmax" << r << r << "float32";
      QTest::newRow(qPrintable("cuda exp " + r)) << "cuda" << "exp" << r << r << "float32";
      QTest::newRow(qPrintable("cuda log " + r)) << "cuda" << "log" << r << r << "float32";
      QTest::newRow(qPrintable("cuda pow " + r)) << "cuda" << "pow" << r << r << "float32";
      QTest::newRow(qPrintable("cuda sum " + r)) << "cuda" << "sum" << r << r << "float32";
      QTest::newRow(qPrintable("cuda mse_loss " + r)) << "cuda" << "mse_loss" << r << r << "float32";
      QTest::newRow(qPrintable("cuda cross_entropy " + r)) << "cuda" << "cross_entropy" << r << r << "float32";
      QTest::newRow(qPrintable("cuda relu " + r)) << "cuda" << "relu" << r << r << r;
      QTest::newRow(qPrintable("cuda tanh " + r)) << "cuda" << "tanh" << r << r << r;
      QTest::newRow(qPrintable("cuda matmul f64 " + r)) << "cuda" << "matmul" << "float64" << r << "float64";
    }
  }
  void autocastPolicyMatchesPyTorch() {
    QFETCH(QString, device);
    QFETCH(QString, op);
    QFETCH(QString, input);
    QFETCH(QString, region);
    QFETCH(QString, expected);
    Device dev = kCPU;
    if (device == "cuda") {
      const auto d = cudaTypeDevice();
      if (!d) QSKIP("no CUDA device and the emulated GPU is off");
      dev = *d;
    }
    const Tensor x = inputOf(input, dev);
    const Tensor sq = inputOf(input, dev, {8, 8});  // a weight for matmul and linear
    const Tensor labels = tensor(std::vector<std::int64_t>{0, 3, 7, 1}, {4}).to(dev);
    amp::AutocastGuard autocast(dev.type(), parseDType(region.toStdString()));
    Tensor out;
    const std::string name = op.toStdString();
    if (name == "matmul") out = matmul(x, sq);
    else if (name == "linear") out = linear(x, sq);
    else if (name == "softmax") out = softmax(x, 1);
    else if (name == "log_softmax") out = log_softmax(x, 1);
    else if (name == "exp") out = exp(x);
    else if (name == "log") out = log(x.abs());
    else if (name == "pow") out = pow(x, 2.0);
    else if (name == "sum") out = sum(x);
    else if (name == "mse_loss") out = mse_loss(x, x);
    else if (name == "l1_loss") out = l1_loss(x, x);
    else if (name == "cross_entropy") out = cross_entropy(x, labels);
    else if (name == "nll_loss") out = nll_loss(x, labels);
    else if (name == "relu") out = relu(x);
    else if (name == "tanh") out = tanh(x);
    else QFAIL("unknown op in the table");
    QCOMPARE(QString::fromStdString(dtypeName(out.dtype())), expected);
  }

  void autocastCastsEachWeightOncePerRegion() {
    nn::Linear layer(8, 4);
    const Tensor x = randn({2, 8});
    Tensor firstCast, again, nextRegion;
    {
      amp::AutocastGuard autocast(DeviceType::CPU, kBFloat16);
      firstCast = amp::autocast("linear", layer.weight);
      again = amp::autocast("linear", layer.weight);
      Tensor input = x, weight = layer.weight, bias = layer.bias;
      amp::autocast("linear", {&input, &weight, &bias});
      QVERIFY(weight.sameAs(firstCast));                                   // all three forms share the cache
      QCOMPARE(bias.dtype(), kBFloat16);
      QVERIFY(!input.sameAs(amp::autocast("linear", x)));                  // activations are not cached
    }
    {
      amp::AutocastGuard autocast(DeviceType::CPU, kBFloat16);
      nextRegion = amp::autocast("linear", layer.weight);
    }
    QCOMPARE(firstCast.dtype(), kBFloat16);
    QVERIFY(firstCast.sameAs(again));        // one cast per region...
    QVERIFY(!firstCast.sameAs(nextRegion));  // ...and a fresh one in the next (the weights have changed)
  }

  void autocastStateIsPerThreadAndNests() {
    QVERIFY(!amp::is_autocast_enabled(DeviceType::CPU));
    amp::AutocastGuard outer(DeviceType::CPU, kBFloat16);
    QVERIFY(amp::is_autocast_enabled(DeviceType::CPU));
    QVERIFY(!amp::is_autocast_enabled(DeviceType::CUDA));  // per device type
    bool otherThreadSees = true;
    std::thread([&] { otherThreadSees = amp::is_autocast_enabled(DeviceType::CPU); }).join();
    QVERIFY(!otherThreadSees);
    {
      amp::AutocastGuard off(DeviceType::CPU, kBFloat16, /*enabled=*/false);
      QCOMPARE(matmul(ones({2, 2}), ones({2, 2})).dtype(), kFloat32);
    }
    QCOMPARE(matmul(ones({2, 2}), ones({2, 2})).dtype(), kBFloat16);
    QVERIFY_THROWS_EXCEPTION(ValueError, amp::AutocastGuard(DeviceType::CPU, kFloat32));
  }

  // The execution context is per thread; CudaDeviceGuard sets the device tensor.cuda() moves to.
  void currentCudaDeviceIsPerThreadAndGuarded() {
    QCOMPARE(executionContext().currentCudaDevice, 0);
    {
      CudaDeviceGuard guard(7);
      QCOMPARE(executionContext().currentCudaDevice, 7);
      int seenElsewhere = -1;
      std::thread([&] { seenElsewhere = executionContext().currentCudaDevice; }).join();
      QCOMPARE(seenElsewhere, 0);
      QVERIFY_THROWS_EXCEPTION(Error, (void)ones({1}).cuda());  // no cuda:7 here
    }
    QCOMPARE(executionContext().currentCudaDevice, 0);
    QVERIFY_THROWS_EXCEPTION(ValueError, CudaDeviceGuard(-1));
  }

  // model.half(): the parameters change dtype under the same handles, so an optimizer made before
  // the cast updates the float16 tensors (its state is created in their dtype).
  void moduleHalfCastsParametersInPlace() {
    nn::Linear layer(8, 4);
    optim::SGD sgd(layer.parameters(), {.lr = 0.1});
    layer.half();
    QCOMPARE(layer.weight.dtype(), kFloat16);
    QCOMPARE(layer.bias.dtype(), kFloat16);
    const Tensor x = randn({2, 8}).half();
    Tensor out = layer.forward(x);
    QCOMPARE(out.dtype(), kFloat16);
    const auto before = layer.weight.toVector<float>();
    out.sum().backward();
    QCOMPARE(layer.weight.grad().dtype(), kFloat16);
    sgd.step();
    QCOMPARE(sgd.params()[0].dtype(), kFloat16);
    QVERIFY(layer.weight.toVector<float>() != before);
    layer.to(kFloat32);
    QCOMPARE(layer.weight.dtype(), kFloat32);
  }

  // Under autocast the parameters stay float32 and so do their gradients; the forward's GEMMs ran in
  // bfloat16, so the loss differs from float32's by bfloat16's precision, not more.
  void autocastTrainingKeepsFloat32Parameters() {
    Generator g(11);
    nn::Linear layer(16, 4);
    const Tensor x = randn({32, 16}, g);
    const Tensor y = randint(0, 4, {32}, g, {.dtype = kInt64});
    const double reference = cross_entropy(layer.forward(x), y).item();
    Tensor loss;
    {
      amp::AutocastGuard autocast(DeviceType::CPU, kBFloat16);
      loss = cross_entropy(layer.forward(x), y);
    }
    QCOMPARE(loss.dtype(), kFloat32);
    QVERIFY(std::abs(loss.item() - reference) < 0.02 * std::abs(reference));
    QVERIFY(std::abs(loss.item() - reference) > 0.0);  // it really ran in bfloat16
    loss.backward();
    QCOMPARE(layer.weight.grad().dtype(), kFloat32);
    QCOMPARE(layer.bias.grad().dtype(), kFloat32);
  }
};

QTEST_GUILESS_MAIN(TestMixedPrecision)
#include "test_mixed_precision.moc"
