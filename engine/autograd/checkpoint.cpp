// Activation checkpointing (see checkpoint.h for the semantics). The recompute's gradients for the
// checkpoint's inputs and params are caught by sinks that stand in for those tensors' AccumulateGrad
// (or grad_fn) while the segment is recomputed and backpropagated, and are returned by the checkpoint
// node: the outer backward then delivers them as it would have without the checkpoint.
#include "engine/autograd/checkpoint.h"

#include <array>
#include <memory>
#include <optional>
#include <string>

#include "engine/autograd/grad_mode.h"
#include "engine/autograd/node.h"
#include "engine/core/errors.h"
#include "engine/core/generator.h"
#include "engine/memory/memory_events.h"
#include "engine/runtime/execution_context.h"

namespace gpulab {
namespace {

using MultiFn = std::function<Tensor(const std::vector<Tensor>&)>;

// Receives, in the recompute's backward, the gradient for one input or param of the checkpoint.
class GradientSink final : public autograd::Node {
 public:
  std::vector<Tensor> apply(const Tensor& gradOutput) override {
    grad = gradOutput;  // the engine sums every contribution before it calls a node, so once
    return {};
  }
  std::string name() const override { return "CheckpointGradientSink"; }
  Tensor grad;
};

// Points tensors' gradient edges at sinks while it lives (a leaf's AccumulateGrad, another tensor's
// grad_fn: what autograd::gradientEdge returns); puts them back in reverse order, so a tensor
// redirected twice ends as it began.
class EdgeRedirect {
 public:
  EdgeRedirect() = default;
  EdgeRedirect(const EdgeRedirect&) = delete;
  EdgeRedirect& operator=(const EdgeRedirect&) = delete;
  ~EdgeRedirect() {
    for (auto it = saved_.rbegin(); it != saved_.rend(); ++it) {
      it->impl->grad_fn = std::move(it->gradFn);
      it->impl->grad_accumulator = it->accumulator;
    }
  }
  void redirect(const Tensor& t, const std::shared_ptr<autograd::Node>& sink) {
    TensorImpl& impl = t.impl();
    saved_.push_back({t.implPtr(), impl.grad_fn, impl.grad_accumulator});
    if (impl.grad_fn) {
      impl.grad_fn = sink;
    } else {
      impl.grad_accumulator = sink;
    }
  }

 private:
  struct Saved {
    std::shared_ptr<TensorImpl> impl;
    std::shared_ptr<autograd::Node> gradFn;
    std::weak_ptr<autograd::Node> accumulator;
  };
  std::vector<Saved> saved_;
};

// A generator's whole state: its seed and how many counters it has handed out (generator.h).
struct RngState {
  std::uint64_t seed = 0, offset = 0;
};

RngState rngState(Generator& gen) { return {gen.seed(), gen.advance(0)}; }

void setRngState(Generator& gen, const RngState& state) {
  gen.manual_seed(state.seed);  // offset 0 ...
  gen.advance(state.offset);    // ... then forward to where it was
}

// What the first forward ran under, while the recompute runs: grad mode on; the default generator
// in the state it had then, and put back afterwards (torch.random.fork_rng), so the recompute draws
// the same numbers and the random stream after backward is the one without checkpoint; allocations
// tagged Activation (backward's own scope says Gradient).
// The autocast state of both device types when the segment ran forward: the recompute must cast as
// the forward did (torch.utils.checkpoint re-enters the forward's autocast too), or its matmuls would
// meet float16 and float32 operands.
using AutocastStates = std::array<AutocastState, 2>;

class RecomputeScope {
 public:
  RecomputeScope(const std::optional<RngState>& replay, const AutocastStates& autocast)
      : gradWas_(isGradEnabled()),
        replay_(replay.has_value()),
        rngWas_(rngState(defaultGenerator())),
        cpuAutocast_(DeviceType::CPU, autocast[autocastSlot(DeviceType::CPU)]),
        cudaAutocast_(DeviceType::CUDA, autocast[autocastSlot(DeviceType::CUDA)]) {
    setGradEnabled(true);
    if (replay_) setRngState(defaultGenerator(), *replay);
  }
  ~RecomputeScope() {
    if (replay_) setRngState(defaultGenerator(), rngWas_);
    setGradEnabled(gradWas_);
  }
  RecomputeScope(const RecomputeScope&) = delete;
  RecomputeScope& operator=(const RecomputeScope&) = delete;

