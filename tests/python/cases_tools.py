"""Parity cases: mixed precision, the profiler's API, the backends' switches, torch.save/load, and
DataParallel on a machine without GPUs (each as PyTorch behaves on a CPU-only machine)."""
import io
import warnings

OPTIONS = {}


def _model(torch):
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.ReLU(), torch.nn.Linear(8, 2))
    with torch.no_grad():
        for i, p in enumerate(model.parameters()):
            ramp = (torch.arange(p.numel(), dtype=torch.float32).reshape(tuple(p.shape)) * 0.37 + i) * 7.0
            p.copy_(ramp - ramp.long().float() - 0.5)
    return model


def case_cpu_autocast_bfloat16(torch):
    model = _model(torch)
    x = torch.ones(3, 4)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        out = model(x)
        loss = torch.nn.functional.mse_loss(out, torch.zeros(3, 2, dtype=torch.bfloat16))
    return [out.dtype, loss.dtype, model(x).dtype]


def case_grad_scaler_without_cuda(torch):
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        scaler = torch.cuda.amp.GradScaler()
    model = _model(torch)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    loss = model(torch.ones(2, 4)).sum()
    scaled = scaler.scale(loss)
    scaled.backward()
    scaler.step(opt)
    scaler.update()
    return [scaler.is_enabled(), scaler.get_scale(), float(scaled), [str(w.message) for w in caught], model[0].bias]


def case_cuda_autocast_without_cuda(torch):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        with torch.cuda.amp.autocast():
            out = torch.ones(2, 2) @ torch.ones(2, 2)
    return out.dtype


def case_backends(torch):
    before = torch.backends.cudnn.benchmark
    torch.backends.cudnn.benchmark = True
    torch.backends.cudnn.deterministic = False
    after = [torch.backends.cudnn.benchmark, torch.backends.cudnn.deterministic, torch.backends.cuda.matmul.allow_tf32]
    torch.backends.cudnn.benchmark = before
    return after


def case_profiler_table_names_ops(torch):
    model = _model(torch)
    x = torch.ones(16, 4)
    with torch.profiler.profile() as prof:
        model(x).sum().backward()
    table = prof.key_averages().table(sort_by="cpu_time_total", row_limit=50)
    return ["aten::linear" in table, "Self CPU" in table]


def case_profiler_key_averages_are_rows(torch):
    # key_averages() is a list of averages, one per op name, as PyTorch's EventList: key, count, times.
    x = torch.ones(8, 8)
    opt = torch.optim.SGD([torch.nn.Parameter(torch.ones(3))], lr=0.1)
    with torch.profiler.profile() as prof:
        for _ in range(3):
            torch.relu(x)
            opt.step()
    rows = {e.key: e for e in prof.key_averages()}
    relu, step = rows["aten::relu"], rows["Optimizer.step#SGD.step"]
    first = prof.key_averages()[0]
    return [relu.count, step.count, relu.cpu_time_total >= relu.self_cpu_time_total >= 0,
            abs(relu.cpu_time - relu.cpu_time_total / 3) < 1e-6, len(prof.key_averages()) == len(list(prof.key_averages())),
            isinstance(first.key, str)]


def case_save_load_state_dict(torch):
    model = _model(torch)
    buffer = io.BytesIO()
    torch.save({"model": model.state_dict(), "epoch": 3}, buffer)
    buffer.seek(0)
    loaded = torch.load(buffer, map_location="cpu")
    fresh = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.ReLU(), torch.nn.Linear(8, 2))
    fresh.load_state_dict(loaded["model"])
    x = torch.ones(1, 4)
    return [loaded["epoch"], sorted(loaded["model"].keys()), fresh(x), model(x)]


def case_data_parallel_without_gpus(torch):
    model = torch.nn.DataParallel(_model(torch))
    return [model(torch.ones(2, 4)), list(model.state_dict().keys()), repr(model)]


def case_memory_calls_without_gpu(torch):
    return [torch.cuda.memory_allocated(), torch.cuda.memory_reserved(), torch.cuda.max_memory_allocated(), dict(torch.cuda.memory_stats())]


def case_missing_names(torch):
    """GPU Lab's torch names what it lacks of PyTorch (NotImplementedError, also an AttributeError so
    that hasattr is False); a name PyTorch has not either is a plain AttributeError."""
    out = []
    for get in (lambda: torch.no_such_function, lambda: torch.ones(1).no_such_method, lambda: torch.nn.NoSuchLayer):
        try:
            get()
            out.append("found")
        except AttributeError as e:
            out.append(type(e).__name__)
    return [out, hasattr(torch, "no_such_function")]


def case_nccl_needs_cuda_tensors(torch):
    # torch.cuda.nccl, the data-parallel lab's all-reduce: a CPU tensor is not NCCL's (the emulated GPU never is).
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # PyTorch's CPU build warns that it has no NCCL
        return [torch.cuda.nccl.is_available([torch.zeros(2)]), torch.cuda.nccl.SUM]
