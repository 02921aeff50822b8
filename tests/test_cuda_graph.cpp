// CUDA graphs (engine/runtime/cuda_graph.h), on the emulated GPU and, where there is one, on a real
// GPU: captured work runs only when replayed, a replayed training step trains exactly as the same steps
// run eagerly (capturable Adam included), the graph's private pool keeps its memory from other tensors
// and from empty_cache(), and PyTorch's rules raise PyTorch's errors -- a synchronising call during the
// capture, the default stream, a non-capturable optimizer, optimizer state made during the capture --
// leaving the device usable. ctest runs it with GPULAB_EMULATED_GPU=1, so it runs on GPU machines too.
#include <optional>

#include "engine/core/errors.h"
#include "engine/memory/caching_allocator.h"
#include "engine/runtime/device_memory.h"
#include "engine/nn/layers.h"
#include "engine/ops/ops.h"
#include "engine/optim/optimizer.h"
#include "engine/runtime/cuda_graph.h"
#include "engine/runtime/cuda_runtime.h"
#include "engine/runtime/emulated_gpu.h"
#include "engine/runtime/execution_context.h"
#include "engine/runtime/stream.h"
#include "test_util.h"

using namespace gpulab;
using test::textOf;

namespace {

// The rows: the emulated GPU everywhere, a real GPU where there is one.
void addGpuRows() {
  QTest::addColumn<bool>("real");
  QTest::newRow("emulated GPU") << false;
  QTest::newRow("GPU") << true;
}
std::optional<Device> graphGpu(bool real) {
  if (real) return cuda::isAvailable() ? std::optional<Device>(Device(DeviceType::CUDA, 0)) : std::nullopt;
  return cuda::emulatedDevice();
}

double maxAbsDiff(const Tensor& a, const Tensor& b) { return (a.to(kCPU) - b.to(kCPU)).abs().max().item(); }

// The seed lessons' regression model, 16 -> 64 -> 1, the same weights for every call with one seed.
std::shared_ptr<nn::Sequential> regressionModel(Device device) {
  Generator gen(7);
  auto model = std::make_shared<nn::Sequential>();
  model->push_back(std::make_shared<nn::Linear>(16, 64, true, gen));
  model->push_back(std::make_shared<nn::ReLU>());
  model->push_back(std::make_shared<nn::Linear>(64, 1, true, gen));
  model->to(device);
  return model;
}

// Eight batches of 64 regression examples, on `device`.
struct Batches {
  std::vector<Tensor> x, y;
};
Batches regressionBatches(Device device) {
  Generator gen(11);
  Batches b;
  for (int i = 0; i < 8; ++i) {
    b.x.push_back(randn({64, 16}, gen).to(device));
    b.y.push_back(randn({64, 1}, gen).to(device));
  }
  return b;
}

}  // namespace

class TestCudaGraph : public QObject {
  Q_OBJECT

 private slots:
  void init() {
    if (QByteArray(QTest::currentTestFunction()) == "capturableAdamIsAdamInEveryDtype") return;  // the CPU's
    QFETCH(bool, real);
    const std::optional<Device> gpu = graphGpu(real);
    if (!gpu) QSKIP(real ? "no usable GPU" : "the emulated GPU is off (GPULAB_EMULATED_GPU=0)");
    device_.emplace(*gpu);
    guard_.emplace(gpu->index());  // torch.cuda.set_device: graphs capture the current CUDA device
  }
  void cleanup() {
    guard_.reset();
    device_.reset();
  }

  // Nothing runs while a graph is captured; each replay runs all of it once.
  void capturedWorkRunsOnlyWhenReplayed_data() { addGpuRows(); }
  void capturedWorkRunsOnlyWhenReplayed() {
    const Device gpu = *device_;
    Tensor counter = zeros({4}, {.device = gpu});
    cuda::CUDAGraph g;
    cuda::graph(g, [&] { counter.copy_(counter + 1.0); });
    QVERIFY(g.captured());
    QVERIFY2(g.num_nodes() >= 1, qPrintable(QString("%1 nodes").arg(g.num_nodes())));
    QCOMPARE(counter.sum().item(), 0.0);  // captured, not run
    for (int i = 0; i < 5; ++i) g.replay();
    QCOMPARE(counter.sum().item(), 4.0 * 5);
  }

