"""The vectorising lesson's lab: a loop of small ops against one op over the whole batch -- the squared
distances from n points a (n, d) to m centres b (m, d), four ways:

    D = torch.empty(n, m, device=device)
    for i in range(n):                                   # per pair: 4 small ops for each of n*m pairs
        for j in range(m):
            D[i, j] = ((a[i] - b[j]) ** 2).sum()
    for i in range(0, n, chunk):                         # chunked: 4 ops per chunk of rows
        c = a[i:i+chunk, None, :] - b[None, :, :]
        D[i:i+chunk] = (c ** 2).sum(-1)
    D = ((a[:, None, :] - b[None, :, :]) ** 2).sum(-1)   # one op: broadcasting does the loops
    D = (a**2).sum(1, keepdim=True) + (b**2).sum(1) - 2 * a @ b.T   # the matmul identity (torch.cdist's)

Every form computes the same D. What differs is how many ops it runs -- each op pays a fixed cost
(checks, an output allocation, a kernel launch on a GPU) whatever its size -- and how much memory its
intermediates take: the broadcast builds an (n, m, d) difference, a chunk only (chunk, m, d).
"""
import time

import torch

from lab_helpers import Spread, allocated, compare, compared_times, faster_or_slower, peak_allocated, pick_device, reset_peak, seconds_on, synchronize

ROUNDS = 20


def per_pair_row(a, b, D, i):
    """One row of D, pair by pair; the ops it ran."""
    for j in range(b.shape[0]):
        D[i, j] = ((a[i] - b[j]) ** 2).sum()
    return 4 * b.shape[0]


