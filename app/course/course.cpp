#include "app/course/course.h"

#include <QDir>
#include <QFile>
#include <algorithm>
#include <map>
#include <vector>

#include "app/course/python_lab.h"
#include "engine/core/errors.h"
#include "lessons/labs/labs.h"

namespace gpulab::course {

const Lesson* Course::find(const QString& id) const {
  for (const Lesson& l : lessons)
    if (l.id == id) return &l;
  return nullptr;
}

std::unique_ptr<lab::Lab> Course::makeLab(const QString& labId) const {
  for (const Lesson& l : lessons)
    if (const PythonLabSpec* spec = l.pythonLab(labId)) return std::make_unique<PythonLab>(*spec);
  return course::makeLab(lessons.isEmpty() ? Lesson{} : lessons.back(), labId);  // built-in, or the error listing the known ids
}

QString Course::labSource(const QString& labId) const {
  QString path;
  for (const Lesson& l : lessons)
    if (const PythonLabSpec* spec = l.pythonLab(labId)) path = spec->path;
  try {
    if (path.isEmpty()) path = root + "/" + QString::fromStdString(labs::makeLab(labId.toStdString())->sourcePath());
  } catch (const Error&) {
    return {};
  }
  QFile f(path);
  return f.open(QIODevice::ReadOnly) ? QString::fromUtf8(f.readAll()) : QString();
}

Course loadCourse(const QString& root) {
  Course course;
  course.root = root;
  const QDir dir(root);
  QVector<PythonLabSpec> declared;  // the Python labs of the lessons so far
  for (const QString& folder : dir.entryList(QDir::Dirs | QDir::NoDotAndDotDot, QDir::Name)) {
    if (folder == "labs") continue;
    const QString path = root + "/" + folder + "/lesson.md";
    QFile f(path);
    Lesson lesson;
    if (!f.open(QIODevice::ReadOnly)) {
      lesson.id = folder;
      lesson.title = folder;
      lesson.folder = root + "/" + folder;
      lesson.error = path + ":0: cannot read lesson.md";
    } else {
      // Never more than the cap is read: a huge (or endless) file costs neither memory nor time.
      const QByteArray bytes = f.read(kMaxLessonBytes + 1);
      lesson = parseLessonFile(bytes, path, std::max<qint64>(f.size(), bytes.size()), declared);
    }
    // With the labs it declares, for the lessons after it -- unless it is broken: a draft or a copy
    // must not take a lab's id away from the lesson that declares it.
    if (lesson.ok()) declared = lesson.labs;
    course.lessons << lesson;
  }

  // Ids are unique. A lesson that loads cleanly keeps its id whatever the folder order, so a broken
  // draft (or a copy) can never take it away; among clean lessons, the first folder keeps it. The
  // other one is listed as broken, under an id of its own (its folder's name, made unique).
  std::map<QString, QString> owner;  // id -> the file that holds it
  std::vector<bool> loadedCleanly;
  for (const Lesson& l : course.lessons) loadedCleanly.push_back(l.ok());
  for (const bool clean : {true, false}) {
    for (qsizetype i = 0; i < course.lessons.size(); ++i) {
      Lesson& l = course.lessons[i];
      if (loadedCleanly[static_cast<std::size_t>(i)] != clean) continue;
      if (!owner.count(l.id)) {
        owner[l.id] = l.folder + "/lesson.md";
        continue;
      }
      const QString path = l.folder + "/lesson.md";
      const QString reason = QString("duplicate id \"%1\", also used by %2").arg(l.id, owner[l.id]);
      l.error = l.ok() ? QString("%1:%2: %3").arg(path).arg(l.idLine).arg(reason) : l.error + " (and " + reason + ")";
      QString id = l.folder.section('/', -1);
      for (int n = 2; owner.count(id); ++n) id = l.folder.section('/', -1) + "-" + QString::number(n);
      l.id = id;
      owner[id] = path;
    }
  }
  return course;
}

}  // namespace gpulab::course
