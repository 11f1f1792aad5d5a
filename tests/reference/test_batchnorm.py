"""The mpmath references of BatchNorm (derive/reference/batchnorm.py) are right.

Each check is independent of the code it checks:

* Adjoint identity. ``<g, J u> = <dx, u>`` where ``J u`` is the directional derivative of
  the *forward* along ``u`` by the five-point stencil of
  :func:`derive.reference.norms.directional_derivative` (120 working digits, step 1e-30,
  truncation error <= h^4 K5 / 18), and ``dx`` comes from the hand-written reverse sweep;
  likewise for ``dgamma`` and ``dbeta`` by perturbing that parameter. Both denominators,
  training and inference, ``(N, D)`` and small ``(N, C, H, W)``. Agreement is required to
  ``AGREE_DIGITS`` relative to the scale of the terms: ``K sum|g| sum|u|`` (``K`` bounds
  the partial derivatives with respect to the perturbed argument, see ``_scales``) plus
  the sums of the absolute values of the terms of both inner products.
  At a constant feature with ``std_plus_eps`` and ``eps > 0`` the forward is
  differentiable but not smooth: along a line it is ``gamma c t / (|t| sigma_c + eps)``,
  odd in ``t``, and the central stencil's error is ``(2/3) h sigma_c / eps`` relative --
  O(h), not O(h^4). There the stencil runs with ``FD_KINK_DPS`` (h = 1e-50, 200 digits),
  which leaves >= 40 digits for ``eps >= 1e-5``.
* The forward-mode Jacobian equals the finite-difference Jacobian column by column, and
  ``J^T g`` equals the VJP.
* At a constant feature with ``std_plus_eps`` the Jacobian is ``gamma/eps (I - 11^T/M)``,
  and one-sided differences from that point along random directions ``v`` approach it
  like O(h): their error is exactly ``-gamma c_v h sigma_v / (eps (h sigma_v + eps))``
  (``c_v`` the centred direction, ``sigma_v`` its biased standard deviation), whose largest
  entry divided by ``h`` tends to ``|gamma| max|c_v| sigma_v / eps^2``.
* Exact values derived by hand: the feature [1, 2, 3] (mean 2, var 2/3) with eps = 0
  normalizes to [-sqrt(3/2), 0, sqrt(3/2)] in both forms; mean(y) = beta and
  var(y) = gamma^2 var / (var + eps) (resp. gamma^2 var / (sqrt(var) + eps)^2) against the
  variance computed exactly in rational arithmetic; N = 1 gives y = beta and dx = 0
  exactly; inference is the affine map gamma (x - rm) / s + beta with a diagonal Jacobian.
* Running statistics against a straightforward ``Fraction`` implementation of PyTorch's
  recurrence (exact rational arithmetic, momentum taken as the float64 it is).
"""

from __future__ import annotations

import inspect
import math
import re
from dataclasses import dataclass, replace
from fractions import Fraction
from typing import Any

import mpmath
import numpy as np
import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from derive.reference import batchnorm as reference_batchnorm
from derive.reference.batchnorm import (
    DENOMINATORS,
    batchnorm_forward,
    batchnorm_jacobian,
    batchnorm_vjp,
    running_sequence,
    running_update,
)
from derive.reference.norms import directional_derivative
from tests.helpers.norms import (
    abs_sum,
    as_mpf,
    assert_adjoint,
    assert_agree,
    flat,
    inner,
    reference_arrays,
)

# The allowances of this file, in decimal digits (one table, no numbers inline).
#: Digits of the references under test (their default).
REFERENCE_DPS = 50
#: Target digits of the finite differences (evaluated at twice as many, step 10^-30).
FD_DPS = 60
#: The same at a constant feature with std_plus_eps, where the stencil's error is O(h).
FD_KINK_DPS = 100
#: Working digits for the comparisons themselves (and the one-sided differences).
CHECK_DPS = 2 * FD_KINK_DPS
#: Adjoint identities and Jacobians: agreement relative to the scale of the terms.
AGREE_DIGITS = 30
#: Invariants (mean and variance of y) and the running-statistics recurrence.
INVARIANT_DIGITS = 40
#: Hand-derived exact values (the references carry 50 digits; allow a few roundings).
EXACT_DIGITS = 48
#: One-sided steps at a constant feature, and the slack of the O(h) ratio there.
KINK_STEPS = (10**-8, 10**-16, 10**-24)
KINK_SLACK_DIGITS = 25
#: mpmath is slow: few examples per property.
EXAMPLES = 25

EPSILONS = (0.0, 1e-5, 1e-2, 0.5)
DTYPES = (np.float64, np.float32, np.float16)
MODES = [(denom, training) for denom in DENOMINATORS for training in (True, False)]
MODE_IDS = [f"{denom}-{'training' if training else 'inference'}" for denom, training in MODES]


# --------------------------------------------------------------------------------------
# Helpers: regrouping by feature, exact statistics, comparisons
# --------------------------------------------------------------------------------------


def _by_feature(tree: Any) -> list[list[Any]]:
    """An array or nested list shaped (N, C[, H, W]) as C rows of its M batch values, in
    C order over (N, H, W) -- the order of the Jacobian blocks."""
    array = np.array(tree, dtype=object)
    return [list(row) for row in np.moveaxis(array, 1, 0).reshape(array.shape[1], -1)]


def _exact_variance(values: list[Any]) -> Fraction:
    """The biased variance of float values, exactly."""
    exact = [Fraction(float(t)) for t in values]
    mean = sum(exact, Fraction(0)) / len(exact)
    return sum(((t - mean) ** 2 for t in exact), Fraction(0)) / len(exact)


