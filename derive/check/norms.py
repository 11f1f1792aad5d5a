"""Verdicts of the normalization claims (LayerNorm, RMSNorm, CenterNorm, WeightNorm and the
rankings of Eq. 51-52), from the proofs in :mod:`proofs.norms`.

Each function below decides one claim: it runs the proof (a step that does not check makes
the verdict unreportable) and reports the value liptable derives. Values are SymPy-parsable
strings in the claims' symbols: ``D`` (row length), ``epsilon`` (PyTorch eps),
``epsilon_p = D*epsilon`` (the paper's), ``gamma_max = max_i |gamma_i|``,
``sigma_max_P(gamma) = |diag(gamma)(I - 11^T/D)|_2`` (the largest singular value), ``n_o``
(WeightNorm's output rows), ``q_i = |v_i|^2``.
"""

from __future__ import annotations

from collections.abc import Callable

import sympy as sp

from derive.check.core import EPS_P, GAMMA_MAX, GAMMA_NORM, SIGMA_P, D, bound_verdict, result
from derive.claims import Claim
from proofs import norms as pn
from proofs.core import Proof, Step, UnprovenError, Verdict, identity, is_zero

#: Notes shared by the Lipschitz claims of the centered modules.
CENTERED_NOTE = (
    "sigma_max_P(gamma) = |diag(gamma)(I - 11^T/D)|_2 = sqrt(lambda_max(diag(gamma^2) - "
    "gamma gamma^T/D)) <= max|gamma|, with equality exactly when the largest |gamma_i| "
    "occurs at least twice (so the printed constant is tight for gamma = 1, PyTorch's "
    "initialization, and loose otherwise; for gamma = (2, 1, 1) the tight factor is "
    "sqrt(3) against the printed 2)."
)


def _definition(c: Claim):
    proof = pn.definition_proof(c.key, c.statement_latex)
    return result(
        c,
        Verdict.HOLDS,
        "Eq(epsilon_p, D*epsilon)",
        proof,
        notes=(
            "The printed forward is PyTorch's with the paper's eps added to the squared "
            "norm: eps_paper = D * eps_pytorch.",
        ),
    )


def _jacobian(c: Claim):
    key = "layernorm_z" if c.id == "layernorm.eq19" else c.key
    verdict, proof, witness = pn.jacobian_decision(key, c.statement_latex)
    entries = {
        "layernorm": "gamma_i*r*(delta_ij - 1/D - z_i*z_j/D)",
        "layernorm_z": "r*(delta_ij - 1/D - z_i*z_j/D)",
        "rmsnorm": "gamma_i*r*(delta_ij - z_i*z_j/D)",
        "centernorm": "D*gamma_i*(delta_ij - 1/D)/(D - 1)",
    }
    return result(
        c,
        verdict,
        entries[key],
        proof,
        witness=witness,
        notes=(
            "value: the entry J_ij = dy_i/dx_j of the derived Jacobian in numerator layout, "
            "with r = 1/sqrt(var + eps) = sqrt(D)/sqrt(|y|^2 + eps_paper) and z = (x - "
            "center) r; the printed matrix is its transpose (the paper's denominator layout).",
        ),
    )


def _layernorm_lipschitz(c: Claim):
    proof = pn.row_lipschitz_proof("layernorm")
    verdict, reason = bound_verdict(
        c.formal, GAMMA_MAX * sp.sqrt(D) / sp.sqrt(EPS_P), SIGMA_P * sp.sqrt(D) / sp.sqrt(EPS_P)
    )
    return result(
        c,
        verdict,
        "sqrt(D)*sigma_max_P(gamma)/sqrt(epsilon_p)",
        proof,
        witness={
            "attained": "every constant row x = c 1, where J = diag(gamma) P / sqrt(eps)",
            "loose": "D = 3, gamma = (2, 1, 1): tight sqrt(3)/sqrt(eps) < printed 2/sqrt(eps)",
        },
        notes=(
            "A valid bound: in PyTorch's eps the tight constant is "
            "sigma_max_P(gamma)/sqrt(eps) and the printed one max|gamma|/sqrt(eps).",
            CENTERED_NOTE,
            "D = 1: LayerNorm is constant (y = beta), Lipschitz constant 0.",
            "Local constant at x (gamma = c 1, D >= 3): |c|/sqrt(var(x) + eps); D = 2: "
            "|c| eps/(var + eps)^(3/2); for any gamma at most max|gamma|/sqrt(var + eps).",
        ),
        reason=reason,
    )


