"""Where a GPU's memory goes, what to do when it runs out, what a memory fraction caps, and what
activation checkpointing trades. Lessons 04, 05 and 06 run it, each in its own mode:

  report      train a few steps, then `del model, optimizer`, then torch.cuda.empty_cache()
  oom-sweep   double the batch (or the width) until torch.cuda.OutOfMemoryError, then recover
  fraction    torch.cuda.set_per_process_memory_fraction(f), and fill it until the allocator refuses
  checkpoint  the same steps with the activations stored, then recomputed (checkpoint_sequential)

GPU Lab runs this file as it is, in a Python session of its own, with `import torch` giving its
engine; on a machine without a GPU, cuda:0 is GPU Lab's emulated GPU. `lab` (GPU Lab's) draws the
views: lab.view declares one, lab.point / bar / row fill it, lab.measurement reports a number a
challenge grades. The memory view is drawn from the allocator's own history -- the one PyTorch's
memory visualiser reads (torch.cuda.memory._record_memory_history and _snapshot).
"""
import os
import re
import time

import torch
import torch.nn.functional as F
from torch.utils.data import DataLoader, TensorDataset

from lab_helpers import MLP, explain_oom, mib, parse_widths

# What GPU Lab tags each allocation with (PyTorch's snapshots carry a Python stack in the same place).
CATEGORIES = ["parameter", "gradient", "optimizer_state", "activation", "input_batch", "workspace", "other"]


def category_of(entry):
    """What an allocation is for: GPU Lab puts its category in the entry's first frame."""
    name = entry["frames"][0]["name"] if entry["frames"] else "other"
    return name if name in CATEGORIES else "other"


# ---- The data and the model -------------------------------------------------------------------------

def load_data(dataset, seed):
    """Fashion-MNIST's training set, or a regression task: y = x.w + b + noise, from a fixed teacher."""
    if dataset == "fashion-mnist":
        return lab.fashion_mnist(train=True), 10
    torch.manual_seed(1234)  # the teacher: the same whatever the seed
    w, b = torch.randn(16, 1), torch.randn(1)
    torch.manual_seed(seed)
    x = torch.randn(65536, 16)
    return TensorDataset(x, x @ w + b + 0.1 * torch.randn(65536, 1)), 1


# ---- The memory view: the allocator's events, by category ----------------------------------------

