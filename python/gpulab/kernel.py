"""python3 -m gpulab.kernel [--emulated-gpu] [--output-limit CHARS --output-folder DIR]: the notebook
kernel behind a lesson's code cells.

One process holds one session: the cells the learner runs share its namespace, as a notebook's cells
do, with ``import torch`` giving GPU Lab's torch. GPU Lab's window (app/notebook/kernel_process.h)
starts it, sends it cells and reads what happens as JSON lines; a restart is a new process.

In, on stdin, one JSON object per line (read from a private copy of the stdin the process was given:
fd 0 itself then reads /dev/null, so that nothing a cell runs -- input(), sys.stdin, os.read(0), a
subprocess -- can take a line meant for the kernel):
    {"op": "run", "cell": "c1", "code": "x = torch.ones(3)\\nprint(x)"}
    {"op": "run", "cell": "c1", "code": "name = input('name? ')", "allow_stdin": true}
    {"op": "input_reply", "value": "Ada"}        (the answer to the cell's input_request; without
                                                 "allow_stdin" input() raises StdinNotImplementedError,
                                                 as ipykernel's does for a frontend without input)
    {"op": "hold_at_progress", "on": true}     (a lab's session: the window answers each lab.progress()
    {"op": "go_on"}  or  {"op": "stop"}          with one of these, once it has shown the update -- or
                                                 held it while paused -- and the lab waits for that
                                                 answer at its next lab.progress() (lab.synchronize())
    {"op": "run", "cell": "c1", "code": "...", "measure": {"values": {"loss is a number": "isinstance(total, float)"}}}
With "measure" (an exercise's run: lessons/README.md), the finished event carries what the run
measured -- errors, device-mismatch errors, out-of-memory errors (1 or 0), seconds, peak allocated
(bytes on cuda:0, with a CUDA device), "last NAME" for each name the cell logged, and each of the
values, evaluated over the session's names after the run (a bool counts 1 or 0; under the guard of
gpulab/exercise_values.py, as a lesson's text may come from anywhere), with the run's record as `run`
(what ran where, copies, host waits, backwards, allocations: gpulab/run_record.py) -- and, for a
value that could not be measured, why.
Stop is SIGINT: Python raises KeyboardInterrupt in the running cell at its next bytecode, even inside
time.sleep or input(), and the session goes on. (A cell that ignores SIGINT is the window's to end: it
kills the kernel's process group after a grace period, app/notebook/kernel_process.h.)

Out, on the stdout the process was given (the cells' own output is captured), one JSON object per line:
    {"event": "ready", "torch": "1.13.0+gpulab...", "cuda": true, "device": "GPU Lab emulated GPU ...", "emulated": true}
    {"event": "started", "cell": "c1"}
    {"event": "stream", "cell": "c1", "name": "stdout", "text": "tensor([1., 1., 1.])\\n"}
                              (what the cell printed, coalesced: the prints of ~20 ms, at most
                               STREAM_CHUNK characters, in one event)
    {"event": "input_request", "cell": "c1", "prompt": "name? "}               (input() waits for input_reply)
    {"event": "output_capped", "cell": "c1", "limit": 1000000, "file": "/.../cell-c1.txt"}
                              (with --output-limit: the cell printed more than CHARS characters; what
                               follows goes only to the file, which holds the whole output -- "file"
                               is empty when it could not be written, with "why")
    {"event": "log", "cell": "c1", "step": 0, "values": {"loss": 0.52}}       (lab.log(loss=...))
    {"event": "lab", "cell": "c1", "update": {"event": "point", "view": "v", ...}}
                              (lab.view/point/marker/level/bar/row/span/measurement/message/progress/
                               device/record: the lab protocol's
                               JSON form, app/course/lab_json.h, which the window checks as a lab's)
    {"event": "memory", "cell": "c1", "t": 0.25, "allocated": 4096, "reserved": 2097152,
     "categories": {"parameter": 4096, "gradient": 0, "activation": 0, ...}}   (live bytes by what they are for)
    {"event": "finished", "cell": "c1", "status": "ok" | "error" | "interrupted", "seconds": 0.01,
     "error": {"type": "RuntimeError", "message": "...", "traceback": "...", "kind": "device" | "oom" | ""},
     "measurements": [{"name": "errors", "value": 0, "unit": ""}, ...], "unmeasured": {"name": "why"},
     "output": {"chars": 100000000, "limit": 1000000, "file": "/.../cell-c1.txt"}}   (when it was capped)
Text written below Python (the engine's own std::cout) goes to stderr, which the window shows as is.
The cells run in the folder the process was started in (the window's: the lesson's working folder).
"""
import ast
import builtins
import collections
import io
import json
import linecache
import math
import os
import re
import signal
import sys
import threading
import time
import traceback

from gpulab import run_record

# Seconds between memory samples while a cell runs: 20 ms at first, so that a short cell still draws a
# curve, then a hundredth of the time the cell has run (at most a quarter of a second): a long run keeps
# ~100 samples per e-fold of its length, and wakes this thread (and the window's reader) less while it
# trains -- on two CPUs every wake-up takes one from the training's two threads.
MEMORY_INTERVAL = 0.02
MEMORY_INTERVAL_MAX = 0.25


