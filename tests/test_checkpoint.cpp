// Activation checkpointing (engine/autograd/checkpoint.h, nn::Checkpoint): gradients equal the plain
// ones bit for bit (same ops, same order), on the CPU, the emulated GPU and a real GPU; a finite-
// difference check through a checkpoint; dropout replays its masks; a deep MLP's training step peaks
// lower; recomputed activations stay tagged as activations; backward twice raises; requires_grad
// propagates as PyTorch's does; the wrapper registers, moves and prints its child.
#include <cstring>
#include <optional>
#include <tuple>

#include "engine/ops/autocast.h"
#include "engine/autograd/checkpoint.h"
#include "engine/autograd/node.h"
#include "engine/core/errors.h"
#include "engine/runtime/device_memory.h"
#include "engine/memory/memory_events.h"
#include "engine/nn/layers.h"
#include "engine/runtime/emulated_gpu.h"
#include "op_cases.h"
#include "test_util.h"

using namespace gpulab;

namespace {

using Modules = std::initializer_list<std::shared_ptr<nn::Module>>;

// Linear(width, width) + act, `depth` times (the blocks that get checkpointed).
std::shared_ptr<nn::Sequential> block(std::int64_t width, int depth, Generator& gen, bool tanhAct = false) {
  auto s = std::make_shared<nn::Sequential>();
  for (int i = 0; i < depth; ++i) {
    s->push_back(std::make_shared<nn::Linear>(width, width, true, gen));
    s->push_back(tanhAct ? std::shared_ptr<nn::Module>(std::make_shared<nn::Tanh>()) : std::make_shared<nn::ReLU>());
  }
  return s;
}

// The same blocks, one after the other, each wrapped in a Checkpoint or not.
std::shared_ptr<nn::Sequential> chain(const std::vector<std::shared_ptr<nn::Sequential>>& blocks, bool checkpointed) {
  auto s = std::make_shared<nn::Sequential>();
  for (const auto& b : blocks) s->push_back(checkpointed ? std::shared_ptr<nn::Module>(std::make_shared<nn::Checkpoint>(b)) : b);
  return s;
}

// Rows "cpu", "emulated" (cuda:N on the CPU) and "cuda" (a real GPU; left out for the memory
// measurements, which the emulated GPU makes on the same allocator design).
void addDeviceRows(bool withCuda = true) {
  QTest::addColumn<QString>("device");
  QTest::newRow("cpu") << "cpu";
  QTest::newRow("emulated") << "emulated";
  if (withCuda) QTest::newRow("cuda") << "cuda";
}

// Two rows of one bool column.
void addBoolRows(const char* column, const char* whenFalse, const char* whenTrue) {
  QTest::addColumn<bool>(column);
  QTest::newRow(whenFalse) << false;
  QTest::newRow(whenTrue) << true;
}

std::optional<Device> rowDevice(const QString& row) {
  if (row == "cpu") return kCPU;
  if (row == "emulated") return cuda::emulatedDevice();
  if (test::cudaUsable()) return test::cudaDevice();
  return std::nullopt;
}

#define FETCH_DEVICE(name)                                                                      \
  QFETCH(QString, device);                                                                      \
  const std::optional<Device> name##_optional_ = rowDevice(device);                             \
  if (!name##_optional_) QSKIP(device == "cuda" ? "no CUDA device" : "the emulated GPU is off"); \
  const Device name = *name##_optional_

// True when a and b hold the same float32 values bit for bit; otherwise `why` names the first difference.
bool sameValues(const Tensor& a, const Tensor& b, QString* why) {
  if (!a.defined() || !b.defined()) {
    *why = QString("defined: %1 vs %2").arg(a.defined()).arg(b.defined());
    return a.defined() == b.defined();
  }
  if (a.sizes() != b.sizes()) {
    *why = QString::fromStdString("shape " + shapeStr(a.sizes()) + " vs " + shapeStr(b.sizes()));
    return false;
  }
  const auto va = a.toVector<float>(), vb = b.toVector<float>();
  for (std::size_t i = 0; i < va.size(); ++i) {
    if (std::memcmp(&va[i], &vb[i], sizeof(float)) != 0) {
      *why = QString("element %1: %2 vs %3").arg(i).arg(double(va[i]), 0, 'g', 9).arg(double(vb[i]), 0, 'g', 9);
      return false;
    }
  }
  return true;
}

#define VERIFY_SAME_VALUES(a, b, what)                                           \
  do {                                                                           \
    QString why_;                                                                \
    if (!sameValues((a), (b), &why_)) QFAIL(qPrintable(QString(what) + ": " + why_)); \
  } while (0)

// A batch and its target for `model` (width in, width out), on `device`.
std::pair<Tensor, Tensor> batch(std::int64_t rows, std::int64_t width, Device device, std::uint64_t seed = 11) {
  Generator gen(seed);
  return {randn({rows, width}, gen).to(device), randn({rows, width}, gen).to(device)};
}

// One training step's gradients: the input's, then every parameter's (cleared first).
std::vector<Tensor> stepGradients(nn::Module& model, const Tensor& x, const Tensor& target) {
  model.zero_grad();
  Tensor input = x.detach();
  input.requires_grad_(true);
  mse_loss(model(input), target).backward();
  std::vector<Tensor> grads{input.grad()};
  for (const Tensor& p : model.parameters()) grads.push_back(p.grad());
  return grads;
}

// d loss / d t by central differences, element by element, in double from float32 runs.
std::vector<double> numericGradient(const std::function<double()>& loss, const Tensor& t, double eps) {
  NoGradGuard noGrad;
  std::vector<double> out(static_cast<std::size_t>(t.numel()));
  float* x = t.data<float>();
  for (std::size_t j = 0; j < out.size(); ++j) {
    const float saved = x[j];
    x[j] = saved + static_cast<float>(eps);
    const double plus = loss();
    x[j] = saved - static_cast<float>(eps);
    out[j] = (plus - loss()) / (2 * eps);
    x[j] = saved;
  }
  return out;
}

std::int64_t activationAllocations(MemoryEventRecorder& recorder) {
  std::int64_t n = 0;
  for (const MemoryEvent& e : recorder.drain())
    if (e.kind == MemoryEventKind::Allocate && e.category == MemoryCategory::Activation) ++n;
  return n;
}

}  // namespace

class TestCheckpoint : public QObject {
  Q_OBJECT