def _rmsnorm_lipschitz(c: Claim):
    proof = pn.row_lipschitz_proof("rmsnorm")
    constant = GAMMA_MAX * sp.sqrt(D) / sp.sqrt(EPS_P)
    verdict, reason = bound_verdict(c.formal, constant, constant)
    return result(
        c,
        verdict,
        "gamma_max*sqrt(D)/sqrt(epsilon_p)",
        proof,
        witness={"x": "0 (any D, any gamma)", "jacobian": "diag(gamma)/sqrt(eps)"},
        notes=(
            "In PyTorch's eps: max|gamma|/sqrt(eps), attained at x = 0 for every gamma.",
            "Local constant at x (gamma = c 1, D >= 2): |c|/sqrt(mean(x^2) + eps); D = 1: "
            "|c| eps/(x^2 + eps)^(3/2); for any gamma at most max|gamma|/sqrt(mean(x^2) + eps).",
        ),
        reason=reason,
    )


def _centernorm_lipschitz(c: Claim):
    verdict, reason = bound_verdict(c.formal, D / (D - 1) * GAMMA_MAX, D / (D - 1) * SIGMA_P)
    return result(
        c,
        verdict,
        "D*sigma_max_P(gamma)/(D - 1)",
        pn.centernorm_lipschitz_proof(),
        witness={
            "attained": "gamma = 1 (any x: the Jacobian is constant)",
            "loose": "D = 3, gamma = (2, 1, 1): tight (3/2) sqrt(3) < printed (3/2) 2",
        },
        notes=(CENTERED_NOTE,),
        reason=reason,
    )


def _weightnorm_lipschitz(c: Claim):
    verdict, reason = bound_verdict(c.formal, GAMMA_NORM, GAMMA_NORM)
    return result(
        c,
        verdict,
        "sigma_max(W)",
        pn.weightnorm_lipschitz_proof(),
        witness={
            "v": str(pn.PARALLEL_OPPOSITE[0]),
            "gamma": str(pn.PARALLEL_OPPOSITE[1]),
            "eps": "0",
            "sigma_max": "sqrt(2)",
        },
        notes=(
            "WeightNorm is linear in x: its Lipschitz constant is sigma_max(W) exactly, and "
            "sigma_max(W) <= |W|_F <= sqrt(sum gamma_i^2). With eps = 0 the bound is attained "
            "by every rank-one W (rows v_i parallel, any signs and lengths); with eps > 0 it "
            "is approached as |v_i| grows and never reached.",
        ),
        reason=reason,
    )


def _weightnorm_jacobian(c: Claim):
    verdict, proof = pn.weightnorm_layout_decision()
    return result(
        c,
        verdict,
        "W",
        proof,
        witness={
            "v": "[[1, 2]]",
            "gamma": "[1]",
            "printed_shape": "(1, 2)",
            "true_shape": "(2, 1)",
        },
        notes=(
            "The paper declares denominator layout (its Linear row prints W^T), in which "
            "WeightNorm's Jacobian is W^T; the printed W is the numerator-layout Jacobian, "
            "which is what the kernels return.",
        ),
    )


def _weightnorm_frobenius(c: Claim):
    return result(
        c,
        Verdict.FAILS,
        "sqrt(Sum(gamma_i**2*q_i/(q_i + epsilon), (i, 1, n_o)))",
        pn.weightnorm_frobenius_counterexample(),
        witness={"v": "[[1]]", "gamma": "[1]", "eps": "1", "frobenius": "1/sqrt(2)"},
        notes=(
            "Corrected: |W|_F^2 = sum_i gamma_i^2 |v_i|^2/(|v_i|^2 + eps) <= sum_i gamma_i^2, "
            "equal when eps = 0 (PyTorch's weight_norm); the conclusion sigma_max(W) <= "
            "sqrt(sum gamma_i^2) still holds.",
        ),
    )


def _weightnorm_equality(c: Claim):
    return result(
        c,
        Verdict.FAILS,
        "And(rank(W) <= 1, Eq(epsilon*Sum(gamma_i**2/(q_i + epsilon), (i, 1, n_o)), 0))",
        pn.weightnorm_equality_counterexample(),
        witness={
            "necessary": "v = [[1, 0], [-2, 0]], gamma = [1, 1], eps = 0: equality, v_1 != v_2",
            "sufficient": "v = [[1, 0], [1, 0]], gamma = [1, 1], eps = 1: v_1 = v_2, "
            "sigma_max = 1 < sqrt(2)",
        },
        notes=(
            "Corrected: sigma_max(W) = |W|_F iff rank(W) <= 1 (the printed first sentence, "
            "true), i.e. the rows v_i with gamma_i != 0 are parallel -- not equal; and "
            "|W|_F = sqrt(sum gamma_i^2) needs eps = 0 (or gamma_i = 0 for every row).",
        ),
    )


