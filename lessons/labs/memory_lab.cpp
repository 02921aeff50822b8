// The "memory" lab. The PyTorch it mirrors:
//
//   torch.cuda.set_per_process_memory_fraction(0.01)          # reach the limit quickly
//   batch = 64
//   while True:
//       try:
//           train_steps(batch)                                   # forward, backward, step
//           batch *= 2
//       except torch.cuda.OutOfMemoryError as e:
//           print(e)                                             # "CUDA out of memory. Tried to allocate ..."
//           break
//   batch //= 2; accumulate = 2                                  # same effective batch, half the memory
//   train_steps(batch, accumulate)
//   torch.cuda.empty_cache(); print(torch.cuda.memory_summary())
#include "lessons/labs/memory_lab.h"

#include <algorithm>
#include <chrono>
#include <optional>

#include "engine/autograd/grad_mode.h"
#include "engine/core/errors.h"
#include "engine/core/number_format.h"
#include "engine/data/dataloader.h"
#include "engine/memory/memory.h"
#include "engine/runtime/emulated_gpu.h"
#include "lessons/labs/training.h"

namespace gpulab::labs {

std::vector<lab::ParamSpec> MemoryLab::params() const {
  using namespace lab;
  return {
      choiceParam("mode", "oom-sweep", {"oom-sweep", "report", "fraction", "checkpoint"},
                  "Sweep to an out-of-memory error and recover; report allocated vs reserved vs driver memory through del and "
                  "empty_cache(); fill a per-process memory fraction and measure what it caps; or train with and without "
                  "activation checkpointing"),
      choiceParam("dataset", "fashion-mnist", {"regression", "fashion-mnist"}, "Data set the model trains on"),
      textParam("hidden", "256,128,100", "Hidden layer widths when the sweep grows the batch", checkHiddenWidths),
      choiceParam("grow", "batch", {"batch", "width"}, "What the sweep doubles: the batch size or the hidden width"),
      intParam("start_batch", 64, 1, 1 << 20, "Batch size: the sweep's first (and its batch when growing the width), or the one the report trains with"),
      intParam("start_width", 256, 1, 1 << 16, "First hidden width when growing the width (two hidden layers)"),
      intParam("steps", 2, 1, 1000, "Training steps per attempt"),
      intParam("segments", 2, 1, 64, "Checkpoint mode: the segments the hidden layers are cut into (checkpoint_sequential)"),
      boolParam("accumulate", true, "Recover with gradient accumulation, keeping the effective batch"),
      intParam("cap_mb", 100, 1, 1 << 24, "Memory the sweep may use beyond what is in use when it starts (sets the budget or fraction unless given)"),
      intParam("budget", 0, 0, std::int64_t{1} << 50, "Emulated CPU memory budget in bytes (0: in use + cap_mb)"),
      floatParam("fraction", 0.0, 0.0, 1.0, "Per-process memory fraction of a cuda device (0: from cap_mb)"),
      deviceParam("device", "The device whose memory the lab fills"),
      intParam("seed", 0, 0, 2147483647, "Seed for data, initialisation and shuffling"),
  };
}

namespace {

using Clock = std::chrono::steady_clock;

struct Snapshot {
  std::int64_t allocated = 0, reserved = 0;
  std::optional<std::int64_t> driverProcess, driverDevice;
};

Snapshot snapshot(Device device) {
  Snapshot s{memory_allocated(device), memory_reserved(device), {}, {}};
  const DriverMemoryInfo driver = driver_memory_info(device);
  if (driver.available) {
    s.driverDevice = driver.device_used;
    s.driverProcess = driver.process_used;
  }
  return s;
}

// Live bytes by category, kept from the allocator's event stream (a free carries its block's
// category), and sent as the stacked memory view: one sample per allocation or free, so a step's
// activations rise and fall within it.
class CategoryTimeline {
 public:
  explicit CategoryTimeline(lab::MetricSink& sink) : sink_(sink) {}

  static std::vector<lab::SeriesSpec> series() {
    std::vector<lab::SeriesSpec> out;
    for (int c = 1; c < kMemoryCategoryCount; ++c) out.push_back({memoryCategoryName(static_cast<MemoryCategory>(c)), label(c)});
    out.push_back({memoryCategoryName(MemoryCategory::Other), label(0)});
    out.push_back({"reserved", "reserved (memory_reserved)", lab::SeriesStyle::Dashed, true});
    out.push_back({"peak", "the step's peak", lab::SeriesStyle::Points, true});
    return out;
  }

