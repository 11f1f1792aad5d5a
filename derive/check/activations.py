"""Verdicts of the elementwise activations' claims (Sigmoid, ReLU, GeLU, Swish): printed
definitions and derivatives against :mod:`derive.definitions.activations` (an identity or
an exact counterexample), printed "≈" approximations by their largest deviation, and
printed Lipschitz constants against :func:`proofs.activations.sup_abs_derivative`.
"""

from __future__ import annotations

from functools import cache

import mpmath
import sympy as sp

from derive.check.core import DIGITS, Result, decimal, run
from derive.claims import Claim
from derive.definitions.activations import elementwise, x
from proofs.activations import sup_abs_derivative
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


def _approximation_result(c: Claim) -> Result:
    module = elementwise(c.key)
    quantity = "forward" if c.kind == "definition" else "derivative"
    exact = module.forward if c.kind == "definition" else module.derivative
    size, where = _largest_deviation(c.formal, exact)
    with mpmath.workdps(60):
        relative = size / abs(sp.lambdify(x, exact, "mpmath")(where))
    text_size, text_where = mpmath.nstr(size, DIGITS), mpmath.nstr(where, DIGITS)
    steps = [
        Step(
            statement=(
                f"$\\max_x |({sp.latex(c.formal)}) - ({sp.latex(exact)})|$ "
                f"$\\approx {text_size[:14]}$ at $x \\approx {text_where[:14]}$: the best "
                f"point of a grid on $[-{SEARCH_RADIUS}, {SEARCH_RADIUS}]$ with step "
                f"{SEARCH_STEP}, refined by mpmath.findroot on the slope"
            ),
            method="sampling (evidence)",
            check=lambda: _largest_deviation(c.formal, exact)[0] == size,
        )
    ]
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
        Verdict.APPROX,
        text_size,
        None,
        "sampling (evidence)",
        False,
        proof,
        witness={"x": text_where},
        notes=(
            f"value: the largest absolute deviation from the exact {quantity}; relative "
            f"to the exact value there, {mpmath.nstr(relative, 6)}.",
        ),
        relative_error=mpmath.nstr(relative, 6),
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
    if c.approximate:
        relative = decimal(abs(printed - true) / true, 6)
        notes.append(f"relative error of the printed value: {relative}.")
        verdict = Verdict.APPROX
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
