"""Input checks shared by every kernel: errors name the argument and what was expected."""

from __future__ import annotations

import numpy as np
from numpy.typing import ArrayLike

#: The dtypes every kernel accepts; outputs have the input's dtype.
FLOAT_DTYPES = (np.dtype(np.float16), np.dtype(np.float32), np.dtype(np.float64))


def float_array(value: ArrayLike, name: str) -> np.ndarray:
    """``value`` as a native-byte-order float16/32/64 array (never a copy we write into).

    Raises TypeError for any other dtype (integers, booleans, complex, objects): a silent
    cast would hide a caller's mistake.
    """
    array = np.asarray(value)
    if array.dtype.newbyteorder("=") not in FLOAT_DTYPES:
        raise TypeError(
            f"{name}: expected a float16, float32 or float64 array, got dtype {array.dtype}"
        )
    if not array.dtype.isnative:
        array = array.astype(array.dtype.newbyteorder("="))
    return array


def same_shape_and_dtype(x: np.ndarray, other: np.ndarray, name: str) -> None:
    """Raise unless ``other`` (called ``name``) has the shape and dtype of ``x``."""
    if other.shape != x.shape:
        raise ValueError(f"{name}: expected shape {x.shape} (the shape of x), got {other.shape}")
    if other.dtype != x.dtype:
        raise TypeError(f"{name}: expected dtype {x.dtype} (the dtype of x), got {other.dtype}")


def flat(array: np.ndarray) -> np.ndarray:
    """A C-contiguous 1-D view (or copy, if not contiguous) of ``array``, for reading."""
    return np.ascontiguousarray(array).reshape(-1)
