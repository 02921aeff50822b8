#include "app/cli/cli_commands.h"

#include <QFileInfo>
#include <QJsonArray>
#include <QJsonDocument>
#include <QJsonObject>
#include <atomic>
#include <map>
#include <memory>
#include <optional>
#include <cstdio>
#include <unistd.h>

#include "engine/memory/memory.h"
#include "engine/core/errors.h"
#include "engine/core/number_format.h"
#include "engine/runtime/cuda_runtime.h"
#include "app/course/course.h"
#include "lessons/labs/labs.h"

namespace gpulab::cli {
namespace {

std::atomic<bool> gStopRequested{false};
lab::StopToken* gActiveStop = nullptr;

QString line(const QJsonObject& o) { return QString::fromUtf8(QJsonDocument(o).toJson(QJsonDocument::Compact)); }

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

// Metric sink for the terminal: a JSON line per event, or a table with a progress bar.
class CliSink final : public lab::MetricSink {
 public:
  CliSink(QTextStream& out, QTextStream& err, bool json, int epochs, std::int64_t stepsPerEpoch)
      : out_(out), err_(err), json_(json), epochs_(epochs), stepsPerEpoch_(stepsPerEpoch), tty_(isatty(fileno(stderr))) {}

  void onStep(const lab::StepMetrics& m) override {
    if (json_) {
      out_ << line({{"event", "step"}, {"epoch", m.epoch}, {"step", qint64(m.step)}, {"loss", m.loss},
                    {"samples_per_s", m.samples_per_s}, {"allocated_bytes", qint64(m.allocated_bytes)},
                    {"reserved_bytes", qint64(m.reserved_bytes)}, {"elapsed_s", m.elapsed_s}})
           << "\n";
      out_.flush();
      return;
    }
    if (!tty_) return;
    const std::int64_t inEpoch = stepsPerEpoch_ ? (m.step - 1) % stepsPerEpoch_ + 1 : 0;
    const int width = 30;
    const int filled = stepsPerEpoch_ ? static_cast<int>(width * inEpoch / stepsPerEpoch_) : 0;
    err_ << QString("\r  epoch %1/%2 [%3%4] loss %5  %6 samples/s ")
                .arg(m.epoch).arg(epochs_).arg(QString(filled, '#')).arg(QString(width - filled, '.'))
                .arg(m.loss, 0, 'f', 4).arg(m.samples_per_s, 0, 'f', 0);
    err_.flush();
  }

  void onEpoch(const lab::EpochMetrics& m) override {
    if (json_) {
      QJsonObject o{{"event", "epoch"}, {"epoch", m.epoch}, {"step", qint64(m.step)}, {"train_loss", m.train_loss}, {"eval_loss", m.eval_loss}, {"seconds", m.seconds}};
      if (m.test_accuracy) o["test_accuracy"] = *m.test_accuracy;
      out_ << line(o) << "\n";
      out_.flush();
      return;
    }
    if (tty_) err_ << "\r" << QString(100, ' ') << "\r";
    if (!headerShown_) {
      out_ << QString("%1  %2  %3  %4  %5\n").arg("epoch", 5).arg("train_loss", 10).arg("eval_loss", 10).arg("test_acc", 8).arg("seconds", 7);
      headerShown_ = true;
    }
    out_ << QString("%1  %2  %3  %4  %5\n")
                .arg(m.epoch, 5).arg(m.train_loss, 10, 'f', 4).arg(m.eval_loss, 10, 'f', 4)
                .arg(m.test_accuracy ? QString::number(*m.test_accuracy, 'f', 4) : QString("-"), 8).arg(m.seconds, 7, 'f', 3);
    out_.flush();
  }

  void onDone(const lab::RunSummary& s) override {
    if (json_) {
      QJsonObject o{{"event", "done"}, {"seconds", s.seconds},
                    {"steps", qint64(s.steps)}, {"device", QString::fromStdString(s.device)}, {"stopped", s.stopped},
                    {"peak_allocated_bytes", qint64(s.peak_allocated_bytes)}, {"peak_reserved_bytes", qint64(s.peak_reserved_bytes)}};
      if (s.train_loss) o["train_loss"] = *s.train_loss;
      if (s.eval_loss) o["eval_loss"] = *s.eval_loss;
      if (s.test_accuracy) o["test_accuracy"] = *s.test_accuracy;
      out_ << line(o) << "\n";
    } else {
      out_ << QString("%1 %2 steps on %3 in %4 s").arg(s.stopped ? "Stopped after" : "Done:").arg(s.steps)
                  .arg(QString::fromStdString(s.device)).arg(s.seconds, 0, 'f', 2);
      if (s.train_loss) out_ << QString("; final train loss %1").arg(*s.train_loss, 0, 'f', 4);
      if (s.eval_loss) out_ << QString(", eval loss %1").arg(*s.eval_loss, 0, 'f', 4);
      if (s.test_accuracy) out_ << QString(", test accuracy %1").arg(*s.test_accuracy, 0, 'f', 4);
      out_ << "; peak memory " << QString::fromStdString(formatBytes(s.peak_allocated_bytes)) << " allocated, "
           << QString::fromStdString(formatBytes(s.peak_reserved_bytes)) << " reserved\n";
    }
    out_.flush();
  }

