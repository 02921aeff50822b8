#include "app/gui/cell_views.h"

namespace gpulab::app {

void CellViews::setDevice(const QString& deviceName, bool emulated) {
  device_ = deviceName;
  emulated_ = emulated;
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
                                  .note = "torch.cuda.memory_allocated() and memory_reserved() every 0.1 s while the cell runs"});
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

QVector<lab::Update> CellViews::memory(double seconds, qint64 allocated, qint64 reserved) const {
  return {lab::Point{.view = kMemoryView, .series = "allocated", .x = {seconds}, .y = static_cast<double>(allocated)},
          lab::Point{.view = kMemoryView, .series = "reserved", .x = {seconds}, .y = static_cast<double>(reserved)}};
}

}  // namespace gpulab::app
