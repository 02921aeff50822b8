"""torch.nn.functional over the engine's ops."""
from .. import _C


def linear(input, weight, bias=None):  # noqa: A002 - PyTorch's parameter names
    return _C.linear(input, weight, bias)


def relu(input, inplace=False):
    return _C.relu_(input) if inplace else _C.relu(input)


def gelu(input, approximate="none"):
    return _C.gelu(input, approximate)


def sigmoid(input):
    return _C.sigmoid(input)


def tanh(input):
    return _C.tanh(input)


def _implicit_dim(name, ndim):
    """PyTorch's choice where softmax is called without dim (deprecated, and it warns): dim 0 for 0-, 1- and
    3-dimensional inputs, 1 otherwise (torch/nn/functional.py's _get_softmax_dim)."""
    import warnings

    warnings.warn(f"Implicit dimension choice for {name} has been deprecated. Change the call to include dim=X as an argument.",
                  UserWarning, stacklevel=3)
    return 0 if ndim in (0, 1, 3) else 1


def softmax(input, dim=None, _stacklevel=3, dtype=None):
    if dim is None:
        dim = _implicit_dim("softmax", input.dim())
    return _C.softmax(input if dtype is None else input.to(dtype), dim)


def log_softmax(input, dim=None, _stacklevel=3, dtype=None):
    if dim is None:
        dim = _implicit_dim("log_softmax", input.dim())
    return _C.log_softmax(input if dtype is None else input.to(dtype), dim)


def dropout(input, p=0.5, training=True, inplace=False):
    if p < 0.0 or p > 1.0:  # before anything else, in training or not, as PyTorch checks it
        raise ValueError(f"dropout probability has to be between 0 and 1, but got {p}")
    out = _C.dropout(input, p, training)
    return input.copy_(out) if inplace else out


def dropout2d(input, p=0.5, training=True, inplace=False):
    """Zeroes whole channels: each (sample, channel) plane of (N, C, H, W) is kept with probability 1 - p
    and scaled by 1 / (1 - p), as PyTorch's feature dropout (input * noise: MulBackward0); other ranks as
    PyTorch takes them, with its warnings."""
    if p < 0.0 or p > 1.0:
        raise ValueError(f"dropout probability has to be between 0 and 1, but got {p}")
    if input.dim() not in (3, 4):
        import warnings

        warnings.warn(f"dropout2d: Received a {input.dim()}-D input to dropout2d, which is deprecated and will result in an error in a "
                      "future release. To retain the behavior and silence this warning, please use dropout instead. Note that "
                      "dropout2d exists to provide channel-wise dropout on inputs with 2 spatial dimensions, a channel dimension, "
                      "and an optional batch dimension (i.e. 3D or 4D inputs).", UserWarning, stacklevel=2)
    if input.dim() == 3:
        import warnings

        warnings.warn("dropout2d: Received a 3D input to dropout2d and assuming that channel-wise 1D dropout behavior is desired - "
                      "input is interpreted as shape (N, C, L), where C is the channel dim. This behavior will change in a future "
                      "release to interpret the input as one without a batch dimension, i.e. shape (C, H, W). To maintain the 1D "
                      "channel-wise dropout behavior, please switch to using dropout1d instead.", UserWarning, stacklevel=2)
    if not training or p == 0.0:
        return input
    # PyTorch's feature dropout, whatever the rank (pytorch/pytorch#77081): dims 0 and 1 are (N, C), and
    # every dim after them shares its channel's draw -- a 2-D (N, features) input drops single elements.
    if input.dim() < 2:
        raise RuntimeError("Feature dropout requires at least 2 dimensions in the input")
    channels = tuple(input.shape[:2]) + (1,) * (input.dim() - 2)
    if p < 1.0:
        noise = (_C.rand(*channels, device=input.device) >= p).to(input.dtype) / (1.0 - p)
    else:
        noise = _C.zeros(*channels, device=input.device, dtype=input.dtype)
    return input.mul_(noise) if inplace else input * noise


def embedding(input, weight, padding_idx=None, max_norm=None, norm_type=2.0, scale_grad_by_freq=False, sparse=False):
    if max_norm is not None or scale_grad_by_freq or sparse:
        raise NotImplementedError("GPU Lab's torch has no embedding(max_norm=, scale_grad_by_freq=, sparse=) yet")
    return _C.embedding(input, weight, padding_idx)


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


