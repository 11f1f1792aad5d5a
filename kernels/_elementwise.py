"""Dispatch of the generated elementwise loops by dtype and float16 mode.

Every elementwise kernel module (``kernels.sigmoid``, ...) is a thin layer over the loops
generated in ``kernels/_generated/<key>.py``: it validates the input, picks the loop for
the dtype (float64, float32, float16 mixed or float16 strict), and restores the shape.
"""

from __future__ import annotations

from types import ModuleType

import numpy as np
from numpy.typing import ArrayLike

from kernels._threads import thread_safe
from kernels._validate import BFLOAT16, flat, float_array, same_shape_and_dtype, strict_mode

_SUFFIX = {
    np.dtype(np.float64): "f64",
    np.dtype(np.float32): "f32",
    np.dtype(np.float16): "f16",
    BFLOAT16: "bf16",
}


def _loop(generated: ModuleType, quantity: str, dtype: np.dtype, strict_fp16: object):
    strict = "s" if strict_mode(strict_fp16, dtype) else ""
    return thread_safe(getattr(generated, f"{quantity}_{_SUFFIX[dtype]}{strict}_loop"))


def _storage(array: np.ndarray) -> np.ndarray:
    """What the loops read and write: float16 and bfloat16 as their uint16 bits, else the
    array itself."""
    return array.view(np.uint16) if array.itemsize == 2 else array


def unary(generated: ModuleType, quantity: str, x: ArrayLike, strict_fp16: bool) -> np.ndarray:
    """``quantity`` ("forward" or "derivative") of ``x``, elementwise."""
    x = float_array(x, "x", bfloat16=True)
    loop = _loop(generated, quantity, x.dtype, strict_fp16)
    out = np.empty(x.size, dtype=x.dtype)
    loop(_storage(flat(x)), _storage(out))
    return out.reshape(x.shape)


def vjp(generated: ModuleType, x: ArrayLike, g: ArrayLike, strict_fp16: bool) -> np.ndarray:
    """``g * f'(x)`` elementwise: the input gradient for the upstream gradient ``g``."""
    x = float_array(x, "x", bfloat16=True)
    g = float_array(g, "g", bfloat16=True)
    same_shape_and_dtype(x, g, "g")
    loop = _loop(generated, "vjp", x.dtype, strict_fp16)
    out = np.empty(x.size, dtype=x.dtype)
    loop(_storage(flat(x)), _storage(flat(g)), _storage(out))
    return out.reshape(x.shape)


def jacobian(generated: ModuleType, x: ArrayLike, strict_fp16: bool) -> np.ndarray:
    """The dense Jacobian ``diag(f'(x))`` of one sample ``x`` of shape (D,)."""
    x = float_array(x, "x", bfloat16=True)
    if x.ndim != 1:
        raise ValueError(f"x: expected one sample of shape (D,), got shape {x.shape}")
    return np.diag(unary(generated, "derivative", x, strict_fp16))
