"""High-precision mpmath references for the three single-head attentions.

Each module is written here straight from its definition, step by step with explicit
loops, sharing no code with the kernels (``kernels/dp_attention.py``,
``kernels/l2_attention.py``, ``kernels/scs_attention.py``) and no closed-form derivative:

* the forward evaluates the steps of the definition in order (projections -> logits ->
  exp -> row sums -> division -> value product, with the SCS normalizations in between);
* the VJP is reverse-mode differentiation of those same steps, written out by hand: every
  step, last first, appends the adjoint terms it contributes to the inputs it read, and
  each adjoint is the sum of its terms (one ``fsum``). No closed form such as
  ``dL = P * (dP - rowsum(P * dP))`` is used;
* the Jacobian is forward-mode differentiation: the unit matrices ``E_nk`` are pushed
  through the same steps as tangents of ``X`` (weights fixed), and the tangent of ``Y``,
  flattened in C order, is column ``n D + k`` (numerator layout,
  ``J[i dv + c, n D + k] = dY_ic / dX_nk``, shape ``(N dv, N D)``).

Definitions (rows are tokens, as in PyTorch; ``X`` has shape (N, D))
----------------------------------------------------------------------
Source: ``shared/seeds/001_76ce3a8a4b6079c3.txt``, Table 2, rows DP Attention (Vaswani et
al.), L2 Attention (Kim et al. 2021) and SCS Attention (Qi et al., LipsFormer), in the
row-token convention of SPEC.md ("Modules and kernel API"; the paper writes columns as
tokens, ``Y = W^V X S(...)``).

* dp_attention(X, Wq, Wk, Wv), ``Wq, Wk`` (d, D), ``Wv`` (dv, D)::

      Q = X Wq^T, K = X Wk^T, V = X Wv^T           projections
      S_ij = sum_a Q_ia K_ja,  L_ij = S_ij / sqrt(d)  logits
      P_ij = softmax_j(L_ij)                         (the row softmax below)
      Y_ic = sum_j P_ij V_jc                         value product, Y is (N, dv)

* l2_attention(X, Wq, Wv), ``W^Q = W^K`` tied, ``Wq`` (d, D), ``Wv`` (dv, D)::

      Q = X Wq^T,  Delta_ija = Q_ia - Q_ja,  D2_ij = sum_a Delta_ija Delta_ija
      L_ij = -D2_ij / sqrt(d),  P_ij = softmax_j(L_ij)
      A_kl = (sum_a Wq_ak Wq_al) / sqrt(d)           A = Wq^T Wq / sqrt(d), (D, D)
      Z = P X,  U = Z A,  Y = U Wv^T                 Y = P X A Wv^T, (N, dv)

* scs_attention(X, Wq, Wk, Wv, nu, tau, eps), ``Wq, Wk`` (d, D), ``Wv`` (dv, D)::

      Q = X Wq^T (likewise K, V)
      n_i = sum_a Q_ia Q_ia + eps,  r_i = sqrt(n_i),  Q~_ia = Q_ia / r_i  (likewise K~, V~)
      S_ij = sum_a Q~_ia K~_ja,  L_ij = tau S_ij,  P_ij = softmax_j(L_ij)
      O_ic = sum_j P_ij V~_jc,  Y_ic = nu O_ic

* the row softmax, common to all three: ``m_i = max_j L_ij``, ``e_ij = exp(L_ij - m_i)``,
  ``s_i = sum_j e_ij``, ``P_ij = e_ij / s_i``. The shift by ``m_i`` changes nothing
  mathematically (``P`` is exactly invariant under adding one number to a row of ``L``),
  so both sweeps hold ``m_i`` fixed: its adjoint ``-sum_j bar_e_ij e_ij`` is exactly 0 and
  its tangent cancels. It is kept because it is what any floating-point kernel must do,
  and the same steps, run in another arithmetic (below), then describe such a kernel.

Reverse sweep (``G`` = bar Y)::

    softmax:  bar_e_ij = bar_P_ij / s_i + bar_s_i,  bar_s_i = -sum_j bar_P_ij e_ij / (s_i s_i),
              bar_L_ij = bar_e_ij e_ij
    sqrt:     bar_n_i = bar_r_i / (2 r_i);   quotient Q~ = Q / r:  bar_Q_ia += bar_Q~_ia / r_i,
              bar_r_i = -sum_a bar_Q~_ia Q_ia / (r_i r_i);  square sum: bar_Q_ia += 2 bar_n_i Q_ia
    products: C = A B gives bar_A += bar_C B^T, bar_B += A^T bar_C (a projection
              Q = X W^T gives bar_X += bar_Q W, bar_W += bar_Q^T X)

Inputs and outputs
------------------
``X``, the weights and ``G`` are 2-D arrays of float16/32/64 (or object arrays of
``mpf``, or nested lists of floats); ``nu``, ``tau``, ``eps`` are real numbers. Floats are
converted exactly (:func:`derive.reference.core.exact`); ``mpf`` elements are used as they
are, so that :func:`directional_derivative` can evaluate the forwards at points no float
represents. Values must be finite (the IEEE propagation of NaN and inf is a kernel
property, tested on the kernels). Results are NumPy object arrays of ``mpf``: ``Y`` and
``dX`` of the shapes of ``X`` and ``Y``, each weight gradient of its weight's shape, the
Jacobian ``(N dv, N D)``. Everything runs inside ``mpmath.workdps(dps)``; the global
precision is never changed. SCS with ``eps = 0`` and an all-zero row of ``Q``, ``K`` or
``V`` is 0/0, undefined: ``ValueError`` (the kernels' convention is tested on the kernels).

Other arithmetics
-----------------
Every step is written against an :class:`Arithmetic`: its numbers need ``+ - * /`` and
unary ``-``, and it supplies ``lift`` (an exact mpf input into a number), ``sum``, ``exp``,
``sqrt``, ``max`` and ``value``. The default, :data:`MPMATH`, is plain mpmath (``fsum``,
``exp``, ``sqrt``). ``tests/kernels/test_attention.py`` passes an arithmetic whose numbers also
carry a first-order bound of the error a float64 evaluation of the same steps can have;
that is how its tolerances are derived from the steps written here, once.

Accuracy
--------
Products of two input floats are exact at 50 digits (169 bits > 2 * 53); each sum is one
``fsum`` (exact, rounded once); ``exp``, ``sqrt`` and quotients are correctly rounded to
``p`` bits. So every quantity is correct to a few units of ``2^-p`` times the size of the
terms it is made of (the sweeps' signed sums, e.g. ``bar_P_ij / s_i + bar_s_i``, relative
to ``|bar_P_ij| / s_i + |bar_s_i|``), and the softmax's amplification of an absolute error
``delta`` in a logit into a relative error ``delta`` in ``P`` acts on errors of
``2^-p |L|``: at ``dps = 50`` (``p = 169``) this leaves over 100 bits below the float64
error bounds the tests apply. ``tests/kernels/test_attention.py`` checks the sweeps against
:func:`directional_derivative` (central differences at 60 digits) to 30 digits.

>>> import numpy as np
>>> X = np.array([[1.0, 0.0], [0.0, 1.0]])
>>> Y = dp_attention_forward(X, np.eye(2), np.eye(2), np.eye(2))
>>> [mpmath.nstr(v, 15) for v in Y[0]]
['0.669761549326657', '0.330238450673343']
>>> l2_attention_forward(np.ones((2, 1)), np.array([[2.0]]), np.array([[1.0]]))[0, 0]
mpf('4.0')
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, Protocol

import mpmath
import numpy as np
import numpy.typing as npt

from derive.reference.core import MIN_REFERENCE_DIGITS, check_dps, exact_array, exact_scalar

__all__ = [
    "DEFAULT_DPS",
    "MPMATH",
    "Arithmetic",
    "directional_derivative",
    "dp_attention_forward",
    "dp_attention_jacobian",
    "dp_attention_vjp",
    "l2_attention_forward",
    "l2_attention_jacobian",
    "l2_attention_vjp",
    "scs_attention_forward",
    "scs_attention_jacobian",
    "scs_attention_vjp",
]

#: Significant digits of the references unless asked otherwise (SPEC, "Tests": >= 50).
DEFAULT_DPS = 50
#: The lowest precision accepted: the SPEC's 50 digits (no caller needs fewer).
MIN_DPS = MIN_REFERENCE_DIGITS

Matrix = list  # a list of rows, each a list of numbers of one Arithmetic


class Arithmetic(Protocol):
    """The operations the steps use besides ``+ - * /`` and unary ``-`` on its numbers."""

    def lift(self, value: mpmath.mpf) -> Any:
        """An exact input (or constant) as a number of this arithmetic."""

    def sum(self, terms: Sequence[Any]) -> Any:
        """The sum of one or more numbers."""

    def exp(self, value: Any) -> Any: ...

    def sqrt(self, value: Any) -> Any: ...

    def max(self, values: Sequence[Any]) -> Any:
        """The largest of the numbers (by value)."""

    def value(self, number: Any) -> mpmath.mpf:
        """The mpf value of a number."""


class _Mpmath:
    """Plain mpmath at the ambient precision: ``fsum``, ``exp``, ``sqrt``."""

    def lift(self, value: mpmath.mpf) -> mpmath.mpf:
        return value

    def sum(self, terms: Sequence[mpmath.mpf]) -> mpmath.mpf:
        return mpmath.fsum(terms)

    def exp(self, value: mpmath.mpf) -> mpmath.mpf:
        return mpmath.exp(value)

    def sqrt(self, value: mpmath.mpf) -> mpmath.mpf:
        return mpmath.sqrt(value)

    def max(self, values: Sequence[mpmath.mpf]) -> mpmath.mpf:
        return max(values)

    def value(self, number: mpmath.mpf) -> mpmath.mpf:
        return number


#: The default arithmetic of every reference function.
MPMATH: Arithmetic = _Mpmath()


# --------------------------------------------------------------------------------------
# Exact inputs
# --------------------------------------------------------------------------------------


def _matrix(value: npt.ArrayLike, name: str, ar: Arithmetic) -> Matrix:
    """A 2-D array (at least one row and one column) as rows of lifted exact numbers."""
    array = exact_array(value, name, finite=True)
    if array.ndim != 2 or 0 in array.shape:
        raise ValueError(f"{name}: expected a non-empty 2-D array, got shape {array.shape}")
    return [[ar.lift(element) for element in row] for row in array.tolist()]


def _shape(A: Matrix) -> tuple[int, int]:
    return len(A), len(A[0])


def _expect(A: Matrix, shape: tuple[int, int], name: str, what: str) -> None:
    if _shape(A) != shape:
        raise ValueError(f"{name}: expected shape {shape} ({what}), got {_shape(A)}")


def _inputs(ar: Arithmetic, X, Wq, Wk, Wv) -> tuple[Matrix, Matrix, Matrix | None, Matrix]:
    """``X``, ``Wq``, ``Wk`` and ``Wv`` lifted and their shapes checked, in that order;
    ``Wk`` None (L2 attention, which has none) is passed through."""
    X = _matrix(X, "X", ar)
    features = len(X[0])
    Wq = _matrix(Wq, "Wq", ar)
    _expect(Wq, (len(Wq), features), "Wq", "(d, D), D = X.shape[1]")
    if Wk is not None:
        Wk = _matrix(Wk, "Wk", ar)
        _expect(Wk, _shape(Wq), "Wk", "the shape of Wq")
    Wv = _matrix(Wv, "Wv", ar)
    _expect(Wv, (len(Wv), features), "Wv", "(dv, D)")
    return X, Wq, Wk, Wv


def _objects(A: Matrix) -> np.ndarray:
    out = np.empty(_shape(A), dtype=object)
    for i, row in enumerate(A):
        for j, number in enumerate(row):
            out[i, j] = number
    return out


# --------------------------------------------------------------------------------------
# Steps shared by the three modules (explicit loops; any Arithmetic)
# --------------------------------------------------------------------------------------


def _transpose(A: Matrix) -> Matrix:
    return [list(column) for column in zip(*A, strict=True)]


def _term_lists(rows: int, columns: int) -> list[list[list[Any]]]:
    return [[[] for _ in range(columns)] for _ in range(rows)]


def _product_terms(terms: list, A: Matrix, B: Matrix) -> None:
    """Append the terms ``A_ij B_jk`` of ``(A B)_ik`` to ``terms[i][k]``."""
    rows, inner = _shape(A)
    columns = len(B[0])
    for i in range(rows):
        for k in range(columns):
            for j in range(inner):
                terms[i][k].append(A[i][j] * B[j][k])


def _totals(ar: Arithmetic, terms: list) -> Matrix:
    return [[ar.sum(entry) for entry in row] for row in terms]


def _product(ar: Arithmetic, A: Matrix, B: Matrix) -> Matrix:
    """``A B``, each entry one sum of its products."""
    terms = _term_lists(len(A), len(B[0]))
    _product_terms(terms, A, B)
    return _totals(ar, terms)


def _sum_of_products(ar: Arithmetic, *pairs: tuple[Matrix, Matrix]) -> Matrix:
    """``A1 B1 + A2 B2 + ...``, each entry one sum of all its products."""
    terms = _term_lists(len(pairs[0][0]), len(pairs[0][1][0]))
    for A, B in pairs:
        _product_terms(terms, A, B)
    return _totals(ar, terms)


def _zeros(ar: Arithmetic, rows: int, columns: int) -> Matrix:
    return [[ar.lift(mpmath.mpf(0)) for _ in range(columns)] for _ in range(rows)]


class _Softmax:
    """The row softmax ``P_ij = e_ij / s_i``, ``e_ij = exp(L_ij - m_i)``, ``s_i = sum_j e_ij``."""

    def __init__(self, ar: Arithmetic, L: Matrix):
        self.ar = ar
        self.e: Matrix = []
        self.s: list[Any] = []
        self.P: Matrix = []
        for row in L:
            m = ar.max(row)
            e = [ar.exp(logit - m) for logit in row]
            s = ar.sum(e)
            self.e.append(e)
            self.s.append(s)
            self.P.append([e_j / s for e_j in e])

    def tangent(self, dL: Matrix) -> Matrix:
        """``de = e dL`` (m_i held fixed), ``ds = sum_j de_j``, ``dP = de / s - e ds / s^2``."""
        ar, dP = self.ar, []
        for e, s, dl in zip(self.e, self.s, dL, strict=True):
            de = [e_j * dl_j for e_j, dl_j in zip(e, dl, strict=True)]
            ds = ar.sum(de)
            dP.append(
                [ar.sum([de_j / s, -(e_j * ds / (s * s))]) for e_j, de_j in zip(e, de, strict=True)]
            )
        return dP

    def reverse(self, bar_P: Matrix) -> Matrix:
        """``bar_s = -sum_j bar_P_j e_j / s^2``, ``bar_e = bar_P / s + bar_s``,
        ``bar_L = bar_e e``."""
        ar, bar_L = self.ar, []
        for e, s, bp in zip(self.e, self.s, bar_P, strict=True):
            bar_s = -(ar.sum([bp_j * e_j for bp_j, e_j in zip(bp, e, strict=True)]) / (s * s))
            bar_e = [ar.sum([bp_j / s, bar_s]) for bp_j in bp]
            bar_L.append([be_j * e_j for be_j, e_j in zip(bar_e, e, strict=True)])
        return bar_L


class _Normalize:
    """Row normalization ``Q~_ia = Q_ia / r_i``, ``r_i = sqrt(n_i)``,
    ``n_i = sum_a Q_ia^2 + eps``."""

    def __init__(self, ar: Arithmetic, Q: Matrix, eps: Any, name: str):
        self.ar, self.Q = ar, Q
        self.two = ar.lift(mpmath.mpf(2))
        self.r: list[Any] = []
        self.out: Matrix = []
        for i, q in enumerate(Q):
            n = ar.sum([*(q_a * q_a for q_a in q), eps])
            if not ar.value(n):
                raise ValueError(
                    f"eps: with eps = 0 row {i} of {name} = X W^T is zero, and its "
                    "normalization 0/0 is undefined"
                )
            r = ar.sqrt(n)
            self.r.append(r)
            self.out.append([q_a / r for q_a in q])

    def tangent(self, dQ: Matrix) -> Matrix:
        """``dn = sum_a (dQ_a Q_a + Q_a dQ_a)``, ``dr = dn / (2 r)``,
        ``dQ~ = dQ / r - Q dr / r^2``."""
        ar, out = self.ar, []
        for q, dq, r in zip(self.Q, dQ, self.r, strict=True):
            dn = ar.sum(
                [term for q_a, dq_a in zip(q, dq, strict=True) for term in (dq_a * q_a, q_a * dq_a)]
            )
            dr = dn / (self.two * r)
            out.append(
                [ar.sum([dq_a / r, -(q_a * dr / (r * r))]) for q_a, dq_a in zip(q, dq, strict=True)]
            )
        return out

    def reverse(self, bar_out: Matrix) -> Matrix:
        """``bar_Q = bar_Q~ / r + 2 bar_n Q`` with ``bar_n = bar_r / (2 r)``,
        ``bar_r = -sum_a bar_Q~_a Q_a / r^2`` (the product rule gives ``bar_n Q_a`` twice)."""
        ar, bar_Q = self.ar, []
        for q, bq, r in zip(self.Q, bar_out, self.r, strict=True):
            bar_r = -(ar.sum([bq_a * q_a for bq_a, q_a in zip(bq, q, strict=True)]) / (r * r))
            bar_n = bar_r / (self.two * r)
            bar_Q.append(
                [
                    ar.sum([bq_a / r, bar_n * q_a, bar_n * q_a])
                    for bq_a, q_a in zip(bq, q, strict=True)
                ]
            )
        return bar_Q


def _root(ar: Arithmetic, d: int) -> Any:
    return ar.sqrt(ar.lift(mpmath.mpf(d)))


def _divide(A: Matrix, c: Any) -> Matrix:
    return [[a / c for a in row] for row in A]


def _scale(A: Matrix, c: Any) -> Matrix:
    return [[c * a for a in row] for row in A]


def _negate(A: Matrix) -> Matrix:
    return [[-a for a in row] for row in A]


def _unit(ar: Arithmetic, rows: int, columns: int, n: int, k: int) -> Matrix:
    E = _zeros(ar, rows, columns)
    E[n][k] = ar.lift(mpmath.mpf(1))
    return E


def _jacobian(ar: Arithmetic, module: Any) -> np.ndarray:
    """Column ``n D + k`` is the tangent of ``vec(Y)`` for the tangent ``E_nk`` of X."""
    rows, features = _shape(module.X)
    outputs = rows * len(module.Y[0])
    J = np.empty((outputs, rows * features), dtype=object)
    for n in range(rows):
        for k in range(features):
            dY = module.tangent(_unit(ar, rows, features, n, k))
            J[:, n * features + k] = [number for row in dY for number in row]
    return J


# --------------------------------------------------------------------------------------
# DP attention
# --------------------------------------------------------------------------------------


class _DotProduct:
    """The forward steps of dp_attention, kept for the two sweeps."""

    def __init__(self, ar: Arithmetic, X, Wq, Wk, Wv):
        self.ar = ar
        self.X, self.Wq, self.Wk, self.Wv = _inputs(ar, X, Wq, Wk, Wv)
        self.Q = _product(ar, self.X, _transpose(self.Wq))
        self.K = _product(ar, self.X, _transpose(self.Wk))
        self.V = _product(ar, self.X, _transpose(self.Wv))
        self.root = _root(ar, len(self.Wq))
        S = _product(ar, self.Q, _transpose(self.K))
        self.softmax = _Softmax(ar, _divide(S, self.root))
        self.Y = _product(ar, self.softmax.P, self.V)

    def tangent(self, dX: Matrix) -> Matrix:
        ar = self.ar
        dQ = _product(ar, dX, _transpose(self.Wq))
        dK = _product(ar, dX, _transpose(self.Wk))
        dV = _product(ar, dX, _transpose(self.Wv))
        dS = _sum_of_products(ar, (dQ, _transpose(self.K)), (self.Q, _transpose(dK)))
        dP = self.softmax.tangent(_divide(dS, self.root))
        return _sum_of_products(ar, (dP, self.V), (self.softmax.P, dV))

    def reverse(self, G: Matrix) -> tuple[Matrix, ...]:
        ar, P = self.ar, self.softmax.P
        bar_P = _product(ar, G, _transpose(self.V))
        bar_V = _product(ar, _transpose(P), G)
        bar_S = _divide(self.softmax.reverse(bar_P), self.root)
        bar_Q = _product(ar, bar_S, self.K)
        bar_K = _product(ar, _transpose(bar_S), self.Q)
        dX = _sum_of_products(ar, (bar_Q, self.Wq), (bar_K, self.Wk), (bar_V, self.Wv))
        dWq = _product(ar, _transpose(bar_Q), self.X)
        dWk = _product(ar, _transpose(bar_K), self.X)
        dWv = _product(ar, _transpose(bar_V), self.X)
        return dX, dWq, dWk, dWv


# --------------------------------------------------------------------------------------
# L2 attention (W^Q = W^K)
# --------------------------------------------------------------------------------------


class _L2:
    """The forward steps of l2_attention, kept for the two sweeps."""

    def __init__(self, ar: Arithmetic, X, Wq, Wv):
        self.ar = ar
        self.X, self.Wq, _, self.Wv = _inputs(ar, X, Wq, None, Wv)
        rows = len(self.X)
        self.Q = _product(ar, self.X, _transpose(self.Wq))
        self.root = _root(ar, len(self.Wq))
        self.delta = [
            [[qi - qj for qi, qj in zip(self.Q[i], self.Q[j], strict=True)] for j in range(rows)]
            for i in range(rows)
        ]
        D2 = [[ar.sum([t * t for t in self.delta[i][j]]) for j in range(rows)] for i in range(rows)]
        self.softmax = _Softmax(ar, _negate(_divide(D2, self.root)))
        self.A = _divide(_product(ar, _transpose(self.Wq), self.Wq), self.root)
        self.Z = _product(ar, self.softmax.P, self.X)
        self.U = _product(ar, self.Z, self.A)
        self.Y = _product(ar, self.U, _transpose(self.Wv))

    def tangent(self, dX: Matrix) -> Matrix:
        ar, rows = self.ar, len(self.X)
        dQ = _product(ar, dX, _transpose(self.Wq))
        dD2 = []
        for i in range(rows):
            dD2.append([])
            for j in range(rows):
                d_delta = [dqi - dqj for dqi, dqj in zip(dQ[i], dQ[j], strict=True)]
                terms = [
                    u
                    for t, dt in zip(self.delta[i][j], d_delta, strict=True)
                    for u in (dt * t, t * dt)
                ]
                dD2[i].append(ar.sum(terms))
        dP = self.softmax.tangent(_negate(_divide(dD2, self.root)))
        dZ = _sum_of_products(ar, (dP, self.X), (self.softmax.P, dX))
        dU = _product(ar, dZ, self.A)
        return _product(ar, dU, _transpose(self.Wv))

    def reverse(self, G: Matrix) -> tuple[Matrix, ...]:
        ar, rows, P = self.ar, len(self.X), self.softmax.P
        heads, features = _shape(self.Wq)
        bar_U = _product(ar, G, self.Wv)
        dWv = _product(ar, _transpose(G), self.U)
        bar_Z = _product(ar, bar_U, _transpose(self.A))
        bar_A = _divide(_product(ar, _transpose(self.Z), bar_U), self.root)
        bar_P = _product(ar, bar_Z, _transpose(self.X))
        bar_D2 = _negate(_divide(self.softmax.reverse(bar_P), self.root))
        # D2_ij = sum_a Delta_ija Delta_ija: each factor gets bar_D2_ij Delta_ija; then
        # Delta_ija = Q_ia - Q_ja sends it to Q_ia with + and to Q_ja with -.
        bar_Q_terms = _term_lists(rows, heads)
        for i in range(rows):
            for j in range(rows):
                for a in range(heads):
                    for _factor in range(2):
                        bar_delta = bar_D2[i][j] * self.delta[i][j][a]
                        bar_Q_terms[i][a].append(bar_delta)
                        bar_Q_terms[j][a].append(-bar_delta)
        bar_Q = _totals(ar, bar_Q_terms)
        dX_terms = _term_lists(rows, features)
        _product_terms(dX_terms, _transpose(P), bar_Z)  # Z = P X
        _product_terms(dX_terms, bar_Q, self.Wq)  # Q = X Wq^T
        # Wq: from Q = X Wq^T, and from both factors of A_kl = sum_a Wq_ak Wq_al / sqrt(d).
        dWq_terms = _term_lists(heads, features)
        _product_terms(dWq_terms, _transpose(bar_Q), self.X)
        _product_terms(dWq_terms, self.Wq, _transpose(bar_A))  # first factor Wq_ak
        _product_terms(dWq_terms, self.Wq, bar_A)  # second factor Wq_al
        return _totals(ar, dX_terms), _totals(ar, dWq_terms), dWv


# --------------------------------------------------------------------------------------
# SCS attention (LipsFormer)
# --------------------------------------------------------------------------------------


class _Scs:
    """The forward steps of scs_attention, kept for the two sweeps."""

    def __init__(self, ar: Arithmetic, X, Wq, Wk, Wv, nu, tau, eps):
        self.ar = ar
        self.X, self.Wq, self.Wk, self.Wv = _inputs(ar, X, Wq, Wk, Wv)
        self.nu = ar.lift(exact_scalar(nu, "nu", finite=True))
        self.tau = ar.lift(exact_scalar(tau, "tau", finite=True))
        eps = exact_scalar(eps, "eps", finite=True)
        if eps < 0:
            raise ValueError(f"eps: expected a finite number >= 0, got {eps}")
        self.eps = ar.lift(eps)
        self.norms = []
        for W, name in ((self.Wq, "Q"), (self.Wk, "K"), (self.Wv, "V")):
            projected = _product(ar, self.X, _transpose(W))
            self.norms.append(_Normalize(ar, projected, self.eps, name))
        Qn, Kn, Vn = (norm.out for norm in self.norms)
        S = _product(ar, Qn, _transpose(Kn))
        self.softmax = _Softmax(ar, _scale(S, self.tau))
        self.Y = _scale(_product(ar, self.softmax.P, Vn), self.nu)

    def tangent(self, dX: Matrix) -> Matrix:
        ar = self.ar
        dQn, dKn, dVn = (
            norm.tangent(_product(ar, dX, _transpose(W)))
            for norm, W in zip(self.norms, (self.Wq, self.Wk, self.Wv), strict=True)
        )
        Qn, Kn, Vn = (norm.out for norm in self.norms)
        dS = _sum_of_products(ar, (dQn, _transpose(Kn)), (Qn, _transpose(dKn)))
        dP = self.softmax.tangent(_scale(dS, self.tau))
        return _scale(_sum_of_products(ar, (dP, Vn), (self.softmax.P, dVn)), self.nu)

    def reverse(self, G: Matrix) -> tuple[Matrix, ...]:
        ar, P = self.ar, self.softmax.P
        Qn, Kn, Vn = (norm.out for norm in self.norms)
        bar_O = _scale(G, self.nu)
        bar_P = _product(ar, bar_O, _transpose(Vn))
        bar_Vn = _product(ar, _transpose(P), bar_O)
        bar_S = _scale(self.softmax.reverse(bar_P), self.tau)
        bar_Qn = _product(ar, bar_S, Kn)
        bar_Kn = _product(ar, _transpose(bar_S), Qn)
        weights = (self.Wq, self.Wk, self.Wv)
        bars = [
            norm.reverse(bar)
            for norm, bar in zip(self.norms, (bar_Qn, bar_Kn, bar_Vn), strict=True)
        ]
        dX = _sum_of_products(ar, *zip(bars, weights, strict=True))
        dW = [_product(ar, _transpose(bar), self.X) for bar in bars]
        return (dX, *dW)


# --------------------------------------------------------------------------------------
# Public functions
# --------------------------------------------------------------------------------------


def _run(make: Callable[[], Any], dps: int) -> Any:
    check_dps(dps, MIN_DPS)
    with mpmath.workdps(dps):
        return make()


def _gradient(ar: Arithmetic, module: Any, G: npt.ArrayLike) -> tuple[np.ndarray, ...]:
    upstream = _matrix(G, "G", ar)
    _expect(upstream, _shape(module.Y), "G", "the shape of Y, (N, dv)")
    return tuple(_objects(part) for part in module.reverse(upstream))


def dp_attention_forward(
    X: npt.ArrayLike,
    Wq: npt.ArrayLike,
    Wk: npt.ArrayLike,
    Wv: npt.ArrayLike,
    dps: int = DEFAULT_DPS,
    arithmetic: Arithmetic = MPMATH,
) -> np.ndarray:
    """``Y = softmax(X Wq^T (X Wk^T)^T / sqrt(d)) X Wv^T``, shape (N, dv)."""
    return _run(lambda: _objects(_DotProduct(arithmetic, X, Wq, Wk, Wv).Y), dps)


def dp_attention_vjp(
    X: npt.ArrayLike,
    G: npt.ArrayLike,
    Wq: npt.ArrayLike,
    Wk: npt.ArrayLike,
    Wv: npt.ArrayLike,
    dps: int = DEFAULT_DPS,
    arithmetic: Arithmetic = MPMATH,
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """``(dX, dWq, dWk, dWv)`` for the upstream gradient ``G`` (N, dv), by reverse mode."""
    return _run(lambda: _gradient(arithmetic, _DotProduct(arithmetic, X, Wq, Wk, Wv), G), dps)


def dp_attention_jacobian(
    X: npt.ArrayLike,
    Wq: npt.ArrayLike,
    Wk: npt.ArrayLike,
    Wv: npt.ArrayLike,
    dps: int = DEFAULT_DPS,
    arithmetic: Arithmetic = MPMATH,
) -> np.ndarray:
    """``d vec(Y) / d vec(X)``, shape (N dv, N D), C order, by forward mode."""
    return _run(lambda: _jacobian(arithmetic, _DotProduct(arithmetic, X, Wq, Wk, Wv)), dps)


def l2_attention_forward(
    X: npt.ArrayLike,
    Wq: npt.ArrayLike,
    Wv: npt.ArrayLike,
    dps: int = DEFAULT_DPS,
    arithmetic: Arithmetic = MPMATH,
) -> np.ndarray:
    """``Y = P X A Wv^T`` with ``P = softmax(-|q_i - q_j|^2 / sqrt(d))``, shape (N, dv)."""
    return _run(lambda: _objects(_L2(arithmetic, X, Wq, Wv).Y), dps)


def l2_attention_vjp(
    X: npt.ArrayLike,
    G: npt.ArrayLike,
    Wq: npt.ArrayLike,
    Wv: npt.ArrayLike,
    dps: int = DEFAULT_DPS,
    arithmetic: Arithmetic = MPMATH,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``(dX, dWq, dWv)`` for the upstream gradient ``G`` (N, dv), by reverse mode."""
    return _run(lambda: _gradient(arithmetic, _L2(arithmetic, X, Wq, Wv), G), dps)


