// 2-D convolution and pooling on the GPU (reference: conv/cpu.cpp), NCHW, contiguous tensors.
//
// Convolutions go through cuDNN's legacy API (cudnnConvolutionForward / BackwardData / BackwardFilter),
// as PyTorch's Conv_v7.cpp does:
// - Descriptors: a 4-d NCHW tensor descriptor for the input and the output, a filter descriptor
//   (K, C / groups, R, S), a convolution descriptor (padding, stride, dilation, cross-correlation --
//   PyTorch's "convolution" --, the group count, the compute type and the math type). They are made
//   once per key of the algorithm cache (below) and kept with the chosen algorithm, freed by RAII
//   (CudnnDescriptor).
// - Data and compute types: float32 -> FLOAT/FLOAT, float64 -> DOUBLE/DOUBLE, float16 -> HALF/FLOAT,
//   bfloat16 -> BFLOAT16/FLOAT: the 16-bit types accumulate in float, as the CPU reference does.
// - Math types (what cuDNN may run on tensor cores):
//     float16, bfloat16: CUDNN_TENSOR_OP_MATH (tensor cores, float accumulation).
//     float32: CUDNN_FMA_MATH unless cudnnAllowTf32() (torch.backends.cudnn.allow_tf32, on by default,
//       unlike matmul's allowTf32()), then CUDNN_DEFAULT_MATH. Since cuDNN 8, DEFAULT_MATH
//       lets a float32 convolution run on TF32 tensor cores (inputs rounded to a 10-bit mantissa), and
//       FMA_MATH is the one mode that forbids it -- so FMA_MATH is how "no TF32" is said, as PyTorch
//       does. CUDNN_TENSOR_OP_MATH_ALLOW_CONVERSION would be wrong for either: it lets cuDNN convert
//       float32 tensors down to float16.
//     float64: CUDNN_DEFAULT_MATH (there are no float64 tensor-core convolutions to opt into).
// - Algorithm: cuDNN's heuristics (cudnnGet*Algorithm_v7), best first, or with cudnnBenchmark() the
//   candidates cudnnFind*AlgorithmEx timed on the call's buffers, fastest first; the first whose math
//   type is allowed, which is deterministic when cudnnDeterministic() asks for it, whose workspace the
//   caching allocator can give, and which cuDNN accepts for this shape is run. A workspace that does
//   not fit (OutOfMemoryError) moves on to the next algorithm, which usually needs less -- PyTorch's
//   fallback too. The choice is made once per key and cached per device with the descriptors, and
//   recorded for cudnnChoices() ("the algorithm cache" below).
// - Workspace: a tensor on the device from the caching allocator, tagged MemoryCategory::Workspace, so
//   it shows in the memory views and the stats like any other block; it is freed when the call
//   returns, which is safe because every later use of the block is ordered after cuDNN's kernels on the
//   stream it was allocated for, the current one (engine/kernels/cuda/cuda_context.h).
// - cuDNN's tensor descriptors hold int sizes and strides, and its kernels index with 32 bits: a batch
//   whose input or output has 2^31 elements or more is run in chunks of samples (PyTorch splits the
//   batch the same way); the weight gradient of later chunks accumulates (beta = 1).
// - Bias: written into the output first, then the convolution adds its sum to it (beta = 1), so a
//   16-bit output is rounded once, as on the CPU (PyTorch adds it after, with cudnnAddTensor, and
//   rounds twice; see broadcastBias).
//
// Pools are plain kernels with PyTorch's window rules (the CPU reference's): cuDNN's pooling does not
// return max_pool2d's indices. Each thread owns one output element in the forward passes and one input
// element in the backward passes, which gather over the output windows that contain their element --
// deterministic, no atomics (none on 16-bit types either), every gradient element written once, so the
// gradient needs no zeroing first.
#include <cuda_runtime.h>
#include <cudnn.h>

#include <algorithm>
#include <array>
#include <chrono>
#include <climits>
#include <cstdint>
#include <cstdio>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "engine/core/dispatch.h"
#include "engine/core/errors.h"
#include "engine/kernels/cuda/cuda_backend.h"
#include "engine/kernels/cuda/launch.cuh"
#include "engine/memory/caching_allocator.h"
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
      const bool tf32 = cudnnAllowTf32();  // torch.backends.cudnn.allow_tf32, not matmul's flag
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
// Kept in the algorithm cache's plans (below), so a training loop makes them, and asks cuDNN for an
// algorithm, once per layer and pass instead of once per call.
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

// ---- the algorithm cache (torch.backends.cudnn.benchmark / deterministic / allow_tf32) -----------------
//
// A convolution chunk is keyed by its pass, its shape (the chunk's batch, channels, sizes, kernel,
// stride, padding, dilation, groups), its dtype, its cuDNN data/compute/math types and the three flags
// as they were when it ran. The first call of a key chooses -- cuDNN's heuristics (cudnnGet*Algorithm_v7,
// best first) or, in benchmark mode, cudnnFind*AlgorithmEx, which runs every candidate on the call's own
// buffers and returns them fastest first -- and runs the first candidate that is allowed (math type;
// CUDNN_DETERMINISTIC when deterministic is on, in either mode), whose workspace the caching allocator
// can give and which cuDNN accepts. The key then maps to a plan: the descriptors (math type set to the
// chosen algorithm's) and the candidates in order; later calls of the key reuse both and ask cuDNN
// nothing. The choice is recorded once (cudnnChoices) with every candidate's trial.
//
// Thread safety, per device: `mutex` guards the map and the records and is held only to look up or
// insert; plans are immutable once published and shared (std::shared_ptr), so clearCudnnChoices while
// another thread runs a plan only drops the map's reference. `searchMutex` serialises choosing: two
// threads that meet a new shape at once choose it once (the second finds the first's plan), and two
// benchmark searches never overlap on the GPU, which would spoil each other's timings.

