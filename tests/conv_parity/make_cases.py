#!/usr/bin/python3
"""Generates tests/conv_parity/cases.json: PyTorch's conv2d, max_pool2d, avg_pool2d and
adaptive_avg_pool2d -- outputs and the gradients of input, weight and bias -- for
tests/test_conv_parity.cpp, plus PyTorch's error messages for bad shapes and arguments.

Regenerate (Debian's python3-torch; the pyenv `python3` on PATH has no torch):

    /usr/bin/python3 tests/conv_parity/make_cases.py

Rows: every case in float32; in float64 every convolution and the first case of each pool.
Every value is stored exactly, as a hex float (Python's float.hex(), read back by strtod): inputs are
drawn from N(0, 1) in the case's dtype (float32 or float64; a float32 is a float64 exactly), the
output's gradient likewise; the C++ side builds the same tensors, runs forward and
backward(grad_output), and compares.

Tolerances (|engine - torch| <= atol + rtol |torch|, per element):
  float32  rtol 1e-5, atol 1e-5: convolutions are sums of up to C/groups*R*S = 50 products (the
           backward ones of up to N*OH*OW = 98), which PyTorch 1.13 computes with oneDNN/its own
           kernels and the engine with im2col + OpenBLAS sgemm, in another order. Each order is within
           (n-1) u sum|terms| of the exact sum (u = 2^-24 = 6e-8); with sum|terms| up to ~30 here that
           is ~1e-5 absolute at worst, ~1e-6 typically, whatever the size of the result, so the
           absolute term carries it, and results near 0 (cancellation) are why a pure rtol would not
           do. Pools are exact or nearly so (max: exact; avg: a sum of <= 9 terms and one division).
           The test prints the largest error seen per case, as a measurement.
  float64  rtol 1e-12, atol 1e-13: the same argument with u = 2^-53 (1.1e-16): ~3e-15 at worst.
A wrong index, window or padding rule shows up as an error of order 1, far above either tolerance.
"""
import json
import os

import torch
import torch.nn.functional as F

SEED = 20261123
HERE = os.path.dirname(os.path.abspath(__file__))


def hexfloat(v):
    """float.hex() without the mantissa's trailing zeros (a float32 value has 6 hex digits, not 13)."""
    mantissa, exponent = float(v).hex().split("p")
    mantissa = mantissa.rstrip("0").rstrip(".") if "." in mantissa else mantissa
    return mantissa + "p" + exponent


def enc(t):
    t = t.detach()
    return {"shape": list(t.shape), "values": [hexfloat(v) for v in t.reshape(-1).tolist()]}


def pair(v):
    return list(v) if isinstance(v, (tuple, list)) else [v, v]


