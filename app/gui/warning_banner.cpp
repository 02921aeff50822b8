#include "app/gui/warning_banner.h"

#include <QAbstractButton>
#include <QHBoxLayout>
#include <QLabel>

namespace gpulab::app {

WarningBanner::WarningBanner(const QString& objectName, QAbstractButton* button, QWidget* parent)
    : QFrame(parent), text_(new QLabel), button_(button) {
  setObjectName(objectName);
  setStyleSheet("#" + objectName + " { background: #fff4ce; border: 1px solid #e0b000; border-radius: 3px; }");
  text_->setWordWrap(true);
  text_->setTextFormat(Qt::PlainText);
  auto* layout = new QHBoxLayout(this);
  layout->setContentsMargins(8, 4, 4, 4);
  layout->addWidget(new QLabel("⚠"), 0, Qt::AlignTop);
  layout->addWidget(text_, 1);
  layout->addWidget(button_, 0, Qt::AlignTop);
  hide();
}

}  // namespace gpulab::app
