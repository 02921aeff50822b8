"""The syncs lesson's lab: what reading values back and copying in small pieces cost. The seed
lessons' regression loop (16 inputs, Adam, batches of 64; 256 hidden units by default), its data
already on the device:

    for step in range(steps):
        loss = F.mse_loss(model(x[b]), y[b])
        optimizer.zero_grad(); loss.backward(); optimizer.step()
        total += loss.item()                          # 1. read every step: the host waits each time

        running += loss.detach()                      # 2. kept on the device...
        if (step + 1) % read_every == 0:
            total += running.item(); running.zero_()  #    ...and read every read_every steps

    xb = torch.empty(64, 16, device=device)           # 3. a batch copied one sample at a time
    for i in range(64):
        xb[i] = x_cpu[start + i].to(device)
    xb = x_cpu[start:start + 64].to(device)           # 4. the same batch in one copy

On a GPU ops are queued on the device's stream and return at once, so the host can prepare the next
step while the GPU runs this one. .item(), .cpu(), print(tensor) -- anything that needs a value on the
host -- waits until the queue has run dry, and the two take turns instead of working side by side.
Every copy has a fixed cost too, so 64 copies of one row cost far more than one copy of 64 rows. On
the CPU every op runs before it returns: there is nothing to wait for, and the lab measures that too.
"""
import time

import torch
import torch.nn.functional as F

from lab_helpers import (MLP, Spread, compared_times, is_emulated, parse_widths, pick_device, range_text, regression_set,
                         spread_text, synchronize)

BATCH, SAMPLES = 64, 4096


def train_loop(x, y, steps, read_every, seed, hidden, device):
    """The loop above, from the same initial weights and the same batches whatever read_every is, so
    every run computes the same numbers: only when they are read differs. Returns the loop's seconds
    (until the device finished), the host's seconds inside .item(), the reads, the mean loss and the
    share of the loop the device ran kernels (None where it cannot say)."""
    torch.manual_seed(seed)
    model = MLP(16, hidden, 1).to(device)
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
    batches = x.shape[0] // BATCH
    running = torch.zeros((), device=device)
    total, waited, reads = 0.0, 0.0, 0
    synchronize(device)
    busy_before = lab.busy_seconds(device)
    start = time.perf_counter()
    for step in range(steps):
        b = step % batches
        loss = F.mse_loss(model(x[b * BATCH:(b + 1) * BATCH]), y[b * BATCH:(b + 1) * BATCH])
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        to_read = loss
        if read_every != 1:
            running += loss.detach()  # one more op on the queue, no wait
            if (step + 1) % read_every != 0 and step + 1 != steps:
                continue
            to_read = running
        t = time.perf_counter()
        total += to_read.item()  # the host waits for every kernel queued so far
        waited += time.perf_counter() - t
        reads += 1
        if read_every != 1:
            running.zero_()
    synchronize(device)
    seconds = time.perf_counter() - start
    busy = None if busy_before is None else (lab.busy_seconds(device) - busy_before) / seconds
    return dict(seconds=seconds, waited=waited, reads=reads, mean_loss=total / steps, busy=busy)


def sweep_reads(x, y, steps, read_every, repeats, seed, hidden, device):
    """The loop with the loss read every N steps, for N = 1, 4, 16, ... and the learner's N, interleaved
    -- every N once, then every N again -- so that a busy moment of the machine lands on no N in
    particular. Each N's median run stands for it; the spread of its times says how far to trust it."""
    sweep = sorted({4**k for k in range(5) if 4**k < steps} | {read_every})
    train_loop(x, y, min(steps, 100), 1, seed, hidden, device)  # warm-up: first-use costs
    runs = {n: [] for n in sweep}
    for rep in range(repeats):
        for i, n in enumerate(sweep):
            runs[n].append(train_loop(x, y, steps, n, seed, hidden, device))
            lab.progress(rep * len(sweep) + i + 1, repeats * len(sweep), f"loss read every {n} step{'s' if n > 1 else ''}")
    typical, seconds = {}, {}
    for n, rs in runs.items():
        seconds[n] = Spread.of([r["seconds"] for r in rs])
        typical[n] = dict(rs[0], seconds=seconds[n].median,
                          waited=Spread.of([r["waited"] / r["seconds"] for r in rs]).median * seconds[n].median,
                          busy=None if rs[0]["busy"] is None else Spread.of([r["busy"] for r in rs]).median)
    return typical, seconds