enum class Pass { Forward = 0, BackwardData = 1, BackwardFilter = 2 };

const char* passName(Pass p) {
  switch (p) {
    case Pass::Forward: return "forward";
    case Pass::BackwardData: return "backward data";
    case Pass::BackwardFilter: return "backward filter";
  }
  return "?";
}

#define GPULAB_CUDNN_ALGO_NAME(e) \
  case e: return #e;
const char* algoName(cudnnConvolutionFwdAlgo_t a) {
  switch (a) {
    GPULAB_CUDNN_ALGO_NAME(CUDNN_CONVOLUTION_FWD_ALGO_IMPLICIT_GEMM)
    GPULAB_CUDNN_ALGO_NAME(CUDNN_CONVOLUTION_FWD_ALGO_IMPLICIT_PRECOMP_GEMM)
    GPULAB_CUDNN_ALGO_NAME(CUDNN_CONVOLUTION_FWD_ALGO_GEMM)
    GPULAB_CUDNN_ALGO_NAME(CUDNN_CONVOLUTION_FWD_ALGO_DIRECT)
    GPULAB_CUDNN_ALGO_NAME(CUDNN_CONVOLUTION_FWD_ALGO_FFT)
    GPULAB_CUDNN_ALGO_NAME(CUDNN_CONVOLUTION_FWD_ALGO_FFT_TILING)
    GPULAB_CUDNN_ALGO_NAME(CUDNN_CONVOLUTION_FWD_ALGO_WINOGRAD)
    GPULAB_CUDNN_ALGO_NAME(CUDNN_CONVOLUTION_FWD_ALGO_WINOGRAD_NONFUSED)
    default: return "CUDNN_CONVOLUTION_FWD_ALGO_(unknown)";
  }
}
const char* algoName(cudnnConvolutionBwdDataAlgo_t a) {
  switch (a) {
    GPULAB_CUDNN_ALGO_NAME(CUDNN_CONVOLUTION_BWD_DATA_ALGO_0)
    GPULAB_CUDNN_ALGO_NAME(CUDNN_CONVOLUTION_BWD_DATA_ALGO_1)
    GPULAB_CUDNN_ALGO_NAME(CUDNN_CONVOLUTION_BWD_DATA_ALGO_FFT)
    GPULAB_CUDNN_ALGO_NAME(CUDNN_CONVOLUTION_BWD_DATA_ALGO_FFT_TILING)
    GPULAB_CUDNN_ALGO_NAME(CUDNN_CONVOLUTION_BWD_DATA_ALGO_WINOGRAD)
    GPULAB_CUDNN_ALGO_NAME(CUDNN_CONVOLUTION_BWD_DATA_ALGO_WINOGRAD_NONFUSED)
    default: return "CUDNN_CONVOLUTION_BWD_DATA_ALGO_(unknown)";
  }
}
const char* algoName(cudnnConvolutionBwdFilterAlgo_t a) {
  switch (a) {
    GPULAB_CUDNN_ALGO_NAME(CUDNN_CONVOLUTION_BWD_FILTER_ALGO_0)
    GPULAB_CUDNN_ALGO_NAME(CUDNN_CONVOLUTION_BWD_FILTER_ALGO_1)
    GPULAB_CUDNN_ALGO_NAME(CUDNN_CONVOLUTION_BWD_FILTER_ALGO_FFT)
    GPULAB_CUDNN_ALGO_NAME(CUDNN_CONVOLUTION_BWD_FILTER_ALGO_3)
    GPULAB_CUDNN_ALGO_NAME(CUDNN_CONVOLUTION_BWD_FILTER_ALGO_WINOGRAD)
    GPULAB_CUDNN_ALGO_NAME(CUDNN_CONVOLUTION_BWD_FILTER_ALGO_WINOGRAD_NONFUSED)
    GPULAB_CUDNN_ALGO_NAME(CUDNN_CONVOLUTION_BWD_FILTER_ALGO_FFT_TILING)
    default: return "CUDNN_CONVOLUTION_BWD_FILTER_ALGO_(unknown)";
  }
}
#undef GPULAB_CUDNN_ALGO_NAME

const char* mathName(cudnnMathType_t m) {
  switch (m) {
    case CUDNN_DEFAULT_MATH: return "CUDNN_DEFAULT_MATH";
    case CUDNN_TENSOR_OP_MATH: return "CUDNN_TENSOR_OP_MATH";
    case CUDNN_TENSOR_OP_MATH_ALLOW_CONVERSION: return "CUDNN_TENSOR_OP_MATH_ALLOW_CONVERSION";
    case CUDNN_FMA_MATH: return "CUDNN_FMA_MATH";
    default: return "an unknown math type";
  }
}

std::string mebibytes(std::size_t bytes) {
  char text[32];
  std::snprintf(text, sizeof text, "%.1f MiB", static_cast<double>(bytes) / (1 << 20));
  return text;
}

