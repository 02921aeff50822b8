// The "vectorise" lab: a loop of small ops against one op over the whole batch. Read it next to the
// PyTorch it mirrors -- the squared distances from n points a (n, d) to m centres b (m, d):
//
//   D = torch.empty(n, m, device=device)
//   for i in range(n):                                   # per pair: 4 small ops for each of n*m pairs
//       for j in range(m):
//           D[i, j] = ((a[i] - b[j]) ** 2).sum()
//   for i in range(0, n, chunk):                         # chunked: 4 ops per chunk of rows
//       c = a[i:i+chunk, None, :] - b[None, :, :]
//       D[i:i+chunk] = (c ** 2).sum(-1)
//   D = ((a[:, None, :] - b[None, :, :]) ** 2).sum(-1)   # one op: broadcasting does the loops
//   D = (a**2).sum(1, keepdim=True) + (b**2).sum(1) - 2 * a @ b.T   # the matmul identity (torch.cdist's)
//
// Every form computes the same D. What differs is how many ops it runs -- each op pays a fixed cost
// (checks, an output allocation, a kernel launch on a GPU) whatever its size -- and how much memory its
// intermediates take: the broadcast builds an (n, m, d) difference, a chunk only (chunk, m, d).
#include "lessons/labs/vectorise_lab.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <functional>

#include "engine/core/errors.h"
#include "engine/core/number_format.h"
#include "engine/runtime/device_memory.h"
#include "engine/ops/ops.h"
#include "lessons/labs/repeated_timing.h"
#include "lessons/labs/training.h"

