#include "app/course/lesson.h"

#include <QFile>
#include <QFileInfo>
#include <QLocale>
#include <QRegularExpression>
#include <QScopeGuard>

#include <QJsonArray>
#include <QJsonDocument>
#include <QJsonObject>
#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstring>
#include <fcntl.h>
#include <map>
#include <optional>
#include <set>
#include <sys/stat.h>
#include <unistd.h>
#include <utility>

#include "app/course/lab_params.h"
#include "engine/core/errors.h"

namespace gpulab::course {
namespace {

// Thrown inside the parser; becomes the lesson's error.
struct LessonError {
  int line;
  QString what;
};

std::string valueText(const QJsonValue& v) {
  if (v.isBool()) return v.toBool() ? "true" : "false";
  if (v.isDouble()) return QString::number(v.toDouble(), 'g', QLocale::FloatingPointShortest).toStdString();  // 0.05, exactly
  return v.toString().toStdString();
}

std::map<std::string, std::string> settings(const QJsonObject& o, const char* key, int line) {
  std::map<std::string, std::string> out;
  const QJsonValue v = o.value(key);
  if (v.isUndefined()) return out;
  if (!v.isObject()) throw LessonError{line, QString("run block: \"%1\" must be an object of parameter values").arg(key)};
  const QJsonObject obj = v.toObject();
  for (auto it = obj.begin(); it != obj.end(); ++it) {
    if (!it.value().isString() && !it.value().isDouble() && !it.value().isBool()) {
      throw LessonError{line, QString("run block: value of '%1' must be a string, number or boolean").arg(it.key())};
    }
    out[it.key().toStdString()] = valueText(it.value());
  }
  return out;
}

// JSON's type names, for "must be a string (found a number)".
QString jsonType(const QJsonValue& v) {
  switch (v.type()) {
    case QJsonValue::Null: return "null";
    case QJsonValue::Bool: return v.toBool() ? "true" : "false";
    case QJsonValue::Double: return QString::number(v.toDouble(), 'g', 17);
    case QJsonValue::String: return "a string";
    case QJsonValue::Array: return "a list";
    case QJsonValue::Object: return "an object";
    case QJsonValue::Undefined: break;
  }
  return "nothing";
}

// The string at `key`, or `fallback` when it is absent; anything but a string is a mistake (toString()
// would silently make it "").
QString stringField(const QJsonObject& o, const char* key, const QString& what, int line, const QString& fallback = {}) {
  const QJsonValue v = o.value(key);
  if (v.isUndefined()) return fallback;
  if (!v.isString()) throw LessonError{line, QString("%1: \"%2\" must be a string (found %3)").arg(what, key, jsonType(v))};
  return v.toString();
}

void checkKeys(const QJsonObject& o, const std::set<QString>& known, const QString& what, const QString& list, int line) {
  for (const QString& k : o.keys())
    if (!known.count(k)) throw LessonError{line, QString("%1: unknown key \"%2\" (%3)").arg(what, k, list)};
}

// A challenge's or an exercise's "checks": [{"measurement": NAME, "at_least"/"at_most": NUMBER}, ...].
QVector<ChallengeCheck> parseChecks(const QJsonValue& checks, const QString& where, int line) {
  if (!checks.isArray() || checks.toArray().isEmpty()) {
    throw LessonError{line, where + ": \"checks\" must be a non-empty list of {\"measurement\": NAME, \"at_least\"/\"at_most\": NUMBER}"};
  }
  QVector<ChallengeCheck> out;
  for (const QJsonValue& cv : checks.toArray()) {
    if (!cv.isObject()) throw LessonError{line, QString("%1: each check must be an object (found %2)").arg(where, jsonType(cv))};
    const QJsonObject co = cv.toObject();
    checkKeys(co, {"measurement", "at_least", "at_most", "timed"}, where + ": check", "measurement, at_least, at_most, timed", line);
    ChallengeCheck check;
    check.measurement = stringField(co, "measurement", where + ": check", line);
    if (co.contains("timed")) {
      const QJsonValue t = co.value("timed");
      if (!t.isBool()) throw LessonError{line, QString("%1: check: \"timed\" must be true or false (found %2)").arg(where, jsonType(t))};
      check.timed = t.toBool();
    }
    if (check.measurement.isEmpty()) throw LessonError{line, where + ": a check without \"measurement\""};
    for (const auto& [key, bound] : {std::pair{"at_least", &check.atLeast}, std::pair{"at_most", &check.atMost}}) {
      const QJsonValue b = co.value(key);
      if (b.isUndefined()) continue;
      if (!b.isDouble()) throw LessonError{line, QString("%1: \"%2\" must be a number (found %3)").arg(where, key, jsonType(b))};
      *bound = b.toDouble();
    }
    if (!check.atLeast && !check.atMost) throw LessonError{line, where + ": check of '" + check.measurement + "' has neither \"at_least\" nor \"at_most\""};
    if (check.atLeast && check.atMost && *check.atLeast > *check.atMost) {
      throw LessonError{line, where + ": check of '" + check.measurement + "' asks for at least more than at most: no run can meet it"};
    }
    out << check;
  }
  return out;
}

Challenge parseChallenge(const QJsonValue& v, int line) {
  const QString where = "run block: challenge";
  if (!v.isObject()) throw LessonError{line, QString("%1 must be an object {\"text\": ..., \"checks\": [...]} (found %2)").arg(where, jsonType(v))};
  const QJsonObject o = v.toObject();
  checkKeys(o, {"text", "checks", "examples"}, where, "text, checks, examples", line);
  Challenge c;
  c.text = stringField(o, "text", where, line);
  if (c.text.trimmed().isEmpty()) throw LessonError{line, where + ": missing \"text\" (what the learner is asked to do)"};
  c.checks = parseChecks(o.value("checks"), where, line);
  if (o.contains("examples")) {
    const QJsonValue ev = o.value("examples");
    if (!ev.isObject()) throw LessonError{line, QString("%1: \"examples\" must be an object {\"fails\": {...}, \"meets\": {...}} (found %2)").arg(where, jsonType(ev))};
    const QJsonObject eo = ev.toObject();
    checkKeys(eo, {"fails", "meets"}, where + ": examples", "fails, meets", line);
    if (!eo.contains("fails") || !eo.contains("meets")) throw LessonError{line, where + ": examples need both \"fails\" and \"meets\""};
    c.examples = ChallengeExamples{settings(eo, "fails", line), settings(eo, "meets", line)};
  }
  return c;
}

// A challenge no run can meet is refused where the lesson is written (issue 27 6.6: such challenges
// loaded as "ok"): a check must name a measurement the lab sends, in a direction its unit allows, and
// the checks of one measurement must leave room between them.
void checkAgainstLab(Challenge& c, const lab::Lab& theLab, int line) {
  const QString where = "run block: challenge";
  const std::vector<lab::MeasurementSpec> specs = theLab.measurements();
  std::map<QString, std::pair<std::optional<double>, std::optional<double>>> bounds;  // the tightest at_least, at_most
  for (ChallengeCheck& check : c.checks) {
    const lab::MeasurementSpec* spec = lab::findMeasurement(specs, check.measurement.toStdString());
    if (!spec) {
      QStringList names;
      for (const lab::MeasurementSpec& s : specs) names << QString::fromStdString(s.name);
      throw LessonError{line, QString("%1: the %2 lab sends no measurement '%3', so no run can meet the check (it sends: %4; '*' stands "
                                      "for a part the settings choose)")
                                  .arg(where, QString::fromStdString(theLab.id()), check.measurement, names.join("; "))};
    }
    check.unit = spec->unit;  // the asked numbers read in it even before a run measured anything
    if (check.atMost && *check.atMost <= 0 && lab::alwaysPositive(spec->unit)) {
      throw LessonError{line, QString("%1: check of '%2' asks for at most %3 %4, but it is always above 0: no run can meet it")
                                  .arg(where, check.measurement, QString::number(*check.atMost), QString::fromStdString(spec->unit))};
    }
    auto& [least, most] = bounds[check.measurement];
    if (check.atLeast) least = std::max(least.value_or(*check.atLeast), *check.atLeast);
    if (check.atMost) most = std::min(most.value_or(*check.atMost), *check.atMost);
    if (least && most && *least > *most) {
      throw LessonError{line, QString("%1: the checks of '%2' ask for at least %3 and at most %4: no run can meet them")
                                  .arg(where, check.measurement, QString::number(*least), QString::number(*most))};
    }
  }
}

// A number at `key` (required), or a whole number.
double numberField(const QJsonObject& o, const char* key, const QString& what, int line) {
  const QJsonValue v = o.value(key);
  if (!v.isDouble()) throw LessonError{line, QString("%1: \"%2\" must be a number (found %3)").arg(what, key, jsonType(v))};
  return v.toDouble();
}
std::int64_t integerField(const QJsonObject& o, const char* key, const QString& what, int line) {
  const double d = numberField(o, key, what, line);
  if (d != std::floor(d) || std::fabs(d) > 9007199254740992.0) throw LessonError{line, QString("%1: \"%2\" must be a whole number").arg(what, key)};
  return static_cast<std::int64_t>(d);
}

// One of a ```lab block's "params": {"name", "type", "description", "default", ...} (lessons/README.md).
lab::ParamSpec parseLabParam(const QJsonValue& v, int line) {
  if (!v.isObject()) throw LessonError{line, QString("lab block: each of \"params\" must be an object {\"name\": ..., \"type\": ..., ...} (found %1)").arg(jsonType(v))};
  const QJsonObject o = v.toObject();
  const QString name = stringField(o, "name", "lab block: a parameter", line);
  // The name is a keyword argument of the lab's run(): a Python identifier.
  static const QRegularExpression identifier(QRegularExpression::anchoredPattern("[A-Za-z_][A-Za-z0-9_]*"));
  static const std::set<QString> keywords{"False", "None", "True", "and", "as", "assert", "async", "await", "break", "class",
                                          "continue", "def", "del", "elif", "else", "except", "finally", "for", "from", "global",
                                          "if", "import", "in", "is", "lambda", "nonlocal", "not", "or", "pass", "raise", "return",
                                          "try", "while", "with", "yield"};
  if (!identifier.match(name).hasMatch() || keywords.count(name)) throw LessonError{line, QString("lab block: parameter '%1' is not a Python name").arg(name)};
  const QString what = QString("lab block: parameter '%1'").arg(name);
  const QString type = stringField(o, "type", what, line);
  const std::string n = name.toStdString(), description = stringField(o, "description", what, line).toStdString();
  auto keys = [&](std::set<QString> known) {
    known.insert({"name", "type", "description"});
    checkKeys(o, known, what, QStringList(known.begin(), known.end()).join(", "), line);
  };
  if (type == "int") {
    keys({"default", "min", "max"});
    return lab::intParam(n, integerField(o, "default", what, line), integerField(o, "min", what, line), integerField(o, "max", what, line), description);
  }
  if (type == "float") {
    keys({"default", "min", "max"});
    return lab::floatParam(n, numberField(o, "default", what, line), numberField(o, "min", what, line), numberField(o, "max", what, line), description);
  }
  if (type == "bool") {
    keys({"default"});
    if (!o.value("default").isBool()) throw LessonError{line, what + ": \"default\" must be true or false"};
    return lab::boolParam(n, o.value("default").toBool(), description);
  }
  if (type == "choice") {
    keys({"default", "choices"});
    std::vector<std::string> choices;
    for (const QJsonValue& c : o.value("choices").toArray()) {
      if (!c.isString()) throw LessonError{line, what + ": \"choices\" must be a list of strings"};
      choices.push_back(c.toString().toStdString());
    }
    if (choices.empty()) throw LessonError{line, what + ": \"choices\" must be a non-empty list of strings"};
    return lab::choiceParam(n, stringField(o, "default", what, line).toStdString(), choices, description);
  }
  if (type == "text") {
    keys({"default"});
    return lab::textParam(n, stringField(o, "default", what, line).toStdString(), description);
  }
  if (type == "widths") {  // hidden layer widths, "256,128,100": checked when set (lab_params.h)
    keys({"default"});
    return lab::textParam(n, stringField(o, "default", what, line).toStdString(), description, checkHiddenWidths);
  }
  if (type == "device") {
    keys({"gpu_only"});
    lab::ParamSpec spec = deviceParam(n, description);
    // gpu_only: a lab about the GPU side (the CPU is the other side of the same-device rule). The form
    // offers no cpu, and auto means the GPU -- the emulated one without a real one, as the lab runs
    // with emulated_gpu; the lab itself refuses cpu when it is typed.
    const QJsonValue gpuOnly = o.value("gpu_only");
    if (!gpuOnly.isUndefined() && !gpuOnly.isBool()) throw LessonError{line, what + ": \"gpu_only\" must be true or false"};
    if (gpuOnly.toBool()) {
      spec.suggestionLabels.front() = "auto (the GPU; without one, the emulated GPU)";
      spec.description = description + ": auto (the GPU; without one, the emulated GPU), cuda or cuda:N";  // --help offers no cpu either
      for (std::size_t i = spec.suggestions.size(); i-- > 0;) {
        if (spec.suggestions[i] != "cpu") continue;
        spec.suggestions.erase(spec.suggestions.begin() + static_cast<std::ptrdiff_t>(i));
        spec.suggestionLabels.erase(spec.suggestionLabels.begin() + static_cast<std::ptrdiff_t>(i));
      }
    }
    return spec;
  }
  throw LessonError{line, QString("%1: unknown type '%2' (int, float, bool, choice, text, widths, device)").arg(what, type)};
}

// A ```lab block: a Python lab in the lesson's folder (python_lab.h), whose id no other lab has:
//   {"id": "device-rule", "title": "The same-device rule", "code": "device_rule_lab.py", "emulated_gpu": true,
//    "params": [{"name": "fixed", "type": "bool", "default": false, "description": "..."}, ...],
//    "measurements": [{"name": "device-mismatch errors", "unit": ""}, ...]}
PythonLabSpec parseLab(const QJsonObject& o, const Lesson& lesson, int line) {
  const QString what = "lab block";
  checkKeys(o, {"id", "title", "code", "emulated_gpu", "params", "measurements"}, what, "id, title, code, emulated_gpu, params, measurements", line);
  PythonLabSpec spec;
  spec.id = stringField(o, "id", what, line);
  spec.title = stringField(o, "title", what, line, spec.id);
  if (spec.id.isEmpty()) throw LessonError{line, what + ": missing \"id\""};
  for (const PythonLabSpec& known : lesson.labs)
    if (known.id == spec.id) throw LessonError{line, QString("lab block: a lab '%1' is already declared (by %2)").arg(spec.id, known.sourcePath)};
  const QString code = stringField(o, "code", what, line);
  static const QRegularExpression fileName(QRegularExpression::anchoredPattern("[A-Za-z0-9_]+\\.py"));
  if (!fileName.match(code).hasMatch()) {
    throw LessonError{line, QString("lab block: \"code\" must name a .py file in the lesson's folder, like \"device_rule_lab.py\" (found \"%1\")").arg(code)};
  }
  spec.sourcePath = lesson.folder.section('/', -1) + "/" + code;
  spec.path = lesson.folder + "/" + code;
  spec.helpersPath = lesson.folder.section('/', 0, -2) + "/" + kLabHelpersFile;
  if (!QFile::exists(spec.path)) throw LessonError{line, QString("lab block: the lab's code %1 is not in the lesson's folder").arg(code)};
  if (const LessonFile read = readLabCode(spec.path); !read.problem.isEmpty()) throw LessonError{line, "lab block: " + read.problem};
  if (const QJsonValue e = o.value("emulated_gpu"); !e.isUndefined()) {
    if (!e.isBool()) throw LessonError{line, what + ": \"emulated_gpu\" must be true or false"};
    spec.emulatedGpu = e.toBool();
  }
  if (!o.value("params").isArray()) throw LessonError{line, what + ": \"params\" must be a list of parameters"};
  std::set<std::string> names;
  for (const QJsonValue& v : o.value("params").toArray()) {
    spec.params.push_back(parseLabParam(v, line));
    if (!names.insert(spec.params.back().name).second) {
      throw LessonError{line, QString("lab block: parameter '%1' is declared twice").arg(QString::fromStdString(spec.params.back().name))};
    }
  }
  try {
    lab::Params defaults(spec.params);  // each default must be an allowed value
    for (const lab::ParamSpec& p : spec.params) defaults.setValue(p.name, p.defaultValue);
  } catch (const Error& e) {
    throw LessonError{line, QString("lab block: %1").arg(e.what())};
  }
  if (!o.value("measurements").isArray()) throw LessonError{line, what + ": \"measurements\" must be a list of {\"name\": ..., \"unit\": ...}"};
  for (const QJsonValue& v : o.value("measurements").toArray()) {
    const QJsonObject m = v.toObject();
    checkKeys(m, {"name", "unit"}, "lab block: a measurement", "name, unit", line);
    const QString name = stringField(m, "name", "lab block: a measurement", line);
    if (name.isEmpty()) throw LessonError{line, "lab block: a measurement without \"name\""};
    spec.measurements.push_back({name.toStdString(), stringField(m, "unit", "lab block: a measurement", line).toStdString()});
  }
  return spec;
}

std::unique_ptr<lab::Lab> findLab(const QVector<PythonLabSpec>& pythonLabs, const QString& id) {
  QStringList known;
  for (const PythonLabSpec& spec : pythonLabs) {
    if (spec.id == id) return std::make_unique<PythonLab>(spec);
    known << spec.id;
  }
  throw ValueError("unknown lab '" + id.toStdString() + "' (" +
                   (known.isEmpty() ? std::string("no lab is declared by this lesson or one before it")
                                    : "known labs: " + known.join(", ").toStdString()) + ")");
}

RunBlock parseRun(const QJsonObject& o, int line, const QVector<PythonLabSpec>& pythonLabs) {
  RunBlock r;
  r.line = line;
  r.lab = stringField(o, "lab", "run block", line);
  r.title = stringField(o, "title", "run block", line, r.lab);
  if (r.lab.isEmpty()) throw LessonError{line, "run block: missing \"lab\""};
  std::unique_ptr<lab::Lab> theLab;
  try {
    theLab = findLab(pythonLabs, r.lab);
  } catch (const Error& e) {
    throw LessonError{line, QString("run block: %1").arg(e.what())};
  }
  r.params = settings(o, "params", line);
  r.quick = settings(o, "quick", line);
  // Every preset must be a valid value of the lab's parameter: Params::set says what is wrong.
  lab::Params params = theLab->defaults();
  for (const auto* group : {&r.params, &r.quick}) {
    for (const auto& [name, value] : *group) {
      try {
        params.set(name, value);
      } catch (const Error& e) {
        throw LessonError{line, QString("run block: %1").arg(e.what())};
      }
    }
  }
  const QJsonValue expose = o.value("expose");
  if (!expose.isUndefined() && !expose.isArray()) {
    throw LessonError{line, QString("run block: \"expose\" must be a list of parameter names, like [\"lr\"] (found %1)").arg(jsonType(expose))};
  }
  for (const QJsonValue& v : expose.toArray()) {
    if (!v.isString()) throw LessonError{line, QString("run block: expose: each entry must be a parameter name in quotes (found %1)").arg(jsonType(v))};
    try {
      params.spec(v.toString().toStdString());
    } catch (const Error& e) {
      throw LessonError{line, QString("run block: expose: %1").arg(e.what())};
    }
    r.expose << v.toString();
  }
  // The settings a run will get -- the presets, with --quick's, with each challenge example's -- must
  // each be valid values, and must not contradict one another (Lab::check, as a run checks them).
  auto checked = [&](std::initializer_list<const std::map<std::string, std::string>*> layers, const QString& what) {
    lab::Params all = theLab->defaults();
    try {
      for (const auto* layer : layers)
        for (const auto& [name, value] : *layer) all.set(name, value);
      theLab->check(all);
    } catch (const Error& e) {
      throw LessonError{line, QString("run block: %1%2").arg(what, e.what())};
    }
  };
  checked({&r.params}, "");
  checked({&r.params, &r.quick}, "quick: ");
  if (o.contains("challenge")) {
    r.challenge = parseChallenge(o.value("challenge"), line);
    checkAgainstLab(*r.challenge, *theLab, line);
    if (r.challenge->examples) {
      checked({&r.params, &r.challenge->examples->fails}, "challenge: examples: fails: ");
      checked({&r.params, &r.challenge->examples->meets}, "challenge: examples: meets: ");
    }
  }
  static const std::set<QString> known{"lab", "title", "params", "quick", "expose", "challenge"};
  for (const QString& k : o.keys())
    if (!known.count(k)) throw LessonError{line, QString("run block: unknown key \"%1\" (lab, title, params, quick, expose, challenge)").arg(k)};
  return r;
}

Quiz parseQuiz(const QJsonObject& o, int line) {
  Quiz q;
  q.line = line;
  checkKeys(o, {"question", "answers"}, "quiz", "question, answers", line);
  q.question = stringField(o, "question", "quiz", line);
  if (q.question.trimmed().isEmpty()) throw LessonError{line, "quiz: missing \"question\""};
  const QJsonValue answersValue = o.value("answers");
  if (!answersValue.isUndefined() && !answersValue.isArray()) {
    throw LessonError{line, QString("quiz: \"answers\" must be a list of answers (found %1)").arg(jsonType(answersValue))};
  }
  const QJsonArray answers = answersValue.toArray();
  if (answers.size() < 2) throw LessonError{line, "quiz: needs at least two \"answers\""};
  int correct = 0;
  for (const QJsonValue& v : answers) {
    if (!v.isObject()) throw LessonError{line, QString("quiz: each answer must be an object {\"text\": ..., \"explanation\": ...} (found %1)").arg(jsonType(v))};
    const QJsonObject a = v.toObject();
    checkKeys(a, {"text", "correct", "explanation"}, "quiz: answer", "text, correct, explanation", line);
    QuizAnswer ans{stringField(a, "text", "quiz: answer", line), false, stringField(a, "explanation", "quiz: answer", line)};
    if (ans.text.trimmed().isEmpty()) throw LessonError{line, "quiz: an answer has no \"text\""};
    if (const QJsonValue c = a.value("correct"); !c.isUndefined()) {
      // toBool() would read 1 or "true" as false: only JSON's true and false are accepted.
      if (!c.isBool()) throw LessonError{line, QString("quiz: \"correct\" of the answer \"%1\" must be true or false (found %2)").arg(ans.text, jsonType(c))};
      ans.correct = c.toBool();
    }
    if (ans.explanation.trimmed().isEmpty()) {
      throw LessonError{line, QString("quiz: the answer \"%1\" has no \"explanation\" (every answer explains why it is right or wrong)").arg(ans.text)};
    }
    correct += ans.correct;
    q.answers << ans;
  }
  if (correct != 1) throw LessonError{line, QString("quiz: exactly one answer must be \"correct\": true (found %1)").arg(correct)};
  return q;
}

// The measurements every exercise run gives (python/gpulab/kernel.py, Kernel.measure); "last NAME"
// comes from lab.log, the rest from the exercise's "values".
const std::set<QString>& exerciseMeasurements() {
  static const std::set<QString> names{"errors", "device-mismatch errors", "out-of-memory errors", "seconds", "peak allocated"};
  return names;
}

// One answer of an exercise's bank (```python wrong or ```python right): the code, and what its
// leading comment lines say -- "# wrong: why", "# fails: a check's name" (one line each), "# hint: ..."
// for a wrong answer, "# right: how it differs" for a right one.
void addToBank(Exercise& e, const QString& kind, const QString& code, int line) {
  BankAnswer a{.code = code, .line = line};
  const bool wrong = kind == "wrong";
  for (const QString& raw : code.split('\n')) {
    const QString l = raw.trimmed();
    if (!l.startsWith('#')) break;
    const QString text = l.mid(1).trimmed();
    const int colon = text.indexOf(':');
    const QString key = colon > 0 ? text.left(colon).trimmed() : QString(), value = text.mid(colon + 1).trimmed();
    if (key == kind) a.why = value;
    else if (wrong && key == "fails") a.fails << value;
    else if (wrong && key == "hint") a.hint = value;
  }
  const QString where = QString("exercise '%1': the ```python %2 block").arg(e.title, kind);
  if (a.why.isEmpty()) throw LessonError{line, where + QString(" must begin with a comment line \"# %1: ...\" saying %2").arg(kind, wrong ? "why it is wrong" : "how it differs from the solution")};
  if (wrong && (a.fails.isEmpty() || a.hint.isEmpty())) {
    throw LessonError{line, where + " needs \"# fails: <a check's measurement>\" (a line for each check it must fail) and \"# hint: ...\" (what the panel shows first when a run fails the same way) after its \"# wrong:\" line"};
  }
  for (const QString& f : a.fails) {
    const bool known = std::any_of(e.challenge.checks.begin(), e.challenge.checks.end(), [&](const ChallengeCheck& c) { return c.measurement == f; });
    if (!known) throw LessonError{line, where + QString(": \"# fails: %1\" names no check of the exercise").arg(f)};
  }
  (wrong ? e.wrong : e.right) << a;
}

Exercise parseExercise(const QJsonObject& o, int line) {
  const QString where = "exercise";
  checkKeys(o, {"title", "text", "checks", "values", "hints", "needs", "machines"}, where, "title, text, checks, values, hints, needs, machines", line);
  Exercise e;
  e.line = line;
  e.title = stringField(o, "title", where, line);
  e.challenge.text = stringField(o, "text", where, line);
  if (e.title.trimmed().isEmpty() || e.challenge.text.trimmed().isEmpty()) {
    throw LessonError{line, where + ": needs a \"title\" and a \"text\" (what the learner is asked to do)"};
  }
  const QJsonValue values = o.value("values");
  if (!values.isUndefined() && !values.isObject()) {
    throw LessonError{line, QString("%1: \"values\" must be an object {\"name\": \"python expression\"} (found %2)").arg(where, jsonType(values))};
  }
  const QJsonObject valueObject = values.toObject();
  for (auto it = valueObject.begin(); it != valueObject.end(); ++it) {
    if (!it.value().isString() || it.value().toString().trimmed().isEmpty()) {
      throw LessonError{line, QString("%1: values: '%2' must be a Python expression in a string").arg(where, it.key())};
    }
    if (exerciseMeasurements().count(it.key()) || it.key().startsWith("last ")) {
      throw LessonError{line, QString("%1: values: '%2' is the name of a measurement every run takes; name the value otherwise").arg(where, it.key())};
    }
    e.values[it.key()] = it.value().toString();
  }
  e.challenge.checks = parseChecks(o.value("checks"), where, line);
  for (ChallengeCheck& check : e.challenge.checks) {
    const QString& name = check.measurement;
    if (!exerciseMeasurements().count(name) && !name.startsWith("last ") && !e.values.contains(name)) {
      throw LessonError{line, QString("%1: a run gives no measurement '%2', so no run can meet the check (every run gives errors, "
                                      "device-mismatch errors, out-of-memory errors, seconds, peak allocated and 'last NAME' for what "
                                      "it logged; add '%2' to \"values\" to measure it)").arg(where, name)};
    }
    if (name == "peak allocated") check.unit = "bytes";
    if (name == "seconds") check.unit = "s";
  }
  const QJsonValue hints = o.value("hints");
  if (!hints.isUndefined() && !hints.isArray()) throw LessonError{line, QString("%1: \"hints\" must be a list of strings (found %2)").arg(where, jsonType(hints))};
  for (const QJsonValue& h : hints.toArray()) {
    if (!h.isString()) throw LessonError{line, QString("%1: hints: each hint must be a string (found %2)").arg(where, jsonType(h))};
    e.hints << h.toString();
  }
  const QString needs = stringField(o, "needs", where, line);
  if (!needs.isEmpty() && needs != "cuda") throw LessonError{line, QString("%1: \"needs\" can only be \"cuda\" (found \"%2\")").arg(where, needs)};
  e.needsCuda = needs == "cuda";
  // The machines the learner's code is graded on, each in a fresh session (notebook/machine.h).
  const QJsonValue machines = o.value("machines");
  if (!machines.isUndefined() && (!machines.isArray() || machines.toArray().isEmpty())) {
    throw LessonError{line, QString("%1: \"machines\" must be a non-empty list of machine names (found %2)").arg(where, jsonType(machines))};
  }
  for (const QJsonValue& m : machines.toArray()) {
    const std::optional<notebook::Machine> machine = m.isString() ? notebook::Machine::fromName(m.toString()) : std::nullopt;
    if (!machine) {
      throw LessonError{line, QString("%1: machines: '%2' is not a machine: \"no-gpu\", or \"gpu-NNgib\" (an emulated GPU of NN GiB, 1 to 1024)")
                                  .arg(where, m.isString() ? m.toString() : jsonType(m))};
    }
    if (std::any_of(e.machines.begin(), e.machines.end(), [&](const notebook::Machine& n) { return n.name() == machine->name(); })) {
      throw LessonError{line, QString("%1: machines: '%2' is listed twice").arg(where, machine->name())};
    }
    e.machines << *machine;
  }
  if (e.needsCuda && !e.machines.isEmpty()) {
    throw LessonError{line, where + ": \"needs\" and \"machines\" both say where it runs: with machines, each is a session of its own; leave \"needs\" out"};
  }
  return e;
}

QJsonObject parseJson(const QString& body, int line, const char* what) {
  QJsonParseError err{};
  const QJsonDocument doc = QJsonDocument::fromJson(body.toUtf8(), &err);
  if (err.error != QJsonParseError::NoError) {
    const int errLine = line + 1 + static_cast<int>(body.left(err.offset).count('\n'));
    throw LessonError{errLine, QString("%1 block: invalid JSON: %2").arg(what, err.errorString())};
  }
  if (!doc.isObject()) throw LessonError{line, QString("%1 block: expected a JSON object").arg(what)};
  return doc.object();
}

// An open code fence (CommonMark): up to three spaces, then three or more ` or ~. Inside one, a
// "```run" line is code that a lesson shows, not a directive.
struct CodeFence {
  QChar ch;
  int length = 0;
  int line = 0;
};

std::optional<CodeFence> openingFence(const QString& l, int line) {
  int i = 0;
  while (i < l.size() && i < 4 && l[i] == ' ') ++i;
  if (i > 3 || i >= l.size() || (l[i] != '`' && l[i] != '~')) return std::nullopt;
  const QChar ch = l[i];
  int n = 0;
  while (i + n < l.size() && l[i + n] == ch) ++n;
  if (n < 3) return std::nullopt;
  if (ch == '`' && l.mid(i + n).contains('`')) return std::nullopt;  // an inline code span, not a fence
  return CodeFence{ch, n, line};
}

bool closesFence(const QString& l, const CodeFence& f) {
  int i = 0;
  while (i < l.size() && i < 4 && l[i] == ' ') ++i;
  if (i > 3) return false;
  int n = 0;
  while (i + n < l.size() && l[i + n] == f.ch) ++n;
  return n >= f.length && l.mid(i + n).trimmed().isEmpty();
}

// A line that ends a paragraph for the length limit: empty, or only quote markers.
bool isBlank(const QString& l) {
  for (QChar c : l)
    if (!c.isSpace() && c != '>') return false;
  return true;
}

// Where a line's text starts, after indentation and quote markers.
qsizetype contentStart(const QString& l) {
  qsizetype i = 0;
  while (i < l.size() && (l[i].isSpace() || l[i] == '>')) ++i;
  return i;
}

bool isHeading(const QString& l) {
  const qsizetype i = contentStart(l);
  qsizetype n = 0;
  while (i + n < l.size() && l[i + n] == '#') ++n;
  return n >= 1 && n <= 6 && (i + n == l.size() || l[i + n].isSpace());
}

// A line that starts a text block of its own in the rendered document (a heading, a list item, a
// table row), so it starts a new count for the paragraph limit.
bool startsBlock(const QString& l) {
  if (isHeading(l)) return true;
  const qsizetype i = contentStart(l);
  if (i >= l.size()) return false;
  if (l[i] == '|') return true;
  if (l[i] == '-' || l[i] == '*' || l[i] == '+') return i + 1 < l.size() && l[i + 1].isSpace();
  qsizetype j = i;
  while (j < l.size() && l[j].isDigit()) ++j;
  return j > i && j - i <= 9 && j + 1 < l.size() && (l[j] == '.' || l[j] == ')') && l[j + 1].isSpace();
}

// The offset of the first byte that is not part of valid UTF-8 (overlong forms, surrogates and code
// points above U+10FFFF included), or -1.
qsizetype invalidUtf8At(const QByteArray& b) {
  const auto* p = reinterpret_cast<const unsigned char*>(b.constData());
  const qsizetype n = b.size();
  for (qsizetype i = 0; i < n;) {
    const unsigned c = p[i];
    int len = 0;
    unsigned cp = 0, min = 0;
    if (c < 0x80) { ++i; continue; }
    if ((c & 0xE0) == 0xC0) { len = 2; cp = c & 0x1F; min = 0x80; }
    else if ((c & 0xF0) == 0xE0) { len = 3; cp = c & 0x0F; min = 0x800; }
    else if ((c & 0xF8) == 0xF0) { len = 4; cp = c & 0x07; min = 0x10000; }
    else return i;
    if (i + len > n) return i;
    for (int k = 1; k < len; ++k) {
      if ((p[i + k] & 0xC0) != 0x80) return i;
      cp = (cp << 6) | (p[i + k] & 0x3F);
    }
    if (cp < min || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) return i;
    i += len;
  }
  return -1;
}

// What a file that is not a regular one is: "lesson.md is a FIFO, not a regular file".
QString fileKind(mode_t mode) {
  if (S_ISDIR(mode)) return "a folder";
  if (S_ISFIFO(mode)) return "a FIFO";
  if (S_ISCHR(mode)) return "a character device";
  if (S_ISBLK(mode)) return "a block device";
  if (S_ISSOCK(mode)) return "a socket";
  return "a special file";
}

}  // namespace

bool liesInside(const QString& resolved, const QString& folder) {
  const QString inside = QFileInfo(folder).canonicalFilePath();
  return !inside.isEmpty() && resolved.startsWith(inside.endsWith('/') ? inside : inside + '/');
}

LessonFile readLessonFile(const QString& folder, const QString& name, const QString& what, qint64 maxBytes) {
  LessonFile file;
  auto refused = [&](const QString& problem) {
    file.problem = problem;
    file.bytes.clear();
    return file;
  };
  auto cannotRead = [&](const QString& why) { return refused(QString("cannot read %1 (%2)").arg(what, why)); };
  const QString path = folder + "/" + name;
  const QString resolved = QFileInfo(path).canonicalFilePath();
  if (resolved.isEmpty()) return cannotRead("there is no such file");
  if (!liesInside(resolved, folder)) return refused(QString("%1 resolves to %2, outside the lesson's folder").arg(what, resolved));
  if (resolved.startsWith(':')) {  // built into the program (Note [files a lesson names])
    QFile f(resolved);
    if (!f.open(QIODevice::ReadOnly)) return cannotRead(f.errorString());
    file.bytes = f.read(maxBytes + 1);
    file.size = f.size();
    return file;
  }
  const QByteArray native = QFile::encodeName(resolved);
  auto notRegular = [&](mode_t mode) { return refused(QString("%1 is %2, not a regular file").arg(what, fileKind(mode))); };
  struct stat st {};
  if (::stat(native.constData(), &st) != 0) return cannotRead(QString::fromLocal8Bit(std::strerror(errno)));
  if (!S_ISREG(st.st_mode)) return notRegular(st.st_mode);
  const int fd = ::open(native.constData(), O_RDONLY | O_NONBLOCK | O_NOFOLLOW | O_NOCTTY | O_CLOEXEC);
  if (fd < 0) return cannotRead(QString::fromLocal8Bit(std::strerror(errno)));
  const auto closeFd = qScopeGuard([fd] { ::close(fd); });
  if (::fstat(fd, &st) != 0) return cannotRead(QString::fromLocal8Bit(std::strerror(errno)));
  if (!S_ISREG(st.st_mode)) return notRegular(st.st_mode);
  file.bytes.resize(maxBytes + 1);
  qsizetype got = 0;
  while (got < file.bytes.size()) {
    const ssize_t n = ::read(fd, file.bytes.data() + got, static_cast<std::size_t>(file.bytes.size() - got));
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return cannotRead(QString::fromLocal8Bit(std::strerror(errno)));
    if (n == 0) break;
    got += n;
  }
  file.bytes.truncate(got);
  file.size = std::max<qint64>(st.st_size, got);  // a file that grew since fstat is as large as what was read
  return file;
}

LessonFile readLabCode(const QString& path) {
  const QFileInfo code(path);
  LessonFile file = readLessonFile(code.path(), code.fileName(), "the lab's code " + code.fileName(), kMaxLabCodeBytes);
  if (file.problem.isEmpty() && file.size > kMaxLabCodeBytes) {
    file.problem = QString("the lab's code %1 is %2, over the %3 limit").arg(code.fileName(), formatSize(file.size), formatSize(kMaxLabCodeBytes));
    file.bytes.clear();
  }
  return file;
}

bool isValidLessonId(const QString& id) {
  if (id.isEmpty() || id.size() > 64) return false;
  for (qsizetype i = 0; i < id.size(); ++i) {
    const QChar c = id[i];
    const bool alnum = (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9');
    if (!alnum && (i == 0 || c != '-')) return false;
  }
  return true;
}

QString formatSize(qint64 bytes) {
  if (bytes >= 1024 * 1024) return QString("%1 MiB").arg(static_cast<double>(bytes) / (1024.0 * 1024.0), 0, 'f', 1);
  if (bytes >= 1024 && bytes % 1024 == 0) return QString("%1 KiB").arg(bytes / 1024);
  if (bytes >= 1024) return QString("%1 KiB").arg(static_cast<double>(bytes) / 1024.0, 0, 'f', 1);
  return QString("%1 bytes").arg(bytes);
}

std::unique_ptr<lab::Lab> makeLab(const Lesson& lesson, const QString& id) { return findLab(lesson.labs, id); }

const PythonLabSpec* Lesson::pythonLab(const QString& labId) const {
  for (const PythonLabSpec& spec : labs)
    if (spec.id == labId) return &spec;
  return nullptr;
}

Lesson parseLessonFile(const QByteArray& bytes, const QString& path, qint64 fileSize, const QVector<PythonLabSpec>& earlierLabs) {
  const qint64 size = fileSize >= 0 ? fileSize : bytes.size();
  const QString name = path.section('/', -1);
  auto refused = [&](const QString& error) {
    Lesson lesson;
    lesson.folder = path.section('/', 0, -2);
    lesson.id = lesson.title = lesson.folder.section('/', -1);
    lesson.error = error;
    return lesson;
  };
  if (size > kMaxLessonBytes) {
    return refused(QString("%1:0: %2 is %3; lessons may be at most %4 (split it into several lessons)")
                       .arg(path, name, formatSize(size), formatSize(kMaxLessonBytes)));
  }
  if (const qsizetype at = invalidUtf8At(bytes); at >= 0) {
    const auto line = bytes.left(at).count('\n') + 1;
    return refused(QString("%1:%2: %3 is not valid UTF-8 (byte 0x%4 at offset %5); save it as UTF-8")
                       .arg(path).arg(line).arg(name).arg(static_cast<unsigned char>(bytes[at]), 2, 16, QChar('0')).arg(at));
  }
  QString text = QString::fromUtf8(bytes);
  if (text.startsWith(QChar(0xFEFF))) text.remove(0, 1);  // a byte-order mark some editors write
  return parseLesson(text, path, earlierLabs);
}

Lesson parseLesson(const QString& text, const QString& path, const QVector<PythonLabSpec>& earlierLabs) {
  Lesson lesson;
  lesson.folder = path.section('/', 0, -2);
  lesson.labs = earlierLabs;
  const QStringList lines = text.split('\n');
  try {
    if (const qsizetype nul = text.indexOf(QChar(0)); nul >= 0) {
      throw LessonError{static_cast<int>(text.left(nul).count('\n')) + 1, "the file contains a NUL character"};
    }
    int i = 0;
    // Front matter: "---", then "key: value" lines, then "---".
    if (lines.value(0).trimmed() != "---") throw LessonError{1, "expected front matter (a line \"---\", id:, title:, chapter:, \"---\")"};
    for (i = 1; i < lines.size() && lines[i].trimmed() != "---"; ++i) {
      const QString l = lines[i];
      const int colon = l.indexOf(':');
      if (colon <= 0) throw LessonError{i + 1, "front matter: expected \"key: value\""};
      const QString key = l.left(colon).trimmed(), value = l.mid(colon + 1).trimmed();
      for (QChar c : value)
        if (c.category() == QChar::Other_Control) throw LessonError{i + 1, QString("front matter: \"%1\" contains a control character (U+%2)").arg(key).arg(c.unicode(), 4, 16, QChar('0'))};
      if (key == "id") {
        if (!isValidLessonId(value)) {
          throw LessonError{i + 1, QString("front matter: id \"%1\" is not a valid lesson id (1 to 64 of a-z, 0-9 and '-', starting with a letter or digit)").arg(value)};
        }
        lesson.id = value;
        lesson.idLine = i + 1;
      } else if (key == "title") lesson.title = value;
      else if (key == "chapter") lesson.chapter = value;
      else throw LessonError{i + 1, QString("front matter: unknown key \"%1\" (id, title, chapter)").arg(key)};
    }
    if (i >= lines.size()) throw LessonError{1, "front matter is not closed by \"---\""};
    if (lesson.id.isEmpty() || lesson.title.isEmpty() || lesson.chapter.isEmpty()) {
      throw LessonError{1, "front matter needs id, title and chapter"};
    }
    // The body: Markdown, with ```run, ```quiz and ```exercise blocks taken out (but not from code
    // blocks, where they are examples).
    QStringList body;
    std::optional<CodeFence> code;
    int paragraphStart = 0, paragraphChars = 0;
    auto countLine = [&](const QString& l, int lineNo, bool inCode) {
      // A code block's lines are each a block of their own; a paragraph's lines are one block.
      if (inCode || isBlank(l) || startsBlock(l)) paragraphChars = 0;
      if (isBlank(l)) return;
      if (paragraphChars == 0) paragraphStart = lineNo;
      paragraphChars += static_cast<int>(l.size()) + 1;
      if (paragraphChars - 1 > kMaxParagraphChars) {
        throw LessonError{paragraphStart, QString("%1 is longer than %2 characters; split it with a blank line (long paragraphs make the lesson slow to show)")
                                              .arg(inCode ? "a line of code" : "a paragraph").arg(kMaxParagraphChars)};
      }
      if (isHeading(l)) paragraphChars = 0;  // a heading is one line
    };
    // A code cell is a ```python fence at the margin (one inside a list item or a quote is an
    // example of code, not a cell); its lines stay in the Markdown and leave the text segments. An
    // exercise's solution (```python solution) leaves both: it shows only when the learner asks.
    std::optional<CodeBlock> cell;
    // The open cell is hidden from the text: an exercise's solution, or an answer of its bank ("wrong",
    // "right"); empty for a cell the learner sees.
    QString hidden;
    QStringList segment, cellLines;
    int openExercise = -1;  // the exercise whose starter and solution follow its ```exercise block
    auto exerciseComplete = [&] {
      if (openExercise < 0) return;
      const Exercise& e = lesson.exercises[openExercise];
      if (e.cell < 0 || e.solution.isEmpty()) {
        throw LessonError{e.line, QString("exercise '%1' needs a ```python exercise block (the starter) and a ```python solution block after it")
                                      .arg(e.title)};
      }
      if (e.wrong.size() < 3 || e.right.isEmpty()) {
        throw LessonError{e.line, QString("exercise '%1' has %2 wrong and %3 right answers in its bank: it needs at least three ```python wrong "
                                          "blocks and one ```python right block after its solution (lessons/README.md, \"Exercises\")")
                                      .arg(e.title).arg(e.wrong.size()).arg(e.right.size())};
      }
    };
    for (++i; i < lines.size(); ++i) {
      if (code) {
        const bool closing = closesFence(lines[i], *code);
        if (!closing) countLine(lines[i], i + 1, true);
        if (closing) code.reset();
        if (cell) {
          if (!closing) cellLines << lines[i];
          if (hidden.isEmpty()) body << lines[i];
          if (!closing) continue;
          cell->code = cellLines.join('\n');
          cellLines.clear();
          if (hidden == "solution") {
            lesson.exercises[openExercise].solution = cell->code;
          } else if (!hidden.isEmpty()) {
            addToBank(lesson.exercises[openExercise], hidden, cell->code, cell->line);
          } else {
            lesson.texts << segment.join('\n');
            segment.clear();
            if (cell->exercise >= 0) {
              lesson.exercises[cell->exercise].starter = cell->code;
              lesson.exercises[cell->exercise].cell = static_cast<int>(lesson.cells.size());
            }
            lesson.cells << *cell;
          }
          cell.reset();
          continue;
        }
        body << lines[i];
        segment << lines[i];
        continue;
      }
      const QString fence = lines[i].trimmed();
      if (fence == "```run" || fence == "```quiz" || fence == "```exercise" || fence == "```lab") {
        paragraphChars = 0;
        const int start = i + 1;
        const QString kind = fence.mid(3);
        QStringList block;
        for (++i; i < lines.size() && lines[i].trimmed() != "```"; ++i) block << lines[i];
        if (i >= lines.size()) throw LessonError{start, QString("%1 block is not closed by ```").arg(kind)};
        const QJsonObject o = parseJson(block.join(QChar(10)), start, qPrintable(kind));
        if (kind == "lab") {
          // A Python lab, declared for this lesson's run blocks and the later lessons'; it shows as
          // the code the run blocks run, not in the text.
          lesson.labs << parseLab(o, lesson, start);
          continue;
        }
        if (kind == "run") {
          lesson.runs << parseRun(o, start, lesson.labs);
          body << QString("> **▶ Run %1: %2** — use the Run button below.").arg(lesson.runs.size()).arg(lesson.runs.back().title);
        } else if (kind == "quiz") {
          lesson.quizzes << parseQuiz(o, start);
          body << QString("> **? Quiz question %1** — in the Quiz tab.").arg(lesson.quizzes.size());
        } else {
          exerciseComplete();
          lesson.exercises << parseExercise(o, start);
          openExercise = static_cast<int>(lesson.exercises.size()) - 1;
          body << QString("**✎ Exercise %1: %2.** %3").arg(lesson.exercises.size()).arg(lesson.exercises.back().title, lesson.exercises.back().challenge.text);
        }
        segment << body.back();
        continue;
      }
      if ((code = openingFence(lines[i], i + 1))) {
        paragraphChars = 0;
        const QString info = lines[i].mid(code->length).simplified();
        static const std::set<QString> cellKinds{"python", "python setup", "python exercise", "python solution", "python wrong", "python right"};
        if (lines[i].startsWith(QString(code->length, code->ch)) && cellKinds.count(info)) {
          cell = CodeBlock{.setup = info == "python setup", .line = i + 1};
          hidden = info == "python solution" || info == "python wrong" || info == "python right" ? info.mid(7) : QString();
          if (info == "python exercise" || !hidden.isEmpty()) {
            if (openExercise < 0) throw LessonError{i + 1, QString("a ```%1 block must follow an ```exercise block").arg(info)};
            const Exercise& e = lesson.exercises[openExercise];
            const bool solution = hidden == "solution";
            if ((solution && !e.solution.isEmpty()) || (info == "python exercise" && e.cell >= 0)) {
              throw LessonError{i + 1, QString("exercise '%1' has a second ```%2 block").arg(e.title, info)};
            }
            if (!solution && !hidden.isEmpty() && e.solution.isEmpty()) {
              throw LessonError{i + 1, QString("exercise '%1': a ```%2 block comes after the exercise's ```python solution block").arg(e.title, info)};
            }
            if (hidden.isEmpty()) cell->exercise = openExercise;
          }
          if (hidden.isEmpty()) body << lines[i];
          continue;
        }
      } else {
        countLine(lines[i], i + 1, false);
      }
      body << lines[i];
      segment << lines[i];
    }
    exerciseComplete();
    if (code) {
      throw LessonError{code->line, QString("code block is not closed by %1 (everything after it, run and quiz blocks included, would be code)")
                                        .arg(QString(code->length, code->ch))};
    }
    lesson.markdown = body.join('\n');
    lesson.texts << segment.join('\n');
  } catch (const LessonError& e) {
    lesson.error = QString("%1:%2: %3").arg(path).arg(e.line).arg(e.what);
  }
  if (lesson.id.isEmpty()) lesson.id = lesson.folder.section('/', -1);
  if (lesson.title.isEmpty()) lesson.title = lesson.id;
  return lesson;
}

}  // namespace gpulab::course
