// CPU/CUDA parity: every op of the gradient-check table, forward and backward, run on the CPU (the
// reference) and on cuda:0 from the same inputs; plus the kernels that have no gradient (random
// numbers, optimizer steps, strided copies, int64 reductions). Skipped when no GPU is usable.
//
// Tolerances (float32): absolute 1e-4 + relative 1e-4 for elementwise results; GEMM-based and
// reduction results use 1e-3 because cuBLAS and tree reductions sum in a different order.
#include <limits>

#include "engine/backend/backend.h"
#include "engine/core/errors.h"
#include "engine/memory/memory.h"
#include "engine/optim/optimizer.h"
#include "op_cases.h"
#include "lab_runner.h"
#include "test_util.h"

using namespace gpulab;

class TestCudaParity : public QObject {
  Q_OBJECT

 private slots:
  void opsMatchCpu_data() {
    test::addOpCaseRows();
  }

  void opsMatchCpu() {
    if (!test::cudaUsable()) QSKIP("no CUDA device");
    QFETCH(int, index);
    const test::OpCase c = test::opCases()[static_cast<std::size_t>(index)];
    auto run = [&](Device d) {
      std::vector<Tensor> inputs;
      for (const Tensor& t : test::makeInputs(c)) inputs.push_back(t.to(d).requires_grad_(true));
      std::vector<Tensor> args = inputs;
      for (const Tensor& e : c.extra) args.push_back(e.to(d));
      Tensor out = c.fn(args);
      Generator wg(99);
      (out * randn(out.sizes(), wg).to(d)).sum().backward();
      std::vector<Tensor> results{out.detach().cpu()};
      for (const Tensor& t : inputs) results.push_back(t.grad().cpu());
      return results;
    };
    const auto cpu = run(kCPU);
    const auto gpu = run(test::cudaDevice());
    QCOMPARE(gpu.size(), cpu.size());
    for (std::size_t i = 0; i < cpu.size(); ++i) GPULAB_COMPARE_TENSORS(gpu[i], cpu[i], 1e-3, 1e-3);
  }

  void randomNumbersAreIdenticalOnBothDevices() {
    if (!test::cudaUsable()) QSKIP("no CUDA device");
    Generator a(5), b(5);
    GPULAB_COMPARE_TENSORS(randn({1000}, a, {.device = test::cudaDevice()}), randn({1000}, b), 1e-5, 1e-5);
    GPULAB_COMPARE_TENSORS(rand({1000}, a, {.device = test::cudaDevice()}), rand({1000}, b), 0, 0);
    QCOMPARE(randint(0, 10, {500}, a, {.dtype = kInt64, .device = test::cudaDevice()}).toVector<std::int64_t>(),
             randint(0, 10, {500}, b).toVector<std::int64_t>());
  }

  void optimizerStepsMatch_data() {
    QTest::addColumn<QString>("optimizer");
    QTest::newRow("sgd") << "sgd";
    QTest::newRow("sgd_momentum_nesterov_wd") << "sgd_nesterov";
    QTest::newRow("adam") << "adam";
    QTest::newRow("adamw") << "adamw";
    QTest::newRow("adam_amsgrad") << "adam_amsgrad";
    QTest::newRow("adamw_amsgrad") << "adamw_amsgrad";
  }

  void optimizerStepsMatch() {
    if (!test::cudaUsable()) QSKIP("no CUDA device");
    QFETCH(QString, optimizer);
    auto run = [&](Device d) {
      Generator g(3);
      Tensor p = randn({257}, g).to(d).requires_grad_(true);
      std::unique_ptr<optim::Optimizer> opt;
      if (optimizer == "sgd") opt = std::make_unique<optim::SGD>(std::vector<Tensor>{p}, optim::SGDOptions{.lr = 0.1});
      else if (optimizer == "sgd_nesterov") opt = std::make_unique<optim::SGD>(std::vector<Tensor>{p}, optim::SGDOptions{.lr = 0.1, .momentum = 0.9, .weight_decay = 0.01, .nesterov = true});
      else if (optimizer == "adam") opt = std::make_unique<optim::Adam>(std::vector<Tensor>{p}, optim::AdamOptions{.lr = 0.01, .weight_decay = 0.1});
      else if (optimizer == "adam_amsgrad") opt = std::make_unique<optim::Adam>(std::vector<Tensor>{p}, optim::AdamOptions{.lr = 0.01, .weight_decay = 0.1, .amsgrad = true});
      else if (optimizer == "adamw_amsgrad") opt = std::make_unique<optim::AdamW>(std::vector<Tensor>{p}, optim::AdamOptions{.lr = 0.01, .amsgrad = true});
      else opt = std::make_unique<optim::AdamW>(std::vector<Tensor>{p}, optim::AdamOptions{.lr = 0.01, .weight_decay = 0.1});
      for (int step = 0; step < 5; ++step) {
        opt->zero_grad();
        (p * p * p).sum().backward();
        opt->step();
      }
      return p.detach().cpu();
    };
    GPULAB_COMPARE_TENSORS(run(test::cudaDevice()), run(kCPU), 1e-5, 1e-4);
  }

