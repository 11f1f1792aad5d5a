"""The ring normal form proves true identities and never a false one."""

from __future__ import annotations

import sympy as sp

from proofs.core import is_zero
from proofs.polynomial import vanishes

a, b, c = sp.symbols("a b c", real=True)
p = sp.Symbol("p", positive=True)
s = a**2 + b**2 + 1


def test_identities_that_need_the_relations_are_proven() -> None:
    holds = [
        sp.exp(a + b) - sp.exp(a) * sp.exp(b),
        sp.exp(3 * a / 2) - sp.exp(a / 2) ** 3,
        sp.exp(2 + a) - sp.E**2 * sp.exp(a),
        sp.sqrt(s) ** 5 - s**2 * sp.sqrt(s),
        1 / sp.sqrt(s) - sp.sqrt(s) / s,
        sp.cbrt(a**2 + 1) ** 3 - a**2 - 1,
        (sp.sqrt(s) + a) * (sp.sqrt(s) - a) - b**2 - 1,
        1 / (1 + sp.exp(-a)) - sp.exp(a) / (1 + sp.exp(a)),
        sp.erf(a) ** 2 - sp.erf(a) * sp.erf(a) + (a + b) / (a + b) ** 2 - 1 / (b + a),
    ]
    for expr in holds:
        assert vanishes(expr), expr


def test_the_softmax_jacobian_closed_form_is_proven_and_a_wrong_one_is_not() -> None:
    z = sp.symbols("z0:3", real=True)
    total = sum(sp.exp(v) for v in z)
    p0 = sp.exp(z[0]) / total
    p1 = sp.exp(z[1]) / total
    assert vanishes(sp.diff(p0, z[1]) + p0 * p1)
    assert vanishes(sp.diff(p0, z[0]) - p0 * (1 - p0))
    assert not vanishes(sp.diff(p0, z[1]) - p0 * p1)
    assert not vanishes(sp.diff(p0, z[0]) - p0 * (1 - p1))


def test_false_identities_are_not_proven() -> None:
    fails = [
        sp.exp(2 * a) - sp.exp(a),
        sp.sqrt(a**2) - a,  # |a|, not a
        sp.sqrt(a) * sp.sqrt(b) - sp.sqrt(a * b),  # false for a, b < 0
        sp.sqrt(s) - s,
        a / (a + b) - 1,
    ]
    for expr in fails:
        assert not vanishes(expr), expr


def test_floats_and_infinities_are_refused():
    """As variables they would cancel: oo a - oo a is undefined, not 0, and a Float is no
    exact number."""
    refused = [
        sp.Add(sp.oo * a, -sp.oo * a, evaluate=False),
        sp.Add(sp.Float(0.5) * a, -sp.Float(0.5) * a, evaluate=False),
        sp.Add(sp.exp(sp.Float(0.5) * a), -sp.exp(sp.Float(0.5) * a), evaluate=False),
    ]
    for expr in refused:
        assert expr != 0 and not vanishes(expr), expr


def test_is_zero_keeps_its_answers() -> None:
    assert is_zero(sp.sqrt(p) ** 3 - p * sp.sqrt(p))
    assert is_zero(sp.cosh(a) ** 2 - sp.sinh(a) ** 2 - 1)  # left to the slower forms
    assert not is_zero(sp.exp(a) - 1 - a)
