"""The same-device rule, shown with the engine's real error: a CPU tensor meets a tensor on the GPU, or
a model on the GPU is called with input on the CPU -- then the fix.

GPU Lab runs this file as it is, in a Python session of its own, with `import torch` giving its
engine. Without a GPU, cuda:0 is GPU Lab's emulated GPU: a second device whose check and message are
exactly a real GPU's (only its speed is not). `lab` (GPU Lab's) draws the run's views: lab.view
declares the table, lab.row fills it, lab.measurement reports what the challenge grades.
"""
import torch
import torch.nn as nn


def gpu_for(device):
    """The GPU paired with the CPU: "auto" is cuda (a real GPU, else the emulated one)."""
    gpu = torch.device("cuda" if device == "auto" else device)
    if gpu.type != "cuda":
        raise ValueError(f"the same-device rule needs a GPU to pair with the CPU; '{device}' is not one (try cuda)")
    if not torch.cuda.is_available():
        raise ValueError("no usable GPU, and the emulated GPU is off: there is no second device to break the rule with")
    return torch.device("cuda", gpu.index if gpu.index is not None else torch.cuda.current_device())


def attempt(code, operands, operation):
    """Runs one operation for real: a row of the table says what happened, and the console shows the
    engine's own error when it raises. True when it ran."""
    print(f">>> {code}")
    try:
        out = operation()
    except RuntimeError as error:
        if "Expected all tensors to be on the same device" not in str(error):
            raise
        lab.row("operations", code, "RuntimeError", operands)
        lab.message(str(error), level="engine_error")
        return False
    lab.row("operations", code, f"ok: result on {out.device}, shape {tuple(out.shape)}", operands)
    return True


def break_with_tensors(gpu, fixed):
    """A CPU tensor plus a GPU tensor -- and the fix, the CPU tensor moved first."""
    cpu_tensor = torch.randn(3, 4)
    gpu_tensor = torch.randn(3, 4).to(gpu)
    if not fixed:
        return attempt("cpu_tensor + gpu_tensor", f"cpu and {gpu}", lambda: cpu_tensor + gpu_tensor)
    return attempt(f'cpu_tensor.to("{gpu}") + gpu_tensor', f"{gpu} and {gpu}", lambda: cpu_tensor.to(gpu) + gpu_tensor)


def break_with_a_model(gpu, fixed):
    """A model moved to the GPU, called with a batch left on the CPU -- and the fix, the batch moved too."""
    model = nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 1)).to(gpu)
    x = torch.randn(3, 4)
    if not fixed:
        return attempt(f'model(x)  # model.to("{gpu}")', f"input on cpu, parameters on {gpu}", lambda: model(x))
    return attempt(f'model(x.to("{gpu}"))', f"input and parameters on {gpu}", lambda: model(x.to(gpu)))


def the_one_exception(gpu):
    """A 0-dim CPU tensor (a Python number) may join an operation on any device."""
    return attempt("gpu_tensor * torch.tensor(2.0)", f"{gpu} and a 0-dim cpu tensor",
                   lambda: torch.randn(3, 4).to(gpu) * torch.tensor(2.0))


def run(device="auto", case="tensors", fixed=False):
    gpu = gpu_for(device)
    lab.device(gpu)
    torch.manual_seed(0)
    lab.view("operations", "Operations and where their tensors live", kind="table", columns=["operation", "result", "operands"])
    model_ran = break_with_a_model(gpu, fixed) if case == "model" else None
    first_ran = model_ran if case == "model" else break_with_tensors(gpu, fixed)
    scalar_ran = the_one_exception(gpu)
    errors = (not first_ran) + (not scalar_ran)
    if errors:
        fix = f'model(x.to("{gpu}"))' if case == "model" else f'cpu_tensor.to("{gpu}") + gpu_tensor'
        print(f"The fix: move the CPU tensor where the other operands are, e.g. {fix}. Tick 'fixed' and run again.")
    lab.measurement("device-mismatch errors", errors)
    lab.measurement("operations completed", first_ran + scalar_ran)
    lab.measurement("model forward passes completed", int(bool(model_ran)))
    lab.record("done", device=str(gpu), errors=errors, completed=first_ran + scalar_ran)
