#pragma once
// Numbers as text, the same whatever the user's locale says.
//
// Why: QCoreApplication calls setlocale(LC_ALL, ""), after which the C library reads and writes
// numbers the user's way -- under de_DE.UTF-8 std::strtod("0.001") stops at the '.', and
// std::to_string(0.001) / printf("%f") write "0,001000". Lesson files, lab parameters, JSON and the
// engine's messages are not for one locale: they use '.' always. Everything here is built on
// std::to_chars / std::from_chars, which never consult the locale; use these instead of strtod,
// stod, to_string(double), printf's %f/%g and ostringstream << double.
#include <cstdint>
#include <string>
#include <string_view>

namespace gpulab {

// The shortest text that reads back as exactly `v` (Python's repr): 0.001, 1e-07, 10, 2147483647,
// 0.30000000000000004, inf, -inf, nan.
std::string formatNumber(double v);
std::string formatNumber(std::int64_t v);
// `decimals` digits after the '.', printf's "%.*f" in the C locale: formatFixed(2.5, 2) == "2.50".
std::string formatFixed(double v, int decimals);
// At most `significant` significant digits, printf's "%.*g" in the C locale:
// formatGeneral(1.0 / 3, 3) == "0.333", formatGeneral(2147483647, 6) == "2.14748e+09".
std::string formatGeneral(double v, int significant);
// For people: `significant` digits as formatGeneral, but whole numbers from 10^significant up to 1e9
// written out (32040 steps/s, not 3.204e+04); beyond that, and for tiny numbers, the exponent stays.
std::string formatReadable(double v, int significant);

enum class ParseStatus {
  Ok,
  Invalid,     // not a number, or more text after it
  OutOfRange,  // a number, but not representable (1e-400 and 1e400 for a double; 2^63 for an int64)
};

// The whole of `text` as a number: "64", "-3", "+2", "1e-3", ".5", "inf", "nan" for a double (the
// caller decides whether infinities are allowed). No leading or trailing spaces, no hex, no ','.
// `out` is written only when the result is Ok.
ParseStatus parseNumber(std::string_view text, double& out);
ParseStatus parseNumber(std::string_view text, std::int64_t& out);

}  // namespace gpulab
