// CPU/CUDA parity: every op of the gradient-check table, forward and backward, run on the CPU (the
// reference) and on cuda:0 from the same inputs, in each floating dtype (float32, float64, float16,
// bfloat16); plus the kernels that have no gradient (random numbers, optimizer steps, conversions
// between any two dtypes, strided copies, int64 reductions, GEMM with and without TF32). Skipped when
// no GPU is usable.
//
// Both backends load elements, compute in the same math type (float for float16/bfloat16, double for
// float64) and round once on store, so what differs is only summation order (cuBLAS, tree reductions
// against the CPU's sequential double sums), CUDA's transcendental functions against glibc's (an ulp
// or two) and, in the 16-bit types, a result that lands on the other side of a rounding boundary
// (one ulp of the output dtype: 2^-10 relative for float16, 2^-7 for bfloat16), which composite ops
// (an MLP, a backward pass) carry along. Tolerances, absolute + relative:
//
//   dtype      op table, row kernels     GEMM                 large sums        randn
//   float32    1e-3  + 1e-3              1e-3 + 1e-4          1e-2 + 1e-4       1e-5 + 1e-5
//   float64    1e-9  + 1e-9              1e-10 + 1e-10        1e-8 + 1e-10      1e-5 + 1e-5 (drawn in float)
//   float16    1e-2  + 1e-2              1e-2 + 2e-3          1e-2 + 2e-3       1e-3 + 1e-3
//   bfloat16   5e-2  + 5e-2              5e-2 + 1e-2          5e-2 + 1e-2       1e-2 + 1e-2
//   TF32 (float32 GEMM with allowTf32): 5e-2 + 1e-2 (inputs rounded to a 10-bit mantissa).
//
// Convolutions (cuDNN against im2col + OpenBLAS; cuDNN picks its algorithm by heuristics -- implicit
// GEMM, Winograd, FFT -- so the summation order, and for FFT/Winograd the rounding, differ), with
// weights scaled to keep outputs of order 1:
//   float32 2e-4 + 1e-4, float64 1e-10 + 1e-10, float16 1e-2 + 1e-2, bfloat16 5e-2 + 2e-2,
//   TF32 (float32 with allowTf32) 5e-2 + 1e-2.
// Pools: max_pool2d's values and indices exact; the rest (averages, gathered gradients) at the op
// table's tolerance.
//
// Exact (0, 0) wherever the arithmetic is the same on both sides: conversions between dtypes,
// arange, rand, randint, max/argmax, and add/mul/neg/relu/maximum (one IEEE operation, then one
// rounding). To add a dtype: a row in kDTypes with its tolerances, and a column here.
#include <limits>

#include "engine/kernels/backend.h"
#include "engine/runtime/device_runtime.h"
#include "engine/core/errors.h"
#include "engine/runtime/device_memory.h"
#include "engine/optim/optimizer.h"
#include "engine/runtime/cuda_runtime.h"
#include "op_cases.h"
#include "lab_runner.h"
#include "test_util.h"

using namespace gpulab;

namespace {

struct Tolerance {
  double atol, rtol;
};
// The floating dtypes every parity test walks, with the op-table tolerance of each (see the top).
struct DTypeCase {
  const char* name;
  DType dtype;
  Tolerance ops;     // op table and row kernels (softmax, losses)
  Tolerance gemm;    // matrix products
  Tolerance sums;    // long sums
  Tolerance randn;   // normal draws (Box-Muller in float on both sides)
  Tolerance optim;   // five optimizer steps
};
const DTypeCase kDTypes[] = {
    {"float32", kFloat32, {1e-3, 1e-3}, {1e-3, 1e-4}, {1e-2, 1e-4}, {1e-5, 1e-5}, {1e-5, 1e-4}},
    {"float64", kFloat64, {1e-9, 1e-9}, {1e-10, 1e-10}, {1e-8, 1e-10}, {1e-5, 1e-5}, {1e-12, 1e-10}},
    {"float16", kFloat16, {1e-2, 1e-2}, {1e-2, 2e-3}, {1e-2, 2e-3}, {1e-3, 1e-3}, {1e-3, 1e-2}},
    {"bfloat16", kBFloat16, {5e-2, 5e-2}, {5e-2, 1e-2}, {5e-2, 1e-2}, {1e-2, 1e-2}, {1e-2, 5e-2}},
};
constexpr int kDTypeCount = static_cast<int>(std::size(kDTypes));
// Every dtype, int64 included (conversions).
const DType kAllDTypes[] = {kFloat32, kFloat64, kFloat16, kBFloat16, kInt64, kBool};

// A column "dtype" (an index into kDTypes) with one row per floating dtype.
void addDTypeRows() {
  QTest::addColumn<int>("dtype");
  for (int d = 0; d < kDTypeCount; ++d) QTest::newRow(kDTypes[d].name) << d;
}

// Sets allowTf32 for a scope (torch.backends.cuda.matmul.allow_tf32), restoring the previous value.
// TF32 for matrix products and for convolutions (two flags, as PyTorch's; convolutions default to on).
class AllowTf32Scope {
 public:
  explicit AllowTf32Scope(bool allow) : previous_(cuda::allowTf32()), previousConv_(cuda::cudnnAllowTf32()) {
    cuda::setAllowTf32(allow);
    cuda::setCudnnAllowTf32(allow);
  }
  ~AllowTf32Scope() {
    cuda::setAllowTf32(previous_);
    cuda::setCudnnAllowTf32(previousConv_);
  }
  AllowTf32Scope(const AllowTf32Scope&) = delete;
  AllowTf32Scope& operator=(const AllowTf32Scope&) = delete;