def _mpf(value: Fraction) -> mpmath.mpf:
    return mpmath.mpf(value.numerator) / value.denominator


def _assert_agree(actual, expected, scale, what: str, digits: int = AGREE_DIGITS) -> None:
    """``|actual - expected| <= 10^-digits * scale``, with a message naming everything."""
    assert_agree(actual, expected, scale, what, digits)


def _assert_values(actual: Any, expected: Any, what: str, digits: int = EXACT_DIGITS) -> None:
    """Entry by entry, relative to ``max(|expected|, 1)``; the message names the index."""
    actual_array = np.array(actual, dtype=object)
    expected_array = np.array(expected, dtype=object)
    assert actual_array.shape == expected_array.shape, (
        f"{what}: shape {actual_array.shape}, expected {expected_array.shape}"
    )
    with mpmath.workdps(CHECK_DPS):
        for index in np.ndindex(expected_array.shape):
            e = as_mpf(expected_array[index])
            _assert_agree(actual_array[index], e, max(abs(e), 1), f"{what} {list(index)}", digits)


def _assert_exactly(actual: Any, expected: Any, what: str) -> None:
    actual_array = np.array(actual, dtype=object)
    expected_array = np.array(expected, dtype=object)
    assert actual_array.shape == expected_array.shape, (
        f"{what}: shape {actual_array.shape}, expected {expected_array.shape}"
    )
    for index in np.ndindex(expected_array.shape):
        a, e = actual_array[index], as_mpf(expected_array[index])
        assert a == e, f"{what} {list(index)}: actual {a}, expected {e} exactly"


def _denominator(var: mpmath.mpf, eps: mpmath.mpf, denom: str) -> mpmath.mpf:
    """``s`` from an exact variance, in the test's own words (call inside workdps)."""
    if denom == "sqrt_var_eps":
        return mpmath.sqrt(var + eps)
    return mpmath.sqrt(var) + eps


# --------------------------------------------------------------------------------------
# Cases
# --------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Case:
    x: np.ndarray
    gamma: np.ndarray
    beta: np.ndarray
    eps: float
    training: bool
    running_mean: np.ndarray | None
    running_var: np.ndarray | None
    denom: str
    g: np.ndarray
    #: Directions of the finite differences for x, gamma and beta.
    u_x: np.ndarray
    u_gamma: np.ndarray
    u_beta: np.ndarray

    def keywords(self) -> dict[str, Any]:
        return {
            "training": self.training,
            "running_mean": self.running_mean,
            "running_var": self.running_var,
            "denom": self.denom,
        }

    def forward(self, *, x=None, gamma=None, beta=None, dps=REFERENCE_DPS):
        x = self.x if x is None else x
        gamma = self.gamma if gamma is None else gamma
        beta = self.beta if beta is None else beta
        return batchnorm_forward(x, gamma, beta, self.eps, **self.keywords(), dps=dps)

    def vjp(self, dps=REFERENCE_DPS):
        return batchnorm_vjp(
            self.x, self.g, self.gamma, self.beta, self.eps, **self.keywords(), dps=dps
        )

    def jacobian(self, dps=REFERENCE_DPS):
        return batchnorm_jacobian(
            self.x, self.gamma, self.beta, self.eps, **self.keywords(), dps=dps
        )

    def variances(self) -> list[Fraction]:
        """Per feature: the exact batch variance (training) or the running variance."""
        if self.training:
            return [_exact_variance(row) for row in _by_feature(self.x.astype(np.float64))]
        return [Fraction(float(t)) for t in self.running_var]

    def is_defined(self) -> bool:
        """False where some s_j is 0 (0/0: NaN by design, tested on its own)."""
        eps = Fraction(self.eps)
        return all(
            (var + eps if self.denom == "sqrt_var_eps" else var) > 0 or eps > 0
            for var in self.variances()
        )

    def has_kink(self) -> bool:
        """A constant feature under std_plus_eps: y is differentiable, not smooth, there."""
        return self.training and self.denom == "std_plus_eps" and 0 in self.variances()

    def fd_dps(self) -> int:
        return FD_KINK_DPS if self.has_kink() else FD_DPS

    def scales(self) -> tuple[mpmath.mpf, mpmath.mpf, mpmath.mpf]:
        """Bounds (up to small factors) of the partial derivatives of y, and of the terms of
        the sweeps, with respect to x, gamma and beta. With r_j = 1/s_j: in training
        |dy_k/dx_l| <= |gamma| r (1 + 1/M + |xhat_k xhat_l| / M) <= 3 |gamma| r, since
        xhat_k^2 <= M var / s^2 <= M; |dy/dgamma| = |xhat| <= sqrt(M). In inference
        dy/dx = gamma r and dy/dgamma = (x - rm) r. Float64 magnitudes suffice here."""
        eps = Fraction(self.eps)
        r = []
        for var in self.variances():
            if self.denom == "sqrt_var_eps":
                r.append(1 / math.sqrt(float(var + eps)))
            else:
                r.append(1 / (math.sqrt(float(var)) + self.eps))
        gamma_r = max(abs(float(gm)) * r_j for gm, r_j in zip(self.gamma, r, strict=True))
        rows = _by_feature(self.x.astype(np.float64))
        if self.training:
            k_x, k_gamma = 3 * gamma_r, math.sqrt(len(rows[0]))
        else:
            k_x = gamma_r
            k_gamma = max(
                abs(float(t) - float(mean)) * r_j
                for row, mean, r_j in zip(rows, self.running_mean, r, strict=True)
                for t in row
            )
        return tuple(mpmath.mpf(k) for k in (k_x, k_gamma, 1.0))


