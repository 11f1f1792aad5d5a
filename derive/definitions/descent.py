"""Definitions behind the statements about Lipschitz continuity, smoothness, gradient descent
and SGD (topics ``lipschitz_foundations`` and ``descent``).

Notation, mapped onto one set of symbols (the report's table says which source writes
which):

- a function is ``K``-Lipschitz when ``|f(y) - f(x)| <= K ||y - x||_2`` for all x, y
  (001's ``K_0``, 000's and 002's ``L``), and ``beta``-smooth when its gradient is
  ``beta``-Lipschitz (001's ``K_1``, 000's, 002's and 003's ``beta``);
- gradient descent steps ``x_{t+1} = x_t - eta grad f(x_t)`` (003's ``eta``; its first page
  and 002 write ``alpha``); SGD replaces the gradient by an unbiased estimate whose mean
  square is at most ``G`` (003).

Vectors of a symbolic size D are ``IndexedBase`` entries summed with
:func:`proofs.core.total`; the examples are plain SymPy expressions.
"""

from __future__ import annotations

import sympy as sp

from proofs.core import INDICES, SIZE, total

#: Lipschitz constants, step size, the bound G on E||g~||^2, steps T, and the per-step
#: quantities of the SGD chain (values of f and squared gradient norms).
K = sp.Symbol("K", nonnegative=True)
beta = sp.Symbol("beta_f", positive=True)
eta = sp.Symbol("eta", positive=True)
G = sp.Symbol("G", nonnegative=True)
T = sp.Symbol("T", integer=True, positive=True)
#: ``||grad f(x_t)||^2``: a nonnegative number.
grad_sq = sp.Symbol("g2", nonnegative=True)

x = sp.Symbol("x", real=True)
#: Entries of vectors of symbolic size D (gradient a, points x and y, direction v).
a_vec = sp.IndexedBase("a", real=True)
x_vec = sp.IndexedBase("x", real=True)
y_vec = sp.IndexedBase("y", real=True)
v_vec = sp.IndexedBase("v", real=True)


def dot(u: sp.IndexedBase, w: sp.IndexedBase) -> sp.Expr:
    """``<u, w> = sum_{i=1}^D u_i w_i`` for a symbolic size D."""
    i = INDICES[0]
    return total(u[i] * w[i], i)


def norm_sq(u: sp.IndexedBase) -> sp.Expr:
    """``||u||_2^2`` for a symbolic size D."""
    return dot(u, u)


def diff_norm_sq(u: sp.IndexedBase, w: sp.IndexedBase) -> sp.Expr:
    """``||u - w||_2^2`` for a symbolic size D."""
    i = INDICES[0]
    return total((u[i] - w[i]) ** 2, i)


def quadratic(b: sp.Expr, point: sp.IndexedBase) -> sp.Expr:
    """``(b/2) ||point||^2``: b-smooth with gradient ``b * point``, the equality case of
    Lemma 3.1 and of the descent step."""
    return b / 2 * norm_sq(point)


#: 001's Example 1: c, a^T x + 1 and x^T x + 2 on R^D.
c = sp.Symbol("c", real=True)
CONSTANT = c
LINEAR_AFFINE = dot(a_vec, x_vec) + 1
SQUARED_NORM = norm_sq(x_vec) + 2

#: ReLU, the example of a Lipschitz function that is not differentiable (001, after Eq. 4).
RELU = sp.Max(0, x)


def gd_step(f: sp.Expr, point: sp.Expr, step: sp.Expr) -> sp.Expr:
    """One gradient descent step ``point - step f'(point)`` on a scalar f of ``x``."""
    return point - step * sp.diff(f, x).subs(x, point)


def descent_coefficient(step: sp.Expr = eta, b: sp.Expr = beta) -> sp.Expr:
    """003's bracket ``eta - beta eta^2 / 2``: the guaranteed decrease per unit of
    ``||grad f||^2``."""
    return step - b * step**2 / 2


def sgd_min_bound(f_gap: sp.Expr, step: sp.Expr = eta, steps: sp.Expr = T) -> sp.Expr:
    """003's bound on ``min_t E||grad f(x_t)||^2``: ``(f_0 - f*)/(eta T) + beta eta G / 2``."""
    return f_gap / (step * steps) + beta * step * G / 2


#: The size symbol of the vectors (re-exported for the proofs' statements).
D = SIZE
