"""IEEE 754 binary16 (float16) bit conversions for Numba CPU kernels.

Numba has no float16 arithmetic on the CPU. liptable's kernels therefore receive float16
arrays viewed as ``uint16`` bits, widen them with the functions here, compute in float32 or
float64, and round the result back to half precision ("mixed" mode). In "strict" mode every
intermediate result goes through :func:`round_to_half`, as pure half arithmetic would.

The format (shared/seeds/001_76ce3a8a4b6079c3.txt, Eq. 38): 1 sign bit, 5 exponent bits,
10 fraction bits. A normal number (exponent field 1..30) is::

    (-1)^sign * 2^(exponent - 15) * (1 + fraction / 1024)

An exponent field of 0 holds zero and the subnormals, ``(-1)^sign * 2^-14 * fraction/1024``;
an exponent field of 31 holds infinity (fraction 0) and NaN (fraction != 0).
The largest finite value is 65504 = (2 - 2^-10) * 2^15, the smallest normal 2^-14 and the
smallest subnormal 2^-24.

Rounding to half precision is round-to-nearest, ties-to-even, done directly from the
source format (rounding a float64 through float32 first would round twice and could land
on a false tie). Results below the subnormal range round to a signed zero; a magnitude
at or above 65520, the midpoint between 65504 and the next power 2^16, rounds to infinity.

NaN: widening copies the 10-bit payload into the top of the wider fraction; narrowing keeps
the top 10 bits of the payload and, if those are all zero, sets the lowest bit so the result
stays a NaN. The sign is kept. This is NumPy's software conversion (``npy_halfbits_to_*``,
``npy_*bits_to_halfbits``) bit for bit: a quiet NaN stays quiet, and a signaling NaN is
passed on unquieted, as NumPy does on builds without hardware float16 conversion.

The conversions are branch-free: integer shifts, masks and adds on the bit patterns (read
and written with ``reinterpret``), one floating-point addition that rounds the half
subnormal range, and selects between the cases, all computed. LLVM therefore vectorizes a
Numba loop that calls them (and has no other obstacle); the earlier branchy versions were
if-converted in a simple loop, but not in a chain of strict-mode ``round_to_half`` calls,
for one. Measured on one core
with AVX-512, 4M elements, in ns per element: widening 0.2 (as before), narrowing 0.2-0.3
(0.55 with branches), a loop of two ``round_to_half`` 0.9 (15.6); NumPy's ``astype``
takes 0.7-1.7, more where results are subnormal. :func:`decided_half` tells whether a
value known only within an error bound still has a determined half rounding.

>>> hex(float64_to_half_bits(65519.99))
'0x7bff'
>>> hex(float64_to_half_bits(65520.0))
'0x7c00'
>>> half_bits_to_float64(0x0001) == 2.0**-24
True
>>> round_to_half(1.0 + 2.0**-11 + 2.0**-40)  # above the tie 1 + 2^-11: rounds up
1.0009765625
>>> decided_half(1.0, 2.0**-30)  # every real within 2^-30 of 1 rounds to 0x3C00
(15360, True)
>>> decided_half(1.0 + 2.0**-11, 2.0**-30)  # a tie: the two sides round apart
(15360, False)
"""

from __future__ import annotations

import numpy as np
from numba import njit
from numba.core import errors, types
from numba.extending import intrinsic

__all__ = [
    "HALF_MAX",
    "HALF_OVERFLOW_THRESHOLD",
    "HALF_SMALLEST_NORMAL",
    "HALF_SMALLEST_SUBNORMAL",
    "decided_half",
    "float32_to_half_bits",
    "float64_to_half_bits",
    "half_bits_to_float32",
    "half_bits_to_float64",
    "narrow_float32_to_half_array",
    "narrow_to_half_array",
    "reinterpret",
    "round_to_half",
    "widen_half_array",
    "widen_half_array_to_float32",
]

