"""High-precision references: exact values, correct rounding and ULP arithmetic.

The references the tests judge the kernels by. They share nothing with the kernels except the
SymPy forward definition in :mod:`derive.definitions.activations`: an expression is turned into
mpmath code by
``sympy.lambdify(x, expr, modules="mpmath")`` and evaluated at >= 50 significant digits, always
inside ``mpmath.workprec`` (never a bare ``mp.dps = ...``), so no global precision leaks.

Conventions
-----------
*Correct to d digits.* :func:`evaluate` returns ``v`` with
``|v - f(x)| <= 2^-t * max(|f(x)|, 2^-floor_bits)``, ``t = ceil(d log2 10) + 1`` (so the
relative error is at most ``10^-d / 2`` above the floor). The floor defaults to
``2^-1075``, half the smallest float64 subnormal: a value below it rounds to zero in every
supported dtype, so the references only resolve it absolutely (possibly as an exact 0 whose
sign is then not known). Pass a larger ``floor_bits`` to resolve tinier values to full digits.

*Adaptive precision.* An expression is evaluated at a pair of working precisions ``p`` and
``p + 32`` bits. The pair is accepted when

1. the two values agree: ``|v_p - v_(p+32)| <= 2^-t * max(|v_(p+32)|, 2^-floor_bits)``, and
2. ``p`` is high enough that nothing can hide below both. A term can vanish at both
   precisions only if it is absorbed exactly and then cancelled (``tanh(u)`` rounds to -1
   once ``e^(2u) < 2^-p``, so ``1 + tanh(u)`` is exactly 0 at p and at p + 32: agreement
   alone would accept 0 for GeLU-tanh at x = -30, whose value is -9.6e-857). Such a term is
   below ``2^-p * S(x)``, where ``S(x) = max(1, |x|)^K`` is the scale of the intermediate
   terms and ``K`` an error-growth degree read off the expression tree (:func:`error_degree`).
   The rule is ``p >= t + 32 + log2 S(x) - log2 max(|v|, 2^-floor_bits)``: the hidden-term
   bound must sit ``t + 32`` bits below the value, or below the floor. So a result that comes
   out 0 (or tiny) is accepted only at a precision that would have revealed any value above
   2^-1075 relative to the input's scale (about 1300 bits for |x| < 2). The rule is skipped
   where no sum may add terms of opposite signs (:func:`may_cancel`: sigmoid, Swish and
   GeLU-sigmoid forwards, the sigmoid derivative), since without cancellation every
   operation has a small relative error that the agreement test sees. ``K`` assumes the
   hidden terms are amplified polynomially, as in the catalog (``exp`` appears in logistic
   ratios); a branch that is a binary rational constant (ReLU's 0 and 1) is exact at once.

Otherwise the pair is retried at a higher precision (at least 1.5 times higher, or as high as
the observed disagreement or rule 2 asks), up to ``max_precision`` bits (default 2^16), after
which :class:`PrecisionError` is raised. The first pair starts at ``t + 40 + log2 S(x)``, so
most inputs cost two evaluations at about 210 bits for 50 digits.

*Balls first.* Before the mpmath pair, each finite input is tried in python-flint ball
arithmetic (:func:`derive.reference.balls.values`): where the ball's radius proves the
contract (``r <= 2^-t * max(|m| - r, 2^-floor_bits)``, as ``|f| >= |m| - r``) its midpoint
is the value, and no rule 2 is needed; the mpmath pair takes the rest. So a value below the
floor usually comes back nonzero, with its sign.

*Non-finite inputs.* At +-inf the result is the limit (``sympy.limit``; a Piecewise takes the
branch that holds on a ray towards the infinity), cached per expression; a limit that does
not exist (oscillation, ``zoo``) is NaN. At NaN the result is NaN. A top-level Piecewise is
decided by its own conditions, evaluated in mpmath at the (exact) input, e.g. ReLU's
``x > 0`` makes ``relu'(0) = 0``.

*Rounding.* :func:`round_to_dtype` rounds to nearest, ties to even, with gradual underflow and
overflow to +-inf as IEEE 754 prescribes, using the format parameters from ``np.finfo``
(:func:`float_format`). :func:`correctly_rounded`, :func:`reference_array` and
:func:`float16_table` first try python-flint balls (:mod:`derive.reference.balls`: a proven
enclosure, the rounding decided where the ball cannot round two ways, at rising precision);
what the balls leave undecided goes to the mpmath path with Ziv's test: a reference whose
error interval straddles a rounding boundary is recomputed with twice the digits, and one that
comes out bit-identical at both digit counts is taken as exact. Both paths give the same bits,
except that a value below 2^-1076 whose sign the balls prove rounds to the zero of that sign,
where the mpmath path may give +0.0 (``tests/reference/test_balls.py``).

>>> import sympy as sp
>>> from derive.definitions.activations import SIGMOID, x
>>> evaluate(SIGMOID, 0)
mpf('0.5')
>>> round_to_dtype(mpmath.mpf(65520), np.float16)
np.float16(inf)
>>> ulp(mpmath.mpf(1), np.float16) == mpmath.mpf(2) ** -10
True
"""

from __future__ import annotations

import math
import operator
import time
from collections import defaultdict
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from functools import cache

import mpmath
import numpy as np
import numpy.typing as npt
import sympy as sp
from mpmath import libmp

from derive.definitions.activations import x
from derive.reference import balls
from derive.reference.formats import BFLOAT16, finfo

__all__ = [
    "FLOOR_BITS",
    "MAX_PRECISION",
    "MIN_REFERENCE_DIGITS",
    "Float16Table",
    "FloatFormat",
    "PrecisionError",
    "bfloat16_table",
    "check_dps",
    "condition_number",
    "correctly_rounded",
    "error_degree",
    "evaluate",
    "exact",
    "exact_array",
    "exact_scalar",
    "exact_vector",
    "float16_table",
    "float16_values",
    "float_format",
    "int_pair",
    "may_cancel",
    "mpmath_rounded",
    "real_array",
    "reference_array",
    "reference_values",
    "round_to_dtype",
    "symbolic_limit",
    "ulp",
    "ulp_error",
]

#: Values below 2^-FLOOR_BITS are resolved absolutely, not relatively: 2^-1075 is half the
#: smallest float64 subnormal, so anything smaller rounds to zero in every supported dtype.
FLOOR_BITS = 1075

#: The highest working precision (bits) :func:`evaluate` tries before giving up.
MAX_PRECISION = 1 << 16

#: References used by tests carry at least this many significant digits (SPEC, "Tests").
MIN_REFERENCE_DIGITS = 50

#: Extra bits: the second evaluation of a pair, and the margin of the hidden-term rule.
_GUARD_BITS = 32

#: Extra bits of the first pair beyond the rule's minimum (covers results >= 2^-8 at once).
_START_MARGIN_BITS = 8

