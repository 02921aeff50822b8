"""The mixed-precision lesson's lab: one model, several precisions, as PyTorch's AMP recipe writes it.

    scaler = torch.amp.GradScaler(device.type, enabled=use_scaler)     # float16 needs it; bfloat16 not
    for x, y in loader:
        x, y = x.to(device), y.to(device)
        with torch.autocast(device_type=device.type, dtype=torch.float16, enabled=use_amp):
            loss = loss_fn(model(x), y)      # the GEMMs in float16; the loss (softmax) in float32
        scaler.scale(loss).backward()        # outside the region: gradients flow back in each op's dtype
        scaler.step(optimizer)               # unscale, then step -- or skip it when a gradient is inf/NaN
        scaler.update()                      # halve the scale after a skip, double it after N clean steps
        optimizer.zero_grad()

Every precision starts from the same weights (the same seed) and sees the same batches, so what
differs between the curves is the precision alone. The weights stay float32 in every precision
("master weights"); autocast casts them to the lower precision for each matrix product, so the
activations and the gradients that flow between the layers are float16 or bfloat16.
"""
import math
import time

import torch
import torch.nn.functional as F
from torch.utils.data import DataLoader

from lab_helpers import MLP, Spread, allocated, compare, compared_times, first_examples, is_emulated, parse_widths, peak_allocated, \
    pick_device, range_text, refuse_what_cannot_fit, regression_set, reset_peak, synchronize

# id: (label, autocast's dtype or None, a GradScaler)
PRECISIONS = {"fp32": ("float32", None, False), "fp16": ("float16 + GradScaler", torch.float16, True),
              "bf16": ("bfloat16", torch.bfloat16, False), "fp16-noscale": ("float16, no scaler", torch.float16, False),
              "bf16-scaler": ("bfloat16 + GradScaler", torch.bfloat16, True)}


def parse_precisions(text):
    ids = text.split(",")
    for i, v in enumerate(ids):
        if v not in PRECISIONS:
            raise ValueError(f"'{v}' is not a precision; expected a comma-separated list of fp32, fp16, bf16, fp16-noscale, bf16-scaler")
        if v in ids[:i]:
            raise ValueError(f"'{v}' is listed twice")
    return ids


class Trainer:
    """What one precision trains with: the model (the seed's weights), optimizer, scaler and data order."""

    def __init__(self, precision, p, train, device):
        self.label, self.dtype, scaled = PRECISIONS[precision]
        self.device, self.classification, self.loss_weight = device, p["dataset"] == "fashion-mnist", p["loss_weight"]
        torch.manual_seed(p["seed"])
        with lab.memory_category("parameter"):  # made on the CPU, where .to() copies nothing to tag
            self.model = MLP(math.prod(train[0][0].shape), parse_widths(p["hidden"]), 10 if self.classification else 1).to(device)
        if p["optimizer"] == "sgd":
            self.optimizer = torch.optim.SGD(self.model.parameters(), lr=p["lr"], momentum=p["momentum"])
        else:
            self.optimizer = (torch.optim.AdamW if p["optimizer"] == "adamw" else torch.optim.Adam)(self.model.parameters(), lr=p["lr"])
        self.scaler = torch.amp.GradScaler(device.type, init_scale=p["init_scale"], growth_interval=p["growth_interval"], enabled=scaled)
        self.loader = DataLoader(train, batch_size=min(p["batch_size"], len(train)), shuffle=True, drop_last=True)
        self.batches = iter(self.loader)

    def next_batch(self):
        try:
            return next(self.batches)
        except StopIteration:
            self.batches = iter(self.loader)
            return next(self.batches)

    def forward_backward(self, x, y, after_forward=None):
        """Forward and loss under autocast (when the precision has it), backward outside it through the
        scaler; the loss, multiplied by loss_weight."""
        x, y = x.to(self.device), y.to(self.device)
        with torch.autocast(device_type=self.device.type, dtype=self.dtype or torch.float32, enabled=self.dtype is not None):
            out = self.model(x)  # 16-bit under autocast (linear)
            loss = self.loss_weight * (F.cross_entropy(out, y) if self.classification else F.mse_loss(out, y))  # float32
        if after_forward:
            after_forward()
        self.scaler.scale(loss).backward()
        return loss

    def step(self):
        """Unscale, skip the step if a gradient is inf/NaN, update the scale; whether it was skipped (the
        scale halves after a skip) and the scale this step used."""
        used = self.scaler.get_scale()
        self.scaler.step(self.optimizer)
        self.scaler.update()
        self.optimizer.zero_grad()
        return self.scaler.is_enabled() and self.scaler.get_scale() < used, used


