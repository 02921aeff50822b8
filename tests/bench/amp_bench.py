#!/usr/bin/env python3
"""Mixed precision, GPU Lab against PyTorch AMP on the same device: runs gpulab-bench-amp (GPU Lab's
side, tests/bench/bench_amp.cpp) and the same workload in PyTorch, and prints per mode both step times,
the ratio (> 1: GPU Lab faster) and each side's speed-up over its own float32.

The workload: depth x (Linear(width, width) + ReLU), no ReLU after the last layer, MSE loss (or
cross-entropy), SGD lr 1e-4 (or Adam), one training step per iteration on one resident batch:
  fp32  float32;
  tf32  float32 with torch.backends.cuda.matmul.allow_tf32 (CUDA only: the CPU has no TF32);
  bf16  forward under torch.autocast(dtype=torch.bfloat16), no scaler;
  fp16  forward under torch.autocast(dtype=torch.float16), GradScaler.
Steps are timed one by one between two synchronisations, after warm-up; the median is the figure.

PyTorch gets its best configuration, and the table prints it:
  CPU: the fastest of 1 and 2 threads, each in its own process: torch.set_num_threads (and
       OMP_NUM_THREADS) with OPENBLAS_NUM_THREADS, as the pairs 1/1, 2/2, 1/2 and 2/1 (Debian's
       PyTorch runs its float32 GEMMs in the system OpenBLAS, as GPU Lab does, and its bfloat16 GEMMs
       in oneDNN, which uses the OpenMP threads). GPU Lab is run with OMP_NUM_THREADS 1 and 2 (its
       kernels' threads; OpenBLAS single-threaded inside them) and gets its faster one too. With --repeat N both sides alternate N times (a shared machine's
       load changes) and each keeps its fastest median per mode; every run is printed.
  CUDA: the faster of the foreach and the fused optimizer.
PyTorch before 2.x has no float16 CPU autocast (1.13: bfloat16 only) and no CPU GradScaler; such a mode
is reported as not supported by that PyTorch, not as a failure.

Usage: /usr/bin/python3 tests/bench/amp_bench.py --bench build/bin/gpulab-bench-amp [--device cpu|cuda]
       [--width W --depth D --batch B --steps N --warmup N] [--modes fp32,bf16] [--threads 1,2]
       [--torch-threads 1/1,2/2,1/2,2/1] [--repeat N]
       [--json OUT]
Sizes left out are the binary's defaults for the device (CPU 1024/3/512, CUDA 4096/3/4096).
"""
import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import time
import warnings

MODES = ("fp32", "tf32", "bf16", "fp16")


def cpu_model():
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return "unknown CPU"


# ----------------------------------------------------------------------------------------------------
# PyTorch's side (runs in a worker process, one per thread count, so the BLAS thread count is fixed
# before the library loads).

