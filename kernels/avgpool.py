"""Average pooling: global over the last axis (Table 2's row), and windowed like PyTorch.

Global (001_76ce3a8a4b6079c3.txt, Table 2, row AveragePooling, LeCun et al.):
``y = sum(x) / D`` over the last axis, (..., D) -> (...); ``dx_i = g / D``; the Jacobian of
one sample (D,) is the (1, D) row ``(1/D) 1^T`` (numerator layout, ``J[0, j] = dy/dx_j``).
Lipschitz constant (2-norm):
``|<1/D, a - b>| <= |1| / D * |a - b| = |a - b| / sqrt(D)`` (Cauchy-Schwarz, equality for
``a - b`` parallel to 1), so it is ``1/sqrt(D)``; Table 2 prints ``1/D`` (the Jacobian's
entries, not its norm) -- see the report.

Windowed (PyTorch's ``avg_pool2d`` with its defaults ``count_include_pad=True``, floor
mode): ``x`` of shape (..., H, W), windows ``kernel_size`` (kh, kw) moved by ``stride``
(None means kernel_size) over each plane zero-padded by ``padding``
(``<= kernel_size / 2``, as PyTorch requires); each output is the window's sum divided by
``kh * kw`` always (padding counts as zeros). Geometry and argument checks are those of
:mod:`kernels.maxpool` (``Ho = (H + 2 ph - kh) // sh + 1``). ``vjp2d`` gives every pixel
``sum of g_w / (kh kw)`` over the windows w containing it (overlapping windows accumulate;
one plane per thread, race-free). ``jacobian2d`` of one sample (C, H, W) is the dense
(C*Ho*Wo, C*H*W) matrix with ``1/(kh kw)`` at each (window, pixel-in-window).

Arithmetic. Sums are double-double (compensated: float64 input loses nothing needlessly),
divided once and rounded once to x's dtype; a sum of float64 values beyond 2^960 is formed
scaled by 2^-64 (exact, except that entries below 2^-958 then err by up to 2^-1011), so
``mean(1.7e308, 1.7e308)`` is 1.7e308, not inf. float32 and float16 ("mixed", the default)
inputs are computed the same way in float64 and rounded once. The windows of a row are
summed side by side, vectorized, to the same values: a float32 (or float16) window whose
plain float64 sum is exact (TwoSum error 0 at every step, the usual case) is divided
directly, any ``kh kw``; for ``kh kw`` a power of two a float64 window is summed in
double-double by the operations of ``dd_add`` without its branches, whose quotient by
``kh kw`` then is the high part times ``1 / (kh kw)``; every other window takes the general
loop. ``strict_fp16=True`` (float16
or bfloat16 input) sums left to right from +0 (row-major within a window) with every
partial sum rounded to the input's format (``kernels/_strict.narrow``), and divides by
``D`` (or ``kh kw``) rounded to it, rounding the quotient: ``h(h(...h(0 + x_1)...) / h(D))``.
``vjp`` is ``h(g / h(D))``; ``vjp2d`` adds each window's share ``h(g_w / h(kh kw))`` to its
pixels, rounded, in window order (row-major over the output). In half
``mean(65504, 65504)`` overflows to inf (the sum does), where mixed gives 65504, and a long
row stalls once the running sum's spacing exceeds the terms (``2048 + 1 = 2048``).
bfloat16 has float32's range but 8 significant bits, so the sum of ones stalls at 256
(``256 + 1 = 256``): the 17 x 17 window of ones sums to 256, ``kh kw = 289`` is held as 288,
and the mean is ``bf(256 / 288) = 0.890625`` instead of 1.
Non-finite inputs propagate per IEEE (``inf + (-inf)`` is NaN).

>>> import numpy as np
>>> from kernels import avgpool
>>> avgpool.forward(np.array([1.0, 2.0, 6.0]))
array(3.)
>>> avgpool.forward(np.array([65504.0, 65504.0], np.float16), strict_fp16=True)
array(inf, dtype=float16)
>>> avgpool.vjp2d(np.zeros((3, 3)), np.ones((2, 2)), 2, stride=1)
array([[0.25, 0.5 , 0.25],
       [0.5 , 1.  , 0.5 ],
       [0.25, 0.5 , 0.25]])
"""

from __future__ import annotations

