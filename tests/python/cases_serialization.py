"""Parity cases: torch.save and torch.load -- shapes with a zero, views that share a storage, every
dtype's bits, parameters, and the weights-only unpickler's refusals (issue 48, section 1.1 and 2.4).
tests/python/file_interop.py checks the files themselves across GPU Lab's torch and PyTorch."""
import collections
import datetime
import io
import os
import tempfile

# Debian's PyTorch is 1.13, whose torch.load defaults to weights_only=False; GPU Lab follows PyTorch 2.6,
# which made weights_only=True the default. Its messages differ from 1.13's (2.6's are longer).
OPTIONS = {
    "default_load_refuses_a_payload": {"ours": ("error", "UnpicklingError", None), "message": False},
    "weights_only_refuses_a_payload": {"message": False},
    "weights_only_refuses_an_unknown_class": {"message": False},
    "safe_globals_allow_a_class": {"ours": ("value", ("list", ("2026-12-01", "UnpicklingError")))},
}


def _round_trip(torch, obj, **load_args):
    buffer = io.BytesIO()
    torch.save(obj, buffer)
    buffer.seek(0)
    return torch.load(buffer, **load_args)


def case_shapes_with_a_zero_keep_their_shape(torch):
    loaded = _round_trip(torch, [torch.empty(0, 3), torch.zeros(2, 0, 4), torch.ones(())])
    return [t.shape for t in loaded]


def case_views_that_share_a_storage_still_share_it(torch):
    base = torch.arange(12.0).reshape(3, 4)
    row, column = base[1], base[:, 2]
    loaded = _round_trip(torch, {"base": base, "row": row, "column": column})
    loaded["base"][1, 2] = 100.0  # one write shows through every view of the storage
    return [loaded["row"], loaded["column"], loaded["column"].stride(), loaded["row"].storage_offset()]


def case_every_dtype_comes_back_bit_for_bit(torch):
    values = [torch.tensor([1.5, -2.25, 3e-5], dtype=torch.float16), torch.tensor([1.0 / 3.0], dtype=torch.float64),
              torch.tensor([0.1, 7.0], dtype=torch.bfloat16), torch.tensor([2**62 + 1, -(2**62) - 3]),
              torch.tensor([True, False]), torch.tensor([1e-40, 3.14159265])]
    loaded = _round_trip(torch, values)
    return [(t.dtype, t.tolist() == v.tolist()) for t, v in zip(loaded, values)]


def case_a_state_dict_with_its_parameters(torch):
    model = torch.nn.Linear(3, 2)
    with torch.no_grad():  # the two libraries' random initialisations differ
        model.weight.copy_(torch.arange(6.0).reshape(2, 3))
        model.bias.fill_(0.5)
    loaded = _round_trip(torch, model.state_dict())
    fresh = torch.nn.Linear(3, 2)
    fresh.load_state_dict(loaded)
    return [type(loaded).__name__, list(loaded.keys()), fresh.weight, fresh.bias]


def case_a_parameter_stays_a_parameter(torch):
    parameter = torch.nn.Parameter(torch.ones(2, 2))
    loaded = _round_trip(torch, {"p": parameter, "frozen": torch.nn.Parameter(torch.zeros(1), requires_grad=False)})
    return [type(loaded["p"]).__name__, loaded["p"].requires_grad, loaded["frozen"].requires_grad, loaded["p"]]


def case_requires_grad_and_plain_values(torch):
    x = torch.ones(2, requires_grad=True)
    loaded = _round_trip(torch, {"x": x, "epoch": 3, "lr": 0.1, "name": "run", "steps": [1, 2], "pair": (1, "a"),
                                 "none": None, "dtype": torch.float64, "device": torch.device("cpu"),
                                 "shape": torch.Size([2, 3]), "counts": collections.OrderedDict(a=1)})
    return [loaded["x"].requires_grad, loaded["epoch"], loaded["lr"], loaded["name"], loaded["steps"], loaded["pair"],
            loaded["none"], loaded["dtype"], loaded["device"], loaded["shape"], loaded["counts"]]


def case_save_to_a_path_and_load_it(torch):
    with tempfile.TemporaryDirectory() as folder:
        path = os.path.join(folder, "checkpoint.pt")
        torch.save({"w": torch.arange(4)}, path)
        loaded = torch.load(path)
        leftovers = sorted(os.listdir(folder))
    return [loaded["w"], leftovers]


class _Payload:
    """What a hostile checkpoint holds: unpickling it would run a command."""

    def __init__(self, marker):
        self.marker = marker

    def __reduce__(self):
        return (os.system, (f"touch {self.marker}",))


def _payload_outcome(torch, **load_args):
    with tempfile.TemporaryDirectory() as folder:
        marker = os.path.join(folder, "ran")
        buffer = io.BytesIO()
        torch.save({"weights": torch.ones(1), "payload": _Payload(marker)}, buffer)
        buffer.seek(0)
        try:
            torch.load(buffer, **load_args)
        finally:
            if os.path.exists(marker):
                raise AssertionError("the payload ran")
    return "loaded"


def case_default_load_refuses_a_payload(torch):
    # PyTorch 1.13 runs the payload here (its default is weights_only=False): OPTIONS gives 2.6's outcome.
    try:
        return _payload_outcome(torch)
    except AssertionError:
        raise TypeError("PyTorch 1.13 ran it") from None


def case_weights_only_refuses_a_payload(torch):
    return _payload_outcome(torch, weights_only=True)


def case_weights_only_refuses_an_unknown_class(torch):
    return _round_trip(torch, {"day": datetime.date(2026, 12, 1)}, weights_only=True)


def case_full_load_when_asked(torch):
    loaded = _round_trip(torch, {"day": datetime.date(2026, 12, 1), "t": torch.ones(2)}, weights_only=False)
    return [str(loaded["day"]), loaded["t"]]


def case_safe_globals_allow_a_class(torch):
    # torch.serialization.safe_globals is PyTorch 2.5's (OPTIONS: 1.13 has none).
    with torch.serialization.safe_globals([datetime.date]):
        inside = str(_round_trip(torch, {"day": datetime.date(2026, 12, 1)})["day"])
    try:
        _round_trip(torch, {"day": datetime.date(2026, 12, 1)})
        after = "loaded"
    except Exception as e:  # noqa: BLE001 - the refusal is the outcome
        after = type(e).__name__
    return [inside, after]
