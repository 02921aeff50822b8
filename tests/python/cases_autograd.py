"""Parity cases: torch.autograd.grad and torch.autograd.Function (an op written in Python), their
values, what they leave in .grad, and their errors; torch.allclose and isclose, which tests of them use."""

OPTIONS = {}


def _ramp(torch, *shape):
    n = 1
    for s in shape:
        n *= s
    return (torch.arange(n, dtype=torch.float32).reshape(shape) * 0.37 - 1.1).requires_grad_()


def _square(torch):
    class Square(torch.autograd.Function):
        @staticmethod
        def forward(ctx, x):
            ctx.save_for_backward(x)
            return x * x

        @staticmethod
        def backward(ctx, grad):
            (x,) = ctx.saved_tensors
            return 2 * x * grad

    return Square


def case_grad_of_a_product(torch):
    x, w = _ramp(torch, 3, 4), _ramp(torch, 4, 2)
    y = (x @ w).tanh().sum()
    gx, gw = torch.autograd.grad(y, [x, w])
    return [gx, gw, x.grad is None, w.grad is None]


def case_grad_with_grad_outputs_and_several_outputs(torch):
    x = _ramp(torch, 5)
    a, b = x * 3, (x * x).sum()
    (gx,) = torch.autograd.grad([a, b], x, grad_outputs=[torch.ones(5) * 0.5, torch.tensor(2.0)])
    return gx


def case_grad_of_a_non_leaf(torch):
    x = _ramp(torch, 4)
    h = x.exp()
    y = (h * h).sum()
    gh, gx = torch.autograd.grad(y, [h, x])
    return [gh, gx]


def case_grad_then_backward_of_a_new_graph(torch):
    x = _ramp(torch, 3)
    (g,) = torch.autograd.grad((x * x).sum(), x)
    (x * x).sum().backward()
    return [g, x.grad]


def case_grad_unused_input_raises(torch):
    x, z = _ramp(torch, 3), _ramp(torch, 2)
    torch.autograd.grad((x * 2).sum(), [x, z])


def case_grad_unused_input_allowed(torch):
    x, z = _ramp(torch, 3), _ramp(torch, 2)
    gx, gz = torch.autograd.grad((x * 2).sum(), [x, z], allow_unused=True)
    return [gx, gz is None]


def case_grad_of_a_vector_needs_grad_outputs(torch):
    x = _ramp(torch, 3)
    torch.autograd.grad(x * 2, x)


def case_grad_input_without_grad_raises(torch):
    x = _ramp(torch, 3)
    torch.autograd.grad((x * 2).sum(), torch.ones(3))


def case_function_square(torch):
    x = _ramp(torch, 2, 3)
    y = _square(torch).apply(x)
    (y * torch.arange(6.0).reshape(2, 3)).sum().backward()
    return [y, x.grad, y.requires_grad]


def case_function_inside_a_model(torch):
    torch.manual_seed(0)
    lin = torch.nn.Linear(3, 2)
    with torch.no_grad():
        lin.weight.copy_(torch.tensor([[0.5, -0.25, 1.0], [0.75, 0.1, -0.5]]))
        lin.bias.fill_(0.1)
    x = _ramp(torch, 4, 3)
    loss = _square(torch).apply(lin(x)).mean()
    loss.backward()
    return [loss, lin.weight.grad, lin.bias.grad, x.grad]


def case_function_with_a_number_argument(torch):
    class Scale(torch.autograd.Function):
        @staticmethod
        def forward(ctx, x, factor):
            ctx.factor = factor
            return x * factor

        @staticmethod
        def backward(ctx, grad):
            return grad * ctx.factor, None

    x = _ramp(torch, 3)
    Scale.apply(x, 2.5).sum().backward()
    return x.grad


def case_function_needs_input_grad(torch):
    seen = []

    class Mul(torch.autograd.Function):
        @staticmethod
        def forward(ctx, a, b):
            ctx.save_for_backward(a, b)
            seen.append(ctx.needs_input_grad)
            return a * b

        @staticmethod
        def backward(ctx, grad):
            a, b = ctx.saved_tensors
            return grad * b, grad * a

    a, b = _ramp(torch, 3), torch.ones(3) * 2
    Mul.apply(a, b).sum().backward()
    return [seen, a.grad, b.grad is None]