// One algorithm as cuDNN ranked it, and what became of it.
struct Candidate {
  int algo = 0;
  std::string name;
  cudnnMathType_t math = CUDNN_DEFAULT_MATH;  // what the descriptor is set to when it runs
  std::size_t workspace = 0;
  bool deterministic = false;
  double ms = -1;      // cudnnFind's time; -1 from the heuristics
  bool usable = true;  // allowed (status, math type, determinism); may still fail to run
  std::string status = "ok";
};

// What a key maps to: the descriptors, their math type the chosen algorithm's, and the candidates.
struct ConvPlan {
  ConvDescriptors d;
  std::vector<Candidate> candidates;
  std::size_t chosen = 0;
  ConvPlan(const Conv& s, std::int64_t batch, const CudnnTypes& t) : d(s, batch, t) {}
};

using ConvKey = std::array<std::int64_t, 24>;

ConvKey makeKey(Pass pass, const Conv& s, std::int64_t batch, DType dtype, const CudnnTypes& t, bool benchmark,
                bool deterministic, bool tf32) {
  return {static_cast<std::int64_t>(pass), batch, s.inChannels, s.inH, s.inW, s.outChannels, s.kernelH, s.kernelW,
          s.outH, s.outW, s.strideH, s.strideW, s.padH, s.padW, s.dilationH, s.dilationW, s.groups,
          static_cast<std::int64_t>(dtype), static_cast<std::int64_t>(t.data), static_cast<std::int64_t>(t.compute),
          static_cast<std::int64_t>(t.math), benchmark, deterministic, tf32};
}

struct DeviceConvCache {
  std::mutex mutex;  // guards plans and choices
  std::map<ConvKey, std::shared_ptr<const ConvPlan>> plans;
  std::vector<ConvAlgorithmChoice> choices;
  std::mutex searchMutex;  // held while a key is chosen
};

// Per device, created on first use and never destroyed: a plan may be in use on another thread at exit,
// and its cuDNN descriptors need no teardown beyond the process's.
struct ConvCacheRegistry {
  std::mutex mutex;
  std::map<int, std::unique_ptr<DeviceConvCache>> caches;
};
ConvCacheRegistry& convCacheRegistry() {
  static auto* registry = new ConvCacheRegistry;
  return *registry;
}
DeviceConvCache* findConvCache(int device, bool create) {
  ConvCacheRegistry& r = convCacheRegistry();
  std::lock_guard lock(r.mutex);
  auto it = r.caches.find(device);
  if (it != r.caches.end()) return it->second.get();
  if (!create) return nullptr;
  return r.caches.emplace(device, std::make_unique<DeviceConvCache>()).first->second.get();
}

std::string pairText(std::int64_t a, std::int64_t b) {
  return a == b ? std::to_string(a) : "(" + std::to_string(a) + ", " + std::to_string(b) + ")";
}

// "input [64, 32, 14, 14], weight [64, 32, 3, 3], stride 1, padding 1, float32"
std::string shapeText(const Conv& s, std::int64_t batch, DType dtype, bool tf32, bool deterministic) {
  std::string text = "input [" + std::to_string(batch) + ", " + std::to_string(s.inChannels) + ", " + std::to_string(s.inH) +
                     ", " + std::to_string(s.inW) + "], weight [" + std::to_string(s.outChannels) + ", " +
                     std::to_string(s.groups > 0 ? s.inChannels / s.groups : s.inChannels) + ", " +
                     std::to_string(s.kernelH) + ", " + std::to_string(s.kernelW) + "], stride " +
                     pairText(s.strideH, s.strideW) + ", padding " + pairText(s.padH, s.padW);
  if (s.dilationH != 1 || s.dilationW != 1) text += ", dilation " + pairText(s.dilationH, s.dilationW);
  if (s.groups != 1) text += ", groups " + std::to_string(s.groups);
  text += ", " + dtypeName(dtype);
  if (dtype == DType::Float32) text += tf32 ? " (TF32 allowed)" : " (no TF32)";
  if (deterministic) text += ", deterministic only";
  return text;
}

// How much workspace a benchmark search may use, PyTorch's bound: the largest free block the caching
// allocator holds already, or -- when that is smaller -- what the device has free, but of new memory at
// most kSearchWorkspaceCap and never past the allocator's cap (memory fraction). The cap on new memory
// keeps a search from growing the cache by gigabytes for one FFT algorithm's workspace (the cache would
// keep it); a candidate that needs more is listed with that reason.
constexpr std::size_t kSearchWorkspaceCap = std::size_t{1} << 30;

std::size_t searchWorkspaceLimit(Device device) {
  CachingAllocator& alloc = deviceAllocator(device.index());
  std::size_t largestFree = 0;
  for (const AllocatorSegmentInfo& seg : alloc.segments()) {
    if (seg.small) continue;  // the small pool never serves a request over 1 MiB
    for (const AllocatorBlockInfo& b : seg.blocks)
      if (!b.allocated) largestFree = std::max(largestFree, static_cast<std::size_t>(b.size));
  }
  std::size_t freeBytes = 0, totalBytes = 0;
  if (cudaMemGetInfo(&freeBytes, &totalBytes) != cudaSuccess) {
    cudaGetLastError();  // not sticky; clear it
    freeBytes = 0;
  }
  std::size_t fresh = std::min(freeBytes, kSearchWorkspaceCap);
  if (const std::optional<std::int64_t> cap = alloc.effectiveCap()) {
    const std::int64_t room = *cap - alloc.stats().reserved_bytes.current;
    fresh = std::min(fresh, static_cast<std::size_t>(std::max<std::int64_t>(room, 0)));
  }
  return std::max(largestFree, fresh);
}

