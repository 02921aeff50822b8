"""The ```python blocks of seed 004_9bc94955b72a6ca6.txt (../shared/seeds/), verbatim, one cell each: run in order in one
namespace, as notebook cells, by tests/python/code_cells.py. Each "# %%" line gives the outcome expected
without a GPU (as PyTorch on a machine without one) and with one GPU (GPU Lab's emulated GPU, as
PyTorch on a one-GPU machine): "ok", or the exception class raised."""

# %% cell 0: no-gpu=ok one-gpu=ok
import torch
torch.cuda.is_available()  # Returns True if CUDA is ready
torch.cuda.device_count()  # Number of available GPUs

# %% cell 1: no-gpu=ok one-gpu=ok
device = torch.device("cuda" if torch.cuda.is_available() else "cpu")

x = torch.randn(5, 5).to(device)
model = model.to(device)

# x.to('cuda') without a GPU (PyTorch's CPU-only build raises AssertionError, its CUDA build RuntimeError).
# %% cell 2: no-gpu=RuntimeError one-gpu=ok
x = torch.tensor([1.0, 2.0])
x_cuda = x.to('cuda')

# Back to CPU
x_cpu = x_cuda.to('cpu')

# %% cell 3: no-gpu=ok one-gpu=ok
for i in range(torch.cuda.device_count()):
    print(torch.cuda.get_device_name(i))

# cuda:1 on a machine without a second GPU: 'invalid device ordinal'.
# %% cell 4: no-gpu=RuntimeError one-gpu=RuntimeError
model = model.to('cuda:1')

# DataParallel(model).to('cuda') without a GPU.
# %% cell 5: no-gpu=RuntimeError one-gpu=ok
from torch.nn import DataParallel

model = DataParallel(model)
model = model.to('cuda')

# %% cell 6: no-gpu=ok one-gpu=ok
torch.cuda.memory_allocated()
torch.cuda.memory_reserved()

# %% cell 7: no-gpu=ok one-gpu=ok
torch.cuda.empty_cache()

# DataParallel moves the inputs to cuda:0, but not the targets: the loss meets a CPU target.
# %% cell 8: no-gpu=ok one-gpu=RuntimeError
from torch.cuda.amp import autocast, GradScaler

scaler = GradScaler()

for input, target in dataloader:
    optimizer.zero_grad()
    with autocast():
        output = model(input)
        loss = loss_fn(output, target)
    scaler.scale(loss).backward()
    scaler.step(optimizer)
    scaler.update()

# %% cell 9: no-gpu=ok one-gpu=ok
torch.backends.cudnn.benchmark = True
torch.backends.cudnn.deterministic = False
