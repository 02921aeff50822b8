"""How a tensor prints: PyTorch's layout, so that what a learner prints here reads as it would in
PyTorch. The rules (PyTorch's defaults: precision 4, 80 columns, more than 1000 elements summarised
with 3 at each edge):

- floats whose non-zero finite values are all whole numbers print as ``1.``; values spanning more
  than a factor of 1000, above 1e8 or below 1e-4 print in scientific notation; others with four
  decimals. Every element is padded to the widest.
- rows wrap at 80 columns; dims above the last are separated by blank lines (one per dim).
- suffixes: the device when it is not the CPU, the dtype when it is not float32, int64 or bool, the
  grad_fn or requires_grad=True; an empty tensor prints its size.
"""
import math

from . import _C


class _Options:
    precision = 4
    threshold = 1000
    edgeitems = 3
    linewidth = 80
    sci_mode = None


PRINT_OPTS = _Options()


def set_printoptions(precision=None, threshold=None, edgeitems=None, linewidth=None, profile=None, sci_mode=None):
    """torch.set_printoptions: the same options as PyTorch's, with its profiles."""
    if profile == "default":
        PRINT_OPTS.precision, PRINT_OPTS.threshold, PRINT_OPTS.edgeitems, PRINT_OPTS.linewidth = 4, 1000, 3, 80
    elif profile == "short":
        PRINT_OPTS.precision, PRINT_OPTS.threshold, PRINT_OPTS.edgeitems, PRINT_OPTS.linewidth = 2, 1000, 2, 80
    elif profile == "full":
        PRINT_OPTS.precision, PRINT_OPTS.threshold, PRINT_OPTS.edgeitems, PRINT_OPTS.linewidth = 4, math.inf, 3, 80
    if precision is not None:
        PRINT_OPTS.precision = precision
    if threshold is not None:
        PRINT_OPTS.threshold = threshold
    if edgeitems is not None:
        PRINT_OPTS.edgeitems = edgeitems
    if linewidth is not None:
        PRINT_OPTS.linewidth = linewidth
    PRINT_OPTS.sci_mode = sci_mode


class _Formatter:
    """The width and notation every element of one tensor shares."""

    def __init__(self, values, floating):
        self.floating = floating
        self.int_mode = True
        self.sci_mode = False
        self.max_width = 1
        if not floating:
            for v in values:
                self.max_width = max(self.max_width, len(str(v)))
            return
        finite = [v for v in values if math.isfinite(v) and v != 0]
        if not finite:
            return
        magnitudes = [abs(v) for v in finite]
        low, high = min(magnitudes), max(magnitudes)
        self.int_mode = all(v == math.ceil(v) for v in finite)
        precision = PRINT_OPTS.precision
        if self.int_mode:
            if high / low > 1000.0 or high > 1.0e8:
                self.sci_mode = True
                texts = [f"{v:.{precision}e}" for v in finite]
            else:
                texts = [f"{v:.0f}." for v in finite]
        else:
            if high / low > 1000.0 or high > 1.0e8 or low < 1.0e-4:
                self.sci_mode = True
                texts = [f"{v:.{precision}e}" for v in finite]
            else:
                texts = [f"{v:.{precision}f}" for v in finite]
        self.max_width = max(len(t) for t in texts)
        if PRINT_OPTS.sci_mode is not None:
            self.sci_mode = PRINT_OPTS.sci_mode

    def width(self):
        return self.max_width

    def format(self, value):
        precision = PRINT_OPTS.precision
        if self.floating:
            if self.sci_mode:
                text = f"{value:{self.max_width}.{precision}e}"
            elif self.int_mode:
                text = f"{value:.0f}"
                if math.isfinite(value):
                    text += "."
            else:
                text = f"{value:.{precision}f}"
        else:
            text = str(value)
        return " " * (self.max_width - len(text)) + text


