"""The run's record (engine/runtime/run_record.h, python/gpulab/run_record.py) against what the code did,
on the emulated GPU: each op with its device, the copies with their direction and flags, the host's
waits, what .grad held before each backward, and the cap in force at each allocation -- the record an
exercise is graded from (issue 49, "Grading a wrong answer cannot pass").

    PYTHONPATH=build/python GPULAB_EMULATED_GPU=1 python3 tests/python/run_record_test.py
"""
import sys
import traceback

import gpulab as torch
from gpulab import nn
from gpulab.run_record import RunRecord, recording
from gpulab.utils.checkpoint import checkpoint


def record(fn):
    r = recording(torch)
    try:
        fn()
    finally:
        raw = r.stop()
    return RunRecord(raw)


def ops_say_where_they_ran():
    a, b = torch.randn(8, 4), torch.randn(4, 3)
    ga, gb = a.cuda(), b.cuda()
    on_cpu = record(lambda: a @ b)
    assert on_cpu.devices("matmul") == ["cpu"], on_cpu.ops
    on_gpu = record(lambda: ga @ gb)
    assert on_gpu.devices("matmul") == ["cuda:0"], on_gpu.ops
    assert on_gpu.count("aten::matmul", device="cuda") == on_gpu.count("matmul", device="cuda:0") >= 1
    assert on_gpu.count("matmul", device="cpu") == 0
    # The wrong answer the old grading passed: the product on the CPU, its result moved.
    moved = record(lambda: (a @ gb.cpu()).to("cuda"))
    assert moved.devices("matmul") == ["cpu"], moved.ops
    # A factory op with a device and no input is placed by its device.
    made = record(lambda: torch.zeros(3, device="cuda"))
    assert made.devices("full") == ["cuda:0"], made.ops
    # An op another op calls is one deeper: cross_entropy's log_softmax and nll_loss.
    logits, labels = torch.randn(4, 5, device="cuda"), torch.tensor([1, 2, 3, 0], device="cuda")
    nested = record(lambda: nn.functional.cross_entropy(logits, labels))
    assert [(o.name, o.depth) for o in nested.ops] == [("aten::cross_entropy_loss", 0), ("aten::log_softmax", 1), ("aten::nll_loss", 1)], nested.ops


def copies_and_waits():
    x = torch.randn(256, 256)
    r = record(lambda: x.to("cuda"))
    assert r.copied(src="cpu", dst="cuda") == 1 and r.copied(src="cuda") == 0, r.copies
    c = r.copies[0]
    assert (c.src, c.dst, c.bytes, c.non_blocking, c.pinned) == ("cpu", "cuda:0", 256 * 256 * 4, False, False), c
    # Without non_blocking the copy returns once it has run: the host waited for the GPU's stream.
    assert [w.what for w in r.waits] == ["copy to the GPU"], r.waits
    pinned = x.pin_memory()
    r = record(lambda: pinned.to("cuda", non_blocking=True))
    assert r.copied(non_blocking=True) == 1 and r.copies[0].pinned and r.host_waits() == 0, (r.copies, r.waits)
    g = x.cuda()
    r = record(lambda: g.sum().item())
    assert r.copied(src="cuda", dst="cpu") == 1 and r.host_waits("copy to the host") == 1, (r.copies, r.waits)
    r = record(lambda: torch.cuda.synchronize())
    assert [w.what for w in r.waits] == ["synchronize"], r.waits
    s = torch.cuda.Stream()
    r = record(lambda: (s.synchronize(), torch.cuda.Event().synchronize()))
    assert [w.what for w in r.waits] == ["stream synchronize"], r.waits  # an event never recorded waits for nothing
    e = torch.cuda.Event()
    e.record()
    r = record(lambda: e.synchronize())
    assert [w.what for w in r.waits] == ["event synchronize"], r.waits
    # A copy on a side stream says which stream.
    with torch.cuda.stream(s):
        r = record(lambda: x.to("cuda"))
    assert r.copies[0].stream == s.cuda_stream != 0, (r.copies, s.cuda_stream)


def a_copy_on_a_side_stream_is_ordered_or_not():
    host = torch.randn(64, 64).pin_memory()
    w = torch.randn(64, 64, device="cuda")
    side = torch.cuda.Stream()

    def copy_then(order):
        def run():
            with torch.cuda.stream(side):
                batch = host.to("cuda", non_blocking=True)
            order()
            return batch @ w
        return record(run)

    racing = copy_then(lambda: None)
    assert racing.unordered_after_copies("matmul") == 1, (racing.ops, racing.copies)
    assert racing.copies[0].stream == side.cuda_stream and [o.stream for o in racing.ops if o.name == "aten::matmul"] == [0]
    # A blocking copy on the side stream is ordered too: the host waited for it before queueing more.
    def blocking_copy():
        with torch.cuda.stream(side):
            batch = host.to("cuda")
        return batch @ w
    assert record(blocking_copy).unordered_after_copies("matmul") == 0
    for order in (lambda: torch.cuda.current_stream().wait_stream(side), lambda: side.synchronize(), lambda: torch.cuda.synchronize()):
        ordered = copy_then(order)
        assert ordered.unordered_after_copies("matmul") == 0, (ordered.stream_waits, ordered.waits)
    waited = copy_then(lambda: torch.cuda.current_stream().wait_stream(side))
    assert [(x.waiting, x.on) for x in waited.stream_waits] == [(0, side.cuda_stream)], waited.stream_waits
    # The copy on the stream that computes is in order already.
    same = record(lambda: host.to("cuda", non_blocking=True) @ w)
    assert same.unordered_after_copies("matmul") == 0
    seqs = [e.seq for e in same.settings + same.ops + same.copies]
    assert sorted(seqs) == list(range(len(seqs))), seqs  # one order across kinds


