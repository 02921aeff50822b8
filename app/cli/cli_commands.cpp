#include "app/cli/cli_commands.h"

#include <QFileInfo>
#include <QJsonArray>
#include <QJsonDocument>
#include <QJsonObject>
#include <QSet>
#include <algorithm>
#include <atomic>
#include <chrono>
#include <map>
#include <memory>
#include <optional>
#include <cstdio>
#include <unistd.h>

#include "engine/runtime/device_memory.h"
#include "engine/runtime/memory_snapshot.h"
#include "engine/core/errors.h"
#include "engine/core/number_format.h"
#include "engine/runtime/blas_kernels.h"
#include "engine/runtime/cuda_runtime.h"
#include "engine/runtime/emulated_gpu.h"
#include "app/course/course.h"
#include "app/course/challenge.h"
#include "app/course/lab_json.h"
#include "app/course/python_lab.h"
#include "app/cli/lesson_cells.h"

namespace gpulab::cli {
namespace {

std::atomic<bool> gStopRequested{false};
std::atomic<lab::StopToken*> gActiveStop{nullptr};  // read by the signal handler, on any thread


QString versionStr(int v) { return QString::fromStdString(cuda::versionString(v)); }

const char* errorType(const std::exception& e) {
  if (dynamic_cast<const DeviceMismatchError*>(&e)) return "DeviceMismatchError";
  if (dynamic_cast<const OutOfMemoryError*>(&e)) return "OutOfMemoryError";
  if (dynamic_cast<const CudaError*>(&e)) return "CudaError";
  if (dynamic_cast<const IOError*>(&e)) return "IOError";
  if (dynamic_cast<const ValueError*>(&e)) return "ValueError";
  if (dynamic_cast<const IndexError*>(&e)) return "IndexError";
  if (dynamic_cast<const NotImplementedError*>(&e)) return "NotImplementedError";
  return "RuntimeError";
}

// A table cell as the terminal shows it; numbers as a challenge's report writes them.
QString formatCell(const lab::Value& v, const std::string& unit) {
  if (const auto* s = std::get_if<std::string>(&v)) return QString::fromStdString(*s);
  if (const auto* b = std::get_if<bool>(&v)) return *b ? "yes" : "no";
  if (const auto* i = std::get_if<std::int64_t>(&v)) return !unit.empty() ? course::formatMeasured(static_cast<double>(*i), unit) : QString::number(*i);
  return course::formatMeasured(std::get<double>(v), unit);
}

// The terminal's renderer of the lab protocol: with --json, every update as one JSON line
// (app/course/lab_json.h); otherwise the console channel, measurements, table rows and bars as text,
// and the progress as a bar on a terminal. Plots are for the GUI. Every update is checked first.
class CliSink final : public lab::MetricSink {
 public:
  CliSink(QTextStream& out, QTextStream& err, bool json) : out_(out), err_(err), json_(json), tty_(isatty(fileno(stderr))) {}

  std::vector<lab::Measurement> measured;  // what the run measured, for its challenge
  bool sawDone = false;                     // the lab ended its run with its own "done" record

  void send(const lab::Update& update) override {
    checker_.check(update);
    if (const auto* m = std::get_if<lab::Measurement>(&update)) measured.push_back(*m);
    if (const auto* r = std::get_if<lab::Record>(&update); r && r->event == "done") sawDone = true;
    if (json_) {
      out_ << jsonLine(course::toJson(update)) << "\n";
      out_.flush();
      return;
    }
    std::visit([this](const auto& u) { show(u); }, update);
    out_.flush();
  }

  // Ends a progress line on the terminal before other output follows.
  void endProgress() {
    if (progressShown_) err_ << "\r" << QString(100, ' ') << "\r";
    progressShown_ = false;
    err_.flush();
  }

