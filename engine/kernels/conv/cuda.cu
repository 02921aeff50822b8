// 2-D convolution and pooling on the GPU (reference: conv/cpu.cpp), NCHW, contiguous tensors.
//
// Convolutions go through cuDNN's legacy API (cudnnConvolutionForward / BackwardData / BackwardFilter),
// as PyTorch's Conv_v7.cpp does:
// - Descriptors: a 4-d NCHW tensor descriptor for the input and the output, a filter descriptor
//   (K, C / groups, R, S), a convolution descriptor (padding, stride, dilation, cross-correlation --
//   PyTorch's "convolution" --, the group count, the compute type and the math type). They are made per
//   call and freed by RAII (CudnnDescriptor); see "the descriptor cache goes here" below.
// - Data and compute types: float32 -> FLOAT/FLOAT, float64 -> DOUBLE/DOUBLE, float16 -> HALF/FLOAT,
//   bfloat16 -> BFLOAT16/FLOAT: the 16-bit types accumulate in float, as the CPU reference does.
// - Math types (what cuDNN may run on tensor cores):
//     float16, bfloat16: CUDNN_TENSOR_OP_MATH (tensor cores, float accumulation).
//     float32: CUDNN_FMA_MATH unless allowTf32(), then CUDNN_DEFAULT_MATH. Since cuDNN 8, DEFAULT_MATH
//       lets a float32 convolution run on TF32 tensor cores (inputs rounded to a 10-bit mantissa), and
//       FMA_MATH is the one mode that forbids it -- so FMA_MATH is how "no TF32" is said, as PyTorch
//       does. CUDNN_TENSOR_OP_MATH_ALLOW_CONVERSION would be wrong for either: it lets cuDNN convert
//       float32 tensors down to float16.
//     float64: CUDNN_DEFAULT_MATH (there are no float64 tensor-core convolutions to opt into).
// - Algorithm: cuDNN's heuristics (cudnnGet*Algorithm_v7), best first; the first whose math type is
//   allowed, whose workspace the caching allocator can give, and which cuDNN accepts for this shape is
//   run. A workspace that does not fit (OutOfMemoryError) moves on to the next algorithm, which
//   usually needs less -- PyTorch's fallback too. Benchmark mode (cudnnFind*, torch.backends.cudnn.
//   benchmark) is a later step and plugs in where the heuristics are asked.
// - Workspace: a tensor on the device from the caching allocator, tagged MemoryCategory::Workspace, so
//   it shows in the memory views and the stats like any other block; it is freed when the call
//   returns, which is safe because every later use of the block is ordered after cuDNN's kernels on the
//   one compute stream (engine/kernels/cuda/cuda_context.h).
// - cuDNN's tensor descriptors hold int sizes and strides, and its kernels index with 32 bits: a batch
//   whose input or output has 2^31 elements or more is run in chunks of samples (PyTorch splits the
//   batch the same way); the weight gradient of later chunks accumulates (beta = 1).
// - Bias: a small kernel adds it after the convolution (PyTorch adds it with cudnnAddTensor, also as a
//   second pass), in the math type with one rounding on store.
//
// Pools are plain kernels with PyTorch's window rules (the CPU reference's): cuDNN's pooling does not
// return max_pool2d's indices. Each thread owns one output element in the forward passes and one input
// element in the backward passes, which gather over the output windows that contain their element --
// deterministic, no atomics (none on 16-bit types either), every gradient element written once, so the
// gradient needs no zeroing first.
#include <cuda_runtime.h>
#include <cudnn.h>

#include <algorithm>
#include <climits>
#include <cstdint>
#include <string>
#include <vector>

#include "engine/core/dispatch.h"
#include "engine/core/errors.h"
#include "engine/kernels/cuda/cuda_backend.h"
#include "engine/kernels/cuda/launch.cuh"
#include "engine/memory/memory_events.h"
#include "engine/runtime/cuda_runtime.h"

namespace gpulab {

using namespace cuda;

namespace {

using Conv = Backend::Conv2dShape;
using Pool = Backend::Pool2dShape;

// ---- cuDNN descriptors, RAII ------------------------------------------------------------------------

template <class Handle, cudnnStatus_t (*Create)(Handle*), cudnnStatus_t (*Destroy)(Handle)>
class CudnnDescriptor {
 public:
  CudnnDescriptor() { GPULAB_CUDA_CHECK(Create(&handle_)); }
  ~CudnnDescriptor() {
    if (handle_) Destroy(handle_);  // never throws: a failing destroy leaves nothing to recover
  }
  CudnnDescriptor(const CudnnDescriptor&) = delete;
  CudnnDescriptor& operator=(const CudnnDescriptor&) = delete;
  Handle get() const { return handle_; }

