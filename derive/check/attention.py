"""Verdicts of the attention rows (DP, L2, SCS) of Table 2 and Eq. 20, 53, 54.

Definitions: the printed forms (tokens as columns, column softmax) are compared with the
kernels' (:mod:`derive.definitions.attention`) by :func:`proofs.matrices.decide`. Lipschitz
constants:
DP's "infinity" by an explicit family whose Jacobian grows without bound (a proof); the
printed L2 and SCS bounds are enclosed in arb and tested against the largest Jacobian norms
an adversarial search finds (:mod:`proofs.attention`) -- evidence, labelled as such.
"""

from __future__ import annotations

import math
from functools import cache

import sympy as sp
from flint import arb

from derive.check.core import result
from derive.claims import Claim
from derive.definitions import attention as A
from derive.definitions.rows import matrix
from proofs import attention as PA
from proofs.core import Proof, Step, UnprovenError, Verdict
from proofs.matrices import Case, decide
from proofs.spectral import sigma_max

#: The exact point of the definition witnesses: N = 2 tokens of width 1, unit weights.
_POINT_X = sp.Matrix([[0], [1]])


def _dp_definition(c: Claim):
    cases = []
    for size in (A.Size(2, 1, 1, 1), A.Size(2, 2, 2, 1), A.Size(3, 2, 1, 2)):
        X, _, (Wq, Wk, Wv) = A._symbols("dp_attention", size)
        cases.append(
            Case(
                f"{size}",
                lambda X=X, Wq=Wq, Wk=Wk, Wv=Wv: A.paper_dp(X.T, Wq, Wk, Wv).T,
                lambda X=X, Wq=Wq, Wk=Wk, Wv=Wv: A.dp(X, Wk, Wq, Wv),
                {},
            )
        )
    decision = decide(
        c.statement_latex,
        cases,
        "Eq. 20 with X_p = X^T (tokens as columns, softmax down each column), transposed, "
        "equals dp_attention(X, W^K, W^Q, W^V): the kernel's map with the roles of W^Q and "
        "W^K exchanged",
    )
    return decision


def _l2_definition(c: Claim):
    one = sp.Matrix([[1]])
    printed = Case(
        "N = 2, D = d = dv = 1, W^Q = W^K = W^V = 1, X = (0, 1): Eq. 53 as printed (its "
        "logits vanish when W^Q = W^K) against Kim et al.'s L2 attention",
        lambda: A.paper_l2_printed(_POINT_X.T, one, one, one).T,
        lambda: A.l2(_POINT_X, one, one),
        {},
    )
    intended = []
    for size in (A.Size(2, 1, 1, 1), A.Size(2, 2, 2, 1), A.Size(3, 1, 1, 2)):
        X = matrix("X", size.n, size.D)
        Wq, Wv = matrix("Wq", size.d, size.D), matrix("Wv", size.dv, size.D)
        intended.append(
            Case(
                f"{size}",
                lambda X=X, Wq=Wq, Wv=Wv: A.paper_l2_intended(X.T, Wq, Wv).T,
                lambda X=X, Wq=Wq, Wv=Wv: A.l2(X, Wq, Wv),
                {},
            )
        )
    return decide(
        c.statement_latex,
        [printed],
        "the printed attention equals Kim et al.'s",
        intended,
        "Kim et al.'s L2 attention in the paper's layout -- logits -|W^Q x_i - W^Q x_j|^2 / "
        "sqrt(d), softmax down columns, value W^V A X with A = W^Q^T W^Q / sqrt(d) -- equals "
        "l2_attention(X, W^Q, W^V), transposed",
    )


def _scs_definition(c: Claim):
    nu, tau = sp.symbols("nu tau", real=True)
    eps = sp.Symbol("epsilon", positive=True)
    cases = []
    for size in (A.Size(2, 1, 1, 1), A.Size(2, 1, 2, 2)):
        X, _, (Wq, Wk, Wv, *_) = A._symbols("scs_attention", size)
        cases.append(
            Case(
                f"{size}",
                lambda X=X, Wq=Wq, Wk=Wk, Wv=Wv: A.paper_scs(X.T, Wq, Wk, Wv, nu, tau, eps).T,
                lambda X=X, Wq=Wq, Wk=Wk, Wv=Wv: A.scs(X, Wk, Wq, Wv, nu, tau, eps),
                {},
            )
        )
    return decide(
        c.statement_latex,
        cases,
        "Eq. 54 with X_p = X^T (columns normalized, softmax down columns), transposed, "
        "equals scs_attention(X, W^K, W^Q, W^V, nu, tau, eps): the kernel's map with W^Q "
        "and W^K exchanged",
    )


MAPPING_NOTE = (
    "The kernels take tokens as rows with a row softmax; the printed form is the same map "
    "with the roles of W^Q and W^K exchanged, transposed."
)


