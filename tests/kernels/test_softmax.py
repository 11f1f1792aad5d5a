"""``kernels.softmax`` against the mpmath reference, in float64, float32 and float16.

Reference: ``derive/reference/softmax_pool.py`` (``exp(x_i) / sum exp(x_j)`` as written,
the VJP by hand-written reverse mode, the Jacobian by forward mode, at >= 50 digits with
adaptive precision where they cancel).

Error bounds (u = 2^-53; "exact" is the reference value)
--------------------------------------------------------
Every non-strict path computes in float64 / double-double and rounds once to the output
format T, so a result passes when

    |result - exact| <= ulp_T(exact) / 2 + E64,

E64 being the error of the float64 value before that rounding (for T = float64 the final
rounding is the ``ulp/2`` and E64 counts what happens before it):

* ``y_j``: ``E64 = FORWARD_ROUNDINGS u |y_j| + FORWARD_UNDERFLOW``. The shift ``x_j - x_m``
  is exact (two_sum), so the spread of the row costs nothing: ``exp`` of the pair carries
  the libm error only (glibc: < 1 ULP, 2u relative), the sum ``s`` of such terms at most
  the same 2u, the double-double quotient ``e_j / s`` at most 4u, and rounding the pair to
  a float64 before a narrower format 1u more: 5u. A subnormal ``exp`` is off by half a
  subnormal ULP absolutely, which the quotient by ``s >= 1`` does not enlarge: 2^-1073.
* ``dx_i``: ``E64 = VJP_ROUNDINGS u S_i + U_i`` with
  ``S_i = y_i (|g_i - g_m| + C)``, ``C = sum_{j != m} y_j |g_m - g_j|`` (m = first argmax).
  The kernel forms ``dx_i = y_i ((g_i - g_m) + c)``, ``c = sum_{j != m} y_j (g_m - g_j)``,
  with the differences of g exact and the rest in double-double: each y carries 4u, so c
  errs by at most 4u C, and the product by ``y_i`` (4u) gives ``8u S_i``; 1u for the
  pre-rounding and the O(D u^2) double-double residue: 10u. ``S_i`` is the size of the
  terms, so a g that cancels (``g_i`` close to ``<g, y>``) is judged relative to it, but
  at the argmax ``S_m = y_m C`` is as small as the value itself when g does not cancel:
  ``x = (0, -46)``, ``g = (1, 0)`` must give ``dx_0 = y_0 y_1 = 1.05e-20`` to a few ULPs.
  ``U_i = VJP_UNDERFLOW (1 + D + |g_i - g_m| + sum_{j != m} |g_m - g_j|)``: subnormal
  y and the double-double products' low parts err by a subnormal ULP per term (times 8
  when ``max|g| >= 2^1020`` is scaled by 1/8): 2^-1068 covers both.
* Jacobian ``J_ik``: ``E64 = JACOBIAN_ROUNDINGS u |J_ik| + JACOBIAN_UNDERFLOW``: products of
  two y (8u); ``1 - y_i`` for ``i != m`` has ``y_i <= 1/2`` and errs by 4u relative at most,
  ``1 - y_m`` is a sum of y (4u); 1u pre-rounding, 1u residue.

float16 with ``strict_fp16=True`` is judged by a running error analysis of its own half
arithmetic (``Approx`` below: every operation adds ``u_h |value| + 2^-25``,
``u_h = 2^-11``), starting from the bound on each strict ``y_j`` derived in
:func:`strict_y_error`. Where strict arithmetic breaks (a constant row of D > 2048, a
gradient difference past 65504) has its own tests.

float16 exhaustive: softmax of a D = 2 row depends on ``x_0 - x_1`` only, so all 65,536
half values of ``x_0`` with ``x_1 = 0`` are checked against the reference.
"""

from __future__ import annotations

import math
import warnings
from dataclasses import dataclass

import ml_dtypes
import mpmath
import numpy as np
import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

import kernels.softmax as softmax
from derive.reference import softmax_pool as reference
from derive.reference.core import ulp
from kernels import _dd, _vmath
from kernels._bf16 import to_bfloat16
from tests.helpers.norms import assert_same_values, mp

DTYPES = (np.dtype(np.float64), np.dtype(np.float32), np.dtype(np.float16))
HALF = np.dtype(np.float16)

#: Digits of the bound computations (they are bounds; the references carry 50).
BOUND_DPS = 30
UNIT = mpmath.mpf(2) ** -53
UNIT_HALF = mpmath.mpf(2) ** -11
#: Half of the smallest half subnormal: the absolute error of a rounding to half.
HALF_SUBNORMAL_ROUNDING = mpmath.mpf(2) ** -25

FORWARD_ROUNDINGS = 5
FORWARD_UNDERFLOW = mpmath.mpf(2) ** -1073
VJP_ROUNDINGS = 10
VJP_UNDERFLOW = mpmath.mpf(2) ** -1068
JACOBIAN_ROUNDINGS = 10
JACOBIAN_UNDERFLOW = mpmath.mpf(2) ** -1071

#: Examples per property (the adaptive reference is slow on wide spreads).
EXAMPLES = 60
STRICT_EXAMPLES = 40
MAX_ROWS, MAX_DIM = 3, 6
#: |g| for the strict tests: g_i - g_m and (g_i - g_m) + c stay below 65504.
STRICT_G = 8192.0


# --------------------------------------------------------------------------------------
# Checking one value
# --------------------------------------------------------------------------------------


def check(what: str, index: tuple, actual, exact, dtype: np.dtype, float64_error) -> None:
    """``|actual - exact| <= ulp_dtype(exact) / 2 + float64_error`` (NaN must match NaN)."""
    where = f"{what} [{dtype}] at index {index}: got {actual!r}, expected "
    with mpmath.workdps(BOUND_DPS):
        if mpmath.isnan(exact):
            assert np.isnan(actual), where + "nan"
            return
        assert np.isfinite(actual), where + mpmath.nstr(exact, 20)
        allowed = ulp(exact, dtype) / 2 + float64_error
        error = abs(mp(actual) - exact)
        assert error <= allowed, (
            f"{where}{mpmath.nstr(exact, 20)}: |error| = {mpmath.nstr(error, 4)} > allowed "
            f"{mpmath.nstr(allowed, 4)} ({mpmath.nstr(error / ulp(exact, dtype), 4)} ULP)"
        )


def check_bound(what: str, index: tuple, actual, exact, bound) -> None:
    """``|actual - exact| <= bound`` (a derived bound that includes the last rounding)."""
    with mpmath.workdps(BOUND_DPS):
        if mpmath.isnan(exact):
            assert np.isnan(actual), f"{what} at index {index}: got {actual!r}, expected nan"
            return
        error = abs(mp(actual) - exact)
        assert error <= bound, (
            f"{what} at index {index}: got {actual!r}, expected {mpmath.nstr(exact, 20)}: "
            f"|error| = {mpmath.nstr(error, 4)} > bound {mpmath.nstr(bound, 4)}"
        )


def argmax_first(row: np.ndarray) -> int:
    return int(np.argmax(row))  # the first index of the maximum, as the kernel's m


def finite_row(row: np.ndarray) -> bool:
    return not (np.any(np.isnan(row)) or np.any(row == np.inf) or np.all(row == -np.inf))


