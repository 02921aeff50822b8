"""torch.save and torch.load, in PyTorch's own file format.

A file is PyTorch's zip archive: ``archive/data.pkl``, a pickle in which every tensor is
``torch._utils._rebuild_tensor_v2(storage, offset, size, stride, requires_grad, hooks)`` and every
storage a persistent id ``('storage', torch.FloatStorage, key, location, numel)`` whose bytes are the
record ``archive/data/<key>``; ``archive/version`` and ``archive/byteorder`` beside them. Each storage
is written once, so views that share memory still share it after loading; shapes, strides and every
dtype's bits come back as they were. Real PyTorch reads these files, and GPU Lab reads real PyTorch's.

torch.load follows PyTorch 2.6 and later: ``weights_only=True`` by default. Unpickling a plain pickle
calls whatever globals the file names -- a ``__reduce__`` that returns ``(os.system, ("...",))`` runs a
command -- so a weights-only load builds only what a checkpoint holds: tensors and their storages,
dtypes, devices, torch.Size, OrderedDict, the builtin containers and numbers, and the globals that
``add_safe_globals`` allows. Anything else is refused with PyTorch's UnpicklingError. Only
``weights_only=False`` unpickles everything, for files from a source the caller trusts.

Files of earlier GPU Lab releases (a plain pickle of values) still load; PyTorch's legacy format
(before 1.6, or ``_use_new_zipfile_serialization=False``) is refused, saying so.
"""
import collections
import contextlib
import io
import os
import pickle
import sys
import tempfile
import threading
import types
import zipfile

from . import _C
from ._device import device as _device
from ._size import Size

DEFAULT_PROTOCOL = 2
_loading = threading.local()

# The legacy format's first bytes: pickle protocol 2 of the magic number 0x1950a86a20f9469cfc6c.
_LEGACY_MAGIC = b"\x80\x02\x8a\x0a\x6c\xfc\x9c\x46\xf9\x20\x6a\xa8\x50\x19"
_ZIP_MAGIC = b"PK\x03\x04"
_ARCHIVE = "archive"

# PyTorch's typed storage classes by dtype: how a file names a storage's element type.
_STORAGE_TYPES = {"FloatStorage": _C.float32, "DoubleStorage": _C.float64, "HalfStorage": _C.float16,
                  "BFloat16Storage": _C.bfloat16, "LongStorage": _C.int64, "BoolStorage": _C.bool}
# The ones PyTorch has and GPU Lab's torch not yet: a file holding them is refused by name.
_MISSING_STORAGE_TYPES = {"ByteStorage": "uint8", "CharStorage": "int8", "ShortStorage": "int16",
                          "IntStorage": "int32", "ComplexFloatStorage": "complex64",
                          "ComplexDoubleStorage": "complex128"}
_DTYPE_NAMES = ("float32", "float64", "float16", "bfloat16", "int64", "bool",
                "float", "double", "half", "long")


class _StorageType:
    """What a file's ``torch.FloatStorage`` (and the others) stands for here: a storage's dtype."""

    def __init__(self, name, dtype):
        self.name, self.dtype = name, dtype

    def __repr__(self):
        return f"torch.{self.name}"


_STORAGE_TYPE_OF = {name: _StorageType(name, dtype) for name, dtype in _STORAGE_TYPES.items()}
_STORAGE_TYPE_BY_DTYPE = {t.dtype: t for t in _STORAGE_TYPE_OF.values()}
_ELEMENT_SIZES = {_C.float32: 4, _C.float64: 8, _C.float16: 2, _C.bfloat16: 2, _C.int64: 8, _C.bool: 1}


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


# -- Rebuilding: what a file's globals stand for ---------------------------------------------------

def _rebuild_tensor_v2(storage, storage_offset, size, stride, requires_grad, backward_hooks, metadata=None):
    """torch._utils._rebuild_tensor_v2: a view of a loaded storage."""
    tensor = _C._view_of_storage(storage, list(size), list(stride), storage_offset)
    if requires_grad:
        tensor.requires_grad_(True)
    return tensor


def _rebuild_parameter(data, requires_grad, backward_hooks):
    """torch._utils._rebuild_parameter: an nn.Parameter over the loaded tensor's memory."""
    from .nn.parameter import Parameter

    return Parameter(data, requires_grad)


def _rebuild_parameter_with_state(data, requires_grad, backward_hooks, state):
    parameter = _rebuild_parameter(data, requires_grad, backward_hooks)
    if state:
        raise NotImplementedError("torch.load: GPU Lab's torch has no nn.Parameter subclasses with state yet")
    return parameter


