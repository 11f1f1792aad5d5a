"""Verdicts of the BatchNorm claims, from the derivation in :mod:`derive.definitions.batchnorm` and
the
proofs in :mod:`proofs.batchnorm`.

Formula claims compare the printed expression with the derived one: equal -> ``holds``;
different, but the claim's ``intended`` expression (the evident intent of a garbled or
misprinted line) equal -> ``misprinted``; different -> ``fails`` with the exact point.
"""

from __future__ import annotations

from collections.abc import Callable

import sympy as sp

from derive.check.core import APPROX_LIMIT, approx_verdict, result
from derive.claims import Claim, claim
from derive.definitions import batchnorm as bn
from derive.definitions.norms import PROOF_SIZES, eps, vector
from proofs import batchnorm as pb
from proofs.core import Proof, Step, UnprovenError, Verdict, is_zero
from proofs.norms import attained_check, spectral_check

SQRT, STD = "sqrt_var_eps", "std_plus_eps"


def _derived(denom: str) -> bn.Derivation:
    return bn.derivation(denom)


def _decide_formula(c: Claim, derived: sp.Basic, denom: str, what: str, extra_notes=()):
    """holds / misprinted / fails of a printed formula against the derived one."""
    if c.formal is not None:
        holds, proof, witness = pb.formula_proof(c.statement_latex, c.formal, derived, denom, what)
        if holds:
            return result(c, Verdict.HOLDS, _text(derived), proof, notes=extra_notes)
    elif c.intended is None:
        raise UnprovenError(f"{c.id}: neither a printed formula nor its intent to check")
    else:
        holds, proof, witness = False, None, {"printed": "not a formula (garbled)"}
    if c.intended is not None:
        intended_holds, intended_proof, _ = pb.formula_proof(
            c.statement_latex, c.intended, derived, denom, f"{what} (as intended)"
        )
        if intended_holds:
            steps = (proof.steps if proof else ()) + intended_proof.steps
            return result(
                c,
                Verdict.MISPRINTED,
                _text(derived),
                Proof(claim=c.statement_latex, steps=steps),
                witness=witness or None,
                notes=(f"Intended: {sp.sstr(c.intended)}, which holds.", *extra_notes),
            )
    return result(
        c,
        Verdict.FAILS,
        _text(derived),
        proof,
        witness=witness,
        notes=(f"Derived: {_text(derived)}.", *extra_notes),
    )


def _text(expr: sp.Basic) -> str:
    """A derived expression as a short SymPy-parsable string."""
    if isinstance(expr, sp.Tuple):
        return sp.sstr(sp.Tuple(*(sp.simplify(e) for e in expr.args)))
    return sp.sstr(sp.simplify(expr))


def _entry(denom: str, diagonal: bool | None) -> sp.Expr:
    assembled = _derived(denom).assembled
    if diagonal is True:
        return assembled.subs({bn.x_j: bn.x_k, bn.delta_jk: 1})
    if diagonal is False:
        return assembled.subs(bn.delta_jk, 0)
    return assembled


def _eq15(c):
    return _decide_formula(c, _derived(SQRT).xhat, SQRT, "normalized value")


def _eq16(c):
    return _decide_formula(c, _entry(SQRT, True), SQRT, "diagonal entry")


def _eq17(c):
    return _decide_formula(c, _entry(SQRT, False), SQRT, "off-diagonal entry")


def _independent(size: int = 2) -> bool:
    """Two features, batch ``size``: no output depends on the other feature's column."""
    f = bn.form(SQRT)
    a, b = vector("a", size), vector("b", size)
    _, _, ya = f.normalize(a)
    _, _, yb = f.normalize(b)
    return all(sp.diff(e, v) == 0 for e in ya for v in b) and all(
        sp.diff(e, v) == 0 for e in yb for v in a
    )


def _table_jacobian(c):
    eq16, eq17 = claim("batchnorm.eq16").formal, claim("batchnorm.eq17").formal
    steps = [
        Step(
            statement="Eq. 16 and Eq. 17 equal the derived diagonal and off-diagonal entries",
            method="symbolic identity",
            check=lambda: (
                pb.compare(eq16, _entry(SQRT, True), "Eq. 16")[0]
                and pb.compare(eq17, _entry(SQRT, False), "Eq. 17")[0]
            ),
        ),
        pb.derivation_step(SQRT),
        Step(
            statement="entries of different features are 0 (two features, batch 2 and 3)",
            method="symbolic identity",
            check=lambda: _independent(2) and _independent(3),
        ),
        Step(
            statement="the closed form J = gamma r (I - 11^T/M - d d^T r^2/M) of one feature "
            "equals sympy.diff for every batch size M (symbolic M) and at M = 1..5 (Eq. 16 on "
            "the diagonal, Eq. 17 off it)",
            method="symbolic identity",
            check=lambda: (
                bn.symbolic_batchnorm_checks(SQRT)["jacobian"]
                and all(bn.batchnorm_checks(SQRT, s)["jacobian"] for s in PROOF_SIZES)
            ),
        ),
    ]
    return result(
        c,
        Verdict.HOLDS,
        "gamma_j*r*(delta_jk - 1/M - d_k*d_j*r**2/M)",
        Proof(
            claim=r"Table 2: $\partial\,\mathrm{BN}/\partial X$ is given by Eq. 16 and 17",
            steps=tuple(steps),
        ),
        notes=(
            "Block diagonal: one M x M block per feature, gamma_j times Eq. 16 (diagonal) and "
            "Eq. 17 (off-diagonal); r = 1/sqrt(sigma^2 + eps), d = x - mu.",
        ),
    )


