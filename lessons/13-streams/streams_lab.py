"""The streams lesson's lab: what a second stream buys, and what it costs to get wrong.

    chunks = [torch.randn(rows, 512).pin_memory() for _ in range(n)]    # on the host, pinned
    for c in chunks:                                  # 1. serial: one stream
        x = c.to(device, non_blocking=True)
        outs.append(torch.relu(x @ W))

    copy_stream = torch.cuda.Stream()                 # 2. overlapped: the copies on a stream of their own
    for c in chunks:
        with torch.cuda.stream(copy_stream):
            x = c.to(device, non_blocking=True)
            ready = torch.cuda.Event(); ready.record()
        torch.cuda.current_stream().wait_event(ready) # this chunk's compute waits for its own copy only
        x.record_stream(torch.cuda.current_stream())  # allocated for the copy stream, used on this one
        outs.append(torch.relu(x @ W))

    host = result.to("cpu", non_blocking=True)        # 3. the race: the copy is only queued
    copied = torch.cuda.Event(); copied.record()      # a mark on the stream, right after the copy
    next_step()                                       # more work queued behind it, as a loop would
    print(host[0])                                    # too early: whatever that memory held
    torch.cuda.synchronize(); print(host[0])          # a fix: waits for everything queued, next_step too
    copied.synchronize(); print(host[0])              # the other: waits for the copy only

A stream runs its work in order; two streams are ordered only where the program says so (an event,
wait_stream, synchronize). A GPU has copy engines besides its compute units, so a copy on one stream
and a kernel on another really run at the same time; on one stream they take turns.
"""
import math
import time

import torch

from lab_helpers import Spread, announce, compare, compared_times, gpu_for, is_emulated, median_index, mib, range_text, seconds_on

FEATURES = 512


def timed(device, repeats, work):
    """The median seconds of `repeats` runs of `work`, each waited for."""
    return Spread.of([seconds_on(device, work) for _ in range(repeats)]).median


def make_chunks(device, n, chunk_mb):
    """The chunks, on the host in pinned memory (only from there is a copy asynchronous); more than half
    of the free memory is refused, naming what to change, before anything is made."""
    rows = max(1, int(chunk_mb * 2**20 / (FEATURES * 4)))
    chunk_bytes = rows * FEATURES * 4
    refuse_unless_fits(device, n * chunk_bytes, n, chunk_mb, "the chunks' copies alone")
    host_bytes = n * chunk_bytes * (2 if is_emulated(device) else 1)
    if host_bytes > 0.5 * lab.memory_stats("cpu")["free_bytes"]:
        raise ValueError(f"{n} chunks of {chunk_mb:.3g} MiB: the pinned chunks{' and their copies on the emulated GPU' if is_emulated(device) else ''} "
                         f"need about {host_bytes / 2**30:.3g} GiB, more than half of the CPU's free memory: choose fewer chunks or a smaller chunk_mb")
    torch.manual_seed(7)
    return [torch.randn(rows, FEATURES).pin_memory() for _ in range(n)], rows


def refuse_unless_fits(device, nbytes, n, chunk_mb, what, compute_ratio=None):
    free = torch.cuda.mem_get_info(device)[0]
    if nbytes > 0.5 * free:
        ratio = f" with compute_ratio {compute_ratio:.3g}" if compute_ratio is not None else ""
        raise ValueError(f"{n} chunks of {chunk_mb:.3g} MiB{ratio}: a pass keeps {mib(nbytes)} on {device} ({what}), more than half of the "
                         f"{mib(free)} it has free; choose fewer chunks, a smaller chunk_mb or a smaller compute_ratio")


def size_the_compute(chunks, device, compute_ratio, n, chunk_mb):
    """x @ W with W (512, width), the width found from one copy and one product of width 512 here."""
    copy_seconds = timed(device, 5, lambda: chunks[0].to(device, non_blocking=True))
    w512 = torch.randn(FEATURES, FEATURES, device=device) / math.sqrt(512)
    x0 = chunks[0].to(device)
    product_seconds = timed(device, 5, lambda: x0 @ w512)
    width = min(16384, max(16, round(512 * compute_ratio * copy_seconds / product_seconds)))
    rows = chunks[0].shape[0]
    refuse_unless_fits(device, n * (rows * FEATURES * 4 + rows * width * 4), n, chunk_mb,
                       f"each chunk and its output, 512 x {width} a row", compute_ratio)
    reached = product_seconds * width / 512 / copy_seconds  # what the width reached: it is clamped
    print(f"A chunk of {mib(rows * FEATURES * 4)} is copied in {copy_seconds * 1e3:.3g} ms here; its compute, x @ W with W 512 x "
          f"{width}, should take about {reached:.2g} times that.")
    return torch.randn(FEATURES, width, device=device) / math.sqrt(512)