@st.composite
def cases(draw, denom: str, training: bool) -> Case:
    if draw(st.booleans()):
        shape = (
            draw(st.integers(1, 2)),
            draw(st.integers(1, 2)),
            draw(st.integers(1, 2)),
            draw(st.integers(1, 3)),
        )
    else:
        shape = (draw(st.integers(1, 5)), draw(st.integers(1, 3)))
    features = (shape[1],)
    running = training is False or draw(st.booleans())  # training ignores them if given
    case = Case(
        x=draw(reference_arrays(shape, draw(st.sampled_from(DTYPES)))),
        gamma=draw(reference_arrays(features)),
        beta=draw(reference_arrays(features)),
        eps=draw(st.sampled_from(EPSILONS)),
        training=training,
        running_mean=draw(reference_arrays(features)) if running else None,
        running_var=np.abs(draw(reference_arrays(features))) if running else None,
        denom=denom,
        g=draw(reference_arrays(shape)),
        u_x=draw(reference_arrays(shape)),
        u_gamma=draw(reference_arrays(features)),
        u_beta=draw(reference_arrays(features)),
    )
    assume(case.is_defined())
    return case


def _pinned(x, gamma, beta, eps, denom, training=True, running=None, seed=0) -> Case:
    """A hard case with seeded upstream gradient and directions; the directions are scaled
    like the point they perturb, so the stencil stays inside the analytic region."""
    rng = np.random.default_rng(seed)
    x = np.asarray(x)
    gamma, beta = np.asarray(gamma, dtype=np.float64), np.asarray(beta, dtype=np.float64)

    def direction(point: np.ndarray) -> np.ndarray:
        size = float(np.abs(point.astype(np.float64)).max()) or 1.0
        return rng.standard_normal(point.shape) * size

    running_mean, running_var = (None, None) if running is None else map(np.asarray, running)
    return Case(
        x=x,
        gamma=gamma,
        beta=beta,
        eps=eps,
        training=training,
        running_mean=running_mean,
        running_var=running_var,
        denom=denom,
        g=rng.standard_normal(x.shape),
        u_x=direction(x),
        u_gamma=direction(gamma),
        u_beta=direction(beta),
    )


_ULP1 = 2.0**-52
#: Edges pinned: constant features (the std_plus_eps kink, and M = 1), vanishing variance,
#: a piecewise constant map (M = 2 with eps = 0), float16 extremes, zero running variance.
PINNED = (
    _pinned(
        [[3.25, 1.0], [3.25, -2.0], [3.25, 0.5], [3.25, 4.0]],
        [2, -1],
        [0.5, 0],
        1e-5,
        "std_plus_eps",
    ),
    _pinned(np.full((2, 1, 2, 2), -7.5), [1.5], [0.25], 1e-2, "std_plus_eps"),
    _pinned([[1.0], [1 + _ULP1], [1 - _ULP1], [1.0]], [2.0], [0.0], 0.0, "sqrt_var_eps"),
    _pinned([[1.0], [1 + _ULP1], [1 - _ULP1], [1.0]], [2.0], [0.0], 0.0, "std_plus_eps"),
    _pinned([[-1.5, 4.0], [2.25, 4.5]], [1.0, 3.0], [0.5, -0.5], 0.0, "sqrt_var_eps"),
    _pinned([[7.0, -2.0, 65504.0]], [2, 1, -1], [1, 0, 3], 1e-5, "sqrt_var_eps"),
    _pinned([[7.0, -2.0, 65504.0]], [2, 1, -1], [1, 0, 3], 1e-5, "std_plus_eps"),
    _pinned(
        np.array([65504, 65472, -65504, 6.1e-5], dtype=np.float16).reshape(1, 1, 2, 2),
        [1.0],
        [0.0],
        1e-5,
        "sqrt_var_eps",
    ),
    _pinned(
        np.array([[65504, 1.0], [65504, 2.0], [-65504, 3.0]], dtype=np.float16),
        [1.0, -3.0],
        [0.0, 1.0],
        1e-5,
        "std_plus_eps",
    ),
    _pinned(
        [[1.0, 2.0], [-3.0, 0.5]], [2, -1], [0, 1], 1e-5, "std_plus_eps", False, ([1, 0], [0, 2])
    ),
    _pinned(
        [[1.0, 2.0], [-3.0, 0.5]], [2, -1], [0, 1], 0.0, "sqrt_var_eps", False, ([1, 0], [1e-30, 2])
    ),
)
PINNED_IDS = [
    f"{c.denom}-{'training' if c.training else 'inference'}-{k}" for k, c in enumerate(PINNED)
]


# --------------------------------------------------------------------------------------
# The checks
# --------------------------------------------------------------------------------------


def _at_ambient(function):
    """``function`` evaluated at the precision directional_derivative works at."""
    return lambda point: function(point, dps=mpmath.mp.dps)


def check_adjoint_identities(case: Case) -> None:
    """``<g, d/dt f(x + t u)> = <dx, u>``, and likewise for gamma and beta."""
    dx, dgamma, dbeta = case.vjp()
    perturbations = (
        ("x", case.x, case.u_x, dx, lambda z, dps: case.forward(x=z, dps=dps)),
        ("gamma", case.gamma, case.u_gamma, dgamma, lambda z, dps: case.forward(gamma=z, dps=dps)),
        ("beta", case.beta, case.u_beta, dbeta, lambda z, dps: case.forward(beta=z, dps=dps)),
    )
    for (name, point, direction, gradient, f), bound in zip(
        perturbations, case.scales(), strict=True
    ):
        derivative = directional_derivative(_at_ambient(f), point, direction, dps=case.fd_dps())
        with mpmath.workdps(CHECK_DPS):
            assert_adjoint(
                case.g,
                derivative,
                gradient,
                direction,
                bound,
                f"batchnorm {case.denom} training={case.training}: <d{name}, u> vs "
                f"<g, J_{name} u> (eps={case.eps}, x shape {case.x.shape})",
                AGREE_DIGITS,
            )


