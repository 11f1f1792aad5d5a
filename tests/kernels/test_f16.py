"""Bit-exact tests of the float16 conversion layer (kernels/_f16.py) against NumPy.

NumPy is the reference. Its float32->float16 and float64->float16 casts round correctly
(nearest, ties to even), and its float64 cast rounds directly, not through float32:
``test_numpy_float64_to_half_is_direct`` pins that with values where a float32 detour
lands on a false tie. Every comparison is of bit patterns, NaNs included.

The boundary sets are every half value and every midpoint between consecutive halves
(both signs, subnormals, 2^-25 between 0 and the smallest subnormal, 65520 between
65504 and 2^16), each with its +-8 ULP neighbours in the source format, plus special values.
A second reference, the branchy field-by-field rounding _f16 used before its conversions
became branch-free, is fast where NumPy is slow (half subnormal results); it is checked
against NumPy on the boundary sets, then compared in Numba with every float32 pattern whose
exponent lies within EXTRA_BINADES binades of the half range, every float32 subnormal, inf
and NaN (about 0.85e9 patterns, a few seconds). float64 gets every combination of the top
12 fraction bits with a few low-bit patterns in each exponent around the half range, every
NaN payload class, and random inputs. ``decided_half`` is checked against its definition.

The exhaustive runs over all 2^32 float32 values are marked ``slow`` (deselected by
pyproject's addopts): ``pytest -m slow tests/kernels/test_f16.py``. Against the branchy
reference in Numba they take about 16 s; against NumPy, about 4-8 minutes on 2 cores.

Scalar functions are exercised inside Numba (``_apply_scalar``), as the kernels call them:
a float32 argument or result crossing into Python passes through a double, which quiets
a signaling NaN.

Signaling NaNs: NumPy's software conversion (used when its baseline lacks hardware half
conversion, as in the x86-64 wheels) passes them on unquieted, and so does _f16. A NumPy
built on F16C or AArch64 half instructions would quiet them, and only the signaling-NaN
cases here would then differ.
"""

from __future__ import annotations

import functools
import re

import numpy as np
import pytest
from hypothesis import example, given
from hypothesis import strategies as st
from numba import njit
from numba.core.errors import TypingError

from kernels._f16 import (
    HALF_MAX,
    HALF_OVERFLOW_THRESHOLD,
    HALF_SMALLEST_NORMAL,
    HALF_SMALLEST_SUBNORMAL,
    decided_half,
    float32_to_half_bits,
    float64_to_half_bits,
    half_bits_to_float32,
    half_bits_to_float64,
    narrow_float32_to_half_array,
    narrow_to_half_array,
    reinterpret,
    round_to_half,
    widen_half_array,
    widen_half_array_to_float32,
)
from kernels.cast import cast
from tests.helpers.assertions import assert_same_bits

ALL_HALF_BITS = np.arange(1 << 16).astype(np.uint16)
HALF_POSITIVE_INF_BITS = 0x7C00
ULP_RADIUS = 8  # neighbours on each side of a boundary, in ULPs of the source format
SLOW_CHUNK = 1 << 21  # float32 values per chunk of the exhaustive run (2^11 chunks)
EXTRA_BINADES = 4  # binades on each side of the half range swept exhaustively
RANDOM_COUNT = 1 << 20  # random float64 inputs of each kind
SEED = 20261125

# Special inputs, as bit patterns, with what each probes.
FLOAT32_SPECIAL_BITS = (
    0x00000000,  # +0
    0x80000000,  # -0
    0x7F800000,  # +inf
    0xFF800000,  # -inf
    0x7FC00000,  # default quiet NaN
    0xFFC00000,  # negative quiet NaN
    0x7FC00001,  # quiet NaN, payload only in bits that narrowing drops
    0x7FE00000,  # quiet NaN with a payload bit that survives
    0x7F800001,  # signaling NaN whose kept payload is 0: must stay NaN (0x7C01)
    0x7F801FFF,  # signaling NaN, payload just below the kept bits
    0x7F802000,  # signaling NaN, lowest kept payload bit
    0x7FBFFFFF,  # largest signaling NaN payload
    0xFFFFFFFF,  # negative NaN, all payload bits
    0x7F7FFFFF,  # float32 max
    0xFF7FFFFF,  # -float32 max
    0x00000001,  # smallest float32 subnormal
    0x807FFFFF,  # -largest float32 subnormal
    0x00400000,  # a float32 subnormal in between
    0x00800000,  # smallest float32 normal
    0x47800000,  # 65536 = 2^16
    0x477FFFFF,  # largest float32 below 2^16
    0x501502F9,  # 1e10
)
FLOAT64_SPECIAL_BITS = (
    0x0000000000000000,  # +0
    0x8000000000000000,  # -0
    0x7FF0000000000000,  # +inf
    0xFFF0000000000000,  # -inf
    0x7FF8000000000000,  # default quiet NaN
    0xFFF8000000000000,  # negative quiet NaN
    0x7FF8000000000001,  # quiet NaN, payload only in bits that narrowing drops
    0x7FFC000000000000,  # quiet NaN with a payload bit that survives
    0x7FF0000000000001,  # signaling NaN whose kept payload is 0: must stay NaN (0x7C01)
    0x7FF003FFFFFFFFFF,  # signaling NaN, payload just below the kept bits
    0x7FF0040000000000,  # signaling NaN, lowest kept payload bit
    0x7FF7FFFFFFFFFFFF,  # largest signaling NaN payload
    0xFFFFFFFFFFFFFFFF,  # negative NaN, all payload bits
    0x7FEFFFFFFFFFFFFF,  # float64 max
    0xFFEFFFFFFFFFFFFF,  # -float64 max
    0x0000000000000001,  # smallest float64 subnormal
    0x800FFFFFFFFFFFFF,  # -largest float64 subnormal
    0x0010000000000000,  # smallest float64 normal
    0x47EFFFFFE0000000,  # float32 max
    0x36A0000000000000,  # smallest float32 subnormal, 2^-149
    0x40F0000000000000,  # 65536 = 2^16
    0x40EFFFFFFFFFFFFF,  # largest float64 below 2^16
    0x7E37E43C8800759C,  # 1e300
)

