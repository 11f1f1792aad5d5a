"""BatchNorm (``kernels.batchnorm``) against the mpmath references, in float64, float32, float16.

Reference: ``derive/reference/batchnorm.py`` (mpmath at 50 digits, inputs taken exactly;
forward, a hand-written reverse sweep for the VJP, forward mode for the Jacobian, and the
running statistics). float16 is tested in "mixed" mode against the references and in
``strict_fp16`` mode at its pinned overflow thresholds.

Accuracy (``tests/helpers/tolerances.py``, the normalization table): a result ``y`` passes when

    |y - exact| <= NORM_ULPS[dtype] * ulp(exact) + (NORM_ROUNDINGS + n) * 2^-53 * S.

Training mode is LayerNorm applied to each feature's column (its ``M`` batch values, ``M = N``
or ``N*H*W``) with a scalar gamma, so the scales ``S`` are LayerNorm's
(``tests/kernels/test_norms.py``)
with the roles of the axes swapped. They are computed here (at ``SCALE_DPS`` digits; a bound,
not a result) from the exact quantities of one feature: ``d_k = x_k - mean`` (training) or
``x_k - running_mean`` (inference), the scale ``r`` (``1/sqrt(var + eps)`` or ``1/(sigma +
eps)``), ``z = d r``, ``a = gamma g`` and the sigma-path weight ``w`` of the closed form
``dx_k = r (a_k - mean(a) - d_k w mean(a d))`` (kernel docstring): ``w = r^2``
(sqrt_var_eps), ``r / sigma`` (std_plus_eps, 0 at zero variance), 0 in inference.

========================  ===========================================================
output                    S (training)
========================  ===========================================================
``y_k``                   ``|gamma| (|z_k| + u) + |beta|``
``dx_k``                  ``r (|a_k| + mean|a| + w |d_k| mean|a d|
                          + w mean|d| (mean|a d| + |d_k| mean|a|))``
``dgamma``                ``sum_k |g_k| (|z_k| + u)``
``dbeta``                 ``sum_k |g_k|``
Jacobian ``J_kl``         ``|gamma| r (delta_kl + 1/M + w (|d_k d_l| + mean|d| (|d_k| +
                          |d_l|)) / M)``
========================  ===========================================================

The terms with ``mean|d|`` and ``u = mean|z|`` carry the error of the feature's mean: the
(corrected two-pass, or double-double) centre is off by at most about ``n 2^-53 mean|d|``,
which moves every ``d_j`` by that much: through ``y_k`` by ``|gamma| r`` times it, through
``d_k`` and through ``mean(a d)`` in the ``w`` term of ``dx_k``, through ``d_k d_l`` in
``J_kl``. With ``w = r^2`` the ``dx`` scale is exactly LayerNorm's (``w |d_k| mean|a d| =
|z_k| mean|a z|``); for std_plus_eps it is the same expression with its own ``w``.

Inference mode is elementwise and affine: ``S(y_k) = |gamma| |z_k| + |beta|``, ``S(dx_k) = r
|a_k|``, ``S(J_kl) = |gamma| r delta_kl`` (an off-diagonal entry must be exactly 0),
``S(dgamma) = sum |g_k z_k|``, ``S(dbeta) = sum |g_k|``.

``n``, the longest plain (uncompensated) float64 sum on the way (``plain_length``):

* training, float64: 0 for every output (double-double statistics, compensated VJP sums);
* training, float32 and float16 (the "wide" path, float64 arithmetic): ``M`` for ``y``,
  ``dx``, ``J`` and ``dbeta`` (plain feature sums of length ``M``: the centre, the second
  moment, ``mean(a)``, ``mean(a d)``, ``sum g``) and ``2M`` for ``dgamma``, a length-``M``
  sum of ``g_k z_k`` whose ``z_k`` each carry a length-``M`` sum's error (the analogue of
  LayerNorm's ``N + D``);
* inference, every dtype: 0 for ``y``, ``dx`` and ``J`` (one value at a time), ``M`` for
  ``dgamma`` and ``dbeta`` (plain sums in every path).

Recursive summation of ``n`` terms errs by at most ``n 2^-53`` times the sum of their
magnitudes (Higham, Accuracy and Stability, Eq. 4.4). NORM_ROUNDINGS is the table's count
of the other roundings; its comment counts BatchNorm's longest chain, the ``w`` term of
``dx`` (``r * (d * m_ad * w)``: d 1, m_ad 4, their product 1, w 7, the product 1, the
difference 1, the outer product by r 1 + 3), at 19 to first order. Measured over 300
drawn cases per denominator, mode and quantity, the float64 errors used at most 0.19 of
the bound.

Non-finite results are judged as in ``tests/kernels/test_norms.py``: where the kernel's result or
the
exact value's correct rounding is infinite, the result must lie between the roundings of
``exact -+ (NORM_ROUNDINGS + n) 2^-53 S`` (float16 gives inf exactly when the exact value
rounds to inf). An exact NaN (0/0) must be NaN.

Domain. float64 values within ``[1e-30, 1e30]`` in magnitude, or 0; float32 within 1e30;
float16 every finite half. ``eps = 0`` only where the exact result is defined (no constant
feature in training, no zero running variance in inference); the 0/0 cases have their own
test. Running variances are drawn >= 0.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import ml_dtypes
import mpmath
import numba
import numpy as np
import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from derive.reference import batchnorm as reference_batchnorm
from derive.reference.core import round_to_dtype, ulp
from kernels import batchnorm
from kernels._generated import batchnorm as generated_batchnorm
from kernels._grain import GRAIN
from tests.helpers.assertions import assert_same_bits
from tests.helpers.norms import (
    ALTERNATING_THRESHOLDS,
    CONSTANT_SUM_THRESHOLDS,
    SCALE_DPS,
    SPECIAL_VALUES,
    allowed,
    assert_same_bits_on_1_and_2_threads,
    assert_same_values,
    check,
    check_array,
    float64_error,
    mp,
    objects,
    realize,
)
from tests.helpers.tolerances import UNIT_FLOAT64

DTYPES = (np.dtype(np.float64), np.dtype(np.float32), np.dtype(np.float16))
DTYPE_IDS = [dtype.name for dtype in DTYPES]
#: Every dtype in its default mode, and float16 also in strict mode.
DTYPE_MODES = (
    *((dtype, False) for dtype in DTYPES),
    (np.dtype(np.float16), True),
    (np.dtype(ml_dtypes.bfloat16), True),
)
DTYPE_MODE_IDS = ("float64", "float32", "float16", "float16-strict", "bfloat16-strict")
HALF = np.dtype(np.float16)
DENOMS = ("sqrt_var_eps", "std_plus_eps")
MODES = (True, False)
MODE_IDS = ("training", "inference")

#: The eps values drawn (PyTorch convention: added to the variance, or to sigma).
EPSILONS = (0.0, 1e-5, 1e-3, 1.0)
#: eps used instead of a drawn 0 where 0 would make the exact result 0/0.
FALLBACK_EPS = 1e-5
#: Shapes drawn: (N, D) with N <= MAX_BATCH, D <= MAX_FEATURES, or small (N, C, H, W).
MAX_BATCH, MAX_FEATURES = 8, 4
MAX_IMAGE = (2, 3, 2, 3)
#: mpmath is slow: examples per reference property (the file must run in about 2 minutes).
EXAMPLES = 40
#: Fewer for the Jacobian-VJP property, which takes both references per example.
FEW_EXAMPLES = 30
#: Large batch: M values of a nearly constant feature BASE + k * spacing (|k| <= OFFSETS).
LARGE_BATCH = 8192
LARGE_BASE = 60000.0
LARGE_OFFSETS = 3
#: Running statistics: the number of sequential updates, and the features' batch sizes.
RUNNING_STEPS = 50

TINY = 2.0**-24  # the smallest float16 subnormal


# --------------------------------------------------------------------------------------
# Layout: features as rows
# --------------------------------------------------------------------------------------


def to_rows(array: np.ndarray) -> np.ndarray:
    """(N, C[, H, W]) -> (C, M): each feature's batch values in C order over (N, H, W)."""
    return np.moveaxis(np.asarray(array), 1, 0).reshape(array.shape[1], -1)


def from_rows(rows: np.ndarray, shape: tuple[int, ...]) -> np.ndarray:
    """(C, M) -> an array of ``shape`` (N, C[, H, W]); the inverse of ``to_rows``."""
    return np.ascontiguousarray(np.moveaxis(rows.reshape(shape[1], shape[0], *shape[2:]), 0, 1))


# --------------------------------------------------------------------------------------
# The accuracy check
# --------------------------------------------------------------------------------------


def check_all(
    what: str,
    actual: np.ndarray,
    exact: Any,
    dtype: np.dtype,
    n: int,
    scales: np.ndarray,
) -> None:
    """``check`` every entry of an array against exact values and scales of its shape
    (``check_array``: the entries a float64 screen settles are not re-checked in mpmath)."""
    check_array(what, actual, objects(exact), dtype, n, scales)


def plain_length(dtype: np.dtype, quantity: str, size: int, training: bool) -> int:
    """n for a BatchNorm output: the longest plain float64 sum on the way to it."""
    if not training:
        return size if quantity in ("dgamma", "dbeta") else 0
    if np.dtype(dtype) == np.float64:
        return 0
    return 2 * size if quantity == "dgamma" else size


# --------------------------------------------------------------------------------------
# Scales from the exact intermediate quantities of each feature
# --------------------------------------------------------------------------------------


@dataclass(frozen=True)
class FeatureStatistics:
    """One feature's exact |d|, scale r, sigma-path weight w and mean-error unit u."""

    d: list[mpmath.mpf]
    r: mpmath.mpf
    w: mpmath.mpf
    unit: mpmath.mpf
    training: bool

    @property
    def z(self) -> list[mpmath.mpf]:
        return [t * self.r for t in self.d]


def feature_statistics(
    row: np.ndarray,
    eps: float,
    denom: str,
    stats: tuple[float, float] | None,
) -> FeatureStatistics:
    """|d|, r, w and u of one feature (``stats``: the running mean and variance in inference;
    call inside ``workdps(SCALE_DPS)``)."""
    values = [mp(v) for v in row]
    size = len(values)
    if stats is None:
        mean = mpmath.fsum(values) / size
        d = [v - mean for v in values]
        var = mpmath.fsum(d, squared=True) / size
    else:
        mean, var = mp(stats[0]), mp(stats[1])
        d = [v - mean for v in values]
    eps_ = mp(eps)
    sigma = mpmath.sqrt(var)
    s = mpmath.sqrt(var + eps_) if denom == "sqrt_var_eps" else sigma + eps_
    r = mpmath.nan if s == 0 else 1 / s
    if stats is not None:
        w = mpmath.mpf(0)
    elif denom == "sqrt_var_eps":
        w = r**2
    else:
        w = r / sigma if var > 0 else mpmath.mpf(0)
    d = [abs(t) for t in d]
    unit = mpmath.fsum(d) * r / size if stats is None else mpmath.mpf(0)
    return FeatureStatistics(d, r, w, unit, stats is None)


