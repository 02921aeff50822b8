"""torch.backends: cudnn's and cuda.matmul's switches (set through the lessons' engine settings)."""


def __getattr__(name):
    from .. import _missing

    raise _missing("torch.backends", name)
