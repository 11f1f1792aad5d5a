"""The mpmath references: correct rounding, ULP arithmetic and adaptive-precision evaluation.

Where the expected values come from
-----------------------------------
* Rounding is checked against NumPy's float64 -> float16/float32 casts (correctly rounded,
  straight from double) and, in float64's subnormal range, against CPython's
  ``float(Fraction)``, whose integer true division rounds correctly.
* Closed forms are textbook identities, e.g. ``sigmoid(ln 3) = 3/4`` and
  ``GeLU'(sqrt 2) = 1/2 + erf(1)/2 + exp(-1)/sqrt(pi)`` (from
  ``GeLU'(x) = Phi(x) + x phi(x)`` with ``Phi(sqrt 2) = (1 + erf(1))/2``).
* Cancellation cases are compared with hand-derived forms free of cancellation, evaluated in
  mpmath at 6000 bits (``_hand``), with ``sigma(t) = 1 / (1 + e^-t)``,
  ``u = sqrt(2/pi) (x + 0.044715 x^3)`` and ``u' = sqrt(2/pi) (1 + 3 * 0.044715 x^2)``:

  - GeLU-tanh: ``x/2 (1 + tanh u) = x sigma(2u)``;
    its derivative ``sigma(2u) (1 + 2 x u' sigma(-2u))``;
  - GeLU: ``x/2 (1 + erf(x/sqrt 2)) = x/2 erfc(-x/sqrt 2)``;
  - Swish's derivative: ``sigma(x) (1 + x sigma(-x))``;
  - the sigmoid derivative: ``sigma(x) (1 - sigma(x)) = sigma(x) sigma(-x)``.
"""

from __future__ import annotations

import math
from fractions import Fraction

import mpmath
import numpy as np
import pytest
import sympy as sp
from hypothesis import example, given
from hypothesis import strategies as st

from derive.definitions.activations import ELEMENTWISE, SIGMOID, x
from derive.reference.core import (
    FLOOR_BITS,
    PrecisionError,
    condition_number,
    correctly_rounded,
    evaluate,
    float16_table,
    float_format,
    reference_array,
    reference_values,
    round_to_dtype,
    ulp,
    ulp_error,
)

DTYPES = (np.float16, np.float32, np.float64)
ALL_HALVES = np.arange(1 << 16, dtype=np.uint16).view(np.float16)
POSITIVE_FINITE_HALVES = ALL_HALVES[:0x7C00]  # +0 up to 65504

#: Digits demanded of evaluate() in these tests, and the bits of the expected forms.
DIGITS = 50
HAND_BITS = 6000
RELATIVE = mpmath.mpf(10) ** -DIGITS


def mp(value: float | int) -> mpmath.mpf:
    """An exact mpf (the context precision must not round the input)."""
    with mpmath.workprec(2000):
        return mpmath.mpf(value)


def pow2(exponent: int) -> mpmath.mpf:
    return mpmath.ldexp(mpmath.mpf(1), exponent)


def half_bits(value: np.floating) -> int:
    return int(np.array(value, dtype=np.float16).view(np.uint16))


def _np_cast(value: float, dtype) -> np.floating:
    with np.errstate(over="ignore"):
        return np.dtype(dtype).type(value)


def _same(a: np.floating, b: np.floating) -> bool:
    """Equal as IEEE values of one dtype, bit for bit (so -0.0 differs from 0.0), NaN = NaN."""
    return a.dtype == b.dtype and (
        (np.isnan(a) and np.isnan(b)) or np.array(a).tobytes() == np.array(b).tobytes()
    )


def _show(value: mpmath.mpf) -> str:
    return mpmath.nstr(value, 60)


def assert_close(actual, expected, where: str, floor_bits: int = FLOOR_BITS) -> None:
    """|actual - expected| <= 10^-50 max(|expected|, 2^-floor_bits), evaluate()'s contract."""
    with mpmath.workprec(HAND_BITS):
        bound = RELATIVE * max(abs(expected), pow2(-floor_bits))
        error = abs(actual - expected)
    assert error <= bound, (
        f"{where}: actual {_show(actual)}, expected {_show(expected)}, error {_show(error)}"
    )


