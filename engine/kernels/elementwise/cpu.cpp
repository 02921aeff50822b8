// Elementwise kernels on the CPU, the reference for elementwise/cuda.cu: fills, conversions (copy
// between any two dtypes), unary and binary ops with broadcasting, where. Each element is loaded into the
// math type (float for float16/bfloat16), computed by the functor (engine/kernels/functors.h) and
// rounded once on store.
#include <algorithm>

#include "engine/core/dispatch.h"
#include "engine/core/parallel.h"
#include "engine/kernels/cpu_backend.h"
#include "engine/kernels/cpu_convert.h"
#include "engine/kernels/strided.h"

namespace gpulab {

namespace {

// Element conversion: through the source's math type, then fn::convertElement's rules (float to int64
// truncates, NaN and out-of-range give INT64_MIN as on PyTorch's CPU).
template <class D, class S>
inline D convert(S v) {
  using M = OpMath<S>;
  if constexpr (std::is_same_v<D, Half> || std::is_same_v<D, BFloat16>) {
    return D(static_cast<float>(static_cast<M>(v)));
  } else {
    return fn::convertElement<D>(static_cast<M>(v));
  }
}

}  // namespace

void CpuBackend::fill(const Tensor& out, double value) {
  dispatchWithBool(out.dtype(), "fill_", [&](auto tag) {
    using T = typename decltype(tag)::type;
    std::fill_n(out.data<T>(), out.numel(), static_cast<T>(value));
  });
}

void CpuBackend::arange(const Tensor& out, double start, double step) {
  dispatchAll(out.dtype(), "arange", [&](auto tag) {
    using T = typename decltype(tag)::type;
    T* o = out.data<T>();
    for (std::int64_t i = 0; i < out.numel(); ++i) o[i] = static_cast<T>(start + step * static_cast<double>(i));
  });
}

void CpuBackend::copy(const Tensor& dst, const Tensor& src) {
  dispatchWithBool(dst.dtype(), "copy_", [&](auto dtag) {
    using D = typename decltype(dtag)::type;
    dispatchWithBool(src.dtype(), "copy_", [&](auto stag) {
      using S = typename decltype(stag)::type;
      D* d = dst.data<D>();
      const S* s = src.data<S>();
      if (dst.is_contiguous() && src.is_contiguous()) {
        // The casts autocast makes on every op: float32 <-> float16 a vector at a time.
        parallelRanges(dst.numel(), kElementGrain, [&](std::int64_t begin, std::int64_t end) {
          if constexpr (std::is_same_v<D, Half> && std::is_same_v<S, float>) return cpu::floatToHalf(s + begin, d + begin, end - begin);
          if constexpr (std::is_same_v<D, float> && std::is_same_v<S, Half>) return cpu::halfToFloat(s + begin, d + begin, end - begin);
          for (std::int64_t i = begin; i < end; ++i) d[i] = convert<D>(s[i]);
        });
        return;
      }
      detail::forEachRun<2>(dst.sizes(), {dst.strides().data(), src.strides().data()},
                            [&](const auto& off, std::int64_t count, const auto& inner) {
                              D* dp = d + off[0];
                              const S* sp = s + off[1];
                              for (std::int64_t i = 0; i < count; ++i) dp[i * inner[0]] = convert<D>(sp[i * inner[1]]);
                            });
    });
  });
}

void CpuBackend::unary(UnaryOp op, const Tensor& out, const Tensor& in) {
  fn::dispatchUnary(op, [&](auto f) {
    dispatchAll(in.dtype(), "unary op", [&](auto tag) {
      using T = typename decltype(tag)::type;
      using M = OpMath<T>;
      const T* x = in.data<T>();
      T* y = out.data<T>();
      parallelRanges(out.numel(), kElementGrain, [&](std::int64_t begin, std::int64_t end) {
        for (std::int64_t i = begin; i < end; ++i) y[i] = static_cast<T>(f(static_cast<M>(x[i])));
      });
    });
  });
}

void CpuBackend::binary(BinaryOp op, const Tensor& out, const Tensor& a, const Tensor& b) {
  fn::dispatchBinary(op, [&](auto f) {
    dispatchAll(out.dtype(), "binary op", [&](auto tag) {
      using T = typename decltype(tag)::type;
      using M = OpMath<T>;
      T* o = out.data<T>();
      const T* x = a.data<T>();
      const T* y = b.data<T>();
      const std::int64_t n = out.numel();
      if (a.is_contiguous() && b.is_contiguous()) {
        parallelRanges(n, kElementGrain, [&](std::int64_t begin, std::int64_t end) {
          for (std::int64_t i = begin; i < end; ++i) o[i] = static_cast<T>(f(static_cast<M>(x[i]), static_cast<M>(y[i])));
        });
        return;
      }
      detail::forEachRun<3>(out.sizes(), {out.strides().data(), a.strides().data(), b.strides().data()},
                            [&](const auto& off, std::int64_t count, const auto& inner) {
                              T* op_ = o + off[0];
                              const T* xp = x + off[1];
                              const T* yp = y + off[2];
                              if (inner[1] == 1 && inner[2] == 1) {
                                for (std::int64_t i = 0; i < count; ++i)
                                  op_[i] = static_cast<T>(f(static_cast<M>(xp[i]), static_cast<M>(yp[i])));
                              } else if (inner[1] == 1 && inner[2] == 0) {
                                const M yv = static_cast<M>(*yp);
                                for (std::int64_t i = 0; i < count; ++i) op_[i] = static_cast<T>(f(static_cast<M>(xp[i]), yv));
                              } else {
                                for (std::int64_t i = 0; i < count; ++i)
                                  op_[i] = static_cast<T>(f(static_cast<M>(xp[i * inner[1]]), static_cast<M>(yp[i * inner[2]])));
                              }
                            });
    });
  });
}

void CpuBackend::binaryScalar(BinaryOp op, const Tensor& out, const Tensor& a, double s, bool scalarFirst) {
  fn::dispatchBinary(op, [&](auto f) {
    dispatchAll(out.dtype(), "binary op", [&](auto tag) {
      using T = typename decltype(tag)::type;
      using M = OpMath<T>;
      const M sv = static_cast<M>(s);  // a Python scalar joins in the math type, as in PyTorch
      T* o = out.data<T>();
      const T* x = a.data<T>();
      const std::int64_t n = out.numel();
      parallelRanges(n, kElementGrain, [&](std::int64_t begin, std::int64_t end) {
        if (scalarFirst) {
          for (std::int64_t i = begin; i < end; ++i) o[i] = static_cast<T>(f(sv, static_cast<M>(x[i])));
        } else {
          for (std::int64_t i = begin; i < end; ++i) o[i] = static_cast<T>(f(static_cast<M>(x[i]), sv));
        }
      });
    });
  });
}

void CpuBackend::where(const Tensor& out, const Tensor& cond, const Tensor& a, const Tensor& b) {
  dispatchWithBool(out.dtype(), "where", [&](auto tag) {
    using T = typename decltype(tag)::type;
    const bool* c = cond.data<bool>();
    const T* x = a.data<T>();
    const T* y = b.data<T>();
    T* o = out.data<T>();
    for (std::int64_t i = 0, n = out.numel(); i < n; ++i) o[i] = c[i] ? x[i] : y[i];
  });
}

}  // namespace gpulab
