"""Parity of GPU Lab's torch with PyTorch: every case in the case files runs once on GPU Lab's torch and
once on Debian's PyTorch (python3-torch) in the same process, and the two outcomes must agree -- the
value returned (numbers within a tolerance, strings exactly: printing is part of the API), or the
exception raised (its class, and its message where the case says so).

    PYTHONPATH=build/python /usr/bin/python3 tests/python/parity.py tests/python/cases_*.py

A case is a function named case_* taking the torch module. It returns what should agree (a tensor
is compared by dtype, shape and values), or raises. A case file's OPTIONS may relax a case (message:
False compares only the exception's class) or name GPU Lab's own outcome where it follows a later
PyTorch than Debian's 1.13 on purpose (ours: the expected outcome, with the reason beside it).
Exits 77 (ctest: skipped) without PyTorch.
"""
import importlib.util
import math
import sys
import traceback

SKIP = 77


def _load(path):
    spec = importlib.util.spec_from_file_location("cases_" + str(abs(hash(path))), path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _outcome(torch, case):
    """('value', canonical value) or ('error', class name, message)."""
    try:
        return ("value", _canonical(torch, case(torch)))
    except Exception as e:  # noqa: BLE001 - the exception is the outcome
        return ("error", _error_class(e), str(e))


def _error_class(e):
    # torch.cuda.OutOfMemoryError is the same class on both sides by name; the NotImplementedError of
    # GPU Lab's missing APIs is compared as what it is.
    return type(e).__name__


def _canonical(torch, value):
    if isinstance(value, torch.Tensor):
        values = value.detach().cpu().double().tolist() if value.dtype.is_floating_point else value.detach().cpu().tolist()
        return ("tensor", str(value.dtype).replace("torch.", ""), tuple(value.shape), _canonical(torch, values))
    if isinstance(value, torch.Size):
        return ("size", tuple(value))
    if isinstance(value, torch.device):
        return ("device", str(value))
    if isinstance(value, torch.dtype):
        return ("dtype", str(value))
    if isinstance(value, (list, tuple)):
        return type(value).__name__, tuple(_canonical(torch, v) for v in value)
    if isinstance(value, dict):
        return "dict", tuple((k, _canonical(torch, v)) for k, v in value.items())
    return value


def _close(a, b, rtol, atol):
    if isinstance(a, float) and isinstance(b, (float, int)) or isinstance(b, float) and isinstance(a, (float, int)):
        if math.isnan(a) or math.isnan(b):
            return math.isnan(a) and math.isnan(b)
        return a == b or abs(a - b) <= atol + rtol * abs(b)
    if isinstance(a, tuple) and isinstance(b, tuple):
        return len(a) == len(b) and all(_close(x, y, rtol, atol) for x, y in zip(a, b))
    return a == b


def main(paths):
    try:
        import torch as pytorch
    except ImportError:
        print("Debian's PyTorch (python3-torch) is not installed: parity not checked")
        return SKIP
    import gpulab

    failures = 0
    count = 0
    for path in paths:
        module = _load(path)
        options = getattr(module, "OPTIONS", {})
        for name in sorted(n for n in dir(module) if n.startswith("case_")):
            case = getattr(module, name)
            opts = options.get(name[5:], {})
            count += 1
            ours = _outcome(gpulab, case)
            theirs = _outcome(pytorch, case)
            if "ours" in opts:
                # A deliberate difference from PyTorch 1.13 (where later PyTorch changed): GPU Lab's
                # outcome is the one given, and the case says why.
                theirs = opts["ours"]
            if ours[0] == "error" and theirs[0] == "error":
                same = ours[1] == theirs[1] and (not opts.get("message", True) or ours[2] == theirs[2])
            elif ours[0] == "value" and theirs[0] == "value":
                same = _close(ours[1], theirs[1], opts.get("rtol", 1e-5), opts.get("atol", 1e-6))
            else:
                same = False
            if not same:
                failures += 1
                print(f"FAIL {path}::{name}\n  GPU Lab's torch: {ours!r}\n  PyTorch {pytorch.__version__}: {theirs!r}\n")
    print(f"{count - failures} of {count} cases agree with PyTorch {pytorch.__version__}")
    return 1 if failures else 0


if __name__ == "__main__":
    try:
        sys.exit(main(sys.argv[1:]))
    except Exception:  # noqa: BLE001 - a crash of the runner is a failure with its traceback
        traceback.print_exc()
        sys.exit(1)
