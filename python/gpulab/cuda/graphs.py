"""torch.cuda.make_graphed_callables: a module's (or function's) forward and backward each captured
once into a CUDA graph, then replayed at every call -- PyTorch's recipe for graphing part of a network
while the rest (the loss, the optimizer, data-dependent control flow) stays eager. On the emulated GPU
capture and replay work the same way; no timing is drawn from them.

Built as PyTorch builds it: a few warm-up iterations on a side stream, the forward graphs captured in
order and the backward graphs (torch.autograd.grad of the static outputs) in reverse, all in one
memory pool, then a torch.autograd.Function whose forward copies the new inputs into the static ones
and replays the forward graph, and whose backward does the same for the incoming gradient. GPU Lab's
Functions have one output, so a graphed callable returns one tensor."""
from .. import _C
from ..autograd import Function, grad
from .._grad_mode import no_grad


def _check(callables, sample_args):
    from ..nn import Module

    for c, args in zip(callables, sample_args):
        if isinstance(c, Module):
            if getattr(c, "_forward_hooks", None) or getattr(c, "_forward_pre_hooks", None) or getattr(c, "_backward_hooks", None):
                raise RuntimeError("Modules must not have hooks registered at the time they are passed. However, registering "
                                   "hooks on modules after passing them through make_graphed_callables is allowed.")
            if any(b.requires_grad for b in c.buffers()):
                raise RuntimeError("In any :class:`~torch.nn.Module` passed to :func:`~make_graphed_callables`, only parameters "
                                   "may be trainable. All buffers must have ``requires_grad=False``.")
        elif not callable(c):
            raise TypeError(f"make_graphed_callables takes modules or functions, not {type(c).__name__}")
        if not all(isinstance(a, _C.Tensor) for a in args):
            raise TypeError("In the beta API, sample_args for each callable must contain only Tensors. Other types are not allowed.")
        if not all(a.is_cuda for a in args):
            raise RuntimeError("make_graphed_callables captures CUDA work: every sample argument must be on a CUDA device "
                               "(move them with .to('cuda'))")


def _one_output(out, what):
    if isinstance(out, (tuple, list)):
        if len(out) != 1:
            raise NotImplementedError(f"{what} returned {len(out)} outputs: in GPU Lab's torch a graphed callable returns one tensor")
        out = out[0]
    if not isinstance(out, _C.Tensor):
        raise TypeError(f"{what} must return a Tensor, not {type(out).__name__}")
    return out


def make_graphed_callables(callables, sample_args, num_warmup_iters=3, allow_unused_input=False, pool=None):
    """Graphed versions of `callables` (a module or function, or a tuple of them, run in that order
    in each step), captured with `sample_args` (a tuple of tensors each; their shapes, dtypes and
    devices are fixed from now on). A module is returned with its forward replaced: graphed in the
    training mode it had here, the original forward in the other."""
    from ..nn import Module
    from . import CUDAGraph, Stream, graph, graph_pool_handle, stream, synchronize

    just_one = not isinstance(callables, tuple)
    if just_one:
        callables, sample_args = (callables,), (sample_args,)
    sample_args = tuple(tuple(args) if isinstance(args, (tuple, list)) else (args,) for args in sample_args)
    if len(sample_args) != len(callables):
        raise ValueError(f"make_graphed_callables needs one tuple of sample arguments per callable: {len(callables)} callables, "
                         f"{len(sample_args)} tuples")
    _check(callables, sample_args)
    params = [tuple(c.parameters()) if isinstance(c, Module) else () for c in callables]
    surfaces = [args + p for args, p in zip(sample_args, params)]
    mempool = graph_pool_handle() if pool is None else pool

    def differentiate(outputs, surface, grad_outputs):
        needed = tuple(i for i in surface if i.requires_grad)
        if not outputs.requires_grad or not needed:
            return ()
        return grad(outputs, needed, grad_outputs=grad_outputs, allow_unused=allow_unused_input)

    # Warm-up on a side stream, as PyTorch does: the first calls (the allocator's blocks, the kernels'
    # first launches) stay out of the capture.
    synchronize()
    with stream(Stream()):
        for func, args, surface in zip(callables, sample_args, surfaces):
            for _ in range(num_warmup_iters):
                out = _one_output(func(*args), "the callable")
                differentiate(out, surface, _C.empty_like(out) if out.requires_grad else None)
                del out
    synchronize()

    forward_graphs = [CUDAGraph() for _ in callables]
    backward_graphs = [CUDAGraph() for _ in callables]
    static_outputs = []
    for func, args, fwd in zip(callables, sample_args, forward_graphs):
        with graph(fwd, pool=mempool):
            out = _one_output(func(*args), "the callable")
        static_outputs.append(out)
    static_grad_outputs, static_grad_inputs = [None] * len(callables), [None] * len(callables)
    for k in reversed(range(len(callables))):
        out, surface = static_outputs[k], surfaces[k]
        grad_out = _C.empty_like(out) if out.requires_grad else None
        with graph(backward_graphs[k], pool=mempool):
            grads = differentiate(out, surface, grad_out)
        static_grad_outputs[k] = grad_out
        # One per tensor of the surface, None where it needs no gradient (or, allowed, got none).
        found = iter(grads)
        static_grad_inputs[k] = tuple(next(found, None) if i.requires_grad else None for i in surface)

    graphed = []
    for k, func in enumerate(callables):
        graphed.append(_graphed(func, len(sample_args[k]), params[k], surfaces[k], forward_graphs[k], backward_graphs[k],
                                static_outputs[k], static_grad_outputs[k], static_grad_inputs[k]))
    return graphed[0] if just_one else tuple(graphed)


def _graphed(func, user_count, module_params, surface, fwd_graph, bwd_graph, static_output, static_grad_output, static_grad_inputs):
    from ..nn import Module

    class Graphed(Function):
        @staticmethod
        def forward(ctx, *inputs):
            for i in range(user_count):
                if surface[i].data_ptr() != inputs[i].data_ptr():
                    surface[i].copy_(inputs[i])
            fwd_graph.replay()
            return static_output.detach()

        @staticmethod
        def backward(ctx, grad_output):
            with no_grad():
                if static_grad_output is not None and static_grad_output.data_ptr() != grad_output.data_ptr():
                    static_grad_output.copy_(grad_output)
                bwd_graph.replay()
            return tuple(g.detach() if g is not None else None for g in static_grad_inputs)

    Graphed.__name__ = f"Graphed{type(func).__name__}"

    def functionalized(*user_args):
        if len(user_args) != user_count:
            raise TypeError(f"the graphed callable was captured with {user_count} argument(s), got {len(user_args)}")
        return Graphed.apply(*(tuple(user_args) + module_params))

    if isinstance(func, Module):
        training = func.training
        original = func.forward

        def forward(*user_args):
            # Graphed in the mode it was captured in (training); the module's own forward otherwise.
            return functionalized(*user_args) if func.training == training else original(*user_args)

        func.forward = forward
        return func
    return functionalized
