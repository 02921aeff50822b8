"""The record of one exercise run, as an exercise's values read it (lessons/README.md, "The run's record").

The kernel records the learner's run of an exercise cell (engine/runtime/run_record.h) and hands it to
the values as ``run``: what the code *did*, not only where it ended --

    run.ops                 every op: Op(name, device, depth, stream, seq, shapes) -- "aten::matmul" on
                            "cuda:0", depth 0 when called from outside any op (linear's matmul is 1),
                            the GPU stream it was queued on (0: the default stream), its inputs' shapes
                            as the profiler's record_shapes writes them ("[[64, 16], [16, 8]]")
    run.copies              every copy between devices: Copy(src, dst, bytes, stream, non_blocking,
                            pinned, seq)
    run.waits               every time the host waited for a device: Wait(what, device, stream, seq),
                            what being "synchronize" (stream None: all of them), "stream synchronize",
                            "event synchronize", "copy to the host" (.item(), .cpu(), .tolist(),
                            printing a GPU tensor), "copy to the GPU" (.to(device) without
                            non_blocking: it returns once the copy has run) or "copy between GPUs"
    run.stream_waits        every time a stream was made to wait for another's work (wait_stream,
                            wait_event): StreamWait(device, waiting, on, seq)
    run.settings            the backends' switches as the run began and each change: Setting(name,
                            value, seq) -- "cudnn.benchmark", "cudnn.deterministic", "cuda.matmul.allow_tf32"
    run.backwards           every backward: Backward(leaves, grad_none, grad_zero, grad_nonzero,
                            grad_unknown) -- what the leaves' .grad held when it began; .from_zero
                            says none held a nonzero value
    run.allocations         every allocation on a GPU: Allocation(device, bytes, allocated, reserved,
                            cap) -- the device's bytes after it and the cap in force (None: no cap)
    run.complete            False when a kind of entry passed a million and the rest was left out

and a few questions over them (a device "cuda" matches every cuda:N; an op's name may leave out "aten::"):

    run.count("matmul", device="cuda")      how many times the op ran there (device None: anywhere)
    run.devices("matmul")                   the devices it ran on, a sorted list ("cpu", "cuda:0")
    run.copied(src="cpu", dst="cuda")       how many copies went that way (non_blocking=, stream= narrow it)
    run.host_waits(what=None)               how many times the host waited (of one kind)
    run.peak_allocated("cuda")              the most a GPU held after any allocation of the run
    run.caps("cuda")                        the caps in force at its allocations, a sorted list (None first)
    run.unordered_after_copies("matmul")    how many times the op ran after a copy on another stream
                                            with nothing ordering the two (a race)
    run.setting("cudnn.benchmark", o.seq)   a switch as it stood when entry o (an op, say) ran
    run.waited_after_each("matmul")         the host waited for the device after every run of the op
                                            on a GPU, before the next (a clock read then timed its work)

Every entry's `seq` is its place among all the record's entries: what came before what.
"""
import collections

Op = collections.namedtuple("Op", "name device depth stream seq shapes")
Copy = collections.namedtuple("Copy", "src dst bytes stream non_blocking pinned seq")
Wait = collections.namedtuple("Wait", "what device stream seq")
StreamWait = collections.namedtuple("StreamWait", "device waiting on seq")
Setting = collections.namedtuple("Setting", "name value seq")
Allocation = collections.namedtuple("Allocation", "device bytes allocated reserved cap")


class Backward(collections.namedtuple("Backward", "leaves grad_none grad_zero grad_nonzero grad_unknown")):
    __slots__ = ()

    @property
    def from_zero(self):
        """Every leaf's .grad was None or all zeros when this backward began (zero_grad() ran before it)."""
        return self.grad_nonzero == 0 and self.grad_unknown == 0


def _on(device, wanted):
    """Whether `device` ("cuda:0") is `wanted` ("cuda", "cuda:0", a torch.device, or None for any)."""
    if wanted is None:
        return True
    wanted = str(wanted)
    return device == wanted or ":" not in wanted and device.split(":")[0] == wanted


