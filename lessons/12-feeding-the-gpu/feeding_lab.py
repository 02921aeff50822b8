"""The feeding lesson's lab: is the device kept busy, or does it wait for data? Fashion-MNIST-sized
images through the usual transforms, into an MLP:

    transform = T.Compose([T.RandomCrop(28, padding=2), T.RandomHorizontalFlip(),
                           T.ToTensor(), T.Normalize((0.2860,), (0.3530,))])
    loader = DataLoader(images, batch_size=128, shuffle=True,
                        num_workers=num_workers,      # 0: the loop loads every batch itself
                        pin_memory=pin_memory)        # batches put in page-locked memory
    for x, y in loader:                               # waits until the next batch is ready
        x = x.to(device, non_blocking=pin_memory)     # from pinned memory: queued, the host goes on
        y = y.to(device, non_blocking=pin_memory)
        loss = F.cross_entropy(model(x), y)
        optimizer.zero_grad(); loss.backward(); optimizer.step()

Loading a batch is a read from storage and a decode. GPU Lab reads no files here: a timed wait stands
in for the read, `load_cost` times this device's own training step, so that loading is the bottleneck
on every machine (a slow disk, a network share, JPEG decoding do this in real pipelines). The decode
and augmentation that follow are real work on the CPU: bytes to floats, a random crop of the padded
image, a random flip, normalisation -- what the transforms above do, for the whole batch at once
(ImageFiles.__getitems__, which PyTorch's DataLoader calls with a batch's indices where a data set
has it).

With num_workers=0 the loop does all of that itself. With W workers, W threads load batches ahead of
the loop (PyTorch uses processes, for Python's sake; the point is the same). With pin_memory the
batches are put in page-locked memory, from which a non_blocking copy is queued on the device's stream
and the host goes straight on. A run with the batches already on the device is the ceiling that
feeding can reach; on a GPU, CopyAhead copies each batch one step ahead on a stream of its own.

What is measured, per loader: the device's clock (CUDA events around each step's copies and compute,
on the emulated GPU too; the host's clock on the CPU, where the step runs on the loop's own thread)
gives the device's idle time between steps; the host's clock gives the loop's wait for batches; the
loader's threads log when they loaded each batch.
"""
import collections
import threading
import time

import torch
import torch.nn.functional as F
from torch.utils.data import DataLoader, Dataset

from lab_helpers import (MLP, Spread, compare, compared_times, is_emulated, median_index, parse_widths, pick_device, range_text,
                         spread_text, synchronize)

SIDE, PAD, STORED, CLASSES, BATCH = 28, 2, 2048, 10, 128
PADDED = SIDE + 2 * PAD
MEAN, STD = 0.2860, 0.3530  # Fashion-MNIST's, as Normalize uses them
AUGMENTATIONS = 8192        # crops and flips drawn once, example i taking number i % 8192
TIMELINE_STEPS = 8          # the timelines show the loop's first steps: the loader's start and how it goes on
CALIBRATION_RUNS = 3        # the step time the read is counted in: the median of this many runs
RESIDENT_BATCHES = 32       # the ceiling cycles over this many batches loaded in advance (more would only take memory)

# A loader: its workers, pinned (and copied non_blocking), resident (no loader: the batches already on the
# device, the ceiling), prefetch (pinned, and copied one batch ahead on a copy stream: CopyAhead).
Loader = collections.namedtuple("Loader", "workers pinned resident prefetch", defaults=(False, False, False))
CEILING = Loader(0, False, True)


def sort_key(c):
    return (not c.resident, c.workers, c.pinned, c.prefetch)


# ---- The data: images as they sit in files, and the transforms ---------------------------------------