def _a2_bounds(c: Claim):
    steps = [
        pn.row_lipschitz_proof("layernorm").steps[3],
        pn.gamma_norm_steps()[0],
        Step(
            statement=(
                r"$P = I - \mathbf{1}\mathbf{1}^\top/D$ is symmetric with $P^2 = P$ "
                r"(an orthogonal projector, $\sigma_{\max} = 1$ for D >= 2), for every D "
                r"(entry (a, b), symbolic D) and at D = 1..5"
            ),
            method="symbolic identity",
            check=lambda: (
                pn.symbolic_projector_identity()
                and all(
                    (pn.centering(s) ** 2 - pn.centering(s)).is_zero_matrix for s in range(1, 6)
                )
            ),
        ),
        pn.row_lipschitz_proof("layernorm").steps[1],
    ]
    return result(
        c,
        Verdict.HOLDS,
        "gamma_max*sqrt(D)/sqrt(epsilon_p)",
        Proof(claim=c.statement_latex, steps=tuple(steps)),
        notes=(
            "value: the bound their product gives (Table 2's constant). "
            "Each of the four inequalities holds (the last: the eigenvalues of I - y y^T/"
            "(|y|^2 + eps) are 1 and eps/(|y|^2 + eps)). Their product bound ignores that "
            "diag(gamma) meets the centering projector, which is why the resulting constant "
            "is loose unless the largest |gamma_i| repeats.",
        ),
    )


def _cn_vs_wn_condition() -> Step:
    """D/(D-1) <= sqrt(D)  <=>  D^2 - 3D + 1 >= 0  <=>  D >= (3 + sqrt 5)/2 for D >= 2."""
    t = sp.Symbol("t", real=True)
    return Step(
        statement=(
            r"For $\gamma = \mathbf{1}$ and D >= 2: $\frac{D}{D-1} \le \sqrt{D} \iff "
            r"D^2 - 3D + 1 \ge 0$, whose solution set on $[2, \infty)$ is "
            r"$[\frac{3+\sqrt5}{2}, \infty)$: CenterNorm's constant is below WeightNorm's "
            r"only for D >= 3"
        ),
        method="symbolic solution set",
        check=_solution_on_ray(t),
    )


def _solution_on_ray(t: sp.Symbol) -> Callable[[], bool]:
    def check() -> bool:
        solved = sp.solveset(t**2 - 3 * t + 1 >= 0, t, sp.Interval(2, sp.oo))
        return solved == sp.Interval((3 + sp.sqrt(5)) / 2, sp.oo)

    return check


def _ranking(c: Claim):
    two = sp.Integer(2)
    steps = (
        Step(
            statement=(
                r"Counterexample to the first inequality: D = 2, $\gamma = (1, 1)$ (O = D): "
                r"CenterNorm's $\frac{D}{D-1}\max|\gamma| = 2 > \sqrt{2} = "
                r"\sqrt{\sum\gamma_i^2}$ (WeightNorm's)"
            ),
            method="exact witness",
            check=lambda: bool(two / (two - 1) > sp.sqrt(two)),
        ),
        Step(
            statement=(
                r"Counterexample to the second: D = O = 768, $\gamma = \mathbf{1}$, batch "
                r"variance $\sigma^2 = 1$, $\epsilon = 10^{-5}$: $\sqrt{768} > "
                r"1/\sqrt{1 + 10^{-5}}$ (BatchNorm's printed constant)"
            ),
            method="exact witness",
            check=lambda: bool(sp.sqrt(768) > 1 / sp.sqrt(1 + sp.Rational(1, 10**5))),
        ),
        _cn_vs_wn_condition(),
        Step(
            statement=(
                r"For $\gamma = \mathbf{1}$: $\sqrt{D} \le 1/\sqrt{\sigma^2 + \epsilon} \iff "
                r"D(\sigma^2+\epsilon) \le 1$ (WeightNorm below BatchNorm only then)"
            ),
            method="symbolic identity",
            check=identity(
                (1 / sp.sqrt(pn.var + pn.eps)) ** 2 - sp.sqrt(D) ** 2,
                (1 - D * (pn.var + pn.eps)) / (pn.var + pn.eps),
            ),
        ),
    )
    return result(
        c,
        Verdict.FAILS,
        "Tuple(D/(D - 1), sqrt(D), 1/sqrt(sigma2 + epsilon_bn), sqrt(D/epsilon_p), "
        "sqrt(D/epsilon_p))",
        Proof(claim=c.statement_latex, steps=steps),
        witness={"D": "2", "gamma": "(1, 1)", "centernorm": "2", "weightnorm": "sqrt(2)"},
        notes=(
            "The constants depend on different quantities (D, O, gamma, the batch variance, "
            "two eps) and are not ordered in general. value: the five printed constants at "
            "gamma = 1 (O = D), in the printed order. Corrected statement (gamma = 1): "
            "CenterNorm < WeightNorm iff D >= 3; WeightNorm <= BatchNorm iff D(sigma^2 + "
            "eps) <= 1; RMSNorm and LayerNorm print the same constant, and their tight "
            "constants satisfy LayerNorm's <= RMSNorm's (sigma_max_P(gamma) <= max|gamma|).",
        ),
    )