 private:
  void show(const lab::Message& m) {
    endProgress();
    if (m.kind == lab::MessageKind::Warning) err_ << "warning: " << QString::fromStdString(m.text) << "\n";
    else out_ << (m.kind == lab::MessageKind::EngineError ? "engine error (shown on purpose):\n  " : "") << QString::fromStdString(m.text) << "\n";
  }
  void show(const lab::Measurement& m) {
    endProgress();
    out_ << "measured: " << QString::fromStdString(m.name) << " = " << course::formatMeasured(m.value, m.unit) << "\n";
  }
  void show(const lab::Row& r) {
    endProgress();
    const lab::ViewSpec* v = checker_.find(r.view);
    QStringList cells;
    for (std::size_t i = 0; i < r.cells.size(); ++i) cells << formatCell(r.cells[i], v->columns[i].unit).rightJustified(12);
    if (!headersShown_.contains(QString::fromStdString(r.view))) {
      headersShown_ << QString::fromStdString(r.view);
      QStringList labels;
      for (const lab::Axis& c : v->columns) labels << QString::fromStdString(c.label).rightJustified(12);
      out_ << QString::fromStdString(v->title) << ":\n" << labels.join("  ") << "\n";
    }
    out_ << cells.join("  ") << "\n";
  }
  void show(const lab::Bar& b) {
    endProgress();
    const lab::ViewSpec* v = checker_.find(b.view);
    QString series = QString::fromStdString(b.series);
    for (const lab::SeriesSpec& s : v->series) {
      if (s.id == b.series) series = QString::fromStdString(s.label);
    }
    out_ << QString::fromStdString(v->title) << ": " << QString::fromStdString(b.category) << ", " << series << " = "
         << course::formatMeasured(b.value, v->y.unit) << "\n";
  }
  void show(const lab::Marker& m) {
    if (m.kind == lab::MarkerKind::Event) return;
    endProgress();
    out_ << "-- " << QString::fromStdString(m.label) << " --\n";
  }
  void show(const lab::Progress& p) {
    if (!tty_) return;
    const int width = 30;
    const int filled = p.total > 0 ? static_cast<int>(width * std::clamp(p.done / p.total, 0.0, 1.0)) : 0;
    err_ << QString("\r  [%1%2] %3 ").arg(QString(filled, '#'), QString(width - filled, '.'), QString::fromStdString(p.label));
    err_.flush();
    progressShown_ = true;
  }
  template <class T>
  void show(const T&) {}  // views, points, levels, spans, the device and records: for the GUI and --json

