// The "devices" and "device-rule" labs. The PyTorch they mirror:
//
//   device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
//   print(torch.cuda.get_device_name(0), torch.cuda.get_device_properties(0))
//   a = torch.randn(n, n, device=device); (a @ a)            # time it on each device
//
//   cpu_tensor = torch.randn(3, 4); gpu_tensor = torch.randn(3, 4, device="cuda")
//   cpu_tensor + gpu_tensor    # RuntimeError: Expected all tensors to be on the same device ...
//   cpu_tensor.to("cuda") + gpu_tensor                         # the fix
#include "lessons/labs/devices_lab.h"

#include <algorithm>
#include <chrono>
#include <optional>

#include "engine/core/errors.h"
#include "engine/memory/memory.h"
#include "engine/nn/layers.h"
#include "engine/runtime/cuda_runtime.h"
#include "lessons/labs/training.h"

namespace gpulab::labs {

std::vector<lab::ParamSpec> DevicesLab::params() const {
  using namespace lab;
  return {
      intParam("size", 512, 16, 8192, "Matrix size n of the timed n x n product"),
      intParam("repeats", 10, 1, 1000, "Products per timing"),
      intParam("seed", 0, 0, 2147483647, "Seed for the random matrices"),
  };
}

namespace {

std::string gib(std::size_t bytes) { return formatBytes(static_cast<std::int64_t>(bytes)); }

using Clock = std::chrono::steady_clock;
double secondsSince(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

// Stop must take effect within about 100 ms of work, so the work is cut into slices of about this
// long and the stop token is checked between them.
constexpr double kSliceSeconds = 0.05;

// Waits for the device's queued work: a slice's clock then measures the work itself, and a stop
// check is never behind a queue of launched products.
void finishQueued(Device device) {
  if (device.isCuda()) cuda::synchronize(device.index());
}

// randn({n, n}, gen) on `device`, made in blocks of rows so that a large one (8192 x 8192 is 67M
// numbers) does not hold up Stop. The generator is counter-based, so the values are the same as one
// randn call's. Empty when stopped.
std::optional<Tensor> randomMatrix(Device device, std::int64_t n, Generator& gen, const lab::StopToken& stop) {
  Tensor a = Tensor::empty({n, n}, kFloat32, device);
  const std::int64_t rows = std::max<std::int64_t>(1, (std::int64_t{1} << 20) / n);  // ~1M numbers per block
  for (std::int64_t r = 0; r < n; r += rows) {
    if (stop.stopRequested()) return std::nullopt;
    const std::int64_t end = std::min(n, r + rows);
    a.slice(0, r, end).copy_(randn({end - r, n}, gen).to(device));
  }
  return a;
}

// A slice of `count` units took `seconds`: the count that makes the next one about kSliceSeconds,
// changing by at most 4x up and 2x down per slice, within [1, maxCount].
std::int64_t nextSliceCount(std::int64_t count, double seconds, std::int64_t maxCount) {
  const double ideal = static_cast<double>(count) * kSliceSeconds / std::max(seconds, 1e-6);
  const double bounded = std::clamp(ideal, static_cast<double>(count) / 2.0, static_cast<double>(count) * 4.0);
  return std::clamp<std::int64_t>(static_cast<std::int64_t>(bounded), 1, maxCount);
}

// Seconds per n x n product (a @ a), measured over `repeats` products after a warm-up; empty when
// stopped. The work is timed in slices of about kSliceSeconds, with the stop token checked between
// them:
// - when one product is quick, a slice is several whole products;
// - when one product alone takes longer, it is computed as tiles, a[r0:r1, :] @ a[:, c0:c1], the
//   same arithmetic as the whole product (a BLAS library tiles it the same way inside one call).
//   The columns are cut into contiguous panels once, before timing; the rows of a tile adapt to the
//   machine, so that a slice takes about kSliceSeconds. (Blocks of whole rows would not do: each
//   would read all of `a`, and for n = 8192 that alone takes about as long as a slice.)
std::optional<double> timeMatmul(Device device, std::int64_t n, std::int64_t repeats, Generator& gen, const lab::StopToken& stop) {
  const std::optional<Tensor> made = randomMatrix(device, n, gen, stop);
  if (!made) return std::nullopt;
  const Tensor& a = *made;
  Tensor out;
  auto timed = [&](auto&& work) {
    const auto t0 = Clock::now();
    work();
    finishQueued(device);
    return secondsSince(t0);
  };

  // 1. Warm-up: the first product pays for set-up (threads, handles, kernel choice), so a few rows
  //    first; then a whole product when it is estimated to fit in a slice.
  constexpr std::int64_t kPanel = 1024;  // columns per tile
  const std::int64_t probeRows = std::min<std::int64_t>(n, 4);
  const Tensor probePanel = a.slice(1, 0, std::min(n, kPanel)).contiguous();
  double probe = 0;
  for (int i = 0; i < 2; ++i) {
    if (stop.stopRequested()) return std::nullopt;
    probe = timed([&] { out = matmul(a.slice(0, 0, probeRows), probePanel); });
  }
  const double estimate = probe / static_cast<double>(probeRows * probePanel.size(1)) * static_cast<double>(n * n);
  double one = 0;  // seconds of one whole product, when it was estimated to fit in a slice
  if (estimate <= kSliceSeconds) {
    if (stop.stopRequested()) return std::nullopt;
    one = timed([&] { out = matmul(a, a); });
  }
  // A product that overran its estimate is tiled too, so no slice is much longer than planned.
  const bool wholeProducts = estimate <= kSliceSeconds && one <= 1.5 * kSliceSeconds;

  if (wholeProducts) {
    std::int64_t perSlice = nextSliceCount(1, one, repeats);
    double seconds = 0;
    for (std::int64_t left = repeats; left > 0;) {  // 2. Products, several per slice.
      if (stop.stopRequested()) return std::nullopt;
      const std::int64_t count = std::min(left, perSlice);
      const double t = timed([&] {
        for (std::int64_t i = 0; i < count; ++i) out = matmul(a, a);
      });
      seconds += t;
      left -= count;
      perSlice = nextSliceCount(count, t, repeats);
    }
    return seconds / static_cast<double>(repeats);
  }

  // 2. Tiles: the columns of `a` as contiguous panels (n, <= kPanel), then rows per tile found on
  //    the first panel until a slice takes about kSliceSeconds (at most 8 warm-up slices).
  std::vector<Tensor> panels;
  for (std::int64_t c = 0; c < n; c += kPanel) {
    if (stop.stopRequested()) return std::nullopt;
    panels.push_back(a.slice(1, c, std::min(n, c + kPanel)).contiguous());
  }
  std::int64_t rows = probeRows;
  for (int i = 0; i < 8; ++i) {
    if (stop.stopRequested()) return std::nullopt;
    const double t = timed([&] { out = matmul(a.slice(0, 0, rows), panels.front()); });
    const std::int64_t next = nextSliceCount(rows, t, n);
    const bool settled = (t >= 0.5 * kSliceSeconds && t <= 1.5 * kSliceSeconds) || (next == rows);
    rows = next;
    if (settled) break;
  }
  // 3. The products, tile by tile.
  double seconds = 0;
  for (std::int64_t product = 0; product < repeats; ++product) {
    for (const Tensor& panel : panels) {
      for (std::int64_t r = 0; r < n;) {
        if (stop.stopRequested()) return std::nullopt;
        const std::int64_t count = std::min(rows, n - r);
        const double t = timed([&] { out = matmul(a.slice(0, r, r + count), panel); });
        seconds += t;
        r += count;
        if (count == rows) rows = nextSliceCount(rows, t, n);  // a short last tile says little
      }
    }
  }
  return seconds / static_cast<double>(repeats);
}

}  // namespace

void DevicesLab::run(const lab::Params& p, lab::MetricSink& sink, const lab::StopToken& stop) {
  const cuda::Availability a = cuda::availability();
  sink.onMessage(lab::MessageKind::Info, "torch.cuda.is_available() -> " + std::string(a.usable ? "True" : "False"));
  for (const auto& d : a.devices) {
    sink.onMessage(lab::MessageKind::Info, "cuda:" + std::to_string(d.index) + ": " + d.name + ", compute capability " +
                                               std::to_string(d.major) + "." + std::to_string(d.minor) + ", " +
                                               std::to_string(d.multiprocessor_count) + " SMs, " + gib(d.total_memory) +
                                               " total, " + gib(d.free_memory) + " free");
  }
  if (!a.usable) sink.onMessage(lab::MessageKind::Info, "No usable GPU: " + a.reason + ". Everything runs on the CPU.");
  sink.onMessage(lab::MessageKind::Info, "CUDA_VISIBLE_DEVICES=" + a.cuda_visible_devices);
  const Device device = defaultDevice();
  sink.onMessage(lab::MessageKind::Info, "device = " + device.str());

  Generator gen(static_cast<std::uint64_t>(p.getInt("seed")));
  const std::int64_t n = p.getInt("size"), repeats = p.getInt("repeats");
  const double flops = 2.0 * static_cast<double>(n) * static_cast<double>(n) * static_cast<double>(n);
  // Each timing checks the stop token between slices of about 50 ms (see timeMatmul).
  const std::optional<double> cpuSeconds = timeMatmul(kCPU, n, repeats, gen, stop);
  if (cpuSeconds) sink.onMeasurement({"matmul on cpu", flops / *cpuSeconds / 1e9, "GFLOP/s"});
  if (device.isCuda() && cpuSeconds) {
    if (const std::optional<double> gpuSeconds = timeMatmul(device, n, repeats, gen, stop)) {
      sink.onMeasurement({"matmul on " + device.str(), flops / *gpuSeconds / 1e9, "GFLOP/s"});
      sink.onMeasurement({"speed-up of " + device.str() + " over cpu", *cpuSeconds / *gpuSeconds, "x"});
    }
  }
  lab::RunSummary s;
  s.device = device.str();
  s.stopped = stop.stopRequested();
  sink.onDone(s);
}

std::vector<lab::ParamSpec> DeviceRuleLab::params() const {
  using namespace lab;
  return {textParam("device", "auto", "The GPU to pair with the CPU: auto, cuda or cuda:N", checkDeviceString)};
}

void DeviceRuleLab::run(const lab::Params& p, lab::MetricSink& sink, const lab::StopToken&) {
  const Device gpu = resolveDevice(p.getString("device"));
  Tensor cpuTensor = randn({3, 4});
  if (gpu.isCuda()) {
    Tensor gpuTensor = randn({3, 4}).to(gpu);
    sink.onMessage(lab::MessageKind::Info, "cpu_tensor + gpu_tensor, with gpu_tensor on " + gpu.str() + ":");
    try {
      (void)(cpuTensor + gpuTensor);
      sink.onMessage(lab::MessageKind::Warning, "no error: the same-device rule was not enforced (this is a bug)");
    } catch (const DeviceMismatchError& e) {
      sink.onMessage(lab::MessageKind::EngineError, e.what());
    }
    Tensor fixed = cpuTensor.to(gpu) + gpuTensor;
    sink.onMessage(lab::MessageKind::Info, "cpu_tensor.to(\"" + gpu.str() + "\") + gpu_tensor works: the result is on " + fixed.device().str());

    nn::Sequential model{std::make_shared<nn::Linear>(4, 8), std::make_shared<nn::ReLU>(), std::make_shared<nn::Linear>(8, 1)};
    model.to(gpu);
    sink.onMessage(lab::MessageKind::Info, "model.to(\"" + gpu.str() + "\"); model(cpu_tensor):");
    try {
      (void)model(cpuTensor);
    } catch (const DeviceMismatchError& e) {
      sink.onMessage(lab::MessageKind::EngineError, e.what());
    }
    sink.onMessage(lab::MessageKind::Info, "model(cpu_tensor.to(\"" + gpu.str() + "\")) works: output shape " +
                                               shapeStr(model(cpuTensor.to(gpu)).sizes()));
  } else {
    sink.onMessage(lab::MessageKind::Info,
                   "No usable GPU here (" + cuda::availability().reason + "), so no tensor can live on cuda:0. On a machine "
                   "with a GPU, cpu_tensor + gpu_tensor raises the error below. It is produced by GPU Lab's own rule, for "
                   "an emulated second device:");
    const auto msg = deviceMismatchMessage("add", {{"self", kCPU, false}, {"other", Device(DeviceType::CUDA, 0), false}});
    sink.onMessage(lab::MessageKind::EngineError, "[emulated cuda:0 -- no GPU on this machine]\n" + msg.value_or(""));
  }
  // The one exception, real on every machine: a 0-dim CPU tensor (a Python number) may join any op.
  Tensor scalar = scalar_tensor(2.0);
  sink.onMessage(lab::MessageKind::Info, "A 0-dim CPU tensor is allowed with any device: (x * scalar) gives " +
                                             (cpuTensor * scalar).toString().substr(0, 40) + "...");
  lab::RunSummary s;
  s.device = gpu.str();
  sink.onDone(s);
}

}  // namespace gpulab::labs
