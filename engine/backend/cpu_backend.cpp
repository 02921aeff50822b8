// The CPU backend: the reference implementation of every kernel. Loops are written so the compiler
// vectorises them (contiguous fast paths, no per-element dispatch); GEMM goes to OpenBLAS.
#include <cblas.h>

#include <algorithm>
#include <type_traits>
#include <cmath>
#include <limits>
#include <string>

#include "engine/backend/backend.h"
#include "engine/backend/strided.h"
#include "engine/core/errors.h"
#include "engine/runtime/cuda_runtime.h"

namespace gpulab {
namespace {

template <class F>
void dispatchDType(DType dtype, const char* what, F&& f) {
  switch (dtype) {
    case DType::Float32: return f(float{});
    case DType::Int64: return f(std::int64_t{});
    default: throw NotImplementedError(std::string(what) + " is not implemented for dtype " + dtypeName(dtype));
  }
}

bool isContiguous(const Tensor& t) { return t.is_contiguous(); }

class CpuBackend final : public Backend {
 public:
  void fill(const Tensor& out, double value) override {
    dispatchDType(out.dtype(), "fill", [&](auto zero) {
      using T = decltype(zero);
      std::fill_n(out.data<T>(), out.numel(), static_cast<T>(value));
    });
  }

  void arange(const Tensor& out, double start, double step) override {
    dispatchDType(out.dtype(), "arange", [&](auto zero) {
      using T = decltype(zero);
      T* o = out.data<T>();
      for (std::int64_t i = 0; i < out.numel(); ++i) o[i] = static_cast<T>(start + step * static_cast<double>(i));
    });
  }

  void copy(const Tensor& dst, const Tensor& src) override {
    dispatchDType(dst.dtype(), "copy", [&](auto dz) {
      using D = decltype(dz);
      dispatchDType(src.dtype(), "copy", [&](auto sz) {
        using S = decltype(sz);
        D* d = dst.data<D>();
        const S* s = src.data<S>();
        if (isContiguous(dst) && isContiguous(src)) {
          for (std::int64_t i = 0, n = dst.numel(); i < n; ++i) d[i] = fn::convertElement<D>(s[i]);
          return;
        }
        detail::forEachRun<2>(dst.sizes(), {dst.strides().data(), src.strides().data()},
                              [&](const auto& off, std::int64_t count, const auto& inner) {
                                D* dp = d + off[0];
                                const S* sp = s + off[1];
                                for (std::int64_t i = 0; i < count; ++i) dp[i * inner[0]] = fn::convertElement<D>(sp[i * inner[1]]);
                              });
      });
    });
  }

  void unary(UnaryOp op, const Tensor& out, const Tensor& in) override {
    fn::dispatchUnary(op, [&](auto f) {
      dispatchDType(in.dtype(), "unary op", [&](auto zero) {
        using T = decltype(zero);
        const T* x = in.data<T>();
        T* y = out.data<T>();
        for (std::int64_t i = 0, n = out.numel(); i < n; ++i) y[i] = f(x[i]);
      });
    });
  }

  void binary(BinaryOp op, const Tensor& out, const Tensor& a, const Tensor& b) override {
    fn::dispatchBinary(op, [&](auto f) {
      dispatchDType(out.dtype(), "binary op", [&](auto zero) {
        using T = decltype(zero);
        T* o = out.data<T>();
        const T* x = a.data<T>();
        const T* y = b.data<T>();
        const std::int64_t n = out.numel();
        if (isContiguous(a) && isContiguous(b)) {
          for (std::int64_t i = 0; i < n; ++i) o[i] = f(x[i], y[i]);
          return;
        }
        detail::forEachRun<3>(out.sizes(), {out.strides().data(), a.strides().data(), b.strides().data()},
                              [&](const auto& off, std::int64_t count, const auto& inner) {
                                T* op_ = o + off[0];
                                const T* xp = x + off[1];
                                const T* yp = y + off[2];
                                if (inner[1] == 1 && inner[2] == 1) {
                                  for (std::int64_t i = 0; i < count; ++i) op_[i] = f(xp[i], yp[i]);
                                } else if (inner[1] == 1 && inner[2] == 0) {
                                  const T yv = *yp;
                                  for (std::int64_t i = 0; i < count; ++i) op_[i] = f(xp[i], yv);
                                } else {
                                  for (std::int64_t i = 0; i < count; ++i) op_[i] = f(xp[i * inner[1]], yp[i * inner[2]]);
                                }
                              });
      });
    });
  }

