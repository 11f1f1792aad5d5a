"""The double-double primitives: exact where they promise exactness, ~2^-100 otherwise."""

from __future__ import annotations

import math
from fractions import Fraction

import mpmath
from hypothesis import example, given
from hypothesis import strategies as st

from kernels import _dd

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
