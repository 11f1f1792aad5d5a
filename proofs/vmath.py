"""The error bounds of ``kernels/_vmath.py``, proven in arb ball arithmetic.

``kernels._vmath.exp_bounded`` evaluates ``exp(a)`` for ``EXP_LOW <= a <= EXP_HIGH`` as

1. ``k = round(a log2e)`` (the float product, rounded to an integer by adding 1.5 2^52);
2. ``r = (a - k LN2_HI) - k LN2_LO``: ``k LN2_HI`` is exact (LN2_HI has at most 32
   significant bits, |k| < 2^11), each subtraction and ``k LN2_LO`` rounds once;
3. ``p = P(r) = c_0 + r q(r)`` with the float64 Taylor coefficients ``c_i ~ 1/i!`` and
   ``q = c_1 + c_2 r + ... + c_n r^(n-1)`` by Estrin's scheme: pairs ``c_i + c_(i+1) r``,
   joined pairwise by ``r^2``, the results by ``r^4``, then ``r^8`` (each power the rounded
   square of the previous), every join one fused multiply-add;
4. ``v = p 2^k``, as two exact scalings while the result is normal.

:func:`exp_relative_error` bounds ``|v / exp(a) - 1|`` for normal results by

* the reduced argument: ``|r| <= R`` with ``R = ln2 (1/2 + 2^-40) + 2^-50``: ``k`` is the
  nearest integer to ``fl(a log2e)``, which is within ``|a| 2^-52 <= 2^-42`` of
  ``a log2e``; and ``r`` differs from the exact ``a - k ln2`` by
  ``delta <= u (|r| + |k LN2_LO|) + u |r| + |k| |ln2 - LN2_HI - LN2_LO|``;
* the polynomial: ``|P(r) - e^r| <= e^R R^(n+1)/(n+1)! + sum_i |c_i - 1/i!| R^i`` (Taylor
  with Lagrange's remainder, plus the rounding of the coefficients);
* the evaluation's rounding: every operation is a product or a fused multiply-add, so the
  computed P is ``sum_i c_i r^i prod_(k <= n_i) (1 + delta_k)`` with ``|delta_k| <= u``,
  where ``n_i`` counts the roundings on the path of ``c_i r^i`` through the tree (those of
  the powers of r it is multiplied by included: ``r^2`` carries 1, ``r^4 = fl(r^2 r^2)`` 3,
  ``r^8`` 7); :func:`exp_roundings` counts them by following the scheme. So (Higham,
  Accuracy and Stability of Numerical Algorithms, 2nd ed., lemma 3.1)
  ``|fl(P(r)) - P(r)| <= sum_i gamma_(n_i) |c_i| |r|^i``, ``gamma_m = m u / (1 - m u)``:
  dominated by ``gamma_1 c_0 = u`` (c_0 enters by the last fused multiply-add);
* relative to ``e^r >= e^-R``, and ``e^delta - 1`` for the argument's error.

Below the normal range the two scalings round once, by at most half the smallest subnormal
2^-1075; below ``EXP_LOW`` the result is 0 and ``exp(a) < 2^-1075``: both are within
``EXP_ABS_ERROR = 2^-1022`` (:func:`exp_low_underflows`; the smallest normal float64, so that
the bounds' arithmetic takes no subnormal operand).
"""

from __future__ import annotations

import math
from fractions import Fraction

import flint
from flint import arb, arb_series

from kernels import _vmath
from kernels._generated import erfc_table
from proofs.arb import DEFAULT_PREC, point, working_precision

__all__ = [
    "EXP_LARGEST_K",
    "erfc_bound_proven",
    "erfc_interval_error",
    "exp_bound_proven",
    "exp_low_underflows",
    "exp_reduced_radius",
    "exp_relative_error",
    "exp_roundings",
    "ln2_hi_exact_products",
]

#: |k| is at most this over exp_bounded's clamped domain [EXP_LOW, EXP_HIGH].
EXP_LARGEST_K = 1076

_U = Fraction(1, 2**53)


