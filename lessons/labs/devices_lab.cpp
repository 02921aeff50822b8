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

#include <chrono>

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

// Seconds per product, measured after one warm-up product (the first call pays for set-up).
double timeMatmul(Device device, std::int64_t n, std::int64_t repeats, Generator& gen) {
  Tensor a = randn({n, n}, gen).to(device);
  (void)matmul(a, a).sum().item();
  const auto t0 = std::chrono::steady_clock::now();
  Tensor acc;
  for (std::int64_t i = 0; i < repeats; ++i) acc = matmul(a, a);
  (void)acc.sum().item();  // waits for the device to finish
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() / static_cast<double>(repeats);
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
  const double cpuSeconds = timeMatmul(kCPU, n, repeats, gen);
  sink.onMeasurement({"matmul on cpu", flops / cpuSeconds / 1e9, "GFLOP/s"});
  if (device.isCuda() && !stop.stopRequested()) {
    const double gpuSeconds = timeMatmul(device, n, repeats, gen);
    sink.onMeasurement({"matmul on " + device.str(), flops / gpuSeconds / 1e9, "GFLOP/s"});
    sink.onMeasurement({"speed-up of " + device.str() + " over cpu", cpuSeconds / gpuSeconds, "x"});
  }
  lab::RunSummary s;
  s.device = device.str();
  s.stopped = stop.stopRequested();
  sink.onDone(s);
}

std::vector<lab::ParamSpec> DeviceRuleLab::params() const {
  using namespace lab;
  return {textParam("device", "auto", "The GPU to pair with the CPU: auto, cuda or cuda:N")};
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