def case_function_without_grad_records_nothing(torch):
    x = torch.ones(3)
    y = _square(torch).apply(x)
    return [y, y.requires_grad, y.grad_fn is None]


def case_function_wrong_number_of_gradients(torch):
    class Two(torch.autograd.Function):
        @staticmethod
        def forward(ctx, x):
            return x * 2

        @staticmethod
        def backward(ctx, grad):
            return grad, grad

    Two.apply(_ramp(torch, 3)).sum().backward()


def case_function_gradient_of_the_wrong_shape(torch):
    class Wrong(torch.autograd.Function):
        @staticmethod
        def forward(ctx, x):
            return x * 2

        @staticmethod
        def backward(ctx, grad):
            return torch.ones(5)

    Wrong.apply(_ramp(torch, 3)).sum().backward()


def case_function_error_in_backward_reaches_the_caller(torch):
    class Broken(torch.autograd.Function):
        @staticmethod
        def forward(ctx, x):
            return x + 1

        @staticmethod
        def backward(ctx, grad):
            raise ValueError("backward failed on purpose")

    Broken.apply(_ramp(torch, 3)).sum().backward()


def case_allclose_and_isclose(torch):
    a = torch.tensor([1.0, 2.0, 3.0])
    b = a + torch.tensor([1e-9, 1e-4, 0.0])
    return [torch.allclose(a, b), torch.allclose(a, b, atol=1e-3), torch.isclose(a, b), torch.allclose(a, a + float("nan"))]


def case_allclose_needs_one_dtype(torch):
    torch.allclose(torch.ones(2), torch.ones(2, dtype=torch.float64))


def case_function_gradient_that_is_not_a_tensor(torch):
    class Number(torch.autograd.Function):
        @staticmethod
        def forward(ctx, x):
            return x * 2

        @staticmethod
        def backward(ctx, grad):
            return 2.0

    Number.apply(_ramp(torch, 3)).sum().backward()


# In-place writes (issue 48): through views they rebase the base's history (CopySlices), every view of
# the base follows, saved tensors written since raise at backward, and PyTorch's leaf rules hold.

def _ones(torch, n=4):
    return torch.ones(n, requires_grad=True)


def _node(grad_fn):
    """A node's name as its repr shows it ("<CopySlices object at ...>": PyTorch's name() of CopySlices is
    its C++ name)."""
    return repr(grad_fn).split(" object")[0].lstrip("<")


def case_inplace_mul_through_a_slice(torch):
    x = _ones(torch)
    y = x * 2
    y[1:3].mul_(3)
    y.sum().backward()
    return [x.grad, y, _node(y.grad_fn)]


def case_inplace_mul_through_a_transposed_view(torch):
    x = _ramp(torch, 2, 2)
    y = x * 2
    y.t()[0].mul_(5)
    y.sum().backward()
    return [x.grad, y]


def case_inplace_chain_through_the_rebased_base(torch):
    x = _ramp(torch, 4)
    y = x * 2
    v = y[1:3]
    v.mul_(3)
    w = y.sum() * y[0]
    w.backward()
    return [x.grad, w, _node(v.grad_fn)]


def case_inplace_add_copy_zero_through_views(torch):
    x = _ramp(torch, 3, 4)
    y = x * x
    y[0].add_(x[1] * x[2])
    y[:, 1].copy_(x[:, 3].exp())
    y[1:, 2:].zero_()
    y.t()[0].fill_(0.5)
    (y * torch.arange(12.0).reshape(3, 4)).sum().backward()
    return [x.grad, y]


def case_setitem_through_views(torch):
    x = _ramp(torch, 4)
    y = x * 2
    y[1:3] = x[0:2] * x[2:4]
    y[0] = 7
    (y * torch.arange(4.0)).sum().backward()
    return [x.grad, y]


def case_inplace_seen_by_a_view_made_before(torch):
    b = torch.zeros(4)
    w = torch.ones(2, requires_grad=True)
    u = b[0:2]
    b[1:3].copy_(w * 3)
    (u * torch.tensor([1.0, 10.0])).sum().backward()
    return [w.grad, u.requires_grad, b.requires_grad, _node(u.grad_fn)]


def case_inplace_on_the_base_seen_by_its_view(torch):
    x = _ramp(torch, 4)
    y = x * 2
    v = y[1:3]
    y.mul_(x)
    (v * torch.tensor([1.0, 10.0])).sum().backward()
    return [x.grad, v, _node(y.grad_fn)]


