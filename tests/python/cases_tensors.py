"""Parity cases: tensors -- creation, printing, shapes, indexing, arithmetic, reductions, autograd and
the errors PyTorch raises. Each case_* takes the torch module (GPU Lab's or PyTorch's)."""

# Options per case (without the case_ prefix): message=False compares the exception's class only.
OPTIONS = {
    "view_wrong_size": {"message": False},
    # PyTorch 2 raises this RuntimeError (1.13 raised ValueError "only one element tensors can be
    # converted to Python scalars"); GPU Lab follows PyTorch 2.
    "item_of_many": {"ours": ("error", "RuntimeError", "a Tensor with 2 elements cannot be converted to Scalar")},
    # PyTorch lists every device type it knows; GPU Lab names the two it has.
    "bad_device_string": {"message": False},
    "bool_of_many": {"message": True},
    "index_out_of_range": {"message": True},
    "leaf_in_place": {"message": False},
    # PyTorch's message for a mask of the wrong shape names the dims; the class is what code catches.
    "mask_shape_mismatch": {"message": False},
    "backward_twice_needs_scalar": {"message": True},
    # Issue 48, section 2, items 3 and 5: where PyTorch 2 changed what 1.13 did, GPU Lab follows PyTorch
    # 2 (the outcome given is 2.x's, checked against PyTorch 2.x). An int past int64 into an int64
    # tensor: 2.x raises ValueError "... long long" (1.13 RuntimeError "Overflow when unpacking long").
    "int_past_int64": {"ours": ("error", "ValueError", "Overflow when unpacking long long")},
    "int_past_int64_below": {"ours": ("error", "ValueError", "Overflow when unpacking long long")},
    # 2.0 ** 63 is past int64: 2.x raises, 1.13 stored INT64_MIN.
    "two_to_the_63_into_int64": {"ours": ("error", "RuntimeError", "value cannot be converted to type int64 without overflow")},
    "full_int64_with_two_to_the_63": {"ours": ("error", "RuntimeError", "value cannot be converted to type int64_t without overflow")},
    # 2.x takes an int past int64 as a float, which an int64 tensor then refuses (1.13 could not unpack it).
    "full_past_int64": {"ours": ("error", "RuntimeError", "value cannot be converted to type int64_t without overflow")},
    "full_float_with_an_int_past_int64": {"ours": ("value", ("list", (9.223372036854776e+18,)))},
    "arange_past_int64": {"ours": ("error", "RuntimeError", "value cannot be converted to type int64_t without overflow")},
    # An integer arange of fractional arguments: 2.x's length comes from the values as given (ceil(4.5 /
    # 1.5) = 3 elements for arange(0.5, 5, 1.5)); 1.13 truncated them first (5 elements).
    "arange_of_ints_by_fractions": {"ours": ("value", ("list", (("list", (0, 1, 2)), ("list", (0, 1, 2, 3)), ("list", (0, 1, 2, 3)),
                                                                ("list", (0, 1, 2, 3, 4, 5)), ("list", (0, 0, 0, 0, 0)), ("list", (3, 2, 1)))))},
    "arange_step_sign": {"ours": ("error", "RuntimeError", "upper bound and lower bound inconsistent with step sign")},
    "arange_infinite_step": {"ours": ("error", "RuntimeError", "step must be finite but got inf")},
    # 2.x raises NotImplementedError where 1.13 raised RuntimeError, with these words.
    "mean_of_int64": {"ours": ("error", "NotImplementedError",
                               "mean(): could not infer output dtype. Input dtype must be either a floating point or complex dtype. Got: Long")},
    "mean_of_bool_along_a_dim": {"ours": ("error", "NotImplementedError",
                                          "mean(): could not infer output dtype. Input dtype must be either a floating point or complex dtype. Got: Bool")},
    "floor_divide_bools": {"ours": ("error", "NotImplementedError", "\"div_floor_cpu\" not implemented for 'Bool'")},
    "remainder_bools": {"ours": ("error", "NotImplementedError", "\"remainder_cpu\" not implemented for 'Bool'")},
    "item_of_nothing": {"ours": ("error", "RuntimeError", "a Tensor with 0 elements cannot be converted to Scalar")},
    # 2.x unpacks an int value as an int64 first, whatever the dtype (1.13: RuntimeError "... long").
    "setitem_of_an_int_past_int64": {"ours": ("error", "ValueError", "Overflow when unpacking long long")},
    "manual_seed_past_its_range": {"ours": ("error", "ValueError", "Overflow when unpacking long long")},
    # A size past int64 is a TypeError in both; 2.x's words (1.13: "... must be tuple of SymInts, but found
    # element of type int at pos 1"), without the C++ stack trace a PyTorch build may append to them.
    "empty_of_a_size_past_int64": {"ours": ("error", "TypeError",
                                            "empty(): argument 'size' failed to unpack the object at pos 1 with error \"Overflow when unpacking long long\"")},
    "zeros_of_a_size_past_int64_second": {"ours": ("error", "TypeError",
                                                   "zeros(): argument 'size' failed to unpack the object at pos 2 with error \"Overflow when unpacking long long\"")},
    "reshape_to_a_size_past_int64": {"ours": ("error", "TypeError",
                                              "reshape(): argument 'shape' failed to unpack the object at pos 1 with error \"Overflow when unpacking long long\"")},
    # Python names GPU Lab's class gpulab._C.Tensor in its "unsupported operand" message.
    "floor_divide_by_a_string": {"message": False},
    "remainder_of_a_list": {"message": False},
}


# ---- creation and printing -------------------------------------------------------------------------

def case_print_floats(torch):
    return str(torch.tensor([1.5, -2.25, 3.0]))


def case_print_whole_floats(torch):
    return repr(torch.tensor([[1.0, 2.0], [30.0, -4.0]]))


def case_print_ints(torch):
    return repr(torch.tensor([[1, 2, 3], [40, 500, -6]]))


def case_print_scalar(torch):
    return [repr(torch.tensor(3.5)), repr(torch.tensor(7)), repr(torch.tensor(-0.0001234))]


