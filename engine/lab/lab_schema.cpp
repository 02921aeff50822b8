#include "engine/lab/lab_schema.h"

namespace gpulab::lab::schema {
namespace {

// An enum's names, from lab.h's toString (the enums count up from 0; toString says "?" past the end).
template <class E>
std::vector<std::string> namesOf() {
  std::vector<std::string> out;
  for (int i = 0;; ++i) {
    const std::string name = toString(static_cast<E>(i));
    if (name == "?") return out;
    out.push_back(name);
  }
}

template <class S>
std::vector<FieldDescription> fieldsOf() {
  std::vector<FieldDescription> out;
  std::apply([&](const auto&... f) { (out.push_back({f.name, f.type, f.presence, choices(f.type)}), ...); }, Fields<S>::all);
  return out;
}

}  // namespace

std::vector<std::string> choices(FieldType type) {
  switch (type) {
    case FieldType::ViewKind: return namesOf<ViewKind>();
    case FieldType::SeriesStyle: return namesOf<SeriesStyle>();
    case FieldType::MarkerKind: return namesOf<MarkerKind>();
    case FieldType::MessageKind: return namesOf<MessageKind>();
    default: return {};
  }
}

const char* typeName(FieldType type) {
  switch (type) {
    case FieldType::Text: return "text";
    case FieldType::Number: return "number";
    case FieldType::Numbers: return "numbers";
    case FieldType::Bool: return "bool";
    case FieldType::Axis: return "axis";
    case FieldType::Axes: return "axes";
    case FieldType::Series: return "series";
    case FieldType::Cells: return "cells";
    default: return "name";
  }
}

std::string describe(FieldType type) {
  switch (type) {
    case FieldType::Text: return "a string";
    case FieldType::Number: return "a number";
    case FieldType::Numbers: return "a list of numbers";
    case FieldType::Bool: return "true or false";
    case FieldType::Axis: return "an axis {\"label\", \"unit\"} (and an optional \"log\": true)";
    case FieldType::Axes: return "a list of axes {\"label\", \"unit\"} (and an optional \"log\": true)";
    case FieldType::Series: return "a list of series {\"id\", \"label\"} (and an optional \"style\" and \"overlay\")";
    case FieldType::Cells: return "a list of numbers, strings or booleans";
    default: {
      std::string names;
      for (const std::string& n : choices(type)) names += (names.empty() ? "" : ", ") + n;
      return "one of " + names;
    }
  }
}

std::vector<UpdateDescription> describe() {
  std::vector<UpdateDescription> out;
  forEachUpdate([&](const auto& u) {
    using U = std::decay_t<decltype(u)>;
    out.push_back({Fields<U>::event, Fields<U>::what, fieldsOf<U>()});
  });
  return out;
}

std::vector<UpdateDescription> describeObjects() {
  return {{"axis", Fields<Axis>::what, fieldsOf<Axis>()}, {"series", Fields<SeriesSpec>::what, fieldsOf<SeriesSpec>()}};
}

}  // namespace gpulab::lab::schema
