"""torch.autograd over GPU Lab's engine: grad(), backward(), and Function -- an op written in Python,
its forward and backward static methods with PyTorch's ctx. The engine's nodes have one output, so a
Function returns one tensor (or a tuple of one); no higher-order gradients (create_graph)."""
from .. import _C
from .._grad_mode import enable_grad, inference_mode, no_grad, set_grad_enabled  # noqa: F401
from .._C import Tensor  # noqa: F401


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
    if retain_graph:
        raise NotImplementedError("GPU Lab's torch frees the graph after each backward pass: retain_graph=True is not supported yet")
    outputs = _as_tuple(outputs)
    inputs = _as_tuple(inputs)
    grad_outputs = (None,) * len(outputs) if grad_outputs is None else _as_tuple(grad_outputs)
    if len(grad_outputs) != len(outputs):
        raise RuntimeError(f"grad requires one grad_output per output: got {len(grad_outputs)} for {len(outputs)} outputs")
    return tuple(_C._autograd_grad(list(outputs), list(grad_outputs), list(inputs), bool(allow_unused)))


def backward(tensors, grad_tensors=None, retain_graph=None, create_graph=False, inputs=None):
    """torch.autograd.backward: each tensor's .backward(its gradient), accumulating into the leaves."""
    if inputs is not None:
        raise NotImplementedError("GPU Lab's torch has no torch.autograd.backward(inputs=...) yet")
    tensors = _as_tuple(tensors)
    grads = (None,) * len(tensors) if grad_tensors is None else _as_tuple(grad_tensors)
    for tensor, gradient in zip(tensors, grads):
        tensor.backward(gradient, retain_graph=retain_graph, create_graph=create_graph)


class FunctionCtx:
    """The `ctx` a Function's forward fills and its backward reads."""

    def save_for_backward(self, *tensors):
        self._saved = tensors

    @property
    def saved_tensors(self):
        return getattr(self, "_saved", ())

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
