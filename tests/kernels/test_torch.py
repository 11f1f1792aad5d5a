"""kernels.torch: the kernels as autograd Functions pass torch.autograd.gradcheck in float64
and keep bfloat16 tensors bfloat16 (skipped without the optional PyTorch)."""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest

torch = pytest.importorskip("torch")
lt = pytest.importorskip("kernels.torch")


def _leaf(*shape):
    return torch.randn(*shape, dtype=torch.float64, requires_grad=True)


def _norm_inputs(rows):
    return lambda: (_leaf(rows, 5), _leaf(5), _leaf(5))


CASES = {
    "sigmoid": (lambda x: lt.sigmoid(x), lambda: (_leaf(3, 5),)),
    "gelu_tanh": (lambda x: lt.gelu(x, approximate="tanh"), lambda: (_leaf(3, 5),)),
    "softmax": (lambda x: lt.softmax(x), lambda: (_leaf(3, 5),)),
    "layernorm": (lambda x, g, b: lt.layernorm(x, g, b, eps=1e-3), _norm_inputs(3)),
    "rmsnorm": (lambda x, g: lt.rmsnorm(x, g, None, eps=1e-3), lambda: (_leaf(3, 5), _leaf(5))),
    "batchnorm": (lambda x, g, b: lt.batchnorm(x, g, b, eps=1e-3), _norm_inputs(4)),
    "linear": (lambda x, w, b: lt.linear(x, w, b), lambda: (_leaf(3, 5), _leaf(4, 5), _leaf(4))),
    "dp_attention": (
        lambda *a: lt.dp_attention(*a),
        lambda: (_leaf(4, 3), *(_leaf(2, 3) for _ in range(3))),
    ),
}


@pytest.mark.parametrize("name", CASES)
def test_gradcheck(name):
    torch.manual_seed(0)
    function, inputs = CASES[name]
    assert torch.autograd.gradcheck(function, inputs(), eps=1e-6, atol=1e-7)


def test_a_wrong_backward_fails_gradcheck():
    """gradcheck is not vacuous here: a Function whose backward doubles the gradient fails."""

    class Doubled(torch.autograd.Function):
        @staticmethod
        def forward(ctx, x):
            ctx.save_for_backward(x)
            return lt.sigmoid(x)

        @staticmethod
        def backward(ctx, g):
            (x,) = ctx.saved_tensors
            s = torch.sigmoid(x)
            return 2 * g * s * (1 - s)

    with pytest.raises(RuntimeError, match="Jacobian mismatch"):  # GradcheckError
        torch.autograd.gradcheck(Doubled.apply, (_leaf(4),), eps=1e-6, atol=1e-7)


def test_bfloat16_tensors_stay_bfloat16_and_match_the_numpy_kernel():
    from kernels import gelu

    x = torch.randn(4, 8).to(torch.bfloat16).requires_grad_()
    y = lt.gelu(x)
    y.sum().backward()
    assert y.dtype == x.grad.dtype == torch.bfloat16
    bits = x.detach().view(torch.int16).numpy().view(np.uint16)

    xs = bits.view(ml_dtypes.bfloat16)
    assert np.array_equal(
        y.detach().view(torch.int16).numpy().view(np.uint16), gelu.forward(xs).view(np.uint16)
    )
