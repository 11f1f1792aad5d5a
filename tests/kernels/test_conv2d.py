"""Conv2d (``kernels.conv2d``) against the mpmath references, in float64, float32, float16.

Reference: ``derive/reference/linear.py`` (mpmath at 50 digits, inputs taken exactly; the
VJP by explicit index sums over every (output pixel, kernel tap) pair of the definition).
Both padding modes, strides 1 and 2 (also mixed per axis), non-square kernels, paddings
0..2 per axis. float16 is tested in "mixed" mode against the references and in
``strict_fp16`` mode bit for bit against a sequential half-precision evaluation written
here with NumPy float16 rounding, in the kernel's documented order; strict bfloat16 against
the same evaluation in ``ml_dtypes.bfloat16`` scalar arithmetic.

Error bound: that of ``tests/kernels/test_linear.py`` (its module docstring derives it): every
output is a sum of ``n`` terms, computed in float64 within ``gamma_n S`` of the exact value
(``S`` the sum of the terms' magnitudes, computed by the reference from the absolute values
of the inputs), and rounded once to the output dtype; the result must lie between the
roundings of ``exact -+ gamma_n S``. The kernel splits each sum differently (a BLAS product
over channels and taps for y; over outputs, then a scatter over taps for dx), but any
split of ``n`` terms into partial sums passes every term through at most ``n - 1``
additions and one product rounding, so the bound holds as derived. Term counts: y has
``C Kh Kw`` (plus the bias); dW and db have ``N Ho Wo``; ``dx[n, c, r, s]`` has one term per
(o, i, j, p, q) whose tap reads pixel (r, s) -- counted by the reference itself, as the dx
of all-ones inputs (with circular padding a pixel can be read by several taps of one
window); a Jacobian entry sums at most ``Kh Kw`` weights.

Consistency: the Jacobian equals ``linear_operator(...).to_dense()`` and its columns equal
``forward(e_j) - forward(0)`` exactly (integer weights: every sum is exact); ``matvec`` and
``rmatvec`` are ``J v`` and ``J^T u``; and ``<A v, u> = <v, A^T u>`` in float64 within the
bound derived at ``test_adjoint_identity_holds_in_float64``.

Speed: ``python -m tests.kernels.test_conv2d`` times forward + vjp on x (8, 64, 56, 56), W (64, 64,
3, 3), padding 1 against the NumPy im2col implementation below (sliding_window_view +
tensordot, col2im by strided adds).
"""

from __future__ import annotations

import itertools
import operator
import time
import warnings

import mpmath
import numpy as np
import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp
from numpy.lib.stride_tricks import sliding_window_view

import kernels.conv2d as conv2d
from derive.reference import linear as reference_linear
from derive.reference.formats import round_float64
from tests.helpers.norms import assert_same_values
from tests.kernels.test_linear import (
    BF16,
    BF16_VALUES,
    DTYPE_IDS,
    DTYPE_MODE_IDS,
    DTYPE_MODES,
    DTYPES,
    HALF,
    SPECIAL_VALUES,
    absolute,
    arrays,
    assert_same_bits,
    assert_same_halves,
    assert_within,
    bf16_sum,
    gamma,
    h,
    half_sum,
)

PADDING_MODES = ("zeros", "circular")
#: Shapes drawn: samples, channels, outputs, image sides, kernel sides, padding, strides.
MAX_SAMPLES, MAX_CHANNELS, MAX_OUTPUTS = 2, 2, 2
MAX_SIDE, MAX_KERNEL, MAX_PADDING = 4, 3, 2
STRIDES = (1, 2, (1, 2), (2, 1))
#: Examples per reference property (mpmath is slow; the file must run in under 60 s).
EXAMPLES = 40


# --------------------------------------------------------------------------------------
# Drawn cases
# --------------------------------------------------------------------------------------


@st.composite
def geometries(draw: st.DrawFn) -> dict:
    """Shapes and hyperparameters of a valid convolution (no filtering: the kernel is
    drawn to fit the padded input, circular padding up to the image side)."""
    samples = draw(st.integers(1, MAX_SAMPLES))
    channels = draw(st.integers(1, MAX_CHANNELS))
    outputs = draw(st.integers(1, MAX_OUTPUTS))
    height, width = draw(st.integers(1, MAX_SIDE)), draw(st.integers(1, MAX_SIDE))
    mode = draw(st.sampled_from(PADDING_MODES))
    limit = (MAX_PADDING, MAX_PADDING)
    if mode == "circular":
        limit = (min(height, MAX_PADDING), min(width, MAX_PADDING))
    pads = (draw(st.integers(0, limit[0])), draw(st.integers(0, limit[1])))
    kernel = (
        draw(st.integers(1, min(MAX_KERNEL, height + 2 * pads[0]))),
        draw(st.integers(1, min(MAX_KERNEL, width + 2 * pads[1]))),
    )
    padding = pads[0] if pads[0] == pads[1] and draw(st.booleans()) else pads
    return {
        "x": (samples, channels, height, width),
        "W": (outputs, channels, *kernel),
        "stride": draw(st.sampled_from(STRIDES)),
        "padding": padding,
        "padding_mode": mode,
    }


