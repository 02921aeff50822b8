"""Norms and moments with PyTorch 2.x's signatures: Tensor.norm / torch.norm, torch.linalg.vector_norm
and linalg.norm's vector cases (python/gpulab/linalg.py), var / std / var_mean / std_mean. The engine
computes each (engine/ops/reduction.cpp: one node, LinalgVectorNormBackward0, VarBackward0,
StdBackward0); this file only sorts PyTorch's argument forms out: a dim as an int or a sequence,
unbiased= or correction=, var(False) meaning unbiased=False."""
import numbers
import operator

from . import _C
from ._C import Tensor


def _dims(dim, function):
    """An int, a sequence of ints or None as the engine's list (empty: every dim)."""
    if dim is None:
        return []
    if isinstance(dim, (list, tuple)):
        return [operator.index(d) for d in dim]
    if isinstance(dim, bool) or not hasattr(dim, "__index__"):
        raise TypeError(f"{function}(): argument 'dim' must be tuple of ints, not {type(dim).__name__}")
    return [operator.index(dim)]


def _order(ord, function):
    if isinstance(ord, bool) or not isinstance(ord, numbers.Real):
        raise TypeError(f"{function}(): argument 'ord' must be Number, not {type(ord).__name__}")
    return float(ord)


def vector_norm(x, ord=2, dim=None, keepdim=False, *, dtype=None, out=None):
    if out is not None:
        raise NotImplementedError("GPU Lab's torch has no out= for torch.linalg.vector_norm yet")
    return _C._vector_norm(x, _order(ord, "linalg_vector_norm"), _dims(dim, "linalg_vector_norm"), keepdim, dtype)


def _matrix_norm_missing(ord):
    from . import _NotInGpuLab
    return _NotInGpuLab(f"GPU Lab's torch has no torch.linalg.matrix_norm yet (ord={ord!r}): it computes vector norms "
                        "and the Frobenius norm")


def norm(input, p="fro", dim=None, keepdim=False, out=None, dtype=None):
    """torch.norm as PyTorch 2.x routes it: 'fro' over at most two dims and every number are vector norms
    (torch.linalg.vector_norm), 'nuc' and 'fro' over more dims are matrix norms."""
    if out is not None:
        raise NotImplementedError("GPU Lab's torch has no out= for torch.norm yet")
    if isinstance(p, str):
        if p == "fro" and (dim is None or isinstance(dim, numbers.Integral) or len(dim) <= 2):
            return vector_norm(input, 2, dim, keepdim, dtype=dtype)
        if p not in ("fro", "nuc"):
            raise RuntimeError(f"linalg.matrix_norm: Order {p} not supported.")
        raise _matrix_norm_missing(p)
    return vector_norm(input, 2.0 if p is None else p, dim, keepdim, dtype=dtype)


def linalg_norm(A, ord=None, dim=None, keepdim=False, *, out=None, dtype=None):
    """torch.linalg.norm: a vector norm unless `ord` asks a matrix norm of two dims (only the Frobenius
    one, a vector 2-norm of the matrix's elements, is here)."""
    if out is not None:
        raise NotImplementedError("GPU Lab's torch has no out= for torch.linalg.norm yet")
    dims = None if dim is None else ((dim,) if isinstance(dim, numbers.Integral) else tuple(dim))
    if dims is not None and len(dims) not in (1, 2):
        raise RuntimeError(f"linalg.norm: If dim is specified, it must be of length 1 or 2. Got {list(dims)}")
    if dims is None and ord is not None and A.dim() not in (1, 2):
        raise RuntimeError(f"linalg.norm: If dim is not specified but ord is, the input must be 1D or 2D. Got {A.dim()}D.")
    matrix = (dims is not None and len(dims) == 2) or (dims is None and ord is not None and A.dim() == 2)
    if ord is None or (matrix and ord == "fro"):
        return vector_norm(A, 2, dims, keepdim, dtype=dtype)
    if matrix or isinstance(ord, str):
        if isinstance(ord, str) and ord not in ("fro", "nuc"):
            raise RuntimeError(f"linalg.matrix_norm: Order {ord} not supported.")
        raise _matrix_norm_missing(ord)
    return vector_norm(A, ord, dims, keepdim, dtype=dtype)


def _correction(function, unbiased, correction):
    if unbiased is not None and correction is not None:
        raise TypeError(f"{function}() received an invalid combination of arguments: unbiased= and correction= together")
    if correction is not None:
        if isinstance(correction, bool) or not isinstance(correction, numbers.Real):
            raise TypeError(f"{function}(): argument 'correction' must be Number, not {type(correction).__name__}")
        return float(correction)
    return 1.0 if unbiased is None or unbiased else 0.0


def _moment(engine, function):
    def moment(input, dim=None, unbiased=None, keepdim=False, *, correction=None, out=None):
        if out is not None:
            raise NotImplementedError(f"GPU Lab's torch has no out= for torch.{function} yet")
        if isinstance(dim, bool):  # var(False): the overload var(unbiased)
            if unbiased is not None:
                raise TypeError(f"{function}() received an invalid combination of arguments")
            dim, unbiased = None, dim
        return engine(input, _dims(dim, function), _correction(function, unbiased, correction), keepdim)

    moment.__name__ = function
    moment.__doc__ = f"torch.{function}: over `dim` (None: every element), dividing by n - correction (1 by default)."
    return moment


var = _moment(_C._var, "var")
std = _moment(_C._std, "std")


def _with_mean(moment, function):
    def with_mean(input, dim=None, unbiased=None, keepdim=False, *, correction=None):
        value = moment(input, dim, unbiased, keepdim, correction=correction)
        dims = None if isinstance(dim, bool) else dim  # var_mean(x, False): unbiased, over every element
        return value, (input.mean() if dims is None else input.mean(dims, keepdim))

    with_mean.__name__ = function
    return with_mean


var_mean = _with_mean(var, "var_mean")
std_mean = _with_mean(std, "std_mean")

Tensor.norm = lambda self, p="fro", dim=None, keepdim=False, dtype=None: norm(self, p, dim, keepdim, dtype=dtype)
Tensor.var = lambda self, dim=None, unbiased=None, keepdim=False, *, correction=None: var(self, dim, unbiased, keepdim, correction=correction)
Tensor.std = lambda self, dim=None, unbiased=None, keepdim=False, *, correction=None: std(self, dim, unbiased, keepdim, correction=correction)
