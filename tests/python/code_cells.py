"""Runs code cells as a notebook would -- the seeds' ```python blocks (tests/python/seeds/seed_*.py, one
"# %%" cell each) or a lesson's (lessons/*/lesson.md, read as they are) -- in order, in one namespace
per file, after a prelude that defines the names the code assumes (model, MyModel, data_loader,
optimizer, loss_function, ...), and checks each cell's outcome -- "ok" or the exception class it
raised -- against the one expected (the seeds' "# %%" lines; for lessons, --expect's JSON):

    code_cells.py --torch gpulab --mode no-gpu  FILE...   GPU Lab's torch, no GPU (as PyTorch without one;
                                                          a real GPU is hidden with CUDA_VISIBLE_DEVICES)
    code_cells.py --torch gpulab --mode one-gpu FILE...   GPU Lab's torch with its emulated GPU as cuda:0
    code_cells.py --torch gpulab --mode gpu FILE...       GPU Lab's torch on a real GPU as cuda:0 (its CUDA
                                                          kernels, cuBLAS, cuDNN), held to the one-gpu
                                                          column: the emulated GPU must behave as a real
                                                          one does (77, skipped, without a real GPU)
    code_cells.py --torch pytorch --mode no-gpu FILE...   Debian's PyTorch (CPU-only), to confirm the
                                                          no-gpu column: a cell must run or raise as
                                                          expected (PyTorch's CPU-only build raises
                                                          AssertionError where one without a driver
                                                          raises RuntimeError: only "raised" is compared)

Exit status 1 when a cell's outcome differs; 77 (skipped) for --torch pytorch without python3-torch.
"""
import argparse
import os
import re
import sys
import traceback
import warnings

PRELUDE = '''
import torch
import torch.nn as nn
from torch.utils.data import DataLoader, TensorDataset


class MyModel(nn.Module):
    def __init__(self):
        super().__init__()
        self.layers = nn.Sequential(nn.Linear(16, 64), nn.ReLU(), nn.Linear(64, 1))

    def forward(self, x):
        return self.layers(x)


torch.manual_seed(0)
device = torch.device("cpu")
model = MyModel()
data_loader = DataLoader(TensorDataset(torch.randn(256, 16), torch.randn(256, 1)), batch_size=64, shuffle=True)
dataloader = data_loader
loss_function = loss_fn = nn.MSELoss()
optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
tensor = torch.ones(3)
batch_X, batch_y = next(iter(data_loader))
'''

# The names the lessons' code blocks take as given (lessons/*/lesson.md): a small regression set and
# model, Fashion-MNIST-shaped images for the convolution and loader blocks, the vectorise lesson's
# points and centres.
LESSON_PRELUDE = PRELUDE + '''
import os
import torch.nn.functional as F
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP

device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
X, y = torch.randn(256, 16), torch.randn(256, 1)
num_epochs = epochs = 2
loader = train_loader = test_loader = DataLoader(TensorDataset(X, y), batch_size=64, shuffle=True)
dataset = TensorDataset(X, y)
images = TensorDataset(torch.randn(64, 1, 28, 28), torch.randint(0, 10, (64,)))
num_workers, pin_memory = 0, False
k, steps, read_every = 2, 8, 4
total = 0.0
x = torch.randn(64, 16)
b = torch.randint(0, 64, (16,))


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.hidden = nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 32), nn.ReLU(), nn.Linear(32, 32), nn.ReLU())
        self.out = nn.Linear(32, 1)

    def forward(self, x):
        return self.out(self.hidden(x))


model = Net().to(device)
optimizer = torch.optim.SGD(model.parameters(), lr=0.01)


def train_step():
    optimizer.zero_grad()
    loss_fn(model(x.to(device)), x[:, :1].to(device)).backward()
    optimizer.step()


n, m, d, chunk = 32, 8, 4, 8
a, b_centres = torch.randn(n, d), torch.randn(m, d)
chunks = [torch.randn(32, 16) for _ in range(3)]
outs = []
W = torch.randn(16, 16, device=device)
'''

CELL = re.compile(r"^# %% (?P<label>[^:]*): no-gpu=(?P<no_gpu>\S+) one-gpu=(?P<one_gpu>\S+)\s*$")


def markdown_cells(path, expected):
    """A lesson's ```python blocks with the outcomes `expected` gives them (default "ok"): its setup
    blocks (```python setup) first, as the app runs them before the first cell, then the others in order.
    Blocks are numbered in the file's order."""
    text = open(path, encoding="utf-8").read()
    lesson = os.path.basename(os.path.dirname(os.path.abspath(path)))
    given = expected.get(lesson, {}).get("cells", {})  # "why" beside each outcome is for the reader
    out = []
    for i, match in enumerate(re.finditer(r"^```python( setup)?\n(.*?)^```", text, re.S | re.M)):
        outcome = given.get(str(i), {})
        out.append({"label": f"block {i}" + (" (setup)" if match[1] else ""), "setup": bool(match[1]),
                    "no-gpu": outcome.get("no-gpu", "ok"), "one-gpu": outcome.get("one-gpu", "ok"), "code": match[2]})
    return lesson, sorted(out, key=lambda cell: not cell["setup"])


