r"""Proofs for the BatchNorm statements of the sources.

Printed formulas are SymPy expressions in the generic symbols of
:mod:`derive.definitions.batchnorm` (one feature: entries ``x_k``, ``x_j``, mean ``mu``, biased
``sigma`` or ``sigma^2``, batch size ``M``, ``delta_jk``); the notes' ``Z_ik, Z_ij, K,
\mu_i, \sigma_i`` and 001's ``X_{j,i}, N`` map onto them. A printed formula is compared
with the derived one (the chain rule of :func:`derive.definitions.batchnorm.derivation`, itself
proven equal to ``sympy.diff`` of the forward at M = 1..5): equal is a symbolic identity;
different is shown by an exact point where they differ.
"""

from __future__ import annotations

from functools import cache

import sympy as sp

from derive.definitions import batchnorm as bn
from derive.definitions.norms import PROOF_SIZES, eps, sum_statistics, vector
from proofs.core import SIZE, Proof, Step, is_zero, sum_identity, total

#: The exact point where printed and derived formulas are compared when they differ.
PROBE = {
    bn.x_k: sp.Integer(1),
    bn.x_j: sp.Integer(3),
    bn.mu: sp.Rational(1, 2),
    bn.sigma: sp.Integer(2),
    bn.sigma2: sp.Integer(4),
    eps: sp.Rational(1, 10),
    bn.m: sp.Integer(3),
    sp.Symbol("gamma"): sp.Integer(2),
    sp.Symbol("beta"): sp.Rational(1, 2),
}


def derivation_step(denom: str) -> Step:
    return Step(
        statement=(
            "the chain rule through xhat, mu and "
            + ("sigma^2" if denom == "sqrt_var_eps" else "sigma")
            + " assembles to sympy.diff of the forward at every entry (k, j), for every batch "
            "size M (symbolic M, mean and variance as sums over the batch"
            + (", variance positive" if denom == "std_plus_eps" else "")
            + ") and at M = 1..4"
        ),
        method="symbolic identity",
        check=lambda: (
            bn.symbolic_derivation_matches(denom)
            and all(bn.derivation_matches(denom, s) for s in PROOF_SIZES[:4])
        ),
    )


def _point(delta: int) -> dict:
    return {**PROBE, bn.delta_jk: sp.Integer(delta)}


def compare(printed: sp.Basic, derived: sp.Basic, what: str, deltas=(0, 1)) -> tuple[bool, dict]:
    """(equal, witness): equal by a symbolic identity, else an exact point that differs."""
    if isinstance(printed, sp.Tuple):
        pairs = list(zip(printed.args, sp.Tuple(*derived).args, strict=True))
    else:
        pairs = [(printed, derived)]
    if all(is_zero(p - d) for p, d in pairs):
        return True, {}
    for delta in deltas:
        for index, (p, d) in enumerate(pairs):
            point = _point(delta)
            shown, true = sp.nsimplify(p.subs(point)), sp.nsimplify(d.subs(point))
            if not is_zero(shown - true):
                used = p.free_symbols | d.free_symbols
                return False, {
                    "point": {str(k): str(v) for k, v in point.items() if k in used},
                    "component": index,
                    "printed": str(shown),
                    "derived": str(true),
                }
    raise ValueError(f"{what}: neither an identity nor a counterexample at the probe point")


def formula_proof(
    statement: str, printed: sp.Basic, derived: sp.Basic, denom: str, what: str
) -> tuple[bool, Proof, dict]:
    """(holds, proof, witness) of a printed formula against the derived one."""
    equal, witness = compare(printed, derived, what)
    if equal:
        step = Step(
            statement=f"the printed {what} minus the derived one simplifies to 0",
            method="symbolic identity",
            check=lambda: compare(printed, derived, what)[0],
        )
    else:
        step = Step(
            statement=(
                f"at the exact point {witness['point']} the printed {what} is "
                f"{witness['printed']}, the derived one {witness['derived']}"
            ),
            method="exact witness",
            check=lambda: compare(printed, derived, what)[1] == witness,
        )
    return equal, Proof(claim=statement, steps=(step, derivation_step(denom))), witness