  QTextStream& out_;
  QTextStream& err_;
  bool json_;
  bool tty_;
  bool progressShown_ = false;
  QSet<QString> headersShown_;
  lab::UpdateChecker checker_;
};

int fail(QTextStream& out, QTextStream& err, bool json, const std::exception& e) {
  const QString msg = QString::fromUtf8(e.what());
  if (json) {
    out << jsonLine({{"event", "error"}, {"type", errorType(e)}, {"message", msg}}) << "\n";
    out.flush();
  }
  // One line on stderr: the first line of the message (the whole message is in the JSON event).
  err << "gpulab-cli: " << errorType(e) << ": " << msg.section('\n', 0, 0) << "\n";
  err.flush();
  return kExitFailed;
}

bool wantsHelp(const QStringList& args) { return args.contains("--help") || args.contains("-h"); }

}  // namespace

const char* const kExitStatusHelp =
    "exit status:\n"
    "  0  done\n"
    "  1  the run failed (an error the engine raised, a missing data set, ...)\n"
    "  2  invalid arguments: an unknown command or option, a malformed or out-of-range value, or a\n"
    "     device this machine cannot use\n"
    "  130  interrupted (Ctrl+C or SIGTERM): the run stopped before its end\n";

void requestStop() {
  gStopRequested.store(true);
  if (lab::StopToken* s = gActiveStop.load()) s->requestStop();
}

int devicesCommand(const QStringList& args, QTextStream& out, QTextStream& err) {
  if (wantsHelp(args)) {
    out << "usage: gpulab-cli devices [--json]\n\n"
           "What devices exist, and why no GPU is usable if none is.\n\n"
           "  --json        one JSON object instead of text\n"
           "  --help, -h    this help\n\n"
        << kExitStatusHelp;
    return kExitOk;
  }
  bool json = false;
  for (const QString& a : args) {
    if (a == "--json") json = true;
    else {
      err << "gpulab-cli devices: unknown option '" << a << "'\n";
      return kExitUsage;
    }
  }
  const cuda::Availability a = cuda::availability();
  const QString defaultDev = QString::fromStdString(defaultDevice().str());
  if (json) {
    QJsonArray devices;
    for (const auto& d : a.devices) {
      devices.append(QJsonObject{{"index", d.index}, {"device", QString("cuda:%1").arg(d.index)}, {"name", QString::fromStdString(d.name)},
                                 {"compute_capability", QString("%1.%2").arg(d.major).arg(d.minor)},
                                 {"multiprocessor_count", d.multiprocessor_count}, {"total_memory", qint64(d.total_memory)},
                                 {"free_memory", qint64(d.free_memory)}});
    }
    QJsonObject o{{"compiled_with_cuda", a.compiled}, {"cuda_usable", a.usable}, {"default_device", defaultDev},
                  {"driver_version", versionStr(a.driver_version)}, {"runtime_version", versionStr(a.runtime_version)},
                  {"cublas_version", a.cublas_version}, {"cudnn_version", a.cudnn_version},
                  {"cuda_visible_devices", QString::fromStdString(a.cuda_visible_devices)}, {"devices", devices},
                  {"cpu_blas", QString::fromStdString(blasKernelsSummary())}};
    if (!a.usable) o["reason"] = QString::fromStdString(a.reason);
    // The emulated GPU is a device too: what the lessons' cells and labs use as cuda:N without a GPU.
    if (const std::optional<Device> e = cuda::emulatedDevice()) {
      o["emulated_gpu"] = QJsonObject{{"device", QString::fromStdString(e->str())}, {"total_memory", qint64(cuda::emulatedGpuBudget())},
                                      {"status", QString::fromStdString(cuda::emulatedGpuStatus())}};
    } else {
      o["emulated_gpu"] = QJsonValue::Null;
      o["emulated_gpu_status"] = QString::fromStdString(cuda::emulatedGpuStatus());
    }
    out << jsonLine(o) << "\n";
    return kExitOk;
  }
  out << "cpu: available (" << QString::number(sysconf(_SC_NPROCESSORS_ONLN)) << " cores); matrix products: "
      << QString::fromStdString(blasKernelsSummary()) << "\n";
  if (a.compiled) {
    out << "CUDA: driver " << versionStr(a.driver_version) << ", runtime " << versionStr(a.runtime_version) << ", cuBLAS "
        << a.cublas_version << ", cuDNN " << a.cudnn_version << ", CUDA_VISIBLE_DEVICES " << QString::fromStdString(a.cuda_visible_devices) << "\n";
  }
  for (const auto& d : a.devices) {
    out << QString("cuda:%1: %2, compute capability %3.%4, %5 SMs, %6 total, %7 free\n")
               .arg(d.index).arg(QString::fromStdString(d.name)).arg(d.major).arg(d.minor).arg(d.multiprocessor_count)
               .arg(QString::fromStdString(formatBytes(static_cast<std::int64_t>(d.total_memory))))
               .arg(QString::fromStdString(formatBytes(static_cast<std::int64_t>(d.free_memory))));
  }
  if (!a.usable) out << "No usable GPU: " << QString::fromStdString(a.reason) << ".\n";
  if (const std::optional<Device> e = cuda::emulatedDevice()) {
    out << QString("%1: GPU Lab's %2 -- %3 of this machine's memory as its own, the CPU's kernels as its compute. "
                   "The lessons' code cells and labs use it as %1 on this machine, so the same-device rule and out-of-memory "
                   "errors happen for real; its times are your CPU's, not a GPU's. Off: GPULAB_EMULATED_GPU=0 (in the window, "
                   "the lesson's \"code runs on\" choice; gpulab-cli run uses it only with --emulated-gpu)\n")
               .arg(QString::fromStdString(e->str()), QString::fromStdString(cuda::kEmulatedGpuPhrase),
                    QString::fromStdString(formatBytes(cuda::emulatedGpuBudget())));
  } else if (!a.usable) {
    out << "The " << QString::fromStdString(cuda::emulatedGpuStatus()) << ": lessons run on the CPU.\n";
  }
  out << "default device: " << defaultDev << (a.usable ? "" : " (torch.cuda.is_available() is False: an emulated GPU is not a real one)") << "\n";
  return kExitOk;
}

namespace {

// Where the command line names a device, this machine must have it: "cuda" without a GPU, or
// "cuda:99", is a bad argument here (exit 2) -- while a lesson file that says cuda still loads.
void requireUsableDevice(const lab::Params& params) {
  for (const lab::ParamSpec& s : params.specs()) {
    if (s.name != "device" || s.type != lab::ParamType::Text) continue;
    const std::string& text = params.getString(s.name);
    if (text == "auto") return;
    try {
      cuda::checkDeviceUsable(Device::parse(text));
    } catch (const Error& e) {
      throw ValueError("invalid value '" + text + "' for parameter 'device': " + e.what());
    }
  }
}

// One option of a lab's --help: "  --lr X   float in [1e-07, 10]; default 0.001" and the description.
QString optionHelp(const lab::ParamSpec& s) {
  QString flag = "--" + QString::fromStdString(s.name).replace('_', '-');
  std::string what, def;
  switch (s.type) {
    case lab::ParamType::Int:
      flag += " N";
      what = "integer in [" + formatNumber(static_cast<std::int64_t>(s.min)) + ", " + formatNumber(static_cast<std::int64_t>(s.max)) + "]";
      def = formatNumber(std::get<std::int64_t>(s.defaultValue));
      break;
    case lab::ParamType::Float:
      flag += " X";
      what = "float in [" + formatNumber(s.min) + ", " + formatNumber(s.max) + "]";
      def = formatNumber(std::get<double>(s.defaultValue));
      break;
    case lab::ParamType::Bool:
      flag += " [true|false]";
      what = "bool (the flag alone means true, --no-" + QString::fromStdString(s.name).replace('_', '-').toStdString() + " false)";
      def = std::get<bool>(s.defaultValue) ? "true" : "false";
      break;
    case lab::ParamType::Choice:
      flag += " NAME";
      what = lab::describeRange(s);
      def = std::get<std::string>(s.defaultValue);
      break;
    case lab::ParamType::Text:
      flag += " TEXT";
      what = "text";
      def = std::get<std::string>(s.defaultValue);
      break;
  }
  return QString("  %1  %2; default %3\n      %4\n")
      .arg(flag, -26).arg(QString::fromStdString(what), QString::fromStdString(def), QString::fromStdString(s.description));
}

using Aliases = std::map<QString, std::pair<std::string, std::string>>;

// A lab command's --help, generated from the lab's parameters: what --help says is what set() checks.
QString labHelp(const lab::Lab& theLab, const QString& command, const Aliases& aliases) {
  const std::string labId = theLab.id();
  QString text = "usage: gpulab-cli " + command + (aliases.empty() ? QString() : " [--" + QString::fromStdString(aliases.begin()->second.first) + " NAME]") +
                 " [--OPTION VALUE]... [--json]\n\n" + QString::fromStdString(theLab.title()) + " (the '" +
                 QString::fromStdString(labId) + "' lab, " + QString::fromStdString(theLab.sourcePath()) + ").\n\noptions:\n";
  for (const auto& [flag, setting] : aliases) {
    text += QString("  %1  same as --%2 %3\n").arg(flag, -26).arg(QString::fromStdString(setting.first).replace('_', '-'), QString::fromStdString(setting.second));
  }
  for (const lab::ParamSpec& s : theLab.params()) text += optionHelp(s);
  text += QString("  %1  one JSON object per line (the lab's views and updates, and its records: step, epoch, memory, done, error, ...)\n").arg("--json", -26);
  text += QString("  %1  record the run's memory history and write it to FILE at the end (also when the run fails),\n"
                  "      in the format of PyTorch's torch.cuda.memory._snapshot(): open it at https://pytorch.org/memory_viz\n").arg("--memory-snapshot FILE", -26);
  text += QString("  %1  this help\n\n").arg("--help, -h", -26);
  return text + kExitStatusHelp;
}

// Runs `theLab` with options mapped onto its parameters: --batch-size 64 sets batch_size, a bare
// flag sets a bool, and `aliases` turn flags like --oom-sweep into settings (mode=oom-sweep).
// Exit status: 2 when the arguments are wrong (checked before the run starts; `userArgs` also
// requires the device to be usable here), 1 when the run throws.
int labCommand(std::unique_ptr<lab::Lab> theLab, const QStringList& args, QTextStream& out, QTextStream& err,
               const Aliases& aliases = {}, bool userArgs = true, std::vector<lab::Measurement>* measured = nullptr) {
  const bool json = args.contains("--json");
  std::optional<lab::Params> parsed;
  std::string snapshotPath;  // --memory-snapshot FILE
  // 1. The arguments.
  try {
    lab::Params params = theLab->defaults();
    // An option given again wins, as argparse's do (scripts append to a command line); but two
    // shorthands for one parameter ("--oom-sweep --report", or one with "--mode") contradict each
    // other: say so rather than choose silently.
    std::map<std::string, QString> shorthandFor;
    auto given = [&](const std::string& param, const QString& option) {
      const auto at = shorthandFor.find(param);
      if (at != shorthandFor.end() && at->second != option) {
        throw ValueError("'" + option.toStdString() + "' and '" + at->second.toStdString() + "' both set " + param + ": give one");
      }
      // Only a parameter that has shorthands is remembered, by the option that set it.
      if (std::any_of(aliases.begin(), aliases.end(), [&](const auto& a) { return a.second.first == param; })) shorthandFor.emplace(param, option);
    };
    for (int i = 0; i < args.size(); ++i) {
      const QString& a = args[i];
      if (a == "--json") continue;
      if (a == "--memory-snapshot") {
        if (i + 1 >= args.size() || args[i + 1].isEmpty() || args[i + 1].startsWith("--"))
          throw ValueError("option '--memory-snapshot' needs a file name");
        snapshotPath = args[++i].toStdString();
        continue;
      }
      if (auto alias = aliases.find(a); alias != aliases.end()) {
        given(alias->second.first, a);
        params.set(alias->second.first, alias->second.second);
        continue;
      }
      if (!a.startsWith("--")) throw ValueError("unexpected argument '" + a.toStdString() + "' (options start with --)");
      const std::string name = a.mid(2).replace('-', '_').toStdString();
      // --no-FLAG sets the bool parameter FLAG to false (--no-grad-scaler), as argparse's BooleanOptionalAction.
      const auto& specs = params.specs();
      auto named = [&](const std::string& n) {
        return std::find_if(specs.begin(), specs.end(), [&](const lab::ParamSpec& s) { return s.name == n; });
      };
      if (name.starts_with("no_") && named(name) == specs.end()) {
        if (auto negated = named(name.substr(3)); negated != specs.end() && negated->type == lab::ParamType::Bool) {
          given(negated->name, a);
          params.setValue(negated->name, lab::ParamValue(false));
          continue;
        }
      }
      const lab::ParamSpec& spec = params.spec(name);
      given(name, a);
      if (spec.type == lab::ParamType::Bool && (i + 1 >= args.size() || args[i + 1].startsWith("--"))) {
        params.setValue(name, lab::ParamValue(true));
        continue;
      }
      if (i + 1 >= args.size()) throw ValueError("option '" + a.toStdString() + "' needs a value");
      params.set(name, args[++i].toStdString());
    }
    theLab->check(params);
    if (userArgs) requireUsableDevice(params);
    parsed.emplace(std::move(params));
  } catch (const std::exception& e) {
    fail(out, err, json, e);
    return kExitUsage;
  }
  // 2. The run (in a Python session of its own: clean devices), its memory history recorded for
  //    --memory-snapshot and written when it ends, failed or not.
  // A Python lab's memory is in its own process: its session records the history and writes the file.
  auto* pythonLab = dynamic_cast<course::PythonLab*>(theLab.get());
  std::optional<MemoryHistory> history;
  if (!snapshotPath.empty() && pythonLab) pythonLab->recordMemorySnapshot(QString::fromStdString(snapshotPath));
  else if (!snapshotPath.empty()) history.emplace();
  auto writeSnapshot = [&]() -> bool {
    if (snapshotPath.empty() || (pythonLab && !pythonLab->memorySnapshotWritten())) return true;  // (its error is the run's)
    try {
      if (history) history->writeSnapshot(snapshotPath);
      err << "gpulab-cli: memory snapshot written to " << QString::fromStdString(snapshotPath) << " (open it at https://pytorch.org/memory_viz)\n";
      err.flush();
      return true;
    } catch (const std::exception& e) {
      fail(out, err, json, e);
      return false;
    }
  };
  // The token outlives the run, and the signal handler lets go of it before it goes.
  lab::StopToken stop;
  struct ActiveStop {
    explicit ActiveStop(lab::StopToken& s) { gActiveStop.store(&s); }
    ~ActiveStop() { gActiveStop.store(nullptr); }
  } active(stop);
  try {
    CliSink sink(out, err, json);
    if (gStopRequested.load()) stop.requestStop();
    const auto start = std::chrono::steady_clock::now();
    try {
      theLab->run(*parsed, sink, stop);
    } catch (...) {
      sink.endProgress();
      throw;
    }
    // Every run ends with a "done" record, so that a recording (resources/reference-runs) shows where a
    // run ended whole: the training labs send their own, with their totals; the others get this one.
    if (!sink.sawDone) {
      const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
      sink.send(lab::Record{"done", {{"seconds", seconds}, {"stopped", stop.stopRequested()}}});
    }
    sink.endProgress();
    if (measured) *measured = sink.measured;
    const bool written = writeSnapshot();
    if (stop.stopRequested()) {
      err << "gpulab-cli: interrupted: the run stopped before its end\n";
      err.flush();
      return kExitInterrupted;
    }
    return written ? kExitOk : kExitFailed;
  } catch (const std::exception& e) {
    fail(out, err, json, e);
    writeSnapshot();
    return kExitFailed;
  }
}

const Aliases kMemoryAliases{{"--oom-sweep", {"mode", "oom-sweep"}}, {"--report", {"mode", "report"}}};

}  // namespace

QString jsonLine(const QJsonObject& o) { return QString::fromUtf8(QJsonDocument(o).toJson(QJsonDocument::Compact)); }

int trainCommand(const QStringList& args, QTextStream& out, QTextStream& err) {
  auto theLab = course::loadCourse().makeLab("train");
  if (wantsHelp(args)) {
    out << labHelp(*theLab, "train", {});
    return kExitOk;
  }
  return labCommand(std::move(theLab), args, out, err);
}

namespace {
// Takes "--lessons DIR" out of args; the embedded lessons otherwise.
course::Course courseFrom(QStringList& args) {
  const int at = args.indexOf("--lessons");
  if (at < 0) return course::loadCourse();
  if (at + 1 >= args.size()) throw ValueError("--lessons needs a folder");
  const QString dir = args[at + 1];
  args.remove(at, 2);
  if (!QFileInfo(dir).isDir()) throw ValueError("--lessons: '" + dir.toStdString() + "' is not a folder");
  course::Course c = course::loadCourse(dir);
  if (c.lessons.isEmpty()) {
    throw ValueError("--lessons: '" + dir.toStdString() + "' holds no lesson (a lesson is a folder with a lesson.md, as lessons/ in the source has)");
  }
  return c;
}
}  // namespace

int lessonsCommand(QStringList args, QTextStream& out, QTextStream& err) {
  if (wantsHelp(args)) {
    out << "usage: gpulab-cli lessons [--lessons DIR]\n\n"
           "The lessons, one a line: id, title, and 'ok' or why the lesson is broken.\n\n"
           "  --lessons DIR   lessons from this folder instead of the built-in ones\n"
           "  --help, -h      this help\n\n"
           "exit status:\n  0  every lesson loaded\n  1  a lesson is broken\n  2  invalid arguments\n";
    return kExitOk;
  }
  try {
    const course::Course c = courseFrom(args);
    if (!args.isEmpty()) throw ValueError("unexpected argument '" + args.first().toStdString() + "'");
    bool allOk = true;
    for (const course::Lesson& l : c.lessons) {
      out << l.id << "\t" << l.title << "\t" << (l.ok() ? QString("ok") : "broken: " + l.error) << "\n";
      allOk = allOk && l.ok();
    }
    return allOk ? kExitOk : kExitFailed;
  } catch (const std::exception& e) {
    err << "gpulab-cli: " << e.what() << "\n";
    return kExitUsage;
  }
}

namespace {

// gpulab-cli lesson ID --check-challenges: for every challenge, its examples' wrong answer must NOT
// meet it and its right answer must (lesson.h, ChallengeExamples) -- so that a grading a wrong answer
// passes cannot land. The runs' own output is kept out of the way; what they measured is graded.
int checkChallenges(const course::Lesson& lesson, bool json, QTextStream& out) {
  bool allOk = true;
  for (int i = 0; i < lesson.runs.size(); ++i) {
    const course::RunBlock& run = lesson.runs[i];
    if (!run.challenge) continue;
    if (!run.challenge->examples) {
      allOk = false;
      if (json) out << jsonLine({{"event", "challenge_check"}, {"index", i + 1}, {"ok", false}, {"error", "no examples"}}) << "\n";
      else out << "Run " << i + 1 << ": its challenge has no examples (\"examples\": {\"fails\": ..., \"meets\": ...})\n";
      continue;
    }
    QJsonObject event{{"event", "challenge_check"}, {"index", i + 1}, {"text", run.challenge->text}};
    bool ok = true;
    for (const auto& [which, example] : {std::pair{"fails", &run.challenge->examples->fails}, std::pair{"meets", &run.challenge->examples->meets}}) {
      auto settings = run.params;
      QStringList shown;
      for (const auto& [k, v] : *example) {
        settings[k] = v;
        shown << QString::fromStdString(k + "=" + v);
      }
      QStringList labArgs;
      for (const auto& [k, v] : settings) labArgs << "--" + QString::fromStdString(k) << QString::fromStdString(v);
      labArgs << "--json";
      const bool meets = std::string(which) == "meets";
      // A timed challenge's verdict is noisy: the right answer gets kTimedAttempts runs to meet it, and
      // the wrong answer must fail every one of as many -- a learner's second try must not pass it.
      const int attempts = run.challenge->timed() ? course::kTimedAttempts : 1;
      bool met = false;
      QJsonArray tries;
      for (int attempt = 1; attempt <= attempts; ++attempt) {
        QString log;
        QTextStream quiet(&log);
        std::vector<lab::Measurement> measured;
        const int rc = labCommand(course::makeLab(lesson, run.lab), labArgs, quiet, quiet, {}, /*userArgs=*/false, &measured);
        if (rc == kExitInterrupted) return rc;
        const course::ChallengeResult result = course::grade(*run.challenge, measured);
        // A wrong answer's run may fail outright (an out-of-memory error that ends it): it meets nothing.
        met = rc == kExitOk && result.met;
        QJsonArray lines;
        for (const course::CheckResult& c : result.checks) lines.append(c.line);
        tries.append(QJsonObject{{"met", met}, {"checks", lines}});
        if (!json) {
          out << "Run " << i + 1 << ", the " << (meets ? "right" : "wrong") << " answer (" << shown.join(" ") << ")"
              << (attempts > 1 ? QString(", try %1 of up to %2").arg(attempt).arg(attempts) : QString()) << ": "
              << (met ? "meets" : "does not meet") << " the challenge\n";
          if (rc != kExitOk) out << "  (the run ended with status " << rc << ")\n";
          for (const course::CheckResult& c : result.checks) out << "  " << c.line << "\n";
          out.flush();
        }
        if (met) break;  // the right answer is done; the wrong answer is already WRONG
      }
      const bool right = meets ? met : !met;
      ok = ok && right;
      event[QString(which) + "_met"] = met;
      event[QString(which) + "_settings"] = shown.join(" ");
      event[QString(which) + "_tries"] = tries;
      if (!json) {
        out << "  -> the " << (meets ? "right" : "wrong") << " answer " << (met ? "meets" : "does not meet") << " the challenge"
            << (attempts == 1 ? QString() : met ? QString(" on try %1 of up to %2").arg(tries.size()).arg(attempts) : QString(" in any of %1 tries").arg(attempts))
            << " -- "
            << (right ? "as it should" : "WRONG") << "\n";
      }
      out.flush();
    }
    event["ok"] = ok;
    if (json) out << jsonLine(event) << "\n";
    out.flush();
    allOk = allOk && ok;
  }
  return allOk ? kExitOk : kExitFailed;
}

}  // namespace

int lessonCommand(QStringList args, QTextStream& out, QTextStream& err) {
  if (wantsHelp(args)) {
    out << "usage: gpulab-cli lesson ID [--quick | --check-challenges | --check-exercises] [--json] [--lessons DIR]\n\n"
           "Runs a lesson's code cells (in one Python session, its setup cells first; the emulated GPU is\n"
           "cuda:0 where no GPU is usable) and then every run block, as the player does (gpulab-cli lessons\n"
           "lists the ids). A cell that raises is shown and the next one runs, as in the player.\n\n"
           "  --quick         the short variants the lesson gives its runs\n"
           "  --check-challenges\n"
           "                  instead: runs each challenge's wrong answer (it must not meet the challenge)\n"
           "                  and its right answer (it must); exit 1 if either grades wrongly\n"
           "  --check-exercises\n"
           "                  instead: runs each exercise's starter (it must not meet its checks) and its\n"
           "                  solution (it must), on the CPU and on the emulated GPU; exit 1 if one grades wrongly\n"
           "  --json          one JSON object per line (a 'run' event before each run)\n"
           "  --lessons DIR   lessons from this folder instead of the built-in ones\n"
           "  --help, -h      this help\n\n"
        << kExitStatusHelp;
    return kExitOk;
  }
  const bool json = args.contains("--json");
  try {
    const course::Course c = courseFrom(args);
    const bool quick = args.removeAll("--quick") > 0;
    const bool challenges = args.removeAll("--check-challenges") > 0;
    const bool exercises = args.removeAll("--check-exercises") > 0;
    args.removeAll("--json");
    for (const QString& a : args)
      if (a.startsWith("-")) {
        throw ValueError("unknown option '" + a.toStdString() + "' (lesson takes --quick, --check-challenges, --check-exercises, --json and --lessons DIR)");
      }
    if (args.size() != 1) throw ValueError("usage: gpulab-cli lesson ID [--quick | --check-challenges | --check-exercises] [--json] [--lessons DIR]");
    const course::Lesson* lesson = c.find(args.first());
    if (!lesson) throw ValueError("no lesson with id '" + args.first().toStdString() + "' (gpulab-cli lessons lists them)");
    if (!lesson->ok()) throw Error("lesson '" + lesson->id.toStdString() + "' is broken: " + lesson->error.toStdString());
    if (challenges) return checkChallenges(*lesson, json, out);
    if (exercises) return checkExercises(*lesson, json, out);
    // What the updates below follow: a recording of them (resources/reference-runs) says so.
    if (json) out << jsonLine({{"event", "protocol"}, {"version", lab::kProtocolVersion}}) << "\n";
    // The code cells, as a learner runs them top to bottom (the player's default device).
    if (const int rc = runLessonCells(*lesson, /*emulatedGpu=*/true, json, out); rc != kExitOk) return rc;
    // Every run block, as the player runs them: the lab with the block's presets (and --quick's).
    for (int i = 0; i < lesson->runs.size(); ++i) {
      if (gStopRequested.load()) return kExitInterrupted;  // no further run block after Ctrl+C
      const course::RunBlock& run = lesson->runs[i];
      QStringList labArgs;
      auto settings = run.params;
      if (quick)
        for (const auto& [k, v] : run.quick) settings[k] = v;
      for (const auto& [k, v] : settings) labArgs << "--" + QString::fromStdString(k) << QString::fromStdString(v);
      if (json) {
        labArgs << "--json";
        out << jsonLine({{"event", "run"}, {"index", i + 1}, {"lab", run.lab}, {"title", run.title}}) << "\n";
      } else {
        out << "== Run " << i + 1 << ": " << run.title << " (" << run.lab << ")\n";
      }
      out.flush();
      // The device a lesson names is checked when it runs (a lesson that says cuda loads anywhere).
      std::vector<lab::Measurement> measured;
      if (const int rc = labCommand(course::makeLab(*lesson, run.lab), labArgs, out, err, {}, /*userArgs=*/false, &measured); rc != kExitOk) return rc;
      // The run block's challenge, graded from what this run measured.
      if (run.challenge) {
        const course::ChallengeResult result = course::grade(*run.challenge, measured);
        if (json) {
          QJsonArray checks;
          for (const course::CheckResult& c : result.checks) {
            QJsonObject o{{"measurement", c.check.measurement}, {"met", c.met}, {"text", c.line}};
            if (c.measured) o["measured"] = *c.measured;
            if (c.check.atLeast) o["at_least"] = *c.check.atLeast;
            if (c.check.atMost) o["at_most"] = *c.check.atMost;
            checks.append(o);
          }
          out << jsonLine({{"event", "challenge"}, {"index", i + 1}, {"text", result.text}, {"met", result.met}, {"checks", checks}}) << "\n";
        } else {
          out << result.report() << "\n";
        }
        out.flush();
      }
    }
    return kExitOk;
  } catch (const ValueError& e) {
    fail(out, err, json, e);
    return kExitUsage;
  } catch (const std::exception& e) {
    fail(out, err, json, e);
    return kExitFailed;
  }
}

// The memory lab is Python, in the memory lessons' folder (lessons/04-where-memory-goes/memory_lab.py).
int memoryCommand(const QStringList& args, QTextStream& out, QTextStream& err) {
  auto theLab = course::loadCourse().makeLab("memory");
  if (wantsHelp(args)) {
    out << labHelp(*theLab, "memory", kMemoryAliases);
    return kExitOk;
  }
  return labCommand(std::move(theLab), args, out, err, kMemoryAliases);
}

}  // namespace gpulab::cli
