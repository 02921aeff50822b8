// Autograd semantics: accumulation, zero_grad, detach, no-grad, graph release and retain_graph,
// in-place writes (through views too: Note [In-place ops on views] in engine/ops/tensor_methods.cpp)
// and the version check of saved tensors, and the memory that no-grad evaluation saves.
#include "engine/autograd/checkpoint.h"
#include "engine/autograd/grad.h"
#include "engine/autograd/node.h"
#include "engine/core/errors.h"
#include "engine/runtime/device_memory.h"
#include "engine/memory/memory_events.h"
#include "engine/nn/layers.h"
#include "test_util.h"

using namespace gpulab;

namespace {

// An in-place write through a view (or into a tensor that has views), then a loss: x is
// [1, 2, ..., n] in `shape`, and `expected` is x.grad as PyTorch 1.13 computes it for the same code
// (the Python line beside each case).
struct InPlaceCase {
  const char* name;
  Shape shape;
  std::function<Tensor(const Tensor& x)> loss;
  std::vector<float> expected;
};

Tensor weights(std::vector<float> w, Shape shape) { return tensor(w, std::move(shape)); }

std::vector<InPlaceCase> inPlaceCases() {
  const Tensor ramp = weights({0, 1, 2, 3}, {4});
  return {
      // y = x * 2; y[1:3].mul_(3); y.sum()
      {"mul_ through a slice", {4}, [](const Tensor& x) { Tensor y = x * 2.0; y.slice(0, 1, 3).mul_(3.0); return y.sum(); }, {2, 6, 6, 2}},
      // y = x * 2; y.t()[0].mul_(5); y.sum()
      {"mul_ through a transposed view", {2, 2}, [](const Tensor& x) { Tensor y = x * 2.0; y.t().select(0, 0).mul_(5.0); return y.sum(); },
       {10, 2, 10, 2}},
      // y = x * 2; v = y[1:3]; v.mul_(3); y.sum() * y[0]
      {"chain through the rebased base", {4}, [](const Tensor& x) {
         Tensor y = x * 2.0;
         Tensor v = y.slice(0, 1, 3);
         v.mul_(3.0);
         return y.sum() * y.select(0, 0);
       }, {84, 12, 12, 4}},
      // y = x * x; y.t()[1].mul_(x[:, 2]); (y * w).sum()
      {"mul_ by a tensor through a transposed view", {2, 3}, [](const Tensor& x) {
         Tensor y = x * x;
         y.t().select(0, 1).mul_(x.select(1, 2));
         return (y * weights({1, 2, 3, 4, 5, 6}, {2, 3})).sum();
       }, {2, 24, 26, 32, 300, 197}},
      // y = x * 2; y[1:3].add_(x[0:2] * x[2:4]); (y * arange(4)).sum()
      {"add_ through a slice", {4}, [ramp](const Tensor& x) {
         Tensor y = x * 2.0;
         y.slice(0, 1, 3).add_(x.slice(0, 0, 2) * x.slice(0, 2, 4));
         return (y * ramp).sum();
       }, {3, 10, 5, 10}},
      // y = x * 2; y[0:2].copy_(x[2:4].exp()); (y * arange(4)).sum()
      {"copy_ through a slice", {4}, [ramp](const Tensor& x) {
         Tensor y = x * 2.0;
         y.slice(0, 0, 2).copy_(x.slice(0, 2, 4).exp());
         return (y * ramp).sum();
       }, {0, 0, 4, 60.598152f}},
      // y = x * x; y[1:3].zero_(); (y * arange(4)).sum()
      {"zero_ through a slice", {4}, [ramp](const Tensor& x) {
         Tensor y = x * x;
         y.slice(0, 1, 3).zero_();
         return (y * ramp).sum();
       }, {0, 0, 0, 24}},
      // y = x * x; y.t()[0].fill_(7); (y * y).sum()
      {"fill_ through a transposed view", {2, 2}, [](const Tensor& x) {
         Tensor y = x * x;
         y.t().select(0, 0).fill_(7.0);
         return (y * y).sum();
       }, {0, 32, 0, 256}},
      // y = x * 2; u = y[0:2]; y[1:3].mul_(3); (u * [1, 10]).sum() -- u was made before the write
      {"another view sees the new history", {4}, [](const Tensor& x) {
         Tensor y = x * 2.0;
         Tensor u = y.slice(0, 0, 2);
         y.slice(0, 1, 3).mul_(3.0);
         return (u * weights({1, 10}, {2})).sum();
       }, {2, 60, 0, 0}},
      // y = x * 2; v = y[1:3]; y.mul_(x); (v * [1, 10]).sum() -- the base written, a view of it read
      {"a view of a base written in place", {4}, [](const Tensor& x) {
         Tensor y = x * 2.0;
         Tensor v = y.slice(0, 1, 3);
         y.mul_(x);
         return (v * weights({1, 10}, {2})).sum();
       }, {0, 8, 120, 0}},
      // y = x * 2; v = y[1:3]; v[0:1].mul_(7); (y * arange(4)).sum() -- a view of a view
      {"mul_ through a view of a view", {4}, [ramp](const Tensor& x) {
         Tensor y = x * 2.0;
         y.slice(0, 1, 3).slice(0, 0, 1).mul_(7.0);
         return (y * ramp).sum();
       }, {0, 14, 4, 6}},
      // y = x * 2; y.mul_(x); (y * arange(4)).sum() -- MulBackward0 saved y, which mul_ overwrites
      {"mul_ by a tensor keeps what backward reads", {4}, [ramp](const Tensor& x) {
         Tensor y = x * 2.0;
         y.mul_(x);
         return (y * ramp).sum();
       }, {0, 8, 24, 48}},
  };
}

Tensor ramp1(const Shape& shape) {
  std::int64_t n = 1;
  for (std::int64_t s : shape) n *= s;
  return arange(1.0, static_cast<double>(n) + 1.0).reshape(shape).detach().requires_grad_(true);  // a leaf, not a view
}

}  // namespace