class MemoryTimeline:
    """The stacked "memory" view: the live bytes of each category after every allocation and free,
    so a step's activations rise and fall within it. It reads the allocator's history as PyTorch's
    visualiser does: _snapshot()["device_traces"][index], entries {action, addr, size, time_us, frames}."""

    def __init__(self, device):
        self.device = device
        self.seen = 0                     # entries already followed
        self.live = dict.fromkeys(CATEGORIES, 0)
        self.blocks = {}                  # address -> (size, category) of each live block
        self.reserved = torch.cuda.memory_reserved(device)
        self.origin = None                # time_us of the first entry: the view's 0 s
        self.now = 0.0                    # the last entry's time on the view's clock
        self.oom = None                   # the last "oom" entry, and the blocks live then
        self.blocks_at_oom = {}
        torch.cuda.memory._record_memory_history(max_entries=10**7, clear_history=True)  # entries from here on
        lab.view("memory", f"Memory on {device} by category", kind="stacked", x=("time", "s"), y=("memory", "bytes"),
                 y_from_zero=True,
                 series=[(c, c.replace("_", " ")) for c in CATEGORIES] +
                        [("reserved", "reserved (memory_reserved)", "dashed", True), ("peak", "the step's peak", "points", True)])

    def new_entries(self):
        snapshot = torch.cuda.memory._snapshot()
        traces, index = snapshot["device_traces"], self.device.index
        entries = traces[index] if index < len(traces) else []
        # GPU Lab's key says which device each index is: until the GPU has a history, index 0 is the CPU's.
        labels = snapshot.get("gpulab", {}).get("devices", [])
        if index < len(labels) and not str(labels[index]).startswith(str(self.device)):
            entries = []
        fresh, self.seen = entries[self.seen:], len(entries)
        return fresh

    def follow(self, step_peak=None):
        """Draws the events since the last call, and returns them: one sample per moment (time_us
        counts microseconds, and several events can share one). `step_peak` (the step's
        max_memory_allocated) is marked where the live bytes were highest -- on the step's own spike."""
        highest, highest_at = -1, 0.0
        pending = False  # a change at self.now, not drawn yet
        entries = self.new_entries()
        for e in entries:
            if self.origin is None:
                self.origin = e["time_us"]
            t = (e["time_us"] - self.origin) / 1e6
            if pending and t != self.now:
                total = self.sample()
                if total > highest:
                    highest, highest_at = total, self.now
                pending = False
            self.now = t
            action = e["action"]
            if action == "alloc":
                category = category_of(e)
                self.blocks[e["addr"]] = (e["size"], category)
                self.live[category] += e["size"]
                pending = True
            elif action == "free_completed" and e["addr"] in self.blocks:
                size, category = self.blocks.pop(e["addr"])
                self.live[category] -= size
                pending = True
            elif action == "segment_alloc":
                self.reserved += e["size"]  # drawn with the allocation that needed it
            elif action == "segment_free":
                self.reserved -= e["size"]  # empty_cache(): the dashed line falls
                pending = True
            elif action == "oom":
                self.oom, self.blocks_at_oom = e, dict(self.blocks)
        if pending:
            total = self.sample()
            if total > highest:
                highest, highest_at = total, self.now
        if highest >= 0 and step_peak is not None:
            lab.point("memory", "peak", highest_at, step_peak)
        return entries

    def sample(self):
        """The live bytes of each category and the reserved line, now; returns the live total."""
        for c in CATEGORIES:
            lab.point("memory", c, self.now, self.live[c])
        lab.point("memory", "reserved", self.now, self.reserved)
        return sum(self.live.values())

    def mark(self, label, kind="event"):
        self.follow()
        lab.marker("memory", self.now, label, kind)


def explain_oom_at(timeline):
    """The out-of-memory error the timeline saw, explained from the live tensors at it (lab_helpers'
    explain_oom): by category, the cached bytes beside them, the largest tensors."""
    timeline.follow()
    if timeline.oom is None:
        return
    held = dict.fromkeys(CATEGORIES, 0)
    for size, category in timeline.blocks_at_oom.values():
        held[category] += size
    explain_oom(held, timeline.oom["size"], cached=max(0, timeline.reserved - sum(held.values())),
                largest=list(timeline.blocks_at_oom.values()))


# ---- Training steps -----------------------------------------------------------------------------

