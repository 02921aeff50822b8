"""The seed lessons' training loop (seed 002, Part 3), as written for PyTorch, timed: 1024 x 16
regression data, a 16 -> 64 -> 1 MLP, Adam, batch 64, shuffled; the loss is read once per epoch, as
the seed does. python_bench.py runs this same file under GPU Lab's torch and under PyTorch.

Prints one line: steps=<n> seconds=<s> loss=<last loss>."""
import os
import time

import torch
import torch.nn as nn
import torch.optim as optim
from torch.utils.data import DataLoader, TensorDataset

threads = int(os.environ.get("BENCH_TORCH_THREADS", "0"))
if threads and hasattr(torch, "set_num_threads"):
    torch.set_num_threads(threads)
epochs = int(os.environ.get("BENCH_EPOCHS", "60"))
device = torch.device(os.environ.get("BENCH_DEVICE") or ("cuda" if torch.cuda.is_available() else "cpu"))
# PyTorch's Adam variants on a GPU (python_bench.py tries each and keeps the fastest): "fused" or
# "foreach"; unset, the script's own Adam(...) as the seed writes it.
adam_variant = os.environ.get("BENCH_ADAM_VARIANT", "")

torch.manual_seed(0)
num_samples, num_features = 1024, 16
X = torch.randn(num_samples, num_features)
y = torch.randn(num_samples, 1)
data_loader = DataLoader(TensorDataset(X, y), batch_size=64, shuffle=True)

model = nn.Sequential(nn.Linear(num_features, 64), nn.ReLU(), nn.Linear(64, 1))
model.to(device)
loss_function = nn.MSELoss()
optimizer = optim.Adam(model.parameters(), lr=0.001, **({adam_variant: True} if adam_variant else {}))


def epoch():
    loss = None
    for batch_X, batch_y in data_loader:
        batch_X = batch_X.to(device)
        batch_y = batch_y.to(device)
        predictions = model(batch_X)
        loss = loss_function(predictions, batch_y)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    return loss.item()


epoch()  # warm-up: the allocator's cache, the first optimizer state
start = time.perf_counter()
for _ in range(epochs):
    last = epoch()
seconds = time.perf_counter() - start
print(f"steps={epochs * len(data_loader)} seconds={seconds:.6f} loss={last:.6f}")
