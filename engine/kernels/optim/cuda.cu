// Fused optimizer steps on the GPU (reference: optim/cpu.cpp): SGD and Adam/AdamW, one tensor a launch
// or many small tensors in one (PyTorch's multi_tensor_apply). The update formulas are
// fn::SgdUpdateT / fn::AdamUpdateT (engine/kernels/functors.h), the code the CPU runs, applied in
// OpMath<T> -- float for float32 and the 16-bit types, double for float64 -- with the state tensors
// (momentum buffer, exp_avg, exp_avg_sq, max_exp_avg_sq) in the parameter's dtype: each element is
// loaded, updated in the math type and rounded once on store. For float32 this is the float
// arithmetic the engine always did, bit for bit.
#include <cuda_runtime.h>

#include <algorithm>
#include <vector>

#include "engine/core/dispatch.h"
#include "engine/kernels/cuda/cuda_backend.h"
#include "engine/kernels/cuda/launch.cuh"

namespace gpulab {

using namespace cuda;

namespace {

// One element of SGD: load, update in M, store. buf is null without momentum.
template <class T, class M>
__device__ __forceinline__ void sgdElement(const fn::SgdUpdateT<M>& u, T& p, T g, T* buf) {
  M pv = static_cast<M>(p);
  M bv = buf ? static_cast<M>(*buf) : M(0);
  u(pv, static_cast<M>(g), buf ? &bv : nullptr);
  p = static_cast<T>(pv);
  if (buf) *buf = static_cast<T>(bv);
}

// One element of Adam: load, update in M, store. vmax (amsgrad's max_exp_avg_sq) is null without amsgrad.
template <class T, class M>
__device__ __forceinline__ void adamElement(const fn::AdamUpdateT<M>& u, T& p, T g, T& m, T& v, T* vmax) {
  M pv = static_cast<M>(p), mv = static_cast<M>(m), vv = static_cast<M>(v);
  M vm = vmax ? static_cast<M>(*vmax) : M(0);
  u(pv, static_cast<M>(g), mv, vv, vmax ? &vm : nullptr);
  p = static_cast<T>(pv);
  m = static_cast<T>(mv);
  v = static_cast<T>(vv);
  if (vmax) *vmax = static_cast<T>(vm);
}

template <class T>
__global__ void sgdKernel(fn::SgdUpdateT<OpMath<T>> u, T* p, const T* g, T* buf, std::int64_t n) {
  GPULAB_GRID_STRIDE(i, n) sgdElement(u, p[i], g[i], buf ? buf + i : nullptr);
}

template <class T>
__global__ void adamKernel(fn::AdamUpdateT<OpMath<T>> update, T* p, const T* g, T* m, T* v, T* vmax, std::int64_t n) {
  const fn::AdamUpdateT<OpMath<T>> u = update.resolved();  // capturable: the step count read here, on the device
  GPULAB_GRID_STRIDE(i, n) adamElement(u, p[i], g[i], m[i], v[i], vmax ? vmax + i : nullptr);
}

// Many small tensors of one dtype in one launch (PyTorch's multi_tensor_apply): the tensors' pointers
// travel in the kernel's arguments, and block b updates chunk blockChunk[b] of tensor blockTensor[b].
constexpr int kMultiTensors = 16, kMultiBlocks = 64;
constexpr std::int64_t kMultiChunk = 8192;  // elements a block updates
template <class T>
struct MultiAdamArgs {
  int tensors = 0, blocks = 0;
  T* p[kMultiTensors];
  const T* g[kMultiTensors];
  T* m[kMultiTensors];
  T* v[kMultiTensors];
  T* vmax[kMultiTensors];  // amsgrad's max_exp_avg_sq, or null
  std::int64_t n[kMultiTensors];
  fn::AdamUpdateT<OpMath<T>> update[kMultiTensors];
  unsigned char blockTensor[kMultiBlocks];
  int blockChunk[kMultiBlocks];
};
static_assert(sizeof(MultiAdamArgs<double>) < 4000, "kernel arguments are limited to 4 KiB");

template <class T>
__global__ void multiAdamKernel(MultiAdamArgs<T> a) {
  const int t = a.blockTensor[blockIdx.x];
  const std::int64_t begin = static_cast<std::int64_t>(a.blockChunk[blockIdx.x]) * kMultiChunk;
  const std::int64_t end = min(a.n[t], begin + kMultiChunk);
  const fn::AdamUpdateT<OpMath<T>> u = a.update[t].resolved();
  T* p = a.p[t];
  const T* g = a.g[t];
  T* m = a.m[t];
  T* v = a.v[t];
  T* vmax = a.vmax[t];
  for (std::int64_t i = begin + threadIdx.x; i < end; i += blockDim.x) adamElement(u, p[i], g[i], m[i], v[i], vmax ? vmax + i : nullptr);
}

}  // namespace

void CudaBackend::sgdStep(const Tensor& param, const Tensor& grad, const Tensor* buf, const SgdHyper& h) {
  const std::int64_t n = param.numel();
  if (n == 0) return;
  auto& c = ctx();
  dispatchFloating(param.dtype(), "sgd_step", [&](auto tag) {
    using T = typename decltype(tag)::type;
    sgdKernel<<<blocksFor(n, c), kThreads, 0, c.currentStream()>>>(fn::makeSgdUpdate<OpMath<T>>(h, buf != nullptr), param.data<T>(),
                                                                    grad.data<T>(), buf ? buf->data<T>() : nullptr, n);
    GPULAB_CUDA_CHECK_LAUNCH();
  });
}

void CudaBackend::adamStep(const Tensor& param, const Tensor& grad, const Tensor& expAvg, const Tensor& expAvgSq,
                           const Tensor* maxExpAvgSq, const AdamHyper& h) {
  const std::int64_t n = param.numel();
  if (n == 0) return;
  auto& c = ctx();
  dispatchFloating(param.dtype(), "adam_step", [&](auto tag) {
    using T = typename decltype(tag)::type;
    adamKernel<<<blocksFor(n, c), kThreads, 0, c.currentStream()>>>(
        fn::makeAdamUpdate<OpMath<T>>(h), param.data<T>(), grad.data<T>(), expAvg.data<T>(), expAvgSq.data<T>(),
        maxExpAvgSq ? maxExpAvgSq->data<T>() : nullptr, n);
    GPULAB_CUDA_CHECK_LAUNCH();
  });
}

void CudaBackend::adamSteps(const std::vector<AdamTensors>& items) {
  auto& c = ctx();
  // One pass per dtype present: a launch carries tensors of one dtype.
  std::vector<DType> dtypes;
  for (const AdamTensors& t : items)
    if (std::find(dtypes.begin(), dtypes.end(), t.param->dtype()) == dtypes.end()) dtypes.push_back(t.param->dtype());
  for (const DType dtype : dtypes) {
    dispatchFloating(dtype, "adam_step", [&](auto tag) {
      using T = typename decltype(tag)::type;
      MultiAdamArgs<T> args;
      auto launch = [&] {
        if (args.blocks == 0) return;
        multiAdamKernel<<<static_cast<unsigned>(args.blocks), kThreads, 0, c.currentStream()>>>(args);
        GPULAB_CUDA_CHECK_LAUNCH();
        args = MultiAdamArgs<T>{};
      };
      for (const AdamTensors& t : items) {
        if (t.param->dtype() != dtype) continue;
        const std::int64_t n = t.param->numel();
        const std::int64_t chunks = (n + kMultiChunk - 1) / kMultiChunk;
        if (n == 0) continue;
        if (chunks > kMultiBlocks / 4) {  // a big tensor: its own launch costs nothing in comparison
          adamStep(*t.param, *t.grad, *t.expAvg, *t.expAvgSq, t.maxExpAvgSq, t.hyper);
          continue;
        }
        if (args.tensors == kMultiTensors || args.blocks + chunks > kMultiBlocks) launch();
        const int k = args.tensors++;
        args.p[k] = t.param->data<T>();
        args.g[k] = t.grad->data<T>();
        args.m[k] = t.expAvg->data<T>();
        args.v[k] = t.expAvgSq->data<T>();
        args.vmax[k] = t.maxExpAvgSq ? t.maxExpAvgSq->data<T>() : nullptr;
        args.n[k] = n;
        args.update[k] = fn::makeAdamUpdate<OpMath<T>>(t.hyper);
        for (std::int64_t chunk = 0; chunk < chunks; ++chunk) {
          args.blockTensor[args.blocks] = static_cast<unsigned char>(k);
          args.blockChunk[args.blocks] = static_cast<int>(chunk);
          ++args.blocks;
        }
      }
      launch();
    });
  }
}

}  // namespace gpulab
