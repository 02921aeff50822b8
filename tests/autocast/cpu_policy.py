#!/usr/bin/python3
# Prints the output dtype of each op the engine has under torch.autocast("cpu", dtype=torch.bfloat16),
# from the PyTorch installed here (Debian's python3-torch). tests/test_mixed_precision.cpp holds the
# result as its CPU rows; re-run this after a PyTorch upgrade and compare:
#   /usr/bin/python3 tests/autocast/cpu_policy.py
# The CUDA rows come from PyTorch's documented CUDA lists (torch.amp docs, "CUDA Ops that can autocast
# to float16" / "to float32"): a CPU-only PyTorch cannot run CUDA autocast.
import torch
import torch.nn.functional as F

x = torch.randn(4, 8)
w = torch.randn(8, 8)
t = torch.randint(0, 8, (4,))
h = x.bfloat16()
with torch.autocast("cpu", dtype=torch.bfloat16):
    rows = [
        ("matmul", "float32,float32", (x @ w).dtype),
        ("linear", "float32,float32", F.linear(x, w).dtype),
        ("softmax", "float32", F.softmax(x, 1).dtype),
        ("softmax", "bfloat16", F.softmax(h, 1).dtype),
        ("log_softmax", "bfloat16", F.log_softmax(h, 1).dtype),
        ("exp", "bfloat16", torch.exp(h).dtype),
        ("log", "bfloat16", torch.log(h.abs()).dtype),
        ("pow", "bfloat16", torch.pow(h, 2).dtype),
        ("sum", "bfloat16", h.sum().dtype),
        ("mse_loss", "bfloat16,bfloat16", F.mse_loss(h, h).dtype),
        ("l1_loss", "bfloat16,bfloat16", F.l1_loss(h, h).dtype),
        ("cross_entropy", "bfloat16", F.cross_entropy(h, t).dtype),
        ("nll_loss", "bfloat16", F.nll_loss(h, t).dtype),
        ("relu", "bfloat16", F.relu(h).dtype),
        ("add", "bfloat16,float32", (h + x).dtype),
        ("matmul", "float64,float64", (x.double() @ w.double()).dtype),
    ]
print("torch", torch.__version__)
for op, inputs, dtype in rows:
    print(f"{op:14s} {inputs:18s} -> {str(dtype).replace('torch.', '')}")