# Hand-derived from IEEE 754 (round to nearest, ties to even), independent of NumPy.
PINNED_ROUNDINGS = (
    # value, half bits, why
    (HALF_MAX, 0x7BFF, "largest finite half"),
    (HALF_OVERFLOW_THRESHOLD - 2.0**-20, 0x7BFF, "just below the overflow threshold"),
    (HALF_OVERFLOW_THRESHOLD, 0x7C00, "tie between 65504 and 2^16 goes to the even: inf"),
    (-HALF_OVERFLOW_THRESHOLD, 0xFC00, "the same, negative"),
    (HALF_SMALLEST_SUBNORMAL, 0x0001, "smallest subnormal"),
    (HALF_SMALLEST_SUBNORMAL / 2, 0x0000, "tie between 0 and 2^-24 goes to 0"),
    (-HALF_SMALLEST_SUBNORMAL / 2, 0x8000, "the same, negative: -0"),
    (HALF_SMALLEST_SUBNORMAL / 2 + 2.0**-60, 0x0001, "just above that tie"),
    (1.5 * HALF_SMALLEST_SUBNORMAL, 0x0002, "subnormal tie goes to the even 2 * 2^-24"),
    (HALF_SMALLEST_NORMAL, 0x0400, "smallest normal"),
    (HALF_SMALLEST_NORMAL - HALF_SMALLEST_SUBNORMAL / 2, 0x0400, "tie at the normal border"),
    (1.0 + 2.0**-11, 0x3C00, "tie between 1 and 1 + 2^-10 goes to 1"),
    (1.0 + 3 * 2.0**-11, 0x3C02, "tie between 1 + 2^-10 and 1 + 2^-9 goes up"),
    (-0.0, 0x8000, "negative zero keeps its sign"),
    (float("inf"), 0x7C00, "+inf"),
    (float("-inf"), 0xFC00, "-inf"),
)


# --- helpers ----------------------------------------------------------------------------


def _bits(values: np.ndarray) -> np.ndarray:
    """The bit patterns of ``values`` as unsigned integers of the same width."""
    return values.view(np.dtype(f"u{values.dtype.itemsize}"))


def numpy_to_half(values: np.ndarray) -> np.ndarray:
    """NumPy's float16 rounding of ``values``, as uint16 bits (overflow to inf is expected)."""
    with np.errstate(over="ignore", invalid="ignore"):
        return values.astype(np.float16).view(np.uint16)


@njit
def _apply_scalar(func, values, out):
    """out[i] = func(values[i]) inside Numba, so float32 NaN bits never cross into Python."""
    for i in range(values.size):
        out[i] = func(values[i])
    return out


def apply_scalar(func, values: np.ndarray, out_dtype) -> np.ndarray:
    return _apply_scalar(func, values, np.empty(values.size, dtype=out_dtype))


@functools.cache
def half_anchors() -> np.ndarray:
    """Every positive finite half value and every midpoint between neighbours, as float64.

    The midpoints run from 2^-25 (between 0 and the smallest subnormal) to 65520 (between
    65504 and 2^16, where inf sits); they have 12 significant bits, exact in float32 too.
    """
    finite = ALL_HALF_BITS[:HALF_POSITIVE_INF_BITS].view(np.float16).astype(np.float64)
    upper = np.append(finite, 2.0**16)  # the power of two past HALF_MAX, where inf sits
    midpoints = (upper[:-1] + upper[1:]) / 2
    assert midpoints[0] == HALF_SMALLEST_SUBNORMAL / 2
    assert midpoints[-1] == HALF_OVERFLOW_THRESHOLD
    return np.concatenate([finite, midpoints])


