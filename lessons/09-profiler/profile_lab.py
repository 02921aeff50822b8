"""The profiler lesson's lab: torch.profiler on a training step, as PyTorch's profiler recipe runs it.

    for _ in range(warmup): train_step()         # the first steps pay one-off costs: not profiled
    with torch.profiler.profile(record_shapes=True) as prof:
        for _ in range(steps):
            train_step()
            prof.step()                          # the trace marks each step: ProfilerStep#N
    print(prof.key_averages().table(sort_by="self_cpu_time_total", row_limit=15))
    prof.export_chrome_trace("trace.json")       # open in https://ui.perfetto.dev

Then how much of the step its matrix products need: each product of the step timed alone at its own
shape, against the step's time -- a compute-bound step spends most of it there, an overhead-bound
one in the fixed cost of many small ops.
"""
import os
import sys
import time

import torch
import torch.nn.functional as F
from torch.utils.data import DataLoader

from lab_helpers import MLP, cache_folder, parse_widths, pick_device, regression_set, seconds_on, synchronize

# What kind of work an op is, by its name: the lesson's "compute-bound or overhead-bound?" in numbers.
KINDS = ["matrix products (linear, mm, conv and their gradients)", "elementwise, reductions, losses", "autograd bookkeeping",
         "optimizer (step, zero_grad)", "other (copies, new tensors)"]
PRODUCT_NAMES = ("aten::linear", "aten::mm", "aten::matmul", "aten::bmm", "aten::conv2d", "AddmmBackward", "MmBackward",
                 "ConvolutionBackward", "LinearBackward", "MatmulBackward")


def kind_of(name):
    if name.startswith("Optimizer."):
        return KINDS[3]
    if any(p in name for p in PRODUCT_NAMES):
        return KINDS[0]
    if "AccumulateGrad" in name or name.startswith("autograd::"):
        return KINDS[2]
    if any(p in name for p in ("aten::to", "aten::full", "aten::copy")):
        return KINDS[4]
    return KINDS[1]


# key_averages()'s sort keys: PyTorch 2 names a GPU's columns "device", and still takes "cuda".
SORT_KEYS = {"self_cpu_time_total": "self_cpu_time_total", "cpu_time_total": "cpu_time_total", "count": "count",
             "self_cuda_time_total": "self_device_time_total", "cuda_time_total": "device_time_total"}


def make_training_step(dataset, hidden, batch_size, device, seed):
    """The training lesson's loop body -- forward, loss, zero_grad, backward, step -- on the next batch."""
    classification = dataset == "fashion-mnist"
    train = lab.fashion_mnist(train=True) if classification else regression_set(4096, seed)
    batch_size = min(batch_size, len(train))
    torch.manual_seed(seed)
    model = MLP(train[0][0].numel(), parse_widths(hidden), 10 if classification else 1).to(device)
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
    loader = DataLoader(train, batch_size=batch_size, shuffle=True, drop_last=True)
    batches = iter(loader)

    def train_step():
        nonlocal batches
        try:
            x, y = next(batches)
        except StopIteration:
            batches = iter(loader)
            x, y = next(batches)
        x, y = x.to(device), y.to(device)
        output = model(x)
        loss = F.cross_entropy(output, y) if classification else F.mse_loss(output, y)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()

    return model, train_step, batch_size


def profile_steps(train_step, device, warmup, steps, record_shapes):
    """Warm-up steps unprofiled, then `steps` profiled ones; the profile and its wall time in us."""
    for _ in range(warmup):
        train_step()
    synchronize(device)
    with torch.profiler.profile(record_shapes=record_shapes) as prof:
        start = time.perf_counter()
        for i in range(steps):
            train_step()
            synchronize(device)
            prof.step()  # the trace's ProfilerStep#N
            lab.progress(i + 1, steps, f"profiled step {i + 1}")
        wall_us = (time.perf_counter() - start) * 1e6
    return prof, wall_us