def _arb(value: float | Fraction | int) -> arb:
    """``point`` of a float taken exactly (every float64 is a rational)."""
    return point(Fraction(value))


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


def exp_roundings(degree: int) -> list[int]:
    """``n_i``, the roundings on the path of ``c_i r^i`` through ``exp_bounded``'s
    evaluation of a polynomial of this degree (see the module docstring), for i = 0..degree.

    A node of the tree maps each coefficient it holds to (power of r, roundings so far);
    ``fma(x, w, y)`` multiplies x's terms by the power node w (adding w's own roundings) and
    rounds once. For the kernel's degree 13 (c_1's path: its pair, the joins by r^2, r^4
    and r^8, the final ``c_0 + r q``; c_13's: r^4 with its 3, the join, r^8 with its 7, the
    join, the final one):

    >>> exp_roundings(13)
    [1, 5, 5, 6, 6, 8, 8, 9, 9, 12, 12, 13, 13, 13]
    """
    powers = [(1, 0)]  # r, r^2 = fl(r r), r^4 = fl(r^2 r^2), ...: (power, roundings)
    while powers[-1][0] * 2 < degree:
        power, roundings = powers[-1]
        powers.append((2 * power, 2 * roundings + 1))

    def fma(x: dict, w: tuple[int, int], y: dict) -> dict:
        joined = {i: (p + w[0], n + w[1] + 1) for i, (p, n) in x.items()}
        joined.update({i: (p, n + 1) for i, (p, n) in y.items()})
        return joined

    nodes = [{i: (0, 0)} for i in range(1, degree + 1)]  # q's coefficients c_1 .. c_n
    level = 0
    while len(nodes) > 1:
        pairs = [fma(nodes[j + 1], powers[level], nodes[j]) for j in range(0, len(nodes) - 1, 2)]
        nodes = pairs + nodes[len(pairs) * 2 :]  # an odd one out moves up unchanged
        level += 1
    p = fma(nodes[0], powers[0], {0: (0, 0)})  # c_0 + r q
    return [p[i][1] for i in range(degree + 1)]


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
        rounding = arb(0)
        for i, (c, roundings) in enumerate(
            zip(_vmath.EXP_COEFFICIENTS, exp_roundings(n), strict=True)
        ):
            if i:
                factorial *= i
            taylor_gap += abs(_arb(c) - 1 / factorial) * r_max**i
            rounding += roundings * u / (1 - roundings * u) * abs(_arb(c)) * r_max**i
        remainder = r_max.exp() * r_max ** (n + 1) / (factorial * (n + 1))
        absolute = remainder + taylor_gap + rounding
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


