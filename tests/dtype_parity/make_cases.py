#!/usr/bin/python3
"""Generates tests/dtype_parity/cases.json: float16/bfloat16 (and float64) CPU results from PyTorch,
the expected values of tests/test_dtype_parity.cpp.

Regenerate (Debian's python3-torch; the pyenv `python3` on PATH has no torch):

    /usr/bin/python3 tests/dtype_parity/make_cases.py

Every input is given exactly: 16-bit bit patterns (uint16) for float16/bfloat16, float32 bit patterns
(uint32) for the float32 side of conversions, IEEE-754 bit patterns in hex for float64, int64 values
for labels. Expected outputs likewise. Each case carries a tolerance in units in the last place (ulps)
of the output's dtype, distance measured along the ordered bit patterns (+0 and -0 are 0 apart; at
tolerance 0 the bit patterns must be equal, so the sign of a zero counts).
Whatever the tolerance: NaN must be NaN (any payload, any sign), an infinity must be the same infinity.

Why each tolerance is what it is (the engine stores in the dtype, computes in float32 and rounds to
nearest even once on store; PyTorch's CPU kernels do the same for the ops below unless noted):

  0 ulps  conversions (to / to float32 / float64<->float32), neg, abs, relu, maximum, max, add, sub,
          mul, div, add/mul by 2.5 (exact in both dtypes), pow 2: one correctly rounded float32
          operation on inputs that are exact in float32 (and for 16-bit inputs the float32 result of
          +-*/ is itself exact or rounds to the same 16-bit value: float32 has more than twice the
          significand bits of either 16-bit type, so the double rounding float32 -> 16-bit is
          innocuous, p32 >= 2 p16 + 2), then one rounding: bit-identical by construction. The generator
          warns if PyTorch's result for one of these is not the float64 result rounded once.
  1 ulp   exp, log, sqrt (sqrt: see below), tanh, sigmoid, gelu, gelu tanh, pow 3, softmax,
          log_softmax: the float32 value comes from a different library (glibc libm vs PyTorch's SLEEF
          or its own polynomials, with up to ~1-2 float32 ulps between them), and when the exact value
          lies near the midpoint of two 16-bit neighbours the two float32 values can round to different
          neighbours. pow 3 is x*x*x (two float32 roundings; PyTorch bfloat16 rounds x*x to bfloat16
          first, PyTorch float16 calls powf). sqrt is correctly rounded in float32 on both sides and
          would be exact; it stays at 1 ulp only because PyTorch's bfloat16 path goes through SLEEF.
  1 ulp   sum, mean (all and dim), matmul, mse_loss, cross_entropy: float32 accumulation in a
          different order gives float32 values a few float32 ulps apart; rounding them to 16 bits can
          differ by one.
  float64 rows: 0 ulps for the exact ops above and for sum, mean and matmul, whose float64 inputs are
          multiples of 2^-10 below 2^10 (every order of summation is exact in float64; mean adds one
          correctly rounded division); 3 ulps for the sums of non-grid values (edges_dim1: 5 additions
          in another order); 2 ulps for the transcendental functions (glibc and SLEEF's u10 functions
          are each within 1 ulp); 4 ulps for softmax, log_softmax, cross_entropy, mse_loss (a few
          float64 operations in different orders).
  tol_ulps_elem (gelu, gelu tanh, log_softmax, cross_entropy): where the op ends in a cancellation
          (1 + erf(..), 1 + tanh(..), (x - max) - log(sum)), any float32 (float64) computation can be
          off by more than an ulp of a small result. cancellation_bound() bounds that error from the
          inputs alone; an element whose bound exceeds one ulp of its exact result gets
          tol_ulps + ceil(bound / ulp) - 1. The generator never looks at the engine's values.

Where PyTorch 1.13's CPU result is not the correctly rounded one, the case carries "alternatives":
PyTorch's float32 op on the exact inputs rounded once to the dtype (what a compute-in-float32,
round-once kernel gives), and the float64 result rounded to the dtype, where these differ from
PyTorch's. The test accepts, per element, a value within the tolerance of PyTorch's OR of an
alternative, and prints how many elements needed one. No tolerance is widened to cover PyTorch's own
rounding. The known cases (torch_vs_exact_ulps records the largest distance per case):
  - bfloat16 matmul: PyTorch 1.13's CPU gemm (gemm_notrans_) accumulates the dot product in bfloat16,
    rounding the running sum at every step (up to ~50 ulps).
  - bfloat16 gelu tanh: computed with bfloat16 intermediates (1 + tanh(..) cancels to 0 for x < -3:
    gelu(-3.5) is -0.0 instead of -0.000618).
  - bfloat16 gelu (erf): PyTorch's vectorized float32 erf is the Abramowitz-Stegun 7.1.26 polynomial
    (absolute error 1.5e-7), so results of ~1e-7 (x < -5) are up to ~16 ulps off; bfloat16 subnormal
    inputs give 0 instead of x/2.
  - bfloat16 log_softmax / cross_entropy: max + log(sum(exp)) is rounded to bfloat16 before x - it,
    so results near 0 are off by up to the ulp of the row maximum (log_softmax(30 | row) is 0, not
    -4.5e-5).
  - float16 mean: the sum is rounded to float16 before the division, so a sum above 65504 gives inf
    where the mean itself is finite (mean/overflow_sum, with a note).
  - float16 mse_loss: the kernel rounds a - b to float16 before squaring (2 ulps).
  - bfloat16/float16 pow 3, float16 mean: 1 ulp (double rounding), within the tolerance anyway.

Ops PyTorch 1.13 does not implement for a dtype on the CPU ("exp_vml_cpu" not implemented for 'Half',
...) are recorded with torch_error (PyTorch's message) and, instead of PyTorch's result, PyTorch's own
float32 op applied to the exact inputs and rounded once to the dtype ("reference": "float32-rounded"),
which is what PyTorch's kernels for the other 16-bit dtype (and later PyTorch versions) compute. The
exception is bfloat16 mse_loss ("reference": "torch-composed"): PyTorch's mse kernel rounds a - b to
the dtype before squaring (1.13 for float16, later versions for bfloat16 too), so the reference is
that kernel written with the dtype's own ops ((a - b) * (a - b), then .mean()/.sum()). Where PyTorch
has the kernel, "reference" is "torch". The float16 matmul row is such a float32-rounded row; its
torch_error is PyTorch's '"addmm_impl_cpu_" not implemented for 'Half''.
"""
import json
import math
import os
import sys

