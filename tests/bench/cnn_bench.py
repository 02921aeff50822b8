#!/usr/bin/env python3
"""The training lab's CNN epoch in GPU Lab (`gpulab-cli train --model cnn`) against the same epoch in
PyTorch on the same device, in one run, each side in its best configuration, and the ratio.

The workload, identical on both sides: Fashion-MNIST (60,000 training images, normalised with mean
0.2860 and std 0.3530), the CNN
    Conv2d(1, 32, 3, padding=1, bias=False), BatchNorm2d(32), ReLU, MaxPool2d(2),
    Conv2d(32, 64, 3, padding=1, bias=False), BatchNorm2d(64), ReLU, MaxPool2d(2),
    Flatten, Linear(3136, 128), ReLU, Linear(128, 10)
cross-entropy, Adam lr 1e-3, batch 128, shuffled by a DataLoader (no worker threads), no per-step
.item(). The figure is the training time of the last epoch run (seconds, evaluation excluded; with
--epochs 2 the second, i.e. without first-step costs such as cuDNN's benchmark search).

Configurations, each in its own process:
  CPU   GPU Lab with OMP_NUM_THREADS 1 and 2 (its kernels' threads; its GEMMs are OpenBLAS's, one call a
        thread); PyTorch with
        torch.set_num_threads 1 and 2. Each side's fastest is compared, and printed.
  CUDA  both without and with cuDNN's benchmark mode (gpulab-cli --cudnn-benchmark;
        torch.backends.cudnn.benchmark = True), compared mode by mode.

Usage (Debian's PyTorch is python3-torch: run it with /usr/bin/python3 if another python3 comes first):
  /usr/bin/python3 tests/bench/cnn_bench.py --cli build/bin/gpulab-cli [--device cpu|cuda] [--repeat N]
      [--epochs E] [--train-subset N] [--json FILE]
"""
import argparse
import json
import os
import subprocess
import sys
import time

from fashion_mnist import load_idx  # beside this script
BATCH, LR, HIDDEN = 128, 1e-3, 128


def ours(cli, device, epochs, subset, threads, benchmark):
    """GPU Lab: the training seconds of the last epoch, from the JSON records of one run."""
    cmd = [cli, "train", "--dataset", "fashion-mnist", "--model", "cnn", "--hidden", str(HIDDEN), "--optimizer", "adam",
           "--lr", str(LR), "--batch-size", str(BATCH), "--epochs", str(epochs), "--device", device, "--seed", "0",
           "--train-subset", str(subset), "--log-every", "100000", "--json"]
    if benchmark:
        cmd.append("--cudnn-benchmark")
    env = dict(os.environ)
    if threads:
        env["OMP_NUM_THREADS"] = str(threads)
    out = subprocess.run(cmd, check=True, capture_output=True, text=True, env=env).stdout
    records = [json.loads(l) for l in out.splitlines() if l.startswith("{")]
    done = [r for r in records if r.get("event") == "done"][0]
    # The elapsed training time at the last step of each epoch but the last: the last epoch's time is
    # what the whole run trained minus that.
    before = 0.0
    for r in records:
        if r.get("event") == "step" and r.get("epoch") == epochs - 1:
            before = max(before, r["elapsed_s"])
    return done["seconds"] - before, done


def torch_worker(device, epochs, subset, threads, benchmark):
    """PyTorch, run in a child process (one configuration a process): prints the last epoch's seconds."""
    import numpy as np
    import torch
    from torch import nn
    from torch.utils.data import DataLoader, TensorDataset

    if threads:
        torch.set_num_threads(threads)
    torch.backends.cudnn.benchmark = benchmark
    dev = torch.device(device)

    images = torch.from_numpy(load_idx("train-images-idx3-ubyte").astype(np.float32) / 255.0)
    x = ((images - 0.2860) / 0.3530).reshape(-1, 1, 28, 28)
    y = torch.from_numpy(load_idx("train-labels-idx1-ubyte").astype(np.int64))
    if subset:
        x, y = x[:subset], y[:subset]
    torch.manual_seed(0)
    model = nn.Sequential(nn.Conv2d(1, 32, 3, padding=1, bias=False), nn.BatchNorm2d(32), nn.ReLU(), nn.MaxPool2d(2),
                          nn.Conv2d(32, 64, 3, padding=1, bias=False), nn.BatchNorm2d(64), nn.ReLU(), nn.MaxPool2d(2),
                          nn.Flatten(), nn.Linear(64 * 7 * 7, HIDDEN), nn.ReLU(), nn.Linear(HIDDEN, 10)).to(dev)
    opt = torch.optim.Adam(model.parameters(), lr=LR)
    loss_fn = nn.CrossEntropyLoss()
    loader = DataLoader(TensorDataset(x, y), batch_size=BATCH, shuffle=True, num_workers=0)
    seconds = 0.0
    for _ in range(epochs):
        model.train()
        running = torch.zeros((), device=dev)
        start = time.perf_counter()
        for bx, by in loader:
            bx, by = bx.to(dev), by.to(dev)
            loss = loss_fn(model(bx), by)
            opt.zero_grad()
            loss.backward()
            opt.step()
            running += loss.detach()
        running.item()  # waits for the device, as GPU Lab's epoch-end report does
        seconds = time.perf_counter() - start
    print(json.dumps({"seconds": seconds, "threads": torch.get_num_threads(), "torch": torch.__version__,
                      "mkldnn": torch.backends.mkldnn.is_available()}))


