"""torch.nn.utils: gradient clipping."""
import math

from ... import _C
from ..._grad_mode import no_grad


def clip_grad_norm_(parameters, max_norm, norm_type=2.0, error_if_nonfinite=False):
    """Scales the gradients so that their joint norm is at most max_norm; returns the norm before."""
    if isinstance(parameters, _C.Tensor):
        parameters = [parameters]
    grads = [p.grad for p in parameters if p.grad is not None]
    if not grads:
        return _C.tensor(0.0)
    norm_type = float(norm_type)
    with no_grad():
        if norm_type == math.inf:
            norms = [g.abs().max() for g in grads]
            total = norms[0]
            for n in norms[1:]:
                total = _C.maximum(total, n.to(total.device))
        else:
            total = None
            for g in grads:
                part = (g.abs() ** norm_type).sum()
                total = part if total is None else total + part.to(total.device)
            total = total ** (1.0 / norm_type)
        if error_if_nonfinite and not math.isfinite(total.item()):
            raise RuntimeError(f"The total norm of order {norm_type} for gradients from `parameters` is non-finite, so it cannot be "
                               "clipped. To disable this error and scale the gradients by the non-finite norm anyway, set "
                               "`error_if_nonfinite=False`")
        # As PyTorch: every gradient times min(1, max_norm / norm), computed on the device, so that the
        # step does not wait for the norm to reach the host.
        coefficient = _C.minimum(max_norm / (total + 1e-6), _C.ones_like(total))
        for g in grads:
            g.mul_(coefficient.to(g.device))
    return total


def clip_grad_value_(parameters, clip_value):
    if isinstance(parameters, _C.Tensor):
        parameters = [parameters]
    with no_grad():
        for p in parameters:
            if p.grad is not None:
                p.grad.copy_(_C.minimum(_C.maximum(p.grad, _C.full_like(p.grad, -clip_value)), _C.full_like(p.grad, clip_value)))


def parameters_to_vector(parameters):
    raise NotImplementedError("GPU Lab's torch has no torch.nn.utils.parameters_to_vector yet")
