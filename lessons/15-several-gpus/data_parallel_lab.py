"""The several-GPUs lesson's lab: one training run on one device, with DistributedDataParallel's scheme
and with DataParallel's.

    # DistributedDataParallel: one process per GPU, each with a full replica of the model
    dist.init_process_group("nccl"); rank = int(os.environ["LOCAL_RANK"]); torch.cuda.set_device(rank)
    model = DDP(model.to(rank), device_ids=[rank])          # broadcasts rank 0's weights to all
    for x, y in loader:                                     # a DistributedSampler: each rank its share
        loss = F.mse_loss(model(x.to(rank)), y.to(rank))
        opt.zero_grad(); loss.backward()                    # DDP all-reduces (averages) every gradient
        opt.step()                                          # every replica takes the same step

    # DataParallel: one process; the model lives on cuda:0
    model = nn.DataParallel(model).to("cuda")               # every forward: copy the weights to each GPU,
    loss = F.mse_loss(model(x), y.to("cuda:0"))             # scatter x, run, gather the outputs on cuda:0

What DDP's hook does, spelled out (the lab's `all_reduce` knob turns it off):
    for p in model.parameters(): dist.all_reduce(p.grad, op=dist.ReduceOp.AVG)

With two or more GPUs and NCCL the replicas are those GPUs and the all-reduce is NCCL's
(torch.cuda.nccl.all_reduce). Otherwise the replicas run one after another on one device -- the same
arithmetic, labelled as a simulation: the averaging is a sum on that device, and the memory each
replica would hold is measured by the allocator as that replica's share.
"""
import torch
import torch.nn.functional as F

from lab_helpers import MLP, allocated, announce, parse_widths, regression_set, resolve_device

FEATURES = 32


def forward(params, x):
    """The MLP as its parameters [W1, b1, W2, b2, ...]: Linear, ReLU, ..., Linear (a replica is then
    just another list of tensors)."""
    for i in range(0, len(params), 2):
        x = F.linear(x, params[i], params[i + 1])
        if i + 2 < len(params):
            x = F.relu(x)
    return x


def replica_of(params, device):
    """Leaf copies on `device`: a replica's own weights, as DDP's constructor broadcasts them."""
    with torch.no_grad():
        return [p.to(device).clone().requires_grad_(True) for p in params]


def largest_difference(a, b):
    with torch.no_grad():
        return max((x.cpu() - y.cpu()).abs().max().item() for x, y in zip(a, b))


def sgd(params, lr):
    return torch.optim.SGD(params, lr=lr, momentum=0.9)


