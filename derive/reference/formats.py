"""Float formats of the references: their parameters, and rounding float64 arrays to them.

NumPy's casts round float64 correctly to float16 and float32, but ``ml_dtypes`` casts
float64 to bfloat16 through float32, rounding twice (1 + 2^-8 + 2^-40 becomes 1 instead of
1 + 2^-7). :func:`round_float64` rounds once: through float32 rounded to odd (truncated
toward zero, its last bit set when inexact), which keeps 24 >= 8 + 2 bits, so the final
rounding to nearest even is that of the float64 value. The references share no code with
the kernels' own conversion (``kernels/_bf16.py``).
"""

from __future__ import annotations

import ml_dtypes
import numpy as np
import numpy.typing as npt

__all__ = ["BFLOAT16", "finfo", "round_float64"]

BFLOAT16 = np.dtype(ml_dtypes.bfloat16)


def finfo(dtype: npt.DTypeLike) -> ml_dtypes.finfo:
    """The format parameters of a NumPy float dtype or of bfloat16."""
    return ml_dtypes.finfo(np.dtype(dtype))


def round_float64(values: npt.ArrayLike, dtype: npt.DTypeLike) -> np.ndarray:
    """``values`` (taken as float64) rounded once to ``dtype``, ties to even.

    >>> round_float64([1 + 2**-8 + 2**-40, 1 + 2**-8], BFLOAT16).astype(float).tolist()
    [1.0078125, 1.0]
    """
    wide = np.asarray(values, dtype=np.float64)
    target = np.dtype(dtype)
    if target != BFLOAT16:
        with np.errstate(over="ignore"):
            return wide.astype(target)
    with np.errstate(over="ignore", invalid="ignore"):
        narrow = wide.astype(np.float32)
        toward_zero = np.where(
            np.abs(narrow.astype(np.float64)) > np.abs(wide),
            np.nextafter(narrow, np.float32(0)),
            narrow,
        ).astype(np.float32)
        inexact = toward_zero.astype(np.float64) != wide
        bits = toward_zero.view(np.uint32) | inexact.astype(np.uint32)
        return bits.view(np.float32).astype(BFLOAT16)
