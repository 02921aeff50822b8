"""torch.autograd over GPU Lab's engine: grad(), backward(), and Function -- an op written in Python,
its forward and backward static methods with PyTorch's ctx. The engine's nodes have one output, so a
Function returns one tensor (or a tuple of one); no higher-order gradients (create_graph)."""
from .. import _C
from .._grad_mode import enable_grad, inference_mode, no_grad, set_grad_enabled  # noqa: F401
from .._C import Tensor  # noqa: F401


class _VariableMeta(type):
    def __instancecheck__(cls, obj):
        return isinstance(obj, Tensor)


class Variable(metaclass=_VariableMeta):
    """torch.autograd.Variable as PyTorch 2 keeps it for old code (a Variable *is* a tensor since 0.4):
    Variable(t, requires_grad=False) is a new tensor over t's memory without t's history (t.detach()),
    requiring grad if asked; isinstance(t, Variable) holds for every tensor; volatile= warns that it has no
    effect, as PyTorch's does."""

    def __new__(cls, data=None, requires_grad=False, volatile=None):
        if volatile is not None:
            import warnings

            warnings.warn("volatile was removed and now has no effect. Use `with torch.no_grad():` instead.", UserWarning, stacklevel=2)
        if data is None:
            from .. import empty

            data = empty(0)
        if not isinstance(data, Tensor):
            raise TypeError(f"Variable data has to be a tensor, but got {type(data).__name__}")
        out = data.detach()
        if requires_grad:
            out.requires_grad_(True)
        return out


def _as_tuple(tensors):
    if isinstance(tensors, Tensor):
        return (tensors,)
    return tuple(tensors)


def grad(outputs, inputs, grad_outputs=None, retain_graph=None, create_graph=False, only_inputs=True, allow_unused=False,
         is_grads_batched=False):
    """The gradients of `outputs` with respect to `inputs`, returned as a tuple and not accumulated
    into any .grad; `grad_outputs` weights each output (None: ones, for a one-element output)."""
    if create_graph:
        raise NotImplementedError("GPU Lab's torch has no torch.autograd.grad(create_graph=True) (higher-order gradients) yet")
    if is_grads_batched:
        raise NotImplementedError("GPU Lab's torch has no torch.autograd.grad(is_grads_batched=True) yet")
    retain_graph = create_graph if retain_graph is None else retain_graph  # PyTorch's default
    outputs = _as_tuple(outputs)
    inputs = _as_tuple(inputs)
    grad_outputs = (None,) * len(outputs) if grad_outputs is None else _as_tuple(grad_outputs)
    if len(grad_outputs) != len(outputs):
        raise RuntimeError(f"grad requires one grad_output per output: got {len(grad_outputs)} for {len(outputs)} outputs")
    return tuple(_C._run_grad(list(outputs), list(grad_outputs), list(inputs), bool(allow_unused), bool(retain_graph)))


def backward(tensors, grad_tensors=None, retain_graph=None, create_graph=False, inputs=None):
    """torch.autograd.backward: the gradients of all `tensors` (each weighted by its grad_tensor; None:
    ones, for a one-element tensor) accumulated into the leaves, in one walk of the graph they share.
    retain_graph (default: create_graph) keeps the graph for another backward."""
    if inputs is not None:
        raise NotImplementedError("GPU Lab's torch has no torch.autograd.backward(inputs=...) yet")
    if create_graph:
        raise NotImplementedError("GPU Lab's torch has no backward(create_graph=True) (higher-order gradients) yet")
    retain_graph = create_graph if retain_graph is None else retain_graph
    tensors = _as_tuple(tensors)
    grads = (None,) * len(tensors) if grad_tensors is None else _as_tuple(grad_tensors)
    _C._run_backward(list(tensors), list(grads), bool(retain_graph))