# --- gradients of the loss (B.53, B.55, B.57): sympy.diff of sum_k g_k y_k ---------------


@cache
def gradient_matches(which: str, size: int) -> bool:
    """B.53 (dx), B.55 (dbeta) and B.57 (dgamma) of the std + eps form at K = ``size``."""
    f = bn.form("std_plus_eps")
    xs, gamma, beta, y = f.forward(size)
    g = vector("g", size)
    loss = (g.T * y)[0]
    _, var, xhat = f.normalize(xs)
    if which == "dbeta":
        return is_zero(sp.diff(loss, beta) - sum(g))
    if which == "dgamma":
        return is_zero(sp.diff(loss, gamma) - sum(g[k] * xhat[k] for k in range(size)))
    if var == 0:
        return is_zero(sp.diff(loss, xs[0]))
    steps = bn.derivation("std_plus_eps")
    for j in range(size):
        printed = sum(g[k] * gamma * steps.substitute(xs, k, j) for k in range(size))
        if not is_zero(printed - sp.diff(loss, xs[j])):
            return False
    return True


def gradient_proof(statement: str, which: str) -> Proof:
    sizes = PROOF_SIZES[:4]
    return Proof(
        claim=statement,
        steps=(
            Step(
                statement=(
                    f"the printed sum equals sympy.diff of the loss sum_k g_k y_k with respect "
                    f"to {'Z_ij' if which == 'dx' else which[1:]}, for every batch size K "
                    "(symbolic K, where the variance is positive) and at K = 1..4"
                ),
                method="symbolic identity",
                check=lambda: (
                    bn.symbolic_gradient_matches(which)
                    and all(gradient_matches(which, s) for s in sizes)
                ),
            ),
        ),
    )


# --- statistics of the output (000, 002) ----------------------------------------------------


@cache
def output_moments(size: int) -> tuple[sp.Expr, sp.Expr, sp.Expr]:
    """(mean of y, variance of y, variance of x) over a batch of ``size`` (sqrt form)."""
    f = bn.form("sqrt_var_eps")
    xs, _, _, y = f.forward(size)
    mean = sum(y) / size
    variance = sum((v - mean) ** 2 for v in y) / size
    _, var_x, _ = f.normalize(xs)
    return mean, variance, var_x


def moments_hold(size: int) -> bool:
    """mean(y) = beta and var(y) = gamma^2 var/(var + eps), exactly."""
    gamma, beta = sp.Symbol("gamma", real=True), sp.Symbol("beta", real=True)
    mean, variance, var_x = output_moments(size)
    return is_zero(mean - beta) and is_zero(variance - gamma**2 * var_x / (var_x + eps))


def algorithm_matches(size: int) -> bool:
    """000's four printed lines (batch mean, biased variance with 1/m, xhat with eps, h) at
    batch ``size`` give the forward the kernels compute (``sqrt_var_eps``), exactly."""
    xs = vector("x", size)
    gamma, beta = sp.Symbol("gamma", real=True), sp.Symbol("beta", real=True)
    mean = sum(xs) / size
    variance = sum((v - mean) ** 2 for v in xs) / size
    printed = [gamma * (v - mean) / sp.sqrt(variance + eps) + beta for v in xs]
    _, _, _, y = bn.form("sqrt_var_eps").forward(size)
    return all(is_zero(a - b) for a, b in zip(printed, y, strict=True))


@cache
def moments_without_eps(size: int) -> tuple[sp.Expr, sp.Expr]:
    """(mean, variance) of ``gamma (x - mean)/sqrt(var) + beta`` over a batch of ``size``
    (002's normalization without eps), simplified; SymPy cancels ``var/var``, so the result
    holds for every batch whose values are not all equal (var > 0)."""
    mean, variance, _ = output_moments(size)
    return sp.simplify(mean.subs(eps, 0)), sp.simplify(variance.subs(eps, 0))


def printed_running_update() -> sp.Tuple:
    """003's ``m running + (1 - m) batch`` for the mean and the biased batch variance."""
    return sp.Tuple(
        bn.keep * bn.mu_run + (1 - bn.keep) * bn.mu_batch,
        bn.keep * bn.var_run + (1 - bn.keep) * bn.var_batch,
    )


