"""The proofs of sup |f'| (proofs/activations.py) and the checkers they are built from.

Reference values are computed here, independently of python-flint, with mpmath at 50
digits from the same SymPy definitions (``sympy.lambdify(..., "mpmath")``):
``mpmath.findroot`` on ``f''`` started at the float maximizer, then ``f'`` at the root. For
GeLU the closed form ``1/2 + erf(1)/2 + exp(-1)/sqrt(pi)`` is evaluated with mpmath's own
functions.
"""

from __future__ import annotations

from fractions import Fraction

import flint
import mpmath
import pytest
import sympy as sp
from hypothesis import example, given, settings
from hypothesis import strategies as st

from derive.definitions.activations import ELEMENTWISE, GELU_TANH_CUBIC, elementwise, x
from derive.reference.balls import stable
from proofs import arb as ball
from proofs.activations import SUP_DERIVATIVE_KEYS, sup_abs_derivative, sup_abs_derivatives
from proofs.core import (
    METHODS,
    Proof,
    Step,
    assumption,
    every,
    identity,
    is_zero,
    limit,
    solution_set,
    witness,
)

#: Digits of the mpmath references, and the relative agreement demanded of the proofs.
REFERENCE_DPS = 50
AGREEMENT = mpmath.mpf(10) ** -40

#: Precision of the sampled evidence, and the relative rounding error allowed to it.
SAMPLING_DPS = 30
SAMPLING_ROUNDING = mpmath.mpf(10) ** (5 - SAMPLING_DPS)

#: What Table 2 implies for each key, the supremum to 4 digits (a sanity anchor).
ROUGH_VALUES = {
    "sigmoid": 0.25,
    "relu": 1.0,
    "swish": 1.0998,
    "gelu_none": 1.1289,
    "gelu_tanh": 1.1290,
    "gelu_sigmoid": 1.0998,
}

#: Starting points for findroot, to 2 digits (from plotting f'; not from the proofs).
ROUGH_MAXIMIZERS = {"swish": 2.4, "gelu_none": 1.4, "gelu_tanh": 1.4, "gelu_sigmoid": 1.4}

#: The interval [-R, R] of the branch-and-bound in each numeric proof.
SEARCH_RADIUS = {"swish": 6, "gelu_sigmoid": 4, "gelu_tanh": 4, "gelu_none": 4}


def _mp(expr: sp.Expr):
    return sp.lambdify(x, expr, modules="mpmath")


def _reference(key: str) -> tuple[mpmath.mpf, mpmath.mpf]:
    """(maximizer, sup |f'|) by mpmath.findroot on f'' at REFERENCE_DPS digits."""
    module = elementwise(key)
    first, second = _mp(module.derivative), _mp(module.second_derivative)
    with mpmath.workdps(REFERENCE_DPS):
        root = mpmath.findroot(second, mpmath.mpf(ROUGH_MAXIMIZERS[key]))
        return +root, abs(first(root))


def _close(actual: mpmath.mpf, expected: mpmath.mpf) -> bool:
    with mpmath.workdps(REFERENCE_DPS):
        return abs(actual - expected) <= AGREEMENT * max(abs(expected), 1)


@pytest.fixture(autouse=True)
def _flint_precision_untouched():
    before = flint.ctx.prec
    yield
    assert flint.ctx.prec == before, f"flint.ctx.prec changed from {before} to {flint.ctx.prec}"


# --------------------------------------------------------------------------------------
# The six proofs
# --------------------------------------------------------------------------------------


def test_keys_match_the_elementwise_catalog():
    assert SUP_DERIVATIVE_KEYS == tuple(m.key for m in ELEMENTWISE)


@pytest.mark.parametrize("key", SUP_DERIVATIVE_KEYS)
def test_proof_verifies_and_is_rigorous(key):
    result = sup_abs_derivative(key)
    verification = result.proof.verify()
    assert verification.ok, verification.summary()
    assert result.proof.rigorous, f"{key}: proof uses sampling"
    assert all(step.method in METHODS for step in result.proof.steps)


