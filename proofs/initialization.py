"""Proofs of the statements on backpropagation through ``W = X Y``, the activations of 003
and weight initialization (``derive/definitions/initialization.py``).

Everything here is exact: SymPy's matrix calculus for symbolic sizes, sums over symbolic
bounds (:func:`proofs.core.sum_identity`), exact Gaussian and uniform integrals with
symbolic variances, and exact integer arithmetic for the one sampled matrix (a NumPy float64
matrix is a matrix of binary rationals; a witness vector's Rayleigh quotient is computed
from them exactly).
"""

from __future__ import annotations

import hashlib
from fractions import Fraction
from functools import cache

import numpy as np
import sympy as sp
from flint import fmpz_mat

from derive.definitions import initialization as d
from proofs.core import is_zero, sum_identity, total
from proofs.spectral import settled

__all__ = [
    "FIGURE3_SEED",
    "WITNESS_SIZES",
    "XAVIER_SHAPES",
    "cayley",
    "concrete",
    "concrete_gradient",
    "cross_terms",
    "diagonal_only",
    "edge",
    "eye_gram_identity",
    "figure3_witness",
    "leaky_second_moment",
    "matrix_gradient",
    "mean_vanishes",
    "orthogonal_singular_values",
    "product_density_mean",
    "product_rule_remainder",
    "rayleigh_quotient",
    "substitution_integrand",
    "uniform_support_witness",
    "xavier_matrix",
]


# --- backpropagation through W = X Y --------------------------------------------------------


def matrix_gradient(wrt: sp.MatrixSymbol) -> sp.MatrixExpr:
    """``d tr(G^T X Y) / d wrt`` by SymPy's matrix calculus, for symbolic n, k, m."""
    return sp.diff(d.linearized_loss(), wrt)


def product_rule_remainder() -> bool:
    """``(X + dX)(Y + dY) - XY - (dX Y + X dY) = dX dY``, second order: ``dW = dX Y + X dY``
    to first order, for symbolic n, k, m."""
    dX, dY = sp.MatrixSymbol("dX", d.n, d.k), sp.MatrixSymbol("dY", d.k, d.m)
    rest = (d.X + dX) * (d.Y + dY) - d.X * d.Y - dX * d.Y - d.X * dY - dX * dY
    return sp.expand(rest).doit() == sp.ZeroMatrix(d.n, d.m)


def entry_gradient(wrt: str) -> sp.Expr:
    """``d/d X_pq`` (or ``Y_pq``) of ``sum_{a,b} G_ab sum_c X_ac Y_cb``, by ``sympy.diff`` of
    the sums over symbolic bounds (Kronecker deltas left in)."""
    entry = d.Xe[d.p_, d.q_] if wrt == "X" else d.Ye[d.p_, d.q_]
    return sp.diff(d.linearized_loss_entries(), entry)


def entry_identity(wrt: str, printed_entry: sp.Expr) -> bool:
    """The entrywise gradient equals ``printed_entry`` (a sum over one index) for every
    size (symbolic n, k, m)."""
    return sum_identity(entry_gradient(wrt), printed_entry)()


#: The concrete sizes (n, k, m) of the exact checks and counterexamples: non-square, so
#: that a transposed product has the wrong shape or none.
WITNESS_SIZES = (1, 2, 3)


def concrete(expr: sp.MatrixExpr, sizes: tuple[int, int, int]) -> sp.Matrix | None:
    """``expr`` at concrete sizes and integer matrices X, Y, G (None where the product is
    undefined)."""
    n, k, m = sizes
    values = {
        d.X: sp.Matrix(n, k, lambda i, j: i + 2 * j + 1),
        d.Y: sp.Matrix(k, m, lambda i, j: 3 * i - j + 2),
        d.G: sp.Matrix(n, m, lambda i, j: (-1) ** (i + j) * (i + j + 1)),
    }
    try:
        return sp.Matrix(expr.subs({d.n: n, d.k: k, d.m: m}).xreplace(values).doit())
    except (sp.ShapeError, ValueError, TypeError):
        return None


def concrete_gradient(wrt: sp.MatrixSymbol, sizes: tuple[int, int, int]) -> sp.Matrix:
    """``dL/dX`` (or ``dL/dY``) at the concrete matrices by ``sympy.diff`` of ``tr(G^T X Y)``
    entry by entry, X (or Y) left as symbols."""
    n, k, m = sizes
    rows, cols = (n, k) if wrt == d.X else (k, m)
    free = sp.Matrix(rows, cols, lambda i, j: sp.Symbol(f"e{i}{j}"))
    fixed = {s: concrete(s, sizes) for s in (d.X, d.Y, d.G) if s != wrt}
    Xv = free if wrt == d.X else fixed[d.X]
    Yv = free if wrt == d.Y else fixed[d.Y]
    loss = (fixed[d.G].T * Xv * Yv).trace()
    return free.applyfunc(lambda e: sp.diff(loss, e))


