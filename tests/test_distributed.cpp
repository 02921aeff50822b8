// NCCL collectives (engine/distributed/distributed.h). Everywhere: where NCCL cannot run, ncclStatus()
// says exactly why (no CUDA module, built without NCCL, fewer than two GPUs) and every collective
// raises an Error naming NCCL and that reason -- before it looks at a tensor, as PyTorch's
// "Default process group has not been initialized" does. With two GPUs or more: all_reduce and
// broadcast against the CPU reference, and the argument checks, each naming what is wrong.
#include <algorithm>
#include <string>
#include <vector>

#include "engine/core/errors.h"
#include "engine/distributed/distributed.h"
#include "engine/ops/ops.h"
#include "engine/runtime/cuda_runtime.h"
#include "engine/runtime/emulated_gpu.h"
#include "test_util.h"

using namespace gpulab;
using distributed::ReduceOp;
using test::textOf;

Q_DECLARE_METATYPE(gpulab::DType)
Q_DECLARE_METATYPE(gpulab::distributed::ReduceOp)

namespace {

int gpuCount() { return cuda::deviceCount(); }
Device gpu(int index) { return Device(DeviceType::CUDA, index); }

// GPU g's input: small multiples of 1/4 (exact in bfloat16 and float16, and so are their sums across a
// few GPUs), different on every GPU and along the tensor, so a collective that did nothing, reduced
// the wrong buffers or only part of them fails. 17 x 241: no power of two, so NCCL's tail is covered.
const Shape kShape{17, 241};
std::vector<float> inputValues(int g) {
  std::vector<float> v(17 * 241);
  for (std::size_t i = 0; i < v.size(); ++i) v[i] = static_cast<float>(static_cast<int>(i % 23) - 11) * (g + 1) + 0.25f * g;
  return v;
}

// The message of the Error `f` throws ("" when it throws nothing; another exception type fails).
std::string errorOf(const std::function<void()>& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return {};
}

// Documented tolerances: the inputs and the sums are exact; the mean over 3+ GPUs rounds once in the
// tensor's dtype (bfloat16: 8 significant bits, float16: 11).
double rtolOf(DType dtype) {
  switch (dtype) {
    case DType::BFloat16: return 1.0 / 128;
    case DType::Float16: return 1.0 / 1024;
    default: return 1e-6;
  }
}

}  // namespace

class TestDistributed : public QObject {
  Q_OBJECT

 private slots:
  // --- where NCCL cannot run (this machine without two GPUs) -------------------------------------

  void statusSaysWhyNcclIsUnavailable() {
    if (distributed::ncclAvailable()) QSKIP("NCCL is available here: the GPU cases below run instead");
    const std::string status = distributed::ncclStatus();
    const cuda::Availability a = cuda::availability();
    if (!cuda::compiledWithCuda() || a.reason.find("CUDA module") != std::string::npos) {
      // No module: the loader's own reason, word for word.
      QCOMPARE(QString::fromStdString(status), QString::fromStdString("no CUDA module: " + a.reason));
    } else if (!GPULAB_EXPECT_NCCL) {
      QCOMPARE(QString::fromStdString(status), QString("GPU Lab was built without NCCL"));
    } else if (gpuCount() < 2) {
      const std::string expected = "needs at least two GPUs; this machine has " + std::to_string(gpuCount());
      QVERIFY2(status.rfind(expected, 0) == 0, status.c_str());
      // With no GPU at all, why there is none (here: the driver's reason from discovery).
      if (gpuCount() == 0) QVERIFY2(status.find(a.reason) != std::string::npos && !a.reason.empty(), status.c_str());
    } else {
      // Two GPUs and a module built with NCCL, yet unavailable: the library itself is missing or old.
      QVERIFY2(status.find("NCCL") != std::string::npos &&
                   (status.find("could not be loaded") != std::string::npos || status.find("too old") != std::string::npos),
               status.c_str());
    }
  }

  void collectivesRaiseNamingNcclAndWhy_data() {
    QTest::addColumn<int>("which");
    QTest::newRow("all_reduce Sum") << 0;
    QTest::newRow("all_reduce Avg") << 1;
    QTest::newRow("broadcast") << 2;
  }
  void collectivesRaiseNamingNcclAndWhy() {
    if (distributed::ncclAvailable()) QSKIP("NCCL is available here");
    QFETCH(int, which);
    const std::string status = distributed::ncclStatus();
    QVERIFY(!status.empty());
    // Two tensors that are fine but for their device: NCCL's availability is checked first.
    const std::vector<Tensor> tensors{ones({4}), ones({4})};
    const std::string message = errorOf([&] {
      if (which == 0) distributed::all_reduce(tensors);
      if (which == 1) distributed::all_reduce(tensors, ReduceOp::Avg);
      if (which == 2) distributed::broadcast(tensors, 0);
    });
    const std::string op = which == 2 ? "broadcast" : "all_reduce";
    QVERIFY2(message.rfind(op + ": NCCL is not available: ", 0) == 0, message.c_str());
    QVERIFY2(message.find(status) != std::string::npos, message.c_str());
    // The tensors are untouched.
    QCOMPARE(tensors[0].sum().item(), 4.0);
    QCOMPARE(tensors[1].sum().item(), 4.0);
  }

  // --- with two GPUs or more ---------------------------------------------------------------------

