"""The three single-head attentions of Table 2, in SymPy, and the closed-form backward
passes the kernels use, proven equal to the derivatives of the forwards.

Rows are tokens (SPEC; X has shape (N, D)):

* dot-product (Vaswani et al.; Table 2 row DP Attention, Eq. 20):
  ``Q = X Wq^T, K = X Wk^T, V = X Wv^T, Y = softmax_rows(Q K^T / sqrt(d)) V``;
* L2 (Kim et al. 2021, tied W^Q = W^K; row L2 Attention, Eq. 53):
  ``P_ij = softmax_j(-|q_i - q_j|^2 / sqrt(d))``, ``Y = P X A Wv^T``, ``A = Wq^T Wq / sqrt(d)``;
* scaled cosine similarity (LipsFormer, Qi et al. 2023; row SCS Attention, Eq. 54):
  ``q~_i = q_i / sqrt(|q_i|^2 + eps)`` (likewise k~, v~),
  ``Y = nu softmax_rows(tau Q~ K~^T) V~``.

``d = Wq.shape[0]``. The paper writes tokens as columns, ``Y = W^V X S(...)`` with a column
softmax: :func:`paper_dp` is that form, and the checker proves it is the same map with the
roles of W^Q and W^K exchanged, transposed.

Backward (``G = dL/dY``; ``rowsum`` broadcasts over columns):

    softmax   dS = P * (dP - rowsum(dP * P))
    DP        dV = P^T G, dP = G V^T, dQ = dS K / sqrt(d), dK = dS^T Q / sqrt(d),
              dWq = dQ^T X, dWk = dK^T X, dWv = dV^T X, dX = dQ Wq + dK Wk + dV Wv
    L2        B = Wq^T Wq Wv^T / sqrt(d), M = X B, dM = P^T G, dP = G M^T, T = dS + dS^T,
              dQ_i = -2/sqrt(d) sum_j T_ij (q_i - q_j) (no cancellation between the
              two terms of diag(rowsum T) Q - T Q), dB = X^T dM, F = Wv^T dB^T,
              dX = dQ Wq + dM B^T, dWq = dQ^T X + Wq (F + F^T) / sqrt(d),
              dWv = dB^T Wq^T Wq / sqrt(d)
    SCS       dV~ = nu P^T G, dP = nu G V~^T, dQ~ = tau dS K~, dK~ = tau dS^T Q~,
              per row u = q / r, r = sqrt(|q|^2 + eps): dq = (du - u (u . du)) / r,
              dWq = dQ^T X (likewise K, V), dX = dQ Wq + dK Wk + dV Wv
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import sympy as sp

from derive.definitions.rows import matrix, softmax
from proofs.core import Proof, Step, same
from proofs.derivatives import gradient


def _row_softmax(S: sp.Matrix) -> sp.Matrix:
    """:func:`derive.definitions.rows.softmax` of each row of ``S``."""
    return sp.Matrix.vstack(*(softmax(S.row(i).T).T for i in range(S.rows)))


def _col_softmax(S: sp.Matrix) -> sp.Matrix:
    return _row_softmax(S.T).T


def _rowsum(M: sp.Matrix) -> sp.Matrix:
    """``rowsum(M)`` broadcast over M's columns."""
    sums = [sum(M.row(i)) for i in range(M.rows)]
    return sp.Matrix(M.rows, M.cols, lambda i, j: sums[i])


def _softmax_backward(P: sp.Matrix, dP: sp.Matrix) -> sp.Matrix:
    mixed = P.multiply_elementwise(dP)
    return P.multiply_elementwise(dP - _rowsum(mixed))


def _normalize_rows(M: sp.Matrix, eps: sp.Expr) -> sp.Matrix:
    norms = [sp.sqrt(sum(v**2 for v in M.row(i)) + eps) for i in range(M.rows)]
    return sp.Matrix(M.rows, M.cols, lambda i, j: M[i, j] / norms[i])


# --- forwards ----------------------------------------------------------------------------


def dp(X: sp.Matrix, Wq: sp.Matrix, Wk: sp.Matrix, Wv: sp.Matrix) -> sp.Matrix:
    d = Wq.rows
    Q, K, V = X * Wq.T, X * Wk.T, X * Wv.T
    return _row_softmax(Q * K.T / sp.sqrt(d)) * V