def vjp_terms(row: np.ndarray, grow: np.ndarray, y: list) -> tuple[list, list]:
    """``S_i`` and ``U_i`` of one row (call inside ``workdps(BOUND_DPS)``)."""
    m = argmax_first(row)
    g = [mp(v) for v in grow]
    others = [j for j in range(row.size) if j != m]
    spread = mpmath.fsum(y[j] * abs(g[m] - g[j]) for j in others)
    total = mpmath.fsum(abs(g[m] - g[j]) for j in others)
    sizes = [y[i] * (abs(g[i] - g[m]) + spread) for i in range(row.size)]
    under = [VJP_UNDERFLOW * (1 + row.size + abs(g[i] - g[m]) + total) for i in range(row.size)]
    return sizes, under


# --------------------------------------------------------------------------------------
# Strategies
# --------------------------------------------------------------------------------------

_WIDTH = {np.dtype(np.float64): 64, np.dtype(np.float32): 32, np.dtype(np.float16): 16}
#: (moderate range, full range) of the drawn inputs per dtype: moderate spreads give
#: outputs across many binades, full ones spreads of 1e300.
_X_RANGES = {
    np.dtype(np.float64): (60.0, 1e300),
    np.dtype(np.float32): (60.0, 1e38),
    np.dtype(np.float16): (20.0, 65504.0),
}
_G_RANGES = {
    np.dtype(np.float64): (1e6, 1.7e308),
    np.dtype(np.float32): (1e6, 1e38),
    np.dtype(np.float16): (100.0, 65504.0),
}


def _values(dtype: np.dtype, ranges: dict, masks: bool) -> st.SearchStrategy[float]:
    width = _WIDTH[dtype]
    moderate, full = (float(dtype.type(v)) for v in ranges[dtype])  # representable bounds
    options = [
        st.floats(-moderate, moderate, width=width),
        st.floats(-moderate, moderate, width=width),
        st.floats(-full, full, width=width),
        st.sampled_from([0.0, 1.0, -1.0, 0.5]),
    ]
    if masks:
        options.append(st.just(-math.inf))
    return st.one_of(options)


@st.composite
def cases(draw, dtypes=DTYPES, g_limit: float | None = None):
    """``(dtype name, x rows, g rows)`` as nested tuples of floats."""
    dtype = draw(st.sampled_from(dtypes))
    rows = draw(st.integers(1, MAX_ROWS))
    dim = draw(st.integers(1, MAX_DIM))
    x = draw(st.lists(_values(dtype, _X_RANGES, True), min_size=rows * dim, max_size=rows * dim))
    if g_limit is None:
        gv = _values(dtype, _G_RANGES, False)
    else:
        gv = st.floats(-g_limit, g_limit, width=_WIDTH[dtype])
    g = draw(st.lists(gv, min_size=rows * dim, max_size=rows * dim))
    shape = (rows, dim)
    return dtype.name, np.reshape(x, shape).tolist(), np.reshape(g, shape).tolist()


def realize(case) -> tuple[np.dtype, np.ndarray, np.ndarray]:
    name, x, g = case
    dtype = np.dtype(name)
    return dtype, np.array(x, dtype=dtype), np.array(g, dtype=dtype)


#: Hard cases pinned for every property: the near-one-hot rows (relative accuracy of dx at
#: the argmax), an inexact shift x_j - x_m (a plain float64 one errs by |t| u), huge
#: spreads, float16's extremes, masks, ties and D = 1.
PINNED = (
    ("float64", [[0.0, -46.0]], [[1.0, 0.0]]),
    ("float64", [[0.1, -37.3, 12.345678901234567]], [[0.3, -0.7, 0.1]]),
    ("float64", [[-46.0, 0.0, -50.0]], [[0.0, 1.0, 3.0]]),
    ("float64", [[0.0, -700.0]], [[1.0, 0.0]]),
    ("float64", [[1e300, -1e300]], [[1.0, -1.0]]),
    ("float64", [[1.7e308, -1.7e308], [-1.7e308, 1.7e308]], [[1e308, -1e308], [2.0, 3.0]]),
    ("float64", [[5.0, 5.0, 5.0]], [[1.0, 2.0, 4.0]]),
    ("float64", [[0.0, -math.inf, 1.0]], [[1.0, 5.0, -2.0]]),
    ("float64", [[3.0]], [[7.0]]),
    ("float32", [[0.0, -80.0]], [[1.0, 0.0]]),
    ("float32", [[0.0, -17.0]], [[1e6, -1e6]]),
    ("float16", [[65504.0, -65504.0], [65504.0, 65504.0]], [[1.0, 0.0], [1.0, -1.0]]),
    ("float16", [[65504.0, 65472.0]], [[65504.0, -65504.0]]),
    ("float16", [[0.0, -9.0]], [[1.0, 0.0]]),
    ("float16", [[-math.inf, 0.0, 2.0**-24]], [[3.0, 1.0, 0.0]]),
)


def with_pinned(test):
    for case in reversed(PINNED):
        test = example(case=case)(test)
    return test


# --------------------------------------------------------------------------------------
# 1. Against the reference
# --------------------------------------------------------------------------------------


@settings(max_examples=EXAMPLES)
@with_pinned
@given(case=cases())
def test_forward_matches_reference(case):
    dtype, x, _ = realize(case)
    y = softmax.forward(x)
    assert y.dtype == dtype and y.shape == x.shape
    exact = reference.softmax_forward(x)
    for index in np.ndindex(x.shape):
        error = FORWARD_ROUNDINGS * UNIT * abs(exact[index]) + FORWARD_UNDERFLOW
        check("softmax.forward", index, y[index], exact[index], dtype, error)


@settings(max_examples=EXAMPLES)
@with_pinned
@given(case=cases())
def test_vjp_matches_reference(case):
    dtype, x, g = realize(case)
    dx = softmax.vjp(x, g)
    assert dx.dtype == dtype and dx.shape == x.shape
    exact = reference.softmax_vjp(x, g)
    y = reference.softmax_forward(x)
    for r in range(x.shape[0]):
        if not finite_row(x[r]):
            for i in range(x.shape[1]):
                check("softmax.vjp", (r, i), dx[r, i], exact[r, i], dtype, 0)
            continue
        with mpmath.workdps(BOUND_DPS):
            sizes, under = vjp_terms(x[r], g[r], list(y[r]))
        for i in range(x.shape[1]):
            error = VJP_ROUNDINGS * UNIT * sizes[i] + under[i]
            check("softmax.vjp", (r, i), dx[r, i], exact[r, i], dtype, error)


@settings(max_examples=EXAMPLES)
@with_pinned
@given(case=cases())
def test_jacobian_matches_reference(case):
    dtype, x, _ = realize(case)
    row = x[0]
    jac = softmax.jacobian(row)
    assert jac.dtype == dtype and jac.shape == (row.size, row.size)
    exact = reference.softmax_jacobian(row)
    for index in np.ndindex(jac.shape):
        error = JACOBIAN_ROUNDINGS * UNIT * abs(exact[index]) + JACOBIAN_UNDERFLOW
        check(
            f"softmax.jacobian at x = {row.tolist()}", index, jac[index], exact[index], dtype, error
        )


