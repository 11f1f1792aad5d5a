"""Assertions, drawn values and threshold tables shared by the normalization tests
(tests/kernels/test_norms.py, tests/kernels/test_batchnorm.py): a BatchNorm feature of M
batch values has the statistics of a LayerNorm row of D = M values; and the mpmath sums
and agreement checks of their references' tests (tests/reference/test_norms.py,
tests/reference/test_batchnorm.py)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import mpmath
import numba
import numpy as np
from hypothesis import strategies as st

from derive.reference.balls import format_spacing
from derive.reference.core import float_format, round_to_dtype, ulp
from tests.helpers.assertions import assert_same_bits
from tests.helpers.tolerances import NORM_ROUNDINGS, NORM_ULPS, UNIT_FLOAT64

#: Digits of the scales S and of the comparisons (bounds; the references carry 50).
SCALE_DPS = 30
#: Largest magnitude of a drawn value, per dtype (float16: its largest finite value).
LARGEST = {np.dtype(np.float64): 1e30, np.dtype(np.float32): 1e30, np.dtype(np.float16): 65504.0}
#: float64 values below this magnitude are drawn as 0 (see the test modules' docstrings).
SMALLEST_FLOAT64 = 1e-30

#: Values every dtype must get right, mixed into the drawn ones: float16's edges (65504, the
#: next float below it, 65472; the smallest subnormal 2^-24 and normal 2^-14), |x| = 256
#: (whose square is 65536 = inf in half), 60000.
SPECIAL_VALUES = (
    0.0,
    -0.0,
    1.0,
    -1.0,
    0.5,
    3.0,
    2.0**-24,
    -(2.0**-24),
    2.0**-14,
    1e-3,
    256.0,
    -256.0,
    60000.0,
    65472.0,
    65504.0,
    -65504.0,
)

#: (k, m, overflows): constant float16 rows (features) 2^k of D = 2^m values, on both sides
#: of k + m = 16: in strict mode the sum overflows exactly when k + m >= 16.
CONSTANT_SUM_THRESHOLDS = [(k, m, k + m >= 16) for m in (1, 4, 8, 11) for k in (15 - m, 16 - m)]

#: (k, m, collapses): alternating +-2^k of D = 2^m values, on both sides of 2k + m = 16.
ALTERNATING_THRESHOLDS = [
    (7, 1, False),  # 2^15: the last safe one for D = 2
    (8, 1, True),  # 256^2 = 2^16 is inf on its own
    (7, 2, True),
    (5, 5, False),
    (5, 6, True),
    (4, 7, False),
    (4, 8, True),
    (3, 9, False),
    (3, 10, True),
]


def mp(value: Any) -> mpmath.mpf:
    """A float16/32/64 value as an mpf, exactly."""
    return mpmath.mpf(float(value))


def assert_same_values(what: str, actual: np.ndarray, expected: np.ndarray) -> None:
    """Equal values (NaN equals NaN; 0 equals -0), naming the first index that differs."""
    actual, expected = np.broadcast_arrays(np.asarray(actual), np.asarray(expected))
    same = (actual == expected) | (np.isnan(actual) & np.isnan(expected))
    if not np.all(same):
        index = tuple(int(i) for i in np.argwhere(~same)[0])
        raise AssertionError(
            f"{what} at index {index}: got {actual[index]!r}, expected {expected[index]!r}"
        )


def realize(values: Any, dtype: np.dtype) -> np.ndarray:
    """Values as an array of ``dtype``: clipped to ``LARGEST``, float64 tiny ones to 0."""
    dtype = np.dtype(dtype)
    array = np.clip(np.asarray(values, dtype=np.float64), -LARGEST[dtype], LARGEST[dtype])
    if dtype == np.float64:
        array = np.where(np.abs(array) < SMALLEST_FLOAT64, 0.0, array)
    return array.astype(dtype)


def float64_error(n: int, scale: mpmath.mpf) -> mpmath.mpf:
    """(NORM_ROUNDINGS + n) 2^-53 S (call inside ``workdps(SCALE_DPS)``)."""
    return (NORM_ROUNDINGS + n) * mpmath.mpf(UNIT_FLOAT64) * scale


def allowed(exact: mpmath.mpf, dtype: np.dtype, n: int, scale: mpmath.mpf) -> mpmath.mpf:
    """NORM_ULPS ulp(exact) + (NORM_ROUNDINGS + n) 2^-53 S (inside ``workdps(SCALE_DPS)``)."""
    return NORM_ULPS[np.dtype(dtype)] * ulp(exact, dtype) + float64_error(n, scale)


def check(
    what: str,
    index: tuple[int, ...],
    actual: np.floating,
    exact: mpmath.mpf,
    dtype: np.dtype,
    n: int,
    scale: mpmath.mpf,
) -> None:
    """Assert ``|actual - exact| <= NORM_ULPS ulp(exact) + (NORM_ROUNDINGS + n) 2^-53 S``."""
    dtype = np.dtype(dtype)
    with mpmath.workdps(SCALE_DPS):
        error64 = float64_error(n, scale)
        where = f"{what} [{dtype}] at index {index}: got {actual!r}, expected "
        if mpmath.isnan(exact):
            assert np.isnan(actual), where + "nan"
            return
        expected = mpmath.nstr(exact, 20)
        assert not np.isnan(actual), where + expected
        rounded = round_to_dtype(exact, dtype)
        if np.isinf(actual) or np.isinf(rounded):
            low = round_to_dtype(exact - error64, dtype)
            high = round_to_dtype(exact + error64, dtype)
            assert low <= actual <= high, (
                f"{where}{expected} (correctly rounded {rounded!r}; a float64 value within "
                f"{mpmath.nstr(error64, 3)} of it rounds to [{low!r}, {high!r}])"
            )
            return
        bound = allowed(exact, dtype, n, scale)
        error = abs(mp(actual) - exact)
        assert error <= bound, (
            f"{where}{expected}: |error| = {mpmath.nstr(error, 4)} > allowed "
            f"{mpmath.nstr(bound, 4)} (n = {n}, S = {mpmath.nstr(scale, 6)})"
        )


#: Relative slack of the float64 screen: covers each of its few float64 roundings (2^-53).
_SCREEN_SLACK = 2.0**-48


def passes_by_float64(
    actual: np.ndarray, exact: np.ndarray, dtype: np.dtype, n: int, scales: np.ndarray
) -> np.ndarray:
    """Where :func:`check` is sure to pass, decided in float64 with every rounding covered:
    a boolean array of ``actual``'s shape (``exact`` and ``scales``: object arrays of mpf of
    that shape).

    ``E = float(exact)`` is within ``2^-53 |E| + 2^-1074`` of the exact value, so
    ``|actual - exact| <= |fl(actual - E)| (1 + 2^-52) + 2^-52 |E| + 2^-1073``. The allowed
    error is at least ``NORM_ULPS ulp(v) + (NORM_ROUNDINGS + n) 2^-53 float(S)`` for
    ``v = nextafter(|E|, 0) <= |exact|`` (``ulp`` does not decrease with the magnitude). An
    entry passes the screen when the first is below the second with ``_SCREEN_SLACK`` to
    spare, its values are finite and its exact value rounds to a finite one; every other
    entry (NaN, inf, overflow, or an error within the slack of the bound) is left to
    :func:`check`, which then decides it in mpmath as before. So the screen only saves work:
    an entry :func:`check` would fail never passes it.
    """
    dtype = np.dtype(dtype)
    fmt = float_format(dtype)
    a = np.asarray(actual, dtype=np.float64)
    e = np.array([float(v) for v in exact.ravel()], dtype=np.float64).reshape(a.shape)
    s = np.array([float(v) for v in scales.ravel()], dtype=np.float64).reshape(a.shape)
    with np.errstate(over="ignore", invalid="ignore"):
        ulp_low = format_spacing(np.nextafter(np.abs(e), 0.0), dtype)
        bound = NORM_ULPS[dtype] * ulp_low + (NORM_ROUNDINGS + n) * UNIT_FLOAT64 * s
        error = np.abs(a - e) * (1.0 + 2.0**-52) + 2.0**-52 * np.abs(e) + 2.0**-1073
        finite = np.isfinite(a) & np.isfinite(s) & (np.abs(e) < float(fmt.max_finite))
        return finite & (error * (1.0 + _SCREEN_SLACK) <= bound * (1.0 - _SCREEN_SLACK))


def objects(nested: Any) -> np.ndarray:
    """Nested lists of mpf as an object array of the same shape."""
    return np.array(nested, dtype=object)


def check_array(
    what: str,
    actual: np.ndarray,
    exact: np.ndarray,
    dtype: np.dtype,
    n: int,
    scales: np.ndarray,
) -> None:
    """:func:`check` every entry of ``actual`` against the object arrays ``exact`` and
    ``scales`` of its shape; the entries :func:`passes_by_float64` settles are not
    re-checked in mpmath (they pass there too)."""
    assert actual.shape == exact.shape, f"{what}: shape {actual.shape}, expected {exact.shape}"
    assert scales.shape == exact.shape, f"{what}: scales of shape {scales.shape}"
    assert actual.dtype == dtype, f"{what}: dtype {actual.dtype}, expected {dtype}"
    settled = passes_by_float64(actual, exact, dtype, n, scales)
    for where in np.argwhere(~settled):
        index = tuple(int(i) for i in where)
        check(what, index, actual[index], exact[index], dtype, n, scales[index])


def assert_same_bits_on_1_and_2_threads(
    name: str, outputs: Callable[[], Sequence[np.ndarray]]
) -> None:
    """``outputs()`` run on one Numba thread and on two gives the same bits, output by output
    (the thread count is restored afterwards)."""
    threads = numba.get_num_threads()
    try:
        numba.set_num_threads(1)
        serial = outputs()
        numba.set_num_threads(2)
        parallel = outputs()
    finally:
        numba.set_num_threads(threads)
    for i, (got, want) in enumerate(zip(parallel, serial, strict=True)):
        assert_same_bits(f"{name} output {i}: 2 threads against 1", got, want)


# --------------------------------------------------------------------------------------
# mpmath sums and agreement, for the reference tests
# --------------------------------------------------------------------------------------


#: Exact dyadic grid values, and general floats (tiny magnitudes left out: they only make
#: the scales of the terms degenerate, not the references wrong).
REFERENCE_VALUES = st.one_of(
    st.integers(-512, 512).map(lambda k: k / 64),
    st.floats(-8, 8, allow_nan=False, allow_subnormal=False).filter(
        lambda t: t == 0 or abs(t) >= 2**-20
    ),
)


def reference_arrays(shape: tuple[int, ...], dtype=np.float64) -> st.SearchStrategy[np.ndarray]:
    """Arrays of ``shape`` drawn from ``REFERENCE_VALUES`` (as float64), cast to ``dtype``."""
    size = int(np.prod(shape))
    return st.lists(REFERENCE_VALUES, min_size=size, max_size=size).map(
        lambda values: np.array(values, dtype=np.float64).reshape(shape).astype(dtype)
    )


def as_mpf(value: Any) -> mpmath.mpf:
    """An mpf as it is; a float16/32/64 value as an mpf, exactly."""
    return value if isinstance(value, mpmath.mpf) else mpmath.mpf(float(value))


def flat(tree: Any) -> list[Any]:
    """The leaves of nested lists, tuples and arrays, in order."""
    if isinstance(tree, (list, tuple, np.ndarray)):
        return [leaf for item in tree for leaf in flat(item)]
    return [tree]


def inner(a: Any, b: Any) -> tuple[mpmath.mpf, mpmath.mpf]:
    """``(sum a_i b_i, sum |a_i b_i|)`` over the flattened trees (call inside workdps)."""
    left, right = [as_mpf(t) for t in flat(a)], [as_mpf(t) for t in flat(b)]
    assert len(left) == len(right), f"shapes differ: {len(left)} vs {len(right)} entries"
    products = [p * q for p, q in zip(left, right, strict=True)]
    return mpmath.fsum(products), mpmath.fsum(products, absolute=True)


def abs_sum(tree: Any) -> mpmath.mpf:
    return mpmath.fsum([as_mpf(t) for t in flat(tree)], absolute=True)


def assert_agree(actual, expected, scale, what: str, digits: int) -> None:
    """``|actual - expected| <= 10^-digits * scale``, with a message naming everything."""
    bound = mpmath.mpf(10) ** -digits * scale
    difference = abs(actual - expected)
    assert difference <= bound, (
        f"{what}: actual {mpmath.nstr(actual, 45)}, expected {mpmath.nstr(expected, 45)}, "
        f"|difference| {mpmath.nstr(difference, 5)} > 10^-{digits} * scale "
        f"{mpmath.nstr(scale, 5)}"
    )


def assert_adjoint(
    g: Any, derivative: Any, gradient: Any, direction: Any, bound: Any, what: str, digits: int
) -> None:
    """``<gradient, u> = <g, J u>`` (``derivative`` = J u, ``direction`` = u) to ``digits``
    relative to ``bound sum|g| sum|u|`` plus the sums of the two products' absolute terms
    (call inside workdps)."""
    lhs, lhs_scale = inner(g, derivative)
    rhs, rhs_scale = inner(gradient, direction)
    terms = bound * abs_sum(g) * abs_sum(direction)
    assert_agree(rhs, lhs, terms + lhs_scale + rhs_scale, what, digits)