  // A training step captured once and replayed trains exactly as the same steps run eagerly: the
  // forward, backward and Adam's update all replay, and capturable Adam's step count moves on the
  // device (a count frozen at its capture value would give other updates from the second replay on).
  void aReplayedStepTrainsLikeTheEagerSteps_data() { addGpuRows(); }
  void aReplayedStepTrainsLikeTheEagerSteps() {
    const Device gpu = *device_;
    const Batches data = regressionBatches(gpu);
    constexpr int kSteps = 24, kWarmup = 3;
    auto eagerModel = regressionModel(gpu);
    optim::Adam eagerOpt(eagerModel->parameters(), {.lr = 1e-2});  // capturable=False: counted on the host
    std::vector<double> eagerLosses;
    for (int s = 0; s < kSteps; ++s) {
      Tensor loss = mse_loss((*eagerModel)(data.x[s % 8]), data.y[s % 8]);
      eagerOpt.zero_grad();
      loss.backward();
      eagerOpt.step();
      eagerLosses.push_back(loss.item());
    }

    auto model = regressionModel(gpu);
    optim::Adam opt(model->parameters(), {.lr = 1e-2, .capturable = true});
    Tensor staticX = data.x[0].clone(), staticY = data.y[0].clone();
    std::vector<double> losses;
    {  // Warm-up on a side stream, as PyTorch's recipe: the optimizer's state exists before the capture.
      const cuda::Stream side = cuda::Stream::create(gpu);
      side.wait_stream(cuda::current_stream(gpu));
      cuda::StreamGuard on(side);
      for (int s = 0; s < kWarmup; ++s) {
        staticX.copy_(data.x[s % 8]);
        staticY.copy_(data.y[s % 8]);
        Tensor loss = mse_loss((*model)(staticX), staticY);
        opt.zero_grad();
        loss.backward();
        opt.step();
        losses.push_back(loss.item());
      }
      cuda::current_stream(gpu).wait_stream(side);
    }
    cuda::CUDAGraph g;
    Tensor staticLoss;
    opt.zero_grad(/*set_to_none=*/true);  // the capture's backward then makes the gradients it replays into
    cuda::graph(g, [&] {
      staticLoss = mse_loss((*model)(staticX), staticY);
      staticLoss.backward();
      opt.step();
    });
    QVERIFY2(g.num_nodes() >= 8, qPrintable(QString("a whole training step in %1 nodes").arg(g.num_nodes())));
    for (int s = kWarmup; s < kSteps; ++s) {
      staticX.copy_(data.x[s % 8]);
      staticY.copy_(data.y[s % 8]);
      g.replay();
      losses.push_back(staticLoss.item());
    }
    QCOMPARE(losses.size(), eagerLosses.size());
    for (int s = 0; s < kSteps; ++s) {
      QVERIFY2(std::abs(losses[s] - eagerLosses[s]) <= 1e-5 * (1.0 + std::abs(eagerLosses[s])),
               qPrintable(QString("step %1: replayed loss %2, eager %3").arg(s).arg(losses[s]).arg(eagerLosses[s])));
    }
    QVERIFY2(losses.back() < 0.8 * losses.front(), "the replays trained the model");
    const std::vector<Tensor> a = model->parameters(), b = eagerModel->parameters();
    for (std::size_t i = 0; i < a.size(); ++i) QVERIFY2(maxAbsDiff(a[i], b[i]) <= 1e-5, qPrintable(QString("parameter %1").arg(i)));
  }

