"""Fast correctly rounded references: arb balls, a rounding decision, Ziv's fallback.

The technique of correctly rounded math libraries, applied to the references: evaluate the
SymPy definition in python-flint ``arb`` ball arithmetic (:func:`proofs.arb.to_arb`), whose
every ball provably contains the exact value, and decide the rounding directly wherever the
ball cannot round two ways. What the ball cannot decide is retried at a higher precision
(:data:`PRECISIONS`), and what is still undecided after the last (cancellation below the
float64 range, an exact rounding boundary) is left to the caller's mpmath path, whose
conventions (floors, limits, exactness) then apply unchanged.

For a ball ``B`` at a finite input, let ``hi`` be its midpoint rounded to float64 and
``err`` an upper bound of ``|f - hi|`` over ``B`` (widened by ``|hi| 2^-150``, so that any
value within 2^-150 of the exact one, such as a 50-digit mpmath reference, decides alike).
:func:`decide` accepts the element when

* ``2 err`` is below the spacing of float64 on both sides of ``hi``: then ``hi`` is the
  correctly rounded float64 value, and the exact value lies strictly between the float64
  neighbours of ``hi``;
* both neighbours round to the same float16 number: every float16 rounding boundary is a
  float64 number, so none lies strictly between them and the float16 rounding is ``hi``'s;
* both neighbours have the same float16 spacing (the value's binade is known), or
  ``err = 0`` (the value is ``hi`` exactly); and
* ``|hi| >= 2^-1000``: tinier values keep the mpmath references' floor convention.

Per element this costs one arb evaluation at 128 bits (a few microseconds) where the mpmath
path costs two evaluations at 210 bits or more; cancellation costs more precision in both.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from functools import cache

import mpmath
import numpy as np
import numpy.typing as npt
import sympy as sp
from flint import arb, fmpz
from mpmath import libmp

from derive.definitions.activations import x
from derive.reference.formats import finfo, round_float64
from proofs.arb import ArbTranslationError, to_arb, working_precision

__all__ = [
    "PRECISIONS",
    "Enclosures",
    "decide",
    "enclose",
    "format_spacing",
    "rounded_parts",
    "signs",
    "stable",
    "values",
]

#: The working precisions (bits) of the successive ball evaluations.
PRECISIONS = (128, 448, 1600, 4400)

#: Below this magnitude the ball path defers to the mpmath references' floor convention.
SMALLEST = 2.0**-1000

_WIDEN = 2.0**-150
_SLACK = 1 + 2.0**-40  # covers the rounding of float(|B - hi|) to nearest
_TINY = 5e-324
_NORMAL = 2.0**-1022


_U = sp.Wild("u")


@cache
def stable(expr: sp.Expr) -> sp.Expr:
    """``expr`` rewritten by exact identities that keep its balls narrow where it cancels.

    A ball's radius is absolute, so ``1 + erf(u)`` at ``u = -30`` (about ``e^-900``) is a
    ball around 0 until the precision exceeds 1300 bits, and at ``u = -1000`` at any
    precision. The rewritten forms compute such tails directly: ``erf(u) = erfc(-u) - 1``,
    ``1 - tanh(u)^2 = 4 e^(-2u) / (1 + e^(-2u))^2`` and ``tanh(u) = 2 / (1 + e^(-2u)) - 1``
    (SymPy then folds ``1 + erf(u)`` into ``erfc(-u)`` and ``1 + tanh(u)`` into
    ``2 / (1 + e^(-2u))``).

    >>> from derive.definitions.activations import elementwise
    >>> stable(elementwise("gelu_none").forward)
    x*erfc(-sqrt(2)*x/2)/2
    """
    out = sp.sympify(expr).replace(sp.erf, lambda u: sp.erfc(-u, evaluate=False) - 1)
    out = out.replace(1 - sp.tanh(_U) ** 2, 4 * sp.exp(-2 * _U) / (1 + sp.exp(-2 * _U)) ** 2)
    return out.replace(sp.tanh, lambda u: 2 / (1 + sp.exp(-2 * u)) - 1)


def _pieces(expr: sp.Expr) -> list[tuple[sp.Expr, sp.Basic]]:
    if isinstance(expr, sp.Piecewise):
        return list(expr.args)
    return [(expr, sp.true)]


@cache
def _conditions(expr: sp.Expr) -> tuple[Callable[[mpmath.mpf], bool] | None, ...]:
    return tuple(
        None if condition == sp.true else sp.lambdify(x, condition, modules="mpmath")
        for _, condition in _pieces(expr)
    )


@cache
def _functions(expr: sp.Expr) -> tuple[Callable[[arb], arb], ...]:
    return tuple(to_arb(stable(branch), x) for branch, _ in _pieces(expr))


def _dyadic(e: sp.Basic) -> bool:
    """An exact float64 constant: a rational with a power-of-two denominator, < 2^53."""
    return bool(e.is_Rational) and e.q & (e.q - 1) == 0 and abs(e.p) < 1 << 53


@cache
def exact_form(expr: sp.Expr) -> Callable[[np.ndarray], np.ndarray] | None:
    """A vectorized exact evaluation of ``expr`` when every branch is the variable or an
    exact float64 constant and every condition compares the variable with such a constant
    (ReLU and its derivative), else None: then float64 arithmetic makes no rounding at all.

    >>> from derive.definitions.activations import elementwise
    >>> exact_form(elementwise("relu").derivative)(np.array([-1.0, 0.0, 2.5]))
    array([0., 0., 1.])
    """
    pieces = _pieces(sp.sympify(expr))
    for branch, condition in pieces:
        if not (branch == x or _dyadic(branch)):
            return None
        if condition != sp.true and not (
            isinstance(condition, sp.core.relational.Relational)
            and {condition.lhs, condition.rhs} - {x}
            and all(side == x or _dyadic(side) for side in condition.args)
        ):
            return None
    values = [sp.lambdify(x, branch, modules="numpy") for branch, _ in pieces]
    tests = [sp.lambdify(x, condition, modules="numpy") for _, condition in pieces]

    def evaluate(points: np.ndarray) -> np.ndarray:
        out = np.full(points.shape, np.nan)
        left = np.ones(points.shape, dtype=bool)
        for value, test in zip(values, tests, strict=True):
            where = left & np.broadcast_to(test(points), points.shape)
            out[where] = np.broadcast_to(value(points), points.shape)[where]
            left &= ~where
        return out

    return evaluate


def _branch_indices(expr: sp.Expr, points: list[float] | list[mpmath.mpf]) -> np.ndarray | None:
    """The Piecewise branch that holds at each point (decided in mpmath at the exact input),
    or None when ``expr`` has a single branch."""
    tests = _conditions(expr)
    if len(tests) == 1:
        return None
    out = np.full(len(points), -1, dtype=np.int64)
    for i, value in enumerate(points):
        xm = value if isinstance(value, mpmath.mpf) else mpmath.mp.make_mpf(libmp.from_float(value))
        for k, test in enumerate(tests):
            if test is None or test(xm):
                out[i] = k
                break
    return out


@dataclass(frozen=True)
class Enclosures:
    """What :func:`enclose` proves at each point.

    ``|f(point) - hi| <= err``; ``side`` is the sign of ``f(point) - hi`` beyond
    ``|hi| 2^-150`` (+1 or -1), else 0; ``tight`` marks the points no higher precision can
    decide better: balls already narrower than that margin, values between 2^-1076 and the
    float64 range, points where no branch holds. Where ``|f|`` is proven below
    2^-1076 with a known sign, ``hi`` is that signed zero and ``err`` 0: every format rounds
    it to the zero of its sign. ``hi`` is NaN where the ball is not finite, contains 0 without
    being 0, lies below the float64 range otherwise, or no branch holds.
    """

    hi: np.ndarray
    err: np.ndarray
    side: np.ndarray
    tight: np.ndarray


def enclose(expr: sp.Expr, points: np.ndarray, prec: int, sides: bool = True) -> Enclosures:
    """:class:`Enclosures` of ``expr`` at finite float64 ``points``, by balls at ``prec`` bits;
    without ``sides`` every ``side`` is 0 (what :func:`decide` needs only for a binade).

    Raises :class:`proofs.arb.ArbTranslationError` if a branch has no arb translation.
    """
    values = np.asarray(points, dtype=np.float64).tolist()
    functions = _functions(expr)
    which = _branch_indices(expr, values)
    n = len(values)
    hi, err = np.full(n, np.nan), np.full(n, np.nan)
    side, tight = np.zeros(n, dtype=np.int8), np.zeros(n, dtype=bool)
    with working_precision(prec):
        vanishing = arb(2) ** -1076
        for i, value in enumerate(values):
            k = 0 if which is None else int(which[i])
            if k < 0:
                tight[i] = True
                continue
            ball = functions[k](arb(value))
            if not ball.is_finite():
                continue
            mid = float(ball.mid())
            # |ball| < 2^-1076 needs |mid| < 2^-1076: mid rounds to a subnormal or 0
            if abs(mid) < _NORMAL and abs(ball) < vanishing and not ball.is_zero():
                if ball > 0 or ball < 0:
                    hi[i], err[i] = (0.0 if ball > 0 else -0.0), 0.0
                continue
            if mid == 0 and not ball.is_zero():
                # between 2^-1076 and the float64 range, the mpmath path decides; a ball
                # around 0 may yet be decided at a higher precision
                tight[i] = ball > 0 or ball < 0
                continue
            deviation = ball - mid
            hi[i] = mid
            err[i] = float(abs(deviation.mid())) + float(deviation.rad())
            if sides:
                margin = arb(0, abs(mid) * _WIDEN)
                side[i] = 1 if deviation - margin > 0 else -1 if deviation + margin < 0 else 0
            tight[i] = float(ball.rad()) < abs(mid) * _WIDEN / 4
    return Enclosures(hi, err, side, tight)


def signs(expr: sp.Expr, points: np.ndarray, values: np.ndarray, prec: int) -> np.ndarray:
    """The sign of ``expr(point) - value`` at finite float64 ``points`` against float64
    ``values``, where a ball at ``prec`` bits proves it (+1 or -1), else 0.

    Unlike :attr:`Enclosures.side` there is no margin: the sign is the exact one, however
    close the two are (sigmoid'(x) = 1/4 - x^2/16 + ... against 1/4 at x = 2^-100 needs
    about 230 bits).

    >>> from derive.definitions.activations import elementwise
    >>> signs(elementwise("sigmoid").derivative, np.array([2.0**-100]), np.array([0.25]), 448)
    array([-1], dtype=int8)
    """
    points = np.asarray(points, dtype=np.float64).tolist()
    values = np.asarray(values, dtype=np.float64).tolist()
    functions = _functions(expr)
    which = _branch_indices(expr, points)
    out = np.zeros(len(points), dtype=np.int8)
    with working_precision(prec):
        for i, (point, value) in enumerate(zip(points, values, strict=True)):
            k = 0 if which is None else int(which[i])
            if k < 0:
                continue
            deviation = functions[k](arb(point)) - arb(value)
            out[i] = 1 if deviation > 0 else -1 if deviation < 0 else 0
    return out


def decide(
    found: Enclosures, dtype: npt.DTypeLike, binade: bool = True
) -> tuple[np.ndarray, np.ndarray]:
    """``(decided, spacing)``: where ``found`` decides the float64 rounding, the rounding to
    ``dtype`` (float16, bfloat16, float32 or float64) and, unless ``binade`` is False, the
    binade in ``dtype`` (module docstring), and ``dtype``'s spacing in that binade (which
    means nothing where the binade was not asked for)."""
    hi, err, side = found.hi, found.err, found.side
    target = np.dtype(dtype)
    exact_zero = (hi == 0) & (err == 0)
    with np.errstate(invalid="ignore", over="ignore"):
        finite = np.isfinite(hi) & np.isfinite(err) & (np.abs(hi) >= SMALLEST)
        safe_hi = np.where(finite, hi, 1.0)
        bound = np.where(finite, err, 0.0) * _SLACK + np.abs(safe_hi) * _WIDEN + _TINY
        below = np.nextafter(safe_hi, -np.inf)
        above = np.nextafter(safe_hi, np.inf)
        gap = np.minimum(safe_hi - below, above - safe_hi)
        ok64 = 2 * bound < gap
        low_t, high_t = round_float64(below, target), round_float64(above, target)
        same = low_t.view(_BITS[target.itemsize]) == high_t.view(_BITS[target.itemsize])
        low, high, here = (format_spacing(v, target) for v in (below, above, safe_hi))
        spacing = np.where(side < 0, low, here)
        known = (low == high) | (err == 0) | (side != 0) | (not binade)
        decided = finite & ok64 & same & known
    spacing[exact_zero] = format_spacing(np.zeros(1), target)[0]
    return decided | exact_zero, spacing


_BITS = {2: np.uint16, 4: np.uint32, 8: np.uint64}


def format_spacing(values: np.ndarray, dtype: np.dtype) -> np.ndarray:
    """``dtype``'s spacing at ``|values|`` (finite), by the conventions of
    :func:`derive.reference.core.ulp` (at 0: the smallest subnormal)."""
    info = finfo(dtype)
    _, exponent = np.frexp(np.abs(values))
    top = np.where(values == 0, info.minexp, np.clip(exponent - 1, info.minexp, info.maxexp - 1))
    return np.ldexp(1.0, top - info.nmant)


def rounded_parts(
    expr: sp.Expr, inputs: np.ndarray, dtype: npt.DTypeLike, spacing: bool = True
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """``(rounded, exact, spacing, decided)`` of ``expr`` at the float ``inputs`` by balls.

    Where ``decided`` is True: ``rounded`` is the value correctly rounded to ``dtype``,
    ``exact`` the value correctly rounded to float64 and ``spacing`` ``dtype``'s spacing at
    the exact value (unless ``spacing`` is False: then it is not asked for, and a value
    within 2^-150 of a power of two, whose binade only it needs, is decided too); elsewhere
    (non-finite inputs, undecided after every precision, or an expression arb cannot
    evaluate) the caller must compute them. Flat arrays.
    """
    target = np.dtype(dtype)
    flat = np.asarray(inputs).ravel()
    n = flat.size
    rounded = np.zeros(n, dtype=target)
    exact = np.zeros(n)
    spacings = np.zeros(n)
    decided = np.zeros(n, dtype=bool)
    pending = np.flatnonzero(np.isfinite(flat))
    points = flat.astype(np.float64)
    exactly = exact_form(expr)
    if exactly is not None:  # exact values: one rounding, to the target (NaN: no branch holds)
        values = exactly(points[pending])
        ok = ~np.isnan(values)
        done = pending[ok]
        exact[done] = values[ok]
        with np.errstate(over="ignore"):
            rounded[done] = round_float64(values[ok], target)
        spacings[done] = format_spacing(values[ok], target)
        decided[done] = True
        return rounded, exact, spacings, decided
    for prec in PRECISIONS:
        if not pending.size:
            break
        try:
            found = enclose(expr, points[pending], prec, sides=spacing)
        except ArbTranslationError:
            break
        ok, where = decide(found, target, binade=spacing)
        done = pending[ok]
        exact[done] = found.hi[ok]
        with np.errstate(over="ignore"):
            rounded[done] = round_float64(found.hi[ok], target)
        spacings[done] = where[ok]
        decided[done] = True
        pending = pending[~ok & ~found.tight]
    return rounded, exact, spacings, decided


def values(
    expr: sp.Expr, points: list[mpmath.mpf], target: int, floor_bits: int
) -> list[mpmath.mpf | None]:
    """``f`` at finite mpf ``points`` to the contract of :func:`derive.reference.core.evaluate`:
    ``|v - f(x)| <= 2^-target * max(|f(x)|, 2^-floor_bits)``, proven by the ball's radius
    (``r <= 2^-target * max(|m| - r, 2^-floor_bits)`` with ``|f| >= |m| - r``); ``v`` is the
    ball's midpoint. None where no precision up to ``8 * (target + 32)`` bits decides it (or
    the expression has no arb translation): the caller's mpmath path takes those.
    """
    out: list[mpmath.mpf | None] = [None] * len(points)
    try:
        functions = _functions(expr)
    except ArbTranslationError:
        return out
    which = _branch_indices(expr, points)
    pending = [i for i in range(len(points)) if which is None or which[i] >= 0]
    prec = target + 32
    while pending and prec <= 8 * (target + 32):
        left = []
        with working_precision(prec):
            floor = arb(2) ** -floor_bits
            scale = arb(2) ** -target
            for i in pending:
                # int(): with gmpy2 installed, mpmath's mantissas are gmpy2.mpz, which
                # fmpz does not take
                _, man, exp, _ = points[i]._mpf_
                t = arb(mid=(fmpz(int(-man if points[i] < 0 else man)), fmpz(int(exp))))
                ball = functions[0 if which is None else int(which[i])](t)
                if not ball.is_finite():
                    left.append(i)
                    continue
                radius = arb(ball.rad())
                size = abs(arb(ball.mid())) - radius
                if radius <= scale * (size if size > floor else floor):
                    mid_man, mid_exp = ball.mid().man_exp()
                    out[i] = mpmath.mp.make_mpf(libmp.from_man_exp(int(mid_man), int(mid_exp)))
                else:
                    left.append(i)
        pending, prec = left, 2 * prec
    return out
