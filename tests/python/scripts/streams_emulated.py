"""Streams, events, record_stream, CUDA graphs (dropout replayed with new masks) and checkpointing on the emulated GPU (gpulab-cli run --emulated-gpu):
lesson 13's copy-on-a-side-stream loop as written, timing events, and checkpoint_sequential's gradients
equal to the plain ones. Prints "ok" at the end; any failed check raises."""
import torch
assert torch.cuda.is_available()
copy_stream = torch.cuda.Stream()
print(copy_stream, torch.cuda.current_stream())
device = "cuda"
W = torch.randn(64, 64, device=device)
chunks = [torch.randn(32, 64).pin_memory() for _ in range(4)]
outs = []
for c in chunks:
    with torch.cuda.stream(copy_stream):
        x = c.to(device, non_blocking=True)
        ready = torch.cuda.Event(); ready.record()
    torch.cuda.current_stream().wait_event(ready)
    x.record_stream(torch.cuda.current_stream())
    outs.append(torch.relu(x @ W))
torch.cuda.synchronize()
print(len(outs), outs[0].shape, outs[0].device)
start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
start.record(); y = W @ W; end.record(); end.synchronize()
assert start.elapsed_time(end) >= 0
# checkpoint
model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 16), torch.nn.ReLU(), torch.nn.Linear(16, 1))
from torch.utils.checkpoint import checkpoint_sequential, checkpoint
x = torch.randn(4, 8, requires_grad=True)
out = checkpoint_sequential(model, 2, x)
out.sum().backward()
g1 = [p.grad.clone() for p in model.parameters()]
model.zero_grad(); x.grad = None
model(x).sum().backward()
assert all((a - p.grad).abs().max().item() < 1e-6 for a, p in zip(g1, model.parameters()))
out = checkpoint(model[0], x)
assert out.grad_fn.name() == "CheckpointFunctionBackward", out.grad_fn.name()

# CUDA graphs: a host read during capture is refused and the capture abandoned; a clean capture replays
# on fresh static inputs.
static = torch.ones(4, device="cuda")
broken = torch.cuda.CUDAGraph()
try:
    with torch.cuda.graph(broken):
        (static * 2).sum().item()
except RuntimeError as e:
    assert "capturing" in str(e), str(e)
else:
    raise AssertionError(".item() during a capture did not raise")
g = torch.cuda.CUDAGraph()
with torch.cuda.graph(g):
    doubled = static * 2
static.copy_(torch.full((4,), 3.0, device="cuda"))
g.replay()
torch.cuda.synchronize()
assert doubled.sum().item() == 24.0, doubled

# Dropout in a captured step draws a new mask at every replay; a replay right after manual_seed draws
# the mask the eager call drew after it.
drop = torch.nn.Dropout(0.5)
ones = torch.ones(256, device="cuda")
torch.manual_seed(3)
eager_mask = drop(ones)
g2 = torch.cuda.CUDAGraph()
with torch.cuda.graph(g2):
    masked = drop(ones)
torch.manual_seed(3)
g2.replay()
torch.cuda.synchronize()
assert torch.equal(masked, eager_mask), (masked, eager_mask)
g2.replay()
torch.cuda.synchronize()
assert not torch.equal(masked, eager_mask)
assert ((masked == 0).sum() + (masked == 2).sum()).item() == 256
print("ok")