def chunked(a, b, chunk):
    n = a.shape[0]
    D = torch.zeros(n, b.shape[0], device=a.device)
    for i in range(0, n, chunk):
        D[i:i + chunk] = ((a[i:i + chunk, None, :] - b[None, :, :]) ** 2).sum(-1)
    return D, 4 * -(-n // chunk)


def one_op(a, b):
    return ((a[:, None, :] - b[None, :, :]) ** 2).sum(-1), 3


def matmul_identity(a, b):
    return (a**2).sum(1, keepdim=True) + (b**2).sum(1) - 2 * a @ b.T, 8  # pow, sum, pow, sum, add, matmul, mul, sub


def time_the_loop(a, b, device, budget):
    """The loop over pairs, row by row until its time budget is spent. Every row is the same m pairs, so
    it is timed in blocks of rows and the fastest block, scaled to n rows, is its time -- the same
    "fastest run" the other forms get."""
    n, block = a.shape[0], 8
    synchronize(device)
    reset_peak(device)
    before = allocated(device)
    start = time.perf_counter()
    D = torch.zeros(n, b.shape[0], device=device)
    ops, rows_done, fastest_row = 0, 0, float("inf")
    while rows_done < n:
        rows = min(block, n - rows_done)
        block_start = time.perf_counter()
        for r in range(rows):
            ops += per_pair_row(a, b, D, rows_done + r)
        synchronize(device)
        fastest_row = min(fastest_row, (time.perf_counter() - block_start) / rows)
        rows_done += rows
        lab.progress(rows_done, n, f"loop over pairs, row {rows_done}")
        if time.perf_counter() - start >= budget:
            break
    loop = dict(D=D, ops=ops, rows=rows_done, fastest_row=fastest_row, seconds=time.perf_counter() - start,
                peak=peak_allocated(device) - before, ops_per_row=ops / rows_done)
    per_op_us = fastest_row / loop["ops_per_row"] * 1e6
    print(f"The loop over pairs ran {ops} ops ({int(loop['ops_per_row'])} a row) on {rows_done} of {n} rows in "
          f"{loop['seconds'] * 1000:.1f} ms" + (f" (its time budget: every row is the same work, so all rows are timed as {n} x its "
                                                 "fastest row)" if rows_done < n else "")
          + f". A row took {fastest_row * 1e6:.3g} us (its fastest block of rows): about {per_op_us:.3g} us per op on vectors of "
          f"{a.shape[1]} numbers -- nearly all of it the op's fixed cost.")
    return loop


def measure_in_rounds(forms, device, budget=0.2):
    """Every form once, then every form again, ... -- rounds, so that a slow moment of the machine hits
    all of them alike. At least 3 rounds and at most ROUNDS, ending early once `budget` seconds per
    form have gone. Each form's times, its op count, and the peak memory and result of its first run."""
    out = [dict(rounds=[]) for _ in forms]
    begin = time.perf_counter()
    for round_ in range(ROUNDS):
        for form, m in zip(forms, out):
            synchronize(device)  # before the memory is read: the last run's queued frees are done
            before = allocated(device)
            if round_ == 0:
                reset_peak(device)
            result = []
            m["rounds"].append(seconds_on(device, lambda: result.append(form())))
            if round_ == 0:
                m["peak"] = peak_allocated(device) - before
                m["result"], m["ops"] = result[0]
        lab.progress(round_ + 1, ROUNDS, f"the vectorised forms and the chunks, round {round_ + 1}")
        if round_ >= 2 and time.perf_counter() - begin >= budget * len(forms):
            break
    for m in out:
        m["time"] = Spread.of(m["rounds"])
    return out


def paired_ratio(a, b):
    """How much slower `a` was than `b`, round by round: a slow stretch of the machine slows both runs of
    a round alike and leaves their ratio alone."""
    return Spread.of([x / y for x, y in zip(a["rounds"], b["rounds"])])


def show_forms(loop, per_row, yours, whole, identity, chunk, n, pair_seconds):
    lab.view("forms", "Four ways, one result", kind="table",
             columns=["form", "rows per op", "ops run", ("time", "ms"), ("speed-up vs pairs", "x"), ("peak memory", "bytes"),
                      "difference from the loop"],
             note="Time: the median of each form's runs, the forms taking turns round after round; the loop over pairs' fastest block "
                  "of rows, scaled to all n rows. Speed-up: against the loop over pairs. Peak memory: what the computation allocated "
                  "beyond its inputs (D and its intermediates). Difference: the largest |D - D_loop| over the rows the loop computed "
                  "(rounding, not a mistake)." + (" The loop's ops are scaled from the rows its budget allowed." if loop["rows"] < n else ""))
    lab.row("forms", "pairs: D[i, j] = ...", "one pair", round(loop["ops_per_row"] * n), pair_seconds * 1000, 1.0, loop["peak"], 0.0)
    rows = [("rows: D[i] = ...", 1, per_row)] + ([(f"chunks of {chunk} rows (yours)", chunk, yours)] if chunk != 1 else [])
    for name, rows_per_op, f in rows + [("one op (broadcast)", n, whole), ("matmul identity", n, identity)]:
        lab.row("forms", name, rows_per_op, f["ops"], f["time"].median * 1000, pair_seconds / f["time"].median, f["peak"], f["difference"])


def show_sweep(sizes, of_chunk, whole, identity, chunk):
    """Time and memory against rows per op, on logarithmic axes; returns the fastest chunk (one op included)."""
    rows_axis = ("rows per op (chunk)", "", True)
    lab.view("sweep_time", "Time vs chunk", x=[rows_axis], y=("time for all rows", "ms", True), series=[("chunked", "chunked loop")],
             note="Each op has a fixed cost, so a loop of n/chunk ops pays it n/chunk times: the time falls as the chunk grows, until "
                  "each op has enough work to hide its fixed cost. A very large chunk can be slower again: its intermediates no longer "
                  "fit in the processor's cache. The lines: the one-op and matmul-identity times.")
    lab.view("sweep_memory", "Memory vs chunk", x=[rows_axis], y=("peak memory", "bytes", True), series=[("chunked", "chunked loop")],
             note="Peak memory counts D itself (n x m) and the chunk's intermediates, (chunk, m, d) each: it grows with the chunk, up "
                  "to the one-op form's (n, m, d).")
    lab.level("sweep_time", "one op", whole["time"].median * 1000)
    lab.level("sweep_time", "matmul identity", identity["time"].median * 1000)
    lab.level("sweep_memory", "one op", whole["peak"])
    fastest, fastest_chunk = whole, sizes[-1]
    for c in sizes:
        f = of_chunk(c)
        if f["time"].median < fastest["time"].median:
            fastest, fastest_chunk = f, c
        lab.point("sweep_time", "chunked", [float(c)], f["time"].median * 1000)
        lab.point("sweep_memory", "chunked", [float(c)], float(max(f["peak"], 1)))
    for view in ("sweep_time", "sweep_memory"):
        lab.marker(view, [float(chunk)], f"your chunk: {chunk}")
    return fastest, fastest_chunk


def larger_chunk_time(yours, sizes, of_chunk, whole, chunk, n):
    """Would a larger chunk still pay? Your chunk's paired ratio to each larger one (the one op included),
    the largest of them -- 1 when none is larger or every larger one is slower. Not "against the
    fastest": on a busy machine large chunks lose the cache to other programs, the curve's minimum moves
    to chunks of 16 to 128 rows, and a right answer would be graded wrong."""
    worst, which = 1.0, chunk
    for c, f in [(c, of_chunk(c)) for c in sizes if c > chunk] + ([(n, whole)] if chunk < n else []):
        ratio = paired_ratio(yours, f).median
        if ratio > worst:
            worst, which = ratio, c
    return worst, which


def report(loop, per_row, yours, whole, identity, fastest, fastest_chunk, sizes, of_chunk, chunk, n, device):
    pair_seconds = loop["fastest_row"] * n
    chunk_time = 1.0 if yours is fastest else paired_ratio(yours, fastest).median
    larger_time, fastest_larger = larger_chunk_time(yours, sizes, of_chunk, whole, chunk, n)
    chunk_memory = yours["peak"] / max(whole["peak"], 1)
    difference = max(per_row["difference"], yours["difference"], whole["difference"])
    lab.measurement("per-pair loop time", pair_seconds * 1000, "ms")
    lab.measurement("per-row loop time", per_row["time"].median * 1000, "ms")
    lab.measurement("one-op time", whole["time"].median * 1000, "ms")
    lab.measurement("fixed cost per op", loop["fastest_row"] / loop["ops_per_row"] * 1e6, "us")
    lab.measurement("vectorised speed-up over the per-pair loop", pair_seconds / whole["time"].median, "x")
    lab.measurement("vectorised speed-up over the per-row loop", per_row["time"].median / whole["time"].median, "x")
    lab.measurement("chunked time relative to the fastest", chunk_time, "x")
    lab.measurement("chunked time relative to the fastest larger chunk", larger_time, "x")
    lab.measurement("chunked time, slowest run relative to the fastest chunk's fastest", yours["time"].high / fastest["time"].low, "x")
    lab.measurement("chunked time, fastest run relative to the fastest chunk's slowest", yours["time"].low / fastest["time"].high, "x")
    lab.measurement("chunked memory relative to one op", chunk_memory, "x")
    lab.measurement("matmul identity time relative to one op", identity["time"].median / whole["time"].median, "x")
    lab.measurement("largest difference from the loop's result", difference)
    lab.measurement("matmul identity: largest difference from the loop's result", identity["difference"])
    lab.record("vectorise", pair_ms=pair_seconds * 1000, row_ms=per_row["time"].median * 1000, chunk=chunk,
               chunk_ms=yours["time"].median * 1000, one_op_ms=whole["time"].median * 1000, identity_ms=identity["time"].median * 1000,
               device=str(device))
    rows = "row" if chunk == 1 else "rows"
    yours_text = (f"Your chunk of {chunk} {rows} had the fastest median time of all chunks" if yours is fastest else
                  f"Your chunk of {chunk} {rows} {compared_times(yours['time'], fastest['time'], f'the fastest chunk ({fastest_chunk} rows)')}")
    larger_text = (("; no larger chunk was faster in most rounds" if chunk < n else "") if fastest_larger == chunk else
                   "" if fastest_larger == fastest_chunk else
                   f"; a chunk of {fastest_larger} rows was {larger_time:.3g}x faster (the median of the rounds' ratios)")
    cache = (" -- its (n, m, d) intermediates are too large to stay in the processor's cache, which is what chunks are for"
             if compare(per_row["time"], whole["time"]) < 0 else "")
    agree = "exactly" if difference == 0 else f"to {difference:.2g}"
    print(f"One op over all {n} rows took {whole['time'].median * 1000:.3f} ms (the median of {whole['time'].runs} runs): "
          f"{faster_or_slower(pair_seconds / whole['time'].median)} than the loop over pairs. Against the loop over rows, one op "
          f"{compared_times(whole['time'], per_row['time'], 'it')}{cache}. The loops and the one op agree {agree}; the matmul identity "
          f"differs by {identity['difference']:.2g} (rounding). {yours_text}{larger_text}, with {chunk_memory:.3f}x the one op's memory.")


def run(points=1024, centres=64, features=32, chunk=1, loop_budget=2.0, device="auto", seed=0):
    device = pick_device(device)
    n, m, d = points, centres, features
    chunk = min(chunk, n)
    # Keep the largest intermediate within the device's memory: the broadcast's (n, m, d) difference and its square.
    broadcast_bytes = 2.0 * n * m * d * 4
    if broadcast_bytes > 0.5 * lab.memory_stats(device)["free_bytes"]:
        raise ValueError(f"points x centres x features = {n * m * d}: the one-op form would need {broadcast_bytes / 2**20:.4g} MiB for "
                         f"its (n, m, d) intermediates, more than half of what {device} has free; choose fewer points, centres or features")
    torch.manual_seed(seed)
    a, b = torch.randn(n, d).to(device), torch.randn(m, d).to(device)
    loop = time_the_loop(a, b, device, loop_budget)
    sizes = sorted({2**k for k in range(n.bit_length()) if 2**k < n} | {n, chunk})
    forms = [lambda: one_op(a, b), lambda: matmul_identity(a, b)] + [lambda c=c: chunked(a, b, c) for c in sizes]
    measured = measure_in_rounds(forms, device)
    whole, identity = measured[0], measured[1]

    def of_chunk(c):
        return measured[2 + sizes.index(c)]

    per_row, yours = of_chunk(1), of_chunk(chunk)
    for f in (per_row, yours, whole, identity):
        f["difference"] = (f["result"][:loop["rows"]] - loop["D"][:loop["rows"]]).abs().max().item()
    show_forms(loop, per_row, yours, whole, identity, chunk, n, loop["fastest_row"] * n)
    fastest, fastest_chunk = show_sweep(sizes, of_chunk, whole, identity, chunk)
    report(loop, per_row, yours, whole, identity, fastest, fastest_chunk, sizes, of_chunk, chunk, n, device)
