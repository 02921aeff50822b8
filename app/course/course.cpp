#include "app/course/course.h"

#include <QDir>
#include <QFileInfo>
#include <algorithm>
#include <map>
#include <vector>

#include "app/course/python_lab.h"
#include "engine/core/errors.h"

namespace gpulab::course {

const Lesson* Course::find(const QString& id) const {
  for (const Lesson& l : lessons)
    if (l.id == id) return &l;
  return nullptr;
}

std::unique_ptr<lab::Lab> Course::makeLab(const QString& labId) const {
  for (const Lesson& l : lessons)
    if (const PythonLabSpec* spec = l.pythonLab(labId)) return std::make_unique<PythonLab>(*spec);
  return course::makeLab(lessons.isEmpty() ? Lesson{} : lessons.back(), labId);  // the error listing the known ids
}

QString Course::labSource(const QString& labId) const {
  QString path, helpersPath;
  for (const Lesson& l : lessons)
    if (const PythonLabSpec* spec = l.pythonLab(labId)) path = spec->path, helpersPath = spec->helpersPath;
  if (path.isEmpty()) return {};  // no such lab in this course
  const QString source = QString::fromUtf8(readLabCode(path).bytes);  // nothing when it may not be read: the panel says it is not available
  if (source.isEmpty() || helpersPath.isEmpty() || !importsLabHelpers(source)) return source;
  // What runs is the lab and the helpers it imports: the panel shows both, the helpers below.
  const LessonFile helpers = readLabCode(helpersPath);
  if (!helpers.problem.isEmpty()) return source;
  return source + "\n\n# ---- " + kLabHelpersFile + ", which this lab imports (" + kLabHelpersModule +
         ", in the lessons' folder) ----\n\n" + QString::fromUtf8(helpers.bytes);
}

Course loadCourse(const QString& root) {
  Course course;
  course.root = root;
  const QDir dir(root);
  QVector<PythonLabSpec> declared;  // the Python labs of the lessons so far
  for (const QString& folder : dir.entryList(QDir::Dirs | QDir::NoDotAndDotDot, QDir::Name)) {
    if (folder == "labs") continue;
    const QString lessonFolder = root + "/" + folder;
    const QString path = lessonFolder + "/lesson.md";
    // A folder that is a link out of the course is not a lesson of it (Note [files a lesson names]).
    const QString resolved = QFileInfo(lessonFolder).canonicalFilePath();
    const LessonFile file = liesInside(resolved, root)
                                ? readLessonFile(lessonFolder, "lesson.md", "lesson.md", kMaxLessonBytes)
                                : LessonFile{.problem = QString("the lesson's folder %1 resolves to %2, outside the course's folder").arg(lessonFolder, resolved)};
    Lesson lesson;
    if (!file.problem.isEmpty()) {
      lesson.id = folder;
      lesson.title = folder;
      lesson.folder = lessonFolder;
      lesson.error = path + ":0: " + file.problem;
    } else {
      lesson = parseLessonFile(file.bytes, path, file.size, declared);
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
