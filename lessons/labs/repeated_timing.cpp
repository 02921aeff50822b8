#include "lessons/labs/repeated_timing.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>
#include <utility>

#include "engine/core/number_format.h"
#include "lessons/labs/training.h"

namespace gpulab::labs {

Spread spreadOf(std::vector<double> samples) {
  constexpr double kNone = std::numeric_limits<double>::quiet_NaN();
  if (samples.empty()) return {kNone, kNone, kNone, 0};
  std::sort(samples.begin(), samples.end());
  const std::size_t trimmed = samples.size() / 10;  // a tenth at each end: none below 10 runs
  return {median(samples), samples[trimmed], samples[samples.size() - 1 - trimmed], samples.size()};
}

Spread reciprocalOf(const Spread& s, double numerator) {
  // 1/x reverses the order: the slowest run is the lowest rate.
  return {numerator / s.median, numerator / s.high, numerator / s.low, s.runs};
}

Spread scaled(const Spread& s, double factor) { return {s.median * factor, s.low * factor, s.high * factor, s.runs}; }

Difference compare(const Spread& a, const Spread& b) {
  if (a.runs < 2 || b.runs < 2) return Difference::Unclear;
  if (a.high < b.low) return Difference::Lower;
  if (a.low > b.high) return Difference::Higher;
  return Difference::Unclear;
}

Difference compareBeyondSpread(const Spread& a, const Spread& b) {
  const Difference d = compare(a, b);
  const double width = std::max(a.high - a.low, b.high - b.low);
  return d != Difference::Unclear && std::abs(a.median - b.median) > width ? d : Difference::Unclear;
}

std::string spreadText(const Spread& s, const std::string& unit, int significant) {
  const std::string u = unit.empty() ? "" : " " + unit;
  auto number = [&](double v) { return formatReadable(v, significant); };
  if (s.runs == 0) return "not measured";
  if (s.runs == 1) return number(s.median) + u + " (1 run)";
  return number(s.median) + u + " (" + rangeText(s, 1.0, significant) + ", " + std::to_string(s.runs) + " runs)";
}

std::string rangeText(const Spread& s, double scale, int significant) {
  return formatReadable(s.low * scale, significant) + " to " + formatReadable(s.high * scale, significant);
}

std::size_t medianIndex(const std::vector<double>& values) {
  std::vector<std::size_t> order(values.size());
  std::iota(order.begin(), order.end(), std::size_t{0});
  std::stable_sort(order.begin(), order.end(), [&](std::size_t a, std::size_t b) { return values[a] < values[b]; });
  return order.empty() ? 0 : order[(order.size() - 1) / 2];
}

std::string comparedTimes(const Spread& seconds, const Spread& otherSeconds, const std::string& other) {
  // One unit for both sides, the one that suits the larger: s, ms or us.
  const double larger = std::max(seconds.median, otherSeconds.median);
  const auto [factor, unit] = larger >= 1 ? std::pair{1.0, "s"} : larger >= 1e-3 ? std::pair{1e3, "ms"} : std::pair{1e6, "us"};
  const Spread a = scaled(seconds, factor), b = scaled(otherSeconds, factor);
  const std::string medians = "medians " + formatReadable(a.median, 3) + " " + unit + " and " + formatReadable(b.median, 3) + " " + unit;
  if (compare(seconds, otherSeconds) != Difference::Unclear) {  // every run of one beat every run of the other
    const bool trimmed = seconds.runs >= 10 || otherSeconds.runs >= 10;
    return "was " + fasterOrSlower(otherSeconds.median / seconds.median) + " than " + other + " in every run (" +
           (trimmed ? "the outlying tenth set aside; " : "") + medians + ")";
  }
  if (seconds.runs < 2 || otherSeconds.runs < 2) {
    return "showed no clear difference from " + other + ": one run each shows no spread, so noise cannot be told from a difference (" +
           medians + "; more repeats tell)";
  }
  return "showed no clear difference from " + other + " here: their runs' spreads overlap (" + spreadText(a, unit) + " against " +
         spreadText(b, unit) + ")";
}

}  // namespace gpulab::labs
