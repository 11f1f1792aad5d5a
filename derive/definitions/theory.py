"""Definitions behind the statements about no single module: Adam's update, and the
scalar functions of 000's appendix and 002's notes on Lipschitz continuity and smoothness.

Adam (Kingma and Ba 2015; 001_76ce3a8a4b6079c3.txt, Algorithm 2): from ``m_0 = v_0 = 0``,

    m_t = beta1 m_{t-1} + (1 - beta1) g_t,    v_t = beta2 v_{t-1} + (1 - beta2) g_t^2,

and the update direction ``m_hat_t / sqrt(v_hat_t)`` with the bias corrections
``m_hat_t = m_t/(1 - beta1^t)``, ``v_hat_t = v_t/(1 - beta2^t)`` (PyTorch adds eps to the
square root; 0 here). Section 6.3 analyses ``mu_t = m_t / sqrt(v_t)``, without the
corrections; both are written here, one scalar coordinate at a time (Adam acts on each
coordinate alone).
"""

from __future__ import annotations

import sympy as sp

beta1 = sp.Symbol("beta_1", positive=True)
beta2 = sp.Symbol("beta_2", positive=True)
#: The previous moments and the new gradient of one step (section 6.3's single step).
m_prev = sp.Symbol("m_prev", real=True)
v_prev = sp.Symbol("v_prev", nonnegative=True)
g = sp.Symbol("g", real=True)


def step_update(first: sp.Expr = beta1, second: sp.Expr = beta2) -> sp.Expr:
    """Section 6.3's ``mu_t = (beta1 m_{t-1} + (1 - beta1) g_t) / sqrt(beta2 v_{t-1} +
    (1 - beta2) g_t^2)`` of one step."""
    return (first * m_prev + (1 - first) * g) / sp.sqrt(second * v_prev + (1 - second) * g**2)


def moments(gradients, first: sp.Expr = beta1, second: sp.Expr = beta2) -> tuple[sp.Expr, sp.Expr]:
    """``(m_t, v_t)`` after the gradients ``g_1 .. g_t`` from ``m_0 = v_0 = 0``."""
    m, v = sp.S.Zero, sp.S.Zero
    for gradient in gradients:
        m = first * m + (1 - first) * gradient
        v = second * v + (1 - second) * gradient**2
    return m, v


def update(gradients, first: sp.Expr = beta1, second: sp.Expr = beta2) -> sp.Expr:
    """Section 6.3's ``mu_t = m_t / sqrt(v_t)`` after ``gradients`` (no bias correction)."""
    m, v = moments(gradients, first, second)
    return m / sp.sqrt(v)


def corrected_update(gradients, first: sp.Expr = beta1, second: sp.Expr = beta2) -> sp.Expr:
    """Adam's ``m_hat_t / sqrt(v_hat_t)`` after ``gradients`` (Algorithm 2 with the square
    root, PyTorch's direction at eps = 0)."""
    t = len(gradients)
    m, v = moments(gradients, first, second)
    return (m / (1 - first**t)) / sp.sqrt(v / (1 - second**t))


def update_bound(first: sp.Expr = beta1, second: sp.Expr = beta2) -> sp.Expr:
    """The printed bound on ``|mu_t|``: ``(1 - beta1) / sqrt(1 - beta2)``."""
    return (1 - first) / sp.sqrt(1 - second)


def largest_update(steps: sp.Expr, first: sp.Expr = beta1, second: sp.Expr = beta2) -> sp.Expr:
    """``sup |mu_t|`` over every gradient sequence of ``steps`` steps: ``(1 - beta1) /
    sqrt(1 - beta2)`` times ``sqrt(sum_{k < t} r^k)``, ``r = beta1^2 / beta2``
    (Cauchy-Schwarz; attained by ``g_i = (beta1/beta2)^(t - i)``)."""
    k = sp.Symbol("k", integer=True, nonnegative=True)
    ratio = first**2 / second
    return update_bound(first, second) * sp.sqrt(sp.Sum(ratio**k, (k, 0, steps - 1)))


#: 000's appendix: f(x) = x^2 (smooth, not Lipschitz) and (1/2) arcsin x + (1/2) x
#: sqrt(1 - x^2) on [-1, 1] (Lipschitz, not smooth).
x = sp.Symbol("x", real=True)
SQUARE = x**2
ARCSIN = sp.asin(x) / 2 + x * sp.sqrt(1 - x**2) / 2
#: 002: the hinge loss of a margin z, max(0, 1 - z).
HINGE = sp.Max(0, 1 - x)
