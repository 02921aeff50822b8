"""torch.backends.cuda.matmul.allow_tf32: whether float32 matrix products may use TF32 tensor cores."""
from .. import _C
from .cudnn import switch


class _Matmul:
    allow_tf32 = switch(_C._matmul_allow_tf32, _C._set_matmul_allow_tf32)


matmul = _Matmul()
