#include "engine/core/number_format.h"

#include <charconv>
#include <cmath>
#include <system_error>

namespace gpulab {
namespace {

// from_chars takes no '+'; a number written "+2" is still a number.
std::string_view withoutPlus(std::string_view text) {
  if (text.size() > 1 && text[0] == '+' && text[1] != '-' && text[1] != '+') text.remove_prefix(1);
  return text;
}

template <class T>
ParseStatus parseWhole(std::string_view text, T& out) {
  text = withoutPlus(text);
  if (text.empty()) return ParseStatus::Invalid;
  T v{};
  const char* last = text.data() + text.size();
  const auto [ptr, ec] = std::from_chars(text.data(), last, v);
  if (ec == std::errc::result_out_of_range) return ptr == last ? ParseStatus::OutOfRange : ParseStatus::Invalid;
  if (ec != std::errc() || ptr != last) return ParseStatus::Invalid;
  out = v;
  return ParseStatus::Ok;
}

}  // namespace

std::string formatNumber(double v) {
  if (std::isnan(v)) return "nan";  // to_chars writes "-nan" for a negative NaN
  char buf[64];
  const auto [ptr, ec] = std::to_chars(buf, buf + sizeof buf, v);
  return ec == std::errc() ? std::string(buf, ptr) : std::string("?");
}

std::string formatNumber(std::int64_t v) {
  char buf[24];
  const auto [ptr, ec] = std::to_chars(buf, buf + sizeof buf, v);
  return std::string(buf, ptr);
}

std::string formatFixed(double v, int decimals) {
  if (!std::isfinite(v)) return formatNumber(v);
  char buf[400];  // DBL_MAX has 309 digits before the point
  const auto [ptr, ec] = std::to_chars(buf, buf + sizeof buf, v, std::chars_format::fixed, decimals < 0 ? 0 : decimals > 60 ? 60 : decimals);
  return ec == std::errc() ? std::string(buf, ptr) : formatNumber(v);
}

std::string formatGeneral(double v, int significant) {
  if (!std::isfinite(v)) return formatNumber(v);
  char buf[64];
  const auto [ptr, ec] = std::to_chars(buf, buf + sizeof buf, v, std::chars_format::general, significant < 1 ? 1 : significant > 17 ? 17 : significant);
  return ec == std::errc() ? std::string(buf, ptr) : formatNumber(v);
}

std::string formatReadable(double v, int significant) {
  const double magnitude = std::abs(v);
  if (std::isfinite(v) && magnitude >= std::pow(10.0, significant) && magnitude < 1e9) return formatFixed(v, 0);
  return formatGeneral(v, significant);
}

ParseStatus parseNumber(std::string_view text, double& out) { return parseWhole(text, out); }
ParseStatus parseNumber(std::string_view text, std::int64_t& out) { return parseWhole(text, out); }

}  // namespace gpulab
