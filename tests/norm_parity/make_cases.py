#!/usr/bin/python3
"""Generates tests/norm_parity/cases.json: PyTorch's F.batch_norm -- the output, the gradients of
input, weight and bias, and the running_mean/running_var it leaves behind -- for
tests/test_norm_parity.cpp, plus PyTorch's error messages for bad arguments.

Regenerate (Debian's python3-torch; the pyenv `python3` on PATH has no torch):

    /usr/bin/python3 tests/norm_parity/make_cases.py

Rows: every case in float32 and in float64. Every value is stored exactly, as a hex float (Python's
float.hex(), read back by strtod): inputs, weight, bias and the running statistics before the call are
drawn in the case's dtype (running_var from U(0.5, 1.5)), the output's gradient likewise; the C++ side
builds the same tensors, runs batch_norm forward and backward(grad_output), and compares.

Tolerances (|engine - torch| <= atol + rtol |torch|, per element):
  float32  rtol 1e-5, atol 1e-5: each statistic is a sum over N * H * W <= 100 values per channel, added
           in another order (and accumulator: the engine's CPU kernels sum in double) than PyTorch's;
           outputs and gradients are O(1) values built from a handful of such sums and one 1/sqrt,
           within a few float32 ulps (1e-7 relative) of each other in practice -- the test prints the
           largest error per case. A wrong formula (biased vs unbiased running variance, a missing
           term of the backward) is an error of order 1e-2 or more.
  float64  rtol 1e-12, atol 1e-13: the same argument with u = 2^-53.
The messages of the error rows are PyTorch's; ValueError's "torch.Size([1, 4])" is printed by the
engine as "[1, 4]" (it has no torch.Size), which the test accounts for.
"""
import json
import os

import torch
import torch.nn.functional as F

SEED = 20261123
HERE = os.path.dirname(os.path.abspath(__file__))


def hexfloat(v):
    mantissa, exponent = float(v).hex().split("p")
    mantissa = mantissa.rstrip("0").rstrip(".") if "." in mantissa else mantissa
    return mantissa + "p" + exponent


def enc(t):
    t = t.detach()
    return {"shape": list(t.shape), "values": [hexfloat(v) for v in t.reshape(-1).tolist()]}


# name, input shape, affine (weight and bias), running stats given, training, momentum, eps, input offset
CASES = [
    ("bn2d_train", [4, 3, 5, 5], True, True, True, 0.1, 1e-5, 0.0),
    ("bn2d_train_no_affine", [4, 3, 5, 5], False, True, True, 0.1, 1e-5, 0.0),
    ("bn2d_train_no_running_stats", [2, 4, 3, 3], True, False, True, 0.1, 1e-5, 0.0),
    ("bn2d_train_momentum_eps", [3, 2, 4, 4], True, True, True, 0.3, 1e-3, 0.0),
    ("bn2d_train_large_mean", [4, 3, 3, 3], True, True, True, 0.1, 1e-5, 50.0),
    ("bn2d_train_one_pixel", [5, 3, 1, 1], True, True, True, 0.1, 1e-5, 0.0),
    ("bn1d_train", [8, 5], True, True, True, 0.1, 1e-5, 0.0),
    ("bn1d_train_two_samples", [2, 6], True, True, True, 0.1, 1e-5, 0.0),
    ("bn1d_train_3d", [4, 3, 7], True, True, True, 0.1, 1e-5, 0.0),
    ("bn1d_train_no_affine", [6, 4], False, True, True, 0.1, 1e-5, 0.0),
    ("bn2d_eval", [4, 3, 5, 5], True, True, False, 0.1, 1e-5, 0.0),
    ("bn2d_eval_no_affine", [2, 3, 4, 4], False, True, False, 0.1, 1e-5, 0.0),
    ("bn1d_eval", [6, 4], True, True, False, 0.1, 1e-5, 0.0),
    ("bn1d_eval_one_sample", [1, 4], True, True, False, 0.1, 1e-3, 0.0),
]

# name, input shape, running_mean size, running_var size, weight size, bias size, training:
# each must raise PyTorch's error.
ERRORS = [
    ("one_value_per_channel_2d", [1, 4], 4, 4, None, None, True),
    ("one_value_per_channel_4d", [1, 4, 1, 1], None, None, None, None, True),
    ("running_mean_size", [2, 3], 4, 3, None, None, True),
    ("running_var_size", [2, 3], 3, 4, None, None, True),
    ("weight_size", [2, 3, 2, 2], 3, 3, 4, None, True),
    ("bias_size", [2, 3, 2, 2], 3, 3, 3, 4, False),
    ("eval_without_running_stats", [2, 3], None, None, None, None, False),
    ("input_1d", [3], None, None, None, None, True),
]


