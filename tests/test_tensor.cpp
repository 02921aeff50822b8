// Tensors: shapes and strides, views that share storage, factories, broadcasting, dtype moves,
// reductions, and the errors PyTorch users know.
#include <bit>
#include <limits>
#include <set>

#include "engine/autograd/node.h"
#include "engine/core/parallel.h"
#include "engine/kernels/functors.h"
#include "engine/core/errors.h"
#include "test_util.h"

using namespace gpulab;

class TestTensor : public QObject {
  Q_OBJECT

 private slots:
  void factoriesHaveShapeStridesAndValues() {
    Tensor z = zeros({2, 3});
    QCOMPARE(z.sizes(), (Shape{2, 3}));
    QCOMPARE(z.strides(), (Shape{3, 1}));
    QCOMPARE(z.numel(), 6);
    QCOMPARE(z.sum().item(), 0.0);
    QCOMPARE(full({4}, 2.5).sum().item(), 10.0);
    QCOMPARE(arange(5.0).toVector<float>(), (std::vector<float>{0, 1, 2, 3, 4}));
    QCOMPARE(arange(1.0, 2.0, 0.25).numel(), 4);
    QCOMPARE(tensor({1, 2, 3, 4}, {2, 2}).toVector<float>(), (std::vector<float>{1, 2, 3, 4}));
    QVERIFY_THROWS_EXCEPTION(ValueError, tensor({1, 2, 3}, {2, 2}));
    QVERIFY_THROWS_EXCEPTION(ValueError, zeros({2, -1}));
    QVERIFY_THROWS_EXCEPTION(ValueError, zeros({std::int64_t{1} << 40, std::int64_t{1} << 40}));  // overflows, not UB
    // Empty, but its strides would overflow (found by fuzzing the IDX reader): refused, not UB.
    QVERIFY_THROWS_EXCEPTION(ValueError, zeros({0, std::int64_t{1} << 32, std::int64_t{1} << 32}));
    QCOMPARE(zeros({0, 1 << 20, 1 << 20}).numel(), 0);
    QVERIFY_THROWS_EXCEPTION(OutOfMemoryError, zeros({std::int64_t{1} << 50}));                   // 4 PiB: refused cleanly
  }

  void seededRandomIsReproducibleAndWellDistributed() {
    Generator a(1), b(1), c(2);
    QCOMPARE(randn({100}, a).toVector<float>(), randn({100}, b).toVector<float>());
    QVERIFY(randn({100}, a).toVector<float>() != randn({100}, c).toVector<float>());
    Generator g(3);
    Tensor x = randn({20000}, g);
    QVERIFY(std::abs(x.mean().item()) < 0.03);
    QVERIFY(std::abs((x * x).mean().item() - 1.0) < 0.05);
    Tensor u = rand({20000}, g);
    QVERIFY(u.max().item() < 1.0);
    QVERIFY(std::abs(u.mean().item() - 0.5) < 0.01);
    Tensor r = randint(3, 7, {1000}, g);
    QCOMPARE(r.dtype(), kInt64);
    QCOMPARE(r.max().item(), 6.0);
    QCOMPARE((-r).max().item(), -3.0);
  }

  void viewsShareStorage() {
    Tensor x = arange(12.0).view({3, 4});
    Tensor t = x.t();
    QCOMPARE(t.sizes(), (Shape{4, 3}));
    QCOMPARE(t.strides(), (Shape{1, 4}));
    QVERIFY(!t.is_contiguous());
    QCOMPARE(t.data_ptr(), x.data_ptr());
    Tensor row = x.select(0, 1);
    QCOMPARE(row.toVector<float>(), (std::vector<float>{4, 5, 6, 7}));
    Tensor everyOther = x.slice(1, 0, 4, 2);
    QCOMPARE(everyOther.toVector<float>(), (std::vector<float>{0, 2, 4, 6, 8, 10}));
    x.select(1, 0).fill_(-1);  // writing through a view changes the base
    QCOMPARE(x.toVector<float>()[4], -1.0f);
    QCOMPARE(t.contiguous().toVector<float>()[1], -1.0f);
  }

  void reshapeInfersAndViewRefusesNonContiguous() {
    Tensor x = arange(12.0).view({3, 4});
    QCOMPARE(x.reshape({2, -1}).sizes(), (Shape{2, 6}));
    QCOMPARE(x.flatten().sizes(), (Shape{12}));
    QCOMPARE(x.unsqueeze(0).sizes(), (Shape{1, 3, 4}));
    QCOMPARE(x.unsqueeze(-1).sizes(), (Shape{3, 4, 1}));
    QCOMPARE(x.unsqueeze(1).squeeze(1).sizes(), (Shape{3, 4}));
    QVERIFY_THROWS_EXCEPTION(Error, x.t().view({12}));
    QCOMPARE(x.t().reshape({12}).toVector<float>()[1], 4.0f);
    QVERIFY_THROWS_EXCEPTION(ValueError, x.view({5, -1}));
    QVERIFY_THROWS_EXCEPTION(ValueError, x.view({-1, -1}));
  }

  void indexErrorsReadLikePyTorch() {
    Tensor x = zeros({3, 4});
    try {
      x.sum(2);
      QFAIL("expected IndexError");
    } catch (const IndexError& e) {
      QCOMPARE(std::string(e.what()), std::string("Dimension out of range (expected to be in range of [-2, 1], but got 2)"));
    }
    QVERIFY_THROWS_EXCEPTION(IndexError, x.select(0, 3));
    QVERIFY_THROWS_EXCEPTION(Error, x.item());
  }

