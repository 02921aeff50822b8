#pragma once
// Pieces the training labs share: the MLP the lessons use, the optimizer by name, the loss for the
// task, and one optimizer step over one or more micro-batches (gradient accumulation).
#include <chrono>
#include <functional>
#include <map>
#include <optional>
#include <memory>
#include <string>
#include <vector>

#include "engine/core/generator.h"
#include "engine/lab/lab.h"
#include "engine/memory/caching_allocator.h"
#include "engine/memory/memory_events.h"
#include "engine/data/dataloader.h"
#include "engine/runtime/cuda_graph.h"
#include "engine/runtime/cuda_runtime.h"
#include "engine/nn/layers.h"
#include "engine/optim/optimizer.h"

namespace gpulab::labs {

// "256,128,100" -> {256, 128, 100}; throws ValueError naming the parameter. At most 64 widths from 1
// to 65536, and no more parameters between them than this machine's memory can train.
std::vector<std::int64_t> parseWidths(const std::string& text);
// "auto" -> the default device; otherwise a device that must be usable (the emulated GPU included).
Device resolveDevice(const std::string& text);
// A device parameter: "auto" or a device string, offered as a choice of this machine's devices (auto,
// cpu, its GPUs, the emulated GPU). The syntax is checked where it is set; whether the machine has
// the device, when the run starts.
lab::ParamSpec deviceParam(std::string name, std::string description);
// A CUDA device only (streams and events belong to CUDA devices): "cuda" or "cuda:N", offered as a
// choice of this machine's GPUs and the emulated GPU; cpu and auto are refused where they are set,
// with why (the streams lab offered them, then refused them at Run).
lab::ParamSpec cudaDeviceParam(std::string name, std::string description);

// The validators of the labs' text parameters (lab::TextValidator): they run where a value is set --
// a lesson file at load, the command line, the player's form -- with the code the run uses.
// The hidden widths, as parseWidths reads them.
void checkHiddenWidths(const std::string& text);
// "auto", "cpu", "cuda", "cuda:N": the syntax only. Whether this machine has that GPU is the run's
// business (a lesson that says cuda must still load on a machine without one).
void checkDeviceString(const std::string& text);

// [Flatten,] Linear, ReLU, ..., Linear: from the data set's input shape to `outputs` values. With
// `checkpointSegments` > 0 the hidden blocks (Linear, ReLU) are cut into that many consecutive
// segments, each wrapped in nn::Checkpoint, as torch.utils.checkpoint.checkpoint_sequential does: a
// segment keeps only its input, and its activations are recomputed in backward instead of stored.
std::shared_ptr<nn::Sequential> makeMlp(const data::Dataset& data, const std::vector<std::int64_t>& hidden,
                                        std::int64_t outputs, Generator& gen, int checkpointSegments = 0);
// The lab's CNN for 1-channel images (Fashion-MNIST), torch.nn's classic two-block network:
//   Conv2d(C, 32, 3, padding=1), ReLU, MaxPool2d(2), Conv2d(32, 64, 3, padding=1), ReLU, MaxPool2d(2),
//   Flatten, then the classifier Linear, ReLU, ..., Linear with the `hidden` widths, to `outputs` values
//   (64 * 7 * 7 = 3136 features for 28 x 28 inputs). `checkpointSegments` applies to the classifier's
//   hidden blocks, as in makeMlp. Throws ValueError unless the data set's inputs are images (C, H, W)
//   of at least 4 x 4 (two 2 x 2 poolings).
std::shared_ptr<nn::Sequential> makeCnn(const data::Dataset& data, const std::vector<std::int64_t>& hidden,
                                        std::int64_t outputs, Generator& gen, int checkpointSegments = 0);
// The learning rate over a run: "constant", or "cosine" -- torch.optim.lr_scheduler.CosineAnnealingLR(
// optimizer, T_max=total_steps) with scheduler.step() after every optimizer step (eta_min 0): step t of T
// runs at lr * (1 + cos(pi * t / T)) / 2, from lr down to nearly 0 at the end. The last steps' small
// updates settle the weights into the minimum the large ones found: a point or so of test accuracy for
// the same epochs.
lab::ParamSpec lrScheduleParam();
class LrSchedule {
 public:
  LrSchedule(const std::string& kind, double lr, std::int64_t totalSteps);
  // After optimizer.step(): sets the rate of the next step.
  void step(optim::Optimizer& optimizer);

