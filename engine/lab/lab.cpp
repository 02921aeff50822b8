#include "engine/lab/lab.h"
#include "engine/lab/lab_schema.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <string_view>
#include <type_traits>

#include "engine/core/errors.h"
#include "engine/core/number_format.h"

namespace gpulab::lab {

std::string describeRange(const ParamSpec& s) {
  switch (s.type) {
    case ParamType::Int:  // integers exactly: [0, 2147483647], not [0, 2.14748e+09]
      return "a number in [" + formatNumber(static_cast<std::int64_t>(s.min)) + ", " + formatNumber(static_cast<std::int64_t>(s.max)) + "]";
    case ParamType::Float: return "a number in [" + formatNumber(s.min) + ", " + formatNumber(s.max) + "]";
    case ParamType::Bool: return "true or false";
    case ParamType::Choice: {
      std::string out = "one of";
      for (std::size_t i = 0; i < s.choices.size(); ++i) out += (i ? ", " : " ") + s.choices[i];
      return out;
    }
    case ParamType::Text: return "text";
  }
  return {};
}

namespace {

// `shown` is the value as the caller wrote it (for set) or as formatNumber prints it (for setValue).
[[noreturn]] void invalid(const ParamSpec& s, const std::string& shown, const std::string& why = {}) {
  throw ValueError("invalid value '" + shown + "' for parameter '" + s.name + "': " + (why.empty() ? "expected " + describeRange(s) : why));
}

}  // namespace

ParamSpec intParam(std::string name, std::int64_t def, std::int64_t min, std::int64_t max, std::string description) {
  return ParamSpec{std::move(name), ParamType::Int, def, std::move(description), static_cast<double>(min), static_cast<double>(max), {}, {}, {}, {}};
}
ParamSpec floatParam(std::string name, double def, double min, double max, std::string description) {
  return ParamSpec{std::move(name), ParamType::Float, def, std::move(description), min, max, {}, {}, {}, {}};
}
ParamSpec boolParam(std::string name, bool def, std::string description) {
  return ParamSpec{std::move(name), ParamType::Bool, def, std::move(description), 0, 1, {}, {}, {}, {}};
}
ParamSpec choiceParam(std::string name, std::string def, std::vector<std::string> choices, std::string description) {
  return ParamSpec{std::move(name), ParamType::Choice, std::move(def), std::move(description), 0, 0, std::move(choices), {}, {}, {}};
}
ParamSpec textParam(std::string name, std::string def, std::string description, TextValidator validate) {
  return ParamSpec{std::move(name), ParamType::Text, std::move(def), std::move(description), 0, 0, {}, std::move(validate), {}, {}};
}

Params::Params(std::vector<ParamSpec> specs) : specs_(std::move(specs)) {
  for (const auto& s : specs_) values_[s.name] = s.defaultValue;
}

const ParamSpec& Params::spec(const std::string& name) const {
  for (const auto& s : specs_)
    if (s.name == name) return s;
  std::string known;
  for (const auto& s : specs_) known += (known.empty() ? "" : ", ") + s.name;
  throw ValueError("unknown parameter '" + name + "' (this lab has: " + known + ")");
}

void Params::set(const std::string& name, const std::string& text) {
  const ParamSpec& s = spec(name);
  switch (s.type) {
    case ParamType::Int: {
      std::int64_t v = 0;
      const ParseStatus status = parseNumber(text, v);
      if (status == ParseStatus::OutOfRange) invalid(s, text, "out of range; expected " + describeRange(s));
      if (status != ParseStatus::Ok) invalid(s, text);
      check(s, ParamValue(v), text);
      return;
    }
    case ParamType::Float: {
      // Not strtod: it reads "0.001" as 0 under a comma-decimal locale (de_DE, fr_FR, ...).
      double v = 0;
      const ParseStatus status = parseNumber(text, v);
      if (status == ParseStatus::OutOfRange) invalid(s, text, "out of range; expected " + describeRange(s));
      if (status != ParseStatus::Ok) invalid(s, text);
      check(s, ParamValue(v), text);
      return;
    }
    case ParamType::Bool:
      if (text == "true" || text == "1" || text == "on") check(s, ParamValue(true), text);
      else if (text == "false" || text == "0" || text == "off") check(s, ParamValue(false), text);
      else invalid(s, text);
      return;
    case ParamType::Choice:
    case ParamType::Text: check(s, ParamValue(text), text); return;
  }
}

void Params::setValue(const std::string& name, const ParamValue& value) {
  const ParamSpec& s = spec(name);
  std::string shown;
  if (const auto* i = std::get_if<std::int64_t>(&value)) shown = formatNumber(*i);
  else if (const auto* d = std::get_if<double>(&value)) shown = formatNumber(*d);
  else if (const auto* b = std::get_if<bool>(&value)) shown = *b ? "true" : "false";
  else shown = std::get<std::string>(value);
  check(s, value, shown);
}

void Params::check(const ParamSpec& s, const ParamValue& value, const std::string& shown) {
  ParamValue v = value;
  if (s.type == ParamType::Float && std::holds_alternative<std::int64_t>(v)) v = static_cast<double>(std::get<std::int64_t>(v));
  switch (s.type) {
    case ParamType::Int: {
      if (!std::holds_alternative<std::int64_t>(v)) invalid(s, shown, "not an integer; expected " + describeRange(s));
      const auto x = std::get<std::int64_t>(v);
      if (x < s.min || x > s.max) invalid(s, shown);
      break;
    }
    case ParamType::Float: {
      if (!std::holds_alternative<double>(v)) invalid(s, shown, "not a number; expected " + describeRange(s));
      const double x = std::get<double>(v);
      if (!std::isfinite(x) || x < s.min || x > s.max) invalid(s, shown);
      break;
    }
    case ParamType::Bool:
      if (!std::holds_alternative<bool>(v)) invalid(s, shown);
      break;
    case ParamType::Choice: {
      if (!std::holds_alternative<std::string>(v)) invalid(s, shown);
      const auto& x = std::get<std::string>(v);
      bool ok = false;
      for (const auto& c : s.choices) ok = ok || c == x;
      if (!ok) invalid(s, shown);
      break;
    }
    case ParamType::Text:
      if (!std::holds_alternative<std::string>(v)) invalid(s, shown, "not text");
      if (s.validate) {
        try {
          s.validate(std::get<std::string>(v));
        } catch (const Error& e) {
          invalid(s, shown, e.what());
        }
      }
      break;
  }
  values_[s.name] = v;
}

const ParamValue& Params::value(const std::string& name) const {
  spec(name);
  return values_.at(name);
}

std::int64_t Params::getInt(const std::string& name) const { return std::get<std::int64_t>(value(name)); }
double Params::getFloat(const std::string& name) const { return std::get<double>(value(name)); }
bool Params::getBool(const std::string& name) const { return std::get<bool>(value(name)); }
const std::string& Params::getString(const std::string& name) const { return std::get<std::string>(value(name)); }

}  // namespace gpulab::lab

