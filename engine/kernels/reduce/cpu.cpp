// Reductions on the CPU (sum, max with argmax), the reference for reduce/cuda.cu. Floating sums
// accumulate in double: an exact-as-possible reference (the GPU sums a tree in float), rounded once
// to the output dtype; integer sums in int64, which is exact.
//
// How the sums run: one running total made the add's latency (3-4 cycles) the cost of every element --
// a sum of 32K floats took 31 us here against PyTorch's 5.5 -- and a column sum (a bias's gradient,
// sum over the batch) read and wrote its totals in memory once a row. So a run is summed in kLanes
// independent totals, and columns in blocks of kLanes totals held in registers over all the rows. A
// run longer than kSumChunk is summed chunk by chunk, the chunks' totals added in order, whether the
// chunks ran on one thread or several: the result does not depend on the thread count.
#include <algorithm>
#include <limits>
#include <type_traits>
#include <vector>

#include "engine/core/dispatch.h"
#include "engine/core/parallel.h"
#include "engine/kernels/cpu_backend.h"

namespace gpulab {

namespace {

constexpr int kLanes = 8;
constexpr std::int64_t kSumChunk = std::int64_t{1} << 16;

// The total of x[0, n) for n <= kSumChunk: kLanes interleaved totals, then the tail.
template <class Acc, class M, class T>
Acc sumOfChunk(const T* x, std::int64_t n) {
  Acc lanes[kLanes] = {};
  std::int64_t j = 0;
  for (; j + kLanes <= n; j += kLanes) {
    for (int l = 0; l < kLanes; ++l) lanes[l] += static_cast<Acc>(static_cast<M>(x[j + l]));
  }
  for (; j < n; ++j) lanes[0] += static_cast<Acc>(static_cast<M>(x[j]));
  Acc s = 0;
  for (const Acc lane : lanes) s += lane;
  return s;
}

// The total of x[0, n): its chunks' totals added in order -- the chunks on the pool's threads when
// `parallel` (one long run), one after another otherwise; the same bits either way.
template <class Acc, class M, class T>
Acc sumOfRun(const T* x, std::int64_t n, bool parallel) {
  const std::int64_t chunks = (n + kSumChunk - 1) / kSumChunk;
  if (!parallel || chunks < 2) {
    Acc s = 0;
    for (std::int64_t c = 0; c < n; c += kSumChunk) s += sumOfChunk<Acc, M>(x + c, std::min(kSumChunk, n - c));
    return s;
  }
  std::vector<Acc> partial(static_cast<std::size_t>(chunks));
  parallelRanges(chunks, std::max<std::int64_t>(1, kElementGrain / kSumChunk), [&](std::int64_t begin, std::int64_t end) {
    for (std::int64_t c = begin; c < end; ++c) {
      partial[static_cast<std::size_t>(c)] = sumOfChunk<Acc, M>(x + c * kSumChunk, std::min(kSumChunk, n - c * kSumChunk));
    }
  });
  Acc s = 0;
  for (const Acc p : partial) s += p;
  return s;
}

// Columns [c, c + width) of a (k, inner) block summed over its k rows, width <= kLanes.
template <class Acc, class M, class T>
void sumColumns(const T* base, std::int64_t k, std::int64_t inner, std::int64_t c, int width, T* out) {
  Acc totals[kLanes] = {};
  if (width == kLanes) {  // a constant count: the compiler keeps the totals in registers
    for (std::int64_t j = 0; j < k; ++j) {
      const T* row = base + j * inner + c;
      for (int l = 0; l < kLanes; ++l) totals[l] += static_cast<Acc>(static_cast<M>(row[l]));
    }
  } else {
    for (std::int64_t j = 0; j < k; ++j) {
      const T* row = base + j * inner + c;
      for (int l = 0; l < width; ++l) totals[l] += static_cast<Acc>(static_cast<M>(row[l]));
    }
  }
  for (int l = 0; l < width; ++l) out[c + l] = static_cast<T>(static_cast<M>(totals[l]));
}

// The maximum of x[0, n), n >= 1, NaN winning: kLanes independent maxima and, apart, whether a NaN was
// seen. One running maximum with its index made each compare wait on the one before: a max over 100K
// values took 155 us against PyTorch's 14 (index_select's range check takes two). With the lanes, int64
// 17 us, float 65 (GCC keeps float compares scalar without -ffast-math). The value of a max does not
// depend on how the run is cut, so long runs go over the threads.
template <class M, class T>
M maxOfChunk(const T* x, std::int64_t n) {
  M lanes[kLanes];
  M nan[kLanes] = {};  // nonzero once the lane met a NaN (never for integers)
  for (int l = 0; l < kLanes; ++l) lanes[l] = static_cast<M>(x[0]);
  std::int64_t j = 0;
  for (; j + kLanes <= n; j += kLanes) {
    for (int l = 0; l < kLanes; ++l) {
      const M v = static_cast<M>(x[j + l]);
      lanes[l] = v > lanes[l] ? v : lanes[l];
      if constexpr (std::is_floating_point_v<M>) nan[l] += v != v ? M(1) : M(0);
    }
  }
  M best = lanes[0];
  for (; j < n; ++j) {
    const M v = static_cast<M>(x[j]);
    best = v > best ? v : best;
    if (v != v) return v;
  }
  for (int l = 0; l < kLanes; ++l) {
    if (nan[l] != M(0)) return std::numeric_limits<M>::quiet_NaN();
    best = lanes[l] > best ? lanes[l] : best;
  }
  return best;
}

template <class M, class T>
M maxOfRun(const T* x, std::int64_t n, bool parallel) {
  const std::int64_t chunks = (n + kSumChunk - 1) / kSumChunk;
  if (!parallel || chunks < 2) return maxOfChunk<M>(x, n);
  std::vector<M> partial(static_cast<std::size_t>(chunks));
  parallelRanges(chunks, std::max<std::int64_t>(1, kElementGrain / kSumChunk), [&](std::int64_t begin, std::int64_t end) {
    for (std::int64_t c = begin; c < end; ++c) {
      partial[static_cast<std::size_t>(c)] = maxOfChunk<M>(x + c * kSumChunk, std::min(kSumChunk, n - c * kSumChunk));
    }
  });
  M best = partial[0];
  for (const M p : partial) best = (p > best || p != p) ? p : best;
  return best;
}

}  // namespace

void CpuBackend::reduce(ReduceOp op, const Tensor& out, const Tensor* indices, const Tensor& in, std::int64_t outer,
                        std::int64_t k, std::int64_t inner) {
  dispatchAll(in.dtype(), op == ReduceOp::Sum ? "sum" : "max", [&](auto tag) {
    using T = typename decltype(tag)::type;
    using M = OpMath<T>;
    using Acc = std::conditional_t<std::is_floating_point_v<M>, double, M>;
    const T* x = in.data<T>();
    T* o = out.data<T>();
    std::int64_t* idx = indices ? indices->data<std::int64_t>() : nullptr;
    if (op == ReduceOp::Sum) {
      if (inner == 1 && outer == 1) {  // one run: its chunks on the threads
        o[0] = static_cast<T>(static_cast<M>(sumOfRun<Acc, M>(x, k, true)));
      } else if (inner == 1) {  // rows summed: one total each, the rows on the threads
        parallelRanges(outer, std::max<std::int64_t>(1, kElementGrain / std::max<std::int64_t>(k, 1)), [&](std::int64_t begin, std::int64_t end) {
          for (std::int64_t a = begin; a < end; ++a) o[a] = static_cast<T>(static_cast<M>(sumOfRun<Acc, M>(x + a * k, k, false)));
        });
      } else {  // the middle axis of (outer, k, inner): blocks of kLanes columns, each over its k rows
        const std::int64_t blocks = (inner + kLanes - 1) / kLanes;
        parallelRanges(outer * blocks, std::max<std::int64_t>(1, kElementGrain / std::max<std::int64_t>(k * kLanes, 1)),
                       [&](std::int64_t begin, std::int64_t end) {
                         for (std::int64_t u = begin; u < end; ++u) {
                           const std::int64_t a = u / blocks, c = (u % blocks) * kLanes;
                           sumColumns<Acc, M>(x + a * k * inner, k, inner, c, static_cast<int>(std::min<std::int64_t>(kLanes, inner - c)),
                                              o + a * inner);
                         }
                       });
      }
      return;
    }
    if (!idx && inner == 1 && k > 0) {  // maxima of runs, no index asked for
      if (outer == 1) {
        o[0] = static_cast<T>(maxOfRun<M>(x, k, true));
        return;
      }
      parallelRanges(outer, std::max<std::int64_t>(1, kElementGrain / k), [&](std::int64_t begin, std::int64_t end) {
        for (std::int64_t a = begin; a < end; ++a) o[a] = static_cast<T>(maxOfRun<M>(x + a * k, k, false));
      });
      return;
    }
    // Max: the first index of the maximum, NaN counting as the maximum, as in PyTorch.
    for (std::int64_t a = 0; a < outer; ++a) {
      const T* base = x + a * k * inner;
      T* ob = o + a * inner;
      std::int64_t* ib = idx ? idx + a * inner : nullptr;
      for (std::int64_t i = 0; i < inner; ++i) {
        M best = static_cast<M>(base[i]);
        std::int64_t bestJ = 0;
        for (std::int64_t j = 1; j < k; ++j) {
          const M v = static_cast<M>(base[j * inner + i]);
          if (v > best || (v != v && best == best)) {
            best = v;
            bestJ = j;
          }
        }
        ob[i] = static_cast<T>(best);
        if (ib) ib[i] = bestJ;
      }
    }
  });
}

}  // namespace gpulab
