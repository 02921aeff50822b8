// Reductions on the CPU (sum, max with argmax), the reference for reduce/cuda.cu. Floating sums
// accumulate in double: an exact-as-possible reference (the GPU sums a tree in float), rounded once
// to the output dtype; integer sums in int64, which is exact.
#include <algorithm>
#include <type_traits>
#include <vector>

#include "engine/core/dispatch.h"
#include "engine/kernels/cpu_backend.h"

namespace gpulab {

void CpuBackend::reduce(ReduceOp op, const Tensor& out, const Tensor* indices, const Tensor& in, std::int64_t outer,
                        std::int64_t k, std::int64_t inner) {
  dispatchAll(in.dtype(), op == ReduceOp::Sum ? "sum" : "max", [&](auto tag) {
    using T = typename decltype(tag)::type;
    using M = OpMath<T>;
    using Acc = std::conditional_t<std::is_floating_point_v<M>, double, M>;
    const T* x = in.data<T>();
    T* o = out.data<T>();
    std::int64_t* idx = indices ? indices->data<std::int64_t>() : nullptr;
    std::vector<Acc> acc;
    for (std::int64_t a = 0; a < outer; ++a) {
      const T* base = x + a * k * inner;
      T* ob = o + a * inner;
      std::int64_t* ib = idx ? idx + a * inner : nullptr;
      if (op == ReduceOp::Sum) {
        if (inner == 1) {
          Acc s = 0;
          for (std::int64_t j = 0; j < k; ++j) s += static_cast<Acc>(static_cast<M>(base[j]));
          ob[0] = static_cast<T>(static_cast<M>(s));
        } else {
          acc.assign(static_cast<std::size_t>(inner), Acc(0));
          for (std::int64_t j = 0; j < k; ++j) {
            const T* row = base + j * inner;
            for (std::int64_t i = 0; i < inner; ++i) acc[static_cast<std::size_t>(i)] += static_cast<Acc>(static_cast<M>(row[i]));
          }
          for (std::int64_t i = 0; i < inner; ++i) ob[i] = static_cast<T>(static_cast<M>(acc[static_cast<std::size_t>(i)]));
        }
      } else {  // Max (first index of the maximum, NaN counts as the maximum like PyTorch)
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
    }
  });
}

}  // namespace gpulab