def make_images(seed):
    """The images as bytes (0 to 255), stored with the crop's 2-pixel border of zeros: each class is three
    soft blobs at places of its own, each image its class's blobs at a brightness of its own, with noise --
    something an MLP learns. With them, the crops and flips the examples take: drawn once, so that every
    loader yields the same batches, whatever its workers."""
    torch.manual_seed(seed)
    labels = torch.arange(STORED) % CLASSES
    at = torch.arange(SIDE).float()
    blob = torch.rand(CLASSES, 3, 3)  # each blob's centre (y, x) and radius
    cy, cx, r = (4 + 20 * blob[..., 0])[..., None, None], (4 + 20 * blob[..., 1])[..., None, None], (2.5 + 3 * blob[..., 2])[..., None, None]
    shapes = torch.exp(-((at[:, None] - cy) ** 2 + (at[None, :] - cx) ** 2) / (2 * r * r)).sum(1).clamp(max=1.0)  # (CLASSES, 28, 28)
    brightness = 0.6 + 0.4 * torch.rand(STORED, 1, 1)
    noise = 0.15 * (torch.rand(STORED, SIDE, SIDE) - 0.5)
    pixels = (255 * (brightness * shapes[labels] + noise)).clamp(0, 255).long().float()  # whole bytes
    stored = torch.zeros(STORED, PADDED, PADDED)
    stored[:, PAD:PAD + SIDE, PAD:PAD + SIDE] = pixels
    return dict(stored=stored.reshape(-1), labels=labels, crops=crop_maps(),
                crop=torch.randint(0, (2 * PAD + 1) ** 2 * 2, (AUGMENTATIONS,)))  # which of the 50 crops and flips an example takes


def crop_maps():
    """RandomCrop(28, padding=2) and RandomHorizontalFlip() have 5 x 5 corners x 2 flips = 50 outcomes:
    for each, where in the padded 32 x 32 image each of the 28 x 28 output pixels comes from."""
    at = torch.arange(SIDE)
    maps = []
    for dy in range(2 * PAD + 1):
        for dx in range(2 * PAD + 1):
            for cols in (at, SIDE - 1 - at):  # as it is, flipped
                maps.append(((at[:, None] + dy) * PADDED + cols[None, :] + dx).reshape(-1))
    return torch.stack(maps)  # (50, 784)


class ImageFiles(Dataset):
    """`size` examples over the stored images. A batch costs the read (the wait) and then the real
    decode and augmentation of its images, logged to `log` with the thread that did it."""

    def __init__(self, images, size, read_seconds=0.0, log=None):
        self.images, self.size, self.read_seconds, self.log = images, size, read_seconds, log

    def __len__(self):
        return self.size

    def __getitems__(self, indices):
        start = time.perf_counter()
        if self.read_seconds > 0:
            time.sleep(self.read_seconds)  # the read from storage
        batch = self.decode(torch.tensor(indices))
        if self.log is not None:
            self.log.add(start, time.perf_counter())
        return batch

    def __getitem__(self, index):
        return tuple(t[0] for t in self.__getitems__([index]))

    def decode(self, index):
        """Crop, flip, ToTensor and Normalize for the whole batch: each output pixel picked from the stored
        bytes by its index, the crop and flip chosen by the example's number."""
        if len(index) and (index.min().item() < 0 or index.max().item() >= self.size):
            raise IndexError(f"index out of range for a data set of {self.size} examples")
        m = self.images
        image = index % STORED
        where = (image * PADDED * PADDED)[:, None] + m["crops"][m["crop"][index % AUGMENTATIONS]]  # (B, 784)
        pixels = m["stored"].index_select(0, where.reshape(-1)).reshape(len(index), 1, SIDE, SIDE)
        return pixels * (1 / (255 * STD)) - MEAN / STD, m["labels"][image]  # ToTensor's / 255, then Normalize


def keep_batch(batch):
    """The collate_fn: __getitems__ already built the batch."""
    return batch


class LoadLog:
    """When each batch was loaded, and on which thread: the loader's lanes of the timeline."""

    def __init__(self, origin):
        self.origin, self.entries, self.lock = origin, [], threading.Lock()

    def add(self, start, end):
        with self.lock:
            self.entries.append((threading.get_ident(), start - self.origin, end - self.origin))


class CopyAhead:
    """A prefetcher (NVIDIA Apex's data_prefetcher, torchtnt's CudaDataPrefetcher): the next batch's copy
    is queued on a copy stream before the step on this one, and the compute stream waits for a batch's
    copy only when the loop takes the batch."""

    def __init__(self, loader, device):
        self.batches, self.device = iter(loader), device
        self.stream = torch.cuda.Stream(device)
        self.preload()

    def preload(self):
        batch = next(self.batches, None)
        self.started, self.finished = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        with torch.cuda.stream(self.stream):
            self.started.record(self.stream)
            self.ahead = None if batch is None else [t.to(self.device, non_blocking=True) for t in batch]
            self.finished.record(self.stream)

    def next(self):
        """The batch, on the device, with its copy's two events; the next batch's copy queued."""
        compute = torch.cuda.current_stream(self.device)
        compute.wait_stream(self.stream)  # this batch's copy first
        batch, started, finished = self.ahead, self.started, self.finished
        for t in batch or []:
            t.record_stream(compute)  # its memory is used on the compute stream now
        self.preload()
        return batch, started, finished


