"""What the course's labs share: formatting bytes, choosing the device, the regression task, the MLP,
and timing work on a device. A lab imports what it uses (`from lab_helpers import mib, pick_device`);
GPU Lab loads this file from the lessons' folder before the lab runs, and the code tab shows it below
every lab that imports it. `lab` is GPU Lab's, as in the labs themselves."""
import math
import os
import stat
import statistics
import time

import torch
from torch import nn
from torch.utils.checkpoint import checkpoint_sequential
from torch.utils.data import TensorDataset


def mib(nbytes):
    return f"{nbytes / 2**20:.2f} MiB"


def parse_widths(text, name="hidden"):
    """Hidden layer widths, "256,128,100" -> [256, 128, 100]."""
    try:
        widths = [int(w) for w in text.split(",")]
    except ValueError:
        raise ValueError(f"{name}: '{text}' is not a list of widths like 256,128,100") from None
    if not widths or min(widths) < 1 or max(widths) > 65536:
        raise ValueError(f"{name}: each width must be between 1 and 65536, not '{text}'")
    return widths


def cache_folder():
    """This user's folder for GPU Lab's files, ~/.cache/gpulab (XDG_CACHE_HOME's gpulab), made private
    when it is new; one that is a link or another user's is refused rather than written to."""
    base = os.environ.get("XDG_CACHE_HOME", "")
    base = base if base.startswith("/") else os.path.join(os.path.expanduser("~"), ".cache")
    folder = os.path.join(base, "gpulab")
    os.makedirs(base, exist_ok=True)
    try:
        os.mkdir(folder, 0o700)
    except FileExistsError:
        pass
    st = os.lstat(folder)
    if not stat.S_ISDIR(st.st_mode) or st.st_uid != os.geteuid():
        raise OSError(f"'{folder}' is not a folder of this user's: GPU Lab will not write there")
    return folder


# ---- Where a lab computes -------------------------------------------------------------------------

def resolve_device(name, emulated=False):
    """"auto": the GPU when one is usable, else the CPU; with `emulated`, GPU Lab's emulated GPU counts
    as one. (It is cuda:0 on a machine without a GPU, for the runs that ask for cuda by name.) A bare
    "cuda" is the current GPU."""
    gpu = torch.cuda.is_available() and (emulated or not torch.cuda.is_emulated())
    device = torch.device(("cuda" if gpu else "cpu") if name == "auto" else name)
    if device.type == "cuda" and device.index is None:
        device = torch.device("cuda", torch.cuda.current_device())
    return device


def announce(device, why=""):
    """Where the run computes, labelled as everywhere in GPU Lab, in the run's views and its console."""
    lab.device(device)
    print(f"Running on {torch._C._device_label(device)}{why}")


def pick_device(name):
    """resolve_device(name), said -- with why there is no GPU when there is none."""
    device = resolve_device(name)
    announce(device, "" if device.type == "cuda" or torch.cuda.is_available() else f" (no usable GPU: {torch._C._cuda_unavailable_reason()})")
    return device


def gpu_for(device, why):
    """A lab about a GPU: "auto" is cuda (a real GPU, else the emulated one); anything else is refused
    with `why` ("the memory lab fills a GPU's memory")."""
    gpu = torch.device("cuda" if device == "auto" else device)
    if gpu.type != "cuda":
        raise ValueError(f"device: {why}; '{device}' is not a GPU (cuda, cuda:N)")
    if not torch.cuda.is_available():
        raise ValueError(f"device: {why}, and there is no usable GPU and the emulated GPU is off")
    return torch.device("cuda", torch.cuda.current_device() if gpu.index is None else gpu.index)


def is_emulated(device):
    return device.type == "cuda" and torch.cuda.is_emulated(device)


def synchronize(device):
    """Waits for the device's queued work: a GPU's kernels run after the call that queued them returns."""
    if device.type == "cuda":
        torch.cuda.synchronize(device)


# ---- The memory a lab measures -----------------------------------------------------------------------
# torch.cuda's counters on a GPU; on the CPU, GPU Lab's host allocator's (lab.memory_stats: PyTorch
# keeps none there). Each read waits for the device first: a temporary's memory returns to the
# allocator when the kernels that use it have run, so an unsettled count would depend on timing.

