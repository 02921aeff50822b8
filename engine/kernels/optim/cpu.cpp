// Fused optimizer steps on the CPU, the reference for optim/cuda.cu: the update formulas are
// fn::SgdUpdateT / fn::AdamUpdateT (engine/kernels/functors.h), applied in the parameter's math type
// (float, or double for float64 parameters); state tensors have the parameter's dtype. Each element's
// update is independent: a long parameter is shared out over the engine's threads.
#include <type_traits>

#include "engine/core/dispatch.h"
#include "engine/core/parallel.h"
#include "engine/kernels/cpu_backend.h"
#include "engine/core/cpu_features.h"

#if defined(__x86_64__)
#include <immintrin.h>
#define GPULAB_HAVE_AVX_ADAM_PATH 1
#endif

namespace gpulab {

namespace {

#if defined(GPULAB_HAVE_AVX_ADAM_PATH)
// float32 Adam without amsgrad, eight elements at a time on a CPU with AVX: fn::AdamUpdateT's operations
// in its order, each rounded as the scalar loop rounds it (no fused multiply-add), so the results are the
// same bits. The scalar loop does not vectorise -- its sqrt keeps errno's check for negative inputs --
// and its two divisions an element made Adam a third of an MLP step. Returns how many leading elements
// it updated (a multiple of 8); the caller does the rest.
__attribute__((target("avx"))) std::int64_t adamFloatAvx(float* p, const float* g, float* m, float* v, std::int64_t n,
                                                         const fn::AdamUpdateT<float>& u) {
  const __m256 beta1 = _mm256_set1_ps(u.beta1), oneMinusBeta1 = _mm256_set1_ps(u.one_minus_beta1);
  const __m256 beta2 = _mm256_set1_ps(u.beta2), oneMinusBeta2 = _mm256_set1_ps(u.one_minus_beta2);
  const __m256 eps = _mm256_set1_ps(u.eps), weightDecay = _mm256_set1_ps(u.weight_decay), decay = _mm256_set1_ps(u.decay);
  const __m256 negStepSize = _mm256_set1_ps(-u.step_size), correction = _mm256_set1_ps(u.bias_correction2_sqrt);
  const bool decayed = u.weight_decay != 0.0f, decoupled = u.decoupled;
  std::int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    __m256 pv = _mm256_loadu_ps(p + i), gv = _mm256_loadu_ps(g + i);
    if (decayed) {
      if (decoupled) pv = _mm256_mul_ps(pv, decay);
      else gv = _mm256_add_ps(gv, _mm256_mul_ps(weightDecay, pv));
    }
    const __m256 mv = _mm256_add_ps(_mm256_mul_ps(_mm256_loadu_ps(m + i), beta1), _mm256_mul_ps(oneMinusBeta1, gv));
    const __m256 vv =
        _mm256_add_ps(_mm256_mul_ps(_mm256_loadu_ps(v + i), beta2), _mm256_mul_ps(_mm256_mul_ps(oneMinusBeta2, gv), gv));
    const __m256 denom = _mm256_add_ps(_mm256_div_ps(_mm256_sqrt_ps(vv), correction), eps);
    _mm256_storeu_ps(p + i, _mm256_add_ps(pv, _mm256_div_ps(_mm256_mul_ps(negStepSize, mv), denom)));
    _mm256_storeu_ps(m + i, mv);
    _mm256_storeu_ps(v + i, vv);
  }
  return i;
}
#endif

// How many leading elements of a float32 Adam range the vector loop updated (0 where it does not run).
template <class T>
std::int64_t adamVectorised(T* p, const T* g, T* m, T* v, std::int64_t n, const fn::AdamUpdateT<OpMath<T>>& u) {
#if defined(GPULAB_HAVE_AVX_ADAM_PATH)
  if constexpr (std::is_same_v<T, float>) {
    static const bool avx = cpuFeatures().avx;
    if (avx) return adamFloatAvx(p, g, m, v, n, u);
  }
#endif
  (void)p, (void)g, (void)m, (void)v, (void)n, (void)u;
  return 0;
}

}  // namespace

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
        if constexpr (!amsgrad) begin += adamVectorised(p + begin, g + begin, m + begin, v + begin, end - begin, update);
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