 private slots:
  // ---- Gradients --------------------------------------------------------------------------------

  void mlpGradientsEqualPlain_data() { addDeviceRows(); }
  void mlpGradientsEqualPlain() {
    FETCH_DEVICE(dev);
    Generator gen(3);
    const std::vector<std::shared_ptr<nn::Sequential>> blocks{block(32, 3, gen), block(32, 3, gen, true), block(32, 2, gen)};
    auto plain = chain(blocks, false), checkpointed = chain(blocks, true);  // the same parameters
    plain->to(dev);
    QCOMPARE(checkpointed->device(), dev);
    auto [x, target] = batch(16, 32, dev);

    const std::vector<Tensor> expected = stepGradients(*plain, x, target);
    const std::vector<Tensor> actual = stepGradients(*checkpointed, x, target);
    QCOMPARE(actual.size(), std::size_t(1 + 8 * 2));  // the input, and 8 Linear layers' weight and bias
    for (std::size_t i = 0; i < expected.size(); ++i) {
      QVERIFY2(actual[i].defined(), qPrintable(QString("gradient %1 is missing").arg(i)));
      QCOMPARE(actual[i].device(), dev);
      VERIFY_SAME_VALUES(actual[i], expected[i], QString("gradient %1").arg(i));
    }
  }