  void stridedCopiesAndInt64ReductionsMatch() {
    if (!test::cudaUsable()) QSKIP("no CUDA device");
    Generator g(11);
    Tensor x = randn({4, 5, 6}, g);
    Tensor xg = x.cuda();
    GPULAB_COMPARE_TENSORS(xg.transpose(0, 2).contiguous(), x.transpose(0, 2).contiguous(), 0, 0);
    GPULAB_COMPARE_TENSORS(xg.slice(1, 1, 5, 2).contiguous(), x.slice(1, 1, 5, 2).contiguous(), 0, 0);
    Tensor labels = randint(0, 7, {1000}, g);
    QCOMPARE(labels.cuda().sum().item(), labels.sum().item());
    QCOMPARE(xg.argmax(2).toVector<std::int64_t>(), x.argmax(2).toVector<std::int64_t>());
    QCOMPARE(xg.argmax(0).toVector<std::int64_t>(), x.argmax(0).toVector<std::int64_t>());
    Tensor big = randn({100000}, g);
    GPULAB_COMPARE_TENSORS(big.cuda().sum(), big.sum(), 1e-2, 1e-4);
    GPULAB_COMPARE_TENSORS(big.cuda().max(), big.max(), 0, 0);
  }

  // Sums over a long strided axis with few outputs (bias gradients) take a split kernel of their own.
  void tallColumnSumsMatchCpu_data() {
    QTest::addColumn<int>("outer");
    QTest::addColumn<int>("k");
    QTest::addColumn<int>("inner");
    QTest::newRow("4096 rows x 96") << 1 << 4096 << 96;
    QTest::newRow("2048 rows x 4096") << 1 << 2048 << 4096;
    QTest::newRow("3 x 1000 x 40") << 3 << 1000 << 40;
    QTest::newRow("5 x 64 x 33") << 5 << 64 << 33;
  }
  void tallColumnSumsMatchCpu() {
    if (!test::cudaUsable()) QSKIP("no CUDA device");
    QFETCH(int, outer);
    QFETCH(int, k);
    QFETCH(int, inner);
    Generator gen(7);
    Tensor x = randn({outer, k, inner}, gen);
    GPULAB_COMPARE_TENSORS(x.cuda().sum(1).cpu(), x.sum(1), 1e-3, 1e-4);
    Tensor ints = randint(-5, 5, {outer, k, inner}, gen);
    GPULAB_COMPARE_TENSORS(ints.cuda().sum(1).cpu(), ints.sum(1), 0, 0);
  }

  // Pinned, non-blocking batch copies must not race the kernels still reading the previous batch's
  // memory (issue 9, item 1): the loss curve is bitwise the same with pin_memory on and off.
  void pinnedCopiesGiveTheSameLossCurve() {
    if (!test::cudaUsable()) QSKIP("no CUDA device");
    test::RecordingSink pageable, pinned;
    const std::map<std::string, std::string> base{{"device", "cuda:0"}, {"dataset", "regression"}, {"samples", "4096"},
                                                  {"epochs", "3"}, {"log_every", "1"}, {"workers", "2"}};
    auto with = [&](const char* pin) {
      auto s = base;
      s["pin_memory"] = pin;
      return s;
    };
    test::runLab("train", with("false"), pageable);
    test::runLab("train", with("true"), pinned);
    auto losses = [](const test::RecordingSink& s) {
      std::vector<double> out;
      for (const lab::Record& r : s.steps) out.push_back(r.number("loss"));
      return out;
    };
    QCOMPARE(losses(pinned).size(), std::size_t{3 * 64});
    QCOMPARE(losses(pinned), losses(pageable));
  }

  // More rows than gridDim.x can hold (issue 9, item 5): every row is still computed.
  void moreThanTwoToTheThirtyOneRows() {
    if (!test::cudaUsable()) QSKIP("no CUDA device");
    const std::int64_t rows = (std::int64_t{1} << 31) + 5;
    if (mem_get_info(test::cudaDevice()).first < 24LL << 30) QSKIP("needs 24 GiB of free GPU memory");
    Tensor x = ones({rows, 1}, {.device = test::cudaDevice()});
    Tensor s = x.sum(1);
    QVERIFY(std::abs(s.sum().item() / static_cast<double>(rows) - 1.0) < 1e-5);  // a float32 total
    QCOMPARE(s.slice(0, rows - 3, rows).cpu().toVector<float>(), (std::vector<float>{1, 1, 1}));
    s = Tensor();
    Tensor p = softmax(x, 1);  // one column: every row is exactly 1
    QCOMPARE(p.slice(0, rows - 3, rows).cpu().toVector<float>(), (std::vector<float>{1, 1, 1}));
    QVERIFY(std::abs(p.sum().item() / static_cast<double>(rows) - 1.0) < 1e-5);
  }

