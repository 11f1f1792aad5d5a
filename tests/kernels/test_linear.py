"""Linear (``kernels.linear``) against the mpmath references, in float64, float32, float16.

Reference: ``derive/reference/linear.py`` (mpmath at 50 digits, inputs taken exactly; the
VJP by explicit index sums of the chain rule). float16 is tested in "mixed" mode against
the references and in ``strict_fp16`` mode bit for bit against a sequential half-precision
evaluation written here with NumPy float16 scalars; strict bfloat16 likewise against one in
``ml_dtypes.bfloat16`` scalars (each operation computed in float32 and rounded once: the
correctly rounded bfloat16 operation, 24 >= 2 * 8 + 2).

The error bound, derived
------------------------
Every output is a sum of ``n`` terms ``t_k`` (products of two inputs, and the bias or an
upstream gradient alone); let ``S = sum_k |t_k|``, ``u = 2^-53`` and
``gamma_n = n u / (1 - n u)``. The kernels evaluate the sum in float64 (BLAS, or NumPy's
reduction), in any order and possibly with fused multiply-adds: each term passes through
at most one product rounding and ``n - 1`` additions, so the float64 value ``v`` satisfies
``|v - exact| <= gamma_n S`` (Higham, Accuracy and Stability, 2nd ed., Eq. 3.5; for float32
and float16 inputs the products are even exact, since two 24-bit or 11-bit significands
need at most 48 bits). float64 input returns ``v``. float32 and float16 input return ``v``
rounded once to nearest; rounding is monotone, so

    round(exact - gamma_n S)  <=  result  <=  round(exact + gamma_n S)      (*)

with ``round`` the correct rounding to the output dtype. (*) is what ``assert_within``
checks, for every dtype (for float64 it is implied by the float64 bound, as ``v`` is a
float64 lying in that interval). It implies ``|result - exact| <= gamma_n S + ulp(exact)``
(half an ULP of rounding, doubled at most where the interval straddles a power of two),
i.e. the ``0.5 ulp + n 2^-53 S`` of the brief up to that binade edge, and it says exactly
when an overflow is allowed: a float16 result is inf only if the exact value plus or minus
``gamma_n S`` rounds to inf, so inf exactly when the exact result rounds to inf except
within ~1e-15 relative of the threshold 65520 (pinned examples below sit on it exactly,
with float64-exact sums, and must come out exactly). ``S`` is computed by the reference
itself from the absolute values of the inputs (every term's magnitude is the product of
its factors' magnitudes), at 50 digits.

Term counts ``n``: ``y`` has ``D`` terms plus one with a bias; ``dx`` has ``O``; ``dW`` and
``db`` one per row of the flattened batch (``M``). The Jacobian is ``W``, compared exactly.

Domain: float64 values are 0 or within ``[1e-30, 1e30]`` in magnitude, so no product
underflows or overflows in float64 (the bound above has no underflow term); float32 and
float16 values are any finite number of their format (their float64 products cannot
underflow or overflow). Non-finite inputs have their own tests.

Measured (random cases, magnitudes over 6 to 10 decades, 800 per dtype for Linear and 150
for Conv2d, every output of forward and VJP): float64 errors reach 0.98 of ``gamma_n S``
-- at outputs of a single product, where one rounding can cost almost ``u |t|``, so the
bound is tight -- and up to 673 ULPs of the result where the terms cancel (plain BLAS
sums are not compensated); float32 and float16 results are at most 0.500 ULP from the
exact value, i.e. correctly rounded or, at a near-tie, the other neighbour.
"""

from __future__ import annotations

import warnings

import ml_dtypes
import mpmath
import numpy as np
import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

import kernels.linear as linear
from derive.reference import linear as reference_linear
from derive.reference.core import round_to_dtype
from tests.helpers.norms import assert_same_values

DTYPES = (np.dtype(np.float64), np.dtype(np.float32), np.dtype(np.float16))
DTYPE_IDS = [dtype.name for dtype in DTYPES]
HALF = np.dtype(np.float16)
BF16 = np.dtype(ml_dtypes.bfloat16)
#: Every dtype in its default mode, and float16 and bfloat16 also in strict mode.
DTYPE_MODES = (*((dtype, False) for dtype in DTYPES), (HALF, True), (BF16, True))
DTYPE_MODE_IDS = ("float64", "float32", "float16", "float16-strict", "bfloat16-strict")

