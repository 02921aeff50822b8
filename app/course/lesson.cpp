#include "app/course/lesson.h"

#include <QJsonArray>
#include <QJsonDocument>
#include <QJsonObject>
#include <set>

#include "engine/core/errors.h"
#include "lessons/labs/labs.h"

namespace gpulab::course {
namespace {

// Thrown inside the parser; becomes the lesson's error.
struct LessonError {
  int line;
  QString what;
};

std::string valueText(const QJsonValue& v) {
  if (v.isBool()) return v.toBool() ? "true" : "false";
  if (v.isDouble()) return QString::number(v.toDouble(), 'g', 17).toStdString();
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

RunBlock parseRun(const QJsonObject& o, int line) {
  RunBlock r;
  r.line = line;
  r.lab = o.value("lab").toString();
  r.title = o.value("title").toString(r.lab);
  if (r.lab.isEmpty()) throw LessonError{line, "run block: missing \"lab\""};
  std::unique_ptr<lab::Lab> theLab;
  try {
    theLab = labs::makeLab(r.lab.toStdString());
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
  for (const QJsonValue& v : o.value("expose").toArray()) {
    try {
      params.spec(v.toString().toStdString());
    } catch (const Error& e) {
      throw LessonError{line, QString("run block: expose: %1").arg(e.what())};
    }
    r.expose << v.toString();
  }
  static const std::set<QString> known{"lab", "title", "params", "quick", "expose"};
  for (const QString& k : o.keys())
    if (!known.count(k)) throw LessonError{line, QString("run block: unknown key \"%1\" (lab, title, params, quick, expose)").arg(k)};
  return r;
}

Quiz parseQuiz(const QJsonObject& o, int line) {
  Quiz q;
  q.line = line;
  q.question = o.value("question").toString();
  if (q.question.trimmed().isEmpty()) throw LessonError{line, "quiz: missing \"question\""};
  const QJsonArray answers = o.value("answers").toArray();
  if (answers.size() < 2) throw LessonError{line, "quiz: needs at least two \"answers\""};
  int correct = 0;
  for (const QJsonValue& v : answers) {
    const QJsonObject a = v.toObject();
    QuizAnswer ans{a.value("text").toString(), a.value("correct").toBool(false), a.value("explanation").toString()};
    if (ans.text.trimmed().isEmpty()) throw LessonError{line, "quiz: an answer has no \"text\""};
    if (ans.explanation.trimmed().isEmpty()) {
      throw LessonError{line, QString("quiz: the answer \"%1\" has no \"explanation\" (every answer explains why it is right or wrong)").arg(ans.text)};
    }
    correct += ans.correct;
    q.answers << ans;
  }
  if (correct != 1) throw LessonError{line, QString("quiz: exactly one answer must be \"correct\": true (found %1)").arg(correct)};
  return q;
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

}  // namespace

Lesson parseLesson(const QString& text, const QString& path) {
  Lesson lesson;
  lesson.folder = path.section('/', 0, -2);
  const QStringList lines = text.split('\n');
  try {
    int i = 0;
    // Front matter: "---", then "key: value" lines, then "---".
    if (lines.value(0).trimmed() != "---") throw LessonError{1, "expected front matter (a line \"---\", id:, title:, chapter:, \"---\")"};
    for (i = 1; i < lines.size() && lines[i].trimmed() != "---"; ++i) {
      const QString l = lines[i];
      const int colon = l.indexOf(':');
      if (colon <= 0) throw LessonError{i + 1, "front matter: expected \"key: value\""};
      const QString key = l.left(colon).trimmed(), value = l.mid(colon + 1).trimmed();
      if (key == "id") lesson.id = value;
      else if (key == "title") lesson.title = value;
      else if (key == "chapter") lesson.chapter = value;
      else throw LessonError{i + 1, QString("front matter: unknown key \"%1\" (id, title, chapter)").arg(key)};
    }
    if (i >= lines.size()) throw LessonError{1, "front matter is not closed by \"---\""};
    if (lesson.id.isEmpty() || lesson.title.isEmpty() || lesson.chapter.isEmpty()) {
      throw LessonError{1, "front matter needs id, title and chapter"};
    }
    // The body: Markdown, with ```run and ```quiz blocks taken out.
    QStringList body;
    for (++i; i < lines.size(); ++i) {
      const QString fence = lines[i].trimmed();
      if (fence == "```run" || fence == "```quiz") {
        const int start = i + 1;
        QStringList block;
        for (++i; i < lines.size() && lines[i].trimmed() != "```"; ++i) block << lines[i];
        if (i >= lines.size()) throw LessonError{start, QString("%1 block is not closed by ```").arg(fence.mid(3))};
        const QJsonObject o = parseJson(block.join('\n'), start, fence == "```run" ? "run" : "quiz");
        if (fence == "```run") {
          lesson.runs << parseRun(o, start);
          body << QString("> **▶ Run %1: %2** — use the Run button below.").arg(lesson.runs.size()).arg(lesson.runs.back().title);
        } else {
          lesson.quizzes << parseQuiz(o, start);
          body << QString("> **? Quiz question %1** — in the Quiz tab.").arg(lesson.quizzes.size());
        }
        continue;
      }
      body << lines[i];
    }
    lesson.markdown = body.join('\n');
  } catch (const LessonError& e) {
    lesson.error = QString("%1:%2: %3").arg(path).arg(e.line).arg(e.what);
  }
  if (lesson.id.isEmpty()) lesson.id = lesson.folder.section('/', -1);
  if (lesson.title.isEmpty()) lesson.title = lesson.id;
  return lesson;
}

}  // namespace gpulab::course
