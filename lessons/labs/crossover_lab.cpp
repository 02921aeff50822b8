// The "crossover" lab: the same work on the CPU and on a GPU, from tiny to large. Read it next to the
// PyTorch it mirrors:
//
//   for n in [8, 16, 32, ..., max_size]:
//       for device in ["cpu", "cuda"]:
//           A = torch.randn(n, n, device=device); B = torch.randn(n, n, device=device)
//           torch.cuda.synchronize()
//           t = time.perf_counter()
//           for _ in range(k):
//               C = A @ B                          # k products queued back to back...
//           torch.cuda.synchronize()               # ...and the clock waits for the GPU to finish them
//           per_product = (time.perf_counter() - t) / k
//
// With workload "mlp" each call is a training step of a 3-layer MLP n wide on a batch of 64:
//
//   model = nn.Sequential(nn.Linear(n, n), nn.ReLU(), nn.Linear(n, n), nn.ReLU(), nn.Linear(n, n)).to(device)
//   loss = F.mse_loss(model(x), y); opt.zero_grad(); loss.backward(); opt.step()
//
// Each call's time is then split three ways with figures measured on each device first: a fixed cost
// (what the same call costs at n = 8, where there is next to nothing to compute or move), memory
// traffic (the bytes the call must move / the device's bandwidth, measured with a + b) and arithmetic
// (its floating-point operations / the device's rate on a large product). The largest part names what
// bounds the call: overhead, bandwidth or compute.
#include "lessons/labs/crossover_lab.h"

#include <algorithm>
#include <array>
#include <chrono>
#include <cmath>
#include <functional>
#include <limits>
#include <map>
#include <memory>

#include "engine/core/errors.h"
#include "engine/core/number_format.h"
#include "engine/runtime/device_memory.h"
#include "engine/nn/layers.h"
#include "engine/ops/ops.h"
#include "engine/runtime/cuda_runtime.h"
#include "engine/runtime/device_runtime.h"
#include "engine/runtime/emulated_gpu.h"
#include "lessons/labs/repeated_timing.h"
#include "lessons/labs/training.h"