def zero_share(model):
    """The share of gradient values that are exactly zero: in float32 only what truly is; what float16
    adds are the values below its smallest subnormal, 2^-24 ~ 6e-8, flushed to zero."""
    grads = [p.grad for p in model.parameters() if p.grad is not None]
    total = sum(g.numel() for g in grads)
    return sum(int((g == 0).sum()) for g in grads) / total if total else 0.0


def declare_views(ids, device):
    series = [(v, PRECISIONS[v][0]) for v in ids]
    lab.view("loss", "Training loss by precision", x=[("step", ""), ("time", "s")], y="loss", series=series)
    scaled = [(v, PRECISIONS[v][0] + ": loss scale", "steps") for v in ids if PRECISIONS[v][2]]
    if scaled:
        lab.view("scale", "GradScaler's loss scale (skipped steps marked)", x=[("step", "")], y="scale", y_from_zero=True, series=scaled,
                 note="A step whose gradients hold an inf or NaN is skipped (the weights do not change) and the scale halves; after "
                      "growth_interval clean steps in a row it doubles.")
    lab.view("zeros", "Gradient values that are exactly zero", x=[("step", "")], y=("zero share", "%"), y_from_zero=True, series=series,
             note="The share of all parameter gradients that are 0 after backward. float32 shows what is truly zero in this model "
                  "(ReLUs that did not fire, pixels that are always black); a float16 run far above it lost gradients that underflowed "
                  "(below 2^-24 ~ 6e-8). A point or two either way is the runs taking different paths.")
    lab.view("memory", "Memory by category when the forward pass ends", kind="bars", y=("memory", "bytes"), y_from_zero=True, series=series,
             note="Live tensors by category at the end of the second forward pass, when every activation saved for backward is alive. "
                  "Parameters, gradients and optimizer state stay float32 in every precision. Under autocast the activations are 16-bit, "
                  "and include autocast's 16-bit copies of the weights and the input: for a small model and batch the copies can "
                  "outweigh the saving.")
    lab.view("precisions", "Step time and result by precision", kind="table",
             columns=["precision", ("step", "s"), ("range", "ms"), ("time ÷ fp32", "x"), "final loss", ("zeros", "%"), "skips",
                      ("activations", "bytes")],
             note=("Timed on your CPU: the emulated GPU computes there, so these are your CPU's times, not a GPU's. " if is_emulated(device) else "") +
                  f"step: the median time of an optimizer step (forward, backward, step) on {device}, timed apart from the training in "
                  "rounds where the precisions take turns; range: the fastest and the slowest round. time ÷ fp32 (of the medians) above 1 "
                  "is slower than float32; where the ranges overlap, the difference is within this machine's noise. final loss: the mean "
                  "over the last tenth of the steps; zeros: the share of gradient values that were 0, over the second half; skips: steps "
                  "the GradScaler skipped.")


