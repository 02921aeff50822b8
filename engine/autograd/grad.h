#pragma once
// torch.autograd.grad: gradients returned rather than accumulated into .grad (engine.cpp walks the
// graph for it as for backward()). Apart from node.h, which nearly every op includes.
#include <vector>

#include "engine/core/tensor.h"

namespace gpulab::autograd {

// The gradients of `outputs` (weighted by `gradOutputs`, one each; an undefined one is ones for a
// one-element output) with respect to `inputs`, returned rather than accumulated -- no leaf's .grad
// changes. An input the outputs do not depend on gets an undefined tensor when `allowUnused`, else the
// call raises as PyTorch does. The graph is released as by backward(), unless retainGraph.
std::vector<Tensor> grad(const std::vector<Tensor>& outputs, const std::vector<Tensor>& gradOutputs, const std::vector<Tensor>& inputs,
                         bool allowUnused, bool retainGraph = false);

}  // namespace gpulab::autograd
