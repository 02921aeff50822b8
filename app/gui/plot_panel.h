#pragma once
// The live views of the runs: a tab per view the lab declares (engine/lab/lab.h, "What a lab
// shows"), in the order it declares them, each drawn by its kind (view_widgets.h) without knowing
// the lab, then the Measurements tab (what the runs measured: peak bytes, GFLOP/s, ...). Updates
// arrive in batches; the view on screen redraws on a ~30 Hz timer, never per point, and a hidden one
// when its tab is shown. A view that offers several x axes has a box to draw every run against
// another. Runs can be overlaid to compare them: the legend names each run by what differs between
// the runs' settings ("lr=0.01"; "run 1", "run 2" when nothing does). A failed run keeps its
// points but has no legend entries. Each view exports as PNG, PDF and CSV, with the run's device
// label when it is emulated.
//
// Reference runs: when the lesson has a recording of the selected run block made on a real GPU,
// "Compare with a real GPU" replays its updates into the same views (dashed, grey) and adds its
// measurements (grey, italic rows), each labelled "reference: <GPU>, recorded <date> — not your
// machine". They stay through the learner's runs until unchecked or another block is chosen.
//
// Views outlive the runs that declared them until the end of the next run (or until the reference
// that declared them goes): a new run draws into the views it declares again, so tabs do not flicker.
#include <QString>
#include <QStringList>
#include <QTimer>
#include <QVector>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "app/course/reference_runs.h"
#include "app/gui/lab_runner.h"
#include "app/gui/view_widgets.h"

class QCustomPlot;
class QCheckBox;
class QPushButton;
class QTabWidget;
class QTableWidget;

namespace gpulab::app {

class PlotPanel final : public QWidget {
  Q_OBJECT

 public:
  using Settings = std::map<std::string, std::string>;
  explicit PlotPanel(QWidget* parent = nullptr);

  // A new run with these settings: clears the learner's earlier runs unless overlaying -- and when
  // overlaying, the runs of another `block` (a lesson's run block: "training-loop#1"), which share
  // nothing to compare but view ids (issue 48 §4.4: three run blocks of one lesson in one plot, named
  // by every setting they had).
  void beginRun(const Settings& settings, const QString& block = {});
  void addBatch(const MetricBatch& batch);
  // The run ended; with an error it failed: its points stay, its legend entries go.
  void endRun(const QString& error);
  // Reset: removes the learner's runs (overlaid ones too), their measurements and markers; a
  // reference run stays while "Compare with a real GPU" is checked. The views stay, empty.
  void clearRuns();
  // Another lesson: clearRuns(), and the views only the learner's runs declared go too.
  void clearViews();
  void setOverlay(bool overlay);

  // The recording of run block `index` (from 1) in `refs`, if any: offers "Compare with a real GPU".
  // refs == nullptr (the lesson has no recording) hides the offer; a file that failed to load shows
  // it disabled, with the loader's error as its tooltip.
  void setReference(const course::ReferenceRuns* refs, int index);
  void setShowReference(bool show);
  bool referenceOffered() const;  // the checkbox is visible and enabled
  QCheckBox* referenceCheckBox() const { return reference_; }
  QPushButton* exportButton() const { return exportButton_; }
  // The recorded run's label, "reference: NVIDIA H100, recorded 2026-11-23 — not your machine"
  // (empty without a usable reference).
  QString referenceLabel() const { return refLabel_; }
  QTableWidget* measurementTable() const { return table_; }

  // The views, by the ids the lab gave them, in tab order.
  QStringList viewIds() const;
  ViewWidget* view(const QString& id) const;
  QWidget* viewWidget(const QString& id) const;  // its QCustomPlot or QTableWidget
  QCustomPlot* plot(const QString& id) const;    // nullptr for a table (or an unknown id)
  void showView(const QString& id);
  QString shownView() const;  // empty on the Measurements tab
  int pointCount(const QString& id) const;  // what the current run drew there
  QStringList legendEntries(const QString& id) const;
  int markerCount(const QString& id) const;
  // What hovering `pos` (pixels of the view's plot) shows: the series and the value near it, and
  // for a reference curve the recording's details.
  QString toolTipAt(const QString& id, const QPointF& pos) const;
  bool exportPng(const QString& id, const QString& path) const;
  bool exportPdf(const QString& id, const QString& path) const;
  bool exportCsv(const QString& id, const QString& path) const;
  // Where the export buttons ask for a file name: a save dialog, unless replaced (tests). Gets the
  // dialog's filter ("PNG (*.png)"), returns the name the learner typed (empty: cancelled).
  using SaveFileNameProvider = std::function<QString(const QString& filter)>;
  void setSaveFileNameProvider(SaveFileNameProvider provider) { askPath_ = std::move(provider); }
  // Asks for a file name as the export buttons do (the provider or a save dialog titled `title`,
  // opened on "gpulab-<name>.<ext>" in the Documents folder); a name typed without `ext` ("png")
  // gets it. Empty: cancelled.
  QString askSavePath(const QString& title, const QString& filter, const QString& ext, const QString& name);
  QString lastSuggestedPath() const { return lastSuggestion_; }  // what the last dialog opened on

 signals:
  // A message for the status bar (where an export was written).
  void statusMessage(const QString& text);

 private:
  void orderFocus();
  static constexpr int kReferenceRun = 0;  // the learner's runs are 1, 2, ...
  struct Run {
    int id = 0;
    Settings settings;
    QString block;
    bool failed = false;
    QString device;
    bool emulated = false;
  };
  struct Page {
    std::string id;
    ViewWidget* view;  // the tab's page
  };
  struct MeasurementRow {
    int run;
    QString name, value;
  };
  void apply(int run, const QVector<lab::Update>& updates);
  void declareView(int run, const lab::ViewSpec& spec);
  const Page* page(const std::string& id) const;
  const Page* page(const QString& id) const { return page(id.toStdString()); }
  void removeRun(int run);
  void pruneViews();  // views that no run shown declares
  void addReference();
  void removeReference();
  void restyle();
  RunStyle styleOf(int run) const;
  void rebuildTable();
  void replotIfDirty();
  void exportShown(const QString& kind);

  QTabWidget* tabs_;
  QCheckBox* overlay_;
  QCheckBox* reference_;
  QPushButton* exportButton_;  // its menu: PNG, PDF, CSV
  QTableWidget* table_;
  std::vector<Page> views_;          // in declaration order, before the Measurements tab
  QVector<Run> runs_;                // the learner's runs shown, oldest first
  QVector<RunStyle> styles_;         // theirs and the reference's
  QVector<MeasurementRow> rows_;     // in arrival order
  int currentRun_ = 0;               // 0: none yet
  int nextRun_ = 1;
  std::optional<course::ReferenceRun> ref_;
  bool refShown_ = false;
  QString refLabel_, refDetails_, refShort_;
  QTimer replot_;
  SaveFileNameProvider askPath_;
  QString lastSuggestion_;
};

}  // namespace gpulab::app