def show_reads(typical, seconds, steps, read_every, repeats, busy_measured):
    columns = ["loss read", ".item() calls", "steps/s", ("range", "steps/s"), ("time", "ms"), ("host waiting in .item()", "%")]
    columns += [("device busy", "%")] if busy_measured else []
    lab.view("reads", "Reading the loss: every step or every N", kind="table", columns=columns + ["mean loss"],
             note="Each loop trains the same model from the same weights on the same batches, so the mean losses agree (to float32 "
                  "rounding: every step adds the loss on the host in double, the others on the device in float32): only when the loss "
                  f"was read differs. The loops take turns, {repeats} runs each: steps/s and time are the median run's, until the "
                  "device finished; range: the slowest and the fastest run -- where two loops' ranges overlap, their difference is "
                  "within this machine's noise. Host waiting: the share of the loop the host spent inside .item() (median)."
                  + (" Device busy: the share of the loop the emulated GPU spent running kernels -- what nvidia-smi calls GPU-Util; "
                     "the rest it sat idle, waiting for work." if busy_measured else ""))
    for n, r in typical.items():
        name = "every step: total += loss.item()" if n == 1 else f"every {n} steps"
        speed = seconds[n].reciprocal(steps)
        cells = [name + (" (yours)" if n == read_every and n != 1 else ""), r["reads"], speed.median, range_text(speed, 1.0, 4),
                 r["seconds"] * 1000, 100 * r["waited"] / r["seconds"]]
        cells += [100 * r["busy"]] if busy_measured else []
        lab.row("reads", *cells, r["mean_loss"])
    lab.view("sweep", "Steps per second vs how often the loss is read", kind="line", x=[("read the loss every N steps", "", True)],
             y="steps per second", series=[("loop", "training loop")],
             note="Each point: the same loop, the loss read every N steps (N = 1: every step), the median of the repeats. On a GPU the "
                  "loop speeds up as the waits get rarer, until the device itself is the limit; on the CPU there is nothing to wait "
                  "for and the line is flat (up to the machine's noise).")
    for n, r in typical.items():
        lab.point("sweep", "loop", [float(n)], steps / r["seconds"])
    lab.marker("sweep", [float(read_every)], f"yours: every {read_every}")


def copy_batch(host_rows, start, device, per_sample):
    """One batch of 64 rows copied to the device one row at a time or in one copy; seconds until the device had it."""
    synchronize(device)
    t = time.perf_counter()
    if per_sample:
        xb = torch.empty(BATCH, 16, device=device)
        for i in range(BATCH):
            xb[i] = host_rows[start + i].to(device)
    else:
        xb = host_rows[start:start + BATCH].to(device)
    synchronize(device)
    return time.perf_counter() - t


def time_copies(host_rows, device, copy_batches):
    """A batch copied one sample at a time against in one copy (from the CPU, where a DataLoader makes
    it), the two ways taking turns batch after batch."""
    copy_batch(host_rows, 0, device, True)  # warm-up
    per_sample, per_batch = [], []
    for i in range(copy_batches):
        start = (i * BATCH) % (SAMPLES - BATCH)
        per_sample.append(copy_batch(host_rows, start, device, True))
        per_batch.append(copy_batch(host_rows, start, device, False))
    per_sample, per_batch = Spread.of(per_sample), Spread.of(per_batch)
    lab.view("copies", "One batch to the device: 64 copies or one", kind="table",
             columns=["how", "copies a batch", ("time a batch", "us"), ("range", "us"), ("time a copy", "us"), ("relative", "x")],
             note=f"The same 64 x 16 rows of float32 (4 KiB) from CPU memory, until the device had them: {copy_batches} batches each "
                  "way, the two ways taking turns; the median batch and the range."
                  + (" On the CPU .to('cpu') returns the tensor itself: what is timed is the ops, not copies." if device.type == "cpu" else ""))
    lab.row("copies", "one sample at a time: xb[i] = x[start + i].to(device)", BATCH, per_sample.median * 1e6,
            range_text(per_sample, 1e6), per_sample.median * 1e6 / BATCH, per_sample.median / per_batch.median)
    lab.row("copies", "one copy: x[start:start + 64].to(device)", 1, per_batch.median * 1e6, range_text(per_batch, 1e6),
            per_batch.median * 1e6, 1.0)
    return per_sample, per_batch


