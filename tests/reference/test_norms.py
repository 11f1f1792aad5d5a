"""The mpmath references of the normalization modules (derive/reference/norms.py) are right.

Each check is independent of the code it checks:

* Adjoint identity. For every module, ``<g, J u> = <dx, u>`` where ``J u`` is the
  directional derivative of the *forward* along ``u`` by the five-point stencil of
  :func:`derive.reference.norms.directional_derivative` (120 working digits, step 1e-30,
  truncation error <= h^4 K5 / 18), and ``dx`` comes from the hand-written reverse sweep.
  The same holds for every parameter (``dgamma``, ``dbeta``; ``dv``, ``dgamma`` for
  WeightNorm) by perturbing that parameter. Agreement is required to ``AGREE_DIGITS``
  relative to the scale of the terms: ``K sum|g| sum|u|`` (``K`` bounds the partial
  derivatives, per module and argument, see ``_layernorm_scales`` and its siblings) plus
  the sums of the absolute values of the terms of both inner products.
* Hard cases are pinned (``PINNED``): vanishing variance, D = 1, D = 2 with eps = 0 (a
  piecewise constant map), tiny and huge rows, float16 extremes, zero and tiny ``v_i``.
* The forward-mode Jacobian equals the finite-difference Jacobian column by column, and
  ``J^T g`` equals the VJP.
* Exact values derived by hand: LayerNorm([1, 2, 3]) = [-sqrt(3/2), 0, sqrt(3/2)]
  (var = 2/3); RMSNorm([3, 4]) = [3, 4] / sqrt(25/2); CenterNorm([1, 3]) = 2 * [-1, 1];
  WeightNorm with v = [[3, 4]], gamma = [10] has W = 10 * [3, 4] / 5 = [[6, 8]].
* Invariants on nearly constant rows near 65504 (D = 8192), against the variance computed
  exactly in rational arithmetic: mean(y) = 0, mean(y^2) = var / (var + eps).
"""

from __future__ import annotations

import inspect
import math
import re
from collections.abc import Callable
from dataclasses import dataclass
from fractions import Fraction
from typing import Any

import mpmath
import numpy as np
import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from derive.reference import norms as reference_norms
from derive.reference.norms import (
    centernorm_forward,
    centernorm_jacobian,
    centernorm_vjp,
    directional_derivative,
    layernorm_forward,
    layernorm_jacobian,
    layernorm_vjp,
    rmsnorm_forward,
    rmsnorm_jacobian,
    rmsnorm_vjp,
    weightnorm_forward,
    weightnorm_jacobian,
    weightnorm_vjp,
)
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
#: Target digits of the finite differences (evaluated at twice as many).
FD_DPS = 60
#: Working digits for the comparisons themselves.
CHECK_DPS = 2 * FD_DPS
#: Adjoint identities and Jacobians: agreement relative to the scale of the terms.
AGREE_DIGITS = 30
#: Invariants of the nearly constant rows.
INVARIANT_DIGITS = 40
#: Hand-derived exact values (the references carry 50 digits; allow a few roundings).
EXACT_DIGITS = 48
#: mpmath is slow: few examples per property.
EXAMPLES = 25

EPSILONS = (0.0, 1e-5, 1e-2, 0.5)
DTYPES = (np.float64, np.float32, np.float16)


# --------------------------------------------------------------------------------------
# The modules under test, as one table with a uniform calling convention
# --------------------------------------------------------------------------------------


# Term scales. The adjoint identity <g, J u> = <dx, u> is checked relative to
# K * sum|g| * sum|u|, with K a bound (up to small factors) of the partial derivatives of y
# with respect to the perturbed argument: the natural size of the terms g_i J_ij u_j and of
# the intermediate adjoints of the reverse sweep. Where J u vanishes (a D = 2 LayerNorm with
# eps = 0 is piecewise constant), both sides are rounding noise of that size: 10^-50 K for
# the references, ~10^-90 |y| for the finite differences, far below 10^-AGREE_DIGITS K.
# Computed in float64 from the exact variance / mean square: only magnitudes matter here.


def _rows64(x: np.ndarray) -> np.ndarray:
    return np.atleast_2d(np.asarray(x, dtype=np.float64))


def _exact_mean(values) -> Fraction:
    return sum(map(Fraction, values), Fraction(0)) / len(values)


