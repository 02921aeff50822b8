#include "app/cli/lesson_cells.h"

#include <QJsonArray>
#include <QJsonObject>

#include "app/cli/cli_commands.h"
#include "app/course/challenge.h"
#include "app/notebook/headless_session.h"

namespace gpulab::cli {

namespace {

using notebook::CellResult;
using notebook::HeadlessSession;

QString statusName(CellResult::Status s) {
  switch (s) {
    case CellResult::Status::Ok: return "ok";
    case CellResult::Status::Error: return "error";
    case CellResult::Status::Interrupted: return "interrupted";
    case CellResult::Status::KernelDied: return "kernel_died";
  }
  return "error";
}

// The setup cells first, then the others, in the lesson's order: as the window runs them.
QVector<int> cellOrder(const course::Lesson& lesson) {
  QVector<int> order;
  for (int pass = 0; pass < 2; ++pass)
    for (int i = 0; i < lesson.cells.size(); ++i)
      if (lesson.cells[i].setup == (pass == 0)) order << i;
  return order;
}

QString cellId(int index) { return QString::number(index + 1); }

// The lesson's setup cells in a session; an error names the one that failed.
QString runSetup(HeadlessSession& session, const course::Lesson& lesson) {
  for (int i = 0; i < lesson.cells.size(); ++i) {
    if (!lesson.cells[i].setup) continue;
    const CellResult r = session.run(cellId(i), lesson.cells[i].code);
    if (r.status != CellResult::Status::Ok) {
      return QString("setup cell %1 (line %2) raised %3: %4").arg(i + 1).arg(lesson.cells[i].line).arg(r.errorType, r.message);
    }
  }
  return {};
}

}  // namespace

int runLessonCells(const course::Lesson& lesson, bool emulatedGpu, bool json, QTextStream& out) {
  if (lesson.cells.isEmpty()) return kExitOk;
  HeadlessSession session(emulatedGpu);
  if (!session.ok()) {
    // Without GPU Lab's Python the run blocks still run: the cells are skipped, and it says why.
    const QString why = "the code cells were not run: " + session.error().trimmed();
    out << (json ? jsonLine({{"event", "message"}, {"level", "warning"}, {"text", why}}) : "gpulab-cli: " + why) << "\n";
    return kExitOk;
  }
  for (int i : cellOrder(lesson)) {
    const course::CodeBlock& cell = lesson.cells[i];
    QString printed;
    session.setOutputHandler([&](const QString&, const QString& text) {
      if (json) printed += text;
      else out << text;
      out.flush();
    });
    if (!json) out << "== Cell " << i + 1 << (cell.setup ? " (setup)" : "") << ", line " << cell.line << "\n";
    out.flush();
    const CellResult r = session.run(cellId(i), cell.code);
    if (json) {
      QJsonObject event{{"event", "cell"}, {"index", i + 1}, {"line", cell.line}, {"setup", cell.setup}, {"status", statusName(r.status)},
                        {"seconds", r.seconds}, {"output", printed}};
      if (r.status != CellResult::Status::Ok) event["error"] = QJsonObject{{"type", r.errorType}, {"message", r.message}, {"kind", r.kind}};
      out << jsonLine(event) << "\n";
    } else if (r.status != CellResult::Status::Ok) {
      if (r.kind == "device") out << "✗ Tensors on two devices: the same-device rule.\n";
      if (r.kind == "oom") out << "✗ Out of GPU memory.\n";
      out << (r.traceback.isEmpty() ? r.errorType + ": " + r.message + "\n" : r.traceback);
    }
    out.flush();
    if (r.status == CellResult::Status::KernelDied) return kExitFailed;
  }
  return kExitOk;
}

namespace {

// One answer an exercise is checked with: the starter and the wrong answers must not meet its checks
// (a wrong answer failing exactly the checks its "# fails:" lines name, on the machines together), the
// solution and the right answers must.
struct Trial {
  QString which;  // "starter", "solution", "wrong answer 2", ...
  QString code;
  bool shouldMeet = false;
  QStringList mustFail;
  int line = 0;
};

QVector<Trial> trialsOf(const course::Exercise& exercise) {
  QVector<Trial> trials{{"starter", exercise.starter, false, {}, 0}, {"solution", exercise.solution, true, {}, 0}};
  for (int k = 0; k < exercise.wrong.size(); ++k) {
    const course::BankAnswer& a = exercise.wrong[k];
    trials << Trial{QString("wrong answer %1 (line %2)").arg(k + 1).arg(a.line), a.code, false, a.fails, a.line};
  }
  for (int k = 0; k < exercise.right.size(); ++k) {
    const course::BankAnswer& a = exercise.right[k];
    trials << Trial{QString("right answer %1 (line %2)").arg(k + 1).arg(a.line), a.code, true, {}, a.line};
  }
  return trials;
}

// One answer run and graded: on each of the exercise's machines (each a fresh session), or in one
// session on `emulated` for an exercise without machines. `problem` says why it could not be graded.
struct Graded {
  course::ChallengeResult result;
  QString raised, problem, device;
  bool skipped = false;
};

Graded runTrial(const course::Lesson& lesson, const course::Exercise& exercise, const Trial& trial, bool emulated) {
  Graded g;
  QVector<course::MachineRun> runs;
  const QVector<notebook::Machine> machines =
      exercise.machines.isEmpty() ? QVector<notebook::Machine>{notebook::Machine::thisMachine(emulated)} : exercise.machines;
  QStringList devices;
  for (const notebook::Machine& machine : machines) {
    HeadlessSession session(machine);
    if (!session.ok()) {
      g.problem = session.error();
      return g;
    }
    devices << (!exercise.machines.isEmpty() ? machine.name()
                : session.cudaAvailable() ? (session.cudaIsEmulated() ? "emulated-gpu" : "gpu") : "cpu");
    if (exercise.needsCuda && !session.cudaAvailable()) {
      g.skipped = true;
      g.device = devices.join(", ");
      return g;
    }
    if (const QString setupProblem = runSetup(session, lesson); !setupProblem.isEmpty()) {
      g.problem = setupProblem;
      return g;
    }
    const CellResult r = session.run("exercise", trial.code, exercise.values);
    if (r.status == CellResult::Status::KernelDied || r.status == CellResult::Status::Interrupted) {
      g.problem = "the run " + statusName(r.status) + ": " + r.message;
      return g;
    }
    if (r.status == CellResult::Status::Error && g.raised.isEmpty()) {
      g.raised = (exercise.machines.isEmpty() ? QString() : "on " + machine.name() + ": ") + r.errorType + ": " + r.message;
    }
    runs << course::MachineRun{machine, r.measurements, r.unmeasured};
  }
  g.device = devices.join(", ");
  g.result = exercise.machines.isEmpty() ? course::gradeExercise(exercise, runs[0].measured, runs[0].unmeasured)
                                         : course::gradeOnMachines(exercise, runs);
  return g;
}

}  // namespace

int checkExercises(const course::Lesson& lesson, bool json, QTextStream& out) {
  bool allOk = true;
  for (int e = 0; e < lesson.exercises.size(); ++e) {
    const course::Exercise& exercise = lesson.exercises[e];
    // Without machines: the CPU and the emulated GPU, a session each; with them, the machines.
    const QVector<bool> passes = exercise.machines.isEmpty() ? QVector<bool>{false, true} : QVector<bool>{true};
    for (const bool emulated : passes) {
      QJsonObject event{{"event", "exercise"}, {"id", e + 1}, {"title", exercise.title}};
      if (!json) out << "Exercise " << e + 1 << " (" << exercise.title << "), ";
      bool ok = true, skipped = false, first = true;
      QJsonArray answers;
      for (const Trial& trial : trialsOf(exercise)) {
        const Graded g = runTrial(lesson, exercise, trial, emulated);
        if (first) {
          event["device"] = g.device.isEmpty() ? QString("?") : g.device;
          if (!json) out << "on " << (g.device.isEmpty() ? QString("?") : g.device) << ":\n";
          first = false;
        }
        if (g.skipped) {
          skipped = true;
          event["skipped"] = "needs a CUDA device (the emulated GPU will do); this session has none";
          if (!json) out << "  skipped: it needs a CUDA device, and this session has none\n";
          break;
        }
        QJsonObject answer{{"answer", trial.which}, {"should_meet", trial.shouldMeet}};
        if (!g.problem.isEmpty()) {
          ok = false;
          answer["error"] = g.problem;
          answer["ok"] = false;
          answers.append(answer);
          if (!json) out << "  the " << trial.which << " could not be graded: " << g.problem << "\n";
          continue;
        }
        QStringList failed, missed, extra;
        for (const course::CheckResult& c : g.result.checks)
          if (!c.met && !c.check.measurement.isEmpty() && !failed.contains(c.check.measurement)) failed << c.check.measurement;
        for (const QString& f : trial.mustFail)
          if (!failed.contains(f)) missed << f;
        // Exactly those: the panel names a run's likely mistake by the bank answers whose lines name the
        // most of the checks it failed (course::likelyMistakes), so an answer failing more than its lines
        // say would let a shorter answer's hint stand for it.
        if (!trial.shouldMeet && !trial.mustFail.isEmpty())  // a wrong answer (the starter names none)
          for (const QString& f : failed)
            if (!trial.mustFail.contains(f)) extra << f;
        const bool right = trial.shouldMeet ? g.result.met : !g.result.met && missed.isEmpty() && extra.isEmpty();
        ok = ok && right;
        QJsonArray lines;
        for (const course::CheckResult& c : g.result.checks) lines.append(c.line);
        answer["met"] = g.result.met;
        answer["checks"] = lines;
        answer["ok"] = right;
        if (!missed.isEmpty()) answer["should_have_failed"] = QJsonArray::fromStringList(missed);
        if (!extra.isEmpty()) answer["failed_unnamed"] = QJsonArray::fromStringList(extra);
        if (!g.raised.isEmpty()) answer["raised"] = g.raised;
        answers.append(answer);
        if (!json) {
          out << "  the " << trial.which << (g.result.met ? " meets" : " does not meet") << " the checks -- " << (right ? "as it should" : "WRONG") << "\n";
          if (!missed.isEmpty()) out << "    (its \"# fails:\" lines name checks it met: " << missed.join("; ") << ")\n";
          if (!extra.isEmpty()) out << "    (it also failed checks its \"# fails:\" lines do not name: " << extra.join("; ") << ")\n";
          if (!g.raised.isEmpty()) out << "    (it raised " << g.raised.left(300) << ")\n";
          for (const course::CheckResult& c : g.result.checks) out << "    " << c.line << "\n";
        }
      }
      event["answers"] = answers;
      event["ok"] = ok;
      if (json) out << jsonLine(event) << "\n";
      out.flush();
      allOk = allOk && (ok || skipped);
    }
  }
  return allOk ? kExitOk : kExitFailed;
}

}  // namespace gpulab::cli
