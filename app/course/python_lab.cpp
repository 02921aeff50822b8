#include "app/course/python_lab.h"

#include <QFile>
#include <QJsonArray>
#include <QJsonDocument>
#include <QRegularExpression>
#include <QStringList>
#include <climits>
#include <cmath>
#include <exception>
#include <map>
#include <set>

#include "app/course/lab_json.h"
#include "app/notebook/headless_session.h"
#include "engine/core/errors.h"
#include "lessons/labs/training.h"

namespace gpulab::course {
namespace {

std::string str(const QString& s) { return s.toStdString(); }

void checkKeys(const QJsonObject& o, const std::set<QString>& known, const std::string& what) {
  for (const QString& k : o.keys()) {
    if (known.count(k)) continue;
    QStringList names(known.begin(), known.end());
    throw ValueError(what + ": unknown key \"" + str(k) + "\" (" + str(names.join(", ")) + ")");
  }
}

QString text(const QJsonObject& o, const char* key, const std::string& what, bool required = true) {
  const QJsonValue v = o.value(key);
  if (v.isUndefined() && !required) return {};
  if (!v.isString() || (required && v.toString().trimmed().isEmpty())) {
    throw ValueError(what + ": \"" + key + "\" must be a non-empty string");
  }
  return v.toString();
}

double number(const QJsonObject& o, const char* key, const std::string& what) {
  const QJsonValue v = o.value(key);
  if (!v.isDouble()) throw ValueError(what + ": \"" + key + "\" must be a number");
  return v.toDouble();
}

std::int64_t integer(const QJsonObject& o, const char* key, const std::string& what) {
  const double d = number(o, key, what);
  if (d != std::floor(d) || std::fabs(d) > 9007199254740992.0) throw ValueError(what + ": \"" + key + "\" must be a whole number");
  return static_cast<std::int64_t>(d);
}

lab::ParamSpec paramFrom(const QJsonValue& v) {
  if (!v.isObject()) throw ValueError("lab block: each of \"params\" must be an object {\"name\": ..., \"type\": ..., ...}");
  const QJsonObject o = v.toObject();
  const QString name = text(o, "name", "lab block: a parameter");
  // The name is a keyword argument of the lab's run(): a Python identifier.
  static const QRegularExpression identifier(QRegularExpression::anchoredPattern("[A-Za-z_][A-Za-z0-9_]*"));
  static const std::set<QString> keywords{"False", "None", "True", "and", "as", "assert", "async", "await", "break", "class",
                                          "continue", "def", "del", "elif", "else", "except", "finally", "for", "from", "global",
                                          "if", "import", "in", "is", "lambda", "nonlocal", "not", "or", "pass", "raise", "return",
                                          "try", "while", "with", "yield"};
  if (!identifier.match(name).hasMatch() || keywords.count(name)) throw ValueError("lab block: parameter '" + str(name) + "' is not a Python name");
  const std::string what = "lab block: parameter '" + str(name) + "'";
  const QString type = text(o, "type", what);
  const std::string description = str(text(o, "description", what));
  if (type == "int") {
    checkKeys(o, {"name", "type", "default", "min", "max", "description"}, what);
    return lab::intParam(str(name), integer(o, "default", what), integer(o, "min", what), integer(o, "max", what), description);
  }
  if (type == "float") {
    checkKeys(o, {"name", "type", "default", "min", "max", "description"}, what);
    return lab::floatParam(str(name), number(o, "default", what), number(o, "min", what), number(o, "max", what), description);
  }
  if (type == "bool") {
    checkKeys(o, {"name", "type", "default", "description"}, what);
    if (!o.value("default").isBool()) throw ValueError(what + ": \"default\" must be true or false");
    return lab::boolParam(str(name), o.value("default").toBool(), description);
  }
  if (type == "choice") {
    checkKeys(o, {"name", "type", "default", "choices", "description"}, what);
    std::vector<std::string> choices;
    for (const QJsonValue& c : o.value("choices").toArray()) {
      if (!c.isString()) throw ValueError(what + ": \"choices\" must be a list of strings");
      choices.push_back(str(c.toString()));
    }
    if (choices.empty()) throw ValueError(what + ": \"choices\" must be a non-empty list of strings");
    return lab::choiceParam(str(name), str(text(o, "default", what)), choices, description);
  }
  if (type == "text") {
    checkKeys(o, {"name", "type", "default", "description"}, what);
    return lab::textParam(str(name), str(text(o, "default", what, false)), description);
  }
  if (type == "device") {
    checkKeys(o, {"name", "type", "description", "gpu_only"}, what);
    lab::ParamSpec spec = labs::deviceParam(str(name), description);
    // gpu_only: a lab about the GPU side (the CPU is the other side of the same-device rule). The form
    // offers no cpu, and auto means the GPU -- the emulated one without a real one, as the lab runs
    // with emulated_gpu; the lab itself refuses cpu when it is typed.
    if (const QJsonValue g = o.value("gpu_only"); !g.isUndefined() && !g.isBool()) throw ValueError(what + ": \"gpu_only\" must be true or false");
    if (o.value("gpu_only").toBool()) {
      spec.suggestionLabels.front() = "auto (the GPU; without one, the emulated GPU)";
      for (std::size_t i = spec.suggestions.size(); i-- > 0;) {
        if (spec.suggestions[i] != "cpu") continue;
        spec.suggestions.erase(spec.suggestions.begin() + static_cast<std::ptrdiff_t>(i));
        spec.suggestionLabels.erase(spec.suggestionLabels.begin() + static_cast<std::ptrdiff_t>(i));
      }
    }
    return spec;
  }
  throw ValueError(what + ": unknown type '" + str(type) + "' (int, float, bool, choice, text, device)");
}

// A Python literal of `s`: JSON's string escapes are Python's too.
QString pythonString(const std::string& s) {
  const QByteArray json = QJsonDocument(QJsonArray{QString::fromStdString(s)}).toJson(QJsonDocument::Compact);
  return QString::fromUtf8(json.mid(1, json.size() - 2));
}

// What the lab prints, line by line, as console messages (stderr as warnings).
class PrintedLines {
 public:
  explicit PrintedLines(lab::MetricSink& sink) : sink_(sink) {}
  void add(const QString& stream, const QString& text) {
    QString& pending = pending_[stream];
    pending += text;
    for (qsizetype end; (end = pending.indexOf('\n')) >= 0; pending.remove(0, end + 1)) send(stream, pending.left(end));
  }
  void flush() {
    for (auto& [stream, pending] : pending_)
      if (!pending.isEmpty()) send(stream, std::exchange(pending, {}));
  }