def _largest_rsqrt(second_moments: list[Fraction], eps: float) -> float:
    """``max 1/sqrt(m + eps)`` over rows, from exact second moments ``m``."""
    return 1 / np.sqrt(float(min(second_moments) + Fraction(eps)))


def _layernorm_scales(x, params, eps):
    gamma = params[0]
    rows = _rows64(x)
    variances = []
    for row in rows:
        mean = _exact_mean(row.tolist())
        variances.append(_exact_mean([(Fraction(t) - mean) ** 2 for t in row.tolist()]))
    r = _largest_rsqrt(variances, eps)
    scales = (3 * np.abs(gamma).max() * r, np.sqrt(rows.shape[1]))
    return scales + (1.0,) * (len(params) - 1)


def _rmsnorm_scales(x, params, eps):
    gamma = params[0]
    rows = _rows64(x)
    r = _largest_rsqrt([_exact_mean([Fraction(t) ** 2 for t in row.tolist()]) for row in rows], eps)
    scales = (2 * np.abs(gamma).max() * r, np.sqrt(rows.shape[1]))
    return scales + (1.0,) * (len(params) - 1)


def _centernorm_scales(x, params, eps):
    rows = _rows64(x)
    factor = rows.shape[1] / (rows.shape[1] - 1)
    gamma = params[0]
    return (2 * factor * np.abs(gamma).max(), 2 * factor * np.abs(rows).max(), 1.0)


def _weightnorm_scales(x, params, eps):
    v, gamma = np.asarray(params[0], dtype=np.float64), np.asarray(params[1], dtype=np.float64)
    r = np.array(
        [1 / np.sqrt(float(sum(Fraction(t) ** 2 for t in v_i) + Fraction(eps))) for v_i in v]
    )
    x_norm = np.abs(_rows64(x)).sum(axis=1).max()
    return (
        np.abs(gamma).max(),
        2 * (np.abs(gamma) * r).max() * x_norm,
        x_norm * (np.abs(v).max(axis=1) * r).max(),
    )


def _rmsnorm_without_beta_forward(x, gamma, eps, dps):
    return rmsnorm_forward(x, gamma, None, eps, dps=dps)


def _rmsnorm_without_beta_vjp(x, g, gamma, eps, dps):
    dx, dgamma, dbeta = rmsnorm_vjp(x, g, gamma, None, eps, dps=dps)
    assert dbeta is None, "rmsnorm_vjp with beta=None must return dbeta=None"
    return dx, dgamma


def _rmsnorm_without_beta_jacobian(x, gamma, eps, dps):
    return rmsnorm_jacobian(x, gamma, None, eps, dps=dps)


@dataclass(frozen=True)
class Norm:
    """A module: ``forward(x, *params, [eps], dps=)``, ``vjp(x, g, *params, [eps], dps=)``
    returning ``(dx, *dparams)``, ``jacobian(x, *params, [eps], dps=)``."""

    name: str
    forward: Callable[..., Any]
    vjp: Callable[..., Any]
    jacobian: Callable[..., Any]
    #: The names of the array parameters, in the order the functions take them.
    params: tuple[str, ...]
    has_eps: bool
    min_dim: int
    #: ``scales(x, params, eps)``: one bound per gradient (x first) of the partial
    #: derivatives of y -- and of the terms of the sweeps -- with respect to that argument.
    scales: Callable[..., tuple[float, ...]]
    #: True if the output width is a free O (WeightNorm), else it is D.
    projects: bool = False

    def shapes(self, dim: int, outputs: int) -> tuple[tuple[int, ...], ...]:
        if self.projects:
            return ((outputs, dim), (outputs,))
        return tuple((dim,) for _ in self.params)

    def tail(self, eps: float | None) -> tuple[float, ...]:
        return (eps,) if self.has_eps else ()