 private:
  bool cosine_;
  double lr_;
  std::int64_t total_, done_ = 0;
};
// The median of a sample (NaN for none): the labs' step times.
double median(std::vector<double> values);
// The labs' stopwatch: seconds on the steady clock since `start`.
double secondsSince(std::chrono::steady_clock::time_point start);
// "3.2x faster" or "2.5x slower": a speed ratio (above 1: faster) said the way round people read it.
std::string fasterOrSlower(double ratio);
// Refuses, before anything is allocated, a run on the CPU whose tensors would need more than half of
// the memory this machine has free (issue 27 6.7: the largest batches the parameters allowed took a
// 24 GiB machine to its OOM killer after a minute of swapping). `needs`: what needs it ("batch_size
// 65536: a training step of this CNN"); `advice`: what to change. A GPU's memory -- and the emulated
// GPU's budget -- is not checked: there the allocator's "CUDA out of memory" is the true outcome, and
// the lessons teach it.
void requireHostMemory(double bytes, const std::string& needs, const std::string& advice);
// What a training step holds per example, roughly, in float32: the forward's outputs and the input,
// with a margin (calibrated against the engine's measured peaks: see training.cpp).
double mlpStepBytesPerExample(std::int64_t inputs, const std::vector<std::int64_t>& hidden, std::int64_t outputs);
// The same for makeCnn's network on images of `input` (channels, height, width).
double cnnStepBytesPerExample(const Shape& input, const std::vector<std::int64_t>& hidden, std::int64_t outputs);
// A model's parameters with their gradients and Adam's two moments, float32: the MLP's, and the
// classifier's of makeCnn on `input` (its convolutions' are a few thousand numbers) and their capped
// work buffers.
double mlpStateBytes(std::int64_t inputs, const std::vector<std::int64_t>& hidden, std::int64_t outputs);
double cnnStateBytes(const Shape& input, const std::vector<std::int64_t>& hidden, std::int64_t outputs);
// The largest batch that `bytesPerExample` lets requireHostMemory pass (at least 1).
std::int64_t largestHostBatch(double bytesPerExample, double fixedBytes = 0);
// requireHostMemory for training makeCnn (`cnn`) or makeMlp with `hidden` on `data`, batches of
// batch_size `asked` (at most the data set): the model's state, then a step. `hiddenParam` names the
// parameter of the widths. Nothing is checked unless the model trains on the CPU (`onCpu`).
void requireTrainingMemory(bool onCpu, const data::Dataset& data, bool cnn, const std::vector<std::int64_t>& hidden, std::int64_t outputs,
                           std::int64_t asked, const std::string& hiddenParam);
// The data set's first n examples (all of them when n is 0 or at least its size): the labs' train_subset.
std::shared_ptr<data::TensorDataset> firstExamples(const std::shared_ptr<data::TensorDataset>& ds, std::int64_t n);
// capturable: Adam and AdamW keep their step counts on the device, for a step captured in a CUDA graph.
std::unique_ptr<optim::Optimizer> makeOptimizer(const std::string& name, const std::vector<Tensor>& params, double lr,
                                                double momentum, double weightDecay, bool capturable = false);
Tensor taskLoss(bool classification, const Tensor& output, const Tensor& target, Reduction reduction = Reduction::Mean);

// The whole training step -- forward and loss, backward, optimizer step -- captured once in a CUDA graph
// and replayed for every batch (PyTorch's whole-network capture with torch.cuda.graph): a few warm-up
// steps on a side stream first, on the first batch, so that the optimizer's state exists; then the
// capture, on static input tensors that each later batch is copied into before its replay. The
// optimizer must be capturable (Adam with capturable=true; SGD keeps nothing on the host after its
// first step), the learning rate fixed, and every batch of the first one's shape.
class GraphedStep {
 public:
  using LossFn = std::function<Tensor(const Tensor& inputs, const Tensor& targets)>;
  static constexpr int kWarmupSteps = 3;
  // Warms up and captures on `inputs`' device (a GPU, real or emulated): the warm-up steps train.
  GraphedStep(LossFn loss, optim::Optimizer& optimizer, const Tensor& inputs, const Tensor& targets);
  // Copies the batch into the static inputs and queues one replay; returns the step's loss, the
  // graph's static output: use it (read it, add it to a sum) before the next step() overwrites it.
  const Tensor& step(const Tensor& inputs, const Tensor& targets);
  // The kernels and copies one replay launches.
  std::size_t nodes() const { return graph_.num_nodes(); }

 private:
  cuda::CUDAGraph graph_;
  Tensor inputs_, targets_, loss_;
};

// torch.cuda.synchronize(device): waits for the device's queued work (nothing to wait for on the CPU
// or the emulated GPU), so that a clock read next measures the work itself.
void synchronizeDevice(Device device);

// Seconds `work` takes on `device`, the way every lab times device work: the device waited for before
// (work queued earlier is not counted) and after (the work's own queued kernels are).
template <class Work>
double secondsOn(Device device, Work&& work) {
  synchronizeDevice(device);
  const std::chrono::steady_clock::time_point start = std::chrono::steady_clock::now();
  work();
  synchronizeDevice(device);
  return secondsSince(start);
}

// Where the run computes, said once at its start: the RunDevice update (renderers label titles and
// exports with it, "emulated GPU — runs on your CPU" included) and a console line.
void announceDevice(lab::MetricSink& sink, Device device);

// torch.backends.cuda.matmul.allow_tf32 for the run, put back when it ends.
class Tf32Guard {
 public:
  explicit Tf32Guard(bool allow) : previous_(cuda::allowTf32()) { cuda::setAllowTf32(allow); }
  ~Tf32Guard() { cuda::setAllowTf32(previous_); }
  Tf32Guard(const Tf32Guard&) = delete;
  Tf32Guard& operator=(const Tf32Guard&) = delete;

 private:
  bool previous_;
};

// torch.backends.cudnn.benchmark and .deterministic for the run, put back when it ends (both off by
// default, as in PyTorch). They choose cuDNN's convolution algorithms: on the CPU and the emulated GPU
// they change nothing.
class CudnnGuard {
 public:
  CudnnGuard(bool benchmark, bool deterministic)
      : benchmark_(cuda::cudnnBenchmark()), deterministic_(cuda::cudnnDeterministic()) {
    cuda::setCudnnBenchmark(benchmark);
    cuda::setCudnnDeterministic(deterministic);
  }
  ~CudnnGuard() {
    cuda::setCudnnBenchmark(benchmark_);
    cuda::setCudnnDeterministic(deterministic_);
  }
  CudnnGuard(const CudnnGuard&) = delete;
  CudnnGuard& operator=(const CudnnGuard&) = delete;

 private:
  bool benchmark_, deterministic_;
};

}  // namespace gpulab::labs
