"""High-precision mpmath references for Linear and Conv2d, from their definitions.

Source: ``shared/seeds/001_76ce3a8a4b6079c3.txt``, Table 2 rows Linear (Eq. 9-11) and
Convolution (Eq. 12-14), in PyTorch's conventions (rows are samples; NCHW images;
cross-correlation). Everything here is written from the index sums of the definitions,
sharing no code with ``kernels/linear.py`` or ``kernels/conv2d.py``:

* Linear: ``y[m, i] = b[i] + sum_k x[m, k] W[i, k]`` for ``x`` of shape (..., D), ``W`` of
  shape (O, D), ``b`` of shape (O,) or None.
* Conv2d: ``y[n, o, i, j] = b[o] + sum_{c, p, q} W[o, c, p, q] xp[n, c, i sh + p, j sw + q]``
  for ``x`` (N, C, H, Wd), ``W`` (O, C, Kh, Kw), stride ``(sh, sw)``, padding ``(ph, pw)``;
  ``xp`` is the padded input: padded pixel ``(P, Q)`` holds ``x[n, c, P - ph, Q - pw]`` when
  that is inside the image, else 0 (``padding_mode="zeros"``) or, for ``"circular"``,
  ``x[n, c, (P - ph) mod H, (Q - pw) mod Wd]`` (PyTorch: needs ``ph <= H``, ``pw <= Wd``).
  ``Ho = (H + 2 ph - Kh) // sh + 1``, ``Wo`` likewise.

Gradients by the chain rule over the definition's index set, term by term: every
(output, term) pair of the forward sum -- for Conv2d every (n, o, i, j) and tap (c, p, q)
-- contributes ``g[output] * (the other factor)`` to the gradient of each factor it
contains: to ``dW[o, c, p, q]`` always, to ``dx`` of the input pixel the tap reads (none
for a padded zero; with circular padding a pixel may be read by several taps of one window,
and each adds its own term), and ``g`` itself to ``db``. The Jacobian is the same bookkeeping
without ``g``: entry ``[output, input pixel]`` is the sum of the weights of the taps that
read that pixel (numerator layout, rows and columns flattened in C order). Linear's
Jacobian is ``W``: in ``sum_k W[i, k] x[k]`` only the term ``k = j`` depends on ``x[j]``.

Inputs are taken exactly (:func:`derive.reference.core.exact_array`, inf and NaN
included). Each output is one ``mpmath.fsum`` of its exact products (a product
of two doubles has at most 106 bits, exact at 50 digits = 169 bits), so it is correct to
within a few units of ``2^-166`` relative to the sum of the magnitudes of its terms -- over
100 bits below any float64 error bound the tests apply. IEEE special values follow
mpmath: ``0 * inf`` and ``inf - inf`` are NaN. All arithmetic runs inside
``mpmath.workdps(dps)``; the global precision is never changed. Results are NumPy object
arrays of ``mpf`` of the output's shape.

>>> import numpy as np
>>> linear_forward(np.array([1.0, 2.0]), np.array([[3.0, 4.0]]), np.array([0.5]))
array([mpf('11.5')], dtype=object)
>>> conv2d_forward(np.ones((1, 1, 2, 2)), np.ones((1, 1, 2, 2)), padding=1)[0, 0]
array([[mpf('1.0'), mpf('2.0'), mpf('1.0')],
       [mpf('2.0'), mpf('4.0'), mpf('2.0')],
       [mpf('1.0'), mpf('2.0'), mpf('1.0')]], dtype=object)
"""

from __future__ import annotations

import itertools

import mpmath
import numpy as np
import numpy.typing as npt

from derive.reference.core import check_dps, exact_array, int_pair

__all__ = [
    "DEFAULT_DPS",
    "conv2d_forward",
    "conv2d_jacobian",
    "conv2d_vjp",
    "linear_forward",
    "linear_jacobian",
    "linear_vjp",
]

