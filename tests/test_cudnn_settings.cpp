// torch.backends.cudnn in GPU Lab (engine/runtime/cuda_runtime.h, engine/kernels/conv/cuda.cu):
// benchmark, deterministic and allow_tf32 with PyTorch's defaults, per process and settable without a
// GPU; and, on a GPU, the algorithm cache and its records (cudnnChoices): one choice per pass and shape,
// timed trials in benchmark mode (-1 from the heuristics), exactly one chosen, none added for a shape
// already seen, only deterministic algorithms -- and bit-identical weight gradients -- when
// deterministic is on.
#include <cstring>
#include <set>
#include <stdexcept>
#include <thread>

#include "engine/runtime/cuda_runtime.h"
#include "test_util.h"

using namespace gpulab;

namespace {

// Sets the three cuDNN flags for a scope, restoring the previous values.
class CudnnFlags {
 public:
  CudnnFlags(bool benchmark, bool deterministic, bool tf32 = true)
      : benchmark_(cuda::cudnnBenchmark()), deterministic_(cuda::cudnnDeterministic()), tf32_(cuda::cudnnAllowTf32()) {
    cuda::setCudnnBenchmark(benchmark);
    cuda::setCudnnDeterministic(deterministic);
    cuda::setCudnnAllowTf32(tf32);
  }
  ~CudnnFlags() {
    cuda::setCudnnBenchmark(benchmark_);
    cuda::setCudnnDeterministic(deterministic_);
    cuda::setCudnnAllowTf32(tf32_);
  }
  CudnnFlags(const CudnnFlags&) = delete;
  CudnnFlags& operator=(const CudnnFlags&) = delete;

 private:
  bool benchmark_, deterministic_, tf32_;
};

struct Grads {
  Tensor x, w;
};

// conv2d forward and backward on cuda:0 (input and weight both need their gradient, so all three
// passes run); returns the gradients on the CPU.
Grads convStep(const Shape& input, const Shape& weight, std::uint64_t seed, std::int64_t padding = 1) {
  Generator g(seed);
  const Device gpu = test::cudaDevice();
  Tensor x = randn(input, g).to(gpu).requires_grad_(true);
  Tensor w = (randn(weight, g) * 0.1).to(gpu).requires_grad_(true);
  conv2d(x, w, Tensor(), 1, padding).sum().backward();
  cuda::synchronize(0);
  return {x.grad().cpu(), w.grad().cpu()};
}

int chosenCount(const cuda::ConvAlgorithmChoice& c) {
  int n = 0;
  for (const auto& t : c.trials) n += t.chosen ? 1 : 0;
  return n;
}

const cuda::ConvAlgorithmTrial& chosenTrial(const cuda::ConvAlgorithmChoice& c) {
  for (const auto& t : c.trials)
    if (t.chosen) return t;
  throw std::runtime_error("no trial chosen");
}

QString describe(const cuda::ConvAlgorithmChoice& c) {
  QString text = QString::fromStdString(c.pass + " " + c.shape + " (" + c.how + ")");
  for (const auto& t : c.trials)
    text += QString("\n  %1 %2 ms, %3 B%4%5: %6")
                .arg(QString::fromStdString(t.algorithm))
                .arg(t.milliseconds)
                .arg(static_cast<qulonglong>(t.workspace))
                .arg(t.deterministic ? ", deterministic" : "")
                .arg(t.chosen ? ", CHOSEN" : "")
                .arg(QString::fromStdString(t.status));
  return text;
}

}  // namespace

class TestCudnnSettings : public QObject {
  Q_OBJECT

 private slots:
  // First, before any test changes them: torch.backends.cudnn.benchmark False, deterministic False,
  // allow_tf32 True (unlike torch.backends.cuda.matmul.allow_tf32, False since PyTorch 1.12).
  void defaultsArePyTorchs() {
    QCOMPARE(cuda::cudnnBenchmark(), false);
    QCOMPARE(cuda::cudnnDeterministic(), false);
    QCOMPARE(cuda::cudnnAllowTf32(), true);
    QCOMPARE(cuda::allowTf32(), false);
  }

