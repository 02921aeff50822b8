"""torch.nn.parallel: DataParallel, and DistributedDataParallel (which needs a process group)."""
from ... import distributed
from ..modules import DataParallel, Module  # noqa: F401


class DistributedDataParallel(Module):
    def __init__(self, module, device_ids=None, output_device=None, *args, **kwargs):
        if not distributed.is_initialized():
            distributed._no_group()
        super().__init__()
        self.module = module

    def forward(self, *inputs, **kwargs):
        return self.module(*inputs, **kwargs)