class Trainer:
    """Fresh models trained for a few steps, each step's memory drawn as it happens."""

    def __init__(self, data, outputs, device, seed, timeline):
        self.data, self.outputs, self.device, self.seed, self.timeline = data, outputs, device, seed, timeline
        self.classification = outputs > 1
        self.steps_taken = 0
        self.peak = 0  # the highest step peak of the last attempt
        self.run_peak = 0
        self.step_seconds = []  # the last attempt's step times, its first step left out

    def attempt(self, batch, hidden, steps, accumulate=1, segments=0):
        """Trains a fresh model for `steps` optimizer steps, each on `accumulate` micro-batches of
        `batch`; returns the model, its optimizer and the last step's loss. Should a step run out of
        memory, what it had allocated goes with the traceback that holds it -- once the caller's
        `except` block has ended (PyTorch's FAQ: recover outside the except clause)."""
        torch.manual_seed(self.seed)
        in_features = self.data.tensors[0][0].numel()
        model = MLP(in_features, hidden, self.outputs, segments).to(self.device)
        optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
        loader = DataLoader(self.data, batch_size=batch, shuffle=True, drop_last=True)
        batches = iter(loader)
        self.peak, self.step_seconds, loss = 0, [], 0.0
        try:
            for step in range(steps):
                self.steps_taken += 1
                torch.cuda.reset_peak_memory_stats(self.device)
                start = time.perf_counter()
                loss = 0.0
                for _ in range(accumulate):
                    batch_xy = next(batches, None)
                    if batch_xy is None:  # an epoch ended: start another
                        batches = iter(loader)
                        batch_xy = next(batches)
                    with lab.memory_category("input_batch"):
                        x, y = batch_xy[0].to(self.device), batch_xy[1].to(self.device)
                    out = model(x)
                    part = (F.cross_entropy(out, y) if self.classification else F.mse_loss(out, y)) / accumulate
                    part.backward()  # the gradients add up over the micro-batches
                    loss += part.item()
                    del batch_xy, x, y, out, part
                optimizer.step()
                optimizer.zero_grad()
                torch.cuda.synchronize(self.device)
                if step > 0:  # the first step pays for set-up (the cache's first segments)
                    self.step_seconds.append(time.perf_counter() - start)
                step_peak = torch.cuda.max_memory_allocated(self.device)
                self.peak, self.run_peak = max(self.peak, step_peak), max(self.run_peak, step_peak)
                self.follow_step(step_peak)
                lab.progress(step + 1, steps, f"batch {batch}, step {step + 1}")
        finally:
            self.timeline.follow()
        return model, optimizer, loss

    def follow_step(self, step_peak):
        """The step's events on the memory view, and its "memory" record for scripts."""
        traces = self.timeline.follow(step_peak)
        counts = {a: sum(e["action"] == a for e in traces) for a in ("alloc", "free_completed", "segment_alloc", "segment_free")}
        by_category = {}
        for e in traces:
            if e["action"] == "alloc":
                key = f"allocated_by_category.{category_of(e)}"
                by_category[key] = by_category.get(key, 0) + e["size"]
        lab.record("memory", step=self.steps_taken, allocated_bytes=torch.cuda.memory_allocated(self.device),
                   reserved_bytes=torch.cuda.memory_reserved(self.device), peak_allocated_bytes=step_peak,
                   allocs=counts["alloc"], frees=counts["free_completed"], segments_reserved=counts["segment_alloc"],
                   segments_released=counts["segment_free"], **by_category)


# ---- What the driver sees (nvidia-smi) ------------------------------------------------------------

def gpu_processes(device):
    """(pid, bytes) of each process using the GPU, read from torch.cuda.list_gpu_processes()'s lines
    ("process       1234 uses      500.000 MB GPU memory"); none where the driver cannot say."""
    pattern = re.compile(r"process\s+(\d+) uses\s+([\d.]+) MB GPU memory")
    return [(int(pid), int(float(mb) * 2**20)) for pid, mb in pattern.findall(torch.cuda.list_gpu_processes(device))]


def process_memory(device):
    """This process's memory as the driver counts it (nvidia-smi), or None where it cannot say."""
    return next((used for pid, used in gpu_processes(device) if pid == os.getpid()), None)


def memory_now(device, driver):
    """allocated, reserved, and -- where there is a driver -- this process and the whole GPU."""
    s = {"allocated": torch.cuda.memory_allocated(device), "reserved": torch.cuda.memory_reserved(device)}
    if driver:
        free, total = torch.cuda.mem_get_info(device)
        s["driver_device"] = total - free
        if (own := process_memory(device)) is not None:
            s["driver_process"] = own
    return s


def nvidia_smi_row(device, moment):
    free, total = torch.cuda.mem_get_info(device)
    n_a = lambda v: "n/a" if v is None else v  # noqa: E731
    power = torch.cuda.power_draw(device)
    lab.row("nvidia-smi", moment, total - free, total, n_a(torch.cuda.utilization(device)), n_a(torch.cuda.temperature(device)),
            "n/a" if power is None else power / 1000)


# ---- The four modes -------------------------------------------------------------------------------

