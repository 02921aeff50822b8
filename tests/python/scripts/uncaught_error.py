"""An uncaught exception: gpulab-cli run exits with status 1 and Python's traceback."""
import torch

torch.ones(2, 3) @ torch.ones(2, 3)
