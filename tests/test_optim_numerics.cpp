// Numerics against PyTorch (issue 11): gelu's tanh approximation, Adam/AdamW with amsgrad, AdamW's
// default weight decay, and the softmax family at extreme inputs. The expected values were computed
// once with torch 1.13 (/usr/bin/python3) by the snippets in the comments and pasted here; the
// engine must give them to a few float32 ulps.
#include <bit>
#include <cstdint>
#include <limits>

#include "engine/autograd/node.h"
#include "engine/core/errors.h"
#include "engine/kernels/backend.h"
#include "engine/kernels/functors.h"
#include "engine/memory/memory_events.h"
#include "engine/nn/layers.h"
#include "engine/optim/optimizer.h"
#include "test_util.h"

using namespace gpulab;

namespace {
constexpr float kInf = std::numeric_limits<float>::infinity();
constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();

// Distance in units in the last place: how many floats lie between a and b (0 when equal, and when
// both are NaN or the same infinity).
std::int64_t ulpDistance(float a, float b) {
  if (a != a || b != b) return (a != a && b != b) ? 0 : std::numeric_limits<std::int64_t>::max();
  if (a == b) return 0;
  auto ordered = [](float f) {
    const auto bits = static_cast<std::int64_t>(std::bit_cast<std::int32_t>(f));
    return bits < 0 ? std::int64_t{INT32_MIN} - bits : bits;  // monotonic in f, -0 and +0 adjacent
  };
  const std::int64_t d = ordered(a) - ordered(b);
  return d < 0 ? -d : d;
}

void compareUlps(const Tensor& actual, const std::vector<float>& expected, std::int64_t maxUlps) {
  const auto got = actual.toVector<float>();
  QCOMPARE(got.size(), expected.size());
  for (std::size_t i = 0; i < got.size(); ++i) {
    const std::int64_t d = ulpDistance(got[i], expected[i]);
    QVERIFY2(d <= maxUlps, qPrintable(QString("element %1: %2 vs PyTorch's %3 (%4 ulps apart)")
                                          .arg(i).arg(double(got[i]), 0, 'g', 9).arg(double(expected[i]), 0, 'g', 9).arg(d)));
  }
}

// Gradients fed to the optimizers, one row per step: large first, then small, so that amsgrad's
// max_exp_avg_sq stays above exp_avg_sq for some elements.
const std::vector<std::vector<float>> kGrads = {
    {1.0f, -2.0f, 0.5f}, {0.1f, 3.0f, -0.2f}, {0.01f, -0.05f, 0.02f}, {2.0f, 0.0f, -1e-3f}, {0.5f, 0.5f, 0.5f}};

// An optimizer run over kGrads from p = (0.5, -1.5, 3), with PyTorch's parameter after each step.
struct AdamCase {
  const char* name;
  bool decoupled;  // AdamW
  optim::AdamOptions options;
  std::vector<std::vector<float>> expected;
};
const std::vector<AdamCase>& adamCases() {
  static const std::vector<AdamCase> cases = {
      // torch.optim.Adam([p], lr=.1, weight_decay=.1, amsgrad=True)
      {"adam_amsgrad", false, {.lr = 0.1, .weight_decay = 0.1, .amsgrad = true},
       {{0.4000000059604645f, -1.399999976158142f, 2.9000000953674316f},
        {0.32374292612075806f, -1.419241189956665f, 2.825091600418091f},
        {0.26228728890419006f, -1.4306693077087402f, 2.7484042644500732f},
        {0.18746981024742126f, -1.4377018213272095f, 2.6709015369415283f},
        {0.11372440308332443f, -1.4490180015563965f, 2.5856611728668213f}}},
      // torch.optim.AdamW([p], lr=.1, amsgrad=True): weight_decay left at its default 0.01
      {"adamw_amsgrad", true, {.lr = 0.1, .amsgrad = true},
       {{0.3995000123977661f, -1.3984999656677246f, 2.8970000743865967f},
        {0.3250194489955902f, -1.4218716621398926f, 2.8595423698425293f},
        {0.2668222486972809f, -1.4387016296386719f, 2.8276126384735107f},
        {0.19334468245506287f, -1.4522062540054321f, 2.8010923862457275f},
        {0.12086108326911926f, -1.4707801342010498f, 2.746476650238037f}}},
      // torch.optim.AdamW([p], lr=.1): the first step, 0.5 * (1 - 0.1 * 0.01) - 0.1, shows the 0.01
      // weight decay that AdamW keeps when only the learning rate is given
      {"adamw_lr_only", true, {.lr = 0.1},
       {{0.3995000123977661f, -1.3984999656677246f, 2.8970000743865967f},
        {0.3250194489955902f, -1.4218716621398926f, 2.8595423698425293f},
        {0.26679614186286926f, -1.438709020614624f, 2.8276126384735107f},
        {0.19331860542297363f, -1.4522271156311035f, 2.8010807037353516f},
        {0.12083503603935242f, -1.4708009958267212f, 2.746464967727661f}}},
  };
  return cases;
}
}  // namespace

