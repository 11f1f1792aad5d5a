"""The BatchNorm claims: verdicts follow from the derivation, a changed printed formula is
caught with a rerunnable witness, and the kernels reach the Lipschitz constants the
proofs give."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
import sympy as sp

from derive.check import UnprovenError, check
from derive.claims import BATCHNORM_CLAIMS, claim
from derive.definitions import batchnorm as bn
from derive.definitions.norms import eps
from kernels import batchnorm
from proofs import batchnorm as pb
from proofs.core import sum_identity, total


@pytest.fixture(scope="module")
def verdicts() -> dict[str, str]:
    return {c.id: check(c).verdict for c in BATCHNORM_CLAIMS}


def test_batchnorm_verdicts(verdicts):
    """Independently known: Eq. 16-17 and 004's chain rule are right; A.2 prints a product
    for a quotient; Definition 17 indexes Zbar_ii; B.51's first term is garbled; with
    eps > 0 the output variance is gamma^2 sigma^2/(sigma^2 + eps), not gamma^2."""
    misprinted = {"a2_definition", "definition_004", "B51", "concept20"}
    # batch_one_000 holds: at M = 1 the training forward is beta for every input
    # the two '≈' of A.2 are off by a relative 1 or more (global constant max|gamma|/sqrt(eps);
    # the dropped rank-two part of the Jacobian): fails by the rule for every '≈'
    # 002's shift gives std |gamma|, not gamma; 003's running variance averages the biased
    # batch variance where PyTorch averages the unbiased one
    fails = {"moments_000", "identity_000", "moments_002", "lipschitz", "a2_jacobian"}
    fails |= {"shift_002", "running_003", "example_000"}  # 000's example writes no eps
    fails |= {"moving_average_001"}  # the training forward's statistics depend on the batch
    for c in BATCHNORM_CLAIMS:
        label = c.id.split(".", 1)[1]
        expected = "misprinted" if label in misprinted else "fails" if label in fails else "holds"
        assert verdicts[c.id] == expected, (c.id, verdicts[c.id], expected)


def test_every_batchnorm_claim_is_rigorous():
    for c in BATCHNORM_CLAIMS:
        result = check(c)
        assert result.rigorous, c.id
        assert result.proof.verify().ok, c.id
        sp.sympify(result.value)  # SymPy-parsable, as SPEC asks


@pytest.mark.parametrize("denom", bn.DENOMS)
def test_closed_forms_are_proven(denom):
    verification = bn.closed_form_proof(denom).verify()
    assert verification.ok, verification.summary()


def test_closed_forms_hold_for_a_symbolic_batch_and_the_other_denominator_does_not():
    """Both denominators' closed forms equal sympy.diff for every batch size M; the
    sqrt(var + eps) forms are not the derivatives of the std + eps forward, nor the
    reverse."""
    for denom in bn.DENOMS:
        assert all(bn.symbolic_batchnorm_checks(denom).values()), denom
    for denom, other in zip(bn.DENOMS, reversed(bn.DENOMS), strict=True):
        swapped = bn.symbolic_batchnorm_checks(denom, bn.form(other))
        assert not any(swapped.values()), (denom, swapped)


@pytest.mark.parametrize("denom", bn.DENOMS)
def test_the_chain_rule_assembles_to_sympy_diff(denom):
    assert all(bn.derivation_matches(denom, size) for size in (1, 2, 3))
    assert bn.symbolic_derivation_matches(denom)


def _clear_derivation_caches():
    bn.symbolic_derivation_matches.cache_clear()
    bn.derivation_matches.cache_clear()


@pytest.mark.parametrize("path", ["by_mu", "spread_by_x"])
def test_the_symbolic_batch_check_catches_a_missing_path(path, monkeypatch):
    """Drop the mean's path (or the spread's) from the chain rule: the identity for a
    symbolic M fails, as the one at M = 3 does."""
    for denom in bn.DENOMS:
        steps = bn.derivation(denom)
        if path == "by_mu":
            term = steps.by_mu * steps.mu_by_x
        else:
            term = steps.by_spread * steps.spread_by_x
        broken = dataclasses.replace(steps, assembled=steps.assembled - term)
        monkeypatch.setattr(bn, "derivation", lambda d, b=broken: b)
        _clear_derivation_caches()
        try:
            assert not bn.symbolic_derivation_matches(denom), (denom, path)
            assert not bn.derivation_matches(denom, 3), (denom, path)
        finally:
            monkeypatch.undo()
            _clear_derivation_caches()


def test_a_sign_slip_in_eq16_fails_with_a_rerunnable_witness():
    wrong = dataclasses.replace(claim("batchnorm.eq16"), formal=-claim("batchnorm.eq16").formal)
    result = check(wrong)
    assert result.verdict == "fails"
    point = {
        sp.Symbol(k, **_assumptions(k)): sp.sympify(v) for k, v in result.witness["point"].items()
    }
    printed = sp.nsimplify(wrong.formal.subs(point))
    diagonal = {bn.x_j: bn.x_k, bn.delta_jk: 1}
    derived = bn.derivation("sqrt_var_eps").assembled.subs(diagonal).subs(point)
    assert str(printed) == result.witness["printed"]
    assert sp.simplify(sp.nsimplify(derived) - sp.sympify(result.witness["derived"])) == 0
    assert printed != sp.nsimplify(derived)


def _assumptions(name: str) -> dict:
    return {
        "x_k": {"real": True},
        "x_j": {"real": True},
        "mu": {"real": True},
        "sigma": {"positive": True},
        "sigma^2": {"positive": True},
        "epsilon": {"nonnegative": True},
        "M": {"positive": True, "integer": True},
        "delta_jk": {"nonnegative": True},
    }[name]


def test_a_garbled_line_without_an_intent_cannot_be_decided():
    no_intent = dataclasses.replace(claim("batchnorm.B51"), intended=None)
    with pytest.raises(UnprovenError):
        check(no_intent)


def test_moment_witness_reruns():
    """x = (0, 2), eps = 1: xhat = (-1, 1)/sqrt(2), variance 1/2 (computed here by hand)."""
    x = np.array([[0.0], [2.0]])
    y = batchnorm.forward(x, np.ones(1), np.zeros(1), eps=1.0)
    assert y[:, 0] == pytest.approx([-1 / np.sqrt(2), 1 / np.sqrt(2)], rel=1e-15)
    assert y.var() == pytest.approx(0.5, rel=1e-15)
    assert pb.moment_counterexample() == (0, sp.Rational(1, 2))


# --- the kernels against the proven constants ------------------------------------------


def _block_norms(x, gamma, eps, denom="sqrt_var_eps"):
    blocks = batchnorm.jacobian(x, gamma, np.zeros_like(gamma), eps, denom=denom)
    return np.array([np.linalg.norm(b, 2) for b in blocks])


@pytest.mark.parametrize("size", [3, 4, 16])
def test_local_constant_is_the_printed_value(size):
    """M >= 3: each block's 2-norm is |gamma_j|/sqrt(var_j + eps) (std form: /(sigma + eps))."""
    rng = np.random.default_rng(size)
    x = rng.normal(size=(size, 3)) * [0.1, 1.0, 5.0]
    gamma, eps = np.array([2.0, -0.5, 1.0]), 1e-3
    got = _block_norms(x, gamma, eps)
    want = np.abs(gamma) / np.sqrt(x.var(0) + eps)
    np.testing.assert_allclose(got, want, rtol=1e-12)
    got = _block_norms(x, gamma, eps, "std_plus_eps")
    np.testing.assert_allclose(got, np.abs(gamma) / (x.std(0) + eps), rtol=1e-12)