  // Applies the events and samples after each; `stepPeak` marks a step's peak where the live bytes
  // were highest among these events (at the step's end it sat beside the next step's rise, and read
  // as that step's).
  void apply(const std::vector<MemoryEvent>& events, std::optional<std::int64_t> stepPeak) {
    std::int64_t highest = -1;
    double highestAt = 0;
    for (const MemoryEvent& e : events) {
      const int c = static_cast<int>(e.category);
      if (e.kind == MemoryEventKind::OutOfMemory) lastOutOfMemory_ = e.time_s - origin();
      if (e.kind == MemoryEventKind::Allocate) live_[c] += e.size;
      else if (e.kind == MemoryEventKind::Free) live_[c] -= e.size;
      else if (e.kind != MemoryEventKind::SegmentRelease) continue;  // a release moves the reserved line (empty_cache())
      sample(e.time_s, e.reserved_bytes);
      std::int64_t total = 0;
      for (const std::int64_t bytes : live_) total += bytes;
      if (total > highest) {
        highest = total;
        highestAt = e.time_s;
      }
    }
    if (highest >= 0 && stepPeak) sink_.point("memory", "peak", {highestAt - origin()}, static_cast<double>(*stepPeak));
  }
  double origin() {
    if (origin_ < 0) origin_ = memoryClockSeconds();
    return origin_;
  }
  // When the allocator last refused, on the view's clock: where an OOM marker belongs -- at the failed
  // allocation, on the step's peak, not after the unwinding freed the step's tensors (the plot read
  // ~0 at the marker beside a console that said 57.82 MiB allocated).
  std::optional<double> lastOutOfMemory() const { return lastOutOfMemory_; }

 private:
  static std::string label(int c) {
    std::string name = memoryCategoryName(static_cast<MemoryCategory>(c));
    for (char& ch : name) ch = ch == '_' ? ' ' : ch;
    return name;
  }
  void sample(double time, std::int64_t reserved) {
    const std::vector<double> x{time - origin()};
    for (int c = 0; c < kMemoryCategoryCount; ++c) {
      sink_.point("memory", memoryCategoryName(static_cast<MemoryCategory>(c)), x, static_cast<double>(std::max<std::int64_t>(0, live_[c])));
    }
    sink_.point("memory", "reserved", x, static_cast<double>(reserved));
  }
  lab::MetricSink& sink_;
  std::int64_t live_[kMemoryCategoryCount] = {};
  double origin_ = -1;
  std::optional<double> lastOutOfMemory_;
};

class Session {
 public:
  Session(const lab::Params& p, lab::MetricSink& sink, const lab::StopToken& stop)
      : p_(p), sink_(sink), stop_(stop), device_(resolveDevice(p.getString("device"))),
        classification_(p.getString("dataset") == "fashion-mnist"), seed_(static_cast<std::uint64_t>(p.getInt("seed"))),
        timeline_(sink), explainer_(device_) {}

  Device device() const { return device_; }
  std::int64_t steps() const { return steps_; }
  std::int64_t datasetSize() { return data()->size(); }
  // The training set, loaded when a mode first trains (the fraction mode never does).
  const std::shared_ptr<data::TensorDataset>& data() {
    if (!data_) data_ = classification_ ? data::loadFashionMnist(true) : data::makeRegressionDataset(65536, 16, 0.1, seed_);
    return data_;
  }

  // The view every mode shows: memory by category over time, with reserved, each step's peak and the cap.
  void declareViews() {
    sink_.view({.id = "memory", .title = "Memory on " + device_.str() + " by category", .kind = lab::ViewKind::StackedArea,
                .x = {{"time", "s"}}, .y = {"memory", "bytes"}, .yFromZero = true, .series = CategoryTimeline::series()});
    timeline_.origin();
  }

