"""torch.cuda over GPU Lab's engine: the real GPUs it can use, then its emulated GPU when this process
has one (GPULAB_EMULATED_GPU=1), as cuda:N after them. The memory calls are the engine's caching
allocator's own numbers (memory_allocated, memory_reserved, empty_cache, ...), on either kind."""
from .. import _C
from .._device import device as _device_type
from . import amp, memory, nccl  # noqa: F401

OutOfMemoryError = _C.OutOfMemoryError
OutOfMemoryError.__module__ = "torch.cuda"


def _lazy_check():
    # Without a GPU: a RuntimeError, as PyTorch's CUDA builds raise, in GPU Lab's CPU-only build too (as
    # its tensors' .to("cuda") does there), with the engine's reason (PyTorch's CPU-only build raises
    # AssertionError "Torch not compiled with CUDA enabled").
    if _C._cuda_device_count() == 0:
        if not _C._cuda_compiled():
            raise RuntimeError("GPU Lab was built without CUDA: " + _C._cuda_unavailable_reason() +
                               " (run with --emulated-gpu for GPU Lab's emulated GPU)")
        raise RuntimeError("Found no NVIDIA driver on your system. Please check that you have an NVIDIA GPU and installed a "
                           "driver from http://www.nvidia.com/Download/index.aspx (GPU Lab: " + _C._cuda_unavailable_reason() +
                           "; run with --emulated-gpu for GPU Lab's emulated GPU)")


def is_available():
    """True when a real GPU is usable, or GPU Lab's emulated GPU is on (it says so in its name)."""
    return _C._cuda_device_count() > 0


def device_count():
    return _C._cuda_device_count()


def is_emulated(device=None):
    """GPU Lab only: whether `device` (the current device by default) is the emulated GPU."""
    index = _index(device)
    return _C._emulated_gpu_index() == index


def _index(device):
    if device is None:
        return _C._cuda_current_device()
    if isinstance(device, int):
        return device
    d = _device_type(device)
    if d.type != "cuda":
        raise ValueError(f"Expected a cuda device, but got: {d}")
    return _C._cuda_current_device() if d.index is None else d.index


def current_device():
    _lazy_check()
    return _C._cuda_current_device()


def set_device(device):
    _lazy_check()
    _C._cuda_set_device(_index(device))


class _DeviceProperties:
    def __init__(self, info):
        self.name = info["name"]
        self.total_memory = info["total_memory"]
        self.major = info["major"]
        self.minor = info["minor"]
        self.multi_processor_count = info["multi_processor_count"]
        self.is_emulated = info["emulated"]

    def __repr__(self):
        return (f"_CudaDeviceProperties(name='{self.name}', major={self.major}, minor={self.minor}, "
                f"total_memory={self.total_memory // (1024 * 1024)}MB, multi_processor_count={self.multi_processor_count})")


def get_device_properties(device=None):
    _lazy_check()
    return _DeviceProperties(_C._cuda_device_properties(_index(device)))


def get_device_name(device=None):
    return get_device_properties(device).name


def get_device_capability(device=None):
    p = get_device_properties(device)
    return (p.major, p.minor)


class device:
    """``with torch.cuda.device(1):``: the current CUDA device inside the block."""

    def __init__(self, device):
        self._index = _index(device) if device is not None else None

    def __enter__(self):
        self._previous = _C._cuda_current_device()
        if self._index is not None:
            set_device(self._index)
        return self

    def __exit__(self, *exc):
        _C._cuda_set_device(self._previous)
        return False


def synchronize(device=None):
    _lazy_check()
    _C._cuda_synchronize(_index(device))


_NO_DEVICE = object()


def _per_device(name, engine_call, doc, without_device=_NO_DEVICE):
    """torch.cuda's memory calls of one device (the current one by default), from the engine's allocator.
    Where PyTorch answers without CUDA (memory_allocated() is 0 before CUDA starts), `without_device`
    is that answer."""

    def call(device=None):
        if without_device is not _NO_DEVICE and _C._cuda_device_count() == 0:
            return without_device() if callable(without_device) else without_device
        _lazy_check()
        return engine_call(_index(device))

    call.__name__ = call.__qualname__ = name
    call.__doc__ = doc
    return call


memory_allocated = _per_device("memory_allocated", _C._memory_allocated, "Bytes in tensors the caching allocator handed out.", 0)
max_memory_allocated = _per_device("max_memory_allocated", _C._max_memory_allocated,
                                   "The peak of memory_allocated since the start or reset_peak_memory_stats.", 0)
memory_reserved = _per_device("memory_reserved", _C._memory_reserved,
                              "Bytes the caching allocator holds from the device: allocated, and cached for reuse.", 0)
max_memory_reserved = _per_device("max_memory_reserved", _C._max_memory_reserved, "The peak of memory_reserved.", 0)
reset_peak_memory_stats = _per_device("reset_peak_memory_stats", _C._reset_peak_memory_stats,
                                      "Starts the peaks (max_memory_allocated, max_memory_reserved) again from now.")
memory_stats = _per_device("memory_stats", _C._memory_stats, "The allocator's statistics, under PyTorch's keys.", dict)


