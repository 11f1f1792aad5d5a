"""Max pooling: global over the last axis (Table 2's row), and windowed over (H, W) like PyTorch.

Global (001_76ce3a8a4b6079c3.txt, Table 2, row MaxPooling, Ranzato et al.):
``y = max(x)`` over the last axis, (..., D) -> (...). Table 2 prints the gradient as the
indicator ``1(x == y)``, which is not a gradient where the maximum is tied. liptable's
convention (torch.amax's): the gradient is split evenly among the ``k`` maximisers,
``dx_i = g / k`` if ``x_i == y`` else ``0 * g``; ``(1/k) 1(x == y)`` is an element of the
Clarke subdifferential ``conv{e_i : x_i == y}``. A NaN anywhere in a row makes ``y`` and
the whole row of ``dx`` NaN; ``+-inf`` entries tie like numbers; ``0 * g`` is NaN for
non-finite ``g`` (IEEE, as ``grad * mask / count`` in PyTorch). The Jacobian of one sample
(D,) is the (1, D) row ``(1/k) 1(x == y)`` (numerator layout, ``J[0, j] = dy/dx_j``).
Lipschitz constant (2-norm): 1, since
``|max a - max b| <= max|a - b| <= |a - b|``, attained at ``a = t e_1``, ``b = 0``.

Windowed (PyTorch's ``max_pool2d``, floor mode, no dilation): ``x`` has shape (..., H, W)
(e.g. (N, C, H, W)) and each (H, W) plane is pooled by windows of ``kernel_size`` (kh, kw)
moved by ``stride`` (sh, sw; None means kernel_size) over the plane padded by
``padding`` (ph, pw); padding acts as ``-inf`` (it is never selected). Output size
``Ho = (H + 2 ph - kh) // sh + 1`` (likewise Wo); ``padding <= kernel_size / 2`` per axis,
as PyTorch requires (so every window holds at least one pixel). Each argument is an int or
a pair. Tie convention = PyTorch CPU (``aten/src/ATen/native/cpu/MaxPoolKernel.cpp``, which
scans the window row-major from the max ``-inf`` and takes ``val > maxval || isnan(val)``):
the FIRST maximum in row-major window order is the argmax and receives the window's whole
gradient; a NaN beats every number, and of several NaNs the LAST one is the argmax (the
test ``isnan(val)`` fires again for every later NaN); a window of ``-inf`` only selects its
first pixel. ``vjp2d`` scatter-adds each window's ``g`` onto its argmax, accumulating over
overlapping windows (stride < kernel), so a NaN or inf in ``g`` reaches that pixel only.

Arithmetic. The maxima are exact in every dtype. The global ``g / k`` is one float64
division, correctly rounded to x's dtype (rounding the float64 quotient on to float32 or
float16 cannot go wrong twice for k < 2^28). ``vjp2d`` sums the ``g`` of the windows that
share an argmax in double-double and rounds once. ``strict_fp16=True`` (float16 or
bfloat16 input) changes only those sums: each partial sum of ``vjp2d`` is rounded to the
input's format (``kernels/_strict.narrow``), from +0 in window order (row-major over the
output), as ``h(...h(h(0 + g_1) + g_2)...)`` (the global ``g / k`` is one rounding in either
mode, directly to the input's format; k is an exact count). bfloat16's 8 significant bits
stall such a sum at 256 (``256 + 1`` rounds back to 256; half's at 2048): with ``g = 1``, a
pixel that is the maximum of all 289 windows of a 17 x 17 kernel at stride 1 gets 256.

Lipschitz constant of windowed max pooling (2-norm): ``sqrt(m)``, ``m`` the largest number
of windows containing one pixel -- see :func:`lipschitz2d`.

>>> import numpy as np
>>> from kernels import maxpool
>>> maxpool.vjp(np.array([3.0, 1.0, 3.0]), np.array(1.0))
array([0.5, 0. , 0.5])
>>> maxpool.forward2d(np.arange(16.0).reshape(1, 4, 4), 2)
array([[[ 5.,  7.],
        [13., 15.]]])
>>> maxpool.lipschitz2d((5, 5), 3, stride=1)
3.0
"""

from __future__ import annotations

import math

import numpy as np
from numba import njit, prange
from numpy.typing import ArrayLike

