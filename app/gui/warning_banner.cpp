#include "app/gui/warning_banner.h"
#include "app/gui/theme.h"

#include <QAbstractButton>
#include <QEvent>
#include <QHBoxLayout>
#include <QLabel>

namespace gpulab::app {

WarningBanner::WarningBanner(const QString& objectName, QAbstractButton* button, QWidget* parent)
    : QFrame(parent), text_(new QLabel), button_(button) {
  setObjectName(objectName);
  restyle();
  text_->setWordWrap(true);
  text_->setTextFormat(Qt::PlainText);
  auto* layout = new QHBoxLayout(this);
  layout->setContentsMargins(8, 4, 4, 4);
  layout->addWidget(new QLabel("⚠"), 0, Qt::AlignTop);
  layout->addWidget(text_, 1);
  layout->addWidget(button_, 0, Qt::AlignTop);
  hide();
}

void WarningBanner::restyle() {
  // A tint of the palette's own background, so that its text stays readable on a dark desktop too.
  const QPalette& p = palette();
  setStyleSheet(QString("#%1 { background: %2; border: 1px solid %3; border-radius: 3px; }")
                    .arg(objectName(), theme::tint(theme::Ink::Warning, p).name(), theme::border(theme::Ink::Warning, p).name()));
}

void WarningBanner::changeEvent(QEvent* event) {
  QFrame::changeEvent(event);
  // A style sheet's own change sends PaletteChange too: only the application's palette restyles.
  if (event->type() == QEvent::ApplicationPaletteChange) restyle();
}

}  // namespace gpulab::app
