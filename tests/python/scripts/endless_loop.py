"""A runaway cell: an endless loop of engine work, for the Ctrl+C test (cli_interrupt.py)."""
import torch

print("started", flush=True)
x = torch.ones(128, 128)
while True:
    x = (x @ x) * (1 / 128)