import numpy as np
import torch
import torch.nn.functional as F

SEED = 20261123
HERE = os.path.dirname(os.path.abspath(__file__))
OUT = os.path.join(HERE, "cases.json")
COMMAND = "/usr/bin/python3 tests/dtype_parity/make_cases.py"

DTYPES = {"float16": torch.float16, "bfloat16": torch.bfloat16, "float64": torch.float64}

# ---------------------------------------------------------------- bit patterns


def to_bits(t):
    """A tensor's elements as JSON-able exact encodings: uint16 ints, uint32 ints or hex strings."""
    t = t.detach().contiguous().reshape(-1)
    if t.dtype in (torch.float16, torch.bfloat16):
        return [int(v) for v in t.view(torch.int16).numpy().view(np.uint16)]
    if t.dtype == torch.float32:
        return [int(v) for v in t.view(torch.int32).numpy().view(np.uint32)]
    if t.dtype == torch.float64:
        return ["%016x" % int(v) for v in t.view(torch.int64).numpy().view(np.uint64)]
    if t.dtype == torch.int64:
        return [int(v) for v in t]
    raise TypeError(t.dtype)


def from_bits(bits, dtype, shape):
    if dtype in (torch.float16, torch.bfloat16):
        a = np.array(bits, dtype=np.uint16).view(np.int16)
        return torch.from_numpy(a.copy()).view(dtype).reshape(shape)
    if dtype == torch.float32:
        a = np.array(bits, dtype=np.uint32).view(np.int32)
        return torch.from_numpy(a.copy()).view(dtype).reshape(shape)
    if dtype == torch.float64:
        a = np.array([int(b, 16) for b in bits], dtype=np.uint64).view(np.int64)
        return torch.from_numpy(a.copy()).view(dtype).reshape(shape)
    raise TypeError(dtype)


def key_name(dtype):
    return {torch.float16: "bits16", torch.bfloat16: "bits16", torch.float32: "bits32",
            torch.float64: "hex64", torch.int64: "int64"}[dtype]


def dtype_name(dtype):
    return str(dtype).replace("torch.", "")


def encode(t):
    return {"dtype": dtype_name(t.dtype), "shape": list(t.shape), key_name(t.dtype): to_bits(t)}


def ordered(t):
    """Bit patterns mapped to integers that increase with the value (+0 and -0 both 0)."""
    t = t.contiguous().reshape(-1)
    if t.dtype in (torch.float16, torch.bfloat16):
        b = t.view(torch.int16).to(torch.int64) & 0xFFFF
        sign, mag = b >> 15, b & 0x7FFF
    elif t.dtype == torch.float32:
        b = t.view(torch.int32).to(torch.int64) & 0xFFFFFFFF
        sign, mag = b >> 31, b & 0x7FFFFFFF
    else:
        b = t.view(torch.int64)
        sign, mag = (b < 0).to(torch.int64), b & 0x7FFFFFFFFFFFFFFF
    return torch.where(sign == 1, -mag, mag)


def ulp_distance(a, b):
    """Largest distance in ulps; inf when NaN-ness or an infinity differs."""
    a, b = a.reshape(-1), b.reshape(-1)
    if a.shape != b.shape:
        return float("inf")
    an, bn = torch.isnan(a), torch.isnan(b)
    if not torch.equal(an, bn):
        return float("inf")
    ai, bi = torch.isinf(a), torch.isinf(b)
    if (ai | bi).any() and not torch.equal(a[ai | bi], b[ai | bi]):
        return float("inf")
    keep = ~an
    if not keep.any():
        return 0
    return int((ordered(a[keep]) - ordered(b[keep])).abs().max())