// Tries cands[i] for i = 0, 1, ... in order (the usable ones), returns the index that ran. With
// `record`, notes on each candidate why it did not run and the workspace it asked for.
template <class Ops>
std::size_t runCandidates(Ops& ops, ConvDescriptors& d, std::vector<Candidate>& cands, Device device, bool record) {
  std::string lastOom;
  for (std::size_t i = 0; i < cands.size(); ++i) {
    Candidate& c = cands[i];
    if (!c.usable) continue;
    GPULAB_CUDA_CHECK(cudnnSetConvolutionMathType(d.conv.get(), c.math));
    std::size_t bytes = 0;
    if (const cudnnStatus_t st = ops.workspaceSize(d, c.algo, &bytes); st != CUDNN_STATUS_SUCCESS) {
      if (record) c.status = std::string("no workspace size: ") + cudnnGetErrorString(st);
      continue;
    }
    if (record) c.workspace = bytes;
    Tensor workspace;
    if (bytes > 0) {
      try {
        workspace = allocateWorkspace(bytes, device);
      } catch (const OutOfMemoryError& e) {
        lastOom = e.what();
        if (record) c.status = "out of memory for its workspace (" + mebibytes(bytes) + ")";
        continue;  // the next algorithm may need less
      }
    }
    const cudnnStatus_t status = ops.execute(d, c.algo, bytes > 0 ? workspace.data_ptr() : nullptr, bytes);
    if (status == CUDNN_STATUS_NOT_SUPPORTED) {  // cuDNN refuses this algorithm for this shape
      if (record) c.status = "not supported for this shape";
      continue;
    }
    GPULAB_CUDA_CHECK(status);
    return i;
  }
  if (!lastOom.empty()) throw OutOfMemoryError(lastOom + " (the workspace of every cuDNN algorithm for " + Ops::kOp + ")");
  throw CudaError(std::string("CUDA error: cuDNN found no algorithm for ") + Ops::kOp + " with these parameters");
}

// cuDNN's results (heuristic or timed) as candidates, marking those this call may not use.
template <class Ops>
std::vector<Candidate> candidatesFrom(const std::vector<typename Ops::Perf>& perfs, const CudnnTypes& t, bool deterministic,
                                      bool timed, std::size_t searchBytes, const std::vector<std::size_t>& sizeByAlgo) {
  std::vector<Candidate> out;
  for (const auto& p : perfs) {
    Candidate c;
    c.algo = static_cast<int>(p.algo);
    c.name = algoName(p.algo);
    c.deterministic = p.determinism == CUDNN_DETERMINISTIC;
    c.workspace = p.memory;
    c.math = p.mathType;
    if (p.status != CUDNN_STATUS_SUCCESS) {
      c.usable = false;
      const std::size_t index = static_cast<std::size_t>(p.algo);
      if (timed && index < sizeByAlgo.size() && sizeByAlgo[index] > searchBytes) {
        c.workspace = sizeByAlgo[index];
        c.status = "needs " + mebibytes(sizeByAlgo[index]) + " of workspace, more than the search's " +
                   mebibytes(searchBytes);
      } else {
        c.status = cudnnGetErrorString(p.status);
      }
    } else if (cudnnMathType_t use = CUDNN_DEFAULT_MATH; !acceptMath(t, p.mathType, use)) {
      c.usable = false;
      c.status = std::string("math type ") + mathName(p.mathType) + " not allowed (" +
                 (t.fp32NoTf32 ? "TF32 is off" : "it would convert float32 down to float16") + ")";
    } else if (deterministic && !c.deterministic) {
      c.usable = false;
      c.status = "not deterministic (cudnn.deterministic or use_deterministic_algorithms is on)";
    } else {
      c.math = use;
      if (timed) c.ms = p.time;
    }
    if (timed && p.status == CUDNN_STATUS_SUCCESS) c.ms = p.time;
    out.push_back(std::move(c));
  }
  return out;
}

// Runs the plan's chosen algorithm; if its workspace cannot be had now (or cuDNN refuses it), the
// plan's other candidates on fresh descriptors, as the first call would have.
template <class Ops>
void runPlan(Ops& ops, const ConvPlan& plan, const Conv& s, std::int64_t batch, const CudnnTypes& t, Device device) {
  const Candidate& c = plan.candidates[plan.chosen];
  Tensor workspace;
  bool haveWorkspace = true;
  if (c.workspace > 0) {
    try {
      workspace = allocateWorkspace(c.workspace, device);
    } catch (const OutOfMemoryError&) {
      haveWorkspace = false;
    }
  }
  if (haveWorkspace) {
    const cudnnStatus_t status = ops.execute(plan.d, c.algo, c.workspace > 0 ? workspace.data_ptr() : nullptr, c.workspace);
    if (status != CUDNN_STATUS_NOT_SUPPORTED) {
      GPULAB_CUDA_CHECK(status);
      return;
    }
  }
  workspace = Tensor();
  ConvDescriptors d(s, batch, t);
  std::vector<Candidate> rest = plan.candidates;
  rest[plan.chosen].usable = false;
  runCandidates(ops, d, rest, device, false);
}