def batch_of(setup, step):
    x, y = setup["inputs"], setup["targets"]
    start = step % (x.shape[0] // setup["batch"]) * setup["batch"]
    return x[start:start + setup["batch"]], y[start:start + setup["batch"]]


def run_one_device(setup, device):
    """One device, the whole batch: the reference the data-parallel runs must reproduce."""
    p = replica_of(setup["init"], device)
    opt, losses = sgd(p, setup["lr"]), []
    for step in range(setup["steps"]):
        x, y = (t.to(device) for t in batch_of(setup, step))
        opt.zero_grad()
        loss = F.mse_loss(forward(p, x), y)
        loss.backward()
        opt.step()
        losses.append(loss.item())
    return dict(losses=losses, weights=[p])


def average_gradients(replicas, simulated):
    """DDP's all-reduce: every gradient averaged across the replicas -- NCCL's on GPUs, else the same
    mean computed on the one device the replicas take turns on."""
    n = len(replicas)
    for j in range(len(replicas[0])):
        grads = [p[j].grad for p in replicas]
        if not simulated:
            torch.cuda.nccl.all_reduce(grads)  # a sum on every GPU at once
            for g in grads:
                g.div_(n)
            continue
        with torch.no_grad():
            mean = sum(grads[1:], grads[0].clone()) / n
            for g in grads:
                g.copy_(mean)


def run_ddp(setup, devices, simulated, all_reduce):
    """A replica per device, each on its rows of the batch; the gradients averaged unless all_reduce is
    off; every replica steps its own weights. What each replica holds when its forward pass ends:
    its weights and momentum, its rows and the activations kept for backward."""
    n, shard = len(devices), setup["batch"] // len(devices)
    baseline = [allocated(d) for d in devices]  # on GPUs: what each held before (earlier runs' weights)
    replicas, state = [], []
    for d in devices:
        before = allocated(d)
        replicas.append(replica_of(setup["init"], d))
        state.append(allocated(d) - before)  # simulated: its weights, then its momentum
    opts = [sgd(p, setup["lr"]) for p in replicas]
    r = dict(losses=[], drift=[], replica_bytes=[0.0] * n)
    for step in range(setup["steps"]):
        x, y = batch_of(setup, step)
        losses, forward_bytes = [], []
        for i, (d, p, opt) in enumerate(zip(devices, replicas, opts)):
            loss, held = ddp_replica_forward(p, opt, x[i * shard:(i + 1) * shard], y[i * shard:(i + 1) * shard], d, step + 1 == setup["steps"])
            losses.append(loss)
            forward_bytes.append(held)
        if step + 1 == setup["steps"]:
            r["replica_bytes"] = [state[i] + forward_bytes[i] if simulated else allocated(d) - baseline[i] for i, d in enumerate(devices)]
        for loss in losses:
            loss.backward()
        if all_reduce and n > 1:
            average_gradients(replicas, simulated)
        for i, (d, opt) in enumerate(zip(devices, opts)):
            before = allocated(d) if step == 0 else 0
            opt.step()
            if step == 0:
                state[i] += allocated(d) - before  # the momentum buffers, made now
        r["losses"].append(sum(loss.item() for loss in losses) / n)  # equal shares: the whole batch's mean
        r["drift"].append(max((largest_difference(replicas[0], p) for p in replicas[1:]), default=0.0))
    r["weights"] = replicas
    return r


def dp_replica_forward(master, rows, i, d, simulated, measure):
    """Replica i's forward: the master's weights copied to its device (the first uses them as they are),
    its rows scattered to it; its output, and what it holds -- this step's copy of the weights and the
    activations kept for backward (the allocator's), and the rows scattered to it (the first keeps them
    in the whole batch, counted apart). A function of its own, so that nothing of the replica before it
    is let go inside what this one's count measures."""
    before = allocated(d) if measure else 0
    weights = master if i == 0 else [w.clone() if simulated else w.to(d) for w in master]  # replicate
    if i > 0 and not simulated:
        rows = rows.to(d)  # scatter
    out = forward(weights, rows)
    return out, allocated(d) - before + (rows.nbytes if i > 0 else 0) if measure else 0


def ddp_replica_forward(p, opt, x, y, d, measure):
    """A DDP replica's forward on its own rows (a DistributedSampler's share): its loss, and what its rows
    and the activations its forward keeps for backward take (on one device the rows may be views of the
    batch: counted by their size)."""
    opt.zero_grad()
    xi, yi = x.to(d), y.to(d)
    before = allocated(d) if measure else 0
    loss = F.mse_loss(forward(p, xi), yi)
    return loss, xi.nbytes + yi.nbytes + allocated(d) - before if measure else 0


def run_dp(setup, devices, simulated):
    """DataParallel's scheme: the master weights on the first device; every step they are copied to
    each other device (differentiably, so the gradients flow back to the master), the batch's rows
    scattered, each replica's output gathered on the first device, where the loss, backward's sum and
    the optimizer step happen."""
    n, shard, first = len(devices), setup["batch"] // len(devices), devices[0]
    baseline = [allocated(d) for d in devices]
    before = allocated(first)
    master = replica_of(setup["init"], first)
    master_bytes = allocated(first) - before  # then its momentum too
    opt, r = sgd(master, setup["lr"]), dict(losses=[], replica_bytes=[0.0] * n)
    for step in range(setup["steps"]):
        opt.zero_grad()
        x, y = (t.to(first) for t in batch_of(setup, step))  # the whole batch on the first device
        gathered, forward_bytes = [], []
        for i, d in enumerate(devices):
            out, held = dp_replica_forward(master, x[i * shard:(i + 1) * shard], i, d, simulated, step + 1 == setup["steps"])
            gathered.append(out.to(first))  # gather on the first device
            forward_bytes.append(held)
        gathered_bytes = sum(g.nbytes for g in gathered[1:])  # the first's own output is counted with its forward
        if step + 1 == setup["steps"]:
            r["replica_bytes"] = [forward_bytes[i] if simulated else allocated(d) - baseline[i] for i, d in enumerate(devices)]
            if simulated:  # the master's weights and momentum, the whole batch and the gathered outputs: all on the first
                r["replica_bytes"][0] += master_bytes + x.nbytes + y.nbytes + gathered_bytes
        loss = sum(F.mse_loss(g, y[i * shard:(i + 1) * shard], reduction="sum") for i, g in enumerate(gathered)) / setup["batch"]
        loss.backward()  # the replicas' gradients are summed into the master's
        before = allocated(first) if step == 0 else 0
        opt.step()
        if step == 0:
            master_bytes += allocated(first) - before  # the momentum buffers
        r["losses"].append(loss.item())
    r["weights"] = [master]
    return r


def place_replicas(requested, batch, device):
    """Real GPUs when there are two or more and NCCL can run between them; else a simulation on `device`."""
    real = device.type == "cuda" and not torch.cuda.is_emulated(device)
    if real and torch.cuda.nccl.is_available([]):
        count = min(requested, torch.cuda.device_count())
        while batch % count:
            count -= 1
        if count < requested:
            print(f"This machine has {torch.cuda.device_count()} GPUs: {count} replicas, one per GPU (a number that splits the "
                  f"batch of {batch}).")
        return [torch.device("cuda", i) for i in range(count)], False
    return [device] * requested, True


def declare_views(n, all_reduce, simulated):
    mark = " (simulated)" if simulated else ""
    lab.view("loss", f"Training loss: one device, DDP and DataParallel{mark}", x=[("step", "")], y=("loss (MSE)", "", True),
             series=[("one", "one device, the whole batch"), ("ddp", f"DDP, {n} replicas"), ("dp", f"DataParallel, {n} replicas", "dashed")],
             note=("With the gradients all-reduced, DDP's loss is the one device's: the average of the replicas' gradients is the "
                   "whole batch's gradient." if all_reduce else
                   "Without the all-reduce (this run) each DDP replica steps on its own rows' gradients, so DDP's loss leaves the one "
                   "device's.") + " DataParallel computes the whole batch's loss on the first device, so its loss is the one device's.")
    lab.view("drift", f"How far the DDP replicas drift apart{mark}", x=[("step", "")], y="weight difference", y_from_zero=True,
             series=[("drift", f"{'with' if all_reduce else 'without'} all_reduce")],
             note="Each replica sees other rows. Without the all-reduce each follows its own gradients and the copies of the model part "
                  "ways from the first step; with it every replica takes the same step and they stay identical. Plotted: the largest "
                  "difference between any replica's weights and the first's." +
                  (" This run all-reduces, so the line stays at 0: turn all_reduce off to see them part." if all_reduce else
                   " This run does not all-reduce: the line climbs from the first step."))
    lab.view("memory", f"Memory per replica when the forward pass ends{mark}", kind="bars", y=("memory", "bytes"), y_from_zero=True,
             series=[("ddp", "DDP"), ("dp", "DataParallel")],
             note=("Simulated: what the allocator gave each replica's tensors. " if simulated else "memory_allocated() of each GPU. ") +
                  "DDP: every replica holds the whole model's weights and momentum, its rows and their activations -- the same on each "
                  "(the gradients were freed by zero_grad and come back in backward). DataParallel: the first device holds the master "
                  "weights and their momentum, the whole batch and every replica's gathered output; the others only this step's copy "
                  "of the weights, their rows and their activations.")
    lab.view("replicas", f"The replicas{mark}", kind="table",
             columns=["replica", "device", "rows of the batch", ("DDP memory", "bytes"), ("DataParallel memory", "bytes")])


def report(one, ddp, dp, devices, simulated, all_reduce, setup):
    n = len(devices)
    for i, d in enumerate(devices):
        lab.bar("memory", "ddp", f"replica {i}", ddp["replica_bytes"][i])
        lab.bar("memory", "dp", f"replica {i}", dp["replica_bytes"][i])
        lab.row("replicas", f"replica {i}", str(d) + (" (taking turns)" if simulated else ""), setup["batch"] // n,
                int(ddp["replica_bytes"][i]), int(dp["replica_bytes"][i]))
    drift = ddp["drift"][-1]
    from_one = largest_difference(ddp["weights"][0], one["weights"][0])
    others = sum(dp["replica_bytes"][1:]) / (n - 1) if n > 1 else 0
    ddp_ratio = max(ddp["replica_bytes"]) / min(ddp["replica_bytes"])
    lab.measurement("replicas", n)
    lab.measurement("simulated", int(simulated))
    lab.measurement("largest weight difference between DDP replicas (yours)", drift)
    lab.measurement("largest weight difference between DDP replica 0 and one device", from_one)
    lab.measurement("largest loss difference between DataParallel and one device", max(abs(a - b) for a, b in zip(dp["losses"], one["losses"])))
    if n > 1:
        lab.measurement("DataParallel memory on replica 0 over the others", dp["replica_bytes"][0] / others, "x")
    lab.measurement("DDP memory, largest replica over smallest", ddp_ratio, "x")
    lab.measurement("final loss, one device", one["losses"][-1])
    lab.measurement("final loss, DDP (yours)", ddp["losses"][-1])
    summary = ("One replica: DDP and DataParallel are one device with the whole batch; choose 2 or more replicas. " if n == 1 else
               f"With the all-reduce the {n} replicas stayed identical (largest difference {drift:.2g}) and match one device trained "
               f"on the whole batch to {from_one:.2g}. " if all_reduce else
               f"Without the all-reduce the {n} replicas drifted apart: after {setup['steps']} steps their weights differ by up to "
               f"{drift:.3g} -- {n} different models. Turn all_reduce on. ")
    if n > 1:
        summary += (f"DataParallel's first replica held {dp['replica_bytes'][0] / others:.2f}x the memory of each other one; DDP's "
                    f"replicas {ddp_ratio:.2f}x between the largest and the smallest.")
    print(summary)


def run(replicas=4, all_reduce=False, device="auto", batch=256, steps=60, hidden="128,128", lr=0.05, seed=0):
    if batch % replicas:
        raise ValueError(f"batch = {batch} does not split evenly over {replicas} replicas: choose a batch that is a multiple of {replicas}")
    device = resolve_device(device)
    devices, simulated = place_replicas(replicas, batch, device)
    announce(devices[0])
    if simulated:
        why = (f"device is {device}, not the GPUs" if torch.cuda.nccl.is_available([]) else
               f"this machine has no two GPUs with NCCL between them: {torch.cuda.nccl.status()}")
        lab.message(f"Simulation ({why}): the {len(devices)} replicas take turns on {torch._C._device_label(device)}. The arithmetic is "
                    "DDP's and DataParallel's, the all-reduce an average computed on that one device, and each replica's memory what "
                    "the allocator gave that replica. What it cannot show is time: real replicas run at once.", level="warning")
    else:
        print(f"Replicas on {len(devices)} GPUs, gradients all-reduced by {torch.cuda.nccl.status()}.")
    data = regression_set(max(batch * 8, 2048) // batch * batch, seed, FEATURES)
    torch.manual_seed(seed)
    setup = dict(init=list(MLP(FEATURES, parse_widths(hidden), 1).parameters()), inputs=data.tensors[0], targets=data.tensors[1],
                 batch=batch, steps=steps, lr=lr)
    declare_views(len(devices), all_reduce, simulated)
    lab.progress(0, 3, "one device")
    one = run_one_device(setup, devices[0])
    for i, loss in enumerate(one["losses"]):
        lab.point("loss", "one", [i], loss)
    lab.progress(1, 3, "DDP")
    ddp = run_ddp(setup, devices, simulated, all_reduce)
    for i, (loss, drift) in enumerate(zip(ddp["losses"], ddp["drift"])):
        lab.point("loss", "ddp", [i], loss)
        lab.point("drift", "drift", [i], drift)
    lab.progress(2, 3, "DataParallel")
    dp = run_dp(setup, devices, simulated)
    for i, loss in enumerate(dp["losses"]):
        lab.point("loss", "dp", [i], loss)
    lab.progress(3, 3, "done")
    report(one, ddp, dp, devices, simulated, all_reduce, setup)
