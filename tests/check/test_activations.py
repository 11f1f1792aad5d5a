"""The claim checker: verdicts follow from derivations, evidence is labelled, and the
checker gives other verdicts when the printed statement is changed."""

from __future__ import annotations

import dataclasses

import pytest
import sympy as sp

from derive.catalog import family_of_claim
from derive.check import Result, UnprovenError, check
from derive.claims import CLAIMS, KINDS, claim
from derive.definitions.activations import elementwise, x
from proofs.activations import sup_abs_derivative


@pytest.fixture(scope="module")
def results() -> tuple[Result, ...]:
    """The activation family's claims (every claim's JSON record is checked against the
    SPEC's fields in tests/report/test_document.py, on the report's claims.json)."""
    return tuple(check(c) for c in CLAIMS if family_of_claim(c.key) == "activations")


def test_ids_are_unique_and_kinds_known():
    ids = [c.id for c in CLAIMS]
    assert len(ids) == len(set(ids))
    assert all(c.kind in KINDS for c in CLAIMS)
    for row in ("sigmoid", "relu", "gelu", "swish"):
        for kind in ("definition", "jacobian", "lipschitz"):
            assert f"{row}.{kind}" in ids, f"missing {row}.{kind}"


def test_activation_verdicts(results):
    """The derived verdicts, against facts known independently of the checker: 1/4 and 1
    are the exact sups of |sigma'| and |relu'|; the GeLU and Swish constants are about
    1.1289 and 1.0998, which '≈ 1.1' approximates."""
    verdict = {r.claim.id: r.verdict for r in results}
    for row in ("sigmoid", "relu", "swish"):
        assert verdict[f"{row}.definition"] == "holds"
        assert verdict[f"{row}.jacobian"] == "holds"
    assert verdict["sigmoid.lipschitz"] == "holds"
    assert verdict["relu.lipschitz"] == "holds"
    assert verdict["gelu.lipschitz"] == "approx"
    assert verdict["swish.lipschitz"] == "approx"
    # x sigma(1.702 x) decays like e^(1.702 x), GeLU like e^(-x^2/2): relative error 3.46 at
    # x = -3 (mpmath, 50 digits) and unbounded as x -> -oo; 10% already near x = -1.55
    assert verdict["gelu.approximation"] == "fails"
    assert verdict["gelu.jacobian"] == "fails"
    by_id = {r.claim.id: r for r in results}
    assert float(sp.N(sp.sympify(by_id["gelu.lipschitz"].value))) == pytest.approx(1.12890414)
    assert float(by_id["swish.lipschitz"].value) == pytest.approx(1.09983932)


def test_lipschitz_witness_attains_the_value(results):
    for r in results:
        # The other families' witnesses are checked in tests/check/test_<family>.py.
        if r.claim.kind != "lipschitz" or family_of_claim(r.claim.key) != "activations":
            continue

        derivative = elementwise(r.claim.key).derivative
        at = sp.sympify(r.witness["x"])
        reached = sp.N(sp.Abs(derivative.subs(x, at)), 50)
        value = sp.N(sp.sympify(r.value), 50)
        assert abs(reached - value) < sp.Float("1e-35"), (r.claim.id, reached, value)


def _variant(claim_id: str, **changes):
    return dataclasses.replace(claim(claim_id), **changes)


def test_a_wrong_jacobian_fails_with_a_rerunnable_counterexample():
    wrong = _variant("sigmoid.jacobian", formal=1 / (1 + sp.exp(-x)) ** 2)
    result = check(wrong)
    assert result.verdict == "fails"
    point = sp.sympify(result.witness["x"])
    printed = sp.N(wrong.formal.subs(x, point), 40)
    assert abs(printed - sp.Float(result.witness["printed"], 40)) < 1e-30


def test_another_kink_convention_fails_at_the_kink():
    """1(x >= 0) differs from the derived relu' (the Piecewise's 1(x > 0)) only at x = 0."""
    result = check(_variant("relu.jacobian", formal=sp.Piecewise((1, x >= 0), (0, True))))
    assert result.verdict == "fails"
    assert result.witness["x"] == "0", result.witness
    assert result.rigorous


def test_a_loose_lipschitz_constant_is_holds_loose_with_the_tight_one():
    result = check(_variant("sigmoid.lipschitz", formal=sp.Rational(1, 2)))
    assert result.verdict == "holds_loose"
    assert sp.sympify(result.value) == sp.Rational(1, 4)


def test_a_too_small_lipschitz_constant_fails():
    result = check(_variant("swish.lipschitz", formal=sp.Rational(109, 100), approximate=False))
    assert result.verdict == "fails"
    assert result.witness["x"].startswith("2.399357")


def test_a_constant_inside_the_enclosure_cannot_be_decided():
    lo, hi = sup_abs_derivative("swish").enclosure
    inside = (sp.Rational(lo) + sp.Rational(hi)) / 2
    with pytest.raises(UnprovenError):
        check(_variant("swish.lipschitz", formal=inside, approximate=False))
