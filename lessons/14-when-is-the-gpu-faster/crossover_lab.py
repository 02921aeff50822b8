"""The crossover lesson's lab: the same work on the CPU and on a GPU, from tiny to large.

    for n in [8, 16, 32, ..., max_size]:
        for device in ["cpu", "cuda"]:
            A = torch.randn(n, n, device=device); B = torch.randn(n, n, device=device)
            torch.cuda.synchronize()
            t = time.perf_counter()
            for _ in range(k):
                C = A @ B                          # k products queued back to back...
            torch.cuda.synchronize()               # ...and the clock waits for the GPU to finish them
            per_product = (time.perf_counter() - t) / k

With workload "mlp" each call is a training step of a 3-layer MLP n wide on a batch of 64:

    model = nn.Sequential(nn.Linear(n, n), nn.ReLU(), nn.Linear(n, n), nn.ReLU(), nn.Linear(n, n)).to(device)
    loss = F.mse_loss(model(x), y); opt.zero_grad(); loss.backward(); opt.step()

Each call's time is then split three ways with figures measured on each device first: a fixed cost
(what the same call costs at n = 8, where there is next to nothing to compute or move), memory
traffic (the bytes the call must move / the device's bandwidth, measured with a + b) and arithmetic
(its floating-point operations / the device's rate on a large product). The largest part names what
bounds the call: overhead, bandwidth or compute.
"""
import time

import torch
import torch.nn.functional as F
from torch import nn

from lab_helpers import Spread, announce, compare_beyond_spread, compared_times, faster_or_slower, gpu_for, range_text, seconds_on, spread_text, synchronize

SMALLEST, MLP_BATCH = 8, 64


def matmul_workload(n, device):
    """One call, queued on its device, with the FLOPs it computes and the float32 bytes it cannot avoid moving."""
    A, B = torch.randn(n, n).to(device), torch.randn(n, n).to(device)
    return (lambda: A @ B), 2.0 * n**3, 3.0 * n * n * 4


def mlp_workload(n, device):
    model = nn.Sequential(nn.Linear(n, n), nn.ReLU(), nn.Linear(n, n), nn.ReLU(), nn.Linear(n, n)).to(device)
    optimizer = torch.optim.SGD(model.parameters(), lr=1e-4)
    x, y = torch.randn(MLP_BATCH, n).to(device), torch.zeros(MLP_BATCH, n, device=device)

    def step():
        loss = F.mse_loss(model(x), y)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()

    # Forward: a product a layer; backward: every layer's weight gradient and the two upper ones' input
    # gradient: 8 products of batch x n x n. Bytes: six passes over the weights (read forward and
    # backward, the gradient written, both read by SGD, the weight written), the activations twice each way.
    return step, 2.0 * MLP_BATCH * n * n * 8, (6.0 * 3 * n * n + 4.0 * 3 * MLP_BATCH * n) * 4


def seconds_per_call(calls, budget):
    """Seconds per call of each (device, call), taking turns: one of each untimed first (first uses pay),
    then batches of k calls queued back to back, k sized so a batch takes about 2 ms, the device waited
    for after each -- at least 3 batches each and as many more as fit in `budget` seconds per call (15
    at most). A call longer than the budget is timed once. Queued back to back, a GPU's calls overlap
    the host's launching of the next: the rate a loop of such calls runs at, not one call's latency."""
    batch, per_call, once = [], [], False
    for device, call in calls:
        call()
        synchronize(device)
        one = max(seconds_on(device, call), 1e-7)
        once = once or one >= budget
        per_call.append([one])
        batch.append(int(min(20000, max(1, 0.002 / one))))
    if not once:
        per_call = [[] for _ in calls]
        begin = time.perf_counter()
        while len(per_call[0]) < 3 or (time.perf_counter() - begin < budget * len(calls) and len(per_call[0]) < 15):
            for (device, call), k, times in zip(calls, batch, per_call):
                times.append(seconds_on(device, lambda: [call() for _ in range(k)]) / k)
    return [Spread.of(t) for t in per_call]


