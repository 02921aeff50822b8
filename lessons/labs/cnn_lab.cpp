// The "cnn" lab: a convolutional network against the MLP of the training lesson. Read it next to the
// PyTorch it mirrors:
//
//   mlp = nn.Sequential(nn.Flatten(), nn.Linear(784, 256), nn.ReLU(), nn.Linear(256, 128), nn.ReLU(),
//                       nn.Linear(128, 100), nn.ReLU(), nn.Linear(100, 10))
//   cnn = nn.Sequential(nn.Conv2d(1, 32, 3, padding=1, bias=False), nn.BatchNorm2d(32), nn.ReLU(), nn.MaxPool2d(2),
//                       nn.Conv2d(32, 64, 3, padding=1, bias=False), nn.BatchNorm2d(64), nn.ReLU(), nn.MaxPool2d(2),
//                       nn.Flatten(), nn.Linear(64 * 7 * 7, 128), nn.ReLU(), nn.Linear(128, 10))
//   for model in (mlp, cnn):                      # the same seed, so the same batches in the same order
//       model.to(device)
//       optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
//       scheduler = torch.optim.lr_scheduler.CosineAnnealingLR(optimizer, T_max=epochs * len(train_loader))
//       for epoch in range(epochs):
//           model.train()
//           for x, y in train_loader:
//               x, y = x.to(device), y.to(device)
//               loss = F.cross_entropy(model(x), y)
//               optimizer.zero_grad(); loss.backward(); optimizer.step(); scheduler.step()
//           model.eval()
//           with torch.no_grad():                  # test accuracy after each epoch
//               correct = sum((model(x.to(device)).argmax(1) == y.to(device)).sum() for x, y in test_loader)
//
// A convolution slides one small filter over the whole image, so a 3 x 3 filter has 9 weights however
// large the image is; a Linear layer has a weight for every (input, output) pair. Most of the CNN's
// parameters are therefore in its classifier, not in its convolutions -- the run counts them.
#include "lessons/labs/cnn_lab.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <optional>

#include "engine/autograd/grad_mode.h"
#include "engine/core/errors.h"
#include "engine/core/number_format.h"
#include "engine/data/dataloader.h"
#include "engine/runtime/device_memory.h"
#include "engine/runtime/cuda_runtime.h"
#include "engine/runtime/device_runtime.h"
#include "lessons/labs/training.h"