 private:
  Handle handle_ = nullptr;
};

using TensorDescriptor = CudnnDescriptor<cudnnTensorDescriptor_t, cudnnCreateTensorDescriptor, cudnnDestroyTensorDescriptor>;
using FilterDescriptor = CudnnDescriptor<cudnnFilterDescriptor_t, cudnnCreateFilterDescriptor, cudnnDestroyFilterDescriptor>;
using ConvolutionDescriptor =
    CudnnDescriptor<cudnnConvolutionDescriptor_t, cudnnCreateConvolutionDescriptor, cudnnDestroyConvolutionDescriptor>;

struct CudnnTypes {
  cudnnDataType_t data, compute;
  cudnnMathType_t math;  // what the descriptor asks for (see the top of the file)
  bool fp32NoTf32;       // float32 with TF32 forbidden: only FMA_MATH algorithms are acceptable
};

CudnnTypes cudnnTypesFor(DType dtype, const char* op) {
  switch (dtype) {
    case DType::Float32: {
      const bool tf32 = allowTf32();
      return {CUDNN_DATA_FLOAT, CUDNN_DATA_FLOAT, tf32 ? CUDNN_DEFAULT_MATH : CUDNN_FMA_MATH, !tf32};
    }
    case DType::Float64: return {CUDNN_DATA_DOUBLE, CUDNN_DATA_DOUBLE, CUDNN_DEFAULT_MATH, false};
    case DType::Float16: return {CUDNN_DATA_HALF, CUDNN_DATA_FLOAT, CUDNN_TENSOR_OP_MATH, false};
    case DType::BFloat16: return {CUDNN_DATA_BFLOAT16, CUDNN_DATA_FLOAT, CUDNN_TENSOR_OP_MATH, false};
    default: throwNotImplementedFor(op, dtype);
  }
}

// The math type to run a heuristic's algorithm with, or false when the algorithm's math type is one
// this dtype must not use. cuDNN requires the descriptor's math type to match the algorithm's (PyTorch
// sets it from the perf result likewise).
bool acceptMath(const CudnnTypes& t, cudnnMathType_t algoMath, cudnnMathType_t& use) {
  if (t.fp32NoTf32) {
    if (algoMath != CUDNN_FMA_MATH && algoMath != CUDNN_DEFAULT_MATH) return false;
    use = CUDNN_FMA_MATH;  // never DEFAULT: that would permit TF32 again
    return true;
  }
  if (algoMath == CUDNN_TENSOR_OP_MATH_ALLOW_CONVERSION && t.data != CUDNN_DATA_HALF) return false;
  use = algoMath;
  return true;
}

int toInt(std::int64_t v, const char* what) {
  if (v < 0 || v > INT_MAX) {
    throw NotImplementedError(std::string("conv2d on CUDA: ") + what + " = " + std::to_string(v) +
                              " does not fit cuDNN's 32-bit sizes");
  }
  return static_cast<int>(v);
}

// The descriptors of one convolution of `batch` samples (a chunk of the shape's batch).
//
// The descriptor cache goes here: PyTorch keeps these (and the chosen algorithm with its workspace
// size) in a map keyed by the convolution's parameters -- shape, dtype, math type, direction -- so a
// training loop asks the heuristics once per layer instead of once per call. Key it on (Conv2dShape,
// chunk batch, CudnnTypes) in the device's context, next to the cuDNN handle.
struct ConvDescriptors {
  TensorDescriptor x, y;
  FilterDescriptor w;
  ConvolutionDescriptor conv;
  CudnnTypes types;

