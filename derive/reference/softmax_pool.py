"""High-precision mpmath references for Softmax, MaxPool and AvgPool.

Each quantity is written here straight from its definition and shares no code with the
kernels (``kernels/softmax.py``, ``kernels/maxpool.py``, ``kernels/avgpool.py``): no max
shift, no closed-form derivative.

Definitions (source: ``shared/seeds/001_76ce3a8a4b6079c3.txt``, Table 2, rows Softmax,
MaxPooling and AveragePooling; the windowed forms are PyTorch's ``max_pool2d`` and
``avg_pool2d``)
--------------------------------------------------------------------------------------------
* Softmax over the last axis: ``e_j = exp(x_j)``, ``s = sum_j e_j``, ``y_i = e_i / s``,
  evaluated as written (mpmath's exponent range is unbounded, so ``exp(1e300)`` is a
  number). Conventions: ``exp(-inf) = 0``, so a ``-inf`` entry gets ``y = 0``; a row of
  only ``-inf`` (0/0) is defined as ``y = 0``, ``dx = 0`` and Jacobian 0 (a fully masked
  query attends to nothing); a NaN or a ``+inf`` in a row (``inf/inf``) makes that row NaN.
* The softmax VJP is reverse-mode differentiation of those three steps, by hand: from
  ``y_i = e_i / s``, ``bar_e_i = g_i / s`` and ``bar_s = -sum_i g_i e_i / s^2``; from
  ``s = sum_j e_j``, ``bar_e_j += bar_s``; from ``e_j = exp(x_j)``,
  ``dx_j = bar_e_j e_j``.
* The softmax Jacobian is forward-mode differentiation: the tangent ``e_k`` of direction
  ``k`` gives ``de_i = e_i [i == k]``, ``ds = e_k``, ``dy_i = de_i / s - e_i ds / s^2``:
  ``J[i][k] = dy_i``, numerator layout.
* Global max pooling over the last axis: ``y = max(x)``, NaN if the row holds a NaN. VJP
  with the tie convention: the ``k`` entries equal to ``y`` share ``g`` evenly
  (``g / k`` each), the others get ``0 * g``; a NaN row gives NaN.
* Global average pooling: ``y = sum(x) / D``; reverse mode ``bar_sum = g / D``,
  ``dx_i = bar_sum``.
* Windowed pooling of the last two axes (H, W): window ``(oh, ow)`` covers rows
  ``oh sh - ph .. oh sh - ph + kh - 1`` and columns likewise, clipped to the plane;
  ``Ho = (H + 2 ph - kh) // sh + 1``. Max: the maximum of the window's pixels (NaN if
  one is NaN); its argmax is, if the window holds NaNs, the LAST NaN in row-major order,
  else the FIRST pixel equal to the maximum (PyTorch CPU); ``dx_p = sum_w [p is argmax of
  w] g_w``. Avg (``count_include_pad=True``): the sum of the window's pixels over
  ``kh kw``; ``dx_p = sum_{w contains p} g_w / (kh kw)``.

Inputs and outputs
------------------
Arrays of float16/32/64 (or nested lists of Python floats); each element is converted
exactly (:func:`derive.reference.core.exact`). Results are NumPy object arrays of ``mpf`` of the
natural shape: ``x.shape`` for softmax ``y`` and ``dx``, ``(D, D)`` for its Jacobian,
``x.shape[:-1]`` for global pooling, ``(..., Ho, Wo)`` for windowed pooling. Everything is
evaluated inside ``mpmath.workdps``/``workprec``; the global precision is never changed.

Accuracy
--------
Forward values involve no cancellation (sums of non-negative ``e_j``, exact-then-rounded
``fsum``, one quotient; a max; one division), so at ``dps + GUARD_DIGITS`` digits they are
correct to ``dps`` digits. The softmax VJP and Jacobian cancel: at the argmax, where
``y_m`` is ``1 - 10^-20`` for ``x = (0, -46)``, ``g_m / s + bar_s`` loses 20 digits, and
up to ``(x_m - x_j) / ln 10`` digits in general. They are therefore evaluated adaptively:
with ``u = 2^-p`` at ``p`` bits, every step above has a relative error of at most ``u``
(``fsum`` adds exactly and rounds once), so the computed ``dx_j`` is within
``ERROR_FACTOR * u * M_j`` of the exact one, where
``M_j = e_j (|g_j| / s + sum_i |g_i| e_i / s^2)`` is the size of the terms (for
``J[i][k]``: ``e_i [i == k] / s + e_i e_k / s^2``) -- ``dx_j = e_j (g_j/s + bar_s)``
carries at most 3u (``bar_e_j``) + 5u (``bar_s``) + 1u (the sum) + 1u (the product)
relative to those terms, 10u, and ``ERROR_FACTOR = 16`` leaves room. The precision is
raised until that bound is below ``10^-dps max(|value|, FLOOR)``; values below
``FLOOR = 2^-1100`` (which round to 0 in every float format) are resolved absolutely.

>>> [mpmath.nstr(v, 12) for v in softmax_vjp([0.0, -46.0], [1.0, 0.0])]
['1.05306173576e-20', '-1.05306173576e-20']
>>> maxpool_vjp([3.0, 1.0, 3.0], 1.0).tolist()
[mpf('0.5'), mpf('0.0'), mpf('0.5')]
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import mpmath
import numpy as np
import numpy.typing as npt

from derive.reference.core import MIN_REFERENCE_DIGITS, check_dps, exact, int_pair

__all__ = [
    "DEFAULT_DPS",
    "FLOOR",
    "avgpool_forward",
    "avgpool_forward2d",
    "avgpool_vjp",
    "avgpool_vjp2d",
    "maxpool_forward",
    "maxpool_forward2d",
    "maxpool_vjp",
    "maxpool_vjp2d",
    "softmax_forward",
    "softmax_jacobian",
    "softmax_vjp",
]

#: Significant digits of the references unless asked otherwise (SPEC, "Tests": >= 50).
DEFAULT_DPS = 50
#: The lowest precision accepted: the SPEC's 50 digits (no caller needs fewer).
MIN_DPS = MIN_REFERENCE_DIGITS
#: Digits of working precision beyond ``dps`` for the cancellation-free forwards.
GUARD_DIGITS = 10
#: Values below this magnitude are resolved to ``10^-dps * FLOOR`` absolutely.
FLOOR = mpmath.mpf(2) ** -1100
#: The adaptive evaluation's error bound, in units of ``2^-p`` times the term size.
ERROR_FACTOR = 16
#: The adaptive evaluation gives up (ArithmeticError) beyond this many bits.
MAX_PRECISION = 1 << 15

Objects = np.ndarray  # of mpf


# --------------------------------------------------------------------------------------------
# Inputs
# --------------------------------------------------------------------------------------------


def _floats(values: npt.ArrayLike, name: str) -> np.ndarray:
    """``values`` as a float64 array (exact for float16/32/64 and Python floats)."""
    array = np.asarray(values)
    if array.dtype.kind != "f" or array.dtype.itemsize > 8:
        raise TypeError(f"{name}: expected float16, float32 or float64 values, got {array.dtype}")
    return array.astype(np.float64)


def _objects(shape: tuple[int, ...]) -> Objects:
    return np.empty(shape, dtype=object)


# --------------------------------------------------------------------------------------------
# Softmax
# --------------------------------------------------------------------------------------------


def _row_kind(row: np.ndarray) -> str:
    """``"nan"`` (a NaN or +inf: inf/inf), ``"masked"`` (all -inf) or ``"finite"``."""
    if np.any(np.isnan(row)) or np.any(row == math.inf):
        return "nan"
    if np.all(row == -math.inf):
        return "masked"
    return "finite"


def _adaptive(sweep: Callable[[], tuple[list, list]], dps: int) -> list:
    """Run ``sweep`` (values and term sizes M) at rising precision until every value is
    within ``ERROR_FACTOR 2^-p M <= 10^-dps max(|value|, FLOOR)`` of the exact one."""
    target = mpmath.mpf(10) ** -dps
    prec = math.ceil(dps * math.log2(10)) + 24
    while True:
        with mpmath.workprec(prec):
            values, sizes = sweep()
            unit = ERROR_FACTOR * mpmath.mpf(2) ** -prec
            shortfall = 0.0
            for value, size in zip(values, sizes, strict=True):
                if mpmath.isnan(value) or mpmath.isinf(size):
                    return values  # non-finite g: IEEE-style propagation, no bound to meet
                allowed = target * max(abs(value), FLOOR)
                if unit * size > allowed:
                    shortfall = max(shortfall, float(mpmath.log(unit * size / allowed, 2)))
            if shortfall == 0.0:
                return values
        prec += math.ceil(shortfall) + 32
        if prec > MAX_PRECISION:
            raise ArithmeticError(f"softmax reference: more than {MAX_PRECISION} bits needed")


def softmax_forward(x: npt.ArrayLike, dps: int = DEFAULT_DPS) -> Objects:
    """``y_i = exp(x_i) / sum_j exp(x_j)`` over the last axis; shape of ``x``."""
    check_dps(dps, MIN_DPS)
    xs = _floats(x, "x")
    rows = xs.reshape(-1, xs.shape[-1])
    out = _objects(rows.shape)
    with mpmath.workdps(dps + GUARD_DIGITS):
        for r, row in enumerate(rows):
            kind = _row_kind(row)
            if kind != "finite":
                out[r] = [mpmath.nan if kind == "nan" else mpmath.mpf(0)] * row.size
                continue
            e = [mpmath.exp(exact(v, "x")) for v in row]
            s = mpmath.fsum(e)
            out[r] = [e_i / s for e_i in e]
    return out.reshape(xs.shape)


def _softmax_vjp_row(row: np.ndarray, grow: np.ndarray, dps: int) -> list:
    def sweep() -> tuple[list, list]:
        e = [mpmath.exp(exact(v, "x")) for v in row]
        g = [exact(v, "g") for v in grow]
        s = mpmath.fsum(e)
        # y_i = e_i / s: adjoints of e_i (direct) and of s
        bar_e = [g_i / s for g_i in g]
        bar_s = -mpmath.fsum(g_i * e_i for g_i, e_i in zip(g, e, strict=True)) / s**2
        # s = sum_j e_j: every e_j receives bar_s
        bar_e = [b + bar_s for b in bar_e]
        # e_j = exp(x_j): d e_j / d x_j = e_j
        dx = [b * e_j for b, e_j in zip(bar_e, e, strict=True)]
        spread = mpmath.fsum(abs(g_i) * e_i for g_i, e_i in zip(g, e, strict=True)) / s**2
        sizes = [e_j * (abs(g_j) / s + spread) for g_j, e_j in zip(g, e, strict=True)]
        return dx, sizes

    return _adaptive(sweep, dps)


def softmax_vjp(x: npt.ArrayLike, g: npt.ArrayLike, dps: int = DEFAULT_DPS) -> Objects:
    """The input gradient of softmax for the upstream gradient ``g`` (shape of ``x``)."""
    check_dps(dps, MIN_DPS)
    xs, gs = _floats(x, "x"), _floats(g, "g")
    if gs.shape != xs.shape:
        raise ValueError(f"g: expected shape {xs.shape}, got {gs.shape}")
    rows, grows = xs.reshape(-1, xs.shape[-1]), gs.reshape(-1, xs.shape[-1])
    out = _objects(rows.shape)
    for r, row in enumerate(rows):
        kind = _row_kind(row)
        if kind != "finite":
            out[r] = [mpmath.nan if kind == "nan" else mpmath.mpf(0)] * row.size
        else:
            out[r] = _softmax_vjp_row(row, grows[r], dps)
    return out.reshape(xs.shape)


def softmax_jacobian(x: npt.ArrayLike, dps: int = DEFAULT_DPS) -> Objects:
    """``J[i][k] = dy_i / dx_k`` of one sample ``x`` of shape (D,), by forward mode."""
    check_dps(dps, MIN_DPS)
    row = _floats(x, "x")
    if row.ndim != 1:
        raise ValueError(f"x: expected one sample of shape (D,), got {row.shape}")
    size = row.size
    kind = _row_kind(row)
    if kind != "finite":
        fill = mpmath.nan if kind == "nan" else mpmath.mpf(0)
        out = _objects((size, size))
        out[:, :] = fill
        return out

    def sweep() -> tuple[list, list]:
        e = [mpmath.exp(exact(v, "x")) for v in row]
        s = mpmath.fsum(e)
        values, sizes = [], []
        for i in range(size):
            for k in range(size):
                de_i = e[i] if i == k else mpmath.mpf(0)  # tangent of e_i along e_k
                ds = e[k]  # tangent of s = sum_j e_j
                values.append(de_i / s - e[i] * ds / s**2)
                sizes.append(de_i / s + e[i] * ds / s**2)
        return values, sizes

    return np.array(_adaptive(sweep, dps), dtype=object).reshape(size, size)


# --------------------------------------------------------------------------------------------
# Global pooling
# --------------------------------------------------------------------------------------------


def _global_rows(x: npt.ArrayLike) -> tuple[np.ndarray, np.ndarray]:
    xs = _floats(x, "x")
    if xs.ndim == 0 or xs.shape[-1] == 0:
        raise ValueError(f"x: expected shape (..., D) with D >= 1, got {xs.shape}")
    return xs, xs.reshape(-1, xs.shape[-1])


def _global_g(g: npt.ArrayLike, xs: np.ndarray) -> np.ndarray:
    gs = _floats(g, "g")
    if gs.shape != xs.shape[:-1]:
        raise ValueError(f"g: expected shape {xs.shape[:-1]}, got {gs.shape}")
    return gs.reshape(-1)


def maxpool_forward(x: npt.ArrayLike, dps: int = DEFAULT_DPS) -> Objects:
    """``max(x)`` over the last axis (NaN if the row holds a NaN); shape ``x.shape[:-1]``."""
    check_dps(dps, MIN_DPS)
    xs, rows = _global_rows(x)
    out = _objects((rows.shape[0],))
    with mpmath.workdps(dps):
        for r, row in enumerate(rows):
            values = [exact(v, "x") for v in row]
            out[r] = mpmath.nan if any(mpmath.isnan(v) for v in values) else max(values)
    return out.reshape(xs.shape[:-1])


def maxpool_vjp(x: npt.ArrayLike, g: npt.ArrayLike, dps: int = DEFAULT_DPS) -> Objects:
    """``g / k`` at each of the ``k`` maximisers, ``0 * g`` elsewhere; NaN rows give NaN."""
    check_dps(dps, MIN_DPS)
    xs, rows = _global_rows(x)
    gs = _global_g(g, xs)
    out = _objects(rows.shape)
    with mpmath.workdps(dps):
        for r, row in enumerate(rows):
            values = [exact(v, "x") for v in row]
            if any(mpmath.isnan(v) for v in values):
                out[r] = [mpmath.nan] * row.size
                continue
            top = max(values)
            winners = [v == top for v in values]
            share = exact(gs[r], "g") / sum(winners)
            out[r] = [share if won else 0 * exact(gs[r], "g") for won in winners]
    return out.reshape(xs.shape)


def avgpool_forward(x: npt.ArrayLike, dps: int = DEFAULT_DPS) -> Objects:
    """``sum(x) / D`` over the last axis; shape ``x.shape[:-1]``."""
    check_dps(dps, MIN_DPS)
    xs, rows = _global_rows(x)
    out = _objects((rows.shape[0],))
    with mpmath.workdps(dps + GUARD_DIGITS):
        for r, row in enumerate(rows):
            out[r] = mpmath.fsum(exact(v, "x") for v in row) / row.size
    return out.reshape(xs.shape[:-1])


def avgpool_vjp(x: npt.ArrayLike, g: npt.ArrayLike, dps: int = DEFAULT_DPS) -> Objects:
    """Reverse mode of ``y = sum / D``: every ``dx_i = g / D``."""
    check_dps(dps, MIN_DPS)
    xs, rows = _global_rows(x)
    gs = _global_g(g, xs)
    out = _objects(rows.shape)
    with mpmath.workdps(dps + GUARD_DIGITS):
        for r in range(rows.shape[0]):
            bar_sum = exact(gs[r], "g") / rows.shape[1]
            out[r] = [bar_sum] * rows.shape[1]
    return out.reshape(xs.shape)


# --------------------------------------------------------------------------------------------
# Windowed pooling
# --------------------------------------------------------------------------------------------


def _windows(
    shape: tuple[int, ...], kernel_size: Any, stride: Any, padding: Any
) -> tuple[int, int, int, list]:
    """``(Ho, Wo, kh * kw, windows)``: each window ``((oh, ow), pixels)``, the in-plane
    pixels ``(i, j)`` it covers in row-major order."""
    if len(shape) < 2:
        raise ValueError(f"x: expected shape (..., H, W), got {shape}")
    height, width = shape[-2:]
    kh, kw = int_pair(kernel_size, "kernel_size")
    sh, sw = (kh, kw) if stride is None else int_pair(stride, "stride")
    ph, pw = int_pair(padding, "padding")
    out_h = (height + 2 * ph - kh) // sh + 1
    out_w = (width + 2 * pw - kw) // sw + 1
    windows = []
    for oh in range(out_h):
        for ow in range(out_w):
            pixels = [
                (i, j)
                for i in range(oh * sh - ph, oh * sh - ph + kh)
                for j in range(ow * sw - pw, ow * sw - pw + kw)
                if 0 <= i < height and 0 <= j < width
            ]
            windows.append(((oh, ow), pixels))
    return out_h, out_w, kh * kw, windows


def _planes(x: npt.ArrayLike) -> tuple[np.ndarray, np.ndarray]:
    xs = _floats(x, "x")
    if xs.ndim < 2:
        raise ValueError(f"x: expected shape (..., H, W), got {xs.shape}")
    return xs, xs.reshape(-1, *xs.shape[-2:])


def _window_g(g: npt.ArrayLike, xs: np.ndarray, out_h: int, out_w: int) -> np.ndarray:
    gs = _floats(g, "g")
    expected = (*xs.shape[:-2], out_h, out_w)
    if gs.shape != expected:
        raise ValueError(f"g: expected shape {expected}, got {gs.shape}")
    return gs.reshape(-1, out_h, out_w)


def _window_argmax(plane: np.ndarray, pixels: list) -> tuple[int, int]:
    """The last NaN pixel if any, else the first pixel equal to the window's maximum."""
    values = [exact(plane[p], "x") for p in pixels]
    nans = [p for p, v in zip(pixels, values, strict=True) if mpmath.isnan(v)]
    if nans:
        return nans[-1]
    top = max(values)
    return next(p for p, v in zip(pixels, values, strict=True) if v == top)


