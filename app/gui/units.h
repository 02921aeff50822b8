#pragma once
// How the GUI writes a lab's numbers: a unit is a plain string (engine/lab/lab.h); "bytes" is shown
// as B/KiB/MiB/GiB, "s" as seconds, "x" as a factor, any other unit is printed after the number.
#include <QString>
#include <string>

#include "engine/lab/lab.h"

namespace gpulab::app {

// "976.56 KiB", "0.4312", "12345 GFLOP/s", "1.5 s", "3.2×"; 4 significant digits, never an exponent
// for a large value, an integral value without decimals.
QString formatQuantity(double value, const std::string& unit);
// A table cell or a field: numbers through formatQuantity, text as it is, a flag as yes/no.
QString formatCell(const lab::Value& value, const std::string& unit);
// An axis or a column heading: "time (s)", "speed (GFLOP/s)"; "bytes" is left to the ticks.
QString axisTitle(const lab::Axis& axis);
// A value as a CSV cell: numbers in full precision, whatever the locale; text quoted.
QString csvCell(const lab::Value& value);
QString csvQuote(QString text);

}  // namespace gpulab::app
