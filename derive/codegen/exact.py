"""Loops that select, and never round, for forms whose values the input's format holds (ReLU).

A stable form qualifies when it is a Piecewise of two branches split at 0 (``x > 0`` or
``x >= 0``, then ``True``) whose values are ``x`` itself or constants that float32 and the
16-bit formats hold exactly, and whose derivative's values are 0 or 1. Its correctly
rounded value is then one of its branch values, which the input's format holds: the float32
and mixed float16 and bfloat16 loops need not widen the input to float64 and round the
result back (for the 16-bit formats two conversions in software, about 1 ns an element).
They select in the input's own format instead, 8 float32 or 16 half lanes to an AVX2
vector:

* float32: the condition and the branch values as float32 operations, and the VJP's
  ``g f'(x)`` as ``g`` where ``f'(x) = 1`` and ``g * 0`` (a zero with the sign of ``g``)
  where ``f'(x) = 0``;
* float16 and bfloat16, on the bits: ``x > 0`` is ``0 < bits <= inf`` (the sign bit clear,
  not +0), ``x >= 0`` adds ``-0``; a branch value ``x`` is the input's bits, a constant its
  bits in the format, ``g * 0`` the sign bit of ``g``.

Inputs at +-inf select the branch their condition picks, which is the limit there: the
generator checks that against :func:`derive.codegen.generate.limits` and refuses the form
otherwise. NaN inputs (and, in the VJP, a NaN or infinite ``g``: ``inf * 0`` is NaN) are
recomputed by the float64 scalar path as before, a block at a time. So the bits are those
of the float64 path for every input but a NaN; a NaN stays a NaN, its payload whatever that
path's product gives (IEEE leaves the payload of ``NaN * NaN`` open, and LLVM picks the
operand). ``tests/kernels/test_exact_bits.py`` compares the loops with the definition.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import ml_dtypes
import numpy as np
import sympy as sp

from derive.codegen.activations import StableForm
from derive.codegen.loops import PARALLEL_UNARY, PARALLEL_VJP
from derive.definitions.activations import x

_SIGN, _MAGNITUDE = 0x8000, 0x7FFF


def _hex(bits: int) -> str:
    """``bits`` as the generated code writes it (four uppercase digits, as ruff formats)."""
    return f"0x{bits:04X}"


@dataclass(frozen=True)
class Storage:
    """How the loops of one format hold its values: float32 values, or the bits of a 16-bit
    format (``inf`` the bits of +inf)."""

    suffix: str
    kind: type
    read: str  # the scalar path's exact widening of an element to float64
    store: str  # the scalar path's rounding of a float64 into an element, {} the value
    inf: int | None = None

    @property
    def bits(self) -> bool:
        return self.inf is not None

    def condition(self, condition: sp.Basic) -> str | None:
        """The test of ``condition`` on an element ``xi`` that is not NaN, or None."""
        if self.bits:
            tests = {
                x > 0: f"(xi > 0) & (xi <= {_hex(self.inf)})",
                x >= 0: f"(xi <= {_hex(self.inf)}) | (xi == {_hex(_SIGN)})",
            }
        else:
            tests = {x > 0: "xi > 0", x >= 0: "xi >= 0"}
        return tests.get(condition)

    def value(self, value: sp.Basic) -> str | None:
        """A branch value: the element ``xi`` itself, or a constant the format holds."""
        if value == x:
            return "xi"
        if not value.is_Number or float(np.array(float(value), self.kind)) != float(value):
            return None
        if self.bits:
            return f"np.uint16({_hex(int(np.array(float(value), self.kind).view(np.uint16)))})"
        return f"np.float32({float(value)!r})"

    def product(self, value: sp.Basic) -> str | None:
        """``g f'(x)`` for a derivative value of 0 or 1, ``gi`` a finite g."""
        if value == 1:
            return "gi"
        if value == 0:  # g * (+0): a zero with the sign of g
            return f"gi & np.uint16({_hex(_SIGN)})" if self.bits else "gi * np.float32(0.0)"
        return None

    def nan(self, name: str) -> str:
        """Whether the element ``name`` is a NaN."""
        if self.bits:
            return f"({name} & {_hex(_MAGNITUDE)}) > {_hex(self.inf)}"
        return f"{name} != {name}"

    def not_finite(self, name: str) -> str:
        """Whether the element ``name`` is a NaN or an infinity."""
        if self.bits:
            return f"({name} & {_hex(_MAGNITUDE)}) >= {_hex(self.inf)}"
        return f"({name} != {name}) | (abs({name}) == np.inf)"


