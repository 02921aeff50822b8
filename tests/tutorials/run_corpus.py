#!/usr/bin/env python3
"""Runs the tutorial corpus under real PyTorch and under GPU Lab's torch, and compares them.

For each script in tests/tutorials/<group>/*.py: run it with the reference interpreter (real
PyTorch), with `gpulab-cli run` (GPU Lab on the CPU) and with `gpulab-cli run --emulated-gpu`;
report ok / fails (with the exception's type and first message line), and compare the printed
"structure" of GPU Lab's run against PyTorch's: stdout lines with every number masked to '#', so
random values do not matter but printed modules, shapes, dtypes and messages do.

Exit status: 1 when any script that runs under PyTorch fails under GPU Lab (either mode), else 0.
"""
import argparse
import json
import os
import re
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))

NUM = re.compile(r"[-+]?(?:\d+\.\d*|\.\d+|\d+)(?:[eE][-+]?\d+)?|\bnan\b|\binf\b")


def mask(line, device_blind=False):
    line = re.sub(r"\b0x[0-9a-fA-F]+\b", "0x#", line.rstrip())  # an object's address (<MulBackward0 object at 0x7f...>)
    line = NUM.sub("#", line)
    # runs of masked numbers in tensors print with data-dependent padding and wrapping
    line = re.sub(r"#(?:[\s,]*#)+", "#", line)
    line = re.sub(r"\s*#\s*", "#", line)
    if device_blind:
        # real PyTorch here has no CUDA, so a script that picks "cuda" when available prints
        # cpu there and cuda on GPU Lab's emulated GPU
        line = re.sub(r"device='[^']*',\s*", "", line)  # wherever the tensor's printing wrapped it
        line = re.sub(r",\s*device='[^']*'", "", line)
        line = re.sub(r"\b(?:cuda|cpu)(?::#)?", "<device>", line)
    return re.sub(r"\s+", " ", line).strip()


def ignored_patterns(path, mode):
    """`# GPU Lab corpus: structure-ignore: REGEX` lines in a script name stdout lines whose
    text depends on random data (e.g. predicted class names) and is left out of the comparison;
    `# GPU Lab corpus: emulated-structure-ignore: REGEX` lines name what a script prints only where
    CUDA is available (its `if torch.cuda.is_available():` block), left out in the emulated mode, whose
    GPU the reference PyTorch here lacks."""
    keys = ("structure-ignore",) + (("emulated-structure-ignore",) if mode == "emulated" else ())
    pats = []
    with open(path, encoding="utf-8") as f:
        for line in f:
            m = re.match(r"\s*# GPU Lab corpus: ([\w-]+): (.+?)\s*$", line)
            if m and m.group(1) in keys:
                pats.append(re.compile(m.group(2)))
    return pats


# A line of nothing but numbers and brackets is a tensor's data: where its printing wraps depends on the
# values' widths (a minus sign, one more digit), which random data decide.
DATA_ONLY = re.compile(r"[#\[\](),\s]*")


def structure(stdout, ignore=(), device_blind=False, keep_data_lines=False):
    """The masked stdout lines; a tensor's data-only continuation lines are left out for the line-by-line
    report (their number depends on the wrapping) and kept for the joined comparison (they hold the
    brackets that close a wrapped row)."""
    lines = [l for l in stdout.splitlines() if not any(p.search(l) for p in ignore)]
    return [m for m in (mask(l, device_blind) for l in lines)
            if m and (keep_data_lines or not DATA_ONLY.fullmatch(m))]


def first_error(stderr, rc, timed_out):
    if timed_out:
        return "Timeout", "timed out"
    lines = [l for l in stderr.splitlines() if l.strip()]
    # the last line of a Python traceback: "SomeError: message"
    for i in range(len(lines) - 1, -1, -1):
        m = re.match(r"^([A-Za-z_][\w.]*(?:Error|Exception|Exit|Interrupt|Warning)|AssertionError)(?::\s*(.*))?$", lines[i])
        if m:
            return m.group(1), (m.group(2) or "").strip()
    return "exit %d" % rc, lines[-1][:200] if lines else ""


def run(cmd, cwd, timeout, env):
    t0 = time.time()
    try:
        p = subprocess.run(cmd, cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                           timeout=timeout, env=env, universal_newlines=True, errors="replace")
        out, err, rc, to = p.stdout, p.stderr, p.returncode, False
    except subprocess.TimeoutExpired as e:
        def s(x):
            return x.decode(errors="replace") if isinstance(x, bytes) else (x or "")
        out, err, rc, to = s(e.stdout), s(e.stderr), -1, True
    res = {"ok": rc == 0 and not to, "rc": rc, "seconds": round(time.time() - t0, 1)}
    if not res["ok"]:
        res["error_type"], res["error"] = first_error(err, rc, to)
    res["_stdout"] = out
    return res


