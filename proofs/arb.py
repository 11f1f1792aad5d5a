"""Rigorous interval arithmetic for the proofs: python-flint ``arb`` balls driven by SymPy.

* :func:`to_arb` translates a SymPy expression into a function on ``arb`` balls, so that a
  proof evaluates the same expression tree that :mod:`derive.definitions.activations` defines (one
  definition, several arithmetics). Unsupported nodes raise :class:`ArbTranslationError`.
* :func:`working_precision` sets python-flint's global ``ctx.prec`` for a block and restores
  it; every public function here takes its precision ``prec`` (bits) explicitly.
* :func:`prove_abs_bound` proves ``|g(x)| <= M`` on ``[a, b]`` by branch-and-bound.
* :func:`isolate_roots`, :func:`certify_unique_root` and :func:`refine_root` isolate the
  zeros of a function with a uniqueness certificate and refine one to many digits.
* :func:`coefficients_sign` and :func:`orthant_nonnegative` are sign certificates for
  polynomials, deciding inexact coefficients (``sqrt(2/pi)``) by enclosure.

An arb comparison such as ``a <= b`` is ``True`` only when it holds for every pair of points
of the two balls, so every ``True`` below is a proof; an undecided comparison is ``False``.
Interval endpoints are exact rationals (:class:`fractions.Fraction`); a ball built from them
(:func:`interval`) contains the whole closed interval whatever the rounding.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from fractions import Fraction

import flint
import sympy as sp
from flint import arb, fmpq

#: Working precision in bits for the proofs (about 60 decimal digits).
DEFAULT_PREC = 200

#: Budgets of the interval searches: they stop and report failure instead of looping.
MAX_BOXES = 50_000
MAX_DEPTH = 240

ArbFunction = Callable[[arb], arb]
RationalLike = int | Fraction | str | sp.Rational


class ArbTranslationError(ValueError):
    """A SymPy node that :func:`to_arb` cannot evaluate rigorously."""


class SearchFailed(ArithmeticError):
    """An interval search ran out of its box or depth budget, or of precision."""


@contextmanager
def working_precision(bits: int) -> Iterator[None]:
    """Set python-flint's global precision to ``bits`` inside the block, then restore it.

    >>> before = flint.ctx.prec
    >>> with working_precision(100):
    ...     flint.ctx.prec
    100
    >>> flint.ctx.prec == before
    True
    """
    if bits < 2:
        raise ValueError(f"precision must be at least 2 bits, got {bits}")
    saved = flint.ctx.prec
    flint.ctx.prec = bits
    try:
        yield
    finally:
        flint.ctx.prec = saved


def as_fraction(value: RationalLike) -> Fraction:
    """An exact rational from an int, Fraction, decimal string or SymPy Rational.

    Floats are refused: a proof's constants must be exact.

    >>> as_fraction("1.25"), as_fraction(sp.Rational(1, 3))
    (Fraction(5, 4), Fraction(1, 3))
    """
    if isinstance(value, bool) or isinstance(value, float):
        raise TypeError(f"expected an exact rational, got {type(value).__name__} {value!r}")
    if isinstance(value, sp.Rational):
        return Fraction(int(value.p), int(value.q))
    if isinstance(value, sp.Basic):
        raise TypeError(f"expected an exact rational, got the SymPy expression {value}")
    return Fraction(value)


def point(value: RationalLike) -> arb:
    """A ball containing the rational ``value`` at the current precision."""
    q = as_fraction(value)
    return arb(fmpq(q.numerator, q.denominator))


def interval(lo: RationalLike, hi: RationalLike) -> arb:
    """A ball containing the closed interval ``[lo, hi]`` at the current precision."""
    return point(lo).union(point(hi))


def endpoints(ball: arb, *, prec: int = DEFAULT_PREC) -> tuple[Fraction, Fraction]:
    """Exact rational lower and upper bounds of a finite ball, rounded outwards to ``prec``
    bits (use at least the precision the ball was computed at, or the bounds get loose)."""
    if not ball.is_finite():
        raise SearchFailed(f"ball {ball} is not finite")
    with working_precision(prec):
        return _exact(ball.lower()), _exact(ball.upper())


def _exact(ball: arb) -> Fraction:
    mantissa, exponent = ball.man_exp()
    mantissa, exponent = int(mantissa), int(exponent)
    return Fraction(mantissa * 2**exponent) if exponent >= 0 else Fraction(mantissa, 2**-exponent)


def sign(ball: arb) -> int:
    """+1 or -1 if the ball is certainly positive or negative, 0 if it contains 0 (or NaN)."""
    if ball > 0:
        return 1
    if ball < 0:
        return -1
    return 0


# --------------------------------------------------------------------------------------
# SymPy -> arb translation
# --------------------------------------------------------------------------------------


def _erfc(t: arb) -> arb:
    """erfc on a real ball. Where arb's own enclosure loses the value (large arguments that
    are not exact: at 128 bits, and at 1600, erfc(2^20 sqrt(2)/2) comes out as a ball
    around 0), the hull of erfc at the ball's two endpoints, which are exact numbers,
    encloses it as surely (erfc is decreasing on the reals), and to ~90 bits there.

    >>> with working_precision(128):
    ...     _erfc(arb(2) ** 20 * arb(2).sqrt() / 2).str(5)
    '[1.2355e-238755916372 +/- 4.60e-238755916378]'
    """
    out = t.erfc()
    if out.rel_accuracy_bits() >= 0 or t.rad() == 0 or not t.is_finite():
        return out
    return t.upper().erfc().union(t.lower().erfc())


_UNARY: dict[type, Callable[[arb], arb]] = {
    sp.exp: arb.exp,
    sp.log: arb.log,
    sp.erf: arb.erf,
    sp.erfc: _erfc,
    sp.tanh: arb.tanh,
    sp.Abs: abs,
}


@functools.cache
def to_arb(expr: sp.Expr, var: sp.Symbol | None = None) -> ArbFunction:
    """Translate ``expr`` (in the single symbol ``var``) into a function on arb balls.

    Supported: Add, Mul, Pow with integer or rational exponent, exp, log, erf, erfc, tanh,
    sqrt, Abs, pi, E, Integer, Rational. Anything else (Float, Piecewise, other symbols or
    functions) raises :class:`ArbTranslationError`. Constants are evaluated at the
    precision in force when the function is called (see :func:`working_precision`), once
    per precision.

    >>> from derive.definitions.activations import x
    >>> f = to_arb(sp.erf(x / sp.sqrt(2)) + sp.pi, x)
    >>> with working_precision(64):
    ...     f(arb(0)).str(15, radius=False)
    '3.14159265358979'
    >>> to_arb(sp.Float("1.702") * x, x)
    Traceback (most recent call last):
    ...
    proofs.arb.ArbTranslationError: cannot evaluate the Float 1.70200000000000 rigorously ...
    """
    expr = sp.sympify(expr)
    return _translate(expr, None) if var is None else _straight_line(expr, var)


def _translate(expr: sp.Basic, var: sp.Symbol | None) -> ArbFunction:
    """``expr`` as a tree of closures, one per node: what :func:`_straight_line` is checked
    against (``tests/proofs/test_core.py``), and how it evaluates the constant parts."""
    if var is not None and expr == var:
        return lambda t: t
    if var is not None and not expr.free_symbols:
        return _constant(_translate(expr, None))
    if isinstance(expr, sp.Integer):
        n = int(expr)
        return lambda t: arb(n)
    if isinstance(expr, sp.Rational):
        p, q = int(expr.p), int(expr.q)
        return lambda t: arb(fmpq(p, q))
    if expr is sp.pi:
        return lambda t: arb.pi()
    if expr is sp.E:
        return lambda t: arb.const_e()
    if isinstance(expr, sp.Float):
        raise ArbTranslationError(
            f"cannot evaluate the Float {expr} rigorously (inexact); write it as a Rational"
        )
    if isinstance(expr, sp.Add | sp.Mul):
        parts = tuple(_translate(arg, var) for arg in expr.args)
        return _fold_add(parts) if isinstance(expr, sp.Add) else _fold_mul(parts)
    if isinstance(expr, sp.Pow):
        return _translate_pow(expr, var)
    if type(expr) in _UNARY and len(expr.args) == 1:
        inner = _translate(expr.args[0], var)
        function = _UNARY[type(expr)]
        return lambda t: function(inner(t))
    raise ArbTranslationError(
        f"cannot translate {type(expr).__name__} node {expr} to arb "
        f"(supported: Add, Mul, Pow, exp, log, erf, erfc, tanh, sqrt, Abs, pi, E, "
        f"Integer, Rational and the variable {var})"
    )


def _constant(function: ArbFunction) -> ArbFunction:
    """``function``, which does not read its argument, evaluated once per working precision:
    a constant part of an expression (``sqrt(2)/2``, ``1/sqrt(pi)``) is not recomputed at
    every point. The same bits as recomputing it: arb's results depend only on the
    precision."""
    values: dict[int, arb] = {}

    def constant(t: arb) -> arb:
        prec = flint.ctx.prec
        value = values.get(prec)
        if value is None:
            value = values[prec] = function(t)
        return value

    return constant


def _fold_add(parts: tuple[ArbFunction, ...]) -> ArbFunction:
    def add(t: arb) -> arb:
        total = parts[0](t)
        for part in parts[1:]:
            total = total + part(t)
        return total

    return add


def _fold_mul(parts: tuple[ArbFunction, ...]) -> ArbFunction:
    def mul(t: arb) -> arb:
        product = parts[0](t)
        for part in parts[1:]:
            product = product * part(t)
        return product

    return mul


def _translate_pow(expr: sp.Pow, var: sp.Symbol | None) -> ArbFunction:
    base, exponent = expr.args
    if base is sp.E:
        inner = _translate(exponent, var)
        return lambda t: inner(t).exp()
    b = _translate(base, var)
    if isinstance(exponent, sp.Integer):
        n = int(exponent)
        return lambda t: b(t) ** n
    if isinstance(exponent, sp.Rational):
        p, q = int(exponent.p), int(exponent.q)
        if q == 2:
            if p == 1:
                return lambda t: b(t).sqrt()
            if p == -1:
                return lambda t: b(t).rsqrt()
            return lambda t: b(t).sqrt() ** p
        return lambda t: b(t).root(q) ** p
    raise ArbTranslationError(f"cannot translate the power {expr}: exponent is not rational")


def enclose(
    expr: sp.Expr,
    var: sp.Symbol | None = None,
    lo: RationalLike | None = None,
    hi: RationalLike | None = None,
    *,
    prec: int = DEFAULT_PREC,
) -> arb:
    """A ball containing ``expr`` (a constant, or its range over ``[lo, hi]``).

    >>> enclose(sp.exp(-1) / sp.sqrt(sp.pi), prec=64).str(15, radius=False)
    '0.207553748710297'
    """
    function = to_arb(sp.sympify(expr), var)
    with working_precision(prec):
        if var is None:
            return function(arb(0))
        if lo is None or hi is None:
            raise ValueError("an expression in a variable needs the interval [lo, hi]")
        return function(interval(lo, hi))


def within(
    expr: sp.Expr,
    lower: RationalLike | None = None,
    upper: RationalLike | None = None,
    *,
    var: sp.Symbol | None = None,
    lo: RationalLike | None = None,
    hi: RationalLike | None = None,
    strict: bool = False,
    prec: int = DEFAULT_PREC,
) -> bool:
    """True iff ``lower <= expr <= upper`` (``<`` if ``strict``) is certain for all of
    ``[lo, hi]`` (or for the constant ``expr``). A missing bound is not checked.

    >>> within(sp.exp(-1) / sp.sqrt(sp.pi), "0.2075", "0.2076")
    True
    >>> within(sp.exp(-1) / sp.sqrt(sp.pi), upper="0.2075")
    False
    """
    if lower is None and upper is None:
        raise ValueError("give a lower or an upper bound")
    with working_precision(prec):
        ball = enclose(expr, var, lo, hi, prec=prec)
        if lower is not None:
            bound = point(lower)
            if not (ball > bound if strict else ball >= bound):
                return False
        if upper is not None:
            bound = point(upper)
            if not (ball < bound if strict else ball <= bound):
                return False
    return True


# --------------------------------------------------------------------------------------
# Branch-and-bound
# --------------------------------------------------------------------------------------


def _straight_line(expr: sp.Expr, var: sp.Symbol) -> ArbFunction:
    """``expr`` in ``var`` as one generated Python function of straight-line arb operations,
    the same operations as :func:`_translate`'s closures (sums and products folded from the
    left in SymPy's argument order, the same powers and functions) with each distinct
    subtree computed once: arb is deterministic at a given precision, so the balls are the
    same, bit for bit. A function call per node was most of the time of an evaluation (the
    float16 references evaluate 12 expressions at 63,488 points). The constant parts are
    :func:`_translate`'s closures, evaluated once per working precision.
    """
    lines: list[str] = []
    names: dict[sp.Basic, str] = {}
    constants: list[ArbFunction] = []
    namespace: dict[str, object] = {}

    def fresh(text: str) -> str:
        name = f"v{len(lines)}"
        lines.append(f"{name} = {text}")
        return name

    def function_name(function: Callable[[arb], arb]) -> str:
        name = next((k for k, f in namespace.items() if f is function), f"f{len(namespace)}")
        namespace[name] = function
        return name

    def visit(node: sp.Basic) -> str:
        name = names.get(node)
        if name is not None:
            return name
        if node == var:
            return "t"
        if not node.free_symbols:
            constants.append(_translate(node, None))
            name = f"c[{len(constants) - 1}]"
        elif isinstance(node, sp.Add | sp.Mul):
            operator = " + " if isinstance(node, sp.Add) else " * "
            parts = [visit(arg) for arg in node.args]
            name = parts[0]
            for part in parts[1:]:
                name = fresh(f"{name}{operator}{part}")
        elif isinstance(node, sp.Pow):
            name = visit_pow(node)
        elif type(node) in _UNARY and len(node.args) == 1:
            inner = visit(node.args[0])
            name = fresh(f"{function_name(_UNARY[type(node)])}({inner})")
        else:
            _translate(node, var)  # raises the translation error for this node
            raise AssertionError(f"no straight-line form for {node}")  # pragma: no cover
        names[node] = name
        return name

    def visit_pow(node: sp.Pow) -> str:
        base, exponent = node.args
        if base is sp.E:
            return fresh(f"{visit(exponent)}.exp()")
        if isinstance(exponent, sp.Integer):
            return fresh(f"{visit(base)} ** ({int(exponent)})")
        if isinstance(exponent, sp.Rational):
            b, p, q = visit(base), int(exponent.p), int(exponent.q)
            if q == 2:
                if p == 1:
                    return fresh(f"{b}.sqrt()")
                if p == -1:
                    return fresh(f"{b}.rsqrt()")
                return fresh(f"{b}.sqrt() ** ({p})")
            return fresh(f"{b}.root({q}) ** ({p})")
        return _translate_pow(node, var)  # raises: the exponent is not rational

    result = visit(expr)
    body = "".join(f"    {line}\n" for line in lines)
    exec(f"def evaluate(t, c):\n{body}    return {result}\n", namespace)
    evaluate = namespace["evaluate"]
    values: dict[int, tuple[arb, ...]] = {}

    def straight_line(t: arb) -> arb:
        prec = flint.ctx.prec
        known = values.get(prec)
        if known is None:
            known = values[prec] = tuple(constant(t) for constant in constants)
        return evaluate(t, known)

    return straight_line


@dataclass(frozen=True)
class BoundSearch:
    """The outcome of :func:`prove_abs_bound`.

    ``proved`` is True iff ``|g| <= bound`` was proven on the whole interval; otherwise
    ``reason`` says why not and, for a certain violation, ``counterexample`` is a point
    where ``|g|`` certainly exceeds the bound and ``value`` an enclosure of ``g`` there.
    """

    proved: bool
    boxes: int
    reason: str
    counterexample: Fraction | None = None
    value: str = ""


def prove_abs_bound(
    expr: sp.Expr,
    var: sp.Symbol,
    a: RationalLike,
    b: RationalLike,
    bound: RationalLike,
    *,
    prec: int = DEFAULT_PREC,
    max_boxes: int = MAX_BOXES,
    max_depth: int = MAX_DEPTH,
) -> BoundSearch:
    """Prove ``|g(x)| <= bound`` for all ``x`` in ``[a, b]``, where ``g = expr``.

    Each box ``X`` is accepted if one of these enclosures is within the bound:
    the natural interval extension ``g(X)``; the mean-value form
    ``g(m) + g'(X) (X - m)`` around the midpoint ``m``; or, when ``g'(X) >= 0`` or
    ``g'(X) <= 0`` (``g`` monotone on ``X``), the values at the two endpoints. Otherwise the box is
    bisected. The search stops with ``proved=False`` at the first midpoint where ``|g|``
    certainly exceeds the bound, or when ``max_boxes`` boxes or ``max_depth`` bisections
    are used up. ``g'`` is ``sympy.diff(expr, var)``. A bound equal to the maximum is
    provable only with some slack (the enclosures overestimate by about the square of the
    box radius near an interior maximum): prove ``max + 10**-k`` for the digits you need.

    >>> from derive.definitions.activations import x
    >>> prove_abs_bound(x * (1 - x), x, 0, 1, "0.25000000000000000000000000000001").proved
    True
    >>> prove_abs_bound(x * (1 - x), x, 0, 1, "0.2499").reason
    'counterexample: |g(1/2)| > bound'
    """
    a, b, bound = as_fraction(a), as_fraction(b), as_fraction(bound)
    if a > b:
        raise ValueError(f"empty interval [{a}, {b}]")
    g = to_arb(sp.sympify(expr), var)
    dg = to_arb(sp.diff(expr, var), var)
    boxes = 0
    with working_precision(prec):
        limit = point(bound)

        def below(ball: arb) -> bool:
            return abs(ball) <= limit

        stack = [(a, b, 0)]
        while stack:
            lo, hi, depth = stack.pop()
            boxes += 1
            if boxes > max_boxes:
                return BoundSearch(False, boxes, f"box budget {max_boxes} used up at [{lo}, {hi}]")
            box = interval(lo, hi)
            if below(g(box)):
                continue
            mid = (lo + hi) / 2
            centre = point(mid)
            at_mid = g(centre)
            if abs(at_mid) > limit:
                return BoundSearch(
                    False, boxes, f"counterexample: |g({mid})| > bound", mid, at_mid.str(30)
                )
            slope = dg(box)
            if below(at_mid + slope * (box - centre)):
                continue
            monotone = slope >= 0 or slope <= 0
            if monotone and below(g(point(lo))) and below(g(point(hi))):
                continue
            if depth >= max_depth:
                return BoundSearch(
                    False, boxes, f"depth budget {max_depth} used up at [{lo}, {hi}]"
                )
            stack.append((mid, hi, depth + 1))
            stack.append((lo, mid, depth + 1))
    return BoundSearch(True, boxes, "proved")


# --------------------------------------------------------------------------------------
# Roots
# --------------------------------------------------------------------------------------


def _signs(function: ArbFunction, *points: Fraction) -> tuple[int, ...]:
    return tuple(sign(function(point(p))) for p in points)


def certify_unique_root(
    expr: sp.Expr, var: sp.Symbol, lo: RationalLike, hi: RationalLike, *, prec: int = DEFAULT_PREC
) -> bool:
    """True iff ``expr`` has exactly one zero in ``[lo, hi]``, certified by arb.

    The certificate: the values at ``lo`` and ``hi`` have certain, opposite signs
    (existence, by continuity) and the enclosure of the derivative over ``[lo, hi]``
    excludes 0 (uniqueness, by monotonicity).

    >>> from derive.definitions.activations import x
    >>> certify_unique_root(x**2 - 2, x, 1, 2), certify_unique_root(x**2 - 2, x, 2, 3)
    (True, False)
    """
    lo, hi = as_fraction(lo), as_fraction(hi)
    if lo >= hi:
        return False
    function = to_arb(sp.sympify(expr), var)
    slope = to_arb(sp.diff(expr, var), var)
    with working_precision(prec):
        at_lo, at_hi = _signs(function, lo, hi)
        if at_lo * at_hi != -1:
            return False
        derivative = slope(interval(lo, hi))
        return bool(derivative > 0 or derivative < 0)


def isolate_roots(
    expr: sp.Expr,
    var: sp.Symbol,
    a: RationalLike,
    b: RationalLike,
    *,
    prec: int = DEFAULT_PREC,
    max_boxes: int = MAX_BOXES,
    max_depth: int = MAX_DEPTH,
) -> tuple[tuple[Fraction, Fraction], ...]:
    """All zeros of ``expr`` on ``[a, b]``, each in its own interval with a certificate.

    The boxes of a bisection of ``[a, b]`` are discarded where the enclosure of ``expr``
    excludes 0 or where ``expr`` is monotone with one certain sign at both ends, and kept
    as an isolating interval where it is monotone with opposite certain signs at the ends
    (:func:`certify_unique_root`). The result, sorted, therefore lists every zero exactly
    once. Raises :class:`SearchFailed` if the budget runs out (e.g. a double zero, or a zero
    exactly at a bisection point).

    >>> from derive.definitions.activations import x
    >>> isolate_roots(x**2 - 2, x, -2, 2)
    ((Fraction(-2, 1), Fraction(-1, 1)), (Fraction(1, 1), Fraction(2, 1)))
    """
    a, b = as_fraction(a), as_fraction(b)
    function = to_arb(sp.sympify(expr), var)
    slope = to_arb(sp.diff(expr, var), var)
    roots = []
    boxes = 0
    with working_precision(prec):
        stack = [(a, b, 0)]
        while stack:
            lo, hi, depth = stack.pop()
            boxes += 1
            if boxes > max_boxes or depth > max_depth:
                raise SearchFailed(f"root isolation budget used up at [{lo}, {hi}]")
            box = interval(lo, hi)
            if sign(function(box)) != 0:
                continue
            derivative = slope(box)
            if derivative > 0 or derivative < 0:
                at_lo, at_hi = _signs(function, lo, hi)
                if at_lo * at_hi == -1:
                    roots.append((lo, hi))
                    continue
                if at_lo * at_hi == 1:
                    continue
            mid = (lo + hi) / 2
            stack.append((mid, hi, depth + 1))
            stack.append((lo, mid, depth + 1))
    return tuple(sorted(roots))


def refine_root(
    expr: sp.Expr,
    var: sp.Symbol,
    lo: RationalLike,
    hi: RationalLike,
    *,
    digits: int,
    prec: int = DEFAULT_PREC,
) -> tuple[Fraction, Fraction]:
    """Shrink a sign-change bracket ``[lo, hi]`` of ``expr`` to relative width ``10**-digits``.

    Bisection with certain signs at each midpoint, so a zero stays inside. Raises
    ``ValueError`` without a certain sign change at the ends, and :class:`SearchFailed` if
    a midpoint's sign cannot be decided at ``prec`` bits (raise ``prec``).

    >>> from derive.definitions.activations import x
    >>> lo, hi = refine_root(x**2 - 2, x, 1, 2, digits=20)
    >>> to_decimal(lo, 20), to_decimal(hi, 20)
    ('1.4142135623730950488', '1.4142135623730950488')
    """
    lo, hi = as_fraction(lo), as_fraction(hi)
    function = to_arb(sp.sympify(expr), var)
    with working_precision(prec):
        at_lo, at_hi = _signs(function, lo, hi)
        if at_lo * at_hi != -1:
            raise ValueError(f"no certain sign change of {expr} on [{lo}, {hi}]")
        scale = Fraction(1, 10**digits)
        while hi - lo > scale * (min(abs(lo), abs(hi)) if lo * hi > 0 else 1):
            mid = (lo + hi) / 2
            (at_mid,) = _signs(function, mid)
            if at_mid == 0:
                raise SearchFailed(f"sign of {expr} at {mid} undecided at {prec} bits")
            if at_mid == at_lo:
                lo = mid
            else:
                hi = mid
    return lo, hi


# --------------------------------------------------------------------------------------
# Sign certificates for polynomials
# --------------------------------------------------------------------------------------

_SIGNS = ("nonnegative", "nonpositive")


def constant_sign_is(value: sp.Expr, wanted: str, *, prec: int = DEFAULT_PREC) -> bool:
    """True iff the constant ``value`` is certainly ``wanted`` ("nonnegative"/"nonpositive").

    Exact for rationals; otherwise decided by an arb enclosure (0 only if SymPy says so).
    """
    if wanted not in _SIGNS:
        raise ValueError(f"wanted must be one of {_SIGNS}, got {wanted!r}")
    value = sp.sympify(value)
    if value.free_symbols:
        return False
    if value.is_zero is True:
        return True
    if isinstance(value, sp.Rational):
        return value > 0 if wanted == "nonnegative" else value < 0
    ball = enclose(value, prec=prec)
    return bool(ball > 0) if wanted == "nonnegative" else bool(ball < 0)


def coefficients_sign(
    poly: sp.Expr, var: sp.Symbol, wanted: str, *, prec: int = DEFAULT_PREC
) -> bool:
    """True iff ``poly`` is a polynomial in ``var`` whose coefficients are all ``wanted``.

    Then ``poly(s)`` has that sign for every ``s >= 0``.

    >>> s = sp.Symbol("s", nonnegative=True)
    >>> coefficients_sign(sp.expand((1 + s) ** 3 * sp.sqrt(2 / sp.pi)), s, "nonnegative")
    True
    >>> coefficients_sign(1 - s, s, "nonnegative")
    False
    """
    poly = sp.expand(sp.sympify(poly))
    if not poly.is_polynomial(var):
        return False
    coefficients = sp.Poly(poly, var).all_coeffs()
    return all(constant_sign_is(c, wanted, prec=prec) for c in coefficients)


def orthant_nonnegative(
    expr: sp.Expr,
    symbols: Sequence[sp.Symbol],
    multiplier: sp.Expr,
    *,
    prec: int = DEFAULT_PREC,
) -> bool:
    """True iff ``expr >= 0`` whenever all ``symbols`` are positive (and by continuity >= 0
    where ``expr`` stays defined), certified as follows.

    ``multiplier`` is positive there (SymPy's assumption system, on positive dummies), and
    ``cancel(expr * multiplier)`` is a polynomial in ``symbols`` with nonnegative
    coefficients.

    >>> u, p = sp.symbols("u p")
    >>> orthant_nonnegative(u * (1 + p) - u / (1 + u) * (p / (1 + u) - 1), (u, p),
    ...                     (1 + u) ** 2 / u)
    True
    >>> orthant_nonnegative(u - p, (u, p), sp.Integer(1))
    False
    """
    positive = {s: sp.Dummy(s.name, positive=True) for s in symbols}
    scaled = sp.sympify(multiplier).subs(positive)
    if scaled.is_positive is not True:
        return False
    product = sp.cancel(sp.sympify(expr) * multiplier)
    if not product.is_polynomial(*symbols):
        return False
    coefficients = sp.Poly(sp.expand(product), *symbols).coeffs()
    return all(constant_sign_is(c, "nonnegative", prec=prec) for c in coefficients)


# --------------------------------------------------------------------------------------
# Decimal output with directed rounding
# --------------------------------------------------------------------------------------

_ROUNDINGS = ("floor", "ceiling", "nearest")


def to_decimal(value: RationalLike, digits: int, rounding: str = "nearest") -> str:
    """``value`` rounded to ``digits`` significant digits, as a plain decimal string.

    ``rounding`` is "floor" (towards -oo), "ceiling" (towards +oo) or "nearest" (ties to
    even); "floor" and "ceiling" give rigorous lower and upper bounds.

    >>> to_decimal(Fraction(2, 3), 5, "floor"), to_decimal(Fraction(-2, 3), 5, "floor")
    ('0.66666', '-0.66667')
    >>> to_decimal(1, 3), to_decimal(Fraction(1, 4), 5, "ceiling")
    ('1.00', '0.25000')
    """
    if rounding not in _ROUNDINGS:
        raise ValueError(f"rounding must be one of {_ROUNDINGS}, got {rounding!r}")
    q = as_fraction(value)
    if q == 0:
        return "0." + "0" * (digits - 1) if digits > 1 else "0"
    exponent = len(str(abs(q.numerator))) - len(str(q.denominator))
    while Fraction(10) ** exponent > abs(q):
        exponent -= 1
    while Fraction(10) ** (exponent + 1) <= abs(q):
        exponent += 1
    scale = digits - 1 - exponent
    scaled = q * Fraction(10) ** scale
    if rounding == "floor":
        n = scaled.numerator // scaled.denominator
    elif rounding == "ceiling":
        n = -((-scaled.numerator) // scaled.denominator)
    else:
        n = round(scaled)
    return _positional(n, scale)


def _positional(n: int, scale: int) -> str:
    """The decimal string of ``n * 10**-scale``."""
    text = str(abs(n))
    if scale <= 0:
        text += "0" * -scale
    else:
        text = text.rjust(scale + 1, "0")
        text = f"{text[:-scale]}.{text[-scale:]}"
    return f"-{text}" if n < 0 else text
