// Random fills on the CPU from the counter-based generator (engine/kernels/functors.h): element i
// draws from counter offset + i, so random/cuda.cu produces the very same numbers for a seed. Values
// are drawn in float (24 random bits) and rounded once to the output dtype.
#include "engine/core/dispatch.h"
#include "engine/kernels/cpu_backend.h"

namespace gpulab {

void CpuBackend::uniform(const Tensor& out, double low, double high, fn::RandomCounters counters) {
  const fn::RandomCounters resolved = counters.resolved();  // (clang 14 cannot capture structured bindings)
  const std::uint64_t seed = resolved.seed, offset = resolved.offset;
  dispatchFloating(out.dtype(), "uniform_", [&](auto tag) {
    using T = typename decltype(tag)::type;
    using M = OpMath<T>;
    T* o = out.data<T>();
    const M lo = static_cast<M>(low), span = static_cast<M>(high - low);
    for (std::int64_t i = 0, n = out.numel(); i < n; ++i)
      o[i] = static_cast<T>(lo + span * static_cast<M>(fn::uniform01(seed, offset + i)));
  });
}

void CpuBackend::normal(const Tensor& out, double mean, double stddev, fn::RandomCounters counters) {
  const fn::RandomCounters resolved = counters.resolved();  // (clang 14 cannot capture structured bindings)
  const std::uint64_t seed = resolved.seed, offset = resolved.offset;
  dispatchFloating(out.dtype(), "normal_", [&](auto tag) {
    using T = typename decltype(tag)::type;
    using M = OpMath<T>;
    T* o = out.data<T>();
    for (std::int64_t i = 0, n = out.numel(); i < n; ++i)
      o[i] = static_cast<T>(static_cast<M>(mean) +
                            static_cast<M>(stddev) * static_cast<M>(fn::standardNormal(seed, offset + 2 * i)));
  });
}

void CpuBackend::randint(const Tensor& out, std::int64_t low, std::int64_t high, fn::RandomCounters counters) {
  const fn::RandomCounters resolved = counters.resolved();  // (clang 14 cannot capture structured bindings)
  const std::uint64_t seed = resolved.seed, offset = resolved.offset;
  dispatchAll(out.dtype(), "random_", [&](auto tag) {
    using T = typename decltype(tag)::type;
    T* o = out.data<T>();
    const std::uint64_t span = static_cast<std::uint64_t>(high - low);
    for (std::int64_t i = 0, n = out.numel(); i < n; ++i)
      o[i] = static_cast<T>(low + static_cast<std::int64_t>(fn::randomBits(seed, offset + i) % span));
  });
}

void CpuBackend::dropout(const Tensor& out, const Tensor& mask, const Tensor& in, float p, fn::RandomCounters counters) {
  const fn::RandomCounters resolved = counters.resolved();  // (clang 14 cannot capture structured bindings)
  const std::uint64_t seed = resolved.seed, offset = resolved.offset;
  dispatchFloating(in.dtype(), "dropout", [&](auto tag) {
    using T = typename decltype(tag)::type;
    using M = OpMath<T>;
    const T* x = in.data<T>();
    T* o = out.data<T>();
    T* mk = mask.data<T>();
    const M keepScale = M(1) / (M(1) - static_cast<M>(p));
    for (std::int64_t i = 0, n = in.numel(); i < n; ++i) {
      const M keep = fn::uniform01(seed, offset + i) >= p ? keepScale : M(0);
      mk[i] = static_cast<T>(keep);
      o[i] = static_cast<T>(static_cast<M>(x[i]) * keep);
    }
  });
}

}  // namespace gpulab
