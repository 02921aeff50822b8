// GradScaler's fused check on the CPU, the reference for engine/kernels/amp/cuda.cu:
// torch._amp_foreach_non_finite_check_and_unscale_ (aten/src/ATen/native/cpu/AmpGradScalerKernels.cpp)
// plus the zero count a lesson plots. One pass over each gradient: load, classify, multiply, store.
//
// As PyTorch's kernel, the value is widened to OpMath<T> (float for float16/bfloat16), multiplied by
// the inverse scale and rounded once on store. PyTorch's inv_scale is a float32 tensor; GradScaler
// passes a value already rounded to float, so multiplying float64 gradients by the double we get is
// PyTorch's float-widened-to-double product.
#include <cmath>
#include <cstdint>
#include <string>

#include "engine/core/dispatch.h"
#include "engine/core/errors.h"
#include "engine/kernels/cpu_backend.h"

namespace gpulab {
namespace {

void checkCounts(const Tensor& counts) {
  if (counts.dtype() != kInt64 || counts.numel() != 2 || !counts.is_contiguous()) {
    throw ValueError("nonFiniteCheckAndUnscale: counts must be a contiguous int64 tensor of 2 elements, got " +
                     dtypeName(counts.dtype()) + " " + shapeStr(counts.sizes()));
  }
}

// Counts inf/NaN and exact zeros of p[0, n) (before scaling) and multiplies p by `inv` in place.
template <class T>
void checkAndUnscale(T* p, std::int64_t n, OpMath<T> inv, std::int64_t& nonfinite, std::int64_t& zeros) {
  using M = OpMath<T>;
  std::int64_t bad = 0, zero = 0;
  for (std::int64_t i = 0; i < n; ++i) {
    const M v = static_cast<M>(p[i]);
    bad += std::isfinite(v) ? 0 : 1;
    zero += v == M(0) ? 1 : 0;  // +0 and -0
    p[i] = static_cast<T>(v * inv);
  }
  nonfinite += bad;
  zeros += zero;
}

}  // namespace

void CpuBackend::nonFiniteCheckAndUnscale(const std::vector<Tensor>& grads, const Tensor& counts, double invScale) {
  checkCounts(counts);
  for (const Tensor& g : grads) {  // refuse before touching any gradient
    if (!isFloatingPoint(g.dtype())) throwNotImplementedFor("_amp_foreach_non_finite_check_and_unscale_cpu_", g.dtype());
    if (!g.is_contiguous()) throw ValueError("nonFiniteCheckAndUnscale: gradients must be contiguous");
  }
  std::int64_t nonfinite = 0, zeros = 0;
  for (const Tensor& g : grads) {
    dispatchFloating(g.dtype(), "_amp_foreach_non_finite_check_and_unscale_cpu_", [&](auto tag) {
      using T = typename decltype(tag)::type;
      checkAndUnscale<T>(g.data<T>(), g.numel(), static_cast<OpMath<T>>(invScale), nonfinite, zeros);
    });
  }
  std::int64_t* c = counts.data<std::int64_t>();
  c[0] += nonfinite;
  c[1] += zeros;
}

}  // namespace gpulab