class TestOptimNumerics : public QObject {
  Q_OBJECT

 private slots:
  // x = torch.tensor([-6., -3., -1.5, -.5, 0., .25, 1., 2.5, 8.], requires_grad=True)
  // y = F.gelu(x, approximate='tanh'); y.backward(torch.ones_like(y)); y, x.grad
  void geluTanhMatchesPyTorch() {
    Tensor x = tensor(std::vector<float>{-6.0f, -3.0f, -1.5f, -0.5f, 0.0f, 0.25f, 1.0f, 2.5f, 8.0f}, {9}, {.requires_grad = true});
    Tensor y = gelu(x, "tanh");
    compareUlps(y, {-0.0f, -0.0036374330520629883f, -0.10042843222618103f, -0.1542859971523285f, 0.0f, 0.14967535436153412f,
                    0.8411920070648193f, 2.4849157333374023f, 8.0f},
                4);
    y.sum().backward();
    // The backward cancels for x << 0 (1 + tanh(u) and 1 - tanh(u)^2 with tanh(u) near -1), so tanh's
    // last-ulp differences between libm and PyTorch's vectorised tanh grow there: at x = -3 PyTorch's
    // float32 gradient is itself 140 ulps from its float64 one (-0.0115841666). Hence a tolerance, not ulps.
    GPULAB_COMPARE_TENSORS(x.grad(),
                           tensor({0.0f, -0.011584296822547913f, -0.12771081924438477f, 0.1326301097869873f, 0.5f,
                                   0.6953541040420532f, 1.0829640626907349f, 1.0379517078399658f, 1.0f},
                                  {9}),
                           1e-7, 1e-5);
    QCOMPARE(y.grad_fn()->name(), std::string("GeluBackward0"));
  }

  void geluApproximateIsCheckedAndTheModuleCarriesIt() {
    Tensor x = tensor(std::vector<float>{-1.0f, 0.5f, 2.0f}, {3});
    GPULAB_COMPARE_TENSORS(gelu(x, "none"), gelu(x), 0, 0);
    QVERIFY((gelu(x, "tanh") - gelu(x)).abs().max().item() > 0);  // a different function
    try {
      gelu(x, "fast");
      QFAIL("an unknown approximate must raise");
    } catch (const Error& e) {
      QCOMPARE(QString(e.what()), QString("approximate argument must be either none or tanh."));  // PyTorch's text
    }
    nn::GELU exact, approx("tanh"), unknown("erf");
    QCOMPARE(QString::fromStdString(exact.repr()), QString("GELU(approximate='none')"));
    QCOMPARE(QString::fromStdString(approx.repr()), QString("GELU(approximate='tanh')"));
    GPULAB_COMPARE_TENSORS(approx(x), gelu(x, "tanh"), 0, 0);
    QVERIFY_THROWS_EXCEPTION(Error, unknown(x));  // PyTorch, too, raises when the module runs
  }