def case_inplace_mul_by_a_tensor_and_relu_inplace(torch):
    x, w = _ramp(torch, 5), _ramp(torch, 5)
    y = x * 2
    y.mul_(w)
    z = torch.nn.functional.relu(y, inplace=True)
    (z * torch.arange(5.0)).sum().backward()
    return [x.grad, w.grad, z, _node(y.grad_fn)]


def case_inplace_views_know_their_base(torch):
    x = _ones(torch)
    y = x * 2
    v = y[1:3]
    before = [v._is_view(), y._is_view(), y._base is None, v._base.shape, v.view(2, 1)._base.shape, x.detach()._is_view(), y._version]
    v.mul_(3)
    return before + [y._version, v._version]


def case_inplace_on_a_leaf_raises(torch):
    _ones(torch).mul_(2)


def case_inplace_zero_on_a_leaf_raises(torch):
    _ones(torch).zero_()


def case_setitem_on_a_leaf_raises(torch):
    x = _ones(torch)
    x[0] = 5


def case_inplace_through_a_view_of_a_leaf_raises(torch):
    _ones(torch)[1:3].mul_(2)


def case_inplace_on_a_leaf_under_no_grad(torch):
    x = _ones(torch)
    with torch.no_grad():
        x.mul_(2)
        x[0] = 3
    return [x, x._version, x.is_leaf, x.requires_grad]


def case_inplace_on_a_saved_result_raises(torch):
    x = _ones(torch)
    y = x.exp()
    y.add_(1)
    y.sum().backward()


def case_inplace_on_a_saved_input_raises(torch):
    x = _ones(torch)
    y = x * 2
    z = y * y
    y.add_(1)
    z.sum().backward()


def case_inplace_under_no_grad_on_a_saved_input_raises(torch):
    x, w = _ones(torch), torch.ones(4)
    z = x * w
    w.add_(1)
    z.sum().backward()


def case_inplace_through_data_is_not_checked(torch):
    x, w = _ones(torch), torch.ones(4)
    z = x * w
    w.data.add_(1)
    z.sum().backward()
    return [x.grad, w._version]


def case_inplace_on_a_view_made_under_no_grad_raises(torch):
    y = _ones(torch) * 1
    with torch.no_grad():
        v = y[0:2]
    v.mul_(2)


def case_inplace_copy_into_an_expanded_tensor_raises(torch):
    torch.zeros(1).expand(3).copy_(torch.ones(3))


def case_function_saved_tensor_written_in_place_raises(torch):
    x = _ramp(torch, 3) * 1
    y = _square(torch).apply(x)
    with torch.no_grad():
        x.add_(1)
    y.sum().backward()


def case_function_saved_output_written_in_place_raises(torch):
    class Exp(torch.autograd.Function):
        @staticmethod
        def forward(ctx, x):
            y = x.exp()
            ctx.save_for_backward(y)
            return y

        @staticmethod
        def backward(ctx, grad):
            (y,) = ctx.saved_tensors
            return y * grad

    y = Exp.apply(_ramp(torch, 3))
    y.add_(1)
    y.sum().backward()


def case_retain_graph_twice_accumulates(torch):
    x = _ramp(torch, 3)
    loss = (x.exp() * x).sum()
    loss.backward(retain_graph=True)
    first = x.grad.clone()
    loss.backward()
    return [first, x.grad]


def case_backward_twice_without_retain_graph_raises(torch):
    x = _ramp(torch, 3)
    loss = (x.exp() * x).sum()
    loss.backward()
    loss.backward()


def case_retain_graph_then_release(torch):
    x = _ramp(torch, 3)
    loss = (x * x).sum()
    loss.backward(retain_graph=True)
    loss.backward()
    loss.backward()


def case_autograd_grad_retain_graph(torch):
    x = _ramp(torch, 3)
    y = (x.sin() * x).sum()
    (g1,) = torch.autograd.grad(y, x, retain_graph=True)
    (g2,) = torch.autograd.grad(y, x)
    return [g1, g2]


def case_autograd_backward_retain_graph_and_shared_roots(torch):
    x = _ramp(torch, 3)
    a = x.exp()
    torch.autograd.backward([a.sum(), (a * 3).sum()], retain_graph=True)
    torch.autograd.backward(a.sum())
    return x.grad
