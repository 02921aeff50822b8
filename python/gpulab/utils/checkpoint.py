"""torch.utils.checkpoint: recompute a segment's activations in backward instead of keeping them
(the engine's checkpoint, engine/autograd/checkpoint.h)."""
from .. import _C

Tensor = _C.Tensor


def _parameters_of(function):
    """The tensors besides its inputs that a checkpointed function reads and that need gradients: a
    module's parameters (or those of the module a bound method belongs to)."""
    from ..nn.modules import Module

    owner = function if isinstance(function, Module) else getattr(function, "__self__", None)
    return [p for p in owner.parameters() if p.requires_grad] if isinstance(owner, Module) else []


def checkpoint(function, *args, use_reentrant=None, preserve_rng_state=True, **kwargs):
    if kwargs:
        raise NotImplementedError("GPU Lab's torch has no keyword arguments to a checkpointed function yet")
    if not all(isinstance(a, Tensor) for a in args):
        raise NotImplementedError("GPU Lab's torch checkpoints functions of tensors only yet")
    return _C._checkpoint(function, list(args), _parameters_of(function), preserve_rng_state)


def checkpoint_sequential(functions, segments, input, use_reentrant=None, preserve_rng_state=True):  # noqa: A002
    """Runs a Sequential (or a list of modules) in `segments` parts, keeping only each part's input;
    the last part runs normally, as in PyTorch."""
    modules = list(functions.children()) if hasattr(functions, "children") else list(functions)
    size = len(modules) // segments
    end = -1
    for start in range(0, size * (segments - 1), size):
        end = start + size - 1
        part = modules[start:end + 1]

        def run(x, part=part):
            for module in part:
                x = module(x)
            return x

        params = [p for module in part for p in module.parameters() if p.requires_grad]
        input = _C._checkpoint(run, [input], params, preserve_rng_state)
    for module in modules[end + 1:]:
        input = module(input)
    return input