#: The unit roundoff of the float64 arithmetic every path computes in.
UNIT = mpmath.mpf(2) ** -53
#: Digits of the bound arithmetic (exact +- gamma_n S): those of the references.
BOUND_DPS = reference_linear.DEFAULT_DPS
#: float64 values are 0 or drawn within these magnitudes (see the module docstring).
SMALLEST_FLOAT64, LARGEST_FLOAT64 = 1e-30, 1e30
#: Values every dtype must get right, mixed into the drawn ones: float16's edges (65504,
#: the next float below it, 65472; the smallest subnormal 2^-24 and normal 2^-14), |x| =
#: 256 (whose square is 65536 = inf in half), 300 (300^2 = 90000 overflows half).
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
    256.0,
    -256.0,
    300.0,
    60000.0,
    65472.0,
    65504.0,
    -65504.0,
)
#: Shapes drawn: batch shapes of x, features D, outputs O.
BATCH_SHAPES = ((), (1,), (3,), (2, 2))
MAX_FEATURES, MAX_OUTPUTS = 6, 4
#: Examples per reference property (mpmath is slow; the file must run in well under 60 s).
EXAMPLES = 100


# --------------------------------------------------------------------------------------
# Checking against the exact values (shared with tests/kernels/test_conv2d.py)
# --------------------------------------------------------------------------------------


def gamma(n: int) -> mpmath.mpf:
    """``gamma_n = n u / (1 - n u)``: the float64 error factor of an n-term sum."""
    return n * UNIT / (1 - n * UNIT)


def assert_within(
    what: str,
    actual: np.ndarray,
    exact: np.ndarray,
    scale: np.ndarray,
    terms: int | np.ndarray,
    dtype: np.dtype,
) -> None:
    """Check (*) of the module docstring for every element; NaN exactly where exact is NaN."""
    dtype = np.dtype(dtype)
    assert actual.dtype == dtype, f"{what}: dtype {actual.dtype}, expected {dtype}"
    assert actual.shape == exact.shape, f"{what}: shape {actual.shape}, expected {exact.shape}"
    counts = np.broadcast_to(np.asarray(terms), exact.shape)
    with mpmath.workdps(BOUND_DPS):
        for index in np.ndindex(exact.shape):
            value, expected = actual[index], exact[index]
            where = f"{what} [{dtype}] at index {index}: got {value!r}, expected "
            if mpmath.isnan(expected):
                assert np.isnan(value), where + "nan"
                continue
            assert not np.isnan(value), where + mpmath.nstr(expected, 20)
            if mpmath.isinf(expected):
                assert value == expected, where + str(expected)
                continue
            error = gamma(int(counts[index])) * scale[index]
            low = round_to_dtype(expected - error, dtype)
            high = round_to_dtype(expected + error, dtype)
            assert low <= value <= high, (
                f"{where}{mpmath.nstr(expected, 20)} (correctly rounded "
                f"{round_to_dtype(expected, dtype)!r}; within gamma_{counts[index]} S = "
                f"{mpmath.nstr(error, 4)} it rounds to [{low!r}, {high!r}])"
            )


def h(value: float) -> float:
    """``value`` rounded to half precision by NumPy (float64 -> float16 directly, ties to
    even), back as a float. Sums and products of two halves are exact in float64, so
    ``h(a + b)`` and ``h(a * b)`` are correctly rounded half operations."""
    with np.errstate(over="ignore"):
        return float(np.float16(value))


def half_sum(terms: list[float]) -> float:
    """``h(...h(h(0 + t_0) + t_1)...)``: a sequential half-precision sum from +0."""
    acc = 0.0
    for term in terms:
        acc = h(acc + term)
    return acc


def assert_same_halves(what: str, actual: np.ndarray, expected: np.ndarray) -> None:
    """Equal values with equal signs of zero (NaN equals NaN), naming the first difference."""
    assert_same_values(what, actual, expected)
    signs = np.signbit(actual) == np.signbit(expected)
    zero = (actual == 0) & (expected == 0)
    if not np.all(signs | ~zero):
        index = tuple(int(i) for i in np.argwhere(zero & ~signs)[0])
        raise AssertionError(
            f"{what} at index {index}: got {actual[index]!r}, expected {expected[index]!r}"
        )


def values(dtype: np.dtype) -> st.SearchStrategy[float]:
    """Finite values of ``dtype`` (float64: 0 or within the drawn magnitudes)."""
    dtype = np.dtype(dtype)
    if dtype == np.float64:
        magnitude = st.floats(SMALLEST_FLOAT64, LARGEST_FLOAT64)
        drawn = st.one_of(st.just(0.0), magnitude, magnitude.map(lambda v: -v))
    elif dtype == np.float32:
        drawn = st.floats(width=32, allow_nan=False, allow_infinity=False)
    else:  # every finite half, from its bits (0x7BFF is 65504)
        drawn = st.builds(_half_from_bits, st.integers(0, 0x7BFF), st.booleans())
    return st.one_of(drawn, st.sampled_from(SPECIAL_VALUES))


def _half_from_bits(magnitude: int, negative: bool) -> float:
    value = float(np.array(magnitude, np.uint16).view(HALF))
    return -value if negative else value


def arrays(dtype: np.dtype, shape: tuple[int, ...]) -> st.SearchStrategy[np.ndarray]:
    return hnp.arrays(dtype, shape, elements=values(dtype))


def absolute(value: np.ndarray | None) -> np.ndarray | None:
    return None if value is None else np.abs(value)


