#pragma once
// torch.autocast: inside an AutocastGuard region, ops run in the precision PyTorch's autocast policy
// gives them, not in their inputs' dtype (PyTorch's aten/src/ATen/autocast_mode.cpp lists):
//   lower precision (the region's dtype): matmul, linear, mm, bmm, addmm (conv when it lands) -- the
//     GEMMs, where tensor cores make float16/bfloat16 fast and float32 accumulation keeps them
//     accurate;
//   float32: on CUDA softmax, log_softmax, exp, log, pow, 1/x, sum and the losses -- ops whose range
//     or accumulation float16 cannot hold; on the CPU only the losses (mse, l1, nll, cross_entropy),
//     as PyTorch's CPU policy (tests/autocast/ records both tables, the CPU one from PyTorch itself);
//   promote (the widest input dtype): cat, stack, addcmul, addcdiv, dot;
//   everything else runs in its inputs' dtype, and ops of two tensors follow type promotion (a
//     float16 tensor plus a float32 one gives float32). float64 inputs are never cast.
// Casts of leaf tensors that require grad (the weights) are cached for the region, so a weight used
// by several ops is cast once per region (PyTorch's cast cache); leaving the outermost region clears
// the cache. The state is per thread (engine/runtime/execution_context.h), like PyTorch's.
//
//   {
//     amp::AutocastGuard autocast(DeviceType::CUDA, kFloat16);
//     Tensor logits = model.forward(x);                 // float16 (linear)
//     Tensor loss = F::cross_entropy(logits, y);        // float32
//   }
//   scaler.scale(loss).backward();                      // outside the region, as in PyTorch
#include <initializer_list>

#include "engine/core/device.h"
#include "engine/core/dtype.h"
#include "engine/core/tensor.h"
#include "engine/runtime/execution_context.h"

namespace gpulab::amp {

// How an op treats its floating inputs under autocast.
enum class CastPolicy { LowerPrecision, Float32, Promote, None };

// The policy PyTorch's autocast gives the op with this (aten) name on this device type: "matmul",
// "linear", "softmax", ...
CastPolicy castPolicy(DeviceType deviceType, const char* op);

class AutocastGuard {
 public:
  // dtype: float16 or bfloat16 on either device type (as PyTorch 2.x; 1.13 allowed only bfloat16 on
  // the CPU); anything else throws ValueError. enabled=false turns autocast off inside an enabled
  // region (torch.autocast(..., enabled=False)).
  AutocastGuard(DeviceType deviceType, DType dtype, bool enabled = true);
  explicit AutocastGuard(DeviceType deviceType) : AutocastGuard(deviceType, defaultDtype(deviceType)) {}
  AutocastGuard(const AutocastGuard&) = delete;
  AutocastGuard& operator=(const AutocastGuard&) = delete;

  // torch.get_autocast_gpu_dtype() / get_autocast_cpu_dtype() defaults: float16 on CUDA, bfloat16 on CPU.
  static DType defaultDtype(DeviceType deviceType);

 private:
  AutocastStateGuard state_;
};

bool is_autocast_enabled(DeviceType deviceType);
DType get_autocast_dtype(DeviceType deviceType);

// For the op layer: casts an op's inputs, in place, to what it should compute with -- each floating
// input to the region's dtype, to float32, or to the widest input dtype, as castPolicy(device, op)
// says -- or leaves them as they are when autocast is off for their device (the common case costs one
// thread-local read: no allocation, no cast). Undefined tensors (an absent bias) stay undefined. Casts
// are recorded by autograd (gradients flow back in the original dtype); casts of leaf tensors that
// require grad come from the region's cast cache.
//   Tensor a = a0, b = b0;
//   amp::autocast("matmul", {&a, &b});
void autocast(const char* op, std::initializer_list<Tensor*> inputs);
// The one-input form: the tensor `op` computes with.
Tensor autocast(const char* op, const Tensor& input);

}  // namespace gpulab::amp
