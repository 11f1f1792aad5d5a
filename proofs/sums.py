"""Identities between sums over i = 1..D for a symbolic size D.

A statement about every size D is machine-checked here without fixing D. Both sides are
written with SymPy's ``Sum`` over ``IndexedBase`` entries (``a[i]``), and brought to a normal
form by three exact rules:

* linearity: a sum of a sum of terms is the sum of their sums, and a factor free of the
  summation index leaves the sum;
* separation: a sum over ``i`` and ``j`` of ``f(i) g(j)`` is ``(sum_i f)(sum_j g)``;
* renaming: the bound index of a single sum is renamed to one fixed symbol, so that
  ``sum_i a_i^2`` and ``sum_j a_j^2`` are the same expression.

Sums in normal form are then atoms of a polynomial in the remaining symbols; the identity
holds if the difference of the two sides expands to 0. Each rule is an equality, so reaching
0 proves the identity for every D >= 1; not reaching it proves nothing.

>>> i, j = INDICES
>>> a = sp.IndexedBase("a", real=True)
>>> sum_identity(total(total(a[i] * a[j], j), i), total(a[i], i) ** 2)()
True
"""

from __future__ import annotations

import sympy as sp

from proofs.core import Check

__all__ = ["INDICES", "SIZE", "normal_form", "sum_identity", "total"]

#: The symbolic size and the summation indices the statements are written with.
SIZE = sp.Symbol("D", integer=True, positive=True)
INDICES = sp.symbols("i j", integer=True, positive=True)
#: The one name every single sum's bound index is renamed to.
_BOUND = sp.Symbol("k", integer=True, positive=True)


def total(expr: sp.Expr, index: sp.Symbol) -> sp.Sum:
    """``sum_{index = 1}^{D} expr``."""
    return sp.Sum(expr, (index, 1, SIZE))


def _single(term: sp.Expr, index: sp.Symbol) -> sp.Expr:
    """``sum_index term`` for one product ``term``: the factors free of ``index`` taken out;
    a Kronecker delta of ``index`` and another index ``t`` picks the term at ``t`` (``t`` is
    an entry's index, in 1..D); the rest summed with its index renamed."""
    free, bound = [], []
    for factor in sp.Mul.make_args(term):
        (bound if index in factor.free_symbols else free).append(factor)
    if not bound:
        return sp.Mul(*free) * SIZE
    for factor in bound:
        if isinstance(factor, sp.KroneckerDelta) and factor.args[0] != factor.args[1]:
            (other,) = set(factor.args) - {index}
            rest = [f for f in bound if f is not factor]
            return sp.Mul(*free) * sp.Mul(*rest).xreplace({index: other})
    if any(index in inner.free_symbols for f in bound for inner in f.atoms(sp.Sum)):
        # renaming could capture the inner sum's index; such sums are not normalised
        raise ValueError(f"a sum over {index} of a sum that depends on it: {term}")
    inner = sp.Mul(*bound).xreplace({index: _BOUND})
    return sp.Mul(*free) * sp.Sum(inner, (_BOUND, 1, SIZE))


def _sum_out(expr: sp.Expr, indices: tuple[sp.Symbol, ...]) -> sp.Expr:
    """The sum of ``expr`` over every index of ``indices`` (innermost first), in normal
    form: term by term, each product separated into one sum per index."""
    result = sp.expand(expr)
    for index in indices:
        result = sp.Add(*(_single(term, index) for term in sp.Add.make_args(sp.expand(result))))
    return result


def normal_form(expr: sp.Expr) -> sp.Expr:
    """``expr`` with every ``Sum`` (over 1..D) replaced by its normal form, expanded."""

    def rewrite(e: sp.Expr) -> sp.Expr:
        if isinstance(e, sp.Sum):
            for _, low, high in e.limits:
                if low != 1 or high != SIZE:
                    raise ValueError(f"only sums over 1..D are normalised, got {e.limits}")
            inner = rewrite(e.function)
            return _sum_out(inner, tuple(limit[0] for limit in e.limits))
        if e.args:
            return e.func(*(rewrite(arg) for arg in e.args))
        return e

    return sp.expand(rewrite(expr))


def _vanishes(expr: sp.Expr) -> bool:
    """A normal form is 0: the sums (atoms now) as symbols, over one denominator."""
    atoms = sorted(expr.atoms(sp.Sum), key=sp.default_sort_key)
    named = expr.xreplace({s: sp.Dummy(f"S{n}") for n, s in enumerate(atoms)})
    return sp.cancel(sp.together(named)) == 0


def sum_identity(a: sp.Expr, b: sp.Expr) -> Check:
    """Check that ``a == b`` for every size D, both written with :func:`total`.

    Kronecker deltas of the entries' indices (``KroneckerDelta(i, j)`` left after the sums)
    are decided case by case: the indices equal (the delta 1, one index replaced by the
    other) and distinct (the delta 0, the entries independent).
    """

    def check() -> bool:
        form = normal_form(sp.sympify(a) - sp.sympify(b))
        deltas = [d for d in form.atoms(sp.KroneckerDelta) if d.args[0] != d.args[1]]
        if len(deltas) > 1:
            raise ValueError(f"more than one delta of free indices: {deltas}")
        if not deltas:
            return _vanishes(form)
        (delta,) = deltas
        first, second = delta.args
        equal = form.xreplace({delta: sp.Integer(1)}).xreplace({second: first})
        return _vanishes(form.xreplace({delta: sp.Integer(0)})) and _vanishes(equal)

    return check