#: Significant digits of the references unless asked otherwise (SPEC, "Tests": >= 50).
DEFAULT_DPS = 50
#: The lowest precision accepted: 32 digits are 110 bits, enough to hold every product of
#: two float64 values (106 bits) exactly, so only the sums round (the error analysis above
#: needs no more; the norms accept 20, the other references the SPEC's 50).
MIN_DPS = 32


def _sums(terms: np.ndarray) -> np.ndarray:
    """fsum of every list in an object array of term lists."""
    out = np.empty(terms.shape, dtype=object)
    for index in np.ndindex(terms.shape):
        out[index] = mpmath.fsum(terms[index])
    return out


def _term_lists(shape: tuple[int, ...]) -> np.ndarray:
    lists = np.empty(shape, dtype=object)
    for index in np.ndindex(shape):
        lists[index] = []
    return lists


# --------------------------------------------------------------------------------------
# Linear
# --------------------------------------------------------------------------------------


def _linear_arguments(x, W, b):
    x, W = exact_array(x, "x"), exact_array(W, "W")
    if x.ndim == 0:
        raise ValueError("x: expected shape (..., D), got a 0-d array")
    if W.ndim != 2 or W.shape[1] != x.shape[-1]:
        raise ValueError(f"W: expected shape (O, {x.shape[-1]}), got {W.shape}")
    if b is not None:
        b = exact_array(b, "b")
        if b.shape != (W.shape[0],):
            raise ValueError(f"b: expected shape ({W.shape[0]},), got {b.shape}")
    return x, W, b


def linear_forward(
    x: npt.ArrayLike, W: npt.ArrayLike, b: npt.ArrayLike | None = None, dps: int = DEFAULT_DPS
) -> np.ndarray:
    """``y[..., i] = b[i] + sum_k x[..., k] W[i, k]``: shape (..., O)."""
    check_dps(dps, MIN_DPS)
    with mpmath.workdps(dps):
        x, W, b = _linear_arguments(x, W, b)
        outputs, features = W.shape
        y = np.empty((*x.shape[:-1], outputs), dtype=object)
        for row in np.ndindex(x.shape[:-1]):
            for i in range(outputs):
                terms = [x[(*row, k)] * W[i, k] for k in range(features)]
                if b is not None:
                    terms.append(b[i])
                y[(*row, i)] = mpmath.fsum(terms)
        return y


def linear_vjp(
    x: npt.ArrayLike,
    g: npt.ArrayLike,
    W: npt.ArrayLike,
    b: npt.ArrayLike | None = None,
    dps: int = DEFAULT_DPS,
) -> tuple[np.ndarray, np.ndarray, np.ndarray | None]:
    """``(dx, dW, db)`` by the chain rule through every term ``x[m, k] W[i, k]`` of y."""
    check_dps(dps, MIN_DPS)
    with mpmath.workdps(dps):
        x, W, b = _linear_arguments(x, W, b)
        g = exact_array(g, "g")
        outputs, features = W.shape
        if g.shape != (*x.shape[:-1], outputs):
            raise ValueError(f"g: expected shape {(*x.shape[:-1], outputs)}, got {g.shape}")
        dx = _term_lists(x.shape)
        dW = _term_lists(W.shape)
        db = _term_lists((outputs,))
        for row in np.ndindex(x.shape[:-1]):
            for i in range(outputs):
                upstream = g[(*row, i)]
                db[i].append(upstream)  # y[m, i] contains b[i] once
                for k in range(features):  # the term x[m, k] W[i, k]
                    dx[(*row, k)].append(upstream * W[i, k])
                    dW[i, k].append(upstream * x[(*row, k)])
        return _sums(dx), _sums(dW), None if b is None else _sums(db)


