"""torch.no_grad, enable_grad, set_grad_enabled and inference_mode: context managers (and
decorators) over the engine's per-thread grad mode."""
import functools

from . import _C

is_grad_enabled = _C.is_grad_enabled


class _GradMode:
    """A context manager that sets grad mode, and puts back what it found on exit; used as a
    decorator, it wraps each call of the function."""

    _enabled = False

    def __enter__(self):
        self._previous = _C.is_grad_enabled()
        _C._set_grad_enabled(self._enabled)
        return self

    def __exit__(self, *exc):
        _C._set_grad_enabled(self._previous)
        return False

    def __call__(self, function):
        @functools.wraps(function)
        def wrapper(*args, **kwargs):
            with self.__class__():
                return function(*args, **kwargs)

        return wrapper


class no_grad(_GradMode):
    """Ops record no graph inside: no activations are kept for backward (evaluation, updates by hand)."""

    _enabled = False


class enable_grad(_GradMode):
    """Ops record a graph again inside a no_grad block."""

    _enabled = True


class inference_mode(_GradMode):
    """As no_grad here: GPU Lab's engine has no separate inference tensors, so what PyTorch saves
    beyond no_grad (version counters, view tracking) it does not keep anyway."""

    def __init__(self, mode=True):
        self._enabled = not mode

    def __call__(self, function):
        if not callable(function) or isinstance(function, bool):
            return inference_mode(function)
        mode = not self._enabled

        @functools.wraps(function)
        def wrapper(*args, **kwargs):
            with inference_mode(mode):
                return function(*args, **kwargs)

        return wrapper


class set_grad_enabled(_GradMode):
    """Sets grad mode now (``torch.set_grad_enabled(False)``) or for a ``with`` block."""

    def __init__(self, mode):
        self._previous = _C.is_grad_enabled()
        self._enabled = bool(mode)
        _C._set_grad_enabled(self._enabled)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        _C._set_grad_enabled(self._previous)
        return False
