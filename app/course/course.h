#pragma once
// The set of lessons: embedded in the binary (":/lessons", from the lessons/ folder at build time)
// or, for authors, read from a folder given with --lessons DIR.
#include <QString>
#include <QVector>
#include <memory>

#include "app/course/lesson.h"

namespace gpulab::course {

inline const char* kEmbeddedRoot = ":/lessons";

struct Course {
  QString root;
  QVector<Lesson> lessons;  // in folder order
  const Lesson* find(const QString& id) const;
  // The lab with this id: a Python lab some lesson declares, else a built-in one; throws ValueError
  // listing the ids it knows (what `gpulab-cli memory` runs outside a lesson).
  std::unique_ptr<lab::Lab> makeLab(const QString& labId) const;
  // The source of a built-in lab (what the code panel shows); empty if the file is not there.
  QString labSource(const QString& labId) const;
};

// Every subfolder of `root` holding lesson.md (the folder "labs" holds lab code, not a lesson).
// Ids are unique: a lesson that loads cleanly keeps its id even when a broken one (a draft, a copy)
// in an earlier folder claims it; the other is listed as broken ("duplicate id "x", also used by
// <file>") under its folder's name.
Course loadCourse(const QString& root = kEmbeddedRoot);

}  // namespace gpulab::course
