#include "app/gui/plot_panel.h"
#include "app/gui/focus_order.h"
#include "app/gui/theme.h"

#include <QCheckBox>
#include <QDir>
#include <QFileDialog>
#include <QStandardPaths>
#include <QRegularExpression>
#include <QFileInfo>
#include <QHBoxLayout>
#include <QHeaderView>
#include <QMenu>
#include <QPushButton>
#include <QTabBar>
#include <QTabWidget>
#include <QTableWidget>
#include <QVBoxLayout>
#include <algorithm>
#include <set>
#include <qcustomplot.h>

#include "app/gui/units.h"

namespace gpulab::app {

namespace {

// Tabs that shorten their titles ("...") to fit, but not below their first kReadable characters:
// six tabs of a lab in the window's run views shrank to "H...", "Me...", and the three timelines of
// lesson 12, all "Timeline: ...", could not be told apart (issue 48 §4.1, §4.2). Past that the bar
// scrolls. The tab's tooltip has the whole title.
class ReadableTabBar final : public QTabBar {
 public:
  static constexpr int kReadable = 14;

 protected:
  QSize minimumTabSizeHint(int index) const override {
    QSize size = QTabBar::minimumTabSizeHint(index);
    const QSize full = tabSizeHint(index);
    const QString text = tabText(index);
    const int padding = full.width() - fontMetrics().horizontalAdvance(text);
    const int readable = padding + fontMetrics().horizontalAdvance(text.left(kReadable) + QChar(0x2026));
    size.setWidth(std::min(full.width(), std::max(size.width(), readable)));
    return size;
  }
};

class ViewTabs final : public QTabWidget {
 public:
  explicit ViewTabs(QWidget* parent) : QTabWidget(parent) { setTabBar(new ReadableTabBar); }
};

// The view an update draws into; nullptr for the updates outside the views.
const std::string* viewOf(const lab::Update& update) {
  return std::visit([](const auto& u) -> const std::string* {
    if constexpr (requires { u.view; }) return &u.view;
    else return nullptr;
  }, update);
}

}  // namespace

PlotPanel::PlotPanel(QWidget* parent) : QWidget(parent) {
  auto* layout = new QVBoxLayout(this);
  layout->setContentsMargins(0, 0, 0, 0);
  tabs_ = new ViewTabs(this);
  // Every view's tab in sight where they fit: titles shortened with "..." (each tab's tooltip has its
  // whole title), down to their first words (ReadableTabBar); past that, the bar scrolls.
  tabs_->setElideMode(Qt::ElideRight);
  tabs_->setUsesScrollButtons(true);
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
  table_->setAccessibleName("Measurements");
  tabs_->setAccessibleName("Views");
  layout->addWidget(tabs_, 1);

  auto* options = new QHBoxLayout;
  overlay_ = new QCheckBox("Overlay runs", this);
  overlay_->setToolTip("Keep the curves of earlier runs to compare them, e.g. two batch sizes or CPU vs GPU: runs of the Run chosen below; another Run starts afresh");
  options->addWidget(overlay_);
  reference_ = new QCheckBox("Compare with a real GPU", this);
  reference_->setVisible(false);
  // Hidden, it keeps its place: the row -- and so the run area's smallest width -- is the same in a
  // lesson with a reference run and one without (issue 48, 4.1: the splitter moved 65 px when it appeared).
  QSizePolicy keepPlace = reference_->sizePolicy();
  keepPlace.setRetainSizeWhenHidden(true);
  reference_->setSizePolicy(keepPlace);
  connect(reference_, &QCheckBox::toggled, this, &PlotPanel::setShowReference);
  options->addWidget(reference_);
  options->addStretch();
  // One Export button with a menu of the three formats: three buttons took a third of the row.
  exportButton_ = new QPushButton("Export", this);
  exportButton_->setObjectName("exportButton");
  exportButton_->setToolTip("Export the view shown as a PNG image, a PDF or its data as CSV");
  auto* formats = new QMenu(exportButton_);
  // (Not a structured binding: clang 14, the sanitizer builds' compiler, cannot capture one.)
  for (const std::pair<QString, QString>& format : {std::pair<QString, QString>{"PNG", "PNG image…"}, {"PDF", "PDF…"}, {"CSV", "CSV data…"}}) {
    const QString kind = format.first;
    QAction* a = formats->addAction(format.second, this, [this, kind] { exportShown(kind); });
    a->setObjectName("export" + kind);
  }
  exportButton_->setMenu(formats);
  options->addWidget(exportButton_);
  layout->addLayout(options);
  connect(tabs_, &QTabWidget::currentChanged, this, [this] {
    exportButton_->setEnabled(!shownView().isEmpty());
    replotIfDirty();  // a hidden view catches up when shown
  });
  exportButton_->setEnabled(false);
  // 10 Hz: live enough for a curve, and the drawing is what the window costs the run. On a machine whose
  // CPUs are two hyperthreads of one core, the GUI thread's drawing slows the lab's thread beside it:
  // at 30 Hz the training ran at 84.8-92% of its headless speed (gpulab-bench-gui, 2026-11-25/26), at
  // 10 Hz at 96.6-99.1% (2026-11-26), the GUI thread busy 12% of the run instead of 15%.
  replot_.setInterval(100);
  connect(&replot_, &QTimer::timeout, this, &PlotPanel::replotIfDirty);
  replot_.start();
}

void PlotPanel::setOverlay(bool overlay) { overlay_->setChecked(overlay); }

// ---- Runs ----------------------------------------------------------------------------------------

void PlotPanel::beginRun(const Settings& settings, const QString& block) {
  const bool anotherBlock = std::any_of(runs_.begin(), runs_.end(), [&](const Run& r) { return r.block != block; });
  if (!overlay_->isChecked() || anotherBlock) {
    for (const Run& r : runs_) removeRun(r.id);
    runs_.clear();
  }
  currentRun_ = nextRun_++;
  Run run;
  run.id = currentRun_;
  run.settings = settings;
  run.block = block;
  runs_.append(run);
  restyle();
  rebuildTable();
}

void PlotPanel::addBatch(const MetricBatch& batch) {
  if (currentRun_ == 0) beginRun({});
  apply(currentRun_, batch.updates);
}

void PlotPanel::endRun(const QString& error) {
  for (Run& r : runs_)
    if (r.id == currentRun_) r.failed = !error.isEmpty();
  restyle();
  rebuildTable();
  pruneViews();
}

void PlotPanel::clearRuns() {
  for (const Run& r : runs_) removeRun(r.id);
  runs_.clear();
  currentRun_ = 0;
  restyle();
  rebuildTable();
}

void PlotPanel::clearViews() {
  clearRuns();
  pruneViews();  // a reference's views stay with it
}

void PlotPanel::removeRun(int run) {
  for (const Page& p : views_) p.view->removeRun(run);
  rows_.removeIf([&](const MeasurementRow& r) { return r.run == run; });
}

void PlotPanel::apply(int run, const QVector<lab::Update>& updates) {
  bool measured = false;
  for (const lab::Update& u : updates) {
    if (const auto* spec = std::get_if<lab::ViewSpec>(&u)) {
      declareView(run, *spec);
    } else if (const std::string* id = viewOf(u)) {
      if (const Page* p = page(*id)) p->view->add(run, u);
    } else if (const auto* m = std::get_if<lab::Measurement>(&u)) {
      rows_.append({run, QString::fromStdString(m->name), formatQuantity(m->value, m->unit)});
      measured = true;
    } else if (const auto* d = std::get_if<lab::RunDevice>(&u)) {
      for (Run& r : runs_) {
        if (r.id != run) continue;
        r.device = QString::fromStdString(d->label.empty() ? d->device : d->label);
        r.emulated = d->emulated;
      }
      if (run == currentRun_) restyle();
    }
    // Messages, Progress and Records are the run panel's (and the CLI's), not drawn here.
  }
  if (measured) rebuildTable();
}

void PlotPanel::declareView(int run, const lab::ViewSpec& spec) {
  const QString title = QString::fromStdString(spec.title.empty() ? spec.id : spec.title);
  auto it = std::find_if(views_.begin(), views_.end(), [&](const Page& p) { return p.id == spec.id; });
  if (it != views_.end() && it->view->spec().kind == spec.kind) {
    it->view->declare(run, spec);
    tabs_->setTabText(tabs_->indexOf(it->view), title);
    tabs_->setTabToolTip(tabs_->indexOf(it->view), title);
    return;
  }
  auto* view = ViewWidget::create(run, spec);
  view->setObjectName(QString::fromStdString(spec.id));
  view->setRunStyles(styles_);
  for (const Run& r : runs_)
    if (r.id == currentRun_) view->setDevice(r.device, r.emulated);
  if (it != views_.end()) {
    // The same id as another kind: the new declaration replaces the view, in its place.
    const int index = tabs_->indexOf(it->view);
    const bool shown = tabs_->currentIndex() == index;
    delete it->view;
    it->view = view;
    tabs_->insertTab(index, view, title);
    tabs_->setTabToolTip(index, title);
    if (shown) tabs_->setCurrentIndex(index);
    orderFocus();
    return;
  }
  const bool first = views_.empty();
  tabs_->insertTab(static_cast<int>(views_.size()), view, title);
  tabs_->setTabToolTip(static_cast<int>(views_.size()), title);
  views_.push_back({spec.id, view});
  if (first) tabs_->setCurrentIndex(0);
  orderFocus();
}

void PlotPanel::orderFocus() {
  // A view's controls (its x axis, a table) right after the views' tabs, in the tabs' order: made
  // after the window, they would come after the run area.
  QWidget* last = tabs_;
  for (int i = 0; i < tabs_->count(); ++i) last = placeAfter(last, focusables(tabs_->widget(i)));
}

const PlotPanel::Page* PlotPanel::page(const std::string& id) const {
  for (const Page& p : views_)
    if (p.id == id) return &p;
  return nullptr;
}

void PlotPanel::pruneViews() {
  for (auto it = views_.begin(); it != views_.end();) {
    if (it->view->declared()) {
      ++it;
      continue;
    }
    tabs_->removeTab(tabs_->indexOf(it->view));
    delete it->view;
    it = views_.erase(it);
  }
}

// ---- Names and styles -----------------------------------------------------------------------------

void PlotPanel::restyle() {
  // A run is named by the settings that differ between the runs shown, or by its number.
  std::set<std::string> keys;
  for (const Run& r : runs_)
    for (const auto& [k, v] : r.settings) keys.insert(k);
  std::vector<std::string> differing;
  for (const std::string& k : keys) {
    auto valueOf = [&](const Run& r) {
      auto it = r.settings.find(k);
      return it == r.settings.end() ? std::optional<std::string>() : std::optional<std::string>(it->second);
    };
    if (std::any_of(runs_.begin(), runs_.end(), [&](const Run& r) { return valueOf(r) != valueOf(runs_.front()); })) differing.push_back(k);
  }
  const bool several = runs_.size() > 1;
  styles_.clear();
  for (int i = 0; i < runs_.size(); ++i) {
    const Run& r = runs_[i];
    QStringList parts;
    for (const std::string& k : differing)
      if (auto it = r.settings.find(k); it != r.settings.end()) parts << QString::fromStdString(k + "=" + it->second);
    QString name;
    if (several) name = parts.isEmpty() ? QString("run %1").arg(i + 1) : parts.join(", ");
    RunStyle style;
    style.run = r.id;
    style.name = name;
    style.colour = i;
    style.failed = r.failed;
    style.several = several;
    styles_.append(style);
  }
  if (refShown_) {
    RunStyle style;
    style.run = kReferenceRun;
    style.name = refLabel_;
    style.shortName = refShort_;
    style.reference = true;
    style.details = refDetails_;
    styles_.append(style);
  }
  // Titles name the current run's device when it is emulated.
  QString device;
  bool emulated = false;
  for (const Run& r : runs_) {
    if (r.id != currentRun_) continue;
    device = r.device;
    emulated = r.emulated;
  }
  for (const Page& p : views_) {
    p.view->setRunStyles(styles_);
    p.view->setDevice(device, emulated);
  }
}

RunStyle PlotPanel::styleOf(int run) const {
  for (const RunStyle& s : styles_)
    if (s.run == run) return s;
  RunStyle style;
  style.run = run;
  return style;
}

void PlotPanel::rebuildTable() {
  // The learner's rows, then the reference's; rows of the same measurement side by side, in order
  // of first appearance.
  QVector<MeasurementRow> rows;
  for (const MeasurementRow& r : rows_)
    if (r.run != kReferenceRun) rows << r;
  if (refShown_)
    for (const MeasurementRow& r : rows_)
      if (r.run == kReferenceRun) rows << r;
  QStringList order;
  for (const MeasurementRow& row : rows)
    if (!order.contains(row.name)) order << row.name;
  std::stable_sort(rows.begin(), rows.end(), [&](const MeasurementRow& a, const MeasurementRow& b) { return order.indexOf(a.name) < order.indexOf(b.name); });
  table_->setRowCount(static_cast<int>(rows.size()));
  for (int r = 0; r < rows.size(); ++r) {
    const RunStyle style = styleOf(rows[r].run);
    const QString run = runTitle(style);
    const QString cells[] = {run, rows[r].name, rows[r].value};
    for (int c = 0; c < 3; ++c) {
      auto* item = new QTableWidgetItem(cells[c]);
      if (style.reference) {
        item->setForeground(theme::ink(theme::Ink::Muted, table_->palette()));
        QFont f = item->font();
        f.setItalic(true);
        item->setFont(f);
        item->setToolTip(refLabel_ + "\n" + refDetails_);
      } else {
        item->setToolTip(run);
      }
      table_->setItem(r, c, item);
    }
  }
}

// ---- Reference runs --------------------------------------------------------------------------------

void PlotPanel::setReference(const course::ReferenceRuns* refs, int index) {
  removeReference();
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
    refShort_ = "reference (" + course::shortGpuName(refs->header.gpu) + ")";
    refDetails_ = refs->details();
    reference_->setToolTip(QString("Adds the same run recorded on a real GPU, dashed and grey:\n%1\n%2\nrun %3: %4")
                               .arg(refLabel_, refDetails_)
                               .arg(run->index)
                               .arg(run->title));
    reference_->setEnabled(true);
    reference_->setVisible(true);
  } else {
    reference_->setVisible(false);
  }
  if (ref_ && reference_->isChecked()) addReference();
  restyle();
  rebuildTable();
}