def linear_jacobian(
    x: npt.ArrayLike, W: npt.ArrayLike, b: npt.ArrayLike | None = None, dps: int = DEFAULT_DPS
) -> np.ndarray:
    """``J[i, j] = dy_i/dx_j`` of one sample ``x`` (D,): in ``b[i] + sum_k W[i, k] x[k]`` only
    the term ``k = j`` depends on ``x[j]``, with coefficient ``W[i, j]``; shape (O, D)."""
    check_dps(dps, MIN_DPS)
    with mpmath.workdps(dps):
        x, W, b = _linear_arguments(x, W, b)
        if x.ndim != 1:
            raise ValueError(f"x: expected one sample (D,), got {x.shape}")
        J = np.empty(W.shape, dtype=object)
        for i, j in np.ndindex(W.shape):
            J[i, j] = W[i, j]
        return J


# --------------------------------------------------------------------------------------
# Conv2d
# --------------------------------------------------------------------------------------


class _Conv:
    """Exact arguments and the padded-input bookkeeping of one convolution."""

    def __init__(self, x, W, b, stride, padding, padding_mode):
        self.x, self.W = exact_array(x, "x"), exact_array(W, "W")
        self.b = None if b is None else exact_array(b, "b")
        if self.x.ndim != 4 or self.W.ndim != 4 or self.W.shape[1] != self.x.shape[1]:
            raise ValueError(
                f"x, W: expected (N, C, H, Wd), (O, C, Kh, Kw); got {self.x.shape}, {self.W.shape}"
            )
        if self.b is not None and self.b.shape != (self.W.shape[0],):
            raise ValueError(f"b: expected shape ({self.W.shape[0]},), got {self.b.shape}")
        if padding_mode not in ("zeros", "circular"):
            raise ValueError(f"padding_mode: expected 'zeros' or 'circular', got {padding_mode!r}")
        self.stride, self.padding = int_pair(stride, "stride"), int_pair(padding, "padding")
        self.circular = padding_mode == "circular"
        _, _, height, width = self.x.shape
        _, _, kh, kw = self.W.shape
        if self.circular and (self.padding[0] > height or self.padding[1] > width):
            raise ValueError("padding: circular padding needs padding <= (H, Wd)")
        self.out_h = (height + 2 * self.padding[0] - kh) // self.stride[0] + 1
        self.out_w = (width + 2 * self.padding[1] - kw) // self.stride[1] + 1
        if self.out_h < 1 or self.out_w < 1 or min(self.stride) < 1 or min(self.padding) < 0:
            raise ValueError("stride, padding, W: no output pixel")

    def source(self, P: int, Q: int) -> tuple[int, int] | None:
        """The input pixel held by padded pixel (P, Q), or None for a padded zero."""
        _, _, height, width = self.x.shape
        r, s = P - self.padding[0], Q - self.padding[1]
        if self.circular:
            return r % height, s % width
        if 0 <= r < height and 0 <= s < width:
            return r, s
        return None

    def taps(self):
        """Every (n, o, i, j, c, p, q, pixel): an output position, a tap of its window and the
        input pixel (r, s) the tap reads (None for a padded zero)."""
        samples, channels = self.x.shape[:2]
        outputs, _, kh, kw = self.W.shape
        for n, o, i, j in itertools.product(
            range(samples), range(outputs), range(self.out_h), range(self.out_w)
        ):
            for c, p, q in itertools.product(range(channels), range(kh), range(kw)):
                pixel = self.source(i * self.stride[0] + p, j * self.stride[1] + q)
                yield n, o, i, j, c, p, q, pixel

    def padded_value(self, n: int, c: int, pixel: tuple[int, int] | None) -> mpmath.mpf:
        return mpmath.mpf(0) if pixel is None else self.x[n, c, pixel[0], pixel[1]]

    def output_shape(self) -> tuple[int, int, int, int]:
        return (self.x.shape[0], self.W.shape[0], self.out_h, self.out_w)