# ---------------------------------------------------------------- inputs

rng = np.random.default_rng(SEED)

EDGE16 = {
    # +0, -0, smallest subnormal, largest subnormal, smallest normal, 1, -1, 65504, -65504, inf, -inf,
    # NaN, 1/3, 0.5, 2, -2^-24 (subnormal), 1000, 1-2^-11
    torch.float16: [0x0000, 0x8000, 0x0001, 0x03FF, 0x0400, 0x3C00, 0xBC00, 0x7BFF, 0xFBFF, 0x7C00,
                    0xFC00, 0x7E00, 0x3555, 0x3800, 0x4000, 0x8001, 0x63D0, 0x3BFF],
    # +0, -0, smallest subnormal, largest subnormal, smallest normal, 1, -1, largest finite (3.39e38),
    # its negative, inf, -inf, NaN, 1/3, 0.5, 2, -smallest subnormal, 1000, 1-2^-8
    torch.bfloat16: [0x0000, 0x8000, 0x0001, 0x007F, 0x0080, 0x3F80, 0xBF80, 0x7F7F, 0xFF7F, 0x7F80,
                     0xFF80, 0x7FC0, 0x3EAB, 0x3F00, 0x4000, 0x8001, 0x447A, 0x3F7F],
}


def rand(dtype, shape, scale=1.0, low=None, high=None):
    n = int(np.prod(shape))
    if low is not None:
        v = rng.uniform(low, high, n)
    else:
        v = rng.standard_normal(n) * scale
    if dtype == torch.float64:
        return torch.tensor(v, dtype=torch.float64).reshape(shape)
    return torch.tensor(v, dtype=torch.float32).to(dtype).reshape(shape)


def grid64(shape, low=-8.0, high=8.0):
    """float64 values that are multiples of 2^-10 in [low, high): every sum of up to 2^30 of them is
    exact in float64, whatever the order."""
    n = int(np.prod(shape))
    v = np.floor(rng.uniform(low, high, n) * 1024) / 1024
    return torch.tensor(v, dtype=torch.float64).reshape(shape)


def edge(dtype):
    if dtype == torch.float64:
        v = [0.0, -0.0, 5e-324, 2.2250738585072009e-308, 2.2250738585072014e-308, 1.0, -1.0,
             1.7976931348623157e308, -1.7976931348623157e308, float("inf"), float("-inf"), float("nan"),
             1 / 3, 0.5, 2.0, -5e-324, 1000.0, 1 - 2 ** -53]
        return torch.tensor(v, dtype=torch.float64)
    return from_bits(EDGE16[dtype], dtype, (len(EDGE16[dtype]),))


def vals(dtype, values):
    """Given values rounded to the dtype (through float32 for the 16-bit types)."""
    if dtype == torch.float64:
        return torch.tensor(values, dtype=torch.float64)
    return torch.tensor(values, dtype=torch.float32).to(dtype)


def bits16(dtype, b):
    return from_bits(b, dtype, (len(b),))


# ---------------------------------------------------------------- ops

EXACT, TRANSC, REDUCE = "exact", "transcendental", "reduction"


def torch_op(op, args):
    """(callable on torch tensors, class)."""
    if op in ("add", "sub", "mul", "div", "maximum"):
        f = {"add": torch.add, "sub": torch.sub, "mul": torch.mul, "div": torch.div, "maximum": torch.maximum}[op]
        return (lambda a, b: f(a, b)), EXACT
    if op in ("neg", "abs", "relu"):
        return {"neg": torch.neg, "abs": torch.abs, "relu": torch.relu}[op], EXACT
    if op in ("sigmoid", "tanh", "exp", "log", "sqrt"):
        return getattr(torch, op), TRANSC
    if op == "gelu":
        return (lambda a: F.gelu(a, approximate=args["approximate"])), TRANSC
    if op == "pow":
        e = args["exponent"]
        return (lambda a: torch.pow(a, e)), (EXACT if e == 2 else TRANSC)
    if op == "add_scalar":
        return (lambda a: a + args["scalar"]), EXACT
    if op == "mul_scalar":
        return (lambda a: a * args["scalar"]), EXACT
    if op in ("sum", "mean"):
        f = getattr(torch, op)
        if "dim" in args:
            return (lambda a: f(a, args["dim"])), REDUCE
        return (lambda a: f(a)), REDUCE
    if op == "max":
        return (lambda a: torch.max(a)), EXACT
    if op == "softmax":
        return (lambda a: torch.softmax(a, args["dim"])), TRANSC
    if op == "log_softmax":
        return (lambda a: torch.log_softmax(a, args["dim"])), TRANSC
    if op == "matmul":
        return torch.matmul, REDUCE
    if op == "mse_loss":
        return (lambda a, b: F.mse_loss(a, b, reduction=args["reduction"])), REDUCE
    if op == "cross_entropy":
        return (lambda a, y: F.cross_entropy(a, y, reduction=args["reduction"])), REDUCE
    raise KeyError(op)


