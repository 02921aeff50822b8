// gpulab-bench-amp: the step time of a GEMM-bound MLP in float32, TF32, bfloat16 and float16 (issue:
// mixed precision), on whatever device is given. tests/bench/amp_bench.py runs it next to the same
// workload in PyTorch (torch.autocast + GradScaler) and prints the ratios; nothing here judges the
// numbers.
//
//   gpulab-bench-amp [--device cpu|cuda[:N]] [--width W] [--depth D] [--batch B] [--steps N]
//                    [--warmup N] [--modes fp32,tf32,bf16,fp16] [--loss mse|ce] [--optim sgd|adam]
//
// The model: D x (Linear(W, W) + ReLU), no ReLU after the last layer; MSE against a random target
// (or cross-entropy against random labels over W classes); SGD lr 1e-4 (or Adam lr 1e-3). One
// training step per mode:
//   fp32  float32 throughout;
//   tf32  the same with TF32 tensor cores allowed (torch.backends.cuda.matmul.allow_tf32); a real CUDA
//         device only -- TF32 is a tensor-core format, the CPU has no such thing;
//   bf16  forward under autocast(bfloat16), backward outside it, optimizer step (no scaler: bfloat16
//         has float32's range);
//   fp16  forward under autocast(float16), scaler.scale(loss).backward(), scaler.step(opt),
//         scaler.update().
// Each mode gets a fresh model from the same seed, `warmup` untimed steps, then `steps` steps timed one
// by one with the device synchronised at both ends of each step (the median is the figure). Output:
// one JSON object per line per mode, then a table for people.
//
// Defaults: on the CPU width 1024, depth 3, batch 512, 20 steps after 3 warm-up steps; on a GPU
// width 4096, depth 3, batch 4096 (the GEMM MLP of bench_gpu.cpp), 50 steps after 5.
// FLOPs per step: 6 * batch * width^2 * depth (forward, grad input, grad weight: 2 each).
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <memory>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

#include "engine/ops/autocast.h"
#include "engine/amp/grad_scaler.h"
#include "engine/core/device.h"
#include "engine/core/dtype.h"
#include "engine/core/errors.h"
#include "engine/core/generator.h"
#include "engine/core/parallel.h"
#include "engine/nn/layers.h"
#include "engine/ops/ops.h"
#include "engine/optim/optimizer.h"
#include "engine/runtime/cuda_runtime.h"
#include "engine/runtime/emulated_gpu.h"

using namespace gpulab;
using Clock = std::chrono::steady_clock;

namespace {

struct Config {
  std::string device = "cpu";
  std::int64_t width = 0, depth = 0, batch = 0;  // 0: the device's default
  int steps = 0, warmup = -1;
  std::vector<std::string> modes;  // empty: every mode that applies to the device
  std::string loss = "mse", optim = "sgd";
};

std::string jsonEscape(const std::string& s) {
  std::string out;
  for (char c : s) {
    if (c == '"' || c == '\\') out += '\\';
    if (static_cast<unsigned char>(c) < 0x20) c = ' ';
    out += c;
  }
  return out;
}

std::string cpuModel() {
  std::ifstream in("/proc/cpuinfo");
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("model name", 0) == 0) {
      const auto colon = line.find(':');
      if (colon != std::string::npos) return line.substr(colon + 2);
    }
  }
  return "unknown CPU";
}

std::string deviceName(Device device) {
  if (device.isCpu()) {
    std::ostringstream s;
    s << "cpu (" << cpuModel() << ", threads: " << numThreads() << ")";
    return s.str();
  }
  return cuda::deviceLabel(device);
}

void sync(Device device) {
  if (device.isCuda() && !cuda::isEmulated(device)) cuda::synchronize(device.index());
}

std::shared_ptr<nn::Sequential> mlp(std::int64_t width, std::int64_t depth, Generator& gen) {
  auto model = std::make_shared<nn::Sequential>();
  for (std::int64_t i = 0; i < depth; ++i) {
    model->push_back(std::make_shared<nn::Linear>(width, width, true, gen));
    if (i + 1 < depth) model->push_back(std::make_shared<nn::ReLU>());
  }
  return model;
}

