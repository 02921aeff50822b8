#pragma once
// The lab protocol. A lab is a named experiment that a lesson runs: it declares typed parameters
// (name, type, default, allowed range, description), runs with a set of values, streams what
// happens through a MetricSink, and checks a StopToken between steps so that Stop takes effect
// within one step. The GUI and gpulab-cli run exactly the same labs; neither knows what a lab does.
#include <atomic>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <variant>
#include <vector>

#include "engine/memory/memory_events.h"

namespace gpulab::lab {

enum class ParamType { Int, Float, Bool, Choice, Text };

using ParamValue = std::variant<std::int64_t, double, bool, std::string>;

// Checks a Text parameter's value where it is set (a lesson file at load, a command line, a form):
// throws ValueError saying what is wrong and what is allowed, without the value or the parameter's
// name ("Expected one of cpu, cuda device type at start of device string: gpu"); Params adds
// "invalid value 'gpu' for parameter 'device': " in front.
using TextValidator = std::function<void(const std::string&)>;

struct ParamSpec {
  std::string name;         // "batch_size"
  ParamType type = ParamType::Int;
  ParamValue defaultValue;
  std::string description;
  double min = 0, max = 0;               // Int and Float
  std::vector<std::string> choices;      // Choice
  TextValidator validate;                // Text; none: any text
};

// Spec builders, so a lab's parameter list reads as a table.
ParamSpec intParam(std::string name, std::int64_t def, std::int64_t min, std::int64_t max, std::string description);
ParamSpec floatParam(std::string name, double def, double min, double max, std::string description);
ParamSpec boolParam(std::string name, bool def, std::string description);
ParamSpec choiceParam(std::string name, std::string def, std::vector<std::string> choices, std::string description);
ParamSpec textParam(std::string name, std::string def, std::string description, TextValidator validate = {});
// What a spec allows, as messages and help texts say it: "a number in [1e-07, 10]", "one of sgd, adam".
std::string describeRange(const ParamSpec& spec);

// Values for a lab's parameters, validated against its specs. Unset parameters take their default.
class Params {
 public:
  explicit Params(std::vector<ParamSpec> specs);
  // Parses `text` for parameter `name` ("64", "1e-3", "true", "adam"; numbers always with a '.',
  // whatever the locale) and checks it (range, choices, the spec's validator); throws ValueError
  // naming the parameter, the value as written and what is allowed.
  void set(const std::string& name, const std::string& text);
  // The same checks for a value that is already typed.
  void setValue(const std::string& name, const ParamValue& value);
  std::int64_t getInt(const std::string& name) const;
  double getFloat(const std::string& name) const;
  bool getBool(const std::string& name) const;
  const std::string& getString(const std::string& name) const;
  const std::vector<ParamSpec>& specs() const { return specs_; }
  const ParamSpec& spec(const std::string& name) const;

 private:
  // Checks `value` against `s` and stores it; `shown` is how errors quote it.
  void check(const ParamSpec& s, const ParamValue& value, const std::string& shown);
  const ParamValue& value(const std::string& name) const;
  std::vector<ParamSpec> specs_;
  std::map<std::string, ParamValue> values_;
};

struct StepMetrics {
  int epoch = 0;
  std::int64_t step = 0;          // global step, from 1
  double loss = 0;                // mean training loss over the steps since the last report
  double samples_per_s = 0;       // over the same window
  std::int64_t allocated_bytes = 0, reserved_bytes = 0;  // the training device's allocator
  double elapsed_s = 0;
  std::optional<std::int64_t> driver_used_bytes;  // this process as the driver (nvidia-smi) sees it
};

struct EpochMetrics {
  int epoch = 0;
  std::int64_t step = 0;  // the global step at the epoch's end
  double train_loss = 0, eval_loss = 0;
  std::optional<double> test_accuracy;  // classification only
  double seconds = 0;
};

struct RunSummary {
  std::optional<double> train_loss, eval_loss;  // labs that train and evaluate
  std::optional<double> test_accuracy;
  double seconds = 0;  // training time, evaluation excluded
  std::int64_t steps = 0;
  std::string device;
  bool stopped = false;  // ended early by the StopToken
  std::int64_t peak_allocated_bytes = 0, peak_reserved_bytes = 0;
};

// Memory over one training step, summarised from the allocator's event stream.
struct MemorySample {
  std::int64_t step = 0;
  double time_s = 0;  // memoryClockSeconds() when the step ended
  std::int64_t allocated_bytes = 0, reserved_bytes = 0, peak_allocated_bytes = 0;
  std::int64_t allocs = 0, frees = 0, segments_reserved = 0, segments_released = 0;
  std::int64_t allocated_by_category[kMemoryCategoryCount] = {};  // bytes of the step's allocations
};

struct OutOfMemoryReport {
  std::int64_t batch_size = 0, width = 0;
  int accumulate = 1;
  std::string message;                // the OutOfMemoryError's full text
  std::int64_t allocated_after_bytes = 0;  // once the failed step's tensors are gone
  std::int64_t baseline_bytes = 0;         // allocated before the attempt
};

struct RecoveryReport {
  std::int64_t batch_size = 0, width = 0;
  int accumulate = 1;
  std::int64_t effective_batch = 0;
  double loss = 0;
};

// Allocated vs reserved vs what the driver reports, before and after empty_cache().
struct MemoryReport {
  struct Snapshot {
    std::int64_t allocated_bytes = 0, reserved_bytes = 0;
    std::optional<std::int64_t> driver_process_bytes, driver_device_bytes;
  };
  std::string device;
  Snapshot before, after;
  std::int64_t released_bytes = 0;
  std::string driver_note;  // why there is no driver view, when there is none
};

// A number a lesson's claim rests on, measured during the run ("eval peak under no-grad", bytes).
struct Measurement {
  std::string name;
  double value = 0;
  std::string unit;
};

// EngineError: an error the engine raised that the lesson shows on purpose (the device-mismatch
// error, say) -- reported, not fatal to the run.
enum class MessageKind { Info, Warning, EngineError };

class MetricSink {
 public:
  virtual ~MetricSink() = default;
  virtual void onStep(const StepMetrics&) {}
  virtual void onEpoch(const EpochMetrics&) {}
  virtual void onDone(const RunSummary&) {}
  virtual void onMessage(MessageKind, const std::string&) {}
  virtual void onMemory(const MemorySample&) {}
  virtual void onOutOfMemory(const OutOfMemoryReport&) {}
  virtual void onRecovered(const RecoveryReport&) {}
  virtual void onMemoryReport(const MemoryReport&) {}
  virtual void onMeasurement(const Measurement&) {}
};

class StopToken {
 public:
  void requestStop() { stop_.store(true, std::memory_order_relaxed); }
  bool stopRequested() const { return stop_.load(std::memory_order_relaxed); }
  void reset() { stop_.store(false, std::memory_order_relaxed); }

 private:
  std::atomic<bool> stop_{false};
};

class Lab {
 public:
  virtual ~Lab() = default;
  virtual std::string id() const = 0;     // "train"
  virtual std::string title() const = 0;
  // The lab's source file, relative to lessons/ ("labs/train_lab.cpp"): the code panel shows it.
  virtual std::string sourcePath() const = 0;
  virtual std::vector<ParamSpec> params() const = 0;
  Params defaults() const { return Params(params()); }
  // Runs to completion or until `stop` is requested; errors are thrown (the engine's exceptions).
  virtual void run(const Params& params, MetricSink& sink, const StopToken& stop) = 0;
};

}  // namespace gpulab::lab