  // Under autocast the recompute casts as the forward did (it runs in backward, outside the region):
  // the same gradients as the plain autocast step, bit for bit.
  void autocastRecomputesInTheForwardsPrecision_data() { addDeviceRows(); }
  void autocastRecomputesInTheForwardsPrecision() {
    FETCH_DEVICE(dev);
    Generator gen(5);
    const std::vector<std::shared_ptr<nn::Sequential>> blocks{block(32, 3, gen), block(32, 2, gen)};
    auto plain = chain(blocks, false), checkpointed = chain(blocks, true);
    plain->to(dev);
    Tensor x, target;  // not a structured binding: clang 14 cannot capture one in a lambda
    std::tie(x, target) = batch(16, 32, dev);
    auto gradients = [&](nn::Module& model) {
      model.zero_grad();
      Tensor input = x.detach();
      input.requires_grad_(true);
      Tensor loss;
      {
        amp::AutocastGuard autocast(dev.type(), kBFloat16);
        loss = mse_loss(model(input), target);
      }
      loss.backward();
      std::vector<Tensor> grads{input.grad()};
      for (const Tensor& p : model.parameters()) grads.push_back(p.grad());
      return grads;
    };
    const std::vector<Tensor> expected = gradients(*plain);
    const std::vector<Tensor> actual = gradients(*checkpointed);
    for (std::size_t i = 0; i < expected.size(); ++i) {
      QVERIFY2(actual[i].defined(), qPrintable(QString("gradient %1 is missing").arg(i)));
      QCOMPARE(actual[i].dtype(), kFloat32);
      VERIFY_SAME_VALUES(actual[i], expected[i], QString("gradient %1").arg(i));
    }
    QVERIFY(!amp::is_autocast_enabled(dev.type()));  // the recompute's region is closed again
  }

  // Every differentiable op of the shared table, checkpointed as one segment (the multi-input form):
  // the same output and the same gradients, bit for bit.
  void opCasesEqualPlain_data() { test::addOpCaseRows(); }
  void opCasesEqualPlain() {
    QFETCH(int, index);
    const test::OpCase c = test::opCases()[static_cast<std::size_t>(index)];
    auto run = [&](bool checkpointed) {
      std::vector<Tensor> inputs = test::makeInputs(c);
      for (Tensor& t : inputs) t.requires_grad_(true);
      std::vector<Tensor> args = inputs;
      args.insert(args.end(), c.extra.begin(), c.extra.end());
      Tensor out = checkpointed ? checkpoint(c.fn, args) : c.fn(args);
      Generator wg(99);
      (out * randn(out.sizes(), wg)).sum().backward();
      std::vector<Tensor> results{out.detach()};
      for (const Tensor& t : inputs) results.push_back(t.grad());
      return results;
    };
    const auto expected = run(false), actual = run(true);
    for (std::size_t i = 0; i < expected.size(); ++i) {
      VERIFY_SAME_VALUES(actual[i], expected[i], i == 0 ? QString("output") : QString("gradient of input %1").arg(i - 1));
    }
  }

  // Autograd through a checkpoint against central differences, for the inputs of the table's MLP
  // case (function form) and for the parameters inside an nn::Checkpoint (module form).
  void finiteDifferences_data() { addBoolRows("moduleForm", "function, inputs", "module, parameters"); }
  void finiteDifferences() {
    QFETCH(bool, moduleForm);
    Generator gen(5);
    std::vector<Tensor> wrt;  // the tensors checked
    std::function<Tensor()> forward;
    auto model = std::make_shared<nn::Checkpoint>(std::make_shared<nn::Sequential>(
        Modules{std::make_shared<nn::Linear>(4, 6, true, gen), std::make_shared<nn::Tanh>(), std::make_shared<nn::Linear>(6, 3, true, gen)}));
    const Tensor x = randn({5, 4}, gen);
    std::vector<Tensor> caseInputs;
    test::OpCase mlpCase;
    if (moduleForm) {
      wrt = model->parameters();
      forward = [&] { return (*model)(x); };
    } else {
      for (const test::OpCase& c : test::opCases())
        if (c.name == "mlp") mlpCase = c;
      QVERIFY(mlpCase.fn);
      caseInputs = test::makeInputs(mlpCase);
      for (Tensor& t : caseInputs) t.requires_grad_(true);
      wrt = caseInputs;
      forward = [&] { return checkpoint(mlpCase.fn, caseInputs); };
    }
    Tensor out = forward();
    QCOMPARE(out.grad_fn()->name(), std::string("CheckpointFunctionBackward"));
    Generator wg(99);
    const Tensor w = randn(out.sizes(), wg);
    (out * w).sum().backward();

    const auto loss = [&] { return (forward() * w).sum().item(); };
    for (std::size_t i = 0; i < wrt.size(); ++i) {
      QVERIFY2(wrt[i].grad().defined(), qPrintable(QString("tensor %1 received no gradient").arg(i)));
      const auto analytic = wrt[i].grad().toVector<double>();
      const auto numeric = numericGradient(loss, wrt[i], 5e-3);
      for (std::size_t j = 0; j < numeric.size(); ++j) {
        if (std::abs(analytic[j] - numeric[j]) > 3e-3 + 2e-2 * std::abs(numeric[j])) {
          QFAIL(qPrintable(QString("tensor %1 element %2: autograd %3, finite difference %4").arg(i).arg(j).arg(analytic[j]).arg(numeric[j])));
        }
      }
    }
  }

