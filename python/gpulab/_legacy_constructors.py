"""PyTorch's legacy constructors, as PyTorch 2 keeps them for old code: torch.Tensor(data) and
torch.Tensor(*sizes) (float32, the default dtype), and the typed classes torch.FloatTensor,
torch.LongTensor, ... and torch.cuda.FloatTensor, ..., which make a tensor of their dtype (and device)
and answer isinstance for tensors of it."""
from . import _C

Tensor = _C.Tensor
_engine_init = Tensor.__init__


def _is_sizes(args):
    """Tensor(2, 3) and Tensor(torch.Size([2, 3])) give sizes; Tensor([2, 3]) and Tensor((2, 3)) give data."""
    from ._size import Size

    if len(args) == 1 and isinstance(args[0], Size):
        return True
    return all(isinstance(a, int) and not isinstance(a, bool) for a in args)


def _legacy(args, dtype, device):
    """The tensor a legacy constructor makes of `args`."""
    if not args:
        return _C.empty(0, dtype=dtype, device=device)
    if len(args) == 1 and isinstance(args[0], Tensor):
        return args[0]
    if _is_sizes(args):
        sizes = tuple(args[0]) if len(args) == 1 and not isinstance(args[0], int) else args
        return _C.empty(*sizes, dtype=dtype, device=device)
    if len(args) > 1:
        raise TypeError(f"new() received an invalid combination of arguments - got {len(args)} arguments, but expected data "
                        "or a tuple of ints size")
    return _C.tensor(args[0], dtype=dtype, device=device)


def _tensor_init(self, *args, device=None, **kwargs):
    """torch.Tensor(...): a tensor of float32 from data or of the given sizes (uninitialised), as PyTorch's
    legacy constructor; Tensor(t) is t's memory. dtype= is refused as PyTorch refuses it."""
    if kwargs:
        raise TypeError(f"new() received an invalid combination of arguments - got ({', '.join(kwargs)}=...), but expected one "
                        "of: (*, torch.device device), (Tensor other), (tuple of ints size, *, torch.device device), "
                        "(object data, *, torch.device device)")
    made = _legacy(args, _C.float32, device)
    _engine_init(self, made)


class _LegacyType(type):
    """torch.LongTensor and the others: calling one makes a tensor of its dtype and device; isinstance
    holds for every tensor of them (type(t) stays torch.Tensor, as in PyTorch)."""

    def __instancecheck__(cls, obj):
        return isinstance(obj, Tensor) and obj.dtype == cls.dtype and obj.device.type == cls.device_type

    def __call__(cls, *args, device=None):
        if device is not None and str(device).split(":")[0] != cls.device_type:
            raise RuntimeError(f"legacy constructor expects device type: {cls.device_type} but device type: "
                               f"{str(device).split(':')[0]} was passed")
        made = _legacy(args, cls.dtype, device if device is not None else cls.device_type)
        if made.dtype != cls.dtype or made.device.type != cls.device_type:
            made = made.to(device=device if device is not None else cls.device_type, dtype=cls.dtype)
        return made

    def __repr__(cls):
        return f"<class '{cls.__module__}.{cls.__name__}'>"


_TYPES = {"FloatTensor": "float32", "DoubleTensor": "float64", "HalfTensor": "float16", "BFloat16Tensor": "bfloat16",
          "LongTensor": "int64", "BoolTensor": "bool"}


def _types(module, device_type):
    return {name: _LegacyType(name, (), {"dtype": getattr(_C, dtype), "device_type": device_type, "__module__": module})
            for name, dtype in _TYPES.items()}


def install(torch_namespace, cuda_namespace):
    Tensor.__init__ = _tensor_init
    torch_namespace.update(_types("torch", "cpu"))
    cuda_namespace.update(_types("torch.cuda", "cuda"))
