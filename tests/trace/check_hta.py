#!/usr/bin/env python3
"""Reads a trace GPU Lab's profiler wrote with Holistic Trace Analysis (PyPI: HolisticTraceAnalysis),
as a learner carrying a trace from a lesson to HTA would, and checks what HTA finds: the GPU kernels,
the iterations (ProfilerStep#N) and the temporal breakdown (idle, compute, non-compute time).

    check_hta.py TRACE.json

Exit status: 0 when HTA reads it all, 1 when it does not (what failed is printed), 77 when HTA is not
installed (ctest and the suites report a skip).
"""
import os
import shutil
import sys
import tempfile

try:
    from hta.trace_analysis import TraceAnalysis
except ImportError:
    print("HolisticTraceAnalysis is not installed (pip install HolisticTraceAnalysis)")
    sys.exit(77)


def main() -> int:
    if len(sys.argv) != 2:
        print(__doc__)
        return 2
    with tempfile.TemporaryDirectory() as folder:
        # HTA reads a folder of traces, one per rank.
        shutil.copy(sys.argv[1], os.path.join(folder, "rank-0.json"))
        analyzer = TraceAnalysis(trace_dir=folder)
        trace = analyzer.t.get_trace(0)
        kernels = trace[trace["stream"] >= 0] if "stream" in trace.columns else trace.iloc[0:0]
        print(f"HTA read {len(trace)} events, {len(kernels)} of them GPU kernels")
        if len(kernels) == 0:
            print("HTA found no GPU kernels")
            return 1
        iterations = sorted(set(trace["iteration"])) if "iteration" in trace.columns else []
        print(f"iterations: {[i for i in iterations if i >= 0]}")
        if not [i for i in iterations if i >= 0]:
            print("HTA found no iterations (ProfilerStep#N)")
            return 1
        breakdown = analyzer.get_temporal_breakdown(visualize=False)
        print(breakdown.to_string())
        if breakdown.empty or float(breakdown["compute_time(us)"].sum()) <= 0:
            print("HTA's temporal breakdown found no compute time")
            return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
