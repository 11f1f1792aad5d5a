"""The error bounds of ``kernels/_vmath.py``, proven in arb ball arithmetic.

``kernels._vmath.exp_bounded`` evaluates ``exp(a)`` for ``EXP_LOW <= a <= EXP_HIGH`` as

1. ``k = round(a log2e)`` (the float product, rounded to an integer by adding 1.5 2^52);
2. ``r = (a - k LN2_HI) - k LN2_LO``: ``k LN2_HI`` is exact (LN2_HI has at most 32
   significant bits, |k| < 2^11), each subtraction and ``k LN2_LO`` rounds once;
3. ``p = P(r)`` by Horner's rule with the float64 Taylor coefficients ``c_i ~ 1/i!``;
4. ``v = p 2^k``, as two exact scalings while the result is normal.

:func:`exp_relative_error` bounds ``|v / exp(a) - 1|`` for normal results by

* the reduced argument: ``|r| <= R`` with ``R = ln2 (1/2 + 2^-40) + 2^-50``: ``k`` is the
  nearest integer to ``fl(a log2e)``, which is within ``|a| 2^-52 <= 2^-42`` of
  ``a log2e``; and ``r`` differs from the exact ``a - k ln2`` by
  ``delta <= u (|r| + |k LN2_LO|) + u |r| + |k| |ln2 - LN2_HI - LN2_LO|``;
* the polynomial: ``|P(r) - e^r| <= e^R R^(n+1)/(n+1)! + sum_i |c_i - 1/i!| R^i`` (Taylor
  with Lagrange's remainder, plus the rounding of the coefficients);
* Horner's rounding: ``|fl(P(r)) - P(r)| <= gamma_2n sum_i |c_i| |r|^i`` (Higham, Accuracy
  and Stability of Numerical Algorithms, 2nd ed., Eq. 5.3; with fused multiply-adds the
  bound only shrinks), ``gamma_m = m u / (1 - m u)``;
* relative to ``e^r >= e^-R``, and ``e^delta - 1`` for the argument's error.

Below the normal range the two scalings round once, by at most half the smallest subnormal
2^-1075; below ``EXP_LOW`` the result is 0 and ``exp(a) < 2^-1075``: both are within
``EXP_ABS_ERROR = 2^-1073`` (:func:`exp_low_underflows`).
"""

from __future__ import annotations

from fractions import Fraction

from flint import arb

from kernels import _vmath
from proofs.arb import DEFAULT_PREC, working_precision

__all__ = [
    "EXP_LARGEST_K",
    "exp_bound_proven",
    "exp_low_underflows",
    "exp_reduced_radius",
    "exp_relative_error",
    "ln2_hi_exact_products",
]

#: |k| is at most this over exp_bounded's clamped domain [EXP_LOW, EXP_HIGH].
EXP_LARGEST_K = 1076

_U = Fraction(1, 2**53)


def _arb(value: float | Fraction | int) -> arb:
    fraction = Fraction(value)
    return arb(fraction.numerator) / arb(fraction.denominator)


def ln2_hi_exact_products() -> bool:
    """``k LN2_HI`` is exact in float64 for every |k| <= EXP_LARGEST_K: LN2_HI's
    significand has at most 53 - 11 = 42 significant bits."""
    numerator = Fraction(_vmath.LN2_HI).numerator
    while numerator % 2 == 0:
        numerator //= 2
    return numerator.bit_length() + EXP_LARGEST_K.bit_length() <= 53


def exp_reduced_radius(prec: int = DEFAULT_PREC) -> arb:
    """An upper bound R on |r| for the computed reduced argument."""
    with working_precision(prec):
        ln2 = arb(2).log()
        largest_a = max(abs(Fraction(_vmath.EXP_LOW)), abs(Fraction(_vmath.EXP_HIGH)))
        # fl(a log2e) is within |a| (|LOG2E - log2e| + u log2e) of a log2e
        log2e = 1 / ln2
        product_error = _arb(largest_a) * (abs(_arb(_vmath.LOG2E) - log2e) + _arb(_U) * log2e * 2)
        if not product_error < _arb(Fraction(1, 2**40)):
            raise ArithmeticError("fl(a log2e) error too large for the stated R")
        return ln2 * (_arb(Fraction(1, 2)) + _arb(Fraction(1, 2**40))) + _arb(Fraction(1, 2**50))


def exp_relative_error(prec: int = DEFAULT_PREC) -> arb:
    """An upper bound on ``|v / exp(a) - 1|`` for a normal result of exp_bounded."""
    if not ln2_hi_exact_products():
        raise ArithmeticError("k LN2_HI is not exact")
    with working_precision(prec):
        u = _arb(_U)
        ln2 = arb(2).log()
        radius = exp_reduced_radius(prec)
        big_k = _arb(EXP_LARGEST_K)
        split_error = abs(ln2 - _arb(_vmath.LN2_HI) - _arb(_vmath.LN2_LO))
        delta = u * (radius + big_k * abs(_arb(_vmath.LN2_LO))) + u * radius + big_k * split_error
        r_max = radius + delta  # the polynomial sees the computed r
        n = _vmath.EXP_DEGREE
        factorial = arb(1)
        taylor_gap = arb(0)
        horner_terms = arb(0)
        for i, c in enumerate(_vmath.EXP_COEFFICIENTS):
            if i:
                factorial *= i
            taylor_gap += abs(_arb(c) - 1 / factorial) * r_max**i
            horner_terms += abs(_arb(c)) * r_max**i
        remainder = r_max.exp() * r_max ** (n + 1) / (factorial * (n + 1))
        gamma = 2 * n * u / (1 - 2 * n * u)
        absolute = remainder + taylor_gap + gamma * horner_terms
        relative = absolute * r_max.exp()  # divided by e^r >= e^-R
        return (1 + relative) * (1 + 2 * delta) - 1  # e^delta - 1 <= 2 delta for tiny delta


def exp_low_underflows(prec: int = DEFAULT_PREC) -> bool:
    """``exp(EXP_LOW + 2^-10) < 2^-1075``: inputs below EXP_LOW (with the largest argument
    error exp_bounded accepts) have exp below half the smallest subnormal."""
    with working_precision(prec):
        top = _arb(Fraction(_vmath.EXP_LOW)) + _arb(Fraction(1, 2**10))
        return bool(top.exp() < _arb(Fraction(1, 2**1075)))


def exp_bound_proven(prec: int = DEFAULT_PREC) -> bool:
    """Every premise of ``kernels._vmath.EXP_REL_ERROR`` and ``EXP_ABS_ERROR`` holds: the
    exact products ``k LN2_HI``, the relative bound below the constant, the underflow below
    ``EXP_LOW``."""
    with working_precision(prec):
        relative = exp_relative_error(prec) < _arb(_vmath.EXP_REL_ERROR)
    return ln2_hi_exact_products() and bool(relative) and exp_low_underflows(prec)