  // The capture's intermediates were freed when it ended, yet each replay writes them again: their
  // memory stays in the graph's pool, never handed to another tensor -- not even one made on the
  // capture's own stream -- and empty_cache() keeps it while the graph lives.
  void theGraphsPoolKeepsItsMemory_data() { addGpuRows(); }
  void theGraphsPoolKeepsItsMemory() {
    const Device gpu = *device_;
    Generator gen(3);
    const Tensor x = randn({256, 256}, gen).to(gpu);
    Tensor out;
    cuda::CUDAGraph g;
    const cuda::Stream side = cuda::Stream::create(gpu);
    cuda::graph(g, [&] {
      const Tensor tmp = x * 2.0;  // freed at the end of the capture, rewritten at every replay
      out = tmp + 1.0;
    }, std::nullopt, side);
    std::vector<Tensor> others;
    {
      cuda::StreamGuard on(side);  // the stream the pool's blocks were made on: only the pool keeps them apart
      for (int i = 0; i < 8; ++i) others.push_back(full({256, 256}, 7.0, {.device = gpu}));
    }
    cuda::current_stream(gpu).wait_stream(side);
    g.replay();
    QCOMPARE(maxAbsDiff(out, x * 2.0 + 1.0), 0.0);
    for (const Tensor& t : others) QCOMPARE((t - 7.0).abs().max().item(), 0.0);  // no replay wrote into them
    // With every tensor of the pool freed, its memory is still the graph's: empty_cache() keeps it.
    others.clear();
    empty_cache(gpu);
    const std::int64_t withGraph = memory_reserved(gpu);
    out = Tensor();
    empty_cache(gpu);
    QCOMPARE(memory_reserved(gpu), withGraph);
    g.reset();
    empty_cache(gpu);
    QVERIFY2(memory_reserved(gpu) < withGraph, "reset() gave the pool back");
  }

  // record_stream inside a capture (the capture's own stream, or a block used on another stream and
  // freed during the capture): no event may be recorded then. The block waits until the capture ended.
  void recordStreamDuringACaptureWaitsForItsEnd_data() { addGpuRows(); }
  void recordStreamDuringACaptureWaitsForItsEnd() {
    const Device gpu = *device_;
    const cuda::Stream side = cuda::Stream::create(gpu), other = cuda::Stream::create(gpu);
    Tensor usedElsewhere = ones({1024}, {.device = gpu});
    usedElsewhere.record_stream(other);
    usedElsewhere.record_stream(side);  // the capture's stream: freeing it there would record an event in the capture
    Tensor y;
    cuda::CUDAGraph g;
    cuda::graph(g, [&] {
      Tensor t = usedElsewhere * 3.0;
      t.record_stream(side);     // the capture's own stream: nothing to do, as in PyTorch
      usedElsewhere = Tensor();  // freed during the capture; its block waits for `other`
      y = t + 1.0;
    }, std::nullopt, side);
    g.replay();
    QCOMPARE(y.sum().item(), 1024.0 * 4);
    empty_cache(gpu);  // the deferred block's marker is recorded and passed: nothing waits for ever
    QCOMPARE(allocatorFor(gpu).pendingBytes(), std::int64_t{0});
  }

  // Random ops in a capture draw from the default generator through the graph's counter cell: each
  // replay takes the generator's next counters, so a replay right after manual_seed(s) draws what the
  // same ops drew eagerly after it, leaves the generator where they left it, and the next replay draws
  // new numbers (a new dropout mask each step, as PyTorch's graph-safe generator gives).
  void randomOpsInACaptureDrawNewNumbersAtEachReplay_data() { addGpuRows(); }
  void randomOpsInACaptureDrawNewNumbersAtEachReplay() {
    const Device gpu = *device_;
    Tensor x = ones({256}, {.device = gpu});
    auto draw = [&] { return std::vector<Tensor>{rand({64}, defaultGenerator(), {.device = gpu}), dropout(x, 0.5, true),
                                                 randn({33}, defaultGenerator(), {.device = gpu}),
                                                 randint(0, 1000, {16}, defaultGenerator(), {.dtype = kInt64, .device = gpu})}; };
    manual_seed(7);
    const std::vector<Tensor> eager = draw();
    const std::uint64_t offsetAfterEager = defaultGenerator().advance(0);

    cuda::CUDAGraph g;
    std::vector<Tensor> captured;
    manual_seed(1234);  // whatever the generator says at the capture is not what a replay draws
    cuda::graph(g, [&] { captured = draw(); });
    QCOMPARE(defaultGenerator().advance(0), std::uint64_t{0});  // the capture drew nothing from it

    manual_seed(7);
    g.replay();
    cuda::synchronize(gpu.index());
    auto values = [](const Tensor& t) { return t.to(kCPU).toVector<double>(); };
    for (std::size_t i = 0; i < eager.size(); ++i) QVERIFY2(values(captured[i]) == values(eager[i]), qPrintable(QString::number(i)));
    QCOMPARE(defaultGenerator().advance(0), offsetAfterEager);

    const std::vector<double> firstMask = values(captured[1]);
    g.replay();
    cuda::synchronize(gpu.index());
    for (std::size_t i = 0; i < eager.size(); ++i) QVERIFY2(values(captured[i]) != values(eager[i]), qPrintable(QString::number(i)));
    QVERIFY(values(captured[1]) != firstMask);
    // Still a dropout: every element kept (x 2) or dropped, about half of each.
    const double kept = (captured[1] == full({256}, 2.0, {.device = gpu})).to(kFloat32).sum().item();
    QCOMPARE((captured[1] == zeros({256}, {.device = gpu})).to(kFloat32).sum().item() + kept, 256.0);
    QVERIFY2(kept > 90 && kept < 166, qPrintable(QString::number(kept)));
    QCOMPARE(defaultGenerator().advance(0), 2 * offsetAfterEager);
  }

