"""The attention kernels against the mpmath references, in float64, float32 and float16.

Kernels: ``kernels.dp_attention``, ``kernels.l2_attention``, ``kernels.scs_attention``.
References: ``derive/reference/attention.py`` (mpmath at 50 digits, inputs taken exactly,
gradients by hand-written reverse mode, Jacobians by forward mode), themselves checked
here against central finite differences at 60 digits.

The error bound
---------------
Every kernel computes in float64 (float32 and float16 inputs are widened exactly) and
rounds each output once to the input dtype. An output passes when it lies between the
correct roundings of ``exact - E`` and ``exact + E``::

    round(exact - E) <= y <= round(exact + E),   E = SAFETY * 2^-53 * e,

which is ``|y - exact| <= E + 0.5 ulp(exact)`` up to the binade edge, and makes a float16
result inf exactly when the exact value rounds to inf (up to E, which no pinned case comes
near). ``e`` is a first-order running error bound (in units of ``u = 2^-53``) of a float64
evaluation of the reference's own steps, computed by running those steps in the
:class:`BoundArithmetic` below next to the exact values. Each number carries its exact
value ``v``, a magnitude ``m`` and an error bound ``e``:

=====================  ===============================  =====================================
step                   magnitude ``m``                  error bound ``e``
=====================  ===============================  =====================================
exact input            ``|v|``                          0
``a * b``              ``m_a m_b``                      ``m_a e_b + m_b e_a + m``
``a +- b``             ``m_a + m_b``                    ``e_a + e_b + m``
sum of n terms         ``sum m_i``                      ``sum e_i + (n - 1) m``
``a / b``              ``m_a / |b|``                    ``e_a / |b| + m_a e_b / b^2 + m``
``sqrt(a)``            ``sqrt(a)``                      ``e_a / (2 sqrt(a)) + sqrt(a)``
``exp(a)``             ``exp(a)``                       ``exp(a) (e_a + EXP_ULPS * 2)``
=====================  ===============================  =====================================

A product, quotient or exp whose result may be subnormal (not an exact 0, and below
``2^-1022 + u e``) errs by up to half the smallest subnormal besides,
``2^-1075 = UNDERFLOW_IN_U * u``, which it adds to ``e`` (sums and differences of floats
are exact there). That is exact only where the kernel underflows at the same step as the
reference: a subnormal intermediate loses bits, and how much the later factors amplify
that depends on the order of the products (measured: a float64 Jacobian entry of
-3.2e-320 off by 93 subnormal ulps, the kernel scaling a softmax weight of 1e-318 by 5e-5
before multiplying by 30). The draws therefore stay where float64 cannot underflow:
nonzero values are at least ``SMALLEST_DRAWN = 2^-20`` in magnitude, and in float64 a case
is skipped if a logit gap lies between ``LOGIT_GAP_NORMAL = 550`` and
``LOGIT_GAP_ZERO = 750``, so that every softmax weight is either above ``e^-550 = 2^-793``
(its products with a few inputs stay normal) or so far below that exp returns 0 and
every product with it is far below the smallest subnormal, both in the kernel and
exactly. float32 and float16 results are unaffected (float64's subnormals round to 0).

Why this bounds the kernels. The magnitudes are the steps evaluated on absolute values, so
they do not depend on how a product of matrices is associated (``|P| |X| |A| |Wv|`` either
way) nor on the order of a sum, and ``(n - 1) m`` bounds the first-order error of a sum of n
terms in any order (blocked, pairwise, reassociated; Higham, Accuracy and Stability, Eq.
4.4); a flat sum bounds any nesting of the same terms, which is why the reference
accumulates each adjoint as one sum of all its terms. A Jacobian entry is a sum over the
paths of the computation whichever way it is evaluated, so the magnitudes of the reference's
forward-mode tangents also bound the kernels' Jacobian rows built from VJPs. A quotient
needs a denominator without cancellation (``m_b = |b|``: row sums of exponentials, square
roots of sums of squares, ``sqrt(d)``; checked). ``exp`` propagates an absolute error
``delta`` of its argument into a relative error ``delta`` -- the softmax's amplification of
a logit's error by the logit's size, which is the problem's own conditioning -- and adds
libm's error (glibc: below 1 ulp, ``EXP_ULPS = 1``) for float64 input, and for float32 and
float16 input, whose softmax takes ``kernels._vmath.exp_bounded``, that function's proven
relative error (``EXP_REL_ERROR = 2^-50``, ``VECTOR_EXP_ULPS = 4``). The max shift
``L_ij - m_i`` is charged the error of ``m_i`` too (it cancels in P, so this over-counts).
Terms of second and higher order are not tracked: they are at most ``rho / (1 - rho)``
times the first-order bound, ``rho = u e / m`` the bound relative to the magnitude, which
:func:`check_all` requires to be at most ``FIRST_ORDER_LIMIT = 2^-10``; E includes the
factor ``HIGHER_ORDER_FACTOR = 1 + 2^-9`` for them.

SAFETY covers the kernels' local choices, read from ``kernels/_attention.py`` and the
three modules: a quotient by ``sqrt(d)`` or ``r`` done as written, products by BLAS, the
SCS normalization's backward ``(du - u (u . du)) / r`` and L2's
``sum_j T_ij (q_i - q_j)`` have the reference's magnitudes and at most twice its roundings
per step: ``SAFETY = 2`` for forwards. The softmax backward evaluates
``dS_j = P_j ((dP_j - dP_m) + c)``, ``c = sum_{k != m} P_k (dP_m - dP_k)`` around the
row's argmax m: its roundings are relative to ``P_j (|dP_j| + |dP_m|)`` where the
reference's ``bar_e_j e_j`` are relative to ``P_j (|dP_j| + sum_k P_k |dP_k|)``; since
``P_m >= 1/N``, ``|dP_m| <= N sum_k P_k |dP_k|``, and counting the roundings of both
forms the ratio is at most N: ``SAFETY = max(2, N)`` for gradients and Jacobians (the
kernels build the Jacobian from N dv VJPs).

Values are drawn in ``[-FLOAT_RANGE, FLOAT_RANGE]`` (float64 draws rounded to the dtype,
plus pinned values), where no float64 intermediate overflows; the float16 boundaries are
pinned with ``@example`` and dedicated tests. ``OBSERVED`` collects the
largest ``|y - exact| / (E + 0.5 ulp(exact))`` per module, dtype and quantity.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from types import ModuleType
from typing import Any

import ml_dtypes
import mpmath
import numba
import numpy as np
import pytest
from hypothesis import assume, example, given, settings
from hypothesis import strategies as st

from derive.reference import attention as reference_attention
from derive.reference.core import round_to_dtype, ulp
from derive.reference.formats import round_float64
from kernels import _attention, _vmath, dp_attention, l2_attention, scs_attention
from tests.helpers.norms import assert_same_values, mp

DTYPES = (np.dtype(np.float64), np.dtype(np.float32), np.dtype(np.float16))
DTYPE_IDS = [dtype.name for dtype in DTYPES]
HALF = np.dtype(np.float16)
BF16 = np.dtype(ml_dtypes.bfloat16)

#: Unit roundoff of the float64 arithmetic every kernel path computes in.
UNIT_FLOAT64 = 2.0**-53
#: libm's exp error in ULPs (glibc: "below 1 ulp"); an ULP is 2 units of roundoff.
EXP_ULPS = 1.0
#: exp_bounded's proven relative error in ULPs: the softmax of float32 and float16 input.
VECTOR_EXP_ULPS = _vmath.EXP_REL_ERROR / 2.0**-52
#: A product, quotient or exp whose result may be subnormal errs by up to half the smallest
#: subnormal, 2^-1075 = 2^-1022 u, besides its relative error (sums and differences of
#: floats are exact there).
UNDERFLOW_IN_U = mpmath.mpf(2) ** -1022
SMALLEST_NORMAL_FLOAT64 = mpmath.mpf(2) ** -1022
#: float64 draws skip softmax weights between e^-LOGIT_GAP_ZERO (exp gives 0 below about
#: e^-745) and e^-LOGIT_GAP_NORMAL = 2^-793, whose products may be subnormal (docstring).
LOGIT_GAP_NORMAL, LOGIT_GAP_ZERO = 550.0, 750.0
#: The first-order bound must stay below this fraction of the magnitude (docstring), ...
FIRST_ORDER_LIMIT = mpmath.mpf(2) ** -10
#: ... or below this absolute size (a few subnormal errors on a zero result) ...
SUBNORMAL_FLOOR = mpmath.mpf(2) ** -1000
#: ... and is then multiplied by this to cover the higher-order terms.
HIGHER_ORDER_FACTOR = 1 + mpmath.mpf(2) ** -9
#: Roundings of a kernel per reference step, forwards (see the module docstring).
FORWARD_SAFETY = 2.0
#: Digits of the references the kernels are compared with.
REFERENCE_DPS = 50
#: Disagreement allowed between two reference values that are equal in exact arithmetic
#: (the forward and reverse sweeps, each correct to ~10^-50 of the size of its terms).
REFERENCE_SLACK = mpmath.mpf(10) ** -40
#: Finite differences: digits, step and the digits they must agree to.
FD_DPS = 60
FD_STEP = mpmath.mpf(10) ** -25
FD_DIGITS = 30

#: Drawn sizes: N tokens of D features, d query/key width, dv value width.
MAX_TOKENS, MAX_WIDTH = 6, 4
#: Drawn values lie in [-FLOAT_RANGE, FLOAT_RANGE] (then rounded to the dtype).
FLOAT_RANGE = 4.0
#: Nonzero drawn values (and nu, tau) are at least this large in magnitude, so that no
#: float64 product comes near the subnormal range (see the module docstring).
SMALLEST_DRAWN = 2.0**-20
#: SCS: drawn |nu| and |tau| at most these.
NU_RANGE, TAU_RANGE = 4.0, 12.0
#: Values mixed into the draws: zero, signed unit, a half-precision subnormal and a power.
SPECIAL_VALUES = (0.0, -0.0, 1.0, -1.0, 0.5, 2.0**-24, 3.0)
#: SCS hyperparameters drawn: eps includes 0 (when no projected row is 0) and the smallest
#: float64 subnormal.
EPSILONS = (0.0, 5e-324, 1e-300, 1e-12, 1e-6, 1e-3, 1.0)
#: mpmath is slow: examples per (module, dtype) property.
EXAMPLES = 30

#: The largest finite half.
HALF_MAX = 65504.0


def backward_safety(tokens: int) -> float:
    """SAFETY for gradients and Jacobians: the softmax backward's argmax form (docstring)."""
    return max(FORWARD_SAFETY, float(tokens))


