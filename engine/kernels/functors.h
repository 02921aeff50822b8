#pragma once
// Elementwise math written once, for both backends. Each functor is __host__ __device__ under nvcc and
// plain C++ elsewhere, so the CPU tests cover the math and the GPU tests cover only the launch.
// Functors are called with the math type of the dtype (engine/core/dispatch.h: float for float32,
// float16 and bfloat16; double for float64; int64 for the integer ops), never with 16-bit values.
#include <cmath>
#include <cstdint>
#include <type_traits>

#include "engine/core/host_device.h"

namespace gpulab {

// Every unary kernel, once: the enum below and dispatchUnary's switch are made from this list, and
// engine/ops/generate_ops.py checks each op of engine/ops/native_ops.toml names one of them. A new kernel
// is a name here and its functor (GPULAB_UNARY below). The order is part of the CUDA module's ABI (the
// enum crosses it): the module's build id hashes this header.
#define GPULAB_UNARY_KERNELS(X)                                                                    \
  X(Neg) X(Exp) X(Log) X(Sqrt) X(Abs) X(Relu) X(Sigmoid) X(Tanh) X(Gelu) X(GeluTanh) X(Square)    \
  X(Sign) X(Reciprocal) X(Sin) X(Cos) X(Exp2) X(Expm1) X(Log2) X(Log10) X(Log1p) X(Rsqrt) X(Tan) \
  X(Sinh) X(Cosh) X(Asin) X(Acos) X(Atan) X(Erf) X(Ceil) X(Floor) X(Round) X(Trunc) X(Frac)

#define GPULAB_ENUM_ENTRY(NAME) NAME,
enum class UnaryOp { GPULAB_UNARY_KERNELS(GPULAB_ENUM_ENTRY) };
#undef GPULAB_ENUM_ENTRY

// Binary ops also carry the backward rules of unary ops, f(grad, saved): one launch per backward.
enum class BinaryOp {
  Add, Sub, Mul, Div, Maximum, Minimum, Pow, Eq, Ne, Lt, Gt, Le, Ge,
  FloorDivide, Remainder,  // Python's // and %
  ReluBackward,     // (grad, input)
  SigmoidBackward,  // (grad, output)
  TanhBackward,     // (grad, output)
  GeluBackward,     // (grad, input)
  GeluTanhBackward, // (grad, input)
  AbsBackward,      // (grad, input)
};

enum class ReduceOp { Sum, Max };
enum class PointLoss { MSE, L1 };

struct SgdHyper {
  double lr = 0.01, momentum = 0.0, dampening = 0.0, weight_decay = 0.0;  // rounded to the math type once
  bool nesterov = false;
  bool first_step = true;  // the momentum buffer starts as the gradient itself
};

// Double, as torch.optim's Python floats: the scalars derived from them (bias corrections, 1 - beta)
// are computed in double and rounded to float once, as PyTorch does.
struct AdamHyper {
  double lr = 1e-3, beta1 = 0.9, beta2 = 0.999, eps = 1e-8, weight_decay = 0.0;
  bool decoupled_weight_decay = false;  // AdamW
  bool amsgrad = false;                 // max_exp_avg_sq, which the backends get as a tensor (null without)
  std::int64_t step = 1;                // 1-based, for bias correction
  // capturable=True: the step count is a float on the parameter's device, read when the update runs
  // rather than when it is queued, so a replayed CUDA graph corrects each step for its own count.
  const float* step_on_device = nullptr;
};

}  // namespace gpulab

