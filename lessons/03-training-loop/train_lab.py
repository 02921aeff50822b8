"""The training loop of lessons 03, 05 and 07: a model trained and evaluated, as PyTorch's tutorials
write it, with the switches each lesson turns.

    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    model = MLP(...).to(device)
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
    for epoch in range(epochs):
        model.train()
        for x, y in train_loader:
            x, y = x.to(device), y.to(device)
            loss = loss_fn(model(x), y)
            optimizer.zero_grad(); loss.backward(); optimizer.step()
        model.eval()
        with torch.no_grad(): ...evaluate...

Lesson 05 trains under a memory cap (set_per_process_memory_fraction) with gradient accumulation;
lesson 07 under autocast, with a GradScaler for float16; `cuda_graph` captures the whole step in a
CUDA graph. Five switches (move_model, move_batch, zero_grad, eval_no_grad, detach_loss) each undo
one good habit, so that the learner meets the real failure.

GPU Lab runs this file as it is, in a Python session of its own, with `import torch` giving its
engine; on a machine without a GPU, cuda:0 is GPU Lab's emulated GPU. `lab` (GPU Lab's) draws the
views: lab.view declares one, lab.point / row / marker fill it, lab.measurement reports a number a
challenge grades, lab.record a line for scripts (gpulab-cli --json).
"""
import math
import re
import time

import torch
import torch.nn.functional as F
from torch.utils.data import DataLoader

from lab_helpers import (MLP, conv_features, explain_oom, first_examples, mib, parse_widths, pick_device, refuse_what_cannot_fit,
                         regression_set, reset_peak)


def loss_text(loss):
    """A loss as the progress label and the summary both show it: 4 decimals, or 4 digits once it is huge."""
    return f"{loss:.4f}" if abs(loss) < 1e6 else f"{loss:.4g}"


# ---- Where the run computes, and the memory it holds there ----------------------------------------

def memory(device):
    """Bytes allocated and reserved now, and their peaks since the last reset_peak(): torch.cuda's
    counters on a GPU; on the CPU, GPU Lab's host allocator's (PyTorch keeps none)."""
    if device.type == "cuda":
        return dict(allocated=torch.cuda.memory_allocated(device), reserved=torch.cuda.memory_reserved(device),
                    peak=torch.cuda.max_memory_allocated(device), peak_reserved=torch.cuda.max_memory_reserved(device))
    s = lab.memory_stats(device)
    return dict(allocated=s["allocated_bytes.all.current"], reserved=s["reserved_bytes.all.current"],
                peak=s["allocated_bytes.all.peak"], peak_reserved=s["reserved_bytes.all.peak"])


# ---- The data and the model -------------------------------------------------------------------------

def make_data(dataset, samples, train_subset, seed):
    """The training and test sets, on the CPU (batches move to the device as they are used): Fashion-
    MNIST, or the regression task -- 16 features whose target comes from a fixed linear teacher plus a
    little noise, so that there is something to learn."""
    if dataset == "fashion-mnist":
        train, test, outputs = lab.fashion_mnist(train=True), lab.fashion_mnist(train=False), 10
    else:  # the same teacher for both sets, whatever the seed
        train, test = regression_set(samples, seed), regression_set(256, seed + 1)
        outputs = 1
    return first_examples(train, train_subset), test, outputs


def make_model(cnn, example_shape, hidden, outputs, segments):
    """mlp: Flatten, then Linear + ReLU for each hidden width, then the output layer. cnn: two blocks
    of Conv2d, BatchNorm2d, ReLU and MaxPool2d first (lab_helpers' conv_features). With `segments`,
    the hidden blocks run under checkpoint_sequential: their activations are recomputed in backward
    instead of stored."""
    features, in_features = conv_features(example_shape) if cnn else ((), math.prod(example_shape))
    return MLP(in_features, hidden, outputs, segments, features)


def make_optimizer(name, parameters, lr, momentum, weight_decay, capturable):
    if name == "sgd":
        return torch.optim.SGD(parameters, lr=lr, momentum=momentum, weight_decay=weight_decay)
    kind = torch.optim.AdamW if name == "adamw" else torch.optim.Adam
    return kind(parameters, lr=lr, weight_decay=weight_decay, capturable=capturable)


def loss_fn(classification, output, target, reduction="mean"):
    return F.cross_entropy(output, target, reduction=reduction) if classification else F.mse_loss(output, target, reduction=reduction)


