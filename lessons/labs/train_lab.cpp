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
//
// With `amp` (mixed precision) the forward pass and the loss run under autocast and, for float16, the
// backward goes through a GradScaler (PyTorch's recipe; scaler = GradScaler(enabled=...) is a no-op when off):
//
//           with torch.autocast(device_type=device.type, dtype=torch.float16):
//               loss = loss_fn(model(x), y)
//           scaler.scale(loss).backward(); scaler.step(optimizer); scaler.update()
//
// With `model` cnn the network is the classic two-block CNN (lessons/labs/training.h, makeCnn):
//
//   model = nn.Sequential(nn.Conv2d(1, 32, 3, padding=1, bias=False), nn.BatchNorm2d(32), nn.ReLU(), nn.MaxPool2d(2),
//                         nn.Conv2d(32, 64, 3, padding=1, bias=False), nn.BatchNorm2d(64), nn.ReLU(), nn.MaxPool2d(2),
//                         nn.Flatten(), nn.Linear(64 * 7 * 7, 128), nn.ReLU(), nn.Linear(128, 10))
//   torch.backends.cudnn.benchmark = cudnn_benchmark; torch.backends.cudnn.deterministic = deterministic
//
// With cuda_graph the whole step is captured once in a CUDA graph and replayed for every batch
// (training.h, GraphedStep; optimizer = Adam(..., capturable=True), loader with drop_last=True):
//
//   static_x, static_y = first batch; warm up 3 steps on a side stream
//   g = torch.cuda.CUDAGraph()
//   optimizer.zero_grad(set_to_none=True)
//   with torch.cuda.graph(g):
//       static_loss = loss_fn(model(static_x), static_y); static_loss.backward(); optimizer.step()
//   for x, y in loader:
//       static_x.copy_(x); static_y.copy_(y); g.replay()
//
// With lr_schedule cosine: scheduler = CosineAnnealingLR(optimizer, T_max=epochs * len(loader)), and
// scheduler.step() after every optimizer.step().
//
// Five switches undo one good habit each, so that the learner meets the real failure: move_model and
// move_batch (the device-mismatch error from the engine's own check), zero_grad (gradients pile up),
// eval_no_grad (evaluation records a graph: higher peak, measured) and detach_loss (the running loss
// keeps every step's graph alive: memory measured).
#include "lessons/labs/train_lab.h"

#include "lessons/labs/training.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <optional>
#include <sstream>

#include "engine/amp/autocast.h"
#include "engine/amp/grad_scaler.h"
#include "engine/autograd/grad_mode.h"
#include <cctype>

#include "engine/memory/memory.h"
#include "engine/core/errors.h"
#include "engine/core/number_format.h"
#include "engine/data/dataloader.h"
#include "engine/nn/layers.h"
#include "engine/optim/optimizer.h"
#include "engine/runtime/cuda_runtime.h"
#include "engine/runtime/emulated_gpu.h"