def test_near_one_hot_gradient_is_relatively_accurate():
    """dx at the argmax is y_m (1 - y_m)(g_m - ...): no cancellation to 0 when y_m ~ 1."""
    for dtype, gap in ((np.float64, 46.0), (np.float64, 700.0), (np.float32, 80.0), (HALF, 9.0)):
        x = np.array([0.0, -gap], dtype)
        g = np.array([1.0, 0.0], dtype)
        dx = softmax.vjp(x, g)
        with mpmath.workdps(BOUND_DPS):
            e = mpmath.exp(-mpmath.mpf(gap))
            exact = e / (1 + e) ** 2  # y_0 y_1
            error = abs(mp(dx[0]) - exact) / ulp(exact, dtype)
        assert error <= 1, f"dx_0 at x = (0, -{gap}) [{np.dtype(dtype)}]: {dx[0]!r}, {error} ULP"
        assert dx[1] == -dx[0]


# --------------------------------------------------------------------------------------
# 2. float16: exhaustive D = 2, and strict arithmetic
# --------------------------------------------------------------------------------------


def test_float16_exhaustive_pairs_are_within_the_bound():
    """All 65,536 halves x_0 with x_1 = 0 (a D = 2 row depends on x_0 - x_1 only)."""
    x0 = np.arange(1 << 16, dtype=np.uint16).view(np.float16)
    x = np.stack([x0, np.zeros_like(x0)], axis=1)
    y = softmax.forward(x)
    exact = reference.softmax_forward(x)
    with mpmath.workdps(BOUND_DPS):
        for index in np.ndindex(x.shape):
            value = exact[index]
            error = FORWARD_ROUNDINGS * UNIT * abs(value) + FORWARD_UNDERFLOW
            check("softmax.forward", index, y[index], value, HALF, error)
            if mpmath.isnan(value):
                continue
            # Within E64 of the exact value, a result can differ from the correct rounding
            # only if the exact value lies within E64 of a midpoint between two halves.
            off = abs(mp(y[index]) - value)
            if off > ulp(value, HALF) / 2:
                assert off >= ulp(value, HALF) / 2 - error, (index, y[index], value)


@dataclass(frozen=True)
class Approx:
    """A half-precision quantity: its exact value and a bound on the computed one's error."""

    value: mpmath.mpf
    error: mpmath.mpf

    @staticmethod
    def rounding(value, error) -> Approx:
        """One rounding to half of a value known within ``error``."""
        return Approx(value, error + UNIT_HALF * (abs(value) + error) + HALF_SUBNORMAL_ROUNDING)

    def __add__(self, other: Approx) -> Approx:
        return Approx.rounding(self.value + other.value, self.error + other.error)

    def __sub__(self, other: Approx) -> Approx:
        return Approx.rounding(self.value - other.value, self.error + other.error)

    def __mul__(self, other: Approx) -> Approx:
        a, b = self, other
        error = a.error * abs(b.value) + b.error * abs(a.value) + a.error * b.error
        return Approx.rounding(a.value * b.value, error)


def strict_y_error(row: np.ndarray, y: list) -> list:
    """Bounds on ``|y_strict_j - y_j|`` for a finite float16 row (inside workdps).

    ``t_j = x_j - x_m`` (exact), ``e_j = exp(t_j)``. ``rh(t_j)`` errs by ``u_h |t_j|``, so
    ``rh(exp(rh(t_j)))`` is within ``kappa_j e_j + 2^-25``, ``kappa_j = 1.01 (|t_j| + 1) u_h``
    (``e^a - 1 <= 1.01 a`` for ``a <= 0.02``, i.e. ``|t_j| <= 40``; beyond, ``e_j < 2^-57``
    and the half is 0: ``kappa_j = 1``). Since ``|t| e^t <= 1/e``, the sum of those errors
    is ``<= 1.01 u_h (D/e + s) + D 2^-24`` and the left-to-right half sum adds
    ``gamma_{D-1} s``: ``s_strict = s (1 + sigma)``, ``sigma <= u_h (0.4 D + 1.01) +
    gamma_{D-1} (1 + ...)``. The quotient ``e_j / s`` rounded: the bound returned.
    """
    size = row.size
    m = argmax_first(row)
    gamma = (size - 1) * UNIT_HALF / (1 - (size - 1) * UNIT_HALF)
    first = (
        UNIT_HALF * (mpmath.mpf("0.4") * size + mpmath.mpf("1.01")) + size * mpmath.mpf(2) ** -24
    )
    sigma = first + gamma * (1 + first)
    bounds = []
    for j in range(size):
        t = abs(mp(row[j]) - mp(row[m]))
        kappa = mpmath.mpf("1.01") * (t + 1) * UNIT_HALF if t <= 40 else mpmath.mpf(1)
        quotient = ((kappa + sigma) * y[j] + HALF_SUBNORMAL_ROUNDING) / (1 - sigma)
        bounds.append(quotient + UNIT_HALF * (y[j] + quotient) + HALF_SUBNORMAL_ROUNDING)
    return bounds


@settings(max_examples=STRICT_EXAMPLES)
@example(case=("float16", [[65504.0, -65504.0], [0.0, -17.0]], [[1.0, 0.0], [8192.0, -8192.0]]))
@example(case=("float16", [[0.0, -math.inf, -1.0, -2.0, 3.0, 3.0]], [[1.0] * 6]))
@given(case=cases(dtypes=(HALF,), g_limit=STRICT_G))
def test_strict_float16_is_within_its_running_error_bound(case):
    _, x, g = realize(case)
    y_strict = softmax.forward(x, strict_fp16=True)
    dx_strict = softmax.vjp(x, g, strict_fp16=True)
    exact_y = reference.softmax_forward(x)
    exact_dx = reference.softmax_vjp(x, g)
    for r in range(x.shape[0]):
        row = x[r]
        if not finite_row(row):
            assert_same_values("strict y", y_strict[r], softmax.forward(row))
            assert_same_values("strict dx", dx_strict[r], softmax.vjp(row, g[r]))
            continue
        size, m = row.size, argmax_first(row)
        with mpmath.workdps(BOUND_DPS):
            errors = strict_y_error(row, list(exact_y[r]))
            y = [Approx(v, e) for v, e in zip(exact_y[r], errors, strict=True)]
            gs = [Approx(mp(v), mpmath.mpf(0)) for v in g[r]]
            c = Approx(mpmath.mpf(0), mpmath.mpf(0))
            for j in range(size):
                if j != m:
                    c = c + y[j] * (gs[m] - gs[j])
            for i in range(size):
                check_bound(
                    "strict softmax.forward", (r, i), y_strict[r, i], y[i].value, y[i].error
                )
                d = c if i == m else (gs[i] - gs[m]) + c
                dx = y[i] * d
                check_bound("strict softmax.vjp", (r, i), dx_strict[r, i], exact_dx[r, i], dx.error)
        if r == 0:
            jac = softmax.jacobian(row, strict_fp16=True)
            exact_jac = reference.softmax_jacobian(row)
            with mpmath.workdps(BOUND_DPS):
                rest = Approx(mpmath.mpf(0), mpmath.mpf(0))
                for j in range(size):
                    if j != m:
                        rest = rest + y[j]
                one = Approx(mpmath.mpf(1), mpmath.mpf(0))
                for i, k in np.ndindex(jac.shape):
                    if i != k:
                        bound = (y[i] * y[k]).error
                    else:
                        bound = (y[i] * (rest if i == m else one - y[i])).error
                    check_bound(
                        "strict softmax.jacobian", (i, k), jac[i, k], exact_jac[i, k], bound
                    )


