// Elementwise kernels on the GPU (reference: elementwise/cpu.cpp): fills, conversions (copy between
// any two dtypes), unary and binary ops with broadcasting, where. Each element is loaded into OpMath<T>
// (float for float16/bfloat16), computed by the functor of engine/kernels/functors.h -- the very code
// the CPU runs -- and rounded once on store, so results match the CPU bit for bit except where CUDA's
// transcendental functions differ from glibc's by an ulp or two.
//
// Shapes: every kernel is a grid-stride loop (launch.cuh). The contiguous paths of the 2- and 4-byte
// types (float16, bfloat16, float32) move four elements per load and store (8 or 16 bytes) when every
// pointer is aligned to that, with the last n % 4 elements done one by one; memory bandwidth, not
// arithmetic, bounds these kernels, and the 16-bit types otherwise issue 2-byte transactions. Strided
// operands (broadcasts, transposed views) go through an OffsetCalc, one element per step.
#include <cuda_runtime.h>

#include <type_traits>

#include "engine/core/dispatch.h"
#include "engine/kernels/cuda/cuda_backend.h"
#include "engine/kernels/cuda/launch.cuh"

namespace gpulab {

using namespace cuda;

namespace {

// ---- per-element functions: load into OpMath, compute, round once ---------------------------------

// Element conversion, as elementwise/cpu.cpp's: through the source's math type, then
// fn::convertElement's rules (float to int64 truncates; NaN and out-of-range give INT64_MIN).
template <class D, class S>
struct Convert {
  __device__ __forceinline__ D operator()(S v) const {
    using M = OpMath<S>;
    if constexpr (std::is_same_v<D, Half> || std::is_same_v<D, BFloat16>) {
      return D(static_cast<float>(static_cast<M>(v)));
    } else {
      return fn::convertElement<D>(static_cast<M>(v));
    }
  }
};

template <class T, class F>
struct UnaryFn {
  F f;
  __device__ __forceinline__ T operator()(T x) const { return static_cast<T>(f(static_cast<OpMath<T>>(x))); }
};

template <class T, class F>
struct BinaryFn {
  F f;
  __device__ __forceinline__ T operator()(T a, T b) const {
    return static_cast<T>(f(static_cast<OpMath<T>>(a), static_cast<OpMath<T>>(b)));
  }
};

// A Python scalar joins in the math type, unrounded to T, as in PyTorch.
template <class T, class F>
struct ScalarFn {
  F f;
  OpMath<T> s;
  bool scalarFirst;
  __device__ __forceinline__ T operator()(T a) const {
    const OpMath<T> x = static_cast<OpMath<T>>(a);
    return static_cast<T>(scalarFirst ? f(s, x) : f(x, s));
  }
};

// ---- kernels ----------------------------------------------------------------------------------------

template <class T>
__global__ void fillKernel(T* out, std::int64_t n, T value) {
  GPULAB_GRID_STRIDE(i, n) out[i] = value;
}

template <class T>
__global__ void whereKernel(T* out, const bool* cond, const T* a, const T* b, std::int64_t n) {
  GPULAB_GRID_STRIDE(i, n) out[i] = cond[i] ? a[i] : b[i];
}

template <class T>
__global__ void arangeKernel(T* out, std::int64_t n, double start, double step) {
  GPULAB_GRID_STRIDE(i, n) out[i] = static_cast<T>(start + step * static_cast<double>(i));
}

// out[i] = f(in[i]), contiguous.
template <class TO, class TI, class F>
__global__ void map1Kernel(F f, TO* out, const TI* in, std::int64_t n) {
  GPULAB_GRID_STRIDE(i, n) out[i] = f(in[i]);
}

// The same four elements at a time; the n % 4 tail goes to the grid's first threads.
template <class TO, class TI, class F>
__global__ void map1Vec4Kernel(F f, TO* out, const TI* in, std::int64_t n) {
  const std::int64_t nv = n / kVec;
  auto* o4 = reinterpret_cast<Vec4<TO>*>(out);
  const auto* i4 = reinterpret_cast<const Vec4<TI>*>(in);
  GPULAB_GRID_STRIDE(q, nv) {
    const Vec4<TI> x = i4[q];
    Vec4<TO> y;
#pragma unroll
    for (int e = 0; e < kVec; ++e) y.v[e] = f(x.v[e]);
    o4[q] = y;
  }
  const std::int64_t t = nv * kVec + blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x;
  if (t < n) out[t] = f(in[t]);
}

// out[i] = f(a[i], b[i]), contiguous.
template <class T, class F>
__global__ void map2Kernel(F f, T* out, const T* a, const T* b, std::int64_t n) {
  GPULAB_GRID_STRIDE(i, n) out[i] = f(a[i], b[i]);
}

template <class T, class F>
__global__ void map2Vec4Kernel(F f, T* out, const T* a, const T* b, std::int64_t n) {
  const std::int64_t nv = n / kVec;
  auto* o4 = reinterpret_cast<Vec4<T>*>(out);
  const auto* a4 = reinterpret_cast<const Vec4<T>*>(a);
  const auto* b4 = reinterpret_cast<const Vec4<T>*>(b);
  GPULAB_GRID_STRIDE(q, nv) {
    const Vec4<T> x = a4[q], y = b4[q];
    Vec4<T> z;
#pragma unroll
    for (int e = 0; e < kVec; ++e) z.v[e] = f(x.v[e], y.v[e]);
    o4[q] = z;
  }
  const std::int64_t t = nv * kVec + blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x;
  if (t < n) out[t] = f(a[t], b[t]);
}

// out (contiguous)[i] = f(a[oa], b[ob]): a and b strided views expanded to out's shape.
template <class T, class F>
__global__ void map2StridedKernel(F f, T* out, const T* a, const T* b, std::int64_t n, OffsetCalc calc) {
  GPULAB_GRID_STRIDE(i, n) {
    std::int64_t oa, ob;
    calc.offsets(i, oa, ob);
    out[i] = f(a[oa], b[ob]);
  }
}

// dst[od] = convert(src[os]), both strided.
template <class D, class S>
__global__ void copyStridedKernel(D* dst, const S* src, std::int64_t n, OffsetCalc calc) {
  const Convert<D, S> convert;
  GPULAB_GRID_STRIDE(i, n) {
    std::int64_t od, os;
    calc.offsets(i, od, os);
    dst[od] = convert(src[os]);
  }
}

// ---- launchers --------------------------------------------------------------------------------------

template <class TO, class TI, class F>
void launchMap1(const DeviceContext& c, F f, TO* out, const TI* in, std::int64_t n) {
  if constexpr (kVectorisable<TO> && kVectorisable<TI>) {
    if (n >= kVec && alignedForVec4(out) && alignedForVec4(in)) {
      map1Vec4Kernel<<<blocksFor((n + kVec - 1) / kVec, c), kThreads, 0, c.currentStream()>>>(f, out, in, n);
      GPULAB_CUDA_CHECK_LAUNCH();
      return;
    }
  }
  map1Kernel<<<blocksFor(n, c), kThreads, 0, c.currentStream()>>>(f, out, in, n);
  GPULAB_CUDA_CHECK_LAUNCH();
}

template <class T, class F>
void launchMap2(const DeviceContext& c, F f, T* out, const T* a, const T* b, std::int64_t n) {
  if constexpr (kVectorisable<T>) {
    if (n >= kVec && alignedForVec4(out) && alignedForVec4(a) && alignedForVec4(b)) {
      map2Vec4Kernel<<<blocksFor((n + kVec - 1) / kVec, c), kThreads, 0, c.currentStream()>>>(f, out, a, b, n);
      GPULAB_CUDA_CHECK_LAUNCH();
      return;
    }
  }
  map2Kernel<<<blocksFor(n, c), kThreads, 0, c.currentStream()>>>(f, out, a, b, n);
  GPULAB_CUDA_CHECK_LAUNCH();
}

}  // namespace

void CudaBackend::fill(const Tensor& out, double value) {
  const std::int64_t n = out.numel();
  if (n == 0) return;
  auto& c = ctx();
  dispatchWithBool(out.dtype(), "fill_", [&](auto tag) {
    using T = typename decltype(tag)::type;
    fillKernel<<<blocksFor(n, c), kThreads, 0, c.currentStream()>>>(out.data<T>(), n, static_cast<T>(value));
    GPULAB_CUDA_CHECK_LAUNCH();
  });
}

void CudaBackend::arange(const Tensor& out, double start, double step) {
  const std::int64_t n = out.numel();
  if (n == 0) return;
  auto& c = ctx();
  dispatchAll(out.dtype(), "arange", [&](auto tag) {
    using T = typename decltype(tag)::type;
    arangeKernel<<<blocksFor(n, c), kThreads, 0, c.currentStream()>>>(out.data<T>(), n, start, step);
    GPULAB_CUDA_CHECK_LAUNCH();
  });
}

void CudaBackend::copy(const Tensor& dst, const Tensor& src) {
  const std::int64_t n = dst.numel();
  if (n == 0) return;
  auto& c = ctx();
  const bool contiguous = dst.is_contiguous() && src.is_contiguous();
  if (contiguous && dst.dtype() == src.dtype()) {  // a plain copy: the copy engine's job
    GPULAB_CUDA_CHECK(cudaMemcpyAsync(dst.data_ptr(), src.data_ptr(), dst.nbytes(), cudaMemcpyDeviceToDevice, c.currentStream()));
    return;
  }
  const OffsetCalc calc = contiguous ? OffsetCalc{} : makeOffsetCalc(dst.sizes(), dst.strides(), src.strides());
  dispatchWithBool(dst.dtype(), "copy_", [&](auto dtag) {
    using D = typename decltype(dtag)::type;
    dispatchWithBool(src.dtype(), "copy_", [&](auto stag) {
      using S = typename decltype(stag)::type;
      if (contiguous) {
        launchMap1(c, Convert<D, S>{}, dst.data<D>(), src.data<S>(), n);
      } else {
        copyStridedKernel<<<blocksFor(n, c), kThreads, 0, c.currentStream()>>>(dst.data<D>(), src.data<S>(), n, calc);
        GPULAB_CUDA_CHECK_LAUNCH();
      }
    });
  });
}

void CudaBackend::unary(UnaryOp op, const Tensor& out, const Tensor& in) {
  const std::int64_t n = out.numel();
  if (n == 0) return;
  auto& c = ctx();
  fn::dispatchUnary(op, [&](auto f) {
    dispatchAll(in.dtype(), "unary op", [&](auto tag) {
      using T = typename decltype(tag)::type;
      launchMap1(c, UnaryFn<T, decltype(f)>{f}, out.data<T>(), in.data<T>(), n);
    });
  });
}

void CudaBackend::binary(BinaryOp op, const Tensor& out, const Tensor& a, const Tensor& b) {
  const std::int64_t n = out.numel();
  if (n == 0) return;
  auto& c = ctx();
  const bool contiguous = a.is_contiguous() && b.is_contiguous();
  const OffsetCalc calc = contiguous ? OffsetCalc{} : makeOffsetCalc(out.sizes(), a.strides(), b.strides());
  fn::dispatchBinary(op, [&](auto f) {
    dispatchAll(out.dtype(), "binary op", [&](auto tag) {
      using T = typename decltype(tag)::type;
      const BinaryFn<T, decltype(f)> fT{f};
      if (contiguous) {
        launchMap2(c, fT, out.data<T>(), a.data<T>(), b.data<T>(), n);
      } else {
        map2StridedKernel<<<blocksFor(n, c), kThreads, 0, c.currentStream()>>>(fT, out.data<T>(), a.data<T>(), b.data<T>(), n, calc);
        GPULAB_CUDA_CHECK_LAUNCH();
      }
    });
  });
}

void CudaBackend::binaryScalar(BinaryOp op, const Tensor& out, const Tensor& a, double s, bool scalarFirst) {
  const std::int64_t n = out.numel();
  if (n == 0) return;
  auto& c = ctx();
  fn::dispatchBinary(op, [&](auto f) {
    dispatchAll(out.dtype(), "binary op", [&](auto tag) {
      using T = typename decltype(tag)::type;
      launchMap1(c, ScalarFn<T, decltype(f)>{f, static_cast<OpMath<T>>(s), scalarFirst}, out.data<T>(), a.data<T>(), n);
    });
  });
}

void CudaBackend::where(const Tensor& out, const Tensor& cond, const Tensor& a, const Tensor& b) {
  const std::int64_t n = out.numel();
  if (n == 0) return;
  auto& c = ctx();
  dispatchWithBool(out.dtype(), "where", [&](auto tag) {
    using T = typename decltype(tag)::type;
    whereKernel<<<blocksFor(n, c), kThreads, 0, c.currentStream()>>>(out.data<T>(), cond.data<bool>(), a.data<T>(), b.data<T>(), n);
    GPULAB_CUDA_CHECK_LAUNCH();
  });
}

}  // namespace gpulab