// One chunk of one pass: through the device's cache (see above).
template <class Ops>
void runConvolution(Ops& ops, const Conv& s, std::int64_t batch, const CudnnTypes& t, DType dtype, Device device) {
  // torch.use_deterministic_algorithms(True) asks for what cudnn.deterministic does, as in PyTorch.
  const bool benchmark = cudnnBenchmark(), deterministic = cudnnDeterministic() || deterministicAlgorithms(), tf32 = cudnnAllowTf32();
  const ConvKey key = makeKey(Ops::kPass, s, batch, dtype, t, benchmark, deterministic, tf32);
  DeviceConvCache& cache = *findConvCache(device.index(), true);
  auto lookup = [&]() -> std::shared_ptr<const ConvPlan> {
    std::lock_guard lock(cache.mutex);
    const auto it = cache.plans.find(key);
    return it == cache.plans.end() ? nullptr : it->second;
  };
  if (const auto plan = lookup()) return runPlan(ops, *plan, s, batch, t, device);
  std::unique_lock search(cache.searchMutex);
  if (const auto plan = lookup()) {  // another thread chose it meanwhile
    search.unlock();
    return runPlan(ops, *plan, s, batch, t, device);
  }

  const auto started = std::chrono::steady_clock::now();
  auto plan = std::make_shared<ConvPlan>(s, batch, t);
  ConvDescriptors& d = plan->d;
  int count = ops.maxCount();
  std::vector<typename Ops::Perf> perfs(static_cast<std::size_t>(count));
  int returned = 0;
  std::size_t searchBytes = 0;
  std::vector<std::size_t> sizeByAlgo;
  if (benchmark) {
    // The search's workspace: the largest any algorithm asks for, within searchWorkspaceLimit; if the
    // allocator cannot give that after all, the next smaller size.
    std::vector<std::size_t> sizes;
    sizeByAlgo.assign(static_cast<std::size_t>(Ops::kAlgoCount), 0);
    for (int a = 0; a < Ops::kAlgoCount; ++a) {
      std::size_t bytes = 0;
      if (ops.workspaceSize(d, a, &bytes) == CUDNN_STATUS_SUCCESS) {
        sizeByAlgo[static_cast<std::size_t>(a)] = bytes;
        sizes.push_back(bytes);
      }
    }
    const std::size_t limit = searchWorkspaceLimit(device);
    std::sort(sizes.rbegin(), sizes.rend());
    sizes.erase(std::unique(sizes.begin(), sizes.end()), sizes.end());
    Tensor workspace;
    for (const std::size_t bytes : sizes) {
      if (bytes > limit) continue;
      if (bytes == 0) break;
      try {
        workspace = allocateWorkspace(bytes, device);
        searchBytes = bytes;
        break;
      } catch (const OutOfMemoryError&) {
      }
    }
    GPULAB_CUDA_CHECK(ops.find(d, count, &returned, perfs.data(), searchBytes > 0 ? workspace.data_ptr() : nullptr,
                               searchBytes));
  } else {
    GPULAB_CUDA_CHECK(ops.heuristics(d, count, &returned, perfs.data()));
  }
  perfs.resize(static_cast<std::size_t>(std::clamp(returned, 0, count)));
  plan->candidates = candidatesFrom<Ops>(perfs, t, deterministic, benchmark, searchBytes, sizeByAlgo);
  plan->chosen = runCandidates(ops, d, plan->candidates, device, true);  // d's math is now the chosen one's
  const double searchMs = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - started).count();

  ConvAlgorithmChoice choice;
  choice.pass = passName(Ops::kPass);
  choice.shape = shapeText(s, batch, dtype, tf32, deterministic);
  choice.how = benchmark ? "benchmark" : "heuristics";
  choice.searchMilliseconds = searchMs;
  for (std::size_t i = 0; i < plan->candidates.size(); ++i) {
    const Candidate& c = plan->candidates[i];
    ConvAlgorithmTrial trial;
    trial.algorithm = c.name;
    trial.milliseconds = c.ms;
    trial.workspace = c.workspace;
    trial.deterministic = c.deterministic;
    trial.chosen = i == plan->chosen;
    trial.status = c.status;
    choice.trials.push_back(std::move(trial));
  }
  std::lock_guard lock(cache.mutex);
  cache.plans.emplace(key, std::move(plan));
  cache.choices.push_back(std::move(choice));
}

// The bias, rounded once with the sum. out[n, k, h, w] = bias[k] is written first, and cuDNN then adds
// its sum with beta = 1: y = sum + y is formed in the compute type (float for the 16-bit types) and
// rounded once on store, as the CPU reference rounds. Adding the bias after the convolution, as PyTorch
// does (cudnnAddTensor), rounds twice -- once when cuDNN stores the 16-bit sum, again after the add --
// and a sum close to -bias then keeps none of its digits (measured on an H200: bfloat16 gave 0 where
// the exact result was 0.00155).
template <class T>
__global__ void broadcastBiasKernel(T* out, const T* bias, std::int64_t channels, std::int64_t plane, std::int64_t n) {
  GPULAB_GRID_STRIDE(i, n) { out[i] = bias[(i / plane) % channels]; }
}