def theirs(device, epochs, subset, threads, benchmark):
    cmd = [sys.executable, os.path.abspath(__file__), "--torch-worker", "--device", device, "--epochs", str(epochs),
           "--train-subset", str(subset), "--threads", str(threads)] + (["--cudnn-benchmark"] if benchmark else [])
    out = subprocess.run(cmd, check=True, capture_output=True, text=True).stdout
    return json.loads(out.strip().splitlines()[-1])


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--cli", default="build/bin/gpulab-cli")
    ap.add_argument("--device", default="cpu", choices=["cpu", "cuda"])
    ap.add_argument("--repeat", type=int, default=1, help="runs per configuration; the fastest counts")
    ap.add_argument("--epochs", type=int, default=0, help="epochs a run (the last is timed); default 1 on the CPU, 2 on CUDA")
    ap.add_argument("--train-subset", type=int, default=0, help="train on the first N images only (0: all 60,000)")
    ap.add_argument("--json", help="also write the results to this file")
    ap.add_argument("--torch-worker", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--threads", type=int, default=0, help=argparse.SUPPRESS)
    ap.add_argument("--cudnn-benchmark", action="store_true", help=argparse.SUPPRESS)
    a = ap.parse_args()
    epochs = a.epochs or (1 if a.device == "cpu" else 2)
    if a.torch_worker:
        torch_worker(a.device, epochs, a.train_subset, a.threads, a.cudnn_benchmark)
        return

    images = a.train_subset or 60000
    print(f"CNN epoch: Fashion-MNIST {images} images, batch {BATCH}, Adam lr {LR}, classifier {HIDDEN}; "
          f"device {a.device}; last of {epochs} epoch(s) timed; fastest of {a.repeat} run(s) a configuration")
    # (label, benchmark mode, GPU Lab configurations, PyTorch configurations): threads, 0 = untouched.
    if a.device == "cpu":
        modes = [("cpu", False, [1, 2], [1, 2])]
    else:
        modes = [("cudnn.benchmark off", False, [0], [0]), ("cudnn.benchmark on", True, [0], [0])]
    results = []
    for label, bench, our_threads, torch_threads in modes:
        ours_runs, torch_runs = {}, {}
        for _ in range(a.repeat):  # alternate the sides, so that both see the machine's neighbours alike
            for t in our_threads:
                s, _ = ours(a.cli, a.device, epochs, a.train_subset, t, bench)
                ours_runs.setdefault(t, []).append(s)
                print(f"  GPU Lab  {label}, threads {t or 'default'}: {s:.2f} s", flush=True)
            for t in torch_threads:
                r = theirs(a.device, epochs, a.train_subset, t, bench)
                torch_runs.setdefault(t, []).append(r["seconds"])
                print(f"  PyTorch {r['torch']} {label}, torch threads {r['threads']} (oneDNN {'on' if r['mkldnn'] else 'off'}): "
                      f"{r['seconds']:.2f} s", flush=True)
        our_t, our_s = min(((t, min(v)) for t, v in ours_runs.items()), key=lambda p: p[1])
        th_t, th_s = min(((t, min(v)) for t, v in torch_runs.items()), key=lambda p: p[1])
        ratio = th_s / our_s
        cfg_ours = f"threads {our_t}" if our_t else "default"
        cfg_torch = f"torch threads {th_t}" if th_t else "default"
        print(f"{label}: GPU Lab {our_s:.2f} s/epoch ({cfg_ours}), PyTorch {th_s:.2f} s/epoch ({cfg_torch}), "
              f"ratio {ratio:.2f}x (PyTorch time / GPU Lab's; > 1: GPU Lab faster)"
              + ("" if a.device != "cpu" else f" -- target on the CPU: >= 2.0, {'met' if ratio >= 2.0 else 'NOT met'}"))
        results.append({"mode": label, "gpulab_s": our_s, "gpulab_config": cfg_ours, "pytorch_s": th_s,
                        "pytorch_config": cfg_torch, "ratio": ratio, "runs": {"gpulab": ours_runs, "pytorch": torch_runs}})
    if a.json:
        with open(a.json, "w") as f:
            json.dump({"device": a.device, "images": images, "epochs": epochs, "results": results}, f, indent=1)


if __name__ == "__main__":
    main()
