#include "app/gui/view_widgets.h"

#include <QComboBox>
#include <QFile>
#include <QHBoxLayout>
#include <QHeaderView>
#include <QLabel>
#include <QPainter>
#include <QFontMetricsF>
#include <QPdfWriter>
#include <QScrollBar>
#include <QTableWidget>
#include <QTextStream>
#include <QToolTip>
#include <QVBoxLayout>
#include <algorithm>
#include <array>
#include <cmath>
#include <limits>
#include <numeric>
#include <set>
#include <qcustomplot.h>

#include "app/gui/theme.h"
#include "app/gui/units.h"

namespace gpulab::app {

namespace {

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();
// The run a plottable or item belongs to, kept on it as a dynamic property (tooltips).
constexpr const char* kRunProperty = "gpulabRun";
constexpr const char* kOverlayLayer = "over stack";  // QCustomPlot has its own "overlay"
constexpr const char* kLegendTextProperty = "gpulabLegendText";  // a plottable's text in the legend
constexpr int kMaxLegendTextWidth = 260;  // pixels: a longer legend text is elided

// A legend entry that shows the plottable's short legend text (kLegendTextProperty, else its
// name), elided to kMaxLegendTextWidth. QCPPlottableLegendItem draws (and measures) the plottable's
// name, and the plottable's legend icon is drawn only from there: the short text stands in for the
// name while it does.
class ShortLegendItem final : public QCPPlottableLegendItem {
 public:
  using QCPPlottableLegendItem::QCPPlottableLegendItem;
  QString text() const {
    const QVariant text = mPlottable->property(kLegendTextProperty);
    return QFontMetrics(getFont()).elidedText(text.isValid() ? text.toString() : mPlottable->name(), Qt::ElideMiddle, kMaxLegendTextWidth);
  }

 protected:
  void draw(QCPPainter* painter) override {
    const NameAsText swap(*this);
    QCPPlottableLegendItem::draw(painter);
  }
  QSize minimumOuterSizeHint() const override {
    const NameAsText swap(*this);
    return QCPPlottableLegendItem::minimumOuterSizeHint();
  }

 private:
  struct NameAsText {
    explicit NameAsText(const ShortLegendItem& item) : plottable(item.mPlottable), name(plottable->name()) { plottable->setName(item.text()); }
    ~NameAsText() { plottable->setName(name); }
    QCPAbstractPlottable* plottable;
    QString name;
  };
};

// Distinct colours (matplotlib's tab10 order), cycled for series or runs; each made to keep 3:1 against
// the plot's background (theme.h), so that on a dark palette no curve fades into it (tab10's brown did).
QColor paletteColour(int i, const QPalette& palette) {
  static constexpr QRgb kPalette[] = {0x1f77b4, 0xff7f0e, 0x2ca02c, 0xd62728, 0x9467bd, 0x8c564b, 0xe377c2, 0x17becf};
  constexpr int n = static_cast<int>(std::size(kPalette));
  return theme::readable(QColor(kPalette[((i % n) + n) % n]), palette, theme::kLineContrast);
}
const Qt::PenStyle kDashes[] = {Qt::SolidLine, Qt::DashLine, Qt::DotLine, Qt::DashDotLine, Qt::DashDotDotLine};
Qt::PenStyle dash(int i) { return kDashes[((i % 5) + 5) % 5]; }
// Reference curves are grey, never a colour a learner's run could have.
QColor grey(int i, const QPalette& palette) {
  return theme::readable(i % 2 ? QColor(165, 165, 165) : QColor(120, 120, 120), palette, theme::kLineContrast);
}

// The pen of series `index` of a run (see the rules in view_widgets.h).
QPen seriesPen(const RunStyle& run, int index, lab::SeriesStyle style, const QPalette& palette) {
  if (run.reference) return QPen(grey(index, palette), 1.5, dash(1 + index % 4));
  const bool dashed = style == lab::SeriesStyle::Dashed;
  // Cosmetic 1-pixel pens: the fast path of the raster engine, so a replot of long live curves
  // stays a few milliseconds.
  if (run.several) return QPen(paletteColour(run.colour, palette), 0, dashed ? Qt::DashLine : dash(index));
  return QPen(paletteColour(index, palette), 0, dashed ? Qt::DashLine : Qt::SolidLine);
}

QColor markerColour(lab::MarkerKind kind, const QPalette& palette) {
  switch (kind) {
    case lab::MarkerKind::OutOfMemory: return theme::readable(QColor(214, 39, 40), palette, theme::kLineContrast);
    case lab::MarkerKind::EmptyCache: return theme::readable(QColor(44, 160, 44), palette, theme::kLineContrast);
    case lab::MarkerKind::Skipped: return theme::readable(QColor(230, 85, 13), palette, theme::kLineContrast);
    case lab::MarkerKind::Event: break;
  }
  return palette.color(QPalette::Text);
}

// Byte ticks at round numbers of B, KiB, MiB or GiB, whichever fits the range: "512 MiB", "1.5 GiB".
class BytesTicker final : public QCPAxisTicker {
 protected:
  double getTickStep(const QCPRange& range) override {
    const double size = std::max(std::abs(range.lower), std::abs(range.upper));
    unit_ = 1;
    name_ = "B";
    const std::pair<double, const char*> units[] = {{1024.0 * 1024 * 1024, "GiB"}, {1024.0 * 1024, "MiB"}, {1024.0, "KiB"}};
    for (const auto& [unit, name] : units) {
      if (size >= unit) {
        unit_ = unit;
        name_ = name;
        break;
      }
    }
    return QCPAxisTicker::getTickStep(QCPRange(range.lower / unit_, range.upper / unit_)) * unit_;
  }
  QString getTickLabel(double tick, const QLocale& locale, QChar formatChar, int precision) override {
    return QCPAxisTicker::getTickLabel(tick / unit_, locale, formatChar, precision) + " " + name_;
  }

 private:
  double unit_ = 1;
  QString name_ = "B";
};

// Ticks at powers of 2 for counts and sizes (a sweep over sizes 1, 2, 4, ... reads best that way), each
// labelled in full ("1", "64", "4096") or in bytes ("16 KiB", "4 MiB") -- never "1e+03"; at powers of 10
// for measured quantities with a unit (times, speeds, ratios), where 2^-10 ms would read "0.0009766 ms"
// (issue 27 §4).
class LogTicker final : public QCPAxisTickerLog {
 public:
  explicit LogTicker(bool bytes, int base) : bytes_(bytes) {
    setLogBase(base);
    setSubTickCount(base == 10 ? 8 : 0);
  }
  bool bytes() const { return bytes_; }
  int base() const { return static_cast<int>(logBase()); }

 protected:
  QString getTickLabel(double tick, const QLocale&, QChar, int) override {
    return formatQuantity(tick, bytes_ ? "bytes" : "");
  }

 private:
  bool bytes_;
};

void configureAxis(QCPAxis* axis, const lab::Axis& spec) {
  axis->setLabel(axisTitle(spec));
  const bool bytes = spec.unit == "bytes";
  if (spec.logarithmic) {
    const int base = spec.unit.empty() || bytes ? 2 : 10;
    const auto log = axis->ticker().dynamicCast<LogTicker>();
    if (!log || log->bytes() != bytes || log->base() != base) axis->setTicker(QSharedPointer<QCPAxisTicker>(new LogTicker(bytes, base)));
    axis->setScaleType(QCPAxis::stLogarithmic);
    return;
  }
  axis->setScaleType(QCPAxis::stLinear);
  if (bytes != static_cast<bool>(axis->ticker().dynamicCast<BytesTicker>()) || axis->ticker().dynamicCast<LogTicker>())
    axis->setTicker(bytes ? QSharedPointer<QCPAxisTicker>(new BytesTicker) : QSharedPointer<QCPAxisTicker>(new QCPAxisTicker));
}

// A legend entry that stands for no one plottable: a grey dashed line and its text -- a recording's
// curves, all drawn grey and dashed, in one entry. Not a graph, so it adds none to the plot.
// A legend entry that stands for several plottables: a sample of a line (or a filled box) and a
// text. It keys what the plottables share -- a recording's grey dashes, a series' line style or a run's
// colour when several runs are overlaid -- so that the legend does not list every series of every run.
class KeyLegendItem final : public QCPAbstractLegendItem {
 public:
  KeyLegendItem(QCPLegend* legend, QString text) : QCPAbstractLegendItem(legend), text_(std::move(text)) {}
  const QString& text() const { return text_; }
  void setText(const QString& text) { text_ = text; }
  // The sample: a line in `pen`, a box filled with `brush`, or the points' marker (`scatter`).
  void setSample(const QPen& pen, const QBrush& brush = Qt::NoBrush, const QCPScatterStyle& scatter = QCPScatterStyle()) {
    pen_ = pen;
    brush_ = brush;
    scatter_ = scatter;
  }

 protected:
  void draw(QCPPainter* painter) override {
    painter->setFont(mParentLegend->font());
    painter->setPen(QPen(mParentLegend->textColor()));
    const QSize icon = mParentLegend->iconSize();
    const QRect textRect = painter->fontMetrics().boundingRect(0, 0, 0, icon.height(), Qt::TextDontClip, text_);
    const int height = std::max(textRect.height(), icon.height());
    painter->drawText(mRect.x() + icon.width() + mParentLegend->iconTextPadding(), mRect.y(), textRect.width(), height, Qt::TextDontClip, text_);
    painter->setPen(pen_);
    if (scatter_.shape() != QCPScatterStyle::ssNone) {
      scatter_.applyTo(painter, pen_);
      scatter_.drawShape(painter, QPointF(mRect.x() + icon.width() / 2.0, mRect.y() + height / 2.0));
      return;
    }
    if (brush_.style() != Qt::NoBrush) {
      painter->setBrush(brush_);
      painter->drawRect(QRectF(mRect.x(), mRect.y() + (height - icon.height()) / 2.0, icon.width(), icon.height()));
      return;
    }
    const double y = mRect.y() + height / 2.0;
    painter->drawLine(QLineF(mRect.x(), y, mRect.x() + icon.width(), y));
  }
  QSize minimumOuterSizeHint() const override {
    const QSize icon = mParentLegend->iconSize();
    const QRect textRect = QFontMetrics(mParentLegend->font()).boundingRect(0, 0, 0, icon.height(), Qt::TextDontClip, text_);
    return QSize(icon.width() + mParentLegend->iconTextPadding() + textRect.width() + mMargins.left() + mMargins.right(),
                 std::max(textRect.height(), icon.height()) + mMargins.top() + mMargins.bottom());
  }