  void binaryScalar(BinaryOp op, const Tensor& out, const Tensor& a, double s, bool scalarFirst) override {
    fn::dispatchBinary(op, [&](auto f) {
      dispatchDType(out.dtype(), "binary op", [&](auto zero) {
        using T = decltype(zero);
        const T sv = static_cast<T>(s);
        T* o = out.data<T>();
        const T* x = a.data<T>();
        const std::int64_t n = out.numel();
        if (scalarFirst) {
          for (std::int64_t i = 0; i < n; ++i) o[i] = f(sv, x[i]);
        } else {
          for (std::int64_t i = 0; i < n; ++i) o[i] = f(x[i], sv);
        }
      });
    });
  }

  void reduce(ReduceOp op, const Tensor& out, const Tensor* indices, const Tensor& in, std::int64_t outer,
              std::int64_t k, std::int64_t inner) override {
    dispatchDType(in.dtype(), "reduction", [&](auto zero) {
      using T = decltype(zero);
      const T* x = in.data<T>();
      T* o = out.data<T>();
      std::int64_t* idx = indices ? indices->data<std::int64_t>() : nullptr;
      for (std::int64_t a = 0; a < outer; ++a) {
        const T* base = x + a * k * inner;
        T* ob = o + a * inner;
        std::int64_t* ib = idx ? idx + a * inner : nullptr;
        if (op == ReduceOp::Sum) {
          if (inner == 1) {
            // Floats accumulate in double for an exact-as-possible reference (the GPU uses a tree in
            // float); integers in their own type, which is exact (double is not above 2^53).
            using Acc = std::conditional_t<std::is_floating_point_v<T>, double, T>;
            Acc acc = 0;
            for (std::int64_t j = 0; j < k; ++j) acc += static_cast<Acc>(base[j]);
            ob[0] = static_cast<T>(acc);
          } else {
            std::fill_n(ob, inner, T(0));
            for (std::int64_t j = 0; j < k; ++j) {
              const T* row = base + j * inner;
              for (std::int64_t i = 0; i < inner; ++i) ob[i] += row[i];
            }
          }
        } else {  // Max (first index of the maximum, NaN counts as the maximum like PyTorch)
          for (std::int64_t i = 0; i < inner; ++i) {
            T best = base[i];
            std::int64_t bestJ = 0;
            for (std::int64_t j = 1; j < k; ++j) {
              const T v = base[j * inner + i];
              if (v > best || (v != v && best == best)) {
                best = v;
                bestJ = j;
              }
            }
            ob[i] = best;
            if (ib) ib[i] = bestJ;
          }
        }
      }
    });
  }

  void gemm(bool transA, bool transB, std::int64_t m, std::int64_t n, std::int64_t k, float alpha, const float* a,
            std::int64_t lda, const float* b, std::int64_t ldb, float beta, float* c, std::int64_t ldc,
            std::int64_t batch, std::int64_t strideA, std::int64_t strideB, std::int64_t strideC) override {
    for (std::int64_t i = 0; i < batch; ++i) {
      cblas_sgemm(CblasRowMajor, transA ? CblasTrans : CblasNoTrans, transB ? CblasTrans : CblasNoTrans,
                  static_cast<blasint>(m), static_cast<blasint>(n), static_cast<blasint>(k), alpha, a + i * strideA,
                  static_cast<blasint>(lda), b + i * strideB, static_cast<blasint>(ldb), beta, c + i * strideC,
                  static_cast<blasint>(ldc));
    }
  }

