"""The proof data model: a claim, a tuple of steps, and checkers that establish each step.

A :class:`Step` pairs a statement a student can read (Markdown with ``$LaTeX$``) with a
``check`` -- a function of no arguments that returns ``True`` only if the statement has
been established by the named ``method``. A :class:`Proof` is a claim plus its steps;
:meth:`Proof.verify` runs every step and names the ones that failed.

Exceptions. A checker returns ``False`` when its method cannot establish the statement
(SymPy cannot reduce a difference to 0, an assumption query answers ``None``, an arb
enclosure is too wide, a search budget runs out). Anything else it raises propagates out of
the checker; :meth:`Proof.verify` then records the step as failed with the exception's text
instead of stopping, so a broken checker can never count as a success and never hides the
outcome of the other steps.

This module holds the exact (SymPy) checkers; the interval checkers live in
:mod:`proofs.arb`.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from enum import Enum

import sympy as sp

from proofs.arb import ArbTranslationError, enclose, sign
from proofs.polynomial import vanishes

#: The methods a step may use. Every method except sampling establishes its statement.
METHODS: tuple[str, ...] = (
    "symbolic identity",  # sympy.simplify(a - b) == 0 (after exact normalisations)
    "symbolic sign",  # SymPy's assumption system answers True (e.g. exp(-x)/(...)**2 > 0)
    "sign certificate",  # a polynomial whose coefficients all have one sign
    "symbolic limit",  # sympy.limit equals an exact value
    "symbolic solution set",  # sympy.solveset equals an exact set
    "arb enclosure",  # a python-flint arb ball evaluation decides an inequality
    "arb branch-and-bound",  # a bound proven on an interval by recursive bisection
    "arb root isolation",  # sign change plus a derivative enclosure excluding 0
    "exact witness",  # an exact evaluation at an exact point
    "exhaustive enumeration",  # every case of a finite case split, each checked exactly
    "sampling (evidence)",  # random or grid sampling: evidence, never a proof
)


class Verdict(str, Enum):
    """A claim's verdict (SPEC, "Claims, verdicts and the JSON report"): compares and
    prints as its plain string, so ``claims.json`` reads ``"holds"``.

    >>> Verdict("holds_loose") is Verdict.HOLDS_LOOSE, f"{Verdict.FAILS}"
    (True, 'fails')
    """

    #: true as stated (an equality, or a bound that is attained or approached)
    HOLDS = "holds"
    #: a valid upper bound that is not tight
    HOLDS_LOOSE = "holds_loose"
    #: false as stated, with a counterexample
    FAILS = "fails"
    #: wrong as printed, but the evident intent holds
    MISPRINTED = "misprinted"
    #: an "≈" claim: the exact value and the relative error
    APPROX = "approx"

    __str__ = str.__str__
    __format__ = str.__format__


class UnprovenError(RuntimeError):
    """A verdict's proof step did not check: the verdict cannot be reported."""


#: The only method that does not prove its statement.
EVIDENCE_METHODS: tuple[str, ...] = ("sampling (evidence)",)

Check = Callable[[], bool]


@dataclass(frozen=True)
class Step:
    r"""One statement of a proof and the machine check that establishes it.

    ``check()`` must return ``True`` only if the statement holds by ``method``; it returns
    ``False`` when the method cannot decide (see the module docstring for exceptions).

    >>> from derive.definitions.activations import x
    >>> step = Step("$\\sin^2 x + \\cos^2 x = 1$", "symbolic identity",
    ...             identity(sp.sin(x) ** 2 + sp.cos(x) ** 2, 1))
    >>> step.check(), step.rigorous
    (True, True)
    """

    statement: str
    method: str
    check: Check

    def __post_init__(self) -> None:
        if self.method not in METHODS:
            raise ValueError(f"unknown proof method {self.method!r}; known: {', '.join(METHODS)}")

    @property
    def rigorous(self) -> bool:
        """``False`` only for sampling, which is evidence and never a proof."""
        return self.method not in EVIDENCE_METHODS


