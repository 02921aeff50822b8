#pragma once
// The lab protocol. A lab is a named experiment that a lesson runs: it declares typed parameters
// (name, type, default, allowed range, description), runs with a set of values, describes what it
// shows through a MetricSink (views, then points, markers, rows, ... streamed into them; see below),
// and checks a StopToken between steps so that Stop takes effect within one step. The GUI and
// gpulab-cli run exactly the same labs and render them generically; neither knows what a lab does.
#include <atomic>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <variant>
#include <vector>


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
  // Text: the values to offer as a choice (the devices this machine has); the validator still decides
  // what is allowed, so a lesson written for "cuda" loads on a machine without a GPU.
  std::vector<std::string> suggestions;
  std::vector<std::string> suggestionLabels;  // what a form shows for each suggestion (empty: the values)
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

// ---- What a lab shows ------------------------------------------------------------------------
//
// The protocol's version. Raise it when an update's fields or their meaning change: a recorded run
// (resources/reference-runs) says the version it was recorded with, and one of another version is
// refused -- record it again -- rather than replayed into views that read its fields otherwise.
inline constexpr int kProtocolVersion = 1;
//
// A lab describes what it shows with a small vocabulary that the GUI and gpulab-cli render without
// knowing the lab. It first declares its views, then streams updates into them:
//
//   View         declared once, before any update names it (a later declaration with the same id
//                replaces it). Its kind says how it is drawn:
//     Line         series of (x, y) points; a view may offer several x axes (step, samples seen,
//                  seconds), then every point and marker carries one x per axis, in that order
//     StackedArea  the same, its series stacked bottom first (memory by category)
//     Bars         grouped bars: categories along x, one bar per series in each
//     Table        rows of cells under the view's columns
//     Timeline     spans [start, end) on named lanes (forward, backward, optimizer step, ...)
//   Point        (x..., y) on a series of a Line or StackedArea view
//   Marker       a labelled vertical line at x... on a plot (an OOM, empty_cache(), a skipped step)
//   Level        a labelled horizontal line at y on a plot (the device's capacity)
//   Bar / Row / Span   a value of a Bars view, a row of a Table, a span of a Timeline
// and, outside the views:
//   RunDevice    where the run computes, with its label ("cuda:0 (emulated GPU — runs on your CPU)"):
//                renderers put it in titles, the status bar and exports
//   Message      the console channel (info, a warning, or an engine error shown on purpose)
//   Measurement  a named number a lesson's claims and challenges rest on ("peak allocated", bytes)
//   Progress     done of total, with a short label; the GUI may pause the lab at one
//   Record       a named, flat set of fields for scripts: `gpulab-cli --json` prints it as
//                {"event": name, fields...} (a field "a.b" nests as {"a": {"b": ...}}). The train and
//                memory labs keep their step / epoch / memory / oom / recovered / report / done events.
//
// Units are plain strings; renderers know "bytes" (shown as KiB/MiB/GiB), "s" and "x"; others are
// printed as they are ("samples/s", "GFLOP/s").
//
// Each update's fields -- their JSON names, which are required -- are listed once, in lab_schema.h: the
// JSON codec and the Python side (a code cell's or a Python lab's lab.view(...), ...) follow it.
using Value = ParamValue;

enum class ViewKind { Line, StackedArea, Bars, Table, Timeline };
enum class SeriesStyle { Line, Dashed, Points, Steps };
enum class MarkerKind { Event, OutOfMemory, EmptyCache, Skipped };
// EngineError: an error the engine raised that the lesson shows on purpose (the device-mismatch
// error, say) -- reported, not fatal to the run.
enum class MessageKind { Info, Warning, EngineError };

struct Axis {
  std::string label;  // "step"
  std::string unit;   // "bytes"; empty for a count
  // Drawn on a logarithmic scale (a sweep over sizes 1, 2, 4, ... 4096); its values must be > 0.
  bool logarithmic = false;
};

struct SeriesSpec {
  std::string id;     // "train"
  std::string label;  // "train loss"
  SeriesStyle style = SeriesStyle::Line;
  bool overlay = false;  // StackedArea: drawn as a line over the stack (reserved, capacity), not stacked
};