def _summarized(tensor, edge):
    """The elements a summarised tensor shows: the first and last `edge` along every dim longer than
    2 x edge, cut out before any value is read (a million-element tensor prints from a few dozen)."""
    for dim, size in enumerate(tensor.shape):
        if size > 2 * edge:
            head = (slice(None),) * dim + (slice(0, edge),)
            tail = (slice(None),) * dim + (slice(size - edge, size),)
            tensor = _C.cat([tensor[head], tensor[tail]], dim)
    return tensor


def _flat(values, depth):
    if depth == 0:
        return [values]
    out = []
    for v in values:
        out.extend(_flat(v, depth - 1))
    return out


def _vector(values, size, indent, summarize, formatter):
    element_length = formatter.width() + 2
    per_line = max(1, int(math.floor((PRINT_OPTS.linewidth - indent) / element_length)))
    edge = PRINT_OPTS.edgeitems
    if summarize and size > 2 * edge:
        data = [formatter.format(v) for v in values[:edge]] + [" ..."] + [formatter.format(v) for v in values[-edge:]]
    else:
        data = [formatter.format(v) for v in values]
    lines = [", ".join(data[i:i + per_line]) for i in range(0, len(data), per_line)]
    return "[" + ("," + "\n" + " " * (indent + 1)).join(lines) + "]"


def _nested(values, shape, indent, summarize, formatter):
    dim = len(shape)
    if dim == 0:
        return formatter.format(values)
    if dim == 1:
        return _vector(values, shape[0], indent, summarize, formatter)
    edge = PRINT_OPTS.edgeitems
    if summarize and shape[0] > 2 * edge:
        slices = [_nested(v, shape[1:], indent + 1, summarize, formatter) for v in values[:edge]] + ["..."] + \
                 [_nested(v, shape[1:], indent + 1, summarize, formatter) for v in values[-edge:]]
    else:
        slices = [_nested(v, shape[1:], indent + 1, summarize, formatter) for v in values]
    return "[" + ("," + "\n" * (dim - 1) + " " * (indent + 1)).join(slices) + "]"


def _body(tensor, indent):
    shape = list(tensor.shape)
    summarize = tensor.numel() > PRINT_OPTS.threshold
    source = tensor.detach()
    if summarize:
        source = _summarized(source, PRINT_OPTS.edgeitems)
    if source.dtype in (_C.float16, _C.bfloat16):
        source = source.float()
    values = source.cpu().tolist()
    floating = tensor.dtype.is_floating_point
    formatter = _Formatter(_flat(values, len(shape)), floating)
    return _nested(values, shape, indent, summarize, formatter)


def _add_suffixes(text, suffixes, indent):
    parts = [text]
    last_line_length = len(text) - text.rfind("\n") + 1
    for suffix in suffixes:
        if last_line_length + len(suffix) + 2 > PRINT_OPTS.linewidth:
            parts.append(",\n" + " " * indent + suffix)
            last_line_length = indent + len(suffix)
        else:
            parts.append(", " + suffix)
            last_line_length += len(suffix) + 2
    parts.append(")")
    return "".join(parts)


def tensor_repr(tensor, prefix="tensor(", indent=None):
    indent = len(prefix) if indent is None else indent
    suffixes = []
    device = tensor.device
    if device.type != "cpu":
        suffixes.append(f"device='{device}'")
    default_dtype = tensor.dtype in (_C.float32, _C.int64, _C.bool)
    if tensor.numel() == 0:
        if tensor.dim() != 1:
            suffixes.append("size=" + str(tuple(tensor.shape)))
        if tensor.dtype != _C.float32:
            suffixes.append("dtype=" + repr(tensor.dtype))
        body = "[]"
    else:
        if not default_dtype:
            suffixes.append("dtype=" + repr(tensor.dtype))
        body = _body(tensor, indent)
    grad_fn = tensor.grad_fn
    if grad_fn is not None:
        suffixes.append(f"grad_fn=<{grad_fn.name()}>")
    elif tensor.requires_grad:
        suffixes.append("requires_grad=True")
    return _add_suffixes(prefix + body, suffixes, indent)