  // More than 8 dimensions work on the GPU as on the CPU (issue 9, item 8).
  void tenDimensionalTensorsMatchCpu() {
    if (!test::cudaUsable()) QSKIP("no CUDA device");
    Generator gen(11);
    Tensor a = randn(Shape(10, 2), gen), b = randn(Shape(10, 2), gen);
    GPULAB_COMPARE_TENSORS((a.cuda() + b.cuda()).cpu(), a + b, 0, 0);
    GPULAB_COMPARE_TENSORS(a.cuda().transpose(0, 9).contiguous().cpu(), a.transpose(0, 9).contiguous(), 0, 0);
    GPULAB_COMPARE_TENSORS((a.cuda().transpose(0, 9) * b.cuda()).cpu(), a.transpose(0, 9) * b, 0, 0);
    GPULAB_COMPARE_TENSORS(relu(a.cuda()).cpu(), relu(a), 0, 0);
  }

  // Bit-for-bit where the CPU is the reference (issue 9, item 7): no FMA contraction on either side,
  // one conversion function.
  void arangeAndConversionsAreBitExact() {
    if (!test::cudaUsable()) QSKIP("no CUDA device");
    const Device gpu = test::cudaDevice();
    GPULAB_COMPARE_TENSORS(arange(0.0, 100.0, 0.1, {.dtype = kInt64, .device = gpu}).cpu(), arange(0.0, 100.0, 0.1, {.dtype = kInt64}), 0, 0);
    GPULAB_COMPARE_TENSORS(arange(-3.0, 7.0, 0.013, {.device = gpu}).cpu(), arange(-3.0, 7.0, 0.013), 0, 0);
    const float nan = std::numeric_limits<float>::quiet_NaN();
    Tensor f = tensor({nan, 1e30f, -2.7f, 2.7f}, {4});
    QCOMPARE(f.cuda().to(kInt64).cpu().toVector<std::int64_t>(), f.to(kInt64).toVector<std::int64_t>());
    Generator g1(4), g2(4);
    GPULAB_COMPARE_TENSORS(rand({4096}, g1, {.device = gpu}).cpu(), rand({4096}, g2), 0, 0);
  }

  // Large whole-tensor reductions and losses are split over many blocks, then summed.
  void largeReductionsAndLossesMatchCpu() {
    if (!test::cudaUsable()) QSKIP("no CUDA device");
    Generator gen(12);
    Tensor a = randn({700001}, gen), b = randn({700001}, gen);
    GPULAB_COMPARE_TENSORS(mse_loss(a.cuda(), b.cuda()).cpu(), mse_loss(a, b), 1e-5, 1e-4);
    GPULAB_COMPARE_TENSORS(l1_loss(a.cuda(), b.cuda(), Reduction::Sum).cpu(), l1_loss(a, b, Reduction::Sum), 1e-2, 1e-4);
    GPULAB_COMPARE_TENSORS(a.cuda().sum().cpu(), a.sum(), 1e-2, 1e-4);
    Tensor rows = a.slice(0, 0, 700000).reshape({7, 100000});  // 7 long rows: split, then reduced again
    auto [gv, gi] = max(rows.cuda(), 1);
    auto [cv, ci] = max(rows, 1);
    GPULAB_COMPARE_TENSORS(gv.cpu(), cv, 0, 0);
    QCOMPARE(gi.cpu().toVector<std::int64_t>(), ci.toVector<std::int64_t>());
    GPULAB_COMPARE_TENSORS(a.cuda().max().cpu(), a.max(), 0, 0);
  }

  void outOfRangeLabelRaisesOnGpu() {
    if (!test::cudaUsable()) QSKIP("no CUDA device");
    Tensor logits = zeros({2, 3}, {.device = test::cudaDevice()});
    Tensor bad = tensor(std::vector<std::int64_t>{0, 3}, {2}, {.dtype = kInt64, .device = test::cudaDevice()});
    // Raised where the host next waits for the GPU (here .item()), as PyTorch's device-side assert is.
    Tensor badLoss = cross_entropy(logits, bad);
    try {
      badLoss.item();
      QFAIL("expected IndexError");
    } catch (const IndexError& e) {
      QVERIFY2(std::string(e.what()).starts_with("Target 3 is out of bounds"), e.what());
    }
    // The engine stays usable afterwards.
    const double loss = cross_entropy(logits, tensor(std::vector<std::int64_t>{0, 2}, {2}, {.dtype = kInt64, .device = test::cudaDevice()})).item();
    QVERIFY(std::abs(loss - std::log(3.0)) < 1e-5);
  }
};

QTEST_GUILESS_MAIN(TestCudaParity)
#include "test_cuda_parity.moc"