def _rebuild_from_storage_bytes(data, dtype_name, device, size, stride, offset, requires_grad):
    """A tensor pickled outside torch.save (pickle.dumps, copy.deepcopy): its storage's bytes, its view."""
    storage = _C._storage_from_bytes(data, getattr(_C, dtype_name), mapped(device))
    return _rebuild_tensor_v2(storage, offset, size, stride, requires_grad, None)


def _rebuild_values(values, dtype_name, device, requires_grad):
    """A tensor in the files of GPU Lab before 0.2 (its values as Python lists)."""
    tensor = _C.tensor(values, dtype=getattr(_C, dtype_name), device=mapped(device))
    if requires_grad:
        tensor.requires_grad_(True)
    return tensor


def _size(*args):
    return Size(*args)


# Every global a weights-only load may call, by the (module, name) a file gives it. PyTorch's own
# names come first (its files, and GPU Lab's, which use them), then those of GPU Lab's earlier files.
def _weights_only_globals():
    from .nn.parameter import Parameter

    allowed = {
        ("torch._utils", "_rebuild_tensor_v2"): _rebuild_tensor_v2,
        ("torch._utils", "_rebuild_parameter"): _rebuild_parameter,
        ("torch._utils", "_rebuild_parameter_with_state"): _rebuild_parameter_with_state,
        ("torch", "Size"): Size,
        ("torch", "device"): _device,
        ("torch.nn.parameter", "Parameter"): Parameter,
        ("collections", "OrderedDict"): collections.OrderedDict,
        ("collections", "Counter"): collections.Counter,
        ("_codecs", "encode"): _latin1_encode,  # how protocol 2 pickles bytes
        ("builtins", "set"): set, ("builtins", "frozenset"): frozenset, ("builtins", "bytearray"): bytearray,
        ("builtins", "complex"): complex, ("builtins", "slice"): slice, ("builtins", "range"): range,
        # GPU Lab's files before 0.2, and tensors pickled outside torch.save.
        ("gpulab._tensor", "_rebuild"): _rebuild_values,
        ("gpulab.serialization", "_rebuild_from_storage_bytes"): _rebuild_from_storage_bytes,
        ("gpulab.nn.parameter", "Parameter"): Parameter,
        ("gpulab._device", "device"): _device,
        ("gpulab._size", "Size"): Size,
    }
    for name in _DTYPE_NAMES:
        allowed[("torch", name)] = getattr(_C, {"float": "float32", "double": "float64", "half": "float16",
                                                "long": "int64"}.get(name, name))
    for name, storage_type in _STORAGE_TYPE_OF.items():
        allowed[("torch", name)] = storage_type
    return allowed


def _latin1_encode(text, encoding="latin1"):
    """_codecs.encode as protocol 2 uses it for bytes, and nothing else (it cannot name a codec that
    does more than turn text into bytes)."""
    if not isinstance(text, str) or encoding not in ("latin1", "latin-1"):
        raise pickle.UnpicklingError("Weights only load failed: _codecs.encode is allowed only to decode bytes")
    return text.encode("latin1")


# -- Safe globals (torch.serialization.add_safe_globals and friends) -----------------------------

_safe_globals = {}  # (module, name) -> the object: what the caller allows a weights-only load to call
_safe_lock = threading.Lock()


def _global_name(obj):
    if isinstance(obj, tuple) and len(obj) == 2:  # (obj, "module.name"), as PyTorch takes it
        obj, full = obj
        module, _, name = full.rpartition(".")
        return (module, name), obj
    return (getattr(obj, "__module__", None), getattr(obj, "__qualname__", None)), obj


def add_safe_globals(safe_globals):
    """Allows the given classes and functions in weights-only loads (PyTorch 2.4's API)."""
    if not isinstance(safe_globals, (list, tuple)):
        raise TypeError(f"add_safe_globals expects a list of globals, but got {type(safe_globals).__name__}")
    with _safe_lock:
        for item in safe_globals:
            key, obj = _global_name(item)
            if key[0] is None or key[1] is None:
                raise TypeError(f"add_safe_globals: {item!r} has no __module__ and __qualname__; give (obj, 'module.name')")
            _safe_globals[key] = obj


def get_safe_globals():
    with _safe_lock:
        return list(_safe_globals.values())


def clear_safe_globals():
    with _safe_lock:
        _safe_globals.clear()


