// The same-device rule: its message (tested on placements, so it runs without a GPU), the 0-dim
// CPU-scalar exception, and -- with a GPU -- the real error for tensor+tensor and model+input.
#include "engine/core/errors.h"
#include "engine/nn/layers.h"
#include "engine/runtime/emulated_gpu.h"
#include "test_util.h"

using namespace gpulab;

namespace {
const Device kCuda0{DeviceType::CUDA, 0};
const Device kCuda1{DeviceType::CUDA, 1};
}  // namespace

class TestDeviceRule : public QObject {
  Q_OBJECT

 private slots:
  void messageNamesBothDevicesTheOpAndTheFix() {
    auto msg = deviceMismatchMessage("add", {{"self", kCuda0, false}, {"other", kCPU, false}});
    QVERIFY(msg.has_value());
    QVERIFY2(msg->starts_with("Expected all tensors to be on the same device, but found at least two devices, cuda:0 and cpu!"), msg->c_str());
    QVERIFY(msg->find("add") != std::string::npos);
    QVERIFY(msg->find("'other' is on cpu") != std::string::npos);
    QVERIFY(msg->find("other = other.to(\"cuda:0\")") != std::string::npos);
  }

  void cudaDeviceIsNamedFirstWhateverTheArgumentOrder() {
    // PyTorch runs the op on the CUDA device and names it first.
    auto msg = deviceMismatchMessage("linear", {{"input", kCPU, false}, {"weight", kCuda0, false}, {"bias", kCuda0, false}});
    QVERIFY(msg.has_value());
    QVERIFY2(msg->find("found at least two devices, cuda:0 and cpu!") != std::string::npos, msg->c_str());
    QVERIFY(msg->find("input = input.to(\"cuda:0\")") != std::string::npos);
  }

  void zeroDimCpuScalarMayJoinACudaOp() {
    QVERIFY(!deviceMismatchMessage("mul", {{"self", kCuda0, false}, {"other", kCPU, true}}).has_value());
    // ... but a 1-element 1-D CPU tensor may not, and neither may a second GPU.
    QVERIFY(deviceMismatchMessage("mul", {{"self", kCuda0, false}, {"other", kCPU, false}}).has_value());
    QVERIFY(deviceMismatchMessage("mul", {{"self", kCuda0, false}, {"other", kCuda1, true}}).has_value());
    QVERIFY(!deviceMismatchMessage("mul", {{"self", kCPU, false}, {"other", kCPU, true}}).has_value());
  }

  void moduleIsNamedInTheMessage() {
    nn::Linear layer(16, 64);
    ModuleContext ctx(layer);
    auto msg = deviceMismatchMessage("linear", {{"input", kCPU, false}, {"weight", kCuda0, false}});
    QVERIFY(msg.has_value());
    QVERIFY2(msg->find("while running module Linear(in_features=16, out_features=64, bias=True)") != std::string::npos, msg->c_str());
  }

  void usingCudaWithoutAGpuSaysWhy() {
    if (test::cudaUsable()) QSKIP("a GPU is usable here");
    // Without a GPU, cuda:0 is the emulated GPU (engine/runtime/emulated_gpu.h) unless it is switched
    // off; the first device after it is not usable.
    const auto emulated = cuda::emulatedDevice();
    const Device missing(DeviceType::CUDA, emulated ? emulated->index() + 1 : 0);
    try {
      zeros({2}).to(missing);
      QFAIL("expected an error");
    } catch (const Error& e) {
      const std::string what = e.what();
      QVERIFY2(what.find("Cannot use device " + missing.str() + ": no usable GPU: ") != std::string::npos, e.what());
      QVERIFY(what.find(cuda::availability().reason) != std::string::npos);
      if (emulated) QVERIFY2(what.ends_with("(the emulated GPU is " + emulated->str() + ")"), e.what());
    }
  }

