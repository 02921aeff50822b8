// GradScaler's fused check on the GPU (reference: amp/cpu.cpp): PyTorch's
// _amp_foreach_non_finite_check_and_unscale_cuda_ plus the zero count a lesson plots. For every
// gradient: count inf/NaN and exact zeros (before scaling), then g *= invScale in place, computed in
// OpMath<T> and rounded once on store -- the CPU's arithmetic, so results match it bit for bit.
//
// Shape: a model's gradients are many tensors, most of them small (biases, norms), so one launch per
// tensor would be all launch overhead. As PyTorch's multi_tensor_apply (and multiAdamKernel before
// the split by family), the pointers and sizes of up to kAmpTensors tensors of one dtype travel in the
// kernel's arguments, and the launch covers them all: the tensors are cut into chunks of kAmpChunk
// elements, numbered one after the other, and the blocks take chunks grid-stride -- a tensor of any
// size, and any mix of sizes, with a grid that fits the GPU. Each thread counts in registers; a block
// reduces its counts (blockReduce) and adds them to `counts` with one atomicAdd each, so nothing
// waits for the host: the counts stay on the device until GradScaler::step reads them, once.
// One launch per dtype present (and per kAmpTensors tensors of it), on the current stream.
//
// The 2- and 4-byte types move four elements per load and store when the tensor is aligned to it
// (chunks start at multiples of kAmpChunk, so only a tensor's last chunk has a tail done one by one);
// the kernel is bound by memory bandwidth, and 16-bit elements one at a time would halve it.
#include <cuda_runtime.h>

#include <vector>

#include "engine/core/dispatch.h"
#include "engine/core/errors.h"
#include "engine/kernels/cuda/cuda_backend.h"
#include "engine/kernels/cuda/launch.cuh"

