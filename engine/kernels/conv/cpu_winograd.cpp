#include "engine/kernels/conv/cpu_winograd.h"

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <type_traits>

#include "engine/core/errors.h"
#include "engine/core/cpu_features.h"

#if defined(__x86_64__)
#include <immintrin.h>
#define GPULAB_HAVE_WINOGRAD_GEMM 1
#endif

namespace gpulab::conv_winograd {

namespace {

// Below this many channels or filters per group the products are too small to earn back what the
// transforms cost (their work grows with the channels, the transforms' with the planes): a first layer
// on RGB images (3 channels) stays on im2col. Measured to pay at 32 -> 64; 16 is a cautious floor.
constexpr std::int64_t kMinChannels = 16;

bool enabled() {
  static const bool on = [] {
    const char* v = std::getenv("GPULAB_WINOGRAD");
    return !(v && std::strcmp(v, "0") == 0);
  }();
  return on;
}

// B^T over four input rows: (r0 - r2, r1 + r2, r2 - r1, r1 - r3). restrict: the rows are the input's
// (or the zero row) and the results scratch, so the loop vectorises without checks.
void columnPass(const float* __restrict r0, const float* __restrict r1, const float* __restrict r2, const float* __restrict r3,
                float* __restrict u0, float* __restrict u1, float* __restrict u2, float* __restrict u3, std::int64_t n) {
  for (std::int64_t w = 0; w < n; ++w) {
    u0[w] = r0[w] - r2[w];
    u1[w] = r1[w] + r2[w];
    u2[w] = r2[w] - r1[w];
    u3[w] = r1[w] - r3[w];
  }
}

// B over each tile's four columns of a transformed row: tile tw reads ti[2 tw .. 2 tw + 3].
void rowPass(const float* __restrict ti, float* __restrict v0, float* __restrict v1, float* __restrict v2, float* __restrict v3,
             std::int64_t tilesW) {
  for (std::int64_t tw = 0; tw < tilesW; ++tw) {
    const float a0 = ti[2 * tw], a1 = ti[2 * tw + 1], a2 = ti[2 * tw + 2], a3 = ti[2 * tw + 3];
    v0[tw] = a0 - a2;
    v1[tw] = a1 + a2;
    v2[tw] = a2 - a1;
    v3[tw] = a1 - a3;
  }
}

// A^T m A for `tiles` tiles, m's 16 rows `stride` apart: the four outputs of each tile (+ bias) into
// y00, y01, y10, y11.
void outputPoints(const float* __restrict m, std::int64_t stride, float bias, std::int64_t tiles, float* __restrict y00,
                  float* __restrict y01, float* __restrict y10, float* __restrict y11) {
  for (std::int64_t t = 0; t < tiles; ++t) {
    float s0[4], s1[4];  // A^T over the rows: s0 = m0 + m1 + m2, s1 = m1 - m2 - m3 (per column j)
    for (int j = 0; j < 4; ++j) {
      const float a = m[j * stride + t], b = m[(4 + j) * stride + t], c = m[(8 + j) * stride + t], d = m[(12 + j) * stride + t];
      s0[j] = a + b + c;
      s1[j] = b - c - d;
    }
    y00[t] = s0[0] + s0[1] + s0[2] + bias;
    y01[t] = s0[1] - s0[2] - s0[3] + bias;
    y10[t] = s1[0] + s1[1] + s1[2] + bias;
    y11[t] = s1[1] - s1[2] - s1[3] + bias;
  }
}

// Four floats as one value (GCC's vector extension: an SSE register, in the baseline x86-64 the build
// targets). The loop below stores to 16 rows of one array a runtime stride apart, which the
// auto-vectoriser cannot prove apart: it is written four tiles at a time.
typedef float Floats4 __attribute__((vector_size(16)));
inline Floats4 load4(const float* p) {
  Floats4 v;
  std::memcpy(&v, p, sizeof v);
  return v;
}
inline void store4(float* p, Floats4 v) { std::memcpy(p, &v, sizeof v); }

// A g A^T for `tiles` tiles' 2 x 2 gradients (g00, g01, g10, g11) into dm's 16 rows, `stride` apart:
// A over the rows (2 -> 4: g0, g0 + g1, g0 - g1, -g1), then over the columns.
template <class V, class Load, class Store>
inline void gradientPoint(const float* g00, const float* g01, const float* g10, const float* g11, std::int64_t t, float* dm,
                          std::int64_t stride, Load load, Store store) {
  const V a = load(g00 + t), b = load(g01 + t), c = load(g10 + t), d = load(g11 + t);
  const V r[4][2] = {{a, b}, {a + c, b + d}, {a - c, b - d}, {-c, -d}};
  for (int i = 0; i < 4; ++i) {
    store(dm + (i * 4 + 0) * stride + t, r[i][0]);
    store(dm + (i * 4 + 1) * stride + t, r[i][0] + r[i][1]);
    store(dm + (i * 4 + 2) * stride + t, r[i][0] - r[i][1]);
    store(dm + (i * 4 + 3) * stride + t, -r[i][1]);
  }
}
void gradientPoints(const float* g00, const float* g01, const float* g10, const float* g11, std::int64_t tiles, float* dm,
                    std::int64_t stride) {
  std::int64_t t = 0;
  for (; t + 4 <= tiles; t += 4) gradientPoint<Floats4>(g00, g01, g10, g11, t, dm, stride, load4, store4);
  for (; t < tiles; ++t)
    gradientPoint<float>(g00, g01, g10, g11, t, dm, stride, [](const float* p) { return *p; }, [](float* p, float v) { *p = v; });
}

// Asks for the plane after the one at `plane` (its `size` floats) to be brought into the cache. A
// prefetch is only a hint: past the end of the tensor it reads nothing and cannot fault.
void prefetchNextPlane(const float* plane, std::int64_t size) {
  const char* next = reinterpret_cast<const char*>(plane + size);
  for (std::int64_t off = 0; off < size * std::int64_t{sizeof(float)}; off += 64) __builtin_prefetch(next + off);
}

}  // namespace

Plan plan(std::int64_t channels, std::int64_t filters, std::int64_t inH, std::int64_t inW, std::int64_t outH, std::int64_t outW,
          std::int64_t padH, std::int64_t padW) {
  return {channels, filters, inH, inW, outH, outW, padH, padW, (outH + 1) / 2, (outW + 1) / 2};
}

bool suits(std::int64_t channels, std::int64_t filters, std::int64_t kernelH, std::int64_t kernelW, std::int64_t strideH,
           std::int64_t strideW, std::int64_t dilationH, std::int64_t dilationW, std::int64_t padH, std::int64_t padW) {
  return enabled() && kernelH == 3 && kernelW == 3 && strideH == 1 && strideW == 1 && dilationH == 1 && dilationW == 1 &&
         padH >= 0 && padH <= 2 && padW >= 0 && padW <= 2 && channels >= kMinChannels && filters >= kMinChannels;
}

void transformFilters(const float* w, std::int64_t filters, std::int64_t channels, bool flipped, float* u) {
  const std::int64_t stride = filters * channels;
  for (std::int64_t f = 0; f < filters; ++f)
    for (std::int64_t c = 0; c < channels; ++c) {
      double g[3][3];
      const float* src = flipped ? w + (c * filters + f) * 9 : w + (f * channels + c) * 9;
      for (int r = 0; r < 3; ++r)
        for (int s = 0; s < 3; ++s) g[r][s] = flipped ? src[(2 - r) * 3 + (2 - s)] : src[r * 3 + s];
      // G g: 4 x 3, then (G g) G^T: 4 x 4 (in double, rounded once).
      double gg[4][3];
      for (int s = 0; s < 3; ++s) {
        gg[0][s] = g[0][s];
        gg[1][s] = 0.5 * (g[0][s] + g[1][s] + g[2][s]);
        gg[2][s] = 0.5 * (g[0][s] - g[1][s] + g[2][s]);
        gg[3][s] = g[2][s];
      }
      for (int i = 0; i < 4; ++i) {
        const double row[4] = {gg[i][0], 0.5 * (gg[i][0] + gg[i][1] + gg[i][2]), 0.5 * (gg[i][0] - gg[i][1] + gg[i][2]), gg[i][2]};
        for (int j = 0; j < 4; ++j) u[(i * 4 + j) * stride + f * channels + c] = static_cast<float>(row[j]);
      }
    }
}

void transformFiltersBack(const float* du, std::int64_t filters, std::int64_t channels, float* dw) {
  const std::int64_t stride = filters * channels;
  for (std::int64_t f = 0; f < filters; ++f)
    for (std::int64_t c = 0; c < channels; ++c) {
      double d[4][4];
      for (int i = 0; i < 4; ++i)
        for (int j = 0; j < 4; ++j) d[i][j] = du[(i * 4 + j) * stride + f * channels + c];
      // G^T d: 3 x 4, then (G^T d) G: 3 x 3. G^T = [1 1/2 1/2 0; 0 1/2 -1/2 0; 0 1/2 1/2 1].
      double gd[3][4];
      for (int j = 0; j < 4; ++j) {
        gd[0][j] = d[0][j] + 0.5 * (d[1][j] + d[2][j]);
        gd[1][j] = 0.5 * (d[1][j] - d[2][j]);
        gd[2][j] = 0.5 * (d[1][j] + d[2][j]) + d[3][j];
      }
      float* out = dw + (f * channels + c) * 9;
      for (int r = 0; r < 3; ++r) {
        out[r * 3 + 0] = static_cast<float>(gd[r][0] + 0.5 * (gd[r][1] + gd[r][2]));
        out[r * 3 + 1] = static_cast<float>(0.5 * (gd[r][1] - gd[r][2]));
        out[r * 3 + 2] = static_cast<float>(0.5 * (gd[r][1] + gd[r][2]) + gd[r][3]);
      }
    }
}

void transformInput(const float* x, const Plan& p, float* v, std::int64_t pointStride, float* scratch) {
  // Separably: B^T over a tile row's four input rows (whole rows at once), then B over each tile's
  // four columns of those, into v's 16 rows -- both loops vectorised (columnPass, rowPass).
  const std::int64_t cols = 2 * p.tilesW + 2;
  float* t = scratch;          // B^T over a tile row's four input rows: 4 rows of `cols`
  float* zero = t + 4 * cols;  // an input row of zeros, for the rows in the padding
  std::fill(zero, zero + p.inW, 0.0f);
  // The next plane (the next channel's, as the callers go) is on its way while this one is transformed:
  // the loads of the input were a third of this function's time, waiting for memory.
  prefetchNextPlane(x, p.inH * p.inW);
  float *t0 = t, *t1 = t + cols, *t2 = t + 2 * cols, *t3 = t + 3 * cols;
  // The columns of a transformed row that read the input: [padW, padW + valid); the rest read padding.
  const std::int64_t valid = std::clamp<std::int64_t>(cols - p.padW, 0, p.inW);
  for (std::int64_t th = 0; th < p.tilesH; ++th) {
    const float* r[4];
    for (int k = 0; k < 4; ++k) {
      const std::int64_t h = 2 * th + k - p.padH;
      r[k] = h >= 0 && h < p.inH ? x + h * p.inW : zero;
    }
    for (float* ti : {t0, t1, t2, t3}) {
      for (std::int64_t q = 0; q < p.padW; ++q) ti[q] = 0.0f;
      for (std::int64_t q = p.padW + valid; q < cols; ++q) ti[q] = 0.0f;
    }
    columnPass(r[0], r[1], r[2], r[3], t0 + p.padW, t1 + p.padW, t2 + p.padW, t3 + p.padW, valid);
    // B over each tile's four columns.
    for (int i = 0; i < 4; ++i) {
      const float* ti = t + i * cols;
      float* v0 = v + (i * 4 + 0) * pointStride + th * p.tilesW;
      float* v1 = v + (i * 4 + 1) * pointStride + th * p.tilesW;
      float* v2 = v + (i * 4 + 2) * pointStride + th * p.tilesW;
      float* v3 = v + (i * 4 + 3) * pointStride + th * p.tilesW;
      rowPass(ti, v0, v1, v2, v3, p.tilesW);
    }
  }
}

void transformOutput(const float* m, std::int64_t pointStride, float bias, const Plan& p, float* y, float* scratch) {
  // A^T m A for every tile at once (a loop over the tiles the compiler vectorises: 16 contiguous
  // streams in, four out), then the 2 x 2 blocks into the plane.
  const std::int64_t tiles = p.tiles();
  float *y00 = scratch, *y01 = y00 + tiles, *y10 = y01 + tiles, *y11 = y10 + tiles;
  outputPoints(m, pointStride, bias, tiles, y00, y01, y10, y11);
  const std::int64_t fullW = p.outW / 2;  // tiles whose two columns are both in the output
  for (std::int64_t th = 0; th < p.tilesH; ++th) {
    const std::int64_t t0 = th * p.tilesW, oh = 2 * th;
    float* row0 = y + oh * p.outW;
    for (std::int64_t tw = 0; tw < fullW; ++tw) {
      row0[2 * tw] = y00[t0 + tw];
      row0[2 * tw + 1] = y01[t0 + tw];
    }
    if (fullW < p.tilesW) row0[2 * fullW] = y00[t0 + fullW];
    if (oh + 1 >= p.outH) continue;
    float* row1 = row0 + p.outW;
    for (std::int64_t tw = 0; tw < fullW; ++tw) {
      row1[2 * tw] = y10[t0 + tw];
      row1[2 * tw + 1] = y11[t0 + tw];
    }
    if (fullW < p.tilesW) row1[2 * fullW] = y10[t0 + fullW];
  }
}

void transformOutputGradient(const float* dy, const Plan& p, float* dm, std::int64_t pointStride, float* scratch) {
  // Each tile's 2 x 2 gradients into four rows (0 past the output's edge), then A dy A^T for every
  // tile at once, straight into dm's 16 rows.
  const std::int64_t tiles = p.tiles();
  float *g00 = scratch, *g01 = g00 + tiles, *g10 = g01 + tiles, *g11 = g10 + tiles;
  prefetchNextPlane(dy, p.outH * p.outW);  // the next filter's, as the caller goes
  for (std::int64_t th = 0; th < p.tilesH; ++th) {
    const std::int64_t oh = 2 * th;
    const float* row0 = dy + oh * p.outW;
    const bool bottom = oh + 1 < p.outH;  // the tile row's second row is in the output
    const std::int64_t t0 = th * p.tilesW, fullW = p.outW / 2;
    for (std::int64_t tw = 0; tw < fullW; ++tw) {
      g00[t0 + tw] = row0[2 * tw];
      g01[t0 + tw] = row0[2 * tw + 1];
    }
    if (fullW < p.tilesW) {  // an odd width: the last tile's right column is past the edge
      g00[t0 + fullW] = row0[2 * fullW];
      g01[t0 + fullW] = 0.0f;
    }
    if (bottom) {
      const float* row1 = row0 + p.outW;
      for (std::int64_t tw = 0; tw < fullW; ++tw) {
        g10[t0 + tw] = row1[2 * tw];
        g11[t0 + tw] = row1[2 * tw + 1];
      }
      if (fullW < p.tilesW) {
        g10[t0 + fullW] = row1[2 * fullW];
        g11[t0 + fullW] = 0.0f;
      }
    } else {
      std::fill(g10 + t0, g10 + t0 + p.tilesW, 0.0f);
      std::fill(g11 + t0, g11 + t0 + p.tilesW, 0.0f);
    }
  }
  gradientPoints(g00, g01, g10, g11, tiles, dm, pointStride);
}

namespace {

[[noreturn]] void refuseGemm() {
  throw Error("conv2d: the Winograd product kernel was called on a CPU without AVX2 and FMA (OpenBLAS runs the products there)");
}

}  // namespace

#if defined(GPULAB_HAVE_WINOGRAD_GEMM)

namespace {

// ROWS rows of c, 16 columns at a time: ROWS x 2 accumulators of 8 floats, a broadcast of a's value
// and two loads of b's row per step of the inner dimension (12 FMAs for ROWS = 6); the last cols % 16
// columns 8 and then up to 7 at a time (masked loads and stores), so the matrices need no padding.
// Compiled for AVX2 and FMA whatever the build's target; called only where the CPU has them.
template <int ROWS>
__attribute__((target("avx2,fma"))) void gemmRows(const float* a, std::int64_t k, const float* b, std::int64_t ldb, float* c,
                                                   std::int64_t ldc, std::int64_t cols) {
  std::int64_t j = 0;
  for (; j + 16 <= cols; j += 16) {
    __m256 acc[ROWS][2];
    for (int r = 0; r < ROWS; ++r) acc[r][0] = acc[r][1] = _mm256_setzero_ps();
    for (std::int64_t kk = 0; kk < k; ++kk) {
      const __m256 b0 = _mm256_loadu_ps(b + kk * ldb + j), b1 = _mm256_loadu_ps(b + kk * ldb + j + 8);
      for (int r = 0; r < ROWS; ++r) {
        const __m256 ar = _mm256_broadcast_ss(a + r * k + kk);
        acc[r][0] = _mm256_fmadd_ps(ar, b0, acc[r][0]);
        acc[r][1] = _mm256_fmadd_ps(ar, b1, acc[r][1]);
      }
    }
    for (int r = 0; r < ROWS; ++r) {
      _mm256_storeu_ps(c + r * ldc + j, acc[r][0]);
      _mm256_storeu_ps(c + r * ldc + j + 8, acc[r][1]);
    }
  }
  for (; j < cols; j += 8) {
    // Lanes [0, cols - j) of the next 8 columns: all 8 but in the last block.
    const std::int64_t n = std::min<std::int64_t>(8, cols - j);
    const __m256i mask = _mm256_cmpgt_epi32(_mm256_set1_epi32(static_cast<int>(n)), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
    __m256 acc[ROWS];
    for (int r = 0; r < ROWS; ++r) acc[r] = _mm256_setzero_ps();
    for (std::int64_t kk = 0; kk < k; ++kk) {
      const __m256 b0 = _mm256_maskload_ps(b + kk * ldb + j, mask);
      for (int r = 0; r < ROWS; ++r) acc[r] = _mm256_fmadd_ps(_mm256_broadcast_ss(a + r * k + kk), b0, acc[r]);
    }
    for (int r = 0; r < ROWS; ++r) _mm256_maskstore_ps(c + r * ldc + j, mask, acc[r]);
  }
}

template <class F>
void byRows(std::int64_t rows, F f) {
  switch (rows) {
    case 1: return f(std::integral_constant<int, 1>{});
    case 2: return f(std::integral_constant<int, 2>{});
    case 3: return f(std::integral_constant<int, 3>{});
    case 4: return f(std::integral_constant<int, 4>{});
    case 5: return f(std::integral_constant<int, 5>{});
    default: return f(std::integral_constant<int, 6>{});
  }
}

}  // namespace

bool gemmAvailable() { return cpuFeatures().avx2Fma(); }

void gemm(std::int64_t rows, std::int64_t k, const float* a, const float* b, std::int64_t ldb, float* c, std::int64_t ldc,
          std::int64_t cols) {
  if (!gemmAvailable()) refuseGemm();
  for (std::int64_t r0 = 0; r0 < rows; r0 += 6)
    byRows(std::min<std::int64_t>(6, rows - r0), [&](auto n) { gemmRows<decltype(n)::value>(a + r0 * k, k, b, ldb, c + r0 * ldc, ldc, cols); });
}

#else  // not x86-64: OpenBLAS for the products

bool gemmAvailable() { return false; }
void gemm(std::int64_t, std::int64_t, const float*, const float*, std::int64_t, float*, std::int64_t, std::int64_t) { refuseGemm(); }

#endif

}  // namespace gpulab::conv_winograd