// `samples` x the bias's channels x `plane` elements at y, each its channel's bias.
void broadcastBias(void* y, const Tensor& bias, std::int64_t samples, std::int64_t plane) {
  const std::int64_t channels = bias.numel(), n = samples * channels * plane;
  if (n == 0) return;
  cuda::DeviceContext& c = cuda::context(bias.device().index());
  dispatchFloating(bias.dtype(), "conv2d", [&](auto tag) {
    using T = typename decltype(tag)::type;
    broadcastBiasKernel<<<blocksFor(n, c), kThreads, 0, c.currentStream()>>>(static_cast<T*>(y), bias.data<T>(),
                                                                              channels, plane, n);
    GPULAB_CUDA_CHECK_LAUNCH();
  });
}

// The three passes for runConvolution: cuDNN's calls on one chunk's buffers.
struct ForwardOps {
  using Perf = cudnnConvolutionFwdAlgoPerf_t;
  static constexpr Pass kPass = Pass::Forward;
  static constexpr const char* kOp = "conv2d";
  static constexpr int kAlgoCount = CUDNN_CONVOLUTION_FWD_ALGO_COUNT;
  cudnnHandle_t h;
  const CudnnTypes& t;
  const void* x;
  const void* w;
  void* y;
  int maxCount() const {
    int n = 0;
    if (cudnnGetConvolutionForwardAlgorithmMaxCount(h, &n) != CUDNN_STATUS_SUCCESS) n = 0;
    return std::max(n, kAlgoCount);
  }
  cudnnStatus_t heuristics(const ConvDescriptors& d, int n, int* got, Perf* p) const {
    return cudnnGetConvolutionForwardAlgorithm_v7(h, d.x.get(), d.w.get(), d.conv.get(), d.y.get(), n, got, p);
  }
  cudnnStatus_t find(const ConvDescriptors& d, int n, int* got, Perf* p, void* ws, std::size_t bytes) const {
    // The output is the call's own: it is written again when the chosen algorithm runs.
    return cudnnFindConvolutionForwardAlgorithmEx(h, d.x.get(), x, d.w.get(), w, d.conv.get(), d.y.get(), y, n, got, p,
                                                  ws, bytes);
  }
  cudnnStatus_t workspaceSize(const ConvDescriptors& d, int algo, std::size_t* bytes) const {
    return cudnnGetConvolutionForwardWorkspaceSize(h, d.x.get(), d.w.get(), d.conv.get(), d.y.get(),
                                                   static_cast<cudnnConvolutionFwdAlgo_t>(algo), bytes);
  }
  // The bias to start y from (see broadcastBias), or none: y = sum.
  const Tensor* bias;
  std::int64_t samples, plane;
  cudnnStatus_t execute(const ConvDescriptors& d, int algo, void* ws, std::size_t bytes) const {
    // Written again before each try: a candidate cuDNN refuses writes nothing, and find() scribbles on y.
    if (bias) broadcastBias(y, *bias, samples, plane);
    return cudnnConvolutionForward(h, kOne.ptr(t), d.x.get(), x, d.w.get(), w, d.conv.get(),
                                   static_cast<cudnnConvolutionFwdAlgo_t>(algo), ws, bytes,
                                   (bias ? kOne : kZero).ptr(t), d.y.get(), y);
  }
};

struct BackwardDataOps {
  using Perf = cudnnConvolutionBwdDataAlgoPerf_t;
  static constexpr Pass kPass = Pass::BackwardData;
  static constexpr const char* kOp = "conv2d_backward_input";
  static constexpr int kAlgoCount = CUDNN_CONVOLUTION_BWD_DATA_ALGO_COUNT;
  cudnnHandle_t h;
  const CudnnTypes& t;
  const void* w;
  const void* dy;
  void* dx;
  int maxCount() const {
    int n = 0;
    if (cudnnGetConvolutionBackwardDataAlgorithmMaxCount(h, &n) != CUDNN_STATUS_SUCCESS) n = 0;
    return std::max(n, kAlgoCount);
  }
  cudnnStatus_t heuristics(const ConvDescriptors& d, int n, int* got, Perf* p) const {
    return cudnnGetConvolutionBackwardDataAlgorithm_v7(h, d.w.get(), d.y.get(), d.conv.get(), d.x.get(), n, got, p);
  }
  cudnnStatus_t find(const ConvDescriptors& d, int n, int* got, Perf* p, void* ws, std::size_t bytes) const {
    // The input gradient is the call's own: it is written again when the chosen algorithm runs.
    return cudnnFindConvolutionBackwardDataAlgorithmEx(h, d.w.get(), w, d.y.get(), dy, d.conv.get(), d.x.get(), dx, n, got,
                                                       p, ws, bytes);
  }
  cudnnStatus_t workspaceSize(const ConvDescriptors& d, int algo, std::size_t* bytes) const {
    return cudnnGetConvolutionBackwardDataWorkspaceSize(h, d.w.get(), d.y.get(), d.conv.get(), d.x.get(),
                                                        static_cast<cudnnConvolutionBwdDataAlgo_t>(algo), bytes);
  }
  cudnnStatus_t execute(const ConvDescriptors& d, int algo, void* ws, std::size_t bytes) const {
    return cudnnConvolutionBackwardData(h, kOne.ptr(t), d.w.get(), w, d.y.get(), dy, d.conv.get(),
                                        static_cast<cudnnConvolutionBwdDataAlgo_t>(algo), ws, bytes, kZero.ptr(t),
                                        d.x.get(), dx);
  }
};