def torch_worker(a):
    import torch
    from torch import nn

    device = torch.device(a.device)
    if device.type == "cpu":
        torch.set_num_threads(a.worker_threads)
    cuda = device.type == "cuda"
    name = torch.cuda.get_device_name(device) if cuda else f"cpu ({cpu_model()})"

    def emit(obj):
        print(json.dumps(obj), flush=True)

    emit({"config": True, "torch": torch.__version__, "device_name": name,
          "threads": torch.get_num_threads(), "cuda": torch.version.cuda if cuda else None})

    def sync():
        if cuda:
            torch.cuda.synchronize(device)

    def make_scaler():
        if hasattr(torch, "amp") and hasattr(torch.amp, "GradScaler"):
            try:
                return torch.amp.GradScaler(device.type)
            except Exception as e:  # noqa: BLE001 -- e.g. a device type this version has no scaler for
                if cuda:
                    return torch.cuda.amp.GradScaler()
                raise NotImplementedError(f"torch.amp.GradScaler('{device.type}') failed: {e}")
        if cuda:
            return torch.cuda.amp.GradScaler()
        raise NotImplementedError(f"PyTorch {torch.__version__} has no GradScaler for the CPU (torch.amp.GradScaler arrived in 2.3)")

    def make_opt(params, variant):
        kw = {"foreach": True} if variant == "foreach" else {"fused": True}
        if a.optim == "adam":
            return torch.optim.Adam(params, lr=1e-3, **kw)
        return torch.optim.SGD(params, lr=1e-4, **kw)

    def run(mode, variant):
        torch.manual_seed(0)
        layers = []
        for i in range(a.depth):
            layers.append(nn.Linear(a.width, a.width))
            if i + 1 < a.depth:
                layers.append(nn.ReLU())
        model = nn.Sequential(*layers).to(device)
        g = torch.Generator().manual_seed(0)
        x = torch.randn(a.batch, a.width, generator=g).to(device)
        if a.loss == "ce":
            y = torch.randint(0, a.width, (a.batch,), generator=g).to(device)
            loss_fn = nn.CrossEntropyLoss()
        else:
            y = torch.randn(a.batch, a.width, generator=g).to(device)
            loss_fn = nn.MSELoss()
        opt = make_opt(model.parameters(), variant)
        if cuda:
            torch.backends.cuda.matmul.allow_tf32 = mode == "tf32"
            torch.backends.cudnn.allow_tf32 = mode == "tf32"
        dtype = {"bf16": torch.bfloat16, "fp16": torch.float16}.get(mode)
        if dtype is not None:
            # Does this PyTorch autocast to `dtype` on this device? (1.13 warns and disables autocast for
            # float16 on the CPU instead of raising.)
            try:
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore")
                    with torch.no_grad(), torch.autocast(device.type, dtype=dtype):
                        got = model(x[:2]).dtype
            except RuntimeError as e:  # 1.13: "Currently, AutocastCPU only support Bfloat16 ..."
                raise NotImplementedError(f"PyTorch {torch.__version__} has no {dtype} autocast on {device.type}: {e}")
            if got != dtype:
                raise NotImplementedError(f"PyTorch {torch.__version__} has no {dtype} autocast on {device.type} "
                                          f"(linear ran in {got})")
        scaler = make_scaler() if mode == "fp16" else None
        skipped = [0]

        def step():
            if dtype is not None:
                with torch.autocast(device.type, dtype=dtype):
                    loss = loss_fn(model(x), y)
            else:
                loss = loss_fn(model(x), y)
            if scaler is not None:
                before = scaler.get_scale()
                scaler.scale(loss).backward()
                scaler.step(opt)
                scaler.update()
                if scaler.get_scale() < before:
                    skipped[0] += 1
            else:
                loss.backward()
                opt.step()
            opt.zero_grad(set_to_none=True)
            return loss

        for _ in range(a.warmup):
            step()
        sync()
        skipped[0] = 0
        times = []
        loss = None
        for _ in range(a.steps):
            t0 = time.perf_counter()
            loss = step()
            sync()
            times.append((time.perf_counter() - t0) * 1e3)
        if cuda:
            torch.backends.cuda.matmul.allow_tf32 = False
        return {"step_ms": statistics.median(times), "mean_ms": statistics.fmean(times), "min_ms": min(times),
                "final_loss": float(loss), "scaler_skipped": skipped[0],
                "scale": scaler.get_scale() if scaler is not None else 1.0}

    variants = ["foreach", "fused"] if cuda else ["foreach"]
    for mode in a.modes:
        if mode == "tf32" and not cuda:
            emit({"mode": mode, "unsupported": "TF32 does not exist on the CPU"})
            continue
        best = None
        errors = []
        for variant in variants:
            try:
                r = run(mode, variant)
            except NotImplementedError as e:
                emit({"mode": mode, "unsupported": str(e)})
                best = "reported"
                break
            except Exception as e:  # noqa: BLE001 -- report, try the next variant
                errors.append(f"{variant}: {type(e).__name__}: {e}")
                continue
            r["optimizer"] = variant
            if best is None or r["step_ms"] < best["step_ms"]:
                best = r
        if best == "reported":
            continue
        if best is None:
            emit({"mode": mode, "error": "; ".join(errors)})
        else:
            best["mode"] = mode
            best["variants_failed"] = errors
            emit(best)


# ----------------------------------------------------------------------------------------------------
# The driver.

def parse_lines(text):
    out = []
    for line in text.splitlines():
        line = line.strip()
        if line.startswith("{"):
            try:
                out.append(json.loads(line))
            except json.JSONDecodeError:
                pass
    return out


