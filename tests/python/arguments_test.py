"""Arguments that GPU Lab's torch once took and ignored (issue 48, section 2.6), checked where only GPU
Lab can show them -- on its emulated GPU, and in its memory history: the profiler's activities decide
whether a CUDA device's time is recorded; what the profiler cannot record is refused by name; the memory
history keeps what enabled, context, skip_actions and max_entries say. tests/python/cases_arguments.py
holds the cases that PyTorch answers too.

    PYTHONPATH=build/python GPULAB_EMULATED_GPU=1 python3 tests/python/arguments_test.py
"""
import json
import os
import pickle
import sys
import tempfile
import traceback
import warnings

import gpulab as torch  # GPU Lab's torch (build/python), not Debian's PyTorch

CHECKS = []


def check(fn):
    CHECKS.append(fn)
    return fn


def _work(device):
    a = torch.ones(64, 64, device=device)
    return (a @ a).sum().item()


def _profiled(**kwargs):
    with torch.profiler.profile(**kwargs) as prof:
        _work("cuda")
    return prof


@check
def activities_decide_whether_the_device_is_recorded():
    activity = torch.profiler.ProfilerActivity
    both = _profiled().key_averages().table()
    assert "Self CUDA" in both, both
    listed = _profiled(activities=[activity.CPU, activity.CUDA]).key_averages().table()
    assert "Self CUDA" in listed, listed
    cpu = _profiled(activities=[activity.CPU])
    assert "Self CUDA" not in cpu.key_averages().table(), cpu.key_averages().table()
    with tempfile.TemporaryDirectory() as folder:
        for name, prof in (("cpu", cpu), ("both", _profiled())):
            path = os.path.join(folder, name + ".json")
            prof.export_chrome_trace(path)
            with open(path) as f:
                kernels = [e for e in json.load(f)["traceEvents"] if e.get("cat") == "kernel"]
            assert bool(kernels) == (name == "both"), f"{name}: {len(kernels)} kernel events"


@check
def use_cuda_is_deprecated_and_still_obeyed():
    activity = torch.profiler.ProfilerActivity
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        prof = _profiled(activities=[activity.CPU, activity.CUDA], use_cuda=False)
    assert [w.category for w in caught] == [FutureWarning], caught
    assert "Self CUDA" not in prof.key_averages().table()


@check
def what_the_profiler_cannot_record_is_refused_by_name():
    for name, value in (("with_stack", True), ("with_flops", True), ("with_modules", True), ("experimental_config", object()),
                        ("schedule", lambda step: None)):
        try:
            torch.profiler.profile(**{name: value})
        except NotImplementedError as e:
            assert name in str(e), (name, str(e))
        else:
            raise AssertionError(f"profile({name}=...) was accepted")
    try:
        torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA])
    except NotImplementedError as e:
        assert "activities" in str(e), str(e)
    else:
        raise AssertionError("a profile without the CPU was accepted")


def _history_of(**kwargs):
    """A snapshot of one allocation and one free on the emulated GPU, recorded with `kwargs`."""
    torch.cuda.memory._record_memory_history(clear_history=True, **kwargs)
    kept = torch.empty(1 << 20, device="cuda")
    freed = torch.empty(1 << 18, device="cuda")
    del freed
    snapshot = torch.cuda.memory._snapshot()
    torch.cuda.memory._record_memory_history(enabled=None)
    del kept
    return snapshot


def _entries(snapshot):
    return [e for trace in snapshot["device_traces"] for e in trace]


def _block_frames(snapshot):
    return [b["frames"] for s in snapshot["segments"] for b in s["blocks"] if b["state"] == "active_allocated"]


