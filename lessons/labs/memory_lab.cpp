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

#include <chrono>

#include "engine/autograd/grad_mode.h"
#include "engine/core/errors.h"
#include "engine/core/number_format.h"
#include "engine/data/dataloader.h"
#include "engine/memory/memory.h"
#include "lessons/labs/training.h"

namespace gpulab::labs {

std::vector<lab::ParamSpec> MemoryLab::params() const {
  using namespace lab;
  return {
      choiceParam("mode", "oom-sweep", {"oom-sweep", "report"}, "Sweep to an out-of-memory error and recover, or report allocated vs reserved vs driver memory"),
      choiceParam("dataset", "fashion-mnist", {"regression", "fashion-mnist"}, "Data set the model trains on"),
      textParam("hidden", "256,128,100", "Hidden layer widths when the sweep grows the batch", checkHiddenWidths),
      choiceParam("grow", "batch", {"batch", "width"}, "What the sweep doubles: the batch size or the hidden width"),
      intParam("start_batch", 64, 1, 1 << 20, "First batch size of the sweep (and the batch when growing the width)"),
      intParam("start_width", 256, 1, 1 << 16, "First hidden width when growing the width (two hidden layers)"),
      intParam("steps", 2, 1, 1000, "Training steps per attempt"),
      boolParam("accumulate", true, "Recover with gradient accumulation, keeping the effective batch"),
      intParam("cap_mb", 100, 1, 1 << 24, "Memory the sweep may use beyond what is in use when it starts (sets the budget or fraction unless given)"),
      intParam("budget", 0, 0, std::int64_t{1} << 50, "Emulated CPU memory budget in bytes (0: in use + cap_mb)"),
      floatParam("fraction", 0.0, 0.0, 1.0, "CUDA per-process memory fraction (0: from cap_mb)"),
      textParam("device", "auto", "auto (GPU if usable), cpu, cuda or cuda:N", checkDeviceString),
      intParam("seed", 0, 0, 2147483647, "Seed for data, initialisation and shuffling"),
  };
}

namespace {

using Clock = std::chrono::steady_clock;

// Puts the device's cap back as it was when the lab ends, however it ends.
class CapGuard {
 public:
  explicit CapGuard(CachingAllocator& a) : a_(a), limit_(a.limitBytes()), fraction_(a.memoryFraction()) {}
  ~CapGuard() {
    a_.setLimitBytes(limit_);
    a_.setMemoryFraction(fraction_);
  }
  CapGuard(const CapGuard&) = delete;
  CapGuard& operator=(const CapGuard&) = delete;

 private:
  CachingAllocator& a_;
  std::int64_t limit_;
  double fraction_;
};

class Session {
 public:
  Session(const lab::Params& p, lab::MetricSink& sink, const lab::StopToken& stop)
      : p_(p), sink_(sink), stop_(stop), device_(resolveDevice(p.getString("device"))),
        classification_(p.getString("dataset") == "fashion-mnist"), seed_(static_cast<std::uint64_t>(p.getInt("seed"))) {
    data_ = classification_ ? data::loadFashionMnist(true) : data::makeRegressionDataset(65536, 16, 0.1, seed_);
  }

  Device device() const { return device_; }
  std::int64_t steps() const { return steps_; }
  std::int64_t datasetSize() const { return data_->size(); }