#: reference_array goes through the exhaustive float16 table from this many inputs on.
_TABLE_THRESHOLD = 4096


class PrecisionError(ArithmeticError):
    """No two successive evaluations agreed before the precision cap was reached."""


# --------------------------------------------------------------------------------------------
# Exact conversion of inputs
# --------------------------------------------------------------------------------------------


def exact(value: object, name: str = "value", *, finite: bool = False) -> mpmath.mpf:
    """``value`` as an mpf, exactly, whatever the context precision.

    Accepts an mpf (returned as it is), a Python or NumPy integer, and a Python or NumPy
    float of any width (float16/32/64 directly, a wider long double through its integer
    ratio), inf and NaN included. Anything else -- a bool, a complex number, a string, an
    array -- is a :class:`TypeError` naming ``name``. With ``finite=True`` an infinite or NaN
    value is a :class:`ValueError` naming ``name``.

    >>> exact(0.1) == mpmath.mpf(0.1), exact(2**80) == 2**80, exact(np.float16(-0.5))
    (True, True, mpf('-0.5'))
    """
    if isinstance(value, mpmath.mpf):
        result = value
    elif isinstance(value, float):  # also np.float64
        result = mpmath.mp.make_mpf(libmp.from_float(float(value)))
    elif isinstance(value, (bool, np.bool_)):
        raise TypeError(f"{name}: expected a real number, got a bool ({value!r})")
    elif isinstance(value, (int, np.integer)):
        result = mpmath.mp.make_mpf(libmp.from_int(int(value)))
    elif isinstance(value, np.floating):
        result = _exact_numpy_float(value)
    else:
        raise TypeError(f"{name}: expected a real number, got {type(value).__name__}: {value!r}")
    if finite and not mpmath.isfinite(result):
        raise ValueError(f"{name}: expected finite values, got {value!r}")
    return result


def _exact_numpy_float(value: np.floating) -> mpmath.mpf:
    if np.finfo(value.dtype).nmant <= 52 or not np.isfinite(value):
        return mpmath.mp.make_mpf(libmp.from_float(float(value)))
    numerator, denominator = value.as_integer_ratio()  # denominator: a power of two
    return mpmath.mp.make_mpf(libmp.from_man_exp(numerator, 1 - denominator.bit_length()))


def real_array(value: npt.ArrayLike, name: str) -> np.ndarray:
    """``np.asarray(value)``, refusing (:class:`TypeError` naming ``name``) a dtype that does
    not hold real numbers: bool, complex, strings. Object arrays pass (mpf elements)."""
    array = np.asarray(value)
    if array.dtype.kind not in "fiuO":
        raise TypeError(f"{name}: expected a real floating-point array, got dtype {array.dtype}")
    return array


def exact_array(value: npt.ArrayLike, name: str, *, finite: bool = False) -> np.ndarray:
    """An object array of the shape of ``value``, each element converted by :func:`exact`
    (:class:`TypeError`/:class:`ValueError` naming ``name`` as there)."""
    array = real_array(value, name)
    if array.dtype.kind == "f" and np.finfo(array.dtype).nmant <= 52:  # the fast path
        flat = [
            mpmath.mp.make_mpf(libmp.from_float(v)) for v in array.astype(float).ravel().tolist()
        ]
        if finite and not np.all(np.isfinite(array)):
            bad = array[~np.isfinite(array)].flat[0]
            raise ValueError(f"{name}: expected finite values, got {bad!r}")
    else:
        flat = [exact(element, name, finite=finite) for element in array.flat]
    out = np.empty(len(flat), dtype=object)
    out[:] = flat
    return out.reshape(array.shape)


def exact_vector(value: npt.ArrayLike, name: str, length: int) -> list[mpmath.mpf]:
    """A 1-D argument of shape ``(length,)`` as a list of exact mpf (ValueError naming
    ``name`` for another shape)."""
    array = real_array(value, name)
    if array.shape != (length,):
        raise ValueError(f"{name}: expected shape ({length},), got {array.shape}")
    return exact_array(array, name).tolist()


def exact_scalar(value: object, name: str, *, finite: bool = False) -> mpmath.mpf:
    """A scalar argument (a number or a 0-d array) as an exact mpf; ValueError naming
    ``name`` for an array of another shape."""
    if isinstance(value, mpmath.mpf):
        return exact(value, name, finite=finite)
    array = real_array(value, name)
    if array.ndim != 0:
        raise ValueError(f"{name}: expected a scalar, got shape {array.shape}")
    return exact(array[()], name, finite=finite)


def check_dps(dps: int, minimum: int, name: str = "dps") -> None:
    """ValueError naming ``name`` unless ``dps`` is an integer (not a bool) >= ``minimum``."""
    if isinstance(dps, bool) or not isinstance(dps, (int, np.integer)) or dps < minimum:
        raise ValueError(f"{name}: expected an integer >= {minimum} digits, got {dps!r}")


def int_pair(value: object, name: str) -> tuple[int, int]:
    """An int ``k`` as ``(k, k)``, or a pair of ints as it is (a stride, a window, ...)."""
    items = tuple(value) if isinstance(value, (tuple, list)) else (value, value)
    if len(items) != 2:
        raise ValueError(f"{name}: expected an int or a pair of ints, got {value!r}")
    try:
        return operator.index(items[0]), operator.index(items[1])
    except TypeError:
        raise TypeError(f"{name}: expected an int or a pair of ints, got {value!r}") from None


def _target_bits(digits: int) -> int:
    """Bits ``t`` with ``2^-t <= 10^-digits / 2``."""
    if not isinstance(digits, (int, np.integer)) or digits < 1:
        raise ValueError(f"digits must be a positive integer, got {digits!r}")
    return math.ceil(int(digits) * math.log2(10)) + 1


def _level(value: mpmath.mpf, floor_bits: int) -> int:
    """A lower bound for ``log2 max(|value|, 2^-floor_bits)`` (``value`` finite)."""
    if not value:
        return -floor_bits
    return max(int(mpmath.mag(value)) - 1, -floor_bits)


# --------------------------------------------------------------------------------------------
# Floating-point formats and correct rounding
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class FloatFormat:
    """An IEEE 754 binary format by its parameters.

    ``precision`` p counts the significand bits including the implicit one; normal numbers
    are ``m * 2^(e - p + 1)`` with ``2^(p-1) <= m < 2^p`` and ``emin <= e <= emax``;
    subnormals have ``e = emin`` and ``m < 2^(p-1)``.
    """

    dtype: np.dtype
    precision: int
    emin: int
    emax: int

    @property
    def smallest_subnormal(self) -> mpmath.mpf:
        """``2^(emin - p + 1)`` (2^-24 for float16)."""
        return _pow2(self.emin - self.precision + 1)

    @property
    def smallest_normal(self) -> mpmath.mpf:
        """``2^emin`` (2^-14 for float16)."""
        return _pow2(self.emin)

    @property
    def max_finite(self) -> mpmath.mpf:
        """``(2 - 2^(1-p)) * 2^emax`` (65504 for float16)."""
        man = (1 << self.precision) - 1
        return mpmath.mp.make_mpf(libmp.from_man_exp(man, self.emax - self.precision + 1))

    @property
    def overflow_threshold(self) -> mpmath.mpf:
        """``(2 - 2^-p) * 2^emax``: the least magnitude that rounds to infinity (65520)."""
        man = (1 << (self.precision + 1)) - 1
        return mpmath.mp.make_mpf(libmp.from_man_exp(man, self.emax - self.precision))