@contextlib.contextmanager
def safe_globals(globals_list):
    """``with torch.serialization.safe_globals([MyClass]): torch.load(f)``: allowed inside the block only."""
    with _safe_lock:
        saved = dict(_safe_globals)
    add_safe_globals(globals_list)
    try:
        yield
    finally:
        with _safe_lock:
            _safe_globals.clear()
            _safe_globals.update(saved)


def _weights_only_refusal(what, hint):
    return pickle.UnpicklingError(
        "Weights only load failed. This file can still be loaded, to do so you have two options, do those steps "
        "only if you trust the source of the checkpoint. \n\t(1) In PyTorch 2.6, we changed the default value of "
        "the `weights_only` argument in `torch.load` from `False` to `True`. Re-running `torch.load` with "
        "`weights_only` set to `False` will likely succeed, but it can result in arbitrary code execution. Do it "
        "only if you got the file from a trusted source.\n\t(2) Alternatively, to load with `weights_only=True` "
        "please check the recommended steps in the following error message.\n\tWeightsUnpickler error: "
        f"{what}{hint}\n\nCheck the documentation of torch.load to learn more about types accepted by default "
        "with weights_only https://pytorch.org/docs/stable/generated/torch.load.html.")


# -- Saving --------------------------------------------------------------------------------------

class _StorageRef:
    """One storage of the file being written: its key (the record's name) and a tensor over it."""

    def __init__(self, key, tensor):
        self.key, self.tensor = key, tensor


class _Pickler(pickle._Pickler):
    """Python's own pickler, with PyTorch's names written for the objects that stand for them: GLOBAL
    torch._utils _rebuild_tensor_v2, torch FloatStorage, torch float32, torch device, torch Size. (The
    pure-Python pickler is the one whose globals can be named; a checkpoint has few objects and its
    bytes go to the storage records, not through the pickle.)"""

    # Functions are saved through the dispatch table, which holds the base class's save_global.
    dispatch = dict(pickle._Pickler.dispatch)
    dispatch[types.FunctionType] = lambda self, obj: self.save_global(obj)

    def __init__(self, file, protocol):
        super().__init__(file, protocol)
        self.storages = {}  # the engine's storage id -> _StorageRef, in the order they were met
        from .nn.parameter import Parameter

        self._parameter = Parameter
        self._names = {_rebuild_tensor_v2: ("torch._utils", "_rebuild_tensor_v2"),
                       _rebuild_parameter: ("torch._utils", "_rebuild_parameter"),
                       _device: ("torch", "device"), Size: ("torch", "Size"), _size: ("torch", "Size")}
        for storage_type in _STORAGE_TYPE_OF.values():
            self._names[storage_type] = ("torch", storage_type.name)

    def _storage_of(self, tensor):
        key = _C._storage_key(tensor)
        ref = self.storages.get(key)
        if ref is None:
            ref = self.storages[key] = _StorageRef(str(len(self.storages)), tensor)
        elif ref.tensor.dtype != tensor.dtype:
            raise NotImplementedError("torch.save: GPU Lab's torch cannot save two tensors of different dtypes over one storage yet")
        return ref

    def reducer_override(self, obj):
        if isinstance(obj, self._parameter):
            return (_rebuild_parameter, (obj.detach(), obj.requires_grad, collections.OrderedDict()))
        if isinstance(obj, _C.Tensor):
            return (_rebuild_tensor_v2, (self._storage_of(obj), obj.storage_offset(), Size(obj.shape), tuple(obj.stride()),
                                         obj.requires_grad, collections.OrderedDict()))
        if isinstance(obj, _C.dtype):
            return repr(obj).replace("torch.", "")  # a global's name: save_global writes GLOBAL torch <name>
        if isinstance(obj, Size):
            return (_size, (tuple(obj),))
        if isinstance(obj, _StorageType):
            return obj.name  # a global's name: save_global writes GLOBAL torch FloatStorage
        return NotImplemented

    def persistent_id(self, obj):
        if isinstance(obj, _StorageRef):
            tensor = obj.tensor
            numel = _C._storage_nbytes(tensor) // _ELEMENT_SIZES[tensor.dtype]
            return ("storage", _STORAGE_TYPE_BY_DTYPE[tensor.dtype], obj.key, str(tensor.device), numel)
        return None

    def save_global(self, obj, name=None):
        if isinstance(obj, _C.dtype):
            module = "torch"
        elif _hashable(obj) and obj in self._names:
            module, name = self._names[obj]
        else:
            return super().save_global(obj, name)
        if self.proto >= 4:
            self.save(module)
            self.save(name)
            self.write(pickle.STACK_GLOBAL)
        else:
            self.write(pickle.GLOBAL + module.encode("utf-8") + b"\n" + name.encode("utf-8") + b"\n")
        self.memoize(obj)