struct BackwardFilterOps {
  using Perf = cudnnConvolutionBwdFilterAlgoPerf_t;
  static constexpr Pass kPass = Pass::BackwardFilter;
  static constexpr const char* kOp = "conv2d_backward_weight";
  static constexpr int kAlgoCount = CUDNN_CONVOLUTION_BWD_FILTER_ALGO_COUNT;
  cudnnHandle_t h;
  const CudnnTypes& t;
  const void* x;
  const void* dy;
  void* dw;
  const Blend& beta;  // 1 for later chunks: they add to the first chunk's gradient
  const Tensor& gradWeight;
  int maxCount() const {
    int n = 0;
    if (cudnnGetConvolutionBackwardFilterAlgorithmMaxCount(h, &n) != CUDNN_STATUS_SUCCESS) n = 0;
    return std::max(n, kAlgoCount);
  }
  cudnnStatus_t heuristics(const ConvDescriptors& d, int n, int* got, Perf* p) const {
    return cudnnGetConvolutionBackwardFilterAlgorithm_v7(h, d.x.get(), d.y.get(), d.conv.get(), d.w.get(), n, got, p);
  }
  cudnnStatus_t find(const ConvDescriptors& d, int n, int* got, Perf* p, void* ws, std::size_t bytes) const {
    // Into a scratch gradient: the real one may hold earlier chunks' sum, which the search would overwrite.
    const Tensor scratch = Tensor::empty(gradWeight.shape(), gradWeight.dtype(), gradWeight.device());
    return cudnnFindConvolutionBackwardFilterAlgorithmEx(h, d.x.get(), x, d.y.get(), dy, d.conv.get(), d.w.get(),
                                                         scratch.data_ptr(), n, got, p, ws, bytes);
  }
  cudnnStatus_t workspaceSize(const ConvDescriptors& d, int algo, std::size_t* bytes) const {
    return cudnnGetConvolutionBackwardFilterWorkspaceSize(h, d.x.get(), d.y.get(), d.conv.get(), d.w.get(),
                                                          static_cast<cudnnConvolutionBwdFilterAlgo_t>(algo), bytes);
  }
  cudnnStatus_t execute(const ConvDescriptors& d, int algo, void* ws, std::size_t bytes) const {
    return cudnnConvolutionBackwardFilter(h, kOne.ptr(t), d.x.get(), x, d.y.get(), dy, d.conv.get(),
                                          static_cast<cudnnConvolutionBwdFilterAlgo_t>(algo), ws, bytes, beta.ptr(t),
                                          d.w.get(), dw);
  }
};

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
    // An empty sum (the CPU reference's colRows == 0): the bias alone, or zeros.
    if (bias) broadcastBias(out.data_ptr(), *bias, s.batch, s.outH * s.outW);
    else zeroFill(out, c.currentStream());
  } else {
    const auto cudnn = c.cudnn();  // set to this thread's stream, and held until the convolution is queued
    const cudnnHandle_t handle = cudnn.handle;
    const std::size_t elt = elementSize(input.dtype());
    const std::int64_t chunk = samplesPerChunk(s);
    for (std::int64_t n0 = 0; n0 < s.batch; n0 += chunk) {
      const std::int64_t nb = std::min(chunk, s.batch - n0);
      const char* x = static_cast<const char*>(input.data_ptr()) + n0 * s.inChannels * s.inH * s.inW * elt;
      char* y = static_cast<char*>(out.data_ptr()) + n0 * s.outChannels * s.outH * s.outW * elt;
      ForwardOps ops{handle, types, x, weight.data_ptr(), y, bias, nb, s.outH * s.outW};
      runConvolution(ops, s, nb, types, input.dtype(), out.device());
    }
  }
}

void CudaBackend::conv2dBackwardInput(const Tensor& gradInput, const Tensor& gradOut, const Tensor& weight,
                                      const Conv2dShape& s) {
  if (gradInput.numel() == 0) return;
  auto& c = ctx();
  const CudnnTypes types = cudnnTypesFor(gradOut.dtype(), "conv2d_backward_input");
  if (s.outChannels == 0 || s.outH * s.outW == 0 || s.kernelH == 0 || s.kernelW == 0) {
    zeroFill(gradInput, c.currentStream());  // no output reads any input element
    return;
  }
  const auto cudnn = c.cudnn();  // set to this thread's stream, and held until the convolution is queued
  const cudnnHandle_t handle = cudnn.handle;
  const std::size_t elt = elementSize(gradOut.dtype());
  const std::int64_t chunk = samplesPerChunk(s);
  for (std::int64_t n0 = 0; n0 < s.batch; n0 += chunk) {
    const std::int64_t nb = std::min(chunk, s.batch - n0);
    char* dx = static_cast<char*>(gradInput.data_ptr()) + n0 * s.inChannels * s.inH * s.inW * elt;
    const char* dy = static_cast<const char*>(gradOut.data_ptr()) + n0 * s.outChannels * s.outH * s.outW * elt;
    BackwardDataOps ops{handle, types, weight.data_ptr(), dy, dx};
    runConvolution(ops, s, nb, types, gradOut.dtype(), gradInput.device());
  }
}

