// Row-wise softmax and log_softmax on the GPU (reference: softmax/cpu.cpp), forward and backward.
// One block per row (rowThreads(cols) threads): the row maximum and the sum of exponentials are
// block reductions (launch.cuh), computed in OpMath<T> -- float for float16/bfloat16, so a 16-bit
// input is widened before exp and each output rounded once. More rows than gridDim.x holds go in
// chunks (forRowChunks).
#include <cuda_runtime.h>

#include "engine/core/dispatch.h"
#include "engine/kernels/cuda/cuda_backend.h"
#include "engine/kernels/cuda/launch.cuh"

namespace gpulab {

using namespace cuda;

namespace {

template <class T>
__global__ void softmaxKernel(T* out, const T* in, std::int64_t cols, bool log) {
  using M = OpMath<T>;
  const T* x = in + blockIdx.x * cols;
  T* y = out + blockIdx.x * cols;
  M mx = negativeInfinity<M>();
  for (std::int64_t c = threadIdx.x; c < cols; c += blockDim.x) mx = MaxOp{}(mx, static_cast<M>(x[c]));
  mx = blockAllReduce(mx, MaxOp{}, negativeInfinity<M>());
  M sum = M(0);
  for (std::int64_t c = threadIdx.x; c < cols; c += blockDim.x) sum += fn::exp_(static_cast<M>(x[c]) - mx);
  sum = blockAllReduce(sum, SumOp{}, M(0));
  if (log) {  // (x - max) - log(sum) as the CPU reference: max + log(sum) would round at max's ulp
    const M logSum = fn::log_(sum);
    for (std::int64_t c = threadIdx.x; c < cols; c += blockDim.x) y[c] = static_cast<T>((static_cast<M>(x[c]) - mx) - logSum);
  } else {
    const M inv = M(1) / sum;
    for (std::int64_t c = threadIdx.x; c < cols; c += blockDim.x) y[c] = static_cast<T>(fn::exp_(static_cast<M>(x[c]) - mx) * inv);
  }
}

// gradIn = gradOut - exp(out) * sum(gradOut) for log_softmax, out * (gradOut - dot(gradOut, out)) for softmax.
template <class T>
__global__ void softmaxBackwardKernel(T* gradIn, const T* gradOut, const T* out, std::int64_t cols, bool log) {
  using M = OpMath<T>;
  const T* g = gradOut + blockIdx.x * cols;
  const T* y = out + blockIdx.x * cols;
  T* d = gradIn + blockIdx.x * cols;
  M dot = M(0);
  for (std::int64_t c = threadIdx.x; c < cols; c += blockDim.x)
    dot += log ? static_cast<M>(g[c]) : static_cast<M>(g[c]) * static_cast<M>(y[c]);
  dot = blockAllReduce(dot, SumOp{}, M(0));
  for (std::int64_t c = threadIdx.x; c < cols; c += blockDim.x) {
    const M gc = static_cast<M>(g[c]), yc = static_cast<M>(y[c]);
    d[c] = static_cast<T>(log ? gc - fn::exp_(yc) * dot : yc * (gc - dot));
  }
}

}  // namespace

void CudaBackend::softmax(const Tensor& out, const Tensor& in, std::int64_t rows, std::int64_t cols, bool log) {
  if (rows == 0 || cols == 0) return;
  auto& c = ctx();
  dispatchFloating(in.dtype(), log ? "log_softmax" : "softmax", [&](auto tag) {
    using T = typename decltype(tag)::type;
    forRowChunks(rows, [&](std::int64_t first, unsigned count) {
      softmaxKernel<<<count, rowThreads(cols), 0, c.currentStream()>>>(out.data<T>() + first * cols, in.data<T>() + first * cols,
                                                                       cols, log);
      GPULAB_CUDA_CHECK_LAUNCH();
    });
  });
}

void CudaBackend::softmaxBackward(const Tensor& gradIn, const Tensor& gradOut, const Tensor& out, std::int64_t rows,
                                  std::int64_t cols, bool log) {
  if (rows == 0 || cols == 0) return;
  auto& c = ctx();
  dispatchFloating(out.dtype(), log ? "log_softmax_backward" : "softmax_backward", [&](auto tag) {
    using T = typename decltype(tag)::type;
    forRowChunks(rows, [&](std::int64_t first, unsigned count) {
      softmaxBackwardKernel<<<count, rowThreads(cols), 0, c.currentStream()>>>(
          gradIn.data<T>() + first * cols, gradOut.data<T>() + first * cols, out.data<T>() + first * cols, cols, log);
      GPULAB_CUDA_CHECK_LAUNCH();
    });
  });
}

}  // namespace gpulab