# name, op, input shape, weight shape, bias?, args (PyTorch's keyword arguments)
CASES = [
    ("conv2d", "conv2d", [2, 3, 6, 6], [4, 3, 3, 3], False, {}),
    ("conv2d_bias", "conv2d", [2, 3, 6, 6], [4, 3, 3, 3], True, {}),
    ("conv2d_stride2", "conv2d", [2, 3, 7, 7], [4, 3, 3, 3], True, {"stride": 2}),
    ("conv2d_padding1", "conv2d", [2, 3, 5, 5], [4, 3, 3, 3], True, {"padding": 1}),
    ("conv2d_dilation2", "conv2d", [1, 2, 7, 7], [3, 2, 3, 3], True, {"dilation": 2}),
    ("conv2d_groups2", "conv2d", [2, 4, 5, 5], [6, 2, 3, 3], True, {"groups": 2}),
    ("conv2d_depthwise", "conv2d", [2, 3, 5, 5], [3, 1, 3, 3], True, {"padding": 1, "groups": 3}),
    ("conv2d_unbatched", "conv2d", [3, 5, 5], [4, 3, 3, 3], True, {}),
    ("conv2d_nonsquare", "conv2d", [2, 3, 6, 7], [4, 3, 2, 3], True, {"stride": (2, 1), "padding": (1, 0)}),
    ("conv2d_all_options", "conv2d", [2, 4, 7, 8], [6, 2, 3, 2], True,
     {"stride": (2, 3), "padding": (1, 2), "dilation": (2, 1), "groups": 2}),
    ("conv2d_1x1", "conv2d", [2, 5, 3, 4], [2, 5, 1, 1], False, {}),
    ("conv2d_5x5_padding2", "conv2d", [2, 2, 7, 7], [3, 2, 5, 5], True, {"padding": 2}),
    # Stride 1 and as wide as the input, but not as tall: the CPU's shifted-plane im2col with rows cut.
    ("conv2d_same_width_only", "conv2d", [2, 2, 5, 6], [3, 2, 3, 3], True, {"padding": (0, 1)}),
    # padding='same' (an even kernel: the extra column goes on the right) and 'valid'.
    ("conv2d_padding_same", "conv2d", [2, 2, 5, 6], [3, 2, 3, 3], True, {"padding": "same"}),
    ("conv2d_padding_same_even_kernel", "conv2d", [2, 2, 5, 6], [3, 2, 2, 4], True, {"padding": "same"}),
    ("conv2d_padding_same_dilated", "conv2d", [1, 2, 6, 7], [3, 2, 2, 3], True, {"padding": "same", "dilation": (3, 2)}),
    ("conv2d_padding_valid", "conv2d", [2, 2, 5, 6], [3, 2, 3, 3], False, {"padding": "valid"}),
    # Padding wider than the kernel reach: whole output rows and columns read only padding.
    ("conv2d_padding_beyond_kernel", "conv2d", [2, 2, 4, 5], [3, 2, 3, 3], True, {"stride": 2, "padding": 3}),
    ("max_pool2d", "max_pool2d", [2, 3, 6, 6], None, False, {"kernel_size": 2}),
    ("max_pool2d_padding", "max_pool2d", [2, 2, 7, 7], None, False, {"kernel_size": 3, "stride": 2, "padding": 1}),
    ("max_pool2d_ceil_mode", "max_pool2d", [1, 2, 7, 7], None, False,
     {"kernel_size": 2, "stride": 2, "ceil_mode": True}),
    # ceil_mode's exception: ceil((5 + 2 - 2) / 2) + 1 = 4 windows, but the 4th would start in the
    # right padding, so there are 3.
    ("max_pool2d_ceil_mode_last_window", "max_pool2d", [1, 2, 5, 5], None, False,
     {"kernel_size": 2, "stride": 2, "padding": 1, "ceil_mode": True}),
    ("max_pool2d_overlapping", "max_pool2d", [1, 2, 5, 5], None, False, {"kernel_size": 3, "stride": 1}),
    ("max_pool2d_dilation", "max_pool2d", [1, 2, 7, 6], None, False,
     {"kernel_size": (2, 3), "stride": (1, 2), "padding": (1, 0), "dilation": 2}),
    ("max_pool2d_unbatched", "max_pool2d", [2, 5, 5], None, False, {"kernel_size": 2}),
    ("avg_pool2d", "avg_pool2d", [2, 3, 6, 6], None, False, {"kernel_size": 2}),
    ("avg_pool2d_count_include_pad", "avg_pool2d", [1, 2, 6, 6], None, False,
     {"kernel_size": 3, "stride": 2, "padding": 1}),
    ("avg_pool2d_count_exclude_pad", "avg_pool2d", [1, 2, 6, 6], None, False,
     {"kernel_size": 3, "stride": 2, "padding": 1, "count_include_pad": False}),
    ("avg_pool2d_ceil_mode", "avg_pool2d", [1, 2, 5, 5], None, False,
     {"kernel_size": 2, "stride": 2, "ceil_mode": True}),
    ("avg_pool2d_ceil_mode_exclude_pad", "avg_pool2d", [1, 2, 6, 7], None, False,
     {"kernel_size": (3, 2), "stride": 2, "padding": 1, "ceil_mode": True, "count_include_pad": False}),
    ("avg_pool2d_ceil_mode_last_window", "avg_pool2d", [1, 2, 5, 5], None, False,
     {"kernel_size": 2, "stride": 2, "padding": 1, "ceil_mode": True}),
    ("avg_pool2d_unbatched", "avg_pool2d", [2, 5, 5], None, False, {"kernel_size": 2, "stride": 1}),
    ("adaptive_avg_pool2d", "adaptive_avg_pool2d", [2, 3, 6, 8], None, False, {"output_size": (3, 4)}),
    ("adaptive_avg_pool2d_uneven", "adaptive_avg_pool2d", [2, 3, 5, 7], None, False, {"output_size": (3, 4)}),
    ("adaptive_avg_pool2d_global", "adaptive_avg_pool2d", [2, 3, 5, 4], None, False, {"output_size": 1}),
    ("adaptive_avg_pool2d_upsample", "adaptive_avg_pool2d", [1, 2, 3, 2], None, False, {"output_size": (5, 3)}),
    ("adaptive_avg_pool2d_unbatched", "adaptive_avg_pool2d", [3, 7, 5], None, False, {"output_size": (2, 3)}),
]