def _same_op(name, wanted):
    return name == wanted or name == "aten::" + wanted


class RunRecord:
    """What one run did (the module's docstring)."""

    def __init__(self, raw):
        self.ops = [Op(*o) for o in raw["ops"]]
        self.copies = [Copy(*c) for c in raw["copies"]]
        self.waits = [Wait(*w) for w in raw["waits"]]
        self.stream_waits = [StreamWait(*w) for w in raw["stream_waits"]]
        self.settings = [Setting(*v) for v in raw["settings"]]
        self.backwards = [Backward(*b) for b in raw["backwards"]]
        self.allocations = [Allocation(d, b, a, r, None if cap < 0 else cap) for d, b, a, r, cap in raw["allocations"]]
        self.complete = raw["dropped"] == 0

    def count(self, op, device=None):
        return sum(1 for o in self.ops if _same_op(o.name, op) and _on(o.device, device))

    def devices(self, op):
        return sorted({o.device for o in self.ops if _same_op(o.name, op)})

    def copied(self, src=None, dst=None, non_blocking=None, stream=None):
        return sum(1 for c in self.copies if _on(c.src, src) and _on(c.dst, dst) and
                   (non_blocking is None or c.non_blocking == non_blocking) and (stream is None or c.stream == stream))

    def host_waits(self, what=None):
        return sum(1 for w in self.waits if what is None or w.what == what)

    def unordered_after_copies(self, op):
        """How many runs of `op` on a GPU stream came after a copy to that GPU on another stream with
        nothing between to order them -- no wait of their stream for the copy's (wait_stream,
        wait_event), no host wait for the copy's stream: each may read the copy's memory before the
        copy has run (a race)."""
        racing = 0
        for o in self.ops:
            if not _same_op(o.name, op) or not o.device.startswith("cuda"):
                continue
            for c in self.copies:
                if c.seq > o.seq or c.dst != o.device or c.stream == o.stream:
                    continue
                ordered = any(w.device == o.device and w.waiting == o.stream and w.on == c.stream and c.seq < w.seq < o.seq
                              for w in self.stream_waits) or \
                    any(w.device == o.device and w.stream in (None, c.stream) and c.seq < w.seq < o.seq for w in self.waits)
                if not ordered:
                    racing += 1
                    break
        return racing

    def waited_after_each(self, op):
        """Whether the host waited for the device after every run of `op` on a GPU before the next
        one began (or the run ended): a clock read after such a wait timed the op's work, not its
        queueing. False when the op never ran on a GPU."""
        runs = [o for o in self.ops if _same_op(o.name, op) and o.device.startswith("cuda") and o.depth == 0]
        if not runs:
            return False
        ends = [o.seq for o in runs[1:]] + [float("inf")]
        return all(any(o.seq < w.seq < end and w.device == o.device and w.stream in (None, o.stream) for w in self.waits)
                   for o, end in zip(runs, ends))

    def setting(self, name, seq):
        """A backends switch ("cudnn.benchmark", "cudnn.deterministic", "cuda.matmul.allow_tf32") as it
        stood at entry `seq` -- when an op ran, say: the last value set before it."""
        value = None
        for v in self.settings:
            if v.name == name and v.seq <= seq:
                value = v.value
        if value is None:
            raise ValueError(f"the run's record keeps no setting {name!r} (it keeps cudnn.benchmark, cudnn.deterministic, "
                             "cuda.matmul.allow_tf32)")
        return value

    def peak_allocated(self, device="cuda"):
        return max((a.allocated for a in self.allocations if _on(a.device, device)), default=0)

    def caps(self, device="cuda"):
        found = {a.cap for a in self.allocations if _on(a.device, device)}
        return ([None] if None in found else []) + sorted(c for c in found if c is not None)

    def __repr__(self):
        return (f"<run: {len(self.ops)} ops, {len(self.copies)} copies, {len(self.waits)} host waits, "
                f"{len(self.backwards)} backwards, {len(self.allocations)} GPU allocations>")


def recording(torch):
    """A recording of what runs from now until its stop() (the engine's, one at a time)."""
    return torch._C._RunRecording()