 private:
  bool previous_, previousConv_;
};

// Convolution tolerances per kDTypes row (see the top); TF32 separately.
const Tolerance kConvTolerance[] = {{2e-4, 1e-4}, {1e-10, 1e-10}, {1e-2, 1e-2}, {5e-2, 2e-2}};
const Tolerance kConvTf32Tolerance{5e-2, 1e-2};

// One convolution geometry: input (N, C, H, W), weight (K, C / groups, R, S).
struct ConvCase {
  const char* name;
  std::int64_t n, c, h, w, k, r, s, strideH, strideW, padH, padW, dilH, dilW, groups;
};
const ConvCase kConvCases[] = {
    {"3x3_pad1", 2, 3, 9, 11, 4, 3, 3, 1, 1, 1, 1, 1, 1, 1},
    {"5x3_stride2x1_pad0x1", 3, 4, 12, 10, 6, 5, 3, 2, 1, 0, 1, 1, 1, 1},
    {"3x3_dilation2_pad2", 2, 3, 13, 13, 5, 3, 3, 1, 1, 2, 2, 2, 2, 1},
    {"3x3_groups2", 2, 4, 8, 8, 6, 3, 3, 1, 1, 1, 1, 1, 1, 2},
    {"depthwise_stride2", 2, 6, 10, 10, 6, 3, 3, 2, 2, 1, 1, 1, 1, 6},
    {"1x1", 4, 16, 7, 7, 8, 1, 1, 1, 1, 0, 0, 1, 1, 1},
    {"7x7_stride2_pad3_stem", 2, 3, 32, 32, 8, 7, 7, 2, 2, 3, 3, 1, 1, 1},
    {"2x4_everything_groups3", 1, 6, 11, 14, 9, 2, 4, 3, 2, 1, 2, 2, 1, 3},
    {"wide_64ch", 2, 64, 16, 16, 32, 3, 3, 1, 1, 1, 1, 1, 1, 1},
};

Backend::Conv2dShape convShape(const ConvCase& c) {
  auto out = [](std::int64_t in, std::int64_t k, std::int64_t stride, std::int64_t pad, std::int64_t dil) {
    return (in + 2 * pad - dil * (k - 1) - 1) / stride + 1;
  };
  return {c.n, c.c, c.h, c.w, c.k, c.r, c.s, out(c.h, c.r, c.strideH, c.padH, c.dilH), out(c.w, c.s, c.strideW, c.padW, c.dilW),
          c.strideH, c.strideW, c.padH, c.padW, c.dilH, c.dilW, c.groups};
}

// One pooling geometry; out sizes follow PyTorch's rule (ceil_mode: rounded up, but the last window
// must start inside the input or its left padding). avg_pool2d runs it without dilation.
struct PoolCase {
  const char* name;
  std::int64_t n, c, h, w, kH, kW, strideH, strideW, padH, padW, dilH, dilW;
  bool ceil, countIncludePad;
};
const PoolCase kPoolCases[] = {
    {"2x2_stride2", 2, 3, 8, 8, 2, 2, 2, 2, 0, 0, 1, 1, false, true},
    {"3x3_stride2_pad1", 2, 3, 9, 10, 3, 3, 2, 2, 1, 1, 1, 1, false, true},
    {"3x3_stride1_pad1_overlapping", 1, 4, 7, 7, 3, 3, 1, 1, 1, 1, 1, 1, false, true},
    {"3x3_stride2_ceil", 2, 2, 8, 8, 3, 3, 2, 2, 0, 0, 1, 1, true, true},
    {"3x3_stride2_pad1_exclude_pad", 2, 3, 9, 9, 3, 3, 2, 2, 1, 1, 1, 1, false, false},
    {"2x3_stride1x2_pad1_ceil_exclude_pad", 1, 3, 7, 10, 2, 3, 1, 2, 1, 1, 1, 1, true, false},
    {"3x3_dilation2_pad1", 2, 2, 11, 12, 3, 3, 1, 2, 1, 1, 2, 2, false, true},
};

std::int64_t poolOut(std::int64_t in, std::int64_t k, std::int64_t stride, std::int64_t pad, std::int64_t dil, bool ceil) {
  const std::int64_t span = in + 2 * pad - dil * (k - 1) - 1;
  std::int64_t out = (ceil ? (span + stride - 1) / stride : span / stride) + 1;
  if (ceil && (out - 1) * stride >= in + pad) --out;
  return out;
}

Backend::Pool2dShape poolShape(const PoolCase& p, bool dilated) {
  const std::int64_t dh = dilated ? p.dilH : 1, dw = dilated ? p.dilW : 1;
  Backend::Pool2dShape s{p.n, p.c, p.h, p.w, poolOut(p.h, p.kH, p.strideH, p.padH, dh, p.ceil),
                         poolOut(p.w, p.kW, p.strideW, p.padW, dw, p.ceil), p.kH, p.kW, p.strideH, p.strideW, p.padH,
                         p.padW, dh, dw};
  s.countIncludePad = p.countIncludePad;
  return s;
}

}  // namespace

class TestCudaParity : public QObject {
  Q_OBJECT

 private slots:
  // Each case of the op table in each floating dtype: inputs drawn in float32 on the CPU, converted
  // to the dtype, then run on both devices.
  void opsMatchCpu_data() {
    QTest::addColumn<int>("index");
    QTest::addColumn<int>("dtype");
    const auto cases = test::opCases();
    for (int i = 0; i < static_cast<int>(cases.size()); ++i)
      for (int d = 0; d < kDTypeCount; ++d)
        QTest::newRow((cases[static_cast<std::size_t>(i)].name + "/" + kDTypes[d].name).c_str()) << i << d;
  }

  void opsMatchCpu() {
    if (!test::cudaUsable()) QSKIP("no CUDA device");
    QFETCH(int, index);
    QFETCH(int, dtype);
    const test::OpCase c = test::opCases()[static_cast<std::size_t>(index)];
    const DTypeCase& dt = kDTypes[dtype];
    auto run = [&](Device d) {
      std::vector<Tensor> inputs;
      for (const Tensor& t : test::makeInputs(c)) inputs.push_back(t.to(dt.dtype).to(d).requires_grad_(true));
      std::vector<Tensor> args = inputs;
      for (const Tensor& e : c.extra) args.push_back(e.to(d));
      Tensor out = c.fn(args);
      Generator wg(99);
      (out * randn(out.sizes(), wg).to(out.dtype()).to(d)).sum().backward();
      std::vector<Tensor> results{out.detach().cpu()};
      for (const Tensor& t : inputs) results.push_back(t.grad().cpu());
      return results;
    };
    std::vector<Tensor> cpu;
    try {
      cpu = run(kCPU);
    } catch (const NotImplementedError& e) {
      // Not available in this dtype on the CPU either: the GPU must refuse it too.
      bool refused = false;
      try {
        run(test::cudaDevice());
      } catch (const NotImplementedError&) {
        refused = true;
      }
      QVERIFY2(refused, "the CPU refuses this dtype but the GPU computes it");
      QSKIP(e.what());
    }
    const auto gpu = run(test::cudaDevice());
    QCOMPARE(gpu.size(), cpu.size());
    for (std::size_t i = 0; i < cpu.size(); ++i) {
      QCOMPARE(gpu[i].dtype(), cpu[i].dtype());
      GPULAB_COMPARE_TENSORS(gpu[i], cpu[i], dt.ops.atol, dt.ops.rtol);
    }
  }