def running_update_gap(size: sp.Expr = bn.m) -> sp.Tuple:
    """PyTorch's running update minus :func:`printed_running_update`: ``(0, (1 - m)
    sigma2_batch/(M - 1))``, simplified."""
    printed = printed_running_update()
    return sp.Tuple(
        *(sp.factor(d - q) for d, q in zip(bn.running_update(size), printed, strict=True))
    )


#: The batch where 003's running variance and PyTorch's differ: x = (0, 2) (mean 1, biased
#: variance 1, unbiased 2), running statistics (0, 1), m = 9/10.
RUNNING_POINT = {"x": (0, 2), "mu_run": 0, "sigma2_run": 1, "m": sp.Rational(9, 10)}


def running_counterexample() -> tuple[sp.Tuple, sp.Tuple]:
    """(003's update, PyTorch's update) at :data:`RUNNING_POINT`: ((1/10, 1), (1/10, 11/10))."""
    xs = RUNNING_POINT["x"]
    mean = sp.Rational(sum(xs), len(xs))
    biased = sum((sp.Integer(v) - mean) ** 2 for v in xs) / len(xs)
    values = {
        bn.mu_run: RUNNING_POINT["mu_run"],
        bn.var_run: RUNNING_POINT["sigma2_run"],
        bn.keep: RUNNING_POINT["m"],
        bn.mu_batch: mean,
        bn.var_batch: biased,
    }
    return printed_running_update().subs(values), bn.running_update(len(xs)).subs(values)


def scale_shift_partials() -> tuple[sp.Expr, bool]:
    """Concept 19 of 004 for every size: ``d Zhat_ab / d Zbar_cd`` of ``Zhat_ab = G_a Zbar_ab
    + B_a`` with symbolic indices (SymPy's indexed differentiation gives ``G_a
    delta_ac delta_bd``), and whether it is 0 once either delta is."""
    a, b, c, d = sp.symbols("a b c d", integer=True)
    gain, shift, zbar = sp.IndexedBase("G"), sp.IndexedBase("B"), sp.IndexedBase("Zbar")
    partial = sp.diff(gain[a] * zbar[a, b] + shift[a], zbar[c, d])
    cases = (sp.KroneckerDelta(a, c), sp.KroneckerDelta(b, d))
    return partial, all(partial.subs(delta, 0) == 0 for delta in cases)


def _normalized(features: int, size: int) -> tuple[sp.Matrix, sp.Matrix]:
    """``(Z, Zbar)`` for a ``features`` x ``size`` batch Z (004's layout: a row per
    feature), ``Zbar = (Z - mu)/(sigma + eps)`` with each row's mean and biased std."""
    z = sp.Matrix(features, size, lambda i, k: sp.Symbol(f"Z{i + 1}{k + 1}", real=True))
    zbar = sp.zeros(features, size)
    for i in range(features):
        row = list(z.row(i))
        mean = sum(row) / size
        std = sp.sqrt(sum((v - mean) ** 2 for v in row) / size)
        for k in range(size):
            zbar[i, k] = (row[k] - mean) / (std + eps)
    return z, zbar


def normalized_partials(features: int, size: int) -> dict[tuple[int, int, int, int], sp.Expr]:
    """``d Zbar_cd / d Z_ef`` for a ``features`` x ``size`` batch (:func:`_normalized`)."""
    z, zbar = _normalized(features, size)
    return {
        (c, d, e, f): sp.diff(zbar[c, d], z[e, f])
        for c in range(features)
        for d in range(size)
        for e in range(features)
        for f in range(size)
    }


