#include "app/gui/quiz_widget.h"
#include "app/gui/theme.h"

#include <QButtonGroup>
#include <QGroupBox>
#include <QHBoxLayout>
#include <QLabel>
#include <QPushButton>
#include <QRadioButton>
#include <QScrollArea>
#include <QVBoxLayout>

namespace gpulab::app {

QuizWidget::QuizWidget(course::ProgressStore& progress, QWidget* parent) : QWidget(parent), progress_(progress) {
  layout_ = new QVBoxLayout(this);
  layout_->setContentsMargins(0, 0, 0, 0);
  // The questions scroll: however many a lesson has, the window's minimum height does not grow.
  scroll_ = new QScrollArea(this);
  scroll_->setWidgetResizable(true);
  scroll_->setFrameShape(QFrame::NoFrame);
  scroll_->setHorizontalScrollBarPolicy(Qt::ScrollBarAlwaysOff);
  scroll_->setAccessibleName("Quiz");
  layout_->addWidget(scroll_);
}

void QuizWidget::setLesson(const course::Lesson* lesson) {
  lesson_ = lesson;
  content_ = new QWidget;
  scroll_->setWidget(content_);  // deletes the previous lesson's
  groups_.clear();
  feedback_.clear();
  auto* v = new QVBoxLayout(content_);
  if (!lesson || lesson->quizzes.isEmpty()) v->addWidget(new QLabel("This lesson has no quiz.", content_));
  for (int q = 0; lesson && q < lesson->quizzes.size(); ++q) {
    const course::Quiz& quiz = lesson->quizzes[q];
    auto* box = new QGroupBox(QString("Question %1").arg(q + 1), content_);
    auto* bv = new QVBoxLayout(box);
    auto* question = new QLabel(quiz.question, box);
    question->setWordWrap(true);
    question->setTextFormat(Qt::PlainText);
    bv->addWidget(question);
    auto* group = new QButtonGroup(box);
    for (int a = 0; a < quiz.answers.size(); ++a) {
      // A short radio label and the answer in a wrapping label: long answers must not widen the page.
      auto* row = new QHBoxLayout;
      auto* rb = new QRadioButton(QString(QChar('A' + a)) + ")", box);
      auto* text = new QLabel(quiz.answers[a].text, box);
      text->setWordWrap(true);
      text->setTextFormat(Qt::PlainText);
      text->setBuddy(rb);
      rb->setAccessibleName(QString("%1) %2").arg(QChar('A' + a)).arg(quiz.answers[a].text));
      row->addWidget(rb, 0, Qt::AlignTop);
      row->addWidget(text, 1);
      group->addButton(rb, a);
      bv->addLayout(row);
    }
    auto* check = new QPushButton("Check", box);
    check->setAccessibleName(QString("Check the answer to question %1").arg(q + 1));
    box->setAccessibleDescription(quiz.question);
    bv->addWidget(check, 0, Qt::AlignLeft);
    auto* fb = new QLabel(box);
    fb->setAccessibleName(QString("Feedback on question %1").arg(q + 1));
    fb->setWordWrap(true);
    bv->addWidget(fb);
    connect(check, &QPushButton::clicked, this, [this, q, group] {
      if (group->checkedId() >= 0) answer(q, group->checkedId());
      else feedback_[q]->setText("Pick an answer first.");
    });
    groups_ << group;
    feedback_ << fb;
    v->addWidget(box);
    if (const int saved = progress_.answer(lesson->id, q); saved >= 0 && saved < quiz.answers.size()) {
      group->button(saved)->setChecked(true);
      showFeedback(q, saved);
    }
  }
  v->addStretch();
}

void QuizWidget::answer(int quiz, int answerIndex) {
  if (!lesson_ || quiz < 0 || quiz >= groups_.size()) return;
  if (answerIndex < 0 || answerIndex >= lesson_->quizzes[quiz].answers.size()) return;
  groups_[quiz]->button(answerIndex)->setChecked(true);
  progress_.setAnswer(lesson_->id, quiz, answerIndex);
  showFeedback(quiz, answerIndex);
  emit answered(quiz, lesson_->quizzes[quiz].answers[answerIndex].correct);
}

void QuizWidget::showFeedback(int quiz, int answerIndex) {
  const course::QuizAnswer& a = lesson_->quizzes[quiz].answers[answerIndex];
  const QPalette& palette = feedback_[quiz]->palette();
  feedback_[quiz]->setText((a.correct ? "<b style='" + theme::css(theme::Ink::Good, palette) + "'>Correct.</b> "
                                      : "<b style='" + theme::css(theme::Ink::Bad, palette) + "'>Not quite.</b> ") +
                           a.explanation.toHtmlEscaped());
}

QString QuizWidget::feedback(int quiz) const { return quiz >= 0 && quiz < feedback_.size() ? feedback_[quiz]->text() : QString(); }

bool QuizWidget::allCorrect() const {
  if (!lesson_ || lesson_->quizzes.isEmpty()) return false;
  for (int q = 0; q < lesson_->quizzes.size(); ++q) {
    const int a = progress_.answer(lesson_->id, q);
    if (a < 0 || !lesson_->quizzes[q].answers[a].correct) return false;
  }
  return true;
}

}  // namespace gpulab::app