 private:
  QString text_;
  QPen pen_{QColor(140, 140, 140), 1.5, Qt::DashLine};
  QBrush brush_{Qt::NoBrush};
  QCPScatterStyle scatter_;
};

// The legend's entries: a legend in columns has empty cells, which QCPLegend::itemCount() counts.
int legendItemCount(QCPLegend* legend) {
  int n = 0;
  for (int i = 0; i < legend->itemCount(); ++i) n += legend->item(i) != nullptr;
  return n;
}

void syncLegend(QCPAbstractPlottable* p, bool shown) {
  QCPLegend* legend = p->parentPlot()->legend;
  if (shown && !legend->hasItemWithPlottable(p)) legend->addItem(new ShortLegendItem(legend, p));
  else if (!shown) p->removeFromLegend();
}

// The x of a point or marker on axis `axis` (NaN where it has none).
double xOn(const std::vector<double>& x, int axis) { return axis < static_cast<int>(x.size()) ? x[axis] : kNaN; }

}  // namespace

QString runTitle(const RunStyle& run) {
  // A reference compactly ("reference (NVIDIA H100)"): its whole label, with the date and "not your
  // machine", took a table's width and pushed the learner's own numbers out of sight (issue 48 §4.3);
  // the tooltips and the CSV exports keep it whole.
  if (run.reference) return run.compactName();
  return run.name.isEmpty() ? QString("your machine") : "your machine — " + run.name;
}

// ---- ViewWidget: what every kind shares (title, x-axis box, note, markers, levels, exports) ------

struct ViewWidget::MarkerItem {
  int run;
  lab::Marker marker;
  QCPItemStraightLine* line;
  QCPItemText* text;
};

struct ViewWidget::LevelItem {
  int run;
  lab::Level level;
  QCPItemStraightLine* line;
  QCPItemText* text;
};

ViewWidget::ViewWidget(const lab::ViewSpec& spec, QWidget* parent) : QWidget(parent), spec_(spec) {
  auto* v = new QVBoxLayout(this);
  v->setContentsMargins(0, 0, 0, 0);
  xRow_ = new QWidget(this);
  auto* h = new QHBoxLayout(xRow_);
  h->setContentsMargins(0, 0, 0, 0);
  h->addWidget(new QLabel("x:", xRow_));
  xBox_ = new QComboBox(xRow_);
  xBox_->setToolTip("The x axis of this plot: every run is drawn again against it");
  h->addWidget(xBox_);
  h->addStretch();
  v->addWidget(xRow_);
  note_ = new QLabel(this);
  note_->setWordWrap(true);
  note_->setTextFormat(Qt::PlainText);
  v->addWidget(note_);
  connect(xBox_, &QComboBox::currentIndexChanged, this, [this](int i) {
    if (i >= 0) setXAxis(i);
  });
}

ViewWidget::~ViewWidget() = default;

void ViewWidget::setView(QWidget* view) {
  static_cast<QVBoxLayout*>(layout())->insertWidget(1, view, 1);
  if (auto* p = qobject_cast<QCustomPlot*>(view)) {
    p->setMouseTracking(true);
    connect(p, &QCustomPlot::mouseMove, this, [this, p](QMouseEvent* event) {
      const QString text = toolTipAt(event->position());
      if (text.isEmpty()) QToolTip::hideText();
      else QToolTip::showText(event->globalPosition().toPoint(), text, p);
    });
  }
}

void ViewWidget::declare(int run, const lab::ViewSpec& spec) {
  runSpecs_[run] = spec;
  // A reference run's declaration (recorded on a GPU) names its own series, but the view's note, title
  // and axes stay those of the learner's run when one has declared it: they describe the learner's run
  // (issue 27 §4: the recording's NVML note appeared under the learner's CPU run).
  const bool learners = std::any_of(runSpecs_.begin(), runSpecs_.end(), [&](const auto& entry) {
    return entry.first != run && !style(entry.first).reference;
  });
  if (style(run).reference && learners) {
    restyle();
    styleItems();
    markDirty();
    return;
  }
  spec_ = spec;
  specChanged();
  restyle();
  styleItems();
  markDirty();
}

void ViewWidget::specChanged() {
  {
    const QSignalBlocker block(xBox_);
    xBox_->clear();
    for (const lab::Axis& a : spec_.x) xBox_->addItem(axisTitle(a));
    xAxis_ = std::clamp(xAxis_, 0, std::max(0, static_cast<int>(spec_.x.size()) - 1));
    xBox_->setCurrentIndex(xAxis_);
  }
  xRow_->setVisible(spec_.x.size() > 1);
  note_->setText(QString::fromStdString(spec_.note));
  note_->setVisible(!spec_.note.empty());
  setTitleText(title());
  xBox_->setAccessibleName("x axis of " + title());
  nameForScreenReaders();
}

void ViewWidget::add(int run, const lab::Update& update) {
  if (const auto* m = std::get_if<lab::Marker>(&update)) addMarker(run, *m);
  else if (const auto* l = std::get_if<lab::Level>(&update)) addLevel(run, *l);
  else if (addData(run, update)) ++counts_[run];
  markDirty();
}

void ViewWidget::removeRun(int run) {
  QCustomPlot* p = plot();
  auto drop = [&](auto& items) {
    for (auto it = items.begin(); it != items.end();) {
      if (it->run != run) {
        ++it;
        continue;
      }
      p->removeItem(it->line);
      p->removeItem(it->text);
      it = items.erase(it);
    }
  };
  if (p) {
    drop(markers_);
    drop(levels_);
  }
  dropRun(run);
  runSpecs_.erase(run);
  counts_.erase(run);
  markDirty();
}

void ViewWidget::setRunStyles(const QVector<RunStyle>& styles) {
  styles_ = styles;
  restyle();
  styleItems();
  markDirty();
}

void ViewWidget::setDevice(const QString& label, bool emulated) {
  device_ = label;
  emulated_ = emulated;
  setTitleText(title());
}

QString ViewWidget::title() const {
  QString t = QString::fromStdString(spec_.title.empty() ? spec_.id : spec_.title);
  if (emulated_ && !device_.isEmpty()) t += " — " + device_;
  return t;
}

void ViewWidget::setTitleText(const QString& text) { applyTitle(text); }

void ViewWidget::refresh() {
  dirty_ = false;
  redraw();
  placeLevels();
  nameForScreenReaders();
}

QString ViewWidget::description() const {
  // A screen reader reads a description whole: the first lines, and how many more there are.
  constexpr int kShown = 6;
  QStringList lines = describe();
  if (lines.isEmpty()) return "Nothing measured yet";
  if (lines.size() > kShown) {
    const auto more = lines.size() - kShown;
    lines = lines.mid(0, kShown);
    lines << QString("and %1 more").arg(more);
  }
  return lines.join("; ");
}

void ViewWidget::nameForScreenReaders() {
  view()->setAccessibleName(title());
  view()->setAccessibleDescription(description());
}

// A level far above the data (a limit much higher than anything a run reaches) is not worth
// flattening the curves for: its label is pinned to the top of the plot, saying where it is.
void ViewWidget::placeLevels() {
  QCustomPlot* p = plot();
  if (!p) return;
  // On a logarithmic axis every level fits at little cost (a factor of ten is one decade): the range
  // takes them in. On a linear one a far level would squash the data, so its label is pinned instead.
  if (spec_.y.logarithmic) {
    QCPRange range = p->yAxis->range();
    for (const LevelItem& l : levels_) {
      if (l.level.y > 0) range.expand(l.level.y);
    }
    if (range.lower > 0) p->yAxis->setRange(range.lower / 1.2, range.upper * 1.2);
  }
  for (const LevelItem& l : levels_) {
    const bool above = l.level.y > p->yAxis->range().upper, below = l.level.y < p->yAxis->range().lower;
    const QString value = formatQuantity(l.level.y, spec_.y.unit);
    l.line->setVisible(!above && !below);
    l.text->position->setTypeY(above || below ? QCPItemPosition::ptAxisRectRatio : QCPItemPosition::ptPlotCoords);
    // A label goes above its line at the left, unless the line is so near the top that it would be cut
    // off there: then below it, at the right (the left top corner is where marker labels go).
    const bool nearTop = !above && !below && p->yAxis->coordToPixel(l.level.y) - p->axisRect()->top() < 2 * l.text->font().pointSize() + 4;
    l.text->position->setCoords(nearTop ? 0.99 : 0.01, above ? 0.0 : below ? 1.0 : l.level.y);
    l.text->setPositionAlignment((nearTop ? Qt::AlignRight : Qt::AlignLeft) | (above || nearTop ? Qt::AlignTop : Qt::AlignBottom));
    const QString label = QString::fromStdString(l.level.label);
    l.text->setText(above   ? QString("↑ %1: %2, above the plot").arg(label, value)
                    : below ? QString("↓ %1: %2, below the plot").arg(label, value)
                            : QString("%1 (%2)").arg(label, value));
  }
  p->replot(QCustomPlot::rpQueuedReplot);
}

int ViewWidget::pointCount(int run) const {
  auto it = counts_.find(run);
  return it == counts_.end() ? 0 : it->second;
}

int ViewWidget::markerCount() const { return static_cast<int>(markers_.size()); }
QString ViewWidget::noteText() const { return note_->isVisible() || !note_->text().isEmpty() ? note_->text() : QString(); }

QStringList ViewWidget::legendTexts() const {
  QStringList out;
  QCustomPlot* p = plot();
  for (int i = 0; p && i < p->legend->itemCount(); ++i)
    if (auto* item = dynamic_cast<ShortLegendItem*>(p->legend->item(i))) out << item->text();
    else if (auto* key = dynamic_cast<KeyLegendItem*>(p->legend->item(i))) out << key->text();
  return out;
}

QStringList ViewWidget::legendEntries() const {
  QStringList out;
  QCustomPlot* p = plot();
  if (!p) return out;
  for (int i = 0; i < p->legend->itemCount(); ++i)
    if (auto* item = qobject_cast<QCPPlottableLegendItem*>(p->legend->item(i))) out << item->plottable()->name();
  return out;
}

void ViewWidget::setXAxis(int index) {
  if (index < 0 || index >= static_cast<int>(spec_.x.size()) || index == xAxis_) return;
  xAxis_ = index;
  {
    const QSignalBlocker block(xBox_);
    xBox_->setCurrentIndex(index);
  }
  axisChanged();
  placeMarkers();
  markDirty();
}

const RunStyle& ViewWidget::style(int run) const {
  for (const RunStyle& s : styles_)
    if (s.run == run) return s;
  return lone_;
}

const lab::SeriesSpec* ViewWidget::series(int run, const std::string& id, int* index) const {
  auto find = [&](const lab::ViewSpec& spec) -> const lab::SeriesSpec* {
    for (std::size_t i = 0; i < spec.series.size(); ++i) {
      if (spec.series[i].id != id) continue;
      if (index) *index = static_cast<int>(i);
      return &spec.series[i];
    }
    return nullptr;
  };
  if (auto it = runSpecs_.find(run); it != runSpecs_.end())
    if (const lab::SeriesSpec* s = find(it->second)) return s;
  if (const lab::SeriesSpec* s = find(spec_)) return s;
  if (index) *index = static_cast<int>(spec_.series.size());
  return nullptr;
}

QString ViewWidget::legendName(int run, const std::string& seriesId) const {
  const lab::SeriesSpec* s = series(run, seriesId);
  const QString label = QString::fromStdString(s && !s->label.empty() ? s->label : seriesId);
  const QString name = style(run).name;
  return name.isEmpty() ? label : label + " — " + name;
}

QString ViewWidget::legendText(int run, const std::string& seriesId) const {
  const lab::SeriesSpec* s = series(run, seriesId);
  const QString label = QString::fromStdString(s && !s->label.empty() ? s->label : seriesId);
  const QString name = style(run).compactName();
  return name.isEmpty() ? label : label + " — " + name;
}

QString ViewWidget::toolTipAt(const QPointF& pos) const {
  QCustomPlot* p = plot();
  auto* g = p ? qobject_cast<QCPGraph*>(p->plottableAt(pos, false)) : nullptr;
  if (!g || g->dataCount() == 0) return {};
  // The data point nearest the cursor along x.
  const double x = g->keyAxis()->pixelToCoord(pos.x());
  auto it = g->data()->findBegin(x, true);
  if (it == g->data()->constEnd()) --it;
  if (auto next = it + 1; next != g->data()->constEnd() && std::abs(next->key - x) < std::abs(it->key - x)) it = next;
  double value = it->value;
  // A stacked layer: its own share, not the top of the stack.
  if (QCPGraph* below = g->channelFillGraph(); below && below->dataCount() > 0) {
    auto b = below->data()->findBegin(it->key, false);
    if (b != below->data()->constEnd() && b->key == it->key) value -= b->value;
  }
  const std::string xUnit = xAxis_ < static_cast<int>(spec_.x.size()) ? spec_.x[xAxis_].unit : std::string();
  QString text = QString("%1\n%2 = %3, %4 = %5")
                     .arg(g->name(), g->keyAxis()->label(), formatQuantity(it->key, xUnit), g->valueAxis()->label(), formatQuantity(value, spec_.y.unit));
  if (const QString details = style(g->property(kRunProperty).toInt()).details; !details.isEmpty()) text += "\n" + details;
  return text;
}

void ViewWidget::addMarker(int run, const lab::Marker& m) {
  QCustomPlot* p = plot();
  if (!p) return;
  auto* line = new QCPItemStraightLine(p);
  auto* text = new QCPItemText(p);
  text->position->setType(QCPItemPosition::ptPlotCoords);
  text->position->setTypeY(QCPItemPosition::ptAxisRectRatio);
  text->setPositionAlignment(Qt::AlignLeft | Qt::AlignTop);
  text->setText(QString::fromStdString(m.label));
  line->setProperty(kRunProperty, run);
  markers_.push_back({run, m, line, text});
  placeMarkers();
  styleItems();
}

void ViewWidget::addLevel(int run, const lab::Level& l) {
  QCustomPlot* p = plot();
  if (!p) return;
  auto* line = new QCPItemStraightLine(p);
  line->point1->setCoords(1, l.y);  // two points at positive x: a horizontal line on a logarithmic x axis too
  line->point2->setCoords(2, l.y);
  auto* text = new QCPItemText(p);
  text->position->setTypeX(QCPItemPosition::ptAxisRectRatio);
  text->position->setTypeY(QCPItemPosition::ptPlotCoords);
  text->position->setCoords(0.01, l.y);
  text->setPositionAlignment(Qt::AlignLeft | Qt::AlignBottom);
  levels_.push_back({run, l, line, text});
  placeLevels();
  styleItems();
}

void ViewWidget::placeMarkers() {
  for (std::size_t i = 0; i < markers_.size(); ++i) {
    const MarkerItem& m = markers_[i];
    const double x = xOn(m.marker.x, xAxis_);
    const bool shown = std::isfinite(x);
    m.line->setVisible(shown);
    m.text->setVisible(shown);
    if (!shown) continue;
    m.line->point1->setCoords(x, 0);
    m.line->point2->setCoords(x, 1);
    m.text->position->setCoords(x, 0.03 + 0.07 * static_cast<double>(i % 4));  // neighbours' labels apart
    // A label that would run past the plot's right edge goes to the line's left instead (issue 27 §4:
    // "crosso", "OOM at th..." were cut off).
    const QCPAxisRect* rect = plot()->axisRect();
    const double room = rect->right() - plot()->xAxis->coordToPixel(x);
    const bool left = room < QFontMetricsF(m.text->font()).horizontalAdvance(m.text->text()) + 8;
    m.text->setPositionAlignment((left ? Qt::AlignRight : Qt::AlignLeft) | Qt::AlignTop);
  }
}

void ViewWidget::fitMarkers() {
  QCustomPlot* p = plot();
  if (!p) return;
  QCPRange range = p->xAxis->range();
  bool grown = false;
  for (const MarkerItem& m : markers_) {
    const double x = xOn(m.marker.x, xAxis_);
    if (!std::isfinite(x) || (x >= range.lower && x <= range.upper)) continue;
    range.expand(x);
    grown = true;
  }
  // A marker at the edge would sit on the axis: a little room beyond it.
  if (grown) p->xAxis->setRange(range.lower, range.upper + 0.03 * range.size());
  placeMarkers();  // their labels' side follows the range
}

void ViewWidget::styleItems() {
  const QColor text = palette().color(QPalette::Text);
  for (const MarkerItem& m : markers_) {
    const QColor c = style(m.run).reference ? grey(0, palette()) : markerColour(m.marker.kind, palette());
    m.line->setPen(QPen(c, 1, Qt::DashLine));
    m.text->setColor(c);
  }
  for (const LevelItem& l : levels_) {
    const QColor c = style(l.run).reference ? grey(0, palette()) : text;
    l.line->setPen(QPen(c, 1, Qt::DashLine));
    l.text->setColor(c);
  }
}

bool ViewWidget::exportPng(const QString& path) {
  if (dirty_) refresh();
  if (QCustomPlot* p = plot()) return p->savePng(path, 1200, 700);
  return grab().save(path, "PNG");
}

bool ViewWidget::exportPdf(const QString& path) {
  if (dirty_) refresh();
  if (QCustomPlot* p = plot()) return p->savePdf(path, 1200, 700);
  QPdfWriter writer(path);
  writer.setTitle(title());
  QPainter painter(&writer);
  if (!painter.isActive()) return false;
  const double scale = std::min(writer.width() / std::max(1.0, double(width())), writer.height() / std::max(1.0, double(height())));
  painter.scale(scale, scale);
  render(&painter);
  return painter.end();
}

bool ViewWidget::exportCsv(const QString& path) {
  QFile f(path);
  if (!f.open(QIODevice::WriteOnly | QIODevice::Text)) return false;
  QTextStream out(&f);
  // The device goes with the numbers when it is emulated: they are not a GPU's.
  if (emulated_ && !device_.isEmpty()) out << "# " << device_ << "\n";
  writeCsv(out);
  out.flush();
  return f.error() == QFile::NoError;
}

// ---- The kinds drawn on a QCustomPlot -----------------------------------------------------------

namespace {

// The plot in the palette's colours: its background, title, axes, legend text and grid -- the
// desktop's light or dark palette, and again when it changes.
void paintPlot(QCustomPlot* p, const QPalette& pal) {
  const QColor text = pal.color(QPalette::Text), base = pal.color(QPalette::Base);
  p->setBackground(base);
  if (auto* heading = qobject_cast<QCPTextElement*>(p->plotLayout()->elementCount() ? p->plotLayout()->element(0, 0) : nullptr))
    heading->setTextColor(text);
  // The grid a fifth of the way from the background to the text: seen, and never taken for data.
  const QColor grid = theme::mix(base, text, 0.2);
  for (QCPAxis* axis : {p->xAxis, p->yAxis, p->yAxis2}) {
    axis->setBasePen(QPen(text));
    axis->setTickPen(QPen(text));
    axis->setSubTickPen(QPen(text));
    axis->setTickLabelColor(text);
    axis->setLabelColor(text);
    axis->grid()->setPen(QPen(grid, 0, Qt::DotLine));
  }
  p->legend->setTextColor(text);
}

QCustomPlot* makePlot(QWidget* owner, const QString& title) {
  auto* p = new QCustomPlot;
  p->legend->setVisible(false);  // shown once it has an entry
  p->setAutoAddPlottableToLegend(false);  // syncLegend adds the entries, short (ShortLegendItem)
  // One point smaller than the axes: a reference run's entries carry its full label, and the legend
  // must stay narrower than a plot in a 1280-pixel window.
  QFont legendFont = p->legend->font();
  legendFont.setPointSizeF(std::max(6.0, legendFont.pointSizeF() - 1.0));
  p->legend->setFont(legendFont);
  p->legend->setIconSize(24, 14);  // tall enough for an underscore under the text (a_name)
  p->setInteractions(QCP::iRangeDrag | QCP::iRangeZoom | QCP::iSelectPlottables);
  // Live curves grow to thousands of points: thin, non-antialiased lines keep a replot to a few
  // milliseconds, so the GUI thread stays responsive while a run streams.
  p->setNotAntialiasedElements(QCP::aePlottables);
  p->setMinimumHeight(110);  // the window fits a 1280x800 screen
  p->addLayer(kOverlayLayer, p->layer("main"), QCustomPlot::limAbove);
  // The title is part of the plot, so that exports carry it (and an emulated device's label).
  p->plotLayout()->insertRow(0);
  QFont titleFont = owner->font();
  titleFont.setBold(true);
  auto* heading = new QCPTextElement(p, title, titleFont);
  heading->setObjectName("title");
  p->plotLayout()->addElement(0, 0, heading);
  paintPlot(p, owner->palette());
  // The legend below the axes (a row of the plot's layout, so exports have it too), never over the
  // data; PlotViewBase::placeLegend gives it as many columns as the width holds.
  p->axisRect()->insetLayout()->take(p->legend);
  p->plotLayout()->addElement(2, 0, p->legend);
  p->plotLayout()->setRowStretchFactor(2, 0.001);
  p->legend->setFillOrder(QCPLegend::foColumnsFirst);
  p->legend->setBorderPen(Qt::NoPen);
  p->legend->setBrush(Qt::NoBrush);
  p->legend->setMargins(QMargins(6, 0, 6, 2));
  p->legend->setRowSpacing(1);
  p->legend->setColumnSpacing(14);
  return p;
}

class PlotViewBase : public ViewWidget {
 public:
  PlotViewBase(const lab::ViewSpec& spec, QWidget* parent)
      : ViewWidget(spec, parent), plot_(makePlot(this, QString::fromStdString(spec.title))), title_(QString::fromStdString(spec.title)) {
    setView(plot_);
  }
  QCustomPlot* plot() const override { return plot_; }
  QWidget* view() const override { return plot_; }

