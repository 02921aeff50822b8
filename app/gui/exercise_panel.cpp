#include "app/gui/exercise_panel.h"
#include "app/gui/theme.h"

#include <QFontDatabase>
#include <QHBoxLayout>
#include <QLabel>
#include <QPlainTextEdit>
#include <QPushButton>
#include <QVBoxLayout>

#include "app/gui/code_cell.h"

namespace gpulab::app {

namespace {

QString checksAsked(const course::Challenge& challenge) {
  QStringList asked;
  for (const course::ChallengeCheck& c : challenge.checks) asked << c.measurement + ": " + course::askedText(c, c.unit);
  return asked.join("; ");
}

}  // namespace

ExercisePanel::ExercisePanel(const course::Exercise& exercise, int number, bool metBefore, QWidget* parent)
    : QFrame(parent), exercise_(exercise), hintTexts_(exercise.hints) {
  setObjectName(QString("exercise%1").arg(number));
  setFrameShape(QFrame::StyledPanel);
  setAccessibleName(QString("Exercise %1").arg(number));
  // The values are Python expressions the lesson evaluates after the run, over what it left: listed
  // under the checks, before and after a run, so that nothing runs that the learner cannot read (a
  // lesson folder may come from anywhere).
  QStringList values;
  for (auto v = exercise.values.cbegin(); v != exercise.values.cend(); ++v) values << QString("  %1 = %2").arg(v.key(), v.value());
  if (!values.isEmpty()) valuesText_ = "\nMeasured after your run, by evaluating:\n" + values.join('\n');
  result_ = new QLabel;
  result_->setObjectName("exerciseResult");
  result_->setWordWrap(true);
  result_->setTextFormat(Qt::PlainText);
  // Selectable by keyboard too: a keyboard user reaches the result with Tab and reads it line by line.
  result_->setTextInteractionFlags(Qt::TextSelectableByMouse | Qt::TextSelectableByKeyboard);
  result_->setAccessibleName(QString("Exercise %1: what the run measured").arg(number));
  result_->setText(QString("%1 Exercise %2 — run the cell to grade it. Graded from what the run measures: %3")
                       .arg(metBefore ? "✓" : "✎").arg(number).arg(checksAsked(exercise.challenge)) +
                   (metBefore ? "\nYou met it before; run it again to see its measurements." : "") +
                   (exercise.needsCuda ? "\nIt needs cuda:0: run it on the emulated GPU (or a real one)." : "") + valuesText_);
  hint_ = new QPushButton;
  hint_->setObjectName("exerciseHint");
  hints_ = new QLabel;
  hints_->setObjectName("exerciseHints");
  hints_->setWordWrap(true);
  hints_->setAccessibleName(QString("Hints for exercise %1").arg(number));
  hint_->setAccessibleDescription(QString("Shows the next hint for exercise %1").arg(number));
  hints_->hide();
  showSolution_ = new QPushButton("Show the solution");
  showSolution_->setObjectName("exerciseShowSolution");
  showSolution_->setEnabled(metBefore);
  showSolution_->setToolTip("After you have run your own attempt: the lesson's solution, to compare with yours");
  solution_ = new QPlainTextEdit(exercise.solution);
  solution_->setObjectName("exerciseSolution");
  solution_->setReadOnly(true);
  solution_->setAccessibleName(QString("The solution of exercise %1").arg(number));
  solution_->setFont(QFontDatabase::systemFont(QFontDatabase::FixedFont));
  solution_->setLineWrapMode(QPlainTextEdit::NoWrap);
  new PythonHighlighter(solution_, solution_->document());
  const int lines = std::min<int>(static_cast<int>(exercise.solution.count('\n')) + 1, 30);
  solution_->setFixedHeight(lines * QFontMetrics(solution_->font()).lineSpacing() + 24);
  solution_->hide();

  auto* buttons = new QHBoxLayout;
  buttons->setContentsMargins(0, 0, 0, 0);
  buttons->addWidget(hint_);
  buttons->addWidget(showSolution_);
  buttons->addStretch();
  auto* layout = new QVBoxLayout(this);
  layout->setContentsMargins(6, 4, 6, 4);
  layout->setSpacing(4);
  layout->addWidget(result_);
  layout->addLayout(buttons);
  layout->addWidget(hints_);
  layout->addWidget(solution_);
  hint_->setVisible(!hintTexts_.isEmpty());
  hint_->setText(QString("Hint (%1)").arg(hintTexts_.size()));
  connect(hint_, &QPushButton::clicked, this, &ExercisePanel::showHint);
  connect(showSolution_, &QPushButton::clicked, this, [this] {
    solution_->setVisible(solution_->isHidden());
    showSolution_->setText(solution_->isHidden() ? "Show the solution" : "Hide the solution");
  });
}

void ExercisePanel::showHint() {
  if (hintsShown_ >= hintTexts_.size()) return;
  ++hintsShown_;
  QStringList shown;
  for (int i = 0; i < hintsShown_; ++i) shown << QString("Hint %1: %2").arg(i + 1).arg(hintTexts_[i]);
  hints_->setText(shown.join('\n'));
  hints_->show();
  hint_->setEnabled(hintsShown_ < hintTexts_.size());
  hint_->setText(hintsShown_ < hintTexts_.size() ? QString("Another hint (%1 more)").arg(hintTexts_.size() - hintsShown_) : "No more hints");
}

void ExercisePanel::showResult(const course::ChallengeResult& result, bool ranTheStarter) {
  QStringList lines{result.met ? "✓ Exercise met." : "✗ Not met yet."};
  for (const course::CheckResult& c : result.checks) lines << (c.met ? "  ✓ " : "  ✗ ") + c.line;
  // A run that fails the way a known wrong answer does gets that answer's hint at once; where several
  // known mistakes fail the same checks, each one's hint (the grade cannot tell which one this is).
  const QList<const course::BankAnswer*> mistakes = ranTheStarter ? QList<const course::BankAnswer*>{}
                                                                  : course::likelyMistakes(exercise_, result);
  if (mistakes.size() == 1) lines << "Hint: " + mistakes[0]->hint;
  if (mistakes.size() > 1) {
    lines << "Runs that fail these checks usually make one of these mistakes:";
    for (const course::BankAnswer* m : mistakes) lines << "  • " + m->hint;
  }
  result_->setText(lines.join('\n') + valuesText_);
  result_->setStyleSheet(theme::css(result.met ? theme::Ink::Good : theme::Ink::Warning, result_->palette()) + ";");
  showSolution_->setEnabled(true);  // they tried
}

void ExercisePanel::showNotGraded(const QString& why) {
  result_->setText("Not graded: " + why + valuesText_);
  result_->setStyleSheet("");
}

}  // namespace gpulab::app
