// The "syncs" lab: what reading values back and copying in small pieces cost. Read it next to the
// PyTorch it mirrors -- the seed lessons' regression loop (16 inputs, Adam, batches of 64; 256 hidden
// units by default, the seed's 64 on request), its data already on the device:
//
//   for step in range(steps):
//       loss = F.mse_loss(model(x[b]), y[b])
//       optimizer.zero_grad(); loss.backward(); optimizer.step()
//       total += loss.item()                          # 1. read every step: the host waits each time
//
//       running += loss.detach()                      # 2. kept on the device...
//       if (step + 1) % read_every == 0:
//           total += running.item(); running.zero_()  #    ...and read every read_every steps
//
//   xb = torch.empty(64, 16, device=device)           # 3. a batch copied one sample at a time
//   for i in range(64):
//       xb[i] = x_cpu[start + i].to(device)
//   xb = x_cpu[start:start + 64].to(device)           # 4. the same batch in one copy
//
// Why it matters on a GPU: ops are queued on the device's stream and return at once, so the host can
// prepare the next step while the GPU runs this one. .item(), .cpu(), print(tensor), a blocking copy
// from pageable memory -- anything that needs a value on the host -- waits until the queue has run dry,
// and the two take turns instead of working side by side. Every copy also has a fixed cost (a driver
// call, a DMA set-up, and with pageable memory a wait), so 64 copies of one row cost far more than one
// copy of 64 rows. On the CPU every op runs before it returns: there is nothing to wait for, and the
// lab measures that too.
#include "lessons/labs/sync_lab.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <map>

#include "engine/core/number_format.h"
#include "engine/data/dataset.h"
#include "engine/ops/ops.h"
#include "engine/runtime/device_runtime.h"
#include "lessons/labs/repeated_timing.h"
#include "lessons/labs/training.h"