 protected:
  void applyTitle(const QString& text) override {
    title_ = text;
    fitTitle();
  }
  // The title broken into lines that fit the plot's width: QCustomPlot sizes a title element by its
  // text on one line and lays the whole plot out no narrower, so a title wider than the plot was cut
  // at both ends ("meline (yours): 0 workers ... runs on your CP").
  void fitTitle() {
    auto* heading = qobject_cast<QCPTextElement*>(plot_->plotLayout()->element(0, 0));
    if (!heading) return;
    const QFontMetrics metrics(heading->font());
    const int room = std::max(80, plot_->width() - 16);
    QStringList lines;
    QString line;
    for (const QString& word : title_.split(' ', Qt::SkipEmptyParts)) {
      const QString longer = line.isEmpty() ? word : line + ' ' + word;
      if (!line.isEmpty() && metrics.horizontalAdvance(longer) > room) {
        lines << line;
        line = word;
      } else {
        line = longer;
      }
    }
    if (!line.isEmpty()) lines << line;
    const QString text = lines.join('\n');
    if (heading->text() != text) heading->setText(text);
  }
  // After the data changed: legend entries for what has points (none for a failed run), the legend
  // only when it has entries, then a queued replot.
  void finishRedraw() {
    const bool entries = legendItemCount(plot_->legend) > 0;
    plot_->legend->setVisible(entries);
    // The legend is in the plot's layout only while it has entries. An empty QCPLegend (a grid without
    // columns) reports a maximum width of its margins, 12 px, and the layout's one column takes the
    // smallest maximum of its elements, floored by their minimums: every plot without a legend entry
    // was laid out at its title's width, whatever the widget's. A timeline whose lane labels took
    // 190 px of a 320-px column had an axis 117 px wide; narrower still, a negative width, drawn
    // mirrored (lesson 12 beside its recording, issue 48 §4.2).
    QCPLayoutGrid* layout = plot_->plotLayout();
    const bool inLayout = layout->hasElement(2, 0);  // the legend's cell, or empty
    if (entries && !inLayout) layout->addElement(2, 0, plot_->legend);
    else if (!entries && inLayout) layout->take(plot_->legend);
    placeLegend();
    fitTickCounts();
    plot_->replot(QCustomPlot::rpQueuedReplot);
  }
  // As many value ticks as the axis's height holds with room between their labels: a short plot
  // (110 px in a 1280x800 window) had five, their labels touching ("1.75 1.5 1.25").
  void fitTickCounts() {
    const int room = plot_->axisRect()->height();
    if (room <= 0) return;
    for (QCPAxis* axis : {plot_->yAxis, plot_->yAxis2}) {
      const int line = QFontMetrics(axis->tickLabelFont()).height();
      const int count = std::clamp(room / (3 * line), 2, 5);
      if (axis->ticker()->tickCount() != count) axis->ticker()->setTickCount(count);
    }
  }
  // As many legend columns as the plot's width holds (the widest entry sets a column's width).
  void placeLegend() {
    QCPLegend* legend = plot_->legend;
    int widest = 1;
    for (int i = 0; i < legend->itemCount(); ++i)
      if (legend->item(i)) widest = std::max(widest, legend->item(i)->minimumOuterSizeHint().width());
    const int room = plot_->width() - legend->margins().left() - legend->margins().right();
    const int columns = std::clamp((room + legend->columnSpacing()) / (widest + legend->columnSpacing()), 1, std::max(1, legendItemCount(legend)));
    // Rearranged every time: a removed entry (a failed run's) leaves a hole in the grid.
    legend->setWrap(columns);
    legend->setFillOrder(QCPLegend::foColumnsFirst, true);
  }
  void changeEvent(QEvent* event) override {
    ViewWidget::changeEvent(event);
    if (event->type() != QEvent::PaletteChange) return;
    // The desktop turned dark (or light): the plot, its curves and its markers in the new colours.
    paintPlot(plot_, palette());
    restyle();
    styleItems();
    plot_->replot(QCustomPlot::rpQueuedReplot);
  }
  void resizeEvent(QResizeEvent* event) override {
    ViewWidget::resizeEvent(event);
    fitTitle();
    placeLegend();
    fitTickCounts();
    placeEmptyNote();
  }
  // Removes `run`'s entries from a map keyed by (run, series) and from its order, their plottables
  // (what `plottableOf` gives for an entry) from the plot.
  template <class Entries, class Get>
  void dropEntries(int run, Entries& entries, std::vector<std::pair<int, std::string>>& order, Get plottableOf) {
    std::erase_if(entries, [&](const auto& entry) {
      if (entry.first.first != run) return false;
      plot_->removePlottable(plottableOf(entry.second));
      return true;
    });
    std::erase_if(order, [&](const auto& key) { return key.first == run; });
  }
  // An empty plot says so, over axes without numbers, instead of QCustomPlot's default range (a cell's
  // memory view once read "2.5 B" over nothing); "" takes the note away.
  void showEmptyNote(const QString& text) {
    if (!emptyNote_ && text.isEmpty()) return;
    if (!emptyNote_) {
      emptyNote_ = new QLabel(plot_);
      emptyNote_->setObjectName("emptyNote");
      emptyNote_->setAlignment(Qt::AlignCenter);
      emptyNote_->setWordWrap(true);
      emptyNote_->setForegroundRole(QPalette::PlaceholderText);
      emptyNote_->setAttribute(Qt::WA_TransparentForMouseEvents);
    }
    emptyNote_->setText(text);
    emptyNote_->setVisible(!text.isEmpty());
    for (QCPAxis* axis : {plot_->xAxis, plot_->yAxis}) axis->setTickLabels(text.isEmpty());
    placeEmptyNote();
  }
  void placeEmptyNote() {
    if (emptyNote_) emptyNote_->setGeometry(plot_->rect().adjusted(20, 30, -20, -30));
  }
  void fromZero() {
    // A logarithmic axis has no 0: it keeps the range its data gives it.
    if (spec_.yFromZero && !spec_.y.logarithmic)
      for (QCPAxis* axis : {plot_->yAxis, plot_->yAxis2})
        if (axis->visible() && axis->range().upper > 0) axis->setRangeLower(0);
  }