class _Channel:
    """The protocol's output: JSON lines on a private copy of the stdout the process was given,
    written by the thread that sends them -- a lab's lab.progress() reaches the window while its next
    step runs (a writer thread would wait for the GIL the step holds). A line is written whole: the
    lock keeps the memory sampler's lines apart from the cell's, and the main thread holds SIGINT
    (Stop) back while it writes, so a blocked write is never cut short; a KeyboardInterrupt from a
    SIGINT that another thread took is raised between bytecodes, after the write returns. A full pipe
    makes the sender wait: a window that falls behind slows the run instead of piling lines up in
    memory.

    send() writes at once. queue() holds a lab's points and records back until the next send() (the
    lab's lab.progress(), a memory sample, the cell's end), QUEUE_DELAY after the first of them, or
    QUEUE_LINES of them: a training step's report (four points, a record, its progress) is one write
    and one wake-up of the window's reader, not six -- on two CPUs each wake-up took a CPU from the
    training (issue 30). stream() holds printed text back the same way and joins it: the prints of
    QUEUE_DELAY (the memory sampler sends them then, `output_waiting` wakes it), up to STREAM_CHUNK
    characters, are one stream event -- a million print() calls were two million JSON lines, 140 s of
    the kernel's time and as many wake-ups of the window (issue 48, 3.5). The order of the lines is
    kept: held text goes before any line queued or sent after it."""

    QUEUE_DELAY = 0.02  # seconds
    QUEUE_LINES = 64
    STREAM_CHUNK = 1 << 16  # characters of printed text in one stream event at most

    def __init__(self, fd):
        self._fd = fd
        self._lock = threading.Lock()
        self._queued = []
        self._queued_since = 0.0
        self._stream = None  # [cell, name, texts, characters]: printed text not sent yet, of one stream of one cell
        self.output_waiting = threading.Event()  # set while printed text is held back

    def send(self, **event):
        self._write(self._encode(event))

    def queue(self, **event):
        line = self._encode(event)
        with self._lock:
            self._queue_stream()
            if not self._queued:
                self._queued_since = time.monotonic()
            self._queued.append(line)
            due = len(self._queued) >= self.QUEUE_LINES or time.monotonic() - self._queued_since >= self.QUEUE_DELAY
        if due:
            self.flush()

    def stream(self, cell, name, text):
        """Printed text of `cell` ("stdout" or "stderr"), held back and joined with the prints after it."""
        with self._lock:  # the common case, first and short: a print joins the text held for its stream
            held = self._stream
            if held is not None and held[0] == cell and held[1] == name and held[3] + len(text) < self.STREAM_CHUNK:
                held[2].append(text)
                held[3] += len(text)
                return
        while text:
            with self._lock:
                held = self._stream
                if held is not None and (held[0] != cell or held[1] != name):
                    self._queue_stream()
                    held = None
                if held is None:
                    held = self._stream = [cell, name, [], 0]
                    self.output_waiting.set()
                piece, text = (text, "") if held[3] + len(text) <= self.STREAM_CHUNK else \
                    (text[:self.STREAM_CHUNK - held[3]], text[self.STREAM_CHUNK - held[3]:])
                held[2].append(piece)
                held[3] += len(piece)
                due = held[3] >= self.STREAM_CHUNK
            if due:
                self.flush()

    def flush(self):
        """Writes what queue() and stream() hold back, if anything."""
        if self._queued or self._stream is not None:
            self._write(b"")
        else:
            self.output_waiting.clear()

    def _queue_stream(self):
        """The held text as a stream event at the end of the queue (with the lock held)."""
        held, self._stream = self._stream, None
        if held is not None:
            if not self._queued:
                self._queued_since = time.monotonic()
            self._queued.append(self._encode({"event": "stream", "cell": held[0], "name": held[1], "text": "".join(held[2])}))

    @staticmethod
    def _encode(event):
        # No NaN or Infinity: the window's JSON reader refuses them, and would drop the whole line (the
        # lab.* methods refuse such numbers where they are given).
        return (json.dumps(event, allow_nan=False) + "\n").encode()

    def _write(self, line):
        main = threading.current_thread() is threading.main_thread()
        held = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT}) if main else None
        try:
            with self._lock:
                self._queue_stream()
                self.output_waiting.clear()
                data = memoryview(b"".join(self._queued) + line if self._queued else line)
                self._queued.clear()
                while data:
                    data = data[os.write(self._fd, data):]
        finally:
            if held is not None:
                signal.pthread_sigmask(signal.SIG_SETMASK, held)

    def close(self):
        self.flush()
        os.close(self._fd)


class _Commands:
    """The window's commands, one JSON object a line, from a private copy of the stdin the process was
    given (main() points fd 0 itself at /dev/null). input() reads them while its cell runs, and keeps
    the lines that are not its answer -- the next cell the learner queued meanwhile -- for the main
    loop, in their order."""

    def __init__(self, fd):
        self._file = os.fdopen(fd, "rb")
        self._kept = collections.deque()

    def read_line(self):
        """The next line ("" at the end of the input), the kept ones first. A Stop (KeyboardInterrupt)
        ends the wait."""
        if self._kept:
            return self._kept.popleft()
        return self.read_new_line()

    def read_new_line(self):
        """The next line that came from the window, past the kept ones (input()'s answer is never
        among them)."""
        return self._file.readline().decode("utf-8", errors="replace")

    def keep(self, line):
        self._kept.append(line)


class StdinNotImplementedError(NotImplementedError):
    """input() in a session whose window has no input box (ipykernel raises its namesake there)."""