class TestAutograd : public QObject {
  Q_OBJECT

 private slots:
  void gradientsAccumulateUntilZeroed() {
    Tensor x = tensor({1, 2, 3}, {3}, {.requires_grad = true});
    (x * x).sum().backward();
    QCOMPARE(x.grad().toVector<float>(), (std::vector<float>{2, 4, 6}));
    (x * 3.0).sum().backward();  // a second graph: gradients add up
    QCOMPARE(x.grad().toVector<float>(), (std::vector<float>{5, 7, 9}));
    x.set_grad(Tensor());
    (x * 3.0).sum().backward();
    QCOMPARE(x.grad().toVector<float>(), (std::vector<float>{3, 3, 3}));
  }

  // torch.autograd.grad: the gradients are returned, no .grad changes (a leaf asked for and a leaf
  // not asked for alike), a non-leaf's is the one its grad_fn receives, and an unused input is an
  // error unless allowed.
  void gradReturnsGradientsAndTouchesNoGrad() {
    Tensor x = tensor({1, 2, 3}, {3}, {.requires_grad = true}), w = tensor({0.5, -1, 2}, {3}, {.requires_grad = true});
    Tensor h = x * w;
    const std::vector<Tensor> g = autograd::grad({(h * h).sum()}, {Tensor()}, {x, h}, false);
    QCOMPARE(g.size(), std::size_t{2});
    QCOMPARE(g[0].toVector<float>(), (std::vector<float>{0.5f, 4, 24}));  // 2 h w
    QCOMPARE(g[1].toVector<float>(), (std::vector<float>{1, -4, 12}));    // 2 h
    QVERIFY(!x.grad().defined() && !w.grad().defined());
    Tensor unused = tensor({1}, {1}, {.requires_grad = true});
    QVERIFY(test::textOf([&] { autograd::grad({(x * 2.0).sum()}, {Tensor()}, {x, unused}, false); }).find("not have been used") != std::string::npos);
    const std::vector<Tensor> allowed = autograd::grad({(x * 2.0).sum()}, {Tensor()}, {x, unused}, true);
    QCOMPARE(allowed[0].toVector<float>(), (std::vector<float>{2, 2, 2}));
    QVERIFY(!allowed[1].defined());
  }