  QCustomPlot* plot_;
  QString title_;  // whole, as applyTitle gave it (the heading may have it on several lines)
  QLabel* emptyNote_ = nullptr;
};

// Line and StackedArea: a graph per (run, series); each point keeps all its x values, so switching
// the x axis draws every run again from them.
class LineView final : public PlotViewBase {
 public:
  using PlotViewBase::PlotViewBase;

 protected:
  struct Series {
    int run = 0;
    std::string id;
    int index = 0;       // in the declared series: colour and style
    bool layer = false;  // stacked (a StackedArea series that is not an overlay)
    QVector<QVector<double>> x;  // per x axis
    QVector<double> y;
    QCPGraph* graph = nullptr;
    int stride = 1;  // points received per point kept (see keepBounded)
    int tail = 0;    // points at the end kept as received, not yet folded
  };

  // A series keeps at most about 2 x kKeptPoints points (issue 27 6.8: a run reporting every step grew
  // the window by megabytes a second, for curves no screen can show). Beyond that it keeps an
  // envelope: the points kept so far are folded four into two, the lowest and the highest of each four
  // in the order they came, so that spikes and dips survive; from then on every 2 x stride points
  // received fold into two the same way, stride doubling at each fold of the whole.
  static constexpr int kKeptPoints = 10000;

