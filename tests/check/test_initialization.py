"""The claims on backpropagation through W = XY, 003's activations and initialization:
the verdicts, the proofs, a wrong variant of each printed statement refused, and the derived
formulas against independent numerical computations (NumPy finite differences, mpmath
quadrature, PyTorch where installed, and the project's kernels on sampled layers, labelled
as sampling evidence)."""

from __future__ import annotations

import dataclasses
import hashlib
from fractions import Fraction

import mpmath
import numpy as np
import pytest
import sympy as sp

from derive.check import check
from derive.claims import INITIALIZATION_CLAIMS, claim
from derive.definitions import initialization as d
from kernels import linear, relu
from proofs import initialization as pi
from proofs.core import UnprovenError

#: Known independently (textbook calculus and probability, He et al. 2015, Bai-Yin):
#: every verdict.
EXPECTED = {
    "backprop.dX_003": "holds",
    "backprop.dY_003": "holds",
    "backprop.tanh_definition_003": "holds",
    "backprop.tanh_derivative_003": "holds",
    "backprop.zero_centered_003": "holds",
    "initialization.xavier_mean_003": "holds",
    "initialization.xavier_variance_003": "holds",
    "initialization.xavier_monotone_003": "holds",
    "initialization.xavier_sigma_003": "holds",
    "initialization.kaiming_mean_003": "holds",
    "initialization.kaiming_second_moment_003": "misprinted",
    "initialization.kaiming_variance_003": "holds",
    "initialization.kaiming_variance_approx_003": "fails",
    "initialization.kaiming_sigma_003": "holds",
    "initialization.xavier_uniform_001": "holds",
    "initialization.figure3_001": "fails",
    "initialization.kaiming_leaky_001": "holds",
    "initialization.orthogonal_001": "holds",
    "initialization.spectral_001": "holds",
    "initialization.depth_aware_001": "holds",
}

#: Digits of the mpmath quadratures that check the exact Gaussian integrals.
QUAD_DPS = 30
#: Their agreement with the exact values: quadrature of a smooth integrand at 30 digits is
#: good to far more than 20.
QUAD_TOLERANCE = mpmath.mpf(10) ** -20


def _wrong(claim_id: str, **changes) -> object:
    """The checker's answer for the claim with ``changes`` (uncached)."""
    return check.__wrapped__(dataclasses.replace(claim(claim_id), **changes))


def test_the_verdicts():
    assert {c.id: check(c).verdict for c in INITIALIZATION_CLAIMS} == EXPECTED


@pytest.mark.parametrize("c", INITIALIZATION_CLAIMS, ids=[c.id for c in INITIALIZATION_CLAIMS])
def test_every_claim_is_rigorous_for_every_size_with_a_parsable_value(c):
    result = check(c)
    assert result.rigorous and result.proof.verify().ok, c.id
    assert result.proven_for == "every size", (c.id, result.proven_for)
    sp.sympify(result.value)


# --- backprop ---------------------------------------------------------------------------------


def test_the_transposed_variant_is_refused():
    """Y^T dL/dW (and dL/dW X^T for Y) have the wrong shape: fails, with the exact witness at
    (n, k, m) = (1, 2, 3) where the printed product is not defined."""
    for claim_id, formal in (
        ("backprop.dX_003", d.Y.T * d.G),
        ("backprop.dY_003", d.G * d.X.T),
    ):
        result = _wrong(claim_id, formal=formal)
        assert result.verdict == "fails" and result.witness["printed"] == "undefined", claim_id


def test_a_same_shape_wrong_gradient_is_refused():
    """A printed gradient of the right shape but the wrong value (2 G Y^T) fails, with the
    two matrices at the exact witness."""
    result = _wrong("backprop.dX_003", formal=2 * d.G * d.Y.T)
    assert result.verdict == "fails" and result.witness["printed"] != result.witness["derived"]


