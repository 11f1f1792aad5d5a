r"""BatchNorm in SymPy: the forward in both denominators of the sources, its derivation by
the chain rule, and the closed forms the kernels use.

One feature at a time: BatchNorm normalizes each feature j over the batch (the M = N rows of
an (N, D) input, or the N*H*W positions of channel j of an (N, C, H, W) input), so its
Jacobian is block diagonal, one M x M block per feature, and everything below is about one
feature's column x = (x_1, ..., x_M):

    mu = mean(x),  var = mean((x - mu)^2)  (biased, 1/M),  sigma = sqrt(var)
    "sqrt_var_eps" (001 Eq. 15, 000, 002, PyTorch):  xhat = (x - mu) / sqrt(var + eps)
    "std_plus_eps" (004 Definition 17):              xhat = (x - mu) / (sigma + eps)
    y = gamma xhat + beta

The kernels use, with d_k = x_k - mu, r the scale (1/sqrt(var + eps) or 1/(sigma + eps)),
a = gamma g, m_a = mean(a), m_ad = mean(a d) and the sigma-path weight w (r^2, or r/sigma):

    dx_k = r (a_k - m_a - d_k w m_ad),   dgamma = sum_k g_k d_k r,   dbeta = sum_k g_k
    J_kl = gamma r (delta_kl - 1/M - d_k d_l w / M)

For "std_plus_eps" at var = 0 the factor r/sigma is infinite but d = 0: y is still
differentiable there (d sigma is O(|d|^2)) with J = gamma (I - 11^T/M) / eps, so the
kernels take w = 0 when var = 0 -- the value the closed form tends to.

:func:`derivation` builds the chain rule through xhat, mu and sigma step by step (for the
report), and :func:`closed_form_proof` proves the closed forms equal to ``sympy.diff`` of
the forward at M = 1..5.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cache

import sympy as sp

from derive.definitions.norms import (
    PROOF_SIZES,
    beta_i,
    d,
    d_j,
    delta,
    eps,
    g_i,
    gamma_i,
    m_a,
    r,
    s,
    substituted,
    sum_statistics,
    vector,
)
from proofs.core import SIZE, Proof, Step, is_zero, sum_identity, total

#: The batch size M (rows, or N*H*W positions) of one feature.
m = sp.Symbol("M", positive=True, integer=True)
#: mean(gamma g d) over the batch.
m_ad = sp.Symbol("m_ad", real=True)
#: The weight of the sigma path in the VJP: r^2 or r/sigma.
w = sp.Symbol("w", nonnegative=True)

DENOMS = ("sqrt_var_eps", "std_plus_eps")


@dataclass(frozen=True)
class BatchNormForm:
    """One of the two denominators: scale r(s, eps), sigma-path weight w(s, eps, r)."""

    denom: str
    title: str
    source: str
    scale: sp.Expr
    weight: sp.Expr

    @property
    def output(self) -> sp.Expr:
        return gamma_i * d * r + beta_i

    @property
    def vjp(self) -> sp.Expr:
        return r * (gamma_i * g_i - m_a - d * w * m_ad)

    @property
    def dgamma_term(self) -> sp.Expr:
        return g_i * d * r

    @property
    def jacobian_entry(self) -> sp.Expr:
        return gamma_i * r * (delta - 1 / m - d * d_j * w / m)

    def normalize(self, xs: sp.Matrix) -> tuple[sp.Expr, sp.Expr, sp.Matrix]:
        """(mu, var, xhat) of one feature's column, by the definition."""
        size = len(xs)
        mu = sum(xs) / size
        var = sum((v - mu) ** 2 for v in xs) / size
        return mu, var, (xs - sp.ones(size, 1) * mu) / denominator(self.denom, var)

    def forward(self, size: int) -> tuple[sp.Matrix, sp.Symbol, sp.Symbol, sp.Matrix]:
        """(x, gamma, beta, y) for one feature with a batch of ``size``."""
        xs = vector("x", size)
        gamma, beta = sp.Symbol("gamma", real=True), sp.Symbol("beta", real=True)
        _, _, xhat = self.normalize(xs)
        return xs, gamma, beta, gamma * xhat + beta * sp.ones(size, 1)

    def closed_forms(self, size: int, g: sp.Matrix) -> dict[str, sp.Matrix]:
        xs, gamma, beta, _ = self.forward(size)
        mu, var, _ = self.normalize(xs)
        deviations = [v - mu for v in xs]
        scale = self.scale.subs({s: var}, simultaneous=True)
        weight = sp.S.Zero if var == 0 else self.weight.subs({s: var, r: scale})
        a = [gamma * g[k] for k in range(size)]
        means = {
            m_a: sum(a) / size,
            m_ad: sum(a[k] * deviations[k] for k in range(size)) / size,
        }

        def at(expr: sp.Expr, k: int, col: int | None = None) -> sp.Expr:
            values = {
                d: deviations[k],
                r: scale,
                w: weight,
                gamma_i: gamma,
                beta_i: beta,
                g_i: g[k],
                m: size,
                **means,
            }
            if col is not None:
                values |= {d_j: deviations[col], delta: 1 if k == col else 0}
            return substituted(expr, values)

        return {
            "output": sp.Matrix([at(self.output, k) for k in range(size)]),
            "vjp": sp.Matrix([at(self.vjp, k) for k in range(size)]),
            "dgamma": sp.Matrix([sum(at(self.dgamma_term, k) for k in range(size))]),
            "jacobian": sp.Matrix(size, size, lambda k, col: at(self.jacobian_entry, k, col)),
        }