  // Process-wide flags, settable with or without a GPU, independent of each other and of matmul's TF32.
  void flagsAreSettableWithoutGpu() {
    {
      const CudnnFlags flags(true, true, false);
      QCOMPARE(cuda::cudnnBenchmark(), true);
      QCOMPARE(cuda::cudnnDeterministic(), true);
      QCOMPARE(cuda::cudnnAllowTf32(), false);
      QCOMPARE(cuda::allowTf32(), false);
      cuda::setCudnnBenchmark(false);
      QCOMPARE(cuda::cudnnBenchmark(), false);
      QCOMPARE(cuda::cudnnDeterministic(), true);
      // Another thread sees the same flags (they are per process, not per thread).
      bool seen = true;
      std::thread([&] { seen = cuda::cudnnBenchmark() || !cuda::cudnnDeterministic() || cuda::cudnnAllowTf32(); }).join();
      QCOMPARE(seen, false);
    }
    QCOMPARE(cuda::cudnnBenchmark(), false);
    QCOMPARE(cuda::cudnnDeterministic(), false);
    QCOMPARE(cuda::cudnnAllowTf32(), true);
  }

  // Without a GPU there is nothing to show and nothing to forget; clearing never throws.
  void choicesEmptyWithoutGpu() {
    cuda::clearCudnnChoices(0);
    QVERIFY(cuda::cudnnChoices(0).empty());
    QVERIFY(cuda::cudnnChoices(7).empty());
    cuda::clearCudnnChoices(7);
  }

  // Benchmark mode: the first forward and backward of a shape record one choice per pass, each with
  // timed trials and exactly one chosen; the same shape again adds none; a new shape adds its own.
  void benchmarkRecordsOneChoicePerPassAndShape() {
    if (!cuda::isAvailable()) QSKIP("no CUDA device");
    const CudnnFlags flags(true, false);
    cuda::clearCudnnChoices(0);
    QVERIFY(cuda::cudnnChoices(0).empty());
    convStep({4, 3, 16, 16}, {8, 3, 3, 3}, 1);
    auto choices = cuda::cudnnChoices(0);
    QCOMPARE(choices.size(), std::size_t{3});
    std::set<std::string> passes;
    for (const auto& c : choices) {
      passes.insert(c.pass);
      QCOMPARE(QString::fromStdString(c.how), QString("benchmark"));
      QVERIFY2(c.shape.find("input [4, 3, 16, 16], weight [8, 3, 3, 3]") != std::string::npos, c.shape.c_str());
      QVERIFY2(chosenCount(c) == 1, qPrintable(describe(c)));
      QVERIFY(c.searchMilliseconds > 0);
      const auto& chosen = chosenTrial(c);
      QVERIFY2(chosen.milliseconds >= 0, qPrintable(describe(c)));  // timed by cudnnFind
      QCOMPARE(QString::fromStdString(chosen.status), QString("ok"));
      QVERIFY2(chosen.algorithm.rfind("CUDNN_CONVOLUTION_", 0) == 0, chosen.algorithm.c_str());
      for (const auto& t : c.trials) QVERIFY(!t.algorithm.empty() && !t.status.empty());
    }
    QCOMPARE(passes, (std::set<std::string>{"forward", "backward data", "backward filter"}));

    convStep({4, 3, 16, 16}, {8, 3, 3, 3}, 2);  // the same shape, other values: from the cache
    QCOMPARE(cuda::cudnnChoices(0).size(), std::size_t{3});

    Generator g(3);
    const Tensor x = randn({4, 3, 20, 20}, g).to(test::cudaDevice()), w = randn({8, 3, 3, 3}, g).to(test::cudaDevice());
    conv2d(x, w, Tensor(), 1, 1);  // a new shape, forward only
    cuda::synchronize(0);
    choices = cuda::cudnnChoices(0);
    QCOMPARE(choices.size(), std::size_t{4});
    QCOMPARE(QString::fromStdString(choices.back().pass), QString("forward"));
    QVERIFY2(choices.back().shape.find("input [4, 3, 20, 20]") != std::string::npos, choices.back().shape.c_str());
    QCOMPARE(chosenCount(choices.back()), 1);
  }