  // Trains a fresh model for `steps` optimizer steps; returns the last step's loss. Every tensor it
  // makes is gone when it returns or throws (`del model, optimizer`); `whileAlive`, when given, gets
  // the memory just before that.
  double attempt(std::int64_t batch, const std::vector<std::int64_t>& hidden, int accumulate, std::int64_t steps,
                 Snapshot* whileAlive = nullptr, int checkpointSegments = 0) {
    MemoryEventRecorder recorder(device_);  // the first step's events include the model's parameters
    // What a failed step had allocated, and the frees as the attempt's tensors go, are still shown:
    // the events are drained on the way out, however it ends (a destructor must not throw).
    struct Drain {
      Session& s;
      MemoryEventRecorder& r;
      ~Drain() {
        try {
          // The device first: a GPU's (and the emulated GPU's) frees of the attempt's tensors wait for
          // the work queued on them, and only then reach the recorder.
          synchronizeDevice(s.device_);
          s.timeline_.apply(r.drain(), std::nullopt);
        } catch (...) {  // the sink refused an update: the run already fails for a reason of its own
        }
      }
    } drainOnExit{*this, recorder};
    Generator gen(seed_);
    auto model = makeMlp(*data(), hidden, classification_ ? 10 : 1, gen, checkpointSegments);
    {
      MemoryCategoryScope tag(MemoryCategory::Parameter);
      model->to(device_);
    }
    auto optimizer = makeOptimizer("adam", model->parameters(), 1e-3, 0.0, 0.0);
    data::DataLoader loader(data(), {.batch_size = batch, .shuffle = true, .drop_last = true, .seed = seed_});
    auto it = loader.begin();
    double lastLoss = 0;
    lastAttempt_ = {};
    for (std::int64_t s = 0; s < steps && !stop_.stopRequested(); ++s) {
      setMemoryStep(++steps_);
      reset_peak_memory_stats(device_);
      const auto stepStart = Clock::now();
      double lossSum = 0;
      for (int a = 0; a < accumulate && !stop_.stopRequested(); ++a) {  // Stop within a micro-batch
        if (it == loader.end()) it = loader.begin();
        lossSum += accumulateGradients(*model, classification_, *it, device_, {.accumulate = accumulate}).item();
        ++it;
      }
      if (stop_.stopRequested()) break;  // a partly accumulated step is not taken
      optimizer->step();
      optimizer->zero_grad();
      synchronizeDevice(device_);
      lastLoss = lossSum / accumulate;
      // The first step pays for set-up (the cache's first segments, threads): timed from the second.
      if (s > 0) lastAttempt_.seconds.push_back(std::chrono::duration<double>(Clock::now() - stepStart).count());
      lastAttempt_.peak = std::max(lastAttempt_.peak, max_memory_allocated(device_));
      reportStep(recorder.drain());
      explainer_.poll();
      sink_.progress(static_cast<double>(s + 1), static_cast<double>(steps), "batch " + std::to_string(batch) + ", step " + std::to_string(s + 1));
    }
    if (whileAlive) *whileAlive = snapshot(device_);
    return lastLoss;
  }

  // One step's events: the stacked view, and the step's "memory" record for scripts.
  void reportStep(const std::vector<MemoryEvent>& events) {
    const MemoryStats s = memory_stats(device_);
    timeline_.apply(events, s.allocated_bytes.peak);
    std::int64_t allocs = 0, frees = 0, reserves = 0, releases = 0;
    std::int64_t byCategory[kMemoryCategoryCount] = {};
    for (const MemoryEvent& e : events) {
      switch (e.kind) {
        case MemoryEventKind::Allocate:
          ++allocs;
          byCategory[static_cast<int>(e.category)] += e.size;
          break;
        case MemoryEventKind::Free: ++frees; break;
        case MemoryEventKind::SegmentReserve: ++reserves; break;
        case MemoryEventKind::SegmentRelease: ++releases; break;
        default: break;
      }
    }
    std::vector<std::pair<std::string, lab::Value>> fields{
        {"step", steps_}, {"allocated_bytes", s.allocated_bytes.current}, {"reserved_bytes", s.reserved_bytes.current},
        {"peak_allocated_bytes", s.allocated_bytes.peak}, {"allocs", allocs}, {"frees", frees},
        {"segments_reserved", reserves}, {"segments_released", releases}};
    for (int c = 0; c < kMemoryCategoryCount; ++c) {
      if (byCategory[c]) fields.emplace_back(std::string("allocated_by_category.") + memoryCategoryName(static_cast<MemoryCategory>(c)), byCategory[c]);
    }
    sink_.record("memory", fields);
  }

  // The sweep's table: a row per attempt (with the width only when the sweep grows it).
  void declareAttempts(bool withWidth) {
    withWidth_ = withWidth;
    std::vector<lab::Axis> columns{{"batch", ""}};
    if (withWidth) columns.push_back({"width", ""});
    for (const lab::Axis& c : std::initializer_list<lab::Axis>{{"accumulate", ""}, {"effective batch", ""}, {"result", ""}, {"peak allocated", "bytes"}}) {
      columns.push_back(c);
    }
    sink_.view({.id = "attempts", .title = "Attempts", .kind = lab::ViewKind::Table, .columns = columns});
  }
  void attemptRow(std::int64_t batch, std::int64_t width, int accumulate, const std::string& result) {
    std::vector<lab::Value> row{batch};
    if (withWidth_) row.push_back(width);
    for (const lab::Value& v : std::initializer_list<lab::Value>{std::int64_t{accumulate}, batch * accumulate, result, max_memory_allocated(device_)}) {
      row.push_back(v);
    }
    sink_.row("attempts", row);
  }

  void oomSweep();
  void report();
  void fraction();
  void checkpointing();

 private:
  void setCap(CachingAllocator& memory);