def _lipschitz(c):
    norm, _ = pb.block_norm_witness()
    steps = (
        Step(
            statement=r"one feature's block is $J_j = \gamma_j r_j (I - 11^\top/M - z z^\top/M)$,"
            r" LayerNorm's $r A$ with D = M (sympy.diff, M = 1..5); features are independent,"
            r" so $\|J\|_2 = \max_j \|J_j\|_2$",
            method="symbolic identity",
            check=lambda: (
                all(bn.batchnorm_checks(SQRT, s)["jacobian"] for s in PROOF_SIZES)
                and _independent(2)
            ),
        ),
        Step(
            statement=r"$A = (P - Q) + \frac{\epsilon}{\sigma^2+\epsilon}Q$: eigenvalues 0, "
            r"$\epsilon/(\sigma^2+\epsilon)$ and 1, the last with multiplicity M - 2, so "
            r"$\|J_j\|_2 = |\gamma_j| / \sqrt{\sigma_j^2+\epsilon}$ for M >= 3 (M = 2..5)",
            method="symbolic identity",
            check=lambda: all(spectral_check("layernorm", s) for s in PROOF_SIZES[1:]),
        ),
        Step(
            statement=f"M = 3, x = (0, 1, 5), gamma = 2, eps = 1/2: "
            f"$\\|J\\|_2 = {sp.latex(norm)} = 2/\\sqrt{{\\sigma^2+\\epsilon}}$ exactly",
            method="exact witness",
            check=lambda: sp.simplify(pb.block_norm_witness()[0] - pb.block_norm_witness()[1]) == 0,
        ),
        Step(
            statement=r"over all batches: a constant feature gives "
            r"$J_j = \gamma_j P/\sqrt{\epsilon}$ (M = 1..5), so the global training constant "
            r"is $\max_j|\gamma_j|/\sqrt\epsilon$ (M >= 2)",
            method="exact witness",
            check=lambda: all(attained_check("layernorm", s) for s in PROOF_SIZES),
        ),
        Step(
            statement=r"inference mode: $y = \gamma(x - \mu_{run})/\sqrt{\sigma^2_{run}+"
            r"\epsilon} + \beta$ has $\partial y/\partial x = \gamma/\sqrt{\sigma^2_{run}+"
            r"\epsilon}$, constant: its Lipschitz constant is the printed value with the "
            r"running variance",
            method="symbolic identity",
            check=lambda: is_zero(
                sp.diff(_inference(), bn.x_k) - sp.Symbol("gamma") / sp.sqrt(bn.sigma2 + eps)
            ),
        ),
    )
    # The rule of derive.check.core.APPROX_LIMIT: the worst relative error over every batch.
    # Against the global constant max|gamma|/sqrt(eps) the printed value at a batch of
    # variance sigma^2 is off by 1 - sqrt(eps/(sigma^2 + eps)): 0 at constant features,
    # tending to 1 as sigma^2/eps grows.
    s2 = sp.Symbol("sigma2", positive=True)
    e = sp.Symbol("epsilon", positive=True)  # the global constant needs eps > 0
    off = 1 - sp.sqrt(e / (s2 + e))
    worst = sp.limit(off, s2, sp.oo)
    batch_var = bn.form(SQRT).normalize(sp.Matrix([0, 1, 5]))[1]
    at_witness = sp.nsimplify(off.subs({s2: batch_var, e: sp.Rational(1, 2)}))
    steps += (
        Step(
            statement=r"the printed value against the global constant: relative error "
            rf"$1 - \sqrt{{\epsilon/(\sigma^2+\epsilon)}}$, increasing in $\sigma^2$ and "
            rf"tending to {worst} as $\sigma^2/\epsilon \to \infty$ (its supremum over "
            "batches)",
            method="symbolic limit",
            check=lambda: bool(sp.diff(off, s2).is_positive) and sp.limit(off, s2, sp.oo) == worst,
        ),
        Step(
            statement=f"the batch x = (0, 1, 5) (sigma^2 = {batch_var}), eps = 1/2: relative "
            f"error ${sp.latex(at_witness)} = {sp.N(at_witness, 6)} \\ge {APPROX_LIMIT}$",
            method="exact witness",
            check=lambda: bool(at_witness >= APPROX_LIMIT),
        ),
    )
    return result(
        c,
        approx_verdict(worst),
        "Max(Abs(gamma_j))/sqrt(epsilon)",
        Proof(
            claim=r"BatchNorm's $\mathrm{Lip}$ at a batch, over all batches, and in inference",
            steps=steps,
        ),
        witness={
            "M": "3",
            "x": "(0, 1, 5)",
            "gamma": "2",
            "eps": "1/2",
            "norm": sp.sstr(norm),
            "relative_error": sp.sstr(at_witness),
        },
        notes=(
            "value: the Lipschitz constant of the training-mode BatchNorm the row defines "
            "(mu and sigma^2 computed from the batch), max_j |gamma_j|/sqrt(eps) over all "
            "batches (M >= 2), reached at constant features. The printed value understates "
            "it by the factor sqrt(eps/(sigma^2 + eps)): worst relative error "
            f"{worst} (approached "
            f"as sigma^2/eps grows; {sp.N(at_witness, 3)} at the witness, "
            f"{sp.N(off.subs({s2: 1, e: sp.Rational(1, 10**5)}), 3)} at unit variance and "
            "eps = 1e-5), not below 1/10, so by the report's rule for '≈' it fails.",
            "Where the printed value is exact: at one training batch with M >= 3 (sigma_j^2 "
            "the batch variance) the local 2-norm Lipschitz constant is exactly "
            "max_j |gamma_j|/sqrt(sigma_j^2 + eps), and in inference mode (the running "
            "variance) so is the global one -- the reading of the paper's A.2, which treats "
            "mu and sigma as constants. M = 2: max_j |gamma_j| eps/(sigma_j^2 + eps)^(3/2); "
            "M = 1: 0.",
            "std + eps form (004): r = 1/(sigma + eps) and the same structure: locally "
            "max_j |gamma_j|/(sigma_j + eps) for M >= 3, globally max_j |gamma_j|/eps.",
        ),
        relative_error=sp.sstr(worst),
    )