  void softmax(const Tensor& out, const Tensor& in, std::int64_t rows, std::int64_t cols, bool log) override {
    const float* x = in.data<float>();
    float* y = out.data<float>();
    for (std::int64_t r = 0; r < rows; ++r) {
      const float* xr = x + r * cols;
      float* yr = y + r * cols;
      float mx = -std::numeric_limits<float>::infinity();
      for (std::int64_t c = 0; c < cols; ++c) mx = std::max(mx, xr[c]);
      float sum = 0.0f;
      for (std::int64_t c = 0; c < cols; ++c) sum += std::exp(xr[c] - mx);
      if (log) {
        // (x - max) - log(sum), PyTorch's order: folding max into lse = max + log(sum) first rounds
        // log(sum) to the ulp of max (about 1e-3 at max = 1e4) and loses the small terms.
        const float logSum = std::log(sum);
        for (std::int64_t c = 0; c < cols; ++c) yr[c] = (xr[c] - mx) - logSum;
      } else {
        const float inv = 1.0f / sum;
        for (std::int64_t c = 0; c < cols; ++c) yr[c] = std::exp(xr[c] - mx) * inv;
      }
    }
  }

  void softmaxBackward(const Tensor& gradIn, const Tensor& gradOut, const Tensor& out, std::int64_t rows,
                       std::int64_t cols, bool log) override {
    const float* g = gradOut.data<float>();
    const float* y = out.data<float>();
    float* gi = gradIn.data<float>();
    for (std::int64_t r = 0; r < rows; ++r) {
      const float* gr = g + r * cols;
      const float* yr = y + r * cols;
      float* dr = gi + r * cols;
      float dot = 0.0f;
      if (log) {
        for (std::int64_t c = 0; c < cols; ++c) dot += gr[c];
        for (std::int64_t c = 0; c < cols; ++c) dr[c] = gr[c] - std::exp(yr[c]) * dot;
      } else {
        for (std::int64_t c = 0; c < cols; ++c) dot += gr[c] * yr[c];
        for (std::int64_t c = 0; c < cols; ++c) dr[c] = yr[c] * (gr[c] - dot);
      }
    }
  }

  static void checkTarget(std::int64_t t, std::int64_t cols) {
    if (t < 0 || t >= cols) throw IndexError("Target " + std::to_string(t) + " is out of bounds.");
  }

  void nllLoss(const Tensor& out, const Tensor& logp, const Tensor& target, std::int64_t rows, std::int64_t cols,
               float scale) override {
    const float* lp = logp.data<float>();
    const std::int64_t* t = target.data<std::int64_t>();
    double acc = 0.0;
    for (std::int64_t r = 0; r < rows; ++r) {
      checkTarget(t[r], cols);
      acc -= lp[r * cols + t[r]];
    }
    out.data<float>()[0] = static_cast<float>(acc * scale);
  }

  void nllLossBackward(const Tensor& gradLogp, const Tensor& gradOut, const Tensor& target, std::int64_t rows,
                       std::int64_t cols, float scale) override {
    float* g = gradLogp.data<float>();
    const std::int64_t* t = target.data<std::int64_t>();
    const float v = -scale * gradOut.data<float>()[0];
    std::fill_n(g, rows * cols, 0.0f);
    for (std::int64_t r = 0; r < rows; ++r) {
      checkTarget(t[r], cols);
      g[r * cols + t[r]] = v;
    }
  }

  void pointLoss(PointLoss kind, const Tensor& out, const Tensor& a, const Tensor& b, float scale) override {
    const float* x = a.data<float>();
    const float* y = b.data<float>();
    double acc = 0.0;
    for (std::int64_t i = 0, n = a.numel(); i < n; ++i) {
      const float d = x[i] - y[i];
      acc += kind == PointLoss::MSE ? d * d : std::fabs(d);
    }
    out.data<float>()[0] = static_cast<float>(acc * scale);
  }