def l2(X: sp.Matrix, Wq: sp.Matrix, Wv: sp.Matrix) -> sp.Matrix:
    d = Wq.rows
    Q = X * Wq.T
    n = Q.rows
    S = sp.Matrix(n, n, lambda i, j: -sum((Q[i, c] - Q[j, c]) ** 2 for c in range(d)))
    return _row_softmax(S / sp.sqrt(d)) * X * (Wq.T * Wq / sp.sqrt(d)) * Wv.T


def scs(X, Wq, Wk, Wv, nu, tau, eps) -> sp.Matrix:
    Qn = _normalize_rows(X * Wq.T, eps)
    Kn = _normalize_rows(X * Wk.T, eps)
    Vn = _normalize_rows(X * Wv.T, eps)
    return nu * _row_softmax(tau * Qn * Kn.T) * Vn


def paper_dp(Xp: sp.Matrix, Wq: sp.Matrix, Wk: sp.Matrix, Wv: sp.Matrix) -> sp.Matrix:
    """Eq. 20 as printed: tokens are the columns of ``Xp``, the softmax runs down columns."""
    d = Wq.rows
    return Wv * Xp * _col_softmax((Wq * Xp).T * (Wk * Xp) / sp.sqrt(d))


def paper_l2_printed(Xp: sp.Matrix, Wq: sp.Matrix, Wk: sp.Matrix, Wv: sp.Matrix) -> sp.Matrix:
    """Eq. 53 as printed: logits -(W^Q X - W^K X)^T (W^Q X - W^K X) / sqrt(d), column
    softmax, value W^V X (tokens are columns)."""
    d = Wq.rows
    diff = Wq * Xp - Wk * Xp
    return Wv * Xp * _col_softmax(-(diff.T * diff) / sp.sqrt(d))


def paper_l2_intended(Xp: sp.Matrix, Wq: sp.Matrix, Wv: sp.Matrix) -> sp.Matrix:
    """Kim et al.'s L2 attention in the paper's layout: logits -|W^Q x_i - W^Q x_j|^2 /
    sqrt(d), column softmax, value W^V A X with A = W^Q^T W^Q / sqrt(d)."""
    d = Wq.rows
    Q = Wq * Xp
    n = Q.cols
    dist = sp.Matrix(n, n, lambda i, j: -sum((Q[c, i] - Q[c, j]) ** 2 for c in range(d)))
    A = Wq.T * Wq / sp.sqrt(d)
    return Wv * A * Xp * _col_softmax(dist / sp.sqrt(d))


def paper_scs(Xp, Wq, Wk, Wv, nu, tau, eps) -> sp.Matrix:
    """Eq. 54: Y = nu V P, P = softmax(tau Q^T K) down columns, columns l2-normalized."""
    Qn = _normalize_rows((Wq * Xp).T, eps).T
    Kn = _normalize_rows((Wk * Xp).T, eps).T
    Vn = _normalize_rows((Wv * Xp).T, eps).T
    return nu * Vn * _col_softmax(tau * Qn.T * Kn)


# --- closed-form backward passes (what the kernels compute) -------------------------------


def dp_backward(X, G, Wq, Wk, Wv):
    d = Wq.rows
    Q, K, V = X * Wq.T, X * Wk.T, X * Wv.T
    P = _row_softmax(Q * K.T / sp.sqrt(d))
    dV, dP = P.T * G, G * V.T
    dS = _softmax_backward(P, dP)
    dQ, dK = dS * K / sp.sqrt(d), dS.T * Q / sp.sqrt(d)
    return (dQ * Wq + dK * Wk + dV * Wv, dQ.T * X, dK.T * X, dV.T * X)


def l2_backward(X, G, Wq, Wv):
    d = Wq.rows
    root = sp.sqrt(d)
    Q = X * Wq.T
    n = Q.rows
    S = sp.Matrix(n, n, lambda i, j: -sum((Q[i, c] - Q[j, c]) ** 2 for c in range(d)))
    P = _row_softmax(S / root)
    B = Wq.T * Wq * Wv.T / root
    M = X * B
    dM, dP = P.T * G, G * M.T
    dS = _softmax_backward(P, dP)
    T = dS + dS.T
    dQ = sp.Matrix.vstack(
        *(
            -2 / root * sum((T[i, j] * (Q.row(i) - Q.row(j)) for j in range(n)), sp.zeros(1, d))
            for i in range(n)
        )
    )
    dB = X.T * dM
    F = Wv.T * dB.T
    dX = dQ * Wq + dM * B.T
    return (dX, dQ.T * X + Wq * (F + F.T) / root, dB.T * Wq.T * Wq / root)


