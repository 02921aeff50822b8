// The "profile" lab: torch.profiler on a training step. Read it next to the PyTorch it mirrors:
//
//   for _ in range(warmup): train_step()            # the first steps pay one-off costs: not profiled
//   with torch.profiler.profile(record_shapes=True) as prof:
//       for _ in range(steps):
//           train_step()
//           prof.step()                             # the trace marks each step: ProfilerStep#N
//   print(prof.key_averages().table(sort_by="self_cpu_time_total", row_limit=15))
//   prof.export_chrome_trace("trace.json")          # open in https://ui.perfetto.dev
//
// where train_step() is the training lesson's loop body: forward, loss, zero_grad, backward, step.
// GPU Lab's profiler (engine/profiler/profiler.h) names the ops as PyTorch's does, so the table reads the
// same: aten::linear, aten::relu, the backward nodes ("autograd::engine::evaluate_function:
// AddmmBackward0"), "Optimizer.step#Adam.step". It measures CPU time; on a GPU that is the time to
// launch each kernel, not to run it (the device-time columns come with the streams work).
#include "lessons/labs/profile_lab.h"

#include "engine/core/atomic_file.h"

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <array>
#include <map>

#include "engine/core/errors.h"
#include "engine/core/number_format.h"
#include "engine/autograd/grad_mode.h"
#include "engine/data/dataloader.h"
#include "engine/nn/layers.h"
#include "engine/profiler/profiler.h"
#include "engine/runtime/device_runtime.h"
#include "lessons/labs/training.h"