struct Result {
  std::string mode;
  bool ok = false;
  std::string error;
  double medianMs = 0, meanMs = 0, minMs = 0, tflops = 0, finalLoss = 0;
  std::int64_t skipped = 0;  // fp16: steps the GradScaler skipped (timed steps only)
  double scale = 0;          // fp16: the loss scale at the end
};

Result runMode(const Config& c, Device device, const std::string& mode) {
  Result r;
  r.mode = mode;
  std::optional<DType> autocastDtype;
  if (mode == "bf16") autocastDtype = kBFloat16;
  else if (mode == "fp16") autocastDtype = kFloat16;
  else if (mode != "fp32" && mode != "tf32") throw ValueError("unknown mode '" + mode + "' (fp32, tf32, bf16, fp16)");
  const bool scaler = mode == "fp16";

  cuda::setAllowTf32(mode == "tf32");
  struct ResetTf32 {
    ~ResetTf32() { cuda::setAllowTf32(false); }
  } resetTf32;

  Generator gen(0);
  auto model = mlp(c.width, c.depth, gen);
  model->to(device);
  Tensor x = randn({c.batch, c.width}, gen).to(device);
  Tensor y = c.loss == "ce" ? randint(0, c.width, {c.batch}, gen).to(device) : randn({c.batch, c.width}, gen).to(device);
  std::unique_ptr<optim::Optimizer> opt;
  if (c.optim == "adam") opt = std::make_unique<optim::Adam>(model->parameters(), optim::AdamOptions{.lr = 1e-3});
  else opt = std::make_unique<optim::SGD>(model->parameters(), optim::SGDOptions{.lr = 1e-4});
  amp::GradScaler gradScaler({.enabled = scaler});

  Tensor lastLoss;
  std::int64_t skipped = 0;
  auto step = [&] {
    Tensor loss;
    {
      std::optional<amp::AutocastGuard> autocast;
      if (autocastDtype) autocast.emplace(device.type(), *autocastDtype);
      Tensor out = (*model)(x);
      loss = c.loss == "ce" ? cross_entropy(out, y) : mse_loss(out, y);  // float32 under autocast
    }
    if (scaler) {
      gradScaler.scale(loss).backward();
      if (!gradScaler.step(*opt)) ++skipped;
      gradScaler.update();
    } else {
      loss.backward();
      opt->step();
    }
    opt->zero_grad();
    lastLoss = loss;
  };

  for (int i = 0; i < c.warmup; ++i) step();
  sync(device);
  skipped = 0;
  std::vector<double> ms;
  ms.reserve(static_cast<std::size_t>(c.steps));
  double total = 0;
  for (int i = 0; i < c.steps; ++i) {
    const auto t0 = Clock::now();
    step();
    sync(device);
    const double t = std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
    ms.push_back(t);
    total += t;
  }
  std::vector<double> sorted = ms;
  std::sort(sorted.begin(), sorted.end());
  const std::size_t n = sorted.size();
  r.medianMs = n % 2 ? sorted[n / 2] : 0.5 * (sorted[n / 2 - 1] + sorted[n / 2]);
  r.meanMs = total / static_cast<double>(n);
  r.minMs = sorted.front();
  const double flops = 6.0 * static_cast<double>(c.batch) * static_cast<double>(c.width) * static_cast<double>(c.width) *
                       static_cast<double>(c.depth);
  r.tflops = flops / (r.medianMs * 1e-3) / 1e12;
  r.finalLoss = lastLoss.defined() ? lastLoss.item() : NAN;
  r.skipped = skipped;
  r.scale = gradScaler.get_scale();
  r.ok = true;
  return r;
}

std::vector<std::string> splitCommas(const std::string& s) {
  std::vector<std::string> out;
  std::string item;
  std::istringstream in(s);
  while (std::getline(in, item, ','))
    if (!item.empty()) out.push_back(item);
  return out;
}