  void tensorPlusTensorOnTwoDevicesThrows() {
    if (!test::cudaUsable()) QSKIP("no CUDA device");
    Tensor cpu = ones({3, 4});
    Tensor gpu = ones({3, 4}).cuda();
    try {
      (void)(gpu + cpu);
      QFAIL("expected DeviceMismatchError");
    } catch (const DeviceMismatchError& e) {
      QVERIFY2(std::string(e.what()).starts_with(
                   "Expected all tensors to be on the same device, but found at least two devices, cuda:0 and cpu!"), e.what());
    }
    QVERIFY_THROWS_EXCEPTION(DeviceMismatchError, matmul(cpu, gpu.t()));
    // The fix works, and a 0-dim CPU scalar is allowed.
    QCOMPARE((gpu + cpu.to(gpu.device())).sum().item(), 24.0);
    QCOMPARE((gpu * scalar_tensor(2.0)).sum().item(), 24.0);
  }

  // Every op that admits the 0-dim CPU scalar must bring it to the GPU before a kernel reads it, on
  // either side of the op (issue 9, item 2: mse_loss/l1_loss read a pointer on the wrong side).
  void everyOpThatAdmitsACpuScalarComputesWithIt() {
    if (!test::cudaUsable()) QSKIP("no CUDA device");
    const Tensor s = scalar_tensor(3.0);                    // 0-dim, CPU
    const Tensor g = full({}, 2.0, {.device = kCuda0});     // 0-dim, GPU
    const Tensor v = full({4}, 2.0, {.device = kCuda0});    // 1-D, GPU
    QCOMPARE((v + s).sum().item(), 20.0);
    QCOMPARE((s - v).sum().item(), 4.0);
    QCOMPARE((v * s).sum().item(), 24.0);
    QCOMPARE((s / g).item(), 1.5);
    QCOMPARE(maximum(s, v).sum().item(), 12.0);
    QCOMPARE(mse_loss(g, s).item(), 1.0);
    QCOMPARE(mse_loss(s, g).item(), 1.0);
    QCOMPARE(l1_loss(g, s).item(), 1.0);
    QCOMPARE(l1_loss(s, g).item(), 1.0);
    QCOMPARE(mse_loss(s, g).device(), kCuda0);
    // Gradients go back to each operand's own device.
    Tensor a = full({}, 2.0, {.device = kCuda0, .requires_grad = true});
    Tensor b = full({}, 3.0, {.requires_grad = true});
    mse_loss(a, b).backward();
    QCOMPARE(a.grad().device(), kCuda0);
    QCOMPARE(b.grad().device(), kCPU);
    QCOMPARE(a.grad().item(), -2.0);
    QCOMPARE(b.grad().item(), 2.0);
    nn::Linear layer(4, 2);
    layer.to(kCuda0);
    // linear admits the scalar under the device rule, then refuses its shape before touching it.
    QVERIFY_THROWS_EXCEPTION(ValueError, linear(v.reshape({1, 4}), layer.weight, s));
  }

  void modelOnGpuWithCpuInputThrows() {
    if (!test::cudaUsable()) QSKIP("no CUDA device");
    auto model = std::make_shared<nn::Sequential>(std::initializer_list<std::shared_ptr<nn::Module>>{
        std::make_shared<nn::Linear>(16, 64), std::make_shared<nn::ReLU>(), std::make_shared<nn::Linear>(64, 1)});
    model->to(kCuda0);
    Tensor x = randn({8, 16});
    try {
      (*model)(x);
      QFAIL("expected DeviceMismatchError");
    } catch (const DeviceMismatchError& e) {
      const std::string what = e.what();
      QVERIFY2(what.find("cuda:0 and cpu!") != std::string::npos, e.what());
      QVERIFY(what.find("Linear(in_features=16, out_features=64, bias=True) inside Sequential") != std::string::npos);
    }
    QCOMPARE((*model)(x.to(kCuda0)).sizes(), (Shape{8, 1}));
  }
};

QTEST_GUILESS_MAIN(TestDeviceRule)
#include "test_device_rule.moc"
