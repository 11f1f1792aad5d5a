"""The activation kernels against the mpmath references, in float64, float32 and float16.

References come from ``derive.reference.core`` (mpmath at >= 50 digits, from the SymPy forward),
tolerances from ``tests/helpers/tolerances.py``. float16 is tested exhaustively over all 65,536
inputs; float64/float32 by hypothesis with the hard cases pinned by ``@example``.
"""

from __future__ import annotations

import mpmath
import numpy as np
import pytest
from hypothesis import example, given
from hypothesis import strategies as st

from derive.codegen.activations import SATURATION, STABLE_FORMS
from derive.definitions.activations import ELEMENTWISE, elementwise
from derive.reference.core import (
    condition_number,
    evaluate,
    float16_table,
    reference_values,
    round_to_dtype,
    ulp_error,
)
from derive.report.float16 import float16_facts, smallest_half_at_least
from kernels import _elementwise, relu
from tests.helpers.generated import generated
from tests.helpers.tolerances import FLOAT16_ULPS, TOLERANCE, vjp_allowance

KEYS = [m.key for m in ELEMENTWISE]
QUANTITIES = ("forward", "derivative")
ALL_BITS = np.arange(1 << 16, dtype=np.uint32).astype(np.uint16)
ALL_HALVES = ALL_BITS.view(np.float16)

#: Inputs every dtype must get right: zeros, the half range's edges, subnormals, the
#: overflow points of exp, the roots of the GeLU and Swish derivatives, non-finite values.
PINNED = (
    0.0,
    -0.0,
    1.0,
    -1.0,
    65504.0,
    65520.0,
    -65504.0,
    5.960464477539063e-08,
    -5.960464477539063e-08,
    6.103515625e-05,
    256.0,
    -256.0,
    11.09,
    -17.33,
    -1.2784645427610737,
    -0.7517916243895319,
    -37.5,
    -87.3,
    -103.0,
    708.5,
    -708.5,
    -745.0,
    1e30,
    -1e30,
    float("inf"),
    float("-inf"),
    float("nan"),
)


def expression(key: str, quantity: str):
    module = elementwise(key)
    return module.forward if quantity == "forward" else module.derivative


def condition_numbers(key: str, quantity: str, xs: np.ndarray, values: list) -> list[float]:
    """|x g'(x) / g(x)| for g the computed quantity (f or f') at each input, with the
    conventions of ``derive.reference.core.condition_number`` (0 where x g' = 0, inf where g =
    0)."""
    module = elementwise(key)
    slope = module.derivative if quantity == "forward" else module.second_derivative
    slopes = reference_values(slope, xs, 10)
    kappas = []
    for xi, s, g in zip(xs.tolist(), slopes, values, strict=True):
        if xi == 0 or s == 0:
            kappas.append(0.0)
        elif g == 0:
            kappas.append(float("inf"))
        else:
            with mpmath.workdps(20):
                kappas.append(float(abs(xi * s / g)))
    return kappas


def assert_close(key, quantity, xs: np.ndarray, got: np.ndarray) -> None:
    """Every result within the dtype's allowance of the exact value; name the first miss."""
    dtype = xs.dtype
    expr = expression(key, quantity)
    tolerance = TOLERANCE[dtype]
    for i, (xi, yi) in enumerate(zip(xs.tolist(), got.tolist(), strict=True)):
        exact = evaluate(expr, xi)
        error = ulp_error(dtype.type(yi), exact, dtype)
        kappa = condition_number(expr, xi) if np.isfinite(xi) else mpmath.mpf(0)
        allowed = tolerance.allowance(float(kappa))
        assert error <= allowed, (
            f"{key}.{quantity} {dtype}: index {i}, x = {xi!r}: got {yi!r}, expected "
            f"{mpmath.nstr(exact, 20)} ({error:.3g} ULP > {allowed:.3g} allowed, "
            f"kappa = {mpmath.nstr(kappa, 5)})"
        )


def float_arrays(width: int):
    values = st.floats(width=width, allow_nan=True, allow_infinity=True, allow_subnormal=True)
    return st.lists(values, min_size=1, max_size=8)