def table_note(device, sort_by):
    note = ("Self: the op's own time; total: with the ops it called (aten::linear's total includes nothing it did not do "
            "itself here, a backward node's includes the ops its gradient used). ")
    if device.type == "cuda":
        emulated = torch.cuda.is_emulated(device)
        note += (f"On {'the emulated GPU' if emulated else 'a GPU'} the CPU columns are the time to launch each op's kernels; the "
                 "CUDA columns, the time the device's stream spent on them (two events per op).")
        if emulated:
            note += (" The emulated GPU's stream is a thread of your CPU: an op that finds it asleep (a copy after the host "
                     "waited) also counts its wake-up, tens of microseconds a GPU does not have -- these columns are no GPU's times.")
    elif "cuda" in sort_by:
        note += "No op ran on a CUDA device: there is no CUDA time to sort by (choose device cuda)."
    return note


def show_op_table(averages, device, sort_by, row_limit):
    """The op table, as key_averages().table() prints it (sorted, cut to row_limit), as a view and printed."""
    on_device = device.type == "cuda"
    columns = ["name", ("self CPU", "%"), ("self CPU", "us"), ("CPU total", "us"), ("CPU time avg", "us")]
    if on_device:
        columns += [("self CUDA", "%"), ("self CUDA", "us"), ("CUDA total", "us")]
    lab.view("ops", f"key_averages(), sorted by {sort_by}", kind="table", columns=columns + ["calls"], note=table_note(device, sort_by))
    self_total = sum(e.self_cpu_time_total for e in averages)
    self_device_total = sum(e.self_device_time_total for e in averages)

    def share(part, whole):
        return 100.0 * part / whole if whole > 0 else 0.0

    key = SORT_KEYS[sort_by]
    for e in sorted(averages, key=lambda e: getattr(e, key), reverse=True)[:row_limit]:
        cells = [e.key, share(e.self_cpu_time_total, self_total), float(e.self_cpu_time_total), float(e.cpu_time_total), float(e.cpu_time)]
        if on_device:
            cells += [share(e.self_device_time_total, self_device_total), float(e.self_device_time_total), float(e.device_time_total)]
        lab.row("ops", *cells, e.count)
    print(f'prof.key_averages().table(sort_by="{sort_by}"):\n' + averages.table(sort_by=sort_by, row_limit=row_limit))
    return self_total


def show_time_by_kind(averages, self_total):
    """Where the time goes, by kind of op (self times, so nothing counts twice); the products' share."""
    lab.view("kinds", "Self CPU time by kind of op", kind="bars", y=("share of self CPU time", "%"), y_from_zero=True,
             series=[("share", "share of the profiled steps' self CPU time")],
             note="A step whose time is mostly matrix products is compute-bound: a faster processor for them (a GPU) speeds it "
                  "up. A step whose time is spread over many small ops is overhead-bound: each op's fixed cost dominates, and "
                  "a GPU adds a kernel launch to each.")
    by_kind = dict.fromkeys(KINDS, 0.0)
    for e in averages:
        by_kind[kind_of(e.key)] += e.self_cpu_time_total
    for kind, spent in by_kind.items():
        lab.bar("kinds", "share", kind, 100.0 * spent / self_total if self_total > 0 else 0.0)
    return 100.0 * by_kind[KINDS[0]] / self_total if self_total > 0 else 0.0


def write_trace(prof, trace_file):
    """The trace, for Perfetto: every profiled step, op by op. One that cannot be written is said, and
    the run goes on: its measurements are not lost."""
    path = trace_file
    try:
        path = os.path.abspath(trace_file) if trace_file else os.path.join(cache_folder(), "profile-trace.json")
        prof.export_chrome_trace(path)
    except (OSError, RuntimeError) as e:
        print(f"{e} -- the trace is not written; the measurements below are.", file=sys.stderr)
        return
    print(f'prof.export_chrome_trace("{path}"): open it in https://ui.perfetto.dev (or chrome://tracing) to see every '
          "profiled step, op by op.")


def best_of_5(device, product):
    """Seconds a call of `product` takes: eight calls back to back between two synchronisations (a
    GPU's wait for its queue paid once, not per product), the best of five such rounds."""
    product()
    return min(seconds_on(device, lambda: [product() for _ in range(8)]) for _ in range(5)) / 8