def joined(lines):
    """The structure as one string without white space, each run of numbers one '#': where a printed tensor
    wraps its rows depends on its values' widths (a minus sign, an exponent), so the comparison does not see
    line breaks."""
    text = re.sub(r"\s+", "", "".join(lines))
    return re.sub(r"#(?:,#)+", "#", text)


def compare(ref, other, ignore=(), device_blind=False):
    if joined(structure(ref["_stdout"], ignore, device_blind, keep_data_lines=True)) == \
            joined(structure(other["_stdout"], ignore, device_blind, keep_data_lines=True)):
        return None
    a = structure(ref["_stdout"], ignore, device_blind)
    b = structure(other["_stdout"], ignore, device_blind)
    for i in range(max(len(a), len(b))):
        x = a[i] if i < len(a) else "<end of output>"
        y = b[i] if i < len(b) else "<end of output>"
        if x != y:
            return {"line": i + 1, "pytorch": x, "gpulab": y}
    return None


def scripts():
    for group in sorted(os.listdir(HERE)):
        d = os.path.join(HERE, group)
        if not os.path.isdir(d) or group.startswith(("_", ".")):
            continue
        for f in sorted(os.listdir(d)):
            if f.endswith(".py") and not f.startswith("_"):
                yield group + "/" + f[:-3], os.path.join(d, f)


# Where each script that GPU Lab cannot run yet stops: a piece of its error's text, the same on the CPU
# and the emulated GPU. ctest (--ctest) skips such a script, naming the gap; a script that stops
# anywhere else fails, and one that runs although it is listed fails too, asking to be taken off --
# so this list is always the corpus's work list (README.md's table).
KNOWN_GAPS = {
    "basics/saveloadrun_tutorial": "Weights only load failed",  # torch.load of a whole model: 2.6+ refuses it by default too
    "examples/polynomial_autograd": "'accelerator'",  # PyTorch 2.x's torch.accelerator
    "nlp/advanced_tutorial": "torch.nn.LSTM",
    "nlp/sequence_models_tutorial": "torch.nn.LSTM",
    "pytorch_examples/mnist_main": "torch.optim.Adadelta",
    "pytorch_examples/mnist_rnn_main": "torch.nn.LSTM",
    "pytorch_examples/time_sequence_prediction_train": "Weights only load failed",  # numpy in torch.load (2.6+ refuses it too)
}
# A run that must fail, and how: the AMP recipe asks for CUDA, which a machine without a GPU refuses, as
# PyTorch there refuses it ("Torch not compiled with CUDA enabled" in a CPU build).
EXPECTED_ERRORS = {("recipes/amp_recipe", "gpulab"): "no usable GPU"}
SKIP = 77


