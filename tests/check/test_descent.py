"""The claims about Lipschitz continuity, smoothness, gradient descent and SGD: the verdict
table, every proof rigorous and verified, a wrong printed constant, exponent or condition
caught by each decider, and the derived formulas against independent NumPy computations
(labelled as such: numerical evidence, not the proofs)."""

from __future__ import annotations

import dataclasses
import itertools

import numpy as np
import pytest
import sympy as sp

from derive.check import check
from derive.claims import DESCENT_CLAIMS, claim
from derive.definitions import descent as de
from proofs import descent as pd
from proofs.core import UnprovenError

#: The verdicts, known independently of the code: Lemma 1 and Lemma 3 are textbook facts;
#: x^2 is C^1 and not Lipschitz; (K1/2) x^2 is K1-smooth with f'' = K1; a block x - x = 0
#: has constant 0, not (1 + 1)(1 + 0); 002's two lines step up the gradient; 003's g' is a
#: g''; the bracket eta - beta eta^2/2 is negative at beta = 10, eta = 1/2; the SGD chain is
#: the standard nonconvex SGD analysis.
EXPECTED = {
    "lipschitz_foundations.lemma1": "holds",
    "lipschitz_foundations.lemma_000": "holds",
    "lipschitz_foundations.definitions": "holds",
    "lipschitz_foundations.eq4": "fails",
    "lipschitz_foundations.stricter": "fails",
    "lipschitz_foundations.relu": "holds",
    "lipschitz_foundations.example1": "holds",
    "lipschitz_foundations.lemma2": "misprinted",
    "lipschitz_foundations.lemma3": "holds",
    "lipschitz_foundations.eq44": "holds",
    "lipschitz_foundations.eq46": "misprinted",
    "descent.estimates": "holds",
    "descent.steepest": "holds",
    "descent.update_002": "misprinted",
    "descent.lemma31": "holds",
    "descent.proof_second_derivative": "misprinted",
    "descent.hessian_bound": "holds",
    "descent.decrease": "holds",
    "descent.step_condition": "fails",
    "descent.sgd_step": "holds",
    "descent.sgd_rearranged": "holds",
    "descent.sgd_sum": "holds",
    "descent.sgd_min": "holds",
    "descent.sgd_rate": "holds",
}


def _recheck(claim_id: str, **changes):
    """The verdict of ``claim_id`` with some printed fields changed (no cache)."""
    return check.__wrapped__(dataclasses.replace(claim(claim_id), **changes))


def test_verdicts():
    assert {c.id: check(c).verdict for c in DESCENT_CLAIMS} == EXPECTED


@pytest.mark.parametrize("c", DESCENT_CLAIMS, ids=[c.id for c in DESCENT_CLAIMS])
def test_every_claim_is_rigorous_for_every_size_with_a_parsable_value(c):
    result = check(c)
    assert result.rigorous and result.proof.verify().ok, c.id
    assert result.proven_for == "every size", (c.id, result.proven_for)
    sp.sympify(result.value)
    if result.verdict in ("fails", "misprinted"):
        assert result.witness, c.id


# --- mutations: a wrong printed value or a false step is caught -----------------------------


def test_a_wrong_constant_in_example1_fails():
    a_norm = sp.Symbol("a_norm", nonnegative=True)
    result = _recheck("lipschitz_foundations.example1", formal=sp.Tuple(0, 2 * a_norm, sp.oo))
    assert result.verdict == "fails" and result.witness["derived"] == "(0, a_norm, oo)"
    result = _recheck("lipschitz_foundations.example1", formal=sp.Tuple(0, a_norm, 2))
    assert result.verdict == "fails"


def test_a_wrong_relu_constant_fails():
    assert _recheck("lipschitz_foundations.relu", formal=sp.Integer(2)).verdict == "fails"


def test_a_wrong_exponent_in_the_descent_bracket_fails():
    wrong = de.eta - de.beta * de.eta**3 / 2
    result = _recheck("descent.decrease", formal=wrong)
    assert result.verdict == "fails" and result.witness["derived"] == "-beta_f*eta**2/2 + eta"
    assert not pd.decrease_identity(factor=2)


def test_the_right_step_condition_holds_and_a_wider_one_fails():
    """The printed eta < 1 fails; 0 < eta < 2/beta (the derived set) holds; eta < 2 fails."""
    assert _recheck("descent.step_condition", formal=sp.Interval.open(0, 2 / de.beta)).verdict == (
        "holds"
    )
    assert _recheck("descent.step_condition", formal=sp.Interval.open(0, 2)).verdict == "fails"


def test_the_min_bound_without_T_is_valid_but_loose():
    delta = sp.Symbol("Delta", nonnegative=True)
    wrong = delta / de.eta + de.beta * de.eta * de.G / 2
    assert _recheck("descent.sgd_min", formal=wrong).verdict == "holds_loose"
    assert not pd.telescoping(printed_factor=2)["average"]