SQRT_VAR_EPS = BatchNormForm(
    denom="sqrt_var_eps",
    title="BatchNorm (sqrt(var + eps))",
    source="001_76ce3a8a4b6079c3.txt, Eq. 15; 000 and 002 (the algorithm); PyTorch",
    scale=1 / sp.sqrt(s + eps),
    weight=r**2,
)
STD_PLUS_EPS = BatchNormForm(
    denom="std_plus_eps",
    title="BatchNorm (std + eps)",
    source="004_a581282367ea7257.txt, Definition 17 and B.43",
    scale=1 / (sp.sqrt(s) + eps),
    weight=r / sp.sqrt(s),
)

FORMS = {f.denom: f for f in (SQRT_VAR_EPS, STD_PLUS_EPS)}


def form(denom: str) -> BatchNormForm:
    if denom not in FORMS:
        raise KeyError(f"denom: expected one of {list(FORMS)}, got {denom!r}")
    return FORMS[denom]


def _zero(matrix: sp.Matrix) -> bool:
    return all(is_zero(e) for e in matrix)


@cache
def batchnorm_checks(denom: str, size: int) -> dict[str, bool]:
    """The closed forms against sympy.diff of the forward, one feature, batch ``size``.

    For "std_plus_eps" the symbolic derivative holds where var > 0 (sqrt(var) is not
    differentiable at 0 on its own); at size 1 the variance is identically 0 and both sides
    use w = 0.
    """
    f = form(denom)
    xs, gamma, beta, y = f.forward(size)
    g = vector("g", size)
    forms = f.closed_forms(size, g)
    jacobian = y.jacobian(xs)
    objective = (g.T * y)[0]
    return {
        "output": _zero(forms["output"] - y),
        "jacobian": _zero(forms["jacobian"] - jacobian),
        "vjp": _zero(forms["vjp"] - jacobian.T * g),
        "dgamma": is_zero(forms["dgamma"][0] - sp.diff(objective, gamma)),
        "dbeta": is_zero(sum(g) - sp.diff(objective, beta)),
    }


@cache
def output_matches(denom: str, size: int) -> bool:
    """The kernel's output stage equals the forward, one feature, batch ``size``."""
    f = form(denom)
    _, _, _, y = f.forward(size)
    return _zero(f.closed_forms(size, vector("g", size))["output"] - y)


