"""torch.backends: cuDNN's switches (benchmark, deterministic, allow_tf32) and cuda.matmul.allow_tf32,
the engine's own settings (engine/runtime/cuda_runtime.h); mps, which says what PyTorch says on Linux."""
from . import cudnn, cuda, mps  # noqa: F401  (cuda uses cudnn's switch)


def __getattr__(name):
    from .. import _missing

    raise _missing("torch.backends", name)

