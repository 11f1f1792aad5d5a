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
* ``strict_fp16=True``: a left-to-right sum of n terms in the strict format errs by at most
  ``gamma_{n-1} A + (n-1) s`` (``gamma_k = k u_s / (1 - k u_s)``; each partial sum is
  rounded once, ``s`` covering subnormal results): half has ``u_s = u_h = 2^-11`` and
  ``s = 2^-25``, bfloat16 ``u_s = 2^-8`` and ``s = 2^-134``; the final division by the exact
  ``D`` (``D <= 2048`` in half, ``<= 256`` in bfloat16) rounds once more; ``avg.vjp2d`` first
  rounds each share ``g / (kh kw)``. The drawn values keep every partial sum below 65504
  (strict overflow has its own test). bfloat16 values are handed to the references as
  float32 (exact). Strict bfloat16 is also compared bit for bit with an emulation in
  ``ml_dtypes.bfloat16`` scalar arithmetic (each operation computed in float32 and rounded
  once to bfloat16: the correctly rounded bfloat16 operation, as 24 >= 2 * 8 + 2).
"""

from __future__ import annotations

import itertools
import math
import warnings

import ml_dtypes
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
BF16 = np.dtype(ml_dtypes.bfloat16)
MODES = [(dtype, False) for dtype in DTYPES] + [(HALF, True), (BF16, True)]
MODE_IDS = ["float64", "float32", "float16", "float16-strict", "bfloat16-strict"]

BOUND_DPS = 30
UNIT = mpmath.mpf(2) ** -53
UNIT_HALF = mpmath.mpf(2) ** -11
HALF_SUBNORMAL_ROUNDING = mpmath.mpf(2) ** -25
#: Strict arithmetic per format: unit roundoff and half the smallest subnormal.
STRICT_UNIT = {HALF: UNIT_HALF, BF16: mpmath.mpf(2) ** -8}
STRICT_SUBNORMAL_ROUNDING = {HALF: HALF_SUBNORMAL_ROUNDING, BF16: mpmath.mpf(2) ** -134}
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


def gamma_strict(k: int, dtype: np.dtype) -> mpmath.mpf:
    unit = STRICT_UNIT[dtype]
    return k * unit / (1 - k * unit)


def exact_input(array: np.ndarray) -> np.ndarray:
    """``array`` for the references: bfloat16 as float32 (exact), others as they are."""
    return array.astype(np.float32) if array.dtype == BF16 else array


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
                n, unit, tiny = terms, STRICT_UNIT[dtype], STRICT_SUBNORMAL_ROUNDING[dtype]
                share = unit * a + n * tiny if shares else 0
                bound = share + gamma_strict(n - 1, dtype) * (a + share) + n * tiny
                if divided:
                    bound += unit * (abs(value) + bound) + tiny
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

#: Widths of the drawn floats (bfloat16: float32 draws, rounded when the array is made).
_WIDTH = {np.dtype(np.float64): 64, np.dtype(np.float32): 32, HALF: 16, BF16: 32}
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
@example(case=("bfloat16", True, [[4096.0, 1.0, 3.0, 255.0, 1.0, 1.0, 1.0, -2.5]], [3.0]))
@example(case=("float32", False, [[0.0, -0.0], [2.0**-24, 2.0**-24]], [7.0, 3.0]))
@given(case=global_cases())
def test_global_pooling_matches_reference(case):
    name, strict, x, g = case
    dtype = np.dtype(name)
    x, g = np.array(x, dtype), np.array(g, dtype)
    xr, gr = exact_input(x), exact_input(g)
    check_equal(
        "maxpool.forward",
        maxpool.forward(x, strict_fp16=strict),
        reference.maxpool_forward(xr),
        dtype,
    )
    check_equal(
        "maxpool.vjp", maxpool.vjp(x, g, strict_fp16=strict), reference.maxpool_vjp(xr, gr), dtype
    )
    check_equal(
        "avgpool.vjp", avgpool.vjp(x, g, strict_fp16=strict), reference.avgpool_vjp(xr, gr), dtype
    )
    y = call(avgpool.forward, x, strict_fp16=strict)
    exact = reference.avgpool_forward(xr)
    magnitude = reference.avgpool_forward(np.abs(xr))
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


def test_strict_bfloat16_sums_stall_at_256():
    """bfloat16 has 8 significant bits: between 256 and 512 its spacing is 2, so
    ``256 + 1 = 257`` is the tie between 256 and 258 and rounds to the even significand,
    256 (128 * 2, not 129 * 2): a running sum of ones stops at 256 (half's at 2048, past the
    counts here, so strict float16 is exact).

    * ``avgpool.forward`` of 300 ones: the sum is 256; ``D = 300 = 75 * 4`` is a bfloat16;
      ``256 / 300 = 0.85333...`` lies between ``218 * 2^-8`` and ``219 * 2^-8`` (spacing
      2^-8 in [0.5, 1)), nearer 218 (``0.85333 * 256 = 218.45``): 0.8515625. Of 257 ones,
      the sum is again 256, and ``D = 257`` is itself a tie that rounds to 256: the mean is
      exactly 1 (dividing by the exact 257 would give ``bf(256/257) = 255 * 2^-8``).
    * ``avgpool.forward2d`` of a 17 x 17 window of ones: the sum is 256; ``kh kw = 289`` is
      the tie between 288 and 290 and rounds to 288 (144 * 2); ``256 / 288 = 0.8888...`` is
      ``227.56 * 2^-8``: 228 * 2^-8 = 0.890625.
    * ``maxpool.vjp2d``: a single 1 in a 33 x 33 plane of zeros is the maximum of all
      17 * 17 = 289 windows of a 17 x 17 kernel at stride 1; with ``g = 1`` it gets the sum
      of 289 ones, 256. ``avgpool.vjp2d`` gives the centre pixel, in all 289 windows, 289
      shares ``bf(1 / bf(289)) = bf(1 / 288)``: ``1/288 = 227.56 * 2^-16`` (spacing 2^-16 in
      [2^-9, 2^-8)), so 228 * 2^-16 = 0.003479. In [0.5, 1) the spacing is 2^-9 and each
      ``sum + 1.78 * 2^-9`` rounds up to ``sum + 2^-8``: the running sum reaches 1 at the
      261st share (as iterating ``s = s + share`` in ml_dtypes shows); in [1, 2) the spacing
      is 2^-7 and the share is below half of it, so the sum stays 1 (exact: 289/288 =
      1.0035).
    """
    ones = np.ones(300, BF16)
    assert_same_values("avg of 300 ones", avgpool.forward(ones, strict_fp16=True), 0.8515625)
    assert avgpool.forward(ones.astype(HALF), strict_fp16=True) == 1.0
    assert_same_values("avg of 257 ones", avgpool.forward(ones[:257], strict_fp16=True), 1.0)
    window = np.ones((1, 17, 17), BF16)
    y = avgpool.forward2d(window, 17, strict_fp16=True)
    assert y.dtype == BF16
    assert_same_values("mean of 17 x 17 ones", y, np.full((1, 1, 1), 0.890625))
    assert avgpool.forward2d(window.astype(HALF), 17, strict_fp16=True)[0, 0, 0] == 1.0
    spike = np.zeros((1, 33, 33), BF16)
    spike[0, 16, 16] = 1.0
    g = np.ones((1, 17, 17), BF16)
    dx = maxpool.vjp2d(spike, g, 17, 1, strict_fp16=True)
    assert dx[0, 16, 16] == 256.0 and np.count_nonzero(dx.astype(np.float64)) == 1
    half = maxpool.vjp2d(spike.astype(HALF), g.astype(HALF), 17, 1, strict_fp16=True)
    assert half[0, 16, 16] == 289.0
    assert avgpool.vjp2d(spike, g, 17, 1, strict_fp16=True)[0, 16, 16] == 1.0


def _bf(value) -> ml_dtypes.bfloat16:
    return ml_dtypes.bfloat16(value)


def _window(plane: np.ndarray, h0: int, w0: int, kh: int, kw: int) -> list[tuple[int, int]]:
    """The in-plane pixels of a window, row-major (padding is not a pixel)."""
    height, width = plane.shape
    rows = range(max(h0, 0), min(h0 + kh, height))
    return [(i, j) for i in rows for j in range(max(w0, 0), min(w0 + kw, width))]


def _argmax(plane: np.ndarray, pixels: list[tuple[int, int]]) -> tuple[int, int]:
    """PyTorch CPU's scan (the module docstring of kernels.maxpool): first maximum, last NaN."""
    best, where = -math.inf, pixels[0]
    for pixel in pixels:
        v = float(plane[pixel])
        if v > best or math.isnan(v):
            best, where = v, pixel
    return where