def _pow2(exponent: int) -> mpmath.mpf:
    return mpmath.mp.make_mpf(libmp.from_man_exp(1, exponent))


_SUPPORTED = (np.dtype(np.float16), BFLOAT16, np.dtype(np.float32), np.dtype(np.float64))


@cache
def _format_of(dtype: np.dtype) -> FloatFormat:
    info = finfo(dtype)
    return FloatFormat(dtype, int(info.nmant) + 1, int(info.minexp), int(info.maxexp) - 1)


def float_format(dtype: npt.DTypeLike) -> FloatFormat:
    """The :class:`FloatFormat` of float16, bfloat16, float32 or float64, from their
    ``finfo``.

    >>> f = float_format(np.float16)
    >>> (f.precision, f.emin, f.emax, float(f.max_finite), float(f.overflow_threshold))
    (11, -14, 15, 65504.0, 65520.0)
    """
    dt = np.dtype(dtype)
    if dt not in _SUPPORTED:
        raise TypeError(f"dtype must be float16, bfloat16, float32 or float64, got {dt}")
    return _format_of(dt)


def _round_parts(value: mpmath.mpf, fmt: FloatFormat) -> tuple[int, int, int] | str:
    """Round to ``fmt``: ``(sign, n, q)`` meaning ``(-1)^sign * n * 2^q``, or "nan"/"inf"/"-inf".

    Round to nearest, ties to even, at the quantum of the value's binade (never below the
    subnormal quantum); a result of ``2^(emax+1)`` or more overflows to infinity.
    """
    sign, man, exp, bc = value._mpf_
    if not man:
        if value._mpf_ == libmp.fnan:
            return "nan"
        if value._mpf_ == libmp.finf:
            return "inf"
        if value._mpf_ == libmp.fninf:
            return "-inf"
        return (sign, 0, 0)
    top = exp + bc - 1  # 2^top <= |value| < 2^(top + 1)
    if top > fmt.emax:
        return "-inf" if sign else "inf"
    q = max(top, fmt.emin) - fmt.precision + 1
    if exp >= q:
        n = man << (exp - q)
    else:
        shift = q - exp
        if shift > bc:  # |value| < half the quantum: rounds to zero
            n = 0
        else:
            n = man >> shift
            rem = man - (n << shift)
            half = 1 << (shift - 1)
            if rem > half or (rem == half and n & 1):
                n += 1
    if n.bit_length() + q - 1 > fmt.emax:
        return "-inf" if sign else "inf"
    return (sign, n, q)


def _parts_to_numpy(parts: tuple[int, int, int] | str, fmt: FloatFormat) -> np.floating:
    if isinstance(parts, str):
        return fmt.dtype.type({"nan": math.nan, "inf": math.inf, "-inf": -math.inf}[parts])
    sign, n, q = parts
    magnitude = math.ldexp(n, q)  # exact: n < 2^53 and n * 2^q is representable
    return fmt.dtype.type(-magnitude if sign else magnitude)


def round_to_dtype(value: mpmath.mpf | float | int, dtype: npt.DTypeLike) -> np.floating:
    """``value`` correctly rounded to ``dtype`` (float16, float32 or float64).

    Round to nearest, ties to even, with subnormals and overflow as in IEEE 754: a magnitude
    at or above :attr:`FloatFormat.overflow_threshold` becomes +-inf, a negative value that
    rounds to zero gives -0.0. ``value`` is taken exactly (an mpf carries its own mantissa;
    ``float(mpf)`` is not used because it rounds twice in the float64 subnormal range).

    >>> float(round_to_dtype(65519, np.float16)), round_to_dtype(-1e-300, np.float32)
    (65504.0, np.float32(-0.0))
    """
    fmt = float_format(dtype)
    return _parts_to_numpy(_round_parts(exact(value), fmt), fmt)


def ulp(value: mpmath.mpf | float | int, dtype: npt.DTypeLike) -> mpmath.mpf:
    """The spacing of ``dtype`` at ``|value|``: ``2^(e - p + 1)`` for ``2^e <= |value| < 2^(e+1)``.

    Conventions: the binade is that of the exact value (so just below a power of two the
    finer spacing counts); below the normal range it is the subnormal spacing, the smallest
    subnormal (also at 0); beyond the largest finite number it stays the top binade's
    spacing; NaN or +-inf give NaN.

    >>> ulp(mpmath.mpf(65504), np.float16), ulp(0, np.float16) == mpmath.mpf(2) ** -24
    (mpf('32.0'), True)
    """
    fmt = float_format(dtype)
    v = exact(value)
    if not mpmath.isfinite(v):
        return mpmath.mpf("nan")
    if not v:
        return fmt.smallest_subnormal
    _, _, exp, bc = v._mpf_
    top = min(max(exp + bc - 1, fmt.emin), fmt.emax)
    return _pow2(top - fmt.precision + 1)


def ulp_error(
    actual: mpmath.mpf | float | np.floating, exact_value: mpmath.mpf | float, dtype: npt.DTypeLike
) -> float:
    """``|actual - exact_value| / ulp(exact_value, dtype)``, with non-finite values judged by class.

    * ``exact_value`` NaN: 0 if ``actual`` is NaN, else inf; ``actual`` NaN otherwise: inf.
    * If ``exact_value`` correctly rounds to +-inf in ``dtype`` (it is infinite or overflows):
      0 if ``actual`` is that same infinity, else inf. A finite answer where IEEE overflows
      is wrong, whatever its distance.
    * ``actual`` +-inf where ``exact_value`` rounds to a finite number: inf (spurious overflow).
    * Otherwise the finite quotient, computed exactly and rounded to a Python float.

    >>> ulp_error(np.float16(1.0), mpmath.mpf(1) + mpmath.mpf(2) ** -12, np.float16)
    0.25
    """
    fmt = float_format(dtype)
    a, e = exact(actual, "actual"), exact(exact_value, "exact_value")
    if mpmath.isnan(e):
        return 0.0 if mpmath.isnan(a) else math.inf
    if mpmath.isnan(a):
        return math.inf
    rounded = _round_parts(e, fmt)
    if isinstance(rounded, str):  # "inf" or "-inf"
        return 0.0 if mpmath.isinf(a) and (a > 0) == (rounded == "inf") else math.inf
    if mpmath.isinf(a):
        return math.inf
    difference = abs(mpmath.fsub(a, e, exact=True))
    return float(mpmath.fdiv(difference, ulp(e, fmt.dtype), prec=60))