void usage() {
  std::fprintf(stderr,
               "usage: gpulab-bench-amp [--device cpu|cuda[:N]] [--width W] [--depth D] [--batch B] [--steps N] [--warmup N]\n"
               "                        [--modes fp32,tf32,bf16,fp16] [--loss mse|ce] [--optim sgd|adam]\n");
}

}  // namespace

int main(int argc, char** argv) {
  Config c;
  for (int i = 1; i < argc; ++i) {
    const std::string flag = argv[i];
    if (flag == "--help" || flag == "-h") {
      usage();
      return 0;
    }
    if (i + 1 >= argc) {
      std::fprintf(stderr, "gpulab-bench-amp: %s needs a value\n", flag.c_str());
      usage();
      return 2;
    }
    const std::string value = argv[++i];
    if (flag == "--device") c.device = value;
    else if (flag == "--width") c.width = std::atoll(value.c_str());
    else if (flag == "--depth") c.depth = std::atoll(value.c_str());
    else if (flag == "--batch") c.batch = std::atoll(value.c_str());
    else if (flag == "--steps") c.steps = std::atoi(value.c_str());
    else if (flag == "--warmup") c.warmup = std::atoi(value.c_str());
    else if (flag == "--modes") c.modes = splitCommas(value);
    else if (flag == "--loss") c.loss = value;
    else if (flag == "--optim") c.optim = value;
    else {
      std::fprintf(stderr, "gpulab-bench-amp: unknown option %s\n", flag.c_str());
      usage();
      return 2;
    }
  }
  if (c.loss != "mse" && c.loss != "ce") {
    std::fprintf(stderr, "gpulab-bench-amp: --loss must be mse or ce\n");
    return 2;
  }
  if (c.optim != "sgd" && c.optim != "adam") {
    std::fprintf(stderr, "gpulab-bench-amp: --optim must be sgd or adam\n");
    return 2;
  }

  Device device = Device::parse("cpu");
  std::string name;
  bool realGpu = false;
  try {
    device = Device::parse(c.device);
    cuda::checkDeviceUsable(device);
    realGpu = device.isCuda() && !cuda::isEmulated(device);
    name = deviceName(device);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "gpulab-bench-amp: %s\n", e.what());
    return 1;
  }
  const bool gpuSizes = device.isCuda();
  if (c.width <= 0) c.width = gpuSizes ? 4096 : 1024;
  if (c.depth <= 0) c.depth = 3;
  if (c.batch <= 0) c.batch = gpuSizes ? 4096 : 512;
  if (c.steps <= 0) c.steps = gpuSizes ? 50 : 20;
  if (c.warmup < 0) c.warmup = gpuSizes ? 5 : 3;

  std::vector<std::string> notes;
  if (device.isCuda() && !realGpu)
    notes.push_back(std::string("cuda device is the ") + cuda::kEmulatedGpuPhrase + ": no timing may be drawn from it");
  if (c.modes.empty()) {
    c.modes = {"fp32"};
    if (realGpu) c.modes.push_back("tf32");
    c.modes.push_back("bf16");
    c.modes.push_back("fp16");
    if (!realGpu)
      notes.push_back(device.isCpu() ? "tf32 left out: TF32 is a tensor-core format of NVIDIA GPUs; it does not exist on the CPU"
                                     : "tf32 left out: TF32 needs a real NVIDIA GPU, and " + device.str() + " is the emulated one");
  }

  std::printf("{\"config\":true,\"device\":\"%s\",\"device_name\":\"%s\",\"width\":%lld,\"depth\":%lld,\"batch\":%lld,\"steps\":%d,"
              "\"warmup\":%d,\"loss\":\"%s\",\"optim\":\"%s\",\"flops_per_step\":%.0f}\n",
              device.str().c_str(), jsonEscape(name).c_str(), static_cast<long long>(c.width), static_cast<long long>(c.depth),
              static_cast<long long>(c.batch), c.steps, c.warmup, c.loss.c_str(), c.optim.c_str(),
              6.0 * static_cast<double>(c.batch) * static_cast<double>(c.width) * static_cast<double>(c.width) *
                  static_cast<double>(c.depth));
  std::fflush(stdout);

  std::vector<Result> results;
  bool failed = false;
  for (const std::string& mode : c.modes) {
    Result r;
    r.mode = mode;
    if (mode == "tf32" && !realGpu) {
      r.error = device.isCpu() ? std::string("TF32 does not exist on the CPU: it is a tensor-core format of NVIDIA GPUs (Ampere and later)")
                               : device.str() + " is the emulated GPU (it runs on the CPU): TF32 needs a real NVIDIA GPU (Ampere and later)";
      std::printf("{\"mode\":\"tf32\",\"device\":\"%s\",\"device_name\":\"%s\",\"skipped\":\"%s\"}\n", device.str().c_str(),
                  jsonEscape(name).c_str(), jsonEscape(r.error).c_str());
      std::fflush(stdout);
      results.push_back(r);
      continue;
    }
    try {
      r = runMode(c, device, mode);
      std::printf("{\"mode\":\"%s\",\"device\":\"%s\",\"device_name\":\"%s\",\"step_ms\":%.4f,\"mean_ms\":%.4f,\"min_ms\":%.4f,"
                  "\"tflops\":%.4f,\"final_loss\":%.6g,\"scaler_skipped\":%lld,\"scale\":%.0f}\n",
                  mode.c_str(), device.str().c_str(), jsonEscape(name).c_str(), r.medianMs, r.meanMs, r.minMs, r.tflops,
                  r.finalLoss, static_cast<long long>(r.skipped), r.scale);
    } catch (const std::exception& e) {
      failed = true;
      r.ok = false;
      r.error = e.what();
      std::printf("{\"mode\":\"%s\",\"device\":\"%s\",\"device_name\":\"%s\",\"error\":\"%s\"}\n", mode.c_str(), device.str().c_str(),
                  jsonEscape(name).c_str(), jsonEscape(r.error).c_str());
    }
    std::fflush(stdout);
    results.push_back(r);
  }

  // The table for people.
  std::printf("\nGEMM-bound MLP %lld x Linear(%lld, %lld) + ReLU, batch %lld, %s loss, %s; %d steps after %d warm-up\n",
              static_cast<long long>(c.depth), static_cast<long long>(c.width), static_cast<long long>(c.width),
              static_cast<long long>(c.batch), c.loss == "ce" ? "cross-entropy" : "MSE", c.optim == "adam" ? "Adam" : "SGD",
              c.steps, c.warmup);
  std::printf("device: %s\n", name.c_str());
  for (const std::string& note : notes) std::printf("note: %s\n", note.c_str());
  double fp32Ms = 0;
  for (const Result& r : results)
    if (r.ok && r.mode == "fp32") fp32Ms = r.medianMs;
  std::printf("%-6s %12s %10s %14s  %s\n", "mode", "step ms", "TFLOP/s", "fp32 ms / ms", "(> 1: faster than fp32)");
  for (const Result& r : results) {
    if (!r.ok) {
      std::printf("%-6s %12s %10s %14s  %s\n", r.mode.c_str(), "-", "-", "-", r.error.c_str());
      continue;
    }
    char speedup[32] = "-";
    if (fp32Ms > 0) std::snprintf(speedup, sizeof speedup, "%.2fx", fp32Ms / r.medianMs);
    std::string extra;
    if (r.mode == "fp16") extra = "GradScaler: " + std::to_string(r.skipped) + " steps skipped, final scale " + std::to_string(static_cast<long long>(r.scale));
    std::printf("%-6s %12.3f %10.3f %14s  %s\n", r.mode.c_str(), r.medianMs, r.tflops, speedup, extra.c_str());
  }
  return failed ? 1 : 0;
}
