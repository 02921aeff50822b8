"""Parity cases: nn.Module subclassed in Python, the layers, functional ops, losses, optimizers and
their printing. Weights are set from fixed values, so both sides compute the same numbers."""

OPTIONS = {
    "load_state_dict_missing": {"message": True},
    "load_state_dict_shape": {"message": True},
    # PyTorch 1.13 loads a moment of the wrong shape and fails at the next step, inside its kernel
    # ("The size of tensor a (3) must match ..."); GPU Lab refuses it when loading, naming it.
    "optimizer_load_wrong_shape": {"ours": ("error", "RuntimeError", "loaded state dict's exp_avg for parameter 0 has shape [2], but the parameter has shape [4, 3]")},
    # SGD's lr has a default, 1e-3, since PyTorch 2.2 (1.13 required it: ValueError "parameter group
    # didn't specify a value of required optimization parameter lr"); GPU Lab follows PyTorch 2.
    "sgd_without_lr": {"ours": ("value", ("list", (0.001, 0.001, ("list", (0.999, 1.999)))))},
}


def _fixed(torch, module):
    """Sets every parameter of `module` to fixed values (so both libraries start equal)."""
    with torch.no_grad():
        for i, p in enumerate(module.parameters()):
            n = p.numel()
            values = torch.arange(n, dtype=torch.float32).reshape(tuple(p.shape))
            p.copy_(_wave(torch, values, i))
    return module


def _wave(torch, values, i):
    # A deterministic spread of values in [-0.5, 0.5): the fractional part of a ramp, less a half.
    ramp = (values * 0.37 + i) * 7.0
    return ramp - ramp.long().float() - 0.5


def _mlp(torch):
    class Net(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.hidden = torch.nn.Linear(3, 4)
            self.act = torch.nn.ReLU()
            self.out = torch.nn.Linear(4, 2)

        def forward(self, x):
            return self.out(self.act(self.hidden(x)))

    torch.manual_seed(0)
    return Net()


def case_module_print(torch):
    model = _mlp(torch)
    seq = torch.nn.Sequential(torch.nn.Linear(2, 3, bias=False), torch.nn.GELU(), torch.nn.Dropout(0.25), torch.nn.Flatten(),
                              torch.nn.Sequential(torch.nn.Tanh(), torch.nn.Sigmoid()))
    conv = torch.nn.Sequential(torch.nn.Conv2d(1, 8, 3, padding=1), torch.nn.BatchNorm2d(8), torch.nn.MaxPool2d(2),
                               torch.nn.Conv2d(8, 4, (3, 5), stride=2, bias=False), torch.nn.BatchNorm1d(4))
    return [repr(model), repr(seq), repr(conv), repr(torch.nn.MSELoss()), repr(torch.nn.CrossEntropyLoss())]


def case_registration(torch):
    model = _mlp(torch)
    return [[n for n, _ in model.named_parameters()], [tuple(p.shape) for p in model.parameters()],
            [n for n, _ in model.named_children()], [n for n, _ in model.named_modules()], list(model.state_dict().keys()),
            model.training, model.eval().training, model.hidden.training, model.train().out.training]


def case_buffers(torch):
    bn = torch.nn.BatchNorm1d(3)
    return [list(bn.state_dict().keys()), [n for n, _ in bn.named_buffers()], bn.num_batches_tracked]


def case_parameter_print(torch):
    p = torch.nn.Parameter(torch.tensor([1.0, 2.0]))
    return [repr(p), p.requires_grad, isinstance(p, torch.Tensor), repr(torch.nn.Parameter(torch.ones(2), requires_grad=False))]


def case_forward_backward(torch):
    model = _fixed(torch, _mlp(torch))
    x = torch.tensor([[0.5, -1.0, 2.0], [1.0, 0.0, -0.5]])
    y = torch.tensor([[1.0, 0.0], [0.0, 1.0]])
    loss = torch.nn.functional.mse_loss(model(x), y)
    loss.backward()
    return [loss, model.hidden.weight.grad, model.out.bias.grad]


def case_losses(torch):
    logits = torch.tensor([[2.0, 0.5, -1.0], [0.1, 0.2, 0.3]])
    target = torch.tensor([0, 2])
    F = torch.nn.functional
    return [F.cross_entropy(logits, target), torch.nn.CrossEntropyLoss(reduction="sum")(logits, target),
            F.nll_loss(F.log_softmax(logits, dim=1), target), F.l1_loss(logits, torch.zeros(2, 3)),
            torch.nn.MSELoss(reduction="none")(logits, torch.ones(2, 3))]


def case_conv_pool(torch):
    conv = _fixed(torch, torch.nn.Conv2d(2, 3, 3, padding=1))
    x = (torch.arange(50.0).reshape(1, 2, 5, 5) / 10)
    y = conv(x)
    F = torch.nn.functional
    return [y, F.max_pool2d(y, 2), F.avg_pool2d(y, 2, stride=1), F.adaptive_avg_pool2d(y, 1)]


def case_batch_norm_train_eval(torch):
    bn = torch.nn.BatchNorm1d(2)
    x = torch.tensor([[1.0, 2.0], [3.0, 6.0], [5.0, 1.0]])
    train_out = bn(x)
    bn.eval()
    eval_out = bn(x)
    return [train_out, eval_out, bn.running_mean, bn.running_var, bn.num_batches_tracked]


def _train_steps(torch, model, opt, steps):
    x = torch.tensor([[0.5, -1.0, 2.0], [1.0, 0.0, -0.5]])
    y = torch.tensor([1, 0])
    losses = []
    for _ in range(steps):
        opt.zero_grad()
        loss = torch.nn.functional.cross_entropy(model(x), y)
        loss.backward()
        opt.step()
        losses.append(loss.item())
    return losses


def case_sgd_momentum(torch):
    model = _fixed(torch, _mlp(torch))
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9, weight_decay=0.01)
    x = torch.tensor([[0.5, -1.0, 2.0], [1.0, 0.0, -0.5]])
    y = torch.tensor([[1.0, 0.0], [0.0, 1.0]])
    losses = []
    for _ in range(5):
        opt.zero_grad()
        loss = torch.nn.functional.mse_loss(model(x), y)
        loss.backward()
        opt.step()
        losses.append(loss.item())
    return [losses, model.out.weight]


