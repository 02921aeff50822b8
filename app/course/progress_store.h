#pragma once
// The learner's progress: completed lessons and quiz answers, kept in a JSON file under the app data
// location and written with QSaveFile, so a crash mid-write never leaves a half-written file.
#include <QJsonObject>
#include <QString>

namespace gpulab::course {

class ProgressStore {
 public:
  // `path` empty: <AppDataLocation>/progress.json.
  explicit ProgressStore(QString path = {});

  bool isCompleted(const QString& lessonId) const;
  void setCompleted(const QString& lessonId, bool done = true);
  // The answer index the learner chose for quiz `quiz` of a lesson, or -1.
  int answer(const QString& lessonId, int quiz) const;
  void setAnswer(const QString& lessonId, int quiz, int answerIndex);
  const QString& path() const { return path_; }
  // Why the last load or save failed (empty when it worked).
  const QString& lastError() const { return error_; }

 private:
  void load();
  void save();
  QString path_;
  QJsonObject data_;
  QString error_;
};

}  // namespace gpulab::course