def amp_dtype(amp):
    """autocast's dtype for the `amp` setting, or None (float32)."""
    return {"fp16": torch.float16, "bf16": torch.bfloat16}.get(amp)


# ---- Settings a run refuses, and the cause of a diverged one ---------------------------------------

def check_settings(p, device):
    if p["model"] == "cnn" and p["dataset"] != "fashion-mnist":
        raise ValueError("--model cnn convolves images, and the regression data set's examples are 16 numbers, not an image: "
                         "use --dataset fashion-mnist with the cnn, or --model mlp for regression")
    if not p["cuda_graph"]:
        return

    def refuse(why):
        raise ValueError(f"cuda_graph: {why}")

    # A captured step replays one fixed step: what changes the step from batch to batch, or exists to
    # show a mistake, cannot be captured.
    if device.type != "cuda":
        refuse(f"a CUDA graph captures GPU work, and this run is on {device}: choose a cuda device (the emulated GPU captures too)")
    if p["accumulate"] != 1:
        refuse("a captured step is one whole optimizer step: set accumulate to 1")
    if p["amp"] == "fp16" and p["grad_scaler"]:
        refuse("the GradScaler reads on the host whether a step's gradients overflowed, and nothing may be read from the device "
               "during a capture: use amp bf16 (no scaler needed) or none")
    if p["lr_schedule"] != "constant":
        refuse("the learning rate is captured with the step: keep lr_schedule constant")
    for habit in ("move_model", "move_batch", "zero_grad", "detach_loss"):
        if not p[habit]:
            refuse(f"the fault sandbox's switches are for eager steps: turn {habit} back on")


def likely_divergence_cause(p):
    lr, sgd = p["lr"], p["optimizer"] == "sgd"
    if not p["zero_grad"]:
        return ("optimizer.zero_grad() is never called, so every step adds this step's gradients to all the earlier ones and the "
                "steps grow until they overshoot. Call zero_grad() after each optimizer step.")
    fp16 = ""
    if p["amp"] == "fp16":
        fp16 = ("an activation overflowed float16 (above 65504) in the forward pass: the GradScaler guards the gradients, not the "
                "forward pass. Try a lower learning rate, or bf16, whose range is float32's." if p["grad_scaler"] else
                "float16 without a GradScaler: a gradient or an activation grew past float16's largest value, 65504, became inf, "
                "and nothing kept it from the weights (inf - inf is NaN). With grad_scaler on, a step whose gradients hold an inf "
                "or NaN is skipped and the scale lowered; bf16 has float32's range and needs no scaler.")
    if (sgd and lr > 0.5) or (not sgd and lr > 0.05):
        return (f"the learning rate lr={lr:g} is far too high for {p['optimizer']}: each step overshoots the minimum by more than "
                f"the last. Try lr={0.01 if sgd else 0.001:g}." + (f" Under float16 autocast there is a second suspect -- {fp16}" if fp16 else ""))
    return fp16 or "a learning rate too high for this model and data (try one ten times lower), or inputs with a very large range."


# ---- The views ------------------------------------------------------------------------------------

AXES = [("step", ""), ("samples seen", ""), ("time", "s")]  # runs with different batches compare fairly


def declare_views(device, classification, scaler):
    lab.view("loss", "Loss", x=AXES, y="loss", series=[("train", "train loss"), ("eval", "eval loss", "points")])
    lab.view("memory", f"Memory on {device}", x=AXES, y=("memory", "bytes"), y_from_zero=True,
             series=[("allocated", "allocated (memory_allocated)"), ("reserved", "reserved (memory_reserved)", "dashed")],
             note="What nvidia-smi sees beside these: lesson 04's report." if device.type == "cuda" else "")
    lab.level("memory", "capacity", lab.memory_stats(device)["total_bytes"])
    emulated = device.type == "cuda" and torch.cuda.is_emulated(device)
    lab.view("throughput", "Throughput", x=AXES, y=("throughput", "samples/s"), y_from_zero=True,
             series=[("throughput", "training samples per second")],
             note="Measured on your CPU: the emulated GPU computes there, so this is your CPU's speed, not a GPU's. Its kernels run "
                  "on a queue of their own beside the training loop, so it can differ from a cpu run either way." if emulated else "")
    lab.view("epochs", "Epochs", kind="table",
             columns=["epoch", "train loss", "eval loss"] + (["test accuracy"] if classification else []) + [("time", "s")])
    if scaler.is_enabled():
        lab.view("scale", "GradScaler's loss scale (skipped steps marked)", x=AXES, y="scale", y_from_zero=True,
                 series=[("scale", "loss scale", "steps")],
                 note="A step whose gradients hold an inf or NaN is skipped and the scale halves; after 2000 clean steps it doubles.")