def _hashable(obj):
    try:
        hash(obj)
        return True
    except TypeError:
        return False


def _write_archive(obj, out, pickle_protocol):
    data = io.BytesIO()
    pickler = _Pickler(data, pickle_protocol)
    pickler.dump(obj)
    with zipfile.ZipFile(out, "w", compression=zipfile.ZIP_STORED) as archive:
        archive.writestr(f"{_ARCHIVE}/data.pkl", data.getvalue())
        archive.writestr(f"{_ARCHIVE}/byteorder", sys.byteorder)
        for ref in pickler.storages.values():
            archive.writestr(f"{_ARCHIVE}/data/{ref.key}", _C._storage_bytes(ref.tensor))
        archive.writestr(f"{_ARCHIVE}/version", "3\n")


def save(obj, f, pickle_module=pickle, pickle_protocol=DEFAULT_PROTOCOL, _use_new_zipfile_serialization=True,
         _disable_byteorder_record=False):
    """Writes `obj` to `f` (a path or a binary file) in PyTorch's zip format. A path is written to a
    temporary file beside it and renamed over it at the end, so a save that fails leaves the old file."""
    if pickle_module is not pickle:
        raise NotImplementedError("torch.save(pickle_module=...): GPU Lab's torch saves with Python's pickle only")
    if not _use_new_zipfile_serialization:
        raise NotImplementedError("torch.save(_use_new_zipfile_serialization=False): GPU Lab's torch writes only "
                                  "PyTorch's zip format, not the legacy one")
    if _disable_byteorder_record:
        raise NotImplementedError("torch.save(_disable_byteorder_record=True) is not in GPU Lab's torch")
    if not isinstance(pickle_protocol, int) or not 2 <= pickle_protocol <= pickle.HIGHEST_PROTOCOL:
        raise ValueError(f"pickle_protocol must be an int from 2 to {pickle.HIGHEST_PROTOCOL}, not {pickle_protocol!r}")
    if isinstance(f, (str, bytes)) or hasattr(f, "__fspath__"):
        path = os.fspath(f)
        folder = os.path.dirname(os.path.abspath(path))
        descriptor, temporary = tempfile.mkstemp(dir=folder, prefix=".", suffix=".saving")
        try:
            with os.fdopen(descriptor, "wb") as out:
                _write_archive(obj, out, pickle_protocol)
            os.replace(temporary, path)
        except BaseException:
            with contextlib.suppress(OSError):
                os.unlink(temporary)
            raise
        return
    _write_archive(obj, f, pickle_protocol)


# -- Loading -------------------------------------------------------------------------------------

class _Unpickler(pickle.Unpickler):
    """The pickle of a file: PyTorch's names resolved to GPU Lab's, storages read from the archive,
    and under weights_only nothing called that is not on the allowed list."""

    def __init__(self, data, archive, prefix, weights_only):
        super().__init__(data)
        self._archive, self._prefix = archive, prefix
        self._weights_only = weights_only
        self._allowed = _weights_only_globals()
        self._storages = {}

    def find_class(self, module, name):
        key = (module, name)
        if key in self._allowed:
            return self._allowed[key]
        with _safe_lock:
            if key in _safe_globals:
                return _safe_globals[key]
        if module == "torch" and name in _MISSING_STORAGE_TYPES:
            raise NotImplementedError(f"torch.load: the file holds a torch.{name} ({_MISSING_STORAGE_TYPES[name]} "
                                      "values); GPU Lab's torch has no torch." + _MISSING_STORAGE_TYPES[name] + " yet")
        if self._weights_only:
            full = f"{module}.{name}"
            raise _weights_only_refusal(
                f"Unsupported global: GLOBAL {full} was not an allowed global by default. ",
                f"Please use `torch.serialization.add_safe_globals([{name}])` or the "
                f"`torch.serialization.safe_globals([{name}])` context manager to allowlist this global if you "
                "trust this class/function.")
        if module == "torch" or module.startswith("torch."):
            return _torch_name(module, name)
        return super().find_class(module, name)

    def persistent_load(self, pid):
        if self._archive is None:
            raise pickle.UnpicklingError("torch.load: a persistent id in a file that is not PyTorch's zip format")
        if (not isinstance(pid, tuple) or len(pid) != 5 or pid[0] != "storage" or not isinstance(pid[1], _StorageType)
                or not isinstance(pid[2], str) or not isinstance(pid[3], str) or not isinstance(pid[4], int)):
            raise pickle.UnpicklingError(f"torch.load: the file names a storage as {pid!r}, which is not PyTorch's "
                                         "('storage', type, key, location, numel)")
        _, storage_type, key, location, numel = pid
        storage = self._storages.get(key)
        if storage is None:
            try:
                data = self._archive.read(f"{self._prefix}data/{key}")
            except KeyError:
                raise pickle.UnpicklingError(f"torch.load: the file has no record data/{key} for a storage it names") from None
            storage = _C._storage_from_bytes(data, storage_type.dtype, _load_location(location))
            if storage.numel() != numel:
                raise pickle.UnpicklingError(f"torch.load: storage {key} holds {storage.numel()} elements where the "
                                             f"file says {numel}: the file is damaged")
            self._storages[key] = storage
        elif storage.dtype != storage_type.dtype:
            raise NotImplementedError("torch.load: GPU Lab's torch cannot load two dtypes over one storage yet")
        return storage


