"""``kernels.maxpool`` and ``kernels.avgpool`` against the mpmath references.

References: ``derive/reference/softmax_pool.py`` (global max/avg and windowed
``forward2d``/``vjp2d`` by explicit index sums, with the tie conventions written as
definitions: global ties share g evenly; a window's argmax is its last NaN, else its first
maximum in row-major order -- PyTorch CPU's ``val > maxval || isnan(val)`` scan).

Error bounds (u = 2^-53, u_h = 2^-11; "exact" is the reference value)
--------------------------------------------------------------------
* Maxima are exact in every dtype: equality.
* A single division of exact inputs, ``g / k`` (global max) and ``g / D`` (global avg), is
  correctly rounded: float64 rounds it once, and rounding that float64 on to float32 or
  float16 is innocuous. It could go wrong only if the float64 value were a float32
  midpoint while the quotient is not, i.e. if the quotient's bits 26 to 53 were all equal;
  a run of r equal bits in the expansion of a fraction with odd denominator ``k'`` needs
  ``k' > 2^r`` (the remainder ``rho`` satisfies ``rho / k' < 2^-r`` or
  ``(k' - rho) / k' < 2^-r``), so ``k < 2^28`` suffices: equality with the correctly
  rounded reference.
* Sums (avg forward, both ``vjp2d``) run in double-double and are divided and rounded once:
  ``|result - exact| <= ulp_T(exact)/2 + [T != float64] u |exact| + (n + 6) u^2 A
  + SUM_UNDERFLOW``, with ``A`` the same sum over absolute values (the reference applied to
  ``|x|`` or ``|g|``) divided likewise, ``n`` the number of terms: a double-double sum of n
  terms errs by at most ``(n + 2) u^2`` of the sum of their magnitudes, the division by
  ``4 u^2`` of its result; a narrower format first rounds the pair to float64 (u). Sums of
  float64 past 2^960 are scaled by 2^-64: entries below 2^-958 then err by 2^-1011, and
  subnormal pairs by a subnormal ULP: ``SUM_UNDERFLOW = 2^-1010``.
* ``strict_fp16=True``: a left-to-right half sum of n terms errs by at most
  ``gamma_{n-1} A + (n-1) 2^-25`` (``gamma_k = k u_h / (1 - k u_h)``; each partial sum is
  rounded once, ``2^-25`` covering subnormal results); the final division by the exact half
  ``D`` (``D <= 2048``) rounds once more; ``avg.vjp2d`` first rounds each share ``g / (kh kw)``.
  The drawn values keep every partial sum below 65504 (strict overflow has its own test).
"""

from __future__ import annotations

import itertools
import math
import warnings

import mpmath
import numpy as np
import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

import kernels.avgpool as avgpool
import kernels.maxpool as maxpool
from derive.reference import softmax_pool as reference
from derive.reference.core import round_to_dtype, ulp
from tests.helpers.norms import assert_same_values, mp

DTYPES = (np.dtype(np.float64), np.dtype(np.float32), np.dtype(np.float16))
HALF = np.dtype(np.float16)
MODES = [(dtype, False) for dtype in DTYPES] + [(HALF, True)]
MODE_IDS = ["float64", "float32", "float16", "float16-strict"]

BOUND_DPS = 30
UNIT = mpmath.mpf(2) ** -53
UNIT_HALF = mpmath.mpf(2) ** -11
HALF_SUBNORMAL_ROUNDING = mpmath.mpf(2) ** -25
#: Residue of a double-double sum of n terms and one division: (n + SUM_ROUNDINGS) u^2 A.
SUM_ROUNDINGS = 6
SUM_UNDERFLOW = mpmath.mpf(2) ** -1010
#: |values| drawn for strict float16 sums: 9 terms of 4096 stay below 65504.
STRICT_LIMIT = 4096.0

EXAMPLES = 60
#: Relative slack of LAPACK's largest singular value of a 0/1 matrix of <= 100 columns
#: (backward stable SVD: O(n u) relative).
SVD_SLACK = 1e-12
#: Relative slack of a Lipschitz check computed with float64 norms of <= 1000 terms:
#: each norm errs by at most (n + 1) u relative, far below 2^-40.
NORM_SLACK = 2.0**-40


def gamma_half(k: int) -> mpmath.mpf:
    return k * UNIT_HALF / (1 - k * UNIT_HALF)


# --------------------------------------------------------------------------------------
# Checks
# --------------------------------------------------------------------------------------


