#!/usr/bin/env python3
"""Runs the same training workloads in GPU Lab (gpulab-cli) and in PyTorch, in one go, and prints
the ratios. Speed targets are checked here, never by timed unit tests.

Workloads (both sides identical: data, model, optimizer, batch size, shuffling, no per-step .item()):
  regression  the seed lessons' loop: 1024 x 16 inputs, 16 -> 64 -> 1 MLP, Adam lr 1e-3, batch 64
  fashion     Fashion-MNIST, 784 -> 256 -> 128 -> 100 -> 10 ReLU MLP, Adam lr 1e-3, batch 128, one epoch

Usage: python3 tests/bench/compare_pytorch.py --cli build/bin/gpulab-cli [--device cpu|cuda] [--repeat 3]
(Debian's PyTorch is python3-torch: run it with /usr/bin/python3 if another python3 comes first.)
"""
import argparse
import gzip
import json
import os
import statistics
import subprocess
import time

import numpy as np
import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

FASHION_DIR = os.environ.get("GPULAB_FASHION_MNIST_DIR", "/usr/share/datasets/fashion-mnist")


def ours(cli, device, args):
    cmd = [cli, "train", "--device", device, "--json", "--log-every", "100000"] + args
    out = subprocess.run(cmd, check=True, capture_output=True, text=True).stdout
    done = [json.loads(l) for l in out.splitlines() if '"event":"done"' in l][0]
    return done["steps"] / done["seconds"], done


def sync(device):
    if device.type == "cuda":
        torch.cuda.synchronize()


def torch_train(device, x, y, hidden, batch, epochs, classification):
    torch.manual_seed(0)
    layers, width = [], x.shape[1]
    for h in hidden:
        layers += [nn.Linear(width, h), nn.ReLU()]
        width = h
    layers.append(nn.Linear(width, 10 if classification else 1))
    model = nn.Sequential(*layers).to(device)
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    loss_fn = nn.CrossEntropyLoss() if classification else nn.MSELoss()
    loader = DataLoader(TensorDataset(x, y), batch_size=batch, shuffle=True, num_workers=0)
    steps, start = 0, time.perf_counter()
    for _ in range(epochs):
        model.train()
        for bx, by in loader:
            bx, by = bx.to(device), by.to(device)
            loss = loss_fn(model(bx), by)
            opt.zero_grad()
            loss.backward()
            opt.step()
            steps += 1
    sync(device)
    return steps / (time.perf_counter() - start), steps


def load_idx(name):
    path = os.path.join(FASHION_DIR, name + ".gz")
    with gzip.open(path) as f:
        data = f.read()
    dims = data[3]
    shape = [int.from_bytes(data[4 + 4 * i: 8 + 4 * i], "big") for i in range(dims)]
    return np.frombuffer(data, dtype=np.uint8, offset=4 + 4 * dims).reshape(shape)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--cli", default="build/bin/gpulab-cli")
    ap.add_argument("--device", default="cpu", choices=["cpu", "cuda"])
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--skip-fashion", action="store_true")
    a = ap.parse_args()
    torch.set_num_threads(os.cpu_count())  # the same cores OpenBLAS uses on our side
    dev = torch.device(a.device)
    print(f"PyTorch {torch.__version__}, {torch.get_num_threads()} threads, device {a.device}")

    # Regression: 50 epochs x 16 steps.
    g = torch.Generator().manual_seed(0)
    x = torch.randn(1024, 16, generator=g)
    y = x @ (torch.randn(16, 1, generator=g) / 4) + 0.1 * torch.randn(1024, 1, generator=g)
    reg_args = ["--dataset", "regression", "--hidden", "64", "--optimizer", "adam", "--lr", "1e-3", "--batch-size", "64", "--epochs", "50"]
    ours_sps = statistics.median(ours(a.cli, a.device, reg_args)[0] for _ in range(a.repeat))
    torch_sps = statistics.median(torch_train(dev, x, y, [64], 64, 50, False)[0] for _ in range(a.repeat))
    print(f"regression loop (16-64-1, Adam, batch 64): GPU Lab {ours_sps:,.0f} steps/s, PyTorch {torch_sps:,.0f} steps/s, "
          f"ratio {ours_sps / torch_sps:.1f}x")

    if not a.skip_fashion:
        images = torch.from_numpy(load_idx("train-images-idx3-ubyte").astype(np.float32) / 255.0)
        xf = ((images - 0.2860) / 0.3530).reshape(-1, 784)
        yf = torch.from_numpy(load_idx("train-labels-idx1-ubyte").astype(np.int64))
        fa = ["--dataset", "fashion-mnist", "--hidden", "256,128,100", "--optimizer", "adam", "--lr", "1e-3", "--batch-size", "128", "--epochs", "1"]
        ours_s = statistics.median(ours(a.cli, a.device, fa)[1]["seconds"] for _ in range(a.repeat))
        torch_s = statistics.median(469 / torch_train(dev, xf, yf, [256, 128, 100], 128, 1, True)[0] for _ in range(a.repeat))
        print(f"fashion-mnist MLP epoch (256-128-100, Adam, batch 128): GPU Lab {ours_s:.2f} s, PyTorch {torch_s:.2f} s, "
              f"ratio {torch_s / ours_s:.2f}x (PyTorch time / ours; > 1 means GPU Lab is faster)")


if __name__ == "__main__":
    main()
