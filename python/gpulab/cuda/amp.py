"""torch.cuda.amp: autocast and GradScaler (GPU Lab has them in its engine; their Python face comes
with the mixed-precision lesson's code)."""


def __getattr__(name):
    from .. import _missing

    raise _missing("torch.cuda.amp", name)
