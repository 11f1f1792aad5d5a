"""What every family's checker shares: the result record, running a proof, the decimal
form of a value, and the verdict of a printed bound against derived ones.

Verdicts are :class:`proofs.core.Verdict`; a proof step that does not check raises
:class:`proofs.core.UnprovenError` instead of reporting.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

import sympy as sp

from derive.claims import Claim
from proofs.core import Proof, Step, UnprovenError, Verdict, is_zero

#: Digits of the decimal values written to claims.json.
DIGITS = 40


@dataclass(frozen=True)
class Result:
    """A claim with its verdict and the evidence for it (the JSON record of SPEC)."""

    claim: Claim
    verdict: Verdict
    value: str
    printed_value: str | None
    method: str
    rigorous: bool
    proof: Proof
    witness: dict | None = None
    notes: tuple[str, ...] = field(default_factory=tuple)
    relative_error: str | None = None

    @property
    def proven_for(self) -> str:
        """The sizes the proof covers: "every size", or the concrete sizes its steps were
        checked at when no step covers every size (:func:`sizes_checked`)."""
        return sizes_checked(self.verdict, [(s.method, s.statement) for s in self.proof.steps])

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
            "proven_for": self.proven_for,
            "witness": self.witness,
            "relative_error": self.relative_error,
            "notes": " ".join(n for n in (c.notes, *self.notes) if n),
            "proof": [{"statement": s.statement, "method": s.method} for s in self.proof.steps],
        }


#: A size named in a proof step: "D = 1..5", "M = 2..4", "N = 3", "K = 1..4", "D <= 5",
#: "O = 2" (outputs), "t = 1..3" or "T = 2" (steps), "L = 3" (depth).
_SIZE = re.compile(r"\b([DMNKHOTtL]) (?:= (\d+)(?:\.\.(\d+))?|<= (\d+))(?![\d/]|\.\d)")
#: A step that covers every size says so.
_EVERY = re.compile(
    r"symbolic [DMKNOTtL]\b|for every (?:D|M|K|N|O|T|t|L|size|batch|number of steps|"
    r"length|depth)\b|every batch size|every D\b|for all D\b"
)


#: Methods whose steps name a size to say where a witness is, not how far a check reaches.
WITNESS_METHODS = ("exact witness", "arb enclosure")


def sizes_checked(verdict: str, steps: list[tuple[str, str]]) -> str:
    """What a proof of ``(method, statement)`` steps covers, by one rule for every claim:
    "every size" when a step says it is checked for a symbolic size (or for every D), when
    no check names a size, or when the verdict rests on a counterexample (``fails``: one size
    suffices); otherwise the sizes its checks name, e.g. "D = 1..5": the statement is then
    machine-checked at those sizes only, and the report says so beside "rigorous". Sizes in
    witness steps (:data:`WITNESS_METHODS`) say where a witness is and do not count.

    >>> sizes_checked("holds", [("symbolic identity", "sympy.diff, D = 1..5")])
    'D = 1..5'
    >>> sizes_checked("holds", [("symbolic identity", "O = 2, D = 3; D = 1; K = 2")])
    'D = 1, D = 3, K = 2, O = 2'
    >>> sizes_checked("holds", [("symbolic identity", "unrolled at t = 1..3")])
    't = 1..3'
    >>> sizes_checked("holds", [("symbolic identity", "t = 1..3; for every t, by induction")])
    'every size'
    >>> sizes_checked("holds", [("symbolic identity", "D = 2..5; for every D (symbolic D)")])
    'every size'
    >>> sizes_checked("holds", [("symbolic sign", "Lip <= 1"), ("exact witness", "at D = 2")])
    'every size'
    """
    statements = [text for _, text in steps]
    if verdict == Verdict.FAILS or any(_EVERY.search(text) for text in statements):
        return "every size"
    named = []
    for method, text in steps:
        if method in WITNESS_METHODS:
            continue
        for letter, low, high, upper in _SIZE.findall(text):
            label = (
                f"{letter} <= {upper}"
                if upper
                else f"{letter} = {low}" + (f"..{high}" if high else "")
            )
            if label not in named:
                named.append(label)
    named.sort(key=lambda label: (label[0], int(re.findall(r"\d+", label)[0])))
    return ", ".join(named) if named else "every size"


def decimal(value: sp.Expr, digits: int = DIGITS) -> str:
    """``value`` as a decimal string with ``digits`` significant digits."""
    return sp.N(value, digits).__str__()


def run(proof: Proof) -> None:
    """Run every step; a step that does not check makes the verdict unreportable."""
    verification = proof.verify()
    if not verification.ok:
        raise UnprovenError(verification.summary())


def result(c: Claim, verdict: Verdict, value: str, proof: Proof, **extra) -> Result:
    """Run ``proof`` and record ``verdict`` with its evidence: ``witness``, ``notes``,
    ``reason`` (appended to the notes) and ``relative_error`` are optional."""
    run(proof)
    methods = "; ".join(sorted({s.method for s in proof.steps}))
    return Result(
        claim=c,
        verdict=verdict,
        value=value,
        printed_value=c.printed_value,
        method=methods,
        rigorous=proof.rigorous,
        proof=proof,
        witness=extra.get("witness"),
        notes=tuple(extra.get("notes", ()))
        + ((f"Verdict: {extra['reason']}.",) if extra.get("reason") else ()),
        relative_error=extra.get("relative_error"),
    )


def same_value(a: sp.Basic, b: sp.Basic) -> bool:
    """Exact equality of two printed or derived values: tuples entry by entry; otherwise the
    same expression, or a difference :func:`proofs.core.is_zero` reduces to 0 (infinities
    only as themselves)."""
    if isinstance(a, sp.Tuple) or isinstance(b, sp.Tuple):
        return (
            isinstance(a, sp.Tuple)
            and isinstance(b, sp.Tuple)
            and len(a) == len(b)
            and all(same_value(x, y) for x, y in zip(a, b, strict=True))
        )
    a, b = sp.sympify(a), sp.sympify(b)
    if a == b:
        return True
    if a.has(sp.oo, -sp.oo, sp.zoo) or b.has(sp.oo, -sp.oo, sp.zoo):
        return False
    return is_zero(a - b)


def compared(
    c: Claim,
    derived: sp.Basic,
    steps: tuple[Step, ...],
    *,
    printed: sp.Basic | None = None,
    witness: dict | None = None,
    **extra,
) -> Result:
    """The verdict of a printed value (``printed``, else the claim's formal) against the
    ``derived`` one that ``steps`` prove: holds where they are the same (:func:`same_value`),
    else fails, with a step saying so and both as the witness (or ``witness``, an exact
    point the caller's steps give). ``extra`` goes to :func:`result` (notes, ...)."""
    printed = c.formal if printed is None else printed
    equal = same_value(printed, derived)
    if not equal:
        wrong = Step(
            statement=rf"the derived ${sp.latex(derived)}$ is not the printed "
            rf"${sp.latex(printed)}$",
            method="exact witness",
            check=lambda: not same_value(printed, derived),
        )
        steps = (*steps, wrong)
        witness = witness or {"printed": sp.sstr(printed), "derived": sp.sstr(derived)}
    return result(
        c,
        Verdict.HOLDS if equal else Verdict.FAILS,
        sp.sstr(derived),
        Proof(claim=c.statement_latex, steps=steps),
        witness=None if equal else witness,
        **extra,
    )


#: One rule for every "≈" of the sources. Its error figure is the worst relative error
#: ``|approximate - exact| / |exact|`` over everything the statement leaves free (every input,
#: every parameter, every size), in the statement's own norm: the absolute value for numbers
#: and scalar functions, the 2-norm for matrices; ``relative_error`` records it ("inf" where
#: it is unbounded) and the notes say where it occurs. Below APPROX_LIMIT the verdict is
#: ``approx``; from it on the "≈" is too far off to be called approximate: ``fails``, with an
#: exact witness where the relative error reaches the limit.
APPROX_LIMIT = sp.Rational(1, 10)


def approx_verdict(worst: sp.Expr) -> Verdict:
    """``approx`` when the worst relative error ``worst`` (a number, or ``sp.oo``) is below
    :data:`APPROX_LIMIT`, else ``fails``.

    >>> approx_verdict(sp.Rational(1, 40)), approx_verdict(sp.oo)
    (<Verdict.APPROX: 'approx'>, <Verdict.FAILS: 'fails'>)
    """
    return Verdict.APPROX if sp.sympify(worst) < APPROX_LIMIT else Verdict.FAILS


#: Symbols of the printed constants (derive/claims.py) and the derived ones.
D = sp.Symbol("D", positive=True, integer=True)
EPS_P = sp.Symbol("epsilon_p", positive=True)
GAMMA_MAX = sp.Symbol("gamma_max", nonnegative=True)
GAMMA_NORM = sp.Symbol("gamma_norm", nonnegative=True)
SIGMA_P = sp.Symbol("sigma_max_P", nonnegative=True)  # sigma_max_P(gamma) <= gamma_max

#: Where a printed constant below the attained one is shown to be too small (exact point).
FAIL_POINT = {D: 3, EPS_P: sp.Rational(3, 10**5), GAMMA_MAX: 1, GAMMA_NORM: 1}


def bound_verdict(printed: sp.Expr, attained: sp.Expr, tight: sp.Expr) -> tuple[Verdict, str]:
    """(verdict, reason) of a printed Lipschitz constant against the derived ones.

    ``tight``: the Lipschitz constant as a function of all parameters (may use
    ``sigma_max_P``); ``attained``: its supremum over the parameters the printed constant
    is written in (attained by some of them). Equal to ``tight`` -> holds; equal to or
    provably above ``attained`` -> holds_loose if ``tight`` differs, else holds; provably
    below ``attained`` at :data:`FAIL_POINT` -> fails.
    """
    if sp.simplify(printed - tight) == 0:
        return Verdict.HOLDS, "the printed constant is the tight one"
    gap = sp.simplify(printed - attained)
    if gap == 0 or gap.is_nonnegative:
        if sp.simplify(attained - tight) == 0:
            if gap == 0:
                return Verdict.HOLDS, "the printed constant is attained by the witness"
            return Verdict.HOLDS_LOOSE, "valid; the tight constant is attained by the witness"
        return Verdict.HOLDS_LOOSE, "valid, equal to the tight constant only for some parameters"
    at_point = gap.subs(FAIL_POINT)
    if at_point.is_number and at_point < 0:
        point = {k: v for k, v in FAIL_POINT.items() if k in gap.free_symbols}
        return Verdict.FAILS, f"below the attained constant at {point}: gap {at_point}"
    raise UnprovenError(f"cannot order printed {printed} and attained {attained}")