bool PlotPanel::referenceOffered() const { return !reference_->isHidden() && reference_->isEnabled(); }

void PlotPanel::setShowReference(bool show) {
  if (reference_->isChecked() != show) {
    reference_->setChecked(show);  // comes back here through toggled()
    return;
  }
  removeReference();
  if (show && ref_) {
    addReference();
    // A run that only measures (nothing drawn): its numbers are what there is to compare.
    int drawn = 0;
    for (const Page& p : views_) drawn += p.view->pointCount(kReferenceRun);
    if (drawn == 0 && std::any_of(rows_.begin(), rows_.end(), [](const MeasurementRow& r) { return r.run == kReferenceRun; }))
      tabs_->setCurrentWidget(table_);
  }
  restyle();
  rebuildTable();
}

void PlotPanel::addReference() {
  if (!ref_ || refShown_) return;
  refShown_ = true;
  restyle();  // its style first: its graphs are drawn grey from the start
  apply(kReferenceRun, ref_->updates);
}

void PlotPanel::removeReference() {
  if (!refShown_) return;
  refShown_ = false;
  removeRun(kReferenceRun);
  pruneViews();
}

// ---- Drawing and the test hooks ----------------------------------------------------------------------

void PlotPanel::replotIfDirty() {
  // Only the view on screen is drawn; the others are stale until their tab is shown.
  if (ViewWidget* v = view(shownView()); v && v->dirty()) v->refresh();
}

