"""Definitions behind the sources' statements on backpropagation through a product, the
activations of 003, and weight initialization.

Backpropagation (003_54d3154625e0c3ca.txt, first page). ``W = X Y`` with ``X`` of shape
(n, k) and ``Y`` of shape (k, m), symbolic sizes; the loss L depends on ``X`` and ``Y``
through ``W`` only, and ``G = dL/dW`` (shape (n, m), same layout as ``W``) is known. To first
order ``dL = <G, dW> = tr(G^T dW)``, so the gradient with respect to ``X`` is the derivative
of the linear function ``tr(G^T X Y)`` of ``X``; entrywise
``W_ab = sum_{c=1}^{k} X_ac Y_cb`` and ``dL/dX_pq = sum_{a,b} G_ab dW_ab/dX_pq``.

Activations of 003: ``sigma(z) = 1/(1 + exp(-z))``, ``tanh`` as 003 writes it through
exponentials, ``ReLU(z) = max(0, z)``. "Zero centered" is read as: the function is odd,
``f(-z) = -f(z)`` (its range is symmetric about 0, and its mean over any input distribution
symmetric about 0 is 0).

Initialization. 003's Xavier part writes ``sigma`` for the standard deviation of a weight
(``Var(w_i) = sigma^2``); its Kaiming part writes ``sigma`` for the *variance* of the
pre-activation z (``p(z) = exp(-z^2/(2 sigma))/sqrt(2 pi sigma)``). Here the first is
``sigma_w`` (:data:`sigma_w`) and the second ``s`` (:data:`s`), so neither is read as the
other. 001 (section 3.4, Eq. 34-35; Table 3) writes ``n_in``, ``n_out`` and the leaky
ReLU's slope ``a``.
"""

from __future__ import annotations

import sympy as sp

# --- backpropagation through W = X Y -----------------------------------------------------

#: The symbolic sizes of X (n x k), Y (k x m) and W = X Y (n x m).
n, k, m = sp.symbols("n k m", integer=True, positive=True)
X = sp.MatrixSymbol("X", n, k)
Y = sp.MatrixSymbol("Y", k, m)
#: The known upstream gradient dL/dW.
G = sp.MatrixSymbol("G", n, m)

#: Entries and indices of the same statement written as sums over symbolic bounds.
Xe, Ye, Ge = (sp.IndexedBase(name, real=True) for name in ("X", "Y", "G"))
a_, b_, c_, p_, q_ = sp.symbols("a b c p q", integer=True, positive=True)


def linearized_loss() -> sp.Expr:
    """``tr(G^T X Y)``: the first-order change of L is this function's change (``dL =
    <G, dW>`` with ``dW = dX Y + X dY``)."""
    return sp.Trace(G.T * X * Y)


def linearized_loss_entries() -> sp.Expr:
    """``sum_{a=1}^{n} sum_{b=1}^{m} G_ab W_ab`` with ``W_ab = sum_{c=1}^{k} X_ac Y_cb``."""
    product = sp.Sum(Xe[a_, c_] * Ye[c_, b_], (c_, 1, k))
    return sp.Sum(sp.Sum(Ge[a_, b_] * product, (b_, 1, m)), (a_, 1, n))


# --- the activations of 003 ----------------------------------------------------------------

z = sp.Symbol("z", real=True)
SIGMOID = 1 / (1 + sp.exp(-z))
#: tanh as 003 writes it.
TANH_003 = (sp.exp(z) - sp.exp(-z)) / (sp.exp(z) + sp.exp(-z))
RELU = sp.Max(0, z)
#: 003's three activations, in the order of its "zero centered" remarks.
ACTIVATIONS_003: tuple[tuple[str, sp.Expr], ...] = (
    ("sigmoid", SIGMOID),
    ("tanh", sp.tanh(z)),
    ("relu", RELU),
)


# --- Xavier: y = sum_{i=1}^{D_in} w_i x_i ---------------------------------------------------