# ---- One training loop with one loader ----------------------------------------------------------------

def new_trainer(s):
    torch.manual_seed(s["seed"])  # the same initial weights, and the same shuffles, for every loader
    model = MLP(SIDE * SIDE, s["hidden"], CLASSES).to(s["device"])
    return model, torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)


def resident_batches(s):
    """The ceiling's batches: loaded and decoded before the loop, already on the device."""
    files = ImageFiles(s["images"], min(s["steps"], RESIDENT_BATCHES) * BATCH)
    out = [[t.to(s["device"]) for t in b] for b in DataLoader(files, batch_size=BATCH, shuffle=True, collate_fn=keep_batch)]
    synchronize(s["device"])
    return out


def feed(s, choice, log, resident):
    """The batches as the loop meets them, each with the prefetcher's two events for its copy (or None).
    A generator: the loader starts when the loop asks for the first batch."""
    if choice.resident:
        for i in range(s["steps"]):
            yield resident[i % len(resident)], None
        return
    files = ImageFiles(s["images"], s["steps"] * BATCH, s["read_seconds"], log)
    loader = DataLoader(files, batch_size=BATCH, shuffle=True, num_workers=choice.workers, pin_memory=choice.pinned, collate_fn=keep_batch)
    if not choice.prefetch:
        yield from ((b, None) for b in loader)
        return
    ahead = CopyAhead(loader, s["device"])  # queues the first batch's copy on its copy stream
    for _ in range(s["steps"]):
        batch, started, finished = ahead.next()
        yield batch, (started, finished)


def train_loop(s, choice):
    """The loop, each step stamped on the host's clock and (on a GPU) with events on the stream."""
    device, gpu = s["device"], s["device"].type == "cuda"
    model, optimizer = new_trainer(s)
    running = torch.zeros((), device=device)
    stream = torch.cuda.current_stream(device) if gpu else None
    event = (lambda: torch.cuda.Event(enable_timing=True)) if gpu else (lambda: None)
    resident = resident_batches(s) if choice.resident else None
    synchronize(device)
    origin, clocks = event(), []
    start = time.perf_counter()
    log = LoadLog(start)  # stays empty for the ceiling, which loads nothing
    batches = feed(s, choice, log, resident)
    if gpu:
        origin.record(stream)  # the device was idle: it reaches this event at `start`, give or take a wake-up
    busy_before = lab.busy_seconds(device)  # where the device's runtime measures it
    asked = 0.0
    for _ in range(s["steps"]):
        c = dict(asked=asked, copy_start=event(), copy_end=event(), end=event())
        batch, c["ahead"] = next(batches)
        c["got"] = time.perf_counter() - start
        if gpu:
            c["copy_start"].record(stream)
        x, y = (t.to(device, non_blocking=choice.pinned) for t in batch)
        if gpu:
            c["copy_end"].record(stream)
        loss = F.cross_entropy(model(x), y)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        running += loss.detach()  # read once, after the loop: no sync in it
        if gpu:
            c["end"].record(stream)
        c["queued"] = asked = time.perf_counter() - start
        clocks.append(c)
    synchronize(device)
    seconds = time.perf_counter() - start
    busy = None if busy_before is None else lab.busy_seconds(device) - busy_before
    return measure(s, choice, clocks, origin, dict(seconds=seconds, busy=busy, loss=running.item() / s["steps"], loads=log.entries))


def covered_by(start, end, spans):
    """How much of [start, end] the spans (which do not overlap each other) cover."""
    return sum(max(0.0, min(end, b) - max(start, a)) for a, b in spans)