# --------------------------------------------------------------------------------------
# The error-bound arithmetic
# --------------------------------------------------------------------------------------


def underflow(v: mpmath.mpf, e: mpmath.mpf) -> mpmath.mpf:
    """The underflow error (in u) of rounding a result ``v`` known to within ``u e``: 0 for
    an exact zero or a result that is surely a normal number."""
    if (not v and not e) or abs(v) >= SMALLEST_NORMAL_FLOAT64 + UNIT_FLOAT64 * e:
        return mpmath.mpf(0)
    return UNDERFLOW_IN_U


class Bounded:
    """An exact value ``v``, its magnitude ``m`` and float64 error bound ``e`` (in u); mpf."""

    __slots__ = ("e", "m", "v")

    def __init__(self, v: mpmath.mpf, m: mpmath.mpf, e: mpmath.mpf):
        self.v, self.m, self.e = v, m, e

    def __add__(self, other: Bounded) -> Bounded:
        m = self.m + other.m
        return Bounded(self.v + other.v, m, self.e + other.e + m)

    def __sub__(self, other: Bounded) -> Bounded:
        m = self.m + other.m
        return Bounded(self.v - other.v, m, self.e + other.e + m)

    def __neg__(self) -> Bounded:
        return Bounded(-self.v, self.m, self.e)

    def __mul__(self, other: Bounded) -> Bounded:
        v, m = self.v * other.v, self.m * other.m
        e = self.m * other.e + other.m * self.e
        return Bounded(v, m, e + m + underflow(v, e))

    def __truediv__(self, other: Bounded) -> Bounded:
        size = abs(other.v)
        if other.m > size * (1 + mpmath.mpf(2) ** -60):
            raise AssertionError("the error model needs denominators without cancellation")
        v, m = self.v / other.v, self.m / size
        e = self.e / size + self.m * other.e / size**2
        return Bounded(v, m, e + m + underflow(v, e))


class BoundArithmetic:
    """The reference's steps with a first-order float64 error bound carried along.

    Magnitudes and bounds are mpf (at the reference's precision), so that neither
    overflows nor underflows where a float64 would (``1 / sqrt(5e-324)`` squared).
    ``exp_ulps``: the kernel's exponential's error in ULPs (libm's, or exp_bounded's).
    """

    def __init__(self, exp_ulps: float = EXP_ULPS):
        self.exp_ulps = exp_ulps

    def lift(self, value: mpmath.mpf) -> Bounded:
        return Bounded(value, abs(value), mpmath.mpf(0))

    def sum(self, terms: Sequence[Bounded]) -> Bounded:
        m = mpmath.fsum([t.m for t in terms])
        e = mpmath.fsum([t.e for t in terms]) + (len(terms) - 1) * m
        return Bounded(mpmath.fsum([t.v for t in terms]), m, e)

    def exp(self, a: Bounded) -> Bounded:
        v = mpmath.exp(a.v)
        e = v * a.e
        return Bounded(v, v, e + 2 * self.exp_ulps * (v + underflow(v, e)))

    def sqrt(self, a: Bounded) -> Bounded:
        v = mpmath.sqrt(a.v)
        return Bounded(v, v, a.e / (2 * v) + v)

    def max(self, values: Sequence[Bounded]) -> Bounded:
        return max(values, key=lambda t: t.v)

    def value(self, number: Bounded) -> mpmath.mpf:
        return number.v


BOUNDS = BoundArithmetic()
VECTOR_BOUNDS = BoundArithmetic(VECTOR_EXP_ULPS)


# --------------------------------------------------------------------------------------
# The modules
# --------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Attention:
    name: str
    kernel: ModuleType
    #: Weight names in call order; Wk takes the shape of Wq, Wv is (dv, D).
    weights: tuple[str, ...]
    #: Hyperparameters after the weights (SCS: nu, tau, eps).
    scalars: tuple[str, ...] = ()

    def reference(self, what: str) -> Callable[..., Any]:
        return getattr(reference_attention, f"{self.name}_{what}")

    def weight_shape(self, name: str, D: int, d: int, dv: int) -> tuple[int, int]:
        return (dv, D) if name == "Wv" else (d, D)


DP = Attention("dp_attention", dp_attention, ("Wq", "Wk", "Wv"))
L2 = Attention("l2_attention", l2_attention, ("Wq", "Wv"))
SCS = Attention("scs_attention", scs_attention, ("Wq", "Wk", "Wv"), ("nu", "tau", "eps"))
MODULES = (DP, L2, SCS)
MODULE_IDS = [module.name for module in MODULES]

Rows = tuple[tuple[float, ...], ...]


@dataclass(frozen=True)
class Case:
    """One input: X (N, D), the weights in call order, G (N, dv), the hyperparameters."""

    X: Rows
    weights: tuple[Rows, ...]
    G: Rows
    scalars: tuple[float, ...] = ()

    def arrays(self, dtype: np.dtype) -> tuple[np.ndarray, np.ndarray, tuple[np.ndarray, ...]]:
        """``(X, G, weights)`` rounded to ``dtype`` (exact for the pinned half values)."""
        return (
            np.array(self.X, dtype=dtype),
            np.array(self.G, dtype=dtype),
            tuple(np.array(w, dtype=dtype) for w in self.weights),
        )


def case(X, weights, G=None, scalars=()) -> Case:
    """A pinned case from nested lists; G defaults to ones."""
    as_rows = lambda rows: tuple(tuple(float(v) for v in row) for row in rows)  # noqa: E731
    if G is None:
        G = [[1.0] * len(weights[-1]) for _ in X]
    return Case(as_rows(X), tuple(as_rows(w) for w in weights), as_rows(G), tuple(scalars))


def moderate(limit: float) -> st.SearchStrategy[float]:
    """0, or a float64 of magnitude in ``[SMALLEST_DRAWN, limit]``."""
    return st.one_of(
        st.just(0.0), st.floats(SMALLEST_DRAWN, limit), st.floats(-limit, -SMALLEST_DRAWN)
    )


VALUES = st.one_of(st.sampled_from(SPECIAL_VALUES), moderate(FLOAT_RANGE))


def _rows(rows: int, columns: int) -> st.SearchStrategy[Rows]:
    row = st.tuples(*([VALUES] * columns))
    return st.tuples(*([row] * rows))


@st.composite
def cases(draw: st.DrawFn, module: Attention) -> Case:
    N = draw(st.integers(1, MAX_TOKENS))
    D, d, dv = (draw(st.integers(1, MAX_WIDTH)) for _ in range(3))
    X = draw(_rows(N, D))
    weights = tuple(draw(_rows(*module.weight_shape(name, D, d, dv))) for name in module.weights)
    G = draw(_rows(N, dv))
    scalars: tuple[float, ...] = ()
    if module.scalars:
        nu, tau = draw(moderate(NU_RANGE)), draw(moderate(TAU_RANGE))
        scalars = (nu, tau, draw(st.sampled_from(EPSILONS)))
    return Case(X, weights, G, scalars)


