// The "graphs" lab: a small training step, eager and as a CUDA graph. Read it next to the PyTorch it
// mirrors -- the seed lessons' regression model (16 -> 64 -> 1, Adam, batches of 64), its data already
// on the GPU:
//
//   def step(x, y):                                   # eager: every op launches its own kernel
//       loss = F.mse_loss(model(x), y)
//       optimizer.zero_grad(); loss.backward(); optimizer.step()
//
//   optimizer = torch.optim.Adam(model.parameters(), lr=1e-3, capturable=True)
//   static_x, static_y = x[0].clone(), y[0].clone()
//   s = torch.cuda.Stream(); s.wait_stream(torch.cuda.current_stream())
//   with torch.cuda.stream(s):                        # 1. warm up on a side stream: the optimizer
//       for _ in range(3):                            #    makes its state here, not in the capture
//           step(static_x, static_y)
//   torch.cuda.current_stream().wait_stream(s)
//   g = torch.cuda.CUDAGraph()
//   optimizer.zero_grad(set_to_none=True)
//   with torch.cuda.graph(g):                         # 2. capture: nothing runs, the kernels are recorded
//       static_loss = F.mse_loss(model(static_x), static_y)
//       static_loss.backward()
//       optimizer.step()
//   for i in range(steps):                            # 3. replay: the batch into the static inputs,
//       static_x.copy_(x[i % 8]); static_y.copy_(y[i % 8])
//       g.replay()                                    #    then the whole step in one launch
//
// Why it matters: a step this small is launch-bound on a GPU. Each of its few dozen kernels runs for a
// few microseconds, about as long as the host takes to launch it, so the GPU waits on the host between
// kernels. A replay hands the GPU the whole step at once. The lab times both loops in interleaved runs
// on a real GPU and shows the host's time to queue a step beside the step's time. On the emulated GPU
// capture and replay work the same way (its streams record the CPU kernels and a replay queues them as
// one), but it is not timed: it is your CPU.
#include "lessons/labs/graph_lab.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <optional>

#include "engine/core/errors.h"
#include "engine/core/number_format.h"
#include "engine/data/dataset.h"
#include "engine/ops/ops.h"
#include "engine/runtime/device_runtime.h"
#include "lessons/labs/repeated_timing.h"
#include "lessons/labs/training.h"

