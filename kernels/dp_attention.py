"""Single-head dot-product attention (Vaswani et al. 2017), rows as tokens.

``X`` has shape (N, D) (one token per row), ``Wq`` and ``Wk`` shape (d, D), ``Wv`` shape
(dv, D); ``d = Wq.shape[0]``::

    Q = X Wq^T,  K = X Wk^T,  V = X Wv^T,  S = Q K^T / sqrt(d),
    P = softmax of each row of S,  Y = P V  (shape (N, dv)).

Source: 001_76ce3a8a4b6079c3.txt, Table 2 row DP Attention and Eq. 20 (Lipschitz
constant printed as infinity). The paper writes tokens as columns, ``Y_p = W^V X_p
S((W^Q X_p)^T (W^K X_p) / sqrt(D/H))`` with ``X_p = X^T`` and a softmax down each column
(column j mixes the values with weights ``softmax_i(q_i . k_j)``): that is this map with the
roles of W^Q and W^K exchanged and everything transposed,
``Y_p = forward(X_p^T, W^K, W^Q, W^V)^T``. For one head, ``sqrt(D/H)`` is ``sqrt(d)``.

Backward, for ``G = dL/dY`` (proven equal to sympy.diff of the forward; see
``derive/definitions/attention.py``; ``rowsum`` broadcasts over columns)::

    dV = P^T G,  dP = G V^T,  dS = P * (dP - rowsum(dP * P)),
    dQ = dS K / sqrt(d),  dK = dS^T Q / sqrt(d),
    dWq = dQ^T X,  dWk = dK^T X,  dWv = dV^T X,  dX = dQ Wq + dK Wk + dV Wv.

``jacobian`` is the dense (N dv, N D) matrix ``d vec(Y) / d vec(X)`` (C-order flattening,
numerator layout), built from one VJP per row: meant for small N and D.

Arithmetic (``kernels/_attention.py``): float64, float32 and float16 inputs (and bfloat16 in
mixed mode) are computed in float64 -- matrix products by NumPy/BLAS, the row softmax (max
subtracted) and its backward pass (cancellation-free at each row's argmax) in Numba loops --
and rounded once to the input dtype, so a float16 result is inf exactly when the float64
value rounds to inf. The float64 error of S is that of a BLAS product,
``|error| <= gamma_d sum_c |q_ic k_jc|`` (``gamma_d = d u / (1 - d u)``, ``u = 2^-53``; plus
the roundings of Q, K and ``sqrt(d)``); P inherits it multiplied by |S| (exp is
ill-conditioned for large logits), and Y and the gradients add one BLAS product each,
bounded relative to the sums of magnitudes, not to the result (a cancelling sum keeps only
an absolute accuracy, as in every BLAS). ``strict_fp16=True`` (float16 or bfloat16 input)
rounds every product, partial sum (ascending index), quotient, difference and exp to the
input's format, in the order written above (S as ``(Q K^T) / sqrt(d)``, the product first;
``sqrt(d)`` rounded first; the softmax as in ``kernels/_attention.py``): this shows where
naive 16-bit arithmetic breaks. The max is subtracted, so exp never overflows; what
overflows in half is Q K^T itself: a product ``q_ic k_jc`` or a partial sum past 65504 (e.g.
both factors about 256) makes the logit +-inf or NaN -- +inf or NaN turns its whole row of P
into NaN (``inf - inf``), -inf gives the weight 0 -- and so can the sums of Q, K, V, P V and
of the backward products. bfloat16 (float32's range, 8 significant bits) keeps 300 * 300
finite (90000 is held as 90112) but loses the sums first: the row sum of the exponentials
stops at 256 (``256 + 1 = 256``; half's at 2048), so N > 256 tokens of equal logits get the
weights ``1/256`` where the exact ones are ``1/N`` (N = 300: a lone value 1 among zeros
comes out as 2^-8 = 0.0039 instead of 1/300).

NaN and inf propagate as IEEE arithmetic says (a NaN logit makes its row of P NaN; see
``kernels/_attention.py`` for the softmax of non-finite rows). Nothing is written into the
inputs; any strides work.

>>> import numpy as np
>>> from kernels import dp_attention
>>> X = np.array([[1.0, 0.0], [0.0, 1.0]])
>>> W = np.eye(2)
>>> Y = dp_attention.forward(X, W, W, W)  # P = softmax([[1, 0], [0, 1]] / sqrt(2))
>>> np.round(Y, 6)
array([[0.669762, 0.330238],
       [0.330238, 0.669762]])
>>> dp_attention.jacobian(X, W, W, W).shape
(4, 4)
>>> Xh, Wh = np.array([[300.0, 0.0], [0.0, 1.0]], np.float16), np.eye(2, dtype=np.float16)
>>> dp_attention.forward(Xh, Wh, Wh, Wh)[0]  # the logit 300^2 / sqrt(2) is fine in float64
array([300.,   0.], dtype=float16)
>>> dp_attention.forward(Xh, Wh, Wh, Wh, strict_fp16=True)[0]  # 300 * 300 overflows half
array([nan, nan], dtype=float16)
>>> from ml_dtypes import bfloat16
>>> Xb, Wb = Xh.astype(bfloat16), Wh.astype(bfloat16)
>>> dp_attention.forward(Xb, Wb, Wb, Wb, strict_fp16=True)[0]  # not in bfloat16's range
array([300, 0], dtype=bfloat16)
"""

