"""Single-head L2-distance attention (Kim et al. 2021) with tied W^Q = W^K, rows as tokens.

``X`` has shape (N, D), ``Wq`` shape (d, D), ``Wv`` shape (dv, D); ``d = Wq.shape[0]``::

    Q = X Wq^T,  S_ij = -|q_i - q_j|^2 / sqrt(d),  P = softmax of each row of S,
    A = Wq^T Wq / sqrt(d)  (D x D),  Y = P X A Wv^T  (shape (N, dv)).

Source: 001_76ce3a8a4b6079c3.txt, Table 2 row L2 Attention and Eq. 53, which print a loose
form of the logits (``-x^T (W^Q - W^K)^T (W^Q - W^K) x``, not a distance between two
tokens) and ``W^V X`` as the values; this is Kim et al.'s definition, the one whose
Lipschitz constant the row quotes: distance logits with W^Q = W^K, and values ``X A W^V``
(the value path goes through A). The paper writes tokens as columns (``X_p = X^T``) with
a softmax down each column; S is symmetric here (tied weights), so its column softmax is
``P^T`` and this map reads ``Y^T = W^V A X_p S_col(-dist / sqrt(d))``: the paper's form with
``W^V A X_p`` in place of ``W^V X_p``, the roles of W^Q and W^K being the same matrix.

Logits are computed from the differences, ``S_ij = -(sum_c (q_ic - q_jc)^2) / sqrt(d)``,
not from ``|q_i|^2 - 2 q_i.q_j + |q_j|^2``: so ``S_ii = 0`` exactly, ``S_ij <= 0``, and no
cancellation (a sum of squares of exact-or-nearly differences, relative error at most about
``(d + 2) u``, ``u = 2^-53``, beyond the error of Q itself; cost N^2 d, in a Numba loop).

Backward, for ``G = dL/dY`` (proven equal to sympy.diff of the forward; see
``derive/definitions/attention.py``; ``rowsum`` broadcasts over columns)::

    B = A Wv^T = Wq^T Wq Wv^T / sqrt(d),  M = X B,  Y = P M,
    dM = P^T G,  dP = G M^T,  dS = P * (dP - rowsum(dP * P)),  T = dS + dS^T,
    dQ = (-2 / sqrt(d)) (diag(rowsum(T)) Q - T Q),
    dX = dQ Wq + dM B^T,  dB = X^T dM,  F = Wv^T dB^T  (D x D),
    dWq = dQ^T X + Wq (F + F^T) / sqrt(d),  dWv = dB^T Wq^T Wq / sqrt(d) = dB^T A.

Row i of dQ is evaluated as ``(-2 / sqrt(d)) sum_j T_ij (q_i - q_j)``, the same sum with the
differences taken first: ``rowsum(T)_i q_i - (T Q)_i`` would cancel when the queries lie
close together far from 0 (a Numba loop, N^2 d, like the logits).

``jacobian`` is the dense (N dv, N D) matrix ``d vec(Y) / d vec(X)`` (C-order flattening,
numerator layout), built from one VJP per row: meant for small N and D.

Arithmetic (``kernels/_attention.py``): float64, float32 and float16 inputs (and bfloat16
in mixed mode) are computed in float64 -- matrix products by NumPy/BLAS, the distances, the
row softmax (max subtracted; the max of a row is its diagonal 0) and its backward pass
(cancellation-free at each row's argmax) in Numba loops -- and rounded once to the input
dtype. ``strict_fp16=True`` (float16 or bfloat16 input) rounds every difference, square,
partial sum (ascending index), quotient, product and exp to the input's format, in the
order written above (A first, then ``B = A Wv^T``, ``M = X B``,
``Y = P M``; ``dQ`` as ``(-2/sqrt(d)) * (sum_j T_ij (q_i - q_j))``; ``dWq`` as
``dQ^T X + (Wq (F + F^T)) / sqrt(d)``). Where naive half precision breaks: a squared
distance reaching 65520 (a coordinate difference of about 256) is inf, the logit -inf and the
weight 0 -- harmless, since the exact weight ``exp(-65504 / sqrt(d))`` rounds to 0 in half
anyway for any d below 14 million; the damage is in the value path (Wq^T Wq, A Wv^T,
X B, P M) and in the backward products (``T_ij (q_i - q_j)``, dM B^T), which overflow like
any half matrix product. bfloat16 has float32's range (a squared distance overflows only
past 3.4e38) but 8 significant bits, and its sums break first: a squared distance over
d > 256 coordinates that each differ by 1 stops at 256 (``256 + 1`` rounds back to 256;
half's sums stop at 2048). The matrix products in float64 (BLAS) are accurate relative to the
sums of the magnitudes of their terms, not to the result.

NaN and inf propagate as IEEE arithmetic says. Nothing is written into the inputs; any
strides work.

>>> import numpy as np
>>> from kernels import l2_attention
>>> X = np.array([[0.0], [1.0]])
>>> Y = l2_attention.forward(X, np.array([[1.0]]), np.array([[1.0]]))  # S = [[0, -1], [-1, 0]]
>>> np.round(Y, 6)
array([[0.268941],
       [0.731059]])
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

    def __init__(self, X, Wq, Wv, strict_fp16):
        X = _a.check_input(X)
        Wq = _a.check_weight(Wq, "Wq", X)
        Wv = _a.check_weight(Wv, "Wv", X)
        self.dtype = X.dtype
        self.ar = ar = _a.arithmetic(X, strict_fp16)
        self.X, self.Wq, self.Wv = (ar.wide(a) for a in (X, Wq, Wv))
        self.root = ar.scalar(math.sqrt(Wq.shape[0]))
        self.n, self.dv = X.shape[0], Wv.shape[0]

    def forward(self, output: bool = True) -> np.ndarray | None:
        """Y, keeping what the backward pass needs (only that, without ``output``: the
        VJP and the Jacobian do not need Y's own product)."""
        ar = self.ar
        self.Q = ar.mm(self.X, self.Wq.T)
        self.P, self.argmax = ar.softmax(ar.neg_sq_dist(self.Q, self.root))
        self.A = ar.div(ar.mm(self.Wq.T, self.Wq), self.root)
        self.B = ar.mm(self.A, self.Wv.T)
        self.M = ar.mm(self.X, self.B)
        if not output:
            return None
        return ar.mm(self.P, self.M)

    def backward(self, G: np.ndarray, parameters: bool = True) -> tuple:
        """``(dX, dWq, dWv)`` (only ``(dX,)`` without ``parameters``)."""
        ar = self.ar
        dM = ar.mm(self.P.T, G)
        dS = ar.softmax_backward(self.P, ar.mm(G, self.M.T), self.argmax)
        T = ar.add(dS, dS.T)
        dQ = ar.mul(ar.weighted_differences(T, self.Q), ar.scalar(-2.0 / self.root))
        dX = ar.add(ar.mm(dQ, self.Wq), ar.mm(dM, self.B.T))
        if not parameters:
            return (dX,)
        dB = ar.mm(self.X.T, dM)
        F = ar.mm(self.Wv.T, dB.T)
        dWq = ar.add(ar.mm(dQ.T, self.X), ar.div(ar.mm(self.Wq, ar.add(F, F.T)), self.root))
        dWv = ar.mm(dB.T, self.A)
        return dX, dWq, dWv


@bfloat16_kernel
@_a.ieee_kernel
def forward(X: ArrayLike, Wq: ArrayLike, Wv: ArrayLike, *, strict_fp16: bool = False) -> np.ndarray:
    """``Y = P X A Wv^T`` with ``P = softmax_rows(-|q_i - q_j|^2 / sqrt(d))``: (N, dv)."""
    p = _Prepared(X, Wq, Wv, strict_fp16)
    return _a.finish(p.forward(), p.dtype)


@bfloat16_kernel
@_a.ieee_kernel
def vjp(
    X: ArrayLike, G: ArrayLike, Wq: ArrayLike, Wv: ArrayLike, *, strict_fp16: bool = False
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``(dX, dWq, dWv)`` for the upstream gradient ``G`` of shape (N, dv)."""
    p = _Prepared(X, Wq, Wv, strict_fp16)
    G = p.ar.wide(_a.check_gradient(G, p.n, p.dv, p.dtype))
    p.forward(output=False)
    return tuple(_a.finish(v, p.dtype) for v in p.backward(G))


@bfloat16_kernel
@_a.ieee_kernel
def jacobian(
    X: ArrayLike, Wq: ArrayLike, Wv: ArrayLike, *, strict_fp16: bool = False
) -> np.ndarray:
    """``d vec(Y) / d vec(X)``: (N dv, N D), C-order flattening, numerator layout."""
    p = _Prepared(X, Wq, Wv, strict_fp16)
    p.forward(output=False)
    J = _a.jacobian_from_vjp(lambda G: p.backward(G, parameters=False)[0], p.n, p.dv)
    return _a.finish(J, p.dtype)