def denominator(denom: str, var: sp.Expr) -> sp.Expr:
    """The normalization's denominator for a variance ``var``: sqrt(var + eps), or
    sqrt(var) + eps for "std_plus_eps"."""
    return sp.sqrt(var + eps) if denom == "sqrt_var_eps" else sp.sqrt(var) + eps


@cache
def symbolic_batchnorm_checks(denom: str, closed: BatchNormForm | None = None) -> dict[str, bool]:
    """The closed forms of one denominator (``closed``, by default the kernel's) against
    sympy.diff of that denominator's forward for a symbolic batch size M (written
    ``proofs.core.SIZE`` in the sums): entries k, c of one feature's column with its mean
    and variance as sums over the batch. For "std_plus_eps" the identities hold where the
    variance is positive, as at fixed M."""
    f = closed or form(denom)
    size = SIZE
    k, c, q = sp.symbols("a b q", integer=True, positive=True)
    x, g = sp.IndexedBase("x", real=True), sp.IndexedBase("g", real=True)
    gamma, beta = sp.Symbol("gamma", real=True), sp.Symbol("beta", real=True)
    mean, var = sum_statistics(x)

    def y(t):
        return gamma * (x[t] - mean) / denominator(denom, var) + beta

    scale = f.scale.subs(s, var)
    weight = f.weight.subs({s: var, r: scale}, simultaneous=True)
    means = {
        m_a: total(gamma * g[q], q) / size,
        m_ad: total(gamma * g[q] * (x[q] - mean), q) / size,
    }
    values = {
        d: x[k] - mean,
        d_j: x[c] - mean,
        r: scale,
        w: weight,
        gamma_i: gamma,
        beta_i: beta,
        g_i: g[k],
        delta: sp.KroneckerDelta(k, c),
        m: size,
        **means,
    }

    def at(expr: sp.Expr) -> sp.Expr:
        return substituted(expr, values)

    objective = total(g[c] * y(c), c)
    return {
        "output": sum_identity(at(f.output), y(k))(),
        "jacobian": sum_identity(at(f.jacobian_entry), sp.diff(y(k), x[c]))(),
        "vjp": sum_identity(at(f.vjp), total(sp.diff(y(c), x[k]) * g[c], c))(),
        "dgamma": sum_identity(
            total(at(f.dgamma_term).xreplace({k: c}), c), sp.diff(objective, gamma)
        )(),
    }


def closed_form_proof(denom: str) -> Proof:
    """The kernel's closed forms of one denominator, proven equal to sympy.diff for a
    symbolic batch size M (Jacobian, VJP, dgamma) and at M = 1..5 (all five forms)."""
    steps = [
        Step(
            statement=(
                f"every batch size M (symbolic M): the kernel's {name} equals sympy.diff of the "
                f"forward, {what}, with the feature's mean and variance as sums over the batch"
                + (" (where the variance is positive)" if denom == "std_plus_eps" else "")
            ),
            method="symbolic identity",
            check=lambda k=name: symbolic_batchnorm_checks(denom)[k],
        )
        for name, what in (
            ("jacobian", "entry (k, c)"),
            ("vjp", "entry k of J^T g"),
            ("dgamma", "the sum over the batch of g_k d_k r"),
        )
    ]
    for size in PROOF_SIZES:
        for name in ("output", "jacobian", "vjp", "dgamma", "dbeta"):
            steps.append(
                Step(
                    statement=(
                        f"M = {size}: the kernel's {name} equals "
                        + ("the forward" if name == "output" else "sympy.diff of the forward")
                    ),
                    method="symbolic identity",
                    check=lambda s_=size, k=name: batchnorm_checks(denom, s_)[k],
                )
            )
    return Proof(
        claim=f"{form(denom).title}: closed forms equal the derivatives", steps=tuple(steps)
    )


# --- the running statistics -------------------------------------------------------------