namespace gpulab {

using namespace cuda;

namespace {

constexpr int kAmpTensors = 128;              // tensors a launch's arguments carry
constexpr std::int64_t kAmpChunk = 4096;      // elements a block takes at a time (16 per thread)
constexpr int kAmpBlocksPerSm = 8;            // 2048 threads per SM: enough loads in flight

template <class T>
struct NonFiniteArgs {
  int tensors = 0;
  T* data[kAmpTensors];
  std::int64_t n[kAmpTensors];
  std::int64_t firstChunk[kAmpTensors + 1];  // firstChunk[t]: the number of tensor t's first chunk
  unsigned char vec4[kAmpTensors];           // tensor t is aligned for Vec4 access
};
static_assert(sizeof(NonFiniteArgs<double>) < 4000, "kernel arguments are limited to 4 KiB");

// One element: classify, scale, store.
template <class T>
__device__ __forceinline__ void checkAndUnscale(T& x, OpMath<T> inv, long long& bad, long long& zero) {
  using M = OpMath<T>;
  const M v = static_cast<M>(x);
  bad += isfinite(v) ? 0 : 1;
  zero += v == M(0) ? 1 : 0;  // +0 and -0
  x = static_cast<T>(v * inv);
}

template <class T>
__global__ void nonFiniteCheckAndUnscaleKernel(NonFiniteArgs<T> a, OpMath<T> inv, std::int64_t* counts) {
  long long bad = 0, zero = 0;
  const std::int64_t chunks = a.firstChunk[a.tensors];
  int t = 0;
  for (std::int64_t c = blockIdx.x; c < chunks; c += gridDim.x) {
    while (a.firstChunk[t + 1] <= c) ++t;  // chunks only increase, so t only moves forward
    T* p = a.data[t];
    const std::int64_t begin = (c - a.firstChunk[t]) * kAmpChunk;
    const std::int64_t end = min(a.n[t], begin + kAmpChunk);
    std::int64_t tail = begin;
    if constexpr (kVectorisable<T>) {
      if (a.vec4[t]) {
        tail = begin + (end - begin) / kVec * kVec;
        for (std::int64_t i = begin + kVec * static_cast<std::int64_t>(threadIdx.x); i < tail; i += kVec * static_cast<std::int64_t>(blockDim.x)) {
          Vec4<T> v = *reinterpret_cast<const Vec4<T>*>(p + i);
#pragma unroll
          for (int k = 0; k < kVec; ++k) checkAndUnscale(v.v[k], inv, bad, zero);
          *reinterpret_cast<Vec4<T>*>(p + i) = v;
        }
      }
    }
    for (std::int64_t i = tail + threadIdx.x; i < end; i += blockDim.x) checkAndUnscale(p[i], inv, bad, zero);
  }
  // Every thread reaches the reductions (blockReduce synchronises the block).
  bad = blockReduce(bad, SumOp{}, 0LL);
  zero = blockReduce(zero, SumOp{}, 0LL);
  if (threadIdx.x == 0) {
    if (bad != 0) atomicAdd(reinterpret_cast<unsigned long long*>(counts), static_cast<unsigned long long>(bad));
    if (zero != 0) atomicAdd(reinterpret_cast<unsigned long long*>(counts + 1), static_cast<unsigned long long>(zero));
  }
}

}  // namespace

void CudaBackend::nonFiniteCheckAndUnscale(const std::vector<Tensor>& grads, const Tensor& counts, double invScale) {
  if (counts.dtype() != kInt64 || counts.numel() != 2 || !counts.is_contiguous()) {
    throw ValueError("nonFiniteCheckAndUnscale: counts must be a contiguous int64 tensor of 2 elements, got " +
                     dtypeName(counts.dtype()) + " " + shapeStr(counts.sizes()));
  }
  // The dtypes present, in order of first appearance; everything refused before anything is launched.
  std::vector<DType> dtypes;
  for (const Tensor& g : grads) {
    if (!isFloatingPoint(g.dtype())) throwNotImplementedFor("_amp_foreach_non_finite_check_and_unscale_cuda_", g.dtype());
    if (!g.is_contiguous()) throw ValueError("nonFiniteCheckAndUnscale: gradients must be contiguous");
    bool seen = false;
    for (DType d : dtypes) seen = seen || d == g.dtype();
    if (!seen) dtypes.push_back(g.dtype());
  }
  auto& c = ctx();
  const unsigned maxBlocks = static_cast<unsigned>(c.multiprocessorCount() * kAmpBlocksPerSm);
  std::int64_t* countsPtr = counts.data<std::int64_t>();

  for (DType dtype : dtypes) {
    dispatchFloating(dtype, "_amp_foreach_non_finite_check_and_unscale_cuda_", [&](auto tag) {
      using T = typename decltype(tag)::type;
      const OpMath<T> inv = static_cast<OpMath<T>>(invScale);
      NonFiniteArgs<T> args;
      args.firstChunk[0] = 0;
      auto launch = [&] {
        const std::int64_t chunks = args.firstChunk[args.tensors];
        if (chunks == 0) return;
        const unsigned blocks = static_cast<unsigned>(std::min<std::int64_t>(chunks, maxBlocks));
        nonFiniteCheckAndUnscaleKernel<T><<<blocks, kThreads, 0, c.currentStream()>>>(args, inv, countsPtr);
        GPULAB_CUDA_CHECK_LAUNCH();
        args.tensors = 0;
      };
      for (const Tensor& g : grads) {
        const std::int64_t n = g.numel();
        if (g.dtype() != dtype || n == 0) continue;
        if (args.tensors == kAmpTensors) launch();
        const int k = args.tensors++;
        args.data[k] = g.data<T>();
        args.n[k] = n;
        args.vec4[k] = kVectorisable<T> && alignedForVec4(args.data[k]) ? 1 : 0;
        args.firstChunk[k + 1] = args.firstChunk[k] + (n + kAmpChunk - 1) / kAmpChunk;
      }
      launch();
    });
  }
}

}  // namespace gpulab