@dataclass(frozen=True)
class Scales:
    """The scales S of every output, shaped like the outputs (object arrays of mpf)."""

    y: np.ndarray
    dx: np.ndarray
    dgamma: np.ndarray
    dbeta: np.ndarray


def running_stats(values: dict[str, Any], j: int, training: bool) -> tuple[float, float] | None:
    if training:
        return None
    return float(values["running_mean"][j]), float(values["running_var"][j])


def scales(values: dict[str, Any], denom: str, training: bool) -> Scales:
    """S for y, dx, dgamma and dbeta (module docstring) of the arguments ``values``."""
    x, g = values["x"], values["g"]
    rows, g_rows = to_rows(x), to_rows(g)
    features, size = rows.shape
    y = np.empty(rows.shape, dtype=object)
    dx = np.empty(rows.shape, dtype=object)
    dgamma = np.empty(features, dtype=object)
    dbeta = np.empty(features, dtype=object)
    with mpmath.workdps(SCALE_DPS):
        for j in range(features):
            st_ = feature_statistics(
                rows[j], values["eps"], denom, running_stats(values, j, training)
            )
            gm, bt = abs(mp(values["gamma"][j])), abs(mp(values["beta"][j]))
            gs = [abs(mp(t)) for t in g_rows[j]]
            a = [gm * t for t in gs]
            z = st_.z
            mean_a = mpmath.fsum(a) / size
            mean_ad = mpmath.fdot(a, st_.d) / size
            mean_d = mpmath.fsum(st_.d) / size
            for k in range(size):
                y[j, k] = gm * (z[k] + st_.unit) + bt
                if training:
                    dx[j, k] = st_.r * (
                        a[k]
                        + mean_a
                        + st_.w * st_.d[k] * mean_ad
                        + st_.w * mean_d * (mean_ad + st_.d[k] * mean_a)
                    )
                else:
                    dx[j, k] = st_.r * a[k]
            dgamma[j] = mpmath.fsum(gk * (zk + st_.unit) for gk, zk in zip(gs, z, strict=True))
            dbeta[j] = mpmath.fsum(gs)
    return Scales(from_rows(y, x.shape), from_rows(dx, x.shape), dgamma, dbeta)


def jacobian_scales(values: dict[str, Any], denom: str, training: bool) -> np.ndarray:
    """S of J[j, k, l]: |gamma| r (delta + 1/M + w (|d_k d_l| + mean|d| (|d_k| + |d_l|))/M)
    in training, |gamma| r delta in inference."""
    rows = to_rows(values["x"])
    features, size = rows.shape
    out = np.empty((features, size, size), dtype=object)
    with mpmath.workdps(SCALE_DPS):
        for j in range(features):
            st_ = feature_statistics(
                rows[j], values["eps"], denom, running_stats(values, j, training)
            )
            gm = abs(mp(values["gamma"][j]))
            mean_d = mpmath.fsum(st_.d) / size
            for k in range(size):
                for m in range(size):
                    delta = 1 if k == m else 0
                    if training:
                        dd = st_.d[k] * st_.d[m] + mean_d * (st_.d[k] + st_.d[m])
                        out[j, k, m] = gm * st_.r * (delta + (1 + st_.w * dd) / size)
                    else:
                        out[j, k, m] = gm * st_.r * delta
    return out


# --------------------------------------------------------------------------------------
# Drawn cases: dtype-independent recipes, realized per dtype
# --------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Feature:
    """One feature's M batch values, or (``base`` given) M integer offsets realized as
    ``base + k * ulp(base)`` in the dtype at hand (a nearly constant feature)."""

    values: tuple[float, ...]
    base: float | None = None

    def realize(self, dtype: np.dtype) -> np.ndarray:
        if self.base is None:
            return realize(self.values, dtype)
        start = float(realize(self.base, dtype))
        spacing = float(ulp(start, dtype))
        return realize([start + k * spacing for k in self.values], dtype)


@dataclass(frozen=True)
class Case:
    """A BatchNorm input: x of ``shape`` given feature by feature, g as (C, M) rows,
    gamma, beta, the running statistics (C,) and eps."""

    shape: tuple[int, ...]
    features: tuple[Feature, ...]
    g: tuple[tuple[float, ...], ...]
    gamma: tuple[float, ...]
    beta: tuple[float, ...]
    running_mean: tuple[float, ...]
    running_var: tuple[float, ...]
    eps: float

    def realize(self, dtype: np.dtype, training: bool) -> dict[str, Any]:
        """The arguments by name in ``dtype``; eps = 0 becomes FALLBACK_EPS where a feature
        would be 0/0 (constant in training, zero running variance in inference)."""
        rows = np.stack([f.realize(dtype) for f in self.features])
        running_var = np.abs(realize(self.running_var, dtype))
        eps = self.eps
        if training:
            degenerate = any(np.all(row == row[0]) for row in rows)
        else:
            degenerate = bool(np.any(running_var == 0))
        if eps == 0 and degenerate:
            eps = FALLBACK_EPS
        return {
            "x": from_rows(rows, self.shape),
            "g": from_rows(realize(self.g, dtype), self.shape),
            "gamma": realize(self.gamma, dtype),
            "beta": realize(self.beta, dtype),
            "running_mean": realize(self.running_mean, dtype),
            "running_var": running_var,
            "eps": eps,
        }


def elements() -> st.SearchStrategy[float]:
    return st.one_of(
        st.sampled_from(SPECIAL_VALUES), st.floats(allow_nan=False, allow_infinity=False)
    )


def vectors(length: int) -> st.SearchStrategy[tuple[float, ...]]:
    return st.lists(elements(), min_size=length, max_size=length).map(tuple)


@st.composite
def cases(draw: st.DrawFn) -> Case:
    if draw(st.integers(0, 3)) == 0:
        shape = tuple(draw(st.integers(1, top)) for top in MAX_IMAGE)
        size = shape[0] * shape[2] * shape[3]
    else:
        shape = (draw(st.integers(1, MAX_BATCH)), draw(st.integers(1, MAX_FEATURES)))
        size = shape[0]
    count = shape[1]
    features = []
    for _ in range(count):
        if draw(st.booleans()):
            offsets = draw(st.lists(st.integers(-4, 4), min_size=size, max_size=size))
            features.append(Feature(tuple(float(k) for k in offsets), base=draw(elements())))
        else:
            features.append(Feature(draw(vectors(size))))
    return Case(
        shape=shape,
        features=tuple(features),
        g=tuple(draw(vectors(size)) for _ in range(count)),
        gamma=draw(vectors(count)),
        beta=draw(vectors(count)),
        running_mean=draw(vectors(count)),
        running_var=draw(vectors(count)),
        eps=draw(st.sampled_from(EPSILONS)),
    )


def _pattern(values: Sequence[float], length: int, shift: int = 0) -> tuple[float, ...]:
    return tuple(values[(i + shift) % len(values)] for i in range(length))


#: gamma with a zero and negative entries; g, beta and the running mean of mixed signs.
GAMMA_PATTERN = (1.0, -2.0, 0.0, 0.5, 3.0, -0.25)
G_PATTERN = (1.0, -0.5, 2.0, 0.0, -3.0, 0.75, 1.5)
BETA_PATTERN = (0.0, 0.5, -1.0, 2.0)
MEAN_PATTERN = (0.0, 1.0, -0.5, 3.0)
VAR_PATTERN = (1.0, 0.25, 4.0, 1e-3)


def pinned(
    columns: Sequence[Sequence[float]],
    eps: float,
    gamma: Sequence[float] | None = None,
    beta: Sequence[float] | None = None,
    shape: tuple[int, ...] | None = None,
) -> Case:
    """A pinned case, one list of M batch values per feature, default patterns elsewhere."""
    count, size = len(columns), len(columns[0])
    return Case(
        shape=shape if shape is not None else (size, count),
        features=tuple(Feature(tuple(c)) for c in columns),
        g=tuple(_pattern(G_PATTERN, size, j) for j in range(count)),
        gamma=tuple(gamma) if gamma is not None else _pattern(GAMMA_PATTERN, count),
        beta=tuple(beta) if beta is not None else _pattern(BETA_PATTERN, count),
        running_mean=_pattern(MEAN_PATTERN, count),
        running_var=_pattern(VAR_PATTERN, count),
        eps=eps,
    )


PINNED_CASES = (
    # Identical rows (every feature constant): y = beta; dx = gamma (g - mean g) r.
    pinned([[3.0] * 5, [-2.5] * 5, [0.0] * 5], 1e-5),
    # N = 1: the centred batch is 0 (y = beta, dx = 0).
    pinned([[3.0], [-1.0], [65504.0], [0.0]], 1e-3),
    # Tiny variance: 1 + k 2^-20 (float16 rounds these to a constant 1, eps then 1e-5).
    pinned([[1 + k * 2.0**-20 for k in range(6)], [-3 + (k % 2) * 2.0**-20 for k in range(6)]], 0),
    # Huge values: +-1e30 (+-65504 in float16), z = +-1 with eps = 0.
    pinned([[1e30, -1e30, 1e30, -1e30], [1e30, 1e30, -1e30, 1e30], [65504.0, 65472.0] * 2], 0),
    pinned([[1e30, 1e30, -1e30]], 1e-3, gamma=[1e30], beta=[-1e30]),
    # float16 overflow of y: +-65504 + 16 = 65520 (inf), -65488 (finite).
    pinned([[-1.0, 1.0], [1.0, -1.0]], 0.0, gamma=[65504.0, 65504.0], beta=[16.0, -16.0]),
    # Variance near eps: var(1 + 2e-3 k) = 1.2e-5 and sigma(1 + 1e-5 k) = 1.7e-5 vs 1e-5.
    pinned([[1 + 2e-3 * k for k in range(6)], [1 + 1e-5 * k for k in range(6)]], 1e-5),
    # The smallest float16 subnormal (eps = 0: z = +-1 from a variance of 2^-50).
    pinned([[TINY, 0.0, 0.0, TINY], [TINY, -TINY, 0.0, 2 * TINY]], 0.0),
    # +-256 (256^2 = 65536 is inf in half).
    pinned([[256.0, -256.0, 256.0, -256.0], [256.0, 256.0, -256.0, 256.0]], 1e-5),
    # (N, C, H, W) = (2, 2, 1, 2): one spread channel, one constant channel.
    pinned([[1.0, 2.0, 3.0, 4.0], [5.0] * 4], 1e-3, shape=(2, 2, 1, 2)),
)


def _with_pinned_examples(pinned_cases: Sequence[Case]) -> Callable[[Callable], Callable]:
    def decorate(test: Callable) -> Callable:
        for case in reversed(pinned_cases):
            test = example(case=case)(test)
        return test

    return decorate


# --------------------------------------------------------------------------------------
# 1. Against the references: both denominators, both modes, every dtype and quantity
# --------------------------------------------------------------------------------------

QUANTITIES = ("forward", "vjp", "jacobian")


def options(values: dict[str, Any], denom: str, training: bool) -> dict[str, Any]:
    """The keyword arguments after x (and g) shared by the kernels and the references."""
    return {
        "training": training,
        "running_mean": None if training else values["running_mean"],
        "running_var": None if training else values["running_var"],
        "denom": denom,
    }


