"""torch.backends.mps: Apple's Metal GPUs, which GPU Lab's engine does not drive -- as PyTorch answers on a
machine without one (every Linux machine): not built, not available."""


def is_available():
    return False


def is_built():
    return False


def is_macos13_or_newer(minor=0):
    return False