def del_and_empty_cache(trainer, timeline, batch, hidden, steps):
    """Lesson 04: train, `del model, optimizer` -- allocated falls, reserved stays (the cache keeps
    the blocks for reuse) -- then torch.cuda.empty_cache(): reserved falls, the segments go back."""
    device = trainer.device
    try:
        torch.cuda.utilization(device)
        driver, why = True, ""
    except RuntimeError as e:  # no NVML: the emulated GPU, or a driver without it
        driver, why = False, str(e)
    lab.view("nvidia-smi", "The device as nvidia-smi sees it", kind="table",
             columns=["moment", ("memory used", "bytes"), ("memory total", "bytes"), ("GPU use", "%"), ("temperature", "°C"),
                      ("power", "W")],
             note="" if driver else f"No nvidia-smi view: {why}")
    moments = {}

    def moment(name):
        moments[name] = memory_now(device, driver)
        if driver:
            nvidia_smi_row(device, name)

    model, optimizer, _ = trainer.attempt(batch, hidden, steps)
    moment("after training")
    del model, optimizer
    timeline.mark("del model, optimizer")
    moment("after del model, optimizer")
    before = torch.cuda.memory_reserved(device)
    timeline.mark("empty_cache()", "empty_cache")
    torch.cuda.empty_cache()
    released = before - torch.cuda.memory_reserved(device)
    timeline.follow()
    moment("after empty_cache()")

    if driver:
        lab.view("gpu-processes", "Processes on the GPU (nvidia-smi)", kind="table", columns=["pid", ("memory", "bytes"), "this process"])
        for pid, used in gpu_processes(device):
            lab.row("gpu-processes", pid, used, pid == os.getpid())

    report_del_and_empty_cache(device, moments, released, driver, why)


def report_del_and_empty_cache(device, moments, released, driver, why):
    """The three moments side by side (allocated, reserved and, with a driver, what nvidia-smi
    counts), the measurements the lesson's claims rest on, and the sentence they add up to."""
    trained, deleted, after = moments.values()
    series = [("allocated", "allocated"), ("reserved", "reserved")]
    if "driver_process" in trained:
        series.append(("driver_process", "this process (nvidia-smi)"))
    if driver:
        series.append(("driver_device", "whole GPU (nvidia-smi)"))
    lab.view("report", "del, then empty_cache()", kind="bars", y=("memory", "bytes"), y_from_zero=True, series=series,
             note="" if driver else f"No driver view: {why}")
    for name, snap in moments.items():
        for key, _ in series:
            if key in snap:
                lab.bar("report", key, name, snap[key])
    lab.measurement("freed by del (allocated)", trained["allocated"] - deleted["allocated"], "bytes")
    lab.measurement("reserved after del", deleted["reserved"], "bytes")
    lab.measurement("released by empty_cache()", released, "bytes")
    lab.measurement("reserved after empty_cache()", after["reserved"], "bytes")
    if "driver_process" in after:
        lab.measurement("process memory (nvidia-smi) after del", deleted["driver_process"], "bytes")
        lab.measurement("process memory (nvidia-smi) after empty_cache()", after["driver_process"], "bytes")
        # What nvidia-smi counts beyond the allocator: the CUDA context and the libraries' workspaces.
        lab.measurement("nvidia-smi minus reserved after empty_cache()", after["driver_process"] - after["reserved"], "bytes")
    fields = {f"{prefix}.{key}_bytes": value for prefix, snap in (("trained", trained), ("before", deleted), ("after", after))
              for key, value in snap.items()}
    lab.record("report", device=str(device), released_bytes=released, **fields, **({} if driver else {"driver_note": why}))
    print(f"del model, optimizer: allocated {mib(trained['allocated'])} -> {mib(deleted['allocated'])}, reserved stays "
          f"{mib(deleted['reserved'])} (the cache keeps the blocks for reuse). empty_cache() returned {mib(released)} to the "
          f"device: reserved is now {mib(after['reserved'])}.")
    print(torch.cuda.memory_summary(device))


def set_the_cap(device, cap_mb, fraction):
    """torch.cuda.set_per_process_memory_fraction: a cap of cap_mb beyond what is in use now (or the
    fraction given), so the sweep reaches the limit quickly on any GPU."""
    total = torch.cuda.get_device_properties(device).total_memory
    if fraction <= 0:
        fraction = min(1.0, (torch.cuda.memory_reserved(device) + cap_mb * 2**20) / total)
    torch.cuda.set_per_process_memory_fraction(fraction, device)
    cap = int(fraction * total)
    print(f"torch.cuda.set_per_process_memory_fraction({fraction:.6g}): at most {mib(cap)} of {device}'s {mib(total)}")
    lab.level("memory", "the cap", cap)