def set_memory_cap(device, cap_mb):
    """torch.cuda.set_per_process_memory_fraction, from a cap in MiB so that it means the same on
    every device; returns the fraction it replaced, to be put back when the run ends."""
    if device.type != "cuda":
        raise ValueError(f"memory_cap_mb: set_per_process_memory_fraction caps a GPU's allocator, and this run is on {device}: "
                         "choose a cuda device (the emulated GPU too), or memory_cap_mb 0")
    total = torch.cuda.mem_get_info(device)[1]
    fraction = min(1.0, cap_mb * 2**20 / total)
    torch.cuda.set_per_process_memory_fraction(fraction, device)
    print(f'set_per_process_memory_fraction({fraction:.6g}, "{device}"): at most {mib(fraction * total)} of {mib(total)}')
    lab.level("memory", "memory cap", fraction * total)
    lab.measurement("memory cap", cap_mb * 2**20, "bytes")  # raising the cap is no way to fit a batch


def requested_bytes(message):
    """The size PyTorch's out-of-memory message names: "Tried to allocate 2.00 GiB"."""
    found = re.search(r"Tried to allocate ([\d.]+) (bytes|KiB|MiB|GiB|TiB)", message)
    return int(float(found[1]) * 1024 ** ["bytes", "KiB", "MiB", "GiB", "TiB"].index(found[2])) if found else 0


# ---- One epoch of training, and the evaluation after it ---------------------------------------------

class Window:
    """The steps since the last report: their summed loss (on the device), count, samples and start."""

    def __init__(self, zero, start):
        self.loss, self.steps, self.samples, self.start = zero, 0, 0, start