def test_global_constant_at_constant_features():
    x = np.full((5, 2), 7.0)
    gamma, eps = np.array([3.0, -1.0]), 1e-4
    np.testing.assert_allclose(
        _block_norms(x, gamma, eps), np.abs(gamma) / np.sqrt(eps), rtol=1e-13
    )
    np.testing.assert_allclose(
        _block_norms(x, gamma, eps, "std_plus_eps"), np.abs(gamma) / eps, rtol=1e-13
    )


def test_two_samples_have_the_derived_local_constant():
    """M = 2: |gamma| eps/(var + eps)^(3/2)."""
    x = np.array([[0.3], [-0.1]])
    eps = 1e-2
    got = _block_norms(x, np.ones(1), eps)[0]
    assert got == pytest.approx(eps / (x.var() + eps) ** 1.5, rel=1e-12)


def test_notes_running_update_maps_to_pytorch():
    """003: m run + (1 - m) batch with m = 1 - momentum; the variance with PyTorch's
    unbiased batch variance (the notes' biased one differs by M/(M-1))."""
    rng = np.random.default_rng(3)
    x = rng.normal(size=(8, 3))
    mean, var = np.zeros(3), np.ones(3)
    new_mean, new_var = batchnorm.running_update(x, mean, var, momentum=0.25)
    m = 1 - 0.25
    np.testing.assert_allclose(new_mean, m * mean + (1 - m) * x.mean(0), rtol=1e-14)
    np.testing.assert_allclose(new_var, m * var + (1 - m) * x.var(0, ddof=1), rtol=1e-14)
    biased = m * var + (1 - m) * x.var(0)
    assert np.all(np.abs(new_var - biased) > 1e-3)