def maxpool_forward2d(
    x: npt.ArrayLike, kernel_size: Any, stride: Any = None, padding: Any = 0, dps: int = DEFAULT_DPS
) -> Objects:
    """Window maxima of each (H, W) plane: shape (..., Ho, Wo)."""
    check_dps(dps, MIN_DPS)
    xs, planes = _planes(x)
    out_h, out_w, _, windows = _windows(xs.shape, kernel_size, stride, padding)
    out = _objects((planes.shape[0], out_h, out_w))
    with mpmath.workdps(dps):
        for c, plane in enumerate(planes):
            for (oh, ow), pixels in windows:
                values = [exact(plane[p], "x") for p in pixels]
                nan = any(mpmath.isnan(v) for v in values)
                out[c, oh, ow] = mpmath.nan if nan else max(values)
    return out.reshape(*xs.shape[:-2], out_h, out_w)


def _pool_vjp_inputs(
    x: npt.ArrayLike, g: npt.ArrayLike, kernel_size: Any, stride: Any, padding: Any, dps: int
) -> tuple[np.ndarray, np.ndarray, int, list, np.ndarray]:
    """``(xs, planes, count, windows, gs)`` of a pooling VJP: ``dps``, ``x``, the geometry
    and ``g`` checked in that order."""
    check_dps(dps, MIN_DPS)
    xs, planes = _planes(x)
    out_h, out_w, count, windows = _windows(xs.shape, kernel_size, stride, padding)
    return xs, planes, count, windows, _window_g(g, xs, out_h, out_w)