  bool stacked() const { return spec_.kind == lab::ViewKind::StackedArea; }
  // The legend's key entries (see KeyLegendItem), by what they key: "reference <run>", "series <id>",
  // "run <run>".
  std::map<std::string, KeyLegendItem*> keys_;

  void specChanged() override {
    ViewWidget::specChanged();
    if (xAxis_ < static_cast<int>(spec_.x.size())) configureAxis(plot_->xAxis, spec_.x[xAxis_]);
    configureAxis(plot_->yAxis, spec_.y);
  }

  bool addData(int run, const lab::Update& update) override {
    const auto* p = std::get_if<lab::Point>(&update);
    if (!p || !std::isfinite(p->y)) return false;  // a diverging run's NaN/inf: not drawn
    auto it = series_.find({run, p->series});
    if (it == series_.end()) {
      Series s;
      s.run = run;
      s.id = p->series;
      const lab::SeriesSpec* spec = series(run, p->series, &s.index);
      s.layer = stacked() && !(spec && spec->overlay);
      s.graph = plot_->addGraph();
      s.graph->setProperty(kRunProperty, run);
      s.graph->setAdaptiveSampling(true);
      if (stacked() && !s.layer) s.graph->setLayer(kOverlayLayer);  // overlay lines over the stack
      it = series_.emplace(std::pair{run, p->series}, std::move(s)).first;
      order_.push_back({run, p->series});
      styleSeries(it->second);
    }
    Series& s = it->second;
    const int axes = std::max<int>(static_cast<int>(p->x.size()), static_cast<int>(s.x.size()));
    while (s.x.size() < axes) s.x.append(QVector<double>(s.y.size(), kNaN));
    for (int a = 0; a < axes; ++a) s.x[a].append(xOn(p->x, a));
    s.y.append(p->y);
    if (s.layer) {
      stackDirty_ = true;
    } else if (const double x = xOn(p->x, xAxis_); std::isfinite(x)) {
      s.graph->addData(x, p->y);
    }
    keepBounded(s);
    return true;
  }

  // Folds the points [from, from + count) of `s` into their lowest and highest, in order.
  static void fold(Series& s, int from, int count) {
    const auto first = s.y.begin() + from;
    const int low = static_cast<int>(std::min_element(first, first + count) - s.y.begin());
    const int high = static_cast<int>(std::max_element(first, first + count) - s.y.begin());
    const std::array<int, 2> kept{std::min(low, high), std::max(low, high)};
    const int keep = kept[0] == kept[1] ? 1 : 2;
    for (QVector<double>* v : [&] {
           std::vector<QVector<double>*> all{&s.y};
           for (auto& xs : s.x) all.push_back(&xs);
           return all;
         }()) {
      for (int k = 0; k < keep; ++k) (*v)[from + k] = (*v)[kept[static_cast<std::size_t>(k)]];
      v->remove(from + keep, count - keep);
    }
  }

  void keepBounded(Series& s) {
    bool changed = false;
    if (s.stride > 1 && ++s.tail == 2 * s.stride) {
      const int from = static_cast<int>(s.y.size()) - s.tail;
      // Where the tail's keys rise past the points before it (a curve over steps or time), the graph
      // trades just them for the two kept; otherwise it is drawn again.
      const QVector<double>* xs = xAxis_ < s.x.size() ? &s.x[xAxis_] : nullptr;
      const bool last = !s.layer && xs && std::isfinite((*xs)[from]) && (from == 0 || (*xs)[from - 1] < (*xs)[from]) &&
                        std::is_sorted(xs->begin() + from, xs->end());
      const double firstKey = last ? (*xs)[from] : 0.0;
      fold(s, from, s.tail);
      s.tail = 0;
      if (last) {
        s.graph->data()->removeAfter(std::nextafter(firstKey, -std::numeric_limits<double>::infinity()));
        for (int i = from; i < s.y.size(); ++i)
          if (std::isfinite((*xs)[i])) s.graph->addData((*xs)[i], s.y[i]);
      } else {
        changed = true;
      }
    }
    if (s.y.size() >= 2 * kKeptPoints) {
      const int folded = static_cast<int>(s.y.size()) - s.tail;
      for (int start = (folded / 4 - 1) * 4; start >= 0; start -= 4) fold(s, start, 4);  // from the end: earlier indices stay put
      s.stride *= 2;
      changed = true;
    }
    if (!changed) return;
    if (s.layer) stackDirty_ = true;
    else redrawSeries(s);
  }

  // The graph of `s` again from its points on the current x axis.
  void redrawSeries(Series& s) {
    QVector<double> keys, values;
    const QVector<double>& xs = xAxis_ < s.x.size() ? s.x[xAxis_] : QVector<double>();
    for (int i = 0; i < xs.size(); ++i) {
      if (!std::isfinite(xs[i])) continue;
      keys << xs[i];
      values << s.y[i];
    }
    s.graph->setData(keys, values);
  }

  void dropRun(int run) override {
    dropEntries(run, series_, order_, [](const Series& s) { return s.graph; });
    stackDirty_ = true;  // the legend's keys follow at the next redraw
  }

  void restyle() override {
    for (auto& [key, s] : series_) styleSeries(s);
  }

  void styleSeries(Series& s) {
    const RunStyle& run = style(s.run);
    const lab::SeriesSpec* spec = series(s.run, s.id);
    const lab::SeriesStyle kind = spec ? spec->style : lab::SeriesStyle::Line;
    QCPGraph* g = s.graph;
    g->setName(legendName(s.run, s.id));
    g->setProperty(kLegendTextProperty, legendText(s.run, s.id));
    QPen pen = seriesPen(run, s.index, kind, palette());
    if (s.layer) {
      // Stacked layers keep a colour per category (what the stack shows); runs differ by outline.
      const QColor c = run.reference ? grey(s.index, palette()) : paletteColour(s.index, palette());
      pen = QPen(c, run.reference ? 1.5 : 0, run.reference ? Qt::DashLine : dash(run.several ? run.colour : 0));
      QColor fill = c;
      fill.setAlpha(run.reference ? 40 : 110);
      g->setBrush(fill);
    }
    g->setPen(pen);
    g->setLineStyle(kind == lab::SeriesStyle::Steps ? QCPGraph::lsStepLeft : kind == lab::SeriesStyle::Points ? QCPGraph::lsNone : QCPGraph::lsLine);
    if (kind == lab::SeriesStyle::Points)
      g->setScatterStyle(QCPScatterStyle(run.reference ? QCPScatterStyle::ssDiamond : QCPScatterStyle::ssCircle, QPen(pen.color(), 1.5), Qt::NoBrush, 6));
    else
      g->setScatterStyle(QCPScatterStyle());
  }

  void axisChanged() override {
    configureAxis(plot_->xAxis, spec_.x[xAxis_]);
    for (auto& [key, s] : series_) {
      if (!s.layer) redrawSeries(s);
    }
    stackDirty_ = true;
  }

  // Each run's layers on one set of keys (every x any layer has), a layer holding its last value
  // between its own points (0 before its first), summed bottom first; each fills down to the one below.
  void restack() {
    std::map<int, std::vector<Series*>> runs;
    for (auto& [key, s] : series_)
      if (s.layer) runs[s.run].push_back(&s);
    for (auto& [run, layers] : runs) {
      std::sort(layers.begin(), layers.end(), [](const Series* a, const Series* b) { return a->index < b->index; });
      QVector<double> keys;
      for (const Series* s : layers)
        if (xAxis_ < s->x.size())
          for (double x : s->x[xAxis_])
            if (std::isfinite(x)) keys << x;
      std::sort(keys.begin(), keys.end());
      keys.erase(std::unique(keys.begin(), keys.end()), keys.end());
      QVector<double> total(keys.size(), 0.0);
      QCPGraph* below = nullptr;
      for (Series* s : layers) {
        const QVector<double> xs = xAxis_ < s->x.size() ? s->x[xAxis_] : QVector<double>(s->y.size(), kNaN);
        std::vector<int> order(s->y.size());
        std::iota(order.begin(), order.end(), 0);
        std::erase_if(order, [&](int i) { return !std::isfinite(xs[i]); });
        std::stable_sort(order.begin(), order.end(), [&](int a, int b) { return xs[a] < xs[b]; });
        std::size_t j = 0;
        double held = 0;
        for (int k = 0; k < keys.size(); ++k) {
          while (j < order.size() && xs[order[j]] <= keys[k]) held = s->y[order[j++]];
          total[k] += held;
        }
        s->graph->setData(keys, total, true);
        s->graph->setChannelFillGraph(below);
        below = s->graph;
      }
    }
  }