def one_pass(device, chunks, W, copies):
    """One pass over the chunks, the copies on `copies` (the current stream: serial); its seconds, its
    checksum, and each chunk's copy and compute as spans on the device's clock."""
    compute = torch.cuda.current_stream(device)
    overlapped = copies != compute
    torch.cuda.synchronize(device)
    origin = torch.cuda.Event(enable_timing=True)
    origin.record(compute)
    copies.wait_event(origin)  # both streams start from here
    marks, outs = [], []
    start = time.perf_counter()
    for c in chunks:
        m = [torch.cuda.Event(enable_timing=True) for _ in range(4)]
        with torch.cuda.stream(copies):
            m[0].record(copies)
            x = c.to(device, non_blocking=True)
            m[1].record(copies)
        if overlapped:
            compute.wait_event(m[1])  # this chunk's compute waits for its own copy, not for the later ones
            x.record_stream(compute)  # allocated for the copy stream, read on this one
        m[2].record(compute)
        outs.append(torch.relu(x @ W))
        m[3].record(compute)
        marks.append(m)
    compute.wait_stream(copies)
    torch.cuda.synchronize(device)
    seconds = time.perf_counter() - start
    spans = []
    for i, m in enumerate(marks, 1):
        at = [origin.elapsed_time(e) / 1000 for e in m]
        spans += [("copy", f"copies chunk {i} in", at[0], at[1]), ("compute", f"chunk {i}: x @ W, relu", at[2], at[3])]
    return dict(seconds=seconds, checksum=sum(o.sum().item() for o in outs), spans=spans)


def serial_and_overlapped(device, chunks, W, repeats):
    """Serial and overlapped, taking turns; each the median of its passes and their range."""
    copy_stream, one_stream = torch.cuda.Stream(device), torch.cuda.current_stream(device)
    one_pass(device, chunks, W, copy_stream)  # warm-up: the streams' first use, the allocator's first blocks
    one_pass(device, chunks, W, one_stream)
    runs = {"serial": [], "overlapped": []}
    for rep in range(repeats):
        runs["serial"].append(one_pass(device, chunks, W, one_stream))
        runs["overlapped"].append(one_pass(device, chunks, W, copy_stream))
        lab.progress(rep + 1, repeats, "serial and overlapped passes")
    out = {}
    for name, rs in runs.items():
        times = [r["seconds"] for r in rs]
        out[name] = (rs[median_index(times)], Spread.of(times))
    return out


def show_passes(passes, device, repeats):
    lane = "emulated GPU " if is_emulated(device) else "GPU "
    for view, title, name, two in (("serial", "One stream: copy, compute, copy, compute ...", "serial", False),
                                   ("overlapped", "Two streams: the next copy while this chunk computes", "overlapped", True)):
        lab.view(view, title, kind="timeline", x=[("time", "s")],
                 series=[("copy", lane + ("copy stream" if two else "stream") + ": copies"),
                         ("compute", lane + ("default stream" if two else "stream") + ": compute")],
                 note="Each span from the device's clock: events recorded before and after each copy and each compute." +
                      (" Two streams: a chunk's compute waits (wait_event) for its own copy only." if two else
                       " One stream: every copy waits for the compute before it, and the other way round."))
        for span in passes[name][0]["spans"]:
            lab.span(view, *span)
    (serial, serial_s), (overlapped, overlapped_s) = passes["serial"], passes["overlapped"]
    lab.view("passes", "Serial against overlapped", kind="table", columns=["pass", ("time", "ms"), ("range", "ms"), ("relative", "x"), "checksum"],
             note=f"{repeats} passes each, taking turns, until the device finished: the median pass (the timelines draw it) and the range "
                  "of all. The checksums (the sum of every output) agree: the second stream changes when the work runs, not what it computes.")
    lab.row("passes", "one stream (serial)", serial_s.median * 1e3, range_text(serial_s, 1e3), 1.0, serial["checksum"])
    lab.row("passes", "copies on a stream of their own (overlapped)", overlapped_s.median * 1e3, range_text(overlapped_s, 1e3),
            serial_s.median / overlapped_s.median, overlapped["checksum"])


