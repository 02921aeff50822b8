"""GPU Lab's torch: PyTorch's Python API over GPU Lab's own engine (its CPU backend, its CUDA kernels
with cuBLAS and cuDNN, and its emulated GPU).

Used as ``torch``: ``gpulab-cli run script.py`` (or ``python3 -m gpulab script.py``) runs a PyTorch
script with ``import torch`` resolving to this package. Tensors, ops and autograd are the engine's;
nn.Module, optim's parameter groups and printing are written here in Python, as PyTorch writes them.

Without a usable GPU, CUDA code behaves as PyTorch's does on a machine without one (it raises),
unless the emulated GPU is asked for (GPULAB_EMULATED_GPU=1, ``gpulab-cli run --emulated-gpu``): then
``cuda:0`` is GPU Lab's emulated GPU -- its own memory, allocator, out-of-memory errors and
asynchronous streams, computing on the CPU. No timing taken on it is a GPU's.
"""
import builtins as _builtins
import os as _os
import sys as _sys
import types as _types

# Read once, when the engine first looks for devices: unless asked, no emulated GPU (PyTorch on a
# machine without a GPU has none).
_os.environ.setdefault("GPULAB_EMULATED_GPU", "0")

from . import _C  # noqa: E402
from ._C import (  # noqa: E402,F401
    Tensor, dtype, float32, float64, float16, bfloat16, int64, bool,
    tensor, zeros, ones, empty, full, randn, rand, randint, arange, linspace, logspace,
    zeros_like, ones_like, empty_like, full_like, randn_like, rand_like,
    manual_seed, initial_seed, is_grad_enabled, get_num_threads, set_num_threads,
    cat, stack, matmul, mm, maximum, minimum, softmax, log_softmax, where,
)
# The unary ops of engine/ops/native_ops.toml (exp, log, sin, floor, ...) and their in-place forms (exp_):
# generated bindings, listed by the binding itself.
for _name in _C._unary_ops + _C._unary_ops_in_place:
    globals()[_name] = getattr(_C, _name)
del _name
from ._size import Size  # noqa: E402
from ._device import device  # noqa: E402

_C._register_types(Size, device)

from . import _tensor  # noqa: E402,F401  (Tensor's Python methods)
from ._tensor_str import set_printoptions  # noqa: E402,F401
from ._grad_mode import no_grad, enable_grad, set_grad_enabled, inference_mode  # noqa: E402,F401

float = float32  # noqa: A001 - PyTorch's names
double = float64
half = float16
long = int64

__version__ = "1.13.0+gpulab" + _C._version()
gpulab_version = _C._version()


class _NotInGpuLab(NotImplementedError, AttributeError):
    """A PyTorch API GPU Lab's torch does not have (yet). It is an AttributeError too, so that
    ``hasattr(torch, "fft")`` is False, as it would be for any missing name; a traceback shows it as
    the NotImplementedError it is."""


_NotInGpuLab.__name__ = _NotInGpuLab.__qualname__ = "NotImplementedError"
_NotInGpuLab.__module__ = "builtins"


def _missing(module, name):
    """The error for `module.name` that GPU Lab's torch lacks: NotImplementedError naming the API when
    PyTorch has it, Python's usual AttributeError (a typo) when PyTorch has no such name either."""
    from ._pytorch_names import NAMES

    if name in NAMES.get(module, ()):
        return _NotInGpuLab(f"GPU Lab's torch has no {module}.{name} yet (GPU Lab {gpulab_version} implements the part of "
                            f"PyTorch its lessons use)")
    kind = "type object" if module == "torch.Tensor" else "module"
    return AttributeError(f"{kind} '{module}' has no attribute '{name}'")


def is_tensor(obj):
    return isinstance(obj, Tensor)


def numel(input):  # noqa: A002
    return input.numel()


def is_floating_point(input):  # noqa: A002
    return input.dtype.is_floating_point