namespace gpulab::labs {

namespace {

using Clock = std::chrono::steady_clock;


// The four ways to fill D, each counting the ops it runs (what a profiler's "# of Calls" would add up).
// perPair fills one row of D (its caller times as many rows as its budget allows).
void perPair(const Tensor& a, const Tensor& b, const Tensor& D, std::int64_t row, std::int64_t& ops) {
  const Tensor ai = a.select(0, row), Di = D.select(0, row);
  for (std::int64_t j = 0; j < b.size(0); ++j) {
    Di.select(0, j).copy_(pow(sub(ai, b.select(0, j)), 2.0).sum());  // D[i, j] = ((a[i] - b[j]) ** 2).sum()
    ops += 4;
  }
}

Tensor chunked(const Tensor& a, const Tensor& b, std::int64_t chunk, std::int64_t& ops) {
  const std::int64_t n = a.size(0);
  Tensor D = zeros({n, b.size(0)}, {.device = a.device()});
  const Tensor bRows = b.unsqueeze(0);  // b[None, :, :]
  for (std::int64_t i = 0; i < n; i += chunk) {
    const std::int64_t end = std::min(n, i + chunk);
    D.slice(0, i, end).copy_(pow(sub(a.slice(0, i, end).unsqueeze(1), bRows), 2.0).sum(-1));
    ops += 4;
  }
  return D;
}

Tensor oneOp(const Tensor& a, const Tensor& b, std::int64_t& ops) {
  ops += 3;
  return pow(sub(a.unsqueeze(1), b.unsqueeze(0)), 2.0).sum(-1);
}

Tensor matmulIdentity(const Tensor& a, const Tensor& b, std::int64_t& ops) {
  ops += 8;  // pow, sum, pow, sum, add, matmul, mul, sub
  return sub(add(pow(a, 2.0).sum(1, true), pow(b, 2.0).sum(1).unsqueeze(0)), mul(matmul(a, b.t()), 2.0));
}

struct Measured {
  Spread time;                // seconds, over the rounds
  std::vector<double> rounds; // seconds, one run a round, in the rounds' order
  std::int64_t ops = 0;       // in one run
  std::int64_t peakBytes = 0; // above what was allocated before the run: D and the intermediates
  Tensor result;
  double difference = 0;      // the largest |D - D_loop| over the rows the loop over pairs computed
};

// Runs every form once, then every form again, ... -- rounds, so that a slow moment of the machine
// hits all of them alike -- waiting for the device after each run so the clock measures the work.
// At least 3 rounds and at most `maxRounds`, ending early once `budget` seconds per form have gone.
// Keeps each form's times (median and range), its op count, and the peak memory of its first run.
std::vector<Measured> measureInRounds(Device device, const std::vector<std::function<Tensor(std::int64_t&)>>& forms, double budget,
                                      int maxRounds, const lab::StopToken& stop, const std::function<void(int)>& progress) {
  std::vector<Measured> out(forms.size());
  std::vector<std::vector<double>> times(forms.size());
  const Clock::time_point begin = Clock::now();
  for (int round = 0; round < maxRounds && !stop.stopRequested(); ++round) {
    for (std::size_t f = 0; f < forms.size() && !stop.stopRequested(); ++f) {
      synchronizeDevice(device);  // before the memory is read: the last run's queued frees are done
      const std::int64_t before = memory_allocated(device);
      if (round == 0) reset_peak_memory_stats(device);
      std::int64_t ops = 0;
      Tensor result;
      times[f].push_back(secondsOn(device, [&] { result = forms[f](ops); }));
      if (round == 0) {
        out[f].peakBytes = max_memory_allocated(device) - before;
        out[f].ops = ops;
        out[f].result = result;
      }
    }
    progress(round + 1);
    if (round >= 2 && secondsSince(begin) >= budget * static_cast<double>(forms.size())) break;
  }
  for (std::size_t f = 0; f < forms.size(); ++f) {
    out[f].time = spreadOf(times[f]);
    out[f].rounds = std::move(times[f]);
  }
  return out;
}

// How much slower `a` was than `b`, round by round: each round's ratio of their runs, which took turns
// within a few milliseconds of each other. A slow stretch of the machine (another program, the clock
// dropping) slows both runs of a round alike and leaves their ratio alone, where it would shift the
// two medians by different amounts if it fell on more of one's rounds than the other's.
Spread pairedRatio(const Measured& a, const Measured& b) {
  std::vector<double> ratios;
  const std::size_t rounds = std::min(a.rounds.size(), b.rounds.size());
  for (std::size_t r = 0; r < rounds; ++r) ratios.push_back(a.rounds[r] / b.rounds[r]);
  return spreadOf(std::move(ratios));
}

double largestDifference(const Tensor& x, const Tensor& reference, std::int64_t rows) {
  return abs(sub(x.slice(0, 0, rows), reference.slice(0, 0, rows))).max().item();
}

}  // namespace

std::vector<lab::ParamSpec> VectoriseLab::params() const {
  using namespace lab;
  return {
      intParam("points", 1024, 1, 1 << 20, "n: the points a, one per row"),
      intParam("centres", 64, 1, 1 << 16, "m: the centres b"),
      intParam("features", 32, 1, 1 << 16, "d: the features of each point and centre"),
      intParam("chunk", 1, 1, 1 << 20, "Rows of a per op in the chunked loop: 1 is the per-row loop, n one op"),
      floatParam("loop_budget", 2.0, 0.05, 600.0,
                 "Seconds the per-pair loop may run: it is timed on as many rows as fit, and scaled to all n (every row is the same work)"),
      deviceParam("device", "The device to compute on"),
      intParam("seed", 0, 0, 2147483647, "Seed for the points and centres"),
  };
}

std::vector<lab::MeasurementSpec> VectoriseLab::measurements() const {
  return {
      {"per-pair loop time", "ms"},
      {"per-row loop time", "ms"},
      {"one-op time", "ms"},
      {"fixed cost per op", "us"},
      {"vectorised speed-up over the per-pair loop", "x"},
      {"vectorised speed-up over the per-row loop", "x"},
      {"chunked time relative to the fastest", "x"},
      {"chunked time relative to the fastest larger chunk", "x"},
      {"chunked time, slowest run relative to the fastest chunk's fastest", "x"},
      {"chunked time, fastest run relative to the fastest chunk's slowest", "x"},
      {"chunked memory relative to one op", "x"},
      {"matmul identity time relative to one op", "x"},
      {"largest difference from the loop's result", ""},
      {"matmul identity: largest difference from the loop's result", ""},
  };
}

void VectoriseLab::run(const lab::Params& p, lab::MetricSink& sink, const lab::StopToken& stop) {
  const Device device = resolveDevice(p.getString("device"));
  announceDevice(sink, device);
  const std::int64_t n = p.getInt("points"), m = p.getInt("centres"), d = p.getInt("features");
  const std::int64_t chunk = std::min(p.getInt("chunk"), n);
  // Keep the largest intermediate within the device's memory: the broadcast's (n, m, d) difference
  // and its square, float32 each.
  const double broadcastBytes = 2.0 * static_cast<double>(n) * static_cast<double>(m) * static_cast<double>(d) * 4.0;
  if (broadcastBytes > 0.5 * static_cast<double>(mem_get_info(device).first)) {
    throw ValueError("points x centres x features = " + formatNumber(static_cast<double>(n) * static_cast<double>(m) * static_cast<double>(d)) +
                     ": the one-op form would need " + formatGeneral(broadcastBytes / (1 << 20), 4) + " MiB for its (n, m, d) intermediates, more than half of what " +
                     device.str() + " has free; choose fewer points, centres or features");
  }
  Generator gen(static_cast<std::uint64_t>(p.getInt("seed")));
  const Tensor a = randn({n, d}, gen).to(device), b = randn({m, d}, gen).to(device);

  // 1. The per-pair loop, row by row until its time budget is spent. Every row is the same m pairs, so
  //    it is timed in blocks of rows and the fastest block, scaled to n rows, is its time -- the same
  //    "fastest run" the other forms get (a block that met the GUI repainting is not the loop's cost).
  const double budget = p.getFloat("loop_budget");
  const std::int64_t block = 8;
  synchronizeDevice(device);
  reset_peak_memory_stats(device);
  const std::int64_t loopBefore = memory_allocated(device);
  const Clock::time_point loopStart = Clock::now();
  Tensor loopD = zeros({n, m}, {.device = device});
  std::int64_t pairOps = 0, rowsDone = 0;
  double fastestRow = 1e300;
  while (rowsDone < n && !stop.stopRequested()) {
    const std::int64_t rows = std::min(block, n - rowsDone);
    const Clock::time_point blockStart = Clock::now();
    for (std::int64_t r = 0; r < rows; ++r) perPair(a, b, loopD, rowsDone + r, pairOps);
    synchronizeDevice(device);
    fastestRow = std::min(fastestRow, secondsSince(blockStart) / static_cast<double>(rows));
    rowsDone += rows;
    sink.progress(static_cast<double>(rowsDone), static_cast<double>(n), "loop over pairs, row " + std::to_string(rowsDone));
    if (secondsSince(loopStart) >= budget) break;
  }
  if (stop.stopRequested()) return;
  const double loopMeasured = secondsSince(loopStart);
  const std::int64_t loopPeak = max_memory_allocated(device) - loopBefore;
  const double opsPerRow = static_cast<double>(pairOps) / static_cast<double>(rowsDone);
  const double pairSeconds = fastestRow * static_cast<double>(n);
  const double pairOpsAll = opsPerRow * static_cast<double>(n);
  const double perOpUs = fastestRow / opsPerRow * 1e6;
  sink.info("The loop over pairs ran " + formatNumber(pairOps) + " ops (" + formatNumber(static_cast<std::int64_t>(opsPerRow)) + " a row) on " +
            std::to_string(rowsDone) + " of " + std::to_string(n) + " rows in " + formatFixed(loopMeasured * 1000.0, 1) + " ms" +
            (rowsDone < n ? " (its time budget: every row is the same work, so all rows are timed as " + std::to_string(n) + " x its fastest row)" : "") +
            ". A row took " + formatGeneral(fastestRow * 1e6, 3) + " us (its fastest block of rows): about " + formatGeneral(perOpUs, 3) + " us per op on vectors of " +
            std::to_string(d) + " numbers -- nearly all of it the op's fixed cost.");

  // 2. The vectorised forms, and the chunked loop at every power-of-two chunk (and at the learner's),
  //    all measured in the same rounds.
  std::vector<std::int64_t> sizes;
  for (std::int64_t c = 1; c < n; c *= 2) sizes.push_back(c);
  sizes.push_back(n);
  if (std::find(sizes.begin(), sizes.end(), chunk) == sizes.end()) sizes.push_back(chunk);
  std::sort(sizes.begin(), sizes.end());
  std::vector<std::function<Tensor(std::int64_t&)>> forms = {[&](std::int64_t& ops) { return oneOp(a, b, ops); },
                                                             [&](std::int64_t& ops) { return matmulIdentity(a, b, ops); }};
  for (std::int64_t c : sizes) forms.push_back([&a, &b, c](std::int64_t& ops) { return chunked(a, b, c, ops); });
  constexpr int kMaxRounds = 20;
  std::vector<Measured> measured = measureInRounds(device, forms, 0.2, kMaxRounds, stop, [&](int round) {
    sink.progress(round, kMaxRounds, "the vectorised forms and the chunks, round " + std::to_string(round));
  });
  if (stop.stopRequested()) return;
  Measured& whole = measured[0];
  Measured& identity = measured[1];
  auto ofChunk = [&](std::int64_t c) -> Measured& {
    return measured[2 + static_cast<std::size_t>(std::find(sizes.begin(), sizes.end(), c) - sizes.begin())];
  };
  Measured& perRow = ofChunk(1);
  Measured& yours = ofChunk(chunk);
  for (Measured* f : {&perRow, &yours, &whole, &identity}) f->difference = largestDifference(f->result, loopD, rowsDone);

  sink.view({.id = "forms", .title = "Four ways, one result", .kind = lab::ViewKind::Table,
             .columns = {{"form", ""}, {"rows per op", ""}, {"ops run", ""}, {"time", "ms"}, {"speed-up vs pairs", "x"},
                         {"peak memory", "bytes"}, {"difference from the loop", ""}},
             .note = std::string("Time: the median of each form's runs, the forms taking turns round after round; the loop over "
                                 "pairs' fastest block of rows, scaled to all n rows. ") +
                     "Speed-up: against the loop over pairs. Peak memory: what the computation allocated beyond its inputs (D and its "
                     "intermediates). Difference: the largest |D - D_loop| over the rows the loop computed (rounding, not a mistake)." +
                     (rowsDone < n ? " The loop's ops are scaled from the rows its budget allowed." : "")});
  auto formRow = [&](const std::string& name, std::int64_t rowsPerOp, const Measured& f) {
    sink.row("forms", {name, rowsPerOp, f.ops, f.time.median * 1000.0, pairSeconds / f.time.median, f.peakBytes,
                       f.difference});
  };
  sink.row("forms", {std::string("pairs: D[i, j] = ..."), std::string("one pair"), static_cast<std::int64_t>(std::llround(pairOpsAll)),
                     pairSeconds * 1000.0, 1.0, loopPeak, 0.0});
  formRow("rows: D[i] = ...", 1, perRow);
  if (chunk != 1) formRow("chunks of " + std::to_string(chunk) + " rows (yours)", chunk, yours);
  formRow("one op (broadcast)", n, whole);
  formRow("matmul identity", n, identity);

  // 3. The sweep: time and memory against rows per op, on logarithmic axes.
  const lab::Axis rowsAxis{"rows per op (chunk)", "", true};
  sink.view({.id = "sweep_time", .title = "Time vs chunk", .kind = lab::ViewKind::Line, .x = {rowsAxis},
             .y = {"time for all rows", "ms", true}, .series = {{"chunked", "chunked loop"}},
             .note = "Each op has a fixed cost, so a loop of n/chunk ops pays it n/chunk times: the time falls as the chunk grows, "
                     "until each op has enough work to hide its fixed cost. A very large chunk can be slower again: its intermediates "
                     "no longer fit in the processor's cache. The lines: the one-op and matmul-identity times."});
  sink.view({.id = "sweep_memory", .title = "Memory vs chunk", .kind = lab::ViewKind::Line, .x = {rowsAxis},
             .y = {"peak memory", "bytes", true}, .series = {{"chunked", "chunked loop"}},
             .note = "Peak memory counts D itself (n x m) and the chunk's intermediates, (chunk, m, d) each: it grows with the chunk, up "
                     "to the one-op form's (n, m, d)."});
  sink.level("sweep_time", "one op", whole.time.median * 1000.0);
  sink.level("sweep_time", "matmul identity", identity.time.median * 1000.0);
  sink.level("sweep_memory", "one op", static_cast<double>(whole.peakBytes));
  const Measured* fastest = &whole;  // the fastest way to fill D in chunks, by the medians, one op included
  std::int64_t fastestChunk = n;
  for (std::int64_t c : sizes) {
    const Measured& f = ofChunk(c);
    if (f.time.median < fastest->time.median) {
      fastest = &f;
      fastestChunk = c;
    }
    sink.point("sweep_time", "chunked", {static_cast<double>(c)}, f.time.median * 1000.0);
    sink.point("sweep_memory", "chunked", {static_cast<double>(c)}, static_cast<double>(std::max<std::int64_t>(f.peakBytes, 1)));
  }
  sink.marker("sweep_time", {static_cast<double>(chunk)}, "your chunk: " + std::to_string(chunk));
  sink.marker("sweep_memory", {static_cast<double>(chunk)}, "your chunk: " + std::to_string(chunk));

  // 4. The measurements the lesson's claims and challenge rest on: medians, and for the challenge the
  //    median of the paired per-round ratios (pairedRatio).
  const double chunkTime = &yours == fastest ? 1.0 : pairedRatio(yours, *fastest).median;
  // The challenge's time: would a larger chunk still pay? Your chunk's paired ratio to each larger one
  // (the one op included), the largest of them -- 1 when none is larger or every larger one is slower.
  // Not "against the fastest": on a machine busy with other work (a parallel build beside the lesson)
  // the curve is no longer flat on the right -- large chunks' intermediates lose the cache to the other
  // programs and their two-thread ops wait for a thread that was preempted -- and its minimum moves to
  // chunks of 16 to 128 rows. A chunk of 512 then measured 1.4-1.6x the fastest in every round, though
  // no larger chunk beat it: a right answer on a quiet machine graded wrong on a busy one.
  double largerChunkTime = 1.0;
  std::int64_t fastestLarger = chunk;
  for (std::int64_t c : sizes) {
    if (c <= chunk) continue;
    const double ratio = pairedRatio(yours, ofChunk(c)).median;
    if (ratio > largerChunkTime) largerChunkTime = ratio, fastestLarger = c;
  }
  if (chunk < n) {
    if (const double ratio = pairedRatio(yours, whole).median; ratio > largerChunkTime) largerChunkTime = ratio, fastestLarger = n;
  }
  const double chunkMemory = static_cast<double>(yours.peakBytes) / static_cast<double>(std::max<std::int64_t>(whole.peakBytes, 1));
  const double difference = std::max({perRow.difference, yours.difference, whole.difference});
  const double identityDifference = identity.difference;
  sink.measurement("per-pair loop time", pairSeconds * 1000.0, "ms");
  sink.measurement("per-row loop time", perRow.time.median * 1000.0, "ms");
  sink.measurement("one-op time", whole.time.median * 1000.0, "ms");
  sink.measurement("fixed cost per op", perOpUs, "us");
  sink.measurement("vectorised speed-up over the per-pair loop", pairSeconds / whole.time.median, "x");
  sink.measurement("vectorised speed-up over the per-row loop", perRow.time.median / whole.time.median, "x");
  sink.measurement("chunked time relative to the fastest", chunkTime, "x");
  sink.measurement("chunked time relative to the fastest larger chunk", largerChunkTime, "x");
  sink.measurement("chunked time, slowest run relative to the fastest chunk's fastest", yours.time.high / fastest->time.low, "x");
  sink.measurement("chunked time, fastest run relative to the fastest chunk's slowest", yours.time.low / fastest->time.high, "x");
  sink.measurement("chunked memory relative to one op", chunkMemory, "x");
  sink.measurement("matmul identity time relative to one op", identity.time.median / whole.time.median, "x");
  sink.measurement("largest difference from the loop's result", difference, "");
  sink.measurement("matmul identity: largest difference from the loop's result", identityDifference, "");
  sink.record("vectorise", {{"pair_ms", pairSeconds * 1000.0}, {"row_ms", perRow.time.median * 1000.0}, {"chunk", chunk},
                            {"chunk_ms", yours.time.median * 1000.0}, {"one_op_ms", whole.time.median * 1000.0},
                            {"identity_ms", identity.time.median * 1000.0}, {"device", device.str()}});
  const std::string yoursText =
      &yours == fastest ? "Your chunk of " + std::to_string(chunk) + (chunk == 1 ? " row" : " rows") + " had the fastest median time of all chunks"
                        : "Your chunk of " + std::to_string(chunk) + (chunk == 1 ? " row " : " rows ") +
                              comparedTimes(yours.time, fastest->time, "the fastest chunk (" + std::to_string(fastestChunk) + " rows)");
  const std::string largerText =
      fastestLarger == chunk ? std::string(chunk < n ? "; no larger chunk was faster in most rounds" : "")
      : fastestLarger == fastestChunk ? std::string()  // said just before
                             : "; a chunk of " + std::to_string(fastestLarger) + " rows was " + formatGeneral(largerChunkTime, 3) +
                                   "x faster (the median of the rounds' ratios)";
  sink.info("One op over all " + std::to_string(n) + " rows took " + formatFixed(whole.time.median * 1000.0, 3) + " ms (the median of " +
            std::to_string(whole.time.runs) + " runs): " + fasterOrSlower(pairSeconds / whole.time.median) + " than the loop over pairs. Against the loop over rows, one op " +
            comparedTimes(whole.time, perRow.time, "it") +
            (compare(perRow.time, whole.time) == Difference::Lower ? " -- its (n, m, d) intermediates are too large to stay in the processor's cache, which is what chunks are for" : "") +
            ". The loops and the one op agree " + (difference == 0 ? std::string("exactly") : "to " + formatGeneral(difference, 2)) +
            "; the matmul identity differs by " + formatGeneral(identityDifference, 2) + " (rounding). " + yoursText + largerText + ", with " +
            formatFixed(chunkMemory, 3) + "x the one op's memory.");
}

}  // namespace gpulab::labs