#: The fan-in, a symbolic size.
D_in = sp.Symbol("D_in", integer=True, positive=True)
#: 003's Xavier sigma: the standard deviation of each weight.
sigma_w = sp.Symbol("sigma_w", positive=True)
#: The mean of each weight (0 in the notes; kept free to show what it does).
mu_w = sp.Symbol("mu_w", real=True)
#: Var[x_i] (all i).
V = sp.Symbol("V", positive=True)
#: E[x_i] and E[x_i x_k]: any means and second moments; the x_i need not be independent.
Ex = sp.IndexedBase("m", real=True)
Exx = sp.IndexedBase("C", real=True)
i_, j_ = sp.symbols("i j", integer=True, positive=True)


def weight_moment(i: sp.Expr, j: sp.Expr, mean: sp.Expr = mu_w) -> sp.Expr:
    """``E[w_i w_j]`` for i.i.d. weights of mean ``mean`` and variance ``sigma_w^2``:
    ``sigma_w^2 + mean^2`` on the diagonal, ``mean^2`` off it (independence)."""
    return sigma_w**2 * sp.KroneckerDelta(i, j) + mean**2


def output_mean(mean: sp.Expr = mu_w) -> sp.Expr:
    """``E[y] = sum_i E[w_i] E[x_i]`` (w independent of x)."""
    return sp.Sum(mean * Ex[i_], (i_, 1, D_in))


def output_second_moment(mean: sp.Expr = mu_w) -> sp.Expr:
    """``E[y^2] = sum_i sum_j E[w_i w_j] E[x_i x_j]`` (w independent of x)."""
    return sp.Sum(sp.Sum(weight_moment(i_, j_, mean) * Exx[i_, j_], (j_, 1, D_in)), (i_, 1, D_in))


# --- Kaiming: z ~ N(0, s), h = ReLU(z) ------------------------------------------------------

#: The variance of z (003's Kaiming sigma).
s = sp.Symbol("s", positive=True)
#: 003's substitution variable u = z^2 / (2 s).
u = sp.Symbol("u", positive=True)


def density(variance: sp.Expr = s) -> sp.Expr:
    """The N(0, variance) density of z, as 003 writes it with sigma for the variance."""
    return sp.exp(-(z**2) / (2 * variance)) / sp.sqrt(2 * sp.pi * variance)


def expectation(f: sp.Expr, variance: sp.Expr = s) -> sp.Expr:
    """``E[f(z)]`` for z ~ N(0, variance): the exact integral over R, split at the kink 0
    (``f`` may be a Max or a Piecewise in z).

    >>> expectation(RELU**2), expectation(z**4)
    (s/2, 3*s**2)
    """
    p = density(variance)
    # z = -u and z = u with u > 0: Max and Piecewise in z decide their branch on each half
    below = sp.integrate(f.subs(z, -u) * p.subs(z, -u), (u, 0, sp.oo))
    above = sp.integrate(f.subs(z, u) * p.subs(z, u), (u, 0, sp.oo))
    return sp.simplify(below + above)


#: The leaky ReLU's negative slope (001, Table 3: "a is the slope of the non-linearity").
a = sp.Symbol("a", real=True)


def leaky_relu(slope: sp.Expr = a) -> sp.Expr:
    """``z`` for z > 0 and ``slope * z`` for z <= 0 (PyTorch's LeakyReLU; slope 0 is ReLU)."""
    return sp.Piecewise((z, z > 0), (slope * z, True))


# --- 001: Xavier's two types and Table 3 ----------------------------------------------------

n_in = sp.Symbol("n_in", integer=True, positive=True)
n_out = sp.Symbol("n_out", integer=True, positive=True)
#: The number of layers of the depth-aware initialization.
L = sp.Symbol("L", integer=True, positive=True)
w = sp.Symbol("w", real=True)


def uniform_variance(half_width: sp.Expr) -> sp.Expr:
    """The variance of U(-half_width, half_width): the exact integral of ``w^2`` against
    the density ``1/(2 half_width)`` (its mean is 0 by the same integral of ``w``).

    >>> uniform_variance(XAVIER_HALF_WIDTH)
    2/(n_in + n_out)
    """
    return sp.integrate(w**2 / (2 * half_width), (w, -half_width, half_width))


#: Eq. 34's half-width and Eq. 35's variance.
XAVIER_HALF_WIDTH = sp.sqrt(6 / (n_in + n_out))
XAVIER_VARIANCE = 2 / (n_in + n_out)