def case_print_scientific(torch):
    return [repr(torch.tensor([1e-5, 1.0])), repr(torch.tensor([1e9, 2.0])), repr(torch.tensor([12345.0, 0.5]))]


def case_print_nonfinite(torch):
    return repr(torch.tensor([float("inf"), float("nan"), 1.5, -float("inf")]))


def case_print_float64_and_half(torch):
    return [repr(torch.tensor([1.0, 2.5], dtype=torch.float64)), repr(torch.tensor([1.0, 2.5]).half())]


def case_print_3d(torch):
    return repr(torch.arange(24).reshape(2, 3, 4))


def case_print_wrapping(torch):
    return repr(torch.arange(30) * 1.5)


def case_print_summarised(torch):
    return [repr(torch.arange(2000)), repr(torch.arange(1200.0).reshape(40, 30) / 7)]


def case_print_empty(torch):
    return [repr(torch.tensor([])), repr(torch.zeros(0, 3)), repr(torch.zeros(2, 0, dtype=torch.int64))]


def case_print_requires_grad(torch):
    x = torch.tensor([1.0, 2.0], requires_grad=True)
    return [repr(x), repr(x * 2), repr((x * 2).sum())]


def case_creation(torch):
    return [torch.zeros(2, 3), torch.ones((2,)), torch.full((2, 2), 7.0), torch.arange(5), torch.arange(1, 4, 0.5),
            torch.zeros_like(torch.ones(3, dtype=torch.float64)), torch.tensor([[1, 2], [3, 4]]).dtype]


def case_shapes(torch):
    x = torch.zeros(2, 3, 4)
    return [x.shape, x.size(), x.size(1), x.size(-1), x.dim(), x.ndim, x.numel(), len(x), str(x.shape)]


def case_size_print(torch):
    return [repr(torch.zeros(2, 3).shape), str(torch.Size([4])), torch.Size([2, 3]).numel()]


def case_devices(torch):
    return [repr(torch.device("cpu")), repr(torch.device("cuda:1")), repr(torch.device("cuda")), str(torch.device("cuda", 0)),
            torch.device("cuda:0") == torch.device("cuda", 0), torch.device("cpu").index, torch.zeros(1).device]


def case_bad_device_string(torch):
    return torch.device("gpu:0")


def case_dtypes(torch):
    return [repr(torch.float32), str(torch.float), torch.float64 == torch.double, torch.half is torch.float16,
            torch.int64.is_floating_point, torch.float32.is_floating_point]


# ---- views and indexing ----------------------------------------------------------------------------

def case_views(torch):
    x = torch.arange(12.0)
    return [x.view(3, 4), x.view(-1, 6), x.reshape(2, 2, 3), x.view(3, 4).t(), x.view(3, 4).transpose(0, 1).contiguous(),
            x.view(2, 3, 2).permute(2, 0, 1), x.view(3, 4).flatten(), x.view(1, 12, 1).squeeze(), x.unsqueeze(0).shape]


def case_view_wrong_size(torch):
    return torch.arange(12.0).view(5, 3)


def case_indexing(torch):
    x = torch.arange(24).reshape(2, 3, 4)
    return [x[0], x[1, 2], x[1, 2, 3], x[:, 1], x[..., 0], x[:, None, 1:3, ::2], x[-1, -1], x[0][1:]]


def case_index_out_of_range(torch):
    return torch.arange(3)[5]


def case_setitem(torch):
    x = torch.zeros(3, 4)
    x[1] = 5.0
    x[:, 2] = torch.tensor([1.0, 2.0, 3.0])
    x[0, 0] = 7
    return x


def case_item_tolist(torch):
    x = torch.tensor([[1.5, 2.0], [3.0, 4.0]])
    return [x.tolist(), x[0, 0].item(), torch.tensor(3).item(), type(torch.tensor(3).item()).__name__,
            type(x.sum().item()).__name__, float(torch.tensor(2.5)), int(torch.tensor(4))]


def case_item_of_many(torch):
    return torch.zeros(2).item()


def case_bool_of_many(torch):
    return bool(torch.zeros(2))


# ---- arithmetic and reductions ---------------------------------------------------------------------

def case_arithmetic(torch):
    a = torch.tensor([[1.0, 2.0], [3.0, 4.0]])
    b = torch.tensor([0.5, -1.0])
    return [a + b, a - 1, 2 - a, a * b, a / 2, 1 / a, -a, a ** 2, a @ a, a.matmul(b), a.abs(), a.exp(), a.log(), a.sqrt()]


def case_int_arithmetic(torch):
    a = torch.tensor([1, 2, 3])
    return [a + 1, a * 2, a + a, (a / 2).dtype, a.sum()]


def case_reductions(torch):
    x = torch.tensor([[1.0, 5.0, 3.0], [4.0, 2.0, 6.0]])
    return [x.sum(), x.sum(0), x.sum(dim=1, keepdim=True), x.mean(), x.mean(1), x.max(), x.max(1).values, x.max(1).indices,
            x.min(0)[0], x.argmax(), x.argmax(1), x.argmin(dim=0), torch.sum(x, (0, 1))]


def case_comparisons(torch):
    x = torch.tensor([1.0, 2.0, 3.0])
    y = torch.tensor([1.0, 0.0, 3.0])
    return [(x == y).sum().item(), (x != y).sum().item(), (x == 2).sum().item()]


def case_bool_comparisons_and_printing(torch):
    x = torch.tensor([-1.5, 0.0, 2.0, float("nan")])
    ints = torch.tensor([0, 1, 2])
    return [repr(x > 0), repr(x <= 0), repr(x >= 0), repr(x != x), repr(0.5 < x), repr(ints > 0.5), repr(ints == 1.0),
            repr(torch.tensor([[True, False], [False, True]])), repr(torch.tensor(True)), repr(torch.tensor([], dtype=torch.bool)),
            (x > 0).dtype, (x > 0).tolist(), (x > 0)[2].item(), torch.lt(x, 1), torch.ge(ints, 1), repr(torch.zeros(2, dtype=torch.bool))]


