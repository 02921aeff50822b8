#pragma once
// gpulab-cli lesson ID: a lesson's code cells and exercises, run headless in the notebook kernel the
// window uses (app/notebook/headless_session.h).
#include <QTextStream>

#include "app/course/lesson.h"

namespace gpulab::cli {

// Runs the lesson's code cells in one session, in order, its setup cells first, printing what each
// printed and raised (--json: one "cell" event each, with its output). A cell that raises is reported
// and the next one runs, as in the window (some raise on purpose: the lesson's error); the result is
// a failure only when the session ends under a cell. A session that cannot start (no Python with GPU
// Lab's torch) is a warning: the cells are skipped. `emulatedGpu`: the emulated GPU as cuda:0.
int runLessonCells(const course::Lesson& lesson, bool emulatedGpu, bool json, QTextStream& out);

// gpulab-cli lesson ID --check-exercises: each exercise's starter and the wrong answers of its bank
// must NOT meet its checks (a wrong answer failing exactly the checks its "# fails:" lines name), and
// its solution and the bank's right answers must, in a fresh session each (after the lesson's setup
// cells), on the CPU and on the emulated GPU (an exercise that needs CUDA only there). One JSON event
// per exercise and device with --json: {"event": "exercise", "id": 1, "device": "cpu", "ok": true,
// "answers": [{"answer": "starter", "should_meet": false, "met": false, "ok": true, "checks": [...]},
// {"answer": "solution", ...}, {"answer": "wrong answer 1 (line 140)", ...}, ...]}. Exit 1 when an
// answer grades wrongly or cannot run.
int checkExercises(const course::Lesson& lesson, bool json, QTextStream& out);

}  // namespace gpulab::cli
