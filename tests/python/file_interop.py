"""torch.save's files across GPU Lab's torch and PyTorch, both ways: what one writes the other reads --
a state dict, an optimizer's state, a checkpoint dict, every dtype GPU Lab has, shapes with a zero, views
that share a storage (still shared after loading) -- and GPU Lab refuses PyTorch's legacy format by name.

    PYTHONPATH=build/python /usr/bin/python3 tests/python/file_interop.py

Exits 77 (ctest: skipped) without PyTorch (Debian's python3-torch).
"""
import io
import sys

SKIP = 77


def checkpoint(torch):
    """A checkpoint as the lessons save one, built in `torch` (either library)."""
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.ReLU(), torch.nn.Linear(8, 2))
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
    loss = model(torch.ones(3, 4)).sum()
    loss.backward()
    optimizer.step()
    base = torch.arange(12.0).reshape(3, 4)
    return {"model": model.state_dict(), "optimizer": optimizer.state_dict(), "epoch": 7,
            "dtypes": [torch.tensor([1.5, -2.0], dtype=torch.float16), torch.tensor([0.25], dtype=torch.bfloat16),
                       torch.tensor([1.0 / 3.0], dtype=torch.float64), torch.tensor([2**62 + 1]),
                       torch.tensor([True, False])],
            "empty": torch.empty(0, 3), "base": base, "row": base[1], "column": base[:, 2],
            "weight": torch.nn.Parameter(torch.ones(2))}


def check(saved_by, loaded_in, torch_out):
    """Saves checkpoint(saved_by) with saved_by.save, loads it with loaded_in.load; returns the problems."""
    problems = []
    original = checkpoint(saved_by)
    buffer = io.BytesIO()
    saved_by.save(original, buffer)
    buffer.seek(0)
    loaded = loaded_in.load(buffer, map_location="cpu")
    name = f"{saved_by.__name__} -> {loaded_in.__name__}"

    def same(a, b, what):
        if tuple(a.shape) != tuple(b.shape) or str(a.dtype) != str(b.dtype) or a.tolist() != b.tolist():
            problems.append(f"{name}: {what}: {a.dtype} {tuple(a.shape)} {a.tolist()} != {b.dtype} {tuple(b.shape)} {b.tolist()}")

    for key, value in original["model"].items():
        same(loaded["model"][key], value, f"model[{key!r}]")
    for index, state in original["optimizer"]["state"].items():
        for key, value in state.items():
            if hasattr(value, "shape"):
                same(loaded["optimizer"]["state"][index][key], value, f"optimizer state {index}.{key}")
    if loaded["optimizer"]["param_groups"][0]["lr"] != 1e-3:
        problems.append(f"{name}: optimizer param_groups: {loaded['optimizer']['param_groups']}")
    if loaded["epoch"] != 7:
        problems.append(f"{name}: epoch {loaded['epoch']!r}")
    for a, b in zip(loaded["dtypes"], original["dtypes"]):
        same(a, b, "dtypes")
    same(loaded["empty"], original["empty"], "a shape with a zero")
    loaded["base"][1, 2] = 100.0
    if loaded["row"][2].item() != 100.0 or loaded["column"][1].item() != 100.0:
        problems.append(f"{name}: views no longer share their storage after loading")
    if type(loaded["weight"]).__name__ != "Parameter" or not loaded["weight"].requires_grad:
        problems.append(f"{name}: a Parameter loaded as {type(loaded['weight']).__name__}")
    print(f"{name}: {'ok' if not problems else str(len(problems)) + ' problems'}")
    return problems


def main():
    try:
        import torch as pytorch
    except ImportError:
        print("Debian's PyTorch (python3-torch) is not installed: the files were not checked against it")
        return SKIP
    import gpulab

    problems = check(gpulab, pytorch, pytorch) + check(pytorch, gpulab, pytorch) + check(gpulab, gpulab, pytorch)

    # PyTorch's legacy format is refused by name, never loaded as something else.
    legacy = io.BytesIO()
    pytorch.save({"w": pytorch.ones(2)}, legacy, _use_new_zipfile_serialization=False)
    legacy.seek(0)
    try:
        gpulab.load(legacy)
        problems.append("a legacy-format file loaded")
    except NotImplementedError as e:
        if "legacy format" not in str(e):
            problems.append(f"the legacy format's refusal does not name it: {e}")
    for problem in problems:
        print("FAIL", problem)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
