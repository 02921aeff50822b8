#pragma once
// One widget per kind of view a lab declares (engine/lab/lab.h, "What a lab shows"), drawn without
// knowing the lab: Line and StackedArea plots (a graph per series and run; several x axes offered in
// a small combo box), grouped Bars, a Table, a Timeline of spans on lanes. Markers and Levels on
// every plot. The plot panel (plot_panel.h) makes a tab of each and feeds it the updates of every run
// it shows -- the learner's runs and a reference run -- keyed by a run id.
//
// Drawing rules, the same in every view:
//   - a series draws nothing until it has a point (no empty legend entries); a point whose y (or
//     chosen x) is not finite is kept out of the graph, so a diverging run does not break scaling;
//   - one of the learner's runs: a colour per series; several: a colour per run (a fixed palette,
//     cycling) and a line style per series; a reference run: grey and dashed;
//   - a failed run keeps what it drew but has no legend entries; the legend hides when it is empty;
//   - the legend sits below the axes, never over the data, in as many columns as the plot's width
//     holds; its entries are short (a reference run is "reference (NVIDIA H100)", the curve's
//     tooltip and the exports have its full label), elided when still too long;
//   - nothing is redrawn per point: the panel calls refresh() on a timer for the view on screen.
#include <QPointF>
#include <QString>
#include <QStringList>
#include <QVector>
#include <QWidget>
#include <map>
#include <string>

#include "engine/lab/lab.h"

class QComboBox;
class QCustomPlot;
class QLabel;
class QTextStream;

namespace gpulab::app {

// How one run is drawn and named; the plot panel sets these whenever its runs change.
struct RunStyle {
  int run = 0;
  QString name;             // legend suffix: "lr=0.01", a reference's label; empty for a lone run
  QString shortName;        // the legend's own, shorter suffix ("reference (NVIDIA H100)"); empty: name
  int colour = 0;           // the run's place among the learner's runs (palette index)
  bool reference = false;   // grey and dashed
  bool failed = false;      // no legend entries
  bool several = false;     // several of the learner's runs are shown: colour per run, style per series
  QString details;          // more tooltip lines (a reference's GPU, driver, command)
  // The name legends and tables show: the short one where there is one.
  QString compactName() const { return shortName.isEmpty() ? name : shortName; }
};

// How tables and the Measurements tab name a run: "your machine", "your machine — lr=0.01",
// or a reference's compact name ("reference (NVIDIA H100)").
QString runTitle(const RunStyle& run);

class ViewWidget : public QWidget {
  Q_OBJECT

 public:
  // The widget for `spec.kind`, declared by `run`.
  static ViewWidget* create(int run, const lab::ViewSpec& spec, QWidget* parent = nullptr);
  ~ViewWidget() override;

  const lab::ViewSpec& spec() const { return spec_; }
  // A (re)declaration by `run`: the newest gives the title, axes and note; a run's own declaration
  // names and styles the series it draws.
  void declare(int run, const lab::ViewSpec& spec);
  bool declared() const { return !runSpecs_.empty(); }
  // A Point, Marker, Level, Bar, Row or Span of this view, sent by `run`.
  void add(int run, const lab::Update& update);
  // Removes all that `run` drew, and its declaration.
  void removeRun(int run);
  void setRunStyles(const QVector<RunStyle>& styles);
  // The device the shown run computes on: an emulated one is named in the title (and so in exports).
  void setDevice(const QString& label, bool emulated);
  QString title() const;  // "Memory — cuda:0 (emulated GPU — runs on your CPU)"

  bool dirty() const { return dirty_; }
  // Draws what changed: rescales the axes to the data and replots (a QCustomPlot queued replot).
  void refresh();

  int pointCount(int run) const;  // what `run` drew here: points, bars, rows or spans
  int markerCount() const;
  QString noteText() const;  // the note under the view, as shown
  // What the view shows now, in words, for a screen reader (its accessible description, kept up to
  // date at each refresh): "train: 2.31 → 0.42 over step 1–30"; "Nothing measured yet".
  QString description() const;
  QStringList legendEntries() const;
  // The texts the legend shows (shorter than the entries' names, see above).
  QStringList legendTexts() const;
  virtual QCustomPlot* plot() const { return nullptr; }
  virtual QWidget* view() const = 0;  // the plot or the table
  // What hovering `pos` (pixels of view()) shows: the series and the value near it.
  virtual QString toolTipAt(const QPointF& pos) const;
  // Views with several x axes (step, samples seen, seconds): which one the plot uses.
  int xAxis() const { return xAxis_; }
  void setXAxis(int index);
  QComboBox* xAxisBox() const { return xBox_; }

  bool exportPng(const QString& path);
  bool exportPdf(const QString& path);
  bool exportCsv(const QString& path);

 protected:
  ViewWidget(const lab::ViewSpec& spec, QWidget* parent);
  void setView(QWidget* view);  // the subclass's plot or table, between the axis box and the note
  // Returns whether the update drew something (a NaN point does not).
  virtual bool addData(int run, const lab::Update& update) = 0;
  virtual void dropRun(int run) = 0;
  virtual void restyle() = 0;  // names, pens and legend entries after the styles changed
  virtual void redraw() = 0;
  virtual QStringList describe() const = 0;  // a line per series, bar set, lane or row; empty: nothing yet
  virtual void writeCsv(QTextStream& out) const = 0;
  virtual void axisChanged() {}
  virtual void specChanged();
  const RunStyle& style(int run) const;
  // The series `id` as `run` declared it (its label, style, overlay), and its place in the list.
  const lab::SeriesSpec* series(int run, const std::string& id, int* index = nullptr) const;
  // "train — lr=0.01": the series' label, then the run's name when it has one.
  QString legendName(int run, const std::string& seriesId) const;
  // The same with the run's short name: what the legend shows.
  QString legendText(int run, const std::string& seriesId) const;
  void markDirty() { dirty_ = true; }
  void nameForScreenReaders();  // the view's accessible name (its title) and description
  void setTitleText(const QString& text);
  virtual void applyTitle(const QString& text) = 0;
  // Markers and levels of the plot kinds.
  void addMarker(int run, const lab::Marker& m);
  void addLevel(int run, const lab::Level& l);
  void placeMarkers();
  // Widens the x axis to every marker on it (rescaling fits the data only: a marker after the last
  // point, such as empty_cache() after the run, was drawn off the plot).
  void fitMarkers();
  void placeLevels();
  void styleItems();

  lab::ViewSpec spec_;
  std::map<int, lab::ViewSpec> runSpecs_;
  QVector<RunStyle> styles_;
  int xAxis_ = 0;

 private:
  struct MarkerItem;
  struct LevelItem;
  RunStyle lone_;  // the style of a run the panel has not styled yet
  std::map<int, int> counts_;
  std::vector<MarkerItem> markers_;
  std::vector<LevelItem> levels_;
  QString device_;
  bool emulated_ = false;
  bool dirty_ = true;
  QComboBox* xBox_ = nullptr;
  QWidget* xRow_ = nullptr;
  QLabel* note_ = nullptr;
};

}  // namespace gpulab::app
