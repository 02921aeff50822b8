#include "app/course/course.h"

#include <QDir>
#include <QFile>
#include <set>

#include "engine/core/errors.h"
#include "lessons/labs/labs.h"

namespace gpulab::course {

const Lesson* Course::find(const QString& id) const {
  for (const Lesson& l : lessons)
    if (l.id == id) return &l;
  return nullptr;
}

QString Course::labSource(const QString& labId) const {
  try {
    QFile f(root + "/" + QString::fromStdString(labs::makeLab(labId.toStdString())->sourcePath()));
    if (f.open(QIODevice::ReadOnly)) return QString::fromUtf8(f.readAll());
  } catch (const Error&) {
  }
  return {};
}

Course loadCourse(const QString& root) {
  Course course;
  course.root = root;
  std::set<QString> ids;
  const QDir dir(root);
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
      lesson = parseLesson(QString::fromUtf8(f.readAll()), path);
    }
    if (!ids.insert(lesson.id).second && lesson.ok()) lesson.error = path + ":1: duplicate lesson id \"" + lesson.id + "\"";
    course.lessons << lesson;
  }
  return course;
}

}  // namespace gpulab::course