def case_bool_arithmetic_and_logic(torch):
    m = torch.tensor([True, False, True])
    n = torch.tensor([True, True, False])
    return [m.sum(), m.sum().dtype, m * 2, (m * 2).dtype, m * 0.5, m + torch.tensor([1.0, 2.0, 3.0]), m.float(), m.long(),
            m & n, m | n, m ^ n, ~m, m & True, m.any(), m.all(), torch.ones(2, 2, dtype=torch.bool).all(), m.logical_not(),
            torch.logical_and(m, n), torch.logical_or(m, torch.tensor([0.0, 2.0, 0.0])), m + m, (m + m).dtype,
            torch.tensor([[0, 3], [0, 0]]).any(dim=1), torch.tensor([[1, 3], [0, 2]]).all(0), torch.tensor([1, 3]) / torch.tensor([2, 2]),
            (torch.tensor([1, 2, 3]) == torch.tensor([1, 0, 3])).float().mean(), torch.tensor([True, 2]).dtype,
            torch.equal(m, m), torch.equal(m, n), torch.tensor([1.0]).equal(torch.tensor([1.0, 1.0])),
            torch.equal(torch.tensor([float("nan")]), torch.tensor([float("nan")]))]


def case_bool_negation(torch):
    return -torch.tensor([True, False])


def case_bool_masks(torch):
    x = torch.arange(12.0).reshape(3, 4)
    rows = torch.tensor([True, False, True])
    masked = x.clone()
    masked[masked > 8] = 0.0
    masked[torch.tensor([False, True, False])] = -1
    return [x[x > 5], x[rows], x[rows, 1:3], x[:, torch.tensor([True, False, False, True])], x[x > 100].shape, masked,
            x.nonzero()[:3], torch.nonzero(torch.tensor([0, 4, 0, 5])), torch.where(torch.tensor([0, 1, 1]) > 0),
            torch.tensor([1.0, 0.0, 2.0]).nonzero(as_tuple=True)]


def case_mask_shape_mismatch(torch):
    return torch.arange(6).reshape(2, 3)[torch.tensor([True, False, True])]


def case_where_masked_fill_clamp(torch):
    x = torch.tensor([1.0, -2.0, 3.0, float("nan")])
    scores = torch.tensor([[0.5, 1.0], [2.0, -1.0]])
    causal = torch.tensor([[False, True], [False, False]])
    return [torch.where(x > 0, x, torch.zeros(4)), torch.where(x > 0, x, 0.0), torch.where(x > 0, 1.0, x), torch.where(x > 0, 2, 0),
            x.where(x < 2, torch.tensor(9.0)), torch.where(x.half() > 0, x.half(), 0.0).dtype,
            scores.masked_fill(causal, float("-inf")), torch.softmax(scores.masked_fill(causal, float("-inf")), dim=-1),
            x.clamp(min=-1, max=1), x.clamp(0), torch.clamp(x, max=0.5), x.clip(-1.0, 1.0), x.clamp_min(0.0), x.clamp_max(0.0),
            torch.tensor([-3, 5, 9]).clamp(0, 6), torch.sin(torch.tensor([0.0, 1.0, -2.0])), torch.tensor([0.0, 1.0]).cos(),
            torch.tensor([3, 1, 2]).min(), x[:3].min(), x.min()]


def case_where_needs_bool(torch):
    x = torch.tensor([1.0, 2.0])
    return torch.where(x, x, x)


def case_where_and_clamp_gradients(torch):
    x = torch.tensor([-2.0, -0.5, 0.0, 0.5, 2.0], requires_grad=True)
    y = torch.tensor([1.0, 1.0, 1.0, 1.0, 1.0], requires_grad=True)
    (torch.where(x > 0, x * 3, y * 2).sum() + x.clamp(-1.0, 0.5).sum() + torch.sin(x).sum() +
     x.masked_fill(x < -1, 0.0).sum() + x.min()).backward()
    return [x.grad, y.grad, torch.where(x > 0, x, y).grad_fn.name(), x.clamp(0, 1).grad_fn.name(), torch.sin(x).grad_fn.name()]


def case_activations(torch):
    x = torch.tensor([-2.0, -0.5, 0.0, 0.5, 2.0])
    return [x.relu(), torch.sigmoid(x), torch.tanh(x), torch.softmax(x, 0), torch.log_softmax(x, dim=0),
            torch.maximum(x, torch.zeros(5)), torch.minimum(x, torch.zeros(5))]


def case_matmul_shapes(torch):
    return torch.ones(2, 3) @ torch.ones(2, 3)


def case_linear_shapes(torch):
    return torch.nn.functional.linear(torch.ones(4, 2, 3), torch.ones(5, 4))


def case_scalar_grad_fns(torch):
    x = torch.ones(2, requires_grad=True)
    return [(x + 2).grad_fn.name(), (x - 2).grad_fn.name(), (x * 2).grad_fn.name(), (x / 2).grad_fn.name(),
            (2 / x).grad_fn.name(), (2 - x).grad_fn.name(), (x ** 2).grad_fn.name(), x.sum().grad_fn.name(),
            x.sum(0).grad_fn.name(), (x / 3).tolist(), (2 / (x * 3)).tolist()]


def case_in_place(torch):
    x = torch.ones(3)
    x.add_(2)
    x.mul_(torch.tensor([1.0, 2.0, 3.0]))
    x -= 1
    x /= 2
    y = torch.zeros(2)
    y.fill_(4.0)
    y.zero_()
    return [x, y]


def case_dtype_conversions(torch):
    x = torch.tensor([1.7, -2.2])
    return [x.long(), x.double(), x.to(torch.float64), x.half().float(), x.to("cpu").dtype, x.type(), x.long().type()]


# ---- autograd --------------------------------------------------------------------------------------

def case_backward(torch):
    w = torch.tensor([[1.0, 2.0], [3.0, 4.0]], requires_grad=True)
    x = torch.tensor([0.5, -1.0])
    loss = ((w @ x).relu() ** 2).sum()
    loss.backward()
    return [loss, w.grad, w.is_leaf, loss.is_leaf, x.grad is None, loss.requires_grad]


