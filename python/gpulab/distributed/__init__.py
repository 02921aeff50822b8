"""torch.distributed: the names a script uses, and PyTorch's errors where a process group is needed.
GPU Lab's torch runs in one process: it has no process groups yet (lesson 'Several GPUs' runs DDP's
replicas in one process, with torch.cuda.nccl's all-reduce on several real GPUs)."""
import enum
import os


class ReduceOp(enum.Enum):
    SUM = 0
    AVG = 1
    PRODUCT = 2
    MIN = 3
    MAX = 4


_REQUIRED = ("RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT")


def is_available():
    return True


def is_initialized():
    return False


def is_nccl_available():
    from .. import _C

    return _C._cuda_real_device_count() > 0


def init_process_group(backend=None, init_method=None, timeout=None, world_size=-1, rank=-1, store=None, group_name="",
                       pg_options=None):
    """PyTorch's checks, in PyTorch's order: the arguments, then the env:// rendezvous (RANK, WORLD_SIZE,
    MASTER_ADDR and MASTER_PORT, which torchrun sets); then, where PyTorch would make the process group
    with `backend`, NotImplementedError naming it."""
    import datetime

    if timeout is not None and not isinstance(timeout, datetime.timedelta):
        raise TypeError(f"Expected timeout argument to be of type datetime.timedelta, got {timeout}")
    if backend is not None and not isinstance(backend, str):
        raise ValueError("Backend constructor parameter must be string-ish")
    if init_method in (None, "env://") and store is None:
        for name in _REQUIRED:
            if name == "RANK" and rank >= 0 or name == "WORLD_SIZE" and world_size >= 0:
                continue
            if name not in os.environ:
                raise ValueError(f"Error initializing torch.distributed using env:// rendezvous: environment variable {name} "
                                 "expected, but not set")
    chosen = backend.lower() if backend else "the default backend (gloo on the CPU, nccl on a GPU)"
    raise NotImplementedError(f"torch.distributed.init_process_group(backend={backend!r}): GPU Lab's torch has no process "
                              f"groups yet, so it cannot make one with {chosen}; it runs in one process (the lesson "
                              "'Several GPUs' runs DistributedDataParallel's ranks in GPU Lab's engine)")


def _no_group(*args, **kwargs):
    raise RuntimeError("Default process group has not been initialized, please make sure to call init_process_group.")


get_rank = get_world_size = barrier = all_reduce = broadcast = all_gather = reduce = destroy_process_group = _no_group


def __getattr__(name):
    from .. import _missing

    raise _missing("torch.distributed", name)