@pytest.mark.parametrize(
    ("claim_id", "smaller", "larger"),
    [
        ("descent.lemma31", de.beta / 4, de.beta),
        ("descent.hessian_bound", de.beta / 2, 2 * de.beta),
        ("descent.sgd_step", de.beta / 4, de.beta),
        ("descent.sgd_rearranged", de.beta / 4, de.beta),
    ],
)
def test_printed_coefficients_below_the_attained_one_fail_and_above_are_loose(
    claim_id, smaller, larger
):
    """Each coefficient is attained by (beta/2) x^2: a smaller printed one fails with that
    quadratic as the witness, a larger one is valid but loose."""
    low = _recheck(claim_id, formal=smaller)
    assert low.verdict == "fails" and low.witness["f"] == "beta_f*x**2/2"
    assert _recheck(claim_id, formal=larger).verdict == "holds_loose"


def test_a_sum_bound_without_T_or_a_faster_rate_is_not_reported():
    delta = sp.Symbol("Delta", nonnegative=True)
    with pytest.raises(UnprovenError):
        _recheck("descent.sgd_sum", formal=delta / de.eta + de.beta * de.eta * de.G / 2)
    with pytest.raises(UnprovenError):
        _recheck("descent.sgd_rate", formal=1 / de.T)


def test_wrong_printed_estimates_directions_and_orders_flip():
    n = sp.Symbol("N", integer=True, positive=True)
    biased = _recheck("descent.estimates", formal=1 / n)
    assert biased.verdict == "fails" and biased.witness["K"] != biased.witness["N"]
    assert _recheck("descent.steepest", formal=sp.Integer(1)).verdict == "fails"
    theta, alpha, grad = (
        sp.Symbol("theta", real=True),
        sp.Symbol("alpha", positive=True),
        sp.Symbol("grad_L", real=True),
    )
    assert _recheck("descent.update_002", formal=theta - alpha * grad).verdict == "holds"
    assert _recheck("descent.proof_second_derivative", formal=sp.Integer(2)).verdict == "holds"


def test_the_counterexamples_and_the_chain_refuse_false_variants():
    """x^2's quotient exceeds every K, 3x's does not; the two-layer chain gives L_g L_f, not
    half of it."""
    assert pd.square_exceeds() and not pd.square_exceeds(3 * de.x)
    assert pd.composition_step() and not pd.composition_step(sp.Rational(1, 2))
    assert not pd.attains_minimum(1)


def test_a_strict_intent_for_lemma2_is_not_proven():
    """Lemma 2 is misprinted only because '<=' holds: a strict intended inequality refutes
    nothing and proves nothing, so no verdict is reported."""
    strict = sp.StrictLessThan(
        sp.Symbol("sup_hessian_norm", nonnegative=True), sp.Symbol("K_1", positive=True)
    )
    with pytest.raises(UnprovenError):
        _recheck("lipschitz_foundations.lemma2", intended=strict)


def test_false_steps_are_refused():
    assert not pd.linear_difference(factor=2)
    assert not pd.minibatch_probability(printed=sp.Symbol("K") / (sp.Symbol("N") - 1))
    assert not pd.sgd_chain(printed_coefficient=sp.Rational(1, 4))["step"]
    n, k = sp.symbols("N K", integer=True, positive=True)
    assert not pd.minibatch_probability(printed=k / n + 1)


def test_the_witnesses_are_exact():
    assert pd.decrease_witness() == {
        "coefficient": sp.Rational(-3, 4),
        "x1": -4,
        "f0": 5,
        "f1": 80,
    }
    assert pd.residual_block_witness() == (0, 2)
    assert pd.printed_first_derivative() == (1, 2)
    assert pd.relu_one_sided() == (0, 1)
    assert pd.coefficient_interval() == sp.Interval.open(0, 2 / de.beta)


# --- independent numerical evidence (NumPy, float64; not the proofs) -------------------------


@pytest.mark.parametrize("beta", [0.5, 3.0, 10.0, 250.0])
def test_gradient_descent_on_a_quadratic_at_the_derived_step_sizes(beta):
    """Evidence: gradient descent on f = (beta/2) x^2 in float64 converges for eta just below
    the derived 2/beta and diverges just above it; the guaranteed decrease per step is
    (eta - beta eta^2/2) f'^2, exactly what the iteration loses."""
    f = lambda x: beta / 2 * x * x  # noqa: E731
    for factor, converges in ((1 - 1e-3), True), ((1 + 1e-3), False):
        eta = 2 / beta * factor
        x = 1.0
        for _ in range(20_000):
            grad = beta * x
            drop = f(x) - f(x - eta * grad)
            assert drop == pytest.approx((eta - beta * eta**2 / 2) * grad**2, rel=1e-9, abs=1e-300)
            x -= eta * grad
        assert (abs(x) < 1e-6) == converges, (beta, factor, x)


