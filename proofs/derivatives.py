"""Exact derivatives of large SymPy expressions, differentiated by SymEngine.

SymPy's ``diff`` builds every intermediate derivative as an evaluated SymPy object and
queries the assumption system at each node; on the attentions' losses (a softmax of sums of
products, a few hundred operations) that is 0.2-1.2 s per size and most of the time of the
backward-pass proofs. SymEngine (the C++ symbolic core SymPy can use) applies the same
differentiation rules without that overhead: 1.6 s of CPU for the eleven sizes' gradients,
the conversions to SymEngine and back included, against 7.2 s with ``sympy.diff``. The
results come back as SymPy expressions in the caller's own symbols, so the identities built
from them are decided by :func:`proofs.core.same` as before; a derivative is an exact
expression either way, and ``tests/proofs/test_derivatives.py`` compares the two libraries'
derivatives.

SymEngine's symbols carry no assumptions: it differentiates the expression as a function of
complex variables, whose derivative is the real one on the reals. The symbols are matched
back by name, so the names of an expression's symbols must be distinct.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

import symengine as se
import sympy as sp

__all__ = ["directional", "gradient"]


def _names(exprs: Iterable[sp.Basic]) -> dict[sp.Symbol, sp.Symbol]:
    """The free symbols of ``exprs`` by SymPy's plain symbol of the same name (what a
    SymEngine result converts back to); refuses two symbols that share a name."""
    symbols: dict[str, sp.Symbol] = {}
    for expr in exprs:
        for symbol in expr.free_symbols:
            other = symbols.setdefault(symbol.name, symbol)
            if other != symbol:
                raise ValueError(f"two symbols named {symbol.name!r}: {other!r} and {symbol!r}")
    return {sp.Symbol(name): symbol for name, symbol in symbols.items()}


def _back(value: se.Basic, names: dict[sp.Symbol, sp.Symbol]) -> sp.Expr:
    return sp.sympify(value).xreplace(names)


def gradient(expr: sp.Expr, wrt: Sequence[sp.Symbol]) -> list[sp.Expr]:
    """``[d expr / d s for s in wrt]``.

    >>> x, y = sp.symbols("x y", real=True)
    >>> gradient(sp.exp(x * y) + x**2, [x, y])
    [2*x + y*exp(x*y), x*exp(x*y)]
    """
    names = _names([sp.sympify(expr), *wrt])
    value = se.sympify(expr)
    return [_back(value.diff(se.Symbol(s.name)), names) for s in wrt]


def directional(exprs: Sequence[sp.Expr], h: sp.Symbol) -> list[sp.Expr]:
    """``d e / dh`` at ``h = 0`` for each ``e`` of ``exprs``: the derivative along the
    direction that ``h`` scales, such as ``forward(X + h Delta)``.

    >>> x, h = sp.symbols("x h", real=True)
    >>> directional([sp.exp(x + h) / (1 + h), (x + h) ** 3], h)
    [0, 3*x**2]
    """
    names = _names([*map(sp.sympify, exprs), h])
    symbol = se.Symbol(h.name)
    return [_back(se.sympify(e).diff(symbol).subs({symbol: 0}), names) for e in exprs]
