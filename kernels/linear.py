"""Linear: ``y = x W^T + b`` on the last axis of ``x``, as PyTorch's ``nn.Linear``.

``x`` has shape (..., D), ``W`` shape (O, D), ``b`` shape (O,) or None (no bias); ``y``
has shape (..., O). The paper (001_76ce3a8a4b6079c3.txt, Table 2 row Linear, Eq. 9-11)
writes one sample as a column, ``y = W x + b``; with rows as samples that is
``y_m = x_m W^T + b``.

Backward, for an upstream gradient ``g`` of shape (..., O) (``m`` runs over all rows of
the flattened batch axes)::

    dx = g W,    dW = sum_m g_m^T x_m = g^T x,    db = sum_m g_m.

The Jacobian of one sample is ``dy/dx = W`` (O, D), numerator layout ``J[i, j] =
dy_i/dx_j``; the paper prints ``W^T`` (denominator layout). Its 2-norm, the Lipschitz
constant, is ``sigma_max(W)``.

Arithmetic and error bounds. Let ``S_i = |b_i| + sum_j |x_j W_ij|`` be the sum of the
magnitudes of the terms of ``y_i`` (likewise for ``dx``, ``dW``, ``db``: the magnitudes of
the products summed), ``n`` the number of terms (``D`` + 1 with a bias; ``O`` for dx, the
number of rows for dW and db) and ``gamma_n = n u / (1 - n u)``, ``u = 2^-53``.

- float64: NumPy's float64 matrix product (BLAS) and one float64 addition of ``b``. In any
  summation order, with or without fused multiply-adds, ``|y_i - exact_i| <= gamma_n S_i``
  (Higham, *Accuracy and Stability of Numerical Algorithms*, 2nd ed., Eq. 3.5). This is
  not compensated: the bound is relative to ``S``, not to ``|y|``, so a cancelling sum
  may lose all its digits -- as in every BLAS.
- float32 and float16 ("mixed", the default; bfloat16 too, by ``kernels._bf16.widened``):
  the inputs are widened to float64 exactly, multiplied there (a product of two float32 or
  float16 values is exact in float64) and summed by BLAS, ``|error| <= gamma_n S``; the
  result is rounded once to the input dtype. So the result is the correct rounding of a
  value within ``gamma_n S`` of the exact one: a float16 result is inf exactly when the
  exact value rounds to inf (up to that float64 error, ~1e-16 relative to ``S``), never
  because an intermediate product or partial sum passed 65504.
- ``strict_fp16=True`` (float16 or bfloat16 input): every product and every partial sum is
  rounded to the input's format, in a fixed sequential order:
  ``y_i = h(...h(h(0 + h(x_0 W_i0)) + h(x_1 W_i1))...)``, then ``h(y_i + b_i)``, with ``h``
  round-to-nearest-even to binary16 (inf past 65520) or, for bfloat16 input, to bfloat16
  (``kernels/_strict.narrow``; inf from 2^128 - 2^119 on). ``dx`` sums over ``i`` ascending,
  ``dW`` and ``db`` over rows ascending (``db_i = h(...h(0 + g_0i) + g_1i...)``, each term
  ``g_mi * 1`` exact). This is what naive 16-bit arithmetic does: in half a product past
  65504 is inf even when the exact result is small; bfloat16 has float32's range, and its 8
  significant bits break the sums first: ``1 + 1 + ...`` stops at 256 (``256 + 1`` rounds
  back to 256, where half stops at 2048), so a dot product of 300 ones is 256.

NaN and inf propagate as IEEE arithmetic says (``0 * inf`` is NaN). Nothing is written
into the inputs; any strides work. Empty shapes give the exact (empty) results: D = 0 makes
every ``x W^T`` an empty sum, so ``y = b`` (0 without bias), and O = 0 gives an empty ``y``
and ``dx = 0``.

>>> import numpy as np
>>> from kernels import linear
>>> x = np.array([[1.0, 2.0]])
>>> W = np.array([[3.0, 4.0], [0.5, -1.0]])
>>> linear.forward(x, W, np.array([0.0, 10.0]))
array([[11. ,  8.5]])
>>> dx, dW, db = linear.vjp(x, np.array([[1.0, 0.0]]), W)
>>> dx, db is None
(array([[3., 4.]]), True)
>>> big = np.float16(300.0)
>>> xh = np.array([big, 1.0], np.float16)
>>> Wh = np.array([[big, -30000.0]], np.float16)
>>> float(linear.forward(xh, Wh)[0]), float(linear.forward(xh, Wh, strict_fp16=True)[0])
(60000.0, inf)
"""