def train_one(v, p, train, device, progress):
    """One precision's training, from the seed's weights: loss, loss scale, zero share, memory by category."""
    r = dict(skipped=0, diverged=False, final_loss=None, zero_shares=[], after_forward={})
    baseline = allocated(device)
    reset_peak(device)
    live = lab.memory_by_category(device)  # from before the model, so every byte of this precision is seen
    t = Trainer(v, p, train, device)
    steps, log_every = p["steps"], p["log_every"]
    window, window_steps, window_skipped, markers, elapsed, tail = torch.zeros((), device=device), 0, 0, 0, 0.0, [0.0, 0]
    shown_scale = None
    for step in range(1, steps + 1):
        x, y = t.next_batch()
        synchronize(device)
        t0 = time.perf_counter()
        second = step == min(2, steps)  # step 2: the optimizer's state exists
        loss = t.forward_backward(x, y, (lambda: r.update(after_forward=live.update())) if second else None)
        synchronize(device)
        forward_backward_s = time.perf_counter() - t0
        report = step % log_every == 0 or step == steps
        if report:  # what backward left in the gradients (zeros are zeros at any scale); not timed
            share = zero_share(t.model)
            lab.point("zeros", v, [step], 100 * share)
            if 2 * step > steps:
                r["zero_shares"].append(share)
        t2 = time.perf_counter()
        skipped, scale = t.step()
        synchronize(device)
        elapsed += forward_backward_s + time.perf_counter() - t2
        if skipped:
            r["skipped"] += 1
            window_skipped += 1
            markers += 1
            if markers <= 40:
                lab.marker("scale", [step], "skipped", kind="skipped")
        if t.scaler.is_enabled() and (report or skipped or scale != shown_scale):
            lab.point("scale", v, [step], scale)  # the scale each step used, where it changes and at each report: the plot's steps
            shown_scale = scale
        with torch.no_grad():
            window += loss.detach() / p["loss_weight"]  # the loss function's own value
        window_steps += 1
        if not report:
            continue
        if not report_window(v, window, window_steps, window_skipped, step, steps, scale, elapsed, tail, progress):
            r["diverged"] = True
            break
        window_steps = window_skipped = 0
    if not r["diverged"] and tail[1]:
        r["final_loss"] = tail[0] / tail[1]
    r["zero_share"] = sum(r["zero_shares"]) / len(r["zero_shares"]) if r["zero_shares"] else 0.0
    r["peak"] = peak_allocated(device) - baseline
    for category, size in r["after_forward"].items():
        if size > 0:
            lab.bar("memory", v, category.replace("_", " "), size)
    return r


def report_window(v, window, window_steps, window_skipped, step, steps, scale, elapsed, tail, progress):
    """The mean loss of the steps since the last report (one .item() a window), as a point and a record;
    False when it is no longer finite: the precision stops there."""
    mean = window.item() / window_steps
    if 10 * step > 9 * steps:  # the last tenth of the steps: the final loss
        tail[0] += mean * window_steps
        tail[1] += window_steps
    lab.record("step", precision=v, step=step, loss=mean if math.isfinite(mean) else str(mean), loss_scale=scale,
               skipped=window_skipped, elapsed_s=elapsed)
    if not math.isfinite(mean):
        diverged(v, mean, step, elapsed)
        return False
    lab.point("loss", v, [step, elapsed], mean)
    progress["done"] += window_steps
    lab.progress(progress["done"], progress["total"], f"{PRECISIONS[v][0]}: step {step}, loss {mean:.4f}")
    window.zero_()
    return True


def diverged(v, mean, step, elapsed):
    label, dtype, scaled = PRECISIONS[v]
    lab.marker("loss", [step, elapsed], f"{v}: loss is {mean}")
    lab.message(f"In {label} the loss became {mean} at step {step}, so this precision stopped. " +
                ("Without a GradScaler nothing checks the float16 gradients: one that overflowed (above 65504) became inf and the "
                 "optimizer wrote it into the weights. The GradScaler skips such a step." if dtype == torch.float16 and not scaled
                 else "Likely cause: a learning rate too high for this model."), level="warning")