def make_burner(device):
    """Work that keeps the current stream busy for about 50 ms, so that what is queued after it is not done
    for a while: products of an n x n matrix, n doubled until one product takes a millisecond here.
    Many products of a small matrix would not do: a GPU runs them as fast as the host queues them."""
    size = 256
    while True:
        B = torch.full((size, size), 1.0 / size, device=device)

        def products(k, B=B):
            y = B
            for _ in range(k):
                y = y @ B

        each = timed(device, 3, lambda: products(4)) / 4  # four queued: what the stream sustains, not one launch
        if each >= 1e-3 or size >= 8192:
            break
        size *= 2
    count = int(min(200, max(2, 0.05 / each)))
    return lambda: products(count)


def queue_a_copy(device, burn, filled):
    """Busy work, then a result copied to the host with non_blocking=True, an event after the copy, and
    the next step's work behind it: the copy comes late."""
    torch.cuda.synchronize(device)
    burn()
    host = filled.sum(1).to("cpu", non_blocking=True)  # queued: returns at once; every entry 512 * v
    copied = torch.cuda.Event()
    copied.record(torch.cuda.current_stream(device))
    burn()
    return host, copied


def wait(device, how, copied):
    start = time.perf_counter()
    if how == "synchronize":
        torch.cuda.synchronize(device)  # every stream of the device, the next step too
    elif how == "event":
        copied.synchronize()  # that point only
    return time.perf_counter() - start


def race_and_waits(device, burn, filled, fix, repeats):
    """The race, read once with the learner's fix; then both fixes' waits over the same queue, taking
    turns (the learner's own wait is one more of its kind)."""
    host, copied = queue_a_copy(device, burn, filled)
    waited = wait(device, fix, copied)
    read = host[0].item()  # a plain read of host memory: no wait
    torch.cuda.synchronize(device)
    read_after = host[0].item()
    waits = {"event": [], "synchronize": []}
    if fix in waits:
        waits[fix].append(waited)
    for rep in range(repeats):
        for how in waits:
            _, mark = queue_a_copy(device, burn, filled)
            waits[how].append(wait(device, how, mark))
            torch.cuda.synchronize(device)
        lab.progress(rep + 1, repeats, "the two waits")
    yours = Spread.of(waits[fix]).median if fix in waits else waited
    return read, read_after, yours, {how: Spread.of(w) for how, w in waits.items()}


def second_stream_sum(device, burn, filled, wait_first):
    """The other race: a second stream reads a tensor before the first one wrote it -- tripled, so that
    stale memory (where `filled` may have been) cannot pass for the answer."""
    side = torch.cuda.Stream(device)
    torch.cuda.synchronize(device)
    burn()
    produced = filled * 3.0  # on the default stream, behind the burner: not there for a while
    with torch.cuda.stream(side):
        if wait_first:
            side.wait_stream(torch.cuda.default_stream(device))  # the producer's stream
        doubled = produced * 2.0
        produced.record_stream(side)
    side.synchronize()
    total = doubled.sum().item()
    torch.cuda.synchronize(device)
    return total


def show_races(expected, read, read_after, side_expected, without_wait, with_wait, fix_text, waits, repeats):
    def right(got, want, tolerance):
        return abs(got - want) <= tolerance * want

    lab.view("races", "Reading too early: two races and their fixes", kind="table", columns=["what", "expected", "got", "right"],
             note="Ops on a stream are queued, not done: a host read or another stream's read must wait for them -- synchronize(), an "
                  "event, or wait_stream. Without the wait what is read is whatever that memory held.")
    for what, want, got, tolerance in ((f"host[0] of a non_blocking copy, {fix_text} (yours)", expected, read, 1e-3),
                                       ("host[0] once the device has finished", expected, read_after, 1e-3),
                                       ("second stream, without wait_stream: sum of 2 * produced", side_expected, without_wait, 1e-4),
                                       ("second stream, after side.wait_stream(default)", side_expected, with_wait, 1e-4)):
        lab.row("races", what, want, got, "yes" if right(got, want, tolerance) else "no")
    lab.view("waits", "The host's wait: an event after the copy, or synchronize()", kind="table",
             columns=["wait", ("host waits", "ms"), ("range", "ms")],
             note="The same queue each time: about 50 ms of work, the copy, an event recorded after it, and the next step's work "
                  f"(another 50 ms). {repeats} waits of each kind, taking turns: the median and the range.")
    lab.row("waits", "copied.synchronize(): up to the copy", waits["event"].median * 1e3, range_text(waits["event"], 1e3))
    lab.row("waits", "torch.cuda.synchronize(): everything queued", waits["synchronize"].median * 1e3, range_text(waits["synchronize"], 1e3))
    return right(read, expected, 1e-3), right(read_after, expected, 1e-3), right(without_wait, side_expected, 1e-4), right(with_wait, side_expected, 1e-4)


