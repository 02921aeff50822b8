// The "streams" lab: what a second stream buys, and what it costs to get wrong. Read it next to the
// PyTorch it mirrors:
//
//   chunks = [torch.randn(rows, 512).pin_memory() for _ in range(n)]    # on the host, pinned
//   # 1. serial: one stream
//   for c in chunks:
//       x = c.to(device, non_blocking=True)
//       outs.append(torch.relu(x @ W))
//
//   # 2. overlapped: the copies on a stream of their own
//   copy_stream = torch.cuda.Stream()
//   for c in chunks:
//       with torch.cuda.stream(copy_stream):
//           x = c.to(device, non_blocking=True)
//           ready = torch.cuda.Event(); ready.record()
//       # this chunk's compute waits for its own copy only
//       torch.cuda.current_stream().wait_event(ready)
//       # x was allocated for the copy stream and is also used on this one
//       x.record_stream(torch.cuda.current_stream())
//       outs.append(torch.relu(x @ W))
//
//   # 3. the race (the lab first queues ~50 ms of work, so the copy surely comes late)
//   host = result.to("cpu", non_blocking=True)    # the copy is only queued
//   copied = torch.cuda.Event(); copied.record()  # a mark on the stream, right after the copy
//   next_step()                                   # more work queued behind it (~50 ms), as a loop would
//   print(host[0])                                # too early: whatever that memory held
//   torch.cuda.synchronize(); print(host[0])      # a fix: waits for everything queued, next_step too
//   copied.synchronize(); print(host[0])          # the other: waits for the copy only
//
// Besides, the lab records events before and after each copy and compute (the timelines), starts both
// streams from one event, and lets the compute stream wait for the copy stream at the end.
//
// A stream runs its work in order; two streams are ordered only where the program says so (an event,
// wait_stream, synchronize). A GPU has copy engines besides its compute units, so a copy on one stream
// and a kernel on another really run at the same time; on one stream they take turns.
#include "lessons/labs/streams_lab.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>

#include "engine/core/errors.h"
#include "engine/core/number_format.h"
#include "engine/memory/caching_allocator.h"
#include "engine/runtime/device_memory.h"
#include "engine/ops/ops.h"
#include "engine/runtime/device_runtime.h"
#include "engine/runtime/stream.h"
#include "lessons/labs/repeated_timing.h"
#include "lessons/labs/training.h"