def test_strict_sum_stalls_at_2048():
    """Half sums of ones stop at 2048 (2048 + 1 rounds to 2048): y = 1/2048, not 1/4096."""
    x = np.zeros(4096, dtype=HALF)
    assert np.all(softmax.forward(x, strict_fp16=True) == np.float16(1 / 2048))
    assert np.all(softmax.forward(x) == np.float16(1 / 4096))
    # up to D = 2048 the half sum is exact
    assert np.all(softmax.forward(np.zeros(2048, HALF), strict_fp16=True) == np.float16(1 / 2048))


@pytest.mark.parametrize(
    ("dtype", "c"),
    [
        pytest.param(dtype, c, id=f"{dtype.__name__}-{c:g}")
        for dtype in (np.float64, np.float32, np.float16, ml_dtypes.bfloat16)
        for c in (1.0, 3.0, 2.0**15, 2.0**127)
        if not (dtype == np.float16 and c > 2.0**15)  # past float16's range
    ],
)
def test_exact_zero_of_the_gradient_on_a_constant_row(dtype, c):
    """x constant, g = (c, -c, 0, c/2, -c/2): <g, y> = mean(g) = 0, so dx = g/5 and dx_2 = 0
    exactly. The double-double path divided each term by s (y_j = 1/5 rounded) before the
    terms cancelled and left 2^-106 c there: -1.7e5 at c = 2^127 (float32 and bfloat16,
    where that is far above the smallest value), -1.0e-33 in float32 at c = 1; it now
    divides the sum once, after the cancellation, and gives 0."""
    x = np.zeros((2, 5), dtype)
    g = np.array([[c, -c, 0.0, c / 2, -c / 2], [0.0, c, -c, 0.0, 0.0]]).astype(dtype)
    dx = softmax.vjp(x, g).astype(np.float64)
    assert dx[0, 2] == 0.0 and dx[1, 0] == 0.0 and dx[1, 3] == 0.0, dx
    exact = g.astype(np.float64) / 5
    assert np.all(np.abs(dx - exact) <= 2.0**-7 * np.abs(exact)), (dx, exact)


def test_strict_gradient_difference_overflows():
    """g = (65504, -65504): g_0 - g_1 = 131008 is inf in half; mixed mode gives 32752."""
    x = np.zeros(2, HALF)
    g = np.array([65504.0, -65504.0], HALF)
    assert_same_values("mixed dx", softmax.vjp(x, g), np.array([32752.0, -32752.0]))
    strict = softmax.vjp(x, g, strict_fp16=True)
    assert strict[0] == np.inf and np.isnan(strict[1]), strict


# --------------------------------------------------------------------------------------
# 3. Conventions
# --------------------------------------------------------------------------------------

MODES = [(dtype, False) for dtype in DTYPES] + [(HALF, True), (np.dtype(ml_dtypes.bfloat16), True)]
MODE_IDS = ["float64", "float32", "float16", "float16-strict", "bfloat16-strict"]


@pytest.mark.parametrize(("dtype", "strict"), MODES, ids=MODE_IDS)
def test_masked_entries_get_zero(dtype, strict):
    x = np.array([[0.0, -np.inf, 0.0], [-np.inf, 2.0, -np.inf]], dtype)
    g = np.array([[1.0, 3.0, -1.0], [5.0, 1.0, 7.0]], dtype)
    y = softmax.forward(x, strict_fp16=strict)
    assert_same_values("y", y, np.array([[0.5, 0.0, 0.5], [0.0, 1.0, 0.0]]))
    assert_same_values("dx", softmax.vjp(x, g, strict_fp16=strict), [[0.5, 0.0, -0.5], [0, 0, 0]])
    jac = softmax.jacobian(x[0], strict_fp16=strict)
    assert_same_values("J", jac, [[0.25, 0.0, -0.25], [0.0, 0.0, 0.0], [-0.25, 0.0, 0.25]])


@pytest.mark.parametrize(("dtype", "strict"), MODES, ids=MODE_IDS)
def test_fully_masked_row_is_zero_not_nan(dtype, strict):
    """Not PyTorch's NaN: a fully masked query attends to nothing (g is not read)."""
    x = np.array([[-np.inf, -np.inf, -np.inf], [1.0, 2.0, 3.0]], dtype)
    g = np.array([[np.nan, np.inf, 1.0], [1.0, 0.0, 0.0]], dtype)
    y = softmax.forward(x, strict_fp16=strict)
    dx = softmax.vjp(x, g, strict_fp16=strict)
    assert_same_values("y", y[0], np.zeros(3))
    assert_same_values("dx", dx[0], np.zeros(3))
    assert_same_values("J", softmax.jacobian(x[0], strict_fp16=strict), np.zeros((3, 3)))
    assert_same_values("other row", y[1], softmax.forward(x[1], strict_fp16=strict))
    assert_same_values("other row dx", dx[1], softmax.vjp(x[1], g[1], strict_fp16=strict))


@pytest.mark.parametrize(("dtype", "strict"), MODES, ids=MODE_IDS)
@pytest.mark.parametrize("bad", [np.nan, np.inf])
def test_nan_or_plus_inf_makes_its_row_nan(dtype, strict, bad):
    x = np.array([[0.0, bad, 1.0], [1.0, 2.0, 3.0]], dtype)
    g = np.ones_like(x)
    y = softmax.forward(x, strict_fp16=strict)
    dx = softmax.vjp(x, g, strict_fp16=strict)
    assert np.all(np.isnan(y[0])) and np.all(np.isnan(dx[0]))
    assert np.all(np.isnan(softmax.jacobian(x[0], strict_fp16=strict)))
    assert_same_values("other row", y[1], softmax.forward(x[1], strict_fp16=strict))
    assert_same_values("other row dx", dx[1], softmax.vjp(x[1], g[1], strict_fp16=strict))


@pytest.mark.parametrize(("dtype", "strict"), MODES, ids=MODE_IDS)
def test_one_feature(dtype, strict):
    x = np.array([[3.0], [-np.inf], [np.nan], [-65504.0]], dtype)
    g = np.array([[7.0], [1.0], [1.0], [-2.0]], dtype)
    assert_same_values("y", softmax.forward(x, strict_fp16=strict), [[1.0], [0.0], [np.nan], [1]])
    assert_same_values("dx", softmax.vjp(x, g, strict_fp16=strict), [[0.0], [0.0], [np.nan], [0]])
    assert_same_values("J", softmax.jacobian(x[0], strict_fp16=strict), [[0.0]])


def test_float16_extremes_do_not_overflow():
    x = np.array([[65504.0, -65504.0], [65504.0, 65504.0], [-65504.0, -65504.0]], HALF)
    for strict in (False, True):
        y = softmax.forward(x, strict_fp16=strict)
        assert_same_values(f"y (strict={strict})", y, [[1.0, 0.0], [0.5, 0.5], [0.5, 0.5]])


def test_huge_float64_spreads():
    x = np.array([[1e300, -1e300], [1.7e308, -1.7e308], [-1.7e308, 1.7e308], [1.7e308, 1.7e308]])
    expected = [[1.0, 0.0], [1.0, 0.0], [0.0, 1.0], [0.5, 0.5]]
    assert_same_values("y", softmax.forward(x), expected)
    dx = softmax.vjp(x, np.array([[1.0, -1.0]] * 3 + [[1e308, -1e308]]))
    half = np.float64(1e308) / 2  # y_0 y_1 (g_0 - g_1) = (1e308 + 1e308) / 4, exactly
    assert_same_values("dx", dx, [[0.0, 0.0], [0.0, 0.0], [0.0, 0.0], [half, -half]])


