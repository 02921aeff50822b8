#pragma once
// What every CUDA kernel family shares: launch shapes, the strided-offset calculator and the one block
// reduction. Included by engine/kernels/<family>/cuda.cu only (it is CUDA source).
//
// Shapes of the kernels:
// - Elementwise kernels are grid-stride loops (kThreads = 256 threads, at most 32 blocks per SM), so
//   one launch covers any size without a huge grid (blocksFor).
// - Row-wise kernels (softmax, reductions over a contiguous axis, losses) give one block to a row and
//   reduce with blockReduce: warp shuffles, then one value per warp through shared memory. A fixed
//   block size gives a fixed summation order, so results do not depend on scheduling.
// - A few long rows (a whole-tensor sum) are split over several blocks (splitRowsInto), whose partial
//   results a second launch reduces; more rows than gridDim.x holds are launched in chunks
//   (forRowChunks).
// Every launch is followed by GPULAB_CUDA_CHECK_LAUNCH() (engine/kernels/cuda/cuda_check.h), and runs
// on the calling thread's current stream of the device (ctx().currentStream()).
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <limits>
#include <string>

#include "engine/core/errors.h"
#include "engine/core/tensor.h"
#include "engine/kernels/cuda/cuda_check.h"
#include "engine/kernels/cuda/cuda_context.h"
#include "engine/kernels/strided.h"