def neighbours_of_anchors(dtype, special_bits) -> np.ndarray:
    """All values of ``dtype`` within ULP_RADIUS ULPs of a half anchor, both signs, plus
    the special values."""
    uint = np.dtype(f"u{np.dtype(dtype).itemsize}")
    magnitudes = _bits(half_anchors().astype(dtype)).astype(np.int64)
    offsets = np.arange(-ULP_RADIUS, ULP_RADIUS + 1, dtype=np.int64)
    near = (magnitudes[:, None] + offsets).ravel()
    near = np.unique(near[near >= 0]).astype(uint)
    sign_bit = uint.type(1) << uint.type(8 * uint.itemsize - 1)
    specials = np.array(special_bits, dtype=uint)
    return np.concatenate([near, near | sign_bit, specials]).view(dtype)


@functools.cache
def float32_boundary_inputs() -> np.ndarray:
    return neighbours_of_anchors(np.float32, FLOAT32_SPECIAL_BITS)


@functools.cache
def float64_boundary_inputs() -> np.ndarray:
    return neighbours_of_anchors(np.float64, FLOAT64_SPECIAL_BITS)


# --- a second reference: the branchy field-by-field rounding _f16 used before ------------
#
# NumPy is slow on half subnormal results (about 65 ns a value), too slow to sweep the
# billion float32 patterns around the half range in a unit test. The implementation that
# kernels/_f16.py had until its conversions became branch-free (commit 316fa8f) is kept
# here, unchanged, as a fast Numba reference: it rounds the source's fields one case after
# another, a different method from _f16's. ``test_branchy_reference_matches_numpy`` ties
# it to NumPy on every boundary set.

_HALF_INF_BITS = 0x7C00
_HALF_MAX_EXPONENT = 15
_HALF_MIN_EXPONENT = -14
_HALF_SUBNORMAL_EXPONENT = -24


@njit
def _reference_fields_to_half_bits(
    negative, exponent, fraction, fraction_bits, exponent_bias, special
):
    sign = 0x8000 if negative else 0
    if exponent == special:
        if fraction == 0:
            return sign | _HALF_INF_BITS
        payload = fraction >> (fraction_bits - 10)
        return sign | _HALF_INF_BITS | max(payload, 1)
    unbiased = exponent - exponent_bias
    if unbiased > _HALF_MAX_EXPONENT:
        return sign | _HALF_INF_BITS
    if unbiased < _HALF_SUBNORMAL_EXPONENT - 1:
        return sign
    significand = fraction | (1 << fraction_bits)
    if unbiased >= _HALF_MIN_EXPONENT:
        shift = fraction_bits - 10
        exponent_field = (unbiased + 15 - 1) << 10
    else:
        shift = fraction_bits - 10 + (_HALF_MIN_EXPONENT - unbiased)
        exponent_field = 0
    kept = significand >> shift
    dropped = significand & ((1 << shift) - 1)
    halfway = 1 << (shift - 1)
    if dropped > halfway or (dropped == halfway and kept & 1):
        kept += 1
    return sign | (exponent_field + kept)


@njit
def reference_float64_to_half_bits(v):
    bits = reinterpret(np.float64(v), np.int64)
    half = _reference_fields_to_half_bits(
        bits < 0, (bits >> 52) & 0x7FF, bits & ((1 << 52) - 1), 52, 1023, 0x7FF
    )
    return np.uint16(half)


@njit
def reference_float32_to_half_bits(v):
    bits = np.int64(reinterpret(v, np.int32))
    half = _reference_fields_to_half_bits(
        bits < 0, (bits >> 23) & 0xFF, bits & ((1 << 23) - 1), 23, 127, 0xFF
    )
    return np.uint16(half)


@njit
def _float32_sweep(first, count):
    """``(mismatches, first)`` over the float32 patterns ``first .. first + count - 1``:
    how many give a different result than the branchy reference, in float32_to_half_bits
    or in float64_to_half_bits of the same value widened (exactly) to float64, and the
    lowest such pattern (-1 if none)."""
    mismatches = 0
    lowest = -1
    for pattern in range(first, first + count):
        v = reinterpret(np.int32(pattern), np.float32)
        wide = np.float64(v)
        differs = (float32_to_half_bits(v) != reference_float32_to_half_bits(v)) | (
            float64_to_half_bits(wide) != reference_float64_to_half_bits(wide)
        )
        mismatches += differs
        lowest = pattern if differs and lowest < 0 else lowest
    return mismatches, lowest


def assert_float32_sweep_clean(what: str, first: int, count: int) -> None:
    mismatches, lowest = _float32_sweep(first, count)
    assert mismatches == 0, f"{what}: {mismatches} patterns differ, the first 0x{lowest:08x}"