def allocated(device):
    synchronize(device)
    if device.type == "cuda":
        return torch.cuda.memory_allocated(device)
    return lab.memory_stats(device)["allocated_bytes.all.current"]


def peak_allocated(device):
    """The most allocated at once since the last reset_peak(device)."""
    synchronize(device)
    if device.type == "cuda":
        return torch.cuda.max_memory_allocated(device)
    return lab.memory_stats(device)["allocated_bytes.all.peak"]


def reset_peak(device):
    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats(device)
    else:
        lab.reset_peak_memory_stats(device)


def seconds_on(device, work):
    """Seconds `work()` takes on `device`, its queued kernels included (a synchronize on both sides)."""
    synchronize(device)
    start = time.perf_counter()
    work()
    synchronize(device)
    return time.perf_counter() - start


def median(values):
    return statistics.median(values)


# ---- The data and the model -------------------------------------------------------------------------

def regression_set(samples, seed, features=16):
    """The course's regression task: 16 features (or `features`) whose target comes from a fixed linear
    teacher plus a little noise, so that there is something to learn -- the same teacher whatever the seed."""
    torch.manual_seed(1234)
    w, b = torch.randn(features, 1) / 4, torch.randn(1) / 2
    torch.manual_seed(seed)
    x = torch.randn(samples, features)
    return TensorDataset(x, x @ w + b + 0.1 * torch.randn(samples, 1))


def first_examples(dataset, n):
    """The data set's first n examples (all of them when n is 0 or not smaller)."""
    return TensorDataset(*(t[:n] for t in dataset.tensors)) if 0 < n < len(dataset) else dataset


class MLP(nn.Module):
    """Flatten, then Linear + ReLU for each hidden width, then the output layer; `features` (layers,
    conv_features' say) run first. With `segments`, the hidden blocks run under checkpoint_sequential
    while training: only each segment's input is kept for backward, the rest is recomputed there."""

    def __init__(self, in_features, hidden, outputs, segments=0, features=()):
        super().__init__()
        if features:
            self.features = nn.Sequential(*features)
        widths = [in_features] + list(hidden)
        blocks = []
        for a, b in zip(widths, widths[1:]):
            blocks += [nn.Linear(a, b), nn.ReLU()]
        self.flatten = nn.Flatten()
        self.body = nn.Sequential(*blocks)
        self.head = nn.Linear(widths[-1], outputs)
        self.segments = min(segments, len(blocks))

    def forward(self, x):
        if hasattr(self, "features"):
            x = self.features(x)
        x = self.flatten(x)
        x = checkpoint_sequential(self.body, self.segments, x) if self.segments and self.training else self.body(x)
        return self.head(x)

    def linears(self):
        return [m for m in self.modules() if isinstance(m, nn.Linear)]