def check_jacobian(case: Case) -> None:
    """Columns against finite differences along e_l; ``J^T g`` against the VJP.

    Features do not interact, so one direction with ``step`` at batch position ``l`` of
    every feature gives column ``l`` of every block at once. ``step`` is a power of two
    near max|x| (the stencil stays inside the analytic region; it divides exactly).
    """
    blocks = case.jacobian()
    shape = case.x.shape
    features, batch_shape = shape[1], (shape[0], *shape[2:])
    size = int(np.prod(batch_shape))
    magnitude = float(np.abs(case.x.astype(np.float64)).max())
    step = 2.0 ** math.frexp(magnitude)[1] if magnitude else 1.0
    assert len(blocks) == features, f"{len(blocks)} Jacobian blocks, expected {features}"
    assert all(len(b) == size and all(len(row) == size for row in b) for b in blocks)
    fd_columns = []  # fd_columns[l][j] = column l of block j, times step
    for position in range(size):
        n, *rest = np.unravel_index(position, batch_shape)
        direction = np.zeros(shape)
        direction[(n, slice(None), *rest)] = step
        column = directional_derivative(
            _at_ambient(lambda z, dps: case.forward(x=z, dps=dps)),
            case.x,
            direction,
            dps=case.fd_dps(),
        )
        fd_columns.append(_by_feature(column))
    dx = _by_feature(case.vjp()[0])
    g = _by_feature(case.g)
    bound = case.scales()[0]
    with mpmath.workdps(CHECK_DPS):
        for j, block in enumerate(blocks):
            fd = [[t / step for t in fd_columns[position][j]] for position in range(size)]
            scale = max([abs(t) for t in flat(block)] + [abs(t) for t in flat(fd)]) + bound
            for k in range(size):
                for position in range(size):
                    _assert_agree(
                        block[k][position],
                        fd[position][k],
                        scale,
                        f"{case.denom} training={case.training} Jacobian J[{j}][{k}][{position}] "
                        "vs finite difference",
                    )
            g_j = [as_mpf(t) for t in g[j]]
            for position in range(size):
                column = [block[k][position] for k in range(size)]
                expected, term_scale = inner(column, g_j)
                _assert_agree(
                    dx[j][position],
                    expected,
                    term_scale + bound * abs_sum(g_j),
                    f"{case.denom} training={case.training} VJP dx feature {j} position "
                    f"{position} vs (J^T g)",
                )


# --------------------------------------------------------------------------------------
# Adjoint identities and Jacobians
# --------------------------------------------------------------------------------------


@pytest.mark.parametrize(("denom", "training"), MODES, ids=MODE_IDS)
@settings(max_examples=EXAMPLES)
@given(data=st.data())
def test_vjp_satisfies_the_adjoint_identity(denom, training, data):
    check_adjoint_identities(data.draw(cases(denom, training)))


@pytest.mark.parametrize(("denom", "training"), MODES, ids=MODE_IDS)
@settings(max_examples=EXAMPLES)
@given(data=st.data())
def test_jacobian_matches_finite_differences_and_the_vjp(denom, training, data):
    check_jacobian(data.draw(cases(denom, training)))


@pytest.mark.parametrize("case", PINNED, ids=PINNED_IDS)
def test_pinned_edges(case):
    assert case.is_defined()
    check_adjoint_identities(case)
    check_jacobian(case)


@pytest.mark.parametrize("denom", DENOMINATORS)
def test_adjoint_identity_on_a_larger_image_batch(denom):
    """(N, C, H, W) = (4, 3, 5, 5): M = 100 per feature, seeded."""
    rng = np.random.default_rng(sum(map(ord, denom)))
    shape = (4, 3, 5, 5)
    case = Case(
        x=rng.standard_normal(shape) * 3 + 1,
        gamma=rng.standard_normal(3),
        beta=rng.standard_normal(3),
        eps=1e-5,
        training=True,
        running_mean=None,
        running_var=None,
        denom=denom,
        g=rng.standard_normal(shape),
        u_x=rng.standard_normal(shape),
        u_gamma=rng.standard_normal(3),
        u_beta=rng.standard_normal(3),
    )
    check_adjoint_identities(case)
    check_adjoint_identities(
        replace(
            case, training=False, running_mean=rng.standard_normal(3), running_var=rng.random(3)
        )
    )


# --------------------------------------------------------------------------------------
# std_plus_eps at a constant feature: the limit of the sigma path is 0
# --------------------------------------------------------------------------------------

CONSTANT_X = np.array([[3.25, 1.0], [3.25, -2.0], [3.25, 0.5], [3.25, 4.0], [3.25, 0.0]])
CONSTANT_GAMMA, CONSTANT_BETA, CONSTANT_EPS = np.array([2.0, -1.0]), np.array([0.5, 0.0]), 1e-3


