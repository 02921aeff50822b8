#pragma once
// A lesson as the player and gpulab-cli see it: parsed from lessons/<folder>/lesson.md (the format
// is documented in lessons/README.md) and validated against the labs built into the program. A
// lesson that fails validation keeps its error (file, line, what is wrong) and is shown as broken;
// nothing in a lesson file can run code beyond those labs.
#include <QString>
#include <QStringList>
#include <QVector>
#include <map>
#include <string>

namespace gpulab::course {

struct RunBlock {
  QString lab;      // a built-in lab id
  QString title;
  std::map<std::string, std::string> params;  // preset values
  std::map<std::string, std::string> quick;   // overrides for gpulab-cli lesson --quick
  QStringList expose;                         // parameters the learner may change
  int line = 0;
};

struct QuizAnswer {
  QString text;
  bool correct = false;
  QString explanation;
};

struct Quiz {
  QString question;
  QVector<QuizAnswer> answers;
  int line = 0;
};

struct Lesson {
  QString id;        // "device-setup"
  QString title;
  QString chapter;
  QString folder;    // where it was loaded from
  QString markdown;  // the text, directive blocks replaced by short markers
  QVector<RunBlock> runs;
  QVector<Quiz> quizzes;
  QString error;     // empty when the lesson loaded cleanly
  bool ok() const { return error.isEmpty(); }
};

// Parses and validates one lesson file's text; `path` names it in errors ("lessons/02-x/lesson.md").
Lesson parseLesson(const QString& text, const QString& path);

}  // namespace gpulab::course