def base_tolerance(op, cls, dtype):
    if dtype == torch.float64:
        if cls == EXACT:
            return 0
        if op in ("sum", "mean", "matmul"):
            return 0  # float64 rows of these use grid64 inputs: exact in every order (mean: one division)
        if op in ("softmax", "log_softmax", "cross_entropy", "mse_loss"):
            return 4
        return 2
    return 0 if cls == EXACT else 1


def same_values(a, b):
    """Equal bit patterns, any NaN equal to any NaN."""
    a, b = a.reshape(-1), b.reshape(-1)
    nan = torch.isnan(a) & torch.isnan(b)
    return bool(((ordered(a) == ordered(b)) & (torch.signbit(a) == torch.signbit(b)) | nan).all())


cases = []
stats = {}


def ulp_of(v, dtype):
    """The spacing of `dtype` at |v| (float64 tensor of exact values; 0 gets the subnormal spacing)."""
    mant, emin = {torch.float16: (10, -14), torch.bfloat16: (7, -126), torch.float64: (52, -1022)}[dtype]
    a = v.abs().clamp_min(2.0 ** emin)
    e = torch.floor(torch.log2(a)).clamp_min(emin)
    return torch.pow(2.0, e - mant)


def cancellation_bound(op, args, inputs, dtype):
    """A bound on the absolute error that the final cancellation of `op` lets any float32 (float64 for
    float64 rows) computation make, per output element, or None for ops without one:
      gelu:         0.5 |x| (1 + erf(x / sqrt 2)): the float32 value of 1 + erf(..) is off by up to two
                    ulps of 1 (erf's own error, then the sum), and by no more than a few times the term
                    itself (erf saturates at -1): error <= 0.5 |x| min(4u, 4 (1 + erf));
      gelu tanh:    the same with 1 + tanh(sqrt(2/pi) (x + 0.044715 x^3));
      log_softmax:  (x - max) - log(sum(exp(x - max))), PyTorch's float32 formula: x - max rounds by
                    up to u |x - max|, the log of the sum of n exp is off by up to u (|log s| + n + 1),
                    whatever the result's size (so results near 0 get more ulps);
      cross_entropy: the log_softmax bound at the label, reduced as the loss is (mean, sum, none).
    u is 2^-24 for the 16-bit dtypes (they compute in float32) and 2^-53 for float64."""
    u = 2.0 ** -53 if dtype == torch.float64 else 2.0 ** -24
    x = inputs[0].double()
    if op == "gelu":
        if args["approximate"] == "tanh":
            term = 1 + torch.tanh(math.sqrt(2 / math.pi) * (x + 0.044715 * x ** 3))
        else:
            term = 1 + torch.erf(x / math.sqrt(2))
        return 0.5 * x.abs() * torch.minimum(torch.full_like(x, 4 * u), 4 * term)
    if op in ("log_softmax", "cross_entropy"):
        m = x.max(dim=-1, keepdim=True).values
        logs = torch.logsumexp(x - m, dim=-1, keepdim=True)
        n = x.shape[-1]
        b = u * ((x - m).abs() + logs.abs() + n + 1)
        b = torch.where(torch.isfinite(b), b, torch.zeros_like(b))
        if op == "log_softmax":
            return b
        per_row = b.gather(1, inputs[1].unsqueeze(1)).squeeze(1)
        red = args["reduction"]
        return per_row if red == "none" else (per_row.sum() if red == "sum" else per_row.mean())
    return None


def composed_mse(a, b, reduction):
    """PyTorch's CPU mse kernel written with the dtype's own ops: (a - b) rounded to the dtype, then
    squared and rounded, then reduced (mean: the dtype's sum rounded, then divided)."""
    d = a - b
    loss = d * d
    return loss if reduction == "none" else (loss.sum() if reduction == "sum" else loss.mean())