def test_std_plus_eps_jacobian_at_a_constant_feature():
    size = CONSTANT_X.shape[0]
    blocks = batchnorm_jacobian(
        CONSTANT_X, CONSTANT_GAMMA, CONSTANT_BETA, CONSTANT_EPS, denom="std_plus_eps"
    )
    with mpmath.workdps(CHECK_DPS):
        factor = as_mpf(CONSTANT_GAMMA[0]) / as_mpf(CONSTANT_EPS)
        expected = [
            [factor * ((1 if k == col else 0) - mpmath.mpf(1) / size) for col in range(size)]
            for k in range(size)
        ]
    _assert_values(blocks[0], expected, "J_0 vs gamma/eps (I - 11^T/M)")
    g = np.random.default_rng(3).standard_normal(CONSTANT_X.shape)
    dx, dgamma, dbeta = batchnorm_vjp(
        CONSTANT_X, g, CONSTANT_GAMMA, CONSTANT_BETA, CONSTANT_EPS, denom="std_plus_eps"
    )
    with mpmath.workdps(CHECK_DPS):
        mean_g = mpmath.fsum(g[:, 0].tolist()) / size
        expected_dx = [factor * (as_mpf(t) - mean_g) for t in g[:, 0]]
    _assert_values([row[0] for row in dx], expected_dx, "dx[:, 0] vs gamma/eps (g - mean g)")
    assert dgamma[0] == 0, f"dgamma[0]: actual {dgamma[0]}, expected 0 (y = beta there)"
    _assert_values(dbeta, g.sum(axis=0).tolist(), "dbeta", digits=14)


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_std_plus_eps_one_sided_differences_at_a_constant_feature_converge_like_h(seed):
    """``(y(x0 + h v) - y(x0))/h - J v`` is exactly ``-gamma c_v h sigma_v / (eps (h sigma_v +
    eps))`` (module docstring of the reference): its largest entry divided by ``h`` lies in
    ``[C / (1 + h sigma_v / eps), C]`` with ``C = |gamma| max|c_v| sigma_v / eps^2`` --
    the error is Theta(h), and it vanishes only because J is the limit."""
    v = np.random.default_rng(seed).standard_normal(CONSTANT_X.shape)
    jacobian = batchnorm_jacobian(
        CONSTANT_X, CONSTANT_GAMMA, CONSTANT_BETA, CONSTANT_EPS, denom="std_plus_eps"
    )[0]
    size = CONSTANT_X.shape[0]
    with mpmath.workdps(CHECK_DPS):
        column = [as_mpf(t) for t in v[:, 0]]
        mean_v = mpmath.fsum(column) / size
        centred = [t - mean_v for t in column]
        sigma_v = mpmath.sqrt(mpmath.fsum(centred, squared=True) / size)
        eps = as_mpf(CONSTANT_EPS)
        constant = abs(as_mpf(CONSTANT_GAMMA[0])) * max(abs(t) for t in centred) * sigma_v / eps**2
        j_v = [mpmath.fdot(row, column) for row in jacobian]
        base = [
            row[0]
            for row in batchnorm_forward(
                CONSTANT_X,
                CONSTANT_GAMMA,
                CONSTANT_BETA,
                CONSTANT_EPS,
                denom="std_plus_eps",
                dps=CHECK_DPS,
            )
        ]
        slack = mpmath.mpf(10) ** -KINK_SLACK_DIGITS
        for h in KINK_STEPS:
            step = mpmath.mpf(h)
            point = [
                [as_mpf(x) + step * as_mpf(u) for x, u in zip(xr, ur, strict=True)]
                for xr, ur in zip(CONSTANT_X, v, strict=True)
            ]
            moved = [
                row[0]
                for row in batchnorm_forward(
                    point,
                    CONSTANT_GAMMA,
                    CONSTANT_BETA,
                    CONSTANT_EPS,
                    denom="std_plus_eps",
                    dps=CHECK_DPS,
                )
            ]
            error = max(abs((b - a) / step - jv) for a, b, jv in zip(base, moved, j_v, strict=True))
            ratio = error / (constant * step)
            low = 1 / (1 + step * sigma_v / eps)
            assert low - slack <= ratio <= 1 + slack, (
                f"h = {h}: max one-sided error / (C h) = {mpmath.nstr(ratio, 20)}, expected "
                f"in [{mpmath.nstr(low, 20)}, 1] (C = {mpmath.nstr(constant, 10)})"
            )


# --------------------------------------------------------------------------------------
# Exact values and invariants
# --------------------------------------------------------------------------------------


@pytest.mark.parametrize("denom", DENOMINATORS)
@pytest.mark.parametrize(
    "x", [np.array([[1.0], [2.0], [3.0]]), np.array([1.0, 2.0, 3.0]).reshape(1, 1, 1, 3)]
)
def test_feature_1_2_3_without_eps(denom, x):
    y = batchnorm_forward(x, np.ones(1), np.zeros(1), 0.0, denom=denom)
    with mpmath.workdps(CHECK_DPS):
        root = mpmath.sqrt(mpmath.mpf(3) / 2)
        expected = np.array([-root, 0, root], dtype=object).reshape(x.shape)
    _assert_values(y, expected, f"{denom} batchnorm([1, 2, 3])")
    assert _by_feature(y)[0][1] == 0, "the mean maps to 0 exactly"


STEP = 2.0**-13


def _near_65504(shape: tuple[int, ...], seed: int) -> np.ndarray:
    """Values ``65504 + k 2^-13``, k in [-16, 16] (exact in float64): nearly constant."""
    return 65504.0 + np.random.default_rng(seed).integers(-16, 17, size=shape) * STEP


