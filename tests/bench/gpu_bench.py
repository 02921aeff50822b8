#!/usr/bin/env python3
"""GPU Lab against PyTorch on the same GPU, in one go: runs gpulab-bench-gpu (GPU Lab's side) and the
same workloads in PyTorch, and prints both absolute numbers and the ratio for each. PyTorch gets its
best configuration on each workload (the fastest of eager with the default foreach optimizer, eager
with the fused optimizer, and the whole training step captured in a CUDA graph); the table says which.

Usage: python3 tests/bench/gpu_bench.py --bench build/bin/gpulab-bench-gpu [--json OUT.json] [--only regression,fashion,...]
(--only: a comma-separated subset of regression, fashion, gemm, copy, elementwise, memory)

The training loops are medians of five timed runs on both sides. GPU Lab runs each eagerly and with the
whole step captured in a CUDA graph; each is compared with PyTorch's fastest configuration.
"""
import argparse
import json
import statistics
import subprocess
import time

import torch
from torch import nn


def sync():
    torch.cuda.synchronize()


def timed(body, warmup, iterations):
    for _ in range(warmup):
        body()
    sync()
    start = time.perf_counter()
    for _ in range(iterations):
        body()
    sync()
    return time.perf_counter() - start


def mlp(widths):
    layers = []
    for i in range(len(widths) - 1):
        layers.append(nn.Linear(widths[i], widths[i + 1]))
        if i + 2 < len(widths):
            layers.append(nn.ReLU())
    return nn.Sequential(*layers).cuda()


def train_variants(widths, x, y, batch, steps, warmup, classification, make_opt, repeats=5):
    """Seconds for `steps` training steps over GPU-resident (x, y), per PyTorch configuration: the median
    of `repeats` timed runs (GPU Lab's side reports its median of as many), two for the eager
    configurations, which are many times slower and never the best on these loops."""
    loss_fn = nn.CrossEntropyLoss() if classification else nn.MSELoss()
    batches = x.shape[0] // batch
    results = {}
    for config in ("eager (foreach)", "eager (fused)", "CUDA graph (fused, capturable)"):
        torch.manual_seed(0)
        model = mlp(widths)
        fused = config != "eager (foreach)"
        opt = make_opt(model.parameters(), fused, config.startswith("CUDA graph"))
        counter = [0]

        def step():
            b = counter[0] % batches
            counter[0] += 1
            bx, by = x[b * batch:(b + 1) * batch], y[b * batch:(b + 1) * batch]
            loss = loss_fn(model(bx), by)
            opt.zero_grad(set_to_none=False)
            loss.backward()
            opt.step()

        if not config.startswith("CUDA graph"):
            results[config] = statistics.median(timed(step, warmup if r == 0 else 0, steps) for r in range(2))
            continue
        # Capture one step on static input buffers; replay it with the next batch copied in.
        static_x, static_y = x[:batch].clone(), y[:batch].clone()
        s = torch.cuda.Stream()
        s.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(s):
            for _ in range(3):
                loss = loss_fn(model(static_x), static_y)
                opt.zero_grad(set_to_none=False)
                loss.backward()
                opt.step()
        torch.cuda.current_stream().wait_stream(s)
        graph = torch.cuda.CUDAGraph()
        opt.zero_grad(set_to_none=True)  # backward inside the capture then writes fresh gradients each replay
        with torch.cuda.graph(graph):
            static_loss = loss_fn(model(static_x), static_y)
            static_loss.backward()
            opt.step()

        def replay():
            b = counter[0] % batches
            counter[0] += 1
            static_x.copy_(x[b * batch:(b + 1) * batch])
            static_y.copy_(y[b * batch:(b + 1) * batch])
            graph.replay()

        results[config] = statistics.median(timed(replay, warmup if r == 0 else 0, steps) for r in range(repeats))
    return results


def adam(params, fused, capturable):
    if fused:
        return torch.optim.Adam(params, lr=1e-3, fused=True, capturable=capturable)
    return torch.optim.Adam(params, lr=1e-3, foreach=True)


