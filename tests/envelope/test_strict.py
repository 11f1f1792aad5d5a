"""The predicted strict-fp16 thresholds (``derive/envelope/strict.py``) against the kernels,
for float16 and for bfloat16 input (``DTYPES``: every check below runs in both formats, with
each format's own hand-derived boundaries where a test pins one).

For every module, configuration and threshold, the strict kernel (``strict_fp16=True``) is
called at ``inside`` and at ``outside`` on the threshold's witness input, and

* it returns exactly the strict result the rounding model predicts (every value; NaN where
  a NaN is predicted), which the model derives by replaying the strict loops' roundings in
  NumPy/float16 arithmetic, never by calling a kernel;
* outside, it does what the statement says, checked here independently of the model
  (``OUTCOMES``: NaN, beta, 0, +-inf, y_0 = 1, ...);
* inside, it is finite whenever the configured eps is itself safe (a row whose strict mean
  is exact has zero variance, and then an eps that is 0 in half makes it NaN whatever c is);
* the mixed kernel (the default) stays within ``FLOAT16_ULPS`` of the correctly rounded
  exact value at ``outside`` whenever the exact value is finite: float64 rounded once
  (``tests/helpers/tolerances.py``; ``BFLOAT16_ULPS`` for bfloat16).

Where the strict result inside has a derived accuracy it is checked too: the eps
thresholds' zero rows give beta exactly, two equal attention tokens give Y = c exactly, and
the zero-variance scale r of a subnormal eps obeys the error bound of ``scale_bound``.
Just inside an overflow threshold the strict result is finite but need not be accurate
(the running sum has stalled): the model's exact prediction is what is checked there.
"""

from __future__ import annotations

import math

import numpy as np
import pytest

from derive.envelope import strict as st
from derive.reference.formats import BFLOAT16, round_float64
from kernels import batchnorm, centernorm, dp_attention, layernorm, rmsnorm, softmax, weightnorm
from tests.helpers.norms import assert_same_values
from tests.helpers.tolerances import BFLOAT16_ULPS, FLOAT16_ULPS

HALF = np.dtype(np.float16)
#: The 16-bit formats of the strict kernels.
DTYPES = ("float16", "bfloat16")
#: One rounding's relative error, the smallest normal's exponent, the ULP tolerance.
UNIT_ROUNDOFF = {"float16": 2.0**-11, "bfloat16": 2.0**-8}
EMIN = {"float16": -14, "bfloat16": -126}
ULPS = {"float16": FLOAT16_ULPS, "bfloat16": BFLOAT16_ULPS}
KERNELS = {
    "layernorm": layernorm,
    "rmsnorm": rmsnorm,
    "centernorm": centernorm,
    "batchnorm": batchnorm,
    "weightnorm": weightnorm,
    "softmax": softmax,
    "dp_attention": dp_attention,
}
DIMS = (2, 3, 768, 1024, 4096, 8192)
EPSES = (1e-5, 1e-6, 1e-12)
EPS_MODULES = ("layernorm", "rmsnorm", "batchnorm", "weightnorm")
DENOMS = ("sqrt_var_eps", "std_plus_eps")
#: The Jacobian witnesses are D x D: small D only.
JACOBIAN_DIMS = (2, 3, 8)


# --- helpers --------------------------------------------------------------------------------


def run(module: str, w: st.Witness, strict: bool) -> np.ndarray:
    function = getattr(KERNELS[module], w.call)
    keywords = dict(w.keywords)
    if strict:
        keywords["strict_fp16"] = True
    result = function(*w.arguments, **keywords)
    return result if w.output is None else result[w.output]


def name_of(values: np.ndarray) -> str:
    """The format of a kernel input or output: "float16" or "bfloat16"."""
    return "bfloat16" if values.dtype == BFLOAT16 else "float16"


def ulp(values: np.ndarray) -> np.ndarray:
    """The spacing of the format at each |value| (the subnormal step below the normals)."""
    dtype = name_of(values)
    magnitude = np.abs(values.astype(np.float64))
    exponent = np.floor(np.log2(np.where(magnitude > 0, magnitude, 1.0)))
    precision = -int(math.log2(UNIT_ROUNDOFF[dtype]))
    return 2.0 ** (np.maximum(exponent, EMIN[dtype]) - precision + 1)