@pytest.mark.parametrize("denom", DENOMINATORS)
@pytest.mark.parametrize("eps", [1e-5, 0.0])
def test_mean_and_variance_of_y_on_nearly_constant_features(denom, eps):
    """mean_k y_kj = beta_j and var_k y_kj = gamma_j^2 var_j / s_j^2 to 40 digits, with the
    variance of x computed exactly in rational arithmetic (M = 8 * 16 * 16 = 2048)."""
    x = _near_65504((8, 2, 16, 16), seed=7)
    gamma, beta = np.array([2.0, -0.75]), np.array([0.5, -3.0])
    y = _by_feature(batchnorm_forward(x, gamma, beta, eps, denom=denom))
    for j, (row, x_row) in enumerate(zip(y, _by_feature(x), strict=True)):
        with mpmath.workdps(CHECK_DPS):
            variance = _mpf(_exact_variance(x_row))
            gm, bt = as_mpf(gamma[j]), as_mpf(beta[j])
            expected = gm**2 * variance / _denominator(variance, as_mpf(eps), denom) ** 2
            mean = mpmath.fsum(row) / len(row)
            spread = mpmath.fsum([t - mean for t in row], squared=True) / len(row)
            _assert_agree(mean, bt, abs(bt) + abs(gm), f"mean(y[:, {j}])", INVARIANT_DIGITS)
            _assert_agree(spread, expected, expected, f"var(y[:, {j}])", INVARIANT_DIGITS)


@pytest.mark.parametrize("denom", DENOMINATORS)
@pytest.mark.parametrize("shape", [(1, 3), (1, 3, 1, 1)])
def test_one_sample_gives_beta_and_zero_input_gradient(denom, shape):
    x = np.array([7.0, -2.0, 65504.0]).reshape(shape)
    g = np.array([1.5, -4.0, 0.25]).reshape(shape)
    gamma, beta = np.array([3.0, -1.0, 0.5]), np.array([1.0, 0.0, -2.5])
    y = batchnorm_forward(x, gamma, beta, 1e-5, denom=denom)
    _assert_exactly(y, beta.reshape(shape), f"{denom}: y with N = 1")
    dx, dgamma, dbeta = batchnorm_vjp(x, g, gamma, beta, 1e-5, denom=denom)
    _assert_exactly(dx, np.zeros(shape), f"{denom}: dx with N = 1")
    _assert_exactly(dgamma, np.zeros(3), f"{denom}: dgamma with N = 1")
    _assert_exactly(dbeta, g.reshape(-1), f"{denom}: dbeta with N = 1")
    blocks = batchnorm_jacobian(x, gamma, beta, 1e-5, denom=denom)
    _assert_exactly(blocks, np.zeros((3, 1, 1)), f"{denom}: Jacobian with N = 1")


@pytest.mark.parametrize("denom", DENOMINATORS)
def test_constant_feature_without_eps_is_nan(denom):
    x = np.array([[2.0, 1.0], [2.0, 2.0], [2.0, 4.0]])
    g = np.array([[1.0, 2.0], [3.0, -1.0], [0.5, 0.25]])
    y = _by_feature(batchnorm_forward(x, np.ones(2), np.zeros(2), 0.0, denom=denom))
    dx, dgamma, dbeta = batchnorm_vjp(x, g, np.ones(2), np.zeros(2), 0.0, denom=denom)
    blocks = batchnorm_jacobian(x, np.ones(2), np.zeros(2), 0.0, denom=denom)
    dx = _by_feature(dx)
    nan_part = y[0] + dx[0] + [dgamma[0]] + flat(blocks[0])
    assert all(mpmath.isnan(t) for t in nan_part), f"feature 0 (constant, eps = 0): {nan_part}"
    finite_part = y[1] + dx[1] + [dgamma[1]] + dbeta + flat(blocks[1])
    assert not any(mpmath.isnan(t) for t in finite_part), f"feature 1: {finite_part}"
    _assert_exactly(dbeta, [4.5, 1.25], "dbeta")


# --------------------------------------------------------------------------------------
# Inference mode
# --------------------------------------------------------------------------------------


@pytest.mark.parametrize("denom", DENOMINATORS)
@pytest.mark.parametrize("eps", [1e-5, 0.0])
def test_inference_is_the_affine_map_with_a_diagonal_jacobian(denom, eps):
    rng = np.random.default_rng(11)
    shape = (3, 2, 2, 2)
    x, g = rng.standard_normal(shape), rng.standard_normal(shape)
    gamma, beta = rng.standard_normal(2), rng.standard_normal(2)
    mean, var = rng.standard_normal(2), rng.random(2) + 0.1
    stats = {"training": False, "running_mean": mean, "running_var": var, "denom": denom}
    y = _by_feature(batchnorm_forward(x, gamma, beta, eps, **stats))
    dx, dgamma, dbeta = batchnorm_vjp(x, g, gamma, beta, eps, **stats)
    blocks = batchnorm_jacobian(x, gamma, beta, eps, **stats)
    dx = _by_feature(dx)
    size = shape[0] * shape[2] * shape[3]
    for j, (x_row, g_row) in enumerate(zip(_by_feature(x), _by_feature(g), strict=True)):
        with mpmath.workdps(CHECK_DPS):
            r = 1 / _denominator(as_mpf(var[j]), as_mpf(eps), denom)
            gm, bt, mu = as_mpf(gamma[j]), as_mpf(beta[j]), as_mpf(mean[j])
            expected_y = [gm * (as_mpf(t) - mu) * r + bt for t in x_row]
            expected_dx = [gm * r * as_mpf(t) for t in g_row]
            expected_dgamma = mpmath.fsum(
                [as_mpf(s) * (as_mpf(t) - mu) * r for s, t in zip(g_row, x_row, strict=True)]
            )
            expected_dbeta = mpmath.fsum([as_mpf(t) for t in g_row])
            diagonal = [[gm * r if k == col else 0 for col in range(size)] for k in range(size)]
        _assert_values(y[j], expected_y, f"{denom}: inference y[:, {j}]")
        _assert_values(dx[j], expected_dx, f"{denom}: inference dx[:, {j}]")
        _assert_values(dgamma[j], expected_dgamma, f"{denom}: inference dgamma[{j}]")
        _assert_values(dbeta[j], expected_dbeta, f"{denom}: inference dbeta[{j}]")
        _assert_values(blocks[j], diagonal, f"{denom}: inference J[{j}]")
        off_diagonal = [blocks[j][k][col] for k in range(size) for col in range(size) if k != col]
        assert all(t == 0 for t in off_diagonal), f"J[{j}] off the diagonal: {off_diagonal}"