def _inference() -> sp.Expr:
    rm = sp.Symbol("mu_run", real=True)
    return sp.Symbol("gamma") * (bn.x_k - rm) / sp.sqrt(bn.sigma2 + eps) + sp.Symbol("beta")


def _a2_definition(c):
    return _decide_formula(c, _derived(SQRT).xhat, SQRT, "normalized value")


def _a2_jacobian(c):
    def difference_norm() -> bool:
        f = bn.form(SQRT)
        xs = vector("x", 3)
        _, var, xhat = f.normalize(xs)
        point = {xs[0]: 0, xs[1]: 1, xs[2]: 5, eps: sp.Rational(1, 2)}
        jacobian = xhat.jacobian(xs).subs(point)
        r = 1 / sp.sqrt(var.subs(point) + sp.Rational(1, 2))
        diff = jacobian - r * sp.eye(3)
        eigenvalues = (diff.T * diff).eigenvals()
        largest = max(eigenvalues, key=lambda e: sp.N(e, 50))
        return sp.simplify(sp.sqrt(largest) - r) == 0

    def two_samples() -> bool:
        """M = 2, x = (0, t): J (1, 1) = 0 and J (1, -1) = eps r^3 (1, -1) exactly."""
        f = bn.form(SQRT)
        xs = vector("x", 2)
        t = sp.Symbol("t", positive=True)
        _, var, xhat = f.normalize(xs)
        jacobian = xhat.jacobian(xs).subs({xs[0]: 0, xs[1]: t})
        r = 1 / sp.sqrt(var.subs({xs[0]: 0, xs[1]: t}) + eps)
        ones, alternating = sp.Matrix([1, 1]), sp.Matrix([1, -1])
        residual = [*(jacobian * ones), *(jacobian * alternating - eps * r**3 * alternating)]
        return all(is_zero(entry) for entry in residual)

    steps = (
        Step(
            statement=r"$J_j - \gamma_j r_j I = -\gamma_j r_j (\mathbf{1}\mathbf{1}^\top + z "
            r"z^\top)/M$ with $\mathbf{1} \perp z$, eigenvalues 1 and $\sigma^2/(\sigma^2+"
            r"\epsilon) < 1$: the error has 2-norm $|\gamma_j| r_j$, the norm of $J_j$ itself "
            r"(M >= 3), for every M; entrywise it is $O(1/M)$ (Eq. 16-17)",
            method="symbolic identity",
            check=lambda: all(spectral_check("layernorm", s) for s in (3, 4)),
        ),
        Step(
            statement=r"M = 3, x = (0, 1, 5), eps = 1/2: $\|J - rI\|_2 = r$ exactly",
            method="exact witness",
            check=difference_norm,
        ),
        Step(
            statement=r"M = 2, x = (0, t): $J\mathbf{1} = 0$ and $J(1, -1)^\top = \epsilon r^3 "
            r"(1, -1)^\top$ (symmetric J), so $\|J\|_2 = \epsilon r^3$ while "
            r"$\|J - rI\|_2 = r$: relative error $1/(\epsilon r^2) = (\sigma^2+\epsilon)/"
            r"\epsilon$, unbounded as $\sigma^2/\epsilon \to \infty$",
            method="symbolic identity",
            check=two_samples,
        ),
    )
    return result(
        c,
        approx_verdict(sp.oo),
        "gamma_j*r*(delta_jk - 1/M - d_k*d_j*r**2/M)",
        Proof(claim=c.statement_latex, steps=steps),
        witness={"M": "3", "x": "(0, 1, 5)", "eps": "1/2", "relative_error": "1"},
        notes=(
            "value: the exact Jacobian of one feature (Eq. 16-17). The relative 2-norm error "
            "of the approximation is 1 for every batch of M >= 3 samples (the dropped "
            "rank-two part 11^T/M + z z^T/M never becomes small in norm, only entry by entry, "
            "O(1/M)) and (sigma^2 + eps)/eps at M = 2: worst relative error unbounded, not "
            "below 1/10, so by the report's rule for '≈' it fails. The two matrices still "
            "have the same 2-norm (|gamma_j| r_j for M >= 3), the quantity the paper's "
            "Lipschitz step uses.",
        ),
        relative_error="inf",
    )


def _definition_004(c):
    point = {sp.Symbol("Zbar_ii"): -1, sp.Symbol("Zbar_ik"): 1, sp.Symbol("G"): 2}
    derived = sp.Symbol("G") * sp.Symbol("Zbar_ik") + sp.Symbol("B")
    literal = c.formal.subs(point) - derived.subs(point)
    steps = (
        Step(
            statement=r"with $\overline Z_{ii} = -1 \ne \overline Z_{ik} = 1$, $G_i = 2$: the "
            r"printed line gives $B_i - 2$, the definition (B.40) $B_i + 2$",
            method="exact witness",
            check=lambda: literal == -4,
        ),
        Step(
            statement=r"intended $\widehat Z_{ik} = G_i \overline Z_{ik} + B_i$ with "
            r"$\overline Z = (Z - \mu)/(\sigma + \varepsilon)$: the std + eps form, whose "
            r"forward the kernels use (for every M, symbolic M, and at M = 1..5)",
            method="symbolic identity",
            check=lambda: (
                is_zero(c.intended - derived)
                and bn.symbolic_batchnorm_checks(STD)["output"]
                and all(bn.output_matches(STD, s) for s in PROOF_SIZES)
            ),
        ),
    )
    return result(
        c,
        Verdict.MISPRINTED,
        "G*Zbar_ik + B",
        Proof(claim=c.statement_latex, steps=steps),
        witness={"Zbar_ii": "-1", "Zbar_ik": "1", "G": "2"},
    )


