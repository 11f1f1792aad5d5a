"""The optimizer claims (004 appendix B, 001 sections 3.5-3.7): the verdict table, every
proof verifying, a mutation per decider that flips its verdict, and the derived update
rules against an independent float64 or exact computation of the canonical algorithms."""

from __future__ import annotations

import dataclasses
from fractions import Fraction

import numpy as np
import pytest
import sympy as sp

from derive.check import check
from derive.claims import UPDATE_CLAIMS, claim
from derive.definitions import updates as up
from proofs import updates as pu

VERDICTS = {
    "momentum.definition_004": "holds",
    "momentum.weights_004": "misprinted",
    "momentum.example_004": "holds",
    "momentum.weights_sum_004": "misprinted",
    "momentum.bias_correction_004": "holds",
    "momentum.algorithm1_001": "holds",
    "momentum.gradient_point_001": "misprinted",
    "momentum.nesterov_001": "fails",
    "momentum.eq37_001": "fails",
    "adaptive.step_cap_004": "holds",
    "adaptive.square_root_004": "holds",
    "adaptive.adadelta_004": "fails",
    "adaptive.adagrad_004": "misprinted",
    "adaptive.sparse_004": "holds",
    "adaptive.adam_combines_004": "holds",
    "adaptive.bias_correction_004": "holds",
    "adaptive.definition16_004": "misprinted",
    "adaptive.adamw_001": "holds",
    "mixed_precision.fp32_range_001": "holds",
    "mixed_precision.fp16_range_001": "holds",
    "mixed_precision.eq38_001": "fails",
    "mixed_precision.underflow_001": "holds",
}


def _decide(c):
    """A fresh verdict (the checker's cache keys on the claim, a mutated claim is new)."""
    return check.__wrapped__(c)


def test_verdicts():
    """Known independently: PyTorch's SGD and Adam documentation, Zeiler's Adadelta, the
    IEEE binary16 format; the misprints are visible in the text (swapped weights, (1 -
    gamma)^t, m_{t-1} in v_t, the gradient at w_t)."""
    assert {c.id: check(c).verdict for c in UPDATE_CLAIMS} == VERDICTS


def test_every_claim_is_rigorous_with_a_parsable_value_and_every_size():
    for c in UPDATE_CLAIMS:
        result = check(c)
        assert result.rigorous and result.proof.verify().ok, c.id
        sp.sympify(result.value)
        assert result.proven_for == "every size", c.id
        if result.verdict in ("fails", "misprinted"):
            assert result.witness, c.id


# --- mutations: a wrong printed statement flips the verdict --------------------------


def _mutated(claim_id: str, **changes):
    return _decide(dataclasses.replace(claim(claim_id), **changes))


def test_a_sum_that_is_not_an_average_fails():
    wrong = up.gamma * up.prev + up.g  # PyTorch's undamped buffer is not an average
    result = _mutated("momentum.definition_004", formal=wrong)
    assert result.verdict == "fails" and result.value == "gamma_d + 1"


def test_swapped_prose_is_misprinted_and_the_right_prose_holds():
    right = sp.Tuple(1 - up.gamma, up.gamma)
    assert _mutated("momentum.weights_004", formal=right).verdict == "holds"


@pytest.mark.parametrize(
    ("claim_id", "wrong", "derived"),
    [
        (
            "momentum.example_004",
            sp.Tuple(sp.Rational(9, 10), sp.Rational(99, 100), sp.Rational(9999, 10000)),
            "(9/10, 99/100, 999/1000)",
        ),
        ("momentum.bias_correction_004", 1 / (1 - up.gamma ** (up.T + 1)), "1/(1 - gamma_d**T)"),
        ("adaptive.step_cap_004", 1 / up.eps**2, "1/epsilon"),
        (
            "adaptive.bias_correction_004",
            sp.Tuple(1 / (1 - up.beta1**up.T), 1 / (1 - up.beta2 ** (up.T - 1))),
            "(1/(1 - beta_1**T), 1/(1 - beta_2**T))",
        ),
        ("mixed_precision.underflow_001", sp.Rational(1, 2**24), "0"),
    ],
)
def test_a_wrong_printed_value_fails(claim_id, wrong, derived):
    result = _mutated(claim_id, formal=wrong)
    assert result.verdict == "fails" and result.witness["derived"] == derived


