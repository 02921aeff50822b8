"""torch.backends.cuda.matmul.allow_tf32: whether float32 matrix products may use TF32 tensor cores."""
from .. import _C


class _Matmul:
    @property
    def allow_tf32(self):
        return _C._matmul_allow_tf32()

    @allow_tf32.setter
    def allow_tf32(self, value):
        _C._set_matmul_allow_tf32(bool(value))


matmul = _Matmul()