def emulate_pooling(x: np.ndarray, g: np.ndarray, gw: np.ndarray, geometry) -> dict:
    """Strict bfloat16 pooling in ml_dtypes scalar arithmetic, in the order documented in
    kernels/avgpool.py and kernels/maxpool.py: sums from +0 left to right (row-major in a
    window; window order, row-major over the output, for the vjp2d scatters), divided by the
    rounded count; the global ``g / k`` one rounding. ``x`` is (P, H, W), ``g`` (P,) for the
    global kernels (over the rows ``x.reshape(P, -1)``), ``gw`` (P, Ho, Wo)."""
    (kh, kw), (sh, sw), (ph, pw) = geometry
    planes, height, width = x.shape
    out_h, out_w = gw.shape[1:]
    rows = x.reshape(planes, -1)
    size = rows.shape[1]
    result = {name: [] for name in ("avg", "avg_vjp", "max_vjp", "avg2d", "avg_vjp2d", "max_vjp2d")}
    for p in range(planes):
        total = _bf(0.0)
        for v in rows[p]:
            total = total + v
        result["avg"].append(total / _bf(size))
        result["avg_vjp"].append([g[p] / _bf(size)] * size)
        finite = not any(math.isnan(float(v)) for v in rows[p])
        top = max(float(v) for v in rows[p]) if finite else math.nan
        k = sum(float(v) == top for v in rows[p])
        result["max_vjp"].append(
            [g[p] / _bf(k) if float(v) == top else _bf(0.0) * g[p] for v in rows[p]]
            if finite
            else [_bf(math.nan)] * size
        )
        means = np.empty((out_h, out_w), BF16)
        shares = np.full((height, width), _bf(0.0), BF16)
        routed = np.full((height, width), _bf(0.0), BF16)
        for oh in range(out_h):
            for ow in range(out_w):
                pixels = _window(x[p], oh * sh - ph, ow * sw - pw, kh, kw)
                acc = _bf(0.0)
                for pixel in pixels:
                    acc = acc + x[p][pixel]
                means[oh, ow] = acc / _bf(kh * kw)
                share = gw[p, oh, ow] / _bf(kh * kw)
                for pixel in pixels:
                    shares[pixel] = shares[pixel] + share
                where = _argmax(x[p], pixels)
                routed[where] = routed[where] + gw[p, oh, ow]
        result["avg2d"].append(means)
        result["avg_vjp2d"].append(shares)
        result["max_vjp2d"].append(routed)
    return {name: np.array(value, BF16) for name, value in result.items()}