# name, op, input shape, weight shape, bias shape, args: each must raise PyTorch's RuntimeError.
ERRORS = [
    ("conv2d_channels", "conv2d", [2, 4, 8, 8], [8, 3, 3, 3], None, {}),
    ("conv2d_groups_channels", "conv2d", [2, 6, 8, 8], [8, 2, 3, 3], None, {"groups": 2}),
    ("conv2d_groups_divisible", "conv2d", [2, 6, 8, 8], [8, 2, 3, 3], None, {"groups": 3}),
    ("conv2d_bias_size", "conv2d", [2, 3, 8, 8], [8, 3, 3, 3], [7], {}),
    ("conv2d_kernel_too_big", "conv2d", [2, 3, 4, 4], [8, 3, 3, 3], None, {"dilation": 2}),
    ("conv2d_input_dims", "conv2d", [2, 3], [8, 3, 3, 3], None, {}),
    ("conv2d_negative_padding", "conv2d", [2, 3, 8, 8], [8, 3, 3, 3], None, {"padding": -1}),
    ("conv2d_zero_stride", "conv2d", [2, 3, 8, 8], [8, 3, 3, 3], None, {"stride": 0}),
    ("conv2d_same_strided", "conv2d", [2, 3, 8, 8], [8, 3, 3, 3], None, {"padding": "same", "stride": 2}),
    ("max_pool2d_padding", "max_pool2d", [2, 3, 8, 8], None, None, {"kernel_size": 3, "padding": 2}),
    ("max_pool2d_output_too_small", "max_pool2d", [2, 3, 2, 2], None, None, {"kernel_size": 3}),
    ("max_pool2d_input_dims", "max_pool2d", [2, 3], None, None, {"kernel_size": 2}),
    ("max_pool2d_dilation", "max_pool2d", [2, 3, 8, 8], None, None, {"kernel_size": 2, "dilation": 0}),
    ("avg_pool2d_output_too_small", "avg_pool2d", [3, 2, 2], None, None, {"kernel_size": 3}),
    ("avg_pool2d_negative_padding", "avg_pool2d", [2, 3, 8, 8], None, None, {"kernel_size": 3, "padding": -1}),
    ("adaptive_avg_pool2d_input_dims", "adaptive_avg_pool2d", [2, 3], None, None, {"output_size": 3}),
]


def run(op, x, w, b, args):
    if op == "conv2d":
        return F.conv2d(x, w, b, **args)
    return getattr(F, op)(x, **args)


def json_args(op, args):
    out = {}
    for k, v in args.items():
        out[k] = v if isinstance(v, (bool, str)) else pair(v) if k != "groups" else v
    return out


def main():
    torch.manual_seed(SEED)
    cases = []
    for dtype in (torch.float32, torch.float64):
        for name, op, in_shape, w_shape, has_bias, args in CASES:
            if dtype == torch.float64 and op != "conv2d" and name != op:
                continue  # float64: every convolution, one row per pool (their float64 path is the same loop)
            x = torch.randn(in_shape, dtype=dtype, requires_grad=True)
            w = torch.randn(w_shape, dtype=dtype, requires_grad=True) if w_shape else None
            b = torch.randn(w_shape[0], dtype=dtype, requires_grad=True) if has_bias else None
            out = run(op, x, w, b, args)
            g = torch.randn(out.shape, dtype=dtype)
            out.backward(g)
            case = {"name": name, "op": op, "dtype": str(dtype).replace("torch.", ""), "args": json_args(op, args),
                    "input": enc(x), "grad_output": enc(g), "output": enc(out), "grad_input": enc(x.grad)}
            if w is not None:
                case["weight"] = enc(w)
                case["grad_weight"] = enc(w.grad)
            if b is not None:
                case["bias"] = enc(b)
                case["grad_bias"] = enc(b.grad)
            cases.append(case)
    errors = []
    for name, op, in_shape, w_shape, b_shape, args in ERRORS:
        x = torch.randn(in_shape)
        w = torch.randn(w_shape) if w_shape else None
        b = torch.randn(b_shape) if b_shape else None
        try:
            run(op, x, w, b, args)
        except RuntimeError as e:
            message = str(e).split("\n")[0]
        else:
            raise SystemExit(f"{name}: PyTorch raised nothing")
        err = {"name": name, "op": op, "args": json_args(op, args), "input_shape": in_shape, "message": message}
        if w_shape:
            err["weight_shape"] = w_shape
        if b_shape:
            err["bias_shape"] = b_shape
        errors.append(err)
    header = {
        "command": "/usr/bin/python3 tests/conv_parity/make_cases.py",
        "generator": "tests/conv_parity/make_cases.py",
        "torch_version": torch.__version__,
        "seed": SEED,
        "encoding": "values: hex floats (float.hex() less the mantissa's trailing zeros, exact; float32 values are float64 values exactly), "
                    "row-major; args: PyTorch's keyword arguments, int pairs as [h, w]",
        "tolerance": {"float32": {"rtol": 1e-5, "atol": 1e-5}, "float64": {"rtol": 1e-12, "atol": 1e-13}},
        "tolerance_why": "see the docstring of the generator",
    }
    with open(os.path.join(HERE, "cases.json"), "w") as f:
        f.write('{"header": ' + json.dumps(header) + ',\n"cases": [\n')
        f.write(",\n".join(json.dumps(c, separators=(",", ":")) for c in cases))
        f.write('\n],\n"errors": [\n')
        f.write(",\n".join(json.dumps(e) for e in errors))
        f.write("\n]}\n")
    print(f"{len(cases)} cases, {len(errors)} error cases")


if __name__ == "__main__":
    main()