  // Heuristics mode (the default): the ranking is cuDNN's guess, nothing is timed (-1).
  void heuristicsRecordNoTimes() {
    if (!cuda::isAvailable()) QSKIP("no CUDA device");
    const CudnnFlags flags(false, false);
    cuda::clearCudnnChoices(0);
    convStep({2, 4, 12, 12}, {6, 4, 3, 3}, 4);
    const auto choices = cuda::cudnnChoices(0);
    QCOMPARE(choices.size(), std::size_t{3});
    for (const auto& c : choices) {
      QCOMPARE(QString::fromStdString(c.how), QString("heuristics"));
      QVERIFY2(chosenCount(c) == 1, qPrintable(describe(c)));
      for (const auto& t : c.trials) QCOMPARE(t.milliseconds, -1.0);
    }
    // Forgetting drops the cache too: the same shape is chosen (and recorded) again.
    cuda::clearCudnnChoices(0);
    QVERIFY(cuda::cudnnChoices(0).empty());
    convStep({2, 4, 12, 12}, {6, 4, 3, 3}, 4);
    QCOMPARE(cuda::cudnnChoices(0).size(), std::size_t{3});
  }

  // deterministic on, with and without benchmark: every algorithm that ran is deterministic, and two
  // backward passes from the same values give bit-identical gradients (the batch is large enough that
  // cuDNN's fastest weight-gradient algorithms, which sum with atomics, would be in the running).
  void deterministicChoosesDeterministicAlgorithms_data() {
    QTest::addColumn<bool>("benchmark");
    QTest::newRow("heuristics") << false;
    QTest::newRow("benchmark") << true;
  }
  void deterministicChoosesDeterministicAlgorithms() {
    if (!cuda::isAvailable()) QSKIP("no CUDA device");
    QFETCH(bool, benchmark);
    const CudnnFlags flags(benchmark, true);
    cuda::clearCudnnChoices(0);
    const Grads a = convStep({32, 16, 28, 28}, {32, 16, 3, 3}, 5);
    const Grads b = convStep({32, 16, 28, 28}, {32, 16, 3, 3}, 5);
    const auto choices = cuda::cudnnChoices(0);
    QCOMPARE(choices.size(), std::size_t{3});
    for (const auto& c : choices) {
      QVERIFY2(chosenCount(c) == 1, qPrintable(describe(c)));
      QVERIFY2(chosenTrial(c).deterministic, qPrintable(describe(c)));
      QVERIFY2(c.shape.find("deterministic") != std::string::npos, c.shape.c_str());
    }
    const auto wa = a.w.toVector<float>(), wb = b.w.toVector<float>();
    QCOMPARE(wa.size(), wb.size());
    QVERIFY2(std::memcmp(wa.data(), wb.data(), wa.size() * sizeof(float)) == 0, "weight gradients differ between runs");
    const auto xa = a.x.toVector<float>(), xb = b.x.toVector<float>();
    QVERIFY2(std::memcmp(xa.data(), xb.data(), xa.size() * sizeof(float)) == 0, "input gradients differ between runs");
  }

  // Settings are part of the key: the same shape under other flags is chosen (and recorded) anew.
  void settingsArePartOfTheKey() {
    if (!cuda::isAvailable()) QSKIP("no CUDA device");
    cuda::clearCudnnChoices(0);
    {
      const CudnnFlags flags(false, false, true);
      convStep({2, 3, 10, 10}, {4, 3, 3, 3}, 6);
    }
    {
      const CudnnFlags flags(false, false, false);
      convStep({2, 3, 10, 10}, {4, 3, 3, 3}, 6);
    }
    const auto choices = cuda::cudnnChoices(0);
    QCOMPARE(choices.size(), std::size_t{6});
    QVERIFY(choices[0].shape.find("TF32 allowed") != std::string::npos);
    QVERIFY(choices[3].shape.find("no TF32") != std::string::npos);
  }
};

QTEST_GUILESS_MAIN(TestCudnnSettings)
#include "test_cudnn_settings.moc"
