"""torch.cuda.memory: the memory calls (also in torch.cuda) and the memory history --
_record_memory_history, _snapshot, _dump_snapshot -- whose pickle opens in PyTorch's own visualiser
(https://pytorch.org/memory_viz). GPU Lab records every device's allocator (the CPU's too), and its
frames say what the memory is for (its category: parameter, activation, ...) instead of a Python stack."""
import os
import pickle
import sys
import tempfile

from .. import _C

_history = None
# What the recording keeps, from _record_memory_history's arguments: the events' trace (enabled="all"),
# and which of the snapshot's entries carry frames (context).
_keep_trace = True
_context = "all"
_skip_actions = set()

_ENABLED = (None, "state", "all")
_CONTEXT = (None, "state", "alloc", "all")
_STACKS = ("python", "all")
_FREES = ("free_requested", "free_completed", "segment_free")
_ACTIONS = ("alloc", "free_requested", "free_completed", "segment_alloc", "segment_free", "segment_map", "segment_unmap",
            "snapshot", "oom")


def _record_memory_history(enabled="all", *args, **kwargs):
    """Starts recording (enabled "all": the allocation state and every event since; "state": the state
    only) or stops and forgets it (None). As PyTorch's, enabled=True or False takes the older form's
    arguments (_record_memory_history_legacy).

    GPU Lab records every device's allocator -- the CPU, the emulated GPU and each real GPU -- and its
    frames say what the memory is for (its category and training step) instead of a Python or C++ stack:
    `context` chooses which entries carry them (None: none; "state": the blocks allocated now; "alloc":
    also each allocation's event; "all": also each free's), and both `stacks` give these frames."""
    if isinstance(enabled, bool):
        return _record_memory_history_legacy(enabled, *args, **kwargs)
    return _record_memory_history_impl(enabled, *args, **kwargs)


def _record_memory_history_impl(enabled="all", context="all", stacks="all", max_entries=sys.maxsize, device=None,
                                clear_history=False, compile_context=False, global_record_annotations=False, skip_actions=None):
    global _history, _keep_trace, _context, _skip_actions
    if enabled not in _ENABLED:
        raise RuntimeError(f"expected state to be 'state', 'all', or None (got {enabled!r})")  # PyTorch's TORCH_CHECK
    if context not in _CONTEXT:
        raise RuntimeError(f"expected context to be 'state', 'alloc', 'all', or None (got {context!r})")
    if stacks not in _STACKS:
        raise RuntimeError(f"expected stacks to be 'python', or 'all' (got {stacks!r})")
    # device: as in PyTorch, which passes it on to nothing -- every device's allocator is recorded.
    _refuse(compile_context=compile_context, global_record_annotations=global_record_annotations)
    # skip_actions: taken out of the snapshot (in PyTorch they are never recorded, so they do not count
    # towards max_entries either).
    skip = set(skip_actions or ())
    if skip - set(_ACTIONS):
        raise ValueError(f"skip_actions: unknown actions {sorted(skip - set(_ACTIONS))} (the actions: {', '.join(_ACTIONS)})")
    if enabled is None:
        _history = None
        return
    max_entries = int(max_entries)
    if max_entries < 0:
        raise ValueError(f"max_entries must be at least 0, got {max_entries}")
    # One history records the whole time: a new call changes what the snapshot keeps, and clear_history
    # (or a first call) starts it afresh.
    max_entries = min(max_entries, 2**62)
    if _history is None or clear_history:
        _history = _C._MemoryHistory(max_entries)
    else:
        _history.set_max_entries(max_entries)
    _keep_trace, _context, _skip_actions = enabled == "all", context, skip


def _record_memory_history_legacy(enabled, record_context=True, trace_alloc_max_entries=1, trace_alloc_record_context=False,
                                  device=None, record_context_cpp=False, clear_history=False, compile_context=False,
                                  global_record_annotations=False):
    if record_context_cpp:
        raise NotImplementedError("torch.cuda.memory._record_memory_history(record_context_cpp=True): GPU Lab's frames are "
                                  "memory categories, not C++ stacks")
    if not enabled:
        return _record_memory_history_impl(None)
    context = ("all" if trace_alloc_record_context else "state") if record_context else None
    return _record_memory_history_impl("all" if trace_alloc_max_entries > 1 else "state", context, "python",
                                       max(int(trace_alloc_max_entries), 0), device, clear_history, compile_context,
                                       global_record_annotations)


def _refuse(compile_context, global_record_annotations):
    for name, given in (("compile_context", compile_context), ("global_record_annotations", global_record_annotations)):
        if given:
            raise NotImplementedError(f"torch.cuda.memory._record_memory_history({name}=True): GPU Lab does not record this")


def _kept(snapshot):
    """The snapshot with only what the recording's arguments keep."""
    traces = snapshot.get("device_traces", [])
    snapshot["device_traces"] = [[e for e in trace if e.get("action") not in _skip_actions] if _keep_trace else []
                                 for trace in traces]
    for segment in snapshot.get("segments", []):
        if _context is None:
            segment["frames"] = []
        for block in segment.get("blocks", []):
            if _context is None:
                block["frames"] = []
    for trace in snapshot.get("device_traces", []):
        for entry in trace:
            if _context in (None, "state") or _context == "alloc" and entry.get("action") in _FREES:
                entry["frames"] = []
    return snapshot


def _snapshot(device=None):
    """The current snapshot, as PyTorch's _snapshot() returns it (a dict)."""
    if _history is None:
        raise RuntimeError("No memory history is being recorded: call torch.cuda.memory._record_memory_history() first")
    # device: as in PyTorch, whose snapshot holds every device whatever it says.
    return _kept(pickle.loads(_history.snapshot_pickle()))


def _dump_snapshot(filename="dump_snapshot.pickle"):
    if _history is None:
        raise RuntimeError("No memory history is being recorded: call torch.cuda.memory._record_memory_history() first")
    if _keep_trace and _context == "all" and not _skip_actions:
        _history.write_snapshot(str(filename))  # streamed by the engine: nothing to take out
        return
    # Written whole or not at all, as the engine writes it: a temporary file beside it, then renamed.
    filename = os.fspath(filename)
    folder = os.path.dirname(os.path.abspath(filename))
    fd, temporary = tempfile.mkstemp(dir=folder, prefix=".snapshot-")
    try:
        with os.fdopen(fd, "wb") as f:
            pickle.dump(_snapshot(), f)
        os.replace(temporary, filename)
    except BaseException:
        os.unlink(temporary)
        raise


def __getattr__(name):
    from .. import cuda  # the memory calls live in torch.cuda

    if name in ("memory_allocated", "memory_reserved", "max_memory_allocated", "max_memory_reserved", "memory_stats",
                "memory_summary", "empty_cache", "reset_peak_memory_stats", "set_per_process_memory_fraction", "mem_get_info"):
        return getattr(cuda, name)
    from .. import _missing

    raise _missing("torch.cuda.memory", name)