def _float64_row(rng, size: int, kind: int) -> tuple[np.ndarray, np.ndarray]:
    """An x row (N(0, 1) times a spread, two entries masked) and a finite g row below
    2^995 of mixed magnitudes; kind 3: g nearly cancels at every entry."""
    x = rng.standard_normal(size) * (1.0, 30.0, 1e-3, 300.0)[kind]
    if size > 3:
        x[rng.integers(size, size=2)] = -math.inf
        x[rng.integers(size)] = np.max(x)  # a tie with the maximum: m is the first one
    g = rng.standard_normal(size) * 2.0 ** rng.integers(-40, 40, size=size)
    g *= 2.0 ** int(rng.integers(-900, 900))
    if kind == 3:
        g[:] = 1.0 + rng.standard_normal(size) * 2.0**-40
    return x, g


@pytest.mark.parametrize("size", [1, 2, 63, 64, 65, 1000, 4099])
def test_float64_branch_free_loops_are_the_double_double_formulas(size):
    """The float64 rows' vectorized loops against the formulas they replace, on the same
    exponentials: ``_weights`` (each ``e_j`` times the pair ``1 / s``) against ``dd_div`` of
    each ``e_j`` by ``s``; ``_vjp_row`` (sums in lanes, branch-free pair arithmetic)
    against ``_vjp_row_general`` (one running double-double sum, the branches); and the
    lanes' sum ``s`` against one running ``dd_add`` sum, within 2^-100 s. Both sides are
    double-double to about 2^-104, so their float64 results are the same bits except for a
    value within that of a float64 midpoint (none in these rows); dropping a low part
    anywhere in the new loops changes results at 2^-53 and fails."""
    rng = np.random.default_rng(size)
    for kind in range(4):
        x, g = _float64_row(rng, size, kind)
        m = argmax_first(x)
        eh, el = np.empty(size), np.empty(size)
        sh, sl = softmax._exponentials_dd(x, m, eh, el)
        running = (0.0, 0.0)
        for j in range(size):
            running = _dd.dd_add(*running, eh[j], el[j])
        with mpmath.workprec(300):
            lanes, one = mp(sh) + mp(sl), mp(running[0]) + mp(running[1])
            assert abs(lanes - one) <= mpmath.mpf(2) ** -100 * one, (size, kind)
        yh, yl = np.empty(size), np.empty(size)
        softmax._weights(x, m, yh, yl)
        quotients = [_dd.dd_div(eh[j], el[j], sh, sl)[0] for j in range(size)]
        np.testing.assert_array_equal(yh.view(np.int64), np.array(quotients).view(np.int64))
        dx, general = np.empty(size), np.empty(size)
        softmax._vjp_row(x, g, m, eh.copy(), el.copy(), sh, sl, dx)
        softmax._vjp_row_general(x, g, m, eh.copy(), el.copy(), sh, sl, general)
        np.testing.assert_array_equal(dx.view(np.int64), general.view(np.int64))


# --------------------------------------------------------------------------------------
# 4. Arrays and bad input
# --------------------------------------------------------------------------------------


@pytest.mark.parametrize("dtype", DTYPES, ids=[d.name for d in DTYPES])
def test_batch_axes_non_contiguous_input_and_no_writes(dtype):
    rng = np.random.default_rng(0)
    big = (rng.standard_normal((2, 3, 14)) * 4).astype(dtype)
    x = big[:, :, ::2]  # (2, 3, 7), not contiguous
    g = (rng.standard_normal((2, 3, 14)) * 4).astype(dtype)[:, :, 1::2]
    big.flags.writeable = False
    before = big.copy()
    y, dx = softmax.forward(x), softmax.vjp(x, g)
    assert y.shape == dx.shape == (2, 3, 7)
    for index in np.ndindex(2, 3):
        assert_same_values("y", y[index], softmax.forward(np.ascontiguousarray(x[index])))
        assert_same_values("dx", dx[index], softmax.vjp(x[index].copy(), g[index].copy()))
    assert_same_values("x after the call", big, before)


def test_many_rows_in_parallel_equal_one_row_at_a_time():
    rng = np.random.default_rng(1)
    x = rng.standard_normal((257, 33)) * 10
    g = rng.standard_normal((257, 33))
    y, dx = softmax.forward(x), softmax.vjp(x, g)
    for r in (0, 100, 256):
        assert_same_values("y", y[r], softmax.forward(x[r]))
        assert_same_values("dx", dx[r], softmax.vjp(x[r], g[r]))


def test_no_rows_give_empty_outputs():
    x = np.zeros((0, 4))
    assert softmax.forward(x).shape == (0, 4)
    assert softmax.vjp(x, x).shape == (0, 4)


@pytest.mark.parametrize(
    ("call", "error", "match"),
    [
        (
            lambda: softmax.forward(np.zeros(3, np.int64)),
            TypeError,
            "x: expected a bfloat16, float16",
        ),
        (
            lambda: softmax.forward(np.zeros(3, np.complex128)),
            TypeError,
            "x: expected a bfloat16, float16",
        ),
        (lambda: softmax.forward(np.float64(1.0)), ValueError, "0-d"),
        (lambda: softmax.forward(np.zeros((2, 0))), ValueError, "D >= 1"),
        (lambda: softmax.vjp(np.zeros((2, 3)), np.zeros((2, 2))), ValueError, "g: expected shape"),
        (lambda: softmax.vjp(np.zeros(3), np.zeros(3, np.float32)), TypeError, "g: expected dtype"),
        (lambda: softmax.forward(np.zeros(3), strict_fp16=True), ValueError, "strict_fp16"),
        (lambda: softmax.jacobian(np.zeros((2, 3))), ValueError, "one sample"),
    ],
)
def test_bad_input_names_the_argument(call, error, match):
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        with pytest.raises(error, match=match):
            call()


@pytest.mark.parametrize("bad", ["no", 1, None])
def test_strict_fp16_of_another_kind_is_a_type_error(bad):
    """``strict_fp16="no"`` used to take the strict path (a non-empty string is truthy)."""
    x = np.zeros((2, 3), np.float16)
    calls = [
        lambda: softmax.forward(x, strict_fp16=bad),
        lambda: softmax.vjp(x, x, strict_fp16=bad),
        lambda: softmax.jacobian(x[0], strict_fp16=bad),
    ]
    for call in calls:
        with pytest.raises(TypeError, match=r"^strict_fp16: expected True or False"):
            call()


# --------------------------------------------------------------------------------------
# 5. The float32 fast path against the double-double path
# --------------------------------------------------------------------------------------
#
# The fast path returns float32(v) only where its error bound proves that to be the correctly
# rounded value, and takes every other entry from the double-double path (whose float64
# value is rounded once more). So the two agree bit for bit, except where the double-double
# result itself is not correctly rounded (double rounding near a midpoint): there the fast
# result must be the correct rounding, within half an ULP of the reference.

