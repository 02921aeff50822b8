"""A lesson's sentence against what its cells print (issue 48, 4.6: no sentence contradicts the
numbers beside it). Lesson 04's exercise says the starter's kept graphs hold "2 MiB per batch, 16 MiB
for the eight" and the predictions themselves 0.08 MiB: its starter and its solution, run as a
learner runs them -- alone, after the setup cell (what a Restart runs again), one after the other in
one session -- must print those numbers. (The cells printed the total allocated, which the setup's
model and Adam state, 16 MiB, changed: 28.3 MiB for the starter against 28.1 for the fix after a
Restart, where the text promised a 16 MiB saving.)

    PYTHONPATH=build/python python3 tests/python/lesson_claims.py lessons
"""
import contextlib
import io
import os
import re
import sys

os.environ["GPULAB_EMULATED_GPU"] = "1"  # cuda:0 on any machine: the exercise is about a GPU's memory

from gpulab import as_torch  # noqa: E402

as_torch.install()
import torch  # noqa: E402,F401  (the cells import it themselves)


def python_blocks(text):
    """The lesson's ```python blocks: (kind, code), kind "" for a plain cell, "setup", "exercise", "solution"."""
    return [(kind or "", code) for kind, code in re.findall(r"^```python(?: (\w+))?\n(.*?)^```", text, re.M | re.S)]


def printed_mib(code, namespace, label):
    """Runs `code` in `namespace` and returns the MiB its output names ("... left 16.08 MiB allocated")."""
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        exec(compile(code, label, "exec"), namespace)
    found = re.findall(r"([0-9]+(?:\.[0-9]+)?) MiB", out.getvalue())
    if not found:
        raise AssertionError(f"{label} printed no size in MiB: {out.getvalue()!r}")
    return float(found[-1]), out.getvalue().strip()


def where_memory_goes(lessons):
    path = os.path.join(lessons, "04-where-memory-goes", "lesson.md")
    with open(path, encoding="utf-8") as f:
        text = f.read()
    prose = re.sub(r"\s+", " ", text)
    graphs = re.search(r"— 2 MiB per batch, ([0-9.]+) MiB for the eight", prose)
    preds = re.search(r"the predictions themselves are [^,]*, ([0-9.]+) MiB", prose)
    if not graphs:
        return [f"{path}: the exercise's sentence on what the graphs hold is gone"]
    kept = float(preds.group(1)) if preds else 0.0  # what the predictions themselves hold, where the text says it
    claim_starter = float(graphs.group(1)) + kept   # the predictions and their graphs
    claim_fix = kept                                # the predictions alone
    blocks = python_blocks(text)
    setup = [code for kind, code in blocks if kind == "setup"]
    starter = next(code for kind, code in blocks if kind == "exercise")
    solution = next(code for kind, code in blocks if kind == "solution")

    def session(with_setup):
        namespace = {"__name__": "__main__"}
        for i, code in enumerate(setup if with_setup else []):
            exec(compile(code, f"setup {i}", "exec"), namespace)
        return namespace

    # What a learner does: each pairing of a starter's run and a fix's run they might compare.
    runs = {}
    runs["starter, alone"] = printed_mib(starter, session(False), "starter")
    restarted = session(True)
    runs["starter, after a Restart (the setup ran again)"] = printed_mib(starter, restarted, "starter")
    runs["the fix, after the starter in the same session"] = printed_mib(solution, restarted, "solution")
    runs["the fix, after a Restart"] = printed_mib(solution, session(True), "solution")
    runs["the fix, alone"] = printed_mib(solution, session(False), "solution")
    problems = []
    for name, (mib, output) in runs.items():
        claim = claim_starter if name.startswith("starter") else claim_fix
        tolerance = 0.02 * claim + 0.01
        print(f"{name}: {output!r} -- the text says {claim:.2f} MiB")
        if abs(mib - claim) > tolerance:
            problems.append(f"{name}: the cell printed {mib} MiB where the text says {claim:.2f} MiB ({output!r})")
    return problems


def main():
    lessons = sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(__file__), "..", "..", "lessons")
    problems = where_memory_goes(lessons)
    for p in problems:
        print("FAIL:", p)
    if not problems:
        print("ok")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