def check_equal(what: str, actual: np.ndarray, exact: np.ndarray, dtype: np.dtype) -> None:
    """Every entry equals the correctly rounded reference (NaN matches NaN)."""
    assert actual.shape == exact.shape and actual.dtype == dtype, (actual.shape, actual.dtype)
    expected = np.array([round_to_dtype(v, dtype) for v in exact.flat], dtype=dtype)
    assert_same_values(what, actual, expected.reshape(exact.shape))


def check_sum(
    what: str,
    actual: np.ndarray,
    exact: np.ndarray,
    magnitude: np.ndarray,
    terms: int,
    dtype: np.dtype,
    strict: bool,
    divided: bool = False,
    shares: bool = False,
) -> None:
    """A sum of ``terms`` terms within the module docstring's bound.

    ``magnitude`` is the reference applied to the absolute values (A). In strict mode,
    ``divided``: the sum is then divided (one more rounding); ``shares``: each term is a
    rounded ``g / (kh kw)`` (avg.vjp2d).
    """
    assert actual.shape == exact.shape and actual.dtype == dtype, (actual.shape, actual.dtype)
    with mpmath.workdps(BOUND_DPS):
        for index in np.ndindex(actual.shape):
            value, a = exact[index], magnitude[index]
            where = f"{what} [{dtype}{', strict' if strict else ''}] at index {index}"
            if mpmath.isnan(value) or mpmath.isinf(value):
                assert_same_values(where, actual[index], float(value))
                continue
            if strict:
                n = terms
                share = UNIT_HALF * a + n * HALF_SUBNORMAL_ROUNDING if shares else 0
                bound = share + gamma_half(n - 1) * (a + share) + n * HALF_SUBNORMAL_ROUNDING
                if divided:
                    bound += UNIT_HALF * (abs(value) + bound) + HALF_SUBNORMAL_ROUNDING
            else:
                bound = ulp(value, dtype) / 2 + (terms + SUM_ROUNDINGS) * UNIT**2 * a
                bound += SUM_UNDERFLOW + (UNIT * abs(value) if dtype != np.float64 else 0)
                with np.errstate(over="ignore"):
                    rounded = dtype.type(float(value))
                if np.isinf(rounded):  # the exact sum rounds to inf: so must the kernel
                    assert_same_values(where, actual[index], rounded)
                    continue
            error = abs(mp(actual[index]) - value)
            assert error <= bound, (
                f"{where}: got {actual[index]!r}, expected {mpmath.nstr(value, 20)}: "
                f"|error| = {mpmath.nstr(error, 4)} > bound {mpmath.nstr(bound, 4)}"
            )


def call(function, *args, **kwargs):
    """Call a kernel; NumPy's float16 cast-overflow warning is not an error here."""
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", "overflow encountered in cast", RuntimeWarning)
        return function(*args, **kwargs)


# --------------------------------------------------------------------------------------
# Strategies
# --------------------------------------------------------------------------------------

_WIDTH = {np.dtype(np.float64): 64, np.dtype(np.float32): 32, np.dtype(np.float16): 16}
_LARGEST = {np.dtype(np.float64): 1.7e308, np.dtype(np.float32): 3e38, HALF: 65504.0}


def values(dtype: np.dtype, strict: bool, special: bool = True) -> st.SearchStrategy[float]:
    """Small integers (ties), moderate and full-range values, and the edges."""
    width = _WIDTH[dtype]
    largest = STRICT_LIMIT if strict else float(dtype.type(_LARGEST[dtype]))
    options = [
        st.integers(-3, 3).map(float),
        st.floats(-100, 100, width=width),
        st.floats(-largest, largest, width=width),
    ]
    if special:
        options.append(st.sampled_from([-math.inf, math.inf, math.nan, 0.0, -0.0, 2.0**-24]))
    return st.one_of(options)


@st.composite
def global_cases(draw):
    dtype, strict = draw(st.sampled_from(MODES))
    rows, dim = draw(st.integers(1, 3)), draw(st.integers(1, 8))
    x = draw(st.lists(values(dtype, strict), min_size=rows * dim, max_size=rows * dim))
    g = draw(st.lists(values(dtype, strict, special=False), min_size=rows, max_size=rows))
    return dtype.name, strict, np.reshape(x, (rows, dim)).tolist(), g