from kernels._dd import dd_add, two_sum
from kernels._pool import (
    IntPair,
    WindowGeometry,
    checked_window_gradient,
    clipped,
    finish,
    global_gradient,
    global_rows,
    inner_columns,
    native_planes,
    rerun_unsettled,
    sample_window_planes,
    window_gradient,
    window_input,
    window_planes,
)
from kernels._strict import bfloat16_kernel, is_bfloat16, narrow
from kernels._threads import thread_safe
from kernels._validate import float_array, pair

__all__ = ["forward", "forward2d", "jacobian", "jacobian2d", "lipschitz2d", "vjp", "vjp2d"]


# --- loops ----------------------------------------------------------------------------------


@thread_safe
@njit(cache=True, parallel=True, error_model="numpy")
def _global_rows(rows, g, out, dx, want_dx):
    """Row maxima into ``out``; with ``want_dx`` also ``dx = (g/k) 1(x == y)``."""
    n, size = rows.shape
    for r in prange(n):
        best = rows[r, 0]
        has_nan = False
        for j in range(size):
            v = rows[r, j]
            if math.isnan(v):
                has_nan = True
            elif v > best:
                best = v
        if has_nan:
            out[r] = math.nan
            if want_dx:
                dx[r, :] = math.nan
            continue
        out[r] = best
        if want_dx:
            k = 0
            for j in range(size):
                if rows[r, j] == best:
                    k += 1
            share = g[r] / k
            for j in range(size):
                dx[r, j] = share if rows[r, j] == best else 0.0 * g[r]


@njit(cache=True)
def _argmax(plane, h0, w0, kh, kw):
    """PyTorch CPU's window scan: ``(max, flat index)``, first max, last NaN."""
    width = plane.shape[1]
    best = -math.inf
    index = -1
    for i in range(max(h0, 0), min(h0 + kh, plane.shape[0])):
        for j in range(max(w0, 0), min(w0 + kw, width)):
            v = plane[i, j]
            if index < 0:
                index = i * width + j
            if v > best or math.isnan(v):
                best = v
                index = i * width + j
    return best, index


@thread_safe
@njit(cache=True, parallel=True, error_model="numpy")
def _vjp2d(planes, g, kh, kw, sh, sw, ph, pw, strict, dx, bf=False):
    """Scatter-add each window's g onto its argmax; one plane per thread (race-free).
    ``strict``: each partial sum rounded to half (bfloat16 if ``bf``)."""
    n, height, width = planes.shape
    for p in prange(n):
        hi = np.zeros(height * width)
        lo = np.zeros(height * width)
        for oh in range(g.shape[1]):
            for ow in range(g.shape[2]):
                index = _argmax(planes[p], oh * sh - ph, ow * sw - pw, kh, kw)[1]
                if strict:
                    hi[index] = narrow(hi[index] + g[p, oh, ow], bf)
                else:
                    hi[index], lo[index] = dd_add(hi[index], lo[index], g[p, oh, ow], 0.0)
        for i in range(height):
            for j in range(width):
                dx[p, i, j] = hi[i * width + j]


@njit(cache=True, error_model="numpy")
def _scan_columns(line, kw, sw, row, best, where):
    """Continue each window's scan (:func:`_argmax`'s rule, ``v > best or isnan(v)``) over
    its columns ``line[k sw : k sw + kw]`` in window row ``row``, left to right; ``where``
    is the window-local position ``row * kw + j`` of the selected pixel."""
    if kw == 2 and sw == 2:  # constant strides: LLVM vectorizes the pairs
        for k in range(best.size):
            b, w = best[k], where[k]
            v = line[2 * k]
            take = (v > b) | (v != v)
            b, w = (v, 2 * row) if take else (b, w)
            v = line[2 * k + 1]
            take = (v > b) | (v != v)
            best[k], where[k] = (v, 2 * row + 1) if take else (b, w)
    else:
        for j in range(kw):
            for k in range(best.size):
                v = line[k * sw + j]
                if (v > best[k]) | (v != v):
                    best[k], where[k] = v, row * kw + j


@njit(cache=True, error_model="numpy")
def _max_columns(line, kw, sw, best):
    """:func:`_scan_columns` without the argmax: the running maxima only."""
    if kw == 2 and sw == 2:  # constant strides: LLVM vectorizes the pairs
        for k in range(best.size):
            b = best[k]
            v = line[2 * k]
            b = v if (v > b) | (v != v) else b
            v = line[2 * k + 1]
            best[k] = v if (v > b) | (v != v) else b
    else:
        for j in range(kw):
            for k in range(best.size):
                v = line[k * sw + j]
                if (v > best[k]) | (v != v):
                    best[k] = v