@njit
def _decided_half_arrays(values, errors, bits, oks):
    for i in range(values.size):
        bits[i], oks[i] = decided_half(values[i], errors[i])


def apply_decided_half(values: np.ndarray, errors: np.ndarray):
    bits = np.empty(values.size, dtype=np.uint16)
    oks = np.empty(values.size, dtype=np.bool_)
    _decided_half_arrays(values, errors, bits, oks)
    return bits, oks


def decided_half_by_definition(values: np.ndarray, errors: np.ndarray):
    """decided_half's specification, computed with NumPy."""
    with np.errstate(over="ignore", invalid="ignore"):
        widening = 2.0 * errors + 2.0**-52 * np.abs(values)
        low, high = values - widening, values + widening
    ok = (numpy_to_half(low) == numpy_to_half(high)) & np.isfinite(widening)
    return numpy_to_half(values), ok


@functools.cache
def float64_structured_inputs() -> np.ndarray:
    """float64 patterns whose rounding decisions are all covered: for every exponent within
    EXTRA_BINADES of the half range (and the float64 subnormals), every combination of the
    top 12 fraction bits (the 10 kept, the round bit and one more) with low bits zero, one,
    only the highest, all ones or random; then every NaN's top 10 payload bits with those
    low patterns (payload bits only below the kept ones must still give a NaN). Both signs.
    """
    rng = np.random.default_rng(SEED)
    low_bits = 52 - 12
    low = np.array([0, 1, 1 << (low_bits - 1), (1 << low_bits) - 1], dtype=np.uint64)
    low = np.concatenate([low, rng.integers(0, 1 << low_bits, 4, dtype=np.uint64)])
    top = np.arange(1 << 12, dtype=np.uint64) << np.uint64(low_bits)
    exponents = np.arange(
        1023 + _HALF_SUBNORMAL_EXPONENT - 1 - EXTRA_BINADES,
        1023 + _HALF_MAX_EXPONENT + 1 + EXTRA_BINADES + 1,
        dtype=np.uint64,
    )
    exponents = np.append(exponents, np.uint64(0))  # float64 subnormals
    finite = (exponents[:, None, None] << np.uint64(52)) | top[None, :, None] | low
    nan_low_bits = 52 - 10
    nan_low = np.array([0, 1, 1 << (nan_low_bits - 1), (1 << nan_low_bits) - 1], dtype=np.uint64)
    nan_top = np.arange(1 << 10, dtype=np.uint64) << np.uint64(nan_low_bits)
    nans = np.uint64(0x7FF0000000000000) | nan_top[:, None] | nan_low
    patterns = np.concatenate([finite.ravel(), nans.ravel()])
    return np.concatenate([patterns, patterns | np.uint64(1 << 63)]).view(np.float64)


@functools.cache
def float64_random_inputs() -> np.ndarray:
    """RANDOM_COUNT random bit patterns and RANDOM_COUNT random values of magnitude
    2^-30 .. 2^20 (uniform in the exponent), of random sign."""
    rng = np.random.default_rng(SEED + 1)
    patterns = rng.integers(0, 1 << 64, RANDOM_COUNT, dtype=np.uint64, endpoint=False)
    magnitudes = 2.0 ** rng.uniform(-30, 20, RANDOM_COUNT)
    signs = rng.choice(np.array([-1.0, 1.0]), RANDOM_COUNT)
    return np.concatenate([patterns.view(np.float64), signs * magnitudes])


# --- the reference --------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("value", "direct_bits", "via_float32_bits"),
    [
        # float32 rounds 1 + 2^-11 + 2^-40 to the tie 1 + 2^-11, which then goes to 1.
        (1.0 + 2.0**-11 + 2.0**-40, 0x3C01, 0x3C00),
        # float32 rounds 65520 - 2^-20 up to the threshold 65520, which then overflows.
        (HALF_OVERFLOW_THRESHOLD - 2.0**-20, 0x7BFF, 0x7C00),
        # The same in the subnormal range: just above 2^-25 the float32 detour gives 0.
        (HALF_SMALLEST_SUBNORMAL / 2 + 2.0**-60, 0x0001, 0x0000),
    ],
)
def test_numpy_float64_to_half_is_direct(value, direct_bits, via_float32_bits):
    """NumPy rounds float64 straight to half, so it is a valid reference for double rounding."""
    as_array = np.array([value])
    assert numpy_to_half(as_array)[0] == direct_bits
    with np.errstate(over="ignore"):
        assert np.float16(value).view(np.uint16) == direct_bits
    assert numpy_to_half(as_array.astype(np.float32))[0] == via_float32_bits
    assert float64_to_half_bits(value) == direct_bits
    assert narrow_to_half_array(as_array)[0] == direct_bits