def has_zero_projection(c: Case, dtype: np.dtype) -> bool:
    """True if some row of ``X W^T`` is exactly 0 (SCS with eps = 0 is then 0/0)."""
    X, _, weights = c.arrays(dtype)
    with mpmath.workdps(REFERENCE_DPS):
        for W in weights:
            for x in X:
                if all(
                    not mpmath.fsum(mp(a) * mp(b) for a, b in zip(x, w, strict=True)) for w in W
                ):
                    return True
    return False


# --------------------------------------------------------------------------------------
# Calling kernels and references
# --------------------------------------------------------------------------------------


def kernel_outputs(module: Attention, c: Case, dtype: np.dtype, strict: bool = False):
    """The kernel's ``(Y, gradients, J)`` for case ``c`` in ``dtype``."""
    X, G, weights = c.arrays(dtype)
    mode = {"strict_fp16": True} if strict else {}
    kernel = module.kernel
    Y = kernel.forward(X, *weights, *c.scalars, **mode)
    gradients = kernel.vjp(X, G, *weights, *c.scalars, **mode)
    J = kernel.jacobian(X, *weights, *c.scalars, **mode)
    return Y, gradients, J


def reference_outputs(module: Attention, c: Case, dtype: np.dtype, arithmetic: Any = None):
    """The reference's ``(Y, gradients, J)`` (object arrays of :class:`Bounded` by default)."""
    X, G, weights = c.arrays(dtype)
    bounds = VECTOR_BOUNDS if dtype in (np.float32, np.float16) else BOUNDS
    options = {"dps": REFERENCE_DPS, "arithmetic": arithmetic or bounds}
    Y = module.reference("forward")(X, *weights, *c.scalars, **options)
    gradients = module.reference("vjp")(X, G, *weights, *c.scalars, **options)
    J = module.reference("jacobian")(X, *weights, *c.scalars, **options)
    return Y, gradients, J


# --------------------------------------------------------------------------------------
# The accuracy check
# --------------------------------------------------------------------------------------

#: The largest |y - exact| / (E + 0.5 ulp(exact)) seen, per (module, dtype, quantity).
OBSERVED: dict[tuple[str, str, str], float] = {}


def allowed_interval(exact: Bounded, dtype: np.dtype, safety: float):
    """``(E, round(exact - E), round(exact + E))``; call inside ``workdps(REFERENCE_DPS)``."""
    E = HIGHER_ORDER_FACTOR * safety * mpmath.mpf(UNIT_FLOAT64) * exact.e
    return E, round_to_dtype(exact.v - E, dtype), round_to_dtype(exact.v + E, dtype)


def check_all(
    what: str, actual: np.ndarray, exact: np.ndarray, dtype: np.dtype, safety: float
) -> None:
    """Every entry of ``actual`` within the rounded interval of its exact value (docstring)."""
    actual = np.asarray(actual)
    assert actual.dtype == dtype, f"{what}: dtype {actual.dtype}, expected {dtype}"
    assert actual.shape == exact.shape, f"{what}: shape {actual.shape}, expected {exact.shape}"
    key = (what, dtype.name)
    with mpmath.workdps(REFERENCE_DPS):
        for index in np.ndindex(exact.shape):
            y, b = actual[index], exact[index]
            E, low, high = allowed_interval(b, dtype, safety)
            if E > FIRST_ORDER_LIMIT * b.m + SUBNORMAL_FLOOR:
                raise AssertionError(
                    f"{what} at index {index}: the case is outside the first-order error "
                    f"model (relative bound {mpmath.nstr(E / b.m, 3)}); draw it smaller"
                )
            if not low <= y <= high:
                raise AssertionError(
                    f"{what} ({dtype.name}) at index {index}: got {y!r}, expected "
                    f"{mpmath.nstr(b.v, 20)} within E = {mpmath.nstr(E, 3)} "
                    f"(allowed [{low!r}, {high!r}])"
                )
            if np.isfinite(y):
                ratio = abs(mp(y) - b.v) / (E + ulp(b.v, dtype) / 2)
                OBSERVED[key] = max(OBSERVED.get(key, 0.0), float(ratio))


def check_vjp_is_jacobian_transpose(
    what: str,
    J: np.ndarray,
    dX: np.ndarray,
    G: np.ndarray,
    exact_J: np.ndarray,
    exact_dX: np.ndarray,
    dtype: np.dtype,
    safety: float,
) -> None:
    """``|J^T g - dX| <= sum_r |g_r| dev(J_rc) + dev(dX_c)`` with the kernel's own J and dX.

    ``dev`` is the largest deviation from the exact value the accuracy check allows; as
    ``J_exact^T g = dX_exact`` exactly, this holds whenever both pass, and fails when the
    Jacobian and the VJP disagree (a transposed or misindexed Jacobian).
    """
    g = G.reshape(-1)
    with mpmath.workdps(REFERENCE_DPS):

        def deviation(b: Bounded) -> mpmath.mpf:
            _, low, high = allowed_interval(b, dtype, safety)
            return max(abs(mp(high) - b.v), abs(b.v - mp(low)))

        flat_dX, flat_exact_dX = dX.reshape(-1), exact_dX.reshape(-1)
        for column in range(J.shape[1]):
            product = mpmath.fsum(mp(J[r, column]) * mp(g[r]) for r in range(J.shape[0]))
            allowed = deviation(flat_exact_dX[column]) + mpmath.fsum(
                abs(mp(g[r])) * deviation(exact_J[r, column]) for r in range(J.shape[0])
            )
            # the references' own difference (forward vs reverse mode, ~10^-50 of the sizes)
            sizes = flat_exact_dX[column].m + mpmath.fsum(
                abs(mp(g[r])) * exact_J[r, column].m for r in range(J.shape[0])
            )
            allowed += REFERENCE_SLACK * sizes
            if mpmath.isfinite(allowed) and not abs(product - mp(flat_dX[column])) <= allowed:
                raise AssertionError(
                    f"{what} ({dtype.name}): (J^T g)[{column}] = {mpmath.nstr(product, 17)} "
                    f"but vjp dX = {flat_dX[column]!r} (allowed {mpmath.nstr(allowed, 3)})"
                )


def logit_gaps(module: Attention, c: Case) -> np.ndarray:
    """``max_k L_ik - L_ij`` for every i, j, in float64 (a domain filter, not a result)."""
    X, _, weights = c.arrays(np.dtype(np.float64))
    Q = X @ weights[0].T
    if module is DP:
        L = Q @ (X @ weights[1].T).T
    elif module is L2:
        L = -np.sum((Q[:, None, :] - Q[None, :, :]) ** 2, axis=-1)
    else:
        return np.array([2 * abs(c.scalars[1])])  # |tau cos| <= |tau|
    L = L / math.sqrt(Q.shape[1])
    return np.max(L, axis=1, keepdims=True) - L


def in_model_domain(module: Attention, c: Case, dtype: np.dtype) -> bool:
    """False for a float64 case with a softmax weight that reaches the subnormal range but
    not 0 (a logit gap strictly between LOGIT_GAP_NORMAL and LOGIT_GAP_ZERO; module
    docstring)."""
    if dtype != np.float64:
        return True
    gaps = logit_gaps(module, c)
    return not np.any((LOGIT_GAP_NORMAL < gaps) & (gaps < LOGIT_GAP_ZERO))


def check_case(module: Attention, c: Case, dtype: np.dtype) -> None:
    """Forward, every gradient, the Jacobian and J^T g = dX against the reference."""
    exact_Y, exact_gradients, exact_J = reference_outputs(module, c, dtype)
    Y, gradients, J = kernel_outputs(module, c, dtype)
    backward = backward_safety(len(c.X))
    check_all(f"{module.name}.forward Y", Y, exact_Y, dtype, FORWARD_SAFETY)
    names = ("dX", *(f"d{name}" for name in module.weights))
    assert len(gradients) == len(names), f"{module.name}.vjp: expected {names}"
    for name, actual, exact in zip(names, gradients, exact_gradients, strict=True):
        check_all(f"{module.name}.vjp {name}", actual, exact, dtype, backward)
    check_all(f"{module.name}.jacobian J", J, exact_J, dtype, backward)
    _, G, _ = c.arrays(dtype)
    check_vjp_is_jacobian_transpose(
        f"{module.name}", J, gradients[0], G, exact_J, exact_gradients[0], dtype, backward
    )


# --------------------------------------------------------------------------------------
# The references themselves
# --------------------------------------------------------------------------------------

#: The fixed case of the finite-difference checks: N, D, d, dv all different, so that a
#: transposed or misindexed gradient cannot pass; SCS hyperparameters nu, tau, eps.
FD_SIZES = (3, 2, 3, 4)
FD_SCALARS = (0.75, 1.5, 1e-3)


