"""Proofs that a printed expression equals a derived one, or a rerunnable counterexample.

Definitions, Jacobians and equations of the sources are decided here: an exact identity
(``simplify``-based, Piecewise branch by branch) proves equality; otherwise an exact rational
point where the difference is certainly nonzero -- its arb enclosure excludes 0 -- proves
the printed statement false.
"""

from __future__ import annotations

import sympy as sp

from derive.definitions.activations import x
from proofs.arb import ArbTranslationError, enclose, sign
from proofs.core import Proof, Step, is_zero

#: Exact points tried, in order, when looking for a counterexample (0 first: the kinks).
PROBE_POINTS = tuple(
    sp.Rational(p, q) for p, q in ((0, 1), (1, 1), (-1, 1), (1, 2), (2, 1), (-3, 1))
)

#: Precision (bits) of the enclosures that certify a counterexample.
PRECISION = 256


def equal(a: sp.Expr, b: sp.Expr) -> bool:
    """True only if ``a == b`` for every real x is proven (Piecewise branch by branch)."""
    difference = sp.piecewise_fold((a - b).rewrite(sp.Piecewise))
    if isinstance(difference, sp.Piecewise):
        return all(is_zero(branch) for branch, _ in difference.args)
    return is_zero(difference)


def _value(expr: sp.Expr) -> sp.Expr:
    """An exact value: the branch a Piecewise takes at an exact point, or the number."""
    return sp.piecewise_fold(expr).doit() if expr.has(sp.Piecewise) else expr


def _certainly_nonzero(difference: sp.Expr) -> bool:
    try:
        return sign(enclose(difference, prec=PRECISION)) != 0
    except ArbTranslationError:
        return sp.simplify(difference).is_zero is False


def counterexample(printed: sp.Expr, derived: sp.Expr) -> dict | None:
    """The first exact point of :data:`PROBE_POINTS` where ``printed - derived`` is
    certainly nonzero, with both values to 40 digits; None if there is none."""
    for point in PROBE_POINTS:
        p, d = _value(printed.subs(x, point)), _value(derived.subs(x, point))
        if _certainly_nonzero(p - d):
            return {"x": str(point), "printed": str(sp.N(p, 40)), "derived": str(sp.N(d, 40))}
    return None


def equality_proof(statement_latex: str, printed: sp.Expr, derived: sp.Expr, what: str) -> Proof:
    """``printed`` equals ``derived`` (the module's ``what``) for every real x."""
    return Proof(
        claim=f"${statement_latex}$ equals the derived {what}",
        steps=(
            Step(
                statement=(
                    f"$({sp.latex(printed)}) - ({sp.latex(derived)}) = 0$ for every real $x$"
                ),
                method="symbolic identity",
                check=lambda: equal(printed, derived),
            ),
        ),
    )


def counterexample_proof(
    statement_latex: str, printed: sp.Expr, derived: sp.Expr, what: str, witness: dict
) -> Proof:
    """``printed`` differs from ``derived`` at the exact point of ``witness``."""
    point = sp.Rational(witness["x"])
    return Proof(
        claim=f"${statement_latex}$ differs from the derived {what}",
        steps=(
            Step(
                statement=(
                    f"at the exact point $x = {witness['x']}$ the printed value is "
                    f"{witness['printed'][:20]} and the derived one {witness['derived'][:20]}; "
                    "the ball enclosing their difference excludes 0"
                ),
                method="arb enclosure",
                check=lambda: _certainly_nonzero(
                    _value(printed.subs(x, point)) - _value(derived.subs(x, point))
                ),
            ),
        ),
    )