def report(typical, seconds, steps, read_every, per_sample, per_batch, busy_measured, device):
    every, yours = typical[1], typical[read_every]
    fastest = min(typical, key=lambda n: typical[n]["seconds"])
    of_best = typical[fastest]["seconds"] / yours["seconds"]
    rate = {n: s.reciprocal(steps) for n, s in seconds.items()}
    lab.measurement("steps/s reading the loss every step", steps / every["seconds"], "steps/s")
    lab.measurement("steps/s reading the loss every N steps", steps / yours["seconds"], "steps/s")
    for which, n in (("every step", 1), ("every N steps", read_every)):
        lab.measurement(f"steps/s reading the loss {which}, slowest run", rate[n].low, "steps/s")
        lab.measurement(f"steps/s reading the loss {which}, fastest run", rate[n].high, "steps/s")
    lab.measurement("speed-up from reading every N steps", every["seconds"] / yours["seconds"], "x")
    lab.measurement("speed relative to the fastest N", of_best, "x")
    lab.measurement("loss reads", yours["reads"])
    lab.measurement("host waiting share, reading every step", 100 * every["waited"] / every["seconds"], "%")
    lab.measurement("host waiting share, reading every N steps", 100 * yours["waited"] / yours["seconds"], "%")
    lab.measurement("largest difference between the loops' mean losses", max(abs(r["mean_loss"] - every["mean_loss"]) for r in typical.values()))
    if busy_measured:
        lab.measurement("device busy share, reading every step", 100 * every["busy"], "%")
        lab.measurement("device busy share, reading every N steps", 100 * yours["busy"], "%")
    lab.measurement("per-sample copies relative to one copy", per_sample.median / per_batch.median, "x")
    lab.measurement("time per copy", per_batch.median * 1e6, "us")
    lab.record("syncs", every_step_s=every["seconds"], read_every=read_every, yours_s=yours["seconds"],
               per_sample_us=per_sample.median * 1e6, per_batch_us=per_batch.median * 1e6, device=str(device))
    print(summary(seconds, rate, every, read_every, fastest, of_best, per_sample, per_batch, device))


def summary(seconds, rate, every, read_every, fastest, of_best, per_sample, per_batch, device):
    if read_every != 1:
        yours = (f"Every {read_every} steps (yours) {compared_times(seconds[read_every], seconds[1], 'reading every step')}, with the "
                 f"same losses; {100 * of_best:.1f}% of the fastest N's median speed. ")
    elif fastest == 1:
        yours = "You read it every step, and no N had a faster median here. "
    else:
        yours = f"You read it every step; every {fastest} steps {compared_times(seconds[fastest], seconds[1], 'reading every step')}. "
    where = ("This is the CPU: each op ran before it returned, so .item() had nothing to wait for; what differs between the loops is "
             "only the ops they run (a read against an addition on the device). On a GPU the waits are real: run it on cuda."
             if device.type == "cpu" else
             "This is the emulated GPU: its stream is a queue run by a thread beside the loop, so .item() waits for it as it would for "
             "a GPU; a real GPU's kernels and wake-ups take other times, so the size of the gain differs there." if is_emulated(device) else "")
    return (f"Reading the loss every step: {spread_text(rate[1], 'steps/s', 4)}, the host waiting "
            f"{100 * every['waited'] / every['seconds']:.1f}% of the loop. {yours}{where} A batch sent one sample at a time "
            f"{compared_times(per_sample, per_batch, 'one copy of it')}.")


def run(device="auto", hidden="256", steps=1000, read_every=50, repeats=3, copy_batches=20, seed=0):
    device = pick_device(device)
    read_every = min(read_every, steps)
    hidden = parse_widths(hidden)
    data = regression_set(SAMPLES, seed)
    x, y = (t.to(device) for t in data.tensors)  # resident: no copies in the loop
    typical, seconds = sweep_reads(x, y, steps, read_every, repeats, seed, hidden, device)
    busy_measured = typical[1]["busy"] is not None
    show_reads(typical, seconds, steps, read_every, repeats, busy_measured)
    per_sample, per_batch = time_copies(data.tensors[0], device, copy_batches)
    report(typical, seconds, steps, read_every, per_sample, per_batch, busy_measured, device)