def erfc_interval_error(k: int, prec: int = DEFAULT_PREC) -> arb:
    """An upper bound on ``|fl(P_k(t)) / h(z) - 1|`` over interval ``k`` of the erfc table,
    ``h(z) = erfc(z) exp(z^2)``, for the t that ``erfc_bounded`` computes.

    Taylor models: the interval is cut into ``S = max(16, 4 z r)`` pieces of radius ``d``
    (so that the power series of ``erfc`` and ``exp(z^2)``, whose product cancels like
    ``e^(4 z d)``, stay tight, and the interpolation error, which oscillates across the
    interval, is seen piece by piece rather than through far-apart Taylor coefficients). On
    the piece centred at ``z_i`` the difference
    ``E(s) = h(z_i + d s) - P((z_i - m)/r + (d/r) s)`` has the power series coefficients
    ``e_j`` at ``s = 0`` (arb, exact points), and its coefficient of order ``N + 1`` is
    enclosed at every point of the piece at once (the series at the ball
    ``[z_i - d, z_i + d]``; P has degree < N + 1), so that for ``|s| <= T``

        ``|E(s)| <= sum_(j <= N) |e_j| T^j + |c_(N+1)(ball)| T^(N+1)``

    with ``N = 2 DEGREE`` and ``T = 1 + 2^-50`` (the computed t is within u of the exact
    ``(z - m)/r``: ``z - m`` rounds once, the scaling by 2/W is exact). Horner's rounding
    adds ``gamma_2n sum_j |p_j| T^j``, the error of t at most ``u sum_j j |p_j| T^(j-1)``;
    everything relative to the smallest ``h`` on the piece, bounded below by its own
    series: ``c_0 - sum_(j >= 1) |c_j| T^j - rest``.
    """
    with working_precision(prec):
        u = _arb(_U)
        width = Fraction(erfc_table.ERFC_WIDTH)
        radius = width / 2
        centre = (k + Fraction(1, 2)) * width
        pieces = max(16, math.ceil(4 * float(centre + radius) * float(radius)))
        step = radius / pieces  # the pieces' radius d
        order = 2 * erfc_table.ERFC_DEGREE
        coefficients = [_arb(float(c)) for c in erfc_table.ERFC_TABLE[k]]
        t_max = 1 + _arb(Fraction(1, 2**50))
        n = erfc_table.ERFC_DEGREE
        gamma = 2 * n * u / (1 - 2 * n * u)
        horner = gamma * sum((abs(p) * t_max**j for j, p in enumerate(coefficients)), arb(0))
        slope = sum(
            (j * abs(p) * t_max ** (j - 1) for j, p in enumerate(coefficients) if j), arb(0)
        )
        worst = arb(0)
        for i in range(pieces):
            z_i = centre - radius + (2 * i + 1) * step
            h_point = _h_series(_arb(z_i), _arb(step), order)
            h_ball = _h_series(arb(float(z_i), float(step)), _arb(step), order)
            if not _arb(z_i) - _arb(step) >= arb(float(z_i), float(step)).lower() or not (
                _arb(z_i) + _arb(step) <= arb(float(z_i), float(step)).upper()
            ):
                raise ArithmeticError("the ball does not cover the piece")
            t_series = arb_series(
                [_arb((z_i - centre) / radius), _arb(step / radius)], prec=order + 2
            )
            p_series = arb_series([coefficients[-1]], prec=order + 2)
            for c in reversed(coefficients[:-1]):
                p_series = p_series * t_series + c
            p_coeffs = p_series.coeffs() + [arb(0)] * (order + 2)
            rest = abs(h_ball[order + 1]) * t_max ** (order + 1)
            gap = sum((abs(h_point[j] - p_coeffs[j]) * t_max**j for j in range(order + 1)), arb(0))
            lowest = (
                h_point[0]
                - sum((abs(c) * t_max**j for j, c in enumerate(h_point) if j), arb(0))
                - rest
            )
            if not lowest > 0:
                raise ArithmeticError(f"erfc interval {k}: no positive lower bound for h")
            worst = arb.max(worst, (gap + rest + horner + u * slope) / lowest)
        return worst


def _h_series(point: arb, radius: arb, order: int) -> list[arb]:
    """The power series coefficients (to order ``order + 1``) of ``h(point + radius s)``."""
    cap = flint.ctx.cap  # python-flint truncates series at this global length
    flint.ctx.cap = order + 2
    try:
        z = arb_series([point, radius], prec=order + 2)
        h = z.erfc() * (z * z).exp()
        return [h.coeffs()[j] for j in range(order + 2)]
    finally:
        flint.ctx.cap = cap


def erfc_bound_proven(prec: int = DEFAULT_PREC) -> bool:
    """``kernels._vmath.ERFC_REL_ERROR`` bounds every interval's error, and beyond the table
    ``erfc(ERFC_Z_MAX) < 2^-1080``, so that 0 is within ``EXP_ABS_ERROR`` there."""
    with working_precision(prec):
        bound = _arb(_vmath.ERFC_REL_ERROR)
        intervals = all(
            erfc_interval_error(k, prec) < bound for k in range(erfc_table.ERFC_INTERVALS)
        )
        tail = _arb(erfc_table.ERFC_Z_MAX).erfc() < _arb(Fraction(1, 2**1080))
        return intervals and bool(tail)