def case_grad_accumulates(torch):
    w = torch.tensor([1.0, 2.0], requires_grad=True)
    (w * 3).sum().backward()
    (w * w).sum().backward()
    return w.grad


def case_no_grad(torch):
    w = torch.tensor([1.0], requires_grad=True)
    with torch.no_grad():
        y = w * 2
    z = w * 2
    with torch.inference_mode():
        q = w + 1
    return [y.requires_grad, z.requires_grad, q.requires_grad, torch.is_grad_enabled()]


def case_no_grad_decorator(torch):
    @torch.no_grad()
    def f(t):
        return t * 2

    w = torch.tensor([1.0], requires_grad=True)
    return [f(w).requires_grad, (w * 2).requires_grad]


def case_detach_and_data(torch):
    w = torch.tensor([1.0, 2.0], requires_grad=True)
    d = w.detach()
    return [d.requires_grad, w.data.requires_grad, (w * 2).detach().requires_grad]


def case_leaf_in_place(torch):
    w = torch.tensor([1.0, 2.0], requires_grad=True)
    w.add_(1)
    return w


def case_backward_twice_needs_scalar(torch):
    w = torch.tensor([1.0, 2.0], requires_grad=True)
    (w * 2).backward()


def case_int_requires_grad(torch):
    return torch.tensor([1, 2], requires_grad=True)


# ---- devices without a GPU -------------------------------------------------------------------------

def case_cuda_calls_without_gpu(torch):
    return [torch.cuda.is_available(), torch.cuda.device_count()]


def case_empty_cache_without_gpu(torch):
    torch.cuda.empty_cache()
    return True


# ---- joining -----------------------------------------------------------------------------------------

def case_cat_stack(torch):
    a = torch.arange(6.0).reshape(2, 3)
    b = torch.ones(1, 3)
    return [torch.cat([a, b]), torch.cat((a, a), dim=1), torch.stack([a, a]), torch.stack([a, a], dim=-1), torch.cat([a, a.long()]).dtype]


def case_cat_sizes_differ(torch):
    return torch.cat([torch.zeros(2, 3), torch.zeros(2, 4)])


def case_stack_sizes_differ(torch):
    return torch.stack([torch.zeros(2), torch.zeros(3)])


def case_cat_gradient(torch):
    a = torch.tensor([1.0, 2.0], requires_grad=True)
    b = torch.tensor([3.0], requires_grad=True)
    out = torch.cat([a * 2, b * 3])
    (out * torch.tensor([1.0, 10.0, 100.0])).sum().backward()
    s = torch.stack([a, a * a])
    return [a.grad, b.grad, repr(out), repr(s)]


def case_index_with_tensor(torch):
    x = torch.arange(12.0).reshape(4, 3).requires_grad_()
    idx = torch.tensor([2, 0, 2])
    picked = x[idx]
    picked.sum().backward()
    return [picked, x[:, torch.tensor([1])], x[torch.tensor(1)], x.grad, x.detach()[torch.tensor([], dtype=torch.int64)].shape]


def case_index_with_negative_and_large_tensors(torch):
    x = torch.arange(20000.0).reshape(10000, 2)
    picked = x[torch.tensor([-1, 0, -10000])]
    mask = x[:, 1] > 5000.0
    return [picked, x[mask].shape, x[mask][-1], x[x > 19990.0], torch.index_select(x, 1, torch.tensor([1, 1]))[:2],
            x.index_select(0, torch.tensor([5]))]


def case_index_tensor_out_of_range(torch):
    return torch.arange(3)[torch.tensor([5])]


# ---- numpy -----------------------------------------------------------------------------------------

def case_numpy_shares_memory(torch):
    import numpy as np

    a = np.arange(6, dtype=np.float32).reshape(2, 3)
    t = torch.from_numpy(a)
    a[0, 0] = 100.0  # seen by the tensor
    t[1, 2] = -1.0   # seen by the array
    back = t.numpy()
    back[0, 1] = 7.0  # the tensor's numpy() is its own memory too
    view = torch.from_numpy(a[:, 1])  # a strided view of the array
    copied = torch.tensor(a)
    a[1, 1] = 55.0
    as_t = torch.as_tensor(a)
    as_t[0, 2] = 9.0
    return [t, a.tolist(), view, view.stride(), copied, a[0, 2], back.dtype, back.shape,
            torch.from_numpy(np.array([1, 2], dtype=np.int64)), torch.from_numpy(np.array([True, False])),
            torch.from_numpy(np.ones(2, dtype=np.float64)).dtype, torch.from_numpy(np.ones(2, dtype=np.float16)).dtype,
            torch.tensor(np.ones(3)).dtype, torch.tensor(np.ones(3), dtype=torch.float32).dtype,
            torch.ones(2, 2).half().numpy().dtype, torch.tensor([True]).numpy().dtype, torch.arange(3).numpy().tolist(),
            torch.ones(3, 4).t().numpy().strides, np.asarray(torch.arange(4.0)).sum(), torch.tensor(np.float32(2.5))]


def case_numpy_negative_strides(torch):
    import numpy as np

    return torch.from_numpy(np.arange(4.0)[::-1])


def case_numpy_of_bfloat16(torch):
    return torch.ones(2).bfloat16().numpy()


def case_numpy_needs_detach(torch):
    return torch.ones(2, requires_grad=True).numpy()


# ---- split and chunk (issue 29: an exercise splits a batch) ----------------------------------------

def case_split_and_chunk(torch):
    x = torch.arange(10.).reshape(5, 2)
    y = torch.ones(6, requires_grad=True)
    a, b = y.split(4)
    (a * 2).sum().backward()
    return [[p.tolist() for p in x.split(2)], [p.tolist() for p in x.split([1, 4])], [p.tolist() for p in torch.split(x, 1, dim=1)],
            [p.tolist() for p in x.chunk(3)], [p.tolist() for p in torch.chunk(x, 2, dim=1)], [p.tolist() for p in x.chunk(10)],
            y.grad.tolist()]