def check_batchnorm(
    dtype: np.dtype, quantity: str, denom: str, training: bool, values: dict[str, Any]
) -> None:
    """One quantity of BatchNorm at ``values`` against the reference, within the bound."""
    x, g, gamma, beta, eps = (values[k] for k in ("x", "g", "gamma", "beta", "eps"))
    kw = options(values, denom, training)
    size = to_rows(x).shape[1]
    what = f"batchnorm {denom} {MODE_IDS[not training]}"

    def n(name: str) -> int:
        return plain_length(dtype, name, size, training)

    if quantity == "forward":
        y = batchnorm.forward(x, gamma, beta, eps, **kw)
        exact = reference_batchnorm.batchnorm_forward(x, gamma, beta, eps, **kw)
        check_all(f"{what} y", y, exact, dtype, n("y"), scales(values, denom, training).y)
    elif quantity == "vjp":
        s = scales(values, denom, training)
        dx, dgamma, dbeta = batchnorm.vjp(x, g, gamma, beta, eps, **kw)
        exact_dx, exact_dgamma, exact_dbeta = reference_batchnorm.batchnorm_vjp(
            x, g, gamma, beta, eps, **kw
        )
        check_all(f"{what} dx", dx, exact_dx, dtype, n("dx"), s.dx)
        check_all(f"{what} dgamma", dgamma, exact_dgamma, dtype, n("dgamma"), s.dgamma)
        check_all(f"{what} dbeta", dbeta, exact_dbeta, dtype, n("dbeta"), s.dbeta)
    else:
        jac = batchnorm.jacobian(x, gamma, beta, eps, **kw)
        exact = reference_batchnorm.batchnorm_jacobian(x, gamma, beta, eps, **kw)
        jscales = jacobian_scales(values, denom, training)
        check_all(f"{what} jacobian", jac, exact, dtype, n("J"), jscales)


@pytest.mark.parametrize("quantity", QUANTITIES)
@pytest.mark.parametrize("dtype", DTYPES, ids=DTYPE_IDS)
@pytest.mark.parametrize("training", MODES, ids=MODE_IDS)
@pytest.mark.parametrize("denom", DENOMS)
@settings(max_examples=EXAMPLES)
@_with_pinned_examples(PINNED_CASES)
@given(case=cases())
def test_batchnorm_matches_reference(denom, training, dtype, quantity, case):
    check_batchnorm(dtype, quantity, denom, training, case.realize(dtype, training))


# --------------------------------------------------------------------------------------
# 2. Large batch: the accuracy of the feature sums
# --------------------------------------------------------------------------------------


def large_batch(dtype: np.dtype) -> dict[str, Any]:
    """M = 8192 values of two features: 60000 + k * spacing (k in -3..3; the spacing of the
    dtype at 60000: 2^-37, 2^-8, 32) and N(0, 1); g N(0, 1); gamma with a negative entry."""
    rng = np.random.default_rng(LARGE_BATCH)
    spacing = float(ulp(LARGE_BASE, dtype))
    offsets = rng.integers(-LARGE_OFFSETS, LARGE_OFFSETS + 1, LARGE_BATCH)
    x = np.stack([LARGE_BASE + spacing * offsets, rng.standard_normal(LARGE_BATCH)], axis=1)
    return {
        "x": x.astype(dtype),
        "g": rng.standard_normal((LARGE_BATCH, 2)).astype(dtype),
        "gamma": np.array([1.5, -0.75], dtype),
        "beta": np.array([0.25, -2.0], dtype),
        "running_mean": None,
        "running_var": None,
        "eps": 0.0,
    }


@pytest.mark.parametrize("quantity", ("forward", "vjp"))
@pytest.mark.parametrize("dtype", DTYPES, ids=DTYPE_IDS)
@pytest.mark.parametrize("denom", DENOMS)
def test_large_batch_matches_reference(denom, dtype, quantity):
    """eps = 0: the nearly constant feature is normalized at full size, so the error of its
    mean (60000 against a spread of 3 spacings) is not hidden by eps."""
    check_batchnorm(dtype, quantity, denom, True, large_batch(dtype))


# --------------------------------------------------------------------------------------
# 3. Running statistics
# --------------------------------------------------------------------------------------
#
# One step of ``running_update`` per feature, with k = 1 - momentum:
#
#     new = fl(fl(fl(1 - momentum) * old) + fl(momentum * batch))
#
# ``batch`` is the batch mean, or the unbiased variance ``var * M / (M - 1)``. Against the
# exact step (from the exact old value) the error is at most
#
#     k |e_old| (1 + 2^-52)  +  (R + n) 2^-53 (k |old| + momentum S_batch)
#
# where e_old is the carried error, S_batch the scale of the batch statistic (mean|x| for
# the mean, the variance itself for the variance: a sum of squares) and R the roundings of
# one step: for the variance d_k (2), d_k^2 (2 * 2 + 1), the double-double sum rounded and
# divided by M (2), * M and / (M - 1) (2), * momentum (1), + (1): 13; for the mean 3 (and
# the keep factor's 1 - momentum, k * old: 2 + 1). NORM_ROUNDINGS (16) covers both. n: 0 for
# float64 inputs (double-double statistics), M for float32/float16 ones (plain float64
# sums). Stored in a float dtype of unit roundoff u, the new value gains u |new|.
# Over T steps these add up; for a variance (positive terms) the bound stays below
# T (R + 1) 2^-53 relative: 50 * 17 * 2^-53 = 9.4e-14 in float64.

UNIT_ROUNDOFF = {np.dtype(np.float64): 0.0, np.dtype(np.float32): 2.0**-24, HALF: 2.0**-11}


def running_batches(dtype: np.dtype, steps: int = RUNNING_STEPS) -> list[np.ndarray]:
    """``steps`` batches of C = 3 features (N(0, 1); 100 + N(0, 0.01), nearly constant;
    -20 + N(0, 30)), alternately (6, 3) and (2, 3, 2, 2), in ``dtype``."""
    rng = np.random.default_rng(50)
    loc, spread = np.array([0.0, 100.0, -20.0]), np.array([1.0, 0.01, 30.0])
    batches = []
    for t in range(steps):
        rows = loc[:, None] + spread[:, None] * rng.standard_normal((3, 8 if t % 2 else 6))
        shape = (2, 3, 2, 2) if t % 2 else (6, 3)
        batches.append(from_rows(rows, shape).astype(dtype))
    return batches


def step_scales(batch: np.ndarray) -> tuple[list[mpmath.mpf], list[mpmath.mpf]]:
    """S_batch of the mean (mean|x|) and of the unbiased variance (itself) per feature."""
    rows = to_rows(batch)
    size = rows.shape[1]
    means, variances = [], []
    for row in rows:
        values = [mp(v) for v in row]
        mean = mpmath.fsum(values) / size
        means.append(mpmath.fsum(abs(v) for v in values) / size)
        variances.append(mpmath.fsum([v - mean for v in values], squared=True) / (size - 1))
    return means, variances


@pytest.mark.parametrize("momentum", (0.1, 0.5))
@pytest.mark.parametrize("dtype", DTYPES, ids=DTYPE_IDS)
def test_running_statistics_follow_the_reference(dtype, momentum):
    batches = running_batches(dtype)
    mean0, var0 = np.zeros(3, dtype), np.ones(3, dtype)
    exact = reference_batchnorm.running_sequence(batches, mean0, var0, momentum)
    mean, var = mean0, var0
    u = mpmath.mpf(UNIT_ROUNDOFF[np.dtype(dtype)])
    # Gradual underflow: a stored value below the normal range errs by up to half the
    # smallest subnormal, absolutely.
    floor = 0 if np.dtype(dtype) == np.float64 else ulp(0, dtype) / 2
    with mpmath.workdps(SCALE_DPS):
        keep, mom = 1 - mp(momentum), mp(momentum)
        bounds = [mpmath.mpf(0)] * 3, [mpmath.mpf(0)] * 3
        old = [mp(v) for v in mean0], [mp(v) for v in var0]
        for t, batch in enumerate(batches):
            mean, var = batchnorm.running_update(batch, mean, var, momentum)
            n = 0 if np.dtype(dtype) == np.float64 else to_rows(batch).shape[1]
            for which, (got, batch_scales) in enumerate(
                zip((mean, var), step_scales(batch), strict=True)
            ):
                name = ("running_mean", "running_var")[which]
                assert got.dtype == dtype, f"{name} at step {t}: dtype {got.dtype}"
                for j in range(3):
                    want = exact[t][which][j]
                    carried = keep * bounds[which][j] * (1 + 2 * mpmath.mpf(UNIT_FLOAT64))
                    step = float64_error(n, keep * abs(old[which][j]) + mom * batch_scales[j])
                    bound = carried + step
                    bound += u * (abs(want) + bound) + floor
                    error = abs(mp(got[j]) - want)
                    assert error <= bound, (
                        f"running_update {name} [{dtype}] at step {t}, index {j}: got "
                        f"{got[j]!r}, expected {mpmath.nstr(want, 20)}: |error| = "
                        f"{mpmath.nstr(error, 4)} > derived bound {mpmath.nstr(bound, 4)}"
                    )
                    bounds[which][j] = bound
                    old[which][j] = want
        if np.dtype(dtype) == np.float64:
            # After all the steps the float64 running variance is accurate to ~1e-13
            # relative (the mean's error is relative to mean|x|, not to the mean).
            for j in range(3):
                relative = abs(mp(var[j]) - old[1][j]) / abs(old[1][j])
                assert relative < mpmath.mpf("1e-13"), (
                    f"running_var at index {j}: got {var[j]!r}, expected "
                    f"{mpmath.nstr(old[1][j], 20)}, relative error {mpmath.nstr(relative, 4)}"
                )


@pytest.mark.parametrize("dtype", DTYPES, ids=DTYPE_IDS)
def test_running_update_momentum_zero_keeps_and_one_replaces(dtype):
    batch = running_batches(dtype, 1)[0]
    mean0, var0 = np.array([0.5, -1.0, 3.0], dtype), np.array([1.0, 0.25, 2.0], dtype)
    mean, var = batchnorm.running_update(batch, mean0, var0, 0.0)
    assert_same_bits("running_update momentum 0: mean", mean, mean0)
    assert_same_bits("running_update momentum 0: var", var, var0)
    mean, var = batchnorm.running_update(batch, mean0, var0, 1.0)
    other = batchnorm.running_update(batch, np.zeros(3, dtype), np.ones(3, dtype), 1.0)
    assert_same_bits("running_update momentum 1: mean, other old stats", mean, other[0])
    assert_same_bits("running_update momentum 1: var, other old stats", var, other[1])
    exact_mean, exact_var = reference_batchnorm.running_update(batch, mean0, var0, 1.0)
    means, variances = step_scales(batch)
    n = 0 if np.dtype(dtype) == np.float64 else to_rows(batch).shape[1]
    for j in range(3):
        check("running_update momentum 1: mean", (j,), mean[j], exact_mean[j], dtype, n, means[j])
        check("running_update momentum 1: var", (j,), var[j], exact_var[j], dtype, n, variances[j])


