"""The claim checker: derives each claim's verdict from the definitions and the proofs.

Verdicts (SPEC): ``holds`` (true as stated; a bound attained), ``holds_loose`` (a valid,
not tight, bound), ``fails`` (false as stated, with a counterexample), ``misprinted``
(wrong as printed, evident intent holds) and ``approx`` (a "≈" statement: the exact value
and the relative error). No verdict is typed in: each follows from a comparison whose
proof steps are run here, and a step that does not check raises instead of reporting.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import cache

import mpmath
import sympy as sp

from derive.claims import CLAIMS, Claim
from derive.definitions.activations import elementwise, x
from proofs.activations import sup_abs_derivative
from proofs.core import Proof, Step
from proofs.identities import counterexample, counterexample_proof, equal, equality_proof

#: Digits of the decimal values written to claims.json.
DIGITS = 40


class UnprovenError(RuntimeError):
    """A verdict's proof step did not check: the verdict cannot be reported."""


@dataclass(frozen=True)
class Result:
    """A claim with its verdict and the evidence for it (the JSON record of SPEC)."""

    claim: Claim
    verdict: str
    value: str
    printed_value: str | None
    method: str
    rigorous: bool
    proof: Proof
    witness: dict | None = None
    notes: tuple[str, ...] = field(default_factory=tuple)
    relative_error: str | None = None

    def to_json(self) -> dict:
        c = self.claim
        return {
            "id": c.id,
            "module": c.module,
            "kind": c.kind,
            "source": c.source,
            "statement_latex": c.statement_latex,
            "verdict": self.verdict,
            "printed_value": self.printed_value,
            "value": self.value,
            "method": self.method,
            "rigorous": self.rigorous,
            "witness": self.witness,
            "relative_error": self.relative_error,
            "notes": " ".join(n for n in (c.notes, *self.notes) if n),
            "proof": [{"statement": s.statement, "method": s.method} for s in self.proof.steps],
        }


def decimal(value: sp.Expr, digits: int = DIGITS) -> str:
    """``value`` as a decimal string with ``digits`` significant digits."""
    return sp.N(value, digits).__str__()


def _run(proof: Proof) -> None:
    """Run every step; a step that does not check makes the verdict unreportable."""
    verification = proof.verify()
    if not verification.ok:
        raise UnprovenError(verification.summary())


def _identity_result(c: Claim) -> Result:
    module = elementwise(c.key)
    derived = module.forward if c.kind == "definition" else module.derivative
    what = "forward" if c.kind == "definition" else "derivative (sympy.diff of the forward)"
    if equal(c.formal, derived):
        proof = equality_proof(c.statement_latex, c.formal, derived, what)
        _run(proof)
        return Result(c, "holds", sp.sstr(derived), None, "symbolic identity", True, proof)
    witness = counterexample(c.formal, derived)
    if witness is None:
        raise UnprovenError(f"{c.id}: identity not proven, and no counterexample found")
    proof = counterexample_proof(c.statement_latex, c.formal, derived, what, witness)
    _run(proof)
    return Result(c, "fails", sp.sstr(derived), None, "arb enclosure", True, proof, witness=witness)


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
    _run(proof)
    return Result(
        c,
        "approx",
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
    _run(sup.proof)
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
        verdict = "approx"
    elif sup.value_exact and sp.simplify(value - printed) == 0:
        verdict = "holds"
    elif printed > hi:
        verdict = "holds_loose"
        notes.append(f"tight constant {sup.value}.")
    elif printed < lo:
        verdict = "fails"
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


#: The normalizations: decided by :mod:`derive.check.norms` and :mod:`derive.check.batchnorm`.
NORM_KEYS = ("layernorm", "rmsnorm", "centernorm", "weightnorm", "normalization", "batchnorm")
#: The rows decided by :mod:`derive.check.rows` (its ``ROW_KEYS``, repeated to avoid
#: importing it before it is needed).
ROW_KEYS = ("linear", "conv2d", "softmax", "maxpool", "avgpool", "residual", "weighted_residual")
#: The attentions, decided by :mod:`derive.check.attention`.
ATTENTION_KEYS = ("dp_attention", "l2_attention", "scs_attention")


@cache
def check(c: Claim) -> Result:
    """The verdict of one claim, with its evidence (steps are run before returning)."""
    if c.key == "batchnorm":
        from derive.check.batchnorm import check_batchnorm

        return check_batchnorm(c)
    if c.key in NORM_KEYS:
        from derive.check.norms import check_norm

        return check_norm(c)
    if c.key in ROW_KEYS:
        from derive.check.rows import check_row

        return check_row(c)
    if c.key in ATTENTION_KEYS:
        from derive.check.attention import check_attention

        return check_attention(c)
    if c.kind == "lipschitz":
        return _lipschitz_result(c)
    if c.approximate:
        return _approximation_result(c)
    return _identity_result(c)


def check_all() -> tuple[Result, ...]:
    """Every claim of :data:`derive.claims.CLAIMS`, in order."""
    return tuple(check(c) for c in CLAIMS)
