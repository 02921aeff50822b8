// Indexing kernels on the GPU (reference: index/cpu.cpp). index_select copies whole rows of `inner`
// elements, one thread per element; index_add adds with atomicAdd, so repeated indices sum (in an
// order that may vary from run to run, as PyTorch's CUDA index_add_), or -- with
// torch.use_deterministic_algorithms(True) -- one thread per column adds the rows in index order, as
// the CPU does: the same bits every run. float32 and float64 only: the op layer accumulates 16-bit
// gradients in float32.
#include <cuda_runtime.h>

#include "engine/core/dispatch.h"
#include "engine/kernels/cuda/cuda_backend.h"
#include "engine/kernels/cuda/launch.cuh"
#include "engine/runtime/cuda_runtime.h"

namespace gpulab {

using namespace cuda;

namespace {

template <class T>
__global__ void indexSelectKernel(T* out, const T* in, const std::int64_t* index, std::int64_t n, std::int64_t dimSize,
                                  std::int64_t inner, std::int64_t total) {
  GPULAB_GRID_STRIDE(e, total) {
    const std::int64_t i = e % inner, rest = e / inner, j = rest % n, o = rest / n;
    out[e] = in[(o * dimSize + index[j]) * inner + i];
  }
}

template <class T>
__global__ void indexAddKernel(T* gradIn, const T* gradOut, const std::int64_t* index, std::int64_t n, std::int64_t dimSize,
                               std::int64_t inner, std::int64_t total) {
  GPULAB_GRID_STRIDE(e, total) {
    const std::int64_t i = e % inner, rest = e / inner, j = rest % n, o = rest / n;
    atomicAdd(gradIn + (o * dimSize + index[j]) * inner + i, gradOut[e]);
  }
}

// One thread per (outer, inner) column, which adds its column of every selected row in index order: no
// two threads write one element, so no atomics and one order of additions.
template <class T>
__global__ void indexAddInOrderKernel(T* gradIn, const T* gradOut, const std::int64_t* index, std::int64_t n, std::int64_t dimSize,
                                      std::int64_t inner, std::int64_t columns) {
  GPULAB_GRID_STRIDE(c, columns) {
    const std::int64_t i = c % inner, o = c / inner;
    for (std::int64_t j = 0; j < n; ++j) gradIn[(o * dimSize + index[j]) * inner + i] += gradOut[(o * n + j) * inner + i];
  }
}

}  // namespace

void CudaBackend::indexSelect(const Tensor& out, const Tensor& in, const Tensor& index, std::int64_t outer, std::int64_t dimSize,
                              std::int64_t inner) {
  const std::int64_t total = out.numel();
  if (total == 0) return;
  auto& c = ctx();
  dispatchWithBool(in.dtype(), "index_select", [&](auto tag) {
    using T = typename decltype(tag)::type;
    indexSelectKernel<<<blocksFor(total, c), kThreads, 0, c.currentStream()>>>(out.data<T>(), in.data<T>(), index.data<std::int64_t>(),
                                                                               index.numel(), dimSize, inner, total);
    GPULAB_CUDA_CHECK_LAUNCH();
  });
}

void CudaBackend::indexAdd(const Tensor& gradIn, const Tensor& gradOut, const Tensor& index, std::int64_t outer, std::int64_t dimSize,
                           std::int64_t inner) {
  const std::int64_t total = gradOut.numel();
  if (total == 0) return;
  auto& c = ctx();
  const bool inOrder = deterministicAlgorithms();
  auto launch = [&](auto* g, const auto* go) {
    if (inOrder) {
      const std::int64_t columns = outer * inner;
      indexAddInOrderKernel<<<blocksFor(columns, c), kThreads, 0, c.currentStream()>>>(g, go, index.data<std::int64_t>(), index.numel(),
                                                                                      dimSize, inner, columns);
    } else {
      indexAddKernel<<<blocksFor(total, c), kThreads, 0, c.currentStream()>>>(g, go, index.data<std::int64_t>(), index.numel(), dimSize,
                                                                             inner, total);
    }
    GPULAB_CUDA_CHECK_LAUNCH();
  };
  if (gradIn.dtype() == kFloat32) launch(gradIn.data<float>(), gradOut.data<float>());
  else if (gradIn.dtype() == kFloat64) launch(gradIn.data<double>(), gradOut.data<double>());
  else throwNotImplementedFor("index_add_cuda_", gradIn.dtype());
}

}  // namespace gpulab