import numpy as np
from numba import njit, prange
from numpy.typing import ArrayLike

from kernels._dd import dd_add, dd_div
from kernels._pool import (
    IntPair,
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
from kernels._rownorm import two_sum_select
from kernels._strict import bfloat16_kernel, is_bfloat16, narrow
from kernels._threads import thread_safe

__all__ = ["forward", "forward2d", "jacobian", "jacobian2d", "vjp", "vjp2d"]

#: float64 sums of values at or above this magnitude are formed scaled by _SUM_SCALE.
_SCALE_LIMIT = 2.0**960
_SUM_SCALE = 2.0**-64


@njit(cache=True)
def _scale(values):
    """``_SUM_SCALE`` if ``max|values| >= _SCALE_LIMIT`` (a sum could overflow), else 1."""
    for v in values.flat:
        if abs(v) >= _SCALE_LIMIT:
            return _SUM_SCALE
    return 1.0


@thread_safe
@njit(cache=True, parallel=True, error_model="numpy")
def _global_forward(rows, strict, out, bf):
    n, size = rows.shape
    for r in prange(n):
        if strict:
            s = 0.0
            for j in range(size):
                s = narrow(s + rows[r, j], bf)
            out[r] = narrow(s / narrow(size, bf), bf)
        else:
            scale = _scale(rows[r])
            sh, sl = 0.0, 0.0
            for j in range(size):
                sh, sl = dd_add(sh, sl, rows[r, j] * scale, 0.0)
            out[r] = dd_div(sh, sl, np.float64(size), 0.0)[0] / scale


@njit(cache=True, error_model="numpy")
def _window_mean(plane, h0, w0, kh, kw, strict, scale, bf):
    """The mean of the window at (h0, w0) (clipped to the plane, padding counted as zeros):
    a double-double sum divided by ``kh kw`` (``scale`` as from :func:`_scale`), or in
    strict mode a half (bfloat16 if ``bf``) sum divided by the rounded count."""
    height, width = plane.shape
    hi, lo = 0.0, 0.0
    for i in range(max(h0, 0), min(h0 + kh, height)):
        for j in range(max(w0, 0), min(w0 + kw, width)):
            if strict:
                hi = narrow(hi + plane[i, j], bf)
            else:
                hi, lo = dd_add(hi, lo, plane[i, j] * scale, 0.0)
    if strict:
        return narrow(hi / narrow(np.float64(kh * kw), bf), bf)
    return dd_div(hi, lo, np.float64(kh * kw), 0.0)[0] / scale


@thread_safe
@njit(cache=True, parallel=True, error_model="numpy")
def _forward2d(planes, kh, kw, sh, sw, ph, pw, strict, out, bf=False):
    n = planes.shape[0]
    for p in prange(n):
        scale = 1.0 if strict else _scale(planes[p])
        for oh in range(out.shape[1]):
            for ow in range(out.shape[2]):
                out[p, oh, ow] = _window_mean(
                    planes[p], oh * sh - ph, ow * sw - pw, kh, kw, strict, scale, bf
                )


@njit(cache=True)
def _exact_add(a, v):
    """``(a + v, |error|)``: the float64 sum and the magnitude of its rounding error
    (Knuth's TwoSum; NaN when the sum is not finite)."""
    s = a + v
    b = s - a
    return s, abs((a - (s - b)) + (v - b))


@njit(cache=True, error_model="numpy")
def _add_columns(line, kw, sw, sums, errors):
    """Add row ``line`` of each window to its running sum: window k's columns are
    ``line[k sw : k sw + kw]``, added left to right; errors collect the TwoSum errors."""
    if kw == 2 and sw == 2:  # constant strides: LLVM vectorizes the pairs
        for k in range(sums.size):
            a, e = _exact_add(sums[k], np.float64(line[2 * k]))
            s, f = _exact_add(a, np.float64(line[2 * k + 1]))
            errors[k] += e + f
            sums[k] = s
    else:
        for j in range(kw):
            for k in range(sums.size):
                s, e = _exact_add(sums[k], np.float64(line[k * sw + j]))
                errors[k] += e
                sums[k] = s


@njit(cache=True, inline="always", error_model="numpy")
def _quotient(s, count):
    """``s / count`` (``count = kh kw``, an int), which is the high part of
    ``kernels._dd.dd_div(s, 0, count, 0)`` for
    the sum ``s`` of a float32 window (normal or 0, below 2^996, where ``dd_div``'s
    products are exact): the exact quotient lies at least ``ulp / (2 count)`` from a
    midpoint (``count`` is an odd integer times a power of two, ``s`` a float64), far beyond
    the double-double's error, so the pair rounds to ``fl(s / count)``
    (``tests/kernels/test_pool_loops.py``). A power of two divides exactly: the product
    with ``1 / count``, the faster instruction (LLVM hoists the test and the reciprocal out
    of the callers' loops)."""
    return s * (1.0 / count) if count & (count - 1) == 0 else s / count


@njit(cache=True, error_model="numpy")
def _mean_pairs(top, bottom, out):
    """:func:`_add_columns` over the two rows of 2 x 2 windows at column stride 2 that lie
    in the plane (``top[2k], top[2k + 1], bottom[2k], bottom[2k + 1]``, added in that order
    from 0), each window's mean into ``out`` in the same pass. Returns False where a sum
    is inexact or not finite (some TwoSum error is not 0): the caller then sums the rows
    again and settles those windows as :func:`_forward2d_wide` does."""
    bad = False
    for k in range(out.size):
        s, e1 = _exact_add(0.0, np.float64(top[2 * k]))
        s, e2 = _exact_add(s, np.float64(top[2 * k + 1]))
        s, e3 = _exact_add(s, np.float64(bottom[2 * k]))
        s, e4 = _exact_add(s, np.float64(bottom[2 * k + 1]))
        bad |= (e1 + e2 + e3 + e4) != 0.0  # errors are >= 0 (or NaN)
        out[k] = _quotient(s, 4)
    return not bad


@thread_safe
@njit(cache=True, parallel=True, error_model="numpy")
def _forward2d_wide(planes, kh, kw, sh, sw, ph, pw, out):
    """:func:`_forward2d` of float32 planes (|x| < 2^128, so the scale is 1), vectorized over
    a row of windows: each window's plain float64 sum, in the same order, with Knuth's
    TwoSum error of every step. Where all of them are 0 (and the sum is finite) the
    double-double sum is that sum with a zero low part, and the high part of its
    double-double quotient by ``kh kw`` is the sum's float64 quotient (:func:`_quotient`):
    the same value as :func:`_window_mean`, which handles every other window (a border
    window, an inexact sum, a non-finite one)."""
    n, height, width = planes.shape
    out_h, out_w = out.shape[1], out.shape[2]
    lo, hi = inner_columns(width, kw, sw, pw, out_w)
    pairs = kh == 2 and kw == 2 and sw == 2
    start = lo * sw - pw
    for p in prange(n):
        sums = np.empty(hi - lo)
        errors = np.empty(hi - lo)
        for oh in range(out_h):
            h0 = oh * sh - ph
            i0, i1 = max(h0, 0), min(h0 + kh, height)
            done = pairs and i1 - i0 == 2
            if done:
                top, bottom = planes[p, i0, start:], planes[p, i1 - 1, start:]
                done = _mean_pairs(top, bottom, out[p, oh, lo:hi])
            if not done:
                sums[:] = 0.0
                errors[:] = 0.0
                for i in range(i0, i1):
                    _add_columns(planes[p, i, start:], kw, sw, sums, errors)
                for k in range(hi - lo):
                    if errors[k] == 0.0:
                        out[p, oh, lo + k] = _quotient(sums[k], kh * kw)
                    else:
                        w0 = (lo + k) * sw - pw
                        out[p, oh, lo + k] = _window_mean(
                            planes[p], h0, w0, kh, kw, False, 1.0, False
                        )
            for t in range(out_w - (hi - lo)):  # the clipped windows
                ow = clipped(t, lo, hi)
                w0 = ow * sw - pw
                out[p, oh, ow] = _window_mean(planes[p], h0, w0, kh, kw, False, 1.0, False)


@njit(cache=True, inline="always", error_model="numpy")
def _dd_accumulate(hi, lo, v):
    """``(hi', lo', check)``: ``kernels._dd.dd_add(hi, lo, v, 0.0)`` by the same operations
    in the same order, its TwoSums without their branch (``two_sum_select``); the branches
    are taken only where a partial sum is not finite, and then ``check`` is NaN (otherwise
    0)."""
    s, e = two_sum_select(hi, v)
    t, f = two_sum_select(lo, 0.0)
    e += t
    s2 = s + e  # quick_two_sum(s, e)
    e2 = e - (s2 - s)
    e2 += f
    s3 = s2 + e2  # quick_two_sum(s2, e2)
    return s3, e2 - (s3 - s2), (s - s) + (s2 - s2) + (s3 - s3)


@njit(cache=True, error_model="numpy")
def _add_columns_dd(line, kw, sw, hi, lo, check):
    """:func:`_add_columns` for float64 planes: row ``line`` of each window added to its
    double-double sum ``(hi, lo)`` by :func:`_dd_accumulate`, left to right; ``check``
    collects the NaN flags of partial sums that are not finite."""
    if kw == 2 and sw == 2:
        for k in range(hi.size):
            high, low, c = _dd_accumulate(hi[k], lo[k], line[2 * k])
            hi[k], lo[k], d = _dd_accumulate(high, low, line[2 * k + 1])
            check[k] += c + d
    else:
        for j in range(kw):
            for k in range(hi.size):
                hi[k], lo[k], c = _dd_accumulate(hi[k], lo[k], line[k * sw + j])
                check[k] += c


#: From this magnitude on, the high part of ``dd_div(hi, lo, 2^k, 0)`` is ``hi / 2^k`` for
#: every window size 2^k below 2^100 (``hi / 2^k`` exact and normal, the low part's share
#: below half a unit of it); below it a quotient can be a subnormal tie that the low part
#: breaks (``tests/kernels/test_pool_loops.py``).
_QUOTIENT_EXACT = 2.0**-900


@thread_safe
@njit(cache=True, parallel=True, error_model="numpy")
def _forward2d_dd(planes, kh, kw, sh, sw, ph, pw, out):
    """:func:`_forward2d` of float64 planes with ``kh kw`` a power of two, vectorized over a
    row of windows: each window's double-double sum by the operations of ``dd_add``, in
    the same order. Where every partial sum is finite, and the sum is 0 or at least
    :data:`_QUOTIENT_EXACT`, the high part of its double-double quotient by ``kh kw`` is
    the sum's high part times ``1 / (kh kw)`` (exact): the value :func:`_window_mean`
    gives, which handles every other window (a border window, a plane that needs the
    scale, a sum that is not finite or is tiny)."""
    n, height, width = planes.shape
    out_h, out_w = out.shape[1], out.shape[2]
    inverse = 1.0 / (kh * kw)
    lo, hi = inner_columns(width, kw, sw, pw, out_w)
    for p in prange(n):
        scale = _scale(planes[p])
        high, low, check = np.empty(hi - lo), np.empty(hi - lo), np.empty(hi - lo)
        for oh in range(out_h):
            h0 = oh * sh - ph
            high[:] = 0.0
            low[:] = 0.0
            check[:] = 0.0
            if scale == 1.0:
                for i in range(max(h0, 0), min(h0 + kh, height)):
                    _add_columns_dd(planes[p, i, lo * sw - pw :], kw, sw, high, low, check)
            for ow in range(out_w):
                k = ow - lo
                fast = scale == 1.0 and lo <= ow < hi and check[k] == 0.0
                if fast and (high[k] == 0.0 or abs(high[k]) >= _QUOTIENT_EXACT):
                    out[p, oh, ow] = high[k] * inverse
                else:
                    w0 = ow * sw - pw
                    out[p, oh, ow] = _window_mean(planes[p], h0, w0, kh, kw, False, scale, False)


@thread_safe
@njit(cache=True, parallel=True, error_model="numpy")
def _vjp2d(g, kh, kw, sh, sw, ph, pw, strict, dx, bf=False):
    """Each pixel: the sum of the g of its windows, / (kh kw); one plane per thread. In
    strict mode (half, or bfloat16 if ``bf``) each window's share ``h(g / h(kh kw))`` is
    added, rounded, in window order."""
    n, height, width = dx.shape
    count = np.float64(kh * kw)
    half_count = narrow(count, bf)
    for p in prange(n):
        scale = 1.0 if strict else _scale(g[p])
        hi = np.zeros((height, width))
        lo = np.zeros((height, width))
        for oh in range(g.shape[1]):
            h0 = oh * sh - ph
            for ow in range(g.shape[2]):
                w0 = ow * sw - pw
                value = g[p, oh, ow]
                share = narrow(value / half_count, bf) if strict else value * scale
                for i in range(max(h0, 0), min(h0 + kh, height)):
                    for j in range(max(w0, 0), min(w0 + kw, width)):
                        if strict:
                            hi[i, j] = narrow(hi[i, j] + share, bf)
                        else:
                            hi[i, j], lo[i, j] = dd_add(hi[i, j], lo[i, j], share, 0.0)
        for i in range(height):
            for j in range(width):
                if strict:
                    dx[p, i, j] = hi[i, j]
                else:
                    dx[p, i, j] = dd_div(hi[i, j], lo[i, j], count, 0.0)[0] / scale


@njit(cache=True, inline="always", error_model="numpy")
def _windows_over(i, k, s, p, size):
    """The windows along one axis that hold pixel ``i``: ``o`` from the first to the last
    (``o s - p <= i < o s - p + k``, ``0 <= o < size``), as a range's ends."""
    return max(0, (i + p - k) // s + 1), min(size, (i + p) // s + 1)


@thread_safe
@njit(cache=True, parallel=True, error_model="numpy")
def _vjp2d_gathered(g, kh, kw, sh, sw, ph, pw, dx, settled):
    """:func:`_vjp2d` of float32 ``g`` (the scale is 1), any windows: each pixel gathers
    the ``g`` of its windows in the order the scatter adds them (the windows row-major),
    by plain float64 additions with Knuth's TwoSum error of each. Where every error is 0
    the double-double sum is that sum with a zero low part, and its quotient's high part
    is :func:`_quotient`'s. ``settled[p]`` says whether every pixel of plane ``p`` was
    such a sum; the caller runs :func:`_vjp2d` itself on the other planes (an inexact
    sum, or one that is not finite: which NaN ``inf - inf + NaN`` gives depends on the
    order in which the compiled code holds the operands, so the one loop decides it)."""
    n, height, width = dx.shape
    out_h, out_w = g.shape[1], g.shape[2]
    columns = np.empty((width, 2), np.int64)  # each column's windows, found once
    for j in range(width):
        columns[j, 0], columns[j, 1] = _windows_over(j, kw, sw, pw, out_w)
    for p in prange(n):
        exact = True
        for i in range(height):
            oh0, oh1 = _windows_over(i, kh, sh, ph, out_h)
            for j in range(width):
                total, error = 0.0, 0.0
                for oh in range(oh0, oh1):
                    for ow in range(columns[j, 0], columns[j, 1]):
                        total, e = _exact_add(total, np.float64(g[p, oh, ow]))
                        error += e
                exact &= error == 0.0  # NaN for a sum that is not finite
                dx[p, i, j] = _quotient(total, kh * kw)
        settled[p] = exact


@njit(cache=True, error_model="numpy")
def _spread_columns(shares, kw, sw, line):
    """Write each window's share to its ``kw`` columns ``line[k sw : k sw + kw]``."""
    if kw == 2 and sw == 2:  # constant strides: LLVM vectorizes the pairs
        for k in range(shares.size):
            line[2 * k] = shares[k]
            line[2 * k + 1] = shares[k]
    else:
        for j in range(kw):
            for k in range(shares.size):
                line[k * sw + j] = shares[k]


@thread_safe
@njit(cache=True, parallel=True, error_model="numpy")
def _vjp2d_disjoint(g, kh, kw, sh, sw, ph, pw, covers, scaled, dx):
    """:func:`_vjp2d` (float32 ``g``, or float64 ``g`` with ``kh kw`` a power of two) for
    windows that share no pixel: a pixel's double-double sum is its one window's
    ``0 + g s`` (low part 0; ``s`` the plane's scale where ``scaled``, float64 ``g``, else
    1: float32 ``g`` is below 2^128, and the scan for the scale cost float32 5%), and the
    high part of its double-double quotient by ``kh kw`` is the correctly rounded quotient
    (for a power of two its remainder term rounds to 0 even where the quotient is
    subnormal, and a float32 ``g``'s quotient is normal: :func:`_quotient`); divided by
    ``s`` as there. A pixel of no window (``covers`` False) gets 0, as there."""
    n, height, width = dx.shape
    out_h, out_w = g.shape[1], g.shape[2]
    count = kh * kw
    lo, hi = inner_columns(width, kw, sw, pw, out_w)
    for p in prange(n):
        shares = np.empty(out_w, dx.dtype)  # rounded once, here, to dx's dtype
        scale = _scale(g[p]) if scaled else 1.0
        if not covers:
            dx[p] = 0.0
        for oh in range(out_h):
            h0 = oh * sh - ph
            if scaled:
                for ow in range(out_w):
                    shares[ow] = _quotient(0.0 + np.float64(g[p, oh, ow]) * scale, count) / scale
            else:  # the same values: the product with 1 and the quotient by 1 are exact
                for ow in range(out_w):
                    shares[ow] = _quotient(0.0 + np.float64(g[p, oh, ow]), count)
            for i in range(max(h0, 0), min(h0 + kh, height)):
                _spread_columns(shares[lo:hi], kw, sw, dx[p, i, lo * sw - pw :])
                for t in range(out_w - (hi - lo)):  # the clipped windows only
                    ow = clipped(t, lo, hi)
                    w0 = ow * sw - pw
                    for j in range(max(w0, 0), min(w0 + kw, width)):
                        dx[p, i, j] = shares[ow]


@njit(cache=True, error_model="numpy")
def _jacobian2d(height, width, kh, kw, sh, sw, ph, pw, channels, out_h, out_w, weight, out):
    for c in range(channels):
        for oh in range(out_h):
            h0 = oh * sh - ph
            for ow in range(out_w):
                w0 = ow * sw - pw
                row = (c * out_h + oh) * out_w + ow
                for i in range(max(h0, 0), min(h0 + kh, height)):
                    for j in range(max(w0, 0), min(w0 + kw, width)):
                        out[row, (c * height + i) * width + j] = weight


def _power_of_two_count(geometry) -> bool:
    """Whether a window holds a power of two of entries (``kh kw``): dividing by it is then
    exact, short of underflow."""
    count = geometry.kh * geometry.kw
    return count & (count - 1) == 0


def _vectorized(geometry, strict: bool, dtype: np.dtype) -> bool:
    """Whether the vectorized loops apply: mixed mode (float16 input is widened exactly to
    float32), and for float64 input ``kh kw`` a power of two (dividing by it is exact; a
    float32 window's quotient, normal in float64, is :func:`_quotient`'s for any count)."""
    return not strict and (dtype != np.float64 or _power_of_two_count(geometry))


def _output(dtype: np.dtype, shape: tuple[int, ...], exact_in_float32: bool = False) -> np.ndarray:
    """The loops' output array: float32 for float32 (the loop's float64 results are rounded
    once on assignment, as ``astype`` rounds them), float64 for float16 (rounded by
    :func:`finish`), or float32 for float16 too where every result is ``exact_in_float32``:
    then rounding it to half is rounding the exact value once, and ``finish`` does that from
    float32 (``kernels.cast.float32_to_half``, 8 lanes) with half the buffer to write."""
    single = dtype == np.float32 or (dtype == np.float16 and exact_in_float32)
    return np.empty(shape, np.float32 if single else np.float64)


def _divisor(count: int, strict: bool, bf: bool = False) -> float:
    """``count`` as the arithmetic holds it: rounded to half (bfloat16 if ``bf``) in strict
    mode (half: inf from 65520 on, as half arithmetic gives, without NumPy's overflow
    warning)."""
    return narrow(float(count), bf) if strict else float(count)


@bfloat16_kernel
def forward(x: ArrayLike, *, strict_fp16: bool = False) -> np.ndarray:
    """``sum(x) / D`` over the last axis: (..., D) -> (...), x's dtype."""
    x, rows, strict = global_rows(x, strict_fp16)
    out = np.empty(rows.shape[0])
    _global_forward(rows, strict, out, is_bfloat16(x))
    return finish(out, x.dtype, x.shape[:-1])


@bfloat16_kernel
def vjp(x: ArrayLike, g: ArrayLike, *, strict_fp16: bool = False) -> np.ndarray:
    """``dx_i = g / D`` for ``g`` of shape (...) (x's shape without the last axis)."""
    x, rows, strict = global_rows(x, strict_fp16)
    grows = global_gradient(g, x)
    size = rows.shape[1]
    divisor = _divisor(size, strict, is_bfloat16(x))
    dx = np.broadcast_to((grows / divisor)[:, None], rows.shape)
    return finish(dx, x.dtype, x.shape)


@bfloat16_kernel
def jacobian(x: ArrayLike, *, strict_fp16: bool = False) -> np.ndarray:
    """``(1/D) 1^T`` as a (1, D) array for one sample ``x`` of shape (D,)."""
    x, rows, strict = global_rows(x, strict_fp16)
    if x.ndim != 1:
        raise ValueError(f"x: expected one sample of shape (D,), got shape {x.shape}")
    weight = 1.0 / _divisor(rows.shape[1], strict, is_bfloat16(x))
    return finish(np.full(rows.shape, weight), x.dtype, rows.shape)


@bfloat16_kernel
def forward2d(
    x: ArrayLike,
    kernel_size: IntPair,
    stride: IntPair | None = None,
    padding: IntPair = 0,
    *,
    strict_fp16: bool = False,
) -> np.ndarray:
    """Window means (zero padding counted) of each (H, W) plane: shape (..., Ho, Wo)."""
    x, geometry, strict = window_input(x, kernel_size, stride, padding, strict_fp16)
    shape = (*x.shape[:-2], geometry.out_height, geometry.out_width)
    if _vectorized(geometry, strict, x.dtype):
        planes = native_planes(x)
        out = _output(x.dtype, (planes.shape[0], *shape[-2:]))
        loop = _forward2d_dd if planes.dtype == np.float64 else _forward2d_wide
        loop(planes, *geometry.loop_args, out)
        return finish(out, x.dtype, shape)
    x, geometry, planes, strict = window_planes(x, kernel_size, stride, padding, strict_fp16)
    out = np.empty((planes.shape[0], geometry.out_height, geometry.out_width))
    _forward2d(planes, *geometry.loop_args, strict, out, is_bfloat16(x))
    return finish(out, x.dtype, shape)


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
    """The input gradient for ``g`` of shape (..., Ho, Wo) (x's values are not read)."""
    x, geometry, strict = window_input(x, kernel_size, stride, padding, strict_fp16)
    if _vectorized(geometry, strict, x.dtype) and geometry.disjoint:
        gplanes = native_planes(checked_window_gradient(g, x, geometry))
        # A half g divided by a power of two is a float32 number (|g| >= 2^-24 or 0, and
        # float32 reaches 2^-149): such a share is exact in float32.
        exact = x.dtype == np.float16 and _power_of_two_count(geometry)
        dx = _output(x.dtype, (gplanes.shape[0], *x.shape[-2:]), exact)
        scaled = gplanes.dtype == np.float64
        _vjp2d_disjoint(gplanes, *geometry.loop_args, geometry.covers, scaled, dx)
        return finish(dx, x.dtype, x.shape)
    if _vectorized(geometry, strict, x.dtype) and x.dtype != np.float64:
        gplanes = native_planes(checked_window_gradient(g, x, geometry))
        dx = _output(x.dtype, (gplanes.shape[0], *x.shape[-2:]))
        settled = np.empty(gplanes.shape[0], np.bool_)
        _vjp2d_gathered(gplanes, *geometry.loop_args, dx, settled)
        rerun_unsettled(dx, settled, _vjp2d, (gplanes,), geometry.loop_args)
        return finish(dx, x.dtype, x.shape)
    gplanes = window_gradient(g, x, geometry)
    dx = np.empty((gplanes.shape[0], *x.shape[-2:]))
    _vjp2d(gplanes, *geometry.loop_args, strict, dx, is_bfloat16(x))
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
    """Dense ``dy/dx`` of one sample (C, H, W): (C*Ho*Wo, C*H*W), ``1/(kh kw)`` per window pixel."""
    x, geometry, planes, strict = sample_window_planes(x, kernel_size, stride, padding, strict_fp16)
    g = geometry
    out = np.zeros((planes.shape[0] * g.out_height * g.out_width, planes.size))
    weight = 1.0 / _divisor(g.kh * g.kw, strict, is_bfloat16(x))
    _jacobian2d(
        g.height, g.width, *g.loop_args, planes.shape[0], g.out_height, g.out_width, weight, out
    )
    return finish(out, x.dtype, out.shape)
