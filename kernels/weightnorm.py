"""WeightNorm: ``y = x W^T`` with ``W_i = gamma_i v_i / sqrt(|v_i|^2 + eps)``.

``x`` has shape (..., D), ``v`` shape (O, D), ``gamma`` shape (O,); ``y`` has shape
(..., O). 001_76ce3a8a4b6079c3.txt, Table 2 row WeightNorm (Salimans & Kingma 2016, with
the paper's eps; ``eps = 0``, the default, is PyTorch's ``weight_norm``).

Backward (proven equal to sympy.diff of the forward, D = 1..5, O = 1, 2; see
``derive/definitions/norms.py``): ``dx = g W``, ``dW = g^T x`` (summed over rows),
``dv_i = gamma_i r_i (dW_i - v_i r_i^2 (dW_i . v_i))``, ``dgamma_i = r_i (dW_i . v_i)`` with
``r_i = 1/sqrt(|v_i|^2 + eps)``. The Jacobian of one sample is W (numerator layout).

Arithmetic: W and the parameter gradients are computed by the generated loops (float64
with compensated sums for float64 input; float64 for float32 and float16 input); the three
matrix products run in float64 (NumPy/BLAS) and the results are rounded once to the input
dtype. ``strict_fp16=True`` computes everything, products included, in rounded steps of the
input's format (float16 or bfloat16).

A zero row v_i with eps = 0 gives 0/0: NaN in that row of W. The Lipschitz constant is
``sigma_max(W) <= ||W||_F = sqrt(sum_i gamma_i^2 |v_i|^2 / (|v_i|^2 + eps)) <=
sqrt(sum_i gamma_i^2)``; see the report for when each inequality is an equality.

>>> import numpy as np
>>> from kernels import weightnorm
>>> weightnorm.jacobian(np.zeros(2), np.array([[3.0, 4.0]]), np.array([10.0]))
array([[6., 8.]])
"""

from __future__ import annotations

import numpy as np
from numpy.typing import ArrayLike

from kernels._generated import weightnorm as _generated
from kernels._grain import loop_for
from kernels._strict import bfloat16_kernel, is_bfloat16, narrow
from kernels._validate import eps_value, float_array, strict_mode
from kernels.cast import cast, widen


class _Prepared:
    def __init__(self, x, v, gamma, eps, strict_fp16):
        x = float_array(x, "x", bfloat16=True)
        if x.ndim == 0:
            raise ValueError("x: expected shape (..., D), got a 0-d array")
        if x.shape[-1] == 0:
            raise ValueError("x: WeightNorm needs D >= 1 on the last axis, got D = 0")
        v = float_array(v, "v", bfloat16=True)
        if v.ndim != 2 or v.shape[1] != x.shape[-1]:
            raise ValueError(
                f"v: expected shape (O, {x.shape[-1]}) (D = last axis of x), got {v.shape}"
            )
        if v.dtype != x.dtype:
            raise TypeError(f"v: expected dtype {x.dtype} (the dtype of x), got {v.dtype}")
        gamma = float_array(gamma, "gamma", bfloat16=True)
        if gamma.shape != (v.shape[0],):
            raise ValueError(
                f"gamma: expected shape ({v.shape[0]},) (rows of v), got {gamma.shape}"
            )
        if gamma.dtype != x.dtype:
            raise TypeError(f"gamma: expected dtype {x.dtype} (the dtype of x), got {gamma.dtype}")
        self.x, self.strict = x, strict_mode(strict_fp16, x.dtype)
        self.bf = is_bfloat16(x)
        if self.bf and not self.strict:
            raise TypeError("x: bfloat16 reaches this path in strict mode only (bfloat16_kernel)")
        self.eps = eps_value(eps)
        #: Rows of the flattened batch axes, explicit (an empty array cannot infer it).
        self.count = int(np.prod(x.shape[:-1], dtype=np.int64))
        self.rows = widen(x, self._compute).reshape(self.count, x.shape[-1])
        self.v = np.ascontiguousarray(v, dtype=self._compute)
        self.gamma = np.ascontiguousarray(gamma, dtype=self._compute)
        if x.dtype == np.float64:
            self.path = "f64"
        else:
            self.path = ("bf16s" if self.bf else "f16s") if self.strict else "wide"

    @property
    def _compute(self) -> np.dtype:
        if self.strict:
            return np.dtype(np.float64)
        if self.x.dtype == np.float16:
            return np.dtype(np.float32)
        return self.x.dtype

    def loop_eps(self) -> float:
        """eps rounded to the 16-bit format in strict mode (float16: inf from 65520 on,
        without a warning)."""
        return narrow(self.eps, self.bf) if self.strict else self.eps

    def weights(self) -> np.ndarray:
        """W in float64 (16-bit values in strict mode)."""
        out = np.empty(self.v.shape)
        loop_for(getattr(_generated, f"weights_{self.path}"), self.v.size)(
            self.v, self.gamma, self.loop_eps(), out
        )
        return out

    def product_nt(self, a: np.ndarray, b: np.ndarray) -> np.ndarray:
        """a b^T in float64, or in rounded 16-bit steps in strict mode.

        BLAS reads transposed views as they are (a transpose flag), so only a dtype other
        than float64 is converted, in the array's own memory order: no transposing copy.
        """
        if self.strict:
            a = np.ascontiguousarray(a, dtype=np.float64)
            b = np.ascontiguousarray(b, dtype=np.float64)
            out = np.empty((a.shape[0], b.shape[0]))
            getattr(_generated, f"matmul_nt_{self.path}")(a, b, out)
            return out
        a = np.asarray(a, dtype=np.float64)
        b = np.asarray(b, dtype=np.float64)
        with np.errstate(invalid="ignore", over="ignore"):  # inf - inf, 0 * inf: IEEE results
            return a @ b.T

    def finish(self, values: np.ndarray) -> np.ndarray:
        """Round once to x's dtype; an overflow to inf is a result, not a warning. Every
        caller passes an array of its own, returned as it is when it has that dtype
        already (float64)."""
        if self.x.dtype == np.float16:
            return cast(values, "float16")
        with np.errstate(over="ignore"):
            return values.astype(self.x.dtype, copy=False)


