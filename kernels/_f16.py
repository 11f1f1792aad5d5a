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

>>> hex(float64_to_half_bits(65519.99))
'0x7bff'
>>> hex(float64_to_half_bits(65520.0))
'0x7c00'
>>> half_bits_to_float64(0x0001) == 2.0**-24
True
>>> round_to_half(1.0 + 2.0**-11 + 2.0**-40)  # above the tie 1 + 2^-11: rounds up
1.0009765625
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
    "float32_to_half_bits",
    "float64_to_half_bits",
    "half_bits_to_float32",
    "half_bits_to_float64",
    "narrow_float32_to_half_array",
    "narrow_to_half_array",
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
_HALF_SMALLEST_SUBNORMAL_F32 = np.float32(HALF_SMALLEST_SUBNORMAL)

# binary64 and binary32 bit fields (sign bit on top of exponent and fraction)
FLOAT64_FRACTION_BITS = 52
FLOAT64_EXPONENT_BIAS = 1023
FLOAT64_EXPONENT_SPECIAL = 0x7FF
FLOAT64_FRACTION_MASK = (1 << FLOAT64_FRACTION_BITS) - 1
FLOAT32_FRACTION_BITS = 23
FLOAT32_EXPONENT_BIAS = 127
FLOAT32_EXPONENT_SPECIAL = 0xFF
FLOAT32_FRACTION_MASK = (1 << FLOAT32_FRACTION_BITS) - 1


@intrinsic
def _reinterpret(typingctx, value, target):
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


@njit(cache=True)
def half_bits_to_float64(h: int) -> float:
    """The float64 value of the half-precision bit pattern ``h`` (low 16 bits of an integer).

    Exact for every pattern: normals and subnormals map to the same real number, signed
    zeros and infinities keep their sign, and a NaN keeps sign and payload (the 10 fraction
    bits become the top of the float64 fraction), as ``np.float16.astype(np.float64)`` does.
    """
    h = np.int64(h & HALF_BITS_MASK)
    exponent = (h & HALF_EXPONENT_MASK) >> HALF_FRACTION_BITS
    fraction = h & HALF_FRACTION_MASK
    payload_shift = FLOAT64_FRACTION_BITS - HALF_FRACTION_BITS
    if exponent == 0:  # zero or subnormal: fraction * 2^-24, exact in float64
        magnitude = fraction * HALF_SMALLEST_SUBNORMAL
    elif exponent == HALF_EXPONENT_SPECIAL:  # infinity or NaN
        special = (FLOAT64_EXPONENT_SPECIAL << FLOAT64_FRACTION_BITS) | (fraction << payload_shift)
        magnitude = _reinterpret(special, np.float64)
    else:
        rebiased = exponent - HALF_EXPONENT_BIAS + FLOAT64_EXPONENT_BIAS
        normal = (rebiased << FLOAT64_FRACTION_BITS) | (fraction << payload_shift)
        magnitude = _reinterpret(normal, np.float64)
    return -magnitude if h & HALF_SIGN_MASK else magnitude


@njit(cache=True)
def half_bits_to_float32(h: int) -> np.float32:
    """The float32 value of the half-precision bit pattern ``h``; see
    :func:`half_bits_to_float64`. Exact for every pattern.

    Called from Python, a float32 result is returned as a Python float (a double); that
    conversion quiets a signaling NaN. Inside Numba code, or through
    :func:`widen_half_array_to_float32`, the bits are kept.
    """
    h = np.int64(h & HALF_BITS_MASK)
    exponent = (h & HALF_EXPONENT_MASK) >> HALF_FRACTION_BITS
    fraction = h & HALF_FRACTION_MASK
    payload_shift = FLOAT32_FRACTION_BITS - HALF_FRACTION_BITS
    if exponent == 0:  # zero or subnormal: fraction * 2^-24, exact in float32
        magnitude = np.float32(fraction) * _HALF_SMALLEST_SUBNORMAL_F32
    elif exponent == HALF_EXPONENT_SPECIAL:  # infinity or NaN
        special = (FLOAT32_EXPONENT_SPECIAL << FLOAT32_FRACTION_BITS) | (fraction << payload_shift)
        magnitude = _reinterpret(np.int32(special), np.float32)
    else:
        rebiased = exponent - HALF_EXPONENT_BIAS + FLOAT32_EXPONENT_BIAS
        normal = (rebiased << FLOAT32_FRACTION_BITS) | (fraction << payload_shift)
        magnitude = _reinterpret(np.int32(normal), np.float32)
    return -magnitude if h & HALF_SIGN_MASK else magnitude