namespace gpulab::labs {

namespace {

using Clock = std::chrono::steady_clock;
constexpr std::int64_t kFeatures = 512;

// One pass over the chunks; each chunk's copy and compute as spans on the device's clock.
struct PassRun {
  double seconds = 0;  // from queueing the first copy until the device finished
  double checksum = 0;
  std::vector<lab::Span> spans;  // lane "copy" or "compute"; seconds since the pass started
};

// `copies`: where the copies go; the current stream (serial) or one of their own (overlapped).
PassRun runPass(Device device, const std::vector<Tensor>& chunks, const Tensor& W, const cuda::Stream& copies) {
  const cuda::Stream compute = cuda::current_stream(device);
  const bool overlapped = copies != compute;
  cuda::synchronize(device.index());
  struct Marks {
    cuda::Event copyStart{true}, copyEnd{true}, computeStart{true}, computeEnd{true};
  };
  std::vector<Marks> marks(chunks.size());
  std::vector<Tensor> outs;
  cuda::Event origin(true);
  origin.record(compute);
  copies.wait_event(origin);  // both streams start from here
  const Clock::time_point start = Clock::now();
  for (std::size_t i = 0; i < chunks.size(); ++i) {
    Marks& m = marks[i];
    Tensor x;
    {
      cuda::StreamGuard on(copies);
      m.copyStart.record(copies);
      x = chunks[i].to(device, /*non_blocking=*/true);
      m.copyEnd.record(copies);
    }
    if (overlapped) {
      compute.wait_event(m.copyEnd);  // this chunk's compute waits for its own copy, not for the later ones
      x.record_stream(compute);       // allocated for the copy stream, read on this one
    }
    m.computeStart.record(compute);
    outs.push_back(relu(matmul(x, W)));
    m.computeEnd.record(compute);
  }
  compute.wait_stream(copies);
  cuda::synchronize(device.index());
  PassRun r;
  r.seconds = secondsSince(start);
  for (const Tensor& o : outs) r.checksum += o.sum().item();
  auto at = [&](const cuda::Event& e) { return origin.elapsed_time(e) / 1000.0; };
  for (std::size_t i = 0; i < marks.size(); ++i) {
    const std::string chunk = "chunk " + std::to_string(i + 1);
    r.spans.push_back({"", "copy", "copies " + chunk + " in", at(marks[i].copyStart), at(marks[i].copyEnd)});
    r.spans.push_back({"", "compute", chunk + ": x @ W, relu", at(marks[i].computeStart), at(marks[i].computeEnd)});
  }
  return r;
}

// Median seconds of `repeats` runs of `work`, each waited for.
template <typename Work>
double timed(Device device, int repeats, Work work) {
  std::vector<double> times;
  for (int i = 0; i < repeats; ++i) times.push_back(secondsOn(device, work));
  return median(times);
}

// Work that keeps the current stream busy for about 50 ms, so that what is queued after it is not done
// for a while: products of an n x n matrix, n doubled until one product takes a millisecond on this
// device, measured. Many products of a small matrix would not do: a GPU runs them as fast as the host
// queues them, so the stream never falls behind (an H200 read both races right, 2026-11-26, when the
// size was extrapolated from a 256 x 256 product's time, which is all launch).
class Burner {
 public:
  explicit Burner(Device device) {
    constexpr int kQueued = 4;  // products per timing: what the stream sustains, not one launch's latency
    std::int64_t size = 256;
    double each = 0;
    for (;; size *= 2) {
      B_ = full({size, size}, 1.0 / static_cast<double>(size), {.device = device});
      each = timed(device, 3, [&] { (*this)(kQueued); }) / kQueued;
      if (each >= 1e-3 || size >= 8192) break;
    }
    products_ = static_cast<int>(std::clamp(0.05 / each, 2.0, 200.0));
  }
  void operator()() const { (*this)(products_); }