  // grads = [[1., -2., .5], [.1, 3., -.2], [.01, -.05, .02], [2., 0., -1e-3], [.5, .5, .5]]
  // p = torch.tensor([.5, -1.5, 3.], requires_grad=True); opt = <the row's optimizer>
  // for g in grads: p.grad = torch.tensor(g); opt.step(); print(p)
  void adamFamilyMatchesPyTorch_data() {
    QTest::addColumn<int>("index");
    for (int i = 0; i < static_cast<int>(adamCases().size()); ++i) QTest::newRow(adamCases()[static_cast<std::size_t>(i)].name) << i;
  }

  void adamFamilyMatchesPyTorch() {
    QFETCH(int, index);
    const AdamCase& c = adamCases()[static_cast<std::size_t>(index)];
    Tensor p = tensor(std::vector<float>{0.5f, -1.5f, 3.0f}, {3}, {.requires_grad = true});
    std::unique_ptr<optim::Optimizer> opt;
    if (c.decoupled) opt = std::make_unique<optim::AdamW>(std::vector<Tensor>{p}, c.options);
    else opt = std::make_unique<optim::Adam>(std::vector<Tensor>{p}, c.options);
    for (std::size_t t = 0; t < kGrads.size(); ++t) {
      p.set_grad(tensor(kGrads[t], {3}));
      opt->step();
      compareUlps(p.detach(), c.expected[t], 4);
    }
  }

  // A float32 parameter of more than eight elements is updated eight at a time on a CPU with AVX
  // (kernels/optim/cpu.cpp): it must give what fn::AdamUpdateT gives one element at a time, bit for bit
  // (the same operations, in the same order, each rounded once; the build's baseline target has no fused
  // multiply-add to contract the scalar form with), with and without weight decay, L2 and decoupled, and
  // for the elements past the last full group of eight.
  void adamEightAtATimeGivesTheScalarUpdatesBits() {
    Generator gen(5);
    const std::int64_t n = 1003;
    for (const auto& [weightDecay, decoupled] : {std::pair{0.0, false}, std::pair{0.01, false}, std::pair{0.01, true}}) {
      AdamHyper h;
      h.lr = 3e-3;
      h.weight_decay = weightDecay;
      h.decoupled_weight_decay = decoupled;
      h.step = 7;
      const Tensor p = randn({n}, gen), g = randn({n}, gen), m = randn({n}, gen) * 0.1, v = randn({n}, gen).abs() * 0.01;
      std::vector<float> ps(p.data<float>(), p.data<float>() + n), ms(m.data<float>(), m.data<float>() + n),
          vs(v.data<float>(), v.data<float>() + n);
      const auto update = fn::makeAdamUpdate<float>(h);
      for (std::int64_t i = 0; i < n; ++i) update(ps[i], g.data<float>()[i], ms[i], vs[i], nullptr);
      cpuBackend().adamStep(p, g, m, v, nullptr, h);
      for (std::int64_t i = 0; i < n; ++i) {
        const QString at = QString("weight decay %1, decoupled %2, element %3").arg(weightDecay).arg(decoupled).arg(i);
        QVERIFY2(std::bit_cast<std::uint32_t>(p.data<float>()[i]) == std::bit_cast<std::uint32_t>(ps[i]), qPrintable(at + ": param"));
        QVERIFY2(std::bit_cast<std::uint32_t>(m.data<float>()[i]) == std::bit_cast<std::uint32_t>(ms[i]), qPrintable(at + ": exp_avg"));
        QVERIFY2(std::bit_cast<std::uint32_t>(v.data<float>()[i]) == std::bit_cast<std::uint32_t>(vs[i]), qPrintable(at + ": exp_avg_sq"));
      }
    }
  }

