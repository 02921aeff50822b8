#pragma once
// Grading a run block's challenge (lesson.h) from the measurements of the learner's run: each check
// says what was measured against what was asked, so the learner sees why a run did or did not meet
// it. A measurement the run did not take fails its check and says so.
#include <QMap>
#include <QString>
#include <QVector>
#include <optional>
#include <vector>

#include "app/course/lesson.h"
#include "engine/lab/lab.h"

namespace gpulab::course {

struct CheckResult {
  ChallengeCheck check;
  std::optional<double> measured;  // the run's last value of the measurement
  std::string unit;
  bool met = false;
  // "training peak allocated: measured 210.50 MiB, asked at most 256.00 MiB — met"
  QString line;
};

struct ChallengeResult {
  QString text;  // the challenge's own words
  QVector<CheckResult> checks;
  bool met = false;  // every check met
  // Where every check a run did not meet is a timing: that a run of the same settings may meet it, and
  // why. Empty otherwise -- a count or a size is what it is, whatever the run.
  QString noiseNote() const;
  // The text, then one line per check (and the noise note).
  QString report() const;
};

// Grades `challenge` against `measured` (in arrival order; the last value of a name counts).
ChallengeResult grade(const Challenge& challenge, const std::vector<lab::Measurement>& measured);

// Grades an exercise from what a run of its starter cell measured (python/gpulab/kernel.py), as a
// challenge is graded; a value the run could not measure says why in its check's line: the cell raised
// before it got there, or the expression's own error ("NameError: name 'total' is not defined").
ChallengeResult gradeExercise(const Exercise& exercise, const std::vector<lab::Measurement>& measured,
                              const QMap<QString, QString>& unmeasured);

// One machine's run of an exercise's code (Exercise::machines): what it measured.
struct MachineRun {
  notebook::Machine machine;
  std::vector<lab::Measurement> measured;
  QMap<QString, QString> unmeasured;
};
// The exercise graded on every machine: met when met on each (and there was at least one); every
// check's line says on which machine it was measured ("on a 16 GiB GPU (emulated): 300 MiB fits: ..."),
// and a machine that met every check has one line saying so (its check has no measurement).
ChallengeResult gradeOnMachines(const Exercise& exercise, const QVector<MachineRun>& runs);

// The wrong answers of the exercise's bank that a run which failed `result` may repeat: those whose
// "# fails:" checks all failed here, naming the most of them -- several when they tie (the grade cannot
// tell those mistakes apart: the panel shows each one's hint), in the bank's order. None when the run
// met the exercise or fails no bank answer's way; and when the run raised (its "errors" check failed),
// only answers that raise too: a traceback says more than a hint about another mistake.
QList<const BankAnswer*> likelyMistakes(const Exercise& exercise, const ChallengeResult& result);

// What a check asks, as the grade says it: "at least 4,096", "at most 256.00 MiB", or both joined
// by "and"; numbers in `unit`.
QString askedText(const ChallengeCheck& check, const std::string& unit);

// A measurement's value as people read it: bytes as "256.00 MiB", others with their unit, to `significant`
// digits (17: all it has, the shortest text that reads back as the value).
QString formatMeasured(double value, const std::string& unit, int significant = 4);

}  // namespace gpulab::course
