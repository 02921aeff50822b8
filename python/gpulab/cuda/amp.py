"""torch.cuda.amp: autocast for CUDA (float16 by default) and the GradScaler."""
from .. import _C
from .. import amp as _amp


class autocast(_amp.autocast):
    """``with torch.cuda.amp.autocast():`` is ``torch.autocast("cuda", dtype=torch.float16)``."""

    def __init__(self, enabled=True, dtype=_C.float16, cache_enabled=True):
        super().__init__("cuda", dtype=dtype, enabled=enabled, cache_enabled=cache_enabled)


class GradScaler(_amp.GradScaler):
    def __init__(self, init_scale=2.0 ** 16, growth_factor=2.0, backoff_factor=0.5, growth_interval=2000, enabled=True):
        super().__init__("cuda", init_scale, growth_factor, backoff_factor, growth_interval, enabled)


def __getattr__(name):
    from .. import _missing

    raise _missing("torch.cuda.amp", name)