def case_adam_and_lr_change(torch):
    model = _fixed(torch, _mlp(torch))
    opt = torch.optim.Adam(model.parameters(), lr=0.01)
    losses = _train_steps(torch, model, opt, 3)
    opt.param_groups[0]["lr"] = 0.05
    return losses + _train_steps(torch, model, opt, 3)


def case_adamw_groups(torch):
    model = _fixed(torch, _mlp(torch))
    opt = torch.optim.AdamW([{"params": model.hidden.parameters()}, {"params": model.out.parameters(), "lr": 0.1}], lr=0.01)
    x = torch.tensor([[0.5, -1.0, 2.0]])
    for _ in range(3):
        opt.zero_grad()
        model(x).sum().backward()
        opt.step()
    return [model.hidden.bias, model.out.bias, [g["lr"] for g in opt.param_groups], opt.param_groups[0]["weight_decay"]]


def case_optimizer_state_dict_resumes_training(torch):
    """A checkpoint's optimizer state (Adam's moments and step, SGD's momentum) resumes training exactly
    where it stopped, through torch.save and torch.load; a fresh optimizer has no state."""
    import io

    out = []
    for make in (lambda p: torch.optim.Adam(p, lr=0.01, amsgrad=True), lambda p: torch.optim.SGD(p, lr=0.1, momentum=0.9),
                 lambda p: torch.optim.SGD(p, lr=0.1)):
        model = _fixed(torch, _mlp(torch))
        opt = make(model.parameters())
        out.append(opt.state_dict()["state"])
        _train_steps(torch, model, opt, 3)
        state = opt.state_dict()
        out.append(sorted(state["state"].keys()))
        out.append(list(state["state"][0].keys()))
        out.append(len(opt.state))
        buffer = io.BytesIO()
        torch.save({"model": model.state_dict(), "optimizer": state}, buffer)
        buffer.seek(0)
        checkpoint = torch.load(buffer)
        out.append(checkpoint["optimizer"]["state"][1])  # the saved copy (PyTorch's state_dict shares the live step)
        resumed_model = _mlp(torch)
        resumed_model.load_state_dict(checkpoint["model"])
        resumed = make(resumed_model.parameters())
        resumed.load_state_dict(checkpoint["optimizer"])
        out.append([_train_steps(torch, model, opt, 3), _train_steps(torch, resumed_model, resumed, 3)])
    return out


