// Tensor factories (torch.zeros, torch.randn, ...). Random factories draw from a Generator, so a seed
// gives the same numbers on every run and on every device.
#include <cmath>
#include <cstring>

#include "engine/ops/op_util.h"
#include "engine/profiler/profiler.h"
#include "engine/runtime/cuda_graph.h"

namespace gpulab {


namespace {
Tensor finish(Tensor t, const Options& o) {
  if (o.requires_grad) t.requires_grad_(true);
  return t;
}
}  // namespace

Tensor full(const Shape& shape, double value, const Options& o) {
  const profiler::RecordScope record("aten::full");
  checkScalarFits(value, o.dtype);
  Tensor t = Tensor::empty(shape, o.dtype, o.device);
  detail::backendOf(t).fill(t, value);
  return finish(t, o);
}
Tensor zeros(const Shape& shape, const Options& o) { return full(shape, 0.0, o); }
Tensor ones(const Shape& shape, const Options& o) { return full(shape, 1.0, o); }
Tensor zeros_like(const Tensor& t) { return zeros(t.sizes(), {.dtype = t.dtype(), .device = t.device()}); }
Tensor ones_like(const Tensor& t) { return ones(t.sizes(), {.dtype = t.dtype(), .device = t.device()}); }
Tensor scalar_tensor(double value, const Options& o) { return full({}, value, o); }

Tensor arange(double end, const Options& o) { return arange(0.0, end, 1.0, o); }
Tensor arange(double start, double end, double step, const Options& o) {
  if (!isFloatingPoint(o.dtype)) {
    // An integer arange takes its bounds and step as integers first, truncated as PyTorch's
    // Scalar::to<int64_t> truncates: arange(0.5, 5, 1.5, dtype=int64) is 0, 1, 2, 3, 4.
    start = std::trunc(start);
    end = std::trunc(end);
    step = std::trunc(step);
  }
  if (step == 0.0) throw ValueError("arange: step must be nonzero");
  if ((end - start) / step < 0.0) throw ValueError("arange: upper bound and larger bound inconsistent with step sign");
  const auto n = static_cast<std::int64_t>(std::ceil((end - start) / step));
  Tensor t = Tensor::empty({n}, o.dtype, o.device);
  detail::backendOf(t).arange(t, start, step);
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
