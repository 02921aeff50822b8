// gpulab-bench-gpu: GPU Lab's side of the GPU benchmarks (tests/bench/gpu_bench.py runs it and the same
// workloads in PyTorch, on the same GPU, and prints the ratios). One JSON object per line, one line per
// workload; nothing here judges the numbers.
//
//   gpulab-bench-gpu [--workload NAME] [--device cuda:0] [--steps N] [--repeats N]
//
// Workloads (data already on the device; each is warmed up before it is timed, and timed between two
// synchronisations so queued GPU work is counted). The training loops are timed --repeats times (5 by
// default) and report the median with the fastest and slowest run: one run of a few hundred
// milliseconds varies by half between runs on a GPU machine (the Fashion epoch: 0.104, 0.169 and
// 0.140 s in three runs on an H100, 2026-11-26).
//   regression    the seed lessons' loop: 16 -> 64 -> 1 MLP, Adam lr 1e-3, batch 64 (steps/s)
//   fashion       one epoch of the 784 -> 256 -> 128 -> 100 -> 10 MLP, Adam, batch 128 over 60,000
//                 Fashion-MNIST-shaped examples (seconds per epoch)
//   regression-graph, fashion-graph
//                 the same with the whole step -- forward, backward, Adam(capturable=True) -- captured
//                 once in a CUDA graph (engine/runtime/cuda_graph.h) and replayed, each batch copied
//                 into the graph's static inputs first (PyTorch's whole-network capture recipe)
//   gemm-fp32     a GEMM-bound MLP: 3 x Linear(4096, 4096) + ReLU, batch 4096, SGD (ms/step, TFLOP/s)
//   gemm-tf32     the same with TF32 tensor cores allowed (torch.backends.cuda.matmul.allow_tf32)
//   copy          host -> device 256 MiB from pageable and from pinned memory (GB/s), and the
//                 bandwidth cudaMemcpy reaches for the same pinned buffer
//   elementwise   a + b over 256 MiB tensors (GB/s moved) and a device-to-device cudaMemcpy (GB/s)
//   memory        memory_allocated/memory_reserved after one Adam step of the Fashion-MNIST MLP at
//                 batch 128, and this process's GPU memory as NVML and nvidia-smi report it
#include <cuda_runtime.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "engine/core/errors.h"
#include "engine/runtime/device_memory.h"
#include "engine/nn/layers.h"
#include "engine/ops/ops.h"
#include "engine/optim/optimizer.h"
#include "engine/runtime/cuda_graph.h"
#include "engine/runtime/cuda_runtime.h"
#include "engine/runtime/execution_context.h"
#include "engine/runtime/stream.h"

using namespace gpulab;
using Clock = std::chrono::steady_clock;

namespace {

// Seconds for `iterations` calls of `body`, after `warmup` untimed ones, with the device idle at both ends.
double timeIt(Device device, int warmup, int iterations, const std::function<void()>& body) {
  for (int i = 0; i < warmup; ++i) body();
  cuda::synchronize(device.index());
  const auto start = Clock::now();
  for (int i = 0; i < iterations; ++i) body();
  cuda::synchronize(device.index());
  return std::chrono::duration<double>(Clock::now() - start).count();
}

std::shared_ptr<nn::Sequential> mlp(const std::vector<std::int64_t>& widths, Generator& gen) {
  auto model = std::make_shared<nn::Sequential>();
  for (std::size_t i = 0; i + 1 < widths.size(); ++i) {
    model->push_back(std::make_shared<nn::Linear>(widths[i], widths[i + 1], true, gen));
    if (i + 2 < widths.size()) model->push_back(std::make_shared<nn::ReLU>());
  }
  return model;
}

// One training step captured in a CUDA graph and replayed, as PyTorch's whole-network recipe does
// (torch.cuda.graphs, "whole network capture"): warm-up steps on a side stream, then the capture, on
// static input tensors that each later batch is copied into before its replay. The optimizer must be
// capturable (Adam with capturable=true), the learning rate fixed, every batch of the first's shape.
// The graph lesson's lab does the same in Python (lessons/16-cuda-graphs/graph_lab.py).
class GraphedStep {
 public:
  using LossFn = std::function<Tensor(const Tensor& inputs, const Tensor& targets)>;
  static constexpr int kWarmupSteps = 3;

