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
print("ok")
