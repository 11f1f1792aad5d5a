"""A sharper bound on ``kernels._vmath.exp_bounded``'s error, used by the softmax kernel.

``proofs/vmath.py`` bounds the rounding of the Horner evaluation of the degree-n
polynomial by ``gamma_2n sum_i |c_i| R^i``: every coefficient charged 2n roundings.
Horner's rule charges coefficient ``c_i`` only the roundings it goes through: ``c_i``
enters at step i (one addition) and then passes i multiplications and i additions, and the
leading ``c_n`` passes n of each. So (Higham, Accuracy and Stability of Numerical
Algorithms, 2nd ed., Eq. 5.2; with fused multiply-adds the bound only shrinks)

    |fl(P(r)) - P(r)| <= sum_{i < n} gamma_{2i+1} |c_i| |r|^i + gamma_{2n} |c_n| |r|^n,

which is dominated by ``gamma_1 c_0 = u`` instead of ``gamma_24 (c_0 + ...)``. The rest of
the argument is ``proofs/vmath.py``'s, term for term (same reduced-argument radius ``R``,
reduction error ``delta``, Taylor remainder and coefficient rounding, the division by
``e^r >= e^-R`` and the factor ``1 + 2 delta`` for the argument's error).
:func:`exp_relative_error` encloses the result; ``kernels.softmax._EXP_REL_ERROR`` must be
at least its upper end (``tests/proofs/test_softmax_bounds.py``).
"""

from __future__ import annotations

from fractions import Fraction

from flint import arb

from kernels import _vmath
from proofs.arb import DEFAULT_PREC, working_precision
from proofs.vmath import EXP_LARGEST_K, exp_reduced_radius, ln2_hi_exact_products

__all__ = ["exp_relative_error", "horner_rounding"]

_U = Fraction(1, 2**53)


def _arb(value: float | Fraction | int) -> arb:
    fraction = Fraction(value)
    return arb(fraction.numerator) / arb(fraction.denominator)


def _gamma(m: int, u: arb) -> arb:
    return m * u / (1 - m * u)


def horner_rounding(radius: arb, prec: int = DEFAULT_PREC) -> arb:
    """Eq. 5.2's bound on Horner's rounding error for ``|r| <= radius`` (absolute)."""
    with working_precision(prec):
        u = _arb(_U)
        n = _vmath.EXP_DEGREE
        total = arb(0)
        for i, c in enumerate(_vmath.EXP_COEFFICIENTS):
            roundings = 2 * i + 1 if i < n else 2 * n
            total += _gamma(roundings, u) * abs(_arb(c)) * radius**i
        return total


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
        for i, c in enumerate(_vmath.EXP_COEFFICIENTS):
            if i:
                factorial *= i
            taylor_gap += abs(_arb(c) - 1 / factorial) * r_max**i
        remainder = r_max.exp() * r_max ** (n + 1) / (factorial * (n + 1))
        absolute = remainder + taylor_gap + horner_rounding(r_max, prec)
        relative = absolute * r_max.exp()  # divided by e^r >= e^-R
        return (1 + relative) * (1 + 2 * delta) - 1  # e^delta - 1 <= 2 delta for tiny delta
