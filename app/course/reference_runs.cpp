#include "app/course/reference_runs.h"

#include "app/course/lab_json.h"

#include <QDate>
#include <QFile>
#include <QJsonDocument>
#include <QJsonObject>
#include <QRegularExpression>
#include <cmath>
#include <set>

namespace gpulab::course {
namespace {

// Thrown inside the parser; becomes the file's error.
struct ReferenceError {
  int line;
  QString what;
};

// Field readers: each names the event and the field when the value is missing or of the wrong type.
class Fields {
 public:
  Fields(const QJsonObject& o, const QString& event, int line) : o_(o), event_(event), line_(line) {}

  QString string(const char* key, bool required = true) const {
    const QJsonValue v = o_.value(key);
    if (v.isUndefined() && !required) return {};
    need(v, key);
    if (!v.isString()) fail(key, "a string");
    return v.toString();
  }
  double number(const char* key) const {
    const QJsonValue v = o_.value(key);
    need(v, key);
    if (!v.isDouble() || !std::isfinite(v.toDouble())) fail(key, "a number");
    return v.toDouble();
  }
  std::int64_t integer(const char* key, std::int64_t min = 0) const {
    const double d = number(key);
    if (d != std::floor(d) || d < static_cast<double>(min) || d > 9.0e15) fail(key, QString("a whole number >= %1").arg(min));
    return static_cast<std::int64_t>(d);
  }
 private:
  void need(const QJsonValue& v, const char* key) const {
    if (v.isUndefined()) throw ReferenceError{line_, QString("\"%1\" event: missing field \"%2\"").arg(event_, key)};
  }
  [[noreturn]] void fail(const char* key, const QString& what) const {
    throw ReferenceError{line_, QString("\"%1\" event: field \"%2\" must be %3").arg(event_, key, what)};
  }
  const QJsonObject& o_;
  QString event_;
  int line_;
};

ReferenceHeader parseHeader(const QJsonObject& o, int line, const Lesson* lesson) {
  if (o.value("event").toString() != "reference") {
    throw ReferenceError{line, "expected the header first: {\"event\":\"reference\",\"lesson\":...,\"gpu\":...,\"date\":...}"};
  }
  const Fields f(o, "reference", line);
  ReferenceHeader h;
  h.lesson = f.string("lesson");
  h.gpu = f.string("gpu");
  h.date = f.string("date");
  h.driver = f.string("driver", false);
  h.cuda = f.string("cuda", false);
  h.command = f.string("command", false);
  h.commit = f.string("commit", false);
  if (h.gpu.trimmed().isEmpty()) throw ReferenceError{line, "\"reference\" event: field \"gpu\" is empty"};
  if (!QDate::fromString(h.date, Qt::ISODate).isValid() || h.date.size() != 10) {
    throw ReferenceError{line, QString("\"reference\" event: field \"date\" must be a date like 2026-11-23 (found \"%1\")").arg(h.date)};
  }
  if (lesson && h.lesson != lesson->id) {
    throw ReferenceError{line, QString("\"reference\" event: recorded for lesson \"%1\", but this file is for lesson \"%2\"").arg(h.lesson, lesson->id)};
  }
  return h;
}

ReferenceRun parseRunStart(const QJsonObject& o, int line, const Lesson* lesson, const std::map<int, ReferenceRun>& seen) {
  const Fields f(o, "run", line);
  ReferenceRun r;
  r.index = static_cast<int>(f.integer("index", 1));
  r.lab = f.string("lab");
  r.title = f.string("title");
  if (seen.count(r.index)) throw ReferenceError{line, QString("\"run\" event: run %1 is recorded twice").arg(r.index)};
  if (lesson) {
    if (r.index > lesson->runs.size()) {
      throw ReferenceError{line, QString("\"run\" event: run index %1 does not exist (lesson \"%2\" has %3 run block(s))")
                                     .arg(r.index).arg(lesson->id).arg(lesson->runs.size())};
    }
    const QString lab = lesson->runs[r.index - 1].lab;
    if (lab != r.lab) {
      throw ReferenceError{line, QString("\"run\" event: run %1 was recorded with lab \"%2\", but the lesson's run %1 uses lab \"%3\"")
                                     .arg(r.index).arg(r.lab, lab)};
    }
  }
  return r;
}

// One recorded update: exactly what the lab sent (lab_json.h), checked against the run's views so far.
void parseEvent(const QString& event, const QJsonObject& o, int line, ReferenceRun& r, lab::UpdateChecker& checker) {
  if (event == "error") {
    throw ReferenceError{line, QString("the recorded run failed (%1: %2); record it again")
                                   .arg(o.value("type").toString("error"), o.value("message").toString().section('\n', 0, 0))};
  }
  QString why;
  std::optional<lab::Update> update = updateFromJson(o, &why);
  if (!update) throw ReferenceError{line, QString("\"%1\" event: %2").arg(event, why)};
  if (const auto* m = std::get_if<lab::Measurement>(&*update); m && !std::isfinite(m->value)) {
    throw ReferenceError{line, "\"measurement\" event: field \"value\" must be a number"};
  }
  try {
    checker.check(*update);
  } catch (const std::exception& e) {
    throw ReferenceError{line, QString("\"%1\" event: %2").arg(event, QString::fromUtf8(e.what()))};
  }
  r.updates << std::move(*update);
}

}  // namespace

const lab::Record* ReferenceRun::done() const {
  for (auto it = updates.crbegin(); it != updates.crend(); ++it) {
    if (const auto* r = std::get_if<lab::Record>(&*it); r && r->event == "done") return r;
  }
  return nullptr;
}

const ReferenceRun* ReferenceRuns::run(int index) const {
  if (!ok()) return nullptr;
  const auto it = runs.find(index);
  return it == runs.end() ? nullptr : &it->second;
}

QString ReferenceRuns::label() const {
  return QString("reference: %1, recorded %2 — not your machine").arg(shortGpuName(header.gpu), header.date);
}

QString ReferenceRuns::details() const {
  QStringList lines{"GPU: " + header.gpu};
  if (!header.driver.isEmpty()) lines << "driver: " + header.driver;
  if (!header.cuda.isEmpty()) lines << "CUDA: " + header.cuda;
  if (!header.command.isEmpty()) lines << "recorded with: " + header.command;
  if (!header.commit.isEmpty()) lines << "at commit: " + header.commit;
  return lines.join('\n');
}

ReferenceRuns parseReferenceRuns(const QByteArray& text, const QString& path, const Lesson* lesson) {
  ReferenceRuns out;
  out.path = path;
  const QList<QByteArray> lines = text.split('\n');
  bool haveHeader = false;
  std::optional<int> protocol;  // the lab protocol version the file says it follows
  ReferenceRun* current = nullptr;
  bool currentDone = false;
  lab::UpdateChecker checker;  // the current run's views
  int lineNo = 0, lastLine = 1;  // lastLine: the last line with content (where the file ends)
  try {
    for (const QByteArray& raw : lines) {
      ++lineNo;
      if (raw.trimmed().isEmpty()) continue;
      lastLine = lineNo;
      QJsonParseError err{};
      const QJsonDocument doc = QJsonDocument::fromJson(raw, &err);
      if (err.error != QJsonParseError::NoError) {
        throw ReferenceError{lineNo, QString("invalid JSON: %1 (at column %2)").arg(err.errorString()).arg(err.offset + 1)};
      }
      if (!doc.isObject()) throw ReferenceError{lineNo, "expected a JSON object"};
      const QJsonObject o = doc.object();
      if (!haveHeader) {
        out.header = parseHeader(o, lineNo, lesson);
        haveHeader = true;
        continue;
      }
      const QJsonValue ev = o.value("event");
      if (!ev.isString()) throw ReferenceError{lineNo, "missing field \"event\""};
      const QString event = ev.toString();
      if (event == "reference") throw ReferenceError{lineNo, "a second header: the header is line 1 only"};
      if (event == "protocol") {
        if (protocol || !out.runs.empty()) throw ReferenceError{lineNo, "\"protocol\" event: it comes once, before the first run"};
        protocol = static_cast<int>(Fields(o, "protocol", lineNo).integer("version", 1));
        if (*protocol != lab::kProtocolVersion) {
          throw ReferenceError{lineNo, QString("recorded with version %1 of the lab protocol, and this GPU Lab reads version %2: record it again "
                                               "(scripts/record-reference-runs.sh)").arg(*protocol).arg(lab::kProtocolVersion)};
        }
        continue;
      }
      if (event == "cell") continue;  // a code cell's output: the lesson's, not a lab's run
      if (event == "run") {
        if (!protocol) {
          throw ReferenceError{lineNo, QString("no \"protocol\" event before the first run: recorded before the lab protocol had versions; "
                                               "record it again (this GPU Lab reads version %1)").arg(lab::kProtocolVersion)};
        }
        if (current && !currentDone) {
          throw ReferenceError{lineNo, QString("run %1 has no \"done\" event before the next run starts").arg(current->index)};
        }
        ReferenceRun r = parseRunStart(o, lineNo, lesson, out.runs);
        const int index = r.index;
        current = &(out.runs[index] = std::move(r));
        currentDone = false;
        checker = lab::UpdateChecker();
        continue;
      }
      if (event == "challenge") continue;  // graded by gpulab-cli after the run, not sent by the lab
      if (!current) throw ReferenceError{lineNo, QString("a \"%1\" event before the first \"run\" event").arg(event)};
      if (currentDone) throw ReferenceError{lineNo, QString("a \"%1\" event after run %2's \"done\" event").arg(event).arg(current->index)};
      parseEvent(event, o, lineNo, *current, checker);
      if (event == "done") currentDone = true;
    }
    if (!haveHeader) throw ReferenceError{1, "empty file: expected the header {\"event\":\"reference\",...} on line 1"};
    if (out.runs.empty()) throw ReferenceError{lastLine, "no run recorded (expected {\"event\":\"run\",...} after the header)"};
    if (!currentDone) {
      throw ReferenceError{lastLine, QString("run %1 has no \"done\" event (was the recording cut short?)").arg(current->index)};
    }
  } catch (const ReferenceError& e) {
    out.error = QString("%1:%2: %3").arg(path).arg(e.line).arg(e.what);
    out.runs.clear();
  }
  return out;
}

ReferenceRuns loadReferenceRuns(const QString& path, const Lesson* lesson) {
  QFile f(path);
  if (!f.open(QIODevice::ReadOnly)) {
    ReferenceRuns out;
    out.path = path;
    out.error = QString("%1:0: cannot read the file (%2)").arg(path, f.errorString());
    return out;
  }
  return parseReferenceRuns(f.readAll(), path, lesson);
}

QString referenceRunsPath(const QString& lessonId, const QString& root) { return root + "/" + lessonId + ".jsonl"; }

std::optional<ReferenceRuns> findReferenceRuns(const Lesson& lesson, const QString& root) {
  const QString path = referenceRunsPath(lesson.id, root);
  if (!QFile::exists(path)) return std::nullopt;
  return loadReferenceRuns(path, &lesson);
}

QString shortGpuName(const QString& gpu) {
  // A memory size ("80GB", "40 GB") and everything after it ("HBM3"), with a form factor joined to
  // it by a hyphen ("-SXM4-", "-PCIE-"): the parts that name a variant of the chip, not the chip.
  const QRegularExpression suffix(R"((?:-(?:SXM\d*|PCIE|NVL))?[\s-]+\d+\s*GB\b.*$)", QRegularExpression::CaseInsensitiveOption);
  QString name = gpu.trimmed();
  const QString shortened = QString(name).remove(suffix).trimmed();
  return shortened.isEmpty() ? name : shortened;
}

}  // namespace gpulab::course
