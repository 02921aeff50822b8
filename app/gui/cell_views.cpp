#include "app/gui/cell_views.h"

#include <optional>

#include "app/course/lab_json.h"
#include "app/gui/plot_panel.h"

namespace gpulab::app {

namespace {

// The engine's memory categories (engine/memory/memory_events.h), stacked from the bottom: what the
// model holds, then what each step adds, then the rest.
constexpr const char* kCategories[] = {"parameter", "gradient", "optimizer_state", "activation", "input_batch", "workspace", "other"};

}  // namespace

CellViews::CellViews(notebook::KernelProcess& kernel, PlotPanel& plots, QObject* parent) : QObject(parent), plots_(plots) {
  using notebook::KernelProcess;
  connect(&kernel, &KernelProcess::ready, this, [this](const QString&, bool cuda, const QString& device, bool emulated) {
    device_ = cuda ? device : "cpu";
    emulated_ = emulated;
  });
  connect(&kernel, &KernelProcess::started, this, [this](const QString& cell) {
    checker_ = lab::UpdateChecker();
    plots_.beginRun({{"cell", cell.toStdString()}});
    emit runStarted();
    draw(started());
  });
  connect(&kernel, &KernelProcess::labUpdate, this, &CellViews::fromCell);
  connect(&kernel, &KernelProcess::logged, this,
          [this](const QString&, qint64 step, const QMap<QString, double>& values) { draw(logged(step, values)); });
  connect(&kernel, &KernelProcess::memory, this,
          [this](const QString&, double t, qint64 allocated, qint64 reserved, const QMap<QString, qint64>& categories) {
            draw(memory(t, allocated, reserved, categories));
          });
  connect(&kernel, &KernelProcess::finished, this, [this](const QString&, const notebook::CellResult& result) {
    plots_.endRun(result.status == notebook::CellResult::Status::Ok ? QString() : result.errorType.isEmpty() ? "ended" : result.errorType);
  });
}

void CellViews::draw(const QVector<lab::Update>& updates) { plots_.addBatch(MetricBatch{updates}); }

// lab.view(...), lab.point(...) from a cell: decoded and checked as a lab's updates are.
void CellViews::fromCell(const QString& cellId, const QJsonObject& json) {
  QString why;
  std::optional<lab::Update> update = course::updateFromJson(json, &why);
  try {
    if (update) checker_.check(*update);
  } catch (const std::exception& e) {
    update.reset();
    why = QString::fromStdString(e.what());
  }
  if (update) draw({*update});
  else emit refused(cellId, "lab." + json.value("event").toString() + "(): " + why);
}

QVector<lab::Update> CellViews::started() {
  series_.clear();
  QVector<lab::Update> updates;
  if (device_ == "cpu") {
    updates.push_back(lab::RunDevice{.device = "cpu", .label = "cpu"});
    return updates;
  }
  // As the labs label their device (short: it is in the status bar and the views' titles).
  const std::string label = emulated_ ? "cuda:0 (emulated GPU — runs on your CPU)" : "cuda:0 (" + device_.toStdString() + ")";
  updates.push_back(lab::RunDevice{.device = "cuda:0", .label = label, .emulated = emulated_});
  updates.push_back(lab::ViewSpec{.id = kMemoryView,
                                  .title = "cuda:0 memory",
                                  .kind = lab::ViewKind::Line,
                                  .x = {{"time in the cell", "s"}},
                                  .y = {"bytes", "bytes"},
                                  .yFromZero = true,
                                  .series = {{"allocated", "allocated (live tensors)"},
                                             {"reserved", "reserved (the caching allocator's segments)", lab::SeriesStyle::Dashed}},
                                  .note = "torch.cuda.memory_allocated() and memory_reserved(): at the cell's start and end, and every 20 ms while it runs (less often as a long cell goes on)"});
  lab::ViewSpec byCategory{.id = kCategoryView,
                           .title = "cuda:0 memory by category",
                           .kind = lab::ViewKind::StackedArea,
                           .x = {{"time in the cell", "s"}},
                           .y = {"bytes", "bytes"},
                           .yFromZero = true,
                           .note = "Live tensors by what they are for, as the engine tags them (a module's forward: activations; "
                                   "backward: gradients; optimizer.step(): its state; model.to(): parameters), followed since the "
                                   "session started; at the cell's start and end, and every 20 ms while it runs"};
  for (const char* name : kCategories) {
    QString label = name;
    byCategory.series.push_back({name, label.replace('_', ' ').toStdString()});
  }
  byCategory.series.push_back({"reserved", "reserved", lab::SeriesStyle::Dashed, true});
  updates.push_back(byCategory);
  return updates;
}

lab::ViewSpec CellViews::logView() const {
  lab::ViewSpec spec{.id = kLogView,
                     .title = "Logged",
                     .kind = lab::ViewKind::Line,
                     .x = {{"step", ""}},
                     .y = {"value", ""},
                     .note = "What the cell reported with lab.log(name=value), one series per name"};
  for (const QString& name : series_) spec.series.push_back({name.toStdString(), name.toStdString()});
  return spec;
}

QVector<lab::Update> CellViews::logged(qint64 step, const QMap<QString, double>& values) {
  QVector<lab::Update> updates;
  bool added = false;
  for (auto it = values.begin(); it != values.end(); ++it) {
    if (series_.contains(it.key())) continue;
    series_.append(it.key());
    added = true;
  }
  if (added) updates.push_back(logView());
  for (auto it = values.begin(); it != values.end(); ++it)
    updates.push_back(lab::Point{.view = kLogView, .series = it.key().toStdString(), .x = {static_cast<double>(step)}, .y = it.value()});
  return updates;
}

QVector<lab::Update> CellViews::memory(double seconds, qint64 allocated, qint64 reserved, const QMap<QString, qint64>& categories) const {
  QVector<lab::Update> updates{lab::Point{.view = kMemoryView, .series = "allocated", .x = {seconds}, .y = static_cast<double>(allocated)},
                               lab::Point{.view = kMemoryView, .series = "reserved", .x = {seconds}, .y = static_cast<double>(reserved)}};
  if (categories.isEmpty()) return updates;
  for (const char* name : kCategories)
    updates.push_back(lab::Point{.view = kCategoryView, .series = name, .x = {seconds}, .y = static_cast<double>(categories.value(name))});
  updates.push_back(lab::Point{.view = kCategoryView, .series = "reserved", .x = {seconds}, .y = static_cast<double>(reserved)});
  return updates;
}

}  // namespace gpulab::app
