#include "engine/lab/lab.h"

#include <charconv>
#include <cmath>
#include <sstream>

#include "engine/core/errors.h"

namespace gpulab::lab {
namespace {

std::string describeRange(const ParamSpec& s) {
  std::ostringstream os;
  switch (s.type) {
    case ParamType::Int:
    case ParamType::Float: os << "a number in [" << s.min << ", " << s.max << "]"; break;
    case ParamType::Bool: os << "true or false"; break;
    case ParamType::Choice:
      os << "one of";
      for (std::size_t i = 0; i < s.choices.size(); ++i) os << (i ? ", " : " ") << s.choices[i];
      break;
    case ParamType::Text: os << "text"; break;
  }
  return os.str();
}

[[noreturn]] void invalid(const ParamSpec& s, const std::string& shown) {
  throw ValueError("invalid value '" + shown + "' for parameter '" + s.name + "': expected " + describeRange(s));
}

}  // namespace

ParamSpec intParam(std::string name, std::int64_t def, std::int64_t min, std::int64_t max, std::string description) {
  ParamSpec s{std::move(name), ParamType::Int, def, std::move(description), static_cast<double>(min), static_cast<double>(max), {}};
  return s;
}
ParamSpec floatParam(std::string name, double def, double min, double max, std::string description) {
  return ParamSpec{std::move(name), ParamType::Float, def, std::move(description), min, max, {}};
}
ParamSpec boolParam(std::string name, bool def, std::string description) {
  return ParamSpec{std::move(name), ParamType::Bool, def, std::move(description), 0, 1, {}};
}
ParamSpec choiceParam(std::string name, std::string def, std::vector<std::string> choices, std::string description) {
  return ParamSpec{std::move(name), ParamType::Choice, std::move(def), std::move(description), 0, 0, std::move(choices)};
}
ParamSpec textParam(std::string name, std::string def, std::string description) {
  return ParamSpec{std::move(name), ParamType::Text, std::move(def), std::move(description), 0, 0, {}};
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
      auto [p, ec] = std::from_chars(text.data(), text.data() + text.size(), v);
      if (ec != std::errc() || p != text.data() + text.size()) invalid(s, text);
      setValue(name, ParamValue(v));
      return;
    }
    case ParamType::Float: {
      char* end = nullptr;
      const double v = std::strtod(text.c_str(), &end);
      if (text.empty() || end != text.c_str() + text.size()) invalid(s, text);
      setValue(name, ParamValue(v));
      return;
    }
    case ParamType::Bool:
      if (text == "true" || text == "1" || text == "on") setValue(name, ParamValue(true));
      else if (text == "false" || text == "0" || text == "off") setValue(name, ParamValue(false));
      else invalid(s, text);
      return;
    case ParamType::Choice:
    case ParamType::Text: setValue(name, ParamValue(text)); return;
  }
}

void Params::setValue(const std::string& name, const ParamValue& value) {
  const ParamSpec& s = spec(name);
  ParamValue v = value;
  if (s.type == ParamType::Float && std::holds_alternative<std::int64_t>(v)) v = static_cast<double>(std::get<std::int64_t>(v));
  switch (s.type) {
    case ParamType::Int: {
      if (!std::holds_alternative<std::int64_t>(v)) invalid(s, "(not an integer)");
      const auto x = std::get<std::int64_t>(v);
      if (x < s.min || x > s.max) invalid(s, std::to_string(x));
      break;
    }
    case ParamType::Float: {
      if (!std::holds_alternative<double>(v)) invalid(s, "(not a number)");
      const double x = std::get<double>(v);
      std::ostringstream os;
      os << x;
      if (!std::isfinite(x) || x < s.min || x > s.max) invalid(s, os.str());
      break;
    }
    case ParamType::Bool:
      if (!std::holds_alternative<bool>(v)) invalid(s, "(not true/false)");
      break;
    case ParamType::Choice: {
      if (!std::holds_alternative<std::string>(v)) invalid(s, "(not text)");
      const auto& x = std::get<std::string>(v);
      bool ok = false;
      for (const auto& c : s.choices) ok = ok || c == x;
      if (!ok) invalid(s, x);
      break;
    }
    case ParamType::Text:
      if (!std::holds_alternative<std::string>(v)) invalid(s, "(not text)");
      break;
  }
  values_[name] = v;
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
