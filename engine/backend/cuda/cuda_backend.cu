// The CUDA backend. Every kernel here has its reference in engine/backend/cpu_backend.cpp and shares
// its per-element math with it through engine/backend/functors.h; tests compare the two.
//
// Shapes of the kernels: elementwise kernels are grid-stride loops (256 threads, at most 32 blocks
// per SM), so one launch covers any size without a huge grid. Row-wise kernels (softmax, reductions
// over a contiguous axis) give one block to a row and reduce with warp shuffles; reductions over a
// strided axis give one thread to an output element and walk the axis, so neighbouring threads read
// neighbouring addresses. Every launch is followed by GPULAB_CUDA_CHECK_LAUNCH().
#include <cuda_runtime.h>

#include <algorithm>
#include <cfloat>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "engine/backend/backend.h"
#include "engine/backend/strided.h"
#include "engine/backend/cuda/cuda_check.h"
#include "engine/backend/cuda/cuda_context.h"
#include "engine/core/errors.h"
#include "engine/memory/memory_events.h"
#include "engine/runtime/cuda_runtime.h"

namespace gpulab {
namespace {

constexpr int kThreads = 256;
constexpr int kMaxDims = 8;

int blocksFor(std::int64_t n, const cuda::DeviceContext& ctx) {
  const std::int64_t wanted = (n + kThreads - 1) / kThreads;
  return static_cast<int>(std::max<std::int64_t>(1, std::min<std::int64_t>(wanted, ctx.multiprocessorCount() * 32LL)));
}

// How many blocks share each of `rows` rows of length k: one, unless the rows are too few to fill the
// GPU and long enough to split (a whole-tensor reduction), then up to 1024 chunks of >= 8192.
std::int64_t splitRowsInto(std::int64_t rows, std::int64_t k, const cuda::DeviceContext& ctx) {
  const std::int64_t wantBlocks = 4LL * ctx.multiprocessorCount();
  if (rows >= wantBlocks || k < 2 * 8192) return 1;
  return std::clamp<std::int64_t>(std::min(k / 8192, (wantBlocks + rows - 1) / rows), 1, 1024);
}

// Row-wise kernels give one block to a row; gridDim.x stops at 2^31 - 1, so more rows than that
// (8 GiB of one-column floats: an 80 GB card holds it) are launched in chunks of rows.
constexpr std::int64_t kMaxRowsPerLaunch = std::int64_t{1} << 30;
template <class Launch>
void forRowChunks(std::int64_t rows, Launch&& launch) {
  for (std::int64_t first = 0; first < rows; first += kMaxRowsPerLaunch) {
    launch(first, static_cast<unsigned>(std::min(kMaxRowsPerLaunch, rows - first)));
  }
}

#define GRID_STRIDE(i, n) \
  for (std::int64_t i = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x; i < (n); i += static_cast<std::int64_t>(blockDim.x) * gridDim.x)

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

OffsetCalc makeOffsetCalc(const Shape& sizes, const Shape& s0, const Shape& s1) {
  const detail::CoalescedDims dims = detail::coalesceDims(sizes, s0, s1);
  if (dims.sizes.size() > kMaxDims) {
    throw NotImplementedError("CUDA kernels support at most " + std::to_string(kMaxDims) +
                              " strided dimensions that cannot be merged (this view has " + std::to_string(dims.sizes.size()) +
                              "); call .contiguous() first");
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

template <class F>
void dispatchDType(DType dtype, const char* what, F&& f) {
  switch (dtype) {
    case DType::Float32: return f(float{});
    case DType::Int64: return f(std::int64_t{});
    default: throw NotImplementedError(std::string(what) + " is not implemented for dtype " + dtypeName(dtype) + " on CUDA");
  }
}

// ---- elementwise ---------------------------------------------------------------------------------

template <class T>
__global__ void fillKernel(T* out, std::int64_t n, T value) {
  GRID_STRIDE(i, n) out[i] = value;
}

template <class T>
__global__ void arangeKernel(T* out, std::int64_t n, double start, double step) {
  GRID_STRIDE(i, n) out[i] = static_cast<T>(start + step * static_cast<double>(i));
}

template <class D, class S>
__global__ void copyKernel(D* dst, const S* src, std::int64_t n, OffsetCalc calc, bool contiguous) {
  GRID_STRIDE(i, n) {
    if (contiguous) {
      dst[i] = fn::convertElement<D>(src[i]);
    } else {
      std::int64_t od, os;
      calc.offsets(i, od, os);
      dst[od] = fn::convertElement<D>(src[os]);
    }
  }
}

template <class F, class T>
__global__ void unaryKernel(F f, T* out, const T* in, std::int64_t n) {
  GRID_STRIDE(i, n) out[i] = f(in[i]);
}

template <class F, class T>
__global__ void binaryContiguousKernel(F f, T* out, const T* a, const T* b, std::int64_t n) {
  GRID_STRIDE(i, n) out[i] = f(a[i], b[i]);
}

template <class F, class T>
__global__ void binaryStridedKernel(F f, T* out, const T* a, const T* b, std::int64_t n, OffsetCalc calc) {
  GRID_STRIDE(i, n) {
    std::int64_t oa, ob;
    calc.offsets(i, oa, ob);
    out[i] = f(a[oa], b[ob]);
  }
}

template <class F, class T>
__global__ void binaryScalarKernel(F f, T* out, const T* a, T s, bool scalarFirst, std::int64_t n) {
  GRID_STRIDE(i, n) out[i] = scalarFirst ? f(s, a[i]) : f(a[i], s);
}

// ---- reductions ----------------------------------------------------------------------------------

template <class T>
__device__ T warpSum(T v) {
  for (int off = 16; off > 0; off >>= 1) v += __shfl_down_sync(0xffffffffu, v, off);
  return v;
}

// Sum of `v` over the block; the result is valid in thread 0.
template <class T>
__device__ T blockSum(T v) {
  __shared__ T partial[32];
  v = warpSum(v);
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  if (lane == 0) partial[warp] = v;
  __syncthreads();
  v = threadIdx.x < blockDim.x / 32 ? partial[lane] : T(0);
  if (warp == 0) v = warpSum(v);
  __syncthreads();
  return v;
}

template <class T>
__device__ bool betterMax(T v, std::int64_t j, T best, std::int64_t bestJ) {
  // NaN wins; ties go to the lower index (PyTorch returns the first maximum).
  if (v != v) return !(best != best) || j < bestJ;
  if (best != best) return false;
  return v > best || (v == best && j < bestJ);
}

// Reductions over a contiguous axis (inner == 1). Block b reduces chunk (b % chunksPerRow) of row
// (b / chunksPerRow): with one chunk per row a block walks its whole row; a long row with few rows
// (a whole-tensor sum or max) is split over many blocks, whose partial results a second launch
// reduces. `inIdx` carries the indices of such partials (null: the position in the row is the index).
template <class T>
__global__ void reduceChunksKernel(ReduceOp op, T* out, std::int64_t* outIdx, const T* in, const std::int64_t* inIdx,
                                   std::int64_t k, std::int64_t chunk, std::int64_t chunksPerRow) {
  const std::int64_t row = blockIdx.x / chunksPerRow, part = blockIdx.x % chunksPerRow;
  const std::int64_t begin = part * chunk, end = min(k, begin + chunk);
  const T* base = in + row * k;
  const std::int64_t* baseIdx = inIdx ? inIdx + row * k : nullptr;
  if (op == ReduceOp::Sum) {
    T acc = T(0);
    for (std::int64_t j = begin + threadIdx.x; j < end; j += blockDim.x) acc += base[j];
    acc = blockSum(acc);
    if (threadIdx.x == 0) out[blockIdx.x] = acc;
    return;
  }
  T best = base[begin];
  std::int64_t bestJ = baseIdx ? baseIdx[begin] : begin;
  for (std::int64_t j = begin + threadIdx.x; j < end; j += blockDim.x) {
    const std::int64_t at = baseIdx ? baseIdx[j] : j;
    if (betterMax(base[j], at, best, bestJ)) {
      best = base[j];
      bestJ = at;
    }
  }
  __shared__ T sBest[kThreads];
  __shared__ std::int64_t sIdx[kThreads];
  sBest[threadIdx.x] = best;
  sIdx[threadIdx.x] = bestJ;
  __syncthreads();
  for (int s = blockDim.x / 2; s > 0; s >>= 1) {
    if (threadIdx.x < s && betterMax(sBest[threadIdx.x + s], sIdx[threadIdx.x + s], sBest[threadIdx.x], sIdx[threadIdx.x])) {
      sBest[threadIdx.x] = sBest[threadIdx.x + s];
      sIdx[threadIdx.x] = sIdx[threadIdx.x + s];
    }
    __syncthreads();
  }
  if (threadIdx.x == 0) {
    out[blockIdx.x] = sBest[0];
    if (outIdx) outIdx[blockIdx.x] = sIdx[0];
  }
}

// Sums over a strided axis when there are too few outputs to fill the GPU with one thread each (a
// bias gradient: 4096 columns summed over 4096 rows). A block takes 32 neighbouring columns and
// splits the axis over its 8 rows of threads, which then add their partial sums in a fixed order.
constexpr int kSplitColumns = 32, kSplitRows = 8;
template <class T>
__global__ void sumColumnsSplitKernel(T* out, const T* in, std::int64_t k, std::int64_t inner) {
  __shared__ T partial[kSplitRows][kSplitColumns + 1];
  const std::int64_t o = blockIdx.y, x = blockIdx.x * static_cast<std::int64_t>(kSplitColumns) + threadIdx.x;
  T acc = T(0);
  if (x < inner) {
    const T* base = in + o * k * inner + x;
    for (std::int64_t j = threadIdx.y; j < k; j += kSplitRows) acc += base[j * inner];
  }
  partial[threadIdx.y][threadIdx.x] = acc;
  __syncthreads();
  if (threadIdx.y == 0 && x < inner) {
    T sum = T(0);
    for (int r = 0; r < kSplitRows; ++r) sum += partial[r][threadIdx.x];
    out[o * inner + x] = sum;
  }
}

// One thread per output element (inner > 1): walks the reduced axis with stride `inner`.
template <class T>
__global__ void reduceStridedKernel(ReduceOp op, T* out, std::int64_t* indices, const T* in, std::int64_t outer,
                                    std::int64_t k, std::int64_t inner) {
  GRID_STRIDE(i, outer * inner) {
    const std::int64_t o = i / inner, x = i % inner;
    const T* base = in + o * k * inner + x;
    if (op == ReduceOp::Sum) {
      T acc = T(0);
      for (std::int64_t j = 0; j < k; ++j) acc += base[j * inner];
      out[i] = acc;
    } else {
      T best = base[0];
      std::int64_t bestJ = 0;
      for (std::int64_t j = 1; j < k; ++j) {
        if (betterMax(base[j * inner], j, best, bestJ)) {
          best = base[j * inner];
          bestJ = j;
        }
      }
      out[i] = best;
      if (indices) indices[i] = bestJ;
    }
  }
}

// ---- softmax and losses --------------------------------------------------------------------------

__device__ float blockMax(float v) {
  __shared__ float partial[32];
  for (int off = 16; off > 0; off >>= 1) v = fmaxf(v, __shfl_down_sync(0xffffffffu, v, off));
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  if (lane == 0) partial[warp] = v;
  __syncthreads();
  v = threadIdx.x < blockDim.x / 32 ? partial[lane] : -FLT_MAX;
  if (warp == 0)
    for (int off = 16; off > 0; off >>= 1) v = fmaxf(v, __shfl_down_sync(0xffffffffu, v, off));
  __syncthreads();
  return v;
}

// Broadcast thread 0's value to the whole block.
__device__ float shareFromThread0(float v) {
  __shared__ float s;
  if (threadIdx.x == 0) s = v;
  __syncthreads();
  const float r = s;
  __syncthreads();
  return r;
}

__global__ void softmaxKernel(float* out, const float* in, std::int64_t cols, bool log) {
  const float* x = in + blockIdx.x * cols;
  float* y = out + blockIdx.x * cols;
  float mx = -FLT_MAX;
  for (std::int64_t c = threadIdx.x; c < cols; c += blockDim.x) mx = fmaxf(mx, x[c]);
  mx = shareFromThread0(blockMax(mx));
  float sum = 0.0f;
  for (std::int64_t c = threadIdx.x; c < cols; c += blockDim.x) sum += expf(x[c] - mx);
  sum = shareFromThread0(blockSum(sum));
  if (log) {  // (x - max) - log(sum) as the CPU reference: max + log(sum) would round at max's ulp
    const float logSum = logf(sum);
    for (std::int64_t c = threadIdx.x; c < cols; c += blockDim.x) y[c] = (x[c] - mx) - logSum;
  } else {
    const float inv = 1.0f / sum;
    for (std::int64_t c = threadIdx.x; c < cols; c += blockDim.x) y[c] = expf(x[c] - mx) * inv;
  }
}

__global__ void softmaxBackwardKernel(float* gradIn, const float* gradOut, const float* out, std::int64_t cols, bool log) {
  const float* g = gradOut + blockIdx.x * cols;
  const float* y = out + blockIdx.x * cols;
  float* d = gradIn + blockIdx.x * cols;
  float dot = 0.0f;
  for (std::int64_t c = threadIdx.x; c < cols; c += blockDim.x) dot += log ? g[c] : g[c] * y[c];
  dot = shareFromThread0(blockSum(dot));
  for (std::int64_t c = threadIdx.x; c < cols; c += blockDim.x) d[c] = log ? g[c] - expf(y[c]) * dot : y[c] * (g[c] - dot);
}

// A single block sums the per-row losses, so the result does not depend on scheduling.
__global__ void nllKernel(float* out, const float* logp, const std::int64_t* target, std::int64_t rows, std::int64_t cols,
                          float scale, cuda::DeferredError* error) {
  float acc = 0.0f;
  for (std::int64_t r = threadIdx.x; r < rows; r += blockDim.x) {
    const std::int64_t t = target[r];
    if (t < 0 || t >= cols) {  // rare: any one offending thread's report will do
      error->value = t;
      error->bound = cols;
      __threadfence_system();
      error->flagged = 1;
      continue;
    }
    acc -= logp[r * cols + t];
  }
  acc = blockSum(acc);
  if (threadIdx.x == 0) out[0] = acc * scale;
}

__global__ void nllBackwardKernel(float* grad, const float* gradOut, const std::int64_t* target, std::int64_t rows,
                                  std::int64_t cols, float scale) {
  GRID_STRIDE(i, rows * cols) {
    const std::int64_t r = i / cols, c = i % cols;
    grad[i] = target[r] == c ? -scale * gradOut[0] : 0.0f;
  }
}

// Block b sums the losses of elements [b * chunk, (b + 1) * chunk) times `scale`: one block for a
// small batch, many (then summed by sumScaledKernel) for a large one -- a fixed split, so the result
// does not depend on scheduling.
__global__ void pointLossKernel(PointLoss kind, float* out, const float* a, const float* b, std::int64_t n, std::int64_t chunk,
                                float scale) {
  const std::int64_t begin = blockIdx.x * chunk, end = min(n, begin + chunk);
  float acc = 0.0f;
  for (std::int64_t i = begin + threadIdx.x; i < end; i += blockDim.x) {
    const float d = a[i] - b[i];
    acc += kind == PointLoss::MSE ? d * d : fabsf(d);
  }
  acc = blockSum(acc);
  if (threadIdx.x == 0) out[blockIdx.x] = acc * scale;
}

__global__ void sumScaledKernel(float* out, const float* partial, std::int64_t count) {
  float acc = 0.0f;
  for (std::int64_t i = threadIdx.x; i < count; i += blockDim.x) acc += partial[i];
  acc = blockSum(acc);
  if (threadIdx.x == 0) out[0] = acc;
}

__global__ void pointLossBackwardKernel(PointLoss kind, float* grad, const float* gradOut, const float* a, const float* b,
                                        std::int64_t n, float scale) {
  const float s = scale * gradOut[0];
  GRID_STRIDE(i, n) {
    const float d = a[i] - b[i];
    grad[i] = kind == PointLoss::MSE ? 2.0f * s * d : s * static_cast<float>((d > 0.0f) - (d < 0.0f));
  }
}

// ---- random, dropout, optimizers -----------------------------------------------------------------

__global__ void uniformKernel(float* out, std::int64_t n, float low, float span, std::uint64_t seed, std::uint64_t offset) {
  GRID_STRIDE(i, n) out[i] = low + span * fn::uniform01(seed, offset + i);
}
__global__ void normalKernel(float* out, std::int64_t n, float mean, float stddev, std::uint64_t seed, std::uint64_t offset) {
  GRID_STRIDE(i, n) out[i] = mean + stddev * fn::standardNormal(seed, offset + 2 * i);
}
__global__ void randintKernel(std::int64_t* out, std::int64_t n, std::int64_t low, std::uint64_t span, std::uint64_t seed,
                              std::uint64_t offset) {
  GRID_STRIDE(i, n) out[i] = low + static_cast<std::int64_t>(fn::randomBits(seed, offset + i) % span);
}
__global__ void dropoutKernel(float* out, float* mask, const float* in, std::int64_t n, float p, std::uint64_t seed,
                              std::uint64_t offset) {
  const float keepScale = 1.0f / (1.0f - p);
  GRID_STRIDE(i, n) {
    const float m = fn::uniform01(seed, offset + i) >= p ? keepScale : 0.0f;
    mask[i] = m;
    out[i] = in[i] * m;
  }
}
__global__ void sgdKernel(fn::SgdUpdate u, float* p, const float* g, float* buf, std::int64_t n) {
  GRID_STRIDE(i, n) u(p[i], g[i], buf ? buf + i : nullptr);
}
__global__ void adamKernel(fn::AdamUpdate u, float* p, const float* g, float* m, float* v, float* vmax, std::int64_t n) {
  GRID_STRIDE(i, n) u(p[i], g[i], m[i], v[i], vmax ? vmax + i : nullptr);
}

// Many small tensors in one launch (PyTorch's multi_tensor_apply): the tensors' pointers travel in the
// kernel's arguments, and block b updates chunk blockChunk[b] of tensor blockTensor[b].
constexpr int kMultiTensors = 16, kMultiBlocks = 64;
constexpr std::int64_t kMultiChunk = 8192;  // elements a block updates
struct MultiAdamArgs {
  int tensors = 0, blocks = 0;
  float* p[kMultiTensors];
  const float* g[kMultiTensors];
  float* m[kMultiTensors];
  float* v[kMultiTensors];
  float* vmax[kMultiTensors];  // amsgrad's max_exp_avg_sq, or null
  std::int64_t n[kMultiTensors];
  fn::AdamUpdate update[kMultiTensors];
  unsigned char blockTensor[kMultiBlocks];
  int blockChunk[kMultiBlocks];
};
static_assert(sizeof(MultiAdamArgs) < 4000, "kernel arguments are limited to 4 KiB");

__global__ void multiAdamKernel(MultiAdamArgs a) {
  const int t = a.blockTensor[blockIdx.x];
  const std::int64_t begin = static_cast<std::int64_t>(a.blockChunk[blockIdx.x]) * kMultiChunk;
  const std::int64_t end = min(a.n[t], begin + kMultiChunk);
  const fn::AdamUpdate u = a.update[t];
  for (std::int64_t i = begin + threadIdx.x; i < end; i += blockDim.x) u(a.p[t][i], a.g[t][i], a.m[t][i], a.v[t][i], a.vmax[t] ? a.vmax[t] + i : nullptr);
}

// ---- the backend ---------------------------------------------------------------------------------

class CudaBackend final : public Backend {
 public:
  explicit CudaBackend(int device) : device_(device) {}

  void fill(const Tensor& out, double value) override {
    auto& c = ctx();
    const std::int64_t n = out.numel();
    if (n == 0) return;
    dispatchDType(out.dtype(), "fill", [&](auto zero) {
      using T = decltype(zero);
      fillKernel<<<blocksFor(n, c), kThreads, 0, c.computeStream()>>>(out.data<T>(), n, static_cast<T>(value));
      GPULAB_CUDA_CHECK_LAUNCH();
    });
  }

  void arange(const Tensor& out, double start, double step) override {
    auto& c = ctx();
    const std::int64_t n = out.numel();
    if (n == 0) return;
    dispatchDType(out.dtype(), "arange", [&](auto zero) {
      using T = decltype(zero);
      arangeKernel<<<blocksFor(n, c), kThreads, 0, c.computeStream()>>>(out.data<T>(), n, start, step);
      GPULAB_CUDA_CHECK_LAUNCH();
    });
  }

  void copy(const Tensor& dst, const Tensor& src) override {
    auto& c = ctx();
    const std::int64_t n = dst.numel();
    if (n == 0) return;
    const bool contiguous = dst.is_contiguous() && src.is_contiguous();
    const OffsetCalc calc = contiguous ? OffsetCalc{} : makeOffsetCalc(dst.sizes(), dst.strides(), src.strides());
    dispatchDType(dst.dtype(), "copy", [&](auto dz) {
      using D = decltype(dz);
      dispatchDType(src.dtype(), "copy", [&](auto sz) {
        using S = decltype(sz);
        copyKernel<<<blocksFor(n, c), kThreads, 0, c.computeStream()>>>(dst.data<D>(), src.data<S>(), n, calc, contiguous);
        GPULAB_CUDA_CHECK_LAUNCH();
      });
    });
  }

  void unary(UnaryOp op, const Tensor& out, const Tensor& in) override {
    auto& c = ctx();
    const std::int64_t n = out.numel();
    if (n == 0) return;
    fn::dispatchUnary(op, [&](auto f) {
      unaryKernel<<<blocksFor(n, c), kThreads, 0, c.computeStream()>>>(f, out.data<float>(), in.data<float>(), n);
      GPULAB_CUDA_CHECK_LAUNCH();
    });
  }

  void binary(BinaryOp op, const Tensor& out, const Tensor& a, const Tensor& b) override {
    auto& c = ctx();
    const std::int64_t n = out.numel();
    if (n == 0) return;
    const bool contiguous = a.is_contiguous() && b.is_contiguous();
    const OffsetCalc calc = contiguous ? OffsetCalc{} : makeOffsetCalc(out.sizes(), a.strides(), b.strides());
    fn::dispatchBinary(op, [&](auto f) {
      dispatchDType(out.dtype(), "binary op", [&](auto zero) {
        using T = decltype(zero);
        if (contiguous) {
          binaryContiguousKernel<<<blocksFor(n, c), kThreads, 0, c.computeStream()>>>(f, out.data<T>(), a.data<T>(), b.data<T>(), n);
        } else {
          binaryStridedKernel<<<blocksFor(n, c), kThreads, 0, c.computeStream()>>>(f, out.data<T>(), a.data<T>(), b.data<T>(), n, calc);
        }
        GPULAB_CUDA_CHECK_LAUNCH();
      });
    });
  }

  void binaryScalar(BinaryOp op, const Tensor& out, const Tensor& a, double s, bool scalarFirst) override {
    auto& c = ctx();
    const std::int64_t n = out.numel();
    if (n == 0) return;
    fn::dispatchBinary(op, [&](auto f) {
      dispatchDType(out.dtype(), "binary op", [&](auto zero) {
        using T = decltype(zero);
        binaryScalarKernel<<<blocksFor(n, c), kThreads, 0, c.computeStream()>>>(f, out.data<T>(), a.data<T>(), static_cast<T>(s), scalarFirst, n);
        GPULAB_CUDA_CHECK_LAUNCH();
      });
    });
  }

  void reduce(ReduceOp op, const Tensor& out, const Tensor* indices, const Tensor& in, std::int64_t outer, std::int64_t k,
              std::int64_t inner) override {
    auto& c = ctx();
    if (outer * inner == 0) return;
    std::int64_t* idx = indices ? indices->data<std::int64_t>() : nullptr;
    dispatchDType(in.dtype(), "reduction", [&](auto zero) {
      using T = decltype(zero);
      if (k == 0) {
        fillKernel<<<blocksFor(outer * inner, c), kThreads, 0, c.computeStream()>>>(out.data<T>(), outer * inner, T(0));
      } else if (inner == 1) {
        const std::int64_t chunks = splitRowsInto(outer, k, c);
        if (chunks == 1) {
          forRowChunks(outer, [&](std::int64_t first, unsigned count) {
            reduceChunksKernel<<<count, kThreads, 0, c.computeStream()>>>(op, out.data<T>() + first, idx ? idx + first : nullptr,
                                                                          in.data<T>() + first * k, nullptr, k, k, 1);
          });
        } else {
          // Few long rows: partial results of `chunks` blocks a row, then one block a row over them.
          Tensor partial, partialIdx;
          {
            MemoryCategoryScope tag(MemoryCategory::Workspace);
            partial = Tensor::empty({outer * chunks}, in.dtype(), in.device());
            if (op != ReduceOp::Sum) partialIdx = Tensor::empty({outer * chunks}, kInt64, in.device());
          }
          std::int64_t* pIdx = partialIdx.defined() ? partialIdx.data<std::int64_t>() : nullptr;
          const std::int64_t chunk = (k + chunks - 1) / chunks;
          reduceChunksKernel<<<static_cast<unsigned>(outer * chunks), kThreads, 0, c.computeStream()>>>(
              op, partial.data<T>(), pIdx, in.data<T>(), nullptr, k, chunk, chunks);
          GPULAB_CUDA_CHECK_LAUNCH();
          reduceChunksKernel<<<static_cast<unsigned>(outer), kThreads, 0, c.computeStream()>>>(
              op, out.data<T>(), idx, partial.data<T>(), pIdx, chunks, chunks, 1);
        }
      } else if (op == ReduceOp::Sum && k >= 64 && outer * inner < 4LL * kThreads * c.multiprocessorCount() && outer <= 65535) {
        const dim3 grid(static_cast<unsigned>((inner + kSplitColumns - 1) / kSplitColumns), static_cast<unsigned>(outer));
        sumColumnsSplitKernel<<<grid, dim3(kSplitColumns, kSplitRows), 0, c.computeStream()>>>(out.data<T>(), in.data<T>(), k, inner);
      } else {
        reduceStridedKernel<<<blocksFor(outer * inner, c), kThreads, 0, c.computeStream()>>>(op, out.data<T>(), idx, in.data<T>(), outer, k, inner);
      }
      GPULAB_CUDA_CHECK_LAUNCH();
    });
  }

  void gemm(bool transA, bool transB, std::int64_t m, std::int64_t n, std::int64_t k, float alpha, const float* a,
            std::int64_t lda, const float* b, std::int64_t ldb, float beta, float* c, std::int64_t ldc, std::int64_t batch,
            std::int64_t strideA, std::int64_t strideB, std::int64_t strideC) override {
    auto& x = ctx();
    // Row-major C = op(A) op(B) is column-major C^T = op(B)^T op(A)^T: swap the operands.
    const cublasOperation_t opA = transA ? CUBLAS_OP_T : CUBLAS_OP_N, opB = transB ? CUBLAS_OP_T : CUBLAS_OP_N;
    // TF32 tensor cores only when asked for (torch.backends.cuda.matmul.allow_tf32), as in PyTorch.
    GPULAB_CUDA_CHECK(cublasSetMathMode(x.cublas(), cuda::allowTf32() ? CUBLAS_TF32_TENSOR_OP_MATH : CUBLAS_DEFAULT_MATH));
    if (batch == 1) {
      GPULAB_CUDA_CHECK(cublasSgemm(x.cublas(), opB, opA, static_cast<int>(n), static_cast<int>(m), static_cast<int>(k), &alpha, b,
                                    static_cast<int>(ldb), a, static_cast<int>(lda), &beta, c, static_cast<int>(ldc)));
    } else {
      GPULAB_CUDA_CHECK(cublasSgemmStridedBatched(x.cublas(), opB, opA, static_cast<int>(n), static_cast<int>(m), static_cast<int>(k),
                                                  &alpha, b, static_cast<int>(ldb), strideB, a, static_cast<int>(lda), strideA, &beta,
                                                  c, static_cast<int>(ldc), strideC, static_cast<int>(batch)));
    }
  }

  void softmax(const Tensor& out, const Tensor& in, std::int64_t rows, std::int64_t cols, bool log) override {
    auto& c = ctx();
    if (rows == 0) return;
    forRowChunks(rows, [&](std::int64_t first, unsigned count) {
      softmaxKernel<<<count, rowThreads(cols), 0, c.computeStream()>>>(out.data<float>() + first * cols, in.data<float>() + first * cols,
                                                                       cols, log);
    });
    GPULAB_CUDA_CHECK_LAUNCH();
  }

  void softmaxBackward(const Tensor& gradIn, const Tensor& gradOut, const Tensor& out, std::int64_t rows, std::int64_t cols,
                       bool log) override {
    auto& c = ctx();
    if (rows == 0) return;
    forRowChunks(rows, [&](std::int64_t first, unsigned count) {
      softmaxBackwardKernel<<<count, rowThreads(cols), 0, c.computeStream()>>>(
          gradIn.data<float>() + first * cols, gradOut.data<float>() + first * cols, out.data<float>() + first * cols, cols, log);
    });
    GPULAB_CUDA_CHECK_LAUNCH();
  }

  void nllLoss(const Tensor& out, const Tensor& logp, const Tensor& target, std::int64_t rows, std::int64_t cols,
               float scale) override {
    auto& c = ctx();
    // Out-of-range labels must raise, not corrupt memory; the kernel records them without a sync here
    // (which would stall every training step) and they are raised at the next synchronisation.
    c.raiseDeferredError();  // one an earlier step's kernel may have found (a host read, no wait)
    nllKernel<<<1, 1024, 0, c.computeStream()>>>(out.data<float>(), logp.data<float>(), target.data<std::int64_t>(), rows, cols,
                                                 scale, c.deferredErrorSlot());
    GPULAB_CUDA_CHECK_LAUNCH();
  }

  void nllLossBackward(const Tensor& gradLogp, const Tensor& gradOut, const Tensor& target, std::int64_t rows,
                       std::int64_t cols, float scale) override {
    auto& c = ctx();
    if (rows * cols == 0) return;
    nllBackwardKernel<<<blocksFor(rows * cols, c), kThreads, 0, c.computeStream()>>>(
        gradLogp.data<float>(), gradOut.data<float>(), target.data<std::int64_t>(), rows, cols, scale);
    GPULAB_CUDA_CHECK_LAUNCH();
  }

  void pointLoss(PointLoss kind, const Tensor& out, const Tensor& a, const Tensor& b, float scale) override {
    auto& c = ctx();
    const std::int64_t n = a.numel(), blocks = splitRowsInto(1, n, c);
    if (blocks == 1) {
      pointLossKernel<<<1, 1024, 0, c.computeStream()>>>(kind, out.data<float>(), a.data<float>(), b.data<float>(), n, n, scale);
      GPULAB_CUDA_CHECK_LAUNCH();
      return;
    }
    Tensor partial;
    {
      MemoryCategoryScope tag(MemoryCategory::Workspace);
      partial = Tensor::empty({blocks}, kFloat32, out.device());
    }
    pointLossKernel<<<static_cast<unsigned>(blocks), 1024, 0, c.computeStream()>>>(kind, partial.data<float>(), a.data<float>(),
                                                                                    b.data<float>(), n, (n + blocks - 1) / blocks, scale);
    GPULAB_CUDA_CHECK_LAUNCH();
    sumScaledKernel<<<1, 1024, 0, c.computeStream()>>>(out.data<float>(), partial.data<float>(), blocks);
    GPULAB_CUDA_CHECK_LAUNCH();
  }

  void pointLossBackward(PointLoss kind, const Tensor& gradA, const Tensor& gradOut, const Tensor& a, const Tensor& b,
                         float scale) override {
    auto& c = ctx();
    const std::int64_t n = a.numel();
    if (n == 0) return;
    pointLossBackwardKernel<<<blocksFor(n, c), kThreads, 0, c.computeStream()>>>(kind, gradA.data<float>(), gradOut.data<float>(),
                                                                                  a.data<float>(), b.data<float>(), n, scale);
    GPULAB_CUDA_CHECK_LAUNCH();
  }

  void uniform(const Tensor& out, double low, double high, std::uint64_t seed, std::uint64_t offset) override {
    auto& c = ctx();
    const std::int64_t n = out.numel();
    if (n == 0) return;
    uniformKernel<<<blocksFor(n, c), kThreads, 0, c.computeStream()>>>(out.data<float>(), n, static_cast<float>(low),
                                                                        static_cast<float>(high - low), seed, offset);
    GPULAB_CUDA_CHECK_LAUNCH();
  }

  void normal(const Tensor& out, double mean, double stddev, std::uint64_t seed, std::uint64_t offset) override {
    auto& c = ctx();
    const std::int64_t n = out.numel();
    if (n == 0) return;
    normalKernel<<<blocksFor(n, c), kThreads, 0, c.computeStream()>>>(out.data<float>(), n, static_cast<float>(mean),
                                                                       static_cast<float>(stddev), seed, offset);
    GPULAB_CUDA_CHECK_LAUNCH();
  }

  void randint(const Tensor& out, std::int64_t low, std::int64_t high, std::uint64_t seed, std::uint64_t offset) override {
    auto& c = ctx();
    const std::int64_t n = out.numel();
    if (n == 0) return;
    randintKernel<<<blocksFor(n, c), kThreads, 0, c.computeStream()>>>(out.data<std::int64_t>(), n, low,
                                                                        static_cast<std::uint64_t>(high - low), seed, offset);
    GPULAB_CUDA_CHECK_LAUNCH();
  }

  void dropout(const Tensor& out, const Tensor& mask, const Tensor& in, float p, std::uint64_t seed, std::uint64_t offset) override {
    auto& c = ctx();
    const std::int64_t n = in.numel();
    if (n == 0) return;
    dropoutKernel<<<blocksFor(n, c), kThreads, 0, c.computeStream()>>>(out.data<float>(), mask.data<float>(), in.data<float>(), n, p,
                                                                         seed, offset);
    GPULAB_CUDA_CHECK_LAUNCH();
  }

  void sgdStep(const Tensor& param, const Tensor& grad, const Tensor* buf, const SgdHyper& h) override {
    auto& c = ctx();
    const std::int64_t n = param.numel();
    if (n == 0) return;
    sgdKernel<<<blocksFor(n, c), kThreads, 0, c.computeStream()>>>(fn::makeSgdUpdate(h, buf != nullptr), param.data<float>(),
                                                                    grad.data<float>(), buf ? buf->data<float>() : nullptr, n);
    GPULAB_CUDA_CHECK_LAUNCH();
  }

  void adamSteps(const std::vector<AdamTensors>& items) override {
    auto& c = ctx();
    MultiAdamArgs args;
    auto launch = [&] {
      if (args.blocks == 0) return;
      multiAdamKernel<<<static_cast<unsigned>(args.blocks), kThreads, 0, c.computeStream()>>>(args);
      GPULAB_CUDA_CHECK_LAUNCH();
      args = MultiAdamArgs{};
    };
    for (const AdamTensors& t : items) {
      const std::int64_t n = t.param->numel();
      const std::int64_t chunks = (n + kMultiChunk - 1) / kMultiChunk;
      if (n == 0) continue;
      if (chunks > kMultiBlocks / 4) {  // a big tensor: its own launch costs nothing in comparison
        adamStep(*t.param, *t.grad, *t.expAvg, *t.expAvgSq, t.maxExpAvgSq, t.hyper);
        continue;
      }
      if (args.tensors == kMultiTensors || args.blocks + chunks > kMultiBlocks) launch();
      const int k = args.tensors++;
      args.p[k] = t.param->data<float>();
      args.g[k] = t.grad->data<float>();
      args.m[k] = t.expAvg->data<float>();
      args.v[k] = t.expAvgSq->data<float>();
      args.vmax[k] = t.maxExpAvgSq ? t.maxExpAvgSq->data<float>() : nullptr;
      args.n[k] = n;
      args.update[k] = fn::makeAdamUpdate(t.hyper);
      for (std::int64_t chunk = 0; chunk < chunks; ++chunk) {
        args.blockTensor[args.blocks] = static_cast<unsigned char>(k);
        args.blockChunk[args.blocks] = static_cast<int>(chunk);
        ++args.blocks;
      }
    }
    launch();
  }

  void adamStep(const Tensor& param, const Tensor& grad, const Tensor& expAvg, const Tensor& expAvgSq, const Tensor* maxExpAvgSq,
                const AdamHyper& h) override {
    auto& c = ctx();
    const std::int64_t n = param.numel();
    if (n == 0) return;
    adamKernel<<<blocksFor(n, c), kThreads, 0, c.computeStream()>>>(fn::makeAdamUpdate(h), param.data<float>(), grad.data<float>(),
                                                                     expAvg.data<float>(), expAvgSq.data<float>(),
                                                                     maxExpAvgSq ? maxExpAvgSq->data<float>() : nullptr, n);
    GPULAB_CUDA_CHECK_LAUNCH();
  }

 private:
  cuda::DeviceContext& ctx() const { return cuda::context(device_); }
  // Rows shorter than a block use fewer threads (a multiple of the warp size).
  static unsigned rowThreads(std::int64_t cols) {
    return static_cast<unsigned>(std::min<std::int64_t>(kThreads, std::max<std::int64_t>(32, (cols + 31) / 32 * 32)));
  }

  int device_;
};

}  // namespace

Backend& cudaBackend(int device) {
  // Every op asks for its backend: after the first time a thread keeps the pointer (backends live
  // until the process ends), so the lock is taken once per thread and device, not once per op.
  constexpr int kCached = 16;
  thread_local CudaBackend* cached[kCached] = {};
  if (device >= 0 && device < kCached && cached[device]) return *cached[device];
  static std::mutex mutex;
  static std::vector<std::unique_ptr<CudaBackend>>* backends = new std::vector<std::unique_ptr<CudaBackend>>;
  std::lock_guard lock(mutex);
  if (static_cast<std::size_t>(device) >= backends->size()) backends->resize(static_cast<std::size_t>(device) + 1);
  auto& slot = (*backends)[static_cast<std::size_t>(device)];
  if (!slot) slot = std::make_unique<CudaBackend>(device);
  if (device >= 0 && device < kCached) cached[device] = slot.get();
  return *slot;
}

}  // namespace gpulab