QStringList PlotPanel::viewIds() const {
  QStringList ids;
  for (const Page& p : views_) ids << QString::fromStdString(p.id);
  return ids;
}

ViewWidget* PlotPanel::view(const QString& id) const {
  const Page* p = page(id);
  return p ? p->view : nullptr;
}

QWidget* PlotPanel::viewWidget(const QString& id) const {
  ViewWidget* v = view(id);
  return v ? v->view() : nullptr;
}

QCustomPlot* PlotPanel::plot(const QString& id) const {
  ViewWidget* v = view(id);
  return v ? v->plot() : nullptr;
}

void PlotPanel::showView(const QString& id) {
  if (const Page* p = page(id)) tabs_->setCurrentWidget(p->view);
}

QString PlotPanel::shownView() const {
  for (const Page& p : views_)
    if (p.view == tabs_->currentWidget()) return QString::fromStdString(p.id);
  return {};
}

int PlotPanel::pointCount(const QString& id) const {
  ViewWidget* v = view(id);
  return v && currentRun_ != 0 ? v->pointCount(currentRun_) : 0;  // 0 is the reference's
}

QStringList PlotPanel::legendEntries(const QString& id) const {
  ViewWidget* v = view(id);
  if (v && v->dirty()) v->refresh();  // the legend follows the data when drawn
  return v ? v->legendEntries() : QStringList();
}