from __future__ import annotations

import math

import numpy as np
from numpy.typing import ArrayLike

from kernels import _attention as _a
from kernels._strict import bfloat16_kernel

__all__ = ["forward", "jacobian", "vjp"]


class _Prepared:
    """Checked arguments, widened to float64, and the arithmetic to use."""

    def __init__(self, X, Wq, Wk, Wv, strict_fp16):
        X = _a.check_input(X)
        Wq = _a.check_weight(Wq, "Wq", X)
        Wk = _a.check_weight(Wk, "Wk", X, rows=Wq.shape[0])
        Wv = _a.check_weight(Wv, "Wv", X)
        self.dtype = X.dtype
        self.ar = ar = _a.arithmetic(X, strict_fp16)
        self.X, self.Wq, self.Wk, self.Wv = (ar.wide(a) for a in (X, Wq, Wk, Wv))
        self.root = ar.scalar(math.sqrt(Wq.shape[0]))
        self.n, self.dv = X.shape[0], Wv.shape[0]

    def forward(self, output: bool = True) -> np.ndarray | None:
        """Y, keeping what the backward pass needs (only that, without ``output``: the
        VJP and the Jacobian do not need Y's own product)."""
        ar = self.ar
        self.Q = ar.mm(self.X, self.Wq.T)
        self.K = ar.mm(self.X, self.Wk.T)
        self.V = ar.mm(self.X, self.Wv.T)
        S = ar.div(ar.mm(self.Q, self.K.T), self.root, inplace=True)
        self.P, self.argmax = ar.softmax(S)
        if not output:
            return None
        return ar.mm(self.P, self.V)

    def backward(self, G: np.ndarray, parameters: bool = True) -> tuple:
        """``(dX, dWq, dWk, dWv)`` (only ``(dX,)`` without ``parameters``)."""
        ar = self.ar
        dV = ar.mm(self.P.T, G)
        dS = ar.softmax_backward(self.P, ar.mm(G, self.V.T), self.argmax)
        dQ = ar.div(ar.mm(dS, self.K), self.root, inplace=True)
        dK = ar.div(ar.mm(dS.T, self.Q), self.root, inplace=True)
        dX = ar.add(ar.add(ar.mm(dQ, self.Wq), ar.mm(dK, self.Wk)), ar.mm(dV, self.Wv))
        if not parameters:
            return (dX,)
        return dX, ar.mm(dQ.T, self.X), ar.mm(dK.T, self.X), ar.mm(dV.T, self.X)


@bfloat16_kernel
@_a.ieee_kernel
def forward(
    X: ArrayLike, Wq: ArrayLike, Wk: ArrayLike, Wv: ArrayLike, *, strict_fp16: bool = False
) -> np.ndarray:
    """``Y = softmax_rows(X Wq^T (X Wk^T)^T / sqrt(d)) X Wv^T``: shape (N, dv), X's dtype."""
    p = _Prepared(X, Wq, Wk, Wv, strict_fp16)
    return _a.finish(p.forward(), p.dtype)


@bfloat16_kernel
@_a.ieee_kernel
def vjp(
    X: ArrayLike,
    G: ArrayLike,
    Wq: ArrayLike,
    Wk: ArrayLike,
    Wv: ArrayLike,
    *,
    strict_fp16: bool = False,
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """``(dX, dWq, dWk, dWv)`` for the upstream gradient ``G`` of shape (N, dv)."""
    p = _Prepared(X, Wq, Wk, Wv, strict_fp16)
    G = p.ar.wide(_a.check_gradient(G, p.n, p.dv, p.dtype))
    p.forward(output=False)
    return tuple(_a.finish(v, p.dtype) for v in p.backward(G))


@bfloat16_kernel
@_a.ieee_kernel
def jacobian(
    X: ArrayLike, Wq: ArrayLike, Wk: ArrayLike, Wv: ArrayLike, *, strict_fp16: bool = False
) -> np.ndarray:
    """``d vec(Y) / d vec(X)``: (N dv, N D), C-order flattening, numerator layout."""
    p = _Prepared(X, Wq, Wk, Wv, strict_fp16)
    p.forward(output=False)
    J = _a.jacobian_from_vjp(lambda G: p.backward(G, parameters=False)[0], p.n, p.dv)
    return _a.finish(J, p.dtype)