NORMS = (
    Norm(
        "layernorm",
        layernorm_forward,
        layernorm_vjp,
        layernorm_jacobian,
        ("gamma", "beta"),
        True,
        1,
        _layernorm_scales,
    ),
    Norm(
        "rmsnorm",
        rmsnorm_forward,
        rmsnorm_vjp,
        rmsnorm_jacobian,
        ("gamma", "beta"),
        True,
        1,
        _rmsnorm_scales,
    ),
    Norm(
        "rmsnorm_without_beta",
        _rmsnorm_without_beta_forward,
        _rmsnorm_without_beta_vjp,
        _rmsnorm_without_beta_jacobian,
        ("gamma",),
        True,
        1,
        _rmsnorm_scales,
    ),
    Norm(
        "centernorm",
        centernorm_forward,
        centernorm_vjp,
        centernorm_jacobian,
        ("gamma", "beta"),
        False,
        2,
        _centernorm_scales,
    ),
    Norm(
        "weightnorm",
        weightnorm_forward,
        weightnorm_vjp,
        weightnorm_jacobian,
        ("v", "gamma"),
        True,
        1,
        _weightnorm_scales,
        projects=True,
    ),
)
NORM_IDS = [norm.name for norm in NORMS]


@dataclass(frozen=True)
class Case:
    norm: Norm
    x: np.ndarray
    params: tuple[np.ndarray, ...]
    eps: float | None
    g: np.ndarray
    #: Directions of the finite differences: for x, then for each parameter.
    direction_x: np.ndarray
    directions: tuple[np.ndarray, ...]

    def forward(self, *, x=None, params=None, dps=REFERENCE_DPS):
        x = self.x if x is None else x
        params = self.params if params is None else params
        return self.norm.forward(x, *params, *self.norm.tail(self.eps), dps=dps)

    def vjp(self, dps=REFERENCE_DPS):
        return self.norm.vjp(self.x, self.g, *self.params, *self.norm.tail(self.eps), dps=dps)

    def scales(self) -> tuple[mpmath.mpf, ...]:
        return tuple(mpmath.mpf(float(k)) for k in self.norm.scales(self.x, self.params, self.eps))

    def jacobian(self, dps=REFERENCE_DPS):
        return self.norm.jacobian(self.x, *self.params, *self.norm.tail(self.eps), dps=dps)


def _is_defined(norm: Norm, x: np.ndarray, params: tuple[np.ndarray, ...], eps) -> bool:
    """False where the exact result is 0/0 (zero variance, zero row or zero v_i, eps = 0)."""
    if not norm.has_eps or eps > 0:
        return True
    rows = np.atleast_2d(x)
    if norm.name == "layernorm":
        return all(np.unique(row).size > 1 for row in rows)
    if norm.name.startswith("rmsnorm"):
        return all(np.any(row != 0) for row in rows)
    return all(np.any(v_i != 0) for v_i in params[0])


# --------------------------------------------------------------------------------------
# Strategies
# --------------------------------------------------------------------------------------


@st.composite
def cases(draw, norm: Norm, max_dim: int = 6, max_rows: int = 3, one_sample: bool = False):
    dim = draw(st.integers(norm.min_dim, max_dim))
    rows = 1 if one_sample else draw(st.integers(1, max_rows))
    outputs = draw(st.integers(1, 3)) if norm.projects else dim
    flat = one_sample or (rows == 1 and draw(st.booleans()))
    x_shape, g_shape = ((dim,), (outputs,)) if flat else ((rows, dim), (rows, outputs))
    x = draw(reference_arrays(x_shape, draw(st.sampled_from(DTYPES))))
    params = tuple(draw(reference_arrays(shape)) for shape in norm.shapes(dim, outputs))
    eps = draw(st.sampled_from(EPSILONS)) if norm.has_eps else None
    assume(_is_defined(norm, x, params, eps))
    return Case(
        norm=norm,
        x=x,
        params=params,
        eps=eps,
        g=draw(reference_arrays(g_shape)),
        direction_x=draw(reference_arrays(x_shape)),
        directions=tuple(draw(reference_arrays(shape)) for shape in norm.shapes(dim, outputs)),
    )


def _large_case(norm: Norm, dim: int = 512, outputs: int = 3) -> Case:
    """One row of D = 512, seeded: the adjoint identity at a realistic width."""
    rng = np.random.default_rng(sum(map(ord, norm.name)))
    width = outputs if norm.projects else dim
    return Case(
        norm=norm,
        x=rng.standard_normal(dim) * 3 + 1,
        params=tuple(rng.standard_normal(shape) for shape in norm.shapes(dim, outputs)),
        eps=1e-5 if norm.has_eps else None,
        g=rng.standard_normal(width),
        direction_x=rng.standard_normal(dim),
        directions=tuple(rng.standard_normal(shape) for shape in norm.shapes(dim, outputs)),
    )