# binary16 bit fields: s eeeee ffffffffff
HALF_BITS_MASK = 0xFFFF
HALF_SIGN_MASK = 0x8000
HALF_EXPONENT_MASK = 0x7C00
HALF_FRACTION_MASK = 0x03FF
HALF_FRACTION_BITS = 10
HALF_EXPONENT_BIAS = 15
HALF_EXPONENT_SPECIAL = 0x1F  # all-ones exponent field: infinity or NaN
HALF_INF_BITS = HALF_EXPONENT_MASK  # +inf: all-ones exponent, zero fraction
HALF_MIN_EXPONENT = 1 - HALF_EXPONENT_BIAS  # -14, exponent of the smallest normal
HALF_MAX_EXPONENT = HALF_EXPONENT_SPECIAL - 1 - HALF_EXPONENT_BIAS  # 15, exponent of HALF_MAX
# Subnormals are multiples of 2^-24; the smallest value that does not round to zero is
# just above half of that, 2^-25.
HALF_SUBNORMAL_EXPONENT = HALF_MIN_EXPONENT - HALF_FRACTION_BITS  # -24

HALF_MAX = 65504.0  # (2 - 2^-10) * 2^15
HALF_OVERFLOW_THRESHOLD = 65520.0  # midpoint of 65504 and 2^16: |v| >= this rounds to inf
HALF_SMALLEST_NORMAL = 2.0**HALF_MIN_EXPONENT
HALF_SMALLEST_SUBNORMAL = 2.0**HALF_SUBNORMAL_EXPONENT

# binary64 and binary32 bit fields (sign bit on top of exponent and fraction)
FLOAT64_FRACTION_BITS = 52
FLOAT64_EXPONENT_BIAS = 1023
FLOAT64_EXPONENT_SPECIAL = 0x7FF
FLOAT64_FRACTION_MASK = (1 << FLOAT64_FRACTION_BITS) - 1
FLOAT64_MAGNITUDE_MASK = (1 << 63) - 1  # all but the sign bit
FLOAT32_FRACTION_BITS = 23
FLOAT32_EXPONENT_BIAS = 127
FLOAT32_EXPONENT_SPECIAL = 0xFF
FLOAT32_FRACTION_MASK = (1 << FLOAT32_FRACTION_BITS) - 1
FLOAT32_MAGNITUDE_MASK = (1 << 31) - 1


@intrinsic
def reinterpret(typingctx, value, target):
    """Reinterpret the bits of scalar ``value`` as type ``target`` (same width), like a
    C union or ``ndarray.view``; NaN payloads pass through untouched."""
    to = getattr(target, "instance_type", None)  # target is a type such as np.int64
    if not (isinstance(value, types.Number) and isinstance(to, types.Number)):
        return None
    if value.bitwidth != to.bitwidth:
        raise errors.TypingError(
            f"cannot reinterpret {value} ({value.bitwidth} bits) as {to} ({to.bitwidth} bits)"
        )

    def codegen(context, builder, signature, args):
        return builder.bitcast(args[0], context.get_value_type(to))

    return to(value, target), codegen


# --- widening: half bits -> float64 / float32 (always exact) ---------------------------
#
# Branch-free: every path is computed and the result picked with selects, so a loop over
# an array vectorizes. A normal half moves its exponent and fraction fields into place
# with one shift and the difference of the biases added; an infinity or NaN (exponent 31)
# gets that difference once more, which takes its exponent to all ones; a zero or
# subnormal f * 2^-24 is 2^-14 * (1 + f / 1024) - 2^-14, an exact subtraction.

_F64_WIDEN_SHIFT = FLOAT64_FRACTION_BITS - HALF_FRACTION_BITS  # 42
_F64_WIDEN_REBIAS = (FLOAT64_EXPONENT_BIAS - HALF_EXPONENT_BIAS) << FLOAT64_FRACTION_BITS
_F32_WIDEN_SHIFT = FLOAT32_FRACTION_BITS - HALF_FRACTION_BITS  # 13
_F32_WIDEN_REBIAS = (FLOAT32_EXPONENT_BIAS - HALF_EXPONENT_BIAS) << FLOAT32_FRACTION_BITS
assert HALF_EXPONENT_SPECIAL + 2 * (FLOAT64_EXPONENT_BIAS - HALF_EXPONENT_BIAS) == (
    FLOAT64_EXPONENT_SPECIAL
)
assert HALF_EXPONENT_SPECIAL + 2 * (FLOAT32_EXPONENT_BIAS - HALF_EXPONENT_BIAS) == (
    FLOAT32_EXPONENT_SPECIAL
)
_HALF_SMALLEST_NORMAL_F32 = np.float32(HALF_SMALLEST_NORMAL)