def l2_attention_jacobian(
    X: npt.ArrayLike,
    Wq: npt.ArrayLike,
    Wv: npt.ArrayLike,
    dps: int = DEFAULT_DPS,
    arithmetic: Arithmetic = MPMATH,
) -> np.ndarray:
    """``d vec(Y) / d vec(X)``, shape (N dv, N D), C order, by forward mode."""
    return _run(lambda: _jacobian(arithmetic, _L2(arithmetic, X, Wq, Wv)), dps)


def scs_attention_forward(
    X: npt.ArrayLike,
    Wq: npt.ArrayLike,
    Wk: npt.ArrayLike,
    Wv: npt.ArrayLike,
    nu: float,
    tau: float,
    eps: float,
    dps: int = DEFAULT_DPS,
    arithmetic: Arithmetic = MPMATH,
) -> np.ndarray:
    """``Y = nu softmax(tau Q~ K~^T) V~``, shape (N, dv)."""
    return _run(lambda: _objects(_Scs(arithmetic, X, Wq, Wk, Wv, nu, tau, eps).Y), dps)


def scs_attention_vjp(
    X: npt.ArrayLike,
    G: npt.ArrayLike,
    Wq: npt.ArrayLike,
    Wk: npt.ArrayLike,
    Wv: npt.ArrayLike,
    nu: float,
    tau: float,
    eps: float,
    dps: int = DEFAULT_DPS,
    arithmetic: Arithmetic = MPMATH,
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """``(dX, dWq, dWk, dWv)`` for the upstream gradient ``G`` (N, dv), by reverse mode."""
    return _run(
        lambda: _gradient(arithmetic, _Scs(arithmetic, X, Wq, Wk, Wv, nu, tau, eps), G), dps
    )


def scs_attention_jacobian(
    X: npt.ArrayLike,
    Wq: npt.ArrayLike,
    Wk: npt.ArrayLike,
    Wv: npt.ArrayLike,
    nu: float,
    tau: float,
    eps: float,
    dps: int = DEFAULT_DPS,
    arithmetic: Arithmetic = MPMATH,
) -> np.ndarray:
    """``d vec(Y) / d vec(X)``, shape (N dv, N D), C order, by forward mode."""
    return _run(lambda: _jacobian(arithmetic, _Scs(arithmetic, X, Wq, Wk, Wv, nu, tau, eps)), dps)


# --------------------------------------------------------------------------------------
# Finite differences, to check the sweeps
# --------------------------------------------------------------------------------------


def directional_derivative(
    f: Callable[[np.ndarray], np.ndarray],
    X: npt.ArrayLike,
    V: npt.ArrayLike,
    h: float | mpmath.mpf,
    dps: int = 60,
) -> np.ndarray:
    """``(f(X + h V) - f(X - h V)) / (2 h)``, elementwise over ``f``'s object array.

    ``X`` and ``V`` are arrays of the same shape (floats taken exactly, mpf as they are);
    ``h`` is taken as an mpf. The points ``X +- h V`` are formed and the differences taken
    inside ``mpmath.workdps(dps)``; ``f`` receives an object array of mpf and must
    evaluate at least at ``dps`` digits (pass ``dps=dps`` to the references above).

    Error: the central difference of ``phi(t) = f(X + t V)`` errs by ``h^2 |phi'''| / 6``
    (Taylor with Lagrange remainder), and an evaluation error ``delta`` of ``f`` (and the
    rounding of the points, ``10^-dps |X|`` times ``|phi'|``) adds ``delta / h``: with
    ``dps = 60`` and ``h = 10^-25`` both are below ``10^-35`` times the size of ``phi`` and
    its derivatives, for the smooth, moderate cases the tests use.
    """
    check_dps(dps, MIN_DPS)
    with mpmath.workdps(dps):
        base = exact_array(X, "X", finite=True)
        direction = exact_array(V, "V", finite=True)
        if base.shape != direction.shape:
            raise ValueError(f"V: expected the shape of X, {base.shape}, got {direction.shape}")
        step = mpmath.mpf(h)
        plus = np.empty(base.shape, dtype=object)
        minus = np.empty(base.shape, dtype=object)
        for index in np.ndindex(base.shape):
            x, v = base[index], direction[index]
            plus[index], minus[index] = x + step * v, x - step * v
        upper, lower = np.asarray(f(plus), dtype=object), np.asarray(f(minus), dtype=object)
        out = np.empty(upper.shape, dtype=object)
        for index in np.ndindex(upper.shape):
            out[index] = (upper[index] - lower[index]) / (2 * step)
        return out
