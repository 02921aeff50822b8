// libFuzzer target: gpulab::course::parseLesson, the parser of lessons/<folder>/lesson.md (front
// matter, Markdown, ```run and ```quiz JSON directives, validation against the built-in labs).
// Any input must give a Lesson (ok or with an error), never a crash, a hang or a sanitizer report.
// Seeds: the real lessons (lessons/*/lesson.md); dictionary: lesson.dict.
#include <cstddef>
#include <cstdint>

#include "app/course/lesson.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const QString text = QString::fromUtf8(reinterpret_cast<const char*>(data), static_cast<qsizetype>(size));
  const gpulab::course::Lesson lesson = gpulab::course::parseLesson(text, QStringLiteral("fuzz/lesson.md"));
  // Touch the results so a broken invariant (e.g. an ok lesson without an id) shows up as a crash.
  if (lesson.ok() && lesson.id.isEmpty()) __builtin_trap();
  for (const auto& quiz : lesson.quizzes) {
    if (lesson.ok() && quiz.answers.size() < 2) __builtin_trap();
  }
  return 0;
}
