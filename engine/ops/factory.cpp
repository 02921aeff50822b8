// Tensor factories (torch.zeros, torch.randn, ...). Random factories draw from a Generator, so a seed
// gives the same numbers on every run and on every device.
#include <cmath>
#include <cstring>
#include <optional>
#include <locale>
#include <sstream>

#include "engine/ops/op_util.h"
#include "engine/profiler/profiler.h"
#include "engine/runtime/cuda_graph.h"

namespace gpulab {


namespace {
Tensor finish(Tensor t, const Options& o) {
  if (o.requires_grad) t.requires_grad_(true);
  return t;
}

// A double holds every integer up to 2^53 exactly: int64 values within that go through the backends'
// double fill and arange, and only those beyond it are written on the host (then copied to the device).
constexpr std::int64_t kExactInDouble = std::int64_t(1) << 53;
bool exactInDouble(std::int64_t v) { return v >= -kExactInDouble && v <= kExactInDouble; }

// A host int64 tensor of `shape` whose element i is start + i * step, placed and typed as asked; the
// unsigned arithmetic wraps, and every value it lands on lies in int64's range (between start and an
// int64 end), so the result is exact.
Tensor int64OnHost(const Shape& shape, std::int64_t start, std::int64_t step, const Options& o) {
  Tensor host = Tensor::empty(shape, kInt64, kCPU);
  auto* p = host.data<std::int64_t>();
  for (std::int64_t i = 0, n = host.numel(); i < n; ++i) {
    p[i] = static_cast<std::int64_t>(static_cast<std::uint64_t>(start) + static_cast<std::uint64_t>(i) * static_cast<std::uint64_t>(step));
  }
  return finish(host.to(o.dtype).to(o.device).detach(), o);
}
}  // namespace

Tensor full(const Shape& shape, double value, const Options& o) {
  const profiler::RecordScope record("aten::full", {}, o.device);
  checkScalarFits(value, o.dtype);
  // PyTorch's checked conversion of the fill value (c10::checked_convert): into int64, NaN, the
  // infinities and values past its range raise rather than become INT64_MIN.
  if (o.dtype == kInt64 && !(value >= -9223372036854775808.0 && value < 9223372036854775808.0)) {
    throw Error("value cannot be converted to type int64_t without overflow");
  }
  Tensor t = Tensor::empty(shape, o.dtype, o.device);
  detail::backendOf(t).fill(t, value);
  return finish(t, o);
}

Tensor full_int64(const Shape& shape, std::int64_t value, const Options& o) {
  if (o.dtype != kInt64 || exactInDouble(value)) return full(shape, static_cast<double>(value), o);
  const profiler::RecordScope record("aten::full", {}, o.device);
  return int64OnHost(shape, value, 0, o);
}
Tensor zeros(const Shape& shape, const Options& o) { return full(shape, 0.0, o); }
Tensor ones(const Shape& shape, const Options& o) { return full(shape, 1.0, o); }
Tensor zeros_like(const Tensor& t) { return zeros(t.sizes(), {.dtype = t.dtype(), .device = t.device()}); }
Tensor ones_like(const Tensor& t) { return ones(t.sizes(), {.dtype = t.dtype(), .device = t.device()}); }
Tensor scalar_tensor(double value, const Options& o) { return full({}, value, o); }

Tensor arange(double end, const Options& o) { return arange(0.0, end, 1.0, o); }
Tensor arange(double start, double end, double step, const Options& o) {
  // PyTorch 2's checks and words (1.13 let an infinite step through as an empty tensor and said
  // "larger bound").
  if (!std::isfinite(start) || !std::isfinite(end)) {
    std::ostringstream os;  // the bounds as PyTorch prints them: 0, 0.5, inf, nan
    os.imbue(std::locale::classic());
    os << "unsupported range: " << start << " -> " << end;
    throw Error(os.str());
  }
  if (!std::isfinite(step)) {
    std::ostringstream os;
    os.imbue(std::locale::classic());
    os << "step must be finite but got " << step;
    throw Error(os.str());
  }
  if (step == 0.0) throw ValueError("step must be nonzero");
  if ((step > 0 && end < start) || (step < 0 && end > start)) throw ValueError("upper bound and lower bound inconsistent with step sign");
  // The length from the values as given, in double -- also for an integer dtype, as PyTorch 2's
  // arange(0.5, 5, 1.5, dtype=torch.int64) has ceil(4.5 / 1.5) = 3 elements (1.13 truncated the
  // bounds and the step first and had 5).
  const double size = std::ceil((end - start) / step);
  if (!(size >= 0 && size <= 9223372036854775807.0)) throw Error("invalid size, possible overflow?");
  const auto n = static_cast<std::int64_t>(size);
  if (!isFloatingPoint(o.dtype)) {
    // Element i of an integer arange is start + i * step with both truncated to integers, as PyTorch's
    // Scalar::to<int64_t> truncates them: 0, 1, 2 for that arange.
    start = std::trunc(start);
    step = std::trunc(step);
  }
  Tensor t = Tensor::empty({n}, o.dtype, o.device);
  detail::backendOf(t).arange(t, start, step);
  return finish(t, o);
}

namespace {
// Element i of linspace(start, end, steps) in the arithmetic T (PyTorch's RangeFactoriesKernel: the
// step in T for floating dtypes, in double for integers; the second half counted back from end).
template <class T>
double linspaceElement(double start, double end, std::int64_t steps, std::int64_t i) {
  const T s = static_cast<T>(start), e = static_cast<T>(end);
  const T step = (e - s) / static_cast<T>(steps - 1);
  return static_cast<double>(i < steps / 2 ? s + step * static_cast<T>(i) : e - step * static_cast<T>(steps - 1 - i));
}

// The values of linspace (or, with `base`, logspace) on the host in double, then in the asked dtype and
// device: `steps` values are few enough that a kernel of their own would save nothing.
Tensor spaced(const char* name, double start, double end, std::int64_t steps, std::optional<double> base, const Options& o) {
  const profiler::RecordScope record(name, {}, o.device);
  if (steps < 0) throw Error("number of steps must be non-negative");
  Tensor host = Tensor::empty({steps}, kFloat64, kCPU);
  double* p = host.data<double>();
  const bool inFloat = o.dtype == kFloat32 || o.dtype == kFloat16 || o.dtype == kBFloat16;
  for (std::int64_t i = 0; i < steps; ++i) {
    const double x = steps == 1 ? start : inFloat ? linspaceElement<float>(start, end, steps, i) : linspaceElement<double>(start, end, steps, i);
    p[i] = base ? std::pow(*base, x) : x;
  }
  Tensor out = isFloatingPoint(o.dtype) || o.dtype == kBool ? host.to(o.dtype) : host.to(kInt64).to(o.dtype);  // an integer truncates
  return finish(out.to(o.device).detach(), o);
}
}  // namespace

Tensor linspace(double start, double end, std::int64_t steps, const Options& o) { return spaced("aten::linspace", start, end, steps, std::nullopt, o); }
Tensor logspace(double start, double end, std::int64_t steps, double base, const Options& o) {
  return spaced("aten::logspace", start, end, steps, base, o);
}

Tensor arange_int64(std::int64_t start, std::int64_t end, std::int64_t step, const Options& o) {
  // A floating arange of integers computes in double, as PyTorch's: torch.arange(2**53, 2**53 + 3,
  // dtype=torch.float64) has its four elements there too.
  if (isFloatingPoint(o.dtype)) return arange(static_cast<double>(start), static_cast<double>(end), static_cast<double>(step), o);
  if (step == 0) throw ValueError("step must be nonzero");
  // The length, exactly: ceil((end - start) / step) in 128 bits, where end - start cannot overflow.
  const __int128 span = static_cast<__int128>(end) - start;
  if ((span > 0 && step < 0) || (span < 0 && step > 0)) throw ValueError("upper bound and lower bound inconsistent with step sign");
  const __int128 n128 = span == 0 ? 0 : (span + step + (step > 0 ? -1 : 1)) / step;
  const auto n = static_cast<std::int64_t>(n128);
  const std::int64_t last = n == 0 ? start : static_cast<std::int64_t>(start + static_cast<__int128>(step) * (n - 1));
  if (!(exactInDouble(start) && exactInDouble(last))) {
    const profiler::RecordScope record("aten::arange");
    return int64OnHost({n}, start, step, o);
  }
  Tensor t = Tensor::empty({n}, o.dtype, o.device);
  detail::backendOf(t).arange(t, static_cast<double>(start), static_cast<double>(step));
  return finish(t, o);
}

fn::RandomCounters detail::randomCounters(const char* op, Generator& gen, Device device, std::uint64_t count) {
  if (!cuda::is_current_stream_capturing(device)) return {gen.seed(), gen.advance(count), nullptr};
  if (&gen != &defaultGenerator()) {
    throw NotImplementedError(std::string(op) + " inside a CUDA graph capture draws from a generator of its own: a graph's replays "
                              "advance the default generator only (as PyTorch 1.13's). Draw from the default generator inside "
                              "the capture, or outside it");
  }
  return cuda::capturedRandomCounters(device, count);
}

Tensor randn(const Shape& shape, Generator& gen, const Options& o) {
  Tensor t = Tensor::empty(shape, o.dtype, o.device);
  detail::requireFloat("randn", t);
  detail::backendOf(t).normal(t, 0.0, 1.0,
                              detail::randomCounters("randn", gen, o.device, fn::kCountersPerNormal * static_cast<std::uint64_t>(t.numel())));
  return finish(t, o);
}

Tensor rand(const Shape& shape, Generator& gen, const Options& o) {
  Tensor t = Tensor::empty(shape, o.dtype, o.device);
  detail::requireFloat("rand", t);
  detail::backendOf(t).uniform(t, 0.0, 1.0, detail::randomCounters("rand", gen, o.device, static_cast<std::uint64_t>(t.numel())));
  return finish(t, o);
}

Tensor randint(std::int64_t low, std::int64_t high, const Shape& shape, Generator& gen, const Options& o) {
  if (high <= low) throw ValueError("random_ expects 'from' to be less than 'to', but got from=" + std::to_string(low) + " >= to=" + std::to_string(high));
  if (o.dtype != kInt64) throw NotImplementedError("randint is implemented for int64 only");
  Tensor t = Tensor::empty(shape, kInt64, o.device);
  detail::backendOf(t).randint(t, low, high, detail::randomCounters("randint", gen, o.device, static_cast<std::uint64_t>(t.numel())));
  return t;
}

namespace {
template <class T>
Tensor fromHost(const std::vector<T>& values, const Shape& shape, DType dtype, const Options& o) {
  Tensor host = Tensor::empty(shape, dtype, kCPU);
  if (static_cast<std::size_t>(host.numel()) != values.size()) {
    throw ValueError("tensor(): " + std::to_string(values.size()) + " values do not fill shape " + shapeStr(shape));
  }
  if (!values.empty()) std::memcpy(host.data_ptr(), values.data(), values.size() * sizeof(T));  // (no data: no pointer)
  Tensor t = host.to(o.dtype).to(o.device);
  if (t.sameAs(host) && o.requires_grad) return finish(t, o);
  return finish(t.detach(), o);
}
}  // namespace

Tensor tensor(const std::vector<float>& values, const Shape& shape, const Options& o) { return fromHost(values, shape, kFloat32, o); }
Tensor tensor(std::initializer_list<float> values, const Shape& shape, const Options& o) {
  return fromHost(std::vector<float>(values), shape, kFloat32, o);
}
Tensor tensor(const std::vector<std::int64_t>& values, const Shape& shape, const Options& o) { return fromHost(values, shape, kInt64, o); }

}  // namespace gpulab