@njit(cache=True, error_model="numpy")
def _max_columns_selected(line, kw, sw, best):
    """:func:`_max_columns` for a row without NaN, by the builtin ``max``
    (``select(v > acc, v, acc)``, the scan's rule there), which LLVM vectorizes; returns
    False, leaving ``best`` to be scanned again, where the row's windows hold a NaN."""
    bad = False
    for j in range(kw):
        for k in range(best.size):
            v = line[k * sw + j]
            bad |= v != v
            best[k] = max(best[k], v)
    return not bad


@njit(cache=True, error_model="numpy")
def _max_pairs(top, bottom, out):
    """:func:`_max_columns` for 2 x 2 windows at column stride 2 whose rows ``top`` and
    ``bottom`` lie in the plane, into ``out``: without a NaN the scan's result is the first
    maximum, which the builtin ``max`` (``select(v > acc, v, acc)``: the earlier argument
    wins a tie, ``-0`` before ``+0`` included) gives, with no select depending on a
    comparison's branch. Returns False where a window holds a NaN (the scan decides which)."""
    bad = False
    for k in range(out.size):
        a, b = top[2 * k], top[2 * k + 1]
        c, d = bottom[2 * k], bottom[2 * k + 1]
        bad |= (a != a) | (b != b) | (c != c) | (d != d)
        out[k] = max(max(a, b), max(c, d))
    return not bad


@thread_safe
@njit(cache=True, parallel=True, error_model="numpy")
def _forward2d_native(planes, kh, kw, sh, sw, ph, pw, out):
    """Each window's maximum by :func:`_argmax`'s scan, in the planes' own dtype (a maximum
    is exact in any), vectorized over the windows of a row that need no clipping;
    :func:`_argmax` does the others."""
    n, height, width = planes.shape
    out_h, out_w = out.shape[1], out.shape[2]
    lo, hi = inner_columns(width, kw, sw, pw, out_w)
    pairs = kh == 2 and kw == 2 and sw == 2
    start = lo * sw - pw
    for p in prange(n):
        best = np.empty(hi - lo, planes.dtype)
        for oh in range(out_h):
            h0 = oh * sh - ph
            i0, i1 = max(h0, 0), min(h0 + kh, height)
            done = pairs and i1 - i0 == 2
            if done:
                done = _max_pairs(
                    planes[p, i0, start:], planes[p, i1 - 1, start:], out[p, oh, lo:hi]
                )
            if not done:
                best[:] = -np.inf
                done = True
                for i in range(i0, i1):
                    done &= _max_columns_selected(planes[p, i, start:], kw, sw, best)
                if not done:
                    best[:] = -np.inf
                    for i in range(i0, i1):
                        _max_columns(planes[p, i, start:], kw, sw, best)
                out[p, oh, lo:hi] = best
            for t in range(out_w - (hi - lo)):  # the clipped windows
                ow = clipped(t, lo, hi)
                out[p, oh, ow] = _argmax(planes[p], h0, ow * sw - pw, kh, kw)[0]


@njit(cache=True, error_model="numpy")
def _route_columns(shares, where, kw, sw, row, line):
    """Write each window's row ``row`` of columns ``line[k sw : k sw + kw]``: its share at
    its argmax (window-local position ``where``), 0 elsewhere."""
    if kw == 2 and sw == 2:  # constant strides: LLVM vectorizes the pairs
        for k in range(shares.size):
            line[2 * k] = shares[k] if where[k] == 2 * row else 0.0
            line[2 * k + 1] = shares[k] if where[k] == 2 * row + 1 else 0.0
    else:
        for j in range(kw):
            for k in range(shares.size):
                line[k * sw + j] = shares[k] if where[k] == row * kw + j else 0.0