def add_case(dtype, op, label, inputs, args=None, note=None, tol=None):
    """inputs: torch tensors (the float ones already in `dtype`; labels int64)."""
    args = dict(args or {})
    f, cls = torch_op(op, args)
    name = "%s/%s/%s" % (dtype_name(dtype), op + ("" if not args else "(" + ",".join(
        "%s=%s" % kv for kv in sorted(args.items())) + ")"), label)
    case = {"name": name, "dtype": dtype_name(dtype), "op": op, "args": args,
            "inputs": [encode(t) for t in inputs]}
    # The exact result (float64 computation on the exact inputs), rounded to the dtype.
    exact_inputs = [t.double() if t.is_floating_point() else t for t in inputs]
    exact = f(*exact_inputs)
    exact_rounded = exact.to(dtype) if dtype == torch.float64 else exact.float().to(dtype)
    f32_inputs = [t.float() if t.is_floating_point() else t for t in inputs]
    f32_rounded = None if dtype == torch.float64 else f(*f32_inputs).to(dtype)
    try:
        got = f(*inputs)
        case["reference"] = "torch"
    except RuntimeError as e:
        case["torch_error"] = str(e).split("\n")[0]
        if op == "mse_loss":
            # PyTorch's mse kernel (float16 in 1.13, bfloat16 in later versions) rounds a - b.
            case["reference"] = "torch-composed"
            got = composed_mse(inputs[0], inputs[1], args["reduction"])
        else:
            case["reference"] = "float32-rounded"
            got = f32_rounded
    assert got.dtype == dtype, (name, got.dtype)
    d = ulp_distance(got, exact_rounded)
    base = base_tolerance(op, cls, dtype) if tol is None else tol
    case["expected"] = encode(got)
    case["tol_ulps"] = base
    case["torch_vs_exact_ulps"] = d if d != float("inf") else "inf"
    # Other values the test accepts (each within the tolerance): PyTorch's float32 op rounded once,
    # and the exact result rounded once, where they differ from the expected value.
    alts = []
    if f32_rounded is not None and not same_values(got, f32_rounded):
        alts.append(dict(encode(f32_rounded), label="PyTorch's float32 op rounded once"))
    if not same_values(got, exact_rounded) and (f32_rounded is None or not same_values(f32_rounded, exact_rounded)):
        alts.append(dict(encode(exact_rounded), label="the exact result rounded once"))
    if alts:
        case["alternatives"] = alts
    bound = cancellation_bound(op, args, inputs, dtype)
    if bound is not None:
        ulp = ulp_of(exact.reshape(-1), dtype)
        extra = torch.clamp(torch.ceil(bound.reshape(-1) / ulp) - 1, min=0)
        extra = torch.where(torch.isfinite(extra), extra, torch.zeros_like(extra))  # NaN, inf: exact
        if (extra > 0).any():
            case["tol_ulps_elem"] = [int(base + e) for e in extra]
    if note:
        case["note"] = note
    if d > base and cls == EXACT:
        print("WARNING: %s: PyTorch is %s ulps from the exact result rounded once (tolerance %d)"
              % (name, d, base), file=sys.stderr)
    stats.setdefault(dtype_name(dtype), 0)
    stats[dtype_name(dtype)] += 1
    cases.append(case)


def add_conversion(dtype, label, src):
    """src: float32 tensor (to dtype) or dtype tensor (to float32); float64 rows: both directions."""
    if src.dtype == torch.float32:
        out = src.to(dtype)
        op = "to"
    else:
        out = src.to(torch.float32)
        op = "to_float32"
    cases.append({"name": "%s/%s/%s" % (dtype_name(dtype), op, label), "dtype": dtype_name(dtype), "op": op,
                  "args": {}, "inputs": [encode(src)], "expected": encode(out), "tol_ulps": 0,
                  "reference": "torch", "torch_vs_exact_ulps": 0})
    stats.setdefault(dtype_name(dtype), 0)
    stats[dtype_name(dtype)] += 1


def f32_from_bits(b):
    return from_bits(b, torch.float32, (len(b),))


def f32(values):
    return torch.tensor(values, dtype=torch.float32)


# ---------------------------------------------------------------- the table


