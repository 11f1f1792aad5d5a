"""Verdicts of the elementwise activations' claims (Sigmoid, ReLU, GeLU, Swish): printed
definitions and derivatives against :mod:`derive.definitions.activations` (an identity or
an exact counterexample), printed "≈" approximations by their largest deviation, and
printed Lipschitz constants against :func:`proofs.activations.sup_abs_derivative`.
"""

from __future__ import annotations

from functools import cache

import mpmath
import sympy as sp
from flint import arb

from derive.check.core import APPROX_LIMIT, DIGITS, Result, approx_verdict, decimal, run
from derive.claims import Claim
from derive.definitions.activations import elementwise, x
from proofs.activations import sup_abs_derivative
from proofs.arb import to_arb, working_precision
from proofs.core import Proof, Step, UnprovenError, Verdict
from proofs.identities import counterexample, counterexample_proof, equal, equality_proof


def _identity_result(c: Claim) -> Result:
    module = elementwise(c.key)
    derived = module.forward if c.kind == "definition" else module.derivative
    what = "forward" if c.kind == "definition" else "derivative (sympy.diff of the forward)"
    if equal(c.formal, derived):
        proof = equality_proof(c.statement_latex, c.formal, derived, what)
        run(proof)
        return Result(c, Verdict.HOLDS, sp.sstr(derived), None, "symbolic identity", True, proof)
    witness = counterexample(c.formal, derived)
    if witness is None:
        raise UnprovenError(f"{c.id}: identity not proven, and no counterexample found")
    proof = counterexample_proof(c.statement_latex, c.formal, derived, what, witness)
    run(proof)
    return Result(
        c, Verdict.FAILS, sp.sstr(derived), None, "arb enclosure", True, proof, witness=witness
    )


#: Where the largest deviation of a printed approximation is sought (evidence): a grid of
#: this step on [-SEARCH_RADIUS, SEARCH_RADIUS], refined by root finding on the slope.
SEARCH_RADIUS, SEARCH_STEP = 8, sp.Rational(1, 100)


@cache
def _largest_deviation(printed: sp.Expr, exact: sp.Expr) -> tuple[mpmath.mpf, mpmath.mpf]:
    """max |printed - exact| over the reals and where, by a grid and mpmath.findroot.

    Evidence, not proof: the reports label it so.
    """
    error = sp.lambdify(x, printed - exact, "mpmath")
    slope = sp.lambdify(x, sp.diff(printed - exact, x), "mpmath")
    with mpmath.workdps(60):
        count = int(2 * SEARCH_RADIUS / SEARCH_STEP)
        step = mpmath.mpf(SEARCH_STEP.p) / SEARCH_STEP.q
        grid = [-SEARCH_RADIUS + k * step for k in range(count + 1)]
        start = max(grid, key=lambda t: abs(error(t)))
        where = mpmath.findroot(slope, start)
        return abs(error(where)), where


def _relative_error(printed: sp.Expr, exact: sp.Expr) -> sp.Expr:
    return sp.Abs(printed - exact) / sp.Abs(exact)


@cache
def _first_beyond_limit(printed: sp.Expr, exact: sp.Expr) -> sp.Rational | None:
    """The point of the search grid nearest 0 (either sign) where the relative error reaches
    :data:`APPROX_LIMIT` (found in mpmath; the caller proves it at that exact point)."""
    relative = sp.lambdify(x, _relative_error(printed, exact), "mpmath")
    limit = mpmath.mpf(APPROX_LIMIT.p) / APPROX_LIMIT.q
    with mpmath.workdps(60):
        for k in range(1, int(SEARCH_RADIUS / SEARCH_STEP) + 1):  # x = 0: both are 0
            for point in (-k * SEARCH_STEP, k * SEARCH_STEP):
                if relative(mpmath.mpf(point.p) / point.q) >= limit:
                    return sp.Rational(point)
    return None


def _reaches_limit(printed: sp.Expr, exact: sp.Expr, point: sp.Rational) -> bool:
    """Rigorous: the relative error at the exact ``point`` is at least APPROX_LIMIT (arb)."""
    deviation, value = to_arb(printed - exact, x), to_arb(exact, x)
    with working_precision(256):
        at = arb(point.p) / point.q
        return bool(abs(deviation(at)) - abs(value(at)) * arb(APPROX_LIMIT.p) / APPROX_LIMIT.q > 0)


@cache
def _ratio_limits(printed: sp.Expr, exact: sp.Expr) -> tuple[sp.Expr, sp.Expr]:
    """``lim printed/exact`` at -oo and at +oo (SymPy)."""
    return tuple(sp.limit(printed / exact, x, side) for side in (-sp.oo, sp.oo))