def _normalize_backward(M: sp.Matrix, dU: sp.Matrix, eps: sp.Expr) -> sp.Matrix:
    rows = []
    for i in range(M.rows):
        r = sp.sqrt(sum(v**2 for v in M.row(i)) + eps)
        u = M.row(i) / r
        du = dU.row(i)
        rows.append((du - u * (u * du.T)[0]) / r)
    return sp.Matrix.vstack(*rows)


def scs_backward(X, G, Wq, Wk, Wv, nu, tau, eps):
    Qr, Kr, Vr = X * Wq.T, X * Wk.T, X * Wv.T
    Qn, Kn, Vn = (_normalize_rows(M, eps) for M in (Qr, Kr, Vr))
    P = _row_softmax(tau * Qn * Kn.T)
    dVn, dP = nu * P.T * G, nu * G * Vn.T
    dS = _softmax_backward(P, dP)
    dQn, dKn = tau * dS * Kn, tau * dS.T * Qn
    dQ, dK, dV = (
        _normalize_backward(Qr, dQn, eps),
        _normalize_backward(Kr, dKn, eps),
        _normalize_backward(Vr, dVn, eps),
    )
    return (dQ * Wq + dK * Wk + dV * Wv, dQ.T * X, dK.T * X, dV.T * X)


# --- proofs ------------------------------------------------------------------------------


@dataclass(frozen=True)
class Size:
    """N tokens of width D, query/key width d, value width dv."""

    n: int
    D: int
    d: int
    dv: int

    def __str__(self) -> str:
        return f"N = {self.n}, D = {self.D}, d = {self.d}, dv = {self.dv}"


#: The sizes at which the closed forms are proven (every entry, exactly).
PROOF_SIZES = {
    "dp_attention": (Size(2, 1, 1, 1), Size(2, 2, 1, 1), Size(3, 1, 1, 1), Size(2, 1, 2, 1)),
    "l2_attention": (Size(2, 1, 1, 1), Size(2, 2, 1, 1), Size(3, 1, 1, 1), Size(2, 1, 2, 1)),
    "scs_attention": (Size(2, 1, 1, 1), Size(2, 1, 2, 1), Size(2, 1, 1, 2)),
}

_NU, _TAU = sp.symbols("nu tau", real=True)
_EPS = sp.Symbol("epsilon", positive=True)


def _symbols(key: str, size: Size):
    X, G = matrix("X", size.n, size.D), matrix("G", size.n, size.dv)
    Wq, Wv = matrix("Wq", size.d, size.D), matrix("Wv", size.dv, size.D)
    if key == "l2_attention":
        return X, G, (Wq, Wv)
    Wk = matrix("Wk", size.d, size.D)
    if key == "dp_attention":
        return X, G, (Wq, Wk, Wv)
    return X, G, (Wq, Wk, Wv, _NU, _TAU, _EPS)


FORWARDS: dict[str, Callable] = {"dp_attention": dp, "l2_attention": l2, "scs_attention": scs}
BACKWARDS: dict[str, Callable] = {
    "dp_attention": dp_backward,
    "l2_attention": l2_backward,
    "scs_attention": scs_backward,
}


def _gradient(loss: sp.Expr, M: sp.Matrix) -> sp.Matrix:
    """``d loss / d M`` entry by entry (:func:`proofs.derivatives.gradient`: SymEngine's
    derivatives, as SymPy expressions; about a fifth of ``sympy.diff``'s time here)."""
    return sp.Matrix(M.rows, M.cols, gradient(loss, list(M)))


def backward_matches(key: str, size: Size, backward: Callable | None = None) -> bool:
    """The closed form ``backward`` (default: the kernels') equals the derivative of
    ``sum(G * Y)`` with respect to X and every weight matrix, entry by entry."""
    X, G, params = _symbols(key, size)
    Y = FORWARDS[key](X, *params)
    loss = sum(G.multiply_elementwise(Y))
    closed = (backward or BACKWARDS[key])(X, G, *params)
    weights = [p for p in params if isinstance(p, sp.MatrixBase)]
    return all(same(c, _gradient(loss, M)) for c, M in zip(closed, [X, *weights], strict=True))


def closed_form_proof(key: str) -> Proof:
    return Proof(
        f"kernels.{key}: the backward pass",
        tuple(
            Step(
                f"{size}: the closed-form (dX and the weight gradients) equals the derivative "
                "of sum(G * Y) (SymEngine's diff), entry by entry",
                "symbolic identity",
                lambda s=size: backward_matches(key, s),
            )
            for size in PROOF_SIZES[key]
        ),
    )