def case_split_sizes_must_add_up(torch):
    return torch.arange(5.).split([1, 1])


# ---- int64 values past 2^53 and at int64's edges (issue 48, section 2, item 3) ----------------------
# A double holds integers exactly only up to 2^53: these go in (and come out) with all 64 bits.

_BIG = 2 ** 53 + 1


def case_int64_exact_on_the_way_in(torch):
    return [torch.tensor([_BIG]), torch.tensor([2 ** 63 - 1, -2 ** 63]), torch.tensor(_BIG).item(), int(torch.tensor(_BIG)),
            torch.tensor([[2 ** 62 + 1]]).tolist(), torch.tensor([torch.tensor(_BIG)]), torch.tensor([True, _BIG]),
            repr(torch.tensor([_BIG, -2 ** 63])), f"{torch.tensor(_BIG)}", torch.tensor([_BIG])[0].item(),
            torch.tensor([_BIG], dtype=torch.float64).tolist(), torch.tensor([2 ** 63 - 1], dtype=torch.bool)]


def case_int_past_int64(torch):
    return torch.tensor([2 ** 63])


def case_int_past_int64_below(torch):
    return torch.tensor([1, -2 ** 63 - 1])


def case_int_past_int64_into_floats(torch):
    # A floating tensor takes an int past int64 as the float it is closest to.
    return [torch.tensor([2 ** 63], dtype=torch.float32), torch.tensor([2 ** 64], dtype=torch.float64), torch.tensor([2 ** 63, 0.5]),
            torch.tensor([2 ** 63], dtype=torch.bool)]


def case_inf_into_int64(torch):
    return torch.tensor([float("inf")], dtype=torch.int64)


def case_minus_inf_into_int64(torch):
    return torch.tensor([1.0, -float("inf")], dtype=torch.int64)


def case_nan_into_int64(torch):
    return torch.tensor(float("nan"), dtype=torch.int64)


def case_float_past_int64_into_int64(torch):
    return torch.tensor([[1, 2], [1e19, 3]], dtype=torch.int64)


def case_two_to_the_63_into_int64(torch):
    return torch.tensor([2.0 ** 63], dtype=torch.int64)


def case_floats_into_int64_in_range(torch):
    return [torch.tensor([-2.0 ** 63, 1.5, -2.7, -0.0], dtype=torch.int64), torch.tensor([float("inf"), float("nan"), 0.0], dtype=torch.bool)]


def case_float_tensor_into_int64(torch):
    # PyTorch reads a one-element tensor into an int64 tensor through __index__, which a float refuses.
    return torch.tensor([torch.tensor(2.0)], dtype=torch.int64)


def case_tensor_elements_decide_the_dtype(torch):
    return [torch.tensor([torch.tensor(2.5, dtype=torch.float64)]).dtype, torch.tensor([torch.tensor(3), torch.tensor(2.5, dtype=torch.float64)]),
            torch.tensor([torch.tensor(1.0, dtype=torch.float16), 2]).dtype, torch.tensor([torch.tensor(3), 2.5])]


def case_full_with_large_ints(torch):
    t = torch.zeros(3, dtype=torch.int64)
    t.fill_(_BIG)
    u = torch.zeros(3, dtype=torch.int64)
    u[0] = _BIG
    u[1:] = -2 ** 63
    v = torch.zeros(2, dtype=torch.int64)
    v[v == 0] = 2 ** 63 - 1
    return [torch.full((2,), _BIG), torch.full((1,), 2 ** 63 - 1), torch.full((1,), -2 ** 63), torch.full((2,), 7).dtype,
            torch.full((2,), True), torch.full((2,), 2.5).dtype, torch.full((1,), _BIG, dtype=torch.float64),
            torch.full_like(torch.zeros(2, dtype=torch.int64), _BIG), torch.full_like(torch.zeros(2), 3).dtype,
            torch.zeros(1, dtype=torch.int64).new_full((2,), _BIG), t, u, v, torch.full((2,), 2.7, dtype=torch.int64),
            torch.full((1,), -2.0 ** 63, dtype=torch.int64)]


def case_full_float_with_an_int_past_int64(torch):
    return torch.full((1,), 2 ** 63, dtype=torch.float32).tolist()


def case_full_past_int64(torch):
    return torch.full((2,), 2 ** 63)


def case_full_int64_with_inf(torch):
    return torch.full((2,), float("inf"), dtype=torch.int64)


def case_full_like_int64_with_nan(torch):
    return torch.full_like(torch.zeros(2, dtype=torch.int64), float("nan"))


def case_fill_int64_with_nan(torch):
    return torch.zeros(2, dtype=torch.int64).fill_(float("nan"))


def case_fill_int64_past_its_range(torch):
    return torch.zeros(2, dtype=torch.int64).fill_(1e19)


def case_setitem_int64_with_inf(torch):
    t = torch.zeros(2, dtype=torch.int64)
    t[0] = float("-inf")
    return t


def case_full_int64_with_two_to_the_63(torch):
    return torch.full((1,), 2.0 ** 63, dtype=torch.int64)


def case_arange_past_two_to_the_53(torch):
    return [torch.arange(2 ** 53, 2 ** 53 + 3), len(torch.arange(2 ** 53, 2 ** 53 + 3)), torch.arange(2 ** 62, 2 ** 62 + 10, 3),
            torch.arange(2 ** 63 - 3, 2 ** 63 - 1), torch.arange(-2 ** 63, -2 ** 63 + 4, 2), torch.arange(2 ** 53 + 3, 2 ** 53, -1),
            torch.arange(start=2 ** 53, end=2 ** 53 + 2), torch.arange(2 ** 62, 2 ** 63 - 1, 2 ** 61), torch.arange(True, 3),
            # floats compute in double, in PyTorch too: four elements, rounded
            torch.arange(2 ** 53, 2 ** 53 + 3, dtype=torch.float64).tolist(), torch.arange(2.0 ** 53, 2.0 ** 53 + 3).tolist()]