def output_shape(geometry: dict) -> tuple[int, int, int, int]:
    """(N, O, Ho, Wo), computed here from the definition's formula."""
    samples, _, height, width = geometry["x"]
    outputs, _, kh, kw = geometry["W"]
    sh, sw = pair(geometry["stride"])
    ph, pw = pair(geometry["padding"])
    return (samples, outputs, (height + 2 * ph - kh) // sh + 1, (width + 2 * pw - kw) // sw + 1)


def pair(value) -> tuple[int, int]:
    return tuple(value) if isinstance(value, tuple) else (value, value)


@st.composite
def cases(draw: st.DrawFn, dtype: np.dtype, elements=None) -> tuple:
    geometry = draw(geometries())
    draw_array = (
        (lambda shape: draw(arrays(dtype, shape)))
        if elements is None
        else (lambda shape: draw(hnp.arrays(dtype, shape, elements=elements)))
    )
    x = draw_array(geometry["x"])
    W = draw_array(geometry["W"])
    b = draw_array(geometry["W"][:1]) if draw(st.booleans()) else None
    g = draw_array(output_shape(geometry))
    return x, g, W, b, geometry


def hyper(geometry: dict) -> tuple:
    """(stride, padding, padding_mode) of a geometry, for the reference functions."""
    return geometry["stride"], geometry["padding"], geometry["padding_mode"]


def keywords(geometry: dict) -> dict:
    return {
        "stride": geometry["stride"],
        "padding": geometry["padding"],
        "padding_mode": geometry["padding_mode"],
    }


def _pinned(dtype: np.dtype) -> list[tuple]:
    """@example cases: float16's overflow boundary through a 1x1 convolution over two
    channels; one pixel read by all nine taps of a circular 3x3 window (H = Wd = 1,
    padding 1), whose terms overflow half one by one but not in total; a stride-2 case;
    sums whose half-precision value depends on their order (2048 + 1 = 2048 in half)."""
    one_by_one = {"x": (1, 2, 1, 1), "W": (1, 2, 1, 1), "stride": 1, "padding": 0}
    wrap = {"x": (1, 1, 1, 1), "W": (1, 1, 3, 3), "stride": 1, "padding": 1}
    strided = {"x": (1, 1, 3, 4), "W": (1, 1, 2, 3), "stride": (2, 1), "padding": (1, 0)}
    arr = lambda values, shape: np.array(values, dtype).reshape(shape)  # noqa: E731
    nine = [60000.0, -60000.0, 60000.0, -60000.0, 60000.0, -60000.0, 60000.0, -60000.0, 1.0]
    return [
        (
            arr([65504.0, 16.0], (1, 2, 1, 1)),
            arr([1.0], (1, 1, 1, 1)),
            arr([1.0, 1.0], (1, 2, 1, 1)),
            None,
            {**one_by_one, "padding_mode": "zeros"},
        ),
        (
            arr([65504.0, 15.9921875], (1, 2, 1, 1)),
            arr([2.0], (1, 1, 1, 1)),
            arr([1.0, 1.0], (1, 2, 1, 1)),
            arr([0.0], (1,)),
            {**one_by_one, "padding_mode": "circular"},
        ),
        (
            arr([1.0], (1, 1, 1, 1)),
            arr([1.0], (1, 1, 1, 1)),
            arr(nine, (1, 1, 3, 3)),
            None,
            {**wrap, "padding_mode": "circular"},
        ),
        (
            arr([256.0, -1.0, 0.5, 3.0] * 3, (1, 1, 3, 4)),
            arr([1.0, -3.0, 0.5, 65504.0], (1, 1, 2, 2)),
            arr([256.0, 1.0, -1.0, 0.0, 2.0, 2.0**-14], (1, 1, 2, 3)),
            arr([1.0], (1,)),
            {**strided, "padding_mode": "zeros"},
        ),
        (  # absorption: 2048 + 1 rounds back to 2048 in half, so the order of a sum shows
            arr([2048.0, 1.0, 1.0, 1.0], (1, 1, 2, 2)),
            arr([2048.0] + [1.0] * 8, (1, 1, 3, 3)),
            arr([1.0, 1.0, 1.0, 1.0], (1, 1, 2, 2)),
            arr([1.0], (1,)),
            {
                "x": (1, 1, 2, 2),
                "W": (1, 1, 2, 2),
                "stride": 1,
                "padding": 1,
                "padding_mode": "circular",
            },
        ),
    ]


def _with_pinned(dtype: np.dtype):
    def decorate(test):
        for case in _pinned(dtype):
            test = example(case=case)(test)
        return test

    return decorate


# --------------------------------------------------------------------------------------
# Against the references
# --------------------------------------------------------------------------------------


def check_against_reference(dtype: np.dtype, case: tuple) -> None:
    x, g, W, b, geometry = case
    args = hyper(geometry)
    y = conv2d.forward(x, W, b, **keywords(geometry))
    exact = reference_linear.conv2d_forward(x, W, b, *args)
    scale = reference_linear.conv2d_forward(np.abs(x), np.abs(W), absolute(b), *args)
    _, channels, kh, kw = W.shape
    assert_within("conv2d.forward y", y, exact, scale, channels * kh * kw + (b is not None), dtype)

    dx, dW, db = conv2d.vjp(x, g, W, b, **keywords(geometry))
    exact = reference_linear.conv2d_vjp(x, g, W, b, *args)
    scales = reference_linear.conv2d_vjp(np.abs(x), np.abs(g), np.abs(W), absolute(b), *args)
    ones = [np.ones(a.shape) for a in (x, g, W)]
    counts = reference_linear.conv2d_vjp(*ones, None, *args)[0].astype(np.int64)
    pixels = int(np.prod(np.delete(g.shape, 1)))  # N Ho Wo
    assert_within("conv2d.vjp dx", dx, exact[0], scales[0], counts, dtype)
    assert_within("conv2d.vjp dW", dW, exact[1], scales[1], pixels, dtype)
    if b is None:
        assert db is None, "conv2d.vjp: db must be None without a bias"
    else:
        assert_within("conv2d.vjp db", db, exact[2], scales[2], pixels, dtype)

    J = conv2d.jacobian(x[0], W, b, **keywords(geometry))
    exact = reference_linear.conv2d_jacobian(x[0], W, b, *args)
    scale = reference_linear.conv2d_jacobian(x[0], np.abs(W), None, *args)
    assert_within("conv2d.jacobian", J, exact, scale, kh * kw, dtype)


@settings(max_examples=EXAMPLES)
@given(case=cases(DTYPES[0]))
@_with_pinned(DTYPES[0])
def test_float64_matches_reference(case):
    check_against_reference(DTYPES[0], case)


@settings(max_examples=EXAMPLES)
@given(case=cases(DTYPES[1]))
@_with_pinned(DTYPES[1])
def test_float32_matches_reference(case):
    check_against_reference(DTYPES[1], case)


@settings(max_examples=EXAMPLES)
@given(case=cases(HALF))
@_with_pinned(HALF)
def test_float16_mixed_matches_reference(case):
    check_against_reference(HALF, case)


@pytest.mark.parametrize("dtype", DTYPES, ids=DTYPE_IDS)
def test_float16_boundary_cases_come_out_exactly(dtype):
    """The pinned cases have float64-exact sums: every result is the correct rounding."""
    expected = {
        0: (np.inf, 65520.0),  # 65504 + 16: the tie at 65520 rounds to inf in half
        1: (65504.0, 65519.9921875),
        2: (1.0, 1.0),  # nine terms of +-60000 and 1, through one wrapped pixel
    }
    for number, (half_value, exact_value) in expected.items():
        x, _, W, b, geometry = _pinned(dtype)[number]
        y = conv2d.forward(x, W, b, **keywords(geometry))
        want = half_value if dtype == HALF else exact_value
        assert_same_values(f"pinned case {number}", y.reshape(-1), np.array([want], dtype))


# --------------------------------------------------------------------------------------
# strict_fp16 against a sequential half-precision evaluation
# --------------------------------------------------------------------------------------


def source(padded: int, pad: int, size: int, circular: bool) -> int | None:
    """The input index held by a padded index, or None for a padded zero."""
    index = padded - pad
    if circular:
        return index % size
    return index if 0 <= index < size else None


def strict_reference(x, g, W, b, geometry, bfloat16: bool = False) -> tuple[np.ndarray, ...]:
    """Every product and partial sum rounded to half, in the kernel's documented order:
    y over (c, p, q) then + b; dW and db over (n, i, j); dx over (o, p, i, q, j); the
    Jacobian over (p, q). ``bfloat16``: the same in ``ml_dtypes.bfloat16`` scalar
    arithmetic (bfloat16 arrays in and out; each operation computed in float32 and rounded
    once, the correctly rounded bfloat16 operation, 24 >= 2 * 8 + 2)."""
    if bfloat16:
        out, zero, total, result = BF16, BF16.type(0.0), bf16_sum, BF16
        product, plus = operator.mul, operator.add
    else:
        x, g, W = (a.astype(np.float64) for a in (x, g, W))
        out, zero, total, result = np.float64, 0.0, half_sum, HALF
        product, plus = (lambda a, b: h(a * b)), (lambda a, b: h(a + float(b)))
    samples, channels, height, width = x.shape
    outputs, _, kh, kw = W.shape
    _, _, out_h, out_w = g.shape
    sh, sw = pair(geometry["stride"])
    ph, pw = pair(geometry["padding"])
    circular = geometry["padding_mode"] == "circular"
    row = lambda i, p: source(i * sh + p, ph, height, circular)  # noqa: E731
    col = lambda j, q: source(j * sw + q, pw, width, circular)  # noqa: E731

    def xp(n, c, r, s):
        return zero if r is None or s is None else x[n, c, r, s]

    y = np.empty(g.shape, out)
    for n, o, i, j in np.ndindex(g.shape):
        terms = [
            product(xp(n, c, row(i, p), col(j, q)), W[o, c, p, q])
            for c, p, q in itertools.product(range(channels), range(kh), range(kw))
        ]
        y[n, o, i, j] = total(terms)
        if b is not None:
            y[n, o, i, j] = plus(y[n, o, i, j], b[o])
    dW = np.empty(W.shape, out)
    for o, c, p, q in np.ndindex(W.shape):
        dW[o, c, p, q] = total(
            [
                product(g[n, o, i, j], xp(n, c, row(i, p), col(j, q)))
                for n, i, j in itertools.product(range(samples), range(out_h), range(out_w))
            ]
        )
    db = np.array([total(list(g[:, o].reshape(-1))) for o in range(outputs)], out)
    dx = np.empty(x.shape, out)
    for n, c, r, s in np.ndindex(x.shape):
        dx[n, c, r, s] = total(
            [
                product(g[n, o, i, j], W[o, c, p, q])
                for o in range(outputs)
                for p in range(kh)
                for i in range(out_h)
                if row(i, p) == r
                for q in range(kw)
                for j in range(out_w)
                if col(j, q) == s
            ]
        )
    J = np.empty((outputs * out_h * out_w, channels * height * width), out)
    for (o, i, j), (c, r, s) in itertools.product(
        np.ndindex(outputs, out_h, out_w), np.ndindex(channels, height, width)
    ):
        J[(o * out_h + i) * out_w + j, (c * height + r) * width + s] = total(
            [
                W[o, c, p, q]
                for p, q in itertools.product(range(kh), range(kw))
                if row(i, p) == r and col(j, q) == s
            ]
        )
    with np.errstate(over="ignore"):
        return tuple(None if a is None else a.astype(result) for a in (y, dx, dW, db, J))


#: Values of the strict draws: products and sums overflow half often enough.
STRICT_VALUES = st.one_of(
    st.floats(width=16, min_value=-400.0, max_value=400.0), st.sampled_from(SPECIAL_VALUES)
)


@settings(max_examples=EXAMPLES)
@given(case=cases(HALF, STRICT_VALUES))
@_with_pinned(HALF)
def test_strict_fp16_rounds_every_step_in_order(case):
    x, g, W, b, geometry = case
    y, dx, dW, db, J = strict_reference(x, g, W, b, geometry)
    strict = {**keywords(geometry), "strict_fp16": True}
    assert_same_halves("strict y", conv2d.forward(x, W, b, **strict), y)
    got = conv2d.vjp(x, g, W, b, **strict)
    assert_same_halves("strict dx", got[0], dx)
    assert_same_halves("strict dW", got[1], dW)
    if b is None:
        assert got[2] is None
    else:
        assert_same_halves("strict db", got[2], db)
    assert_same_halves("strict jacobian", conv2d.jacobian(x[0], W, b, **strict), J)


def test_strict_fp16_overflows_where_mixed_does_not():
    """Nine taps on one wrapped pixel: 60000 - 60000 + ... + 1. Mixed gives 1 exactly;
    strict half arithmetic also gives 1 (each partial sum is representable); 300^2 = 90000
    overflows a product: mixed 60000, strict inf."""
    x, _, W, b, geometry = _pinned(HALF)[2]
    assert conv2d.forward(x, W, b, **keywords(geometry), strict_fp16=True)[0, 0, 0, 0] == 1.0
    x = np.array([300.0, 1.0], HALF).reshape(1, 2, 1, 1)
    W = np.array([300.0, -30000.0], HALF).reshape(1, 2, 1, 1)
    assert conv2d.forward(x, W)[0, 0, 0, 0] == 60000.0
    assert np.isposinf(conv2d.forward(x, W, strict_fp16=True)[0, 0, 0, 0])
    g = np.array([300.0], HALF).reshape(1, 1, 1, 1)
    dx = conv2d.vjp(x, g, W)[0]
    assert_same_values("mixed dx = g W", dx.reshape(-1), np.array([np.inf, -np.inf], HALF))


# --------------------------------------------------------------------------------------
# Strict bfloat16
# --------------------------------------------------------------------------------------


def _as_bf16(case: tuple) -> tuple:
    """A drawn case of bfloat16-valued float64 arrays as bfloat16 arrays (exact)."""
    return (*(None if a is None else a.astype(BF16) for a in case[:4]), case[4])


def _pinned_bf16() -> list[tuple]:
    """@example cases: 300 channels of ones (the running sum stalls at 256); a product past
    bfloat16's range (1.9e19^2 > 3.39e38) cancelled by the next term; the nine taps of a
    circular 3x3 window on one pixel with absorption (``256 + 1`` and ``256 + 258 = 514``
    round to 256 and 512: y = 2.75 where the exact value is 8.75)."""
    arr = lambda values, shape: np.array(values, np.float64).reshape(shape).astype(BF16)  # noqa: E731
    return [
        (
            arr([1.0] * 300, (1, 300, 1, 1)),
            arr([1.0], (1, 1, 1, 1)),
            arr([1.0] * 300, (1, 300, 1, 1)),
            arr([1.0], (1,)),
            {"x": (1, 300, 1, 1), "W": (1, 300, 1, 1), "stride": 1, "padding": 0,
             "padding_mode": "zeros"},
        ),
        (
            arr([1.9e19, 1.0], (1, 2, 1, 1)),
            arr([3.0], (1, 1, 1, 1)),
            arr([1.9e19, -1.0], (1, 2, 1, 1)),
            None,
            {"x": (1, 2, 1, 1), "W": (1, 2, 1, 1), "stride": 1, "padding": 0,
             "padding_mode": "circular"},
        ),
        (
            arr([1.0], (1, 1, 1, 1)),
            arr([255.0], (1, 1, 1, 1)),
            arr([256.0, 1.0, 1.0, 258.0, 1.0, -512.0, 3.0, 0.5, 0.25], (1, 1, 3, 3)),
            arr([-1.0], (1,)),
            {"x": (1, 1, 1, 1), "W": (1, 1, 3, 3), "stride": 1, "padding": 1,
             "padding_mode": "circular"},
        ),
    ]  # fmt: skip


@settings(max_examples=EXAMPLES)
@given(case=cases(np.dtype(np.float64), BF16_VALUES).map(_as_bf16))
def test_strict_bfloat16_matches_an_ml_dtypes_emulation(case):
    """Strict bfloat16 forward, VJP and Jacobian bit for bit against
    ``strict_reference(..., bfloat16=True)`` (ml_dtypes scalar arithmetic in the documented
    order); the draws are those of tests/kernels/test_linear.py's strict bfloat16 test."""
    check_strict_bf16(case)


@pytest.mark.parametrize("case", _pinned_bf16(), ids=["300-channels", "overflow", "wrap"])
def test_strict_bfloat16_pinned_cases_match_the_emulation(case):
    check_strict_bf16(case)


def check_strict_bf16(case: tuple) -> None:
    x, g, W, b, geometry = case
    y, dx, dW, db, J = strict_reference(x, g, W, b, geometry, bfloat16=True)
    strict = {**keywords(geometry), "strict_fp16": True}
    assert_same_bits("strict y", conv2d.forward(x, W, b, **strict), y)
    got = conv2d.vjp(x, g, W, b, **strict)
    assert_same_bits("strict dx", got[0], dx)
    assert_same_bits("strict dW", got[1], dW)
    if b is None:
        assert got[2] is None
    else:
        assert_same_bits("strict db", got[2], db)
    assert_same_bits("strict jacobian", conv2d.jacobian(x[0], W, b, **strict), J)


def test_strict_bfloat16_convolution_sums_stall_at_256():
    """A 17 x 17 kernel of ones on a 17 x 17 image of ones: one output, the sum of 289
    products 1 * 1 over (p, q). bfloat16 holds every integer up to 256 (8 significant bits);
    between 256 and 512 its spacing is 2, so ``256 + 1 = 257`` is the tie between 256 and
    258 and rounds to the even significand, 256: every later term is lost, y = 256 (strict
    float16, exact below 2048, gives 289). The VJP of a 1 x 1 kernel with g = 1 on the same
    image sums 289 terms over (n, i, j) for dW (products g x = 1) and for db: both 256; each
    pixel's dx = g W = 1 is one term."""
    ones = np.ones((1, 1, 17, 17), BF16)
    y = conv2d.forward(ones, ones, strict_fp16=True)
    assert y.dtype == BF16 and y.shape == (1, 1, 1, 1)
    assert_same_values("y", y, np.full((1, 1, 1, 1), 256.0))
    half = ones.astype(HALF)
    assert_same_values("float16 y", conv2d.forward(half, half, strict_fp16=True), 289.0)
    unit = np.ones((1, 1, 1, 1), BF16)
    dx, dW, db = conv2d.vjp(ones, ones, unit, np.zeros(1, BF16), strict_fp16=True)
    assert_same_values("dW", dW, np.full((1, 1, 1, 1), 256.0))
    assert_same_values("db", db, [256.0])
    assert_same_values("dx", dx, ones)


def test_strict_bfloat16_results_are_bfloat16_and_other_dtypes_are_type_errors():
    """bfloat16 in strict mode: bfloat16 results of the documented shapes; W, b or g of
    another float dtype is a TypeError naming it; a bfloat16 x reaching the undecorated
    kernel in mixed mode is a TypeError too."""
    x, W, b = np.ones((2, 3, 5, 4), BF16), np.ones((2, 3, 3, 2), BF16), np.ones(2, BF16)
    g = np.ones((2, 2, 3, 3), BF16)
    strict = {"strict_fp16": True, "padding": 0}
    assert conv2d.forward(x, W, b, **strict).shape == g.shape
    results = conv2d.vjp(x, g, W, b, **strict)
    assert [r.shape for r in results] == [x.shape, W.shape, b.shape]
    assert all(r.dtype == BF16 for r in results)
    J = conv2d.jacobian(x[0], W, b, **strict)
    assert J.dtype == BF16 and J.shape == (2 * 3 * 3, 3 * 5 * 4)
    for other in (np.float16, np.float32):
        with pytest.raises(TypeError, match=r"^W: expected dtype bfloat16"):
            conv2d.forward(x, W.astype(other), b, **strict)
        with pytest.raises(TypeError, match=r"^b: expected dtype bfloat16"):
            conv2d.forward(x, W, b.astype(other), **strict)
        with pytest.raises(TypeError, match=r"^g: expected dtype bfloat16"):
            conv2d.vjp(x, g.astype(other), W, b, **strict)
    with pytest.raises(TypeError, match=r"^x: bfloat16 reaches this path in strict mode only"):
        conv2d.forward.__wrapped__(x, W, b)


def test_the_operator_takes_bfloat16():
    """``linear_operator`` with a bfloat16 W: A v, A^T u and the dense matrix are the float64
    operator's results rounded once to bfloat16 (directly, not through float32), bit for
    bit, and a vector of another dtype is a TypeError."""
    rng = np.random.default_rng(8)
    W = rng.standard_normal((3, 2, 3, 3)).astype(np.float32).astype(BF16)
    A = conv2d.linear_operator(W, (2, 5, 5), padding=1)
    wide = conv2d.linear_operator(W.astype(np.float64), (2, 5, 5), padding=1)
    v = rng.standard_normal(A.shape[1]).astype(np.float32).astype(BF16)
    u = rng.standard_normal(A.shape[0]).astype(np.float32).astype(BF16)
    for got, exact in (
        (A.matvec(v), wide.matvec(v.astype(np.float64))),
        (A.rmatvec(u), wide.rmatvec(u.astype(np.float64))),
        (A.to_dense(), wide.to_dense()),
    ):
        assert got.dtype == BF16
        assert_same_bits("bfloat16 operator", got, round_float64(exact, BF16))
    with pytest.raises(TypeError, match=r"^v: expected dtype bfloat16"):
        A.matvec(v.astype(np.float32))


# --------------------------------------------------------------------------------------
# The Jacobian, the operator and the adjoint
# --------------------------------------------------------------------------------------


@settings(max_examples=EXAMPLES)
@given(geometry=geometries(), data=st.data())
def test_jacobian_is_the_operator_and_the_columns_of_forward(geometry, data):
    small_integers = st.integers(-8, 8).map(float)
    W = data.draw(hnp.arrays(np.float64, geometry["W"], elements=small_integers))
    b = data.draw(hnp.arrays(np.float64, geometry["W"][:1], elements=small_integers))
    sample_shape = geometry["x"][1:]
    size = int(np.prod(sample_shape))
    J = conv2d.jacobian(np.zeros(sample_shape), W, b, **keywords(geometry))
    A = conv2d.linear_operator(W, sample_shape, **keywords(geometry))
    assert A.shape == J.shape == (int(np.prod(output_shape(geometry)[1:])), size)
    assert_same_values("to_dense", A.to_dense(), J)
    base = conv2d.forward(np.zeros((1, *sample_shape)), W, b, **keywords(geometry))
    for column in range(size):
        unit = np.zeros(size)
        unit[column] = 1.0
        shifted = conv2d.forward(unit.reshape(1, *sample_shape), W, b, **keywords(geometry))
        assert_same_values(f"J[:, {column}]", J[:, column], (shifted - base).reshape(-1))
        assert_same_values(f"A e_{column}", A.matvec(unit), J[:, column])
    v = data.draw(hnp.arrays(np.float64, size, elements=small_integers))
    u = data.draw(hnp.arrays(np.float64, J.shape[0], elements=small_integers))
    assert_same_values("A v", A.matvec(v), J @ v)
    assert_same_values("A^T u", A.rmatvec(u), J.T @ u)
    u_image = u.reshape(1, *output_shape(geometry)[1:])
    dx = conv2d.vjp(v.reshape(1, *sample_shape), u_image, W, **keywords(geometry))[0]
    assert_same_values("vjp dx = A^T u", dx.reshape(-1), A.rmatvec(u))


@settings(max_examples=EXAMPLES)
@given(geometry=geometries(), data=st.data())
def test_adjoint_identity_holds_in_float64(geometry, data):
    """``<A v, u> = <v, A^T u>``. Each side is a sum of the products ``u_row W v_col`` over
    the (output, tap) pairs, formed by the kernel and a float64 dot product; every term
    passes through at most two product roundings and fewer additions than there are
    terms plus the two vector lengths, so each side is within ``gamma_k S`` of the exact
    value with ``k = terms + n_in + n_out + 2`` and ``S = sum |u_row| |W| |v_col|``, the
    same triple sum with absolute values (exact, from the reference's Jacobian of |W|)."""
    floats = st.floats(-1e3, 1e3, allow_subnormal=False)
    W = data.draw(hnp.arrays(np.float64, geometry["W"], elements=floats))
    sample_shape = geometry["x"][1:]
    A = conv2d.linear_operator(W, sample_shape, **keywords(geometry))
    v = data.draw(hnp.arrays(np.float64, A.shape[1], elements=floats))
    u = data.draw(hnp.arrays(np.float64, A.shape[0], elements=floats))
    left = float(np.dot(A.matvec(v), u))
    right = float(np.dot(v, A.rmatvec(u)))
    absolute_J = reference_linear.conv2d_jacobian(
        np.zeros(sample_shape), np.abs(W), None, *hyper(geometry)
    )
    _, channels, kh, kw = W.shape
    terms = A.shape[0] * channels * kh * kw
    with mpmath.workdps(30):
        scale = mpmath.fsum(
            abs(mpmath.mpf(u[i])) * absolute_J[i, j] * abs(mpmath.mpf(v[j]))
            for i, j in np.ndindex(absolute_J.shape)
        )
        allowed = 2 * gamma(terms + A.shape[0] + A.shape[1] + 2) * scale
        difference = abs(mpmath.mpf(left) - mpmath.mpf(right))
        assert difference <= allowed, (
            f"<Av, u> = {left!r} but <v, A^T u> = {right!r}: |difference| "
            f"{mpmath.nstr(difference, 4)} > {mpmath.nstr(allowed, 4)} (geometry {geometry})"
        )


# --------------------------------------------------------------------------------------
# Against a plain NumPy im2col implementation, at a size the references cannot reach
# --------------------------------------------------------------------------------------


def numpy_padded(x: np.ndarray, padding: tuple[int, int], mode: str) -> np.ndarray:
    widths = ((0, 0), (0, 0), (padding[0], padding[0]), (padding[1], padding[1]))
    return np.pad(x, widths, mode="wrap" if mode == "circular" else "constant")


def numpy_forward(x, W, b=None, stride=1, padding=0, padding_mode="zeros"):
    """Plain NumPy im2col: sliding windows of the padded input, one tensordot."""
    sh, sw = pair(stride)
    windows = sliding_window_view(
        numpy_padded(x, pair(padding), padding_mode), W.shape[2:], axis=(2, 3)
    )[:, :, ::sh, ::sw]
    y = np.tensordot(windows, W, axes=([1, 4, 5], [1, 2, 3])).transpose(0, 3, 1, 2)
    return y if b is None else y + b[np.newaxis, :, np.newaxis, np.newaxis]


def numpy_vjp(x, g, W, b=None, stride=1, padding=0, padding_mode="zeros"):
    """Plain NumPy backward: dW by tensordot with the windows, dx by col2im (strided adds
    into the padded input, then the padding folded back: cut off, or wrapped around)."""
    sh, sw = pair(stride)
    ph, pw = pair(padding)
    padded = numpy_padded(x, (ph, pw), padding_mode)
    windows = sliding_window_view(padded, W.shape[2:], axis=(2, 3))[:, :, ::sh, ::sw]
    dW = np.tensordot(g, windows, axes=([0, 2, 3], [0, 2, 3]))
    db = None if b is None else g.sum(axis=(0, 2, 3))
    columns = np.tensordot(g, W, axes=([1], [0]))  # (N, Ho, Wo, C, Kh, Kw)
    dpadded = np.zeros_like(padded)
    out_h, out_w = g.shape[2:]
    for p, q in np.ndindex(W.shape[2:]):
        dpadded[:, :, p : p + sh * (out_h - 1) + 1 : sh, q : q + sw * (out_w - 1) + 1 : sw] += (
            columns[..., p, q].transpose(0, 3, 1, 2)
        )
    height, width = x.shape[2:]
    if padding_mode == "zeros":
        return dpadded[:, :, ph : ph + height, pw : pw + width], dW, db
    dx = np.zeros_like(x)
    for (P, r), (Q, s) in itertools.product(
        enumerate((np.arange(padded.shape[2]) - ph) % height),
        enumerate((np.arange(padded.shape[3]) - pw) % width),
    ):
        dx[:, :, r, s] += dpadded[:, :, P, Q]
    return dx, dW, db


MEDIUM_CASES = [
    # x shape, W shape, stride, padding, mode
    ((5, 3, 9, 8), (4, 3, 3, 2), 1, 1, "zeros"),
    ((5, 3, 9, 8), (4, 3, 3, 3), (2, 1), (1, 2), "circular"),
    ((3, 2, 7, 7), (3, 2, 5, 5), 2, 2, "zeros"),
    ((3, 2, 7, 7), (2, 2, 3, 3), 1, 7 // 2, "circular"),
]


@pytest.mark.parametrize(("x_shape", "w_shape", "stride", "padding", "mode"), MEDIUM_CASES)
def test_medium_sizes_match_numpy_im2col_in_any_chunking(
    x_shape, w_shape, stride, padding, mode, monkeypatch
):
    """float64 against the NumPy implementation: each within its float64 error, so within
    ``2 gamma_n S`` of each other, S from the NumPy functions on absolute values (its own
    relative error, below gamma_n, is covered by using n + 1). Blocks of two samples give
    the same y and dx bit for bit as one block (each sample's products are the same BLAS
    calls), and dW, db within that bound."""
    rng = np.random.default_rng(11)
    x, W = rng.standard_normal(x_shape), rng.standard_normal(w_shape)
    b = rng.standard_normal(w_shape[0])
    args = {"stride": stride, "padding": padding, "padding_mode": mode}
    y = conv2d.forward(x, W, b, **args)
    g = rng.standard_normal(y.shape)
    got = (y, *conv2d.vjp(x, g, W, b, **args))
    want = (numpy_forward(x, W, b, **args), *numpy_vjp(x, g, W, b, **args))
    scales = (
        numpy_forward(abs(x), abs(W), abs(b), **args),
        *numpy_vjp(abs(x), abs(g), abs(W), abs(b), **args),
    )
    _, channels, kh, kw = W.shape
    pixels = g.size // g.shape[1]
    dx_terms = W.shape[0] * kh * kw * 9  # at most 3 reads of a pixel per tap and axis
    counts = (channels * kh * kw + 1, dx_terms, pixels, pixels)
    for name, a, c, scale, n in zip(
        ("y", "dx", "dW", "db"), got, want, scales, counts, strict=True
    ):
        allowed = 2 * float(gamma(n + 1)) * scale
        excess = np.abs(a - c) - allowed
        assert np.all(excess <= 0), (
            f"{name} at {np.unravel_index(np.argmax(excess), a.shape)}: differs from NumPy "
            f"by more than 2 gamma_n S"
        )
    monkeypatch.setattr(conv2d, "COLUMN_BLOCK_ENTRIES", 2 * (channels * kh * kw) * y[0, 0].size)
    blocked = (conv2d.forward(x, W, b, **args), *conv2d.vjp(x, g, W, b, **args))
    assert_same_halves("y in blocks of two samples", blocked[0], got[0])
    assert_same_halves("dx in blocks of two samples", blocked[1], got[1])
    for name, a, c, scale in zip(("dW", "db"), blocked[2:], got[2:], scales[2:], strict=True):
        assert np.all(np.abs(a - c) <= 2 * float(gamma(pixels + 1)) * scale), name


# --------------------------------------------------------------------------------------
# Non-finite values, layouts, inputs, bad arguments
# --------------------------------------------------------------------------------------


@pytest.mark.parametrize("dtype", DTYPES, ids=DTYPE_IDS)
@pytest.mark.parametrize("mode", PADDING_MODES)
@pytest.mark.parametrize("bad", [np.nan, np.inf, -np.inf])
@pytest.mark.parametrize("stride", [(1, 2), 1])
@pytest.mark.parametrize("spoiled", ["xWg", "x", "W", "g"])
def test_non_finite_values_propagate_as_ieee_says(dtype, mode, bad, stride, spoiled):
    """A non-finite pixel spoils exactly the outputs whose windows read it (all of them
    with circular padding reaching round); an infinite weight times a padded zero is NaN.
    Stride 1 with zero padding is the geometry whose backward pass is a convolution of g
    (``_transposed_geometry``): a non-finite x, W or g must take the general path there."""
    rng = np.random.default_rng(12)
    x = rng.uniform(-2, 2, (1, 2, 4, 5)).astype(dtype)
    W = rng.uniform(-2, 2, (2, 2, 3, 2)).astype(dtype)
    b = rng.uniform(-2, 2, 2).astype(dtype)
    if "x" in spoiled:
        x[0, 1, 0, 4] = bad
    if "W" in spoiled:
        W[1, 0, 2, 1] = bad
    args = {"stride": stride, "padding": 1, "padding_mode": mode}
    y = conv2d.forward(x, W, b, **args)
    g = rng.uniform(-2, 2, y.shape).astype(dtype)
    if "g" in spoiled:
        g[0, 0, 1, 1] = bad
    ref = (stride, 1, mode)
    scale = reference_linear.conv2d_forward(*map(np.abs, (x, W, b)), *ref)
    assert_within("y", y, reference_linear.conv2d_forward(x, W, b, *ref), scale, 13, dtype)
    exact = reference_linear.conv2d_vjp(x, g, W, b, *ref)
    scales = reference_linear.conv2d_vjp(*map(np.abs, (x, g, W, b)), *ref)
    pixels = g.size // g.shape[1]
    for name, got, want, scale, n in zip(
        ("dx", "dW", "db"),
        conv2d.vjp(x, g, W, b, **args),
        exact,
        scales,
        (54, pixels, pixels),
        strict=True,
    ):
        assert_within(name, got, want, scale, n, dtype)


@pytest.mark.parametrize(("dtype", "strict"), DTYPE_MODES, ids=DTYPE_MODE_IDS)
def test_non_contiguous_inputs_give_the_contiguous_result(dtype, strict):
    rng = np.random.default_rng(13)
    x = rng.uniform(-3, 3, (2, 6, 5, 8)).astype(dtype)[:, ::2, :, ::-2]
    W = np.asfortranarray(rng.uniform(-3, 3, (2, 3, 2, 3)).astype(dtype))
    b = rng.uniform(-3, 3, 4).astype(dtype)[::2]
    args = {"stride": (2, 1), "padding": (1, 2), "padding_mode": "circular", "strict_fp16": strict}
    g = np.swapaxes(rng.uniform(-3, 3, (2, 2, 6, 3)).astype(dtype), 2, 3)  # (2, 2, 3, 6)
    assert not g.flags.c_contiguous and not x.flags.c_contiguous
    copies = [np.ascontiguousarray(a) for a in (x, g, W, b)]
    assert_same_halves(
        "y", conv2d.forward(x, W, b, **args), conv2d.forward(copies[0], *copies[2:], **args)
    )
    for name, a, c in zip(
        ("dx", "dW", "db"), conv2d.vjp(x, g, W, b, **args), conv2d.vjp(*copies, **args), strict=True
    ):
        assert_same_halves(name, a, c)
    assert_same_halves(
        "jacobian",
        conv2d.jacobian(x[0], W, **args),
        conv2d.jacobian(copies[0][0], copies[2], **args),
    )


@pytest.mark.parametrize(("dtype", "strict"), DTYPE_MODES, ids=DTYPE_MODE_IDS)
@pytest.mark.parametrize("mode", PADDING_MODES)
def test_no_function_writes_into_its_inputs(dtype, strict, mode):
    rng = np.random.default_rng(14)
    arguments = {
        "x": rng.uniform(-3, 3, (2, 2, 4, 3)).astype(dtype),
        "g": rng.uniform(-3, 3, (2, 3, 4, 3)).astype(dtype),
        "W": rng.uniform(-3, 3, (3, 2, 3, 3)).astype(dtype),
        "b": rng.uniform(-3, 3, 3).astype(dtype),
    }
    before = {name: value.copy() for name, value in arguments.items()}
    x, g, W, b = arguments.values()
    args = {"padding": 1, "padding_mode": mode, "strict_fp16": strict}
    conv2d.forward(x, W, b, **args)
    conv2d.vjp(x, g, W, b, **args)
    conv2d.jacobian(x[0], W, b, **args)
    if not strict:
        A = conv2d.linear_operator(W, x.shape[1:], padding=1, padding_mode=mode)
        A.matvec(x[0].reshape(-1))
        A.rmatvec(g[0].reshape(-1))
    for name, value in arguments.items():
        assert_same_halves(f"{name} after the calls", value, before[name])


def test_without_bias_db_is_none_and_empty_batches_work():
    x = np.arange(12.0).reshape(1, 1, 3, 4)
    W = np.ones((2, 1, 2, 2))
    y = conv2d.forward(x, W)
    assert_same_values("no bias = zero bias", y, conv2d.forward(x, W, np.zeros(2)))
    dx, dW, db = conv2d.vjp(x, np.ones_like(y), W)
    assert db is None and dx.shape == x.shape and dW.shape == W.shape
    empty = np.zeros((0, 1, 3, 4))
    assert conv2d.forward(empty, W, np.ones(2)).shape == (0, 2, 2, 3)
    dx, dW, db = conv2d.vjp(empty, np.zeros((0, 2, 2, 3)), W, np.ones(2))
    assert dx.shape == empty.shape and not dW.any() and not db.any()


X4, W4, B4 = np.ones((1, 2, 4, 4)), np.ones((3, 2, 3, 3)), np.ones(3)
G4 = np.ones((1, 3, 2, 2))
BAD_ARGUMENTS = [
    ("x 3-d", lambda: conv2d.forward(X4[0], W4), ValueError, "x"),
    ("W channels", lambda: conv2d.forward(X4, np.ones((3, 1, 3, 3))), ValueError, "W"),
    ("W 3-d", lambda: conv2d.forward(X4, np.ones((3, 2, 3))), ValueError, "W"),
    ("W empty kernel", lambda: conv2d.forward(X4, np.ones((3, 2, 0, 3))), ValueError, "W"),
    ("kernel too large", lambda: conv2d.forward(X4, np.ones((3, 2, 5, 3))), ValueError, "W"),
    ("b shape", lambda: conv2d.forward(X4, W4, np.ones(2)), ValueError, "b"),
    ("g shape", lambda: conv2d.vjp(X4, np.ones((1, 3, 3, 3)), W4, B4), ValueError, "g"),
    ("stride 0", lambda: conv2d.forward(X4, W4, stride=0), ValueError, "stride"),
    ("stride float", lambda: conv2d.forward(X4, W4, stride=1.5), TypeError, "stride"),
    ("stride bool", lambda: conv2d.forward(X4, W4, stride=True), TypeError, "stride"),
    ("stride triple", lambda: conv2d.forward(X4, W4, stride=(1, 1, 1)), TypeError, "stride"),
    ("padding -1", lambda: conv2d.forward(X4, W4, padding=-1), ValueError, "padding"),
    (
        "padding mode",
        lambda: conv2d.forward(X4, W4, padding_mode="reflect"),
        ValueError,
        "padding_mode",
    ),
    (
        "circular > H",
        lambda: conv2d.forward(X4, W4, padding=(5, 1), padding_mode="circular"),
        ValueError,
        "padding",
    ),
    ("W dtype", lambda: conv2d.forward(X4, W4.astype(np.float32)), TypeError, "W"),
    ("b dtype", lambda: conv2d.forward(X4, W4, B4.astype(np.float16)), TypeError, "b"),
    ("g dtype", lambda: conv2d.vjp(X4, G4.astype(np.float32), W4), TypeError, "g"),
    ("x int", lambda: conv2d.forward(X4.astype(int), W4), TypeError, "x"),
    ("x complex", lambda: conv2d.forward(X4.astype(complex), W4), TypeError, "x"),
    ("strict float64", lambda: conv2d.forward(X4, W4, strict_fp16=True), ValueError, "strict_fp16"),
    ("jacobian batch", lambda: conv2d.jacobian(X4, W4), ValueError, "x"),
    ("operator shape", lambda: conv2d.linear_operator(W4, (2, 4)), ValueError, "input_shape"),
    ("operator channels", lambda: conv2d.linear_operator(W4, (1, 4, 4)), ValueError, "W"),
    (
        "matvec length",
        lambda: conv2d.linear_operator(W4, (2, 4, 4)).matvec(np.ones(31)),
        ValueError,
        "v",
    ),
    (
        "matvec dtype",
        lambda: conv2d.linear_operator(W4, (2, 4, 4)).matvec(np.ones(32, np.float32)),
        TypeError,
        "v",
    ),
    (
        "rmatvec length",
        lambda: conv2d.linear_operator(W4, (2, 4, 4)).rmatvec(np.ones(32)),
        ValueError,
        "u",
    ),
]


@pytest.mark.parametrize(
    ("name", "function", "error", "word"), BAD_ARGUMENTS, ids=[c[0] for c in BAD_ARGUMENTS]
)
def test_bad_arguments_raise_naming_the_argument(name, function, error, word):
    with pytest.raises(error, match=word):
        function()


def test_float16_overflow_gives_inf_without_a_warning():
    x = np.full((1, 2, 1, 1), 65504.0, HALF)
    W = np.ones((1, 2, 1, 1), HALF)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert np.isposinf(conv2d.forward(x, W)[0, 0, 0, 0])
        assert np.isposinf(conv2d.forward(x, W, strict_fp16=True)[0, 0, 0, 0])
        dW = conv2d.vjp(x, np.full((1, 1, 1, 1), 65504.0, HALF), W)[1]  # 65504^2
        assert np.isposinf(dW).all()


# --------------------------------------------------------------------------------------
# Timing (not a test): python -m tests.kernels.test_conv2d
# --------------------------------------------------------------------------------------


def _best_of(function, repeats: int) -> float:
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        function()
        times.append(time.perf_counter() - start)
    return min(times)


def benchmark(dtype=np.float32, repeats: int = 3, rounds: int = 3) -> None:
    """Forward + vjp, warm, best of ``repeats``, kernel and NumPy alternating ``rounds``
    times (a shared machine's load hits both alike)."""
    rng = np.random.default_rng(0)
    x = rng.standard_normal((8, 64, 56, 56)).astype(dtype)
    W = rng.standard_normal((64, 64, 3, 3)).astype(dtype)
    b = rng.standard_normal(64).astype(dtype)
    g = rng.standard_normal((8, 64, 56, 56)).astype(dtype)
    runs = {
        "kernels.conv2d": lambda: (conv2d.forward(x, W, b, 1, 1), conv2d.vjp(x, g, W, b, 1, 1)),
        "NumPy im2col": lambda: (numpy_forward(x, W, b, 1, 1), numpy_vjp(x, g, W, b, 1, 1)),
    }
    for run in runs.values():
        run()
    for _ in range(rounds):
        print("  ".join(f"{name}: {_best_of(run, repeats):.3f} s" for name, run in runs.items()))


HUGE_OR_ODD = [
    ("padding 2^40", lambda: conv2d.forward(X4, W4, padding=2**40), ValueError, "^padding: "),
    ("padding (0, 2^62)", lambda: conv2d.vjp(X4, G4, W4, padding=(0, 2**62)), ValueError,
     "^padding: "),
    ("padded plane > 2^31", lambda: conv2d.forward(X4, W4, padding=(2**15, 2**15)), ValueError,
     r"^padding: the padded plane \(65540, 65540\)"),
    ("stride 2^70", lambda: conv2d.forward(X4, W4, stride=2**70), ValueError, "^stride: "),
    ("padding_mode list", lambda: conv2d.forward(X4, W4, padding_mode=["zeros"]), ValueError,
     "^padding_mode: expected one of 'zeros', 'circular'"),
    ("strict str", lambda: conv2d.forward(X4.astype(np.float16), W4.astype(np.float16),
     strict_fp16="no"), TypeError, "^strict_fp16: expected True or False"),
    ("operator padding", lambda: conv2d.linear_operator(W4, (2, 4, 4), padding=2**40),
     ValueError, "^padding: "),
]  # fmt: skip


@pytest.mark.parametrize(
    ("name", "function", "error", "match"), HUGE_OR_ODD, ids=[c[0] for c in HUGE_OR_ODD]
)
def test_huge_geometry_and_odd_keywords_raise_naming_the_argument(name, function, error, match):
    """``padding=2**40`` used to raise MemoryError (a 16 TiB index table) and ``stride=2**70``
    an OverflowError; the padded plane is now bounded by 2^31 entries (MAX_EXTENT, 16 GiB of
    float64 scratch for one plane) and the stride and padding by the same number."""
    with pytest.raises(error, match=match):
        function()


def test_strides_up_to_the_bound_are_accepted():
    """A stride as large as the bound, 2^31, is a valid (if odd) stride: one window per
    axis, as PyTorch gives for a stride beyond the padded size."""
    x, W = np.ones((1, 1, 4, 4)), np.ones((1, 1, 1, 1))
    operator = conv2d.linear_operator(W, (1, 4, 4), stride=2**31, padding=(0, 10))
    assert operator.shape == (1, 16)
    y = conv2d.forward(x, W, stride=(1, 2**31), padding=(0, 10))
    assert_same_values("y", y, np.zeros((1, 1, 4, 1)))


if __name__ == "__main__":
    for dtype in (np.float32, np.float64):
        print(f"forward + vjp, x (8, 64, 56, 56), W (64, 64, 3, 3), padding 1, {np.dtype(dtype)}")
        benchmark(dtype)