def conv2d_forward(
    x: npt.ArrayLike,
    W: npt.ArrayLike,
    b: npt.ArrayLike | None = None,
    stride: int | tuple[int, int] = 1,
    padding: int | tuple[int, int] = 0,
    padding_mode: str = "zeros",
    dps: int = DEFAULT_DPS,
) -> np.ndarray:
    """``y[n, o, i, j] = b[o] + sum_{c, p, q} W[o, c, p, q] xp[n, c, i sh + p, j sw + q]``."""
    check_dps(dps, MIN_DPS)
    with mpmath.workdps(dps):
        conv = _Conv(x, W, b, stride, padding, padding_mode)
        terms = _term_lists(conv.output_shape())
        for n, o, i, j, c, p, q, pixel in conv.taps():
            terms[n, o, i, j].append(conv.W[o, c, p, q] * conv.padded_value(n, c, pixel))
        if conv.b is not None:
            for n, o, i, j in np.ndindex(terms.shape):
                terms[n, o, i, j].append(conv.b[o])
        return _sums(terms)


def conv2d_vjp(
    x: npt.ArrayLike,
    g: npt.ArrayLike,
    W: npt.ArrayLike,
    b: npt.ArrayLike | None = None,
    stride: int | tuple[int, int] = 1,
    padding: int | tuple[int, int] = 0,
    padding_mode: str = "zeros",
    dps: int = DEFAULT_DPS,
) -> tuple[np.ndarray, np.ndarray, np.ndarray | None]:
    """``(dx, dW, db)``: each term ``W[o, c, p, q] xp[...]`` of ``y[n, o, i, j]`` gives
    ``g[n, o, i, j] xp[...]`` to ``dW[o, c, p, q]`` and ``g[n, o, i, j] W[o, c, p, q]`` to
    ``dx`` of the pixel it reads; each ``y[n, o, i, j]`` gives ``g[n, o, i, j]`` to ``db[o]``."""
    check_dps(dps, MIN_DPS)
    with mpmath.workdps(dps):
        conv = _Conv(x, W, b, stride, padding, padding_mode)
        g = exact_array(g, "g")
        if g.shape != conv.output_shape():
            raise ValueError(f"g: expected shape {conv.output_shape()}, got {g.shape}")
        dx = _term_lists(conv.x.shape)
        dW = _term_lists(conv.W.shape)
        db = _term_lists((conv.W.shape[0],))
        for n, o, i, j, c, p, q, pixel in conv.taps():
            upstream = g[n, o, i, j]
            dW[o, c, p, q].append(upstream * conv.padded_value(n, c, pixel))
            if pixel is not None:
                dx[n, c, pixel[0], pixel[1]].append(upstream * conv.W[o, c, p, q])
        for n, o, i, j in np.ndindex(g.shape):
            db[o].append(g[n, o, i, j])
        return _sums(dx), _sums(dW), None if conv.b is None else _sums(db)


def conv2d_jacobian(
    x: npt.ArrayLike,
    W: npt.ArrayLike,
    b: npt.ArrayLike | None = None,
    stride: int | tuple[int, int] = 1,
    padding: int | tuple[int, int] = 0,
    padding_mode: str = "zeros",
    dps: int = DEFAULT_DPS,
) -> np.ndarray:
    """``J[(o, i, j), (c, r, s)] = dy[o, i, j] / dx[c, r, s]`` of one sample ``x`` (C, H, Wd):
    the sum of ``W[o, c, p, q]`` over the taps of output (i, j) that read pixel (r, s)."""
    check_dps(dps, MIN_DPS)
    with mpmath.workdps(dps):
        sample = np.asarray(x)
        if sample.ndim != 3:
            raise ValueError(f"x: expected one sample (C, H, Wd), got {sample.shape}")
        conv = _Conv(sample[np.newaxis], W, b, stride, padding, padding_mode)
        channels, height, width = sample.shape
        outputs = conv.W.shape[0]
        terms = _term_lists((outputs * conv.out_h * conv.out_w, channels * height * width))
        for _, o, i, j, c, p, q, pixel in conv.taps():
            if pixel is not None:
                row = (o * conv.out_h + i) * conv.out_w + j
                column = (c * height + pixel[0]) * width + pixel[1]
                terms[row, column].append(conv.W[o, c, p, q])
        return _sums(terms)