def ctest(name, mode, args):
    """One script in one mode, as a ctest test: 0 when GPU Lab runs it and prints what PyTorch prints (masked
    numbers), 77 (skipped) when it stops at its known gap, 1 otherwise."""
    path = os.path.join(HERE, name + ".py")
    env = dict(os.environ, MPLBACKEND="Agg", PYTHONDONTWRITEBYTECODE="1")
    cli = os.path.abspath(args.gpulab_cli)
    ours = run([cli, "run"] + (["--emulated-gpu"] if mode == "emulated" else []) + [path], os.path.dirname(path), args.timeout, env)
    expected = EXPECTED_ERRORS.get((name, mode))
    if expected is not None:
        if not ours["ok"] and expected in ours["error"]:
            print(f"{name} ({mode}) refuses as it must: {ours['error_type']}: {ours['error']}")
            return 0
        print(f"{name} ({mode}) was to fail with {expected!r}; it " + ("ran" if ours["ok"] else f"failed with {ours['error_type']}: {ours['error']}"))
        return 1
    gap = KNOWN_GAPS.get(name)
    if gap is not None:
        if ours["ok"]:
            print(f"{name} runs under GPU Lab ({mode}) now: take it off run_corpus.py's KNOWN_GAPS")
            return 1
        if gap in ours["error"] or gap in ours["error_type"]:
            print(f"{name}: not yet -- GPU Lab's torch stops at {ours['error_type']}: {ours['error']}")
            return SKIP
        print(f"{name} ({mode}) stops somewhere else than its known gap ({gap!r}): {ours['error_type']}: {ours['error']}")
        return 1
    if not ours["ok"]:
        print(f"{name} ({mode}) fails under GPU Lab: {ours['error_type']}: {ours['error']}")
        return 1
    reference = run([args.python, path], os.path.dirname(path), args.timeout, env)
    if not reference["ok"]:
        # PyTorch 1.13 cannot run it (it needs 2.x, or a GPU): GPU Lab's outcome stands alone.
        print(f"{name} ({mode}) runs under GPU Lab; PyTorch at {args.python} does not ({reference['error_type']}: {reference['error']})")
        return 0
    mismatch = compare(reference, ours, ignored_patterns(path, mode), device_blind=(mode == "emulated"))
    if mismatch:
        print(f"{name} ({mode}): the printed structure differs at line {mismatch['line']}:\n  PyTorch:  {mismatch['pytorch']}\n"
              f"  GPU Lab:  {mismatch['gpulab']}")
        return 1
    print(f"{name} ({mode}) runs as under PyTorch")
    return 0


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--ctest", nargs=2, metavar=("NAME", "MODE"),
                    help="ctest's test of one script (group/name) in one mode (gpulab or emulated)")
    ap.add_argument("--list", action="store_true", help="print the scripts' names, one a line (for ctest)")
    ap.add_argument("--gpulab-cli", default=os.path.join(REPO, "build", "bin", "gpulab-cli"),
                    help="gpulab-cli to run GPU Lab's torch (default: build/bin/gpulab-cli)")
    ap.add_argument("--python", default="/usr/bin/python3",
                    help="interpreter with real PyTorch (default: /usr/bin/python3)")
    ap.add_argument("--only", action="append", default=[],
                    help="run only scripts whose name (group/name) contains this; repeatable")
    ap.add_argument("--timeout", type=float, default=120, help="seconds per run (default 120)")
    ap.add_argument("--modes", default="pytorch,gpulab,emulated",
                    help="comma list of pytorch, gpulab, emulated (default: all three)")
    ap.add_argument("--json", action="store_true", help="print the results as JSON")
    args = ap.parse_args()
    if args.list:
        print("\n".join(name for name, _ in scripts()))
        return 0
    if args.ctest:
        return ctest(args.ctest[0], args.ctest[1], args)

    env = dict(os.environ, MPLBACKEND="Agg", PYTHONDONTWRITEBYTECODE="1")
    cli = os.path.abspath(args.gpulab_cli)
    modes = [m.strip() for m in args.modes.split(",") if m.strip()]
    cmds = {"pytorch": lambda p: [args.python, p],
            "gpulab": lambda p: [cli, "run", p],
            "emulated": lambda p: [cli, "run", "--emulated-gpu", p]}
    results = []
    for name, path in scripts():
        if args.only and not any(o in name for o in args.only):
            continue
        r = {"script": name}
        for m in modes:
            r[m] = run(cmds[m](path), os.path.dirname(path), args.timeout, env)
        if "pytorch" in r:
            for m in ("gpulab", "emulated"):
                if m in r and r["pytorch"]["ok"] and r[m]["ok"]:
                    r[m]["mismatch"] = compare(r["pytorch"], r[m], ignored_patterns(path, m),
                                               device_blind=(m == "emulated"))
        for m in modes:
            r[m].pop("_stdout", None)
        results.append(r)
        if not args.json:
            print(line_for(r, modes), flush=True)

    failed = [r["script"] for r in results
              if r.get("pytorch", {"ok": True})["ok"]
              and any(m in r and not r[m]["ok"] for m in ("gpulab", "emulated"))]
    if args.json:
        print(json.dumps({"results": results, "gpulab_failures": failed}, indent=1))
    else:
        n = len(results)
        for m in modes:
            print("%-9s ok: %d / %d" % (m, sum(r[m]["ok"] for r in results), n))
        mism = [r["script"] for r in results
                if any(r.get(m, {}).get("mismatch") for m in ("gpulab", "emulated"))]
        print("structure mismatches: %d%s" % (len(mism), (" (" + ", ".join(mism) + ")") if mism else ""))
    return 1 if failed else 0


def line_for(r, modes):
    parts = [r["script"]]
    for m in modes:
        x = r[m]
        if x["ok"]:
            s = "ok"
            mm = x.get("mismatch")
            if mm:
                s += " (structure differs at line %d: pytorch %r / gpulab %r)" % (
                    mm["line"], mm["pytorch"][:80], mm["gpulab"][:80])
        else:
            s = "FAILS %s: %s" % (x["error_type"], x["error"][:160])
        parts.append("  %s: %s [%ss]" % (m, s, x["seconds"]))
    return "\n".join(parts)


if __name__ == "__main__":
    sys.exit(main())