@pytest.mark.parametrize("momentum", (0.0, 0.1, 1.0))
@pytest.mark.parametrize("dtype", DTYPES, ids=DTYPE_IDS)
def test_running_update_of_one_sample_has_nan_variance(dtype, momentum):
    """M = 1: the unbiased variance 0/0 is NaN for every momentum (0 * NaN is NaN); the
    mean is still (1 - momentum) old + momentum x."""
    batch = np.array([[2.0, -0.5]], dtype)
    mean0, var0 = np.array([1.0, 0.0], dtype), np.array([1.0, 4.0], dtype)
    mean, var = batchnorm.running_update(batch, mean0, var0, momentum)
    assert_same_values("running_update of one sample: var", var, np.full(2, np.nan, dtype))
    exact_mean, _ = reference_batchnorm.running_update(batch, mean0, var0, momentum)
    for j in range(2):
        with mpmath.workdps(SCALE_DPS):
            keep, mom = 1 - mp(momentum), mp(momentum)
            scale = keep * abs(mp(mean0[j])) + mom * abs(mp(batch[0, j]))
        check("running_update of one sample: mean", (j,), mean[j], exact_mean[j], dtype, 0, scale)


# --------------------------------------------------------------------------------------
# 4. Inference mode: an affine map with a diagonal Jacobian
# --------------------------------------------------------------------------------------
#
# Exactly representable cases: running_var + eps = 4 (sqrt_var_eps: 3.75 + 0.25) and
# sqrt(running_var) + eps = 2 (std_plus_eps: sqrt(2.25) + 0.5) make every scale r = 1/2;
# with small dyadic x, running mean, gamma, beta and g every operation is exact in every
# dtype (strict half too), so y = gamma (x - rm) r + beta, J = diag(gamma r),
# dx = gamma r g, dgamma = sum g (x - rm) r, dbeta = sum g hold bit for bit.

EXACT_INFERENCE = {"sqrt_var_eps": (3.75, 0.25), "std_plus_eps": (2.25, 0.5)}


def exact_inference_values(dtype: np.dtype, denom: str) -> dict[str, Any]:
    var, eps = EXACT_INFERENCE[denom]
    x = np.array([[1.0, -2.0, 0.5], [3.0, 0.25, -1.0], [-0.5, 4.0, 2.0], [0.0, 1.5, -3.0]])
    g = np.array([[1.0, 0.5, -2.0], [-1.5, 2.0, 0.25], [0.5, -1.0, 3.0], [2.0, 0.0, -0.5]])
    return {
        "x": x.astype(dtype),
        "g": g.astype(dtype),
        "gamma": np.array([1.5, -2.0, 0.0], dtype),
        "beta": np.array([0.5, -1.0, 0.25], dtype),
        "running_mean": np.array([0.5, -1.0, 2.0], dtype),
        "running_var": np.full(3, var, dtype),
        "eps": eps,
    }


@pytest.mark.parametrize(("dtype", "strict"), DTYPE_MODES, ids=DTYPE_MODE_IDS)
@pytest.mark.parametrize("denom", DENOMS)
def test_inference_is_the_affine_map_with_a_diagonal_jacobian(denom, dtype, strict):
    values = exact_inference_values(dtype, denom)
    kw = {**options(values, denom, False), "strict_fp16": strict}
    x, g, gamma, beta, eps = (values[k] for k in ("x", "g", "gamma", "beta", "eps"))
    x64, g64 = x.astype(np.float64), g.astype(np.float64)
    gamma64, mean64 = gamma.astype(np.float64), values["running_mean"].astype(np.float64)
    r = 0.5
    y = batchnorm.forward(x, gamma, beta, eps, **kw)
    expected_y = (gamma64 * (x64 - mean64) * r + beta.astype(np.float64)).astype(dtype)
    assert_same_values(f"inference {denom} y", y, expected_y)
    jac = batchnorm.jacobian(x, gamma, beta, eps, **kw)
    expected_jac = np.stack([np.diag(np.full(x.shape[0], gm * r)) for gm in gamma64])
    assert_same_values(f"inference {denom} jacobian", jac, expected_jac.astype(dtype))
    dx, dgamma, dbeta = batchnorm.vjp(x, g, gamma, beta, eps, **kw)
    assert_same_values(f"inference {denom} dx", dx, (gamma64 * g64 * r).astype(dtype))
    expected_dgamma = (g64 * (x64 - mean64) * r).sum(axis=0).astype(dtype)
    assert_same_values(f"inference {denom} dgamma", dgamma, expected_dgamma)
    assert_same_values(f"inference {denom} dbeta", dbeta, g64.sum(axis=0).astype(dtype))


@pytest.mark.parametrize(("dtype", "strict"), DTYPE_MODES, ids=DTYPE_MODE_IDS)
@pytest.mark.parametrize("denom", DENOMS)
def test_inference_acts_on_each_sample_alone(denom, dtype, strict):
    """Inference uses no batch statistic: each sample's output is that of the sample alone,
    and the Jacobian block is diagonal with the diagonal vjp(g = 1) gives, bit for bit."""
    values = arguments(dtype, seed=4)
    kw = {**options(values, denom, False), "strict_fp16": strict}
    x, gamma, beta, eps = (values[k] for k in ("x", "gamma", "beta", "eps"))
    y = batchnorm.forward(x, gamma, beta, eps, **kw)
    for k in range(x.shape[0]):
        alone = batchnorm.forward(x[k : k + 1], gamma, beta, eps, **kw)
        assert_same_bits(f"inference {denom}: sample {k} alone", alone[0], y[k])
    jac = batchnorm.jacobian(x, gamma, beta, eps, **kw)
    ones = np.ones_like(x)
    dx = batchnorm.vjp(x, ones, gamma, beta, eps, **kw)[0]
    size = x.shape[0]
    for j in range(x.shape[1]):
        off = jac[j][~np.eye(size, dtype=bool)]
        assert_same_values(f"inference {denom} jacobian block {j} off-diagonal", off, 0.0)
        assert_same_bits(
            f"inference {denom} jacobian block {j} diagonal", np.diag(jac[j]), dx[:, j]
        )


# --------------------------------------------------------------------------------------
# 5. A constant feature: y = beta and the largest Jacobian, exactly
# --------------------------------------------------------------------------------------
#
# M = 4 (1/M exact) and eps with an exact scale: sqrt_var_eps eps = 0.25 (r = 1/sqrt(eps) =
# 2), std_plus_eps eps = 0.5 (r = 1/eps = 2; the sigma path contributes 0, kernel and
# reference docstrings). J = gamma r (I - 11^T/M), dx = gamma r (g - mean g), y = beta,
# dgamma = 0, dbeta = sum g, all exact for small dyadic gamma and g, in every mode.

CONSTANT_EPS = {"sqrt_var_eps": 0.25, "std_plus_eps": 0.5}


@pytest.mark.parametrize("shape", ((4, 2), (2, 2, 1, 2)), ids=("N,D", "N,C,H,W"))
@pytest.mark.parametrize(("dtype", "strict"), DTYPE_MODES, ids=DTYPE_MODE_IDS)
@pytest.mark.parametrize("denom", DENOMS)
def test_constant_feature_has_the_exact_largest_jacobian(denom, dtype, strict, shape):
    eps, r = CONSTANT_EPS[denom], 2.0
    rows = np.array([[3.0] * 4, [-0.5] * 4])
    g_rows = np.array([[1.0, -0.5, 2.0, 0.25], [0.0, 3.0, -1.0, 0.5]])
    gamma, beta = np.array([1.5, -2.0], dtype), np.array([0.25, -1.0], dtype)
    x, g = from_rows(rows, shape).astype(dtype), from_rows(g_rows, shape).astype(dtype)
    kw = {"denom": denom, "strict_fp16": strict}
    what = f"{denom} constant feature"
    expected_y = from_rows(np.repeat(beta.astype(np.float64)[:, None], 4, axis=1), shape)
    y = batchnorm.forward(x, gamma, beta, eps, **kw)
    assert_same_values(f"{what} y", y, expected_y.astype(dtype))
    centring = np.eye(4) - 1 / 4
    expected = np.stack([gm * r * centring for gm in gamma.astype(np.float64)])
    jac = batchnorm.jacobian(x, gamma, beta, eps, **kw)
    assert_same_values(f"{what} jacobian", jac, expected.astype(dtype))
    dx, dgamma, dbeta = batchnorm.vjp(x, g, gamma, beta, eps, **kw)
    a = gamma.astype(np.float64)[:, None] * g_rows
    expected_dx = r * (a - a.mean(axis=1, keepdims=True))
    assert_same_values(f"{what} dx", dx, from_rows(expected_dx, shape).astype(dtype))
    assert_same_values(f"{what} dgamma", dgamma, np.zeros(2, dtype))
    assert_same_values(f"{what} dbeta", dbeta, g_rows.sum(axis=1).astype(dtype))


@pytest.mark.parametrize(("dtype", "strict"), DTYPE_MODES, ids=DTYPE_MODE_IDS)
@pytest.mark.parametrize("denom", DENOMS)
def test_one_sample_gives_beta_and_zero_gradient(denom, dtype, strict):
    """N = 1 (kernel docstring): the centred batch is 0, so y = beta, dx = 0, J = 0."""
    x = np.array([[3.0, -1.0, 0.5]], dtype)
    g = np.array([[2.0, -1.0, 4.0]], dtype)
    gamma, beta = np.array([1.5, -2.0, 0.0], dtype), np.array([0.25, -1.0, 2.0], dtype)
    kw = {"denom": denom, "strict_fp16": strict}
    eps = CONSTANT_EPS[denom]
    assert_same_values(f"{denom} N = 1: y", batchnorm.forward(x, gamma, beta, eps, **kw), beta)
    dx, dgamma, dbeta = batchnorm.vjp(x, g, gamma, beta, eps, **kw)
    assert_same_values(f"{denom} N = 1: dx", dx, 0.0)
    assert_same_values(f"{denom} N = 1: dgamma", dgamma, 0.0)
    assert_same_values(f"{denom} N = 1: dbeta", dbeta, g[0])
    jac = batchnorm.jacobian(x, gamma, beta, eps, **kw)
    assert_same_values(f"{denom} N = 1: jacobian", jac, np.zeros((3, 1, 1), dtype))