def _partial_claim(c, derived, what):
    return _decide_formula(c, derived, STD, what)


def _b42(c):
    zbar, g_, b_ = sp.Symbol("Zbar_ik"), sp.Symbol("G"), sp.Symbol("B")
    return _partial_claim(c, sp.diff(g_ * zbar + b_, zbar), "dZhat/dZbar")


def _b46(c):
    d = _derived(STD)
    return _partial_claim(c, sp.Tuple(d.by_x, d.by_mu, d.by_spread), "three partials")


def _b47(c):
    return _partial_claim(c, _derived(STD).x_by_x, "dZ_ik/dZ_ij")


def _statistic_partial(which: str, size: int) -> bool:
    """d mu/dx_j = 1/M, d sigma/dx_j = (x_j - mu)/(M sigma), by sympy.diff at batch size."""
    xs = vector("x", size)
    mean = sum(xs) / size
    var = sum((v - mean) ** 2 for v in xs) / size
    for j in range(size):
        if which == "mu":
            ok = is_zero(sp.diff(mean, xs[j]) - sp.Rational(1, size))
        else:
            ok = is_zero(sp.diff(sp.sqrt(var), xs[j]) - (xs[j] - mean) / (size * sp.sqrt(var)))
        if not ok:
            return False
    return True


def _b48(c):
    result = _partial_claim(c, _derived(STD).mu_by_x, "dmu/dZ_ij")
    return _with_step(
        result,
        Step(
            statement="d mu/dZ_ij = 1/K by sympy.diff of the mean, for every batch size K "
            "(symbolic K, the mean a sum over the batch) and at K = 1..5",
            method="symbolic identity",
            check=lambda: (
                bn.symbolic_statistic_partial("mu")
                and all(_statistic_partial("mu", s) for s in PROOF_SIZES)
            ),
        ),
    )


def _b49(c):
    result = _partial_claim(c, _derived(STD).spread_by_x, "dsigma/dZ_ij")
    return _with_step(
        result,
        Step(
            statement="d sigma/dZ_ij = (Z_ij - mu)/(K sigma) by sympy.diff of the biased "
            "standard deviation, for every batch size K (symbolic K) and at K = 2..5 "
            "(sigma > 0)",
            method="symbolic identity",
            check=lambda: (
                bn.symbolic_statistic_partial("sigma")
                and all(_statistic_partial("sigma", s) for s in PROOF_SIZES[1:])
            ),
        ),
    )


def _with_step(result, step: Step):
    import dataclasses

    proof = Proof(claim=result.proof.claim, steps=(*result.proof.steps, step))
    if not proof.verify().ok:
        raise UnprovenError(proof.verify().summary())
    return dataclasses.replace(result, proof=proof)


def _b50(c):
    proof = Proof(claim=c.statement_latex, steps=(pb.derivation_step(STD),))
    return result(
        c,
        Verdict.HOLDS,
        sp.sstr(_derived(STD).assembled),
        proof,
        notes=("value: the assembled derivative (B.52) in the generic symbols.",),
    )


def _assembled(c):
    return _decide_formula(c, _derived(STD).assembled, STD, "derivative")


def _gradient(which: str):
    def decide(c):
        return result(
            c,
            Verdict.HOLDS,
            {
                "dx": "Sum(g_k*G*dZbar_k/dZ_j, (k, 1, K))",
                "dbeta": "Sum(g_k, (k, 1, K))",
                "dgamma": "Sum(g_k*Zbar_k, (k, 1, K))",
            }[which],
            pb.gradient_proof(c.statement_latex, which),
        )

    return decide


def _against_derived(c, derived: sp.Tuple, what: str, steps: tuple, value: str, note: str):
    """holds if the printed tuple equals the derived one, else fails at an exact point;
    ``steps`` prove the derived tuple (identities and a concrete batch)."""
    equal, witness = pb.compare(c.formal, derived, what)
    comparison = Step(
        statement=(
            f"the printed {what} equal the derived ones"
            if equal
            else f"at the exact point {witness['point']}, component {witness['component']} of "
            f"the printed {what} is {witness['printed']}, of the derived ones "
            f"{witness['derived']}"
        ),
        method="symbolic identity" if equal else "exact witness",
        check=lambda: pb.compare(c.formal, derived, what) == (equal, witness),
    )
    return result(
        c,
        Verdict.HOLDS if equal else Verdict.FAILS,
        value,
        Proof(claim=c.statement_latex, steps=(comparison, *steps)),
        witness=witness or None,
        notes=(() if equal else (note,)),
    )


