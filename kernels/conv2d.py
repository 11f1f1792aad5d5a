"""Conv2d: PyTorch's ``nn.functional.conv2d`` (cross-correlation, NCHW), one group.

``x`` has shape (N, C, H, Wd), ``W`` shape (O, C, Kh, Kw), ``b`` shape (O,) or None; with
stride ``(sh, sw)`` and padding ``(ph, pw)`` (an int means the same for both axes)::

    y[n, o, i, j] = b[o] + sum_{c, p, q} W[o, c, p, q] * xp[n, c, i sh + p, j sw + q]

for ``0 <= i < Ho = (H + 2 ph - Kh) // sh + 1`` and ``0 <= j < Wo = (Wd + 2 pw - Kw) // sw + 1``,
where ``xp`` is ``x`` padded by ``ph`` rows and ``pw`` columns on each side:
``padding_mode="zeros"`` pads with zeros, ``"circular"`` wraps around (padded row ``P``
holds input row ``(P - ph) mod H``; PyTorch requires ``ph <= H`` and ``pw <= Wd``, and so
does this module). 001_76ce3a8a4b6079c3.txt, Table 2 row Convolution (Eq. 12-14; the
paper's ``y^O = W^O_{K,K,C} x^{K,K,C}`` is one output pixel of this sum, ``D = K K C``).

Backward, for an upstream gradient ``g`` of shape (N, O, Ho, Wo): the chain rule through
every (output pixel, kernel tap) pair of the sum above::

    dW[o, c, p, q] = sum_{n, i, j} g[n, o, i, j] xp[n, c, i sh + p, j sw + q]
    db[o]          = sum_{n, i, j} g[n, o, i, j]
    dx[n, c, r, s] = sum of g[n, o, i, j] W[o, c, p, q] over all (o, i, j, p, q) whose
                     tap xp[n, c, i sh + p, j sw + q] is x[n, c, r, s]

(a transposed convolution; with circular padding one input pixel can sit under several
taps of the same window, and each one adds its term). Padded zeros are terms of the
forward sum (``0 * inf`` is NaN, as in PyTorch) and of dW; they have no dx.

The Jacobian of one sample (C, H, Wd) is the dense matrix of this linear map, rows
``(o, i, j)`` and columns ``(c, r, s)`` in C order (numerator layout): entry = the sum of
the ``W[o, c, p, q]`` whose tap lands on pixel (r, s) for output (i, j) (summed in float64
and rounded once; in strict mode in steps of the input's format). Its 2-norm is the
Lipschitz constant in the 2-norm; the paper's ``sigma_max(W^O_D)`` is the 2-norm of a
different matrix, the (O, C Kh Kw) matrix of one window. :func:`linear_operator` gives the
Jacobian as a linear operator (``matvec``: the convolution without bias, ``rmatvec``: its
adjoint, the transposed convolution) for inputs too large for a dense matrix.

Arithmetic. float64, float32 and float16 ("mixed") inputs (bfloat16 too, widened to float64
by ``kernels._bf16.widened`` first): an im2col gather (Numba, one (n, c) plane after
another, a block of samples at a time) widens the input exactly to float64 columns; BLAS
float64 matrix products (one per sample, batched by NumPy's matmul) form every sum (a
product of two float32 or float16 values is exact in float64); and the float64 results are
rounded once to the input dtype. The backward pass, with stride 1, zero padding
``ph <= Kh - 1``, ``pw <= Kw - 1`` and finite x, W and g (the common case), is a
convolution of ``g``: one im2col of ``g`` padded by ``(Kh - 1 - ph, Kw - 1 - pw)`` feeds
both ``dx = W_flipped gcols`` and ``dW = x gcols^T`` (BLAS); otherwise ``dW`` comes from
the im2col of ``x`` and ``dx`` is scattered back by a Numba col2im, plane by plane (wrapped
circular padding is folded back onto the pixels it copies). Both are sums of the same
nonzero terms; they differ only in which padded zeros they add, which matters only for a
non-finite value (``0 * inf``), hence the finiteness condition. With ``S`` the sum of the
magnitudes of an output's terms and ``n`` their number, ``|result - exact| <= gamma_n S``
before that rounding (``gamma_n = n u / (1 - n u)``, ``u = 2^-53``, any summation order;
Higham, Accuracy and Stability, Eq. 3.5): float64 is not compensated, float16 results are
inf exactly when the exact value rounds to inf (up to that error). ``strict_fp16=True``
(float16 or bfloat16 input; small inputs: plain loops): every product and every partial
sum is rounded to the input's format (``kernels/_strict.narrow``), starting from +0 in a
fixed order -- ``y`` over ``(c, p, q)`` (a padded zero is a term ``0 * W``) then ``+ b``;
``dW`` and ``db`` over ``(n, i, j)``; ``dx`` over ``(o, p, i, q, j)``; the Jacobian over
``(p, q)`` -- each lexicographic, ascending. In half a product or partial sum past 65504 is
inf; bfloat16 has float32's range, and its 8 significant bits break the sums first: a
running sum of ones stops at 256 (``256 + 1`` rounds back to 256; half's at 2048), so a
1 x 1 kernel of ones over C = 300 channels of ones gives 256, not 300.

NaN and inf propagate as IEEE arithmetic says. Nothing is written into the inputs; any
strides work.

>>> import numpy as np
>>> from kernels import conv2d
>>> x = np.arange(9.0).reshape(1, 1, 3, 3)
>>> conv2d.forward(x, np.ones((1, 1, 2, 2)))[0, 0]
array([[ 8., 12.],
       [20., 24.]])
>>> conv2d.forward(x, np.ones((1, 1, 1, 3)), padding=(0, 1), padding_mode="circular")[0, 0, 0]
array([3., 3., 3.])
>>> A = conv2d.linear_operator(np.ones((1, 1, 2, 2)), (1, 3, 3))
>>> A.shape, A.rmatvec(np.array([1.0, 0.0, 0.0, 0.0])).reshape(3, 3)[0]
((4, 9), array([1., 1., 0.]))
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from numba import njit, prange
from numpy.typing import ArrayLike

from kernels._bf16 import to_bfloat16
from kernels._strict import bfloat16_kernel, is_bfloat16, narrow
from kernels._threads import thread_safe
from kernels._validate import MAX_EXTENT, choice, float_array, pair, strict_mode
from kernels.cast import cast, widen

__all__ = ["Conv2dOperator", "forward", "jacobian", "linear_operator", "vjp"]

#: Padding modes (PyTorch's names).
PADDING_MODES = ("zeros", "circular")

#: Largest number of float64 entries of one im2col block: the samples are processed in
#: blocks of at most this many column entries (at least one sample per block), 16 MiB,
#: which a block's gather, product and scatter find in the cache (a block of all 8 samples
#: in the benchmark of ``_im2col`` was 10-20 % slower). Fixed, so results do not depend on
#: the machine.
COLUMN_BLOCK_ENTRIES = 1 << 21


# --------------------------------------------------------------------------------------
# Numba loops. ``rows[p, i]`` is the input row under tap row p of output row i, or -1 for
# a padded zero (likewise ``cols[q, j]``); circular padding has no -1.
# --------------------------------------------------------------------------------------


@njit(cache=True)
def _padded_plane(x, n, c, row_source, col_source, out):
    """out = the padded plane xp[n, c] in float64 (row_source[P]: input row of padded row
    P, -1 for a zero row; likewise col_source)."""
    for P in range(row_source.size):
        r = row_source[P]
        for Q in range(col_source.size):
            s = col_source[Q]
            out[P, Q] = np.float64(x[n, c, r, s]) if r >= 0 and s >= 0 else 0.0


@njit(cache=True)
def _im2col(x, row_source, col_source, stride_h, stride_w, taps_h, taps_w, out):
    """out[n, (c, p, q), (i, j)] = xp[n, c, i sh + p, j sw + q], widened to float64.

    Each (n, c) plane is padded once into a scratch plane, then copied tap by tap without
    branches; for a column stride of 1 from contiguous slices, which LLVM vectorizes (one
    sample of (64, 56, 56) with 3 x 3 taps: 1.16 ms against 1.73 ms through the general
    strided index, the same bits). Serial on purpose: with ``prange`` over the
    planes the loop alone runs about twice as fast on two cores, but forward + vjp as a
    whole ran slower (x (8, 64, 56, 56), W (64, 64, 3, 3): best 0.166 s against 0.127 s,
    median 0.18 s against 0.155 s), because the Numba and BLAS thread pools hand the cores
    back and forth (each spins for a while after its region) four times per call.
    """
    samples, channels = x.shape[0], x.shape[1]
    out_w = (col_source.size - taps_w) // stride_w + 1
    out_h = out.shape[2] // out_w
    for plane in range(samples * channels):
        n = plane // channels
        c = plane % channels
        padded = np.empty((row_source.size, col_source.size))
        _padded_plane(x, n, c, row_source, col_source, padded)
        for p in range(taps_h):
            for q in range(taps_w):
                row = out[n, (c * taps_h + p) * taps_w + q]
                if stride_w == 1:  # contiguous slices: a copy LLVM vectorizes
                    for i in range(out_h):
                        source = padded[i * stride_h + p, q : q + out_w]
                        base = i * out_w
                        for j in range(out_w):
                            row[base + j] = source[j]
                else:
                    for i in range(out_h):
                        source = padded[i * stride_h + p]
                        base = i * out_w
                        for j in range(out_w):
                            row[base + j] = source[j * stride_w + q]


@njit(cache=True)
def _col2im(dcols, row_source, col_source, stride_h, stride_w, taps_h, taps_w, out):
    """out[n, c, r, s] += dcols[n, (c, p, q), (i, j)] for every tap on pixel (r, s).

    Each (n, c) plane is accumulated into a padded scratch plane, then folded back onto
    the input (circular padding: the wrapped rows and columns add onto the pixels they
    copy). Planes are independent (a ``prange`` over them would be race-free; see
    ``_im2col`` for why the loop is serial).
    """
    samples, channels = out.shape[0], out.shape[1]
    out_w = (col_source.size - taps_w) // stride_w + 1
    out_h = dcols.shape[2] // out_w
    for plane in range(samples * channels):
        n = plane // channels
        c = plane % channels
        padded = np.zeros((row_source.size, col_source.size))
        for p in range(taps_h):
            for q in range(taps_w):
                row = dcols[n, (c * taps_h + p) * taps_w + q]
                if stride_w == 1:  # contiguous slices, as in _im2col
                    for i in range(out_h):
                        target = padded[i * stride_h + p, q : q + out_w]
                        base = i * out_w
                        for j in range(out_w):
                            target[j] += row[base + j]
                else:
                    for i in range(out_h):
                        target = padded[i * stride_h + p]
                        base = i * out_w
                        for j in range(out_w):
                            target[j * stride_w + q] += row[base + j]
        for P in range(row_source.size):
            r = row_source[P]
            if r < 0:
                continue
            for Q in range(col_source.size):
                s = col_source[Q]
                if s >= 0:
                    out[n, c, r, s] += padded[P, Q]


@njit(cache=True, fastmath={"reassoc"})
def _all_finite(flat):
    """Whether every entry of the 1-d array ``flat`` is finite (``v * 0`` is 0 for a finite
    ``v`` and NaN for inf or NaN; the sum is NaN as soon as one term is)."""
    total = 0.0
    for k in range(flat.size):
        total += np.float64(flat[k]) * 0.0
    return total == 0.0


@thread_safe
@njit(cache=True, parallel=True)
def _forward_f16s(x, w, b, has_bias, rows, cols, out, bf):
    """Strict half (bfloat16 if ``bf``) forward: y[n, o, i, j] summed over (c, p, q), then
    + b[o]."""
    samples, channels = x.shape[0], x.shape[1]
    outputs, _, taps_h, taps_w = w.shape
    out_h, out_w = rows.shape[1], cols.shape[1]
    for job in prange(samples * outputs):
        n = job // outputs
        o = job % outputs
        for i in range(out_h):
            for j in range(out_w):
                acc = 0.0
                for c in range(channels):
                    for p in range(taps_h):
                        r = rows[p, i]
                        for q in range(taps_w):
                            s = cols[q, j]
                            v = x[n, c, r, s] if r >= 0 and s >= 0 else 0.0
                            acc = narrow(acc + narrow(v * w[o, c, p, q], bf), bf)
                if has_bias:
                    acc = narrow(acc + b[o], bf)
                out[n, o, i, j] = acc


@thread_safe
@njit(cache=True, parallel=True)
def _parameter_gradients_f16s(x, g, rows, cols, dw, db, bf):
    """Strict half (bfloat16 if ``bf``) dW[o, c, p, q] and db[o], each summed over (n, i, j)."""
    samples, channels = x.shape[0], x.shape[1]
    outputs, out_h, out_w = g.shape[1], g.shape[2], g.shape[3]
    taps_h, taps_w = rows.shape[0], cols.shape[0]
    for o in prange(outputs):
        total = 0.0
        for n in range(samples):
            for i in range(out_h):
                for j in range(out_w):
                    total = narrow(total + g[n, o, i, j], bf)
        db[o] = total
        for c in range(channels):
            for p in range(taps_h):
                for q in range(taps_w):
                    acc = 0.0
                    for n in range(samples):
                        for i in range(out_h):
                            r = rows[p, i]
                            for j in range(out_w):
                                s = cols[q, j]
                                v = x[n, c, r, s] if r >= 0 and s >= 0 else 0.0
                                acc = narrow(acc + narrow(g[n, o, i, j] * v, bf), bf)
                    dw[o, c, p, q] = acc


@thread_safe
@njit(cache=True, parallel=True)
def _input_gradient_f16s(g, w, rows, cols, out, bf):
    """Strict half (bfloat16 if ``bf``) dx[n, c, r, s]: the terms g W in lexicographic order
    of (o, p, i, q, j)."""
    samples, outputs, out_h, out_w = g.shape
    channels, taps_h, taps_w = w.shape[1], w.shape[2], w.shape[3]
    height, width = out.shape[2], out.shape[3]
    for plane in prange(samples * channels):
        n = plane // channels
        c = plane % channels
        for r in range(height):
            for s in range(width):
                acc = 0.0
                for o in range(outputs):
                    for p in range(taps_h):
                        for i in range(out_h):
                            if rows[p, i] != r:
                                continue
                            for q in range(taps_w):
                                for j in range(out_w):
                                    if cols[q, j] != s:
                                        continue
                                    term = narrow(g[n, o, i, j] * w[o, c, p, q], bf)
                                    acc = narrow(acc + term, bf)
                out[n, c, r, s] = acc


@thread_safe
@njit(cache=True, parallel=True)
def _jacobian(w, rows, cols, height, width, strict, out, bf):
    """out[(o, i, j), (c, r, s)] = sum of the W[o, c, p, q] whose tap lands on (r, s).

    Rows of one o belong to one thread. ``strict``: every partial sum rounded to half
    (bfloat16 if ``bf``).
    """
    outputs, channels, taps_h, taps_w = w.shape
    out_h, out_w = rows.shape[1], cols.shape[1]
    for o in prange(outputs):
        for i in range(out_h):
            for j in range(out_w):
                row = (o * out_h + i) * out_w + j
                for c in range(channels):
                    for p in range(taps_h):
                        r = rows[p, i]
                        if r < 0:
                            continue
                        for q in range(taps_w):
                            s = cols[q, j]
                            if s < 0:
                                continue
                            column = (c * height + r) * width + s
                            total = out[row, column] + w[o, c, p, q]
                            out[row, column] = narrow(total, bf) if strict else total


# --------------------------------------------------------------------------------------
# Argument checks and geometry
# --------------------------------------------------------------------------------------


def _source_index(size: int, taps: int, out: int, stride: int, pad: int, circular: bool):
    """index[p, i]: the input index under tap p of output i (-1: a padded zero)."""
    padded = np.arange(out)[np.newaxis, :] * stride + np.arange(taps)[:, np.newaxis] - pad
    if circular:
        return np.ascontiguousarray(padded % size)
    return np.where((padded >= 0) & (padded < size), padded, -1)


@dataclass(frozen=True)
class _Geometry:
    """Shapes, stride, padding and the tap index tables of one convolution."""

    input_shape: tuple[int, int, int]  # (C, H, Wd)
    weight_shape: tuple[int, int, int, int]  # (O, C, Kh, Kw)
    stride: tuple[int, int]
    padding: tuple[int, int]
    circular: bool
    output_hw: tuple[int, int]
    rows: np.ndarray
    cols: np.ndarray
    #: row_source[P]: the input row copied into padded row P (-1: a zero row); likewise
    #: col_source for the columns.
    row_source: np.ndarray
    col_source: np.ndarray

    @property
    def taps(self) -> int:
        return self.weight_shape[1] * self.weight_shape[2] * self.weight_shape[3]

    @property
    def pixels(self) -> int:
        return self.output_hw[0] * self.output_hw[1]

    def scatter_arguments(self) -> tuple:
        """The geometry arguments of ``_im2col`` and ``_col2im``."""
        return (
            self.row_source,
            self.col_source,
            *self.stride,
            self.weight_shape[2],
            self.weight_shape[3],
        )

    def output_shape(self, samples: int) -> tuple[int, int, int, int]:
        return (samples, self.weight_shape[0], *self.output_hw)


def _geometry(
    input_shape: tuple[int, ...],
    weight_shape: tuple[int, ...],
    stride: object,
    padding: object,
    padding_mode: object,
) -> _Geometry:
    channels, height, width = input_shape
    if len(weight_shape) != 4 or weight_shape[1] != channels:
        raise ValueError(
            f"W: expected shape (O, {channels}, Kh, Kw) (C = axis 1 of x), got {weight_shape}"
        )
    if weight_shape[2] < 1 or weight_shape[3] < 1:
        raise ValueError(f"W: expected a kernel of at least 1 x 1, got shape {weight_shape}")
    strides = pair(stride, "stride", low=1, length_error=TypeError)
    pads = pair(padding, "padding", low=0, length_error=TypeError)
    circular = choice(padding_mode, "padding_mode", PADDING_MODES) == "circular"
    if circular and (pads[0] > height or pads[1] > width):
        raise ValueError(
            f"padding: circular padding wraps at most once: expected padding <= ({height}, "
            f"{width}) (the input's H, Wd), got {padding!r}"
        )
    sizes = (height, width)
    padded_hw = (height + 2 * pads[0], width + 2 * pads[1])
    if padded_hw[0] * padded_hw[1] > MAX_EXTENT:
        raise ValueError(
            f"padding: the padded plane {padded_hw} (H, Wd of x plus 2 * padding) has more than "
            f"2^31 entries (16 GiB of float64 scratch for one plane); got padding {padding!r}"
        )
    out = tuple((sizes[a] + 2 * pads[a] - weight_shape[2 + a]) // strides[a] + 1 for a in range(2))
    if min(out) < 1:
        raise ValueError(
            f"W: kernel {weight_shape[2:]} does not fit the padded input "
            f"({height + 2 * pads[0]}, {width + 2 * pads[1]}) (H, Wd of x plus 2 * padding)"
        )
    index = [
        _source_index(sizes[a], weight_shape[2 + a], out[a], strides[a], pads[a], circular)
        for a in range(2)
    ]
    padded = [
        _source_index(sizes[a], 1, sizes[a] + 2 * pads[a], 1, pads[a], circular)[0]
        for a in range(2)
    ]
    return _Geometry(
        (channels, height, width),
        tuple(weight_shape),
        strides,
        pads,
        circular,
        out,
        index[0].astype(np.int64),
        index[1].astype(np.int64),
        padded[0].astype(np.int64),
        padded[1].astype(np.int64),
    )


def _like_x(value: ArrayLike, name: str, dtype: np.dtype) -> np.ndarray:
    array = float_array(value, name, bfloat16=True)
    if array.dtype != dtype:
        raise TypeError(f"{name}: expected dtype {dtype} (the dtype of x), got {array.dtype}")
    return array


class _Prepared:
    """Checked arguments of one call, and the geometry."""

    def __init__(self, x, W, b, stride, padding, padding_mode, strict_fp16, sample_ndim=4):
        x = float_array(x, "x", bfloat16=True)
        if x.ndim != sample_ndim:
            expected = "(N, C, H, Wd)" if sample_ndim == 4 else "one sample (C, H, Wd)"
            raise ValueError(f"x: expected shape {expected}, got {x.shape}")
        W = _like_x(W, "W", x.dtype)
        if W.ndim != 4:
            raise ValueError(f"W: expected shape (O, C, Kh, Kw), got {W.shape}")
        if b is not None:
            b = _like_x(b, "b", x.dtype)
            if b.shape != (W.shape[0],):
                raise ValueError(f"b: expected shape ({W.shape[0]},) (axis 0 of W), got {b.shape}")
        self.strict = strict_mode(strict_fp16, x.dtype)
        self.bf = is_bfloat16(x)
        if self.bf and not self.strict:
            raise TypeError("x: bfloat16 reaches this path in strict mode only (bfloat16_kernel)")
        self.geometry = _geometry(x.shape[-3:], W.shape, stride, padding, padding_mode)
        self.x, self.W, self.b = x, W, b

    def finish(self, values: np.ndarray) -> np.ndarray:
        return _round(values, self.x.dtype)


def _round(values: np.ndarray, dtype: np.dtype) -> np.ndarray:
    """Round once to ``dtype`` (C order; bfloat16 directly from float64, where ml_dtypes'
    cast rounds twice, through float32); an overflow to inf is a result, not a warning."""
    if is_bfloat16(dtype):
        return to_bfloat16(np.ascontiguousarray(values, dtype=np.float64))
    if np.dtype(dtype) == np.float16:
        return cast(values, "float16")
    with np.errstate(over="ignore"):
        return values.astype(dtype, order="C", copy=False)


def _wide(array: np.ndarray) -> np.ndarray:
    """float32 and float64 arrays as they are (the Numba gather widens them); float16 and
    bfloat16 widened exactly to float64. C-contiguous."""
    if array.dtype == np.float16 or is_bfloat16(array):
        return widen(array)
    return np.ascontiguousarray(array)


def _chunk_size(samples: int, geometry: _Geometry) -> int:
    """Samples per im2col block: at most COLUMN_BLOCK_ENTRIES entries, at least one sample."""
    per_sample = max(1, geometry.taps * geometry.pixels)
    return max(1, min(samples, COLUMN_BLOCK_ENTRIES // per_sample))


# --------------------------------------------------------------------------------------
# float64 values of the results (halves or bfloat16 values in strict mode). The samples are
# processed in blocks; the block buffers are allocated once per call and reused (fresh
# memory costs a page fault per page, about as much as the copy itself). Layouts: columns
# (n, C Kh Kw, Ho Wo), so that y, g and dx keep their NCHW layout and every product is one
# batched NumPy matmul (one BLAS call per sample).
# --------------------------------------------------------------------------------------


#: inf - inf, 0 * inf and overflow give NaN and inf as IEEE says: results, not warnings.
_IEEE = np.errstate(invalid="ignore", over="ignore")


@_IEEE
def _forward_values(geometry: _Geometry, x, W, b, strict: bool, bf: bool = False) -> np.ndarray:
    samples = x.shape[0]
    outputs = geometry.weight_shape[0]
    if strict:
        out = np.empty(geometry.output_shape(samples))
        bias = np.zeros(outputs) if b is None else np.ascontiguousarray(b, dtype=np.float64)
        _forward_f16s(
            _wide(x), _wide(W), bias, b is not None, geometry.rows, geometry.cols, out, bf
        )
        return out
    weights = np.ascontiguousarray(W, dtype=np.float64).reshape(outputs, geometry.taps)
    x = _wide(x)
    y = np.empty((samples, outputs, geometry.pixels))
    step = _chunk_size(samples, geometry)
    columns = np.empty((step, geometry.taps, geometry.pixels))
    for start in range(0, samples, step):
        stop = min(start + step, samples)
        block = columns[: stop - start]
        _im2col(x[start:stop], *geometry.scatter_arguments(), block)
        np.matmul(weights, block, out=y[start:stop])
    if b is not None:
        y += np.asarray(b, dtype=np.float64)[:, np.newaxis]
    return y.reshape(geometry.output_shape(samples))


def _finite(array: np.ndarray) -> bool:
    """Whether every entry of the float32 or float64 ``array`` is finite (one pass, no
    temporaries)."""
    return bool(_all_finite(np.ascontiguousarray(array).reshape(-1)))


def _transposed_geometry(geometry: _Geometry) -> _Geometry | None:
    """The geometry of ``dx`` as a convolution of ``g``, or None where it is not one.

    With stride 1 and zero padding ``ph <= Kh - 1``, ``pw <= Kw - 1``, the transposed
    convolution is a convolution: ``dx[n, c, r, s] = sum_{o, p', q'} W[o, c, Kh-1-p',
    Kw-1-q'] gp[n, o, r + p', s + q']`` with ``gp`` the upstream gradient padded by
    ``(Kh - 1 - ph, Kw - 1 - pw)`` zeros: the taps of ``g``'s im2col are the (output pixel,
    kernel tap) pairs that read pixel (r, s), plus padded zeros.
    """
    (_, _, kh, kw), (ph, pw) = geometry.weight_shape, geometry.padding
    if geometry.circular or geometry.stride != (1, 1) or ph > kh - 1 or pw > kw - 1:
        return None
    outputs, channels = geometry.weight_shape[:2]
    try:
        return _geometry(
            (outputs, *geometry.output_hw), (channels, outputs, kh, kw), 1,
            (kh - 1 - ph, kw - 1 - pw), "zeros",
        )  # fmt: skip
    except ValueError:  # a padded plane of g past MAX_EXTENT: the general path
        return None


@_IEEE
def _backward_values(
    geometry: _Geometry, x, g, W, strict: bool, parameters: bool, bf: bool = False
):
    """float64 (dx, dW, db); dW and db only if ``parameters`` (x is then needed). ``bf``:
    strict bfloat16 (``strict`` True) instead of strict half."""
    samples = g.shape[0]
    outputs = geometry.weight_shape[0]
    if strict:
        dx = np.zeros((samples, *geometry.input_shape))
        dw = db = None
        g = _wide(g)
        _input_gradient_f16s(g, _wide(W), geometry.rows, geometry.cols, dx, bf)
        if parameters:
            dw = np.empty(geometry.weight_shape)
            db = np.empty(outputs)
            _parameter_gradients_f16s(_wide(x), g, geometry.rows, geometry.cols, dw, db, bf)
        return dx, dw, db
    db = None
    if parameters:
        db = g.reshape(samples, outputs, geometry.pixels).sum(axis=(0, 2), dtype=np.float64)
        x = _wide(x)
    g = _wide(g)
    transposed = _transposed_geometry(geometry)
    if (
        transposed is not None
        and np.isfinite(W).all()
        and _finite(g)
        and (not parameters or _finite(x))
    ):
        dx, dw = _backward_by_convolution(geometry, transposed, x, g, W, parameters)
    else:
        dx, dw = _backward_by_scatter(geometry, x, g, W, parameters)
    return dx, dw, db


def _backward_by_convolution(geometry: _Geometry, transposed: _Geometry, x, g, W, parameters):
    """float64 (dx, dW or None) from one im2col of ``g`` per block (see
    :func:`_transposed_geometry`): ``dx = Wt gcols`` and ``dW^T = x gcols^T``, two BLAS
    products and no scatter.

    Finite inputs only: the padded zeros of ``g`` are terms here where the general path
    has the padded zeros of ``x`` (``0 * inf`` would be NaN in different places); with
    finite values both are sums of the same nonzero terms.
    """
    samples = g.shape[0]
    outputs, channels, kh, kw = geometry.weight_shape
    pixels = transposed.pixels  # H Wd
    taps = transposed.taps  # O Kh Kw
    # flipped[c, (o, p', q')] = W[o, c, Kh-1-p', Kw-1-q']
    wide_w = np.asarray(W, dtype=np.float64)[:, :, ::-1, ::-1].transpose(1, 0, 2, 3)
    flipped = np.ascontiguousarray(wide_w).reshape(channels, taps)
    dx = np.empty((samples, channels, pixels))
    step = _chunk_size(samples, transposed)
    columns = np.empty((step, taps, pixels))
    if parameters:
        rows = x.reshape(samples, channels, pixels)
        widened = None if x.dtype == np.float64 else np.empty((step, channels, pixels))
        products = np.empty((step, channels, taps))
        dwt = np.zeros((channels, taps))
    for start in range(0, samples, step):
        stop = min(start + step, samples)
        size = stop - start
        block = columns[:size]
        _im2col(g[start:stop], *transposed.scatter_arguments(), block)
        np.matmul(flipped, block, out=dx[start:stop])
        if parameters:
            if widened is None:
                x_block = rows[start:stop]
            else:
                x_block = widened[:size]
                x_block[...] = rows[start:stop]  # widened exactly to float64
            np.matmul(x_block, block.transpose(0, 2, 1), out=products[:size])
            dwt += products[:size].sum(axis=0)
    dx = dx.reshape(samples, *geometry.input_shape)
    if not parameters:
        return dx, None
    dw = dwt.reshape(channels, outputs, kh, kw)[:, :, ::-1, ::-1].transpose(1, 0, 2, 3)
    return dx, np.ascontiguousarray(dw)


def _backward_by_scatter(geometry: _Geometry, x, g, W, parameters):
    """float64 (dx, dW or None): the columns of ``dx`` by BLAS, scattered back by col2im."""
    samples = g.shape[0]
    outputs = geometry.weight_shape[0]
    dx = np.zeros((samples, *geometry.input_shape))
    dw = None
    weights_t = np.ascontiguousarray(W, dtype=np.float64).reshape(outputs, geometry.taps).T
    grad = g.reshape(samples, outputs, geometry.pixels)
    step = _chunk_size(samples, geometry)
    grad_block = np.empty((step, outputs, geometry.pixels))
    dcols = np.empty((step, geometry.taps, geometry.pixels))
    if parameters:
        columns = np.empty_like(dcols)
        products = np.empty((step, outputs, geometry.taps))
        dw = np.zeros((outputs, geometry.taps))
    for start in range(0, samples, step):
        stop = min(start + step, samples)
        size = stop - start
        block = grad_block[:size]
        block[...] = grad[start:stop]  # widened exactly to float64
        if parameters:
            _im2col(x[start:stop], *geometry.scatter_arguments(), columns[:size])
            np.matmul(block, columns[:size].transpose(0, 2, 1), out=products[:size])
            dw += products[:size].sum(axis=0)
        np.matmul(weights_t, block, out=dcols[:size])
        _col2im(dcols[:size], *geometry.scatter_arguments(), dx[start:stop])
    if parameters:
        dw = dw.reshape(geometry.weight_shape)
    return dx, dw


def _jacobian_values(geometry: _Geometry, W, strict: bool, bf: bool = False) -> np.ndarray:
    outputs = geometry.weight_shape[0]
    out = np.zeros((outputs * geometry.pixels, int(np.prod(geometry.input_shape))))
    _, height, width = geometry.input_shape
    _jacobian(
        np.ascontiguousarray(W, dtype=np.float64),
        geometry.rows,
        geometry.cols,
        height,
        width,
        strict,
        out,
        bf,
    )
    return out


# --------------------------------------------------------------------------------------
# Public functions
# --------------------------------------------------------------------------------------


@bfloat16_kernel
def forward(
    x: ArrayLike,
    W: ArrayLike,
    b: ArrayLike | None = None,
    stride: int | tuple[int, int] = 1,
    padding: int | tuple[int, int] = 0,
    *,
    padding_mode: str = "zeros",
    strict_fp16: bool = False,
) -> np.ndarray:
    """The convolution of ``x`` (N, C, H, Wd): shape (N, O, Ho, Wo), dtype of ``x``."""
    args = _Prepared(x, W, b, stride, padding, padding_mode, strict_fp16)
    values = _forward_values(args.geometry, args.x, args.W, args.b, args.strict, args.bf)
    return args.finish(values)


@bfloat16_kernel
def vjp(
    x: ArrayLike,
    g: ArrayLike,
    W: ArrayLike,
    b: ArrayLike | None = None,
    stride: int | tuple[int, int] = 1,
    padding: int | tuple[int, int] = 0,
    *,
    padding_mode: str = "zeros",
    strict_fp16: bool = False,
) -> tuple[np.ndarray, np.ndarray, np.ndarray | None]:
    """``(dx, dW, db)`` for the upstream gradient ``g`` of shape (N, O, Ho, Wo).

    ``dx`` has the shape of ``x``, ``dW`` that of ``W``, ``db`` shape (O,); ``db`` is None
    when ``b`` is None.
    """
    args = _Prepared(x, W, b, stride, padding, padding_mode, strict_fp16)
    g = _like_x(g, "g", args.x.dtype)
    expected = args.geometry.output_shape(args.x.shape[0])
    if g.shape != expected:
        raise ValueError(f"g: expected shape {expected} (the shape of y), got {g.shape}")
    dx, dw, db = _backward_values(
        args.geometry, args.x, g, args.W, args.strict, parameters=True, bf=args.bf
    )
    return args.finish(dx), args.finish(dw), None if args.b is None else args.finish(db)


@bfloat16_kernel
def jacobian(
    x: ArrayLike,
    W: ArrayLike,
    b: ArrayLike | None = None,
    stride: int | tuple[int, int] = 1,
    padding: int | tuple[int, int] = 0,
    *,
    padding_mode: str = "zeros",
    strict_fp16: bool = False,
) -> np.ndarray:
    """``dy/dx`` of one sample ``x`` (C, H, Wd): a dense (O Ho Wo, C H Wd) matrix in x's
    dtype, rows and columns in C order (numerator layout). It does not depend on ``x`` or
    ``b``; with circular wrapping an entry may be a sum of several weights."""
    args = _Prepared(x, W, b, stride, padding, padding_mode, strict_fp16, sample_ndim=3)
    return args.finish(_jacobian_values(args.geometry, args.W, args.strict, args.bf))


class Conv2dOperator:
    """The Jacobian of :func:`forward` (without bias) as a linear operator.

    ``A v`` is the convolution of the flattened input ``v`` (length C H Wd, C order),
    flattened; ``A^T u`` the transposed convolution (the ``dx`` of :func:`vjp` for
    ``g = u``). The map is linear, so it is its own Jacobian at every input. Vectors must
    have the dtype of ``W``; results are rounded once, as in :func:`forward`.
    """

    def __init__(self, W: np.ndarray, geometry: _Geometry):
        self._W = W
        self._geometry = geometry
        outputs = geometry.weight_shape[0]
        self.shape = (outputs * geometry.pixels, int(np.prod(geometry.input_shape)))
        self.dtype = W.dtype

    def _vector(self, value: ArrayLike, name: str, length: int) -> np.ndarray:
        array = float_array(value, name, bfloat16=True)
        if array.dtype != self.dtype:
            raise TypeError(
                f"{name}: expected dtype {self.dtype} (the dtype of W), got {array.dtype}"
            )
        if array.shape != (length,):
            raise ValueError(f"{name}: expected shape ({length},), got {array.shape}")
        return array

    def matvec(self, v: ArrayLike) -> np.ndarray:
        """``A v``: the convolution (no bias) of the flattened input ``v``."""
        v = self._vector(v, "v", self.shape[1]).reshape(1, *self._geometry.input_shape)
        values = _forward_values(self._geometry, v, self._W, None, strict=False)
        return _round(values, self.dtype).reshape(-1)

    def rmatvec(self, u: ArrayLike) -> np.ndarray:
        """``A^T u``: the transposed convolution of the flattened output-shaped ``u``."""
        u = self._vector(u, "u", self.shape[0]).reshape(self._geometry.output_shape(1))
        dx, _, _ = _backward_values(self._geometry, None, u, self._W, False, parameters=False)
        return _round(dx, self.dtype).reshape(-1)

    def to_dense(self) -> np.ndarray:
        """The dense matrix, equal to :func:`jacobian` at any input."""
        return _round(_jacobian_values(self._geometry, self._W, strict=False), self.dtype)


def linear_operator(
    W: ArrayLike,
    input_shape: tuple[int, int, int],
    stride: int | tuple[int, int] = 1,
    padding: int | tuple[int, int] = 0,
    *,
    padding_mode: str = "zeros",
) -> Conv2dOperator:
    """The Jacobian of the convolution with ``W`` on inputs of one sample of shape
    ``input_shape = (C, H, Wd)``, as a linear operator (``.shape``, ``.matvec``,
    ``.rmatvec``, ``.to_dense()``), in W's dtype (bfloat16 too)."""
    W = float_array(W, "W", bfloat16=True)
    if W.ndim != 4:
        raise ValueError(f"W: expected shape (O, C, Kh, Kw), got {W.shape}")
    shape = tuple(input_shape) if isinstance(input_shape, (tuple, list)) else None
    if (
        shape is None
        or len(shape) != 3
        or not all(isinstance(v, (int, np.integer)) and v >= 0 for v in shape)
    ):
        raise ValueError(f"input_shape: expected (C, H, Wd) of ints >= 0, got {input_shape!r}")
    geometry = _geometry(tuple(int(v) for v in shape), W.shape, stride, padding, padding_mode)
    return Conv2dOperator(W, geometry)
