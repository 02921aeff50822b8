#pragma once
// The live plots: loss (train and eval) against step, memory (allocated, reserved, driver-reported,
// the device's capacity as a line; OOMs and empty_cache marked) against time, and throughput
// against step. Points arrive in batches; the plots replot on a ~30 Hz timer, never per point. Runs
// can be overlaid to compare them; each plot exports as PNG, PDF and CSV.
#include <QSet>
#include <QString>
#include <QTabWidget>
#include <QTimer>

#include "app/gui/lab_runner.h"

class QCustomPlot;
class QCPGraph;
class QCheckBox;

namespace gpulab::app {

class PlotPanel final : public QWidget {
  Q_OBJECT

 public:
  explicit PlotPanel(QWidget* parent = nullptr);

  // A new run: clears the plots unless overlaying, then adds this run's graphs named `label`.
  void beginRun(const QString& label);
  void addBatch(const MetricBatch& batch);
  void setOverlay(bool overlay);

  enum class Plot { Loss, Memory, Throughput };
  QCustomPlot* plot(Plot which) const;
  int pointCount(Plot which) const;  // points of the current run
  bool exportPng(Plot which, const QString& path) const;
  bool exportPdf(Plot which, const QString& path) const;
  bool exportCsv(Plot which, const QString& path) const;

 private:
  struct RunGraphs {
    QCPGraph *train = nullptr, *eval = nullptr, *allocated = nullptr, *reserved = nullptr, *driver = nullptr, *throughput = nullptr;
  };
  void addExportButtons(QWidget* page, Plot which);
  void markDirty() { dirty_ = true; }
  void replotIfDirty();
  void styleFromPalette(QCustomPlot* p);
  void fitAxes(Plot which) const;
  double runSeconds(double absolute);

  QTabWidget* tabs_;
  QCustomPlot *loss_, *memory_, *throughput_;
  QCheckBox* overlay_;
  RunGraphs current_;
  int runCount_ = 0;
  bool dirty_ = false;
  QSet<QCustomPlot*> stale_;  // plots with points not drawn yet (their tab is hidden)
  double timeOrigin_ = -1;  // memoryClockSeconds() of the run's first memory sample
  QTimer replot_;
};

}  // namespace gpulab::app
