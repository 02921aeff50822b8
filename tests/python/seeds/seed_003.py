"""The ```python blocks of seed 003_8f267527277a9eed.txt (../shared/seeds/), verbatim, one cell each: run in order in one
namespace, as notebook cells, by tests/python/code_cells.py. Each "# %%" line gives the outcome expected
without a GPU (as PyTorch on a machine without one) and with one GPU (GPU Lab's emulated GPU, as
PyTorch on a one-GPU machine): "ok", or the exception class raised."""

# %% cell 0: no-gpu=ok one-gpu=ok
import torch
if torch.cuda.is_available():
    device = torch.device("cuda")
    print("GPU is available, using CUDA.")
else:
    device = torch.device("cpu")
    print("GPU not available, using CPU.")

# %% cell 1: no-gpu=ok one-gpu=ok
batch_X = batch_X.to(device)
batch_y = batch_y.to(device)
# ... rest of loop ...

# %% cell 2: no-gpu=ok one-gpu=ok
batch_X = batch_X.to(device)
batch_y = batch_y.to(device)
# ... rest of loop ...