def sgd(params, fused, capturable):
    return torch.optim.SGD(params, lr=1e-4, fused=fused) if fused else torch.optim.SGD(params, lr=1e-4, foreach=True)


def ours(bench, workload, extra=()):
    out = subprocess.run([bench, "--workload", workload, *extra], check=True, capture_output=True, text=True).stdout
    return json.loads(out.strip().splitlines()[-1])


def spread(*runs):
    for o in runs:
        print(f"  GPU Lab {o['workload']}: median {o['seconds']:.4f} s of {o['steps']} steps, runs from {o['seconds_fastest']:.4f} "
              f"to {o['seconds_slowest']:.4f} s" + (f"; {o['graph_nodes']} graph nodes a step" if o["graph_nodes"] else ""))


def best(results):
    config = min(results, key=results.get)
    return config, results[config]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--bench", default="build/bin/gpulab-bench-gpu")
    ap.add_argument("--steps", type=int, default=3000)
    ap.add_argument("--json")
    ap.add_argument("--only", default="regression,fashion,gemm,copy,elementwise,memory",
                    help="comma-separated workloads to run (default: all)")
    a = ap.parse_args()
    only = set(a.only.split(","))
    props = torch.cuda.get_device_properties(0)
    print(f"GPU {props.name}; PyTorch {torch.__version__}, CUDA {torch.version.cuda}, cuDNN {torch.backends.cudnn.version()}")
    rows = []

    def report(name, ours_value, torch_value, unit, higher_is_better, config):
        ratio = ours_value / torch_value if higher_is_better else torch_value / ours_value
        rows.append({"workload": name, "gpulab": ours_value, "pytorch": torch_value, "unit": unit, "ratio": ratio,
                     "pytorch_config": config})
        print(f"{name:<44} GPU Lab {ours_value:>11,.2f} {unit:<8} PyTorch {torch_value:>11,.2f} {unit:<8} "
              f"ratio {ratio:5.2f}x  (PyTorch: {config})")

    print("ratio > 1 means GPU Lab is faster")
    g = torch.Generator().manual_seed(0)
    if "regression" in only:
        regression(a, g, report)
    if "fashion" in only:
        fashion(a, g, report)
    if "gemm" in only:
        gemm(a, report)
    if "copy" in only:
        copies(a, report)
    if "elementwise" in only:
        elementwise(a, report)
    if "memory" in only:
        memory(a)
    if a.json:
        with open(a.json, "w") as f:
            json.dump({"gpu": props.name, "torch": torch.__version__, "rows": rows}, f, indent=1)


def regression(a, g, report):
    """The seed lessons' regression loop."""
    x, y = torch.randn(1024, 16, generator=g).cuda(), torch.randn(1024, 1, generator=g).cuda()
    r = train_variants([16, 64, 1], x, y, 64, a.steps, 200, False, adam)
    for config, seconds in r.items():
        print(f"  PyTorch regression, {config}: {a.steps / seconds:,.0f} steps/s")
    config, seconds = best(r)
    o = ours(a.bench, "regression", ["--steps", str(a.steps)])
    report("regression 16-64-1, Adam, batch 64", o["steps_per_s"], a.steps / seconds, "steps/s", True, config)
    g = ours(a.bench, "regression-graph", ["--steps", str(a.steps)])
    report("regression, GPU Lab's step in a CUDA graph", g["steps_per_s"], a.steps / seconds, "steps/s", True, config)
    spread(o, g)


def fashion(a, g, report):
    """A Fashion-MNIST-shaped epoch, data on the GPU."""
    xf, yf = torch.randn(60000, 784, generator=g).cuda(), torch.randint(0, 10, (60000,), generator=g).cuda()
    r = train_variants([784, 256, 128, 100, 10], xf, yf, 128, 468, 50, True, adam)
    config, seconds = best(r)
    o = ours(a.bench, "fashion")
    report("fashion MLP epoch (784-256-128-100-10), on GPU", o["seconds"], seconds, "s", False, config)
    g = ours(a.bench, "fashion-graph")
    report("fashion epoch, GPU Lab's step in a CUDA graph", g["seconds"], seconds, "s", False, config)
    spread(o, g)


