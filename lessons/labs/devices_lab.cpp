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
#include "engine/runtime/emulated_gpu.h"
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

// Stop must take effect within about 100 ms of work, so the work is cut into slices of about this
// long and the stop token is checked between them.
constexpr double kSliceSeconds = 0.05;


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

  // 1. Warm-up: the first product pays for set-up (threads, handles, kernel choice), so a few rows
  //    first; then a whole product when it is estimated to fit in a slice.
  constexpr std::int64_t kPanel = 1024;  // columns per tile
  const std::int64_t probeRows = std::min<std::int64_t>(n, 4);
  const Tensor probePanel = a.slice(1, 0, std::min(n, kPanel)).contiguous();
  double probe = 0;
  for (int i = 0; i < 2; ++i) {
    if (stop.stopRequested()) return std::nullopt;
    probe = secondsOn(device, [&] { out = matmul(a.slice(0, 0, probeRows), probePanel); });
  }
  const double estimate = probe / static_cast<double>(probeRows * probePanel.size(1)) * static_cast<double>(n * n);
  double one = 0;  // seconds of one whole product, when it was estimated to fit in a slice
  if (estimate <= kSliceSeconds) {
    if (stop.stopRequested()) return std::nullopt;
    one = secondsOn(device, [&] { out = matmul(a, a); });
  }
  // A product that overran its estimate is tiled too, so no slice is much longer than planned.
  const bool wholeProducts = estimate <= kSliceSeconds && one <= 1.5 * kSliceSeconds;

  if (wholeProducts) {
    std::int64_t perSlice = nextSliceCount(1, one, repeats);
    double seconds = 0;
    for (std::int64_t left = repeats; left > 0;) {  // 2. Products, several per slice.
      if (stop.stopRequested()) return std::nullopt;
      const std::int64_t count = std::min(left, perSlice);
      const double t = secondsOn(device, [&] {
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
    const double t = secondsOn(device, [&] { out = matmul(a.slice(0, 0, rows), panels.front()); });
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
        const double t = secondsOn(device, [&] { out = matmul(a.slice(0, r, r + count), panel); });
        seconds += t;
        r += count;
        if (count == rows) rows = nextSliceCount(rows, t, n);  // a short last tile says little
      }
    }
  }
  return seconds / static_cast<double>(repeats);
}

}  // namespace

std::vector<lab::MeasurementSpec> DevicesLab::measurements() const {
  return {
      {"matmul on *", "GFLOP/s"},
      {"speed-up of * over cpu", "x"},
  };
}