void CudaBackend::conv2dBackwardWeight(const Tensor& gradWeight, const Tensor& gradOut, const Tensor& input,
                                       const Conv2dShape& s) {
  if (gradWeight.numel() == 0) return;
  auto& c = ctx();
  const CudnnTypes types = cudnnTypesFor(gradOut.dtype(), "conv2d_backward_weight");
  if (s.batch == 0 || s.outH * s.outW == 0) {
    zeroFill(gradWeight, c.currentStream());  // an empty sum over the batch and the output plane
    return;
  }
  const auto cudnn = c.cudnn();  // set to this thread's stream, and held until the convolution is queued
  const cudnnHandle_t handle = cudnn.handle;
  const std::size_t elt = elementSize(gradOut.dtype());
  const std::int64_t chunk = samplesPerChunk(s);
  for (std::int64_t n0 = 0; n0 < s.batch; n0 += chunk) {
    const std::int64_t nb = std::min(chunk, s.batch - n0);
    const char* x = static_cast<const char*>(input.data_ptr()) + n0 * s.inChannels * s.inH * s.inW * elt;
    const char* dy = static_cast<const char*>(gradOut.data_ptr()) + n0 * s.outChannels * s.outH * s.outW * elt;
    const Blend& beta = n0 == 0 ? kZero : kOne;  // later chunks add to the first chunk's gradient
    BackwardFilterOps ops{handle, types, x, dy, gradWeight.data_ptr(), beta, gradWeight};
    runConvolution(ops, s, nb, types, gradOut.dtype(), gradWeight.device());
  }
}

// ---- pooling --------------------------------------------------------------------------------------------

void CudaBackend::maxPool2d(const Tensor& out, const Tensor& indices, const Tensor& input, const Pool2dShape& s) {
  const std::int64_t n = out.numel();
  if (n == 0) return;
  auto& c = ctx();
  dispatchFloating(input.dtype(), "max_pool2d", [&](auto tag) {
    using T = typename decltype(tag)::type;
    maxPool2dKernel<<<blocksFor(n, c), kThreads, 0, c.currentStream()>>>(out.data<T>(), indices.data<std::int64_t>(),
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
    maxPool2dBackwardKernel<<<blocksFor(n, c), kThreads, 0, c.currentStream()>>>(
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
    avgPool2dKernel<<<blocksFor(n, c), kThreads, 0, c.currentStream()>>>(out.data<T>(), input.data<T>(), s, n);
    GPULAB_CUDA_CHECK_LAUNCH();
  });
}

void CudaBackend::avgPool2dBackward(const Tensor& gradInput, const Tensor& gradOut, const Pool2dShape& s) {
  const std::int64_t n = gradInput.numel();
  if (n == 0) return;
  auto& c = ctx();
  dispatchFloating(gradOut.dtype(), "avg_pool2d_backward", [&](auto tag) {
    using T = typename decltype(tag)::type;
    avgPool2dBackwardKernel<<<blocksFor(n, c), kThreads, 0, c.currentStream()>>>(gradInput.data<T>(), gradOut.data<T>(), s, n);
    GPULAB_CUDA_CHECK_LAUNCH();
  });
}

void CudaBackend::adaptiveAvgPool2d(const Tensor& out, const Tensor& input, const Pool2dShape& s) {
  const std::int64_t n = out.numel();
  if (n == 0) return;
  auto& c = ctx();
  dispatchFloating(input.dtype(), "adaptive_avg_pool2d", [&](auto tag) {
    using T = typename decltype(tag)::type;
    adaptiveAvgPool2dKernel<<<blocksFor(n, c), kThreads, 0, c.currentStream()>>>(out.data<T>(), input.data<T>(), s, n);
    GPULAB_CUDA_CHECK_LAUNCH();
  });
}

void CudaBackend::adaptiveAvgPool2dBackward(const Tensor& gradInput, const Tensor& gradOut, const Pool2dShape& s) {
  const std::int64_t n = gradInput.numel();
  if (n == 0) return;
  auto& c = ctx();
  dispatchFloating(gradOut.dtype(), "adaptive_avg_pool2d_backward", [&](auto tag) {
    using T = typename decltype(tag)::type;
    adaptiveAvgPool2dBackwardKernel<<<blocksFor(n, c), kThreads, 0, c.currentStream()>>>(gradInput.data<T>(),
                                                                                          gradOut.data<T>(), s, n);
    GPULAB_CUDA_CHECK_LAUNCH();
  });
}

}  // namespace gpulab

namespace gpulab::cuda {

// The module's side of cudnnChoices / clearCudnnChoices (cuda_runtime_gpu.cpp's table). A device that
// never convolved has no cache and nothing to show.
std::vector<ConvAlgorithmChoice> cudnnChoicesImpl(int device) {
  DeviceConvCache* cache = findConvCache(device, false);
  if (!cache) return {};
  std::lock_guard lock(cache->mutex);
  return cache->choices;
}

void clearCudnnChoicesImpl(int device) {
  DeviceConvCache* cache = findConvCache(device, false);
  if (!cache) return;
  std::lock_guard lock(cache->mutex);
  cache->plans.clear();  // a plan another thread is running stays alive through its shared_ptr
  cache->choices.clear();
}

}  // namespace gpulab::cuda