@pytest.mark.parametrize(("value", "bits", "why"), PINNED_ROUNDINGS)
def test_pinned_roundings(value, bits, why):
    assert float64_to_half_bits(value) == bits, why
    assert numpy_to_half(np.array([value]))[0] == bits, f"NumPy disagrees: {why}"
    as_float32 = np.array([value], dtype=np.float32)
    if float(as_float32[0]) == value:  # exact in float32: the float32 path must agree
        assert narrow_float32_to_half_array(as_float32)[0] == bits, why


# --- widening: all 65,536 patterns -----------------------------------------------------


def test_widen_every_half_to_float64():
    expected = ALL_HALF_BITS.view(np.float16).astype(np.float64)
    assert_same_bits("widen_half_array", widen_half_array(ALL_HALF_BITS), expected, ALL_HALF_BITS)
    in_numba = apply_scalar(half_bits_to_float64, ALL_HALF_BITS, np.float64)
    assert_same_bits("half_bits_to_float64 (Numba)", in_numba, expected, ALL_HALF_BITS)
    from_python = np.array([half_bits_to_float64(h) for h in ALL_HALF_BITS.tolist()])
    assert_same_bits("half_bits_to_float64 (Python)", from_python, expected, ALL_HALF_BITS)


def test_widen_every_half_to_float32():
    expected = ALL_HALF_BITS.view(np.float16).astype(np.float32)
    actual = widen_half_array_to_float32(ALL_HALF_BITS)
    assert_same_bits("widen_half_array_to_float32", actual, expected, ALL_HALF_BITS)
    in_numba = apply_scalar(half_bits_to_float32, ALL_HALF_BITS, np.float32)
    assert_same_bits("half_bits_to_float32 (Numba)", in_numba, expected, ALL_HALF_BITS)


def test_every_half_survives_a_round_trip():
    for widened in (widen_half_array(ALL_HALF_BITS), widen_half_array_to_float32(ALL_HALF_BITS)):
        narrow = (
            narrow_to_half_array if widened.dtype == np.float64 else narrow_float32_to_half_array
        )
        assert_same_bits(f"round trip via {widened.dtype}", narrow(widened), ALL_HALF_BITS, widened)


# --- narrowing: every rounding boundary -----------------------------------------------------


def test_float32_to_half_near_every_boundary():
    values = float32_boundary_inputs()
    expected = numpy_to_half(values)
    assert_same_bits(
        "narrow_float32_to_half_array", narrow_float32_to_half_array(values), expected, values
    )
    in_numba = apply_scalar(float32_to_half_bits, values, np.uint16)
    assert_same_bits("float32_to_half_bits (Numba)", in_numba, expected, values)


def test_float64_to_half_near_every_boundary():
    values = float64_boundary_inputs()
    expected = numpy_to_half(values)
    assert_same_bits("narrow_to_half_array", narrow_to_half_array(values), expected, values)
    in_numba = apply_scalar(float64_to_half_bits, values, np.uint16)
    assert_same_bits("float64_to_half_bits (Numba)", in_numba, expected, values)


@pytest.mark.parametrize("boundary_inputs", [float64_boundary_inputs, float32_boundary_inputs])
def test_cast_rounds_whole_results_like_numpy(boundary_inputs):
    """``kernels.cast.cast(values, "float16")``, which rounds the float64 (or float32) results
    of the kernels, against NumPy's cast, on a strided 2-D view of every boundary input: same
    bits (NaN payloads and signed zeros), same shape, C order."""
    values = boundary_inputs()
    values = values[: values.size - values.size % 6].reshape(-1, 6)
    view = values.T[::2]  # not contiguous
    got = cast(view, "float16")
    assert got.dtype == np.float16 and got.shape == view.shape and got.flags.c_contiguous
    expected = numpy_to_half(np.ascontiguousarray(view).reshape(-1))
    assert_same_bits("cast", got.reshape(-1).view(np.uint16), expected, view.reshape(-1))


def test_float64_to_half_from_python_on_specials():
    values = np.array(FLOAT64_SPECIAL_BITS, dtype=np.uint64).view(np.float64)
    from_python = np.array([float64_to_half_bits(v) for v in values.tolist()], dtype=np.uint16)
    assert_same_bits("float64_to_half_bits (Python)", from_python, numpy_to_half(values), values)


@given(st.integers(0, (1 << 64) - 1))
@example(0x7FF0000000000001)  # signaling NaN: must stay a NaN
@example(0x40EFFE0000000000)  # 65520
@example(0x3E70000000000001)  # just above 2^-25
def test_float64_bit_patterns_round_like_numpy(pattern):
    values = np.array([pattern], dtype=np.uint64).view(np.float64)
    expected = numpy_to_half(values)
    assert_same_bits("narrow_to_half_array", narrow_to_half_array(values), expected, values)
    in_numba = apply_scalar(float64_to_half_bits, values, np.uint16)
    assert_same_bits("float64_to_half_bits (Numba)", in_numba, expected, values)