# --- the Xavier sums -------------------------------------------------------------------------


def cross_terms(size: int, mean: sp.Expr = d.mu_w) -> sp.Expr:
    """``E[y^2] - sigma_w^2 sum_i E[x_i^2]`` at a concrete ``size``, the double sum written
    out: ``mean^2 sum_i sum_j E[x_i x_j]``, which is 0 for every choice of the x's moments
    only when the weights' mean is 0."""
    second = d.output_second_moment(mean).subs(d.D_in, size).doit()
    diagonal = sum(d.sigma_w**2 * d.Exx[i, i] for i in range(1, size + 1))
    return sp.expand(second - diagonal)


def product_density_mean() -> sp.Expr:
    """003's ``iint x w p(x) p(w) dx dw`` for Gaussian densities of symbolic means m1, m2
    and variances: the exact double integral (it is ``m1 m2``, the product of the means)."""
    x, w = sp.symbols("x w", real=True)
    m1, m2 = sp.symbols("m1 m2", real=True)
    v1, v2 = sp.symbols("v1 v2", positive=True)
    px = sp.exp(-((x - m1) ** 2) / (2 * v1)) / sp.sqrt(2 * sp.pi * v1)
    pw = sp.exp(-((w - m2) ** 2) / (2 * v2)) / sp.sqrt(2 * sp.pi * v2)
    inner = sp.integrate(x * w * px * pw, (x, -sp.oo, sp.oo))
    return sp.simplify(sp.integrate(inner, (w, -sp.oo, sp.oo)))


def mean_vanishes() -> bool:
    """``E[y] = sum_{i=1}^{D_in} E[w_i] E[x_i]`` is 0 at ``E[w_i] = 0`` for a symbolic D_in
    (and is ``mu_w sum_i E[x_i]``, not 0 as such, for another mean)."""
    general = d.output_mean().doit()
    return (
        is_zero(d.output_mean(0).doit())
        and sum_identity(general, d.mu_w * total(d.Ex[d.i_], d.i_, d.D_in))()
    )


def diagonal_only() -> bool:
    """With ``E[w] = 0`` the cross terms vanish: ``E[y^2] = sigma_w^2 sum_i E[x_i^2]`` for
    every D_in, whatever the ``E[x_i x_j]`` (i != j) are."""
    i = d.i_
    return sum_identity(d.output_second_moment(0), d.sigma_w**2 * total(d.Exx[i, i], i, d.D_in))()


# --- Kaiming --------------------------------------------------------------------------------


def substitution_integrand() -> sp.Expr:
    """003's substitution ``u = z^2/(2s)`` in ``z p(z) dz`` (``z = sqrt(2 s u)``, ``dz =
    (s/z) du``): the integrand in u, simplified; 003 writes ``s e^{-u}/sqrt(2 pi s)``."""
    zu = sp.sqrt(2 * d.s * d.u)
    return sp.simplify((d.z * d.density()).subs(d.z, zu) * sp.diff(zu, d.u))


def leaky_second_moment(slope: sp.Expr = d.a) -> sp.Expr:
    """``E[leaky_relu(z)^2]`` for z ~ N(0, s), exactly: ``(1 + slope^2) s / 2``."""
    return sp.factor(d.expectation(d.leaky_relu(slope) ** 2))


# --- 001: the spectrum of a Xavier matrix (Figure 3) ---------------------------------------

#: Figure 3's (n_in, n_out).
XAVIER_SHAPES: tuple[tuple[int, int], ...] = ((1024, 1024), (1024, 2048), (2048, 2048))
#: The seed of the sampled 1024 x 1024 Gaussian Xavier matrix (NumPy's default_rng).
FIGURE3_SEED = 5


def edge(fan_in: sp.Expr = d.n_in, fan_out: sp.Expr = d.n_out) -> sp.Expr:
    """The limit of the largest singular value of an n_out x n_in matrix of i.i.d. entries
    of variance ``2/(n_in + n_out)`` (Bai and Yin 1993; Geman 1980): ``sqrt(2/(n_in +
    n_out)) (sqrt(n_in) + sqrt(n_out))``.

    >>> edge(1024, 1024), round(float(edge(1024, 2048)), 6)
    (2, 1.971197)
    """
    return sp.sqrt(sp.Integer(2) / (fan_in + fan_out)) * (sp.sqrt(fan_in) + sp.sqrt(fan_out))