class _CellStream(io.TextIOBase):
    """sys.stdout / sys.stderr while cells run: what is written is the running cell's output
    (Kernel.output). A file's manners: close() closes it (a write then raises ValueError, as on a
    closed file), and the next cell gets a fresh one (Kernel._install_streams)."""

    def __init__(self, kernel, name):
        super().__init__()
        self._output = kernel.output
        self._stream = name  # "stdout" or "stderr": the stream event's name

    @property
    def name(self):
        return f"<{self._stream}>"

    @property
    def encoding(self):
        return "utf-8"

    @property
    def errors(self):
        return "strict"

    def writable(self):
        return True

    def write(self, text):
        if self.closed:
            raise ValueError("I/O operation on closed file.")
        if text.__class__ is not str and not isinstance(text, str):
            raise TypeError(f"write() argument must be str, not {type(text).__name__}")
        if text:
            self._output(self._stream, text)
        return len(text)

    def flush(self):
        if self.closed:
            raise ValueError("I/O operation on closed file.")

    def isatty(self):
        return False


class _CellStdin(io.TextIOBase):
    """sys.stdin while cells run: a line read from it is one the learner types into the input box under
    the cell (Kernel.input), as input() reads one."""

    def __init__(self, kernel):
        super().__init__()
        self._kernel = kernel

    @property
    def name(self):
        return "<stdin>"

    @property
    def encoding(self):
        return "utf-8"

    def readable(self):
        return True

    def readline(self, size=-1):
        if self.closed:
            raise ValueError("I/O operation on closed file.")
        return self._kernel.input("") + "\n"

    def read(self, size=-1):
        return self.readline()

    def isatty(self):
        return False