  void broadcastingFollowsPyTorch() {
    Tensor col = tensor({1, 2, 3}, {3, 1});
    Tensor row = tensor({10, 20}, {2});
    Tensor s = col + row;
    QCOMPARE(s.sizes(), (Shape{3, 2}));
    QCOMPARE(s.toVector<float>(), (std::vector<float>{11, 21, 12, 22, 13, 23}));
    QCOMPARE((col * 2.0 - 1.0).toVector<float>(), (std::vector<float>{1, 3, 5}));
    QCOMPARE((1.0 - col).toVector<float>(), (std::vector<float>{0, -1, -2}));
    try {
      (void)(zeros({3, 4}) + zeros({3}));
      QFAIL("expected a broadcasting error");
    } catch (const ValueError& e) {
      QVERIFY2(std::string(e.what()).starts_with("The size of tensor a (4) must match the size of tensor b (3) at non-singleton dimension 1"), e.what());
    }
  }

  // A normal draw takes two counters per element, so what is drawn after it uses fresh bits.
  void drawsAfterANormalDrawDoNotReuseItsBits() {
    Generator g(5);
    Tensor normals = randn({1000}, g);
    Tensor uniforms = rand({1000}, g);
    std::set<float> usedByNormals;
    for (std::uint64_t k = 0; k < 2000; ++k) usedByNormals.insert(fn::uniform01(5, k));
    int reused = 0;
    for (float u : uniforms.toVector<float>()) reused += usedByNormals.count(u) ? 1 : 0;
    QVERIFY2(reused < 5, qPrintable(QString("%1 of 1000 uniforms repeat the normal draw's bits").arg(reused)));  // chance: ~0.1
    QCOMPARE(normals.numel(), 1000);
  }

  // NaN and out-of-range floats become INT64_MIN, as on PyTorch's CPU (and on our GPU: same function).
  void floatToInt64ConversionIsDefined() {
    const float nan = std::numeric_limits<float>::quiet_NaN();
    Tensor t = tensor({nan, 1e30f, -1e30f, -2.7f, 2.7f}, {5}).to(kInt64);
    const std::int64_t lowest = std::numeric_limits<std::int64_t>::min();
    QCOMPARE(t.toVector<std::int64_t>(), (std::vector<std::int64_t>{lowest, lowest, lowest, -2, 2}));
  }

  void int64SumsAreExact() {
    const std::int64_t big = (std::int64_t{1} << 53) + 1;  // not a double
    Tensor t = tensor(std::vector<std::int64_t>{big, 2, -1}, {3});
    QCOMPARE(t.sum().toVector<std::int64_t>(), (std::vector<std::int64_t>{big + 1}));
  }

  // Float sums accumulate in double on every path of the CPU kernel (one long run cut in chunks, rows,
  // column blocks with a ragged last block): 2^24 followed by ones loses every one in float. And a long
  // run's chunks add up in one order, so the sum is the same bits on one thread or two.
  void floatSumsKeepEveryTermOnEveryPath() {
    const float big = 16777216.0f;  // 2^24: big + 1 rounds back to big in float
    std::vector<float> run(200001, 1.0f);
    run[0] = big;
    QCOMPARE(tensor(run, {200001}).sum().item(), big + 200000.0f);
    QCOMPARE(tensor(run, {1, 200001}).sum(1).toVector<float>(), std::vector<float>{big + 200000.0f});
    const std::int64_t rows = 3001, cols = 13;
    std::vector<float> block(static_cast<std::size_t>(rows * cols), 1.0f);
    for (std::int64_t c = 0; c < cols; ++c) block[static_cast<std::size_t>(c)] = big;
    QCOMPARE(tensor(block, {rows, cols}).sum(0).toVector<float>(), std::vector<float>(cols, big + 3000.0f));

    Generator g(3);
    Tensor noise = randn({300000}, g).to(kFloat64);  // float64: a change of order shows in the last bits
    const int threads = numThreads();
    setNumThreads(1);
    const double one = noise.sum().toVector<double>()[0];
    setNumThreads(2);
    const double two = noise.sum().toVector<double>()[0];
    setNumThreads(threads);
    QCOMPARE(std::bit_cast<std::uint64_t>(two), std::bit_cast<std::uint64_t>(one));
  }

  // index_select gathers big slices over the threads (past 64 KB): each slice lands where the index
  // puts it, repeats too, along the first dim and a middle one, on one thread or two.
  void bigGathersPutEverySliceInItsPlace() {
    Tensor m = arange(3.0 * 700 * 60).view({3, 700, 60});  // element (a, i, f) = (a * 700 + i) * 60 + f
    std::vector<std::int64_t> idx;
    for (std::int64_t j = 0; j < 900; ++j) idx.push_back((j * 389) % 700);  // every row, some twice
    const Tensor index = tensor(idx, {900});
    const int threads = numThreads();
    for (int t : {1, 2}) {
      setNumThreads(t);
      const auto middle = index_select(m, 1, index).toVector<float>();  // (3, 900, 60)
      const auto first = index_select(m.view({2100, 60}), 0, index).toVector<float>();  // (900, 60)
      for (std::int64_t a = 0; a < 3; ++a) {
        for (std::size_t j = 0; j < idx.size(); ++j) {
          for (std::int64_t f : {std::int64_t{0}, std::int64_t{59}}) {
            QCOMPARE(middle[static_cast<std::size_t>((a * 900 + static_cast<std::int64_t>(j)) * 60 + f)],
                     static_cast<float>((a * 700 + idx[j]) * 60 + f));
          }
        }
      }
      for (std::size_t j = 0; j < idx.size(); ++j) QCOMPARE(first[j * 60 + 7], static_cast<float>(idx[j] * 60 + 7));
    }
    setNumThreads(threads);
  }