@given(st.integers(0, (1 << 32) - 1))
@example(0x7F800001)  # signaling NaN: must stay a NaN
@example(0x477FF000)  # 65520
@example(0x33000001)  # just above 2^-25
def test_float32_bit_patterns_round_like_numpy(pattern):
    values = np.array([pattern], dtype=np.uint32).view(np.float32)
    expected = numpy_to_half(values)
    assert_same_bits(
        "narrow_float32_to_half_array", narrow_float32_to_half_array(values), expected, values
    )
    in_numba = apply_scalar(float32_to_half_bits, values, np.uint16)
    assert_same_bits("float32_to_half_bits (Numba)", in_numba, expected, values)


# --- round_to_half ----------------------------------------------------------------------------


def _numpy_round_to_half(values: np.ndarray) -> np.ndarray:
    with np.errstate(over="ignore", invalid="ignore"):
        return values.astype(np.float16).astype(np.float64)


def test_round_to_half_matches_numpy_near_every_boundary():
    values = float64_boundary_inputs()
    in_numba = apply_scalar(round_to_half, values, np.float64)
    assert_same_bits("round_to_half", in_numba, _numpy_round_to_half(values), values)


def test_round_to_half_of_float32_matches_numpy():
    # NaNs left out: widening a float32 signaling NaN to float64 quiets it first.
    values = float32_boundary_inputs()
    values = values[~np.isnan(values)]
    in_numba = apply_scalar(round_to_half, values, np.float64)
    assert_same_bits("round_to_half(float32)", in_numba, _numpy_round_to_half(values), values)


@given(st.floats(allow_nan=True, allow_infinity=True, allow_subnormal=True))
@example(HALF_OVERFLOW_THRESHOLD)
@example(-HALF_SMALLEST_SUBNORMAL / 2)
@example(1.0 + 2.0**-11 + 2.0**-40)
def test_round_to_half_from_python(value):
    with np.errstate(over="ignore"):
        expected = np.float64(np.float16(value))
    actual = round_to_half(value)
    assert_same_bits("round_to_half", np.array([actual]), np.array([expected]), np.array([value]))


# --- array versions -----------------------------------------------------------------------------

ARRAY_FUNCTIONS = (
    # function, input dtype, output dtype
    (widen_half_array, np.uint16, np.float64),
    (widen_half_array_to_float32, np.uint16, np.float32),
    (narrow_to_half_array, np.float64, np.uint16),
    (narrow_float32_to_half_array, np.float32, np.uint16),
)


@pytest.mark.parametrize(("func", "in_dtype", "out_dtype"), ARRAY_FUNCTIONS)
def test_array_versions_accept_empty_arrays(func, in_dtype, out_dtype):
    result = func(np.empty(0, dtype=in_dtype))
    assert result.shape == (0,)
    assert result.dtype == out_dtype


@pytest.mark.parametrize(("func", "in_dtype", "out_dtype"), ARRAY_FUNCTIONS)
def test_array_versions_handle_strided_input_and_leave_it_alone(func, in_dtype, out_dtype):
    source = ALL_HALF_BITS if in_dtype == np.uint16 else ALL_HALF_BITS.view(np.float16)
    source = source.astype(in_dtype)
    before = source.copy()
    strided = source[::3]
    assert_same_bits(func.__name__, func(strided), func(np.ascontiguousarray(strided)), strided)
    assert_same_bits(f"{func.__name__} input", source, before, source)


def test_widening_rejects_wide_bit_arrays():
    with pytest.raises(TypeError, match="16-bit patterns"):
        widen_half_array(np.zeros(3, dtype=np.int32))


def test_float32_narrowing_refuses_float64_instead_of_rounding_twice():
    with pytest.raises(TypingError, match="cannot reinterpret float64"):
        narrow_float32_to_half_array(np.zeros(3, dtype=np.float64))


# --- the branchy reference and the exhaustive sweeps near the half range ----------------

FLOAT32_SWEEPS = (
    # what, first and last float32 exponent field swept (every pattern in between)
    ("zeros and float32 subnormals", 0, 0),
    (
        "the half range (2^-25 .. 2^16) +- EXTRA_BINADES binades",
        127 + _HALF_SUBNORMAL_EXPONENT - 1 - EXTRA_BINADES,
        127 + _HALF_MAX_EXPONENT + 1 + EXTRA_BINADES,
    ),
    ("inf and every NaN", 255, 255),
)


def test_branchy_reference_matches_numpy():
    cases = (
        (float32_boundary_inputs(), reference_float32_to_half_bits),
        (float64_boundary_inputs(), reference_float64_to_half_bits),
        (float64_structured_inputs(), reference_float64_to_half_bits),
    )
    for values, reference in cases:
        actual = apply_scalar(reference, values, np.uint16)
        assert_same_bits(
            f"branchy reference, {values.dtype}", actual, numpy_to_half(values), values
        )