void DevicesLab::run(const lab::Params& p, lab::MetricSink& sink, const lab::StopToken& stop) {
  // 1. What this machine has, as torch.cuda reports it.
  const cuda::Availability a = cuda::availability();
  const Device device = defaultDevice();
  announceDevice(sink, device);
  sink.info("torch.cuda.is_available() -> " + std::string(a.usable ? "True" : "False"));
  if (!a.usable) sink.info("No usable GPU: " + a.reason + ". Everything runs on the CPU.");
  sink.info("CUDA_VISIBLE_DEVICES=" + a.cuda_visible_devices);
  sink.view({.id = "devices", .title = "Devices", .kind = lab::ViewKind::Table,
             .columns = {{"device", ""}, {"name", ""}, {"compute capability", ""}, {"SMs", ""}, {"total memory", "bytes"}, {"free memory", "bytes"}}});
  for (const auto& d : a.devices) {
    sink.row("devices", {"cuda:" + std::to_string(d.index), d.name, std::to_string(d.major) + "." + std::to_string(d.minor),
                         std::int64_t{d.multiprocessor_count}, static_cast<std::int64_t>(d.total_memory), static_cast<std::int64_t>(d.free_memory)});
  }
  if (const std::optional<Device> emulated = cuda::emulatedDevice()) {
    const auto [free, total] = mem_get_info(*emulated);
    sink.row("devices", {emulated->str(), cuda::deviceLabel(*emulated), std::string("-"), std::string("-"), total, free});
    sink.info(emulated->str() + " is GPU Lab's emulated GPU: its tensors live in their own memory with a GPU's budget, "
              "computed by the CPU. It makes the same-device rule and out-of-memory errors real without a GPU; it is never timed.");
  }
  sink.info("device = " + device.str());

  // 2. The same n x n product on the CPU and, when there is one, on the GPU. Each timing checks the
  //    stop token between slices of about 50 ms (see timeMatmul).
  sink.view({.id = "matmul", .title = "Matrix product speed", .kind = lab::ViewKind::Bars, .y = {"speed", "GFLOP/s"},
             .yFromZero = true, .series = {{"gflops", "GFLOP/s"}},
             .note = device.isCuda() ? std::string() : "Only the CPU is timed: there is no real GPU here, and an emulated one would only time the CPU again."});
  Generator gen(static_cast<std::uint64_t>(p.getInt("seed")));
  const std::int64_t n = p.getInt("size"), repeats = p.getInt("repeats");
  const double flops = 2.0 * static_cast<double>(n) * static_cast<double>(n) * static_cast<double>(n);
  sink.progress(0, device.isCuda() ? 2 : 1, "timing matmul on cpu");
  const std::optional<double> cpuSeconds = timeMatmul(kCPU, n, repeats, gen, stop);
  if (cpuSeconds) {
    // Each bar names its size: a reference run's bars, drawn beside these, may come from another n.
    sink.bar("matmul", "gflops", "cpu, n = " + std::to_string(n), flops / *cpuSeconds / 1e9);
    sink.measurement("matmul on cpu", flops / *cpuSeconds / 1e9, "GFLOP/s");
  }
  if (device.isCuda() && cpuSeconds) {
    sink.progress(1, 2, "timing matmul on " + device.str());
    if (const std::optional<double> gpuSeconds = timeMatmul(device, n, repeats, gen, stop)) {
      sink.bar("matmul", "gflops", device.str() + ", n = " + std::to_string(n), flops / *gpuSeconds / 1e9);
      sink.measurement("matmul on " + device.str(), flops / *gpuSeconds / 1e9, "GFLOP/s");
      sink.measurement("speed-up of " + device.str() + " over cpu", *cpuSeconds / *gpuSeconds, "x");
    }
  }
  sink.progress(1, 1);
  sink.record("done", {{"device", device.str()}, {"stopped", stop.stopRequested()}});
}

std::vector<lab::ParamSpec> DeviceRuleLab::params() const {
  using namespace lab;
  lab::ParamSpec gpu = deviceParam("device", "The GPU to pair with the CPU");
  gpu.suggestionLabels.front() = "auto (the GPU; without one, the emulated GPU)";  // "auto" here: see ruleDevice
  for (std::size_t i = gpu.suggestions.size(); i-- > 0;) {  // the CPU is the other side of the rule, not a choice
    if (gpu.suggestions[i] != "cpu") continue;
    gpu.suggestions.erase(gpu.suggestions.begin() + static_cast<std::ptrdiff_t>(i));
    gpu.suggestionLabels.erase(gpu.suggestionLabels.begin() + static_cast<std::ptrdiff_t>(i));
  }
  return {
      gpu,
      choiceParam("case", "tensors", {"tensors", "model"}, "What meets the CPU tensor: another tensor on the GPU, or a model on the GPU"),
      boolParam("fixed", false, "Apply the fix: move the CPU tensor to the GPU first (.to(device))"),
  };
}

namespace {

// The GPU the rule is shown with: "auto" is the first real GPU, else the emulated one.
Device ruleDevice(const std::string& text) {
  if (text != "auto") {
    const Device d = resolveDevice(text);
    if (!d.isCuda()) throw ValueError("the same-device rule needs a GPU to pair with the CPU; '" + text + "' is not one (try cuda)");
    return d;
  }
  if (cuda::isAvailable()) return Device(DeviceType::CUDA, 0);
  if (const std::optional<Device> emulated = cuda::emulatedDevice()) return *emulated;
  throw ValueError("no usable GPU (" + cuda::availability().reason + ") and the emulated GPU is off (GPULAB_EMULATED_GPU=0): "
                   "there is no second device to break the rule with");
}

}  // namespace

