"""What the pooling kernels share: argument checks, window geometry, plane layout and the
final rounding (kernels/maxpool.py, kernels/avgpool.py)."""

from __future__ import annotations

import operator
from dataclasses import dataclass

import numpy as np
from numpy.typing import ArrayLike

from kernels._validate import float_array

#: An int or a pair of ints (height, width).
IntPair = int | tuple[int, int]


def int_pair(value: object, name: str, minimum: int) -> tuple[int, int]:
    """``value`` (an int or a sequence of two ints) as a pair, each at least ``minimum``."""
    items = (value, value) if not isinstance(value, (tuple, list)) else tuple(value)
    if len(items) != 2:
        raise ValueError(f"{name}: expected an int or a pair of ints, got {value!r}")
    pair = []
    for item in items:
        if isinstance(item, (bool, np.bool_)):
            raise TypeError(f"{name}: expected an int or a pair of ints, got {value!r}")
        try:
            number = operator.index(item)
        except TypeError:
            raise TypeError(f"{name}: expected an int or a pair of ints, got {value!r}") from None
        if number < minimum:
            raise ValueError(f"{name}: expected integers >= {minimum}, got {value!r}")
        pair.append(number)
    return pair[0], pair[1]


@dataclass(frozen=True)
class WindowGeometry:
    """Checked windows over an (H, W) plane: kernel, stride, padding and the output size."""

    height: int
    width: int
    kh: int
    kw: int
    sh: int
    sw: int
    ph: int
    pw: int

    @classmethod
    def of(
        cls,
        plane: tuple[int, int],
        kernel_size: IntPair,
        stride: IntPair | None,
        padding: IntPair,
    ) -> WindowGeometry:
        kh, kw = int_pair(kernel_size, "kernel_size", 1)
        sh, sw = (kh, kw) if stride is None else int_pair(stride, "stride", 1)
        ph, pw = int_pair(padding, "padding", 0)
        if 2 * ph > kh or 2 * pw > kw:
            raise ValueError(
                f"padding: expected at most half the kernel size {(kh, kw)} per axis "
                f"(as PyTorch requires), got {(ph, pw)}"
            )
        height, width = plane
        if height + 2 * ph < kh or width + 2 * pw < kw:
            raise ValueError(
                f"x: the padded plane {(height + 2 * ph, width + 2 * pw)} is smaller than "
                f"kernel_size {(kh, kw)}: no window fits"
            )
        return cls(height, width, kh, kw, sh, sw, ph, pw)

    @property
    def out_height(self) -> int:
        return (self.height + 2 * self.ph - self.kh) // self.sh + 1

    @property
    def out_width(self) -> int:
        return (self.width + 2 * self.pw - self.kw) // self.sw + 1

    @property
    def loop_args(self) -> tuple[int, int, int, int, int, int]:
        return self.kh, self.kw, self.sh, self.sw, self.ph, self.pw


def window_planes(x: ArrayLike, kernel_size, stride, padding, strict_fp16):
    """Checked ``x`` of shape (..., H, W), its geometry and its planes as float64 (P, H, W)."""
    x = float_array(x, "x")
    if x.ndim < 2:
        raise ValueError(f"x: expected shape (..., H, W), got {x.shape}")
    check_strict(x, strict_fp16)
    geometry = WindowGeometry.of(x.shape[-2:], kernel_size, stride, padding)
    planes = np.ascontiguousarray(x, dtype=np.float64).reshape(-1, *x.shape[-2:])
    return x, geometry, planes


def window_gradient(g: ArrayLike, x: np.ndarray, geometry: WindowGeometry) -> np.ndarray:
    """Checked upstream gradient of shape (..., Ho, Wo) as float64 planes."""
    g = float_array(g, "g")
    expected = (*x.shape[:-2], geometry.out_height, geometry.out_width)
    if g.shape != expected:
        raise ValueError(f"g: expected shape {expected} (the shape of y), got {g.shape}")
    if g.dtype != x.dtype:
        raise TypeError(f"g: expected dtype {x.dtype} (the dtype of x), got {g.dtype}")
    return np.ascontiguousarray(g, dtype=np.float64).reshape(-1, *expected[-2:])


def check_strict(x: np.ndarray, strict_fp16: bool) -> None:
    if strict_fp16 and x.dtype != np.float16:
        raise ValueError(f"strict_fp16: applies to float16 input only, got dtype {x.dtype}")


def global_rows(x: ArrayLike, strict_fp16: bool) -> tuple[np.ndarray, np.ndarray]:
    """Checked ``x`` of shape (..., D), D >= 1, and its rows as float64 (N, D)."""
    x = float_array(x, "x")
    if x.ndim == 0:
        raise ValueError("x: expected shape (..., D), got a 0-d array")
    if x.shape[-1] == 0:
        raise ValueError("x: pooling needs D >= 1 on the last axis, got D = 0")
    check_strict(x, strict_fp16)
    return x, np.ascontiguousarray(x, dtype=np.float64).reshape(-1, x.shape[-1])


def global_gradient(g: ArrayLike, x: np.ndarray) -> np.ndarray:
    """Checked upstream gradient of shape (...) (x's shape without its last axis)."""
    g = float_array(g, "g")
    if g.shape != x.shape[:-1]:
        raise ValueError(f"g: expected shape {x.shape[:-1]} (the shape of y), got {g.shape}")
    if g.dtype != x.dtype:
        raise TypeError(f"g: expected dtype {x.dtype} (the dtype of x), got {g.dtype}")
    return np.ascontiguousarray(g, dtype=np.float64).reshape(-1)


def finish(values: np.ndarray, dtype: np.dtype, shape: tuple[int, ...]) -> np.ndarray:
    """Round once to ``dtype``; an overflow to inf is a result, not a warning."""
    with np.errstate(over="ignore"):
        return values.astype(dtype).reshape(shape)
