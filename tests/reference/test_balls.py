"""The ball references (:mod:`derive.reference.balls`) against the all-mpmath references.

The ball path must give, bit for bit, what the mpmath path gives: the correctly rounded value
in the target format, the float64 rounding and the float16 spacing of the exhaustive tables.
The one difference allowed is the sign of a zero: where ``|f(x)|`` is below 2^-1075 the
mpmath path may accept an unsigned 0 (+0.0), while the balls prove the sign and give -0.0
for a negative value, as IEEE 754 rounding does. The exhaustive comparison over all 65,536
halves of every expression is marked ``slow`` (about a minute of mpmath per core); the
default run compares every 97th half and the tails.
"""

from __future__ import annotations

import mpmath
import numpy as np
import pytest

from derive.definitions.activations import ELEMENTWISE, elementwise, x
from derive.reference import balls, core
from derive.reference.core import (
    correctly_rounded,
    float16_table,
    mpmath_rounded,
    reference_array,
)

ALL_HALVES = np.arange(1 << 16, dtype=np.uint16).view(np.float16)
EXPRESSIONS = [
    pytest.param(getattr(module, quantity), id=f"{module.key}-{quantity}")
    for module in ELEMENTWISE
    for quantity in ("forward", "derivative")
]


def assert_same_bits(expr, inputs, rounded, exact, spacing):
    want_rounded, want_exact, want_spacing = mpmath_rounded(expr, inputs, np.float16)
    signed_zero = (want_rounded == 0) & (rounded == 0)
    negative = np.array(
        [correctly_rounded(expr, float(v), np.float64) for v in inputs[signed_zero]]
    )
    # where both are zeros, the balls' sign must be the sign the balls prove
    assert np.all(np.signbit(rounded[signed_zero]) == np.signbit(negative)), expr
    differ = rounded.view(np.uint16) != want_rounded.view(np.uint16)
    bad = np.flatnonzero(differ & ~signed_zero)
    assert bad.size == 0, (
        f"{expr} at {inputs[bad[0]]!r}: balls {rounded[bad[0]]!r}, mpmath {want_rounded[bad[0]]!r}"
    )
    moved = np.flatnonzero(differ)
    assert np.all(want_rounded[moved] == 0) and np.all(~np.signbit(want_rounded[moved]))
    same_exact = (exact.view(np.uint64) == want_exact.view(np.uint64)) | (
        (exact == 0) & (want_exact == 0)
    )
    same_exact |= np.isnan(exact) & np.isnan(want_exact)
    assert same_exact.all(), f"{expr} at {inputs[np.flatnonzero(~same_exact)[0]]!r}: exact"
    assert np.array_equal(spacing, want_spacing, equal_nan=True), f"{expr}: spacing"
    return moved.size


@pytest.mark.parametrize("expr", EXPRESSIONS)
def test_table_samples_equal_the_mpmath_references(expr):
    """Every 97th half (all binades, both signs) and the last 24 of each tail."""
    table = float16_table(expr)
    bits = np.unique(
        np.concatenate(
            [
                np.arange(0, 1 << 16, 29),
                np.arange(0x7C00 - 300, 0x7C00),
                np.arange(0xFC00 - 300, 0xFC00),
            ]
        )
    )
    inputs = ALL_HALVES[bits]
    assert_same_bits(expr, inputs, table.rounded[bits], table.exact[bits], table.spacing[bits])


@pytest.mark.slow
@pytest.mark.parametrize("expr", EXPRESSIONS)
def test_tables_equal_the_mpmath_references_at_every_half(expr):
    table = float16_table(expr)
    moved = assert_same_bits(expr, ALL_HALVES, table.rounded, table.exact, table.spacing)
    print(f"{expr}: {moved} zeros whose sign the balls proved negative")


@pytest.mark.parametrize("key", ["gelu_none", pytest.param("gelu_tanh", marks=pytest.mark.slow)])
def test_values_without_spacing_are_the_tables_at_every_finite_half(key, monkeypatch):
    """The report's cheaper float16_values: the table's rounded and float64 values, bit for
    bit (signed zeros too), at all 63,488 finite halves, where the GeLU derivatives' values
    within 2^-150 of 1 are decided by the balls instead of mpmath."""
    module = elementwise(key)
    finite = np.isfinite(ALL_HALVES)
    for expr in (module.forward, module.derivative):
        with monkeypatch.context() as patch:
            patch.setattr(core, "_FLOAT16_TABLES", {})  # not read from a table built here
            rounded, exact = core.float16_values(expr)
        table = float16_table(expr)
        assert np.array_equal(
            rounded[finite].view(np.uint16), table.rounded[finite].view(np.uint16)
        )
        assert np.array_equal(exact[finite].view(np.uint64), table.exact[finite].view(np.uint64))
        assert np.isnan(rounded[~finite]).all() and np.isnan(exact[~finite]).all()
    # thousands of derivative values round to exactly 1.0 in float64: their binade, which
    # the spacing needs, sent them to mpmath
    assert np.count_nonzero(table.exact[finite] == 1.0) > 1000