@pytest.mark.parametrize("quantity", QUANTITIES)
@pytest.mark.parametrize("key", KEYS)
@given(values=float_arrays(64))
@example(values=list(PINNED))
@example(values=[-1.2784645427610737, -0.7517916243895319, 2.399357280515467])
def test_float64_against_reference(key, quantity, values):
    xs = np.array(values, dtype=np.float64)
    assert_close(key, quantity, xs, _elementwise.unary(generated(key), quantity, xs, False))


@pytest.mark.parametrize("quantity", QUANTITIES)
@pytest.mark.parametrize("key", KEYS)
@given(values=float_arrays(32))
@example(values=list(PINNED))
@example(values=[-1.2784645, -0.7517916, 2.3993573, -12.3, -90.2])
def test_float32_against_reference(key, quantity, values):
    xs = np.array(values, dtype=np.float32)
    assert_close(key, quantity, xs, _elementwise.unary(generated(key), quantity, xs, False))


#: A deterministic grid where the derivatives' formulas add terms of opposite sign (roots and
#: minima of f' lie in [-2.5, 2.5]): random sampling found the worst errors only rarely.
DENSE_GRID = np.linspace(-4.0, 4.0, 1601)


@pytest.mark.parametrize("quantity", QUANTITIES)
@pytest.mark.parametrize("key", KEYS)
@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_dense_grid_against_reference(key, quantity, dtype):
    xs = (DENSE_GRID + 1.0 / 3.0).astype(dtype)
    got = _elementwise.unary(generated(key), quantity, xs, False)
    expr = expression(key, quantity)
    exact = reference_values(expr, xs.astype(np.float64))
    kappa = condition_numbers(key, quantity, xs.astype(np.float64), exact)
    tolerance = TOLERANCE[np.dtype(dtype)]
    for i, (xi, yi) in enumerate(zip(xs.tolist(), got.tolist(), strict=True)):
        error = ulp_error(dtype(yi), exact[i], dtype)
        allowed = tolerance.allowance(kappa[i])
        assert error <= allowed, (
            f"{key}.{quantity} {np.dtype(dtype)}: index {i}, x = {xi!r}: got {yi!r}, expected "
            f"{mpmath.nstr(exact[i], 20)} ({error:.3g} ULP > {allowed:.3g} allowed)"
        )


@pytest.mark.parametrize("key", KEYS)
@example(pairs=[(-716.0, 9.0), (-730.0, 2.0**60), (-745.0, 1.0)])
@given(
    pairs=st.lists(
        st.tuples(
            st.floats(-(2.0**20), 2.0**20, width=32), st.floats(-(2.0**100), 2.0**100, width=32)
        ),
        min_size=1,
        max_size=6,
    )
)
def test_vjp_is_g_times_derivative(key, pairs):
    for dtype in (np.float64, np.float32):
        xs = np.array([p[0] for p in pairs], dtype=dtype)
        gs = np.array([p[1] for p in pairs], dtype=dtype)
        got = _elementwise.vjp(generated(key), xs, gs, False)
        derivative = elementwise(key).derivative
        for i, (xi, gi, yi) in enumerate(zip(xs.tolist(), gs.tolist(), got.tolist(), strict=True)):
            slope = evaluate(derivative, xi)
            with mpmath.workdps(60):
                exact = mpmath.mpf(gi) * slope
            kappa = float(condition_number(derivative, xi))
            error = ulp_error(dtype(yi), exact, dtype)
            allowed = vjp_allowance(dtype, kappa, slope, gi, exact)
            assert error <= allowed, (
                f"{key}.vjp {np.dtype(dtype)}: index {i}, x = {xi!r}, g = {gi!r}: got {yi!r}, "
                f"expected {mpmath.nstr(exact, 20)} ({error:.3g} ULP > {allowed:.3g})"
            )