@njit(cache=True)
def half_bits_to_float64(h: int) -> float:
    """The float64 value of the half-precision bit pattern ``h`` (low 16 bits of an integer).

    Exact for every pattern: normals and subnormals map to the same real number, signed
    zeros and infinities keep their sign, and a NaN keeps sign and payload (the 10 fraction
    bits become the top of the float64 fraction), as ``np.float16.astype(np.float64)`` does.
    Branch-free (integer shifts, adds and selects), so loops calling it vectorize.
    """
    h = np.int64(h) & HALF_BITS_MASK
    magnitude = h & ~HALF_SIGN_MASK
    normal = (magnitude << _F64_WIDEN_SHIFT) + _F64_WIDEN_REBIAS
    special = normal + _F64_WIDEN_REBIAS  # exponent 31 + 2 (1023 - 15) = 2047
    # Exponent field 0 read as 1: 2^-14 (1 + f/1024), minus 2^-14 leaves f 2^-24 exactly.
    as_normal = reinterpret(normal + (1 << FLOAT64_FRACTION_BITS), np.float64)
    subnormal = reinterpret(as_normal - HALF_SMALLEST_NORMAL, np.int64)
    wide = special if magnitude >= HALF_INF_BITS else normal
    wide = subnormal if magnitude < (1 << HALF_FRACTION_BITS) else wide
    sign = (h & HALF_SIGN_MASK) << (63 - 15)
    return reinterpret(wide | sign, np.float64)


@njit(cache=True)
def half_bits_to_float32(h: int) -> np.float32:
    """The float32 value of the half-precision bit pattern ``h``; see
    :func:`half_bits_to_float64`. Exact for every pattern, branch-free.

    Called from Python, a float32 result is returned as a Python float (a double); that
    conversion quiets a signaling NaN. Inside Numba code, or through
    :func:`widen_half_array_to_float32`, the bits are kept.
    """
    h = np.int64(h) & HALF_BITS_MASK
    magnitude = h & ~HALF_SIGN_MASK
    normal = (magnitude << _F32_WIDEN_SHIFT) + _F32_WIDEN_REBIAS
    special = normal + _F32_WIDEN_REBIAS  # exponent 31 + 2 (127 - 15) = 255
    as_normal = reinterpret(np.int32(normal + (1 << FLOAT32_FRACTION_BITS)), np.float32)
    subnormal = np.int64(reinterpret(as_normal - _HALF_SMALLEST_NORMAL_F32, np.int32))
    wide = special if magnitude >= HALF_INF_BITS else normal
    wide = subnormal if magnitude < (1 << HALF_FRACTION_BITS) else wide
    sign = (h & HALF_SIGN_MASK) << (31 - 15)
    return reinterpret(np.int32(wide | sign), np.float32)


# --- narrowing: float64 / float32 -> half bits (round to nearest, ties to even) ---------
#
# Branch-free as well. The magnitude's bits are rounded by three rules, all computed, one
# selected by comparing those bits (which order like the magnitudes):
#
# * below 2^-14 (half subnormal or zero): the FPU rounds. |v| + M, with M = 2^-24 * 2^f
#   for f fraction bits, lands in M's binade, whose spacing is exactly 2^-24, so the
#   addition rounds |v| to a multiple of 2^-24, ties to even (M is an even multiple), and
#   the sum's bits minus M's bits count those multiples: the half bits, 1024 = 0x0400 when
#   rounding up to the smallest normal. Everything at most 2^-25 gives 0.
# * 2^-14 up to 2^16: integer rounding of the bits. Subtracting the difference of the
#   biases from the exponent field and adding just under half a half-ulp, plus the lowest
#   kept bit (ties to even), carries into the kept bits exactly when rounding up; a carry
#   out of the fraction increments the exponent, and from 65520 up reaches 0x7C00 (inf).
# * 2^16 and above give inf, NaNs their kept payload (never 0, which would be inf).

