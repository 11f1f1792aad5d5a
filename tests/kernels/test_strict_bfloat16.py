"""Strict bfloat16 (``strict_fp16=True`` with bfloat16 input) in the row norms, BatchNorm,
WeightNorm and softmax: every step rounded to bfloat16, in the kernels' order; and the
residual blocks in both bfloat16 modes.

The references here are written independently of the kernels, in ``ml_dtypes.bfloat16``
scalar arithmetic: each ``+ - * /`` and ``sqrt`` of two bfloat16 values is computed in
float32 and rounded once to bfloat16, which is the correctly rounded bfloat16 operation
(float32's 24 bits are at least 2 * 8 + 2, so the double rounding is innocuous). ``exp``
is libm's float64 ``exp`` rounded once to bfloat16 (``round_float64``), as the kernels
document. The order of operations is each kernel's documented one: running sums left to
right, the mean and second moment divided by the length rounded to bfloat16, ``r =
1/sqrt(eps + s)``, ``y = beta + (d gamma) r`` (LayerNorm, from the generated ``*_bf16s``
stages); softmax's shifted ``exp``, left-to-right sum and quotients, and its backward pass
``c = sum_{j != m} y_j (g_m - g_j)``, ``dx_i = y_i ((g_i - g_m) + c)``.

Where bfloat16 breaks first: a running sum of ones stops at 256 (the spacing there is 2, and
``256 + 1`` is a tie that rounds to the even 256), as float16's stops at 2048.
"""

from __future__ import annotations

import math

import ml_dtypes
import numpy as np
import pytest

from derive.reference.formats import round_float64
from kernels import (
    batchnorm,
    centernorm,
    compose,
    layernorm,
    residual,
    rmsnorm,
    softmax,
    weighted_residual,
    weightnorm,
)

BF16 = np.dtype(ml_dtypes.bfloat16)
B = ml_dtypes.bfloat16


def bits(values: np.ndarray) -> list[int]:
    return np.asarray(values, BF16).view(np.uint16).ravel().tolist()


def rounded(value: float) -> B:
    """A float64 rounded once to bfloat16 (ml_dtypes' own cast goes through float32)."""
    return B(round_float64([value], BF16)[0])


def layernorm_row(row, gamma, beta, eps: float) -> list:
    """LayerNorm of one bfloat16 row in bfloat16 arithmetic, the kernel's order."""
    size = B(len(row))
    acc = B(0)
    for v in row:
        acc = acc + v
    mean = acc / size
    acc = B(0)
    for v in row:
        d = v - mean
        acc = acc + d * d
    s = acc / size
    r = B(1) / np.sqrt(rounded(eps) + s)
    return [
        beta_j + ((v - mean) * gamma_j) * r
        for v, gamma_j, beta_j in zip(row, gamma, beta, strict=True)
    ]


def softmax_row(row) -> list:
    top = max(row)
    e = [rounded(math.exp(float(v - top))) for v in row]
    s = B(0)
    for value in e:
        s = s + value
    return [value / s for value in e]


def softmax_vjp_row(row, g) -> list:
    y = softmax_row(row)
    m = int(np.argmax(np.asarray(row, np.float64)))
    c = B(0)
    for j in range(len(row)):
        if j != m:
            c = c + y[j] * (g[m] - g[j])
    return [y[i] * (c if i == m else (g[i] - g[m]) + c) for i in range(len(row))]


def random_bf16(rng, shape, scale: float = 1.0) -> np.ndarray:
    return (rng.standard_normal(shape) * scale).astype(np.float32).astype(BF16)


@pytest.mark.parametrize("seed", range(6))
def test_layernorm_rounds_every_step_to_bfloat16(seed):
    rng = np.random.default_rng(seed)
    dim = int(rng.integers(2, 40))
    x = random_bf16(rng, (3, dim), scale=float(rng.choice([1e-2, 1.0, 300.0])))
    x[0] += B(100)  # a row with a large mean: its deviations lose bits in bfloat16
    gamma, beta = random_bf16(rng, dim), random_bf16(rng, dim)
    got = layernorm.forward(x, gamma, beta, eps=1e-5, strict_fp16=True)
    assert got.dtype == BF16 and got.shape == x.shape
    expected = np.array([layernorm_row(list(row), list(gamma), list(beta), 1e-5) for row in x])
    assert bits(got) == bits(expected)
    assert bits(got) != bits(layernorm.forward(x, gamma, beta, eps=1e-5))  # mixed differs