  // torch.use_deterministic_algorithms(True): index_select's backward (index_add) adds the rows in
  // index order on the GPU, as the CPU does -- the CPU's bits, every run -- where atomics may differ
  // in the last bits from run to run. Many repeats of few indices, so that atomics would collide.
  void deterministicIndexAddMatchesTheCpuBitForBit() {
    if (!test::cudaUsable()) QSKIP("no CUDA device");
    struct Restore {
      ~Restore() { cuda::setDeterministicAlgorithms(false); }
    } restore;
    cuda::setDeterministicAlgorithms(true);
    Generator g(3);
    const Tensor source = randn({2, 7, 33}, g);
    const Tensor index = randint(0, 7, {4000}, g, {.dtype = kInt64});
    const Tensor weights = randn({2, 4000, 33}, g);
    auto gradientOn = [&](Device d) {
      const Tensor x = source.to(d).detach().requires_grad_(true);  // a leaf on each device
      (index_select(x, 1, index.to(d)) * weights.to(d)).sum().backward();
      return x.grad().cpu();
    };
    const Tensor cpu = gradientOn(kCPU), first = gradientOn(test::cudaDevice()), second = gradientOn(test::cudaDevice());
    QCOMPARE(first.toVector<float>(), cpu.toVector<float>());
    QCOMPARE(second.toVector<float>(), first.toVector<float>());
  }

  void randomNumbersAreIdenticalOnBothDevices_data() { addDTypeRows(); }
  void randomNumbersAreIdenticalOnBothDevices() {
    if (!test::cudaUsable()) QSKIP("no CUDA device");
    QFETCH(int, dtype);
    const DTypeCase& dt = kDTypes[dtype];
    const Device gpu = test::cudaDevice();
    Generator a(5), b(5);
    GPULAB_COMPARE_TENSORS(randn({1000}, a, {.dtype = dt.dtype, .device = gpu}), randn({1000}, b, {.dtype = dt.dtype}),
                           dt.randn.atol, dt.randn.rtol);
    GPULAB_COMPARE_TENSORS(rand({1000}, a, {.dtype = dt.dtype, .device = gpu}), rand({1000}, b, {.dtype = dt.dtype}), 0, 0);
    QCOMPARE(randint(0, 10, {500}, a, {.dtype = kInt64, .device = gpu}).toVector<std::int64_t>(),
             randint(0, 10, {500}, b).toVector<std::int64_t>());
    // randint into a floating tensor (the backend supports it; the op layer makes int64 only).
    Tensor ig = Tensor::empty({500}, dt.dtype, gpu), ic = Tensor::empty({500}, dt.dtype);
    backendFor(gpu).randint(ig, -7, 10, {77, 3});
    cpuBackend().randint(ic, -7, 10, {77, 3});
    GPULAB_COMPARE_TENSORS(ig.cpu(), ic, 0, 0);
    // A captured draw's counters, read by the kernel from device memory (seed 77, base offset 1000)
    // plus its own offset 3: the numbers the CPU draws at offset 1003.
    Tensor cell = tensor(std::vector<std::int64_t>{77, 1000}, {2}, {.dtype = kInt64, .device = gpu});
    const auto* cellPtr = static_cast<const std::uint64_t*>(cell.data_ptr());
    Tensor ug = Tensor::empty({500}, dt.dtype, gpu), uc = Tensor::empty({500}, dt.dtype);
    backendFor(gpu).uniform(ug, -1.0, 2.0, {0, 3, cellPtr});
    cpuBackend().uniform(uc, -1.0, 2.0, {77, 1003});
    GPULAB_COMPARE_TENSORS(ug.cpu(), uc, 0, 0);
    Tensor dg = Tensor::empty({500}, dt.dtype, gpu), mg = Tensor::empty({500}, dt.dtype, gpu);
    Tensor dc = Tensor::empty({500}, dt.dtype), mc = Tensor::empty({500}, dt.dtype);
    Tensor src = randn({500}, a).to(dt.dtype);
    backendFor(gpu).dropout(dg, mg, src.to(gpu), 0.3f, {0, 3, cellPtr});
    cpuBackend().dropout(dc, mc, src, 0.3f, {77, 1003});
    GPULAB_COMPARE_TENSORS(mg.cpu(), mc, 0, 0);
    Tensor x = randn({999}, a).to(dt.dtype);
    Generator ga(8), gb(8);
    GPULAB_COMPARE_TENSORS(dropout(x.to(gpu), 0.3, true, ga).cpu(), dropout(x, 0.3, true, gb), 0, 0);
  }

  void optimizerStepsMatch_data() {
    QTest::addColumn<QString>("optimizer");
    QTest::addColumn<int>("dtype");
    for (const char* o : {"sgd", "sgd_nesterov", "adam", "adamw", "adam_amsgrad", "adamw_amsgrad"})
      for (int d = 0; d < kDTypeCount; ++d) QTest::newRow((std::string(o) + "/" + kDTypes[d].name).c_str()) << QString(o) << d;
  }

  void optimizerStepsMatch() {
    if (!test::cudaUsable()) QSKIP("no CUDA device");
    QFETCH(QString, optimizer);
    QFETCH(int, dtype);
    const DTypeCase& dt = kDTypes[dtype];
    // Two parameters: a small one (the multi-tensor launch takes it) and one of 300000 elements
    // (launched on its own).
    auto run = [&](Device d) {
      Generator g(3);
      Tensor p = randn({257}, g).to(dt.dtype).to(d).requires_grad_(true);
      Tensor q = (randn({300000}, g) * 0.5).to(dt.dtype).to(d).requires_grad_(true);
      const std::vector<Tensor> params{p, q};
      std::unique_ptr<optim::Optimizer> opt;
      if (optimizer == "sgd") opt = std::make_unique<optim::SGD>(params, optim::SGDOptions{.lr = 0.1});
      else if (optimizer == "sgd_nesterov") opt = std::make_unique<optim::SGD>(params, optim::SGDOptions{.lr = 0.1, .momentum = 0.9, .weight_decay = 0.01, .nesterov = true});
      else if (optimizer == "adam") opt = std::make_unique<optim::Adam>(params, optim::AdamOptions{.lr = 0.01, .weight_decay = 0.1});
      else if (optimizer == "adam_amsgrad") opt = std::make_unique<optim::Adam>(params, optim::AdamOptions{.lr = 0.01, .weight_decay = 0.1, .amsgrad = true});
      else if (optimizer == "adamw_amsgrad") opt = std::make_unique<optim::AdamW>(params, optim::AdamOptions{.lr = 0.01, .amsgrad = true});
      else opt = std::make_unique<optim::AdamW>(params, optim::AdamOptions{.lr = 0.01, .weight_decay = 0.1});
      for (int step = 0; step < 5; ++step) {
        opt->zero_grad();
        ((p * p * p).sum() + (q * q * q).sum()).backward();
        opt->step();
      }
      return std::pair{p.detach().cpu(), q.detach().cpu()};
    };
    const auto [gp, gq] = run(test::cudaDevice());
    const auto [cp, cq] = run(kCPU);
    QCOMPARE(gp.dtype(), dt.dtype);
    GPULAB_COMPARE_TENSORS(gp, cp, dt.optim.atol, dt.optim.rtol);
    GPULAB_COMPARE_TENSORS(gq, cq, dt.optim.atol, dt.optim.rtol);
  }

