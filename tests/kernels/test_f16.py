"""Bit-exact tests of the float16 conversion layer (kernels/_f16.py) against NumPy.

NumPy is the reference. Its float32->float16 and float64->float16 casts round correctly
(nearest, ties to even), and its float64 cast rounds directly, not through float32:
``test_numpy_float64_to_half_is_direct`` pins that with values where a float32 detour
lands on a false tie. Every comparison is of bit patterns, NaNs included.

The boundary sets are every half value and every midpoint between consecutive halves
(both signs, subnormals, 2^-25 between 0 and the smallest subnormal, 65520 between
65504 and 2^16), each with its +-8 ULP neighbours in the source format, plus special values.
The exhaustive run over all 2^32 float32 values is marked ``slow`` (deselected by
pyproject's addopts): ``pytest -m slow tests/kernels/test_f16.py``, about 4-8 minutes on 2 cores.

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
    float32_to_half_bits,
    float64_to_half_bits,
    half_bits_to_float32,
    half_bits_to_float64,
    narrow_float32_to_half_array,
    narrow_to_half_array,
    round_to_half,
    widen_half_array,
    widen_half_array_to_float32,
)
from tests.helpers.assertions import assert_same_bits

ALL_HALF_BITS = np.arange(1 << 16).astype(np.uint16)
HALF_POSITIVE_INF_BITS = 0x7C00
ULP_RADIUS = 8  # neighbours on each side of a boundary, in ULPs of the source format
SLOW_CHUNK = 1 << 21  # float32 values per chunk of the exhaustive run (2^11 chunks)

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
