"""gpulab-cli run --emulated-gpu: cuda:0 is GPU Lab's emulated GPU and behaves as a one-GPU machine's
(the same-device error, an invalid ordinal, out-of-memory at its budget, the allocator's numbers).
Prints "ok" at the end; any failed check raises (exit status 1)."""
import torch

assert torch.cuda.is_available()
assert torch.cuda.device_count() == 1
name = torch.cuda.get_device_name(0)
assert "emulated GPU" in name, name
print("device:", name)

cpu_tensor = torch.ones(3)
gpu_tensor = torch.ones(3, device="cuda")
assert gpu_tensor.is_cuda and str(gpu_tensor.device) == "cuda:0"
try:
    cpu_tensor + gpu_tensor
except RuntimeError as e:
    assert "Expected all tensors to be on the same device" in str(e), str(e)
    print("same-device rule:", str(e).split("!")[0] + "!")
else:
    raise AssertionError("cpu + cuda did not raise")
print("0-dim cpu scalar joins:", (torch.tensor(2.0) * gpu_tensor).device)

try:
    torch.zeros(1, device="cuda:1")
except RuntimeError as e:
    assert "invalid device ordinal" in str(e), str(e)
    print("cuda:1:", str(e).split(".")[0])
else:
    raise AssertionError("cuda:1 exists on a one-GPU machine")

torch.cuda.empty_cache()
base = torch.cuda.memory_allocated()
x = torch.empty(1024, 1024, device="cuda")  # 4 MiB
assert torch.cuda.memory_allocated() - base == 4 * 1024 * 1024, torch.cuda.memory_allocated()
assert torch.cuda.memory_reserved() >= torch.cuda.memory_allocated()
del x
assert torch.cuda.memory_allocated() == base
reserved = torch.cuda.memory_reserved()
torch.cuda.empty_cache()
assert torch.cuda.memory_reserved() < reserved or reserved == 0
free, total = torch.cuda.mem_get_info()
assert 0 < free <= total

try:
    torch.empty(total // 4 + 1024, 4, device="cuda")  # more than the whole device
except torch.cuda.OutOfMemoryError as e:
    assert isinstance(e, RuntimeError)
    print("out of memory:", str(e).split(".")[0])
else:
    raise AssertionError("no out-of-memory error above the device's memory")
# Still usable after the error.
y = torch.ones(8, device="cuda") * 2
torch.cuda.synchronize()
assert y.sum().item() == 16.0

# A GradScaler over an optimizer with two parameter groups: an inf in one group skips both; a clean
# step steps both; the moments it kept come back through state_dict.
model = torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.ReLU(), torch.nn.Linear(4, 1)).cuda()
opt = torch.optim.Adam([{"params": model[0].parameters()}, {"params": model[2].parameters(), "lr": 1e-2}], lr=1e-3)
scaler = torch.cuda.amp.GradScaler()
before = [p.detach().clone() for p in model.parameters()]
with torch.autocast("cuda", dtype=torch.float16):
    loss = model(torch.randn(8, 4, device="cuda")).float().mean()
scaler.scale(loss).backward()
model[2].bias.grad.fill_(float("inf"))
scaler.step(opt)
scaler.update()
assert all(torch.equal(p, b) for p, b in zip(model.parameters(), before)), "a group stepped past an inf"
assert scaler.get_scale() == 32768.0 and opt.state_dict()["state"] == {}
opt.zero_grad()
with torch.autocast("cuda", dtype=torch.float16):
    loss = model(torch.randn(8, 4, device="cuda")).float().mean()
scaler.scale(loss).backward()
scaler.step(opt)
scaler.update()
assert all(not torch.equal(p, b) for p, b in zip(model.parameters(), before)), "a group did not step"
assert sorted(opt.state_dict()["state"]) == [0, 1, 2, 3] and opt.state[model[0].weight]["exp_avg"].is_cuda
print("grad scaler over two groups: ok")
print("ok")
