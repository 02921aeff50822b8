#pragma once
// A notice above the content it concerns: a warning sign, plain wrapped text, and one button on the
// right that answers it ("Understood", or ✕ to hide it). The lesson page's notice about code from
// outside GPU Lab and the window's notice about the progress file are both one.
#include <QFrame>

class QAbstractButton;
class QLabel;

namespace gpulab::app {

class WarningBanner : public QFrame {
  Q_OBJECT

 public:
  // `button` is placed on the right and owned by the banner; the banner starts hidden.
  WarningBanner(const QString& objectName, QAbstractButton* button, QWidget* parent = nullptr);
  QLabel* text() const { return text_; }
  QAbstractButton* button() const { return button_; }

 protected:
  void changeEvent(QEvent* event) override;

 private:
  void restyle();
  QLabel* text_;
  QAbstractButton* button_;
};

}  // namespace gpulab::app