NORM_BY_NAME = {norm.name: norm for norm in NORMS}


def _pinned(name: str, x, params, eps=None, seed: int = 0) -> Case:
    """A hard case with seeded upstream gradient and directions; the directions are
    scaled like the point they perturb, so the stencil stays inside the analytic region."""
    norm = NORM_BY_NAME[name]
    rng = np.random.default_rng(seed)
    x = np.asarray(x)
    params = tuple(np.asarray(p, dtype=np.float64) for p in params)

    def direction(point: np.ndarray) -> np.ndarray:
        size = float(np.abs(point.astype(np.float64)).max()) or 1.0
        return rng.standard_normal(point.shape) * size

    width = params[0].shape[0] if norm.projects else x.shape[-1]
    return Case(
        norm=norm,
        x=x,
        params=params,
        eps=eps,
        g=rng.standard_normal(width),
        direction_x=direction(x),
        directions=tuple(direction(p) for p in params),
    )


_ULP1 = 2.0**-52
#: Edges pinned: vanishing variance, a piecewise constant map (D = 2 with eps = 0),
#: D = 1, huge and tiny magnitudes, the float16 extremes, zero and tiny rows of v.
PINNED = (
    _pinned("layernorm", [1.0, 1 + _ULP1, 1 - _ULP1, 1.0], ([2.0, -1, 0.5, 3], [0.0] * 4), 0.0),
    _pinned("layernorm", [-1.5, 2.25], ([1.0, 3.0], [0.5, -0.5]), 0.0),
    _pinned("layernorm", [7.0], ([2.0], [1.0]), 1e-5),
    _pinned("layernorm", [65504.0, 65504 + 2**-13, 65504 - 2**-11], ([1.0] * 3, [0.0] * 3), 1e-5),
    _pinned(
        "layernorm",
        np.array([65504, 65472, -65504, 6.1e-5], dtype=np.float16),
        ([1.0, 2, 3, 4], [0.0] * 4),
        1e-5,
    ),
    _pinned("rmsnorm", [1e-30, -2e-30, 3e-30], ([1.0, 2, 3], [0.0] * 3), 0.0),
    _pinned("rmsnorm", [1e-4, 0.0, -3e-4], ([1.0, -2, 0.5], [1.0] * 3), 1e-5),
    _pinned("rmsnorm", [-4.0], ([0.75], [0.0]), 0.0),
    _pinned("rmsnorm_without_beta", [65504.0, -65504.0], ([1.0, 1.0],), 1e-6),
    _pinned("centernorm", [1.0, 3.0], ([1.0, 1.0], [0.0, 0.0])),
    _pinned("centernorm", [65504.0, 65504 + 2**-13, 65504.0], ([1.0, -2, 3], [1.0] * 3)),
    _pinned("weightnorm", [1.0, -2.0], ([[1e-20, 0.0], [3.0, 4.0]], [2.0, -1.0]), 0.0),
    _pinned("weightnorm", [0.5, 0.25, 4.0], ([[0.0, 0.0, 0.0], [1.0, 2.0, 3.0]], [1.0, 1.0]), 1e-5),
)


# --------------------------------------------------------------------------------------
# Helpers
# --------------------------------------------------------------------------------------


def _assert_agree(actual, expected, scale, what: str, digits: int = AGREE_DIGITS) -> None:
    """``|actual - expected| <= 10^-digits * scale``, with a message naming everything."""
    assert_agree(actual, expected, scale, what, digits)


def _at_ambient(function: Callable[..., Any]) -> Callable[[Any], Any]:
    """``function`` evaluated at the precision directional_derivative works at."""
    return lambda point: function(point, dps=mpmath.mp.dps)


