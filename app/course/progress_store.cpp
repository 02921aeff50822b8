#include "app/course/progress_store.h"

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
  if (!f.open(QIODevice::ReadOnly)) {
    error_ = "cannot read " + path_ + ": " + f.errorString();
    return;
  }
  QJsonParseError err{};
  const QJsonDocument doc = QJsonDocument::fromJson(f.readAll(), &err);
  if (err.error != QJsonParseError::NoError || !doc.isObject()) {
    // Keep the unreadable file for the curious, and start afresh rather than refuse to run.
    error_ = path_ + " is corrupt (" + err.errorString() + "); it was kept as " + path_ + ".corrupt";
    f.close();
    QFile::remove(path_ + ".corrupt");
    QFile::rename(path_, path_ + ".corrupt");
    return;
  }
  data_ = doc.object();
}

void ProgressStore::save() {
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

void ProgressStore::setAnswer(const QString& lessonId, int quiz, int answerIndex) {
  QJsonObject answers = data_.value("answers").toObject();
  QJsonObject mine = answers.value(lessonId).toObject();
  mine[QString::number(quiz)] = answerIndex;
  answers[lessonId] = mine;
  data_["answers"] = answers;
  save();
}

}  // namespace gpulab::course