namespace gpulab::labs {

namespace {

// The `amp` parameter: none, or the dtype autocast computes in ("fp16", "bf16"; PyTorch's spellings
// float16/half, bfloat16 too, in any case).
std::optional<DType> ampDtype(std::string text) {
  for (char& c : text) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  if (text == "none") return std::nullopt;
  constexpr const char* kExpected = "expected none, fp16 or bf16 (autocast computes in float16 or bfloat16; fp32 is none)";
  DType d;
  try {
    d = parseDType(text);
  } catch (const ValueError&) {
    throw ValueError("unknown precision '" + text + "': " + kExpected);
  }
  if (d == kFloat32) return std::nullopt;  // "fp32": no autocast, as "none"
  if (!isReducedPrecision(d)) throw ValueError("autocast cannot compute in " + dtypeName(d) + ": " + kExpected);
  return d;
}

// The `amp` setting as the run reports it, whatever spelling it was given in: none, fp16 or bf16.
std::string ampName(const std::string& text) {
  const std::optional<DType> d = ampDtype(text);
  return !d ? "none" : *d == kFloat16 ? "fp16" : "bf16";
}

lab::ParamSpec ampParam() {
  lab::ParamSpec spec = lab::textParam("amp", "none", "Mixed precision: none (float32), fp16 or bf16 (autocast's dtype)",
                                       [](const std::string& text) { (void)ampDtype(text); });
  spec.suggestions = {"none", "fp16", "bf16"};
  spec.suggestionLabels = {"none (float32)", "fp16 (autocast float16)", "bf16 (autocast bfloat16)"};
  return spec;
}

}  // namespace

std::vector<lab::ParamSpec> TrainLab::params() const {
  using namespace lab;
  return {
      choiceParam("dataset", "regression", {"regression", "fashion-mnist"}, "Data set: the synthetic regression task or Fashion-MNIST"),
      choiceParam("model", "mlp", {"mlp", "cnn"}, "Model architecture: mlp (Linear, ReLU, ...) or cnn (two Conv2d+BatchNorm2d+ReLU+MaxPool2d blocks, then the classifier; Fashion-MNIST only)"),
      textParam("hidden", "64", "Hidden layer widths, comma-separated (e.g. 256,128,100); with the cnn, those of its classifier", checkHiddenWidths),
      choiceParam("optimizer", "adam", {"sgd", "adam", "adamw"}, "Optimizer"),
      floatParam("lr", 1e-3, 1e-7, 10.0, "Learning rate"),
      lrScheduleParam(),
      floatParam("momentum", 0.9, 0.0, 0.999, "SGD momentum"),
      floatParam("weight_decay", 0.0, 0.0, 1.0, "Weight decay (L2 for SGD/Adam, decoupled for AdamW)"),
      intParam("batch_size", 64, 1, 65536, "Examples per forward/backward pass (a micro-batch when accumulating)"),
      intParam("accumulate", 1, 1, 1024, "Micro-batches whose gradients add up before each optimizer step"),
      intParam("epochs", 3, 1, 1000, "Passes over the training set"),
      deviceParam("device", "The device to train on"),
      intParam("seed", 0, 0, 2147483647, "Seed for data, initialisation and shuffling"),
      intParam("workers", 0, 0, 16, "DataLoader worker threads that prefetch batches"),
      boolParam("pin_memory", false, "Page-locked batch buffers and asynchronous copies to the GPU"),
      intParam("samples", 1024, 16, 10000000, "Training examples of the regression task"),
      intParam("train_subset", 0, 0, 100000000, "Use only the first N training examples (0: all)"),
      intParam("log_every", 10, 1, 100000, "Report a step metric every N steps (and at each epoch end)"),
      intParam("checkpoint_segments", 0, 0, 64, "Activation checkpointing: cut the hidden layers into N segments whose activations are recomputed in backward instead of stored (0: off)"),
      intParam("memory_cap_mb", 0, 0, 1 << 24, "Cap this run's memory on the device at N MiB, with set_per_process_memory_fraction(N MiB / capacity) (0: no cap)"),
      ampParam(),
      boolParam("grad_scaler", true, "With amp fp16: scale the loss with a GradScaler (skips steps whose gradients overflow); --no-grad-scaler turns it off. bfloat16 needs none"),
      boolParam("cuda_graph", false, "torch.cuda.graph: capture the whole training step (forward, backward, optimizer) once in a CUDA graph and "
                "replay it for every batch -- one launch a step instead of one per kernel (a GPU, real or emulated; Adam capturable)"),
      boolParam("tf32", false, "torch.backends.cuda.matmul.allow_tf32: float32 matrix products on TF32 tensor cores (NVIDIA Ampere and newer)"),
      boolParam("cudnn_benchmark", false, "torch.backends.cudnn.benchmark: time cuDNN's convolution algorithms once per shape and keep the fastest (CUDA only; off: cuDNN's heuristics choose)"),
      boolParam("deterministic", false, "torch.backends.cudnn.deterministic: only convolution algorithms whose results are bit-identical run to run (CUDA only)"),
      boolParam("move_model", true, "model.to(device) once, before training (uncheck to make the mistake: the model stays on the CPU)"),
      boolParam("move_batch", true, "x.to(device), y.to(device) for every batch (uncheck: the batch stays on the CPU)"),
      boolParam("zero_grad", true, "optimizer.zero_grad() after every step (uncheck: gradients pile up from step to step)"),
      boolParam("eval_no_grad", true, "Evaluate under torch.no_grad() (uncheck: evaluation records a graph it never uses)"),
      boolParam("detach_loss", true, "Add up the loss detached from its graph, as loss.item() does (uncheck: add the loss tensor itself)"),
  };
}

namespace {

using Clock = std::chrono::steady_clock;

// What most likely made the loss diverge, from the settings of the run.
std::string likelyDivergenceCause(const lab::Params& p) {
  const double lr = p.getFloat("lr");
  const bool sgd = p.getString("optimizer") == "sgd";
  if (!p.getBool("zero_grad")) {
    return "optimizer.zero_grad() is never called, so every step adds this step's gradients to all the earlier ones and the "
           "steps grow until they overshoot. Call zero_grad() after each optimizer step.";
  }
  const bool lrTooHigh = (sgd && lr > 0.5) || (!sgd && lr > 0.05);
  // Under float16 autocast, what overflows float16 (65504) becomes inf.
  std::string fp16Note;
  if (ampDtype(p.getString("amp")) == kFloat16) {
    fp16Note = p.getBool("grad_scaler")
                   ? "an activation overflowed float16 (above 65504) in the forward pass: the GradScaler guards the gradients, "
                     "not the forward pass. Try a lower learning rate, or bf16, whose range is float32's."
                   : "float16 without a GradScaler: a gradient or an activation grew past float16's largest value, 65504, became "
                     "inf, and nothing kept it from the weights (inf - inf is NaN). With grad_scaler on, a step whose gradients "
                     "hold an inf or NaN is skipped and the scale lowered; bf16 has float32's range and needs no scaler.";
  }
  if (!lrTooHigh && !fp16Note.empty()) return fp16Note;
  if (lrTooHigh) {
    return "the learning rate lr=" + formatNumber(lr) + " is far too high for " + p.getString("optimizer") +
           ": each step overshoots the minimum by more than the last. Try lr=" + formatNumber(sgd ? 0.01 : 0.001) + "." +
           (fp16Note.empty() ? std::string() : " Under float16 autocast there is a second suspect -- " + fp16Note);
  }
  return "a learning rate too high for this model and data (try one ten times lower), or inputs with a very large range.";
}

// The three x axes of the lab's plots: a point at (step, samples seen, seconds). Samples seen and
// seconds let runs with different batch sizes be compared fairly.
std::vector<lab::Axis> trainingAxes() { return {{"step", ""}, {"samples seen", ""}, {"time", "s"}}; }

// A captured step replays one fixed step: the settings that change the step from batch to batch, or
// that exist to show a mistake, cannot be captured. Says which one, and why.
void checkGraphable(const lab::Params& p, Device device) {
  auto refuse = [](const std::string& why) { throw ValueError("cuda_graph: " + why); };
  if (!device.isCuda()) refuse("a CUDA graph captures GPU work, and this run is on " + device.str() + ": choose a cuda device (the emulated GPU captures too)");
  if (p.getInt("accumulate") != 1) refuse("a captured step is one whole optimizer step: set accumulate to 1");
  if (ampDtype(p.getString("amp")) == kFloat16 && p.getBool("grad_scaler")) {
    refuse("the GradScaler reads on the host whether a step's gradients overflowed, and nothing may be read from the device during a "
           "capture: use amp bf16 (no scaler needed) or none");
  }
  if (p.getString("lr_schedule") != "constant") refuse("the learning rate is captured with the step: keep lr_schedule constant");
  for (const char* habit : {"move_model", "move_batch", "zero_grad", "detach_loss"}) {
    if (!p.getBool(habit)) refuse(std::string("the fault sandbox's switches are for eager steps: turn ") + habit + " back on");
  }
}

}  // namespace

void TrainLab::check(const lab::Params& p) const {
  if (p.getString("model") == "cnn" && p.getString("dataset") != "fashion-mnist") {
    throw ValueError("--model cnn convolves images, and the regression data set's examples are 16 numbers, not an image: "
                     "use --dataset fashion-mnist with the cnn, or --model mlp for regression");
  }
}

std::vector<lab::MeasurementSpec> TrainLab::measurements() const {
  return {
      {"memory cap", "bytes"},
      {"evaluation peak with the graph recorded", "bytes"},
      {"evaluation peak under no-grad", "bytes"},
      {"evaluation pass: peak above the model", "bytes"},
      {"evaluation pass: memory still held after it", "bytes"},
      {"cuDNN algorithm search", "s"},
      {"training peak allocated", "bytes"},
      {"effective batch", ""},
      {"training time*", "s"},
      {"final train loss", ""},
      {"final eval loss", ""},
      {"epochs completed", ""},
      {"test accuracy", ""},
  };
}

void TrainLab::run(const lab::Params& p, lab::MetricSink& sink, const lab::StopToken& stop) {
  // 1. The device: the GPU when one is usable, else the CPU -- and say which, and why.
  const Device device = resolveDevice(p.getString("device"));
  announceDevice(sink, device);
  const bool moveModel = p.getBool("move_model"), moveBatch = p.getBool("move_batch");
  const bool zeroGrad = p.getBool("zero_grad"), evalNoGrad = p.getBool("eval_no_grad"), detachLoss = p.getBool("detach_loss");
  if ((!moveModel || !moveBatch) && device.isCpu()) {
    sink.warning("A switch leaves the " + std::string(!moveModel ? "model" : "batch") +
                 " on the CPU, but the device is the CPU: everything is on one device and nothing fails. Choose a cuda "
                 "device (the emulated GPU too) to meet the error.");
  }
  const bool graphed = p.getBool("cuda_graph");
  if (graphed) checkGraphable(p, device);
  const auto seed = static_cast<std::uint64_t>(p.getInt("seed"));
  Generator gen(seed);

  // 2. The data: training and held-out sets, on the CPU; batches move to the device as they are used.
  check(p);
  const bool classification = p.getString("dataset") == "fashion-mnist";
  const bool cnn = p.getString("model") == "cnn";
  std::shared_ptr<data::TensorDataset> trainSet, testSet;
  if (classification) {
    trainSet = data::loadFashionMnist(true);
    testSet = data::loadFashionMnist(false);
  } else {
    // 17 numbers an example (16 inputs, the target), and the noise and products that make them.
    requireHostMemory(3.0 * 17.0 * 4.0 * static_cast<double>(p.getInt("samples")), "samples " + std::to_string(p.getInt("samples")) +
                      ": the regression data set", "choose fewer samples");
    trainSet = data::makeRegressionDataset(p.getInt("samples"), 16, 0.1, seed);
    testSet = data::makeRegressionDataset(256, 16, 0.1, seed + 1);
  }
  trainSet = firstExamples(trainSet, p.getInt("train_subset"));
  // An empty set would train for 0 steps and "succeed", or evaluate to 0/0.
  if (trainSet->size() == 0 || testSet->size() == 0) {
    throw ValueError(std::string("the ") + (trainSet->size() == 0 ? "training" : "test") + " set is empty: nothing to " +
                     (trainSet->size() == 0 ? "train on" : "evaluate"));
  }
  const std::vector<std::int64_t> hidden = parseWidths(p.getString("hidden"));
  // The model with its state and a step's activations: refused, naming what to change, when they would
  // not fit in half of this machine's free memory (a model left on the CPU trains there).
  requireTrainingMemory(device.isCpu() || !moveModel, *trainSet, cnn, hidden, classification ? 10 : 1, p.getInt("batch_size"), "hidden");
  const bool pin = p.getBool("pin_memory");
  if (pin && !cuda::pinnedMemoryAvailable()) sink.warning("pin_memory is set but no GPU is usable: batches stay in pageable memory");
  data::DataLoader trainLoader(trainSet, {.batch_size = p.getInt("batch_size"), .shuffle = true, .drop_last = graphed,
                                          .num_workers = static_cast<int>(p.getInt("workers")), .pin_memory = pin, .seed = seed});
  data::DataLoader testLoader(testSet, {.batch_size = 1024, .num_workers = 0, .pin_memory = pin});

  // 3. The model, moved to the device once.
  const int checkpointSegments = static_cast<int>(p.getInt("checkpoint_segments"));
  auto model = cnn ? makeCnn(*trainSet, hidden, 10, gen, checkpointSegments)
                   : makeMlp(*trainSet, hidden, classification ? 10 : 1, gen, checkpointSegments);
  if (moveModel) {
    MemoryCategoryScope tag(MemoryCategory::Parameter);
    model->to(device);
  }
  sink.info(model->repr() + "\n" + std::to_string(model->parameter_count()) + " parameters");

  // 4. The optimizer.
  auto optimizer = makeOptimizer(p.getString("optimizer"), model->parameters(), p.getFloat("lr"), p.getFloat("momentum"),
                                 p.getFloat("weight_decay"), graphed);
  const int accumulate = static_cast<int>(p.getInt("accumulate"));

  // 4a. Mixed precision: autocast's dtype for the forward pass, and a GradScaler for float16 (disabled,
  //     it passes the loss through and step() is optimizer.step()). TF32 for float32 products on a GPU.
  const std::optional<DType> amp = ampDtype(p.getString("amp"));
  amp::GradScaler scaler({.enabled = amp == kFloat16 && p.getBool("grad_scaler")});
  if (amp == kBFloat16 && p.getBool("grad_scaler")) {
    sink.info("bfloat16 has float32's exponent range, so its gradients do not underflow the way float16's do: no GradScaler (as in PyTorch's recipe).");
  }
  if (amp == kFloat16 && !scaler.is_enabled()) {
    sink.warning("float16 without a GradScaler: gradients below 2^-24 (about 6e-8) become zero, and nothing checks for inf/NaN.");
  }
  const Tf32Guard tf32(p.getBool("tf32"));
  if (p.getBool("tf32") && (!device.isCuda() || cuda::isEmulated(device))) {
    sink.warning("tf32 is set, but TF32 is a mode of NVIDIA tensor cores (Ampere and newer): on " + device.str() +
                 " float32 matrix products stay float32.");
  }

  // 4b. cuDNN's convolution settings, for the run: they choose among cuDNN's algorithms, so they act
  //     on a real GPU only (and on convolutions only).
  const bool cudnnBenchmark = p.getBool("cudnn_benchmark"), deterministic = p.getBool("deterministic");
  const CudnnGuard cudnnSettings(cudnnBenchmark, deterministic);
  const bool realGpu = device.isCuda() && !cuda::isEmulated(device);
  if (realGpu && cnn) cuda::clearCudnnChoices(device.index());  // choose afresh, as a new PyTorch process does
  {
    const std::string settings = "torch.backends.cudnn.benchmark = " + std::string(cudnnBenchmark ? "True" : "False") +
                                 ", torch.backends.cudnn.deterministic = " + (deterministic ? "True" : "False");
    if (!realGpu) {
      sink.info(settings + ": these choose among cuDNN's convolution algorithms on an NVIDIA GPU; on " + device.str() +
                (cuda::isEmulated(device) ? " (the emulated GPU computes on the CPU)" : std::string()) +
                " there is no cuDNN and they change nothing.");
    } else if (!cnn) {
      sink.info(settings + ": they choose cuDNN's convolution algorithms, and this model has no convolution: they change nothing here.");
    } else {
      sink.info(settings + (cudnnBenchmark ? ": the first step of each new convolution shape times cuDNN's candidate algorithms and keeps the fastest (a slower first step, then the fastest algorithm)"
                                           : ": cuDNN's heuristics choose each convolution's algorithm, untimed") +
                (deterministic ? "; only algorithms with bit-identical results run to run are allowed." : "."));
    }
  }

  // 5. What the run shows: loss, memory and throughput against step / samples seen / time, and a
  //    row per epoch.
  sink.view({.id = "loss", .title = "Loss", .kind = lab::ViewKind::Line, .x = trainingAxes(), .y = {"loss", ""},
             .series = {{"train", "train loss"}, {"eval", "eval loss", lab::SeriesStyle::Points}}});
  const bool withDriver = declareMemoryView(sink, "memory", device, trainingAxes());
  // The emulated GPU computes on the CPU: its speed is the CPU's (with its queue's hand-offs), and the view says so.
  const bool emulated = cuda::isEmulated(device);
  sink.view({.id = "throughput", .title = "Throughput", .kind = lab::ViewKind::Line, .x = trainingAxes(),
             .y = {"throughput", "samples/s"}, .yFromZero = true, .series = {{"throughput", "training samples per second"}},
             .note = emulated ? "Measured on your CPU: the emulated GPU computes there, so this is your CPU's speed, not a GPU's. Its kernels "
                              "run on a queue of their own beside the training loop, so it can differ from a cpu run either way."
                            : std::string()});
  std::vector<lab::Axis> columns{{"epoch", ""}, {"train loss", ""}, {"eval loss", ""}};
  if (classification) columns.push_back({"test accuracy", ""});
  columns.push_back({"time", "s"});
  sink.view({.id = "epochs", .title = "Epochs", .kind = lab::ViewKind::Table, .columns = columns});
  if (scaler.is_enabled()) {
    sink.view({.id = "scale", .title = "GradScaler's loss scale (skipped steps marked)", .kind = lab::ViewKind::Line, .x = trainingAxes(),
               .y = {"scale", ""}, .yFromZero = true, .series = {{"scale", "loss scale", lab::SeriesStyle::Steps}},
               .note = "A step whose gradients hold an inf or NaN is skipped and the scale halves; after 2000 clean steps it doubles."});
  }

  // 5a. A cap on the device's memory, as torch.cuda.set_per_process_memory_fraction(f) sets it (the
  //     lesson gives it in MiB, so that it means the same on every device); put back when the run ends.
  CapGuard restoreCap(allocatorFor(device));
  std::optional<OomExplainer> explainer;  // only when a cap makes an OOM part of the lesson
  if (const std::int64_t capMb = p.getInt("memory_cap_mb"); capMb > 0) {
    explainer.emplace(device);
    const std::int64_t total = mem_get_info(device).second;
    const double fraction = std::min(1.0, static_cast<double>(capMb << 20) / static_cast<double>(total));
    set_per_process_memory_fraction(fraction, device);
    sink.info("set_per_process_memory_fraction(" + formatGeneral(fraction, 6) + ", \"" + device.str() + "\"): at most " +
              formatBytes(static_cast<std::int64_t>(fraction * static_cast<double>(total))) + " of " + formatBytes(total));
    sink.level("memory", "memory cap", fraction * static_cast<double>(total));
    // What the cap was, for a challenge to hold a run to it (raising the cap is no way to fit a batch).
    sink.measurement("memory cap", static_cast<double>(capMb << 20), "bytes");
  }
  reset_peak_memory_stats(device);
  const std::int64_t logEvery = p.getInt("log_every");
  const int epochs = static_cast<int>(p.getInt("epochs"));
  const std::int64_t batchesPerEpoch = trainLoader.size();
  // Optimizer steps per epoch: the last group may hold fewer than `accumulate` micro-batches.
  const std::int64_t stepsPerEpoch = (batchesPerEpoch + accumulate - 1) / accumulate;
  LrSchedule schedule(p.getString("lr_schedule"), p.getFloat("lr"), stepsPerEpoch * epochs);
  double trainSeconds = 0;
  std::int64_t steps = 0, samplesSeen = 0;
  bool stopped = false, diverged = false;
  std::optional<double> trainLoss, evalLoss, testAccuracy;
  double evalHeldBytes = 0, evalPeakBytes = 0;
  std::int64_t trainPeak = 0, runPeak = 0;  // bytes allocated at most: while training; in the whole run
  int epochsDone = 0;
  std::optional<std::string> shownError;  // the device-mismatch error a switch provoked, or out of memory
  std::optional<GraphedStep> graphedStep;  // cuda_graph: captured at the first batch
  std::int64_t windowSkipped = 0, totalSkipped = 0, skippedMarkers = 0;  // steps the GradScaler skipped
  double lastScale = 0;

  try {
    for (int epoch = 1; epoch <= epochs && !stop.stopRequested() && !diverged; ++epoch) {
      // 6. Train. Losses are summed on the device and read back only when reported, because .item()
      //    waits for the GPU.
      model->train();
      const auto epochStart = Clock::now();
      auto windowStart = epochStart;
      Tensor windowLoss = zeros({}, {.device = device}), epochLoss = zeros({}, {.device = device});
      std::int64_t windowSteps = 0, windowSamples = 0, epochSteps = 0;
      std::int64_t stepInEpoch = 0, microBatches = 0, groupSamples = 0;
      Tensor groupLoss = zeros({}, {.device = device});
      // The running sums: detached, or (the mistake) with every step's graph attached.
      auto addLoss = [&](Tensor& sum, const Tensor& loss, double scale) {
        std::optional<NoGradGuard> noGrad;
        if (detachLoss) noGrad.emplace();
        sum = sum + (detachLoss ? loss.detach() : loss) * scale;
      };
      for (const data::Batch& batch : trainLoader) {
        if (stop.stopRequested()) {
          stopped = true;
          break;
        }
        // 6a. One micro-batch: forward (under autocast with amp) and backward (through the scaler);
        //     gradients add up over `accumulate` of them, each with its share 1/accumulate of the loss.
        setMemoryStep(steps + 1);
        Tensor inputs = batch.inputs, targets = batch.targets;
        if (moveBatch) {
          MemoryCategoryScope tag(MemoryCategory::InputBatch);
          inputs = batch.inputs.to(device, pin);
          targets = batch.targets.to(device, pin);
        }
        auto forward = [&](const Tensor& x, const Tensor& y) {
          std::optional<amp::AutocastGuard> autocast;
          if (amp) autocast.emplace(device.type(), *amp);
          return taskLoss(classification, (*model)(x), y);  // float32 under autocast too: losses run in float32
        };
        Tensor loss;
        if (graphed) {
          // 6a'. The captured step, replayed on this batch: forward, backward and the optimizer step in one
          //      launch (captured on the first batch, after its warm-up steps).
          if (!graphedStep) {
            graphedStep.emplace(forward, *optimizer, inputs, targets);
            sink.info("torch.cuda.graph: " + std::to_string(GraphedStep::kWarmupSteps) + " warm-up steps on the first batch (they train too), "
                      "then the whole step captured as one graph of " + std::to_string(graphedStep->nodes()) +
                      " kernels and copies, replayed for every batch" +
                      (emulated ? " (on the emulated GPU the replay queues the recorded CPU kernels as one task: no timing is drawn from it)" : ""));
          }
          loss = graphedStep->step(inputs, targets);
        } else {
          loss = forward(inputs, targets);
          scaler.scale(accumulate > 1 ? loss * (1.0 / accumulate) : loss).backward();
        }
        ++microBatches;
        groupSamples += batch.inputs.size(0);
        addLoss(groupLoss, loss, 1.0);
        const std::int64_t inGroup = (microBatches - 1) % accumulate + 1;
        if (inGroup < accumulate && microBatches < batchesPerEpoch) continue;

        // 6b. The optimizer step (skipped by the scaler when a gradient is inf/NaN), then the gradients
        //     are freed for the next group.
        if (!graphed) {  // (the graph's replay has stepped, and its backward writes fresh gradients each time)
          scaler.step(*optimizer);
          scaler.update();
          schedule.step(*optimizer);  // scheduler.step(): the rate of the next step
          if (zeroGrad) optimizer->zero_grad();
        }
        if (scaler.is_enabled()) {
          const amp::ScalerStepStats& st = scaler.last_step();
          const std::vector<double> at{static_cast<double>(steps + 1), static_cast<double>(samplesSeen + groupSamples), trainSeconds + secondsSince(epochStart)};
          if (st.skipped) {
            ++windowSkipped;
            ++totalSkipped;
            if (++skippedMarkers <= 40) sink.marker("scale", at, "skipped", lab::MarkerKind::Skipped);
          }
          if (st.skipped || st.scale != lastScale) sink.point("scale", "scale", at, st.scale);
          lastScale = st.scale;
        }
        addLoss(windowLoss, groupLoss, 1.0 / static_cast<double>(inGroup));
        groupLoss = zeros({}, {.device = device});
        ++windowSteps;
        ++epochSteps;
        ++stepInEpoch;
        ++steps;
        windowSamples += groupSamples;
        samplesSeen += groupSamples;
        groupSamples = 0;
        if (steps % logEvery != 0 && stepInEpoch != stepsPerEpoch) continue;

        // 6c. Report: one .item() per report, not per step.
        const double mean = windowLoss.item() / static_cast<double>(windowSteps);  // synchronises with the device
        const double window = secondsSince(windowStart);
        const double elapsed = trainSeconds + secondsSince(epochStart);
        const std::vector<double> x{static_cast<double>(steps), static_cast<double>(samplesSeen), elapsed};
        if (!std::isfinite(mean)) {  // 6d. A diverged run stops here, and says why.
          diverged = true;
          sink.marker("loss", x, "loss is " + formatNumber(mean));
          sink.warning("The loss became " + formatNumber(mean) + " at step " + std::to_string(steps) + " (epoch " +
                       std::to_string(epoch) + "): the run diverged, so it stopped. Likely cause: " + likelyDivergenceCause(p));
          sink.record("diverged", {{"step", steps}, {"epoch", std::int64_t{epoch}}});
          break;
        }
        const double throughput = window > 0 ? static_cast<double>(windowSamples) / window : 0.0;
        const MemoryStats ms = memory_stats(device);
        sink.point("loss", "train", x, mean);
        sendMemoryPoint(sink, "memory", device, x, withDriver);
        sink.point("throughput", "throughput", x, throughput);
        if (scaler.is_enabled()) sink.point("scale", "scale", x, scaler.last_step().scale);
        sink.record("step", {{"epoch", std::int64_t{epoch}}, {"step", steps}, {"loss", mean}, {"samples_per_s", throughput},
                             {"allocated_bytes", ms.allocated_bytes.current}, {"reserved_bytes", ms.reserved_bytes.current},
                             {"elapsed_s", elapsed}, {"loss_scale", scaler.is_enabled() ? scaler.last_step().scale : 1.0}, {"skipped", windowSkipped}});
        windowSkipped = 0;
        sink.progress(static_cast<double>(steps), static_cast<double>(stepsPerEpoch * epochs),
                      "epoch " + std::to_string(epoch) + "/" + std::to_string(epochs) + ", loss " + formatFixed(mean, 4));
        addLoss(epochLoss, windowLoss, 1.0);
        if (explainer) explainer->poll();
        windowLoss = zeros({}, {.device = device});
        windowSteps = windowSamples = 0;
        windowStart = Clock::now();
      }
      if (windowSteps > 0 && !diverged) addLoss(epochLoss, windowLoss, 1.0);
      trainSeconds += secondsSince(epochStart);
      if (epochSteps == 0 || stopped || diverged) break;  // Stop means stop: no evaluation pass after it

      // 7. Evaluate under no-grad: no graph is recorded, so activations are freed as soon as possible.
      model->eval();
      double evalSum = 0;
      std::int64_t evalCount = 0, correct = 0;
      {
        std::optional<NoGradGuard> noGrad;
        if (evalNoGrad) noGrad.emplace();
        const std::int64_t before = memory_allocated(device);
        trainPeak = std::max(trainPeak, max_memory_allocated(device));  // the peaks of training and of
        reset_peak_memory_stats(device);                               // evaluation are kept apart
        Tensor lossSum = zeros({}, {.device = device});
        Tensor correctSum = zeros({}, {.dtype = kInt64, .device = device});
        for (const data::Batch& batch : testLoader) {
          if (stop.stopRequested()) {  // a batch at a time here too: evaluation can be long
            stopped = true;
            break;
          }
          Tensor x = moveBatch ? batch.inputs.to(device, pin) : batch.inputs;
          Tensor y = moveBatch ? batch.targets.to(device, pin) : batch.targets;
          std::optional<amp::AutocastGuard> autocast;  // evaluation in the precision the model trains in
          if (amp) autocast.emplace(device.type(), *amp);
          Tensor out = (*model)(x);
          Tensor loss = classification ? cross_entropy(out, y, Reduction::Sum) : mse_loss(out, y, Reduction::Sum);
          lossSum = lossSum + (detachLoss ? loss.detach() : loss);
          if (classification) correctSum = correctSum + (out.argmax(1) == y).sum();
          evalCount += batch.inputs.size(0);
        }
        // What evaluation holds once its loop is done (the running sum still alive), and its peak.
        evalHeldBytes = static_cast<double>(memory_allocated(device) - before);
        evalPeakBytes = static_cast<double>(max_memory_allocated(device) - before);
        runPeak = std::max(runPeak, max_memory_allocated(device));
        evalSum = lossSum.item();
        correct = static_cast<std::int64_t>(correctSum.item());
      }
      reset_peak_memory_stats(device);
      if (stopped) break;  // no metrics from a partial evaluation
      // MSE with Reduction::Sum sums over every output element; regression has one output per example.
      trainLoss = epochLoss.item() / static_cast<double>(epochSteps);
      evalLoss = evalSum / static_cast<double>(evalCount);
      if (classification) testAccuracy = static_cast<double>(correct) / static_cast<double>(evalCount);
      const double seconds = secondsSince(epochStart);
      sink.point("loss", "eval", {static_cast<double>(steps), static_cast<double>(samplesSeen), trainSeconds}, *evalLoss);
      std::vector<lab::Value> row{std::int64_t{epoch}, *trainLoss, *evalLoss};
      if (classification) row.push_back(*testAccuracy);
      row.push_back(seconds);
      sink.row("epochs", row);
      std::vector<std::pair<std::string, lab::Value>> fields{{"epoch", std::int64_t{epoch}}, {"step", steps}, {"train_loss", *trainLoss},
                                                             {"eval_loss", *evalLoss}, {"seconds", seconds}};
      if (testAccuracy) fields.emplace_back("test_accuracy", *testAccuracy);
      sink.record("epoch", fields);
      ++epochsDone;
    }
  } catch (const OutOfMemoryError& e) {
    // 8. Out of memory: the step's tensors were freed as the error unwound the stack, so the run can
    //    say what happened and end cleanly (the memory lessons read this error line by line).
    sink.marker("memory", {static_cast<double>(steps), static_cast<double>(samplesSeen), trainSeconds}, "out of memory",
                lab::MarkerKind::OutOfMemory);
    sink.engineError(e.what());
    if (!explainer || !explainer->explain(sink)) {
      sink.info("The fixes, cheapest first: a smaller batch_size (keep the effective batch with accumulate), evaluation under "
                "no-grad, smaller hidden layers -- or a larger memory cap, if the device has room.");
    } else {
      sink.info("The views 'At the failed allocation' and 'Fixes' explain this error from the memory held when it happened.");
    }
    sink.record("oom", {{"batch_size", p.getInt("batch_size")}, {"accumulate", std::int64_t{accumulate}}, {"step", steps},
                        {"message", std::string(e.what())}, {"allocated_after_bytes", memory_allocated(device)}});
    shownError = "OutOfMemoryError";
  } catch (const DeviceMismatchError& e) {
    if (moveModel && moveBatch) throw;  // not provoked by a switch: a real failure
    // 8. The mistake a switch made, as the engine reports it -- and its fix.
    sink.engineError(e.what());
    sink.info(!moveModel ? "The fix: move the model once, before training -- model.to(device) -- so its parameters are where the batches are."
                         : "The fix: move every batch where the model is -- x, y = x.to(device), y.to(device) -- inside the loop.");
    shownError = "DeviceMismatchError";
  }
  setMemoryStep(0);
  const MemoryStats ms = memory_stats(device);
  trainPeak = std::max(trainPeak, ms.allocated_bytes.peak);  // since the last evaluation (or an error)
  runPeak = std::max(runPeak, trainPeak);
  stopped = stopped || stop.stopRequested();

  // 9. The claim "no_grad saves memory", measured here: the peak of one evaluation batch with the
  //    graph recorded, and under no-grad. And what this run's evaluation took.
  if (!stopped && !shownError && !diverged && trainLoss) {
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
    sink.measurement("evaluation peak with the graph recorded", withGraph, "bytes");
    sink.measurement("evaluation peak under no-grad", withoutGraph, "bytes");
    sink.measurement("evaluation pass: peak above the model", evalPeakBytes, "bytes");
    sink.measurement("evaluation pass: memory still held after it", evalHeldBytes, "bytes");
  }
  // What cuDNN chose for this run's convolutions (and, in benchmark mode, what timing them cost).
  if (realGpu && cnn) {
    const std::vector<cuda::ConvAlgorithmChoice> choices = cuda::cudnnChoices(device.index());
    double searchMs = 0;
    for (const cuda::ConvAlgorithmChoice& c : choices) {
      searchMs += c.searchMilliseconds;
      std::string chosen;
      for (const cuda::ConvAlgorithmTrial& t : c.trials) {
        if (t.chosen) chosen = t.algorithm;
      }
      sink.record("cudnn_choice", {{"pass", c.pass}, {"shape", c.shape}, {"how", c.how}, {"algorithm", chosen},
                                   {"search_ms", c.searchMilliseconds}});
    }
    if (!choices.empty()) {
      sink.info("cuDNN chose an algorithm for " + std::to_string(choices.size()) + " convolution passes and shapes (" +
                (cudnnBenchmark ? "benchmark mode: timing the candidates took " + formatFixed(searchMs, 1) + " ms in all"
                                : std::string("heuristics, untimed")) + ").");
      sink.measurement("cuDNN algorithm search", searchMs / 1000.0, "s");
    }
  }
  sink.measurement("training peak allocated", static_cast<double>(trainPeak), "bytes");
  // A run that failed trained at no batch: nothing for a challenge to count.
  if (steps > 0 && !shownError) sink.measurement("effective batch", static_cast<double>(p.getInt("batch_size") * accumulate), "");
  if (steps > 0) sink.measurement(emulated ? "training time (on the CPU: emulated GPU)" : "training time", trainSeconds, "s");
  if (trainLoss) sink.measurement("final train loss", *trainLoss, "");
  if (evalLoss) sink.measurement("final eval loss", *evalLoss, "");
  sink.measurement("epochs completed", static_cast<double>(epochsDone), "");
  if (testAccuracy) sink.measurement("test accuracy", *testAccuracy, "");

  std::string summary = (stopped ? "Stopped after " : diverged ? "Diverged after " : shownError ? "Ended with the error above after " : "Done: ") +
                        std::to_string(steps) + " steps on " + device.str() + " in " + formatFixed(trainSeconds, 3) + " s";
  if (trainLoss) summary += "; final train loss " + formatFixed(*trainLoss, 4) + ", eval loss " + formatFixed(*evalLoss, 4);
  if (testAccuracy) summary += ", test accuracy " + formatFixed(*testAccuracy, 4);
  if (scaler.is_enabled()) summary += "; the GradScaler skipped " + std::to_string(totalSkipped) + " steps, scale now " + formatNumber(scaler.get_scale());
  summary += "; peak memory of the run (training and evaluation) " + formatBytes(runPeak) + " allocated, " +
             formatBytes(ms.reserved_bytes.peak) + " reserved";
  sink.info(summary);
  std::vector<std::pair<std::string, lab::Value>> done{{"seconds", trainSeconds}, {"steps", steps}, {"device", device.str()},
                                                       {"stopped", stopped}, {"diverged", diverged},
                                                       {"peak_allocated_bytes", runPeak},
                                                       {"peak_reserved_bytes", ms.reserved_bytes.peak}};
  if (trainLoss) done.emplace_back("train_loss", *trainLoss);
  if (evalLoss) done.emplace_back("eval_loss", *evalLoss);
  if (testAccuracy) done.emplace_back("test_accuracy", *testAccuracy);
  if (shownError) done.emplace_back("error", *shownError);
  done.emplace_back("amp", ampName(p.getString("amp")));
  done.emplace_back("model", p.getString("model"));
  done.emplace_back("cudnn_benchmark", cudnnBenchmark);
  done.emplace_back("deterministic", deterministic);
  done.emplace_back("skipped", totalSkipped);
  sink.record("done", done);
}

}  // namespace gpulab::labs
