// The methods of Tensor (engine/core/tensor.h) that run ops -- copies, casts, arithmetic, autograd --
// are defined here, in the ops layer, as PyTorch defines Tensor's methods with ATen's ops: core holds
// the class and what needs nothing above it (shapes, storage, views), and cannot reach up.
#include <locale>
#include <sstream>

#include "engine/autograd/grad_mode.h"
#include "engine/autograd/gradient_ops.h"
#include "engine/autograd/node.h"
#include "engine/core/dispatch.h"
#include "engine/core/errors.h"
#include "engine/core/tensor.h"
#include "engine/kernels/backend.h"
#include "engine/runtime/device_runtime.h"
#include "engine/kernels/cpu_backend.h"
#include "engine/ops/ops.h"
#include "engine/runtime/device_memory.h"
#include "engine/runtime/execution_context.h"
#include "engine/runtime/stream.h"

namespace gpulab {

namespace {
// Backward's arithmetic on gradients (engine/autograd/gradient_ops.h), installed when the engine loads.
[[maybe_unused]] const bool gradientOpsInstalled = (autograd::installGradientOps({
    .add = [](const Tensor& a, const Tensor& b) { return add(a, b); },
    .cast = [](const Tensor& t, DType dtype) { return t.to(dtype); },
    .clone = [](const Tensor& t) { return t.clone(); },
    .copyInto = [](Tensor& dst, const Tensor& src) { dst.copy_(src); },
}), true);
}  // namespace

template <class T>
std::vector<T> Tensor::toVector() const {
  Tensor host = contiguous().cpu();
  std::vector<T> out(static_cast<std::size_t>(host.numel()));
  dispatchWithBool(host.dtype(), "toVector", [&](auto tag) {
    using S = typename decltype(tag)::type;
    const S* p = host.data<S>();
    for (std::size_t i = 0; i < out.size(); ++i) out[i] = static_cast<T>(static_cast<OpMath<S>>(p[i]));
  });
  return out;
}
template std::vector<float> Tensor::toVector<float>() const;
template std::vector<double> Tensor::toVector<double>() const;
template std::vector<std::int64_t> Tensor::toVector<std::int64_t>() const;

double Tensor::item() const {
  if (numel() != 1) {
    throw Error("a Tensor with " + std::to_string(numel()) + " elements cannot be converted to Scalar");
  }
  return toVector<double>()[0];
}

std::string Tensor::toString() const {
  std::ostringstream os;
  os.imbue(std::locale::classic());  // 0.5, not 0,5, whatever std::locale::global says
  os << "tensor(";
  if (numel() <= 64) {
    auto v = toVector<double>();
    os << "[";
    for (std::size_t i = 0; i < v.size(); ++i) os << (i ? ", " : "") << v[i];
    os << "], shape=" << shapeStr(sizes());
  } else {
    os << "shape=" << shapeStr(sizes());
  }
  if (dtype() != kFloat32) os << ", dtype=" << dtypeName(dtype());
  if (is_cuda()) os << ", device='" << device().str() << "'";
  if (grad_fn()) os << ", grad_fn=<" << grad_fn()->name() << ">";
  else if (requires_grad()) os << ", requires_grad=True";
  return os.str() + ")";
}

Tensor Tensor::to(Device device, bool non_blocking) const { return to_device(*this, device, non_blocking); }
Tensor Tensor::to(DType dtype) const { return to_dtype(*this, dtype); }
Tensor Tensor::cuda() const { return cuda(executionContext().currentCudaDevice); }

Tensor Tensor::pin_memory() const {
  if (is_cuda()) throw Error("cannot pin '" + device().str() + "' memory: only dense CPU tensors can be pinned");
  if (is_pinned()) return *this;
  Tensor out = Tensor::empty(sizes(), dtype(), kCPU, /*pinned=*/true);
  cpuBackend().copy(out, *this);
  return out;
}

void Tensor::record_stream(const cuda::Stream& stream) const {
  if (!is_cuda()) throw Error("record_stream: expected a CUDA tensor, but this one is on " + device().str());
  if (stream.device() != device()) {
    throw ValueError("record_stream: the tensor is on " + device().str() + " but the stream belongs to " + stream.device().str());
  }
  allocatorFor(device()).recordStream(impl().storage->data(), stream.id());
}

Tensor Tensor::contiguous() const {
  if (is_contiguous()) return *this;
  return clone();
}

Tensor Tensor::clone() const {
  Tensor out = Tensor::empty(sizes(), dtype(), device());
  backendFor(device()).copy(out, *this);
  return autograd::record(out, "CloneBackward0", {*this},
                          [](const Tensor& g, const std::vector<bool>&) { return std::vector<Tensor>{g}; });
}

void Tensor::backward(const Tensor& gradient) const {
  Tensor g = gradient;
  if (!g.defined()) {
    if (numel() != 1) throw Error("grad can be implicitly created only for scalar outputs");
    g = ones(sizes(), {.dtype = dtype(), .device = device()});
  }
  autograd::runBackward(*this, g);
}

namespace {
void checkInPlace(const Tensor& t, const char* op) {
  if (isGradEnabled() && t.requires_grad() && t.is_leaf()) {
    throw Error(std::string("a leaf Variable that requires grad is being used in an in-place operation (") + op + ")");
  }
}
}  // namespace

Tensor& Tensor::zero_() { return fill_(0.0); }

Tensor& Tensor::fill_(double value) {
  checkInPlace(*this, "fill_");
  checkScalarFits(value, dtype());
  if (is_contiguous()) {
    backendFor(device()).fill(*this, value);
  } else {
    copy_(full(sizes(), value, {.dtype = dtype(), .device = device()}));
  }
  return *this;
}

Tensor& Tensor::copy_(const Tensor& src) {
  checkInPlace(*this, "copy_");
  Tensor s = src;
  if (s.device() != device()) s = s.to(device());
  if (s.sizes() != sizes()) s = s.expand(sizes());
  backendFor(device()).copy(*this, s);
  return *this;
}

Tensor Tensor::operator-() const { return neg(*this); }
Tensor Tensor::matmul(const Tensor& other) const { return gpulab::matmul(*this, other); }
Tensor Tensor::sum() const { return gpulab::sum(*this); }
Tensor Tensor::sum(std::int64_t d, bool keepdim) const { return gpulab::sum(*this, d, keepdim); }
Tensor Tensor::mean() const { return gpulab::mean(*this); }
Tensor Tensor::mean(std::int64_t d, bool keepdim) const { return gpulab::mean(*this, d, keepdim); }
Tensor Tensor::max() const { return gpulab::max(*this); }
Tensor Tensor::argmax(std::int64_t d, bool keepdim) const { return gpulab::argmax(*this, d, keepdim); }
Tensor Tensor::argmax() const { return gpulab::argmax(*this); }
Tensor Tensor::argmin(std::int64_t d, bool keepdim) const { return gpulab::argmin(*this, d, keepdim); }
Tensor Tensor::argmin() const { return gpulab::argmin(*this); }
Tensor Tensor::relu() const { return gpulab::relu(*this); }
Tensor Tensor::sigmoid() const { return gpulab::sigmoid(*this); }
Tensor Tensor::tanh() const { return gpulab::tanh(*this); }
Tensor Tensor::exp() const { return gpulab::exp(*this); }
Tensor Tensor::log() const { return gpulab::log(*this); }
Tensor Tensor::abs() const { return gpulab::abs(*this); }
Tensor Tensor::pow(double e) const { return gpulab::pow(*this, e); }
Tensor Tensor::softmax(std::int64_t d) const { return gpulab::softmax(*this, d); }
Tensor Tensor::log_softmax(std::int64_t d) const { return gpulab::log_softmax(*this, d); }

Tensor operator+(const Tensor& a, const Tensor& b) { return add(a, b); }
Tensor operator-(const Tensor& a, const Tensor& b) { return sub(a, b); }
Tensor operator*(const Tensor& a, const Tensor& b) { return mul(a, b); }
Tensor operator/(const Tensor& a, const Tensor& b) { return div(a, b); }
Tensor operator+(const Tensor& a, double b) { return add(a, b); }
Tensor operator-(const Tensor& a, double b) { return sub(a, b); }
Tensor operator*(const Tensor& a, double b) { return mul(a, b); }
Tensor operator/(const Tensor& a, double b) { return div(a, b); }
Tensor operator+(double a, const Tensor& b) { return add(b, a); }
Tensor operator-(double a, const Tensor& b) { return rsub(b, a); }
Tensor operator*(double a, const Tensor& b) { return mul(b, a); }
Tensor operator/(double a, const Tensor& b) { return rdiv(b, a); }
Tensor operator==(const Tensor& a, const Tensor& b) { return eq(a, b); }

}  // namespace gpulab