def case_arange_past_int64(torch):
    return torch.arange(2 ** 63 - 3, 2 ** 63)


def case_arange_to_inf(torch):
    return torch.arange(0, float("inf"))


def case_arange_from_minus_inf(torch):
    return torch.arange(-float("inf"), 0.5)


def case_arange_to_nan(torch):
    return torch.arange(0, float("nan"))


def case_arange_of_ints_by_fractions(torch):
    return [torch.arange(0.5, 5, 1.5, dtype=torch.int64).tolist(), torch.arange(0, 5, 1.5, dtype=torch.int64).tolist(),
            torch.arange(-0.5, 3, dtype=torch.int64).tolist(), torch.arange(5.5, dtype=torch.int64).tolist(),
            torch.arange(0, 2.5, 0.5, dtype=torch.int64).tolist(), torch.arange(3, -0.5, -1.5, dtype=torch.int64).tolist()]


def case_arange_step_sign(torch):
    return torch.arange(5, 0)


def case_arange_infinite_step(torch):
    return torch.arange(0, 5, float("inf"))


# ---- reductions of nothing, mm, expand, and the exception classes (issue 48, section 2, item 5) ------

def case_mean_of_nothing(torch):
    return [torch.empty(0).mean(), torch.empty(0, 3).mean(0), torch.empty(0, 3).mean(1), torch.empty(0, dtype=torch.float64).mean(),
            torch.empty(0, dtype=torch.float16).mean(), torch.empty(0, dtype=torch.bfloat16).mean(), torch.mean(torch.empty(0)),
            torch.empty(0, 2, 3).mean((0, 2)), torch.empty(0, 2).mean(0, keepdim=True), torch.empty(0).mean().item()]


def case_mean_of_nothing_backward(torch):
    x = torch.empty(0, 3, requires_grad=True)
    x.mean(0).sum().backward()
    y = torch.empty(0, requires_grad=True)
    y.mean().backward()
    return [x.grad, y.grad]


def case_sum_of_nothing(torch):
    return [torch.empty(0).sum(), torch.empty(0, 3).sum(0), torch.empty(0, 3).sum(1), torch.empty(0, dtype=torch.int64).sum(),
            torch.empty(0, dtype=torch.bool).sum(), torch.empty(0).any(), torch.empty(0).all()]


def case_mean_of_int64(torch):
    return torch.ones(2, dtype=torch.int64).mean()


def case_mean_of_bool_along_a_dim(torch):
    return torch.ones(2, 2, dtype=torch.bool).mean(0)


def case_max_of_nothing(torch):
    return torch.empty(0).max()


def case_min_of_nothing(torch):
    return torch.empty(0, dtype=torch.int64).min()


def case_max_along_an_empty_dim(torch):
    return torch.empty(0, 3).max(0)


def case_min_along_an_empty_dim(torch):
    return torch.empty(0, 3).min(0)


def case_max_along_a_full_dim_of_nothing(torch):
    values, indices = torch.empty(0, 3).max(1)
    low, at = torch.empty(3, 0).min(0)
    return [values, indices, low, at]


def case_argmax_of_nothing(torch):
    return torch.empty(0).argmax()


# torch.mm multiplies matrices only. PyTorch 1.13 through 2.x say "self must be a matrix"; the latest
# add "mm: " and the operand's dims ("mm: self must be a matrix, got 3-D tensor"); GPU Lab keeps the
# words most of 2.x and 1.13 share.
def case_mm_of_a_3d_tensor(torch):
    return torch.mm(torch.ones(2, 2, 2), torch.ones(2, 2))


def case_mm_with_a_3d_tensor(torch):
    return torch.mm(torch.ones(2, 2), torch.ones(2, 2, 2))


def case_mm_of_a_vector(torch):
    return torch.mm(torch.ones(2), torch.ones(2, 2))


def case_mm_with_a_vector(torch):
    return torch.ones(2, 2).mm(torch.ones(2))


def case_tensor_mm_of_a_3d_tensor(torch):
    return torch.ones(2, 2, 2).mm(torch.ones(2, 2))


def case_mm_of_matrices(torch):
    return [torch.mm(torch.ones(2, 3), torch.ones(3, 4)), torch.ones(2, 0).mm(torch.ones(0, 3)), torch.matmul(torch.ones(2), torch.ones(2))]


def case_mm_shapes_differ(torch):
    return torch.mm(torch.ones(2, 3), torch.ones(2, 3))


def case_expand_keeping_sizes(torch):
    return [torch.ones(1, 3).expand(-1, 3).shape, torch.ones(2, 3).expand(4, -1, -1), torch.ones(1).expand(-1).shape,
            torch.ones(1, 3).expand(2, 1, -1).shape, torch.ones(1, 3).expand(0, 3).shape, torch.ones(2, 3).expand(torch.Size([4, 2, 3])).shape,
            repr(torch.ones(1, 0).expand(-2, 0))]


def case_expand_to_minus_two(torch):
    return torch.ones(1, 3).expand(-2, 3)


def case_expand_to_minus_two_alone(torch):
    return torch.ones(1).expand(-5)


def case_expand_minus_two_where_a_size_is(torch):
    return torch.ones(2, 3).expand(-2, 3)


def case_expand_minus_one_in_a_new_dim(torch):
    return torch.ones(3).expand(-1, 3)


def case_expand_to_fewer_dims(torch):
    return torch.ones(2, 3).expand(3)


def case_item_of_nothing(torch):
    return torch.ones(0).item()


def case_index_with_a_float(torch):
    return torch.ones(3)[1.0]


def case_index_with_a_float_in_a_tuple(torch):
    return torch.ones(2, 3)[0, 1.5]


def case_index_with_an_object(torch):
    return torch.arange(3)[object()]


def case_setitem_with_a_float_index(torch):
    t = torch.ones(3)
    t[1.0] = 2.0
    return t


def case_index_with_a_string(torch):
    return torch.ones(3)["a"]