@dataclass(frozen=True)
class StepOutcome:
    """What happened when one step was checked; ``error`` is the exception text, if any."""

    index: int
    statement: str
    method: str
    ok: bool
    error: str = ""

    def describe(self) -> str:
        """A one-line account, e.g. ``step 3 (arb enclosure): failed``."""
        status = "ok" if self.ok else "failed"
        if self.error:
            status += f" ({self.error})"
        return f"step {self.index} ({self.method}): {status} -- {self.statement}"


@dataclass(frozen=True)
class Verification:
    """The result of :meth:`Proof.verify`: one outcome per step, in order."""

    claim: str
    outcomes: tuple[StepOutcome, ...]

    @property
    def ok(self) -> bool:
        """True iff every step was established."""
        return all(outcome.ok for outcome in self.outcomes)

    @property
    def failed(self) -> tuple[StepOutcome, ...]:
        """The steps that were not established."""
        return tuple(outcome for outcome in self.outcomes if not outcome.ok)

    def __bool__(self) -> bool:
        return self.ok

    def summary(self) -> str:
        """``verified (n steps)`` or the list of failed steps with their statements."""
        if self.ok:
            return f"verified ({len(self.outcomes)} steps): {self.claim}"
        lines = [f"NOT verified: {self.claim}"]
        lines += [outcome.describe() for outcome in self.failed]
        return "\n".join(lines)


@dataclass(frozen=True)
class Proof:
    """A claim (LaTeX) and the steps that establish it; the claim holds if every step does.

    >>> from derive.definitions.activations import x
    >>> proof = Proof("cosh(x)^2 - sinh(x)^2 = 1",
    ...               (Step("by definition", "symbolic identity",
    ...                     identity(sp.cosh(x) ** 2 - sp.sinh(x) ** 2, 1)),))
    >>> proof.verify().ok, proof.rigorous
    (True, True)
    """

    claim: str
    steps: tuple[Step, ...]

    def verify(self) -> Verification:
        """Run every step (an exception counts as a failed step) and collect the outcomes."""
        outcomes = []
        for index, step in enumerate(self.steps, start=1):
            try:
                result = step.check()
            except Exception as error:  # a check that cannot complete establishes nothing
                outcomes.append(
                    StepOutcome(
                        index,
                        step.statement,
                        step.method,
                        False,
                        f"{type(error).__name__}: {error}",
                    )
                )
                continue
            if not isinstance(result, bool):
                error = f"check returned {type(result).__name__}, not bool"
                outcomes.append(StepOutcome(index, step.statement, step.method, False, error))
                continue
            outcomes.append(StepOutcome(index, step.statement, step.method, result))
        return Verification(self.claim, tuple(outcomes))

    @property
    def rigorous(self) -> bool:
        """True iff no step is mere evidence (an empty proof proves nothing)."""
        return bool(self.steps) and all(step.rigorous for step in self.steps)


# --------------------------------------------------------------------------------------
# Exact checkers. Each constructor returns a Check; nothing is computed until it is called.
# --------------------------------------------------------------------------------------


def is_zero(expr: sp.Expr) -> bool:
    """True iff an exact normalisation reduces ``expr`` to 0.

    Tried in order, cheapest first: as is, the polynomial-ring normal form of
    :func:`proofs.polynomial.vanishes` (parts named by variables, no gcds: fast on the large
    matrix-calculus differences), ``expand``, ``cancel(together(.))``; then, with
    erfc rewritten through erf and hyperbolic and trigonometric functions as exponentials,
    ``cancel(together(.))``
    and finally ``sympy.simplify``. (``simplify`` runs on the exponential form because on the
    raw tanh-GeLU tree it can take minutes; where there is nothing to rewrite the two forms
    are the same.) Each is an equality-preserving transformation, so reaching 0 proves the
    identity; failing to reach 0 proves nothing and gives ``False``.

    After the ring normal form (which never expands a sum of SymPy trees) and before the
    others, ``expr`` is evaluated (``evalf``, 30 digits) at a few rational points; a value
    far from 0 refutes the identity at once. This only ever answers
    ``False`` early -- never ``True`` -- and spares SymPy from expanding a large false
    difference (a wrong constant in the tanh-GeLU tree makes ``cancel`` run for minutes).
    """
    expr = sp.sympify(expr)
    if expr == 0:
        return True
    if vanishes(expr):
        return True
    if _certainly_nonzero_somewhere(expr):
        return False
    if sp.expand(expr) == 0 or sp.cancel(sp.together(expr)) == 0:
        return True
    exponential = expr.rewrite(sp.erf).rewrite(sp.exp)
    if exponential != expr and sp.cancel(sp.together(exponential)) == 0:
        return True
    return sp.simplify(exponential) == 0