_F64_SUBNORMAL_MAGIC = 2.0 ** (FLOAT64_FRACTION_BITS + HALF_SUBNORMAL_EXPONENT)  # 2^28
_F32_SUBNORMAL_MAGIC = np.float32(2.0 ** (FLOAT32_FRACTION_BITS + HALF_SUBNORMAL_EXPONENT))
_F64_SUBNORMAL_MAGIC_BITS = int(np.float64(_F64_SUBNORMAL_MAGIC).view(np.int64))
_F32_SUBNORMAL_MAGIC_BITS = int(_F32_SUBNORMAL_MAGIC.view(np.int32))


@njit(cache=True)
def _narrow_magnitude(magnitude, subnormal, fraction_bits, exponent_bias, exponent_special):
    """Half bits, sign clear, of the magnitude whose bits (exponent and fraction fields of
    a format with ``fraction_bits``, ``exponent_bias`` and all-ones exponent
    ``exponent_special``) are ``magnitude``; ``subnormal`` is the caller's FPU-rounded
    result for magnitudes below 2^-14. Branch-free; returns an int64."""
    shift = fraction_bits - HALF_FRACTION_BITS
    smallest_normal = (exponent_bias + HALF_MIN_EXPONENT) << fraction_bits  # 2^-14
    overflow = (exponent_bias + HALF_MAX_EXPONENT + 1) << fraction_bits  # 2^16
    infinity = exponent_special << fraction_bits
    rebias = (HALF_EXPONENT_BIAS - exponent_bias) << fraction_bits
    kept_lowest = (magnitude >> shift) & 1
    normal = (magnitude + rebias + ((1 << (shift - 1)) - 1) + kept_lowest) >> shift
    nan = HALF_INF_BITS | max((magnitude >> shift) & HALF_FRACTION_MASK, 1)
    half = subnormal if magnitude < smallest_normal else normal
    half = HALF_INF_BITS if magnitude >= overflow else half
    return nan if magnitude > infinity else half


@njit(cache=True)
def float64_to_half_bits(v: float) -> np.uint16:
    """Bits of ``v`` (converted to float64) rounded to half precision, ties to even.

    Rounds directly from float64, never through float32. ``|v| >= 65520`` gives +-inf,
    ``|v| <= 2^-25`` a zero of the sign of ``v``, and a NaN a NaN with the top 10 bits of its
    payload (or payload 1 if those are zero), bit for bit as ``np.float16(v)``.
    Branch-free, so loops calling it vectorize.
    """
    v = np.float64(v)
    bits = reinterpret(v, np.int64)
    magnitude = bits & FLOAT64_MAGNITUDE_MASK
    subnormal = reinterpret(abs(v) + _F64_SUBNORMAL_MAGIC, np.int64) - _F64_SUBNORMAL_MAGIC_BITS
    half = _narrow_magnitude(
        magnitude, subnormal, FLOAT64_FRACTION_BITS, FLOAT64_EXPONENT_BIAS, FLOAT64_EXPONENT_SPECIAL
    )
    return np.uint16(((bits >> (63 - 15)) & HALF_SIGN_MASK) | half)


@njit(cache=True)
def float32_to_half_bits(v: np.float32) -> np.uint16:
    """Bits of the float32 ``v`` rounded to half precision, ties to even; see
    :func:`float64_to_half_bits`. ``v`` must be a float32 (a float64 argument is a
    typing error, not a silent second rounding); from Python pass ``np.float32(x)``.
    """
    bits = np.int64(reinterpret(v, np.int32))
    magnitude = bits & FLOAT32_MAGNITUDE_MASK
    subnormal = (
        np.int64(reinterpret(abs(v) + _F32_SUBNORMAL_MAGIC, np.int32)) - _F32_SUBNORMAL_MAGIC_BITS
    )
    half = _narrow_magnitude(
        magnitude, subnormal, FLOAT32_FRACTION_BITS, FLOAT32_EXPONENT_BIAS, FLOAT32_EXPONENT_SPECIAL
    )
    return np.uint16(((bits >> (31 - 15)) & HALF_SIGN_MASK) | half)


