#pragma once
// A lesson as the player and gpulab-cli see it: parsed from lessons/<folder>/lesson.md (the format
// is documented in lessons/README.md) and validated against the labs built into the program. A
// lesson that fails validation keeps its error (file, line, what is wrong) and is shown as broken;
// nothing in a lesson file can run code beyond those labs.
#include <QByteArray>
#include <QMap>
#include <QString>
#include <QStringList>
#include <QVector>
#include <algorithm>
#include <map>
#include <memory>
#include <optional>
#include <string>

#include "app/course/python_lab.h"
#include "app/notebook/machine.h"

namespace gpulab::course {

// A goal a run block sets, graded from the measurements of the learner's run (never from a number
// written in the lesson file):
//   "challenge": {"text": "Peak allocated under 256 MiB with an effective batch of at least 1024",
//                 "checks": [{"measurement": "training peak allocated", "at_most": 268435456},
//                            {"measurement": "effective batch", "at_least": 1024}]}
struct ChallengeCheck {
  QString measurement;  // a Measurement's name, as the lab sends it
  std::optional<double> atLeast, atMost;
  std::string unit;  // the measurement's, as the lab declares it (filled when the lesson loads)
  // "timed": true -- the measurement is a timing (a speed, a share of a time), so one run's value is
  // noisy: the player says a run it fell short in may be run again, and --check-challenges gives the
  // challenge's examples kTimedAttempts runs each.
  bool timed = false;
};

// A challenge's examples, so that its grading is tested (gpulab-cli lesson ID --check-challenges):
//   "examples": {"fails": {"batch_size": 4096}, "meets": {"batch_size": 512, "accumulate": 8}}
// -- settings over the run block's params: a wrong answer, whose run must NOT meet the challenge, and
// a right one, whose run must meet it. Optional in the format; every built-in lesson has them.
struct ChallengeExamples {
  std::map<std::string, std::string> fails, meets;
};

struct Challenge {
  QString text;
  QVector<ChallengeCheck> checks;
  std::optional<ChallengeExamples> examples;
  // Whether a check is on a timing: one run's verdict is noisy.
  bool timed() const { return std::any_of(checks.begin(), checks.end(), [](const ChallengeCheck& c) { return c.timed; }); }
};

// Runs of each example of a timed challenge: the right answer must meet it in one of them (as a
// learner whose run falls just short runs it again), and the wrong answer must fail it in all.
inline constexpr int kTimedAttempts = 3;

struct RunBlock {
  QString lab;      // a lab's id: one declared in a ```lab block of this lesson or an earlier one, or a built-in
  QString title;
  std::map<std::string, std::string> params;  // preset values
  std::map<std::string, std::string> quick;   // overrides for gpulab-cli lesson --quick
  QStringList expose;                         // parameters the learner may change
  std::optional<Challenge> challenge;
  int line = 0;
};

struct QuizAnswer {
  QString text;
  bool correct = false;
  QString explanation;
};

struct Quiz {
  QString question;
  QVector<QuizAnswer> answers;
  int line = 0;
};

// A ```python block of the lesson: a code cell the learner edits and runs (a ```python setup block:
// code the cells after it take as given -- the data, the model -- run by itself before the first cell
// the learner runs in a session; a ```python exercise block: an exercise's starter code).
struct CodeBlock {
  QString code;
  bool setup = false;
  int exercise = -1;  // the exercise whose starter it is (an index into Lesson::exercises), or -1
  int line = 0;       // the line of its opening fence
};

// A code exercise (lessons/README.md): the lesson's mistake as starter code in a cell, graded from
// what the learner's run of that cell measured -- never from the code's text:
//   ```exercise
//   {"title": "Move the batch too", "text": "Make the loop run: no error, final loss under 0.1",
//    "checks": [{"measurement": "errors", "at_most": 0}, {"measurement": "last loss", "at_most": 0.1}],
//    "values": {"loss is a number": "isinstance(total, float)"},
//    "hints": ["Which tensors does the model's forward pass touch?"], "needs": "cuda"}
//   ```
//   ```python exercise         (the starter: a code cell, with the mistake)
//   ```python solution         (the reference solution: hidden until the learner reveals it)
// The measurements a run of the cell gives (python/gpulab/kernel.py): "errors", "device-mismatch
// errors", "out-of-memory errors" (1 or 0), "seconds", "peak allocated" (bytes on cuda:0, with a CUDA
// device), "last NAME" (the last value the cell logged with lab.log(NAME=...)), and each of "values":
// a Python expression evaluated in the session after the run (a bool counts 1 or 0). `needs: "cuda"`:
// the exercise is about a GPU's memory, graded only in a session with cuda:0 (the emulated GPU will
// do). After the solution, the exercise's bank, hidden from the learner like the solution: at least
// three answers a learner would plausibly get wrong and at least one right answer written another way,
//   ```python wrong            # wrong: why it is wrong
//                              # fails: the name of a check it must fail (a line for each)
//                              # hint: what the panel shows first when a run fails the same checks
//   ```python right            # right: how it differs from the solution
// gpulab-cli lesson ID --check-exercises checks that the starter and every wrong answer do not meet the
// checks (each failing those its "fails" lines name) and that the solution and every right answer do.
struct BankAnswer {
  QString code;
  QString why;           // "# wrong: ..." or "# right: ..."
  QStringList fails;     // a wrong answer's checks (their measurement names) that its run fails
  QString hint;          // a wrong answer's hint
  int line = 0;
};

struct Exercise {
  QString title;
  Challenge challenge;  // the text and the checks
  QMap<QString, QString> values;  // a measurement's name -> the expression that gives it
  QStringList hints;
  QString starter, solution;
  QVector<BankAnswer> wrong, right;
  // Where a rule depends on the machine: the learner's code is graded on each of these, in a fresh
  // session after the setup cells, and meets the exercise when it meets it on all ("machines":
  // ["no-gpu", "gpu-16gib"]). Empty: graded in the learner's own session.
  QVector<notebook::Machine> machines;
  int cell = -1;  // the starter's index in Lesson::cells
  bool needsCuda = false;
  int line = 0;
};

struct Lesson {
  QString id;        // "device-setup"
  QString title;
  QString chapter;
  QString folder;    // where it was loaded from
  QString markdown;  // the text, directive blocks replaced by short markers
  // The text around the code cells: texts[i] comes before cells[i], the last one after the last
  // cell (texts.size() == cells.size() + 1). markdown is all of them with the cells' blocks.
  QStringList texts;
  QVector<CodeBlock> cells;
  QVector<Exercise> exercises;
  QVector<RunBlock> runs;
  // The Python labs this lesson can run: those of the earlier lessons (a lab is declared in the first
  // lesson that runs it; only a lesson that loads cleanly passes its labs on), then its own.
  QVector<PythonLabSpec> labs;
  QVector<Quiz> quizzes;
  QString error;     // empty when the lesson loaded cleanly
  int idLine = 0;    // the front-matter line of "id:" (0 when there is none)
  bool ok() const { return error.isEmpty(); }
  // The Python lab with this id among `labs`, or nullptr (a built-in lab, or none).
  const PythonLabSpec* pythonLab(const QString& labId) const;
};

// Limits on a lesson file. Qt's Markdown import (QTextDocument::setMarkdown, Qt 6.4) costs time
// proportional to a paragraph's length for every piece of text it inserts into it (each soft line
// break, each `code` or **bold** span), so a paragraph's cost grows with the square of its length: a
// 256 KiB paragraph took 14 s on the GUI thread. Paragraphs of at most kMaxParagraphChars and files of
// at most kMaxLessonBytes keep the largest allowed lesson within a frame budget (see
// MainWindow::showLesson and tests/test_gui.cpp); the largest shipped lesson is under 5 KiB and its
// longest paragraph under 1 KiB.
inline constexpr qint64 kMaxLessonBytes = 64 * 1024;
inline constexpr int kMaxParagraphChars = 2048;

// A lesson id: [a-z0-9][a-z0-9-]{0,63}. Ids name files (reference runs are <id>.jsonl) and keys in
// the progress file, so nothing else is allowed: no spaces, no '/', no '..', no control characters.
bool isValidLessonId(const QString& id);

// Parses and validates one lesson file's text; `path` names it in errors ("lessons/02-x/lesson.md").
// `earlierLabs`: the Python labs declared by the lessons before it, which its run blocks may use too.
Lesson parseLesson(const QString& text, const QString& path, const QVector<PythonLabSpec>& earlierLabs = {});

// Parses a lesson file's bytes, as loadCourse reads them: refuses a file larger than kMaxLessonBytes
// or one that is not UTF-8 (naming the line), then parseLesson. `fileSize`: the file's size when
// `bytes` holds only its start (a file too large to read), else -1.
Lesson parseLessonFile(const QByteArray& bytes, const QString& path, qint64 fileSize = -1, const QVector<PythonLabSpec>& earlierLabs = {});

// The lab a run block of `lesson` names: one of its Python labs, else a built-in one; throws
// ValueError listing the ids it knows.
std::unique_ptr<lab::Lab> makeLab(const Lesson& lesson, const QString& id);

// "3.2 MiB", "64 KiB", "812 bytes": sizes in lesson errors.
QString formatSize(qint64 bytes);

// Note [files a lesson names]
// A lesson folder may come from anyone (gpulab-cli --lessons DIR, a folder a course's author shares),
// and what it names is shown (the "Lab code" tab) and run. Issue 48 1.2: a lab's code linked to
// /etc/shadow showed it whole, a lesson.md that was a FIFO hung the loader for good (opening a FIFO
// for reading waits for a writer) and one linked to /dev/zero was read up to the cap. So a file a
// lesson names -- its lesson.md, its lab's code -- is read only when
//  - its real path (every link resolved) lies inside the lesson's folder, and the folder's inside the
//    course's (loadCourse): a link to another file of the same folder is fine;
//  - it is a regular file, checked before it is opened, so a FIFO or a device is never opened;
//  - it is small: at most its cap and one byte more is read, so a file too large costs nothing.
// It is opened by its real path without following a last link and without blocking, and checked again
// once open, so a file swapped for a link or a FIFO after the checks is refused too. Limits: a hard
// link is a regular file inside the folder (Debian's fs.protected_hardlinks keeps anyone from linking
// a file they cannot read and write); a folder of the path swapped for a link while the file opens is
// not caught (openat2's RESOLVE_BENEATH would). The lessons built into the program (":/lessons", Qt's
// resources) are copies of regular files made at build time, read as they are.
struct LessonFile {
  QByteArray bytes;  // at most maxBytes + 1 of them: more than maxBytes means the file is larger
  qint64 size = 0;   // the whole file's size
  QString problem;   // why it was not read, naming it ("the lab's code x.py is a FIFO, not a regular file"); empty when it was
};

// `name` in `folder`, read as Note [files a lesson names] says; `what` names it in the problem
// ("lesson.md", "the lab's code x.py").
LessonFile readLessonFile(const QString& folder, const QString& name, const QString& what, qint64 maxBytes);

// Whether `resolved`, a path with every link resolved, lies inside `folder` (whose links are resolved here).
bool liesInside(const QString& resolved, const QString& folder);

// A Python lab's code is at most this large: the largest shipped lab is under 40 KiB, and the code
// panel shows the file whole.
inline constexpr qint64 kMaxLabCodeBytes = 1024 * 1024;

// A lab's code at `path` (a Python lab's spec.path, or the course's lab_helpers.py),
// read by readLessonFile from the folder it is in; larger than kMaxLabCodeBytes is a problem too. What
// the lesson's loader checks, and what the code panel shows and a run runs.
LessonFile readLabCode(const QString& path);

}  // namespace gpulab::course
