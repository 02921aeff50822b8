// The "feeding" lab: is the device kept busy, or does it wait for data? Read it next to the PyTorch it
// mirrors -- Fashion-MNIST-sized images through the usual transforms, into an MLP:
//
//   transform = T.Compose([T.RandomCrop(28, padding=2), T.RandomHorizontalFlip(),
//                          T.ToTensor(), T.Normalize((0.2860,), (0.3530,))])
//   loader = DataLoader(images, batch_size=128, shuffle=True,
//                       num_workers=num_workers,      # 0: the loop loads every batch itself
//                       pin_memory=pin_memory)        # batches put in page-locked memory
//   for x, y in loader:                               # waits until the next batch is ready
//       x = x.to(device, non_blocking=pin_memory)     # from pinned memory: queued, the host goes on
//       y = y.to(device, non_blocking=pin_memory)
//       loss = F.cross_entropy(model(x), y)
//       optimizer.zero_grad(); loss.backward(); optimizer.step()
//
// Loading a batch is a read from storage and a decode. GPU Lab reads no files here: a timed wait
// stands in for the read, `load_cost` times this device's own training step, so that loading is the
// bottleneck on every machine (a slow disk, a network share, JPEG decoding do this in real pipelines).
// The decode and augmentation that follow are real work on the CPU: bytes to floats, a random crop of
// the padded image, a random flip, normalisation -- what the transforms above do.
//
// With num_workers=0 the loop does all of that itself. With W workers, W threads load batches ahead of
// the loop (PyTorch uses processes, for Python's sake; the point is the same). With pin_memory the
// batches sit in page-locked memory (PyTorch copies each finished batch there on a thread of the main
// process; GPU Lab's workers build it there directly), from which a non_blocking copy is queued on the
// device's stream and the host goes straight on. A run with the batches already on the device is the
// ceiling that feeding can reach.
//
// What is measured, per loader: the device's clock (CUDA events around each step's copies and
// compute, on the emulated GPU too; the host's clock on the CPU, where the step runs on the loop's own
// thread) gives the device's idle time between steps; the host's clock gives the loop's wait for
// batches; the loader's threads log when they loaded each batch.
#include "lessons/labs/feeding_lab.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <map>
#include <mutex>
#include <thread>

#include "engine/core/errors.h"
#include "engine/core/number_format.h"
#include "engine/data/device_prefetcher.h"
#include "engine/ops/ops.h"
#include "engine/runtime/device_runtime.h"
#include "engine/runtime/stream.h"
#include "lessons/labs/repeated_timing.h"
#include "lessons/labs/training.h"

namespace gpulab::labs {

namespace {

using Clock = std::chrono::steady_clock;

constexpr std::int64_t kSide = 28, kPixels = kSide * kSide, kStored = 2048, kClasses = 10, kBatch = 128;
constexpr int kPad = 2;                          // RandomCrop(28, padding=2)
constexpr float kMean = 0.2860f, kStd = 0.3530f;  // Fashion-MNIST's, as Normalize uses them
// The timelines show the loop's first steps: the loader's start (every loader makes the loop wait for
// its first batch) and how it goes on.
constexpr std::int64_t kTimelineSteps = 8;

std::uint64_t mix(std::uint64_t z) {  // splitmix64's finaliser: a well-spread hash of z
  z += 0x9E3779B97F4A7C15ull;
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}
double unit(std::uint64_t bits) { return static_cast<double>(bits >> 11) * 0x1.0p-53; }  // [0, 1)

// The images as they sit in files: bytes. Each class is a few soft blobs at places of its own; each
// image is its class's blobs at a brightness of its own, with noise -- something an MLP learns.
struct ImageBytes {
  std::vector<std::uint8_t> pixels;  // kStored images of kPixels
  std::vector<std::int64_t> labels;
};

std::shared_ptr<const ImageBytes> makeImages(std::uint64_t seed) {
  auto out = std::make_shared<ImageBytes>();
  out->pixels.resize(static_cast<std::size_t>(kStored * kPixels));
  out->labels.resize(static_cast<std::size_t>(kStored));
  constexpr int kBlobs = 3;
  for (std::int64_t i = 0; i < kStored; ++i) {
    const std::int64_t label = i % kClasses;
    out->labels[static_cast<std::size_t>(i)] = label;
    const double brightness = 0.6 + 0.4 * unit(mix(seed ^ (0x1000003ull * static_cast<std::uint64_t>(i))));
    for (std::int64_t p = 0; p < kPixels; ++p) {
      const double y = static_cast<double>(p / kSide), x = static_cast<double>(p % kSide);
      double v = 0;
      for (int k = 0; k < kBlobs; ++k) {
        const std::uint64_t h = mix(seed * 31 + static_cast<std::uint64_t>(label * kBlobs + k));
        const double cy = 4 + 20 * unit(h), cx = 4 + 20 * unit(mix(h)), r = 2.5 + 3 * unit(mix(h + 1));
        v += std::exp(-((y - cy) * (y - cy) + (x - cx) * (x - cx)) / (2 * r * r));
      }
      const double noise = 0.15 * (unit(mix(seed + static_cast<std::uint64_t>(i * kPixels + p))) - 0.5);
      out->pixels[static_cast<std::size_t>(i * kPixels + p)] =
          static_cast<std::uint8_t>(std::clamp(255.0 * (brightness * std::min(v, 1.0) + noise), 0.0, 255.0));
    }
  }
  return out;
}

// When each batch was loaded, and by which thread: the loader's lanes of the timeline.
class LoadLog {
 public:
  explicit LoadLog(Clock::time_point origin) : origin_(origin) {}
  double seconds(Clock::time_point t) const { return std::chrono::duration<double>(t - origin_).count(); }
  void add(Clock::time_point start, Clock::time_point end) {
    const double s = seconds(start), e = seconds(end);
    std::lock_guard lock(mutex_);
    spans_.push_back({std::this_thread::get_id(), s, e});
  }
  struct Entry {
    std::thread::id thread;
    double start, end;
  };
  std::vector<Entry> entries() const {
    std::lock_guard lock(mutex_);
    return spans_;
  }