FLOAT32 = np.dtype(np.float32)
#: A D = 2 row (0, T) whose y_0 = 1 / (1 + e^T) lies 2^-48.6 (relative) from a float32
#: midpoint: undecided by the fast path's bound. Found by scanning every float32 T in
#: [-2, -1) for the smallest distance of ``1 / (1 + np.exp(T))`` to a midpoint, and
#: confirmed with mpmath at 60 digits.
NEAR_MIDPOINT_T = float.fromhex("-0x1.b1db3cp+0")


def bits(a: np.ndarray) -> np.ndarray:
    return np.asarray(a, np.float32).view(np.int32)


def bits_of(a: np.ndarray) -> np.ndarray:
    """The bits of a float32 or float16 array."""
    return a.view(np.int32 if a.dtype == FLOAT32 else np.int16)


def assert_fast_equals_exact(x: np.ndarray, g: np.ndarray) -> None:
    """forward and vjp of float32 or float16 ``x`` (rows) give the double-double path's
    bits."""
    dtype = x.dtype
    for what, fast, exact in (
        ("forward", softmax.forward(x), softmax._forward_exact(x)),
        ("vjp", softmax.vjp(x, g), softmax._vjp_exact(x, g)),
    ):
        assert fast.dtype == exact.dtype == dtype
        differ = np.argwhere(bits_of(fast) != bits_of(exact))
        for index in map(tuple, differ):
            r = index[:-1]
            reference_row = (
                reference.softmax_forward(x[r])
                if what == "forward"
                else reference.softmax_vjp(x[r], g[r])
            )
            value = reference_row[index[-1]]
            with mpmath.workdps(BOUND_DPS):
                error = abs(mp(fast[index]) - value)
                assert error <= ulp(value, dtype) / 2, (
                    f"{what} at {index}: fast {fast[index]!r}, double-double {exact[index]!r}, "
                    f"exact {mpmath.nstr(value, 20)}; row {x[r].tolist()}"
                )


def hard_rows(rng: np.random.Generator, dim: int, count: int) -> tuple[np.ndarray, np.ndarray]:
    """``count`` float32 rows of length ``dim`` of many kinds, and gradients to match."""
    f32 = np.finfo(np.float32)
    kinds = []
    for _ in range(count):
        kind = rng.integers(12)
        if kind == 0:  # moderate
            x = rng.standard_normal(dim) * 3
        elif kind == 1:  # huge spreads, beyond exp's range and up to the largest float32
            x = rng.choice([0.0, -100.0, -745.0, -1e4, -1e30, float(f32.min), 3e38], dim)
            x[rng.integers(dim)] = rng.standard_normal()
        elif kind == 2:  # near-ties: a few ULPs around one value
            base = np.float32(rng.standard_normal() * 50)
            steps = rng.integers(-3, 4, dim)
            x = np.array([np.float32(base) + s * np.spacing(np.float32(base)) for s in steps])
        elif kind == 3:  # all negative, large: the maximum is below -2 (packed keys < -2^62)
            x = -np.abs(rng.standard_normal(dim)) * 1e6 - 2.0
        elif kind == 4:  # -inf masks (the double-double path takes the row)
            x = rng.standard_normal(dim)
            x[rng.random(dim) < 0.5] = -np.inf
        elif kind == 5:  # signed zeros and subnormals
            x = rng.choice([0.0, -0.0, 1e-45, -1e-45, 1e-40, -3e-39], dim)
        elif kind == 6:  # one-hot: y_m rounds to 1
            x = np.full(dim, -rng.uniform(20, 120))
            x[rng.integers(dim)] = 0.0
        elif kind == 7:  # a NaN or +inf
            x = rng.standard_normal(dim)
            x[rng.integers(dim)] = rng.choice([np.nan, np.inf])
        elif kind == 8:  # a spread where exp underflows in float64 for part of the row
            x = rng.uniform(-800, 0, dim)
        elif kind == 9:  # constant row
            x = np.full(dim, rng.standard_normal())
        else:  # wide and narrow mixtures
            x = rng.standard_normal(dim) * 10.0 ** rng.integers(-6, 4)
        kinds.append(np.asarray(x, np.float32))
    x = np.stack(kinds)
    g = np.empty_like(x)
    for r in range(count):
        kind = rng.integers(6)
        if kind == 0:
            g[r] = rng.standard_normal(dim)
        elif kind == 1:  # nearly cancelling: g close to a constant, so dx ~ 0
            g[r] = np.float32(rng.standard_normal()) + rng.standard_normal(dim) * 1e-6
        elif kind == 2:  # constant: dx = 0 exactly
            g[r] = np.float32(rng.standard_normal())
        elif kind == 3:  # huge
            g[r] = rng.choice([-3e38, 3e38, 1.0, 0.0], dim)
        elif kind == 4:  # g_i = <g, y> to float32 precision at one entry
            y = reference_free_softmax(x[r])
            g[r] = rng.standard_normal(dim)
            g[r][rng.integers(dim)] = np.float32(np.dot(np.nan_to_num(y), g[r].astype(np.float64)))
        else:
            g[r] = rng.standard_normal(dim) * 10.0 ** rng.integers(-30, 30)
    return x, g


def reference_free_softmax(row: np.ndarray) -> np.ndarray:
    """A plain float64 softmax (only to build gradients that nearly cancel)."""
    with np.errstate(all="ignore"):
        row = row.astype(np.float64)
        e = np.exp(row - np.max(row))
        return e / np.sum(e)


@pytest.mark.parametrize("dim", [1, 2, 3, 7, 64, 65, 200, 1030])
def test_fast_path_equals_the_double_double_path(dim):
    rng = np.random.default_rng(dim)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # building the rows only
        x, g = hard_rows(rng, dim, 400 if dim < 100 else 60)
    assert_fast_equals_exact(x, g)


def test_fast_path_equals_the_double_double_path_at_the_benchmark_shapes():
    rng = np.random.default_rng(7)
    for shape in ((64, 1024), (8, 4096)):
        x = rng.standard_normal(shape).astype(np.float32)
        g = rng.standard_normal(shape).astype(np.float32)
        assert_fast_equals_exact(x, g)


@settings(max_examples=EXAMPLES)
@with_pinned
@given(case=cases(dtypes=(FLOAT32,)))
def test_fast_path_equals_the_double_double_path_on_drawn_rows(case):
    dtype, x, g = realize(case)
    if dtype == FLOAT32:
        assert_fast_equals_exact(x, g)


def fast_row(
    row: np.ndarray, g: np.ndarray | None = None, half: bool = False
) -> tuple[int, np.ndarray]:
    """The fast path alone on one float32 row: (undecided count, output with NaN there); with
    ``half``, the half bits it stores, as float32 values."""
    out = np.empty(row.size, np.uint16 if half else np.float32)
    ev = np.empty(row.size)
    fmt = softmax._HALF if half else softmax._FLOAT32
    if g is None:
        undecided = softmax._fast_forward_row(row, out, ev, np.empty(softmax._LANES), fmt)
    else:
        undecided = softmax._fast_vjp_row(row, g, out, ev, np.empty((5, softmax._LANES)), fmt)
    return undecided, out.view(np.float16).astype(np.float32) if half else out


