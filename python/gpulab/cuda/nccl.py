"""torch.cuda.nccl: NCCL's collectives over tensors on several GPUs of one process -- what
DataParallel-style code uses without process groups. GPU Lab runs them with the engine's NCCL
(engine/distributed) where it was built with NCCL and two or more real GPUs are usable; the emulated
GPU never counts. What GPU Lab's NCCL path does not do raises NotImplementedError naming it."""
from .. import _C

SUM = 0  # PyTorch's reduction codes: ncclSum is 0
_OPS = {0: "SUM", 1: "PROD", 2: "MAX", 3: "MIN", 4: "AVG"}


def is_available(tensors):
    """Whether NCCL can reduce `tensors`: dense, contiguous CUDA tensors, each on a different GPU, with
    NCCL usable in this process."""
    if not _C._nccl_available():
        return False
    devices = set()
    for t in tensors:
        if not isinstance(t, _C.Tensor) or not t.is_cuda or not t.is_contiguous():
            return False
        if t.device in devices:
            return False
        devices.add(t.device)
    return True


def status():
    """GPU Lab's: one line saying whether NCCL can run here, or why not ("needs at least two GPUs; ...")."""
    return _C._nccl_status()


def all_reduce(inputs, outputs=None, op=SUM, streams=None, comms=None):
    """Sums `inputs` (one tensor per GPU) element-wise into each of them, in place, queued on each GPU's
    current stream."""
    if outputs is not None or streams is not None or comms is not None:
        given = [name for name, v in (("outputs", outputs), ("streams", streams), ("comms", comms)) if v is not None]
        raise NotImplementedError(f"torch.cuda.nccl.all_reduce({', '.join(given)}=...): GPU Lab reduces in place on each GPU's "
                                  "current stream only")
    if op != SUM:
        raise NotImplementedError(f"torch.cuda.nccl.all_reduce(op={_OPS.get(op, op)}): GPU Lab sums only (divide for a mean)")
    inputs = list(inputs)
    if not inputs:
        raise ValueError("torch.cuda.nccl.all_reduce: no tensors")
    _C._nccl_all_reduce(inputs)