# --------------------------------------------------------------------------------------
# Drawn cases
# --------------------------------------------------------------------------------------


@st.composite
def cases(draw: st.DrawFn, dtype: np.dtype) -> tuple[np.ndarray, ...]:
    """(x, g, W, b) with x (..., D), g (..., O), W (O, D), b (O,) or None."""
    batch = draw(st.sampled_from(BATCH_SHAPES))
    features = draw(st.integers(1, MAX_FEATURES))
    outputs = draw(st.integers(1, MAX_OUTPUTS))
    x = draw(arrays(dtype, (*batch, features)))
    g = draw(arrays(dtype, (*batch, outputs)))
    W = draw(arrays(dtype, (outputs, features)))
    b = draw(st.one_of(st.none(), arrays(dtype, (outputs,))))
    return x, g, W, b


def _case(dtype, x, g, W, b):
    """An @example case of the given dtype."""
    as_array = lambda v: None if v is None else np.array(v, dtype)  # noqa: E731
    return (as_array(x), as_array(g), as_array(W), as_array(b))


def _examples(dtype: np.dtype):
    """Pinned cases: float16's overflow boundary, huge cancelling terms, products past
    65504 with a small result, b = None, a batch of one row."""
    return [
        example(case=_case(dtype, [[65504.0, 16.0]], [[1.0]], [[1.0, 1.0]], None)),
        example(case=_case(dtype, [[65504.0, 15.9921875]], [[1.0]], [[1.0, 1.0]], [0.0])),
        example(case=_case(dtype, [65504.0, 65504.0], [65504.0], [[1.0, -1.0]], [1.0])),
        example(case=_case(dtype, [300.0, 1.0], [2.0], [[300.0, -30000.0]], None)),
        example(case=_case(dtype, [[256.0], [-256.0]], [[256.0], [256.0]], [[256.0]], [0.5])),
    ]


def _with_examples(dtype: np.dtype):
    def decorate(test):
        for pinned in _examples(dtype):
            test = pinned(test)
        return test

    return decorate


def _forward_check(dtype: np.dtype, case) -> None:
    x, _, W, b = case
    y = linear.forward(x, W, b)
    exact = reference_linear.linear_forward(x, W, b)
    scale = reference_linear.linear_forward(np.abs(x), np.abs(W), absolute(b))
    terms = W.shape[1] + (b is not None)
    assert_within("linear.forward y", y, exact, scale, terms, dtype)


def _vjp_check(dtype: np.dtype, case) -> None:
    x, g, W, b = case
    dx, dW, db = linear.vjp(x, g, W, b)
    exact = reference_linear.linear_vjp(x, g, W, b)
    scales = reference_linear.linear_vjp(np.abs(x), np.abs(g), np.abs(W), absolute(b))
    rows = int(np.prod(x.shape[:-1]))
    assert_within("linear.vjp dx", dx, exact[0], scales[0], W.shape[0], dtype)
    assert_within("linear.vjp dW", dW, exact[1], scales[1], rows, dtype)
    if b is None:
        assert db is None, "linear.vjp: db must be None without a bias"
    else:
        assert_within("linear.vjp db", db, exact[2], scales[2], rows, dtype)


# One test function per dtype so that each can carry its own @example cases.
@settings(max_examples=EXAMPLES)
@given(case=cases(DTYPES[0]))
@_with_examples(DTYPES[0])
def test_float64_matches_reference(case):
    _forward_check(DTYPES[0], case)
    _vjp_check(DTYPES[0], case)


@settings(max_examples=EXAMPLES)
@given(case=cases(DTYPES[1]))
@_with_examples(DTYPES[1])
def test_float32_matches_reference(case):
    _forward_check(DTYPES[1], case)
    _vjp_check(DTYPES[1], case)


@settings(max_examples=EXAMPLES)
@given(case=cases(HALF))
@_with_examples(HALF)
def test_float16_mixed_matches_reference(case):
    _forward_check(HALF, case)
    _vjp_check(HALF, case)