class FunctionCtx:
    """The `ctx` a Function's forward fills and its backward reads. Saved tensors are checked as the
    engine's ops check theirs: one written in place since it was saved raises PyTorch's error."""

    def save_for_backward(self, *tensors):
        self._saved = tensors
        self._saved_versions = tuple(t._version if isinstance(t, Tensor) else None for t in tensors)

    @property
    def saved_tensors(self):
        saved = getattr(self, "_saved", ())
        outputs = getattr(self, "_saved_is_output", (False,) * len(saved))
        for tensor, version, is_output in zip(saved, self._saved_versions if saved else (), outputs):
            if version is not None and tensor._version != version:
                # Named as PyTorch names it: the Function's own node for its output, the tensor's grad_fn
                # otherwise (none for a leaf).
                producer = getattr(self, "_node_name", None) if is_output else None
                if producer is None and tensor.grad_fn is not None:
                    producer = tensor.grad_fn.name()
                which = f", which is output 0 of {producer}," if producer else ""
                raise RuntimeError("one of the variables needed for gradient computation has been modified by an inplace operation: "
                                   f"[{tensor.type()} {list(tensor.shape)}]{which} is at version {tensor._version}; expected version "
                                   f"{version} instead. Hint: enable anomaly detection to find the operation that failed to compute its "
                                   "gradient, with torch.autograd.set_detect_anomaly(True).")
        return saved

    def mark_non_differentiable(self, *tensors):
        self._non_differentiable = tensors

    def set_materialize_grads(self, value):
        self.materialize_grads = bool(value)


class Function:
    """An op defined in Python::

        class Square(torch.autograd.Function):
            @staticmethod
            def forward(ctx, x):
                ctx.save_for_backward(x)
                return x * x

            @staticmethod
            def backward(ctx, grad):
                x, = ctx.saved_tensors
                return 2 * x * grad

        y = Square.apply(x)

    forward runs without recording a graph; backward returns one gradient (or None) per argument of
    forward, in order."""

    @staticmethod
    def forward(ctx, *args, **kwargs):
        raise NotImplementedError("You must implement the forward function for custom autograd.Function.")

    @staticmethod
    def backward(ctx, *grad_outputs):
        raise NotImplementedError("You must implement either the backward or vjp method for your custom autograd.Function to use "
                                  "it with backward mode AD.")

    def __init__(self, *args, **kwargs):
        raise RuntimeError("Legacy autograd function with non-static forward method is deprecated. Please use new-style "
                           "autograd function with static forward method. (Example: "
                           "https://pytorch.org/docs/stable/autograd.html#torch.autograd.Function)")

    @classmethod
    def apply(cls, *args):
        ctx = FunctionCtx()
        ctx.needs_input_grad = tuple(isinstance(a, Tensor) and a.requires_grad for a in args)
        with no_grad():
            out = cls.forward(ctx, *args)
        as_tuple = isinstance(out, tuple)
        if as_tuple:
            if len(out) != 1:
                raise NotImplementedError(f"{cls.__name__}.forward returned {len(out)} outputs: GPU Lab's torch.autograd.Function "
                                          "returns one tensor (its engine's graph nodes have one output)")
            out = out[0]
        if not isinstance(out, Tensor):
            raise TypeError(f"{cls.__name__}.forward must return a Tensor, not {type(out).__name__}")
        positions = [i for i, a in enumerate(args) if isinstance(a, Tensor)]
        if not (_C.is_grad_enabled() and any(args[i].requires_grad for i in positions)):
            return (out,) if as_tuple else out
        name = cls.__name__ + "Backward"
        ctx._node_name = name
        ctx._saved_is_output = tuple(t is out for t in getattr(ctx, "_saved", ()))

        def backward(grad_output):
            grads = cls.backward(ctx, grad_output)
            if not isinstance(grads, tuple):
                grads = (grads,)
            if len(grads) != len(args):
                raise RuntimeError(f"function {name} returned an incorrect number of gradients (expected {len(args)}, "
                                   f"got {len(grads)})")
            return [grads[i] for i in positions]

        result = _C._record_function(out, name, [args[i] for i in positions], backward)
        return (result,) if as_tuple else result


def __getattr__(name):
    from .. import _missing

    raise _missing("torch.autograd", name)