# --------------------------------------------------------------------------------------------
# Compiling SymPy expressions to mpmath
# --------------------------------------------------------------------------------------------

#: Functions with bounded values and bounded derivative: no polynomial growth of their own.
_BOUNDED_FUNCTIONS = (sp.tanh, sp.erf, sp.erfc, sp.sin, sp.cos, sp.atan)


def error_degree(expr: sp.Expr) -> int:
    """The error-growth degree ``K``: evaluation errors of ``expr`` scale like ``|x|^K``.

    Read off the tree with (magnitude degree m, error degree k) per node: ``x`` (1, 1),
    numbers (0, 0); a sum takes the maxima; a product adds magnitudes, and its error is
    the largest ``k_i + sum_(j != i) m_j``; an integer power ``b^n`` has (n m, k + (n-1) m);
    bounded functions (tanh, erf, ...) and ``exp`` keep the argument's k with m = 0 (``exp``
    errors are relative: the scale only follows polynomial growth); a Piecewise takes the
    maxima over its branches. It bounds the scale of the terms whose cancellation can hide a
    value, conservatively (``x (1 + tanh(x + x^3))`` gives 4).

    >>> from derive.definitions.activations import elementwise
    >>> error_degree(elementwise("gelu_tanh").forward), error_degree(elementwise("sigmoid").forward)
    (4, 1)
    """
    return _degrees(sp.sympify(expr))[1]


def _degrees(e: sp.Basic) -> tuple[int, int]:
    if e == x:
        return 1, 1
    if e.is_number or not e.free_symbols:
        return 0, 0
    if isinstance(e, sp.Piecewise):
        pairs = [_degrees(arg.expr) for arg in e.args]
        return max(m for m, _ in pairs), max(k for _, k in pairs)
    if isinstance(e, sp.Add):
        pairs = [_degrees(arg) for arg in e.args]
        return max(m for m, _ in pairs), max(k for _, k in pairs)
    if isinstance(e, sp.Mul):
        pairs = [_degrees(arg) for arg in e.args]
        total = sum(m for m, _ in pairs)
        return total, max([total] + [k + total - m for m, k in pairs])
    if isinstance(e, sp.Pow):
        (mb, kb), n = _degrees(e.base), e.exp
        if n.is_number and n.is_real:
            if n > 0:
                grow = math.ceil(float(n) * mb)
                return grow, kb + max(0, grow - mb)
            return 0, kb  # a reciprocal: assumes the base stays away from 0
        mn, kn = _degrees(n)
        return 0, kb + kn + mb + mn
    pairs = [_degrees(arg) for arg in e.args if isinstance(arg, sp.Expr)] or [(0, 0)]
    k = max(k for _, k in pairs)
    if isinstance(e, (*_BOUNDED_FUNCTIONS, sp.exp)):
        return 0, k
    return max(m for m, _ in pairs), k


def may_cancel(expr: sp.Expr) -> bool:
    """Whether some sum in ``expr`` may add terms of opposite signs (SymPy's assumptions).

    Without such a sum every operation has a small relative error, so no term can vanish
    unseen and the agreement test alone decides; with one, rule 2 of the module docstring
    applies. ``1 + exp(-x)`` cannot cancel, ``1 + erf(x)`` or ``x e^-x + 1`` may.

    >>> from derive.definitions.activations import elementwise
    >>> may_cancel(elementwise("sigmoid").forward), may_cancel(elementwise("swish").derivative)
    (False, True)
    """
    for total in sp.sympify(expr).atoms(sp.Add):
        terms = total.args
        if not (all(t.is_nonnegative for t in terms) or all(t.is_nonpositive for t in terms)):
            return True
    return False


def _exact_constant(e: sp.Expr) -> mpmath.mpf | None:
    """The value of a rational constant with a power-of-two denominator, else None."""
    if not e.is_Rational:
        return None
    p, q = int(e.p), int(e.q)
    if q & (q - 1):
        return None
    return mpmath.mp.make_mpf(libmp.from_man_exp(p, -(q.bit_length() - 1)))


_NAN = mpmath.mpf("nan")


@dataclass(frozen=True)
class _Compiled:
    """An expression as mpmath code: its top-level Piecewise branches, each lambdified.

    ``degree`` is :func:`error_degree`, or None if no sum may cancel (:func:`may_cancel`).
    """

    expr: sp.Expr
    degree: int | None
    branches: tuple[tuple[Callable[[mpmath.mpf], bool] | None, Callable, mpmath.mpf | None], ...]

    def __call__(self, xm: mpmath.mpf) -> tuple[mpmath.mpf, bool]:
        """``(value, exact)`` at the current mpmath precision."""
        for condition, function, constant in self.branches:
            if condition is None or condition(xm):
                if constant is not None:
                    return constant, True
                value = function(xm)
                return (value if isinstance(value, mpmath.mpf) else mpmath.mpf(value)), False
        return _NAN, True  # no branch applies: undefined


@cache
def _compile(expr: sp.Expr) -> _Compiled:
    extra = expr.free_symbols - {x}
    if extra:
        names = sorted(map(str, extra))
        raise ValueError(
            f"expression {expr} must depend on derive.definitions.activations.x only; has {names}"
        )
    pieces = expr.args if isinstance(expr, sp.Piecewise) else ((expr, sp.true),)
    branches = []
    for branch, condition in pieces:
        test = None if condition == sp.true else sp.lambdify(x, condition, modules="mpmath")
        function = sp.lambdify(x, branch, modules="mpmath", cse=True)
        branches.append((test, function, _exact_constant(branch)))
    degree = error_degree(expr) if may_cancel(expr) else None
    return _Compiled(expr, degree, tuple(branches))


def _compiled(expr: sp.Expr) -> _Compiled:
    return _compile(sp.sympify(expr))


# --------------------------------------------------------------------------------------------
# Limits at +-inf
# --------------------------------------------------------------------------------------------


def _holds_on_ray(where: sp.Set, direction: int) -> bool:
    boundary = where.boundary
    points = [p for p in boundary if p.is_finite] if isinstance(boundary, sp.FiniteSet) else []
    if direction > 0:
        ray = sp.Interval(max(points, default=0) + 1, sp.oo)
    else:
        ray = sp.Interval(-sp.oo, min(points, default=0) - 1)
    return bool(ray.is_subset(where))