def test_the_intended_weights_hold_and_the_printed_exponent_is_caught():
    c = claim("momentum.weights_sum_004")
    assert _mutated(c.id, formal=c.intended).verdict == "holds"
    printed, average = pu.printed_b33(2, sp.Rational(1, 2), [1, 1])
    assert (printed, average) == (sp.Rational(1, 2), sp.Rational(3, 4))


def test_decay_inside_the_average_is_not_decoupled():
    v_new, w_new = claim("momentum.algorithm1_001").formal
    coupled = v_new + (1 - up.beta) * up.lam * up.w_prev
    result = _mutated("momentum.algorithm1_001", formal=sp.Tuple(coupled, w_new))
    assert result.verdict == "fails"


def test_the_gradient_at_the_previous_weight_holds():
    assert _mutated("momentum.gradient_point_001", formal=up.w_prev).verdict == "holds"


def test_the_look_ahead_gradient_is_nesterovs():
    assert _mutated("momentum.nesterov_001", formal=up.NESTEROV_POINT).verdict == "holds"
    heavy, nesterov = pu.momentum_iterates(up.w_prev), pu.momentum_iterates(up.NESTEROV_POINT)
    step = next(iter(heavy[1].free_symbols))
    assert sp.expand(nesterov[1] - heavy[1]) == step**2 / 2


def test_eq37_with_the_factor_two_holds():
    right = 2 * up.alpha * up.lam * up.w_prev
    assert _mutated("momentum.eq37_001", formal=right).verdict == "holds"


def test_without_the_square_root_the_update_is_not_scale_free():
    no_root = up.eta / (up.G_tj + up.eps)
    result = _mutated("adaptive.square_root_004", formal=no_root)
    assert result.verdict == "fails" and result.witness["derived"] == "-1"


def test_adagrad_with_squares_holds():
    c = claim("adaptive.adagrad_004")
    assert _mutated(c.id, formal=c.intended).verdict == "holds"
    assert pu.accumulated(c.formal, [1, -1]) == [1, 0]


def test_definition16_with_v_holds():
    c = claim("adaptive.definition16_004")
    assert _mutated(c.id, formal=c.intended).verdict == "holds"


def test_a_decay_without_the_learning_rate_is_not_pytorchs_adamw():
    wrong = up.w_prev - up.alpha * up.mu - up.lam * up.w_prev
    result = _mutated("adaptive.adamw_001", formal=wrong)
    assert result.verdict == "fails" and result.witness == {"printed": "0", "derived": "1/2"}


def test_wrong_float_constants_fail():
    wrong = sp.Tuple(sp.Rational(1, 2**14), 65504, 65520)
    assert _mutated("mixed_precision.fp16_range_001", formal=wrong).verdict == "fails"
    assert (
        _mutated("mixed_precision.fp32_range_001", printed_value="(1.17e-38, 3.4e38)").verdict
        == "fails"
    )


def test_the_proof_helpers_reject_false_statements():
    # a nonlinear update is no multiple of a momentum buffer
    assert not pu.torch_momentum_induction(up.gamma * up.prev + (1 - up.gamma) * up.g**2)
    assert pu.scaling_degree(up.eta / (up.G_tj + up.eps) ** 2) == -3
    assert not pu.rounds_to(sp.Rational(1, 2**14), "6.11e-5")


# --- independent numerical checks of the derived update rules (NumPy, float64) ---------


def _sgd_004(gradients, eta, gamma):
    m, w, out = 0.0, 0.0, []
    for g in gradients:
        m = gamma * m + (1 - gamma) * g
        w -= eta * m
        out.append(w)
    return np.array(out)


def _sgd_torch(gradients, lr, momentum, dampening=0.0):
    """PyTorch's documented SGD algorithm, written out."""
    b, w, out = None, 0.0, []
    for g in gradients:
        b = g if b is None else momentum * b + (1 - dampening) * g
        w -= lr * b
        out.append(w)
    return np.array(out)


