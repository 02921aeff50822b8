#pragma once
// Under an exercise's cell (lesson.h, Exercise): what the last run of the cell measured against what
// the exercise asks, one line per check; its hints, one at a time on demand; and the reference
// solution, which the learner can reveal once they have run their own attempt.
#include <QFrame>

#include "app/course/challenge.h"
#include "app/course/lesson.h"

class QLabel;
class QPlainTextEdit;
class QPushButton;

namespace gpulab::app {

class ExercisePanel final : public QFrame {
  Q_OBJECT

 public:
  // `number` from 1; `metBefore`: the learner met it in an earlier session.
  ExercisePanel(const course::Exercise& exercise, int number, bool metBefore, QWidget* parent = nullptr);

  // A run of the cell was graded. `ranTheStarter`: the code run was the starter as given -- the
  // lesson's own mistake, which the exercise's hints are about; otherwise a run that fails the way a
  // wrong answer of the bank does is shown that answer's hint at once.
  void showResult(const course::ChallengeResult& result, bool ranTheStarter = false);
  // The run could not be graded (stopped, or the session has no CUDA device for an exercise that
  // needs one): says why, the grade stays as it was.
  void showNotGraded(const QString& why);
  QLabel* result() const { return result_; }
  QPushButton* hintButton() const { return hint_; }
  QLabel* hints() const { return hints_; }
  QPushButton* solutionButton() const { return showSolution_; }
  QPlainTextEdit* solution() const { return solution_; }

 private:
  void showHint();

  course::Exercise exercise_;  // its checks and bank (likelyMistakes)
  QStringList hintTexts_;
  QString valuesText_;  // "Measured after your run, by evaluating: ...": the exercise's values, always shown
  int hintsShown_ = 0;
  QLabel* result_;
  QPushButton* hint_;
  QLabel* hints_;
  QPushButton* showSolution_;
  QPlainTextEdit* solution_;
};

}  // namespace gpulab::app