  GraphedStep(const LossFn& loss, optim::Optimizer& optimizer, const Tensor& inputs, const Tensor& targets) {
    const Device device = inputs.device();
    CudaDeviceGuard onDevice(device.index());  // the graph captures the current CUDA device
    inputs_ = inputs.clone();
    targets_ = targets.clone();
    auto fullStep = [&] {
      Tensor l = loss(inputs_, targets_);
      l.backward();
      optimizer.step();
      return l;
    };
    // Warm-up on a side stream: the optimizer makes its state here, not in the capture (where it would
    // be made -- zeroed -- again at every replay).
    const cuda::Stream side = cuda::Stream::create(device);
    side.wait_stream(cuda::current_stream(device));
    {
      cuda::StreamGuard on(side);
      for (int i = 0; i < kWarmupSteps; ++i) {
        optimizer.zero_grad();
        fullStep();
      }
    }
    cuda::current_stream(device).wait_stream(side);
    // The gradients freed first, so the captured backward makes them afresh in the graph's pool: each
    // replay then writes this step's gradients instead of adding to the last.
    optimizer.zero_grad(/*set_to_none=*/true);
    cuda::graph(graph_, [&] { loss_ = fullStep(); });
  }
  // Copies the batch into the static inputs and queues one replay; the step's loss is the graph's output.
  const Tensor& step(const Tensor& inputs, const Tensor& targets) {
    inputs_.copy_(inputs);
    targets_.copy_(targets);
    graph_.replay();
    return loss_;
  }
  std::size_t nodes() const { return graph_.num_nodes(); }