  // A generator of the program's own inside a capture: refused (replays advance the default one only),
  // the capture abandoned, the device usable; evaluation-mode dropout draws nothing and is captured.
  void aGeneratorOfItsOwnInACaptureIsRefused_data() { addGpuRows(); }
  void aGeneratorOfItsOwnInACaptureIsRefused() {
    const Device gpu = *device_;
    Tensor x = ones({64}, {.device = gpu});
    Generator own(5);
    cuda::CUDAGraph g;
    const std::string e = textOf([&] { cuda::graph(g, [&] { (void)dropout(x, 0.5, true, own); }); });
    QVERIFY2(e.find("dropout inside a CUDA graph capture draws from a generator of its own") != std::string::npos, e.c_str());
    QVERIFY(!g.captured());
    QCOMPARE(own.advance(0), std::uint64_t{0});
    cuda::CUDAGraph h;
    Tensor y;
    cuda::graph(h, [&] { y = dropout(x * 2.0, 0.5, false); });
    h.replay();
    QCOMPARE(y.sum().item(), 128.0);
  }

  // PyTorch's rule: nothing may make the host wait on the device while it captures. .item() raises,
  // the capture is abandoned, and the device is usable afterwards -- a second capture works.
  void aSynchronisingCallDuringCaptureRaises_data() { addGpuRows(); }
  void aSynchronisingCallDuringCaptureRaises() {
    const Device gpu = *device_;
    Tensor x = ones({8}, {.device = gpu});
    cuda::CUDAGraph g;
    const std::string item = textOf([&] { cuda::graph(g, [&] { (void)(x * 2.0).sum().item(); }); });
    QVERIFY2(item.find("operation not permitted when stream is capturing") != std::string::npos, item.c_str());
    QVERIFY(!g.captured());
    QVERIFY(!cuda::isCapturing(gpu));
    const std::string sync = textOf([&] {
      cuda::CUDAGraph h;
      cuda::graph(h, [&] { cuda::synchronize(gpu.index()); });
    });
    QVERIFY2(sync.find("operation not permitted when stream is capturing") != std::string::npos, sync.c_str());
    const std::string copy = textOf([&] {
      cuda::CUDAGraph h;
      cuda::graph(h, [&] { (void)ones({8}).to(gpu); });
    });
    QVERIFY2(copy.find("operation not permitted when stream is capturing") != std::string::npos, copy.c_str());
    // A body that swallows the error still loses the capture, at its end.
    cuda::CUDAGraph swallowed;
    const std::string end = textOf([&] {
      cuda::graph(swallowed, [&] {
        try {
          (void)x.sum().item();
        } catch (const Error&) {
        }
      });
    });
    QVERIFY2(end.find("operation failed due to a previous error during capture") != std::string::npos, end.c_str());
    QVERIFY(!swallowed.captured());
    // The device is fine: eager work and a new capture.
    QCOMPARE((x * 3.0).sum().item(), 24.0);
    cuda::CUDAGraph again;
    Tensor y;
    cuda::graph(again, [&] { y = x * 5.0; });
    again.replay();
    QCOMPARE(y.sum().item(), 40.0);
  }