def measure_figures(device, budget):
    """A device's own figures: the FLOP/s of a large float32 product and the bytes/s of a + b over 16 M floats."""
    real_gpu = device.type == "cuda" and not torch.cuda.is_emulated(device)
    product, flops, _ = matmul_workload(4096 if real_gpu else 1024, device)
    elements = 16 << 20
    a, b = torch.ones(elements, device=device), torch.ones(elements, device=device)
    t = seconds_per_call([(device, product), (device, lambda: a + b)], budget)
    return dict(flops=flops / t[0].median, bytes=3.0 * 4 * elements / t[1].median)


def split(measured, fixed, bytes_, flops, figures):
    s = dict(measured=measured, fixed=fixed, memory=bytes_ / figures["bytes"], arithmetic=flops / figures["flops"])
    s["modelled"] = s["fixed"] + s["memory"] + s["arithmetic"]
    s["bound"] = ("overhead" if s["fixed"] >= max(s["memory"], s["arithmetic"]) else
                  "bandwidth" if s["memory"] >= s["arithmetic"] else "compute")
    s["arithmetic_of_measured"] = min(100.0, 100.0 * s["arithmetic"] / measured)  # arithmetic at full rate, as a share of the time measured
    return s


def share(s, part):
    return 100.0 * s[part] / s["modelled"]


def refuse_what_cannot_fit(kind, largest, gpu):
    """Its tensors (and an MLP's gradients and activations) at most half of what either device has free."""
    figures_n = 1024.0 if torch.cuda.is_emulated(gpu) else 4096.0  # measure_figures' tensors, alive together
    need = 3.0 * 4 * ((16 << 20) + figures_n**2) + (3.0 * largest**2 * 4 if kind == "matmul" else
                                                    (3.0 * 2 * largest**2 + 8.0 * MLP_BATCH * largest) * 4)
    for device in (torch.device("cpu"), gpu):
        free = lab.memory_stats(device)["free_bytes"]
        if need > 0.5 * free:
            raise ValueError(f"n = {largest}: the {kind} workload needs {need / 2**20:.4g} MiB on {device}, more than half of the "
                             f"{free / 2**20:.4g} MiB it has free; choose a smaller max_size or size")


def declare_views(what, gpu_name, gpu, kind):
    size_axis = ("n (an n x n product)" if kind == "matmul" else "n (the MLP's width)", "", True)
    lab.view("time", f"Time per {what}: CPU and {gpu_name}", x=[size_axis], y=(f"time per {what}", "ms", True),
             series=[("cpu", "CPU"), ("gpu", torch._C._device_label(gpu))],
             note="Each point: the median over batches of calls queued back to back, the device waited for after each batch. A crossing "
                  "of the lines is not yet a win: the crossover marker is where the GPU is clearly faster, its batches apart from the "
                  "CPU's by more than their spread (the table's range), there and at every larger size.")
    lab.view("speedup", f"{gpu_name} speed-up over the CPU", x=[size_axis], y=("speed-up (CPU time / GPU time)", "x", True),
             series=[("speedup", f"{gpu_name} over the CPU")],
             note=f"Above 1: the {gpu_name}'s median was the faster at that size -- clearly faster only where the crossover marker says "
                  "so (the table gives each side's spread).")
    lab.level("speedup", "equal speed", 1.0)
    for lane, name in (("cpu", "CPU"), ("gpu", gpu_name)):
        lab.view(f"split_{lane}", f"Where a {what}'s time goes: {name}", kind="stacked", x=[size_axis], y=("share of the modelled time", "%"),
                 y_from_zero=True, series=[("fixed", "fixed cost (overhead)"), ("memory", "memory traffic (bandwidth)"),
                                           ("arithmetic", "arithmetic (compute)")],
                 note=f"Fixed: the {what} at n = 8. Memory: its bytes / the measured bandwidth. Arithmetic: its FLOPs / the measured rate "
                      f"of a large product. The largest part bounds the {what}.")
    lab.view("where", "Overhead-, bandwidth- or compute-bound", kind="table",
             columns=["n", "device", ("measured", "ms"), ("range", "ms"), ("fixed", "ms"), ("memory traffic", "ms"), ("arithmetic", "ms"),
                      "bound", ("modelled / measured", "x")],
             note="Measured: the median batch's time per call, the two devices taking turns batch after batch; range: the slowest and "
                  "the fastest batch. The three parts are estimates from each device's own figures; their sum against the measured time "
                  "says how well three numbers describe the device. Below 1: the device ran below its figures (small matrices do not "
                  "reach a BLAS kernel's peak). Above 1: the figures themselves are noisy estimates -- the fixed cost is one size's time, "
                  "the rates one run's -- or calls queued back to back overlapped their parts.")