  // .grad takes the incoming gradient without a copy only when nothing else can see it (PyTorch's
  // AccumulateGrad does the same): a gradient two leaves receive, the caller's own backward(gradient)
  // and a gradient that is a view of a larger buffer each get a private copy.
  void gradientsAreStolenOnlyWhenUnshared() {
    Tensor a = tensor({1, 2}, {2}, {.requires_grad = true}), b = tensor({3, 4}, {2}, {.requires_grad = true});
    (a + b).sum().backward();  // AddBackward hands the same tensor to both leaves
    QVERIFY(a.grad().data_ptr() != b.grad().data_ptr());
    { NoGradGuard noGrad; a.grad().fill_(7.0); }
    QCOMPARE(b.grad().toVector<float>(), (std::vector<float>{1, 1}));

    Tensor leaf = tensor({1, 2}, {2}, {.requires_grad = true});
    Tensor mine = tensor({5, 6}, {2});
    leaf.backward(mine);
    QVERIFY(leaf.grad().data_ptr() != mine.data_ptr());
    mine.fill_(0.0);
    QCOMPARE(leaf.grad().toVector<float>(), (std::vector<float>{5, 6}));

    // A fresh gradient nobody else holds becomes .grad itself: the block MulBackward allocated is the
    // one .grad points to, and backward allocates no copy of it.
    Tensor w = ones({4096}, {.requires_grad = true});
    Tensor y = (w * 2.0).sum();
    MemoryEventRecorder events(kCPU);
    y.backward();
    QCOMPARE(w.grad().toVector<float>(), std::vector<float>(4096, 2.0f));
    int gradientBlocks = 0;
    bool gradIsOneOfThem = false;
    for (const MemoryEvent& e : events.drain()) {
      if (e.kind != MemoryEventKind::Allocate || e.size < 4096 * 4) continue;
      ++gradientBlocks;
      gradIsOneOfThem |= e.address == reinterpret_cast<std::uintptr_t>(w.grad().data_ptr());
    }
    QVERIFY(gradIsOneOfThem);
    QCOMPARE(gradientBlocks, 2);  // sum's gradient expanded to w's shape, and MulBackward's result: no clone

    // The same when the gradient arrives as a view (ViewBackward0 reshapes it) of a buffer nobody else
    // holds: .grad takes it, and is no view.
    Tensor v = ones({4096}, {.requires_grad = true});
    Tensor z = (v.view({64, 64}) * 2.0).sum();
    MemoryEventRecorder viewEvents(kCPU);
    z.backward();
    int viewGradientBlocks = 0;
    for (const MemoryEvent& e : viewEvents.drain()) viewGradientBlocks += e.kind == MemoryEventKind::Allocate && e.size >= 4096 * 4;
    QCOMPARE(viewGradientBlocks, 2);
    QVERIFY(!v.grad().is_view());
    QCOMPARE(v.grad().toVector<float>(), std::vector<float>(4096, 2.0f));
  }

  void sharedSubexpressionGetsBothContributions() {
    Tensor x = tensor({2}, {1}, {.requires_grad = true});
    Tensor y = x * x;
    (y + y * x).sum().backward();  // d/dx (x^2 + x^3) = 2x + 3x^2 = 16
    QCOMPARE(x.grad().item(), 16.0);
  }

  void detachAndNoGradRecordNothing() {
    Tensor x = tensor({1, 2}, {2}, {.requires_grad = true});
    Tensor d = x.detach();
    QVERIFY(!d.requires_grad());
    QCOMPARE(d.data_ptr(), x.data_ptr());
    {
      NoGradGuard guard;
      Tensor y = x * 2.0;
      QVERIFY(!y.requires_grad());
      QVERIFY(y.grad_fn() == nullptr);
    }
    QVERIFY((x * 2.0).requires_grad());
    QVERIFY_THROWS_EXCEPTION(Error, (d * 2.0).sum().backward());
  }

  void graphIsFreedAfterBackward() {
    Tensor x = tensor({1, 2}, {2}, {.requires_grad = true});
    Tensor loss = (x.exp() * x).sum();
    loss.backward();
    try {
      loss.backward();
      QFAIL("second backward through a freed graph must throw");
    } catch (const Error& e) {
      QVERIFY(std::string(e.what()).starts_with("Trying to backward through the graph a second time"));
      QVERIFY(std::string(e.what()).find("Specify retain_graph=True") != std::string::npos);
    }
  }