class Run:
    """The loop's state across epochs: steps and samples seen, training time, what the GradScaler skipped."""

    def __init__(self, p, device, classification, categories=None):
        self.p, self.device, self.classification = p, device, classification
        self.categories = categories  # lab.memory_by_category under a memory cap, else None
        self.steps = self.samples = 0
        self.seconds = 0.0
        self.skipped = self.skipped_in_window = self.skip_markers = 0
        self.last_scale = None
        self.diverged = False
        self.diverged_at = ""             # "the loss became inf at step 26", once it diverged
        self.graph = None  # cuda_graph: (g, static_x, static_y, static_loss), captured at the first batch

    def at(self, extra_samples=0, extra_seconds=0.0):
        return [self.steps, self.samples + extra_samples, self.seconds + extra_seconds]

    def add(self, total, loss):
        """The running sum: detached, as loss.item() would be -- or (the mistake) with the step's graph."""
        return total + (loss.detach() if self.p["detach_loss"] else loss)

    def capture(self, model, optimizer, x, y, forward):
        """torch.cuda.graph: three warm-up steps on a side stream (they train too), then the whole step
        -- forward, backward, optimizer -- captured once; every batch after is a copy_ and a replay."""
        static_x, static_y = x.clone(), y.clone()
        side = torch.cuda.Stream(self.device)
        side.wait_stream(torch.cuda.current_stream(self.device))
        with torch.cuda.stream(side):
            for _ in range(3):
                optimizer.zero_grad(set_to_none=True)
                forward(static_x, static_y).backward()
                optimizer.step()
        torch.cuda.current_stream(self.device).wait_stream(side)
        g = torch.cuda.CUDAGraph()
        optimizer.zero_grad(set_to_none=True)
        with torch.cuda.graph(g):
            static_loss = forward(static_x, static_y)
            static_loss.backward()
            optimizer.step()
        self.graph = (g, static_x, static_y, static_loss)
        emulated = torch.cuda.is_emulated(self.device)
        # num_nodes() is GPU Lab's: what one replay launches (PyTorch's CUDAGraph does not say).
        print(f"torch.cuda.graph: 3 warm-up steps on the first batch (they train too), then the whole step captured as one graph "
              f"of {g.num_nodes()} kernels and copies, replayed for every batch" + (" (on the emulated GPU the replay queues the recorded CPU kernels as one task: no timing "
                                            "is drawn from it)" if emulated else ""))

    def train_one_epoch(self, epoch, model, optimizer, scheduler, scaler, loader, stop_after):
        """Returns the epoch's mean train loss, or None when it was cut short (diverged). Its time
        counts as training time however it ends (Stop, an error)."""
        start = time.perf_counter()
        try:
            return self.steps_of_an_epoch(epoch, model, optimizer, scheduler, scaler, loader, stop_after, start)
        finally:
            self.seconds += time.perf_counter() - start

    def steps_of_an_epoch(self, epoch, model, optimizer, scheduler, scaler, loader, stop_after, start):
        accumulate, batches = self.p["accumulate"], len(loader)
        steps_per_epoch = -(-batches // accumulate)
        forward = self.forward_of(model)
        model.train()
        zero = torch.zeros((), device=self.device)
        window = Window(zero, start)
        epoch_loss = group_loss = zero
        epoch_steps = group_samples = 0
        for micro, (x, y) in enumerate(loader, 1):
            # The gradients add up over `accumulate` micro-batches, then one optimizer step.
            group_loss = self.add(group_loss, self.micro_batch(model, optimizer, scaler, forward, x, y))
            group_samples += len(x)
            in_group = (micro - 1) % accumulate + 1
            if in_group < accumulate and micro < batches:
                continue
            self.optimizer_step(optimizer, scheduler, scaler, group_samples, start)
            window.loss = self.add(window.loss, group_loss / in_group if in_group > 1 else group_loss)  # no op for a group of one
            window.steps += 1
            window.samples += group_samples
            self.steps += 1
            self.samples += group_samples
            epoch_steps += 1
            group_loss, group_samples = zero, 0
            if self.steps % self.p["log_every"] and epoch_steps != steps_per_epoch:
                continue
            if not self.report(window, epoch, scaler, stop_after, start):
                return None
            epoch_loss = self.add(epoch_loss, window.loss)
            window = Window(zero, time.perf_counter())
        if window.steps:
            epoch_loss = self.add(epoch_loss, window.loss)
        return epoch_loss.item() / max(epoch_steps, 1)

    def forward_of(self, model):
        """The forward pass and the loss, under autocast with amp (the loss in float32 there too)."""
        autocast = amp_dtype(self.p["amp"])

        def forward(x, y):
            with torch.autocast(self.device.type, dtype=autocast, enabled=autocast is not None):
                return loss_fn(self.classification, model(x), y)
        return forward

    def micro_batch(self, model, optimizer, scaler, forward, x, y):
        """One micro-batch moved to the device, forward and backward (through the scaler, with its
        share 1/accumulate of the loss); with cuda_graph, copied into the captured step's inputs and
        replayed. Returns its loss."""
        p, device = self.p, self.device
        if p["move_batch"]:
            with lab.memory_category("input_batch"):
                x, y = x.to(device, non_blocking=p["pin_memory"]), y.to(device, non_blocking=p["pin_memory"])
        if p["cuda_graph"]:
            if self.graph is None:
                self.capture(model, optimizer, x, y, forward)
            g, static_x, static_y, static_loss = self.graph
            static_x.copy_(x)
            static_y.copy_(y)
            g.replay()
            return static_loss
        loss = forward(x, y)
        scaler.scale(loss / p["accumulate"] if p["accumulate"] > 1 else loss).backward()
        return loss

    def optimizer_step(self, optimizer, scheduler, scaler, group_samples, start):
        """The optimizer step (which the scaler skips when a gradient is inf or NaN); the gradients are
        freed for the next group. A captured step has stepped in its replay."""
        if self.p["cuda_graph"]:
            return
        scale = scaler.get_scale()
        scaler.step(optimizer)
        scaler.update()
        if scheduler:
            scheduler.step()
        if self.p["zero_grad"]:
            optimizer.zero_grad()
        if scaler.is_enabled():
            self.follow_scale(scale, scaler.get_scale(), group_samples, time.perf_counter() - start)

    def report(self, window, epoch, scaler, stop_after, start):
        """The steps since the last report on the views: one .item() a report, not one a step (.item()
        waits for the GPU). False when the loss diverged."""
        p = self.p
        mean = window.loss.item() / window.steps
        now = time.perf_counter()
        x_at = self.at(extra_seconds=now - start)
        if not math.isfinite(mean):
            self.say_diverged(mean, epoch, x_at)
            lab.progress(self.steps, stop_after, f"epoch {epoch}/{p['epochs']}: the loss became {mean} at step {self.steps}")
            return False
        throughput = window.samples / (now - window.start)
        now_held = memory(self.device)
        lab.point("loss", "train", x_at, mean)
        lab.point("memory", "allocated", x_at, now_held["allocated"])
        lab.point("memory", "reserved", x_at, now_held["reserved"])
        lab.point("throughput", "throughput", x_at, throughput)
        if scaler.is_enabled():
            lab.point("scale", "scale", x_at, scaler.get_scale())
        lab.record("step", epoch=epoch, step=self.steps, loss=mean, samples_per_s=throughput, allocated_bytes=now_held["allocated"],
                   reserved_bytes=now_held["reserved"], elapsed_s=x_at[2], loss_scale=scaler.get_scale(), skipped=self.skipped_in_window)
        self.skipped_in_window = 0
        # The mean of the steps since the last report: the epoch's own mean, what the summary calls its
        # train loss, follows in run() once the epoch is over.
        lab.progress(self.steps, stop_after, f"epoch {epoch}/{p['epochs']}, loss {loss_text(mean)} (last {window.steps} steps)")
        if self.categories:
            self.categories.update()  # takes in the events so far, so that they do not pile up
        return True

    def follow_scale(self, before, after, group_samples, seconds):
        """The GradScaler's scale on its view: a step it skipped lowered the scale."""
        at = [self.steps + 1, self.samples + group_samples, self.seconds + seconds]
        if after < before:
            self.skipped += 1
            self.skipped_in_window += 1
            self.skip_markers += 1
            if self.skip_markers <= 40:
                lab.marker("scale", at, "skipped", "skipped")
        if after != self.last_scale:
            lab.point("scale", "scale", at, after)
        self.last_scale = after

    def say_diverged(self, mean, epoch, x_at, what="loss"):
        self.diverged = True
        self.diverged_at = f"the {what} became {mean} at step {self.steps}"
        lab.marker("loss", x_at, f"{what} is {mean}")
        lab.message(f"The {what} became {mean} at step {self.steps} (epoch {epoch}): the run diverged, so it stopped. "
                    f"Likely cause: {likely_divergence_cause(self.p)}", "warning")
        lab.record("diverged", step=self.steps, epoch=epoch)

    def evaluate(self, model, loader):
        """The test set under torch.no_grad() (eval_no_grad off: recording a graph it never uses);
        returns the mean loss, the accuracy (None for regression), and what the pass held and peaked
        at above the memory in use before it."""
        p, device = self.p, self.device
        autocast = amp_dtype(p["amp"])
        model.eval()
        before = memory(device)["allocated"]
        reset_peak(device)
        total, correct, count = torch.zeros((), device=device), torch.zeros((), dtype=torch.int64, device=device), 0
        with torch.set_grad_enabled(not p["eval_no_grad"]):
            for x, y in loader:
                if p["move_batch"]:
                    x, y = x.to(device), y.to(device)
                with torch.autocast(device.type, dtype=autocast, enabled=autocast is not None):
                    out = model(x)  # evaluation in the precision the model trains in
                total = self.add(total, loss_fn(self.classification, out, y, reduction="sum"))
                if self.classification:
                    correct += (out.argmax(1) == y).sum()
                count += len(x)
            del x, y, out  # the last batch's tensors: what is held now is what the running sums keep alive
            after = memory(device)
            held, peaked = after["allocated"] - before, after["peak"] - before
            mean = total.item() / count
        return mean, (correct.item() / count if self.classification else None), held, peaked


def measure_no_grad(model, device, x):
    """The claim "no_grad saves memory", measured: the peak of one evaluation batch with the graph
    recorded, and under no_grad."""
    model.eval()
    peaks = []
    for record_graph in (True, False):
        base = memory(device)["allocated"]
        reset_peak(device)
        with torch.set_grad_enabled(record_graph):
            out = model(x)
        del out
        peaks.append(memory(device)["peak"] - base)
    lab.measurement("evaluation peak with the graph recorded", peaks[0], "bytes")
    lab.measurement("evaluation peak under no-grad", peaks[1], "bytes")


def say_cudnn(p, device):
    """cudnn.benchmark and deterministic choose among cuDNN's convolution algorithms: on a GPU's
    convolutions only."""
    settings = f"torch.backends.cudnn.benchmark = {p['cudnn_benchmark']}, torch.backends.cudnn.deterministic = {p['deterministic']}"
    emulated = device.type == "cuda" and torch.cuda.is_emulated(device)
    if device.type != "cuda" or emulated:
        print(f"{settings}: these choose among cuDNN's convolution algorithms on an NVIDIA GPU; on {device}"
              f"{' (the emulated GPU computes on the CPU)' if emulated else ''} there is no cuDNN and they change nothing.")
    elif p["model"] != "cnn":
        print(f"{settings}: they choose cuDNN's convolution algorithms, and this model has no convolution: they change nothing here.")
    else:
        print(settings + (": the first step of each new convolution shape times cuDNN's candidate algorithms and keeps the fastest"
                          if p["cudnn_benchmark"] else ": cuDNN's heuristics choose each convolution's algorithm, untimed") +
              ("; only algorithms with bit-identical results run to run are allowed." if p["deterministic"] else "."))


# ---- The run --------------------------------------------------------------------------------------

def run(dataset="regression", model="mlp", hidden="64", optimizer="adam", lr=1e-3, lr_schedule="constant", momentum=0.9,
        weight_decay=0.0, batch_size=64, accumulate=1, epochs=3, device="auto", seed=0, workers=0, pin_memory=False, samples=1024,
        train_subset=0, log_every=10, checkpoint_segments=0, memory_cap_mb=0, amp="none", grad_scaler=True, cuda_graph=False,
        tf32=False, cudnn_benchmark=False, deterministic=False, move_model=True, move_batch=True, zero_grad=True, eval_no_grad=True,
        detach_loss=True):
    p = dict(locals())
    device = pick_device(device)
    check_settings(p, device)
    if (not move_model or not move_batch) and device.type == "cpu":
        lab.message(f"A switch leaves the {'model' if not move_model else 'batch'} on the CPU, but the device is the CPU: everything "
                    "is on one device and nothing fails. Choose a cuda device (the emulated GPU too) to meet the error.", "warning")
    setup = prepare(p, device)
    scaler = set_precision(p, device)
    declare_views(device, setup.classification, scaler)
    if memory_cap_mb:
        set_memory_cap(device, memory_cap_mb)
    reset_peak(device)
    state = Run(p, device, setup.classification, setup.categories)
    r = train_and_evaluate(p, device, state, setup, scaler)
    if memory_cap_mb:
        torch.cuda.set_per_process_memory_fraction(1.0, device)
    r["train_peak"] = max(r["train_peak"], memory(device)["peak"])  # since the last evaluation (or the error)
    r["run_peak"] = max(r["run_peak"], r["train_peak"])
    finish(p, device, state, setup.net, setup.test_loader, r)


class Setup:
    """What a run trains: its loaders, the model (on the device) and its optimizer."""


def prepare(p, device):
    """The data, on the CPU; the model, moved to the device once; the optimizer over its parameters."""
    s = Setup()
    train_set, test_set, outputs = make_data(p["dataset"], p["samples"], p["train_subset"], p["seed"])
    s.classification = outputs > 1
    pin = p["pin_memory"] and torch.cuda.is_available()
    if p["pin_memory"] and not pin:
        lab.message("pin_memory is set but no GPU is usable: batches stay in pageable memory", "warning")
    example_shape, hidden = tuple(train_set.tensors[0].shape[1:]), parse_widths(p["hidden"])
    if device.type == "cpu" or not p["move_model"]:  # a model left on the CPU trains there
        refuse_what_cannot_fit(p["model"] == "cnn", example_shape, hidden, outputs, p["batch_size"], len(train_set))
    torch.manual_seed(p["seed"])  # the shuffling's order, then the model's initial weights
    s.train_loader = DataLoader(train_set, batch_size=p["batch_size"], shuffle=True, drop_last=p["cuda_graph"],
                                num_workers=p["workers"], pin_memory=pin)
    s.test_loader = DataLoader(test_set, batch_size=1024, pin_memory=pin)
    if len(s.train_loader) == 0:
        raise ValueError(f"the training set ({len(train_set)} examples) holds no whole batch of {p['batch_size']}: nothing to train on")
    net = make_model(p["model"] == "cnn", example_shape, hidden, outputs, p["checkpoint_segments"])
    # Under a cap, what the memory holds is followed from before the model moves (its parameters
    # count), so that an out-of-memory error can be explained by category.
    s.categories = lab.memory_by_category(device) if p["memory_cap_mb"] else None
    s.net = net.to(device) if p["move_model"] else net
    print(f"{s.net}\n{sum(t.numel() for t in s.net.parameters())} parameters")
    s.optimizer = make_optimizer(p["optimizer"], s.net.parameters(), p["lr"], p["momentum"], p["weight_decay"], capturable=p["cuda_graph"])
    s.steps_per_epoch = -(-len(s.train_loader) // p["accumulate"])
    s.scheduler = (torch.optim.lr_scheduler.CosineAnnealingLR(s.optimizer, T_max=p["epochs"] * s.steps_per_epoch)
                   if p["lr_schedule"] == "cosine" else None)
    return s


def set_precision(p, device):
    """Mixed precision: a GradScaler for float16 (disabled, it passes the loss through and step() is
    optimizer.step()); TF32 and cuDNN's settings for the run."""
    amp = p["amp"]
    scaler = torch.amp.GradScaler(device.type, enabled=amp == "fp16" and p["grad_scaler"])
    if amp == "bf16" and p["grad_scaler"]:
        print("bfloat16 has float32's exponent range, so its gradients do not underflow the way float16's do: no GradScaler "
              "(as in PyTorch's recipe).")
    if amp == "fp16" and not scaler.is_enabled():
        lab.message("float16 without a GradScaler: gradients below 2^-24 (about 6e-8) become zero, and nothing checks for inf/NaN.",
                    "warning")
    torch.backends.cuda.matmul.allow_tf32 = p["tf32"]
    if p["tf32"] and (device.type != "cuda" or torch.cuda.is_emulated(device)):
        lab.message(f"tf32 is set, but TF32 is a mode of NVIDIA tensor cores (Ampere and newer): on {device} float32 matrix products "
                    "stay float32.", "warning")
    torch.backends.cudnn.benchmark, torch.backends.cudnn.deterministic = p["cudnn_benchmark"], p["deterministic"]
    say_cudnn(p, device)
    return scaler


def train_and_evaluate(p, device, state, s, scaler):
    """The epochs: train, then evaluate. Returns what the finished epochs measured (a stopped or
    failed epoch adds nothing); a Stop, an out-of-memory error or the device mismatch a switch
    provokes end the run with what it had."""
    r = dict(train_loss=None, eval_loss=None, accuracy=None, epochs_done=0, train_peak=0, run_peak=0, eval_held=0, eval_peak=0,
             error=None, stopped=False)
    epochs, total_steps = p["epochs"], s.steps_per_epoch * p["epochs"]
    oom = None
    try:
        for epoch in range(1, epochs + 1):
            train_loss = state.train_one_epoch(epoch, s.net, s.optimizer, s.scheduler, scaler, s.train_loader, total_steps)
            if train_loss is None:
                break
            lab.synchronize()  # a Stop at the epoch's last step ends the run here, before its evaluation pass
            r["train_peak"] = max(r["train_peak"], memory(device)["peak"])
            eval_loss, accuracy, r["eval_held"], r["eval_peak"] = state.evaluate(s.net, s.test_loader)
            if not math.isfinite(eval_loss):  # the weights went too far in the epoch's last steps
                state.say_diverged(eval_loss, epoch, state.at(), "evaluation loss")
                lab.progress(state.steps, total_steps, f"epoch {epoch}/{epochs}: {state.diverged_at}")
                break
            r["run_peak"] = max(r["run_peak"], r["train_peak"], memory(device)["peak"])
            reset_peak(device)
            report_epoch(state, epoch, train_loss, eval_loss, accuracy, s.classification)
            r.update(train_loss=train_loss, eval_loss=eval_loss, accuracy=accuracy, epochs_done=epoch)
            # The label the run ends with names what the summary names: the epoch's mean train loss.
            lab.progress(state.steps, total_steps,
                         f"epoch {epoch}/{epochs} done: train loss {loss_text(train_loss)}, eval loss {loss_text(eval_loss)}")
    except KeyboardInterrupt:  # Stop: the run ends where it is, with no evaluation after it
        r["stopped"] = True
    except torch.cuda.OutOfMemoryError as e:
        # The step's tensors go once this block ends (the traceback holds them until then); what they
        # were is read now, for the explanation.
        oom = (str(e), s.categories.update() if s.categories else None)
    except RuntimeError as e:
        if p["move_model"] and p["move_batch"] or "Expected all tensors to be on the same device" not in str(e):
            raise  # not provoked by a switch: a real failure
        lab.message(str(e), "engine_error")
        print("The fix: move the model once, before training -- model.to(device) -- so its parameters are where the batches are."
              if not p["move_model"] else "The fix: move every batch where the model is -- x, y = x.to(device), y.to(device) -- inside the loop.")
        r["error"] = "DeviceMismatchError"
    if oom:
        say_out_of_memory(p, device, state, *oom)
        r["error"] = "OutOfMemoryError"
    return r


def report_epoch(state, epoch, train_loss, eval_loss, accuracy, classification):
    seconds = state.seconds  # the epochs' training time: evaluation is not training
    lab.point("loss", "eval", state.at(), eval_loss)
    lab.row("epochs", epoch, train_loss, eval_loss, *([accuracy] if classification else []), seconds)
    lab.record("epoch", epoch=epoch, step=state.steps, train_loss=train_loss, eval_loss=eval_loss, seconds=seconds,
               **({"test_accuracy": accuracy} if classification else {}))


def say_out_of_memory(p, device, state, message, held):
    lab.marker("memory", state.at(), "out of memory", "oom")
    lab.message(message, "engine_error")
    if held is None:
        print("The fixes, cheapest first: a smaller batch_size (keep the effective batch with accumulate), evaluation under "
              "no-grad, smaller hidden layers -- or a memory cap (memory_cap_mb) to see what held the memory.")
    else:
        explain_oom(held, requested_bytes(message))
    lab.record("oom", batch_size=p["batch_size"], accumulate=p["accumulate"], step=state.steps, message=message,
               allocated_after_bytes=memory(device)["allocated"])


def finish(p, device, state, net, test_loader, r):
    """The measurements the lessons' claims and challenges rest on, the summary and the "done" record."""
    trained = r["epochs_done"] > 0  # the last finished epoch's losses
    if trained and not (r["error"] or r["stopped"] or state.diverged):
        measure_no_grad(net, device, next(iter(test_loader))[0].to(device))
        lab.measurement("evaluation pass: peak above the model", r["eval_peak"], "bytes")
        lab.measurement("evaluation pass: memory still held after it", r["eval_held"], "bytes")
    lab.measurement("training peak allocated", r["train_peak"], "bytes")
    if state.steps and r["error"] is None:  # a run that failed trained at no batch: nothing for a challenge to count
        lab.measurement("effective batch", p["batch_size"] * p["accumulate"])
    emulated = device.type == "cuda" and torch.cuda.is_emulated(device)
    if state.steps:
        lab.measurement("training time (on the CPU: emulated GPU)" if emulated else "training time", state.seconds, "s")
    if trained:
        lab.measurement("final train loss", r["train_loss"])
        lab.measurement("final eval loss", r["eval_loss"])
    lab.measurement("epochs completed", r["epochs_done"])
    if trained and r["accuracy"] is not None:
        lab.measurement("test accuracy", r["accuracy"])

    reserved_peak = memory(device)["peak_reserved"]
    verdict = ("Stopped after " if r["stopped"] else "Diverged after " if state.diverged else
               "Ended with the error above after " if r["error"] else "Done: ")
    summary = f"{verdict}{state.steps} steps on {device} in {state.seconds:.3f} s"
    if state.diverged:
        summary += f": {state.diverged_at}"
    finished = trained and r["epochs_done"] == p["epochs"] and not (r["error"] or r["stopped"] or state.diverged)
    if trained:
        # The losses of the last finished epoch: the run's final ones only when every epoch finished.
        losses = f"train loss {loss_text(r['train_loss'])}, eval loss {loss_text(r['eval_loss'])}"
        summary += (f"; final {losses}" if finished else
                    f"; the last finished epoch ({r['epochs_done']} of {p['epochs']}): {losses}")
        if r["accuracy"] is not None:
            summary += f", test accuracy {r['accuracy']:.4f}"
    if p["amp"] == "fp16" and state.last_scale is not None:
        summary += f"; the GradScaler skipped {state.skipped} steps, scale now {state.last_scale:g}"
    print(summary + f"; peak memory of the run (training and evaluation) {mib(r['run_peak'])} allocated, {mib(reserved_peak)} reserved")
    done = dict(seconds=state.seconds, steps=state.steps, device=str(device), stopped=r["stopped"], diverged=state.diverged,
                peak_allocated_bytes=r["run_peak"], peak_reserved_bytes=reserved_peak, amp=p["amp"], model=p["model"],
                cudnn_benchmark=p["cudnn_benchmark"], deterministic=p["deterministic"], skipped=state.skipped)
    if trained:
        done.update(train_loss=r["train_loss"], eval_loss=r["eval_loss"])
        if r["accuracy"] is not None:
            done["test_accuracy"] = r["accuracy"]
    if r["error"]:
        done["error"] = r["error"]
    lab.record("done", **done)
