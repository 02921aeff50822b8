#pragma once
// Reference runs: a lesson's run blocks recorded on a real GPU, shipped as data so that a learner
// without one can compare their run with the same run on, say, an H100. Always labelled as such:
// "reference: NVIDIA H100, recorded 2026-11-23 — not your machine".
//
// One file per lesson, resources/reference-runs/<lesson-id>.jsonl (embedded as
// ":/reference-runs/<lesson-id>.jsonl"), one JSON object per line:
//   line 1  {"event":"reference","lesson":ID,"gpu":NAME,"date":"YYYY-MM-DD", optional "driver",
//           "cuda","command","commit" (strings)}
//   then exactly what `gpulab-cli lesson ID --json` prints: {"event":"protocol","version":V} first,
//   the version of the lab protocol the updates follow (lab::kProtocolVersion: a file of another
//   version is refused, to be recorded again); the code cells' "cell" events, which are no lab's
//   and are skipped; then {"event":"run","index":N,"lab","title"} opens run block N, followed by
//   the updates its lab sent (views, points, markers, rows, measurements, messages, records; the
//   JSON form is app/course/lab_json.h) and ending with the lab's "done" record.
// Blank lines are skipped. A file that breaks any rule (malformed JSON, an update the protocol's
// checker refuses, a run without "done") is refused as a whole with "<file>:<line>: <what is wrong>"
// and never crashes the reader: a half-valid reference would be shown as if it were a real measurement.
#include <QByteArray>
#include <QString>
#include <QVector>
#include <map>
#include <optional>
#include <utility>

#include "app/course/lesson.h"
#include "engine/lab/lab.h"

namespace gpulab::course {

inline const char* kEmbeddedReferenceRoot = ":/reference-runs";

// Line 1 of the file: where and how the runs were recorded.
struct ReferenceHeader {
  QString lesson;   // "training-loop"
  QString gpu;      // "NVIDIA H100 80GB HBM3", as the driver names it
  QString date;     // "2026-11-23"
  QString driver, cuda, command, commit;  // empty when the file does not say
};

// One run block as it was recorded: the updates the lab sent, in order, exactly as a live run's
// sink receives them (views, points, markers, ..., records), checked by lab::UpdateChecker.
struct ReferenceRun {
  int index = 0;  // the lesson's run block, from 1
  QString lab, title;
  QVector<lab::Update> updates;
  // The run's "done" record (every recorded run ends with one).
  const lab::Record* done() const;
};

struct ReferenceRuns {
  QString path;  // the file it was read from (names it in errors)
  ReferenceHeader header;
  std::map<int, ReferenceRun> runs;  // by run index
  QString error;  // "<path>:<line>: <what>"; empty when the whole file is valid
  bool ok() const { return error.isEmpty(); }
  // Run block `index` (from 1), or nullptr when the file has none (or is not valid).
  const ReferenceRun* run(int index) const;
  // "reference: NVIDIA H100, recorded 2026-11-23 — not your machine": the text on every curve,
  // table row and tooltip that shows recorded data.
  QString label() const;
  // GPU, driver, CUDA, command and commit, one per line (for tooltips).
  QString details() const;
};

// Parses a reference file's text; `path` names it in errors. With `lesson`, the header's lesson id
// must be the lesson's and every recorded run must be one of its run blocks, with the same lab.
ReferenceRuns parseReferenceRuns(const QByteArray& text, const QString& path, const Lesson* lesson = nullptr);

// Reads and parses the file at `path` (a file or a ":/" resource); an unreadable file is an error.
ReferenceRuns loadReferenceRuns(const QString& path, const Lesson* lesson = nullptr);

// <root>/<lesson id>.jsonl.
QString referenceRunsPath(const QString& lessonId, const QString& root = kEmbeddedReferenceRoot);

// The lesson's reference runs under `root`, or nothing when there is no file for it.
std::optional<ReferenceRuns> findReferenceRuns(const Lesson& lesson, const QString& root = kEmbeddedReferenceRoot);

// The GPU's name without a trailing memory-size part: "NVIDIA H100 80GB HBM3" -> "NVIDIA H100",
// "NVIDIA A100-SXM4-40GB" -> "NVIDIA A100"; a name without one is returned as it is.
QString shortGpuName(const QString& gpu);

}  // namespace gpulab::course