@check
def the_memory_history_keeps_what_its_arguments_say():
    everything = _history_of()
    actions = {e["action"] for e in _entries(everything)}
    assert {"alloc", "free_requested", "free_completed"} <= actions, actions
    assert all(e["frames"] for e in _entries(everything)), "an entry without frames under context='all'"
    assert any(_block_frames(everything)), "no active block has frames"

    state = _history_of(enabled="state")
    assert _entries(state) == [], _entries(state)[:3]
    assert any(_block_frames(state)), "enabled='state' lost the blocks' frames"

    none = _history_of(context=None)
    assert _entries(none) and not any(e["frames"] for e in _entries(none)), "context=None kept frames"
    assert not any(_block_frames(none)), "context=None kept the blocks' frames"

    only_state = _history_of(context="state")
    assert not any(e["frames"] for e in _entries(only_state)) and any(_block_frames(only_state))

    alloc = _history_of(context="alloc")
    for e in _entries(alloc):
        freeing = e["action"].startswith("free") or e["action"] == "segment_free"
        assert bool(e["frames"]) != freeing, e

    skipped = _history_of(skip_actions=["free_requested"])
    assert "free_requested" not in {e["action"] for e in _entries(skipped)}
    assert "free_completed" in {e["action"] for e in _entries(skipped)}


def _refused(kwargs, error, word):
    try:
        torch.cuda.memory._record_memory_history(**kwargs)
    except error as e:
        assert word in str(e), (kwargs, str(e))
    else:
        raise AssertionError(f"_record_memory_history({kwargs}) was accepted")


@check
def the_memory_history_refuses_what_it_does_not_know():
    for kwargs in ({"enabled": "some"}, {"context": "stack"}, {"stacks": "cpp"}):
        _refused(kwargs, RuntimeError, "expected")
    _refused({"skip_actions": ["allocate"]}, ValueError, "allocate")
    for kwargs in ({"compile_context": True}, {"global_record_annotations": True}):
        _refused(kwargs, NotImplementedError, next(iter(kwargs)))
    torch.cuda.memory._record_memory_history(enabled=None)


@check
def a_second_call_keeps_the_history_unless_told_to_clear_it():
    torch.cuda.memory._record_memory_history(clear_history=True)
    first = torch.empty(1000, device="cuda")
    before = len(_entries(torch.cuda.memory._snapshot()))
    torch.cuda.memory._record_memory_history(max_entries=before + 5)  # the entries so far stay
    assert len(_entries(torch.cuda.memory._snapshot())) == before
    torch.cuda.memory._record_memory_history(max_entries=1)  # fewer: only the newest is kept
    assert len(_entries(torch.cuda.memory._snapshot())) == 1
    torch.cuda.memory._record_memory_history(clear_history=True)
    assert _entries(torch.cuda.memory._snapshot()) == []
    torch.cuda.memory._record_memory_history(enabled=None)
    del first


@check
def a_dumped_snapshot_is_the_snapshot_with_the_same_filter():
    torch.cuda.memory._record_memory_history(context=None, clear_history=True)
    kept = torch.empty(4096, device="cuda")
    with tempfile.TemporaryDirectory() as folder:
        path = os.path.join(folder, "snapshot.pickle")
        torch.cuda.memory._dump_snapshot(path)
        with open(path, "rb") as f:
            dumped = pickle.load(f)
        assert os.listdir(folder) == ["snapshot.pickle"], os.listdir(folder)  # no temporary file left
    assert _entries(dumped) and not any(e["frames"] for e in _entries(dumped))
    torch.cuda.memory._record_memory_history(enabled=None)
    del kept


@check
def the_older_form_of_the_call_still_works():
    torch.cuda.memory._record_memory_history(True, trace_alloc_max_entries=100, trace_alloc_record_context=True,
                                             clear_history=True)
    kept = torch.empty(4096, device="cuda")
    snapshot = torch.cuda.memory._snapshot()
    assert _entries(snapshot) and all(e["frames"] for e in _entries(snapshot))
    torch.cuda.memory._record_memory_history(False)
    try:
        torch.cuda.memory._snapshot()
    except RuntimeError:
        pass
    else:
        raise AssertionError("_record_memory_history(False) did not stop the history")
    del kept


def main():
    if not torch.cuda.is_available():
        print("no CUDA device (the emulated GPU is off): GPULAB_EMULATED_GPU=1 runs these checks")
        return 77
    failures = 0
    for fn in CHECKS:
        try:
            fn()
            print(f"ok   {fn.__name__}")
        except Exception:  # noqa: BLE001 - each check's failure is reported with its traceback
            failures += 1
            print(f"FAIL {fn.__name__}")
            traceback.print_exc()
    print(f"{len(CHECKS) - failures} of {len(CHECKS)} checks passed")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