def measure(s, choice, clocks, origin, r):
    """What the clocks said: each step's start and end on the device's clock (CUDA events on a GPU, which
    the emulated GPU's streams stamp when they reach them; on the CPU the host's, where the step runs on
    the loop's thread), the waits, the copies, how long the device worked."""
    gpu = s["device"].type == "cuda"
    on_device = (lambda e: origin.elapsed_time(e) / 1000) if gpu else None
    for c in clocks:
        c["start"] = on_device(c["copy_start"]) if gpu else c["got"]
        c["copied"] = on_device(c["copy_end"]) if gpu else c["got"]
        c["stop"] = on_device(c["end"]) if gpu else c["queued"]
    ahead = [(on_device(a), on_device(b)) for a, b in (c["ahead"] for c in clocks if c["ahead"])]
    compute = [(c["copied"], c["stop"]) for c in clocks]
    r.update(choice=choice, steps=len(clocks), waiting=sum(c["got"] - c["asked"] for c in clocks))
    r["copy"] = sum(b - a for a, b in ahead) + sum(c["copied"] - c["start"] for c in clocks if not c["ahead"])
    r["overlapped_copy"] = sum(covered_by(a, b, compute) for a, b in ahead)
    # How long the device worked. The emulated GPU's streams time the kernels they run (what nvidia-smi's
    # GPU-Util counts). A GPU's stream is timed from each step's first copy to its last kernel: waits inside
    # a step -- a blocking copy's round trip to the host, a kernel queued late -- count as busy there, so
    # its busy share is an upper bound; the prefetcher's copies outside the steps count too. On the CPU:
    # the steps themselves.
    if r["busy"] is None:
        r["busy"] = sum(c["stop"] - c["start"] for c in clocks) + (r["copy"] - r["overlapped_copy"] if choice.prefetch else 0.0)
    r["busy"] = min(r["busy"], r["seconds"])
    r["timeline"], r["worker_lanes"] = timeline_of(clocks[:TIMELINE_STEPS], r["loads"], choice, gpu, ahead)
    return r


def timeline_of(shown, loads, choice, gpu, ahead):
    """The spans of the loop's first steps, from the moment it asked for the first batch."""
    t1 = max(shown[-1]["stop"], shown[-1]["queued"])
    loop, lanes, spans = threading.get_ident(), {}, []
    for thread, start, end in sorted(loads, key=lambda e: e[1]):
        if start > t1:
            continue
        lane = "loop" if thread == loop else lanes.setdefault(thread, f"worker {len(lanes) + 1}")
        spans.append((lane, "loads a batch", start, end))
    for i, c in enumerate(shown):
        batch = f"batch {i + 1}"
        # The prefetcher takes the batch after this one from the loader before it hands this one over.
        awaited = f"batch {i + 2} (loaded ahead)" if choice.prefetch else batch
        if choice.workers > 0:
            spans.append(("wait", f"waits for {awaited}", c["asked"], c["got"]))
        spans.append(("step", ("queues " if gpu else "runs ") + batch + "'s step", c["got"], c["queued"]))
        if gpu and choice.prefetch:
            spans += [("copy stream", f"copies {batch} in, ahead", *ahead[i]), ("compute", f"{batch}: forward, backward, step", c["start"], c["stop"])]
        elif gpu:
            spans += [("copy", f"copies {batch} in", c["start"], c["copied"]), ("compute", f"{batch}: forward, backward, step", c["copied"], c["stop"])]
    return spans, sorted(lanes.values())


# ---- The sweep -------------------------------------------------------------------------------------------

def workers_text(w):
    return "0 workers (the loop loads)" if w == 0 else f"{w} worker" + ("" if w == 1 else "s")


def choice_text(c, copies):
    if c.resident:
        return "batches already on the device (no loading: the ceiling)"
    if not copies:
        return workers_text(c.workers)
    if c.prefetch:
        return workers_text(c.workers) + ", pinned, copied ahead on a copy stream"
    return workers_text(c.workers) + (", pinned + non_blocking" if c.pinned else ", pageable")


def calibrate(s, load_cost):
    """A few steps thrown away first, as every benchmark does: a device's first steps pay once for loading
    its kernels, creating its cuBLAS handle and filling the caching allocators (pinned memory too). Then
    the step time that load_cost counts in: the median of CALIBRATION_RUNS runs with the batches already on
    the device (one run would carry whatever else the machine was doing into every read of the lab)."""
    warm_up = dict(s, steps=min(s["steps"], 8))
    train_loop(warm_up, CEILING)
    if s["device"].type == "cuda":
        train_loop(warm_up, Loader(0, True))
    steps = Spread.of([train_loop(s, CEILING)["seconds"] / s["steps"] for _ in range(CALIBRATION_RUNS)])
    s["read_seconds"] = load_cost * steps.median
    print(f"A training step with its batch already on {s['device']} takes {spread_text(steps.scaled(1e3), 'ms')} here, so each "
          f"batch's read waits {s['read_seconds'] * 1e3:.3g} ms (load_cost {load_cost:.3g}), then 128 images are decoded and "
          "augmented for real.")
    return steps.median


