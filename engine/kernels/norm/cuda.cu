// Batch normalisation on the GPU (reference: norm/cpu.cpp), (N, C, S) contiguous, S = H * W or 1.
//
// Plain kernels with the engine's block reduction, not cuDNN's batch norm. Why:
// - cuDNN 9 deprecates the legacy cudnnBatchNormalization* API (its replacement is the graph API, a
//   much larger piece of code for three calls), and which data types its kernels take (bfloat16 in
//   particular) varies between releases; PyTorch itself falls back to its own kernels for several
//   cases. These kernels take the four floating dtypes alike, with the interface's dtype rule
//   (statistics in OpMath<T>: float for float16/bfloat16, else T) and null weight/bias directly,
//   where cuDNN needs buffers of ones and zeros for affine=false.
// - The arithmetic is the CPU reference's, step for step (two-pass variance, the same backward
//   formula), so CPU/CUDA parity is a question of summation order only.
// Shapes: training forward and backward give one block per channel (a channel's N * S values are
// strided in memory: n * C * S + c * S + i); the block's threads stride over them, blockAllReduce
// combines in an order fixed by the block size, and the same block then writes the channel's outputs.
// Eval forward is elementwise (grid-stride): each element's channel reads its running statistics.
// With few channels and large batches a split over several blocks per channel would fill the GPU
// better (PyTorch's batch_norm_collect_statistics does so); this is where that goes.
#include <cuda_runtime.h>

#include <cstdint>

#include "engine/core/dispatch.h"
#include "engine/kernels/cuda/cuda_backend.h"
#include "engine/kernels/cuda/launch.cuh"