def run_ours(a, threads):
    cmd = [a.bench, "--device", a.device]
    for flag in ("width", "depth", "batch", "steps", "warmup"):
        v = getattr(a, flag)
        if v is not None:
            cmd += [f"--{flag}", str(v)]
    cmd += ["--modes", ",".join(a.modes)]
    cmd += ["--loss", a.loss, "--optim", a.optim]
    env = dict(os.environ)
    if threads is not None:
        env["OPENBLAS_NUM_THREADS"] = str(threads)
        env["OMP_NUM_THREADS"] = str(threads)
    try:
        p = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=a.timeout)
    except FileNotFoundError:
        return None, f"the benchmark binary {a.bench} does not exist: build it with " \
                     f"`cmake --build <build dir> --target gpulab-bench-amp`"
    except PermissionError:
        return None, f"{a.bench} is not executable"
    except subprocess.TimeoutExpired:
        return None, f"{' '.join(cmd)} ran past {a.timeout} s"
    lines = parse_lines(p.stdout)
    problem = None
    if p.returncode != 0:
        problem = f"{' '.join(cmd)} exited with {p.returncode}: {p.stderr.strip() or '(no message)'}"
    return lines, problem


def run_torch(a, threads, config):
    """threads: None (CUDA) or (torch threads, OpenBLAS threads)."""
    cmd = [a.python, os.path.abspath(__file__), "--worker", "--device", a.device,
           "--width", str(config["width"]), "--depth", str(config["depth"]), "--batch", str(config["batch"]),
           "--steps", str(config["steps"]), "--warmup", str(config["warmup"]), "--modes", ",".join(a.modes),
           "--loss", a.loss, "--optim", a.optim]
    env = dict(os.environ)
    if threads is not None:
        intra, blas = threads
        cmd += ["--worker-threads", str(intra)]
        env["OMP_NUM_THREADS"] = env["MKL_NUM_THREADS"] = str(intra)
        env["OPENBLAS_NUM_THREADS"] = str(blas)
    try:
        p = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=a.timeout)
    except subprocess.TimeoutExpired:
        return [], f"the PyTorch worker ran past {a.timeout} s"
    lines = parse_lines(p.stdout)
    problem = None
    if p.returncode != 0:
        err = p.stderr.strip().splitlines()
        problem = f"the PyTorch worker ({a.python}) exited with {p.returncode}: {err[-1] if err else '(no message)'}"
    return lines, problem