def test_the_gradients_against_finite_differences():
    """Independent of SymPy: for the quadratic loss L = |XY - T|^2 / 2 (so G = XY - T),
    central differences in float64 agree with G Y^T and X^T G. Central differences of a
    quadratic are exact in exact arithmetic; what remains is rounding, at most a few units
    of |L| eps / h."""
    rng = np.random.default_rng(3)
    X, Y, T = rng.standard_normal((3, 4)), rng.standard_normal((4, 5)), rng.standard_normal((3, 5))

    def loss(x, y):
        return 0.5 * np.sum((x @ y - T) ** 2)

    G = X @ Y - T
    h = 1e-3
    bound = 8 * abs(loss(X, Y)) * np.finfo(np.float64).eps / h
    for value, gradient in ((X, G @ Y.T), (Y, X.T @ G)):
        numeric = np.zeros_like(value)
        for index in np.ndindex(value.shape):
            step = np.zeros_like(value)
            step[index] = h
            plus = loss(X + step, Y) if value is X else loss(X, Y + step)
            minus = loss(X - step, Y) if value is X else loss(X, Y - step)
            numeric[index] = (plus - minus) / (2 * h)
        assert np.max(np.abs(numeric - gradient)) <= bound


def test_the_gradients_against_torch_autograd():
    torch = pytest.importorskip("torch")
    rng = np.random.default_rng(4)
    X = torch.tensor(rng.standard_normal((2, 3)), requires_grad=True)
    Y = torch.tensor(rng.standard_normal((3, 4)), requires_grad=True)
    G = torch.tensor(rng.standard_normal((2, 4)))
    (X @ Y).backward(G)
    np.testing.assert_array_equal(X.grad.numpy(), (G @ Y.T).detach().numpy())
    np.testing.assert_array_equal(Y.grad.numpy(), (X.T @ G).detach().numpy())


def test_a_wrong_tanh_derivative_and_a_wrong_centering_are_refused():
    result = _wrong("backprop.tanh_derivative_003", formal=1 + sp.tanh(d.z) ** 2)
    assert result.verdict == "fails" and result.witness["z"] == "1"
    result = _wrong("backprop.zero_centered_003", formal=sp.Tuple(sp.true, sp.true, sp.false))
    assert result.verdict == "fails" and result.witness["derived"] == "(False, True, False)"


# --- Xavier and Kaiming (003) -------------------------------------------------------------------


@pytest.mark.parametrize(
    ("claim_id", "wrong"),
    [
        ("initialization.xavier_variance_003", d.sigma_w**2 * d.V * d.D_in**2),
        ("initialization.xavier_sigma_003", 1 / d.D_in),
        ("initialization.xavier_monotone_003", sp.Integer(-1)),
        ("initialization.kaiming_mean_003", sp.sqrt(d.s / sp.pi)),
        ("initialization.kaiming_variance_003", d.s / 2 - d.s / sp.pi),
        ("initialization.kaiming_sigma_003", sp.sqrt(1 / d.D_in)),
        ("initialization.kaiming_leaky_001", 2 / ((1 + d.a) * d.n_in)),
        ("initialization.orthogonal_001", sp.Integer(2)),
        ("initialization.spectral_001", sp.sqrt(2)),
    ],
)
def test_a_wrong_printed_value_fails(claim_id, wrong):
    result = _wrong(claim_id, formal=wrong)
    assert result.verdict == "fails", claim_id
    assert result.witness["derived"] == result.value, claim_id


def test_the_cross_terms_vanish_only_for_zero_mean_weights():
    assert pi.diagonal_only()
    assert pi.cross_terms(3, 0) == 0
    assert pi.cross_terms(3) != 0


def test_the_second_moment_chain_and_its_variants():
    """As printed: misprinted (Var[z^2]). All three terms right: holds. The end wrong as well
    (sigma instead of sigma/2): fails, the intent does not rescue it."""
    E_Z2, VAR_Z, VAR_Z2 = sp.symbols("E_z2 Var_z Var_z2")
    right = sp.Tuple(E_Z2 / 2, VAR_Z / 2, d.s / 2)
    assert _wrong("initialization.kaiming_second_moment_003", formal=right).verdict == "holds"
    worse = sp.Tuple(E_Z2 / 2, VAR_Z2 / 2, d.s)
    result = _wrong("initialization.kaiming_second_moment_003", formal=worse, intended=worse)
    assert result.verdict == "fails"


def test_the_approximation_rule_decides_the_variance():
    """Var[h] ≈ (1/2) Var[z] is off by 1/(pi - 1) = 0.467 > 1/10: fails. A printed constant
    within 5% of the exact (pi - 1)/(2 pi) would be approx."""
    exact = check(claim("initialization.kaiming_variance_approx_003"))
    assert float(exact.relative_error) == pytest.approx(1 / (np.pi - 1), rel=1e-15)
    close = d.s * (sp.pi - 1) / (2 * sp.pi) * sp.Rational(21, 20)
    result = _wrong("initialization.kaiming_variance_approx_003", formal=close)
    assert result.verdict == "approx"
    assert sp.sympify(result.witness["relative_error"]) == sp.Rational(1, 20)


