import os
import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader, TensorDataset
from torch.utils.data.distributed import DistributedSampler


def main():
    on_gpus = torch.cuda.is_available()
    dist.init_process_group("nccl" if on_gpus else "gloo")  # torchrun's env
    rank = int(os.environ["LOCAL_RANK"])      # this process's GPU here
    if on_gpus:
        torch.cuda.set_device(rank)
        device = torch.device("cuda", rank)
    else:
        device = torch.device("cpu")

    torch.manual_seed(0)                      # the same data in every process
    X, y = torch.randn(256, 16), torch.randn(256, 1)
    dataset = TensorDataset(X, y)
    sampler = DistributedSampler(dataset)     # each rank its own rows
    loader = DataLoader(dataset, batch_size=32, sampler=sampler)  # per rank
    model = nn.Sequential(nn.Linear(16, 64), nn.ReLU(),
                          nn.Linear(64, 1)).to(device)
    # DDP copies rank 0's weights to every rank; device_ids: GPUs only
    model = DDP(model, device_ids=[rank] if on_gpus else None)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)

    for epoch in range(5):
        sampler.set_epoch(epoch)              # a new shuffle, alike on all ranks
        for xb, yb in loader:
            xb, yb = xb.to(device), yb.to(device)
            loss = F.mse_loss(model(xb), yb)
            optimizer.zero_grad()
            loss.backward()                   # DDP averages every gradient
            optimizer.step()                  # so every replica takes one step
        if dist.get_rank() == 0:
            print(f"epoch {epoch}: loss {loss.item():.4f} (rank 0's last batch)")
    # the replicas stayed identical: every rank prints the same sum
    total = sum(p.detach().sum().item() for p in model.parameters())
    print(f"rank {dist.get_rank()} of {dist.get_world_size()}: "
          f"sum of the weights {total:.6f}")
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