from __future__ import annotations

import numpy as np
from numba import njit
from numpy.typing import ArrayLike

from kernels._generated.weightnorm import matmul_nt_bf16s, matmul_nt_f16s
from kernels._strict import bfloat16_kernel, is_bfloat16, narrow
from kernels._validate import float_array, strict_mode
from kernels.cast import cast, widen

__all__ = ["forward", "jacobian", "vjp"]


@njit(cache=True, error_model="numpy")
def _add_bias_strict(y, b, bf):
    """``y[m, i] = h(y[m, i] + b[i])`` in place (``h``: half, or bfloat16 if ``bf``)."""
    for m in range(y.shape[0]):
        for i in range(y.shape[1]):
            y[m, i] = narrow(y[m, i] + b[i], bf)


def _ieee() -> np.errstate:
    """inf - inf, 0 * inf and overflow give NaN and inf as IEEE says: results, not warnings."""
    return np.errstate(invalid="ignore", over="ignore")


class _Prepared:
    """Checked arguments of one call: x as rows (M, D), W, b, all widened to float64."""

    def __init__(self, x: ArrayLike, W: ArrayLike, b: ArrayLike | None, strict_fp16: bool):
        x = float_array(x, "x", bfloat16=True)
        if x.ndim == 0:
            raise ValueError("x: expected shape (..., D), got a 0-d array")
        W = float_array(W, "W", bfloat16=True)
        if W.ndim != 2 or W.shape[1] != x.shape[-1]:
            raise ValueError(
                f"W: expected shape (O, {x.shape[-1]}) (D = last axis of x), got {W.shape}"
            )
        if W.dtype != x.dtype:
            raise TypeError(f"W: expected dtype {x.dtype} (the dtype of x), got {W.dtype}")
        if b is not None:
            b = float_array(b, "b", bfloat16=True)
            if b.shape != (W.shape[0],):
                raise ValueError(f"b: expected shape ({W.shape[0]},) (rows of W), got {b.shape}")
            if b.dtype != x.dtype:
                raise TypeError(f"b: expected dtype {x.dtype} (the dtype of x), got {b.dtype}")
        self.x, self.strict = x, strict_mode(strict_fp16, x.dtype)
        self.bf = is_bfloat16(x)
        if self.bf and not self.strict:
            raise TypeError("x: bfloat16 reaches this path in strict mode only (bfloat16_kernel)")
        self.outputs = W.shape[0]
        #: The number of rows of the flattened batch axes (explicit: with D = 0 or O = 0 an
        #: empty array cannot infer it).
        self.count = int(np.prod(x.shape[:-1], dtype=np.int64))
        # Widening is exact for every dtype; float64 input is not copied when contiguous.
        self.rows = widen(x).reshape(self.count, x.shape[-1])
        self.W = widen(W)
        self.b = None if b is None else np.ascontiguousarray(b, dtype=np.float64)

    def product_nt(self, a: np.ndarray, b: np.ndarray) -> np.ndarray:
        """``a b^T`` in float64 (BLAS), or in rounded steps of the strict format."""
        if self.strict:
            out = np.empty((a.shape[0], b.shape[0]))
            strict = matmul_nt_bf16s if self.bf else matmul_nt_f16s
            strict(np.ascontiguousarray(a), np.ascontiguousarray(b), out)
            return out
        with _ieee():
            return a @ b.T

    def add_bias(self, y: np.ndarray) -> np.ndarray:
        """``y + b`` in float64, or rounded to the strict format (y is the product's fresh
        array, written in place)."""
        if self.b is None:
            return y
        if self.strict:
            _add_bias_strict(y, self.b, self.bf)
            return y
        with _ieee():
            y += self.b
            return y

    def finish(self, values: np.ndarray, fresh: bool = True) -> np.ndarray:
        """Round once to x's dtype; an overflow to inf is a result, not a warning. A
        ``fresh`` array (the call's own result) of that dtype already is returned as it
        is; any other is copied, so that no result shares memory with an input (float64
        forward + VJP at (4096, 1024) -> 1024 copied 72 MB for nothing)."""
        if self.x.dtype == np.float16:
            return cast(values, "float16")
        with np.errstate(over="ignore"):
            return values.astype(self.x.dtype, copy=not fresh)