def fd_case(module: Attention) -> Case:
    rng = np.random.default_rng(20240611)
    N, D, d, dv = FD_SIZES
    rows = lambda shape: tuple(map(tuple, rng.normal(size=shape).tolist()))  # noqa: E731
    weights = tuple(rows(module.weight_shape(name, D, d, dv)) for name in module.weights)
    return Case(rows((N, D)), weights, rows((N, dv)), FD_SCALARS if module.scalars else ())


@pytest.mark.parametrize("module", MODULES, ids=MODULE_IDS)
def test_reference_sweeps_match_central_differences(module):
    """Reverse-mode gradients (X and every weight) and forward-mode Jacobian columns against
    ``(f(x + h v) - f(x - h v)) / (2 h)`` at 60 digits, to 30 digits, for every entry."""
    c = fd_case(module)
    X, G, weights = c.arrays(np.dtype(np.float64))
    arguments = (X, *weights)
    forward = module.reference("forward")
    gradients = module.reference("vjp")(X, G, *weights, *c.scalars, dps=FD_DPS)
    J = module.reference("jacobian")(X, *weights, *c.scalars, dps=FD_DPS)
    with mpmath.workdps(FD_DPS):
        scale = 1 + max(abs(v) for part in (*gradients, J) for v in part.reshape(-1))
        tolerance = mpmath.mpf(10) ** -FD_DIGITS * scale
    for position, argument in enumerate(arguments):
        name = ("X", *module.weights)[position]
        for index in np.ndindex(argument.shape):
            direction = np.zeros(argument.shape)
            direction[index] = 1.0

            def f(point, position=position):
                values = list(arguments)
                values[position] = point
                return forward(*values, *c.scalars, dps=FD_DPS)

            dY = reference_attention.directional_derivative(
                f, argument, direction, FD_STEP, dps=FD_DPS
            )
            with mpmath.workdps(FD_DPS):
                fd_gradient = mpmath.fsum(G[i, k] * dY[i, k] for i, k in np.ndindex(dY.shape))
                error = abs(fd_gradient - gradients[position][index])
                assert error <= tolerance, (
                    f"{module.name}: d{name}{index} = {gradients[position][index]}, "
                    f"finite differences {fd_gradient}"
                )
                if position == 0:
                    column = index[0] * X.shape[1] + index[1]
                    for row, value in enumerate(dY.reshape(-1)):
                        assert abs(value - J[row, column]) <= tolerance, (
                            f"{module.name}: J[{row}, {column}] = {J[row, column]}, "
                            f"finite differences {value}"
                        )


@pytest.mark.parametrize("module", MODULES, ids=MODULE_IDS)
def test_error_bound_arithmetic_carries_the_reference_values(module):
    """The bounded run used by the accuracy checks has exactly the mpmath run's values."""
    c = fd_case(module)
    plain = reference_outputs(module, c, np.dtype(np.float64), reference_attention.MPMATH)
    bounded = reference_outputs(module, c, np.dtype(np.float64))
    pairs = [
        (plain[0], bounded[0]),
        *zip(plain[1], bounded[1], strict=True),
        (plain[2], bounded[2]),
    ]
    for values, numbers in pairs:
        assert values.shape == numbers.shape
        assert all(v == b.v for v, b in zip(values.reshape(-1), numbers.reshape(-1), strict=True))


def test_reference_rejects_undefined_scs_normalization():
    c = case([[0.0, 0.0], [1.0, 2.0]], ([[1.0, 1.0]], [[1.0, 0.0]], [[0.0, 1.0]]))
    X, _, weights = c.arrays(np.dtype(np.float64))
    with pytest.raises(ValueError, match=r"^eps: with eps = 0 row 0 of Q"):
        reference_attention.scs_attention_forward(X, *weights, 1.0, 1.0, 0.0)


# --------------------------------------------------------------------------------------
# Kernels against the references
# --------------------------------------------------------------------------------------

#: Half values near exp's overflow: 3.330078125^2 = 11.0894 < log(65504) = 11.0898 <
#: 3.33203125^2 = 11.1024 (so exp of the second logit, unshifted, is inf in half).
BELOW_LOG_MAX, ABOVE_LOG_MAX = 3.330078125, 3.33203125
#: 65504 (1 + 2^-12) = 65519.99 rounds to 65504; 65504 (1 + 2^-11) = 65535.98 to inf.
JUST_FINITE, JUST_INFINITE = 2.0**-12, 2.0**-11
SOME_WEIGHTS = ([[0.5, -1.0], [2.0, 0.25]], [[1.0, 0.5], [-0.5, 1.5]], [[1.0, -2.0]])
SAME_ROWS = [[1.5, -2.0], [1.5, -2.0], [1.5, -2.0]]


def test_pinned_float16_values_are_what_they_claim():
    """The pinned inputs are halves, and sit where the comments say."""
    values = (BELOW_LOG_MAX, ABOVE_LOG_MAX, JUST_FINITE, JUST_INFINITE, HALF_MAX)
    assert all(float(np.float16(v)) == v for v in values)
    assert math.exp(BELOW_LOG_MAX**2) < HALF_MAX < 65520.0 < math.exp(ABOVE_LOG_MAX**2)
    assert HALF_MAX * (1 + JUST_FINITE) < 65520.0 <= HALF_MAX * (1 + JUST_INFINITE)
    assert np.float16(HALF_MAX * (1 + JUST_FINITE)) == HALF_MAX
    assert np.isinf(round_to_dtype(65520, HALF))


DP_EXAMPLES = (
    case([[BELOW_LOG_MAX], [1.0]], ([[1.0]], [[1.0]], [[1.0]])),  # logit 11.0894
    case([[ABOVE_LOG_MAX], [1.0], [-2.0]], ([[1.0]], [[1.0]], [[1.0]])),  # logit 11.1024
    case(SAME_ROWS, SOME_WEIGHTS),  # identical rows: uniform attention
    case([[2.0, -1.0]], SOME_WEIGHTS),  # N = 1
    case([[256.0], [256.0]], ([[1.0]], [[1.0]], [[1.0]])),  # Q K^T = 65536: inf in half
    case([[HALF_MAX] * 2] * 2, ([[0.0, 0.0]], [[0.0, 0.0]], [[1.0, JUST_FINITE]])),
    case([[HALF_MAX] * 2] * 2, ([[0.0, 0.0]], [[0.0, 0.0]], [[1.0, JUST_INFINITE]])),
    case([[HALF_MAX], [-HALF_MAX]], ([[2.0**-16]], [[2.0**-16]], [[2.0]])),  # V past 65504
)
L2_EXAMPLES = (
    case([[0.0], [BELOW_LOG_MAX]], ([[1.0]], [[1.0]])),  # logit -11.0894
    case([[0.0], [ABOVE_LOG_MAX], [1.0]], ([[1.0]], [[1.0]])),
    case(SAME_ROWS, (SOME_WEIGHTS[0], SOME_WEIGHTS[2])),
    case([[2.0, -1.0]], (SOME_WEIGHTS[0], SOME_WEIGHTS[2])),
    case([[0.0], [256.0]], ([[1.0]], [[1.0]])),  # squared distance 65536: inf in half
    # A = [[1, 2^-6], [2^-6, 2^-12]]: Y = 65504 (1 + 2^-12) resp. (1 + 2^-11).
    case([[HALF_MAX, 0.0]] * 2, ([[1.0, 2.0**-6]], [[1.0, 2.0**-6]])),
    case([[HALF_MAX, 0.0]] * 2, ([[1.0, 2.0**-6]], [[1.0, 2.0**-5]])),
    case([[HALF_MAX], [HALF_MAX]], ([[1.0]], [[2.0]])),  # Y = 131008: inf
)
SCS_EXAMPLES = (
    case([[1.0], [-1.0], [1.0]], ([[1.0]], [[1.0]], [[1.0]]), scalars=(1.0, 11.09375, 0.0)),
    case(SAME_ROWS, SOME_WEIGHTS, scalars=(2.0, 3.0, 1e-6)),
    case([[2.0, -1.0]], SOME_WEIGHTS, scalars=(0.5, 1.0, 0.0)),
    # a zero row with the smallest positive eps: q~ = 0 / sqrt(5e-324) = 0, gradients ~1e161
    case([[0.0, 0.0], [1.0, 2.0]], SOME_WEIGHTS, scalars=(1.0, 2.0, 5e-324)),
    case([[HALF_MAX, 0.0], [0.0, HALF_MAX]], SOME_WEIGHTS, scalars=(HALF_MAX, 2.0, 1.0)),
)


def with_examples(pinned: Sequence[Case]) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """``@example(c=...)`` for each pinned case, in order."""

    def decorate(test: Callable[..., Any]) -> Callable[..., Any]:
        for c in reversed(pinned):
            test = example(c=c)(test)
        return test

    return decorate


@pytest.mark.parametrize("dtype", DTYPES, ids=DTYPE_IDS)
@settings(max_examples=EXAMPLES)
@given(c=cases(DP))
@with_examples(DP_EXAMPLES)
def test_dp_attention_matches_reference(dtype, c):
    assume(in_model_domain(DP, c, dtype))
    check_case(DP, c, dtype)


