#pragma once
// What the window keeps of a lesson between visits and restarts (issue 48, 4.8): the run blocks'
// parameter values (RunPanel), where the code cells run (LessonPage) and "Compare with a real GPU"
// (MainWindow), in the session settings (MainWindow::sessionFile) under "lessons/<lesson id>/". A
// stored value that does not read as what it should be is ignored: the default shows.
#include <QString>
#include <QVariant>
#include <optional>

namespace gpulab::app {

// "lessons/<id>": a lesson's id is [a-z0-9-] (course/lesson.h); one from a folder that failed to load
// may be anything, and QSettings reads '/' and '\' as a group's end.
inline QString lessonSettingsGroup(const QString& lessonId) {
  QString id = lessonId;
  id.replace('/', '_').replace('\\', '_');
  return "lessons/" + (id.isEmpty() ? QString("_") : id);
}

// A flag as QSettings keeps it (a bool, or "true"/"false" read back from the file); anything else is
// no value -- QVariant::toBool() would read "banana" as true.
inline std::optional<bool> storedFlag(const QVariant& value) {
  if (value.typeId() == QMetaType::Bool) return value.toBool();
  if (value.typeId() != QMetaType::QString && value.typeId() != QMetaType::QByteArray) return std::nullopt;
  const QString text = value.toString().trimmed().toLower();
  if (text == "true") return true;
  if (text == "false") return false;
  return std::nullopt;
}

}  // namespace gpulab::app
