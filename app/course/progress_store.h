#pragma once
// The learner's progress: completed lessons and quiz answers, kept in a JSON file under the app data
// location and written with QSaveFile, so a crash mid-write never leaves a half-written file.
// Nothing the learner did is ever lost without a word: a file that is not valid JSON is kept under a
// new name (progress.json.corrupt-<UTC time>[-N], never overwritten or deleted) and progress starts
// afresh; a file that cannot be read is never written over -- progress is read-only for the session.
// loadProblem() says which, in words for the learner (the GUI shows it).
#include <QJsonObject>
#include <QString>
#include <optional>

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
  // Whether a run of block `run` (from 0) met its challenge; once met, it stays met.
  bool challengeMet(const QString& lessonId, int run) const;
  void setChallengeMet(const QString& lessonId, int run);
  // Whether a run of exercise `exercise` (from 0) met its checks; once met, it stays met.
  bool exerciseMet(const QString& lessonId, int exercise) const;
  void setExerciseMet(const QString& lessonId, int exercise);
  // The learner's code in code cell `cell` (from 0) of a lesson, kept when they edited the lesson's
  // `original` code; nothing when they did not (or reset it). An edit of code the lesson has changed
  // since is not offered for the new code, and stays in the file until the cell is edited again.
  std::optional<QString> editedCode(const QString& lessonId, int cell, const QString& original) const;
  // Keeps the learner's code (written at once, as every answer is); code == original forgets it.
  void setEditedCode(const QString& lessonId, int cell, const QString& original, const QString& code);
  const QString& path() const { return path_; }
  // Why the last load or save failed (empty when it worked).
  const QString& lastError() const { return error_; }
  // What went wrong when the file was loaded, for the learner (empty when it loaded or did not exist).
  // Unlike lastError() it stays for the whole session.
  const QString& loadProblem() const { return loadProblem_; }
  // Where a corrupt file was kept (empty when none was).
  const QString& keptCopy() const { return keptCopy_; }
  // True when the file exists but could not be read: answers are kept for the session only.
  bool readOnly() const { return readOnly_; }

 private:
  void load();
  void save();
  // data_[section][lessonId][index] = value, saved; an undefined value removes the entry.
  void setEntry(const char* section, const QString& lessonId, int index, const QJsonValue& value);
  QString path_;
  QJsonObject data_;
  QString error_;
  QString loadProblem_;
  QString keptCopy_;
  bool readOnly_ = false;
};

}  // namespace gpulab::course