def test_undecided_forward_entry_falls_back_and_is_correctly_rounded():
    x = np.array([0.0, NEAR_MIDPOINT_T], np.float32)
    undecided, out = fast_row(x)
    assert undecided == 1 and np.isnan(out[0]) and not np.isnan(out[1])
    y = softmax.forward(x)
    assert_same_values("y", y, softmax._forward_exact(x))
    exact = reference.softmax_forward(x)
    with mpmath.workdps(BOUND_DPS):
        assert abs(mp(y[0]) - exact[0]) <= ulp(exact[0], FLOAT32) / 2
        # the midpoint really is that close: the other neighbour is only just further away
        other = np.nextafter(y[0], np.float32(2 if mp(y[0]) < exact[0] else 0))
        assert (
            abs(mp(other) - exact[0]) - abs(mp(y[0]) - exact[0]) < ulp(exact[0], FLOAT32) * 2.0**-20
        )


def test_exact_midpoint_gradient_falls_back_and_ties_to_even():
    """x = (0, 0), g = (1 + 2^-23, -2^-24): dx_0 = (g_0 - g_1) / 4 is exactly a float32
    midpoint, which no error bound can decide; the tie goes to the even neighbour."""
    x = np.zeros(2, np.float32)
    g = np.array([1 + 2.0**-23, -(2.0**-24)], np.float32)
    undecided, out = fast_row(x, g)
    assert undecided == 2 and np.all(np.isnan(out))
    even = np.float32((1 + 2.0**-22) / 4)
    assert_same_values("dx", softmax.vjp(x, g), np.array([even, -even]))
    assert np.array_equal(bits(softmax.vjp(x, g)), bits(softmax._vjp_exact(x, g)))


def test_fast_path_decides_almost_everything_on_typical_rows():
    """The fallback is rare (the speed depends on it) and the decided entries are final."""
    rng = np.random.default_rng(3)
    x = rng.standard_normal((64, 1024)).astype(np.float32)
    g = rng.standard_normal((64, 1024)).astype(np.float32)
    forward_undecided = sum(fast_row(x[r])[0] for r in range(64))
    vjp_undecided = sum(fast_row(x[r], g[r])[0] for r in range(64))
    assert forward_undecided <= 4 and vjp_undecided <= 8, (forward_undecided, vjp_undecided)
    for r in range(4):
        for out, exact in ((fast_row(x[r])[1], softmax._forward_exact(x[r])),):
            decided = ~np.isnan(out)
            assert np.array_equal(bits(out[decided]), bits(exact[decided]))


def test_special_rows_go_to_the_double_double_path_whole():
    rows = np.array(
        [[0.0, -np.inf, 1.0], [np.nan, 0.0, 1.0], [np.inf, 0.0, 1.0], [-np.inf] * 3], np.float32
    )
    for row in rows:
        undecided, out = fast_row(row)
        assert undecided == 3 and np.all(np.isnan(out))
        undecided, out = fast_row(row, np.ones(3, np.float32))
        assert undecided == 3 and np.all(np.isnan(out))


def test_zeros_are_decided_only_with_their_sign():
    """y underflowing to 0 is decided (y >= 0 is known), dx = 0 exactly is not (its sign
    comes from the double-double path: the interval around 0 holds -0 and +0)."""
    x = np.array([0.0, -800.0, -3e38], np.float32)
    undecided, out = fast_row(x)
    assert undecided == 0 and np.array_equal(bits(out), bits(np.array([1.0, 0.0, 0.0])))
    undecided, out = fast_row(np.zeros(3, np.float32), np.full(3, 2.5, np.float32))
    assert undecided == 3
    assert np.array_equal(
        bits(softmax.vjp(np.zeros(3, np.float32), np.full(3, 2.5, np.float32))),
        bits(np.zeros(3, np.float32)),
    )


@pytest.mark.parametrize("seed", range(5))
def test_scan_finds_the_first_maximum_and_the_special_values(seed):
    rng = np.random.default_rng(seed)
    for _ in range(200):
        dim = int(rng.integers(1, 40))
        row = rng.choice([-3e38, -1e6, -2.5, -2.0, -1.0, -1e-45, 0.5, 7.0, 3e38], dim)
        row = row.astype(np.float32)
        special, m = softmax._scan_float32(row)
        assert not special and m == int(np.argmax(row)), (row, m)
        bad = row.copy()
        bad[rng.integers(dim)] = rng.choice([np.nan, np.inf, -np.inf])
        assert softmax._scan_float32(bad)[0]
    # -0.0 and +0.0: any index of the maximum will do for the fast path
    special, m = softmax._scan_float32(np.array([-0.0, 0.0, -1.0], np.float32))
    assert not special and m in (0, 1)


def python_lane_sum(values, compensated: bool) -> float:
    """The fast path's summation order written out: lane k adds values k, k + L, ...
    left to right from 0, then the lanes pairwise; with TwoSum and the errors alongside."""
    lanes = softmax._LANES
    acc, comp = [0.0] * lanes, [0.0] * lanes

    def add(k, v):
        t = acc[k] + v
        z = t - acc[k]
        comp[k] += (acc[k] - (t - z)) + (v - z)
        acc[k] = t

    for j, v in enumerate(values):
        if compensated:
            add(j % lanes, v)
        else:
            acc[j % lanes] += v
    half = lanes // 2
    while half:
        for k in range(half):
            if compensated:
                add(k, acc[k + half])
                comp[k] += comp[k + half]
            else:
                acc[k] += acc[k + half]
        half //= 2
    return acc[0] + comp[0] if compensated else acc[0]


def test_row_sums_are_the_stated_fixed_order():
    """The sum s of the kernel's exponentials (plain lanes in the forward, compensated ones
    in the VJP), and its lane combination, against that order written out in Python, on
    rows whose sums depend on the order; each within its stated bound."""
    rng = np.random.default_rng(11)
    lanes = softmax._LANES
    # the last size: every E_j near 1, so the lanes' partial sums (and errors) grow longest
    for size, scale in (
        (1, 30),
        (5, 30),
        (lanes - 1, 30),
        (lanes, 30),
        (lanes + 3, 30),
        (3 * lanes + 17, 30),
        (64 * lanes + 5, 1e-3),
    ):
        row = (rng.standard_normal(size) * scale).astype(np.float32)
        grow = rng.standard_normal(size).astype(np.float32)
        m = int(np.argmax(row))
        ev, ev_vjp = np.empty(size), np.empty(size)
        s, es, rho = softmax._exponentials(row, m, ev, np.empty(lanes))
        assert s == python_lane_sum(ev.tolist(), compensated=False), size
        s_vjp, es_vjp, rho_vjp, _, _ = softmax._exponentials_and_gradient(
            row, grow, m, ev_vjp, np.empty((5, lanes))
        )
        assert np.array_equal(ev_vjp, ev) and rho_vjp == rho
        assert s_vjp == python_lane_sum(ev.tolist(), compensated=True), size
        assert _vmath.EXP_REL_ERROR <= rho < 2 * _vmath.EXP_REL_ERROR
        with mpmath.workdps(BOUND_DPS):
            exact = mpmath.fsum(mpmath.exp(mp(v) - mp(row[m])) for v in row)
            assert abs(mp(s) - exact) <= es
            assert abs(mp(s_vjp) - exact) <= es_vjp
        values = rng.standard_normal(lanes) * 10.0 ** rng.integers(-20, 20, lanes)
        assert softmax._combine(values.copy()) == python_lane_sum(values.tolist(), False)


# --- float16 (mixed mode) through the same fast path, decided for half output -------------


