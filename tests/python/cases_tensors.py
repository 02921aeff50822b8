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
