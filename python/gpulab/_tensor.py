"""What torch.Tensor does in Python: printing, iteration, conversions to Python numbers and numpy,
max/min with their named results, and the few methods whose argument forms are easier to take here."""
import collections

from . import _C
from ._tensor_str import tensor_repr

Tensor = _C.Tensor

# torch.return_types.max / min: named (values, indices) pairs.
max_result = collections.namedtuple("max", ["values", "indices"])
min_result = collections.namedtuple("min", ["values", "indices"])


def _repr(self, *, tensor_contents=None):
    return tensor_repr(self)


def _format(self, spec):
    if self.dim() == 0:
        return self.item().__format__(spec)
    return object.__format__(self, spec)


def _len(self):
    if self.dim() == 0:
        raise TypeError("len() of a 0-d tensor")
    return self.shape[0]


def _iter(self):
    if self.dim() == 0:
        raise TypeError("iteration over a 0-d tensor")
    return (self[i] for i in range(self.shape[0]))


def _bool(self):
    if self.numel() != 1:
        raise RuntimeError("Boolean value of Tensor with more than one value is ambiguous")
    return bool(self.item())


def _scalar(convert):
    def method(self):
        if self.numel() != 1:
            raise ValueError("only one element tensors can be converted to Python scalars")
        return convert(self.item())

    return method


_float = _scalar(float)
_int = _scalar(int)


def _index(self):
    if self.dtype.is_floating_point or self.numel() != 1:
        raise TypeError("only integer tensors of a single element can be converted to an index")
    return int(self.item())


def _extreme(result, elementwise, over_all, along_dim):
    """x.max() / x.min(): over all elements; along a dim as (values, indices); or with another tensor,
    elementwise (torch.maximum / minimum)."""

    def method(self, dim=None, keepdim=False):
        if isinstance(dim, Tensor):
            return elementwise(self, dim)
        if dim is None:
            return over_all(self)
        return result(*along_dim(self, dim, keepdim))

    return method


_max = _extreme(max_result, _C.maximum, _C._max, _C._max_dim)
_min = _extreme(min_result, _C.minimum, _C._min, _C._min_dim)


def _equal(self, other):
    """torch.equal: the same shape and the same values (NaN equals nothing, as in PyTorch)."""
    return self.shape == other.shape and bool((self == other).all())


def _numpy(self, *, force=False):
    """An array over the tensor's own memory (a CPU tensor's), as PyTorch's: writes show through both.
    force=True first detaches and copies to the CPU, as PyTorch's force does."""
    if force:
        self = self.detach().cpu()  # noqa: PLW0642
    if self.requires_grad:
        raise RuntimeError("Can't call numpy() on Tensor that requires grad. Use tensor.detach().numpy() instead.")
    if self.is_cuda:
        raise TypeError(f"can't convert {self.device} device type tensor to numpy. Use Tensor.cpu() to copy the tensor to host memory first.")
    return _C._to_numpy(self)


def _array(self, dtype=None):
    array = _numpy(self.detach())
    return array if dtype is None else array.astype(dtype, copy=False)


def _type(self, dtype=None, non_blocking=False):
    names = {_C.float32: "FloatTensor", _C.float64: "DoubleTensor", _C.float16: "HalfTensor", _C.bfloat16: "BFloat16Tensor",
             _C.int64: "LongTensor", _C.bool: "BoolTensor"}
    if dtype is None:
        return ("torch.cuda." if self.is_cuda else "torch.") + names[self.dtype]
    return self.to(dtype, non_blocking=non_blocking)


def _new_factory(name):
    make = getattr(_C, name)

    def method(self, *size, dtype=None, device=None, requires_grad=False):
        return make(*size, dtype=dtype or self.dtype, device=device or self.device, requires_grad=requires_grad)

    method.__name__ = "new_" + name
    return method


def _new_full(self, size, fill_value, *, dtype=None, device=None, requires_grad=False):
    return _C.full(size, fill_value, dtype=dtype or self.dtype, device=device or self.device, requires_grad=requires_grad)