 private:
  cuda::CUDAGraph graph_;
  Tensor inputs_, targets_, loss_;
};

// A timed loop's runs: the median and the fastest and slowest, in seconds.
struct Runs {
  double median = 0, fastest = 0, slowest = 0;
  std::size_t graphNodes = 0;  // the kernels and copies one replay launches (graphed loops)
};
Runs summarise(std::vector<double> seconds) {
  std::sort(seconds.begin(), seconds.end());
  const std::size_t n = seconds.size();
  const double median = n % 2 ? seconds[n / 2] : (seconds[n / 2 - 1] + seconds[n / 2]) / 2;
  return {median, seconds.front(), seconds.back()};
}

// Trains `model` over (x, y) already on `device`, in order, `batch` rows at a time: `repeats` timed runs
// of `steps` steps. Eagerly, or (graphed) with one step captured in a CUDA graph and replayed, each
// batch copied into the graph's static inputs; the optimizer must then be capturable.
Runs trainResident(Device device, nn::Module& model, optim::Optimizer& opt, const Tensor& x, const Tensor& y, std::int64_t batch,
                   int warmup, int steps, int repeats, bool classification, bool graphed) {
  const std::int64_t batches = x.size(0) / batch;
  std::int64_t i = 0;
  auto lossOf = [&](const Tensor& bx, const Tensor& by) {
    Tensor out = model(bx);
    return classification ? cross_entropy(out, by) : mse_loss(out, by);
  };
  auto eagerStep = [&] {
    const std::int64_t b = i++ % batches;
    Tensor loss = lossOf(x.slice(0, b * batch, (b + 1) * batch), y.slice(0, b * batch, (b + 1) * batch));
    opt.zero_grad();
    loss.backward();
    opt.step();
  };
  std::optional<GraphedStep> graph;  // warm-up and capture on the first batch
  if (graphed) graph.emplace(lossOf, opt, x.slice(0, 0, batch), y.slice(0, 0, batch));
  auto replayStep = [&] {
    const std::int64_t b = i++ % batches;
    graph->step(x.slice(0, b * batch, (b + 1) * batch), y.slice(0, b * batch, (b + 1) * batch));
  };
  std::vector<double> seconds;
  for (int r = 0; r < repeats; ++r) {
    seconds.push_back(graphed ? timeIt(device, r == 0 ? warmup : 0, steps, replayStep)
                              : timeIt(device, r == 0 ? warmup : 0, steps, eagerStep));
  }
  Runs runs = summarise(seconds);
  runs.graphNodes = graph ? graph->nodes() : 0;
  return runs;
}

void printRuns(const char* workload, int steps, const Runs& r, bool graphed) {
  std::printf("{\"workload\":\"%s%s\",\"steps\":%d,\"seconds\":%.6f,\"seconds_fastest\":%.6f,\"seconds_slowest\":%.6f,"
              "\"steps_per_s\":%.1f,\"graph_nodes\":%zu}\n",
              workload, graphed ? "-graph" : "", steps, r.median, r.fastest, r.slowest, steps / r.median, r.graphNodes);
}

void regression(Device device, int steps, int repeats, bool graphed) {
  Generator gen(0);
  Tensor x = randn({1024, 16}, gen).to(device), y = randn({1024, 1}, gen).to(device);
  auto model = mlp({16, 64, 1}, gen);
  model->to(device);
  optim::Adam opt(model->parameters(), {.lr = 1e-3, .capturable = graphed});
  const Runs r = trainResident(device, *model, opt, x, y, 64, 200, steps, repeats, false, graphed);
  printRuns("regression", steps, r, graphed);
}

void fashion(Device device, int repeats, bool graphed) {
  Generator gen(0);
  Tensor x = randn({60000, 784}, gen).to(device);
  Tensor y = randint(0, 10, {60000}, gen).to(device);
  auto model = mlp({784, 256, 128, 100, 10}, gen);
  model->to(device);
  optim::Adam opt(model->parameters(), {.lr = 1e-3, .capturable = graphed});
  const int steps = 60000 / 128;  // 468 full batches
  const Runs r = trainResident(device, *model, opt, x, y, 128, 50, steps, repeats, true, graphed);
  printRuns("fashion", steps, r, graphed);
}

void gemmMlp(Device device, bool tf32, int steps) {
  cuda::setAllowTf32(tf32);
  Generator gen(0);
  constexpr std::int64_t n = 4096;
  Tensor x = randn({n, n}, gen).to(device), y = randn({n, n}, gen).to(device);
  auto model = mlp({n, n, n, n}, gen);
  model->to(device);
  optim::SGD opt(model->parameters(), {.lr = 1e-4});
  const double s = trainResident(device, *model, opt, x, y, n, 3, steps, 1, false, false).median;
  // 3 layers x (forward, grad input, grad weight) x 2 n^3 flops.
  const double flops = 3.0 * 3.0 * 2.0 * n * n * n * steps;
  std::printf("{\"workload\":\"gemm-%s\",\"steps\":%d,\"seconds\":%.6f,\"ms_per_step\":%.3f,\"tflops\":%.1f}\n", tf32 ? "tf32" : "fp32",
              steps, s, 1e3 * s / steps, flops / s / 1e12);
  cuda::setAllowTf32(false);
}

void copies(Device device) {
  constexpr std::int64_t elems = 64LL << 20;  // 256 MiB of float32
  const double gb = elems * 4.0 / 1e9;
  Tensor pageable = ones({elems});
  Tensor pinned = pageable.pin_memory();
  const int reps = 10;
  Tensor sink;
  const double tPageable = timeIt(device, 2, reps, [&] { sink = pageable.to(device); });
  const double tPinned = timeIt(device, 2, reps, [&] { sink = pinned.to(device, /*non_blocking=*/true); });
  // The ceiling: the runtime's own copy of the same pinned buffer into a preallocated device buffer.
  Tensor dst = Tensor::empty(pageable.sizes(), pageable.dtype(), device);
  const double tRaw = timeIt(device, 2, reps, [&] {
    cudaMemcpy(dst.data<float>(), pinned.data<float>(), static_cast<std::size_t>(elems) * 4, cudaMemcpyHostToDevice);
  });
  std::printf("{\"workload\":\"copy\",\"bytes\":%lld,\"pageable_gbps\":%.2f,\"pinned_gbps\":%.2f,\"cudamemcpy_pinned_gbps\":%.2f}\n",
              static_cast<long long>(elems * 4), reps * gb / tPageable, reps * gb / tPinned, reps * gb / tRaw);
}

void elementwise(Device device) {
  constexpr std::int64_t elems = 64LL << 20;
  Generator gen(0);
  Tensor a = randn({elems}, gen).to(device), b = randn({elems}, gen).to(device);
  Tensor c;
  const int reps = 50;
  const double tAdd = timeIt(device, 5, reps, [&] { c = a + b; });
  Tensor dst = zeros({elems}, {.device = device});
  // The copies go on the legacy default stream, which timeIt's synchronize() does not wait for.
  const auto copy = [&] {
    cudaMemcpyAsync(dst.data<float>(), a.data<float>(), static_cast<std::size_t>(elems) * 4, cudaMemcpyDeviceToDevice, nullptr);
  };
  const double tCopy = timeIt(device, 0, reps, [&] {
    copy();
    cudaStreamSynchronize(nullptr);
  });
  // a + b reads two tensors and writes one; a copy reads one and writes one.
  std::printf("{\"workload\":\"elementwise\",\"bytes\":%lld,\"add_gbps\":%.1f,\"d2d_copy_gbps\":%.1f}\n", static_cast<long long>(elems * 4),
              reps * 3.0 * elems * 4 / tAdd / 1e9, reps * 2.0 * elems * 4 / tCopy / 1e9);
}

// Memory after one Adam step of the Fashion-MNIST MLP at batch 128 (the same in gpu_bench.py's
// PyTorch side), and this process as NVML (through GPU Lab) and nvidia-smi see it.
void memory(Device device) {
  Generator gen(0);
  auto model = mlp({784, 256, 128, 100, 10}, gen);
  model->to(device);
  optim::Adam opt(model->parameters(), {.lr = 1e-3});
  Tensor x = randn({128, 784}, gen).to(device), y = randint(0, 10, {128}, gen).to(device);
  Tensor loss = cross_entropy((*model)(x), y);
  opt.zero_grad();
  loss.backward();
  opt.step();
  cuda::synchronize(device.index());
  const DriverMemoryInfo driver = driver_memory_info(device);
  long long smiMiB = -1;
  const std::string pid = std::to_string(getpid());
  if (FILE* p = popen("nvidia-smi --query-compute-apps=pid,used_memory --format=csv,noheader,nounits 2>/dev/null", "r")) {
    char line[256];
    while (std::fgets(line, sizeof line, p)) {
      if (std::strncmp(line, pid.c_str(), pid.size()) == 0 && line[pid.size()] == ',') smiMiB = std::atoll(line + pid.size() + 1);
    }
    pclose(p);
  }
  std::printf("{\"workload\":\"memory\",\"allocated\":%lld,\"reserved\":%lld,\"nvml_process\":%lld,\"nvidia_smi_process_mib\":%lld,"
              "\"nvml_reason\":\"%s\"}\n",
              static_cast<long long>(memory_allocated(device)), static_cast<long long>(memory_reserved(device)),
              static_cast<long long>(driver.process_used.value_or(-1)), smiMiB,
              driver.process_used ? "" : (driver.available ? driver.process_reason : driver.reason).c_str());
}

}  // namespace