# --- formats ---------------------------------------------------------------------------------


@pytest.mark.parametrize("dtype", DTYPES)
def test_format_parameters_match_finfo(dtype):
    fmt, info = float_format(dtype), np.finfo(dtype)
    for name, ours, theirs in [
        ("max_finite", fmt.max_finite, info.max),
        ("smallest_normal", fmt.smallest_normal, info.smallest_normal),
        ("smallest_subnormal", fmt.smallest_subnormal, info.smallest_subnormal),
    ]:
        assert ours == mp(float(theirs)), f"{dtype.__name__} {name}: {ours} != {theirs}"
    half_ulp = ulp(fmt.max_finite, dtype) / 2
    assert fmt.overflow_threshold == mpmath.fadd(fmt.max_finite, half_ulp, exact=True)


def test_unsupported_dtypes_are_refused():
    for bad in (np.int32, np.complex64, np.longdouble):
        with pytest.raises(TypeError, match="float16, bfloat16, float32 or float64"):
            round_to_dtype(1.0, bad)


# --- round_to_dtype --------------------------------------------------------------------------


def test_every_half_is_its_own_rounding():
    fmt16 = np.float16
    for bits in range(1 << 16):
        h = ALL_HALVES[bits]
        got = round_to_dtype(mp(float(h)), fmt16)
        if np.isnan(h):
            assert np.isnan(got), f"half bits {bits:#06x}: {got!r} for NaN"
        elif h == 0:  # mpmath has no -0: both zeros come back as +0
            assert got == 0 and not np.signbit(got), f"half bits {bits:#06x}: {got!r}"
        else:
            assert half_bits(got) == bits, f"half bits {bits:#06x} ({h!r}): got {got!r}"


def test_every_half_midpoint_and_its_neighbours():
    """At every midpoint of two positive halves: the tie goes to even, just above rounds up,
    just below rounds down; NumPy's cast of the float64 midpoint and its float64 neighbours
    agrees. (The top midpoint, 65520, is the overflow threshold: tested below.)"""
    tiny = pow2(-200)
    for h in POSITIVE_FINITE_HALVES[:-1]:
        low, high = mp(float(h)), mp(float(np.nextafter(h, np.float16(np.inf))))
        with mpmath.workprec(300):
            mid = (low + high) / 2
            above, below = mid + tiny, mid - tiny
        even = h if half_bits(h) % 2 == 0 else np.nextafter(h, np.float16(np.inf))
        mid64 = float(mid)  # exact: a half midpoint has 12 significant bits
        cases = [
            ("tie", mid, even, _np_cast(mid64, np.float16)),
            ("above", above, np.float16(high), _np_cast(np.nextafter(mid64, np.inf), np.float16)),
            ("below", below, h, _np_cast(np.nextafter(mid64, 0.0), np.float16)),
        ]
        for label, value, expected, numpy_says in cases:
            got = round_to_dtype(value, np.float16)
            assert _same(got, expected) and _same(got, numpy_says), (
                f"{label} the midpoint of {h!r} and its successor ({_show(value)}): "
                f"got {got!r}, expected {expected!r}, NumPy {numpy_says!r}"
            )
            negative = round_to_dtype(mpmath.fneg(value, exact=True), np.float16)
            assert _same(negative, -expected), f"-({_show(value)}): got {negative!r}"


