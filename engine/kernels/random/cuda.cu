// Random fills on the GPU (reference: random/cpu.cpp) from the counter-based generator of
// engine/kernels/functors.h: element i draws from counter offset + i (normal: 2 counters an element),
// so any split of the work over threads -- and the CPU -- gives the very same numbers for a seed.
// Values are drawn in float (24 random bits), scaled in OpMath<T> and rounded once to T.
#include <cuda_runtime.h>

#include "engine/core/dispatch.h"
#include "engine/kernels/cuda/cuda_backend.h"
#include "engine/kernels/cuda/launch.cuh"

namespace gpulab {

using namespace cuda;

namespace {

template <class T>
__global__ void uniformKernel(T* out, std::int64_t n, OpMath<T> low, OpMath<T> span, fn::RandomCounters counters) {
  using M = OpMath<T>;
  const fn::RandomCounters resolved = counters.resolved();  // (clang 14 cannot capture structured bindings)
  const std::uint64_t seed = resolved.seed, offset = resolved.offset;
  GPULAB_GRID_STRIDE(i, n) out[i] = static_cast<T>(low + span * static_cast<M>(fn::uniform01(seed, offset + i)));
}

template <class T>
__global__ void normalKernel(T* out, std::int64_t n, OpMath<T> mean, OpMath<T> stddev, fn::RandomCounters counters) {
  using M = OpMath<T>;
  const fn::RandomCounters resolved = counters.resolved();  // (clang 14 cannot capture structured bindings)
  const std::uint64_t seed = resolved.seed, offset = resolved.offset;
  GPULAB_GRID_STRIDE(i, n) {
    out[i] = static_cast<T>(mean + stddev * static_cast<M>(fn::standardNormal(seed, offset + fn::kCountersPerNormal * i)));
  }
}

template <class T>
__global__ void randintKernel(T* out, std::int64_t n, std::int64_t low, std::uint64_t span,
                              fn::RandomCounters counters) {
  const fn::RandomCounters resolved = counters.resolved();  // (clang 14 cannot capture structured bindings)
  const std::uint64_t seed = resolved.seed, offset = resolved.offset;
  GPULAB_GRID_STRIDE(i, n) out[i] = static_cast<T>(low + static_cast<std::int64_t>(fn::randomBits(seed, offset + i) % span));
}

// mask = keep ? 1/(1-p) : 0 (stored in T); out = in * the unrounded mask value, in OpMath<T>.
template <class T>
__global__ void dropoutKernel(T* out, T* mask, const T* in, std::int64_t n, float p,
                              fn::RandomCounters counters) {
  using M = OpMath<T>;
  const fn::RandomCounters resolved = counters.resolved();  // (clang 14 cannot capture structured bindings)
  const std::uint64_t seed = resolved.seed, offset = resolved.offset;
  const M keepScale = M(1) / (M(1) - static_cast<M>(p));
  GPULAB_GRID_STRIDE(i, n) {
    const M keep = fn::uniform01(seed, offset + i) >= p ? keepScale : M(0);
    mask[i] = static_cast<T>(keep);
    out[i] = static_cast<T>(static_cast<M>(in[i]) * keep);
  }
}

}  // namespace

void CudaBackend::uniform(const Tensor& out, double low, double high, fn::RandomCounters counters) {
  const std::int64_t n = out.numel();
  if (n == 0) return;
  auto& c = ctx();
  dispatchFloating(out.dtype(), "uniform_", [&](auto tag) {
    using T = typename decltype(tag)::type;
    using M = OpMath<T>;
    uniformKernel<<<blocksFor(n, c), kThreads, 0, c.currentStream()>>>(out.data<T>(), n, static_cast<M>(low),
                                                                        static_cast<M>(high - low), counters);
    GPULAB_CUDA_CHECK_LAUNCH();
  });
}

void CudaBackend::normal(const Tensor& out, double mean, double stddev, fn::RandomCounters counters) {
  const std::int64_t n = out.numel();
  if (n == 0) return;
  auto& c = ctx();
  dispatchFloating(out.dtype(), "normal_", [&](auto tag) {
    using T = typename decltype(tag)::type;
    using M = OpMath<T>;
    normalKernel<<<blocksFor(n, c), kThreads, 0, c.currentStream()>>>(out.data<T>(), n, static_cast<M>(mean),
                                                                       static_cast<M>(stddev), counters);
    GPULAB_CUDA_CHECK_LAUNCH();
  });
}

void CudaBackend::randint(const Tensor& out, std::int64_t low, std::int64_t high, fn::RandomCounters counters) {
  const std::int64_t n = out.numel();
  if (n == 0) return;
  auto& c = ctx();
  dispatchAll(out.dtype(), "random_", [&](auto tag) {
    using T = typename decltype(tag)::type;
    randintKernel<<<blocksFor(n, c), kThreads, 0, c.currentStream()>>>(out.data<T>(), n, low,
                                                                        static_cast<std::uint64_t>(high - low), counters);
    GPULAB_CUDA_CHECK_LAUNCH();
  });
}

void CudaBackend::dropout(const Tensor& out, const Tensor& mask, const Tensor& in, float p, fn::RandomCounters counters) {
  const std::int64_t n = in.numel();
  if (n == 0) return;
  auto& c = ctx();
  dispatchFloating(in.dtype(), "dropout", [&](auto tag) {
    using T = typename decltype(tag)::type;
    dropoutKernel<<<blocksFor(n, c), kThreads, 0, c.currentStream()>>>(out.data<T>(), mask.data<T>(), in.data<T>(), n, p, counters);
    GPULAB_CUDA_CHECK_LAUNCH();
  });
}

}  // namespace gpulab
