#include "app/course/progress_store.h"

#include <QDateTime>
#include <QDir>
#include <QFile>
#include <QFileInfo>
#include <QJsonArray>
#include <QJsonDocument>
#include <QSaveFile>
#include <QStandardPaths>

namespace gpulab::course {

ProgressStore::ProgressStore(QString path) : path_(std::move(path)) {
  if (path_.isEmpty()) path_ = QStandardPaths::writableLocation(QStandardPaths::AppDataLocation) + "/progress.json";
  load();
}

void ProgressStore::load() {
  QFile f(path_);
  if (!f.exists()) return;
  QByteArray bytes;
  if (f.open(QIODevice::ReadOnly)) bytes = f.readAll();
  if (!f.isOpen() || f.error() != QFileDevice::NoError) {
    // Whatever is in it, it is not ours to overwrite: progress is read-only until the next start.
    readOnly_ = true;
    error_ = loadProblem_ = "Your progress file " + path_ + " cannot be read (" + f.errorString() +
                            "). Progress is read-only for this session: answers are not saved, and the file is left as it is.";
    return;
  }
  f.close();
  QJsonParseError err{};
  const QJsonDocument doc = QJsonDocument::fromJson(bytes, &err);
  if (err.error == QJsonParseError::NoError && doc.isObject()) {
    data_ = doc.object();
    return;
  }
  const QString why = err.error != QJsonParseError::NoError
                          ? QString("%1 at byte %2").arg(err.errorString()).arg(err.offset)
                          : QString("not a JSON object");
  // Keep the file under a name of its own -- never over an earlier copy -- and start afresh.
  const QString stem = path_ + ".corrupt-" + QDateTime::currentDateTimeUtc().toString("yyyyMMdd-HHmmss");
  QString copy = stem;
  for (int n = 2; QFileInfo::exists(copy) || QFileInfo(copy).isSymLink(); ++n) copy = stem + "-" + QString::number(n);
  if (QFile::rename(path_, copy) || QFile::copy(path_, copy)) {
    keptCopy_ = copy;
    error_ = loadProblem_ = "Your progress file " + path_ + " was corrupt (" + why + "). It was kept as " + copy +
                            " and progress starts afresh.";
  } else {
    readOnly_ = true;
    error_ = loadProblem_ = "Your progress file " + path_ + " is corrupt (" + why + ") and could not be kept aside as " + copy +
                            ". Progress is read-only for this session: the file is left as it is.";
  }
}

void ProgressStore::save() {
  if (readOnly_) {
    error_ = "not saved: progress is read-only for this session (" + path_ + " could not be read, so it is not overwritten)";
    return;
  }
  QDir().mkpath(QFileInfo(path_).absolutePath());
  QSaveFile f(path_);
  if (!f.open(QIODevice::WriteOnly)) {
    error_ = "cannot write " + path_ + ": " + f.errorString();
    return;
  }
  f.write(QJsonDocument(data_).toJson());
  if (!f.commit()) error_ = "cannot write " + path_ + ": " + f.errorString();
  else error_.clear();
}

bool ProgressStore::isCompleted(const QString& lessonId) const {
  return data_.value("completed").toArray().contains(lessonId);
}

void ProgressStore::setCompleted(const QString& lessonId, bool done) {
  QJsonArray list = data_.value("completed").toArray();
  const bool has = list.contains(lessonId);
  if (done == has) return;
  if (done) list.append(lessonId);
  else
    for (int i = 0; i < list.size(); ++i)
      if (list[i].toString() == lessonId) list.removeAt(i--);
  data_["completed"] = list;
  save();
}

int ProgressStore::answer(const QString& lessonId, int quiz) const {
  return data_.value("answers").toObject().value(lessonId).toObject().value(QString::number(quiz)).toInt(-1);
}

void ProgressStore::setAnswer(const QString& lessonId, int quiz, int answerIndex) { setEntry("answers", lessonId, quiz, answerIndex); }

void ProgressStore::setEntry(const char* section, const QString& lessonId, int index, const QJsonValue& value) {
  QJsonObject all = data_.value(section).toObject();
  QJsonObject mine = all.value(lessonId).toObject();
  if (value.isUndefined()) mine.remove(QString::number(index));
  else mine[QString::number(index)] = value;
  all[lessonId] = mine;
  data_[section] = all;
  save();
}

bool ProgressStore::exerciseMet(const QString& lessonId, int exercise) const {
  return data_.value("exercises").toObject().value(lessonId).toObject().value(QString::number(exercise)).toBool(false);
}

void ProgressStore::setExerciseMet(const QString& lessonId, int exercise) {
  if (!exerciseMet(lessonId, exercise)) setEntry("exercises", lessonId, exercise, true);
}

std::optional<QString> ProgressStore::editedCode(const QString& lessonId, int cell, const QString& original) const {
  const QJsonObject entry = data_.value("cells").toObject().value(lessonId).toObject().value(QString::number(cell)).toObject();
  if (!entry.value("code").isString() || entry.value("original").toString() != original) return std::nullopt;
  return entry.value("code").toString();
}

void ProgressStore::setEditedCode(const QString& lessonId, int cell, const QString& original, const QString& code) {
  if (code == original) {
    if (data_.value("cells").toObject().value(lessonId).toObject().contains(QString::number(cell))) setEntry("cells", lessonId, cell, QJsonValue::Undefined);
    return;
  }
  setEntry("cells", lessonId, cell, QJsonObject{{"original", original}, {"code", code}});
}

bool ProgressStore::challengeMet(const QString& lessonId, int run) const {
  return data_.value("challenges").toObject().value(lessonId).toObject().value(QString::number(run)).toBool(false);
}

void ProgressStore::setChallengeMet(const QString& lessonId, int run) {
  if (!challengeMet(lessonId, run)) setEntry("challenges", lessonId, run, true);
}

}  // namespace gpulab::course
