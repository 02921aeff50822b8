// The "amp" lab: one model, four precisions. Read it next to the PyTorch it mirrors:
//
//   scaler = torch.amp.GradScaler(device.type, enabled=use_scaler)     # float16 needs it; bfloat16 not
//   for x, y in loader:
//       x, y = x.to(device), y.to(device)
//       with torch.autocast(device_type=device.type, dtype=torch.float16, enabled=use_amp):
//           loss = loss_fn(model(x), y)      # the GEMMs in float16; the loss (softmax) in float32
//       scaler.scale(loss).backward()        # outside the region: gradients flow back in each op's dtype
//       scaler.step(optimizer)               # unscale, then step -- or skip it when a gradient is inf/NaN
//       scaler.update()                      # halve the scale after a skip, double it after N clean steps
//       optimizer.zero_grad()
//
// Every variant starts from the same weights (the same seed) and sees the same batches, so what differs
// between the curves is the precision alone. The weights stay float32 in every variant ("master
// weights"); autocast casts them to the lower precision for each matrix product, so the activations
// and the gradients that flow between the layers are float16 or bfloat16.
#include "lessons/labs/amp_lab.h"

#include <algorithm>
#include <array>
#include <chrono>
#include <cmath>
#include <functional>
#include <limits>
#include <optional>
#include <sstream>

#include "engine/ops/autocast.h"
#include "engine/amp/grad_scaler.h"
#include "engine/autograd/grad_mode.h"
#include "engine/core/errors.h"
#include "engine/core/number_format.h"
#include "engine/data/dataloader.h"
#include "engine/runtime/device_memory.h"
#include "engine/memory/memory_events.h"
#include "engine/runtime/cuda_runtime.h"
#include "engine/runtime/device_runtime.h"
#include "lessons/labs/repeated_timing.h"
#include "lessons/labs/training.h"