  // PyTorch propagates NaN through relu and maximum, whichever argument holds it.
  void nanPropagatesLikePyTorch() {
    const float nan = std::numeric_limits<float>::quiet_NaN();
    QVERIFY(std::isnan(relu(tensor({nan}, {1})).item()));
    QVERIFY(std::isnan(maximum(tensor({nan}, {1}), tensor({1}, {1})).item()));
    QVERIFY(std::isnan(maximum(tensor({1}, {1}), tensor({nan}, {1})).item()));
    QCOMPARE(maximum(tensor({1, 3}, {2}), tensor({2, 2}, {2})).toVector<float>(), (std::vector<float>{2, 3}));
  }

  // The whole-tensor max and min against a plain loop, at lengths around the kernel's 8 lanes and its
  // 64K chunks (a long run goes over the threads), the extreme and a NaN at every kind of place: the
  // first element, a lane, the tail after the last full group of lanes, a later chunk.
  void wholeTensorMaxAndMinMatchALoop() {
    const float nan = std::numeric_limits<float>::quiet_NaN();
    for (const std::int64_t n : {1, 7, 8, 9, 17, 65536, 65537, 200003}) {
      std::vector<std::int64_t> ints(static_cast<std::size_t>(n));
      std::vector<float> floats(static_cast<std::size_t>(n));
      for (std::int64_t i = 0; i < n; ++i) {
        ints[static_cast<std::size_t>(i)] = (i * 7919) % 10007 - 5000;
        floats[static_cast<std::size_t>(i)] = static_cast<float>(ints[static_cast<std::size_t>(i)]) * 0.25f;
      }
      for (const std::int64_t at : {std::int64_t{0}, n / 2, n - 1}) {  // the extremes planted here
        std::vector<std::int64_t> is = ints;
        is[static_cast<std::size_t>(at)] = 1'000'000;
        const Tensor ti = tensor(is, {n});
        QCOMPARE(max(ti).toVector<std::int64_t>()[0], std::int64_t{1000000});
        is[static_cast<std::size_t>(at)] = -1'000'000;
        QCOMPARE(min(tensor(is, {n})).toVector<std::int64_t>()[0], std::int64_t{-1000000});
        std::vector<float> fs = floats;
        fs[static_cast<std::size_t>(at)] = 1e9f;
        QCOMPARE(max(tensor(fs, {n})).item(), 1e9);
        QCOMPARE(min(tensor(fs, {n})).item(), static_cast<double>(*std::min_element(fs.begin(), fs.end())));
        fs[static_cast<std::size_t>(at)] = nan;
        QVERIFY2(std::isnan(max(tensor(fs, {n})).item()), qPrintable(QString("NaN at %1 of %2").arg(at).arg(n)));
        QVERIFY(std::isnan(min(tensor(fs, {n})).item()));
      }
    }
  }

  // Issue 27 §5, each value from PyTorch 1.13 (Debian's python3-torch): the gradients of maximum and
  // minimum where a NaN is involved (both sides take it whole), at ties (split) and elsewhere; max()
  // over all elements with NaNs (the NaNs share it); arange with an integer dtype and fractional
  // arguments (truncated first).
  void nanGradientsAndIntegerArangeLikePyTorch() {
    const float nan = std::numeric_limits<float>::quiet_NaN();
    auto grads = [&](bool max) {
      Tensor a = tensor({nan, 1, 2, 3}, {4}).requires_grad_(), b = tensor({0, nan, 2, 1}, {4}).requires_grad_();
      (max ? maximum(a, b) : minimum(a, b)).sum().backward();
      return std::pair{a.grad().toVector<float>(), b.grad().toVector<float>()};
    };
    QCOMPARE(grads(true), (std::pair{std::vector<float>{1, 1, 0.5, 1}, std::vector<float>{1, 1, 0.5, 0}}));
    QCOMPARE(grads(false), (std::pair{std::vector<float>{1, 1, 0.5, 0}, std::vector<float>{1, 1, 0.5, 1}}));
    QVERIFY(std::isnan(minimum(tensor({1}, {1}), tensor({nan}, {1})).item()));
    QCOMPARE(minimum(tensor({1, 3}, {2}), tensor({2, 2}, {2})).toVector<float>(), (std::vector<float>{1, 2}));
    Tensor x = tensor({1, nan, 3, nan}, {4}).requires_grad_();
    x.max().backward();
    QCOMPARE(x.grad().toVector<float>(), (std::vector<float>{0, 0.5, 0, 0.5}));
    Tensor y = tensor({1, 3, 3, 2}, {4}).requires_grad_();
    y.max().backward();
    QCOMPARE(y.grad().toVector<float>(), (std::vector<float>{0, 0.5, 0.5, 0}));
    // An integer arange of fractional arguments, as PyTorch 2 makes it: the length from the values as
    // given, the elements from the start and step truncated (1.13 truncated everything first).
    auto ints = [](double start, double end, double step) { return arange(start, end, step, {.dtype = kInt64}).toVector<std::int64_t>(); };
    QCOMPARE(ints(0.5, 5, 1.5), (std::vector<std::int64_t>{0, 1, 2}));
    QCOMPARE(ints(-1.5, 3, 1.2), (std::vector<std::int64_t>{-1, 0, 1, 2}));
    QCOMPARE(ints(1, 10, 3.5), (std::vector<std::int64_t>{1, 4, 7}));
    QCOMPARE(arange(2.7, {.dtype = kInt64}).toVector<std::int64_t>(), (std::vector<std::int64_t>{0, 1, 2}));
    QCOMPARE(arange(0.9, {.dtype = kInt64}).numel(), 1);
    QCOMPARE(ints(0, 2.5, 0.5), (std::vector<std::int64_t>(5, 0)));  // the step truncates to 0: five zeros
    QCOMPARE(arange(0.5, 5, 1.5).toVector<float>(), (std::vector<float>{0.5, 2, 3.5}));  // floats keep theirs
  }