  // torch.optim.AdamW([p]) / torch.optim.Adam([p]) and one step with a zero gradient: only AdamW's
  // decay (lr 1e-3, weight_decay 0.01) moves p.
  void defaultConstructedAdamAndAdamWUsePyTorchsWeightDecay() {
    Tensor p = tensor(std::vector<float>{0.5f, -1.5f, 3.0f}, {3}, {.requires_grad = true});
    optim::AdamW adamw({p});
    p.set_grad(zeros({3}));
    adamw.step();
    compareUlps(p.detach(), {0.49999499320983887f, -1.4999849796295166f, 2.999969959259033f}, 1);
    Tensor q = tensor(std::vector<float>{0.5f, -1.5f, 3.0f}, {3}, {.requires_grad = true});
    optim::Adam adam({q});
    q.set_grad(zeros({3}));
    adam.step();
    compareUlps(q.detach(), {0.5f, -1.5f, 3.0f}, 0);
    // An explicit weight_decay wins, 0 included.
    Tensor r = tensor(std::vector<float>{0.5f, -1.5f, 3.0f}, {3}, {.requires_grad = true});
    optim::AdamW noDecay({r}, {.weight_decay = 0.0});
    r.set_grad(zeros({3}));
    noDecay.step();
    compareUlps(r.detach(), {0.5f, -1.5f, 3.0f}, 0);
  }

  // max_exp_avg_sq is optimizer state like exp_avg and exp_avg_sq: one more tensor, tagged so.
  void amsgradStateIsTaggedOptimizerState() {
    auto stateAllocations = [](bool amsgrad) {
      Tensor p = tensor(std::vector<float>{0.5f, -1.5f, 3.0f}, {3}, {.requires_grad = true});
      optim::Adam opt({p}, {.amsgrad = amsgrad});
      p.set_grad(ones({3}));
      MemoryEventRecorder recorder(kCPU);
      opt.step();
      int n = 0;
      for (const MemoryEvent& e : recorder.drain())
        if (e.kind == MemoryEventKind::Allocate && e.category == MemoryCategory::OptimizerState) ++n;
      return n;
    };
    const int plain = stateAllocations(false);
    QCOMPARE(stateAllocations(true), plain + 1);
  }