def time_steps(ids, p, train, device, rounds, steps_per_round):
    """The step times, apart from the training, in interleaved rounds: a few steps of every precision in
    turn, then every precision again, ... so that a slow moment of the machine hits them all alike. Each
    starts from the seed's weights, after two untimed steps (the first steps fill the caching allocator)."""
    trainers = {v: Trainer(v, p, train, device) for v in ids}

    def run_steps(t, n):
        for _ in range(n):
            t.forward_backward(*t.next_batch())
            t.step()  # (its skip and scale are the training's to show)

    for t in trainers.values():
        run_steps(t, 2)
    seconds = {v: [] for v in ids}
    for r in range(rounds):
        for v, t in trainers.items():
            synchronize(device)
            start = time.perf_counter()
            run_steps(t, steps_per_round)
            synchronize(device)
            seconds[v].append((time.perf_counter() - start) / steps_per_round)
        lab.progress(r + 1, rounds, f"timing the steps: round {r + 1} of {rounds}")
    return {v: Spread.of(s) for v, s in seconds.items()}


def measurements(ids, results):
    base = results.get("fp32")
    for v in ids:
        r, name = results[v], PRECISIONS[v][0] + ": "
        act = r["after_forward"].get("activation", 0)
        lab.row("precisions", PRECISIONS[v][0], r["step"].median, range_text(r["step"], 1e3),
                r["step"].median / base["step"].median if base else "-",
                r["final_loss"] if r["final_loss"] is not None else ("diverged" if r["diverged"] else "-"), 100 * r["zero_share"],
                r["skipped"], act)
        lab.measurement(name + "step time", r["step"].median, "s")
        lab.measurement(name + "step time, fastest round", r["step"].low, "s")
        lab.measurement(name + "step time, slowest round", r["step"].high, "s")
        if r["final_loss"] is not None:
            lab.measurement(name + "final loss", r["final_loss"])
        lab.measurement(name + "zero gradients", 100 * r["zero_share"], "%")
        lab.measurement(name + "skipped steps", r["skipped"])
        lab.measurement(name + "activations", act, "bytes")
        lab.measurement(name + "peak allocated", r["peak"], "bytes")
        if base and v != "fp32":
            lab.measurement(name + "step time vs float32", r["step"].median / base["step"].median, "x")
            if base["final_loss"] is not None and (r["final_loss"] is not None or r["diverged"]):
                # A run that diverged learned nothing: its loss ratio is recorded as far above any threshold.
                lab.measurement(name + "final loss vs float32", 1e6 if r["diverged"] else r["final_loss"] / base["final_loss"], "x")
        lab.record("precision", precision=v, step_s=r["step"].median, final_loss=r["final_loss"] if r["final_loss"] is not None else -1.0,
                   zero_share=r["zero_share"], skipped=r["skipped"], diverged=r["diverged"], activation_bytes=act, peak_bytes=r["peak"])