@pytest.mark.parametrize("dtype", DTYPES, ids=DTYPE_IDS)
@settings(max_examples=EXAMPLES)
@given(c=cases(L2))
@with_examples(L2_EXAMPLES)
def test_l2_attention_matches_reference(dtype, c):
    assume(in_model_domain(L2, c, dtype))
    check_case(L2, c, dtype)


@pytest.mark.parametrize("dtype", DTYPES, ids=DTYPE_IDS)
@settings(max_examples=EXAMPLES)
@given(c=cases(SCS))
@with_examples(SCS_EXAMPLES)
def test_scs_attention_matches_reference(dtype, c):
    # eps = 0 with a zero projection is 0/0; a subnormal eps there puts the normalization's
    # derivative (1/sqrt(eps)) outside the first-order error model. Both are pinned in
    # their own tests (test_scs_eps_zero_*, test_scs_tiny_eps_zero_row_*).
    if c.scalars[2] < np.finfo(np.float64).tiny:
        assume(not has_zero_projection(c, dtype))
    check_case(SCS, c, dtype)


# --------------------------------------------------------------------------------------
# float16: overflow boundaries, strict mode
# --------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("module", "c", "expected"),
    [
        (DP, DP_EXAMPLES[5], HALF_MAX),  # 65519.99: rounds down to 65504
        (DP, DP_EXAMPLES[6], math.inf),  # 65535.98: rounds to inf
        (DP, DP_EXAMPLES[7], math.inf),  # V = 131008, P ~ (1, 0)
        (L2, L2_EXAMPLES[5], HALF_MAX),
        (L2, L2_EXAMPLES[6], math.inf),
        (L2, L2_EXAMPLES[7], math.inf),
        (DP, DP_EXAMPLES[4], 256.0),  # Q K^T = 65536 overflows half, not float64
    ],
    ids=["dp-65519.99", "dp-65535.98", "dp-131008", "l2-65519.99", "l2-65535.98", "l2-131008",
         "dp-qk-65536"],
)  # fmt: skip
def test_float16_result_is_inf_exactly_when_the_exact_value_rounds_to_inf(module, c, expected):
    """Mixed float16: an output is inf exactly when its exact value is >= 65520, never
    earlier -- not where 65504 * (1 + 2^-12) = 65519.99 only nearly does, and not where a
    product inside (Q K^T = 65536) overflows half but the output does not."""
    X, _, weights = c.arrays(HALF)
    Y = module.kernel.forward(X, *weights, *c.scalars)
    assert Y.dtype == HALF
    if expected == HALF_MAX or expected == 256.0:
        assert_same_values(f"{module.name} Y", Y[0], np.full(Y.shape[1], expected, HALF))
    else:
        assert Y[0, 0] == np.inf, f"{module.name} Y[0, 0]: got {Y[0, 0]!r}, expected inf"


def test_strict_fp16_dot_product_overflows_in_q_k_transpose():
    """strict_fp16 at X = [[256], [256]], all weights 1: each logit is 256 * 256 = 65536,
    which rounds to inf in half; the row max is then inf, ``inf - inf`` is NaN, and the whole
    of Y is NaN (kernels/_attention.py: a +inf in a row makes its softmax row NaN). Mixed
    mode computes the logits in float64 and gives the exact Y = 256 (uniform attention)."""
    X, _, weights = DP_EXAMPLES[4].arrays(HALF)
    strict = dp_attention.forward(X, *weights, strict_fp16=True)
    assert_same_values("strict Y", strict, np.full((2, 1), np.nan, HALF))
    mixed = dp_attention.forward(X, *weights)
    assert_same_values("mixed Y", mixed, np.full((2, 1), 256.0, HALF))


def test_strict_fp16_l2_distance_overflow_zeroes_the_attention_weight():
    """strict_fp16: (256 - 0)^2 = 65536 is inf in half, so that logit is -inf and its
    weight exactly 0; the exact weight is exp(-65536) / (1 + exp(-65536)), which also rounds
    to 0 in Y = 256 P_01: both modes give Y_0 = 0 and Y_1 = 256."""
    X, _, weights = L2_EXAMPLES[4].arrays(HALF)
    for mode in (True, False):
        Y = l2_attention.forward(X, *weights, strict_fp16=mode)
        assert_same_values(f"strict={mode} Y", Y, np.array([[0.0], [256.0]], HALF))


def test_strict_fp16_scs_eps_below_half_the_smallest_subnormal_is_zero():
    """strict_fp16 rounds eps to half first: 1e-8 < 2^-25 becomes 0, so a zero row of X
    gives 0/0 in every normalization and NaN everywhere (a zero k_j or v_j reaches every
    output); mixed mode keeps eps = 1e-8 and gives the finite exact result."""
    c = case([[0.0, 0.0], [1.0, 2.0]], SOME_WEIGHTS, scalars=(1.0, 2.0, 1e-8))
    X, _, weights = c.arrays(HALF)
    strict = scs_attention.forward(X, *weights, *c.scalars, strict_fp16=True)
    assert_same_values("strict Y", strict, np.full((2, 1), np.nan, HALF))
    exact = scs_attention.forward(X, *weights, *c.scalars)
    check_all("scs mixed Y", exact, reference_outputs(SCS, c, HALF)[0], HALF, FORWARD_SAFETY)


# --------------------------------------------------------------------------------------
# Strict bfloat16
# --------------------------------------------------------------------------------------


def test_strict_bfloat16_softmax_row_sum_stalls_at_256():
    """DP attention over N = 300 tokens ``x_t = (1, v_t)`` with ``Wq = Wk = (1, 0)`` and
    ``Wv = (0, 1)``: every logit is ``(1 * 1) / bf(sqrt(1)) = 1``, the max is subtracted,
    so every ``e_j = bf(exp(0)) = 1``, and the row sum ``total = bf(total + 1)`` counts up
    to 256 exactly; there bfloat16's spacing is 2 (8 significant bits), ``256 + 1`` is the
    tie between 256 and 258 and rounds to the even significand, 256, and the sum stays 256.
    So every weight is ``bf(1 / 256) = 2^-8`` instead of 1/300. With ``v_t = 0`` except
    ``v_299 = 1``, Y is the weight of the last token: 2^-8 = 0.00390625 in every row (the
    other 299 products are 0); the exact value is 1/300 (mixed bfloat16: bf(1/300) =
    0.0033264), and strict float16 (whose sums stall at 2048) gives h(1/300)."""
    X = np.zeros((300, 2), BF16)
    X[:, 0] = 1.0
    X[-1, 1] = 1.0
    Wqk, Wv = np.array([[1.0, 0.0]], BF16), np.array([[0.0, 1.0]], BF16)
    Y = dp_attention.forward(X, Wqk, Wqk, Wv, strict_fp16=True)
    assert Y.dtype == BF16 and Y.shape == (300, 1)
    assert_same_values("strict bfloat16 Y", Y, np.full((300, 1), 2.0**-8))
    mixed = dp_attention.forward(X, Wqk, Wqk, Wv)
    assert_same_values("mixed Y", mixed, np.full((300, 1), float(round_float64(1 / 300, BF16))))
    half = dp_attention.forward(*(a.astype(HALF) for a in (X, Wqk, Wqk, Wv)), strict_fp16=True)
    assert_same_values("strict float16 Y", half, np.full((300, 1), np.float16(1 / 300)))


def test_strict_bfloat16_scs_squared_norm_stalls_at_256():
    """SCS attention of one token ``x = (1)`` with ``Wq = Wk = Wv`` = 300 rows of 1 (d = dv =
    300), nu = tau = 1, eps = 0: q = k = v = 300 ones; ``|q|^2`` sums 300 products 1 * 1,
    which stalls at 256 (``256 + 1`` rounds to the even 256, spacing 2), so
    ``r = bf(sqrt(256 + 0)) = 16`` and ``q~ = bf(1/16)`` = 0.0625 in every coordinate
    (exact: ``1/sqrt(300) = 0.0577``). One token has the weight P = 1, so
    ``Y = bf(1 * bf(1 * 0.0625)) = 0.0625`` for every coordinate."""
    X = np.ones((1, 1), BF16)
    W = np.ones((300, 1), BF16)
    Y = scs_attention.forward(X, W, W, W, 1.0, 1.0, 0.0, strict_fp16=True)
    assert Y.dtype == BF16 and Y.shape == (1, 300)
    assert_same_values("strict bfloat16 Y", Y, np.full((1, 300), 0.0625))


def _bf(value: float) -> ml_dtypes.bfloat16:
    """A bfloat16 scalar of a value that is one (exact)."""
    out = ml_dtypes.bfloat16(value)
    assert float(out) == value, value
    return out