def test_the_gaussian_integrals_against_mpmath_quadrature():
    """Independent of SymPy's integrator: mpmath quadrature at variance s = 1.7 and slope
    a = 0.3 of E[relu(z)], E[relu(z)^2], E[leaky(z)^2] and Var[z^2]."""
    at = {d.s: sp.Rational(17, 10), d.a: sp.Rational(3, 10)}
    with mpmath.workdps(QUAD_DPS):
        s, a = mpmath.mpf(17) / 10, mpmath.mpf(3) / 10

        def p(t):
            return mpmath.exp(-(t**2) / (2 * s)) / mpmath.sqrt(2 * mpmath.pi * s)

        def expect(f):
            return mpmath.quad(lambda t: f(t) * p(t), [-mpmath.inf, 0, mpmath.inf])

        found = {
            "mean": expect(lambda t: max(t, 0)),
            "second": expect(lambda t: max(t, 0) ** 2),
            "leaky": expect(lambda t: (t if t > 0 else a * t) ** 2),
            "var_z2": expect(lambda t: t**4) - expect(lambda t: t**2) ** 2,
        }
        exact = {
            "mean": d.expectation(d.RELU),
            "second": d.expectation(d.RELU**2),
            "leaky": pi.leaky_second_moment(),
            "var_z2": d.expectation(d.z**4) - d.expectation(d.z**2) ** 2,
        }
        for key, value in exact.items():
            reference = mpmath.mpf(str(sp.N(value.subs(at), QUAD_DPS)))
            assert abs(found[key] - reference) <= QUAD_TOLERANCE * abs(reference), key


def test_the_xavier_variance_with_dependent_inputs_sampling_evidence():
    """Sampling evidence, not proof: inputs x with strongly correlated coordinates (all
    sharing one common factor), i.i.d. zero-mean weights of variance sigma^2 drawn fresh per
    sample: Var[y] = sigma^2 V D_in still. The bound: the sample variance of M draws has a
    relative standard deviation sqrt((kappa - 1)/M) (kappa: y's kurtosis, below 30 here);
    six of those."""
    rng = np.random.default_rng(11)
    draws, size, sigma = 200_000, 8, 0.5
    common = rng.standard_normal((draws, 1))
    x = (common + 0.5 * rng.standard_normal((draws, size))) * 2.0  # Var[x_i] = 4 * 1.25
    w = sigma * rng.standard_normal((draws, size))
    y = np.sum(w * x, axis=1)
    expected = sigma**2 * 5.0 * size
    assert abs(np.var(y) / expected - 1) <= 6 * np.sqrt(29 / draws)


# --- 001 --------------------------------------------------------------------------------------


def test_a_wrong_half_width_and_a_wrong_depth_scaling_fail():
    wrong = sp.Tuple(sp.sqrt(3 / (d.n_in + d.n_out)), d.XAVIER_VARIANCE)
    result = _wrong("initialization.xavier_uniform_001", formal=wrong)
    assert result.verdict == "fails" and (result.witness["printed"], result.witness["derived"]) == (
        "1",
        "1/2",
    )
    depth = sp.Tuple(d.XAVIER_HALF_WIDTH / sp.sqrt(d.L), d.XAVIER_VARIANCE / sp.sqrt(d.L))
    assert _wrong("initialization.depth_aware_001", formal=depth).verdict == "fails"


def test_the_uniform_variance_against_numpy_sampling_evidence():
    """Sampling evidence: U(-a, a) at (n_in, n_out) = (300, 500) has variance 2/800 (the
    sample variance of M uniforms has relative sd sqrt(0.8/M); six of those)."""
    half = float(d.XAVIER_HALF_WIDTH.subs({d.n_in: 300, d.n_out: 500}))
    draws = 400_000
    sample = np.random.default_rng(2).uniform(-half, half, draws)
    assert abs(np.var(sample) / (2 / 800) - 1) <= 6 * np.sqrt(0.8 / draws)


