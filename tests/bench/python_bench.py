#!/usr/bin/env python3
"""The seed loop written in Python (python_seed_loop.py), run as written under GPU Lab's torch and
under PyTorch, each at its best thread count; prints steps/s of both and the ratio. Issue 28's
target: GPU Lab's torch at >= 3x PyTorch's steps/s on the same CPU (aim 5x).

Usage: /usr/bin/python3 tests/bench/python_bench.py --build build [--repeat 3]
(Debian's PyTorch is python3-torch; GPU Lab's torch is <build>/python.)
"""
import argparse
import os
import statistics
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
SCRIPT = os.path.join(HERE, "python_seed_loop.py")


def run(command, env):
    out = subprocess.run(command, check=True, capture_output=True, text=True, env=env).stdout.strip().splitlines()[-1]
    fields = dict(part.split("=") for part in out.split())
    return int(fields["steps"]) / float(fields["seconds"])


def best(label, make, threads, repeat):
    results = {}
    for n in threads:
        results[n] = statistics.median(make(n) for _ in range(repeat))
        print(f"  {label}, {n} thread(s): {results[n]:,.0f} steps/s (median of {repeat})")
    n = max(results, key=results.get)
    return n, results[n]


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--build", default="build")
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--epochs", type=int, default=60)
    args = parser.parse_args()
    python = "/usr/bin/python3" if os.path.exists("/usr/bin/python3") else sys.executable
    threads = list(range(1, (os.cpu_count() or 1) + 1))
    base = dict(os.environ, BENCH_EPOCHS=str(args.epochs), GPULAB_EMULATED_GPU="0")

    def gpulab(n):
        env = dict(base, PYTHONPATH=os.path.join(args.build, "python"), OMP_NUM_THREADS=str(n))
        return run([python, "-m", "gpulab", SCRIPT], env)

    def pytorch(n):
        env = dict(base, BENCH_TORCH_THREADS=str(n))
        env.pop("PYTHONPATH", None)
        return run([python, SCRIPT], env)

    print("The seed loop in Python (1024 x 16, 16-64-1 MLP, Adam, batch 64, shuffled), CPU:")
    n_ours, ours = best("GPU Lab's torch (OMP_NUM_THREADS)", gpulab, threads, args.repeat)
    n_theirs, theirs = best("PyTorch (torch.set_num_threads)", pytorch, threads, args.repeat)
    print(f"GPU Lab's torch {ours:,.0f} steps/s ({n_ours} thread(s)) vs PyTorch {theirs:,.0f} steps/s ({n_theirs} thread(s)): "
          f"{ours / theirs:.2f}x (target >= 3x)")


if __name__ == "__main__":
    main()