namespace gpulab::labs {

namespace {

using Clock = std::chrono::steady_clock;

struct ModelSpec {
  std::string id;     // "cnn"
  std::string label;  // "CNN"
  bool convolutional = false;
};

// Parameters by the kind of layer that holds them: the point of the comparison is where they are.
struct ParameterCount {
  std::int64_t total = 0, convolution = 0, batchNorm = 0, linear = 0, firstLinear = 0;
};
ParameterCount countParameters(const nn::Sequential& model) {
  ParameterCount c;
  for (const auto& [name, child] : model.named_children()) {
    std::int64_t n = 0;
    for (const Tensor& p : child->parameters()) n += p.numel();
    c.total += n;
    if (dynamic_cast<const nn::Conv2d*>(child.get())) c.convolution += n;
    else if (dynamic_cast<const nn::BatchNorm2d*>(child.get())) c.batchNorm += n;
    else if (dynamic_cast<const nn::Linear*>(child.get())) {
      if (c.linear == 0) c.firstLinear = n;
      c.linear += n;
    }
  }
  return c;
}

struct Result {
  ParameterCount parameters;
  std::optional<double> testAccuracy;  // after the last epoch
  double trainSeconds = 0;             // all epochs, evaluation excluded
  std::int64_t epochs = 0;
  std::int64_t peakAllocated = 0;      // while training (evaluation excluded), above what was allocated before the model
  double multiplyAdds = 0;             // one example's forward pass
  double epochSeconds() const { return epochs > 0 ? trainSeconds / static_cast<double>(epochs) : 0.0; }
};

// Test accuracy under no-grad, one .item() at the end.
double testAccuracy(nn::Module& model, data::DataLoader& loader, Device device, const lab::StopToken& stop, bool& stopped) {
  model.eval();
  NoGradGuard noGrad;
  Tensor correct = zeros({}, {.dtype = kInt64, .device = device});
  std::int64_t count = 0;
  for (const data::Batch& batch : loader) {
    if (stop.stopRequested()) {
      stopped = true;
      break;
    }
    Tensor x = batch.inputs.to(device), y = batch.targets.to(device);
    correct = correct + (model(x).argmax(1) == y).sum();
    count += batch.inputs.size(0);
  }
  model.train();
  return count > 0 ? correct.item() / static_cast<double>(count) : 0.0;
}

std::string thousands(std::int64_t n) { return formatNumber(n); }

// The multiply-adds of one example's forward pass, counted by running it layer by layer: a convolution
// does (C/groups * R * S) of them for every output value, a Linear layer one per weight.
double multiplyAddsPerExample(nn::Sequential& model, const Tensor& example) {
  NoGradGuard noGrad;
  model.eval();  // batch norm: no running statistics moved by this pass
  double macs = 0;
  Tensor x = example;
  for (const auto& [name, child] : model.named_children()) {
    Tensor y = child->forward(x);
    if (const auto* conv = dynamic_cast<const nn::Conv2d*>(child.get())) {
      macs += static_cast<double>(y.numel()) * static_cast<double>(conv->weight.numel() / conv->out_channels);
    } else if (const auto* linear = dynamic_cast<const nn::Linear*>(child.get())) {
      macs += static_cast<double>(linear->weight.numel());
    }
    x = y;
  }
  model.train();
  return macs;
}

}  // namespace

std::vector<lab::ParamSpec> CnnLab::params() const {
  using namespace lab;
  return {
      textParam("mlp_hidden", "256,128,100", "The MLP's hidden layer widths (the training lesson's model)", checkHiddenWidths),
      textParam("cnn_hidden", "128",
                "The CNN's classifier: the hidden widths of the Linear layers after its two convolution blocks (64 x 7 x 7 = "
                "3136 features in)",
                checkHiddenWidths),
      choiceParam("optimizer", "adam", {"sgd", "adam", "adamw"}, "Optimizer (the same for both models)"),
      floatParam("lr", 1e-3, 1e-7, 10.0, "Learning rate"),
      lrScheduleParam(),
      floatParam("momentum", 0.9, 0.0, 0.999, "SGD momentum"),
      intParam("batch_size", 64, 1, 65536, "Examples per step"),
      intParam("epochs", 2, 1, 1000, "Epochs per model"),
      intParam("train_subset", 0, 0, 100000000, "Use only the first N training examples (0: all 60,000)"),
      intParam("test_subset", 0, 0, 100000000, "Evaluate on the first N test examples only (0: all 10,000)"),
      deviceParam("device", "The device to train on"),
      intParam("seed", 0, 0, 2147483647, "Seed for initialisation and shuffling (the same for both models)"),
      intParam("log_every", 50, 1, 100000, "Report the loss every N steps"),
  };
}

std::vector<lab::MeasurementSpec> CnnLab::measurements() const {
  return {
      {"CNN parameters vs MLP", "x"},
      {"CNN epoch time vs MLP", "x"},
      {"CNN peak memory vs MLP", "x"},
      {"CNN test accuracy over MLP", "points"},
      {"*: parameters", ""},
      {"*: test accuracy", ""},
      {"*: epoch time", "s"},
      {"*: peak memory", "bytes"},
      {"*: multiply-adds per image", ""},
  };
}

void CnnLab::run(const lab::Params& p, lab::MetricSink& sink, const lab::StopToken& stop) {
  // 1. The device, the data and the two models' shapes.
  const Device device = resolveDevice(p.getString("device"));
  announceDevice(sink, device);
  const auto seed = static_cast<std::uint64_t>(p.getInt("seed"));
  const std::shared_ptr<data::TensorDataset> trainSet = firstExamples(data::loadFashionMnist(true), p.getInt("train_subset"));
  const std::shared_ptr<data::TensorDataset> testSet = firstExamples(data::loadFashionMnist(false), p.getInt("test_subset"));
  requireTrainingMemory(device.isCpu(), *trainSet, false, parseWidths(p.getString("mlp_hidden")), 10, p.getInt("batch_size"), "mlp_hidden");
  requireTrainingMemory(device.isCpu(), *trainSet, true, parseWidths(p.getString("cnn_hidden")), 10, p.getInt("batch_size"), "cnn_hidden");
  const std::int64_t batchSize = std::min(p.getInt("batch_size"), trainSet->size());
  const std::int64_t epochs = p.getInt("epochs"), logEvery = p.getInt("log_every");
  const std::vector<ModelSpec> models{{"mlp", "MLP", false}, {"cnn", "CNN", true}};
  const std::int64_t stepsPerEpoch = trainSet->size() / batchSize;  // drop_last

  // 2. The views: each model is a series of the same plots.
  std::vector<lab::SeriesSpec> series;
  for (const ModelSpec& m : models) series.push_back({m.id, m.label});
  sink.view({.id = "loss", .title = "Training loss", .kind = lab::ViewKind::Line, .x = {{"step", ""}, {"time", "s"}},
             .y = {"loss", ""}, .series = series,
             .note = "The mean loss of the last log_every steps. Against time, the CNN's curve is stretched: each of its steps "
                     "costs more."});
  sink.view({.id = "accuracy", .title = "Test accuracy after each epoch", .kind = lab::ViewKind::Line, .x = {{"epoch", ""}},
             .y = {"test accuracy", ""}, .series = series});
  sink.view({.id = "models", .title = "Cost and result of each model", .kind = lab::ViewKind::Table,
             .columns = {{"model", ""}, {"parameters", ""}, {"in convolutions", ""}, {"in batch norm", ""}, {"in Linear", ""},
                         {"multiply-adds per image", ""}, {"test accuracy", ""}, {"epoch", "s"}, {"peak memory", "bytes"}},
             .note = std::string(cuda::isEmulatedGpu(device) ? "Timed on your CPU (the emulated GPU computes there). " : "") +
                     "multiply-adds: one image's forward pass. epoch: the mean training time of an epoch on " + device.str() +
                     ", evaluation excluded. peak memory: the most the model, its gradients, Adam's state, the batch and the "
                     "activations of a step held at once while training, above what was allocated before the model was built "
                     "(the data set, on the CPU)."});

  // 3. Each model in turn, from the same seed: the same shuffles, so the same batches.
  std::vector<Result> results;
  const auto runStart = Clock::now();
  const std::int64_t totalSteps = static_cast<std::int64_t>(models.size()) * epochs * stepsPerEpoch;
  std::int64_t stepsDone = 0;
  for (const ModelSpec& m : models) {
    if (stop.stopRequested()) break;
    Result r;
    synchronizeDevice(device);
    const std::int64_t baseline = memory_allocated(device);  // the data set on the CPU; what the MLP left behind: nothing
    Generator gen(seed);
    std::shared_ptr<nn::Sequential> model =
        m.convolutional ? makeCnn(*trainSet, parseWidths(p.getString("cnn_hidden")), 10, gen)
                        : makeMlp(*trainSet, parseWidths(p.getString("mlp_hidden")), 10, gen);
    {
      MemoryCategoryScope tag(MemoryCategory::Parameter);
      model->to(device);
    }
    r.parameters = countParameters(*model);
    r.multiplyAdds = multiplyAddsPerExample(*model, testSet->inputs().slice(0, 0, 1).to(device));
    sink.info("Training the " + m.label + ": " + thousands(r.parameters.total) + " parameters.");
    auto optimizer = makeOptimizer(p.getString("optimizer"), model->parameters(), p.getFloat("lr"), p.getFloat("momentum"), 0.0);
    data::DataLoader trainLoader(trainSet, {.batch_size = batchSize, .shuffle = true, .drop_last = true, .seed = seed});
    data::DataLoader testLoader(testSet, {.batch_size = 1000});
    LrSchedule schedule(p.getString("lr_schedule"), p.getFloat("lr"), epochs * stepsPerEpoch);
    synchronizeDevice(device);
    reset_peak_memory_stats(device);
    std::int64_t step = 0;
    bool stopped = false;
    for (std::int64_t epoch = 1; epoch <= epochs && !stopped; ++epoch) {
      // 3a. One epoch of training. The loss is summed on the device: one .item() per report.
      model->train();
      Tensor windowLoss = zeros({}, {.device = device});
      std::int64_t windowSteps = 0;
      synchronizeDevice(device);
      double reported = 0;  // the training seconds not yet added to r.trainSeconds: reports are not timed
      auto lap = Clock::now();
      for (const data::Batch& batch : trainLoader) {
        if (stop.stopRequested()) {
          stopped = true;
          break;
        }
        Tensor x, y;
        {
          MemoryCategoryScope tag(MemoryCategory::InputBatch);
          x = batch.inputs.to(device);
          y = batch.targets.to(device);
        }
        Tensor loss = taskLoss(true, (*model)(x), y);
        optimizer->zero_grad();
        loss.backward();
        optimizer->step();
        schedule.step(*optimizer);
        {
          NoGradGuard noGrad;
          windowLoss = windowLoss + loss.detach();
        }
        ++step;
        ++windowSteps;
        ++stepsDone;
        if (step % logEvery != 0 && step != epoch * stepsPerEpoch) continue;
        const double mean = windowLoss.item() / static_cast<double>(windowSteps);  // waits for the device
        reported += std::chrono::duration<double>(Clock::now() - lap).count();
        sink.point("loss", m.id, {static_cast<double>(step), r.trainSeconds + reported}, mean);
        sink.progress(static_cast<double>(stepsDone), static_cast<double>(totalSteps),
                      m.label + ": epoch " + std::to_string(epoch) + ", step " + std::to_string(step) + ", loss " + formatFixed(mean, 4));
        windowLoss = zeros({}, {.device = device});
        windowSteps = 0;
        lap = Clock::now();
      }
      synchronizeDevice(device);
      reported += std::chrono::duration<double>(Clock::now() - lap).count();
      r.trainSeconds += reported;
      if (stopped) break;
      ++r.epochs;
      r.peakAllocated = std::max(r.peakAllocated, max_memory_allocated(device) - baseline);

      // 3b. Test accuracy after the epoch (not timed, not in the training peak).
      const double accuracy = testAccuracy(*model, testLoader, device, stop, stopped);
      if (stopped) break;
      r.testAccuracy = accuracy;
      sink.point("accuracy", m.id, {static_cast<double>(epoch)}, accuracy);
      sink.record("epoch", {{"model", m.id}, {"epoch", epoch}, {"test_accuracy", accuracy}, {"train_seconds", r.trainSeconds}});
      reset_peak_memory_stats(device);
    }
    if (stopped || stop.stopRequested()) break;
    sink.row("models", {m.label, r.parameters.total, r.parameters.convolution, r.parameters.batchNorm, r.parameters.linear,
                        r.multiplyAdds, r.testAccuracy ? lab::Value(*r.testAccuracy) : lab::Value(std::string("-")),
                        r.epochSeconds(), r.peakAllocated});
    results.push_back(r);
  }
  if (results.size() < models.size()) {
    sink.info("Stopped after " + formatFixed(secondsSince(runStart), 1) + " s.");
    return;
  }

  // 4. The measurements the lesson's challenge reads, each model's and the CNN against the MLP.
  for (std::size_t i = 0; i < models.size(); ++i) {
    const Result& r = results[i];
    const std::string name = models[i].label + ": ";
    sink.measurement(name + "parameters", static_cast<double>(r.parameters.total), "");
    if (r.testAccuracy) sink.measurement(name + "test accuracy", *r.testAccuracy, "");
    sink.measurement(name + "epoch time", r.epochSeconds(), "s");
    sink.measurement(name + "peak memory", static_cast<double>(r.peakAllocated), "bytes");
    sink.measurement(name + "multiply-adds per image", r.multiplyAdds, "");
    sink.record("model", {{"model", models[i].id}, {"parameters", r.parameters.total}, {"convolution_parameters", r.parameters.convolution},
                          {"linear_parameters", r.parameters.linear}, {"test_accuracy", r.testAccuracy ? *r.testAccuracy : -1.0},
                          {"epoch_s", r.epochSeconds()}, {"peak_allocated_bytes", r.peakAllocated}});
  }
  const Result &mlp = results[0], &cnn = results[1];
  const double paramRatio = static_cast<double>(cnn.parameters.total) / static_cast<double>(mlp.parameters.total);
  sink.measurement("CNN parameters vs MLP", paramRatio, "x");
  sink.measurement("CNN epoch time vs MLP", cnn.epochSeconds() / mlp.epochSeconds(), "x");
  sink.measurement("CNN peak memory vs MLP", static_cast<double>(cnn.peakAllocated) / static_cast<double>(mlp.peakAllocated), "x");
  if (mlp.testAccuracy && cnn.testAccuracy) {
    const double gain = 100.0 * (*cnn.testAccuracy - *mlp.testAccuracy);
    sink.measurement("CNN test accuracy over MLP", gain, "points");

    // 5. What this run measured, in words.
    sink.info("The CNN reached " + formatFixed(100 * *cnn.testAccuracy, 2) + "% test accuracy against the MLP's " +
              formatFixed(100 * *mlp.testAccuracy, 2) + "% (" + (gain >= 0 ? "+" : "") + formatFixed(gain, 2) + " points) with " +
              formatFixed(paramRatio, 2) + "x the MLP's parameters.");
  }
  sink.info("Where the CNN's " + thousands(cnn.parameters.total) + " parameters are: " + thousands(cnn.parameters.convolution) +
            " in its two convolutions (a 3 x 3 filter has 9 weights per input channel, however large the image), " +
            thousands(cnn.parameters.batchNorm) + " in batch norm, and " + thousands(cnn.parameters.linear) +
            " in its Linear layers -- " + thousands(cnn.parameters.firstLinear) + " in the first alone (3136 features x its width, "
            "plus a bias: 3137 parameters per unit of cnn_hidden's first width). To shrink the CNN, shrink its classifier.");
  const double timeRatio = cnn.epochSeconds() / mlp.epochSeconds();
  sink.info("An epoch of the CNN took " + formatFixed(timeRatio, 1) + "x the MLP's on " + cuda::deviceLabel(device) +
            ": a convolution reuses each weight at every position of the image, so it does far more arithmetic per parameter "
            "(the CNN's forward pass is " + formatGeneral(cnn.multiplyAdds / 1e6, 3) + " million multiply-adds per image, the MLP's " +
            formatGeneral(mlp.multiplyAdds / 1e6, 3) + " million)." +
            (cuda::isRealGpu(device)
                 ? " On a GPU, cuDNN runs the convolutions; the next runs show what it chose."
                 : " On a GPU that arithmetic is what cuDNN's convolution kernels and tensor cores are built for."));
  sink.record("done", {{"seconds", secondsSince(runStart)}, {"device", device.str()}});
}

}  // namespace gpulab::labs