@pytest.mark.parametrize("dtype", DTYPES)
def test_overflow_threshold(dtype):
    """Half-way between the largest finite number and 2^(emax+1) ties to the even 2^(emax+1),
    which overflows: float16 from 65520 on, float32 from max + ulp/2 on."""
    fmt = float_format(dtype)
    edge = fmt.overflow_threshold
    top = dtype(float(fmt.max_finite))
    with mpmath.workprec(2000):
        cases = [
            (edge, dtype(np.inf)),
            (-edge, dtype(-np.inf)),
            (edge * (1 - pow2(-1000)), top),
            (-edge * (1 - pow2(-1000)), -top),
            (edge * 4, dtype(np.inf)),
        ]
    for value, expected in cases:
        got = round_to_dtype(value, dtype)
        assert _same(got, expected), f"{_show(value)} in {dtype.__name__}: {got!r} != {expected!r}"
    if dtype is not np.float64:  # the threshold and its neighbours are float64 numbers
        edge64 = float(edge)
        assert _same(round_to_dtype(edge64, dtype), _np_cast(edge64, dtype))
        below = np.nextafter(edge64, 0.0)
        assert (
            _same(round_to_dtype(below, dtype), _np_cast(below, dtype))
            and _np_cast(below, dtype) == top
        ), f"NumPy rounds {below!r} to {_np_cast(below, dtype)!r}"
    if dtype is np.float16:
        assert round_to_dtype(65520, dtype) == np.inf
        assert round_to_dtype(65519.999, dtype) == 65504


def test_float64_subnormal_double_rounding_trap():
    """v = (5/2 + 2^-80) 2^-1074 lies just above the midpoint of 2 and 3 times the smallest
    subnormal, so it rounds to 3 * 2^-1074. Rounding first to 53 bits (what ``float(mpf)``
    does before ``ldexp``) lands exactly on the midpoint, which then ties to even: 2 * 2^-1074.
    """
    with mpmath.workprec(300):
        v = mpmath.ldexp(mpmath.mpf(5) / 2 + pow2(-80), -1074)
    with mpmath.workprec(53):
        v53 = +v  # the first of the two roundings
    tiny = math.ulp(0.0)
    assert v53 == mpmath.ldexp(mpmath.mpf(5) / 2, -1074), "the case no longer double-rounds"
    assert round_to_dtype(v53, np.float64) == 2 * tiny  # the trap: two roundings give 2
    got = round_to_dtype(v, np.float64)
    assert got == 3 * tiny, f"{_show(v)}: got {got!r}, expected {3 * tiny!r}"
    assert float(Fraction(5 * 2**80 + 2, 2 ** (1074 + 81))) == 3 * tiny  # the oracle agrees


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        (pow2(-1075), 0.0),  # the tie between 0 and 2^-1074 goes to the even 0
        (mpmath.fadd(pow2(-1075), pow2(-1200), exact=True), 2.0**-1074),
        (-pow2(-1075), -0.0),  # a negative underflow keeps its sign
        (pow2(-1076) * 3, 2.0**-1074),
        (pow2(-1074) * 3 / 2, 2.0**-1073),  # tie between 1 and 2 ulps: to the even 2
        (mpmath.fsub(pow2(-1022), pow2(-1075), exact=True), 2.0**-1022),  # up into normals
        (pow2(-5000), 0.0),
    ],
)
def test_float64_gradual_underflow(value, expected):
    got = round_to_dtype(value, np.float64)
    assert _same(got, np.float64(expected)), f"{_show(value)}: got {got!r}, expected {expected!r}"


@given(
    man=st.integers(min_value=1, max_value=2**200),
    exp=st.integers(min_value=-1300, max_value=1000),
    negative=st.booleans(),
)
@example(man=5 * 2**80 + 2, exp=-1074 - 81, negative=False)
@example(man=2**54 - 1, exp=-1074 - 54, negative=True)
def test_float64_against_fraction(man, exp, negative):
    value = mpmath.mp.make_mpf(mpmath.libmp.from_man_exp(-man if negative else man, exp))
    exact = Fraction(-man if negative else man) * Fraction(2) ** exp
    try:
        expected = np.float64(float(exact))
    except OverflowError:
        expected = np.float64(-np.inf if negative else np.inf)
    if expected == 0:
        expected = np.float64(-0.0 if negative else 0.0)
    got = round_to_dtype(value, np.float64)
    assert _same(got, expected), f"{man} * 2^{exp}: got {got!r}, expected {expected!r}"