namespace gpulab::labs {

namespace {

using Clock = std::chrono::steady_clock;

constexpr std::int64_t kSmallest = 8;
constexpr std::int64_t kMlpBatch = 64;

// One call of the workload, queued on its device, and what it must compute and move.
struct Workload {
  std::function<void()> call;
  double flops = 0;
  double bytes = 0;  // float32 reads and writes the call cannot avoid (its inputs, weights, outputs)
};

Workload matmulWorkload(std::int64_t n, Device device, Generator& gen) {
  const Tensor A = randn({n, n}, gen).to(device), B = randn({n, n}, gen).to(device);
  const double nn = static_cast<double>(n) * static_cast<double>(n);
  return {[A, B] { (void)matmul(A, B); }, 2.0 * nn * static_cast<double>(n), 3.0 * nn * 4.0};
}

Workload mlpWorkload(std::int64_t n, Device device, Generator& gen) {
  auto model = std::make_shared<nn::Sequential>(std::initializer_list<std::shared_ptr<nn::Module>>{
      std::make_shared<nn::Linear>(n, n, true, gen), std::make_shared<nn::ReLU>(), std::make_shared<nn::Linear>(n, n, true, gen),
      std::make_shared<nn::ReLU>(), std::make_shared<nn::Linear>(n, n, true, gen)});
  model->to(device);
  auto optimizer = std::shared_ptr<optim::Optimizer>(makeOptimizer("sgd", model->parameters(), 1e-4, 0.0, 0.0));
  const Tensor x = randn({kMlpBatch, n}, gen).to(device), y = zeros({kMlpBatch, n}, {.device = device});
  const double weights = 3.0 * static_cast<double>(n) * static_cast<double>(n);
  const double activations = 3.0 * static_cast<double>(kMlpBatch) * static_cast<double>(n);
  // Forward: one product a layer; backward: the weight gradient of every layer and the input gradient of
  // the two upper ones (the first layer's input needs none): 3 + 3 + 2 products of batch x n x n.
  const double flops = 2.0 * static_cast<double>(kMlpBatch) * static_cast<double>(n) * static_cast<double>(n) * 8.0;
  // Each weight read forward and backward, its gradient written, then read with the weight by SGD,
  // which writes the weight: six passes over the weights; the activations written and read twice.
  const double bytes = (6.0 * weights + 4.0 * activations) * 4.0;
  return {[model, optimizer, x, y] {
            const Tensor loss = mse_loss((*model)(x), y);
            optimizer->zero_grad();
            loss.backward();
            optimizer->step();
          },
          flops, bytes};
}

Workload makeWorkload(const std::string& kind, std::int64_t n, Device device, Generator& gen) {
  return kind == "matmul" ? matmulWorkload(n, device, gen) : mlpWorkload(n, device, gen);
}

// Seconds per call of each of `calls` (a call and the device it runs on), the calls taking turns so
// that a slow moment of the machine hits them alike: a call of each first, untimed (a device's first use
// of a kernel pays for loading it, an allocator its first blocks); then batches of k calls queued back
// to back, k sized so a batch takes about 2 ms, the device waited for after each batch -- at least 3
// batches of each and as many more as fit in `budget` seconds per call (15 at most). Queued back to
// back, a GPU's calls overlap the host's launching of the next: the time per call is the rate a loop of
// such calls runs at, not one call's latency. A call longer than the budget is timed once. Empty when
// stopped.
using TimedCall = std::pair<Device, std::function<void()>>;
std::vector<Spread> secondsPerCall(const std::vector<TimedCall>& calls, double budget, const lab::StopToken& stop) {
  std::vector<int> batch(calls.size());
  std::vector<std::vector<double>> perCall(calls.size());
  bool once = false;  // some call is longer than the budget: every call timed once
  for (std::size_t c = 0; c < calls.size(); ++c) {
    const auto& [device, call] = calls[c];
    call();
    synchronizeDevice(device);
    if (stop.stopRequested()) return {};
    const double one = std::max(secondsOn(device, call), 1e-7);
    once = once || one >= budget;
    perCall[c].push_back(one);
    batch[c] = static_cast<int>(std::clamp(0.002 / one, 1.0, 20000.0));
  }
  if (!once) {
    for (auto& times : perCall) times.clear();  // the single calls were for sizing the batches
    const Clock::time_point begin = Clock::now();
    const double total = budget * static_cast<double>(calls.size());
    while (perCall[0].size() < 3 || (secondsSince(begin) < total && perCall[0].size() < 15)) {
      for (std::size_t c = 0; c < calls.size(); ++c) {
        if (stop.stopRequested()) return {};
        const std::function<void()>& call = calls[c].second;  // (clang 14 cannot capture a structured binding)
        perCall[c].push_back(secondsOn(calls[c].first, [&] { for (int i = 0; i < batch[c]; ++i) call(); }) / batch[c]);
      }
    }
  }
  std::vector<Spread> out;
  for (const auto& times : perCall) out.push_back(spreadOf(times));
  return out;
}

// A device's own figures, measured before the sweep: what its arithmetic and its memory can do.
struct DeviceFigures {
  double flopsPerSecond = 0;  // an n x n float32 product, n large for the device
  double bytesPerSecond = 0;  // a + b over 16 M floats: 2 reads and a write of 64 MiB
};

DeviceFigures measureFigures(Device device, double budget, const lab::StopToken& stop) {
  Generator gen(1);
  const bool realGpu = cuda::isRealGpu(device);
  const std::int64_t n = realGpu ? 4096 : 1024;
  const Workload product = matmulWorkload(n, device, gen);
  const std::int64_t elements = 16 << 20;
  const Tensor a = ones({elements}, {.device = device}), b = ones({elements}, {.device = device});
  DeviceFigures f;
  const std::vector<Spread> t = secondsPerCall({{device, product.call}, {device, [&] { (void)add(a, b); }}}, budget, stop);
  if (t.empty()) return f;
  f.flopsPerSecond = product.flops / t[0].median;
  f.bytesPerSecond = 3.0 * 4.0 * static_cast<double>(elements) / t[1].median;
  return f;
}

// One call's time, measured and split.
struct Split {
  double measured = 0, fixed = 0, memory = 0, arithmetic = 0;
  double modelled() const { return fixed + memory + arithmetic; }
  double share(double part) const { return 100.0 * part / modelled(); }
  // Arithmetic at the device's full rate, as a share of the time measured (at most 100%).
  double arithmeticOfMeasured() const { return std::min(100.0, 100.0 * arithmetic / measured); }
  std::string bound() const {
    if (fixed >= memory && fixed >= arithmetic) return "overhead";
    return memory >= arithmetic ? "bandwidth" : "compute";
  }
};

struct Side {
  Device device;
  std::string name;  // "CPU", "GPU", "emulated GPU"
  DeviceFigures figures;
  double fixed = 0;  // seconds: the call at the smallest size
  std::map<std::int64_t, Split> splits;
  std::map<std::int64_t, Spread> seconds;  // per call, at each size
};

}  // namespace

std::vector<lab::ParamSpec> CrossoverLab::params() const {
  using namespace lab;
  ParamSpec gpu = deviceParam("gpu", "The GPU to compare with the CPU");
  gpu.defaultValue = std::string("cuda");
  return {
      choiceParam("workload", "matmul", {"matmul", "mlp"},
                  "matmul: an n x n matrix product; mlp: a training step of a 3-layer MLP n wide, batch 64"),
      intParam("max_size", 1024, 16, 8192, "The sweep's largest n: n = 8, 16, 32, ... up to it"),
      intParam("size", 16, 8, 8192, "Your size: the n whose split the challenge reads (added to the sweep)"),
      gpu,
      floatParam("budget", 0.15, 0.01, 10.0, "Seconds of timing per size and device (at least 3 batches of calls each)"),
  };
}

std::vector<lab::MeasurementSpec> CrossoverLab::measurements() const {
  return {
      {"crossover found", ""},
      {"crossover size", ""},
      {"GPU speed-up at *", "x"},
      {"fixed cost per call, *", "us"},
      {"arithmetic rate, *", "GFLOP/s"},
      {"memory bandwidth, *", "GB/s"},
      {"fixed-cost share at *", "%"},
      {"arithmetic share *", "%"},
  };
}

void CrossoverLab::run(const lab::Params& p, lab::MetricSink& sink, const lab::StopToken& stop) {
  const std::string kind = p.getString("workload");
  const std::int64_t maxSize = p.getInt("max_size"), yourSize = p.getInt("size");
  const double budget = p.getFloat("budget");
  const Device gpuDevice = resolveDevice(p.getString("gpu"));
  if (!gpuDevice.isCuda()) throw ValueError("gpu must be a CUDA device (cuda or cuda:N), got '" + p.getString("gpu") + "': the lab compares it with the CPU");
  announceDevice(sink, gpuDevice);
  const bool emulated = cuda::isEmulatedGpu(gpuDevice);

  std::vector<std::int64_t> sizes;
  for (std::int64_t n = kSmallest; n <= maxSize; n *= 2) sizes.push_back(n);
  if (std::find(sizes.begin(), sizes.end(), yourSize) == sizes.end()) sizes.push_back(yourSize);
  std::sort(sizes.begin(), sizes.end());
  const std::int64_t largest = sizes.back();

  // The largest size must fit: its tensors (and an MLP's gradients and activations) at most half of what
  // either device has free.
  const double n2 = static_cast<double>(largest) * static_cast<double>(largest);
  // measureFigures' tensors, alive together: a + b's three and its product's three.
  const double figuresN = cuda::isRealGpu(gpuDevice) ? 4096.0 : 1024.0;
  const double figuresBytes = 3.0 * 4.0 * (static_cast<double>(16 << 20) + figuresN * figuresN);
  const double needBytes =
      figuresBytes + (kind == "matmul" ? 3.0 * n2 * 4.0 : (3.0 * 2.0 * n2 + 8.0 * kMlpBatch * static_cast<double>(largest)) * 4.0);
  for (Device d : {kCPU, gpuDevice}) {
    const double freeBytes = static_cast<double>(mem_get_info(d).first);
    if (needBytes > 0.5 * freeBytes) {
      throw ValueError("n = " + std::to_string(largest) + ": the " + kind + " workload needs " + formatGeneral(needBytes / (1 << 20), 4) +
                       " MiB on " + d.str() + ", more than half of the " + formatGeneral(freeBytes / (1 << 20), 4) +
                       " MiB it has free; choose a smaller max_size or size");
    }
  }

  std::array<Side, 2> sides{Side{kCPU, "CPU"}, Side{gpuDevice, emulated ? "emulated GPU" : "GPU"}};
  const std::string gpuName = sides[1].name;
  sink.progress(0, static_cast<double>(sizes.size() + 1), "measuring each device's arithmetic and bandwidth");
  for (Side& s : sides) s.figures = measureFigures(s.device, budget, stop);
  if (stop.stopRequested()) return;
  for (const Side& s : sides) {
    sink.info(s.name + " (" + cuda::deviceLabel(s.device) + "): arithmetic " + formatGeneral(s.figures.flopsPerSecond / 1e9, 4) +
              " GFLOP/s on a large float32 product, memory " + formatGeneral(s.figures.bytesPerSecond / 1e9, 4) + " GB/s on a + b.");
  }
  if (emulated) {
    sink.warning("cuda:" + std::to_string(gpuDevice.index()) + " is the " + std::string(cuda::kEmulatedGpuPhrase) +
                 ": its kernels are the CPU's, run by another thread of your CPU, so its arithmetic and bandwidth agree with the "
                 "CPU's within measurement noise. At best it overlaps one op's kernel with the host preparing the next: a crossover "
                 "found here would be that overlap or noise, not a GPU's speed. What it shows truly is what every GPU adds to each "
                 "call, a queue between the host and the device. On a real GPU the arithmetic and memory parts shrink by the GPU's "
                 "figures; the fixed part does not.");
  }

  const std::string what = kind == "matmul" ? "product" : "step";
  const lab::Axis sizeAxis{kind == "matmul" ? "n (an n x n product)" : "n (the MLP's width)", "", true};
  sink.view({.id = "time", .title = "Time per " + what + ": CPU and " + gpuName, .kind = lab::ViewKind::Line, .x = {sizeAxis},
             .y = {"time per " + what, "ms", true}, .series = {{"cpu", "CPU"}, {"gpu", cuda::deviceLabel(gpuDevice)}},
             .note = "Each point: the median over batches of calls queued back to back, the device waited for after each batch. "
                     "A crossing of the lines is not yet a win: the crossover marker is where the GPU is clearly faster, its batches "
                     "apart from the CPU's by more than their spread (the table's range), there and at every larger size."});
  sink.view({.id = "speedup", .title = gpuName + " speed-up over the CPU", .kind = lab::ViewKind::Line, .x = {sizeAxis},
             .y = {"speed-up (CPU time / GPU time)", "x", true}, .series = {{"speedup", gpuName + " over the CPU"}},
             .note = "Above 1: the " + gpuName + "'s median was the faster at that size -- clearly faster only where the crossover "
                     "marker says so (the table gives each side's spread)."});
  sink.level("speedup", "equal speed", 1.0);
  for (const Side& s : sides) {
    sink.view({.id = "split_" + std::string(s.device.isCpu() ? "cpu" : "gpu"), .title = "Where a " + what + "'s time goes: " + s.name,
               .kind = lab::ViewKind::StackedArea, .x = {sizeAxis}, .y = {"share of the modelled time", "%"}, .yFromZero = true,
               .series = {{"fixed", "fixed cost (overhead)"}, {"memory", "memory traffic (bandwidth)"}, {"arithmetic", "arithmetic (compute)"}},
               .note = "Fixed: the " + what + " at n = 8. Memory: its bytes / the measured bandwidth. Arithmetic: its FLOPs / the measured "
                       "rate of a large product. The largest part bounds the " + what + "."});
  }
  sink.view({.id = "where", .title = "Overhead-, bandwidth- or compute-bound", .kind = lab::ViewKind::Table,
             .columns = {{"n", ""}, {"device", ""}, {"measured", "ms"}, {"range", "ms"}, {"fixed", "ms"}, {"memory traffic", "ms"}, {"arithmetic", "ms"},
                         {"bound", ""}, {"modelled / measured", "x"}},
             .note = "Measured: the median batch's time per call, the two devices taking turns batch after batch; range: the "
                     "slowest and the fastest batch. The three parts are estimates from each device's own figures; their sum against the measured time says how well "
                     "three numbers describe the device. Below 1: the device ran below its figures (small matrices do not reach a BLAS "
                     "kernel's peak). Above 1: the figures themselves are noisy estimates -- the fixed cost is one size's time, the rates "
                     "one run's -- or calls queued back to back overlapped their parts."});

  // The sweep, smallest first: the smallest size's time is each device's fixed cost.
  Generator gen(7);
  for (std::size_t i = 0; i < sizes.size() && !stop.stopRequested(); ++i) {
    const std::int64_t n = sizes[i];
    const std::array<Workload, 2> work{makeWorkload(kind, n, sides[0].device, gen), makeWorkload(kind, n, sides[1].device, gen)};
    const std::vector<Spread> timed = secondsPerCall({{sides[0].device, work[0].call}, {sides[1].device, work[1].call}}, budget, stop);
    if (stop.stopRequested()) return;
    std::array<double, 2> seconds{};
    for (std::size_t d = 0; d < sides.size(); ++d) {
      Side& s = sides[d];
      const Workload& w = work[d];
      seconds[d] = timed[d].median;
      s.seconds[n] = timed[d];
      if (i == 0) s.fixed = seconds[d];
      Split split{seconds[d], s.fixed, w.bytes / s.figures.bytesPerSecond, w.flops / s.figures.flopsPerSecond};
      s.splits[n] = split;
      const std::string lane = s.device.isCpu() ? "cpu" : "gpu";
      sink.point("time", lane, {static_cast<double>(n)}, seconds[d] * 1000.0);
      sink.point("split_" + lane, "fixed", {static_cast<double>(n)}, split.share(split.fixed));
      sink.point("split_" + lane, "memory", {static_cast<double>(n)}, split.share(split.memory));
      sink.point("split_" + lane, "arithmetic", {static_cast<double>(n)}, split.share(split.arithmetic));
      sink.row("where", {n, s.name, seconds[d] * 1000.0, rangeText(timed[d], 1e3),
                         split.fixed * 1000.0, split.memory * 1000.0, split.arithmetic * 1000.0,
                         split.bound(), split.modelled() / seconds[d]});
    }
    if (stop.stopRequested()) return;
    sink.point("speedup", "speedup", {static_cast<double>(n)}, seconds[0] / seconds[1]);
    sink.progress(static_cast<double>(i + 2), static_cast<double>(sizes.size() + 1), "n = " + std::to_string(n));
  }
  if (stop.stopRequested()) return;

  // The crossover: the smallest n from which the GPU is clearly faster at every larger size of the
  // sweep -- every batch of its calls faster than every batch of the CPU's, and the medians further
  // apart than either device's range is wide (compareBeyondSpread, repeated_timing.h), so that two
  // equal times' noise is not taken for a difference, nor two tight ranges that merely miss each other
  // for a turning point (issue 48, 4.6: "faster from n = 1024" at a 1.009x speed-up).
  auto clearlyFaster = [&](std::int64_t n) { return compareBeyondSpread(sides[1].seconds.at(n), sides[0].seconds.at(n)) == Difference::Lower; };
  auto clearlySlower = [&](std::int64_t n) { return compareBeyondSpread(sides[1].seconds.at(n), sides[0].seconds.at(n)) == Difference::Higher; };
  std::int64_t crossover = 0;
  for (auto it = sizes.rbegin(); it != sizes.rend() && clearlyFaster(*it); ++it) crossover = *it;
  auto speedup = [&](std::int64_t n) { return sides[0].splits.at(n).measured / sides[1].splits.at(n).measured; };
  for (const std::string view : {"time", "speedup"}) {
    if (crossover) sink.marker(view, {static_cast<double>(crossover)}, "crossover: the " + gpuName + " is clearly faster from n = " + std::to_string(crossover));
    sink.marker(view, {static_cast<double>(yourSize)}, "your size: " + std::to_string(yourSize));
  }

  const Split& cpuYours = sides[0].splits.at(yourSize);
  const Split& gpuYours = sides[1].splits.at(yourSize);
  sink.measurement("crossover found", crossover ? 1.0 : 0.0, "");
  if (crossover) sink.measurement("crossover size", static_cast<double>(crossover), "");  // none: no size to name
  sink.measurement("GPU speed-up at the smallest size", speedup(sizes.front()), "x");
  sink.measurement("GPU speed-up at the largest size", speedup(largest), "x");
  sink.measurement("GPU speed-up at your size", speedup(yourSize), "x");
  for (const Side& s : sides) {  // the same figures for each side, named "..., CPU" and "..., GPU"
    const std::string of = s.device.isCpu() ? ", CPU" : ", GPU";
    const Split& smallest = s.splits.at(sizes.front());
    const Split& large = s.splits.at(largest);
    sink.measurement("fixed cost per call" + of, s.fixed * 1e6, "us");
    sink.measurement("arithmetic rate" + of, s.figures.flopsPerSecond / 1e9, "GFLOP/s");
    sink.measurement("memory bandwidth" + of, s.figures.bytesPerSecond / 1e9, "GB/s");
    sink.measurement("fixed-cost share at the smallest size" + of, smallest.share(smallest.fixed), "%");
    sink.measurement("arithmetic share at the largest size" + of, large.share(large.arithmetic), "%");
    sink.measurement("fixed-cost share at the largest size" + of, large.share(large.fixed), "%");
    sink.measurement("arithmetic share of the measured time at your size" + of, s.splits.at(yourSize).arithmeticOfMeasured(), "%");
  }

  std::string summary = "At n = " + std::to_string(yourSize) + " the " + gpuName + " " +
                        comparedTimes(sides[1].seconds.at(yourSize), sides[0].seconds.at(yourSize), "the CPU") + "; its " + what + " is " + gpuYours.bound() + "-bound (arithmetic at full rate: " +
                        formatFixed(gpuYours.arithmeticOfMeasured(), 0) + "% of the measured time), the CPU's " + cpuYours.bound() +
                        "-bound. ";
  if (crossover) {
    // The spreads the claim rests on, at the crossover: the learner reads them in the table too.
    const Spread gpuAt = scaled(sides[1].seconds.at(crossover), 1e3), cpuAt = scaled(sides[0].seconds.at(crossover), 1e3);
    summary += "The " + gpuName + " is clearly faster from n = " + std::to_string(crossover) + " on: there and at every larger size " +
               "all its batches of calls beat all the CPU's, by more than either device's spread (at n = " + std::to_string(crossover) +
               ": " + spreadText(gpuAt, "ms") + " against " + spreadText(cpuAt, "ms") + ", " + fasterOrSlower(speedup(crossover)) + "; " +
               fasterOrSlower(speedup(largest)) + " at n = " + std::to_string(largest) + ").";
    if (emulated) summary += " The emulated GPU runs on your CPU: a crossover here is its thread overlapping the host's work, or the machine's noise, not a GPU's speed.";
  } else {
    const std::string atLargest = (clearlyFaster(largest) || clearlySlower(largest) ? fasterOrSlower(speedup(largest))
                                                                                    : std::string("no clear difference")) +
                                  " at n = " + std::to_string(largest);
    // Sizes where it was faster, but not from there on: said as they are, not as "at no size".
    std::string faster;
    for (const std::int64_t n : sizes)
      if (clearlyFaster(n)) faster += (faster.empty() ? "" : ", ") + std::to_string(n) + " (" + formatFixed(speedup(n), 2) + "x)";
    summary += faster.empty()
                   ? "The " + gpuName + " is clearly faster (every batch of calls faster than every one of the CPU's, by more than either's spread) at no size up to n = " +
                         std::to_string(largest) + " (" + atLargest + ")"
                   : "The " + gpuName + " was clearly faster at n = " + faster + ", but not at every larger size (" + atLargest +
                         "): no clear crossover";
    summary += emulated ? ": it runs on your CPU, so differences between the two are the machine's noise and threads, not a GPU's."
                        : ": try a larger max_size.";
  }
  sink.info(summary);
}

}  // namespace gpulab::labs