@pytest.mark.parametrize("negative", [False, True], ids=["positive", "negative"])
@pytest.mark.parametrize(
    ("what", "first_exponent", "last_exponent"),
    FLOAT32_SWEEPS,
    ids=["float32-subnormal", "half-range", "inf-nan"],
)
def test_every_float32_near_the_half_range_matches_the_reference(
    what, first_exponent, last_exponent, negative
):
    """Every float32 pattern of the swept exponents (all fractions), narrowed as float32
    and widened to float64, against the branchy reference: about 0.85e9 patterns in all."""
    first = (first_exponent << 23) | ((1 << 31) if negative else 0)
    count = (last_exponent - first_exponent + 1) << 23
    assert_float32_sweep_clean(f"{what}, negative={negative}", first, count)


@pytest.mark.parametrize("sign", [0, 1 << 31], ids=["positive", "negative"])
def test_every_float32_nan_narrows_like_numpy(sign):
    """All 2^23 - 1 NaN payloads of each sign, quiet and signaling, and inf, against NumPy
    itself (fast on NaNs): the kept top 10 payload bits, or payload 1 if they are zero."""
    patterns = np.arange(0x7F800000, 0x80000000, dtype=np.uint32) | np.uint32(sign)
    values = patterns.view(np.float32)
    actual = narrow_float32_to_half_array(values)
    assert_same_bits("narrow_float32_to_half_array", actual, numpy_to_half(values), values)


def test_float64_to_half_on_structured_patterns():
    values = float64_structured_inputs()
    expected = numpy_to_half(values)
    assert_same_bits("narrow_to_half_array", narrow_to_half_array(values), expected, values)
    in_numba = apply_scalar(float64_to_half_bits, values, np.uint16)
    assert_same_bits("float64_to_half_bits (Numba)", in_numba, expected, values)


def test_float64_to_half_on_random_inputs():
    values = float64_random_inputs()
    expected = numpy_to_half(values)
    assert_same_bits("narrow_to_half_array", narrow_to_half_array(values), expected, values)
    in_numba = apply_scalar(reference_float64_to_half_bits, values, np.uint16)
    assert_same_bits("branchy reference", in_numba, expected, values)


def test_round_to_half_on_structured_and_random_inputs():
    values = np.concatenate([float64_structured_inputs(), float64_random_inputs()])
    in_numba = apply_scalar(round_to_half, values, np.float64)
    assert_same_bits("round_to_half", in_numba, _numpy_round_to_half(values), values)


# --- decided_half ---------------------------------------------------------------------------

INF, NAN = float("inf"), float("nan")

# Hand-derived: the ends are v -+ (2e + 2^-52 |v|).
DECIDED_CASES = (
    # v, e, half bits, ok, why
    (1.0, 0.0, 0x3C00, True, "no error: both ends round to v"),
    (1.0 + 2.0**-11, 0.0, 0x3C00, False, "on the tie, even with no error: the widening"),
    (1.0, 2.0**-30, 0x3C00, True, "far from a tie"),
    (1.0 + 2.0**-11, 2.0**-30, 0x3C00, False, "on the tie 1 + 2^-11: the ends round apart"),
    (1.0 + 2.0**-11 + 2.0**-20, 2.0**-22, 0x3C01, True, "ends 2^-21 away, above the tie"),
    (1.0 + 2.0**-11 + 2.0**-20, 2.0**-21, 0x3C01, False, "the low end is the tie itself"),
    (0.0, 2.0**-40, 0x0000, False, "straddles zero: the ends are -0 and +0"),
    (2.0**-30, 2.0**-40, 0x0000, True, "tiny, positive: both ends round to +0"),
    (65519.0, 0.25, 0x7BFF, True, "ends 65518.5 and 65519.5, both below 65520"),
    (65519.0, 0.5, 0x7BFF, False, "the high end reaches the overflow threshold 65520"),
    (1e6, 1.0, 0x7C00, True, "both ends overflow to inf"),
    (1.0, INF, 0x3C00, False, "infinite error: never ok"),
    (1.0, NAN, 0x3C00, False, "NaN error: never ok, though both ends are the same NaN"),
    (INF, 1.0, 0x7C00, False, "infinite v: never ok"),
    (INF, INF, 0x7C00, False, "infinite error: never ok"),
    (NAN, 1.0, 0x7E00, False, "NaN v: never ok, though both ends are the same NaN"),
)


@pytest.mark.parametrize(("value", "error", "bits", "ok", "why"), DECIDED_CASES)
def test_decided_half_pinned(value, error, bits, ok, why):
    actual_bits, actual_ok = decided_half(value, error)
    assert (actual_bits, actual_ok) == (bits, ok), why
    expected_bits, expected_ok = decided_half_by_definition(np.array([value]), np.array([error]))
    assert (expected_bits[0], expected_ok[0]) == (bits, ok), f"the definition disagrees: {why}"