struct ViewSpec {
  std::string id;     // "loss"
  std::string title;  // "Loss"
  ViewKind kind = ViewKind::Line;
  std::vector<Axis> x;  // Line, StackedArea: one or more x axes, the first shown by default
  Axis y;               // Line, StackedArea, Bars: the value axis
  bool yFromZero = false;            // the value axis starts at 0 (throughput, memory)
  std::vector<SeriesSpec> series;    // lines, stacked layers (bottom first), bars in a group; lanes
  std::vector<Axis> columns;         // Table: a column's label and unit
  std::string note;                  // shown under the view ("no driver view: NVML is not installed")
};

struct Point {
  std::string view, series;
  std::vector<double> x;  // one per axis of the view
  double y = 0;
};

struct Marker {
  std::string view;
  std::vector<double> x;
  std::string label;  // "OOM at batch 4096"
  MarkerKind kind = MarkerKind::Event;
};

struct Level {
  std::string view, label;  // "capacity"
  double y = 0;
};

struct Bar {
  std::string view, series, category;
  double value = 0;
};

struct Row {
  std::string view;
  std::vector<Value> cells;  // one per column
};

struct Span {
  std::string view, lane, label;
  double start = 0, end = 0;  // seconds
};

struct RunDevice {
  std::string device;  // "cuda:0"
  std::string label;   // "cuda:0 (emulated GPU — runs on your CPU)"
  bool emulated = false;
};

struct Message {
  MessageKind kind = MessageKind::Info;
  std::string text;
};

// A number a lesson's claim rests on, measured during the run ("eval peak under no-grad", bytes).
struct Measurement {
  std::string name;
  double value = 0;
  std::string unit;
};

struct Progress {
  double done = 0, total = 0;  // total 0: unknown
  std::string label;           // "epoch 2/3, loss 0.4312"
};

struct Record {
  std::string event;  // "step"
  std::vector<std::pair<std::string, Value>> fields;
  // The field's value, when the record has it.
  const Value* find(const std::string& name) const;
  // A numeric field as a double (an int, a double, or a bool as 0/1); `fallback` when absent.
  double number(const std::string& name, double fallback = 0) const;
};

using Update = std::variant<ViewSpec, Point, Marker, Level, Bar, Row, Span, RunDevice, Message, Measurement, Progress, Record>;

// Where a lab sends what it shows. Renderers implement send(); labs use the helpers.
class MetricSink {
 public:
  virtual ~MetricSink() = default;
  virtual void send(const Update& update) = 0;
  // What the helpers below call: the update is the sink's to keep. A sink that stores updates (the
  // GUI's batching sink, at tens of thousands of updates a second) moves it instead of copying its
  // strings; by default it is send().
  virtual void sendOwned(Update&& update) { send(update); }

  void view(ViewSpec spec) { sendOwned(std::move(spec)); }
  void point(std::string view, std::string series, std::vector<double> x, double y) {
    sendOwned(Point{std::move(view), std::move(series), std::move(x), y});
  }
  void marker(std::string view, std::vector<double> x, std::string label, MarkerKind kind = MarkerKind::Event) {
    sendOwned(Marker{std::move(view), std::move(x), std::move(label), kind});
  }
  void level(std::string view, std::string label, double y) { sendOwned(Level{std::move(view), std::move(label), y}); }
  void bar(std::string view, std::string series, std::string category, double value) {
    sendOwned(Bar{std::move(view), std::move(series), std::move(category), value});
  }
  void row(std::string view, std::vector<Value> cells) { sendOwned(Row{std::move(view), std::move(cells)}); }
  void span(std::string view, std::string lane, std::string label, double start, double end) {
    sendOwned(Span{std::move(view), std::move(lane), std::move(label), start, end});
  }
  void info(std::string text) { sendOwned(Message{MessageKind::Info, std::move(text)}); }
  void warning(std::string text) { sendOwned(Message{MessageKind::Warning, std::move(text)}); }
  void engineError(std::string text) { sendOwned(Message{MessageKind::EngineError, std::move(text)}); }
  void measurement(std::string name, double value, std::string unit) {
    sendOwned(Measurement{std::move(name), value, std::move(unit)});
  }
  void progress(double done, double total, std::string label = {}) { sendOwned(Progress{done, total, std::move(label)}); }
  void record(std::string event, std::vector<std::pair<std::string, Value>> fields) {
    sendOwned(Record{std::move(event), std::move(fields)});
  }
};