@pytest.mark.parametrize("key", SUP_DERIVATIVE_KEYS)
def test_result_fields_are_well_formed(key):
    result = sup_abs_derivative(key)
    lower, upper = (Fraction(e) for e in result.enclosure)
    decimal = Fraction(result.value_decimal)
    digits = len(result.value_decimal.replace(".", "").replace("-", "").lstrip("0"))
    assert digits >= 40, f"{key}: value_decimal {result.value_decimal} has {digits} digits"
    assert lower <= upper, f"{key}: enclosure {result.enclosure} is empty"
    assert upper - lower < Fraction(1, 10**35), f"{key}: enclosure width {float(upper - lower)}"
    slack = Fraction(1, 10**48)
    assert lower - slack <= decimal <= upper + slack, (
        f"{key}: value_decimal {result.value_decimal} outside enclosure {result.enclosure}"
    )
    assert abs(float(decimal) - ROUGH_VALUES[key]) < 1e-4, (
        f"{key}: value {result.value_decimal}, expected about {ROUGH_VALUES[key]}"
    )
    maximizer = sp.sympify(result.maximizer)
    assert maximizer.is_real, f"{key}: maximizer {result.maximizer!r} is not a real number"
    if result.value_exact:
        error = sp.N(sp.Abs(sp.sympify(result.value) - sp.Rational(decimal)), 60)
        assert error < sp.Rational(1, 10**48), (
            f"{key}: exact value {result.value} differs from {result.value_decimal} by {error}"
        )
    else:
        assert result.value == result.value_decimal
        assert not result.maximizer_exact
        width = len(result.maximizer.replace(".", "").replace("-", "").lstrip("0"))
        assert width >= 40, f"{key}: maximizer {result.maximizer} has {width} digits"


@pytest.mark.parametrize("key", ["swish", "gelu_tanh", "gelu_sigmoid", "gelu_none"])
def test_values_agree_with_mpmath_findroot(key):
    result = sup_abs_derivative(key)
    root, value = _reference(key)
    with mpmath.workdps(REFERENCE_DPS):
        maximizer = mpmath.mpf(sp.N(sp.sympify(result.maximizer), REFERENCE_DPS + 10))
        proven = mpmath.mpf(result.value_decimal)
        lower, upper = (mpmath.mpf(e) for e in result.enclosure)
    assert _close(maximizer, root), f"{key}: maximizer {result.maximizer}, mpmath {root}"
    assert _close(proven, value), f"{key}: value {result.value_decimal}, mpmath {value}"
    assert lower <= value <= upper, f"{key}: mpmath {value} outside {result.enclosure}"


def test_gelu_exact_value_agrees_with_mpmath():
    result = sup_abs_derivative("gelu_none")
    with mpmath.workdps(REFERENCE_DPS):
        expected = mpmath.mpf(1) / 2 + mpmath.erf(1) / 2 + mpmath.exp(-1) / mpmath.sqrt(mpmath.pi)
        actual = mpmath.mpf(sp.N(sp.sympify(result.value), REFERENCE_DPS + 10))
    assert _close(actual, expected), (
        f"gelu_none: value {result.value} = {actual}, mpmath {expected}"
    )
    assert result.maximizer == "sqrt(2)", (
        f"gelu_none: maximizer {result.maximizer}, expected sqrt(2)"
    )


def test_swish_maximizer_solves_x_tanh_half_x_equals_two():
    with mpmath.workdps(REFERENCE_DPS):
        root = mpmath.mpf(sup_abs_derivative("swish").maximizer)
        residual = root * mpmath.tanh(root / 2) - 2
    assert abs(residual) < AGREEMENT, f"swish: x* tanh(x*/2) - 2 = {residual}, expected 0"