def case_index_with_lists_bools_and_numpy_ints(torch):
    import numpy as np

    x = torch.arange(6).reshape(2, 3)
    return [x[[1, 0]], x[:, [2, 2, 0]], x[[True, False]], torch.arange(3)[[]], torch.arange(3)[np.int64(2)], torch.arange(3)[True],
            torch.arange(3)[False], torch.tensor(5)[True], torch.ones(2, 3)[True, 0].shape, x[np.argmax(np.array([0, 5]))]]


def case_index_with_a_list_of_floats(torch):
    x = torch.arange(6).reshape(2, 3)
    x[[1.0]] = 7
    return [torch.arange(3)[[0.5, 1.9]], x]


def case_empty_of_a_size_past_int64(torch):
    return torch.empty(2 ** 63)


def case_zeros_of_a_size_past_int64_second(torch):
    return torch.zeros((2, 2 ** 63))


def case_reshape_to_a_size_past_int64(torch):
    return torch.ones(2).reshape(-2 ** 63 - 1)


def case_manual_seed_of_a_word(torch):
    return torch.manual_seed("a")


def case_manual_seed_of_none(torch):
    return torch.manual_seed(None)


def case_manual_seed_past_its_range(torch):
    return torch.manual_seed(2 ** 64)


def case_manual_seed_takes_what_int_takes(torch):
    seeds = []
    for seed in ("3", 1.5, -1, True, 2 ** 64 - 1, -2 ** 63, torch.tensor(7)):
        torch.manual_seed(seed)
        seeds.append(torch.initial_seed())
    torch.manual_seed(0)
    return seeds


# ---- Python's // and % (issue 48, section 2, item 5) -------------------------------------------------
# Floor division and the remainder with the divisor's sign: Python's rules, in every dtype.

_INF = float("inf")
_NAN = float("nan")
_FLOATS = [-7.5, -3.0, -2.0, -0.0, 0.0, 1.0, 2.5, 7.0, _INF, -_INF, _NAN]
_INTS = [-7, -3, -1, 0, 1, 2, 7]