namespace gpulab::labs {

namespace {

using Clock = std::chrono::steady_clock;


constexpr std::int64_t kFeatures = 16, kBatch = 64, kSamples = 4096;

// One run of the training loop, the loss read every `readEvery` steps.
struct LoopRun {
  double seconds = 0;       // the whole loop, until the device finished its last step
  double waitSeconds = 0;   // the host's time inside .item(): waiting for the device, and the read itself
  std::int64_t reads = 0;   // .item() calls: one host-device synchronisation each
  double meanLoss = 0;      // the loss over the whole run, as the reads added it up
  double deviceBusy = -1;   // the share of the loop the emulated GPU ran kernels (-1: not measured)
  bool stopped = false;     // Stop came first: the loop ended early and measured nothing
};

// The loop above, from the same initial weights (seed) and the same batches whatever readEvery is, so
// every run computes the same numbers: only when they are read differs.
LoopRun trainLoop(Device device, const Tensor& x, const Tensor& y, std::int64_t steps, std::int64_t readEvery,
                  std::uint64_t seed, const data::Dataset& shapeOf, const std::vector<std::int64_t>& hidden, const lab::StopToken& stop) {
  Generator gen(seed);
  auto model = makeMlp(shapeOf, hidden, 1, gen);
  model->to(device);
  auto optimizer = makeOptimizer("adam", model->parameters(), 1e-3, 0.0, 0.0);
  const std::int64_t batches = x.size(0) / kBatch;
  Tensor running = zeros({}, {.device = device});
  double total = 0;
  LoopRun r;
  synchronizeDevice(device);
  const std::optional<double> busyBefore = cuda::busySeconds(device);  // where the device's runtime measures it
  const Clock::time_point start = Clock::now();
  for (std::int64_t step = 0; step < steps; ++step) {
    if (stop.stopRequested()) {  // a step is well under 100 ms: Stop is seen within one
      r.stopped = true;
      synchronizeDevice(device);
      return r;
    }
    const std::int64_t b = step % batches;
    const Tensor xb = x.slice(0, b * kBatch, (b + 1) * kBatch), yb = y.slice(0, b * kBatch, (b + 1) * kBatch);
    Tensor loss = mse_loss((*model)(xb), yb);
    optimizer->zero_grad();
    loss.backward();
    optimizer->step();
    // Every step: total += loss.item(). Else running += loss.detach() -- one more op on the queue, no
    // wait -- and running read every readEvery steps (and at the end).
    Tensor toRead = loss;
    if (readEvery != 1) {
      running = running + loss.detach();
      if ((step + 1) % readEvery != 0 && step + 1 != steps) continue;
      toRead = running;
    }
    const Clock::time_point t = Clock::now();
    total += toRead.item();  // the host waits for every kernel queued so far
    r.waitSeconds += secondsSince(t);
    ++r.reads;
    if (readEvery != 1) running = zeros({}, {.device = device});  // running.zero_()
  }
  synchronizeDevice(device);
  r.seconds = secondsSince(start);
  if (busyBefore) r.deviceBusy = (cuda::busySeconds(device).value_or(*busyBefore) - *busyBefore) / r.seconds;
  r.meanLoss = total / static_cast<double>(steps);
  return r;
}

// One batch of `kBatch` rows starting at `start`, copied to `device` one row at a time or in one copy;
// returns the seconds it took until the device had it.
double copyBatch(const Tensor& hostRows, std::int64_t start, Device device, bool perSample) {
  synchronizeDevice(device);
  const Clock::time_point t = Clock::now();
  if (perSample) {
    Tensor xb = Tensor::empty({kBatch, kFeatures}, kFloat32, device);
    for (std::int64_t i = 0; i < kBatch; ++i) {
      xb.select(0, i).copy_(hostRows.select(0, start + i).to(device));  // xb[i] = x_cpu[start + i].to(device)
    }
  } else {
    const Tensor xb = hostRows.slice(0, start, start + kBatch).to(device);  // x_cpu[start:start + 64].to(device)
  }
  synchronizeDevice(device);
  return secondsSince(t);
}

}  // namespace

std::vector<lab::ParamSpec> SyncLab::params() const {
  using namespace lab;
  return {
      deviceParam("device", "The device to train on"),
      textParam("hidden", "256", "Hidden layer widths, comma-separated (the seed lessons' model has 64: less work per step)", checkHiddenWidths),
      intParam("steps", 1000, 10, 1000000, "Training steps in each timed loop"),
      intParam("read_every", 50, 1, 1000000, "Read the loss back (.item()) every N steps; 1 is the habit of reading it every step"),
      intParam("repeats", 3, 1, 20, "Runs of each loop, taking turns; the median counts, the range shows the noise"),
      intParam("copy_batches", 20, 1, 100000, "Batches copied each way in the copy experiment"),
      intParam("seed", 0, 0, 2147483647, "Seed for the data and the initial weights"),
  };
}

std::vector<lab::MeasurementSpec> SyncLab::measurements() const {
  return {
      {"steps/s reading the loss every step", "steps/s"},
      {"steps/s reading the loss every N steps", "steps/s"},
      {"steps/s reading the loss every step, * run", "steps/s"},
      {"steps/s reading the loss every N steps, * run", "steps/s"},
      {"speed-up from reading every N steps", "x"},
      {"speed relative to the fastest N", "x"},
      {"loss reads", ""},
      {"host waiting share, reading every step", "%"},
      {"host waiting share, reading every N steps", "%"},
      {"largest difference between the loops' mean losses", ""},
      {"device busy share, reading every step", "%"},
      {"device busy share, reading every N steps", "%"},
      {"per-sample copies relative to one copy", "x"},
      {"time per copy", "us"},
  };
}

void SyncLab::run(const lab::Params& p, lab::MetricSink& sink, const lab::StopToken& stop) {
  const Device device = resolveDevice(p.getString("device"));
  announceDevice(sink, device);
  const std::int64_t steps = p.getInt("steps"), readEvery = std::min(p.getInt("read_every"), steps);
  const int repeats = static_cast<int>(p.getInt("repeats"));
  const auto seed = static_cast<std::uint64_t>(p.getInt("seed"));
  const std::vector<std::int64_t> hidden = parseWidths(p.getString("hidden"));
  const auto data = data::makeRegressionDataset(kSamples, kFeatures, 0.1, seed);
  const Tensor x = data->inputs().to(device), y = data->targets().to(device);  // resident: no copies in the loop
  const bool onCpu = device.isCpu();

  // 1. The loop with the loss read every N steps, for N = 1, 4, 16, ... and the learner's N. The runs are
  //    interleaved -- every N once, then every N again -- so that a busy moment of the machine lands on
  //    no N in particular; each N reports the median of its runs and their range (repeated_timing.h).
  std::vector<std::int64_t> sweep;
  for (std::int64_t n = 1; n < steps && n <= 256; n *= 4) sweep.push_back(n);
  if (std::find(sweep.begin(), sweep.end(), readEvery) == sweep.end()) sweep.push_back(readEvery);
  std::sort(sweep.begin(), sweep.end());
  (void)trainLoop(device, x, y, std::min<std::int64_t>(steps, 100), 1, seed, *data, hidden, stop);  // warm-up: first-use costs
  std::map<std::int64_t, std::vector<LoopRun>> runs;
  const double total = static_cast<double>(repeats) * static_cast<double>(sweep.size());
  for (int rep = 0; rep < repeats; ++rep) {
    for (std::size_t i = 0; i < sweep.size() && !stop.stopRequested(); ++i) {
      const std::int64_t n = sweep[i];
      const LoopRun r = trainLoop(device, x, y, steps, n, seed, *data, hidden, stop);
      if (r.stopped) break;
      runs[n].push_back(r);
      sink.progress(static_cast<double>(rep) * static_cast<double>(sweep.size()) + static_cast<double>(i + 1), total,
                    "loss read every " + std::to_string(n) + (n == 1 ? " step" : " steps"));
    }
  }
  if (stop.stopRequested()) return;
  // Each N's runs: the median run stands for it (its waits, its device busy share), the spread of the
  // loop's times says how far to trust a difference.
  std::map<std::int64_t, LoopRun> typical;
  std::map<std::int64_t, Spread> loopSeconds;
  for (auto& [n, rs] : runs) {
    std::vector<double> seconds, waits, busy;
    for (const LoopRun& r : rs) {
      seconds.push_back(r.seconds);
      waits.push_back(r.waitSeconds / r.seconds);
      busy.push_back(r.deviceBusy);
    }
    loopSeconds[n] = spreadOf(seconds);
    LoopRun t = rs.front();
    t.seconds = loopSeconds[n].median;
    t.waitSeconds = median(waits) * t.seconds;
    t.deviceBusy = median(busy);
    typical[n] = t;
  }
  const LoopRun& everyStep = typical.at(1);
  const LoopRun& yours = typical.at(readEvery);
  const auto best = std::min_element(typical.begin(), typical.end(),
                                     [](const auto& a, const auto& b) { return a.second.seconds < b.second.seconds; });
  const std::int64_t fastestN = best->first;
  const double bestSeconds = best->second.seconds;
  auto rate = [&](std::int64_t n) { return reciprocalOf(loopSeconds.at(n), static_cast<double>(steps)); };

  // The emulated GPU's busy share is measured (its streams time their kernels); a GPU's would need
  // events around every kernel, and the CPU runs the kernels on the loop's own thread.
  const bool busyMeasured = cuda::busySeconds(device).has_value();
  std::vector<lab::Axis> columns = {{"loss read", ""}, {".item() calls", ""}, {"steps/s", ""}, {"range", "steps/s"}, {"time", "ms"},
                                      {"host waiting in .item()", "%"}};
  if (busyMeasured) columns.push_back({"device busy", "%"});
  columns.push_back({"mean loss", ""});
  sink.view({.id = "reads", .title = "Reading the loss: every step or every N", .kind = lab::ViewKind::Table, .columns = columns,
             .note = std::string("Each loop trains the same model from the same weights on the same batches, so the mean losses agree (to "
                                 "float32 rounding: every step adds the loss on the host in double, the others on the device in float32): "
                                 "only when the loss was read differs. The loops take turns, ") + std::to_string(repeats) +
                     " runs each: steps/s and time are the median run's, until the device finished; range: the slowest and the fastest "
                     "run -- where two loops' ranges overlap, their difference is within this machine's noise. Host waiting: the share "
                     "of the loop the host spent inside .item() (median)." +
                     (busyMeasured ? " Device busy: the share of the loop the emulated GPU spent running kernels -- what nvidia-smi "
                                     "calls GPU-Util; the rest it sat idle, waiting for work."
                                   : "")});
  for (const auto& [n, r] : typical) {
    const std::string name = n == 1 ? "every step: total += loss.item()" : "every " + std::to_string(n) + " steps";
    const Spread speed = rate(n);
    std::vector<lab::Value> cells = {n == readEvery && n != 1 ? name + " (yours)" : name, r.reads, speed.median,
                                     rangeText(speed, 1.0, 4), r.seconds * 1000.0,
                                     100.0 * r.waitSeconds / r.seconds};
    if (busyMeasured) cells.push_back(100.0 * r.deviceBusy);
    cells.push_back(r.meanLoss);
    sink.row("reads", cells);
  }

  const lab::Axis everyAxis{"read the loss every N steps", "", true};
  sink.view({.id = "sweep", .title = "Steps per second vs how often the loss is read", .kind = lab::ViewKind::Line, .x = {everyAxis},
             .y = {"steps per second", "", false}, .series = {{"loop", "training loop"}},
             .note = "Each point: the same loop, the loss read every N steps (N = 1: every step), the median of the repeats. On a "
                     "GPU the loop speeds up as the waits get rarer, until the device itself is the limit; on the CPU there is "
                     "nothing to wait for and the line is flat (up to the machine's noise)."});
  for (const auto& [n, r] : typical) sink.point("sweep", "loop", {static_cast<double>(n)}, static_cast<double>(steps) / r.seconds);
  sink.marker("sweep", {static_cast<double>(readEvery)}, "yours: every " + std::to_string(readEvery));

  // 2. A batch copied one sample at a time against in one copy (from the CPU, where a DataLoader makes
  //    it), the two ways taking turns batch after batch.
  const std::int64_t copyBatches = p.getInt("copy_batches");
  const Tensor hostRows = data->inputs();
  std::vector<double> perSampleRuns, perBatchRuns;
  (void)copyBatch(hostRows, 0, device, true);  // warm-up
  for (std::int64_t i = 0; i < copyBatches && !stop.stopRequested(); ++i) {
    const std::int64_t start = (i * kBatch) % (kSamples - kBatch);
    perSampleRuns.push_back(copyBatch(hostRows, start, device, true));
    perBatchRuns.push_back(copyBatch(hostRows, start, device, false));
  }
  if (stop.stopRequested()) return;
  const Spread perSample = spreadOf(perSampleRuns), perBatch = spreadOf(perBatchRuns);
  sink.view({.id = "copies", .title = "One batch to the device: 64 copies or one", .kind = lab::ViewKind::Table,
             .columns = {{"how", ""}, {"copies a batch", ""}, {"time a batch", "us"}, {"range", "us"}, {"time a copy", "us"}, {"relative", "x"}},
             .note = std::string("The same 64 x 16 rows of float32 (4 KiB) from CPU memory, until the device had them: ") +
                     std::to_string(copyBatches) + " batches each way, the two ways taking turns; the median batch and the range." +
                     (onCpu ? " On the CPU .to('cpu') returns the tensor itself: what is timed is the ops, not copies." : "")});
  sink.row("copies", {std::string("one sample at a time: xb[i] = x[start + i].to(device)"), kBatch, perSample.median * 1e6,
                      rangeText(perSample, 1e6), perSample.median * 1e6 / kBatch, perSample.median / perBatch.median});
  sink.row("copies", {std::string("one copy: x[start:start + 64].to(device)"), std::int64_t{1}, perBatch.median * 1e6, rangeText(perBatch, 1e6),
                      perBatch.median * 1e6, 1.0});

  // 3. The measurements the lesson's claims and challenge rest on: medians.
  const double speedup = everyStep.seconds / yours.seconds;
  const double ofBest = bestSeconds / yours.seconds;
  double lossSpread = 0;
  for (const auto& [n, r] : typical) lossSpread = std::max(lossSpread, std::abs(r.meanLoss - everyStep.meanLoss));
  sink.measurement("steps/s reading the loss every step", static_cast<double>(steps) / everyStep.seconds, "steps/s");
  sink.measurement("steps/s reading the loss every N steps", static_cast<double>(steps) / yours.seconds, "steps/s");
  sink.measurement("steps/s reading the loss every step, slowest run", rate(1).low, "steps/s");
  sink.measurement("steps/s reading the loss every step, fastest run", rate(1).high, "steps/s");
  sink.measurement("steps/s reading the loss every N steps, slowest run", rate(readEvery).low, "steps/s");
  sink.measurement("steps/s reading the loss every N steps, fastest run", rate(readEvery).high, "steps/s");
  sink.measurement("speed-up from reading every N steps", speedup, "x");
  sink.measurement("speed relative to the fastest N", ofBest, "x");
  sink.measurement("loss reads", static_cast<double>(yours.reads), "");
  sink.measurement("host waiting share, reading every step", 100.0 * everyStep.waitSeconds / everyStep.seconds, "%");
  sink.measurement("host waiting share, reading every N steps", 100.0 * yours.waitSeconds / yours.seconds, "%");
  sink.measurement("largest difference between the loops' mean losses", lossSpread, "");
  if (busyMeasured) {
    sink.measurement("device busy share, reading every step", 100.0 * everyStep.deviceBusy, "%");
    sink.measurement("device busy share, reading every N steps", 100.0 * yours.deviceBusy, "%");
  }
  sink.measurement("per-sample copies relative to one copy", perSample.median / perBatch.median, "x");
  sink.measurement("time per copy", perBatch.median * 1e6, "us");
  sink.record("syncs", {{"every_step_s", everyStep.seconds}, {"read_every", readEvery}, {"yours_s", yours.seconds},
                        {"per_sample_us", perSample.median * 1e6}, {"per_batch_us", perBatch.median * 1e6}, {"device", device.str()}});

  const std::string yoursText =
      readEvery != 1 ? "Every " + std::to_string(readEvery) + " steps (yours) " + comparedTimes(loopSeconds.at(readEvery), loopSeconds.at(1), "reading every step") +
                           ", with the same losses; " + formatFixed(100.0 * ofBest, 1) + "% of the fastest N's median speed. "
      : fastestN == 1 ? "You read it every step, and no N had a faster median here. "
                      : "You read it every step; every " + std::to_string(fastestN) + " steps " +
                            comparedTimes(loopSeconds.at(fastestN), loopSeconds.at(1), "reading every step") + ". ";
  sink.info("Reading the loss every step: " + spreadText(rate(1), "steps/s", 4) + ", the host waiting " +
            formatFixed(100.0 * everyStep.waitSeconds / everyStep.seconds, 1) + "% of the loop. " + yoursText +
            (onCpu ? "This is the CPU: each op ran before it returned, so .item() had nothing to wait for; what differs between the loops "
                     "is only the ops they run (a read against an addition on the device). On a GPU the waits are real: run it on cuda."
                   : cuda::isEmulatedGpu(device)
                         ? "This is the emulated GPU: its stream is a queue run by a thread beside the loop, so .item() waits for it as it "
                           "would for a GPU; a real GPU's kernels and wake-ups take other times, so the size of the gain differs there."
                         : "") +
            " A batch sent one sample at a time " + comparedTimes(perSample, perBatch, "one copy of it") + ".");
}

}  // namespace gpulab::labs