def same(a: sp.Matrix, b: sp.Matrix) -> bool:
    """True only if the shapes agree and every entry of ``a - b`` is proven 0."""
    return a.shape == b.shape and all(is_zero(e) for e in (a - b))


#: Where :func:`is_zero` first evaluates a difference (negated for nonpositive symbols):
#: every symbol at one of these values, then (several symbols) the k-th symbol by name at
#: the first plus k/31.
_SCREEN_POINTS: tuple[sp.Rational, ...] = (
    sp.Rational(3, 7),
    sp.Rational(13, 10),
    sp.Rational(29, 17),
)
#: Digits of the screening evaluation, and the magnitude that counts as certainly nonzero.
_SCREEN_DIGITS = 30
_SCREEN_THRESHOLD = sp.Rational(1, 10**15)
#: Working precision (bits) of the rigorous arb screen.
_SCREEN_BITS = 256


def _certainly_nonzero_somewhere(expr: sp.Expr) -> bool:
    """True if ``expr`` is certainly nonzero at one of the screening points
    (:data:`_SCREEN_POINTS`).

    Rigorous where the expression has one symbol and translates to arb: the ball of its
    value at the exact rational point excludes 0. Otherwise SymPy's ``evalf`` at
    ``_SCREEN_DIGITS`` digits must land farther from 0 than ``_SCREEN_THRESHOLD``.
    """
    symbols = sorted(expr.free_symbols, key=str)
    points = [[value] * len(symbols) for value in _SCREEN_POINTS]
    if len(symbols) > 1:  # equal values hide a wrong term that vanishes on equal inputs
        points.append([_SCREEN_POINTS[0] + sp.Rational(k, 31) for k in range(len(symbols))])
    for values in points:
        at = {s: -v if s.is_nonpositive else v for s, v in zip(symbols, values, strict=True)}
        point = expr.xreplace(at)  # symbols to numbers: subs's pattern matching is not needed
        if len(symbols) == 1:
            try:
                if sign(enclose(point, prec=_SCREEN_BITS)) != 0:
                    return True
                continue
            except (ArbTranslationError, ValueError, ZeroDivisionError):
                pass
        number = point.evalf(_SCREEN_DIGITS)
        if number.is_real is not True or not number.is_finite:
            continue
        if abs(number) > _SCREEN_THRESHOLD:
            return True
    return False


def identity(a: sp.Expr, b: sp.Expr) -> Check:
    """Check that ``a == b`` identically (for all values of the real symbols).

    >>> from derive.definitions.activations import x
    >>> identity(sp.tanh(x), (sp.exp(2 * x) - 1) / (sp.exp(2 * x) + 1))()
    True
    >>> identity(sp.tanh(x), 1 - 2 / (sp.exp(2 * x) - 1))()
    False
    """
    return lambda: is_zero(sp.sympify(a) - sp.sympify(b))


def assumption(expr: sp.Expr, predicate: str) -> Check:
    """Check that SymPy's assumption system answers ``expr.is_<predicate> is True``.

    ``predicate`` is e.g. ``"positive"`` or ``"nonnegative"``; the answer ``None`` (unknown)
    is ``False``. The domain is that of the symbols' own assumptions (``real``, ``positive``).

    >>> from derive.definitions.activations import x
    >>> assumption(sp.exp(-x) / (1 + sp.exp(-x)) ** 2, "positive")()
    True
    >>> assumption(x, "positive")()
    False
    """
    return lambda: getattr(sp.sympify(expr), f"is_{predicate}") is True


def limit(expr: sp.Expr, var: sp.Symbol, point: sp.Expr, value: sp.Expr) -> Check:
    """Check that ``sympy.limit(expr, var, point)`` equals ``value`` exactly.

    >>> from derive.definitions.activations import x
    >>> limit(1 / (1 + sp.exp(-x)), x, sp.oo, 1)()
    True
    """

    def check() -> bool:
        found = sp.limit(expr, var, point)
        return bool(found.is_finite) and is_zero(found - value)

    return check