def test_the_figure3_witness_is_independent_of_the_certificate():
    """The sampled matrix is the one pinned by its digest; NumPy's 2-norm of W = Z/32
    exceeds 2 by far more than float64 SVD's error (a few eps times the norm), and the exact
    Rayleigh quotient agrees with the float one."""
    Z = pi.xavier_matrix(1024, 1024, pi.FIGURE3_SEED)
    assert hashlib.sha256(Z.tobytes()).hexdigest() == pi.figure3_witness()["sha256"]
    norm = np.linalg.norm(Z / 32, 2)
    assert norm - 2 > 1000 * np.finfo(np.float64).eps * norm
    lower = float(pi.figure3_witness()["squared_lower_bound"])
    assert 4 < lower <= norm**2 * (1 + 1e-12)


def test_figure3_with_a_larger_printed_bound_is_not_refuted():
    """A bound of 3 is not exceeded by the sample: the decider raises instead of claiming a
    counterexample it does not have."""
    with pytest.raises(UnprovenError):
        _wrong("initialization.figure3_001", formal=sp.Integer(3))


def test_the_exact_rayleigh_quotient():
    """Where float64 loses the entry 2^-60 (1 + 2^-60 rounds to 1), the quotient is exact:
    ((1 + 2^-60)^2 + 1) / 2, above 1."""
    Z = np.array([[1.0, 2.0**-60], [0.0, 1.0]])
    v = np.array([1.0, 1.0])
    assert np.sum((Z @ v) ** 2) / 2 == 1.0
    exact = (Fraction(1) + Fraction(1, 2**60)) ** 2 + 1
    assert pi.rayleigh_quotient(Z, v) == exact / 2 > 1


def test_orthogonal_initialization_numerically_and_a_wrong_scale():
    """NumPy's full SVD of a Xavier 64 x 96 matrix: U eye(64, 96) V^T has every singular
    value 1 to float64 rounding; 2 eye gives {2} exactly in the exact construction."""
    W1 = np.random.default_rng(1).standard_normal((64, 96)) * np.sqrt(2 / 160)
    U, _, Vt = np.linalg.svd(W1)
    singular = np.linalg.svd(U @ np.eye(64, 96) @ Vt, compute_uv=False)
    assert np.max(np.abs(singular - 1)) <= 100 * np.finfo(np.float64).eps
    assert pi.orthogonal_singular_values(2, 3, scale=2) == {2}


def test_kaiming_gain_matches_pytorch():
    torch = pytest.importorskip("torch")
    for slope in (0.0, 0.01, 0.2, 1.0):
        gain = torch.nn.init.calculate_gain("leaky_relu", slope)
        derived = check(claim("initialization.kaiming_leaky_001")).value
        variance = float(sp.sympify(derived).subs({"a": slope, "n_in": 100}))
        assert gain**2 / 100 == pytest.approx(variance, rel=4 * np.finfo(np.float64).eps)


@pytest.mark.parametrize(("variance", "per_layer"), [(2.0, 1.0), (1.0, 0.5)])
def test_kernels_keep_the_second_moment_under_kaiming_sampling_evidence(variance, per_layer):
    """Sampling evidence: a batch through L layers of kernels.linear and kernels.relu with
    weights N(0, variance/D). With He's 2/D the mean square of the pre-activations stays
    where the first layer puts it; with Xavier's 1/D it halves per layer. Bound: per layer,
    each output's mean square over the batch is w^T S w (S the batch's second-moment
    matrix), of relative sd sqrt(2 tr(S^2))/tr(S) <= sqrt(2), and the ReLU keeps half of it
    up to a sign flip of w (relative sd <= 1); D independent outputs give at most
    (sqrt(2) + 1)/sqrt(D) < sqrt(6/D) per layer, sqrt(6 L/D) over L layers; six of those."""
    rng = np.random.default_rng(7)
    samples, size, layers = 64, 2048, 4
    h = rng.standard_normal((samples, size))
    squares = []
    for _ in range(layers):
        W = rng.standard_normal((size, size)) * np.sqrt(variance / size)
        z = linear.forward(h, W)
        squares.append(np.mean(z**2))
        h = relu.forward(z)
    ratio = squares[-1] / squares[0]
    expected = per_layer ** (layers - 1)
    bound = 6 * np.sqrt(6 * (layers - 1) / size)
    assert abs(ratio / expected - 1) <= bound
    assert bound < 1 - 0.5 ** (layers - 1)  # the two initializations are told apart