def _approximation_result(c: Claim) -> Result:
    """The worst relative error of a printed "≈" function over the reals (the one rule of
    :data:`derive.check.core.APPROX_LIMIT`): unbounded where the ratio to the exact function
    grows without bound in a tail, then ``fails`` with the exact point nearest 0 where the
    relative error reaches the limit. The largest absolute deviation is reported beside it
    (found by search: evidence)."""
    module = elementwise(c.key)
    quantity = "forward" if c.kind == "definition" else "derivative"
    exact = module.forward if c.kind == "definition" else module.derivative
    size, where = _largest_deviation(c.formal, exact)
    relative = sp.lambdify(x, _relative_error(c.formal, exact), "mpmath")
    with mpmath.workdps(60):
        here, there = relative(where), relative(-where)
    limits = _ratio_limits(c.formal, exact)
    tails = [
        name
        for name, limit in zip(("x -> -oo", "x -> +oo"), limits, strict=True)
        if limit in (sp.oo, -sp.oo)
    ]
    if not tails:  # none of the sources' "≈" functions: their ratio diverges in a tail
        raise UnprovenError(
            f"{c.id}: the relative error is bounded; its supremum needs a search over the "
            "reals that this checker does not make"
        )
    worst = sp.oo
    steps = [
        Step(
            statement=(
                f"$|({sp.latex(c.formal)}) / ({sp.latex(exact)})| \\to \\infty$ as "
                f"{' and '.join(tails)}: the relative error is unbounded"
            ),
            method="symbolic limit",
            check=lambda: any(v in (sp.oo, -sp.oo) for v in _ratio_limits(c.formal, exact)),
        )
    ]
    witness_point = _first_beyond_limit(c.formal, exact)
    if witness_point is None:
        raise UnprovenError(f"{c.id}: no point on the grid reaches the relative error limit")
    with mpmath.workdps(60):
        at_witness = relative(mpmath.mpf(witness_point.p) / witness_point.q)
    steps.append(
        Step(
            statement=(
                f"at the exact point $x = {witness_point}$ (the nearest to 0 on a grid of "
                f"step {SEARCH_STEP}) the relative error is {mpmath.nstr(at_witness, 6)} "
                rf"$\ge {APPROX_LIMIT}$: the ball of |printed - exact| - "
                f"{APPROX_LIMIT} |exact| lies above 0"
            ),
            method="arb enclosure",
            check=lambda: _reaches_limit(c.formal, exact, witness_point),
        )
    )
    if c.exact_for:
        intended = elementwise(c.exact_for)
        target = intended.forward if c.kind == "definition" else intended.derivative
        steps.append(
            Step(
                statement=(
                    f"the printed expression is exactly the {quantity} of "
                    f"{intended.title}: $({sp.latex(c.formal)}) - ({sp.latex(target)}) = 0$"
                ),
                method="symbolic identity",
                check=lambda: equal(c.formal, target),
            )
        )
    proof = Proof(
        claim=f"how far ${c.statement_latex}$ is from the {quantity} of {module.title}",
        steps=tuple(steps),
    )
    run(proof)
    return Result(
        c,
        approx_verdict(worst),
        sp.sstr(exact),
        None,
        "; ".join(sorted({step.method for step in steps})),
        proof.rigorous,
        proof,
        witness={"x": str(witness_point), "relative_error": mpmath.nstr(at_witness, 20)},
        notes=(
            f"value: the exact {quantity} of {module.title}. The worst relative error of "
            f"the printed approximation over the reals is unbounded ({', '.join(tails)}); it "
            f"first reaches {APPROX_LIMIT} at x = {witness_point}, so the '≈' is not "
            "approximate by the report's rule (relative error below 1/10 everywhere).",
            f"In absolute terms the printed form is close: its largest deviation is "
            f"{mpmath.nstr(size, 6)} at x = {mpmath.nstr(where, 6)} (found by search: "
            f"evidence), a relative error of {mpmath.nstr(here, 6)} there and of "
            f"{mpmath.nstr(there, 6)} at x = {mpmath.nstr(-where, 6)}, where the absolute "
            "deviation is the same size.",
        ),
        relative_error="inf",
    )


def _lipschitz_result(c: Claim) -> Result:
    sup = sup_abs_derivative(c.key)
    run(sup.proof)
    value = sp.sympify(sup.value)
    true = sp.Float(sup.value_decimal, DIGITS + 5)
    printed = c.formal
    witness = {"x": sup.maximizer, "abs_derivative": sup.value_decimal}
    notes = [
        "For an elementwise map the Jacobian is diagonal, so its 2-norm Lipschitz constant "
        "is sup |f'|."
    ]
    lo, hi = (sp.Float(v, DIGITS + 5) for v in sup.enclosure)
    relative = None
    if c.approximate:  # a number: its relative error is the worst one (APPROX_LIMIT)
        relative = decimal(abs(printed - true) / true, 6)
        verdict = approx_verdict(sp.Float(relative))
        notes.append(
            f"relative error of the printed value: {relative}"
            + (" (below 1/10: approximate)." if verdict == Verdict.APPROX else ".")
        )
    elif sup.value_exact and sp.simplify(value - printed) == 0:
        verdict = Verdict.HOLDS
    elif printed > hi:
        verdict = Verdict.HOLDS_LOOSE
        notes.append(f"tight constant {sup.value}.")
    elif printed < lo:
        verdict = Verdict.FAILS
        notes.append(f"|f'| reaches {sup.value_decimal} > printed {printed}.")
    else:
        raise UnprovenError(f"{c.id}: printed {printed} inside the enclosure [{lo}, {hi}]")
    return Result(
        c,
        verdict,
        sup.value,
        c.printed_value,
        "; ".join(sorted({s.method for s in sup.proof.steps})),
        sup.proof.rigorous,
        sup.proof,
        witness=witness,
        notes=tuple(notes),
        relative_error=relative,
    )


def check_activation(c: Claim) -> Result:
    """The verdict of a claim about an elementwise activation."""
    if c.kind == "lipschitz":
        return _lipschitz_result(c)
    if c.approximate:
        return _approximation_result(c)
    return _identity_result(c)
