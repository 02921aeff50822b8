#!/usr/bin/env python3
"""The GEMM floor of one Fashion-MNIST MLP epoch: the matrix products an epoch of
compare_pytorch.py's MLP (784 -> 256 -> 128 -> 100 -> 10, batch 128, 60,000 images) makes, and nothing
else, timed. An epoch cannot take less than this at the machine's sgemm speed; the MLP epoch's time
divided by it is how much the rest (the DataLoader, activations, the loss, Adam, Python) adds.

Per step and layer (x: the layer's input, dy: its output's gradient, W: its weight, out x in):
  forward  x @ W^T, backward dW = dy^T @ x, and dx = dy @ W for every layer but the first (the images
  need no gradient). 468 steps of 128 and one of 96.

It is PyTorch code: run it on GPU Lab's engine (gpulab-cli run mlp_gemm_floor.py) or in PyTorch.
Prints one JSON line: {"seconds": ..., "gflop": ..., "gflops": ..., "threads": ...} (the fastest of
--repeat passes over the epoch's products).
"""
import argparse
import json
import time

import torch

SIZES = [784, 256, 128, 100, 10]
BATCHES = [128] * 468 + [96]


def epoch_of_products(layers):
    for batch in BATCHES:
        for i, (w, x, dy) in enumerate(layers):
            xb, dyb = x[:batch], dy[:batch]
            xb @ w.t()            # forward
            dyb.t() @ xb          # weight gradient
            if i > 0:
                dyb @ w           # input gradient


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--repeat", type=int, default=3)
    a = ap.parse_args()
    torch.manual_seed(0)
    layers = [(torch.randn(o, i), torch.randn(128, i), torch.randn(128, o)) for i, o in zip(SIZES, SIZES[1:])]
    flop = 0
    for batch in BATCHES:
        for k, (i, o) in enumerate(zip(SIZES, SIZES[1:])):
            flop += 2 * batch * i * o * (3 if k > 0 else 2)
    epoch_of_products(layers)  # warm-up: buffers, caches
    best = float("inf")
    with torch.no_grad():
        for _ in range(a.repeat):
            start = time.perf_counter()
            epoch_of_products(layers)
            best = min(best, time.perf_counter() - start)
    print(json.dumps({"seconds": best, "gflop": flop / 1e9, "gflops": flop / best / 1e9, "threads": torch.get_num_threads()}))


if __name__ == "__main__":
    main()
