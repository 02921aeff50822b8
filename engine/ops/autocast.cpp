// Autocast's state (per thread, in the execution context), its op policy and its cast cache.
#include "engine/ops/autocast.h"

#include <array>
#include <string_view>

#include "engine/autograd/grad_mode.h"
#include "engine/core/errors.h"
#include "engine/runtime/execution_context.h"

namespace gpulab::amp {

namespace {


AutocastState checkedState(DType dtype, bool enabled) {
  if (enabled && !isReducedPrecision(dtype)) {
    throw ValueError("autocast: dtype must be float16 or bfloat16, got " + dtypeName(dtype) +
                     " (outside an autocast region ops already run in float32)");
  }
  return {enabled, dtype};
}

template <std::size_t N>
bool listed(const std::array<std::string_view, N>& list, std::string_view op) {
  for (std::string_view name : list)
    if (name == op) return true;
  return false;
}

// The subset of PyTorch's lists (aten/src/ATen/autocast_mode.cpp) for the ops this engine has.
constexpr std::array<std::string_view, 6> kLowerPrecision = {"matmul", "linear", "mm", "bmm", "addmm", "conv2d"};
// On CUDA, besides the unary ops native_ops.toml marks autocast = "float32" (exp, log, ...: generated).
constexpr std::array<std::string_view, 9> kFloat32Cuda = {"pow",      "rdiv",    "sum",      "softmax",      "log_softmax",
                                                          "mse_loss", "l1_loss", "nll_loss", "cross_entropy"};
constexpr std::string_view kUnaryFloat32Cuda[] = {
#include "gpulab/ops/unary_autocast.inc"
};
constexpr std::array<std::string_view, 4> kFloat32Cpu = {"mse_loss", "l1_loss", "nll_loss", "cross_entropy"};
constexpr std::array<std::string_view, 5> kPromote = {"cat", "stack", "addcmul", "addcdiv", "dot"};

// Autocast casts floating tensors other than float64 (PyTorch's is_eligible).
bool eligible(const Tensor& t) { return t.defined() && isFloatingPoint(t.dtype()) && t.dtype() != kFloat64; }

Tensor castTo(const Tensor& t, DType dtype, bool useCache) {
  if (!eligible(t) || t.dtype() == dtype) return t;
  ExecutionContext& ctx = executionContext();
  // Weights (leaves that require grad) are cast once per region; activations are new every op.
  const bool cacheable = useCache && t.is_leaf() && t.requires_grad() && ctx.autocastNesting > 0;
  if (!cacheable) return t.to(dtype);
  const auto key = std::make_pair(static_cast<const TensorImpl*>(t.implPtr().get()), dtype);
  auto it = ctx.castCache.find(key);
  if (it != ctx.castCache.end()) return it->second.cast;
  Tensor cast = t.to(dtype);
  ctx.castCache.emplace(key, ExecutionContext::CastEntry{t.implPtr(), cast});
  return cast;
}

}  // namespace

CastPolicy castPolicy(DeviceType deviceType, const char* op) {
  const std::string_view name(op);
  if (listed(kLowerPrecision, name)) return CastPolicy::LowerPrecision;
  if (deviceType == DeviceType::CUDA ? listed(kFloat32Cuda, name) || listed(std::to_array(kUnaryFloat32Cuda), name) : listed(kFloat32Cpu, name)) {
    return CastPolicy::Float32;
  }
  if (listed(kPromote, name)) return CastPolicy::Promote;
  return CastPolicy::None;
}

DType AutocastGuard::defaultDtype(DeviceType deviceType) { return deviceType == DeviceType::CPU ? kBFloat16 : kFloat16; }

AutocastGuard::AutocastGuard(DeviceType deviceType, DType dtype, bool enabled)
    : state_(deviceType, checkedState(dtype, enabled)) {}

bool is_autocast_enabled(DeviceType deviceType) { return executionContext().autocast[autocastSlot(deviceType)].enabled; }

DType get_autocast_dtype(DeviceType deviceType) { return executionContext().autocast[autocastSlot(deviceType)].dtype; }

void autocast(const char* op, std::initializer_list<Tensor*> inputs) {
  const Tensor* first = nullptr;
  for (Tensor* t : inputs)
    if (t->defined()) {
      first = t;
      break;
    }
  if (!first) return;
  const DeviceType deviceType = first->device().type();
  const AutocastState& state = executionContext().autocast[autocastSlot(deviceType)];
  if (!state.enabled) return;
  switch (castPolicy(deviceType, op)) {
    case CastPolicy::LowerPrecision:
      for (Tensor* t : inputs) *t = castTo(*t, state.dtype, /*useCache=*/true);
      return;
    case CastPolicy::Float32:
      for (Tensor* t : inputs) *t = castTo(*t, kFloat32, false);
      return;
    case CastPolicy::Promote: {
      DType widest = state.dtype;
      bool any = false;
      for (const Tensor* t : inputs)
        if (eligible(*t)) widest = any ? promoteTypes(widest, t->dtype()) : t->dtype(), any = true;
      for (Tensor* t : inputs) *t = castTo(*t, widest, false);
      return;
    }
    case CastPolicy::None: return;
  }
}

Tensor autocast(const char* op, const Tensor& input) {
  Tensor t = input;
  autocast(op, {&t});
  return t;
}

}  // namespace gpulab::amp
