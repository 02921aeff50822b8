#include "app/gui/plot_panel.h"

#include <QCheckBox>
#include <QDir>
#include <QFile>
#include <QFileInfo>
#include <QFileDialog>
#include <QHBoxLayout>
#include <QHeaderView>
#include <QPushButton>
#include <QTableWidget>
#include <QTextStream>
#include <QToolTip>
#include <QVBoxLayout>
#include <algorithm>
#include <qcustomplot.h>

#include "engine/memory/caching_allocator.h"

namespace gpulab::app {

namespace {

constexpr double kMiB = 1024.0 * 1024.0;

// Colours of successive runs: the current run strong, earlier ones (overlaid) in other hues.
QColor runColour(int run, int shade) {
  static const QColor base[] = {QColor(31, 119, 180), QColor(255, 127, 14), QColor(44, 160, 44), QColor(214, 39, 40), QColor(148, 103, 189)};
  QColor c = base[(run + shade) % 5];
  return c;
}

QCustomPlot* makePlot(const QString& xLabel, const QString& yLabel) {
  auto* p = new QCustomPlot;
  p->xAxis->setLabel(xLabel);
  p->yAxis->setLabel(yLabel);
  p->legend->setVisible(true);
  // One point smaller than the axes: a reference run's entries carry its full label, and the legend
  // must stay narrower than a plot in a 1280-pixel window.
  QFont legendFont = p->legend->font();
  legendFont.setPointSizeF(std::max(6.0, legendFont.pointSizeF() - 1.0));
  p->legend->setFont(legendFont);
  p->legend->setIconSize(24, 12);
  p->setInteractions(QCP::iRangeDrag | QCP::iRangeZoom | QCP::iSelectPlottables);
  // Live curves grow to thousands of points: thin, non-antialiased lines keep a replot to a few
  // milliseconds, so the GUI thread stays responsive while a run streams.
  p->setNotAntialiasedElements(QCP::aePlottables);
  p->setMinimumHeight(110);  // the window fits a 1280x800 screen
  return p;
}

QCPGraph* addGraph(QCustomPlot* p, const QString& name, const QColor& colour, bool dots = false) {
  QCPGraph* g = p->addGraph();
  g->setName(name);
  g->setPen(QPen(colour, 0));  // cosmetic 1-pixel pen: the fast path of the raster engine
  g->setAdaptiveSampling(true);
  if (dots) g->setScatterStyle(QCPScatterStyle(QCPScatterStyle::ssCircle, 6));
  return g;
}

// Reference curves: grey and dashed, so that a recording never passes for one of the learner's runs.
QCPGraph* addReferenceGraph(QCustomPlot* p, const QString& name, const QColor& grey, Qt::PenStyle style, bool dots = false) {
  QCPGraph* g = p->addGraph();
  g->setName(name);
  g->setPen(QPen(grey, 1.5, style));
  g->setAdaptiveSampling(true);
  if (dots) {
    g->setLineStyle(QCPGraph::lsNone);
    g->setScatterStyle(QCPScatterStyle(QCPScatterStyle::ssDiamond, QPen(grey, 1.5), Qt::NoBrush, 7));
  }
  return g;
}

QString formatMeasurement(const lab::Measurement& m) {
  if (m.unit == "bytes") return QString::fromStdString(formatBytes(static_cast<std::int64_t>(m.value)));
  // 4 significant digits, but never an exponent for a large value ("51234 GFLOP/s", not 5.123e+04).
  const QString value = std::abs(m.value) >= 1000 ? QString::number(m.value, 'f', 0) : QString::number(m.value, 'g', 4);
  return QString("%1 %2").arg(value, QString::fromStdString(m.unit));
}

// The rows a finished run adds to the Measurements table: where it ran and how long training took.
QVector<std::pair<QString, QString>> summaryRows(const lab::RunSummary& d) {
  QVector<std::pair<QString, QString>> rows{{"device", QString::fromStdString(d.device)}};
  if (d.steps > 0) rows.append({"training time", QString("%1 s for %2 steps").arg(d.seconds, 0, 'g', 3).arg(d.steps)});
  if (d.test_accuracy) rows.append({"test accuracy", QString::number(*d.test_accuracy, 'f', 4)});
  return rows;
}

void addMarker(QCustomPlot* p, double x, const QString& text, const QColor& colour) {
  auto* line = new QCPItemStraightLine(p);
  line->point1->setCoords(x, 0);
  line->point2->setCoords(x, 1);
  line->setPen(QPen(colour, 1, Qt::DashLine));
  auto* label = new QCPItemText(p);
  label->position->setType(QCPItemPosition::ptPlotCoords);
  label->position->setTypeY(QCPItemPosition::ptAxisRectRatio);
  label->position->setCoords(x, 0.05);
  label->setPositionAlignment(Qt::AlignLeft | Qt::AlignTop);
  label->setText(text);
  label->setColor(colour);
}

}  // namespace

PlotPanel::PlotPanel(QWidget* parent) : QWidget(parent) {
  auto* layout = new QVBoxLayout(this);
  layout->setContentsMargins(0, 0, 0, 0);
  tabs_ = new QTabWidget(this);
  loss_ = makePlot("step", "loss");
  memory_ = makePlot("time (s)", "memory (MiB)");
  throughput_ = makePlot("step", "samples / s");
  const std::pair<QCustomPlot*, QString> pages[] = {{loss_, "Loss"}, {memory_, "Memory"}, {throughput_, "Throughput"}};
  for (int i = 0; i < 3; ++i) {
    auto* page = new QWidget;
    auto* v = new QVBoxLayout(page);
    v->addWidget(pages[i].first, 1);
    addExportButtons(page, static_cast<Plot>(i));
    tabs_->addTab(page, pages[i].second);
    styleFromPalette(pages[i].first);
  }
  table_ = new QTableWidget(0, 3);
  table_->setHorizontalHeaderLabels({"Run", "Measurement", "Value"});
  table_->setEditTriggers(QAbstractItemView::NoEditTriggers);
  // Long texts (a reference run's label, a measurement's name) wrap inside their column rather than
  // push the values out of sight.
  table_->setWordWrap(true);
  table_->verticalHeader()->setVisible(false);
  table_->verticalHeader()->setSectionResizeMode(QHeaderView::ResizeToContents);
  table_->horizontalHeader()->setSectionResizeMode(0, QHeaderView::Stretch);
  table_->horizontalHeader()->setSectionResizeMode(1, QHeaderView::Stretch);
  table_->horizontalHeader()->setSectionResizeMode(2, QHeaderView::ResizeToContents);
  tabs_->addTab(table_, "Measurements");
  layout->addWidget(tabs_, 1);
  connect(tabs_, &QTabWidget::currentChanged, this, [this] {
    if (QCustomPlot* p = shownPlot(); p && stale_.contains(p)) markDirty();
  });
  for (QCustomPlot* p : {loss_, memory_, throughput_}) {
    p->setMouseTracking(true);
    connect(p, &QCustomPlot::mouseMove, this, [this, p](QMouseEvent* event) {
      const Plot which = p == loss_ ? Plot::Loss : p == memory_ ? Plot::Memory : Plot::Throughput;
      const QString text = toolTipAt(which, event->position());
      if (text.isEmpty()) QToolTip::hideText();
      else QToolTip::showText(event->globalPosition().toPoint(), text, p);
    });
  }
  auto* options = new QHBoxLayout;
  overlay_ = new QCheckBox("Overlay runs (compare with earlier runs)", this);
  overlay_->setToolTip("Keep the curves of earlier runs to compare, e.g. batch 64 vs 512 or CPU vs GPU");
  options->addWidget(overlay_);
  reference_ = new QCheckBox("Compare with a real GPU", this);
  reference_->setVisible(false);
  connect(reference_, &QCheckBox::toggled, this, &PlotPanel::setShowReference);
  options->addWidget(reference_);
  options->addStretch();
  layout->addLayout(options);
  replot_.setInterval(33);  // ~30 Hz
  connect(&replot_, &QTimer::timeout, this, &PlotPanel::replotIfDirty);
  replot_.start();
}

void PlotPanel::styleFromPalette(QCustomPlot* p) {
  // Follow the system's light or dark palette.
  const QPalette pal = palette();
  p->setBackground(pal.color(QPalette::Base));
  for (QCPAxis* axis : {p->xAxis, p->yAxis}) {
    axis->setBasePen(QPen(pal.color(QPalette::Text)));
    axis->setTickPen(QPen(pal.color(QPalette::Text)));
    axis->setSubTickPen(QPen(pal.color(QPalette::Text)));
    axis->setTickLabelColor(pal.color(QPalette::Text));
    axis->setLabelColor(pal.color(QPalette::Text));
  }
  // A translucent legend: long entries (a reference run's label) must not hide the curves under them.
  QColor legendBackground = pal.color(QPalette::Base);
  legendBackground.setAlpha(180);
  p->legend->setBrush(legendBackground);
  p->legend->setTextColor(pal.color(QPalette::Text));
}

void PlotPanel::addExportButtons(QWidget* page, Plot which) {
  auto* row = new QHBoxLayout;
  row->addStretch();
  for (const QString& kind : {QString("PNG"), QString("PDF"), QString("CSV")}) {
    auto* b = new QPushButton("Export " + kind, page);
    connect(b, &QPushButton::clicked, this, [this, which, kind] {
      const QString filter = kind + " (*." + kind.toLower() + ")";
      QString path = askPath_ ? askPath_(filter) : QFileDialog::getSaveFileName(this, "Export plot", QString(), filter);
      if (path.isEmpty()) return;
      // A name typed without the extension gets it (the dialog does not add it everywhere).
      const QString ext = kind.toLower();
      if (QFileInfo(path).suffix().compare(ext, Qt::CaseInsensitive) != 0) path += "." + ext;
      const bool ok = kind == "PNG" ? exportPng(which, path) : kind == "PDF" ? exportPdf(which, path) : exportCsv(which, path);
      const QString shown = QDir::toNativeSeparators(QFileInfo(path).absoluteFilePath());
      const QString name = tabs_->tabText(static_cast<int>(which)).toLower();
      emit statusMessage(ok ? QString("Exported the %1 plot (%2) to %3").arg(name, kind, shown)
                            : QString("Could not export the %1 plot to %2").arg(name, shown));
    });
    row->addWidget(b);
  }
  static_cast<QVBoxLayout*>(page->layout())->addLayout(row);
}

QCustomPlot* PlotPanel::plot(Plot which) const {
  switch (which) {
    case Plot::Loss: return loss_;
    case Plot::Memory: return memory_;
    case Plot::Throughput: return throughput_;
  }
  return loss_;
}

QCustomPlot* PlotPanel::shownPlot() const {
  const int i = tabs_->currentIndex();
  return i >= 0 && i < 3 ? plot(static_cast<Plot>(i)) : nullptr;
}

void PlotPanel::setOverlay(bool overlay) { overlay_->setChecked(overlay); }

void PlotPanel::setReference(const course::ReferenceRuns* refs, int index) {
  removeReferenceGraphs();
  ref_.reset();
  refLabel_.clear();
  refDetails_.clear();
  reference_->setText("Compare with a real GPU");
  if (refs && !refs->ok()) {
    // Shipped data that does not load is a bug to see, not to hide.
    reference_->setText("Compare with a real GPU (the recording cannot be read)");
    reference_->setToolTip(refs->error);
    reference_->setEnabled(false);
    reference_->setVisible(true);
  } else if (const course::ReferenceRun* run = refs ? refs->run(index) : nullptr) {
    ref_ = *run;
    refLabel_ = refs->label();
    refDetails_ = refs->details();
    reference_->setToolTip(QString("Adds the same run recorded on a real GPU, dashed and grey:\n%1\n%2\nrun %3: %4")
                               .arg(refLabel_, refDetails_).arg(run->index).arg(run->title));
    reference_->setEnabled(true);
    reference_->setVisible(true);
  } else {
    reference_->setVisible(false);
  }
  if (ref_ && reference_->isChecked()) addReferenceGraphs();
  rebuildTable();
  markDirty();
}

bool PlotPanel::referenceOffered() const { return !reference_->isHidden() && reference_->isEnabled(); }

void PlotPanel::setShowReference(bool show) {
  if (reference_->isChecked() != show) {
    reference_->setChecked(show);  // comes back here through toggled()
    return;
  }
  removeReferenceGraphs();
  if (show && ref_) {
    addReferenceGraphs();
    // A run that only measures (no curves): its numbers are what there is to compare.
    if (ref_->steps.isEmpty() && !ref_->measurements.isEmpty()) tabs_->setCurrentWidget(table_);
  }
  rebuildTable();
  markDirty();
}

void PlotPanel::addReferenceGraphs() {
  if (!ref_) return;
  const QString suffix = " — " + refLabel_;
  const QColor grey(120, 120, 120), light(165, 165, 165);
  if (!ref_->steps.isEmpty()) {
    QCPGraph* train = addReferenceGraph(loss_, "train loss" + suffix, grey, Qt::DashLine);
    QCPGraph* allocated = addReferenceGraph(memory_, "allocated" + suffix, grey, Qt::DashLine);
    QCPGraph* reserved = addReferenceGraph(memory_, "reserved" + suffix, light, Qt::DashDotLine);
    QCPGraph* throughput = addReferenceGraph(throughput_, "samples/s" + suffix, grey, Qt::DashLine);
    // Memory against the recording's own clock, like the learner's steps (seconds since the start).
    for (const lab::StepMetrics& s : ref_->steps) {
      train->addData(static_cast<double>(s.step), s.loss);
      throughput->addData(static_cast<double>(s.step), s.samples_per_s);
      allocated->addData(s.elapsed_s, s.allocated_bytes / kMiB);
      reserved->addData(s.elapsed_s, s.reserved_bytes / kMiB);
    }
    refGraphs_ << train << allocated << reserved << throughput;
  }
  if (!ref_->epochs.isEmpty()) {
    QCPGraph* eval = addReferenceGraph(loss_, "eval loss" + suffix, grey, Qt::DashLine, true);
    for (const lab::EpochMetrics& e : ref_->epochs) eval->addData(static_cast<double>(e.step), e.eval_loss);
    refGraphs_ << eval;
  }
  // The recording's "memory" events carry a step but no time, so they have no place on the memory
  // plot's time axis; runs that report steps (the train lab) draw memory from those above.
}

void PlotPanel::removeReferenceGraphs() {
  for (QCPGraph* g : refGraphs_) g->parentPlot()->removeGraph(g);
  refGraphs_.clear();
}

void PlotPanel::rebuildTable() {
  QVector<TableRow> rows = rows_;
  if (ref_ && reference_->isChecked() && !reference_->isHidden()) {
    for (const lab::Measurement& m : ref_->measurements) rows.append({refLabel_, QString::fromStdString(m.name), formatMeasurement(m), true});
    for (const auto& [name, value] : summaryRows(ref_->done)) rows.append({refLabel_, name, value, true});
  }
  // Rows of the same measurement side by side (the learner's first), in order of first appearance.
  QStringList order;
  for (const TableRow& row : rows)
    if (!order.contains(row.name)) order << row.name;
  std::stable_sort(rows.begin(), rows.end(), [&](const TableRow& a, const TableRow& b) { return order.indexOf(a.name) < order.indexOf(b.name); });
  table_->setRowCount(static_cast<int>(rows.size()));
  for (int r = 0; r < rows.size(); ++r) {
    const TableRow& row = rows[r];
    const QString cells[] = {row.run, row.name, row.value};
    for (int c = 0; c < 3; ++c) {
      auto* item = new QTableWidgetItem(cells[c]);
      if (row.reference) {
        item->setForeground(QColor(120, 120, 120));
        QFont f = item->font();
        f.setItalic(true);
        item->setFont(f);
        item->setToolTip(refLabel_ + "\n" + refDetails_);
      } else {
        item->setToolTip(row.run);
      }
      table_->setItem(r, c, item);
    }
  }
}

QString PlotPanel::toolTipAt(Plot which, const QPointF& pos) const {
  QCustomPlot* p = plot(which);
  QCPGraph* g = qobject_cast<QCPGraph*>(p->plottableAt(pos, false));
  if (!g || g->dataCount() == 0) return {};
  // The data point nearest the cursor along x.
  const double x = g->keyAxis()->pixelToCoord(pos.x());
  auto it = g->data()->findBegin(x, true);
  if (it == g->data()->constEnd()) --it;
  if (auto next = it + 1; next != g->data()->constEnd() && std::abs(next->key - x) < std::abs(it->key - x)) it = next;
  QString text = QString("%1\n%2 = %3, %4 = %5").arg(g->name(), p->xAxis->label()).arg(it->key, 0, 'g', 6).arg(p->yAxis->label()).arg(it->value, 0, 'g', 6);
  if (refGraphs_.contains(g)) text += "\n" + refDetails_;
  return text;
}

void PlotPanel::beginRun(const QString& label) {
  removeReferenceGraphs();
  if (!overlay_->isChecked()) {
    for (QCustomPlot* p : {loss_, memory_, throughput_}) {
      p->clearGraphs();
      p->clearItems();
    }
    runCount_ = 0;
    rows_.clear();
  }
  ++runCount_;
  const QString suffix = runCount_ > 1 || overlay_->isChecked() ? " — " + label : QString();
  currentRunName_ = "your machine" + suffix;
  current_.train = addGraph(loss_, "train loss" + suffix, runColour(runCount_, 0));
  current_.eval = addGraph(loss_, "eval loss" + suffix, runColour(runCount_, 1), true);
  current_.allocated = addGraph(memory_, "allocated" + suffix, runColour(runCount_, 0));
  current_.reserved = addGraph(memory_, "reserved" + suffix, runColour(runCount_, 1));
  current_.driver = addGraph(memory_, "driver-reported (nvidia-smi)" + suffix, runColour(runCount_, 2));
  current_.throughput = addGraph(throughput_, "samples/s" + suffix, runColour(runCount_, 0));
  timeOrigin_ = -1;
  if (reference_->isChecked()) addReferenceGraphs();
  rebuildTable();
  markDirty();
}

void PlotPanel::clearRuns() {
  removeReferenceGraphs();
  for (QCustomPlot* p : {loss_, memory_, throughput_}) {
    p->clearGraphs();
    p->clearItems();
  }
  current_ = {};
  runCount_ = 0;
  rows_.clear();
  currentRunName_ = "your machine";
  timeOrigin_ = -1;
  if (reference_->isChecked()) addReferenceGraphs();  // the reference follows its checkbox
  rebuildTable();
  markDirty();
}

double PlotPanel::runSeconds(double absolute) {
  if (timeOrigin_ < 0) timeOrigin_ = absolute;
  return absolute - timeOrigin_;
}

void PlotPanel::addBatch(const MetricBatch& b) {
  if (!current_.train) beginRun("run");
  for (const auto& s : b.steps) {
    current_.train->addData(static_cast<double>(s.step), s.loss);
    current_.throughput->addData(static_cast<double>(s.step), s.samples_per_s);
    // The train lab reports time since the run started.
    current_.allocated->addData(s.elapsed_s, s.allocated_bytes / kMiB);
    current_.reserved->addData(s.elapsed_s, s.reserved_bytes / kMiB);
    if (s.driver_used_bytes) current_.driver->addData(s.elapsed_s, *s.driver_used_bytes / kMiB);
  }
  for (const auto& e : b.epochs) current_.eval->addData(static_cast<double>(e.step), e.eval_loss);
  for (const auto& m : b.memory) {
    const double t = runSeconds(m.time_s);
    current_.allocated->addData(t, m.allocated_bytes / kMiB);
    current_.reserved->addData(t, m.reserved_bytes / kMiB);
  }
  const double now = current_.allocated->data()->isEmpty() ? 0.0 : (current_.allocated->data()->constEnd() - 1)->key;
  for (const auto& o : b.ooms) addMarker(memory_, now, QString("OOM (batch %1)").arg(o.batch_size), QColor(214, 39, 40));
  for (const auto& r : b.reports) addMarker(memory_, now, QString("empty_cache(): -%1 MiB").arg(r.released_bytes / kMiB, 0, 'f', 1), QColor(44, 160, 44));
  for (const auto& m : b.measurements) rows_.append({currentRunName_, QString::fromStdString(m.name), formatMeasurement(m)});
  if (b.done)
    for (const auto& [name, value] : summaryRows(*b.done)) rows_.append({currentRunName_, name, value});
  if (!b.measurements.isEmpty() || b.done) rebuildTable();
  for (const auto& m : b.measurements) {
    if (m.name != "device capacity") continue;
    auto* line = new QCPItemStraightLine(memory_);
    line->point1->setCoords(0, m.value / kMiB);
    line->point2->setCoords(1, m.value / kMiB);
    line->setPen(QPen(palette().color(QPalette::Text), 1, Qt::DotLine));
    auto* label = new QCPItemText(memory_);
    label->position->setCoords(0, m.value / kMiB);
    label->setPositionAlignment(Qt::AlignLeft | Qt::AlignBottom);
    label->setText("device capacity");
    label->setColor(palette().color(QPalette::Text));
  }
  markDirty();
}

void PlotPanel::replotIfDirty() {
  // Only the plot on screen is drawn; the others catch up when their tab is shown.
  if (!dirty_) return;
  dirty_ = false;
  for (QCustomPlot* p : {loss_, memory_, throughput_}) stale_.insert(p);
  QCustomPlot* shown = shownPlot();
  if (!shown) return;  // the Measurements tab: the plots catch up when shown
  shown->rescaleAxes(true);
  if (shown == memory_) shown->yAxis->setRangeLower(0);
  shown->replot(QCustomPlot::rpQueuedReplot);
  stale_.remove(shown);
}

int PlotPanel::pointCount(Plot which) const {
  switch (which) {
    case Plot::Loss: return current_.train ? current_.train->dataCount() : 0;
    case Plot::Memory: return current_.allocated ? current_.allocated->dataCount() : 0;
    case Plot::Throughput: return current_.throughput ? current_.throughput->dataCount() : 0;
  }
  return 0;
}

bool PlotPanel::exportPng(Plot which, const QString& path) const {
  fitAxes(which);
  return plot(which)->savePng(path, 1200, 700);
}
bool PlotPanel::exportPdf(Plot which, const QString& path) const {
  fitAxes(which);
  return plot(which)->savePdf(path, 1200, 700);
}

void PlotPanel::fitAxes(Plot which) const {
  QCustomPlot* p = plot(which);
  if (!stale_.contains(p)) return;  // the learner's zoom stays as it is
  p->rescaleAxes(true);
  if (p == memory_) p->yAxis->setRangeLower(0);
}

bool PlotPanel::exportCsv(Plot which, const QString& path) const {
  QFile f(path);
  if (!f.open(QIODevice::WriteOnly | QIODevice::Text)) return false;
  QTextStream out(&f);
  QCustomPlot* p = plot(which);
  out << "series," << p->xAxis->label() << "," << p->yAxis->label() << "\n";
  for (int g = 0; g < p->graphCount(); ++g) {
    QCPGraph* graph = p->graph(g);
    QString name = graph->name();
    name.replace('"', "'");
    for (auto it = graph->data()->constBegin(); it != graph->data()->constEnd(); ++it) {
      out << '"' << name << "\"," << it->key << "," << it->value << "\n";
    }
  }
  return true;
}

}  // namespace gpulab::app