@njit(cache=True, error_model="numpy")
def _route_pairs(top, bottom, shares, dtop, dbottom):
    """:func:`_scan_columns` and :func:`_route_columns` at once for 2 x 2 windows at column
    stride 2 whose two rows ``top`` and ``bottom`` lie in the plane: window k holds
    ``a, b = top[2k], top[2k + 1]`` and ``c, d = bottom[2k], bottom[2k + 1]``, scanned in
    that order. Without a NaN the scan selects the first maximum, so each pixel's test is
    a comparison with the pixels before it (``>``) and after it (``>=``); the share goes
    to the selected pixel as ``s 1 + 0`` and to the others as ``s 0 + 0`` (+0, the value
    that route writes). No select depends on another, and LLVM vectorizes the loop
    (``vjp2d`` of (8, 64, 56, 56) float32 on one core: 7.1 ms by the scan, 1.2 by this;
    versions that chained the selects ran 3.5 to 5 times slower on random data than on
    constant data, as mispredicted branches do). Returns False,
    leaving the rows to the scan, where a window holds a NaN or a share is not finite
    (``s 0`` would be NaN)."""
    bad = False
    for k in range(shares.size):
        a, b = top[2 * k], top[2 * k + 1]
        c, d = bottom[2 * k], bottom[2 * k + 1]
        s = shares[k]
        zero = s - s  # +0 for a finite s; NaN (flagged below) otherwise
        bad |= (a != a) | (b != b) | (c != c) | (d != d) | (zero != zero)
        ab, cd = max(a, b), max(c, d)
        dtop[2 * k] = s * np.float32(a >= max(b, cd)) + zero
        dtop[2 * k + 1] = s * (np.float32(b > a) * np.float32(b >= cd)) + zero
        dbottom[2 * k] = s * (np.float32(c > ab) * np.float32(c >= d)) + zero
        dbottom[2 * k + 1] = s * np.float32(d > max(ab, c)) + zero
    return not bad


