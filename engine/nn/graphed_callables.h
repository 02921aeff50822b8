#pragma once
// torch.cuda.make_graphed_callables, in C++: a module's (or function's) forward and backward each
// captured once into a CUDA graph, then replayed at every call -- PyTorch's recipe for graphing the
// part of a network that is launch-bound while the rest (the loss, the optimizer, data-dependent
// control flow) stays eager. The Python face has its own (python/gpulab/cuda/graphs.py); this one is
// for C++ programs and labs, built the same way:
//
//   auto graphed = nn::make_graphed_callables(*model, {sampleX});  // graphed = make_graphed_callables(model, (sample_x,))
//   for (batch : loader) {
//     Tensor loss = mse_loss(graphed(batch.inputs), batch.targets); // loss = loss_fn(graphed(x), y)
//     opt.zero_grad(); loss.backward(); opt.step();                // eager: the optimizer is not captured
//   }
//
// - A few warm-up iterations (forward and gradient) run on a side stream first, so that the first
//   calls' allocations and launches stay out of the capture.
// - The forward graphs are captured in the callables' order, the backward graphs (autograd::grad of
//   each static output with respect to its inputs and parameters) in reverse, all in one memory pool.
// - A call copies its inputs into the tensors the capture read (unless they are those tensors), replays
//   the forward graph, and returns the static output, detached and recorded as one autograd node whose
//   backward copies the incoming gradient in and replays the backward graph. Like PyTorch's, the output
//   is the same tensor at every call: the next call overwrites it.
// - A module is graphed in the training mode it had when captured; in the other mode a call runs the
//   module's own forward (PyTorch swaps the module's forward; in C++ the graphed callable stands beside
//   the module instead).
// - PyTorch's rules and errors: every sample argument on a CUDA device (the emulated GPU counts, where
//   capture and replay work the same way and no timing is drawn from them), no buffer that requires
//   grad, the shapes, dtypes and devices of the sample arguments fixed from then on.
#include <functional>
#include <memory>
#include <optional>
#include <vector>

#include "engine/core/tensor.h"
#include "engine/nn/module.h"
#include "engine/runtime/cuda_graph.h"

namespace gpulab::nn {

// One callable to graph: a module (its forward on one input, its parameters; the module must outlive
// the graphed callable) or a function of tensors (whatever tensors it closes over are constants of
// the graph, as in PyTorch).
class GraphableCallable {
 public:
  GraphableCallable(Module& module);  // NOLINT(google-explicit-constructor): a module is a callable
  GraphableCallable(std::function<Tensor(const std::vector<Tensor>&)> fn);  // NOLINT(google-explicit-constructor)

  Tensor operator()(const std::vector<Tensor>& args) const;
  Module* module() const { return module_; }  // nullptr for a function

 private:
  std::function<Tensor(const std::vector<Tensor>&)> fn_;
  Module* module_ = nullptr;
};

class GraphedCallable;

// Several callables that run in this order in each step (one tuple of sample arguments each), graphed
// into one memory pool (`pool`, or a new one). allowUnusedInput: an input or parameter the output
// does not depend on gets no gradient, instead of the error autograd::grad raises.
std::vector<GraphedCallable> make_graphed_callables(const std::vector<GraphableCallable>& callables,
                                                    const std::vector<std::vector<Tensor>>& sampleArgs, int numWarmupIters = 3,
                                                    bool allowUnusedInput = false, std::optional<cuda::MempoolId> pool = std::nullopt);

// One callable.
GraphedCallable make_graphed_callables(const GraphableCallable& callable, const std::vector<Tensor>& sampleArgs, int numWarmupIters = 3,
                                       bool allowUnusedInput = false, std::optional<cuda::MempoolId> pool = std::nullopt);

class GraphedCallable {
 public:
  // Replays the captured forward on `inputs` (as many as the sample arguments, of their shapes).
  Tensor operator()(const std::vector<Tensor>& inputs) const;
  Tensor operator()(const Tensor& input) const { return (*this)(std::vector<Tensor>{input}); }
  // The kernels, copies and memsets each graph holds (what one call's replays launch).
  std::size_t forward_nodes() const;
  std::size_t backward_nodes() const;

  struct State;

 private:
  friend std::vector<GraphedCallable> make_graphed_callables(const std::vector<GraphableCallable>&,
                                                             const std::vector<std::vector<Tensor>>&, int, bool,
                                                             std::optional<cuda::MempoolId>);
  explicit GraphedCallable(std::shared_ptr<State> state) : state_(std::move(state)) {}
  std::shared_ptr<State> state_;
};

}  // namespace gpulab::nn
