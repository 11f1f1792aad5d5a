"""The normalization claims: verdicts follow from the proofs, the checker answers differently
when a printed statement is changed, and the kernels reach (never exceed) the proven
Lipschitz constants."""

from __future__ import annotations

import dataclasses

import mpmath
import numpy as np
import pytest
import sympy as sp

from derive.check import check
from derive.check.core import EPS_P, GAMMA_MAX, SIGMA_P, D, bound_verdict
from derive.claims import NORM_CLAIMS, claim
from derive.definitions import norms
from derive.definitions.norms import ROW_NORMS, closed_form_proof, row_norm, vector
from kernels import centernorm, layernorm, rmsnorm, weightnorm
from proofs import norms as pn
from proofs.core import is_zero


@pytest.fixture(scope="module")
def verdicts() -> dict[str, str]:
    return {c.id: check(c).verdict for c in NORM_CLAIMS}


def test_every_norm_claim_is_proven(verdicts):
    for c in NORM_CLAIMS:
        result = check(c)
        assert result.rigorous, f"{c.id}: not rigorous ({result.method})"
        assert result.proof.verify().ok, c.id


def test_norm_verdicts(verdicts):
    """Facts known independently of the checker: the printed Jacobians are the
    denominator-layout transposes; RMSNorm's bound is reached at x = 0 for every gamma;
    LayerNorm's and CenterNorm's only when the largest |gamma_i| repeats; WeightNorm's
    Table 2 row prints W where its layout needs W^T; ||W||_F < sqrt(sum gamma^2) for eps > 0."""
    expected = {
        "layernorm.definition": "holds",
        "layernorm.jacobian": "holds",
        "layernorm.eq19": "holds",
        "layernorm.lipschitz": "holds_loose",
        "layernorm.a2_bounds": "holds",
        "layernorm.a2_centered": "holds",
        # 000's slides: its normalization is LayerNorm's; its one gain shared by the
        # neurons is not; its worked example drops eps; each sample is normalized alone
        "layernorm.algorithm_000": "holds",
        "layernorm.affine_000": "misprinted",
        "layernorm.example_000": "fails",
        "layernorm.batch_size_000": "holds",
        "rmsnorm.definition": "holds",
        "rmsnorm.jacobian": "holds",
        "rmsnorm.lipschitz": "holds",
        "centernorm.definition": "holds",
        "centernorm.jacobian": "holds",
        "centernorm.lipschitz": "holds_loose",
        "weightnorm.definition": "holds",
        "weightnorm.jacobian": "misprinted",
        "weightnorm.lipschitz": "holds",
        "weightnorm.frobenius": "fails",
        "weightnorm.equality": "fails",
        "normalization.eq51": "fails",
        "normalization.eq52": "fails",
    }
    assert verdicts == expected


def test_a_wrong_printed_jacobian_fails_with_an_exact_counterexample():
    """diag(gamma) on the left (numerator layout's place) is wrong in denominator layout."""

    def left(key, size):
        return sp.diag(*vector("gamma", size)) * pn.printed_jacobian("layernorm_z", size)

    verdict, proof, witness = pn.jacobian_decision("layernorm", "variant", left)
    assert verdict == "fails"
    assert proof.verify().ok
    size = witness["D"]
    i, j = witness["entry"]
    point = {
        sp.Symbol(k, real=True) if k != "epsilon_p" else pn.EPS_PAPER: sp.sympify(v)
        for k, v in witness["point"].items()
    }
    # Rerun independently: finite differences of the paper's forward at 50 digits.
    y = pn.paper_forward("layernorm", size, pn.EPS_PAPER)
    xs = vector("x", size)
    i, j = witness["entry"]
    f = sp.lambdify(
        [xs[k] for k in range(size)],
        y[j].subs({k: v for k, v in point.items() if k not in xs}),
        "mpmath",
    )
    with mpmath.workdps(50):
        at = [mpmath.mpf(str(point[xs[k]])) for k in range(size)]
        # denominator layout: entry (i, j) is d y_j / d x_i
        derivative = mpmath.diff(lambda t: f(*[t if k == i else at[k] for k in range(size)]), at[i])
        assert abs(derivative - mpmath.mpf(sp.N(sp.sympify(witness["derived"]), 50))) < 1e-40
        assert abs(derivative - mpmath.mpf(sp.N(sp.sympify(witness["printed"]), 50))) > 1e-3


def test_bound_verdict_answers_for_changed_constants():
    scale = sp.sqrt(D) / sp.sqrt(EPS_P)
    assert bound_verdict(GAMMA_MAX * scale / 2, GAMMA_MAX * scale, SIGMA_P * scale)[0] == "fails"
    assert bound_verdict(2 * GAMMA_MAX * scale, GAMMA_MAX * scale, GAMMA_MAX * scale)[0] == (
        "holds_loose"
    )
    assert bound_verdict(GAMMA_MAX * scale, GAMMA_MAX * scale, GAMMA_MAX * scale)[0] == "holds"
    halved = dataclasses.replace(claim("rmsnorm.lipschitz"), formal=GAMMA_MAX * scale / 2)
    assert check(halved).verdict == "fails"