class Lab:
    """``lab`` in the cells' namespace: what a cell reports for the live views.

    lab.log(loss=loss.item(), accuracy=acc) adds one point to each named series; step= places it
    (by default one step after the previous point of this cell)."""

    # An exercise's values may call its methods (python/gpulab/exercise_values.py): they ask the session
    # a question (lab.fits, lab.call_with_cuda_available) or report to the window; none reads or writes files.
    callable_from_exercise_values = True

    def __init__(self, kernel):
        self._kernel = kernel
        self._protocol = None  # the protocol's fields, from the engine when first needed

    # ---- The lab protocol (engine/lab/lab.h; its JSON form is app/course/lab_json.h): a cell draws
    # views of its own as a lab does. The window checks each update as it checks a lab's (a point for
    # a view not declared, say) and says what is wrong under the cell.

    def view(self, id, title=None, kind="line", x=None, y="", series=(), columns=(), note="", y_from_zero=False):  # noqa: A002
        """Declares a view: kind "line", "stacked", "bars", "table" or "timeline"; x an axis or a list of
        axes (a line's or a stack's; "step" by default), y an axis (an axis: "label" or ("label",
        "unit"), or ("label", "unit", True) on a logarithmic scale); series: ids, or (id, label), or (id, label, style) with style "line", "dashed",
        "points" or "steps", and a fourth item True for a series a stacked view draws over its stack
        instead of stacking (reserved memory, a capacity); columns (a table's), axes too."""
        if x is None:
            x = "step" if kind in ("line", "stacked") else []
        def axis(a):  # "label", ("label", "unit") or ("label", "unit", True): on a logarithmic scale
            label, unit, log = (a, "", False) if isinstance(a, str) else (tuple(a) + (False,))[:3]
            out = {"label": str(label), "unit": str(unit)}
            if log:
                out["log"] = True
            return out

        def one_series(s):
            s = (s,) if isinstance(s, str) else tuple(s)
            out = {"id": str(s[0]), "label": str(s[1] if len(s) > 1 else s[0]), "style": str(s[2] if len(s) > 2 else "line")}
            if len(s) > 3 and s[3]:
                out["overlay"] = True  # a stacked view's line over the stack, not part of it
            return out

        axes = [x] if isinstance(x, (str, tuple)) else list(x)
        self._send({"event": "view", "id": str(id), "title": str(title if title is not None else id), "kind": str(kind),
                    "x": [axis(a) for a in axes], "y": axis(y), "y_from_zero": bool(y_from_zero),
                    "series": [one_series(s) for s in series], "columns": [axis(c) for c in columns], "note": str(note)})

    def point(self, view, series, x, y):
        """One point of `series` in `view`: x is a number, or one per x axis of the view."""
        xs = list(x) if isinstance(x, (list, tuple)) else [x]
        self._send({"event": "point", "view": str(view), "series": str(series), "x": [self._number("x", v) for v in xs],
                    "y": self._number("y", y)})

    def marker(self, view, x, label, kind="event"):
        xs = list(x) if isinstance(x, (list, tuple)) else [x]
        self._send({"event": "marker", "view": str(view), "x": [self._number("x", v) for v in xs], "label": str(label), "kind": str(kind)})

    def bar(self, view, series, category, value):
        self._send({"event": "bar", "view": str(view), "series": str(series), "category": str(category), "value": self._number("value", value)})

    def row(self, view, *cells):
        self._send({"event": "row", "view": str(view), "cells": [c if isinstance(c, (bool, int, float, str)) else self._number("cell", c)
                                                                 for c in cells]})

    def measurement(self, name, value, unit=""):
        """A number the cell measured, in the Measurements table ("bytes" shows as MiB/GiB, "s" as time)."""
        self._send({"event": "measurement", "name": str(name), "value": self._number("value", value), "unit": str(unit)})

    def message(self, text, level="info"):
        """A line in the console: level "info", "warning" or "engine_error" (an error the run shows on purpose)."""
        self._send({"event": "message", "level": str(level), "text": str(text)})

    def level(self, view, label, y):
        """A labelled horizontal line at y on a plot (a device's capacity)."""
        self._send({"event": "level", "view": str(view), "label": str(label), "y": self._number("y", y)})

    def span(self, view, lane, label, start, end):
        """A span [start, end) in seconds on a lane of a timeline view."""
        self._send({"event": "span", "view": str(view), "lane": str(lane), "label": str(label),
                    "start": self._number("start", start), "end": self._number("end", end)})

    def progress(self, done, total=0, label=""):
        """How far the run is: done of total (0: unknown), with a short label ("epoch 2/3"). In a lab's
        run this is where the window holds the run (Pause) and stops it (Stop): the call first waits
        for the window's answer to the previous lab.progress(), so the run goes on while the window
        takes in this update -- its next step, never more, overlaps the window's work -- and a
        pause or a stop lands here, never inside what the lab times between two calls."""
        self._send({"event": "progress", "done": self._number("done", done), "total": self._number("total", total), "label": str(label)},
                   now=True)
        kernel = self._kernel
        if kernel.hold_at_progress:
            kernel.unanswered += 1
            while kernel.unanswered > 1:
                kernel.wait_for_answer()

    def synchronize(self):
        """Waits for the window's answer to every lab.progress() so far (in a lab's run; elsewhere it
        returns at once): a lab calls it before work that no step's progress covers (an evaluation
        pass), so that a Stop asked at the last step ends the run before that work, not after it."""
        kernel = self._kernel
        kernel.channel.flush()
        while kernel.unanswered > 0:
            kernel.wait_for_answer()

    def device(self, device):
        """Where the run computes, labelled as everywhere in GPU Lab (an emulated GPU says so)."""
        torch = self._kernel.torch
        device = torch.device(device)
        if device.type == "cuda" and device.index is None:
            device = torch.device("cuda", torch.cuda.current_device())
        emulated = device.type == "cuda" and torch.cuda.is_emulated(device)
        self._send({"event": "device", "device": str(device), "label": torch._C._device_label(device), "emulated": bool(emulated)})

    def record(self, event, **fields):
        """A named set of fields for scripts: `gpulab-cli --json` prints {"event": event, fields...}."""
        values = {}
        for name, value in fields.items():
            if hasattr(value, "item"):
                value = value.item()
            if not isinstance(value, (bool, int, float, str)):
                raise TypeError(f"lab.record(): {name} must be a number, a bool or a string, not {type(value).__name__}")
            values[name] = value
        self._send({"event": str(event), **values})

    @staticmethod
    def _number(name, value):
        if hasattr(value, "item"):
            value = value.item()
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise TypeError(f"lab: {name} must be a number (a Python number or a one-element tensor), not {type(value).__name__}")
        if not math.isfinite(value):
            raise ValueError(f"lab: {name} is {value}, which no view can show (a loss that diverged?)")
        return value

    def _send(self, update, now=False):
        """Checks the update and sends it: at once with now=True (lab.progress(), whose answer the lab
        waits for), else queued to go with the next (_Channel says why)."""
        self._check(update)
        kernel = self._kernel
        (kernel.channel.send if now else kernel.channel.queue)(event="lab", cell=kernel.cell, update=update)

    def _check(self, update):
        """The update's fields against the protocol's (engine/lab/lab_schema.h, which the window's decoder
        follows too): a call that leaves one out or gives one of the wrong kind raises here, at the
        line that made it, rather than being refused later by the window."""
        if self._protocol is None:
            self._protocol = self._kernel.torch._C._lab_protocol()
        spec = self._protocol["updates"].get(update["event"])
        if spec is None:
            return  # a record: free fields
        call = f"lab.{update['event']}()"
        known = {f["name"] for f in spec["fields"]} | {"event"}
        for name in update:
            if name not in known:
                raise TypeError(f"{call}: {spec['what']} has no field '{name}'")
        for f in spec["fields"]:
            if f["name"] not in update:
                if f["required"]:
                    raise TypeError(f"{call}: {spec['what']} needs '{f['name']}'")
                continue
            problem = self._field_problem(f, update[f["name"]])
            if problem:
                # A name outside its choices is a wrong value (ValueError); anything else, a wrong type.
                raise (ValueError if "must be one of" in problem else TypeError)(f"{call}: '{f['name']}' {problem}")

    def _field_problem(self, field, value):
        """What is wrong with `value` for a field of the protocol, or None."""
        def number(v):
            return isinstance(v, (int, float)) and not isinstance(v, bool)

        def object_problem(kind, v):
            spec = self._protocol["objects"][kind]
            if not isinstance(v, dict):
                return f"must be {spec['what']}"
            for f in spec["fields"]:
                if f["name"] in v:
                    problem = self._field_problem(f, v[f["name"]])
                    if problem:
                        return f"has {spec['what']} whose '{f['name']}' {problem}"
                elif f["required"]:
                    return f"has {spec['what']} without '{f['name']}'"
            return None

        kind = field["type"]
        if kind == "text":
            return None if isinstance(value, str) else f"must be a string, not {type(value).__name__}"
        if kind == "number":
            return None if number(value) else f"must be a number, not {type(value).__name__}"
        if kind == "bool":
            return None if isinstance(value, bool) else f"must be True or False, not {type(value).__name__}"
        if kind == "numbers":
            return None if isinstance(value, list) and all(number(v) for v in value) else "must be a list of numbers"
        if kind == "cells":
            return None if isinstance(value, list) and all(isinstance(v, (bool, int, float, str)) for v in value) \
                else "must be numbers, strings or booleans"
        if kind == "name":
            return None if value in field["choices"] else f"must be one of {', '.join(field['choices'])}, not {value!r}"
        if kind == "axis":
            return object_problem("axis", value)
        if kind in ("axes", "series"):
            if not isinstance(value, list):
                return f"must be a list, not {type(value).__name__}"
            for item in value:
                problem = object_problem("axis" if kind == "axes" else "series", item)
                if problem:
                    return problem
            return None
        return None

    # For the exercises' values (lessons/README.md): what a grader asks of the code the learner left.

    def call_with_cuda_available(self, available, fn, *args, **kwargs):
        """fn(*args) with torch.cuda.is_available() answering `available`: how a function that picks
        the device would choose on a machine with (or without) a GPU."""
        cuda = self._kernel.torch.cuda
        original = cuda.is_available
        cuda.is_available = lambda: available
        try:
            return fn(*args, **kwargs)
        finally:
            cuda.is_available = original

    def fits(self, nbytes, device="cuda"):
        """Whether a tensor of `nbytes` bytes can be allocated on `device` now (under a memory
        fraction, say); what the attempt reserved is given back."""
        torch = self._kernel.torch
        try:
            block = torch.empty((int(nbytes) + 3) // 4, dtype=torch.float32, device=device)
        except torch.cuda.OutOfMemoryError:
            return False
        del block
        torch.cuda.empty_cache()
        return True

    def memory_category(self, name):
        """A context manager: what this thread allocates inside it is drawn as `name` in the memory
        views ("input_batch", "activation", ...; nn.Module and .to() tag the others themselves)."""
        return self._kernel.torch._C._MemoryCategoryScope(str(name))

    def memory_stats(self, device):
        """torch.cuda.memory_stats(device)'s numbers for any device, the CPU too (GPU Lab's allocator
        keeps them for host memory, where PyTorch has none), with "free_bytes" and "total_bytes": what
        torch.cuda.mem_get_info(device) gives, for the CPU what this machine has free and its budget."""
        return self._kernel.torch._C._memory_stats_of(device)

    def busy_seconds(self, device):
        """Seconds `device` has spent running kernels so far, or None where it cannot say: the emulated
        GPU's streams time their kernels (the busy share nvidia-smi calls GPU-Util); a GPU's would
        need an event around every kernel, and the CPU runs its kernels on the caller's thread."""
        return self._kernel.torch._C._busy_seconds(device)

    def cudnn_choices(self, device):
        """What cuDNN chose on `device` since forget_cudnn_choices: a dict for each convolution pass and
        shape it met ("pass", "shape", "how": "heuristics" or "benchmark", "search_milliseconds",
        "trials": every candidate's "algorithm", "milliseconds" (None where it was not timed),
        "workspace", "deterministic", "chosen", "status"). Empty where there is no cuDNN: the CPU and
        the emulated GPU. PyTorch keeps this inside cuDNN's cache, with no call to read it."""
        return self._kernel.torch._C._cudnn_choices(device)

    def forget_cudnn_choices(self, device):
        """Forgets what cuDNN chose on `device`, its cached choices too: the next convolution of each
        shape chooses afresh, as in a new process."""
        self._kernel.torch._C._clear_cudnn_choices(device)

    def reset_peak_memory_stats(self, device):
        """torch.cuda.reset_peak_memory_stats for any device, the CPU too."""
        self._kernel.torch._C._reset_peak_memory_stats_of(device)

    def memory_by_category(self, device):
        """Follows `device`'s allocations from now: .update() returns the live bytes of each category
        ("parameter", "activation", ...), as the memory views draw them."""
        return self._kernel.torch._C._LiveBytesByCategory(device)

    # Data the lessons train on.

    def fashion_mnist(self, train=True):
        """Fashion-MNIST (Debian's dataset-fashion-mnist) as a TensorDataset: images (N, 1, 28, 28),
        normalised, and labels 0-9 -- torchvision.datasets.FashionMNIST's data with ToTensor() and
        Normalize((0.2860,), (0.3530,)), already as tensors. OSError names the package when it is missing."""
        torch = self._kernel.torch
        images, labels = torch._C._fashion_mnist(bool(train))
        return torch.utils.data.TensorDataset(images, labels)

    def log(self, step=None, **values):
        if not values:
            raise TypeError("lab.log() takes the values as keywords: lab.log(loss=loss.item())")
        numbers = {}
        for name, value in values.items():
            if hasattr(value, "item"):
                value = value.item()
            if isinstance(value, bool) or not isinstance(value, (int, float)):
                raise TypeError(f"lab.log(): {name} must be a number (a Python number or a one-element tensor), "
                                f"not {type(value).__name__}")
            if not math.isfinite(value):
                raise ValueError(f"lab.log(): {name} is {value}, which no plot can show: did the training diverge?")
            numbers[name] = float(value)
        kernel = self._kernel
        kernel.step = kernel.step + 1 if step is None else int(step)
        kernel.logged.update(numbers)
        kernel.channel.queue(event="log", cell=kernel.cell, step=kernel.step, values=numbers)


class Kernel:
    def __init__(self, channel, commands, output_limit=None, output_folder=None):
        self.channel = channel
        self.commands = commands
        self.cell = None
        self.step = -1
        self.logged = {}  # the last value of each name the running cell logged
        self.namespace = {"__name__": "__main__", "__builtins__": __builtins__}
        self._running = threading.Event()
        self.in_cell = False  # _running.is_set(), read where a call costs (Kernel.output)
        # A lab's session: the window answers each lab.progress() (Lab.progress), so that a paused lab
        # stops at its next progress update and its timers see no pause.
        self.hold_at_progress = False
        self.unanswered = 0  # the running cell's lab.progress() calls the window has not answered yet
        self.allow_stdin = False  # the running cell's window has an input box for input()
        # What a cell's output keeps (--output-limit): the window shows the first output_limit characters
        # of a cell's output and the whole goes to a file in output_folder, so that a cell printing
        # 100 MB costs the window 1 MB (issue 48, 3.5). None: all of it is sent.
        self.output_limit = output_limit
        self.output_folder = os.path.abspath(output_folder or os.path.join(os.getcwd(), ".gpulab-output"))
        self._output_lock = threading.Lock()  # cells' threads print too
        self._output_chars = 0  # characters the running cell printed
        self._output_kept = []  # what it printed, while under the limit: the file's start once it is passed
        self._output_file = None  # the file with the whole output, once the limit is passed (False: none could be written)
        self._output_path = ""

    def wait_for_answer(self):
        """Reads the window's answer to the oldest unanswered lab.progress(): go on, or stop here."""
        line = self.commands.read_line()  # a Stop (KeyboardInterrupt) ends the wait
        self.unanswered -= 1
        command = json.loads(line) if line.strip() else None
        if isinstance(command, dict) and command.get("op") == "stop":
            raise KeyboardInterrupt("stopped at lab.progress()")  # the window stopped the run at this update
        if not isinstance(command, dict) or command.get("op") != "go_on":
            raise RuntimeError(f"the lab waited at lab.progress() for {{\"op\": \"go_on\"}}, and got {line.strip()[:200]!r}")

    def start(self):
        import torch

        self.torch = torch
        self.namespace["torch"] = torch
        self.namespace["lab"] = Lab(self)
        sys.stdout, sys.stderr, sys.stdin = _CellStream(self, "stdout"), _CellStream(self, "stderr"), _CellStdin(self)
        # input() asks the window (an input box under the cell), as a notebook's does; the builtin would
        # write its prompt and read sys.stdin, without the prompt in the box.
        builtins.input = self.input
        cuda = torch.cuda.is_available()
        # cuda:0's live bytes by category, followed from the session's start (what the cells allocate).
        self._live = torch._C._LiveBytesByCategory(0) if cuda else None
        self.channel.send(event="ready", torch=torch.__version__, cuda=cuda,
                          device=torch.cuda.get_device_name(0) if cuda else "cpu",
                          emulated=bool(cuda and torch.cuda.is_emulated(0)))
        threading.Thread(target=self._sample_memory, daemon=True, name="memory sampler").start()

    def _install_streams(self):
        """sys.stdout, sys.stderr and sys.stdin as the cells have them, put back before each cell where
        the last one took them away -- `del sys.stdout`, `sys.stdout = None`, `sys.stdout.close()` broke
        every later cell until a restart (issue 48, 3.6). A stream a cell set on purpose (a file still
        open) stays, as it would in Python."""
        for name, make in (("stdout", lambda: _CellStream(self, "stdout")), ("stderr", lambda: _CellStream(self, "stderr")),
                           ("stdin", lambda: _CellStdin(self))):
            current = getattr(sys, name, None)
            try:
                gone = current is None or bool(current.closed)
            except Exception:  # noqa: BLE001 - an object without a working `closed`: not a stream to keep
                gone = True
            if gone:
                setattr(sys, name, make())

    def input(self, prompt=""):
        """input() in a cell: the window shows an input box under the cell and sends what the learner
        typed (input_request, then input_reply); the prompt and the answer then show in the output, as
        a notebook shows them. A Stop ends the wait (KeyboardInterrupt). Commands that come meanwhile
        (a cell queued after this one) wait for the main loop, in order."""
        prompt = str(prompt)
        if not self.allow_stdin:
            raise StdinNotImplementedError("input() is not available in a code cell here: this session has no input box "
                                           "(gpulab-cli and the labs run cells without one) -- set the value in the code")
        if threading.current_thread() is not threading.main_thread():
            raise StdinNotImplementedError("input() is not available in a code cell's other threads: call it in the cell itself")
        self.channel.send(event="input_request", cell=self.cell, prompt=prompt)
        while True:
            line = self.commands.read_new_line()
            if not line:
                raise EOFError("the window closed the session's input")
            try:
                command = json.loads(line)
            except json.JSONDecodeError:
                command = None
            if isinstance(command, dict) and command.get("op") == "input_reply":
                break
            self.commands.keep(line)
        value = str(command.get("value", ""))
        self.output("stdout", prompt + value + "\n")
        return value

    def output(self, name, text):
        """What the running cell printed ("stdout" or "stderr"): to the window, up to output_limit
        characters a cell, and past that to a file that holds the whole -- the window says so."""
        # A million print() calls are two million of these: the common cases first, in few steps.
        cell = self.cell
        if self.output_limit is None:
            self.channel.stream(cell, name, text)
        else:
            with self._output_lock:
                before = self._output_chars
                self._output_chars = before + len(text)
                if self._output_chars <= self.output_limit:
                    self._output_kept.append(text)
                    self.channel.stream(cell, name, text)
                elif self._output_file:
                    self._output_file.write(text)
                elif self._output_file is None:
                    room = self.output_limit - before
                    if room > 0:
                        self.channel.stream(cell, name, text[:room])
                    self._open_output_file(cell, text)
        if not self.in_cell:
            self.channel.flush()  # a thread a cell left behind: nothing else would send it soon

    def _open_output_file(self, cell, text):
        """The limit is passed: the whole output so far, and what follows, goes to a file (with the lock held)."""
        safe = re.sub(r"[^A-Za-z0-9_.-]", "_", str(cell))[:64] or "cell"
        self._output_path = os.path.join(self.output_folder, f"cell-{safe}.txt")
        file, why = None, ""
        try:
            os.makedirs(self.output_folder, exist_ok=True)
            file = open(self._output_path, "w", encoding="utf-8", errors="replace")
            file.writelines(self._output_kept)
            file.write(text)
            self._output_file = file
        except OSError as e:  # a full disk, a folder that cannot be written: the rest is dropped, and the window says why
            if file is not None:
                file.close()
            self._output_file, why, self._output_path = False, f"{type(e).__name__}: {e}", ""
        self._output_kept = []
        event = {"event": "output_capped", "cell": cell, "limit": self.output_limit, "file": self._output_path}
        if why:
            event["why"] = why
        self.channel.send(**event)

    def _reset_output(self):
        """A new cell's output: nothing printed yet; the last cell's file closed."""
        with self._output_lock:
            if self._output_file:
                self._output_file.close()
            self._output_chars, self._output_kept, self._output_file, self._output_path = 0, [], None, ""

    def _output_summary(self):
        """For the finished event of a cell whose output passed the limit: how much it printed and where
        the whole is (the file flushed, so the window can open it now)."""
        with self._output_lock:
            if self._output_file is None:
                return None
            if self._output_file:
                self._output_file.flush()
            return {"chars": self._output_chars, "limit": self.output_limit, "file": self._output_path}

    def _sample_memory(self):
        """Allocated and reserved memory of cuda:0 while a cell runs, every MEMORY_INTERVAL at first and
        less often as it goes on (the allocator's counters: reading them waits for nothing). Each sample
        also sends the lines the channel queued; without a GPU the thread still does that, so a lab's
        last update before a long silence reaches the window within MEMORY_INTERVAL_MAX. Printed text
        goes out sooner: QUEUE_DELAY after the print that started it (the channel wakes this thread)."""
        cuda_available = self.torch.cuda.is_available()
        waiting = self.channel.output_waiting
        while True:
            self._running.wait()
            cell, began = self.cell, self._began
            next_sample = MEMORY_INTERVAL if cuda_available else 0.0  # seconds into the cell (run() took t = 0)
            while self._running.is_set() and self.cell == cell:
                elapsed = time.monotonic() - began
                if elapsed >= next_sample:
                    if cuda_available:
                        self._send_memory(cell, elapsed)
                    else:
                        self.channel.flush()
                    next_sample = elapsed + min(max(MEMORY_INTERVAL, elapsed / 100), MEMORY_INTERVAL_MAX)
                if waiting.wait(max(0.0, next_sample - (time.monotonic() - began))):
                    time.sleep(_Channel.QUEUE_DELAY)  # the prints right after it go along
                    self.channel.flush()

    def _send_memory(self, cell, t):
        cuda = self.torch.cuda
        if self._live is not None:
            self.channel.send(event="memory", cell=cell, t=round(t, 4), allocated=cuda.memory_allocated(),
                              reserved=cuda.memory_reserved(), categories=self._live.update())

    def run(self, cell, code, measure=None, allow_stdin=False):
        """Runs one cell; SIGINT (Stop) is let in only while its code runs, so that a Stop can never
        land in the kernel's own bookkeeping, and one that came while the cell was queued stops it as
        it starts. `measure`: {"values": {name: expression}} for an exercise's run; `allow_stdin`: the
        window answers input() (Kernel.input)."""
        self.cell, self.step, self.logged = cell, -1, {}
        self.unanswered = 0
        self.allow_stdin = allow_stdin
        self._reset_output()
        self._install_streams()
        cuda = self.torch.cuda
        if measure is not None and cuda.is_available():
            cuda.reset_peak_memory_stats()
        self.channel.send(event="started", cell=cell)
        self._began = time.monotonic()
        if cuda.is_available():
            # The memory as the cell found it, before its first statement: a cell that runs in a
            # millisecond (del, empty_cache()) ends before the sampler's first turn, and its fall
            # shows only against this.
            self._send_memory(cell, 0.0)
        self.in_cell = True
        self._running.set()
        status, error = "ok", None
        # An exercise's run is recorded (what ran where, copies, waits, backwards, allocations): its
        # values read the record as `run` (gpulab/run_record.py).
        recording = run_record.recording(self.torch) if measure is not None else None
        try:
            signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT})
            self._execute(code, cell)
        except KeyboardInterrupt as e:
            status, error = "interrupted", self._describe(e, cell)
        except BaseException as e:  # noqa: BLE001 - the cell's error is reported, the session goes on
            status, error = "error", self._describe(e, cell)
        finally:
            _block_interrupts()
            record = run_record.RunRecord(recording.stop()) if recording is not None else None
            self._running.clear()
            self.in_cell = False
        seconds = time.monotonic() - self._began
        self._send_memory(cell, seconds)
        event = {"event": "finished", "cell": cell, "status": status, "seconds": round(seconds, 4)}
        if error is not None:
            event["error"] = error
        output = self._output_summary()
        if output is not None:
            event["output"] = output
        if measure is not None:
            event["measurements"], event["unmeasured"] = self._measure(measure, error, seconds, record)
        self.channel.send(**event)

    def _measure(self, measure, error, seconds, record):
        """What an exercise's run measured (the module's docstring lists it), and why a value could
        not be measured. The values run in the session, as the learner's code left it, with the run's
        record as `run` (it hides a name `run` of the session's)."""
        kind = error["kind"] if error else None
        out = [{"name": "errors", "value": 0 if error is None else 1, "unit": ""},
               {"name": "device-mismatch errors", "value": int(kind == "device"), "unit": ""},
               {"name": "out-of-memory errors", "value": int(kind == "oom"), "unit": ""},
               {"name": "seconds", "value": seconds, "unit": "s"}]
        if self.torch.cuda.is_available():
            out.append({"name": "peak allocated", "value": self.torch.cuda.max_memory_allocated(), "unit": "bytes"})
        out += [{"name": "last " + name, "value": value, "unit": ""} for name, value in self.logged.items()]
        unmeasured = {}
        for name, expression in (measure.get("values") or {}).items():
            try:
                from gpulab import exercise_values

                value = exercise_values.evaluate(expression, name, {**self.namespace, "run": record})  # a lesson's text, under guard
                if hasattr(value, "item"):
                    value = value.item()
                if not isinstance(value, (bool, int, float)):
                    raise TypeError(f"gave {type(value).__name__}, not a number or a bool")
                if not math.isfinite(value):
                    raise ValueError(f"gave {value}")
                out.append({"name": name, "value": float(value), "unit": ""})
            except Exception as e:  # noqa: BLE001 - a value the run left no way to measure: said why
                unmeasured[name] = f"{type(e).__name__}: {e}"
        return out, unmeasured

    def _execute(self, code, cell):
        """As a notebook runs a cell: the statements in order, and the last one's value shown when it is
        an expression that gives something other than None."""
        filename = f"<cell {cell}>"
        linecache.cache[filename] = (len(code), None, code.splitlines(True), filename)  # tracebacks show the lines
        tree = ast.parse(code, filename=filename)
        last = None
        if tree.body and isinstance(tree.body[-1], ast.Expr):
            last = ast.Expression(tree.body.pop().value)
        exec(compile(tree, filename, "exec"), self.namespace)
        if last is not None:
            value = eval(compile(last, filename, "eval"), self.namespace)
            if value is not None:
                print(repr(value))

    def _describe(self, error, cell):
        """The error as the window shows it: the traceback from the cell's own frames on (this
        kernel's frames cut), and which of the lessons' errors it is."""
        tb = error.__traceback__
        while tb is not None and not tb.tb_frame.f_code.co_filename.startswith("<cell "):
            tb = tb.tb_next
        text = "".join(traceback.format_exception(type(error), error, tb))
        message = str(error)
        kind = ""
        if isinstance(error, self.torch.cuda.OutOfMemoryError):
            kind = "oom"
        elif isinstance(error, RuntimeError) and "Expected all tensors to be on the same device" in message:
            kind = "device"
        return {"type": type(error).__name__, "message": message, "traceback": text, "kind": kind}