def _moments_000(c):
    gamma, beta = sp.Symbol("gamma"), sp.Symbol("beta")
    derived = sp.Tuple(beta, gamma**2 * bn.sigma**2 / (bn.sigma**2 + eps))
    steps = (
        Step(
            statement=r"mean of the output = $\beta$ and its variance = $\gamma^2\sigma^2/"
            r"(\sigma^2+\epsilon)$, exactly (M = 2..4)",
            method="symbolic identity",
            check=lambda: all(pb.moments_hold(s) for s in (2, 3, 4)),
        ),
        Step(
            statement=r"a batch: x = (0, 2), eps = 1, gamma = 1, beta = 0 gives an output with "
            r"mean 0 and variance 1/2",
            method="exact witness",
            check=lambda: pb.moment_counterexample() == (0, sp.Rational(1, 2)),
        ),
    )
    return _against_derived(
        c,
        derived,
        "(mean, variance)",
        steps,
        "Tuple(beta_j, gamma_j**2*sigma**2/(sigma**2 + epsilon))",
        "Corrected: the mean is beta; the variance is gamma^2 sigma^2/(sigma^2 + eps), below "
        "gamma^2 for every eps > 0 (it tends to gamma^2 as eps/sigma^2 -> 0).",
    )


def _identity_000(c):
    derived = sp.Tuple(bn.mu, sp.sqrt(bn.sigma**2 + eps))
    steps = (
        Step(
            statement=r"$\gamma = \sqrt{\sigma_{\mathcal B}^2 + \epsilon}$, "
            r"$\beta = \mu_{\mathcal B}$ give $h = x$ exactly (M = 2..4)",
            method="symbolic identity",
            check=lambda: all(pb.corrected_identity(s) for s in (2, 3, 4)),
        ),
        Step(
            statement=r"a batch: x = (0, 2), eps = 1 with $\gamma = \sigma_{\mathcal B} = 1$, "
            r"$\beta = \mu_{\mathcal B} = 1$: $h - x = (1 - 1/\sqrt2, -1 + 1/\sqrt2) \ne 0$",
            method="exact witness",
            check=lambda: (
                pb.identity_counterexample() == sp.Matrix([1 - sp.sqrt(2) / 2, -1 + sp.sqrt(2) / 2])
            ),
        ),
    )
    return _against_derived(
        c,
        derived,
        "(beta, gamma)",
        steps,
        "Tuple(mu_B, sqrt(sigma_B**2 + epsilon))",
        "value: the (beta, gamma) that make the transformation the identity.",
    )


def _moments_002(c):
    derived = sp.Tuple(0, bn.sigma / sp.sqrt(bn.sigma**2 + eps))
    steps = (
        Step(
            statement=r"$\hat x$ has mean 0 and variance $\sigma^2/(\sigma^2+\epsilon)$ "
            r"exactly (the output with gamma = 1, beta = 0; M = 2..4)",
            method="symbolic identity",
            check=lambda: all(pb.moments_hold(s) for s in (2, 3, 4)),
        ),
        Step(
            statement=r"a batch: x = (0, 2), eps = 1 gives $\hat x = (-1/\sqrt2, 1/\sqrt2)$, "
            r"standard deviation $1/\sqrt2$",
            method="exact witness",
            check=lambda: pb.moment_counterexample() == (0, sp.Rational(1, 2)),
        ),
    )
    return _against_derived(
        c,
        derived,
        "(mean, standard deviation)",
        steps,
        "Tuple(0, sigma/sqrt(sigma**2 + epsilon))",
        "Corrected: mean 0 and standard deviation sigma/sqrt(sigma^2 + eps) < 1.",
    )


def _test_002(c):
    rm, rv = sp.Symbol("E_x"), sp.Symbol("Var_x", nonnegative=True)
    derived = (bn.x_k - rm) / sp.sqrt(rv + eps)
    steps = (
        Step(
            statement="the printed test-time normalization is the inference-mode kernel's "
            "(x - running_mean)/sqrt(running_var + eps)",
            method="symbolic identity",
            check=lambda: is_zero(c.formal - derived),
        ),
    )
    return result(
        c,
        Verdict.HOLDS,
        sp.sstr(derived),
        Proof(claim=c.statement_latex, steps=steps),
        notes=("E[x], Var[x]: the running statistics (running_update; PyTorch's convention).",),
    )


_CHAIN_SIZES = ((2, 2), (2, 3), (3, 2))


#: The symbolic-size checks behind each chain claim (proofs.batchnorm.symbolic_chain_checks).
_SYMBOLIC_CHAIN = {"B38": ("B39",), "B41": ("B41", "across")}


def _chain(which: str, value: str, statement: str):
    def decide(c):
        every = Step(
            statement=statement + " for every batch size K and number of features F "
            "(symbolic K and F: Z an indexed matrix, each feature's mean and std as sums over "
            "1..K, the sums over c and d collapsed by Kronecker deltas)",
            method="symbolic identity",
            check=lambda: all(pb.symbolic_chain_checks()[k] for k in _SYMBOLIC_CHAIN[which]),
        )
        concrete = Step(
            statement=statement + " (sympy.diff; batches of K = 2..3 points of 2 features "
            "and of K = 2 points of 3 features, a row per feature)",
            method="symbolic identity",
            check=lambda: all(pb.chain_through_normalized(n, k)[which] for n, k in _CHAIN_SIZES),
        )
        proof = Proof(claim=c.statement_latex, steps=(every, concrete))
        return result(c, Verdict.HOLDS, value, proof)

    return decide


def _b40(c):
    return _partial_claim(c, sp.Symbol("G") * sp.Symbol("Zbar_ik") + sp.Symbol("B"), "Zhat_ik")


def _b54(c):
    zbar, g_, b_ = sp.Symbol("Zbar_ik"), sp.Symbol("G"), sp.Symbol("B")
    return _partial_claim(c, sp.diff(g_ * zbar + b_, b_), "dZhat/dB")