STORAGES = (
    Storage("f32", np.float32, "np.float64", "{}"),
    Storage("f16", np.float16, "half_bits_to_float64", "float64_to_half_bits({})", 0x7C00),
    Storage(
        "bf16",
        ml_dtypes.bfloat16,
        "bfloat16_bits_to_float64",
        "float64_to_bfloat16_bits({})",
        0x7F80,
    ),
)

UNARY = (
    """\
@njit(cache=True, error_model="numpy")
def {q}_{suffix}_block(xs, ys):
    special = 0
    for i in range(xs.size):
        xi = xs[i]
        ys[i] = {select}
        special += {special}
    if special:  # NaN inputs: the float64 path
        for i in range(xs.size):
            xi = xs[i]
            if {special}:
                ys[i] = {fallback}


"""
    + PARALLEL_UNARY
)

VJP = (
    """\
@njit(cache=True, error_model="numpy")
def vjp_{suffix}_block(xs, gs, ys):
    special = 0
    for i in range(xs.size):
        xi, gi = xs[i], gs[i]
        ys[i] = {select}
        special += ({special}) | ({g_special})
    if special:  # a NaN x, or a NaN or infinite g: the float64 path
        for i in range(xs.size):
            xi, gi = xs[i], gs[i]
            if ({special}) | ({g_special}):
                dy = {read}(gi)
                d = derivative_f64({read}(xi))
                ys[i] = {product}


"""
    + PARALLEL_VJP
)

DOC = """

The float32 and mixed float16 and bfloat16 loops select in the input's format
(``derive/codegen/exact.py``; the 16-bit ones on the bits): every value of the form is the
input or a constant the format holds, so nothing is rounded. NaN inputs, and in the VJP a
NaN or infinite ``g``, are recomputed with the ``_f64`` function."""


def _split(form: StableForm) -> tuple[sp.Basic, sp.Basic, sp.Basic] | None:
    """``(condition, value where it holds, value elsewhere)`` of a two-branch Piecewise."""
    expr = form.expr
    if not isinstance(expr, sp.Piecewise) or len(expr.args) != 2 or expr.args[1][1] != sp.true:
        return None
    (first, condition), (second, _) = expr.args
    return condition, first, second


def _selection(
    form: StableForm, storage: Storage, value: Callable[[sp.Basic], str | None]
) -> str | None:
    """``value if condition else value`` for the form's branches, or None."""
    split = _split(form)
    if split is None:
        return None
    condition, first, second = split
    test = storage.condition(condition)
    values = (value(first), value(second))
    if test is None or None in values:
        return None
    return f"{values[0]} if {test} else {values[1]}"


def _limits_selected(form: StableForm, limits: tuple[sp.Expr, sp.Expr]) -> bool:
    """Whether the branch selected at -inf and at +inf gives the form's limit there."""
    condition, first, second = _split(form)
    for side, limit in zip((-1, 1), limits, strict=True):
        value = first if condition.subs(x, side * sp.oo) else second
        if value.subs(x, side * sp.oo) != limit:
            return False
    return True


def exact(forward: StableForm, derivative: StableForm, limits) -> bool:
    """Whether the module of these forms gets the selecting loops; ``limits(form)`` gives a
    form's (value at -inf, value at +inf)."""
    for storage in STORAGES:
        for form in (forward, derivative):
            if _selection(form, storage, storage.value) is None:
                return False
        if _selection(derivative, storage, storage.product) is None:
            return False
    return all(_limits_selected(form, limits(form)) for form in (forward, derivative))


def loops(forward: StableForm, derivative: StableForm) -> dict[str, str]:
    """The selecting loops, by the name of the generic loop each replaces."""
    out = {}
    for s in STORAGES:
        for form in (forward, derivative):
            out[f"{form.quantity}_{s.suffix}_loop"] = UNARY.format(
                q=form.quantity,
                suffix=s.suffix,
                x="x",
                select=_selection(form, s, s.value),
                special=s.nan("xi"),
                fallback=s.store.format(f"{form.quantity}_f64({s.read}(xi))"),
            )
        out[f"vjp_{s.suffix}_loop"] = VJP.format(
            suffix=s.suffix,
            x="x",
            g="g",
            select=_selection(derivative, s, s.product),
            special=s.nan("xi"),
            g_special=s.not_finite("gi"),
            read=s.read,
            product=s.store.format("dy * d"),
        )
    return out