# PyTorch's older names, kept as PyTorch 2 keeps them: each warns as 2.x warns, then does what 2.x does.
def reset_max_memory_allocated(device=None):
    """Resets every peak, as PyTorch 2's does (it calls reset_peak_memory_stats), saying so."""
    import warnings

    warnings.warn("torch.cuda.reset_max_memory_allocated now calls torch.cuda.reset_peak_memory_stats, which resets /all/ "
                  "peak memory stats.", FutureWarning, stacklevel=2)
    return reset_peak_memory_stats(device)


def reset_max_memory_cached(device=None):
    import warnings

    warnings.warn("torch.cuda.reset_max_memory_cached now calls torch.cuda.reset_peak_memory_stats, which resets /all/ "
                  "peak memory stats.", FutureWarning, stacklevel=2)
    return reset_peak_memory_stats(device)


def memory_cached(device=None):
    import warnings

    warnings.warn("torch.cuda.memory_cached has been renamed to torch.cuda.memory_reserved", FutureWarning, stacklevel=2)
    return memory_reserved(device)


def max_memory_cached(device=None):
    import warnings

    warnings.warn("torch.cuda.max_memory_cached has been renamed to torch.cuda.max_memory_reserved", FutureWarning, stacklevel=2)
    return max_memory_reserved(device)


def memory_summary(device=None, abbreviated=False):
    _lazy_check()
    return _C._memory_summary(_index(device))


def empty_cache():
    """Returns the cached, unused blocks of every CUDA device to the device (what memory_reserved counts
    beyond memory_allocated). A no-op without a device, as in PyTorch."""
    if _C._cuda_device_count() > 0:
        _C._empty_cache()


def set_per_process_memory_fraction(fraction, device=None):
    _lazy_check()
    if not isinstance(fraction, float):
        raise TypeError("Invalid type for fraction argument, must be `float`")
    _C._set_per_process_memory_fraction(fraction, _index(device))


def mem_get_info(device=None):
    _lazy_check()
    return tuple(_C._mem_get_info(_index(device)))


# What nvidia-smi shows, through NVML as PyTorch reads it through pynvml. Without NVML (the emulated
# GPU, a driver without it) these raise RuntimeError saying why, where PyTorch raises for a missing
# pynvml -- except list_gpu_processes, which returns the reason as its text, as PyTorch's does.
def utilization(device=None):
    """The percent of the last sample period in which a kernel ran on the GPU."""
    _lazy_check()
    return _C._device_telemetry(_index(device))["gpu_utilization"]


def temperature(device=None):
    """The GPU's temperature in degrees Celsius."""
    _lazy_check()
    return _C._device_telemetry(_index(device))["temperature_c"]


def power_draw(device=None):
    """The GPU's power draw in milliwatts."""
    _lazy_check()
    watts = _C._device_telemetry(_index(device))["power_w"]
    return None if watts is None else int(watts * 1000)


def list_gpu_processes(device=None):
    """The processes using the GPU and their memory, as lines: "process   1234 uses   500.000 MB GPU memory"."""
    _lazy_check()
    index = _index(device)
    try:
        t = _C._device_telemetry(index)
    except RuntimeError as e:
        return str(e)
    lines = [f"GPU:{index}"]
    if t["processes_reason"]:
        lines.append(t["processes_reason"])
    elif not t["processes"]:
        lines.append("no processes are running")
    for pid, used in t["processes"]:
        lines.append(f"process {pid:>10d} uses {used / 1024 / 1024:>12.3f} MB GPU memory")
    return "\n".join(lines)


def manual_seed(seed):
    """The engine has one generator for every device: this seeds it, as torch.manual_seed does."""
    _C.manual_seed(seed)


manual_seed_all = manual_seed


Stream = _C.Stream
Event = _C.Event


def current_stream(device=None):
    _lazy_check()
    return _C.current_stream(device)


def default_stream(device=None):
    _lazy_check()
    return _C.default_stream(device)


class stream:
    """``with torch.cuda.stream(s):``: the work queued inside goes on `s` (None: no change)."""

    def __init__(self, stream):
        self.stream = stream
        self._context = _C._StreamContext(stream)

    def __enter__(self):
        self._context.enter()
        return self.stream

    def __exit__(self, *exc):
        self._context.exit()
        return False


StreamContext = stream


CUDAGraph = _C.CUDAGraph
graph_pool_handle = _C.graph_pool_handle
is_current_stream_capturing = _C.is_current_stream_capturing


class graph:
    """``with torch.cuda.graph(g):``: the block's GPU work is captured into g (nothing runs), on a side
    stream; g.replay() then runs it all with one launch. On the emulated GPU capture and replay work
    the same way; no timing is drawn from them."""

    def __init__(self, cuda_graph, pool=None, stream=None, capture_error_mode="global"):
        self.cuda_graph = cuda_graph
        self._context = _C._GraphContext(cuda_graph, pool, stream)

    def __enter__(self):
        self._context.enter()
        return self

    def __exit__(self, exc_type, exc, tb):
        self._context.exit(exc_type is not None)
        return False


from .graphs import make_graphed_callables  # noqa: E402  (after graph, which it uses)
