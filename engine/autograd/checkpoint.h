#pragma once
// Activation checkpointing, as torch.utils.checkpoint.checkpoint: "recompute instead of store".
//
// Forward: fn runs under no_grad, so none of its intermediate activations are kept (each is freed as
// soon as the next op has used it); the result gets one node, CheckpointFunctionBackward, that keeps
// only the segment's inputs. Backward: that node runs fn again with grad enabled (allocations tagged
// MemoryCategory::Activation, as in the first forward), on the default generator's state of the first
// forward (so dropout draws the same masks), and backpropagates the incoming gradient through the
// recomputed graph. The gradients for the inputs and for `params` come back out of the node, so the
// outer backward accumulates them exactly where, and in the order, it would without the checkpoint:
// gradients equal the non-checkpointed ones bit for bit (same ops, same order).
//
// Why `params`: this engine's ops keep what backward needs inside their nodes (there are no saved-
// tensor hooks, which PyTorch's use_reentrant=False uses), so the checkpoint cannot see, during a
// no-grad forward, which tensors fn reads. The tensors it reads besides its inputs and that need
// gradients (a module's parameters; nn::Checkpoint passes them) are listed in `params`: the output
// requires grad when an input or one of them does. An unlisted leaf that requires grad still gets
// its gradient: accumulated during the recompute when an input or param requires grad (PyTorch's
// use_reentrant=True behaviour), otherwise because fn then runs unchanged, recorded as usual. fn must
// not read tensors with grad history that are neither inputs nor params (the recompute would
// backpropagate into the outer graph, whose nodes the outer backward then finds already freed).
//
// Under NoGradGuard, or when no input or param requires grad, checkpoint just calls fn (PyTorch warns
// in the first case; we just run). Backward twice through
// the node raises the engine's usual "Trying to backward through the graph a second time" error.
// Only the default generator is replayed (as PyTorch replays only the default CPU/CUDA generators);
// a Dropout with its own Generator inside a checkpoint would draw new masks in the recompute.
#include <functional>
#include <vector>

#include "engine/core/tensor.h"

namespace gpulab {

// checkpoint(fn, x) == fn(x), with fn's activations recomputed in backward instead of stored.
// preserve_rng_state: replay the default generator in the recompute (PyTorch's flag, same default).
Tensor checkpoint(const std::function<Tensor(const Tensor&)>& fn, const Tensor& input,
                  const std::vector<Tensor>& params = {}, bool preserve_rng_state = true);

// The multi-input form: fn receives the inputs, in the same order (in the recompute: detached leaves
// with the same values, which require grad where the originals do).
Tensor checkpoint(const std::function<Tensor(const std::vector<Tensor>&)>& fn, const std::vector<Tensor>& inputs,
                  const std::vector<Tensor>& params = {}, bool preserve_rng_state = true);

}  // namespace gpulab
