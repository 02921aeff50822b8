#pragma once
// The live views of the code cells, fed from a notebook kernel's events (app/notebook/kernel_process.h)
// into a plot panel as lab protocol updates (engine/lab/lab.h), so that a cell's run is drawn through
// the same views a lab's run uses and can be overlaid and exported like any run. Each cell run is a
// run there. Without asking, a cell gets:
//   - what it reports with lab.log(name=value): the "Logged" view, one series per name;
//   - with a CUDA device, cuda:0's allocated and reserved memory, and its live bytes by category
//     (stacked), sampled every 20 ms while it runs;
// and a cell may declare views of its own (lab.view, lab.point, ...), which are checked as a lab's
// updates are: a refused one is reported, not drawn.
#include <QJsonObject>
#include <QMap>
#include <QObject>
#include <QString>
#include <QStringList>
#include <QVector>

#include "app/notebook/kernel_process.h"
#include "engine/lab/lab.h"

namespace gpulab::app {

class PlotPanel;

class CellViews final : public QObject {
  Q_OBJECT

 public:
  // Draws the cells run by `kernel` into `plots`.
  CellViews(notebook::KernelProcess& kernel, PlotPanel& plots, QObject* parent = nullptr);

  static constexpr const char* kLogView = "cell-log";
  static constexpr const char* kMemoryView = "cell-memory";
  static constexpr const char* kCategoryView = "cell-memory-categories";

 signals:
  // A cell's run started drawing (the panel should come to the front).
  void runStarted();
  // What cell `cellId` sent that the views refused ("lab.point(): a point for view 'v', which was not
  // declared"), for the cell's own output.
  void refused(const QString& cellId, const QString& text);

 private:
  // The updates for each kernel event.
  QVector<lab::Update> started();
  QVector<lab::Update> logged(qint64 step, const QMap<QString, double>& values);
  QVector<lab::Update> memory(double seconds, qint64 allocated, qint64 reserved, const QMap<QString, qint64>& categories) const;
  void fromCell(const QString& cellId, const QJsonObject& json);
  lab::ViewSpec logView() const;
  void draw(const QVector<lab::Update>& updates);

  PlotPanel& plots_;
  QString device_ = "cpu";  // the session's cuda:0 ("cpu" without a CUDA device)
  bool emulated_ = false;
  QStringList series_;         // the names logged in this run, in order of arrival
  lab::UpdateChecker checker_;  // the cell's own views (lab.view), afresh for each run
};

}  // namespace gpulab::app