def solution_set(condition: sp.Basic, var: sp.Symbol, expected: sp.Set) -> Check:
    """Check that ``{var in R : condition}`` (by ``sympy.solveset``) equals ``expected``.

    >>> from derive.definitions.activations import x
    >>> solution_set(2 - x**2 > 0, x, sp.Interval.open(-sp.sqrt(2), sp.sqrt(2)))()
    True
    """

    def check() -> bool:
        found = sp.solveset(condition, var, sp.S.Reals)
        if found == expected:
            return True
        return sp.Complement(found, expected) == sp.S.EmptySet == sp.Complement(expected, found)

    return check


def witness(expr: sp.Expr, var: sp.Symbol, point: sp.Expr, value: sp.Expr) -> Check:
    """Check exactly that ``expr`` at ``var = point`` equals ``value``.

    >>> from derive.definitions.activations import x
    >>> witness(sp.exp(-x) / (1 + sp.exp(-x)) ** 2, x, 0, sp.Rational(1, 4))()
    True
    """
    return lambda: is_zero(sp.sympify(expr).subs(var, point) - value)


def every(checks: Iterable[Check]) -> Check:
    """All of ``checks`` hold (an exhaustive enumeration: one check per case).

    The checks run in order and stop at the first that fails; an empty list is ``False``
    (an enumeration of no cases proves nothing).
    """
    checks = tuple(checks)
    return lambda: bool(checks) and all(check() for check in checks)


# --------------------------------------------------------------------------------------
# Identities between sums over i = 1..D, for a symbolic size D.
# --------------------------------------------------------------------------------------
#
# A statement about every size D is machine-checked here without fixing D. Both sides are
# written with SymPy's ``Sum`` over ``IndexedBase`` entries (``a[i]``), and brought to a normal
# form by three exact rules:
#
# * linearity: a sum of a sum of terms is the sum of their sums, and a factor free of the
#   summation index leaves the sum;
# * separation: a sum over ``i`` and ``j`` of ``f(i) g(j)`` is ``(sum_i f)(sum_j g)``;
# * renaming: the bound index of a single sum is renamed to one fixed symbol, so that
#   ``sum_i a_i^2`` and ``sum_j a_j^2`` are the same expression.
#
# Sums in normal form are then atoms of a polynomial in the remaining symbols; the identity
# holds if the difference of the two sides, over one denominator, is 0. Each rule is an
# equality, so reaching 0 proves the identity for every D >= 1 (where both sides are
# defined); not reaching it proves nothing. A Kronecker delta of the summation index and an
# entry's index picks that entry (the entry's index lies in 1..D).

#: The symbolic size and the summation indices the statements are written with.
SIZE = sp.Symbol("D", integer=True, positive=True)
INDICES = sp.symbols("i j", integer=True, positive=True)
#: The one name every single sum's bound index is renamed to: a Dummy, so that no index of
#: the statements (a free ``k``, say) can be captured by the renaming.
_BOUND = sp.Dummy("k", integer=True, positive=True)


def total(expr: sp.Expr, index: sp.Symbol, size: sp.Symbol = SIZE) -> sp.Sum:
    """``sum_{index = 1}^{size} expr`` (``size``: D, or another symbolic size such as the
    output count O of a Linear layer)."""
    return sp.Sum(expr, (index, 1, size))


def _single(term: sp.Expr, index: sp.Symbol, size: sp.Symbol) -> sp.Expr:
    """``sum_{index = 1}^{size} term`` for one product ``term``: the factors free of
    ``index`` taken out; a Kronecker delta of ``index`` and another index ``t`` picks the
    term at ``t`` (``t`` is an entry's index, in 1..size); the rest summed with its index
    renamed."""
    free, bound = [], []
    for factor in sp.Mul.make_args(term):
        (bound if index in factor.free_symbols else free).append(factor)
    if not bound:
        return sp.Mul(*free) * size
    for factor in bound:
        if isinstance(factor, sp.KroneckerDelta) and factor.args[0] != factor.args[1]:
            (other,) = set(factor.args) - {index}
            rest = [f for f in bound if f is not factor]
            return sp.Mul(*free) * sp.Mul(*rest).xreplace({index: other})
    if any(index in inner.free_symbols for f in bound for inner in f.atoms(sp.Sum)):
        # renaming could capture the inner sum's index; such sums are not normalised
        raise ValueError(f"a sum over {index} of a sum that depends on it: {term}")
    inner = sp.Mul(*bound).xreplace({index: _BOUND})
    return sp.Mul(*free) * sp.Sum(inner, (_BOUND, 1, size))


