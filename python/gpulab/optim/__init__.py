"""torch.optim: param_groups, their hyperparameters and state_dict in Python, as PyTorch has them; the
update of each group is one engine optimizer (fused, in C++), built when the group is first stepped
and told the group's learning rate at every step, so that schedulers and hand-written decay work."""
from .. import _C
from .optimizer import Optimizer  # noqa: F401
from . import lr_scheduler  # noqa: F401

class SGD(Optimizer):
    # lr defaults to 1e-3 as in PyTorch 2.2 and later (1.13 required it: "parameter group didn't specify
    # a value of required optimization parameter lr").
    def __init__(self, params, lr=1e-3, momentum=0, dampening=0, weight_decay=0, nesterov=False, *, maximize=False,
                 foreach=None, differentiable=False):
        if lr < 0.0:
            raise ValueError(f"Invalid learning rate: {lr}")
        if momentum < 0.0:
            raise ValueError(f"Invalid momentum value: {momentum}")
        if weight_decay < 0.0:
            raise ValueError(f"Invalid weight_decay value: {weight_decay}")
        if nesterov and (momentum <= 0 or dampening != 0):
            raise ValueError("Nesterov momentum requires a momentum and zero dampening")
        if maximize:
            raise NotImplementedError("GPU Lab's torch has no SGD(maximize=True) yet")
        super().__init__(params, dict(lr=lr, momentum=momentum, dampening=dampening, weight_decay=weight_decay, nesterov=nesterov,
                                      maximize=False, foreach=foreach, differentiable=differentiable))

    def _engine_optimizer(self, group):
        return _C._sgd(group["params"], group["lr"], group["momentum"], group["dampening"], group["weight_decay"], group["nesterov"])

    _fixed = ("momentum", "dampening", "weight_decay", "nesterov")


class Adam(Optimizer):
    _decoupled = False

    def __init__(self, params, lr=1e-3, betas=(0.9, 0.999), eps=1e-8, weight_decay=None, amsgrad=False, *, foreach=None,
                 maximize=False, capturable=False, differentiable=False, fused=None):
        if weight_decay is None:
            weight_decay = 1e-2 if self._decoupled else 0
        if lr < 0.0:
            raise ValueError(f"Invalid learning rate: {lr}")
        if eps < 0.0:
            raise ValueError(f"Invalid epsilon value: {eps}")
        if not 0.0 <= betas[0] < 1.0:
            raise ValueError(f"Invalid beta parameter at index 0: {betas[0]}")
        if not 0.0 <= betas[1] < 1.0:
            raise ValueError(f"Invalid beta parameter at index 1: {betas[1]}")
        if weight_decay < 0.0:
            raise ValueError(f"Invalid weight_decay value: {weight_decay}")
        if maximize:
            raise NotImplementedError(f"GPU Lab's torch has no {type(self).__name__}(maximize=True) yet")
        super().__init__(params, dict(lr=lr, betas=tuple(betas), eps=eps, weight_decay=weight_decay, amsgrad=amsgrad,
                                      maximize=False, foreach=foreach, capturable=capturable, differentiable=differentiable,
                                      fused=fused))

    def _engine_optimizer(self, group):
        beta1, beta2 = group["betas"]
        return _C._adam(group["params"], group["lr"], beta1, beta2, group["eps"], group["weight_decay"], group["amsgrad"],
                        group["capturable"], self._decoupled)

    _fixed = ("betas", "eps", "weight_decay", "amsgrad", "capturable")


class AdamW(Adam):
    _decoupled = True


def __getattr__(name):
    from .. import _missing

    raise _missing("torch.optim", name)
