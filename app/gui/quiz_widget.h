#pragma once
// The lesson's quiz: each question with its answers; choosing one and pressing Check grades it and
// shows that answer's explanation (Check with no answer chosen asks for one). Answers are kept in the ProgressStore, so they are there again
// after a restart.
#include <QVector>
#include <QWidget>

#include "app/course/lesson.h"
#include "app/course/progress_store.h"

class QButtonGroup;
class QLabel;
class QScrollArea;
class QVBoxLayout;

namespace gpulab::app {

class QuizWidget final : public QWidget {
  Q_OBJECT

 public:
  QuizWidget(course::ProgressStore& progress, QWidget* parent = nullptr);
  void setLesson(const course::Lesson* lesson);
  // Chooses answer `answer` of question `quiz` and checks it, as a learner would.
  void answer(int quiz, int answer);
  QString feedback(int quiz) const;
  bool allCorrect() const;

 signals:
  void answered(int quiz, bool correct);

 private:
  void showFeedback(int quiz, int answer);
  course::ProgressStore& progress_;
  const course::Lesson* lesson_ = nullptr;
  QVBoxLayout* layout_;
  QScrollArea* scroll_;
  QWidget* content_ = nullptr;
  QVector<QButtonGroup*> groups_;
  QVector<QLabel*> feedback_;
};

}  // namespace gpulab::app