def say_what_was_measured(ids, results, device, rounds, steps_per_round):
    """What this machine measured, said in words (never a number from elsewhere)."""
    fp32, noscale, scaled = results.get("fp32"), results.get("fp16-noscale"), results.get("fp16")
    if fp32 and noscale:
        line = (f"float16 without a scaler: {100 * noscale['zero_share']:.1f}% of the gradient values were exactly zero, against "
                f"{100 * fp32['zero_share']:.1f}% in float32" + (f" and {100 * scaled['zero_share']:.1f}% in float16 with the GradScaler" if scaled else ""))
        print(line + (". The difference is gradients that fell below float16's smallest number, 2^-24, and became zero."
                      if noscale["zero_share"] > fp32["zero_share"] + 0.01 else
                      ": at these settings hardly any gradient is small enough to underflow."))
    if not fp32:
        return
    timed = [v for v in ids if v != "fp32" and PRECISIONS[v][1] is not None and v != "fp16-noscale"]  # (no scaler: fp16's products)
    if timed:
        said = f"On {torch._C._device_label(device)} a " + "; a ".join(
            f"{PRECISIONS[v][0]} step {compared_times(results[v]['step'], fp32['step'], 'a float32 step')}" for v in timed)
        said += (f". Each step time is the median of {rounds} rounds of {steps_per_round} step{'s' if steps_per_round != 1 else ''} per "
                 "precision, the precisions taking turns.")
        slower = any(compare(results[v]["step"], fp32["step"]) > 0 for v in timed)
        faster = any(compare(results[v]["step"], fp32["step"]) < 0 for v in timed)
        if is_emulated(device):
            said += " (The emulated GPU computes on your CPU: no claim about GPUs follows from this.)"
        elif device.type == "cpu" and slower and not faster:
            said += (" Most CPUs have no half-precision matrix units, and GPU Lab's CPU backend widens float16/bfloat16 operands to "
                     "float32 for every product (OpenBLAS has no 16-bit kernels): autocast adds the casts and saves no arithmetic, so "
                     "on a CPU lower precision does not save time.")
        elif device.type == "cpu":
            said += (" GPU Lab's CPU backend computes every product in float32 whatever the precision (OpenBLAS has no 16-bit kernels): "
                     "what differs is the casts and the smaller tensors, and the runs' spread shows how much the other programs on this "
                     "machine move the times.")
        print(said)
    act32 = fp32["after_forward"].get("activation", 0)
    for v in (v for v in ids if v != "fp32" and PRECISIONS[v][1] is not None and act32 > 0):
        act = results[v]["after_forward"].get("activation", 0)
        mib = f"{act / 2**20:.2f} MiB against float32's {act32 / 2**20:.2f} MiB"
        print(f"Memory: with {PRECISIONS[v][0]} the activations kept for backward took {mib}." if act < 0.95 * act32 else
              f"Memory: with {PRECISIONS[v][0]} the activations kept for backward took {mib} -- at this size autocast's 16-bit copies "
              "of the weights and the input outweigh the smaller activations; a wider model or a larger batch shows the saving.")
        break  # one 16-bit precision says it: they keep the same tensors


def run(variants="fp32,fp16,bf16,fp16-noscale", dataset="fashion-mnist", hidden="256,128,100", optimizer="adam", lr=1e-3, momentum=0.9,
        loss_weight=1.0, batch_size=128, steps=300, train_subset=0, init_scale=65536.0, growth_interval=2000, tf32=False,
        device="auto", seed=0, log_every=10, repeats=5):
    p = dict(locals())
    started = time.perf_counter()
    device = pick_device(device)
    ids = parse_precisions(variants)
    if tf32 and (device.type != "cuda" or is_emulated(device)):
        lab.message(f"tf32 is set, but TF32 is a mode of NVIDIA tensor cores (Ampere and newer): on {device} float32 matrix products "
                    "stay float32.", level="warning")
    train = lab.fashion_mnist(train=True) if dataset == "fashion-mnist" else regression_set(4096, seed)
    train = first_examples(train, train_subset)
    if device.type == "cpu":
        refuse_what_cannot_fit(False, tuple(train[0][0].shape), parse_widths(hidden), 10 if dataset == "fashion-mnist" else 1,
                               batch_size, len(train))
    allow_tf32 = torch.backends.cuda.matmul.allow_tf32
    torch.backends.cuda.matmul.allow_tf32 = tf32
    try:
        train_and_time(ids, p, train, device, started)
    finally:
        torch.backends.cuda.matmul.allow_tf32 = allow_tf32


def train_and_time(ids, p, train, device, started):
    declare_views(ids, device)
    results, progress = {}, dict(done=0, total=len(ids) * p["steps"])
    try:
        for v in ids:
            label, dtype, _ = PRECISIONS[v]
            print(f"Training in {label}" + (f" (autocast {str(dtype).replace('torch.', '')})" if dtype else "") + ".")
            results[v] = train_one(v, p, train, device, progress)
        steps_per_round = min(10, max(1, p["steps"] // 20))
        for v, spread in time_steps(ids, p, train, device, p["repeats"], steps_per_round).items():
            results[v]["step"] = spread
    except KeyboardInterrupt:  # Stop: what finished stays shown; nothing is compared
        print(f"Stopped after {time.perf_counter() - started:.1f} s.")
        return
    measurements(ids, results)
    say_what_was_measured(ids, results, device, p["repeats"], steps_per_round)
    lab.record("done", seconds=time.perf_counter() - started, device=str(device), precisions=len(ids))