def _block_interrupts():
    """SIGINT held back from this thread (and the threads it starts), and one that came meanwhile
    dropped: a Stop applies to the cell it was pressed for, never to the next one."""
    signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT})
    if signal.SIGINT in signal.sigpending():
        signal.sigwait({signal.SIGINT})


def main(argv):
    output_limit, output_folder = None, None
    try:
        while argv:
            if argv[0] == "--emulated-gpu":
                os.environ["GPULAB_EMULATED_GPU"] = "1"
                argv = argv[1:]
            elif argv[0] == "--output-limit" and len(argv) > 1:
                output_limit, argv = max(0, int(argv[1])), argv[2:]
            elif argv[0] == "--output-folder" and len(argv) > 1:
                output_folder, argv = argv[1], argv[2:]
            else:
                raise ValueError(argv[0])
    except ValueError:
        print(__doc__.strip(), file=sys.stderr)
        return 2
    # SIGINT is the Stop button: a KeyboardInterrupt in the running cell, never the kernel's end. It is
    # held back outside the cells' code (Kernel.run lets it in), from here on, so that the threads
    # started below inherit the mask and never take it.
    signal.signal(signal.SIGINT, signal.default_int_handler)
    signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT})
    # The protocol keeps the stdout we were given; fd 1 itself then points at stderr, so that text
    # printed below Python cannot break a JSON line. The same for the commands: a private copy of our
    # stdin, and fd 0 reads /dev/null -- a cell that read stdin (input() was one) took the window's
    # next command, and that cell never finished (issue 48, 3.2). Both copies are not inherited: a
    # subprocess a cell starts has neither.
    channel = _Channel(os.dup(1))
    os.dup2(2, 1)
    commands = _Commands(os.dup(0))
    devnull = os.open(os.devnull, os.O_RDONLY)
    os.dup2(devnull, 0)
    os.close(devnull)
    from gpulab import as_torch

    as_torch.install()
    kernel = Kernel(channel, commands, output_limit, output_folder)
    kernel.start()
    while True:
        try:
            line = commands.read_line()
            if not line:
                break  # the window closed our stdin: the session is over
            command = json.loads(line)
            if isinstance(command, dict) and command.get("op") == "hold_at_progress":
                kernel.hold_at_progress = bool(command.get("on"))
                continue
            if isinstance(command, dict) and command.get("op") in ("go_on", "stop", "input_reply"):
                # The answer to a cell's last lab.progress(), or to one an interrupt ended first; an
                # answer to an input() that a Stop ended before it came.
                continue
            if not isinstance(command, dict) or command.get("op") != "run" or "cell" not in command or "code" not in command:
                channel.send(event="protocol_error", message=f"expected {{\"op\": \"run\", \"cell\": ..., \"code\": ...}}, got {line.strip()[:200]}")
                continue
            measure = command.get("measure")
            kernel.run(str(command["cell"]), str(command["code"]), measure if isinstance(measure, dict) else None,
                       bool(command.get("allow_stdin")))
        except json.JSONDecodeError as e:
            channel.send(event="protocol_error", message=f"not a JSON line: {e}")
        except KeyboardInterrupt:
            pass  # a Stop that came between cells: nothing was running
    channel.close()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
