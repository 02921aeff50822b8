"""The convolutions lesson's first lab: a convolutional network against the training lesson's MLP, on
Fashion-MNIST, from the same seed on the same batches:

    mlp = nn.Sequential(nn.Flatten(), nn.Linear(784, 256), nn.ReLU(), nn.Linear(256, 128), nn.ReLU(),
                        nn.Linear(128, 100), nn.ReLU(), nn.Linear(100, 10))
    cnn = nn.Sequential(nn.Conv2d(1, 32, 3, padding=1, bias=False), nn.BatchNorm2d(32), nn.ReLU(), nn.MaxPool2d(2),
                        nn.Conv2d(32, 64, 3, padding=1, bias=False), nn.BatchNorm2d(64), nn.ReLU(), nn.MaxPool2d(2),
                        nn.Flatten(), nn.Linear(64 * 7 * 7, 128), nn.ReLU(), nn.Linear(128, 10))
    for model in (mlp, cnn):
        optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
        for epoch in range(epochs):
            model.train()
            for x, y in train_loader:
                x, y = x.to(device), y.to(device)
                loss = F.cross_entropy(model(x), y)
                optimizer.zero_grad(); loss.backward(); optimizer.step()
            model.eval()
            with torch.no_grad(): ...test accuracy...

A convolution slides one small filter over the whole image, so a 3 x 3 filter has 9 weights however
large the image is; a Linear layer has a weight for every (input, output) pair. Most of the CNN's
parameters are therefore in its classifier, not in its convolutions -- the run counts them.
"""
import math
import time

import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.data import DataLoader

from lab_helpers import (MLP, allocated, cnn, first_examples, is_emulated, parse_widths, peak_allocated, pick_device, refuse_what_cannot_fit,
                         reset_peak, synchronize)

MODELS = [("mlp", "MLP"), ("cnn", "CNN")]


def count_parameters(model):
    """Parameters by the kind of layer that holds them: the point of the comparison is where they are."""
    count = dict(total=0, convolution=0, batch_norm=0, linear=0, first_linear=0)
    for layer in model.modules():
        n = sum(p.numel() for p in layer.parameters(recurse=False))
        count["total"] += n
        if isinstance(layer, nn.Conv2d):
            count["convolution"] += n
        elif isinstance(layer, nn.BatchNorm2d):
            count["batch_norm"] += n
        elif isinstance(layer, nn.Linear):
            count["first_linear"] = count["first_linear"] or n
            count["linear"] += n
    return count