def check_adjoint_identities(case: Case) -> None:
    """``<g, d/dt f(x + t u)> = <dx, u>``, and likewise for each parameter."""
    gradients = case.vjp()
    assert len(gradients) == 1 + len(case.params)
    perturbations = [("x", case.x, case.direction_x, gradients[0], None)]
    for k, name in enumerate(case.norm.params):
        perturbations.append((name, case.params[k], case.directions[k], gradients[k + 1], k))
    for (name, point, direction, gradient, index), bound in zip(
        perturbations, case.scales(), strict=True
    ):
        if index is None:

            def f(z, dps):
                return case.forward(x=z, dps=dps)
        else:

            def f(z, dps, k=index):
                return case.forward(params=(*case.params[:k], z, *case.params[k + 1 :]), dps=dps)

        derivative = directional_derivative(_at_ambient(f), point, direction, dps=FD_DPS)
        with mpmath.workdps(CHECK_DPS):
            assert_adjoint(
                case.g,
                derivative,
                gradient,
                direction,
                bound,
                f"{case.norm.name}: <d{name}, u> vs <g, J_{name} u> (eps={case.eps}, "
                f"x shape {case.x.shape})",
                AGREE_DIGITS,
            )


def check_jacobian(case: Case) -> None:
    """Columns against finite differences along e_j; ``J^T g`` against the VJP."""
    jacobian = case.jacobian()
    x = case.x
    dim = x.shape[-1]
    # Directions s e_j with s a power of two near max|x|, so the stencil stays well inside
    # the region where the forward is analytic even for tiny inputs; s divides exactly.
    size = float(np.abs(x.astype(np.float64)).max())
    step = 2.0 ** math.frexp(size)[1] if size else 1.0
    fd_columns = []
    for j in range(dim):
        unit = np.zeros(dim)
        unit[j] = step
        column = directional_derivative(
            _at_ambient(lambda z, dps: case.forward(x=z, dps=dps)), x, unit, dps=FD_DPS
        )
        fd_columns.append(column[0])
    outputs = len(fd_columns[0])
    assert len(jacobian) == outputs and all(len(row) == dim for row in jacobian)
    with mpmath.workdps(CHECK_DPS):
        fd_columns = [[t / step for t in column] for column in fd_columns]
        bound = case.scales()[0]
        scale = max([abs(t) for t in flat(jacobian)] + [abs(t) for t in flat(fd_columns)])
        scale += bound
        for i in range(outputs):
            for j in range(dim):
                _assert_agree(
                    jacobian[i][j],
                    fd_columns[j][i],
                    scale,
                    f"{case.norm.name} Jacobian J[{i}][{j}] vs finite difference",
                )
        dx = case.vjp()[0][0]
        g = [as_mpf(t) for t in flat(case.g)]
        for j in range(dim):
            column = [jacobian[i][j] for i in range(outputs)]
            expected, term_scale = inner(column, g)
            _assert_agree(
                dx[j],
                expected,
                term_scale + bound * abs_sum(g),
                f"{case.norm.name} VJP dx[{j}] vs (J^T g)[{j}]",
            )


# --------------------------------------------------------------------------------------
# Adjoint identities and Jacobians
# --------------------------------------------------------------------------------------


@pytest.mark.parametrize("norm", NORMS, ids=NORM_IDS)
@settings(max_examples=EXAMPLES)
@given(data=st.data())
def test_vjp_satisfies_the_adjoint_identity(norm, data):
    check_adjoint_identities(data.draw(cases(norm)))


@pytest.mark.parametrize("norm", NORMS, ids=NORM_IDS)
def test_vjp_satisfies_the_adjoint_identity_at_d512(norm):
    check_adjoint_identities(_large_case(norm))


@pytest.mark.parametrize("norm", NORMS, ids=NORM_IDS)
@settings(max_examples=EXAMPLES)
@given(data=st.data())
def test_jacobian_matches_finite_differences_and_the_vjp(norm, data):
    check_jacobian(data.draw(cases(norm, max_dim=5, one_sample=True)))


@pytest.mark.parametrize("case", PINNED, ids=[f"{c.norm.name}-{k}" for k, c in enumerate(PINNED)])
def test_pinned_edges(case):
    check_adjoint_identities(case)
    check_jacobian(case)


# --------------------------------------------------------------------------------------
# Exact values
# --------------------------------------------------------------------------------------


def _assert_values(actual_rows, expected_rows, what: str, digits: int = EXACT_DIGITS) -> None:
    with mpmath.workdps(CHECK_DPS):
        assert len(actual_rows) == len(expected_rows), what
        for n, (actual, expected) in enumerate(zip(actual_rows, expected_rows, strict=True)):
            assert len(actual) == len(expected), what
            for i, (a, e) in enumerate(zip(actual, expected, strict=True)):
                _assert_agree(a, e, max(abs(e), 1), f"{what} [{n}][{i}]", digits)