  // backward(retain_graph=True) keeps what the nodes saved: a second backward through the same graph
  // works and accumulates; the one after it, without retain_graph, releases it, and a third raises.
  void retainGraphKeepsTheGraphForAnotherBackward() {
    Tensor x = tensor({1, 2}, {2}, {.requires_grad = true});
    Tensor loss = (x.exp() * x).sum();  // d/dx = e^x (1 + x)
    loss.backward(Tensor(), /*retain_graph=*/true);
    const std::vector<float> once = x.grad().toVector<float>();
    QCOMPARE(once[0], static_cast<float>(std::exp(1.0) * 2));
    loss.backward();
    QCOMPARE(x.grad().toVector<float>(), (std::vector<float>{2 * once[0], 2 * once[1]}));
    QVERIFY(test::textOf([&] { loss.backward(); }).starts_with("Trying to backward through the graph a second time"));

    // torch.autograd.grad(retain_graph=True), then backward() through the same graph.
    Tensor w = tensor({3}, {1}, {.requires_grad = true});
    Tensor y = (w * w).sum();
    QCOMPARE(autograd::grad({y}, {Tensor()}, {w}, false, /*retainGraph=*/true)[0].item(), 6.0);
    y.backward();
    QCOMPARE(w.grad().item(), 6.0);
    QVERIFY(test::textOf([&] { autograd::grad({y}, {Tensor()}, {w}, false); }).starts_with("Trying to backward"));

    // A checkpointed segment's node is kept too: the second backward recomputes the segment again.
    Tensor c = tensor({1, 2}, {2}, {.requires_grad = true});
    Tensor segment = checkpoint([](const Tensor& t) { return (t.exp() * t).sum(); }, c);
    segment.backward(Tensor(), /*retain_graph=*/true);
    segment.backward();
    QCOMPARE(c.grad().toVector<float>(), (std::vector<float>{2 * once[0], 2 * once[1]}));

    // torch.autograd.backward with roots that share a graph: one walk, so the shared part runs once.
    Tensor v = tensor({1, 2}, {2}, {.requires_grad = true});
    Tensor a = v * v;
    autograd::backward({a.sum(), (a * 3.0).sum()}, {Tensor(), Tensor()}, /*retainGraph=*/false);
    QCOMPARE(v.grad().toVector<float>(), (std::vector<float>{8, 16}));  // 4 v
  }

  void backwardNeedsAScalarOrAGradient() {
    Tensor x = tensor({1, 2}, {2}, {.requires_grad = true});
    QVERIFY_THROWS_EXCEPTION(Error, (x * 2.0).backward());
    (x * 2.0).backward(tensor({1, 10}, {2}));
    QCOMPARE(x.grad().toVector<float>(), (std::vector<float>{2, 20}));
  }

  // PyTorch's leaf rules, with its messages: no in-place write into a leaf that requires grad, nor
  // into a view of one, while grad mode is on; under no_grad (as optimizers write) both are allowed,
  // and each write counts in the version.
  void inPlaceOnALeafThatRequiresGradIsRefused() {
    Tensor x = tensor({1, 2}, {2}, {.requires_grad = true});
    const std::string leaf = "a leaf Variable that requires grad is being used in an in-place operation.";
    const std::string viewOfLeaf = "a view of a leaf Variable that requires grad is being used in an in-place operation.";
    QCOMPARE(test::textOf([&] { x.fill_(0); }), leaf);
    QCOMPARE(test::textOf([&] { x.mul_(2.0); }), leaf);
    QCOMPARE(test::textOf([&] { x.copy_(ones({2})); }), leaf);
    QCOMPARE(test::textOf([&] { x.select(0, 0).fill_(5); }), viewOfLeaf);  // x[0] = 5
    QCOMPARE(test::textOf([&] { x.slice(0, 0, 1).mul_(2.0); }), viewOfLeaf);
    QCOMPARE(x.toVector<float>(), (std::vector<float>{1, 2}));  // refused before anything was written
    QCOMPARE(x._version(), 0u);
    NoGradGuard guard;
    x.fill_(0);  // allowed under no-grad, as optimizers do
    x.select(0, 1).fill_(3);
    QCOMPARE(x.toVector<float>(), (std::vector<float>{0, 3}));
    QCOMPARE(x._version(), 2u);
    QVERIFY(x.is_leaf() && x.requires_grad());
  }

  // The examples and their relatives: an in-place write through a view rebases the base's
  // history (CopySlices), and every view of the base follows it.
  void inPlaceThroughViewsRebasesTheBase_data() {
    QTest::addColumn<int>("index");
    const auto cases = inPlaceCases();
    for (int i = 0; i < static_cast<int>(cases.size()); ++i) QTest::newRow(cases[static_cast<std::size_t>(i)].name) << i;
  }
  void inPlaceThroughViewsRebasesTheBase() {
    QFETCH(int, index);
    const InPlaceCase c = inPlaceCases()[static_cast<std::size_t>(index)];
    Tensor x = ramp1(c.shape);
    c.loss(x).backward();
    QVERIFY(x.grad().defined());
    GPULAB_COMPARE_TENSORS(x.grad().reshape({-1}), tensor(c.expected, {static_cast<std::int64_t>(c.expected.size())}), 1e-5, 1e-5);
  }

