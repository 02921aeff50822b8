#pragma once
// Walking N tensors of one shape with different strides, the innermost dimension as a tight loop.
// Used by the CPU backend for copies and broadcasting; the CUDA backend has its own offset calculator
// (over coalesceDims below).
#include <array>
#include <cstdint>
#include <vector>

namespace gpulab::detail {

// Calls body(offsets, count, innerStrides) once per run along the last dimension, where offsets[t]
// is the element offset of the run's first element in tensor t.
template <std::size_t N, class Body>
void forEachRun(const std::vector<std::int64_t>& sizes, const std::array<const std::int64_t*, N>& strides,
                Body&& body) {
  const std::size_t ndim = sizes.size();
  std::array<std::int64_t, N> offsets{};
  std::array<std::int64_t, N> inner{};
  if (ndim == 0) {
    body(offsets, std::int64_t{1}, inner);
    return;
  }
  for (std::size_t t = 0; t < N; ++t) inner[t] = strides[t][ndim - 1];
  const std::int64_t count = sizes[ndim - 1];
  std::int64_t runs = 1;
  for (std::size_t d = 0; d + 1 < ndim; ++d) runs *= sizes[d];
  if (count == 0 || runs == 0) return;
  std::vector<std::int64_t> index(ndim, 0);
  for (std::int64_t r = 0; r < runs; ++r) {
    body(offsets, count, inner);
    // Advance the outer index like an odometer, updating offsets incrementally.
    for (std::size_t d = ndim - 1; d-- > 0;) {
      if (++index[d] < sizes[d]) {
        for (std::size_t t = 0; t < N; ++t) offsets[t] += strides[t][d];
        break;
      }
      for (std::size_t t = 0; t < N; ++t) offsets[t] -= strides[t][d] * (sizes[d] - 1);
      index[d] = 0;
    }
  }
}

// The same walk over fewer dimensions: neighbouring dimensions that both stride lists step through as
// one (stride[d] == stride[d+1] * size[d+1] in each) are merged, and size-1 dimensions dropped. A
// contiguous tensor of any rank becomes one dimension, so index math (and the CUDA kernels' limit of
// 8 dimensions) only sees what really is strided.
struct CoalescedDims {
  std::vector<std::int64_t> sizes;
  std::array<std::vector<std::int64_t>, 2> strides;
};
inline CoalescedDims coalesceDims(const std::vector<std::int64_t>& sizes, const std::vector<std::int64_t>& s0,
                                  const std::vector<std::int64_t>& s1) {
  CoalescedDims c;
  for (std::size_t d = 0; d < sizes.size(); ++d) {
    if (sizes[d] == 1) continue;
    if (!c.sizes.empty()) {
      const std::int64_t size = sizes[d];
      if (c.strides[0].back() == s0[d] * size && c.strides[1].back() == s1[d] * size) {
        c.sizes.back() *= size;
        c.strides[0].back() = s0[d];
        c.strides[1].back() = s1[d];
        continue;
      }
    }
    c.sizes.push_back(sizes[d]);
    c.strides[0].push_back(s0[d]);
    c.strides[1].push_back(s1[d]);
  }
  return c;
}

}  // namespace gpulab::detail
