"""The claims about Adam's update: verdicts from the Cauchy-Schwarz bound, its equality
case and exact witnesses; a wrong identity or a wrong printed number is caught."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
import sympy as sp

from derive.check import check
from derive.claims import THEORY_CLAIMS, claim
from derive.definitions import theory as th
from proofs import theory as pt


@pytest.fixture(scope="module")
def verdicts() -> dict[str, str]:
    return {c.id: check(c).verdict for c in THEORY_CLAIMS}


def test_adam_verdicts(verdicts):
    """Known independently: Adam divides by sqrt(v_hat); a gradient that keeps its sign
    pushes |m_t|/sqrt(v_t) above (1 - beta1)/sqrt(1 - beta2) from the second step on; the
    printed numbers are that constant's values."""
    assert verdicts == {
        "optimizers.algorithm2_update": "misprinted",
        "optimizers.update_bound": "fails",
        "optimizers.single_step": "fails",
        "optimizers.range_default": "holds",
        "optimizers.range_099": "holds",
        "optimizers.range_095": "holds",
        "optimizers.sign_sgd": "holds",
        "smoothness.square_000": "holds",
        "smoothness.arcsin_000": "holds",
        "smoothness.hinge_002": "holds",
        "smoothness.extends_002": "fails",
    }


def test_every_adam_claim_is_rigorous_with_a_parsable_value():
    for c in THEORY_CLAIMS:
        result = check(c)
        assert result.rigorous and result.proof.verify().ok, c.id
        sp.sympify(result.value)


def _numeric_update(gradients, beta1, beta2):
    m = v = 0.0
    for g in gradients:
        m = beta1 * m + (1 - beta1) * g
        v = beta2 * v + (1 - beta2) * g * g
    return m / np.sqrt(v)


def test_the_supremum_is_reached_and_never_exceeded_numerically():
    """Independently of SymPy: float64 Adam moments. The attaining sequence reaches the
    derived supremum at t = 30, and 2,000 random sequences stay below it."""
    beta1, beta2, t = 0.9, 0.999, 30
    ratio = beta1**2 / beta2
    supremum = (1 - beta1) / np.sqrt(1 - beta2) * np.sqrt(sum(ratio**k for k in range(t)))
    attaining = [(beta1 / beta2) ** (t - i) for i in range(1, t + 1)]
    assert _numeric_update(attaining, beta1, beta2) == pytest.approx(supremum, rel=1e-12)
    rng = np.random.default_rng(5)
    for _ in range(2000):
        gradients = rng.standard_normal(t) * rng.uniform(0.01, 100)
        assert abs(_numeric_update(gradients, beta1, beta2)) <= supremum * (1 + 1e-12)
    limit = float(pt.limit_of_largest(*pt.DEFAULT))
    assert supremum < limit < supremum * 1.01  # t = 30 is close to the limit


def test_a_wrong_identity_and_a_wrong_printed_number_are_caught():
    assert not pt.lagrange_identity(factor=2)
    wrong = dataclasses.replace(
        claim("optimizers.range_095"), formal=sp.Rational(448, 1000), printed_value="0.448"
    )
    result = check.__wrapped__(wrong)
    assert result.verdict == "fails" and result.witness["derived"] == "sqrt(5)/5"


def test_the_witness_exceeds_the_printed_bound_at_pytorch_defaults():
    mu2, bound2 = pt.default_exceeds()
    assert mu2 == sp.Rational(36100, 1999) and bound2 == 10
    assert float(th.update([1.0, 1.0], 0.9, 0.999)) == pytest.approx(np.sqrt(36100 / 1999))


def test_the_appendix_examples_and_a_wrong_constant():
    """x^2: 2-smooth, not Lipschitz; the arcsin example: 1-Lipschitz on [-1, 1], not smooth.
    A printed constant that differs from the derived one fails."""
    assert all(pt.square_example().values()) and all(pt.arcsin_example().values())
    wrong = dataclasses.replace(claim("smoothness.square_000"), formal=sp.Tuple(1, sp.oo))
    result = check.__wrapped__(wrong)
    assert result.verdict == "fails" and result.witness["derived"] == "(2, oo)"


@pytest.mark.parametrize(
    ("key", "wrong", "derived"),
    [
        ("smoothness.arcsin_000", sp.Tuple(2, sp.oo), "(1, oo)"),
        ("smoothness.hinge_002", sp.Integer(2), "1"),
    ],
)
def test_the_other_constants_are_derived_not_typed(key, wrong, derived):
    """The arcsin example's (1, oo) (max |f'| on [-1, 1], lim |f''| at 1) and the hinge's 1
    (the largest |slope| of its pieces) come from sympy; a claim printing another fails."""
    result = check.__wrapped__(dataclasses.replace(claim(key), formal=wrong))
    assert result.verdict == "fails" and result.witness["derived"] == derived