#: Claim id -> the function deciding it.
def _centernorm_definition(c: Claim):
    return result(
        c,
        Verdict.HOLDS,
        "D*gamma_b*(x_b - xbar)/(D - 1) + beta_b",
        pn.centernorm_definition_proof(c.statement_latex),
        notes=("value: entry b of the forward, xbar the row's mean.",),
    )


def _weightnorm_definition(c: Claim):
    return result(
        c,
        Verdict.HOLDS,
        "gamma_i*v_ij/sqrt(v_norm2_i + epsilon)",
        pn.weightnorm_definition_proof(c.statement_latex),
        notes=(
            "value: entry (i, j) of W, v_norm2_i = |v_i|^2. With eps > 0 each row is "
            "|v_i|/sqrt(|v_i|^2 + eps) times Salimans and Kingma's, shorter than gamma_i.",
        ),
    )


def _a2_centered(c: Claim):
    steps = (
        Step(
            statement=r"$\|x\|_2^2 - \|y\|_2^2 = D \bar x^2 \ge 0$ with "
            r"$\bar x = \frac{1}{D}\sum_j x_j$, for every D (sums over 1..D, symbolic D) "
            r"and at D = 1..5",
            method="symbolic identity",
            check=pn.centering_shortens,
        ),
    )
    return result(
        c,
        Verdict.HOLDS,
        "D*xbar**2",
        Proof(claim=c.statement_latex, steps=steps),
        notes=(
            "value: |x|^2 - |y|^2, with xbar the mean of x: the centered row is never longer, "
            "and as long exactly when the mean is 0.",
        ),
    )


def _lecture_normalization_step() -> Step:
    return Step(
        statement=r"for every number of neurons N (entry b, symbolic N): 000's mean and "
        r"biased variance over the neurons, $\hat a^b = (a^b - \mu)/\sqrt{\sigma^2 + "
        r"\epsilon}$, with a gain and a bias per neuron, equal the kernels' LayerNorm "
        r"output $\gamma_b (a^b - \bar a) r + \beta_b$, $r = 1/\sqrt{\mathrm{var} + "
        r"\epsilon}$",
        method="symbolic identity",
        check=pn.symbolic_lecture_layernorm,
    )


def _algorithm_000(c: Claim):
    return result(
        c,
        Verdict.HOLDS,
        "(a_b - abar)/sqrt(sigma2 + epsilon)",
        Proof(claim=c.statement_latex, steps=(_lecture_normalization_step(),)),
        notes=(
            "value: entry b of one sample's normalized activations, abar and sigma2 the mean "
            "and biased variance over its N neurons: PyTorch's eps convention, added to the "
            "variance.",
        ),
    )


def _affine_000(c: Claim):
    found = pn.lecture_shared_gain_witness()
    rows = ", ".join(str(row) for row in pn.LECTURE_ROWS)
    if found["solutions"]:
        raise UnprovenError(f"{c.id}: a shared gain reproduces the per-neuron one: {found}")
    steps = (
        Step(
            statement=r"as printed (d = 1), one gain and one bias shared by the neurons: "
            rf"no $(\gamma, \beta)$ gives LayerNorm with gains {pn.LECTURE_GAINS} and biases "
            rf"0 at both rows {rows} of N = 2 neurons, eps = {pn.LECTURE_EPS} (the four "
            r"linear equations have no solution)",
            method="exact witness",
            check=lambda: pn.lecture_shared_gain_witness()["solutions"] == [],
        ),
        _lecture_normalization_step(),
    )
    return result(
        c,
        Verdict.MISPRINTED,
        "gamma_b*ahat_b + beta_b",
        Proof(claim=c.statement_latex, steps=steps),
        witness={
            "N": str(len(pn.LECTURE_ROWS[0])),
            "rows": rows,
            "epsilon": str(pn.LECTURE_EPS),
            "layernorm_gains": str(pn.LECTURE_GAINS),
            "layernorm_at_first": sp.sstr(found["layernorm_at_first"]),
            "printed": "no shared (gamma, beta) reproduces it",
        },
        notes=(
            "Intended: o^b = gamma_b ahat^b + beta_b with gamma, beta in R^N, one gain and "
            "one bias per neuron (Ba et al.; PyTorch's LayerNorm(N)), which holds.",
        ),
    )