@cache
def symbolic_limit(expr: sp.Expr, direction: int) -> sp.Expr:
    """``lim f(x)`` as ``x -> direction * oo``; a Piecewise by the branch that holds there
    (NaN if none does).

    The limit is taken with ``tanh`` written as exponentials (an identity), which SymPy's
    Gruntz algorithm handles directly: GeLU-tanh's four limits took 8.4 s as written and
    2.9 s so.

    >>> from derive.definitions.activations import SIGMOID
    >>> symbolic_limit(SIGMOID, 1), symbolic_limit(SIGMOID, -1)
    (1, 0)
    """
    folded = sp.piecewise_fold(expr)
    if isinstance(folded, sp.Piecewise):
        for branch, where in folded.as_expr_set_pairs():
            if _holds_on_ray(where, direction):
                return symbolic_limit(branch, direction)
        return sp.nan
    return sp.limit(folded.rewrite(sp.exp), x, direction * sp.oo)


def _limit_value(expr: sp.Expr, direction: int, digits: int, floor_bits: int) -> mpmath.mpf:
    limit = symbolic_limit(expr, direction)
    if limit == sp.oo:
        return mpmath.mpf("inf")
    if limit == -sp.oo:
        return mpmath.mpf("-inf")
    if isinstance(limit, sp.Limit) or limit.has(sp.Limit):
        raise ValueError(f"SymPy cannot decide the limit of {expr} at {direction * sp.oo}")
    if limit.free_symbols or not (limit.is_extended_real and limit.is_finite):
        return mpmath.mpf("nan")  # does not exist: nan, zoo, AccumBounds
    return evaluate(limit, 0, digits, floor_bits=floor_bits)


# --------------------------------------------------------------------------------------------
# Adaptive evaluation
# --------------------------------------------------------------------------------------------


def _run(compiled: _Compiled, points: Iterable[mpmath.mpf], prec: int) -> list:
    """``compiled`` at every point, at ``prec`` bits; None where it divided by zero."""
    out = []
    with mpmath.workprec(prec):
        for xm in points:
            try:
                out.append(compiled(xm))
            except ZeroDivisionError:
                out.append(None)
    return out