@pytest.mark.parametrize("quantity", QUANTITIES)
@pytest.mark.parametrize("key", KEYS)
def test_float16_exhaustive(key, quantity):
    """All 65,536 inputs, mixed mode: within 1 ULP of the correctly rounded value, and inf
    exactly where the correctly rounded value overflows (never earlier)."""
    table = float16_table(expression(key, quantity))
    got = _elementwise.unary(generated(key), quantity, ALL_HALVES, False)
    errors = table.ulp_errors(ALL_HALVES, got)
    bad = np.flatnonzero(~(errors <= FLOAT16_ULPS))
    assert bad.size == 0, (
        f"{key}.{quantity} float16: {bad.size} inputs off; first at index {bad[0]}: "
        f"x = {ALL_HALVES[bad[0]]!r}, got {got[bad[0]]!r}, expected "
        f"{table.rounded[bad[0]]!r} (exact {table.exact[bad[0]]!r}, {errors[bad[0]]:.3g} ULP)"
    )
    assert np.array_equal(np.isinf(got), np.isinf(table.rounded)), f"{key}.{quantity} overflow"


@pytest.mark.parametrize("key", KEYS)
def test_float16_vjp_overflow_boundary(key):
    """For every half x whose gain |f'(x)| can overflow a half upstream gradient, the VJP
    at the smallest overflowing g is +-inf and at the half just below it is finite and
    correctly rounded: the backward pass overflows exactly when the exact result does."""
    derivative = elementwise(key).derivative
    table = float16_table(derivative)
    finite = np.isfinite(ALL_HALVES)
    candidates = np.flatnonzero(finite & (np.abs(table.exact) > 65520 / 65504 * (1 - 1e-6)))
    xs, gs_out, gs_in, slopes = [], [], [], []
    for index in candidates:
        x = float(ALL_HALVES[index])
        slope = evaluate(derivative, x)
        with mpmath.workdps(60):
            g = smallest_half_at_least(mpmath.mpf(65520) / abs(slope))
        if g is None:
            continue
        xs.append(x)
        gs_out.append(g)
        gs_in.append(float(np.nextafter(np.float16(g), np.float16(0))))
        slopes.append(slope)
    reported = float16_facts(key).vjp_overflow_g
    if key in ("sigmoid", "relu"):
        assert not xs, f"{key}: sup |f'| <= 1, yet {len(xs)} inputs could overflow"
        assert reported is None, f"{key}: the report gives an overflow threshold {reported}"
        return
    assert xs, f"{key}: sup |f'| > 1 should let some upstream gradient overflow"
    assert reported == min(gs_out), f"{key}: report says {reported}, boundary {min(gs_out)}"
    x16 = np.array(xs, dtype=np.float16)
    outside = _elementwise.vjp(generated(key), x16, np.array(gs_out, dtype=np.float16), False)
    inside = _elementwise.vjp(generated(key), x16, np.array(gs_in, dtype=np.float16), False)
    for i, x in enumerate(xs):
        sign = np.sign(float(slopes[i]))
        assert outside[i] == sign * np.inf, (
            f"{key}.vjp float16: index {i}, x = {x}, g = {gs_out[i]}: got {outside[i]}, "
            "expected overflow to inf"
        )
        with mpmath.workdps(60):
            exact = mpmath.mpf(gs_in[i]) * slopes[i]
        error = ulp_error(inside[i], exact, np.float16)
        assert error <= FLOAT16_ULPS, (
            f"{key}.vjp float16: index {i}, x = {x}, g = {gs_in[i]}: got {inside[i]}, "
            f"expected {mpmath.nstr(exact, 12)} ({error:.3g} ULP)"
        )


def test_relu_derivative_at_zero_is_zero():
    """The kink convention: relu'(0) = 0 (Table 2's indicator 1(x > 0), PyTorch, JAX)."""
    for dtype in (np.float16, np.float32, np.float64):
        zeros = np.array([0.0, -0.0], dtype=dtype)
        assert relu.derivative(zeros).tolist() == [0.0, 0.0], dtype
        assert relu.vjp(zeros, np.ones(2, dtype=dtype)).tolist() == [0.0, 0.0], dtype
        assert np.signbit(relu.forward(zeros)).tolist() == [False, False], dtype


