"""torch.backends.cudnn: assigning benchmark, deterministic or allow_tf32 sets the engine's switch."""
import sys
import types

from .. import _C


def switch(get, set_):
    """A module or object attribute that reads and sets one of the engine's switches."""
    return property(lambda self: get(), lambda self, value: set_(bool(value)))


class _CudnnModule(types.ModuleType):
    benchmark = switch(_C._cudnn_benchmark, _C._set_cudnn_benchmark)
    deterministic = switch(_C._cudnn_deterministic, _C._set_cudnn_deterministic)
    allow_tf32 = switch(_C._cudnn_allow_tf32, _C._set_cudnn_allow_tf32)


enabled = True


def is_available():
    """cuDNN is what the engine's convolutions run on, on a real GPU."""
    return _C._cuda_real_device_count() > 0


sys.modules[__name__].__class__ = _CudnnModule