namespace gpulab::labs {

namespace {

using Clock = std::chrono::steady_clock;
constexpr std::int64_t kFeatures = 16, kBatches = 8;

// "auto": the GPU when one is usable, else the emulated GPU, else the CPU (where there is nothing to
// capture, and the lab says so).
Device graphDevice(const std::string& text) {
  if (text != "auto") return resolveDevice(text);
  const std::vector<cuda::DeviceRuntime*> gpus = cuda::gpuRuntimes();  // the real GPUs first
  return gpus.empty() ? kCPU : gpus.front()->device();
}

// The lab's batches, on the device, and a model with its optimizer. The eager loop and the graph train
// one copy each, from the same seed: the same weights, the same batches in the same order.
struct Batches {
  std::vector<Tensor> x, y;
};
struct Copy {
  std::shared_ptr<nn::Module> model;
  std::unique_ptr<optim::Optimizer> optimizer;
  std::int64_t next = 0;  // the next batch
};

Batches makeBatches(Device device, std::int64_t batchSize, std::uint64_t seed, std::shared_ptr<data::TensorDataset>& data) {
  data = data::makeRegressionDataset(kBatches * batchSize, kFeatures, 0.1, seed);
  Batches b;
  for (std::int64_t i = 0; i < kBatches; ++i) {
    b.x.push_back(data->inputs().slice(0, i * batchSize, (i + 1) * batchSize).to(device));
    b.y.push_back(data->targets().slice(0, i * batchSize, (i + 1) * batchSize).to(device));
  }
  return b;
}

Copy makeCopy(const data::Dataset& shape, const std::vector<std::int64_t>& hidden, std::uint64_t seed, Device device, bool capturable) {
  Generator gen(seed);
  Copy c;
  c.model = makeMlp(shape, hidden, 1, gen);
  c.model->to(device);
  c.optimizer = makeOptimizer("adam", c.model->parameters(), 1e-3, 0.0, 0.0, capturable);
  return c;
}

// One timed run of a loop: the host's time to queue its steps, the time until the device had run them,
// and the last step's loss (read after the clock stopped). Empty when stopped: Stop is looked at every
// step, so a long run of wide layers ends within a step of the request.
struct Run {
  double queueSeconds = 0, totalSeconds = 0, lastLoss = 0;
};

template <class Step>
std::optional<Run> timeRun(Device device, std::int64_t steps, const lab::StopToken& stop, Step&& step) {
  synchronizeDevice(device);
  const Clock::time_point start = Clock::now();
  Tensor loss;
  for (std::int64_t i = 0; i < steps; ++i) {
    if (stop.stopRequested()) return std::nullopt;
    loss = step();
  }
  Run r;
  r.queueSeconds = secondsSince(start);
  synchronizeDevice(device);
  r.totalSeconds = secondsSince(start);
  r.lastLoss = loss.item();
  return r;
}

// 1. The eager step: a kernel launch for every op.
Tensor eagerStep(Copy& c, const Batches& b) {
  const std::int64_t i = c.next++ % kBatches;
  Tensor loss = mse_loss((*c.model)(b.x[i]), b.y[i]);
  c.optimizer->zero_grad();
  loss.backward();
  c.optimizer->step();
  return loss;
}

// 2. The captured step: the batch copied into the graph's static inputs, then one replay.
Tensor replayStep(Copy& c, GraphedStep& graph, const Batches& b) {
  const std::int64_t i = c.next++ % kBatches;
  return graph.step(b.x[i], b.y[i]);
}

// What the runs' spreads allow saying (repeated_timing.h): faster only when every graph run beat every eager run.
std::string verdict(const std::vector<double>& eager, const std::vector<double>& graph) {
  const Spread e = spreadOf(eager), g = spreadOf(graph);
  const std::string spreads = " (eager " + formatFixed(e.low, 0) + " to " + formatFixed(e.high, 0) + " steps/s, graph " +
                              formatFixed(g.low, 0) + " to " + formatFixed(g.high, 0) + " steps/s)";
  switch (compare(g, e)) {
    case Difference::Higher:
      return "The replayed graph is faster in every run: " + formatFixed(g.median / e.median, 2) + "x the eager steps/s (medians)" + spreads + ".";
    case Difference::Lower:
      return "The eager steps are faster in every run" + spreads + ": this step is not launch-bound here.";
    case Difference::Unclear:
      break;
  }
  return "No clear difference here: the runs' spreads overlap" + spreads + ".";
}

}  // namespace

std::vector<lab::ParamSpec> GraphLab::params() const {
  using namespace lab;
  lab::ParamSpec device = deviceParam("device", "The GPU to capture on (the emulated GPU captures too; it is not timed)");
  device.suggestionLabels.front() = "auto (the GPU; without one, the emulated GPU)";
  return {
      device,
      boolParam("capture", false, "Capture the whole training step in a CUDA graph and replay it (torch.cuda.graph), beside the eager loop"),
      boolParam("read_loss_inside", false, "The mistake: call loss.item() inside the capture (the host would wait on a capturing stream)"),
      textParam("hidden", "64", "Hidden layer widths, comma-separated (the step's size: wider layers, more arithmetic per launch)", checkHiddenWidths),
      intParam("batch_size", 64, 1, 8192, "Examples per step"),
      intParam("steps", 200, 10, 100000, "Steps in each timed run"),
      intParam("repeats", 5, 1, 20, "Timed runs of each loop, interleaved (eager, graph, eager, ...)"),
      intParam("seed", 0, 0, 2147483647, "Seed for the data and the initial weights"),
  };
}

std::vector<lab::MeasurementSpec> GraphLab::measurements() const {
  return {
      {"kernels and copies per replay", ""},
      {"largest loss difference, graph vs eager", ""},
      {"eager steps/s (median)", "steps/s"},
      {"host time to queue one eager step (median)", "us"},
      {"graph steps/s (median)", "steps/s"},
      {"host time to queue one replay (median)", "us"},
      {"speed-up of the graph (medians)", "x"},
  };
}

void GraphLab::run(const lab::Params& p, lab::MetricSink& sink, const lab::StopToken& stop) {
  const Device device = graphDevice(p.getString("device"));
  announceDevice(sink, device);
  if (!device.isCuda()) {
    sink.warning("CUDA graphs capture a GPU's work, and there is no GPU here and the emulated GPU is off: turn the emulated GPU on "
                 "(Settings) to capture on it.");
    sink.record("done", {{"device", device.str()}, {"stopped", false}});
    return;
  }
  const bool real = cuda::isRealGpu(device), capture = p.getBool("capture");
  const std::vector<std::int64_t> hidden = parseWidths(p.getString("hidden"));
  const auto seed = static_cast<std::uint64_t>(p.getInt("seed"));
  const std::int64_t steps = p.getInt("steps"), repeats = real ? p.getInt("repeats") : 1;
  std::shared_ptr<data::TensorDataset> data;
  const Batches batches = makeBatches(device, p.getInt("batch_size"), seed, data);
  Copy eager = makeCopy(*data, hidden, seed, device, false), graphed = makeCopy(*data, hidden, seed, device, true);

  // 1. The warm-up both loops get: three steps on the first batch (for the graph, on its side stream).
  for (int i = 0; i < GraphedStep::kWarmupSteps; ++i) {
    eager.next = 0;
    eagerStep(eager, batches);
  }
  eager.next = 0;

  // 2. The capture, when asked: the mistake, if chosen, is made inside it.
  std::optional<GraphedStep> graph;
  if (capture) {
    const bool readInside = p.getBool("read_loss_inside");
    auto lossOf = [&](const Tensor& x, const Tensor& y) {
      Tensor loss = mse_loss((*graphed.model)(x), y);
      if (readInside) sink.info("loss.item() = " + formatNumber(loss.item()));  // the host waits on the device
      return loss;
    };
    try {
      graph.emplace(lossOf, *graphed.optimizer, batches.x[0], batches.y[0]);
    } catch (const CudaError& e) {
      sink.engineError(e.what());
      sink.info("Inside torch.cuda.graph nothing runs: the kernels are only recorded, so there is no loss to read yet, and a call "
                "that waits for the device -- .item(), .cpu(), print(tensor), torch.cuda.synchronize() -- is refused. Read the "
                "static loss after g.replay() instead.");
      sink.record("done", {{"device", device.str()}, {"stopped", false}, {"error", std::string(e.what())}});
      return;
    }
    sink.measurement("kernels and copies per replay", static_cast<double>(graph->nodes()), "");
    sink.info("Captured: one replay launches the whole step, " + std::to_string(graph->nodes()) +
              " kernels and copies that the eager step launches one by one.");
  }

  // 3. The runs, interleaved so that drift in the machine's speed hits both loops alike.
  std::vector<lab::Axis> columns{{"run", ""}, {"eager loss", ""}, {"graph loss", ""}};
  if (real) {
    columns.insert(columns.end(), {{"eager", "steps/s"}, {"graph", "steps/s"}, {"eager: host time to queue a step", "us"},
                                   {"graph: host time to queue a step", "us"}});
  }
  sink.view({.id = "runs", .title = real ? "Timed runs" : "Runs (the emulated GPU is not timed)", .kind = lab::ViewKind::Table,
             .columns = columns});
  if (real) {
    sink.view({.id = "speed", .title = "Steps per second (median of the runs)", .kind = lab::ViewKind::Bars, .y = {"speed", "steps/s"},
               .yFromZero = true, .series = {{"median", "median steps/s"}}});
  }
  std::vector<double> eagerRate, graphRate, eagerQueue, graphQueue;
  double lossDifference = 0;
  for (std::int64_t r = 0; r < repeats && !stop.stopRequested(); ++r) {
    sink.progress(static_cast<double>(r), static_cast<double>(repeats), "run " + std::to_string(r + 1) + " of " + std::to_string(repeats));
    const std::optional<Run> eagerRun = timeRun(device, steps, stop, [&] { return eagerStep(eager, batches); });
    std::optional<Run> g;
    if (eagerRun && graph) g = timeRun(device, steps, stop, [&] { return replayStep(graphed, *graph, batches); });
    if (!eagerRun || (graph && !g)) break;  // stopped: no half-measured run
    const Run& e = *eagerRun;
    eagerRate.push_back(static_cast<double>(steps) / e.totalSeconds);
    eagerQueue.push_back(e.queueSeconds / static_cast<double>(steps) * 1e6);
    if (g) {
      graphRate.push_back(static_cast<double>(steps) / g->totalSeconds);
      graphQueue.push_back(g->queueSeconds / static_cast<double>(steps) * 1e6);
      lossDifference = std::max(lossDifference, std::abs(g->lastLoss - e.lastLoss));
    }
    const lab::Value none = std::string("-");
    std::vector<lab::Value> row{r + 1, e.lastLoss, g ? lab::Value(g->lastLoss) : none};
    if (real) {
      row.insert(row.end(), {eagerRate.back(), g ? lab::Value(graphRate.back()) : none, eagerQueue.back(), g ? lab::Value(graphQueue.back()) : none});
    }
    sink.row("runs", row);
  }
  sink.progress(1, 1);
  if (stop.stopRequested()) {
    sink.record("done", {{"device", device.str()}, {"stopped", true}});
    return;
  }

  // 4. What the runs showed: the same losses, and on a real GPU the speeds with their spread.
  if (graph) {
    sink.measurement("largest loss difference, graph vs eager", lossDifference, "");
    sink.info(lossDifference <= 1e-6 ? "The replayed step computes what the eager step computes: the same losses, run after run."
                                     : "The losses differ by up to " + formatNumber(lossDifference) + " between the loops.");
  }
  if (!real) {
    sink.info("No timing is drawn from the emulated GPU: its kernels are your CPU's. On a GPU the lab times both loops; the reference run "
              "(Compare with a real GPU) shows one.");
  } else {
    sink.bar("speed", "median", "eager", median(eagerRate));
    sink.measurement("eager steps/s (median)", median(eagerRate), "steps/s");
    sink.measurement("host time to queue one eager step (median)", median(eagerQueue), "us");
    if (graph) {
      sink.bar("speed", "median", "CUDA graph", median(graphRate));
      sink.measurement("graph steps/s (median)", median(graphRate), "steps/s");
      sink.measurement("host time to queue one replay (median)", median(graphQueue), "us");
      sink.measurement("speed-up of the graph (medians)", median(graphRate) / median(eagerRate), "x");
      sink.info(verdict(eagerRate, graphRate));
    }
  }
  sink.record("done", {{"device", device.str()}, {"stopped", false}});
}

}  // namespace gpulab::labs