@pytest.mark.parametrize("key", KEYS)
@pytest.mark.parametrize("dtype", [np.float16, np.float32, np.float64])
def test_non_finite_inputs(key, dtype):
    """NaN gives NaN; +-inf gives the limit of the definition, in every mode."""
    xs = np.array([np.nan, np.inf, -np.inf], dtype=dtype)
    for quantity in QUANTITIES:
        expected = [evaluate(expression(key, quantity), v) for v in (np.inf, -np.inf)]
        modes = (False, True) if dtype == np.float16 else (False,)
        for strict in modes:
            got = _elementwise.unary(generated(key), quantity, xs, strict)
            assert np.isnan(got[0]), f"{key}.{quantity} {dtype}: NaN gave {got[0]}"
            assert got[1:].tolist() == [float(e) for e in expected], (
                f"{key}.{quantity} {dtype} strict={strict}: at +-inf got {got[1:]}, "
                f"expected {expected}"
            )


@pytest.mark.parametrize("form", [f for f in STABLE_FORMS if f.saturate], ids=str)
def test_saturated_forms_return_their_limits(form):
    """Beyond |x| = SATURATION a saturated form returns its limits; checked against the
    reference at and beyond the switch, where the formula would evaluate 0 * inf."""
    target = form.target()
    big = float(SATURATION)
    for dtype in (np.float32, np.float64):
        finfo = np.finfo(dtype)
        xs = np.array([big, -big, 2 * big, -2 * big, 1e30, -1e30, finfo.max, -finfo.max], dtype)
        got = _elementwise.unary(generated(form.key), form.quantity, xs, False)
        for i, (xi, yi) in enumerate(zip(xs.tolist(), got.tolist(), strict=True)):
            exact = evaluate(target, xi)
            assert ulp_error(dtype(yi), exact, dtype) == 0, (
                f"{form.key}.{form.quantity} {np.dtype(dtype)}: index {i}: x = {xi}, got {yi}, "
                f"expected {mpmath.nstr(exact, 5)}"
            )


def _first_half_where_naive_gain_overflows() -> float:
    """The smallest positive half x where 2 x u'(x) = (2 sqrt(2/pi) x)(1 + 3c x^2), evaluated
    in naive half arithmetic (NumPy float16: every operation rounded to half), overflows.

    Real-number estimate: 2 sqrt(2/pi) * 3c x^3 = 0.214 x^3 reaches 65520 at x ~ 67.4.
    """
    h = np.float16
    slope = h(2 * np.sqrt(2 / np.pi))
    cubic = h(3 * 0.044715)
    positive = np.sort(ALL_HALVES[np.isfinite(ALL_HALVES) & (ALL_HALVES > 0)])
    with np.errstate(over="ignore"):
        gain = (slope * positive) * (h(1) + cubic * (positive * positive))
    return float(positive[np.argmax(np.isinf(gain))])


def test_strict_gelu_tanh_derivative_is_nan_where_the_gain_overflows():
    """Strict half arithmetic evaluates the x >= 0 branch (1 + t + 2 x u' t) / (1 + t)^2 with
    t = exp(-2u): x^3 overflows half from |x| ~ 40.3 on, so 2u = inf and t = 0; from the
    point where 2 x u' overflows too (predicted by naive half arithmetic, ~67.4) the product
    is inf * 0 = NaN, on both sides (the x < 0 branch has the same factor). Mixed mode is
    correct at every one of those inputs."""
    threshold = _first_half_where_naive_gain_overflows()
    assert 67 < threshold < 68, f"predicted threshold {threshold}"
    finite = np.isfinite(ALL_HALVES)
    got = _elementwise.unary(generated("gelu_tanh"), "derivative", ALL_HALVES, True)
    nan_inputs = finite & np.isnan(got)
    predicted = finite & (np.abs(ALL_HALVES.astype(np.float64)) >= threshold)
    mismatch = np.flatnonzero(nan_inputs != predicted)
    assert mismatch.size == 0, (
        f"strict NaN set differs from |x| >= {threshold} at {mismatch.size} inputs, first "
        f"x = {ALL_HALVES[mismatch[0]]}: got {got[mismatch[0]]}"
    )
    mixed = _elementwise.unary(generated("gelu_tanh"), "derivative", ALL_HALVES, False)
    assert not np.isnan(mixed[finite]).any()