def test_corrected_moments_hold_and_printed_ones_fail_at_their_witness():
    """The verdict follows the printed tuple: the corrected variance holds; the printed one
    fails at an exact point whose values rerun here."""
    gamma, beta = sp.Symbol("gamma"), sp.Symbol("beta")
    printed = claim("batchnorm.moments_000")
    corrected = sp.Tuple(beta, gamma**2 * bn.sigma**2 / (bn.sigma**2 + eps))
    assert check(dataclasses.replace(printed, formal=corrected)).verdict == "holds"
    result = check(printed)
    assert result.verdict == "fails"
    point = {
        sp.Symbol(k, **({"positive": True} if k == "sigma" else {})): sp.sympify(v)
        for k, v in result.witness["point"].items()
    }
    point = {(eps if str(k) == "epsilon" else k): v for k, v in point.items()}
    index = result.witness["component"]
    assert sp.nsimplify(printed.formal[index].subs(point)) == sp.sympify(result.witness["printed"])
    assert sp.nsimplify(corrected[index].subs(point)) == sp.sympify(result.witness["derived"])


def test_the_symbolic_batch_statistics_and_gradients_hold_and_false_variants_do_not(monkeypatch):
    """d mu/dx_j = 1/M and d sigma/dx_j = (x_j - mu)/(M sigma) for a symbolic M, not twice
    them; 004's gradient sums (B.53, B.55, B.57) equal sympy.diff of the loss for a symbolic
    M, and a chain rule without the spread's path does not give dx."""
    for which in ("mu", "sigma"):
        assert bn.symbolic_statistic_partial(which)
        assert not bn.symbolic_statistic_partial(which, factor=2)
    for which in ("dbeta", "dgamma", "dx"):
        assert bn.symbolic_gradient_matches(which), which
    steps = bn.derivation("std_plus_eps")
    broken = dataclasses.replace(
        steps, assembled=steps.assembled - steps.by_spread * steps.spread_by_x
    )
    monkeypatch.setattr(bn, "derivation", lambda d: broken)
    bn.symbolic_gradient_matches.cache_clear()
    try:
        assert not bn.symbolic_gradient_matches("dx")
    finally:
        monkeypatch.undo()
        bn.symbolic_gradient_matches.cache_clear()


def test_the_running_update_is_the_kernels():
    """The derived update (PyTorch's) is what ``kernels.batchnorm.running_update`` computes
    on a random batch, and 003's printed update is not (its variance is the biased one)."""
    rng = np.random.default_rng(3)
    x = rng.standard_normal((5, 3))
    mean_in, var_in = rng.standard_normal(3), rng.uniform(0.5, 2.0, 3)
    new_mean, new_var = batchnorm.running_update(x, mean_in, var_in, momentum=0.25)
    for j in range(3):
        values = {
            bn.mu_run: mean_in[j],
            bn.var_run: var_in[j],
            bn.mu_batch: x[:, j].mean(),
            bn.var_batch: x[:, j].var(),
            bn.keep: 0.75,
        }
        derived = [float(v) for v in bn.running_update(5).subs(values)]
        printed = [float(v) for v in claim("batchnorm.running_003").formal.subs(values)]
        assert np.allclose([new_mean[j], new_var[j]], derived, rtol=1e-12)
        assert new_mean[j] == pytest.approx(printed[0], rel=1e-12)
        assert new_var[j] != pytest.approx(printed[1], rel=1e-3)