  void allReduceMatchesCpu_data() {
    QTest::addColumn<DType>("dtype");
    QTest::addColumn<ReduceOp>("op");
    for (DType dtype : {kFloat32, kBFloat16, kFloat16, kFloat64}) {
      QTest::newRow(qPrintable(QString::fromStdString(dtypeName(dtype)) + " Sum")) << dtype << ReduceOp::Sum;
      QTest::newRow(qPrintable(QString::fromStdString(dtypeName(dtype)) + " Avg")) << dtype << ReduceOp::Avg;
    }
  }
  void allReduceMatchesCpu() {
    if (!distributed::ncclAvailable()) QSKIP("needs two GPUs");
    QFETCH(DType, dtype);
    QFETCH(ReduceOp, op);
    const int n = std::min(gpuCount(), 2);  // two: the tolerances assume one rounding per element
    // The CPU reference, in float64 from the inputs as stored in `dtype`.
    std::vector<Tensor> inputs, onGpu;
    for (int g = 0; g < n; ++g) {
      inputs.push_back(tensor(inputValues(g), kShape, {.dtype = dtype}));
      onGpu.push_back(inputs.back().to(gpu(g)));
    }
    Tensor expected = zeros(kShape, {.dtype = kFloat64});
    for (const Tensor& t : inputs) expected = expected + t.to(kFloat64);
    if (op == ReduceOp::Avg) expected = expected * (1.0 / n);

    distributed::all_reduce(onGpu, op);

    for (int g = 0; g < n; ++g) {
      QVERIFY(onGpu[g].device() == gpu(g));
      QVERIFY(onGpu[g].dtype() == dtype);
      // .to(kCPU) is ordered after the collective on cuda:g's current stream.
      const Tensor result = onGpu[g].to(kCPU).to(kFloat64);
      GPULAB_COMPARE_TENSORS(result, expected, 1e-6, rtolOf(dtype));
    }
  }

  void broadcastCopiesRootsValues_data() {
    QTest::addColumn<DType>("dtype");
    QTest::addColumn<int>("root");
    QTest::newRow("float32 from rank 0") << kFloat32 << 0;
    QTest::newRow("bfloat16 from rank 0") << kBFloat16 << 0;
    QTest::newRow("float32 from the last rank") << kFloat32 << -1;
  }
  void broadcastCopiesRootsValues() {
    if (!distributed::ncclAvailable()) QSKIP("needs two GPUs");
    QFETCH(DType, dtype);
    QFETCH(int, root);
    const int n = std::min(gpuCount(), 2);  // two: the tolerances assume one rounding per element
    if (root < 0) root = n - 1;
    std::vector<Tensor> onGpu;
    for (int g = 0; g < n; ++g) onGpu.push_back(tensor(inputValues(g), kShape, {.dtype = dtype, .device = gpu(g)}));
    const Tensor expected = tensor(inputValues(root), kShape, {.dtype = dtype}).to(kFloat64);

    distributed::broadcast(onGpu, root);

    for (int g = 0; g < n; ++g) GPULAB_COMPARE_TENSORS(onGpu[g].to(kCPU).to(kFloat64), expected, 1e-12, 0.0);
  }

  void refusesBadArguments_data() {
    QTest::addColumn<QString>("kind");
    QTest::addColumn<QString>("expected");
    QTest::newRow("one tensor") << "one" << "all_reduce: expected one tensor per GPU, at least 2, but got 1";
    QTest::newRow("a CPU tensor") << "cpu" << "Tensors must be CUDA and dense, but tensors[1] is on cpu";
    QTest::newRow("the emulated GPU") << "emulated" << "is on the emulated GPU";
    QTest::newRow("two on one GPU") << "same" << "Duplicate GPU detected: tensors[0] and tensors[1] are both on cuda:0";
    QTest::newRow("dtypes differ") << "dtype" << "tensors[0] is float32 and tensors[1] is bfloat16";
    QTest::newRow("shapes differ") << "shape" << "tensors[0] has shape [17, 241] and tensors[1] has shape [241, 17]";
    QTest::newRow("not contiguous") << "strided" << "Tensors must be contiguous, but tensors[1] is not";
    QTest::newRow("int64") << "int64" << "unsupported dtype int64";
    QTest::newRow("broadcast root out of range") << "root" << "broadcast: root 7 is out of range";
  }
  void refusesBadArguments() {
    if (!distributed::ncclAvailable()) QSKIP("needs two GPUs");
    QFETCH(QString, kind);
    QFETCH(QString, expected);
    const Tensor a = tensor(inputValues(0), kShape, {.device = gpu(0)});
    const Tensor before = a.to(kCPU);
    std::vector<Tensor> tensors{a};
    if (kind == "cpu") tensors.push_back(ones(kShape));
    if (kind == "emulated") {
      if (!cuda::emulatedDevice()) QSKIP("the emulated GPU is off (GPULAB_EMULATED_GPU=0)");
      tensors.push_back(ones(kShape, {.device = *cuda::emulatedDevice()}));
    }
    if (kind == "same") tensors.push_back(ones(kShape, {.device = gpu(0)}));
    if (kind == "dtype") tensors.push_back(ones(kShape, {.dtype = kBFloat16, .device = gpu(1)}));
    if (kind == "shape") tensors.push_back(ones({241, 17}, {.device = gpu(1)}));
    if (kind == "strided") tensors.push_back(ones({241, 17}, {.device = gpu(1)}).t());
    if (kind == "int64") {
      tensors = {zeros(kShape, {.dtype = kInt64, .device = gpu(0)}), zeros(kShape, {.dtype = kInt64, .device = gpu(1)})};
    }
    if (kind == "root") tensors.push_back(ones(kShape, {.device = gpu(1)}));
    const std::string message = errorOf([&] {
      if (kind == "root") return distributed::broadcast(tensors, 7);
      distributed::all_reduce(tensors);
    });
    QVERIFY2(message.find(expected.toStdString()) != std::string::npos, message.c_str());
    GPULAB_COMPARE_TENSORS(a.to(kCPU), before, 1e-12, 0.0);  // nothing ran
  }
};

QTEST_GUILESS_MAIN(TestDistributed)
#include "test_distributed.moc"