@pytest.mark.parametrize("dtype", [np.float16, np.float32])
@given(value=st.floats(allow_nan=True, allow_infinity=True, allow_subnormal=True))
@example(value=65519.99999999999)
@example(value=2.0**-25)
@example(value=2.0**-25 + 2.0**-60)
@example(value=-(2.0**-150))
@example(value=float(np.finfo(np.float32).max) * (1 + 2.0**-24))
def test_narrow_dtypes_agree_with_numpy(dtype, value):
    got = round_to_dtype(value, dtype)
    expected = _np_cast(value, dtype)
    assert _same(got, expected) or (value == 0 and got == expected), (
        f"{value!r} to {dtype.__name__}: got {got!r}, NumPy {expected!r}"
    )


# --- ulp and ulp_error -----------------------------------------------------------------------


def test_ulp_matches_numpy_spacing_for_every_positive_half():
    for h in POSITIVE_FINITE_HALVES[:-1]:
        got, expected = ulp(float(h), np.float16), mp(float(np.spacing(h)))
        assert got == expected, f"ulp({h!r}): got {got}, expected {expected}"


@given(value=st.floats(min_value=0, allow_infinity=False, allow_nan=False, width=32))
def test_ulp_matches_numpy_spacing_float32(value):
    v = np.float32(value)
    if v == np.finfo(np.float32).max:
        return  # NumPy's spacing there is the distance to infinity
    assert ulp(float(v), np.float32) == mp(float(np.spacing(v))), f"ulp({v!r})"


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        (mp(1), pow2(-10)),
        (mp(1) - pow2(-30), pow2(-11)),  # the exact value's own binade counts
        (mp(0), pow2(-24)),
        (pow2(-20), pow2(-24)),  # subnormal range
        (mp(65504), mp(32)),
        (mp(1e6), mp(32)),  # beyond the range: the top binade's spacing
    ],
)
def test_ulp_float16_conventions(value, expected):
    assert ulp(value, np.float16) == expected, f"ulp({_show(value)})"
    assert ulp(-value, np.float16) == expected, f"ulp(-{_show(value)})"


@pytest.mark.parametrize(
    ("actual", "exact", "expected"),
    [
        (np.float16(1), mp(1), 0.0),
        (np.float16(1), mp(1) + pow2(-12), 0.25),
        (np.float16(1), mp(1) - pow2(-12), 0.5),  # below 1 the spacing is 2^-11
        (np.float16(0), pow2(-26), 0.25),
        (np.float16(np.nan), mpmath.mpf("nan"), 0.0),
        (np.float16(1), mpmath.mpf("nan"), math.inf),
        (np.float16(np.nan), mp(1), math.inf),
        (np.float16(np.inf), mpmath.mpf("inf"), 0.0),
        (np.float16(-np.inf), mpmath.mpf("inf"), math.inf),
        (np.float16(np.inf), mp(65520), 0.0),  # the exact value overflows: inf is right
        (np.float16(65504), mp(65520), math.inf),  # ... and a finite answer is wrong
        (np.float16(np.inf), mp(65519), math.inf),  # spurious overflow
        (np.float16(-np.inf), mp(-70000), 0.0),
    ],
)
def test_ulp_error_conventions(actual, exact, expected):
    got = ulp_error(actual, exact, np.float16)
    assert got == expected, f"ulp_error({actual!r}, {_show(exact)}): {got} != {expected}"


# --- evaluate: closed forms ------------------------------------------------------------------

MODULE = {m.key: m for m in ELEMENTWISE}