  // Trains a fresh model for `steps` optimizer steps; returns the last step's loss. Every tensor it
  // makes is gone when it returns or throws.
  double attempt(std::int64_t batch, const std::vector<std::int64_t>& hidden, int accumulate, std::int64_t steps) {
    MemoryEventRecorder recorder(device_);  // the first step's summary includes the model's parameters
    Generator gen(seed_);
    auto model = makeMlp(*data_, hidden, classification_ ? 10 : 1, gen);
    {
      MemoryCategoryScope tag(MemoryCategory::Parameter);
      model->to(device_);
    }
    auto optimizer = makeOptimizer("adam", model->parameters(), 1e-3, 0.0, 0.0);
    data::DataLoader loader(data_, {.batch_size = batch, .shuffle = true, .drop_last = true, .seed = seed_});
    auto it = loader.begin();
    double lastLoss = 0;
    for (std::int64_t s = 0; s < steps && !stop_.stopRequested(); ++s) {
      setMemoryStep(++steps_);
      reset_peak_memory_stats(device_);
      double lossSum = 0;
      for (int a = 0; a < accumulate && !stop_.stopRequested(); ++a) {  // Stop within a micro-batch
        if (it == loader.end()) it = loader.begin();
        lossSum += accumulateGradients(*model, classification_, *it, device_, accumulate, false).item();
        ++it;
      }
      if (stop_.stopRequested()) break;  // a partly accumulated step is not taken
      optimizer->step();
      optimizer->zero_grad();
      lastLoss = lossSum / accumulate;
      sink_.onMemory(summarise(recorder.drain()));
    }
    return lastLoss;
  }

  lab::MemorySample summarise(const std::vector<MemoryEvent>& events) const {
    lab::MemorySample m;
    m.step = steps_;
    m.time_s = memoryClockSeconds();
    const MemoryStats s = memory_stats(device_);
    m.allocated_bytes = s.allocated_bytes.current;
    m.reserved_bytes = s.reserved_bytes.current;
    m.peak_allocated_bytes = s.allocated_bytes.peak;
    for (const MemoryEvent& e : events) {
      switch (e.kind) {
        case MemoryEventKind::Allocate:
          ++m.allocs;
          m.allocated_by_category[static_cast<int>(e.category)] += e.size;
          break;
        case MemoryEventKind::Free: ++m.frees; break;
        case MemoryEventKind::SegmentReserve: ++m.segments_reserved; break;
        case MemoryEventKind::SegmentRelease: ++m.segments_released; break;
        default: break;
      }
    }
    return m;
  }

