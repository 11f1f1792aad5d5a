"""Input checks shared by every kernel: errors name the argument and what was expected."""

from __future__ import annotations

import math

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


# --- keyword arguments: one check for each kind, shared by every kernel ------------------


def strict_mode(strict_fp16: object, dtype: np.dtype) -> bool:
    """The ``strict_fp16`` flag, checked: a bool (TypeError for anything else, such as the
    string ``"no"``), and True only with float16 input (ValueError otherwise)."""
    if not isinstance(strict_fp16, (bool, np.bool_)):
        raise TypeError(f"strict_fp16: expected True or False, got {strict_fp16!r}")
    if strict_fp16 and np.dtype(dtype) != np.float16:
        raise ValueError(f"strict_fp16: applies to float16 input only, got dtype {dtype}")
    return bool(strict_fp16)


def flag(value: object, name: str) -> bool:
    """A boolean keyword (``training``): TypeError unless it is True or False."""
    if not isinstance(value, (bool, np.bool_)):
        raise TypeError(f"{name}: expected True or False, got {value!r}")
    return bool(value)


def real(value: object, name: str, *, low: float | None = None, high: float | None = None) -> float:
    """A real scalar keyword as a float: TypeError for strings, booleans and arrays;
    ValueError for NaN, infinities and values outside ``[low, high]``."""
    if isinstance(value, (bool, np.bool_)) or not isinstance(
        value, (int, float, np.floating, np.integer)
    ):
        raise TypeError(f"{name}: expected a real number, got {value!r}")
    result = float(value)
    if not math.isfinite(result):
        raise ValueError(f"{name}: expected a finite number, got {value!r}")
    if (low is not None and result < low) or (high is not None and result > high):
        bounds = f"in [{low}, {high}]" if high is not None else f">= {low}"
        raise ValueError(f"{name}: expected a number {bounds}, got {value!r}")
    return result


def eps_value(eps: object, name: str = "eps") -> float:
    """``eps`` as a float: a finite real number >= 0 (TypeError for ``"0.5"`` or True)."""
    return real(eps, name, low=0.0)


def choice(value: object, name: str, options: tuple[str, ...]) -> str:
    """A string option (``approximate``, ``denom``, ``padding_mode``): ValueError naming the
    argument and the options for anything else, lists included (never "unhashable")."""
    if not isinstance(value, str) or value not in options:
        raise ValueError(f"{name}: expected one of {', '.join(map(repr, options))}, got {value!r}")
    return value


def whole(value: object, name: str, *, low: int = 0, high: int | None = None) -> int:
    """An integer keyword (sizes, strides, padding): TypeError unless it is an integer (not a
    bool), ValueError outside ``[low, high]``."""
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, (int, np.integer)):
        raise TypeError(f"{name}: expected an integer, got {value!r}")
    result = int(value)
    if result < low or (high is not None and result > high):
        bounds = f"in [{low}, {high}]" if high is not None else f">= {low}"
        raise ValueError(f"{name}: expected an integer {bounds}, got {value!r}")
    return result
