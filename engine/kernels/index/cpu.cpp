// Indexing kernels on the CPU, the reference for index/cuda.cu: index_select gathers slices along a
// dim, index_add scatters gradients back into them (index_select's backward). The op layer views
// the tensors as (outer, dim, inner) and has checked every index against the dim's size.
#include <algorithm>
#include <cstdint>
#include <cstring>

#include "engine/core/dispatch.h"
#include "engine/core/parallel.h"
#include "engine/kernels/cpu_backend.h"

namespace gpulab {

namespace {

// One element per index (a gather from a flat tensor: x.reshape(-1).index_select(0, where)): an element
// copied as a word of its size, where a memcpy per element cost 4 ns (100k pixels of a batch of images
// 400 us on one thread).
template <class Word>
void gatherElements(void* out, const void* in, const std::int64_t* idx, std::int64_t outer, std::int64_t dimSize, std::int64_t n) {
  const Word* src = static_cast<const Word*>(in);
  Word* dst = static_cast<Word*>(out);
  parallelRanges(outer * n, 32768, [&](std::int64_t begin, std::int64_t end) {
    for (std::int64_t r = begin; r < end; ++r) dst[r] = src[(r / n) * dimSize + idx[r % n]];
  });
}

}  // namespace

void CpuBackend::indexSelect(const Tensor& out, const Tensor& in, const Tensor& index, std::int64_t outer, std::int64_t dimSize,
                             std::int64_t inner) {
  const std::int64_t* idx = index.data<std::int64_t>();
  const std::int64_t n = index.numel();
  const std::size_t rowBytes = static_cast<std::size_t>(inner) * elementSize(in.dtype());
  const auto* src = static_cast<const unsigned char*>(in.data_ptr());
  auto* dst = static_cast<unsigned char*>(out.data_ptr());
  if (inner == 1) {  // an element per index, copied as a word of its size (aligned as the element is)
    switch (rowBytes) {
      case 1: return gatherElements<std::uint8_t>(dst, src, idx, outer, dimSize, n);
      case 2: return gatherElements<std::uint16_t>(dst, src, idx, outer, dimSize, n);
      case 4: return gatherElements<std::uint32_t>(dst, src, idx, outer, dimSize, n);
      case 8: return gatherElements<std::uint64_t>(dst, src, idx, outer, dimSize, n);
      default: break;
    }
  }
  // The rows over the threads (x[idx] for a Fashion-MNIST batch, 128 rows of 3 KB: 130 us on one thread
  // here, 70 us on two).
  parallelRanges(outer * n, copyGrain(static_cast<std::int64_t>(rowBytes)), [&](std::int64_t begin, std::int64_t end) {
    for (std::int64_t r = begin; r < end; ++r) {
      const std::int64_t o = r / n, j = r % n;
      std::memcpy(dst + static_cast<std::size_t>(r) * rowBytes, src + static_cast<std::size_t>(o * dimSize + idx[j]) * rowBytes, rowBytes);
    }
  });
}

void CpuBackend::indexAdd(const Tensor& gradIn, const Tensor& gradOut, const Tensor& index, std::int64_t outer, std::int64_t dimSize,
                          std::int64_t inner) {
  const std::int64_t* idx = index.data<std::int64_t>();
  const std::int64_t n = index.numel();
  dispatchAll(gradIn.dtype(), "index_add_", [&](auto tag) {
    using T = typename decltype(tag)::type;
    T* g = gradIn.data<T>();
    const T* go = gradOut.data<T>();
    for (std::int64_t o = 0; o < outer; ++o) {
      for (std::int64_t j = 0; j < n; ++j) {
        T* row = g + (o * dimSize + idx[j]) * inner;
        const T* from = go + (o * n + j) * inner;
        for (std::int64_t i = 0; i < inner; ++i) row[i] = static_cast<T>(static_cast<OpMath<T>>(row[i]) + static_cast<OpMath<T>>(from[i]));
      }
    }
  });
}

}  // namespace gpulab
