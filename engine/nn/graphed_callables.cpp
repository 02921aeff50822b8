// torch.cuda.make_graphed_callables in C++ (graphed_callables.h), as python/gpulab/cuda/graphs.py
// builds it for the Python face.
#include "engine/nn/graphed_callables.h"

#include <string>

#include "engine/autograd/grad.h"
#include "engine/autograd/grad_mode.h"
#include "engine/autograd/node.h"
#include "engine/core/errors.h"
#include "engine/runtime/cuda_runtime.h"
#include "engine/runtime/execution_context.h"
#include "engine/runtime/stream.h"

namespace gpulab::nn {

GraphableCallable::GraphableCallable(Module& module)
    : fn_([&module](const std::vector<Tensor>& args) {
        if (args.size() != 1) {
          throw ValueError("a module's forward takes one tensor, and " + std::to_string(args.size()) + " sample arguments were given");
        }
        return module(args[0]);
      }),
      module_(&module) {}

GraphableCallable::GraphableCallable(std::function<Tensor(const std::vector<Tensor>&)> fn) : fn_(std::move(fn)) {
  if (!fn_) throw ValueError("make_graphed_callables takes modules or functions, not an empty function");
}

Tensor GraphableCallable::operator()(const std::vector<Tensor>& args) const {
  Tensor out = fn_(args);
  if (!out.defined()) throw ValueError("the callable must return a Tensor, and it returned an undefined one");
  return out;
}

struct GraphedCallable::State {
  GraphableCallable callable;
  std::size_t userCount = 0;
  std::vector<Tensor> surface;  // the static inputs, then the module's parameters
  bool capturedTraining = true;
  std::unique_ptr<cuda::CUDAGraph> forward, backward;
  Tensor staticOutput, staticGradOutput;  // staticGradOutput undefined when the output needs no grad
  std::vector<Tensor> staticGradInputs;   // one per surface tensor; undefined where it gets none
};

namespace {

// The gradients of `out` with respect to the surface tensors that require grad (empty when none does,
// or the output does not require grad).
std::vector<Tensor> differentiate(const Tensor& out, const std::vector<Tensor>& surface, const Tensor& gradOut, bool allowUnused) {
  std::vector<Tensor> needed;
  for (const Tensor& t : surface) {
    if (t.requires_grad()) needed.push_back(t);
  }
  if (!out.requires_grad() || needed.empty()) return {};
  return autograd::grad({out}, {gradOut}, needed, allowUnused);
}

void check(const std::vector<GraphableCallable>& callables, const std::vector<std::vector<Tensor>>& sampleArgs,
           const std::vector<std::vector<Tensor>>& params) {
  if (callables.empty()) throw ValueError("make_graphed_callables needs at least one callable");
  if (sampleArgs.size() != callables.size()) {
    throw ValueError("make_graphed_callables needs one tuple of sample arguments per callable: " + std::to_string(callables.size()) +
                     " callables, " + std::to_string(sampleArgs.size()) + " tuples");
  }
  for (std::size_t k = 0; k < callables.size(); ++k) {
    if (sampleArgs[k].empty()) throw ValueError("make_graphed_callables needs at least one sample argument for each callable");
    for (const Tensor& a : sampleArgs[k]) {
      if (!a.defined()) throw ValueError("In the beta API, sample_args for each callable must contain only Tensors. Other types are not allowed.");
      if (a.device().type() != DeviceType::CUDA) {
        throw Error("make_graphed_callables captures CUDA work: every sample argument must be on a CUDA device (move them with "
                    ".to(cuda)), and one is on " + a.device().str());
      }
      if (a.device() != sampleArgs[0][0].device()) {
        throw DeviceMismatchError("make_graphed_callables captures on one device: sample arguments on " + sampleArgs[0][0].device().str() +
                                  " and " + a.device().str());
      }
    }
    for (const Tensor& p : params[k]) {
      if (p.device() != sampleArgs[0][0].device()) {
        throw DeviceMismatchError("Expected all tensors to be on the same device, but found at least two devices, " +
                                  sampleArgs[0][0].device().str() + " and " + p.device().str() + "! (a module's parameter: move the module first)");
      }
    }
    if (const Module* m = callables[k].module()) {
      for (const Tensor& b : m->buffers()) {
        if (b.requires_grad()) {
          throw Error("In any :class:`~torch.nn.Module` passed to :func:`~make_graphed_callables`, only parameters may be trainable. "
                      "All buffers must have ``requires_grad=False``.");
        }
      }
    }
  }
}

}  // namespace

std::vector<GraphedCallable> make_graphed_callables(const std::vector<GraphableCallable>& callables,
                                                    const std::vector<std::vector<Tensor>>& sampleArgs, int numWarmupIters,
                                                    bool allowUnusedInput, std::optional<cuda::MempoolId> pool) {
  if (numWarmupIters < 0) throw ValueError("num_warmup_iters must be at least 0, got " + std::to_string(numWarmupIters));
  std::vector<std::vector<Tensor>> params;
  for (const GraphableCallable& c : callables) params.push_back(c.module() ? c.module()->parameters() : std::vector<Tensor>{});
  check(callables, sampleArgs, params);
  const Device device = sampleArgs[0][0].device();
  const CudaDeviceGuard onDevice(device.index());  // graphs capture the current CUDA device
  const cuda::MempoolId mempool = pool ? *pool : cuda::graph_pool_handle();

  std::vector<std::shared_ptr<GraphedCallable::State>> states;
  for (std::size_t k = 0; k < callables.size(); ++k) {
    auto s = std::make_shared<GraphedCallable::State>(GraphedCallable::State{callables[k]});
    s->userCount = sampleArgs[k].size();
    s->surface = sampleArgs[k];
    s->surface.insert(s->surface.end(), params[k].begin(), params[k].end());
    s->capturedTraining = !callables[k].module() || callables[k].module()->is_training();
    s->forward = std::make_unique<cuda::CUDAGraph>();
    s->backward = std::make_unique<cuda::CUDAGraph>();
    states.push_back(std::move(s));
  }

  // Warm-up on a side stream, as PyTorch does: the first calls (the allocator's blocks, the kernels'
  // first launches) stay out of the capture.
  cuda::synchronize(device.index());
  {
    const cuda::StreamGuard side(cuda::Stream::create(device));
    for (std::size_t k = 0; k < callables.size(); ++k) {
      for (int i = 0; i < numWarmupIters; ++i) {
        const Tensor out = callables[k](sampleArgs[k]);
        (void)differentiate(out, states[k]->surface, out.requires_grad() ? Tensor::empty(out.sizes(), out.dtype(), out.device()) : Tensor(),
                            allowUnusedInput);
      }
    }
  }
  cuda::synchronize(device.index());

  for (std::size_t k = 0; k < callables.size(); ++k) {
    cuda::graph(*states[k]->forward, [&] { states[k]->staticOutput = callables[k](sampleArgs[k]); }, mempool);
  }
  for (std::size_t k = callables.size(); k-- > 0;) {
    GraphedCallable::State& s = *states[k];
    if (s.staticOutput.requires_grad()) s.staticGradOutput = Tensor::empty(s.staticOutput.sizes(), s.staticOutput.dtype(), device);
    std::vector<Tensor> grads;
    cuda::graph(*s.backward, [&] { grads = differentiate(s.staticOutput, s.surface, s.staticGradOutput, allowUnusedInput); }, mempool);
    // One per surface tensor, undefined where it needs no gradient (or, allowed, got none).
    std::size_t found = 0;
    for (const Tensor& t : s.surface) s.staticGradInputs.push_back(t.requires_grad() && found < grads.size() ? grads[found++] : Tensor());
  }

  std::vector<GraphedCallable> graphed;
  for (auto& s : states) graphed.push_back(GraphedCallable(std::move(s)));
  return graphed;
}

GraphedCallable make_graphed_callables(const GraphableCallable& callable, const std::vector<Tensor>& sampleArgs, int numWarmupIters,
                                       bool allowUnusedInput, std::optional<cuda::MempoolId> pool) {
  return make_graphed_callables(std::vector<GraphableCallable>{callable}, {sampleArgs}, numWarmupIters, allowUnusedInput, pool).front();
}

Tensor GraphedCallable::operator()(const std::vector<Tensor>& inputs) const {
  State& s = *state_;
  if (inputs.size() != s.userCount) {
    throw ValueError("the graphed callable was captured with " + std::to_string(s.userCount) + " argument(s), got " +
                     std::to_string(inputs.size()));
  }
  // Graphed in the mode it was captured in; the module's own forward in the other.
  if (s.callable.module() && s.callable.module()->is_training() != s.capturedTraining) return s.callable(inputs);
  for (std::size_t i = 0; i < inputs.size(); ++i) {
    const Tensor& want = s.surface[i];
    if (inputs[i].sizes() != want.sizes() || inputs[i].dtype() != want.dtype() || inputs[i].device() != want.device()) {
      throw ValueError("the graphed callable's argument " + std::to_string(i) + " must keep the sample argument's shape " +
                       shapeStr(want.sizes()) + ", dtype and device (" + want.device().str() + "); got shape " + shapeStr(inputs[i].sizes()) +
                       " on " + inputs[i].device().str());
    }
  }
  {
    const NoGradGuard noGrad;
    for (std::size_t i = 0; i < inputs.size(); ++i) {
      if (inputs[i].data_ptr() != s.surface[i].data_ptr()) s.surface[i].copy_(inputs[i]);
    }
  }
  {
    const CudaDeviceGuard onDevice(s.staticOutput.device().index());
    s.forward->replay();
  }
  std::vector<Tensor> edges = inputs;
  edges.insert(edges.end(), s.surface.begin() + static_cast<std::ptrdiff_t>(s.userCount), s.surface.end());
  const std::shared_ptr<State> state = state_;
  return autograd::record(s.staticOutput.detach(), "GraphedBackward", edges, [state](const Tensor& grad, const std::vector<bool>&) {
    State& st = *state;
    const NoGradGuard noGrad;
    if (st.staticGradOutput.defined() && grad.defined() && grad.data_ptr() != st.staticGradOutput.data_ptr()) st.staticGradOutput.copy_(grad);
    {
      const CudaDeviceGuard onDevice(st.staticOutput.device().index());
      st.backward->replay();
    }
    std::vector<Tensor> grads;
    for (const Tensor& g : st.staticGradInputs) grads.push_back(g.defined() ? g.detach() : Tensor());
    return grads;
  });
}

std::size_t GraphedCallable::forward_nodes() const { return state_->forward->num_nodes(); }
std::size_t GraphedCallable::backward_nodes() const { return state_->backward->num_nodes(); }

}  // namespace gpulab::nn
