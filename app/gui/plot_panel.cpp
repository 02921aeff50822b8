#include "app/gui/plot_panel.h"

#include <QCheckBox>
#include <QFile>
#include <QFileDialog>
#include <QHBoxLayout>
#include <QPushButton>
#include <QTextStream>
#include <QVBoxLayout>
#include <qcustomplot.h>

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
  p->setInteractions(QCP::iRangeDrag | QCP::iRangeZoom | QCP::iSelectPlottables);
  // Live curves grow to thousands of points: thin, non-antialiased lines keep a replot to a few
  // milliseconds, so the GUI thread stays responsive while a run streams.
  p->setNotAntialiasedElements(QCP::aePlottables);
  p->setMinimumHeight(160);
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
  layout->addWidget(tabs_, 1);
  connect(tabs_, &QTabWidget::currentChanged, this, [this] {
    if (stale_.contains(plot(static_cast<Plot>(tabs_->currentIndex())))) markDirty();
  });
  overlay_ = new QCheckBox("Overlay runs (compare with earlier runs)", this);
  overlay_->setToolTip("Keep the curves of earlier runs to compare, e.g. batch 64 vs 512 or CPU vs GPU");
  layout->addWidget(overlay_);
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
  p->legend->setBrush(pal.color(QPalette::Base));
  p->legend->setTextColor(pal.color(QPalette::Text));
}

void PlotPanel::addExportButtons(QWidget* page, Plot which) {
  auto* row = new QHBoxLayout;
  row->addStretch();
  for (const QString& kind : {QString("PNG"), QString("PDF"), QString("CSV")}) {
    auto* b = new QPushButton("Export " + kind, page);
    connect(b, &QPushButton::clicked, this, [this, which, kind] {
      const QString path = QFileDialog::getSaveFileName(this, "Export plot", QString(), kind + " (*." + kind.toLower() + ")");
      if (path.isEmpty()) return;
      if (kind == "PNG") exportPng(which, path);
      else if (kind == "PDF") exportPdf(which, path);
      else exportCsv(which, path);
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

void PlotPanel::setOverlay(bool overlay) { overlay_->setChecked(overlay); }

void PlotPanel::beginRun(const QString& label) {
  if (!overlay_->isChecked()) {
    for (QCustomPlot* p : {loss_, memory_, throughput_}) {
      p->clearGraphs();
      p->clearItems();
    }
    runCount_ = 0;
  }
  ++runCount_;
  const QString suffix = runCount_ > 1 || overlay_->isChecked() ? " — " + label : QString();
  current_.train = addGraph(loss_, "train loss" + suffix, runColour(runCount_, 0));
  current_.eval = addGraph(loss_, "eval loss" + suffix, runColour(runCount_, 1), true);
  current_.allocated = addGraph(memory_, "allocated" + suffix, runColour(runCount_, 0));
  current_.reserved = addGraph(memory_, "reserved" + suffix, runColour(runCount_, 1));
  current_.driver = addGraph(memory_, "driver-reported (nvidia-smi)" + suffix, runColour(runCount_, 2));
  current_.throughput = addGraph(throughput_, "samples/s" + suffix, runColour(runCount_, 0));
  timeOrigin_ = -1;
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
  QCustomPlot* shown = plot(static_cast<Plot>(tabs_->currentIndex()));
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