def _next_precision(
    lo, hi, prec: int, scale: int | None, target: int, floor_bits: int
) -> int | None:
    """None to accept the pair ``(lo, hi)`` at ``(prec, prec + 32)`` bits, else the next prec.

    ``scale`` is ``log2 S(x)`` of rule 2, or None where no term can hide (nothing cancels).
    """
    if lo is None or hi is None:
        return 2 * prec
    (a, a_exact), (b, b_exact) = lo, hi
    if a_exact and b_exact:
        return None
    if not (mpmath.isfinite(a) and mpmath.isfinite(b)):
        same = (mpmath.isnan(a) and mpmath.isnan(b)) or a == b
        return None if same else 2 * prec
    level = _level(b, floor_bits)
    _, man, exp, bc = libmp.mpf_sub(a._mpf_, b._mpf_, 32, libmp.round_nearest)
    agree = not man or exp + bc <= level - target
    required = 0 if scale is None else target + _GUARD_BITS + scale - level
    if agree:
        return None if prec >= required else required
    lost = exp + bc - level + prec  # bits the lower evaluation lost
    return max(required, lost + target + _GUARD_BITS, prec + prec // 2)


def _scale_bits(compiled: _Compiled, xm: mpmath.mpf) -> int | None:
    """``ceil(log2 S(x))`` for ``S(x) = max(1, |x|)^K``; None if nothing can cancel."""
    if compiled.degree is None:
        return None
    return compiled.degree * max(0, int(mpmath.mag(xm))) if xm else 0


def _evaluate_points(
    compiled: _Compiled,
    points: Sequence[mpmath.mpf],
    digits: int,
    floor_bits: int,
    max_precision: int,
    balls_first: bool = True,
) -> list[mpmath.mpf]:
    """Adaptive evaluation at many points, each pass batched by working precision."""
    target = _target_bits(digits)
    results: list[mpmath.mpf | None] = [None] * len(points)
    scales: dict[int, int | None] = {}
    pending: dict[int, int] = {}
    if balls_first:  # proven values from python-flint balls; mpmath for the rest
        finite = [i for i, xm in enumerate(points) if mpmath.isfinite(xm)]
        by_balls = balls.values(compiled.expr, [points[i] for i in finite], target, floor_bits)
        for i, value in zip(finite, by_balls, strict=True):
            results[i] = value
    for i, xm in enumerate(points):
        if mpmath.isnan(xm):
            results[i] = _NAN
        elif mpmath.isinf(xm):
            results[i] = _limit_value(compiled.expr, 1 if xm > 0 else -1, digits, floor_bits)
        elif results[i] is None:
            scales[i] = _scale_bits(compiled, xm)
            pending[i] = target + _GUARD_BITS + _START_MARGIN_BITS + (scales[i] or 0)
    while pending:
        by_precision: dict[int, list[int]] = defaultdict(list)
        for i, prec in pending.items():
            by_precision[prec].append(i)
        pending = {}
        for prec, indices in sorted(by_precision.items()):
            if prec > max_precision:
                i = indices[0]
                raise PrecisionError(
                    f"{compiled.expr} at x = {mpmath.nstr(points[i], 20)}: no agreement to "
                    f"{digits} digits up to {max_precision} bits"
                )
            chosen = [points[i] for i in indices]
            lows = _run(compiled, chosen, prec)
            highs = _run(compiled, chosen, prec + _GUARD_BITS)
            for i, lo, hi in zip(indices, lows, highs, strict=True):
                step = _next_precision(lo, hi, prec, scales[i], target, floor_bits)
                if step is None:
                    results[i] = hi[0]
                else:
                    pending[i] = step
    return results  # type: ignore[return-value]


def evaluate(
    expr: sp.Expr,
    value: mpmath.mpf | float | int,
    digits: int = 50,
    *,
    floor_bits: int = FLOOR_BITS,
    max_precision: int = MAX_PRECISION,
) -> mpmath.mpf:
    """``expr`` (SymPy, in :data:`derive.definitions.activations.x`) at ``value``, to ``digits``
    digits.

    The input is taken exactly. The result ``v`` satisfies
    ``|v - f(x)| <= 10^-digits / 2 * max(|f(x)|, 2^-floor_bits)`` under the adaptive rule of
    the module docstring; at +-inf it is the limit, at NaN it is NaN. The returned mpf keeps
    the mantissa of the working precision: do further arithmetic on it inside
    ``mpmath.workprec``. Raises :class:`PrecisionError` past ``max_precision`` bits.

    >>> from derive.definitions.activations import elementwise
    >>> gelu = elementwise("gelu_none")
    >>> with mpmath.workdps(30):  # GeLU'(sqrt 2) = 1/2 + erf(1)/2 + exp(-1)/sqrt(pi)
    ...     print(evaluate(gelu.derivative, mpmath.sqrt(2)))
    1.12890414518515478634074444226
    >>> evaluate(elementwise("relu").derivative, 0.0), evaluate(gelu.forward, -math.inf)
    (mpf('0.0'), mpf('0.0'))
    """
    (result,) = _evaluate_points(_compiled(expr), [exact(value)], digits, floor_bits, max_precision)
    return result


def reference_values(
    expr: sp.Expr,
    xs: Iterable[mpmath.mpf | float] | np.ndarray,
    digits: int = MIN_REFERENCE_DIGITS,
    *,
    floor_bits: int = FLOOR_BITS,
) -> list[mpmath.mpf]:
    """:func:`evaluate` at each input (flattened), batched by working precision."""
    items = np.asarray(xs).ravel().tolist() if isinstance(xs, np.ndarray) else list(xs)
    points = [exact(v, "xs") for v in items]
    return _evaluate_points(_compiled(expr), points, digits, floor_bits, MAX_PRECISION)


# --------------------------------------------------------------------------------------------
# Correctly rounded references
# --------------------------------------------------------------------------------------------


def _rounding_is_safe(value: mpmath.mpf, fmt: FloatFormat, target: int, floor_bits: int) -> bool:
    """True if every number within the error bound of ``value`` rounds alike (Ziv's test).

    The bound is ``2^-target * max(|value|, 2^-floor_bits)``, doubled. Rounding to nearest
    changes only at midpoints, so it suffices that no midpoint lies within the bound; for
    ``target > p + 2`` only the midpoint in the value's own quantum can.
    """
    _, man, exp, bc = value._mpf_
    if not man:
        return True  # zero (the bound is far below every format's smallest midpoint) or special
    top = exp + bc - 1
    radius = max(top + 1, -floor_bits) - target + 1  # log2 of the bound
    if top > fmt.emax:
        return True  # |value| >= 2^(emax+1), far above the overflow threshold
    q = max(top, fmt.emin) - fmt.precision + 1
    if exp >= q:
        return True  # representable: the nearest midpoint is half a quantum away
    shift = q - exp
    if shift >= bc:  # below the smallest quantum: decide by rounding both ends
        below = _round_parts(mpmath.fsub(value, _pow2(radius), exact=True), fmt)
        above = _round_parts(mpmath.fadd(value, _pow2(radius), exact=True), fmt)
        return _parts_to_numpy(below, fmt) == _parts_to_numpy(above, fmt)
    rem = man & ((1 << shift) - 1)
    distance = abs(rem - (1 << (shift - 1)))  # to the midpoint, in units of 2^exp
    return distance > 0 and (radius < exp or distance > 1 << (radius - exp))


def _round_reference(
    compiled: _Compiled,
    xm: mpmath.mpf,
    value: mpmath.mpf,
    fmt: FloatFormat,
    digits: int,
    floor_bits: int,
    balls_first: bool = True,
) -> np.floating:
    while not _rounding_is_safe(value, fmt, _target_bits(digits), floor_bits):
        more = 2 * digits
        floor_more = floor_bits + _target_bits(more) - _target_bits(digits)
        (sharper,) = _evaluate_points(
            compiled, [xm], more, floor_more, MAX_PRECISION, balls_first=balls_first
        )
        if sharper == value:  # bit-identical at two digit counts: the value is exact
            break
        value, digits, floor_bits = sharper, more, floor_more
    return round_to_dtype(value, fmt.dtype)


def correctly_rounded(
    expr: sp.Expr,
    value: mpmath.mpf | float | int,
    dtype: npt.DTypeLike,
    digits: int = MIN_REFERENCE_DIGITS,
) -> np.floating:
    """``expr`` at ``value``, correctly rounded to ``dtype`` (with Ziv's rounding test).

    >>> from derive.definitions.activations import SIGMOID
    >>> correctly_rounded(SIGMOID, 2.0, np.float16)
    np.float16(0.881)
    """
    fmt = float_format(dtype)
    check_dps(digits, MIN_REFERENCE_DIGITS, "digits")
    compiled, xm = _compiled(expr), exact(value)
    as_float = _float64_or_none(xm)
    if as_float is not None:  # balls first (derive.reference.balls), then mpmath
        return _rounded_array(compiled, np.array([as_float]), fmt, digits)[0]
    (value_mp,) = _evaluate_points(compiled, [xm], digits, FLOOR_BITS, MAX_PRECISION)
    return _round_reference(compiled, xm, value_mp, fmt, digits, FLOOR_BITS)


def _float64_or_none(xm: mpmath.mpf) -> float | None:
    """``xm`` as a finite float64 if it is one exactly, else None."""
    if not mpmath.isfinite(xm):
        return None
    value = float(xm)  # rounds (or overflows) unless xm is a float64
    return value if math.isfinite(value) and exact(value) == xm else None


def _float_inputs(xs: npt.ArrayLike) -> np.ndarray:
    """``xs`` as an array of a supported format; bfloat16 inputs widened (exactly) to
    float32, which NumPy reads as numbers."""
    arr = np.asarray(xs)
    if arr.dtype not in _SUPPORTED:
        raise TypeError(
            f"xs must be a float16, bfloat16, float32 or float64 array, got {arr.dtype}"
        )
    return _widened(arr) if arr.dtype == BFLOAT16 else arr


def _widened(bfloat16: np.ndarray) -> np.ndarray:
    """bfloat16 values as float32 (exact), NaNs quiet: a signaling NaN would raise NumPy's
    invalid-value warning in every later cast."""
    wide = bfloat16.astype(np.float32)
    return np.where(np.isnan(wide), np.float32(np.nan), wide)


def _mpmath_rounded(
    compiled: _Compiled,
    arr: np.ndarray,
    fmt: FloatFormat,
    digits: int,
    balls_first: bool = True,
) -> tuple[np.ndarray, list[mpmath.mpf]]:
    points = [exact(v, "xs") for v in arr.ravel().tolist()]
    values = _evaluate_points(
        compiled, points, digits, FLOOR_BITS, MAX_PRECISION, balls_first=balls_first
    )
    flat = np.empty(len(points), dtype=fmt.dtype)
    for i, (xm, value) in enumerate(zip(points, values, strict=True)):
        flat[i] = _round_reference(compiled, xm, value, fmt, digits, FLOOR_BITS, balls_first)
    return flat.reshape(arr.shape), values


def mpmath_rounded(
    expr: sp.Expr, xs: npt.ArrayLike, dtype: npt.DTypeLike, digits: int = MIN_REFERENCE_DIGITS
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``(rounded, exact, spacing)`` at every element of ``xs`` (flattened) by the mpmath path
    alone, no balls: the value correctly rounded to ``dtype`` and to float64, and ``dtype``'s
    :func:`ulp` at the reference -- what the ball references are cross-checked against.

    >>> from derive.definitions.activations import SIGMOID
    >>> mpmath_rounded(SIGMOID, np.array([0.0], dtype=np.float16), np.float16)
    (array([0.5], dtype=float16), array([0.5]), array([0.00048828]))
    """
    return _adaptive_rounded(expr, xs, dtype, digits, balls_first=False)


def _adaptive_rounded(
    expr: sp.Expr, xs: npt.ArrayLike, dtype: npt.DTypeLike, digits: int, balls_first: bool
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """:func:`mpmath_rounded`'s ``(rounded, exact, spacing)`` from the adaptive evaluation of
    :func:`evaluate`, whose values come, where ``balls_first``, from python-flint balls at
    rising precision wherever a ball meets its contract (``balls.values``), and from mpmath
    elsewhere (as :func:`correctly_rounded` takes them); the rounding test and its
    conventions are the same either way."""
    fmt, fmt64 = float_format(dtype), float_format(np.float64)
    check_dps(digits, MIN_REFERENCE_DIGITS, "digits")
    arr = _float_inputs(xs).ravel()
    rounded, values = _mpmath_rounded(_compiled(expr), arr, fmt, digits, balls_first)
    exact = np.array([_parts_to_numpy(_round_parts(v, fmt64), fmt64) for v in values])
    spacing = np.array([float(ulp(v, dtype)) for v in values])
    return rounded, exact.reshape(arr.shape), spacing.reshape(arr.shape)


def _rounded_array(
    compiled: _Compiled, arr: np.ndarray, fmt: FloatFormat, digits: int
) -> np.ndarray:
    """``compiled`` at every element of ``arr``, correctly rounded to ``fmt``: by balls
    (:mod:`derive.reference.balls`) where they decide, by mpmath where they do not."""
    rounded, _, _, decided = balls.rounded_parts(compiled.expr, arr, fmt.dtype)
    rest = np.flatnonzero(~decided)
    if rest.size:
        rounded[rest], _ = _mpmath_rounded(compiled, arr.ravel()[rest], fmt, digits)
    return rounded.reshape(arr.shape)


def reference_array(
    expr: sp.Expr, xs: npt.ArrayLike, dtype: npt.DTypeLike, digits: int = MIN_REFERENCE_DIGITS
) -> np.ndarray:
    """``expr`` at every element of ``xs``, correctly rounded to ``dtype``; same shape.

    ``xs`` (float16/32/64) is taken exactly. For float16 inputs and a float16 result, from
    4096 inputs on, or whenever the table is already built, the values come from the cached
    exhaustive :func:`float16_table`.

    >>> from derive.definitions.activations import elementwise
    >>> reference_array(elementwise("relu").forward, np.array([-1.5, 0.0, 2.5]), np.float32)
    array([0. , 0. , 2.5], dtype=float32)
    """
    fmt = float_format(dtype)
    check_dps(digits, MIN_REFERENCE_DIGITS, "digits")
    arr = _float_inputs(xs)
    key = (sp.sympify(expr), int(digits))
    if (
        arr.dtype == np.float16
        and fmt.dtype == np.float16
        and (arr.size >= _TABLE_THRESHOLD or key in _FLOAT16_TABLES)
    ):
        return float16_table(expr, digits).lookup(arr)
    return _rounded_array(_compiled(expr), arr, fmt, digits)


# --------------------------------------------------------------------------------------------
# Exhaustive float16 tables
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True, eq=False)
class Float16Table:
    """``f`` at all 65,536 inputs of a 16-bit format (``dtype``: float16, or bfloat16 for a
    :func:`bfloat16_table`), indexed by the input's bit pattern.

    ``rounded`` is the correctly rounded result in that format (from >= 50-digit references);
    ``exact`` the same reference correctly rounded to float64 (enough to measure float16 ULP
    errors to within 2^-42 ULP) and ``spacing`` its :func:`ulp` in the format. The arrays are
    read-only; ``seconds`` is the (wall-clock) time the build took. Where ``|f(x)|`` is below
    2^-1076, ``rounded`` and ``exact`` are the zero of the sign of ``f(x)`` where the ball
    references prove that sign (at every finite half of the catalog's expressions), else an
    unsigned reference's +0.0: compare zeros as numbers (``ulp_errors`` does).
    """

    expr: sp.Expr
    digits: int
    inputs: np.ndarray
    rounded: np.ndarray
    exact: np.ndarray
    spacing: np.ndarray
    seconds: float = field(default=0.0)
    dtype: np.dtype = field(default=np.dtype(np.float16))

    def lookup(self, xs: npt.ArrayLike) -> np.ndarray:
        """The correctly rounded results at the inputs ``xs`` (of the table's format)."""
        arr = np.asarray(xs)
        if arr.dtype != self.dtype:
            raise TypeError(f"xs must be {self.dtype}, got {arr.dtype}")
        return self.rounded[arr.view(np.uint16)]

    def ulp_errors(self, xs: npt.ArrayLike, actual: npt.ArrayLike) -> np.ndarray:
        """:func:`ulp_error` of ``actual`` (a result at each input ``xs``), as float64.

        Same conventions as :func:`ulp_error`: NaN against NaN and a matching overflow are 0,
        any other mismatch of class is inf.
        """
        arr = np.asarray(xs)
        got = np.asarray(actual).astype(np.float64)
        if arr.dtype != self.dtype or arr.shape != got.shape:
            raise ValueError(
                f"xs must be {self.dtype} with the shape of actual {got.shape}, got {arr.dtype} "
                f"{arr.shape}"
            )
        bits = arr.view(np.uint16)
        exact, rounded, spacing = self.exact[bits], self.rounded[bits], self.spacing[bits]
        errors = np.full(got.shape, np.inf)
        both_nan = np.isnan(exact) & np.isnan(got)
        errors[both_nan] = 0.0
        overflow = np.isinf(rounded)
        errors[overflow & (got == rounded)] = 0.0
        finite = np.isfinite(rounded) & np.isfinite(got)
        errors[finite] = np.abs(got[finite] - exact[finite]) / spacing[finite]
        return errors


_FLOAT16_TABLES: dict[tuple[sp.Expr, int], Float16Table] = {}
_BFLOAT16_TABLES: dict[tuple[sp.Expr, int], Float16Table] = {}


def float16_table(expr: sp.Expr, digits: int = MIN_REFERENCE_DIGITS) -> Float16Table:
    """The exhaustive float16 :class:`Float16Table` of ``expr``, built once per process.

    Cached by (expression, digits) for the life of the process (each pytest-xdist worker
    builds the tables it uses). The balls of :mod:`derive.reference.balls` decide almost
    every input; the rest (values within 2^-150 of a rounding boundary or a power of two,
    between 2^-1076 and 2^-1000, non-finite inputs) take the adaptive mpmath path. CPU time
    per table on one core (forward / derivative), seen on this 2-core machine: relu
    0.2 / 0.2 s, sigmoid 0.6 / 0.3 s, Swish 0.3 / 0.9 s, GeLU-sigmoid 0.3 / 1.2 s, GeLU-tanh
    1.0 / 4.0 s, GeLU 1.0 / 2.5 s (all-mpmath: 0.8-30 s each, GeLU's derivative the
    slowest, 67 s for all twelve against 13 s).
    """
    return _exhaustive_table(expr, np.dtype(np.float16), digits, _FLOAT16_TABLES)


def bfloat16_table(expr: sp.Expr, digits: int = MIN_REFERENCE_DIGITS) -> Float16Table:
    """The exhaustive bfloat16 table of ``expr`` (all 65,536 bfloat16 inputs, results
    correctly rounded to bfloat16), built and cached as :func:`float16_table`."""
    return _exhaustive_table(expr, BFLOAT16, digits, _BFLOAT16_TABLES)


def float16_values(
    expr: sp.Expr, digits: int = MIN_REFERENCE_DIGITS
) -> tuple[np.ndarray, np.ndarray]:
    """``(rounded, exact)`` of :func:`float16_table` at every finite half input (indexed by
    bits; NaN at the non-finite ones), the same arrays there, for less work: without the
    spacing, whose binade sends every value within 2^-150 of a power of two to mpmath (GeLU's
    derivative is 1 + e^(-x^2/2)... for thousands of halves), and whose absence lets the
    values the balls' rounding leaves take their evaluation from balls first
    (:func:`_balls_then_mpmath`: GeLU's forward and derivative 2.5 s instead of 5 s), and
    without the limits at +-inf. Taken from the table when this process has built it."""
    key = (sp.sympify(expr), int(digits))
    inputs = np.arange(1 << 16, dtype=np.uint16).view(np.float16)
    finite = np.isfinite(inputs)
    table = _FLOAT16_TABLES.get(key)
    if table is not None:
        rounded, exact = table.rounded.copy(), table.exact.copy()
    else:
        check_dps(digits, MIN_REFERENCE_DIGITS, "digits")
        rounded, exact = np.empty(1 << 16, dtype=np.float16), np.empty(1 << 16)
        parts = _balls_then_mpmath(key[0], inputs[finite], np.float16, digits, spacing=False)
        rounded[finite], exact[finite], _ = parts
    rounded[~finite], exact[~finite] = np.nan, np.nan
    return rounded, exact


def _balls_then_mpmath(
    expr: sp.Expr, points: np.ndarray, dtype: np.dtype, digits: int, spacing: bool = True
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``(rounded, exact, spacing)`` at every point: by the balls where they decide
    (:func:`balls.rounded_parts`, asked for the spacing or not), by the adaptive evaluation
    for the rest (:func:`_adaptive_rounded`).

    Without the spacing, that evaluation takes its values from balls first. Most of the rest
    are values below the ball decision's 2^-1000, such as GeLU's at x = -38.5 (about
    2^-1043): the balls' ``erfc`` form has the value at 200 bits, where mpmath alone, whose
    ``1 + erf`` cancels, climbs to some 1,300 bits (about 25 ms a point, 2.5 s of GeLU's
    float16 values). With the spacing it is mpmath alone: the spacing needs the value's
    binade, and a ball's midpoint may lie in the binade above (sigmoid(138) = 1 - 2^-199,
    whose ball midpoint is 1), where mpmath's value lies below. Compared on the catalog's
    12 expressions, all 65,536 inputs each: the float16 values identical either way, and
    the spacing differs at 4,866 inputs of the float16 and bfloat16 tables."""
    rounded, exact, spacings, decided = balls.rounded_parts(expr, points, dtype, spacing)
    rest = np.flatnonzero(~decided)
    rounded[rest], exact[rest], spacings[rest] = _adaptive_rounded(
        expr, points[rest], dtype, digits, balls_first=not spacing
    )
    return rounded, exact, spacings


def _exhaustive_table(
    expr: sp.Expr, dtype: np.dtype, digits: int, tables: dict[tuple[sp.Expr, int], Float16Table]
) -> Float16Table:
    check_dps(digits, MIN_REFERENCE_DIGITS, "digits")
    key = (sp.sympify(expr), int(digits))
    table = tables.get(key)
    if table is None:
        start = time.perf_counter()
        inputs = np.arange(1 << 16, dtype=np.uint16).view(dtype)
        points = _widened(inputs) if dtype == BFLOAT16 else inputs
        rounded, exact, spacing = _balls_then_mpmath(key[0], points, dtype, key[1])
        for array in (inputs, rounded, exact, spacing):
            array.setflags(write=False)
        table = Float16Table(
            key[0], key[1], inputs, rounded, exact, spacing, time.perf_counter() - start, dtype
        )
        tables[key] = table
    return table


# --------------------------------------------------------------------------------------------
# Condition numbers
# --------------------------------------------------------------------------------------------


@cache
def _derivative(expr: sp.Expr) -> sp.Expr:
    return sp.diff(expr, x)


def condition_number(
    f_expr: sp.Expr,
    x_value: mpmath.mpf | float | int,
    digits: int = 20,
    *,
    floor_bits: int = FLOOR_BITS,
) -> mpmath.mpf:
    """The relative condition number ``|x f'(x) / f(x)|``, ``f'`` by ``sympy.diff``.

    Conventions: a value below the evaluation floor ``2^-floor_bits`` counts as zero. Where
    ``x f'(x) = 0`` (x = 0, or f' = 0) the result is 0 -- a relative perturbation of x does
    not move f to first order, even if f(x) = 0 as well (ReLU left of the kink, GeLU at 0).
    Otherwise, where ``f(x) = 0`` it is inf. At +-inf it is the limit of ``x f'/f``; at NaN,
    NaN.

    >>> from derive.definitions.activations import SIGMOID
    >>> condition_number(SIGMOID, 0)  # x sigma'(x) / sigma(x) = x / (1 + e^x)
    mpf('0.0')
    >>> mpmath.nstr(condition_number(SIGMOID, 2), 15), mpmath.nstr(2 / (1 + mpmath.e**2), 15)
    ('0.238405844044235', '0.238405844044235')
    """
    expr = sp.sympify(f_expr)
    xm = exact(x_value, "x_value")
    if mpmath.isnan(xm):
        return _NAN
    derivative = _derivative(expr)
    if mpmath.isinf(xm):
        ratio = sp.Abs(x * derivative / expr)
        return _limit_value(ratio, 1 if xm > 0 else -1, digits, floor_bits)
    floor = _pow2(-floor_bits)
    slope = evaluate(derivative, xm, digits, floor_bits=floor_bits)
    if not xm or abs(slope) < floor:
        return mpmath.mpf(0)
    fx = evaluate(expr, xm, digits, floor_bits=floor_bits)
    if abs(fx) < floor:
        return mpmath.mpf("inf")
    with mpmath.workprec(_target_bits(digits) + _GUARD_BITS):
        return abs(xm * slope / fx)