def hard_float32_inputs(expr, count: int = 40) -> np.ndarray:
    """float32 inputs whose value (estimated in float64 by mpmath at 30 digits on a coarse
    scan) lies closest to a float32 rounding boundary, plus exact midpoints of float32."""
    rng = np.random.default_rng(7)
    xs = np.unique(rng.uniform(-12, 12, 3000).astype(np.float32))
    function = mpmath_function(expr)
    with mpmath.workdps(30):
        values = np.array([float(function(mpmath.mpf(float(v)))) for v in xs])
    rounded = values.astype(np.float32).astype(np.float64)
    spacing = np.abs(np.spacing(values.astype(np.float32)).astype(np.float64))
    distance = np.abs(np.abs(values - rounded) - spacing / 2) / spacing
    return xs[np.argsort(distance)[:count]]


def mpmath_function(expr):
    import sympy as sp

    return sp.lambdify(x, expr, modules="mpmath")


@pytest.mark.parametrize("key", ["sigmoid", "gelu_none", "gelu_tanh", "swish"])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_float32_inputs_near_rounding_boundaries(key, dtype):
    expr = elementwise(key).forward
    inputs = hard_float32_inputs(expr)
    got = reference_array(expr, inputs, dtype)
    want, _, _ = mpmath_rounded(expr, inputs, dtype)
    assert np.array_equal(got.view(np.uint8), want.view(np.uint8)), key


def test_exact_midpoints_tie_to_even():
    """ReLU's value at a float32 input that is a float16 midpoint is the midpoint itself: the
    ball is exact and the rounding ties to even, as the mpmath path does."""
    relu = elementwise("relu").forward
    inputs = np.array([1 + 2.0**-11, 1 + 3 * 2.0**-11, 2049.0, 2051.0], dtype=np.float32)
    got = reference_array(relu, inputs, np.float16)
    assert got.tolist() == [1.0, 1 + 2.0**-9, 2048.0, 2052.0]


def test_vanishing_values_keep_their_sign():
    """GeLU at -50 is about -1.8e-545: below every format, negative, so -0.0 in each."""
    gelu = elementwise("gelu_none").forward
    for dtype in (np.float16, np.float32, np.float64):
        zero = correctly_rounded(gelu, -50.0, dtype)
        assert zero == 0 and np.signbit(zero), dtype
    assert not np.signbit(correctly_rounded(elementwise("sigmoid").forward, -800.0, np.float64))


def test_huge_arguments_of_erfc_keep_the_sign():
    """GeLU and its derivative at x = -2^20 and below (bfloat16 reaches -3.4e38): arb's erfc
    of the inexact -sqrt(2) x / 2 is a ball around 0 there, so the balls take the hull of
    erfc at the ball's ends (proofs.arb._erfc), prove the sign and give -0.0, instead of
    leaving the value to mpmath's unsigned +0.0."""
    module = elementwise("gelu_none")
    points = np.array([-(2.0**20), -(2.0**64), -3.3895313892515355e38])
    for expr in (module.forward, module.derivative):
        rounded, exact, _, decided = balls.rounded_parts(expr, points, np.float32)
        assert decided.all(), expr
        assert np.all(rounded == 0) and np.all(np.signbit(rounded)), expr
        assert np.all(exact == 0) and np.all(np.signbit(exact)), expr


def test_stable_rewrites_are_identities():
    """The rewritten forms agree with the definitions to 100 digits where neither cancels."""
    for module in ELEMENTWISE:
        for quantity in ("forward", "derivative"):
            expr = getattr(module, quantity)
            original, rewritten = mpmath_function(expr), mpmath_function(balls.stable(expr))
            with mpmath.workdps(120):
                for value in ("-2.75", "-0.5", "0.125", "1", "3.5"):
                    point = mpmath.mpf(value)
                    a, b = original(point), rewritten(point)
                    assert abs(a - b) <= mpmath.mpf(10) ** -100 * abs(a), (
                        module.key,
                        quantity,
                        value,
                    )


def test_a_ball_that_straddles_a_boundary_is_left_undecided():
    """A value within 2^-150 of a float64 midpoint is never decided by the balls."""
    found = balls.Enclosures(
        hi=np.array([1.0, 1.0]),
        err=np.array([2.0**-54, 2.0**-60]),
        side=np.array([0, 0], dtype=np.int8),
        tight=np.array([False, False]),
    )
    decided, _ = balls.decide(found, np.float32)
    assert decided.tolist() == [False, False]  # 1 - 2^-54 is a float64 midpoint; binade unknown
    found = balls.Enclosures(
        hi=np.array([1.0]),
        err=np.array([2.0**-60]),
        side=np.array([-1], dtype=np.int8),
        tight=np.array([False]),
    )
    decided, spacing = balls.decide(found, np.float16)
    assert decided.tolist() == [True] and spacing.tolist() == [2.0**-11]