@cache
def chain_through_normalized(features: int, size: int) -> dict[str, bool]:
    """004's chain rule through Zbar for a ``features`` x ``size`` batch Z (a row per
    feature), ``Zhat_ik = G_i Zbar_ik + B_i`` and the std + eps ``Zbar``: ``"B38"``, the
    Jacobian of Zhat by Z (flattened, sympy.diff) is the product of Zhat's by Zbar and Zbar's
    by Z (B.39 is its entry, summed over c, d); ``"B41"``, each entry with the same feature
    is the single product ``G_i dZbar_ik/dZ_ij`` and the others vanish."""
    z, zbar = _normalized(features, size)
    y = sp.Matrix(features, size, lambda i, k: sp.Symbol(f"Y{i + 1}{k + 1}", real=True))
    gain = [sp.Symbol(f"G{i + 1}", real=True) for i in range(features)]
    shift = [sp.Symbol(f"B{i + 1}", real=True) for i in range(features)]
    cells = [(i, k) for i in range(features) for k in range(size)]
    flat_z = [z[i, k] for i, k in cells]
    flat_y = [y[i, k] for i, k in cells]
    total = sp.Matrix([gain[i] * zbar[i, k] + shift[i] for i, k in cells]).jacobian(flat_z)
    outer = sp.Matrix([gain[i] * y[i, k] + shift[i] for i, k in cells]).jacobian(flat_y)
    inner = sp.Matrix([zbar[i, k] for i, k in cells]).jacobian(flat_z)
    chained = all(is_zero(v) for v in total - outer * inner)
    single = all(
        is_zero(total[r, s] - (gain[i] * inner[r, s] if i == e else 0))
        for r, (i, _) in enumerate(cells)
        for s, (e, _) in enumerate(cells)
    )
    return {"B38": chained, "B41": single}


def other_features_do_not_matter(features: int, size: int) -> bool:
    """Concept 20 as intended: ``d Zbar_cd / d Z_ef = 0`` whenever c != e, exactly."""
    partials = normalized_partials(features, size)
    return all(v == 0 for (c, _, e, _), v in partials.items() if c != e)


#: The batch where the printed moments fail: x = (0, 2), eps = 1, gamma = 1, beta = 0.
MOMENT_POINT = {"x": (0, 2), "eps": 1, "gamma": 1, "beta": 0}


def moment_counterexample() -> tuple[sp.Expr, sp.Expr]:
    """(mean, variance) of y at :data:`MOMENT_POINT`: (0, 1/2)."""
    mean, variance, _ = output_moments(2)
    values = {
        sp.Symbol("x1", real=True): 0,
        sp.Symbol("x2", real=True): 2,
        eps: 1,
        sp.Symbol("gamma", real=True): 1,
        sp.Symbol("beta", real=True): 0,
    }
    return sp.nsimplify(mean.subs(values)), sp.nsimplify(variance.subs(values))


def identity_counterexample() -> sp.Matrix:
    """y - x at x = (0, 2), eps = 1 with gamma = sigma_B = 1, beta = mu_B = 1."""
    f = bn.form("sqrt_var_eps")
    xs, gamma, beta, y = f.forward(2)
    values = {xs[0]: 0, xs[1]: 2, eps: 1, gamma: 1, beta: 1}
    return sp.simplify((y - xs).subs(values))


def corrected_identity(size: int) -> bool:
    """gamma = sqrt(var + eps), beta = mean gives y = x exactly."""
    f = bn.form("sqrt_var_eps")
    xs, gamma, beta, y = f.forward(size)
    mean, var, _ = f.normalize(xs)
    return all(is_zero(e) for e in (y - xs).subs({gamma: sp.sqrt(var + eps), beta: mean}))


# --- Lipschitz: block structure and the spectrum of one feature's block ---------------------


def block_norm_witness() -> tuple[sp.Expr, sp.Expr]:
    """M = 3, x = (0, 1, 5), gamma = 2, eps = 1/2: (||J||_2 exactly, 2/sqrt(var + eps))."""
    f = bn.form("sqrt_var_eps")
    xs, gamma, beta, y = f.forward(3)
    point = {xs[0]: 0, xs[1]: 1, xs[2]: 5, gamma: 2, beta: 0, eps: sp.Rational(1, 2)}
    jacobian = y.jacobian(xs).subs(point)
    eigenvalues = (jacobian.T * jacobian).eigenvals()
    norm = sp.sqrt(max(eigenvalues, key=lambda e: sp.N(e, 50)))
    _, var, _ = f.normalize(xs)
    return sp.nsimplify(norm), 2 / sp.sqrt(var.subs(point) + sp.Rational(1, 2))


