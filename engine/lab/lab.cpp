#include "engine/lab/lab.h"

#include <cmath>

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
  return ParamSpec{std::move(name), ParamType::Int, def, std::move(description), static_cast<double>(min), static_cast<double>(max), {}, {}};
}
ParamSpec floatParam(std::string name, double def, double min, double max, std::string description) {
  return ParamSpec{std::move(name), ParamType::Float, def, std::move(description), min, max, {}, {}};
}
ParamSpec boolParam(std::string name, bool def, std::string description) {
  return ParamSpec{std::move(name), ParamType::Bool, def, std::move(description), 0, 1, {}, {}};
}
ParamSpec choiceParam(std::string name, std::string def, std::vector<std::string> choices, std::string description) {
  return ParamSpec{std::move(name), ParamType::Choice, std::move(def), std::move(description), 0, 0, std::move(choices), {}};
}
ParamSpec textParam(std::string name, std::string def, std::string description, TextValidator validate) {
  return ParamSpec{std::move(name), ParamType::Text, std::move(def), std::move(description), 0, 0, {}, std::move(validate)};
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
