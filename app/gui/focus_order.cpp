#include "app/gui/focus_order.h"

namespace gpulab::app {

namespace {

bool stopsTab(const QWidget* w) {
  // A widget that hands its focus on (a spin box's line edit to the spin box) is placed with the widget
  // it hands it to: Qt's setTabOrder moves the two together.
  return (w->focusPolicy() & Qt::TabFocus) && !w->focusProxy();
}

}  // namespace

QList<QWidget*> focusables(QWidget* root) {
  QList<QWidget*> out;
  if (!root) return out;
  if (stopsTab(root)) out << root;
  for (QWidget* w = root->nextInFocusChain(); w && w != root; w = w->nextInFocusChain())
    if (root->isAncestorOf(w) && stopsTab(w)) out << w;
  return out;
}

QWidget* placeAfter(QWidget* anchor, const QList<QWidget*>& widgets) {
  for (QWidget* w : widgets) {
    if (!w || w == anchor || !(w->focusPolicy() & Qt::TabFocus)) continue;  // setTabOrder ignores those
    QWidget::setTabOrder(anchor, w);
    anchor = w;
  }
  return anchor;
}

}  // namespace gpulab::app
