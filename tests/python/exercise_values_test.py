"""An exercise's values under guard (python/gpulab/exercise_values.py; issue 48, section 1.3): the
expressions the lessons use still give their numbers, and the ways out of an expression -- imports,
files, dunder attributes, modules reached through torch, callables handed to map() -- are refused
without anything running.

    PYTHONPATH=build/python python3 tests/python/exercise_values_test.py
"""
import json
import os
import subprocess
import sys
import tempfile
import traceback


def through_the_kernel(folder):
    """The kernel's own path (python -m gpulab.kernel, as the window runs an exercise): a hostile value
    after a harmless cell is not measured, and nothing ran; a lesson's value is measured."""
    marker = os.path.join(folder, "ran-in-kernel")
    kernel = subprocess.Popen([sys.executable, "-m", "gpulab.kernel"], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                              stderr=subprocess.DEVNULL, text=True, env={**os.environ, "GPULAB_EMULATED_GPU": "0"})
    values = {"hostile": f"__import__('os').system('touch {marker}') == 0", "cell's x": "x + 1"}
    kernel.stdin.write(json.dumps({"op": "run", "cell": "c1", "code": "x = 1", "measure": {"values": values}}) + "\n")
    kernel.stdin.flush()
    finished = None
    for line in kernel.stdout:
        event = json.loads(line)
        if event.get("event") == "finished":
            finished = event
            break
    kernel.stdin.close()
    kernel.wait(timeout=60)
    problems = []
    if finished is None:
        return ["the kernel ended without finishing the cell"]
    measured = {m["name"]: m["value"] for m in finished.get("measurements", [])}
    if os.path.exists(marker):
        problems.append("the kernel ran the hostile value: " + marker + " exists")
    if "hostile" in measured or "hostile" not in finished.get("unmeasured", {}):
        problems.append(f"the hostile value was measured: {finished}")
    if measured.get("cell's x") != 2:
        problems.append(f"the cell's value was not measured: {finished}")
    print("kernel:", finished.get("unmeasured"))
    return problems


def main():
    import gpulab as torch
    from gpulab import exercise_values
    from gpulab.kernel import Lab

    failures = []
    folder = tempfile.mkdtemp()
    marker = os.path.join(folder, "ran")

    # A session as a learner's cells leave it: names, a function and a class of the cells', a module
    # they imported, and the lab object.
    class Session:  # what the lab object reads of its kernel
        pass

    session = Session()
    session.torch = torch
    namespace = {"__name__": "__main__", "__builtins__": __builtins__, "torch": torch, "os": os, "lab": Lab(session)}
    cell = ("import math\n"
            "weights = torch.ones(3)\noutputs = weights * 2\nloss = outputs.sum()\n"
            "preds = [torch.ones(1) for _ in range(4)]\nmicro_batch, k = 512, 8\n"
            "def pick_device():\n    return torch.device('cuda' if torch.cuda.is_available() else 'cpu')\n"
            "class Model(torch.nn.Module):\n    def forward(self, x):\n        return x + 1\n"
            "model = Model()\nsystem = os.system\n")
    exec(compile(cell, "<cell c1>", "exec"), namespace)

    allowed = {
        "len(preds)": 4,
        "sum(p.grad_fn is not None for p in preds)": 0,
        "math.isfinite(loss.item())": True,
        "outputs.device == weights.device": True,
        "weights.device.type == 'cpu'": True,
        "micro_batch * k": 4096,
        "lab.call_with_cuda_available(False, pick_device).type == 'cpu'": True,
        "torch.allclose(outputs, weights * 2)": True,
        "model(weights).sum().item()": 6.0,
        "max(x.item() for x in outputs)": 2.0,
        "isinstance(loss.item(), float)": True,
        "torch.cuda.is_available() in (True, False)": True,
    }
    for expression, expected in allowed.items():
        try:
            value = exercise_values.evaluate(expression, "v", namespace)
            if hasattr(value, "item"):
                value = value.item()
            if value != expected:
                failures.append(f"{expression!r} gave {value!r}, expected {expected!r}")
        except Exception:  # noqa: BLE001 - reported
            failures.append(f"{expression!r} raised:\n{traceback.format_exc()}")

    hostile = [
        f"__import__('os').system('touch {marker}') == 0",
        f"os.system('touch {marker}') == 0",
        f"system('touch {marker}') == 0",
        f"open('{marker}', 'w').write('x')",
        f"exec(\"open('{marker}', 'w')\")",
        f"eval(\"open('{marker}', 'w')\")",
        "().__class__.__base__.__subclasses__()",
        "pick_device.__globals__['os'].system('touch " + marker + "')",
        f"torch.serialization.os.system('touch {marker}')",
        f"torch.save(weights, '{marker}') is None",
        f"list(map(torch.save, [weights], ['{marker}']))",
        f"sorted(['{marker}'], key=torch.save)",
        f"lab.call_with_cuda_available(True, torch.save, weights, '{marker}')",
        f"torch.load('{marker}', weights_only=False)",
        f"getattr(os, 'system')('touch {marker}')",
        f"(lambda: open('{marker}', 'w'))()",
        f"[y := open('{marker}', 'w')]",
        "lab._kernel",
        f"torch.cuda.memory.pickle.loads(b'')",
    ]
    for expression in hostile:
        try:
            value = exercise_values.evaluate(expression, "v", namespace)
            failures.append(f"{expression!r} was not refused: it gave {value!r}")
        except (ValueError, NameError, SyntaxError) as e:
            print(f"refused {expression!r}: {type(e).__name__}: {e}")
        except Exception as e:  # noqa: BLE001 - refused, but not as a refusal should be
            failures.append(f"{expression!r} raised {type(e).__name__}: {e} instead of a refusal")
        if os.path.exists(marker):
            failures.append(f"{expression!r} ran: {marker} exists")
            os.unlink(marker)

    failures += through_the_kernel(folder)
    for failure in failures:
        print("FAIL", failure)
    print(f"{len(allowed)} values measured, {len(hostile)} refused; {len(failures)} failures")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