def double_until_oom(trainer, timeline, batch, width, grow, hidden, steps, dataset_size):
    """Lesson 05, step 1: double the batch (or the hidden width) until a step does not fit. Returns
    the batch and width that did not fit, and the largest that did (0: none), or None when nothing
    ran out of memory."""
    tried, largest = 0, 0
    while True:
        if grow == "batch" and batch > dataset_size and tried < dataset_size:
            batch = dataset_size  # past the data set, the whole set once
        if batch > dataset_size or width > 65536:
            lab.message(f"No out-of-memory error up to batch {tried}" + (f", width {width}" if grow == "width" else "") +
                        ": lower cap_mb (or the fraction) to reach the limit.", "warning")
            return None
        tried = batch
        baseline = torch.cuda.memory_allocated(trainer.device)
        error = None
        try:
            trainer.attempt(batch, [width, width] if grow == "width" else hidden, steps)
        except torch.cuda.OutOfMemoryError as e:
            error = str(e)
        # Out of the except block: the failed step's tensors, and the attempt's model, are freed now.
        attempt_row(trainer, batch, width if grow == "width" else None, 1, "out of memory" if error else "fits")
        if error is None:
            largest = width if grow == "width" else batch
            if grow == "width":
                width *= 2
            else:
                batch *= 2
            continue
        timeline.follow()
        lab.marker("memory", (timeline.oom["time_us"] - timeline.origin) / 1e6, f"OOM at {grow} {width if grow == 'width' else batch}",
                   "oom")
        lab.message(error, "engine_error")
        explain_oom_at(timeline)
        after = torch.cuda.memory_allocated(trainer.device)
        lab.record("oom", batch_size=batch, width=width if grow == "width" else 0, accumulate=1, message=error,
                   allocated_after_bytes=after, baseline_bytes=baseline)
        print(f"Allocated after the failed attempt: {mib(after)} (before it: {mib(baseline)}). This lab makes a fresh model "
              "and optimizer for every attempt, so the failed step's tensors and the attempt's model went together; in a "
              "training loop that keeps its model, the model and the optimizer's state stay and only the step's tensors go "
              "-- either way the program can carry on.")
        return batch, width, largest


def recover(trainer, batch, width, grow, hidden, steps, accumulate):
    """Lesson 05, step 2: halve what grew; with gradient accumulation keep the effective batch
    (batch / 2 x 2 micro-batches gives the same gradient)."""
    k = 1
    while True:
        if grow == "width":
            width //= 2
        else:
            batch //= 2
            k = k * 2 if accumulate else 1
        if batch < 1 or width < 1:
            lab.message("Even the smallest attempt does not fit: raise the cap.", "warning")
            return
        error = None
        try:
            model, optimizer, loss = trainer.attempt(batch, [width, width] if grow == "width" else hidden, steps, accumulate=k)
            del model, optimizer
        except torch.cuda.OutOfMemoryError as e:
            error = str(e)
        attempt_row(trainer, batch, width if grow == "width" else None, k, "out of memory" if error else "recovered")
        if error:
            lab.message(error, "engine_error")
            after = torch.cuda.memory_allocated(trainer.device)
            lab.record("oom", batch_size=batch, width=width if grow == "width" else 0, accumulate=k, message=error,
                       allocated_after_bytes=after, baseline_bytes=after)
            continue
        print(f"Recovered: batch {batch} x {k} accumulation step(s) = effective batch {batch * k}" +
              (f", width {width}" if grow == "width" else "") + f", loss {loss:.4f}")
        lab.record("recovered", batch_size=batch, width=width if grow == "width" else 0, accumulate=k, effective_batch=batch * k,
                   loss=loss)
        lab.measurement("effective batch after recovery", batch * k)
        return


def attempt_row(trainer, batch, width, k, result):
    """A row of the sweep's table; its peak is the attempt's last step's, the failed one's included."""
    lab.row("attempts", batch, *([] if width is None else [width]), k, batch * k, result, torch.cuda.max_memory_allocated(trainer.device))


