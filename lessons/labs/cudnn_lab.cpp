// The "cudnn" lab: torch.backends.cudnn's two switches, measured on the lab's CNN. The PyTorch:
//
//   torch.backends.cudnn.benchmark = True      # time cuDNN's candidate algorithms for each new
//                                              # convolution shape, once, and keep the fastest
//   torch.backends.cudnn.deterministic = True  # only algorithms whose results are bit-identical run to run
//   for x, y in loader:                        # the training loop itself does not change
//       ...
//
// experiment = "benchmark": the same steps of the CNN with benchmark off, then on, each from the same
// initial weights. Each step is timed on its own (the device synchronised before and after), and
// after each step the lab reads what cuDNN chose (cuda::cudnnChoices: every candidate algorithm of
// every convolution pass and shape, its time when benchmark mode timed it, its workspace). With
// shapes = "changing", every step's batch has a size not seen before -- as with variable-length
// inputs -- so benchmark mode searches again at every step.
//
// experiment = "determinism": the same training twice from the same seed on the same batches, with
// deterministic off and then on; the two runs' losses step by step and their final weights compared
// value by value.
//
// cuDNN exists only on NVIDIA GPUs. On the CPU and the emulated GPU both switches change nothing (the
// convolutions there are GPU Lab's im2col + GEMM, one algorithm, no atomics): the lab still runs and
// measures, and says so.
#include "lessons/labs/cudnn_lab.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>
#include <limits>

#include "engine/autograd/grad_mode.h"
#include "engine/core/errors.h"
#include "engine/core/number_format.h"
#include "engine/data/dataloader.h"
#include "engine/runtime/cuda_runtime.h"
#include "engine/runtime/device_runtime.h"
#include "lessons/labs/training.h"

namespace gpulab::labs {

namespace {

using Clock = std::chrono::steady_clock;
double millisecondsSince(Clock::time_point t) { return std::chrono::duration<double, std::milli>(Clock::now() - t).count(); }

// Whether cuDNN runs on this device: a real NVIDIA GPU. The emulated GPU computes on the CPU.
bool hasCudnn(Device device) { return cuda::isRealGpu(device); }

struct Settings {
  std::string id, label;  // "on", "benchmark on"
  bool benchmark = false, deterministic = false;
};

// The lab's training, one step at a time: the CNN from `seed`, Adam, a loader shuffled by the seed.
struct Trainer {
  std::shared_ptr<nn::Sequential> model;
  std::unique_ptr<optim::Optimizer> optimizer;
  std::unique_ptr<data::DataLoader> loader;
  data::DataLoader::Iterator it;
  Device device;

  Trainer(const std::shared_ptr<data::TensorDataset>& trainSet, const lab::Params& p, Device dev, std::int64_t batchSize)
      : device(dev) {
    const auto seed = static_cast<std::uint64_t>(p.getInt("seed"));
    Generator gen(seed);
    model = makeCnn(*trainSet, parseWidths(p.getString("cnn_hidden")), 10, gen);
    {
      MemoryCategoryScope tag(MemoryCategory::Parameter);
      model->to(device);
    }
    optimizer = makeOptimizer("adam", model->parameters(), p.getFloat("lr"), 0.0, 0.0);
    loader = std::make_unique<data::DataLoader>(trainSet, data::DataLoaderOptions{.batch_size = batchSize, .shuffle = true,
                                                                                  .drop_last = true, .seed = seed});
    it = loader->begin();
  }

  // One optimizer step on the next batch's first `examples` examples; returns the loss, not yet read.
  Tensor step(std::int64_t examples) {
    if (it == loader->end()) it = loader->begin();
    const data::Batch batch = *it;
    ++it;
    Tensor x, y;
    {
      MemoryCategoryScope tag(MemoryCategory::InputBatch);
      const std::int64_t n = std::min(examples, batch.inputs.size(0));
      x = batch.inputs.slice(0, 0, n).to(device);
      y = batch.targets.slice(0, 0, n).to(device);
    }
    Tensor loss = taskLoss(true, (*model)(x), y);
    optimizer->zero_grad();
    loss.backward();
    optimizer->step();
    return loss.detach();
  }

