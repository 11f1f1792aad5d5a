"""Single-head scaled cosine similarity attention (LipsFormer, Qi et al. 2023), rows as tokens.

``X`` has shape (N, D), ``Wq`` and ``Wk`` shape (d, D), ``Wv`` shape (dv, D); ``nu``,
``tau`` and ``eps`` are real numbers (``nu``, ``tau`` finite, of any sign; ``eps`` finite
and >= 0, else ValueError)::

    q_i = (X Wq^T)_i,  q~_i = q_i / sqrt(|q_i|^2 + eps)  (likewise k~ with Wk, v~ with Wv),
    S = tau Q~ K~^T,  P = softmax of each row of S,  Y = nu P V~  (shape (N, dv)).

Source: 001_76ce3a8a4b6079c3.txt, Table 2 row SCS Attention and Eq. 54, with the
normalization of q_i, k_i, v_i printed under it. The paper writes tokens as columns,
``Y_p = nu V P`` with ``P = softmax(tau Q^T K)`` and a softmax down each column (column j
mixes the values with weights ``softmax_i(tau q~_i . k~_j)``): that is this map with the
roles of W^Q and W^K exchanged and everything transposed,
``Y_p = forward(X_p^T, W^K, W^Q, W^V, nu, tau, eps)^T``.

eps is the paper's: added to the squared norm. ``eps = 0`` is allowed (plain cosine
similarity); then a zero row q_i (or k_i, v_i) gives 0/0 = NaN in its row of Q~, and NaN
spreads to every output that reads it (for a zero q_i: row i of Y; for a zero k_j or v_j:
all of Y). With eps > 0 the normalization is smooth and ``|q~_i| < 1``.

Backward, for ``G = dL/dY`` (proven equal to sympy.diff of the forward; see
``derive/definitions/attention.py``; ``rowsum`` broadcasts over columns)::

    dV~ = nu P^T G,  dP = nu G V~^T,  dS = P * (dP - rowsum(dP * P)),
    dQ~ = tau dS K~,  dK~ = tau dS^T Q~,
    per row, u = q / r with r = sqrt(|q|^2 + eps):  dq = (du - u (u . du)) / r,
    dWq = dQ^T X,  dWk = dK^T X,  dWv = dV^T X,  dX = dQ Wq + dK Wk + dV Wv.

``jacobian`` is the dense (N dv, N D) matrix ``d vec(Y) / d vec(X)`` (C-order flattening,
numerator layout), built from one VJP per row: meant for small N and D.

Arithmetic (``kernels/_attention.py``): float64, float32 and float16 inputs (and bfloat16 in
mixed mode) are computed in float64 -- matrix products by NumPy/BLAS, the row softmax (max
subtracted) and its backward pass (cancellation-free at each row's argmax) in Numba loops,
the normalizations in NumPy -- and rounded once to the input dtype. The matrix products are
accurate relative to the sums of the magnitudes of their terms. ``du - u (u . du)`` is
evaluated as written: its error is of order ``2^-53 |du|``, not relative to the result,
which is small when du is nearly parallel to u. In float64, ``|q|^2`` overflows for
``|q| > 1.3e154`` (then q~ = 0) and underflows below ``|q| = 1.5e-154`` (subnormal: digits
lost; 0 below about 2e-162, which with eps = 0 gives NaN); float32 and float16 input cannot
reach either.

``strict_fp16=True`` (float16 or bfloat16 input) rounds nu, tau and eps to the input's
format first, then every product, partial sum (ascending index), difference, quotient,
square root and exp, in the order written above (``S = tau (Q~ K~^T)``, ``Y = nu (P V~)``,
``dV~ = nu (P^T G)``, ``dP = nu (G V~^T)``, ``dq = (du - u (u . du)) / r``). There the
squared norms overflow first: a partial sum of ``|q_i|^2`` reaching 65520 (so already
``|q_i|`` about 256) gives ``r = inf`` and ``q~_i = 0`` instead of a unit vector; eps at or
below 2^-25 rounds to 0. Q~ K~^T itself cannot overflow (|q~|, |k~| <= 1). In bfloat16
(float32's range, 8 significant bits) the squared norms overflow only past 3.4e38 and eps
rounds to 0 only at or below 2^-134, but the sum of squares stops growing first: ``|q_i|^2``
over d > 256 coordinates equal to 1 stops at 256 (``256 + 1 = 256``), so ``r = 16`` instead
of ``sqrt(d)`` and ``|q~_i| = sqrt(d) / 16 > 1``.

NaN and inf propagate as IEEE arithmetic says. Nothing is written into the inputs; any
strides work.

>>> import numpy as np
>>> from kernels import scs_attention
>>> X = np.array([[3.0, 0.0], [0.0, 5.0]])
>>> W = np.eye(2)  # q~ = k~ = v~ = the unit rows e_1, e_2 (eps = 0)
>>> Y = scs_attention.forward(X, W, W, W, 2.0, 1.0, 0.0)  # nu = 2, tau = 1
>>> np.round(Y, 6)  # 2 softmax([[1, 0], [0, 1]])
array([[1.462117, 0.537883],
       [0.537883, 1.462117]])
>>> Xh, Wh = np.array([[300.0, 0.0], [0.0, 5.0]], np.float16), np.eye(2, dtype=np.float16)
>>> scs_attention.forward(Xh, Wh, Wh, Wh, 2.0, 1.0, 0.0)[0]
array([1.462, 0.538], dtype=float16)
>>> scs_attention.forward(Xh, Wh, Wh, Wh, 2.0, 1.0, 0.0, strict_fp16=True)[0]  # 300^2: inf
array([0., 1.], dtype=float16)
"""

from __future__ import annotations