def test_strict_gelu_sigmoid_derivative_is_nan_where_the_slope_times_x_overflows():
    """The x >= 0 branch (1 + t + a x t) / (1 + t)^2, t = exp(-a x), a = 1.702: in naive half
    arithmetic a x overflows (predicted with NumPy float16: the smallest half x with
    half(a) * x = inf, about 65520 / 1.702 = 38496), t = exp(-inf) = 0 and a x t = NaN."""
    h = np.float16
    positive = np.sort(ALL_HALVES[np.isfinite(ALL_HALVES) & (ALL_HALVES > 0)])
    with np.errstate(over="ignore"):
        threshold = float(positive[np.argmax(np.isinf(h(1.702) * positive))])
    assert 38000 < threshold < 39000, threshold
    finite = np.isfinite(ALL_HALVES)
    got = _elementwise.unary(generated("gelu_sigmoid"), "derivative", ALL_HALVES, True)
    predicted = finite & (np.abs(ALL_HALVES.astype(np.float64)) >= threshold)
    mismatch = np.flatnonzero((finite & np.isnan(got)) != predicted)
    assert mismatch.size == 0, (
        f"strict NaN set differs from |x| >= {threshold} at {mismatch.size} inputs, first "
        f"x = {ALL_HALVES[mismatch[0]]}: got {got[mismatch[0]]}"
    )


def test_strict_swish_flushes_where_exp_underflows():
    """Strict Swish computes x * t / (1 + t) with t = exp(x) rounded to half: for x below
    the point where exp(x) rounds to 0 in half (predicted from the rounding of the exact
    exp), the strict result is -0 although the exact value is a nonzero half."""
    negatives = np.sort(ALL_HALVES[np.isfinite(ALL_HALVES) & (ALL_HALVES < 0)])
    flushes = [
        float(v)
        for v in negatives.tolist()
        if round_to_dtype(mpmath.exp(mpmath.mpf(v)), np.float16) == 0
    ]
    threshold = max(flushes)
    assert -17.4 < threshold < -17.3, f"exp underflow point {threshold}"
    xs = np.array([threshold, np.nextafter(np.float16(threshold), np.float16(0))], np.float16)
    strict = _elementwise.unary(generated("swish"), "forward", xs, True)
    mixed = _elementwise.unary(generated("swish"), "forward", xs, False)
    assert strict[0] == 0 and mixed[0] != 0, f"at {xs[0]}: strict {strict[0]}, mixed {mixed[0]}"
    assert strict[1] != 0, f"just above the threshold, x = {xs[1]}: strict {strict[1]}"


@pytest.mark.parametrize("key", KEYS)
def test_float16_facts_name_every_input_where_the_largest_value_is_reached(key):
    """The report's "largest |f'(x)| ... (at x in ...)" lists every half input whose rounded
    value reaches the largest magnitude, in increasing order, and no other (it once named
    only the first in bit-pattern order: x = 0 for sigmoid', where [-1/32, 1/32] all reach
    0.25)."""
    facts = float16_facts(key)
    module = elementwise(key)
    for expr, largest, runs in (
        (module.forward, facts.forward_max, facts.forward_max_at),
        (module.derivative, facts.derivative_max, facts.derivative_max_at),
    ):
        rounded = np.abs(float16_table(expr).rounded.astype(np.float64))
        finite = np.isfinite(ALL_HALVES)
        assert largest == rounded[finite].max()
        reached = ALL_HALVES[finite & (rounded == largest)].astype(np.float64)
        inside = np.zeros(reached.size, dtype=bool)
        for a, b in runs:
            assert a <= b and np.any(reached == a) and np.any(reached == b), (key, runs)
            inside |= (reached >= a) & (reached <= b)
        assert inside.all(), f"{key}: {reached[~inside][:5]} reach {largest} outside {runs}"
        for a, b in runs:  # no input in a run falls short of the largest value
            within = finite & (ALL_HALVES.astype(np.float64) >= a)
            within &= ALL_HALVES.astype(np.float64) <= b
            assert np.all(rounded[within] == largest), (key, a, b)
    if key == "sigmoid":
        assert facts.derivative_max_at == [(-0.03125, 0.03125)]