  // What a view and its base look like after the write: PyTorch's node names, _base, versions.
  void aViewKnowsItsBaseAndTheWriteRenamesTheirHistory() {
    Tensor x = ones({4}, {.requires_grad = true});
    Tensor y = x * 2.0;
    Tensor v = y.slice(0, 1, 3);
    QVERIFY(v.is_view() && !y.is_view() && !x.detach().is_view());
    QVERIFY(v._base().sameAs(y) && v.slice(0, 0, 1)._base().sameAs(y));  // a view of a view names the root
    v.mul_(3.0);
    QCOMPARE(y.grad_fn()->name(), std::string("CopySlices"));
    QCOMPARE(v.grad_fn()->name(), std::string("AsStridedBackward0"));
    QCOMPARE(y._version(), 1u);
    QCOMPARE(v._version(), 1u);
    y.mul_(x);  // a write computed from y itself: its node is y's history, as PyTorch's MulBackward0
    QCOMPARE(y.grad_fn()->name(), std::string("MulBackward0"));
    y.zero_();
    QCOMPARE(y.grad_fn()->name(), std::string("ZeroBackward0"));
    y.copy_(x * 3.0);
    QCOMPARE(y.grad_fn()->name(), std::string("CopyBackwards"));
    y.sum().backward();
    QCOMPARE(x.grad().toVector<float>(), (std::vector<float>{3, 3, 3, 3}));
    // A write into a tensor that needs no gradient from one that does gives it a history.
    Tensor b = zeros({2, 3});
    Tensor w = ones({3}, {.requires_grad = true});
    b.select(0, 0).copy_(w);
    QVERIFY(b.requires_grad() && b.grad_fn()->name() == "CopySlices");
    b.select(0, 1).mul_(w);
    (b * tensor({1, 10}, {2, 1})).sum().backward();
    QCOMPARE(w.grad().toVector<float>(), (std::vector<float>{1, 1, 1}));
  }

  // A tensor saved for backward and then written in place: PyTorch's error at backward, not a
  // gradient computed from the new values. x.exp() saves its result.
  void aSavedTensorWrittenInPlaceFailsAtBackward() {
    Tensor x = ones({4}, {.requires_grad = true});
    Tensor y = x.exp();
    y.add_(1.0);
    const std::string text = test::textOf([&] { y.sum().backward(); });
    QCOMPARE(text.substr(0, text.find(" Hint:")),
             std::string("one of the variables needed for gradient computation has been modified by an inplace operation: "
                         "[torch.FloatTensor [4]], which is output 0 of ExpBackward0, is at version 1; expected version 0 instead."));
    QVERIFY(!x.grad().defined());
    // A saved input that needs no gradient, written under no_grad: named without a node, as PyTorch.
    Tensor a = ones({3}, {.requires_grad = true}), w = ones({3});
    Tensor z = a * w;
    w.fill_(2.0);
    QVERIFY(test::textOf([&] { z.sum().backward(); }).starts_with("one of the variables needed for gradient computation has been "
                                                                    "modified by an inplace operation: [torch.FloatTensor [3]] is at "
                                                                    "version 1; expected version 0 instead."));
    // Tensor.data has a version counter of its own: a write through it escapes the check, as in PyTorch.
    Tensor p = ones({3}, {.requires_grad = true}), q = ones({3});
    Tensor r = p * q;
    q.variable_data().fill_(2.0);
    QCOMPARE(q._version(), 0u);
    r.sum().backward();
    QCOMPARE(p.grad().toVector<float>(), (std::vector<float>{2, 2, 2}));
  }

