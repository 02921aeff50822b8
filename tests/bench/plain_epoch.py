"""One Fashion-MNIST epoch as a learner writes it, with nothing of the training lab around it: the
lab's model (MLP 256-128-100 or its CNN), Adam lr 1e-3, batch 128, a shuffled DataLoader, no .item()
in the loop. Run under GPU Lab's torch by lab_overhead.py (`python3 -m gpulab plain_epoch.py`).
Environment: BENCH_MODEL mlp|cnn, BENCH_SUBSET (the first N training images; 0: all 60,000).
Prints "steps=N seconds=S": the training loop's time, as the lab's own "seconds" counts it."""
import os
import sys
import time

import numpy as np
import torch
import torch.nn as nn
from torch.utils.data import DataLoader, TensorDataset

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from fashion_mnist import load_idx  # noqa: E402 - beside this script

cnn = os.environ.get("BENCH_MODEL", "mlp") == "cnn"
subset = int(os.environ.get("BENCH_SUBSET", "0")) or None
images = load_idx("train-images-idx3-ubyte")[:subset].astype(np.float32) / 255.0
labels = load_idx("train-labels-idx1-ubyte")[:subset].astype(np.int64)
x = (torch.from_numpy(images) - 0.2860) / 0.3530
x = x.reshape(-1, 1, 28, 28)
y = torch.from_numpy(labels)

torch.manual_seed(0)
if cnn:
    features = nn.Sequential(nn.Conv2d(1, 32, 3, padding=1, bias=False), nn.BatchNorm2d(32), nn.ReLU(), nn.MaxPool2d(2),
                             nn.Conv2d(32, 64, 3, padding=1, bias=False), nn.BatchNorm2d(64), nn.ReLU(), nn.MaxPool2d(2))
    width = 64 * 7 * 7
else:
    features, width = nn.Identity(), 784
layers = [features, nn.Flatten()]
for h in [256, 128, 100]:
    layers += [nn.Linear(width, h), nn.ReLU()]
    width = h
model = nn.Sequential(*layers, nn.Linear(width, 10))
optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
loss_fn = nn.CrossEntropyLoss()
loader = DataLoader(TensorDataset(x, y), batch_size=128, shuffle=True)

model.train()
steps, start = 0, time.perf_counter()
for bx, by in loader:
    loss = loss_fn(model(bx), by)
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
    steps += 1
print(f"steps={steps} seconds={time.perf_counter() - start:.6f}")