namespace gpulab::fn {

// Counter-based random numbers (SplitMix64 over seed and element index): the value of element i
// depends only on (seed, offset + i), so the CPU and every GPU draw the very same numbers for a seed
// regardless of how the work is split across threads.
GPULAB_HD std::uint64_t mix64(std::uint64_t z) {
  z += 0x9E3779B97F4A7C15ull;
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}
GPULAB_HD std::uint64_t randomBits(std::uint64_t seed, std::uint64_t counter) {
  return mix64(seed * 0xD1342543DE82EF95ull ^ mix64(counter));
}
// Uniform in [0, 1) with 24 random bits, exactly representable in float.
GPULAB_HD float uniform01(std::uint64_t seed, std::uint64_t counter) {
  return static_cast<float>(randomBits(seed, counter) >> 40) * (1.0f / 16777216.0f);
}
// Where a random fill's counters start. Eager: the generator's seed and offset, by value. Captured
// into a CUDA graph: `cell` points to device memory holding a seed and a base offset that each replay
// writes before it launches (engine/runtime/cuda_graph.cpp), and the fill's counters start at
// cell[1] + offset, its place within the graph -- so every replay draws new numbers, as PyTorch's
// graph-safe Philox offsets do. A kernel resolves them when it runs.
struct RandomCounters {
  std::uint64_t seed = 0;
  std::uint64_t offset = 0;
  const std::uint64_t* cell = nullptr;
  GPULAB_HD RandomCounters resolved() const { return cell ? RandomCounters{cell[0], cell[1] + offset, nullptr} : *this; }
};

// Standard normal by Box-Muller from two uniforms: counters `first` and `first + 1`. A normal draw
// of n elements therefore takes 2n counters from its generator (kCountersPerNormal), so the draws
// that follow it never reuse its bits.
constexpr std::uint64_t kCountersPerNormal = 2;
GPULAB_HD float standardNormal(std::uint64_t seed, std::uint64_t first) {
  const float u1 = 1.0f - uniform01(seed, first);  // (0, 1]: log stays finite
  const float u2 = uniform01(seed, first + 1);
  return sqrtf(-2.0f * logf(u1)) * cosf(6.2831853071795864f * u2);
}

// Element type conversion, the same on both backends. Float to int64 truncates; NaN and values out of
// int64's range become INT64_MIN, as on PyTorch's CPU (a plain cast is undefined there and gives 0 on
// the GPU but INT64_MIN on x86).
template <class D, class S>
GPULAB_HD D convertElement(S v) {
  if constexpr (std::is_same_v<D, bool>) return v != S(0);  // NaN is true, as in PyTorch
  if constexpr (std::is_integral_v<D> && !std::is_integral_v<S>) {  // any float, Half and BFloat16 included
    const double x = static_cast<double>(v);
    if (!(x >= -9223372036854775808.0 && x < 9223372036854775808.0)) return static_cast<D>(-9223372036854775807LL - 1);
  }
  return static_cast<D>(v);
}

// The math library once per math type: float calls the float functions (expf, ...), double the
// double ones; the template (integers, which the op layer never sends to these) goes through float.
#define GPULAB_MATH1(NAME, FLOATFN, DOUBLEFN)                                  \
  GPULAB_HD float NAME(float x) { return FLOATFN(x); }                         \
  GPULAB_HD double NAME(double x) { return DOUBLEFN(x); }                      \
  template <class T>                                                           \
  GPULAB_HD T NAME(T x) { return static_cast<T>(FLOATFN(static_cast<float>(x))); }
GPULAB_MATH1(exp_, expf, ::exp)
GPULAB_MATH1(log_, logf, ::log)
GPULAB_MATH1(sqrt_, sqrtf, ::sqrt)
GPULAB_MATH1(tanh_, tanhf, ::tanh)
GPULAB_MATH1(erf_, erff, ::erf)
GPULAB_MATH1(fabs_, fabsf, ::fabs)
GPULAB_MATH1(sin_, sinf, ::sin)
GPULAB_MATH1(cos_, cosf, ::cos)
GPULAB_MATH1(floor_, floorf, ::floor)
GPULAB_MATH1(ceil_, ceilf, ::ceil)
GPULAB_MATH1(trunc_, truncf, ::trunc)
GPULAB_MATH1(rint_, rintf, ::rint)  // to nearest, ties to even, as torch.round
GPULAB_MATH1(exp2_, exp2f, ::exp2)
GPULAB_MATH1(expm1_, expm1f, ::expm1)
GPULAB_MATH1(log2_, log2f, ::log2)
GPULAB_MATH1(log10_, log10f, ::log10)
GPULAB_MATH1(log1p_, log1pf, ::log1p)
GPULAB_MATH1(tan_, tanf, ::tan)
GPULAB_MATH1(sinh_, sinhf, ::sinh)
GPULAB_MATH1(cosh_, coshf, ::cosh)
GPULAB_MATH1(asin_, asinf, ::asin)
GPULAB_MATH1(acos_, acosf, ::acos)
GPULAB_MATH1(atan_, atanf, ::atan)
#undef GPULAB_MATH1
#define GPULAB_MATH2(NAME, FLOATFN, DOUBLEFN)                                  \
  GPULAB_HD float NAME(float a, float b) { return FLOATFN(a, b); }             \
  GPULAB_HD double NAME(double a, double b) { return DOUBLEFN(a, b); }         \
  template <class T>                                                           \
  GPULAB_HD T NAME(T a, T b) { return static_cast<T>(FLOATFN(static_cast<float>(a), static_cast<float>(b))); }
GPULAB_MATH2(pow_, powf, ::pow)
GPULAB_MATH2(fmod_, fmodf, ::fmod)
GPULAB_MATH2(copysign_, copysignf, ::copysign)
#undef GPULAB_MATH2

// Python's a // b and a % b (torch.floor_divide, torch.remainder): the quotient rounded toward -inf,
// and the remainder with the divisor's sign, so that a == (a // b) * b + a % b. These are PyTorch's
// c10::div_floor_floating / div_floor_integer and its remainder kernels step for step (fmod first,
// then corrected), so the rounding at the edges is PyTorch's too: 7.5 // 0.3 is 24.0 in float32.
// Integers: a zero divisor never reaches a CPU kernel (the op raises ZeroDivisionError first, as
// PyTorch's CPU kernels do); a GPU checks nothing, as PyTorch's CUDA kernels check nothing, and gets 0
// here instead of the trap an integer division by zero is on x86 (the emulated GPU runs this on the
// CPU). INT64_MIN // -1 wraps to INT64_MIN and INT64_MIN % -1 is 0, PyTorch 2's results (idiv traps).
template <class T>
GPULAB_HD T floorDivide(T a, T b) {
  if constexpr (std::is_integral_v<T>) {
    if (b == T(0)) return T(0);
    if (b == T(-1)) return static_cast<T>(std::make_unsigned_t<T>(0) - static_cast<std::make_unsigned_t<T>>(a));  // -a, wrapping
    const T q = a / b, r = a % b;
    return r != T(0) && ((r < T(0)) != (b < T(0))) ? q - T(1) : q;
  } else {
    if (b == T(0)) return a / b;  // IEEE's inf, -inf or NaN
    const T mod = fmod_(a, b);
    T div = (a - mod) / b;
    if (mod != T(0) && (b < T(0)) != (mod < T(0))) div -= T(1);
    if (div == T(0)) return copysign_(T(0), a / b);  // -0.0 where the true quotient is negative
    T floored = floor_(div);
    if (div - floored > T(0.5)) floored += T(1);  // div is a whole number up to rounding: round it, not floor it
    return floored;
  }
}
template <class T>
GPULAB_HD T floorRemainder(T a, T b) {
  if constexpr (std::is_integral_v<T>) {
    if (b == T(0) || b == T(-1)) return T(0);
    const T r = a % b;
    return r != T(0) && ((r < T(0)) != (b < T(0))) ? r + b : r;
  } else {
    const T mod = fmod_(a, b);  // NaN for b == 0 and for an infinite a, as in PyTorch
    return mod != T(0) && (b < T(0)) != (mod < T(0)) ? mod + b : mod;
  }
}

// In double: T(constant) then rounds once to the math type, so float64 GELU gets double constants.
constexpr double kSqrt2OverPi = 0.7978845608028654;
constexpr double kGeluCoeff = 0.044715;
// GELU in its exact (erf) form, PyTorch's default.
template <class T>
GPULAB_HD T gelu(T x) { return T(0.5) * x * (T(1) + erf_(x * T(0.7071067811865476))); }
template <class T>
GPULAB_HD T geluGrad(T x) {
  const T cdf = T(0.5) * (T(1) + erf_(x * T(0.7071067811865476)));
  const T pdf = T(0.3989422804014327) * exp_(T(-0.5) * x * x);
  return cdf + x * pdf;
}
// GELU's tanh approximation (F.gelu(x, approximate='tanh')):
// 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))), and its derivative as PyTorch's GeluBackward writes it.
template <class T>
GPULAB_HD T geluTanh(T x) {
  const T inner = T(kSqrt2OverPi) * (x + T(kGeluCoeff) * x * x * x);
  return T(0.5) * x * (T(1) + tanh_(inner));
}
template <class T>
GPULAB_HD T geluTanhGrad(T x) {
  const T x2 = x * x;
  const T t = tanh_(T(kSqrt2OverPi) * (x + T(kGeluCoeff) * x2 * x));
  const T left = T(0.5) * x, right = T(1) + t;
  return T(0.5) * right + left * (T(1) - t * t) * T(kSqrt2OverPi) * (T(1) + T(3) * T(kGeluCoeff) * x2);
}
template <class T>
GPULAB_HD T sigmoid(T x) { return T(1) / (T(1) + exp_(-x)); }

}  // namespace gpulab::fn