@pytest.mark.parametrize("output", ("forward", "vjp", "jacobian"))
@pytest.mark.parametrize(("dtype", "strict"), DTYPE_MODES, ids=DTYPE_MODE_IDS)
@pytest.mark.parametrize("denom", DENOMS)
def test_zero_variance_without_eps_is_nan(denom, dtype, strict, output):
    """eps = 0 at a constant feature: r = 1/0, and every output that depends on it is the
    0/0 of the exact value, NaN (kernel docstring; reference "Zero variance"), in that
    feature only: y, dx, dgamma and the Jacobian block. dbeta stays sum g."""
    x = np.array([[2.0, 1.0], [2.0, 2.0], [2.0, 4.0], [2.0, 5.0]], dtype)
    g = np.array([[1.0, -1.0], [0.5, 2.0], [-2.0, 0.25], [1.0, 1.0]], dtype)
    gamma, beta = np.ones(2, dtype), np.zeros(2, dtype)
    kw = {"denom": denom, "strict_fp16": strict}
    what = f"{denom} {output}, 0/0 feature"
    if output == "forward":
        y = batchnorm.forward(x, gamma, beta, 0.0, **kw)
        assert_same_values(f"{what}: y", y[:, 0], np.nan)
        assert np.all(np.isfinite(y[:, 1])), f"{what}: the other feature {y[:, 1]!r}"
    elif output == "vjp":
        dx, dgamma, dbeta = batchnorm.vjp(x, g, gamma, beta, 0.0, **kw)
        assert np.all(np.isfinite(dx[:, 1])), f"{what}: dx of the other feature {dx[:, 1]!r}"
        assert_same_values(f"{what}: dbeta", dbeta[0], g[:, 0].astype(np.float64).sum())
        assert_same_values(f"{what}: dgamma", dgamma[0], np.nan)
        assert_same_values(f"{what}: dx", dx[:, 0], np.nan)
    else:
        jac = batchnorm.jacobian(x, gamma, beta, 0.0, **kw)
        assert np.all(np.isfinite(jac[1])), f"{what}: the other block {jac[1]!r}"
        assert_same_values(f"{what}: jacobian block", jac[0], np.nan)


# --------------------------------------------------------------------------------------
# 6. Jacobian and VJP agree: J^T g = dx per feature
# --------------------------------------------------------------------------------------


def check_transpose_product(
    what: str,
    jac: np.ndarray,
    exact_jac: np.ndarray,
    jac_scales: np.ndarray,
    n_jac: int,
    dx: np.ndarray,
    exact_dx: np.ndarray,
    dx_scales: np.ndarray,
    n_dx: int,
    g: np.ndarray,
    dtype: np.dtype,
) -> None:
    """|(J^T g)_l - dx_l| <= sum_k |g_k| E_J(k, l) + M 2^-53 sum_k |g_k J_kl| + E_dx(l): both
    sides are within their bounds of the exact dx_l = sum_k g_k J_kl, and the float64 product
    J^T g adds at most its plain-sum error."""
    with np.errstate(over="ignore", invalid="ignore"):  # overflowed columns are skipped
        product = jac.astype(np.float64).T @ g.astype(np.float64)
    size = jac.shape[0]
    with mpmath.workdps(SCALE_DPS):
        for m in range(size):
            if not (np.all(np.isfinite(jac[:, m])) and np.isfinite(dx[m])):
                continue  # an overflow (or 0/0): the reference tests judge it
            bound = allowed(exact_dx[m], dtype, n_dx, dx_scales[m])
            magnitude = mpmath.mpf(0)
            for k in range(size):
                gk = abs(mp(g[k]))
                bound += gk * allowed(exact_jac[k, m], dtype, n_jac, jac_scales[k, m])
                magnitude += gk * abs(mp(jac[k, m]))
            bound += size * mpmath.mpf(UNIT_FLOAT64) * magnitude
            difference = abs(mp(product[m]) - mp(dx[m]))
            assert difference <= bound, (
                f"{what} [{dtype}] at batch position {m}: (J^T g) = {product[m]!r}, dx = "
                f"{dx[m]!r}: |difference| = {mpmath.nstr(difference, 4)} > "
                f"{mpmath.nstr(bound, 4)}"
            )


@pytest.mark.parametrize("dtype", DTYPES, ids=DTYPE_IDS)
@pytest.mark.parametrize("training", MODES, ids=MODE_IDS)
@pytest.mark.parametrize("denom", DENOMS)
@settings(max_examples=FEW_EXAMPLES)
@_with_pinned_examples(PINNED_CASES)
@given(case=cases())
def test_jacobian_transpose_times_g_is_the_vjp(denom, training, dtype, case):
    values = case.realize(dtype, training)
    x, g, gamma, beta, eps = (values[k] for k in ("x", "g", "gamma", "beta", "eps"))
    kw = options(values, denom, training)
    jac = batchnorm.jacobian(x, gamma, beta, eps, **kw)
    dx = to_rows(batchnorm.vjp(x, g, gamma, beta, eps, **kw)[0])
    exact_jac = objects(reference_batchnorm.batchnorm_jacobian(x, gamma, beta, eps, **kw))
    exact_dx = to_rows(objects(reference_batchnorm.batchnorm_vjp(x, g, gamma, beta, eps, **kw)[0]))
    jscales = jacobian_scales(values, denom, training)
    dx_scales = to_rows(scales(values, denom, training).dx)
    g_rows = to_rows(g)
    size = g_rows.shape[1]
    for j in range(jac.shape[0]):
        check_transpose_product(
            f"batchnorm {denom} {MODE_IDS[not training]} feature {j}: J^T g against dx",
            jac[j],
            exact_jac[j],
            jscales[j],
            plain_length(dtype, "J", size, training),
            dx[j],
            exact_dx[j],
            dx_scales[j],
            plain_length(dtype, "dx", size, training),
            g_rows[j],
            dtype,
        )


# --------------------------------------------------------------------------------------
# 7. Strict fp16: the pinned overflow thresholds of pure half arithmetic
# --------------------------------------------------------------------------------------
#
# All values are powers of two and M = 2^m with m <= 11: every partial sum j * 2^k (j <= 2^m)
# has at most 11 significant bits, so it is exact in half until it reaches 2^16 = 65536,
# which is >= 65520 and rounds to inf. The divisions by M = 2^m are exact.
#
# * Constant feature c = 2^k: sum(x) = 2^(k+m) is inf iff k + m >= 16; then the mean is inf,
#   d = c - inf = -inf, var = inf, r = 0 (1/sqrt(inf), or 1/(inf + eps)) and y = (-inf *
#   gamma) * 0 = NaN. Otherwise the mean is c, d = 0, var = 0, r = 1/sqrt(eps) (or 1/eps)
#   and y = beta. For std_plus_eps r = 1/eps must itself be finite in half: eps = 2^-10
#   gives r = 1024 (see the eps thresholds below for where 1/eps overflows).
# * Alternating +-2^k (the partial sums alternate 2^k, 0: the mean is 0 exactly): sum(d^2) =
#   2^(2k+m) is inf iff 2k + m >= 16; then r = 0 and y = beta (wrong: the exact y is +-gamma
#   + beta). Otherwise var = 2^(2k) and eps is absorbed (1e-5 against half an ULP of 2^(2k),
#   2^(2k-11) >= 2^-5; 2^-10 against half an ULP of sigma = 2^k, 2^(k-11) >= 2^-8, k >= 3),
#   r = 2^-k, y = +-gamma + beta.
# * eps, sqrt_var_eps: half's smallest subnormal is 2^-24, and 2^-25 is the tie between 0 and
#   2^-24, which rounds to even, 0. So eps <= 2^-25 is 0 in half: a constant feature has
#   var + eps = 0, r = 1/0 = inf and y = (0 * gamma) * inf = NaN. Any eps above 2^-25 (and
#   <= 2^-24) rounds to 2^-24: r = 2^12 and y = beta.
# * eps, std_plus_eps: r = 1/eps_half overflows (>= 65520) iff eps_half <= 1/65520 =
#   256.06 * 2^-24, i.e. eps_half <= 256 * 2^-24 = 2^-16 (1/2^-16 = 65536); the next half,
#   257 * 2^-24, gives 1/eps = 65281.2, which rounds to 65280. eps = 256.5 * 2^-24 is the tie
#   that rounds to even (256: NaN); the next float64 above it rounds to 257 (beta). eps
#   <= 2^-25 (0 in half) gives 1/0 = inf as well. A constant feature is NaN on the first side
#   (0 * inf), beta on the other.
# Mixed mode computes all of these in float64: y = beta, +-gamma + beta, beta (NaN only for
# eps = 0, where the exact value is 0/0).

STRICT_GAMMA, STRICT_BETA = 1.0, 0.5
STRICT_EPS = {"sqrt_var_eps": 1e-5, "std_plus_eps": 2.0**-10}


def strict_and_mixed(
    column: np.ndarray, denom: str, eps: float | None = None
) -> tuple[np.ndarray, np.ndarray]:
    """Strict and mixed forward of one float16 feature (a column of M values)."""
    x = np.asarray(column, HALF)[:, np.newaxis]
    gamma, beta = np.full(1, STRICT_GAMMA, HALF), np.full(1, STRICT_BETA, HALF)
    eps = STRICT_EPS[denom] if eps is None else eps
    strict = batchnorm.forward(x, gamma, beta, eps, denom=denom, strict_fp16=True)
    mixed = batchnorm.forward(x, gamma, beta, eps, denom=denom)
    return strict[:, 0], mixed[:, 0]


def _beta(size: int) -> np.ndarray:
    return np.full(size, STRICT_BETA, HALF)


def _alternating(value: float, size: int) -> np.ndarray:
    return np.where(np.arange(size) % 2 == 0, value, -value).astype(HALF)


@pytest.mark.parametrize(("k", "m", "overflows"), CONSTANT_SUM_THRESHOLDS)
@pytest.mark.parametrize("denom", DENOMS)
def test_strict_constant_feature_is_nan_exactly_when_its_sum_overflows(denom, k, m, overflows):
    size = 2**m
    strict, mixed = strict_and_mixed(np.full(size, 2.0**k), denom)
    expected = np.full(size, np.nan, HALF) if overflows else _beta(size)
    assert_same_values(f"strict {denom} of {size} x 2^{k}", strict, expected)
    assert_same_values(f"mixed {denom} of {size} x 2^{k}", mixed, _beta(size))


@pytest.mark.parametrize(("k", "m", "collapses"), ALTERNATING_THRESHOLDS)
@pytest.mark.parametrize("denom", DENOMS)
def test_strict_alternating_feature_collapses_exactly_when_its_square_sum_overflows(
    denom, k, m, collapses
):
    size = 2**m
    signs = _alternating(1.0, size)
    strict, mixed = strict_and_mixed(_alternating(2.0**k, size), denom)
    correct = (STRICT_GAMMA * signs + STRICT_BETA).astype(HALF)
    expected = _beta(size) if collapses else correct
    assert_same_values(f"strict {denom} of +-2^{k}, M = {size}", strict, expected)
    assert_same_values(f"mixed {denom} of +-2^{k}, M = {size}", mixed, correct)


_STD_TIE = 256.5 * 2.0**-24
#: (denom, eps, strict_is_nan): both sides of each eps boundary (comment above).
EPS_THRESHOLDS = [
    ("sqrt_var_eps", 0.0, True),
    ("sqrt_var_eps", 1e-8, True),
    ("sqrt_var_eps", 2.0**-25, True),
    ("sqrt_var_eps", math.nextafter(2.0**-25, 1.0), False),
    ("sqrt_var_eps", 2.0**-24, False),
    ("std_plus_eps", 2.0**-25, True),
    ("std_plus_eps", 2.0**-16, True),
    ("std_plus_eps", _STD_TIE, True),
    ("std_plus_eps", math.nextafter(_STD_TIE, 1.0), False),
    ("std_plus_eps", 257 * 2.0**-24, False),
]


