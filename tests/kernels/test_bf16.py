"""bfloat16: the conversions of ``kernels/_bf16.py`` bit for bit, and the kernels in mixed
mode (every elementwise forward and derivative over all 65,536 inputs), in strict mode,
and the vector modules widened to float64."""

from __future__ import annotations

import math

import ml_dtypes
import numpy as np
import pytest
import sympy as sp
from hypothesis import given
from hypothesis import strategies as st
from numba import njit

from derive.definitions.activations import ELEMENTWISE, elementwise
from derive.reference.core import bfloat16_table, reference_array
from derive.reference.formats import round_float64
from kernels import _elementwise, gelu, layernorm, relu, sigmoid, softmax
from kernels._bf16 import (
    BFLOAT16_MAX,
    BFLOAT16_OVERFLOW_THRESHOLD,
    bfloat16_bits_to_float64,
    decided_bfloat16,
    float64_to_bfloat16_bits,
)
from tests.helpers.generated import generated
from tests.helpers.tolerances import BFLOAT16_ULPS

BF16 = np.dtype(ml_dtypes.bfloat16)
ALL_BITS = np.arange(1 << 16, dtype=np.uint32).astype(np.uint16)
ALL = ALL_BITS.view(BF16)
KEYS = [m.key for m in ELEMENTWISE]


@njit(cache=True)
def _widen_all(bits, out):
    for i in range(bits.size):
        out[i] = bfloat16_bits_to_float64(bits[i])


@njit(cache=True)
def _narrow_all(values, out):
    for i in range(values.size):
        out[i] = float64_to_bfloat16_bits(values[i])


def _narrow(values: np.ndarray) -> np.ndarray:
    out = np.empty(values.size, dtype=np.uint16)
    _narrow_all(np.ascontiguousarray(values, dtype=np.float64), out)
    return out


def _finite_nonnegative() -> np.ndarray:
    return ALL[(ALL_BITS < 0x7F80)].astype(np.float64)


def test_widening_is_exact_for_every_pattern():
    wide = np.empty(ALL.size)
    _widen_all(ALL_BITS, wide)
    with np.errstate(invalid="ignore"):  # the float32 -> float64 cast of a signaling NaN
        expected = ALL.astype(np.float32).astype(np.float64)
    nan = np.isnan(expected)
    assert np.array_equal(np.isnan(wide), nan)
    assert np.array_equal(wide[~nan].view(np.uint64), expected[~nan].view(np.uint64))


def test_narrowing_from_float32_matches_ml_dtypes_at_every_boundary():
    """Every midpoint between neighbouring bfloat16 values (and the overflow threshold),
    each float32 next to it, and the values themselves, both signs: ml_dtypes rounds
    float32 once, so the two must agree bit for bit."""
    values = _finite_nonnegative()
    upper = np.append(values[1:], 2.0**128)
    midpoints = (values + upper) / 2  # exact in float64
    m32 = midpoints.astype(np.float32)
    assert np.array_equal(m32.astype(np.float64), midpoints)  # midpoints are float32 numbers
    near = [m32, np.nextafter(m32, np.float32(0)), np.nextafter(m32, np.float32(np.inf))]
    points = np.concatenate([*near, values.astype(np.float32)])
    points = np.concatenate([points, -points])
    with np.errstate(over="ignore"):
        expected = points.astype(BF16).view(np.uint16)
    got = _narrow(points.astype(np.float64))
    bad = np.flatnonzero(got != expected)
    assert bad.size == 0, (
        f"{points[bad[0]]!r}: got {got[bad[0]]:#06x}, ml_dtypes {expected[bad[0]]:#06x}"
    )


def test_narrowing_from_float64_rounds_once():
    """Just above and below each midpoint by 2^-40 of it (between float32 numbers: a cast
    through float32 would land on the midpoint and round to even), ties, and the special
    values, against the reference's independent round-once (round to odd through float32)."""
    values = _finite_nonnegative()
    midpoints = (values + np.append(values[1:], 2.0**128)) / 2
    offsets = midpoints * 2.0**-40
    points = np.concatenate([midpoints - offsets, midpoints, midpoints + offsets, values])
    points = np.concatenate([points, -points, [np.inf, -np.inf, 0.0, -0.0, 1e300, -1e-300]])
    expected = round_float64(points, BF16).view(np.uint16)
    got = _narrow(points)
    bad = np.flatnonzero(got != expected)
    assert bad.size == 0, (
        f"{points[bad[0]]!r}: got {got[bad[0]]:#06x}, expected {expected[bad[0]]:#06x}"
    )
    # the example of the module docstring, where ml_dtypes' float64 cast rounds twice
    assert _narrow(np.array([1 + 2**-8 + 2**-40]))[0] == 0x3F81
    assert float(np.array([1 + 2**-8 + 2**-40]).astype(BF16)[0]) == 1.0


