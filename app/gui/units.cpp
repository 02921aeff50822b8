#include "app/gui/units.h"

#include <cmath>

#include "engine/memory/caching_allocator.h"

namespace gpulab::app {

namespace {

QString number(double v) {
  if (!std::isfinite(v)) return std::isnan(v) ? QString("nan") : QString(v > 0 ? "inf" : "-inf");
  // Past a billion the digits say nothing (a diverged loss of 4989021085984144423387136): 4.989e+24.
  if (std::abs(v) >= 1e9) return QString::number(v, 'g', 4);
  if (v == std::trunc(v)) return QString::number(static_cast<qint64>(v));
  return std::abs(v) >= 1000 ? QString::number(v, 'f', 0) : QString::number(v, 'g', 4);
}

}  // namespace

QString formatQuantity(double value, const std::string& unit) {
  if (unit == "bytes" && std::isfinite(value)) return QString::fromStdString(formatBytes(static_cast<std::int64_t>(value)));
  if (unit.empty()) return number(value);
  // "2.5x", as the labs' sentences and the challenges write a ratio (issue 27 §4: the table's "2.5×"
  // beside a challenge's "2.5x").
  if (unit == "x") return number(value) + "x";
  return number(value) + " " + QString::fromStdString(unit);
}

QString formatCell(const lab::Value& value, const std::string& unit) {
  if (const auto* i = std::get_if<std::int64_t>(&value)) return formatQuantity(static_cast<double>(*i), unit);
  if (const auto* d = std::get_if<double>(&value)) return formatQuantity(*d, unit);
  if (const auto* b = std::get_if<bool>(&value)) return *b ? "yes" : "no";
  return QString::fromStdString(std::get<std::string>(value));
}

QString axisTitle(const lab::Axis& axis) {
  const QString label = QString::fromStdString(axis.label);
  if (axis.unit.empty() || axis.unit == "bytes") return label;
  const QString unit = "(" + QString::fromStdString(axis.unit) + ")";
  return label.endsWith(unit) ? label : label + " " + unit;
}

QString csvQuote(QString text) {
  text.replace('"', "\"\"");
  return '"' + text + '"';
}

QString csvCell(const lab::Value& value) {
  if (const auto* i = std::get_if<std::int64_t>(&value)) return QString::number(*i);
  if (const auto* d = std::get_if<double>(&value)) return QString::number(*d, 'g', 12);
  if (const auto* b = std::get_if<bool>(&value)) return *b ? "true" : "false";
  return csvQuote(QString::fromStdString(std::get<std::string>(value)));
}

}  // namespace gpulab::app