 private:
  Clock::time_point origin_;
  mutable std::mutex mutex_;
  std::vector<Entry> spans_;
};

// The data set the loader reads: `size` examples over the stored images. A batch costs the read
// (the wait) and then the real decode and augmentation of each image, logged to `log`.
class ImageFiles final : public data::Dataset {
 public:
  ImageFiles(std::shared_ptr<const ImageBytes> images, std::int64_t size, double readSeconds, std::shared_ptr<LoadLog> log)
      : images_(std::move(images)), size_(size), readSeconds_(readSeconds), log_(std::move(log)) {}
  std::int64_t size() const override { return size_; }
  Shape inputShape() const override { return {1, kSide, kSide}; }
  Shape targetShape() const override { return {}; }
  DType targetDType() const override { return kInt64; }

  void gather(const std::vector<std::int64_t>& indices, const Tensor& inputs, const Tensor& targets) const override {
    const Clock::time_point start = Clock::now();
    if (readSeconds_ > 0) std::this_thread::sleep_for(std::chrono::duration<double>(readSeconds_));
    float* out = inputs.data<float>();
    std::int64_t* labels = targets.data<std::int64_t>();
    for (std::size_t r = 0; r < indices.size(); ++r) {
      const std::int64_t index = indices[r];
      if (index < 0 || index >= size_) throw IndexError("index " + std::to_string(index) + " is out of range");
      decode(index, out + static_cast<std::int64_t>(r) * kPixels);
      labels[r] = images_->labels[static_cast<std::size_t>(index % kStored)];
    }
    if (log_) log_->add(start, Clock::now());
  }

 private:
  // RandomCrop(28, padding=2), RandomHorizontalFlip(), ToTensor(), Normalize: the crop and flip drawn
  // from the example's index, so every loader -- whatever its workers -- yields the same batches.
  void decode(std::int64_t index, float* out) const {
    const std::uint8_t* src = images_->pixels.data() + (index % kStored) * kPixels;
    const std::uint64_t h = mix(0xF00Dull + static_cast<std::uint64_t>(index));
    const int dy = static_cast<int>(h % 5) - kPad, dx = static_cast<int>((h >> 8) % 5) - kPad;
    const bool flip = ((h >> 16) & 1) != 0;
    for (int y = 0; y < kSide; ++y) {
      for (int x = 0; x < kSide; ++x) {
        const int sy = y + dy, sx = (flip ? kSide - 1 - x : x) + dx;
        const bool inside = sy >= 0 && sy < kSide && sx >= 0 && sx < kSide;
        const float v = inside ? static_cast<float>(src[sy * kSide + sx]) / 255.0f : 0.0f;
        out[y * kSide + x] = (v - kMean) / kStd;
      }
    }
  }