def _torch_name(module, name):
    """A torch.* global of a full (not weights-only) load, as GPU Lab's torch has it."""
    import importlib

    target = "gpulab" + module[len("torch"):]
    try:
        return getattr(importlib.import_module(target), name)
    except (ImportError, AttributeError):
        raise NotImplementedError(f"torch.load: the file needs {module}.{name}, which GPU Lab's torch has not got") from None


def _load_location(location):
    """The device a storage saved at `location` ('cpu', 'cuda:0') is loaded on, under map_location."""
    target = mapped(location)
    if isinstance(target, str) and target.startswith("cuda"):
        from . import cuda

        if not cuda.is_available():
            raise RuntimeError("Attempting to deserialize object on a CUDA device but torch.cuda.is_available() is "
                               "False. If you are running on a CPU-only machine, please use torch.load with "
                               "map_location=torch.device('cpu') to map your storages to the CPU.")
    return target


def _read(source, weights_only):
    start = source.read(len(_LEGACY_MAGIC))
    source.seek(-len(start), io.SEEK_CUR)
    if start.startswith(_ZIP_MAGIC):
        with zipfile.ZipFile(source) as archive:
            names = archive.namelist()
            pickles = [n for n in names if n.endswith("/data.pkl") and n.count("/") == 1]
            if not pickles:
                raise RuntimeError("PytorchStreamReader failed locating file data.pkl: file not found (the zip archive is "
                                   "not a torch.save file)")
            prefix = pickles[0][: -len("data.pkl")]
            if prefix + "byteorder" in names and archive.read(prefix + "byteorder") != b"little":
                raise NotImplementedError("torch.load: the file was saved on a big-endian machine; GPU Lab's torch reads "
                                          "little-endian files only")
            return _Unpickler(io.BytesIO(archive.read(pickles[0])), archive, prefix, weights_only).load()
    if start == _LEGACY_MAGIC:
        raise NotImplementedError("torch.load: this file is in PyTorch's legacy format (PyTorch before 1.6, or "
                                  "torch.save(..., _use_new_zipfile_serialization=False)), which GPU Lab's torch does not "
                                  "read yet; save it again in PyTorch with the default (zip) format")
    if not start:
        raise EOFError("Ran out of input")
    # A file of GPU Lab before 0.2: a plain pickle, its tensors as values.
    return _Unpickler(source, None, "", weights_only).load()


def load(f, map_location=None, pickle_module=None, *, weights_only=None, mmap=None, **pickle_load_args):
    """Reads what torch.save wrote. weights_only defaults to True (PyTorch 2.6): see the module's docstring."""
    if pickle_module is not None and pickle_module is not pickle:
        raise NotImplementedError("torch.load(pickle_module=...): GPU Lab's torch loads with Python's pickle only")
    if mmap:
        raise NotImplementedError("torch.load(mmap=True): GPU Lab's torch reads the whole file")
    if pickle_load_args:
        raise NotImplementedError(f"torch.load({', '.join(pickle_load_args)}=...): GPU Lab's torch takes no pickle "
                                  "load arguments")
    if weights_only is None:
        weights_only = os.environ.get("TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD", "0") in ("0", "")
    _loading.map_location = map_location
    try:
        if isinstance(f, (str, bytes)) or hasattr(f, "__fspath__"):
            with open(f, "rb") as source:
                return _read(source, weights_only)
        if not hasattr(f, "seek"):
            f = io.BytesIO(f.read())
        return _read(f, weights_only)
    finally:
        _loading.map_location = None
