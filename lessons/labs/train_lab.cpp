// The "train" lab. Read it next to the PyTorch loop it mirrors:
//
//   device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
//   model = nn.Sequential(nn.Linear(16, 64), nn.ReLU(), nn.Linear(64, 1)).to(device)
//   optimizer = optim.Adam(model.parameters(), lr=1e-3)
//   for epoch in range(epochs):
//       model.train()
//       for x, y in loader:
//           x, y = x.to(device, non_blocking=True), y.to(device, non_blocking=True)
//           loss = loss_fn(model(x), y)
//           optimizer.zero_grad(); loss.backward(); optimizer.step()
//       model.eval()
//       with torch.no_grad(): ...evaluate...
#include "lessons/labs/train_lab.h"

#include "lessons/labs/training.h"

#include <chrono>
#include <optional>
#include <sstream>

#include "engine/autograd/grad_mode.h"
#include "engine/memory/memory.h"
#include "engine/core/errors.h"
#include "engine/data/dataloader.h"
#include "engine/nn/layers.h"
#include "engine/optim/optimizer.h"
#include "engine/runtime/cuda_runtime.h"

namespace gpulab::labs {


std::vector<lab::ParamSpec> TrainLab::params() const {
  using namespace lab;
  return {
      choiceParam("dataset", "regression", {"regression", "fashion-mnist"}, "Data set: the synthetic regression task or Fashion-MNIST"),
      choiceParam("model", "mlp", {"mlp"}, "Model architecture"),
      textParam("hidden", "64", "Hidden layer widths, comma-separated (e.g. 256,128,100)", checkHiddenWidths),
      choiceParam("optimizer", "adam", {"sgd", "adam", "adamw"}, "Optimizer"),
      floatParam("lr", 1e-3, 1e-7, 10.0, "Learning rate"),
      floatParam("momentum", 0.9, 0.0, 0.999, "SGD momentum"),
      floatParam("weight_decay", 0.0, 0.0, 1.0, "Weight decay (L2 for SGD/Adam, decoupled for AdamW)"),
      intParam("batch_size", 64, 1, 65536, "Examples per forward/backward pass (a micro-batch when accumulating)"),
      intParam("accumulate", 1, 1, 1024, "Micro-batches whose gradients add up before each optimizer step"),
      intParam("epochs", 3, 1, 1000, "Passes over the training set"),
      textParam("device", "auto", "auto (GPU if usable), cpu, cuda or cuda:N", checkDeviceString),
      intParam("seed", 0, 0, 2147483647, "Seed for data, initialisation and shuffling"),
      intParam("workers", 0, 0, 16, "DataLoader worker threads that prefetch batches"),
      boolParam("pin_memory", false, "Page-locked batch buffers and asynchronous copies to the GPU"),
      intParam("samples", 1024, 16, 10000000, "Training examples of the regression task"),
      intParam("train_subset", 0, 0, 100000000, "Use only the first N training examples (0: all)"),
      intParam("log_every", 10, 1, 100000, "Report a step metric every N steps (and at each epoch end)"),
  };
}

namespace {

using Clock = std::chrono::steady_clock;
double secondsSince(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

std::shared_ptr<data::TensorDataset> firstN(const std::shared_ptr<data::TensorDataset>& ds, std::int64_t n) {
  if (n <= 0 || n >= ds->size()) return ds;
  return std::make_shared<data::TensorDataset>(ds->inputs().slice(0, 0, n), ds->targets().slice(0, 0, n));
}

}  // namespace

void TrainLab::run(const lab::Params& p, lab::MetricSink& sink, const lab::StopToken& stop) {
  // 1. The device: the GPU when one is usable, else the CPU -- and say which, and why.
  const Device device = resolveDevice(p.getString("device"));
  const auto cudaInfo = cuda::availability();
  if (device.isCuda()) {
    sink.onMessage(lab::MessageKind::Info, "Training on " + device.str() + " (" +
                                               cudaInfo.devices[static_cast<std::size_t>(device.index())].name + ")");
  } else {
    sink.onMessage(lab::MessageKind::Info, "Training on cpu" + (cudaInfo.usable ? std::string() : " (no usable GPU: " + cudaInfo.reason + ")"));
  }
  const auto seed = static_cast<std::uint64_t>(p.getInt("seed"));
  Generator gen(seed);

  // 2. The data: training and held-out sets, on the CPU; batches move to the device as they are used.
  const bool classification = p.getString("dataset") == "fashion-mnist";
  std::shared_ptr<data::TensorDataset> trainSet, testSet;
  if (classification) {
    trainSet = data::loadFashionMnist(true);
    testSet = data::loadFashionMnist(false);
  } else {
    trainSet = data::makeRegressionDataset(p.getInt("samples"), 16, 0.1, seed);
    testSet = data::makeRegressionDataset(256, 16, 0.1, seed + 1);
  }
  trainSet = firstN(trainSet, p.getInt("train_subset"));
  // An empty set would train for 0 steps and "succeed", or evaluate to 0/0.
  if (trainSet->size() == 0 || testSet->size() == 0) {
    throw ValueError(std::string("the ") + (trainSet->size() == 0 ? "training" : "test") + " set is empty: nothing to " +
                     (trainSet->size() == 0 ? "train on" : "evaluate"));
  }
  const bool pin = p.getBool("pin_memory");
  if (pin && !cuda::isAvailable()) sink.onMessage(lab::MessageKind::Warning, "pin_memory is set but no GPU is usable: batches stay in pageable memory");
  data::DataLoader trainLoader(trainSet, {.batch_size = p.getInt("batch_size"), .shuffle = true, .drop_last = false,
                                          .num_workers = static_cast<int>(p.getInt("workers")), .pin_memory = pin, .seed = seed});
  data::DataLoader testLoader(testSet, {.batch_size = 1024, .num_workers = 0, .pin_memory = pin});

  // 3. The model, moved to the device once.
  auto model = makeMlp(*trainSet, parseWidths(p.getString("hidden")), classification ? 10 : 1, gen);
  {
    MemoryCategoryScope tag(MemoryCategory::Parameter);
    model->to(device);
  }
  sink.onMessage(lab::MessageKind::Info, model->repr() + "\n" + std::to_string(model->parameter_count()) + " parameters");

  // 4. The optimizer.
  auto optimizer = makeOptimizer(p.getString("optimizer"), model->parameters(), p.getFloat("lr"), p.getFloat("momentum"),
                                 p.getFloat("weight_decay"));
  const int accumulate = static_cast<int>(p.getInt("accumulate"));

  reset_peak_memory_stats(device);
  sink.onMeasurement({"device capacity", static_cast<double>(mem_get_info(device).second), "bytes"});
  lab::RunSummary summary;
  summary.device = device.str();
  const std::int64_t logEvery = p.getInt("log_every");
  const int epochs = static_cast<int>(p.getInt("epochs"));
  double trainSeconds = 0;

  for (int epoch = 1; epoch <= epochs && !stop.stopRequested(); ++epoch) {
    // 5. Train. Losses are summed on the device and read back only when reported, because .item()
    //    waits for the GPU.
    model->train();
    const auto epochStart = Clock::now();
    auto windowStart = epochStart;
    Tensor windowLoss = zeros({}, {.device = device}), epochLoss = zeros({}, {.device = device});
    std::int64_t windowSteps = 0, windowSamples = 0, epochSteps = 0;
    std::int64_t stepInEpoch = 0, microBatches = 0, groupSamples = 0;
    // Optimizer steps per epoch: the last group may hold fewer than `accumulate` micro-batches.
    const std::int64_t batchesPerEpoch = trainLoader.size();
    const std::int64_t stepsPerEpoch = (batchesPerEpoch + accumulate - 1) / accumulate;
    Tensor groupLoss = zeros({}, {.device = device});
    for (const data::Batch& batch : trainLoader) {
      if (stop.stopRequested()) {
        summary.stopped = true;
        break;
      }
      // 5a. One micro-batch: forward and backward; gradients add up over `accumulate` of them.
      setMemoryStep(summary.steps + 1);
      Tensor loss = accumulateGradients(*model, classification, batch, device, accumulate, pin);
      ++microBatches;
      groupSamples += batch.inputs.size(0);
      {
        NoGradGuard noGrad;
        groupLoss = groupLoss + loss;
      }
      const std::int64_t inGroup = (microBatches - 1) % accumulate + 1;
      if (inGroup < accumulate && microBatches < batchesPerEpoch) continue;

      // 5b. The optimizer step, then the gradients are freed for the next group.
      optimizer->step();
      optimizer->zero_grad();
      {
        NoGradGuard noGrad;
        windowLoss = windowLoss + groupLoss * (1.0 / static_cast<double>(inGroup));
        groupLoss = zeros({}, {.device = device});
      }
      ++windowSteps;
      ++epochSteps;
      ++stepInEpoch;
      ++summary.steps;
      windowSamples += groupSamples;
      groupSamples = 0;
      if (summary.steps % logEvery == 0 || stepInEpoch == stepsPerEpoch) {
        const double windowSum = windowLoss.item();  // synchronises with the device
        const double window = secondsSince(windowStart);
        const MemoryStats ms = memory_stats(device);
        lab::StepMetrics m{epoch, summary.steps, windowSum / static_cast<double>(windowSteps),
                           window > 0 ? static_cast<double>(windowSamples) / window : 0.0, ms.allocated_bytes.current,
                           ms.reserved_bytes.current, trainSeconds + secondsSince(epochStart), std::nullopt};
        if (device.isCuda()) m.driver_used_bytes = driver_memory_info(device).process_used;
        sink.onStep(m);
        NoGradGuard noGrad;
        epochLoss = epochLoss + windowLoss;
        windowLoss = zeros({}, {.device = device});
        windowSteps = windowSamples = 0;
        windowStart = Clock::now();
      }
    }
    if (windowSteps > 0) {
      NoGradGuard noGrad;
      epochLoss = epochLoss + windowLoss;
    }
    trainSeconds += secondsSince(epochStart);
    if (epochSteps == 0 || summary.stopped) break;  // Stop means stop: no evaluation pass after it

    // 6. Evaluate under no-grad: no graph is recorded, so activations are freed as soon as possible.
    model->eval();
    double evalSum = 0;
    std::int64_t evalCount = 0, correct = 0;
    {
      NoGradGuard noGrad;
      Tensor lossSum = zeros({}, {.device = device});
      Tensor correctSum = zeros({}, {.dtype = kInt64, .device = device});
      for (const data::Batch& batch : testLoader) {
        if (stop.stopRequested()) {  // a batch at a time here too: evaluation can be long
          summary.stopped = true;
          break;
        }
        Tensor x = batch.inputs.to(device, pin), y = batch.targets.to(device, pin);
        Tensor out = (*model)(x);
        lossSum = lossSum + (classification ? cross_entropy(out, y, Reduction::Sum) : mse_loss(out, y, Reduction::Sum));
        if (classification) correctSum = correctSum + (out.argmax(1) == y).sum();
        evalCount += batch.inputs.size(0);
      }
      evalSum = lossSum.item();
      correct = static_cast<std::int64_t>(correctSum.item());
    }
    if (summary.stopped) break;  // no metrics from a partial evaluation
    // MSE with Reduction::Sum sums over every output element; regression has one output per example.
    lab::EpochMetrics em{epoch, summary.steps, epochLoss.item() / static_cast<double>(epochSteps),
                         evalSum / static_cast<double>(evalCount), {}, 0};
    if (classification) em.test_accuracy = static_cast<double>(correct) / static_cast<double>(evalCount);
    em.seconds = secondsSince(epochStart);
    sink.onEpoch(em);
    summary.train_loss = em.train_loss;
    summary.eval_loss = em.eval_loss;
    summary.test_accuracy = em.test_accuracy;
  }
  setMemoryStep(0);
  const MemoryStats ms = memory_stats(device);
  summary.peak_allocated_bytes = ms.allocated_bytes.peak;
  summary.peak_reserved_bytes = ms.reserved_bytes.peak;

  // 7. The claim "no_grad saves memory", measured here: the peak of one evaluation batch with the
  //    graph recorded, and under no-grad.
  if (!summary.stopped && !stop.stopRequested()) {
    model->eval();
    const data::Batch batch = *testLoader.begin();
    Tensor x = batch.inputs.to(device);
    auto evalPeak = [&](bool recordGraph) {
      const std::int64_t base = memory_allocated(device);
      reset_peak_memory_stats(device);
      {
        std::optional<NoGradGuard> noGrad;
        if (!recordGraph) noGrad.emplace();
        Tensor out = (*model)(x);
      }
      return static_cast<double>(max_memory_allocated(device) - base);
    };
    const double withGraph = evalPeak(true), withoutGraph = evalPeak(false);
    sink.onMeasurement({"evaluation peak with the graph recorded", withGraph, "bytes"});
    sink.onMeasurement({"evaluation peak under no-grad", withoutGraph, "bytes"});
  }
  summary.stopped = summary.stopped || stop.stopRequested();
  summary.seconds = trainSeconds;
  sink.onDone(summary);
}

}  // namespace gpulab::labs