def test_layernorm_of_1_2_3():
    y = layernorm_forward(np.array([1.0, 2.0, 3.0]), np.ones(3), np.zeros(3), 0.0)
    with mpmath.workdps(CHECK_DPS):
        root = mpmath.sqrt(mpmath.mpf(3) / 2)
        expected = [[-root, 0, root]]
    _assert_values(y, expected, "layernorm([1, 2, 3])")
    assert y[0][1] == 0


@pytest.mark.parametrize("value", [0.0, -3.25, 65504.0, 1e-30])
@pytest.mark.parametrize("dtype", DTYPES)
def test_layernorm_of_a_constant_row_is_beta_exactly(value, dtype):
    x = np.full((2, 4), value, dtype=dtype)
    beta = np.array([0.5, -1.0, 3.0, 1e-3])
    y = layernorm_forward(x, np.array([2.0, -1.0, 0.5, 7.0]), beta, 1e-5)
    for n, row in enumerate(y):
        for i, value_i in enumerate(row):
            assert value_i == mpmath.mpf(beta[i]), f"y[{n}][{i}] = {value_i}, not beta[{i}]"


@pytest.mark.parametrize("x", [0.0, 1.0, -65504.0, 3e-8])
def test_layernorm_with_one_feature_has_zero_input_gradient(x):
    dx, dgamma, dbeta = layernorm_vjp(
        np.array([[x], [2 * x]]), np.array([[1.5], [-4.0]]), np.array([3.0]), np.array([1.0]), 1e-5
    )
    assert dx == [[0], [0]], f"dx = {dx}, expected exactly 0"
    assert dgamma == [0] and dbeta == [mpmath.mpf(-2.5)]


def test_layernorm_of_a_constant_row_without_eps_is_nan():
    x = np.array([[2.0, 2.0, 2.0], [1.0, 2.0, 4.0]])
    g = np.array([[1.0, 2.0, 3.0], [1.0, -1.0, 0.5]])
    y = layernorm_forward(x, np.ones(3), np.zeros(3), 0.0)
    dx, dgamma, dbeta = layernorm_vjp(x, g, np.ones(3), np.zeros(3), 0.0)
    assert all(mpmath.isnan(t) for t in y[0] + dx[0] + dgamma)
    assert not any(mpmath.isnan(t) for t in y[1] + dx[1] + dbeta)
    assert dbeta == [mpmath.mpf(2), mpmath.mpf(1), mpmath.mpf(3.5)]


def test_rmsnorm_of_3_4():
    y = rmsnorm_forward(np.array([3.0, 4.0]), np.ones(2), np.zeros(2), 0.0)
    with mpmath.workdps(CHECK_DPS):
        norm = mpmath.sqrt(mpmath.mpf(25) / 2)
        expected = [[3 / norm, 4 / norm]]
    _assert_values(y, expected, "rmsnorm([3, 4])")


def test_rmsnorm_of_a_zero_row_without_eps_is_nan():
    assert all(mpmath.isnan(t) for t in rmsnorm_forward(np.zeros(3), np.ones(3), None, 0.0)[0])


def test_centernorm_of_1_3():
    y = centernorm_forward(np.array([1.0, 3.0]), np.ones(2), np.zeros(2))
    assert y == [[-2, 2]], f"centernorm([1, 3]) = {y}, expected [[-2, 2]] exactly"


def test_weightnorm_of_3_4():
    v, gamma = np.array([[3.0, 4.0]]), np.array([10.0])
    w = weightnorm_jacobian(np.array([0.25, -1.0]), v, gamma, 0.0)
    _assert_values(w, [[6, 8]], "weightnorm W for v = [[3, 4]], gamma = [10]")
    y = weightnorm_forward(np.array([[1.0, 0.0], [0.0, 1.0], [1.0, 1.0]]), v, gamma, 0.0)
    _assert_values(y, [[6], [8], [14]], "weightnorm(I) = W^T")


