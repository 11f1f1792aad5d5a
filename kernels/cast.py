"""The glue of a block in a narrow format: the cast to it and the residual add, correctly
rounded.

``cast(x, fmt)`` rounds every entry of ``x`` (any float array: float64, float32, float16,
bfloat16 or FP8, read exactly) once, to nearest with ties to even, into ``fmt``:
``"float16"``, ``"bfloat16"``, ``"float8_e5m2"`` or ``"float8_e4m3fn"`` (the ``ml_dtypes``
types). ``add(a, b)`` is ``cast(a + b)`` for two arrays of one such format: the exact sum
rounded once. Mixed and strict arithmetic are the same here (one operation, one
rounding); the functions take no ``strict_fp16``.

Why not ``astype``: ``ml_dtypes`` converts float64 to its 16- and 8-bit types through
float32, so a float64 is rounded twice (NumPy's own float64 -> float16 cast rounds once).
Just below a midpoint of the narrow format, the first rounding can land on the midpoint and
the second then goes to even, away from the nearest value:
``np.array([np.nextafter(61440.0, 0)]).astype(float8_e5m2)`` is inf where the value rounds
to 57344 (``tests/kernels/test_cast.py`` shows such inputs for each of those formats).
Here the quantum of the value's binade is computed from the float64 exponent and the value
is rounded in one step (``rint`` of an exact quotient by a power of two, which rounds half
to even), then stored, exactly, into the narrow type.

Overflow follows each format: float16, bfloat16 and E5M2 give inf from the midpoint above
their largest value (65520, 2^128 - 2^119, 61440) on; E4M3 (``float8_e4m3fn``) has no
infinity: a magnitude above 464 becomes NaN and 464 itself rounds to 448 (ties to even).
NaN stays NaN; zeros keep their sign.

The sum of two values of these formats is exact in float64 unless their exponents differ by
more than 53 - p (p the narrow precision); then the smaller is below 2^-45 units in the last
place of the larger, so the exact sum and its float64 rounding both lie strictly between
the larger value and its neighbouring midpoints, and round to the larger: ``add`` rounds
the float64 sum once, and that is the correctly rounded exact sum.

>>> import numpy as np, ml_dtypes
>>> x = np.array([np.nextafter(61440.0, 0), 464.0, 465.0, -0.0])
>>> cast(x, "float8_e5m2")[:1], cast(x, "float8_e4m3fn")[1:]
(array([57344], dtype='float8_e5m2'), array([448, nan, -0], dtype='float8_e4m3fn'))
"""

from __future__ import annotations

import math

import ml_dtypes
import numpy as np
from numba import njit, prange
from numpy.typing import ArrayLike

from kernels._bf16 import BFLOAT16
from kernels._threads import thread_safe

__all__ = ["FORMATS", "add", "cast"]

#: ``name: (dtype, precision p, emin, emax, threshold, no_infinity)``: ``threshold`` is the
#: magnitude from which (above which, without infinity) the format overflows.
FORMATS: dict[str, tuple[np.dtype, int, int, int, float, bool]] = {
    "float16": (np.dtype(np.float16), 11, -14, 15, 65520.0, False),
    "bfloat16": (BFLOAT16, 8, -126, 127, 2.0**128 - 2.0**119, False),
    "float8_e5m2": (np.dtype(ml_dtypes.float8_e5m2), 3, -14, 15, 61440.0, False),
    "float8_e4m3fn": (np.dtype(ml_dtypes.float8_e4m3fn), 4, -6, 8, 464.0, True),
}


@thread_safe
@njit(cache=True, parallel=True, error_model="numpy")
def _round(x, precision, emin, threshold, no_infinity, out):
    """out[i] = x[i] rounded to nearest (ties to even) to the format, as a float64."""
    for i in prange(x.size):
        v = x[i]
        a = abs(v)
        if v != v:
            out[i] = v
        elif a > threshold or (a == threshold and not no_infinity):
            out[i] = math.nan if no_infinity else math.copysign(math.inf, v)
        else:
            _, exponent = math.frexp(a)  # a = m 2^exponent, m in [1/2, 1)
            quantum = math.ldexp(1.0, max(exponent - 1, emin) - (precision - 1))
            out[i] = math.copysign(np.rint(a / quantum) * quantum, v)


def _format(fmt: str) -> tuple[np.dtype, int, int, int, float, bool]:
    try:
        return FORMATS[fmt]
    except KeyError:
        raise ValueError(f"fmt: expected one of {', '.join(FORMATS)}, got {fmt!r}") from None


def _wide(x: ArrayLike, name: str) -> np.ndarray:
    """``x`` as float64, exactly (bfloat16 and FP8 through float32, which holds them)."""
    arr = np.asarray(x)
    if arr.dtype.kind != "f" and arr.dtype not in [f[0] for f in FORMATS.values()]:
        raise TypeError(f"{name}: expected a float array, got dtype {arr.dtype}")
    with np.errstate(invalid="ignore"):  # a signaling NaN becomes a quiet one
        if arr.dtype.itemsize < 4:
            arr = arr.astype(np.float32)
        return np.ascontiguousarray(arr, dtype=np.float64)


def cast(x: ArrayLike, fmt: str) -> np.ndarray:
    """``x`` correctly rounded to ``fmt`` (module docstring); same shape."""
    dtype, precision, emin, _, threshold, no_infinity = _format(fmt)
    wide = _wide(x, "x")
    out = np.empty_like(wide)
    _round(wide.ravel(), precision, emin, threshold, no_infinity, out.ravel())
    return out.astype(dtype)  # exact: every value is one of the format's


def add(a: ArrayLike, b: ArrayLike) -> np.ndarray:
    """``a + b`` (broadcast) for arrays of one narrow format, rounded once to it."""
    a_arr, b_arr = np.asarray(a), np.asarray(b)
    names = [name for name, spec in FORMATS.items() if spec[0] == a_arr.dtype]
    if not names or b_arr.dtype != a_arr.dtype:
        raise TypeError(
            f"a, b: expected two arrays of one of {', '.join(FORMATS)}, got {a_arr.dtype} and "
            f"{b_arr.dtype}"
        )
    with np.errstate(invalid="ignore"):  # inf + -inf is NaN, as IEEE says
        total = _wide(a_arr, "a") + _wide(b_arr, "b")
    return cast(total, names[0])
