#pragma once
// The ops backward runs on gradients: adding two (where branches of the graph meet, and into .grad),
// casting one to an input's dtype, copying one -- and, for the run's record
// (engine/runtime/run_record.h), whether a .grad is all zeros before a backward adds to it. They are the ops layer's -- recorded into the graph
// when backward builds one (create_graph) -- and the ops layer sits above autograd, since every op
// records into autograd's graph. So ops installs them here when the engine loads
// (engine/ops/tensor_methods.cpp), as PyTorch's ATen reaches autograd through hooks that its
// autograd library registers.
#include "engine/core/dtype.h"
#include "engine/core/tensor.h"

namespace gpulab::autograd {

struct GradientOps {
  Tensor (*add)(const Tensor& a, const Tensor& b) = nullptr;
  Tensor (*cast)(const Tensor& t, DType dtype) = nullptr;
  Tensor (*clone)(const Tensor& t) = nullptr;
  void (*copyInto)(Tensor& dst, const Tensor& src) = nullptr;  // dst.copy_(src)
  bool (*anyNonzero)(const Tensor& t) = nullptr;  // whether an element is not 0 (the run's record asks it of a .grad)
};

void installGradientOps(const GradientOps& ops);
// What was installed; throws Error when nothing was (an engine built without its ops layer).
const GradientOps& gradientOps();

}  // namespace gpulab::autograd