def test_inputs_of_every_float_dtype_are_taken_exactly():
    x16 = np.array([[65504.0, -0.0001, 3.14159]], dtype=np.float16)
    gamma32 = np.array([1.1, -2.2, 3.3], dtype=np.float32)
    beta = np.array([0.1, 0.2, 0.3])
    with_narrow = rmsnorm_forward(x16, gamma32, beta, np.float32(1e-6))
    widened = rmsnorm_forward(
        x16.astype(np.float64), gamma32.astype(np.float64), beta, float(np.float32(1e-6))
    )
    assert with_narrow == widened


# --------------------------------------------------------------------------------------
# Cancellation: nearly constant rows near the float16 maximum
# --------------------------------------------------------------------------------------

STEP = 2.0**-13
WIDTH = 8192


def _near_65504(rows: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """Rows ``65504 + k * 2^-13`` (exact in float64) and the integers k."""
    k = np.random.default_rng(seed).integers(-16, 17, size=(rows, WIDTH))
    return 65504.0 + k * STEP, k


def _exact_variance(k_row: np.ndarray) -> Fraction:
    """The biased variance of ``65504 + k 2^-13``, exactly: ``2^-26 * var(k)``."""
    mean = Fraction(int(k_row.sum()), WIDTH)
    return sum((Fraction(int(k)) - mean) ** 2 for k in k_row) / WIDTH * Fraction(STEP) ** 2


def _mpf(value: Fraction) -> mpmath.mpf:
    return mpmath.mpf(value.numerator) / value.denominator


@pytest.mark.parametrize("eps", [1e-5, 0.0])
def test_layernorm_invariants_on_nearly_constant_rows(eps):
    x, k = _near_65504(1, seed=7)
    y = layernorm_forward(x, np.ones(WIDTH), np.zeros(WIDTH), eps)[0]
    variance = _exact_variance(k[0])
    with mpmath.workdps(CHECK_DPS):
        ratio = _mpf(variance / (variance + Fraction(eps)))
        mean = mpmath.fsum(y) / WIDTH
        mean_square = mpmath.fsum(y, squared=True) / WIDTH
        _assert_agree(mean, 0, mpmath.sqrt(mean_square), "mean(y)", INVARIANT_DIGITS)
        _assert_agree(mean_square, ratio, ratio, "mean(y^2) vs var/(var+eps)", INVARIANT_DIGITS)


def test_rmsnorm_invariant_on_large_rows():
    x, _ = _near_65504(1, seed=8)
    eps = 1e-6
    y = rmsnorm_forward(x, np.ones(WIDTH), None, eps)[0]
    mean_square_x = sum(Fraction(float(t)) ** 2 for t in x[0]) / WIDTH
    with mpmath.workdps(CHECK_DPS):
        ratio = _mpf(mean_square_x / (mean_square_x + Fraction(eps)))
        mean_square = mpmath.fsum(y, squared=True) / WIDTH
        _assert_agree(mean_square, ratio, ratio, "mean(y^2) vs ms/(ms+eps)", INVARIANT_DIGITS)


def test_layernorm_vjp_on_four_wide_rows_is_centred():
    x, _ = _near_65504(4, seed=9)
    rng = np.random.default_rng(10)
    g, gamma, beta = rng.standard_normal((4, WIDTH)), rng.standard_normal(WIDTH), np.zeros(WIDTH)
    dx, dgamma, dbeta = layernorm_vjp(x, g, gamma, beta, 1e-5)
    assert len(dx) == 4 and len(dgamma) == len(dbeta) == WIDTH
    with mpmath.workdps(CHECK_DPS):
        for n, row in enumerate(dx):
            # J 1 = 0 (a shift of x does not change y), so J^T g is orthogonal to 1.
            total = mpmath.fsum(row)
            scale = mpmath.fsum(row, absolute=True)
            _assert_agree(total, 0, scale, f"sum(dx[{n}])", INVARIANT_DIGITS)


# --------------------------------------------------------------------------------------
# Bad input and global state
# --------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "call",
    [
        lambda: centernorm_forward(np.array([1.0]), np.ones(1), np.zeros(1)),
        lambda: centernorm_vjp(np.array([[1.0]]), np.array([[1.0]]), np.ones(1), np.zeros(1)),
        lambda: centernorm_jacobian(np.array([1.0]), np.ones(1), np.zeros(1)),
    ],
    ids=["forward", "vjp", "jacobian"],
)
def test_centernorm_rejects_one_feature(call):
    with pytest.raises(ValueError, match="D >= 2"):
        call()


