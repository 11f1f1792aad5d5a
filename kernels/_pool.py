"""What the pooling kernels share: argument checks, window geometry, plane layout and the
final rounding (kernels/maxpool.py, kernels/avgpool.py).

bfloat16 arrays are accepted in strict mode only (``strict_fp16=True``; the public kernels'
``kernels._strict.bfloat16_kernel`` sends bfloat16 in mixed mode to ``widened``, which
passes float64): a bfloat16 ``x`` without it is a TypeError here."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from numba import njit
from numpy.typing import ArrayLike

from kernels._bf16 import to_bfloat16
from kernels._strict import is_bfloat16
from kernels._validate import BFLOAT16, float_array, pair, strict_mode
from kernels.cast import cast, widen

#: An int or a pair of ints (height, width).
IntPair = int | tuple[int, int]


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
        kh, kw = pair(kernel_size, "kernel_size", low=1)
        sh, sw = (kh, kw) if stride is None else pair(stride, "stride", low=1)
        ph, pw = pair(padding, "padding", low=0)
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

    @property
    def disjoint(self) -> bool:
        """Whether no pixel lies in two windows (stride >= kernel on both axes)."""
        return self.sh >= self.kh and self.sw >= self.kw

    @property
    def covers(self) -> bool:
        """Whether every pixel lies in exactly one window (windows tile the plane)."""
        return (
            self.sh == self.kh
            and self.sw == self.kw
            and self.out_height * self.sh - self.ph >= self.height
            and self.out_width * self.sw - self.pw >= self.width
        )


def _strict_for(x: np.ndarray, strict_fp16: object) -> bool:
    """The checked ``strict_fp16`` for ``x``; TypeError for bfloat16 in mixed mode."""
    strict = strict_mode(strict_fp16, x.dtype)
    if is_bfloat16(x) and not strict:
        raise TypeError("x: bfloat16 reaches this path in strict mode only (bfloat16_kernel)")
    return strict


def window_input(x: ArrayLike, kernel_size, stride, padding, strict_fp16):
    """Checked ``x`` of shape (..., H, W), its geometry and the checked ``strict_fp16``."""
    x = float_array(x, "x", bfloat16=True)
    if x.ndim < 2:
        raise ValueError(f"x: expected shape (..., H, W), got {x.shape}")
    if x.shape[-2] == 0 or x.shape[-1] == 0:
        raise ValueError(f"x: expected planes of at least 1 x 1 (H, W >= 1), got shape {x.shape}")
    strict = _strict_for(x, strict_fp16)
    geometry = WindowGeometry.of(x.shape[-2:], kernel_size, stride, padding)
    return x, geometry, strict


def window_planes(x: ArrayLike, kernel_size, stride, padding, strict_fp16):
    """Checked ``x`` of shape (..., H, W), its geometry, its planes as float64 (P, H, W) and
    the checked ``strict_fp16``."""
    x, geometry, strict = window_input(x, kernel_size, stride, padding, strict_fp16)
    planes = widen(x).reshape(-1, *x.shape[-2:])
    return x, geometry, planes, strict


def native_planes(array: np.ndarray) -> np.ndarray:
    """``array`` (..., H, W) as C-contiguous planes (P, H, W) in its own dtype, float16 and
    bfloat16 widened to float32 (exact): a view when it already is one."""
    dtype = np.float32 if array.dtype == np.float16 or is_bfloat16(array) else array.dtype
    return widen(array, dtype).reshape(-1, *array.shape[-2:])


def sample_window_planes(x: ArrayLike, kernel_size, stride, padding, strict_fp16):
    """``window_planes`` of one sample ``x`` of shape (C, H, W), for a dense Jacobian."""
    x, geometry, planes, strict = window_planes(x, kernel_size, stride, padding, strict_fp16)
    if x.ndim != 3:
        raise ValueError(f"x: expected one sample of shape (C, H, W), got shape {x.shape}")
    return x, geometry, planes, strict


def checked_window_gradient(g: ArrayLike, x: np.ndarray, geometry: WindowGeometry) -> np.ndarray:
    """Checked upstream gradient of shape (..., Ho, Wo), as given."""
    g = float_array(g, "g", bfloat16=True)
    expected = (*x.shape[:-2], geometry.out_height, geometry.out_width)
    if g.shape != expected:
        raise ValueError(f"g: expected shape {expected} (the shape of y), got {g.shape}")
    if g.dtype != x.dtype:
        raise TypeError(f"g: expected dtype {x.dtype} (the dtype of x), got {g.dtype}")
    return g


def window_gradient(g: ArrayLike, x: np.ndarray, geometry: WindowGeometry) -> np.ndarray:
    """Checked upstream gradient of shape (..., Ho, Wo) as float64 planes."""
    g = checked_window_gradient(g, x, geometry)
    return widen(g).reshape(-1, *g.shape[-2:])


@njit(cache=True)
def inner_columns(width, kw, sw, pw, out_w):
    """``(lo, hi)``: the outputs ``lo <= ow < hi`` whose window columns all lie inside the
    plane (no padding), so that a loop over them needs no clipping."""
    lo = min((pw + sw - 1) // sw, out_w)
    hi = (width + pw - kw) // sw + 1 if width + pw >= kw else 0
    return lo, max(lo, min(hi, out_w))


@njit(cache=True, inline="always")
def clipped(t, lo, hi):
    """The ``t``-th of the windows outside :func:`inner_columns`' ``lo <= ow < hi`` (those
    before ``lo``, then those from ``hi`` on): loops over the clipped windows run ``t``
    over ``range(out_w - (hi - lo))``."""
    return t if t < lo else t + hi - lo


def rerun_unsettled(dx, settled, loop, planes, loop_args) -> None:
    """Overwrite the planes of ``dx`` that a vectorized VJP loop left unsettled
    (``settled[p]`` False) with the general double-double ``loop``'s results, run in mixed
    mode on those planes of each array of ``planes`` widened to float64, and rounded once
    to ``dx``'s dtype by the assignment, as :func:`finish` rounds."""
    if settled.all():
        return
    rest = [widen(array[~settled]) for array in planes]
    exact = np.empty((rest[0].shape[0], *dx.shape[1:]))
    loop(*rest, *loop_args, False, exact)
    dx[~settled] = exact


