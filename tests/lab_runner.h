#pragma once
// Runs a lab with some parameters set, as the GUI and the CLI do, and records what it sends.
#include <QtGlobal>

#include <algorithm>
#include <atomic>
#include <exception>
#include <chrono>
#include <functional>
#include <map>
#include <optional>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "app/course/course.h"
#include "app/notebook/python_environment.h"

// The course's labs are Python (lessons/NN-*/…_lab.py): a suite of a lab's claims skips where GPU Lab's
// Python package is not built (GPULAB_PYTHON=OFF, the sanitizer presets), naming why.
#define GPULAB_SKIP_WITHOUT_PYTHON_LABS()                                                            \
  do {                                                                                               \
    if (::gpulab::notebook::buildTreePackageDir().isEmpty())                                         \
      QSKIP("GPU Lab's Python package is not built (GPULAB_PYTHON=OFF): the course's labs are Python"); \
  } while (false)

namespace gpulab::test {

// Keeps every update a lab sends, after checking it against the protocol (lab::UpdateChecker): a
// lab that sends a point for an undeclared view fails the test that runs it. The records scripts
// rely on ("step", "epoch", "done") and the console and measurements are kept apart for convenience.
class RecordingSink : public lab::MetricSink {
 public:
  std::vector<lab::Update> updates;
  std::vector<lab::Record> steps, epochs;  // the "step" and "epoch" records
  std::optional<lab::Record> done;
  std::vector<std::string> messages;
  std::vector<std::pair<lab::MessageKind, std::string>> kinds;
  std::map<std::string, double> measured;
  std::function<void()> onEachStep;  // called after each "step" record
  lab::UpdateChecker checker;

  void send(const lab::Update& u) override {
    checker.check(u);
    updates.push_back(u);
    if (const auto* r = std::get_if<lab::Record>(&u)) {
      if (r->event == "step") {
        steps.push_back(*r);
        if (onEachStep) onEachStep();
      } else if (r->event == "epoch") {
        epochs.push_back(*r);
      } else if (r->event == "done") {
        done = *r;
      }
    } else if (const auto* m = std::get_if<lab::Message>(&u)) {
      messages.push_back(m->text);
      kinds.emplace_back(m->kind, m->text);
    } else if (const auto* m = std::get_if<lab::Measurement>(&u)) {
      measured[m->name] = m->value;
    }
  }

  // Every update of type T, in order.
  template <class T>
  std::vector<T> all() const {
    std::vector<T> out;
    for (const lab::Update& u : updates) {
      if (const auto* t = std::get_if<T>(&u)) out.push_back(*t);
    }
    return out;
  }
  std::vector<lab::Point> points(const std::string& view, const std::string& series) const {
    std::vector<lab::Point> out;
    for (const lab::Point& p : all<lab::Point>()) {
      if (p.view == view && p.series == series) out.push_back(p);
    }
    return out;
  }
  std::vector<lab::Row> rows(const std::string& view) const {
    std::vector<lab::Row> out;
    for (const lab::Row& r : all<lab::Row>()) {
      if (r.view == view) out.push_back(r);
    }
    return out;
  }
  std::vector<lab::Record> records(const std::string& event) const {
    std::vector<lab::Record> out;
    for (const lab::Record& r : all<lab::Record>()) {
      if (r.event == event) out.push_back(r);
    }
    return out;
  }
  std::vector<std::string> errors() const {  // the engine errors shown on purpose
    std::vector<std::string> out;
    for (const auto& [kind, text] : kinds) {
      if (kind == lab::MessageKind::EngineError) out.push_back(text);
    }
    return out;
  }
};

// Passes every update on, and keeps the names of measurements the lab does not declare
// (Lab::measurements(): what a lesson's challenge may name).
class DeclaredMeasurements final : public lab::MetricSink {
 public:
  DeclaredMeasurements(const lab::Lab& theLab, lab::MetricSink& next) : specs_(theLab.measurements()), next_(next) {}
  void send(const lab::Update& u) override {
    if (const auto* m = std::get_if<lab::Measurement>(&u)) {
      const lab::MeasurementSpec* spec = lab::findMeasurement(specs_, m->name);
      if (!spec || spec->unit != m->unit) undeclared.push_back("'" + m->name + "' (" + m->unit + ")");
    }
    next_.send(u);
  }
  std::vector<std::string> undeclared;