def rounded(values: np.ndarray, dtype: str) -> np.ndarray:
    """Float64 values rounded once to the format."""
    return round_float64(values, HALF if dtype == "float16" else BFLOAT16)


def assert_mixed_correct(what: str, mixed: np.ndarray, exact: np.ndarray) -> None:
    """Mixed mode within one ULP (the format's tolerance) of the correctly rounded exact
    value."""
    dtype = name_of(mixed)
    correct = rounded(exact, dtype)
    error = np.abs(mixed.astype(np.float64) - correct.astype(np.float64))
    bad = ~(error <= ULPS[dtype] * ulp(correct))
    if np.any(bad):
        index = tuple(int(i) for i in np.argwhere(bad)[0])
        raise AssertionError(
            f"{what} at index {index}: got {mixed[index]!r}, expected {correct[index]!r} "
            f"(exact {exact[index]!r}) within {ULPS[dtype]} ULP"
        )


def assert_finite(what: str, values: np.ndarray) -> None:
    bad = ~np.isfinite(values)
    if np.any(bad):
        index = tuple(int(i) for i in np.argwhere(bad)[0])
        raise AssertionError(f"{what} at index {index}: got {values[index]!r}, expected finite")


def eps_is_safe(module: str, eps: float, denom: str, dtype: str = "float16") -> bool:
    """Whether the configured eps is inside its own thresholds (a zero-variance row is
    finite): above the "eps" threshold, and for std_plus_eps above "1/eps"."""
    quantity = st.STD_EPS if denom == "std_plus_eps" else st.EPS_ZERO
    found = [t for t in st.strict_thresholds(module, 4, eps, dtype) if t.quantity == quantity]
    return not found or eps > found[0].threshold


def scale_is_finite(module: str, eps: float, denom: str, dtype: str = "float16") -> bool:
    """Whether the eps-subnormal observable is finite: eps safe, and for WeightNorm's dv,
    which forms h(r^2), eps above the "r^2" threshold as well."""
    if module == "weightnorm":
        if eps <= by_quantity(module, 4, eps, dtype)[st.R_SQUARED].threshold:
            return False
    return eps_is_safe(module, eps, denom, dtype)


def by_quantity(
    module: str, dim: int, eps: float | None = None, dtype: str = "float16"
) -> dict[str, st.StrictThreshold]:
    return {t.quantity: t for t in st.strict_thresholds(module, dim, eps, dtype)}


# --- the stated outcomes, checked apart from the model ---------------------------------------


def _all(value: float):
    def check(w: st.Witness, got: np.ndarray) -> np.ndarray:
        return np.full(got.shape, value, got.dtype)

    return check


def _signed_inf(w: st.Witness, got: np.ndarray) -> np.ndarray:
    """+-inf with the sign of the input entry, NaN (0 * inf) at a zero entry."""
    x = np.asarray(w.arguments[0], dtype=np.float64)
    return np.where(x > 0, np.inf, np.where(x < 0, -np.inf, np.nan)).astype(got.dtype)


def _flushed(w: st.Witness, got: np.ndarray) -> np.ndarray:
    expected = np.zeros(got.shape, got.dtype)
    expected[0, 0] = 1.0  # (0, t, ..., t): the maximum keeps all the weight
    return expected


def _absorbed(w: st.Witness, got: np.ndarray) -> np.ndarray:
    """y_0 = 1 and y_j = h(exp(t)): the running sum stayed 1."""
    t = float(w.arguments[0][0, 1])
    expected = np.full(got.shape, rounded(np.array(math.exp(t)), name_of(got)), got.dtype)
    expected[0, 0] = 1.0
    return expected


def _stalled(w: st.Witness, got: np.ndarray) -> np.ndarray:
    """1/2048 (float16) or 1/256 (bfloat16): one over the stalled sum, 2^(p - 1)."""
    return np.full(got.shape, UNIT_ROUNDOFF[name_of(got)], got.dtype)


def _spread(w: st.Witness, got: np.ndarray) -> np.ndarray:
    """dx_0 = y_0 inf = inf, dx_1 = y_1 (-inf + inf) = NaN, the other dx_j = y_j inf = inf."""
    expected = np.full(got.shape, np.inf, got.dtype)
    expected[0, 1] = np.nan
    return expected