def _closed_forms():
    """(label, expression, input, expected) with the input and expected value at 2000 bits."""
    with mpmath.workprec(2000):
        r2 = mpmath.sqrt(2)
        cases = [
            ("sigmoid(0) = 1/2", SIGMOID, mp(0), mpmath.mpf(1) / 2),
            ("sigmoid(ln 3) = 3/4", SIGMOID, mpmath.log(3), mpmath.mpf(3) / 4),
            ("sigmoid'(0) = 1/4", MODULE["sigmoid"].derivative, mp(0), mpmath.mpf(1) / 4),
            ("sigmoid''(0) = 0", MODULE["sigmoid"].second_derivative, mp(0), mp(0)),
            ("swish'(0) = 1/2", MODULE["swish"].derivative, mp(0), mpmath.mpf(1) / 2),
            (
                "GeLU(sqrt 2) = (1 + erf 1)/sqrt 2",
                MODULE["gelu_none"].forward,
                r2,
                (1 + mpmath.erf(1)) / r2,
            ),
            (
                "GeLU'(sqrt 2) = 1/2 + erf(1)/2 + exp(-1)/sqrt(pi)",
                MODULE["gelu_none"].derivative,
                r2,
                (1 + mpmath.erf(1)) / 2 + mpmath.exp(-1) / mpmath.sqrt(mpmath.pi),
            ),
            ("GeLU-tanh'(0) = 1/2", MODULE["gelu_tanh"].derivative, mp(0), mpmath.mpf(1) / 2),
            ("GeLU-sigmoid'(0) = 1/2", MODULE["gelu_sigmoid"].derivative, mp(0), mpmath.mpf(1) / 2),
            ("relu(2.5) = 2.5", MODULE["relu"].forward, mp(2.5), mp(2.5)),
            ("relu(-2.5) = 0", MODULE["relu"].forward, mp(-2.5), mp(0)),
            ("relu'(0) = 0 (kink: x > 0 is false)", MODULE["relu"].derivative, mp(0), mp(0)),
            ("relu'(-0.0) = 0", MODULE["relu"].derivative, mp(-0.0), mp(0)),
            ("relu'(2^-1074) = 1", MODULE["relu"].derivative, pow2(-1074), mp(1)),
            ("GeLU(0) = 0", MODULE["gelu_none"].forward, mp(0), mp(0)),
        ]
    return cases


@pytest.mark.parametrize(
    ("expr", "value", "expected"),
    [case[1:] for case in _closed_forms()],
    ids=[case[0] for case in _closed_forms()],
)
def test_closed_forms(expr, value, expected):
    assert_close(evaluate(expr, value), expected, f"x = {_show(value)}")


def test_exact_results_are_exact():
    assert evaluate(SIGMOID, 0) == mpmath.mpf(1) / 2
    assert evaluate(MODULE["relu"].forward, 2.5) == 2.5
    assert evaluate(MODULE["relu"].derivative, 0.0) == 0


def test_nested_piecewise():
    expr = x * sp.Piecewise((1, x > 0), (0, True)) + 1
    assert evaluate(expr, 3.0) == 4 and evaluate(expr, -3.0) == 1


# --- evaluate: cancellation ------------------------------------------------------------------


def _sigma(t):
    return 1 / (1 + mpmath.exp(-t))


def _u(t):
    c = mpmath.mpf(44715) / 10**6
    k = mpmath.sqrt(2 / mpmath.pi)
    return k * (t + c * t**3), k * (1 + 3 * c * t**2)


def _hand(name: str, value: float) -> mpmath.mpf:
    """The cancellation-free forms of the module docstring, at HAND_BITS."""
    with mpmath.workprec(HAND_BITS):
        t = mpmath.mpf(value)
        if name == "gelu_tanh":
            return t * _sigma(2 * _u(t)[0])
        if name == "gelu_tanh'":
            u, du = _u(t)
            return _sigma(2 * u) * (1 + 2 * t * du * _sigma(-2 * u))
        if name == "gelu_none":
            return t / 2 * mpmath.erfc(-t / mpmath.sqrt(2))
        if name == "swish":
            return t * _sigma(t)
        if name == "swish'":
            return _sigma(t) * (1 + t * _sigma(-t))
        if name == "sigmoid'":
            return _sigma(t) * _sigma(-t)
    raise KeyError(name)


