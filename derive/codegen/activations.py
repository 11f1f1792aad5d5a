"""Numerically stable forms of the derived expressions, as data, each proven equal.

The kernels do not evaluate the textbook formula ``1 / (1 + exp(-x))`` for every x: for
x << 0 its ``exp(-x)`` overflows, and forms such as ``1 + tanh(u)`` cancel catastrophically
in the far tails (GeLU-tanh at x = -5 loses 7 of float64's 16 digits that way). Each entry
below rewrites the derived expression into branches that avoid overflow and cancellation.

A rewrite is admitted only with a proof: on every branch, ``simplify(branch - target) == 0``
where ``target`` is the definition's forward or its ``sympy.diff``; see
:func:`rewrite_identities`. The test suite runs those identities; the emitter refuses a form
whose target it does not know.

Two things are *not* symbolic rewrites and are kept apart on purpose:

* non-finite inputs: the kernels return ``limit(f, x, +-oo)`` at ``x = +-inf`` (computed by
  SymPy at generation time) and NaN at NaN, rather than IEEE's ``inf * 0 = NaN`` of a
  formula evaluated at infinity;
* saturation: where a correct formula still evaluates ``0 * inf`` for huge finite |x|
  (GeLU-tanh's derivative multiplies ``exp(-2u)``, which underflows, by ``x u'``, which
  overflows once x^3 does, |x| > 5.6e102; GeLU-sigmoid's multiplies ``exp(-1.702 x)`` by
  ``1.702 x``, which overflows past 1.05e308), the kernel returns the limit beyond
  ``SATURATION`` = 2^32, where the distance to the limit is below exp(-10^9). That the
  limit is the correctly rounded value there is checked against the mpmath reference.
"""

from __future__ import annotations

from dataclasses import dataclass

import sympy as sp

from derive.definitions.activations import (
    GELU_SIGMOID_SLOPE,
    GELU_TANH_CUBIC,
    Elementwise,
    elementwise,
    x,
)
from derive.reference.core import may_cancel
from proofs.core import is_zero

#: Inputs with |x| beyond this return the limit at infinity (see the module docstring).
SATURATION = sp.Integer(2) ** 32


@dataclass(frozen=True)
class StableForm:
    """A proven-equal rewrite of one quantity ("forward" or "derivative") of a module.

    ``expr`` is what the kernel evaluates; a Piecewise becomes an if/else chain. With
    ``saturate``, inputs with |x| > :data:`SATURATION` return the limits at infinity.
    """

    key: str
    quantity: str
    expr: sp.Expr
    why: str
    saturate: bool = False

    @property
    def cancels(self) -> bool:
        """Whether a branch may add terms of opposite sign on its own region.

        Such a form loses accuracy in its own format (up to 9 ULPs measured), so its float64
        kernel is evaluated in double-double; the others stay in plain float64. The sign of
        x on each branch comes from the condition ``x >= 0`` (or ``x > 0``) that the
        branches of every stable form here split on.
        """
        nonnegative = sp.Symbol("x", nonnegative=True)
        negative = sp.Symbol("x", negative=True)
        if not isinstance(self.expr, sp.Piecewise):
            return may_cancel(self.expr)
        first_condition = self.expr.args[0][1]
        splits_at_zero = first_condition in (x >= 0, x > 0)
        for i, (branch, _) in enumerate(self.expr.args):
            if splits_at_zero:
                branch = branch.subs(x, nonnegative if i == 0 else negative)
            if may_cancel(branch):
                return True
        return False

    def target(self) -> sp.Expr:
        """The expression this form must equal: the forward or ``sympy.diff`` of it."""
        module = elementwise(self.key)
        return {"forward": module.forward, "derivative": module.derivative}[self.quantity]