def conversions(dtype):
    if dtype == torch.float16:
        ties = [1 + 2 ** -11, 1 + 3 * 2 ** -11, -(1 + 2 ** -11), 2048 + 1, 2048 + 3,  # halfway: to even
                np.nextafter(np.float32(1 + 2 ** -11), np.float32(2)),  # just above halfway: up
                np.nextafter(np.float32(1 + 2 ** -11), np.float32(0)),  # just below: down
                2 ** -25, 3 * 2 ** -25, 5 * 2 ** -25, -(2 ** -25),  # subnormal halfway: 0, 2^-23, 2^-23, -0
                2 ** -26, float(np.nextafter(np.float32(2 ** -25), np.float32(1))),  # 0; smallest subnormal
                1023.5 * 2 ** -24, 2 ** -14 - 2 ** -25,  # largest subnormal/smallest normal boundary
                65504, 65519, 65519.996, 65520, -65520, 65536, 1e10, 3.4028235e38,  # overflow at 65520
                0.0, -0.0, float("inf"), float("-inf"), float("nan"), 1e-45, -1e-45, 1.17549435e-38]
        add_conversion(dtype, "ties_and_edges", f32(ties))
    elif dtype == torch.bfloat16:
        b = [0x3F808000, 0x3F818000, 0xBF808000, 0x3F808001, 0x3F807FFF,  # halfway to even, above, below
             0x00008000, 0x00018000, 0x00000001, 0x007FFFFF, 0x007F8000,  # float32 subnormals
             0x7F7F7FFF, 0x7F7F8000, 0x7F7FFFFF, 0xFF7FFFFF,  # largest bf16, halfway to inf (even: inf)
             0x00000000, 0x80000000, 0x7F800000, 0xFF800000, 0x7FC00000, 0x7F800001, 0xFFC00000,
             0x3EAAAAAB, 0x4B7FFFFF, 0x47800000]
        add_conversion(dtype, "ties_and_edges", f32_from_bits(b))
    else:
        # float64 -> float32 (ties to even, overflow, subnormals) and float32 -> float64.
        v = [1 + 2 ** -24, 1 + 3 * 2 ** -24, -(1 + 2 ** -24), 1 + 2 ** -24 + 2 ** -52, 1 + 2 ** -24 - 2 ** -52,
             2 ** -150, 3 * 2 ** -150, 2 ** -149, 2 ** -126 - 2 ** -150, 3.4028235677973366e38,
             3.4028235677973366e38 * (1 + 2 ** -25), 1e39, -1e39, 1e-50, 0.0, -0.0, float("inf"),
             float("-inf"), float("nan"), 0.1, 1 / 3]
        cases.append({"name": "float64/to_float32/ties_and_edges", "dtype": "float64", "op": "to_float32",
                      "args": {}, "inputs": [encode(torch.tensor(v, dtype=torch.float64))],
                      "expected": encode(torch.tensor(v, dtype=torch.float64).float()), "tol_ulps": 0,
                      "reference": "torch", "torch_vs_exact_ulps": 0})
        src = f32_from_bits([0x3F800001, 0x00000001, 0x7F7FFFFF, 0xFF800000, 0x7FC00000, 0x80000000, 0x3DCCCCCD])
        cases.append({"name": "float64/to/f32_values", "dtype": "float64", "op": "to", "args": {},
                      "inputs": [encode(src)], "expected": encode(src.double()), "tol_ulps": 0,
                      "reference": "torch", "torch_vs_exact_ulps": 0})
        stats["float64"] = stats.get("float64", 0) + 2
        return
    add_conversion(dtype, "random", torch.tensor(rng.standard_normal(48) * 100, dtype=torch.float32))
    add_conversion(dtype, "random_small", torch.tensor(rng.standard_normal(32) * 1e-6, dtype=torch.float32))
    add_conversion(dtype, "edges", edge(dtype))
    add_conversion(dtype, "random", rand(dtype, (48,), 50.0))