def _b56(c):
    zbar, g_, b_ = sp.Symbol("Zbar_ik"), sp.Symbol("G"), sp.Symbol("B")
    return _partial_claim(c, sp.diff(g_ * zbar + b_, g_), "dZhat/dG")


def _concept19(c):
    partial, vanishes = pb.scale_shift_partials()
    steps = (
        Step(
            statement=r"for symbolic indices (every size), $\partial \widehat Z_{ab} / "
            r"\partial \overline Z_{cd} = G_a \delta_{ac} \delta_{bd}$ (sympy.diff of "
            r"indexed symbols), which is 0 when $a \neq c$ or when $b \neq d$",
            method="symbolic identity",
            check=lambda: (
                pb.scale_shift_partials()[1]
                and sp.sstr(pb.scale_shift_partials()[0]) == sp.sstr(partial)
            ),
        ),
    )
    if not (vanishes and c.formal == 0):
        raise UnprovenError(f"{c.id}: the partial does not vanish off the diagonal: {partial}")
    return result(
        c,
        Verdict.HOLDS,
        "0",
        Proof(claim=c.statement_latex, steps=steps),
        notes=(f"The partial for any indices: {sp.sstr(partial)}.",),
    )


def _concept20(c):
    zbar = sp.IndexedBase("Zbar")
    c_, d_, f_ = sp.symbols("c d f", integer=True)
    printed = sp.diff(zbar[c_, d_], zbar[c_, f_])  # KroneckerDelta(d, f)
    at_point = printed.subs({d_: 1, f_: 1})
    literal_fails = not is_zero(at_point - c.formal)
    intended = all(pb.other_features_do_not_matter(n, k) for n, k in ((2, 2), (2, 3), (3, 2)))
    steps = (
        Step(
            statement=r"as printed, $\partial \overline Z_{cd} / \partial \overline Z_{cf} "
            r"= \delta_{df}$ whatever e is: at c = 1, d = f = 1, e = 2 it is 1, not 0",
            method="exact witness",
            check=lambda: literal_fails and at_point == 1,
        ),
        Step(
            statement=r"as intended, $\partial \overline Z_{cd} / \partial Z_{ef} = 0$ "
            r"exactly whenever $c \neq e$ (sympy.diff of the std + eps normalization; "
            r"batches of K = 2..3 points of 2 features and of K = 2 points of 3 features)",
            method="symbolic identity",
            check=lambda: intended,
        ),
        Step(
            statement=r"and for every batch size K and number of features F (symbolic K and "
            r"F, each feature's statistics as sums over 1..K): $\partial \overline Z_{cd} / "
            r"\partial Z_{ef} = 0$ whenever $c \neq e$",
            method="symbolic identity",
            check=lambda: pb.symbolic_chain_checks()["concept20"],
        ),
    )
    verdict = (
        Verdict.HOLDS if not literal_fails else Verdict.MISPRINTED if intended else Verdict.FAILS
    )
    return result(
        c,
        verdict,
        "0",
        Proof(claim=c.statement_latex, steps=steps),
        witness={
            "c": "1",
            "d": "1",
            "e": "2",
            "f": "1",
            "printed": str(at_point),
            "derived": str(c.intended),
        },
        notes=("Intended: d Zbar_cd / d Z_ef = 0 for c != e, which holds.",),
    )


def _algorithm_steps() -> tuple[Step, ...]:
    return (
        Step(
            statement="the printed lines (batch mean, biased variance with 1/m, xhat with eps, "
            "h) give the forward the kernels compute, exactly (M = 1..4)",
            method="symbolic identity",
            check=lambda: all(pb.algorithm_matches(s) for s in (1, 2, 3, 4)),
        ),
        Step(
            statement="for every batch size M (symbolic M): the printed lines, their mean "
            "and biased variance as sums over 1..M, give the kernels' output stage gamma "
            "(x_k - mu) r + beta, r = 1/sqrt(var + eps)",
            method="symbolic identity",
            check=lambda: bn.symbolic_batchnorm_checks(SQRT)["output"],
        ),
    )


def _algorithm_derived() -> sp.Expr:
    return sp.Symbol("gamma") * (bn.x_k - bn.mu) / sp.sqrt(bn.sigma**2 + eps) + sp.Symbol("beta")


def _algorithm(c):
    """000's algorithm and 003's forward: the same normalization and output lines."""
    return _against_derived(
        c,
        _algorithm_derived(),
        "h_i",
        _algorithm_steps(),
        "gamma_j*(x_k - mu)/sqrt(sigma**2 + epsilon) + beta_j",
        "",
    )


def _example_000(c):
    derived = _algorithm_derived()
    at_zero = is_zero((c.formal - derived).subs(eps, 0))
    steps = (
        *_algorithm_steps(),
        Step(
            statement=r"the printed $(x - \mu)/\sigma$ is the algorithm's at eps = 0 "
            r"(for a batch whose values are not all equal)",
            method="symbolic identity",
            check=lambda: at_zero,
        ),
    )
    return _against_derived(
        c,
        derived,
        "h",
        steps,
        "gamma_j*(x_k - mu)/sqrt(sigma**2 + epsilon) + beta_j",
        "Corrected: xhat = (x - mu)/sqrt(sigma^2 + eps) as in 000's own algorithm; the "
        "example's (x - mu)/sigma is its eps = 0 case, undefined for a constant batch.",
    )