  // ---- Randomness -------------------------------------------------------------------------------

  // Dropout inside a checkpoint: the recompute draws the first forward's masks (the default
  // generator's state is recorded and replayed), and leaves the generator where the plain run does.
  void dropoutReplaysItsMasks_data() { addDeviceRows(); }
  void dropoutReplaysItsMasks() {
    FETCH_DEVICE(dev);
    Generator gen(8);
    auto inner = std::make_shared<nn::Sequential>(Modules{std::make_shared<nn::Linear>(24, 48, true, gen), std::make_shared<nn::ReLU>(),
                                                          std::make_shared<nn::Dropout>(0.5), std::make_shared<nn::Linear>(48, 24, true, gen),
                                                          std::make_shared<nn::Dropout>(0.3)});
    inner->to(dev);
    Tensor x, target;  // not a structured binding: clang 14 cannot capture one in a lambda
    std::tie(x, target) = batch(32, 24, dev);
    auto run = [&](nn::Module& model, std::uint64_t* offsetAfter) {
      manual_seed(1234);
      auto grads = stepGradients(model, x, target);
      *offsetAfter = defaultGenerator().advance(0);
      return grads;
    };
    std::uint64_t plainOffset = 0, replayOffset = 0, freshOffset = 0;
    const auto expected = run(*inner, &plainOffset);
    nn::Checkpoint replaying(inner), fresh(inner, /*preserve_rng_state=*/false);
    const auto actual = run(replaying, &replayOffset);
    for (std::size_t i = 0; i < expected.size(); ++i) VERIFY_SAME_VALUES(actual[i], expected[i], QString("gradient %1").arg(i));
    QCOMPARE(replayOffset, plainOffset);

    // Without the replay the recompute draws new masks: the gradients differ (so the check above can fail).
    const auto unreplayed = run(fresh, &freshOffset);
    QString why;
    QVERIFY(!sameValues(unreplayed[1], expected[1], &why));
    QVERIFY(freshOffset > plainOffset);  // the recompute drew more numbers
  }

  // ---- Memory -----------------------------------------------------------------------------------

  // A deep MLP's training step: checkpointing every few layers keeps only the blocks' inputs, so the
  // step's peak is lower (the recompute holds one block's activations at a time).
  void peakMemoryIsLower_data() { addDeviceRows(false); }
  void peakMemoryIsLower() {
    FETCH_DEVICE(dev);
    Generator gen(1);
    std::vector<std::shared_ptr<nn::Sequential>> blocks;
    for (int i = 0; i < 6; ++i) blocks.push_back(block(256, 4, gen));  // 24 Linear + ReLU layers
    auto plain = chain(blocks, false), checkpointed = chain(blocks, true);
    plain->to(dev);
    Tensor x, target;  // not a structured binding: clang 14 cannot capture one in a lambda
    std::tie(x, target) = batch(256, 256, dev);
    auto peakOfStep = [&](nn::Module& model) {
      model.zero_grad();
      const std::int64_t before = memory_allocated(dev);
      reset_peak_memory_stats(dev);
      mse_loss(model(x), target).backward();
      return max_memory_allocated(dev) - before;
    };
    const std::int64_t plainPeak = peakOfStep(*plain), checkpointedPeak = peakOfStep(*checkpointed);
    qInfo("%s: training-step peak above the model %.2f MiB plain, %.2f MiB checkpointed (%.0f%%)", qPrintable(device),
          plainPeak / 1048576.0, checkpointedPeak / 1048576.0, 100.0 * checkpointedPeak / plainPeak);
    QVERIFY(checkpointedPeak < plainPeak);
    for (const Tensor& p : checkpointed->parameters()) QVERIFY(p.grad().defined());
  }

