"""The CUDA graphs lesson's lab: the seed lessons' regression step (16 -> 64 -> 1, Adam, batches of
64, the data already on the GPU), eager and as a CUDA graph, as PyTorch's CUDA graphs recipe writes it:

    optimizer = torch.optim.Adam(model.parameters(), lr=1e-3, capturable=True)
    static_x, static_y = x[0].clone(), y[0].clone()
    s = torch.cuda.Stream(); s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):                    # 1. warm up on a side stream: the optimizer
        for _ in range(3):                        #    makes its state here, not in the capture
            step(static_x, static_y)
    torch.cuda.current_stream().wait_stream(s)
    g = torch.cuda.CUDAGraph()
    optimizer.zero_grad(set_to_none=True)
    with torch.cuda.graph(g):                     # 2. capture: nothing runs, the kernels are recorded
        static_loss = F.mse_loss(model(static_x), static_y)
        static_loss.backward()
        optimizer.step()
    for i in range(steps):                        # 3. replay: the batch into the static inputs,
        static_x.copy_(x[i % 8]); static_y.copy_(y[i % 8])
        g.replay()                                #    then the whole step in one launch

A step this small is launch-bound on a GPU: each of its few dozen kernels runs for a few
microseconds, about as long as the host takes to launch it. A replay hands the GPU the whole step at
once. On a real GPU the lab times both loops in interleaved runs; on the emulated GPU capture and
replay work the same way, but nothing is timed: it is your CPU.
"""
import time

import torch
import torch.nn.functional as F

from lab_helpers import MLP, announce, median, parse_widths, regression_set, resolve_device, synchronize

BATCHES = 8
WARMUP_STEPS = 3


def make_batches(batch_size, device, seed):
    data = regression_set(BATCHES * batch_size, seed)
    x, y = data.tensors
    return [(x[i * batch_size:(i + 1) * batch_size].to(device), y[i * batch_size:(i + 1) * batch_size].to(device)) for i in range(BATCHES)]


def make_copy(hidden, seed, device, capturable):
    """The eager loop and the graph train one copy each, from the same seed: the same weights."""
    torch.manual_seed(seed)
    model = MLP(16, hidden, 1).to(device)
    return model, torch.optim.Adam(model.parameters(), lr=1e-3, capturable=capturable)


def eager_step(model, optimizer, x, y):
    """Every op launches its own kernel."""
    loss = F.mse_loss(model(x), y)
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
    return loss


def capture_the_step(model, optimizer, first_batch, read_loss_inside):
    """Warm-up on a side stream, then the whole step captured once; the graph and its static tensors."""
    static_x, static_y = (t.clone() for t in first_batch)
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for _ in range(WARMUP_STEPS):
            eager_step(model, optimizer, static_x, static_y)
    torch.cuda.current_stream().wait_stream(side)
    g = torch.cuda.CUDAGraph()
    optimizer.zero_grad(set_to_none=True)
    with torch.cuda.graph(g):
        static_loss = F.mse_loss(model(static_x), static_y)
        if read_loss_inside:
            print(f"loss.item() = {static_loss.item()}")  # the mistake: the host waits on a capturing stream
        static_loss.backward()
        optimizer.step()
    return g, static_x, static_y, static_loss


def timed_run(steps, device, step):
    """One run of a loop: the host's time to queue its steps, the time until the device had run them,
    and the last step's loss (read after the clock stopped)."""
    synchronize(device)
    start = time.perf_counter()
    for i in range(steps):
        loss = step(i % BATCHES)
    queued = time.perf_counter() - start
    synchronize(device)
    return queued, time.perf_counter() - start, loss.item()


def verdict(eager, graph):
    """What the runs' spreads allow saying: faster only when every run of one beat every run of the other."""
    spreads = (f" (eager {min(eager):.0f} to {max(eager):.0f} steps/s, graph {min(graph):.0f} to {max(graph):.0f} steps/s)")
    if min(graph) > max(eager):
        return f"The replayed graph is faster in every run: {median(graph) / median(eager):.2f}x the eager steps/s (medians){spreads}."
    if min(eager) > max(graph):
        return f"The eager steps are faster in every run{spreads}: this step is not launch-bound here."
    return f"No clear difference here: the runs' spreads overlap{spreads}."


def declare_views(real):
    columns = ["run", "eager loss", "graph loss"]
    if real:
        columns += [("eager", "steps/s"), ("graph", "steps/s"), ("eager: host time to queue a step", "us"),
                    ("graph: host time to queue a step", "us")]
    lab.view("runs", "Timed runs" if real else "Runs (the emulated GPU is not timed)", kind="table", columns=columns)
    if real:
        lab.view("speed", "Steps per second (median of the runs)", kind="bars", y=("speed", "steps/s"), y_from_zero=True,
                 series=[("median", "median steps/s")])