def as_tensor(data, dtype=None, device=None):
    """data itself when it already is what is asked (a tensor, or a numpy array: its memory is shared),
    else a converted copy."""
    if not isinstance(data, Tensor) and type(data).__module__ == "numpy" and type(data).__name__ == "ndarray":
        data = from_numpy(data)
    if isinstance(data, Tensor):
        return data.to(device=device, dtype=dtype) if (device is not None or dtype is not None) else data
    return tensor(data, dtype=dtype, device=device)


def from_numpy(array):
    """A CPU tensor over the array's own memory: a change through one shows through the other."""
    return _C._from_numpy(array)


def sum(input, dim=None, keepdim=False):  # noqa: A001
    return input.sum(dim, keepdim)


def mean(input, dim=None, keepdim=False):
    return input.mean(dim, keepdim)


def max(input, dim=None, keepdim=False):  # noqa: A001
    return input.max(dim, keepdim)


def min(input, dim=None, keepdim=False):  # noqa: A001
    return input.min(dim, keepdim)


def argmax(input, dim=None, keepdim=False):
    return input.argmax(dim, keepdim)


def argmin(input, dim=None, keepdim=False):
    return input.argmin(dim, keepdim)


def flatten(input, start_dim=0, end_dim=-1):
    return input.flatten(start_dim, end_dim)


def reshape(input, shape):
    return input.reshape(shape)


def transpose(input, dim0, dim1):
    return input.transpose(dim0, dim1)


def t(input):
    return input.t()


def permute(input, dims):
    return input.permute(dims)


def squeeze(input, dim=None):
    return input.squeeze(dim)


def unsqueeze(input, dim):
    return input.unsqueeze(dim)


def select(input, dim, index):
    return input.select(dim, index)


def _written(name, result, out):
    """`result`, or written into `out` as PyTorch's out= functions write (the very object returned): of the
    result's shape (GPU Lab does not resize an out= tensor yet, and says so), able to hold its dtype, and
    outside a graph."""
    if out is None:
        return result
    if not isinstance(out, Tensor):
        raise TypeError(f"{name}(): argument 'out' must be Tensor, not {type(out).__name__}")
    if is_grad_enabled() and (result.requires_grad or out.requires_grad):
        raise RuntimeError(f"{name}(): functions with out=... arguments don't support automatic differentiation, but one of the "
                           "arguments requires grad.")
    if tuple(out.shape) != tuple(result.shape):
        raise NotImplementedError(f"torch.{name}(out=...): GPU Lab's torch does not resize an out= tensor yet: give one of the "
                                  f"result's shape {list(result.shape)}, not {list(out.shape)}")
    if result.dtype.is_floating_point and not out.dtype.is_floating_point:
        raise RuntimeError(f"result type {_scalar_type_name(result.dtype)} can't be cast to the desired output type "
                           f"{_scalar_type_name(out.dtype)}")
    return out.copy_(result)


def _scalar_type_name(dtype):
    return {"float32": "Float", "float64": "Double", "float16": "Half", "bfloat16": "BFloat16", "int64": "Long",
            "bool": "Bool"}[str(dtype).replace("torch.", "")]


def _scaled(name, input, other, alpha):
    """other * alpha, as add and sub take alpha= (an integral tensor refuses a float alpha, as PyTorch's)."""
    if alpha == 1:
        return other
    integral = not input.dtype.is_floating_point and (not isinstance(other, Tensor) or not other.dtype.is_floating_point)
    if integral and isinstance(alpha, _builtins.float):
        raise RuntimeError("For integral input tensors, argument alpha must not be a floating point number.")
    return other * alpha


def add(input, other, *, alpha=1, out=None):
    return _written("add", input + _scaled("add", input, other, alpha), out)


def sub(input, other, *, alpha=1, out=None):
    return _written("sub", input - _scaled("sub", input, other, alpha), out)


_engine_add_, _engine_sub_ = Tensor.add_, Tensor.sub_


def _method_add(self, other, *, alpha=1):
    return add(self, other, alpha=alpha)


def _method_sub(self, other, *, alpha=1):
    return sub(self, other, alpha=alpha)


def _method_add_(self, other, *, alpha=1):
    return _engine_add_(self, _scaled("add_", self, other, alpha))


def _method_sub_(self, other, *, alpha=1):
    return _engine_sub_(self, _scaled("sub_", self, other, alpha))