def _reduced(name, loss, reduction):
    if reduction == "none":
        return loss
    if reduction == "mean":
        return loss.mean()
    if reduction == "sum":
        return loss.sum()
    raise ValueError(f"{reduction} is not a valid value for reduction")


def _same_size(name, input, target):
    """PyTorch's check of the elementwise losses: a target of another size is broadcast, with its warning."""
    if tuple(target.shape) != tuple(input.shape):
        import warnings

        warnings.warn(f"Using a target size ({target.shape}) that is different to the input size ({input.shape}). This will likely "
                      "lead to incorrect results due to broadcasting. Please ensure they have the same size.", UserWarning, stacklevel=3)


def _composite(name, inputs, forward, backward):
    """An op composed of others, with PyTorch's one node for it (its name, printed in grad_fn): `forward`
    computes the value without a graph; `backward(grad)` gives one gradient (or None) per input."""
    from .._grad_mode import no_grad

    with no_grad():
        out = forward()
    if _C.is_grad_enabled() and any(t.requires_grad for t in inputs):
        return _C._record_function(out, name, list(inputs), backward)
    return out


def smooth_l1_loss(input, target, size_average=None, reduce=None, reduction="mean", beta=1.0):
    if beta < 0:
        raise RuntimeError("smooth_l1_loss does not support negative values for beta.")
    reduction = _reduction(size_average, reduce, reduction)
    if beta == 0.0:
        return l1_loss(input, target, reduction=reduction)
    _same_size("smooth_l1_loss", input, target)

    def forward():
        d = (input - target).abs()
        return _reduced("smooth_l1_loss", _C.where(d < beta, 0.5 * d * d / beta, d - 0.5 * beta), reduction)

    def backward(g):
        diff = input.detach() - target.detach()
        grad = _C.where(diff.abs() < beta, diff / beta, diff.sign()) * (g / diff.numel() if reduction == "mean" else g)
        return [_sum_to(grad, input), _sum_to(-grad, target)]

    return _composite("SmoothL1LossBackward0", (input, target), forward, backward)


def huber_loss(input, target, reduction="mean", delta=1.0):
    if delta <= 0:
        raise RuntimeError(f"huber_loss does not support non-positive values for delta.")
    _same_size("huber_loss", input, target)

    def forward():
        d = (input - target).abs()
        return _reduced("huber_loss", _C.where(d < delta, 0.5 * d * d, delta * (d - 0.5 * delta)), reduction)

    def backward(g):
        diff = input.detach() - target.detach()
        grad = diff.clamp(-delta, delta) * (g / diff.numel() if reduction == "mean" else g)
        return [_sum_to(grad, input), _sum_to(-grad, target)]

    return _composite("HuberLossBackward0", (input, target), forward, backward)


def _sum_to(grad, like):
    """A broadcast operand's share of `grad`: summed over the dims it was broadcast along."""
    shape = tuple(like.shape)
    while grad.dim() > len(shape):
        grad = grad.sum(0)
    for i, n in enumerate(shape):
        if n == 1 and grad.shape[i] != 1:
            grad = grad.sum(i, keepdim=True)
    return grad


def binary_cross_entropy(input, target, weight=None, size_average=None, reduce=None, reduction="mean"):
    """-w (t log x + (1 - t) log(1 - x)), each log clamped at -100 as PyTorch clamps it; x in [0, 1]."""
    reduction = _reduction(size_average, reduce, reduction)
    if tuple(target.shape) != tuple(input.shape):
        raise ValueError(f"Using a target size ({target.shape}) that is different to the input size ({input.shape}) is deprecated. "
                         "Please ensure they have the same size.")
    if input.numel() and bool(((input < 0) | (input > 1)).any()):
        raise RuntimeError("all elements of input should be between 0 and 1")

    def forward():
        x, t = input, target
        loss = -(t * x.log().clamp(min=-100) + (1 - t) * (1 - x).log().clamp(min=-100))
        return _reduced("binary_cross_entropy", loss if weight is None else loss * weight, reduction)

    def backward(g):
        x, t = input.detach(), target.detach()
        eps = 1e-12  # PyTorch's EPSILON in binary_cross_entropy_backward
        grad = (x - t) / ((1 - x) * x).clamp(min=eps)
        if weight is not None:
            grad = grad * weight
        grad = grad * (g / x.numel() if reduction == "mean" else g)
        # The target's gradient, as PyTorch's binary_cross_entropy_target_backward: log(1 - x) - log(x).
        grad_t = ((1 - x).log().clamp(min=-100) - x.log().clamp(min=-100)) * (g / x.numel() if reduction == "mean" else g)
        if weight is not None:
            grad_t = grad_t * weight
        return [grad, grad_t]

    return _composite("BinaryCrossEntropyBackward0", (input, target), forward, backward)