  // Python's // and % (floor_divide, remainder; floor_divide has no gradient, so no op-table row): one
  // functor on both devices (engine/kernels/functors.h), so exact (0, 0) -- fmod is exact in IEEE
  // arithmetic and each correction after it one operation, rounded once. Contiguous, broadcast
  // (strided), number and number-first operands, in every dtype with these kernels, with the edges
  // among the inputs: signed zeros, infinities, NaN, a zero divisor for floats, INT64_MIN // -1.
  void floorDivideAndRemainderMatchCpu_data() {
    QTest::addColumn<int>("dtype");
    for (const DType d : {kFloat32, kFloat64, kFloat16, kBFloat16, kInt64}) QTest::newRow(dtypeName(d).c_str()) << static_cast<int>(d);
  }
  void floorDivideAndRemainderMatchCpu() {
    if (!test::cudaUsable()) QSKIP("no CUDA device");
    QFETCH(int, dtype);
    const DType dt = static_cast<DType>(dtype);
    const Device gpu = test::cudaDevice();
    Generator g(13);
    Tensor a = randn({300}, g) * 20.0, b = randn({300}, g) * 4.0;
    if (dt == kInt64) {
      const std::int64_t min = std::numeric_limits<std::int64_t>::min();
      a = cat({a.to(kInt64), tensor(std::vector<std::int64_t>{min, min, 7, -7, 0, (std::int64_t{1} << 62) + 1}, {6})});
      b = cat({b.to(kInt64), tensor(std::vector<std::int64_t>{-1, 3, -2, 2, -5, (std::int64_t{1} << 53) + 1}, {6})});
      b = where(eq(b, 0.0), 3.0, b);  // the CPU raises ZeroDivisionError for an integer zero divisor
    } else {
      const float inf = INFINITY, nan = NAN;
      a = cat({a, tensor({0.0f, -0.0f, inf, -inf, nan, 7.5f, -7.5f, 3.0f, 1.0f}, {9})}).to(dt);
      b = cat({b, tensor({2.0f, -2.0f, 2.0f, -2.0f, 2.0f, 0.0f, inf, -inf, 0.3f}, {9})}).to(dt);
    }
    const Tensor column = b.slice(0, 0, 5).reshape({5, 1});  // broadcast against a's first 7: strided operands
    auto both = [&](const std::function<Tensor(const Tensor&, const Tensor&, const Tensor&)>& f) {
      GPULAB_COMPARE_TENSORS(f(a.to(gpu), b.to(gpu), column.to(gpu)).cpu(), f(a, b, column), 0, 0);
    };
    both([](const Tensor& x, const Tensor& y, const Tensor&) { return floor_divide(x, y); });
    both([](const Tensor& x, const Tensor& y, const Tensor&) { return remainder(x, y); });
    both([](const Tensor& x, const Tensor&, const Tensor& c) { return floor_divide(x.slice(0, 0, 7), c); });
    both([](const Tensor& x, const Tensor&, const Tensor& c) { return remainder(x.slice(0, 0, 7), c); });
    both([](const Tensor& x, const Tensor&, const Tensor&) { return floor_divide(x, -3.0); });
    both([](const Tensor& x, const Tensor&, const Tensor&) { return remainder(x, 0.3); });
    both([](const Tensor&, const Tensor& y, const Tensor&) { return floor_divide(7.0, y); });
    both([](const Tensor&, const Tensor& y, const Tensor&) { return remainder(-7.0, y); });
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
    GPULAB_COMPARE_TENSORS(arange(-7.5, 1000.0, 3.9, {.dtype = kInt64, .device = gpu}).cpu(), arange(-7.5, 1000.0, 3.9, {.dtype = kInt64}), 0, 0);
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

  // Conversions between any two dtypes, bit for bit: contiguous (four elements a load, plus a tail),
  // misaligned (a view at offset 1: one at a time) and strided (a transposed view). The values include
  // what each conversion must get right: NaN, infinities, float16's overflow threshold (65504 stays,
  // 65520 rounds to inf), subnormals, ties, and values beyond int64.
  void conversionsAreBitExact_data() {
    QTest::addColumn<int>("src");
    QTest::addColumn<int>("dst");
    for (int si = 0; si < 6; ++si)
      for (int di = 0; di < 6; ++di)
        QTest::newRow((dtypeName(kAllDTypes[si]) + "->" + dtypeName(kAllDTypes[di])).c_str()) << si << di;
  }
  void conversionsAreBitExact() {
    if (!test::cudaUsable()) QSKIP("no CUDA device");
    QFETCH(int, src);
    QFETCH(int, dst);
    const DType S = kAllDTypes[src], D = kAllDTypes[dst];
    const Device gpu = test::cudaDevice();
    Generator g(21);
    std::vector<float> v = (randn({1003}, g) * 50.0).toVector<float>();
    const float inf = std::numeric_limits<float>::infinity(), nan = std::numeric_limits<float>::quiet_NaN();
    const std::vector<float> special{nan, inf, -inf, 1e30f, -1e30f, 65504.0f, 65520.0f, 1e-8f, -1e-8f, 3e-39f,
                                     0.0f, -0.0f, 2.5f, -2.5f, 0.5f, 1.5f, 1.00048828125f, 3.0e9f};
    std::copy(special.begin(), special.end(), v.begin());
    const Tensor x = tensor(v, {1003}).to(S);
    const Tensor xg = x.to(gpu);
    GPULAB_COMPARE_TENSORS(xg.to(D).cpu(), x.to(D), 0, 0);
    GPULAB_COMPARE_TENSORS(xg.slice(0, 1, 1003).to(D).cpu(), x.slice(0, 1, 1003).to(D), 0, 0);
    GPULAB_COMPARE_TENSORS(xg.reshape({17, 59}).t().to(D).cpu(), x.reshape({17, 59}).t().to(D), 0, 0);
    GPULAB_COMPARE_TENSORS(xg.reshape({17, 59}).t().contiguous().cpu(), x.reshape({17, 59}).t().contiguous(), 0, 0);
    QCOMPARE(xg.to(D).dtype(), D);
  }

  // Elementwise kernels per dtype: one IEEE operation then one rounding is exact on both devices;
  // transcendental functions are within the op tolerance. Offsets 0 and 1 take the vectorised
  // contiguous path (with a tail) and the one-at-a-time path; a broadcast takes the strided one.
  void elementwiseMatchesCpu_data() { addDTypeRows(); }
  void elementwiseMatchesCpu() {
    if (!test::cudaUsable()) QSKIP("no CUDA device");
    QFETCH(int, dtype);
    const DTypeCase& dt = kDTypes[dtype];
    const Device gpu = test::cudaDevice();
    Generator g(31);
    const Tensor a = randn({1003}, g).to(dt.dtype), b = randn({1003}, g).to(dt.dtype);
    const Tensor ag = a.to(gpu), bg = b.to(gpu);
    for (const std::int64_t offset : {0, 1}) {
      const Tensor x = a.slice(0, offset, 1003), y = b.slice(0, offset, 1003);
      const Tensor xg = ag.slice(0, offset, 1003), yg = bg.slice(0, offset, 1003);
      GPULAB_COMPARE_TENSORS((xg + yg).cpu(), x + y, 0, 0);
      GPULAB_COMPARE_TENSORS((xg * yg).cpu(), x * y, 0, 0);
      GPULAB_COMPARE_TENSORS((xg / yg).cpu(), x / y, 0, 0);
      GPULAB_COMPARE_TENSORS(maximum(xg, yg).cpu(), maximum(x, y), 0, 0);
      GPULAB_COMPARE_TENSORS((xg + 2.5).cpu(), x + 2.5, 0, 0);
      GPULAB_COMPARE_TENSORS((1.0 - xg).cpu(), 1.0 - x, 0, 0);
      GPULAB_COMPARE_TENSORS((xg * -3.0).cpu(), x * -3.0, 0, 0);
      GPULAB_COMPARE_TENSORS((-xg).cpu(), -x, 0, 0);
      GPULAB_COMPARE_TENSORS(xg.relu().cpu(), x.relu(), 0, 0);
      GPULAB_COMPARE_TENSORS(xg.abs().cpu(), x.abs(), 0, 0);
      GPULAB_COMPARE_TENSORS(xg.exp().cpu(), x.exp(), dt.ops.atol, dt.ops.rtol);
      GPULAB_COMPARE_TENSORS(xg.tanh().cpu(), x.tanh(), dt.ops.atol, dt.ops.rtol);
      GPULAB_COMPARE_TENSORS(xg.sigmoid().cpu(), x.sigmoid(), dt.ops.atol, dt.ops.rtol);
      GPULAB_COMPARE_TENSORS(gelu(xg).cpu(), gelu(x), dt.ops.atol, dt.ops.rtol);
      GPULAB_COMPARE_TENSORS(gelu(xg, "tanh").cpu(), gelu(x, "tanh"), dt.ops.atol, dt.ops.rtol);
      GPULAB_COMPARE_TENSORS(sin(xg).cpu(), sin(x), dt.ops.atol, dt.ops.rtol);
      GPULAB_COMPARE_TENSORS(cos(xg).cpu(), cos(x), dt.ops.atol, dt.ops.rtol);
      GPULAB_COMPARE_TENSORS(le(xg, yg).cpu(), le(x, y), 0, 0);
      GPULAB_COMPARE_TENSORS(gt(xg, 0.25).cpu(), gt(x, 0.25), 0, 0);
      GPULAB_COMPARE_TENSORS(where(lt(xg, yg), xg, yg).cpu(), where(lt(x, y), x, y), 0, 0);
    }
    // Broadcasting: a (17, 59) matrix with a row and a column.
    const Tensor m = a.slice(0, 0, 17 * 59).reshape({17, 59}), row = b.slice(0, 0, 59), col = b.slice(0, 100, 117).reshape({17, 1});
    const Tensor mg = m.to(gpu), rowg = row.to(gpu), colg = col.to(gpu);
    GPULAB_COMPARE_TENSORS((mg + rowg).cpu(), m + row, 0, 0);
    GPULAB_COMPARE_TENSORS((mg * colg).cpu(), m * col, 0, 0);
    GPULAB_COMPARE_TENSORS((mg.t() - colg.t()).cpu(), m.t() - col.t(), 0, 0);
    if (dt.dtype == kFloat32) {  // and int64, once
      const Tensor i = randint(-100, 100, {1003}, g), j = randint(-100, 100, {1003}, g);
      const Tensor ig = i.to(gpu), jg = j.to(gpu);
      QCOMPARE((ig + jg).cpu().toVector<std::int64_t>(), (i + j).toVector<std::int64_t>());
      QCOMPARE((ig * jg).cpu().toVector<std::int64_t>(), (i * j).toVector<std::int64_t>());
      QCOMPARE(maximum(ig, jg).cpu().toVector<std::int64_t>(), maximum(i, j).toVector<std::int64_t>());
      QCOMPARE((-ig).cpu().toVector<std::int64_t>(), (-i).toVector<std::int64_t>());
    }
  }

  // Sums and max/argmax per dtype through every reduction shape: a whole-tensor reduction split over
  // blocks, a block per row, a strided axis with a thread per output, the split column sum.
  void reductionsMatchCpu_data() { addDTypeRows(); }
  void reductionsMatchCpu() {
    if (!test::cudaUsable()) QSKIP("no CUDA device");
    QFETCH(int, dtype);
    const DTypeCase& dt = kDTypes[dtype];
    const Device gpu = test::cudaDevice();
    const Tolerance t = dt.sums;
    Generator g(41);
    const Tensor big = randn({700001}, g).to(dt.dtype);
    const Tensor bigg = big.to(gpu);
    GPULAB_COMPARE_TENSORS(bigg.sum().cpu(), big.sum(), t.atol, t.rtol);
    GPULAB_COMPARE_TENSORS(bigg.max().cpu(), big.max(), 0, 0);
    const Tensor rows = big.slice(0, 0, 700000).reshape({7, 100000}), rowsg = bigg.slice(0, 0, 700000).reshape({7, 100000});
    GPULAB_COMPARE_TENSORS(rowsg.sum(1).cpu(), rows.sum(1), t.atol, t.rtol);
    auto [gv, gi] = max(rowsg, 1);
    auto [cv, ci] = max(rows, 1);
    GPULAB_COMPARE_TENSORS(gv.cpu(), cv, 0, 0);
    QCOMPARE(gi.cpu().toVector<std::int64_t>(), ci.toVector<std::int64_t>());
    const Tensor m = randn({37, 3000}, g).to(dt.dtype), mg = m.to(gpu);
    for (const std::int64_t dim : {0, 1}) {
      GPULAB_COMPARE_TENSORS(mg.sum(dim).cpu(), m.sum(dim), t.atol, t.rtol);
      auto [mgv, mgi] = max(mg, dim);
      auto [mcv, mci] = max(m, dim);
      GPULAB_COMPARE_TENSORS(mgv.cpu(), mcv, 0, 0);
      QCOMPARE(mgi.cpu().toVector<std::int64_t>(), mci.toVector<std::int64_t>());
    }
    const Tensor tall = randn({4096, 96}, g).to(dt.dtype);
    GPULAB_COMPARE_TENSORS(tall.to(gpu).sum(0).cpu(), tall.sum(0), t.atol, t.rtol);
  }

  // Softmax, log_softmax and cross-entropy on rows longer than a block (1000 columns), forward and
  // backward, per dtype; and the losses split over blocks (700001 elements).
  void rowKernelsMatchCpu_data() { addDTypeRows(); }
  void rowKernelsMatchCpu() {
    if (!test::cudaUsable()) QSKIP("no CUDA device");
    QFETCH(int, dtype);
    const DTypeCase& dt = kDTypes[dtype];
    const Device gpu = test::cudaDevice();
    Generator g(61);
    const Tensor x = (randn({64, 1000}, g) * 3.0).to(dt.dtype);
    const Tensor w = randn({64, 1000}, g).to(dt.dtype);
    const Tensor labels = randint(0, 1000, {64}, g);
    auto run = [&](Device d) {
      Tensor xi = x.to(d).requires_grad_(true);
      Tensor s = xi.softmax(1), ls = xi.log_softmax(1);
      Tensor loss = cross_entropy(xi, labels.to(d));
      const Tensor wd = w.to(d);
      ((s * wd).sum() + (ls * wd).sum() + loss).backward();
      return std::vector<Tensor>{s.detach().cpu(), ls.detach().cpu(), loss.detach().cpu(), xi.grad().cpu()};
    };
    const auto gpuOut = run(gpu), cpuOut = run(kCPU);
    for (std::size_t i = 0; i < cpuOut.size(); ++i) GPULAB_COMPARE_TENSORS(gpuOut[i], cpuOut[i], dt.ops.atol, dt.ops.rtol);
    const Tensor a = randn({700001}, g).to(dt.dtype), b = randn({700001}, g).to(dt.dtype);
    GPULAB_COMPARE_TENSORS(mse_loss(a.to(gpu), b.to(gpu)).cpu(), mse_loss(a, b), dt.sums.atol, dt.sums.rtol);
    GPULAB_COMPARE_TENSORS(l1_loss(a.to(gpu), b.to(gpu)).cpu(), l1_loss(a, b), dt.sums.atol, dt.sums.rtol);
  }

  // Matrix products per dtype (cuBLAS against OpenBLAS): plain, batched, transposed operands, linear,
  // and alpha/beta through the backend directly; float32 also with TF32 tensor cores allowed.
  void gemmMatchesCpu_data() {
    QTest::addColumn<int>("dtype");
    QTest::addColumn<bool>("tf32");
    for (int d = 0; d < kDTypeCount; ++d) QTest::newRow(kDTypes[d].name) << d << false;
    QTest::newRow("float32_tf32") << 0 << true;
  }
  void gemmMatchesCpu() {
    if (!test::cudaUsable()) QSKIP("no CUDA device");
    QFETCH(int, dtype);
    QFETCH(bool, tf32);
    const DTypeCase& dt = kDTypes[dtype];
    const Tolerance t = tf32 ? Tolerance{5e-2, 1e-2} : dt.gemm;
    const Device gpu = test::cudaDevice();
    const AllowTf32Scope scope(tf32);
    Generator g(51);
    auto make = [&](const Shape& s) { return randn(s, g).to(dt.dtype); };
    const Tensor a = make({64, 96}), b = make({96, 80}), at = make({96, 64}), bt = make({80, 96}), bias = make({80});
    const Tensor ba = make({3, 33, 17}), bb = make({3, 17, 45});
    GPULAB_COMPARE_TENSORS(matmul(a.to(gpu), b.to(gpu)).cpu(), matmul(a, b), t.atol, t.rtol);
    GPULAB_COMPARE_TENSORS(matmul(at.to(gpu).t(), bt.to(gpu).t()).cpu(), matmul(at.t(), bt.t()), t.atol, t.rtol);
    GPULAB_COMPARE_TENSORS(matmul(ba.to(gpu), bb.to(gpu)).cpu(), matmul(ba, bb), t.atol, t.rtol);
    GPULAB_COMPARE_TENSORS(linear(a.to(gpu), bt.to(gpu), bias.to(gpu)).cpu(), linear(a, bt, bias), t.atol, t.rtol);
    QCOMPARE(matmul(a.to(gpu), b.to(gpu)).dtype(), dt.dtype);
    // C = 0.5 op(A) op(B) + 2 C, both operands transposed: A stored (96, 64), B stored (80, 96).
    const Tensor c = make({64, 80});
    const Tensor cg = c.to(gpu).clone(), cc = c.clone(), atg = at.to(gpu), btg = bt.to(gpu);
    backendFor(gpu).gemm(dt.dtype, true, true, 64, 80, 96, 0.5, atg.data_ptr(), 64, btg.data_ptr(), 96, 2.0, cg.data_ptr(), 80);
    cpuBackend().gemm(dt.dtype, true, true, 64, 80, 96, 0.5, at.data_ptr(), 64, bt.data_ptr(), 96, 2.0, cc.data_ptr(), 80);
    GPULAB_COMPARE_TENSORS(cg.cpu(), cc, t.atol, t.rtol);
  }

  // conv2d forward (with and without bias) and both backwards through the backends directly (cuDNN
  // against im2col + OpenBLAS), per geometry and dtype; float32 also with TF32 allowed. The workspace
  // cuDNN asks for comes from the caching allocator and goes back to it: allocated memory is the same
  // after the calls as before.
  void convMatchesCpu_data() {
    QTest::addColumn<int>("geometry");
    QTest::addColumn<int>("dtype");
    QTest::addColumn<bool>("tf32");
    for (int i = 0; i < static_cast<int>(std::size(kConvCases)); ++i) {
      for (int d = 0; d < kDTypeCount; ++d)
        QTest::newRow((std::string(kConvCases[i].name) + "/" + kDTypes[d].name).c_str()) << i << d << false;
      QTest::newRow((std::string(kConvCases[i].name) + "/float32_tf32").c_str()) << i << 0 << true;
    }
  }
  void convMatchesCpu() {
    if (!test::cudaUsable()) QSKIP("no CUDA device");
    QFETCH(int, geometry);
    QFETCH(int, dtype);
    QFETCH(bool, tf32);
    const DTypeCase& dt = kDTypes[dtype];
    const Tolerance t = tf32 ? kConvTf32Tolerance : kConvTolerance[dtype];
    const AllowTf32Scope scope(tf32);
    const ConvCase& cc = kConvCases[geometry];
    const Backend::Conv2dShape s = convShape(cc);
    const Device gpu = test::cudaDevice();
    Generator g(71);
    const double wScale = 1.0 / std::sqrt(static_cast<double>(cc.c / cc.groups * cc.r * cc.s));
    const Tensor x = randn({s.batch, s.inChannels, s.inH, s.inW}, g).to(dt.dtype);
    const Tensor w = (randn({s.outChannels, s.inChannels / s.groups, s.kernelH, s.kernelW}, g) * wScale).to(dt.dtype);
    const Tensor b = randn({s.outChannels}, g).to(dt.dtype);
    const Tensor gy = randn({s.batch, s.outChannels, s.outH, s.outW}, g).to(dt.dtype);
    const Tensor xg = x.to(gpu), wg = w.to(gpu), bg = b.to(gpu), gyg = gy.to(gpu);
    Backend& onGpu = backendFor(gpu);
    Backend& cpu = cpuBackend();
    auto empty = [&](const Tensor& like, Device d) { return Tensor::empty(like.sizes(), dt.dtype, d); };
    const Tensor yc = empty(gy, kCPU), ybc = empty(gy, kCPU), gxc = empty(x, kCPU), gwc = empty(w, kCPU);
    const Tensor yg = empty(gy, gpu), ybg = empty(gy, gpu), gxg = empty(x, gpu), gwg = empty(w, gpu);
    cpu.conv2d(yc, x, w, nullptr, s);
    cpu.conv2d(ybc, x, w, &b, s);
    cpu.conv2dBackwardInput(gxc, gy, w, s);
    cpu.conv2dBackwardWeight(gwc, gy, x, s);
    const std::int64_t before = memory_allocated(gpu);
    onGpu.conv2d(yg, xg, wg, nullptr, s);
    onGpu.conv2d(ybg, xg, wg, &bg, s);
    onGpu.conv2dBackwardInput(gxg, gyg, wg, s);
    onGpu.conv2dBackwardWeight(gwg, gyg, xg, s);
    cuda::synchronize(gpu.index());
    QCOMPARE(memory_allocated(gpu), before);
    GPULAB_COMPARE_TENSORS(yg.cpu(), yc, t.atol, t.rtol);
    GPULAB_COMPARE_TENSORS(ybg.cpu(), ybc, t.atol, t.rtol);
    GPULAB_COMPARE_TENSORS(gxg.cpu(), gxc, t.atol, t.rtol);
    GPULAB_COMPARE_TENSORS(gwg.cpu(), gwc, t.atol, t.rtol);
    // The output buffers are overwritten, not accumulated into: a second call gives the same result.
    onGpu.conv2dBackwardWeight(gwg, gyg, xg, s);
    GPULAB_COMPARE_TENSORS(gwg.cpu(), gwc, t.atol, t.rtol);
  }

  // max_pool2d, avg_pool2d and adaptive_avg_pool2d forward and backward through the backends directly,
  // per geometry and dtype (the CUDA backwards gather, the CPU's scatter). max_pool2d keeps the first
  // maximum and lets NaN win on both.
  void poolsMatchCpu_data() {
    QTest::addColumn<int>("geometry");
    QTest::addColumn<int>("dtype");
    for (int i = 0; i < static_cast<int>(std::size(kPoolCases)); ++i)
      for (int d = 0; d < kDTypeCount; ++d)
        QTest::newRow((std::string(kPoolCases[i].name) + "/" + kDTypes[d].name).c_str()) << i << d;
  }
  void poolsMatchCpu() {
    if (!test::cudaUsable()) QSKIP("no CUDA device");
    QFETCH(int, geometry);
    QFETCH(int, dtype);
    const DTypeCase& dt = kDTypes[dtype];
    const PoolCase& pc = kPoolCases[geometry];
    const Device gpu = test::cudaDevice();
    Backend& onGpu = backendFor(gpu);
    Backend& cpu = cpuBackend();
    Generator g(81);
    std::vector<float> xv = randn({pc.n, pc.c, pc.h, pc.w}, g).toVector<float>();
    xv[5] = std::numeric_limits<float>::quiet_NaN();  // NaN wins its windows, on both devices
    xv[17] = xv[16];                                   // a tie: the first one is kept
    const Tensor x = tensor(xv, {pc.n, pc.c, pc.h, pc.w}).to(dt.dtype);
    const Tensor xg = x.to(gpu);
    auto empty = [&](const Shape& shape, Device d, DType type) { return Tensor::empty(shape, type, d); };

    {  // max_pool2d, dilated where the case says so
      const Backend::Pool2dShape s = poolShape(pc, true);
      const Shape outShape{s.batch, s.channels, s.outH, s.outW};
      const Tensor gy = randn(outShape, g).to(dt.dtype), gyg = gy.to(gpu);
      const Tensor yc = empty(outShape, kCPU, dt.dtype), ic = empty(outShape, kCPU, kInt64), gxc = empty(x.sizes(), kCPU, dt.dtype);
      const Tensor yg = empty(outShape, gpu, dt.dtype), ig = empty(outShape, gpu, kInt64), gxg = empty(x.sizes(), gpu, dt.dtype);
      cpu.maxPool2d(yc, ic, x, s);
      onGpu.maxPool2d(yg, ig, xg, s);
      GPULAB_COMPARE_TENSORS(yg.cpu(), yc, 0, 0);
      QCOMPARE(ig.cpu().toVector<std::int64_t>(), ic.toVector<std::int64_t>());
      cpu.maxPool2dBackward(gxc, gy, ic, s);
      onGpu.maxPool2dBackward(gxg, gyg, ig, s);
      GPULAB_COMPARE_TENSORS(gxg.cpu(), gxc, dt.ops.atol, dt.ops.rtol);
    }
    const Tensor xf = x.to(kFloat32);  // the averages without the NaN (it would spread over every window)
    std::vector<float> clean = xf.toVector<float>();
    clean[5] = 0.25f;
    const Tensor xa = tensor(clean, x.sizes()).to(dt.dtype), xag = xa.to(gpu);
    {  // avg_pool2d (no dilation)
      const Backend::Pool2dShape s = poolShape(pc, false);
      const Shape outShape{s.batch, s.channels, s.outH, s.outW};
      const Tensor gy = randn(outShape, g).to(dt.dtype), gyg = gy.to(gpu);
      const Tensor yc = empty(outShape, kCPU, dt.dtype), gxc = empty(x.sizes(), kCPU, dt.dtype);
      const Tensor yg = empty(outShape, gpu, dt.dtype), gxg = empty(x.sizes(), gpu, dt.dtype);
      cpu.avgPool2d(yc, xa, s);
      onGpu.avgPool2d(yg, xag, s);
      GPULAB_COMPARE_TENSORS(yg.cpu(), yc, dt.ops.atol, dt.ops.rtol);
      cpu.avgPool2dBackward(gxc, gy, s);
      onGpu.avgPool2dBackward(gxg, gyg, s);
      GPULAB_COMPARE_TENSORS(gxg.cpu(), gxc, dt.ops.atol, dt.ops.rtol);
    }
    // adaptive_avg_pool2d: global, shrinking with overlapping windows, exact division, and growing.
    const std::pair<std::int64_t, std::int64_t> sizes[] = {{1, 1}, {3, 4}, {pc.h / 2, pc.w / 2}, {pc.h + 2, pc.w + 3}};
    for (const auto& [oh, ow] : sizes) {
      Backend::Pool2dShape s{};
      s.batch = pc.n;
      s.channels = pc.c;
      s.inH = pc.h;
      s.inW = pc.w;
      s.outH = oh;
      s.outW = ow;
      const Shape outShape{s.batch, s.channels, oh, ow};
      const Tensor gy = randn(outShape, g).to(dt.dtype), gyg = gy.to(gpu);
      const Tensor yc = empty(outShape, kCPU, dt.dtype), gxc = empty(x.sizes(), kCPU, dt.dtype);
      const Tensor yg = empty(outShape, gpu, dt.dtype), gxg = empty(x.sizes(), gpu, dt.dtype);
      cpu.adaptiveAvgPool2d(yc, xa, s);
      onGpu.adaptiveAvgPool2d(yg, xag, s);
      GPULAB_COMPARE_TENSORS(yg.cpu(), yc, dt.ops.atol, dt.ops.rtol);
      cpu.adaptiveAvgPool2dBackward(gxc, gy, s);
      onGpu.adaptiveAvgPool2dBackward(gxg, gyg, s);
      GPULAB_COMPARE_TENSORS(gxg.cpu(), gxc, dt.ops.atol, dt.ops.rtol);
    }
  }

  // A small CNN through the op layer and autograd on both devices: conv2d (bias) -> relu -> max_pool2d
  // -> grouped, strided conv2d -> avg_pool2d (ceil_mode, count_include_pad=False) ->
  // adaptive_avg_pool2d, weighted sum, backward; the output and every gradient compared. float32 and
  // float64 only: in a 16-bit type two values of a pooling window are often one rounding apart, and
  // the devices' one-ulp differences after the first conv2d then pick different maxima, moving a
  // gradient to another element (the 16-bit kernels are compared from identical inputs above).
  void smallCnnMatchesCpu_data() {
    QTest::addColumn<int>("dtype");
    QTest::newRow("float32") << 0;
    QTest::newRow("float64") << 1;
  }
  void smallCnnMatchesCpu() {
    if (!test::cudaUsable()) QSKIP("no CUDA device");
    QFETCH(int, dtype);
    const AllowTf32Scope fullFloat32(false);  // cuDNN would use TF32 for float32 convolutions by default
    const DTypeCase& dt = kDTypes[dtype];
    const Tolerance t = kConvTolerance[dtype];
    Generator g(91);
    const Tensor x0 = randn({2, 3, 17, 15}, g).to(dt.dtype);
    const Tensor w10 = (randn({8, 3, 3, 3}, g) * 0.2).to(dt.dtype), b10 = randn({8}, g).to(dt.dtype);
    const Tensor w20 = (randn({8, 4, 3, 3}, g) * 0.2).to(dt.dtype), b20 = randn({8}, g).to(dt.dtype);
    const Tensor mix0 = randn({2, 8, 2, 3}, g).to(dt.dtype);
    auto run = [&](Device d) {
      Tensor x = x0.to(d).requires_grad_(true), w1 = w10.to(d).requires_grad_(true), b1 = b10.to(d).requires_grad_(true);
      Tensor w2 = w20.to(d).requires_grad_(true), b2 = b20.to(d).requires_grad_(true);
      Tensor h = relu(conv2d(x, w1, b1, 1, 1));
      h = max_pool2d(h, 2);
      h = conv2d(h, w2, b2, {2, 1}, {1, 2}, 1, 2);
      h = avg_pool2d(h, 3, 2, 1, true, false);
      Tensor y = adaptive_avg_pool2d(h, {2, 3});
      (y * mix0.to(d)).sum().backward();
      return std::vector<Tensor>{y.detach().cpu(), x.grad().cpu(), w1.grad().cpu(), b1.grad().cpu(), w2.grad().cpu(),
                                 b2.grad().cpu()};
    };
    const auto gpuOut = run(test::cudaDevice()), cpuOut = run(kCPU);
    QCOMPARE(gpuOut.size(), cpuOut.size());
    for (std::size_t i = 0; i < cpuOut.size(); ++i) {
      QCOMPARE(gpuOut[i].dtype(), dt.dtype);
      GPULAB_COMPARE_TENSORS(gpuOut[i], cpuOut[i], t.atol, t.rtol);
    }
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