def multiply_adds_per_example(model, example):
    """One example's forward pass, layer by layer: a convolution does C/groups * R * S multiply-adds for
    every output value, a Linear layer one per weight."""
    model.eval()  # batch norm: no running statistics moved by this pass
    macs, x = 0, example
    with torch.no_grad():
        for layer in model.modules():
            if isinstance(layer, (nn.Sequential, MLP)):
                continue
            x = layer(x)
            if isinstance(layer, nn.Conv2d):
                macs += x.numel() * (layer.weight.numel() // layer.out_channels)
            elif isinstance(layer, nn.Linear):
                macs += layer.weight.numel()
    model.train()
    return float(macs)


def test_accuracy(model, loader, device):
    """Under no-grad, one .item() at the end."""
    model.eval()
    correct, count = torch.zeros((), dtype=torch.int64, device=device), 0
    with torch.no_grad():
        for x, y in loader:
            correct += (model(x.to(device)).argmax(1) == y.to(device)).sum()
            count += len(x)
    model.train()
    return correct.item() / count


def declare_views(device):
    series = [(m, label) for m, label in MODELS]
    lab.view("loss", "Training loss", x=[("step", ""), ("time", "s")], y="loss", series=series,
             note="The mean loss of the last log_every steps. Against time, the CNN's curve is stretched: each of its steps costs more.")
    lab.view("accuracy", "Test accuracy after each epoch", x=[("epoch", "")], y="test accuracy", series=series)
    lab.view("models", "Cost and result of each model", kind="table",
             columns=["model", "parameters", "in convolutions", "in batch norm", "in Linear", "multiply-adds per image", "test accuracy",
                      ("epoch", "s"), ("peak memory", "bytes")],
             note=("Timed on your CPU (the emulated GPU computes there). " if is_emulated(device) else "") +
                  f"multiply-adds: one image's forward pass. epoch: the mean training time of an epoch on {device}, evaluation "
                  "excluded. peak memory: the most the model, its gradients, Adam's state, the batch and the activations of a step "
                  "held at once while training, above what was allocated before the model was built (the data set, on the CPU).")


def make_model(which, p, example_shape, device):
    torch.manual_seed(p["seed"])  # the same seed for both: the same shuffles, so the same batches
    hidden = parse_widths(p["cnn_hidden" if which == "cnn" else "mlp_hidden"], "cnn_hidden" if which == "cnn" else "mlp_hidden")
    model = (cnn(example_shape, hidden, 10) if which == "cnn" else MLP(math.prod(example_shape), hidden, 10)).to(device)
    if p["optimizer"] == "sgd":
        optimizer = torch.optim.SGD(model.parameters(), lr=p["lr"], momentum=p["momentum"])
    else:
        optimizer = (torch.optim.AdamW if p["optimizer"] == "adamw" else torch.optim.Adam)(model.parameters(), lr=p["lr"])
    return model, optimizer


def train_epoch(model, optimizer, scheduler, loader, device, which, label, epoch, progress):
    """One epoch: the loss summed on the device, one .item() per report; the training seconds, reports not timed."""
    model.train()
    window, window_steps, trained = torch.zeros((), device=device), 0, 0.0
    synchronize(device)
    lap = time.perf_counter()
    for i, (x, y) in enumerate(loader, 1):
        x, y = x.to(device), y.to(device)
        loss = F.cross_entropy(model(x), y)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        if scheduler:
            scheduler.step()
        with torch.no_grad():
            window += loss.detach()
        window_steps += 1
        progress["step"] += 1
        progress["done"] += 1
        if progress["step"] % progress["log_every"] and i != len(loader):  # a report every log_every steps, and at the epoch's end
            continue
        mean = window.item() / window_steps  # waits for the device
        trained += time.perf_counter() - lap
        lab.point("loss", which, [progress["step"], progress["seconds"] + trained], mean)
        lab.progress(progress["done"], progress["total"], f"{label}: epoch {epoch}, step {progress['step']}, loss {mean:.4f}")
        window.zero_()
        window_steps = 0
        lap = time.perf_counter()
    synchronize(device)
    return trained + time.perf_counter() - lap


def train_one(which, label, p, train, test, device, progress):
    baseline = allocated(device)
    model, optimizer = make_model(which, p, train[0][0].shape, device)
    r = dict(parameters=count_parameters(model), macs=multiply_adds_per_example(model, test[0][0][None].to(device)),
             seconds=0.0, epochs=0, peak=0, accuracy=None)
    print(f"Training the {label}: {r['parameters']['total']} parameters.")
    train_loader = DataLoader(train, batch_size=min(p["batch_size"], len(train)), shuffle=True, drop_last=True)
    test_loader = DataLoader(test, batch_size=1000)
    steps_per_epoch = len(train_loader)
    scheduler = (torch.optim.lr_scheduler.CosineAnnealingLR(optimizer, T_max=p["epochs"] * steps_per_epoch)
                 if p["lr_schedule"] == "cosine" else None)
    progress["step"] = 0
    reset_peak(device)
    for epoch in range(1, p["epochs"] + 1):
        progress["seconds"] = r["seconds"]
        r["seconds"] += train_epoch(model, optimizer, scheduler, train_loader, device, which, label, epoch, progress)
        r["epochs"] += 1
        r["peak"] = max(r["peak"], peak_allocated(device) - baseline)
        lab.synchronize()  # a Stop at the epoch's last step ends the run before its evaluation
        r["accuracy"] = test_accuracy(model, test_loader, device)  # not timed, not in the training peak
        lab.point("accuracy", which, [epoch], r["accuracy"])
        lab.record("epoch", model=which, epoch=epoch, test_accuracy=r["accuracy"], train_seconds=r["seconds"])
        reset_peak(device)
    c = r["parameters"]
    lab.row("models", label, c["total"], c["convolution"], c["batch_norm"], c["linear"], r["macs"], r["accuracy"],
            r["seconds"] / r["epochs"], r["peak"])
    return r


def report(results, device):
    for (which, label), r in zip(MODELS, results):
        lab.measurement(f"{label}: parameters", r["parameters"]["total"])
        lab.measurement(f"{label}: test accuracy", r["accuracy"])
        lab.measurement(f"{label}: epoch time", r["seconds"] / r["epochs"], "s")
        lab.measurement(f"{label}: peak memory", r["peak"], "bytes")
        lab.measurement(f"{label}: multiply-adds per image", r["macs"])
        lab.record("model", model=which, parameters=r["parameters"]["total"], convolution_parameters=r["parameters"]["convolution"],
                   linear_parameters=r["parameters"]["linear"], test_accuracy=r["accuracy"], epoch_s=r["seconds"] / r["epochs"],
                   peak_allocated_bytes=r["peak"])
    mlp, conv = results
    params = conv["parameters"]["total"] / mlp["parameters"]["total"]
    times = (conv["seconds"] / conv["epochs"]) / (mlp["seconds"] / mlp["epochs"])
    gain = 100 * (conv["accuracy"] - mlp["accuracy"])
    lab.measurement("CNN parameters vs MLP", params, "x")
    lab.measurement("CNN epoch time vs MLP", times, "x")
    lab.measurement("CNN peak memory vs MLP", conv["peak"] / mlp["peak"], "x")
    lab.measurement("CNN test accuracy over MLP", gain, "points")
    c = conv["parameters"]
    print(f"The CNN reached {100 * conv['accuracy']:.2f}% test accuracy against the MLP's {100 * mlp['accuracy']:.2f}% "
          f"({'+' if gain >= 0 else ''}{gain:.2f} points) with {params:.2f}x the MLP's parameters.")
    print(f"Where the CNN's {c['total']} parameters are: {c['convolution']} in its two convolutions (a 3 x 3 filter has 9 weights "
          f"per input channel, however large the image), {c['batch_norm']} in batch norm, and {c['linear']} in its Linear layers "
          f"-- {c['first_linear']} in the first alone (3136 features x its width, plus a bias: 3137 parameters per unit of "
          "cnn_hidden's first width). To shrink the CNN, shrink its classifier.")
    gpu = device.type == "cuda" and not is_emulated(device)
    print(f"An epoch of the CNN took {times:.1f}x the MLP's on {torch._C._device_label(device)}: a convolution reuses each weight at "
          "every position of the image, so it does far more arithmetic per parameter (the CNN's forward pass is "
          f"{conv['macs'] / 1e6:.3g} million multiply-adds per image, the MLP's {mlp['macs'] / 1e6:.3g} million)."
          + (" On a GPU, cuDNN runs the convolutions; the next runs show what it chose." if gpu else
             " On a GPU that arithmetic is what cuDNN's convolution kernels and tensor cores are built for."))


def run(mlp_hidden="256,128,100", cnn_hidden="128", optimizer="adam", lr=1e-3, lr_schedule="constant", momentum=0.9, batch_size=64,
        epochs=2, train_subset=0, test_subset=0, device="auto", seed=0, log_every=50):
    p = dict(locals())
    started = time.perf_counter()
    device = pick_device(device)
    train, test = first_examples(lab.fashion_mnist(train=True), train_subset), first_examples(lab.fashion_mnist(train=False), test_subset)
    if device.type == "cpu":
        for convolutional, hidden in ((False, mlp_hidden), (True, cnn_hidden)):
            refuse_what_cannot_fit(convolutional, tuple(train[0][0].shape), parse_widths(hidden), 10, batch_size, len(train))
    declare_views(device)
    steps = epochs * (len(train) // min(batch_size, len(train)))
    progress = dict(done=0, total=len(MODELS) * steps, log_every=log_every)
    results = []
    try:
        for which, label in MODELS:
            results.append(train_one(which, label, p, train, test, device, progress))
    except KeyboardInterrupt:  # Stop: what finished stays shown; nothing is compared
        print(f"Stopped after {time.perf_counter() - started:.1f} s.")
        return
    report(results, device)
    lab.record("done", seconds=time.perf_counter() - started, device=str(device))