@st.composite
def geometries(draw, max_size: int = 6):
    """``(H, W, kernel_size, stride, padding)`` that PyTorch accepts (int or pair each)."""
    kh, kw = draw(st.integers(1, 3)), draw(st.integers(1, 3))
    ph, pw = draw(st.integers(0, kh // 2)), draw(st.integers(0, kw // 2))
    height = draw(st.integers(max(1, kh - 2 * ph), max_size))
    width = draw(st.integers(max(1, kw - 2 * pw), max_size))
    stride = draw(st.one_of(st.none(), st.integers(1, 3), st.tuples(*[st.integers(1, 3)] * 2)))
    kernel = kh if kh == kw and draw(st.booleans()) else (kh, kw)
    padding = ph if ph == pw and draw(st.booleans()) else (ph, pw)
    return height, width, kernel, stride, padding


def out_size(height: int, width: int, kernel, stride, padding) -> tuple[int, int]:
    kh, kw = (kernel, kernel) if isinstance(kernel, int) else kernel
    sh, sw = (kh, kw) if stride is None else (stride, stride) if isinstance(stride, int) else stride
    ph, pw = (padding, padding) if isinstance(padding, int) else padding
    return (height + 2 * ph - kh) // sh + 1, (width + 2 * pw - kw) // sw + 1


@st.composite
def window_cases(draw):
    dtype, strict = draw(st.sampled_from(MODES))
    height, width, kernel, stride, padding = draw(geometries())
    planes = draw(st.integers(1, 3))
    out_h, out_w = out_size(height, width, kernel, stride, padding)
    size = planes * height * width
    x = draw(st.lists(values(dtype, strict), min_size=size, max_size=size))
    gsize = planes * out_h * out_w
    g = draw(st.lists(values(dtype, strict, special=False), min_size=gsize, max_size=gsize))
    shape = (planes, 1, height, width) if planes > 1 else (height, width)
    return (
        dtype.name,
        strict,
        np.reshape(x, shape).tolist(),
        np.reshape(g, (*shape[:-2], out_h, out_w)).tolist(),
        (kernel, stride, padding),
    )


def window_counts(height: int, width: int, kernel, stride, padding) -> np.ndarray:
    """How many windows contain each pixel, by enumerating the windows."""
    kh, kw = (kernel, kernel) if isinstance(kernel, int) else kernel
    sh, sw = (kh, kw) if stride is None else (stride, stride) if isinstance(stride, int) else stride
    ph, pw = (padding, padding) if isinstance(padding, int) else padding
    out_h, out_w = out_size(height, width, kernel, stride, padding)
    counts = np.zeros((height, width), dtype=np.int64)
    for oh, ow in itertools.product(range(out_h), range(out_w)):
        for i, j in itertools.product(range(kh), range(kw)):
            h, w = oh * sh - ph + i, ow * sw - pw + j
            if 0 <= h < height and 0 <= w < width:
                counts[h, w] += 1
    return counts


# --------------------------------------------------------------------------------------
# 1. Global pooling (Table 2's rows)
# --------------------------------------------------------------------------------------


@settings(max_examples=EXAMPLES)
@example(case=("float64", False, [[3.0, 1.0, 3.0, 3.0]], [1.0]))
@example(case=("float16", False, [[math.inf, 1.0, math.inf], [-math.inf] * 3], [3.0, -1.0]))
@example(case=("float64", False, [[1.7e308, 1.7e308], [1e-300, -1e-300]], [1.0, 1e300]))
@example(case=("float16", True, [[4096.0] * 8, [1.0, math.nan] * 4], [4096.0, 1.0]))
@example(case=("float32", False, [[0.0, -0.0], [2.0**-24, 2.0**-24]], [7.0, 3.0]))
@given(case=global_cases())
def test_global_pooling_matches_reference(case):
    name, strict, x, g = case
    dtype = np.dtype(name)
    x, g = np.array(x, dtype), np.array(g, dtype)
    check_equal(
        "maxpool.forward",
        maxpool.forward(x, strict_fp16=strict),
        reference.maxpool_forward(x),
        dtype,
    )
    check_equal(
        "maxpool.vjp", maxpool.vjp(x, g, strict_fp16=strict), reference.maxpool_vjp(x, g), dtype
    )
    check_equal(
        "avgpool.vjp", avgpool.vjp(x, g, strict_fp16=strict), reference.avgpool_vjp(x, g), dtype
    )
    y = call(avgpool.forward, x, strict_fp16=strict)
    exact = reference.avgpool_forward(x)
    magnitude = reference.avgpool_forward(np.abs(x))
    check_sum("avgpool.forward", y, exact, magnitude, x.shape[1], dtype, strict, divided=True)
    for row in x:
        assert_same_values(
            "maxpool.jacobian",
            maxpool.jacobian(row, strict_fp16=strict),
            maxpool.vjp(row, np.ones((), dtype), strict_fp16=strict)[None],
        )
        assert_same_values(
            "avgpool.jacobian",
            avgpool.jacobian(row, strict_fp16=strict),
            avgpool.vjp(row, np.ones((), dtype), strict_fp16=strict)[None],
        )


@pytest.mark.parametrize(("dtype", "strict"), MODES, ids=MODE_IDS)
def test_global_max_ties_share_the_gradient_evenly(dtype, strict):
    x = np.array([[3.0, 1.0, 3.0, 3.0], [np.inf, 0.0, np.inf, 2.0], [-np.inf] * 4], dtype)
    dx = maxpool.vjp(x, np.array([1.0, 2.0, 4.0], dtype), strict_fp16=strict)
    third = float(dtype.type(1 / 3))
    expected = [[third, 0, third, third], [1.0, 0.0, 1.0, 0.0], [1.0, 1.0, 1.0, 1.0]]
    assert_same_values("dx", dx, expected)
    assert_same_values("J", maxpool.jacobian(x[1], strict_fp16=strict), [[0.5, 0.0, 0.5, 0.0]])


@pytest.mark.parametrize(("dtype", "strict"), MODES, ids=MODE_IDS)
def test_global_max_nan_row_and_non_finite_gradient(dtype, strict):
    x = np.array([[1.0, np.nan, 5.0], [1.0, 2.0, 5.0], [1.0, 2.0, 5.0]], dtype)
    g = np.array([1.0, np.inf, -3.0], dtype)
    y = maxpool.forward(x, strict_fp16=strict)
    dx = maxpool.vjp(x, g, strict_fp16=strict)
    assert_same_values("y", y, [np.nan, 5.0, 5.0])
    # NaN row: all NaN; g = inf: 0 * inf = NaN off the argmax (IEEE, like grad * mask)
    assert_same_values("dx", dx, [[np.nan] * 3, [np.nan, np.nan, np.inf], [0.0, 0.0, -3.0]])


def test_float16_avg_of_65504_overflows_only_in_strict_mode():
    x = np.array([65504.0, 65504.0], HALF)
    assert avgpool.forward(x) == np.float16(65504.0)
    assert avgpool.forward(x, strict_fp16=True) == np.inf
    # a long strict sum stalls: 2048 + 1 rounds back to 2048
    assert avgpool.forward(np.ones(4096, HALF), strict_fp16=True) == np.float16(0.5)
    assert avgpool.forward(np.ones(4096, HALF)) == 1.0


# --------------------------------------------------------------------------------------
# 2. float16 exhaustive pairs
# --------------------------------------------------------------------------------------

_SMALL_PARTNERS = (0.0, -0.0, 1.0, -1.0, 0.5, 1.5, 2.0**-24, -(2.0**-24), 2.0**-14)
_PARTNERS = np.array([*_SMALL_PARTNERS, 65504.0, -65504.0, np.inf, -np.inf, np.nan], HALF)


def exhaustive_pairs() -> np.ndarray:
    """Every half x_0 against fixed partners, its bit neighbours and its negation: (n, 2)."""
    bits = np.arange(1 << 16, dtype=np.uint16)
    x0 = bits.view(HALF)
    columns = [np.full_like(x0, p) for p in _PARTNERS]
    columns += [(bits + 1).view(HALF), (bits - 1).view(HALF), -x0]
    return np.concatenate([np.stack([x0, c], axis=1) for c in columns])


def test_float16_exhaustive_pairs_max_is_exact_and_avg_correctly_rounded():
    pairs = exhaustive_pairs()
    a, b = pairs[:, 0].astype(np.float64), pairs[:, 1].astype(np.float64)
    nan = np.isnan(a) | np.isnan(b)
    # max: one of the two, NaN if either is; ties (including +0 and -0) share g
    y = maxpool.forward(pairs)
    assert_same_values("max", y, np.where(nan, np.nan, np.maximum(a, b)))
    share = np.where(a == b, 0.5, 1.0)
    expected = np.where(nan[:, None], np.nan, np.stack([(a >= b) * share, (b >= a) * share], 1))
    assert_same_values("max vjp", maxpool.vjp(pairs, np.ones(len(pairs), HALF)), expected)
    # avg: a + b and the halving are exact in float64, so one rounding to half is correct
    with np.errstate(invalid="ignore", over="ignore"):
        exact_avg = ((a + b) / 2).astype(HALF)
        strict_avg = ((a + b).astype(HALF).astype(np.float64) / 2).astype(HALF)
    assert_same_values("avg", call(avgpool.forward, pairs), exact_avg)
    assert_same_values("strict avg", call(avgpool.forward, pairs, strict_fp16=True), strict_avg)


def test_float16_exhaustive_pairs_spot_check_against_reference():
    """The exact float64 oracle above agrees with the mpmath reference on a sample."""
    pairs = exhaustive_pairs()[::997]
    check_equal("max", maxpool.forward(pairs), reference.maxpool_forward(pairs), HALF)
    check_equal("avg", call(avgpool.forward, pairs), reference.avgpool_forward(pairs), HALF)


# --------------------------------------------------------------------------------------
# 3. Windowed pooling
# --------------------------------------------------------------------------------------

OVERLAP = (
    "float64",
    False,
    [[1.0, 2.0, 2.0, 0.0], [2.0, 2.0, -1.0, 5.0], [0.0, 2.0, 5.0, 5.0], [1.0, 1.0, 1.0, 1.0]],
    [[1.0, 2.0, 4.0, 8.0], [16.0, 32.0, 64.0, 128.0], [1.5, 2.5, 3.5, 4.5], [-1.0, -2.0, 3.0, 9.0]],
    (3, 1, 1),
)


@settings(max_examples=EXAMPLES)
@example(case=OVERLAP)
@example(case=("float16", True, [[4096.0] * 3] * 3, [[4096.0] * 2] * 2, (2, 1, 0)))
@example(
    case=(
        "float32",
        False,
        [[np.nan, 1.0, np.nan], [np.nan, -np.inf, 2.0]],
        [[1.0, 2.0]],
        (2, 1, 0),
    )
)
@example(case=("float64", False, [[1.7e308, 1.7e308], [1.7e308, 1.7e308]], [[1e308]], (2, None, 0)))
@example(
    case=(
        "float16",
        False,
        [[-np.inf, -np.inf], [-np.inf, -np.inf]],
        [[5.0, 6.0], [7.0, 8.0]],
        (2, 2, 1),
    )
)
@given(case=window_cases())
def test_windowed_pooling_matches_reference(case):
    name, strict, x, g, (kernel, stride, padding) = case
    dtype = np.dtype(name)
    x, g = np.array(x, dtype), np.array(g, dtype)
    args = (kernel, stride, padding)
    kh, kw = (kernel, kernel) if isinstance(kernel, int) else kernel
    # max: exact forward; vjp2d sums the g of the windows sharing an argmax
    y = maxpool.forward2d(x, *args, strict_fp16=strict)
    check_equal("maxpool.forward2d", y, reference.maxpool_forward2d(x, *args), dtype)
    dx = call(maxpool.vjp2d, x, g, *args, strict_fp16=strict)
    exact = reference.maxpool_vjp2d(x, g, *args)
    magnitude = reference.maxpool_vjp2d(x, np.abs(g), *args)
    terms = int(window_counts(x.shape[-2], x.shape[-1], *args).max())
    check_sum("maxpool.vjp2d", dx, exact, magnitude, terms, dtype, strict)
    # avg: window sums over kh kw; vjp2d sums g / (kh kw) over the windows of a pixel
    y = call(avgpool.forward2d, x, *args, strict_fp16=strict)
    exact = reference.avgpool_forward2d(x, *args)
    magnitude = reference.avgpool_forward2d(np.abs(x), *args)
    check_sum("avgpool.forward2d", y, exact, magnitude, kh * kw, dtype, strict, divided=True)
    dx = call(avgpool.vjp2d, x, g, *args, strict_fp16=strict)
    exact = reference.avgpool_vjp2d(x, g, *args)
    magnitude = reference.avgpool_vjp2d(x, np.abs(g), *args)
    check_sum("avgpool.vjp2d", dx, exact, magnitude, terms, dtype, strict, shares=True)


def test_windowed_ties_go_to_the_first_maximum_and_nans_to_the_last_nan():
    x = np.array(
        [
            [[2.0, 2.0], [2.0, 2.0]],  # tie: first pixel
            [[1.0, np.nan], [np.nan, 7.0]],  # NaNs beat numbers; of two, the last one
            [[-np.inf, -np.inf], [-np.inf, -np.inf]],  # nothing beats -inf: first pixel
            [[0.0, 3.0], [3.0, np.nan]],  # one NaN wins
        ]
    )
    dx = maxpool.vjp2d(x, np.ones((4, 1, 1)), 2)
    expected = [[[1, 0], [0, 0]], [[0, 0], [1, 0]], [[1, 0], [0, 0]], [[0, 0], [0, 1]]]
    assert_same_values("dx", dx, expected)
    assert_same_values("y", maxpool.forward2d(x, 2).ravel(), [2.0, np.nan, -np.inf, np.nan])


def test_padding_is_never_selected():
    x = np.full((1, 3, 3), -np.inf)
    dx = maxpool.vjp2d(x, np.ones((1, 2, 2)), 2, stride=2, padding=1)
    # windows start at -1: the first in-plane pixel of each gets the gradient
    assert_same_values("dx", dx, [[[1, 1, 0], [1, 1, 0], [0, 0, 0]]])
    y = avgpool.forward2d(np.ones((3, 3)), 2, stride=2, padding=1)
    assert_same_values("avg with zero padding counted", y, [[0.25, 0.5], [0.5, 1.0]])


@settings(max_examples=30)
@given(geometry=geometries(max_size=5), channels=st.integers(1, 2), seed=st.integers(0, 2**32 - 1))
def test_jacobian2d_columns_are_forward2d_of_unit_vectors(geometry, channels, seed):
    height, width, kernel, stride, padding = geometry
    args = (kernel, stride, padding)
    rng = np.random.default_rng(seed)
    size = channels * height * width
    for dtype in DTYPES:
        unit = np.eye(size, dtype=dtype).reshape(size, channels, height, width)
        jac = avgpool.jacobian2d(np.zeros((channels, height, width), dtype), *args)
        columns = avgpool.forward2d(unit, *args).reshape(size, -1).T
        assert_same_values(f"avg J [{dtype}]", jac, columns)
        # max is piecewise linear: with distinct values 1 apart, raising one pixel by 1/4
        # raises exactly the windows whose maximum it is (J's column), by 1/4
        x = rng.permutation(size).astype(dtype).reshape(channels, height, width)
        jac = maxpool.jacobian2d(x, *args)
        base = maxpool.forward2d(x, *args).ravel().astype(np.float64)
        moved = maxpool.forward2d(x + unit * dtype.type(0.25), *args)
        columns = (moved.reshape(size, -1).astype(np.float64) - base) / 0.25
        assert_same_values(f"max J [{dtype}]", jac, columns.T)
        assert_same_values(f"max J x [{dtype}]", jac.astype(np.float64) @ x.ravel(), base)
        # and J^T g is vjp2d with ties: integer g keeps the products exact
        ties = rng.integers(-2, 3, size).astype(dtype).reshape(x.shape)
        jac = maxpool.jacobian2d(ties, *args)
        g = rng.integers(-8, 9, jac.shape[0]).astype(dtype)
        dx = maxpool.vjp2d(ties, g.reshape(channels, *out_size(height, width, *args)), *args)
        assert_same_values(f"max J^T g [{dtype}]", dx.ravel(), jac.T.astype(np.float64) @ g)


# --------------------------------------------------------------------------------------
# 4. Lipschitz constant of windowed max pooling
# --------------------------------------------------------------------------------------


@settings(max_examples=EXAMPLES)
@example(geometry=(5, 5, 3, 1, 0), seed=0)
@example(geometry=(6, 6, 3, 1, 1), seed=0)
@example(geometry=(7, 4, (3, 2), (2, 1), (1, 1)), seed=0)
@given(geometry=geometries(max_size=9), seed=st.integers(0, 2**32 - 1))
def test_lipschitz2d_is_sqrt_of_the_largest_window_count_and_attained(geometry, seed):
    height, width, kernel, stride, padding = geometry
    args = (kernel, stride, padding)
    counts = window_counts(height, width, *args)
    m = int(counts.max())
    lip = maxpool.lipschitz2d((height, width), *args)
    assert lip == math.sqrt(m), (geometry, lip, m)
    # the spike witness: a pixel in m windows raises m window maxima from 0 to 1
    pixel = np.unravel_index(int(np.argmax(counts)), counts.shape)
    base = np.zeros((1, height, width))
    spike = base.copy()
    spike[(0, *pixel)] = 1.0
    step = maxpool.forward2d(spike, *args) - maxpool.forward2d(base, *args)
    assert math.sqrt(float(np.sum(step**2))) == lip
    # local constants: ||J||_2 = sqrt(max selections per pixel) <= sqrt(m), = at the spike
    assert abs(np.linalg.norm(maxpool.jacobian2d(spike, *args), 2) - lip) <= SVD_SLACK * lip
    rng = np.random.default_rng(seed)
    a = rng.standard_normal((1, height, width))
    assert np.linalg.norm(maxpool.jacobian2d(a, *args), 2) <= lip * (1 + SVD_SLACK)
    # random pairs (near and far) never exceed it
    for scale in (1.0, 1e-3):
        b = a + scale * rng.standard_normal(a.shape)
        dy = np.sqrt(np.sum((maxpool.forward2d(a, *args) - maxpool.forward2d(b, *args)) ** 2))
        assert dy <= lip * np.sqrt(np.sum((a - b) ** 2)) * (1 + NORM_SLACK), (a, b)


def test_lipschitz2d_examples():
    assert maxpool.lipschitz2d((8, 8), 2) == 1.0  # stride = kernel: disjoint windows
    assert maxpool.lipschitz2d((8, 8), 3, stride=1) == 3.0
    assert maxpool.lipschitz2d((8, 8), 3, stride=2, padding=1) == 2.0
    assert maxpool.lipschitz2d((1, 8), (1, 4), stride=1) == 2.0


# --------------------------------------------------------------------------------------
# 5. Arrays and bad input
# --------------------------------------------------------------------------------------


@pytest.mark.parametrize("dtype", DTYPES, ids=[d.name for d in DTYPES])
def test_non_contiguous_batch_input_and_no_writes(dtype):
    rng = np.random.default_rng(3)
    big = rng.standard_normal((2, 3, 5, 12)).astype(dtype)
    x = big[..., ::2]  # (2, 3, 5, 6)
    big.flags.writeable = False
    before = big.copy()
    g = rng.standard_normal((2, 3, 4, 5)).astype(dtype)
    for module in (maxpool, avgpool):
        y = module.forward2d(x, 2, 1)
        dx = module.vjp2d(x, g, 2, 1)
        assert y.shape == (2, 3, 4, 5) and dx.shape == x.shape
        for n, c in np.ndindex(2, 3):
            plane = np.ascontiguousarray(x[n, c])
            assert_same_values("y", y[n, c], module.forward2d(plane, 2, 1))
            assert_same_values("dx", dx[n, c], module.vjp2d(plane, g[n, c], 2, 1))
        assert_same_values("global", module.forward(x), module.forward(x.copy()))
    assert_same_values("x after the calls", big, before)


BAD = [
    (lambda m: m.forward2d(np.zeros((4, 4)), 0), ValueError, "kernel_size: expected integers >= 1"),
    (lambda m: m.forward2d(np.zeros((4, 4)), 2, stride=0), ValueError, "stride"),
    (lambda m: m.forward2d(np.zeros((4, 4)), 2, padding=-1), ValueError, "padding"),
    (lambda m: m.forward2d(np.zeros((4, 4)), 2, padding=2), ValueError, "at most half"),
    (lambda m: m.forward2d(np.zeros((4, 4)), (3, 2), padding=(1, 2)), ValueError, "at most half"),
    (lambda m: m.forward2d(np.zeros((4, 4)), 2.0), TypeError, "kernel_size"),
    (lambda m: m.forward2d(np.zeros((4, 4)), True), TypeError, "kernel_size"),
    (lambda m: m.forward2d(np.zeros((4, 4)), (2, 2, 2)), ValueError, "kernel_size"),
    (lambda m: m.forward2d(np.zeros((2, 2)), 3, padding=0), ValueError, "no window fits"),
    (lambda m: m.forward2d(np.zeros(4), 2), ValueError, "x: expected shape"),
    (lambda m: m.forward2d(np.zeros((4, 4), np.int32), 2), TypeError, "x: expected a float16"),
    (lambda m: m.vjp2d(np.zeros((4, 4)), np.zeros((3, 3)), 2), ValueError, "g: expected shape"),
    (lambda m: m.vjp2d(np.zeros((4, 4)), np.zeros((2, 2), np.float32), 2), TypeError, "g: exp"),
    (lambda m: m.forward2d(np.zeros((4, 4)), 2, strict_fp16=True), ValueError, "strict_fp16"),
    (lambda m: m.jacobian2d(np.zeros((1, 1, 4, 4)), 2), ValueError, "one sample"),
    (lambda m: m.forward(np.zeros((3, 0))), ValueError, "D >= 1"),
    (lambda m: m.forward(np.float32(1.0)), ValueError, "0-d"),
    (lambda m: m.vjp(np.zeros((2, 3)), np.zeros(3)), ValueError, "g: expected shape"),
    (lambda m: m.vjp(np.zeros(3), np.zeros((), np.float16)), TypeError, "g: expected dtype"),
    (lambda m: m.jacobian(np.zeros((2, 3))), ValueError, "one sample"),
    (lambda m: m.forward(np.zeros(3, np.complex64)), TypeError, "x: expected a float16"),
]


@pytest.mark.parametrize("module", [maxpool, avgpool], ids=["maxpool", "avgpool"])
@pytest.mark.parametrize(("bad", "error", "match"), BAD)
def test_bad_input_names_the_argument(module, bad, error, match):
    with pytest.raises(error, match=match):
        bad(module)


def test_lipschitz2d_checks_its_arguments():
    with pytest.raises(ValueError, match="input_hw"):
        maxpool.lipschitz2d((0, 4), 2)
    with pytest.raises(ValueError, match="at most half"):
        maxpool.lipschitz2d((4, 4), 2, padding=2)


ZERO_WINDOWS = [
    (lambda m: m.forward2d(np.zeros((4, 4)), (0, 0)), "kernel_size: expected integers >= 1"),
    (lambda m: m.vjp2d(np.zeros((4, 4)), np.zeros((4, 4)), 0), "kernel_size: expected integ"),
    (lambda m: m.jacobian2d(np.zeros((1, 4, 4)), (2, 0)), "kernel_size: expected integers"),
    (lambda m: m.forward2d(np.zeros((0, 4)), 2, padding=1), "x: expected planes of at least"),
    (lambda m: m.forward2d(np.zeros((3, 4, 0)), 2, padding=1), "x: expected planes of at "),
    (lambda m: m.vjp2d(np.zeros((0, 0)), np.zeros((1, 1)), 2, 2, 1), "x: expected planes of"),
    (lambda m: m.forward2d(np.zeros((4, 4)), 2, stride=2**70), "stride: expected integers <="),
    (lambda m: m.forward2d(np.zeros((4, 4)), 2**70), "kernel_size: expected integers <="),
]


@pytest.mark.parametrize("module", [maxpool, avgpool], ids=["maxpool", "avgpool"])
@pytest.mark.parametrize(("bad", "match"), ZERO_WINDOWS)
def test_zero_size_windows_and_planes_are_value_errors_naming_the_argument(module, bad, match):
    """Zero-size windows and planes (an empty plane padded to fit a window: every window
    then holds no pixel) must be a ValueError naming the argument, never a reshape error
    or a window without an argmax; a stride beyond int64 must not overflow in the loops."""
    with pytest.raises(ValueError, match=f"^{match}"):
        bad(module)


@pytest.mark.parametrize("bad", ["no", 1, None])
@pytest.mark.parametrize("module", [maxpool, avgpool], ids=["maxpool", "avgpool"])
def test_strict_fp16_of_another_kind_is_a_type_error(module, bad):
    x = np.ones((1, 4, 4), np.float16)
    calls = [
        lambda: module.forward(x, strict_fp16=bad),
        lambda: module.vjp(x, np.ones((1, 4), np.float16), strict_fp16=bad),
        lambda: module.jacobian(x[0, 0], strict_fp16=bad),
        lambda: module.forward2d(x, 2, strict_fp16=bad),
        lambda: module.vjp2d(x, np.ones((1, 2, 2), np.float16), 2, strict_fp16=bad),
        lambda: module.jacobian2d(x, 2, strict_fp16=bad),
    ]
    for call in calls:
        with pytest.raises(TypeError, match=r"^strict_fp16: expected True or False"):
            call()


def test_strict_average_of_more_than_65519_values_divides_by_inf_without_a_warning():
    """Strict mode divides by the half D: D = 70000 rounds to inf (as half arithmetic
    gives), which used to escape as NumPy's overflow RuntimeWarning in vjp and jacobian."""
    x = np.ones(70000, np.float16)
    dx = avgpool.vjp(x, np.array(1.0, np.float16), strict_fp16=True)
    assert not dx.any() and dx.dtype == np.float16
    assert not avgpool.jacobian(x, strict_fp16=True).any()