def test_004_momentum_is_torch_sgd_with_the_derived_lr_numerically():
    """Independent of SymPy: 50 random gradients; the derived mapping lr = eta (1 - gamma),
    dampening 0 reproduces 004's weights to float64 rounding; dampening = gamma does not."""
    rng = np.random.default_rng(7)
    gradients = rng.standard_normal(50)
    eta, gamma = 0.1, 0.9
    ours = _sgd_004(gradients, eta, gamma)
    np.testing.assert_allclose(_sgd_torch(gradients, eta * (1 - gamma), gamma), ours, rtol=1e-12)
    damped = _sgd_torch(gradients, eta, gamma, dampening=gamma)
    assert np.max(np.abs(damped - ours)) > 1e-3


@pytest.mark.parametrize("steps", [1, 2, 7, 40])
def test_bias_corrected_average_of_a_constant_is_exact(steps):
    """Exact rationals: A_T (1 - gamma^T)^-1 of a constant sequence is the constant."""
    gamma, value = Fraction(9, 10), Fraction(3, 7)
    a = Fraction(0)
    for _ in range(steps):
        a = gamma * a + (1 - gamma) * value
    assert a / (1 - gamma**steps) == value


def test_adadelta_witness_numerically():
    """float64 torch.optim.Adadelta algorithm against Definition 11 on g = (1, 1)."""
    rho, eps = 0.5, 1.0
    v = u = 0.0
    deltas = []
    for g in (1.0, 1.0):
        v = rho * v + (1 - rho) * g * g
        d = np.sqrt(u + eps) / np.sqrt(v + eps) * g
        u = rho * u + (1 - rho) * d * d
        deltas.append(d)
    ours, theirs = pu.adadelta_ratio()
    assert deltas[1] / deltas[0] == pytest.approx(float(theirs), rel=1e-14)
    assert float(ours) == pytest.approx(np.sqrt(6 / 7), rel=1e-14)


def test_binary16_decoding_and_rounding_against_numpy():
    """The exact decoder and rounder against NumPy's float16 on patterns and on values."""
    for bits in (0x0000, 0x0001, 0x03FF, 0x0400, 0x3C00, 0x7BFF, 0x8001, 0xFBFF):
        value = np.array([bits], dtype=np.uint16).view(np.float16)[0]
        assert up.binary16_value(bits) == Fraction(float(value)), hex(bits)
    rng = np.random.default_rng(3)
    for x in np.concatenate([rng.uniform(-7e4, 7e4, 200) / 1.1, rng.uniform(-1e-4, 1e-4, 200)]):
        expected = Fraction(float(np.float16(x)))
        assert up.round_binary16(Fraction(float(x))) == expected, x


def test_b30_without_its_square_root_fails():
    """B.30 with v in place of its square root is not Definition 11's step size on
    momentum's average."""
    wrong = up.eta * up.m_prev / (up.v_prev + up.eps)
    assert _mutated("adaptive.adam_combines_004", formal=wrong).verdict == "fails"


def test_sparse_coordinates_step_ratio_against_float64_running_averages():
    """Independently of SymPy: float64 running averages of g^2 for a coordinate that sees
    g = 3 at every step and one that sees it every k-th step, compared at a step where both
    see it, give sqrt((1 - gamma^k)/(1 - gamma)) for every k; k = 1 gives no gain."""
    gamma, steps = 0.9, 240
    for k in (1, 2, 5, 10, 24):
        dense = sparse = 0.0
        for t in range(1, steps + 1):
            g_sparse = 3.0 if t % k == 0 else 0.0
            dense = gamma * dense + (1 - gamma) * 9.0
            sparse = gamma * sparse + (1 - gamma) * g_sparse**2
        derived = float(sp.sqrt(pu.sparse_ratio(k).subs(up.gamma, sp.Rational(9, 10))))
        assert np.sqrt(dense / sparse) == pytest.approx(derived, rel=1e-12), k
    assert pu.sparse_ratio(1) == 1