  void reductionsAndArgmax() {
    Tensor x = tensor({1, 5, 3, 7, 2, 0}, {2, 3});
    QCOMPARE(x.sum().item(), 18.0);
    QCOMPARE(x.sum(0).toVector<float>(), (std::vector<float>{8, 7, 3}));
    QCOMPARE(x.sum(1, true).sizes(), (Shape{2, 1}));
    QCOMPARE(x.mean(1).toVector<float>(), (std::vector<float>{3, 3}));
    QCOMPARE(x.max().item(), 7.0);
    auto [values, indices] = max(x, 1);
    QCOMPARE(values.toVector<float>(), (std::vector<float>{5, 7}));
    QCOMPARE(indices.toVector<std::int64_t>(), (std::vector<std::int64_t>{1, 0}));
    QCOMPARE(x.argmax(0).toVector<std::int64_t>(), (std::vector<std::int64_t>{1, 0, 0}));
    // Ties pick the first index, like PyTorch.
    QCOMPARE(tensor({2, 2, 1}, {3}).argmax(0).item(), 0.0);
  }

  void dtypeConversionsAndComparisons() {
    Tensor labels = tensor(std::vector<std::int64_t>{1, 2, 3}, {3});
    QCOMPARE(labels.dtype(), kInt64);
    Tensor f = labels.to(kFloat32);
    QCOMPARE(f.dtype(), kFloat32);
    QCOMPARE(f.sum().item(), 6.0);
    QCOMPARE(tensor({1.7f, -1.7f}, {2}).to(kInt64).toVector<std::int64_t>(), (std::vector<std::int64_t>{1, -1}));
    QCOMPARE((labels == tensor(std::vector<std::int64_t>{1, 0, 3}, {3})).sum().item(), 2.0);
    QCOMPARE(labels.exp().dtype(), kFloat32);  // as PyTorch's exp of an int64 tensor: computed in float32
    QCOMPARE(floor(labels).dtype(), kInt64);    // an integer is its own floor
    QVERIFY_THROWS_EXCEPTION(NotImplementedError, frac(labels));  // "frac_cpu" not implemented for 'Long'
    Tensor copy = labels.clone();
    QVERIFY_THROWS_EXCEPTION(Error, exp_(copy));  // result type Float can't be cast to the desired output type Long
    QVERIFY_THROWS_EXCEPTION(Error, labels.requires_grad_(true));
  }

  // torch.bool: what comparisons give, what masks select with, and PyTorch's promotion rules for it.
  void boolTensorsFollowPyTorch() {
    const Tensor x = tensor({-1.5f, 0.0f, 2.0f, std::nanf("")}, {4});
    using B = std::vector<std::int64_t>;
    QCOMPARE(gt(x, 0.0).dtype(), kBool);
    QCOMPARE(gt(x, 0.0).toVector<std::int64_t>(), (B{0, 0, 1, 0}));
    QCOMPARE(le(x, 0.0).toVector<std::int64_t>(), (B{1, 1, 0, 0}));  // NaN compares false both ways
    QCOMPARE(ge(x, 0.0).toVector<std::int64_t>(), (B{0, 1, 1, 0}));
    QCOMPARE(ne(x, x).toVector<std::int64_t>(), (B{0, 0, 0, 1}));
    QCOMPARE(lt(x, tensor({0.0f}, {1})).toVector<std::int64_t>(), (B{1, 0, 0, 0}));
    // An int64 tensor compares with 0.5 as float, not as 0.
    QCOMPARE(gt(tensor(B{0, 1}, {2}), 0.5).toVector<std::int64_t>(), (B{0, 1}));
    // Conversion to bool: non-zero (and NaN) is true.
    QCOMPARE(x.to(kBool).toVector<std::int64_t>(), (B{1, 0, 1, 1}));
    // Sums count, as int64; arithmetic promotes bool to the other side's dtype.
    const Tensor mask = gt(x, -1.0);
    QCOMPARE(mask.sum().dtype(), kInt64);
    QCOMPARE(mask.sum().item(), 2.0);
    QCOMPARE((mask * 2.0).dtype(), kInt64);
    QCOMPARE((mask * 0.5).dtype(), kFloat32);
    QCOMPARE((mask + x).dtype(), kFloat32);
    QCOMPARE((mask + mask).dtype(), kBool);
    QVERIFY_THROWS_EXCEPTION(Error, -mask);
    QCOMPARE(logical_not(mask).toVector<std::int64_t>(), (B{1, 0, 0, 1}));
    QCOMPARE(logical_and(mask, x).toVector<std::int64_t>(), (B{0, 0, 1, 0}));
    QCOMPARE(logical_or(mask, x).toVector<std::int64_t>(), (B{1, 1, 1, 1}));
    QCOMPARE(logical_xor(mask, x).toVector<std::int64_t>(), (B{1, 1, 0, 1}));
    QCOMPARE(any(mask).item(), 1.0);
    QCOMPARE(all(mask).item(), 0.0);
    QCOMPARE(all(gt(x, -2.0).slice(0, 0, 3)).item(), 1.0);
    QCOMPARE(any(zeros({0}, {.dtype = kBool})).item(), 0.0);
    QCOMPARE(any(tensor({0, 1, 0, 0}, {2, 2}), 1).toVector<std::int64_t>(), (B{1, 0}));
    QCOMPARE(all(tensor({1, 1, 0, 1}, {2, 2}), 0).toVector<std::int64_t>(), (B{0, 1}));
    QCOMPARE(nonzero(tensor({0, 3, 0, 0, 0, 7}, {2, 3})).toVector<std::int64_t>(), (B{0, 1, 1, 2}));
    QCOMPARE(nonzero(tensor({0, 3, 0, 0, 0, 7}, {2, 3})).sizes(), (Shape{2, 2}));
    // True division: integers divide as float.
    QCOMPARE((tensor(B{1, 3}, {2}) / tensor(B{2, 2}, {2})).toVector<float>(), (std::vector<float>{0.5f, 1.5f}));
  }