CANCELLATION = [
    # (hand form, expression, x, floor_bits): 1 + tanh(u) at x = -30 cancels ~2850 bits.
    ("gelu_tanh", MODULE["gelu_tanh"].forward, -30.0, 4000),
    ("gelu_tanh", MODULE["gelu_tanh"].forward, -30.0, FLOOR_BITS),
    ("gelu_tanh", MODULE["gelu_tanh"].forward, -1e5, FLOOR_BITS),
    ("gelu_tanh", MODULE["gelu_tanh"].forward, 1e30, FLOOR_BITS),
    ("gelu_tanh", MODULE["gelu_tanh"].forward, -9.0, FLOOR_BITS),
    ("gelu_tanh'", MODULE["gelu_tanh"].derivative, -30.0, 4000),
    ("gelu_tanh'", MODULE["gelu_tanh"].derivative, -1e5, FLOOR_BITS),
    ("gelu_tanh'", MODULE["gelu_tanh"].derivative, 1e30, FLOOR_BITS),
    ("gelu_none", MODULE["gelu_none"].forward, -30.0, FLOOR_BITS),  # 1 + erf: ~650 bits
    ("gelu_none", MODULE["gelu_none"].forward, -38.5, FLOOR_BITS),  # just above the floor
    ("swish", MODULE["swish"].forward, -745.0, FLOOR_BITS),  # a float64 subnormal
    ("swish'", MODULE["swish"].derivative, -745.0, FLOOR_BITS),
    ("swish'", MODULE["swish"].derivative, -1.25, FLOOR_BITS),  # near its root at -1.278
    ("sigmoid'", MODULE["sigmoid"].derivative, 800.0, 1300),
    ("sigmoid'", MODULE["sigmoid"].derivative, -800.0, 1300),
    ("sigmoid'", MODULE["sigmoid"].derivative, 800.0, FLOOR_BITS),
    ("sigmoid'", SIGMOID * (1 - SIGMOID), 800.0, 1300),  # 1 - sigma(800) cancels 1154 bits
    ("sigmoid'", SIGMOID * (1 - SIGMOID), -800.0, 1300),
    ("sigmoid'", SIGMOID * (1 - SIGMOID), 40.0, FLOOR_BITS),
]


@pytest.mark.parametrize(
    ("hand", "expr", "value", "floor_bits"),
    CANCELLATION,
    ids=[f"{c[0]}({c[2]})-floor{c[3]}" for c in CANCELLATION],
)
def test_cancellation_against_hand_forms(hand, expr, value, floor_bits):
    expected = _hand(hand, value)
    got = evaluate(expr, value, DIGITS, floor_bits=floor_bits)
    assert_close(got, expected, f"{hand} at x = {value!r}", floor_bits)
    for dtype in DTYPES:
        # Equal as numbers: below the floor evaluate() may return an unsigned 0 (-0.0 == 0.0).
        assert round_to_dtype(got, dtype) == round_to_dtype(expected, dtype), (
            f"{hand} at x = {value!r} in {dtype.__name__}: {round_to_dtype(got, dtype)!r} "
            f"!= {round_to_dtype(expected, dtype)!r}"
        )


def test_swish_at_minus_745_is_a_float64_subnormal():
    got = round_to_dtype(evaluate(MODULE["swish"].forward, -745.0), np.float64)
    expected = round_to_dtype(_hand("swish", -745.0), np.float64)
    assert got == expected and 0 < -got < np.finfo(np.float64).smallest_normal, f"{got!r}"


def test_precision_cap_raises():
    """A Float constant has no ball translation, so the mpmath pair and its cap decide: at
    x = -30, ``1 + tanh(0.8 x^3)`` is about 2 e^-43200, far beyond 4096 bits."""
    expr = x * (1 + sp.tanh(sp.Float("0.8") * x**3)) / 2
    with pytest.raises(PrecisionError, match="no agreement"):
        evaluate(expr, -30.0, floor_bits=100_000, max_precision=4096)


