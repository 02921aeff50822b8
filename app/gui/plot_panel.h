#pragma once
// The live plots: loss (train and eval) against step, memory (allocated, reserved, driver-reported,
// the device's capacity as a line; OOMs and empty_cache marked) against time, and throughput
// against step. Points arrive in batches; the plots replot on a ~30 Hz timer, never per point. Runs
// can be overlaid to compare them; each plot exports as PNG, PDF and CSV. The Measurements tab lists
// what the runs measured (GFLOP/s, peak bytes, training time).
//
// Reference runs: when the lesson has a recording of the selected run block made on a real GPU,
// "Compare with a real GPU" adds its curves (dashed, grey) and its measurements (grey, italic rows),
// each labelled "reference: <GPU>, recorded <date> — not your machine". They stay through the
// learner's runs (re-added after a run clears the plots) until unchecked or another block is chosen.
#include <QSet>
#include <QString>
#include <QTabWidget>
#include <QTimer>

#include <QVector>
#include <functional>
#include <optional>

#include "app/course/reference_runs.h"
#include "app/gui/lab_runner.h"

class QCustomPlot;
class QCPGraph;
class QCheckBox;
class QTableWidget;

namespace gpulab::app {

class PlotPanel final : public QWidget {
  Q_OBJECT

 public:
  explicit PlotPanel(QWidget* parent = nullptr);

  // A new run: clears the plots unless overlaying, then adds this run's graphs named `label`.
  void beginRun(const QString& label);
  void addBatch(const MetricBatch& batch);
  // Reset: removes the learner's runs (overlaid ones too) and their measurements; a reference run
  // stays while "Compare with a real GPU" is checked.
  void clearRuns();
  void setOverlay(bool overlay);

  enum class Plot { Loss, Memory, Throughput };
  // The recording of run block `index` (from 1) in `refs`, if any: offers "Compare with a real GPU".
  // refs == nullptr (the lesson has no recording) hides the offer; a file that failed to load shows
  // it disabled, with the loader's error as its tooltip.
  void setReference(const course::ReferenceRuns* refs, int index);
  void setShowReference(bool show);
  bool referenceOffered() const;  // the checkbox is visible and enabled
  QCheckBox* referenceCheckBox() const { return reference_; }
  // The recorded run's label, "reference: NVIDIA H100, recorded 2026-11-23 — not your machine"
  // (empty without a usable reference).
  QString referenceLabel() const { return refLabel_; }
  QTableWidget* measurementTable() const { return table_; }
  // What hovering `pos` (widget pixels) over a plot shows: the curve's name and the value near it,
  // and for a reference curve the recording's details.
  QString toolTipAt(Plot which, const QPointF& pos) const;

  QCustomPlot* plot(Plot which) const;
  int pointCount(Plot which) const;  // points of the current run
  bool exportPng(Plot which, const QString& path) const;
  bool exportPdf(Plot which, const QString& path) const;
  bool exportCsv(Plot which, const QString& path) const;
  // Where the export buttons ask for a file name: a save dialog, unless replaced (tests). Gets the
  // dialog's filter ("PNG (*.png)"), returns the name the learner typed (empty: cancelled).
  using SaveFileNameProvider = std::function<QString(const QString& filter)>;
  void setSaveFileNameProvider(SaveFileNameProvider provider) { askPath_ = std::move(provider); }

 signals:
  // A message for the status bar (where an export was written).
  void statusMessage(const QString& text);

 private:
  struct RunGraphs {
    QCPGraph *train = nullptr, *eval = nullptr, *allocated = nullptr, *reserved = nullptr, *driver = nullptr, *throughput = nullptr;
  };
  struct TableRow {
    QString run, name, value;
    bool reference = false;
  };
  void addExportButtons(QWidget* page, Plot which);
  QCustomPlot* shownPlot() const;  // nullptr on the Measurements tab
  void addReferenceGraphs();
  void removeReferenceGraphs();
  void rebuildTable();
  void markDirty() { dirty_ = true; }
  void replotIfDirty();
  void styleFromPalette(QCustomPlot* p);
  void fitAxes(Plot which) const;
  double runSeconds(double absolute);

  QTabWidget* tabs_;
  QCustomPlot *loss_, *memory_, *throughput_;
  QCheckBox* overlay_;
  QCheckBox* reference_;
  QTableWidget* table_;
  QVector<TableRow> rows_;     // the learner's measurements, in arrival order
  QString currentRunName_ = "your machine";  // "your machine" or "your machine — batch_size=256"
  std::optional<course::ReferenceRun> ref_;
  QString refLabel_, refDetails_;
  QVector<QCPGraph*> refGraphs_;  // the reference curves on the plots now
  RunGraphs current_;
  int runCount_ = 0;
  bool dirty_ = false;
  QSet<QCustomPlot*> stale_;  // plots with points not drawn yet (their tab is hidden)
  double timeOrigin_ = -1;  // memoryClockSeconds() of the run's first memory sample
  QTimer replot_;
  SaveFileNameProvider askPath_;
};

}  // namespace gpulab::app