  void pointLossBackward(PointLoss kind, const Tensor& gradA, const Tensor& gradOut, const Tensor& a, const Tensor& b,
                         float scale) override {
    const float* x = a.data<float>();
    const float* y = b.data<float>();
    float* g = gradA.data<float>();
    const float s = scale * gradOut.data<float>()[0];
    for (std::int64_t i = 0, n = a.numel(); i < n; ++i) {
      const float d = x[i] - y[i];
      g[i] = kind == PointLoss::MSE ? 2.0f * s * d : s * static_cast<float>((d > 0.0f) - (d < 0.0f));
    }
  }

  void uniform(const Tensor& out, double low, double high, std::uint64_t seed, std::uint64_t offset) override {
    float* o = out.data<float>();
    const float lo = static_cast<float>(low), span = static_cast<float>(high - low);
    for (std::int64_t i = 0, n = out.numel(); i < n; ++i) o[i] = lo + span * fn::uniform01(seed, offset + i);
  }

  void normal(const Tensor& out, double mean, double stddev, std::uint64_t seed, std::uint64_t offset) override {
    float* o = out.data<float>();
    for (std::int64_t i = 0, n = out.numel(); i < n; ++i)
      o[i] = static_cast<float>(mean) + static_cast<float>(stddev) * fn::standardNormal(seed, offset + 2 * i);
  }

  void randint(const Tensor& out, std::int64_t low, std::int64_t high, std::uint64_t seed,
               std::uint64_t offset) override {
    std::int64_t* o = out.data<std::int64_t>();
    const std::uint64_t span = static_cast<std::uint64_t>(high - low);
    for (std::int64_t i = 0, n = out.numel(); i < n; ++i)
      o[i] = low + static_cast<std::int64_t>(fn::randomBits(seed, offset + i) % span);
  }

  void dropout(const Tensor& out, const Tensor& mask, const Tensor& in, float p, std::uint64_t seed,
               std::uint64_t offset) override {
    const float* x = in.data<float>();
    float* o = out.data<float>();
    float* mk = mask.data<float>();
    const float keepScale = 1.0f / (1.0f - p);
    for (std::int64_t i = 0, n = in.numel(); i < n; ++i) {
      mk[i] = fn::uniform01(seed, offset + i) >= p ? keepScale : 0.0f;
      o[i] = x[i] * mk[i];
    }
  }

  void sgdStep(const Tensor& param, const Tensor& grad, const Tensor* buf, const SgdHyper& h) override {
    const auto update = fn::makeSgdUpdate(h, buf != nullptr);
    float* p = param.data<float>();
    const float* g = grad.data<float>();
    float* b = buf ? buf->data<float>() : nullptr;
    for (std::int64_t i = 0, n = param.numel(); i < n; ++i) update(p[i], g[i], b ? b + i : nullptr);
  }

  void adamStep(const Tensor& param, const Tensor& grad, const Tensor& expAvg, const Tensor& expAvgSq,
                const Tensor* maxExpAvgSq, const AdamHyper& h) override {
    const auto update = fn::makeAdamUpdate(h);
    float* p = param.data<float>();
    const float* g = grad.data<float>();
    float* m = expAvg.data<float>();
    float* v = expAvgSq.data<float>();
    float* vmax = maxExpAvgSq ? maxExpAvgSq->data<float>() : nullptr;
    for (std::int64_t i = 0, n = param.numel(); i < n; ++i) update(p[i], g[i], m[i], v[i], vmax ? vmax + i : nullptr);
  }
};

}  // namespace

Backend& cpuBackend() {
  static CpuBackend backend;
  return backend;
}

}  // namespace gpulab