def case_optimizer_load_wrong_shape(torch):
    model = _fixed(torch, _mlp(torch))
    opt = torch.optim.Adam(model.parameters())
    _train_steps(torch, model, opt, 1)
    state = opt.state_dict()
    state["state"][0]["exp_avg"] = torch.zeros(2)
    other = torch.optim.Adam(_mlp(torch).parameters())
    other.load_state_dict(state)
    return _train_steps(torch, model, other, 1)


def case_step_lr(torch):
    model = _mlp(torch)
    opt = torch.optim.SGD(model.parameters(), lr=1.0)
    sched = torch.optim.lr_scheduler.StepLR(opt, step_size=2, gamma=0.5)
    lrs = []
    for _ in range(5):
        opt.step()
        sched.step()
        lrs.append(opt.param_groups[0]["lr"])
    return lrs


def case_state_dict_round_trip(torch):
    a = _fixed(torch, _mlp(torch))
    b = _mlp(torch)
    b.load_state_dict(a.state_dict())
    x = torch.tensor([[0.5, -1.0, 2.0]])
    return [a(x), b(x)]


def case_load_state_dict_missing(torch):
    model = _mlp(torch)
    state = model.state_dict()
    del state["out.bias"]
    state["extra"] = torch.zeros(1)
    model.load_state_dict(state)


def case_load_state_dict_shape(torch):
    model = _mlp(torch)
    state = model.state_dict()
    state["out.weight"] = torch.zeros(3, 3)
    model.load_state_dict(state)


def case_zero_grad(torch):
    model = _mlp(torch)
    model(torch.ones(1, 3)).sum().backward()
    model.zero_grad(set_to_none=False)
    kept = model.out.weight.grad
    model.zero_grad(set_to_none=True)  # the default from PyTorch 2 on, and GPU Lab's; 1.13's was False
    return [kept, model.out.weight.grad is None]


def case_clip_grad_norm(torch):
    model = _fixed(torch, _mlp(torch))
    model(torch.tensor([[3.0, -2.0, 1.0]])).sum().backward()
    norm = torch.nn.utils.clip_grad_norm_(model.parameters(), 0.5)
    total = sum(float((p.grad ** 2).sum()) for p in model.parameters()) ** 0.5
    return [norm, total]


def case_module_to_keeps_parameters(torch):
    model = _mlp(torch)
    before = list(model.parameters())
    model.to(torch.float64)
    after = list(model.parameters())
    return [all(a is b for a, b in zip(before, after)), after[0].dtype, model(torch.ones(1, 3, dtype=torch.float64)).dtype]


def case_module_attribute_error(torch):
    return _mlp(torch).missing_layer


# ---- data --------------------------------------------------------------------------------------------

def case_dataloader_training(torch):
    x = torch.arange(192.0).reshape(64, 3) / 100
    y = (x.sum(1, keepdim=True) * 0.5 - 1.0)
    loader = torch.utils.data.DataLoader(torch.utils.data.TensorDataset(x, y), batch_size=16, shuffle=False)
    model = _fixed(torch, torch.nn.Sequential(torch.nn.Linear(3, 8), torch.nn.ReLU(), torch.nn.Linear(8, 1)))
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    losses = []
    for _ in range(2):
        for xb, yb in loader:
            opt.zero_grad()
            loss = torch.nn.functional.mse_loss(model(xb), yb)
            loss.backward()
            opt.step()
            losses.append(loss.item())
    return [len(loader), losses]


def case_dataloader_shuffle_covers_everything(torch):
    x = torch.arange(10.0).reshape(10, 1)
    loader = torch.utils.data.DataLoader(torch.utils.data.TensorDataset(x, x * 2), batch_size=4, shuffle=True)
    seen = []
    for xb, yb in loader:
        seen.extend(xb.flatten().tolist())
        assert (yb == xb * 2).sum().item() == xb.shape[0]
    return [sorted(seen), len(loader), [xb.shape[0] for xb, _ in loader]]