// Names as the JSON form and the renderers spell them: "line", "stacked", "bars", "table", "timeline";
// "line", "dashed", "points", "steps"; "event", "oom", "empty_cache", "skipped"; "info", "warning",
// "engine_error". The parsers return nothing for an unknown name.
std::string toString(ViewKind);
std::string toString(SeriesStyle);
std::string toString(MarkerKind);
std::string toString(MessageKind);
std::optional<ViewKind> parseViewKind(const std::string&);
std::optional<SeriesStyle> parseSeriesStyle(const std::string&);
std::optional<MarkerKind> parseMarkerKind(const std::string&);
std::optional<MessageKind> parseMessageKind(const std::string&);

// The event names the JSON form gives the updates other than Record ("view", "point", "marker",
// "level", "bar", "row", "span", "device", "message", "measurement", "progress"): a Record may not use them.
bool isProtocolEvent(const std::string& event);

// Checks that an update is well formed for the views declared so far (a point names a declared Line
// or StackedArea view and one of its series, with one x per axis; a row has one cell per column;
// ...). Throws ValueError saying what is wrong. The GUI and the CLI check every update they are sent,
// so a lab that breaks the protocol fails its tests rather than drawing nonsense.
class UpdateChecker {
 public:
  void check(const Update& update);
  const ViewSpec* find(const std::string& viewId) const;

 private:
  std::map<std::string, ViewSpec> views_;
};

class StopToken {
 public:
  void requestStop() { stop_.store(true, std::memory_order_relaxed); }
  bool stopRequested() const { return stop_.load(std::memory_order_relaxed); }
  void reset() { stop_.store(false, std::memory_order_relaxed); }

 private:
  std::atomic<bool> stop_{false};
};

// A measurement a lab may send: its name, where '*' stands for a part the settings choose ("*: step
// time" for every precision the amp lab trains in), and its unit.
struct MeasurementSpec {
  std::string name;
  std::string unit;
};
// The first of `specs` whose name matches `name` ('*' matching any run of characters), or nullptr.
const MeasurementSpec* findMeasurement(const std::vector<MeasurementSpec>& specs, const std::string& name);
// Whether a measurement in `unit` is always above zero (a time, a rate): "at most 0" of it is never met.
bool alwaysPositive(const std::string& unit);

class Lab {
 public:
  virtual ~Lab() = default;
  virtual std::string id() const = 0;     // "train"
  virtual std::string title() const = 0;
  // The lab's source file, relative to lessons/ ("09-profiler/profile_lab.py"): the code panel shows it.
  virtual std::string sourcePath() const = 0;
  virtual std::vector<ParamSpec> params() const = 0;
  Params defaults() const { return Params(params()); }
  // Every measurement a run may send. A lesson's challenge may only name one of them (checked when the
  // lesson loads), and the labs' tests fail a run that sends one not listed.
  virtual std::vector<MeasurementSpec> measurements() const = 0;
  // Settings that are each allowed but contradict one another (a convolutional model on data that is
  // not an image): ValueError, before anything runs -- gpulab-cli says so as a usage error (2).
  virtual void check(const Params&) const {}
  // Runs to completion or until `stop` is requested; errors are thrown (the engine's exceptions).
  virtual void run(const Params& params, MetricSink& sink, const StopToken& stop) = 0;
  // Whether its tensors live in this process. A lab that runs in a process of its own (a Python lab,
  // app/course/python_lab.h) leaves nothing here for this process's memory history to record.
  virtual bool runsInThisProcess() const { return true; }
};

}  // namespace gpulab::lab