  // The legend in the order the series appeared, as short as what it must tell:
  //  - a recording's series that the learner's run also has are not listed again: one entry says what
  //    its grey dashes are (issue 27 §4: with "Compare with a real GPU" a legend of every series twice
  //    grew until the plot was 30 px tall);
  //  - with several of the learner's runs overlaid (a colour per run, a line style per series; the
  //    stacked layers: a colour per category, an outline per run), one entry per series and one per
  //    run instead of one per series of every run.
  void redrawLegend() {
    std::set<std::string> learners;
    std::vector<int> learnerRuns;  // drawn, in the order they appeared
    std::vector<const Series*> firstOfId;  // a series of each id the learner's runs drew, in order
    for (const auto& key : order_) {
      const Series& s = series_.at(key);
      const RunStyle& run = style(s.run);
      if (run.reference || run.failed || s.graph->dataCount() == 0) continue;
      if (learners.insert(s.id).second) firstOfId.push_back(&s);
      if (std::find(learnerRuns.begin(), learnerRuns.end(), s.run) == learnerRuns.end()) learnerRuns.push_back(s.run);
    }
    const bool factored = learnerRuns.size() > 1 && firstOfId.size() > 1;
    struct Key {
      QString text;
      QPen pen;
      QBrush brush;
      QCPScatterStyle scatter;
    };
    std::map<std::string, Key> wanted;
    std::vector<std::string> wantedOrder;
    auto want = [&](const std::string& key, const QString& text, const QPen& pen, const QBrush& brush = Qt::NoBrush,
                    const QCPScatterStyle& scatter = QCPScatterStyle()) {
      if (wanted.emplace(key, Key{text, pen, brush, scatter}).second) wantedOrder.push_back(key);
    };
    const QColor ink = palette().color(QPalette::Text);  // a layer's key: its line in the text's colour
    if (factored) {
      for (const Series* s : firstOfId) {
        const QString label = QString::fromStdString(series(s->run, s->id) && !series(s->run, s->id)->label.empty() ? series(s->run, s->id)->label : s->id);
        if (s->layer) {
          want("series " + s->id, label, QPen(s->graph->brush().color(), 0), s->graph->brush());
        } else {
          QPen pen = s->graph->pen();
          pen.setColor(ink);
          // Points (a series drawn without a line) are keyed by their marker.
          QCPScatterStyle marker;
          if (s->graph->lineStyle() == QCPGraph::lsNone) {
            marker = s->graph->scatterStyle();
            marker.setPen(QPen(ink, 1.5));
          }
          want("series " + s->id, label, pen, Qt::NoBrush, marker);
        }
      }
      const bool layers = std::any_of(firstOfId.begin(), firstOfId.end(), [](const Series* s) { return s->layer; });
      for (const int run : learnerRuns) {
        const RunStyle& st = style(run);
        const QPen pen = layers ? QPen(ink, 1.5, dash(st.colour)) : QPen(paletteColour(st.colour, palette()), 2);
        want("run " + std::to_string(run), st.name.isEmpty() ? QString("your run") : st.name, pen);
      }
    }
    for (const auto& key : order_) {
      const Series& s = series_.at(key);
      const RunStyle& run = style(s.run);
      const bool drawn = !run.failed && s.graph->dataCount() > 0;
      const bool keyedReference = run.reference && learners.count(s.id);
      const bool keyedLearner = !run.reference && factored;
      syncLegend(s.graph, drawn && !keyedReference && !keyedLearner);
      if (drawn && keyedReference)
        want("reference " + std::to_string(s.run),
             "grey dashes: " + run.compactName() + (referenceOnRight_ ? ", on the right axis" : ""),
             QPen(grey(0, palette()), 1.5, Qt::DashLine));
    }
    for (auto it = keys_.begin(); it != keys_.end();) {
      if (wanted.count(it->first)) {
        ++it;
        continue;
      }
      plot_->legend->removeItem(it->second);
      it = keys_.erase(it);
    }
    for (const std::string& key : wantedOrder) {
      const Key& k = wanted.at(key);
      KeyLegendItem*& item = keys_[key];
      if (!item) {
        item = new KeyLegendItem(plot_->legend, k.text);
        plot_->legend->addItem(item);
      }
      item->setText(k.text);
      item->setSample(k.pen, k.brush, k.scatter);
    }
  }

  QStringList describe() const override {
    QStringList out;
    const lab::Axis along = xAxis_ < static_cast<int>(spec_.x.size()) ? spec_.x[xAxis_] : lab::Axis{};
    const QString alongName = QString::fromStdString(along.label);
    for (const auto& key : order_) {
      const Series& s = series_.at(key);
      if (xAxis_ >= s.x.size()) continue;
      const QVector<double>& xs = s.x[xAxis_];
      int first = -1, last = -1;
      for (int i = 0; i < s.y.size(); ++i)
        if (std::isfinite(xs[i])) (first < 0 ? first : last) = i;
      if (first < 0) continue;
      if (last < 0) last = first;
      const QString name = legendName(s.run, s.id);
      const auto y = [&](int i) { return formatQuantity(s.y[i], spec_.y.unit); };
      const auto x = [&](int i) { return formatQuantity(xs[i], along.unit); };
      out << (first == last ? QString("%1: %2 at %3 %4").arg(name, y(first), alongName, x(first))
                            : QString("%1: %2 → %3 over %4 %5–%6").arg(name, y(first), y(last), alongName, x(first), x(last)));
    }
    return out;
  }
  void redraw() override {
    if (stackDirty_) restack();
    stackDirty_ = false;
    placeReferenceAxis();
    redrawLegend();
    plot_->rescaleAxes(true);
    fitFewPoints();
    fitMarkers();
    // A logarithmic x axis gets a margin, so the first and last points (a sweep's 1 and n, and any
    // marker there) are not drawn on the axes.
    if (xAxis_ < static_cast<int>(spec_.x.size()) && spec_.x[xAxis_].logarithmic && plot_->xAxis->range().lower > 0)
      plot_->xAxis->setRange(plot_->xAxis->range().lower / 1.25, plot_->xAxis->range().upper * 1.25);
    fromZero();
    finishRedraw();
  }

  // A recording whose values are far larger than the learner's run (lesson 06: an H100's 7 GiB
  // against the emulated GPU's 200 MiB, which then lay flat on the axis) gets the right axis, scaled
  // to it alone, so both stay readable; the legend says which axis is the recording's.
  void placeReferenceAxis() {
    constexpr double kApart = 8.0;
    double learners = 0, references = 0;
    for (const auto& [key, s] : series_) {
      bool found = false;
      const QCPRange v = s.graph->getValueRange(found);
      if (!found) continue;
      double& top = style(s.run).reference ? references : learners;
      top = std::max({top, std::abs(v.lower), std::abs(v.upper)});
    }
    const bool apart = !spec_.y.logarithmic && learners > 0 && references > kApart * learners;
    for (auto& [key, s] : series_)  // every time: a recording's series may come after the switch
      if (style(s.run).reference) s.graph->setValueAxis(apart ? plot_->yAxis2 : plot_->yAxis);
    referenceOnRight_ = apart;
    plot_->yAxis2->setVisible(apart);
    if (apart) {
      configureAxis(plot_->yAxis2, spec_.y);
      plot_->yAxis2->setLabel(axisTitle(spec_.y) + " (the recording)");
    }
  }

  // A series of a few points shows each as a dot: a line between two samples is not a measurement of
  // what happened between them (a short cell's memory: at its start and its end). Data that spans
  // no width on an axis (one sample, or all of them 0) gets a range around it, not QCustomPlot's
  // default of the previous range's size centred on it (a time axis from -2 to 2 s); no data at all,
  // the empty plot's note.
  void fitFewPoints() {
    constexpr int kDotsUpTo = 12;
    bool any = false;
    QCPRange keys, values;
    for (auto& [key, s] : series_) {
      const lab::SeriesSpec* spec = series(s.run, s.id);
      const bool points = spec && spec->style == lab::SeriesStyle::Points;
      if (!s.layer && !points) {
        const int n = s.graph->data()->size();
        s.graph->setScatterStyle(n <= kDotsUpTo ? QCPScatterStyle(QCPScatterStyle::ssDisc, s.graph->pen().color(), 5) : QCPScatterStyle());
      }
      bool found = false;
      const QCPRange k = s.graph->getKeyRange(found);
      if (!found) continue;
      const QCPRange v = s.graph->getValueRange(found);
      if (!found) continue;
      keys = any ? QCPRange(std::min(keys.lower, k.lower), std::max(keys.upper, k.upper)) : k;
      values = any ? QCPRange(std::min(values.lower, v.lower), std::max(values.upper, v.upper)) : v;
      any = true;
    }
    showEmptyNote(any ? QString() : tr("Nothing measured yet"));
    if (!any) return;
    const auto around = [](double v) { return v > 0 ? QCPRange(v * 0.5, v * 1.5) : v < 0 ? QCPRange(v * 1.5, v * 0.5) : QCPRange(0, 1); };
    if (keys.size() == 0) plot_->xAxis->setRange(around(keys.lower));
    if (values.size() == 0) plot_->yAxis->setRange(around(values.lower));
  }

  void writeCsv(QTextStream& out) const override {
    out << "series";
    for (const lab::Axis& a : spec_.x) out << "," << csvQuote(axisTitle(a));
    out << "," << csvQuote(axisTitle(spec_.y)) << "\n";
    for (const auto& key : order_) {
      const Series& s = series_.at(key);
      const QString name = csvQuote(legendName(s.run, s.id));
      for (int i = 0; i < s.y.size(); ++i) {
        out << name;
        for (int a = 0; a < static_cast<int>(spec_.x.size()); ++a) out << "," << (a < s.x.size() ? QString::number(s.x[a][i], 'g', 12) : QString());
        out << "," << QString::number(s.y[i], 'g', 12) << "\n";
      }
    }
  }

  std::map<std::pair<int, std::string>, Series> series_;
  std::vector<std::pair<int, std::string>> order_;  // the series in the order they appeared
  bool stackDirty_ = false;
  bool referenceOnRight_ = false;  // a recording's graphs on yAxis2 (placeReferenceAxis)
};

// Bars: categories along x (in the order they first appear), one bar per (run, series) in each group.
class BarsView final : public PlotViewBase {
 public:
  BarsView(const lab::ViewSpec& spec, QWidget* parent) : PlotViewBase(spec, parent), group_(new QCPBarsGroup(plot_)), ticker_(new QCPAxisTickerText) {
    plot_->xAxis->setTicker(ticker_);
    plot_->xAxis->setSubTicks(false);
    plot_->xAxis->setTickLength(0, 4);
  }

