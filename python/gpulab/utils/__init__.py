"""torch.utils."""
from . import checkpoint, data  # noqa: F401


def __getattr__(name):
    from .. import _missing

    raise _missing("torch.utils", name)