  void oomSweep();
  void report();

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
};

void Session::setCap(CachingAllocator& memory) {
  const std::int64_t inUse = memory.stats().reserved_bytes.current;
  const std::int64_t cap = p_.getInt("cap_mb") << 20;
  if (device_.isCpu()) {
    const std::int64_t budget = p_.getInt("budget") > 0 ? p_.getInt("budget") : inUse + cap;
    memory.setLimitBytes(budget);
    sink_.onMessage(lab::MessageKind::Info, "Emulated CPU memory budget: " + formatBytes(budget) + " (" + formatBytes(inUse) +
                                                " already in use, the training set included). A GPU's limit is its memory; "
                                                "on the CPU GPU Lab emulates one so the lesson runs anywhere.");
  } else {
    const std::int64_t total = memory.capacity().total;
    const double fraction = p_.getFloat("fraction") > 0 ? p_.getFloat("fraction")
                                                        : std::min(1.0, static_cast<double>(inUse + cap) / static_cast<double>(total));
    memory.setMemoryFraction(fraction);
    sink_.onMessage(lab::MessageKind::Info, "set_per_process_memory_fraction(" + formatNumber(fraction) + "): at most " +
                                                formatBytes(static_cast<std::int64_t>(fraction * static_cast<double>(total))) +
                                                " of " + device_.str() + "'s " + formatBytes(total));
  }
}

void Session::oomSweep() {
  CachingAllocator& memory = allocatorFor(device_);
  CapGuard restore(memory);
  setCap(memory);
  const bool growWidth = p_.getString("grow") == "width";
  std::int64_t batch = p_.getInt("start_batch"), width = p_.getInt("start_width");
  const std::vector<std::int64_t> hidden = parseWidths(p_.getString("hidden"));
  auto hiddenFor = [&](std::int64_t w) { return growWidth ? std::vector<std::int64_t>{w, w} : hidden; };

  // 1. Double until it does not fit.
  std::optional<lab::OutOfMemoryReport> oom;
  while (!stop_.stopRequested()) {
    if (batch > datasetSize() || width > (1 << 16)) {
      sink_.onMessage(lab::MessageKind::Warning, "No out-of-memory error up to batch " + std::to_string(std::min(batch, datasetSize())) +
                                                     (growWidth ? ", width " + std::to_string(width) : std::string()) +
                                                     ": lower cap_mb (or the budget/fraction) to reach the limit.");
      return;
    }
    const std::int64_t baseline = memory_allocated(device_);
    try {
      attempt(batch, hiddenFor(width), 1, p_.getInt("steps"));
      sink_.onMessage(lab::MessageKind::Info, "batch " + std::to_string(batch) + (growWidth ? ", width " + std::to_string(width) : std::string()) +
                                                  ": fits, peak " + formatBytes(max_memory_allocated(device_)) + " allocated");
    } catch (const OutOfMemoryError& e) {
      // The failed attempt's tensors were freed while the exception unwound the stack.
      oom = lab::OutOfMemoryReport{batch, growWidth ? width : 0, 1, e.what(), memory_allocated(device_), baseline};
      sink_.onOutOfMemory(*oom);
      break;
    }
    (growWidth ? width : batch) *= 2;
  }
  if (!oom) return;

  // 2. Recover: halve what grew; keep the effective batch with gradient accumulation.
  int accumulate = 1;
  while (!stop_.stopRequested()) {
    if (growWidth) width /= 2;
    else {
      batch /= 2;
      if (p_.getBool("accumulate")) accumulate *= 2;
    }
    if (batch < 1 || width < 1) {
      sink_.onMessage(lab::MessageKind::Warning, "Even the smallest attempt does not fit: raise the cap.");
      return;
    }
    try {
      const double loss = attempt(batch, hiddenFor(width), accumulate, p_.getInt("steps"));
      sink_.onRecovered({batch, growWidth ? width : 0, accumulate, batch * accumulate, loss});
      return;
    } catch (const OutOfMemoryError& e) {
      sink_.onOutOfMemory({batch, growWidth ? width : 0, accumulate, e.what(), memory_allocated(device_), memory_allocated(device_)});
    }
  }
}

lab::MemoryReport::Snapshot snapshot(Device device) {
  lab::MemoryReport::Snapshot s;
  s.allocated_bytes = memory_allocated(device);
  s.reserved_bytes = memory_reserved(device);
  const DriverMemoryInfo driver = driver_memory_info(device);
  if (driver.available) {
    s.driver_device_bytes = driver.device_used;
    s.driver_process_bytes = driver.process_used;
  }
  return s;
}

void Session::report() {
  // Train briefly so the cache holds blocks, then let every tensor go.
  const std::int64_t batch = std::min<std::int64_t>(p_.getInt("start_batch") * 16, datasetSize());
  attempt(batch, parseWidths(p_.getString("hidden")), 1, p_.getInt("steps"));
  lab::MemoryReport r;
  r.device = device_.str();
  r.before = snapshot(device_);
  r.released_bytes = empty_cache(device_);
  r.after = snapshot(device_);
  const DriverMemoryInfo driver = driver_memory_info(device_);
  if (!driver.available) r.driver_note = driver.reason;
  else if (!driver.process_used) r.driver_note = "this process's own use is not available: " + driver.process_reason;
  sink_.onMemoryReport(r);
  sink_.onMessage(lab::MessageKind::Info, memory_summary(device_));
}

}  // namespace

void MemoryLab::run(const lab::Params& p, lab::MetricSink& sink, const lab::StopToken& stop) {
  const auto start = Clock::now();
  Session session(p, sink, stop);
  sink.onMessage(lab::MessageKind::Info, "Memory lab on " + session.device().str());
  reset_peak_memory_stats(session.device());
  if (p.getString("mode") == "report") session.report();
  else session.oomSweep();
  setMemoryStep(0);
  lab::RunSummary summary;
  summary.device = session.device().str();
  summary.steps = session.steps();
  summary.stopped = stop.stopRequested();
  summary.seconds = std::chrono::duration<double>(Clock::now() - start).count();
  const MemoryStats ms = memory_stats(session.device());
  summary.peak_allocated_bytes = ms.allocated_bytes.peak;
  summary.peak_reserved_bytes = ms.reserved_bytes.peak;
  sink.onDone(summary);
}

}  // namespace gpulab::labs
