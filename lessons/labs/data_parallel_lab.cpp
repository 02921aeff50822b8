// The "data-parallel" lab: one training run on one device, with DistributedDataParallel's scheme and
// with DataParallel's. Read it next to the PyTorch it mirrors:
//
//   # DistributedDataParallel: one process per GPU, each with a full replica of the model
//   dist.init_process_group("nccl"); rank = int(os.environ["LOCAL_RANK"]); torch.cuda.set_device(rank)
//   model = DDP(model.to(rank), device_ids=[rank])          # broadcasts rank 0's weights to all
//   for x, y in loader:                                     # a DistributedSampler: each rank its share
//       loss = F.mse_loss(model(x.to(rank)), y.to(rank))
//       opt.zero_grad(); loss.backward()                    # DDP all-reduces (averages) every gradient
//       opt.step()                                          # every replica takes the same step
//
//   # DataParallel: one process; the model lives on cuda:0
//   model = nn.DataParallel(model).to("cuda")               # every forward: copy the weights to each GPU,
//   loss = F.mse_loss(model(x), y.to("cuda:0"))             # scatter x, run, gather the outputs on cuda:0
//
// What DDP's hook does, spelled out (the lab's `all_reduce` knob turns it off):
//   for p in model.parameters(): dist.all_reduce(p.grad, op=dist.ReduceOp.AVG)
//
// With two or more GPUs and NCCL the replicas are those GPUs and the all-reduce is NCCL's
// (engine/distributed). Otherwise the replicas run one after another on one device -- the same
// arithmetic, labelled as a simulation: the averaging is a sum on that device, and the memory each
// replica would hold is measured by the allocator as that replica's share.
#include "lessons/labs/data_parallel_lab.h"

#include <algorithm>
#include <cmath>

#include "engine/autograd/grad_mode.h"
#include "engine/core/errors.h"
#include "engine/core/number_format.h"
#include "engine/data/dataset.h"
#include "engine/distributed/distributed.h"
#include "engine/runtime/device_memory.h"
#include "engine/ops/ops.h"
#include "engine/optim/optimizer.h"
#include "engine/runtime/cuda_runtime.h"
#include "engine/runtime/device_runtime.h"
#include "lessons/labs/training.h"