def _new_tensor(self, data, *, dtype=None, device=None, requires_grad=False):
    return _C.tensor(data, dtype=dtype or self.dtype, device=device or self.device, requires_grad=requires_grad)


def _reduce_ex(self, protocol):
    """pickle.dumps(tensor) and copy.deepcopy(tensor): the bytes of its storage and its view of them
    (torch.save writes each storage once instead: python/gpulab/serialization.py)."""
    from . import serialization

    return (serialization._rebuild_from_storage_bytes,
            (_C._storage_bytes(self), repr(self.dtype).replace("torch.", ""), str(self.device), tuple(self.shape),
             tuple(self.stride()), self.storage_offset(), self.requires_grad))


def _getattr(self, name):
    """Only for names Tensor lacks: PyTorch's Tensor methods GPU Lab has not got yet say so."""
    from . import _missing
    from ._pytorch_names import NAMES

    if name in NAMES["torch.Tensor"]:
        raise _missing("torch.Tensor", name)
    raise AttributeError(f"'Tensor' object has no attribute '{name}'")


def _pieces(self, sizes, dim):
    """Views of consecutive pieces of `sizes` along `dim` (basic slicing: they share memory, and
    gradients flow back through them)."""
    lead = (slice(None),) * dim
    pieces, start = [], 0
    for n in sizes:
        pieces.append(self[lead + (slice(start, start + n),)])
        start += n
    return tuple(pieces)


def _dim_of(self, dim):
    if not -self.dim() <= dim < max(self.dim(), 1):
        raise IndexError(f"Dimension out of range (expected to be in range of [{-self.dim()}, {self.dim() - 1}], but got {dim})")
    return dim % self.dim()


def _split(self, split_size_or_sections, dim=0):
    """x.split(256): pieces of 256 along dim 0 (the last may be smaller); x.split([2, 3]): pieces of
    those sizes, which must add up to the dim's size."""
    dim = _dim_of(self, dim)
    size = self.shape[dim]
    if isinstance(split_size_or_sections, int):
        step = split_size_or_sections
        if step <= 0 and not (step == 0 and size == 0):
            raise RuntimeError(f"split_size can only be 0 if dimension size is 0, but got dimension size of {size}")
        sizes = [step] * (size // step) + ([size % step] if step and size % step else [])
        return _pieces(self, sizes or [0], dim)
    sizes = [int(s) for s in split_size_or_sections]
    if any(s < 0 for s in sizes) or sum(sizes) != size:
        raise RuntimeError(f"split_with_sizes expects split_sizes to sum exactly to {size} (input tensor's size at dimension {dim}), "
                           f"but got split_sizes={sizes}")
    return _pieces(self, sizes, dim)


def _chunk(self, chunks, dim=0):
    """x.chunk(4): at most 4 pieces of equal size along dim (the last may be smaller), as PyTorch cuts them."""
    if chunks <= 0:
        raise RuntimeError("chunk expects `chunks` to be greater than 0, got: " + str(chunks))
    return _split(self, -(-self.shape[_dim_of(self, dim)] // chunks), dim)


Tensor.__getattr__ = _getattr
Tensor.__reduce_ex__ = _reduce_ex
Tensor.__repr__ = _repr
# no Tensor.__str__: print() reaches the type's __repr__, as in PyTorch, so Parameter prints "Parameter containing:"
Tensor.__format__ = _format
Tensor.__len__ = _len
Tensor.__iter__ = _iter
Tensor.__bool__ = _bool
Tensor.__float__ = _float
Tensor.__int__ = _int
Tensor.__index__ = _index
Tensor.__array__ = _array
Tensor.split = _split
Tensor.chunk = _chunk
Tensor.max = _max
Tensor.min = _min
Tensor.equal = _equal
Tensor.numpy = _numpy
Tensor.type = _type
Tensor.new_zeros = _new_factory("zeros")
Tensor.new_ones = _new_factory("ones")
Tensor.new_empty = _new_factory("empty")
Tensor.new_full = _new_full
Tensor.new_tensor = _new_tensor
Tensor.__module__ = "torch"
