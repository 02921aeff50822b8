#include "app/course/lab_json.h"

#include <QJsonArray>
#include <QStringList>
#include <cmath>
#include <type_traits>

namespace gpulab::course {
namespace {

QString q(const std::string& s) { return QString::fromStdString(s); }

QJsonValue valueJson(const lab::Value& v) {
  return std::visit(
      [](const auto& x) -> QJsonValue {
        using T = std::decay_t<decltype(x)>;
        if constexpr (std::is_same_v<T, std::int64_t>) return qint64(x);
        else if constexpr (std::is_same_v<T, std::string>) return q(x);
        else return x;
      },
      v);
}

// A JSON number is an integer when it is one exactly and small enough to be read back as one.
lab::Value valueFrom(const QJsonValue& v) {
  if (v.isBool()) return v.toBool();
  if (v.isString()) return v.toString().toStdString();
  const double d = v.toDouble();
  if (std::isfinite(d) && d == std::floor(d) && std::fabs(d) <= 9007199254740992.0) return static_cast<std::int64_t>(d);
  return d;
}

QJsonArray numbers(const std::vector<double>& xs) {
  QJsonArray a;
  for (double x : xs) a.append(x);
  return a;
}

QJsonObject axisJson(const lab::Axis& a) {
  QJsonObject o{{"label", q(a.label)}, {"unit", q(a.unit)}};
  if (a.logarithmic) o["log"] = true;  // written only when set: older readers see the axes they know
  return o;
}

// Sets `out` to the key's string; false when it is missing or not a string.
bool text(const QJsonObject& o, const char* key, std::string& out) {
  const QJsonValue v = o.value(key);
  if (!v.isString()) return false;
  out = v.toString().toStdString();
  return true;
}

bool number(const QJsonObject& o, const char* key, double& out) {
  const QJsonValue v = o.value(key);
  if (!v.isDouble()) return false;
  out = v.toDouble();
  return true;
}

bool numberList(const QJsonObject& o, const char* key, std::vector<double>& out) {
  const QJsonValue v = o.value(key);
  if (!v.isArray()) return false;
  for (const QJsonValue& x : v.toArray()) {
    if (!x.isDouble()) return false;
    out.push_back(x.toDouble());
  }
  return true;
}

bool axisFrom(const QJsonValue& v, lab::Axis& out) {
  if (!v.isObject()) return false;
  const QJsonObject o = v.toObject();
  if (o.contains("log")) {
    if (!o.value("log").isBool()) return false;
    out.logarithmic = o.value("log").toBool();
  }
  return text(o, "label", out.label) && text(o, "unit", out.unit);
}

bool axesFrom(const QJsonObject& o, const char* key, std::vector<lab::Axis>& out) {
  if (!o.contains(key)) return true;  // optional
  const QJsonValue v = o.value(key);
  if (!v.isArray()) return false;
  for (const QJsonValue& a : v.toArray()) {
    lab::Axis axis;
    if (!axisFrom(a, axis)) return false;
    out.push_back(axis);
  }
  return true;
}

// Record fields: "a.b" nests; nested objects are read back flat.
void insertField(QJsonObject& o, const QString& name, const QJsonValue& v) {
  const qsizetype dot = name.indexOf('.');
  if (dot < 0) {
    o[name] = v;
    return;
  }
  QJsonObject inner = o.value(name.left(dot)).toObject();
  insertField(inner, name.mid(dot + 1), v);
  o[name.left(dot)] = inner;
}

void flatten(const QJsonObject& o, const QString& prefix, std::vector<std::pair<std::string, lab::Value>>& out) {
  for (auto it = o.begin(); it != o.end(); ++it) {
    const QString name = prefix.isEmpty() ? it.key() : prefix + "." + it.key();
    if (prefix.isEmpty() && it.key() == "event") continue;
    if (it->isObject()) flatten(it->toObject(), name, out);
    else if (!it->isArray() && !it->isNull()) out.emplace_back(name.toStdString(), valueFrom(*it));
  }
}

}  // namespace

QJsonObject toJson(const lab::Update& update) {
  return std::visit(
      [](const auto& u) -> QJsonObject {
        using T = std::decay_t<decltype(u)>;
        if constexpr (std::is_same_v<T, lab::ViewSpec>) {
          QJsonArray x, series, columns;
          for (const lab::Axis& a : u.x) x.append(axisJson(a));
          for (const lab::SeriesSpec& s : u.series) {
            QJsonObject so{{"id", q(s.id)}, {"label", q(s.label)}, {"style", q(toString(s.style))}};
            if (s.overlay) so["overlay"] = true;
            series.append(so);
          }
          for (const lab::Axis& c : u.columns) columns.append(axisJson(c));
          QJsonObject o{{"event", "view"}, {"id", q(u.id)}, {"title", q(u.title)}, {"kind", q(toString(u.kind))}, {"x", x},
                        {"y", axisJson(u.y)}, {"y_from_zero", u.yFromZero}, {"series", series}, {"columns", columns}};
          if (!u.note.empty()) o["note"] = q(u.note);
          return o;
        } else if constexpr (std::is_same_v<T, lab::Point>) {
          return {{"event", "point"}, {"view", q(u.view)}, {"series", q(u.series)}, {"x", numbers(u.x)}, {"y", u.y}};
        } else if constexpr (std::is_same_v<T, lab::Marker>) {
          return {{"event", "marker"}, {"view", q(u.view)}, {"x", numbers(u.x)}, {"label", q(u.label)}, {"kind", q(toString(u.kind))}};
        } else if constexpr (std::is_same_v<T, lab::Level>) {
          return {{"event", "level"}, {"view", q(u.view)}, {"label", q(u.label)}, {"y", u.y}};
        } else if constexpr (std::is_same_v<T, lab::Bar>) {
          return {{"event", "bar"}, {"view", q(u.view)}, {"series", q(u.series)}, {"category", q(u.category)}, {"value", u.value}};
        } else if constexpr (std::is_same_v<T, lab::Row>) {
          QJsonArray cells;
          for (const lab::Value& c : u.cells) cells.append(valueJson(c));
          return {{"event", "row"}, {"view", q(u.view)}, {"cells", cells}};
        } else if constexpr (std::is_same_v<T, lab::Span>) {
          return {{"event", "span"}, {"view", q(u.view)}, {"lane", q(u.lane)}, {"label", q(u.label)}, {"start", u.start}, {"end", u.end}};
        } else if constexpr (std::is_same_v<T, lab::RunDevice>) {
          return {{"event", "device"}, {"device", q(u.device)}, {"label", q(u.label)}, {"emulated", u.emulated}};
        } else if constexpr (std::is_same_v<T, lab::Message>) {
          return {{"event", "message"}, {"level", q(toString(u.kind))}, {"text", q(u.text)}};
        } else if constexpr (std::is_same_v<T, lab::Measurement>) {
          return {{"event", "measurement"}, {"name", q(u.name)}, {"value", u.value}, {"unit", q(u.unit)}};
        } else if constexpr (std::is_same_v<T, lab::Progress>) {
          return {{"event", "progress"}, {"done", u.done}, {"total", u.total}, {"label", q(u.label)}};
        } else {
          QJsonObject o{{"event", q(u.event)}};
          for (const auto& [name, value] : u.fields) insertField(o, q(name), valueJson(value));
          return o;
        }
      },
      update);
}

std::optional<lab::Update> updateFromJson(const QJsonObject& o, QString* error) {
  auto fail = [&](const QString& why) -> std::optional<lab::Update> {
    if (error) *error = why;
    return std::nullopt;
  };
  const QString event = o.value("event").toString();
  if (event.isEmpty()) return fail("no \"event\" (a string)");
  if (event == "view") {
    lab::ViewSpec v;
    std::string kind;
    if (!text(o, "id", v.id) || !text(o, "title", v.title) || !text(o, "kind", kind)) return fail("a view needs 'id', 'title' and 'kind' (strings)");
    const auto k = lab::parseViewKind(kind);
    if (!k) return fail("unknown view kind '" + q(kind) + "' (line, stacked, bars, table or timeline)");
    v.kind = *k;
    if (!axesFrom(o, "x", v.x) || !axesFrom(o, "columns", v.columns)) return fail("a view's 'x' and 'columns' are lists of {\"label\", \"unit\"} (and an optional \"log\": true)");
    if (o.contains("y") && !axisFrom(o.value("y"), v.y)) return fail("a view's 'y' is {\"label\", \"unit\"} (and an optional \"log\": true)");
    v.yFromZero = o.value("y_from_zero").toBool(false);
    o.contains("note") && text(o, "note", v.note);
    for (const QJsonValue& s : o.value("series").toArray()) {
      lab::SeriesSpec spec;
      std::string style = "line";
      const QJsonObject so = s.toObject();
      if (!text(so, "id", spec.id) || !text(so, "label", spec.label)) return fail("a series needs 'id' and 'label' (strings)");
      if (so.contains("style") && !text(so, "style", style)) return fail("a series' 'style' is a string");
      const auto st = lab::parseSeriesStyle(style);
      if (!st) return fail("unknown series style '" + q(style) + "'");
      spec.style = *st;
      spec.overlay = so.value("overlay").toBool(false);
      v.series.push_back(spec);
    }
    return v;
  }
  if (event == "point") {
    lab::Point p;
    if (!text(o, "view", p.view) || !text(o, "series", p.series) || !numberList(o, "x", p.x) || !number(o, "y", p.y)) {
      return fail("a point needs 'view', 'series' (strings), 'x' (a list of numbers) and 'y' (a number)");
    }
    return p;
  }
  if (event == "marker") {
    lab::Marker m;
    std::string kind = "event";
    if (!text(o, "view", m.view) || !numberList(o, "x", m.x) || !text(o, "label", m.label)) {
      return fail("a marker needs 'view', 'label' (strings) and 'x' (a list of numbers)");
    }
    if (o.contains("kind") && !text(o, "kind", kind)) return fail("a marker's 'kind' is a string");
    const auto k = lab::parseMarkerKind(kind);
    if (!k) return fail("unknown marker kind '" + q(kind) + "'");
    m.kind = *k;
    return m;
  }
  if (event == "level") {
    lab::Level l;
    if (!text(o, "view", l.view) || !text(o, "label", l.label) || !number(o, "y", l.y)) return fail("a level needs 'view', 'label' and 'y'");
    return l;
  }
  if (event == "bar") {
    lab::Bar b;
    if (!text(o, "view", b.view) || !text(o, "series", b.series) || !text(o, "category", b.category) || !number(o, "value", b.value)) {
      return fail("a bar needs 'view', 'series', 'category' (strings) and 'value' (a number)");
    }
    return b;
  }
  if (event == "row") {
    lab::Row r;
    if (!text(o, "view", r.view) || !o.value("cells").isArray()) return fail("a row needs 'view' (a string) and 'cells' (a list)");
    for (const QJsonValue& c : o.value("cells").toArray()) {
      if (c.isArray() || c.isObject() || c.isNull()) return fail("a row's cells are numbers, strings or booleans");
      r.cells.push_back(valueFrom(c));
    }
    return r;
  }
  if (event == "span") {
    lab::Span s;
    if (!text(o, "view", s.view) || !text(o, "lane", s.lane) || !text(o, "label", s.label) || !number(o, "start", s.start) ||
        !number(o, "end", s.end)) {
      return fail("a span needs 'view', 'lane', 'label' (strings), 'start' and 'end' (numbers)");
    }
    return s;
  }
  if (event == "device") {
    lab::RunDevice d;
    if (!text(o, "device", d.device) || !text(o, "label", d.label)) return fail("a device event needs 'device' and 'label' (strings)");
    d.emulated = o.value("emulated").toBool(false);
    return d;
  }
  if (event == "message") {
    lab::Message m;
    std::string level;
    if (!text(o, "level", level) || !text(o, "text", m.text)) return fail("a message needs 'level' and 'text' (strings)");
    const auto k = lab::parseMessageKind(level);
    if (!k) return fail("unknown message level '" + q(level) + "' (info, warning or engine_error)");
    m.kind = *k;
    return m;
  }
  if (event == "measurement") {
    lab::Measurement m;
    if (!text(o, "name", m.name) || !number(o, "value", m.value) || !text(o, "unit", m.unit)) {
      return fail("a measurement needs 'name', 'unit' (strings) and 'value' (a number)");
    }
    return m;
  }
  if (event == "progress") {
    lab::Progress p;
    if (!number(o, "done", p.done) || !number(o, "total", p.total)) return fail("a progress event needs 'done' and 'total' (numbers)");
    o.contains("label") && text(o, "label", p.label);
    return p;
  }
  lab::Record r;
  r.event = event.toStdString();
  flatten(o, {}, r.fields);
  return r;
}

}  // namespace gpulab::course
