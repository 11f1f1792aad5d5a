"""The double-double primitives: exact where they promise exactness, ~2^-100 otherwise."""

from __future__ import annotations

import math
from fractions import Fraction

import mpmath
import numpy as np
from hypothesis import example, given
from hypothesis import strategies as st

from kernels import _dd
from kernels._rownorm import dd_add_select, dd_div_select, dd_mul_select, two_sum_select

finite = st.floats(-1e300, 1e300, allow_nan=False, allow_infinity=False)
moderate = st.floats(-1e100, 1e100, allow_nan=False, allow_infinity=False)


@given(finite, finite)
@example(1.0, 2.0**-60)
@example(1e300, -1e300)
def test_two_sum_is_exact(a, b):
    s, e = _dd.two_sum(a, b)
    assert Fraction(s) + Fraction(e) == Fraction(a) + Fraction(b), (a, b, s, e)
    assert s == a + b


@given(moderate, moderate)
@example(1.0 + 2.0**-30, 1.0 - 2.0**-30)
def test_two_prod_is_exact(a, b):
    p, e = _dd.two_prod(a, b)
    if math.isfinite(p) and abs(p) > 2.0**-900:
        assert Fraction(p) + Fraction(e) == Fraction(a) * Fraction(b), (a, b, p, e)


@given(
    # Away from the underflow range, where a pair's low part would be subnormal.
    st.floats(-30, 30, allow_nan=False).filter(lambda v: v == 0 or abs(v) > 1e-250),
    st.floats(-1, 1, allow_nan=False),
    st.floats(0.5, 4, allow_nan=False),
)
def test_pairs_are_as_good_as_libm_and_arithmetic_to_2_to_minus_100(h, r, c):
    """dd functions of a pair agree with mpmath at 200 bits up to the libm error of the
    leading value (glibc's stated goal is "within a few ulp": bounded here by 2^-50
    relative, 2 to 4 ULPs) -- the first-order correction removes the argument's low part,
    so the pair is as good as the libm value itself; arithmetic is good to 2^-100. The
    input pair is normalized: |low| <= ulp(h) / 2."""
    low = r * math.ulp(h) / 2
    with mpmath.workprec(200):
        a = mpmath.mpf(h) + mpmath.mpf(low)
        cases = {
            "dd_exp": (_dd.dd_exp(h, low), mpmath.exp(a)),
            "dd_tanh": (_dd.dd_tanh(h, low), mpmath.tanh(a)),
            "dd_erf": (_dd.dd_erf(h, low), mpmath.erf(a)),
            "dd_erfc": (_dd.dd_erfc(h, low), mpmath.erfc(a)),
            "dd_div": (_dd.dd_div(h, low, c, 0.0), a / c),
            "dd_mul": (_dd.dd_mul(h, low, c, 0.0), a * c),
            "dd_add": (_dd.dd_add(h, low, c, 0.0), a + c),
        }
        for name, ((hi, lo), exact) in cases.items():
            got = mpmath.mpf(hi) + mpmath.mpf(lo)
            scale = max(abs(exact), mpmath.mpf(2) ** -1000)
            libm = name in ("dd_exp", "dd_tanh", "dd_erf", "dd_erfc")
            bound = mpmath.mpf(2) ** (-50 if libm else -100)
            assert abs(got - exact) <= bound * scale, (name, h, low, c, got, exact)


def test_non_finite_values_stay_ieee():
    inf = math.inf
    assert _dd.dd_add(inf, 0.0, 1.0, 0.0) == (inf, 0.0)
    assert _dd.dd_mul(1e300, 0.0, 1e300, 0.0) == (inf, 0.0)
    assert _dd.dd_exp(-inf, 0.0) == (0.0, 0.0)
    assert _dd.two_prod(1e300, 0.0) == (0.0, 0.0)
    assert math.isnan(_dd.dd_add(math.nan, 0.0, 1.0, 0.0)[0])


# The branch-free twins in kernels._rownorm (vectorizable loops call them) must be the same
# operations as _dd's, wherever their conditions hold: finite pairs, a finite result, for
# the product and the quotient leading parts below _dd's splitting limit 2^996, and for
# the quotient ah >= 0 and bh >= 1. Compared by their bits (the signs of zeros too).
_EVERY_SCALE = st.floats(-1e295, 1e295, allow_nan=False, allow_infinity=False)


def bits(pair: tuple[float, float]) -> list[str]:
    return [value.hex() for value in pair]


def _compare(ah: float, al: float, bh: float, bl: float) -> int:
    """Compare the three twins with _dd where their conditions hold; how many compared."""
    compared = 0
    assert bits(two_sum_select(ah, bh)) == bits(_dd.two_sum(ah, bh)), (ah, bh)
    total = _dd.dd_add(ah, al, bh, bl)
    if math.isfinite(total[0]):
        assert bits(dd_add_select(ah, al, bh, bl)) == bits(total), (ah, al, bh, bl)
        compared += 1
    product = _dd.dd_mul(ah, al, bh, bl)
    if math.isfinite(product[0]) and max(abs(ah), abs(bh)) < 2.0**996:
        assert bits(dd_mul_select(ah, al, bh, bl)) == bits(product), (ah, al, bh, bl)
        compared += 1
    # the quotient's conditions: a dividend >= 0, a divisor >= 1
    a = (abs(ah), abs(al))
    b = (abs(bh), bl) if abs(bh) >= 1.0 else (1.0, 0.0)
    if max(a[0], b[0]) < 2.0**996:
        assert bits(dd_div_select(*a, *b)) == bits(_dd.dd_div(*a, *b)), (a, b)
        compared += 1
    return compared


@st.composite
def pairs(draw, values=_EVERY_SCALE):
    """A normalized double-double pair ``(h, l)``: ``|l| <= ulp(h) / 2``, l often 0."""
    h = draw(values)
    r = draw(st.one_of(st.just(0.0), st.floats(-1, 1, allow_nan=False)))
    return h, r * math.ulp(h) / 2


@given(pairs(), pairs())
@example((1.0, 2.0**-53), (-1.0, 2.0**-60))
@example((2.0**-1074, 0.0), (3.0, 0.0))
@example((1.5e-300, 0.0), (-3.25e-310, 0.0))
@example((0.0, 0.0), (-0.0, 0.0))
@example((2.0**-1074, 0.0), (1e300, 0.0))
def test_branch_free_pair_arithmetic_is_dd_arithmetic_bit_for_bit(a, b):
    _compare(*a, *b)


def test_branch_free_pair_arithmetic_on_wide_random_pairs():
    """The same on 20,000 pairs of random bit patterns (every exponent, subnormals too)."""
    rng = np.random.default_rng(20261128)
    values = rng.integers(0, 2**63, size=(20_000, 2), dtype=np.int64).view(np.float64)
    values = values[np.isfinite(values).all(axis=1)]
    values *= rng.choice([-1.0, 1.0], size=values.shape)
    lows = values * rng.uniform(-(2.0**-54), 2.0**-54, size=values.shape)
    compared = sum(
        _compare(ah, al, bh, bl)
        for (ah, bh), (al, bl) in zip(values.tolist(), lows.tolist(), strict=True)
    )
    assert compared > 40_000