 protected:
  struct BarSet {
    int run = 0;
    std::string id;
    int index = 0;
    QCPBars* bars = nullptr;
    std::map<int, double> values;  // by category
  };

  void specChanged() override {
    ViewWidget::specChanged();
    configureAxis(plot_->yAxis, spec_.y);
  }

  bool addData(int run, const lab::Update& update) override {
    const auto* b = std::get_if<lab::Bar>(&update);
    if (!b || !std::isfinite(b->value)) return false;
    const QString category = QString::fromStdString(b->category);
    int c = static_cast<int>(categories_.indexOf(category));
    if (c < 0) {
      c = static_cast<int>(categories_.size());
      categories_ << category;
    }
    auto it = sets_.find({run, b->series});
    if (it == sets_.end()) {
      BarSet s;
      s.run = run;
      s.id = b->series;
      series(run, b->series, &s.index);
      s.bars = new QCPBars(plot_->xAxis, plot_->yAxis);
      s.bars->setProperty(kRunProperty, run);
      s.bars->setBarsGroup(group_);
      it = sets_.emplace(std::pair{run, b->series}, std::move(s)).first;
      order_.push_back({run, b->series});
      styleSet(it->second);
    }
    it->second.values[c] = b->value;
    return true;
  }

  void dropRun(int run) override {
    dropEntries(run, sets_, order_, [](const BarSet& s) { return s.bars; });
    if (sets_.empty()) categories_.clear();
  }

  void restyle() override {
    for (auto& [key, s] : sets_) styleSet(s);
  }

  void styleSet(BarSet& s) {
    const RunStyle& run = style(s.run);
    static const Qt::BrushStyle kPatterns[] = {Qt::SolidPattern, Qt::Dense4Pattern, Qt::BDiagPattern, Qt::FDiagPattern, Qt::CrossPattern};
    s.bars->setName(legendName(s.run, s.id));
    s.bars->setProperty(kLegendTextProperty, legendText(s.run, s.id));
    QColor c = run.reference ? grey(s.index, palette()) : run.several ? paletteColour(run.colour, palette()) : paletteColour(s.index, palette());
    s.bars->setPen(QPen(c.darker(120), 1, run.reference ? Qt::DashLine : Qt::SolidLine));
    QColor fill = c;
    fill.setAlpha(run.reference ? 90 : 200);
    s.bars->setBrush(QBrush(fill, run.reference ? Qt::BDiagPattern : run.several ? kPatterns[s.index % 5] : Qt::SolidPattern));
  }

  QStringList describe() const override {
    QStringList out;
    for (const auto& key : order_) {
      const BarSet& b = sets_.at(key);
      QStringList values;
      for (const auto& [c, v] : b.values) values << categories_.value(c) + " " + formatQuantity(v, spec_.y.unit);
      if (!values.isEmpty()) out << legendName(b.run, b.id) + ": " + values.join(", ");
    }
    return out;
  }
  void redraw() override {
    const double width = 0.8 / std::max<std::size_t>(1, sets_.size());
    for (const auto& key : order_) {  // the legend in the order the series appeared
      BarSet& s = sets_.at(key);
      QVector<double> keys, values;
      for (const auto& [c, v] : s.values) {
        keys << c + 1;
        values << v;
      }
      s.bars->setData(keys, values, true);
      s.bars->setWidth(width);
      syncLegend(s.bars, !style(s.run).failed && !keys.isEmpty());
    }
    ticker_->clear();
    for (int c = 0; c < categories_.size(); ++c) ticker_->addTick(c + 1, categories_[c]);
    if (!categories_.isEmpty()) {
      plot_->xAxis->setRange(0.4, categories_.size() + 0.6);
      plot_->yAxis->rescale(true);
      const QCPRange r = plot_->yAxis->range();
      plot_->yAxis->setRange(std::min(0.0, r.lower), r.upper > 0 ? r.upper * 1.08 : r.upper);  // bars grow from 0
    }
    finishRedraw();
  }

  QString toolTipAt(const QPointF& pos) const override {
    auto* b = qobject_cast<QCPBars*>(plot_->plottableAt(pos, false));
    if (!b) return {};
    QVariant details;
    if (b->selectTest(pos, false, &details) < 0) return {};
    const QCPDataSelection selection = details.value<QCPDataSelection>();
    if (selection.isEmpty()) return {};
    const auto point = b->data()->at(selection.dataRange().begin());
    const int c = static_cast<int>(std::lround(point->key)) - 1;
    QString text = QString("%1\n%2: %3").arg(b->name(), c >= 0 && c < categories_.size() ? categories_[c] : QString(), formatQuantity(point->value, spec_.y.unit));
    if (const QString more = style(b->property(kRunProperty).toInt()).details; !more.isEmpty()) text += "\n" + more;
    return text;
  }

  void writeCsv(QTextStream& out) const override {
    out << "series,category," << csvQuote(axisTitle(spec_.y)) << "\n";
    for (const auto& key : order_) {
      const BarSet& s = sets_.at(key);
      for (const auto& [c, v] : s.values)
        out << csvQuote(legendName(s.run, s.id)) << "," << csvQuote(categories_.value(c)) << "," << QString::number(v, 'g', 12) << "\n";
    }
  }

  QCPBarsGroup* group_;
  QSharedPointer<QCPAxisTickerText> ticker_;
  QStringList categories_;
  std::map<std::pair<int, std::string>, BarSet> sets_;
  std::vector<std::pair<int, std::string>> order_;
};

// Timeline: a row per lane (the declared series first, then lanes as they appear), a rectangle per span.
class TimelineView final : public PlotViewBase {
 public:
  TimelineView(const lab::ViewSpec& spec, QWidget* parent) : PlotViewBase(spec, parent), ticker_(new QCPAxisTickerText) {
    plot_->yAxis->setTicker(ticker_);
    plot_->yAxis->setSubTicks(false);
  }

 protected:
  struct SpanItem {
    int run;
    lab::Span span;
    QCPItemRect* rect;
  };

  void specChanged() override {
    ViewWidget::specChanged();
    configureAxis(plot_->xAxis, spec_.x.empty() ? lab::Axis{"time", "s"} : spec_.x[xAxis_]);
    plot_->yAxis->setLabel(QString());
  }

  QStringList lanes() const {
    QStringList out;
    for (const lab::SeriesSpec& s : spec_.series) out << QString::fromStdString(s.id);
    for (const SpanItem& s : spans_)
      if (!out.contains(QString::fromStdString(s.span.lane))) out << QString::fromStdString(s.span.lane);
    return out;
  }

  bool addData(int run, const lab::Update& update) override {
    const auto* s = std::get_if<lab::Span>(&update);
    if (!s || !std::isfinite(s->start) || !std::isfinite(s->end)) return false;
    auto* rect = new QCPItemRect(plot_);
    rect->setProperty(kRunProperty, run);
    spans_.push_back({run, *s, rect});
    styleSpan(spans_.back(), lanes());
    return true;
  }

  void dropRun(int run) override {
    for (auto it = spans_.begin(); it != spans_.end();) {
      if (it->run == run) {
        plot_->removeItem(it->rect);
        it = spans_.erase(it);
      } else {
        ++it;
      }
    }
  }

  void restyle() override {
    const QStringList all = lanes();
    for (SpanItem& s : spans_) styleSpan(s, all);
  }

  void styleSpan(SpanItem& s, const QStringList& all) {
    const RunStyle& run = style(s.run);
    const int lane = static_cast<int>(all.indexOf(QString::fromStdString(s.span.lane)));
    const QColor c = run.reference ? grey(lane, palette()) : run.several ? paletteColour(run.colour, palette()) : paletteColour(lane, palette());
    QColor fill = c;
    fill.setAlpha(run.reference ? 70 : 170);
    s.rect->setPen(QPen(c.darker(130), 1, run.reference ? Qt::DashLine : Qt::SolidLine));
    s.rect->setBrush(fill);
  }