@pytest.mark.parametrize(
    ("call", "message"),
    [
        (lambda: layernorm_forward(np.ones(3), np.ones(3), np.zeros(3), -1e-5), "eps"),
        (lambda: layernorm_forward(np.ones(3), np.ones(3), np.zeros(3), float("nan")), "eps"),
        (lambda: layernorm_forward(np.ones(3), np.ones(2), np.zeros(3), 1e-5), "gamma"),
        (lambda: layernorm_vjp(np.ones(3), np.ones(2), np.ones(3), np.zeros(3), 1e-5), "g"),
        (lambda: rmsnorm_forward(np.ones(3), np.ones(3), None, 1e-5, dps=10), "dps"),
        (lambda: weightnorm_forward(np.ones(3), np.ones((2, 4)), np.ones(2), 0.0), "v"),
        (lambda: layernorm_jacobian(np.ones((2, 3)), np.ones(3), np.zeros(3), 1e-5), "x"),
        (lambda: layernorm_forward(np.ones((1, 0)), np.ones(0), np.zeros(0), 1e-5), "x"),
    ],
)
def test_bad_input_is_rejected_by_name(call, message):
    with pytest.raises(ValueError, match=rf"^{message}\b"):
        call()


def test_complex_input_is_a_type_error():
    with pytest.raises(TypeError, match=r"^x\b"):
        layernorm_forward(np.ones(3, dtype=complex), np.ones(3), np.zeros(3), 1e-5)


def test_global_precision_is_never_changed():
    before = (mpmath.mp.prec, mpmath.mp.dps)
    x, g = np.array([[1.0, 2.5, -3.0]]), np.array([[0.5, 1.0, -2.0]])
    gamma, beta, v = np.array([1.0, 2.0, 3.0]), np.array([0.0, 1.0, 0.5]), np.ones((2, 3))
    for dps in (20, REFERENCE_DPS, 80):
        layernorm_forward(x, gamma, beta, 1e-5, dps=dps)
        layernorm_vjp(x, g, gamma, beta, 1e-5, dps=dps)
        layernorm_jacobian(x[0], gamma, beta, 1e-5, dps=dps)
        rmsnorm_forward(x, gamma, None, 1e-5, dps=dps)
        rmsnorm_vjp(x, g, gamma, beta, 1e-5, dps=dps)
        rmsnorm_jacobian(x[0], gamma, beta, 1e-5, dps=dps)
        centernorm_forward(x, gamma, beta, dps=dps)
        centernorm_vjp(x, g, gamma, beta, dps=dps)
        centernorm_jacobian(x[0], gamma, beta, dps=dps)
        weightnorm_forward(x, v, np.ones(2), 0.0, dps=dps)
        weightnorm_vjp(x, g[:, :2], v, np.ones(2), 0.0, dps=dps)
        weightnorm_jacobian(x[0], v, np.ones(2), 0.0, dps=dps)
        directional_derivative(lambda z: [t * t for t in z], [1.0, 2.0], [1.0, 0.0], dps=dps)
        with pytest.raises(ValueError):
            centernorm_forward(np.ones(1), np.ones(1), np.zeros(1), dps=dps)
        assert (mpmath.mp.prec, mpmath.mp.dps) == before
    source = inspect.getsource(reference_norms)
    assert not re.search(r"^\s*(mpmath\.)?mp\.(dps|prec)\s*=", source, re.MULTILINE)


def test_directional_derivative_of_a_polynomial_and_of_exp():
    # d/dt (x + t v)^5 at t = 0 is 5 x^4 v: the stencil is exact up to degree 4 and its
    # degree-5 error h^4 K5 / 18 (K5 = 120 v^5) is 10^-120 here; exp checks a transcendental.
    derivative = directional_derivative(lambda z: [z[0] ** 5, mpmath.exp(z[1])], [1.5, 0.5], [2, 3])
    with mpmath.workdps(CHECK_DPS):
        expected = [5 * mpmath.mpf(1.5) ** 4 * 2, 3 * mpmath.exp(mpmath.mpf(0.5))]
    _assert_values([derivative], [expected], "directional_derivative", digits=50)
