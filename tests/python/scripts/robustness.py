"""Bad input never crashes GPU Lab's torch (gpulab-cli run --emulated-gpu): wrong types and shapes and
foreign objects raise Python's exceptions, as PyTorch's; several Python threads train at once; a
script that runs the emulated GPU out of memory gets torch.cuda.OutOfMemoryError and goes on; the
memory history records it. Prints "ok" at the end; any failed check raises."""
import pickle
import threading

import torch
import torch.nn as nn


def raises(kind, function, *args, **kwargs):
    try:
        function(*args, **kwargs)
    except kind:
        return
    except Exception as e:  # noqa: BLE001
        raise AssertionError(f"{function.__name__}{args}: expected {kind.__name__}, got {type(e).__name__}: {e}") from e
    raise AssertionError(f"{function.__name__}{args}: expected {kind.__name__}, nothing raised")


# Wrong types, foreign objects, wrong shapes: exceptions, as in PyTorch.
x = torch.ones(2, 3)
raises(TypeError, torch.zeros, "a")
raises(TypeError, torch.tensor, [1, "x"])
raises(TypeError, lambda: x + "x")
raises(TypeError, lambda: x @ 3)
raises(IndexError, lambda: x[1.5])  # PyTorch: "only integers, slices (`:`), ... are valid indices (got float)"
raises(TypeError, torch.cat, [x, 5])
raises(TypeError, torch.device, 3.5)
raises(TypeError, x.view, "a")
raises(TypeError, nn.Linear, "a", 2)
raises(RuntimeError, lambda: x @ x)
raises(RuntimeError, x.view, 4, 2)
raises(IndexError, lambda: x[5])
raises(ValueError, torch.tensor, [[1, 2], [3]])
raises(RuntimeError, torch.zeros, -1)
raises(RuntimeError, lambda: torch.ones(2, device="cuda") + torch.ones(2))
raises(RuntimeError, lambda: torch.ones(1).to("cuda:7"))

# Several Python threads training at once (each its own model), while the main thread waits.
losses, errors = {}, []


def train(seed):
    try:
        torch.manual_seed(seed)
        model = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 1)).to("cuda")
        optimizer = torch.optim.Adam(model.parameters(), lr=1e-2)
        xs, ys = torch.randn(64, 8, device="cuda"), torch.randn(64, 1, device="cuda")
        for _ in range(50):
            optimizer.zero_grad()
            loss = nn.functional.mse_loss(model(xs), ys)
            loss.backward()
            optimizer.step()
        losses[seed] = loss.item()
    except Exception as e:  # noqa: BLE001 - reported below
        errors.append(e)


threads = [threading.Thread(target=train, args=(seed,)) for seed in range(4)]
for t in threads:
    t.start()
for t in threads:
    t.join()
assert not errors, errors
assert len(losses) == 4 and all(v == v and v < 10 for v in losses.values()), losses

# Out of memory on the emulated GPU, and carrying on.
torch.cuda.memory._record_memory_history(max_entries=10000)
torch.cuda.empty_cache()
base = torch.cuda.memory_allocated()
held = []
try:
    while True:
        held.append(torch.empty(64 * 1024 * 1024, device="cuda"))  # 256 MiB each
except torch.cuda.OutOfMemoryError as e:
    assert "CUDA out of memory" in str(e), str(e)
    print("out of memory after", len(held), "blocks of 256 MiB")
del held
torch.cuda.empty_cache()
assert torch.cuda.memory_allocated() == base, (torch.cuda.memory_allocated(), base)
y = torch.ones(1024, device="cuda").sum()
assert y.item() == 1024.0
snapshot = torch.cuda.memory._snapshot()
actions = {entry["action"] for trace in snapshot["device_traces"] for entry in trace}
assert {"alloc", "oom", "segment_free"} <= actions, actions
import os
import tempfile

with tempfile.TemporaryDirectory() as folder:
    path = os.path.join(folder, "snapshot.pickle")
    torch.cuda.memory._dump_snapshot(path)
    with open(path, "rb") as f:
        assert "segments" in pickle.load(f)
torch.cuda.memory._record_memory_history(enabled=None)
print("ok")