def test_the_shift_witness_is_a_negative_gamma():
    result = check(claim("batchnorm.shift_002"))
    assert result.witness["point"] == {"beta": "0", "gamma": "-1"}
    assert (result.witness["printed"], result.witness["derived"]) == ("-1", "1")


def test_concept_20_as_printed_and_as_intended():
    """As printed (d Zbar_cd / d Zbar_cf) the partial is delta_df, 1 at d = f whatever c and
    e are; as intended (d Zbar_cd / d Z_ef) it vanishes for c != e, and not for c = e."""
    partials = pb.normalized_partials(2, 3)
    assert all(v == 0 for (c, _, e, _), v in partials.items() if c != e)
    assert any(v != 0 for (c, _, e, _), v in partials.items() if c == e)
    result = check(claim("batchnorm.concept20"))
    assert result.verdict == "misprinted" and result.witness["printed"] == "1"


def test_concept_19_for_symbolic_indices():
    partial, vanishes = pb.scale_shift_partials()
    assert vanishes and partial.has(sp.KroneckerDelta)


def test_a_batch_of_one_is_beta_in_the_kernels():
    """Independently of SymPy: kernels.batchnorm's training forward of one sample is beta
    and its VJP to x is 0, whatever the sample."""
    x = np.array([[3.0, -7.5, 1e6]])
    gamma, beta = np.array([2.0, -1.0, 0.5]), np.array([0.25, 4.0, -3.0])
    np.testing.assert_array_equal(batchnorm.forward(x, gamma, beta, 1e-5), beta[None, :])
    dx = batchnorm.vjp(x, np.ones_like(x), gamma, beta, 1e-5)[0]
    np.testing.assert_array_equal(dx, np.zeros_like(x))


def test_normalized_moments_for_a_symbolic_batch_refuse_wrong_values():
    """The symbolic-M moments behind normalize_002 and shift_002: mean 0 and variance 1 at
    gamma = 1, beta = 0, (beta, gamma^2) in general; a wrong mean, a wrong variance and the
    standard deviation |gamma| in place of the variance are refused."""
    gamma, beta = sp.Symbol("gamma", real=True), sp.Symbol("beta", real=True)
    assert pb.symbolic_moments_without_eps(1, 0, 0, 1)
    assert pb.symbolic_moments_without_eps(gamma, beta, beta, gamma**2)
    assert not pb.symbolic_moments_without_eps(1, 0, 0, 2)
    assert not pb.symbolic_moments_without_eps(1, 0, 1, 1)
    assert not pb.symbolic_moments_without_eps(gamma, beta, beta, sp.Abs(gamma))


def test_chain_through_zbar_for_a_symbolic_batch_refuses_false_variants():
    """004's chain rule (B.38/B.39, B.41) and Concept 20's intent, for symbolic K and F: they
    hold; doubled inner partials are refused; a partial that does not vanish across features
    would be caught (the same-feature partial is not 0)."""
    checks = pb.symbolic_chain_checks()
    assert all(checks.values()), checks
    wrong = pb.symbolic_chain_checks(inner_factor=2)
    assert not wrong["B39"] and not wrong["B41"]
    size = sp.Symbol("K", integer=True, positive=True)
    z = sp.IndexedBase("Z", real=True)
    a, b, f, l = sp.symbols("a b f l", integer=True, positive=True)  # noqa: E741
    mean = total(z[a, l], l, size) / size
    std = sp.sqrt(total((z[a, l] - mean) ** 2, l, size) / size)
    same_feature = sp.diff((z[a, b] - mean) / (std + eps), z[a, f])
    assert not sum_identity(same_feature, 0)()