@pytest.mark.parametrize("module", [m.key for m in ROW_NORMS])
def test_closed_forms_are_proven(module):
    verification = closed_form_proof(module).verify()
    assert verification.ok, verification.summary()


def test_a_wrong_closed_form_is_rejected():
    """Dropping the mean(gamma g) term from LayerNorm's VJP must not pass the proof."""

    class Dropped(norms.RowNorm):
        @property
        def vjp(self):
            return super().vjp.subs(norms.m_a, 0)

    module = row_norm("layernorm")
    wrong = Dropped(**{f.name: getattr(module, f.name) for f in dataclasses.fields(module)})
    g = vector("g", 3)
    xs, _, _, y = module.forward(3)
    difference = wrong.closed_forms(3, g)["vjp"] - y.jacobian(xs).T * g
    assert not all(is_zero(e) for e in difference)


# --- the kernels against the proven constants --------------------------------------------


def _norm2(matrix: np.ndarray) -> float:
    return float(np.linalg.norm(matrix, 2))


@pytest.mark.parametrize("eps", [1e-5, 1e-2, 1.0])
@pytest.mark.parametrize("size", [2, 3, 8, 64])
def test_layernorm_reaches_its_constant_at_constant_rows(size, eps):
    """gamma = 1: ||J|| = 1/sqrt(eps) at a constant row (the proof's witness)."""
    jac = layernorm.jacobian(np.full(size, 3.25), np.ones(size), np.zeros(size), eps)
    assert _norm2(jac) == pytest.approx(1 / np.sqrt(eps), rel=1e-13), (size, eps)


def test_layernorm_loose_witness():
    """gamma = (2, 1, 1): ||J|| at a constant row is sqrt(3)/sqrt(eps) < 2/sqrt(eps)."""
    eps = 1e-4
    jac = layernorm.jacobian(np.zeros(3), np.array([2.0, 1.0, 1.0]), np.zeros(3), eps)
    assert _norm2(jac) == pytest.approx(np.sqrt(3) / np.sqrt(eps), rel=1e-13)


def test_rmsnorm_reaches_its_constant_at_zero():
    gamma = np.array([0.5, -3.0, 2.0, 0.0])
    jac = rmsnorm.jacobian(np.zeros(4), gamma, None, 1e-6)
    assert _norm2(jac) == pytest.approx(3.0 / np.sqrt(1e-6), rel=1e-13)


@pytest.mark.parametrize("size", [3, 5, 16])
def test_local_constants_have_the_derived_closed_form(size):
    """gamma = 1, D >= 3: ||J(x)|| = 1/sqrt(var + eps) (LayerNorm), 1/sqrt(mean x^2 + eps)
    (RMSNorm); D = 2 LayerNorm: eps/(var + eps)^(3/2)."""
    rng = np.random.default_rng(size)
    eps = 1e-3
    for _ in range(5):
        x = rng.normal(size=size) * rng.uniform(0.01, 3)
        ones = np.ones(size)
        var, ms = x.var(), np.mean(x * x)
        got = _norm2(layernorm.jacobian(x, ones, np.zeros(size), eps))
        assert got == pytest.approx(1 / np.sqrt(var + eps), rel=1e-12), (x, got)
        got = _norm2(rmsnorm.jacobian(x, ones, None, eps))
        assert got == pytest.approx(1 / np.sqrt(ms + eps), rel=1e-12), (x, got)
    x = np.array([0.3, -0.1])
    var = x.var()
    got = _norm2(layernorm.jacobian(x, np.ones(2), np.zeros(2), eps))
    assert got == pytest.approx(eps / (var + eps) ** 1.5, rel=1e-12)


def _ascent(jacobian, x0, steps=60, rate=0.2):
    """Gradient-free ascent on ||J(x)|| by random coordinate moves (evidence only)."""
    rng = np.random.default_rng(0)
    x, best = x0.copy(), _norm2(jacobian(x0))
    for k in range(steps):
        trial = x + rng.normal(size=x.shape) * rate * (0.9**k)
        value = _norm2(jacobian(trial))
        if value > best:
            x, best = trial, value
    return best


