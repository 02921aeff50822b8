// Losses on the GPU (reference: loss/cpu.cpp): nll_loss over log-probabilities and int64 class labels,
// and the pointwise mse/l1 losses, forward and backward. Sums accumulate in OpMath<T> (float for
// float32 and the 16-bit types, double for float64) in a fixed order -- one block, or a fixed split
// over blocks then one block over their partials -- so a result never depends on scheduling. The
// scale (1/N for 'mean') multiplies the finished sum in double, as the CPU reference does, and the
// result is rounded once to T.
//
// An out-of-range class label must raise, not read out of bounds. Checking it on the host would
// synchronise every training step, so the kernel records it in mapped host memory
// (cuda::DeferredError, engine/kernels/cuda/cuda_context.h) and it is raised at the next point where
// the host waits for the device anyway, as PyTorch's device-side asserts are.
#include <cuda_runtime.h>

#include "engine/core/dispatch.h"
#include "engine/kernels/cuda/cuda_backend.h"
#include "engine/kernels/cuda/launch.cuh"
#include "engine/memory/memory_events.h"

namespace gpulab {

using namespace cuda;

namespace {

constexpr int kLossThreads = 1024;

// A single block sums the per-row losses, so the result does not depend on scheduling.
template <class T>
__global__ void nllKernel(T* out, const T* logp, const std::int64_t* target, std::int64_t rows, std::int64_t cols,
                          double scale, DeferredError* error) {
  using M = OpMath<T>;
  M acc = M(0);
  for (std::int64_t r = threadIdx.x; r < rows; r += blockDim.x) {
    const std::int64_t t = target[r];
    if (t < 0 || t >= cols) {  // rare: any one offending thread's report will do
      error->value = t;
      error->bound = cols;
      __threadfence_system();
      error->flagged = 1;
      continue;
    }
    acc -= static_cast<M>(logp[r * cols + t]);
  }
  acc = blockReduce(acc, SumOp{}, M(0));
  if (threadIdx.x == 0) out[0] = static_cast<T>(static_cast<M>(static_cast<double>(acc) * scale));
}

template <class T>
__global__ void nllBackwardKernel(T* grad, const T* gradOut, const std::int64_t* target, std::int64_t rows,
                                  std::int64_t cols, double scale) {
  using M = OpMath<T>;
  const T v = static_cast<T>(-static_cast<M>(scale) * static_cast<M>(gradOut[0]));
  const T zero = static_cast<T>(M(0));
  GPULAB_GRID_STRIDE(i, rows * cols) {
    const std::int64_t r = i / cols, c = i % cols;
    grad[i] = target[r] == c ? v : zero;
  }
}

// Block b sums the losses of elements [b * chunk, (b + 1) * chunk) and writes the sum times `scale`:
// one block for a small batch (TOut = T, the result), many for a large one (TOut = OpMath<T>, scale 1:
// partial sums that sumScaledKernel adds) -- a fixed split, so the result does not depend on scheduling.
template <class T, class TOut>
__global__ void pointLossKernel(PointLoss kind, TOut* out, const T* a, const T* b, std::int64_t n, std::int64_t chunk,
                                double scale) {
  using M = OpMath<T>;
  const std::int64_t begin = blockIdx.x * chunk, end = min(n, begin + chunk);
  M acc = M(0);
  for (std::int64_t i = begin + threadIdx.x; i < end; i += blockDim.x) {
    const M d = static_cast<M>(a[i]) - static_cast<M>(b[i]);
    acc += kind == PointLoss::MSE ? d * d : fn::fabs_(d);
  }
  acc = blockReduce(acc, SumOp{}, M(0));
  if (threadIdx.x == 0) out[blockIdx.x] = static_cast<TOut>(static_cast<M>(static_cast<double>(acc) * scale));
}

template <class T>
__global__ void sumScaledKernel(T* out, const OpMath<T>* partial, std::int64_t count, double scale) {
  using M = OpMath<T>;
  M acc = M(0);
  for (std::int64_t i = threadIdx.x; i < count; i += blockDim.x) acc += partial[i];
  acc = blockReduce(acc, SumOp{}, M(0));
  if (threadIdx.x == 0) out[0] = static_cast<T>(static_cast<M>(static_cast<double>(acc) * scale));
}

template <class T>
__global__ void pointLossBackwardKernel(PointLoss kind, T* grad, const T* gradOut, const T* a, const T* b, std::int64_t n,
                                        double scale) {
  using M = OpMath<T>;
  const M s = static_cast<M>(scale) * static_cast<M>(gradOut[0]);
  GPULAB_GRID_STRIDE(i, n) {
    const M d = static_cast<M>(a[i]) - static_cast<M>(b[i]);
    grad[i] = static_cast<T>(kind == PointLoss::MSE ? M(2) * s * d : s * static_cast<M>((d > M(0)) - (d < M(0))));
  }
}

}  // namespace

void CudaBackend::nllLoss(const Tensor& out, const Tensor& logp, const Tensor& target, std::int64_t rows,
                          std::int64_t cols, double scale) {
  auto& c = ctx();
  // Out-of-range labels are recorded by the kernel without a sync here (which would stall every
  // training step) and raised at the next synchronisation.
  c.raiseDeferredError();  // one an earlier step's kernel may have found (a host read, no wait)
  dispatchFloating(logp.dtype(), "nll_loss", [&](auto tag) {
    using T = typename decltype(tag)::type;
    nllKernel<<<1, kLossThreads, 0, c.currentStream()>>>(out.data<T>(), logp.data<T>(), target.data<std::int64_t>(), rows,
                                                         cols, scale, c.deferredErrorSlot());
    GPULAB_CUDA_CHECK_LAUNCH();
  });
}

void CudaBackend::nllLossBackward(const Tensor& gradLogp, const Tensor& gradOut, const Tensor& target,
                                  std::int64_t rows, std::int64_t cols, double scale) {
  if (rows * cols == 0) return;
  auto& c = ctx();
  dispatchFloating(gradLogp.dtype(), "nll_loss_backward", [&](auto tag) {
    using T = typename decltype(tag)::type;
    nllBackwardKernel<<<blocksFor(rows * cols, c), kThreads, 0, c.currentStream()>>>(
        gradLogp.data<T>(), gradOut.data<T>(), target.data<std::int64_t>(), rows, cols, scale);
    GPULAB_CUDA_CHECK_LAUNCH();
  });
}

void CudaBackend::pointLoss(PointLoss kind, const Tensor& out, const Tensor& a, const Tensor& b, double scale) {
  auto& c = ctx();
  const std::int64_t n = a.numel(), blocks = splitRowsInto(1, n, c);
  dispatchFloating(a.dtype(), kind == PointLoss::MSE ? "mse_loss" : "l1_loss", [&](auto tag) {
    using T = typename decltype(tag)::type;
    using M = OpMath<T>;
    if (blocks == 1) {
      pointLossKernel<<<1, kLossThreads, 0, c.currentStream()>>>(kind, out.data<T>(), a.data<T>(), b.data<T>(), n, n, scale);
      GPULAB_CUDA_CHECK_LAUNCH();
      return;
    }
    Tensor partial;
    {
      MemoryCategoryScope scope(MemoryCategory::Workspace);
      partial = Tensor::empty({blocks}, dtypeOf<M>(), out.device());
    }
    pointLossKernel<<<static_cast<unsigned>(blocks), kLossThreads, 0, c.currentStream()>>>(
        kind, partial.data<M>(), a.data<T>(), b.data<T>(), n, (n + blocks - 1) / blocks, 1.0);
    GPULAB_CUDA_CHECK_LAUNCH();
    sumScaledKernel<<<1, kLossThreads, 0, c.currentStream()>>>(out.data<T>(), partial.data<M>(), blocks, scale);
    GPULAB_CUDA_CHECK_LAUNCH();
  });
}

void CudaBackend::pointLossBackward(PointLoss kind, const Tensor& gradA, const Tensor& gradOut, const Tensor& a,
                                    const Tensor& b, double scale) {
  const std::int64_t n = a.numel();
  if (n == 0) return;
  auto& c = ctx();
  dispatchFloating(a.dtype(), kind == PointLoss::MSE ? "mse_loss_backward" : "l1_loss_backward", [&](auto tag) {
    using T = typename decltype(tag)::type;
    pointLossBackwardKernel<<<blocksFor(n, c), kThreads, 0, c.currentStream()>>>(kind, gradA.data<T>(), gradOut.data<T>(),
                                                                                  a.data<T>(), b.data<T>(), n, scale);
    GPULAB_CUDA_CHECK_LAUNCH();
  });
}

}  // namespace gpulab