namespace gpulab::labs {

namespace {

constexpr std::int64_t kFeatures = 32;

// The MLP as its parameters [W1, b1, W2, b2, ...]: Linear, ReLU, ..., Linear (what a module's forward
// does with its weights; a replica is then just another list of tensors).
Tensor forward(const std::vector<Tensor>& p, Tensor x) {
  for (std::size_t i = 0; i < p.size(); i += 2) {
    x = linear(x, p[i], p[i + 1]);
    if (i + 2 < p.size()) x = relu(x);
  }
  return x;
}

// Leaf copies of `params` on `device`: a replica's own weights, as DDP's constructor broadcasts them.
std::vector<Tensor> replicaOf(const std::vector<Tensor>& params, Device device) {
  const NoGradGuard noGrad;
  std::vector<Tensor> out;
  for (const Tensor& p : params) out.push_back(p.to(device).clone().requires_grad_(true));
  return out;
}

double largestDifference(const std::vector<Tensor>& a, const std::vector<Tensor>& b) {
  const NoGradGuard noGrad;
  double d = 0;
  for (std::size_t i = 0; i < a.size(); ++i) d = std::max(d, abs(sub(a[i].to(kCPU), b[i].to(kCPU))).max().item());
  return d;
}

std::int64_t allocated(Device d) { return memory_allocated(d); }

// Replica i's rows of a batch split into equal shards (a DistributedSampler's share, DataParallel's scatter).
Tensor shardOf(const Tensor& batch, std::size_t i, std::int64_t shard) {
  const auto start = static_cast<std::int64_t>(i) * shard;
  return batch.slice(0, start, start + shard);
}

// Where the replicas live: real GPUs with NCCL between them, or one device taking turns.
struct Placement {
  std::vector<Device> devices;  // one per replica
  bool simulated = true;
};

// The three runs' shared inputs.
struct Setup {
  std::vector<Tensor> init;  // the initial weights, on the CPU
  Tensor inputs, targets;    // the whole data set, on the CPU
  std::int64_t batch = 0, steps = 0;
  double lr = 0;
  Tensor batchInputs(std::int64_t step) const { return rows(inputs, step); }
  Tensor batchTargets(std::int64_t step) const { return rows(targets, step); }
  Tensor rows(const Tensor& t, std::int64_t step) const {
    const std::int64_t batches = t.size(0) / batch;
    const std::int64_t start = (step % batches) * batch;
    return t.slice(0, start, start + batch);
  }
};

struct RunResult {
  std::vector<double> losses;                // per step
  std::vector<double> drift;                 // per step: the largest weight difference between replicas
  std::vector<std::vector<Tensor>> weights;  // each replica's at the end
  std::vector<double> replicaBytes;          // what each replica held when the last forward pass ended
};

// One device, the whole batch: the reference the data-parallel runs must reproduce.
RunResult runOneDevice(const Setup& s, Device device, const lab::StopToken& stop) {
  RunResult r;
  std::vector<Tensor> p = replicaOf(s.init, device);
  auto opt = makeOptimizer("sgd", p, s.lr, 0.9, 0.0);
  for (std::int64_t step = 0; step < s.steps && !stop.stopRequested(); ++step) {
    const Tensor x = s.batchInputs(step).to(device), y = s.batchTargets(step).to(device);
    opt->zero_grad();
    const Tensor loss = mse_loss(forward(p, x), y);
    loss.backward();
    opt->step();
    r.losses.push_back(loss.item());
  }
  r.weights.push_back(p);
  return r;
}

// DistributedDataParallel's scheme: a replica per device, each on its rows of the batch; the gradients
// averaged across replicas (all_reduce) unless `allReduce` is off; every replica steps its own weights.
RunResult runDdp(const Setup& s, const Placement& where, bool allReduce, const lab::StopToken& stop) {
  const std::size_t n = where.devices.size();
  const std::int64_t shard = s.batch / static_cast<std::int64_t>(n);
  RunResult r;
  std::vector<std::vector<Tensor>> p;
  std::vector<std::unique_ptr<optim::Optimizer>> opt;
  std::vector<double> stateBytes(n, 0.0);  // simulated: what each replica's weights, then its momentum, took
  std::vector<std::int64_t> baseline(n);     // on GPUs: what each held before the run (earlier runs' weights)
  for (std::size_t i = 0; i < n; ++i) baseline[i] = allocated(where.devices[i]);
  for (std::size_t i = 0; i < n; ++i) {
    const std::int64_t before = allocated(where.devices[i]);
    p.push_back(replicaOf(s.init, where.devices[i]));
    stateBytes[i] = static_cast<double>(allocated(where.devices[i]) - before);
    opt.push_back(makeOptimizer("sgd", p[i], s.lr, 0.9, 0.0));
  }
  r.replicaBytes.assign(n, 0.0);
  for (std::int64_t step = 0; step < s.steps && !stop.stopRequested(); ++step) {
    const Tensor x = s.batchInputs(step), y = s.batchTargets(step);
    std::vector<Tensor> losses(n);
    std::vector<double> forwardBytes(n, 0.0);
    for (std::size_t i = 0; i < n; ++i) {  // each replica's forward on its own rows (a DistributedSampler's share)
      opt[i]->zero_grad();
      const Tensor xi = shardOf(x, i, shard).to(where.devices[i]), yi = shardOf(y, i, shard).to(where.devices[i]);
      const std::int64_t before = allocated(where.devices[i]);
      losses[i] = mse_loss(forward(p[i], xi), yi);
      // Its rows (on one device they may be views of the batch: counted by their size) and the
      // activations its forward pass keeps for backward (what the allocator gave it).
      forwardBytes[i] = static_cast<double>(xi.nbytes() + yi.nbytes()) + static_cast<double>(allocated(where.devices[i]) - before);
    }
    if (step + 1 == s.steps) {
      for (std::size_t i = 0; i < n; ++i) {
        r.replicaBytes[i] = where.simulated ? stateBytes[i] + forwardBytes[i] : static_cast<double>(allocated(where.devices[i]) - baseline[i]);
      }
    }
    for (std::size_t i = 0; i < n; ++i) losses[i].backward();
    if (allReduce && n > 1) {
      for (std::size_t j = 0; j < s.init.size(); ++j) {
        std::vector<Tensor> grads;
        for (std::size_t i = 0; i < n; ++i) grads.push_back(p[i][j].grad());
        if (!where.simulated) {
          distributed::all_reduce(grads, distributed::ReduceOp::Avg);  // NCCL, every GPU at once
        } else {
          // The same average, computed where the replicas take turns: a sum, then each gets its copy.
          const NoGradGuard noGrad;
          Tensor sum = grads[0].clone();
          for (std::size_t i = 1; i < n; ++i) sum = add(sum, grads[i]);
          const Tensor mean = mul(sum, 1.0 / static_cast<double>(n));
          for (Tensor& g : grads) g.copy_(mean);
        }
      }
    }
    double loss = 0;
    for (std::size_t i = 0; i < n; ++i) {
      const std::int64_t before = allocated(where.devices[i]);
      opt[i]->step();
      if (step == 0) stateBytes[i] += static_cast<double>(allocated(where.devices[i]) - before);  // the momentum buffers, made now
      loss += losses[i].item() / static_cast<double>(n);  // equal shares: the mean over the whole batch
    }
    r.losses.push_back(loss);
    double drift = 0;
    for (std::size_t i = 1; i < n; ++i) drift = std::max(drift, largestDifference(p[0], p[i]));
    r.drift.push_back(drift);
  }
  r.weights = p;
  return r;
}

// DataParallel's scheme: the master weights on the first device; every step they are copied to each
// other device (differentiably, so the gradients flow back to the master), the batch's rows scattered,
// each replica's output gathered on the first device, where the loss, backward's sum and the optimizer
// step happen.
RunResult runDp(const Setup& s, const Placement& where, const lab::StopToken& stop) {
  const std::size_t n = where.devices.size();
  const std::int64_t shard = s.batch / static_cast<std::int64_t>(n);
  const Device first = where.devices[0];
  RunResult r;
  std::vector<std::int64_t> baseline;  // on GPUs: what each held before the run (earlier runs' weights)
  for (const Device d : where.devices) baseline.push_back(allocated(d));
  const std::int64_t beforeMaster = allocated(first);
  std::vector<Tensor> master = replicaOf(s.init, first);
  double masterBytes = static_cast<double>(allocated(first) - beforeMaster);  // then its momentum too
  auto opt = makeOptimizer("sgd", master, s.lr, 0.9, 0.0);
  r.replicaBytes.assign(n, 0.0);
  for (std::int64_t step = 0; step < s.steps && !stop.stopRequested(); ++step) {
    opt->zero_grad();
    const Tensor x = s.batchInputs(step).to(first), y = s.batchTargets(step).to(first);  // the whole batch on the first device
    const double batchBytes = static_cast<double>(x.nbytes() + y.nbytes());
    std::vector<Tensor> gathered;
    std::vector<double> forwardBytes(n, 0.0);
    double gatheredBytes = 0;
    for (std::size_t i = 0; i < n; ++i) {
      const Device d = where.devices[i];
      const std::int64_t before = allocated(d);
      std::vector<Tensor> weights;  // replicate: the master's weights copied to this device, every step
      for (const Tensor& w : master) weights.push_back(i == 0 ? w : where.simulated ? w.clone() : w.to(d));
      Tensor rows = shardOf(x, i, shard);  // scatter
      if (i > 0 && !where.simulated) rows = rows.to(d);
      const Tensor out = forward(weights, rows);
      // This step's copy of the weights and the activations kept for backward (the allocator's), and
      // the rows scattered to it (the first keeps them in the whole batch, counted below).
      forwardBytes[i] = static_cast<double>(allocated(d) - before) + (i > 0 ? static_cast<double>(rows.nbytes()) : 0.0);
      gathered.push_back(out.to(first));  // gather on the first device
      if (i > 0) gatheredBytes += static_cast<double>(out.nbytes());  // the first's own output is counted above
    }
    if (step + 1 == s.steps) {
      for (std::size_t i = 0; i < n; ++i) {
        r.replicaBytes[i] = where.simulated ? forwardBytes[i] : static_cast<double>(allocated(where.devices[i]) - baseline[i]);
      }
      // The master's weights and momentum, the whole batch and the gathered outputs: all on the first.
      if (where.simulated) r.replicaBytes[0] += masterBytes + batchBytes + gatheredBytes;
    }
    Tensor loss;  // the mean over the whole batch, on the first device
    for (std::size_t i = 0; i < n; ++i) {
      const Tensor part = mse_loss(gathered[i], shardOf(y, i, shard), Reduction::Sum);
      loss = loss.defined() ? add(loss, part) : part;
    }
    loss = mul(loss, 1.0 / static_cast<double>(s.batch));
    loss.backward();  // the replicas' gradients are summed into the master's
    const std::int64_t beforeStep = allocated(first);
    opt->step();
    if (step == 0) masterBytes += static_cast<double>(allocated(first) - beforeStep);  // the momentum buffers
    r.losses.push_back(loss.item());
  }
  r.weights.push_back(master);
  return r;
}

}  // namespace

std::vector<lab::ParamSpec> DataParallelLab::params() const {
  using namespace lab;
  return {
      intParam("replicas", 4, 1, 8, "How many GPUs (replicas) share each batch"),
      boolParam("all_reduce", false, "DDP's gradient all-reduce: average every gradient across the replicas before the step"),
      deviceParam("device", "Where a simulation runs when this machine has fewer than two GPUs with NCCL"),
      intParam("batch", 256, 8, 8192, "The global batch: each replica gets batch / replicas of its rows"),
      intParam("steps", 60, 2, 10000, "Training steps"),
      textParam("hidden", "128,128", "Hidden layer widths, comma-separated", checkHiddenWidths),
      floatParam("lr", 0.05, 1e-6, 1.0, "SGD's learning rate (momentum 0.9)"),
      intParam("seed", 0, 0, 2147483647, "Seed for the data and the initial weights"),
  };
}

std::vector<lab::MeasurementSpec> DataParallelLab::measurements() const {
  return {
      {"replicas", ""},
      {"simulated", ""},
      {"largest weight difference between DDP replicas (yours)", ""},
      {"largest weight difference between DDP replica 0 and one device", ""},
      {"largest loss difference between DataParallel and one device", ""},
      {"DataParallel memory on replica 0 over the others", "x"},
      {"DDP memory, largest replica over smallest", "x"},
      {"final loss, one device", ""},
      {"final loss, DDP (yours)", ""},
  };
}

void DataParallelLab::run(const lab::Params& p, lab::MetricSink& sink, const lab::StopToken& stop) {
  const std::int64_t requested = p.getInt("replicas");
  const bool allReduce = p.getBool("all_reduce");
  const Device device = resolveDevice(p.getString("device"));

  // Real GPUs when there are two or more and NCCL can run between them; else a simulation on `device`.
  const std::int64_t batch = p.getInt("batch");
  if (batch % requested != 0) {
    throw ValueError("batch = " + std::to_string(batch) + " does not split evenly over " + std::to_string(requested) +
                     " replicas: choose a batch that is a multiple of " + std::to_string(requested));
  }
  Placement where;
  if (cuda::isRealGpu(device) && distributed::ncclAvailable()) {
    // One replica per GPU: as many as asked for, or the most the GPUs allow that still split the batch.
    std::int64_t count = std::min<std::int64_t>(requested, cuda::deviceCount());
    while (batch % count != 0) --count;
    where.simulated = false;
    for (int i = 0; i < count; ++i) where.devices.push_back(Device(DeviceType::CUDA, i));
    if (count < requested) {
      sink.info("This machine has " + std::to_string(cuda::deviceCount()) + " GPUs: " + std::to_string(count) +
                " replicas, one per GPU (a number that splits the batch of " + std::to_string(batch) + ").");
    }
  } else {
    where.devices.assign(static_cast<std::size_t>(requested), device);
  }
  const std::int64_t n = static_cast<std::int64_t>(where.devices.size());
  announceDevice(sink, where.devices[0]);
  if (where.simulated) {
    const std::string why = distributed::ncclAvailable() ? "device is " + device.str() + ", not the GPUs"
                                                         : "this machine has no two GPUs with NCCL between them: " + distributed::ncclStatus();
    sink.warning("Simulation (" + why + "): the " +
                 std::to_string(n) + " replicas take turns on " + cuda::deviceLabel(device) +
                 ". The arithmetic is DDP's and DataParallel's, the all-reduce an average computed on that one device, and each "
                 "replica's memory what the allocator gave that replica. What it cannot show is time: real replicas run at once.");
  } else {
    sink.info("Replicas on " + std::to_string(n) + " GPUs, gradients all-reduced by " + distributed::ncclStatus() + ".");
  }

  // The data and the initial weights, shared by the three runs.
  Setup s;
  s.batch = batch;
  s.steps = p.getInt("steps");
  s.lr = p.getFloat("lr");
  const auto seed = static_cast<std::uint64_t>(p.getInt("seed"));
  const auto data = data::makeRegressionDataset(std::max<std::int64_t>(batch * 8, 2048) / batch * batch, kFeatures, 0.1, seed);
  s.inputs = data->inputs();
  s.targets = data->targets();
  Generator gen(seed);
  s.init = makeMlp(*data, parseWidths(p.getString("hidden")), 1, gen)->parameters();

  const lab::Axis stepAxis{"step", ""};
  const std::string simulatedMark = where.simulated ? " (simulated)" : "";
  sink.view({.id = "loss", .title = "Training loss: one device, DDP and DataParallel" + simulatedMark, .kind = lab::ViewKind::Line, .x = {stepAxis},
             .y = {"loss (MSE)", "", true},
             .series = {{"one", "one device, the whole batch"}, {"ddp", "DDP, " + std::to_string(n) + " replicas"},
                        {"dp", "DataParallel, " + std::to_string(n) + " replicas", lab::SeriesStyle::Dashed}},
             .note = std::string(allReduce ? "With the gradients all-reduced, DDP's loss is the one device's: the average of the replicas' "
                                             "gradients is the whole batch's gradient."
                                           : "Without the all-reduce (this run) each DDP replica steps on its own rows' gradients, so "
                                             "DDP's loss leaves the one device's.") +
                     " DataParallel computes the whole batch's loss on the first device, so its loss is the one device's."});
  sink.view({.id = "drift", .title = "How far the DDP replicas drift apart" + simulatedMark, .kind = lab::ViewKind::Line, .x = {stepAxis},
             .y = {"weight difference", ""}, .yFromZero = true,
             .series = {{"drift", std::string(allReduce ? "with" : "without") + " all_reduce"}},
             .note = "Each replica sees other rows. Without the all-reduce each follows its own gradients and the copies of the "
                     "model part ways from the first step; with it every replica takes the same step and they stay identical. "
                     "Plotted: the largest difference between any replica's weights and the first's." +
                     std::string(allReduce ? " This run all-reduces, so the line stays at 0: turn all_reduce off to see them part."
                                           : " This run does not all-reduce: the line climbs from the first step.")});
  std::vector<lab::SeriesSpec> bars = {{"ddp", "DDP"}, {"dp", "DataParallel"}};
  sink.view({.id = "memory", .title = "Memory per replica when the forward pass ends" + simulatedMark, .kind = lab::ViewKind::Bars, .y = {"memory", "bytes"},
             .yFromZero = true, .series = bars,
             .note = std::string(where.simulated ? "Simulated: what the allocator gave each replica's tensors. " : "memory_allocated() of each GPU. ") +
                     "DDP: every replica holds the whole model's weights and momentum, its rows and their activations -- the same "
                     "on each (the gradients were freed by zero_grad and come back in backward). DataParallel: the first device "
                     "holds the master weights and their momentum, the whole batch and every replica's gathered output; the others "
                     "only this step's copy of the weights, their rows and their activations."});
  sink.view({.id = "replicas", .title = "The replicas" + simulatedMark, .kind = lab::ViewKind::Table,
             .columns = {{"replica", ""}, {"device", ""}, {"rows of the batch", ""}, {"DDP memory", "bytes"}, {"DataParallel memory", "bytes"}}});

  // 1. One device, the whole batch.
  sink.progress(0, 3, "one device");
  const RunResult one = runOneDevice(s, where.devices[0], stop);
  if (stop.stopRequested()) return;
  for (std::size_t i = 0; i < one.losses.size(); ++i) sink.point("loss", "one", {static_cast<double>(i)}, one.losses[i]);
  // 2. DDP, with the all-reduce as the learner set it.
  sink.progress(1, 3, "DDP");
  const RunResult ddp = runDdp(s, where, allReduce, stop);
  if (stop.stopRequested()) return;
  for (std::size_t i = 0; i < ddp.losses.size(); ++i) {
    sink.point("loss", "ddp", {static_cast<double>(i)}, ddp.losses[i]);
    sink.point("drift", "drift", {static_cast<double>(i)}, ddp.drift[i]);
  }
  // 3. DataParallel.
  sink.progress(2, 3, "DataParallel");
  const RunResult dp = runDp(s, where, stop);
  if (stop.stopRequested()) return;
  for (std::size_t i = 0; i < dp.losses.size(); ++i) sink.point("loss", "dp", {static_cast<double>(i)}, dp.losses[i]);
  sink.progress(3, 3, "done");

  for (std::int64_t i = 0; i < n; ++i) {
    const std::string name = "replica " + std::to_string(i);
    const auto k = static_cast<std::size_t>(i);
    sink.bar("memory", "ddp", name, ddp.replicaBytes[k]);
    sink.bar("memory", "dp", name, dp.replicaBytes[k]);
    sink.row("replicas", {name, where.devices[k].str() + (where.simulated ? " (taking turns)" : ""), batch / n, static_cast<std::int64_t>(ddp.replicaBytes[k]),
                          static_cast<std::int64_t>(dp.replicaBytes[k])});
  }

  // The measurements the lesson's claims and challenge rest on.
  const double drift = ddp.drift.back();
  const double fromOne = largestDifference(ddp.weights[0], one.weights[0]);
  double dpLoss = 0;
  for (std::size_t i = 0; i < dp.losses.size(); ++i) dpLoss = std::max(dpLoss, std::abs(dp.losses[i] - one.losses[i]));
  double others = 0;
  for (std::int64_t i = 1; i < n; ++i) others += dp.replicaBytes[static_cast<std::size_t>(i)] / static_cast<double>(n - 1);
  const auto [ddpMin, ddpMax] = std::minmax_element(ddp.replicaBytes.begin(), ddp.replicaBytes.end());
  sink.measurement("replicas", static_cast<double>(n), "");
  sink.measurement("simulated", where.simulated ? 1.0 : 0.0, "");
  sink.measurement("largest weight difference between DDP replicas (yours)", drift, "");
  sink.measurement("largest weight difference between DDP replica 0 and one device", fromOne, "");
  sink.measurement("largest loss difference between DataParallel and one device", dpLoss, "");
  if (n > 1) sink.measurement("DataParallel memory on replica 0 over the others", dp.replicaBytes[0] / others, "x");
  sink.measurement("DDP memory, largest replica over smallest", *ddpMax / *ddpMin, "x");
  sink.measurement("final loss, one device", one.losses.back(), "");
  sink.measurement("final loss, DDP (yours)", ddp.losses.back(), "");

  std::string summary = n == 1 ? "One replica: DDP and DataParallel are one device with the whole batch; choose 2 or more replicas. "
                       : allReduce
                            ? "With the all-reduce the " + std::to_string(n) + " replicas stayed identical (largest difference " +
                                  formatGeneral(drift, 2) + ") and match one device trained on the whole batch to " + formatGeneral(fromOne, 2) + ". "
                            : "Without the all-reduce the " + std::to_string(n) + " replicas drifted apart: after " + std::to_string(s.steps) +
                                  " steps their weights differ by up to " + formatGeneral(drift, 3) + " -- " + std::to_string(n) +
                                  " different models. Turn all_reduce on. ";
  if (n > 1) {
    summary += "DataParallel's first replica held " + formatFixed(dp.replicaBytes[0] / others, 2) + "x the memory of each other one; DDP's replicas " +
               formatFixed(*ddpMax / *ddpMin, 2) + "x between the largest and the smallest.";
  }
  sink.info(summary);
}

}  // namespace gpulab::labs