namespace gpulab::lab {

const Value* Record::find(const std::string& name) const {
  for (const auto& [key, value] : fields) {
    if (key == name) return &value;
  }
  return nullptr;
}

double Record::number(const std::string& name, double fallback) const {
  const Value* v = find(name);
  if (!v) return fallback;
  if (const auto* i = std::get_if<std::int64_t>(v)) return static_cast<double>(*i);
  if (const auto* d = std::get_if<double>(v)) return *d;
  if (const auto* b = std::get_if<bool>(v)) return *b ? 1.0 : 0.0;
  return fallback;
}

namespace {

// One table per enum: the names the JSON form, the CLI and error messages use.
template <class E, std::size_t N>
using Names = std::array<std::pair<E, const char*>, N>;
constexpr Names<ViewKind, 5> kViewKinds{{{ViewKind::Line, "line"}, {ViewKind::StackedArea, "stacked"},
                                         {ViewKind::Bars, "bars"}, {ViewKind::Table, "table"}, {ViewKind::Timeline, "timeline"}}};
constexpr Names<SeriesStyle, 4> kSeriesStyles{{{SeriesStyle::Line, "line"}, {SeriesStyle::Dashed, "dashed"},
                                               {SeriesStyle::Points, "points"}, {SeriesStyle::Steps, "steps"}}};
constexpr Names<MarkerKind, 4> kMarkerKinds{{{MarkerKind::Event, "event"}, {MarkerKind::OutOfMemory, "oom"},
                                             {MarkerKind::EmptyCache, "empty_cache"}, {MarkerKind::Skipped, "skipped"}}};
constexpr Names<MessageKind, 3> kMessageKinds{{{MessageKind::Info, "info"}, {MessageKind::Warning, "warning"},
                                               {MessageKind::EngineError, "engine_error"}}};

template <class E, std::size_t N>
std::string nameOf(const Names<E, N>& names, E value) {
  for (const auto& [e, name] : names) {
    if (e == value) return name;
  }
  return "?";
}

template <class E, std::size_t N>
std::optional<E> valueOf(const Names<E, N>& names, const std::string& text) {
  for (const auto& [e, name] : names) {
    if (text == name) return e;
  }
  return std::nullopt;
}

bool hasSeries(const ViewSpec& v, const std::string& id) {
  for (const SeriesSpec& s : v.series) {
    if (s.id == id) return true;
  }
  return false;
}

}  // namespace

bool isProtocolEvent(const std::string& event) {
  bool used = false;
  schema::forEachUpdate([&](const auto& u) { used = used || event == schema::Fields<std::decay_t<decltype(u)>>::event; });
  return used;
}

std::string toString(ViewKind v) { return nameOf(kViewKinds, v); }
std::string toString(SeriesStyle v) { return nameOf(kSeriesStyles, v); }
std::string toString(MarkerKind v) { return nameOf(kMarkerKinds, v); }
std::string toString(MessageKind v) { return nameOf(kMessageKinds, v); }
std::optional<ViewKind> parseViewKind(const std::string& s) { return valueOf(kViewKinds, s); }
std::optional<SeriesStyle> parseSeriesStyle(const std::string& s) { return valueOf(kSeriesStyles, s); }
std::optional<MarkerKind> parseMarkerKind(const std::string& s) { return valueOf(kMarkerKinds, s); }
std::optional<MessageKind> parseMessageKind(const std::string& s) { return valueOf(kMessageKinds, s); }

const ViewSpec* UpdateChecker::find(const std::string& viewId) const {
  const auto it = views_.find(viewId);
  return it == views_.end() ? nullptr : &it->second;
}

void UpdateChecker::check(const Update& update) {
  // The view an update names, which must be declared and of one of `kinds`.
  auto viewFor = [&](const char* what, const std::string& id, std::initializer_list<ViewKind> kinds) -> const ViewSpec& {
    const ViewSpec* v = find(id);
    if (!v) throw ValueError(std::string(what) + " for view '" + id + "', which was not declared");
    for (ViewKind k : kinds) {
      if (v->kind == k) return *v;
    }
    throw ValueError(std::string(what) + " for view '" + id + "', a " + toString(v->kind) + " view");
  };
  // A value on a logarithmic axis must be above 0.
  auto checkOnAxis = [](const char* what, const ViewSpec& v, const Axis& axis, const char* name, double value) {
    if (axis.logarithmic && !(value > 0)) {
      throw ValueError(std::string(what) + " for view '" + v.id + "' has " + name + " = " + formatNumber(value) + " on the logarithmic axis '" +
                       axis.label + "', which takes only values above 0");
    }
  };
  auto checkX = [&checkOnAxis](const char* what, const ViewSpec& v, const std::vector<double>& x) {
    if (x.size() != v.x.size()) {
      throw ValueError(std::string(what) + " for view '" + v.id + "' has " + std::to_string(x.size()) + " x value(s); the view has " +
                       std::to_string(v.x.size()) + " x axes");
    }
    for (std::size_t i = 0; i < x.size(); ++i) checkOnAxis(what, v, v.x[i], "x", x[i]);
  };
  auto checkSeries = [](const char* what, const ViewSpec& v, const std::string& series) {
    if (!hasSeries(v, series)) throw ValueError(std::string(what) + " for series '" + series + "', which view '" + v.id + "' does not declare");
  };
  std::visit(
      [&](const auto& u) {
        using T = std::decay_t<decltype(u)>;
        if constexpr (std::is_same_v<T, ViewSpec>) {
          if (u.id.empty()) throw ValueError("a view without an id");
          const bool plotted = u.kind == ViewKind::Line || u.kind == ViewKind::StackedArea;
          if (plotted && u.x.empty()) throw ValueError("view '" + u.id + "' is a plot without an x axis");
          if (u.kind == ViewKind::Table && u.columns.empty()) throw ValueError("table '" + u.id + "' has no columns");
          if (u.kind != ViewKind::Table && u.series.empty()) throw ValueError("view '" + u.id + "' declares no series");
          for (std::size_t i = 0; i < u.series.size(); ++i) {
            for (std::size_t j = 0; j < i; ++j) {
              if (u.series[i].id == u.series[j].id) throw ValueError("view '" + u.id + "' declares series '" + u.series[i].id + "' twice");
            }
          }
          views_[u.id] = u;
        } else if constexpr (std::is_same_v<T, Point>) {
          const ViewSpec& v = viewFor("a point", u.view, {ViewKind::Line, ViewKind::StackedArea});
          checkSeries("a point", v, u.series);
          checkX("a point", v, u.x);
          checkOnAxis("a point", v, v.y, "y", u.y);
        } else if constexpr (std::is_same_v<T, Marker>) {
          checkX("a marker", viewFor("a marker", u.view, {ViewKind::Line, ViewKind::StackedArea}), u.x);
        } else if constexpr (std::is_same_v<T, Level>) {
          viewFor("a level", u.view, {ViewKind::Line, ViewKind::StackedArea, ViewKind::Bars});
        } else if constexpr (std::is_same_v<T, Bar>) {
          checkSeries("a bar", viewFor("a bar", u.view, {ViewKind::Bars}), u.series);
        } else if constexpr (std::is_same_v<T, Row>) {
          const ViewSpec& v = viewFor("a row", u.view, {ViewKind::Table});
          if (u.cells.size() != v.columns.size()) {
            throw ValueError("a row for table '" + u.view + "' has " + std::to_string(u.cells.size()) + " cell(s); the table has " +
                             std::to_string(v.columns.size()) + " columns");
          }
        } else if constexpr (std::is_same_v<T, Span>) {
          checkSeries("a span", viewFor("a span", u.view, {ViewKind::Timeline}), u.lane);
          if (!(u.end >= u.start)) throw ValueError("a span on '" + u.view + "' ends before it starts");
        } else if constexpr (std::is_same_v<T, Record>) {
          if (u.event.empty()) throw ValueError("a record without an event name");
          if (isProtocolEvent(u.event)) throw ValueError("a record may not be called '" + u.event + "': the protocol uses that name");
        }
      },
      update);
}

namespace {

bool glob(std::string_view pattern, std::string_view text) {
  if (pattern.empty()) return text.empty();
  if (pattern.front() == '*') {
    for (std::size_t skip = 0; skip <= text.size(); ++skip)
      if (glob(pattern.substr(1), text.substr(skip))) return true;
    return false;
  }
  return !text.empty() && pattern.front() == text.front() && glob(pattern.substr(1), text.substr(1));
}

}  // namespace

const MeasurementSpec* findMeasurement(const std::vector<MeasurementSpec>& specs, const std::string& name) {
  for (const MeasurementSpec& s : specs)
    if (glob(s.name, name)) return &s;
  return nullptr;
}

bool alwaysPositive(const std::string& unit) {
  static const std::array<std::string_view, 9> kPositive{"s", "ms", "us", "steps/s", "samples/s", "GFLOP/s", "GB/s", "GFLOP", "x"};
  return std::find(kPositive.begin(), kPositive.end(), unit) != kPositive.end();
}

}  // namespace gpulab::lab