def test_training_ignores_the_running_statistics():
    x = np.array([[1.0, 2.0], [-3.0, 0.5], [4.0, 4.0]])
    plain = batchnorm_forward(x, np.ones(2), np.zeros(2), 1e-5)
    with_stats = batchnorm_forward(
        x, np.ones(2), np.zeros(2), 1e-5, running_mean=np.ones(2), running_var=np.ones(2)
    )
    assert plain == with_stats


def test_inputs_of_every_float_dtype_are_taken_exactly():
    x16 = np.array([[65504.0, -0.0001], [3.14159, 2.0], [1.0, 0.5]], dtype=np.float16)
    gamma32 = np.array([1.1, -2.2], dtype=np.float32)
    beta = np.array([0.1, 0.2])
    narrow = batchnorm_forward(x16, gamma32, beta, np.float32(1e-5), denom="std_plus_eps")
    widened = batchnorm_forward(
        x16.astype(np.float64),
        gamma32.astype(np.float64),
        beta,
        float(np.float32(1e-5)),
        denom="std_plus_eps",
    )
    assert narrow == widened


# --------------------------------------------------------------------------------------
# Running statistics against exact rational arithmetic
# --------------------------------------------------------------------------------------


def _fraction_sequence(batches, mean, var, momentum: float) -> list[tuple[list, list]]:
    """PyTorch's recurrence, written plainly in exact rational arithmetic."""
    m = Fraction(momentum)
    mean, var = [Fraction(float(t)) for t in mean], [Fraction(float(t)) for t in var]
    out = []
    for x in batches:
        rows = _by_feature(np.asarray(x, dtype=np.float64))
        size = len(rows[0])
        batch_means = [sum(map(Fraction, row), Fraction(0)) / size for row in rows]
        unbiased = [
            sum(((Fraction(t) - mu) ** 2 for t in row), Fraction(0)) / (size - 1)
            for row, mu in zip(rows, batch_means, strict=True)
        ]
        mean = [(1 - m) * a + m * b for a, b in zip(mean, batch_means, strict=True)]
        var = [(1 - m) * a + m * b for a, b in zip(var, unbiased, strict=True)]
        out.append((mean, var))
    return out


def _random_batches(count: int, seed: int) -> list[np.ndarray]:
    rng = np.random.default_rng(seed)
    batches = []
    for _ in range(count):
        if rng.random() < 0.5:
            shape = (int(rng.integers(2, 7)), 3)
        else:
            shape = (int(rng.integers(1, 3)), 3, int(rng.integers(1, 3)), int(rng.integers(2, 4)))
        batches.append((rng.standard_normal(shape) * 3 + 1).astype(np.float32))
    return batches


@pytest.mark.parametrize("momentum", [0.1, 0.5, 1e-3])
def test_running_sequence_matches_exact_rational_arithmetic(momentum):
    batches = _random_batches(50, seed=5)
    mean0, var0 = np.array([0.0, 1.5, -2.0]), np.array([1.0, 0.25, 4.0])
    actual = running_sequence(batches, mean0, var0, momentum)
    expected = _fraction_sequence(batches, mean0, var0, momentum)
    assert len(actual) == len(expected) == 50
    for step, ((mean, var), (e_mean, e_var)) in enumerate(zip(actual, expected, strict=True)):
        for j in range(3):
            with mpmath.workdps(CHECK_DPS):
                for what, a, e in (("mean", mean[j], e_mean[j]), ("var", var[j], e_var[j])):
                    e = _mpf(e)
                    _assert_agree(a, e, abs(e), f"step {step} {what}[{j}]", INVARIANT_DIGITS)


def test_running_update_is_one_step_of_the_sequence():
    batches = _random_batches(2, seed=6)
    mean0, var0 = np.array([0.5, 1.0, -1.0]), np.array([2.0, 1.0, 0.5])
    sequence = running_sequence(batches, mean0, var0, 0.1)
    assert running_update(batches[0], mean0, var0, 0.1) == sequence[0]
    with mpmath.workdps(REFERENCE_DPS):
        carried = [np.array(sequence[0][0], dtype=object), np.array(sequence[0][1], dtype=object)]
    assert running_update(batches[1], *carried, 0.1) == sequence[1]


def test_momentum_zero_keeps_the_statistics():
    mean0, var0 = np.array([0.1, -2.5, 3.0]), np.array([1.0, 0.3, 7.0])
    for step, (mean, var) in enumerate(running_sequence(_random_batches(5, 8), mean0, var0, 0.0)):
        _assert_exactly(mean, mean0, f"step {step} mean")
        _assert_exactly(var, var0, f"step {step} var")