def test_the_counterexample_step_rises_numerically():
    """Evidence: at beta = 10, eta = 1/2 (< 1, as the notes allow) f = 5 x^2 goes 5 -> 80."""
    x0 = 1.0
    x1 = x0 - 0.5 * 10.0 * x0
    assert (x1, 5 * x1**2) == (-4.0, 80.0)


def test_minibatch_estimates_are_unbiased_numerically():
    """Evidence: for random gradients in R^3, the mean over all C(7, K) subsets of the
    subset mean is the full-batch mean, for every K (float64)."""
    rng = np.random.default_rng(11)
    grads = rng.standard_normal((7, 3))
    full = grads.mean(axis=0)
    for k in range(1, 8):
        means = [grads[list(s)].mean(axis=0) for s in itertools.combinations(range(7), k)]
        np.testing.assert_allclose(np.mean(means, axis=0), full, rtol=1e-12, atol=1e-14)


def test_sgd_bound_on_a_noisy_quadratic_numerically():
    """Evidence: SGD on f = (beta/2) x^2 with gradient noise of variance s2 has exact moment
    recurrences E x_{t+1}^2 = (1 - eta beta)^2 E x_t^2 + eta^2 s2. With G = max_t E|g~|^2
    and f* = 0, min_t E|f'(x_t)|^2 stays below the printed min bound at eta = 1/sqrt(T),
    and sqrt(T) times the bound equals (f_0 - f*) + beta G/2."""
    beta, s2, x0 = 4.0, 0.3, 2.0
    for steps in (10, 100, 1000, 10_000):
        eta = 1 / np.sqrt(steps)
        second = x0 * x0
        grads, g_bound = [], 0.0
        for _ in range(steps):
            grads.append(beta * beta * second)
            g_bound = max(g_bound, beta * beta * second + s2)
            second = (1 - eta * beta) ** 2 * second + eta * eta * s2
        f0 = beta / 2 * x0 * x0
        bound = f0 / (eta * steps) + beta / 2 * eta * g_bound
        assert min(grads) <= bound
        assert np.mean(grads) <= bound * (1 + 1e-12)
        assert bound * np.sqrt(steps) == pytest.approx(f0 + beta * g_bound / 2, rel=1e-12)


def test_lipschitz_quotients_never_exceed_the_gradient_bound_numerically():
    """Evidence: for f = a.x + 1 and for the ReLU composition relu(3 relu(2 x)), sampled
    difference quotients stay at or below ||a|| and 6, and reach them."""
    rng = np.random.default_rng(3)
    a = rng.standard_normal(5)
    xs, ys = rng.standard_normal((2, 2000, 5))
    quotients = np.abs((ys - xs) @ a) / np.linalg.norm(ys - xs, axis=1)
    assert quotients.max() <= np.linalg.norm(a) * (1 + 1e-12)
    assert abs(a @ a) / np.linalg.norm(a) == pytest.approx(np.linalg.norm(a), rel=1e-12)
    relu = lambda z: np.maximum(z, 0.0)  # noqa: E731
    u, v = rng.standard_normal((2, 2000))
    composed = np.abs(relu(3 * relu(2 * u)) - relu(3 * relu(2 * v))) / np.abs(u - v)
    assert composed.max() <= 6 * (1 + 1e-12)
    assert relu(3 * relu(2 * 1.0)) - relu(3 * relu(2 * 0.0)) == 6.0


def test_descent_lemma_and_step_on_logsumexp_numerically():
    """Evidence: log-sum-exp has Hessian diag(p) - p p^T (p = softmax), of spectral norm at
    most max p <= 1, so it is 1-smooth. At 2,000 random pairs in R^6 (float64) Lemma 3.1
    holds with beta = 1, and a gradient step with eta in (0, 2/beta) decreases f by at
    least the derived (eta - eta^2/2) ||grad f||^2."""
    rng = np.random.default_rng(7)

    def f(z):
        top = z.max()
        return top + np.log(np.exp(z - top).sum())

    def grad(z):
        e = np.exp(z - z.max())
        return e / e.sum()

    slack = 1e-12
    for _ in range(2000):
        x, y = rng.standard_normal((2, 6)) * rng.uniform(0.1, 5)
        g = grad(x)
        assert f(y) <= f(x) + g @ (y - x) + 0.5 * (y - x) @ (y - x) + slack
        eta = rng.uniform(0.01, 1.99)
        assert f(x - eta * g) <= f(x) - (eta - eta**2 / 2) * (g @ g) + slack