 private:
  void send(const QString& stream, const QString& line) {
    if (stream == "stderr") sink_.warning(str(line));
    else sink_.info(str(line));
  }
  lab::MetricSink& sink_;
  std::map<QString, QString> pending_;
};

}  // namespace

PythonLabSpec parseLabDeclaration(const QJsonObject& o, const QString& lessonFolder) {
  checkKeys(o, {"id", "title", "code", "emulated_gpu", "params", "measurements"}, "lab block");
  PythonLabSpec spec;
  spec.id = text(o, "id", "lab block");
  spec.title = text(o, "title", "lab block");
  const QString code = text(o, "code", "lab block");
  static const QRegularExpression fileName(QRegularExpression::anchoredPattern("[A-Za-z0-9_]+\\.py"));
  if (!fileName.match(code).hasMatch()) {
    throw ValueError("lab block: \"code\" must name a .py file in the lesson's folder, like \"device_rule_lab.py\" (found \"" + str(code) + "\")");
  }
  spec.sourcePath = lessonFolder.section('/', -1) + "/" + code;
  spec.path = lessonFolder + "/" + code;
  if (!QFile::exists(spec.path)) throw ValueError("lab block: the lab's code " + str(code) + " is not in the lesson's folder");
  if (const QJsonValue e = o.value("emulated_gpu"); !e.isUndefined()) {
    if (!e.isBool()) throw ValueError("lab block: \"emulated_gpu\" must be true or false");
    spec.emulatedGpu = e.toBool();
  }
  if (!o.value("params").isArray()) throw ValueError("lab block: \"params\" must be a list of parameters");
  std::set<std::string> names;
  for (const QJsonValue& v : o.value("params").toArray()) {
    spec.params.push_back(paramFrom(v));
    if (!names.insert(spec.params.back().name).second) throw ValueError("lab block: parameter '" + spec.params.back().name + "' is declared twice");
  }
  try {
    lab::Params defaults(spec.params);  // each default must be an allowed value
    for (const lab::ParamSpec& p : spec.params) defaults.setValue(p.name, p.defaultValue);
  } catch (const ValueError& e) {
    throw ValueError(std::string("lab block: ") + e.what());
  }
  if (!o.value("measurements").isArray()) throw ValueError("lab block: \"measurements\" must be a list of {\"name\": ..., \"unit\": ...}");
  for (const QJsonValue& v : o.value("measurements").toArray()) {
    const QJsonObject m = v.toObject();
    checkKeys(m, {"name", "unit"}, "lab block: a measurement");
    spec.measurements.push_back({str(text(m, "name", "lab block: a measurement")), str(text(m, "unit", "lab block: a measurement", false))});
  }
  return spec;
}

QString PythonLab::callFor(const lab::Params& params) {
  QStringList args;
  for (const lab::ParamSpec& s : params.specs()) {
    QString value;
    switch (s.type) {
      case lab::ParamType::Int: value = QString::number(params.getInt(s.name)); break;
      case lab::ParamType::Float: value = "float(" + pythonString(QString::number(params.getFloat(s.name), 'g', 17).toStdString()) + ")"; break;
      case lab::ParamType::Bool: value = params.getBool(s.name) ? "True" : "False"; break;
      case lab::ParamType::Choice:
      case lab::ParamType::Text: value = pythonString(params.getString(s.name)); break;
    }
    args << QString::fromStdString(s.name) + "=" + value;
  }
  return "run(" + args.join(", ") + ")";
}

namespace {

// A Python exception as the engine's exception of the same kind (what the CLI names and --json
// reports): its own line first, what a one-line report shows, then where it came from.
[[noreturn]] void rethrowPythonError(const notebook::CellResult& r) {
  const std::string where = r.traceback.isEmpty() ? std::string() : "\n\n" + str(r.traceback.trimmed());
  const std::string message = str(r.message) + where;
  if (r.errorType == "ValueError") throw ValueError(message);  // settings the lab refuses, as a C++ lab's
  if (r.errorType == "IndexError") throw IndexError(message);
  if (r.errorType == "NotImplementedError") throw NotImplementedError(message);
  if (r.errorType == "OutOfMemoryError") throw OutOfMemoryError(message);
  if (r.errorType == "OSError" || r.errorType == "FileNotFoundError") throw IOError(message);
  throw Error(str(r.errorType) + ": " + message);  // RuntimeError's message, or another type named
}

}  // namespace

void PythonLab::run(const lab::Params& params, lab::MetricSink& sink, const lab::StopToken& stop) {
  QFile file(spec_.path);
  if (!file.open(QIODevice::ReadOnly)) throw Error("cannot read the " + id() + " lab's code, " + str(spec_.path));
  const QString source = QString::fromUtf8(file.readAll());
  notebook::HeadlessSession session(spec_.emulatedGpu, 60000, [&] { return stop.stopRequested(); });
  if (stop.stopRequested()) return;  // stopped while Python started
  if (!session.ok()) throw Error("the " + id() + " lab runs in Python, which did not start: " + str(session.error()));
  session.holdAtProgress();

  // An update the sink refuses (the protocol's checker, an undeclared measurement) ends the run with
  // its error; nothing the lab sends after it is passed on. Nothing thrown may cross the session's
  // event loop: it is kept, and thrown once the run has ended.
  std::exception_ptr refused;
  PrintedLines printed(sink);
  auto guarded = [&](auto&& deliver) {
    if (refused) return;
    try {
      deliver();
    } catch (...) {
      refused = std::current_exception();
    }
  };
  session.setOutputHandler([&](const QString& stream, const QString& text) { guarded([&] { printed.add(stream, text); }); });
  session.setLabUpdateHandler([&](const QJsonObject& o) {
    guarded([&] {
      QString error;
      std::optional<lab::Update> update = updateFromJson(o, &error);
      if (!update) throw ValueError("the lab sent an update the protocol does not know: " + str(error));
      if (const auto* m = std::get_if<lab::Measurement>(&*update)) {
        const lab::MeasurementSpec* spec = lab::findMeasurement(spec_.measurements, m->name);
        if (!spec) throw ValueError("the lab sent the measurement '" + m->name + "', which its ```lab block does not declare");
        if (spec->unit != m->unit) {
          throw ValueError("the lab sent the measurement '" + m->name + "' in '" + m->unit + "'; its ```lab block declares it in '" +
                           spec->unit + "'");
        }
      }
      printed.flush();  // what it printed before this update comes first
      const bool progress = std::holds_alternative<lab::Progress>(*update);
      // At a progress update the window may hold the run (Pause, lab_runner.h): the lab waits in its
      // lab.progress() call until the sink returns, as a C++ lab's thread waits there.
      sink.sendOwned(std::move(*update));
      if (progress) session.goOn();
    });
  });
  session.setStopRequested([&] { return stop.stopRequested() || refused; });

  notebook::CellResult result = session.run(spec_.sourcePath, source, std::nullopt, INT_MAX);
  if (result.status == notebook::CellResult::Status::Ok) result = session.run("run", callFor(params), std::nullopt, INT_MAX);
  guarded([&] { printed.flush(); });
  if (refused) std::rethrow_exception(refused);
  switch (result.status) {
    case notebook::CellResult::Status::Ok: return;
    case notebook::CellResult::Status::Interrupted:
      if (stop.stopRequested()) return;  // Stop: the run ends where it was, as a C++ lab's does
      [[fallthrough]];
    case notebook::CellResult::Status::Error: rethrowPythonError(result);
    case notebook::CellResult::Status::KernelDied: throw Error("the " + id() + " lab's Python session ended: " + str(result.message));
  }
}

}  // namespace gpulab::course