EMULATED_GEOMETRIES = [((2, 2), (1, 1), (0, 0)), ((3, 2), (2, 1), (1, 1)), ((3, 3), (2, 3), (1, 0))]


@pytest.mark.parametrize("geometry", EMULATED_GEOMETRIES, ids=str)
@pytest.mark.parametrize("seed", range(3))
def test_strict_bfloat16_matches_an_ml_dtypes_emulation(geometry, seed):
    """Every strict bfloat16 pooling kernel bit for bit against :func:`emulate_pooling` on
    small random planes (values of several binades, so that the sums round; small integers
    for ties of the maxima)."""
    rng = np.random.default_rng(seed)
    shape = (3, 5, 6)
    x = (rng.standard_normal(shape) * 2.0 ** rng.integers(-3, 8, shape)).astype(BF16)
    x[0] = rng.integers(-2, 3, shape[1:])  # ties
    x[1, 0, 0] = np.nan if seed == 1 else x[1, 0, 0]
    kernel, stride, padding = geometry
    out = (shape[1] + 2 * padding[0] - kernel[0]) // stride[0] + 1
    out_w = (shape[2] + 2 * padding[1] - kernel[1]) // stride[1] + 1
    g = (rng.standard_normal(3) * 64).astype(BF16)
    gw = (rng.standard_normal((3, out, out_w)) * 64).astype(BF16)
    expected = emulate_pooling(x, g, gw, geometry)
    rows = x.reshape(3, -1)
    got = {
        "avg": avgpool.forward(rows, strict_fp16=True),
        "avg_vjp": avgpool.vjp(rows, g, strict_fp16=True),
        "max_vjp": maxpool.vjp(rows, g, strict_fp16=True),
        "avg2d": avgpool.forward2d(x, *geometry, strict_fp16=True),
        "avg_vjp2d": avgpool.vjp2d(x, gw, *geometry, strict_fp16=True),
        "max_vjp2d": maxpool.vjp2d(x, gw, *geometry, strict_fp16=True),
    }
    for name, value in got.items():
        assert value.dtype == BF16, name
        assert_same_bits(name, value, expected[name])
    mixed = avgpool.forward2d(x.astype(np.float64), *geometry).astype(BF16)
    assert np.any(got["avg2d"] != mixed)  # the rounded steps differ somewhere
    weight = _bf(1.0) / _bf(rows.shape[1])
    assert_same_bits("avg J", avgpool.jacobian(rows[0], strict_fp16=True), np.full((1, 30), weight))