def time_the_products(model, batch_size, device):
    """Each matrix product of the step timed alone at its own shape -- forward x W^T, the weight
    gradient g^T x, and the input gradient g W except in the first layer (the batch needs none) --
    and a large product's rate beside them. Their sum is the least time the step's products take
    here; the rest of the step is everything else."""
    flops, seconds = 0.0, 0.0
    torch.manual_seed(1)
    with torch.no_grad():
        for i, layer in enumerate(model.linears()):
            w = layer.weight.detach()
            out, inp = w.shape
            x = torch.randn(batch_size, inp).to(device)
            grad = torch.randn(batch_size, out).to(device)
            seconds += best_of_5(device, lambda: F.linear(x, w))
            seconds += best_of_5(device, lambda: grad.t() @ x)
            if i > 0:
                seconds += best_of_5(device, lambda: grad @ w)
            flops += (4.0 if i == 0 else 6.0) * batch_size * w.numel()
        a = torch.randn(1024, 1024).to(device)
        b = torch.randn(1024, 1024).to(device)
        large_rate = 2.0 * 1024**3 / best_of_5(device, lambda: a @ b)
    return flops, seconds, large_rate


def report(averages, device, steps, wall_us, self_total, products_share, flops, product_seconds, large_rate):
    step_seconds = wall_us / steps / 1e6
    alone_share = 100.0 * min(1.0, product_seconds / step_seconds)
    rate = flops / product_seconds
    top = max(averages, key=lambda e: e.self_cpu_time_total)
    top_share = 100.0 * top.self_cpu_time_total / self_total if self_total > 0 else 0.0
    ops_per_step = sum(e.count for e in averages) / steps
    lab.measurement("profiled step time", step_seconds * 1000, "ms")
    lab.measurement("ops per step", ops_per_step)
    lab.measurement("matrix products: share of self CPU time", products_share, "%")
    lab.measurement("matrix-product GFLOP per step", flops / 1e9, "GFLOP")
    lab.measurement("matrix products alone: share of the step", alone_share, "%")
    lab.measurement("matrix-product rate at the step's shapes", rate / 1e9, "GFLOP/s")
    lab.measurement("peak matrix-product rate", large_rate / 1e9, "GFLOP/s")
    lab.measurement("profiler coverage of the wall time", 100.0 * self_total / wall_us if wall_us > 0 else 0.0, "%")
    lab.measurement("most expensive op: share of self CPU time", top_share, "%")
    lab.record("profile", step_ms=step_seconds * 1000, ops_per_step=ops_per_step, products_share=products_share,
               products_alone_share=alone_share, most_expensive=top.key, device=str(device))
    verdict = ("compute-bound -- most of its time is its products' own work, which a faster processor for them (a GPU) speeds up."
               if alone_share >= 50 else
               "overhead-bound -- most of its time goes outside its products' own work, to the fixed cost of its many small ops, "
               "which a GPU would not shrink (each op becomes a kernel launch of a few microseconds).")
    print(f"The most expensive op by its own time: {top.key} ({top_share:.1f}% of the self CPU time). A step took "
          f"{step_seconds * 1000:.3f} ms for {ops_per_step:.0f} ops. Its matrix products ({flops / 1e9:.3g} GFLOP), each timed alone "
          f"at its own shape, take {product_seconds * 1000:.3g} ms: {alone_share:.1f}% of the step, so it is {verdict} They run at "
          f"{rate / 1e9:.1f} GFLOP/s here, {100.0 * rate / large_rate:.0f}% of a 1024 x 1024 product's {large_rate / 1e9:.1f} GFLOP/s"
          + (": products this small (or this thin) stay far from a large product's rate." if rate < 0.5 * large_rate else "."))


def run(dataset="regression", hidden="64", batch_size=64, warmup=3, steps=5, sort_by="self_cpu_time_total", row_limit=15,
        record_shapes=True, trace=True, trace_file="", device="auto", seed=0):
    device = pick_device(device)
    model, train_step, batch_size = make_training_step(dataset, hidden, batch_size, device, seed)
    prof, wall_us = profile_steps(train_step, device, warmup, steps, record_shapes)
    averages = prof.key_averages()
    self_total = show_op_table(averages, device, sort_by, row_limit)
    products_share = show_time_by_kind(averages, self_total)
    if trace:
        write_trace(prof, trace_file)
    flops, product_seconds, large_rate = time_the_products(model, batch_size, device)
    report(averages, device, steps, wall_us, self_total, products_share, flops, product_seconds, large_rate)