def test_narrowing_nan_and_overflow():
    got = _narrow(np.array([np.nan, -np.nan, BFLOAT16_OVERFLOW_THRESHOLD, -BFLOAT16_MAX]))
    assert got[0] & 0x7FFF == 0x7FC0 and got[1] & 0x7FFF == 0x7FC0
    assert got[2] == 0x7F80
    assert got[3] == 0xFF7F
    below = np.nextafter(BFLOAT16_OVERFLOW_THRESHOLD, 0.0)
    assert _narrow(np.array([below]))[0] == 0x7F7F


@given(st.floats(allow_nan=False, allow_infinity=False), st.floats(0.0, 1e-3))
def test_decided_means_every_point_of_the_interval_rounds_alike(v, relative):
    e = abs(v) * relative
    bits, ok = decided_bfloat16(v, e)
    assert bits == _narrow(np.array([v]))[0]
    if ok:
        ends = _narrow(np.array([v - e, v + e]))
        assert ends[0] == ends[1] == bits, (v, e)


def _off(table, got: np.ndarray) -> np.ndarray:
    """Inputs whose result is not the correctly rounded one: not a NaN against a NaN, not
    a zero of the other sign."""
    same = got.view(np.uint16) == table.rounded.view(np.uint16)
    both_nan = np.isnan(got.astype(np.float32)) & np.isnan(table.rounded.astype(np.float32))
    zeros = (got.astype(np.float32) == 0) & (table.rounded.astype(np.float32) == 0)
    return np.flatnonzero(~(same | both_nan | zeros))


@pytest.mark.parametrize("quantity", ("forward", "derivative"))
@pytest.mark.parametrize("key", KEYS)
def test_bfloat16_exhaustive(key, quantity):
    """All 65,536 inputs, mixed mode: correctly rounded (zeros compared as numbers), inf
    exactly where the correctly rounded value overflows. The subnormal x where the float64
    evaluation of f(x) = x/2 + O(x^2) gives the midpoint x/2 exactly are among them."""
    table = bfloat16_table(getattr(elementwise(key), quantity))
    got = _elementwise.unary(generated(key), quantity, ALL, False)
    errors = table.ulp_errors(ALL, got)
    bad = np.flatnonzero(~(errors <= BFLOAT16_ULPS))
    assert bad.size == 0, (
        f"{key}.{quantity} bfloat16: {bad.size} inputs off; first x = {ALL[bad[0]]!r}: got "
        f"{got[bad[0]]!r}, expected {table.rounded[bad[0]]!r} ({errors[bad[0]]:.3g} ULP)"
    )
    assert np.array_equal(np.isinf(got), np.isinf(table.rounded)), f"{key}.{quantity} overflow"
    off = _off(table, got)
    assert off.size == 0, (
        f"{key}.{quantity} bfloat16: {off.size} inputs not correctly rounded; x = "
        f"{ALL[off[0]]!r} got {got[off[0]]!r}, correctly rounded {table.rounded[off[0]]!r}"
    )


@pytest.mark.parametrize("key", KEYS)
@given(
    pairs=st.lists(
        st.tuples(st.integers(0, 0xFFFF), st.integers(0, 0xFFFF)), min_size=1, max_size=64
    )
)
def test_bfloat16_vjp_is_the_rounded_product(key, pairs):
    """g * f'(x) rounded once: within 1 ULP of the exact product (f' from the exhaustive
    table's float64 value, whose error is far below a bfloat16 ULP)."""
    xs = np.array([p[0] for p in pairs], dtype=np.uint16).view(BF16)
    gs = np.array([p[1] for p in pairs], dtype=np.uint16).view(BF16)
    got = _elementwise.vjp(generated(key), xs, gs, False).astype(np.float64)
    slope = bfloat16_table(elementwise(key).derivative).exact[xs.view(np.uint16)]
    with np.errstate(invalid="ignore", over="ignore"):
        exact = gs.astype(np.float32).astype(np.float64) * slope
        expected = round_float64(exact, BF16).astype(np.float64)
    for i in range(len(pairs)):
        if math.isnan(exact[i]) or math.isinf(exact[i]):
            continue  # NaN or inf in, or an inf * 0: IEEE's answer, not a rounding question
        spacing = float(np.spacing(expected[i].astype(BF16)).astype(np.float64))
        assert abs(got[i] - exact[i]) <= BFLOAT16_ULPS * spacing or got[i] == expected[i], (
            f"{key}.vjp bfloat16: x = {xs[i]!r}, g = {gs[i]!r}: got {got[i]!r}, exact {exact[i]!r}"
        )


def test_strict_bfloat16_rounds_every_step():
    """Strict sigmoid at x >= 0 is bf(1 / bf(1 + bf(exp(-x)))): each step rounded once."""
    xs = np.array([0.5, 1.0, 3.0, 7.5, 20.0], dtype=BF16)
    got = sigmoid.forward(xs, strict_fp16=True).astype(np.float64)
    wide = xs.astype(np.float64)

    def bf(v):
        return round_float64(v, BF16).astype(np.float64)

    expected = bf(1.0 / bf(1.0 + bf(np.exp(-wide))))
    assert np.array_equal(got, expected)
    mixed = sigmoid.forward(xs).astype(np.float64)
    assert not np.array_equal(got, mixed)  # the rounded steps differ somewhere