@bfloat16_kernel
def forward(
    x: ArrayLike, v: ArrayLike, gamma: ArrayLike, eps: float = 0.0, *, strict_fp16: bool = False
) -> np.ndarray:
    """``x W^T``; shape (..., O), dtype of ``x``."""
    p = _Prepared(x, v, gamma, eps, strict_fp16)
    y = p.product_nt(p.rows, p.weights())
    return p.finish(y).reshape(*p.x.shape[:-1], p.v.shape[0])


@bfloat16_kernel
def vjp(
    x: ArrayLike,
    g: ArrayLike,
    v: ArrayLike,
    gamma: ArrayLike,
    eps: float = 0.0,
    *,
    strict_fp16: bool = False,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``(dx, dv, dgamma)`` for the upstream gradient ``g`` of shape (..., O)."""
    p = _Prepared(x, v, gamma, eps, strict_fp16)
    g = float_array(g, "g", bfloat16=True)
    expected = (*p.x.shape[:-1], p.v.shape[0])
    if g.shape != expected:
        raise ValueError(f"g: expected shape {expected} (the shape of y), got {g.shape}")
    if g.dtype != p.x.dtype:
        raise TypeError(f"g: expected dtype {p.x.dtype} (the dtype of x), got {g.dtype}")
    grows = np.ascontiguousarray(g, dtype=np.float64).reshape(p.count, p.v.shape[0])
    w = p.weights()
    # w.T as a view: BLAS reads it with a transpose flag (a transposing copy of W cost more
    # than the product itself: 57.5 ms against 25.0 at (256, 1024) by (1024, 4096))
    dx = p.product_nt(grows, w.T)
    dw = p.product_nt(grows.T, p.rows.T)
    dv = np.empty(p.v.shape)
    dgamma = np.empty(p.v.shape[0])
    loop_for(getattr(_generated, f"parameter_gradients_{p.path}"), p.v.size)(
        p.v, p.gamma, p.loop_eps(), np.ascontiguousarray(dw), dv, dgamma
    )
    return p.finish(dx).reshape(p.x.shape), p.finish(dv), p.finish(dgamma)


@bfloat16_kernel
def jacobian(
    x: ArrayLike, v: ArrayLike, gamma: ArrayLike, eps: float = 0.0, *, strict_fp16: bool = False
) -> np.ndarray:
    """``dy/dx`` of one sample ``x`` of shape (D,): W, an (O, D) array (numerator layout)."""
    p = _Prepared(x, v, gamma, eps, strict_fp16)
    if p.x.ndim != 1:
        raise ValueError(f"x: expected one sample of shape (D,), got shape {p.x.shape}")
    return p.finish(p.weights())
