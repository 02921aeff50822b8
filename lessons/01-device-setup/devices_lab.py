"""What devices this machine has, which one the lesson's code uses and why -- and a measured reason to
care: the same matrix product timed on the CPU and, where one is usable, on the GPU.

GPU Lab runs this file as it is, in a Python session of its own, with `import torch` giving its
engine. `lab` (GPU Lab's) draws the run's views: lab.view declares a table or a chart, lab.row and
lab.bar fill it, lab.measurement reports a number a challenge can grade. Everything else is PyTorch.
"""
import os
import time

import torch


def cpu_row():
    """The CPU is a device too: cpu, every tensor's home unless it is moved. Its name, cores and memory
    as the operating system reports them (Linux's /proc/cpuinfo and sysconf)."""
    name = ""
    try:
        with open("/proc/cpuinfo") as info:
            name = next((line.split(":", 1)[1].strip() for line in info if line.startswith("model name")), "")
    except OSError:
        pass
    cores = os.cpu_count() or 1
    name = f"{name or 'this machine’s CPU'}, {cores} cores"
    try:
        page = os.sysconf("SC_PAGE_SIZE")
        total, free = os.sysconf("SC_PHYS_PAGES") * page, os.sysconf("SC_AVPHYS_PAGES") * page
    except (ValueError, OSError, AttributeError):
        total = free = "—"
    return "cpu", name, "—", "—", total, free


EMULATED_NOTE = ("cuda:0 (emulated) is GPU Lab's emulated GPU: tensors in memory of its own, computed by your CPU. The lesson's "
                 "code cells use it as cuda:0 while 'Code runs on' above the lesson says so (the default without a GPU); "
                 "to turn it off choose 'this machine as it is' there (outside the window: GPULAB_EMULATED_GPU=0). "
                 "This run shows the machine as it is, so it does not use it.")


def list_devices():
    """Step 1: what torch.cuda reports, as a table -- or why there is no GPU. The CPU is always one of
    the devices; without a usable GPU, GPU Lab's emulated GPU stands in for one (labelled, never timed)."""
    available = torch.cuda.is_available()
    print(f"torch.cuda.is_available() -> {available}")
    real = torch._C._cuda_real_device_count()
    why = "" if real else f"No usable GPU: {torch._C._cuda_unavailable_reason()}. Everything here runs on the CPU."
    if why:
        print(why)
    print(f"CUDA_VISIBLE_DEVICES={os.environ.get('CUDA_VISIBLE_DEVICES', '(not set)')}")
    emulated_here = available and any(torch.cuda.is_emulated(i) for i in range(torch.cuda.device_count()))
    lab.view("devices", "Devices", kind="table",
             columns=["device", "name", "compute capability", "SMs", ("total memory", "bytes"), ("free memory", "bytes")],
             note=why + ("" if real or emulated_here else " " + EMULATED_NOTE))
    lab.row("devices", *cpu_row())
    for i in range(torch.cuda.device_count() if available else 0):
        p = torch.cuda.get_device_properties(i)
        free, total = torch.cuda.mem_get_info(i)
        if torch.cuda.is_emulated(i):
            # Not a GPU: no compute capability, no SMs -- its memory is a budget of this machine's.
            lab.row("devices", f"cuda:{i} (emulated)", p.name, "—", "—", total, free)
        else:
            lab.row("devices", f"cuda:{i}", p.name, f"{p.major}.{p.minor}", p.multi_processor_count, total, free)
    if not real and not emulated_here:
        lab.row("devices", "cuda:0 (emulated)", f"GPU Lab's {torch._C._emulated_gpu_phrase()} (code cells only)",
                "—", "—", "—", "—")
    if not available:
        print("GPU Lab's code cells can still use cuda:0: choose 'emulated GPU as cuda:0' above the lesson. Its tensors "
              "live in memory of their own, computed by the CPU: the same-device rule and out-of-memory errors are "
              "real there, its speed is not, so it is never timed.")


def pick_device():
    """Step 2: the line every script starts with."""
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    lab.device(device)
    print(f"device = {device}")
    return device


ROUNDS = 5  # a timing is repeated: one round can be slowed by whatever else the machine does


def seconds_per_matmul(device, n, repeats):
    """Step 3: one n x n product, a @ a, timed after a warm-up: ROUNDS rounds of `repeats` products,
    seconds per product in each round. A GPU runs its work asynchronously, so the clock is read only
    after torch.cuda.synchronize()."""
    a = torch.randn(n, n).to(device)
    a @ a  # warm-up: the first product pays for threads, handles and the choice of kernel
    if device.type == "cuda":
        torch.cuda.synchronize()
    rounds = []
    for _ in range(ROUNDS):
        start = time.perf_counter()
        for _ in range(repeats):
            a @ a
        if device.type == "cuda":
            torch.cuda.synchronize()
        rounds.append((time.perf_counter() - start) / repeats)
    return sorted(rounds)


def verdict(cpu, gpu, device):
    """Step 4: a speed-up is claimed only when the spreads do not overlap."""
    if max(gpu) < min(cpu):
        return f"{device} is faster: its slowest round beat the CPU's fastest."
    if max(cpu) < min(gpu):
        return f"The CPU is faster at this size: its slowest round beat {device}'s fastest."
    return "No clear difference: the rounds' spreads overlap."


def run(size=512, repeats=10, seed=0):
    list_devices()
    device = pick_device()
    timed = ["cpu"] + ([device] if device.type == "cuda" else [])
    lab.view("matmul", "Matrix product speed", kind="bars", y=("speed", "GFLOP/s"), series=[("gflops", "GFLOP/s")],
             y_from_zero=True,
             note="" if device.type == "cuda" else "Only the CPU is timed: there is no GPU here.")
    lab.view("rounds", "Each timing's rounds", kind="table",
             columns=["device", "n", ("median", "GFLOP/s"), ("slowest round", "GFLOP/s"), ("fastest round", "GFLOP/s")])
    flops = 2 * size**3
    torch.manual_seed(seed)
    seconds = {}
    for i, d in enumerate(timed):
        lab.progress(i, len(timed), f"timing matmul on {d}")
        seconds[str(d)] = rounds = seconds_per_matmul(torch.device(d), size, repeats)
        rate = flops / rounds[len(rounds) // 2] / 1e9  # the median round
        lab.bar("matmul", "gflops", f"{d}, n = {size}", rate)  # each bar names its size: a reference run's may differ
        lab.row("rounds", str(d), size, rate, flops / rounds[-1] / 1e9, flops / rounds[0] / 1e9)
        lab.measurement(f"matmul on {d}", rate, "GFLOP/s")
    if device.type == "cuda":
        cpu, gpu = seconds["cpu"], seconds[str(device)]
        lab.measurement(f"speed-up of {device} over cpu", cpu[len(cpu) // 2] / gpu[len(gpu) // 2], "x")
        print(verdict(cpu, gpu, device))
    lab.progress(1, 1)
    lab.record("done", device=str(device))