def bf_matmul(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """``a @ b`` in bfloat16 scalars: each product and partial sum (from +0, ascending
    index) rounded (``_matmul_nt_strict``)."""
    out = np.empty((a.shape[0], b.shape[1]), BF16)
    for i, k in np.ndindex(out.shape):
        acc = _bf(0.0)
        for j in range(a.shape[1]):
            acc = acc + a[i, j] * b[j, k]
        out[i, k] = acc
    return out


def bf_exp(value: ml_dtypes.bfloat16) -> ml_dtypes.bfloat16:
    """libm's float64 exp rounded once to bfloat16, directly (as the kernels round it)."""
    return round_float64(math.exp(float(value)), BF16)[()]


def bf_softmax(S: np.ndarray) -> tuple[np.ndarray, list[int]]:
    """The strict row softmax of kernels/_attention.py (finite rows): m = the first index
    of the maximum, ``e_j = bf(exp(bf(s_j - s_m)))``, the sum ascending, ``P_j = bf(e_j / sum)``."""
    P = np.empty(S.shape, BF16)
    argmax = []
    for i in range(S.shape[0]):
        row = [float(v) for v in S[i]]
        m = row.index(max(row))
        argmax.append(m)
        total = _bf(0.0)
        for j in range(S.shape[1]):
            P[i, j] = bf_exp(S[i, j] - S[i, m])
            total = total + P[i, j]
        for j in range(S.shape[1]):
            P[i, j] = P[i, j] / total
    return P, argmax


def bf_softmax_backward(P: np.ndarray, dP: np.ndarray, argmax: list[int]) -> np.ndarray:
    """``dS`` of kernels/_attention.py: ``c = sum_{j != m} P_j (dP_m - dP_j)`` ascending,
    ``dS_m = P_m c``, ``dS_j = P_j ((dP_j - dP_m) + c)``, every operation rounded."""
    dS = np.empty(P.shape, BF16)
    for i, m in enumerate(argmax):
        c = _bf(0.0)
        for j in range(P.shape[1]):
            if j != m:
                c = c + P[i, j] * (dP[i, m] - dP[i, j])
        for j in range(P.shape[1]):
            dS[i, j] = P[i, j] * c if j == m else P[i, j] * ((dP[i, j] - dP[i, m]) + c)
    return dS


def bf_dp_attention(X, G, Wq, Wk, Wv) -> tuple[np.ndarray, ...]:
    """Strict bfloat16 DP attention in the order of kernels/dp_attention.py's docstring:
    ``(Y, dX, dWq, dWk, dWv)``."""
    root = np.sqrt(_bf(float(Wq.shape[0])))
    Q, K, V = bf_matmul(X, Wq.T), bf_matmul(X, Wk.T), bf_matmul(X, Wv.T)
    S = bf_matmul(Q, K.T) / root
    P, argmax = bf_softmax(S)
    Y = bf_matmul(P, V)
    dV = bf_matmul(P.T, G)
    dS = bf_softmax_backward(P, bf_matmul(G, V.T), argmax)
    dQ = bf_matmul(dS, K) / root
    dK = bf_matmul(dS.T, Q) / root
    dX = (bf_matmul(dQ, Wq) + bf_matmul(dK, Wk)) + bf_matmul(dV, Wv)
    return Y, dX, bf_matmul(dQ.T, X), bf_matmul(dK.T, X), bf_matmul(dV.T, X)


def bf_l2_attention(X, Wq, Wv) -> np.ndarray:
    """Strict bfloat16 L2 attention's Y (kernels/l2_attention.py): the logits from the
    differences, ``S_ij = -bf(sum_c bf(t^2) / root)``, ``t = bf(q_ic - q_jc)``; then
    ``A = bf(Wq^T Wq / root)``, ``B = A Wv^T``, ``M = X B``, ``Y = P M``."""
    root = np.sqrt(_bf(float(Wq.shape[0])))
    Q = bf_matmul(X, Wq.T)
    n = Q.shape[0]
    S = np.empty((n, n), BF16)
    for i, j in np.ndindex(S.shape):
        acc = _bf(0.0)
        for c in range(Q.shape[1]):
            t = Q[i, c] - Q[j, c]
            acc = acc + t * t
        S[i, j] = -(acc / root)
    P, _ = bf_softmax(S)
    A = bf_matmul(Wq.T, Wq) / root
    return bf_matmul(P, bf_matmul(X, bf_matmul(A, Wv.T)))


def bf_scs_attention(X, Wq, Wk, Wv, nu, tau, eps) -> np.ndarray:
    """Strict bfloat16 SCS attention's Y (kernels/scs_attention.py): per row
    ``r = bf(sqrt(bf(|q|^2 + eps)))`` (the squares summed ascending), ``q~ = bf(q / r)``;
    ``S = bf((Q~ K~^T) tau)``, ``Y = bf((P V~) nu)``."""
    nu, tau, eps = _bf(nu), _bf(tau), _bf(eps)

    def normalized(W):
        q = bf_matmul(X, W.T)
        out = np.empty(q.shape, BF16)
        for i in range(q.shape[0]):
            acc = _bf(0.0)
            for j in range(q.shape[1]):
                acc = acc + q[i, j] * q[i, j]
            r = np.sqrt(acc + eps)
            out[i] = [v / r for v in q[i]]
        return out

    Qn, Kn, Vn = normalized(Wq), normalized(Wk), normalized(Wv)
    P, _ = bf_softmax(bf_matmul(Qn, Kn.T) * tau)
    return bf_matmul(P, Vn) * nu


def bf16_case(seed: int, module: Attention) -> Case:
    """Small random inputs: N, D, d, dv in 1..4, values of magnitude 2^-6..2 rounded to
    bfloat16 (logits stay small: no weight or product near the subnormal range, where
    ml_dtypes' float32 arithmetic would round twice)."""
    rng = np.random.default_rng(seed)
    N, D, d, dv = (int(v) for v in rng.integers(1, 5, 4))

    def rows(shape):
        values = rng.uniform(-2.0, 2.0, shape)
        values = np.where(np.abs(values) < 2.0**-6, 0.5, values)
        return tuple(map(tuple, values.astype(BF16).astype(np.float64).tolist()))

    weights = tuple(rows(module.weight_shape(name, D, d, dv)) for name in module.weights)
    return Case(rows((N, D)), weights, rows((N, dv)), (0.75, 1.5, 2.0**-10))


def assert_same_bits(what: str, actual: np.ndarray, expected: np.ndarray) -> None:
    """Equal bfloat16 bit patterns, naming the first difference."""
    assert actual.dtype == expected.dtype == BF16, (what, actual.dtype)
    assert actual.shape == expected.shape, (what, actual.shape, expected.shape)
    same = actual.view(np.uint16) == expected.view(np.uint16)
    if not np.all(same):
        index = tuple(int(i) for i in np.argwhere(~same)[0])
        raise AssertionError(
            f"{what} at index {index}: got {actual[index]!r}, expected {expected[index]!r}"
        )


@pytest.mark.parametrize("seed", range(8))
def test_strict_bfloat16_matches_an_ml_dtypes_emulation(seed):
    """The three kernels in strict bfloat16 bit for bit against the emulations above, in
    ``ml_dtypes.bfloat16`` scalar arithmetic (each + - * / and sqrt computed in float32 and
    rounded once to bfloat16: the correctly rounded bfloat16 operation, 24 >= 2 * 8 + 2; exp
    as libm's float64 exp rounded once). DP: Y and every gradient, and the Jacobian's rows
    are the VJPs of unit gradients; L2 and SCS: Y."""
    c = bf16_case(seed, DP)
    X, G, (Wq, Wk, Wv) = c.arrays(BF16)
    expected = bf_dp_attention(X, G, Wq, Wk, Wv)
    strict = {"strict_fp16": True}
    assert_same_bits("dp Y", dp_attention.forward(X, Wq, Wk, Wv, **strict), expected[0])
    got = dp_attention.vjp(X, G, Wq, Wk, Wv, **strict)
    for name, actual, wanted in zip(("dX", "dWq", "dWk", "dWv"), got, expected[1:], strict=True):
        assert_same_bits(f"dp {name}", actual, wanted)
    J = dp_attention.jacobian(X, Wq, Wk, Wv, **strict)
    for r in range(J.shape[0]):
        unit = np.zeros(G.shape, BF16)
        unit.flat[r] = 1.0
        assert_same_bits(f"dp J row {r}", J[r], bf_dp_attention(X, unit, Wq, Wk, Wv)[1].ravel())
    c = bf16_case(seed, L2)
    X, _, (Wq, Wv) = c.arrays(BF16)
    Y = l2_attention.forward(X, Wq, Wv, **strict)
    assert_same_bits("l2 Y", Y, bf_l2_attention(X, Wq, Wv))
    c = bf16_case(seed, SCS)
    X, _, (Wq, Wk, Wv) = c.arrays(BF16)
    Y = scs_attention.forward(X, Wq, Wk, Wv, *c.scalars, **strict)
    assert_same_bits("scs Y", Y, bf_scs_attention(X, Wq, Wk, Wv, *c.scalars))


@pytest.mark.parametrize("module", MODULES, ids=MODULE_IDS)
def test_strict_bfloat16_results_are_bfloat16_and_other_dtypes_are_type_errors(module):
    """bfloat16 in strict mode: every result a bfloat16 array of the float64 result's shape;
    a weight or G of another float dtype is a TypeError naming it (strict and mixed alike);
    a bfloat16 X reaching the undecorated kernel in mixed mode is a TypeError too."""
    values = arguments(module, BF16)
    wide = arguments(module, np.float64)
    for kind in KINDS:
        got = as_tuple(invoke(module, kind, values, strict_fp16=True))
        shapes = [a.shape for a in as_tuple(invoke(module, kind, wide))]
        assert [a.shape for a in got] == shapes, (kind, [a.shape for a in got], shapes)
        assert all(a.dtype == BF16 for a in got), kind
    for name in (*module.weights, "G"):
        for other in (np.float16, np.float32):
            spoiled = {**values, name: values[name].astype(other)}
            for strict in (True, False):
                with pytest.raises(TypeError, match=rf"^{name}: expected dtype bfloat16"):
                    invoke(module, "vjp", spoiled, strict_fp16=strict)
    names = ("X", *module.weights, *module.scalars)
    with pytest.raises(TypeError, match=r"^X: bfloat16 reaches this path in strict mode only"):
        module.kernel.forward.__wrapped__(*(values[name] for name in names))


# --------------------------------------------------------------------------------------
# SCS: eps = 0 and zero rows
# --------------------------------------------------------------------------------------

#: D = 3 with decoupled projections: q_i = X_i0, k_i = X_i1, v_i = X_i2 (d = dv = 1).
DECOUPLED = ([[1.0, 0.0, 0.0]], [[0.0, 1.0, 0.0]], [[0.0, 0.0, 1.0]])
DECOUPLED_X = [[0.0, 1.0, 2.0], [1.0, -1.0, 0.5], [-2.0, 0.5, -1.0]]


@pytest.mark.parametrize("dtype", DTYPES, ids=DTYPE_IDS)
def test_scs_eps_zero_with_a_zero_query_is_nan_in_that_row_only(dtype):
    """eps = 0, q_0 = 0 (documented): q~_0 = 0/0 = NaN makes row 0 of Y NaN; the other
    rows do not read q_0 and equal the exact values (those of any nonzero q_0: here the
    reference at X_00 = 1)."""
    c = case(DECOUPLED_X, DECOUPLED, scalars=(1.5, 2.0, 0.0))
    X, _, weights = c.arrays(dtype)
    Y = scs_attention.forward(X, *weights, *c.scalars)
    assert_same_values("Y row 0", Y[0], np.full(1, np.nan, dtype))
    moved = [row[:] for row in DECOUPLED_X]
    moved[0][0] = 1.0
    exact = reference_outputs(SCS, case(moved, DECOUPLED, scalars=c.scalars), dtype)[0]
    check_all("scs Y rows 1.. (q_0 = 0, eps = 0)", Y[1:], exact[1:], dtype, FORWARD_SAFETY)


@pytest.mark.parametrize("dtype", DTYPES, ids=DTYPE_IDS)
@pytest.mark.parametrize("column", [1, 2], ids=["zero-key", "zero-value"])
def test_scs_eps_zero_with_a_zero_key_or_value_is_nan_everywhere(dtype, column):
    """eps = 0, k_0 = 0 or v_0 = 0 (documented): every row of Y reads k~_0 (through its
    softmax row) and v~_0, so all of Y, the gradients and the Jacobian are NaN."""
    X = np.array(DECOUPLED_X, dtype=dtype)
    X[0, :] = 1.0
    X[0, column] = 0.0
    weights = tuple(np.array(w, dtype=dtype) for w in DECOUPLED)
    Y = scs_attention.forward(X, *weights, 1.0, 1.0, 0.0)
    assert_same_values("Y", Y, np.full(Y.shape, np.nan, dtype))
    J = scs_attention.jacobian(X, *weights, 1.0, 1.0, 0.0)
    assert np.all(np.isnan(J)), "J: expected all NaN"


@pytest.mark.parametrize("dtype", DTYPES, ids=DTYPE_IDS)
def test_scs_tiny_eps_zero_row_is_the_exact_finite_value(dtype):
    """eps = 5e-324 (the smallest float64): a zero row of X has q~ = k~ = v~ = 0 exactly
    (0 / sqrt(5e-324)), Y is finite and exact; the gradients of order 1/sqrt(eps) ~ 1e161
    are finite in float64 and rounded to inf in float32 and float16, as their exact values
    are."""
    c = SCS_EXAMPLES[3]
    check_case(SCS, c, dtype)
    X, _, weights = c.arrays(dtype)
    assert np.all(np.isfinite(scs_attention.forward(X, *weights, *c.scalars)))


# --------------------------------------------------------------------------------------
# Bad input, layouts, inputs untouched, NaN
# --------------------------------------------------------------------------------------

KINDS = ("forward", "vjp", "jacobian")


def arguments(module: Attention, dtype=np.float64) -> dict[str, Any]:
    """A valid call's arguments (N = 3, D = 2, d = 2, dv = 1)."""
    rng = np.random.default_rng(5)
    values = {"X": rng.normal(size=(3, 2)), "G": rng.normal(size=(3, 1))}
    for name in module.weights:
        values[name] = rng.normal(size=module.weight_shape(name, 2, 2, 1))
    values = {name: value.astype(dtype) for name, value in values.items()}
    values.update(zip(module.scalars, (0.5, 2.0, 1e-6), strict=False))
    return values


def invoke(module: Attention, kind: str, values: dict[str, Any], **options: Any) -> Any:
    names = ("X", *(("G",) if kind == "vjp" else ()), *module.weights, *module.scalars)
    return getattr(module.kernel, kind)(*(values[name] for name in names), **options)


BAD_ARRAYS = [
    (
        "X",
        lambda v: v.astype(np.int64),
        TypeError,
        r"^X: expected a bfloat16, float16, float32 or float64",
    ),
    ("X", lambda v: v.astype(np.complex128), TypeError, r"^X: expected a bfloat16, float16"),
    ("X", lambda v: v[0], ValueError, r"^X: expected shape \(N, D\)"),
    ("X", lambda v: v[:0], ValueError, r"^X: expected shape \(N, D\) with N >= 1"),
    ("Wq", lambda v: v[:, :1], ValueError, r"^Wq: expected shape \(d, 2\)"),
    ("Wq", lambda v: v.astype(np.float32), TypeError, r"^Wq: expected dtype float64"),
    ("Wq", lambda v: v[:0], ValueError, r"^Wq: expected shape \(d, 2\) with d >= 1"),
    ("Wv", lambda v: v.T, ValueError, r"^Wv: expected shape \(d, 2\)"),
    ("Wv", lambda v: v.astype(bool), TypeError, r"^Wv: expected a bfloat16, float16"),
    ("Wk", lambda v: v[:1], ValueError, r"^Wk: expected shape \(2, 2\)"),
    ("Wk", lambda v: v.astype(np.float16), TypeError, r"^Wk: expected dtype float64"),
]


BAD_ARRAY_CASES = [
    pytest.param(module, name, spoil, error, message, id=f"{module.name}-{name}-{number}")
    for module in MODULES
    for number, (name, spoil, error, message) in enumerate(BAD_ARRAYS)
    if name in ("X", *module.weights)
]


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize(("module", "name", "spoil", "error", "message"), BAD_ARRAY_CASES)
def test_bad_array_raises_naming_the_argument(kind, module, name, spoil, error, message):
    values = arguments(module)
    values[name] = spoil(values[name])
    with pytest.raises(error, match=message):
        invoke(module, kind, values)


@pytest.mark.parametrize("module", MODULES, ids=MODULE_IDS)
@pytest.mark.parametrize(
    ("spoil", "error", "message"),
    [
        (lambda v: v[:, :0], ValueError, r"^G: expected shape \(3, 1\)"),
        (lambda v: v.T, ValueError, r"^G: expected shape \(3, 1\)"),
        (lambda v: v.astype(np.float32), TypeError, r"^G: expected dtype float64"),
        (lambda v: v.astype(np.int32), TypeError, r"^G: expected a bfloat16, float16"),
    ],
)
def test_bad_upstream_gradient_raises_naming_g(module, spoil, error, message):
    values = arguments(module)
    values["G"] = spoil(values["G"])
    with pytest.raises(error, match=message):
        invoke(module, "vjp", values)


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize(
    ("name", "value", "error"),
    [
        ("eps", -1e-6, ValueError),
        ("eps", math.nan, ValueError),
        ("eps", math.inf, ValueError),
        ("eps", "1e-6", TypeError),
        ("nu", math.nan, ValueError),
        ("tau", math.inf, ValueError),
        ("tau", None, TypeError),
    ],
)
def test_scs_bad_hyperparameter_raises_naming_it(kind, name, value, error):
    values = arguments(SCS)
    values[name] = value
    with pytest.raises(error, match=rf"^{name}: expected"):
        invoke(SCS, kind, values)


@pytest.mark.parametrize("module", MODULES, ids=MODULE_IDS)
@pytest.mark.parametrize("dtype", DTYPES[:2], ids=DTYPE_IDS[:2])
def test_strict_fp16_is_for_float16_only(module, dtype):
    with pytest.raises(ValueError, match=r"^strict_fp16: applies to float16"):
        invoke(module, "forward", arguments(module, dtype), strict_fp16=True)


MODES = [(dtype, False) for dtype in DTYPES] + [(HALF, True), (BF16, True)]
MODE_IDS = [*DTYPE_IDS, "float16-strict", "bfloat16-strict"]


def layouts(values: dict[str, Any]) -> dict[str, Any]:
    """The same values in non-contiguous arrays: strided views and transposes."""
    out = {}
    for name, value in values.items():
        if isinstance(value, np.ndarray):
            wide = np.zeros((value.shape[0], 2 * value.shape[1]), dtype=value.dtype)
            wide[:, ::2] = value
            out[name] = wide[:, ::2] if name != "X" else np.asfortranarray(value)
        else:
            out[name] = value
    return out


def as_tuple(result: Any) -> tuple[np.ndarray, ...]:
    return result if isinstance(result, tuple) else (result,)


@pytest.mark.parametrize("module", MODULES, ids=MODULE_IDS)
@pytest.mark.parametrize(("dtype", "strict"), MODES, ids=MODE_IDS)
def test_layouts_give_the_same_bits_and_inputs_are_not_written(module, dtype, strict):
    values = arguments(module, dtype)
    copies = {name: np.copy(v) for name, v in values.items() if isinstance(v, np.ndarray)}
    strided = layouts(values)
    for kind in KINDS:
        expected = invoke(module, kind, values, strict_fp16=strict)
        actual = invoke(module, kind, strided, strict_fp16=strict)
        pairs = zip(as_tuple(actual), as_tuple(expected), strict=True)
        for part, (a, e) in enumerate(pairs):
            assert_same_values(f"{module.name}.{kind} part {part}", a, e)
    for name, copy in copies.items():
        assert_same_values(f"{name} after the calls", values[name], copy)
        assert_same_values(f"strided {name} after the calls", strided[name], copy)


@pytest.mark.parametrize("module", MODULES, ids=MODULE_IDS)
@pytest.mark.parametrize(("dtype", "strict"), MODES, ids=MODE_IDS)
@pytest.mark.parametrize("bad", [math.nan, math.inf], ids=["nan", "inf"])
def test_non_finite_token_reaches_every_output_without_a_crash(module, dtype, strict, bad):
    """A NaN or inf in token 0 enters every row's logits (as a key) and P: Y is all NaN."""
    values = arguments(module, dtype)
    values["X"][0, 0] = bad
    Y = invoke(module, "forward", values, strict_fp16=strict)
    assert_same_values(f"{module.name} Y", Y, np.full(Y.shape, np.nan, dtype))
    gradients = invoke(module, "vjp", values, strict_fp16=strict)
    assert all(g.dtype == dtype for g in gradients)


@pytest.mark.parametrize("bad", ["no", 1, None])
@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("module", MODULES, ids=MODULE_IDS)
def test_strict_fp16_of_another_kind_is_a_type_error(module, kind, bad):
    """One check of strict_fp16 for every kernel (kernels/_validate.strict_mode)."""
    with pytest.raises(TypeError, match=r"^strict_fp16: expected True or False"):
        invoke(module, kind, arguments(module, HALF), strict_fp16=bad)


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize(
    ("name", "value", "error"),
    [("eps", True, TypeError), ("nu", "1", TypeError), ("tau", [1.0], TypeError),
     ("eps", 10**400, ValueError)],
)  # fmt: skip
def test_scs_hyperparameters_of_another_kind_are_refused(kind, name, value, error):
    values = arguments(SCS)
    values[name] = value
    with pytest.raises(error, match=rf"^{name}: expected"):
        invoke(SCS, kind, values)


@pytest.mark.parametrize("kind", KINDS)
def test_scs_strict_hyperparameters_that_overflow_half_give_no_warning(kind):
    """Strict mode rounds nu, tau and eps to half: 1e5 is inf there, an IEEE result."""
    values = arguments(SCS, HALF)
    values |= {"nu": 1e5, "tau": 1e5, "eps": 1e5}
    invoke(SCS, kind, values, strict_fp16=True)


@numba.njit(error_model="numpy", fastmath={"reassoc", "contract"})
def _weighted_differences_by_row(T, Q, out):  # pragma: no cover - compiled
    """``_attention._weighted_differences`` one row at a time, as it was before it took four
    rows at a time: to compare bits with."""
    n, width = Q.shape
    for a in range(n):
        for c in range(width):
            out[a, c] = 0.0
        for j in range(n):
            t = T[a, j]
            for c in range(width):
                out[a, c] += t * (Q[a, c] - Q[j, c])


@pytest.mark.parametrize("shape", [(1, 3), (3, 2), (4, 5), (7, 5), (13, 64), (130, 17)])
def test_weighted_differences_by_four_rows_are_the_one_row_sums(shape):
    """Four rows at a time give the bits of one row at a time (every remainder of N modulo
    4; values spread over 2^+-40, some T entries inf or NaN), and each entry is within
    ``2 (N + 2) u sum_j |T_aj (q_a - q_j)|`` of the exact sum (``(N + 1) u`` to first order:
    the difference, the product and N - 1 additions)."""
    n = shape[0]
    rng = np.random.default_rng(n)
    Q = rng.standard_normal(shape) * 2.0 ** rng.integers(-40, 40, size=shape) + 1e3
    T = rng.standard_normal((n, n))
    got, want = np.empty(shape), np.empty(shape)
    _attention._weighted_differences(T, Q, got)
    _weighted_differences_by_row(T, Q, want)
    np.testing.assert_array_equal(got.view(np.int64), want.view(np.int64))
    u = 2.0**-53
    for a in range(n):
        for c in range(shape[1]):
            with mpmath.workdps(60):
                terms = [
                    mpmath.mpf(T[a, j]) * (mpmath.mpf(Q[a, c]) - mpmath.mpf(Q[j, c]))
                    for j in range(n)
                ]
                bound = 2 * (n + 2) * u * mpmath.fsum(abs(t) for t in terms)
                assert abs(mpmath.mpf(got[a, c]) - mpmath.fsum(terms)) <= bound, (a, c)
    if n >= 2:
        T[1, 0], T[n - 1, n - 1] = math.inf, math.nan
        _attention._weighted_differences(T, Q, got)
        _weighted_differences_by_row(T, Q, want)
        np.testing.assert_array_equal(np.isnan(got), np.isnan(want))
        np.testing.assert_array_equal(got[~np.isnan(got)], want[~np.isnan(want)])


@pytest.mark.parametrize("shape", [(1, 3), (7, 5), (130, 64)])
def test_negative_squared_distances_are_symmetric_and_within_their_bound(shape):
    """``_neg_sq_dist`` computes each pair once (j >= i) and mirrors it: S must be symmetric
    bit for bit, and every entry, the lower triangle included, within ``2 (width + 1) u``
    of the exact ``-|q_i - q_j|^2 / scale``: each square errs by 3u (its difference's
    rounding, squared, and its own), the sum of ``width`` nonnegative terms in any order by
    ``(width - 1) u``, the division by u; ``(width + 3) u`` to first order. S_ii = 0."""
    rng = np.random.default_rng(shape[0])
    Q = rng.standard_normal(shape) * 2.0 ** rng.integers(-20, 20, size=shape) + 3.0
    scale = 8.0
    S = np.full((shape[0], shape[0]), np.nan)
    _attention._neg_sq_dist(Q, scale, S)
    np.testing.assert_array_equal(S.view(np.int64), S.T.view(np.int64))
    assert np.all(np.diag(S) == 0.0)
    u = 2.0**-53
    for i in range(shape[0]):
        for j in range(shape[0]):
            with mpmath.workdps(60):
                pairs = zip(Q[i], Q[j], strict=True)
                terms = [(mpmath.mpf(a) - mpmath.mpf(b)) ** 2 for a, b in pairs]
                exact = -mpmath.fsum(terms) / scale
                bound = (2 * shape[1] + 2) * u * abs(exact)
                assert abs(mpmath.mpf(S[i, j]) - exact) <= bound, (i, j, S[i, j], exact)
