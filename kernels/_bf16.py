"""bfloat16 bit conversions for Numba CPU kernels.

bfloat16 (``ml_dtypes.bfloat16``) is the top half of a float32: 1 sign bit, float32's 8
exponent bits (bias 127) and 7 fraction bits, so 8 significant bits over float32's range.
A normal number (exponent field 1..254) is::

    (-1)^sign * 2^(exponent - 127) * (1 + fraction / 128)

An exponent field of 0 holds zero and the subnormals, ``(-1)^sign * 2^-126 * fraction/128``
(multiples of 2^-133); 255 holds infinity (fraction 0) and NaN. The largest finite value is
(2 - 2^-7) * 2^127 = 3.3895e38, the smallest normal 2^-126.

As for float16 (:mod:`kernels._f16`), the kernels read bfloat16 arrays as ``uint16`` bits,
widen them exactly, compute in float64 and round once ("mixed" mode), or round every
intermediate with :func:`round_to_bfloat16` ("strict" mode).

Rounding is to nearest, ties to even, directly from float64. That is not what
``ml_dtypes`` does: its float64 -> bfloat16 cast goes through float32 and rounds twice, so
``np.array([1 + 2**-8 + 2**-40]).astype(bfloat16)`` gives 1, although the value lies above
the midpoint 1 + 2^-8 between 1 and 1 + 2^-7 and rounds to 1 + 2^-7. From float32 the cast
rounds once, and there the two agree bit for bit (tests/kernels/test_bf16.py checks every
rounding boundary). A magnitude at or above 2^128 - 2^119, the midpoint between the largest
bfloat16 and 2^128, rounds to infinity.

NaN: as ``ml_dtypes``, narrowing gives the quiet NaN ``0x7FC0`` with the input's sign, and
widening goes through float32 (a signaling NaN is quieted by the float32 -> float64 step).

>>> hex(float64_to_bfloat16_bits(1.0 + 2.0**-8 + 2.0**-40))
'0x3f81'
>>> bfloat16_bits_to_float64(0x0001) == 2.0**-133
True
>>> round_to_bfloat16(3.385e38) == BFLOAT16_MAX, round_to_bfloat16(BFLOAT16_OVERFLOW_THRESHOLD)
(True, inf)
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable
from typing import Any

import numpy as np
from numba import njit, prange

from kernels._f16 import (
    FLOAT64_EXPONENT_BIAS,
    FLOAT64_EXPONENT_SPECIAL,
    FLOAT64_FRACTION_BITS,
    FLOAT64_MAGNITUDE_MASK,
    reinterpret,
)
from kernels._validate import BFLOAT16

__all__ = [
    "BFLOAT16",
    "BFLOAT16_MAX",
    "BFLOAT16_OVERFLOW_THRESHOLD",
    "BFLOAT16_SMALLEST_NORMAL",
    "BFLOAT16_SMALLEST_SUBNORMAL",
    "bfloat16_bits_to_float64",
    "bfloat16_boundary",
    "bfloat16_settled",
    "decided_bfloat16",
    "float64_to_bfloat16_bits",
    "round_to_bfloat16",
    "to_bfloat16",
    "widened",
]

# bfloat16 bit fields: s eeeeeeee fffffff
BFLOAT16_SIGN_MASK = 0x8000
BFLOAT16_FRACTION_BITS = 7
BFLOAT16_EXPONENT_BIAS = 127
BFLOAT16_INF_BITS = 0x7F80
BFLOAT16_QUIET_NAN_BITS = 0x7FC0
BFLOAT16_MIN_EXPONENT = 1 - BFLOAT16_EXPONENT_BIAS  # -126
BFLOAT16_MAX_EXPONENT = 127
BFLOAT16_SUBNORMAL_EXPONENT = BFLOAT16_MIN_EXPONENT - BFLOAT16_FRACTION_BITS  # -133

BFLOAT16_MAX = (2.0 - 2.0**-BFLOAT16_FRACTION_BITS) * 2.0**BFLOAT16_MAX_EXPONENT
#: The midpoint of BFLOAT16_MAX and 2^128: a magnitude at or above it rounds to infinity.
BFLOAT16_OVERFLOW_THRESHOLD = (2.0 - 2.0 ** -(BFLOAT16_FRACTION_BITS + 1)) * 2.0**127
BFLOAT16_SMALLEST_NORMAL = 2.0**BFLOAT16_MIN_EXPONENT
BFLOAT16_SMALLEST_SUBNORMAL = 2.0**BFLOAT16_SUBNORMAL_EXPONENT


@njit(cache=True)
def bfloat16_bits_to_float64(b: int) -> float:
    """The float64 value of the bfloat16 bit pattern ``b`` (low 16 bits of an integer).

    The pattern shifted up 16 bits is a float32 of the same value, which float64 holds
    exactly: zeros keep their sign, subnormals and infinities their value, a NaN stays a
    NaN (quiet), as ``bfloat16.astype(np.float64)``. Branch-free.
    """
    wide = np.int32((np.int64(b) & 0xFFFF) << 16)
    return np.float64(reinterpret(wide, np.float32))


# Narrowing from float64, branch-free like kernels._f16's, by three rules selected on the
# magnitude's bits:
# * below 2^-126 (subnormal or zero): |v| + M with M = 2^(52 - 133) lies in M's binade,
#   spaced 2^-133, so the FPU rounds |v| to a multiple of 2^-133 (ties to even); the sum's
#   bits minus M's count those multiples, 0x80 when rounding up to the smallest normal;
# * 2^-126 up to 2^128: integer rounding of the bits (rebias the exponent field, add just
#   under half a unit of the last kept bit plus that bit, shift); a carry out of the
#   fraction increments the exponent, and from the overflow threshold on reaches 0x7F80;
# * 2^128 and above give inf, a NaN the quiet NaN.

_SHIFT = FLOAT64_FRACTION_BITS - BFLOAT16_FRACTION_BITS  # 45
_REBIAS = (BFLOAT16_EXPONENT_BIAS - FLOAT64_EXPONENT_BIAS) << FLOAT64_FRACTION_BITS
_SMALLEST_NORMAL_BITS = (FLOAT64_EXPONENT_BIAS + BFLOAT16_MIN_EXPONENT) << FLOAT64_FRACTION_BITS
_OVERFLOW_BITS = (FLOAT64_EXPONENT_BIAS + BFLOAT16_MAX_EXPONENT + 1) << FLOAT64_FRACTION_BITS
_INFINITY_BITS = FLOAT64_EXPONENT_SPECIAL << FLOAT64_FRACTION_BITS
_SUBNORMAL_MAGIC = 2.0 ** (FLOAT64_FRACTION_BITS + BFLOAT16_SUBNORMAL_EXPONENT)  # 2^-81
_SUBNORMAL_MAGIC_BITS = int(np.float64(_SUBNORMAL_MAGIC).view(np.int64))


@njit(cache=True)
def float64_to_bfloat16_bits(v: float) -> np.uint16:
    """Bits of ``v`` (converted to float64) rounded to bfloat16, ties to even, directly
    from float64 (never through float32). ``|v| >= BFLOAT16_OVERFLOW_THRESHOLD`` gives +-inf,
    ``|v| <= 2^-134`` a zero of the sign of ``v``, a NaN the quiet NaN with its sign.
    Branch-free, so loops calling it vectorize.
    """
    v = np.float64(v)
    bits = reinterpret(v, np.int64)
    magnitude = bits & FLOAT64_MAGNITUDE_MASK
    subnormal = reinterpret(abs(v) + _SUBNORMAL_MAGIC, np.int64) - _SUBNORMAL_MAGIC_BITS
    kept_lowest = (magnitude >> _SHIFT) & 1
    normal = (magnitude + _REBIAS + ((1 << (_SHIFT - 1)) - 1) + kept_lowest) >> _SHIFT
    narrow = subnormal if magnitude < _SMALLEST_NORMAL_BITS else normal
    narrow = BFLOAT16_INF_BITS if magnitude >= _OVERFLOW_BITS else narrow
    narrow = BFLOAT16_QUIET_NAN_BITS if magnitude > _INFINITY_BITS else narrow
    return np.uint16(((bits >> (63 - 15)) & BFLOAT16_SIGN_MASK) | narrow)


@njit(cache=True)
def round_to_bfloat16(v: float) -> float:
    """``v`` rounded to the nearest bfloat16 (ties to even), returned as a float64.

    Strict-mode bfloat16 kernels pass every intermediate result through it.
    """
    return bfloat16_bits_to_float64(float64_to_bfloat16_bits(v))


#: decided_bfloat16's widening of the interval, relative to |v|: twice float64's roundoff.
_ROUNDING_SLACK = 2.0**-52


@njit(cache=True, inline="always")
def decided_bfloat16(v: float, e: float) -> tuple[np.uint16, bool]:
    """``(bits, ok)``: ``bits = float64_to_bfloat16_bits(v)``; ``ok`` when the ends
    ``v -+ w``, ``w = 2e + 2^-52 |v|``, round to the same bits, so that every real within
    ``e`` of ``v`` rounds to ``bits``, the correctly rounded bfloat16 (the counterpart of
    ``kernels._f16.decided_half``). A NaN or infinite ``w`` is never ok. Branch-free.
    """
    v = np.float64(v)
    w = 2.0 * np.float64(e) + _ROUNDING_SLACK * abs(v)
    low = float64_to_bfloat16_bits(v - w)
    high = float64_to_bfloat16_bits(v + w)
    return float64_to_bfloat16_bits(v), (low == high) & (w < np.inf)


@njit(cache=True, inline="always")
def bfloat16_boundary(v: float, e: float) -> float:
    """The rounding boundary between two neighbouring bfloat16 numbers inside the interval
    of :func:`decided_bfloat16` (``v`` -+ ``2e + 2^-52 |v|``), exactly; NaN where it holds
    none, more than one, or an infinite one (see ``kernels._vmath.float32_boundary``)."""
    w = 2.0 * e + _ROUNDING_SLACK * abs(v)
    low = bfloat16_bits_to_float64(float64_to_bfloat16_bits(v - w))
    high = bfloat16_bits_to_float64(float64_to_bfloat16_bits(v + w))
    m = 0.5 * (low + high)
    below = bfloat16_bits_to_float64(float64_to_bfloat16_bits(np.nextafter(m, -np.inf)))
    above = bfloat16_bits_to_float64(float64_to_bfloat16_bits(np.nextafter(m, np.inf)))
    adjacent = below == low and above == high and low != high
    return m if adjacent and abs(m) < np.inf else np.nan


@njit(cache=True, inline="always")
def bfloat16_settled(v: float, m: float, offset: float) -> np.uint16:
    """``float64_to_bfloat16_bits(v)``, unless ``m`` is a boundary and ``offset``, an
    estimate of the exact value minus ``m``, is nonzero: then the bfloat16 on that side."""
    if m == m and offset != 0.0:
        return float64_to_bfloat16_bits(np.nextafter(m, np.inf if offset > 0.0 else -np.inf))
    return float64_to_bfloat16_bits(v)


# --- arrays ------------------------------------------------------------------------------


@njit(cache=True, parallel=True)
def _narrow_array(values: np.ndarray, out: np.ndarray) -> None:
    for i in prange(values.size):
        out[i] = float64_to_bfloat16_bits(values[i])


def to_bfloat16(values: np.ndarray) -> np.ndarray:
    """A float64 array rounded to bfloat16 entry by entry (directly, ties to even)."""
    flat = np.ascontiguousarray(values, dtype=np.float64).reshape(-1)
    out = np.empty(flat.size, dtype=np.uint16)
    _narrow_array(flat, out)
    return out.view(BFLOAT16).reshape(np.shape(values))


def _is_bfloat16(value: object) -> bool:
    return isinstance(value, np.ndarray) and value.dtype == BFLOAT16


def _narrowed(result: object) -> object:
    if isinstance(result, tuple):
        return tuple(_narrowed(item) for item in result)
    if isinstance(result, np.ndarray) and result.dtype == np.float64:
        return to_bfloat16(result)
    return result


def widened(function: Callable[..., Any]) -> Callable[..., Any]:
    """``function``, a kernel, extended to bfloat16 input in mixed mode.

    When ``x`` (the first argument) is a bfloat16 array, every bfloat16 array argument is
    widened to float64 (exactly), ``function`` runs on float64, and each float64 array it
    returns is rounded once, directly, to bfloat16: the float64 kernel's result rounded
    (correctly rounded unless that result lies within its own error of a bfloat16 midpoint).
    The other array arguments must then be bfloat16 too (TypeError naming the first that is
    not). It is mixed mode only: ``strict_fp16=True`` is refused here, and
    ``kernels._strict.bfloat16_kernel``, which every non-elementwise kernel wears, sends
    those calls to the kernel's own strict bfloat16 loops before they reach this wrapper.
    Any other input goes to ``function`` unchanged.
    """
    signature = inspect.signature(function)
    first = next(iter(signature.parameters))

    @functools.wraps(function)
    def kernel(*args: Any, **kwargs: Any) -> Any:
        if not _is_bfloat16(args[0] if args else kwargs.get(first)):
            return function(*args, **kwargs)
        bound = signature.bind(*args, **kwargs)
        if bound.arguments.get("strict_fp16", False) is True:
            raise ValueError(
                "strict_fp16: widened runs bfloat16 in mixed mode only; strict bfloat16 "
                "goes to the kernel's own loops (kernels._strict.bfloat16_kernel)"
            )
        for name, value in bound.arguments.items():
            array = value if isinstance(value, np.ndarray) else None
            if array is not None and array.dtype.kind == "f" and array.dtype != BFLOAT16:
                raise TypeError(
                    f"{name}: expected dtype bfloat16 (the dtype of x), got {array.dtype}"
                )
            if _is_bfloat16(value):
                bound.arguments[name] = value.astype(np.float64)
        return _narrowed(function(*bound.args, **bound.kwargs))

    return kernel
