"""Makes ``import torch`` give GPU Lab's torch in this process: every gpulab module is also
registered under torch's name (torch, torch.nn, torch.nn.functional, ...), and a module of gpulab
not imported yet is found under torch's name too."""
import importlib
import importlib.abc
import importlib.util
import pkgutil
import sys
import types

import gpulab

class _TorchAlias(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """torch.X -> gpulab.X for modules not imported yet."""

    def find_spec(self, fullname, path, target=None):
        if fullname != "torch" and not fullname.startswith("torch."):
            return None
        return importlib.util.spec_from_loader(fullname, self)

    def create_module(self, spec):
        target = "gpulab" + spec.name[len("torch"):]
        try:
            return importlib.import_module(target)
        except ModuleNotFoundError as e:
            if e.name != target:
                raise
        # A module PyTorch has and GPU Lab's torch has not (torch.onnx, torch.fx, ...): it imports, and its
        # first use says so; a name PyTorch has no module of is Python's usual error -- both in torch's name.
        from gpulab._pytorch_names import NAMES

        parent, _, leaf = spec.name.rpartition(".")
        if leaf in NAMES.get(parent, ()):
            return _MissingModule(spec.name)
        raise ModuleNotFoundError(f"No module named '{spec.name}'", name=spec.name)

    def exec_module(self, module):
        pass


class _MissingModule(types.ModuleType):
    """torch.onnx and the other modules of PyTorch that GPU Lab's torch lacks: importing one works (a
    script's `import torch.onnx` at the top runs), using it raises NotImplementedError naming what."""

    def __getattr__(self, name):
        if name.startswith("__"):
            raise AttributeError(f"module '{self.__name__}' has no attribute '{name}'")
        raise gpulab._NotInGpuLab(f"GPU Lab's torch has no {self.__name__}.{name} yet: GPU Lab {gpulab.gpulab_version} has no "
                                  f"{self.__name__} module (it implements the part of PyTorch its lessons use)")


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