def elementwise(dtype):
    is64 = dtype == torch.float64
    e = edge(dtype)
    n = e.numel()
    big = 65504.0 if dtype == torch.float16 else (3.3895314e38 if dtype == torch.bfloat16 else 1.7976931348623157e308)
    # Binary ops: random pairs, and edge pairs (each edge value against a permutation of the edges
    # that never pairs +0 with -0, where maximum's result sign is unspecified).
    perm = list(range(n))[::-1]
    eb = e[perm]
    for op in ("add", "sub", "mul", "div", "maximum"):
        add_case(dtype, op, "random", [rand(dtype, (4, 8), 3.0), rand(dtype, (4, 8), 3.0)])
        add_case(dtype, op, "edges", [e, eb])
    # Rounding ties, overflow, underflow in the result.
    if dtype == torch.float16:
        a = bits16(dtype, [0x3C00, 0x3C01, 0x3C00, 0x7BFF, 0x7BFF, 0xFBFF, 0x0001, 0x0200, 0x6400, 0x6401, 0x0001])
        b = bits16(dtype, [0x1000, 0x1000, 0x1400, 0x7BFF, 0x5000, 0xFBFF, 0x0001, 0x0200, 0x3800, 0x3800, 0x8001])
        # 1 + 2^-11 (tie: 1), 1+2^-10 + 2^-11 (tie: up to even), 1+2^-10, 65504*2 (inf), 65504+32 (tie:
        # inf), -inf, subnormal sums, 1024 + 0.5 (tie: 1024), 1025 + 0.5 (tie: 1026), 2^-24 - 2^-24 (+0)
        add_case(dtype, "add", "ties_overflow", [a, b])
        add_case(dtype, "mul", "ties_overflow", [a, b])
        add_case(dtype, "div", "ties_overflow", [a, b])
        add_case(dtype, "sub", "ties_overflow", [a, b])
    elif dtype == torch.bfloat16:
        a = bits16(dtype, [0x3F80, 0x3F81, 0x3F80, 0x7F7F, 0x7F7F, 0xFF7F, 0x0001, 0x0040, 0x4380, 0x4381, 0x0001])
        b = bits16(dtype, [0x3B80, 0x3B80, 0x3C00, 0x7F7F, 0x7300, 0xFF7F, 0x0001, 0x0040, 0x3F00, 0x3F00, 0x8001])
        add_case(dtype, "add", "ties_overflow", [a, b])
        add_case(dtype, "mul", "ties_overflow", [a, b])
        add_case(dtype, "div", "ties_overflow", [a, b])
        add_case(dtype, "sub", "ties_overflow", [a, b])
    for op in ("neg", "abs", "relu"):
        add_case(dtype, op, "random", [rand(dtype, (4, 8), 3.0)])
        add_case(dtype, op, "edges", [e])
    # Transcendental functions: a random tensor over the interesting range, the edges, and values near
    # where the result overflows or underflows.
    add_case(dtype, "exp", "random", [rand(dtype, (4, 16), 4.0)])
    add_case(dtype, "exp", "edges", [e])
    if dtype == torch.float16:
        # exp(11.0859375) = 65246 .. exp(11.09375) = 65758: the overflow threshold (65520); exp(-17.33)
        # is the smallest subnormal's neighbourhood.
        add_case(dtype, "exp", "overflow_underflow",
                 [vals(dtype, [11.0, 11.0859375, 11.08984375, 11.09375, 11.1, 12.0, -9.7, -10.0, -15.0, -16.6,
                               -17.0, -17.33, -17.5, -18.0, -100.0])])
    elif dtype == torch.bfloat16:
        add_case(dtype, "exp", "overflow_underflow",
                 [vals(dtype, [88.0, 88.5, 88.72, 89.0, 90.0, -87.0, -88.0, -90.0, -100.0, -103.0, -104.0, -110.0])])
    else:
        add_case(dtype, "exp", "overflow_underflow", [vals(dtype, [709.0, 709.78, 710.0, -708.0, -745.0, -746.0])])
    for op in ("log", "sqrt"):
        add_case(dtype, op, "random_positive", [rand(dtype, (4, 16), low=0.001, high=100.0)])
        add_case(dtype, op, "edges", [e])  # 0 -> -inf / 0, negative -> NaN, subnormals, inf
    for op in ("sigmoid", "tanh"):
        add_case(dtype, op, "random", [rand(dtype, (4, 16), 4.0)])
        add_case(dtype, op, "edges", [e])
    for approx in ("none", "tanh"):
        # The bulk [-3, 3), then the negative tail, where 1 + erf(..) (1 + tanh(..)) cancels and the
        # float32 computation itself is off by many ulps of the tiny result (tol_ulps_elem).
        add_case(dtype, "gelu", "random", [rand(dtype, (4, 16), low=-3.0, high=3.0)], {"approximate": approx})
        add_case(dtype, "gelu", "edges", [e], {"approximate": approx})
        if not is64:  # (in float64 the tail is as ill-conditioned, and says nothing more)
            add_case(dtype, "gelu", "negative_tail", [vals(dtype, [-3.25, -3.5, -3.75, -4.0, -4.5, -5.0, -5.5, -6.0])],
                     {"approximate": approx})
    for ex in (2, 3):
        add_case(dtype, "pow", "random", [rand(dtype, (4, 16), 4.0)], {"exponent": ex})
        add_case(dtype, "pow", "edges", [e], {"exponent": ex})  # 65504^2 -> inf, subnormal^2 -> 0
    for op in ("add_scalar", "mul_scalar"):
        add_case(dtype, op, "random", [rand(dtype, (4, 16), 10.0)], {"scalar": 2.5})
        add_case(dtype, op, "edges", [e], {"scalar": 2.5})
    if not is64:
        # Near overflow: 65504 * 2.5, 26208 * 2.5 = 65520 (inf), 26200 * 2.5 = 65500.
        near = [26200.0, 26208.0, 26224.0, 65480.0, 65500.0] if dtype == torch.float16 else [1.3e38, 1.36e38, 3.3e38]
        add_case(dtype, "mul_scalar", "near_overflow", [vals(dtype, near)], {"scalar": 2.5})
        add_case(dtype, "add_scalar", "near_overflow", [vals(dtype, near)], {"scalar": 2.5})