# Tensor.add(other, alpha=2) and add_(other, alpha=...), as PyTorch's (x.add_(g, alpha=-lr) in hand-written SGD).
Tensor.add, Tensor.sub, Tensor.add_, Tensor.sub_ = _method_add, _method_sub, _method_add_, _method_sub_


def mul(input, other, *, out=None):
    return _written("mul", input * other, out)


def div(input, other, *, rounding_mode=None, out=None):
    if rounding_mode is None:
        result = input / other
    elif rounding_mode == "floor":
        result = input // other
    elif rounding_mode == "trunc":
        if isinstance(input, Tensor) and not input.dtype.is_floating_point and \
                (not isinstance(other, Tensor) or not other.dtype.is_floating_point) and not isinstance(other, _builtins.float):
            # Exactly, in integers: the floor, one up where the quotient was negative and not whole.
            floor = input // other
            result = floor + ((input - floor * other != 0) & (floor < 0)).long()
        else:
            result = (input / other).trunc()
    else:
        raise ValueError(f"div expected rounding_mode to be one of None, 'trunc', or 'floor' but found '{rounding_mode}'")
    return _written("div", result, out)


def matmul(input, other, *, out=None):
    return _written("matmul", _C.matmul(input, other), out)


def eye(n, m=None, *, out=None, dtype=None, layout=None, device=None, requires_grad=False):
    """torch.eye: ones on the diagonal of an n x m matrix (m = n by default)."""
    if n < 0:
        raise RuntimeError(f"n must be greater or equal to 0, got {n}")
    m = n if m is None else m
    if m < 0:
        raise RuntimeError(f"m must be greater or equal to 0, got {m}")
    rows = _C.arange(n, device=device)
    result = (rows.unsqueeze(1) == _C.arange(m, device=device).unsqueeze(0)).to(float32 if dtype is None else dtype)
    if requires_grad:
        result.requires_grad_(True)
    return _written("eye", result, out)


def pow(input, exponent):  # noqa: A001
    return input ** exponent


def _number_first(name, method, reflected):
    """torch.floor_divide / torch.remainder: a tensor's method, or with a number first (torch.remainder(7, x)),
    the tensor's reflected operator."""

    def function(input, other):  # noqa: A002
        if isinstance(input, Tensor):
            return getattr(input, method)(other)
        if isinstance(other, Tensor) and isinstance(input, (_builtins.int, _builtins.float)):
            return getattr(other, reflected)(input)
        raise TypeError(f"{name}(): argument 'input' (position 1) must be Tensor, not {type(input).__name__}")

    function.__name__ = function.__qualname__ = name
    return function


floor_divide = _number_first("floor_divide", "floor_divide", "__rfloordiv__")
remainder = _number_first("remainder", "remainder", "__rmod__")


def _method_as_function(name):
    """torch.name(input, ...) as input.name(...), for the functions that are a Tensor method too."""

    def function(input, *args, **kwargs):  # noqa: A002
        return getattr(input, name)(*args, **kwargs)

    function.__name__ = function.__qualname__ = name
    return function


for _name in ("equal", "eq", "ne", "lt", "le", "gt", "ge", "logical_not", "logical_and", "logical_or", "logical_xor", "any", "all",
              "clamp", "clip", "clamp_min", "clamp_max", "nonzero", "masked_fill", "index_select", "split", "chunk"):
    globals()[_name] = _method_as_function(_name)
del _name
greater, greater_equal, less, less_equal, not_equal = gt, ge, lt, le, ne  # noqa: F821 - PyTorch's aliases


def isclose(input, other, rtol=1e-05, atol=1e-08, equal_nan=False):  # noqa: A002
    """|input - other| <= atol + rtol * |other|, elementwise (a NaN is close to nothing, equal_nan=False)."""
    if equal_nan:
        raise NotImplementedError("GPU Lab's torch has no isclose(equal_nan=True) yet")
    if input.dtype != other.dtype:
        raise RuntimeError(f"{input.dtype._scalar_type_name} did not match {other.dtype._scalar_type_name}")
    return (input - other).abs() <= atol + rtol * other.abs()