def batch_of_one() -> tuple[sp.Expr, sp.Expr]:
    """The training forward the kernels compute, at a batch of one: (h_1, dh_1/dx_1). The
    sample is its own mean, so the deviation is 0 whatever x_1 is."""
    xs, _, _, y = bn.form("sqrt_var_eps").forward(1)
    return sp.simplify(y[0]), sp.simplify(sp.diff(y[0], xs[0]))


def other_sample_partial() -> sp.Expr:
    """dh_1/dx_2 of the training forward at a batch of two, at x = (0, 2), gamma = 1,
    eps = 1: a sample's output depends on the other samples of its batch."""
    xs, gamma, _, y = bn.form("sqrt_var_eps").forward(2)
    partial = sp.diff(y[0], xs[1])
    return sp.simplify(partial.subs({xs[0]: 0, xs[1]: 2, eps: 1, gamma: 1}))


@cache
def symbolic_moments_without_eps(
    scale: sp.Expr, shift: sp.Expr, mean: sp.Expr, variance: sp.Expr
) -> bool:
    """For every batch size M (symbolic M, sums over 1..M): ``scale (x_k - mu)/sqrt(var) +
    shift``, mu and var the batch's mean and biased variance, has mean ``mean`` and variance
    (about its own mean, biased) ``variance`` (002's normalization is scale 1, shift 0;
    true for every batch whose values are not all equal, var > 0)."""
    x = sp.IndexedBase("x", real=True)
    k = sp.Symbol("k_o", integer=True, positive=True)
    mu, var = sum_statistics(x)
    out = scale * (x[k] - mu) / sp.sqrt(var) + shift
    out_mean = total(out, k) / SIZE
    return (
        sum_identity(out_mean, mean)()
        and sum_identity(total((out - out_mean) ** 2, k) / SIZE, variance)()
    )


@cache
def symbolic_chain_checks(inner_factor: int = 1) -> dict[str, bool]:
    """004's chain rule through Zbar for every batch size K and number of features F (both
    symbolic; Z an ``IndexedBase``, each feature's mean and biased std as sums over 1..K,
    Zbar = (Z - mu)/(sigma + eps), Zhat_ab = G_a Zbar_ab + B_a):

    - ``"B39"``: dZhat_ab/dZ_ef (sympy.diff) equals sum_{c <= F} sum_{d <= K} dZhat_ab/dZbar_cd
      dZbar_cd/dZ_ef (B.38 entry by entry);
    - ``"B41"``: with the same feature it is the single product G_a dZbar_ab/dZ_af;
    - ``"across"``: across features (a != e) it is 0;
    - ``"concept20"``: dZbar_cd/dZ_ef = 0 for c != e (Concept 20 as intended).

    ``inner_factor`` scales the inner partials of the right-hand sides (a test's false
    variant: each check then fails, but ``across`` and ``concept20``, which have none)."""
    size, features = sp.symbols("K F", integer=True, positive=True)
    z, y = sp.IndexedBase("Z", real=True), sp.IndexedBase("Y", real=True)
    gain, shift = sp.IndexedBase("G", real=True), sp.IndexedBase("B", real=True)
    a, b, c, d, e, f, l = sp.symbols("a b c d e f l", integer=True, positive=True)  # noqa: E741

    def zbar(i, k):
        mean = total(z[i, l], l, size) / size
        std = sp.sqrt(total((z[i, l] - mean) ** 2, l, size) / size)
        return (z[i, k] - mean) / (std + eps)

    total_partial = sp.diff(gain[a] * zbar(a, b) + shift[a], z[e, f])
    outer = sp.diff(gain[a] * y[a, b] + shift[a], y[c, d])  # G_a delta_ac delta_bd
    inner = inner_factor * sp.diff(zbar(c, d), z[e, f])
    chained = total(total(outer * inner, d, size), c, features)
    same_feature = sp.diff(gain[a] * zbar(a, b) + shift[a], z[a, f])
    single = inner_factor * gain[a] * sp.diff(zbar(a, b), z[a, f])
    return {
        "B39": sum_identity(total_partial, chained)(),
        "B41": sum_identity(same_feature, single)(),
        "across": sum_identity(total_partial, 0, distinct=[(a, e)])(),
        "concept20": sum_identity(sp.diff(zbar(c, d), z[e, f]), 0, distinct=[(c, e)])(),
    }