@pytest.mark.parametrize("seed", range(6))
def test_softmax_rounds_every_step_to_bfloat16(seed):
    rng = np.random.default_rng(100 + seed)
    dim = int(rng.integers(1, 40))
    x = random_bf16(rng, (3, dim), scale=float(rng.choice([0.5, 4.0, 30.0])))
    g = random_bf16(rng, (3, dim))
    assert bits(softmax.forward(x, strict_fp16=True)) == bits([softmax_row(list(r)) for r in x])
    expected = [softmax_vjp_row(list(r), list(gr)) for r, gr in zip(x, g, strict=True)]
    assert bits(softmax.vjp(x, g, strict_fp16=True)) == bits(expected)


@pytest.mark.parametrize(("dim", "exact"), [(257, True), (258, False), (1024, False)])
def test_constant_row_is_beta_until_the_running_sum_stalls(dim, exact):
    """A row of D ones: the sum stalls at 256. D = 257 still gives mean 1, because D itself
    rounds to 256 in bfloat16; from D = 258 on the mean is 256/D, the deviations are not 0
    and y is not beta. Mixed mode gives beta at every D."""
    x = np.ones((1, dim), BF16)
    gamma, beta = np.ones(dim, BF16), np.full(dim, 0.5, BF16)
    strict = layernorm.forward(x, gamma, beta, strict_fp16=True).astype(np.float64)
    assert np.all(layernorm.forward(x, gamma, beta).astype(np.float64) == 0.5)
    assert np.all(strict == 0.5) == exact
    if not exact:
        mean = float(rounded(256.0 / float(rounded(dim))))
        assert mean < 1.0 and np.all(strict > 0.5)
    columns = np.ones((dim, 1), BF16)  # the same stall in BatchNorm's batch statistics
    strict_bn = batchnorm.forward(columns, gamma[:1], beta[:1], strict_fp16=True)
    assert np.all(strict_bn.astype(np.float64) == 0.5) == exact


def test_softmax_of_a_constant_row_stalls_at_one_over_256():
    """Every e_j is 1 and the sum stops at 256: y = 1/256 where the exact value is 1/512."""
    y = softmax.forward(np.zeros(512, BF16), strict_fp16=True).astype(np.float64)
    assert np.all(y == 2.0**-8)
    assert np.all(softmax.forward(np.zeros(512, BF16)).astype(np.float64) == 2.0**-9)
    assert np.all(softmax.forward(np.zeros(256, BF16), strict_fp16=True).astype(float) == 2**-8)


def test_eps_is_rounded_to_bfloat16_before_use():
    """eps = 1e-5 is 1.0013580322265625e-05 in bfloat16: the zero row's dx is
    ``gamma g / sqrt(eps)`` with that eps, every step rounded."""
    x, g = np.zeros((1, 2), BF16), np.array([[1.0, -1.0]], BF16)
    gamma = np.ones(2, BF16)
    dx, _, _ = layernorm.vjp(x, g, gamma, np.zeros(2, BF16), eps=1e-5, strict_fp16=True)
    eps = rounded(1e-5)
    assert float(eps) == 1.0013580322265625e-05
    r = B(1) / np.sqrt(eps)
    assert dx.astype(np.float64).tolist() == [[float(r), -float(r)]]


@pytest.mark.parametrize(
    "call",
    [
        lambda x, p, **k: rmsnorm.forward(x, p, **k),
        lambda x, p, **k: rmsnorm.vjp(x, x[::-1], p, **k),
        lambda x, p, **k: centernorm.forward(x, p, p, **k),
        lambda x, p, **k: centernorm.vjp(x, x[::-1], p, p, **k),
        lambda x, p, **k: layernorm.jacobian(x[0], p, p, **k),
        lambda x, p, **k: batchnorm.vjp(x, x[::-1], p, p, **k),
        lambda x, p, **k: batchnorm.forward(
            x, p, p, training=False, running_mean=p, running_var=p * p, **k
        ),
        lambda x, p, **k: batchnorm.jacobian(x, p, p, **k),
        lambda x, p, **k: weightnorm.forward(x, np.stack([p, p]), p[:2], **k),
        lambda x, p, **k: weightnorm.vjp(x, x[::-1, :2], np.stack([p, p]), p[:2], **k),
        lambda x, p, **k: softmax.jacobian(x[0], **k),
    ],
)
def test_every_output_is_bfloat16_and_near_the_float64_result(call):
    """The strict paths return bfloat16 arrays, and on these well-conditioned inputs (rows of
    6 values of N(0, 1), parameters near 2) each output lies within 2^-4 of the largest
    output magnitude of the float64 kernel: a handful of 8-bit roundings, not a wrong
    parameter, path or scale."""
    rng = np.random.default_rng(5)
    x, p = random_bf16(rng, (4, 6)), random_bf16(rng, 6) * B(0.25) + B(2)
    result = call(x, p, strict_fp16=True)
    wide = call(x.astype(np.float64), p.astype(np.float64))
    for array, exact in zip(
        *(r if isinstance(r, tuple) else (r,) for r in (result, wide)), strict=True
    ):
        if array is None:  # RMSNorm's dbeta: no beta
            assert exact is None
            continue
        assert array.dtype == BF16 and array.shape == exact.shape
        scale = np.max(np.abs(exact))
        assert np.max(np.abs(array.astype(np.float64) - exact)) <= 2.0**-4 * scale