def global_rows(x: ArrayLike, strict_fp16: object) -> tuple[np.ndarray, np.ndarray, bool]:
    """Checked ``x`` of shape (..., D), D >= 1, its rows as float64 (N, D) and the checked
    ``strict_fp16``."""
    x = float_array(x, "x", bfloat16=True)
    if x.ndim == 0:
        raise ValueError("x: expected shape (..., D), got a 0-d array")
    if x.shape[-1] == 0:
        raise ValueError("x: pooling needs D >= 1 on the last axis, got D = 0")
    strict = _strict_for(x, strict_fp16)
    return x, widen(x).reshape(-1, x.shape[-1]), strict


def global_gradient(g: ArrayLike, x: np.ndarray) -> np.ndarray:
    """Checked upstream gradient of shape (...) (x's shape without its last axis)."""
    g = float_array(g, "g", bfloat16=True)
    if g.shape != x.shape[:-1]:
        raise ValueError(f"g: expected shape {x.shape[:-1]} (the shape of y), got {g.shape}")
    if g.dtype != x.dtype:
        raise TypeError(f"g: expected dtype {x.dtype} (the dtype of x), got {g.dtype}")
    return widen(g).reshape(-1)


def finish(values: np.ndarray, dtype: np.dtype, shape: tuple[int, ...]) -> np.ndarray:
    """Round once to ``dtype`` (no copy if ``values`` already has it); an overflow to inf is
    a result, not a warning. bfloat16 is rounded directly from float64
    (``kernels._bf16.to_bfloat16``; ml_dtypes' own cast goes through float32, twice)."""
    if np.dtype(dtype) == BFLOAT16:
        return to_bfloat16(values).reshape(shape)
    if np.dtype(dtype) == np.float16 and values.dtype != np.float16:
        return cast(values, "float16").reshape(shape)
    with np.errstate(over="ignore"):
        return values.astype(dtype, copy=False).reshape(shape)