  QStringList describe() const override {
    // A line per lane (and run): how many spans, how long they keep it busy, from when to when.
    struct Lane {
      QString name;
      int spans = 0;
      double busy = 0, from = 0, to = 0;
    };
    std::vector<Lane> lanes;
    for (const SpanItem& item : spans_) {
      QString name = QString::fromStdString(item.span.lane);
      if (const QString run = style(item.run).compactName(); !run.isEmpty()) name += " — " + run;
      auto it = std::find_if(lanes.begin(), lanes.end(), [&](const Lane& l) { return l.name == name; });
      if (it == lanes.end()) it = lanes.insert(lanes.end(), Lane{name, 0, 0, item.span.start, item.span.end});
      ++it->spans;
      it->busy += item.span.end - item.span.start;
      it->from = std::min(it->from, item.span.start);
      it->to = std::max(it->to, item.span.end);
    }
    const std::string unit = xAxis_ < static_cast<int>(spec_.x.size()) ? spec_.x[xAxis_].unit : std::string("s");
    QStringList out;
    for (const Lane& l : lanes)
      out << QString("%1: %2 %3, busy %4 between %5 and %6")
                 .arg(l.name)
                 .arg(l.spans)
                 .arg(l.spans == 1 ? "span" : "spans")
                 .arg(formatQuantity(l.busy, unit), formatQuantity(l.from, unit), formatQuantity(l.to, unit));
    return out;
  }
  void redraw() override {
    const QStringList all = lanes();
    ticker_->clear();
    // Lane labels at most about a third of the plot's width (the whole name is in each span's
    // tooltip): the time axis keeps the rest.
    const QFontMetrics metrics(plot_->yAxis->tickLabelFont());
    const int room = std::clamp(plot_->width() / 3, 80, kMaxLaneLabelWidth);
    for (int i = 0; i < all.size(); ++i) {
      const lab::SeriesSpec* s = series(-1, all[i].toStdString());
      const QString label = s && !s->label.empty() ? QString::fromStdString(s->label) : all[i];
      ticker_->addTick(-i, metrics.elidedText(label, Qt::ElideMiddle, room));
    }
    // Several runs share a lane's height, a strip each, so that their spans do not hide each other.
    std::vector<int> runs;
    for (const SpanItem& s : spans_)
      if (std::find(runs.begin(), runs.end(), s.run) == runs.end()) runs.push_back(s.run);
    const double strip = 0.76 / static_cast<double>(std::max<std::size_t>(1, runs.size()));
    double lo = std::numeric_limits<double>::infinity(), hi = -lo;
    for (const SpanItem& s : spans_) {
      const int lane = static_cast<int>(all.indexOf(QString::fromStdString(s.span.lane)));
      const double top = -lane + 0.38 - strip * static_cast<double>(std::find(runs.begin(), runs.end(), s.run) - runs.begin());
      s.rect->topLeft->setCoords(s.span.start, top);
      s.rect->bottomRight->setCoords(s.span.end, top - strip);
      lo = std::min({lo, s.span.start, s.span.end});
      hi = std::max({hi, s.span.start, s.span.end});
    }
    if (!all.isEmpty()) plot_->yAxis->setRange(-(all.size() - 1) - 0.6, 0.6);
    if (lo <= hi) {
      const double pad = std::max(1e-9, (hi - lo) * 0.02);
      plot_->xAxis->setRange(lo - pad, hi + pad);
    }
    keyTheReference();
    finishRedraw();
  }

  // A recording's spans (grey, dashed, in a strip of each lane) get one legend entry saying what they
  // are, as a line view's grey dashes do.
  void keyTheReference() {
    const auto reference = std::find_if(spans_.begin(), spans_.end(), [&](const SpanItem& s) { return style(s.run).reference; });
    if (reference == spans_.end()) {
      if (referenceKey_) plot_->legend->removeItem(referenceKey_);
      referenceKey_ = nullptr;
      return;
    }
    const RunStyle& run = style(reference->run);
    const QString text = "grey, dashed: " + run.compactName();
    if (!referenceKey_) {
      referenceKey_ = new KeyLegendItem(plot_->legend, text);
      plot_->legend->addItem(referenceKey_);
    }
    referenceKey_->setText(text);
    referenceKey_->setSample(reference->rect->pen(), reference->rect->brush());
  }

  QString toolTipAt(const QPointF& pos) const override {
    const QCPAbstractItem* item = plot_->itemAt(pos, false);
    for (const SpanItem& s : spans_) {
      if (s.rect != item) continue;
      QString text = QString("%1: %2\n%3 – %4 (%5)")
                         .arg(legendName(s.run, s.span.lane), QString::fromStdString(s.span.label), formatQuantity(s.span.start, "s"),
                              formatQuantity(s.span.end, "s"), formatQuantity(s.span.end - s.span.start, "s"));
      if (const QString more = style(s.run).details; !more.isEmpty()) text += "\n" + more;
      return text;
    }
    return {};
  }

  void writeCsv(QTextStream& out) const override {
    out << "lane,label,start (s),end (s)\n";
    for (const SpanItem& s : spans_)
      out << csvQuote(legendName(s.run, s.span.lane)) << "," << csvQuote(QString::fromStdString(s.span.label)) << ","
          << QString::number(s.span.start, 'g', 12) << "," << QString::number(s.span.end, 'g', 12) << "\n";
  }

  void resizeEvent(QResizeEvent* event) override {
    PlotViewBase::resizeEvent(event);
    markDirty();  // the lane labels' room follows the width
  }

  static constexpr int kMaxLaneLabelWidth = 260;
  QSharedPointer<QCPAxisTickerText> ticker_;
  std::vector<SpanItem> spans_;
  KeyLegendItem* referenceKey_ = nullptr;  // owned by the legend
};

// Table: the rows under the view's columns, each cell written for its column's unit; a Run column
// when rows of several runs are shown (a reference's rows grey and italic).
class TableView final : public ViewWidget {
 public:
  TableView(const lab::ViewSpec& spec, QWidget* parent) : ViewWidget(spec, parent) {
    auto* box = new QWidget(this);
    auto* v = new QVBoxLayout(box);
    v->setContentsMargins(0, 0, 0, 0);
    heading_ = new QLabel(box);
    QFont f = heading_->font();
    f.setBold(true);
    heading_->setFont(f);
    heading_->setAlignment(Qt::AlignHCenter);
    table_ = new QTableWidget(0, 0, box);
    table_->setEditTriggers(QAbstractItemView::NoEditTriggers);
    table_->verticalHeader()->setVisible(false);
    table_->horizontalHeader()->setStretchLastSection(true);
    v->addWidget(heading_);
    v->addWidget(table_, 1);
    setView(box);
    box_ = box;
  }
  QWidget* view() const override { return table_; }

 protected:
  struct RowData {
    int run;
    std::vector<lab::Value> cells;
  };

  void applyTitle(const QString& text) override { heading_->setText(text); }
  void specChanged() override {
    ViewWidget::specChanged();
    rebuild_ = true;
  }
  bool addData(int run, const lab::Update& update) override {
    const auto* r = std::get_if<lab::Row>(&update);
    if (!r) return false;
    // The learner's rows first, a reference's after them, whichever came first.
    if (!style(run).reference) {
      const auto reference = std::find_if(rows_.begin(), rows_.end(), [&](const RowData& row) { return style(row.run).reference; });
      if (reference != rows_.end()) {
        rows_.insert(reference, {run, r->cells});
        rebuild_ = true;
        return true;
      }
    }
    rows_.append({run, r->cells});
    return true;
  }
  void dropRun(int run) override {
    rows_.removeIf([&](const RowData& r) { return r.run == run; });
    rebuild_ = true;
  }
  void restyle() override { rebuild_ = true; }

  bool runColumn() const {
    for (const RowData& r : rows_)
      if (r.run != rows_.front().run) return true;
    return false;
  }

  QStringList describe() const override {
    if (rows_.isEmpty()) return {};
    QStringList columns;
    for (const lab::Axis& c : spec_.columns) columns << QString::fromStdString(c.label);
    return {QString("%1 %2 of %3").arg(rows_.size()).arg(rows_.size() == 1 ? "row" : "rows").arg(columns.join(", "))};
  }
  void redraw() override {
    const bool withRun = runColumn();
    if (withRun != withRun_) rebuild_ = true;
    if (rebuild_) {
      withRun_ = withRun;
      QStringList headers;
      if (withRun) headers << "Run";
      for (const lab::Axis& c : spec_.columns) headers << axisTitle(c);
      table_->setColumnCount(static_cast<int>(headers.size()));
      table_->setHorizontalHeaderLabels(headers);
      table_->setRowCount(0);
      rebuild_ = false;
    }
    // New rows are followed only when the learner has scrolled to the bottom of a table that overflows:
    // a table opens at its first row (issue 27 §4: tables opened scrolled to the bottom).
    const QScrollBar* bar = table_->verticalScrollBar();
    const bool follow = bar->maximum() > 0 && bar->value() >= bar->maximum();
    const int first = table_->rowCount();
    table_->setRowCount(static_cast<int>(rows_.size()));
    for (int r = first; r < rows_.size(); ++r) {
      const RowData& row = rows_[r];
      const RunStyle& run = style(row.run);
      int c = 0;
      auto put = [&](const QString& text) {
        auto* item = new QTableWidgetItem(text);
        if (run.reference) {
          item->setForeground(QColor(120, 120, 120));
          QFont f = item->font();
          f.setItalic(true);
          item->setFont(f);
          item->setToolTip(run.name + "\n" + run.details);
        }
        table_->setItem(r, c++, item);
      };
      if (withRun) put(runTitle(run));
      for (std::size_t i = 0; i < spec_.columns.size(); ++i) put(i < row.cells.size() ? formatCell(row.cells[i], spec_.columns[i].unit) : QString());
    }
    // Columns as wide as their cells while the table is short (measuring thousands of rows 30 times a
    // second would cost more than it helps).
    if (first < rows_.size() && first < 200) table_->resizeColumnsToContents();
    if (follow && first < rows_.size()) table_->scrollToBottom();
  }

  void writeCsv(QTextStream& out) const override {
    const bool withRun = runColumn();
    QStringList headers;
    if (withRun) headers << "run";
    for (const lab::Axis& c : spec_.columns) headers << csvQuote(axisTitle(c));
    out << headers.join(',') << "\n";
    for (const RowData& row : rows_) {
      QStringList cells;
      const RunStyle& run = style(row.run);
      if (withRun) cells << csvQuote(run.reference ? run.name : runTitle(run));
      for (const lab::Value& v : row.cells) cells << csvCell(v);
      out << cells.join(',') << "\n";
    }
  }

  QLabel* heading_;
  QTableWidget* table_;
  QWidget* box_;
  QVector<RowData> rows_;
  bool rebuild_ = true;
  bool withRun_ = false;
};

}  // namespace

ViewWidget* ViewWidget::create(int run, const lab::ViewSpec& spec, QWidget* parent) {
  ViewWidget* w = nullptr;
  switch (spec.kind) {
    case lab::ViewKind::Line:
    case lab::ViewKind::StackedArea: w = new LineView(spec, parent); break;
    case lab::ViewKind::Bars: w = new BarsView(spec, parent); break;
    case lab::ViewKind::Timeline: w = new TimelineView(spec, parent); break;
    case lab::ViewKind::Table: w = new TableView(spec, parent); break;
  }
  w->declare(run, spec);
  return w;
}

}  // namespace gpulab::app