int main(int argc, char** argv) {
  std::string only, deviceText = "cuda:0";
  int steps = 3000, repeats = 5;
  for (int i = 1; i + 1 < argc; i += 2) {
    if (!std::strcmp(argv[i], "--workload")) only = argv[i + 1];
    else if (!std::strcmp(argv[i], "--device")) deviceText = argv[i + 1];
    else if (!std::strcmp(argv[i], "--steps")) steps = std::atoi(argv[i + 1]);
    else if (!std::strcmp(argv[i], "--repeats")) repeats = std::max(1, std::atoi(argv[i + 1]));
  }
  try {
    const Device device = Device::parse(deviceText);
    cuda::checkDeviceUsable(device);
    if (!device.isCuda()) throw ValueError("gpulab-bench-gpu measures a GPU: --device must be cuda or cuda:N");
    const auto want = [&](const char* name) { return only.empty() || only == name; };
    if (want("regression")) regression(device, steps, repeats, false);
    if (want("regression-graph")) regression(device, steps, repeats, true);
    if (want("fashion")) fashion(device, repeats, false);
    if (want("fashion-graph")) fashion(device, repeats, true);
    if (want("gemm-fp32")) gemmMlp(device, false, 20);
    if (want("gemm-tf32")) gemmMlp(device, true, 20);
    if (want("copy")) copies(device);
    if (want("elementwise")) elementwise(device);
    if (want("memory")) memory(device);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "gpulab-bench-gpu: %s\n", e.what());
    return 1;
  }
  return 0;
}
