"""Printed matrices against derived ones: an identity at every size, or an exact witness.

A printed Jacobian (or gradient, or equation) is written at concrete sizes as a SymPy
matrix; so is what liptable derives from the module's forward. :func:`decide` compares
them case by case:

* every case equal (entry by entry, :func:`proofs.core.is_zero`) -> ``holds``;
* a case that differs -> an exact point (the case's ``point``) where an entry certainly
  differs, or where the shapes differ -> ``fails``; if the evident intent (``intended``)
  equals the derivation at every case -> ``misprinted``.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import sympy as sp

from proofs.arb import ArbTranslationError, enclose, sign
from proofs.core import Proof, Step, UnprovenError, Verdict, same, sum_identity

Build = Callable[[], sp.Matrix]

#: Precision (bits) of the enclosures that certify a witness.
PRECISION = 256


@dataclass(frozen=True)
class Case:
    """One size: the printed and the derived matrix, and an exact point to look for a
    counterexample at (values for every symbol the matrices contain)."""

    label: str
    printed: Build
    derived: Build
    point: dict


def _nonzero(value: sp.Expr) -> bool:
    try:
        return sign(enclose(value, prec=PRECISION)) != 0
    except (ArbTranslationError, ValueError, ZeroDivisionError):
        return sp.simplify(value).is_zero is False


def _exact(value: sp.Expr) -> str:
    value = sp.nsimplify(sp.simplify(value)) if value.is_number else value
    return str(value)


def witness(case: Case) -> dict | None:
    """Where ``case.printed`` and ``case.derived`` certainly differ at ``case.point``."""
    printed, derived = case.printed(), case.derived()
    if printed.shape != derived.shape:
        return {
            "case": case.label,
            "printed_shape": list(printed.shape),
            "derived_shape": list(derived.shape),
        }
    at = {
        sp.Symbol(str(k), real=True) if isinstance(k, str) else k: v for k, v in case.point.items()
    }
    p, d = printed.subs(at), derived.subs(at)
    for index in range(len(p)):
        if _nonzero(p[index] - d[index]):
            row, col = divmod(index, p.shape[1])
            return {
                "case": case.label,
                "point": {str(k): str(v) for k, v in case.point.items()},
                "entry": [row + 1, col + 1],
                "printed": _exact(p[index]),
                "derived": _exact(d[index]),
            }
    return None


def identity_steps(cases: Sequence[Case], what: str) -> tuple[Step, ...]:
    return tuple(
        Step(
            statement=f"{c.label}: {what}",
            method="symbolic identity",
            check=lambda c=c: same(c.printed(), c.derived()),
        )
        for c in cases
    )


def _witness_step(case: Case, found: dict) -> Step:
    if "printed_shape" in found:
        text = (
            f"{case.label}: the printed matrix has shape {tuple(found['printed_shape'])}, the "
            f"derived one {tuple(found['derived_shape'])}"
        )
    else:
        text = (
            f"{case.label}, at the exact point {found['point']}: entry {tuple(found['entry'])} "
            f"is {found['printed']} as printed and {found['derived']} as derived"
        )
    return Step(text, "exact witness", lambda: witness(case) == found)


@dataclass(frozen=True)
class General:
    """Entry (a, b) of the printed and the derived matrix for every size D, written with
    sums over 1..D (:func:`proofs.core.total`), compared by :func:`proofs.core.sum_identity`.

    ``sizes`` names the sizes the entries are written for (a Linear layer's sums also run
    over its O outputs) and ``part`` which block of a stacked statement the entry is from.
    """

    printed: sp.Expr
    derived: sp.Expr
    sizes: str = "every D (symbolic D, entry (a, b))"
    part: str = ""

    def step(self, what: str) -> Step:
        return Step(
            statement=f"{self.sizes}: {self.part + ': ' if self.part else ''}{what}",
            method="symbolic identity",
            check=sum_identity(self.printed, self.derived),
        )


Generals = General | Sequence[General] | None


def _with_general(general: Generals, what: str) -> tuple[Step, ...]:
    if general is None:
        return ()
    if isinstance(general, General):
        return (general.step(what),)
    return tuple(g.step(what) for g in general)


def decide(
    statement: str,
    cases: Sequence[Case],
    what: str,
    intended: Sequence[Case] = (),
    intended_what: str = "",
    *,
    general: Generals = None,
    intended_general: Generals = None,
) -> tuple[str, Proof, dict | None]:
    """(verdict, proof, witness) of a printed matrix statement (module docstring). With
    ``general`` (``intended_general``; one :class:`General` or one per part) the identity is
    also proven for a symbolic size, the first steps of the proof; the cases stay as
    concrete checks."""
    differing = next((c for c in cases if not same(c.printed(), c.derived())), None)
    if differing is None:
        steps = _with_general(general, what) + identity_steps(cases, what)
        return Verdict.HOLDS, Proof(statement, steps), None
    found = witness(differing)
    if found is None:
        raise UnprovenError(f"{statement}: no identity and no witness at {differing.label}")
    steps = (_witness_step(differing, found),)
    if intended and all(same(c.printed(), c.derived()) for c in intended):
        intent = _with_general(intended_general, intended_what)
        return (
            Verdict.MISPRINTED,
            Proof(statement, steps + intent + identity_steps(intended, intended_what)),
            found,
        )
    return Verdict.FAILS, Proof(statement, steps), found