def case_floor_divide_floats(torch):
    x = torch.tensor(_FLOATS)
    return [(x // 2).tolist(), (x // -2).tolist(), (x // 0).tolist(), (x // _INF).tolist(), (x // 0.3).tolist(),
            (x // torch.tensor(_FLOATS[::-1])).tolist(), (7 // x).tolist(), (-7.5 // x).tolist()]


def case_remainder_floats(torch):
    x = torch.tensor(_FLOATS)
    return [(x % 2).tolist(), (x % -2).tolist(), (x % 0).tolist(), (x % _INF).tolist(), (x % -_INF).tolist(), (x % 0.3).tolist(),
            (x % torch.tensor(_FLOATS[::-1])).tolist(), (7 % x).tolist(), (-7.5 % x).tolist()]


def case_signed_zeros_of_floor_divide_and_remainder(torch):
    import math

    x = torch.tensor([-0.0, 0.0, -1.0, 1.0, -4.0])
    return [[math.copysign(1.0, v) for v in (x // 2).tolist()], [math.copysign(1.0, v) for v in (x // -2).tolist()],
            [math.copysign(1.0, v) for v in (x % 2).tolist()], [math.copysign(1.0, v) for v in (x % -2).tolist()]]


def case_floor_divide_and_remainder_in_every_float_dtype(torch):
    out = []
    for dtype in (torch.float64, torch.float16, torch.bfloat16):
        x = torch.tensor(_FLOATS, dtype=dtype)
        out += [x // 0.3, x % 0.3, x // 2, x % -2, x // torch.tensor(0.3), x % torch.tensor([0.3]), 3.5 // x, 3.5 % x]
    return out


def case_floor_divide_and_remainder_of_ints(torch):
    x = torch.tensor(_INTS)
    y = torch.tensor([2, -2, 3, -3, 1, 5, -1])
    return [x // 2, x // -2, x % 3, x % -3, x // y, x % y, 7 // torch.tensor([2, -2, 3, -3]), -7 % torch.tensor([2, -2, 3, -3]),
            x // 2.5, x % 2.5, x // 2.0, 7.5 // torch.tensor([2, -2]), torch.arange(6).reshape(2, 3) // torch.tensor([[1], [2]]),
            torch.tensor([2 ** 62 + 1]) // 1, torch.tensor([2 ** 62 + 1]) // _BIG, torch.tensor([2 ** 62 + 1]) % _BIG, x // True,
            x % torch.tensor(2.5), torch.tensor(7) // torch.tensor([2.0, 3.0]), torch.tensor([7.0]) % torch.tensor(2)]


def case_floor_divide_and_remainder_of_bools(torch):
    b = torch.tensor([True, False])
    return [b // 2, b % 2, b // 2.5, b % -3, 5 // b[:1], torch.tensor([3, 4]) // torch.tensor([True, True])]


def case_floor_divide_bools(torch):
    return torch.tensor([True, False]) // torch.tensor([True, True])


def case_remainder_bools(torch):
    return torch.tensor([True, False]) % True


def case_int_floor_divide_by_zero(torch):
    return torch.tensor([1, 2]) // 0


def case_int_remainder_by_zero(torch):
    return torch.tensor([1, 2]) % torch.tensor([1, 0])


def case_int_divided_into_zero(torch):
    return 5 // torch.tensor([3, 0, 1])


def case_floor_divide_and_remainder_functions_and_methods(torch):
    x = torch.tensor([7, -7])
    f = torch.tensor([7.0, -7.0])
    g = f.clone()
    g //= 2
    h = f.clone()
    h %= 3
    i = x.clone()
    i //= 2
    j = x.clone()
    j %= torch.tensor([3, 5])
    k = f.clone()
    k.floor_divide_(2)
    m = f.clone()
    m.remainder_(-2.5)
    return [torch.floor_divide(x, 2), torch.floor_divide(7, torch.tensor([2, -2])), torch.remainder(x, 3), torch.remainder(7, torch.tensor([2, -2])),
            torch.remainder(f, other=torch.tensor([2.0])), x.floor_divide(2), x.remainder(3), g, h, i, j, k, m]


def case_int_floor_divide_in_place_by_a_float(torch):
    t = torch.tensor([7, -7])
    t //= 2.5
    return t


def case_floor_divide_by_a_string(torch):
    return torch.ones(2) // "a"


def case_remainder_of_a_list(torch):
    return torch.ones(2) % [1, 2]


def case_remainder_gradients(torch):
    x = torch.tensor([7.5, -3.2], requires_grad=True)
    (x % 2).sum().backward()
    a = torch.tensor([7.5, -3.2, 4.0], requires_grad=True)
    b = torch.tensor([2.0, 1.5, -1.5], requires_grad=True)
    (a % b * torch.tensor([1.0, 2.0, 3.0])).sum().backward()
    h = torch.tensor([7.5, -3.2], dtype=torch.float16, requires_grad=True)
    (h % 2).sum().backward()
    c = torch.tensor([[7.5], [-3.2]], requires_grad=True)
    d = torch.tensor([2.0, -1.5], requires_grad=True)
    (c % d).sum().backward()
    return [x.grad, a.grad, b.grad, h.grad, c.grad, d.grad, (x % 2).grad_fn.name(), (a % b).grad_fn.name(), (x % 2).requires_grad]


def case_remainder_of_a_number_has_no_derivative(torch):
    x = torch.tensor([2.5, -3.0], requires_grad=True)
    y = 7 % x
    assert y.requires_grad
    y.sum().backward()


def case_floor_divide_has_no_derivative(torch):
    x = torch.tensor([7.5, -3.2], requires_grad=True)
    y = x // 2
    assert y.requires_grad and not (x.detach() // 2).requires_grad
    y.sum().backward()


def case_floor_divide_of_two_has_no_derivative(torch):
    x = torch.tensor([7.5, -3.2], requires_grad=True)
    (x // torch.tensor([2.0, 3.0], requires_grad=True)).sum().backward()


def case_setitem_through_tensors_and_lists_of_indices(torch):
    # x[idx] = v writes into x (PyTorch's index_put_), never into a gathered copy.
    a = torch.arange(3)
    a[torch.tensor([1])] = 7
    b = torch.arange(6).reshape(2, 3)
    b[:, torch.tensor([0, 2])] = 9
    c = torch.arange(6).reshape(2, 3)
    c[:, [0, 2]] = torch.tensor([[10, 20], [30, 40]])
    d = torch.arange(3)
    d[torch.tensor(-1)] = _BIG
    e = torch.arange(6.0).reshape(2, 3)
    e[[-1]] = torch.tensor([5.0, 6.0, 7.0])
    f = torch.zeros(2, 3)
    f[None, 1, [0, 2]] = 1
    g = torch.arange(6).reshape(2, 3)
    g[:, torch.tensor([True, False, True])] = 0  # a mask among other indices
    h = torch.arange(6).reshape(2, 3)
    h[[True, False]] = 9
    i = torch.arange(6.0).reshape(2, 3)
    i[1, torch.tensor([True, True, False])] = torch.tensor([7.0, 8.0])
    return [a, b, c, d, e, f, g, h, i]


def case_setitem_of_an_int_past_int64(torch):
    t = torch.zeros(2)
    t[0] = 2 ** 64
    return t


# torch.linspace and torch.logspace (issue 50): PyTorch's values to one float32 ulp (its vectorised CPU
# kernel rounds some elements the other way; the ends are exact), every dtype rule, and the errors.
OPTIONS["linspace_bits"] = {"rtol": 2.5e-7, "atol": 5e-7}  # one ulp of the largest value, near zero too


def case_linspace_bits(torch):
    x = torch.linspace(-3.14159, 3.14159, 2001)
    return [x, x[0].item() == torch.tensor(-3.14159).item(), x[-1].item() == torch.tensor(3.14159).item(),
            torch.linspace(0, 1, 7, dtype=torch.float64), torch.linspace(1e-3, 7.5, 10)]


def case_linspace_forms(torch):
    x = torch.linspace(0, 10, steps=5, requires_grad=True)
    return [torch.linspace(2, 2, 1), torch.linspace(0, 1, 0), torch.linspace(5, -5, 4), torch.linspace(0, 10, 4, dtype=torch.int64),
            torch.linspace(torch.tensor(1.5), torch.tensor(3.0), 4), x.requires_grad, x.is_leaf, torch.linspace(0, 1, 3).dtype]


def case_linspace_out(torch):
    out = torch.empty(5)
    returned = torch.linspace(0, 1, 5, out=out)
    return [out, returned is out]


def case_linspace_negative_steps(torch):
    return torch.linspace(0, 1, -1)


def case_linspace_without_steps(torch):
    return torch.linspace(0, 1)


OPTIONS["linspace_without_steps"] = {"message": False}  # a TypeError both sides, each in its binding's words


def case_logspace_forms(torch):
    return [torch.logspace(0, 3, 4), torch.logspace(-1, 1, 5, base=2.0), torch.logspace(0, 2, 3, dtype=torch.float64),
            torch.logspace(0, 4, 5, 2, dtype=torch.int64)]


# tensor ** tensor, a number ** tensor, and torch.matmul's keyword names (issue 50: the tutorials' polynomial fits).
def case_pow_of_tensors(torch):
    x = torch.tensor([0.5, 1.5, 2.0, 0.0], dtype=torch.float64, requires_grad=True)
    p = torch.tensor([2.0, 0.5, 3.0, 2.0], dtype=torch.float64, requires_grad=True)
    y = x ** p
    (y * torch.arange(1.0, 5.0, dtype=torch.float64)).sum().backward()
    powers = torch.linspace(-1, 1, 3).unsqueeze(-1).pow(torch.tensor([1, 2, 3]))
    return [y, x.grad, p.grad, y.grad_fn.name(), powers, 2 ** torch.tensor([1.0, 3.0]), torch.pow(x.detach(), p.detach()),
            torch.pow(2.0, torch.tensor([0.5]))]


def case_matmul_keywords(torch):
    return torch.matmul(input=torch.ones(2, 3), other=torch.ones(3))