@pytest.mark.parametrize(("denom", "eps", "is_nan"), EPS_THRESHOLDS)
def test_strict_eps_thresholds_of_a_constant_feature(denom, eps, is_nan):
    size = 8
    strict, mixed = strict_and_mixed(np.full(size, 3.0), denom, eps)
    expected = np.full(size, np.nan, HALF) if is_nan else _beta(size)
    assert_same_values(f"strict {denom} of a constant feature, eps = {eps!r}", strict, expected)
    mixed_expected = np.full(size, np.nan, HALF) if eps == 0 else _beta(size)
    assert_same_values(f"mixed {denom} of a constant feature, eps = {eps!r}", mixed, mixed_expected)


def test_float16_overflow_gives_inf_without_a_warning():
    """y = +-65504 + 16: 65520 rounds to inf, -65488 is finite; no RuntimeWarning (the suite
    turns warnings into errors)."""
    x = np.array([[-1.0], [1.0]], HALF)
    y = batchnorm.forward(x, np.full(1, 65504.0, HALF), np.full(1, 16.0, HALF), 0.0)
    assert_same_values("batchnorm.forward", y[:, 0], np.array([-65488.0, np.inf], HALF))


# --------------------------------------------------------------------------------------
# 8. Bad input (SPEC "Bad input")
# --------------------------------------------------------------------------------------

BATCH, FEATURES = 5, 3


def arguments(dtype: np.dtype | None = None, seed: int = 0, four_d: bool = False) -> dict:
    """Valid arguments (float64 unless told) for every call below, by name."""
    dtype = np.dtype(np.float64) if dtype is None else np.dtype(dtype)
    rng = np.random.default_rng(seed)
    shape = (2, FEATURES, 2, 3) if four_d else (BATCH, FEATURES)
    return {
        "x": rng.standard_normal(shape).astype(dtype),
        "g": rng.standard_normal(shape).astype(dtype),
        "gamma": rng.standard_normal(FEATURES).astype(dtype),
        "beta": rng.standard_normal(FEATURES).astype(dtype),
        "running_mean": rng.standard_normal(FEATURES).astype(dtype),
        "running_var": rng.uniform(0.5, 2.0, FEATURES).astype(dtype),
        "eps": 1e-5,
        "momentum": 0.1,
    }


@dataclass(frozen=True)
class Call:
    """A kernel call by argument name, so that one argument at a time can be spoiled."""

    name: str
    function: Callable[..., Any]
    arguments: tuple[str, ...]
    keywords: dict[str, Any] = field(default_factory=dict)

    def __call__(self, values: dict[str, Any], **changes: Any) -> Any:
        merged = {**values, **changes}
        keywords = {k: merged.get(k, v) for k, v in self.keywords.items()}
        return self.function(*(merged[a] for a in self.arguments), **keywords)

    def but(self, **keywords: Any) -> Call:
        return Call(self.name, self.function, self.arguments, {**self.keywords, **keywords})


def mode_calls(training: bool) -> list[Call]:
    """forward, vjp and jacobian in one mode (inference passes the running statistics)."""
    mode = MODE_IDS[not training]
    keywords: dict[str, Any] = {"training": training}
    if not training:
        keywords |= {"running_mean": None, "running_var": None}
    return [
        Call(f"forward[{mode}]", batchnorm.forward, ("x", "gamma", "beta", "eps"), keywords),
        Call(f"vjp[{mode}]", batchnorm.vjp, ("x", "g", "gamma", "beta", "eps"), keywords),
        Call(f"jacobian[{mode}]", batchnorm.jacobian, ("x", "gamma", "beta", "eps"), keywords),
    ]


MODE_CALLS = mode_calls(True) + mode_calls(False)
RUNNING_CALL = Call(
    "running_update", batchnorm.running_update, ("x", "running_mean", "running_var", "momentum")
)
ALL_CALLS = [*MODE_CALLS, RUNNING_CALL]
CALL_IDS = [c.name for c in ALL_CALLS]


#: (call, dtype, strict): every call in every dtype mode (running_update has no strict mode).
CALL_MODES = [
    pytest.param(c, dtype, strict, id=f"{c.name}-{mode}")
    for c in ALL_CALLS
    for (dtype, strict), mode in zip(DTYPE_MODES, DTYPE_MODE_IDS, strict=True)
    if not (strict and c is RUNNING_CALL)
]


def array_names(c: Call) -> list[str]:
    """The array arguments a call reads (inference reads the running statistics)."""
    names = [a for a in c.arguments if a not in ("eps", "momentum")]
    return names + [k for k in ("running_mean", "running_var") if k in c.keywords]


def outputs_of(result: Any) -> list[np.ndarray]:
    return list(result) if isinstance(result, tuple) else [result]


@pytest.mark.parametrize("bad_dtype", (np.int64, np.int32, np.complex128, np.bool_))
@pytest.mark.parametrize("c", ALL_CALLS, ids=CALL_IDS)
def test_unsupported_dtype_is_a_type_error_naming_the_argument(c, bad_dtype):
    values = arguments()
    for argument in array_names(c):
        with pytest.raises(TypeError, match=rf"^{argument}\b"):
            c(values, **{argument: values[argument].astype(bad_dtype)})


@pytest.mark.parametrize("c", MODE_CALLS, ids=[c.name for c in MODE_CALLS])
def test_mismatched_parameter_dtype_is_a_type_error_naming_it(c):
    values = arguments()
    for argument in ("g", "gamma", "beta"):
        if argument in c.arguments:
            with pytest.raises(TypeError, match=rf"^{argument}\b"):
                c(values, **{argument: values[argument].astype(np.float32)})


@pytest.mark.parametrize("c", [*mode_calls(False), RUNNING_CALL], ids=lambda c: c.name)
def test_running_statistics_of_another_dtype_are_taken_exactly_or_refused(c):
    """float32 running statistics with float64 x: either the result of the same statistics
    converted (exactly) to float64 or a TypeError naming them (SPEC: a correct result or an
    error). running_update returns its statistics in their own dtype."""
    values = arguments()
    narrow = {k: values[k].astype(np.float32) for k in ("running_mean", "running_var")}
    widened = {k: v.astype(np.float64) for k, v in narrow.items()}
    for name in narrow:
        try:
            got = outputs_of(c(values, **{name: narrow[name]}))
        except TypeError as error:
            assert str(error).startswith(name), f"{c.name}: {error}"
            continue
        want = outputs_of(c(values, **{name: widened[name]}))
        for i, (a, b) in enumerate(zip(got, want, strict=True)):
            if c is RUNNING_CALL and (i == 0) == (name == "running_mean"):
                b = b.astype(np.float32)
            assert_same_values(f"{c.name} output {i} with float32 {name}", a, b)


@pytest.mark.parametrize("c", ALL_CALLS, ids=CALL_IDS)
def test_mismatched_parameter_shape_is_a_value_error_naming_it(c):
    values = arguments()
    for argument in array_names(c):
        if argument == "x":
            continue
        array = values[argument]
        for wrong in (np.concatenate([array, array[..., :1]], axis=-1), array[np.newaxis]):
            with pytest.raises(ValueError, match=rf"^{argument}\b"):
                c(values, **{argument: wrong})


@pytest.mark.parametrize("ndim", (0, 1, 3, 5))
@pytest.mark.parametrize("c", ALL_CALLS, ids=CALL_IDS)
def test_x_of_the_wrong_rank_is_a_value_error_naming_x(c, ndim):
    values = arguments()
    shape = (BATCH, FEATURES, 2, 2, 2)[:ndim] if ndim else ()
    x = np.ones(shape)
    spoiled = {"x": x, "g": np.ones(shape)}
    with pytest.raises(ValueError, match=r"^x\b"):
        c(values, **spoiled)


@pytest.mark.parametrize("c", MODE_CALLS, ids=[c.name for c in MODE_CALLS])
def test_unknown_denom_is_a_value_error_naming_denom(c):
    for denom in ("sqrt", "std", "", "STD_PLUS_EPS"):
        with pytest.raises(ValueError, match=r"^denom\b"):
            c.but(denom=denom)(arguments())


@pytest.mark.parametrize(
    "missing",
    (("running_mean",), ("running_var",), ("running_mean", "running_var")),
    ids=("mean", "var", "both"),
)
@pytest.mark.parametrize("c", mode_calls(False), ids=lambda c: c.name)
def test_inference_without_running_statistics_is_a_value_error(c, missing):
    held = {k: v for k, v in arguments().items() if k not in missing}
    with pytest.raises(ValueError, match=r"^running_(mean|var)\b"):
        c(held)


@pytest.mark.parametrize("eps", (-1e-5, -1.0, np.nan, np.inf, -np.inf))
@pytest.mark.parametrize("c", MODE_CALLS, ids=[c.name for c in MODE_CALLS])
def test_bad_eps_is_a_value_error_naming_eps(c, eps):
    with pytest.raises(ValueError, match=r"^eps\b"):
        c(arguments(), eps=eps)


@pytest.mark.parametrize("momentum", (-0.1, 1.5, np.nan, np.inf))
def test_bad_momentum_is_a_value_error_naming_momentum(momentum):
    with pytest.raises(ValueError, match=r"^momentum\b"):
        RUNNING_CALL(arguments(), momentum=momentum)


@pytest.mark.parametrize("c", mode_calls(True), ids=lambda c: c.name)
def test_unused_running_statistics_of_a_wrong_shape_are_ignored_or_refused(c):
    """Training mode does not read the running statistics: wrongly shaped ones give the
    result without them, or a ValueError naming them (SPEC: a correct result or an error)."""
    values = arguments()
    expected = outputs_of(c(values))
    for name in ("running_mean", "running_var"):
        wrong = np.zeros(FEATURES + 1)
        try:
            got = outputs_of(c.but(**{name: wrong})(values, **{name: wrong}))
        except ValueError as error:
            assert str(error).startswith(name), f"{c.name}: {error}"
            continue
        for i, (a, b) in enumerate(zip(got, expected, strict=True)):
            assert_same_bits(f"{c.name} output {i} with an unused {name}", a, b)


@pytest.mark.parametrize("c", mode_calls(False), ids=lambda c: c.name)
def test_negative_running_variance_is_refused_or_nan_in_its_feature(c):
    """A negative running_var: a ValueError naming it, or NaN where sqrt would be NaN."""
    values = arguments()
    var = values["running_var"].copy()
    var[1] = -1.0
    try:
        got = outputs_of(c(values, running_var=var))
    except ValueError as error:
        assert str(error).startswith("running_var"), f"{c.name}: {error}"
        return
    clean = outputs_of(c(values))
    assert np.all(np.isnan(to_rows(got[0])[1])), f"{c.name}: feature 1 of {got[0]!r}"
    assert_same_bits(f"{c.name} feature 0", to_rows(got[0])[0], to_rows(clean[0])[0])


@pytest.mark.parametrize("four_d", (False, True), ids=("N,D", "N,C,H,W"))
@pytest.mark.parametrize("c", [*mode_calls(True), RUNNING_CALL], ids=lambda c: c.name)
def test_empty_batch_in_training_is_a_value_error_naming_x(c, four_d):
    values = arguments(four_d=four_d)
    empty = {k: values[k][:, :, :0] if four_d else values[k][:0] for k in ("x", "g")}
    with pytest.raises(ValueError, match=r"^x\b"):
        c(values, **empty)