namespace gpulab {

using namespace cuda;

namespace {

using BN = Backend::BatchNormShape;

// The offset of the j-th value (j in [0, N * S)) of channel c.
__device__ __forceinline__ std::int64_t channelOffset(std::int64_t j, std::int64_t c, std::int64_t channels,
                                                      std::int64_t spatial) {
  const std::int64_t n = j / spatial, i = j - n * spatial;
  return (n * channels + c) * spatial + i;
}

// Training forward, one block per channel: mean, biased variance (two passes), the saved and running
// statistics (thread 0), then y = x * scale + shift.
template <class T>
__global__ void batchNormTrainKernel(T* out, const T* in, const OpMath<T>* weight, const OpMath<T>* bias,
                                     OpMath<T>* runningMean, OpMath<T>* runningVar, OpMath<T>* saveMean,
                                     OpMath<T>* saveInvStd, std::int64_t batch, std::int64_t channels,
                                     std::int64_t spatial, double eps, double momentum) {
  using S = OpMath<T>;
  const std::int64_t c = blockIdx.x, count = batch * spatial;
  S sum = S(0);
  for (std::int64_t j = threadIdx.x; j < count; j += blockDim.x) sum += static_cast<S>(in[channelOffset(j, c, channels, spatial)]);
  sum = blockAllReduce(sum, SumOp{}, S(0));
  const S mean = count > 0 ? sum / static_cast<S>(count) : S(0);
  S sq = S(0);
  for (std::int64_t j = threadIdx.x; j < count; j += blockDim.x) {
    const S d = static_cast<S>(in[channelOffset(j, c, channels, spatial)]) - mean;
    sq += d * d;
  }
  sq = blockAllReduce(sq, SumOp{}, S(0));
  const S var = count > 0 ? sq / static_cast<S>(count) : S(0);
  const S invstd = static_cast<S>(1.0 / sqrt(static_cast<double>(var) + eps));
  if (threadIdx.x == 0) {
    if (saveMean) saveMean[c] = mean;
    if (saveInvStd) saveInvStd[c] = invstd;
    if (runningMean) {
      runningMean[c] = static_cast<S>((1.0 - momentum) * static_cast<double>(runningMean[c]) +
                                      momentum * static_cast<double>(mean));
    }
    if (runningVar && count > 1) {
      const double unbiased = static_cast<double>(sq) / static_cast<double>(count - 1);
      runningVar[c] = static_cast<S>((1.0 - momentum) * static_cast<double>(runningVar[c]) + momentum * unbiased);
    }
  }
  const S scale = invstd * (weight ? weight[c] : S(1));
  const S shift = (bias ? bias[c] : S(0)) - mean * scale;
  for (std::int64_t j = threadIdx.x; j < count; j += blockDim.x) {
    const std::int64_t k = channelOffset(j, c, channels, spatial);
    out[k] = static_cast<T>(static_cast<S>(in[k]) * scale + shift);
  }
}

// Eval forward, elementwise: the running statistics normalise.
template <class T>
__global__ void batchNormEvalKernel(T* out, const T* in, const OpMath<T>* weight, const OpMath<T>* bias,
                                    const OpMath<T>* runningMean, const OpMath<T>* runningVar, std::int64_t channels,
                                    std::int64_t spatial, double eps, std::int64_t n) {
  using S = OpMath<T>;
  GPULAB_GRID_STRIDE(k, n) {
    const std::int64_t c = (k / spatial) % channels;
    const double invstd = 1.0 / sqrt(static_cast<double>(runningVar[c]) + eps);
    const S scale = static_cast<S>(invstd * (weight ? static_cast<double>(weight[c]) : 1.0));
    const S shift = static_cast<S>((bias ? static_cast<double>(bias[c]) : 0.0) -
                                   static_cast<double>(runningMean[c]) * static_cast<double>(scale));
    out[k] = static_cast<T>(static_cast<S>(in[k]) * scale + shift);
  }
}

// Training backward, one block per channel: sum dy and sum dy * xhat, the parameter gradients
// (thread 0), then gradInput = weight invstd (dy - mean dy - xhat mean(dy xhat)).
template <class T>
__global__ void batchNormBackwardKernel(T* gradIn, OpMath<T>* gradWeight, OpMath<T>* gradBias, const T* gradOut,
                                        const T* in, const OpMath<T>* weight, const OpMath<T>* saveMean,
                                        const OpMath<T>* saveInvStd, std::int64_t batch, std::int64_t channels,
                                        std::int64_t spatial) {
  using S = OpMath<T>;
  const std::int64_t c = blockIdx.x, count = batch * spatial;
  const S mean = saveMean[c], invstd = saveInvStd[c];
  S sumDy = S(0), sumDyXhat = S(0);
  for (std::int64_t j = threadIdx.x; j < count; j += blockDim.x) {
    const std::int64_t k = channelOffset(j, c, channels, spatial);
    const S g = static_cast<S>(gradOut[k]);
    sumDy += g;
    sumDyXhat += g * (static_cast<S>(in[k]) - mean) * invstd;
  }
  sumDy = blockAllReduce(sumDy, SumOp{}, S(0));
  sumDyXhat = blockAllReduce(sumDyXhat, SumOp{}, S(0));
  if (threadIdx.x == 0) {
    if (gradBias) gradBias[c] = sumDy;
    if (gradWeight) gradWeight[c] = sumDyXhat;
  }
  if (count == 0) return;
  const S k0 = (weight ? weight[c] : S(1)) * invstd;
  const S meanDy = sumDy / static_cast<S>(count), meanDyXhat = sumDyXhat / static_cast<S>(count);
  for (std::int64_t j = threadIdx.x; j < count; j += blockDim.x) {
    const std::int64_t k = channelOffset(j, c, channels, spatial);
    const S xhat = (static_cast<S>(in[k]) - mean) * invstd;
    gradIn[k] = static_cast<T>(k0 * (static_cast<S>(gradOut[k]) - meanDy - xhat * meanDyXhat));
  }
}

template <class S>
S* ptrOf(const Tensor* t) {
  return t ? t->data<S>() : nullptr;
}

}  // namespace

void CudaBackend::batchNorm(const Tensor& out, const Tensor& input, const Tensor* weight, const Tensor* bias,
                            const Tensor* runningMean, const Tensor* runningVar, const Tensor* saveMean,
                            const Tensor* saveInvStd, bool training, const BatchNormShape& s) {
  if (s.channels == 0) return;
  auto& c = ctx();
  dispatchFloating(input.dtype(), "batch_norm", [&](auto tag) {
    using T = typename decltype(tag)::type;
    using S = OpMath<T>;
    if (training) {
      forRowChunks(s.channels, [&](std::int64_t first, unsigned count) {
        // A chunk of channels is the same problem with the pointers moved by `first` channels.
        const std::int64_t shift = first * s.spatial;
        auto at = [&](const Tensor* t) { return t ? ptrOf<S>(t) + first : nullptr; };
        batchNormTrainKernel<<<count, rowThreads(s.batch * s.spatial), 0, c.currentStream()>>>(
            out.data<T>() + shift, input.data<T>() + shift, at(weight), at(bias), at(runningMean), at(runningVar),
            at(saveMean), at(saveInvStd), s.batch, s.channels, s.spatial, s.eps, s.momentum);
        GPULAB_CUDA_CHECK_LAUNCH();
      });
    } else {
      const std::int64_t n = out.numel();
      if (n == 0) return;
      batchNormEvalKernel<<<blocksFor(n, c), kThreads, 0, c.currentStream()>>>(
          out.data<T>(), input.data<T>(), ptrOf<S>(weight), ptrOf<S>(bias), ptrOf<S>(runningMean), ptrOf<S>(runningVar),
          s.channels, s.spatial, s.eps, n);
      GPULAB_CUDA_CHECK_LAUNCH();
    }
  });
}

void CudaBackend::batchNormBackward(const Tensor& gradInput, const Tensor* gradWeight, const Tensor* gradBias,
                                    const Tensor& gradOut, const Tensor& input, const Tensor* weight,
                                    const Tensor& saveMean, const Tensor& saveInvStd, const BatchNormShape& s) {
  if (s.channels == 0) return;
  auto& c = ctx();
  dispatchFloating(input.dtype(), "batch_norm_backward", [&](auto tag) {
    using T = typename decltype(tag)::type;
    using S = OpMath<T>;
    forRowChunks(s.channels, [&](std::int64_t first, unsigned count) {
      const std::int64_t shift = first * s.spatial;
      auto at = [&](const Tensor* t) { return t ? ptrOf<S>(t) + first : nullptr; };
      batchNormBackwardKernel<<<count, rowThreads(s.batch * s.spatial), 0, c.currentStream()>>>(
          gradInput.data<T>() + shift, at(gradWeight), at(gradBias), gradOut.data<T>() + shift, input.data<T>() + shift,
          at(weight), saveMean.data<S>() + first, saveInvStd.data<S>() + first, s.batch, s.channels, s.spatial);
      GPULAB_CUDA_CHECK_LAUNCH();
    });
  });
}

}  // namespace gpulab
