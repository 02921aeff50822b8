"""The convolutions lesson's second lab: torch.backends.cudnn's two switches, measured on the CNN.

    torch.backends.cudnn.benchmark = True      # time cuDNN's candidate algorithms for each new
                                               # convolution shape, once, and keep the fastest
    torch.backends.cudnn.deterministic = True  # only algorithms whose results are bit-identical run to run
    for x, y in loader:                        # the training loop itself does not change
        ...

experiment "benchmark": the same steps of the CNN with benchmark off, then on, each from the same
initial weights. Each step is timed on its own (the device synchronised before and after), and after
each step the lab reads what cuDNN chose (lab.cudnn_choices: every candidate algorithm of every
convolution pass and shape, its time when benchmark mode timed it, its workspace). With shapes
"changing", every step's batch has a size not seen before -- as with variable-length inputs -- so
benchmark mode searches again at every step.

experiment "determinism": the same training twice from the same seed on the same batches, with
deterministic off and then on; the two runs' losses step by step and their final weights compared
value by value.

cuDNN exists only on NVIDIA GPUs. On the CPU and the emulated GPU both switches change nothing (the
convolutions there are GPU Lab's im2col + GEMM, one algorithm, no atomics): the lab still runs and
measures, and says so.
"""
import time

import torch
import torch.nn.functional as F
from torch.utils.data import DataLoader

from lab_helpers import cnn, is_emulated, median, parse_widths, pick_device, refuse_what_cannot_fit, synchronize


def has_cudnn(device):
    """cuDNN runs on a real NVIDIA GPU; the emulated GPU computes on the CPU."""
    return device.type == "cuda" and not is_emulated(device)


class Trainer:
    """The lab's training one step at a time: the CNN from the seed, Adam, batches shuffled by the seed."""

    def __init__(self, train, p, device):
        torch.manual_seed(p["seed"])  # the same weights and the same batches for every run
        self.model = cnn(train[0][0].shape, parse_widths(p["cnn_hidden"], "cnn_hidden"), 10).to(device)
        self.optimizer = torch.optim.Adam(self.model.parameters(), lr=p["lr"])
        self.loader = DataLoader(train, batch_size=min(p["batch_size"], len(train)), shuffle=True, drop_last=True)
        self.batches, self.device = iter(self.loader), device

    def step(self, examples):
        """One optimizer step on the next batch's first `examples` examples; the loss, not yet read."""
        batch = next(self.batches, None)
        if batch is None:
            self.batches = iter(self.loader)
            batch = next(self.batches)
        x, y = (t[:examples].to(self.device) for t in batch)
        loss = F.cross_entropy(self.model(x), y)
        self.optimizer.zero_grad()
        loss.backward()
        self.optimizer.step()
        return loss.detach()

    def weights(self):
        return torch.cat([p.detach().to("cpu").flatten() for p in self.model.parameters()])


def switches(benchmark, deterministic):
    torch.backends.cudnn.benchmark = benchmark
    torch.backends.cudnn.deterministic = deterministic


# ---- experiment "benchmark" ---------------------------------------------------------------------------

def declare_benchmark_views(device, changing):
    cudnn = has_cudnn(device)
    lab.view("steps", "Step time", x=[("step", "")], y=("step time", "ms", True), series=[("off", "benchmark off"), ("on", "benchmark on")],
             # Logarithmic: a GPU's milliseconds and a CPU's hundreds of them (a recording beside the learner's
             # run), and a first step ten times the others, all readable on one plot.
             note="A logarithmic axis: equal heights are equal ratios. " +
                  ("Every step's batch has a new size, so every step's convolutions have new shapes. " if changing else "") +
                  ("Marked: steps at which benchmark mode timed cuDNN's algorithms for a new shape." if cudnn else
                   f"No cuDNN on {device}: both settings run the same code, so the two lines differ only by noise (and the first "
                   "step's one-off costs, such as the memory cache's first allocations)."))
    lab.view("algorithms", "cuDNN's algorithms", kind="table",
             columns=["setting", "layer", "pass", "algorithm", ("time", "ms"), ("workspace", "bytes"), "deterministic", "ran"],
             note="Benchmark off: cuDNN's heuristics rank the candidates without running them (time: -). Benchmark on: cudnnFind runs "
                  "every candidate on this step's own tensors and the fastest that fits runs. A candidate that needs more workspace "
                  "than the memory cache can give is skipped. Rows: the first step's shapes." if cudnn else
                  f"cuDNN runs only on an NVIDIA GPU; on {device} GPU Lab's convolutions are im2col + an OpenBLAS matrix product, one "
                  "algorithm, so there is nothing to choose and this table stays empty. Compare with a real GPU where a recording exists.")
    lab.view("summary", "Off and on", kind="table",
             columns=["setting", ("first step", "ms"), ("median step", "ms"), ("whole run", "s"), "searches", ("search time", "ms")])


