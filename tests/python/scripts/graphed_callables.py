"""torch.cuda.make_graphed_callables on the emulated GPU (gpulab-cli run --emulated-gpu): a graphed model
trains step for step like the same model run eagerly (losses and parameters), a graphed function's
gradients equal the eager ones, two callables graphed together, the module's other mode runs its own
forward, and the refusals PyTorch makes. Prints "ok" at the end; any failed check raises."""
import copy

import torch
import torch.nn as nn

assert torch.cuda.is_available()
device = "cuda"
torch.manual_seed(0)


def make_model():
    torch.manual_seed(1)
    return nn.Sequential(nn.Linear(16, 64), nn.ReLU(), nn.Linear(64, 1)).to(device)


batches = [(torch.randn(32, 16, device=device), torch.randn(32, 1, device=device)) for _ in range(6)]

# A graphed module against the same module eager, Adam stepping both eagerly.
eager, graphed = make_model(), make_model()
graphed = torch.cuda.make_graphed_callables(graphed, (torch.randn(32, 16, device=device),))
opt_eager = torch.optim.Adam(eager.parameters(), lr=0.01)
opt_graphed = torch.optim.Adam(graphed.parameters(), lr=0.01)
loss_fn = nn.MSELoss()
for x, y in batches:
    losses = []
    for model, opt in ((eager, opt_eager), (graphed, opt_graphed)):
        opt.zero_grad(set_to_none=True)
        out = model(x)
        loss = loss_fn(out, y)
        loss.backward()
        opt.step()
        losses.append(loss.item())
    assert abs(losses[0] - losses[1]) <= 1e-6 * max(1.0, abs(losses[0])), losses
for a, b in zip(eager.parameters(), graphed.parameters()):
    assert torch.allclose(a, b, atol=1e-6, rtol=1e-5), (a, b)
print("graphed module: losses and parameters equal the eager module's over", len(batches), "Adam steps")

# The output comes from the replayed graph's node; in eval mode the module's own forward runs.
out = graphed(batches[0][0])
assert type(out.grad_fn).__name__ != "NoneType" and out.requires_grad
graphed.eval()
with torch.no_grad():
    assert torch.allclose(graphed(batches[1][0]), eager(batches[1][0]), atol=1e-6)
graphed.train()

# A function of two tensors, one requiring grad: its gradient equals the eager one.
w = torch.randn(8, 8, device=device)


def f(a, b):
    return torch.tanh(a @ b).sum(dim=1)


a0 = torch.randn(4, 8, device=device, requires_grad=True)
g = torch.cuda.make_graphed_callables(f, (a0, w))
for _ in range(3):
    a = torch.randn(4, 8, device=device, requires_grad=True)
    a_eager = a.detach().clone().requires_grad_()
    g(a, w).pow(2).sum().backward()
    f(a_eager, w).pow(2).sum().backward()
    assert torch.allclose(a.grad, a_eager.grad, atol=1e-6), (a.grad, a_eager.grad)
print("graphed function: input gradients equal the eager ones")

# Two callables graphed together, run in order in each step.
first = nn.Linear(16, 32).to(device)
second = nn.Sequential(nn.ReLU(), nn.Linear(32, 1)).to(device)
first_eager, second_eager = copy.deepcopy(first), copy.deepcopy(second)
x0 = torch.randn(32, 16, device=device)
h0 = torch.randn(32, 32, device=device, requires_grad=True)
first, second = torch.cuda.make_graphed_callables((first, second), ((x0,), (h0,)))
x, y = batches[2]
loss_fn(second(first(x)), y).backward()
loss_fn(second_eager(first_eager(x)), y).backward()
for a, b in zip(list(first.parameters()) + list(second.parameters()),
                list(first_eager.parameters()) + list(second_eager.parameters())):
    assert torch.allclose(a.grad, b.grad, atol=1e-6), (a.grad, b.grad)
print("two callables graphed together: gradients equal the eager ones")

# A second backward without zero_grad adds to .grad, as eagerly: each replay rewrites the one static
# gradient, so .grad must hold a sum of copies, not the static tensor itself.
x, y = batches[3]
loss_fn(second(first(x)), y).backward()
loss_fn(second_eager(first_eager(x)), y).backward()
for a, b in zip(list(first.parameters()) + list(second.parameters()),
                list(first_eager.parameters()) + list(second_eager.parameters())):
    assert torch.allclose(a.grad, b.grad, atol=1e-6), (a.grad, b.grad)
a1 = torch.randn(4, 8, device=device, requires_grad=True)
a1_eager = a1.detach().clone().requires_grad_()
for _ in range(2):
    g(a1, w).sum().backward()
    f(a1_eager, w).sum().backward()
assert torch.allclose(a1.grad, a1_eager.grad, atol=1e-6), (a1.grad, a1_eager.grad)
print("two backward passes without zero_grad: the gradients add up as eagerly")


def raises(kind, text, call):
    try:
        call()
    except kind as e:
        assert text in str(e), str(e)
        return
    raise AssertionError(f"expected {kind.__name__} ({text})")


raises(TypeError, "must contain only Tensors", lambda: torch.cuda.make_graphed_callables(f, (a0, 2.0)))
raises(RuntimeError, "on a CUDA device", lambda: torch.cuda.make_graphed_callables(f, (torch.randn(4, 8), torch.randn(8, 8))))
raises(TypeError, "captured with 2 argument(s), got 1", lambda: g(a0))
raises(NotImplementedError, "one tensor", lambda: torch.cuda.make_graphed_callables(lambda t: (t * 2, t * 3), (a0,)))
print("ok")
