"""Verdicts of the attention rows (DP, L2, SCS) of Table 2 and Eq. 20, 53, 54.

Definitions: the printed forms (tokens as columns, column softmax) are compared with the
kernels' (:mod:`derive.definitions.attention`) by :func:`proofs.matrices.decide`. Lipschitz constants:
DP's "infinity" by an explicit family whose Jacobian grows without bound (a proof); the
printed L2 and SCS bounds are enclosed in arb and tested against the largest Jacobian norms
an adversarial search finds (:mod:`proofs.attention`) -- evidence, labelled as such.
"""

from __future__ import annotations

import sympy as sp

from derive.check.norms import _result
from derive.claims import Claim
from derive.definitions import attention as A
from derive.definitions.rows import matrix
from proofs.matrices import Case, decide

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
    return _result(c, verdict, value, proof, witness=witness, notes=tuple(notes))


def check_attention(c: Claim):
    """The verdict of an attention claim."""
    if c.kind == "definition":
        return _definition(c)
    from derive.check.attention_lipschitz import lipschitz

    return lipschitz(c)