def gemm(a, report):
    """A GEMM-bound MLP, fp32 then TF32."""
    for tf32 in (False, True):
        torch.backends.cuda.matmul.allow_tf32 = tf32
        xg, yg = torch.randn(4096, 4096, device="cuda"), torch.randn(4096, 4096, device="cuda")
        r = train_variants([4096] * 4, xg, yg, 4096, 20, 3, False, sgd)
        config, seconds = best(r)
        name = "gemm-tf32" if tf32 else "gemm-fp32"
        o = ours(a.bench, name)
        torch_tflops = 18.0 * 4096 ** 3 * 20 / seconds / 1e12
        report(f"{name} MLP 3x4096, batch 4096 (TFLOP/s)", o["tflops"], torch_tflops, "TFLOP/s", True, config)
    torch.backends.cuda.matmul.allow_tf32 = False


def copies(a, report):
    """Host -> device copies."""
    n = 64 << 20
    pageable = torch.ones(n)
    pinned = pageable.pin_memory()
    gb = n * 4 / 1e9
    t_pageable = timed(lambda: pageable.to("cuda"), 2, 10)
    t_pinned = timed(lambda: pinned.to("cuda", non_blocking=True), 2, 10)
    o = ours(a.bench, "copy")
    report("H2D 256 MiB from pageable memory", o["pageable_gbps"], 10 * gb / t_pageable, "GB/s", True, "tensor.to('cuda')")
    report("H2D 256 MiB from pinned memory", o["pinned_gbps"], 10 * gb / t_pinned, "GB/s", True, "to('cuda', non_blocking=True)")
    print(f"  cudaMemcpy from the same pinned buffer reaches {o['cudamemcpy_pinned_gbps']:.2f} GB/s "
          f"(GPU Lab pinned copies reach {o['pinned_gbps'] / o['cudamemcpy_pinned_gbps']:.0%} of it)")


def elementwise(a, report):
    """Elementwise against the device's copy bandwidth."""
    n = 64 << 20
    ea, eb = torch.randn(n, device="cuda"), torch.randn(n, device="cuda")
    t_add = timed(lambda: ea + eb, 5, 50)
    o = ours(a.bench, "elementwise")
    report("a + b over 256 MiB tensors (GB/s moved)", o["add_gbps"], 50 * 3 * n * 4 / t_add / 1e9, "GB/s", True, "a + b")
    print(f"  device-to-device cudaMemcpy reaches {o['d2d_copy_gbps']:.0f} GB/s "
          f"(GPU Lab's a + b reaches {o['add_gbps'] / o['d2d_copy_gbps']:.0%} of it)")


def memory(a):
    """The same model and batch after one Adam step, our allocator next to PyTorch's, and our NVML
    reading of our own process next to nvidia-smi's."""
    torch.manual_seed(0)
    model = mlp([784, 256, 128, 100, 10])
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    torch.cuda.empty_cache()
    base_alloc = torch.cuda.memory_allocated()
    xm, ym = torch.randn(128, 784, device="cuda"), torch.randint(0, 10, (128,), device="cuda")
    loss = nn.CrossEntropyLoss()(model(xm), ym)
    opt.zero_grad()
    loss.backward()
    opt.step()
    sync()
    o = ours(a.bench, "memory")
    print(f"memory after one Adam step (784-256-128-100-10, batch 128): GPU Lab allocated {o['allocated'] / 2**20:.2f} MiB, "
          f"reserved {o['reserved'] / 2**20:.2f} MiB; PyTorch allocated {(torch.cuda.memory_allocated() - base_alloc) / 2**20:.2f} MiB "
          f"(model, grads, Adam state, batch), reserved {torch.cuda.memory_reserved() / 2**20:.2f} MiB")
    if o["nvml_process"] >= 0:
        print(f"  GPU Lab's process as NVML reports it (through GPU Lab): {o['nvml_process'] / 2**20:.0f} MiB; "
              f"as nvidia-smi reports it: {o['nvidia_smi_process_mib']} MiB")
    else:
        print(f"  NVML's process view: not available ({o['nvml_reason']})")


if __name__ == "__main__":
    main()