def show_choices(label, choices):
    """The first step's shapes: a row per candidate algorithm, in the order the passes ran."""
    for c in choices:
        for t in c["trials"]:
            ran = "ran" if t["chosen"] else "" if t["status"] == "ok" else t["status"]
            lab.row("algorithms", label, c["shape"], c["pass"], t["algorithm"], "-" if t["milliseconds"] is None else t["milliseconds"],
                    t["workspace"], "yes" if t["deterministic"] else "no", ran)


def time_setting(setting, label, train, p, device, examples_at, done):
    """The steps with benchmark mode `setting` ("off", "on"), each timed on its own, and cuDNN's searches."""
    switches(setting == "on", p["deterministic"])
    lab.forget_cudnn_choices(device)  # this setting chooses afresh, as a new process would
    trainer = Trainer(train, p, device)
    times, out, seen = [], dict(first=0.0, total=0.0, searches=0, search_ms=0.0), 0
    for step in range(1, p["steps"] + 1):
        synchronize(device)
        start = time.perf_counter()
        trainer.step(examples_at(step))
        synchronize(device)
        ms = 1e3 * (time.perf_counter() - start)
        out["total"] += ms / 1e3
        out["first"] = ms if step == 1 else out["first"]
        times += [ms] if step > 1 else []
        lab.point("steps", setting, [step], ms)
        choices = lab.cudnn_choices(device)[seen:]  # what this step chose: nothing for a shape already cached
        seen += len(choices)
        searched = [c for c in choices if c["how"] == "benchmark"]
        out["searches"] += len(searched)
        out["search_ms"] += sum(c["search_milliseconds"] for c in searched)
        if step == 1:
            show_choices(label, choices)
        if searched and out["searches"] <= 40:
            lab.marker("steps", [step], "searched")
        lab.progress(done + step, 2 * p["steps"], f"{label}: step {step}")
    out["median"] = median(times)
    lab.row("summary", label, out["first"], out["median"], out["total"], out["searches"], out["search_ms"])
    return out


def report_benchmark(outcomes, device, p, changing):
    for setting, o in outcomes.items():
        name = f"benchmark {setting}: "
        lab.measurement(name + "first step", o["first"], "ms")
        lab.measurement(name + "median step", o["median"], "ms")
        lab.measurement(name + "whole run", o["total"], "s")
        lab.measurement(name + "searches", o["searches"])
        lab.record("setting", benchmark=setting == "on", first_ms=o["first"], median_ms=o["median"], total_s=o["total"],
                   searches=o["searches"], search_ms=o["search_ms"])
    off, on = outcomes["off"], outcomes["on"]
    lab.measurement("benchmark on vs off: median step", on["median"] / off["median"], "x")
    lab.measurement("benchmark on vs off: whole run", on["total"] / off["total"], "x")
    if not has_cudnn(device):
        print(f"On {torch._C._device_label(device)} there is no cuDNN: benchmark on and off ran the same im2col + GEMM code (median step "
              f"{off['median']:.1f} ms off, {on['median']:.1f} ms on: whatever differs is this machine's other work, not the setting). "
              "What a GPU would show: with benchmark on, the first step with each new shape is slower -- cuDNN runs every candidate "
              "algorithm -- and later steps with that shape are as fast as the fastest candidate." +
              (f" With shapes changing, that search would come back at every one of these {p['steps']} steps." if changing else ""))
        return
    lab.measurement("benchmark on: first-step cost", on["first"] - on["median"], "ms")
    speedup = off["median"] / on["median"]
    after = (f"{speedup:.2f}x faster than the heuristics' choice" if speedup > 1.03 else
             f"{1 / speedup:.2f}x slower than the heuristics' choice (timing noise or a close call)" if speedup < 0.97 else
             "as fast as the heuristics' choice: for these shapes they agree")
    print(f"Benchmark mode searched {on['searches']} time(s), {on['search_ms']:.1f} ms in all; its first step took {on['first']:.1f} ms "
          f"against {off['first']:.1f} ms without it. After that, its median step was {after}.")
    if changing:
        print(f"With a new shape at every step, benchmark mode paid its search at every step: the whole run took {on['total']:.2f} s "
              f"with it against {off['total']:.2f} s without. Leave benchmark off when input shapes keep changing.")


def benchmark_experiment(train, p, device):
    changing = p["shapes"] == "changing"
    batch = min(p["batch_size"], len(train))
    # With changing shapes, step s trains on batch - (s - 1) examples (cycling when the steps outnumber the
    # sizes): every step a shape cuDNN has not seen, until the cycle repeats.
    sizes = max(1, min(batch, p["steps"]))
    examples_at = (lambda s: batch - (s - 1) % sizes) if changing else (lambda s: batch)
    declare_benchmark_views(device, changing)
    # One untimed step first, on a throwaway model: the process's one-off costs (the memory cache's first
    # blocks, the libraries' handles) would otherwise land on whichever setting runs first. Its cuDNN
    # choices are forgotten after, so each setting still meets its shapes for the first time.
    Trainer(train, p, device).step(batch)
    synchronize(device)
    outcomes = {}
    for i, (setting, label) in enumerate((("off", "benchmark off"), ("on", "benchmark on"))):
        outcomes[setting] = time_setting(setting, label, train, p, device, examples_at, i * p["steps"])
    report_benchmark(outcomes, device, p, changing)