@pytest.mark.parametrize("c", mode_calls(False), ids=lambda c: c.name)
def test_empty_batch_in_inference_gives_empty_outputs_or_a_value_error(c):
    """Inference needs no batch statistic: empty outputs (zero parameter gradients) are the
    correct result; a ValueError naming x is also allowed (SPEC)."""
    values = arguments()
    empty = {k: values[k][:0] for k in ("x", "g")}
    try:
        result = outputs_of(c(values, **empty))
    except ValueError as error:
        assert str(error).startswith("x"), f"{c.name}: {error}"
        return
    if c.name.startswith("forward"):
        assert result[0].shape == (0, FEATURES), f"{c.name}: {result[0]!r}"
    elif c.name.startswith("jacobian"):
        assert result[0].shape == (FEATURES, 0, 0), f"{c.name}: {result[0]!r}"
    else:
        assert result[0].shape == (0, FEATURES), f"{c.name} dx: {result[0]!r}"
        assert_same_values(f"{c.name} dgamma", result[1], np.zeros(FEATURES))
        assert_same_values(f"{c.name} dbeta", result[2], np.zeros(FEATURES))


@pytest.mark.parametrize("dtype", (np.float32, np.float64))
@pytest.mark.parametrize("c", MODE_CALLS, ids=[c.name for c in MODE_CALLS])
def test_strict_fp16_is_for_float16_only(c, dtype):
    with pytest.raises(ValueError, match=r"^strict_fp16\b"):
        c.but(strict_fp16=True)(arguments(dtype))


def strided(array: np.ndarray) -> np.ndarray:
    """A non-contiguous view equal to ``array``."""
    if array.ndim >= 2:  # a transposed view of the transposed copy
        view = np.ascontiguousarray(array.swapaxes(0, -1)).swapaxes(0, -1)
    else:  # every other element of a doubled array
        view = np.repeat(array, 2)[::2]
    assert not view.flags.c_contiguous or array.size <= 1
    return view


@pytest.mark.parametrize("four_d", (False, True), ids=("N,D", "N,C,H,W"))
@pytest.mark.parametrize(("c", "dtype", "strict"), CALL_MODES)
def test_non_contiguous_input_gives_the_contiguous_result(c, dtype, strict, four_d):
    c = c.but(strict_fp16=True) if strict else c
    values = arguments(dtype, four_d=four_d)
    expected = outputs_of(c(values))
    views = {a: strided(values[a]) for a in array_names(c)}
    for name, view in views.items():
        np.testing.assert_array_equal(view, values[name])
    for i, (got, want) in enumerate(zip(outputs_of(c(values, **views)), expected, strict=True)):
        assert_same_bits(f"{c.name} output {i} (non-contiguous inputs)", got, want)


@pytest.mark.parametrize(("c", "dtype", "strict"), CALL_MODES)
def test_no_kernel_writes_into_its_inputs(c, dtype, strict):
    values = arguments(dtype)
    before = {k: np.copy(v) for k, v in values.items() if isinstance(v, np.ndarray)}
    (c.but(strict_fp16=True) if strict else c)(values)
    for name, copy in before.items():
        assert_same_bits(f"{c.name}: input {name} after the call", values[name], copy)


@pytest.mark.parametrize("bad", (np.nan, np.inf), ids=("nan", "inf"))
@pytest.mark.parametrize(("dtype", "strict"), DTYPE_MODES, ids=DTYPE_MODE_IDS)
@pytest.mark.parametrize("training", MODES, ids=MODE_IDS)
def test_non_finite_value_stays_in_its_feature(training, dtype, strict, bad):
    """A NaN or inf at x[1, 2] (and in g[3, 2]) changes feature 2 only: the others keep
    their bits. With NaN, training makes all of feature 2 NaN (its mean is NaN); inference
    only the sample's own y and feature 2's dgamma (dx does not depend on x there)."""
    values = arguments(dtype)
    kw = {**options(values, "sqrt_var_eps", training), "strict_fp16": strict}
    x, g, gamma, beta, eps = (values[k] for k in ("x", "g", "gamma", "beta", "eps"))
    x_bad, g_bad = x.copy(), g.copy()
    x_bad[1, 2] = bad
    g_bad[3, 2] = bad
    clean_y = batchnorm.forward(x, gamma, beta, eps, **kw)
    clean = batchnorm.vjp(x, g, gamma, beta, eps, **kw)
    clean_jac = batchnorm.jacobian(x, gamma, beta, eps, **kw)
    y = batchnorm.forward(x_bad, gamma, beta, eps, **kw)
    dx, dgamma, dbeta = batchnorm.vjp(x_bad, g, gamma, beta, eps, **kw)
    dx_g, dgamma_g, dbeta_g = batchnorm.vjp(x, g_bad, gamma, beta, eps, **kw)
    jac = batchnorm.jacobian(x_bad, gamma, beta, eps, **kw)
    for j in (0, 1):
        assert_same_bits(f"forward feature {j}", y[:, j], clean_y[:, j])
        assert_same_bits(f"vjp dx feature {j}", dx[:, j], clean[0][:, j])
        assert_same_bits(f"vjp dx feature {j} (bad g)", dx_g[:, j], clean[0][:, j])
        assert_same_bits(f"jacobian block {j}", jac[j], clean_jac[j])
    for name, got, want in (
        ("dgamma", dgamma, clean[1]),
        ("dbeta", dbeta, clean[2]),
        ("dgamma (bad g)", dgamma_g, clean[1]),
        ("dbeta (bad g)", dbeta_g, clean[2]),
    ):
        assert_same_bits(f"vjp {name} features 0, 1", got[:2], want[:2])
    assert_same_bits("vjp dbeta of feature 2 (bad x)", dbeta[2:], clean[2][2:])
    if np.isnan(bad):
        if training:
            assert_same_values("forward NaN feature", y[:, 2], np.nan)
            assert_same_values("vjp dx NaN feature", dx[:, 2], np.nan)
            assert_same_values("jacobian NaN block", jac[2], np.nan)
        else:
            assert_same_values("inference forward NaN sample", y[1, 2], np.nan)
            others = np.arange(BATCH) != 1
            assert_same_bits("inference forward other samples", y[others, 2], clean_y[others, 2])
            assert_same_bits("inference dx does not read x", dx[:, 2], clean[0][:, 2])
        assert_same_values("vjp dgamma NaN feature", dgamma[2], np.nan)
        assert_same_values("vjp dx_g NaN feature", dx_g[:, 2] if training else dx_g[3, 2], np.nan)
        assert_same_values("vjp dbeta NaN feature (bad g)", dbeta_g[2], np.nan)


@pytest.mark.parametrize(("c", "dtype", "strict"), CALL_MODES)
def test_image_batch_equals_the_flattened_batch(c, dtype, strict):
    """(N, C, H, W) is the (N*H*W, C) call on its positions in C order over (N, H, W)."""
    c = c.but(strict_fp16=True) if strict else c
    values = arguments(dtype, seed=5, four_d=True)
    flat = {k: to_rows(values[k]).T.copy() for k in ("x", "g")}
    image = outputs_of(c(values))
    flattened = outputs_of(c(values, **flat))
    for i, (got, want) in enumerate(zip(image, flattened, strict=True)):
        if got.shape == values["x"].shape:
            got = to_rows(got).T
        assert_same_bits(f"{c.name} output {i} ((N, C, H, W) against (N*H*W, C))", got, want)


@pytest.mark.parametrize("dtype", DTYPES, ids=DTYPE_IDS)
@pytest.mark.parametrize("denom", DENOMS)
@pytest.mark.parametrize("c", MODE_CALLS[:2] + MODE_CALLS[3:5], ids=lambda c: c.name)
def test_results_do_not_depend_on_the_thread_count(c, denom, dtype):
    """One thread runs the loops' serial twins, two the parallel loops (the batch is above
    the grain): the same bits, for every parallel loop and path."""
    if numba.config.NUMBA_NUM_THREADS < 2:
        pytest.skip("Numba has a single thread here")
    rng = np.random.default_rng(7)
    values = arguments(dtype)
    features = 64
    batch = GRAIN // features + 1
    values |= {
        "x": rng.standard_normal((batch, features)).astype(dtype),
        "g": rng.standard_normal((batch, features)).astype(dtype),
        "gamma": rng.standard_normal(features).astype(dtype),
        "beta": rng.standard_normal(features).astype(dtype),
        "running_mean": rng.standard_normal(features).astype(dtype),
        "running_var": rng.uniform(0.5, 2.0, features).astype(dtype),
    }
    c = c.but(denom=denom)
    assert_same_bits_on_1_and_2_threads(f"{c.name} {denom}", lambda: outputs_of(c(values)))


# --------------------------------------------------------------------------------------
# 9. Regressions: keyword checks (kernels/_validate.py) and the training-mode contract
# --------------------------------------------------------------------------------------


@pytest.mark.parametrize("bad", ["no", "False", 1, None])
@pytest.mark.parametrize("c", MODE_CALLS, ids=[c.name for c in MODE_CALLS])
def test_training_of_another_kind_is_a_type_error(c, bad):
    """``training="no"`` used to run training mode (a non-empty string is truthy)."""
    with pytest.raises(TypeError, match=r"^training: expected True or False"):
        c.but(training=bad)(arguments())


@pytest.mark.parametrize("bad", ["no", 1, None])
@pytest.mark.parametrize("c", MODE_CALLS, ids=[c.name for c in MODE_CALLS])
def test_strict_fp16_of_another_kind_is_a_type_error(c, bad):
    """``strict_fp16="no"`` used to take the strict path."""
    with pytest.raises(TypeError, match=r"^strict_fp16: expected True or False"):
        c.but(strict_fp16=bad)(arguments(np.float16))


@pytest.mark.parametrize("bad", ["0.5", True, [1e-5], None])
@pytest.mark.parametrize("c", MODE_CALLS, ids=[c.name for c in MODE_CALLS])
def test_eps_of_another_kind_is_a_type_error(c, bad):
    """``eps="0.5"`` and ``eps=True`` used to be taken as 0.5 and 1.0."""
    with pytest.raises(TypeError, match=r"^eps: expected a real number"):
        c(arguments(), eps=bad)


@pytest.mark.parametrize("bad", [["sqrt_var_eps"], None, 1])
@pytest.mark.parametrize("c", MODE_CALLS, ids=[c.name for c in MODE_CALLS])
def test_denom_of_another_kind_is_a_value_error_naming_denom(c, bad):
    """A list used to give "unhashable type: 'list'"."""
    with pytest.raises(ValueError, match=r"^denom: expected one of 'sqrt_var_eps'"):
        c.but(denom=bad)(arguments())