def test_balls_resolve_what_the_mpmath_cap_cannot():
    """GeLU-tanh at -30 (-9.6e-857) to 50 digits with a floor of 2^-100000: the mpmath pair
    gives up at 4096 bits, the balls (1 + tanh u written as 2 / (1 + e^(-2u))) do not."""
    got = evaluate(MODULE["gelu_tanh"].forward, -30.0, floor_bits=100_000, max_precision=4096)
    with mpmath.workprec(400):
        u = mpmath.sqrt(2 / mpmath.pi) * (-30 + mpmath.mpf("0.044715") * (-30) ** 3)
        expected = -30 / (1 + mpmath.exp(-2 * u))
        assert abs(got - expected) <= abs(expected) * mpmath.mpf(10) ** -50


# --- evaluate: non-finite inputs -------------------------------------------------------------

LIMITS = {
    # key: ((f(-inf), f(+inf)), (f'(-inf), f'(+inf)))
    "sigmoid": ((0, 1), (0, 0)),
    "relu": ((0, math.inf), (0, 1)),
    "swish": ((0, math.inf), (0, 1)),
    "gelu_none": ((0, math.inf), (0, 1)),
    "gelu_tanh": ((0, math.inf), (0, 1)),
    "gelu_sigmoid": ((0, math.inf), (0, 1)),
}


@pytest.mark.parametrize("key", sorted(LIMITS))
@pytest.mark.parametrize("which", [0, 1], ids=["forward", "derivative"])
def test_limits_at_infinity(key, which):
    expr = (MODULE[key].forward, MODULE[key].derivative)[which]
    for value, expected in zip((-math.inf, math.inf), LIMITS[key][which], strict=True):
        got = evaluate(expr, value)
        assert got == expected, f"{key} {'fd'[which]} at {value}: got {got}, expected {expected}"


@pytest.mark.parametrize("key", sorted(LIMITS))
def test_nan_gives_nan(key):
    for expr in (MODULE[key].forward, MODULE[key].derivative):
        for value in (math.nan, mpmath.mpf("nan"), np.float16(np.nan)):
            got = evaluate(expr, value)
            assert mpmath.isnan(got), f"{key} at {value!r}: got {got}"


# --- condition numbers -----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("label", "expr", "value", "expected"),
    [
        # sigmoid: x sigma'(x)/sigma(x) = x sigma(-x) = x / (1 + e^x)
        ("sigmoid at 2", SIGMOID, 2.0, lambda: 2 / (1 + mpmath.e**2)),
        ("sigmoid at 0", SIGMOID, 0.0, lambda: mpmath.mpf(0)),
        ("relu left of the kink (f = f' = 0)", MODULE["relu"].forward, -1.0, lambda: 0),
        ("relu at 3", MODULE["relu"].forward, 3.0, lambda: 1),
        ("GeLU at 0 (f = 0, x = 0)", MODULE["gelu_none"].forward, 0.0, lambda: 0),
        ("x - 1 at its root", x - 1, 1.0, lambda: mpmath.inf),
        ("sigmoid at +inf", SIGMOID, math.inf, lambda: 0),
        ("sigmoid at -inf", SIGMOID, -math.inf, lambda: mpmath.inf),
        (
            "swish at -inf: |1 + x sigma(-x)| -> inf",
            MODULE["swish"].forward,
            -math.inf,
            lambda: mpmath.inf,
        ),
    ],
)
def test_condition_number(label, expr, value, expected):
    with mpmath.workprec(200):
        want = mpmath.mpf(expected())
        got = condition_number(expr, value)
        ok = (
            got == want
            if not mpmath.isfinite(want) or want == 0
            else (abs(got - want) <= mpmath.mpf(10) ** -18 * abs(want))
        )
    assert ok, f"{label}: got {got}, expected {want}"
    assert mpmath.isnan(condition_number(SIGMOID, math.nan))


# --- arrays and tables -----------------------------------------------------------------------


def test_reference_array_shape_dtype_and_values():
    xs = np.array([[-3.0, -0.5], [0.0, 7.25]], dtype=np.float32)
    for dtype in DTYPES:
        got = reference_array(SIGMOID, xs, dtype)
        assert got.shape == xs.shape and got.dtype == np.dtype(dtype)
        for i, xi in np.ndenumerate(xs):
            expected = correctly_rounded(SIGMOID, xi, dtype)
            assert _same(got[i], expected), f"x = {xi!r}: {got[i]!r} != {expected!r}"
    values = reference_values(SIGMOID, xs)
    assert len(values) == xs.size and values[2] == mpmath.mpf(1) / 2


