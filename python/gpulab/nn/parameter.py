"""nn.Parameter: a tensor that a Module registers as one of its parameters when assigned to it."""
from .. import _C
from .._tensor_str import tensor_repr


class Parameter(_C.Tensor):
    """``nn.Parameter(torch.randn(3, 4))``: shares the tensor's memory, and requires grad by default."""

    def __init__(self, data=None, requires_grad=True):
        if data is None:
            data = _C.empty(0)
        _C.Tensor.__init__(self, data)
        if requires_grad:
            self.requires_grad_(True)

    def __repr__(self):
        return "Parameter containing:\n" + tensor_repr(self)

    def __reduce_ex__(self, protocol):
        return (Parameter, (self.detach(), self.requires_grad))