  // where never lets the value it did not choose into the result (an inf stays out); masked_fill and
  // clamp build on it; the condition must be bool, as PyTorch says.
  void whereMaskedFillAndClamp() {
    const float inf = std::numeric_limits<float>::infinity();
    const Tensor x = tensor({1.0f, -2.0f, 3.0f}, {3});
    const Tensor mask = lt(x, 0.0);
    QCOMPARE(masked_fill(x, mask, -inf).toVector<float>(), (std::vector<float>{1.0f, -inf, 3.0f}));
    QCOMPARE(where(mask, tensor({inf, inf, inf}, {3}), x).toVector<float>(), (std::vector<float>{1.0f, inf, 3.0f}));
    QCOMPARE(where(mask, 0.0, x).toVector<float>(), (std::vector<float>{1.0f, 0.0f, 3.0f}));
    QCOMPARE(where(mask, x.to(kFloat16), 0.0).dtype(), kFloat16);
    QCOMPARE(where(mask.reshape({3, 1}), x, 0.0).sizes(), (Shape{3, 3}));  // a column mask with a row
    QVERIFY_THROWS_EXCEPTION(Error, where(x, x, x));
    QCOMPARE(clamp(x, -1.0, 2.0).toVector<float>(), (std::vector<float>{1.0f, -1.0f, 2.0f}));
    QVERIFY(std::isnan(clamp(tensor({std::nanf("")}, {1}), 0.0, 1.0).item()));  // NaN stays NaN
    QVERIFY_THROWS_EXCEPTION(Error, clamp(x, std::nullopt, std::nullopt));
    QCOMPARE(min(x).item(), -2.0);
    // index_select: slices in the index's order, repeats allowed; an index outside the dim is refused
    // before any memory is read.
    const Tensor m = arange(0.0, 6.0).reshape({3, 2});
    QCOMPARE(index_select(m, 0, tensor(std::vector<std::int64_t>{2, 2, 0}, {3})).toVector<float>(), (std::vector<float>{4, 5, 4, 5, 0, 1}));
    QCOMPARE(index_select(m, 1, tensor(std::vector<std::int64_t>{1}, {1})).toVector<float>(), (std::vector<float>{1, 3, 5}));
    QCOMPARE(index_select(gt(m, 2.0), 0, tensor(std::vector<std::int64_t>{1}, {1})).toVector<std::int64_t>(), (std::vector<std::int64_t>{0, 1}));
    QVERIFY_THROWS_EXCEPTION(IndexError, index_select(m, 0, tensor(std::vector<std::int64_t>{3}, {1})));
    QVERIFY_THROWS_EXCEPTION(IndexError, index_select(m, 0, tensor(std::vector<std::int64_t>{-1}, {1})));
    QVERIFY_THROWS_EXCEPTION(IndexError, index_select(m, 0, tensor({1.0f}, {1})));
    QCOMPARE(min(tensor(std::vector<std::int64_t>{4, -9, 2}, {3})).item(), -9.0);
  }

  void softmaxRowsSumToOneAndAreStable() {
    Tensor x = tensor({1000, 1001, 1002, -5, 0, 5}, {2, 3});
    Tensor p = x.softmax(1);
    QCOMPARE(p.sum(1).toVector<float>(), (std::vector<float>{1, 1}));
    QVERIFY(!std::isnan(p.sum().item()));
    // exp(log_softmax) loses a little: lse near 1000 carries float32 rounding of about 6e-5.
    GPULAB_COMPARE_TENSORS(x.log_softmax(1).exp(), p, 1e-6, 1e-4);
  }

