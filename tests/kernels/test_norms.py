"""The normalization kernels against the mpmath references, in float64, float32 and float16.

Kernels: ``kernels.layernorm``, ``kernels.rmsnorm``, ``kernels.centernorm`` (the "row
norms") and ``kernels.weightnorm``. References: ``derive/reference/norms.py`` (mpmath at 50
digits, inputs taken exactly). float16 is tested in "mixed" mode against the references and
in ``strict_fp16`` mode at its pinned overflow thresholds.

Accuracy (``tests/helpers/tolerances.py``): a result ``y`` passes when

    |y - exact| <= NORM_ULPS[dtype] * ulp(exact) + (NORM_ROUNDINGS + n) * 2^-53 * S.

``S`` is the scale of the output, the sum of the magnitudes of the terms it is made of,
computed here (at ``SCALE_DPS`` digits; it is a bound, not a result) from the exact
intermediate quantities of a row: ``z`` the normalized values, ``r`` the scale
(``1/sqrt(var + eps)``, ``1/sqrt(mean(x^2) + eps)``; ``D/(D-1)`` for CenterNorm) and
``a = gamma * g``:

=====================  ================================================================
output                 S
=====================  ================================================================
row norm ``y_i``       ``|gamma_i| (|z_i| + u) + |beta_i|``
row norm ``dx_i``      ``r (|a_i| + mean|a| + |z_i| mean|a z|)`` (CenterNorm: no z term)
``dgamma_j``           ``sum_rows |g_j| (|z_j| + u)``
``dbeta_j``            ``sum_rows |g_j|``
Jacobian ``J_ij``      ``|gamma_i| r (delta_ij + 1/D + |z_i z_j| / D)`` (CenterNorm: no z)
WeightNorm ``y_i``     ``sum_j |x_j W_ij|``
WeightNorm ``dx_j``    ``sum_i |g_i W_ij|``
WeightNorm ``dv_ij``   ``|gamma_i| r_i (A_ij + |v_ij| r_i^2 sum_k A_ik |v_ik|)``,
                       ``A_ij = sum_rows |g_i x_j|``, ``r_i = 1/sqrt(|v_i|^2 + eps)``
WeightNorm ``dgamma``  ``r_i sum_j A_ij |v_ij|``
WeightNorm ``W_ij``    ``|W_ij|``
=====================  ================================================================

``u`` is the size of the row's normalized values that the error of the row mean is
measured in: 1 for LayerNorm and RMSNorm (``mean(z^2) <= 1``, so ``mean|z| <= 1``) and
``mean|z|`` for CenterNorm, whose ``z = D/(D-1) (x - mean)`` is not normalized (a fixed 1
would not even have the units of x there). For RMSNorm the ``mean|a|`` and ``1/D`` terms
are not needed; the superset is used.

``n``, the longest plain float64 sum on the way (``plain_length``): 0 for float64 row
norms (compensated statistics and means); for float32/float16 row norms D for the per-row
outputs (y, dx, J) and the number of rows N for dgamma/dbeta; for WeightNorm (every dtype:
the products are BLAS's) D for y, O for dx, N + D for dv and dgamma, 0 for W.

Non-finite results are judged by what a float64 value within ``(NORM_ROUNDINGS + n) *
2^-53 * S`` of the exact value rounds to: where either the kernel's result or the exact
value's correct rounding is infinite, the result must lie between the roundings of
``exact -+ that error`` (so a float16 result is inf exactly when the exact value rounds to
inf, up to a float64 error no test here comes near).

Domain. float64 values are drawn within ``[1e-30, 1e30]`` in magnitude (or 0): the float64
outputs have no ULP allowance, so a product or square that underflows (or a variance that
does, see the report) is outside what the bound describes. float32 values are within 1e30,
float16 values are every finite half. ``eps = 0`` is drawn only where the exact result is
defined (no constant LayerNorm row, no zero RMSNorm row, no zero WeightNorm ``v_i``); the
0/0 cases have their own test (NaN, and no crash).
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from types import ModuleType
from typing import Any

import ml_dtypes
import mpmath
import numba
import numpy as np
import pytest
from hypothesis import assume, example, given, settings
from hypothesis import strategies as st

from derive.reference import norms as reference_norms
from derive.reference.core import float_format, round_to_dtype, ulp
from kernels import centernorm, layernorm, rmsnorm, weightnorm
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
    mp,
    objects,
    passes_by_float64,
    realize,
)
from tests.helpers.tolerances import UNIT_FLOAT64

DTYPES = (np.dtype(np.float64), np.dtype(np.float32), np.dtype(np.float16))
#: Every dtype in its default mode, and float16 also in strict mode.
DTYPE_MODES = (
    *((dtype, False) for dtype in DTYPES),
    (np.dtype(np.float16), True),
    (np.dtype(ml_dtypes.bfloat16), True),
)
DTYPE_MODE_IDS = ("float64", "float32", "float16", "float16-strict", "bfloat16-strict")
DTYPE_IDS = [dtype.name for dtype in DTYPES]
HALF = np.dtype(np.float16)

#: The eps values drawn (PyTorch convention: added to the variance / mean square).
EPSILONS = (0.0, 1e-12, 1e-6, 1e-5, 1e-3, 1.0)
#: eps used instead of a drawn 0 where 0 would make the exact result 0/0.
FALLBACK_EPS = 1e-5
#: Shapes drawn: N rows of D features (O outputs for WeightNorm).
MAX_ROWS, MAX_DIM, MAX_OUTPUTS = 4, 12, 4
#: mpmath is slow: examples per reference property (the file must run in minutes).
EXAMPLES = 40
#: Fewer for the properties that also take a Jacobian per example.
FEW_EXAMPLES = 25
#: Large rows: D and the offsets k of the nearly constant rows 60000 + k * spacing.
LARGE_DIM = 8192
LARGE_BASE = 60000.0
LARGE_OFFSETS = 3
#: Row length of the thread-determinism test (its rows, above the grain: many blocks of
#: BLOCK_ROWS = 32 rows).
DETERMINISM_DIM = 64


# --------------------------------------------------------------------------------------
# The modules under test
# --------------------------------------------------------------------------------------


@dataclass(frozen=True)
class RowNorm:
    """A per-row normalization: kernel module, reference functions and its arithmetic."""

    name: str
    kernel: ModuleType
    #: Subtracts the row mean (LayerNorm, CenterNorm).
    centred: bool
    #: Divides by the row's root mean square (LayerNorm, RMSNorm); else the factor D/(D-1).
    normalized: bool
    has_eps: bool
    min_dim: int

    def reference(self, quantity: str) -> Callable[..., Any]:
        return getattr(reference_norms, f"{self.name}_{quantity}")

    def tail(self, eps: float) -> tuple[float, ...]:
        return (eps,) if self.has_eps else ()

    def degenerate(self, row: np.ndarray) -> bool:
        """True if eps = 0 makes this row 0/0 (a constant row; an all-zero RMSNorm row)."""
        if not self.normalized:
            return False
        if self.centred:
            return bool(np.all(row == row[0]))
        return not np.any(row)


LAYERNORM = RowNorm("layernorm", layernorm, True, True, True, 1)
RMSNORM = RowNorm("rmsnorm", rmsnorm, False, True, True, 1)
CENTERNORM = RowNorm("centernorm", centernorm, True, False, False, 2)
ROW_NORMS = (LAYERNORM, RMSNORM, CENTERNORM)
ROW_NORM_IDS = [norm.name for norm in ROW_NORMS]


def call(function: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
    """Call a kernel, ignoring only NumPy's float16 cast-overflow warning.

    A float16 result that overflows is inf by design; the kernels round their float64
    values with ``astype(float16)``, which also warns. Whether they should is a separate
    question, asked by ``test_float16_overflow_gives_inf_without_a_warning``.
    """
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", "overflow encountered in cast", RuntimeWarning)
        return function(*args, **kwargs)


# --------------------------------------------------------------------------------------
# The accuracy check
# --------------------------------------------------------------------------------------


def check_all(
    what: str,
    actual: np.ndarray,
    exact: Sequence[Any],
    dtype: np.dtype,
    n: int,
    scales: Sequence[Any],
) -> None:
    """``check`` every entry of an array against nested lists of exact values and scales
    (``check_array``: the entries a float64 screen settles are not re-checked in mpmath)."""
    check_array(what, actual, objects(exact), dtype, n, objects(scales))


def _verdict_of_check(actual, exact, dtype, n, scale) -> bool:
    try:
        check("screen", (0,), actual, exact, dtype, n, scale)
    except AssertionError:
        return False
    return True


@pytest.mark.parametrize("dtype", DTYPES, ids=DTYPE_IDS)
def test_the_float64_screen_passes_only_what_check_passes(dtype):
    """``passes_by_float64`` never passes an entry ``check`` fails. The outputs are values
    of the dtype in every binade kind (normal, a power of two and the value below it,
    subnormal, near the largest finite one, 0); the exact values sit 2^-40 (and 2^-46)
    relative steps inside and outside the allowed error on either side (the ulp taken in
    the output's binade, so crossing a power of two moves the bound as ``check`` sees it);
    NaN, inf and overflowing values are among them. The screen does pass the plain cases (a
    normal value off by at most 80% of the allowed error), or it saves nothing."""
    fmt = float_format(dtype)
    largest, tiny = float(fmt.max_finite), float(fmt.smallest_subnormal)
    outputs = (1.0, 0.75, 0.5, float(np.nextafter(dtype.type(1), dtype.type(0))), 2.0**-20)
    outputs += (largest / 2, largest, tiny * 3, 0.0)
    n, cases, plain = 8, [], []
    with mpmath.workdps(SCALE_DPS):
        for value in outputs:
            actual = np.asarray(value).astype(dtype)
            for scale in (mpmath.mpf(0), mpmath.mpf(value), mpmath.mpf(value) * 2**30):
                limit = allowed(mp(actual), dtype, n, scale)
                for side in (1, -1):
                    for step in (1 - 2.0**-40, 1 + 2.0**-46, 1 + 2.0**-40, 0.5, 3.0):
                        exact = mp(actual) + side * limit * step
                        cases.append((actual, exact, scale))
                        plain.append(value in (1.0, 0.75) and scale > 0 and step == 0.5)
        cases += [
            (np.asarray(np.nan).astype(dtype), mpmath.mpf(1), mpmath.mpf(1)),
            (np.asarray(1.0).astype(dtype), mpmath.mpf("nan"), mpmath.mpf(1)),
            (np.asarray(np.inf).astype(dtype), mpmath.mpf(2) * fmt.max_finite, mpmath.mpf(1)),
            (np.asarray(largest).astype(dtype), fmt.overflow_threshold, mpmath.mpf(1)),
            (np.asarray(1.0).astype(dtype), mpmath.mpf(1), mpmath.mpf("inf")),
            # float(exact) = 1, but the exact value's binade is the finer one below 1
            (np.asarray(outputs[3]).astype(dtype), 1 - mpmath.mpf(2) ** -60, mpmath.mpf(1)),
            # an exact value that rounds to inf, with a scale that allows the finite output
            (np.asarray(largest).astype(dtype), 2 * fmt.max_finite, fmt.max_finite * 2**60),
        ]
    actual = np.array([a for a, _, _ in cases], dtype=dtype)
    exact, scales = np.empty(len(cases), dtype=object), np.empty(len(cases), dtype=object)
    exact[:], scales[:] = [e for _, e, _ in cases], [s for _, _, s in cases]
    screened = passes_by_float64(actual, exact, dtype, n, scales)
    verdicts = np.array([_verdict_of_check(a, e, dtype, n, s) for a, e, s in cases])
    wrong = [cases[i] for i in np.flatnonzero(screened & ~verdicts)]
    assert not wrong, f"the screen passed entries check fails: {wrong[:3]}"
    unsettled = [cases[i] for i in np.flatnonzero(np.array(plain) & ~screened[: len(plain)])]
    assert not unsettled, f"plain cases left to mpmath: {unsettled[:3]}"
    assert 0 < verdicts.sum() < len(cases), "check passes all or none: the cases test nothing"


def plain_length(dtype: np.dtype, quantity: str, rows: int, dim: int) -> int:
    """n for a row norm's output: the longest plain float64 sum on the way to it."""
    if np.dtype(dtype) == np.float64:
        return 0
    if quantity == "dbeta":
        return rows
    # dgamma sums N products g z, each z carrying the error of the row's length-D sums.
    return rows + dim if quantity == "dgamma" else dim


# --------------------------------------------------------------------------------------
# Scales from the exact intermediate quantities
# --------------------------------------------------------------------------------------


@dataclass(frozen=True)
class RowStatistics:
    """One row's exact normalized values z, scale r and the unit u of the scales."""

    z: list[mpmath.mpf]
    r: mpmath.mpf
    unit: mpmath.mpf


def row_statistics(norm: RowNorm, row: np.ndarray, eps: float) -> RowStatistics:
    """z, r and u of one row (call inside ``workdps(SCALE_DPS)``)."""
    values = [mpmath.mpf(v) for v in np.asarray(row, dtype=np.float64).tolist()]
    size = len(values)
    if norm.centred:
        mean = mpmath.fsum(values) / size
        values = [v - mean for v in values]
    if norm.normalized:
        r = 1 / mpmath.sqrt(mpmath.fsum(values, squared=True) / size + mpmath.mpf(eps))
    else:
        r = mpmath.mpf(size) / (size - 1)
    z = [v * r for v in values]
    unit = mpmath.mpf(1) if norm.normalized else mpmath.fsum(abs(t) for t in z) / size
    return RowStatistics(z, r, unit)


@dataclass(frozen=True)
class RowScales:
    """The scales S of every output of a row norm, as nested lists."""

    y: list[list[mpmath.mpf]]
    dx: list[list[mpmath.mpf]]
    dgamma: list[mpmath.mpf]
    dbeta: list[mpmath.mpf]


def row_scales(
    norm: RowNorm,
    x: np.ndarray,
    g: np.ndarray,
    gamma: np.ndarray,
    beta: np.ndarray | None,
    eps: float,
) -> RowScales:
    """S for y, dx, dgamma and dbeta of rows x (N, D) with upstream gradient g."""
    with mpmath.workdps(SCALE_DPS):
        gm = [abs(mp(t)) for t in gamma]
        bt = [abs(mp(t)) for t in beta] if beta is not None else [mpmath.mpf(0)] * len(gm)
        size = len(gm)
        y, dx = [], []
        dgamma = [mpmath.mpf(0)] * size
        dbeta = [mpmath.mpf(0)] * size
        for row, g_row in zip(x, g, strict=True):
            stats = row_statistics(norm, row, eps)
            z = [abs(t) for t in stats.z]
            gs = [abs(mp(t)) for t in g_row]
            a = [gj * gs_j for gj, gs_j in zip(gm, gs, strict=True)]
            mean_a = mpmath.fsum(a) / size
            mean_az = mpmath.fsum(ai * zi for ai, zi in zip(a, z, strict=True)) / size
            y.append([gm[i] * (z[i] + stats.unit) + bt[i] for i in range(size)])
            z_weight = 1 if norm.normalized else 0
            # The mean's remaining error (relative to the row's spread) moves every z_j by
            # about n u mean|z|: through z_i m_az and through m_az itself.
            mean_z = mpmath.fsum(z) / size
            dx.append(
                [
                    stats.r
                    * (
                        a[i]
                        + mean_a
                        + z_weight * (z[i] * mean_az + mean_z * (mean_az + z[i] * mean_a))
                    )
                    for i in range(size)
                ]
            )
            dgamma = [dgamma[j] + gs[j] * (z[j] + stats.unit) for j in range(size)]
            dbeta = [dbeta[j] + gs[j] for j in range(size)]
        return RowScales(y, dx, dgamma, dbeta)


def jacobian_scales(norm: RowNorm, row: np.ndarray, gamma: np.ndarray, eps: float) -> list:
    """S of J_ij: |gamma_i| r (delta_ij + 1/D + |z_i z_j| / D) (no z term for CenterNorm)."""
    with mpmath.workdps(SCALE_DPS):
        stats = row_statistics(norm, row, eps)
        size = len(stats.z)
        z = [abs(t) for t in stats.z] if norm.normalized else [mpmath.mpf(0)] * size
        gm = [abs(mp(t)) for t in gamma]
        return [
            [
                gm[i] * stats.r * ((1 if i == j else 0) + mpmath.mpf(1) / size + z[i] * z[j] / size)
                for j in range(size)
            ]
            for i in range(size)
        ]


# --------------------------------------------------------------------------------------
# Drawn cases: dtype-independent recipes, realized per dtype
# --------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Rows:
    """Input rows: plain values, or (``nearly_constant``) ``(base, k_1, ..., k_D)`` per row,
    realized as ``base + k_j * ulp(base)`` in the dtype at hand."""

    values: tuple[tuple[float, ...], ...]
    nearly_constant: bool = False

    def realize(self, dtype: np.dtype) -> np.ndarray:
        if not self.nearly_constant:
            return realize(self.values, dtype)
        rows = []
        for base, *offsets in self.values:
            start = float(realize(base, dtype))
            spacing = float(ulp(start, dtype))
            rows.append([start + k * spacing for k in offsets])
        return realize(rows, dtype)


@dataclass(frozen=True)
class Case:
    """A row-norm input: x (N, D), g (N, D), gamma and beta (D,), eps."""

    x: Rows
    g: tuple[tuple[float, ...], ...]
    gamma: tuple[float, ...]
    beta: tuple[float, ...]
    eps: float
    with_beta: bool = True

    def realize(self, norm: RowNorm, dtype: np.dtype) -> tuple[Any, ...]:
        """``(x, g, gamma, beta, eps)`` for ``norm`` in ``dtype`` (beta None for an RMSNorm
        case without beta); eps = 0 becomes FALLBACK_EPS where a row would be 0/0."""
        x = self.x.realize(dtype)
        assume(x.shape[1] >= norm.min_dim)
        eps = self.eps
        if eps == 0 and any(norm.degenerate(row) for row in x):
            eps = FALLBACK_EPS
        beta = realize(self.beta, dtype) if self.with_beta or norm is not RMSNORM else None
        return x, realize(self.g, dtype), realize(self.gamma, dtype), beta, eps


def elements() -> st.SearchStrategy[float]:
    return st.one_of(
        st.sampled_from(SPECIAL_VALUES), st.floats(allow_nan=False, allow_infinity=False)
    )


def vectors(length: int) -> st.SearchStrategy[tuple[float, ...]]:
    return st.lists(elements(), min_size=length, max_size=length).map(tuple)


def matrices(rows: int, columns: int) -> st.SearchStrategy[tuple[tuple[float, ...], ...]]:
    return st.lists(vectors(columns), min_size=rows, max_size=rows).map(tuple)


@st.composite
def row_cases(draw: st.DrawFn) -> Case:
    rows = draw(st.integers(1, MAX_ROWS))
    dim = draw(st.integers(1, MAX_DIM))
    if draw(st.booleans()):
        offsets = st.lists(st.integers(-4, 4), min_size=dim, max_size=dim)
        x = Rows(
            tuple((draw(elements()), *draw(offsets)) for _ in range(rows)),
            nearly_constant=True,
        )
    else:
        x = Rows(draw(matrices(rows, dim)))
    return Case(
        x=x,
        g=draw(matrices(rows, dim)),
        gamma=draw(vectors(dim)),
        beta=draw(vectors(dim)),
        eps=draw(st.sampled_from(EPSILONS)),
        with_beta=draw(st.booleans()),
    )


def _pattern(values: Sequence[float], length: int) -> tuple[float, ...]:
    return tuple(values[i % len(values)] for i in range(length))


#: gamma with a zero and negative entries; g and beta of mixed signs.
GAMMA_PATTERN = (1.0, -2.0, 0.0, 0.5, 3.0, -0.25)
G_PATTERN = (1.0, -0.5, 2.0, 0.0, -3.0, 0.75, 1.5)
BETA_PATTERN = (0.0, 0.5, -1.0, 2.0)


def pinned(
    x: Sequence[Sequence[float]],
    eps: float,
    gamma: Sequence[float] | None = None,
    beta: Sequence[float] | None = None,
) -> Case:
    """A pinned row-norm case with the default gamma, beta and g patterns."""
    rows, dim = len(x), len(x[0])
    return Case(
        x=Rows(tuple(tuple(row) for row in x)),
        g=tuple(_pattern(G_PATTERN[i:] + G_PATTERN[:i], dim) for i in range(rows)),
        gamma=tuple(gamma) if gamma is not None else _pattern(GAMMA_PATTERN, dim),
        beta=tuple(beta) if beta is not None else _pattern(BETA_PATTERN, dim),
        eps=eps,
    )


TINY = 2.0**-24  # the smallest float16 subnormal
PINNED_CASES = (
    # Constant rows (zero variance) with eps > 0: y = beta, dx = (a - mean a) / sqrt(eps).
    pinned([[3.0] * 5, [-2.5] * 5], 1e-5),
    pinned([[0.0] * 4, [65504.0] * 4], 1e-12),
    # Variance near eps: var(1 + k 1e-3, k = 0..5) = 2.9e-6 against eps = 1e-6.
    pinned([[1 + k * 1e-3 for k in range(6)]], 1e-6),
    # float16's largest value and the next one below it.
    pinned([[65504.0, 65472.0, 65504.0, 65472.0], [65504.0, -65504.0, 65472.0, -65472.0]], 0.0),
    pinned([[65504.0, 65472.0, 65472.0]], 1e-3, gamma=[65504.0, -65504.0, 1.0]),
    # The smallest float16 subnormal (eps = 0: z = +-1 from a variance of 2^-50).
    pinned([[TINY, 0.0, 0.0, TINY], [TINY, -TINY, 0.0, 2 * TINY]], 0.0),
    pinned([[TINY, 0.0, -TINY]], 1e-12),
    # Rows of +-256 (256^2 = 65536 is inf in half).
    pinned([[256.0, -256.0, 256.0, -256.0], [256.0, 256.0, -256.0, 256.0]], 1e-5),
    # D = 1 (LayerNorm: y = beta, dx = 0; RMSNorm: z = x / sqrt(x^2 + eps)) and D = 2.
    pinned([[3.0], [-1.0], [0.0]], 1e-5),
    pinned([[1.0, 3.0], [0.0, 65504.0], [-TINY, TINY]], 0.0),
)


@dataclass(frozen=True)
class WeightCase:
    """A WeightNorm input: x (N, D), g (N, O), v (O, D), gamma (O,), eps."""

    x: tuple[tuple[float, ...], ...]
    g: tuple[tuple[float, ...], ...]
    v: tuple[tuple[float, ...], ...]
    gamma: tuple[float, ...]
    eps: float

    def realize(self, dtype: np.dtype) -> tuple[Any, ...]:
        v = realize(self.v, dtype)
        eps = self.eps
        if eps == 0 and not np.all(np.any(v != 0, axis=1)):
            eps = FALLBACK_EPS
        return realize(self.x, dtype), realize(self.g, dtype), v, realize(self.gamma, dtype), eps


@st.composite
def weight_cases(draw: st.DrawFn) -> WeightCase:
    rows = draw(st.integers(1, MAX_ROWS))
    dim = draw(st.integers(1, MAX_DIM))
    outputs = draw(st.integers(1, MAX_OUTPUTS))
    return WeightCase(
        x=draw(matrices(rows, dim)),
        g=draw(matrices(rows, outputs)),
        v=draw(matrices(outputs, dim)),
        gamma=draw(vectors(outputs)),
        eps=draw(st.sampled_from(EPSILONS)),
    )


PINNED_WEIGHT_CASES = (
    # A zero v_i with eps > 0 (W_i = 0), and a v_i of float16's largest values.
    WeightCase(
        x=((1.0, -2.0, 3.0), (65504.0, 65472.0, -65504.0)),
        g=((1.0, -0.5), (2.0, 0.25)),
        v=((0.0, 0.0, 0.0), (65504.0, 65504.0, 65472.0)),
        gamma=(2.0, -65504.0),
        eps=1e-5,
    ),
    # Subnormal halves, eps = 0: W_i = gamma_i v_i / |v_i|.
    WeightCase(
        x=((TINY, 256.0), (-256.0, 1.0)),
        g=((1.0,), (-3.0,)),
        v=((TINY, -TINY),),
        gamma=(0.5,),
        eps=0.0,
    ),
    # One feature, eps comparable to |v|^2, a zero gamma.
    WeightCase(
        x=((3.0,), (-1.0,), (0.0,)),
        g=((1.0, 2.0), (0.5, -1.0), (4.0, 0.0)),
        v=((1e-3,), (-2.0,)),
        gamma=(0.0, 1.0),
        eps=1e-6,
    ),
)


def weight_scales(
    x: np.ndarray, g: np.ndarray, v: np.ndarray, gamma: np.ndarray, eps: float
) -> dict[str, list]:
    """S for WeightNorm's y, dx, dv, dgamma and W (as nested lists of mpf)."""
    with mpmath.workdps(SCALE_DPS):
        xs = [[abs(mp(t)) for t in row] for row in x]
        gs = [[abs(mp(t)) for t in row] for row in g]
        vs = [[mp(t) for t in row] for row in v]
        r = [1 / mpmath.sqrt(mpmath.fsum(row, squared=True) + mpmath.mpf(eps)) for row in vs]
        w = [
            [abs(mp(gm) * r_i * t) for t in row] for gm, r_i, row in zip(gamma, r, vs, strict=True)
        ]
        outputs, dim = len(vs), len(x[0])
        y = [
            [mpmath.fsum(xr[j] * w[i][j] for j in range(dim)) for i in range(outputs)] for xr in xs
        ]
        dx = [
            [mpmath.fsum(gr[i] * w[i][j] for i in range(outputs)) for j in range(dim)] for gr in gs
        ]
        a = [
            [mpmath.fsum(gr[i] * xr[j] for gr, xr in zip(gs, xs, strict=True)) for j in range(dim)]
            for i in range(outputs)
        ]
        av = [mpmath.fsum(a[i][j] * abs(vs[i][j]) for j in range(dim)) for i in range(outputs)]
        dv = [
            [
                abs(mp(gamma[i])) * r[i] * (a[i][j] + abs(vs[i][j]) * r[i] ** 2 * av[i])
                for j in range(dim)
            ]
            for i in range(outputs)
        ]
        dgamma = [r[i] * av[i] for i in range(outputs)]
        return {"y": y, "dx": dx, "dv": dv, "dgamma": dgamma, "W": w}


def weight_plain_length(quantity: str, rows: int, dim: int, outputs: int) -> int:
    """n for WeightNorm's outputs (BLAS products, every dtype)."""
    return {"y": dim, "dx": outputs, "dv": rows + dim, "dgamma": rows + dim, "W": 0}[quantity]


# --------------------------------------------------------------------------------------
# 1. Against the references: every module, dtype and quantity
# --------------------------------------------------------------------------------------

QUANTITIES = ("forward", "vjp", "jacobian")


def check_row_norm(
    norm: RowNorm,
    dtype: np.dtype,
    quantity: str,
    x: np.ndarray,
    g: np.ndarray,
    gamma: np.ndarray,
    beta: np.ndarray | None,
    eps: float,
) -> None:
    """One quantity of a row norm at rows x against the reference, within the bound."""
    rows, dim = x.shape
    params = (gamma, beta, *norm.tail(eps))
    what = f"{norm.name}"
    if quantity == "forward":
        scales = row_scales(norm, x, g, gamma, beta, eps)
        y = call(norm.kernel.forward, x, *params)
        exact = norm.reference("forward")(x, *params)
        check_all(
            f"{what}.forward y", y, exact, dtype, plain_length(dtype, "y", rows, dim), scales.y
        )
    elif quantity == "vjp":
        scales = row_scales(norm, x, g, gamma, beta, eps)
        dx, dgamma, dbeta = call(norm.kernel.vjp, x, g, *params)
        exact_dx, exact_dgamma, exact_dbeta = norm.reference("vjp")(x, g, *params)
        n = plain_length(dtype, "dx", rows, dim)
        check_all(f"{what}.vjp dx", dx, exact_dx, dtype, n, scales.dx)
        n = plain_length(dtype, "dgamma", rows, dim)
        check_all(f"{what}.vjp dgamma", dgamma, exact_dgamma, dtype, n, scales.dgamma)
        if beta is None:
            assert dbeta is None, f"{what}.vjp: dbeta must be None without beta, got {dbeta!r}"
        else:
            check_all(f"{what}.vjp dbeta", dbeta, exact_dbeta, dtype, n, scales.dbeta)
    else:
        n = plain_length(dtype, "J", rows, dim)
        for row in x:
            jac = call(norm.kernel.jacobian, row, *params)
            exact = norm.reference("jacobian")(row, *params)
            scales = jacobian_scales(norm, row, gamma, eps)
            check_all(f"{what}.jacobian at x = {row.tolist()}", jac, exact, dtype, n, scales)


def _with_pinned_examples(cases: Sequence[Any]) -> Callable[[Callable], Callable]:
    def decorate(test: Callable) -> Callable:
        for case in reversed(cases):
            test = example(case=case)(test)
        return test

    return decorate


@pytest.mark.parametrize("quantity", QUANTITIES)
@pytest.mark.parametrize("dtype", DTYPES, ids=DTYPE_IDS)
@pytest.mark.parametrize("norm", ROW_NORMS, ids=ROW_NORM_IDS)
@settings(max_examples=EXAMPLES)
@_with_pinned_examples(PINNED_CASES)
@given(case=row_cases())
def test_row_norm_matches_reference(norm, dtype, quantity, case):
    x, g, gamma, beta, eps = case.realize(norm, dtype)
    check_row_norm(norm, dtype, quantity, x, g, gamma, beta, eps)


def check_weightnorm(
    dtype: np.dtype,
    quantity: str,
    x: np.ndarray,
    g: np.ndarray,
    v: np.ndarray,
    gamma: np.ndarray,
    eps: float,
) -> None:
    rows, dim = x.shape
    outputs = v.shape[0]
    scales = weight_scales(x, g, v, gamma, eps)

    def n(what: str) -> int:
        return weight_plain_length(what, rows, dim, outputs)

    if quantity == "forward":
        y = call(weightnorm.forward, x, v, gamma, eps)
        exact = reference_norms.weightnorm_forward(x, v, gamma, eps)
        check_all("weightnorm.forward y", y, exact, dtype, n("y"), scales["y"])
    elif quantity == "vjp":
        dx, dv, dgamma = call(weightnorm.vjp, x, g, v, gamma, eps)
        exact_dx, exact_dv, exact_dgamma = reference_norms.weightnorm_vjp(x, g, v, gamma, eps)
        check_all("weightnorm.vjp dx", dx, exact_dx, dtype, n("dx"), scales["dx"])
        check_all("weightnorm.vjp dv", dv, exact_dv, dtype, n("dv"), scales["dv"])
        check_all(
            "weightnorm.vjp dgamma", dgamma, exact_dgamma, dtype, n("dgamma"), scales["dgamma"]
        )
    else:
        w = call(weightnorm.jacobian, x[0], v, gamma, eps)
        exact = reference_norms.weightnorm_jacobian(x[0], v, gamma, eps)
        check_all("weightnorm.jacobian W", w, exact, dtype, n("W"), scales["W"])


@pytest.mark.parametrize("quantity", QUANTITIES)
@pytest.mark.parametrize("dtype", DTYPES, ids=DTYPE_IDS)
@settings(max_examples=EXAMPLES)
@_with_pinned_examples(PINNED_WEIGHT_CASES)
@given(case=weight_cases())
def test_weightnorm_matches_reference(dtype, quantity, case):
    x, g, v, gamma, eps = case.realize(dtype)
    check_weightnorm(dtype, quantity, x, g, v, gamma, eps)


# --------------------------------------------------------------------------------------
# 2. Large rows: the accuracy of the row sums
# --------------------------------------------------------------------------------------


def large_rows(dtype: np.dtype) -> tuple[np.ndarray, ...]:
    """Two rows of D = 8192: 60000 + k * spacing (k in -3..3; the spacing of the dtype at
    60000: 2^-37, 2^-8, 32) and N(0, 1) values; g, gamma (with negatives), beta N(0, 1)."""
    rng = np.random.default_rng(8192)
    spacing = float(ulp(LARGE_BASE, dtype))
    nearly_constant = LARGE_BASE + spacing * rng.integers(
        -LARGE_OFFSETS, LARGE_OFFSETS + 1, LARGE_DIM
    )
    x = np.stack([nearly_constant, rng.standard_normal(LARGE_DIM)]).astype(dtype)
    g = rng.standard_normal((2, LARGE_DIM)).astype(dtype)
    gamma = rng.standard_normal(LARGE_DIM).astype(dtype)
    beta = rng.standard_normal(LARGE_DIM).astype(dtype)
    return x, g, gamma, beta


@pytest.mark.parametrize("quantity", ("forward", "vjp"))
@pytest.mark.parametrize("dtype", DTYPES, ids=DTYPE_IDS)
@pytest.mark.parametrize("norm", ROW_NORMS, ids=ROW_NORM_IDS)
def test_large_rows_match_reference(norm, dtype, quantity):
    x, g, gamma, beta = large_rows(dtype)
    eps = 1e-5
    check_row_norm(norm, dtype, quantity, x, g, gamma, beta, eps)


# --------------------------------------------------------------------------------------
# 3. Jacobian and VJP agree: J^T g = dx
# --------------------------------------------------------------------------------------


def check_transpose_product(
    what: str,
    jac: np.ndarray,
    exact_jac: list,
    jac_scales: list,
    n_jac: int,
    dx: np.ndarray,
    exact_dx: list,
    dx_scales: list,
    n_dx: int,
    g: np.ndarray,
    dtype: np.dtype,
) -> None:
    """|(J^T g)_j - dx_j| <= sum_i |g_i| E_J(i, j) + (rows of J) 2^-53 sum_i |g_i J_ij|
    + E_dx(j): both sides are within their bounds of the exact dx_j = sum_i g_i J_ij, and the
    float64 product J^T g adds at most its plain-sum error."""
    with np.errstate(over="ignore", invalid="ignore"):  # overflowed columns are skipped
        product = jac.astype(np.float64).T @ g.astype(np.float64)
    outputs = jac.shape[0]
    with mpmath.workdps(SCALE_DPS):
        for j in range(jac.shape[1]):
            if not (np.all(np.isfinite(jac[:, j])) and np.isfinite(dx[j])):
                continue  # an overflow: the reference tests judge it
            bound = allowed(exact_dx[j], dtype, n_dx, dx_scales[j])
            magnitude = mpmath.mpf(0)
            for i in range(outputs):
                gi = abs(mp(g[i]))
                bound += gi * allowed(exact_jac[i][j], dtype, n_jac, jac_scales[i][j])
                magnitude += gi * abs(mp(jac[i, j]))
            bound += outputs * mpmath.mpf(UNIT_FLOAT64) * magnitude
            difference = abs(mp(product[j]) - mp(dx[j]))
            assert difference <= bound, (
                f"{what} [{dtype}] at index {j}: (J^T g) = {product[j]!r}, dx = {dx[j]!r}: "
                f"|difference| = {mpmath.nstr(difference, 4)} > {mpmath.nstr(bound, 4)}"
            )


@pytest.mark.parametrize("dtype", DTYPES, ids=DTYPE_IDS)
@pytest.mark.parametrize("norm", ROW_NORMS, ids=ROW_NORM_IDS)
@settings(max_examples=FEW_EXAMPLES)
@_with_pinned_examples(PINNED_CASES)
@given(case=row_cases())
def test_row_norm_jacobian_transpose_times_g_is_the_vjp(norm, dtype, case):
    x, g, gamma, beta, eps = case.realize(norm, dtype)
    row, g_row = x[0], g[0]
    params = (gamma, beta, *norm.tail(eps))
    jac = call(norm.kernel.jacobian, row, *params)
    dx = call(norm.kernel.vjp, row, g_row, *params)[0]
    exact_jac = norm.reference("jacobian")(row, *params)
    exact_dx = norm.reference("vjp")(row, g_row, *params)[0][0]
    dim = row.size
    check_transpose_product(
        f"{norm.name}: J^T g against dx at x = {row.tolist()}, g = {g_row.tolist()}",
        jac,
        exact_jac,
        jacobian_scales(norm, row, gamma, eps),
        plain_length(dtype, "J", 1, dim),
        dx,
        exact_dx,
        row_scales(norm, x[:1], g[:1], gamma, beta, eps).dx[0],
        plain_length(dtype, "dx", 1, dim),
        g_row,
        dtype,
    )


@pytest.mark.parametrize("dtype", DTYPES, ids=DTYPE_IDS)
@settings(max_examples=FEW_EXAMPLES)
@_with_pinned_examples(PINNED_WEIGHT_CASES)
@given(case=weight_cases())
def test_weightnorm_jacobian_transpose_times_g_is_the_vjp(dtype, case):
    x, g, v, gamma, eps = case.realize(dtype)
    row, g_row = x[0], g[0]
    w = call(weightnorm.jacobian, row, v, gamma, eps)
    dx = call(weightnorm.vjp, row, g_row, v, gamma, eps)[0]
    exact_w = reference_norms.weightnorm_jacobian(row, v, gamma, eps)
    exact_dx = reference_norms.weightnorm_vjp(row, g_row, v, gamma, eps)[0][0]
    scales = weight_scales(x[:1], g[:1], v, gamma, eps)
    dim, outputs = row.size, v.shape[0]
    check_transpose_product(
        f"weightnorm: W^T g against dx at x = {row.tolist()}, g = {g_row.tolist()}",
        w,
        exact_w,
        scales["W"],
        weight_plain_length("W", 1, dim, outputs),
        dx,
        exact_dx,
        scales["dx"][0],
        weight_plain_length("dx", 1, dim, outputs),
        g_row,
        dtype,
    )


# --------------------------------------------------------------------------------------
# 4. float16 mixed mode: no spurious overflow, inf exactly where the exact value rounds to it
# --------------------------------------------------------------------------------------

#: +-65504 alternating over D = 1024: var = 65504^2 (4.3e9, inf in half), z = +-1.
ALTERNATING_DIM = 1024


def _alternating(value: float, dim: int, dtype: np.dtype = HALF) -> np.ndarray:
    return np.where(np.arange(dim) % 2 == 0, value, -value).astype(dtype)


@pytest.mark.parametrize("norm", (LAYERNORM, RMSNORM), ids=("layernorm", "rmsnorm"))
def test_float16_extreme_alternating_row_normalizes_to_plus_minus_one(norm):
    x = _alternating(65504.0, ALTERNATING_DIM)[np.newaxis, :]
    gamma, beta = np.ones(ALTERNATING_DIM, HALF), np.zeros(ALTERNATING_DIM, HALF)
    y = call(norm.kernel.forward, x, gamma, beta, 1e-5)
    expected = _alternating(1.0, ALTERNATING_DIM)
    assert_same_values(f"{norm.name}.forward of +-65504", y[0], expected)
    g = np.random.default_rng(1024).standard_normal((1, ALTERNATING_DIM)).astype(HALF)
    for quantity in QUANTITIES[:2]:
        check_row_norm(norm, HALF, quantity, x, g, gamma, beta, 1e-5)


def test_float16_centernorm_of_extreme_row_overflows_exactly():
    """D/(D-1) * 65504 = 65568.03 >= 65520: the exact value rounds to inf, and so must y."""
    x = _alternating(65504.0, ALTERNATING_DIM)[np.newaxis, :]
    gamma, beta = np.ones(ALTERNATING_DIM, HALF), np.zeros(ALTERNATING_DIM, HALF)
    y = call(centernorm.forward, x, gamma, beta)
    assert_same_values("centernorm.forward of +-65504", y[0], _alternating(np.inf, ALTERNATING_DIM))


def test_float16_weightnorm_of_extreme_v_does_not_overflow():
    """|v_i|^2 = 1024 * 65504^2 is far beyond half; W_i = gamma_i / 32 and y = 1024 / 32."""
    v = np.full((2, ALTERNATING_DIM), 65504.0, HALF)
    v[1] = -v[1]
    gamma = np.array([1.0, 2.0], HALF)
    x = np.ones((1, ALTERNATING_DIM), HALF)
    assert_same_values(
        "weightnorm.jacobian",
        call(weightnorm.jacobian, x[0], v, gamma)[:, 0],
        np.array([1 / 32, -2 / 32], HALF),
    )
    assert_same_values(
        "weightnorm.forward",
        call(weightnorm.forward, x, v, gamma)[0],
        np.array([32.0, -64.0], HALF),
    )


#: (name, x, gamma, beta, eps): float16 LayerNorm rows whose exact y crosses 65520, the
#: least magnitude that rounds to inf. z = +-1 exactly for [-1, 1] with eps = 0, so
#: y = +-65504 + beta: beta = 16 gives 65520 (inf; -65488 finite), 16 - 2^-6 gives
#: 65519.984375 (rounds to 65504), -16 gives -65520 (-inf). [0, 0, 0, 1]: z_4 = sqrt(3).
OVERFLOW_CASES = (
    ("at_65520", [-1.0, 1.0], 65504.0, 16.0, 0.0),
    ("below_65520", [-1.0, 1.0], 65504.0, 16.0 - 2.0**-6, 0.0),
    ("at_minus_65520", [-1.0, 1.0], 65504.0, -16.0, 0.0),
    ("z_sqrt3", [0.0, 0.0, 0.0, 1.0], 65504.0, 0.0, 1e-5),
)


@pytest.mark.parametrize(
    ("x", "gamma", "beta", "eps"),
    [case[1:] for case in OVERFLOW_CASES],
    ids=[c[0] for c in OVERFLOW_CASES],
)
def test_float16_overflow_is_inf_exactly_when_the_exact_value_rounds_to_inf(x, gamma, beta, eps):
    x = np.array([x], HALF)
    dim = x.shape[1]
    gamma_ = np.full(dim, gamma, HALF)
    beta_ = np.full(dim, beta, HALF)
    y = call(layernorm.forward, x, gamma_, beta_, eps)
    exact = reference_norms.layernorm_forward(x, gamma_, beta_, eps)[0]
    for j in range(dim):
        rounded = round_to_dtype(exact[j], HALF)
        assert (np.isinf(y[0, j]) and y[0, j] == rounded) or (
            np.isfinite(y[0, j]) and np.isfinite(rounded)
        ), f"layernorm.forward [float16] at index (0, {j}): got {y[0, j]!r}, expected {rounded!r}"
    g = np.full_like(x, 65504.0)
    g[0, 0] = -1.0
    for quantity in QUANTITIES[:2]:
        check_row_norm(LAYERNORM, HALF, quantity, x, g, gamma_, beta_, eps)


def test_float16_overflow_gives_inf_without_a_warning():
    """A float16 result that overflows is inf, as a float32 one is, without a RuntimeWarning
    (the test suite turns warnings into errors; the float32 path emits none)."""
    x = np.array([[-1.0, 1.0]], HALF)
    gamma, beta = np.full(2, 65504.0, HALF), np.full(2, 16.0, HALF)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        y = layernorm.forward(x, gamma, beta, 0.0)
    assert_same_values("layernorm.forward", y[0], np.array([-65488.0, np.inf], HALF))


# --------------------------------------------------------------------------------------
# 5. Strict fp16: the pinned overflow thresholds of pure half arithmetic
# --------------------------------------------------------------------------------------
#
# All values are powers of two, D = 2^m with m <= 11: every partial sum j * 2^k (j <= 2^m)
# has at most 11 significant bits, so it is exact in half until it reaches 2^16 = 65536,
# which is >= 65520 and rounds to inf. The divisions by D = 2^m are exact.
#
# * LayerNorm, constant row c = 2^k: sum(x) = 2^(k+m) is inf iff k + m >= 16; then the mean
#   is inf, d = c - inf = -inf, var = inf, r = 1/sqrt(inf) = 0 and y = (-inf * gamma) * 0 =
#   NaN. Otherwise the mean is c, d = 0, var = 0, r = 1/sqrt(eps) and y = 0 + beta = beta.
# * LayerNorm, alternating row +-2^k (mean 0): sum(d^2) = 2^(2k+m) is inf iff 2k + m >= 16;
#   then r = 0 and y = beta (wrong: the exact y is +-gamma + beta). Otherwise var = 2^(2k),
#   eps (under 2^-11 * 2^(2k) for the k used) is absorbed, r = 2^-k, y = +-gamma + beta.
# * RMSNorm, constant row 2^k: sum(x^2) = 2^(2k+m), the same threshold 2k + m >= 16.
# * eps: half's smallest subnormal is 2^-24, and 2^-25 is the tie between 0 and 2^-24, which
#   rounds to even, 0. So eps <= 2^-25 is 0 in half: a constant row has var + eps = 0,
#   r = 1/0 = inf and y = (0 * gamma) * inf = NaN. Any eps above 2^-25 (and <= 2^-24)
#   rounds to 2^-24: r = 2^12 and y = beta.
# Mixed mode computes all of these in float64: y = beta, +-gamma + beta, gamma + beta.

STRICT_GAMMA, STRICT_BETA, STRICT_EPS = 1.0, 0.5, 1e-5


def strict_and_mixed(norm: RowNorm, x: np.ndarray, eps: float = STRICT_EPS):
    dim = x.size
    gamma, beta = np.full(dim, STRICT_GAMMA, HALF), np.full(dim, STRICT_BETA, HALF)
    params = (gamma, beta, *norm.tail(eps))
    strict = call(norm.kernel.forward, x, *params, strict_fp16=True)
    mixed = call(norm.kernel.forward, x, *params)
    return strict, mixed


def _beta(dim: int) -> np.ndarray:
    return np.full(dim, STRICT_BETA, HALF)


@pytest.mark.parametrize(("k", "m", "overflows"), CONSTANT_SUM_THRESHOLDS)
def test_strict_layernorm_constant_row_is_nan_exactly_when_its_sum_overflows(k, m, overflows):
    dim = 2**m
    strict, mixed = strict_and_mixed(LAYERNORM, np.full(dim, 2.0**k, HALF))
    expected = np.full(dim, np.nan, HALF) if overflows else _beta(dim)
    assert_same_values(f"strict layernorm of {dim} x 2^{k}", strict, expected)
    assert_same_values(f"mixed layernorm of {dim} x 2^{k}", mixed, _beta(dim))


@pytest.mark.parametrize(("k", "m", "collapses"), ALTERNATING_THRESHOLDS)
def test_strict_layernorm_alternating_row_collapses_exactly_when_its_square_sum_overflows(
    k, m, collapses
):
    dim = 2**m
    signs = _alternating(1.0, dim)
    strict, mixed = strict_and_mixed(LAYERNORM, _alternating(2.0**k, dim))
    correct = (STRICT_GAMMA * signs + STRICT_BETA).astype(HALF)
    expected = _beta(dim) if collapses else correct
    assert_same_values(f"strict layernorm of +-2^{k}, D = {dim}", strict, expected)
    assert_same_values(f"mixed layernorm of +-2^{k}, D = {dim}", mixed, correct)


#: (k, m, collapses): constant RMSNorm rows 2^k of D = 2^m, on both sides of 2k + m = 16.
RMS_THRESHOLDS = [
    (7, 1, False),
    (8, 0, True),
    (7, 2, True),
    (4, 7, False),
    (4, 8, True),
    (2, 11, False),
    (3, 10, True),
]


@pytest.mark.parametrize(("k", "m", "collapses"), RMS_THRESHOLDS)
def test_strict_rmsnorm_constant_row_collapses_exactly_when_its_square_sum_overflows(
    k, m, collapses
):
    dim = 2**m
    strict, mixed = strict_and_mixed(RMSNORM, np.full(dim, 2.0**k, HALF), eps=1e-6)
    correct = np.full(dim, STRICT_GAMMA + STRICT_BETA, HALF)
    assert_same_values(
        f"strict rmsnorm of {dim} x 2^{k}", strict, _beta(dim) if collapses else correct
    )
    assert_same_values(f"mixed rmsnorm of {dim} x 2^{k}", mixed, correct)


#: (eps, is_zero_in_half): 2^-25 is the tie that rounds to 0 (the last eps that does); the
#: next float64 above it rounds to 2^-24 (the first that does not), as does 2^-24 itself;
#: 1e-8 (0.17 of the smallest subnormal) and 0 are 0 in half.
EPS_THRESHOLDS = [
    (0.0, True),
    (1e-8, True),
    (2.0**-25, True),
    (math.nextafter(2.0**-25, 1.0), False),
    (2.0**-24, False),
]


@pytest.mark.parametrize(("eps", "is_zero"), EPS_THRESHOLDS)
@pytest.mark.parametrize(
    ("norm", "value"), [(LAYERNORM, 3.0), (RMSNORM, 0.0)], ids=("layernorm", "rmsnorm")
)
def test_strict_eps_below_half_the_smallest_subnormal_is_zero(norm, value, eps, is_zero):
    dim = 8
    x = np.full(dim, value, HALF)
    strict, mixed = strict_and_mixed(norm, x, eps=eps)
    expected = np.full(dim, np.nan, HALF) if is_zero else _beta(dim)
    assert_same_values(f"strict {norm.name} of a constant row, eps = {eps!r}", strict, expected)
    mixed_expected = np.full(dim, np.nan, HALF) if eps == 0 else _beta(dim)
    assert_same_values(f"mixed {norm.name} of a constant row, eps = {eps!r}", mixed, mixed_expected)


# --------------------------------------------------------------------------------------
# Zero variance without eps: 0/0 is NaN, not a crash (kernel docstrings; SPEC "Bad input")
# --------------------------------------------------------------------------------------


@pytest.mark.parametrize(("dtype", "strict"), DTYPE_MODES, ids=DTYPE_MODE_IDS)
def test_zero_variance_without_eps_is_nan(dtype, strict):
    mode = {"strict_fp16": True} if strict else {}
    dim = 4
    x = np.array([[2.0] * dim, [1.0, 2.0, 3.0, 4.0]], dtype)
    zero = np.array([[0.0] * dim, [1.0, 2.0, 3.0, 4.0]], dtype)
    gamma, beta = np.ones(dim, dtype), np.zeros(dim, dtype)
    for norm, rows in ((LAYERNORM, x), (RMSNORM, zero)):
        y = call(norm.kernel.forward, rows, gamma, beta, 0.0, **mode)
        assert_same_values(f"{norm.name}.forward, 0/0 row", y[0], np.full(dim, np.nan, dtype))
        assert np.all(np.isfinite(y[1])), f"{norm.name}.forward: the other row {y[1]!r}"
        dx = call(norm.kernel.vjp, rows, rows, gamma, beta, 0.0, **mode)[0]
        assert np.all(np.isnan(dx[0])), f"{norm.name}.vjp dx of the 0/0 row: {dx[0]!r}"
    v = np.array([[0.0] * dim, [1.0, 2.0, 3.0, 4.0]], dtype)
    w = call(weightnorm.jacobian, x[1], v, gamma[:2], 0.0, **mode)
    assert_same_values("weightnorm W of a zero v_i", w[0], np.full(dim, np.nan, dtype))


# --------------------------------------------------------------------------------------
# 6. Bad input (SPEC "Bad input")
# --------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Call:
    """A kernel call by argument name, so that one argument at a time can be spoiled."""

    name: str
    function: Callable[..., Any]
    arguments: tuple[str, ...]
    keywords: dict[str, Any] = field(default_factory=dict)

    def __call__(self, values: dict[str, Any], **changes: Any) -> Any:
        merged = {**values, **changes}
        return call(self.function, *(merged[a] for a in self.arguments), **self.keywords)


def row_norm_calls(norm: RowNorm) -> list[Call]:
    params = ("gamma", "beta", *(("eps",) if norm.has_eps else ()))
    return [
        Call(f"{norm.name}.forward", norm.kernel.forward, ("x", *params)),
        Call(f"{norm.name}.vjp", norm.kernel.vjp, ("x", "g", *params)),
        Call(f"{norm.name}.jacobian", norm.kernel.jacobian, ("x0", *params)),
    ]


WEIGHT_CALLS = [
    Call("weightnorm.forward", weightnorm.forward, ("x", "v", "gamma", "eps")),
    Call("weightnorm.vjp", weightnorm.vjp, ("x", "gw", "v", "gamma", "eps")),
    Call("weightnorm.jacobian", weightnorm.jacobian, ("x0", "v", "gamma", "eps")),
]
ALL_CALLS = [c for norm in ROW_NORMS for c in row_norm_calls(norm)] + WEIGHT_CALLS
CALL_IDS = [c.name for c in ALL_CALLS]

ROWS, DIM, OUTPUTS = 3, 5, 2


def arguments(dtype: np.dtype | None = None, seed: int = 0) -> dict[str, Any]:
    """Valid arguments (float64 unless told) for every call in ``ALL_CALLS``, by name."""
    dtype = np.dtype(np.float64) if dtype is None else dtype
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((ROWS, DIM)).astype(dtype)
    return {
        "x": x,
        "x0": x[0].copy(),
        "g": rng.standard_normal((ROWS, DIM)).astype(dtype),
        "gw": rng.standard_normal((ROWS, OUTPUTS)).astype(dtype),
        "gamma": (rng.standard_normal(DIM).astype(dtype)),
        "beta": rng.standard_normal(DIM).astype(dtype),
        "v": rng.standard_normal((OUTPUTS, DIM)).astype(dtype),
        "eps": 1e-5,
    }


def weight_aware(c: Call, values: dict[str, Any]) -> dict[str, Any]:
    """WeightNorm's gamma has O entries."""
    if c.name.startswith("weightnorm"):
        return {**values, "gamma": values["gamma"][:OUTPUTS].copy()}
    return values


def array_names(c: Call) -> list[str]:
    return [a for a in c.arguments if a != "eps"]


def public_name(argument: str) -> str:
    return {"x0": "x", "gw": "g"}.get(argument, argument)


@pytest.mark.parametrize("bad_dtype", (np.int64, np.int32, np.complex128, np.bool_))
@pytest.mark.parametrize("c", ALL_CALLS, ids=CALL_IDS)
def test_unsupported_dtype_is_a_type_error_naming_the_argument(c, bad_dtype):
    values = weight_aware(c, arguments())
    for argument in array_names(c):
        spoiled = values[argument].astype(bad_dtype)
        with pytest.raises(TypeError, match=rf"^{public_name(argument)}\b"):
            c(values, **{argument: spoiled})


@pytest.mark.parametrize("c", ALL_CALLS, ids=CALL_IDS)
def test_mismatched_parameter_shape_is_a_value_error_naming_it(c):
    values = weight_aware(c, arguments())
    for argument in array_names(c):
        if argument in ("x", "x0"):
            continue
        wrong = values[argument]
        wrong = np.concatenate([wrong, wrong[..., :1]], axis=-1) if wrong.ndim else wrong
        with pytest.raises(ValueError, match=rf"^{public_name(argument)}\b"):
            c(values, **{argument: wrong})


@pytest.mark.parametrize("c", ALL_CALLS, ids=CALL_IDS)
def test_mismatched_parameter_dtype_is_a_type_error_naming_it(c):
    values = weight_aware(c, arguments())
    for argument in array_names(c):
        if argument in ("x", "x0"):
            continue
        with pytest.raises(TypeError, match=rf"^{public_name(argument)}\b"):
            c(values, **{argument: values[argument].astype(np.float32)})


@pytest.mark.parametrize("eps", (-1e-5, -1.0, np.nan, np.inf, -np.inf))
@pytest.mark.parametrize("c", [c for c in ALL_CALLS if "eps" in c.arguments], ids=lambda c: c.name)
def test_bad_eps_is_a_value_error_naming_eps(c, eps):
    values = weight_aware(c, arguments())
    with pytest.raises(ValueError, match=r"^eps\b"):
        c(values, eps=eps)


@pytest.mark.parametrize("c", ALL_CALLS, ids=CALL_IDS)
def test_empty_last_axis_is_a_value_error(c):
    values = weight_aware(c, arguments())
    empty = {
        "x": values["x"][:, :0],
        "x0": values["x0"][:0],
        "g": values["g"][:, :0],
        "gamma": values["gamma"][:0] if not c.name.startswith("weightnorm") else values["gamma"],
        "beta": values["beta"][:0],
        "v": values["v"][:, :0],
    }
    with pytest.raises(ValueError, match=r"^(x|v)\b"):
        c(values, **empty)


@pytest.mark.parametrize("c", row_norm_calls(CENTERNORM), ids=lambda c: c.name)
def test_centernorm_rejects_one_feature(c):
    values = arguments()
    one = {
        "x": values["x"][:, :1],
        "x0": values["x0"][:1],
        "g": values["g"][:, :1],
        "gamma": values["gamma"][:1],
        "beta": values["beta"][:1],
    }
    with pytest.raises(ValueError, match=r"^x\b.*D >= 2"):
        c(values, **one)


@pytest.mark.parametrize("dtype", (np.float32, np.float64))
@pytest.mark.parametrize("c", ALL_CALLS, ids=CALL_IDS)
def test_strict_fp16_is_for_float16_only(c, dtype):
    values = weight_aware(c, arguments(np.dtype(dtype)))
    strict = Call(c.name, c.function, c.arguments, {"strict_fp16": True})
    with pytest.raises(ValueError, match=r"^strict_fp16\b"):
        strict(values)


def outputs_of(result: Any) -> list[np.ndarray]:
    if isinstance(result, tuple):
        return [r for r in result if r is not None]
    return [result]


@pytest.mark.parametrize("dtype", DTYPES, ids=DTYPE_IDS)
@pytest.mark.parametrize("c", ALL_CALLS, ids=CALL_IDS)
def test_non_contiguous_input_gives_the_contiguous_result(c, dtype):
    values = weight_aware(c, arguments(dtype))
    expected = outputs_of(c(values))
    strided = {}
    for argument in array_names(c):
        array = values[argument]
        if array.ndim == 2:  # a transposed view of the transposed copy
            strided[argument] = np.ascontiguousarray(array.T).T
        else:  # every other element of a doubled array
            strided[argument] = np.repeat(array, 2)[::2]
        assert not strided[argument].flags.c_contiguous or array.size <= 1
        np.testing.assert_array_equal(strided[argument], array)
    for i, (got, want) in enumerate(zip(outputs_of(c(values, **strided)), expected, strict=True)):
        assert_same_bits(f"{c.name} output {i} (non-contiguous inputs)", got, want)


@pytest.mark.parametrize(("dtype", "strict"), DTYPE_MODES, ids=DTYPE_MODE_IDS)
@pytest.mark.parametrize("c", ALL_CALLS, ids=CALL_IDS)
def test_no_kernel_writes_into_its_inputs(c, dtype, strict):
    values = weight_aware(c, arguments(dtype))
    before = {k: np.copy(v) for k, v in values.items() if isinstance(v, np.ndarray)}
    Call(c.name, c.function, c.arguments, {"strict_fp16": True} if strict else {})(values)
    for name, copy in before.items():
        assert_same_bits(f"{c.name}: input {name} after the call", values[name], copy)


@pytest.mark.parametrize("bad", (np.nan, np.inf), ids=("nan", "inf"))
@pytest.mark.parametrize("dtype", DTYPES, ids=DTYPE_IDS)
@pytest.mark.parametrize("norm", ROW_NORMS, ids=ROW_NORM_IDS)
def test_non_finite_value_stays_in_its_row(norm, dtype, bad):
    values = arguments(dtype)
    params = (values["gamma"], values["beta"], *norm.tail(values["eps"]))
    x, g = values["x"], values["g"]
    spoiled = x.copy()
    spoiled[1, 2] = bad
    clean_y = call(norm.kernel.forward, x, *params)
    clean_dx = call(norm.kernel.vjp, x, g, *params)[0]
    y = call(norm.kernel.forward, spoiled, *params)
    dx = call(norm.kernel.vjp, spoiled, g, *params)[0]
    for row in (0, 2):
        assert_same_bits(f"{norm.name}.forward row {row}", y[row], clean_y[row])
        assert_same_bits(f"{norm.name}.vjp dx row {row}", dx[row], clean_dx[row])
    if np.isnan(bad):
        assert_same_values(f"{norm.name}.forward NaN row", y[1], np.full(DIM, np.nan, dtype))
        # CenterNorm's dx = D/(D-1) (a - mean(a)) does not depend on x: it stays finite.
        nan_dx = np.full(DIM, np.nan, dtype) if norm.normalized else clean_dx[1]
        assert_same_values(f"{norm.name}.vjp dx NaN row", dx[1], nan_dx)


@pytest.mark.parametrize("bad", (np.nan, np.inf), ids=("nan", "inf"))
@pytest.mark.parametrize("dtype", DTYPES, ids=DTYPE_IDS)
def test_weightnorm_non_finite_value_stays_in_its_row(dtype, bad):
    values = weight_aware(WEIGHT_CALLS[0], arguments(dtype))
    x, gw, v, gamma = values["x"], values["gw"], values["v"], values["gamma"]
    x_spoiled, g_spoiled = x.copy(), gw.copy()
    x_spoiled[1, 2] = bad
    g_spoiled[1, 0] = bad
    clean_y = call(weightnorm.forward, x, v, gamma)
    clean_dx = call(weightnorm.vjp, x, gw, v, gamma)[0]
    y = call(weightnorm.forward, x_spoiled, v, gamma)
    dx = call(weightnorm.vjp, x, g_spoiled, v, gamma)[0]
    for row in (0, 2):
        assert_same_bits(f"weightnorm.forward row {row}", y[row], clean_y[row])
        assert_same_bits(f"weightnorm.vjp dx row {row}", dx[row], clean_dx[row])
    if np.isnan(bad):
        assert_same_values("weightnorm.forward NaN row", y[1], np.full(OUTPUTS, np.nan, dtype))
        assert_same_values("weightnorm.vjp dx NaN row", dx[1], np.full(DIM, np.nan, dtype))


@pytest.mark.parametrize("dtype", DTYPES, ids=DTYPE_IDS)
@pytest.mark.parametrize(
    "c", [c for c in ALL_CALLS if "jacobian" not in c.name], ids=lambda c: c.name
)
def test_batch_axes_are_flattened(c, dtype):
    rng = np.random.default_rng(6)
    values = weight_aware(c, arguments(dtype))
    values["x"] = rng.standard_normal((6, DIM)).astype(dtype)
    values["g"] = rng.standard_normal((6, DIM)).astype(dtype)
    values["gw"] = rng.standard_normal((6, OUTPUTS)).astype(dtype)
    flat = outputs_of(c(values))
    batched = {k: values[k].reshape(2, 3, -1) for k in ("x", "g", "gw")}
    for i, (got, want) in enumerate(zip(outputs_of(c(values, **batched)), flat, strict=True)):
        if want.shape[0] == 6:  # per-row outputs keep the batch axes
            assert got.shape == (2, 3, want.shape[1]), f"{c.name} output {i}: shape {got.shape}"
            got = got.reshape(want.shape)
        assert_same_bits(f"{c.name} output {i} ((2, 3, D) against (6, D))", got, want)


@pytest.mark.parametrize("dtype", DTYPES, ids=DTYPE_IDS)
@pytest.mark.parametrize(
    "c", [c for c in ALL_CALLS if "jacobian" not in c.name], ids=lambda c: c.name
)
def test_no_rows_give_empty_outputs_and_zero_parameter_gradients(c, dtype):
    values = weight_aware(c, arguments(dtype))
    empty = {k: values[k][:0] for k in ("x", "g", "gw")}
    result = c(values, **empty)
    if c.name.endswith("forward"):
        width = OUTPUTS if c.name.startswith("weightnorm") else DIM
        assert result.shape == (0, width) and result.dtype == dtype, f"{c.name}: {result!r}"
        return
    dx, *gradients = result
    assert dx.shape == (0, DIM) and dx.dtype == dtype, f"{c.name} dx: {dx!r}"
    for i, gradient in enumerate(gradients):
        assert gradient is not None, f"{c.name}: parameter gradient {i} is None"
        assert_same_values(f"{c.name} parameter gradient {i}", gradient, np.zeros_like(gradient))
        assert gradient.dtype == dtype, f"{c.name} parameter gradient {i}: dtype {gradient.dtype}"


# --------------------------------------------------------------------------------------
# 7. Determinism: results do not depend on the number of threads
# --------------------------------------------------------------------------------------


@pytest.mark.parametrize("dtype", DTYPES, ids=DTYPE_IDS)
@pytest.mark.parametrize(
    "c", [c for c in ALL_CALLS if c.name.endswith(("forward", "vjp"))], ids=lambda c: c.name
)
def test_results_do_not_depend_on_the_thread_count(c, dtype):
    """One thread runs the loops' serial twins, two the parallel loops (the rows, and
    WeightNorm's v, are above the grain): the same bits, parameter gradients included."""
    if numba.config.NUMBA_NUM_THREADS < 2:
        pytest.skip("Numba has a single thread here")
    rng = np.random.default_rng(7)
    rows = outputs = GRAIN // DETERMINISM_DIM + 1
    values = weight_aware(c, arguments(dtype))
    values["x"] = rng.standard_normal((rows, DETERMINISM_DIM)).astype(dtype)
    values["g"] = rng.standard_normal((rows, DETERMINISM_DIM)).astype(dtype)
    values["gw"] = rng.standard_normal((rows, outputs)).astype(dtype)
    values["gamma"] = rng.standard_normal(
        outputs if c.name.startswith("weightnorm") else DETERMINISM_DIM
    ).astype(dtype)
    values["beta"] = rng.standard_normal(DETERMINISM_DIM).astype(dtype)
    values["v"] = rng.standard_normal((outputs, DETERMINISM_DIM)).astype(dtype)
    assert_same_bits_on_1_and_2_threads(c.name, lambda: outputs_of(c(values)))


# --------------------------------------------------------------------------------------
# Regressions: keyword checks shared by every kernel (kernels/_validate.py)
# --------------------------------------------------------------------------------------

H3 = np.array([1.0, -2.0, 0.5], np.float16)


def _norm_calls(dtype=np.float64) -> list[tuple[str, Callable[..., Any]]]:
    """Every function of the four norms on small valid arguments, keywords left open."""
    x = np.array([[1.0, -2.0, 0.5], [0.25, 3.0, -1.0]], dtype)
    one = np.array([1.0, -0.5, 2.0], dtype)
    v = np.array([[1.0, 2.0, -1.0], [0.5, 0.0, 3.0]], dtype)
    gamma2 = np.array([1.5, -1.0], dtype)
    g2 = np.ones((2, 2), dtype)
    return [
        ("layernorm.forward", lambda **kw: layernorm.forward(x, one, one, **kw)),
        ("layernorm.vjp", lambda **kw: layernorm.vjp(x, x, one, one, **kw)),
        ("layernorm.jacobian", lambda **kw: layernorm.jacobian(x[0], one, one, **kw)),
        ("rmsnorm.forward", lambda **kw: rmsnorm.forward(x, one, one, **kw)),
        ("rmsnorm.vjp", lambda **kw: rmsnorm.vjp(x, x, one, None, **kw)),
        ("rmsnorm.jacobian", lambda **kw: rmsnorm.jacobian(x[0], one, **kw)),
        ("weightnorm.forward", lambda **kw: weightnorm.forward(x, v, gamma2, **kw)),
        ("weightnorm.vjp", lambda **kw: weightnorm.vjp(x, g2, v, gamma2, **kw)),
        ("weightnorm.jacobian", lambda **kw: weightnorm.jacobian(x[0], v, gamma2, **kw)),
    ]


@pytest.mark.parametrize("bad", ["no", 1, None])
def test_strict_fp16_of_another_kind_is_a_type_error(bad):
    """``strict_fp16="no"`` used to take the strict path (a non-empty string is truthy)."""
    calls = [*_norm_calls(np.float16)]
    calls.append(("centernorm.forward", lambda **kw: centernorm.forward(H3, H3, H3, **kw)))
    for name, call in calls:
        with pytest.raises(TypeError, match=r"^strict_fp16: expected True or False"):
            call(strict_fp16=bad)
            pytest.fail(f"{name}: strict_fp16={bad!r} accepted")
        call(strict_fp16=True)  # the flag itself still works


@pytest.mark.parametrize("bad", ["0.5", True, np.bool_(False), [1e-5], None])
def test_eps_of_another_kind_is_a_type_error(bad):
    """``eps="0.5"`` and ``eps=True`` used to be taken as 0.5 and 1.0."""
    for name, call in _norm_calls():
        with pytest.raises(TypeError, match=r"^eps: expected a real number"):
            call(eps=bad)
            pytest.fail(f"{name}: eps={bad!r} accepted")


def test_eps_beyond_float64_is_a_value_error():
    for name, call in _norm_calls():
        with pytest.raises(ValueError, match=r"^eps: expected a finite number"):
            call(eps=10**400)
            pytest.fail(f"{name}: eps=10**400 accepted")


def test_strict_eps_that_overflows_half_is_inf_without_a_warning():
    """Strict mode rounds eps to half: 1e5 is inf there (as half arithmetic gives), which
    used to escape as NumPy's overflow RuntimeWarning. With eps = inf the scale
    ``1/sqrt(var + eps)`` is 0: LayerNorm and RMSNorm give beta and zero gradients, and
    WeightNorm's W is 0."""
    x = np.array([[1.0, -2.0, 0.5], [0.25, 3.0, -1.0]], np.float16)
    gamma = np.array([1.0, -0.5, 2.0], np.float16)
    beta = np.array([0.5, 0.25, -1.0], np.float16)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        for module in (layernorm, rmsnorm):
            y = module.forward(x, gamma, beta, 1e5, strict_fp16=True)
            assert_same_values(f"{module.__name__} y", y, np.broadcast_to(beta, x.shape))
            dx, _, _ = module.vjp(x, x, gamma, beta, 1e5, strict_fp16=True)
            assert not dx.any(), f"{module.__name__} dx: {dx!r}"
            assert not module.jacobian(x[0], gamma, beta, 1e5, strict_fp16=True).any()
        v = np.array([[1.0, 2.0, -1.0]], np.float16)
        y = weightnorm.forward(x, v, np.ones(1, np.float16), 1e5, strict_fp16=True)
        assert not y.any(), f"weightnorm y: {y!r}"


@pytest.mark.parametrize("dtype", [np.float16, np.float32, np.float64])
def test_weightnorm_without_outputs_gives_empty_results(dtype):
    """v of shape (0, D) (O = 0) used to fail in vjp with "cannot reshape array of size 0":
    y is (N, 0), dx = g W = 0, dv (0, D), dgamma (0,) -- as forward already returned."""
    x = np.ones((2, 3), dtype)
    v, gamma = np.zeros((0, 3), dtype), np.zeros(0, dtype)
    assert weightnorm.forward(x, v, gamma).shape == (2, 0)
    dx, dv, dgamma = weightnorm.vjp(x, np.zeros((2, 0), dtype), v, gamma)
    assert_same_values("dx", dx, np.zeros((2, 3), dtype))
    assert dv.shape == (0, 3) and dgamma.shape == (0,) and dv.dtype == dgamma.dtype == dtype
    assert weightnorm.jacobian(x[0], v, gamma).shape == (0, 3)


# --------------------------------------------------------------------------------------
# float16 mixed mode: the loops on the halves' bits against the widening recipe
# --------------------------------------------------------------------------------------

#: Rows of the recipe test: several blocks of BLOCK_ROWS = 32 rows, and a partial one.
RECIPE_ROWS = 70


def _mixed_half_by_widening(norm: RowNorm, x, g, gamma, beta, eps):
    """Mixed-mode float16 as it was computed before the loops read the halves' bits: x,
    g, gamma and beta widened exactly to float32 by NumPy, the ``wide`` loops run into
    float64 buffers, every result rounded once to half by NumPy (an independent widening
    and rounding: ``kernels._f16`` is not involved)."""
    generated = norm.kernel._generated
    rows = x.reshape(-1, x.shape[-1]).astype(np.float32)
    grows = g.reshape(rows.shape).astype(np.float32)
    gamma32, beta32 = gamma.astype(np.float32), beta.astype(np.float32)
    y = np.empty(rows.shape)
    generated.forward_wide(rows, gamma32, beta32, eps, y)
    blocks = -(-rows.shape[0] // generated.BLOCK_ROWS)
    dgamma_blocks, dbeta_blocks = np.zeros((2, blocks, 1, rows.shape[1]))
    dx = np.empty(rows.shape)
    generated.vjp_wide(rows, grows, gamma32, eps, dx, dgamma_blocks, dbeta_blocks)
    with np.errstate(over="ignore"):
        return [
            value.astype(np.float16)
            for value in (
                y.reshape(x.shape),
                dx.reshape(x.shape),
                generated.combine_blocks_wide(dgamma_blocks),
                generated.combine_blocks_wide(dbeta_blocks),
            )
        ]


def _recipe_rows(rng: np.random.Generator, kind: str, shape: tuple[int, ...]) -> np.ndarray:
    """float16 rows of one kind: random, a huge mean (near overflow), nearly constant,
    constant, subnormal, every magnitude, or with inf and NaN entries."""
    if kind == "normal":
        x = rng.normal(size=shape)
    elif kind == "huge mean":
        x = 60000.0 + 32.0 * rng.integers(-4, 4, size=shape)
    elif kind == "nearly constant":
        x = 1000.0 + 0.5 * (rng.random(shape) < 0.1)
    elif kind == "constant":
        x = np.full(shape, -3.25)
    elif kind == "subnormal":
        x = rng.integers(-1023, 1024, size=shape) * 2.0**-24
    elif kind == "every magnitude":
        x = rng.choice([-1.0, 1.0], shape) * 2.0 ** rng.uniform(-24, 15.9, shape)
    else:  # "inf and nan"
        x = rng.normal(size=shape)
        x.flat[:: max(3, x.size // 5)] = np.inf
        x.flat[1 :: max(5, x.size // 3)] = np.nan
    return x.astype(np.float16)


@pytest.mark.parametrize("dim", (1, 2, 3, 17, 1024))
@pytest.mark.parametrize("norm", ROW_NORMS, ids=ROW_NORM_IDS)
def test_float16_mixed_loops_match_the_widening_recipe_bit_for_bit(norm, dim):
    """The ``wide`` loops read float16 x and g as bits (``_rownorm.widen``, ``read_row``)
    and round each result to half as they store it (``_rownorm.narrow``); before, the
    halves were widened to float32 copies and the float64 results rounded by NumPy. Both
    are one exact widening and one rounding of the same float64 arithmetic: every bit
    agrees, NaN payloads and signed zeros included, on random and adversarial rows, eps
    tiny and huge, overflow to inf, D = 1 and rows over several blocks."""
    if dim < norm.min_dim:
        pytest.skip(f"{norm.name} needs D >= {norm.min_dim}")
    rng = np.random.default_rng(dim)
    kinds = (
        "normal",
        "huge mean",
        "nearly constant",
        "constant",
        "subnormal",
        "every magnitude",
        "inf and nan",
    )
    for kind in kinds:
        shape = (RECIPE_ROWS, dim) if kind != "normal" else (5, RECIPE_ROWS // 5, dim)
        x, g = _recipe_rows(rng, kind, shape), _recipe_rows(rng, "normal", shape) * 8
        gamma = (rng.normal(size=dim) * 4).astype(np.float16)
        beta = rng.normal(size=dim).astype(np.float16)
        for eps in (1e-30, 1e-5, 1e4) if norm.has_eps else (0.0,):
            tail = norm.tail(eps)
            with np.errstate(all="ignore"):
                want = _mixed_half_by_widening(norm, x, g, gamma, beta, eps)
                got = [norm.kernel.forward(x, gamma, beta, *tail)]
                got += norm.kernel.vjp(x, g, gamma, beta, *tail)
            for what, a, b in zip(("y", "dx", "dgamma", "dbeta"), got, want, strict=True):
                assert_same_bits(f"{norm.name} {kind} eps={eps} {what}", a, b)