namespace gpulab::labs {

namespace {

// A precision to train in: autocast's dtype (none: plain float32) and whether a GradScaler scales the loss.
struct Variant {
  std::string id;     // "fp16"
  std::string label;  // "float16 + GradScaler"
  std::optional<DType> autocast;
  bool scaler = false;
};

const std::vector<Variant>& knownVariants() {
  static const std::vector<Variant> variants{
      {"fp32", "float32", std::nullopt, false},
      {"fp16", "float16 + GradScaler", kFloat16, true},
      {"bf16", "bfloat16", kBFloat16, false},
      {"fp16-noscale", "float16, no scaler", kFloat16, false},
      {"bf16-scaler", "bfloat16 + GradScaler", kBFloat16, true},
  };
  return variants;
}

std::vector<Variant> parseVariants(const std::string& text) {
  std::vector<Variant> out;
  std::stringstream in(text);
  std::string item;
  while (std::getline(in, item, ',')) {
    const auto& known = knownVariants();
    auto it = std::find_if(known.begin(), known.end(), [&](const Variant& v) { return v.id == item; });
    if (it == known.end()) {
      throw ValueError("'" + item + "' is not a precision; expected a comma-separated list of fp32, fp16, bf16, fp16-noscale, bf16-scaler");
    }
    if (std::any_of(out.begin(), out.end(), [&](const Variant& v) { return v.id == item; })) {
      throw ValueError("'" + item + "' is listed twice");
    }
    out.push_back(*it);
  }
  if (out.empty()) throw ValueError("no precision; expected e.g. fp32,fp16,bf16,fp16-noscale");
  return out;
}

void checkVariants(const std::string& text) { (void)parseVariants(text); }

using Clock = std::chrono::steady_clock;
double secondsBetween(Clock::time_point a, Clock::time_point b) { return std::chrono::duration<double>(b - a).count(); }

// The share of gradient values that are exactly zero, over every parameter's .grad. In float32 a
// gradient is exactly zero only when it truly is (a pixel that is always 0, a ReLU that never fires);
// what float16 adds on top are the values below its smallest subnormal, 2^-24 ~ 6e-8, flushed to zero.
double gradientZeroShare(const std::vector<Tensor>& params) {
  std::int64_t zeros = 0, total = 0;
  for (const Tensor& p : params) {
    const Tensor g = p.grad();
    if (!g.defined()) continue;
    for (float v : g.toVector<float>()) zeros += v == 0.0f ? 1 : 0;
    total += g.numel();
  }
  return total > 0 ? static_cast<double>(zeros) / static_cast<double>(total) : 0.0;
}

// Forward and loss under autocast (when the variant has it), then backward through the scaler, outside
// autocast as PyTorch's recipe has it. `afterForward` runs between the two (the memory view's snapshot).
// Returns the loss, multiplied by lossWeight.
Tensor forwardBackward(const Variant& v, nn::Module& model, amp::GradScaler& scaler, const data::Batch& batch, Device device,
                       bool classification, double lossWeight, const std::function<void()>& afterForward = {}) {
  Tensor x, y;
  {
    MemoryCategoryScope tag(MemoryCategory::InputBatch);
    x = batch.inputs.to(device);
    y = batch.targets.to(device);
  }
  Tensor loss;
  {
    std::optional<amp::AutocastGuard> autocast;
    if (v.autocast) autocast.emplace(device.type(), *v.autocast);
    Tensor out = model(x);                                 // float16/bfloat16 under autocast (linear)
    loss = lossWeight * taskLoss(classification, out, y);  // float32: the losses run in float32
  }
  if (afterForward) afterForward();
  scaler.scale(loss).backward();
  return loss;
}

// The step: unscale, skip it if a gradient is inf/NaN, update the scale, clear the gradients.
void optimizerStep(amp::GradScaler& scaler, optim::Optimizer& optimizer) {
  scaler.step(optimizer);
  scaler.update();
  optimizer.zero_grad();
}

// Live bytes by category from the allocator's events; the highest total; and a copy of the split taken
// when the forward pass ends (what it keeps for backward, beside the model's own state).
struct MemoryByCategory {
  std::array<std::int64_t, kMemoryCategoryCount> live{}, afterForward{};
  std::int64_t total = 0, peak = 0;
  void apply(const std::vector<MemoryEvent>& events) {
    for (const MemoryEvent& e : events) {
      const auto c = static_cast<std::size_t>(e.category);
      if (e.kind == MemoryEventKind::Allocate) {
        live[c] += e.size;
        total += e.size;
        peak = std::max(peak, total);
      } else if (e.kind == MemoryEventKind::Free) {
        live[c] -= e.size;
        total -= e.size;
      }
    }
  }
};

std::string categoryLabel(int c) {
  std::string name = memoryCategoryName(static_cast<MemoryCategory>(c));
  std::replace(name.begin(), name.end(), '_', ' ');
  return name;
}

struct Result {
  Spread step;                     // seconds per optimizer step, from the interleaved rounds
  std::optional<double> finalLoss;                               // mean over the last tenth of the steps
  double zeroShare = 0;       // mean over the reports of the second half of the run
  std::int64_t skipped = 0;   // steps the GradScaler skipped
  bool diverged = false;
  MemoryByCategory memory;
};

}  // namespace

std::vector<lab::ParamSpec> AmpLab::params() const {
  using namespace lab;
  lab::ParamSpec variants = textParam("variants", "fp32,fp16,bf16,fp16-noscale",
                                      "The precisions to train in, in order: fp32 (plain float32), fp16 (autocast float16 + "
                                      "GradScaler), bf16 (autocast bfloat16), fp16-noscale (autocast float16 without a scaler), "
                                      "bf16-scaler (autocast bfloat16 + GradScaler)",
                                      checkVariants);
  variants.suggestions = {"fp32,fp16,bf16,fp16-noscale", "fp32,fp16,fp16-noscale", "fp32,bf16,fp16-noscale", "fp32,bf16",
                          "fp32,fp16"};
  variants.suggestionLabels = {"all four: float32, float16 + scaler, bfloat16, float16 without scaler",
                               "float32 and float16 with and without the scaler",
                               "float32, bfloat16 and float16 without a scaler", "float32 and bfloat16",
                               "float32 and float16 + GradScaler"};
  return {
      variants,
      choiceParam("dataset", "fashion-mnist", {"fashion-mnist", "regression"}, "Data set: Fashion-MNIST or the synthetic regression task"),
      textParam("hidden", "256,128,100", "Hidden layer widths, comma-separated", checkHiddenWidths),
      choiceParam("optimizer", "adam", {"sgd", "adam", "adamw"}, "Optimizer"),
      floatParam("lr", 1e-3, 1e-7, 10.0, "Learning rate"),
      floatParam("momentum", 0.9, 0.0, 0.999, "SGD momentum"),
      floatParam("loss_weight", 1.0, 1e-6, 1.0,
                 "Multiply the loss by this before backward, as a weighted loss term does (loss = w * loss_fn(...)): a small "
                 "weight makes every gradient small"),
      intParam("batch_size", 128, 1, 65536, "Examples per step"),
      intParam("steps", 300, 1, 1000000, "Optimizer steps per precision"),
      intParam("train_subset", 0, 0, 100000000, "Use only the first N training examples (0: all)"),
      floatParam("init_scale", 65536.0, 1.0, 1e30, "GradScaler's first loss scale (PyTorch: 2^16)"),
      intParam("growth_interval", 2000, 1, 1000000, "GradScaler doubles the scale after this many steps without inf/NaN (PyTorch: 2000)"),
      boolParam("tf32", false, "torch.backends.cuda.matmul.allow_tf32: float32 matrix products on TF32 tensor cores (NVIDIA Ampere and newer)"),
      deviceParam("device", "The device to train on"),
      intParam("seed", 0, 0, 2147483647, "Seed for initialisation and shuffling (the same for every precision)"),
      intParam("log_every", 10, 1, 100000, "Report every N steps"),
      intParam("repeats", 5, 1, 20,
               "Rounds of the step timing: each precision runs a few steps in turn, round after round, and the table shows the "
               "median and the range"),
  };
}

std::vector<lab::MeasurementSpec> AmpLab::measurements() const {
  return {
      {"*: step time vs float32", "x"},
      {"*: final loss vs float32", "x"},
      {"*: step time", "s"},
      {"*: step time, fastest round", "s"},
      {"*: step time, slowest round", "s"},
      {"*: final loss", ""},
      {"*: zero gradients", "%"},
      {"*: skipped steps", ""},
      {"*: activations", "bytes"},
      {"*: peak allocated", "bytes"},
  };
}

void AmpLab::run(const lab::Params& p, lab::MetricSink& sink, const lab::StopToken& stop) {
  // 1. The device, the data and the precisions to compare.
  const Device device = resolveDevice(p.getString("device"));
  announceDevice(sink, device);
  const bool emulated = cuda::isEmulatedGpu(device);
  const std::vector<Variant> variants = parseVariants(p.getString("variants"));
  const Tf32Guard tf32(p.getBool("tf32"));
  if (p.getBool("tf32") && (!device.isCuda() || emulated)) {
    sink.warning("tf32 is set, but TF32 is a mode of NVIDIA tensor cores (Ampere and newer): on " + device.str() +
                 " float32 matrix products stay float32.");
  }
  const auto seed = static_cast<std::uint64_t>(p.getInt("seed"));
  const bool classification = p.getString("dataset") == "fashion-mnist";
  std::shared_ptr<data::TensorDataset> trainSet =
      classification ? data::loadFashionMnist(true) : data::makeRegressionDataset(4096, 16, 0.1, seed);
  trainSet = firstExamples(trainSet, p.getInt("train_subset"));
  const std::int64_t batchSize = std::min(p.getInt("batch_size"), trainSet->size());
  requireTrainingMemory(device.isCpu(), *trainSet, false, parseWidths(p.getString("hidden")), classification ? 10 : 1, p.getInt("batch_size"), "hidden");
  const std::vector<std::int64_t> widths = parseWidths(p.getString("hidden"));
  const std::int64_t steps = p.getInt("steps"), logEvery = p.getInt("log_every");
  const double lossWeight = p.getFloat("loss_weight");

  // 2. The views: every precision is a series of the same plots.
  std::vector<lab::SeriesSpec> perVariant;
  for (const Variant& v : variants) perVariant.push_back({v.id, v.label});
  sink.view({.id = "loss", .title = "Training loss by precision", .kind = lab::ViewKind::Line,
             .x = {{"step", ""}, {"time", "s"}}, .y = {"loss", ""}, .series = perVariant});
  const bool anyScaler = std::any_of(variants.begin(), variants.end(), [](const Variant& v) { return v.scaler; });
  if (anyScaler) {
    std::vector<lab::SeriesSpec> scaled;
    for (const Variant& v : variants) {
      if (v.scaler) scaled.push_back({v.id, v.label + ": loss scale", lab::SeriesStyle::Steps});
    }
    sink.view({.id = "scale", .title = "GradScaler's loss scale (skipped steps marked)", .kind = lab::ViewKind::Line,
               .x = {{"step", ""}}, .y = {"scale", ""}, .yFromZero = true, .series = scaled,
               .note = "A step whose gradients hold an inf or NaN is skipped (the weights do not change) and the scale halves; "
                       "after growth_interval clean steps in a row it doubles."});
  }
  sink.view({.id = "zeros", .title = "Gradient values that are exactly zero", .kind = lab::ViewKind::Line,
             .x = {{"step", ""}}, .y = {"zero share", "%"}, .yFromZero = true, .series = perVariant,
             .note = "The share of all parameter gradients that are 0 after backward. float32 shows what is truly zero in this "
                     "model (ReLUs that did not fire, pixels that are always black); a float16 run far above it lost gradients "
                     "that underflowed (below 2^-24 ~ 6e-8). A point or two either way is the runs taking different paths."});
  std::vector<lab::SeriesSpec> bars;
  for (const Variant& v : variants) bars.push_back({v.id, v.label});
  sink.view({.id = "memory", .title = "Memory by category when the forward pass ends", .kind = lab::ViewKind::Bars,
             .y = {"memory", "bytes"}, .yFromZero = true, .series = bars,
             .note = "Live tensors by category at the end of the second forward pass, when every activation saved for backward is "
                     "alive. Parameters, gradients and optimizer state stay float32 in every precision. Under autocast the activations "
                     "are 16-bit, and include autocast's 16-bit copies of the weights and the input: for a small model and batch the "
                     "copies can outweigh the saving."});
  sink.view({.id = "precisions", .title = "Step time and result by precision", .kind = lab::ViewKind::Table,
             .columns = {{"precision", ""}, {"step", "s"}, {"range", "ms"}, {"time ÷ fp32", "x"}, {"final loss", ""}, {"zeros", "%"},
                         {"skips", ""}, {"activations", "bytes"}},
             .note = std::string(emulated ? "Timed on your CPU: the emulated GPU computes there, so these are your CPU's times, not a GPU's. "
                                          : "") +
                     "step: the median time of an optimizer step (forward, backward, step) on " + device.str() +
                     ", timed apart from the training in rounds where the precisions take turns; range: the fastest and the "
                     "slowest round. time ÷ fp32 (of the medians) above 1 is slower than float32; where the ranges overlap, "
                     "the difference is within this machine's noise. final loss: the mean over the last tenth of the steps; "
                     "zeros: the share of gradient values that were 0, over the second half; skips: steps the GradScaler skipped."});

  // What one precision trains with: the model (the seed's weights), optimizer, scaler and data order,
  // the same in the training (3) and in the timed rounds (4).
  struct Trainer {
    std::shared_ptr<nn::Sequential> model;
    std::unique_ptr<optim::Optimizer> optimizer;
    std::unique_ptr<amp::GradScaler> scaler;
    std::unique_ptr<data::DataLoader> loader;
    data::DataLoader::Iterator it;
    data::Batch next() {
      if (it == loader->end()) it = loader->begin();
      data::Batch batch = *it;
      ++it;
      return batch;
    }
  };
  auto makeTrainer = [&](const Variant& v) {
    Trainer t;
    Generator gen(seed);
    t.model = makeMlp(*trainSet, widths, classification ? 10 : 1, gen);
    {
      MemoryCategoryScope tag(MemoryCategory::Parameter);
      t.model->to(device);
    }
    t.optimizer = makeOptimizer(p.getString("optimizer"), t.model->parameters(), p.getFloat("lr"), p.getFloat("momentum"), 0.0);
    t.scaler = std::make_unique<amp::GradScaler>(
        amp::GradScalerOptions{.init_scale = p.getFloat("init_scale"), .growth_interval = p.getInt("growth_interval"), .enabled = v.scaler});
    t.loader = std::make_unique<data::DataLoader>(trainSet, data::DataLoaderOptions{.batch_size = batchSize, .shuffle = true, .drop_last = true, .seed = seed});
    t.it = t.loader->begin();
    return t;
  };

  // 3. Each precision in turn, from the same start.
  std::vector<Result> results;
  std::optional<std::size_t> fp32Index;
  const auto runStart = Clock::now();
  for (std::size_t vi = 0; vi < variants.size() && !stop.stopRequested(); ++vi) {
    const Variant& v = variants[vi];
    sink.info("Training in " + v.label + (v.autocast ? " (autocast " + dtypeName(*v.autocast) + ")" : std::string()) + ".");
    Result r;
    MemoryEventRecorder recorder(device);  // from before the model, so every byte of this variant is seen
    Trainer t = makeTrainer(v);
    nn::Sequential& model = *t.model;
    amp::GradScaler& scaler = *t.scaler;

    std::vector<double> zeroShares;
    double tailLoss = 0, tailSteps = 0;  // the reports of the last tenth of the steps: the final loss
    double elapsed = 0;
    Tensor windowLoss = zeros({}, {.device = device});
    std::int64_t windowSteps = 0, windowSkipped = 0, markers = 0;  // skipped: steps the scaler skipped since the last report
    double previousScale = 0;
    for (std::int64_t step = 1; step <= steps; ++step) {
      if (stop.stopRequested()) break;
      const data::Batch batch = t.next();
      setMemoryStep(step);
      synchronizeDevice(device);
      const auto t0 = Clock::now();

      // 3a. Forward and loss under autocast; backward outside it, through the scaler.
      const Tensor loss = forwardBackward(v, model, scaler, batch, device, classification, lossWeight, [&] {
        r.memory.apply(recorder.drain());
        if (step == std::min<std::int64_t>(2, steps)) r.memory.afterForward = r.memory.live;  // step 2: optimizer state exists
      });
      synchronizeDevice(device);
      const auto t1 = Clock::now();

      // 3b. What backward left in the gradients (before unscaling: zeros are zeros at any scale). Not timed.
      const bool report = step % logEvery == 0 || step == steps;
      if (report) {
        const double share = gradientZeroShare(model.parameters());
        sink.point("zeros", v.id, {static_cast<double>(step)}, 100.0 * share);
        if (2 * step > steps) zeroShares.push_back(share);
      }

      // 3c. The step: unscale, skip it if a gradient is inf/NaN, update the scale.
      const auto t2 = Clock::now();
      optimizerStep(scaler, *t.optimizer);
      synchronizeDevice(device);
      const auto t3 = Clock::now();
      const double seconds = secondsBetween(t0, t1) + secondsBetween(t2, t3);
      elapsed += seconds;
      r.memory.apply(recorder.drain());

      const amp::ScalerStepStats& s = scaler.last_step();
      if (v.scaler) {
        if (s.skipped) {
          ++r.skipped;
          ++windowSkipped;
          if (++markers <= 40) sink.marker("scale", {static_cast<double>(step)}, "skipped", lab::MarkerKind::Skipped);
        }
        // A point where the scale changes (after a skip, after growth) and at each report: the steps of the plot.
        if (report || s.skipped || s.scale != previousScale) sink.point("scale", v.id, {static_cast<double>(step)}, s.scale);
        previousScale = s.scale;
      }
      {
        NoGradGuard noGrad;
        windowLoss = windowLoss + loss.detach() * (1.0 / lossWeight);  // the loss function's own value
      }
      ++windowSteps;
      if (!report) continue;

      // 3d. Report: one .item() per window.
      const double mean = windowLoss.item() / static_cast<double>(windowSteps);
      if (10 * step > 9 * steps) {
        tailLoss += mean * static_cast<double>(windowSteps);
        tailSteps += static_cast<double>(windowSteps);
      }
      const std::vector<double> xs{static_cast<double>(step), elapsed};
      sink.record("step", {{"precision", v.id}, {"step", step}, {"loss", mean}, {"loss_scale", s.scale}, {"skipped", windowSkipped},
                           {"elapsed_s", elapsed}});
      if (!std::isfinite(mean)) {
        r.diverged = true;
        sink.marker("loss", xs, v.id + ": loss is " + formatNumber(mean));
        sink.warning("In " + v.label + " the loss became " + formatNumber(mean) + " at step " + std::to_string(step) + ", so this "
                     "precision stopped. " + (v.autocast == kFloat16 && !v.scaler
                         ? "Without a GradScaler nothing checks the float16 gradients: one that overflowed (above 65504) became "
                           "inf and the optimizer wrote it into the weights. The GradScaler skips such a step."
                         : "Likely cause: a learning rate too high for this model."));
        break;
      }
      sink.point("loss", v.id, xs, mean);
      sink.progress(static_cast<double>(vi * steps + step), static_cast<double>(variants.size() * steps),
                    v.label + ": step " + std::to_string(step) + ", loss " + formatFixed(mean, 4));
      windowLoss = zeros({}, {.device = device});
      windowSteps = windowSkipped = 0;
    }
    setMemoryStep(0);
    if (!r.diverged && tailSteps > 0) r.finalLoss = tailLoss / tailSteps;
    if (!zeroShares.empty()) {
      double sum = 0;
      for (double z : zeroShares) sum += z;
      r.zeroShare = sum / static_cast<double>(zeroShares.size());
    }
    if (v.id == "fp32") fp32Index = vi;

    // 3e. This precision's memory by category at the end of the second forward pass.
    for (int c = 0; c < kMemoryCategoryCount; ++c) {
      if (r.memory.afterForward[static_cast<std::size_t>(c)] > 0) {
        sink.bar("memory", v.id, categoryLabel(c), static_cast<double>(r.memory.afterForward[static_cast<std::size_t>(c)]));
      }
    }
    results.push_back(std::move(r));
  }
  if (stop.stopRequested() || results.size() < variants.size()) {
    sink.info("Stopped after " + formatFixed(secondsBetween(runStart, Clock::now()), 1) + " s.");
    return;
  }

  // 4. The step times, measured apart from the training above, in interleaved rounds: a few steps of
  //    every precision in turn, then every precision again, ... so that a slow moment of the machine
  //    hits them all alike. Each starts from the seed's weights, after two untimed steps (the first
  //    steps fill the caching allocator).
  struct Timed {
    Trainer trainer;
    std::vector<double> secondsPerStep;  // one per round
  };
  const int rounds = static_cast<int>(p.getInt("repeats"));
  const std::int64_t stepsPerRound = std::clamp<std::int64_t>(steps / 20, 1, 10);
  std::vector<Timed> timed(variants.size());
  auto runSteps = [&](std::size_t vi, std::int64_t n) {
    Trainer& t = timed[vi].trainer;
    for (std::int64_t i = 0; i < n; ++i) {
      (void)forwardBackward(variants[vi], *t.model, *t.scaler, t.next(), device, classification, lossWeight);
      optimizerStep(*t.scaler, *t.optimizer);
    }
  };
  for (std::size_t vi = 0; vi < variants.size(); ++vi) {
    timed[vi].trainer = makeTrainer(variants[vi]);
    runSteps(vi, 2);
  }
  for (int round = 0; round < rounds && !stop.stopRequested(); ++round) {
    for (std::size_t vi = 0; vi < variants.size() && !stop.stopRequested(); ++vi) {
      synchronizeDevice(device);
      const auto start = Clock::now();
      runSteps(vi, stepsPerRound);
      synchronizeDevice(device);
      timed[vi].secondsPerStep.push_back(secondsBetween(start, Clock::now()) / static_cast<double>(stepsPerRound));
    }
    sink.progress(round + 1, rounds, "timing the steps: round " + std::to_string(round + 1) + " of " + std::to_string(rounds));
  }
  if (stop.stopRequested()) {
    sink.info("Stopped after " + formatFixed(secondsBetween(runStart, Clock::now()), 1) + " s.");
    return;
  }
  for (std::size_t vi = 0; vi < variants.size(); ++vi) results[vi].step = spreadOf(timed[vi].secondsPerStep);
  timed.clear();

  // 5. The table and the measurements, each precision against float32 when it ran.
  const std::size_t activation = static_cast<std::size_t>(MemoryCategory::Activation);
  const Result* base = fp32Index ? &results[*fp32Index] : nullptr;
  for (std::size_t vi = 0; vi < variants.size(); ++vi) {
    const Result& r = results[vi];
    sink.row("precisions", {variants[vi].label, r.step.median, rangeText(r.step, 1e3),
                            base ? lab::Value(r.step.median / base->step.median) : lab::Value(std::string("-")),
                            r.finalLoss ? lab::Value(*r.finalLoss) : lab::Value(std::string(r.diverged ? "diverged" : "-")),
                            100.0 * r.zeroShare, r.skipped, r.memory.afterForward[activation]});
  }
  for (std::size_t vi = 0; vi < variants.size(); ++vi) {
    const Variant& v = variants[vi];
    const Result& r = results[vi];
    const double vs = base ? r.step.median / base->step.median : std::numeric_limits<double>::quiet_NaN();
    const std::string name = v.label + ": ";
    sink.measurement(name + "step time", r.step.median, "s");
    sink.measurement(name + "step time, fastest round", r.step.low, "s");
    sink.measurement(name + "step time, slowest round", r.step.high, "s");
    if (r.finalLoss) sink.measurement(name + "final loss", *r.finalLoss, "");
    sink.measurement(name + "zero gradients", 100.0 * r.zeroShare, "%");
    sink.measurement(name + "skipped steps", static_cast<double>(r.skipped), "");
    sink.measurement(name + "activations", static_cast<double>(r.memory.afterForward[activation]), "bytes");
    sink.measurement(name + "peak allocated", static_cast<double>(r.memory.peak), "bytes");
    if (base && vi != *fp32Index) {
      sink.measurement(name + "step time vs float32", vs, "x");
      // A run that diverged learned nothing: its loss ratio is recorded as far above any threshold.
      if (base->finalLoss && (r.finalLoss || r.diverged)) {
        sink.measurement(name + "final loss vs float32", r.diverged ? 1e6 : *r.finalLoss / *base->finalLoss, "x");
      }
    }
    sink.record("precision", {{"precision", v.id}, {"step_s", r.step.median}, {"final_loss", r.finalLoss ? *r.finalLoss : -1.0},
                              {"zero_share", r.zeroShare}, {"skipped", r.skipped}, {"diverged", r.diverged},
                              {"activation_bytes", r.memory.afterForward[activation]}, {"peak_bytes", r.memory.peak}});
  }

  // 5. What this machine measured, said in words (never a number from elsewhere).
  auto find = [&](const std::string& id) -> const Result* {
    for (std::size_t vi = 0; vi < variants.size(); ++vi) {
      if (variants[vi].id == id) return &results[vi];
    }
    return nullptr;
  };
  if (const Result *fp32 = find("fp32"), *noscale = find("fp16-noscale"); fp32 && noscale) {
    std::string line = "float16 without a scaler: " + formatFixed(100 * noscale->zeroShare, 1) + "% of the gradient values were exactly zero, " +
                       "against " + formatFixed(100 * fp32->zeroShare, 1) + "% in float32";
    if (const Result* scaled = find("fp16")) line += " and " + formatFixed(100 * scaled->zeroShare, 1) + "% in float16 with the GradScaler";
    line += noscale->zeroShare > fp32->zeroShare + 0.01
                ? ". The difference is gradients that fell below float16's smallest number, 2^-24, and became zero."
                : ": at these settings hardly any gradient is small enough to underflow.";
    sink.info(line);
  }
  if (fp32Index) {
    const Spread& t32 = results[*fp32Index].step;
    std::string said;
    bool slowerOnCpu = false, fasterOnCpu = false;
    for (std::size_t vi = 0; vi < variants.size(); ++vi) {
      if (vi == *fp32Index || !variants[vi].autocast || variants[vi].id == "fp16-noscale") continue;  // (no scaler: the same products as fp16)
      const Difference d = compare(results[vi].step, t32);
      said += (said.empty() ? "On " + cuda::deviceLabel(device) + " a " : "; a ") + variants[vi].label + " step " +
              comparedTimes(results[vi].step, t32, "a float32 step");
      slowerOnCpu = slowerOnCpu || (device.isCpu() && d == Difference::Higher);
      fasterOnCpu = fasterOnCpu || (device.isCpu() && d == Difference::Lower);
    }
    if (!said.empty()) {
      said += ". Each step time is the median of " + std::to_string(rounds) + " rounds of " + std::to_string(stepsPerRound) +
              (stepsPerRound == 1 ? " step" : " steps") + " per precision, the precisions taking turns.";
      if (emulated) said += " (The emulated GPU computes on your CPU: no claim about GPUs follows from this.)";
      else if (slowerOnCpu && !fasterOnCpu)
        said += " Most CPUs have no half-precision matrix units, and GPU Lab's CPU backend widens float16/bfloat16 operands "
                "to float32 for every product (OpenBLAS has no 16-bit kernels): autocast adds the casts and saves no "
                "arithmetic, so on a CPU lower precision does not save time.";
      else if (device.isCpu())
        said += " GPU Lab's CPU backend computes every product in float32 whatever the precision (OpenBLAS has no 16-bit "
                "kernels): what differs is the casts and the smaller tensors, and the runs' spread shows how much the other "
                "programs on this machine move the times.";
      sink.info(said);
      said.clear();
    }
    // What it did to memory, from this run's bars: the activations kept for backward.
    const double act32 = static_cast<double>(results[*fp32Index].memory.afterForward[activation]);
    for (std::size_t vi = 0; vi < variants.size() && act32 > 0; ++vi) {
      if (vi == *fp32Index || !variants[vi].autocast) continue;
      const double act = static_cast<double>(results[vi].memory.afterForward[activation]);
      const std::string mib = formatFixed(act / 1048576.0, 2) + " MiB against float32's " + formatFixed(act32 / 1048576.0, 2) + " MiB";
      said = act < 0.95 * act32
                 ? "Memory: with " + variants[vi].label + " the activations kept for backward took " + mib + "."
                 : "Memory: with " + variants[vi].label + " the activations kept for backward took " + mib +
                       " -- at this size autocast's 16-bit copies of the weights and the input outweigh the smaller "
                       "activations; a wider model or a larger batch shows the saving.";
      break;  // one 16-bit variant says it: they keep the same tensors
    }
    if (!said.empty()) {
      sink.info(said);
    }
  }
  sink.record("done", {{"seconds", secondsBetween(runStart, Clock::now())}, {"device", device.str()},
                       {"precisions", static_cast<std::int64_t>(variants.size())}});
}

}  // namespace gpulab::labs