def _batch_one_000(c):
    computed = sp.Tuple(*pb.batch_of_one())
    # the claims' symbols carry no assumptions
    derived = computed.subs({v: sp.Symbol(v.name) for v in computed.free_symbols})
    partial = pb.other_sample_partial()
    steps = (
        Step(
            statement=r"the training forward at a batch of one (M = 1): the sample is its own "
            r"mean, $x_1 - \mu = 0$, so $h_1 = \beta$ and $dh_1/dx_1 = 0$ for every $x_1$, "
            r"$\gamma$, $\epsilon$ (sympy.diff of the kernels' forward)",
            method="symbolic identity",
            check=lambda: pb.batch_of_one() == tuple(computed),
        ),
        Step(
            statement=r"and a sample's output depends on the rest of its batch: at M = 2, "
            rf"x = (0, 2), $\gamma = 1$, eps = 1, $dh_1/dx_2 = {sp.latex(partial)}$",
            method="exact witness",
            check=lambda: not is_zero(pb.other_sample_partial()),
        ),
    )
    return _against_derived(
        c,
        derived,
        "(h_1, dh_1/dx_1) at M = 1",
        steps,
        "Tuple(beta, 0)",
        "At a batch of one the training forward returns beta whatever the input, and no "
        "gradient reaches x.",
    )


def _moving_average_001(c):
    derived = sp.Tuple(1 / bn.m, (bn.x_k - bn.mu) / (bn.m * bn.sigma))
    steps = (
        Step(
            statement="the training forward normalizes with the batch's own mean and biased "
            "std (000, 002 and 004's algorithms; PyTorch and kernels.batchnorm with "
            "training=True): d mu/dx_k = 1/M and d sigma/dx_k = (x_k - mu)/(M sigma) by "
            "sympy.diff, for every batch size M (symbolic M) and at M = 2..5",
            method="symbolic identity",
            check=lambda: (
                bn.symbolic_statistic_partial("mu")
                and bn.symbolic_statistic_partial("sigma")
                and all(_statistic_partial(w, s) for w in ("mu", "sigma") for s in (2, 3, 4, 5))
            ),
        ),
    )
    return _against_derived(
        c,
        derived,
        "(d mu/dx_k, d sigma/dx_k)",
        steps,
        "Tuple(1/M, (x_k - mu)/(M*sigma))",
        "The moving averages are updated in training (running_003) but normalize only in "
        "inference mode (test_002); the training forward's mean and std are functions of the "
        "batch, and its Jacobian has the rank-two part A.2 drops.",
    )


def _normalize_002(c):
    steps = (
        Step(
            statement=r"$(x - \mu_{\mathcal B})/\sqrt{\sigma_{\mathcal B}^2}$ has mean 0 and "
            r"variance 1 exactly whenever the batch's values are not all equal "
            r"(the output with gamma = 1, beta = 0, eps = 0; M = 2..4)",
            method="symbolic identity",
            check=lambda: all(
                pb.moments_without_eps(s)
                == (sp.Symbol("beta", real=True), sp.Symbol("gamma", real=True) ** 2)
                for s in (2, 3, 4)
            ),
        ),
        Step(
            statement=r"for every batch size M (symbolic M, the batch's mean and variance as "
            r"sums over 1..M): $(x_k - \mu)/\sqrt{\sigma^2}$ has mean 0 and variance 1",
            method="symbolic identity",
            check=lambda: pb.symbolic_moments_without_eps(1, 0, 0, 1),
        ),
    )
    return _against_derived(
        c, sp.Tuple(0, 1), "(mean, standard deviation)", steps, "Tuple(0, 1)", ""
    )


def _shift_002(c):
    beta, gamma = sp.Symbol("beta", real=True), sp.Symbol("gamma", real=True)
    derived = sp.Tuple(beta, sp.Abs(gamma))
    steps = (
        Step(
            statement=r"$\gamma a + \beta$ for a batch a of mean 0 and variance 1 has mean "
            r"$\beta$ and variance $\gamma^2$, so standard deviation $|\gamma|$ "
            r"(M = 2..4)",
            method="symbolic identity",
            check=lambda: all(pb.moments_without_eps(s) == (beta, gamma**2) for s in (2, 3, 4)),
        ),
        Step(
            statement=r"for every batch size M (symbolic M): $\gamma a + \beta$ has mean "
            r"$\beta$ and variance $\gamma^2$",
            method="symbolic identity",
            check=lambda: pb.symbolic_moments_without_eps(gamma, beta, beta, gamma**2),
        ),
        Step(
            statement=r"gamma = -1: the output's standard deviation is 1, not -1",
            method="exact witness",
            check=lambda: sp.sqrt(pb.moments_without_eps(2)[1].subs(gamma, -1)) == 1,
        ),
    )
    point = {beta: sp.Integer(0), gamma: sp.Integer(-1)}
    differs = [i for i in range(2) if not is_zero((c.formal[i] - derived[i]).subs(point))]
    equal = all(is_zero(p - d) for p, d in zip(c.formal, derived, strict=True))
    if not equal and not differs:
        raise UnprovenError("shift_002: the moments differ, but not at gamma = -1")
    named = {beta: sp.Symbol("beta_j", real=True), gamma: sp.Symbol("gamma_j", real=True)}
    return result(
        c,
        Verdict.HOLDS if equal else Verdict.FAILS,
        sp.sstr(derived.subs(named)),  # gamma alone would parse as the Gamma function
        Proof(claim=c.statement_latex, steps=steps),
        witness=None
        if equal
        else {
            "point": {str(k): str(v) for k, v in point.items()},
            "component": differs[0],
            "printed": str(c.formal[differs[0]].subs(point)),
            "derived": str(derived[differs[0]].subs(point)),
        },
        notes=(
            "Corrected: the new standard deviation is |gamma|. gamma is learned freely "
            "(PyTorch starts it at 1 and does not keep it positive); a negative gamma also "
            "flips the sign of every normalized value.",
        ),
    )