def assert_same_bits(what: str, actual: np.ndarray, expected: np.ndarray) -> None:
    """Equal bfloat16 bit patterns (any NaN equals any NaN), naming the first difference."""
    assert actual.shape == expected.shape, (what, actual.shape, expected.shape)
    a, e = actual.view(np.uint16), expected.view(np.uint16)
    nan = np.isnan(actual.astype(np.float32)) & np.isnan(expected.astype(np.float32))
    if not np.all((a == e) | nan):
        index = tuple(int(i) for i in np.argwhere((a != e) & ~nan)[0])
        raise AssertionError(
            f"{what} at index {index}: got {actual[index]!r}, expected {expected[index]!r}"
        )


def test_strict_bfloat16_results_are_bfloat16_and_other_dtypes_are_refused():
    """Strict bfloat16 gives bfloat16 arrays of the documented shapes; a ``g`` of another
    dtype is a TypeError naming it; a bfloat16 ``x`` reaching a kernel's own (undecorated)
    code in mixed mode is a TypeError (the decorator sends mixed bfloat16 to ``widened``)."""
    x = np.arange(2 * 3 * 4 * 5, dtype=np.float32).reshape(2, 3, 4, 5).astype(BF16)
    strict = {"strict_fp16": True}
    for module in (maxpool, avgpool):
        shapes = [
            (module.forward(x, **strict), (2, 3, 4)),
            (module.vjp(x, np.ones((2, 3, 4), BF16), **strict), x.shape),
            (module.jacobian(x[0, 0, 0], **strict), (1, 5)),
            (module.forward2d(x, 2, 1, **strict), (2, 3, 3, 4)),
            (module.vjp2d(x, np.ones((2, 3, 3, 4), BF16), 2, 1, **strict), x.shape),
            (module.jacobian2d(x[0], 2, **strict), (3 * 2 * 2, 3 * 4 * 5)),
        ]
        for result, shape in shapes:
            assert result.dtype == BF16 and result.shape == shape, (module, result.dtype, shape)
        for other in (np.float16, np.float32):
            with pytest.raises(TypeError, match=r"^g: expected dtype bfloat16"):
                module.vjp(x, np.ones((2, 3, 4), other), **strict)
            with pytest.raises(TypeError, match=r"^g: expected dtype bfloat16"):
                module.vjp2d(x, np.ones((2, 3, 3, 4), other), 2, 1, **strict)
        with pytest.raises(TypeError, match=r"^x: bfloat16 reaches this path in strict mode"):
            module.forward2d.__wrapped__(x, 2)
        with pytest.raises(TypeError, match=r"^x: bfloat16 reaches this path in strict mode"):
            module.forward.__wrapped__(x)


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
        "bfloat16",
        True,
        [[255.0, 1.0, 1.0], [1.0, 3.0, 1.0], [1.0, 1.0, 1.0]],
        [[1.0, 257.0], [3.0, 1.0]],
        (2, 1, 0),
    )
)
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
    xr, gr = exact_input(x), exact_input(g)
    args = (kernel, stride, padding)
    kh, kw = (kernel, kernel) if isinstance(kernel, int) else kernel
    # max: exact forward; vjp2d sums the g of the windows sharing an argmax
    y = maxpool.forward2d(x, *args, strict_fp16=strict)
    check_equal("maxpool.forward2d", y, reference.maxpool_forward2d(xr, *args), dtype)
    dx = call(maxpool.vjp2d, x, g, *args, strict_fp16=strict)
    exact = reference.maxpool_vjp2d(xr, gr, *args)
    magnitude = reference.maxpool_vjp2d(xr, np.abs(gr), *args)
    terms = int(window_counts(x.shape[-2], x.shape[-1], *args).max())
    check_sum("maxpool.vjp2d", dx, exact, magnitude, terms, dtype, strict)
    # avg: window sums over kh kw; vjp2d sums g / (kh kw) over the windows of a pixel
    y = call(avgpool.forward2d, x, *args, strict_fp16=strict)
    exact = reference.avgpool_forward2d(xr, *args)
    magnitude = reference.avgpool_forward2d(np.abs(xr), *args)
    check_sum("avgpool.forward2d", y, exact, magnitude, kh * kw, dtype, strict, divided=True)
    dx = call(avgpool.vjp2d, x, g, *args, strict_fp16=strict)
    exact = reference.avgpool_vjp2d(xr, gr, *args)
    magnitude = reference.avgpool_vjp2d(xr, np.abs(gr), *args)
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
    (lambda m: m.forward2d(np.zeros((4, 4), np.int32), 2), TypeError, "x: expected a bfloat16"),
    (lambda m: m.vjp2d(np.zeros((4, 4)), np.zeros((3, 3)), 2), ValueError, "g: expected shape"),
    (lambda m: m.vjp2d(np.zeros((4, 4)), np.zeros((2, 2), np.float32), 2), TypeError, "g: exp"),
    (lambda m: m.forward2d(np.zeros((4, 4)), 2, strict_fp16=True), ValueError, "strict_fp16"),
    (lambda m: m.jacobian2d(np.zeros((1, 1, 4, 4)), 2), ValueError, "one sample"),
    (lambda m: m.forward(np.zeros((3, 0))), ValueError, "D >= 1"),
    (lambda m: m.forward(np.float32(1.0)), ValueError, "0-d"),
    (lambda m: m.vjp(np.zeros((2, 3)), np.zeros(3)), ValueError, "g: expected shape"),
    (lambda m: m.vjp(np.zeros(3), np.zeros((), np.float16)), TypeError, "g: expected dtype"),
    (lambda m: m.jacobian(np.zeros((2, 3))), ValueError, "one sample"),
    (lambda m: m.forward(np.zeros(3, np.complex64)), TypeError, "x: expected a bfloat16, float16"),
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