import numpy as np
from numpy.typing import ArrayLike

from kernels import _attention as _a
from kernels._strict import bfloat16_kernel
from kernels._validate import eps_value, real

__all__ = ["forward", "jacobian", "vjp"]


class _Prepared:
    """Checked arguments, widened to float64, and the arithmetic to use."""

    def __init__(self, X, Wq, Wk, Wv, nu, tau, eps, strict_fp16):
        X = _a.check_input(X)
        Wq = _a.check_weight(Wq, "Wq", X)
        Wk = _a.check_weight(Wk, "Wk", X, rows=Wq.shape[0])
        Wv = _a.check_weight(Wv, "Wv", X)
        self.dtype = X.dtype
        self.ar = ar = _a.arithmetic(X, strict_fp16)
        self.nu = ar.scalar(real(nu, "nu"))
        self.tau = ar.scalar(real(tau, "tau"))
        self.eps = ar.scalar(eps_value(eps))
        self.X, self.Wq, self.Wk, self.Wv = (ar.wide(a) for a in (X, Wq, Wk, Wv))
        self.n, self.dv = X.shape[0], Wv.shape[0]

    def _normalize(self, W: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """``(u, r)``: the rows of ``X W^T`` divided by ``r = sqrt(|q|^2 + eps)`` (N, 1)."""
        ar = self.ar
        q = ar.mm(self.X, W.T)
        r = ar.sqrt(ar.add(ar.rowdot(q, q), self.eps))
        return ar.div(q, r), r

    def _normalize_backward(self, u: np.ndarray, r: np.ndarray, du: np.ndarray) -> np.ndarray:
        """``dq = (du - u (u . du)) / r`` per row."""
        ar = self.ar
        return ar.div(ar.sub(du, ar.mul(u, ar.rowdot(u, du))), r)

    def forward(self, output: bool = True) -> np.ndarray | None:
        """Y, keeping what the backward pass needs (only that, without ``output``: the
        VJP and the Jacobian do not need Y's own product)."""
        ar = self.ar
        self.Qn, self.rq = self._normalize(self.Wq)
        self.Kn, self.rk = self._normalize(self.Wk)
        self.Vn, self.rv = self._normalize(self.Wv)
        self.P, self.argmax = ar.softmax(ar.mul(ar.mm(self.Qn, self.Kn.T), self.tau, inplace=True))
        if not output:
            return None
        return ar.mul(ar.mm(self.P, self.Vn), self.nu, inplace=True)

    def backward(self, G: np.ndarray, parameters: bool = True) -> tuple:
        """``(dX, dWq, dWk, dWv)`` (only ``(dX,)`` without ``parameters``)."""
        ar = self.ar
        dVn = ar.mul(ar.mm(self.P.T, G), self.nu, inplace=True)
        dP = ar.mul(ar.mm(G, self.Vn.T), self.nu, inplace=True)
        dS = ar.softmax_backward(self.P, dP, self.argmax)
        dQn = ar.mul(ar.mm(dS, self.Kn), self.tau, inplace=True)
        dKn = ar.mul(ar.mm(dS.T, self.Qn), self.tau, inplace=True)
        dQ = self._normalize_backward(self.Qn, self.rq, dQn)
        dK = self._normalize_backward(self.Kn, self.rk, dKn)
        dV = self._normalize_backward(self.Vn, self.rv, dVn)
        dX = ar.add(ar.add(ar.mm(dQ, self.Wq), ar.mm(dK, self.Wk)), ar.mm(dV, self.Wv))
        if not parameters:
            return (dX,)
        return dX, ar.mm(dQ.T, self.X), ar.mm(dK.T, self.X), ar.mm(dV.T, self.X)


@bfloat16_kernel
@_a.ieee_kernel
def forward(
    X: ArrayLike,
    Wq: ArrayLike,
    Wk: ArrayLike,
    Wv: ArrayLike,
    nu: float,
    tau: float,
    eps: float,
    *,
    strict_fp16: bool = False,
) -> np.ndarray:
    """``Y = nu softmax_rows(tau Q~ K~^T) V~``: shape (N, dv), X's dtype."""
    p = _Prepared(X, Wq, Wk, Wv, nu, tau, eps, strict_fp16)
    return _a.finish(p.forward(), p.dtype)


@bfloat16_kernel
@_a.ieee_kernel
def vjp(
    X: ArrayLike,
    G: ArrayLike,
    Wq: ArrayLike,
    Wk: ArrayLike,
    Wv: ArrayLike,
    nu: float,
    tau: float,
    eps: float,
    *,
    strict_fp16: bool = False,
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """``(dX, dWq, dWk, dWv)`` for the upstream gradient ``G`` of shape (N, dv)."""
    p = _Prepared(X, Wq, Wk, Wv, nu, tau, eps, strict_fp16)
    G = p.ar.wide(_a.check_gradient(G, p.n, p.dv, p.dtype))
    p.forward(output=False)
    return tuple(_a.finish(v, p.dtype) for v in p.backward(G))


@bfloat16_kernel
@_a.ieee_kernel
def jacobian(
    X: ArrayLike,
    Wq: ArrayLike,
    Wk: ArrayLike,
    Wv: ArrayLike,
    nu: float,
    tau: float,
    eps: float,
    *,
    strict_fp16: bool = False,
) -> np.ndarray:
    """``d vec(Y) / d vec(X)``: (N dv, N D), C-order flattening, numerator layout."""
    p = _Prepared(X, Wq, Wk, Wv, nu, tau, eps, strict_fp16)
    p.forward(output=False)
    J = _a.jacobian_from_vjp(lambda G: p.backward(G, parameters=False)[0], p.n, p.dv)
    return _a.finish(J, p.dtype)