@thread_safe
@njit(cache=True, parallel=True, error_model="numpy")
def _vjp2d_disjoint(planes, g, kh, kw, sh, sw, ph, pw, covers, dx):
    """:func:`_vjp2d` for windows that share no pixel, in the planes' own dtype: a pixel
    receives at most one g, so its double-double sum is ``0 + g`` (exact, low part 0); the
    pixels of no window (``covers`` False) get 0, as there."""
    n, height, width = planes.shape
    out_h, out_w = g.shape[1], g.shape[2]
    lo, hi = inner_columns(width, kw, sw, pw, out_w)
    pairs = kh == 2 and kw == 2 and sw == 2
    for p in prange(n):
        best = np.empty(hi - lo, planes.dtype)
        where = np.empty(hi - lo, np.int32)
        shares = np.empty(out_w, dx.dtype)
        if not covers:
            dx[p] = 0.0
        for oh in range(out_h):
            h0 = oh * sh - ph
            i0, i1 = max(h0, 0), min(h0 + kh, height)
            for ow in range(out_w):
                shares[ow] = 0.0 + g[p, oh, ow]
            start = lo * sw - pw
            done = pairs and i1 - i0 == 2
            if done:
                top, bottom = planes[p, i0, start:], planes[p, i1 - 1, start:]
                done = _route_pairs(
                    top, bottom, shares[lo:hi], dx[p, i0, start:], dx[p, i1 - 1, start:]
                )
            if not done:
                best[:] = -np.inf
                where[:] = 0
                for i in range(i0, i1):
                    _scan_columns(planes[p, i, start:], kw, sw, i - i0, best, where)
                for i in range(i0, i1):
                    _route_columns(shares[lo:hi], where, kw, sw, i - i0, dx[p, i, start:])
            for t in range(out_w - (hi - lo)):  # the clipped windows
                ow = clipped(t, lo, hi)
                w0 = ow * sw - pw
                for i in range(i0, i1):
                    for j in range(max(w0, 0), min(w0 + kw, width)):
                        dx[p, i, j] = 0.0
                index = _argmax(planes[p], h0, w0, kh, kw)[1]
                dx[p, index // width, index % width] = shares[ow]


@njit(cache=True, error_model="numpy")
def _select_columns(line, kw, sw, first, row, best, where):
    """:func:`_scan_columns` by selects (``where`` the pixel's index in the plane, ``row``
    its row's first index, ``first`` the first window's column): the scan's rule for a
    row without NaN, which LLVM vectorizes; returns False where the row holds a NaN."""
    bad = False
    for j in range(kw):
        for k in range(best.size):
            v = line[k * sw + j]
            bad |= v != v
            where[k] = np.int32(row + first + k * sw + j) if v > best[k] else where[k]
            best[k] = max(best[k], v)
    return not bad


@thread_safe
@njit(cache=True, parallel=True, error_model="numpy")
def _vjp2d_selected(planes, g, kh, kw, sh, sw, ph, pw, dx, settled):
    """:func:`_vjp2d` (mixed mode) for windows that overlap: each window's argmax by
    :func:`_select_columns` (the windows that need no clipping) or :func:`_argmax`, its
    ``g`` added to the pixel's running float64 sum in the scatter's order (the windows
    row-major) with Knuth's TwoSum error of each addition. Where every error is 0 the
    double-double sums are those sums with zero low parts. ``settled[p]`` says whether plane
    ``p`` had no NaN in a window of the vectorized scan and only such sums; the caller runs
    :func:`_vjp2d` itself on the other planes."""
    n, height, width = planes.shape
    out_h, out_w = g.shape[1], g.shape[2]
    lo, hi = inner_columns(width, kw, sw, pw, out_w)
    start = lo * sw - pw
    for p in prange(n):
        best = np.empty(hi - lo, planes.dtype)
        where = np.empty(hi - lo, np.int32)
        total = np.zeros(height * width)
        exact = True
        for oh in range(out_h):
            h0 = oh * sh - ph
            i0, i1 = max(h0, 0), min(h0 + kh, height)
            best[:] = -np.inf
            for k in range(hi - lo):  # the scan's choice in a window of -inf only
                where[k] = i0 * width + start + k * sw
            for i in range(i0, i1):
                row = planes[p, i, start:]
                exact &= _select_columns(row, kw, sw, start, i * width, best, where)
            for ow in range(out_w):
                if lo <= ow < hi:
                    index = where[ow - lo]
                else:
                    index = _argmax(planes[p], h0, ow * sw - pw, kh, kw)[1]
                t, e = two_sum(total[index], np.float64(g[p, oh, ow]))
                total[index] = t
                exact &= e == 0.0 and abs(t) < np.inf
        for i in range(height):
            for j in range(width):
                dx[p, i, j] = total[i * width + j]
        settled[p] = exact


@njit(cache=True, error_model="numpy")
def _jacobian2d(planes, kh, kw, sh, sw, ph, pw, out_h, out_w, out):
    n, height, width = planes.shape
    for c in range(n):
        for oh in range(out_h):
            for ow in range(out_w):
                index = _argmax(planes[c], oh * sh - ph, ow * sw - pw, kh, kw)[1]
                out[(c * out_h + oh) * out_w + ow, c * height * width + index] = 1.0


# --- public API -----------------------------------------------------------------------------


@bfloat16_kernel
def forward(x: ArrayLike, *, strict_fp16: bool = False) -> np.ndarray:
    """``max`` over the last axis: (..., D) -> (...); NaN if the row holds a NaN."""
    x, rows, _ = global_rows(x, strict_fp16)
    out = np.empty(rows.shape[0])
    _global_rows(rows, np.zeros(rows.shape[0]), out, np.empty((1, 1)), False)
    return finish(out, x.dtype, x.shape[:-1])


@bfloat16_kernel
def vjp(x: ArrayLike, g: ArrayLike, *, strict_fp16: bool = False) -> np.ndarray:
    """``dx = (g / k) 1(x == max)``, k the number of maximisers; g has shape (...)."""
    x, rows, _ = global_rows(x, strict_fp16)
    grows = global_gradient(g, x)
    out = np.empty(rows.shape[0])
    dx = np.empty(rows.shape)
    _global_rows(rows, grows, out, dx, True)
    return finish(dx, x.dtype, x.shape)


@bfloat16_kernel
def jacobian(x: ArrayLike, *, strict_fp16: bool = False) -> np.ndarray:
    """``(1/k) 1(x == max)`` as a (1, D) array for one sample ``x`` of shape (D,)."""
    x = float_array(x, "x", bfloat16=True)
    if x.ndim != 1:
        raise ValueError(f"x: expected one sample of shape (D,), got shape {x.shape}")
    return vjp(x, np.ones((), x.dtype), strict_fp16=strict_fp16).reshape(1, -1)


@bfloat16_kernel
def forward2d(
    x: ArrayLike,
    kernel_size: IntPair,
    stride: IntPair | None = None,
    padding: IntPair = 0,
    *,
    strict_fp16: bool = False,
) -> np.ndarray:
    """Windowed maxima of each (H, W) plane of ``x``: shape (..., Ho, Wo), x's dtype."""
    x, geometry, _ = window_input(x, kernel_size, stride, padding, strict_fp16)
    planes = native_planes(x)
    out = np.empty((planes.shape[0], geometry.out_height, geometry.out_width), planes.dtype)
    _forward2d_native(planes, *geometry.loop_args, out)
    return finish(out, x.dtype, (*x.shape[:-2], geometry.out_height, geometry.out_width))


@bfloat16_kernel
def vjp2d(
    x: ArrayLike,
    g: ArrayLike,
    kernel_size: IntPair,
    stride: IntPair | None = None,
    padding: IntPair = 0,
    *,
    strict_fp16: bool = False,
) -> np.ndarray:
    """The input gradient for ``g`` of shape (..., Ho, Wo): each ``g`` goes to its argmax."""
    x, geometry, strict = window_input(x, kernel_size, stride, padding, strict_fp16)
    if geometry.disjoint and not strict:
        planes = native_planes(x)
        gplanes = native_planes(checked_window_gradient(g, x, geometry))
        dx = np.empty(planes.shape, planes.dtype)
        _vjp2d_disjoint(planes, gplanes, *geometry.loop_args, geometry.covers, dx)
        return finish(dx, x.dtype, x.shape)
    if not strict and x.dtype != np.float64:  # (bfloat16 arrives here in strict mode only)
        planes = native_planes(x)
        gplanes = native_planes(checked_window_gradient(g, x, geometry))
        # float16: sums of halves can round in float32, so float64
        dx = np.empty(planes.shape, np.float32 if x.dtype == np.float32 else np.float64)
        settled = np.empty(planes.shape[0], np.bool_)
        _vjp2d_selected(planes, gplanes, *geometry.loop_args, dx, settled)
        rerun_unsettled(dx, settled, _vjp2d, (planes, gplanes), geometry.loop_args)
        return finish(dx, x.dtype, x.shape)
    x, geometry, planes, strict = window_planes(x, kernel_size, stride, padding, strict_fp16)
    gplanes = window_gradient(g, x, geometry)
    dx = np.empty(planes.shape)
    _vjp2d(planes, gplanes, *geometry.loop_args, strict, dx, is_bfloat16(x))
    return finish(dx, x.dtype, x.shape)


@bfloat16_kernel
def jacobian2d(
    x: ArrayLike,
    kernel_size: IntPair,
    stride: IntPair | None = None,
    padding: IntPair = 0,
    *,
    strict_fp16: bool = False,
) -> np.ndarray:
    """Dense ``dy/dx`` of one sample (C, H, W): (C*Ho*Wo, C*H*W), 1 at each window's argmax."""
    x, geometry, planes, _ = sample_window_planes(x, kernel_size, stride, padding, strict_fp16)
    out_h, out_w = geometry.out_height, geometry.out_width
    out = np.zeros((planes.shape[0] * out_h * out_w, planes.size))
    _jacobian2d(planes, *geometry.loop_args, out_h, out_w, out)
    return out.astype(x.dtype)


def _largest_cover(size: int, kernel: int, stride: int, pad: int, outputs: int) -> int:
    """The largest number of 1-D windows that contain one of the ``size`` positions."""
    starts = np.arange(outputs) * stride - pad
    cover = np.zeros(size + 1, dtype=np.int64)
    np.add.at(cover, np.clip(starts, 0, size), 1)
    np.add.at(cover, np.clip(starts + kernel, 0, size), -1)
    return int(np.cumsum(cover)[:size].max())


def lipschitz2d(
    input_hw: IntPair, kernel_size: IntPair, stride: IntPair | None = None, padding: IntPair = 0
) -> float:
    """The exact 2-norm Lipschitz constant ``sqrt(m)`` of windowed max pooling of an (H, W) plane.

    ``m`` is the largest number of windows containing one pixel (padded positions are not
    pixels); windows are products of 1-D intervals, so ``m`` is the product of the largest
    1-D counts of the two axes. (Several planes, e.g. (N, C, H, W), pool independently and
    have the same constant.)

    Upper bound: for each window w, ``|max_w a - max_w b| <= max_w |a - b|``, so with
    ``delta = a - b``, ``|y(a) - y(b)|^2 <= sum_w max_{p in w} delta_p^2 <= sum_w sum_{p in w}
    delta_p^2 = sum_p (windows containing p) delta_p^2 <= m |delta|^2``. Attained: a spike
    ``b = 0``, ``a = t e_p`` (t > 0) at a pixel p covered by m windows raises each of those m
    window maxima from 0 to t and no other, so ``|y(a) - y(b)| = sqrt(m) t``.

    Non-overlapping windows (stride >= kernel) give 1; ``kernel_size = 3, stride = 1``
    gives 3 (m = 9) away from the border.
    """
    height, width = pair(input_hw, "input_hw", low=1)
    geometry = WindowGeometry.of((height, width), kernel_size, stride, padding)
    g = geometry
    rows = _largest_cover(height, g.kh, g.sh, g.ph, g.out_height)
    cols = _largest_cover(width, g.kw, g.sw, g.pw, g.out_width)
    return math.sqrt(rows * cols)