def allclose(input, other, rtol=1e-05, atol=1e-08, equal_nan=False):  # noqa: A002
    """Whether every element of input is close to other's (isclose), as a Python bool."""
    return _builtins.bool(isclose(input, other, rtol=rtol, atol=atol, equal_nan=equal_nan).all())


def detach(input):
    return input.detach()


def clone(input):
    return input.clone()


concat = cat


def use_deterministic_algorithms(mode, *, warn_only=False):
    """As PyTorch's: with mode True every op takes a deterministic algorithm. On the CPU and the
    emulated GPU every op of GPU Lab's already is; on a real GPU the convolutions then choose as with
    torch.backends.cudnn.deterministic (whose own setting this leaves alone) and index_add (index_select's
    and embedding's backward) adds in index order instead of with atomics. GPU Lab has no op without a
    deterministic algorithm, so warn_only -- warn instead of raise for such an op -- never comes into play;
    it is kept, as PyTorch keeps it, for is_deterministic_algorithms_warn_only_enabled()."""
    global _deterministic_warn_only
    if not isinstance(mode, _builtins.bool) or not isinstance(warn_only, _builtins.bool):
        bad = ("mode", mode) if not isinstance(mode, _builtins.bool) else ("warn_only", warn_only)
        raise TypeError(f"_set_deterministic_algorithms(): argument '{bad[0]}' must be bool, not {type(bad[1]).__name__}")
    _C._set_deterministic_algorithms(mode)
    _deterministic_warn_only = warn_only  # kept with mode False too, as PyTorch keeps it


_deterministic_warn_only = False


def are_deterministic_algorithms_enabled():
    return _C._deterministic_algorithms()


def is_deterministic_algorithms_warn_only_enabled():
    return _deterministic_warn_only


def set_deterministic_debug_mode(debug_mode):
    """0 or "default": off; 1 or "warn": on, warn only; 2 or "error": on."""
    if isinstance(debug_mode, str):
        modes = {"default": 0, "warn": 1, "error": 2}
        if debug_mode not in modes:
            raise RuntimeError(f"invalid value of debug_mode, expected one of `default`, `warn`, `error`, but got {debug_mode}")
        debug_mode = modes[debug_mode]
    elif not isinstance(debug_mode, _builtins.int) or isinstance(debug_mode, _builtins.bool):
        raise TypeError(f"debug_mode must be str or int, but got {type(debug_mode)}")
    if debug_mode not in (0, 1, 2):
        raise RuntimeError(f"invalid value of debug_mode, expected 0, 1, or 2, but got {debug_mode}")
    use_deterministic_algorithms(debug_mode != 0, warn_only=debug_mode == 1)


def get_deterministic_debug_mode():
    if not are_deterministic_algorithms_enabled():
        return 0
    return 1 if _deterministic_warn_only else 2


def get_default_dtype():
    return float32


from . import distributed  # noqa: E402,F401  (before nn: nn.parallel uses it)
from . import autograd, nn, optim, cuda, utils, backends, amp, profiler  # noqa: E402,F401
from . import _legacy_constructors  # noqa: E402
from ._norms_and_moments import norm, var, std, var_mean, std_mean  # noqa: E402,F401
from . import linalg  # noqa: E402,F401

_legacy_constructors.install(globals(), cuda.__dict__)  # torch.Tensor(data), torch.LongTensor, torch.cuda.FloatTensor, ...
from .amp import autocast  # noqa: E402,F401
from .serialization import save, load  # noqa: E402,F401


class _TorchModule(_types.ModuleType):
    """The package's module object: says what it is when printed, and names what it lacks."""

    def __repr__(self):
        return (f"<module 'torch' (GPU Lab {gpulab_version}: PyTorch's API on GPU Lab's engine) from "
                f"'{_os.path.dirname(__file__)}'>")

    def __getattr__(self, name):
        if name.startswith("__"):
            raise AttributeError(f"module 'torch' has no attribute '{name}'")
        raise _missing("torch", name)


_sys.modules[__name__].__class__ = _TorchModule