def oom_sweep(trainer, timeline, p, dataset_size):
    device = trainer.device
    if p["start_batch"] > dataset_size:
        raise ValueError(f"start_batch {p['start_batch']} is larger than the {p['dataset']} training set ({dataset_size} examples): "
                         "a batch holds at most the whole set")
    set_the_cap(device, p["cap_mb"], p["fraction"])
    lab.view("attempts", "Attempts", kind="table",
             columns=["batch"] + (["width"] if p["grow"] == "width" else []) +
                     ["accumulate", "effective batch", "result", ("peak allocated", "bytes")])
    hidden = parse_widths(p["hidden"])
    failed = double_until_oom(trainer, timeline, p["start_batch"], p["start_width"], p["grow"], hidden, p["steps"], dataset_size)
    if failed is None:
        return
    batch, width, largest = failed
    if largest:
        lab.measurement("largest width that fits" if p["grow"] == "width" else "largest batch that fits", largest)
    recover(trainer, batch, width, p["grow"], hidden, p["steps"], p["accumulate"])


def fill_a_fraction(device, timeline, fraction, cap_mb):
    """Lesson 06: set_per_process_memory_fraction(f), then fill the cap with 8 MiB tensors until the
    allocator refuses -- and read the free memory before and after setting it: the cap limits this
    process's allocator; it reserves nothing, and leaves the device (and other processes) as they were."""
    free_before, total = torch.cuda.mem_get_info(device)
    f = fraction if fraction > 0 else min(1.0, cap_mb * 2**20 / total)
    cap = int(f * total)
    torch.cuda.set_per_process_memory_fraction(f, device)
    free_after, _ = torch.cuda.mem_get_info(device)
    print(f'torch.cuda.set_per_process_memory_fraction({f:.6g}, "{device}"): this process\'s allocator may hold at most '
          f"{mib(cap)} of {mib(total)}.")
    lab.level("memory", "the cap", cap)

    held, error = [], None
    every = max(1, cap // (50 * 8 * 2**20))  # about 50 samples of the fill, whatever the cap
    while error is None:
        try:
            held.append(torch.empty(2 * 2**20, dtype=torch.float32, device=device))  # 8 MiB
        except torch.cuda.OutOfMemoryError as e:
            error = str(e)
        if len(held) % every == 0 or error:
            timeline.follow()
            lab.progress(torch.cuda.memory_allocated(device), cap, "filling the cap")
    allocated, reserved = torch.cuda.memory_allocated(device), torch.cuda.memory_reserved(device)
    lab.marker("memory", (timeline.oom["time_us"] - timeline.origin) / 1e6, "OOM at the cap", "oom")
    lab.message(error, "engine_error")
    lab.progress(1, 1, f"the allocator refused at {mib(allocated)}")
    driver_at_cap = process_memory(device)
    del held
    timeline.follow()

    lab.view("fraction", "What the fraction caps", kind="bars", y=("memory", "bytes"), y_from_zero=True, series=[("bytes", "bytes")],
             note="cap: the fraction times the capacity; allocated and reserved: this process's tensors and its allocator's "
                  "segments when the allocator refused (the cap counts reserved memory).")
    lab.bar("fraction", "bytes", "cap", cap)
    lab.bar("fraction", "bytes", "allocated", allocated)
    lab.bar("fraction", "bytes", "reserved", reserved)
    if driver_at_cap is not None:
        lab.bar("fraction", "bytes", "nvidia-smi", driver_at_cap)
    emulated = torch.cuda.is_emulated(device)
    lab.view("free", "Free memory, before and after the fraction", kind="bars", y=("memory", "bytes"), y_from_zero=True,
             series=[("free", "free")],
             note=f"Free memory here is what {device}'s budget leaves; on a GPU it is the driver's number (cudaMemGetInfo), "
                  "which no fraction changes either." if emulated else
                  "The driver's free memory (cudaMemGetInfo): setting a fraction reserves nothing.")
    lab.bar("free", "free", "before", free_before)
    lab.bar("free", "free", "after", free_after)
    lab.measurement("the cap", cap, "bytes")
    lab.measurement("allocated when the allocator refused", allocated, "bytes")
    lab.measurement("reserved when the allocator refused", reserved, "bytes")
    lab.measurement("free memory before the fraction", free_before, "bytes")
    lab.measurement("free memory after the fraction", free_after, "bytes")
    if driver_at_cap is not None:
        lab.measurement("this process as nvidia-smi sees it, at the cap", driver_at_cap, "bytes")
    lab.record("fraction", fraction=f, cap_bytes=cap, allocated_at_oom_bytes=allocated, reserved_at_oom_bytes=reserved,
               free_before_bytes=free_before, free_after_bytes=free_after)


def store_or_recompute(trainer, batch, hidden, steps, segments):
    """Lesson 05: torch.utils.checkpoint -- the same steps with every hidden block's activations
    stored, then recomputed in backward: the peak memory and the step time of both, side by side."""
    emulated = torch.cuda.is_emulated(trainer.device)
    lab.view("checkpoint-memory", "Peak memory of a training step", kind="bars", y=("memory", "bytes"), y_from_zero=True,
             series=[("peak", "peak allocated")])
    lab.view("checkpoint-time", "Time of a training step", kind="bars", y=("time", "s"), y_from_zero=True,
             series=[("time", "median step time")],
             note="Timed on your CPU: the emulated GPU computes there. The recompute's extra forward pass costs time on a GPU "
                  "too, but how much is for a GPU to say." if emulated else "")
    for recompute in (False, True):
        how = "recomputed" if recompute else "stored"
        print(f"{'With' if recompute else 'Without'} checkpointing: batch {batch}, {steps} steps")
        model, optimizer, _ = trainer.attempt(batch, hidden, steps, segments=segments if recompute else 0)
        del model, optimizer
        median = sorted(trainer.step_seconds)[len(trainer.step_seconds) // 2]
        name = "checkpointed (recomputed)" if recompute else "stored"
        lab.bar("checkpoint-memory", "peak", name, trainer.peak)
        lab.bar("checkpoint-time", "time", name, median)
        lab.measurement(f"peak allocated, activations {how}", trainer.peak, "bytes")
        lab.measurement(f"step time, activations {how}" + (" (on the CPU)" if emulated else ""), median, "s")


def gpu_for(device):
    gpu = torch.device("cuda" if device == "auto" else device)
    if gpu.type != "cuda":
        raise ValueError(f"device: the memory lab fills a GPU's memory; '{device}' is not a GPU (cuda, cuda:N)")
    return torch.device("cuda", torch.cuda.current_device() if gpu.index is None else gpu.index)


def run(mode="oom-sweep", dataset="fashion-mnist", hidden="256,128,100", grow="batch", start_batch=64, start_width=256, steps=2,
        segments=2, accumulate=True, cap_mb=100, fraction=0.0, device="cuda", seed=0):
    started = time.perf_counter()
    device = gpu_for(device)
    lab.device(device)
    timeline = MemoryTimeline(device)
    if mode == "fraction":
        fill_a_fraction(device, timeline, fraction, cap_mb)
        peak = torch.cuda.max_memory_allocated(device)
        steps_taken = 0
    else:
        data, outputs = load_data(dataset, seed)  # on the CPU: the GPU's memory holds only what training puts there
        trainer = Trainer(data, outputs, device, seed, timeline)
        batch = min(start_batch, len(data))
        if mode == "report":
            del_and_empty_cache(trainer, timeline, batch, parse_widths(hidden), steps)
        elif mode == "checkpoint":
            store_or_recompute(trainer, batch, parse_widths(hidden), max(steps, 2), segments)  # one step warms up
        else:
            oom_sweep(trainer, timeline, dict(dataset=dataset, hidden=hidden, grow=grow, start_batch=start_batch, start_width=start_width,
                                              steps=steps, accumulate=accumulate, cap_mb=cap_mb, fraction=fraction), len(data))
        peak, steps_taken = trainer.run_peak, trainer.steps_taken
    lab.measurement("peak allocated", peak, "bytes")
    lab.record("done", device=str(device), steps=steps_taken, stopped=False, seconds=time.perf_counter() - started,
               peak_allocated_bytes=peak, peak_reserved_bytes=torch.cuda.max_memory_reserved(device))