def sweep(kind, sizes, sides, budget):
    """The sweep, smallest first: the smallest size's time is each device's fixed cost."""
    torch.manual_seed(7)
    make = matmul_workload if kind == "matmul" else mlp_workload
    for i, n in enumerate(sizes):
        work = [make(n, s["device"]) for s in sides]
        timed = seconds_per_call([(s["device"], w[0]) for s, w in zip(sides, work)], budget)
        for s, (_, flops, bytes_), t in zip(sides, work, timed):
            s["seconds"][n] = t
            if i == 0:
                s["fixed"] = t.median
            sp = s["splits"][n] = split(t.median, s["fixed"], bytes_, flops, s["figures"])
            lane = s["lane"]
            lab.point("time", lane, [n], t.median * 1000)
            for part in ("fixed", "memory", "arithmetic"):
                lab.point(f"split_{lane}", part, [n], share(sp, part))
            lab.row("where", n, s["name"], t.median * 1000, range_text(t, 1e3), sp["fixed"] * 1000, sp["memory"] * 1000,
                    sp["arithmetic"] * 1000, sp["bound"], sp["modelled"] / t.median)
        lab.point("speedup", "speedup", [n], timed[0].median / timed[1].median)
        lab.progress(i + 2, len(sizes) + 1, f"n = {n}")


def measurements(sides, sizes, crossover, speedup, your_size):
    largest = sizes[-1]
    lab.measurement("crossover found", 1 if crossover else 0)
    if crossover:
        lab.measurement("crossover size", crossover)  # none: no size to name
    lab.measurement("GPU speed-up at the smallest size", speedup(sizes[0]), "x")
    lab.measurement("GPU speed-up at the largest size", speedup(largest), "x")
    lab.measurement("GPU speed-up at your size", speedup(your_size), "x")
    for s in sides:  # the same figures for each side, named "..., CPU" and "..., GPU"
        of = ", CPU" if s["lane"] == "cpu" else ", GPU"
        smallest, large = s["splits"][sizes[0]], s["splits"][largest]
        lab.measurement("fixed cost per call" + of, s["fixed"] * 1e6, "us")
        lab.measurement("arithmetic rate" + of, s["figures"]["flops"] / 1e9, "GFLOP/s")
        lab.measurement("memory bandwidth" + of, s["figures"]["bytes"] / 1e9, "GB/s")
        lab.measurement("fixed-cost share at the smallest size" + of, share(smallest, "fixed"), "%")
        lab.measurement("arithmetic share at the largest size" + of, share(large, "arithmetic"), "%")
        lab.measurement("fixed-cost share at the largest size" + of, share(large, "fixed"), "%")
        lab.measurement("arithmetic share of the measured time at your size" + of, s["splits"][your_size]["arithmetic_of_measured"], "%")