def sweep(s, choices, repeats, copies):
    """The loaders take turns, `repeats` rounds of all of them, so that a busy moment of the machine lands on
    no loader in particular. Each loader's speed is the median of its runs, with their range; its median
    run stands for it in the table's other columns and the timelines."""
    runs = {c: [] for c in choices}
    for rnd in range(repeats):
        for i, c in enumerate(choices):
            runs[c].append(train_loop(s, c))
            lab.progress(rnd * len(choices) + i + 1, repeats * len(choices), f"{choice_text(c, copies)} (round {rnd + 1} of {repeats})")
    median_run = {c: rs[median_index([r["seconds"] for r in rs])] for c, rs in runs.items()}
    speeds = {c: Spread.of([r["steps"] / r["seconds"] for r in rs]) for c, rs in runs.items()}
    return median_run, speeds


def idle_share(r):
    return 100 * (1 - r["busy"] / r["seconds"])


def waiting_share(r):
    return 100 * r["waiting"] / r["seconds"]


# ---- What the run shows ----------------------------------------------------------------------------------

def device_name(device):
    return "the emulated GPU" if is_emulated(device) else "the GPU" if device.type == "cuda" else "the CPU"


def table_note(device, repeats, copies):
    idle = (" (its stream times the kernels it runs; they run slower while workers share your cores, which makes it look busier -- "
            "judge by the speed)." if is_emulated(device) else
            " (on its own clock: events at each step's start and end, so a wait inside a step counts as work and this is a lower "
            "bound)." if device.type == "cuda" else
            " (the step runs on the loop's thread: the rest of the time the loop loads or waits; the steps run slower while workers "
            "share your cores -- judge by the speed).")
    return (f"Every loader ran {repeats} times, the loaders taking turns: steps/s is the median run's, range the slowest and the fastest "
            "run -- where two loaders' ranges overlap, their difference is within this machine's noise; the other columns are the median "
            "run's. Of the ceiling: the speed against the loop whose batches were already on the device -- what feeding can reach at best "
            f"(a loader a little above 100% is the noise). Device idle: the share of the loop during which {device_name(device)} did no "
            f"work{idle} Loop waiting: the share of the loop spent waiting for the next batch (with 0 workers: loading it); with pinned "
            "copies the loop no longer waits inside .to(), so it runs ahead and waits here instead." +
            (" Copy in: from the stream reaching a step's copies to their end; a blocking copy also holds the loop's round trip between "
             "its two copies. The prefetcher's: its copy stream's time for them, beside the compute stream's work." if copies else "") +
            " Every loader yields the same batches in the same order, so the losses agree: only the feeding differs.")


def show_table(runs, speeds, mine, device, repeats, copies):
    ceiling = speeds[CEILING].median
    lab.view("loaders", "Each loader: how fast, and how idle the device was", kind="table",
             columns=["loader", "steps/s", ("range", "steps/s"), ("of the ceiling", "%"), ("device idle", "%"), ("loop waiting", "%")] +
                     ([("copy in, a batch", "us")] if copies else []) + ["mean loss"],
             note=table_note(device, repeats, copies))
    for c in sorted(runs, key=sort_key):
        r, speed = runs[c], speeds[c]
        cells = [choice_text(c, copies) + (" (yours)" if c == mine else ""), speed.median, range_text(speed, 1.0, 4),
                 100 * speed.median / ceiling, idle_share(r), waiting_share(r)]
        lab.row("loaders", *cells, *([1e6 * r["copy"] / r["steps"]] if copies else []), r["loss"])