  ConvDescriptors(const Conv& s, std::int64_t batch, const CudnnTypes& t) : types(t) {
    const int n = toInt(batch, "batch");
    GPULAB_CUDA_CHECK(cudnnSetTensor4dDescriptor(x.get(), CUDNN_TENSOR_NCHW, t.data, n, toInt(s.inChannels, "in_channels"),
                                                 toInt(s.inH, "height"), toInt(s.inW, "width")));
    GPULAB_CUDA_CHECK(cudnnSetTensor4dDescriptor(y.get(), CUDNN_TENSOR_NCHW, t.data, n,
                                                 toInt(s.outChannels, "out_channels"), toInt(s.outH, "output height"),
                                                 toInt(s.outW, "output width")));
    GPULAB_CUDA_CHECK(cudnnSetFilter4dDescriptor(w.get(), t.data, CUDNN_TENSOR_NCHW, toInt(s.outChannels, "out_channels"),
                                                 toInt(s.inChannels / s.groups, "in_channels / groups"),
                                                 toInt(s.kernelH, "kernel height"), toInt(s.kernelW, "kernel width")));
    GPULAB_CUDA_CHECK(cudnnSetConvolution2dDescriptor(conv.get(), toInt(s.padH, "padding"), toInt(s.padW, "padding"),
                                                      toInt(s.strideH, "stride"), toInt(s.strideW, "stride"),
                                                      toInt(s.dilationH, "dilation"), toInt(s.dilationW, "dilation"),
                                                      CUDNN_CROSS_CORRELATION, t.compute));
    GPULAB_CUDA_CHECK(cudnnSetConvolutionGroupCount(conv.get(), toInt(s.groups, "groups")));
    GPULAB_CUDA_CHECK(cudnnSetConvolutionMathType(conv.get(), t.math));
    // The op layer computed the output size; cuDNN must agree, or the descriptors describe another op.
    int dims[4];
    GPULAB_CUDA_CHECK(cudnnGetConvolutionNdForwardOutputDim(conv.get(), x.get(), w.get(), 4, dims));
    if (dims[2] != s.outH || dims[3] != s.outW) {
      throw Error("conv2d on CUDA: cuDNN computes a " + std::to_string(dims[2]) + "x" + std::to_string(dims[3]) +
                  " output where the shape says " + std::to_string(s.outH) + "x" + std::to_string(s.outW));
    }
  }
};

// alpha and beta in the compute type's host type: double for float64, float otherwise.
struct Blend {
  float f;
  double d;
  const void* ptr(const CudnnTypes& t) const { return t.data == CUDNN_DATA_DOUBLE ? static_cast<const void*>(&d) : &f; }
};
const Blend kOne{1.0f, 1.0};
const Blend kZero{0.0f, 0.0};

// A workspace of `bytes` from the caching allocator (float32 elements: the engine has no byte dtype;
// blocks are 512-byte aligned either way).
Tensor allocateWorkspace(std::size_t bytes, Device device) {
  MemoryCategoryScope scope(MemoryCategory::Workspace);
  return Tensor::empty({static_cast<std::int64_t>((bytes + 3) / 4)}, kFloat32, device);
}

// Runs the first acceptable algorithm of cuDNN's heuristic ranking (see the top of the file).
//   perfs:         the heuristic's results, best first (cudnnConvolution*AlgoPerf_t)
//   workspaceSize: (algo, size_t*) -> cudnnStatus_t for the descriptors as they are now
//   execute:       (algo, workspace, bytes) -> cudnnStatus_t
template <class Perf, class WorkspaceSize, class Execute>
void runFirstFitting(const char* op, ConvDescriptors& d, const std::vector<Perf>& perfs, Device device,
                     WorkspaceSize&& workspaceSize, Execute&& execute) {
  std::string lastOom;
  for (const Perf& perf : perfs) {
    if (perf.status != CUDNN_STATUS_SUCCESS) continue;
    cudnnMathType_t math;
    if (!acceptMath(d.types, perf.mathType, math)) continue;
    GPULAB_CUDA_CHECK(cudnnSetConvolutionMathType(d.conv.get(), math));
    std::size_t bytes = 0;
    if (workspaceSize(perf.algo, &bytes) != CUDNN_STATUS_SUCCESS) continue;
    Tensor workspace;
    if (bytes > 0) {
      try {
        workspace = allocateWorkspace(bytes, device);
      } catch (const OutOfMemoryError& e) {
        lastOom = e.what();
        continue;  // the next algorithm may need less
      }
    }
    const cudnnStatus_t status = execute(perf.algo, bytes > 0 ? workspace.data_ptr() : nullptr, bytes);
    if (status == CUDNN_STATUS_NOT_SUPPORTED) continue;  // cuDNN refuses this algorithm for this shape
    GPULAB_CUDA_CHECK(status);
    return;
  }
  if (!lastOom.empty()) throw OutOfMemoryError(lastOom + " (the workspace of every cuDNN algorithm for " + op + ")");
  throw CudaError(std::string("CUDA error: cuDNN found no algorithm for ") + op + " with these parameters");
}

// Samples a chunk may hold so that its input and output both stay below 2^31 elements.
std::int64_t samplesPerChunk(const Conv& s) {
  const std::int64_t perSample = std::max({s.inChannels * s.inH * s.inW, s.outChannels * s.outH * s.outW, std::int64_t{1}});
  const std::int64_t limit = std::int64_t{INT_MAX} / perSample;
  if (limit < 1) {
    throw NotImplementedError("conv2d on CUDA: one sample has " + std::to_string(perSample) +
                              " elements, more than cuDNN's 32-bit indexing allows");
  }
  return std::min(std::max<std::int64_t>(s.batch, 1), limit);
}

// out[n, k, h, w] += bias[k], in the math type, rounded once.
template <class T>
__global__ void addBiasKernel(T* out, const T* bias, std::int64_t channels, std::int64_t plane, std::int64_t n) {
  using M = OpMath<T>;
  GPULAB_GRID_STRIDE(i, n) { out[i] = static_cast<T>(static_cast<M>(out[i]) + static_cast<M>(bias[(i / plane) % channels])); }
}

void zeroFill(const Tensor& t, cudaStream_t stream) {
  if (t.numel() > 0) GPULAB_CUDA_CHECK(cudaMemsetAsync(t.data_ptr(), 0, t.nbytes(), stream));  // 0 bits = +0.0
}

// ---- pooling kernels ----------------------------------------------------------------------------------

// max_pool2d, one thread per output element: PyTorch's window walk (padding skipped by stepping the
// start into the input by whole dilations), the first maximum kept (strict >), NaN wins.
template <class T>
__global__ void maxPool2dKernel(T* out, std::int64_t* indices, const T* in, Pool s, std::int64_t n) {
  using M = OpMath<T>;
  GPULAB_GRID_STRIDE(i, n) {
    const std::int64_t ow = i % s.outW, oh = (i / s.outW) % s.outH, plane = i / (s.outW * s.outH);
    std::int64_t h0 = oh * s.strideH - s.padH, w0 = ow * s.strideW - s.padW;
    const std::int64_t h1 = min(h0 + (s.kernelH - 1) * s.dilationH + 1, s.inH);
    const std::int64_t w1 = min(w0 + (s.kernelW - 1) * s.dilationW + 1, s.inW);
    while (h0 < 0) h0 += s.dilationH;
    while (w0 < 0) w0 += s.dilationW;
    const T* x = in + plane * s.inH * s.inW;
    std::int64_t best = h0 * s.inW + w0;
    M mx = negativeInfinity<M>();
    for (std::int64_t h = h0; h < h1; h += s.dilationH)
      for (std::int64_t w = w0; w < w1; w += s.dilationW) {
        const M v = static_cast<M>(x[h * s.inW + w]);
        if (v > mx || v != v) {
          mx = v;
          best = h * s.inW + w;
        }
      }
    out[i] = static_cast<T>(mx);
    indices[i] = best;
  }
}

// The outputs along one axis whose (dilated) window can contain input position `pos`:
// [first, last) with first = ceil((pos + pad - span + 1) / stride) clipped at 0, last = floor((pos + pad)
// / stride) + 1 clipped at the output size; span = (kernel - 1) * dilation + 1.
struct OutRange {
  std::int64_t first, last;
};
__device__ __forceinline__ OutRange windowsContaining(std::int64_t pos, std::int64_t pad, std::int64_t span,
                                                      std::int64_t stride, std::int64_t outSize) {
  const std::int64_t first = pos + pad < span ? 0 : (pos + pad - span) / stride + 1;
  const std::int64_t last = min((pos + pad) / stride + 1, outSize);
  return {first, last};
}

// max_pool2d backward as a gather: input element (h, w) sums the gradients of the outputs whose saved
// argmax is it (only outputs whose window contains it can have it). In the math type, in the order of
// the CPU reference's scatter (outputs row by row), rounded once.
template <class T>
__global__ void maxPool2dBackwardKernel(T* gradIn, const T* gradOut, const std::int64_t* indices, Pool s, std::int64_t n) {
  using M = OpMath<T>;
  GPULAB_GRID_STRIDE(i, n) {
    const std::int64_t w = i % s.inW, h = (i / s.inW) % s.inH, plane = i / (s.inW * s.inH);
    const OutRange rh = windowsContaining(h, s.padH, (s.kernelH - 1) * s.dilationH + 1, s.strideH, s.outH);
    const OutRange rw = windowsContaining(w, s.padW, (s.kernelW - 1) * s.dilationW + 1, s.strideW, s.outW);
    const std::int64_t self = h * s.inW + w, base = plane * s.outH * s.outW;
    M g = M(0);
    for (std::int64_t oh = rh.first; oh < rh.last; ++oh)
      for (std::int64_t ow = rw.first; ow < rw.last; ++ow) {
        const std::int64_t o = base + oh * s.outW + ow;
        if (indices[o] == self) g += static_cast<M>(gradOut[o]);
      }
    gradIn[i] = static_cast<T>(g);
  }
}

// avg_pool2d's window of output (oh, ow), as the CPU reference: clipped to the padded input for the
// count, to the input for the sum; no dilation (PyTorch's avg_pool2d has none).
struct AvgWindow {
  std::int64_t h0, h1, w0, w1, divisor;
};
__device__ __forceinline__ AvgWindow avgWindow(const Pool& s, std::int64_t oh, std::int64_t ow) {
  std::int64_t h0 = oh * s.strideH - s.padH, w0 = ow * s.strideW - s.padW;
  std::int64_t h1 = min(h0 + s.kernelH, s.inH + s.padH), w1 = min(w0 + s.kernelW, s.inW + s.padW);
  const std::int64_t poolSize = (h1 - h0) * (w1 - w0);
  h0 = max(h0, std::int64_t{0});
  w0 = max(w0, std::int64_t{0});
  h1 = min(h1, s.inH);
  w1 = min(w1, s.inW);
  return {h0, h1, w0, w1, s.countIncludePad ? poolSize : (h1 - h0) * (w1 - w0)};
}

template <class T>
__global__ void avgPool2dKernel(T* out, const T* in, Pool s, std::int64_t n) {
  using M = OpMath<T>;
  GPULAB_GRID_STRIDE(i, n) {
    const std::int64_t ow = i % s.outW, oh = (i / s.outW) % s.outH, plane = i / (s.outW * s.outH);
    const AvgWindow win = avgWindow(s, oh, ow);
    const T* x = in + plane * s.inH * s.inW;
    M sum = M(0);
    for (std::int64_t h = win.h0; h < win.h1; ++h)
      for (std::int64_t w = win.w0; w < win.w1; ++w) sum += static_cast<M>(x[h * s.inW + w]);
    const bool empty = win.h0 >= win.h1 || win.w0 >= win.w1;
    out[i] = static_cast<T>(empty ? M(0) : sum / static_cast<M>(win.divisor));
  }
}

// avg_pool2d backward as a gather: input element (h, w) sums gradOut / divisor over the outputs whose
// (undilated) window contains it.
template <class T>
__global__ void avgPool2dBackwardKernel(T* gradIn, const T* gradOut, Pool s, std::int64_t n) {
  using M = OpMath<T>;
  GPULAB_GRID_STRIDE(i, n) {
    const std::int64_t w = i % s.inW, h = (i / s.inW) % s.inH, plane = i / (s.inW * s.inH);
    const OutRange rh = windowsContaining(h, s.padH, s.kernelH, s.strideH, s.outH);
    const OutRange rw = windowsContaining(w, s.padW, s.kernelW, s.strideW, s.outW);
    const T* go = gradOut + plane * s.outH * s.outW;
    M g = M(0);
    for (std::int64_t oh = rh.first; oh < rh.last; ++oh)
      for (std::int64_t ow = rw.first; ow < rw.last; ++ow) {
        const AvgWindow win = avgWindow(s, oh, ow);
        if (h < win.h0 || h >= win.h1 || w < win.w0 || w >= win.w1) continue;
        g += static_cast<M>(go[oh * s.outW + ow]) / static_cast<M>(win.divisor);
      }
    gradIn[i] = static_cast<T>(g);
  }
}

// adaptive_avg_pool2d's windows along one axis: [floor(i * in / out), ceil((i + 1) * in / out)).
__device__ __forceinline__ std::int64_t adaptiveStart(std::int64_t i, std::int64_t in, std::int64_t out) {
  return (i * in) / out;
}
__device__ __forceinline__ std::int64_t adaptiveEnd(std::int64_t i, std::int64_t in, std::int64_t out) {
  return ((i + 1) * in + out - 1) / out;
}

template <class T>
__global__ void adaptiveAvgPool2dKernel(T* out, const T* in, Pool s, std::int64_t n) {
  using M = OpMath<T>;
  GPULAB_GRID_STRIDE(i, n) {
    const std::int64_t ow = i % s.outW, oh = (i / s.outW) % s.outH, plane = i / (s.outW * s.outH);
    const std::int64_t h0 = adaptiveStart(oh, s.inH, s.outH), h1 = adaptiveEnd(oh, s.inH, s.outH);
    const std::int64_t w0 = adaptiveStart(ow, s.inW, s.outW), w1 = adaptiveEnd(ow, s.inW, s.outW);
    const T* x = in + plane * s.inH * s.inW;
    M sum = M(0);
    for (std::int64_t h = h0; h < h1; ++h)
      for (std::int64_t w = w0; w < w1; ++w) sum += static_cast<M>(x[h * s.inW + w]);
    out[i] = static_cast<T>(sum / static_cast<M>((h1 - h0) * (w1 - w0)));
  }
}

// adaptive_avg_pool2d backward as a gather. Output i's window contains input position p exactly when
// floor(p * out / in) <= i < ceil((p + 1) * out / in) -- the same formulas with in and out swapped.
template <class T>
__global__ void adaptiveAvgPool2dBackwardKernel(T* gradIn, const T* gradOut, Pool s, std::int64_t n) {
  using M = OpMath<T>;
  GPULAB_GRID_STRIDE(i, n) {
    const std::int64_t w = i % s.inW, h = (i / s.inW) % s.inH, plane = i / (s.inW * s.inH);
    const std::int64_t oh0 = adaptiveStart(h, s.outH, s.inH), oh1 = adaptiveEnd(h, s.outH, s.inH);
    const std::int64_t ow0 = adaptiveStart(w, s.outW, s.inW), ow1 = adaptiveEnd(w, s.outW, s.inW);
    const T* go = gradOut + plane * s.outH * s.outW;
    M g = M(0);
    for (std::int64_t oh = oh0; oh < oh1; ++oh) {
      const std::int64_t kh = adaptiveEnd(oh, s.inH, s.outH) - adaptiveStart(oh, s.inH, s.outH);
      for (std::int64_t ow = ow0; ow < ow1; ++ow) {
        const std::int64_t kw = adaptiveEnd(ow, s.inW, s.outW) - adaptiveStart(ow, s.inW, s.outW);
        g += static_cast<M>(go[oh * s.outW + ow]) / static_cast<M>(kh * kw);
      }
    }
    gradIn[i] = static_cast<T>(g);
  }
}

}  // namespace

// ---- convolutions -------------------------------------------------------------------------------------

void CudaBackend::conv2d(const Tensor& out, const Tensor& input, const Tensor& weight, const Tensor* bias,
                         const Conv2dShape& s) {
  if (out.numel() == 0) return;
  auto& c = ctx();
  const CudnnTypes types = cudnnTypesFor(input.dtype(), "conv2d");
  if (s.inChannels == 0 || s.kernelH == 0 || s.kernelW == 0) {
    zeroFill(out, c.computeStream());  // an empty sum (the CPU reference's colRows == 0), then the bias
  } else {
    const cudnnHandle_t handle = c.cudnn();
    const std::size_t elt = elementSize(input.dtype());
    const std::int64_t chunk = samplesPerChunk(s);
    for (std::int64_t n0 = 0; n0 < s.batch; n0 += chunk) {
      const std::int64_t nb = std::min(chunk, s.batch - n0);
      ConvDescriptors d(s, nb, types);
      const char* x = static_cast<const char*>(input.data_ptr()) + n0 * s.inChannels * s.inH * s.inW * elt;
      char* y = static_cast<char*>(out.data_ptr()) + n0 * s.outChannels * s.outH * s.outW * elt;
      std::vector<cudnnConvolutionFwdAlgoPerf_t> perfs(CUDNN_CONVOLUTION_FWD_ALGO_COUNT);
      int returned = 0;
      GPULAB_CUDA_CHECK(cudnnGetConvolutionForwardAlgorithm_v7(handle, d.x.get(), d.w.get(), d.conv.get(), d.y.get(),
                                                               static_cast<int>(perfs.size()), &returned, perfs.data()));
      perfs.resize(static_cast<std::size_t>(returned));
      runFirstFitting(
          "conv2d", d, perfs, out.device(),
          [&](cudnnConvolutionFwdAlgo_t algo, std::size_t* bytes) {
            return cudnnGetConvolutionForwardWorkspaceSize(handle, d.x.get(), d.w.get(), d.conv.get(), d.y.get(), algo, bytes);
          },
          [&](cudnnConvolutionFwdAlgo_t algo, void* ws, std::size_t bytes) {
            return cudnnConvolutionForward(handle, kOne.ptr(types), d.x.get(), x, d.w.get(), weight.data_ptr(), d.conv.get(),
                                           algo, ws, bytes, kZero.ptr(types), d.y.get(), y);
          });
    }
  }
  if (bias) {
    const std::int64_t n = out.numel();
    dispatchFloating(out.dtype(), "conv2d", [&](auto tag) {
      using T = typename decltype(tag)::type;
      addBiasKernel<<<blocksFor(n, c), kThreads, 0, c.computeStream()>>>(out.data<T>(), bias->data<T>(), s.outChannels,
                                                                        s.outH * s.outW, n);
      GPULAB_CUDA_CHECK_LAUNCH();
    });
  }
}

void CudaBackend::conv2dBackwardInput(const Tensor& gradInput, const Tensor& gradOut, const Tensor& weight,
                                      const Conv2dShape& s) {
  if (gradInput.numel() == 0) return;
  auto& c = ctx();
  const CudnnTypes types = cudnnTypesFor(gradOut.dtype(), "conv2d_backward_input");
  if (s.outChannels == 0 || s.outH * s.outW == 0 || s.kernelH == 0 || s.kernelW == 0) {
    zeroFill(gradInput, c.computeStream());  // no output reads any input element
    return;
  }
  const cudnnHandle_t handle = c.cudnn();
  const std::size_t elt = elementSize(gradOut.dtype());
  const std::int64_t chunk = samplesPerChunk(s);
  for (std::int64_t n0 = 0; n0 < s.batch; n0 += chunk) {
    const std::int64_t nb = std::min(chunk, s.batch - n0);
    ConvDescriptors d(s, nb, types);
    char* dx = static_cast<char*>(gradInput.data_ptr()) + n0 * s.inChannels * s.inH * s.inW * elt;
    const char* dy = static_cast<const char*>(gradOut.data_ptr()) + n0 * s.outChannels * s.outH * s.outW * elt;
    std::vector<cudnnConvolutionBwdDataAlgoPerf_t> perfs(CUDNN_CONVOLUTION_BWD_DATA_ALGO_COUNT);
    int returned = 0;
    GPULAB_CUDA_CHECK(cudnnGetConvolutionBackwardDataAlgorithm_v7(handle, d.w.get(), d.y.get(), d.conv.get(), d.x.get(),
                                                                  static_cast<int>(perfs.size()), &returned, perfs.data()));
    perfs.resize(static_cast<std::size_t>(returned));
    runFirstFitting(
        "conv2d_backward_input", d, perfs, gradInput.device(),
        [&](cudnnConvolutionBwdDataAlgo_t algo, std::size_t* bytes) {
          return cudnnGetConvolutionBackwardDataWorkspaceSize(handle, d.w.get(), d.y.get(), d.conv.get(), d.x.get(), algo,
                                                              bytes);
        },
        [&](cudnnConvolutionBwdDataAlgo_t algo, void* ws, std::size_t bytes) {
          return cudnnConvolutionBackwardData(handle, kOne.ptr(types), d.w.get(), weight.data_ptr(), d.y.get(), dy,
                                              d.conv.get(), algo, ws, bytes, kZero.ptr(types), d.x.get(), dx);
        });
  }
}

void CudaBackend::conv2dBackwardWeight(const Tensor& gradWeight, const Tensor& gradOut, const Tensor& input,
                                       const Conv2dShape& s) {
  if (gradWeight.numel() == 0) return;
  auto& c = ctx();
  const CudnnTypes types = cudnnTypesFor(gradOut.dtype(), "conv2d_backward_weight");
  if (s.batch == 0 || s.outH * s.outW == 0) {
    zeroFill(gradWeight, c.computeStream());  // an empty sum over the batch and the output plane
    return;
  }
  const cudnnHandle_t handle = c.cudnn();
  const std::size_t elt = elementSize(gradOut.dtype());
  const std::int64_t chunk = samplesPerChunk(s);
  for (std::int64_t n0 = 0; n0 < s.batch; n0 += chunk) {
    const std::int64_t nb = std::min(chunk, s.batch - n0);
    ConvDescriptors d(s, nb, types);
    const char* x = static_cast<const char*>(input.data_ptr()) + n0 * s.inChannels * s.inH * s.inW * elt;
    const char* dy = static_cast<const char*>(gradOut.data_ptr()) + n0 * s.outChannels * s.outH * s.outW * elt;
    const Blend& beta = n0 == 0 ? kZero : kOne;  // later chunks add to the first chunk's gradient
    std::vector<cudnnConvolutionBwdFilterAlgoPerf_t> perfs(CUDNN_CONVOLUTION_BWD_FILTER_ALGO_COUNT);
    int returned = 0;
    GPULAB_CUDA_CHECK(cudnnGetConvolutionBackwardFilterAlgorithm_v7(handle, d.x.get(), d.y.get(), d.conv.get(), d.w.get(),
                                                                    static_cast<int>(perfs.size()), &returned,
                                                                    perfs.data()));
    perfs.resize(static_cast<std::size_t>(returned));
    runFirstFitting(
        "conv2d_backward_weight", d, perfs, gradWeight.device(),
        [&](cudnnConvolutionBwdFilterAlgo_t algo, std::size_t* bytes) {
          return cudnnGetConvolutionBackwardFilterWorkspaceSize(handle, d.x.get(), d.y.get(), d.conv.get(), d.w.get(), algo,
                                                                bytes);
        },
        [&](cudnnConvolutionBwdFilterAlgo_t algo, void* ws, std::size_t bytes) {
          return cudnnConvolutionBackwardFilter(handle, kOne.ptr(types), d.x.get(), x, d.y.get(), dy, d.conv.get(), algo, ws,
                                                bytes, beta.ptr(types), d.w.get(), gradWeight.data_ptr());
        });
  }
}

// ---- pooling --------------------------------------------------------------------------------------------

void CudaBackend::maxPool2d(const Tensor& out, const Tensor& indices, const Tensor& input, const Pool2dShape& s) {
  const std::int64_t n = out.numel();
  if (n == 0) return;
  auto& c = ctx();
  dispatchFloating(input.dtype(), "max_pool2d", [&](auto tag) {
    using T = typename decltype(tag)::type;
    maxPool2dKernel<<<blocksFor(n, c), kThreads, 0, c.computeStream()>>>(out.data<T>(), indices.data<std::int64_t>(),
                                                                          input.data<T>(), s, n);
    GPULAB_CUDA_CHECK_LAUNCH();
  });
}

void CudaBackend::maxPool2dBackward(const Tensor& gradInput, const Tensor& gradOut, const Tensor& indices,
                                    const Pool2dShape& s) {
  const std::int64_t n = gradInput.numel();
  if (n == 0) return;
  auto& c = ctx();
  dispatchFloating(gradOut.dtype(), "max_pool2d_backward", [&](auto tag) {
    using T = typename decltype(tag)::type;
    maxPool2dBackwardKernel<<<blocksFor(n, c), kThreads, 0, c.computeStream()>>>(
        gradInput.data<T>(), gradOut.data<T>(), indices.data<std::int64_t>(), s, n);
    GPULAB_CUDA_CHECK_LAUNCH();
  });
}

void CudaBackend::avgPool2d(const Tensor& out, const Tensor& input, const Pool2dShape& s) {
  const std::int64_t n = out.numel();
  if (n == 0) return;
  auto& c = ctx();
  dispatchFloating(input.dtype(), "avg_pool2d", [&](auto tag) {
    using T = typename decltype(tag)::type;
    avgPool2dKernel<<<blocksFor(n, c), kThreads, 0, c.computeStream()>>>(out.data<T>(), input.data<T>(), s, n);
    GPULAB_CUDA_CHECK_LAUNCH();
  });
}

void CudaBackend::avgPool2dBackward(const Tensor& gradInput, const Tensor& gradOut, const Pool2dShape& s) {
  const std::int64_t n = gradInput.numel();
  if (n == 0) return;
  auto& c = ctx();
  dispatchFloating(gradOut.dtype(), "avg_pool2d_backward", [&](auto tag) {
    using T = typename decltype(tag)::type;
    avgPool2dBackwardKernel<<<blocksFor(n, c), kThreads, 0, c.computeStream()>>>(gradInput.data<T>(), gradOut.data<T>(), s, n);
    GPULAB_CUDA_CHECK_LAUNCH();
  });
}

void CudaBackend::adaptiveAvgPool2d(const Tensor& out, const Tensor& input, const Pool2dShape& s) {
  const std::int64_t n = out.numel();
  if (n == 0) return;
  auto& c = ctx();
  dispatchFloating(input.dtype(), "adaptive_avg_pool2d", [&](auto tag) {
    using T = typename decltype(tag)::type;
    adaptiveAvgPool2dKernel<<<blocksFor(n, c), kThreads, 0, c.computeStream()>>>(out.data<T>(), input.data<T>(), s, n);
    GPULAB_CUDA_CHECK_LAUNCH();
  });
}

void CudaBackend::adaptiveAvgPool2dBackward(const Tensor& gradInput, const Tensor& gradOut, const Pool2dShape& s) {
  const std::int64_t n = gradInput.numel();
  if (n == 0) return;
  auto& c = ctx();
  dispatchFloating(gradOut.dtype(), "adaptive_avg_pool2d_backward", [&](auto tag) {
    using T = typename decltype(tag)::type;
    adaptiveAvgPool2dBackwardKernel<<<blocksFor(n, c), kThreads, 0, c.computeStream()>>>(gradInput.data<T>(),
                                                                                          gradOut.data<T>(), s, n);
    GPULAB_CUDA_CHECK_LAUNCH();
  });
}

}  // namespace gpulab