def uniform_support_witness(fan_in: int, fan_out: int) -> sp.Expr:
    """``sigma_max(A) - r`` for Eq. 34's constant matrix ``A = (a/2) 1 1^T`` (half-width a)
    and ``r = a/2``: every matrix within Frobenius distance r of A has entries in (0, a),
    inside the support, and (Weyl) a largest singular value above ``sigma_max(A) - r =
    (a/2)(sqrt(n_in n_out) - 1)``. Exact."""
    half_width = d.XAVIER_HALF_WIDTH.subs({d.n_in: fan_in, d.n_out: fan_out})
    return sp.nsimplify(half_width / 2 * (sp.sqrt(fan_in * fan_out) - 1))


def xavier_matrix(fan_in: int, fan_out: int, seed: int) -> np.ndarray:
    """The standard normal n_out x n_in matrix ``Z`` of ``default_rng(seed)``: Eq. 35's
    sample is ``sqrt(2/(n_in + n_out)) Z``."""
    return np.random.default_rng(seed).standard_normal((fan_out, fan_in))


def _integers(values: np.ndarray) -> tuple[list[int], int]:
    """``values`` (float64) as integers ``N`` and a shift ``e`` with ``values = N 2^-e``,
    exactly."""
    mantissas, exponents = np.frexp(values)
    shift = int(53 - exponents.min())
    scaled = [
        int(mv * 2.0**53) << int(ev - 53 + shift)
        for mv, ev in zip(mantissas.ravel(), exponents.ravel(), strict=True)
    ]
    return scaled, shift


def rayleigh_quotient(matrix: np.ndarray, vector: np.ndarray) -> Fraction:
    """``|Z v|^2 / |v|^2`` exactly, for the float64 matrix Z and vector v (nonzero)."""
    entries, shift_z = _integers(matrix)
    coords, _ = _integers(vector)
    rows, cols = matrix.shape
    image = fmpz_mat(rows, cols, entries) * fmpz_mat(cols, 1, coords)
    image_sq = sum(int(e) ** 2 for e in image.entries())
    return Fraction(image_sq, sum(c * c for c in coords) << (2 * shift_z))


@cache
def figure3_witness(seed: int = FIGURE3_SEED, size: int = 1024) -> dict:
    """The sampled square Gaussian Xavier matrix and its certificate: the top right
    singular vector v from NumPy's SVD (float64, only proposed), rounded by
    :func:`proofs.spectral.settled` so that the last bits of the SVD (which vary with the
    BLAS's kernels and threads) do not reach the certificate, the exact Rayleigh quotient
    ``q = |Z v|^2/|v|^2`` of the stored Z, and the bound it gives,
    ``sigma_max(W)^2 >= s^2 q`` with ``s^2 = 2/(2 size) = 1/size``."""
    Z = xavier_matrix(size, size, seed)
    _, _, vt = np.linalg.svd(Z)
    q = rayleigh_quotient(Z, settled(vt[0]))
    return {
        "seed": seed,
        "shape": (size, size),
        "sha256": hashlib.sha256(Z.tobytes()).hexdigest(),
        "squared_lower_bound": q / size,
    }


# --- 001, Table 3: orthogonal initialization -----------------------------------------------


def cayley(size: int, offset: int = 1) -> sp.Matrix:
    """An exact rational orthogonal matrix: ``(I - A)(I + A)^{-1}`` for the skew-symmetric
    integer A with ``A_ij = i + j + offset`` above the diagonal."""
    A = sp.Matrix(size, size, lambda i, j: (i + j + offset) * sp.sign(j - i))
    identity = sp.eye(size)
    return (identity - A) * (identity + A).inv()


def orthogonal_singular_values(rows: int, cols: int, scale: sp.Expr = 1) -> set[sp.Expr]:
    """The singular values of ``W = U (scale eye(rows, cols)) V^T`` with exact orthogonal U
    (rows x rows) and V (cols x cols), exactly: the square roots of the eigenvalues of the
    smaller Gram matrix (``scale``: a test's wrong variant)."""
    U, V = cayley(rows, 1), cayley(cols, 2)
    if U.T * U != sp.eye(rows) or V.T * V != sp.eye(cols):
        raise ArithmeticError("the Cayley transform is not orthogonal")
    W = U * (scale * sp.eye(rows, cols)) * V.T
    gram = W * W.T if rows <= cols else W.T * W
    return {sp.sqrt(e) for e in sp.Matrix(gram).applyfunc(sp.nsimplify).eigenvals()}


def eye_gram_identity() -> bool:
    """``(E E^T)_ij = sum_{b=1}^{N} delta_ib delta_jb = delta_ij`` for i, j in 1..N and a
    symbolic N: for ``E = eye(M, N)`` with M <= N, ``E E^T = I_M``."""
    i, j = d.i_, d.j_
    b, size = (
        sp.Symbol("b", integer=True, positive=True),
        sp.Symbol("N", integer=True, positive=True),
    )
    return sum_identity(
        total(sp.KroneckerDelta(i, b) * sp.KroneckerDelta(j, b), b, size), sp.KroneckerDelta(i, j)
    )()