  void onMeasurement(const lab::Measurement& m) override {
    if (json_) {
      out_ << line({{"event", "measurement"}, {"name", QString::fromStdString(m.name)}, {"value", m.value},
                    {"unit", QString::fromStdString(m.unit)}})
           << "\n";
    } else {
      out_ << "measured: " << QString::fromStdString(m.name) << " = " << m.value << " " << QString::fromStdString(m.unit) << "\n";
    }
    out_.flush();
  }

  void onMemory(const lab::MemorySample& m) override {
    if (!json_) return;
    QJsonObject byCategory;
    for (int c = 0; c < kMemoryCategoryCount; ++c) {
      if (m.allocated_by_category[c]) byCategory[memoryCategoryName(static_cast<MemoryCategory>(c))] = qint64(m.allocated_by_category[c]);
    }
    out_ << line({{"event", "memory"}, {"step", qint64(m.step)}, {"allocated_bytes", qint64(m.allocated_bytes)},
                  {"reserved_bytes", qint64(m.reserved_bytes)}, {"peak_allocated_bytes", qint64(m.peak_allocated_bytes)},
                  {"allocs", qint64(m.allocs)}, {"frees", qint64(m.frees)}, {"segments_reserved", qint64(m.segments_reserved)},
                  {"segments_released", qint64(m.segments_released)}, {"allocated_by_category", byCategory}})
         << "\n";
    out_.flush();
  }

  void onOutOfMemory(const lab::OutOfMemoryReport& r) override {
    if (json_) {
      out_ << line({{"event", "oom"}, {"batch_size", qint64(r.batch_size)}, {"width", qint64(r.width)}, {"accumulate", r.accumulate},
                    {"message", QString::fromStdString(r.message)}, {"allocated_after_bytes", qint64(r.allocated_after_bytes)},
                    {"baseline_bytes", qint64(r.baseline_bytes)}})
           << "\n";
    } else {
      out_ << "\nOut of memory at batch " << r.batch_size << (r.width ? QString(", width %1").arg(r.width) : QString())
           << (r.accumulate > 1 ? QString(", accumulate %1").arg(r.accumulate) : QString()) << ":\n  "
           << QString::fromStdString(r.message) << "\nAllocated after the failed step: "
           << QString::fromStdString(formatBytes(r.allocated_after_bytes)) << " (before it: "
           << QString::fromStdString(formatBytes(r.baseline_bytes)) << ")\n\n";
    }
    out_.flush();
  }

  void onRecovered(const lab::RecoveryReport& r) override {
    if (json_) {
      out_ << line({{"event", "recovered"}, {"batch_size", qint64(r.batch_size)}, {"width", qint64(r.width)}, {"accumulate", r.accumulate},
                    {"effective_batch", qint64(r.effective_batch)}, {"loss", r.loss}})
           << "\n";
    } else {
      out_ << QString("Recovered: batch %1 x %2 accumulation step(s) = effective batch %3%4, loss %5\n")
                  .arg(r.batch_size).arg(r.accumulate).arg(r.effective_batch)
                  .arg(r.width ? QString(", width %1").arg(r.width) : QString()).arg(r.loss, 0, 'f', 4);
    }
    out_.flush();
  }

  void onMemoryReport(const lab::MemoryReport& r) override {
    auto snap = [](const lab::MemoryReport::Snapshot& s) {
      QJsonObject o{{"allocated_bytes", qint64(s.allocated_bytes)}, {"reserved_bytes", qint64(s.reserved_bytes)}};
      if (s.driver_process_bytes) o["driver_process_bytes"] = qint64(*s.driver_process_bytes);
      if (s.driver_device_bytes) o["driver_device_bytes"] = qint64(*s.driver_device_bytes);
      return o;
    };
    if (json_) {
      QJsonObject o{{"event", "report"}, {"device", QString::fromStdString(r.device)}, {"before", snap(r.before)},
                    {"after", snap(r.after)}, {"released_bytes", qint64(r.released_bytes)}};
      if (!r.driver_note.empty()) o["driver_note"] = QString::fromStdString(r.driver_note);
      out_ << line(o) << "\n";
      out_.flush();
      return;
    }
    auto fmt = [](std::optional<std::int64_t> v) { return v ? QString::fromStdString(formatBytes(*v)) : QString("n/a"); };
    out_ << QString("%1  %2  %3  %4  %5\n").arg("", 22).arg("allocated", 12).arg("reserved", 12).arg("driver: process", 16).arg("driver: device", 15);
    for (const auto& [name, s] : {std::pair{"before empty_cache()", r.before}, std::pair{"after empty_cache()", r.after}}) {
      out_ << QString("%1  %2  %3  %4  %5\n").arg(name, 22)
                  .arg(QString::fromStdString(formatBytes(s.allocated_bytes)), 12).arg(QString::fromStdString(formatBytes(s.reserved_bytes)), 12)
                  .arg(fmt(s.driver_process_bytes), 16).arg(fmt(s.driver_device_bytes), 15);
    }
    out_ << "empty_cache() returned " << QString::fromStdString(formatBytes(r.released_bytes)) << " to the system.\n";
    if (!r.driver_note.empty()) out_ << "Driver view: " << QString::fromStdString(r.driver_note) << "\n";
    out_.flush();
  }