@bfloat16_kernel
def forward(
    x: ArrayLike, W: ArrayLike, b: ArrayLike | None = None, *, strict_fp16: bool = False
) -> np.ndarray:
    """``x W^T + b``: shape (..., O), dtype of ``x``."""
    p = _Prepared(x, W, b, strict_fp16)
    y = p.add_bias(p.product_nt(p.rows, p.W))
    return p.finish(y).reshape(*p.x.shape[:-1], p.outputs)


@bfloat16_kernel
def vjp(
    x: ArrayLike,
    g: ArrayLike,
    W: ArrayLike,
    b: ArrayLike | None = None,
    *,
    strict_fp16: bool = False,
) -> tuple[np.ndarray, np.ndarray, np.ndarray | None]:
    """``(dx, dW, db)`` for the upstream gradient ``g`` of shape (..., O).

    ``dx = g W`` has the shape of ``x``, ``dW = g^T x`` the shape of ``W`` and ``db``, the sum
    of ``g`` over all rows, shape (O,); ``db`` is None when ``b`` is None.
    """
    p = _Prepared(x, W, b, strict_fp16)
    g = float_array(g, "g", bfloat16=True)
    expected = (*p.x.shape[:-1], p.outputs)
    if g.shape != expected:
        raise ValueError(f"g: expected shape {expected} (the shape of y), got {g.shape}")
    if g.dtype != p.x.dtype:
        raise TypeError(f"g: expected dtype {p.x.dtype} (the dtype of x), got {g.dtype}")
    grows = widen(g).reshape(p.count, p.outputs)
    dx = p.product_nt(grows, p.W.T)
    dW = p.product_nt(grows.T, p.rows.T)
    db = None
    if p.b is not None:
        if p.strict:  # sum_m g_mi * 1: the products are exact, the partial sums rounded
            db = p.product_nt(grows.T, np.ones((1, grows.shape[0])))[:, 0]
        else:
            with _ieee():
                db = grows.sum(axis=0)
    return (
        p.finish(dx).reshape(p.x.shape),
        p.finish(dW),
        None if db is None else p.finish(db),
    )


@bfloat16_kernel
def jacobian(
    x: ArrayLike, W: ArrayLike, b: ArrayLike | None = None, *, strict_fp16: bool = False
) -> np.ndarray:
    """``dy/dx`` of one sample ``x`` of shape (D,): ``W``, an (O, D) array in x's dtype
    (numerator layout; a copy). It does not depend on ``x`` or ``b``, and is exact."""
    p = _Prepared(x, W, b, strict_fp16)
    if p.x.ndim != 1:
        raise ValueError(f"x: expected one sample of shape (D,), got shape {p.x.shape}")
    return p.finish(p.W, fresh=False)  # W itself for float64
