"""torch.cuda.memory: the memory calls (also in torch.cuda) and the memory history --
_record_memory_history, _snapshot, _dump_snapshot -- whose pickle opens in PyTorch's own visualiser
(https://pytorch.org/memory_viz). GPU Lab records every device's allocator (the CPU's too), and its
frames say what the memory is for (its category: parameter, activation, ...) instead of a Python stack."""
import pickle

from .. import _C

_history = None


def _record_memory_history(enabled="all", context="all", stacks="all", max_entries=100000, *args, **kwargs):
    """Starts recording (enabled: "all", "state" or True) or stops and forgets it (None or False)."""
    global _history
    if enabled in (None, False):
        _history = None
        return
    _history = _C._MemoryHistory(int(max_entries))


def _snapshot(device=None):
    """The current snapshot, as PyTorch's _snapshot() returns it (a dict)."""
    if _history is None:
        raise RuntimeError("No memory history is being recorded: call torch.cuda.memory._record_memory_history() first")
    return pickle.loads(_history.snapshot_pickle())


def _dump_snapshot(filename="dump_snapshot.pickle"):
    if _history is None:
        raise RuntimeError("No memory history is being recorded: call torch.cuda.memory._record_memory_history() first")
    _history.write_snapshot(str(filename))


def __getattr__(name):
    from .. import cuda  # the memory calls live in torch.cuda

    if name in ("memory_allocated", "memory_reserved", "max_memory_allocated", "max_memory_reserved", "memory_stats",
                "memory_summary", "empty_cache", "reset_peak_memory_stats", "set_per_process_memory_fraction", "mem_get_info"):
        return getattr(cuda, name)
    from .. import _missing

    raise _missing("torch.cuda.memory", name)