  void onMessage(lab::MessageKind kind, const std::string& text) override {
    if (json_) {
      const char* level = kind == lab::MessageKind::Warning ? "warning" : kind == lab::MessageKind::EngineError ? "engine_error" : "info";
      out_ << line({{"event", "message"}, {"level", level}, {"text", QString::fromStdString(text)}}) << "\n";
      out_.flush();
    } else if (kind == lab::MessageKind::Warning) {
      err_ << "warning: " << QString::fromStdString(text) << "\n";
    } else {
      out_ << (kind == lab::MessageKind::EngineError ? "engine error (shown on purpose):\n  " : "") << QString::fromStdString(text) << "\n";
    }
  }

 private:
  QTextStream& out_;
  QTextStream& err_;
  bool json_;
  int epochs_;
  std::int64_t stepsPerEpoch_;
  bool tty_;
  bool headerShown_ = false;
};

int fail(QTextStream& out, QTextStream& err, bool json, const std::exception& e) {
  const QString msg = QString::fromUtf8(e.what());
  if (json) {
    out << line({{"event", "error"}, {"type", errorType(e)}, {"message", msg}}) << "\n";
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
    "     device this machine cannot use\n";

void requestStop() {
  gStopRequested.store(true);
  if (lab::StopToken* s = gActiveStop) s->requestStop();
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
                  {"cuda_visible_devices", QString::fromStdString(a.cuda_visible_devices)}, {"devices", devices}};
    if (!a.usable) o["reason"] = QString::fromStdString(a.reason);
    out << line(o) << "\n";
    return kExitOk;
  }
  out << "cpu: available (" << QString::number(sysconf(_SC_NPROCESSORS_ONLN)) << " cores)\n";
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
  if (!a.usable) out << "No usable GPU: " << QString::fromStdString(a.reason) << ". Lessons run on the CPU.\n";
  out << "default device: " << defaultDev << "\n";
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
      what = "bool (the flag alone means true)";
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
QString labHelp(const std::string& labId, const QString& command, const Aliases& aliases) {
  auto theLab = labs::makeLab(labId);
  QString text = "usage: gpulab-cli " + command + (aliases.empty() ? QString() : " [--" + QString::fromStdString(aliases.begin()->second.first) + " NAME]") +
                 " [--OPTION VALUE]... [--json]\n\n" + QString::fromStdString(theLab->title()) + " (the '" +
                 QString::fromStdString(labId) + "' lab, " + QString::fromStdString(theLab->sourcePath()) + ").\n\noptions:\n";
  for (const auto& [flag, setting] : aliases) {
    text += QString("  %1  same as --%2 %3\n").arg(flag, -26).arg(QString::fromStdString(setting.first).replace('_', '-'), QString::fromStdString(setting.second));
  }
  for (const lab::ParamSpec& s : theLab->params()) text += optionHelp(s);
  text += QString("  %1  one JSON object per line (events: step, epoch, memory, message, done, error, ...)\n").arg("--json", -26);
  text += QString("  %1  this help\n\n").arg("--help, -h", -26);
  return text + kExitStatusHelp;
}

// Runs lab `labId` with options mapped onto its parameters: --batch-size 64 sets batch_size, a bare
// flag sets a bool, and `aliases` turn flags like --oom-sweep into settings (mode=oom-sweep).
// Exit status: 2 when the arguments are wrong (checked before the run starts; `userArgs` also
// requires the device to be usable here), 1 when the run throws.
int labCommand(const std::string& labId, const QStringList& args, QTextStream& out, QTextStream& err,
               const Aliases& aliases = {}, bool userArgs = true) {
  const bool json = args.contains("--json");
  std::unique_ptr<lab::Lab> theLab;
  std::optional<lab::Params> parsed;
  int epochs = 0;
  std::int64_t stepsPerEpoch = 0;
  // 1. The arguments.
  try {
    theLab = labs::makeLab(labId);
    lab::Params params = theLab->defaults();
    for (int i = 0; i < args.size(); ++i) {
      const QString& a = args[i];
      if (a == "--json") continue;
      if (auto alias = aliases.find(a); alias != aliases.end()) {
        params.set(alias->second.first, alias->second.second);
        continue;
      }
      if (!a.startsWith("--")) throw ValueError("unexpected argument '" + a.toStdString() + "' (options start with --)");
      const std::string name = a.mid(2).replace('-', '_').toStdString();
      const lab::ParamSpec& spec = params.spec(name);
      if (spec.type == lab::ParamType::Bool && (i + 1 >= args.size() || args[i + 1].startsWith("--"))) {
        params.setValue(name, lab::ParamValue(true));
        continue;
      }
      if (i + 1 >= args.size()) throw ValueError("option '" + a.toStdString() + "' needs a value");
      params.set(name, args[++i].toStdString());
    }
    if (userArgs) requireUsableDevice(params);
    if (labId == "train") {  // for the progress bar
      const std::int64_t batch = params.getInt("batch_size") * params.getInt("accumulate");
      const std::int64_t samples = params.getString("dataset") == "fashion-mnist" ? 60000 : params.getInt("samples");
      const std::int64_t subset = params.getInt("train_subset");
      const std::int64_t n = subset > 0 ? std::min(subset, samples) : samples;
      epochs = static_cast<int>(params.getInt("epochs"));
      stepsPerEpoch = (n + batch - 1) / batch;
    }
    parsed.emplace(std::move(params));
  } catch (const std::exception& e) {
    fail(out, err, json, e);
    return kExitUsage;
  }
  // 2. The run.
  try {
    CliSink sink(out, err, json, epochs, stepsPerEpoch);
    lab::StopToken stop;
    gActiveStop = &stop;
    if (gStopRequested.load()) stop.requestStop();
    theLab->run(*parsed, sink, stop);
    gActiveStop = nullptr;
    return kExitOk;
  } catch (const std::exception& e) {
    gActiveStop = nullptr;
    fail(out, err, json, e);
    return kExitFailed;
  }
}

const Aliases kMemoryAliases{{"--oom-sweep", {"mode", "oom-sweep"}}, {"--report", {"mode", "report"}}};

}  // namespace

int trainCommand(const QStringList& args, QTextStream& out, QTextStream& err) {
  if (wantsHelp(args)) {
    out << labHelp("train", "train", {});
    return kExitOk;
  }
  return labCommand("train", args, out, err);
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
  return course::loadCourse(dir);
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

int lessonCommand(QStringList args, QTextStream& out, QTextStream& err) {
  if (wantsHelp(args)) {
    out << "usage: gpulab-cli lesson ID [--quick] [--json] [--lessons DIR]\n\n"
           "Runs every run block of a lesson, as the player does (gpulab-cli lessons lists the ids).\n\n"
           "  --quick         the short variants the lesson gives its runs\n"
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
    args.removeAll("--json");
    if (args.size() != 1) throw ValueError("usage: gpulab-cli lesson ID [--quick] [--json] [--lessons DIR]");
    const course::Lesson* lesson = c.find(args.first());
    if (!lesson) throw ValueError("no lesson with id '" + args.first().toStdString() + "' (gpulab-cli lessons lists them)");
    if (!lesson->ok()) throw Error("lesson '" + lesson->id.toStdString() + "' is broken: " + lesson->error.toStdString());
    // Every run block, as the player runs them: the lab with the block's presets (and --quick's).
    for (int i = 0; i < lesson->runs.size(); ++i) {
      const course::RunBlock& run = lesson->runs[i];
      QStringList labArgs;
      auto settings = run.params;
      if (quick)
        for (const auto& [k, v] : run.quick) settings[k] = v;
      for (const auto& [k, v] : settings) labArgs << "--" + QString::fromStdString(k) << QString::fromStdString(v);
      if (json) {
        labArgs << "--json";
        out << line({{"event", "run"}, {"index", i + 1}, {"lab", run.lab}, {"title", run.title}}) << "\n";
      } else {
        out << "== Run " << i + 1 << ": " << run.title << " (" << run.lab << ")\n";
      }
      out.flush();
      // The device a lesson names is checked when it runs (a lesson that says cuda loads anywhere).
      if (const int rc = labCommand(run.lab.toStdString(), labArgs, out, err, {}, /*userArgs=*/false); rc != kExitOk) return rc;
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

int memoryCommand(const QStringList& args, QTextStream& out, QTextStream& err) {
  if (wantsHelp(args)) {
    out << labHelp("memory", "memory", kMemoryAliases);
    return kExitOk;
  }
  return labCommand("memory", args, out, err, kMemoryAliases);
}

}  // namespace gpulab::cli