  std::shared_ptr<const ImageBytes> images_;
  std::int64_t size_;
  double readSeconds_;
  std::shared_ptr<LoadLog> log_;
};

struct LoaderChoice {
  int workers = 0;
  bool pinned = false;    // pin_memory=True, and the copies non_blocking
  bool resident = false;  // no loader: the batches were loaded onto the device before the loop (the ceiling)
  bool prefetch = false;  // pinned, and copied one batch ahead on a stream of their own (data::DevicePrefetcher)
  bool operator<(const LoaderChoice& o) const {
    return std::tuple(!resident, workers, pinned, prefetch) < std::tuple(!o.resident, o.workers, o.pinned, o.prefetch);
  }
  bool operator==(const LoaderChoice& o) const = default;
};
const LoaderChoice kResident{0, false, true};
// The ceiling cycles over this many batches loaded in advance (more would only take memory).
constexpr std::int64_t kResidentBatches = 32;

std::string workersText(int workers) {
  return workers == 0 ? "0 workers (the loop loads)" : std::to_string(workers) + (workers == 1 ? " worker" : " workers");
}
std::string choiceText(const LoaderChoice& c, bool copies) {
  if (c.resident) return "batches already on the device (no loading: the ceiling)";
  if (!copies) return workersText(c.workers);
  if (c.prefetch) return workersText(c.workers) + ", pinned, copied ahead on a copy stream";
  return workersText(c.workers) + (c.pinned ? ", pinned + non_blocking" : ", pageable");
}

// One training loop with one loader: what the clocks said.
struct LoaderRun {
  LoaderChoice choice;
  std::int64_t steps = 0;
  double seconds = 0;         // the loop, from asking for the first batch until the device finished the last step
  double busySeconds = 0;     // ... of which the device was working (how it is measured: runLoader)
  double waitingSeconds = 0;  // the loop's time waiting for batches (with 0 workers: loading them itself)
  double copySeconds = 0;     // the stream's time from each step's copies' start to their end (GPU only; the
                              // copy stream's with the prefetcher)
  double overlappedCopySeconds = 0;  // ... of which the compute ran at the same time (the prefetcher's copies)
  double meanLoss = 0;
  std::vector<lab::Span> timeline;  // some steps, their lanes named for the view
  std::vector<std::string> workerLanes;
  bool stopped = false;  // Stop came first: nothing measured
};

struct Setup {
  Device device;
  std::shared_ptr<const ImageBytes> images;
  std::vector<std::int64_t> hidden;
  std::int64_t steps = 0;
  double readSeconds = 0;
  std::uint64_t seed = 0;
  const lab::StopToken* stop = nullptr;  // looked at every step: a step is well under 100 ms
  bool stopRequested() const { return stop && stop->stopRequested(); }
};

// Lane ids of the timelines (the views name them).
const char* const kLaneLoop = "loop";
const char* const kLaneWait = "wait";
const char* const kLaneStep = "step";
const char* const kLaneCopy = "copy";
const char* const kLaneCompute = "compute";
const char* const kLaneCopyStream = "copy stream";

// How much of [start, end] the spans cover (the spans do not overlap each other).
double coveredBy(double start, double end, const std::vector<std::pair<double, double>>& spans) {
  double covered = 0;
  for (const auto& [a, b] : spans) covered += std::max(0.0, std::min(end, b) - std::max(start, a));
  return covered;
}

LoaderRun runLoader(const Setup& s, const LoaderChoice& choice) {
  const bool gpu = s.device.isCuda();
  const std::int64_t steps = s.steps;
  Generator gen(s.seed);
  auto model = makeMlp(ImageFiles(s.images, kBatch, 0.0, nullptr), s.hidden, kClasses, gen);
  model->to(s.device);
  auto optimizer = makeOptimizer("sgd", model->parameters(), 0.05, 0.9, 0.0);
  Tensor running = zeros({}, {.device = s.device});

  struct StepClock {
    double asked = 0, got = 0, queued = 0;         // host: asked the loader, had the batch, had queued (on the CPU: run) the step
    cuda::Event copyStart{true}, copyEnd{true}, end{true};  // the device's stream (GPU only)
    std::optional<cuda::Event> aheadStart, aheadEnd;           // the batch's copy on the prefetcher's copy stream
  };
  std::vector<StepClock> clocks(static_cast<std::size_t>(steps));
  std::optional<cuda::Stream> stream;
  cuda::Event origin(true);
  if (gpu) stream = cuda::current_stream(s.device);
  synchronizeDevice(s.device);

  // The ceiling's batches: loaded (and decoded) before the loop, already on the device.
  std::vector<std::pair<Tensor, Tensor>> resident;
  if (choice.resident) {
    data::DataLoader preload(std::make_shared<ImageFiles>(s.images, std::min(steps, kResidentBatches) * kBatch, 0.0, nullptr),
                             {.batch_size = kBatch, .shuffle = true, .seed = s.seed});
    for (const data::Batch& b : preload) resident.emplace_back(b.inputs.to(s.device), b.targets.to(s.device));
    synchronizeDevice(s.device);
  }

  const Clock::time_point start = Clock::now();
  const auto log = std::make_shared<LoadLog>(start);  // stays empty for the ceiling, which loads nothing
  if (gpu) origin.record(*stream);  // the device was idle: it reaches this event at `start`, give or take a wake-up
  const std::optional<double> busyBefore = cuda::busySeconds(s.device);  // where the device's runtime measures it
  auto seconds = [&] { return secondsSince(start); };
  auto trainStep = [&](StepClock& c, const Tensor& xIn, const Tensor& yIn) {
    if (gpu) c.copyStart.record(*stream);
    const Tensor x = xIn.to(s.device, choice.pinned), y = yIn.to(s.device, choice.pinned);
    if (gpu) c.copyEnd.record(*stream);
    const Tensor loss = cross_entropy((*model)(x), y);
    optimizer->zero_grad();
    loss.backward();
    optimizer->step();
    running = running + loss.detach();  // read once, after the loop: no sync in it
    if (gpu) c.end.record(*stream);
    c.queued = seconds();
  };
  double asked = 0;
  std::int64_t step = 0;
  if (choice.resident) {
    for (; step < steps && !s.stopRequested(); ++step) {
      StepClock& c = clocks[static_cast<std::size_t>(step)];
      c.asked = c.got = seconds();
      const auto& [x, y] = resident[static_cast<std::size_t>(step) % resident.size()];
      trainStep(c, x, y);
    }
  } else {
    data::DataLoader loader(std::make_shared<ImageFiles>(s.images, steps * kBatch, s.readSeconds, log),
                            {.batch_size = kBatch, .shuffle = true, .num_workers = choice.workers, .pin_memory = choice.pinned,
                             .seed = s.seed});
    if (choice.prefetch) {
      data::DevicePrefetcher ahead(loader, s.device);  // queues the first batch's copy on its copy stream
      for (; step < steps && !s.stopRequested(); ++step) {
        StepClock& c = clocks[static_cast<std::size_t>(step)];
        c.asked = asked;
        const std::optional<data::Batch> batch = ahead.next();  // on the device; the next one's copy queued
        if (!batch) break;
        c.got = seconds();
        c.aheadStart = ahead.copyStarted();
        c.aheadEnd = ahead.copyFinished();
        trainStep(c, batch->inputs, batch->targets);  // .to(device) is a no-op: the batch is there
        asked = seconds();
      }
    } else {
      for (auto it = loader.begin(); it != loader.end() && step < steps && !s.stopRequested(); ++step) {
        StepClock& c = clocks[static_cast<std::size_t>(step)];
        c.asked = asked;
        c.got = seconds();
        trainStep(c, it->inputs, it->targets);
        asked = seconds();
        ++it;
      }
    }
  }
  if (step < steps && s.stopRequested()) {  // stopped: nothing measured, the device left idle
    synchronizeDevice(s.device);
    LoaderRun stopped;
    stopped.choice = choice;
    stopped.stopped = true;
    return stopped;
  }
  if (step < steps) throw Error("the loader ran out of batches after " + std::to_string(step) + " steps");
  synchronizeDevice(s.device);
  if (gpu) clocks.back().end.synchronize();

  LoaderRun r;
  r.choice = choice;
  r.steps = steps;
  r.seconds = seconds();
  r.meanLoss = running.item() / static_cast<double>(steps);
  // Each step's start and end on the device's clock: CUDA events on a GPU (the emulated GPU's streams
  // stamp them when they reach them), the host's clock on the CPU, where the step runs on the loop's
  // thread from having the batch to having run the step.
  auto deviceSeconds = [&](const cuda::Event& e) { return origin.elapsed_time(e) / 1000.0; };
  std::vector<double> stepStart(clocks.size()), stepEnd(clocks.size()), copyEnd(clocks.size());
  std::vector<std::pair<double, double>> ahead, compute;  // the prefetcher's copies; the steps' compute
  for (std::size_t i = 0; i < clocks.size(); ++i) {
    const StepClock& c = clocks[i];
    stepStart[i] = gpu ? deviceSeconds(c.copyStart) : c.got;
    copyEnd[i] = gpu ? deviceSeconds(c.copyEnd) : c.got;
    stepEnd[i] = gpu ? deviceSeconds(c.end) : c.queued;
    r.waitingSeconds += c.got - c.asked;
    if (c.aheadStart) ahead.emplace_back(deviceSeconds(*c.aheadStart), deviceSeconds(*c.aheadEnd));
    else r.copySeconds += copyEnd[i] - stepStart[i];
    compute.emplace_back(copyEnd[i], stepEnd[i]);
  }
  for (const auto& [a, b] : ahead) {
    r.copySeconds += b - a;
    r.overlappedCopySeconds += coveredBy(a, b, compute);
  }
  // On a GPU the device is timed by its streams' spans (below): the prefetcher's copies ran on a stream
  // of their own, and where they did not overlap a step the device was busy copying all the same.
  const double copyOutsideSteps = r.copySeconds - r.overlappedCopySeconds;
  // How long the device worked. The emulated GPU's streams time the kernels they run (what nvidia-smi's
  // GPU-Util counts). A GPU's stream is timed from each step's first copy to its last kernel: waits
  // inside a step -- a blocking copy's round trip to the host, a kernel queued late -- count as busy
  // there, so its busy share is an upper bound. On the CPU: the steps themselves.
  if (busyBefore) {
    r.busySeconds = cuda::busySeconds(s.device).value_or(*busyBefore) - *busyBefore;
  } else {
    for (std::size_t i = 0; i < clocks.size(); ++i) r.busySeconds += stepEnd[i] - stepStart[i];
    if (choice.prefetch) r.busySeconds += copyOutsideSteps;
  }
  r.busySeconds = std::min(r.busySeconds, r.seconds);

  // The timeline of the first steps, from the moment the loop asked for the first batch.
  const std::size_t shown = std::min(clocks.size(), static_cast<std::size_t>(kTimelineSteps));
  const double t1 = std::max(stepEnd[shown - 1], clocks[shown - 1].queued);
  const std::thread::id loopThread = std::this_thread::get_id();
  std::map<std::thread::id, std::string> workerLane;
  std::vector<LoadLog::Entry> loads = log->entries();
  std::sort(loads.begin(), loads.end(), [](const auto& a, const auto& b) { return a.start < b.start; });
  for (const LoadLog::Entry& e : loads) {
    if (e.start > t1) continue;
    std::string lane = kLaneLoop;
    if (e.thread != loopThread) {
      auto [at, added] = workerLane.emplace(e.thread, "worker " + std::to_string(workerLane.size() + 1));
      if (added) r.workerLanes.push_back(at->second);
      lane = at->second;
    }
    r.timeline.push_back({"", lane, "loads a batch", e.start, e.end});
  }
  std::sort(r.workerLanes.begin(), r.workerLanes.end());
  for (std::size_t i = 0; i < shown; ++i) {
    const std::string batch = "batch " + std::to_string(i + 1);
    const StepClock& c = clocks[i];
    // The prefetcher takes the batch after this one from the loader before it hands this one over.
    const std::string awaited = choice.prefetch ? "batch " + std::to_string(i + 2) + " (loaded ahead)" : batch;
    if (choice.workers > 0) r.timeline.push_back({"", kLaneWait, "waits for " + awaited, c.asked, c.got});
    r.timeline.push_back({"", kLaneStep, (gpu ? "queues " : "runs ") + batch + "'s step", c.got, c.queued});
    if (gpu && choice.prefetch) {
      r.timeline.push_back({"", kLaneCopyStream, "copies " + batch + " in, ahead", ahead[i].first, ahead[i].second});
      r.timeline.push_back({"", kLaneCompute, batch + ": forward, backward, step", stepStart[i], stepEnd[i]});
    } else if (gpu) {
      r.timeline.push_back({"", kLaneCopy, "copies " + batch + " in", stepStart[i], copyEnd[i]});
      r.timeline.push_back({"", kLaneCompute, batch + ": forward, backward, step", copyEnd[i], stepEnd[i]});
    }
  }
  return r;
}

}  // namespace

std::vector<lab::ParamSpec> FeedingLab::params() const {
  using namespace lab;
  return {
      deviceParam("device", "The device to train on"),
      intParam("num_workers", 0, 0, 8, "DataLoader(num_workers=...): threads that load batches ahead of the loop; 0: the loop loads them"),
      boolParam("pin_memory", false, "DataLoader(pin_memory=True), and the batches copied with .to(device, non_blocking=True)"),
      floatParam("load_cost", 2.0, 0.0, 20.0,
                 "How long reading a batch from storage takes, in training steps of this device (the decode comes on top)"),
      textParam("hidden", "256,128", "Hidden layer widths, comma-separated", checkHiddenWidths),
      intParam("steps", 40, 4, 100000, "Timed training steps for each loader"),
      intParam("repeats", 5, 1, 20, "Runs of each loader, taking turns (every loader, then every loader again); the median counts, "
                                    "the range shows the noise"),
      intParam("seed", 0, 0, 2147483647, "Seed for the images, their order and the initial weights"),
  };
}

std::vector<lab::MeasurementSpec> FeedingLab::measurements() const {
  return {
      {"training step time", "ms"},
      {"read wait per batch", "ms"},
      {"workers (yours)", ""},
      {"steps/s (yours)", "steps/s"},
      {"steps/s with the batches already on the device", "steps/s"},
      {"speed, % of the ceiling (yours)", "%"},
      {"speed, % of the ceiling, * workers", "%"},
      {"speed, % of the fastest loader (yours)", "%"},
      {"device idle share (yours)", "%"},
      {"device busy share (yours)", "%"},
      {"loop waiting share (yours)", "%"},
      {"device idle share, *", "%"},
      {"speed-up from 4 workers", "x"},
      {"speed-up from 1 worker", "x"},
      {"steps/s, slowest run, *", "steps/s"},
      {"steps/s, fastest run, *", "steps/s"},
      {"largest difference between the loaders' mean losses", ""},
      {"copy time per batch, *", "us"},
      {"steps/s, 4 workers, *", "steps/s"},
      {"copy time overlapping the steps, copy stream", "%"},
  };
}

void FeedingLab::run(const lab::Params& p, lab::MetricSink& sink, const lab::StopToken& stop) {
  Setup s;
  s.device = resolveDevice(p.getString("device"));
  announceDevice(sink, s.device);
  s.hidden = parseWidths(p.getString("hidden"));
  s.steps = p.getInt("steps");
  s.seed = static_cast<std::uint64_t>(p.getInt("seed"));
  s.stop = &stop;
  const LoaderChoice yours{static_cast<int>(p.getInt("num_workers")), p.getBool("pin_memory")};
  const bool gpu = s.device.isCuda(), emulated = cuda::isEmulatedGpu(s.device);
  // On the CPU there is no copy: the batch is where the model is, and pinning changes nothing.
  const bool copies = gpu;

  // The ceiling first: the loop with its batches already on the device. Its step time is what the
  // read is measured in.
  s.images = makeImages(s.seed);
  // First a few steps thrown away, as every benchmark does: a device's first steps pay once for loading
  // its kernels, creating its cuBLAS handle and filling the caching allocators (pinned memory too). On an
  // H200 they made the ceiling, run first, slower than four workers feeding the same loop.
  Setup warmUp = s;
  warmUp.steps = std::min<std::int64_t>(s.steps, 8);
  (void)runLoader(warmUp, kResident);
  if (copies) (void)runLoader(warmUp, LoaderChoice{0, true});
  // The step time that load_cost is counted in: one run with the batches already on the device.
  const LoaderRun calibration = runLoader(s, kResident);
  if (stop.stopRequested()) return;
  const double step = calibration.seconds / static_cast<double>(s.steps);
  s.readSeconds = p.getFloat("load_cost") * step;
  sink.info("A training step with its batch already on " + s.device.str() + " takes " + formatGeneral(step * 1000.0, 3) +
            " ms here, so each batch's read waits " + formatGeneral(s.readSeconds * 1000.0, 3) + " ms (load_cost " +
            formatGeneral(p.getFloat("load_cost"), 3) + "), then 128 images are decoded and augmented for real.");

  // Every loader of the sweep, the ceiling (the batches already on the device) and yours.
  std::vector<LoaderChoice> choices{kResident};
  for (int w : {0, 1, 2, 4}) {
    choices.push_back({w, false});
    if (copies) choices.push_back({w, true});
  }
  // And, where there are copies, the four workers' pinned batches copied one batch ahead on a stream of
  // their own, as a prefetcher does (data::DevicePrefetcher).
  const LoaderChoice prefetching{.workers = 4, .pinned = true, .prefetch = true};
  if (copies) choices.push_back(prefetching);
  const LoaderChoice mine = copies ? yours : LoaderChoice{yours.workers, false};
  if (std::find(choices.begin(), choices.end(), mine) == choices.end()) choices.push_back(mine);
  std::sort(choices.begin(), choices.end());

  // The loaders take turns, `repeats` rounds of all of them, so that a busy moment of the machine lands
  // on no loader in particular. Each loader's speed is the median of its runs, with their range; the
  // median run stands for it in the table's other columns and the timelines.
  const int repeats = static_cast<int>(p.getInt("repeats"));
  std::map<LoaderChoice, std::vector<LoaderRun>> allRuns;
  for (int round = 0; round < repeats && !stop.stopRequested(); ++round) {
    for (std::size_t i = 0; i < choices.size() && !stop.stopRequested(); ++i) {
      allRuns[choices[i]].push_back(runLoader(s, choices[i]));
      sink.progress(static_cast<double>(round * choices.size() + i + 1), static_cast<double>(repeats * choices.size()),
                    choiceText(choices[i], copies) + " (round " + std::to_string(round + 1) + " of " + std::to_string(repeats) + ")");
    }
  }
  if (stop.stopRequested()) return;
  std::map<LoaderChoice, LoaderRun> runs;       // the median run of each loader
  std::map<LoaderChoice, Spread> speeds;        // steps/s over its runs
  for (const auto& [c, rs] : allRuns) {
    std::vector<double> seconds, rates;
    for (const LoaderRun& r : rs) {
      seconds.push_back(r.seconds);
      rates.push_back(static_cast<double>(r.steps) / r.seconds);
    }
    runs[c] = rs[medianIndex(seconds)];
    speeds[c] = spreadOf(rates);
  }

  auto stepsPerSecond = [&](const LoaderRun& r) { return speeds.at(r.choice).median; };
  auto idleShare = [](const LoaderRun& r) { return 100.0 * (1.0 - r.busySeconds / r.seconds); };
  auto waitingShare = [](const LoaderRun& r) { return 100.0 * r.waitingSeconds / r.seconds; };
  const double ceiling = stepsPerSecond(runs.at(kResident));
  auto ofCeiling = [&](const LoaderRun& r) { return 100.0 * stepsPerSecond(r) / ceiling; };
  const std::string deviceName = emulated ? "the emulated GPU" : gpu ? "the GPU" : "the CPU";

  // 1. The table: every loader.
  std::vector<lab::Axis> columns = {{"loader", ""}, {"steps/s", ""}, {"range", "steps/s"}, {"of the ceiling", "%"}, {"device idle", "%"}, {"loop waiting", "%"}};
  if (copies) columns.push_back({"copy in, a batch", "us"});
  columns.push_back({"mean loss", ""});
  sink.view({.id = "loaders", .title = "Each loader: how fast, and how idle the device was", .kind = lab::ViewKind::Table,
             .columns = columns,
             .note = "Every loader ran " + std::to_string(repeats) + " times, the loaders taking turns: steps/s is the median run's, "
                     "range the slowest and the fastest run -- where two loaders' ranges overlap, their difference is within this "
                     "machine's noise; the other columns are the median run's. Of the ceiling: the speed against the loop whose "
                     "batches were already on the device -- what feeding can reach at best (a loader a little above 100% is the "
                     "noise). Device idle: the share of the loop during which " + deviceName + " did no work" +
                     (emulated ? " (its stream times the kernels it runs; they run slower while workers share your cores, which "
                                 "makes it look busier -- judge by the speed)."
                      : gpu    ? " (on its own clock: events at each step's start and end, so a wait inside a step counts as work "
                                 "and this is a lower bound)."
                               : " (the step runs on the loop's thread: the rest of the time the loop loads or waits; the steps run "
                                 "slower while workers share your cores -- judge by the speed).") +
                     " Loop waiting: the share of the loop spent waiting for the next batch (with 0 workers: loading it); with "
                     "pinned copies the loop no longer waits inside .to(), so it runs ahead and waits here instead." +
                     (copies ? " Copy in: from the stream reaching a step's copies to their end; a blocking copy also holds the "
                               "loop's round trip between its two copies. The prefetcher's: its copy stream's time for them, "
                               "beside the compute stream's work." : "") +
                     " Every loader yields the same batches in the same order, so the losses agree: only the feeding differs."});
  for (const auto& [c, r] : runs) {
    const Spread& speed = speeds.at(c);
    std::vector<lab::Value> cells = {choiceText(c, copies) + (c == mine ? " (yours)" : ""), speed.median,
                                     rangeText(speed, 1.0, 4), ofCeiling(r), idleShare(r),
                                     waitingShare(r)};
    if (copies) cells.push_back(1e6 * r.copySeconds / static_cast<double>(r.steps));
    cells.push_back(r.meanLoss);
    sink.row("loaders", cells);
  }

  // 2. The bars: how busy the device was, by workers (and pinning).
  std::vector<lab::SeriesSpec> series = {{"pageable", copies ? "pageable" : "device busy"}};
  if (copies) series.push_back({"pinned", "pinned + non_blocking"});
  if (copies) series.push_back({"prefetch", "pinned, copied ahead on a copy stream"});
  sink.view({.id = "busy", .title = "How busy the device was", .kind = lab::ViewKind::Bars, .y = {"device busy", "%"},
             .yFromZero = true, .series = series,
             .note = std::string("100% minus the device's idle share") +
                     (gpu && !emulated ? ": an upper bound here (waits inside a step count as busy); nvidia-smi's GPU-Util "
                                         "counts only the time kernels run."
                                       : ": what nvidia-smi's GPU-Util counts, the time the device was running work.")});
  for (const auto& [c, r] : runs) {
    if (!c.resident) sink.bar("busy", c.prefetch ? "prefetch" : c.pinned ? "pinned" : "pageable", workersText(c.workers), 100.0 - idleShare(r));
  }

  // 3. Two timelines: the loop loading its own batches from pageable memory, and yours.
  const std::string gpuLane = emulated ? "emulated GPU stream" : "GPU stream";
  auto timeline = [&](const std::string& id, const std::string& title, const LoaderRun& r) {
    std::vector<lab::SeriesSpec> lanes;
    lanes.push_back(r.choice.workers == 0 ? lab::SeriesSpec{kLaneLoop, "loop: loads"} : lab::SeriesSpec{kLaneWait, "loop: waits for a batch"});
    lanes.push_back({kLaneStep, !gpu ? "loop: runs the step" : r.choice.prefetch ? "loop: queues the step" : "loop: copies, queues the step"});
    for (const std::string& w : r.workerLanes) lanes.push_back({w, w + ": loads"});
    if (gpu && r.choice.prefetch) {
      lanes.push_back({kLaneCopyStream, (emulated ? "emulated GPU copy stream" : "GPU copy stream") + std::string(": copy in, ahead")});
      lanes.push_back({kLaneCompute, gpuLane + ": compute"});
    } else if (gpu) {
      lanes.push_back({kLaneCopy, gpuLane + ": copy in"});
      lanes.push_back({kLaneCompute, gpuLane + ": compute"});
    }
    sink.view({.id = id, .title = title, .kind = lab::ViewKind::Timeline, .x = {{"time", "s"}}, .series = lanes,
               .note = "The loop's first " + std::to_string(kTimelineSteps) + " steps, from the moment it asked for the first batch. " +
                       (gpu ? "The stream's spans are on the device's clock (events recorded on it); where the stream lane is "
                              "empty the device had nothing to do."
                            : "On the CPU the step runs on the loop's own thread: while the loop loads, nothing trains.")});
    for (const lab::Span& span : r.timeline) sink.span(id, span.lane, span.label, span.start, span.end);
  };
  const LoaderChoice naive{0, false};
  timeline("timeline-naive", "Timeline: " + choiceText(naive, copies), runs.at(naive));
  timeline("timeline-yours", "Timeline (yours): " + choiceText(mine, copies), runs.at(mine));
  if (copies) timeline("timeline-prefetch", "Timeline: " + choiceText(prefetching, copies), runs.at(prefetching));

  // 4. The measurements the lesson's claims and challenge rest on.
  const LoaderChoice fourWorkers{4, copies};
  const LoaderRun& own = runs.at(mine);
  const LoaderRun& none = runs.at(LoaderChoice{0, copies});
  const LoaderRun& four = runs.at(fourWorkers);
  double lossSpread = 0;  // the ceiling cycles over fewer batches: its loss is its own
  for (const auto& [c, r] : runs)
    if (!c.resident) lossSpread = std::max(lossSpread, std::abs(r.meanLoss - own.meanLoss));
  sink.measurement("training step time", step * 1000.0, "ms");
  sink.measurement("read wait per batch", s.readSeconds * 1000.0, "ms");
  sink.measurement("workers (yours)", yours.workers, "");
  sink.measurement("steps/s (yours)", stepsPerSecond(own), "steps/s");
  sink.measurement("steps/s with the batches already on the device", ceiling, "steps/s");
  sink.measurement("speed, % of the ceiling (yours)", ofCeiling(own), "%");
  sink.measurement("speed, % of the ceiling, 0 workers", ofCeiling(none), "%");
  sink.measurement("speed, % of the ceiling, 4 workers", ofCeiling(four), "%");
  double fastest = 0;
  for (const auto& [c, r] : runs)  // the loaders the learner can choose: the prefetcher is shown, not offered
    if (!c.resident && !c.prefetch) fastest = std::max(fastest, stepsPerSecond(r));
  sink.measurement("speed, % of the fastest loader (yours)", 100.0 * stepsPerSecond(own) / fastest, "%");
  sink.measurement("device idle share (yours)", idleShare(own), "%");
  sink.measurement("device busy share (yours)", 100.0 - idleShare(own), "%");
  sink.measurement("loop waiting share (yours)", waitingShare(own), "%");
  sink.measurement("device idle share, 0 workers", idleShare(none), "%");
  sink.measurement("device idle share, 4 workers", idleShare(four), "%");
  sink.measurement("speed-up from 4 workers", stepsPerSecond(four) / stepsPerSecond(none), "x");
  for (const auto& [c, name] : std::vector<std::pair<LoaderChoice, std::string>>{{mine, "yours"}, {LoaderChoice{0, copies}, "0 workers"},
                                                                                 {fourWorkers, "4 workers"}, {kResident, "the ceiling"}}) {
    sink.measurement("steps/s, slowest run, " + name, speeds.at(c).low, "steps/s");
    sink.measurement("steps/s, fastest run, " + name, speeds.at(c).high, "steps/s");
  }
  sink.measurement("speed-up from 1 worker", stepsPerSecond(runs.at(LoaderChoice{1, copies})) / stepsPerSecond(none), "x");
  sink.measurement("largest difference between the loaders' mean losses", lossSpread, "");
  if (copies) {
    const LoaderRun &pageable = runs.at(LoaderChoice{4, false}), &pinned = runs.at(LoaderChoice{4, true});
    sink.measurement("copy time per batch, pageable", 1e6 * pageable.copySeconds / static_cast<double>(pageable.steps), "us");
    sink.measurement("copy time per batch, pinned", 1e6 * pinned.copySeconds / static_cast<double>(pinned.steps), "us");
    sink.measurement("device idle share, 4 workers, pageable", idleShare(pageable), "%");
    sink.measurement("device idle share, 4 workers, pinned", idleShare(pinned), "%");
    sink.measurement("steps/s, 4 workers, pageable", stepsPerSecond(pageable), "steps/s");
    sink.measurement("steps/s, 4 workers, pinned", stepsPerSecond(pinned), "steps/s");
    const LoaderRun& ahead = runs.at(prefetching);
    sink.measurement("steps/s, 4 workers, copy stream", stepsPerSecond(ahead), "steps/s");
    sink.measurement("copy time per batch, copy stream", 1e6 * ahead.copySeconds / static_cast<double>(ahead.steps), "us");
    sink.measurement("copy time overlapping the steps, copy stream",
                     ahead.copySeconds > 0 ? 100.0 * ahead.overlappedCopySeconds / ahead.copySeconds : 0.0, "%");
  }
  sink.record("feeding", {{"step_ms", step * 1000.0}, {"workers", yours.workers}, {"pin_memory", yours.pinned},
                          {"steps_per_s", stepsPerSecond(own)}, {"device_idle_pct", idleShare(own)}, {"device", s.device.str()}});

  // 5. In words: what the medians say, and only what the runs' spreads allow.
  auto stepTimes = [&](const LoaderChoice& c) { return reciprocalOf(speeds.at(c)); };  // seconds per step
  const Difference againstCeiling = compare(speeds.at(mine), speeds.at(kResident));
  std::string said = "With " + choiceText(mine, copies) + " (yours): " + spreadText(speeds.at(mine), "steps/s", 4) + ", " +
                     formatFixed(ofCeiling(own), 0) + "% of the median speed with the batches already on the device" +
                     (againstCeiling == Difference::Higher
                          ? " -- faster than it in every run, which no loader truly is: the two differ by how your CPU scheduled its threads"
                      : ofCeiling(own) > 100 ? " (as fast, within the runs' noise)"
                                             : "") +
                     "; " + deviceName + " idle " + formatFixed(idleShare(own), 1) + "% of the time. The loop loading its own batches: idle " +
                     formatFixed(idleShare(none), 1) + "%; 4 workers: idle " + formatFixed(idleShare(four), 1) + "%. A step with 4 workers " +
                     comparedTimes(stepTimes(fourWorkers), stepTimes(LoaderChoice{0, copies}), "a step with 0 workers") + ".";
  if (copies) {
    said += " With 4 workers, a step fed pinned batches with non_blocking copies " +
            comparedTimes(stepTimes(LoaderChoice{4, true}), stepTimes(LoaderChoice{4, false}), "one fed pageable batches") + ".";
  }
  if (emulated) {
    said += " This is the emulated GPU: its stream is a thread on your CPU, so the workers' decoding competes with its kernels for your "
            "cores; a GPU computes elsewhere and needs feeding all the faster.";
  }
  sink.info(said);
}

}  // namespace gpulab::labs
