// Reductions on the GPU (reference: reduce/cpu.cpp): sum, and max with argmax, over the middle axis
// of a tensor viewed as (outer, k, inner). Elements are loaded into OpMath<T> and accumulated there
// (float for float32 and the 16-bit types, double for float64, int64 for int64), rounded once on
// store. The CPU reference accumulates floating sums in double, so sums differ from it by rounding
// (a tree of float additions against a sequential double sum); maxima and argmax match exactly.
//
// Three shapes, by where the reduced axis lies:
// - inner == 1 (contiguous rows): a block per row, blockReduce over it; a few long rows (a
//   whole-tensor reduction) are split over several blocks whose partial results, kept in OpMath<T>,
//   a second launch reduces.
// - a sum over a strided axis with too few outputs to fill the GPU (a bias gradient): 32 columns a
//   block, the axis split over 8 rows of threads (sumColumnsSplitKernel).
// - otherwise one thread per output element walks the axis, so neighbouring threads read
//   neighbouring addresses.
#include <cuda_runtime.h>

#include <limits>
#include <type_traits>

#include "engine/core/dispatch.h"
#include "engine/kernels/cuda/cuda_backend.h"
#include "engine/kernels/cuda/launch.cuh"
#include "engine/memory/memory_events.h"

namespace gpulab {

using namespace cuda;

namespace {

// NaN wins; ties go to the lower index (PyTorch returns the first maximum). A strict total order on
// (value, index), so any reduction order gives the same winner.
template <class A>
__device__ __forceinline__ bool betterMax(A v, std::int64_t j, A best, std::int64_t bestJ) {
  if (v != v) return !(best != best) || j < bestJ;
  if (best != best) return false;
  return v > best || (v == best && j < bestJ);
}

struct ArgMaxOp {
  template <class A>
  __device__ __forceinline__ ValueIndex<A> operator()(ValueIndex<A> x, ValueIndex<A> y) const {
    return betterMax(y.value, y.index, x.value, x.index) ? y : x;
  }
};

// What a thread with no element contributes to an argmax: loses to every real element.
template <class A>
__device__ __forceinline__ ValueIndex<A> argMaxIdentity() {
  if constexpr (std::is_floating_point_v<A>) return {negativeInfinity<A>(), std::numeric_limits<std::int64_t>::max()};
  else return {std::numeric_limits<A>::lowest(), std::numeric_limits<std::int64_t>::max()};
}

// Reductions over a contiguous axis (inner == 1). Block b reduces chunk (b % chunksPerRow) of row
// (b / chunksPerRow): with one chunk per row a block walks its whole row; a long row with few rows is
// split over many blocks, whose partial results (TOut = OpMath) a second launch reduces. `inIdx`
// carries the indices of such partials (null: the position in the row is the index).
template <class TIn, class TOut>
__global__ void reduceChunksKernel(ReduceOp op, TOut* out, std::int64_t* outIdx, const TIn* in, const std::int64_t* inIdx,
                                   std::int64_t k, std::int64_t chunk, std::int64_t chunksPerRow) {
  using A = OpMath<TIn>;
  const std::int64_t row = blockIdx.x / chunksPerRow, part = blockIdx.x % chunksPerRow;
  const std::int64_t begin = part * chunk, end = min(k, begin + chunk);
  const TIn* base = in + row * k;
  const std::int64_t* baseIdx = inIdx ? inIdx + row * k : nullptr;
  if (op == ReduceOp::Sum) {
    A acc = A(0);
    for (std::int64_t j = begin + threadIdx.x; j < end; j += blockDim.x) acc += static_cast<A>(base[j]);
    acc = blockReduce(acc, SumOp{}, A(0));
    if (threadIdx.x == 0) out[blockIdx.x] = static_cast<TOut>(acc);
    return;
  }
  ValueIndex<A> best = argMaxIdentity<A>();
  for (std::int64_t j = begin + threadIdx.x; j < end; j += blockDim.x) {
    const A v = static_cast<A>(base[j]);
    const std::int64_t at = baseIdx ? baseIdx[j] : j;
    if (betterMax(v, at, best.value, best.index)) best = {v, at};
  }
  best = blockReduce(best, ArgMaxOp{}, argMaxIdentity<A>());
  if (threadIdx.x == 0) {
    out[blockIdx.x] = static_cast<TOut>(best.value);
    if (outIdx) outIdx[blockIdx.x] = best.index;
  }
}

// Sums over a strided axis when there are too few outputs to fill the GPU with one thread each (a
// bias gradient: 4096 columns summed over 4096 rows). A block takes 32 neighbouring columns and
// splits the axis over its 8 rows of threads, which then add their partial sums in a fixed order.
constexpr int kSplitColumns = 32, kSplitRows = 8;
template <class T>
__global__ void sumColumnsSplitKernel(T* out, const T* in, std::int64_t k, std::int64_t inner) {
  using A = OpMath<T>;
  __shared__ A partial[kSplitRows][kSplitColumns + 1];
  const std::int64_t o = blockIdx.y, x = blockIdx.x * static_cast<std::int64_t>(kSplitColumns) + threadIdx.x;
  A acc = A(0);
  if (x < inner) {
    const T* base = in + o * k * inner + x;
    for (std::int64_t j = threadIdx.y; j < k; j += kSplitRows) acc += static_cast<A>(base[j * inner]);
  }
  partial[threadIdx.y][threadIdx.x] = acc;
  __syncthreads();
  if (threadIdx.y == 0 && x < inner) {
    A sum = A(0);
    for (int r = 0; r < kSplitRows; ++r) sum += partial[r][threadIdx.x];
    out[o * inner + x] = static_cast<T>(sum);
  }
}

// One thread per output element (inner > 1): walks the reduced axis with stride `inner`.
template <class T>
__global__ void reduceStridedKernel(ReduceOp op, T* out, std::int64_t* indices, const T* in, std::int64_t outer,
                                    std::int64_t k, std::int64_t inner) {
  using A = OpMath<T>;
  GPULAB_GRID_STRIDE(i, outer * inner) {
    const std::int64_t o = i / inner, x = i % inner;
    const T* base = in + o * k * inner + x;
    if (op == ReduceOp::Sum) {
      A acc = A(0);
      for (std::int64_t j = 0; j < k; ++j) acc += static_cast<A>(base[j * inner]);
      out[i] = static_cast<T>(acc);
    } else {
      A best = static_cast<A>(base[0]);
      std::int64_t bestJ = 0;
      for (std::int64_t j = 1; j < k; ++j) {
        const A v = static_cast<A>(base[j * inner]);
        if (betterMax(v, j, best, bestJ)) {
          best = v;
          bestJ = j;
        }
      }
      out[i] = static_cast<T>(best);
      if (indices) indices[i] = bestJ;
    }
  }
}

}  // namespace

void CudaBackend::reduce(ReduceOp op, const Tensor& out, const Tensor* indices, const Tensor& in, std::int64_t outer,
                         std::int64_t k, std::int64_t inner) {
  if (outer * inner == 0) return;
  if (k == 0) {  // an empty sum
    fill(out, 0.0);
    return;
  }
  auto& c = ctx();
  std::int64_t* idx = indices ? indices->data<std::int64_t>() : nullptr;
  dispatchAll(in.dtype(), op == ReduceOp::Sum ? "sum" : "max", [&](auto tag) {
    using T = typename decltype(tag)::type;
    using A = OpMath<T>;
    if (inner == 1) {
      const std::int64_t chunks = splitRowsInto(outer, k, c);
      if (chunks == 1) {
        forRowChunks(outer, [&](std::int64_t first, unsigned count) {
          reduceChunksKernel<<<count, kThreads, 0, c.currentStream()>>>(op, out.data<T>() + first, idx ? idx + first : nullptr,
                                                                        in.data<T>() + first * k, nullptr, k, k, 1);
          GPULAB_CUDA_CHECK_LAUNCH();
        });
        return;
      }
      // Few long rows: partial results of `chunks` blocks a row, in the math type, then one block a
      // row over them.
      Tensor partial, partialIdx;
      {
        MemoryCategoryScope scope(MemoryCategory::Workspace);
        partial = Tensor::empty({outer * chunks}, dtypeOf<A>(), in.device());
        if (op != ReduceOp::Sum) partialIdx = Tensor::empty({outer * chunks}, kInt64, in.device());
      }
      std::int64_t* pIdx = partialIdx.defined() ? partialIdx.data<std::int64_t>() : nullptr;
      const std::int64_t chunk = (k + chunks - 1) / chunks;
      reduceChunksKernel<<<static_cast<unsigned>(outer * chunks), kThreads, 0, c.currentStream()>>>(
          op, partial.data<A>(), pIdx, in.data<T>(), nullptr, k, chunk, chunks);
      GPULAB_CUDA_CHECK_LAUNCH();
      reduceChunksKernel<<<static_cast<unsigned>(outer), kThreads, 0, c.currentStream()>>>(
          op, out.data<T>(), idx, partial.data<A>(), pIdx, chunks, chunks, 1);
      GPULAB_CUDA_CHECK_LAUNCH();
    } else if (op == ReduceOp::Sum && k >= 64 && outer * inner < 4LL * kThreads * c.multiprocessorCount() && outer <= 65535) {
      const dim3 grid(static_cast<unsigned>((inner + kSplitColumns - 1) / kSplitColumns), static_cast<unsigned>(outer));
      sumColumnsSplitKernel<<<grid, dim3(kSplitColumns, kSplitRows), 0, c.currentStream()>>>(out.data<T>(), in.data<T>(), k, inner);
      GPULAB_CUDA_CHECK_LAUNCH();
    } else {
      reduceStridedKernel<<<blocksFor(outer * inner, c), kThreads, 0, c.currentStream()>>>(op, out.data<T>(), idx, in.data<T>(),
                                                                                            outer, k, inner);
      GPULAB_CUDA_CHECK_LAUNCH();
    }
  });
}

}  // namespace gpulab