  // Issue 48, section 2, item 3: int64 values past 2^53 (where a double stops holding every integer)
  // and at int64's edges go in exactly; what does not fit raises PyTorch's error.
  void int64FactoriesAreExactPastTwoToThe53() {
    const std::int64_t big = (std::int64_t{1} << 53) + 1, max = std::numeric_limits<std::int64_t>::max(),
                       min = std::numeric_limits<std::int64_t>::min();
    QCOMPARE(full_int64({2}, big).toVector<std::int64_t>(), (std::vector<std::int64_t>{big, big}));
    QCOMPARE(full_int64({1}, max).toVector<std::int64_t>(), (std::vector<std::int64_t>{max}));
    QCOMPARE(full_int64({1}, min).toVector<std::int64_t>(), (std::vector<std::int64_t>{min}));
    QCOMPARE(full_int64({2}, 7).toVector<std::int64_t>(), (std::vector<std::int64_t>{7, 7}));
    QCOMPARE(full_int64({1}, big, {.dtype = kFloat64}).toVector<double>(), (std::vector<double>{9007199254740992.0}));  // rounds, as PyTorch
    // torch.arange(2**53, 2**53 + 3) has three elements, each itself (the double form gave four).
    QCOMPARE(arange_int64(big - 1, big + 2).toVector<std::int64_t>(), (std::vector<std::int64_t>{big - 1, big, big + 1}));
    QCOMPARE(arange_int64(big + 2, big - 1, -1).toVector<std::int64_t>(), (std::vector<std::int64_t>{big + 2, big + 1, big}));
    QCOMPARE(arange_int64(max - 2, max).toVector<std::int64_t>(), (std::vector<std::int64_t>{max - 2, max - 1}));
    QCOMPARE(arange_int64(min, min + 4, 2).toVector<std::int64_t>(), (std::vector<std::int64_t>{min, min + 2}));
    QCOMPARE(arange_int64(0, 10, 3).toVector<std::int64_t>(), (std::vector<std::int64_t>{0, 3, 6, 9}));
    QCOMPARE(arange_int64(big - 1, big + 2, 1, {.dtype = kFloat64}).numel(), 4);  // floats compute in double, as in PyTorch
    QCOMPARE(test::textOf([] { arange_int64(5, 0); }), std::string("upper bound and lower bound inconsistent with step sign"));
    QCOMPARE(test::textOf([] { arange_int64(0, 5, 0); }), std::string("step must be nonzero"));
    // Into int64, NaN, the infinities and values past its range raise rather than become INT64_MIN.
    const std::string overflow = "value cannot be converted to type int64_t without overflow";
    const double inf = std::numeric_limits<double>::infinity();
    for (const double v : {inf, -inf, std::numeric_limits<double>::quiet_NaN(), 1e19, 9223372036854775808.0}) {
      QCOMPARE(test::textOf([v] { full({2}, v, {.dtype = kInt64}); }), overflow);
    }
    QCOMPARE(full({1}, -9223372036854775808.0, {.dtype = kInt64}).toVector<std::int64_t>(), (std::vector<std::int64_t>{min}));
    QCOMPARE(full({1}, -2.7, {.dtype = kInt64}).toVector<std::int64_t>(), (std::vector<std::int64_t>{-2}));
    QCOMPARE(full({2}, inf).toVector<float>(), (std::vector<float>{INFINITY, INFINITY}));  // floats take them
    QCOMPARE(test::textOf([inf] { arange(0.0, inf); }), std::string("unsupported range: 0 -> inf"));
    QCOMPARE(test::textOf([inf] { arange(-inf, 0.5); }), std::string("unsupported range: -inf -> 0.5"));
    QCOMPARE(test::textOf([inf] { arange(0.0, 5.0, inf); }), std::string("step must be finite but got inf"));
    QCOMPARE(test::textOf([] { arange(0.0, 5.0, 1e-300); }), std::string("invalid size, possible overflow?"));
  }

  // Issue 48, section 2, item 5: the mean of nothing is NaN (0 / 0), in every floating dtype and along
  // an empty dim; sums of nothing stay 0.
  void meanOfNothingIsNan() {
    for (const DType d : {kFloat32, kFloat64, kFloat16, kBFloat16}) {
      QVERIFY(std::isnan(Tensor::empty({0}, d).mean().item()));
      const std::vector<double> cols = mean(Tensor::empty({0, 3}, d), 0).toVector<double>();
      QCOMPARE(cols.size(), std::size_t{3});
      for (const double c : cols) QVERIFY(std::isnan(c));
      QCOMPARE(mean(Tensor::empty({0, 3}, d), 1).numel(), 0);
    }
    QCOMPARE(Tensor::empty({0}).sum().item(), 0.0);
    QCOMPARE(zeros({2, 3}).mean().item(), 0.0);
    Tensor x = Tensor::empty({0, 3}).requires_grad_();
    mean(x, 0).sum().backward();
    QCOMPARE(x.grad().sizes(), (Shape{0, 3}));
    QCOMPARE(test::textOf([] { mean(ones({2}, {.dtype = kInt64})); }),
             std::string("mean(): could not infer output dtype. Input dtype must be either a floating point or complex dtype. Got: Long"));
    QVERIFY_THROWS_EXCEPTION(NotImplementedError, mean(ones({2}, {.dtype = kBool}), 0));
  }

