"""torch.device: where a tensor lives ("cpu", "cuda:0"). A CUDA device without an index means the
current CUDA device when a tensor is made on it, as in PyTorch."""
import builtins


class device:
    """``torch.device("cuda:0")``, ``torch.device("cuda", 0)``, ``torch.device("cpu")``."""

    __slots__ = ("_type", "_index")

    def __init__(self, type, index=None):  # noqa: A002 - PyTorch's parameter name
        if isinstance(type, device):
            if index is not None:
                raise TypeError("device(): a torch.device cannot be given with an index")
            self._type, self._index = type.type, type.index
            return
        if isinstance(type, int) and not isinstance(type, bool):
            if type < 0:
                raise RuntimeError("Device index must not be negative")
            self._type, self._index = "cuda", type
            return
        if not isinstance(type, str):
            raise TypeError(f"device() received an invalid combination of arguments - got ({builtins.type(type).__name__})")
        text = type
        if ":" in text:
            if index is not None:
                raise RuntimeError(f"type (string) must not include an index because index was passed explicitly: {text}")
            text, _, number = text.partition(":")
            if not number.isdigit():
                raise RuntimeError(f"Invalid device string: '{type}'")
            index = int(number)
        if text not in ("cpu", "cuda"):
            raise RuntimeError(f"Expected one of cpu, cuda device type at start of device string: {type}")
        if index is not None:
            if not isinstance(index, int) or isinstance(index, bool):
                raise TypeError("device(): argument 'index' must be int")
            if index < 0:
                raise RuntimeError("Device index must not be negative")
            if text == "cpu" and index != 0:
                raise RuntimeError("CPU device index must be -1 or zero, got " + str(index))
        self._type, self._index = text, index

    @property
    def type(self):
        return self._type

    @property
    def index(self):
        return self._index

    def __str__(self):
        return self._type if self._index is None else f"{self._type}:{self._index}"

    def __repr__(self):
        if self._index is None:
            return f"device(type='{self._type}')"
        return f"device(type='{self._type}', index={self._index})"

    def __eq__(self, other):
        if isinstance(other, str):
            try:
                other = device(other)
            except (RuntimeError, TypeError):
                return False
        return isinstance(other, device) and (self._type, self._index) == (other._type, other._index)

    def __hash__(self):
        return hash((self._type, self._index))

    def __reduce__(self):
        return (device, (str(self),))