def _definition(c: Claim):
    decide_fn = {
        "dp_attention": _dp_definition,
        "l2_attention": _l2_definition,
        "scs_attention": _scs_definition,
    }[c.key]
    verdict, proof, witness = decide_fn(c)
    notes = [MAPPING_NOTE]
    if c.key == "l2_attention":
        notes.append(
            "As printed, (W^Q X - W^K X)^T (W^Q X - W^K X) is the Gram matrix of q_i - k_i, "
            "not the distances |q_i - k_j|^2, and it vanishes under the tying W^Q = W^K the "
            "row requires (uniform attention); the value lacks Kim et al.'s A = W^Q^T W^Q / "
            "sqrt(D/H)."
        )
    value = {
        "dp_attention": "softmax(q*k_T/sqrt(d))*v",
        "l2_attention": "P*X*A*Wv_T",
        "scs_attention": "nu*softmax(tau*Qn*Kn_T)*Vn",
    }[c.key]
    return result(c, verdict, value, proof, witness=witness, notes=tuple(notes))


#: The search settings of the evidence steps (N tokens, and the search effort).
SEARCH_N = (2, 3)
SEARCH_STARTS, SEARCH_STEPS = 8, 80


@cache
def search_results(module: str) -> tuple:
    """The adversarial search over the module's standard settings (evidence); run once per
    process (the claim and the report's table both show it)."""
    radius = 2.0 if module == "dp_attention" else None
    return tuple(
        PA.max_jacobian_norm(
            module,
            setting.params,
            n,
            starts=SEARCH_STARTS,
            steps=SEARCH_STEPS,
            seed=0,
            radius=radius,
        )
        for setting in PA.standard_settings(module)
        for n in SEARCH_N
    )


def _dp(c: Claim):
    proof = PA.dp_unbounded()
    if c.formal != sp.oo:
        raise UnprovenError(f"{c.id}: printed {c.formal}, the family proves it unbounded")
    return result(
        c,
        Verdict.HOLDS,
        "oo",
        proof,
        witness=dict(PA.DP_FAMILY),
        notes=(
            "Growth: along X = (t, 0) with unit weights, |J|_2 ~ t^2/4 (quadratic in |X|); "
            "in general DP attention is unbounded whenever W^Q^T W^K != 0 and W^V != 0.",
        ),
    )


def _l2(c: Claim):
    proof = PA.l2_printed_fails()
    witness = dict(PA.L2_WITNESS)
    one = [[1]]
    printed = PA.printed_l2_bound(witness["N"], witness["Wq"], one)
    # |J(0)|_2 of the witness's exact Jacobian (proven in the steps above), enclosed in arb
    attained = sigma_max(witness["jacobian"]).lo
    if not attained > printed.hi:
        raise UnprovenError(f"{c.id}: the witness does not exceed the printed constant")
    best = max(
        (r for r in search_results("l2_attention") if r.ratio is not None),
        key=lambda r: r.ratio,
    )
    return result(
        c,
        Verdict.FAILS,
        "sigma_max_WqTWqWvT/sqrt(d)",
        proof,
        witness={**witness, "printed": printed.decimal(35)[1]},
        notes=(
            "value: |J(0)|_2 = |W^Q^T W^Q W^V^T|_2/sqrt(d), a lower bound of the constant: the "
            "map scales like |W^Q|^2 (W^Q -> c W^Q multiplies its constant by c^2) while the "
            "printed constant scales like |W^Q|, so it fails for every weight large enough "
            "(W^Q = c I, W^V = I: for c > sqrt(N)(4 W_0((N-1)/e) + 1), 2.989 at N = 2).",
            "The same formula with |W^Q|_2^2 in place of |W^Q|_2 was never exceeded by the "
            "search (evidence, not proof).",
            f"Adversarial search (evidence): largest ratio of |J|_2 to the printed constant "
            f"{best.ratio:.4f} ({best.n} tokens).",
        ),
    )