def time_both(eager, graphed, batches, device, steps, repeats, real):
    """The runs, interleaved so that drift in the machine's speed hits both loops alike."""
    declare_views(real)
    rates, queues, loss_difference = {"eager": [], "graph": []}, {"eager": [], "graph": []}, 0.0
    for r in range(repeats):
        lab.progress(r, repeats, f"run {r + 1} of {repeats}")
        runs = {"eager": timed_run(steps, device, lambda i: eager_step(*eager, *batches[i]))}
        if graphed:
            g, static_x, static_y, static_loss = graphed

            def replay(i):
                static_x.copy_(batches[i][0])
                static_y.copy_(batches[i][1])
                g.replay()
                return static_loss

            runs["graph"] = timed_run(steps, device, replay)
        for name, (queued, total, _) in runs.items():
            rates[name].append(steps / total)
            queues[name].append(queued / steps * 1e6)
        if graphed:
            loss_difference = max(loss_difference, abs(runs["graph"][2] - runs["eager"][2]))
        row = [r + 1, runs["eager"][2], runs["graph"][2] if graphed else "-"]
        if real:
            row += [rates["eager"][-1], rates["graph"][-1] if graphed else "-", queues["eager"][-1], queues["graph"][-1] if graphed else "-"]
        lab.row("runs", *row)
    lab.progress(1, 1)
    return rates, queues, loss_difference


def report(rates, queues, loss_difference, graphed, real):
    """What the runs showed: the same losses, and on a real GPU the speeds with their spread."""
    if graphed:
        lab.measurement("largest loss difference, graph vs eager", loss_difference)
        print("The replayed step computes what the eager step computes: the same losses, run after run." if loss_difference <= 1e-6
              else f"The losses differ by up to {loss_difference:g} between the loops.")
    if not real:
        print("No timing is drawn from the emulated GPU: its kernels are your CPU's. On a GPU the lab times both loops; the "
              "reference run (Compare with a real GPU) shows one.")
        return
    lab.bar("speed", "median", "eager", median(rates["eager"]))
    lab.measurement("eager steps/s (median)", median(rates["eager"]), "steps/s")
    lab.measurement("host time to queue one eager step (median)", median(queues["eager"]), "us")
    if graphed:
        lab.bar("speed", "median", "CUDA graph", median(rates["graph"]))
        lab.measurement("graph steps/s (median)", median(rates["graph"]), "steps/s")
        lab.measurement("host time to queue one replay (median)", median(queues["graph"]), "us")
        lab.measurement("speed-up of the graph (medians)", median(rates["graph"]) / median(rates["eager"]), "x")
        print(verdict(rates["eager"], rates["graph"]))


def run(device="auto", capture=False, read_loss_inside=False, hidden="64", batch_size=64, steps=200, repeats=5, seed=0):
    device = resolve_device(device, emulated=True)  # auto: the GPU, else the emulated GPU, else the CPU (nothing to capture)
    announce(device)
    if device.type != "cuda":
        lab.message("CUDA graphs capture a GPU's work, and this run is on the CPU: choose cuda." if torch.cuda.is_available() else
                    "CUDA graphs capture a GPU's work, and there is no GPU here and the emulated GPU is off: turn the emulated "
                    "GPU on (Settings) to capture on it.", level="warning")
        lab.record("done", device=str(device), stopped=False)
        return
    real = not torch.cuda.is_emulated(device)
    repeats = repeats if real else 1
    hidden = parse_widths(hidden)
    batches = make_batches(batch_size, device, seed)
    eager = make_copy(hidden, seed, device, capturable=False)
    for _ in range(WARMUP_STEPS):  # the warm-up the graph's copy gets too: three steps on the first batch
        eager_step(*eager, *batches[0])
    graphed = None
    try:
        if capture:
            model, optimizer = make_copy(hidden, seed, device, capturable=True)
            try:
                graphed = capture_the_step(model, optimizer, batches[0], read_loss_inside)
            except RuntimeError as e:
                return explain_capture_error(e, device)
            # GPU Lab's CUDAGraph counts its nodes (PyTorch's does not say): what one replay launches.
            lab.measurement("kernels and copies per replay", graphed[0].num_nodes())
            print(f"Captured: one replay launches the whole step, {graphed[0].num_nodes()} kernels and copies that the eager "
                  "step launches one by one.")
        rates, queues, loss_difference = time_both(eager, graphed, batches, device, steps, repeats, real)
    except KeyboardInterrupt:  # Stop: no half-measured run is reported
        lab.record("done", device=str(device), stopped=True)
        return
    report(rates, queues, loss_difference, graphed, real)
    lab.record("done", device=str(device), stopped=False)


def explain_capture_error(error, device):
    lab.message(str(error), level="engine_error")
    print("Inside torch.cuda.graph nothing runs: the kernels are only recorded, so there is no loss to read yet, and a call that "
          "waits for the device -- .item(), .cpu(), print(tensor), torch.cuda.synchronize() -- is refused. Read the static loss "
          "after g.replay() instead.")
    lab.record("done", device=str(device), stopped=False, error=str(error))