def summary(sides, sizes, crossover, speedup, your_size, what, gpu_name, emulated):
    cpu, gpu = sides
    largest = sizes[-1]

    def clearly(n):
        return compare_beyond_spread(gpu["seconds"][n], cpu["seconds"][n])  # -1: the GPU clearly faster

    text = (f"At n = {your_size} the {gpu_name} {compared_times(gpu['seconds'][your_size], cpu['seconds'][your_size], 'the CPU')}; its {what} "
            f"is {gpu['splits'][your_size]['bound']}-bound (arithmetic at full rate: {gpu['splits'][your_size]['arithmetic_of_measured']:.0f}% "
            f"of the measured time), the CPU's {cpu['splits'][your_size]['bound']}-bound. ")
    if crossover:
        gpu_at, cpu_at = gpu["seconds"][crossover].scaled(1e3), cpu["seconds"][crossover].scaled(1e3)
        text += (f"The {gpu_name} is clearly faster from n = {crossover} on: there and at every larger size all its batches of calls beat "
                 f"all the CPU's, by more than either device's spread (at n = {crossover}: {spread_text(gpu_at, 'ms')} against "
                 f"{spread_text(cpu_at, 'ms')}, {faster_or_slower(speedup(crossover))}; {faster_or_slower(speedup(largest))} at n = {largest}).")
        if emulated:
            text += " The emulated GPU runs on your CPU: a crossover here is its thread overlapping the host's work, or the machine's noise, not a GPU's speed."
        return text
    at_largest = (faster_or_slower(speedup(largest)) if clearly(largest) else "no clear difference") + f" at n = {largest}"
    faster = ", ".join(f"{n} ({speedup(n):.2f}x)" for n in sizes if clearly(n) < 0)
    text += (f"The {gpu_name} is clearly faster (every batch of calls faster than every one of the CPU's, by more than either's spread) at no "
             f"size up to n = {largest} ({at_largest})" if not faster else
             f"The {gpu_name} was clearly faster at n = {faster}, but not at every larger size ({at_largest}): no clear crossover")
    return text + (": it runs on your CPU, so differences between the two are the machine's noise and threads, not a GPU's." if emulated
                   else ": try a larger max_size.")


def run(workload="matmul", max_size=1024, size=16, gpu="cuda", budget=0.15):
    if gpu != "auto" and torch.device(gpu).type != "cuda":
        raise ValueError(f"gpu must be a CUDA device (cuda or cuda:N), got '{gpu}': the lab compares it with the CPU")
    gpu = gpu_for(gpu, "the lab compares a GPU with the CPU")
    announce(gpu)
    emulated = torch.cuda.is_emulated(gpu)
    sizes = sorted({SMALLEST * 2**k for k in range(20) if SMALLEST * 2**k <= max_size} | {size})
    refuse_what_cannot_fit(workload, sizes[-1], gpu)
    gpu_name = "emulated GPU" if emulated else "GPU"
    sides = [dict(device=torch.device("cpu"), name="CPU", lane="cpu", seconds={}, splits={}),
             dict(device=gpu, name=gpu_name, lane="gpu", seconds={}, splits={})]
    lab.progress(0, len(sizes) + 1, "measuring each device's arithmetic and bandwidth")
    for s in sides:
        s["figures"] = measure_figures(s["device"], budget)
        print(f"{s['name']} ({torch._C._device_label(s['device'])}): arithmetic {s['figures']['flops'] / 1e9:.4g} GFLOP/s on a large float32 "
              f"product, memory {s['figures']['bytes'] / 1e9:.4g} GB/s on a + b.")
    if emulated:
        lab.message(f"cuda:{gpu.index} is the emulated GPU \u2014 runs on your CPU: its kernels are the CPU's, run by another thread of your CPU, so "
                    "its arithmetic and bandwidth agree with the CPU's within measurement noise. At best it overlaps one op's kernel with the "
                    "host preparing the next: a crossover found here would be that overlap or noise, not a GPU's speed. What it shows truly "
                    "is what every GPU adds to each call, a queue between the host and the device. On a real GPU the arithmetic and memory "
                    "parts shrink by the GPU's figures; the fixed part does not.", level="warning")
    what = "product" if workload == "matmul" else "step"
    declare_views(what, gpu_name, gpu, workload)
    sweep(workload, sizes, sides, budget)
    # The crossover: the smallest n from which the GPU is clearly faster at every larger size -- every
    # batch faster than every one of the CPU's, the medians further apart than either range is wide.
    crossover = 0
    for n in reversed(sizes):
        if compare_beyond_spread(sides[1]["seconds"][n], sides[0]["seconds"][n]) >= 0:
            break
        crossover = n

    def speedup(n):
        return sides[0]["splits"][n]["measured"] / sides[1]["splits"][n]["measured"]

    for view in ("time", "speedup"):
        if crossover:
            lab.marker(view, [crossover], f"crossover: the {gpu_name} is clearly faster from n = {crossover}")
        lab.marker(view, [size], f"your size: {size}")
    measurements(sides, sizes, crossover, speedup, size)
    print(summary(sides, sizes, crossover, speedup, size, what, gpu_name, emulated))
