"""gpulab-cli run without --emulated-gpu on a machine without a GPU: CUDA code behaves as PyTorch's does
on such a machine. Prints "ok" at the end; any failed check raises (exit status 1)."""
import torch
import torch.nn as nn

assert "gpulab" in torch.__version__, torch.__version__
assert "GPU Lab" in repr(torch), repr(torch)
assert not torch.cuda.is_available()
assert torch.cuda.device_count() == 0
device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
model = nn.Linear(4, 2).to(device)
print(model(torch.ones(3, 4, device=device)).shape)
try:
    torch.zeros(2).to("cuda")
except RuntimeError as e:
    print("cuda without a GPU:", type(e).__name__)
else:
    raise AssertionError("a tensor moved to cuda without a GPU")
# A module PyTorch has and GPU Lab's torch has not: `import torch.onnx` works, its first use says so, in
# torch's name; a module PyTorch has not either is Python's usual error, in torch's name too.
import torch.onnx  # noqa: E402

try:
    torch.onnx.export(model, torch.ones(1, 4), "model.onnx")
except NotImplementedError as e:
    assert "torch.onnx.export" in str(e) and "gpulab" not in str(e), e
else:
    raise AssertionError("torch.onnx.export ran")
try:
    import torch.no_such_module  # noqa: F401
except ModuleNotFoundError as e:
    assert str(e) == "No module named 'torch.no_such_module'", e
else:
    raise AssertionError("torch.no_such_module imported")
print("ok")
