// Moving tensors between devices and dtypes, and the same-device rule that every multi-tensor op
// enforces. The mismatch message is a lesson's centrepiece: it names the op, where each argument
// lives, the module being run (if any), and the fix.
#include "engine/ops/op_util.h"
#include "engine/runtime/cuda_runtime.h"
#include "engine/profiler/profiler.h"

namespace gpulab {

using detail::Grads;
using detail::Needs;

namespace {
thread_local const ModuleContext* gModuleContext = nullptr;
}

ModuleContext::ModuleContext(const Describable& module) : module_(module), previous_(gModuleContext) {
  gModuleContext = this;
}
ModuleContext::~ModuleContext() { gModuleContext = previous_; }

std::string ModuleContext::currentPath() {
  std::string path;
  for (const ModuleContext* c = gModuleContext; c; c = c->previous_) {
    path += (path.empty() ? "" : " inside ") + c->module_.describe();
  }
  return path;
}

std::optional<std::string> deviceMismatchMessage(const char* op, const std::vector<DevicePlacement>& args) {
  // PyTorch runs an op on CUDA if any operand is on CUDA; a 0-dim CPU tensor (a scalar) may then join.
  const DevicePlacement* reference = nullptr;
  bool anyCuda = false;
  for (const DevicePlacement& a : args) {
    if (a.device.isCuda() && !anyCuda) {
      anyCuda = true;
      reference = &a;
    }
    if (!reference) reference = &a;
  }
  if (!reference) return std::nullopt;
  const Device want = reference->device;
  const DevicePlacement* offender = nullptr;
  for (const DevicePlacement& a : args) {
    if (a.device == want) continue;
    if (anyCuda && a.device.isCpu() && a.zeroDim) continue;
    offender = &a;
    break;
  }
  if (!offender) return std::nullopt;

  std::string msg = "Expected all tensors to be on the same device, but found at least two devices, " + want.str() +
                    " and " + offender->device.str() + "! (when checking arguments for " + op + ": ";
  for (std::size_t i = 0; i < args.size(); ++i) {
    msg += std::string(i ? ", " : "") + "'" + args[i].name + "' is on " + args[i].device.str();
  }
  msg += ")";
  if (std::string module = ModuleContext::currentPath(); !module.empty()) msg += "\n  while running module " + module;
  msg += "\nFix: move every tensor of the op to one device first, e.g. " + offender->name + " = " + offender->name +
         ".to(\"" + want.str() + "\"), or move the model and the data with .to(device) before the call.";
  return msg;
}

void checkSameDevice(const char* op, std::initializer_list<NamedTensor> args) {
  // Fast path: the common case of one device costs no allocation.
  const Tensor* first = nullptr;
  bool same = true;
  for (const NamedTensor& a : args) {
    if (!a.tensor.defined()) continue;
    if (!first) first = &a.tensor;
    else if (a.tensor.device() != first->device()) same = false;
  }
  if (same) return;
  std::vector<DevicePlacement> placements;
  for (const NamedTensor& a : args) {
    if (a.tensor.defined()) placements.push_back({a.name, a.tensor.device(), a.tensor.dim() == 0});
  }
  if (auto msg = deviceMismatchMessage(op, placements)) throw DeviceMismatchError(*msg);
}

Tensor to_device(const Tensor& a, Device device, bool non_blocking) {
  const profiler::RecordScope record("aten::to", {&a}, a.is_cuda() ? a.device() : device);  // timed on the GPU side
  if (a.device() == device) return a;
  if (device.isCuda()) cuda::checkDeviceUsable(device);
  Tensor src = a.contiguous();
  // As PyTorch's: a non_blocking copy from a GPU lands in pinned memory, so it can really be
  // asynchronous -- and the result may be read only after a synchronize().
  const bool pinOut = non_blocking && device.isCpu() && a.is_cuda() && cuda::pinnedMemoryAvailable();
  Tensor out = Tensor::empty(src.sizes(), src.dtype(), device, pinOut);
  if (src.nbytes() > 0) {
    cuda::copyBytes(out.data_ptr(), device, src.data_ptr(), src.device(), src.nbytes(), non_blocking, src.is_pinned(), pinOut);
  }
  const Device from = a.device();
  return autograd::record(out, "ToCopyBackward0", {a}, [from](const Tensor& g, const Needs&) { return Grads{g.to(from)}; });
}

Tensor to_dtype(const Tensor& a, DType dtype) {
  const profiler::RecordScope record("aten::to", {&a});
  if (a.dtype() == dtype) return a;
  Tensor out = detail::emptyLike(a, dtype);
  detail::backendOf(a).copy(out, a);
  if (!isFloatingPoint(dtype) || !isFloatingPoint(a.dtype())) return out;  // only floating results carry gradients
  const DType from = a.dtype();
  return autograd::record(out, "ToCopyBackward0", {a}, [from](const Tensor& g, const Needs&) { return Grads{g.to(from)}; });
}

}  // namespace gpulab
