"""Strict 16-bit arithmetic for the kernels that are not elementwise: one rounding for both
formats, and bfloat16 input in strict mode.

A strict kernel (``strict_fp16=True``) rounds every intermediate result to the input's
format, as pure half or bfloat16 arithmetic would. Its loops hold the values in float64
and call :func:`narrow` after each operation with a flag, ``bf``, that picks the format:
binary16 (``round_to_half``, 11 significant bits) when False, bfloat16
(``round_to_bfloat16``, 8 significant bits, float32's exponent range) when True. One loop
serves both formats, so the order of the operations, which decides where strict arithmetic
breaks, is the same in both. Each strict step is the correctly rounded operation of the
format: a product of two such values is exact in float64, and so is a sum unless the two
exponents lie so far apart (possible in bfloat16's range) that the smaller is far below half
a step of the larger, where the float64 sum and the exact one both round to the larger;
``/`` and ``sqrt`` are correctly rounded in float64, and rounding that again is innocuous
(53 >= 2p + 2 for p = 11 and 8).

:func:`bfloat16_kernel` gives a public kernel both bfloat16 modes: mixed mode through
``kernels._bf16.widened`` (widened exactly, evaluated in float64, rounded once), strict mode
to the kernel itself, whose strict loops then run with ``bf`` True.

>>> narrow(1.0 + 2.0**-9, False) == 1.0 + 2.0**-9, narrow(1.0 + 2.0**-9, True)
(True, 1.0)
>>> narrow(70000.0, False), narrow(70000.0, True)
(inf, 70144.0)
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable
from typing import Any

import numpy as np
from numba import njit

from kernels._bf16 import round_to_bfloat16, widened
from kernels._f16 import round_to_half
from kernels._validate import BFLOAT16

__all__ = ["bfloat16_kernel", "is_bfloat16", "narrow"]


@njit(cache=True, inline="always")
def narrow(v: float, bf: bool) -> float:
    """``v`` rounded to the nearest bfloat16 (``bf``) or binary16 value, ties to even,
    returned as a float64 (inf past each format's largest value plus half a step)."""
    if bf:
        return round_to_bfloat16(v)
    return round_to_half(v)


def is_bfloat16(value: np.ndarray | np.dtype) -> bool:
    """Whether ``value`` (an array, or a dtype) is bfloat16: the ``bf`` flag of the strict
    loops."""
    dtype = value.dtype if isinstance(value, np.ndarray) else np.dtype(value)
    return dtype == BFLOAT16


def bfloat16_kernel(
    function: Callable[..., Any] | None = None,
    *,
    native: Callable[[np.ndarray], bool] | None = None,
) -> Any:
    """``function``, a kernel whose strict loops take the ``bf`` flag, extended to bfloat16
    input in both modes.

    With a bfloat16 ``x`` (the first argument) and ``strict_fp16=True`` the call goes to
    ``function`` as it is: the kernel checks its arguments (every array bfloat16), widens
    them exactly to float64 and runs its strict loops rounding to bfloat16. So does a
    bfloat16 ``x`` in mixed mode for which ``native(x)`` is true (a kernel with a bfloat16
    path of its own, ``@bfloat16_kernel(native=...)``). Every other call goes through
    ``widened`` (bfloat16 in mixed mode; other dtypes unchanged).
    """
    if function is None:
        return functools.partial(bfloat16_kernel, native=native)
    mixed = widened(function)
    signature = inspect.signature(function)
    first = next(iter(signature.parameters))

    @functools.wraps(function)
    def kernel(*args: Any, **kwargs: Any) -> Any:
        x = args[0] if args else kwargs.get(first)
        strict = kwargs.get("strict_fp16", False)
        if isinstance(strict, (bool, np.bool_)) and isinstance(x, np.ndarray) and is_bfloat16(x):
            if strict or (native is not None and native(x)):
                return function(*args, **kwargs)
        return mixed(*args, **kwargs)

    return kernel