def _scs(c: Claim):
    holds = PA.scs_printed_holds()
    results = search_results("scs_attention")
    lower, printed = PA.scs_witness_ratio()
    searched = tuple(r.step() for r in results)
    steps = (*holds.steps, PA.scs_single_token_step(), PA.scs_witness_step(), *searched)
    proof = Proof(holds.claim, steps)
    derived_there = PA.derived_scs_bound(2, *PA.scs_witness_weights())
    worst = max(r.ratio for r in results)
    witness_ratio = float(lower) / float(printed.hi)
    # Loose, not tight: at every searched setting the derived bound lies below the printed one.
    below = all(PA.derived_scs_bound(r.n, *r.weights).hi < r.bound.lo for r in results)
    if not below:
        raise UnprovenError(f"{c.id}: the derived bound does not undercut the printed one")
    return result(
        c,
        Verdict.HOLDS_LOOSE,
        "nu*(n*tau*(sigma_Wq + sigma_Wk)/2 + sqrt(n)*sigma_Wv)/sqrt(eps)",
        proof,
        witness={k: v for k, v in results[0].as_dict().items() if k != "seconds"},  # no clock
        notes=(
            "value: a smaller upper bound, derived step by step; each of its coefficients is "
            "at most the printed one for N >= 2, so the printed constant holds and, being "
            "larger, is not tight. The last step's chain of norm inequalities is stated, only "
            "its coefficient comparison is machine-checked; the search is evidence: hence not "
            "rigorous.",
            "How loose, between proven bounds: at N = 1 the tight constant is exactly half the "
            "printed one (nu |W^V|_2/sqrt(eps)); at N = 2, with the weights chosen as well as X, "
            f"|J|_2 reaches {float(lower):.9f} where the printed constant is "
            f"{float(printed.hi):.6f}, a ratio of {witness_ratio:.4f} (arb, at an exact point). "
            "So the printed constant overstates the supremum by a factor of at most about 2 "
            f"there, and the derived bound ({float(derived_there.hi):.6f} at those weights) is "
            f"within {float((derived_there.hi - lower) / lower):.2%} of it; the tight constant "
            "for every N >= 2 and all weights is not "
            "known here.",
            "Orientation: Eq. 54 read in the kernel's layout puts the paper's W^K in the "
            "kernel's Wq and its W^Q in the kernel's Wk (scs_attention.definition); the "
            "printed constant is evaluated with the same reading, 2N(N-1) with |W^K|.",
            f"Adversarial search over X at three fixed weight settings (evidence): the largest "
            f"ratio of |J|_2 to the printed constant found is {worst:.4f}, well below the "
            "constructed one: a search over X alone understates how close the constant comes.",
        ),
    )


def _l2_tied(c: Claim):
    w_star, g_star = PA.tied_gain_maximum()
    partial = PA.untied_two_token_partial()
    steps = (
        Step(
            statement=r"N = 2 tokens, D = d = 1, $W^Q = W^K = (q)$, $W^V = (v)$ (symbolic): "
            r"the Jacobian depends on $t = x_1 - x_2$ alone and is $[[a, b], [b, a]]$ with "
            r"eigenvalues $a + b = q^2 v$ and $a - b = q^2 v\, g(q^2 t^2)$, $g(w) = "
            r"\tanh(w/2) + w\,\mathrm{sech}^2(w/2)$: $\|J\|_2 = q^2 |v| \max(1, g)$",
            method="symbolic identity",
            check=PA.tied_two_token_spectrum,
        ),
        Step(
            statement=r"$g'(w) = \mathrm{sech}^2(w/2)(3/2 - w \tanh(w/2))$ with "
            r"$w\tanh(w/2)$ increasing on w > 0, and $g \to 1$ as $w \to \infty$: g has "
            r"one maximum, at the root of $w \tanh(w/2) = 3/2$ (N = 2, D = 1)",
            method="symbolic identity",
            check=PA.tied_gain_slope,
        ),
        Step(
            statement=rf"the root $w^* \in {w_star.str(12, radius=False)}$ is isolated by the "
            r"signs at the ends of its bracket, and $\max g = g(w^*) \in "
            rf"{g_star.str(12)}$ > 1: the constant at N = 2, D = 1 is "
            r"$q^2 |v| \max g$, finite",
            method="arb enclosure",
            check=lambda: PA.tied_gain_maximum()[1] > 1,
        ),
        Step(
            statement=r"untied, $W^Q = (1) \neq W^K = (2)$, $W^V = (1)$, at X = (s, 0): "
            rf"$\partial Y_1 / \partial x_2 = {sp.latex(partial)}$, unbounded in s: without "
            r"the tie there is no constant",
            method="exact witness",
            check=lambda: (
                sp.limit(PA.untied_two_token_partial(), sp.Symbol("s", positive=True), sp.oo)
                == -sp.oo
            ),
        ),
    )
    bound = sp.Rational(math.ceil(float(g_star.upper()) * 10**7), 10**7)
    if not arb(str(bound)) > g_star:  # rounded up, so the value is an upper bound
        raise UnprovenError(f"{c.id}: {bound} does not bound the enclosure {g_star}")
    return result(
        c,
        Verdict.HOLDS,
        f"{float(bound)}*q**2*Abs(v)",
        Proof(claim=c.statement_latex, steps=steps),
        notes=(
            f"value: an upper bound of the exact constant q^2 |v| g(w*) at N = 2 tokens of "
            f"one feature, g(w*) in {g_star.str(15)}. For every N and D the statement is "
            "Kim et al.'s theorem (their proof, not machine-checked here); liptable checks it "
            "at N = 2, D = 1 only. The exact constant there is of degree 2 in W^Q, where "
            "Table 2's is of degree 1 (l2_attention.lipschitz).",
        ),
    )


def lipschitz(c: Claim):
    """The verdict of an attention Lipschitz claim."""
    return {"dp_attention": _dp, "l2_attention": _l2, "scs_attention": _scs}[c.key](c)


def check_attention(c: Claim):
    """The verdict of an attention claim."""
    if c.kind == "definition":
        return _definition(c)
    if c.id == "l2_attention.tied":
        return _l2_tied(c)
    return lipschitz(c)
