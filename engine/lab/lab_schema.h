#pragma once
// The lab protocol's updates (lab.h), field by field, written once: each update's event name and its
// fields -- the JSON name, the struct member, whether it must be there. Everything that reads or
// writes updates field by field derives from these tables: the JSON codec (app/course/lab_json.h:
// what `gpulab-cli --json` prints, what recordings store and replay, what the notebook kernel
// sends) with its error messages, and the description the Python binding gives the notebook kernel
// (`torch._C._lab_protocol()`), which checks each lab.view(...), lab.point(...), ... call against it
// before sending. A new field is one line here (and, for a code cell or a Python lab to send it, an
// argument of its lab.* method in kernel.py). Record, a named set of free fields, has no table.
#include <string>
#include <tuple>
#include <type_traits>
#include <utility>
#include <variant>
#include <vector>

#include "engine/lab/lab.h"

namespace gpulab::lab::schema {

// What a field holds, as the JSON form writes it.
enum class FieldType {
  Text,         // a string
  Number,       // a number
  Numbers,      // a list of numbers
  Bool,         // true or false
  Axis,         // {"label", "unit"} and an optional "log": true
  Axes,         // a list of axes
  Series,       // a list of {"id", "label"} with an optional "style" and "overlay"
  Cells,        // a list of numbers, strings and booleans
  ViewKind,     // a name: line, stacked, bars, table, timeline
  SeriesStyle,  // line, dashed, points, steps
  MarkerKind,   // event, oom, empty_cache, skipped
  MessageKind,  // info, warning, engine_error
};

template <class M>
constexpr FieldType fieldTypeOf() {
  if constexpr (std::is_same_v<M, std::string>) return FieldType::Text;
  else if constexpr (std::is_same_v<M, double>) return FieldType::Number;
  else if constexpr (std::is_same_v<M, std::vector<double>>) return FieldType::Numbers;
  else if constexpr (std::is_same_v<M, bool>) return FieldType::Bool;
  else if constexpr (std::is_same_v<M, lab::Axis>) return FieldType::Axis;
  else if constexpr (std::is_same_v<M, std::vector<lab::Axis>>) return FieldType::Axes;
  else if constexpr (std::is_same_v<M, std::vector<lab::SeriesSpec>>) return FieldType::Series;
  else if constexpr (std::is_same_v<M, std::vector<lab::Value>>) return FieldType::Cells;
  else if constexpr (std::is_same_v<M, lab::ViewKind>) return FieldType::ViewKind;
  else if constexpr (std::is_same_v<M, lab::SeriesStyle>) return FieldType::SeriesStyle;
  else if constexpr (std::is_same_v<M, lab::MarkerKind>) return FieldType::MarkerKind;
  else {
    static_assert(std::is_same_v<M, lab::MessageKind>, "a field of a type the protocol does not know");
    return FieldType::MessageKind;
  }
}

// Whether a field may be left out, and how it is written.
enum class Presence {
  Required,    // read: must be there; written always
  Optional,    // read: the member's default when absent; written always
  OmitDefault  // read: as Optional; written only when it differs from the default (a note, an overlay, a
               // logarithmic axis), so that older readers see only what they know
};

template <class S, class M>
struct Field {
  using Struct = S;
  using Member = M;
  const char* name;
  M S::*member;
  Presence presence;
  static constexpr FieldType type = fieldTypeOf<M>();
};

template <class S, class M>
constexpr Field<S, M> field(const char* name, M S::*member, Presence presence = Presence::Required) {
  return {name, member, presence};
}

// The fields of each update (and of the two objects inside a view: an axis and a series), in the order
// the JSON form and error messages give them. `event` is the update's JSON event name; `what` is how
// messages name one ("a point needs ...").
template <class U>
struct Fields;

template <>
struct Fields<Axis> {
  static constexpr const char* what = "an axis";
  static constexpr auto all = std::make_tuple(field("label", &Axis::label), field("unit", &Axis::unit),
                                              field("log", &Axis::logarithmic, Presence::OmitDefault));
};
template <>
struct Fields<SeriesSpec> {
  static constexpr const char* what = "a series";
  static constexpr auto all = std::make_tuple(field("id", &SeriesSpec::id), field("label", &SeriesSpec::label),
                                              field("style", &SeriesSpec::style, Presence::Optional),
                                              field("overlay", &SeriesSpec::overlay, Presence::OmitDefault));
};
template <>
struct Fields<ViewSpec> {
  static constexpr const char* event = "view";
  static constexpr const char* what = "a view";
  static constexpr auto all = std::make_tuple(
      field("id", &ViewSpec::id), field("title", &ViewSpec::title), field("kind", &ViewSpec::kind),
      field("x", &ViewSpec::x, Presence::Optional), field("y", &ViewSpec::y, Presence::Optional),
      field("y_from_zero", &ViewSpec::yFromZero, Presence::Optional), field("series", &ViewSpec::series, Presence::Optional),
      field("columns", &ViewSpec::columns, Presence::Optional), field("note", &ViewSpec::note, Presence::OmitDefault));
};
template <>
struct Fields<Point> {
  static constexpr const char* event = "point";
  static constexpr const char* what = "a point";
  static constexpr auto all = std::make_tuple(field("view", &Point::view), field("series", &Point::series), field("x", &Point::x),
                                              field("y", &Point::y));
};
template <>
struct Fields<Marker> {
  static constexpr const char* event = "marker";
  static constexpr const char* what = "a marker";
  static constexpr auto all = std::make_tuple(field("view", &Marker::view), field("x", &Marker::x), field("label", &Marker::label),
                                              field("kind", &Marker::kind, Presence::Optional));
};
template <>
struct Fields<Level> {
  static constexpr const char* event = "level";
  static constexpr const char* what = "a level";
  static constexpr auto all = std::make_tuple(field("view", &Level::view), field("label", &Level::label), field("y", &Level::y));
};
template <>
struct Fields<Bar> {
  static constexpr const char* event = "bar";
  static constexpr const char* what = "a bar";
  static constexpr auto all = std::make_tuple(field("view", &Bar::view), field("series", &Bar::series), field("category", &Bar::category),
                                              field("value", &Bar::value));
};
template <>
struct Fields<Row> {
  static constexpr const char* event = "row";
  static constexpr const char* what = "a row";
  static constexpr auto all = std::make_tuple(field("view", &Row::view), field("cells", &Row::cells));
};
template <>
struct Fields<Span> {
  static constexpr const char* event = "span";
  static constexpr const char* what = "a span";
  static constexpr auto all = std::make_tuple(field("view", &Span::view), field("lane", &Span::lane), field("label", &Span::label),
                                              field("start", &Span::start), field("end", &Span::end));
};
template <>
struct Fields<RunDevice> {
  static constexpr const char* event = "device";
  static constexpr const char* what = "a device event";
  static constexpr auto all = std::make_tuple(field("device", &RunDevice::device), field("label", &RunDevice::label),
                                              field("emulated", &RunDevice::emulated, Presence::Optional));
};
template <>
struct Fields<Message> {
  static constexpr const char* event = "message";
  static constexpr const char* what = "a message";
  static constexpr auto all = std::make_tuple(field("level", &Message::kind), field("text", &Message::text));
};
template <>
struct Fields<Measurement> {
  static constexpr const char* event = "measurement";
  static constexpr const char* what = "a measurement";
  static constexpr auto all = std::make_tuple(field("name", &Measurement::name), field("value", &Measurement::value),
                                              field("unit", &Measurement::unit));
};
template <>
struct Fields<Progress> {
  static constexpr const char* event = "progress";
  static constexpr const char* what = "a progress event";
  static constexpr auto all = std::make_tuple(field("done", &Progress::done), field("total", &Progress::total),
                                              field("label", &Progress::label, Presence::Optional));
};

// The tables as data, for what cannot use the templates (the Python binding):
struct FieldDescription {
  std::string name;
  FieldType type;
  Presence presence;
  std::vector<std::string> choices;  // the names an enum field takes
};
struct UpdateDescription {
  std::string event, what;
  std::vector<FieldDescription> fields;
};
// Every update but Record, in the order of lab::Update.
std::vector<UpdateDescription> describe();
// The objects inside a view: an axis and a series (their `event` is "axis" and "series").
std::vector<UpdateDescription> describeObjects();
// "text", "number", "numbers", "bool", "axis", "axes", "series", "cells", or "name" (an enum's): the
// short names the description gives the Python binding.
const char* typeName(FieldType type);
// "a string", "a number", "a list of numbers", ...: how messages name what a field holds.
std::string describe(FieldType type);
// The names an enum field takes ("line", "stacked", ...); empty for the other types.
std::vector<std::string> choices(FieldType type);

}  // namespace gpulab::lab::schema

namespace gpulab::lab::schema {

namespace detail {

template <class U, class F>
void visitUpdate(F& f) {
  if constexpr (!std::is_same_v<U, Record>) f(U{});
}

template <class F, std::size_t... I>
void visitUpdates(F& f, std::index_sequence<I...>) {
  (visitUpdate<std::variant_alternative_t<I, Update>>(f), ...);
}

}  // namespace detail

// Calls f(U{}) -- a value-initialised update -- for each update of lab::Update that has a table (all but
// Record), in the variant's order. (Plain function templates: clang 14 crashes on a templated lambda
// doing the same.)
template <class F>
void forEachUpdate(F&& f) {
  detail::visitUpdates(f, std::make_index_sequence<std::variant_size_v<Update>>{});
}

}  // namespace gpulab::lab::schema