def _example_000(c: Claim):
    printed, algorithm = pn.lecture_example_witness()
    if is_zero(printed - algorithm):
        raise UnprovenError(f"{c.id}: the witness does not separate the example and algorithm")
    steps = (
        Step(
            statement=rf"the last neuron of the sample {pn.LECTURE_SAMPLE} at eps = "
            rf"{pn.LECTURE_SAMPLE_EPS}: the example's $(x - \mu)/\sigma = "
            rf"{sp.latex(printed)}$, the algorithm's $(x - \mu)/\sqrt{{\sigma^2 + \epsilon}} = "
            rf"{sp.latex(algorithm)}$",
            method="exact witness",
            check=lambda: pn.lecture_example_witness() == (printed, algorithm),
        ),
        _lecture_normalization_step(),
    )
    return result(
        c,
        Verdict.FAILS,
        "(x_jk - mu)/sqrt(sigma**2 + epsilon)",
        Proof(claim=c.statement_latex, steps=steps),
        witness={
            "x": str(pn.LECTURE_SAMPLE),
            "epsilon": str(pn.LECTURE_SAMPLE_EPS),
            "printed": sp.sstr(printed),
            "derived": sp.sstr(algorithm),
        },
        notes=(
            "Corrected: xhat = (x - mu)/sqrt(sigma^2 + eps), as 000's own algorithm has it; "
            "the example's (x - mu)/sigma is its eps = 0 case, undefined for a sample whose "
            "activations are all equal (as batchnorm.example_000 for the same slide's "
            "BatchNorm).",
        ),
    )


def _batch_size_000(c: Claim):
    steps = (
        Step(
            statement=r"for every number of neurons N (symbolic N): the derivative of neuron "
            r"b's output at sample k by any neuron's activation at a sample $k' \neq k$ is 0 "
            r"(each sample's statistics are sums over its own N neurons)",
            method="symbolic identity",
            check=pn.lecture_samples_apart,
        ),
    )
    return result(
        c,
        Verdict.HOLDS if c.formal == 0 else Verdict.FAILS,
        "0",
        Proof(claim=c.statement_latex, steps=steps),
        notes=(
            "value: d o_{b,k} / d a_{c,k'} for k != k'. Each sample is normalized alone, so "
            "its output is the same in a batch of any size, one included (the slide's "
            "online-learning case); BatchNorm's is not (batchnorm.batch_one_000).",
        ),
    )


DECIDERS: dict[str, Callable[[Claim], object]] = {
    "layernorm.algorithm_000": _algorithm_000,
    "layernorm.affine_000": _affine_000,
    "layernorm.example_000": _example_000,
    "layernorm.batch_size_000": _batch_size_000,
    "layernorm.definition": _definition,
    "layernorm.jacobian": _jacobian,
    "layernorm.eq19": _jacobian,
    "layernorm.lipschitz": _layernorm_lipschitz,
    "layernorm.a2_bounds": _a2_bounds,
    "layernorm.a2_centered": _a2_centered,
    "rmsnorm.definition": _definition,
    "rmsnorm.jacobian": _jacobian,
    "rmsnorm.lipschitz": _rmsnorm_lipschitz,
    "centernorm.definition": _centernorm_definition,
    "centernorm.jacobian": _jacobian,
    "centernorm.lipschitz": _centernorm_lipschitz,
    "weightnorm.definition": _weightnorm_definition,
    "weightnorm.jacobian": _weightnorm_jacobian,
    "weightnorm.lipschitz": _weightnorm_lipschitz,
    "weightnorm.frobenius": _weightnorm_frobenius,
    "weightnorm.equality": _weightnorm_equality,
    "normalization.eq51": _ranking,
    "normalization.eq52": _ranking,
}


def check_norm(c: Claim):
    """The verdict of a normalization claim."""
    return DECIDERS[c.id](c)