def _forms() -> tuple[StableForm, ...]:
    t_pos, t_neg = sp.exp(-x), sp.exp(x)
    a = GELU_SIGMOID_SLOPE
    s_pos, s_neg = sp.exp(-a * x), sp.exp(a * x)
    u = sp.sqrt(2 / sp.pi) * (x + GELU_TANH_CUBIC * x**3)
    du = sp.diff(u, x)
    w_pos, w_neg = sp.exp(-2 * u), sp.exp(2 * u)
    # erfc(-z) as written: SymPy would otherwise canonicalize it to 2 - erfc(z), the very
    # cancellation this form avoids.
    _erfc_negated = sp.erfc(-x / sp.sqrt(2), evaluate=False)
    return (
        StableForm(
            "sigmoid",
            "forward",
            sp.Piecewise((1 / (1 + t_pos), x >= 0), (t_neg / (1 + t_neg), True)),
            "exp of a non-positive argument only: no overflow for x << 0",
        ),
        StableForm(
            "sigmoid",
            "derivative",
            sp.Piecewise((t_pos / (1 + t_pos) ** 2, x >= 0), (t_neg / (1 + t_neg) ** 2, True)),
            "sigma(1 - sigma) without the cancellation of 1 - sigma for x >> 0",
        ),
        StableForm(
            "relu",
            "forward",
            elementwise("relu").forward,
            "exact as defined",
        ),
        StableForm(
            "relu",
            "derivative",
            elementwise("relu").derivative,
            "exact as defined; the kink convention is the Piecewise's: relu'(0) = 0",
        ),
        StableForm(
            "swish",
            "forward",
            sp.Piecewise((x / (1 + t_pos), x >= 0), (x * t_neg / (1 + t_neg), True)),
            "x sigma(x) with the stable sigmoid",
        ),
        StableForm(
            "swish",
            "derivative",
            sp.Piecewise(
                ((1 + t_pos + x * t_pos) / (1 + t_pos) ** 2, x >= 0),
                (t_neg * (1 + t_neg + x) / (1 + t_neg) ** 2, True),
            ),
            "one fraction per sign: no 1 - sigma cancellation, no overflow",
        ),
        StableForm(
            "gelu_none",
            "forward",
            x * _erfc_negated / 2,
            "erfc keeps full relative accuracy in the left tail where 1 + erf cancels",
        ),
        StableForm(
            "gelu_none",
            "derivative",
            _erfc_negated / 2 + x * sp.exp(-(x**2) / 2) / sp.sqrt(2 * sp.pi),
            "Phi(x) + x phi(x) with Phi via erfc",
        ),
        StableForm(
            "gelu_tanh",
            "forward",
            sp.Piecewise((x / (1 + w_pos), x >= 0), (x * w_neg / (1 + w_neg), True)),
            "(1 + tanh u)/2 = sigma(2u): no cancellation of 1 + tanh u for x << 0",
        ),
        StableForm(
            "gelu_tanh",
            "derivative",
            sp.Piecewise(
                ((1 + w_pos + 2 * x * du * w_pos) / (1 + w_pos) ** 2, x >= 0),
                (w_neg * (1 + w_neg + 2 * x * du) / (1 + w_neg) ** 2, True),
            ),
            "sigma(2u) + 2 x u' sigma(2u) sigma(-2u), one fraction per sign",
            saturate=True,
        ),
        StableForm(
            "gelu_sigmoid",
            "forward",
            sp.Piecewise((x / (1 + s_pos), x >= 0), (x * s_neg / (1 + s_neg), True)),
            "x sigma(1.702 x) with the stable sigmoid",
        ),
        StableForm(
            "gelu_sigmoid",
            "derivative",
            sp.Piecewise(
                ((1 + s_pos + a * x * s_pos) / (1 + s_pos) ** 2, x >= 0),
                (s_neg * (1 + s_neg + a * x) / (1 + s_neg) ** 2, True),
            ),
            "as Swish's derivative at 1.702 x",
            saturate=True,
        ),
    )


STABLE_FORMS: tuple[StableForm, ...] = _forms()


def stable_form(key: str, quantity: str) -> StableForm:
    """The stable form of ``quantity`` ("forward" or "derivative") of module ``key``."""
    for form in STABLE_FORMS:
        if form.key == key and form.quantity == quantity:
            return form
    raise KeyError(f"no stable form for {key}.{quantity}")


def branches(expr: sp.Expr) -> tuple[sp.Expr, ...]:
    """The branch expressions of a Piecewise, or the expression itself."""
    if isinstance(expr, sp.Piecewise):
        return tuple(e for e, _ in expr.args)
    return (expr,)


def rewrite_identities(form: StableForm) -> tuple[tuple[sp.Expr, sp.Expr], ...]:
    """The (branch, target) pairs whose equality admits ``form``.

    Each branch must equal the target everywhere (not only on its region), which is a
    stronger statement than needed and lets SymPy decide it without assumptions.
    A Piecewise target (ReLU) is compared branch by branch with matching conditions.
    """
    target = form.target()
    if isinstance(target, sp.Piecewise):
        return ((form.expr, target),)
    return tuple((branch, target) for branch in branches(form.expr))


def proves(form: StableForm) -> bool:
    """True if every identity of :func:`rewrite_identities` holds exactly."""
    for branch, target in rewrite_identities(form):
        if isinstance(target, sp.Piecewise):
            if branch != target:
                return False
        elif not is_zero(branch - target):
            return False
    return True


def module_forms(module: Elementwise) -> tuple[StableForm, StableForm]:
    """(forward, derivative) stable forms of a catalog entry."""
    return stable_form(module.key, "forward"), stable_form(module.key, "derivative")