namespace gpulab::labs {

namespace {

// What kind of work an op is, by its name: the lesson's "compute-bound or overhead-bound?" in numbers.
enum class Kind { MatrixProducts, Elementwise, Backward, Optimizer, Other };
constexpr std::array<const char*, 5> kKindLabels{"matrix products (linear, mm, conv and their gradients)",
                                                 "elementwise, reductions, losses", "autograd bookkeeping",
                                                 "optimizer (step, zero_grad)", "other (copies, new tensors)"};

Kind kindOf(const std::string& name) {
  auto has = [&](const char* s) { return name.find(s) != std::string::npos; };
  if (name.rfind("Optimizer.", 0) == 0) return Kind::Optimizer;
  if (has("aten::linear") || has("aten::mm") || has("aten::matmul") || has("aten::bmm") || has("aten::conv2d") ||
      has("AddmmBackward") || has("MmBackward") || has("ConvolutionBackward") || has("LinearBackward") || has("MatmulBackward"))
    return Kind::MatrixProducts;
  if (has("AccumulateGrad") || name.rfind("autograd::", 0) == 0) return Kind::Backward;
  if (has("aten::to") || has("aten::full") || has("aten::copy")) return Kind::Other;
  return Kind::Elementwise;
}

}  // namespace

std::vector<lab::ParamSpec> ProfileLab::params() const {
  using namespace lab;
  return {
      choiceParam("dataset", "regression", {"regression", "fashion-mnist"},
                  "The training lesson's tasks: the regression loop (16 inputs) or Fashion-MNIST (784 pixels)"),
      textParam("hidden", "64", "Hidden layer widths of the MLP, comma-separated", checkHiddenWidths),
      intParam("batch_size", 64, 1, 65536, "Examples per step"),
      intParam("warmup", 3, 0, 1000, "Steps run before profiling (the first ones pay one-off costs)"),
      intParam("steps", 5, 1, 1000, "Steps profiled"),
      choiceParam("sort_by", "self_cpu_time_total",
                  {"self_cpu_time_total", "cpu_time_total", "self_cuda_time_total", "cuda_time_total", "count"},
                  "key_averages().table(sort_by=...): an op's own time, its time with what it called (on the CPU, or on a "
                  "GPU's stream), or its calls"),
      intParam("row_limit", 15, 1, 1000, "Rows of the op table"),
      boolParam("record_shapes", true, "profile(record_shapes=True): each op's input shapes in the trace"),
      boolParam("trace", true, "prof.export_chrome_trace(...): write the trace for Perfetto / chrome://tracing"),
      textParam("trace_file", "",
                "Where the trace goes (a .json file of yours; empty: profile-trace.json in your cache folder, ~/.cache/gpulab)"),
      deviceParam("device", "The device to train on"),
      intParam("seed", 0, 0, 2147483647, "Seed for the weights and the batches"),
  };
}

std::vector<lab::MeasurementSpec> ProfileLab::measurements() const {
  return {
      {"profiled step time", "ms"},
      {"ops per step", ""},
      {"matrix products: share of self CPU time", "%"},
      {"matrix-product GFLOP per step", "GFLOP"},
      {"matrix products alone: share of the step", "%"},
      {"matrix-product rate at the step's shapes", "GFLOP/s"},
      {"peak matrix-product rate", "GFLOP/s"},
      {"profiler coverage of the wall time", "%"},
      {"most expensive op: share of self CPU time", "%"},
  };
}

void ProfileLab::run(const lab::Params& p, lab::MetricSink& sink, const lab::StopToken& stop) {
  // 1. The model, the data and the training step the profiler watches.
  const Device device = resolveDevice(p.getString("device"));
  announceDevice(sink, device);
  const auto seed = static_cast<std::uint64_t>(p.getInt("seed"));
  const bool classification = p.getString("dataset") == "fashion-mnist";
  const std::shared_ptr<data::TensorDataset> trainSet =
      classification ? data::loadFashionMnist(true) : data::makeRegressionDataset(4096, 16, 0.1, seed);
  const std::int64_t batchSize = std::min(p.getInt("batch_size"), trainSet->size());
  Generator gen(seed);
  auto model = makeMlp(*trainSet, parseWidths(p.getString("hidden")), classification ? 10 : 1, gen);
  model->to(device);
  auto optimizer = makeOptimizer("adam", model->parameters(), 1e-3, 0.0, 0.0);
  data::DataLoader loader(trainSet, {.batch_size = batchSize, .shuffle = true, .drop_last = true, .seed = seed});
  auto it = loader.begin();
  auto trainStep = [&] {
    if (it == loader.end()) it = loader.begin();
    const data::Batch batch = *it;
    ++it;
    Tensor x = batch.inputs.to(device), y = batch.targets.to(device);
    Tensor loss = taskLoss(classification, (*model)(x), y);
    optimizer->zero_grad();
    loss.backward();
    optimizer->step();
  };
  const std::int64_t warmup = p.getInt("warmup"), steps = p.getInt("steps");
  for (std::int64_t i = 0; i < warmup && !stop.stopRequested(); ++i) trainStep();
  synchronizeDevice(device);
  if (stop.stopRequested()) return;

  // 2. The profiled steps.
  profiler::Profile prof({.record_shapes = p.getBool("record_shapes")});
  const double t0 = prof.wallUs();
  for (std::int64_t i = 0; i < steps && !stop.stopRequested(); ++i) {
    trainStep();
    synchronizeDevice(device);
    prof.step();  // the trace's ProfilerStep#N
    sink.progress(static_cast<double>(i + 1), static_cast<double>(steps), "profiled step " + std::to_string(i + 1));
  }
  prof.stop();
  if (stop.stopRequested()) return;
  const double wallUs = prof.wallUs() - t0;
  const profiler::KeyAverages averages = prof.key_averages();

  // 3. The op table, as key_averages().table() prints it (sorted, cut to row_limit).
  const bool onDevice = averages.withDevice;
  std::vector<lab::Axis> columns = {{"name", ""}, {"self CPU", "%"}, {"self CPU", "us"}, {"CPU total", "us"}, {"CPU time avg", "us"}};
  if (onDevice) {
    for (lab::Axis a : std::initializer_list<lab::Axis>{{"self CUDA", "%"}, {"self CUDA", "us"}, {"CUDA total", "us"}}) columns.push_back(a);
  }
  columns.push_back({"calls", ""});
  const std::string sortBy = p.getString("sort_by");
  sink.view({.id = "ops", .title = "key_averages(), sorted by " + sortBy, .kind = lab::ViewKind::Table, .columns = columns,
             .note = "Self: the op's own time; total: with the ops it called (aten::linear's total includes nothing it "
                     "did not do itself here, a backward node's includes the ops its gradient used). " +
                     std::string(onDevice ? "On " + std::string(cuda::isEmulatedGpu(device) ? "the emulated GPU" : "a GPU") +
                                                " the CPU columns are the time to launch each op's kernels; the CUDA columns, "
                                                "the time the device's stream spent on them (two events per op)." +
                                                (cuda::isEmulatedGpu(device)
                                                     ? " The emulated GPU's stream is a thread of your CPU: an op that finds it "
                                                       "asleep (a copy after the host waited) also counts its wake-up, tens of "
                                                       "microseconds a GPU does not have -- these columns are no GPU's times."
                                                     : "")
                                          : sortBy.find("cuda") != std::string::npos
                                                ? "No op ran on a CUDA device: there is no CUDA time to sort by (choose device cuda)."
                                                : "")});
  const double selfTotal = averages.selfCpuTimeTotalUs(), selfDeviceTotal = averages.selfDeviceTimeTotalUs();
  auto share = [](double part, double whole) { return whole > 0 ? 100.0 * part / whole : 0.0; };
  for (const profiler::OpAverage* r : averages.sorted(sortBy, static_cast<int>(p.getInt("row_limit")))) {
    std::vector<lab::Value> cells = {r->name, share(r->selfCpuTimeTotalUs, selfTotal), r->selfCpuTimeTotalUs, r->cpuTimeTotalUs,
                                     r->cpuTimeAvgUs()};
    if (onDevice) {
      cells.push_back(share(r->selfDeviceTimeTotalUs, selfDeviceTotal));
      cells.push_back(r->selfDeviceTimeTotalUs);
      cells.push_back(r->deviceTimeTotalUs);
    }
    cells.push_back(r->count);
    sink.row("ops", cells);
  }
  sink.info("prof.key_averages().table(sort_by=\"" + sortBy + "\"):\n" + averages.table(sortBy, static_cast<int>(p.getInt("row_limit"))));

  // 4. Where the time goes, by kind of op (self times, so nothing counts twice).
  std::array<double, kKindLabels.size()> byKind{};
  for (const auto& r : averages.rows) byKind[static_cast<std::size_t>(kindOf(r.name))] += r.selfCpuTimeTotalUs;
  sink.view({.id = "kinds", .title = "Self CPU time by kind of op", .kind = lab::ViewKind::Bars, .y = {"share of self CPU time", "%"},
             .yFromZero = true, .series = {{"share", "share of the profiled steps' self CPU time"}},
             .note = "A step whose time is mostly matrix products is compute-bound: a faster processor for them (a GPU) "
                     "speeds it up. A step whose time is spread over many small ops is overhead-bound: each op's fixed "
                     "cost dominates, and a GPU adds a kernel launch to each."});
  for (std::size_t k = 0; k < kKindLabels.size(); ++k) {
    sink.bar("kinds", "share", kKindLabels[k], selfTotal > 0 ? 100.0 * byKind[k] / selfTotal : 0.0);
  }

  // 5. The trace, for Perfetto: every profiled step, op by op, on a timeline per thread.
  //    A trace that cannot be written is said, and the run goes on: its measurements are not lost.
  if (p.getBool("trace")) {
    std::string path = p.getString("trace_file");
    try {
      path = path.empty() ? userCacheFolder() + "/profile-trace.json" : std::filesystem::absolute(path).string();  // said as written
      prof.export_chrome_trace(path);
      sink.info("prof.export_chrome_trace(\"" + path + "\"): open it in https://ui.perfetto.dev (or chrome://tracing) to see "
                "every profiled step, op by op.");
    } catch (const Error& e) {
      sink.warning(std::string(e.what()) + " -- the trace is not written; the measurements below are.");
    }
  }

  // 6. What the step's matrix products need: each product of the step timed alone at its own shape --
  //    forward x W^T, the weight gradient g^T x, and the input gradient g W except in the first layer
  //    (the batch needs none) -- eight calls back to back between two synchronisations, so a GPU's
  //    wait for its queue is paid once, not per product; best of 5. Their sum is the least time the
  //    step's products take here, arithmetic and each call's own fixed cost; the rest of the step is
  //    everything else. (A share of the step from its FLOPs at a large product's rate
  //    would count a product that runs below that rate -- thin, small or on a busy machine -- as
  //    overhead: 97% of a step in its products was once called "overhead-bound" that way.)
  auto bestOf5 = [&](auto&& product) {
    constexpr int kCalls = 8;
    (void)product();
    synchronizeDevice(device);
    double best = 1e30;
    for (int i = 0; i < 5; ++i) {
      best = std::min(best, secondsOn(device, [&] {
                        for (int c = 0; c < kCalls; ++c) (void)product();
                      }) / kCalls);
    }
    return best;
  };
  double stepFlops = 0, productSeconds = 0;
  {
    const NoGradGuard noGrad;
    Generator g(1);
    bool firstLinear = true;
    for (const auto& [name, child] : model->named_children()) {
      const auto* layer = dynamic_cast<const nn::Linear*>(child.get());
      if (!layer) continue;
      const Tensor w = layer->weight.detach();
      const std::int64_t out = w.size(0), in = w.size(1);
      const Tensor x = randn({batchSize, in}, g).to(device), grad = randn({batchSize, out}, g).to(device);
      productSeconds += bestOf5([&] { return linear(x, w); });             // forward
      productSeconds += bestOf5([&] { return matmul(grad.t(), x); });      // weight gradient
      if (!firstLinear) productSeconds += bestOf5([&] { return matmul(grad, w); });  // input gradient
      stepFlops += (firstLinear ? 4.0 : 6.0) * static_cast<double>(batchSize) * static_cast<double>(w.numel());
      firstLinear = false;
    }
  }
  // A large product's rate, for comparison: how close the step's products come to this device's best.
  const double largeRate = [&] {
    Generator g(1);
    const Tensor a = randn({1024, 1024}, g).to(device), b = randn({1024, 1024}, g).to(device);
    return 2.0 * 1024.0 * 1024.0 * 1024.0 / bestOf5([&] { return matmul(a, b); });
  }();
  const double stepSeconds = wallUs / static_cast<double>(steps) / 1e6;
  const double productsAloneShare = 100.0 * std::min(1.0, productSeconds / stepSeconds);
  const double productRate = stepFlops / productSeconds;

  // 7. The measurements, and what they say.
  const auto& mostExpensive = *std::max_element(averages.rows.begin(), averages.rows.end(),
                                                [](const auto& a, const auto& b) { return a.selfCpuTimeTotalUs < b.selfCpuTimeTotalUs; });
  std::int64_t events = 0;
  for (const auto& r : averages.rows) events += r.count;
  const double productsShare = selfTotal > 0 ? 100.0 * byKind[0] / selfTotal : 0.0;
  sink.measurement("profiled step time", stepSeconds * 1000.0, "ms");
  sink.measurement("ops per step", static_cast<double>(events) / static_cast<double>(steps), "");
  sink.measurement("matrix products: share of self CPU time", productsShare, "%");
  sink.measurement("matrix-product GFLOP per step", stepFlops / 1e9, "GFLOP");
  sink.measurement("matrix products alone: share of the step", productsAloneShare, "%");
  sink.measurement("matrix-product rate at the step's shapes", productRate / 1e9, "GFLOP/s");
  sink.measurement("peak matrix-product rate", largeRate / 1e9, "GFLOP/s");
  sink.measurement("profiler coverage of the wall time", wallUs > 0 ? 100.0 * selfTotal / wallUs : 0.0, "%");
  sink.measurement("most expensive op: share of self CPU time", selfTotal > 0 ? 100.0 * mostExpensive.selfCpuTimeTotalUs / selfTotal : 0.0, "%");
  sink.record("profile", {{"step_ms", stepSeconds * 1000.0}, {"ops_per_step", static_cast<double>(events) / static_cast<double>(steps)},
                          {"products_share", productsShare}, {"products_alone_share", productsAloneShare},
                          {"most_expensive", mostExpensive.name}, {"device", device.str()}});
  const bool computeBound = productsAloneShare >= 50;
  sink.info("The most expensive op by its own time: " + mostExpensive.name + " (" +
            formatFixed(100.0 * mostExpensive.selfCpuTimeTotalUs / std::max(selfTotal, 1e-9), 1) + "% of the self CPU time). " +
            "A step took " + formatFixed(stepSeconds * 1000.0, 3) + " ms for " +
            formatFixed(static_cast<double>(events) / static_cast<double>(steps), 0) + " ops. Its matrix products (" +
            formatGeneral(stepFlops / 1e9, 3) + " GFLOP), each timed alone at its own shape, take " +
            formatGeneral(productSeconds * 1000.0, 3) + " ms: " + formatFixed(productsAloneShare, 1) + "% of the step, so it is " +
            (computeBound ? "compute-bound -- most of its time is its products' own work, which a faster processor for them (a GPU) "
                            "speeds up."
                          : "overhead-bound -- most of its time goes outside its products' own work, to the fixed cost of its "
                            "many small ops, which a GPU would not shrink (each op becomes a kernel launch of a few microseconds).") +
            " They run at " + formatFixed(productRate / 1e9, 1) + " GFLOP/s here, " + formatFixed(100.0 * productRate / largeRate, 0) +
            "% of a 1024 x 1024 product's " + formatFixed(largeRate / 1e9, 1) + " GFLOP/s" +
            (productRate < 0.5 * largeRate ? ": products this small (or this thin) stay far from a large product's rate." : "."));
}

}  // namespace gpulab::labs