def case_dataloader_drop_last(torch):
    x = torch.arange(10.0).reshape(10, 1)
    loader = torch.utils.data.DataLoader(torch.utils.data.TensorDataset(x, x), batch_size=4, drop_last=True)
    return [len(loader), [xb.shape[0] for xb, _ in loader]]


def case_python_dataset(torch):
    class Squares(torch.utils.data.Dataset):
        def __len__(self):
            return 5

        def __getitem__(self, i):
            return torch.tensor([float(i), 1.0]), i * i

    batches = list(torch.utils.data.DataLoader(Squares(), batch_size=2))
    return [len(batches), batches[0][0], batches[0][1], batches[-1][1]]


def case_checkpoint_sequential(torch):
    from torch.utils.checkpoint import checkpoint, checkpoint_sequential

    model = _fixed(torch, torch.nn.Sequential(torch.nn.Linear(3, 6), torch.nn.ReLU(), torch.nn.Linear(6, 6), torch.nn.Tanh(),
                                              torch.nn.Linear(6, 2)))
    x = torch.tensor([[0.5, -1.0, 2.0], [1.0, 0.0, -0.5]], requires_grad=True)
    out = checkpoint_sequential(model, 2, x)
    out.sum().backward()
    grads = [p.grad for p in model.parameters()] + [x.grad]
    single = checkpoint(model[0], x)
    return [out, grads, single.shape, single.requires_grad]


def case_python_dataset_workers(torch):
    class Rows(torch.utils.data.Dataset):
        def __len__(self):
            return 10

        def __getitem__(self, i):
            return torch.full((2,), float(i)), i

    batches = list(torch.utils.data.DataLoader(Rows(), batch_size=3, num_workers=2))
    return [len(batches), [b[1] for b in batches], batches[-1][0]]


# ---- layers without inputs, dropout's p, SGD's lr (issue 48, section 2, item 5) ---------------------

def case_linear_without_inputs(torch):
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # "Initializing zero-element tensors is a no-op", in both
        torch.manual_seed(0)
        layer = torch.nn.Linear(0, 2)
        empty = torch.nn.Linear(0, 0)
        conv = torch.nn.Conv2d(0, 2, 3)
        w = torch.nn.init.kaiming_uniform_(torch.empty(2, 0))
        v = torch.nn.init.kaiming_normal_(torch.empty(0, 3))
    # (conv.bias is left as torch.empty made it in PyTorch, whose Conv2d initialises no bias of fan_in 0)
    return [layer.weight.shape, layer.bias, layer(torch.ones(3, 0)), repr(layer), empty.weight.shape, repr(conv), conv.bias.shape, w.shape, v.shape,
            torch.nn.Linear(2, 0)(torch.ones(1, 2)).shape]


def case_linear_without_inputs_warns(torch):
    import warnings

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        torch.nn.Linear(0, 2)
    return [str(w.message) for w in caught if issubclass(w.category, UserWarning)]


def case_dropout_probability_above_one(torch):
    return torch.nn.functional.dropout(torch.ones(2), p=2)


def case_dropout_probability_below_zero(torch):
    return torch.nn.functional.dropout(torch.ones(2), -0.5)


def case_dropout_probability_checked_in_eval(torch):
    return torch.nn.functional.dropout(torch.ones(2), p=1.5, training=False)


def case_dropout_probability_of_a_module(torch):
    return torch.nn.Dropout(p=2)


def case_dropout_probability_at_the_ends(torch):
    return [torch.nn.functional.dropout(torch.ones(3), p=1.0), torch.nn.functional.dropout(torch.ones(3), p=0.0),
            torch.nn.functional.dropout(torch.ones(3), p=1, training=False)]


def case_sgd_without_lr(torch):
    p = torch.nn.Parameter(torch.tensor([1.0, 2.0]))
    opt = torch.optim.SGD([p], momentum=0.9)
    p.grad = torch.ones(2)
    opt.step()
    return [opt.defaults["lr"], opt.param_groups[0]["lr"], p.detach().tolist()]


def case_sgd_with_a_negative_lr(torch):
    return torch.optim.SGD([torch.nn.Parameter(torch.ones(2))], lr=-1)