def reductions(dtype):
    is64 = dtype == torch.float64
    r = (lambda shape, s=2.0: grid64(shape)) if is64 else (lambda shape, s=2.0: rand(dtype, shape, s))
    for op in ("sum", "mean"):
        add_case(dtype, op, "all_64", [r((4, 16))])
        add_case(dtype, op, "all_7", [r((7,))])
        add_case(dtype, op, "dim1", [r((4, 16))], {"dim": 1})
        add_case(dtype, op, "dim0", [r((4, 16))], {"dim": 0})
        add_case(dtype, op, "dim-1_3d", [r((2, 3, 8))], {"dim": -1})
        # Not grid values: float64 rows allow 3 ulps (5 additions in another order, each rounding by
        # at most half an ulp of a partial sum no larger than the total).
        add_case(dtype, op, "edges_dim1", [torch.stack([edge(dtype)[:6], edge(dtype)[12:18]])], {"dim": 1},
                 tol=3 if is64 else None)
    if dtype == torch.float16:
        # Sum of values whose float32 sum is > 65504 (inf), and sums that stay finite.
        add_case(dtype, "sum", "overflow", [vals(dtype, [[40000.0, 30000.0], [40000.0, -30000.0], [65504.0, 15.0], [65504.0, 16.0]])], {"dim": 1})
        add_case(dtype, "mean", "overflow_sum",
                 [vals(dtype, [[40000.0, 30000.0], [60000.0, 6000.0], [65504.0, -65504.0]])], {"dim": 1},
                 note="PyTorch 1.13's CPU mean is the sum rounded to float16 (inf here) divided by n: inf "
                      "where the mean rounded once is 35000 / 33000 (in alternatives)")
    add_case(dtype, "max", "random", [r((4, 16))])
    add_case(dtype, "max", "with_inf", [torch.cat([r((7,)), vals(dtype, [float("-inf"), float("inf")])])])
    add_case(dtype, "max", "with_nan", [torch.cat([r((7,)), vals(dtype, [float("nan")]), r((3,))])])
    add_case(dtype, "max", "negative", [-(r((9,)).abs()) - (1.0 if not is64 else 1.0)])
    # softmax / log_softmax over the last dim: random rows, a row with -inf, a row with large values
    # (the max subtraction), a row of equal values.
    x = r((4, 16), 3.0) if not is64 else rand(dtype, (4, 16), 3.0)
    for op in ("softmax", "log_softmax"):
        add_case(dtype, op, "random", [x], {"dim": -1})
        add_case(dtype, op, "random_3d", [rand(dtype, (2, 3, 8), 2.0)], {"dim": -1})
        big = 60000.0 if dtype == torch.float16 else 1e30
        rows = vals(dtype, [[0.0, 1.0, 2.0, float("-inf"), 3.0, -1.0],
                            [big, big - 8 if dtype == torch.float16 else big, 0.0, -big, 1.0, 2.0],
                            [5.0, 5.0, 5.0, 5.0, 5.0, 5.0],
                            [-20.0, -10.0, 0.0, 10.0, 20.0, 30.0]])
        add_case(dtype, op, "edges", [rows], {"dim": -1})
        add_case(dtype, op, "all_neg_inf_row", [vals(dtype, [[float("-inf")] * 4, [0.0, 1.0, 2.0, 3.0]])], {"dim": -1})
    # matmul (2D)
    if is64:
        add_case(dtype, "matmul", "4x8_8x4", [grid64((4, 8), -4, 4), grid64((8, 4), -4, 4)])
        add_case(dtype, "matmul", "8x8_8x8", [grid64((8, 8), -4, 4), grid64((8, 8), -4, 4)])
    else:
        add_case(dtype, "matmul", "4x8_8x4", [rand(dtype, (4, 8)), rand(dtype, (8, 4))])
        add_case(dtype, "matmul", "8x8_8x8", [rand(dtype, (8, 8)), rand(dtype, (8, 8))])
        add_case(dtype, "matmul", "3x16_16x2", [rand(dtype, (3, 16)), rand(dtype, (16, 2))])
    # Losses.
    for red in ("mean", "sum", "none"):
        add_case(dtype, "mse_loss", "random", [rand(dtype, (4, 8), 2.0), rand(dtype, (4, 8), 2.0)], {"reduction": red})
    for red in ("mean", "sum", "none"):
        add_case(dtype, "cross_entropy", "random_8x5",
                 [rand(dtype, (8, 5), 2.0), torch.tensor(rng.integers(0, 5, 8), dtype=torch.int64)], {"reduction": red})
    add_case(dtype, "cross_entropy", "random_4x16",
             [rand(dtype, (4, 16), 4.0), torch.tensor(rng.integers(0, 16, 4), dtype=torch.int64)], {"reduction": "mean"})


def main():
    torch.manual_seed(SEED)
    for name, dtype in DTYPES.items():
        conversions(dtype)
        elementwise(dtype)
        reductions(dtype)
    names = [c["name"] for c in cases]
    assert len(names) == len(set(names)), "case names must be unique (they are the test's row names)"
    header = {
        "generator": "tests/dtype_parity/make_cases.py",
        "command": COMMAND,
        "torch_version": torch.__version__,
        "numpy_version": np.__version__,
        "seed": SEED,
        "cases_per_dtype": stats,
        "encoding": "bits16: uint16 bit patterns (float16/bfloat16); bits32: uint32 (float32); hex64: "
                    "IEEE-754 float64 bit patterns in hex; int64: values. tol_ulps: allowed distance in "
                    "ulps of the output dtype (ordered bit patterns, +0 == -0; at 0 the bits must be "
                    "equal); tol_ulps_elem: per element, where a cancellation needs more; NaN matches "
                    "any NaN, infinities must match exactly. reference 'torch': PyTorch's kernel in the "
                    "dtype; 'float32-rounded': PyTorch has no CPU kernel for the dtype (torch_error), the "
                    "expected value is PyTorch's float32 op on the exact inputs rounded once; "
                    "'torch-composed': PyTorch's kernel written with the dtype's ops. alternatives: "
                    "other accepted values (labelled). torch_vs_exact_ulps: distance of the expected "
                    "value from the float64 result rounded to the dtype (information). The docstring of "
                    "the generator says why each tolerance is what it is.",
    }
    with open(OUT, "w") as f:
        f.write('{"header": ' + json.dumps(header, sort_keys=True) + ',\n"cases": [\n')
        f.write(",\n".join(json.dumps(c, sort_keys=True, separators=(",", ":")) for c in cases))
        f.write("\n]}\n")
    print("%d cases (%s), %d bytes -> %s" % (len(cases), stats, os.path.getsize(OUT), OUT))


if __name__ == "__main__":
    main()
