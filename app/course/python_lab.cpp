#include "app/course/python_lab.h"

#include <QFile>
#include <QJsonArray>
#include <QJsonDocument>
#include <QRegularExpression>
#include <QStringList>
#include <climits>
#include <exception>
#include <map>
#include <utility>

#include "app/course/lab_json.h"
#include "app/course/lesson.h"
#include "app/notebook/headless_session.h"
#include "engine/core/errors.h"

namespace gpulab::course {
namespace {

std::string str(const QString& s) { return s.toStdString(); }

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

// The cell that makes `source` importable as the helpers' module: a module of its own, with the
// session's `lab`, its lines known to tracebacks under its file's name.
QString installHelpersCell(const QString& source) {
  return QString("import sys as _sys, types as _types, linecache as _linecache\n"
                 "_source = %1\n"
                 "_module = _types.ModuleType(%2)\n"
                 "_module.__file__ = %3\n"
                 "_module.lab = lab\n"
                 "_linecache.cache[%3] = (len(_source), None, _source.splitlines(True), %3)\n"
                 "exec(compile(_source, %3, 'exec'), _module.__dict__)\n"
                 "_sys.modules[%2] = _module\n"
                 "del _sys, _types, _linecache, _source, _module\n")
      .arg(pythonString(source.toStdString()), pythonString(kLabHelpersModule), pythonString(kLabHelpersFile));
}

}  // namespace

bool importsLabHelpers(const QString& source) {
  static const QRegularExpression imports(QString("^\\s*(from\\s+%1\\s+import|import\\s+%1\\b)").arg(kLabHelpersModule),
                                          QRegularExpression::MultilineOption);
  return imports.match(source).hasMatch();
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
  if (r.errorType == "ValueError") throw ValueError(message);  // settings the lab refuses: the form shows them
  if (r.errorType == "IndexError") throw IndexError(message);
  if (r.errorType == "NotImplementedError") throw NotImplementedError(message);
  if (r.errorType == "OutOfMemoryError") throw OutOfMemoryError(message);
  if (r.errorType == "OSError" || r.errorType == "FileNotFoundError") throw IOError(message);
  throw Error(str(r.errorType) + ": " + message);  // RuntimeError's message, or another type named
}

}  // namespace

void PythonLab::run(const lab::Params& params, lab::MetricSink& sink, const lab::StopToken& stop) {
  // Read again as the lesson's loader read it: the file may have changed since (Note [files a lesson names]).
  const LessonFile code = readLabCode(spec_.path);
  if (!code.problem.isEmpty()) throw Error("the " + id() + " lab cannot run: " + str(code.problem));
  const QString source = QString::fromUtf8(code.bytes);
  // An update the sink refuses (the protocol's checker, an undeclared measurement) ends the run with
  // its error; nothing the lab sends after it is passed on. Nothing thrown may cross the session's
  // event loop: it is kept, and thrown once the run has ended.
  std::exception_ptr refused;
  notebook::HeadlessSession session(spec_.emulatedGpu, 60000, [&] { return stop.stopRequested() || refused; });
  if (stop.stopRequested()) return;  // stopped while Python started
  if (!session.ok()) throw Error("the " + id() + " lab runs in Python, which did not start: " + str(session.error()));
  session.holdAtProgress();

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
      // At a progress update the window may hold the run (Pause, lab_runner.h): the lab waits for the
      // answer in its next lab.progress() call until the sink returns.
      sink.sendOwned(std::move(*update));
      // After a Stop the lab's next lab.progress() raises KeyboardInterrupt: the step it was running
      // while the sink took this update is the last.
      if (progress) stop.stopRequested() ? session.stopAtProgress() : session.goOn();
    });
  });

  snapshotWritten_ = false;
  const bool recording = !snapshotPath_.isEmpty();
  notebook::CellResult result;
  if (recording) result = session.run("memory history", "import torch\ntorch.cuda.memory._record_memory_history(max_entries=100000)", std::nullopt, INT_MAX);
  if (result.status == notebook::CellResult::Status::Ok && importsLabHelpers(source)) {
    // Read as the lab's code is, at the run; a lab that imports helpers the course lacks meets
    // Python's own ModuleNotFoundError at its import line.
    const LessonFile helpers = readLabCode(spec_.helpersPath);
    if (helpers.problem.isEmpty()) {
      result = session.run(kLabHelpersFile, installHelpersCell(QString::fromUtf8(helpers.bytes)), std::nullopt, INT_MAX);
    } else if (QFile::exists(spec_.helpersPath)) {
      throw Error("the " + id() + " lab cannot run: " + str(helpers.problem));
    }
  }
  if (result.status == notebook::CellResult::Status::Ok) result = session.run(spec_.sourcePath, source, std::nullopt, INT_MAX);
  if (result.status == notebook::CellResult::Status::Ok) result = session.run("run", callFor(params), std::nullopt, INT_MAX);
  if (recording && result.status != notebook::CellResult::Status::KernelDied) {
    // Written however the run ended (a failed run's history is the one worth reading); a file that
    // cannot be written is the error the run ends with when it had none of its own.
    const QString dump = "import torch\ntorch.cuda.memory._dump_snapshot(" + pythonString(snapshotPath_.toStdString()) + ")";
    const notebook::CellResult dumped = session.run("memory snapshot", dump, std::nullopt, INT_MAX);
    snapshotWritten_ = dumped.status == notebook::CellResult::Status::Ok;
    if (!snapshotWritten_ && result.status == notebook::CellResult::Status::Ok) {
      throw IOError("cannot write the memory snapshot " + str(snapshotPath_) + ": " + str(dumped.message));
    }
  }
  guarded([&] { printed.flush(); });
  if (refused) std::rethrow_exception(refused);
  switch (result.status) {
    case notebook::CellResult::Status::Ok: return;
    case notebook::CellResult::Status::Interrupted:
      if (stop.stopRequested()) return;  // Stop: the run ends where it was
      [[fallthrough]];
    case notebook::CellResult::Status::Error: rethrowPythonError(result);
    case notebook::CellResult::Status::KernelDied: throw Error("the " + id() + " lab's Python session ended: " + str(result.message));
  }
}

}  // namespace gpulab::course