@pytest.mark.parametrize(
    ("momentum", "error"),
    [("x", TypeError), (True, TypeError), (None, TypeError), (np.nan, ValueError),
     (-0.1, ValueError), (1.5, ValueError)],
)  # fmt: skip
@pytest.mark.parametrize("c", [*mode_calls(False), RUNNING_CALL], ids=lambda c: c.name)
def test_bad_momentum_is_refused_naming_momentum(c, momentum, error):
    """``momentum="x"`` or NaN used to be accepted by forward, vjp and jacobian (and
    running_update took a string it could convert)."""
    call = c if c is RUNNING_CALL else c.but(momentum=None)
    with pytest.raises(error, match=r"^momentum: expected"):
        call(arguments(), momentum=momentum)


@pytest.mark.parametrize("c", MODE_CALLS, ids=[c.name for c in MODE_CALLS])
def test_bad_momentum_is_refused_in_training_mode_too(c):
    with pytest.raises(TypeError, match=r"^momentum: expected a real number"):
        c.but(momentum=None)(arguments(), momentum="x")


@pytest.mark.parametrize(
    "given",
    [("running_mean",), ("running_var",), ("running_mean", "running_var")],
    ids=("mean", "var", "both"),
)
@pytest.mark.parametrize("c", mode_calls(True), ids=lambda c: c.name)
def test_running_statistics_in_training_mode_are_refused(c, given):
    """Training mode normalizes by the batch and updates nothing: running statistics used to
    be accepted and silently ignored. The error names them and running_update, the way to
    PyTorch's updated statistics."""
    values = arguments()
    call = c.but(**{name: None for name in given}, momentum=0.1)
    with pytest.raises(ValueError, match=rf"^{given[0]}: not read in training mode") as error:
        call(values)
    assert "batchnorm.running_update" in str(error.value)


@pytest.mark.parametrize("momentum", (0.0, 0.2, 1.0))
@pytest.mark.parametrize("c", mode_calls(True), ids=lambda c: c.name)
def test_a_momentum_other_than_the_default_is_refused_in_training_mode(c, momentum):
    """A non-default momentum without running statistics was ignored just the same."""
    with pytest.raises(ValueError, match=r"^momentum: has no effect in training mode") as error:
        c.but(momentum=None)(arguments(), momentum=momentum)
    assert "batchnorm.running_update" in str(error.value)


@pytest.mark.parametrize("c", mode_calls(True), ids=lambda c: c.name)
def test_training_mode_with_the_default_momentum_is_fine(c):
    """momentum at its default (given or not), without running statistics: the batch's
    statistics, bit for bit the same result."""
    values = arguments()
    plain = outputs_of(c(values))
    given = outputs_of(c.but(momentum=0.1)(values))
    for i, (a, b) in enumerate(zip(given, plain, strict=True)):
        assert_same_bits(f"{c.name} output {i} with momentum=0.1", a, b)


@pytest.mark.parametrize("c", mode_calls(False), ids=lambda c: c.name)
def test_inference_mode_checks_momentum_and_is_not_changed_by_it(c):
    """Inference mode reads the running statistics; momentum has no effect there (as in
    PyTorch's eval mode), once checked."""
    values = arguments()
    plain = outputs_of(c(values))
    for momentum in (0.0, 0.5, 1.0):
        other = outputs_of(c.but(momentum=None)(values, momentum=momentum))
        for i, (a, b) in enumerate(zip(other, plain, strict=True)):
            assert_same_bits(f"{c.name} output {i} with momentum={momentum}", a, b)


def test_running_update_refuses_a_negative_running_variance():
    """running_update used to accept the negative running_var that inference refuses."""
    values = arguments()
    var = values["running_var"].copy()
    var[1] = -1.0
    with pytest.raises(ValueError, match=r"^running_var: a variance must be >= 0"):
        RUNNING_CALL(values, running_var=var)
    for c in mode_calls(False):
        with pytest.raises(ValueError, match=r"^running_var: a variance must be >= 0"):
            c(values, running_var=var)


@pytest.mark.parametrize("denom", DENOMS)
@pytest.mark.parametrize("training", MODES, ids=MODE_IDS)
def test_strict_eps_that_overflows_half_is_inf_without_a_warning(training, denom):
    """Strict mode rounds eps to half: 1e5 is inf there, which used to escape as NumPy's
    overflow RuntimeWarning (an error here: the tests run with warnings as errors). With
    eps = inf every scale r is 0: y = beta, dx = 0, J = 0."""
    values = arguments(np.float16)
    kw = options(values, denom, training)
    x, g, gamma, beta = (values[k] for k in ("x", "g", "gamma", "beta"))
    y = batchnorm.forward(x, gamma, beta, 1e5, **kw, strict_fp16=True)
    dx, _, _ = batchnorm.vjp(x, g, gamma, beta, 1e5, **kw, strict_fp16=True)
    J = batchnorm.jacobian(x, gamma, beta, 1e5, **kw, strict_fp16=True)
    assert_same_values("y", y, np.broadcast_to(beta, x.shape))
    assert not dx.any() and not J.any(), (dx, J)


def test_inference_jacobian_rounds_past_float32_max_without_a_warning():
    """Found by hypothesis: in inference mode the Jacobian's diagonal gamma/(sqrt(var) + eps)
    was cast to float32 with a RuntimeWarning when it exceeds the format. It must be the
    correctly rounded value (here inf: 1.2738e16 / sqrt(2^-149) = 3.4029e38 > the largest
    float32), silently, as IEEE arithmetic gives it."""
    gamma = np.array([0.0, 1.2738102590177282e16, 0.0], np.float32)
    var = np.array([1.0, 1.401298464324817e-45, 1.0], np.float32)
    x = np.zeros((5, 3), np.float32)
    zeros = np.zeros(3, np.float32)
    J = batchnorm.jacobian(x, gamma, zeros, 0.0, False, zeros, var, denom="std_plus_eps")
    with mpmath.workdps(50):
        exact = mpmath.mpf(float(gamma[1])) / mpmath.sqrt(mpmath.mpf(float(var[1])))
    expected = round_to_dtype(exact, np.float32)
    assert J.dtype == np.float32
    assert_same_bits("J[1] diagonal", np.diagonal(J[1]), np.full(5, expected, np.float32))


# --- the float32 loops sweep four rows at a time: same bits as one row at a time ----------


def _statistics_row_by_row(x, c0, c1):
    """``column_statistics_wide`` as it was before the loops swept several rows at once
    (one row per sweep of the features), kept here to compare bits with: the statistics of
    :func:`_moments_and_sums_row_by_row`, whose sums do not touch them."""
    m, correction, moment, _, _ = _moments_and_sums_row_by_row(x, x, c0, c1)
    return m, correction, moment


@numba.njit(error_model="numpy", fastmath={"reassoc", "contract"})
def _moments_and_sums_row_by_row(x, g, c0, c1):  # pragma: no cover - compiled
    """``column_moments_and_sums_wide`` one row at a time, to compare bits with: the
    corrected two-pass statistics, and in their second pass the sums of g and of g times
    the deviation from the first-pass mean."""
    width, count = c1 - c0, x.shape[0] * x.shape[1]
    first = np.zeros(width)
    for a in range(x.shape[0]):
        for p in range(x.shape[1]):
            for c in range(c0, c1):
                first[c - c0] += np.float64(x[a, p, c])
    m = first / count
    first[:] = 0.0
    second, sum_g, sum_gd = np.zeros(width), np.zeros(width), np.zeros(width)
    for a in range(x.shape[0]):
        for p in range(x.shape[1]):
            for c in range(c0, c1):
                k = c - c0
                d = np.float64(x[a, p, c]) - m[k]
                gk = np.float64(g[a, p, c])
                first[k] += d
                second[k] += d * d
                sum_g[k] += gk
                sum_gd[k] += gk * d
    correction = first / count
    moment = second / count - correction * correction
    for k in range(width):
        if moment[k] < 0.0:
            moment[k] = 0.0
    return m, correction, moment, sum_g, sum_gd


#: (A, L, C) layouts: (N, D) inputs as (N, 1, D), (N, C, H, W) as (N, H*W, C); row counts
#: with every remainder modulo the sweep of four rows.
SWEEP_LAYOUTS = [(1, 1, 1), (2, 1, 3), (3, 1, 17), (5, 1, 64), (7, 1, 129), (4, 9, 5), (3, 7, 33)]
SWEEP_VALUES = ("normal", "offset", "wide", "constant", "non-finite")


def _sweep_values(rng, shape, kind):
    if kind == "offset":  # a large common offset: the centre's correction matters
        return rng.standard_normal(shape) * 1e-3 + 1e4 * rng.standard_normal(shape[-1])
    if kind == "wide":
        return rng.standard_normal(shape) * 10.0 ** rng.integers(-20, 20, size=shape)
    if kind == "constant":
        return np.broadcast_to(rng.standard_normal(shape[-1]), shape).copy()
    values = rng.standard_normal(shape)
    if kind == "non-finite":
        values.flat[rng.integers(0, values.size, 3)] = [np.nan, np.inf, -np.inf]
    return values


@pytest.mark.parametrize("layout", SWEEP_LAYOUTS, ids=str)
@pytest.mark.parametrize("dtype", [np.float32, np.float16], ids=["float32", "float16"])
def test_float32_loops_sweeping_four_rows_give_the_bits_of_one_row_at_a_time(layout, dtype):
    """The wide path's statistics and VJP sums (float64, one accumulator per feature, each
    over the rows in order) are those of the one-row-at-a-time loops they replaced, bit for
    bit, over every remainder of the rows modulo 4, blocks of features, and non-finite,
    constant and widely spread values; so are forward and vjp, whose other loops are
    elementwise."""
    generated = generated_batchnorm
    rng = np.random.default_rng(sum(layout) + 7 * (dtype == np.float16))
    for kind in SWEEP_VALUES:
        with np.errstate(over="ignore", invalid="ignore"):
            x = _sweep_values(rng, layout, kind).astype(dtype).astype(np.float32)
        g = rng.standard_normal(layout).astype(dtype).astype(np.float32)
        features = layout[2]
        for c0, c1 in {(0, features), (features // 3, features), (0, (features + 1) // 2)}:
            stats = generated.column_statistics_wide(x, c0, c1)
            assert_same_bits("statistics", stats, _statistics_row_by_row(x, c0, c1))
            sums = generated.column_moments_and_sums_wide(x, g, c0, c1)
            assert_same_bits("VJP sums", sums, _moments_and_sums_row_by_row(x, g, c0, c1))


@pytest.mark.parametrize("features", [1, 3, 513, 1100])
def test_blocks_of_at_most_max_block_features_per_thread(features):
    """The features are split into blocks of at most MAX_BLOCK, the same number per thread;
    the results do not depend on the split (1 thread against 2, wide inputs)."""
    for threads in (1, 2, 3):
        assert 1 <= batchnorm._block(features, threads) <= batchnorm.MAX_BLOCK
    rng = np.random.default_rng(features)
    x = rng.standard_normal((6, features)).astype(np.float32)
    g = rng.standard_normal((6, features)).astype(np.float32)
    gamma, beta = rng.standard_normal((2, features)).astype(np.float32)
    assert_same_bits_on_1_and_2_threads(
        f"batchnorm D = {features}",
        lambda: [batchnorm.forward(x, gamma, beta), *batchnorm.vjp(x, g, gamma, beta)],
    )