  // expand: -1 keeps a size; any other negative size PyTorch's geometry lets through fails its element
  // count ("numel: integer multiplication overflow"), so no tensor of size -2 exists to print.
  void expandTakesMinusOneOnly() {
    QCOMPARE(ones({1, 3}).expand({-1, 3}).sizes(), (Shape{1, 3}));
    QCOMPARE(ones({2, 3}).expand({4, -1, -1}).sizes(), (Shape{4, 2, 3}));
    QCOMPARE(ones({1, 3}).expand({0, 3}).sizes(), (Shape{0, 3}));
    QCOMPARE(test::textOf([] { ones({1, 3}).expand({-2, 3}); }), std::string("numel: integer multiplication overflow"));
    QCOMPARE(test::textOf([] { ones({1}).expand({-5}); }), std::string("numel: integer multiplication overflow"));
    QCOMPARE(test::textOf([] { ones({1, 1}).expand({2, -2}); }), std::string("numel: integer multiplication overflow"));
    QCOMPARE(test::textOf([] { ones({3}).expand({-1, 3}); }),
             std::string("The expanded size of the tensor (-1) isn't allowed in a leading, non-existing dimension 0"));
    QCOMPARE(test::textOf([] { ones({2, 3}).expand({-2, 3}); }),
             std::string("The expanded size of the tensor (-2) must match the existing size (2) at non-singleton dimension 0.  Target "
                         "sizes: [-2, 3].  Tensor sizes: [2, 3]"));
    QCOMPARE(test::textOf([] { ones({2, 3}).expand({3}); }),
             std::string("expand(torch.FloatTensor{[2, 3]}, size=[3]): the number of sizes provided (1) must be greater or equal to "
                         "the number of dimensions in the tensor (2)"));
  }

  // Python's // and % (torch.floor_divide, torch.remainder): floor division and the remainder with the
  // divisor's sign, PyTorch's values at the edges (the CPU reference of the CUDA kernels).
  void floorDivideAndRemainderFollowPython() {
    const float inf = INFINITY;
    const Tensor x = tensor({-7.5f, -3.0f, -2.0f, 0.0f, 1.0f, 2.5f, 7.0f, inf}, {8});
    auto values = [](const Tensor& t) { return t.toVector<double>(); };
    auto same = [](const std::vector<double>& a, const std::vector<double>& b) {
      if (a.size() != b.size()) return false;
      for (std::size_t i = 0; i < a.size(); ++i) {
        if (std::isnan(a[i]) || std::isnan(b[i])) {
          if (!(std::isnan(a[i]) && std::isnan(b[i]))) return false;
        } else if (a[i] != b[i] || std::signbit(a[i]) != std::signbit(b[i])) {  // -0.0 is not 0.0 here
          return false;
        }
      }
      return true;
    };
    const double nan = std::nan("");
    QVERIFY(same(values(floor_divide(x, 2.0)), {-4, -2, -1, 0, 0, 1, 3, nan}));
    QVERIFY(same(values(floor_divide(x, -2.0)), {3, 1, 1, -0.0, -1, -2, -4, nan}));
    QVERIFY(same(values(floor_divide(x, 0.0)), {-inf, -inf, -inf, nan, inf, inf, inf, inf}));
    QVERIFY(same(values(floor_divide(x, 0.3)), {-25, -10, -7, 0, 3, 8, 23, nan}));  // 0.3 as float32, as PyTorch rounds it
    QVERIFY(same(values(remainder(x, 2.0)), {0.5, 1, -0.0, 0, 1, 0.5, 1, nan}));
    QVERIFY(same(values(remainder(x, -2.0)), {-1.5, -1, -0.0, 0, -1, -1.5, -1, nan}));
    QVERIFY(same(values(remainder(x, inf)), {inf, inf, inf, 0, 1, 2.5, 7, nan}));
    QVERIFY(same(values(remainder(7.0, tensor({2.5f, -2.5f}, {2}))), {2, -0.5}));
    QVERIFY(same(values(floor_divide(-7.5, tensor({2.0f, -2.0f}, {2}))), {-4, 3}));
    // Integers, with the same signs; 2^62 + 1 stays exact; INT64_MIN // -1 wraps as in PyTorch 2 (1.13's
    // CPU kernel traps with SIGFPE there).
    const Tensor i = tensor(std::vector<std::int64_t>{-7, -3, -1, 0, 1, 2, 7}, {7});
    QCOMPARE(floor_divide(i, 2.0).toVector<std::int64_t>(), (std::vector<std::int64_t>{-4, -2, -1, 0, 0, 1, 3}));
    QCOMPARE(floor_divide(i, -2.0).toVector<std::int64_t>(), (std::vector<std::int64_t>{3, 1, 0, 0, -1, -1, -4}));
    QCOMPARE(remainder(i, 3.0).toVector<std::int64_t>(), (std::vector<std::int64_t>{2, 0, 2, 0, 1, 2, 1}));
    QCOMPARE(remainder(i, -3.0).toVector<std::int64_t>(), (std::vector<std::int64_t>{-1, 0, -1, 0, -2, -1, -2}));
    QCOMPARE(floor_divide(i, 2.0).dtype(), kInt64);
    QCOMPARE(floor_divide(i, 2.5).dtype(), kFloat32);  // a fraction makes it float, as PyTorch
    const std::int64_t min = std::numeric_limits<std::int64_t>::min(), big = (std::int64_t{1} << 62) + 1;
    const Tensor edges = tensor(std::vector<std::int64_t>{min, big}, {2});
    const Tensor by = tensor(std::vector<std::int64_t>{-1, (std::int64_t{1} << 53) + 1}, {2});
    QCOMPARE(floor_divide(edges, by).toVector<std::int64_t>(), (std::vector<std::int64_t>{min, 511}));
    QCOMPARE(remainder(edges, by).toVector<std::int64_t>(), (std::vector<std::int64_t>{0, 9007199254740482}));
    // An integer division by zero raises on the CPU, as PyTorch's CPU kernel; bool with bool is refused.
    QCOMPARE(test::textOf([&] { floor_divide(i, 0.0); }), std::string("ZeroDivisionError"));
    QCOMPARE(test::textOf([&] { remainder(i, i); }), std::string("ZeroDivisionError"));
    QCOMPARE(test::textOf([&] { floor_divide(5.0, i); }), std::string("ZeroDivisionError"));
    QCOMPARE(floor_divide(Tensor::empty({0}, kInt64), 0.0).numel(), 0);  // nothing divided, nothing raised
    const Tensor b = tensor(std::vector<std::int64_t>{1, 0}, {2}).to(kBool);
    QCOMPARE(test::textOf([&] { floor_divide(b, b); }), std::string("\"div_floor_cpu\" not implemented for 'Bool'"));
    QCOMPARE(test::textOf([&] { remainder(b, b); }), std::string("\"remainder_cpu\" not implemented for 'Bool'"));
    QCOMPARE(floor_divide(b, 2.0).dtype(), kInt64);  // a bool tensor with an int: int64, as PyTorch
    QCOMPARE(remainder(b, 2.0).toVector<std::int64_t>(), (std::vector<std::int64_t>{1, 0}));
    QCOMPARE(result_type(b, full({}, 2.0, {.dtype = kInt64})), kInt64);  // a 0-dim int64 outranks a bool tensor
    // float16 and bfloat16 compute in float and round once, with the number rounded to the dtype first.
    QCOMPARE(remainder(full({1}, -7.5, {.dtype = kFloat16}), 0.3).toVector<double>(), (std::vector<double>{0.001220703125}));
    QCOMPARE(remainder(full({1}, -7.5, {.dtype = kBFloat16}), 0.3).toVector<double>(), (std::vector<double>{0.01953125}));
  }