def _sum_out(expr: sp.Expr, limits: tuple[tuple[sp.Symbol, sp.Symbol], ...]) -> sp.Expr:
    """The sum of ``expr`` over every ``(index, size)`` of ``limits`` (innermost first), in
    normal form: term by term, each product separated into one sum per index."""
    result = sp.expand(expr)
    for index, size in limits:
        result = sp.Add(
            *(_single(term, index, size) for term in sp.Add.make_args(sp.expand(result)))
        )
    return result


def _is_size(bound: sp.Basic) -> bool:
    """A symbolic size: a positive integer symbol (D, O, ...)."""
    return isinstance(bound, sp.Symbol) and bool(bound.is_integer and bound.is_positive)


def normal_form(expr: sp.Expr) -> sp.Expr:
    """``expr`` with every ``Sum`` (over 1..D, or 1..N for another symbolic size N)
    replaced by its normal form, expanded."""

    def rewrite(e: sp.Expr) -> sp.Expr:
        if isinstance(e, sp.Sum):
            for _, low, high in e.limits:
                if low != 1 or not _is_size(high):
                    raise ValueError(
                        f"only sums over 1..N for a symbolic size N are normalised, got {e.limits}"
                    )
            inner = rewrite(e.function)
            return _sum_out(inner, tuple((limit[0], limit[2]) for limit in e.limits))
        if e.args:
            return e.func(*(rewrite(arg) for arg in e.args))
        return e

    return sp.expand(rewrite(expr))


def _vanishes(expr: sp.Expr) -> bool:
    """A normal form is 0: the sums (atoms now) as symbols, over one denominator."""
    atoms = sorted(expr.atoms(sp.Sum), key=sp.default_sort_key)
    named = expr.xreplace({s: sp.Dummy(f"S{n}") for n, s in enumerate(atoms)})
    return sp.cancel(sp.together(named)) == 0


def _partitions(items: list) -> Iterable[list[list]]:
    """Every partition of ``items`` into nonempty blocks."""
    if not items:
        yield []
        return
    first, rest = items[0], items[1:]
    for partition in _partitions(rest):
        yield [[first], *partition]
        for k in range(len(partition)):
            yield [*partition[:k], [first, *partition[k]], *partition[k + 1 :]]


def sum_identity(
    a: sp.Expr, b: sp.Expr, distinct: Iterable[tuple[sp.Symbol, sp.Symbol]] = ()
) -> Check:
    """Check that ``a == b`` for every size D, both written with :func:`total`.

    Kronecker deltas of the entries' indices (``KroneckerDelta(i, j)`` left after the sums)
    are decided case by case: for every way the indices in them can coincide (a partition
    of those indices; the pairs in ``distinct`` never share a block), each block's indices
    are replaced by one of them, and a delta is 1 within a block, 0 across blocks.

    >>> i, j = INDICES
    >>> a = sp.IndexedBase("a", real=True)
    >>> sum_identity(total(total(a[i] * a[j], j), i), total(a[i], i) ** 2)()
    True
    >>> sum_identity(total(a[i], i) ** 2, total(a[i] ** 2, i))()  # true at D = 1 only
    False
    """
    apart = [frozenset(pair) for pair in distinct]

    def check() -> bool:
        form = normal_form(sp.sympify(a) - sp.sympify(b))
        deltas = [d for d in form.atoms(sp.KroneckerDelta) if d.args[0] != d.args[1]]
        indices = sorted({v for d in deltas for v in d.args}, key=sp.default_sort_key)
        for partition in _partitions(indices):
            if any(pair <= set(block) for block in partition for pair in apart):
                continue
            representative = {v: block[0] for block in partition for v in block}
            values = {
                d: sp.Integer(representative[d.args[0]] == representative[d.args[1]])
                for d in deltas
            }
            case = form.xreplace(values).xreplace(representative)
            if not _vanishes(case):
                return False
        return True

    return check