def show_bars(runs, device, copies):
    gpu = device.type == "cuda" and not is_emulated(device)
    lab.view("busy", "How busy the device was", kind="bars", y=("device busy", "%"), y_from_zero=True,
             series=[("pageable", "pageable" if copies else "device busy")] +
                    ([("pinned", "pinned + non_blocking"), ("prefetch", "pinned, copied ahead on a copy stream")] if copies else []),
             note="100% minus the device's idle share" +
                  (": an upper bound here (waits inside a step count as busy); nvidia-smi's GPU-Util counts only the time kernels run."
                   if gpu else ": what nvidia-smi's GPU-Util counts, the time the device was running work."))
    for c in sorted(runs, key=sort_key):
        if not c.resident:
            lab.bar("busy", "prefetch" if c.prefetch else "pinned" if c.pinned else "pageable", workers_text(c.workers), 100 - idle_share(runs[c]))


def show_timeline(view, title, r, device):
    gpu, c = device.type == "cuda", r["choice"]
    stream = "emulated GPU stream" if is_emulated(device) else "GPU stream"
    lanes = [("loop", "loop: loads") if c.workers == 0 else ("wait", "loop: waits for a batch"),
             ("step", "loop: runs the step" if not gpu else "loop: queues the step" if c.prefetch else "loop: copies, queues the step")]
    lanes += [(w, f"{w}: loads") for w in r["worker_lanes"]]
    if gpu and c.prefetch:
        lanes += [("copy stream", ("emulated GPU copy stream" if is_emulated(device) else "GPU copy stream") + ": copy in, ahead"),
                  ("compute", f"{stream}: compute")]
    elif gpu:
        lanes += [("copy", f"{stream}: copy in"), ("compute", f"{stream}: compute")]
    lab.view(view, title, kind="timeline", x=[("time", "s")], series=lanes,
             note=f"The loop's first {TIMELINE_STEPS} steps, from the moment it asked for the first batch. " +
                  ("The stream's spans are on the device's clock (events recorded on it); where the stream lane is empty the device had "
                   "nothing to do." if gpu else "On the CPU the step runs on the loop's own thread: while the loop loads, nothing trains."))
    for span in r["timeline"]:
        lab.span(view, *span)


def report(s, runs, speeds, mine, step, copies):
    own, none, four = runs[mine], runs[Loader(0, copies)], runs[Loader(4, copies)]
    ceiling = speeds[CEILING].median
    rate = lambda c: speeds[c].median  # noqa: E731
    lab.measurement("training step time", step * 1e3, "ms")
    lab.measurement("read wait per batch", s["read_seconds"] * 1e3, "ms")
    lab.measurement("workers (yours)", mine.workers)
    lab.measurement("steps/s (yours)", rate(mine), "steps/s")
    lab.measurement("steps/s with the batches already on the device", ceiling, "steps/s")
    for name, c in (("(yours)", mine), (", 0 workers", Loader(0, copies)), (", 4 workers", Loader(4, copies))):
        lab.measurement("speed, % of the ceiling" + (" " if name[0] == "(" else "") + name, 100 * rate(c) / ceiling, "%")
    fastest = max(rate(c) for c in runs if not c.resident and not c.prefetch)  # the prefetcher is shown, not offered
    lab.measurement("speed, % of the fastest loader (yours)", 100 * rate(mine) / fastest, "%")
    lab.measurement("device idle share (yours)", idle_share(own), "%")
    lab.measurement("device busy share (yours)", 100 - idle_share(own), "%")
    lab.measurement("loop waiting share (yours)", waiting_share(own), "%")
    lab.measurement("device idle share, 0 workers", idle_share(none), "%")
    lab.measurement("device idle share, 4 workers", idle_share(four), "%")
    lab.measurement("speed-up from 4 workers", rate(Loader(4, copies)) / rate(Loader(0, copies)), "x")
    for c, name in ((mine, "yours"), (Loader(0, copies), "0 workers"), (Loader(4, copies), "4 workers"), (CEILING, "the ceiling")):
        lab.measurement(f"steps/s, slowest run, {name}", speeds[c].low, "steps/s")
        lab.measurement(f"steps/s, fastest run, {name}", speeds[c].high, "steps/s")
    lab.measurement("speed-up from 1 worker", rate(Loader(1, copies)) / rate(Loader(0, copies)), "x")
    # The ceiling cycles over fewer batches: its loss is its own.
    lab.measurement("largest difference between the loaders' mean losses",
                    max(abs(r["loss"] - own["loss"]) for c, r in runs.items() if not c.resident), "")
    if copies:
        report_copies(runs, speeds)
    lab.record("feeding", step_ms=step * 1e3, workers=mine.workers, pin_memory=mine.pinned, steps_per_s=rate(mine),
               device_idle_pct=idle_share(own), device=str(s["device"]))