def test_gelu_sigmoid_is_swish_rescaled():
    swish, gelu = sup_abs_derivative("swish"), sup_abs_derivative("gelu_sigmoid")
    assert gelu.enclosure == swish.enclosure, f"{gelu.enclosure} vs swish {swish.enclosure}"
    with mpmath.workdps(REFERENCE_DPS):
        scaled = mpmath.mpf(swish.maximizer) / (mpmath.mpf(1702) / 1000)
        assert _close(mpmath.mpf(gelu.maximizer), scaled), (
            f"gelu_sigmoid maximizer {gelu.maximizer}, swish's / 1.702 = {scaled}"
        )


def test_exact_results():
    sigmoid, relu = sup_abs_derivative("sigmoid"), sup_abs_derivative("relu")
    assert (sigmoid.value, sigmoid.maximizer) == ("1/4", "0"), f"sigmoid: {sigmoid}"
    assert (relu.value, relu.maximizer) == ("1", "1"), f"relu: {relu}"
    assert sigmoid.enclosure == ("0.25" + "0" * 43, "0.25" + "0" * 43)


@pytest.mark.parametrize("key", SUP_DERIVATIVE_KEYS)
@settings(max_examples=60, deadline=None)
@given(st.floats(min_value=-60, max_value=60, allow_nan=False))
@example(0.0)
@example(1e-300)
@example(60.0)
@example(-60.0)
def test_sampled_derivative_never_exceeds_the_proven_bound(key, value):
    # Evidence, not proof: mpmath at SAMPLING_DPS digits, independent of arb; the allowance
    # covers mpmath's own rounding where the bound is attained (sigmoid near 0).
    result = sup_abs_derivative(key)
    first = _mp(elementwise(key).derivative)
    with mpmath.workdps(SAMPLING_DPS):
        actual = abs(first(mpmath.mpf(value)))
        bound = mpmath.mpf(result.enclosure[1]) * (1 + SAMPLING_ROUNDING)
    assert actual <= bound, f"{key}: |f'({value})| = {actual} > proven {bound}"


def test_all_proofs_together_are_fast():
    import time

    start = time.perf_counter()
    assert all(result.proof.verify().ok for result in sup_abs_derivatives())
    elapsed = time.perf_counter() - start
    assert elapsed < 30, f"verifying the six proofs took {elapsed:.1f} s, expected < 30 s"


# --------------------------------------------------------------------------------------
# Every checker kind can fail
# --------------------------------------------------------------------------------------


def test_false_identity_is_refused():
    sigmoid = elementwise("sigmoid")
    half = sp.Rational(1, 2)
    true = identity(sp.Rational(1, 4) - sigmoid.derivative, (sigmoid.forward - half) ** 2)
    off_by_tiny = identity(
        sp.Rational(1, 4) - sigmoid.derivative,
        (sigmoid.forward - half) ** 2 + sp.Rational(1, 10**30),
    )
    wrong_argument = identity(
        elementwise("swish").second_derivative,
        sigmoid.derivative * (2 - x * sp.tanh(x)),
    )
    gelu_tanh = elementwise("gelu_tanh")
    wrong_cubic = gelu_tanh.forward.subs(GELU_TANH_CUBIC, sp.Rational(447, 10000))
    assert wrong_cubic != gelu_tanh.forward
    assert true() is True
    assert off_by_tiny() is False
    assert wrong_argument() is False
    assert identity(gelu_tanh.derivative, sp.diff(wrong_cubic, x))() is False


@pytest.mark.parametrize("key", ["swish", "gelu_tanh", "gelu_none", "gelu_sigmoid"])
def test_branch_and_bound_refuses_a_bound_below_the_supremum(key):
    result = sup_abs_derivative(key)
    radius = SEARCH_RADIUS[key]
    too_low = Fraction(result.value_decimal) - Fraction(1, 10**30)
    search = ball.prove_abs_bound(elementwise(key).derivative, x, -radius, radius, too_low)
    assert not search.proved, f"{key}: bound {too_low} below the supremum was 'proved'"
    assert search.counterexample is not None, f"{key}: no counterexample, {search.reason}"
    upper = ball.prove_abs_bound(
        elementwise(key).derivative, x, -radius, radius, result.enclosure[1]
    )
    assert upper.proved, f"{key}: the proven upper bound {result.enclosure[1]}: {upper.reason}"