def best_per_mode(runs):
    """runs: [(threads, [json lines])] -> ({mode: (threads, line)}, {mode: note}), the fastest run per mode."""
    best, notes = {}, {}
    for threads, lines in runs:
        for line in lines:
            mode = line.get("mode")
            if not mode:
                continue
            if "step_ms" in line:
                if mode not in best or line["step_ms"] < best[mode][1]["step_ms"]:
                    best[mode] = (threads, line)
            else:
                notes.setdefault(mode, line.get("unsupported") or line.get("skipped") or
                                 ("failed: " + line.get("error", "?")))
    return best, notes


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--bench", default="build/bin/gpulab-bench-amp")
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--width", type=int)
    ap.add_argument("--depth", type=int)
    ap.add_argument("--batch", type=int)
    ap.add_argument("--steps", type=int)
    ap.add_argument("--warmup", type=int)
    ap.add_argument("--modes", help="comma-separated subset of fp32,tf32,bf16,fp16 (default: all that apply)")
    ap.add_argument("--loss", choices=("mse", "ce"), default="mse")
    ap.add_argument("--optim", choices=("sgd", "adam"), default="sgd")
    ap.add_argument("--threads", default="1,2", help="GPU Lab: OMP_NUM_THREADS values to try on the CPU (default 1,2)")
    ap.add_argument("--torch-threads", default="1/1,2/2,1/2,2/1",
                    help="PyTorch: torch threads/OpenBLAS threads pairs to try on the CPU (default 1/1,2/2,1/2,2/1)")
    ap.add_argument("--repeat", type=int, default=1, help="alternate both sides this many times, keep each side's fastest")
    ap.add_argument("--python", default=sys.executable, help="the Python with PyTorch (default: this one)")
    ap.add_argument("--timeout", type=int, default=1800)
    ap.add_argument("--json", help="write the rows here")
    ap.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--worker-threads", type=int, default=1, help=argparse.SUPPRESS)
    a = ap.parse_args()
    cuda = a.device.startswith("cuda")
    a.modes = a.modes.split(",") if a.modes else [m for m in MODES if cuda or m != "tf32"]
    bad = [m for m in a.modes if m not in MODES]
    if bad:
        sys.exit(f"amp_bench.py: unknown mode(s) {', '.join(bad)} (fp32, tf32, bf16, fp16)")

    if a.worker:
        torch_worker(a)
        return

    thread_choices = [int(t) for t in a.threads.split(",")] if not cuda else [None]
    torch_choices = [None]
    if not cuda:
        torch_choices = []
        for spec in a.torch_threads.split(","):
            intra, _, blas = spec.partition("/")
            torch_choices.append((int(intra), int(blas or intra)))

    # GPU Lab and PyTorch alternate, thread count by thread count, `--repeat` times: on a shared machine
    # the load changes, and alternating lets neither side have the quiet minutes. Per mode, each side's
    # fastest median is its figure; every run is printed.
    ours_runs, torch_runs, problems = [], [], []
    ours_config, torch_config, ours_dead = None, None, False

    def summary(lines):
        return ", ".join(f"{l['mode']} {l['step_ms']:.1f} ms" for l in lines if "step_ms" in l) or "no timings"

    for rep in range(a.repeat):
        for t in thread_choices:
            label = f"OMP_NUM_THREADS={t}" if t else "default"
            if not ours_dead:
                lines, problem = run_ours(a, t)
                if lines is None:
                    print(f"GPU Lab: {problem}")
                    problems.append(problem)
                    ours_dead = True
                else:
                    if problem:
                        print(f"GPU Lab ({label}): {problem}")
                        problems.append(problem)
                    ours_runs.append((t, [l for l in lines if not l.get("config")]))
                    ours_config = ours_config or next((l for l in lines if l.get("config")), None)
                    print(f"run {rep + 1}, GPU Lab ({label}): {summary(ours_runs[-1][1])}", flush=True)
            if ours_config is None:
                default_gpu = (4096, 3, 4096, 50, 5)
                default_cpu = (1024, 3, 512, 20, 3)
                w, d, b, st, wu = default_gpu if cuda else default_cpu
                ours_config = {"width": a.width or w, "depth": a.depth or d, "batch": a.batch or b, "steps": a.steps or st,
                               "warmup": a.warmup if a.warmup is not None else wu, "device_name": "(GPU Lab did not run)"}
                print("GPU Lab gave no results; PyTorch still runs, with the sizes given (or the binary's defaults)")
        for t in torch_choices:
            lines, problem = run_torch(a, t, ours_config)
            tlabel = f"torch {t[0]} thr, BLAS {t[1]} thr" if t else "default"
            if problem:
                print(f"PyTorch ({tlabel}): {problem}")
                problems.append(problem)
            torch_runs.append((t, [l for l in lines if not l.get("config")]))
            torch_config = torch_config or next((l for l in lines if l.get("config")), None)
            print(f"run {rep + 1}, PyTorch ({tlabel}): {summary(torch_runs[-1][1])}", flush=True)

    ours_best, ours_notes = best_per_mode(ours_runs)
    torch_best, torch_notes = best_per_mode(torch_runs)

    c = ours_config
    flops = 6.0 * c["batch"] * c["width"] ** 2 * c["depth"]
    print()
    print(f"GEMM-bound MLP {c['depth']} x Linear({c['width']}, {c['width']}) + ReLU, batch {c['batch']}, "
          f"{'cross-entropy' if a.loss == 'ce' else 'MSE'}, {a.optim.upper() if a.optim == 'sgd' else 'Adam'}; "
          f"median of {c['steps']} steps after {c['warmup']} warm-up; {flops / 1e9:.2f} GFLOP per step")
    print(f"GPU Lab: {re.sub(r', OpenBLAS threads: [^)]*', '', c.get('device_name', '?'))}")
    if torch_config:
        print(f"PyTorch {torch_config['torch']}: {torch_config['device_name']}"
              + (f", CUDA {torch_config['cuda']}" if torch_config.get("cuda") else ""))
    if not cuda:
        print(f"CPU threads tried: GPU Lab OMP_NUM_THREADS in {{{a.threads}}}; PyTorch torch.set_num_threads"
              f"(=OMP_NUM_THREADS) / OPENBLAS_NUM_THREADS in {{{a.torch_threads}}}; both link the system OpenBLAS; "
              f"the fastest per mode and side is used, over {a.repeat} alternating repeat(s)")
    if "emulated" in str(c.get("device_name", "")):
        print("warning: GPU Lab's cuda device is the emulated GPU (it runs on the CPU): no timing may be drawn from it")
    print("ratio = PyTorch ms / GPU Lab ms (> 1: GPU Lab faster); speed-up = that side's fp32 ms / mode ms")
    header = f"{'mode':<5} {'GPU Lab ms':>11} {'(config)':<12} {'PyTorch ms':>11} {'(config)':<22} {'ratio':>7} " \
             f"{'ours vs fp32':>13} {'torch vs fp32':>14}"
    print(header)
    rows = []
    ours_fp32 = ours_best.get("fp32", (None, {}))[1].get("step_ms")
    torch_fp32 = torch_best.get("fp32", (None, {}))[1].get("step_ms")

    def cfg_ours(t):
        return f"blas {t} thr" if t else "default"

    def cfg_torch(t, line):
        parts = [f"{t[0]} thr/BLAS {t[1]}"] if t else []
        parts.append(line.get("optimizer", ""))
        return ", ".join(p for p in parts if p)

    for mode in a.modes:
        o = ours_best.get(mode)
        p = torch_best.get(mode)
        o_ms = o[1]["step_ms"] if o else None
        p_ms = p[1]["step_ms"] if p else None
        row = {"mode": mode, "gpulab_ms": o_ms, "pytorch_ms": p_ms,
               "gpulab_config": cfg_ours(o[0]) if o else ours_notes.get(mode, "no result"),
               "pytorch_config": cfg_torch(p[0], p[1]) if p else torch_notes.get(mode, "no result")}
        row["ratio"] = p_ms / o_ms if o_ms and p_ms else None
        row["gpulab_speedup_vs_fp32"] = ours_fp32 / o_ms if o_ms and ours_fp32 else None
        row["pytorch_speedup_vs_fp32"] = torch_fp32 / p_ms if p_ms and torch_fp32 else None
        row["gpulab_tflops"] = flops / (o_ms * 1e-3) / 1e12 if o_ms else None
        row["pytorch_tflops"] = flops / (p_ms * 1e-3) / 1e12 if p_ms else None
        if o and o[1].get("scaler_skipped"):
            row["gpulab_scaler_skipped"] = o[1]["scaler_skipped"]
        if p and p[1].get("scaler_skipped"):
            row["pytorch_scaler_skipped"] = p[1]["scaler_skipped"]
        rows.append(row)

        def fmt(v, spec):
            return format(v, spec) if v is not None else "-"

        print(f"{mode:<5} {fmt(o_ms, '11.2f')} {(cfg_ours(o[0]) if o else ''):<12} {fmt(p_ms, '11.2f')} "
              f"{(cfg_torch(p[0], p[1]) if p else ''):<22} {fmt(row['ratio'], '6.2f') + 'x' if row['ratio'] else '      -':>7} "
              f"{fmt(row['gpulab_speedup_vs_fp32'], '12.2f') + 'x' if row['gpulab_speedup_vs_fp32'] else '            -':>13} "
              f"{fmt(row['pytorch_speedup_vs_fp32'], '13.2f') + 'x' if row['pytorch_speedup_vs_fp32'] else '             -':>14}")
        if not o:
            print(f"      GPU Lab: {ours_notes.get(mode, 'no result')}")
        if not p:
            print(f"      PyTorch: {torch_notes.get(mode, 'no result')}")
        for side, best in (("GPU Lab", o), ("PyTorch", p)):
            if best and best[1].get("scaler_skipped"):
                print(f"      {side}: the GradScaler skipped {best[1]['scaler_skipped']} timed steps")

    if cuda and "emulated" not in str(c.get("device_name", "")):
        amp_rows = [r for r in rows if r["mode"] in ("bf16", "fp16") and r["gpulab_speedup_vs_fp32"]]
        for r in amp_rows:
            print(f"target: GPU Lab {r['mode']} AMP >= 2x its fp32: {r['gpulab_speedup_vs_fp32']:.2f}x "
                  f"({'met' if r['gpulab_speedup_vs_fp32'] >= 2 else 'NOT met'}); within 1.0x of PyTorch AMP: "
                  + (f"{r['ratio']:.2f}x ({'met' if r['ratio'] >= 1.0 else 'NOT met'})" if r["ratio"] else "-"))

    if a.json:
        with open(a.json, "w") as f:
            json.dump({"device": a.device, "gpulab_device": c.get("device_name"),
                       "torch": torch_config.get("torch") if torch_config else None,
                       "config": {k: c.get(k) for k in ("width", "depth", "batch", "steps", "warmup")},
                       "loss": a.loss, "optim": a.optim, "threads_tried": {"gpulab": a.threads, "pytorch": a.torch_threads} if not cuda else None,
                       "repeat": a.repeat, "rows": rows, "problems": problems,
                       "runs": {"gpulab": [{"blas_threads": t, "lines": l} for t, l in ours_runs],
                                "pytorch": [{"torch_blas_threads": t, "lines": l} for t, l in torch_runs]}}, f, indent=1)
    if problems:
        sys.exit(1)


if __name__ == "__main__":
    main()