def a_timed_op_was_waited_for():
    a = torch.randn(32, 32, device="cuda")
    assert not record(lambda: [a @ a for _ in range(3)]).waited_after_each("matmul")
    assert record(lambda: [(a @ a, torch.cuda.synchronize()) for _ in range(3)]).waited_after_each("matmul")
    # One wait for three products: the first two were not waited for before the next began.
    assert not record(lambda: ([a @ a for _ in range(3)], torch.cuda.synchronize())).waited_after_each("matmul")
    e = torch.cuda.Event()
    assert record(lambda: [(a @ a, e.record(), e.synchronize()) for _ in range(2)]).waited_after_each("matmul")
    assert not record(lambda: torch.randn(4, 4) @ torch.randn(4, 4)).waited_after_each("matmul")  # never on a GPU


def settings_in_force_when_each_op_ran():
    before = torch.backends.cudnn.benchmark
    x = torch.randn(2, 1, 8, 8, device="cuda")
    conv = torch.nn.Conv2d(1, 2, 3).cuda()
    try:
        torch.backends.cudnn.benchmark = False

        def run():
            conv(x)
            torch.backends.cudnn.benchmark = True
            conv(x)
        r = record(run)
    finally:
        torch.backends.cudnn.benchmark = before
    convs = [o for o in r.ops if o.name == "aten::conv2d"]
    assert [r.setting("cudnn.benchmark", o.seq) for o in convs] == [False, True], (r.settings, convs)
    assert convs[0].shapes.startswith("[[2, 1, 8, 8], [2, 1, 3, 3]"), convs[0].shapes
    assert {v.name for v in r.settings} >= {"cudnn.benchmark", "cudnn.deterministic", "cuda.matmul.allow_tf32"}
    try:
        r.setting("cudnn.enabled", 0)
    except ValueError as e:
        assert "keeps no setting 'cudnn.enabled'" in str(e), e
    else:
        raise AssertionError("an unknown setting was answered")


def backwards_say_what_grad_held():
    model = nn.Linear(4, 2).cuda()
    x = torch.randn(8, 4, device="cuda")

    def step():
        model(x).sum().backward()

    first = record(step)
    assert len(first.backwards) == 1 and first.backwards[0].leaves == 2 and first.backwards[0].grad_none == 2, first.backwards
    assert first.backwards[0].from_zero
    again = record(step)  # nothing cleared: it adds to the last one's
    assert again.backwards[0].grad_nonzero == 2 and not again.backwards[0].from_zero, again.backwards
    model.zero_grad(set_to_none=False)
    zeros = record(step)
    assert zeros.backwards[0].grad_zero == 2 and zeros.backwards[0].from_zero, zeros.backwards
    # Reading .grad for the record is not the run's: no op, copy or wait of it shows.
    assert zeros.host_waits() == 0 and zeros.copied() == 0, (zeros.waits, zeros.copies)
    assert not any(o.name in ("aten::ne", "aten::any") for o in zeros.ops), zeros.ops
    # torch.autograd.grad leaves .grad alone: no backward entry.
    w = torch.randn(3, requires_grad=True)
    assert record(lambda: torch.autograd.grad((w * 2).sum(), [w])).backwards == []
    # A checkpoint's backward runs one inside the outer one: the outer goes on counting its leaves.
    lin = nn.Linear(4, 4).cuda()
    inp = torch.randn(2, 4, device="cuda", requires_grad=True)
    nested = record(lambda: checkpoint(lin, inp, use_reentrant=True).sum().backward())
    assert sum(b.leaves for b in nested.backwards) >= 3, nested.backwards


def allocations_carry_the_cap():
    total = torch.cuda.get_device_properties(0).total_memory
    uncapped = record(lambda: torch.empty(1024, device="cuda"))
    assert uncapped.caps() == [None] and uncapped.peak_allocated() >= 4096, uncapped.allocations
    torch.cuda.set_per_process_memory_fraction(64 * 2**20 / total)
    try:
        capped = record(lambda: torch.empty(1024, device="cuda"))
    finally:
        torch.cuda.set_per_process_memory_fraction(1.0)
    assert len(capped.caps()) == 1 and abs(capped.caps()[0] - 64 * 2**20) <= 1, capped.caps()
    cpu_only = record(lambda: torch.empty(1024))
    assert cpu_only.allocations == [] and cpu_only.caps() == [], cpu_only.allocations


def one_recording_at_a_time():
    r = recording(torch)
    try:
        try:
            recording(torch)
        except RuntimeError as e:
            assert "another recording" in str(e), e
        else:
            raise AssertionError("a second recording started while one ran")
    finally:
        r.stop()
    # After stop() nothing more is noted, and a second stop() gives an empty record.
    torch.randn(3).cuda() @ torch.randn(3).cuda()
    assert RunRecord(r.stop()).ops == []


def main():
    if not torch.cuda.is_available() and not torch.cuda.device_count():
        print("no cuda:0 (set GPULAB_EMULATED_GPU=1)")
        return 77
    failed = 0
    for case in (ops_say_where_they_ran, copies_and_waits, a_copy_on_a_side_stream_is_ordered_or_not, a_timed_op_was_waited_for, settings_in_force_when_each_op_ran, backwards_say_what_grad_held, allocations_carry_the_cap,
                 one_recording_at_a_time):
        try:
            case()
            print(f"ok    {case.__name__}")
        except Exception:  # noqa: BLE001 - each case reports on its own
            failed += 1
            print(f"FAIL  {case.__name__}")
            traceback.print_exc()
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