namespace gpulab::cuda {

constexpr int kThreads = 256;  // threads per block of the elementwise and row-wise kernels
constexpr int kWarp = 32;
constexpr int kMaxDims = 8;    // strided dimensions an OffsetCalc carries (after coalescing)

// Blocks for a grid-stride loop over n elements.
inline int blocksFor(std::int64_t n, const DeviceContext& ctx) {
  const std::int64_t wanted = (n + kThreads - 1) / kThreads;
  return static_cast<int>(std::max<std::int64_t>(1, std::min<std::int64_t>(wanted, ctx.multiprocessorCount() * 32LL)));
}

// Threads for a block that owns a row of `cols`: rows shorter than kThreads use fewer (a multiple of
// the warp size, as blockReduce requires).
inline unsigned rowThreads(std::int64_t cols) {
  return static_cast<unsigned>(std::min<std::int64_t>(kThreads, std::max<std::int64_t>(kWarp, (cols + kWarp - 1) / kWarp * kWarp)));
}

// How many blocks share each of `rows` rows of length k: one, unless the rows are too few to fill the
// GPU and long enough to split (a whole-tensor reduction), then up to 1024 chunks of >= 8192.
inline std::int64_t splitRowsInto(std::int64_t rows, std::int64_t k, const DeviceContext& ctx) {
  const std::int64_t wantBlocks = 4LL * ctx.multiprocessorCount();
  if (rows >= wantBlocks || k < 2 * 8192) return 1;
  return std::clamp<std::int64_t>(std::min(k / 8192, (wantBlocks + rows - 1) / rows), 1, 1024);
}

// Row-wise kernels give one block to a row; gridDim.x stops at 2^31 - 1, so more rows than that
// (8 GiB of one-column floats: an 80 GB card holds it) are launched in chunks of rows:
// launch(firstRow, rowCount) once per chunk.
constexpr std::int64_t kMaxRowsPerLaunch = std::int64_t{1} << 30;
template <class Launch>
void forRowChunks(std::int64_t rows, Launch&& launch) {
  for (std::int64_t first = 0; first < rows; first += kMaxRowsPerLaunch) {
    launch(first, static_cast<unsigned>(std::min(kMaxRowsPerLaunch, rows - first)));
  }
}

// for (i over [0, n)) spread over the whole grid.
#define GPULAB_GRID_STRIDE(i, n)                                                                   \
  for (std::int64_t i = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x; i < (n); \
       i += static_cast<std::int64_t>(blockDim.x) * gridDim.x)

// Maps a linear index of `sizes` to element offsets in up to two strided tensors.
struct OffsetCalc {
  int ndim = 0;
  std::int64_t sizes[kMaxDims];
  std::int64_t strides[2][kMaxDims];
  __device__ void offsets(std::int64_t linear, std::int64_t& o0, std::int64_t& o1) const {
    o0 = 0;
    o1 = 0;
    for (int d = ndim - 1; d >= 0; --d) {
      const std::int64_t idx = linear % sizes[d];
      linear /= sizes[d];
      o0 += idx * strides[0][d];
      o1 += idx * strides[1][d];
    }
  }
};

inline OffsetCalc makeOffsetCalc(const Shape& sizes, const Shape& s0, const Shape& s1) {
  const detail::CoalescedDims dims = detail::coalesceDims(sizes, s0, s1);
  if (dims.sizes.size() > kMaxDims) {
    throw NotImplementedError("CUDA kernels support at most " + std::to_string(kMaxDims) +
                              " strided dimensions that cannot be merged (this view has " +
                              std::to_string(dims.sizes.size()) + "); call .contiguous() first");
  }
  OffsetCalc c;
  c.ndim = static_cast<int>(dims.sizes.size());
  for (int d = 0; d < c.ndim; ++d) {
    c.sizes[d] = dims.sizes[static_cast<std::size_t>(d)];
    c.strides[0][d] = dims.strides[0][static_cast<std::size_t>(d)];
    c.strides[1][d] = dims.strides[1][static_cast<std::size_t>(d)];
  }
  return c;
}

// ---- the block reduction -------------------------------------------------------------------------

// A value and where it was found (argmax). Ties and NaN are the combining op's business.
template <class T>
struct ValueIndex {
  T value;
  std::int64_t index;
};

// Warp shuffles of the types blockReduce combines: arithmetic types, and ValueIndex member by member.
template <class T>
__device__ __forceinline__ T shuffleDown(T v, int offset) {
  return __shfl_down_sync(0xffffffffu, v, offset);
}
template <class T>
__device__ __forceinline__ ValueIndex<T> shuffleDown(ValueIndex<T> v, int offset) {
  return {shuffleDown(v.value, offset), shuffleDown(v.index, offset)};
}

// Combining ops. Floating addition is not associative: blockReduce combines in an order fixed by the
// block size alone (shuffle tree, then warp order), so a result never depends on scheduling.
struct SumOp {
  template <class T>
  __device__ __forceinline__ T operator()(T a, T b) const { return a + b; }
};
// fmax's rule: a NaN operand is ignored (the row-wise max that softmax subtracts).
struct MaxOp {
  template <class T>
  __device__ __forceinline__ T operator()(T a, T b) const { return (b != b || a > b) ? a : b; }
};

// Reduces v over the x dimension of the block with `op`; `identity` is op's neutral element (what
// threads without data contribute). Every thread of the block must call it, and blockDim.x must be a
// multiple of 32 (at most 1024). The result is valid in thread 0 only (blockAllReduce gives it to all).
// It synchronises the block, so it may be called several times in a kernel.
template <class T, class Op>
__device__ T blockReduce(T v, Op op, T identity) {
  __shared__ T partial[32];
  for (int off = kWarp / 2; off > 0; off >>= 1) v = op(v, shuffleDown(v, off));
  const int lane = threadIdx.x % kWarp, warp = threadIdx.x / kWarp;
  if (lane == 0) partial[warp] = v;
  __syncthreads();
  v = threadIdx.x < blockDim.x / kWarp ? partial[lane] : identity;
  if (warp == 0)
    for (int off = kWarp / 2; off > 0; off >>= 1) v = op(v, shuffleDown(v, off));
  __syncthreads();  // partial may be reused by the next call
  return v;
}

// blockReduce's result in every thread of the block.
template <class T, class Op>
__device__ T blockAllReduce(T v, Op op, T identity) {
  __shared__ T result;
  v = blockReduce(v, op, identity);
  if (threadIdx.x == 0) result = v;
  __syncthreads();
  v = result;
  __syncthreads();
  return v;
}

// MaxOp's identity for floating types: -inf, as the CPU reference starts its row maximum.
template <class T>
__device__ __forceinline__ T negativeInfinity() {
  return -std::numeric_limits<T>::infinity();
}

// ---- vectorised contiguous access ----------------------------------------------------------------

// Four elements loaded or stored at once (8 bytes for the 16-bit types, 16 for float): elementwise
// kernels use it on the contiguous path when every pointer is aligned to it.
template <class T>
struct alignas(4 * sizeof(T)) Vec4 {
  T v[4];
};
constexpr int kVec = 4;

// Types whose Vec4 is one hardware load (8 or 16 bytes).
template <class T>
constexpr bool kVectorisable = sizeof(T) == 2 || sizeof(T) == 4;

template <class T>
inline bool alignedForVec4(const T* p) {
  return reinterpret_cast<std::uintptr_t>(p) % sizeof(Vec4<T>) == 0;
}

}  // namespace gpulab::cuda
