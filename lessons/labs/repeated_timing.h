#pragma once
// Timed claims that hold on a noisy machine. A laptop's timings drift -- other programs, the clock's
// boost, a cold cache -- by as much as many of the differences a lesson shows, and on a two-core machine
// by more. So a lab that compares times repeats each measurement, interleaved (A, B, A, B, ...) so that
// a slow moment of the machine hits both sides alike; reports the median and the spread (the fastest
// and the slowest run); and calls one side faster only when the spreads do not overlap -- every run of
// one beat every run of the other. Otherwise its sentence says "no clear difference here". A challenge
// graded on a timing reads the medians, with a margin.
#include <cstddef>
#include <string>
#include <vector>

namespace gpulab::labs {

// Repeated runs of one measurement: their median and their range (NaN for none). From 10 runs on, the
// range sets aside the fastest and the slowest tenth: one run that met another program's burst says
// nothing about the code, and would hide any difference behind it.
struct Spread {
  double median, low, high;
  std::size_t runs = 0;
};
Spread spreadOf(std::vector<double> samples);
// The same runs, each value mapped (seconds to steps per second: 1/x; to milliseconds: 1000x).
Spread reciprocalOf(const Spread& s, double numerator = 1.0);
Spread scaled(const Spread& s, double factor);

// How `a` compares with `b`: clearly lower (a's highest run below b's lowest), clearly higher, or
// no clear difference (the ranges overlap, or either side ran once: one run shows no spread).
enum class Difference { Lower, Higher, Unclear };
Difference compare(const Spread& a, const Spread& b);
// The same, and by more than the noise: the ranges apart and the medians further apart than either
// range is wide -- a difference clearly larger than the spread of the repeats. For a claim that names
// a turning point (a crossover: "faster from n = ..."), which two ranges that merely fail to touch
// at one size -- a 1.009x "speed-up" from two tight spreads -- would otherwise name.
Difference compareBeyondSpread(const Spread& a, const Spread& b);

// "12.3 ms (11.0 to 14.1, 5 runs)": the median, then the range it came from.
std::string spreadText(const Spread& s, const std::string& unit, int significant = 3);
// "11.0 to 14.1": the range alone, its ends multiplied by `scale` (1e3: seconds shown in ms), for a
// table's range column.
std::string rangeText(const Spread& s, double scale = 1.0, int significant = 3);
// Which of `values` is the median (the lower middle of an even count): the run that stands for its
// repeats where a view shows one run (a timeline, a table's other columns).
std::size_t medianIndex(const std::vector<double>& values);

// A sentence's end that says what the runs allow of one thing against another, both timed in seconds
// (lower is faster): "was 1.52x faster than <other> in every run (medians 12.3 ms and 18.7 ms)", "...
// slower ...", or "showed no clear difference from <other> here: their runs' spreads overlap (...)".
std::string comparedTimes(const Spread& seconds, const Spread& otherSeconds, const std::string& other);

}  // namespace gpulab::labs