def test_vector_modules_take_bfloat16_in_mixed_mode():
    """LayerNorm and softmax of bfloat16 rows: the float64 kernel's result rounded once,
    within 1 ULP of the correctly rounded reference; parameters must be bfloat16 too; strict
    mode is another computation (its own tests are in test_strict_bfloat16.py)."""
    rng = np.random.default_rng(7)
    x = rng.standard_normal((4, 8)).astype(BF16)
    gamma, beta = np.ones(8, dtype=BF16), np.zeros(8, dtype=BF16)
    y = layernorm.forward(x, gamma, beta)
    assert y.dtype == BF16
    wide = layernorm.forward(
        x.astype(np.float64), gamma.astype(np.float64), beta.astype(np.float64)
    )
    assert np.array_equal(y.view(np.uint16), round_float64(wide, BF16).view(np.uint16))
    dx, dgamma, dbeta = layernorm.vjp(x, x, gamma, beta)
    assert dx.dtype == dgamma.dtype == dbeta.dtype == BF16
    s = softmax.forward(x)
    assert s.dtype == BF16
    assert np.all(np.abs(s.astype(np.float32).sum(axis=1) - 1) < 8 * 2.0**-8)
    with pytest.raises(TypeError, match="gamma"):
        layernorm.forward(x, gamma.astype(np.float32), beta)
    strict = layernorm.forward(
        x, gamma, beta, strict_fp16=True
    )  # tests/kernels/test_strict_bfloat16.py
    assert strict.dtype == BF16 and not np.array_equal(strict.view(np.uint16), y.view(np.uint16))


def test_relu_and_gelu_at_the_ends_of_the_format():
    """The largest finite bfloat16 and the smallest subnormal, both signs: ReLU exactly;
    GeLU at +-max correctly rounded (no overflow: |GeLU(x)| <= |x|)."""
    ends = np.array([BFLOAT16_MAX, -BFLOAT16_MAX, 2.0**-133, -(2.0**-133)], dtype=BF16)
    wide = ends.astype(np.float64)
    assert np.array_equal(relu.forward(ends).astype(np.float64), np.maximum(wide, 0))
    expected = reference_array(elementwise("gelu_none").forward, ends[:2], BF16)
    got = gelu.forward(ends[:2]).astype(np.float64)
    assert np.array_equal(got, expected.astype(np.float64)), (got, expected)


def test_gelu_at_the_smallest_subnormal_is_correctly_rounded():
    """GeLU(2^-133) = 2^-134 (1 + 2^-133 sqrt(2/pi) + ...) lies just above the midpoint
    2^-134, which the float64 evaluation gives exactly; the tie is broken by the sign of the
    Taylor term x^2/sqrt(2 pi) (``forward_deviation``), not to even."""
    x = np.array([2.0**-133, -(2.0**-133), 3 * 2.0**-133], dtype=BF16)
    assert gelu.forward(x).astype(np.float64).tolist() == [2.0**-133, -0.0, 2 * 2.0**-133]


@pytest.mark.parametrize("key", [k for k in KEYS if k != "relu"])
def test_float32_and_bfloat16_subnormal_ties(key):
    """At subnormal x the float64 value of f(x) = c1 x + c2 x^2 + ... is c1 x exactly, a
    midpoint between two subnormals for odd x when c1 = 1/2; the VJP's g f'(x) at tiny x
    is g c0 exactly, a midpoint for odd subnormal g, or a float64 step from it. Both must
    round to the side of the exact value, not to even nor to the side of the float64 error:
    every such forward input and a grid of such VJP pairs."""
    module = elementwise(key)
    odd = np.arange(1, 64, 2, dtype=np.float64)
    for dtype, quantum in ((np.dtype(np.float32), 2.0**-149), (BF16, 2.0**-133)):
        xs = np.concatenate([odd, -odd]) * quantum
        xs = xs.astype(np.float32).astype(dtype)
        got = _elementwise.unary(generated(key), "forward", xs, False)
        want = reference_array(module.forward, xs, dtype)
        assert np.array_equal(got.astype(np.float64), want.astype(np.float64)), (dtype, key)
        # Sigmoid's float64 derivative is 0.25 - 2^-55 at 5.59e-17 and 0.25 + 2^-54 at
        # 1.81e-14, a float64 step off 1/4 either way, so g f'(x) at g = 6 quanta lands off
        # the midpoint 1.5 quanta, below or above it, where the exact value is below it
        x = [2.0**-100, -(2.0**-100), 2.0**-30, 5.594483210025203e-17, 1.8096635301390052e-14]
        x = x * 2
        x = np.array(x).astype(dtype)
        g = [3, -5, 2, -6, 6, 14, -22, 10, -2, 30]
        g = (np.array(g, dtype=np.float64) * quantum).astype(dtype)
        got = _elementwise.vjp(generated(key), x, g, False).astype(np.float64)
        for i in range(x.size):
            scaled = sp.piecewise_fold(sp.Rational(float(g[i])) * module.derivative)
            want = float(reference_array(scaled, x[i : i + 1], dtype)[0])
            assert got[i] == want, (dtype, key, float(x[i]), float(g[i]), got[i], want)
