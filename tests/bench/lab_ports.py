#!/usr/bin/env python3
"""A lab rewritten in Python against the C++ lab it replaces (issue 49): the same lesson's run blocks
through `gpulab-cli lesson ID --json [--quick]` of two builds -- one from before the rewrite (its
lessons name the C++ lab), one after -- the two taking turns, round after round. Each run block's time
is the wall time from its "run" event to the next (or to the end), so the Python lab's session start
(a fresh Python process, `import torch`) is in it, as the learner meets it. Prints each block's median
on each side, their ratio (Python / C++) and the range of the rounds' ratios, and with --measurement
NAME the medians of a measurement both sides report (a lab's own speed, steps/s say).

Usage: /usr/bin/python3 tests/bench/lab_ports.py --before /work/cxxlabs/build --after build \\
           --lesson syncs-and-transfers [--quick] [--rounds 5] [--measurement NAME]...
The lesson's code cells run first on each side and are not counted.
"""
import argparse
import json
import os
import statistics
import subprocess
import time


def one_run(build, lesson, quick):
    """Seconds of each run block, and the measurements each sent, from one `gpulab-cli lesson` run."""
    cmd = [os.path.join(build, "bin", "gpulab-cli"), "lesson", lesson, "--json"] + (["--quick"] if quick else [])
    env = dict(os.environ, XDG_CACHE_HOME=os.environ.get("XDG_CACHE_HOME", "/tmp/lab-ports-cache"))
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, text=True, env=env)
    blocks, measurements, current, started = [], [], None, None
    for line in proc.stdout:
        now = time.perf_counter()
        if not line.startswith("{"):
            continue
        event = json.loads(line)
        if event.get("event") == "run":
            if current is not None:
                blocks.append(now - started)
            current, started = event["index"], now
            measurements.append({})
        elif event.get("event") == "measurement" and current is not None:
            measurements[-1][event["name"]] = event["value"]
    end = time.perf_counter()
    if current is not None:
        blocks.append(end - started)
    if proc.wait() != 0:
        raise SystemExit(f"{' '.join(cmd)} failed with exit status {proc.returncode}")
    return blocks, measurements


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--before", required=True, help="the build whose lessons run the C++ lab")
    parser.add_argument("--after", required=True, help="the build whose lessons run the Python lab")
    parser.add_argument("--lesson", required=True)
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--measurement", action="append", default=[])
    args = parser.parse_args()
    sides = {"C++": args.before, "Python": args.after}
    times = {side: [] for side in sides}
    values = {side: [] for side in sides}
    for r in range(args.rounds):
        for side, build in sides.items():
            blocks, measured = one_run(build, args.lesson, args.quick)
            times[side].append(blocks)
            values[side].append(measured)
        print(f"round {r + 1}: " + ", ".join(f"{side} {' / '.join(f'{t:.2f}' for t in times[side][-1])} s" for side in sides), flush=True)
    print(f"\n{args.lesson}{' --quick' if args.quick else ''}, {args.rounds} rounds (the two sides taking turns):")
    for block in range(len(times["C++"][0])):
        cpp = [t[block] for t in times["C++"]]
        py = [t[block] for t in times["Python"]]
        ratios = [p / c for p, c in zip(py, cpp)]
        print(f"  run block {block + 1}: C++ {statistics.median(cpp):.2f} s, Python {statistics.median(py):.2f} s: "
              f"Python / C++ {statistics.median(ratios):.2f}x (rounds {min(ratios):.2f}x to {max(ratios):.2f}x)")
        for name in args.measurement:
            got = {side: [v[block].get(name) for v in values[side] if name in v[block]] for side in sides}
            if all(got.values()):
                print(f"    {name}: C++ {statistics.median(got['C++']):.4g}, Python {statistics.median(got['Python']):.4g}")


if __name__ == "__main__":
    main()