# ---- experiment "determinism" ---------------------------------------------------------------------------

def train_twice(setting, label, train, p, device, done):
    """Two runs from the same seed with deterministic `setting`: run B's losses drawn against run A's."""
    switches(p["benchmark"], setting == "on")
    lab.forget_cudnn_choices(device)
    losses, times, weights = [], [], []
    for run in range(2):
        trainer = Trainer(train, p, device)
        for step in range(1, p["steps"] + 1):
            synchronize(device)
            start = time.perf_counter()
            loss = trainer.step(p["batch_size"]).item()  # one sync a step: this run is about values, not speed
            times.append(1e3 * (time.perf_counter() - start))
            if run == 0:
                losses.append(loss)
            else:
                lab.point("divergence", setting, [step], abs(loss - losses[step - 1]))
            done += 1
            lab.progress(done, 4 * p["steps"], f"{label}, run {'AB'[run]}: step {step}")
        weights.append(trainer.weights())
    a, b = weights
    differ = a != b  # value by value: a float32 equal to another is bit-identical to it but for 0.0 and -0.0
    largest = (a - b).abs()[differ].max().item() if differ.any() else 0.0
    return dict(differing=int(differ.sum()), total=a.numel(), largest=largest, median_ms=median(times))


def report_determinism(outcomes, device):
    for setting, o in outcomes.items():
        name = f"deterministic {setting}: "
        lab.measurement(name + "values that differ", o["differing"])
        lab.measurement(name + "largest weight difference", o["largest"])
        lab.measurement(name + "median step", o["median_ms"], "ms")
        lab.record("setting", deterministic=setting == "on", differing=o["differing"], values=o["total"], max_difference=o["largest"],
                   median_ms=o["median_ms"])
    off, on = outcomes["off"], outcomes["on"]
    lab.measurement("deterministic on vs off: median step", on["median_ms"] / off["median_ms"], "x")
    said = (f"With deterministic on, the two runs' {on['total']:,} weights were " +
            ("bit-identical" if on["differing"] == 0 else f"{on['differing']:,} values apart -- not bit-identical") + "; with it off, " +
            ("bit-identical too" if off["differing"] == 0 else f"{off['differing']:,} values differed, by up to {off['largest']:.3g}") + ".")
    if not has_cudnn(device):
        said += (f" On {torch._C._device_label(device)} there is no cuDNN: GPU Lab's CPU convolutions add their partial sums in a fixed "
                 "order, so every run is bit-identical whatever the setting. On a GPU, the fastest backward algorithms add partial sums "
                 "with atomic operations in whatever order the threads finish, and float addition is not associative: the last bits "
                 "differ run to run, and training amplifies them.")
    elif off["differing"] == 0:
        said += (" cuDNN's choices for these shapes happened to be deterministic ones anyway (see the benchmark experiment's table); "
                 "turning deterministic on guarantees it for every shape.")
    print(said)


def determinism_experiment(train, p, device):
    settings = (("off", "deterministic off"), ("on", "deterministic on"))
    lab.view("divergence", "Run A vs run B: loss", x=[("step", "")], y="|loss A - loss B|", series=settings, y_from_zero=True,
             note="Two runs from the same seed on the same batches, step by step. 0 all along: the runs are bit-identical (two lines "
                  "at 0 lie on top of each other). A difference starts in the last bits and grows as training amplifies it.")
    lab.view("weights", "Run A vs run B: weights", kind="table",
             columns=["setting", "values that differ", "weights", "largest difference", "bit-identical", ("median step", "ms")])
    outcomes = {}
    for i, (setting, label) in enumerate(settings):
        o = outcomes[setting] = train_twice(setting, label, train, p, device, 2 * i * p["steps"])
        lab.row("weights", label, o["differing"], o["total"], o["largest"], "yes" if o["differing"] == 0 else "no", o["median_ms"])
    report_determinism(outcomes, device)


def run(experiment="benchmark", shapes="fixed", deterministic=False, benchmark=False, steps=30, batch_size=128, cnn_hidden="128",
        lr=1e-3, device="auto", seed=0):
    p = dict(locals())
    device = pick_device(device)
    if not has_cudnn(device):
        lab.message(f"cuDNN runs only on an NVIDIA GPU. On {torch._C._device_label(device)} this lab runs the same steps and measures "
                    "them, but both settings run GPU Lab's own convolutions: nothing here is cuDNN's.", "warning")
    train = lab.fashion_mnist(train=True)
    if device.type == "cpu":
        refuse_what_cannot_fit(True, tuple(train[0][0].shape), parse_widths(cnn_hidden, "cnn_hidden"), 10, batch_size, len(train))
    saved = torch.backends.cudnn.benchmark, torch.backends.cudnn.deterministic
    try:
        (determinism_experiment if experiment == "determinism" else benchmark_experiment)(train, p, device)
    except KeyboardInterrupt:  # Stop: what finished stays shown; nothing is compared
        print("Stopped.")
        return
    finally:
        switches(*saved)  # the switches are the process's: the learner's next cell finds them as they were
    lab.record("done", device=str(device), experiment=experiment)