# Modules: three training batches, then eval() on a fourth (float32). kwargs as nn.BatchNorm*d's.
MODULES = [
    ("bn2d_module", "BatchNorm2d", [4, 3, 3, 3], {}),
    ("bn2d_module_cumulative", "BatchNorm2d", [4, 3, 3, 3], {"momentum": None}),
    ("bn1d_module_no_affine", "BatchNorm1d", [5, 4], {"affine": False}),
    ("bn1d_module_untracked", "BatchNorm1d", [5, 4], {"track_running_stats": False}),
]


def module_cases():
    out = []
    for name, cls, shape, kwargs in MODULES:
        m = getattr(torch.nn, cls)(shape[1], **kwargs)
        with torch.no_grad():
            if m.affine:
                m.weight.copy_(torch.randn(shape[1]))
                m.bias.copy_(torch.randn(shape[1]))
        case = {"name": name, "module": cls, "kwargs": kwargs, "repr": repr(m),
                "state_dict_keys": list(m.state_dict().keys())}
        if m.affine:
            case["weight"] = enc(m.weight)
            case["bias"] = enc(m.bias)
        batches, outputs = [], []
        m.train()
        for _ in range(3):
            x = torch.randn(shape)
            batches.append(enc(x))
            outputs.append(enc(m(x)))
        m.eval()
        x = torch.randn(shape)
        batches.append(enc(x))
        outputs.append(enc(m(x)))
        case.update({"inputs": batches, "outputs": outputs})
        if m.track_running_stats:
            case.update({"running_mean": enc(m.running_mean), "running_var": enc(m.running_var),
                         "num_batches_tracked": int(m.num_batches_tracked)})
        out.append(case)
    return out


def main():
    torch.manual_seed(SEED)
    cases = []
    for dtype in (torch.float32, torch.float64):
        for name, shape, affine, running, training, momentum, eps, offset in CASES:
            c = shape[1]
            x = (torch.randn(shape, dtype=dtype) + offset).requires_grad_(True)
            w = torch.randn(c, dtype=dtype, requires_grad=True) if affine else None
            b = torch.randn(c, dtype=dtype, requires_grad=True) if affine else None
            rm = torch.randn(c, dtype=dtype) if running else None
            rv = (torch.rand(c, dtype=dtype) + 0.5) if running else None
            case = {"name": name, "dtype": str(dtype).replace("torch.", ""), "training": training,
                    "momentum": momentum, "eps": eps, "input": enc(x)}
            if affine:
                case["weight"] = enc(w)
                case["bias"] = enc(b)
            if running:
                case["running_mean"] = enc(rm)
                case["running_var"] = enc(rv)
            out = F.batch_norm(x, rm, rv, w, b, training, momentum, eps)
            g = torch.randn(out.shape, dtype=dtype)
            out.backward(g)
            case.update({"grad_output": enc(g), "output": enc(out), "grad_input": enc(x.grad)})
            if affine:
                case["grad_weight"] = enc(w.grad)
                case["grad_bias"] = enc(b.grad)
            if running:
                case["running_mean_after"] = enc(rm)
                case["running_var_after"] = enc(rv)
            cases.append(case)
    modules = module_cases()
    errors = []
    for name, shape, rm_n, rv_n, w_n, b_n, training in ERRORS:
        make = lambda n: torch.ones(n) if n is not None else None
        try:
            F.batch_norm(torch.randn(shape), make(rm_n), make(rv_n), make(w_n), make(b_n), training)
        except (RuntimeError, ValueError, IndexError) as e:
            message, kind = str(e).split("\n")[0], type(e).__name__
        else:
            raise SystemExit(f"{name}: PyTorch raised nothing")
        err = {"name": name, "input_shape": shape, "training": training, "type": kind, "message": message}
        for key, n in (("running_mean", rm_n), ("running_var", rv_n), ("weight", w_n), ("bias", b_n)):
            if n is not None:
                err[key + "_size"] = n
        errors.append(err)
    header = {
        "command": "/usr/bin/python3 tests/norm_parity/make_cases.py",
        "generator": "tests/norm_parity/make_cases.py",
        "torch_version": torch.__version__,
        "seed": SEED,
        "encoding": "values: hex floats (float.hex() less the mantissa's trailing zeros, exact), row-major; "
                    "running_mean/running_var: before the call, *_after: after it",
        "tolerance": {"float32": {"rtol": 1e-5, "atol": 1e-5}, "float64": {"rtol": 1e-12, "atol": 1e-13}},
        "tolerance_why": "see the docstring of the generator",
    }
    with open(os.path.join(HERE, "cases.json"), "w") as f:
        f.write('{"header": ' + json.dumps(header) + ',\n"cases": [\n')
        f.write(",\n".join(json.dumps(c, separators=(",", ":")) for c in cases))
        f.write('\n],\n"modules": [\n')
        f.write(",\n".join(json.dumps(m, separators=(",", ":")) for m in modules))
        f.write('\n],\n"errors": [\n')
        f.write(",\n".join(json.dumps(e) for e in errors))
        f.write("\n]}\n")
    print(f"{len(cases)} cases, {len(modules)} module cases, {len(errors)} error cases")


if __name__ == "__main__":
    main()
