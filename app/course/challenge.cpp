#include "app/course/challenge.h"

#include <QSet>

#include <algorithm>
#include <cmath>

#include "engine/core/number_format.h"
#include "engine/memory/caching_allocator.h"

namespace gpulab::course {

QString formatMeasured(double value, const std::string& unit, int significant) {
  if (unit == "bytes") return QString::fromStdString(formatBytes(static_cast<std::int64_t>(value)));
  // Whole numbers in full (a batch of 4096, 268435456 bytes without a unit); others to 4 digits, as
  // many as a noisy measurement carries (0.5206x, not 0.520612x).
  const bool whole = value == std::floor(value) && std::fabs(value) < 1e15;
  const QString number = QString::fromStdString(whole                ? formatNumber(static_cast<std::int64_t>(value))
                                                : significant >= 17 ? formatNumber(value)  // every digit, and no more: 0.79999
                                                                    : formatReadable(value, significant));
  if (unit.empty()) return number;
  return number + (unit == "x" ? "" : " ") + QString::fromStdString(unit);
}

QString ChallengeResult::report() const {
  QStringList lines{QString("Challenge %1: %2").arg(met ? "met" : "not met yet", text)};
  for (const CheckResult& c : checks) lines << "  " + c.line;
  if (!noiseNote().isEmpty()) lines << "  " + noiseNote();
  return lines.join('\n');
}

QString ChallengeResult::noiseNote() const {
  const bool missedOnlyTimings = !met && std::all_of(checks.begin(), checks.end(), [](const CheckResult& c) { return c.met || c.check.timed; });
  if (!missedOnlyTimings) return {};
  return "What fell short is a timing, and timings differ from run to run: if yours fell just short, run it again.";
}

QString askedText(const ChallengeCheck& check, const std::string& unit) {
  QStringList asked;
  if (check.atLeast) asked << "at least " + formatMeasured(*check.atLeast, unit);
  if (check.atMost) asked << "at most " + formatMeasured(*check.atMost, unit);
  return asked.join(" and ");
}

ChallengeResult grade(const Challenge& challenge, const std::vector<lab::Measurement>& measured) {
  ChallengeResult out;
  out.text = challenge.text;
  out.met = true;
  for (const ChallengeCheck& check : challenge.checks) {
    CheckResult r;
    r.check = check;
    r.unit = check.unit;  // until the run's measurement says otherwise
    for (const lab::Measurement& m : measured) {
      if (QString::fromStdString(m.name) == check.measurement) {
        r.measured = m.value;
        r.unit = m.unit;
      }
    }
    const QString asked = askedText(check, r.unit);
    if (!r.measured) {
      r.line = QString("%1: not measured in this run (asked %2) — not met").arg(check.measurement, asked);
    } else {
      r.met = (!check.atLeast || *r.measured >= *check.atLeast) && (!check.atMost || *r.measured <= *check.atMost);
      // Rounded to the very number asked ("measured 0.8x, asked at least 0.8x — not met"), it would
      // read as a contradiction: then it shows every digit.
      QString shown = formatMeasured(*r.measured, r.unit);
      if ((check.atLeast && shown == formatMeasured(*check.atLeast, r.unit)) || (check.atMost && shown == formatMeasured(*check.atMost, r.unit))) {
        shown = formatMeasured(*r.measured, r.unit, 17);
      }
      r.line = QString("%1: measured %2, asked %3 — %4").arg(check.measurement, shown, asked, r.met ? "met" : "not met");
    }
    out.met = out.met && r.met;
    out.checks << r;
  }
  return out;
}

ChallengeResult gradeExercise(const Exercise& exercise, const std::vector<lab::Measurement>& measured,
                              const QMap<QString, QString>& unmeasured) {
  ChallengeResult result = grade(exercise.challenge, measured);
  // A cell that raised usually stopped before it made what a value reads: that is the reason to give,
  // not the NameError of reading it.
  const bool raised = std::any_of(measured.begin(), measured.end(), [](const lab::Measurement& m) { return m.name == "errors" && m.value > 0; });
  for (CheckResult& c : result.checks) {
    if (c.measured || !unmeasured.contains(c.check.measurement)) continue;
    c.line += raised ? " (the cell raised an error before it got there)" : " (" + unmeasured.value(c.check.measurement) + ")";
  }
  return result;
}

ChallengeResult gradeOnMachines(const Exercise& exercise, const QVector<MachineRun>& runs) {
  ChallengeResult out;
  out.text = exercise.challenge.text;
  out.met = !runs.isEmpty();
  for (const MachineRun& run : runs) {
    const ChallengeResult one = gradeExercise(exercise, run.measured, run.unmeasured);
    out.met = out.met && one.met;
    if (one.met) {  // one line for a machine that met every check: the ones that did not stand out
      CheckResult all;
      all.met = true;
      all.line = "on " + run.machine.description() + ": every check met";
      out.checks << all;
      continue;
    }
    for (CheckResult c : one.checks) {
      c.line = "on " + run.machine.description() + ": " + c.line;
      out.checks << c;
    }
  }
  return out;
}

QList<const BankAnswer*> likelyMistakes(const Exercise& exercise, const ChallengeResult& result) {
  QList<const BankAnswer*> out;
  if (result.met) return out;
  QSet<QString> failed;
  for (const CheckResult& c : result.checks)
    if (!c.met && !c.check.measurement.isEmpty()) failed.insert(c.check.measurement);
  const bool raised = failed.contains("errors");
  qsizetype most = 0;
  for (const BankAnswer& a : exercise.wrong) {
    const QSet<QString> fails(a.fails.begin(), a.fails.end());
    if (!failed.contains(fails) || (raised && !fails.contains("errors"))) continue;
    if (fails.size() > most) {
      out.clear();
      most = fails.size();
    }
    if (fails.size() == most) out << &a;
  }
  return out;
}

}  // namespace gpulab::course