namespace gpulab::fn {

// One functor per op; `T` is the math type: float, double or int64_t (the op layer only sends
// floating-only ops with a floating type).
#define GPULAB_UNARY(NAME, EXPR) \
  struct NAME {                  \
    template <class T>           \
    GPULAB_HD T operator()(T x) const { return EXPR; } \
  };
GPULAB_UNARY(Neg, -x)
GPULAB_UNARY(Exp, exp_(x))
GPULAB_UNARY(Log, log_(x))
GPULAB_UNARY(Sqrt, sqrt_(x))
GPULAB_UNARY(Relu, x < T(0) ? T(0) : x)  // NaN and -0 stay as they are, as in PyTorch
GPULAB_UNARY(Sigmoid, sigmoid(x))
GPULAB_UNARY(Tanh, tanh_(x))
GPULAB_UNARY(Gelu, gelu(x))
GPULAB_UNARY(GeluTanh, geluTanh(x))
GPULAB_UNARY(Square, x * x)
GPULAB_UNARY(Sign, T((x > T(0)) - (x < T(0))))
GPULAB_UNARY(Reciprocal, T(1) / x)
GPULAB_UNARY(Sin, sin_(x))
GPULAB_UNARY(Cos, cos_(x))
GPULAB_UNARY(Exp2, exp2_(x))
GPULAB_UNARY(Expm1, expm1_(x))
GPULAB_UNARY(Log2, log2_(x))
GPULAB_UNARY(Log10, log10_(x))
GPULAB_UNARY(Log1p, log1p_(x))
GPULAB_UNARY(Rsqrt, T(1) / sqrt_(x))  // PyTorch's CPU rsqrt; the CUDA module computes the same, not rsqrtf's approximation
GPULAB_UNARY(Tan, tan_(x))
GPULAB_UNARY(Sinh, sinh_(x))
GPULAB_UNARY(Cosh, cosh_(x))
GPULAB_UNARY(Asin, asin_(x))
GPULAB_UNARY(Acos, acos_(x))
GPULAB_UNARY(Atan, atan_(x))
GPULAB_UNARY(Erf, erf_(x))
// The steps: the op layer sends them floating tensors only (an integer is its own floor).
GPULAB_UNARY(Ceil, ceil_(x))
GPULAB_UNARY(Floor, floor_(x))
GPULAB_UNARY(Round, rint_(x))
GPULAB_UNARY(Trunc, trunc_(x))
GPULAB_UNARY(Frac, x - trunc_(x))  // PyTorch's: the sign of x, frac(-1.5) = -0.5
#undef GPULAB_UNARY
// |x| by fabs for floats, so abs(-0.0) is +0.0 as in PyTorch.
struct Abs {
  template <class T>
  GPULAB_HD T operator()(T x) const {
    if constexpr (std::is_integral_v<T>) return x < T(0) ? -x : x;
    else return fabs_(x);
  }
};

#define GPULAB_BINARY(NAME, EXPR) \
  struct NAME {                   \
    template <class T>            \
    GPULAB_HD T operator()(T a, T b) const { return EXPR; } \
  };
GPULAB_BINARY(Add, a + b)
GPULAB_BINARY(Sub, a - b)
GPULAB_BINARY(Mul, a * b)
GPULAB_BINARY(Div, a / b)
// PyTorch's maximum/minimum propagate NaN whichever side it is on.
GPULAB_BINARY(Maximum, a != a ? a : (b != b ? b : (a > b ? a : b)))
GPULAB_BINARY(Minimum, a != a ? a : (b != b ? b : (a < b ? a : b)))
GPULAB_BINARY(Pow, pow_(a, b))
GPULAB_BINARY(Eq, T(a == b))
GPULAB_BINARY(Ne, T(a != b))
GPULAB_BINARY(Lt, T(a < b))
GPULAB_BINARY(Gt, T(a > b))
GPULAB_BINARY(Le, T(a <= b))
GPULAB_BINARY(Ge, T(a >= b))
GPULAB_BINARY(FloorDivide, floorDivide(a, b))
GPULAB_BINARY(Remainder, floorRemainder(a, b))
GPULAB_BINARY(ReluBackward, b <= T(0) ? T(0) : a)         // a = grad, b = input (NaN input passes grad, as PyTorch's threshold_backward)
GPULAB_BINARY(SigmoidBackward, a * b * (T(1) - b))        // b = output
GPULAB_BINARY(TanhBackward, a * (T(1) - b * b))           // b = output
GPULAB_BINARY(GeluBackward, a * geluGrad(b))              // b = input
GPULAB_BINARY(GeluTanhBackward, a * geluTanhGrad(b))      // b = input
GPULAB_BINARY(AbsBackward, a * T((b > T(0)) - (b < T(0))))  // b = input
#undef GPULAB_BINARY

// Calls f(functor) with the functor type for `op`, so each backend instantiates one loop per op.
template <class F>
void dispatchUnary(UnaryOp op, F&& f) {
#define GPULAB_DISPATCH_CASE(NAME) \
  case UnaryOp::NAME:              \
    return f(NAME{});
  switch (op) { GPULAB_UNARY_KERNELS(GPULAB_DISPATCH_CASE) }
#undef GPULAB_DISPATCH_CASE
}

template <class F>
void dispatchBinary(BinaryOp op, F&& f) {
  switch (op) {
    case BinaryOp::Add: return f(Add{});
    case BinaryOp::Sub: return f(Sub{});
    case BinaryOp::Mul: return f(Mul{});
    case BinaryOp::Div: return f(Div{});
    case BinaryOp::Maximum: return f(Maximum{});
    case BinaryOp::Minimum: return f(Minimum{});
    case BinaryOp::Pow: return f(Pow{});
    case BinaryOp::Eq: return f(Eq{});
    case BinaryOp::Ne: return f(Ne{});
    case BinaryOp::Lt: return f(Lt{});
    case BinaryOp::Gt: return f(Gt{});
    case BinaryOp::Le: return f(Le{});
    case BinaryOp::Ge: return f(Ge{});
    case BinaryOp::FloorDivide: return f(FloorDivide{});
    case BinaryOp::Remainder: return f(Remainder{});
    case BinaryOp::ReluBackward: return f(ReluBackward{});
    case BinaryOp::SigmoidBackward: return f(SigmoidBackward{});
    case BinaryOp::TanhBackward: return f(TanhBackward{});
    case BinaryOp::GeluBackward: return f(GeluBackward{});
    case BinaryOp::GeluTanhBackward: return f(GeluTanhBackward{});
    case BinaryOp::AbsBackward: return f(AbsBackward{});
  }
}

// Per-element optimizer updates shared by both backends. Formulas follow torch.optim exactly. `T` is
// the math type of the parameter's dtype (float, or double for float64 parameters).
template <class T>
struct SgdUpdateT {
  T lr, momentum, dampening, weight_decay;
  bool nesterov, first_step, has_buffer;
  GPULAB_HD void operator()(T& p, T g, T* buf) const {
    if (weight_decay != T(0)) g += weight_decay * p;
    if (has_buffer) {
      const T b = first_step ? g : momentum * (*buf) + (T(1) - dampening) * g;
      *buf = b;
      g = nesterov ? g + momentum * b : b;
    }
    p -= lr * g;
  }
};

// torch.optim.Adam/AdamW's single-tensor step. The scalars are PyTorch's, computed in double and
// rounded to T once: step_size = lr / (1 - beta1^t), bias_correction2_sqrt = sqrt(1 - beta2^t),
// decay = 1 - lr * wd. With amsgrad, vmax (max_exp_avg_sq) keeps the running maximum of v and the
// denominator uses it.
template <class T>
struct AdamUpdateT {
  T beta1, one_minus_beta1, beta2, one_minus_beta2, eps, weight_decay, decay, step_size, bias_correction2_sqrt;
  bool decoupled;
  // capturable: step_size and bias_correction2_sqrt come from the device's step count, in double as the
  // host computes them; null: they were computed on the host (makeAdamUpdate).
  const float* step = nullptr;
  double lr = 0, beta1d = 0, beta2d = 0;
  GPULAB_HD AdamUpdateT resolved() const {
    if (!step) return *this;
    AdamUpdateT u = *this;
    const double s = static_cast<double>(*step);
#ifdef __CUDA_ARCH__
    const double bc1 = 1.0 - ::pow(beta1d, s), bc2 = 1.0 - ::pow(beta2d, s);
    u.bias_correction2_sqrt = static_cast<T>(::sqrt(bc2));
#else
    const double bc1 = 1.0 - std::pow(beta1d, s), bc2 = 1.0 - std::pow(beta2d, s);
    u.bias_correction2_sqrt = static_cast<T>(std::sqrt(bc2));
#endif
    u.step_size = static_cast<T>(lr / bc1);
    u.step = nullptr;
    return u;
  }
  GPULAB_HD void operator()(T& p, T g, T& m, T& v, T* vmax) const {
    if (weight_decay != T(0)) {
      if (decoupled) p *= decay;
      else g += weight_decay * p;
    }
    m = m * beta1 + one_minus_beta1 * g;  // PyTorch 2.x: exp_avg.lerp_(grad, 1 - beta1), equal to rounding
    v = v * beta2 + one_minus_beta2 * g * g;
    T vhat = v;
    if (vmax) {
      vhat = *vmax > v || *vmax != *vmax ? *vmax : v;  // torch.maximum: NaN propagates
      *vmax = vhat;
    }
    const T denom = sqrt_(vhat) / bias_correction2_sqrt + eps;
    p += (-step_size * m) / denom;  // param.addcdiv_(exp_avg, denom, value=-step_size)
  }
};
using SgdUpdate = SgdUpdateT<float>;
using AdamUpdate = AdamUpdateT<float>;

template <class T = float>
inline AdamUpdateT<T> makeAdamUpdate(const AdamHyper& h) {
  const double step = static_cast<double>(h.step);
  const double bias_correction1 = 1.0 - std::pow(h.beta1, step);
  const double bias_correction2 = 1.0 - std::pow(h.beta2, step);
  return AdamUpdateT<T>{static_cast<T>(h.beta1), static_cast<T>(1.0 - h.beta1), static_cast<T>(h.beta2),
                        static_cast<T>(1.0 - h.beta2), static_cast<T>(h.eps), static_cast<T>(h.weight_decay),
                        static_cast<T>(1.0 - h.lr * h.weight_decay), static_cast<T>(h.lr / bias_correction1),
                        static_cast<T>(std::sqrt(bias_correction2)), h.decoupled_weight_decay,
                        h.step_on_device, h.lr, h.beta1, h.beta2};
}
template <class T = float>
inline SgdUpdateT<T> makeSgdUpdate(const SgdHyper& h, bool hasBuffer) {
  return SgdUpdateT<T>{static_cast<T>(h.lr), static_cast<T>(h.momentum), static_cast<T>(h.dampening),
                       static_cast<T>(h.weight_decay), h.nesterov, h.first_step, hasBuffer};
}

}  // namespace gpulab::fn