def _scatter_g(
    planes: np.ndarray,
    windows: list,
    gs: np.ndarray,
    targets: Callable[[np.ndarray, list], Any],
) -> Objects:
    """``out[c, p] = sum`` of the ``g`` of every window ``w`` of plane ``c`` whose
    ``targets(plane, pixels)`` include ``p``, in window order, rounded once (call inside
    ``workdps``); shape of ``planes``."""
    out = _objects(planes.shape)
    for c, plane in enumerate(planes):
        terms: dict[tuple[int, int], list] = {}
        for (oh, ow), pixels in windows:
            for p in targets(plane, pixels):
                terms.setdefault(p, []).append(exact(gs[c, oh, ow], "g"))
        for p in np.ndindex(plane.shape):
            out[(c, *p)] = mpmath.fsum(terms.get(p, []))
    return out


def maxpool_vjp2d(
    x: npt.ArrayLike,
    g: npt.ArrayLike,
    kernel_size: Any,
    stride: Any = None,
    padding: Any = 0,
    dps: int = DEFAULT_DPS,
) -> Objects:
    """``dx_p = sum_w [p is the argmax of w] g_w`` (first max, last NaN); shape of ``x``."""
    xs, planes, _, windows, gs = _pool_vjp_inputs(x, g, kernel_size, stride, padding, dps)
    with mpmath.workdps(dps):
        out = _scatter_g(planes, windows, gs, lambda plane, pixels: [_window_argmax(plane, pixels)])
    return out.reshape(xs.shape)