def test_branch_and_bound_reports_an_exhausted_budget():
    search = ball.prove_abs_bound(
        elementwise("swish").derivative,
        x,
        -6,
        6,
        sup_abs_derivative("swish").enclosure[1],
        max_boxes=5,
    )
    assert not search.proved and "budget" in search.reason, search.reason


def test_root_isolation_without_sign_change_is_refused():
    second = elementwise("swish").second_derivative
    assert ball.certify_unique_root(second, x, 3, 4) is False
    assert ball.certify_unique_root(second, x, "2.39", "2.41") is True
    assert ball.isolate_roots(second, x, 3, 4) == ()
    with pytest.raises(ValueError, match="no certain sign change"):
        ball.refine_root(second, x, 3, 4, digits=40)
    # Two zeros in one interval: a sign change is missing, so no certificate either.
    assert ball.certify_unique_root(second, x, -3, 3) is False


def test_sign_certificates_can_fail():
    s = sp.Symbol("s", nonnegative=True)
    assert ball.coefficients_sign((s - 1) ** 2, s, "nonnegative") is False
    assert ball.coefficients_sign(s**2 + 2 * s + 1, s, "nonnegative") is True
    u, p = sp.symbols("u p")
    assert ball.orthant_nonnegative(p - u, (u, p), sp.Integer(1)) is False
    assert ball.orthant_nonnegative(p + u, (u, p), -sp.Integer(1)) is False


def test_exact_checkers_can_fail():
    gelu = elementwise("gelu_none").derivative
    assert limit(gelu, x, sp.oo, 1)() is True
    assert limit(gelu, x, sp.oo, 0)() is False
    assert solution_set(2 - x**2 > 0, x, sp.Interval(-2, 2))() is False
    assert witness(elementwise("sigmoid").derivative, x, 1, sp.Rational(1, 4))() is False
    assert assumption(elementwise("swish").derivative, "positive")() is False
    assert every(())() is False
    assert every((identity(1, 1), identity(1, 2)))() is False


def test_enclosure_can_fail():
    value = sp.exp(-1) / sp.sqrt(sp.pi)
    assert ball.within(value, "0.20755374871", "0.20755374872") is True
    assert ball.within(value, upper="0.20755374871") is False
    assert ball.within(value, lower="0.20755374872") is False


# --------------------------------------------------------------------------------------
# The data model
# --------------------------------------------------------------------------------------


def test_verify_names_the_failed_step():
    def broken() -> bool:
        raise RuntimeError("division by a ball containing 0")

    proof = Proof(
        "0 = 1",
        (
            Step("$1 = 1$", "symbolic identity", identity(1, 1)),
            Step("$0 = 1$", "symbolic identity", identity(0, 1)),
            Step("$2 = 2$", "arb enclosure", broken),
        ),
    )
    verification = proof.verify()
    assert not verification.ok
    assert [o.index for o in verification.failed] == [2, 3], verification.summary()
    assert "RuntimeError: division" in verification.failed[1].error
    assert "$0 = 1$" in verification.summary()


def test_sampling_is_never_rigorous_and_methods_are_checked():
    evidence = Step("looks bounded", "sampling (evidence)", lambda: True)
    assert not evidence.rigorous
    assert not Proof("c", (evidence,)).rigorous
    assert not Proof("c", ()).rigorous
    with pytest.raises(ValueError, match="unknown proof method"):
        Step("trust me", "intuition", lambda: True)


def test_non_bool_check_fails():
    verification = Proof("c", (Step("s", "exact witness", lambda: 1),)).verify()  # type: ignore[arg-type, return-value]
    assert not verification.ok and "not bool" in verification.failed[0].error