class Lab:
    """The kernel's `lab` (python/gpulab/kernel.py) as far as the cells use it: lab.log(name=number)."""

    def __init__(self):
        self.logged = []

    def log(self, step=None, **values):
        self.logged.append({name: float(value) for name, value in values.items()})


def cells(path):
    current, out = None, []
    for line in open(path, encoding="utf-8"):
        match = CELL.match(line)
        if match:
            current = {"label": match["label"], "no-gpu": match["no_gpu"], "one-gpu": match["one_gpu"], "code": ""}
            out.append(current)
        elif current is not None:
            current["code"] += line
    return out


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--torch", choices=["gpulab", "pytorch"], required=True)
    parser.add_argument("--mode", choices=["no-gpu", "one-gpu", "gpu"], required=True)
    parser.add_argument("--expect", help="for lesson.md files: the outcomes that are not 'ok', and preludes (JSON)")
    parser.add_argument("files", nargs="+")
    args = parser.parse_args()
    if args.torch == "gpulab":
        # On a real GPU the emulated one stays off, so cuda:0 is the real GPU and device_count() is 1,
        # as on the one-GPU machine the one-gpu column describes.
        os.environ["GPULAB_EMULATED_GPU"] = "1" if args.mode == "one-gpu" else "0"
        if args.mode == "no-gpu":
            os.environ["CUDA_VISIBLE_DEVICES"] = ""  # a GPU machine's GPU hidden, as PyTorch would not see one
        from gpulab import as_torch

        as_torch.install()
        import torch

        real = torch.cuda.is_available() and not torch.cuda.is_emulated(0)  # real GPUs come first
        if args.mode == "gpu" and not real:
            print("--mode gpu runs on a real GPU; none is usable here")
            return 77
        if args.mode == "one-gpu" and real:
            # The emulated GPU would come after the real one (cuda:1): --mode gpu checks this column here.
            print("--mode one-gpu describes a machine whose one GPU is the emulated one; a real GPU is here (--mode gpu)")
            return 77
    else:
        try:
            import torch  # noqa: F401
        except ImportError:
            print("Debian's PyTorch (python3-torch) is not installed")
            return 77
        if args.mode != "no-gpu" or torch.cuda.is_available():
            print("--torch pytorch checks the no-gpu column on a machine without a GPU only")
            return 77
    warnings.simplefilter("ignore")
    # The cells may write files (a profiler trace, a checkpoint): in a folder of their own, not here.
    import tempfile

    paths = [os.path.abspath(p) for p in args.files]
    expect_path = os.path.abspath(args.expect) if args.expect else None
    scratch = tempfile.TemporaryDirectory(prefix="gpulab-cells-")
    os.chdir(scratch.name)
    args.files, args.expect = paths, expect_path
    failures = 0
    outcomes = {}
    if args.expect:
        import json

        outcomes = json.load(open(args.expect, encoding="utf-8"))
    for path in args.files:
        namespace = {"__name__": "__main__"}
        if path.endswith(".md"):
            lesson, found = markdown_cells(path, outcomes)
            # A lesson with a setup block says what its cells take as given: it runs as the app runs it,
            # with only `torch` and `lab` given. The others still lean on the prelude.
            self_contained = any(cell["setup"] for cell in found)
            prelude = "import torch\n" if self_contained else LESSON_PRELUDE + outcomes.get(lesson, {}).get("prelude", "")
            namespace["lab"] = Lab()
            path = lesson
        else:
            found, prelude = cells(path), PRELUDE
        exec(compile(prelude, "<prelude>", "exec"), namespace)
        for cell in found:
            expected = cell["one-gpu" if args.mode == "gpu" else args.mode]
            try:
                exec(compile(cell["code"], f"{os.path.basename(path)} {cell['label']}", "exec"), namespace)
                outcome = "ok"
            except Exception as e:  # noqa: BLE001 - the exception is the outcome
                outcome = type(e).__name__
                detail = "".join(traceback.format_exception_only(type(e), e)).strip()
            agrees = outcome == expected if args.torch == "gpulab" else (outcome == "ok") == (expected == "ok")
            said = "ok" if outcome == "ok" else f"{outcome} ({detail.splitlines()[-1][:150]})"
            print(f"{'  ' if agrees else 'X '}{os.path.basename(path)} {cell['label']}: expected {expected}, got {said}")
            failures += not agrees
    print(f"{failures} cell(s) differ" if failures else "every cell as expected")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