 private:
  void operator()(int products) const {
    Tensor y = B_;
    for (int i = 0; i < products; ++i) y = matmul(y, B_);
  }
  Tensor B_;
  int products_ = 0;
};

}  // namespace

std::vector<lab::ParamSpec> StreamsLab::params() const {
  using namespace lab;
  return {
      cudaDeviceParam("device", "The device (streams belong to CUDA devices: the emulated GPU has them too)"),
      intParam("chunks", 8, 2, 64, "Chunks copied to the device and computed on"),
      floatParam("chunk_mb", 4.0, 0.25, 64.0, "Size of each chunk, MiB"),
      floatParam("compute_ratio", 1.0, 0.5, 10.0, "Compute per chunk, as a multiple of the chunk's copy time on this device"),
      choiceParam("fix", "none", {"none", "synchronize", "event"},
                  "How the host waits before reading a non_blocking copy: not at all (the race), torch.cuda.synchronize(), or an "
                  "event recorded after the copy"),
      intParam("repeats", 3, 1, 20, "Runs of each pass (and of each wait), taking turns; the median counts, the range shows the noise"),
  };
}

std::vector<lab::MeasurementSpec> StreamsLab::measurements() const {
  return {
      {"overlap speed-up", "x"},
      {"serial pass time", "ms"},
      {"overlapped pass time", "ms"},
      {"host wait, event (*)", "ms"},
      {"host wait, synchronize() (*)", "ms"},
      {"checksum difference", ""},
      {"host read correct (yours)", ""},
      {"host wait before the read (yours)", "ms"},
      {"host read correct after synchronize", ""},
      {"second stream correct without wait_stream", ""},
      {"second stream correct with wait_stream", ""},
  };
}

void StreamsLab::run(const lab::Params& p, lab::MetricSink& sink, const lab::StopToken& stop) {
  const Device device = resolveDevice(p.getString("device"));
  if (!device.isCuda()) {
    throw ValueError("streams belong to CUDA devices, and " + device.str() +
                     " is not one: work on the CPU is done when an op returns. Choose cuda (the emulated GPU, without an "
                     "NVIDIA GPU).");
  }
  announceDevice(sink, device);
  const bool emulated = cuda::isEmulatedGpu(device);
  const auto n = static_cast<std::size_t>(p.getInt("chunks"));
  const auto rows = std::max<std::int64_t>(1, static_cast<std::int64_t>(p.getFloat("chunk_mb") * 1024 * 1024 / (kFeatures * 4)));
  const int repeats = static_cast<int>(p.getInt("repeats"));
  const std::string fix = p.getString("fix");

  // The chunks, on the host in pinned memory (only from there is a copy asynchronous) -- and on the
  // emulated GPU their copies are host memory too.
  const double chunkBytes = static_cast<double>(rows * kFeatures * 4);
  // Every chunk's copy and its output stay on the device until a pass ends: more than half of its free
  // memory is refused, naming what to change, rather than met as an out-of-memory error mid-pass --
  // first for the copies alone (before the chunks are made), then with the outputs (once their width
  // is known).
  auto requirePassFits = [&](double bytes, const std::string& what) {
    if (const double free = static_cast<double>(mem_get_info(device).first); bytes > 0.5 * free) {
      throw ValueError(std::to_string(n) + " chunks of " + formatGeneral(p.getFloat("chunk_mb"), 3) + " MiB with compute_ratio " +
                       formatGeneral(p.getFloat("compute_ratio"), 3) + ": a pass keeps " + formatBytes(static_cast<std::int64_t>(bytes)) + " on " +
                       device.str() + " (" + what + "), more than half of the " + formatBytes(static_cast<std::int64_t>(free)) +
                       " it has free; choose fewer chunks, a smaller chunk_mb or a smaller compute_ratio");
    }
  };
  requirePassFits(static_cast<double>(n) * chunkBytes, "the chunks' copies alone");
  requireHostMemory(static_cast<double>(n) * chunkBytes * (emulated ? 2.0 : 1.0),
                    std::to_string(n) + " chunks of " + formatGeneral(p.getFloat("chunk_mb"), 3) + " MiB: the pinned chunks" +
                        (emulated ? " and their copies on the emulated GPU" : ""),
                    "choose fewer chunks or a smaller chunk_mb");
  Generator gen(7);
  std::vector<Tensor> chunks;
  for (std::size_t i = 0; i < n; ++i) chunks.push_back(randn({rows, kFeatures}, gen).pin_memory());

  // Compute per chunk sized against the copy: x @ W with W (512, width), width found from one copy and
  // one product of width 512 on this device.
  const double copySeconds = timed(device, 5, [&] { (void)chunks[0].to(device, true); });
  const Tensor W512 = randn({kFeatures, kFeatures}, gen, {.device = device}) * (1.0 / std::sqrt(512.0));
  const Tensor x0 = chunks[0].to(device);
  const double productSeconds = timed(device, 5, [&] { (void)matmul(x0, W512); });
  const auto width = std::clamp<std::int64_t>(
      static_cast<std::int64_t>(std::lround(512.0 * p.getFloat("compute_ratio") * copySeconds / productSeconds)), 16, 16384);
  const Tensor W = randn({kFeatures, width}, gen, {.device = device}) * (1.0 / std::sqrt(512.0));
  requirePassFits(static_cast<double>(n) * (chunkBytes + static_cast<double>(rows * width * 4)),
                  "each chunk and its output, 512 x " + std::to_string(width) + " a row");
  // What the width reached (it is clamped): the product's time scales with it.
  const double reached = productSeconds * static_cast<double>(width) / 512.0 / copySeconds;
  sink.info("A chunk of " + formatBytes(rows * kFeatures * 4) + " is copied in " + formatGeneral(copySeconds * 1e3, 3) +
            " ms here; its compute, x @ W with W 512 x " + std::to_string(width) + ", should take about " + formatGeneral(reached, 2) +
            " times that.");

  // 1. Serial and overlapped, taking turns; each reports the median of its passes and their range, and
  //    its median pass is drawn.
  // copy_stream = torch.cuda.Stream(): made once, as a program would.
  const cuda::Stream copyStream = cuda::Stream::create(device), oneStream = cuda::current_stream(device);
  std::vector<PassRun> serialRuns, overlappedRuns;
  (void)runPass(device, chunks, W, copyStream);  // warm-up: the streams' first use, the allocator's first blocks
  (void)runPass(device, chunks, W, oneStream);
  for (int rep = 0; rep < repeats && !stop.stopRequested(); ++rep) {
    serialRuns.push_back(runPass(device, chunks, W, oneStream));
    overlappedRuns.push_back(runPass(device, chunks, W, copyStream));
    sink.progress(rep + 1, repeats, "serial and overlapped passes");
  }
  if (stop.stopRequested()) return;
  auto medianPass = [](std::vector<PassRun>& runs, Spread& seconds) {
    std::vector<double> times;
    for (const PassRun& r : runs) times.push_back(r.seconds);
    seconds = spreadOf(times);
    return std::move(runs[medianIndex(times)]);
  };
  Spread serialSeconds, overlappedSeconds;
  const PassRun serial = medianPass(serialRuns, serialSeconds), overlapped = medianPass(overlappedRuns, overlappedSeconds);
  const std::string lane = emulated ? "emulated GPU " : "GPU ";
  auto timeline = [&](const std::string& id, const std::string& title, const PassRun& r, bool two) {
    sink.view({.id = id, .title = title, .kind = lab::ViewKind::Timeline, .x = {{"time", "s"}},
               .series = {{"copy", lane + (two ? "copy stream" : "stream") + ": copies"},
                          {"compute", lane + (two ? "default stream" : "stream") + ": compute"}},
               .note = "Each span from the device's clock: events recorded before and after each copy and each compute." +
                       std::string(two ? " Two streams: a chunk's compute waits (wait_event) for its own copy only."
                                       : " One stream: every copy waits for the compute before it, and the other way round.")});
    for (const lab::Span& s : r.spans) sink.span(id, s.lane, s.label, s.start, s.end);
  };
  timeline("serial", "One stream: copy, compute, copy, compute ...", serial, false);
  timeline("overlapped", "Two streams: the next copy while this chunk computes", overlapped, true);
  const double speedup = serialSeconds.median / overlappedSeconds.median;
  sink.view({.id = "passes", .title = "Serial against overlapped", .kind = lab::ViewKind::Table,
             .columns = {{"pass", ""}, {"time", "ms"}, {"range", "ms"}, {"relative", "x"}, {"checksum", ""}},
             .note = std::to_string(repeats) + " passes each, taking turns, until the device finished: the median pass (the timelines "
                     "draw it) and the range of all. The checksums (the sum of every output) agree: the second stream changes when the "
                     "work runs, not what it computes."});
  sink.row("passes", {std::string("one stream (serial)"), serialSeconds.median * 1e3, rangeText(serialSeconds, 1e3), 1.0, serial.checksum});
  sink.row("passes", {std::string("copies on a stream of their own (overlapped)"), overlappedSeconds.median * 1e3, rangeText(overlappedSeconds, 1e3),
                      speedup, overlapped.checksum});

  // 2. The race: a result copied to the host with non_blocking=True, read before the copy ran.
  static std::atomic<int> runs{0};
  const double v = 1.0 + (runs.fetch_add(1) % 997) / 1000.0;  // a value no earlier run left in memory
  const Burner burn(device);
  const Tensor filled = full({rows, kFeatures}, v, {.device = device});
  cuda::synchronize(device.index());
  burn();                                   // the stream is busy for a while...
  const Tensor result = filled.sum(1);      // ... before it computes this: every entry 512 * v
  const Tensor host = result.to(kCPU, /*non_blocking=*/true);  // queued: returns at once
  cuda::Event copied;
  copied.record(cuda::current_stream(device));  // after the copy, on its stream
  burn();                                        // the next step's work, queued behind the copy
  const Clock::time_point waitStart = Clock::now();
  if (fix == "synchronize") {
    cuda::synchronize(device.index());  // torch.cuda.synchronize(): every stream of the device, the next step too
  } else if (fix == "event") {
    copied.synchronize();  // waits for that point only
  }
  const double waited = secondsSince(waitStart);
  const double read = static_cast<double>(host.data<float>()[0]);  // host[0]: a plain read of host memory, no sync
  const double expected = 512.0 * v;
  const bool readRight = std::abs(read - expected) <= 1e-3 * expected;
  cuda::synchronize(device.index());
  const double readAfter = static_cast<double>(host.data<float>()[0]);

  // 2b. The two fixes' waits against each other: the same queue -- busy work, the copy, the event, the
  //     next step's work -- waited for with the event and with synchronize(), taking turns.
  auto timedWait = [&](bool withEvent) {
    cuda::synchronize(device.index());
    burn();
    const Tensor copy = filled.sum(1).to(kCPU, /*non_blocking=*/true);
    cuda::Event mark;
    mark.record(cuda::current_stream(device));
    burn();
    const Clock::time_point t = Clock::now();
    if (withEvent) mark.synchronize();
    else cuda::synchronize(device.index());
    const double seconds = secondsSince(t);
    cuda::synchronize(device.index());
    return seconds;
  };
  std::vector<double> eventWaits, synchronizeWaits;
  for (int rep = 0; rep < repeats && !stop.stopRequested(); ++rep) {
    eventWaits.push_back(timedWait(true));
    synchronizeWaits.push_back(timedWait(false));
    sink.progress(rep + 1, repeats, "the two waits");
  }
  if (stop.stopRequested()) return;
  const Spread eventWait = spreadOf(eventWaits), synchronizeWait = spreadOf(synchronizeWaits);

  // 3. The other race: a second stream reads a tensor before the first one wrote it.
  const cuda::Stream side = cuda::Stream::create(device);
  auto sideSum = [&](bool waitFirst) {
    cuda::synchronize(device.index());
    // On the default stream, behind the burner: not there for a while. Tripled, so that stale memory
    // (where `filled`, v, may have been) cannot pass for the answer.
    burn();
    const Tensor produced = filled * 3.0;
    Tensor doubled;
    {
      cuda::StreamGuard on(side);
      if (waitFirst) side.wait_stream(cuda::default_stream(device));  // the producer's stream
      doubled = produced * 2.0;
      produced.record_stream(side);
    }
    side.synchronize();
    const double sum = doubled.sum().item();
    cuda::synchronize(device.index());
    return sum;
  };
  const double sideExpected = 6.0 * v * static_cast<double>(rows * kFeatures);
  const double withoutWait = sideSum(false), withWait = sideSum(true);
  auto right = [&](double got) { return std::abs(got - sideExpected) <= 1e-4 * sideExpected; };

  sink.view({.id = "races", .title = "Reading too early: two races and their fixes", .kind = lab::ViewKind::Table,
             .columns = {{"what", ""}, {"expected", ""}, {"got", ""}, {"right", ""}},
             .note = "Ops on a stream are queued, not done: a host read or another stream's read must wait for them -- "
                     "synchronize(), an event, or wait_stream. Without the wait what is read is whatever that memory held."});
  const std::string fixText = fix == "none" ? "no wait (the race)" : fix == "synchronize" ? "after torch.cuda.synchronize()" : "after an event recorded after the copy";
  sink.row("races", {"host[0] of a non_blocking copy, " + fixText + " (yours)", expected, read, std::string(readRight ? "yes" : "no")});
  sink.row("races", {std::string("host[0] once the device has finished"), expected, readAfter,
                     std::string(std::abs(readAfter - expected) <= 1e-3 * expected ? "yes" : "no")});
  sink.row("races", {std::string("second stream, without wait_stream: sum of 2 * produced"), sideExpected, withoutWait,
                     std::string(right(withoutWait) ? "yes" : "no")});
  sink.row("races", {std::string("second stream, after side.wait_stream(default)"), sideExpected, withWait, std::string(right(withWait) ? "yes" : "no")});

  sink.view({.id = "waits", .title = "The host's wait: an event after the copy, or synchronize()", .kind = lab::ViewKind::Table,
             .columns = {{"wait", ""}, {"host waits", "ms"}, {"range", "ms"}},
             .note = "The same queue each time: about 50 ms of work, the copy, an event recorded after it, and the next step's work "
                     "(another 50 ms). " + std::to_string(repeats) + " waits of each kind, taking turns: the median and the range."});
  sink.row("waits", {std::string("copied.synchronize(): up to the copy"), eventWait.median * 1e3, rangeText(eventWait, 1e3)});
  sink.row("waits", {std::string("torch.cuda.synchronize(): everything queued"), synchronizeWait.median * 1e3, rangeText(synchronizeWait, 1e3)});

  sink.measurement("overlap speed-up", speedup, "x");
  sink.measurement("serial pass time", serialSeconds.median * 1e3, "ms");
  sink.measurement("overlapped pass time", overlappedSeconds.median * 1e3, "ms");
  sink.measurement("host wait, event (median)", eventWait.median * 1e3, "ms");
  sink.measurement("host wait, event (longest)", eventWait.high * 1e3, "ms");
  sink.measurement("host wait, synchronize() (median)", synchronizeWait.median * 1e3, "ms");
  sink.measurement("host wait, synchronize() (shortest)", synchronizeWait.low * 1e3, "ms");
  sink.measurement("checksum difference", std::abs(serial.checksum - overlapped.checksum) / std::max(1.0, std::abs(serial.checksum)), "");
  sink.measurement("host read correct (yours)", readRight ? 1.0 : 0.0, "");
  sink.measurement("host wait before the read (yours)", waited * 1e3, "ms");
  sink.measurement("host read correct after synchronize", std::abs(readAfter - expected) <= 1e-3 * expected ? 1.0 : 0.0, "");
  sink.measurement("second stream correct without wait_stream", right(withoutWait) ? 1.0 : 0.0, "");
  sink.measurement("second stream correct with wait_stream", right(withWait) ? 1.0 : 0.0, "");
  const bool eventShorter = compare(eventWait, synchronizeWait) == Difference::Lower;
  sink.info("A pass with the copies on their own stream " + comparedTimes(overlappedSeconds, serialSeconds, "a pass on one stream") + ". Reading the copy " + fixText +
            ": " + (readRight ? "right" : "wrong -- " + formatGeneral(read, 6) + " instead of " + formatGeneral(expected, 6)) +
            ". Waiting with the event " + comparedTimes(eventWait, synchronizeWait, "waiting with torch.cuda.synchronize()") +
            (eventShorter ? ": the event waits for its stream up to the copy, synchronize() for the next step's work queued after it too."
                          : ": here the waits varied too much to tell whether the next step's work lengthened synchronize()'s -- "
                            "is another program busy on this machine? Run it again.") +
            (emulated ? " This is the emulated GPU: its streams are threads of your CPU, so a copy and a product overlap only as far "
                        "as your cores (and memory) let two threads work at once; a GPU copies with engines of its own."
                      : ""));
}

}  // namespace gpulab::labs
