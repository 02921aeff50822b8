"""torch.backends.cudnn: assigning benchmark, deterministic or allow_tf32 sets the engine's switch."""
import sys
import types

from .. import _C


class _CudnnModule(types.ModuleType):
    @property
    def benchmark(self):
        return _C._cudnn_benchmark()

    @benchmark.setter
    def benchmark(self, value):
        _C._set_cudnn_benchmark(bool(value))

    @property
    def deterministic(self):
        return _C._cudnn_deterministic()

    @deterministic.setter
    def deterministic(self, value):
        _C._set_cudnn_deterministic(bool(value))

    @property
    def allow_tf32(self):
        return _C._cudnn_allow_tf32()

    @allow_tf32.setter
    def allow_tf32(self, value):
        _C._set_cudnn_allow_tf32(bool(value))


enabled = True


def is_available():
    """cuDNN is what the engine's convolutions run on, on a real GPU."""
    return _C._cuda_real_device_count() > 0


sys.modules[__name__].__class__ = _CudnnModule
