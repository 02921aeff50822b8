// Fused optimizer steps on the CPU, the reference for optim/cuda.cu: the update formulas are
// fn::SgdUpdateT / fn::AdamUpdateT (engine/kernels/functors.h), applied in the parameter's math type
// (float, or double for float64 parameters); state tensors have the parameter's dtype. Each element's
// update is independent: a long parameter is shared out over the engine's threads.
#include <type_traits>

#include "engine/core/dispatch.h"
#include "engine/core/parallel.h"
#include "engine/kernels/cpu_backend.h"

namespace gpulab {

void CpuBackend::sgdStep(const Tensor& param, const Tensor& grad, const Tensor* buf, const SgdHyper& h) {
  dispatchFloating(param.dtype(), "sgd_step", [&](auto tag) {
    using T = typename decltype(tag)::type;
    using M = OpMath<T>;
    const auto update = fn::makeSgdUpdate<M>(h, buf != nullptr);
    T* p = param.data<T>();
    const T* g = grad.data<T>();
    T* b = buf ? buf->data<T>() : nullptr;
    parallelRanges(param.numel(), kHeavyElementGrain, [&](std::int64_t begin, std::int64_t end) {
      for (std::int64_t i = begin; i < end; ++i) {
        M pv = static_cast<M>(p[i]);
        M bv = b ? static_cast<M>(b[i]) : M(0);
        update(pv, static_cast<M>(g[i]), b ? &bv : nullptr);
        p[i] = static_cast<T>(pv);
        if (b) b[i] = static_cast<T>(bv);
      }
    });
  });
}

void CpuBackend::adamStep(const Tensor& param, const Tensor& grad, const Tensor& expAvg, const Tensor& expAvgSq,
                          const Tensor* maxExpAvgSq, const AdamHyper& h) {
  dispatchFloating(param.dtype(), "adam_step", [&](auto tag) {
    using T = typename decltype(tag)::type;
    using M = OpMath<T>;
    const auto update = fn::makeAdamUpdate<M>(h).resolved();  // capturable: the step count read as the update runs
    T* p = param.data<T>();
    const T* g = grad.data<T>();
    T* m = expAvg.data<T>();
    T* v = expAvgSq.data<T>();
    T* vmax = maxExpAvgSq ? maxExpAvgSq->data<T>() : nullptr;
    const std::int64_t n = param.numel();
    // One loop for each amsgrad setting, so the usual one (without) has no per-element branch left and
    // the compiler vectorises it: the same operations in the same order, 4 or 8 elements at a time.
    auto run = [&](auto amsgrad) {
      parallelRanges(n, kHeavyElementGrain, [&](std::int64_t begin, std::int64_t end) {
        for (std::int64_t i = begin; i < end; ++i) {
          M pv = static_cast<M>(p[i]), mv = static_cast<M>(m[i]), vv = static_cast<M>(v[i]);
          if constexpr (amsgrad) {
            M vm = static_cast<M>(vmax[i]);
            update(pv, static_cast<M>(g[i]), mv, vv, &vm);
            vmax[i] = static_cast<T>(vm);
          } else {
            update(pv, static_cast<M>(g[i]), mv, vv, nullptr);
          }
          p[i] = static_cast<T>(pv);
          m[i] = static_cast<T>(mv);
          v[i] = static_cast<T>(vv);
        }
      });
    };
    if (vmax) run(std::true_type{});
    else run(std::false_type{});
  });
}

}  // namespace gpulab