def test_momentum_one_gives_the_last_batch_statistics():
    batches = _random_batches(4, seed=9)
    mean, var = running_sequence(batches, np.zeros(3), np.ones(3), 1.0)[-1]
    rows = _by_feature(batches[-1].astype(np.float64))
    for j, row in enumerate(rows):
        size = len(row)
        exact_mean = sum(map(Fraction, row), Fraction(0)) / size
        exact_var = _exact_variance(row) * size / (size - 1)
        with mpmath.workdps(CHECK_DPS):
            for what, a, e in (("mean", mean[j], exact_mean), ("var", var[j], exact_var)):
                e = _mpf(e)
                _assert_agree(a, e, abs(e), f"momentum 1: {what}[{j}]", INVARIANT_DIGITS)


@pytest.mark.parametrize("momentum", [0.0, 0.1, 1.0])
def test_running_variance_of_one_value_is_nan(momentum):
    mean, var = running_update(np.array([[2.0, -1.0]]), np.zeros(2), np.ones(2), momentum)
    assert all(mpmath.isnan(t) for t in var), f"new_var with M = 1: {var}, expected NaN"
    _assert_values(mean, [2 * momentum, -momentum], f"new_mean with M = 1, momentum {momentum}")


# --------------------------------------------------------------------------------------
# Bad input and global state
# --------------------------------------------------------------------------------------

_X, _G, _ONES, _ZEROS = np.ones((3, 2)), np.ones((3, 2)), np.ones(2), np.zeros(2)


@pytest.mark.parametrize(
    ("call", "message"),
    [
        (lambda: batchnorm_forward(_X, _ONES, _ZEROS, 1e-5, denom="sqrt"), "denom"),
        (lambda: batchnorm_vjp(_X, _G, _ONES, _ZEROS, 1e-5, denom="std"), "denom"),
        (lambda: batchnorm_jacobian(_X, _ONES, _ZEROS, 1e-5, denom=None), "denom"),
        (lambda: batchnorm_forward(_X, _ONES, _ZEROS, 1e-5, training=False), "running_mean"),
        (
            lambda: batchnorm_vjp(_X, _G, _ONES, _ZEROS, 1e-5, training=False, running_mean=_ZEROS),
            "running_var",
        ),
        (
            lambda: batchnorm_jacobian(_X, _ONES, _ZEROS, 1e-5, training=False, running_var=_ONES),
            "running_mean",
        ),
        (lambda: batchnorm_forward(np.ones((0, 2)), _ONES, _ZEROS, 1e-5), "x"),
        (lambda: batchnorm_forward(np.ones((2, 2, 0, 3)), _ONES, _ZEROS, 1e-5), "x"),
        (lambda: batchnorm_vjp(np.ones((0, 2)), np.ones((0, 2)), _ONES, _ZEROS, 1e-5), "x"),
        (lambda: running_update(np.ones((0, 2)), _ZEROS, _ONES, 0.1), "x"),
        (lambda: running_sequence([_X, np.ones((0, 2))], _ZEROS, _ONES, 0.1), r"batches\[1\]"),
        (lambda: running_sequence([_X, np.ones((3, 3))], _ZEROS, _ONES, 0.1), r"batches\[1\]"),
        (lambda: batchnorm_forward(np.ones((2, 2, 2)), _ONES, _ZEROS, 1e-5), "x"),
        (lambda: batchnorm_forward(_X, np.ones(3), _ZEROS, 1e-5), "gamma"),
        (lambda: batchnorm_vjp(_X, np.ones((2, 3)), _ONES, _ZEROS, 1e-5), "g"),
        (lambda: batchnorm_forward(_X, _ONES, _ZEROS, -1e-5), "eps"),
        (lambda: batchnorm_forward(_X, _ONES, _ZEROS, float("nan")), "eps"),
        (lambda: running_update(_X, _ZEROS, _ONES, 1.5), "momentum"),
        (lambda: running_update(_X, _ZEROS, _ONES, float("nan")), "momentum"),
        (lambda: running_update(_X, np.zeros(3), _ONES, 0.1), "running_mean"),
        (lambda: batchnorm_forward(_X, _ONES, _ZEROS, 1e-5, dps=10), "dps"),
    ],
)
def test_bad_input_is_rejected_by_name(call, message):
    with pytest.raises(ValueError, match=rf"^{message}(?!\w)"):
        call()


def test_global_precision_is_never_changed():
    before = (mpmath.mp.prec, mpmath.mp.dps)
    x, g = np.array([[1.0, 2.5], [-3.0, 0.5]]), np.array([[0.5, 1.0], [-2.0, 1.0]])
    stats = {"running_mean": _ZEROS, "running_var": _ONES}
    for dps in (20, REFERENCE_DPS, 80):
        for denom in DENOMINATORS:
            for training in (True, False):
                keywords = {"training": training, "denom": denom, "dps": dps, **stats}
                batchnorm_forward(x, _ONES, _ZEROS, 1e-5, **keywords)
                batchnorm_vjp(x, g, _ONES, _ZEROS, 1e-5, **keywords)
                batchnorm_jacobian(x, _ONES, _ZEROS, 1e-5, **keywords)
        running_update(x, _ZEROS, _ONES, 0.1, dps=dps)
        running_sequence([x, x], _ZEROS, _ONES, 0.1, dps=dps)
        with pytest.raises(ValueError):
            batchnorm_forward(x, _ONES, _ZEROS, 1e-5, denom="nope", dps=dps)
        assert (mpmath.mp.prec, mpmath.mp.dps) == before
    source = inspect.getsource(reference_batchnorm)
    assert not re.search(r"^\s*(mpmath\.)?mp\.(dps|prec)\s*=", source, re.MULTILINE)