def test_decided_half_matches_its_definition_near_every_boundary():
    """Every boundary input with errors from 0 to about one half-ulp and inf / NaN."""
    values = float64_boundary_inputs()
    rng = np.random.default_rng(SEED + 2)
    magnitudes = np.where(np.isfinite(values), np.abs(values), 1.0)
    scale = magnitudes * 2.0 ** rng.integers(-16, -8, values.size)
    errors = np.where(rng.random(values.size) < 0.5, scale, rng.random(values.size) * scale)
    errors[::97] = 0.0
    errors[1::101] = HALF_SMALLEST_SUBNORMAL * rng.random(errors[1::101].size)
    errors[2::103] = INF
    errors[3::107] = NAN
    bits, oks = apply_decided_half(values, errors)
    expected_bits, expected_oks = decided_half_by_definition(values, errors)
    assert_same_bits("decided_half bits", bits, expected_bits, values)
    assert_same_bits("decided_half ok", oks, expected_oks, values)
    assert 0.2 < oks.mean() < 0.98, "the errors should leave both outcomes common"


@given(st.floats(), st.floats())
@example(1.0 + 2.0**-11, 0.0)
@example(-HALF_SMALLEST_SUBNORMAL / 2, 2.0**-80)
@example(HALF_OVERFLOW_THRESHOLD - 1.0, 0.5)
def test_decided_half_from_python(value, error):
    expected_bits, expected_ok = decided_half_by_definition(np.array([value]), np.array([error]))
    assert decided_half(value, error) == (expected_bits[0], expected_ok[0])


# --- vectorization -------------------------------------------------------------------------------

#: A vector type in LLVM IR, such as <8 x i16> or <4 x double>.
VECTOR_TYPE = re.compile(r"<\d+ x (?:i16|i32|i64|float|double)>")


def _loop_over(func):
    """A fresh (uncached) Numba loop out[i] = func(x[i]), so its optimized IR can be read."""

    @njit
    def loop(x, out):
        for i in range(x.size):
            out[i] = func(x[i])

    return loop


def _strict_loop():
    """A fresh loop like a strict-mode kernel's: round_to_half after every operation."""

    @njit
    def loop(x, out):
        for i in range(x.size):
            out[i] = round_to_half(round_to_half(x[i] * x[i]) + 0.5)

    return loop


@pytest.mark.parametrize(
    ("make_loop", "in_type", "out_type"),
    [
        (lambda: _loop_over(half_bits_to_float64), "uint16", "float64"),
        (lambda: _loop_over(half_bits_to_float32), "uint16", "float32"),
        (lambda: _loop_over(float64_to_half_bits), "float64", "uint16"),
        (lambda: _loop_over(float32_to_half_bits), "float32", "uint16"),
        (_strict_loop, "float64", "float64"),
    ],
    ids=["widen-float64", "widen-float32", "narrow-float64", "narrow-float32", "strict"],
)
def test_loops_calling_the_conversions_vectorize(make_loop, in_type, out_type):
    """The conversions are branch-free so that LLVM vectorizes such loops; the strict
    loop's chain of round_to_half calls was not vectorized while they had branches."""
    loop = make_loop()
    loop.compile(f"({in_type}[::1], {out_type}[::1])")
    ir = "".join(loop.inspect_llvm().values())
    assert VECTOR_TYPE.search(ir), "no vector type in the optimized loop"


# --- exhaustive -----------------------------------------------------------------------------------


@pytest.mark.slow
def test_every_float32_rounds_like_numpy():
    """All 2^32 float32 patterns, in chunks, through narrow_float32_to_half_array.

    NumPy's own cast dominates the run time: about 140 ns a value where it underflows to
    zero or meets a NaN (two fifths of all patterns), against 1-2 ns for ours.
    """
    offsets = np.arange(SLOW_CHUNK, dtype=np.uint32)
    patterns = np.empty(SLOW_CHUNK, dtype=np.uint32)  # reused, as is `expected`
    values = patterns.view(np.float32)
    expected = np.empty(SLOW_CHUNK, dtype=np.float16)
    with np.errstate(over="ignore"):
        for start in range(0, 1 << 32, SLOW_CHUNK):
            np.add(offsets, np.uint32(start), out=patterns)
            np.copyto(expected, values, casting="same_kind")
            actual = narrow_float32_to_half_array(values)
            label = f"chunk at 0x{start:08x}: narrow_float32_to_half_array"
            assert_same_bits(label, actual, expected.view(np.uint16), values)


@pytest.mark.slow
def test_every_float32_matches_the_branchy_reference():
    """All 2^32 float32 patterns, swept in Numba in chunks of 2^28, through both narrowing
    functions (the float64 one on the value widened exactly) against the branchy
    reference; about 16 s on one core."""
    chunk = 1 << 28
    for first in range(0, 1 << 32, chunk):
        assert_float32_sweep_clean(f"patterns 0x{first:08x} ..", first, chunk)
