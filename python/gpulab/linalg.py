"""torch.linalg: the vector norms (and linalg.norm's vector and Frobenius cases) and matmul; PyTorch's
other linalg functions raise NotImplementedError naming themselves."""
from . import matmul  # noqa: F401  (torch.matmul, out= and all)
from ._norms_and_moments import vector_norm, linalg_norm as norm  # noqa: F401


def __getattr__(name):
    from . import _missing

    raise _missing("torch.linalg", name)