def conv_features(example_shape):
    """Two blocks of Conv2d (no bias: the batch norm's shift replaces it), BatchNorm2d, ReLU and
    MaxPool2d, then Flatten; and how many features they give an example."""
    channels, height, width = example_shape
    layers = [nn.Conv2d(channels, 32, 3, padding=1, bias=False), nn.BatchNorm2d(32), nn.ReLU(), nn.MaxPool2d(2),
              nn.Conv2d(32, 64, 3, padding=1, bias=False), nn.BatchNorm2d(64), nn.ReLU(), nn.MaxPool2d(2), nn.Flatten()]
    return layers, 64 * (height // 4) * (width // 4)  # 3 x 3 with padding 1 keeps the size; each pooling halves it


def cnn(example_shape, hidden, outputs):
    """conv_features, then a classifier of Linear + ReLU layers -- the batch norm is what lets this
    small net pass 0.92 on Fashion-MNIST in a few epochs without overfitting."""
    layers, features = conv_features(example_shape)
    widths = [features] + list(hidden)
    for a, b in zip(widths, widths[1:]):
        layers += [nn.Linear(a, b), nn.ReLU()]
    return nn.Sequential(*layers, nn.Linear(widths[-1], outputs))


def explain_oom(held, request, cached=None, largest=()):
    """What memory held when an allocation of `request` bytes failed -- `held`: bytes by category
    (parameter, gradient, optimizer_state, activation, input_batch, ...), `cached`: reserved but
    unused, `largest`: (bytes, category) of the largest live tensors -- and the fixes ranked by what
    each would free on this run (estimates from those bytes; not empty_cache(): before raising, the
    allocator has already returned every cached segment it could)."""
    lab.view("oom-memory", "At the failed allocation: what memory held", kind="bars", y=("memory", "bytes"), y_from_zero=True,
             series=[("bytes", "bytes")],
             note="Live tensors by category when the allocation failed; " +
                  ('"cached": reserved but unused (in segments that live tensors share); ' if cached is not None else "") +
                  '"request": the allocation that failed.')
    for category, size in held.items():
        if size:
            lab.bar("oom-memory", "bytes", category.replace("_", " "), size)
    if cached is not None:
        lab.bar("oom-memory", "bytes", "cached", cached)
    lab.bar("oom-memory", "bytes", "request", request)
    if largest:
        lab.view("oom-tensors", "The largest tensors at the failure", kind="table", columns=[("size", "bytes"), "category"])
        for size, category in sorted(largest, reverse=True)[:8]:
            lab.row("oom-tensors", size, category.replace("_", " "))
    model = held.get("parameter", 0) + held.get("gradient", 0) + held.get("optimizer_state", 0)
    batch = held.get("activation", 0) + held.get("input_batch", 0)
    fixes = sorted([("halve batch_size, double accumulate (the same effective batch)", batch // 2),
                    ("SGD with momentum instead of Adam (one state tensor, not two)", held.get("optimizer_state", 0) // 2),
                    ("halve every hidden width (at least half the model and its activations)", model // 2 + held.get("activation", 0) // 2)],
                   key=lambda fix: -fix[1])
    lab.view("oom-fixes", "Fixes, ranked by what they would free on this run", kind="table", columns=["fix", ("frees about", "bytes"), "enough?"],
             note=f"Estimates from the memory held at the failure; the request that failed was {mib(request)}.")
    for fix, frees in fixes:
        if frees > 0:
            lab.row("oom-fixes", fix, frees, "yes" if frees >= request else "no")


def refuse_what_cannot_fit(convolutional, example_shape, hidden, outputs, batch_size, examples):
    """On the CPU, a step that would take more than half of the free memory is refused before anything
    is allocated: the system would swap, or end the program, long before an allocation failed. The
    estimate is float32 numbers: the model with its gradients and Adam's two moments, and a step's
    activations a example, with a margin of 1.5 (calibrated against this engine's measured peaks)."""
    plane = example_shape[1] * example_shape[2] if convolutional else 1
    inputs = 64 * plane // 16 if convolutional else math.prod(example_shape)
    widths = [inputs] + hidden + [outputs]
    state = 4 * 4 * sum(a * b + b for a, b in zip(widths, widths[1:]))
    per_example = 4 * 1.5 * (inputs + outputs + 2 * sum(hidden))
    if convolutional:  # conv, norm and ReLU outputs, then the pooled ones with their indices; the column buffers' workspace
        state += 4 * 4 * (9 * 32 + 9 * 32 * 64) + 64 * 2**20
        per_example += 4 * 1.5 * (example_shape[0] * plane + 3 * 32 * plane * 5 / 4 + 3 * 64 * plane * 5 / 16)
    free = lab.memory_stats("cpu")["free_bytes"]
    batch = min(batch_size, examples)
    for needs, what, advice in [(state, f"hidden {','.join(map(str, hidden))}: the model with its gradients and optimizer state",
                                 "choose narrower layers"),
                                (state + batch * per_example,
                                 f"batch_size {batch_size}" + (f" (the whole training set, {batch})" if batch < batch_size else "") +
                                 f": a training step of this {'CNN' if convolutional else 'MLP'}",
                                 f"choose a batch_size of at most {max(1, int((free / 2 - state) / per_example))}")]:
        if needs > free / 2:
            raise ValueError(f"{what} needs about {needs / 2**30:.3g} GiB of the CPU's memory, more than half of the "
                             f"{free / 2**30:.3g} GiB this machine has free: {advice}")


# ---- Timed claims that hold on a noisy machine -------------------------------------------------------
# A laptop's timings drift -- other programs, the clock's boost, a cold cache -- by as much as many of
# the differences a lesson shows. So a lab that compares times repeats each measurement, interleaved
# (A, B, A, B, ...) so that a slow moment of the machine hits both sides alike; reports the median and
# the spread (the fastest and the slowest run); and calls one side faster only when the spreads do not
# overlap -- every run of one beat every run of the other. Otherwise it says "no clear difference here".

class Spread:
    """Repeated runs of one measurement: their median and their range. From 10 runs on, the range sets
    aside the fastest and the slowest tenth: one run that met another program's burst says nothing
    about the code, and would hide any difference behind it."""

    def __init__(self, median, low, high, runs):
        self.median, self.low, self.high, self.runs = median, low, high, runs

    @classmethod
    def of(cls, samples):
        if not samples:
            return cls(float("nan"), float("nan"), float("nan"), 0)
        s = sorted(samples)
        trimmed = len(s) // 10
        return cls(statistics.median(s), s[trimmed], s[-1 - trimmed], len(s))

    def reciprocal(self, numerator=1.0):
        """The same runs as rates (seconds -> steps per second): 1/x turns the slowest run into the lowest rate."""
        return Spread(numerator / self.median, numerator / self.high, numerator / self.low, self.runs)

    def scaled(self, factor):
        return Spread(self.median * factor, self.low * factor, self.high * factor, self.runs)


def compare(a, b):
    """-1 when `a` is clearly lower (its highest run below b's lowest), 1 when clearly higher, 0 when
    there is no clear difference (the ranges overlap, or either side ran once: one run shows no spread)."""
    if a.runs < 2 or b.runs < 2:
        return 0
    return -1 if a.high < b.low else 1 if a.low > b.high else 0


def compare_beyond_spread(a, b):
    """compare(), and by more than the noise: the medians further apart than either range is wide --
    for a claim that names a turning point, which two ranges that merely fail to touch would name."""
    d = compare(a, b)
    return d if d and abs(a.median - b.median) > max(a.high - a.low, b.high - b.low) else 0


def readable(v, significant=3):
    """A number with `significant` digits, whole numbers up to a billion written out: 12.3, 0.0456, 12345."""
    return f"{v:.0f}" if 10**significant <= abs(v) < 1e9 else f"{v:.{significant}g}"


def range_text(s, scale=1.0, significant=3):
    return f"{readable(s.low * scale, significant)} to {readable(s.high * scale, significant)}"


def spread_text(s, unit, significant=3):
    """"12.3 ms (11.0 to 14.1, 5 runs)": the median, then the range it came from."""
    u = f" {unit}" if unit else ""
    if s.runs == 0:
        return "not measured"
    if s.runs == 1:
        return f"{readable(s.median, significant)}{u} (1 run)"
    return f"{readable(s.median, significant)}{u} ({range_text(s, 1.0, significant)}, {s.runs} runs)"


def median_index(values):
    """Which of `values` is the median (the lower middle of an even count): the run that stands for its
    repeats where a view shows one run."""
    order = sorted(range(len(values)), key=lambda i: values[i])
    return order[(len(order) - 1) // 2] if order else 0


def faster_or_slower(ratio):
    return f"{ratio:.3g}x faster" if ratio >= 1 else f"{1 / ratio:.3g}x slower"


def compared_times(seconds, other_seconds, other):
    """A sentence's end that says what the runs allow of one thing against another, both Spreads of
    seconds: "was 1.52x faster than <other> in every run (medians ...)", or "showed no clear difference"."""
    larger = max(seconds.median, other_seconds.median)
    factor, unit = (1.0, "s") if larger >= 1 else (1e3, "ms") if larger >= 1e-3 else (1e6, "us")
    a, b = seconds.scaled(factor), other_seconds.scaled(factor)
    medians = f"medians {readable(a.median)} {unit} and {readable(b.median)} {unit}"
    if compare(seconds, other_seconds):
        trimmed = "the outlying tenth set aside; " if seconds.runs >= 10 or other_seconds.runs >= 10 else ""
        return f"was {faster_or_slower(other_seconds.median / seconds.median)} than {other} in every run ({trimmed}{medians})"
    if seconds.runs < 2 or other_seconds.runs < 2:
        return (f"showed no clear difference from {other}: one run each shows no spread, so noise cannot be told from a "
                f"difference ({medians}; more repeats tell)")
    return (f"showed no clear difference from {other} here: their runs' spreads overlap ({spread_text(a, unit)} against "
            f"{spread_text(b, unit)})")