 private:
  bool gradWas_, replay_;
  RngState rngWas_;
  AutocastStateGuard cpuAutocast_, cudaAutocast_;
  MemoryCategoryScope tag_{MemoryCategory::Activation};
};

// The checkpoint node's backward: fn again, with grad, then backward through it into the sinks.
// Edge i of the node is inputs[i] for i < inputs.size(), then the params.
std::vector<Tensor> recomputeBackward(const MultiFn& fn, const std::vector<Tensor>& inputs, const std::vector<Tensor>& params,
                                      const std::optional<RngState>& rng, const AutocastStates& autocast,
                                      const Tensor& grad, const std::vector<bool>& needs) {
  std::vector<std::shared_ptr<GradientSink>> sinks(needs.size());
  EdgeRedirect redirect;  // lives through the backward too: fn may return an input or a param itself
  auto sinkFor = [&](std::size_t edge, const Tensor& t) {
    if (!needs[edge]) return;
    sinks[edge] = std::make_shared<GradientSink>();
    redirect.redirect(t, sinks[edge]);
  };
  std::vector<Tensor> xs;
  xs.reserve(inputs.size());
  for (std::size_t i = 0; i < inputs.size(); ++i) {
    Tensor x = inputs[i].defined() ? inputs[i].detach() : Tensor();
    if (needs[i]) x.requires_grad_(true);
    sinkFor(i, x);
    xs.push_back(std::move(x));
  }
  for (std::size_t j = 0; j < params.size(); ++j) sinkFor(inputs.size() + j, params[j]);

  Tensor out;
  {
    RecomputeScope scope(rng, autocast);
    out = fn(xs);
  }
  if (out.defined() && out.requires_grad()) autograd::runBackward(out, grad);

  std::vector<Tensor> grads;
  grads.reserve(sinks.size());
  for (const auto& sink : sinks) grads.push_back(sink ? sink->grad : Tensor());
  return grads;
}

}  // namespace

Tensor checkpoint(const MultiFn& fn, const std::vector<Tensor>& inputs, const std::vector<Tensor>& params,
                  bool preserve_rng_state) {
  std::vector<Tensor> edges = inputs;
  edges.insert(edges.end(), params.begin(), params.end());
  // No grad mode, or nothing listed needs grad: fn as it is (recorded as usual if it reads another
  // tensor that requires grad, so that tensor still gets its gradient).
  if (!autograd::anyRequiresGrad(edges)) return fn(inputs);

  std::optional<RngState> rng;
  if (preserve_rng_state) rng = rngState(defaultGenerator());
  const AutocastStates autocast = executionContext().autocast;
  Tensor out;
  {
    NoGradGuard noGrad;  // nothing recorded: fn's intermediates are freed as it goes
    out = fn(inputs);
  }
  if (!out.defined()) throw ValueError("checkpoint: the checkpointed function returned an undefined tensor");
  out = out.detach();  // a handle of its own: fn may have returned an input or a param itself

  std::vector<Tensor> saved;  // the inputs, and nothing else of the segment
  saved.reserve(inputs.size());
  for (const Tensor& t : inputs) saved.push_back(t.defined() ? t.detach() : Tensor());
  return autograd::record(out, "CheckpointFunctionBackward", edges,
                          [fn, saved, params, rng, autocast](const Tensor& grad, const std::vector<bool>& needs) {
                            return recomputeBackward(fn, saved, params, rng, autocast, grad, needs);
                          }, saved);
}

Tensor checkpoint(const std::function<Tensor(const Tensor&)>& fn, const Tensor& input, const std::vector<Tensor>& params,
                  bool preserve_rng_state) {
  return checkpoint([fn](const std::vector<Tensor>& xs) { return fn(xs.front()); }, std::vector<Tensor>{input}, params,
                    preserve_rng_state);
}

}  // namespace gpulab