def avgpool_forward2d(
    x: npt.ArrayLike, kernel_size: Any, stride: Any = None, padding: Any = 0, dps: int = DEFAULT_DPS
) -> Objects:
    """Window sums over ``kh kw`` (zero padding counted): shape (..., Ho, Wo)."""
    check_dps(dps, MIN_DPS)
    xs, planes = _planes(x)
    out_h, out_w, count, windows = _windows(xs.shape, kernel_size, stride, padding)
    out = _objects((planes.shape[0], out_h, out_w))
    with mpmath.workdps(dps + GUARD_DIGITS):
        for c, plane in enumerate(planes):
            for (oh, ow), pixels in windows:
                out[c, oh, ow] = mpmath.fsum(exact(plane[p], "x") for p in pixels) / count
    return out.reshape(*xs.shape[:-2], out_h, out_w)


def avgpool_vjp2d(
    x: npt.ArrayLike,
    g: npt.ArrayLike,
    kernel_size: Any,
    stride: Any = None,
    padding: Any = 0,
    dps: int = DEFAULT_DPS,
) -> Objects:
    """``dx_p = sum_{w contains p} g_w / (kh kw)``; shape of ``x``."""
    xs, planes, count, windows, gs = _pool_vjp_inputs(x, g, kernel_size, stride, padding, dps)
    with mpmath.workdps(dps + GUARD_DIGITS):
        out = _scatter_g(planes, windows, gs, lambda _plane, pixels: pixels)
        for index in np.ndindex(out.shape):
            out[index] = out[index] / count
    return out.reshape(xs.shape)