std::vector<lab::MeasurementSpec> DeviceRuleLab::measurements() const {
  return {
      {"device-mismatch errors", ""},
      {"operations completed", ""},
      {"model forward passes completed", ""},
  };
}

void DeviceRuleLab::run(const lab::Params& p, lab::MetricSink& sink, const lab::StopToken&) {
  const Device gpu = ruleDevice(p.getString("device"));
  announceDevice(sink, gpu);
  const bool fixed = p.getBool("fixed"), model = p.getString("case") == "model";
  sink.view({.id = "operations", .title = "Operations and where their tensors live", .kind = lab::ViewKind::Table,
             .columns = {{"operation", ""}, {"result", ""}, {"operands", ""}}});
  std::int64_t errors = 0, completed = 0, modelCalls = 0;
  // Runs one operation for real: a row saying what happened, and the engine's own error when it raises.
  auto attempt = [&](const std::string& code, const std::string& operands, auto&& op) {
    sink.info(">>> " + code);
    try {
      const Tensor out = op();
      ++completed;
      sink.row("operations", {code, "ok: result on " + out.device().str() + ", shape " + shapeStr(out.sizes()), operands});
    } catch (const DeviceMismatchError& e) {
      ++errors;
      sink.row("operations", {code, std::string("DeviceMismatchError"), operands});
      sink.engineError(e.what());
    }
  };

  Generator gen(0);
  Tensor cpuTensor = randn({3, 4}, gen);
  const std::string g = gpu.str();
  if (!model) {
    Tensor gpuTensor = randn({3, 4}, gen).to(gpu);
    if (!fixed) attempt("cpu_tensor + gpu_tensor", "cpu and " + g, [&] { return cpuTensor + gpuTensor; });
    else attempt("cpu_tensor.to(\"" + g + "\") + gpu_tensor", g + " and " + g, [&] { return cpuTensor.to(gpu) + gpuTensor; });
  } else {
    Generator init(1);
    nn::Sequential net{std::make_shared<nn::Linear>(4, 8, true, init), std::make_shared<nn::ReLU>(), std::make_shared<nn::Linear>(8, 1, true, init)};
    net.to(gpu);
    if (!fixed) attempt("model(cpu_tensor)  # model.to(\"" + g + "\")", "input on cpu, parameters on " + g, [&] { return net(cpuTensor); });
    else attempt("model(cpu_tensor.to(\"" + g + "\"))", "input and parameters on " + g, [&] { return net(cpuTensor.to(gpu)); });
    modelCalls = completed;  // the model's forward pass, when it ran
  }
  // The one exception, real on every device: a 0-dim CPU tensor (a Python number) may join any op.
  Tensor scalar = scalar_tensor(2.0);
  attempt("gpu_tensor * torch.tensor(2.0)", g + " and a 0-dim cpu tensor", [&] { return randn({3, 4}, gen).to(gpu) * scalar; });

  if (errors > 0) {
    sink.info("The fix: move the CPU tensor where the other operands are, e.g. " +
              std::string(model ? "model(x.to(\"" + g + "\"))" : "cpu_tensor.to(\"" + g + "\") + gpu_tensor") +
              ". Tick 'fixed' and run again.");
  }
  sink.measurement("device-mismatch errors", static_cast<double>(errors), "");
  sink.measurement("operations completed", static_cast<double>(completed), "");
  sink.measurement("model forward passes completed", static_cast<double>(modelCalls), "");
  sink.record("done", {{"device", g}, {"errors", errors}, {"completed", completed}});
}

}  // namespace gpulab::labs
