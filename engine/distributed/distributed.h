#pragma once
// Collectives across GPUs, for data parallelism: torch.distributed's all_reduce and broadcast as one
// process driving several GPUs (what torch.nn.DataParallel and torch.cuda.comm do), through NCCL.
//
//   PyTorch                                            GPU Lab
//   dist.all_reduce(grad, op=dist.ReduceOp.SUM)        distributed::all_reduce({g0, g1})      // g_i on cuda:i
//   dist.all_reduce(grad, op=dist.ReduceOp.AVG)        distributed::all_reduce({g0, g1}, ReduceOp::Avg)
//   torch.cuda.comm.broadcast_coalesced / dist.broadcast(p, src=0)   distributed::broadcast({p0, p1}, 0)
//
// NCCL itself lives in the CUDA module (engine/runtime/nccl_collectives.cpp), which loads libnccl.so.2
// when a collective is first asked for; this side checks the arguments and says why NCCL cannot run.
// Every collective is queued on each GPU's current stream and returns at once, as in PyTorch: a
// copy to the host, synchronize() or an event on that stream waits for it.
#include <string>
#include <vector>

#include "engine/core/tensor.h"

namespace gpulab::distributed {

enum class ReduceOp { Sum, Avg };

// Whether NCCL collectives can run in this process: the CUDA module (libgpulab-cuda.so) was built with
// NCCL, NCCL could be loaded, and at least two real GPUs are usable. The emulated GPU never counts.
bool ncclAvailable();
// One line for a UI: "NCCL 2.28.9 over 2 GPUs", or why not ("GPU Lab was built without NCCL", "needs at
// least two GPUs; this machine has 1", "no CUDA module: ...").
std::string ncclStatus();

// torch.distributed.all_reduce, one process driving several GPUs: `tensors` holds one tensor per GPU --
// same shape and dtype (float32, float64, float16, bfloat16), contiguous, each on a different real CUDA
// device. Afterwards each holds the element-wise sum (Sum) or mean (Avg) of all. Queued on each GPU's
// current stream (asynchronous). Throws Error when NCCL is not available (saying why) or an argument
// is wrong (naming it); the tensors are untouched then.
void all_reduce(const std::vector<Tensor>& tensors, ReduceOp op = ReduceOp::Sum);

// Copies tensors[root]'s values into every other tensor (ncclBroadcast); same rules as all_reduce.
void broadcast(const std::vector<Tensor>& tensors, int root = 0);

}  // namespace gpulab::distributed