  // The checkpointed forward records nothing: it peaks exactly where the same forward under no_grad
  // does (each intermediate freed once the next op has used it), far below the recording forward.
  void forwardKeepsNoIntermediates_data() { addDeviceRows(false); }
  void forwardKeepsNoIntermediates() {
    FETCH_DEVICE(dev);
    Generator gen(6);
    auto inner = block(128, 6, gen);
    inner->to(dev);
    nn::Checkpoint checkpointed(inner);
    const Tensor x = batch(128, 128, dev).first;
    auto forwardPeak = [&](nn::Module& model, bool noGrad) {
      std::optional<NoGradGuard> guard;
      if (noGrad) guard.emplace();
      const std::int64_t before = memory_allocated(dev);
      reset_peak_memory_stats(dev);
      const Tensor y = model(x);
      return max_memory_allocated(dev) - before;
    };
    const std::int64_t recording = forwardPeak(*inner, false), noGrad = forwardPeak(*inner, true);
    const std::int64_t checkpointedPeak = forwardPeak(checkpointed, false);
    qInfo("%s: forward peak %.2f MiB recording, %.2f MiB under no_grad, %.2f MiB checkpointed", qPrintable(device),
          recording / 1048576.0, noGrad / 1048576.0, checkpointedPeak / 1048576.0);
    QCOMPARE(checkpointedPeak, noGrad);
    QVERIFY(checkpointedPeak < recording / 2);
  }

  // What the recompute allocates in backward is tagged Activation (backward's own scope says
  // Gradient); the plain backward allocates no activations.
  void recomputedActivationsAreTagged_data() { addBoolRows("checkpointed", "plain", "checkpointed"); }
  void recomputedActivationsAreTagged() {
    QFETCH(bool, checkpointed);
    Generator gen(2);
    auto model = chain({block(16, 2, gen), block(16, 2, gen)}, checkpointed);
    auto [x, target] = batch(8, 16, kCPU);
    MemoryEventRecorder recorder(kCPU);
    Tensor loss = mse_loss((*model)(x), target);
    QVERIFY(activationAllocations(recorder) > 0);  // the forward
    loss.backward();
    const std::int64_t inBackward = activationAllocations(recorder);
    if (checkpointed) {
      QVERIFY2(inBackward >= 8, qPrintable(QString("%1 activation allocations in backward").arg(inBackward)));
    } else {
      QCOMPARE(inBackward, std::int64_t(0));
    }
  }

  // ---- Autograd rules ---------------------------------------------------------------------------

  void backwardTwiceRaises() {
    Tensor x = tensor({1.0f, -2.0f, 3.0f}, {3}, {.requires_grad = true});
    Tensor y = checkpoint([](const Tensor& t) { return (t * t).sum(); }, x);
    y.backward();
    QCOMPARE(x.grad().toVector<float>(), (std::vector<float>{2.0f, -4.0f, 6.0f}));
    try {
      y.backward();
      QFAIL("a second backward through the checkpoint did not raise");
    } catch (const Error& e) {
      QVERIFY2(QString(e.what()).startsWith("Trying to backward through the graph a second time"), e.what());
    }
  }