@pytest.mark.parametrize("dim", [1, 2, 5, 64, 300])
def test_float16_fast_path_equals_the_double_double_path(dim):
    rng = np.random.default_rng(100 + dim)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # building the rows (and overflows)
        x, g = hard_rows(rng, dim, 300 if dim < 100 else 60)
        x, g = x.astype(HALF), np.clip(g, -65504, 65504).astype(HALF)
    assert_fast_equals_exact(x, g)


def test_float16_fast_path_at_the_extremes():
    x = np.array([[65504.0, -65504.0], [65504.0, 65472.0], [0.0, -9.0], [2.0**-24, 0.0]], HALF)
    g = np.array([[65504.0, -65504.0], [1.0, 0.0], [1.0, 0.0], [3.0, -1.0]], HALF)
    assert_fast_equals_exact(x, g)
    # decided for half where float32 would be undecided: the half interval is 2^13 wider
    row = np.array([0.0, NEAR_MIDPOINT_T], np.float32)
    assert fast_row(row)[0] == 1 and fast_row(row, half=True)[0] == 0
    assert_same_values(
        "half y", fast_row(row, half=True)[1], softmax._forward_exact(row.astype(HALF))
    )


def test_float16_exact_midpoint_gradient_ties_to_even():
    """x = (0, 0), g = (1 + 2^-10, -2^-11): dx_0 = (g_0 - g_1) / 4 is a half midpoint."""
    x = np.zeros(2, HALF)
    g = np.array([1 + 2.0**-10, -(2.0**-11)], HALF)
    undecided, _ = fast_row(x.astype(np.float32), g.astype(np.float32), half=True)
    assert undecided == 2
    even = np.float16((1 + 2.0**-9) / 4)
    assert_same_values("dx", softmax.vjp(x, g), np.array([even, -even]))
    assert np.array_equal(bits_of(softmax.vjp(x, g)), bits_of(softmax._vjp_exact(x, g)))


@pytest.mark.parametrize("seed", range(4))
def test_fast_path_bounds_hold_against_the_reference(seed):
    """The running bounds themselves, not only the decisions: every float64 value of the
    fast path (y_j, c, dx_i) is within its bound of the mpmath value, on rows with wide
    spreads and on gradients that nearly cancel."""
    rng = np.random.default_rng(seed)
    for _ in range(6):
        dim = int(rng.integers(1, 24))
        x = (rng.standard_normal(dim) * rng.choice([1.0, 30.0, 300.0])).astype(np.float32)
        g = (rng.standard_normal(dim) * rng.choice([1e-3, 1.0, 1e20])).astype(np.float32)
        if rng.random() < 0.5:  # nearly constant g: dx_i = y_i (g_i - <g, y>) cancels
            g = (np.float32(3.0) + rng.standard_normal(dim) * 1e-6).astype(np.float32)
        special, m = softmax._scan_float32(x)
        assert not special and x[m] == x.max()
        ev, lanes = np.empty(dim), np.empty((5, softmax._LANES))
        s, es, rho, big_c, e_big_c = softmax._exponentials_and_gradient(x, g, m, ev, lanes)
        inv, einv, ke, alpha = softmax._reciprocal(s, es, rho)
        c = big_c * inv
        ec = abs(big_c) * einv + inv * e_big_c + e_big_c * einv + softmax.U * abs(c) + softmax.TINY
        exact_y = reference.softmax_forward(x)
        exact_dx = reference.softmax_vjp(x, g)
        with mpmath.workdps(BOUND_DPS):
            gs = [mp(v) for v in g]
            exact_c = mpmath.fsum(exact_y[j] * (gs[m] - gs[j]) for j in range(dim))
            assert abs(mp(c) - exact_c) <= mp(ec), (x.tolist(), g.tolist())
            for j in range(dim):
                y = ev[j] * inv
                assert abs(mp(y) - exact_y[j]) <= mp(ev[j] * ke + softmax.U * y + alpha)
                dx, edx = softmax._gradient_entry(
                    ev[j], g[j], np.float64(g[m]), inv, ke, alpha, c, ec
                )
                assert abs(mp(dx) - exact_dx[j]) <= mp(edx), (j, x.tolist(), g.tolist())


def test_long_rows_and_the_length_limit_of_the_fast_path():
    """A row of 100,003 (many lanes, a tail) equals the double-double path; past 2^20 the
    double-double path takes the row (the depth factors of the bounds are stated to there)."""
    rng = np.random.default_rng(21)
    x = (rng.standard_normal((1, 100_003)) * 4).astype(np.float32)
    g = rng.standard_normal((1, 100_003)).astype(np.float32)
    assert_fast_equals_exact(x, g)
    assert softmax._Prepared(np.zeros(softmax._FAST_MAX_DIM, np.float32), False).fast
    assert not softmax._Prepared(np.zeros(softmax._FAST_MAX_DIM + 1, np.float32), False).fast
    assert not softmax._Prepared(np.zeros(4, np.float16), True).fast  # strict: its own path


# --- bfloat16 in mixed mode: the fast path, rounded to bfloat16 -----------------------------


def test_bfloat16_mixed_mode_is_correctly_rounded_on_the_fast_path():
    """bfloat16 rows in mixed mode run the float32 fast path with a bfloat16 decision (both
    ends of each value's proven interval rounded to bfloat16), the undecided entries from
    the double-double path rounded once: every y and dx is within half a bfloat16 ULP of
    the mpmath value (NaN where it is NaN), on rows of N(0, s^2) values with s from 1/2 to
    40, masked entries (-inf), a fully masked row and rows with NaN and +inf. There they
    are also the float64 path's results rounded once, what bfloat16 got before (about
    eight times slower at (4096, 1024))."""
    rng = np.random.default_rng(29)
    for shape, scale in (((6, 33), 0.5), ((5, 64), 4.0), ((4, 130), 40.0), ((3, 1), 1.0)):
        x = (rng.standard_normal(shape) * scale).astype(ml_dtypes.bfloat16)
        g = (rng.standard_normal(shape) * scale).astype(ml_dtypes.bfloat16)
        if shape[1] > 1:
            x[0, 1] = -np.inf
            x[1, :] = -np.inf
            x[2, 0] = np.nan
            x[-1, -1] = np.inf
        wide, gwide = x.astype(np.float64), g.astype(np.float64)
        got = {"y": softmax.forward(x), "dx": softmax.vjp(x, g)}
        exact = {"y": reference.softmax_forward(wide), "dx": reference.softmax_vjp(wide, gwide)}
        before = {
            "y": to_bfloat16(softmax._forward_exact(wide)),
            "dx": to_bfloat16(softmax._vjp_exact(wide, gwide)),
        }
        for name, values in got.items():
            assert values.dtype == ml_dtypes.bfloat16
            bits = values.view(np.uint16)
            assert np.array_equal(bits, before[name].view(np.uint16)), name
            for index in np.ndindex(shape):
                actual = np.float64(values[index].astype(np.float32))
                check(name, index, actual, exact[name][index], values.dtype, 0)
        # the loops' float32 results are bfloat16 values, so the final cast is exact
        rows, grows = wide.astype(np.float32), gwide.astype(np.float32)
        for loop, args in (
            (softmax._forward_rows_fast, (rows,)),
            (softmax._vjp_rows_fast, (rows, grows)),
        ):
            out = np.empty(shape, np.float32)
            loop(*args, out, softmax._BFLOAT16)
            kept = out.astype(ml_dtypes.bfloat16).astype(np.float32)
            assert np.array_equal(kept, out, equal_nan=True), loop