  const lab::Params& p_;
  lab::MetricSink& sink_;
  const lab::StopToken& stop_;
  Device device_;
  bool classification_;
  std::uint64_t seed_;
  std::shared_ptr<data::TensorDataset> data_;
  std::int64_t steps_ = 0;
  CategoryTimeline timeline_;
  OomExplainer explainer_;
  bool withWidth_ = false;
  struct AttemptStats {
    std::int64_t peak = 0;         // the highest step peak, bytes
    std::vector<double> seconds;   // each step's time, the first left out
  } lastAttempt_;
};

void Session::setCap(CachingAllocator& memory) {
  const std::int64_t inUse = memory.stats().reserved_bytes.current;
  const std::int64_t cap = p_.getInt("cap_mb") << 20;
  std::int64_t limit = 0;
  if (device_.isCpu()) {
    limit = p_.getInt("budget") > 0 ? p_.getInt("budget") : inUse + cap;
    memory.setLimitBytes(limit);
    sink_.info("Emulated CPU memory budget: " + formatBytes(limit) + " (" + formatBytes(inUse) +
               " already in use, the training set included). A GPU's limit is its memory; on the CPU GPU Lab emulates one "
               "so the lesson runs anywhere.");
  } else {
    const std::int64_t total = memory.capacity().total;
    const double fraction = p_.getFloat("fraction") > 0 ? p_.getFloat("fraction")
                                                        : std::min(1.0, static_cast<double>(inUse + cap) / static_cast<double>(total));
    memory.setMemoryFraction(fraction);
    limit = static_cast<std::int64_t>(fraction * static_cast<double>(total));
    sink_.info("set_per_process_memory_fraction(" + formatNumber(fraction) + "): at most " + formatBytes(limit) + " of " +
               device_.str() + "'s " + formatBytes(total));
  }
  sink_.level("memory", "the cap", static_cast<double>(limit));
}

void Session::oomSweep() {
  data();  // loaded before the cap is set: on the CPU the training set counts as memory already in use
  CachingAllocator& memory = allocatorFor(device_);
  CapGuard restore(memory);
  setCap(memory);
  const bool growWidth = p_.getString("grow") == "width";
  std::int64_t batch = p_.getInt("start_batch"), width = p_.getInt("start_width");
  const std::vector<std::int64_t> hidden = parseWidths(p_.getString("hidden"));
  auto hiddenFor = [&](std::int64_t w) { return growWidth ? std::vector<std::int64_t>{w, w} : hidden; };
  const std::int64_t shownWidth = growWidth ? width : 0;
  declareAttempts(growWidth);

  if (batch > datasetSize()) {
    throw ValueError("start_batch " + std::to_string(batch) + " is larger than the " + p_.getString("dataset") + " training set (" +
                     std::to_string(datasetSize()) + " examples): a batch holds at most the whole set");
  }

  // 1. Double until it does not fit.
  bool oom = false;
  std::int64_t largestFit = 0, triedBatch = 0;
  while (!stop_.stopRequested()) {
    // A doubling past the data set tries the whole set once instead.
    if (!growWidth && batch > datasetSize() && triedBatch < datasetSize()) batch = datasetSize();
    if (batch > datasetSize() || width > (1 << 16)) {
      sink_.warning("No out-of-memory error up to batch " + std::to_string(triedBatch) +
                    (growWidth ? ", width " + std::to_string(width) : std::string()) + ": lower cap_mb (or the budget/fraction) to reach the limit.");
      return;
    }
    const std::int64_t baseline = memory_allocated(device_);
    triedBatch = batch;
    try {
      attempt(batch, hiddenFor(width), 1, p_.getInt("steps"));
      attemptRow(batch, growWidth ? width : shownWidth, 1, "fits");
      largestFit = growWidth ? width : batch;
    } catch (const OutOfMemoryError& e) {
      // The failed attempt's tensors were freed while the exception unwound the stack.
      oom = true;
      attemptRow(batch, growWidth ? width : shownWidth, 1, "out of memory");
      sink_.marker("memory", {timeline_.lastOutOfMemory().value_or(memoryClockSeconds() - timeline_.origin())}, "OOM at " + std::string(growWidth ? "width " : "batch ") +
                                                                            std::to_string(growWidth ? width : batch), lab::MarkerKind::OutOfMemory);
      sink_.engineError(e.what());
      explainer_.explain(sink_);
      sink_.record("oom", {{"batch_size", batch}, {"width", growWidth ? width : std::int64_t{0}}, {"accumulate", std::int64_t{1}},
                           {"message", std::string(e.what())}, {"allocated_after_bytes", memory_allocated(device_)}, {"baseline_bytes", baseline}});
      sink_.info("Allocated after the failed attempt: " + formatBytes(memory_allocated(device_)) + " (before it: " + formatBytes(baseline) +
                 "). This lab makes a fresh model and optimizer for every attempt, so the failed step's tensors and the "
                 "attempt's model went together; in a training loop that keeps its model, the model and the optimizer's "
                 "state stay and only the step's tensors go -- either way the program can carry on.");
      break;
    }
    (growWidth ? width : batch) *= 2;
  }
  if (!oom) return;
  if (largestFit > 0) sink_.measurement(growWidth ? "largest width that fits" : "largest batch that fits", static_cast<double>(largestFit), "");

  // 2. Recover: halve what grew; keep the effective batch with gradient accumulation.
  int accumulate = 1;
  while (!stop_.stopRequested()) {
    if (growWidth) width /= 2;
    else {
      batch /= 2;
      if (p_.getBool("accumulate")) accumulate *= 2;
    }
    if (batch < 1 || width < 1) {
      sink_.warning("Even the smallest attempt does not fit: raise the cap.");
      return;
    }
    try {
      const double loss = attempt(batch, hiddenFor(width), accumulate, p_.getInt("steps"));
      attemptRow(batch, growWidth ? width : shownWidth, accumulate, "recovered");
      sink_.info("Recovered: batch " + std::to_string(batch) + " x " + std::to_string(accumulate) + " accumulation step(s) = effective batch " +
                 std::to_string(batch * accumulate) + (growWidth ? ", width " + std::to_string(width) : std::string()) +
                 ", loss " + formatFixed(loss, 4));
      sink_.record("recovered", {{"batch_size", batch}, {"width", growWidth ? width : std::int64_t{0}}, {"accumulate", std::int64_t{accumulate}},
                                 {"effective_batch", batch * accumulate}, {"loss", loss}});
      sink_.measurement("effective batch after recovery", static_cast<double>(batch * accumulate), "");
      return;
    } catch (const OutOfMemoryError& e) {
      attemptRow(batch, growWidth ? width : shownWidth, accumulate, "out of memory");
      sink_.engineError(e.what());
      sink_.record("oom", {{"batch_size", batch}, {"width", growWidth ? width : std::int64_t{0}}, {"accumulate", std::int64_t{accumulate}},
                           {"message", std::string(e.what())}, {"allocated_after_bytes", memory_allocated(device_)},
                           {"baseline_bytes", memory_allocated(device_)}});
    }
  }
}

void Session::report() {
  // 1. Train for a few steps (the stacked view shows where the memory goes), then `del model,
  //    optimizer`: their tensors return to the cache -- allocated falls, reserved does not.
  // nvidia-smi's view of the device at each moment, where NVML is there to ask (else why not).
  const DeviceTelemetry first = device_telemetry(device_);
  sink_.view({.id = "nvidia-smi", .title = "The device as nvidia-smi sees it", .kind = lab::ViewKind::Table,
              .columns = {{"moment", ""}, {"memory used", "bytes"}, {"memory total", "bytes"}, {"GPU use", "%"},
                          {"temperature", "°C"}, {"power", "W"}},
              .note = first.available ? std::string() : "No nvidia-smi view: " + first.reason});
  auto smi = [&](const std::string& moment) {
    const DeviceTelemetry t = device_telemetry(device_);
    if (!t.available) return t;
    auto optional = [](const auto& v) { return v ? lab::Value(static_cast<double>(*v)) : lab::Value(std::string("n/a")); };
    sink_.row("nvidia-smi", {moment, t.memory_used, t.memory_total, optional(t.gpu_utilization), optional(t.temperature_c), optional(t.power_w)});
    return t;
  };
  const std::int64_t batch = std::min<std::int64_t>(p_.getInt("start_batch"), datasetSize());
  Snapshot trained;
  attempt(batch, parseWidths(p_.getString("hidden")), 1, p_.getInt("steps"), &trained);
  smi("after training");
  const Snapshot deleted = snapshot(device_);
  smi("after del model, optimizer");
  sink_.marker("memory", {memoryClockSeconds() - timeline_.origin()}, "del model, optimizer", lab::MarkerKind::Event);
  // 2. empty_cache(): the cache's unused segments go back to the driver -- reserved falls, in the
  //    stacked view too (its dashed line follows the segments' release events).
  std::int64_t released = 0;
  {
    MemoryEventRecorder releases(device_);
    sink_.marker("memory", {memoryClockSeconds() - timeline_.origin()}, "empty_cache()", lab::MarkerKind::EmptyCache);
    released = empty_cache(device_);
    timeline_.apply(releases.drain(), std::nullopt);
  }
  const Snapshot after = snapshot(device_);
  const DeviceTelemetry last = smi("after empty_cache()");
  if (last.available) {
    sink_.view({.id = "gpu-processes", .title = "Processes on the GPU (nvidia-smi)", .kind = lab::ViewKind::Table,
                .columns = {{"pid", ""}, {"name", ""}, {"memory", "bytes"}, {"this process", ""}},
                .note = last.processes_reason.empty() ? std::string() : "No process list: " + last.processes_reason});
    for (const DeviceTelemetry::Process& proc : last.processes) {
      sink_.row("gpu-processes", {std::int64_t{proc.pid}, proc.name.empty() ? std::string("?") : proc.name, proc.used_bytes, proc.self});
    }
  }
  const DriverMemoryInfo driver = driver_memory_info(device_);
  std::string note;
  if (!driver.available) note = driver.reason;
  else if (!driver.process_used) note = "this process's own use is not available: " + driver.process_reason;

  std::vector<lab::SeriesSpec> series{{"allocated", "allocated"}, {"reserved", "reserved"}};
  if (trained.driverProcess) series.push_back({"driver_process", "this process (nvidia-smi)"});
  if (trained.driverDevice) series.push_back({"driver_device", "whole GPU (nvidia-smi)"});
  sink_.view({.id = "report", .title = "del, then empty_cache()", .kind = lab::ViewKind::Bars, .y = {"memory", "bytes"},
              .yFromZero = true, .series = series, .note = note.empty() ? std::string() : "No driver view: " + note});
  const std::pair<const char*, const Snapshot*> moments[] = {
      {"after training", &trained}, {"after del model, optimizer", &deleted}, {"after empty_cache()", &after}};
  for (const auto& [name, snap] : moments) {
    sink_.bar("report", "allocated", name, static_cast<double>(snap->allocated));
    sink_.bar("report", "reserved", name, static_cast<double>(snap->reserved));
    if (trained.driverProcess && snap->driverProcess) sink_.bar("report", "driver_process", name, static_cast<double>(*snap->driverProcess));
    if (trained.driverDevice && snap->driverDevice) sink_.bar("report", "driver_device", name, static_cast<double>(*snap->driverDevice));
  }
  sink_.measurement("freed by del (allocated)", static_cast<double>(trained.allocated - deleted.allocated), "bytes");
  sink_.measurement("reserved after del", static_cast<double>(deleted.reserved), "bytes");
  sink_.measurement("released by empty_cache()", static_cast<double>(released), "bytes");
  sink_.measurement("reserved after empty_cache()", static_cast<double>(after.reserved), "bytes");
  if (deleted.driverProcess) sink_.measurement("process memory (nvidia-smi) after del", static_cast<double>(*deleted.driverProcess), "bytes");
  if (after.driverProcess) {
    sink_.measurement("process memory (nvidia-smi) after empty_cache()", static_cast<double>(*after.driverProcess), "bytes");
    // What nvidia-smi counts beyond the allocator: the CUDA context and the libraries' workspaces.
    sink_.measurement("nvidia-smi minus reserved after empty_cache()", static_cast<double>(*after.driverProcess - after.reserved), "bytes");
  }

  auto snapFields = [](const std::string& prefix, const Snapshot& s, std::vector<std::pair<std::string, lab::Value>>& out) {
    out.emplace_back(prefix + ".allocated_bytes", s.allocated);
    out.emplace_back(prefix + ".reserved_bytes", s.reserved);
    if (s.driverProcess) out.emplace_back(prefix + ".driver_process_bytes", *s.driverProcess);
    if (s.driverDevice) out.emplace_back(prefix + ".driver_device_bytes", *s.driverDevice);
  };
  std::vector<std::pair<std::string, lab::Value>> fields{{"device", device_.str()}, {"released_bytes", released}};
  snapFields("trained", trained, fields);
  snapFields("before", deleted, fields);  // before empty_cache(): what scripts have always read
  snapFields("after", after, fields);
  if (!note.empty()) fields.emplace_back("driver_note", note);
  sink_.record("report", fields);
  sink_.info("del model, optimizer: allocated " + formatBytes(trained.allocated) + " -> " + formatBytes(deleted.allocated) +
             ", reserved stays " + formatBytes(deleted.reserved) + " (the cache keeps the blocks for reuse). empty_cache() returned " +
             formatBytes(released) + " to the system: reserved is now " + formatBytes(after.reserved) + "." +
             (note.empty() ? "" : " Driver view: " + note));
  sink_.info(memory_summary(device_));
}

// torch.cuda.set_per_process_memory_fraction(f): fill the cap with 8 MiB tensors until the allocator
// refuses, and read the driver's free memory before and after setting it -- the cap limits this
// process's allocator; it reserves nothing and leaves the device (and other processes) as they were.
void Session::fraction() {
  CachingAllocator& memory = allocatorFor(device_);
  CapGuard restore(memory);
  const std::int64_t total = mem_get_info(device_).second;
  const double f = p_.getFloat("fraction") > 0 ? p_.getFloat("fraction") : std::min(1.0, static_cast<double>(p_.getInt("cap_mb") << 20) / static_cast<double>(total));
  const std::int64_t cap = static_cast<std::int64_t>(f * static_cast<double>(total));
  const std::int64_t freeBefore = mem_get_info(device_).first;
  set_per_process_memory_fraction(f, device_);
  const std::int64_t freeAfter = mem_get_info(device_).first;
  sink_.info("set_per_process_memory_fraction(" + formatGeneral(f, 6) + ", \"" + device_.str() + "\"): this process's allocator may hold at most " +
             formatBytes(cap) + " of " + formatBytes(total) + ".");
  sink_.level("memory", "the cap", static_cast<double>(cap));

  // Fill it: plain tensors of 8 MiB, until the allocator refuses. They stand for whatever a program
  // allocates, so they are drawn as "other" -- not as a library's workspace, which they are not.
  constexpr std::int64_t kChunk = 8 << 20;
  std::vector<Tensor> held;
  std::int64_t allocatedAtOom = -1, reservedAtOom = -1;
  {
    MemoryEventRecorder recorder(device_);
    MemoryCategoryScope tag(MemoryCategory::Other);
    while (!stop_.stopRequested() && allocatedAtOom < 0) {
      try {
        held.push_back(Tensor::empty({kChunk / 4}, kFloat32, device_));
      } catch (const OutOfMemoryError& e) {
        allocatedAtOom = memory_allocated(device_);
        reservedAtOom = memory_reserved(device_);
        sink_.marker("memory", {memoryClockSeconds() - timeline_.origin()}, "OOM at the cap", lab::MarkerKind::OutOfMemory);
        sink_.engineError(e.what());
      }
      timeline_.apply(recorder.drain(), std::nullopt);
      sink_.progress(static_cast<double>(memory_allocated(device_)), static_cast<double>(cap), "filling the cap");
    }
    sink_.progress(1, 1, allocatedAtOom < 0 ? "stopped" : "the allocator refused at " + formatBytes(allocatedAtOom));
    const std::optional<std::int64_t> driverAtCap = driver_memory_info(device_).process_used;
    held.clear();
    timeline_.apply(recorder.drain(), std::nullopt);
    if (allocatedAtOom < 0) return;  // stopped

    sink_.view({.id = "fraction", .title = "What the fraction caps", .kind = lab::ViewKind::Bars, .y = {"memory", "bytes"}, .yFromZero = true,
                .series = {{"bytes", "bytes"}},
                .note = "cap: the fraction times the capacity; allocated and reserved: this process's tensors and its allocator's "
                        "segments when the allocator refused (the cap counts reserved memory)."});
    sink_.bar("fraction", "bytes", "cap", static_cast<double>(cap));
    sink_.bar("fraction", "bytes", "allocated", static_cast<double>(allocatedAtOom));
    sink_.bar("fraction", "bytes", "reserved", static_cast<double>(reservedAtOom));
    if (driverAtCap) sink_.bar("fraction", "bytes", "nvidia-smi", static_cast<double>(*driverAtCap));
    sink_.view({.id = "free", .title = "Free memory, before and after the fraction", .kind = lab::ViewKind::Bars, .y = {"memory", "bytes"},
                .yFromZero = true, .series = {{"free", "free"}},
                .note = device_.isCuda() && !cuda::isEmulated(device_)
                            ? "The driver's free memory (cudaMemGetInfo): setting a fraction reserves nothing."
                            : "Free memory here is what " + device_.str() + "'s budget leaves; on a GPU it is the driver's number "
                              "(cudaMemGetInfo), which no fraction changes either."});
    sink_.bar("free", "free", "before", static_cast<double>(freeBefore));
    sink_.bar("free", "free", "after", static_cast<double>(freeAfter));
    sink_.measurement("the cap", static_cast<double>(cap), "bytes");
    sink_.measurement("allocated when the allocator refused", static_cast<double>(allocatedAtOom), "bytes");
    sink_.measurement("reserved when the allocator refused", static_cast<double>(reservedAtOom), "bytes");
    sink_.measurement("free memory before the fraction", static_cast<double>(freeBefore), "bytes");
    sink_.measurement("free memory after the fraction", static_cast<double>(freeAfter), "bytes");
    if (driverAtCap) sink_.measurement("this process as nvidia-smi sees it, at the cap", static_cast<double>(*driverAtCap), "bytes");
    sink_.record("fraction", {{"fraction", f}, {"cap_bytes", cap}, {"allocated_at_oom_bytes", allocatedAtOom}, {"reserved_at_oom_bytes", reservedAtOom},
                              {"free_before_bytes", freeBefore}, {"free_after_bytes", freeAfter}});
  }
}

// torch.utils.checkpoint: the same training steps with every hidden block's activations stored, then
// recomputed in backward -- the peak memory and the step time of both, side by side.
void Session::checkpointing() {
  const std::int64_t batch = std::min<std::int64_t>(p_.getInt("start_batch"), datasetSize());
  const std::vector<std::int64_t> hidden = parseWidths(p_.getString("hidden"));
  const std::int64_t steps = std::max<std::int64_t>(p_.getInt("steps"), 2);  // one step to warm up, one timed at least
  const bool emulated = cuda::isEmulated(device_);
  sink_.view({.id = "checkpoint-memory", .title = "Peak memory of a training step", .kind = lab::ViewKind::Bars, .y = {"memory", "bytes"},
              .yFromZero = true, .series = {{"peak", "peak allocated"}}});
  sink_.view({.id = "checkpoint-time", .title = "Time of a training step", .kind = lab::ViewKind::Bars, .y = {"time", "s"}, .yFromZero = true,
              .series = {{"time", "median step time"}},
              .note = emulated ? "Timed on your CPU: the emulated GPU computes there. The recompute's extra forward pass costs time on a "
                                 "GPU too, but how much is for a GPU to say."
                               : std::string()});
  for (const bool recompute : {false, true}) {
    if (stop_.stopRequested()) return;
    const std::string name = recompute ? "checkpointed (recomputed)" : "stored";
    sink_.info(std::string(recompute ? "With" : "Without") + " checkpointing: batch " + std::to_string(batch) + ", " +
               std::to_string(steps) + " steps");
    attempt(batch, hidden, 1, steps, nullptr, recompute ? static_cast<int>(p_.getInt("segments")) : 0);
    if (lastAttempt_.seconds.empty()) return;  // stopped
    std::vector<double> t = lastAttempt_.seconds;
    std::nth_element(t.begin(), t.begin() + static_cast<std::ptrdiff_t>(t.size() / 2), t.end());
    const double median = t[t.size() / 2];
    sink_.bar("checkpoint-memory", "peak", name, static_cast<double>(lastAttempt_.peak));
    sink_.bar("checkpoint-time", "time", name, median);
    sink_.measurement("peak allocated, activations " + std::string(recompute ? "recomputed" : "stored"),
                      static_cast<double>(lastAttempt_.peak), "bytes");
    sink_.measurement("step time, activations " + std::string(recompute ? "recomputed" : "stored") + (emulated ? " (on the CPU)" : ""),
                      median, "s");
  }
}

}  // namespace

std::vector<lab::MeasurementSpec> MemoryLab::measurements() const {
  return {
      {"largest width that fits", ""},
      {"largest batch that fits", ""},
      {"effective batch after recovery", ""},
      {"freed by del (allocated)", "bytes"},
      {"reserved after del", "bytes"},
      {"released by empty_cache()", "bytes"},
      {"reserved after empty_cache()", "bytes"},
      {"process memory (nvidia-smi) after del", "bytes"},
      {"process memory (nvidia-smi) after empty_cache()", "bytes"},
      {"nvidia-smi minus reserved after empty_cache()", "bytes"},
      {"the cap", "bytes"},
      {"allocated when the allocator refused", "bytes"},
      {"reserved when the allocator refused", "bytes"},
      {"free memory before the fraction", "bytes"},
      {"free memory after the fraction", "bytes"},
      {"this process as nvidia-smi sees it, at the cap", "bytes"},
      {"peak allocated, activations *", "bytes"},
      {"step time, activations *", "s"},
      {"peak allocated", "bytes"},
  };
}

void MemoryLab::run(const lab::Params& p, lab::MetricSink& sink, const lab::StopToken& stop) {
  const auto start = Clock::now();
  Session session(p, sink, stop);
  announceDevice(sink, session.device());
  session.declareViews();
  reset_peak_memory_stats(session.device());
  if (p.getString("mode") == "report") session.report();
  else if (p.getString("mode") == "fraction") session.fraction();
  else if (p.getString("mode") == "checkpoint") session.checkpointing();
  else session.oomSweep();
  setMemoryStep(0);
  const MemoryStats ms = memory_stats(session.device());
  sink.measurement("peak allocated", static_cast<double>(ms.allocated_bytes.peak), "bytes");
  sink.record("done", {{"device", session.device().str()}, {"steps", session.steps()}, {"stopped", stop.stopRequested()},
                       {"seconds", std::chrono::duration<double>(Clock::now() - start).count()},
                       {"peak_allocated_bytes", ms.allocated_bytes.peak}, {"peak_reserved_bytes", ms.reserved_bytes.peak}});
}

}  // namespace gpulab::labs