#: The running statistics before an update, the batch's mean and biased variance (of M
#: values) and the weight ``keep`` the running values keep: PyTorch's ``momentum`` is
#: ``1 - keep`` (003 calls ``keep`` m).
mu_run = sp.Symbol("mu_run", real=True)
var_run = sp.Symbol("sigma2_run", nonnegative=True)
mu_batch = sp.Symbol("mu_batch", real=True)
var_batch = sp.Symbol("sigma2_batch", nonnegative=True)
keep = sp.Symbol("m", positive=True)


def running_update(size: sp.Expr = m) -> sp.Tuple:
    """(new running mean, new running variance) as PyTorch's ``nn.BatchNorm`` computes them
    in training mode (and ``kernels.batchnorm.running_update``): ``(1 - momentum) running +
    momentum batch`` with the batch variance unbiased, ``size/(size - 1)`` times the biased
    one the batch is normalized with."""
    return sp.Tuple(
        keep * mu_run + (1 - keep) * mu_batch,
        keep * var_run + (1 - keep) * size / (size - 1) * var_batch,
    )


# --- the chain rule through xhat, mu and sigma, step by step ------------------------------

#: Generic symbols of the derivation: entries x_k, x_j of one feature, its mean and spread.
x_k, x_j = sp.symbols("x_k x_j", real=True)
mu = sp.Symbol("mu", real=True)
sigma = sp.Symbol("sigma", positive=True)  # the biased standard deviation
sigma2 = sp.Symbol("sigma^2", positive=True)  # the biased variance
delta_jk = sp.Symbol("delta_jk", nonnegative=True)


@dataclass(frozen=True)
class Derivation:
    """The partial derivatives of one path each, and what they assemble to.

    ``spread`` is the statistic the denominator is written in (sigma^2 for sqrt_var_eps,
    sigma for std_plus_eps); ``xhat`` is x_k's normalized value in the generic symbols.
    """

    denom: str
    spread: sp.Symbol
    xhat: sp.Expr
    by_x: sp.Expr  # d xhat_k / d x_k (mu and the spread held fixed)
    by_mu: sp.Expr  # d xhat_k / d mu
    by_spread: sp.Expr  # d xhat_k / d spread
    x_by_x: sp.Expr  # d x_k / d x_j = delta_jk
    mu_by_x: sp.Expr  # d mu / d x_j
    spread_by_x: sp.Expr  # d spread / d x_j (its mu-path contributes sum(x - mu) = 0)
    assembled: sp.Expr  # d xhat_k / d x_j

    def entry(self, x: sp.IndexedBase, k: sp.Symbol, j: sp.Symbol) -> sp.Expr:
        """``assembled`` at entries k, j of a column ``x`` of symbolic size M
        (``proofs.core.SIZE``), its mean and variance as sums over the batch."""
        mean, var = sum_statistics(x)
        return self.assembled.subs(
            {
                x_k: x[k],
                x_j: x[j],
                mu: mean,
                self.spread: var if self.spread == sigma2 else sp.sqrt(var),
                delta_jk: sp.KroneckerDelta(k, j),
                m: SIZE,
            },
            simultaneous=True,
        )

    def substitute(self, xs: sp.Matrix, k: int, j: int) -> sp.Expr:
        """``assembled`` at batch entries k, j of the column ``xs`` (statistics substituted)."""
        size = len(xs)
        mean = sum(xs) / size
        var = sum((v - mean) ** 2 for v in xs) / size
        spread = var if self.spread == sigma2 else sp.sqrt(var)
        return substituted(
            self.assembled,
            {
                x_k: xs[k],
                x_j: xs[j],
                mu: mean,
                self.spread: spread,
                delta_jk: 1 if j == k else 0,
                m: size,
            },
        )