  // The other rules PyTorch enforces for in-place writes, with its messages.
  void inPlaceRulesForViewsMadeUnderNoGradAndSharedMemory() {
    Tensor y = ones({2, 3}, {.requires_grad = true}) * 1.0;
    Tensor v;
    {
      NoGradGuard noGrad;
      v = y.select(0, 0);
    }
    QVERIFY(test::textOf([&] { v.mul_(2.0); }).starts_with("A view was created in no_grad mode and is being modified inplace with grad mode enabled."));
    y.mul_(2.0);
    QVERIFY(test::textOf([&] { (v * 2.0).sum(); }).starts_with("A view was created in no_grad mode and its base or another view of its base has been modified inplace"));
    Tensor e = zeros({1}).expand({3});
    QCOMPARE(test::textOf([&] { e.copy_(ones({3})); }),
             std::string("unsupported operation: more than one element of the written-to tensor refers to a single memory location. Please "
                         "clone() the tensor before performing the operation."));
    e.fill_(2.0);  // allowed, as in PyTorch
    QCOMPARE(e.toVector<float>(), (std::vector<float>{2, 2, 2}));
  }

  void gradientFlowsThroughDeviceAndDtypeMoves() {
    Tensor x = tensor({1, 2}, {2}, {.requires_grad = true});
    (x.to(kCPU) * 3.0).sum().backward();
    QCOMPARE(x.grad().toVector<float>(), (std::vector<float>{3, 3}));
  }

  // The seed lessons' claim "no_grad saves memory", measured: evaluation under no-grad must reach a
  // lower peak than the same evaluation with the graph recorded.
  void noGradEvaluationAllocatesLess() {
    Generator gen(0);
    auto model = std::make_shared<nn::Sequential>(std::initializer_list<std::shared_ptr<nn::Module>>{
        std::make_shared<nn::Linear>(64, 256, true, gen), std::make_shared<nn::ReLU>(),
        std::make_shared<nn::Linear>(256, 256, true, gen), std::make_shared<nn::ReLU>(),
        std::make_shared<nn::Linear>(256, 10, true, gen)});
    model->eval();
    Tensor x = randn({512, 64}, gen);
    CachingAllocator& memory = allocatorFor(kCPU);
    bool recordedAsExpected = true;
    auto peakOf = [&](bool grad) -> std::int64_t {
      const std::int64_t base = memory.stats().allocated_bytes.current;
      memory.resetPeakStats();
      {
        std::unique_ptr<NoGradGuard> guard = grad ? nullptr : std::make_unique<NoGradGuard>();
        Tensor out = (*model)(x);
        recordedAsExpected = recordedAsExpected && out.requires_grad() == grad;
      }
      return memory.stats().allocated_bytes.peak - base;
    };
    const std::int64_t withGrad = peakOf(true), noGrad = peakOf(false);
    QVERIFY(recordedAsExpected);
    qInfo("evaluation peak: %lld bytes with grad, %lld bytes under no-grad", static_cast<long long>(withGrad), static_cast<long long>(noGrad));
    QVERIFY(noGrad < withGrad);
    QVERIFY(noGrad > 0);
  }

  // Issue 8, defect 3: a graph far deeper than the stack (a 200,000-op chain; 88,000 layers once
  // overflowed it) is walked by backward and freed without recursion.
  void deepGraphsAreFreedAndWalkedIteratively_data() {
    QTest::addColumn<bool>("backward");
    QTest::addColumn<bool>("twoEdges");  // each node reached twice: (y + y) * 0.5
    QTest::newRow("dropped without backward") << false << false;
    QTest::newRow("dropped after backward") << true << false;
    QTest::newRow("two edges per node, dropped") << false << true;
    QTest::newRow("two edges per node, after backward") << true << true;
  }
  void deepGraphsAreFreedAndWalkedIteratively() {
    QFETCH(bool, backward);
    QFETCH(bool, twoEdges);
    constexpr int kDepth = 200000;
    const std::int64_t baseline = memory_allocated(kCPU);
    Tensor x = tensor({3}, {1}, {.requires_grad = true});
    {
      Tensor y = x;
      for (int i = 0; i < kDepth; ++i) y = twoEdges ? (y + y) * 0.5 : y * 1.0;
      QVERIFY(y.grad_fn() != nullptr);
      if (backward) {
        y.sum().backward();
        QCOMPARE(x.grad().item(), 1.0);  // d/dx of x * 1 * 1 * ... (or of ((x + x) / 2) ...)
      }
    }  // the whole graph is released here
    x.set_grad(Tensor());
    QCOMPARE(memory_allocated(kCPU), baseline + static_cast<std::int64_t>(CachingAllocator::kMinBlockSize));  // x alone
    (x * 2.0).sum().backward();  // the engine goes on working
    QCOMPARE(x.grad().item(), 2.0);
  }
};

QTEST_GUILESS_MAIN(TestAutograd)
#include "test_autograd.moc"