def test_translator_refuses_what_it_cannot_enclose():
    y = sp.Symbol("y")
    for expr in (
        sp.Float("1.702") * x,
        sp.sin(x),
        x + y,
        elementwise("relu").forward,
        x**x,
        sp.exp(x) * (1 + sp.Float("0.5") * sp.pi),
    ):
        with pytest.raises(ball.ArbTranslationError):
            ball.to_arb(expr, x)


def _same_ball(a: flint.arb, b: flint.arb) -> bool:
    if a.is_nan() or b.is_nan():
        return a.is_nan() and b.is_nan()
    return a.mid().man_exp() == b.mid().man_exp() and a.rad().man_exp() == b.rad().man_exp()


@pytest.mark.parametrize("key", [m.key for m in ELEMENTWISE])
def test_straight_line_gives_the_closures_balls(key):
    """The generated straight-line evaluation and the tree of closures it replaced compute
    the same balls, bit for bit: the catalog's expressions (and the forms the references
    evaluate), plus one with every kind of node and repeated subtrees, at points, an
    interval and several precisions."""
    module = elementwise(key)
    every_node = (
        (sp.exp(-x) + 1) ** -2 * sp.sqrt(2 + x**2)
        + 1 / sp.sqrt(3 + x**2)
        + (2 + x**2) ** sp.Rational(3, 2)
        + (1 + x**2) ** sp.Rational(-2, 3)
        + sp.erfc(x / sp.sqrt(2)) * sp.erf(x)
        + sp.log(2 + x**2) * sp.tanh(x)
        + sp.Abs(x - 3) * sp.pi
        + sp.E * (sp.exp(-x) + 1) ** -2
        + sp.Rational(1, 3)
    )
    exprs = [module.forward, module.derivative, module.second_derivative, every_node]
    exprs += [stable(e) for e in exprs]
    points = [flint.arb(v) for v in (-40.5, -3.25, -1e-3, 0.0, 2.0**-30, 0.75, 7.0, 300.0)]
    points.append(flint.arb("0.5 +/- 0.01"))
    checked = 0
    for expr in exprs:
        try:
            closures = ball._translate(sp.sympify(expr), x)
        except ball.ArbTranslationError:  # ReLU's Piecewise: refused by both
            with pytest.raises(ball.ArbTranslationError):
                ball.to_arb(expr, x)
            continue
        straight = ball.to_arb(expr, x)
        for prec in (53, 128, 448):
            with ball.working_precision(prec):
                for t in points:
                    assert _same_ball(straight(t), closures(t)), (expr, t, prec)
                    checked += 1
    # every expression but ReLU's Piecewise forward and derivative (and their stable forms)
    assert checked == 3 * len(points) * (4 if key == "relu" else 8)


def test_translator_agrees_with_mpmath():
    expr = (
        elementwise("gelu_tanh").second_derivative
        + sp.erfc(x)
        + sp.log(2 + x)
        + x ** sp.Rational(3, 2)
        + sp.Abs(x - 3)
        + sp.E
    )
    point = sp.Rational(7, 5)
    enclosure = ball.enclose(expr, x, point, point, prec=200)
    with mpmath.workdps(REFERENCE_DPS):
        expected = _mp(expr)(mpmath.mpf(7) / 5)
    lo, hi = ball.endpoints(enclosure, prec=200)
    assert lo <= Fraction(mpmath.nstr(expected, 45)) + Fraction(1, 10**40), (lo, expected)
    assert Fraction(mpmath.nstr(expected, 45)) - Fraction(1, 10**40) <= hi, (hi, expected)


def test_is_zero_is_exact():
    assert is_zero(sp.tanh(x) - (1 - 2 / (sp.exp(2 * x) + 1)))
    assert not is_zero(sp.tanh(x) - (1 - 2 / (sp.exp(2 * x) + 1)) + sp.Rational(1, 10**40))