#: (module, quantity) -> the strict output outside, as the statement says.
OUTCOMES = {
    ("layernorm", st.SUM_X): _all(np.nan),
    ("batchnorm", st.SUM_X): _all(np.nan),
    ("centernorm", st.SUM_X): _all(-np.inf),
    ("layernorm", st.SUM_SQUARES): _all(st.BETA),
    ("rmsnorm", st.SUM_SQUARES): _all(st.BETA),
    ("batchnorm", st.SUM_SQUARES): _all(st.BETA),
    ("weightnorm", st.NORM2): _all(0.0),
    ("layernorm", st.SQUARE_UNDERFLOW): _signed_inf,
    ("rmsnorm", st.SQUARE_UNDERFLOW): _signed_inf,
    ("batchnorm", st.SQUARE_UNDERFLOW): _signed_inf,
    ("batchnorm", st.STD_SQUARE_UNDERFLOW): _signed_inf,
    ("weightnorm", st.NORM2_UNDERFLOW): _all(np.inf),
    ("layernorm", st.EPS_ZERO): _all(np.nan),
    ("rmsnorm", st.EPS_ZERO): _all(np.nan),
    ("batchnorm", st.EPS_ZERO): _all(np.nan),
    ("batchnorm", st.STD_EPS): _all(np.nan),
    ("weightnorm", st.EPS_ZERO): _all(np.nan),
    ("layernorm", st.R_SQUARED): _all(np.nan),
    ("rmsnorm", st.R_SQUARED): _all(np.nan),
    ("weightnorm", st.R_SQUARED): _all(np.nan),
    ("softmax", st.EXP_UNDERFLOW): _flushed,
    ("softmax", st.EXP_ABSORBED): _absorbed,
    ("softmax", st.EXP_STALLS): _stalled,
    ("softmax", st.G_SPREAD): _spread,
    ("dp_attention", st.QK): _all(np.nan),
}


def check_threshold(
    module: str,
    t: st.StrictThreshold,
    dim: int,
    eps: float | None,
    denom: str = "sqrt_var_eps",
    finite_inside: bool = True,
    dtype: str = "float16",
) -> tuple[st.Witness, st.Witness]:
    """Strict = model at inside and outside, the stated outcome outside, finite inside and
    not yet the outcome, mixed correct outside. Returns the two witnesses."""
    name = f"{module} {t.quantity} D={dim} eps={eps} {denom} {dtype}"
    inside = st.witness(module, t.quantity, dim, t.inside, eps, denom, dtype)
    outside = st.witness(module, t.quantity, dim, t.outside, eps, denom, dtype)
    strict_inside = run(module, inside, strict=True)
    strict_outside = run(module, outside, strict=True)
    for side, w, got in (("inside", inside, strict_inside), ("outside", outside, strict_outside)):
        assert_same_values(f"{name}, strict at {side}: against the model", got, w.strict)
    expected = OUTCOMES[module, t.quantity](outside, strict_outside)
    assert_same_values(f"{name}, strict outside: the stated outcome", strict_outside, expected)
    if finite_inside:
        assert_finite(f"{name}, strict inside", strict_inside)
        # ... and the outcome starts exactly at the threshold (the stalled softmax sum is
        # 2^-11 on both sides: correct at D = 2048, see test_softmax_sum_stalls_at_2048).
        if t.quantity != st.EXP_STALLS:
            unchanged = OUTCOMES[module, t.quantity](inside, strict_inside)
            same = (strict_inside == unchanged) | (np.isnan(strict_inside) & np.isnan(unchanged))
            assert not np.all(same), f"{name}, strict inside: already {strict_inside.ravel()[:4]}"
    if np.all(np.isfinite(outside.exact)):
        mixed = run(module, outside, strict=False)
        assert_mixed_correct(f"{name}, mixed outside", mixed, outside.exact)
    return inside, outside


# --- 1. Overflowing sums (and the softmax sums) at the default eps ------------------------------