  void captureNeedsASideStream_data() { addGpuRows(); }
  void captureNeedsASideStream() {
    cuda::CUDAGraph g;
    const std::string e = textOf([&] { g.capture_begin(); });  // the default stream is current
    QVERIFY2(e.find("CUDA graphs must be captured on a non-default stream") != std::string::npos, e.c_str());
    QVERIFY(!cuda::isCapturing(*device_));
    const std::string replay = textOf([&] { g.replay(); });
    QVERIFY2(replay.find("without a preceding successful capture") != std::string::npos, replay.c_str());
  }

  // An optimizer step captured with its step count on the host would replay one count forever.
  void optimizersMustBeCapturableAndWarm_data() { addGpuRows(); }
  void optimizersMustBeCapturableAndWarm() {
    const Device gpu = *device_;
    const Batches data = regressionBatches(gpu);
    auto model = regressionModel(gpu);
    auto step = [&](optim::Optimizer& opt) {
      Tensor loss = mse_loss((*model)(data.x[0]), data.y[0]);
      loss.backward();
      opt.step();
    };
    optim::Adam plain(model->parameters(), {.lr = 1e-3});
    step(plain);  // warm: the state exists
    cuda::CUDAGraph g;
    const std::string e = textOf([&] { cuda::graph(g, [&] { step(plain); }); });
    QVERIFY2(e.find("Attempting CUDA graph capture of step() for an instance of Adam but param_groups' capturable is False") !=
                 std::string::npos,
             e.c_str());
    optim::Adam cold(model->parameters(), {.lr = 1e-3, .capturable = true});
    cuda::CUDAGraph h;
    const std::string c = textOf([&] { cuda::graph(h, [&] { step(cold); }); });
    QVERIFY2(c.find("state must exist before a CUDA graph captures step()") != std::string::npos, c.c_str());
    QVERIFY(!h.captured());
    optim::SGD momentum(model->parameters(), {.lr = 1e-3, .momentum = 0.9});
    cuda::CUDAGraph k;
    const std::string m = textOf([&] { cuda::graph(k, [&] { step(momentum); }); });
    QVERIFY2(m.find("SGD's state must exist") != std::string::npos, m.c_str());
  }

  // Capturable Adam is Adam: the same updates in every dtype, its step count float32 whatever the
  // parameters' dtype (a bfloat16 count stops at 256, a float16 one at 2048). On the CPU: no graph needed.
  void capturableAdamIsAdamInEveryDtype_data() {
    QTest::addColumn<int>("dtype");
    QTest::newRow("float32") << static_cast<int>(kFloat32);
    QTest::newRow("float64") << static_cast<int>(kFloat64);
    QTest::newRow("bfloat16") << static_cast<int>(kBFloat16);
  }
  void capturableAdamIsAdamInEveryDtype() {
    QFETCH(int, dtype);
    Generator gen(5);
    const Tensor start = randn({32}, gen).to(static_cast<DType>(dtype));
    Tensor a = start.clone(), b = start.clone();
    a.requires_grad_(true);
    b.requires_grad_(true);
    optim::Adam plain({a}, {.lr = 1e-2}), capturable({b}, {.lr = 1e-2, .capturable = true});
    for (int s = 0; s < 600; ++s) {
      const Tensor target = full({32}, s % 7 - 3.0).to(static_cast<DType>(dtype));
      for (auto [p, opt] : {std::pair<Tensor*, optim::Optimizer*>{&a, &plain}, {&b, &capturable}}) {
        opt->zero_grad();
        ((*p - target) * (*p - target)).sum().backward();
        opt->step();
      }
    }
    QCOMPARE(maxAbsDiff(a.detach().to(kFloat64), b.detach().to(kFloat64)), 0.0);
  }

 private:
  std::optional<Device> device_;
  std::optional<CudaDeviceGuard> guard_;
};

QTEST_GUILESS_MAIN(TestCudaGraph)
#include "test_cuda_graph.moc"