  // X = torch.tensor(rows); F.softmax(X, 1), F.log_softmax(X, 1),
  // F.cross_entropy(X, torch.tensor([3, 1, 0, 2, 1, 2, 0, 1, 1, 0]), reduction='none')
  // Before the fix log_softmax computed x - (max + log(sum)), which rounds log(sum) to max's ulp: row
  // 0 gave -0.3134765625 for -0.31326166 (about 700 ulps), row 2 (1e38) gave 0 for -0.6931472.
  void softmaxFamilyAtExtremeInputsMatchesPyTorch() {
    const std::vector<float> rows = {
        1e4f, -1e4f, 0.0f, 9999.0f,                 // large logits
        88.0f, 89.0f, -88.0f, 0.0f,                 // exp's float32 edge: exp(-177) underflows
        1e38f, 0.0f, -1e38f, 1e38f,                 // near FLT_MAX
        -kInf, 0.0f, 1.0f, -kInf,                   // masked entries
        1000.0f, 1000.0f, 1000.0f, 1000.0f,         // all equal and large
        1e-45f, 1e-40f, -1e-41f, 0.0f,              // denormals
        -1e4f, -1e4f + 1, -1e4f + 2, -1e4f + 3,     // large negative, ulp 1e-3
        3e4f, 3e4f - 0.5f, -3e4f, 3e4f - 20,        // a gap wider than exp's range
        kInf, 1.0f, 0.0f, -kInf,                    // +inf: NaN, as PyTorch
        -kInf, -kInf, -kInf, -kInf,                 // all masked: NaN, as PyTorch
    };
    const Tensor x = tensor(rows, {10, 4});
    compareUlps(x.softmax(1),
                {0.7310585975646973f, 0.0f, 0.0f, 0.2689414322376251f, 0.2689414322376251f, 0.7310585975646973f, 0.0f,
                 1.6283340389177953e-39f, 0.5f, 0.0f, 0.0f, 0.5f, 0.0f, 0.2689414322376251f, 0.7310585975646973f, 0.0f, 0.25f,
                 0.25f, 0.25f, 0.25f, 0.25f, 0.25f, 0.25f, 0.25f, 0.032058604061603546f, 0.08714432269334793f,
                 0.23688283562660217f, 0.6439142823219299f, 0.622459352016449f, 0.3775406777858734f, 0.0f,
                 1.2829843853978673e-09f, kNaN, kNaN, kNaN, kNaN, kNaN, kNaN, kNaN, kNaN},
                4);
    compareUlps(x.log_softmax(1),
                {-0.31326165795326233f, -20000.3125f, -10000.3134765625f, -1.31326162815094f, -1.31326162815094f,
                 -0.31326165795326233f, -177.31326293945312f, -89.31326293945312f, -0.6931471824645996f,
                 -9.999999680285692e+37f, -1.9999999360571385e+38f, -0.6931471824645996f, -kInf, -1.31326162815094f,
                 -0.31326165795326233f, -kInf, -1.3862943649291992f, -1.3862943649291992f, -1.3862943649291992f,
                 -1.3862943649291992f, -1.3862943649291992f, -1.3862943649291992f, -1.3862943649291992f,
                 -1.3862943649291992f, -3.4401895999908447f, -2.4401895999908447f, -1.4401897192001343f,
                 -0.4401896893978119f, -0.4740769863128662f, -0.9740769863128662f, -60000.47265625f, -20.474077224731445f,
                 kNaN, kNaN, kNaN, kNaN, kNaN, kNaN, kNaN, kNaN},
                4);
    // Row by row with reduction 'sum': reduction 'none' picks the target with a one-hot product, which
    // turns the -inf row's loss into NaN (a documented limitation of nll_loss, not of log_softmax).
    const std::vector<std::int64_t> target = {3, 1, 0, 2, 1, 2, 0, 1, 1, 0};
    const std::vector<float> expected = {1.31326162815094f, 0.31326165795326233f, 0.6931471824645996f, 0.31326165795326233f,
                                         1.3862943649291992f, 1.3862943649291992f, 3.4401895999908447f, 0.9740769863128662f,
                                         kNaN, kNaN};
    for (std::int64_t r = 0; r < 10; ++r) {
      const Tensor loss = cross_entropy(x.slice(0, r, r + 1), tensor(std::vector<std::int64_t>{target[static_cast<std::size_t>(r)]}, {1}),
                                        Reduction::Sum);
      compareUlps(loss, {expected[static_cast<std::size_t>(r)]}, 4);
    }
  }

  // The same inputs on the GPU give the CPU reference's values (the same formula in the kernel).
  void softmaxFamilyAtExtremeInputsMatchesOnCuda() {
    if (!test::cudaUsable()) QSKIP("no CUDA device");
    const Tensor x = tensor(std::vector<float>{1e4f, -1e4f, 0.0f, 9999.0f, 1e38f, 0.0f, -1e38f, 1e38f, -kInf, 0.0f, 1.0f, -kInf,
                                               1e-45f, 1e-40f, -1e-41f, 0.0f},
                            {4, 4});
    const Tensor xg = x.to(test::cudaDevice());
    compareUlps(xg.softmax(1).cpu(), x.softmax(1).toVector<float>(), 4);
    compareUlps(xg.log_softmax(1).cpu(), x.log_softmax(1).toVector<float>(), 4);
  }
};

QTEST_GUILESS_MAIN(TestOptimNumerics)
#include "test_optim_numerics.moc"
