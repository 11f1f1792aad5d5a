"""Input checks shared by every kernel: errors name the argument and what was expected."""

from __future__ import annotations

import math

import ml_dtypes
import numpy as np
from numpy.typing import ArrayLike

#: The dtypes every kernel computes in; outputs have the input's dtype. bfloat16 arrays
#: reach the elementwise loops as they are and the other kernels widened to float64
#: (``kernels._bf16.widened``).
FLOAT_DTYPES = (np.dtype(np.float16), np.dtype(np.float32), np.dtype(np.float64))
BFLOAT16 = np.dtype(ml_dtypes.bfloat16)


def float_array(value: ArrayLike, name: str, *, bfloat16: bool = False) -> np.ndarray:
    """``value`` as a native-byte-order float16/32/64 array (never a copy we write into),
    or a bfloat16 array where the caller takes one (``bfloat16=True``).

    Raises TypeError for any other dtype (integers, booleans, complex, objects): a silent
    cast would hide a caller's mistake.
    """
    array = np.asarray(value)
    if bfloat16 and array.dtype == BFLOAT16:
        return array
    if array.dtype.newbyteorder("=") not in FLOAT_DTYPES:
        accepted = "bfloat16, float16" if bfloat16 else "float16"
        raise TypeError(
            f"{name}: expected a {accepted}, float32 or float64 array, got dtype {array.dtype}"
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
    string ``"no"``), and True only with 16-bit input, float16 (and bfloat16 where the kernel
    has strict bfloat16 loops), ValueError otherwise."""
    if not isinstance(strict_fp16, (bool, np.bool_)):
        raise TypeError(f"strict_fp16: expected True or False, got {strict_fp16!r}")
    if strict_fp16 and np.dtype(dtype) not in (np.dtype(np.float16), BFLOAT16):
        raise ValueError(
            f"strict_fp16: applies to float16 and bfloat16 input only, got dtype {dtype}"
        )
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
    try:
        result = float(value)
    except OverflowError:  # an int beyond float64's range, such as 10**400
        raise ValueError(f"{name}: expected a finite number, got {value!r}") from None
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


#: The largest extent of one spatial axis (a padded side, a stride, a window) and the largest
#: number of entries of one padded (H, W) plane of conv2d. Every convolution call holds one
#: padded plane in float64 scratch and gives at least one output per pixel of it at stride 1:
#: 2^31 entries are 16 GiB of float64 for a single plane, beyond the memory of the machines
#: these kernels run on (a larger request could only end in MemoryError, or past 2^63 in an
#: overflow of NumPy's index type), and far beyond any image a convolution is applied to
#: (a 46,340 x 46,340 plane).
MAX_EXTENT = 2**31


def pair(
    value: object,
    name: str,
    *,
    low: int = 0,
    high: int | None = MAX_EXTENT,
    length_error: type[Exception] = ValueError,
) -> tuple[int, int]:
    """An int or a pair (tuple or list) of ints, each checked by :func:`whole`, as a pair.

    A sequence of another length raises ``length_error`` (conv2d's ``stride=(1, 1, 1)`` has
    always been a TypeError and the pooling kernels' ``kernel_size=(2, 2, 2)`` a ValueError;
    both are pinned by their tests).
    """
    items = tuple(value) if isinstance(value, (tuple, list)) else (value, value)
    if len(items) != 2:
        raise length_error(f"{name}: expected an int or a pair of ints, got {value!r}")
    first, second = (_pair_item(item, value, name, low, high) for item in items)
    return first, second


def _pair_item(item: object, value: object, name: str, low: int, high: int | None) -> int:
    if isinstance(item, (bool, np.bool_)) or not isinstance(item, (int, np.integer)):
        raise TypeError(f"{name}: expected an int or a pair of ints, got {value!r}")
    number = int(item)
    if number < low:
        raise ValueError(f"{name}: expected integers >= {low}, got {value!r}")
    if high is not None and number > high:
        raise ValueError(f"{name}: expected integers <= {high}, got {value!r}")
    return number
