"""Parity cases for every unary op of engine/ops/native_ops.toml, made from the table itself: a new op
there is checked against PyTorch here without a line of its own. For each op: its values over its
domain and at the edges (0, -0, inf, -inf, NaN), in float32, float64 and float16; what an int64 and a
bool tensor give (a float result, the values as they are, or PyTorch's error); its gradient and grad_fn;
the Tensor method, the in-place forms (Tensor.NAME_, torch.NAME_, on an int64 tensor too) and out=.
Each case_* takes the torch module (GPU Lab's or PyTorch's)."""
import pathlib
import tomllib

TABLE = pathlib.Path(__file__).resolve().parents[2] / "engine" / "ops" / "native_ops.toml"
with open(TABLE, "rb") as _f:
    UNARY = tomllib.load(_f)["unary"]

# Inputs inside each domain (the values PyTorch's own OpInfo samples would stay within).
DOMAIN_VALUES = {
    "any": [-2.5, -1.0, -0.3, 0.0, 0.4, 1.0, 3.0],
    "positive": [0.1, 0.5, 1.0, 2.0, 10.0],
    "away_from_zero": [-2.5, -0.7, -0.3, 0.3, 0.9, 2.0],
    "unit": [-0.9, -0.5, -0.1, 0.0, 0.3, 0.8],
    "away_from_steps": [-2.25, -1.7, -0.3, 0.2, 1.25, 2.7],
    "above_minus_one": [-0.5, -0.1, 0.0, 0.5, 3.0],
}
EDGES = [0.0, -0.0, float("inf"), float("-inf"), float("nan")]
# Inputs where round's ties to even, and the steps' signed zeros, show.
STEP_EDGES = [-2.5, -1.5, -0.5, 0.5, 1.5, 2.5, -0.2, 0.7]

OPTIONS = {}


def _half_on_the_cpu(torch, name, x):
    """torch.NAME of a float16 CPU tensor. PyTorch 2 computes it in float32 and rounds once (its Half CPU
    kernels' opmath); 1.13 had no Half kernel for most of these ("not implemented for 'Half'"), and there
    the same float32-then-round stands in for 2.x's result."""
    try:
        return getattr(torch, name)(x), getattr(x, name)()
    except RuntimeError as e:
        if "not implemented for 'Half'" not in str(e) or not torch.__version__.startswith("1."):
            raise
        y = getattr(torch, name)(x.float()).half()
        return y, y


def _values(name, op, dtype):
    def case(torch):
        values = DOMAIN_VALUES[op["domain"]] + EDGES + (STEP_EDGES if op["domain"] == "away_from_steps" else [])
        x = torch.tensor(values, dtype=getattr(torch, dtype))
        if dtype == "float16":
            y, method = _half_on_the_cpu(torch, name, x)
        else:
            y, method = getattr(torch, name)(x), getattr(x, name)()
        return [y, str(y.dtype), method]
    return case


def _ints(name, dtype):
    def case(torch):
        x = torch.tensor([-3, 0, 1, 2, 7]) if dtype == "int64" else torch.tensor([True, False, True])
        y = getattr(torch, name)(x)
        return [y, str(y.dtype)]
    return case


def _gradient(name, op):
    def case(torch):
        x = torch.tensor(DOMAIN_VALUES[op["domain"]], dtype=torch.float64, requires_grad=True)
        y = getattr(torch, name)(x)
        (y * torch.arange(1.0, len(x) + 1, dtype=torch.float64)).sum().backward()
        return [x.grad, y.grad_fn.name()]
    return case


def _in_place(name, op):
    def case(torch):
        x = torch.tensor(DOMAIN_VALUES[op["domain"]])
        a = x.clone()
        out = getattr(a, name + "_")()
        b = x.clone()
        getattr(torch, name + "_", getattr(torch.Tensor, name + "_"))(b)  # PyTorch has no torch.sign_
        # In place inside a graph: the op's own node, and the gradient of the values before the write.
        leaf = x.clone().double().requires_grad_(True)
        c = leaf * 1
        getattr(c, name + "_")()
        c.sum().backward()
        return [a, out is a, b, c.grad_fn.name(), leaf.grad]
    return case


def _in_place_on_ints(name):
    def case(torch):
        x = torch.tensor([-3, 0, 2])
        getattr(x, name + "_")()
        return x
    return case


def _out(name, op):
    def case(torch):
        x = torch.tensor(DOMAIN_VALUES[op["domain"]])
        out = torch.empty(len(x))
        returned = getattr(torch, name)(x, out=out)
        return [out, returned is out]
    return case


def _out_with_grad(name, op):
    def case(torch):
        x = torch.tensor(DOMAIN_VALUES[op["domain"]], requires_grad=True)
        return getattr(torch, name)(x, out=torch.empty(len(x)))
    return case


def _error_message(template, device="cpu"):
    return template.replace("{device}", device)


for _name, _op in UNARY.items():
    for _dtype in ("float32", "float64", "float16"):
        globals()[f"case_{_name}_{_dtype}"] = _values(_name, _op, _dtype)
    OPTIONS[f"{_name}_float16"] = {"rtol": 1e-3, "atol": 1e-3}
    for _dtype in ("int64", "bool"):
        globals()[f"case_{_name}_of_{_dtype}"] = _ints(_name, _dtype)
    globals()[f"case_{_name}_gradient"] = _gradient(_name, _op)
    globals()[f"case_{_name}_in_place"] = _in_place(_name, _op)
    globals()[f"case_{_name}_in_place_on_int64"] = _in_place_on_ints(_name)
    globals()[f"case_{_name}_out"] = _out(_name, _op)
    globals()[f"case_{_name}_out_with_grad"] = _out_with_grad(_name, _op)
    # PyTorch 2 raises NotImplementedError for a kernel's missing dtype where 1.13 raised RuntimeError
    # (AT_DISPATCH's TORCH_CHECK_NOT_IMPLEMENTED), with the same words; GPU Lab follows 2.x.
    if _op.get("bools") == "error" and _op.get("bool_error_class", "NotImplementedError") == "NotImplementedError":
        OPTIONS[f"{_name}_of_bool"] = {"ours": ("error", "NotImplementedError", _error_message(_op["bool_error"]))}
    if _op["ints"] == "error":
        for _dtype, _type in (("int64", "Long"), ("bool", "Bool")):
            OPTIONS[f"{_name}_of_{_dtype}"] = {"ours": ("error", "NotImplementedError", f"\"{_name}_cpu\" not implemented for '{_type}'")}
        OPTIONS[f"{_name}_in_place_on_int64"] = {"ours": ("error", "NotImplementedError", f"\"{_name}_cpu\" not implemented for 'Long'")}
    if not _op.get("out", True):  # PyTorch's takes no out= either: a TypeError both sides, in pybind11's words here
        OPTIONS[f"{_name}_out"] = OPTIONS[f"{_name}_out_with_grad"] = {"message": False}
