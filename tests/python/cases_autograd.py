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