  std::vector<float> weights() const {
    std::vector<float> all;
    for (const Tensor& p : model->parameters()) {
      const std::vector<float> v = p.to(kCPU).toVector<float>();
      all.insert(all.end(), v.begin(), v.end());
    }
    return all;
  }
};

// --- experiment "benchmark" ---------------------------------------------------------------------

void runBenchmark(const std::shared_ptr<data::TensorDataset>& trainSet, const lab::Params& p, Device device,
                  lab::MetricSink& sink, const lab::StopToken& stop) {
  const std::int64_t steps = p.getInt("steps");
  const std::int64_t batchSize = std::min(p.getInt("batch_size"), trainSet->size());
  const bool changing = p.getString("shapes") == "changing";
  const bool deterministic = p.getBool("deterministic");
  const bool cudnn = hasCudnn(device);
  const std::vector<Settings> settings{{"off", "benchmark off", false, deterministic}, {"on", "benchmark on", true, deterministic}};
  // With changing shapes, step s trains on batchSize - (s - 1) examples (cycling when the steps outnumber
  // the sizes): every step a shape cuDNN has not seen, until the cycle repeats.
  const std::int64_t sizes = std::max<std::int64_t>(1, std::min(batchSize, steps));
  auto examplesAt = [&](std::int64_t s) { return changing ? batchSize - (s - 1) % sizes : batchSize; };

  std::vector<lab::SeriesSpec> series;
  for (const Settings& s : settings) series.push_back({s.id, s.label});
  sink.view({.id = "steps", .title = "Step time", .kind = lab::ViewKind::Line, .x = {{"step", ""}},
             // Logarithmic: a GPU's milliseconds and a CPU's hundreds of them (a recording beside the
             // learner's run), and a first step ten times the others, all readable on one plot.
             .y = {"step time", "ms", true}, .series = series,
             .note = std::string("A logarithmic axis: equal heights are equal ratios. ") +
                     (changing ? "Every step's batch has a new size, so every step's convolutions have new shapes. " : "") +
                     (cudnn ? "Marked: steps at which benchmark mode timed cuDNN's algorithms for a new shape."
                            : "No cuDNN on " + device.str() + ": both settings run the same code, so the two lines differ only by "
                              "noise (and the first step's one-off costs, such as the memory cache's first allocations).")});
  sink.view({.id = "algorithms", .title = "cuDNN's algorithms", .kind = lab::ViewKind::Table,
             .columns = {{"setting", ""}, {"layer", ""}, {"pass", ""}, {"algorithm", ""}, {"time", "ms"}, {"workspace", "bytes"},
                         {"deterministic", ""}, {"ran", ""}},
             .note = cudnn ? "Benchmark off: cuDNN's heuristics rank the candidates without running them (time: -). Benchmark on: "
                             "cudnnFind runs every candidate on this step's own tensors and the fastest that fits runs. A candidate "
                             "that needs more workspace than the memory cache can give is skipped. Rows: the first step's shapes."
                           : "cuDNN runs only on an NVIDIA GPU; on " + device.str() +
                                 " GPU Lab's convolutions are im2col + an OpenBLAS matrix product, one algorithm, so there is nothing "
                                 "to choose and this table stays empty. Compare with a real GPU where a recording exists."});
  sink.view({.id = "summary", .title = "Off and on", .kind = lab::ViewKind::Table,
             .columns = {{"setting", ""}, {"first step", "ms"}, {"median step", "ms"}, {"whole run", "s"}, {"searches", ""},
                         {"search time", "ms"}}});

  struct Outcome {
    double first = 0, median = 0, total = 0, searchMs = 0;
    std::int64_t searches = 0;
  };
  // One untimed step first, on a throwaway copy: the process's one-off costs (the memory cache's first
  // blocks, the libraries' handles) would otherwise land on whichever setting runs first. Its cuDNN
  // choices are then forgotten, so each setting still meets its shapes for the first time.
  {
    Trainer warmUp(trainSet, p, device, batchSize);
    (void)warmUp.step(batchSize);
    synchronizeDevice(device);
  }
  std::vector<Outcome> outcomes;
  for (std::size_t si = 0; si < settings.size() && !stop.stopRequested(); ++si) {
    const Settings& s = settings[si];
    const CudnnGuard guard(s.benchmark, s.deterministic);
    if (cudnn) cuda::clearCudnnChoices(device.index());  // so this setting chooses afresh, as a new process would
    Trainer trainer(trainSet, p, device, batchSize);
    Outcome o;
    std::vector<double> times;
    std::size_t seen = 0;  // the choices recorded so far
    for (std::int64_t step = 1; step <= steps && !stop.stopRequested(); ++step) {
      synchronizeDevice(device);
      const auto t0 = Clock::now();
      (void)trainer.step(examplesAt(step));
      synchronizeDevice(device);
      const double ms = millisecondsSince(t0);
      o.total += ms / 1000.0;
      if (step == 1) o.first = ms;
      else times.push_back(ms);
      sink.point("steps", s.id, {static_cast<double>(step)}, ms);

      // What cuDNN chose during this step: the entries the step added (none for a cached shape).
      const std::vector<cuda::ConvAlgorithmChoice> choices = cudnn ? cuda::cudnnChoices(device.index())
                                                                   : std::vector<cuda::ConvAlgorithmChoice>{};
      bool searched = false;
      for (std::size_t c = seen; c < choices.size(); ++c) {
        if (choices[c].how == "benchmark") {
          ++o.searches;
          o.searchMs += choices[c].searchMilliseconds;
          searched = true;
        }
        if (step != 1) continue;
        // The first step's shapes: one row per candidate, in the order the passes ran.
        for (const cuda::ConvAlgorithmTrial& t : choices[c].trials) {
          sink.row("algorithms", {s.label, choices[c].shape, choices[c].pass, t.algorithm,
                                  t.milliseconds >= 0 ? lab::Value(t.milliseconds) : lab::Value(std::string("-")),
                                  static_cast<std::int64_t>(t.workspace), std::string(t.deterministic ? "yes" : "no"),
                                  std::string(t.chosen ? "ran" : t.status == "ok" ? "" : t.status)});
        }
      }
      if (searched && o.searches <= 40) sink.marker("steps", {static_cast<double>(step)}, "searched", lab::MarkerKind::Event);
      seen = choices.size();
      sink.progress(static_cast<double>(si * steps + step), static_cast<double>(settings.size() * steps),
                    s.label + ": step " + std::to_string(step));
    }
    o.median = median(times);
    sink.row("summary", {s.label, o.first, o.median, o.total, o.searches, o.searchMs});
    outcomes.push_back(o);
  }
  if (outcomes.size() < settings.size()) {
    sink.info("Stopped.");
    return;
  }

  for (std::size_t si = 0; si < settings.size(); ++si) {
    const std::string name = settings[si].label + ": ";
    sink.measurement(name + "first step", outcomes[si].first, "ms");
    sink.measurement(name + "median step", outcomes[si].median, "ms");
    sink.measurement(name + "whole run", outcomes[si].total, "s");
    sink.measurement(name + "searches", static_cast<double>(outcomes[si].searches), "");
    sink.record("setting", {{"benchmark", settings[si].benchmark}, {"first_ms", outcomes[si].first}, {"median_ms", outcomes[si].median},
                            {"total_s", outcomes[si].total}, {"searches", outcomes[si].searches}, {"search_ms", outcomes[si].searchMs}});
  }
  const Outcome &off = outcomes[0], &on = outcomes[1];
  sink.measurement("benchmark on vs off: median step", on.median / off.median, "x");
  sink.measurement("benchmark on vs off: whole run", on.total / off.total, "x");
  if (!cudnn) {
    sink.info("On " + cuda::deviceLabel(device) + " there is no cuDNN: benchmark on and off ran the same im2col + GEMM code (median "
              "step " + formatFixed(off.median, 1) + " ms off, " + formatFixed(on.median, 1) + " ms on: whatever differs is "
              "this machine's other work, not the setting). What a GPU would show: with benchmark on, the first step with each "
              "new shape is slower -- cuDNN runs every candidate algorithm -- and later steps with that shape are as fast as "
              "the fastest candidate." +
              (changing ? " With shapes changing, that search would come back at every one of these " + std::to_string(steps) +
                              " steps."
                        : ""));
    return;
  }
  sink.measurement("benchmark on: first-step cost", on.first - on.median, "ms");
  const double speedup = off.median / on.median;
  sink.info("Benchmark mode searched " + std::to_string(on.searches) + " time(s), " + formatFixed(on.searchMs, 1) +
            " ms in all; its first step took " + formatFixed(on.first, 1) + " ms against " + formatFixed(off.first, 1) +
            " ms without it. After that, its median step was " +
            (speedup > 1.03   ? formatFixed(speedup, 2) + "x faster than the heuristics' choice"
             : speedup < 0.97 ? formatFixed(1 / speedup, 2) + "x slower than the heuristics' choice (timing noise or a close call)"
                              : "as fast as the heuristics' choice: for these shapes they agree") +
            ".");
  if (changing) {
    sink.info("With a new shape at every step, benchmark mode paid its search at every step: the whole run took " +
              formatFixed(on.total, 2) + " s with it against " + formatFixed(off.total, 2) +
              " s without. Leave benchmark off when input shapes keep changing.");
  }
}

// --- experiment "determinism" -------------------------------------------------------------------

void runDeterminism(const std::shared_ptr<data::TensorDataset>& trainSet, const lab::Params& p, Device device,
                    lab::MetricSink& sink, const lab::StopToken& stop) {
  const std::int64_t steps = p.getInt("steps");
  const std::int64_t batchSize = std::min(p.getInt("batch_size"), trainSet->size());
  const bool cudnn = hasCudnn(device);
  const std::vector<Settings> settings{{"off", "deterministic off", p.getBool("benchmark"), false},
                                       {"on", "deterministic on", p.getBool("benchmark"), true}};
  std::vector<lab::SeriesSpec> series;
  for (const Settings& s : settings) series.push_back({s.id, s.label});
  sink.view({.id = "divergence", .title = "Run A vs run B: loss", .kind = lab::ViewKind::Line,
             .x = {{"step", ""}}, .y = {"|loss A - loss B|", ""}, .yFromZero = true, .series = series,
             .note = "Two runs from the same seed on the same batches, step by step. 0 all along: the runs are bit-identical (two "
                     "lines at 0 lie on top of each other). A difference starts in the last bits and grows as training amplifies it."});
  sink.view({.id = "weights", .title = "Run A vs run B: weights", .kind = lab::ViewKind::Table,
             .columns = {{"setting", ""}, {"values that differ", ""}, {"weights", ""}, {"largest difference", ""},
                         {"bit-identical", ""}, {"median step", "ms"}}});

  struct Outcome {
    std::int64_t differing = 0, total = 0;
    double maxDifference = 0, medianMs = 0;
  };
  std::vector<Outcome> outcomes;
  const std::int64_t totalSteps = 2 * 2 * steps;
  std::int64_t done = 0;
  for (const Settings& s : settings) {
    if (stop.stopRequested()) break;
    const CudnnGuard guard(s.benchmark, s.deterministic);
    if (cudnn) cuda::clearCudnnChoices(device.index());
    std::vector<double> lossesA, times;
    std::vector<float> weightsA;
    Outcome o;
    for (int run = 0; run < 2 && !stop.stopRequested(); ++run) {
      Trainer trainer(trainSet, p, device, batchSize);
      for (std::int64_t step = 1; step <= steps && !stop.stopRequested(); ++step) {
        synchronizeDevice(device);
        const auto t0 = Clock::now();
        const double loss = trainer.step(batchSize).item();  // one sync a step: this run is about values, not speed
        times.push_back(millisecondsSince(t0));
        if (run == 0) {
          lossesA.push_back(loss);
        } else {
          sink.point("divergence", s.id, {static_cast<double>(step)}, std::abs(loss - lossesA[static_cast<std::size_t>(step - 1)]));
        }
        sink.progress(static_cast<double>(++done), static_cast<double>(totalSteps), s.label + ", run " + (run ? "B" : "A") +
                                                                                    ": step " + std::to_string(step));
      }
      if (stop.stopRequested()) break;
      if (run == 0) {
        weightsA = trainer.weights();
        continue;
      }
      const std::vector<float> weightsB = trainer.weights();
      o.total = static_cast<std::int64_t>(weightsB.size());
      for (std::size_t i = 0; i < weightsB.size(); ++i) {
        if (std::memcmp(&weightsA[i], &weightsB[i], sizeof(float)) != 0) {
          ++o.differing;
          o.maxDifference = std::max(o.maxDifference, static_cast<double>(std::abs(weightsA[i] - weightsB[i])));
        }
      }
    }
    if (stop.stopRequested()) break;
    o.medianMs = median(times);
    sink.row("weights", {s.label, o.differing, o.total, o.maxDifference, std::string(o.differing == 0 ? "yes" : "no"), o.medianMs});
    outcomes.push_back(o);
  }
  if (outcomes.size() < settings.size()) {
    sink.info("Stopped.");
    return;
  }
  for (std::size_t si = 0; si < settings.size(); ++si) {
    const std::string name = settings[si].label + ": ";
    sink.measurement(name + "values that differ", static_cast<double>(outcomes[si].differing), "");
    sink.measurement(name + "largest weight difference", outcomes[si].maxDifference, "");
    sink.measurement(name + "median step", outcomes[si].medianMs, "ms");
    sink.record("setting", {{"deterministic", settings[si].deterministic}, {"differing", outcomes[si].differing},
                            {"values", outcomes[si].total}, {"max_difference", outcomes[si].maxDifference},
                            {"median_ms", outcomes[si].medianMs}});
  }
  const Outcome &off = outcomes[0], &on = outcomes[1];
  sink.measurement("deterministic on vs off: median step", on.medianMs / off.medianMs, "x");
  std::string said = "With deterministic on, the two runs' " + formatNumber(on.total) + " weights were " +
                     (on.differing == 0 ? "bit-identical" : formatNumber(on.differing) + " values apart -- not bit-identical") +
                     "; with it off, " + (off.differing == 0 ? "bit-identical too" : formatNumber(off.differing) +
                     " values differed, by up to " + formatGeneral(off.maxDifference, 3)) + ".";
  if (!cudnn) {
    said += " On " + cuda::deviceLabel(device) + " there is no cuDNN: GPU Lab's CPU convolutions add their partial sums in a fixed "
            "order, so every run is bit-identical whatever the setting. On a GPU, the fastest backward algorithms add partial "
            "sums with atomic operations in whatever order the threads finish, and float addition is not associative: the last "
            "bits differ run to run, and training amplifies them.";
  } else if (off.differing == 0) {
    said += " cuDNN's choices for these shapes happened to be deterministic ones anyway (see the benchmark experiment's table); "
            "turning deterministic on guarantees it for every shape.";
  }
  sink.info(said);
}

}  // namespace

std::vector<lab::ParamSpec> CudnnLab::params() const {
  using namespace lab;
  return {
      choiceParam("experiment", "benchmark", {"benchmark", "determinism"},
                  "benchmark: the same steps with cudnn.benchmark off, then on; determinism: the same training twice, with "
                  "cudnn.deterministic off and on, compared"),
      choiceParam("shapes", "fixed", {"fixed", "changing"},
                  "benchmark experiment: fixed batches, or a batch of a new size at every step (new convolution shapes)"),
      boolParam("deterministic", false, "benchmark experiment: torch.backends.cudnn.deterministic during both settings"),
      boolParam("benchmark", false, "determinism experiment: torch.backends.cudnn.benchmark during both settings"),
      intParam("steps", 30, 2, 100000, "Training steps per setting (per run in the determinism experiment)"),
      intParam("batch_size", 128, 2, 65536, "Examples per step"),
      textParam("cnn_hidden", "128", "The CNN's classifier widths (as in the CNN run)", checkHiddenWidths),
      floatParam("lr", 1e-3, 1e-7, 10.0, "Adam's learning rate"),
      deviceParam("device", "The device to train on"),
      intParam("seed", 0, 0, 2147483647, "Seed for initialisation and shuffling (the same for every run)"),
  };
}

std::vector<lab::MeasurementSpec> CudnnLab::measurements() const {
  return {
      {"benchmark on vs off: median step", "x"},
      {"benchmark on vs off: whole run", "x"},
      {"deterministic on vs off: median step", "x"},
      {"benchmark on: first-step cost", "ms"},
      {"*: first step", "ms"},
      {"*: median step", "ms"},
      {"*: whole run", "s"},
      {"*: searches", ""},
      {"*: values that differ", ""},
      {"*: largest weight difference", ""},
  };
}

void CudnnLab::run(const lab::Params& p, lab::MetricSink& sink, const lab::StopToken& stop) {
  const Device device = resolveDevice(p.getString("device"));
  announceDevice(sink, device);
  if (!hasCudnn(device)) {
    sink.warning("cuDNN runs only on an NVIDIA GPU. On " + cuda::deviceLabel(device) +
                 " this lab runs the same steps and measures them, but both settings run GPU Lab's own convolutions: "
                 "nothing here is cuDNN's.");
  }
  const std::shared_ptr<data::TensorDataset> trainSet = data::loadFashionMnist(true);
  requireTrainingMemory(device.isCpu(), *trainSet, true, parseWidths(p.getString("cnn_hidden")), 10, p.getInt("batch_size"), "cnn_hidden");
  if (p.getString("experiment") == "determinism") {
    runDeterminism(trainSet, p, device, sink, stop);
  } else {
    runBenchmark(trainSet, p, device, sink, stop);
  }
  sink.record("done", {{"device", device.str()}, {"experiment", p.getString("experiment")}});
}

}  // namespace gpulab::labs
