"""torch.nn.functional over the engine's ops."""
from .. import _C


def linear(input, weight, bias=None):  # noqa: A002 - PyTorch's parameter names
    return _C.linear(input, weight, bias)


def relu(input, inplace=False):
    out = _C.relu(input)
    return input.copy_(out) if inplace else out


def gelu(input, approximate="none"):
    return _C.gelu(input, approximate)


def sigmoid(input):
    return _C.sigmoid(input)


def tanh(input):
    return _C.tanh(input)


def softmax(input, dim=None, dtype=None):
    if dim is None:
        raise TypeError("softmax() missing the 'dim' argument (PyTorch's implicit dim choice is deprecated; GPU Lab asks for it)")
    return _C.softmax(input if dtype is None else input.to(dtype), dim)


def log_softmax(input, dim=None, dtype=None):
    if dim is None:
        raise TypeError("log_softmax() missing the 'dim' argument")
    return _C.log_softmax(input if dtype is None else input.to(dtype), dim)


def dropout(input, p=0.5, training=True, inplace=False):
    if p < 0.0 or p > 1.0:  # before anything else, in training or not, as PyTorch checks it
        raise ValueError(f"dropout probability has to be between 0 and 1, but got {p}")
    out = _C.dropout(input, p, training)
    return input.copy_(out) if inplace else out


def _reduction(size_average, reduce, reduction):
    if size_average is None and reduce is None:
        return reduction
    size_average = True if size_average is None else size_average
    reduce = True if reduce is None else reduce
    return ("mean" if size_average else "sum") if reduce else "none"


def mse_loss(input, target, size_average=None, reduce=None, reduction="mean"):
    return _C.mse_loss(input, target, _reduction(size_average, reduce, reduction))


def l1_loss(input, target, size_average=None, reduce=None, reduction="mean"):
    return _C.l1_loss(input, target, _reduction(size_average, reduce, reduction))


def nll_loss(input, target, weight=None, size_average=None, ignore_index=-100, reduce=None, reduction="mean"):
    if weight is not None:
        raise NotImplementedError("GPU Lab's torch has no class weights in nll_loss yet")
    return _C.nll_loss(input, target, _reduction(size_average, reduce, reduction))


def cross_entropy(input, target, weight=None, size_average=None, ignore_index=-100, reduce=None, reduction="mean",
                  label_smoothing=0.0):
    if weight is not None or label_smoothing:
        raise NotImplementedError("GPU Lab's torch has no class weights or label smoothing in cross_entropy yet")
    return _C.cross_entropy(input, target, _reduction(size_average, reduce, reduction))


def conv2d(input, weight, bias=None, stride=1, padding=0, dilation=1, groups=1):
    return _C.conv2d(input, weight, bias, stride, padding, dilation, groups)


def max_pool2d(input, kernel_size, stride=None, padding=0, dilation=1, ceil_mode=False, return_indices=False):
    if return_indices:
        raise NotImplementedError("GPU Lab's torch has no max_pool2d(return_indices=True) yet")
    return _C.max_pool2d(input, kernel_size, stride if stride else None, padding, dilation, ceil_mode)


def avg_pool2d(input, kernel_size, stride=None, padding=0, ceil_mode=False, count_include_pad=True, divisor_override=None):
    if divisor_override is not None:
        raise NotImplementedError("GPU Lab's torch has no avg_pool2d(divisor_override=...) yet")
    return _C.avg_pool2d(input, kernel_size, stride if stride else None, padding, ceil_mode, count_include_pad)


def adaptive_avg_pool2d(input, output_size):
    return _C.adaptive_avg_pool2d(input, output_size)


def batch_norm(input, running_mean, running_var, weight=None, bias=None, training=False, momentum=0.1, eps=1e-5):
    return _C.batch_norm(input, running_mean, running_var, weight, bias, training, momentum, eps)


def flatten(input, start_dim=0, end_dim=-1):
    return input.flatten(start_dim, end_dim)


def __getattr__(name):
    from .. import _missing

    raise _missing("torch.nn.functional", name)
