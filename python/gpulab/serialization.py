"""torch.save and torch.load: Python's pickle, with tensors stored by value (dtype, device, values).
The files are GPU Lab's own, not PyTorch's zip format: they hold what the lessons save -- state dicts,
optimizer state, checkpoints as dicts -- and load back in GPU Lab's torch."""
import pickle
import threading

from ._device import device as _device

_loading = threading.local()


def mapped(device):
    """Where a tensor saved on `device` is loaded, under the running torch.load's map_location."""
    location = getattr(_loading, "map_location", None)
    if location is None:
        return device
    if callable(location):
        return location(None, device) or device
    if isinstance(location, dict):
        return location.get(device, device)
    return str(_device(location))


def save(obj, f, pickle_protocol=2):
    if isinstance(f, (str, bytes)) or hasattr(f, "__fspath__"):
        with open(f, "wb") as out:
            pickle.dump(obj, out, protocol=pickle_protocol)
    else:
        pickle.dump(obj, f, protocol=pickle_protocol)


def load(f, map_location=None, weights_only=False, **kwargs):
    _loading.map_location = map_location
    try:
        if isinstance(f, (str, bytes)) or hasattr(f, "__fspath__"):
            with open(f, "rb") as source:
                return pickle.load(source)
        return pickle.load(f)
    finally:
        _loading.map_location = None