# --- narrowing: float64 / float32 -> half bits (round to nearest, ties to even) ---------


@njit(cache=True)
def _fields_to_half_bits(negative, exponent, fraction, fraction_bits, exponent_bias, special):
    """Round the binary float with the given fields to half bits, ties to even.

    ``exponent`` is the biased exponent field, ``fraction`` the fraction field of a format
    with ``fraction_bits`` fraction bits, bias ``exponent_bias`` and all-ones exponent
    ``special``. Returns the half bit pattern as an int64.
    """
    sign = HALF_SIGN_MASK if negative else 0
    if exponent == special:
        if fraction == 0:
            return sign | HALF_INF_BITS
        payload = fraction >> (fraction_bits - HALF_FRACTION_BITS)  # top 10 payload bits
        return sign | HALF_INF_BITS | max(payload, 1)  # ... but never turn NaN into inf
    unbiased = exponent - exponent_bias  # the source's subnormals fall below the cut-off
    if unbiased > HALF_MAX_EXPONENT:  # |v| >= 2^16
        return sign | HALF_INF_BITS
    if unbiased < HALF_SUBNORMAL_EXPONENT - 1:  # |v| < 2^-25: below half the smallest
        return sign
    significand = fraction | (1 << fraction_bits)  # v = significand * 2^(unbiased - fb)
    # Keep the bits worth at least one half ulp: 2^(unbiased - 10) for a normal result,
    # 2^-24 for a subnormal one. The result's exponent field is added on top of the
    # significand including its implicit leading 1, hence the "- 1": a carry out of the
    # significand (rounding up to the next power of two, or past HALF_MAX to inf) then
    # increments the exponent field by itself.
    if unbiased >= HALF_MIN_EXPONENT:
        shift = fraction_bits - HALF_FRACTION_BITS
        exponent_field = (unbiased + HALF_EXPONENT_BIAS - 1) << HALF_FRACTION_BITS
    else:
        shift = fraction_bits - HALF_FRACTION_BITS + (HALF_MIN_EXPONENT - unbiased)
        exponent_field = 0
    kept = significand >> shift
    dropped = significand & ((1 << shift) - 1)
    halfway = 1 << (shift - 1)
    if dropped > halfway or (dropped == halfway and kept & 1):
        kept += 1
    return sign | (exponent_field + kept)


@njit(cache=True)
def float64_to_half_bits(v: float) -> np.uint16:
    """Bits of ``v`` (converted to float64) rounded to half precision, ties to even.

    Rounds directly from float64, never through float32. ``|v| >= 65520`` gives +-inf,
    ``|v| <= 2^-25`` a zero of the sign of ``v``, and a NaN a NaN with the top 10 bits of its
    payload (or payload 1 if those are zero), bit for bit as ``np.float16(v)``.
    """
    bits = _reinterpret(np.float64(v), np.int64)
    half = _fields_to_half_bits(
        bits < 0,
        (bits >> FLOAT64_FRACTION_BITS) & FLOAT64_EXPONENT_SPECIAL,
        bits & FLOAT64_FRACTION_MASK,
        FLOAT64_FRACTION_BITS,
        FLOAT64_EXPONENT_BIAS,
        FLOAT64_EXPONENT_SPECIAL,
    )
    return np.uint16(half)


@njit(cache=True)
def float32_to_half_bits(v: np.float32) -> np.uint16:
    """Bits of the float32 ``v`` rounded to half precision, ties to even; see
    :func:`float64_to_half_bits`. ``v`` must be a float32 (a float64 argument is a
    typing error, not a silent second rounding); from Python pass ``np.float32(x)``.
    """
    bits = np.int64(_reinterpret(v, np.int32))
    half = _fields_to_half_bits(
        bits < 0,
        (bits >> FLOAT32_FRACTION_BITS) & FLOAT32_EXPONENT_SPECIAL,
        bits & FLOAT32_FRACTION_MASK,
        FLOAT32_FRACTION_BITS,
        FLOAT32_EXPONENT_BIAS,
        FLOAT32_EXPONENT_SPECIAL,
    )
    return np.uint16(half)


@njit(cache=True)
def round_to_half(v: float) -> float:
    """``v`` rounded to the nearest binary16 value (ties to even), returned as a float64.

    Equal to ``np.float64(np.float16(v))``, including inf past 65520 and signed zeros.
    Strict-fp16 kernels pass every intermediate result through it. A float32 ``v`` is
    widened exactly first, so the result is the same as rounding the float32 itself.
    """
    return half_bits_to_float64(float64_to_half_bits(v))


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