int PlotPanel::markerCount(const QString& id) const {
  ViewWidget* v = view(id);
  return v ? v->markerCount() : 0;
}

QString PlotPanel::toolTipAt(const QString& id, const QPointF& pos) const {
  ViewWidget* v = view(id);
  return v ? v->toolTipAt(pos) : QString();
}

bool PlotPanel::exportPng(const QString& id, const QString& path) const {
  ViewWidget* v = view(id);
  return v && v->exportPng(path);
}

bool PlotPanel::exportPdf(const QString& id, const QString& path) const {
  ViewWidget* v = view(id);
  return v && v->exportPdf(path);
}

bool PlotPanel::exportCsv(const QString& id, const QString& path) const {
  ViewWidget* v = view(id);
  return v && v->exportCsv(path);
}

QString PlotPanel::askSavePath(const QString& title, const QString& filter, const QString& ext, const QString& name) {
  // The dialog opens on a file name, in the Documents folder: "gpulab-loss.png", not an empty field.
  QString base = name;
  base.replace(QRegularExpression("[^A-Za-z0-9._-]+"), "-");
  lastSuggestion_ = QDir(QStandardPaths::writableLocation(QStandardPaths::DocumentsLocation)).filePath("gpulab-" + base + "." + ext);
  QString path = askPath_ ? askPath_(filter) : QFileDialog::getSaveFileName(this, title, lastSuggestion_, filter);
  if (path.isEmpty()) return {};
  // A name typed without the extension gets it (the dialog does not add it everywhere).
  if (QFileInfo(path).suffix().compare(ext, Qt::CaseInsensitive) != 0) path += "." + ext;
  return path;
}

void PlotPanel::exportShown(const QString& kind) {
  const QString id = shownView();
  ViewWidget* v = view(id);
  if (!v) return;
  const QString path = askSavePath("Export " + v->title(), kind + " (*." + kind.toLower() + ")", kind.toLower(), id);
  if (path.isEmpty()) return;
  const bool ok = kind == "PNG" ? exportPng(id, path) : kind == "PDF" ? exportPdf(id, path) : exportCsv(id, path);
  const QString shown = QDir::toNativeSeparators(QFileInfo(path).absoluteFilePath());
  emit statusMessage(ok ? QString("Exported “%1” (%2) to %3").arg(v->title(), kind, shown)
                        : QString("Could not export “%1” to %2").arg(v->title(), shown));
}

}  // namespace gpulab::app
