// CPU/CUDA parity of batch normalisation (engine/kernels/norm/): F.batch_norm forward and backward, the
// running statistics it updates, and eval mode, run on the CPU (the reference) and on cuda:0 from the
// same inputs, in each floating dtype; statistics are float32 for the 16-bit inputs. Skipped when no
// GPU is usable.
//
// Both sides compute in the same math type (float for float16/bfloat16 and float32 on CUDA; the CPU
// sums in double) with the same two-pass formulas, so what differs is summation order (the CUDA block
// reduction's tree against the CPU's sequential double sums) and, in 16-bit outputs, a rounding that
// lands on the other side of a boundary. Tolerances, absolute + relative, as the op table's in
// tests/test_cuda_parity.cpp:
//   float32 1e-4 + 1e-4 (sums of up to 8 * 33 * 33 = 8712 values per channel in the large case),
//   float64 1e-9 + 1e-9, float16 1e-2 + 1e-2, bfloat16 5e-2 + 5e-2.
#include <QtTest>

#include <cmath>

#include "engine/autograd/grad_mode.h"
#include "engine/core/generator.h"
#include "engine/nn/layers.h"
#include "test_util.h"

using namespace gpulab;

namespace {

struct Tol {
  double atol, rtol;
};
Tol tolFor(DType d) {
  switch (d) {
    case DType::Float64: return {1e-9, 1e-9};
    case DType::Float16: return {1e-2, 1e-2};
    case DType::BFloat16: return {5e-2, 5e-2};
    default: return {1e-4, 1e-4};
  }
}

DType statDtype(DType d) { return d == kFloat16 || d == kBFloat16 ? kFloat32 : d; }

}  // namespace

class TestCudaNormParity : public QObject {
  Q_OBJECT

 private slots:
  void batchNormMatchesCpu_data() {
    QTest::addColumn<int>("dtype");
    QTest::addColumn<QString>("shape");
    QTest::addColumn<bool>("training");
    QTest::addColumn<bool>("affine");
    for (DType d : {kFloat32, kFloat64, kFloat16, kBFloat16})
      for (const char* shape : {"4x3x5x5", "8x5", "2x16x33x33", "8x7x33x33", "3x4x7"})
        for (bool training : {true, false})
          for (bool affine : {true, false}) {
            const QString name = QString("%1/%2/%3/%4")
                                     .arg(QString::fromStdString(dtypeName(d)), shape, training ? "train" : "eval",
                                          affine ? "affine" : "plain");
            QTest::newRow(qPrintable(name)) << int(d) << QString(shape) << training << affine;
          }
  }

  void batchNormMatchesCpu() {
    if (!test::cudaUsable()) QSKIP("no CUDA device");
    QFETCH(int, dtype);
    QFETCH(QString, shape);
    QFETCH(bool, training);
    QFETCH(bool, affine);
    const DType d = static_cast<DType>(dtype);
    const DType s = statDtype(d);
    Shape sizes;
    for (const QString& part : shape.split('x')) sizes.push_back(part.toLongLong());
    const std::int64_t C = sizes[1];
    Generator gen(1234);
    Tensor x = (randn(sizes, gen) * 2.0 + 1.0).to(d);
    Tensor w = affine ? randn({C}, gen).to(s) : Tensor(), b = affine ? randn({C}, gen).to(s) : Tensor();
    Tensor rm = randn({C}, gen).to(s), rv = (rand({C}, gen) + 0.5).to(s);
    Tensor g = randn(sizes, gen).to(d);
    const Device cuda = test::cudaDevice();

    struct Result {
      Tensor out, gx, gw, gb, rm, rv;
    };
    // Fresh leaves on each device: x.to(kCPU) is x itself, so without detach() the CPU run would make the
    // shared inputs require grad, and the GPU run's x.to(dev) would then be a non-leaf with no .grad.
    auto leaf = [](const Tensor& t, Device dev) { return t.to(dev).detach().requires_grad_(true); };
    auto run = [&](Device dev) {
      Tensor xi = leaf(x, dev);
      Tensor wi = affine ? leaf(w, dev) : Tensor(), bi = affine ? leaf(b, dev) : Tensor();
      Tensor rmi = rm.to(dev).clone(), rvi = rv.to(dev).clone();
      Tensor out = batch_norm(xi, rmi, rvi, wi, bi, training, 0.1, 1e-5);
      out.backward(g.to(dev));
      return Result{out.detach().cpu(), xi.grad().cpu(), affine ? wi.grad().cpu() : Tensor(),
                    affine ? bi.grad().cpu() : Tensor(), rmi.cpu(), rvi.cpu()};
    };
    const Result ref = run(kCPU), gpu = run(cuda);
    const Tol t = tolFor(d);
    QCOMPARE(gpu.out.dtype(), d);
    GPULAB_COMPARE_TENSORS(gpu.out, ref.out, t.atol, t.rtol);
    GPULAB_COMPARE_TENSORS(gpu.gx, ref.gx, t.atol, t.rtol);
    if (affine) {
      // parameter gradients are sums over the M = N * H * W values of a channel, of size ~sqrt(M), and
      // their rounding errors (random signs) grow like sqrt(M) too
      const double scale = std::sqrt(static_cast<double>(x.numel() / C));
      GPULAB_COMPARE_TENSORS(gpu.gw, ref.gw, t.atol * scale, t.rtol);
      GPULAB_COMPARE_TENSORS(gpu.gb, ref.gb, t.atol * scale, t.rtol);
    }
    GPULAB_COMPARE_TENSORS(gpu.rm, ref.rm, t.atol, t.rtol);
    GPULAB_COMPARE_TENSORS(gpu.rv, ref.rv, t.atol, t.rtol);
  }

  // The module on cuda:0: buffers moved with it, updated there, num_batches_tracked counted.
  void moduleOnCuda() {
    if (!test::cudaUsable()) QSKIP("no CUDA device");
    Generator gen(7);
    nn::BatchNorm2d cpu(4), gpu(4);
    gpu.to(test::cudaDevice());
    for (int step = 0; step < 3; ++step) {
      Tensor x = randn({6, 4, 5, 5}, gen);
      Tensor a = cpu(x), b = gpu(x.to(test::cudaDevice()));
      GPULAB_COMPARE_TENSORS(b.cpu(), a, 1e-4, 1e-4);
    }
    GPULAB_COMPARE_TENSORS(gpu.running_mean.cpu(), cpu.running_mean, 1e-5, 1e-5);
    GPULAB_COMPARE_TENSORS(gpu.running_var.cpu(), cpu.running_var, 1e-5, 1e-5);
    QCOMPARE(gpu.num_batches_tracked.item(), 3.0);
    cpu.eval();
    gpu.eval();
    Tensor x = randn({2, 4, 5, 5}, gen);
    GPULAB_COMPARE_TENSORS(gpu(x.to(test::cudaDevice())).cpu(), cpu(x), 1e-5, 1e-5);
  }
};

QTEST_GUILESS_MAIN(TestCudaNormParity)
#include "test_cuda_norm_parity.moc"