@cache
def derivation(denom: str) -> Derivation:
    """The chain rule through xhat, mu and the spread, each partial by ``sympy.diff``."""
    spread = sigma2 if denom == "sqrt_var_eps" else sigma
    xhat = (x_k - mu) / (sp.sqrt(sigma2 + eps) if denom == "sqrt_var_eps" else sigma + eps)
    by_x, by_mu, by_spread = (sp.diff(xhat, v) for v in (x_k, mu, spread))
    x_by_x = delta_jk
    mu_by_x = 1 / m
    spread_by_x = 2 * (x_j - mu) / m if denom == "sqrt_var_eps" else (x_j - mu) / (m * sigma)
    assembled = by_x * x_by_x + by_mu * mu_by_x + by_spread * spread_by_x
    return Derivation(
        denom, spread, xhat, by_x, by_mu, by_spread, x_by_x, mu_by_x, spread_by_x, assembled
    )


@cache
def symbolic_derivation_matches(denom: str) -> bool:
    """:func:`derivation_matches` for a symbolic batch size M (``proofs.core.SIZE``): the
    assembled chain rule at entries (k, j) equals sympy.diff of xhat_k with the feature's
    mean and variance written as sums over the batch (for "std_plus_eps" where the
    variance is positive, as at fixed M)."""
    k, j = sp.symbols("a b", integer=True, positive=True)
    x = sp.IndexedBase("x", real=True)
    mean, var = sum_statistics(x)
    xhat = (x[k] - mean) / denominator(denom, var)
    return sum_identity(derivation(denom).entry(x, k, j), sp.diff(xhat, x[j]))()


@cache
def symbolic_statistic_partial(which: str, factor: int = 1) -> bool:
    """For a symbolic batch size M: d mu/dx_j = 1/M (``which`` = "mu"), or d sigma/dx_j =
    (x_j - mu)/(M sigma) for the biased standard deviation ("sigma", sigma > 0). ``factor``
    scales the claimed right-hand side (a test's false variant)."""
    j = sp.Symbol("b", integer=True, positive=True)
    x = sp.IndexedBase("x", real=True)
    mean, var = sum_statistics(x)
    if which == "mu":
        return sum_identity(sp.diff(mean, x[j]), factor / SIZE)()
    spread = sp.sqrt(var)
    return sum_identity(sp.diff(spread, x[j]), factor * (x[j] - mean) / (SIZE * spread))()


@cache
def symbolic_gradient_matches(which: str) -> bool:
    """:func:`proofs.batchnorm.gradient_matches` for a symbolic batch size M: with the loss
    sum_c g_c y_c of the std + eps form, ``dbeta`` = sum_c g_c, ``dgamma`` = sum_c g_c
    xhat_c, and ``dx`` = sum_c g_c gamma (the assembled chain rule at (c, j)) equal
    sympy.diff of the loss (where the variance is positive)."""
    c, j = sp.symbols("a b", integer=True, positive=True)
    x, g = sp.IndexedBase("x", real=True), sp.IndexedBase("g", real=True)
    gamma, beta = sp.Symbol("gamma", real=True), sp.Symbol("beta", real=True)
    mean, var = sum_statistics(x)

    def xhat(t):
        return (x[t] - mean) / denominator("std_plus_eps", var)

    loss = total(g[c] * (gamma * xhat(c) + beta), c)
    if which == "dbeta":
        return sum_identity(sp.diff(loss, beta), total(g[c], c))()
    if which == "dgamma":
        return sum_identity(sp.diff(loss, gamma), total(g[c] * xhat(c), c))()
    entry = derivation("std_plus_eps").entry(x, c, j)
    return sum_identity(total(g[c] * gamma * entry, c), sp.diff(loss, x[j]))()


@cache
def derivation_matches(denom: str, size: int) -> bool:
    """The assembled chain rule equals sympy.diff of xhat at every entry (k, j), size M."""
    f = form(denom)
    xs = vector("x", size)
    _, var, xhat = f.normalize(xs)
    steps = derivation(denom)
    for k in range(size):
        for j in range(size):
            truth = sp.diff(xhat[k], xs[j])
            if denom == "std_plus_eps" and var == 0:
                continue  # sigma = 0 identically: the spread path is absent (M = 1)
            if not is_zero(steps.substitute(xs, k, j) - truth):
                return False
    return True
