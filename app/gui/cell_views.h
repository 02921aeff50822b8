#pragma once
// The live views of the code cells: what a cell reports with lab.log(name=value) and cuda:0's memory
// while it runs (the notebook kernel's events, app/notebook/kernel_process.h), as lab protocol
// updates (engine/lab/lab.h). The plot panel draws them through the same views a lab's run uses, so
// a cell's run can be overlaid on another's and exported like any run. Each cell run is a run there.
#include <QMap>
#include <QString>
#include <QStringList>
#include <QVector>

#include "engine/lab/lab.h"

namespace gpulab::app {

class CellViews {
 public:
  // The session's device, as the kernel said when it was ready ("cpu" without a CUDA device).
  void setDevice(const QString& deviceName, bool emulated);
  // A cell starts: the device it runs on and, with a CUDA device, the memory views.
  QVector<lab::Update> started();
  // lab.log(step=..., loss=..., acc=...): one point per name; a name not seen before in this run adds
  // its series to the view.
  QVector<lab::Update> logged(qint64 step, const QMap<QString, double>& values);
  // A sample of cuda:0's allocator: allocated and reserved, and the live bytes by category (stacked).
  QVector<lab::Update> memory(double seconds, qint64 allocated, qint64 reserved, const QMap<QString, qint64>& categories) const;

  static constexpr const char* kLogView = "cell-log";
  static constexpr const char* kMemoryView = "cell-memory";
  static constexpr const char* kCategoryView = "cell-memory-categories";

 private:
  lab::ViewSpec logView() const;

  QString device_ = "cpu";
  bool emulated_ = false;
  QStringList series_;  // the names logged in this run, in order of arrival
};

}  // namespace gpulab::app