 private:
  std::vector<lab::MeasurementSpec> specs_;
  lab::MetricSink& next_;
};

// Runs the lab; throws when it sent a measurement its measurements() does not list with that unit.
inline void runLab(lab::Lab& theLab, const std::map<std::string, std::string>& settings, lab::MetricSink& sink,
                   const lab::StopToken* stop = nullptr) {
  lab::Params params = theLab.defaults();
  for (const auto& [name, value] : settings) params.set(name, value);
  lab::StopToken neverStops;
  DeclaredMeasurements checked(theLab, sink);
  theLab.check(params);
  theLab.run(params, checked, stop ? *stop : neverStops);  // in a Python session of its own: clean devices
  if (!checked.undeclared.empty()) {
    std::string names;
    for (const std::string& n : checked.undeclared) names += (names.empty() ? "" : ", ") + n;
    throw std::logic_error("the " + theLab.id() + " lab sent measurements its measurements() does not list: " + names);
  }
}
// The lab with this id: the Python lab a lesson of the shipped course declares.
inline std::unique_ptr<lab::Lab> makeCourseLab(const std::string& id) {
  static const course::Course shipped = course::loadCourse();
  return shipped.makeLab(QString::fromStdString(id));
}
inline void runLab(const std::string& id, const std::map<std::string, std::string>& settings, lab::MetricSink& sink,
                   const lab::StopToken* stop = nullptr) {
  runLab(*makeCourseLab(id), settings, sink, stop);
}

// A lab run on `device` (the settings' own "device" wins), its updates recorded.
inline RecordingSink runLabOn(const std::string& id, std::map<std::string, std::string> settings, const std::string& device = "cpu") {
  settings.emplace("device", device);
  RecordingSink sink;
  runLab(id, settings, sink);
  return sink;
}

// Runs a lab and presses Stop `afterMs` into the run, as the GUI's Stop and gpulab-cli's Ctrl+C do;
// returns the seconds from the press until the run returned (each loop must look at the stop token
// every ~100 ms of work), or -1 when the run ended before the press (the test then tested nothing).
// `sink` gets what the run sent; a run that throws is rethrown once the presser is done.
inline double secondsToStop(lab::Lab& theLab, const std::map<std::string, std::string>& settings, int afterMs, RecordingSink& sink) {
  lab::StopToken stop;
  std::atomic<bool> pressed{false};
  std::chrono::steady_clock::time_point asked{};
  std::thread presser([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(afterMs));
    asked = std::chrono::steady_clock::now();
    pressed.store(true);
    stop.requestStop();
  });
  std::exception_ptr failed;
  try {
    runLab(theLab, settings, sink, &stop);
  } catch (...) {
    failed = std::current_exception();
  }
  const auto returned = std::chrono::steady_clock::now();
  const bool pressedFirst = pressed.load();
  presser.join();
  if (failed) std::rethrow_exception(failed);
  return pressedFirst ? std::chrono::duration<double>(returned - asked).count() : -1.0;
}

inline double secondsToStop(const std::string& id, const std::map<std::string, std::string>& settings, int afterMs, RecordingSink& sink) {
  return secondsToStop(*makeCourseLab(id), settings, afterMs, sink);
}

// A table cell's number, whichever kind the run sent it as: a Python lab's 2.0 arrives as the
// integer 2 (JSON keeps no difference), a test's in-process lab's as the double it was.
inline double number(const lab::Value& v) {
  if (const auto* i = std::get_if<std::int64_t>(&v)) return static_cast<double>(*i);
  if (const auto* d = std::get_if<double>(&v)) return *d;
  qFatal("a table cell that is not a number");
}

// The value of a measurement the run sent; the test stops, naming it, when the run sent none.
inline double measured(const RecordingSink& sink, const std::string& name) {
  const auto it = sink.measured.find(name);
  if (it == sink.measured.end()) qFatal("no measurement '%s'", name.c_str());
  return it->second;
}

}  // namespace gpulab::test