@pytest.mark.parametrize("dtype", DTYPES, ids=DTYPE_IDS)
@settings(max_examples=EXAMPLES // 2)
@given(data=st.data())
def test_jacobian_is_W_exactly(dtype, data):
    x, _, W, b = data.draw(cases(dtype))
    sample = x.reshape(-1, x.shape[-1])[0]
    J = linear.jacobian(sample, W, b)
    exact = reference_linear.linear_jacobian(sample, W, b)
    assert J.dtype == dtype
    # mpmath has no signed zero: the reference is compared by value, W bit for bit.
    assert_same_values("linear.jacobian", J, exact.astype(np.float64).astype(dtype))
    assert_same_halves("linear.jacobian is W", J, W)
    if dtype == HALF:
        strict = linear.jacobian(sample, W, b, strict_fp16=True)
        assert_same_halves("linear.jacobian strict", strict, J)


# --------------------------------------------------------------------------------------
# float16: overflow exactly where the exact value overflows; strict half arithmetic
# --------------------------------------------------------------------------------------


OVERFLOW_CASES = [
    # x, W row, mixed result, strict result
    ([65504.0, 16.0], [1.0, 1.0], np.inf, np.inf),  # exact 65520: the tie rounds to inf
    ([65504.0, 15.9921875], [1.0, 1.0], 65504.0, 65504.0),  # exact 65519.99: finite
    ([-65504.0, -16.0], [1.0, 1.0], -np.inf, -np.inf),
    ([32768.0, 32768.0], [1.0, 1.0], np.inf, np.inf),  # exact 65536
    # the products overflow half, the exact result does not:
    ([300.0, 1.0], [300.0, -30000.0], 60000.0, np.inf),
    ([256.0, 256.0], [256.0, -256.0], 0.0, np.nan),  # inf - inf in strict
    # a partial sum overflows half, the exact result does not:
    ([65504.0, 65504.0, -65504.0], [1.0, 1.0, 1.0], 65504.0, np.inf),
    ([65504.0, 65504.0], [1.0, -1.0], 0.0, 0.0),  # huge terms cancel exactly
]


@pytest.mark.parametrize(("x", "w", "mixed", "strict"), OVERFLOW_CASES)
def test_float16_overflows_exactly_when_the_exact_result_rounds_to_inf(x, w, mixed, strict):
    xh, Wh = np.array(x, HALF), np.array([w], HALF)
    exact = reference_linear.linear_forward(xh, Wh)[0]
    assert_same_values("correctly rounded exact y", round_to_dtype(exact, HALF), mixed)
    assert_same_halves("mixed y", linear.forward(xh, Wh), np.array([mixed], HALF))
    assert_same_halves(
        "strict y", linear.forward(xh, Wh, strict_fp16=True), np.array([strict], HALF)
    )
    if all(v == 1.0 for v in w):
        # The same sums as dW and db: D rows of x = 1, with upstream gradients g = x.
        g = xh[:, np.newaxis]
        ones = np.ones((len(x), 1), HALF)
        for mode, expected in (({}, mixed), ({"strict_fp16": True}, strict)):
            _, dW, db = linear.vjp(ones, g, np.ones((1, 1), HALF), np.zeros(1, HALF), **mode)
            assert_same_halves(f"dW {mode}", dW, np.array([[expected]], HALF))
            assert_same_halves(f"db {mode}", db, np.array([expected], HALF))


def strict_reference(x, g, W, b):
    """Half-precision linear, every product and partial sum rounded, in the kernel's order:
    y over k ascending then + b; dx over i ascending; dW and db over rows ascending."""
    rows = x.reshape(-1, x.shape[-1]).astype(np.float64)
    grows = g.reshape(-1, W.shape[0]).astype(np.float64)
    w = W.astype(np.float64)
    outputs, features = w.shape
    y = np.empty((len(rows), outputs))
    dx = np.empty(rows.shape)
    for m in range(len(rows)):
        for i in range(outputs):
            y[m, i] = half_sum([h(rows[m, k] * w[i, k]) for k in range(features)])
            if b is not None:
                y[m, i] = h(y[m, i] + float(b[i]))
        for k in range(features):
            dx[m, k] = half_sum([h(grows[m, i] * w[i, k]) for i in range(outputs)])
    dW = np.array(
        [
            [
                half_sum([h(grows[m, i] * rows[m, k]) for m in range(len(rows))])
                for k in range(features)
            ]
            for i in range(outputs)
        ]
    ).reshape(w.shape)
    db = None if b is None else np.array([half_sum(list(grows[:, i])) for i in range(outputs)])
    shape = (*x.shape[:-1], outputs)
    as_half = lambda v: None if v is None else v.astype(HALF)  # noqa: E731
    return as_half(y.reshape(shape)), as_half(dx.reshape(x.shape)), as_half(dW), as_half(db)


#: Magnitudes of the strict-mode draws: large enough that products and sums overflow half.
STRICT_VALUES = st.one_of(
    st.floats(width=16, min_value=-400.0, max_value=400.0), st.sampled_from(SPECIAL_VALUES)
)


@st.composite
def strict_cases(draw: st.DrawFn) -> tuple[np.ndarray, ...]:
    batch = draw(st.sampled_from(BATCH_SHAPES))
    features = draw(st.integers(1, MAX_FEATURES))
    outputs = draw(st.integers(1, MAX_OUTPUTS))
    halves = lambda shape: hnp.arrays(HALF, shape, elements=STRICT_VALUES)  # noqa: E731
    x, g = draw(halves((*batch, features))), draw(halves((*batch, outputs)))
    W = draw(halves((outputs, features)))
    b = draw(st.one_of(st.none(), halves((outputs,))))
    return x, g, W, b


#: Every overflow case above as one batch, with weights that overflow products and sums.
PINNED_STRICT_CASE = (
    np.array([c[0] + [0.0] * (3 - len(c[0])) for c in OVERFLOW_CASES], HALF),
    # column 1 sums to 2048 + 7 = 2055 (2056 in half), but 2048 + 1 rounds back to 2048
    np.array([[65504.0, 2048.0]] + [[65504.0, 1.0]] * (len(OVERFLOW_CASES) - 1), HALF),
    np.array([[300.0, -30000.0, 1.0], [1.0, 1.0, 1.0]], HALF),
    np.array([65504.0, -1.0], HALF),
)


@settings(max_examples=EXAMPLES)
@given(case=strict_cases())
@example(case=PINNED_STRICT_CASE)
def test_strict_fp16_rounds_every_step_in_order(case):
    x, g, W, b = case
    y, dx, dW, db = strict_reference(x, g, W, b)
    assert_same_halves("strict y", linear.forward(x, W, b, strict_fp16=True), y)
    kernel = linear.vjp(x, g, W, b, strict_fp16=True)
    assert_same_halves("strict dx", kernel[0], dx)
    assert_same_halves("strict dW", kernel[1], dW)
    if b is None:
        assert kernel[2] is None
    else:
        assert_same_halves("strict db", kernel[2], db)


# --------------------------------------------------------------------------------------
# Strict bfloat16
# --------------------------------------------------------------------------------------


def bf16_sum(terms: list) -> ml_dtypes.bfloat16:
    """A running bfloat16 sum from +0, left to right, in ml_dtypes scalar arithmetic (each
    ``+`` computed in float32 and rounded once to bfloat16: the correctly rounded bfloat16
    sum, 24 >= 2 * 8 + 2)."""
    acc = ml_dtypes.bfloat16(0.0)
    for term in terms:
        acc = acc + term
    return acc


def strict_bf16_reference(x, g, W, b):
    """Strict bfloat16 linear in ml_dtypes scalars, in the order of kernels/linear.py's
    docstring: ``y_mi`` over k ascending, then ``+ b_i``; ``dx_mk`` over i ascending;
    ``dW_ik`` and ``db_i`` over the rows ascending (db's terms ``g_mi * 1`` exact)."""
    rows = x.reshape(-1, x.shape[-1])
    grows = g.reshape(-1, W.shape[0])
    outputs, features = W.shape
    y = np.empty((len(rows), outputs), BF16)
    dx = np.empty(rows.shape, BF16)
    for m in range(len(rows)):
        for i in range(outputs):
            y[m, i] = bf16_sum([rows[m, k] * W[i, k] for k in range(features)])
            if b is not None:
                y[m, i] = y[m, i] + b[i]
        for k in range(features):
            dx[m, k] = bf16_sum([grows[m, i] * W[i, k] for i in range(outputs)])
    dW = np.empty(W.shape, BF16)
    for i in range(outputs):
        for k in range(features):
            dW[i, k] = bf16_sum([grows[m, i] * rows[m, k] for m in range(len(rows))])
    db = None if b is None else np.array([bf16_sum(list(grows[:, i])) for i in range(outputs)])
    return y.reshape(*x.shape[:-1], outputs), dx.reshape(x.shape), dW, db


def assert_same_bits(what: str, actual: np.ndarray, expected: np.ndarray) -> None:
    """Equal bit patterns, any NaN equal to any NaN; naming the first difference."""
    assert actual.dtype == expected.dtype and actual.shape == expected.shape, what
    wide_a, wide_e = actual.astype(np.float32), expected.astype(np.float32)
    same = (actual.view(np.uint16) == expected.view(np.uint16)) | (
        np.isnan(wide_a) & np.isnan(wide_e)
    )
    if not np.all(same):
        index = tuple(int(i) for i in np.argwhere(~same)[0])
        raise AssertionError(
            f"{what} at index {index}: got {actual[index]!r}, expected {expected[index]!r}"
        )


#: bfloat16 draws: 0 or magnitudes in [2^-20, 400] (no product near the subnormal range,
#: where ml_dtypes' float32 product would round twice), and values whose products or sums
#: overflow bfloat16 (1.9e19^2 > 3.39e38) or cancel.
BF16_VALUES = st.one_of(
    st.floats(2.0**-20, 400.0),
    st.floats(-400.0, -(2.0**-20)),
    st.sampled_from([0.0, -0.0, 1.0, -1.0, 255.0, 257.0, 1.9e19, -1.9e19, 3.38e38, -3.38e38]),
).map(lambda v: float(ml_dtypes.bfloat16(v)))


@st.composite
def strict_bf16_cases(draw: st.DrawFn) -> tuple[np.ndarray, ...]:
    batch = draw(st.sampled_from(BATCH_SHAPES))
    features = draw(st.integers(1, MAX_FEATURES))
    outputs = draw(st.integers(1, MAX_OUTPUTS))
    values = lambda shape: hnp.arrays(np.float64, shape, elements=BF16_VALUES).map(  # noqa: E731
        lambda a: a.astype(BF16)
    )
    x, g = draw(values((*batch, features))), draw(values((*batch, outputs)))
    W = draw(values((outputs, features)))
    b = draw(st.one_of(st.none(), values((outputs,))))
    return x, g, W, b


#: 300 ones in a sum of products, and products that overflow bfloat16 (1.9e19^2).
PINNED_BF16_CASE = (
    np.array([[1.9e19, 1.0, 257.0], [1.0, 1.0, 1.0]], BF16),
    np.array([[1.0, 3.0], [-2.0, 255.0]], BF16),
    np.array([[1.9e19, -1.0, 1.0], [1.0, 1.0, -1.0]], BF16),
    np.array([3.38e38, 1.0], BF16),
)


@settings(max_examples=EXAMPLES)
@given(case=strict_bf16_cases())
@example(case=PINNED_BF16_CASE)
def test_strict_bfloat16_matches_an_ml_dtypes_emulation(case):
    x, g, W, b = case
    y, dx, dW, db = strict_bf16_reference(x, g, W, b)
    assert_same_bits("strict y", linear.forward(x, W, b, strict_fp16=True), y)
    kernel = linear.vjp(x, g, W, b, strict_fp16=True)
    assert_same_bits("strict dx", kernel[0], dx)
    assert_same_bits("strict dW", kernel[1], dW)
    if b is None:
        assert kernel[2] is None
    else:
        assert_same_bits("strict db", kernel[2], db)
    sample = x.reshape(-1, x.shape[-1])[0]
    assert_same_bits("strict J", linear.jacobian(sample, W, b, strict_fp16=True), W)


def test_strict_bfloat16_dot_product_stalls_at_256():
    """A dot product of 300 ones in strict bfloat16: the running sum reaches 256 exactly (each
    partial sum k <= 256 is a bfloat16), then ``256 + 1 = 257`` lies halfway between the
    neighbours 256 and 258 (spacing 2 in [256, 512), 8 significant bits) and rounds to the
    even significand, 256: every later step stays at 256, so y = 256; with a bias 1,
    ``256 + 1`` rounds to 256 again. The same sum over 300 rows gives dW and db = 256, and
    dx = g W = 1. Strict float16 (11 bits, stalling only at 2048) gives the exact 300, 301."""
    ones = np.ones(300, BF16)
    W = np.ones((1, 300), BF16)
    y = linear.forward(ones, W, strict_fp16=True)
    assert y.dtype == BF16 and y.shape == (1,)
    assert_same_values("y", y, [256.0])
    assert_same_values(
        "y + b", linear.forward(ones, W, np.ones(1, BF16), strict_fp16=True), [256.0]
    )
    half = linear.forward(ones.astype(HALF), W.astype(HALF), np.ones(1, HALF), strict_fp16=True)
    assert_same_values("float16 y + b", half, [301.0])
    column = np.ones((300, 1), BF16)
    one, zero = np.ones((1, 1), BF16), np.zeros(1, BF16)
    dx, dW, db = linear.vjp(column, column, one, zero, strict_fp16=True)
    assert_same_values("dW", dW, [[256.0]])
    assert_same_values("db", db, [256.0])
    assert_same_values("dx", dx, column)


def test_strict_bfloat16_results_are_bfloat16_and_other_dtypes_are_type_errors():
    """bfloat16 in strict mode: bfloat16 results of the documented shapes; W, b or g of
    another float dtype is a TypeError naming it (strict and mixed mode alike); a bfloat16 x
    reaching the undecorated kernel in mixed mode is a TypeError too."""
    x, g = np.ones((2, 3, 4), BF16), np.ones((2, 3, 5), BF16)
    W, b = np.ones((5, 4), BF16), np.ones(5, BF16)
    assert linear.forward(x, W, b, strict_fp16=True).shape == (2, 3, 5)
    results = linear.vjp(x, g, W, b, strict_fp16=True)
    assert [r.shape for r in results] == [x.shape, W.shape, b.shape]
    assert all(r.dtype == BF16 for r in results)
    J = linear.jacobian(x[0, 0], W, b, strict_fp16=True)
    assert J.dtype == BF16 and J.shape == (5, 4)
    for other in (np.float16, np.float32):
        for strict in (True, False):
            with pytest.raises(TypeError, match=r"^W: expected dtype bfloat16"):
                linear.forward(x, W.astype(other), b, strict_fp16=strict)
            with pytest.raises(TypeError, match=r"^b: expected dtype bfloat16"):
                linear.forward(x, W, b.astype(other), strict_fp16=strict)
            with pytest.raises(TypeError, match=r"^g: expected dtype bfloat16"):
                linear.vjp(x, g.astype(other), W, b, strict_fp16=strict)
    with pytest.raises(TypeError, match=r"^x: bfloat16 reaches this path in strict mode only"):
        linear.forward.__wrapped__(x, W, b)


# --------------------------------------------------------------------------------------
# Non-finite values, layouts, inputs, bad arguments
# --------------------------------------------------------------------------------------


@pytest.mark.parametrize("dtype", DTYPES, ids=DTYPE_IDS)
@pytest.mark.parametrize("bad", [np.nan, np.inf, -np.inf])
def test_non_finite_values_propagate_as_ieee_says(dtype, bad):
    rng = np.random.default_rng(5)
    x = rng.uniform(-2, 2, (3, 4)).astype(dtype)
    g = rng.uniform(-2, 2, (3, 2)).astype(dtype)
    W = rng.uniform(-2, 2, (2, 4)).astype(dtype)
    W[1, 3] = 0.0  # inf * 0 is NaN
    b = rng.uniform(-2, 2, 2).astype(dtype)
    x[1, 3] = bad
    g[2, 0] = bad
    y = linear.forward(x, W, b)
    exact = reference_linear.linear_forward(x, W, b)
    assert_within("y", y, exact, reference_linear.linear_forward(*map(np.abs, (x, W, b))), 5, dtype)
    dx, dW, db = linear.vjp(x, g, W, b)
    ex = reference_linear.linear_vjp(x, g, W, b)
    scales = reference_linear.linear_vjp(*map(np.abs, (x, g, W, b)))
    for name, got, want, scale, n in zip(
        ("dx", "dW", "db"), (dx, dW, db), ex, scales, (2, 3, 3), strict=True
    ):
        assert_within(name, got, want, scale, n, dtype)
    # Rows without the bad value are those of the clean input, bit for bit.
    clean = x.copy()
    clean[1, 3] = 0.5
    assert_same_halves("clean rows", y[[0, 2]], linear.forward(clean, W, b)[[0, 2]])


@pytest.mark.parametrize("dtype", DTYPES, ids=DTYPE_IDS)
def test_without_bias_db_is_none_and_y_is_the_product(dtype):
    x = np.array([[1.0, -2.0], [0.5, 4.0]], dtype)
    W = np.array([[3.0, 1.0], [-1.0, 0.25], [0.0, 2.0]], dtype)
    y = linear.forward(x, W)
    assert_same_values("x W^T", y, np.array([[1.0, -1.5, -4.0], [5.5, 0.5, 8.0]], dtype))
    assert_same_values("b = 0", linear.forward(x, W, np.zeros(3, dtype)), y)
    dx, dW, db = linear.vjp(x, np.ones((2, 3), dtype), W)
    assert db is None
    assert_same_values("dx", dx, np.array([[2.0, 3.25], [2.0, 3.25]], dtype))
    assert_same_values("dW", dW, np.array([[1.5, 2.0]] * 3, dtype))


@pytest.mark.parametrize(("dtype", "strict"), DTYPE_MODES, ids=DTYPE_MODE_IDS)
def test_non_contiguous_inputs_give_the_contiguous_result(dtype, strict):
    rng = np.random.default_rng(7)
    big_x = rng.uniform(-3, 3, (4, 10)).astype(dtype)
    big_g = rng.uniform(-3, 3, (4, 6)).astype(dtype)
    x, g = big_x[:, ::2], big_g[::-1, ::2]  # strided and reversed views
    W = np.asfortranarray(rng.uniform(-3, 3, (3, 5)).astype(dtype))
    b = rng.uniform(-3, 3, 6).astype(dtype)[::2]
    copies = [np.ascontiguousarray(a) for a in (x, g, W, b)]
    mode = {"strict_fp16": True} if strict else {}
    assert_same_halves(
        "forward", linear.forward(x, W, b, **mode), linear.forward(*copies[::2], copies[3], **mode)
    )
    got = linear.vjp(x, g, W, b, **mode)
    want = linear.vjp(*copies, **mode)
    for name, a, c in zip(("dx", "dW", "db"), got, want, strict=True):
        assert_same_halves(name, a, c)


@pytest.mark.parametrize("dtype", DTYPES, ids=DTYPE_IDS)
def test_no_function_writes_into_its_inputs(dtype):
    rng = np.random.default_rng(8)
    arguments = {
        "x": rng.uniform(-3, 3, (2, 3)).astype(dtype),
        "g": rng.uniform(-3, 3, (2, 4)).astype(dtype),
        "W": rng.uniform(-3, 3, (4, 3)).astype(dtype),
        "b": rng.uniform(-3, 3, 4).astype(dtype),
    }
    before = {name: value.copy() for name, value in arguments.items()}
    x, g, W, b = arguments.values()
    modes = [{}, {"strict_fp16": True}] if dtype == HALF else [{}]
    for mode in modes:
        linear.forward(x, W, b, **mode)
        linear.vjp(x, g, W, b, **mode)
        linear.jacobian(x[0], W, b, **mode)
    for name, value in arguments.items():
        assert_same_halves(f"{name} after the calls", value, before[name])


def test_batch_axes_are_rows_and_empty_batches_work():
    rng = np.random.default_rng(9)
    x = rng.uniform(-1, 1, (2, 3, 4))
    W = rng.uniform(-1, 1, (5, 4))
    g = rng.uniform(-1, 1, (2, 3, 5))
    assert_same_values(
        "(2, 3, D)", linear.forward(x, W), linear.forward(x.reshape(6, 4), W).reshape(2, 3, 5)
    )
    dx, dW, db = linear.vjp(np.zeros((0, 4)), np.zeros((0, 5)), W, np.zeros(5))
    assert dx.shape == (0, 4) and dW.shape == (5, 4) and db.shape == (5,)
    assert not dW.any() and not db.any()
    assert linear.forward(np.zeros((0, 4)), W).shape == (0, 5)
    dx = linear.vjp(x, g, W)[0]
    assert dx.shape == x.shape


# name, call, the argument to spoil, expected error and a word the message must contain
X, G, W_, B = np.ones((2, 3)), np.ones((2, 4)), np.ones((4, 3)), np.ones(4)
BAD_ARGUMENTS = [
    ("W shape", lambda: linear.forward(X, np.ones((4, 2)), B), ValueError, "W"),
    ("W 1-d", lambda: linear.forward(X, np.ones(3), None), ValueError, "W"),
    ("b shape", lambda: linear.forward(X, W_, np.ones(3)), ValueError, "b"),
    ("g shape", lambda: linear.vjp(X, np.ones((2, 3)), W_, B), ValueError, "g"),
    ("x 0-d", lambda: linear.forward(np.float64(1.0), W_), ValueError, "x"),
    ("W dtype", lambda: linear.forward(X, W_.astype(np.float32)), TypeError, "W"),
    ("b dtype", lambda: linear.forward(X, W_, B.astype(np.float16)), TypeError, "b"),
    ("g dtype", lambda: linear.vjp(X, G.astype(np.float32), W_), TypeError, "g"),
    ("x int", lambda: linear.forward(np.ones((2, 3), int), W_), TypeError, "x"),
    ("x complex", lambda: linear.forward(X.astype(complex), W_), TypeError, "x"),
    ("W int", lambda: linear.forward(X, np.ones((4, 3), int)), TypeError, "W"),
    (
        "strict float32",
        lambda: linear.forward(X.astype(np.float32), W_.astype(np.float32), strict_fp16=True),
        ValueError,
        "strict_fp16",
    ),
    ("strict not bool", lambda: linear.forward(X, W_, strict_fp16="yes"), TypeError, "strict_fp16"),
    ("jacobian batch", lambda: linear.jacobian(X, W_), ValueError, "x"),
]


@pytest.mark.parametrize(
    ("name", "function", "error", "word"), BAD_ARGUMENTS, ids=[c[0] for c in BAD_ARGUMENTS]
)
def test_bad_arguments_raise_naming_the_argument(name, function, error, word):
    with pytest.raises(error, match=word):
        function()


def test_float16_overflow_gives_inf_without_a_warning():
    x = np.array([65504.0, 65504.0], HALF)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        y = linear.forward(x, np.ones((1, 2), HALF))
        ys = linear.forward(x, np.ones((1, 2), HALF), strict_fp16=True)
    assert np.isposinf(y[0]) and np.isposinf(ys[0])


@pytest.mark.parametrize("dtype", [BF16, np.float16, np.float32, np.float64], ids=str)
def test_empty_weight_shapes_give_the_exact_empty_results(dtype):
    """W of shape (O, 0) or (0, D) used to fail in vjp (and with D = 0 in forward) with
    "cannot reshape array of size 0". D = 0: every sum is empty, y = b, dx is empty, dW is
    (O, 0), db = sum of g; O = 0: y is (N, 0), dx = g W = 0, dW is (0, D)."""
    g = np.array([[1.0, 2.0], [3.0, -1.0]], dtype)
    b = np.array([0.5, -2.0], dtype)
    x0, W0 = np.zeros((2, 0), dtype), np.zeros((2, 0), dtype)
    for strict in (False, True) if dtype in (np.float16, BF16) else (False,):
        y = linear.forward(x0, W0, b, strict_fp16=strict)
        assert_same_values("y (D = 0)", y, np.broadcast_to(b, (2, 2)))
        dx, dW, db = linear.vjp(x0, g, W0, b, strict_fp16=strict)
        assert dx.shape == (2, 0) and dW.shape == (2, 0) and dx.dtype == dW.dtype == dtype
        assert_same_values("db (D = 0)", db, g.sum(axis=0, dtype=np.float64).astype(dtype))
        assert linear.jacobian(x0[0], W0, b, strict_fp16=strict).shape == (2, 0)
        x, W = np.ones((2, 3), dtype), np.zeros((0, 3), dtype)
        assert linear.forward(x, W, strict_fp16=strict).shape == (2, 0)
        dx, dW, db = linear.vjp(x, np.zeros((2, 0), dtype), W, np.zeros(0, dtype))
        assert_same_values("dx (O = 0)", dx, np.zeros((2, 3), dtype))
        assert dW.shape == (0, 3) and db.shape == (0,) and dW.dtype == db.dtype == dtype
