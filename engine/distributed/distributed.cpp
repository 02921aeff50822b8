// The engine's side of the collectives: say whether NCCL can run, check the tensors as PyTorch would,
// and hand their buffers to the CUDA module (engine/runtime/nccl_collectives.cpp). Compiled in every
// build: without a CUDA module (a CPU-only build, or one that cannot load) ncclStatus() says why.
//
// Order of the checks: NCCL's availability first, as PyTorch raises "Default process group has not been
// initialized" before it looks at a tensor -- on a machine without two GPUs no call can succeed, and the
// reason is what a learner needs to see -- then the tensors, each failure naming the offending one.
#include "engine/distributed/distributed.h"

#include <cstddef>

#include "engine/core/errors.h"
#include "engine/runtime/cuda_module.h"
#include "engine/runtime/cuda_runtime.h"
#include "engine/runtime/device_runtime.h"

namespace gpulab::distributed {

namespace {

std::string nameOf(std::size_t i) { return "tensors[" + std::to_string(i) + "]"; }

// The checks all_reduce and broadcast share; the tensors' buffers, in rank order, when all pass.
std::vector<cuda::CollectiveBuffer> checkedBuffers(const char* op, const std::vector<Tensor>& tensors) {
  const std::string prefix = std::string(op) + ": ";
  const cuda::NcclInfo nccl = cuda::ncclInfo();
  if (!nccl.available) throw Error(prefix + "NCCL is not available: " + nccl.status);
  if (tensors.size() < 2) {
    throw ValueError(prefix + "expected one tensor per GPU, at least 2, but got " + std::to_string(tensors.size()));
  }
  std::vector<cuda::CollectiveBuffer> buffers;
  for (std::size_t i = 0; i < tensors.size(); ++i) {
    const Tensor& t = tensors[i];
    const std::string name = nameOf(i);
    if (!t.defined()) throw ValueError(prefix + name + " is an undefined tensor");
    const Device device = t.device();
    if (!device.isCuda()) {
      throw Error(prefix + "Tensors must be CUDA and dense, but " + name + " is on " + device.str() +
                  " (NCCL works on GPU memory: move it with .to(cuda:N) first)");
    }
    if (cuda::isEmulatedGpu(device)) {
      throw Error(prefix + name + " is on the emulated GPU " + device.str() +
                  ", which NCCL cannot use: collectives need real GPUs");
    }
    cuda::checkDeviceUsable(device);  // a cuda:N that does not exist here
    for (std::size_t j = 0; j < i; ++j) {
      if (tensors[j].device() == device) {
        throw Error(prefix + "Duplicate GPU detected: " + nameOf(j) + " and " + name + " are both on " +
                    device.str() + " (one tensor per GPU)");
      }
    }
    const Tensor& first = tensors[0];
    if (t.dtype() != first.dtype()) {
      throw Error(prefix + "Tensors must have the same dtype, but tensors[0] is " + dtypeName(first.dtype()) + " and " +
                  name + " is " + dtypeName(t.dtype()));
    }
    if (t.sizes() != first.sizes()) {
      throw Error(prefix + "Tensors must have the same shape, but tensors[0] has shape " + shapeStr(first.sizes()) +
                  " and " + name + " has shape " + shapeStr(t.sizes()));
    }
    if (!t.is_contiguous()) {
      throw Error(prefix + "Tensors must be contiguous, but " + name + " is not (call .contiguous() on it first)");
    }
    buffers.push_back({t.data_ptr(), device.index()});
  }
  const DType dtype = tensors[0].dtype();
  if (dtype != kFloat32 && dtype != kFloat64 && dtype != kFloat16 && dtype != kBFloat16) {
    throw NotImplementedError(prefix + "unsupported dtype " + dtypeName(dtype) +
                              " (GPU Lab's collectives take float32, float64, float16 and bfloat16)");
  }
  return buffers;
}

}  // namespace

bool ncclAvailable() { return cuda::ncclInfo().available; }

std::string ncclStatus() { return cuda::ncclInfo().status; }

void all_reduce(const std::vector<Tensor>& tensors, ReduceOp op) {
  const std::vector<cuda::CollectiveBuffer> buffers = checkedBuffers("all_reduce", tensors);
  const auto count = static_cast<std::size_t>(tensors[0].numel());
  if (count == 0) return;  // nothing to reduce
  cuda::ncclAllReduce(buffers, count, tensors[0].dtype(), op);
}

void broadcast(const std::vector<Tensor>& tensors, int root) {
  const std::vector<cuda::CollectiveBuffer> buffers = checkedBuffers("broadcast", tensors);
  if (root < 0 || root >= static_cast<int>(tensors.size())) {
    throw IndexError("broadcast: root " + std::to_string(root) + " is out of range for " + std::to_string(tensors.size()) +
                     " tensors (expected 0 to " + std::to_string(tensors.size() - 1) + ")");
  }
  const auto count = static_cast<std::size_t>(tensors[0].numel());
  if (count == 0) return;
  cuda::ncclBroadcast(buffers, count, tensors[0].dtype(), root);
}

}  // namespace gpulab::distributed