def run(device="cuda", chunks=8, chunk_mb=4.0, compute_ratio=1.0, fix="none", repeats=3):
    if device != "auto" and torch.device(device).type != "cuda":
        raise ValueError(f"streams belong to CUDA devices, and {device} is not one: work on the CPU is done when an op returns. Choose "
                         "cuda (the emulated GPU, without an NVIDIA GPU).")
    device = gpu_for(device, "streams belong to CUDA devices")
    announce(device)
    host_chunks, rows = make_chunks(device, chunks, chunk_mb)
    W = size_the_compute(host_chunks, device, compute_ratio, chunks, chunk_mb)
    passes = serial_and_overlapped(device, host_chunks, W, repeats)
    show_passes(passes, device, repeats)
    v = 1.0 + (time.time_ns() // 1000 % 997) / 1000  # a value no earlier run left in memory
    burn, filled = make_burner(device), torch.full((rows, FEATURES), v, device=device)
    read, read_after, yours, waits = race_and_waits(device, burn, filled, fix, repeats)
    without_wait, with_wait = (second_stream_sum(device, burn, filled, w) for w in (False, True))
    fix_text = {"none": "no wait (the race)", "synchronize": "after torch.cuda.synchronize()", "event": "after an event recorded after the copy"}[fix]
    rights = show_races(512 * v, read, read_after, 6 * v * rows * FEATURES, without_wait, with_wait, fix_text, waits, repeats)
    report(passes, waits, yours, rights, read, 512 * v, fix_text, device)


def report(passes, waits, yours, rights, read, expected, fix_text, device):
    (serial, serial_s), (overlapped, overlapped_s) = passes["serial"], passes["overlapped"]
    read_right, after_right, without_right, with_right = rights
    lab.measurement("overlap speed-up", serial_s.median / overlapped_s.median, "x")
    lab.measurement("serial pass time", serial_s.median * 1e3, "ms")
    lab.measurement("overlapped pass time", overlapped_s.median * 1e3, "ms")
    lab.measurement("host wait, event (median)", waits["event"].median * 1e3, "ms")
    lab.measurement("host wait, event (longest)", waits["event"].high * 1e3, "ms")
    lab.measurement("host wait, synchronize() (median)", waits["synchronize"].median * 1e3, "ms")
    lab.measurement("host wait, synchronize() (shortest)", waits["synchronize"].low * 1e3, "ms")
    lab.measurement("checksum difference", abs(serial["checksum"] - overlapped["checksum"]) / max(1.0, abs(serial["checksum"])))
    lab.measurement("host read correct (yours)", int(read_right))
    lab.measurement("host wait before the read (yours)", yours * 1e3, "ms")
    lab.measurement("host read correct after synchronize", int(after_right))
    lab.measurement("second stream correct without wait_stream", int(without_right))
    lab.measurement("second stream correct with wait_stream", int(with_right))
    event_shorter = compare(waits["event"], waits["synchronize"]) < 0
    print(f"A pass with the copies on their own stream {compared_times(overlapped_s, serial_s, 'a pass on one stream')}. Reading the copy "
          f"{fix_text}: {'right' if read_right else f'wrong -- {read:.6g} instead of {expected:.6g}'}. Waiting with the event "
          f"{compared_times(waits['event'], waits['synchronize'], 'waiting with torch.cuda.synchronize()')}"
          + (": the event waits for its stream up to the copy, synchronize() for the next step's work queued after it too." if event_shorter else
             ": here the waits varied too much to tell whether the next step's work lengthened synchronize()'s -- is another program busy "
             "on this machine? Run it again.")
          + (" This is the emulated GPU: its streams are threads of your CPU, so a copy and a product overlap only as far as your cores "
             "(and memory) let two threads work at once; a GPU copies with engines of its own." if is_emulated(device) else ""))