@pytest.mark.parametrize("seed", range(4))
def test_searched_local_constants_never_exceed_the_proven_bound(seed):
    rng = np.random.default_rng(seed)
    size, eps = 6, 1e-3
    gamma = rng.normal(size=size)
    bound_ln = pn.centered_gamma_norm(list(map(sp.Rational, gamma.tolist())))
    bound_ln = float(bound_ln) / np.sqrt(eps)
    bound_rms = np.abs(gamma).max() / np.sqrt(eps)
    x0 = rng.normal(size=size) * 0.05
    ln = _ascent(lambda x: layernorm.jacobian(x, gamma, np.zeros(size), eps), x0)
    rms = _ascent(lambda x: rmsnorm.jacobian(x, gamma, None, eps), x0)
    assert ln <= bound_ln * (1 + 1e-12), (ln, bound_ln)
    assert rms <= bound_rms * (1 + 1e-12), (rms, bound_rms)
    assert ln > 0.5 * bound_ln and rms > 0.5 * bound_rms  # the search got close


def test_centernorm_and_weightnorm_constants():
    gamma = np.array([2.0, 1.0, 1.0])
    jac = centernorm.jacobian(np.array([1.0, -4.0, 2.5]), gamma, np.zeros(3))
    assert _norm2(jac) == pytest.approx(1.5 * np.sqrt(3), rel=1e-13)
    v, gammas, eps = pn.PARALLEL_OPPOSITE
    w = weightnorm.jacobian(np.zeros(2), np.array(v, float), np.array(gammas, float), eps)
    assert _norm2(w) == pytest.approx(np.sqrt(2), rel=1e-14)
    w = weightnorm.jacobian(np.zeros(2), np.array(v, float) * 1e4, np.ones(2), 1.0)
    assert np.sqrt(2) * (1 - 1e-8) < _norm2(w) < np.sqrt(2)  # approached, not reached


def test_weightnorm_layout_verdict_follows_the_printed_matrix():
    """W^T (the paper's own layout) would hold; W is the numerator layout, misprinted; any
    other matrix fails."""
    assert pn.weightnorm_layout_decision()[0] == "misprinted"
    transposed = pn.weightnorm_layout_decision(lambda v, g: pn.printed_weightnorm_jacobian(v, g).T)
    assert transposed[0] == "holds" and transposed[1].verify().ok
    assert (
        pn.weightnorm_layout_decision(lambda v, g: 2 * pn.printed_weightnorm_jacobian(v, g))[0]
        == "fails"
    )


def test_the_centered_row_is_never_longer_and_a_wrong_gap_is_refused():
    """|x|^2 - |Px|^2 = D mean^2 for symbolic D; twice that is refused."""
    assert pn.centering_shortens()
    assert not pn.centering_shortens(factor=2)


def test_centernorm_definition_for_symbolic_size_and_a_wrong_scale_is_refused():
    assert pn.symbolic_centernorm_definition()
    assert not pn.symbolic_centernorm_definition(scale_factor=2)


def test_weightnorm_definition_for_symbolic_size_and_a_wrong_eps_is_refused():
    assert pn.symbolic_weightnorm_definition()
    assert not pn.symbolic_weightnorm_definition(eps_factor=2)


def test_lecture_layernorm_proofs_refuse_false_variants():
    """000's LayerNorm: the symbolic identity fails with eps doubled; a derivative by the
    sample's own activations is not 0; with equal per-neuron gains a shared gain exists (so
    the solver's empty answer for gains (1, 2) is a real refusal)."""
    assert pn.symbolic_lecture_layernorm() and not pn.symbolic_lecture_layernorm(2)
    assert pn.lecture_samples_apart() and not pn.lecture_samples_apart(other_sample=False)
    assert pn.lecture_shared_gain_witness()["solutions"] == []
    g, b = sp.symbols("gamma beta", real=True)
    assert pn.lecture_shared_gain_witness((3, 3))["solutions"] == [{g: 3, b: 0}]
    printed, algorithm = pn.lecture_example_witness()
    assert (printed, algorithm) == (sp.sqrt(2), 1)


def test_lecture_layernorm_is_the_kernel_sample_by_sample():
    """Independently of SymPy: 000's algorithm in NumPy float64 (statistics over the N
    neurons of each sample, a gain and a bias per neuron) against kernels.layernorm on the
    samples as rows, and a sample's row unchanged by the other samples of its batch."""
    rng = np.random.default_rng(0)
    n_neurons, m, eps = 7, 5, 1e-3
    a = rng.normal(size=(n_neurons, m)) * 3 + 1  # a^i_j: neuron i, sample j
    gamma, beta = rng.normal(size=n_neurons), rng.normal(size=n_neurons)
    mu = a.mean(axis=0)
    sigma2 = ((a - mu) ** 2).mean(axis=0)
    lecture = gamma[:, None] * (a - mu) / np.sqrt(sigma2 + eps) + beta[:, None]
    ours = layernorm.forward(a.T, gamma, beta, eps).T
    np.testing.assert_allclose(ours, lecture, rtol=1e-13, atol=1e-13)
    alone = layernorm.forward(a.T[:1], gamma, beta, eps)
    np.testing.assert_array_equal(alone[0], layernorm.forward(a.T, gamma, beta, eps)[0])