def binary_cross_entropy_with_logits(input, target, weight=None, size_average=None, reduce=None, reduction="mean", pos_weight=None):
    """(1 - t) x + (1 + (p - 1) t) (log(1 + exp(-|x|)) + max(-x, 0)), the stable form PyTorch computes,
    times the weight; p the pos_weight (1 without)."""
    reduction = _reduction(size_average, reduce, reduction)
    if tuple(target.shape) != tuple(input.shape):
        raise ValueError(f"Target size ({target.shape}) must be the same as input size ({input.shape})")

    def forward():
        x, t = input, target
        softplus = (-x.abs()).exp().log1p() + (-x).clamp(min=0)
        lw = 1 if pos_weight is None else 1 + (pos_weight - 1) * t
        loss = (1 - t) * x + lw * softplus
        return _reduced("binary_cross_entropy_with_logits", loss if weight is None else loss * weight, reduction)

    def backward(g):
        x, t = input.detach(), target.detach()
        scale = g / x.numel() if reduction == "mean" else g
        if pos_weight is None:
            grad = x.sigmoid() - t
            grad_t = -x
        else:
            lw = 1 + (pos_weight - 1) * t
            grad = lw * x.sigmoid() - pos_weight * t
            grad_t = -x + (pos_weight - 1) * ((-x.abs()).exp().log1p() + (-x).clamp(min=0))
        if weight is not None:
            grad, grad_t = grad * weight, grad_t * weight
        return [_sum_to(grad * scale, input), _sum_to(grad_t * scale, target)]

    return _composite("BinaryCrossEntropyWithLogitsBackward0", (input, target), forward, backward)


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


def pad(input, pad, mode="constant", value=None):
    """F.pad in its constant mode: `pad` is (left, right[, top, bottom[, front, back]]), from the last dim
    backwards; a negative amount crops. One node, ConstantPadNdBackward0, as PyTorch's."""
    if mode != "constant":
        raise NotImplementedError(f"GPU Lab's torch has no F.pad(mode='{mode}') yet: only mode='constant'")
    pad = tuple(int(p) for p in pad)
    if len(pad) % 2 or len(pad) // 2 > input.dim():
        raise RuntimeError("Padding length must be divisible by 2" if len(pad) % 2 else
                           "Padding length should be less than or equal to two times the input dimension but got padding length "
                           f"{len(pad)} and input of dimension {input.dim()}")
    shape = list(input.shape)
    inner, outer = [slice(None)] * input.dim(), [slice(None)] * input.dim()  # where the input goes; what of it stays
    for i in range(len(pad) // 2):
        d = input.dim() - 1 - i
        before, after = pad[2 * i], pad[2 * i + 1]
        size = shape[d] + before + after
        if size < 0:
            raise RuntimeError(f"The input size {shape[d]}, plus negative padding {before} and {after} resulted in a negative output size, "
                               f"which is invalid. Check dimension {d} of your input.")
        inner[d] = slice(max(before, 0), max(before, 0) + shape[d] + min(before, 0) + min(after, 0))
        outer[d] = slice(max(-before, 0), shape[d] - max(-after, 0))
        shape[d] = size
    inner, outer = tuple(inner), tuple(outer)

    def forward():
        out = _C.full(shape, 0.0 if value is None else value, dtype=input.dtype, device=input.device)
        out[inner] = input[outer]
        return out

    def backward(g):
        grad = _C.zeros(*input.shape, dtype=g.dtype, device=g.device)
        grad[outer] = g[inner]
        return [grad]

    return _composite("ConstantPadNdBackward0", (input,), forward, backward)


def flatten(input, start_dim=0, end_dim=-1):
    return input.flatten(start_dim, end_dim)


def __getattr__(name):
    from .. import _missing

    raise _missing("torch.nn.functional", name)