#: The thresholds in c (or t) that do not depend on eps.
SUM_QUANTITIES = {
    "layernorm": (st.SUM_X, st.SUM_SQUARES),
    "rmsnorm": (st.SUM_SQUARES,),
    "centernorm": (st.SUM_X,),
    "batchnorm": (st.SUM_X, st.SUM_SQUARES),
    "weightnorm": (st.NORM2,),
    "softmax": (st.EXP_UNDERFLOW, st.EXP_ABSORBED, st.G_SPREAD),
    "dp_attention": (st.QK,),
}
SUM_CASES = [
    pytest.param(
        module, quantity, dim, denom, dtype, id=f"{module}-{quantity}-D{dim}-{denom}-{dtype}"
    )
    for module, quantities in SUM_QUANTITIES.items()
    for quantity in quantities
    for dim in DIMS
    for denom in (DENOMS if module == "batchnorm" else DENOMS[:1])
    for dtype in DTYPES
]


@pytest.mark.parametrize(("module", "quantity", "dim", "denom", "dtype"), SUM_CASES)
def test_overflowing_sum(module, quantity, dim, denom, dtype):
    thresholds = by_quantity(module, dim, None, dtype)
    # Only a sum of one term cannot overflow; from D = 2 on some finite c does.
    assert quantity in thresholds, f"{module} D={dim} {dtype}: no {quantity!r} threshold"
    eps = st.DEFAULT_EPS.get(module)
    # Inside, a positive strict variance (the squares' sums) keeps r finite whatever eps
    # is; an all-c row whose strict mean is exact has variance 0 and needs a safe eps.
    finite_inside = quantity != st.SUM_X or eps_is_safe(module, eps or 0.0, denom, dtype)
    check_threshold(module, thresholds[quantity], dim, eps, denom, finite_inside, dtype)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("module", EPS_MODULES)
def test_sum_thresholds_do_not_depend_on_eps(module, dtype):
    for dim in DIMS:
        for quantity in SUM_QUANTITIES[module]:
            values = {by_quantity(module, dim, eps, dtype)[quantity].threshold for eps in EPSES}
            assert len(values) == 1, f"{module} {quantity} D={dim}: thresholds {values}"


def test_single_terms_have_no_sum_threshold():
    """A sum of one term is the term itself: sum(x) and |v|^2 of D = 1 never reach inf
    (RMSNorm's single square does, c^2 >= 65520 from c = 256)."""
    assert st.SUM_X not in by_quantity("layernorm", 1)
    assert st.SUM_SQUARES not in by_quantity("layernorm", 1)  # the row (0,): no squares
    assert by_quantity("rmsnorm", 1)[st.SUM_SQUARES].threshold == 256.0
    assert by_quantity("dp_attention", 1)[st.QK].threshold == 256.0
    # bfloat16: c^2 reaches 2^128 - 2^119 from c = 2^64 (c = 2^64 - 2^56 squares to
    # 2^128 (1 - 2^-7)^2, below it: finite)
    assert by_quantity("rmsnorm", 1, None, "bfloat16")[st.SUM_SQUARES].threshold == 2.0**64


#: (k, m): the pinned power-of-two cases of tests/kernels/test_norms.py and
#: tests/kernels/test_batchnorm.py.
POWER_DIMS = (1, 4, 8, 11)