def report_copies(runs, speeds):
    for name, c in (("pageable", Loader(4, False)), ("pinned", Loader(4, True)), ("copy stream", Loader(4, True, prefetch=True))):
        r = runs[c]
        lab.measurement(f"copy time per batch, {name}", 1e6 * r["copy"] / r["steps"], "us")
        lab.measurement(f"steps/s, 4 workers, {name}", speeds[c].median, "steps/s")
        if not c.prefetch:
            lab.measurement(f"device idle share, 4 workers, {name}", idle_share(r), "%")
    ahead = runs[Loader(4, True, prefetch=True)]
    lab.measurement("copy time overlapping the steps, copy stream", 100 * ahead["overlapped_copy"] / ahead["copy"] if ahead["copy"] > 0 else 0.0, "%")


def say(s, runs, speeds, mine, copies):
    """In words: what the medians say, and only what the runs' spreads allow."""
    device = s["device"]
    of_ceiling = 100 * speeds[mine].median / speeds[CEILING].median
    steps = lambda c: speeds[c].reciprocal()  # noqa: E731  (seconds per step)
    noise = (" -- faster than it in every run, which no loader truly is: the two differ by how your CPU scheduled its threads"
             if compare(speeds[mine], speeds[CEILING]) > 0 else " (as fast, within the runs' noise)" if of_ceiling > 100 else "")
    said = (f"With {choice_text(mine, copies)} (yours): {spread_text(speeds[mine], 'steps/s', 4)}, {of_ceiling:.0f}% of the median speed "
            f"with the batches already on the device{noise}; {device_name(device)} idle {idle_share(runs[mine]):.1f}% of the time. The loop "
            f"loading its own batches: idle {idle_share(runs[Loader(0, copies)]):.1f}%; 4 workers: idle {idle_share(runs[Loader(4, copies)]):.1f}%. "
            f"A step with 4 workers {compared_times(steps(Loader(4, copies)), steps(Loader(0, copies)), 'a step with 0 workers')}.")
    if copies:
        said += (" With 4 workers, a step fed pinned batches with non_blocking copies "
                 f"{compared_times(steps(Loader(4, True)), steps(Loader(4, False)), 'one fed pageable batches')}.")
    if is_emulated(device):
        said += (" This is the emulated GPU: its stream is a thread on your CPU, so the workers' decoding competes with its kernels for your "
                 "cores; a GPU computes elsewhere and needs feeding all the faster.")
    print(said)


def run(device="auto", num_workers=0, pin_memory=False, load_cost=2.0, hidden="256,128", steps=40, repeats=5, seed=0):
    device = pick_device(device)
    copies = device.type == "cuda"  # on the CPU there is no copy: the batch is where the model is, and pinning changes nothing
    s = dict(device=device, images=make_images(seed), hidden=parse_widths(hidden), steps=steps, read_seconds=0.0, seed=seed)
    mine = Loader(num_workers, pin_memory and copies)
    # Every loader of the sweep: the ceiling, 0, 1, 2 and 4 workers (pageable and pinned where there are copies), the
    # four workers' pinned batches copied ahead on a copy stream (where there are copies), and yours.
    choices = [CEILING] + [Loader(w, p) for w in (0, 1, 2, 4) for p in ((False, True) if copies else (False,))]
    choices += [Loader(4, True, prefetch=True)] if copies else []
    choices = sorted(set(choices + [mine]), key=sort_key)
    try:
        step = calibrate(s, load_cost)
        runs, speeds = sweep(s, choices, repeats, copies)
    except KeyboardInterrupt:  # Stop: nothing measured, the device left idle
        synchronize(device)
        print("Stopped.")
        return
    show_table(runs, speeds, mine, device, repeats, copies)
    show_bars(runs, device, copies)
    show_timeline("timeline-naive", "Timeline: " + choice_text(Loader(0, False), copies), runs[Loader(0, False)], device)
    show_timeline("timeline-yours", "Timeline (yours): " + choice_text(mine, copies), runs[mine], device)
    if copies:
        prefetching = Loader(4, True, prefetch=True)
        show_timeline("timeline-prefetch", "Timeline: " + choice_text(prefetching, copies), runs[prefetching], device)
    report(s, runs, speeds, mine, step, copies)
    say(s, runs, speeds, mine, copies)
