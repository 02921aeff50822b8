#pragma once
// Tab's order through widgets made after the window (a lesson's texts and cells, a run's parameters,
// a lab's views). Qt puts a widget added to a shown window at the end of its focus chain, so that Tab
// went from the lesson's last cell to the run's parameters, then round to the course outline, and only
// then to the lesson's session bar. These place such widgets where the page shows them.
#include <QList>
#include <QWidget>

namespace gpulab::app {

// The widgets Tab stops at inside `root` (root too, if it takes focus), in their present order.
QList<QWidget*> focusables(QWidget* root);
// Puts `widgets` in this order right after `anchor` in the focus chain; returns the last one placed
// (or `anchor`), to place more after it.
QWidget* placeAfter(QWidget* anchor, const QList<QWidget*>& widgets);

}  // namespace gpulab::app