def _running_003(c):
    derived = bn.running_update()
    printed, pytorch = pb.running_counterexample()
    steps = (
        Step(
            statement=r"the running mean: $m \mu^{run} + (1 - m) \mu^{batch}$ is PyTorch's "
            r"$(1 - p) \mu^{run} + p \mu^{batch}$ with $m = 1 - p$ (symbolic identity)",
            method="symbolic identity",
            check=lambda: pb.running_update_gap()[0] == 0,
        ),
        Step(
            statement=r"the running variance: PyTorch adds the unbiased batch variance, "
            r"$M/(M-1)$ times the biased one, so its update exceeds the printed one by "
            r"$(1 - m)(\sigma^2)^{batch}/(M - 1)$, for every batch size M",
            method="symbolic identity",
            check=lambda: is_zero(
                pb.running_update_gap()[1] - (1 - bn.keep) * bn.var_batch / (bn.m - 1)
            ),
        ),
        Step(
            statement=r"a batch: x = (0, 2), running statistics (0, 1), m = 9/10: the printed "
            r"update gives (1/10, 1), PyTorch's (1/10, 11/10)",
            method="exact witness",
            check=lambda: (
                printed == sp.Tuple(sp.Rational(1, 10), 1)
                and pytorch == sp.Tuple(sp.Rational(1, 10), sp.Rational(11, 10))
            ),
        ),
    )
    equal = all(is_zero(gap) for gap in pb.running_update_gap())
    differs = [i for i in range(2) if not is_zero(printed[i] - pytorch[i])]
    if not equal and not differs:
        raise UnprovenError("running_003: the updates differ, but not at the witness batch")
    return result(
        c,
        Verdict.HOLDS if equal else Verdict.FAILS,
        sp.sstr(derived),
        Proof(claim=c.statement_latex, steps=steps),
        witness=None
        if equal
        else {
            "point": {k: str(v) for k, v in pb.RUNNING_POINT.items()},
            "component": differs[0],
            "printed": str(printed[differs[0]]),
            "derived": str(pytorch[differs[0]]),
        },
        notes=(
            "The running mean is PyTorch's with m = 1 - momentum; the running variance is "
            "not: PyTorch (and kernels.batchnorm.running_update) average the unbiased batch "
            "variance, so after many batches of M values the printed running variance is "
            "(M - 1)/M times PyTorch's (1/2 at M = 2). As an exponential average of the "
            "biased variance the printed update is self-consistent; it is not the "
            "convention the frameworks' inference mode divides by.",
        ),
    )


DECIDERS: dict[str, Callable[[Claim], object]] = {
    "batchnorm.eq15": _eq15,
    "batchnorm.eq16": _eq16,
    "batchnorm.eq17": _eq17,
    "batchnorm.jacobian": _table_jacobian,
    "batchnorm.lipschitz": _lipschitz,
    "batchnorm.a2_definition": _a2_definition,
    "batchnorm.a2_jacobian": _a2_jacobian,
    "batchnorm.definition_004": _definition_004,
    "batchnorm.B38": _chain(
        "B38",
        "Sum(dZhat_ab/dZbar_cd*dZbar_cd/dZ_ef, (c, 1, n), (d, 1, K))",
        "the Jacobian of Zhat by Z equals the product of Zhat's by Zbar and Zbar's by Z",
    ),
    "batchnorm.B39": _chain(
        "B38",
        "Sum(dZhat_ab/dZbar_cd*dZbar_cd/dZ_ef, (c, 1, n), (d, 1, K))",
        "entry by entry, dZhat_ab/dZ_ef is the sum over c, d of dZhat_ab/dZbar_cd dZbar_cd/dZ_ef",
    ),
    "batchnorm.B40": _b40,
    "batchnorm.concept19": _concept19,
    "batchnorm.concept20": _concept20,
    "batchnorm.B41": _chain(
        "B41",
        "G*dZbar_ik/dZ_ij",
        "dZhat_ik/dZ_ij is the single product G_i dZbar_ik/dZ_ij, and entries across "
        "features vanish",
    ),
    "batchnorm.B44": _b50,
    "batchnorm.B42": _b42,
    "batchnorm.B46": _b46,
    "batchnorm.B47": _b47,
    "batchnorm.B48": _b48,
    "batchnorm.B49": _b49,
    "batchnorm.B50": _b50,
    "batchnorm.B51": _assembled,
    "batchnorm.B52": _assembled,
    "batchnorm.KE21": _assembled,
    "batchnorm.B53": _gradient("dx"),
    "batchnorm.B55": _gradient("dbeta"),
    "batchnorm.B54": _b54,
    "batchnorm.B56": _b56,
    "batchnorm.B57": _gradient("dgamma"),
    "batchnorm.KE22": _gradient("dbeta"),
    "batchnorm.algorithm_000": _algorithm,
    "batchnorm.example_000": _example_000,
    "batchnorm.forward_003": _algorithm,
    "batchnorm.batch_one_000": _batch_one_000,
    "batchnorm.moments_000": _moments_000,
    "batchnorm.identity_000": _identity_000,
    "batchnorm.moments_002": _moments_002,
    "batchnorm.test_002": _test_002,
    "batchnorm.moving_average_001": _moving_average_001,
    "batchnorm.normalize_002": _normalize_002,
    "batchnorm.shift_002": _shift_002,
    "batchnorm.running_003": _running_003,
}


def check_batchnorm(c: Claim):
    """The verdict of a BatchNorm claim."""
    return DECIDERS[c.id](c)
