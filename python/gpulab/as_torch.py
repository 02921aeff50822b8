"""Makes ``import torch`` give GPU Lab's torch in this process: every gpulab module is also
registered under torch's name (torch, torch.nn, torch.nn.functional, ...), and a module of gpulab
not imported yet is found under torch's name too."""
import importlib
import importlib.abc
import importlib.util
import pkgutil
import sys

import gpulab

class _TorchAlias(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """torch.X -> gpulab.X for modules not imported yet."""

    def find_spec(self, fullname, path, target=None):
        if fullname != "torch" and not fullname.startswith("torch."):
            return None
        return importlib.util.spec_from_loader(fullname, self)

    def create_module(self, spec):
        return importlib.import_module("gpulab" + spec.name[len("torch"):])

    def exec_module(self, module):
        pass


def install():
    """From now on ``import torch`` (and torch.nn, ...) is GPU Lab's torch. Refused when PyTorch
    itself was imported already: one process cannot hold both under one name."""
    existing = sys.modules.get("torch")
    if existing is not None and existing is not gpulab:
        raise RuntimeError("PyTorch is imported already in this process; GPU Lab's torch cannot take its name")
    for module in pkgutil.walk_packages(gpulab.__path__, "gpulab."):
        if module.name not in ("gpulab.__main__", "gpulab.as_torch", "gpulab.kernel"):
            importlib.import_module(module.name)
    for name, module in list(sys.modules.items()):
        if name == "gpulab" or name.startswith("gpulab."):
            sys.modules["torch" + name[len("gpulab"):]] = module
    if not any(isinstance(f, _TorchAlias) for f in sys.meta_path):
        sys.meta_path.insert(0, _TorchAlias())