  // remainder's gradient is 1 for the dividend and -floor(a / b) for the divisor; floor_divide has none,
  // and backward through it raises PyTorch's error (its result still requires grad, as in PyTorch).
  void floorDivideAndRemainderGradients() {
    Tensor a = tensor({7.5f, -3.2f, 4.0f}, {3}).requires_grad_();
    Tensor b = tensor({2.0f, 1.5f, -1.5f}, {3}).requires_grad_();
    Tensor r = remainder(a, b);
    QCOMPARE(r.grad_fn()->name(), std::string("RemainderBackward1"));
    r.sum().backward();
    QCOMPARE(a.grad().toVector<float>(), (std::vector<float>{1, 1, 1}));
    QCOMPARE(b.grad().toVector<float>(), (std::vector<float>{-3, 3, 3}));
    Tensor c = tensor({7.5f, -3.2f}, {2}).requires_grad_();
    Tensor s = remainder(c, 2.0);
    QCOMPARE(s.grad_fn()->name(), std::string("RemainderBackward0"));
    s.sum().backward();
    QCOMPARE(c.grad().toVector<float>(), (std::vector<float>{1, 1}));
    Tensor q = floor_divide(c, 2.0);
    QVERIFY(q.requires_grad());
    QCOMPARE(q.grad_fn()->name(), std::string("NotImplemented"));
    QCOMPARE(test::textOf([&] { q.sum().backward(); }), std::string("derivative for aten::floor_divide is not implemented"));
    QCOMPARE(test::textOf([&] { remainder(7.0, c).sum().backward(); }), std::string("derivative for aten::remainder is not implemented"));
    QVERIFY(!floor_divide(c.detach(), 2.0).requires_grad());
    // The engine stays usable after the error: the next backward works.
    Tensor d = tensor({1.5f}, {1}).requires_grad_();
    remainder(d, 1.0).sum().backward();
    QCOMPARE(d.grad().toVector<float>(), (std::vector<float>{1}));
  }

  void printsLikePyTorch() {
    QCOMPARE(QString::fromStdString(tensor({1, 2}, {2}).toString()), QString("tensor([1, 2], shape=[2])"));
    Tensor g = tensor({1, 2}, {2}, {.requires_grad = true});
    QVERIFY(QString::fromStdString((g * 2.0).toString()).contains("grad_fn=<MulBackward0>"));
  }

  void cpuDeviceParsing() {
    QCOMPARE(Device::parse("cpu").str(), std::string("cpu"));
    QCOMPARE(Device::parse("cuda").str(), std::string("cuda:0"));
    QCOMPARE(Device::parse("cuda:3").index(), 3);
    QVERIFY_THROWS_EXCEPTION(ValueError, Device::parse("gpu"));
    QVERIFY_THROWS_EXCEPTION(ValueError, Device::parse("cuda:x"));
    QVERIFY_THROWS_EXCEPTION(ValueError, Device::parse("cuda:-1"));
  }
};

QTEST_GUILESS_MAIN(TestTensor)
#include "test_tensor.moc"