def test_reference_digits_are_at_least_50():
    with pytest.raises(ValueError, match=">= 50 digits"):
        reference_array(SIGMOID, np.zeros(3), np.float64, digits=30)


def test_exact_midpoint_ties_to_even():
    """relu(1 + 2^-11) is exactly the float16 midpoint of 1 and 1 + 2^-10: Ziv's test cannot
    separate it, and the bit-identical re-evaluation marks it exact, so it ties to even."""
    relu = MODULE["relu"].forward
    for value, expected in [(1 + 2.0**-11, 1.0), (1 + 3 * 2.0**-11, 1 + 2.0**-9)]:
        got = correctly_rounded(relu, value, np.float16)
        assert got == np.float16(expected), f"relu({value!r}): {got!r} != {expected!r}"


def test_relu_tables_are_exact():
    """ReLU needs no rounding: its tables must equal max(x, 0) and 1(x > 0) at all halves."""
    relu = MODULE["relu"]
    finite = np.isfinite(ALL_HALVES)
    with np.errstate(invalid="ignore"):
        expectations = [
            (relu.forward, np.where(ALL_HALVES > 0, ALL_HALVES, np.float16(0))),
            (relu.derivative, (ALL_HALVES > 0).astype(np.float16)),
        ]
    for expr, expected in expectations:
        table = float16_table(expr)
        bad = np.flatnonzero(finite & (table.rounded != expected))
        assert bad.size == 0, (
            f"{expr} at {ALL_HALVES[bad[0]]!r}: {table.rounded[bad[0]]!r} != {expected[bad[0]]!r}"
        )
        assert np.isnan(table.rounded[np.isnan(ALL_HALVES)]).all()
        assert not table.rounded.flags.writeable
    inf_bits = half_bits(np.float16(np.inf))
    assert float16_table(relu.forward).rounded[inf_bits] == np.inf


def test_sigmoid_table_against_pointwise_references():
    table = float16_table(SIGMOID)
    rng = np.random.default_rng(20240601)
    for bits in [*rng.choice(1 << 16, size=48, replace=False), 0x7BFF, 0xFBFF, 0x0001, 0x8001]:
        h = ALL_HALVES[bits]
        expected = correctly_rounded(SIGMOID, h, np.float16)
        assert _same(table.rounded[bits], expected), (
            f"sigmoid({h!r}): table {table.rounded[bits]!r}, pointwise {expected!r}"
        )
        exact = evaluate(SIGMOID, h)
        assert table.exact[bits] == round_to_dtype(exact, np.float64), f"sigmoid({h!r})"
        with np.errstate(over="ignore"):
            got = np.float16(np.float32(1) / (1 + np.exp(-np.float32(h))))
        table_error = table.ulp_errors(np.array([h]), np.array([got]))[0]
        assert table_error == pytest.approx(ulp_error(got, exact, np.float16), abs=1e-9), (
            f"sigmoid({h!r}) = {got!r}: table ULP error {table_error}"
        )
    assert reference_array(SIGMOID, ALL_HALVES[:10], np.float16).tolist() == (
        table.rounded[:10].tolist()
    )


def test_table_ulp_errors_follow_ulp_error_conventions():
    table = float16_table(MODULE["relu"].forward)
    xs = np.array([np.nan, np.inf, np.inf, 2.0, 2.0, np.nan], dtype=np.float16)
    actual = np.array([np.nan, np.inf, 65504, 2.0, np.inf, 1.0], dtype=np.float16)
    got = table.ulp_errors(xs, actual)
    expected = [
        ulp_error(a, evaluate(MODULE["relu"].forward, v), np.float16)
        for v, a in zip(xs, actual, strict=True)
    ]
    assert got.tolist() == expected == [0.0, 0.0, math.inf, 0.0, math.inf, math.inf]