@pytest.mark.parametrize("m", POWER_DIMS)
def test_agrees_with_the_pinned_powers_of_two(m):
    """D = 2^m, c = 2^k: the row sum overflows iff k + m >= 16 and the square sum iff
    2k + m >= 16 (exact partial sums; tests/kernels/test_norms.py section 5), so the thresholds lie
    in (2^(15-m), 2^(16-m)] and (2^k_safe, 2^k_over] with 2 k_safe + m <= 15 < 2 k_over + m."""
    dim = 2**m
    t = by_quantity("layernorm", dim)
    assert 2.0 ** (15 - m) < t[st.SUM_X].threshold <= 2.0 ** (16 - m), t[st.SUM_X]
    k_over = -(-(16 - m) // 2)
    assert 2.0 ** (k_over - 1) < t[st.SUM_SQUARES].threshold <= 2.0**k_over, t[st.SUM_SQUARES]


def test_long_rows_stall_before_they_overflow():
    """The derivation in the module docstring: for D = 4096 and 8192, c = 4 (squares 16, a
    tie on the spacing 32 above 32768) stalls the square sum at 32768 and c = 4 + 2^-8 is
    the first to overflow; just inside, strict RMSNorm is finite but far off: mean square
    32768 / D instead of 16, y = beta + 4 / sqrt(32768 / D) (2.0 + beta for D = 8192)."""
    for dim in (4096, 8192):
        t = by_quantity("rmsnorm", dim)[st.SUM_SQUARES]
        assert (t.threshold, t.inside) == (4.0 + 2.0**-8, 4.0), t
        w = st.witness("rmsnorm", st.SUM_SQUARES, dim, t.inside)
        strict = run("rmsnorm", w, strict=True)
        expected = np.full((1, dim), st.BETA + 4.0 / math.sqrt(32768 / dim), HALF)
        assert_same_values(f"strict rmsnorm of {dim} x 4", strict, expected)
    t = by_quantity("layernorm", 768)[st.SUM_X]
    assert (t.threshold, t.inside) == (80.0625, 80.0), t


# --- 2. Square underflow: only where eps is 0 in half (or 1/eps overflows) ----------------------

UNDERFLOW_QUANTITIES = {
    "layernorm": (st.SQUARE_UNDERFLOW,),
    "rmsnorm": (st.SQUARE_UNDERFLOW,),
    "batchnorm": (st.SQUARE_UNDERFLOW, st.STD_SQUARE_UNDERFLOW),
    "weightnorm": (st.NORM2_UNDERFLOW,),
}
#: bfloat16 reaches these only with eps far below the others: 1e-40 is the subnormal
#: 2^-133 (1/eps overflows), 1e-41 is 0.
BFLOAT16_EPSES = (1e-5, 1e-40, 1e-41)
UNDERFLOW_CASES = [
    pytest.param(
        module, quantity, dim, eps, dtype, id=f"{module}-{quantity}-D{dim}-eps{eps:g}-{dtype}"
    )
    for module, quantities in UNDERFLOW_QUANTITIES.items()
    for quantity in quantities
    for dim in DIMS
    for dtype in DTYPES
    for eps in (EPSES if dtype == "float16" else BFLOAT16_EPSES)
]


@pytest.mark.parametrize(("module", "quantity", "dim", "eps", "dtype"), UNDERFLOW_CASES)
def test_square_underflow(module, quantity, dim, eps, dtype):
    """Listed exactly when the zero-variance scale is inf (eps 0 in the format; for
    std_plus_eps 1/eps overflowing: eps at most 2^-16 in half, 2^-128 in bfloat16), and
    then strict gives +-inf up to the threshold, finite above."""
    std = quantity == st.STD_SQUARE_UNDERFLOW
    eps_h = float(rounded(np.array(eps), dtype))
    largest_overflowing = 2.0**-16 if dtype == "float16" else 2.0**-128
    reachable = eps_h <= largest_overflowing if std else eps_h == 0.0
    thresholds = by_quantity(module, dim, eps, dtype)
    assert (quantity in thresholds) == reachable, f"{module} D={dim} eps={eps}: {thresholds}"
    if reachable:
        denom = "std_plus_eps" if std else "sqrt_var_eps"
        check_threshold(module, thresholds[quantity], dim, eps, denom, True, dtype)


# --- 3. eps itself --------------------------------------------------------------------------------

EPS_QUANTITIES = {
    "layernorm": (st.EPS_ZERO, st.R_SQUARED, st.EPS_SUBNORMAL),
    "rmsnorm": (st.EPS_ZERO, st.R_SQUARED, st.EPS_SUBNORMAL),
    "batchnorm": (st.EPS_ZERO, st.STD_EPS, st.EPS_SUBNORMAL),
    "weightnorm": (st.EPS_ZERO, st.R_SQUARED, st.EPS_SUBNORMAL),
}
EPS_CASES = [
    pytest.param(
        module, quantity, dim, eps, dtype, id=f"{module}-{quantity}-D{dim}-eps{eps:g}-{dtype}"
    )
    for module, quantities in EPS_QUANTITIES.items()
    for quantity in quantities
    for dim in (JACOBIAN_DIMS if quantity == st.R_SQUARED and module != "weightnorm" else DIMS)
    for dtype in DTYPES
    for eps in (EPSES if dtype == "float16" else BFLOAT16_EPSES)
]

#: The eps boundaries, derived by hand. float16: 2^-25 (the tie between 0 and 2^-24, to
#: even 0); 256.5 * 2^-24 (rounds to 2^-16, where 1/eps = 65536 and r^2 = 2^16 are inf; the
#: next half 257 * 2^-24 gives 65281.2 -> 65280, r = 255.5, r^2 -> 65280); the float64
#: below 2^-14 - 2^-25 (that midpoint is a tie rounding to the even 2^-14, a normal).
#: bfloat16, the same reasoning with subnormal steps of 2^-133: 2^-134 (the tie between 0
#: and 2^-133); 32.5 * 2^-133 (a tie rounding to the even 2^-128 = 32 * 2^-133, where
#: 1/eps = 2^128 and r^2 = 2^128 are inf; the next value 33 * 2^-133 gives 1/eps = 2^128
#: 32/33, rounded to 2^128 (1 - 2^-5) < 2^128 - 2^119, and sqrt(eps) = 2^-64 (1 + 2^-6),
#: r = 2^64 0.984375, r^2 = 2^128 0.969: finite); the float64 below 2^-126 - 2^-134.
EPS_BOUNDARIES = {
    "float16": {
        st.EPS_ZERO: 2.0**-25,
        st.STD_EPS: 256.5 * 2.0**-24,
        st.R_SQUARED: 256.5 * 2.0**-24,
        st.EPS_SUBNORMAL: math.nextafter(2.0**-14 - 2.0**-25, 0.0),
    },
    "bfloat16": {
        st.EPS_ZERO: 2.0**-134,
        st.STD_EPS: 32.5 * 2.0**-133,
        st.R_SQUARED: 32.5 * 2.0**-133,
        st.EPS_SUBNORMAL: math.nextafter(2.0**-126 - 2.0**-134, 0.0),
    },
}


def scale_bound(eps: float, std: bool, dtype: str = "float16") -> float:
    """Relative error bound of the strict zero-variance scale r against 1/sqrt(eps) (1/eps
    for std_plus_eps). eps in the format is eps (1 + delta), |delta| <= u for a normal and
    <= (half the smallest subnormal) / eps for a subnormal; then sqrt and 1/x (or 1/x
    alone) round once each, (1 + u') with |u'| <= u, and dx = h(r * 1) = r adds nothing
    (u = 2^-11 in half, 2^-8 in bfloat16). Worst case: (1 - delta)^(-1/2) (1 + u) / (1 - u)
    - 1, or (1 - delta)^-1 (1 + u) - 1."""
    u = UNIT_ROUNDOFF[dtype]
    half_step = 2.0 ** (EMIN[dtype] + math.log2(u))  # half the smallest subnormal
    delta = max(u, half_step / eps)
    if std:
        return (1 + u) / (1 - delta) - 1
    return (1 + u) / ((1 - u) * math.sqrt(1 - delta)) - 1


def check_scale(
    what: str, w: st.Witness, strict: np.ndarray, eps: float, std: bool, dtype: str
) -> None:
    """dx_0 (dv_0) is the strict scale r; within scale_bound of the exact r."""
    r, exact = float(strict.ravel()[0]), float(w.exact.ravel()[0])
    bound = scale_bound(eps, std, dtype)
    assert abs(r / exact - 1) <= bound, (
        f"{what} at index 0: got {r!r}, expected {exact!r} within {bound:.3g} relative"
    )


@pytest.mark.parametrize(("module", "quantity", "dim", "eps", "dtype"), EPS_CASES)
def test_eps_threshold(module, quantity, dim, eps, dtype):
    t = by_quantity(module, dim, eps, dtype)[quantity]
    assert t.threshold == EPS_BOUNDARIES[dtype][quantity], t
    assert t.inside == math.nextafter(t.threshold, math.inf), t
    denom = "std_plus_eps" if quantity == st.STD_EPS else "sqrt_var_eps"
    if quantity == st.EPS_SUBNORMAL:
        check_subnormal_eps(module, t, dim, eps, dtype)
        return
    inside, _ = check_threshold(module, t, dim, eps, denom, True, dtype)
    if quantity in (st.EPS_ZERO, st.STD_EPS):  # the zero row inside: exactly beta (W = 0)
        exact = rounded(inside.exact, dtype)
        assert_same_values(f"{module} {quantity}: strict inside", inside.strict, exact)
    # The configured eps on its side of the boundary: the model and the kernel agree.
    w = st.witness(module, quantity, dim, eps, eps, denom, dtype)
    strict = run(module, w, strict=True)
    assert_same_values(f"{module} {quantity} at the configured eps {eps}", strict, w.strict)
    fails = eps <= t.threshold
    assert bool(np.all(np.isnan(strict))) == fails, f"{module} {quantity} eps={eps}: {strict}"


def check_subnormal_eps(
    module: str, t: st.StrictThreshold, dim: int, eps: float, dtype: str
) -> None:
    """No failure at this boundary, only precision: inside eps is the smallest normal (2^-14
    in half, 2^-126 in bfloat16), outside the largest subnormal (1023 * 2^-24, 127 *
    2^-133); the strict scale stays within scale_bound at both and at the configured eps
    (unless that is past the "eps" or "1/eps" threshold)."""
    normal, largest_subnormal = {
        "float16": (2.0**-14, 1023 * 2.0**-24),
        "bfloat16": (2.0**-126, 127 * 2.0**-133),
    }[dtype]
    assert float(rounded(np.array(t.inside), dtype)) == normal
    assert float(rounded(np.array(t.outside), dtype)) == largest_subnormal
    denoms = DENOMS if module == "batchnorm" else DENOMS[:1]
    for denom in denoms:
        std = denom == "std_plus_eps"
        for value in (t.inside, t.outside, eps):
            what = f"{module} eps subnormal D={dim} {denom} at eps={value!r} {dtype}"
            w = st.witness(module, t.quantity, dim, value, eps, denom, dtype)
            strict = run(module, w, strict=True)
            assert_same_values(f"{what}: strict against the model", strict, w.strict)
            if not scale_is_finite(module, value, denom, dtype):
                continue  # past the "eps", "1/eps" or (WeightNorm's dv) "r^2" threshold
            assert_finite(what, strict)
            check_scale(what, w, strict, value, std, dtype)
            assert_mixed_correct(f"{what}, mixed", run(module, w, strict=False), w.exact)


# --- 4. Softmax: the stalled sum of a constant row -------------------------------------------


#: Where a running sum of ones stalls: 2048 in half (2048 + 1 is a tie, to even 2048), 256
#: in bfloat16 (2^p for p significant bits).
STALL = {"float16": 2048, "bfloat16": 256}


@pytest.mark.parametrize("dtype", DTYPES)
def test_softmax_sum_stalls(dtype):
    """The threshold is in D (2049 in half, 257 in bfloat16, the same for every
    configuration): the strict kernel is correctly rounded at D = 2048 (256) and returns
    2^-11 (2^-8) at D = 2049 (257), where 1/D rounds to a smaller value."""
    stall = STALL[dtype]
    t = by_quantity("softmax", 768, None, dtype)[st.EXP_STALLS]
    assert (t.threshold, t.inside) == (stall + 1.0, float(stall)), t
    inside, outside = check_threshold("softmax", t, 768, None, dtype=dtype)
    exact = rounded(inside.exact, dtype)
    assert_same_values(f"strict softmax at D = {stall}", inside.strict, exact)
    correct = rounded(outside.exact, dtype)
    assert np.all(outside.strict != correct), f"D = {stall + 1}: {outside.strict[0, 0]!r}"


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("dim", (*DIMS, 256, 257, 300))
def test_softmax_constant_row(dim, dtype):
    """Correctly rounded 1/D up to the stall (D = 2048 in half, 256 in bfloat16), the
    stalled 1/2048 (1/256) beyond (D = 4096: twice 1/D in half)."""
    w = st.witness("softmax", st.EXP_STALLS, dim, float(dim), dtype=dtype)
    strict = run("softmax", w, strict=True)
    assert_same_values(f"strict softmax at D = {dim}", strict, w.strict)
    expected = _stalled(w, strict) if dim > STALL[dtype] else rounded(w.exact, dtype)
    assert_same_values(f"strict softmax at D = {dim}: the stated value", strict, expected)


# --- 5. Attention: the report's setting and the exact value inside ----------------------------


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("dim", DIMS)
def test_attention_is_exact_inside_the_q_k_threshold(dim, dtype):
    t = by_quantity("dp_attention", dim, None, dtype)[st.QK]
    inside = st.witness("dp_attention", st.QK, dim, t.inside, dtype=dtype)
    strict = run("dp_attention", inside, strict=True)
    assert_same_values(f"strict attention, d = {dim}, c = {t.inside}", strict, inside.exact)


def test_attention_threshold_with_identity_weights():
    """derive/report/attention.py::_strict_overflow's setting (D = d = dv = 64, identity
    weights, two rows of c) has the same logits as the witness: q.k = 64 c^2. Predicted:
    c = 32 (64 * 1024 = 65536 -> inf); c = 31.984375 sums to 65504."""
    t = by_quantity("dp_attention", 64)[st.QK]
    assert (t.threshold, t.inside) == (32.0, 31.984375), t
    eye = np.eye(64, dtype=HALF)
    for c, finite in ((t.inside, True), (t.outside, False)):
        X = np.full((2, 64), c, HALF)
        strict = dp_attention.forward(X, eye, eye, eye, strict_fp16=True)
        expected = np.full((2, 64), c if finite else np.nan, HALF)
        assert_same_values(f"strict attention of two rows of {c}", strict, expected)
        assert_same_values(
            f"mixed attention of two rows of {c}",
            dp_attention.forward(X, eye, eye, eye),
            np.full((2, 64), c, HALF),
        )


# --- 6. The API --------------------------------------------------------------------------------


@pytest.mark.parametrize("dtype", DTYPES)
def test_every_module_has_thresholds_with_consistent_fields(dtype):
    values = st.FORMATS[dtype].values
    for module in st.STRICT_MODULES:
        thresholds = st.strict_thresholds(module, 768, None, dtype)
        assert thresholds, module
        for t in thresholds:
            assert t.module == module
            assert t.outside == t.threshold, t
            assert t.statement and t.parameter and t.quantity, t
            checked = t.quantity == st.EPS_SUBNORMAL or (module, t.quantity) in OUTCOMES
            assert checked, f"no stated outcome checked for {t}"
            if t.parameter != "eps" and not t.parameter.startswith("D"):
                # adjacent values of the format: nothing lies between inside and outside
                a, b = sorted((abs(t.inside), abs(t.outside)))
                index = int(np.searchsorted(values, a))
                assert values[index] == a and values[index + 1] == b, t


def test_bad_arguments():
    with pytest.raises(ValueError, match=r"^module"):
        st.strict_thresholds("groupnorm", 8)
    with pytest.raises(ValueError, match=r"^dim"):
        st.strict_thresholds("layernorm", 0)
    with pytest.raises(ValueError, match=r"^dim"):
        st.strict_thresholds("centernorm", 1)
    with pytest.raises(ValueError, match=r"^eps"):
        st.strict_thresholds("layernorm", 8, -1.0)
    with pytest.raises(ValueError, match=r"^quantity"):
        st.witness("centernorm", st.SUM_SQUARES, 8, 1.0)
    with pytest.raises(ValueError, match=r"^dtype"):
        st.strict_thresholds("layernorm", 8, None, "float8_e4m3fn")


def test_the_scalar_rounding_is_the_array_rounding():
    """``Narrow.h`` (a scalar path, for speed) equals ``round_float64`` on every bfloat16
    value, every midpoint and its float64 neighbours, and values past the largest."""
    fmt = st.FORMATS["bfloat16"]
    values = fmt.values
    midpoints = (values[:-1] + values[1:]) / 2
    points = np.concatenate(
        [
            values,
            midpoints,
            np.nextafter(midpoints, 0.0),
            np.nextafter(midpoints, np.inf),
            [fmt.overflow, np.nextafter(fmt.overflow, 0.0), 2.0**128, 1e300],
        ]
    )
    points = np.concatenate([points, -points])
    expected = round_float64(points, BFLOAT16).astype(np.float64)
    got = np.array([fmt.h(float(v)) for v in points])
    assert_same_values("Narrow.h against round_float64", got, expected)