def test_a_parameter_of_another_dtype_is_refused_in_strict_mode():
    x = np.ones((2, 3), BF16)
    with pytest.raises(TypeError, match=r"^gamma: expected dtype bfloat16"):
        layernorm.forward(x, np.ones(3, np.float32), np.ones(3, BF16), strict_fp16=True)
    with pytest.raises(TypeError, match=r"^g: expected dtype bfloat16"):
        softmax.vjp(x, np.ones((2, 3), np.float16), strict_fp16=True)
    with pytest.raises(TypeError, match=r"^v: expected dtype bfloat16"):
        weightnorm.forward(x, np.ones((2, 3)), np.ones(2, BF16), strict_fp16=True)


# --- the composite blocks: the glue around the branch, in both bfloat16 modes ---------------


def ffn_case(seed: int):
    rng = np.random.default_rng(300 + seed)
    size, hidden = 4, 3
    x, g = random_bf16(rng, (3, size)), random_bf16(rng, (3, size))
    w1, w2 = random_bf16(rng, (hidden, size)), random_bf16(rng, (size, hidden))
    b1, b2 = random_bf16(rng, hidden), random_bf16(rng, size)
    nu = random_bf16(rng, size)
    return x, g, compose.ffn(w1, b1, w2, b2), nu


@pytest.mark.parametrize("seed", range(4))
@pytest.mark.parametrize("strict", [False, True], ids=["mixed", "strict"])
def test_residual_blocks_add_the_branch_once_rounded(seed, strict):
    """``x + f``, ``g + J_f^T g`` and ``I + J_f`` from the branch's own outputs (its
    Jacobian before rounding, as the block takes it):
    mixed mode rounds the exact float64 sum once (``round_float64``), strict mode adds in
    bfloat16 arithmetic (the same single rounding, for two bfloat16 values); the weighted
    block rounds ``nu * f`` first in strict mode, and its ``dnu`` is a bfloat16 running
    sum down the rows there."""
    x, g, branch, nu = ffn_case(seed)
    mode = {"strict_fp16": strict}
    f = branch.forward(x, **mode)
    branch_dx, _ = branch.vjp(x, g, **mode)

    def added(a, b):
        if strict:
            a, b = a.astype(BF16), b.astype(BF16)  # exact: strict values are bfloat16's
            return np.array(
                [[p + q for p, q in zip(ra, rb, strict=True)] for ra, rb in zip(a, b, strict=True)]
            )
        return round_float64(a.astype(np.float64) + b.astype(np.float64), BF16)

    assert bits(residual.forward(x, branch, **mode)) == bits(added(x, f))
    dx, _ = residual.vjp(x, g, branch, **mode)
    assert bits(dx) == bits(added(g, branch_dx))
    jac = compose.wide_jacobian(branch, x[0], **mode)  # float64: the identity added before
    assert bits(residual.jacobian(x[0], branch, **mode)) == bits(added(np.eye(4, dtype=BF16), jac))

    weighted = weighted_residual.forward(x, branch, nu, **mode)
    if strict:
        expected = [
            [a + n * b for a, n, b in zip(ra, nu, rb, strict=True)]
            for ra, rb in zip(x, f, strict=True)
        ]
    else:
        expected = round_float64(
            x.astype(np.float64) + nu.astype(np.float64) * f.astype(np.float64), BF16
        )
    assert bits(weighted) == bits(expected)
    _, _, dnu = weighted_residual.vjp(x, g, branch, nu, **mode)
    if strict:
        column = [B(0)] * 4
        for grow, frow in zip(g, f, strict=True):
            column = [c + a * b for c, a, b in zip(column, grow, frow, strict=True)]
        assert bits(dnu) == bits(column)
    else:
        exact = (g.astype(np.float64) * f.astype(np.float64)).sum(axis=0)
        assert np.all(np.abs(dnu.astype(np.float64) - exact) <= 2.0**-8 * np.abs(exact))