@njit(cache=True)
def round_to_half(v: float) -> float:
    """``v`` rounded to the nearest binary16 value (ties to even), returned as a float64.

    Equal to ``np.float64(np.float16(v))``, including inf past 65520 and signed zeros.
    Strict-fp16 kernels pass every intermediate result through it. A float32 ``v`` is
    widened exactly first, so the result is the same as rounding the float32 itself.
    """
    return half_bits_to_float64(float64_to_half_bits(v))


#: decided_half's widening of the interval, relative to |v|: twice float64's unit roundoff.
_ROUNDING_SLACK = 2.0**-52


@njit(cache=True, inline="always")
def decided_half(v: float, e: float) -> tuple[np.uint16, bool]:
    """``(bits, ok)``: ``bits = float64_to_half_bits(v)``; ``ok`` when the ends ``v -+ w``,
    ``w = 2e + 2^-52 |v|``, round to the same half bits, so that every real within ``e`` of
    ``v`` rounds to ``bits`` (which is then the correctly rounded half). The widening by
    ``2^-52 |v|`` keeps the rounding of the ends themselves from moving them inwards.

    The half counterpart of ``kernels._vmath.decided_float32``. The ends are compared as
    bits, so an interval that straddles 0 (``-0`` and ``+0``) is undecided; a NaN or
    infinite ``e`` or ``v`` is never ok. Branch-free.
    """
    v = np.float64(v)
    w = 2.0 * np.float64(e) + _ROUNDING_SLACK * abs(v)
    low = float64_to_half_bits(v - w)
    high = float64_to_half_bits(v + w)
    return float64_to_half_bits(v), (low == high) & (w < np.inf)


# --- arrays: contiguous 1-D, one Numba loop each ----------------------------------------


@njit(cache=True)
def widen_half_array(bits: np.ndarray) -> np.ndarray:
    """float64 values of a 1-D array of half bit patterns (``x.view(np.uint16)``).

    Raises TypeError unless ``bits`` has 2-byte elements.
    """
    if bits.itemsize != 2:
        raise TypeError("bits must hold 16-bit patterns: pass a float16 array .view(np.uint16)")
    out = np.empty(bits.size, dtype=np.float64)
    for i in range(bits.size):
        out[i] = half_bits_to_float64(bits[i])
    return out


@njit(cache=True)
def widen_half_array_to_float32(bits: np.ndarray) -> np.ndarray:
    """float32 values of a 1-D array of half bit patterns; see :func:`widen_half_array`."""
    if bits.itemsize != 2:
        raise TypeError("bits must hold 16-bit patterns: pass a float16 array .view(np.uint16)")
    out = np.empty(bits.size, dtype=np.float32)
    for i in range(bits.size):
        out[i] = half_bits_to_float32(bits[i])
    return out


@njit(cache=True)
def narrow_to_half_array(values: np.ndarray) -> np.ndarray:
    """Half bit patterns (uint16) of a 1-D float64 array, each rounded to nearest even.

    ``narrow_to_half_array(x).view(np.float16)`` equals ``x.astype(np.float16)``.
    """
    out = np.empty(values.size, dtype=np.uint16)
    for i in range(values.size):
        out[i] = float64_to_half_bits(values[i])
    return out


@njit(cache=True)
def narrow_float32_to_half_array(values: np.ndarray) -> np.ndarray:
    """Half bit patterns (uint16) of a 1-D float32 array; see :func:`narrow_to_half_array`."""
    out = np.empty(values.size, dtype=np.uint16)
    for i in range(values.size):
        out[i] = float32_to_half_bits(values[i])
    return out