  // The output requires grad when an input or a listed parameter does; parameters inside get their
  // gradients in every case; fn runs once in forward and once more in backward, or only once when
  // nothing is checkpointed (no grad mode, nothing requires grad).
  void requiresGradPropagates_data() {
    QTest::addColumn<bool>("inputRequiresGrad");
    QTest::addColumn<bool>("listParams");
    QTest::addColumn<bool>("noGrad");
    QTest::addColumn<bool>("expectRequiresGrad");
    QTest::addColumn<int>("expectCalls");  // fn's calls over forward and backward
    QTest::newRow("input requires grad") << true << true << false << true << 2;
    QTest::newRow("parameters only (module form)") << false << true << false << true << 2;
    QTest::newRow("input requires grad, parameters unlisted") << true << false << false << true << 2;
    QTest::newRow("nothing listed requires grad") << false << false << false << true << 1;
    QTest::newRow("no_grad") << true << true << true << false << 1;
  }
  void requiresGradPropagates() {
    QFETCH(bool, inputRequiresGrad);
    QFETCH(bool, listParams);
    QFETCH(bool, noGrad);
    QFETCH(bool, expectRequiresGrad);
    QFETCH(int, expectCalls);
    Generator gen(4);
    nn::Linear layer(5, 3, true, gen);
    Tensor x = randn({2, 5}, gen);
    x.requires_grad_(inputRequiresGrad);
    int calls = 0;
    const auto fn = [&](const Tensor& t) {
      ++calls;
      return layer(t).tanh();
    };
    (layer(x).tanh() * 3.0).sum().backward();  // the plain gradients
    const Tensor expectedW = layer.weight.grad().clone(), expectedX = inputRequiresGrad ? x.grad().clone() : Tensor();
    layer.zero_grad();
    x.set_grad(Tensor());

    Tensor y;
    {
      std::optional<NoGradGuard> guard;
      if (noGrad) guard.emplace();
      y = checkpoint(fn, x, listParams ? layer.parameters() : std::vector<Tensor>{});
    }
    QCOMPARE(y.requires_grad(), expectRequiresGrad);
    if (expectRequiresGrad) {
      (y * 3.0).sum().backward();
      VERIFY_SAME_VALUES(layer.weight.grad(), expectedW, "weight gradient");
      QVERIFY(layer.bias.grad().defined());
      if (inputRequiresGrad) VERIFY_SAME_VALUES(x.grad(), expectedX, "input gradient");
    } else {
      QVERIFY(!y.grad_fn());
    }
    QCOMPARE(calls, expectCalls);
  }

  // A checkpoint whose fn returns its input itself (an identity segment) still routes the gradient.
  void identitySegment() {
    Tensor x = tensor({1.0f, 2.0f}, {2}, {.requires_grad = true});
    Tensor y = checkpoint([](const Tensor& t) { return t; }, x);
    QVERIFY(!y.sameAs(x));
    (y * y).sum().backward();
    QCOMPARE(x.grad().toVector<float>(), (std::vector<float>{2.0f, 4.0f}));
    QVERIFY(!y.is_leaf());
  }

  // A checkpoint inside a checkpoint (a Checkpoint of blocks that are Checkpoints): the outer
  // forward runs the inner one plainly under no_grad; the outer recompute records the inner node.
  void nestedCheckpoints() {
    Generator gen(9);
    const std::vector<std::shared_ptr<nn::Sequential>> blocks{block(12, 2, gen), block(12, 2, gen, true)};
    auto plain = chain(blocks, false);
    nn::Checkpoint nested(chain(blocks, true));
    auto [x, target] = batch(6, 12, kCPU);
    const auto expected = stepGradients(*plain, x, target), actual = stepGradients(nested, x, target);
    for (std::size_t i = 0; i < expected.size(); ++i) VERIFY_SAME_VALUES(actual[i], expected[i], QString("gradient %1").arg(i));
  }

  // ---- The module -------------------------------------------------------------------------------

  void moduleRegistersMovesAndPrints() {
    Generator gen(0);
    auto inner = std::make_shared<nn::Sequential>(Modules{std::make_shared<nn::Linear>(4, 8, true, gen), std::make_shared<nn::ReLU>()});
    nn::Checkpoint model(inner);
    QCOMPARE(QString::fromStdString(model.repr()),
             QString("Checkpoint(\n  (module): Sequential(\n    (0): Linear(in_features=4, out_features=8, bias=True)\n"
                     "    (1): ReLU()\n  )\n)"));
    QStringList names;
    for (auto& [n, p] : model.state_dict()) names << QString::fromStdString(n);
    QCOMPARE(names, (QStringList{"module.0.weight", "module.0.bias"}));
    QCOMPARE(model.parameter_count(), inner->parameter_count());
    model.eval();
    QVERIFY(!inner->is_training());
    QVERIFY_THROWS_EXCEPTION(ValueError, nn::Checkpoint(nullptr));
    if (const auto emu = cuda::emulatedDevice()) {
      model.to(*emu);
      QCOMPARE(inner->device(), *emu);
      QCOMPARE(model(randn({3, 4}, gen).to(*emu)).device(), *emu);
    }
  }
};

QTEST_GUILESS_MAIN(TestCheckpoint)
#include "test_checkpoint.moc"
