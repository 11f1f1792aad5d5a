"""Loops on the bits of halves for forms that select, and never round (ReLU).

A stable form qualifies when it is a Piecewise of two branches split at 0 (``x > 0`` or
``x >= 0``, then ``True``) whose values are ``x`` itself or constants that the 16-bit
formats hold exactly, and whose derivative's values are 0 or 1. Its correctly rounded
value is then one of its branch values, which the input's format holds: the mixed float16
and bfloat16 loops need not widen the input to float64 and round the result back (two
conversions in software, about 1 ns an element). They select on the bits instead, 16 lanes
to an AVX2 vector:

* the condition, for an input that is not NaN: ``x > 0`` is ``0 < bits <= inf`` (the sign
  bit clear, not +0), ``x >= 0`` adds ``-0``;
* a branch value ``x`` is the input's bits, a constant its bits in the format;
* the VJP's ``g f'(x)`` is ``g`` where ``f'(x) = 1`` and ``g * (+0)``, a zero with the sign
  of ``g``, where ``f'(x) = 0``.

Inputs at +-inf select the branch their condition picks, which is the limit there: the
generator checks that against :func:`derive.codegen.generate.limits` and refuses the form
otherwise. NaN inputs (and, in the VJP, a NaN or infinite ``g``: ``inf * 0`` is NaN) are
recomputed by the float64 scalar path as before, a block at a time. So the bits are those
of the float64 path for every input but a NaN; a NaN stays a NaN, its payload whatever that
path's product gives (IEEE leaves the payload of ``NaN * NaN`` open, and LLVM picks the
operand). ``tests/kernels/test_exact_bits.py`` compares the two paths.
"""

from __future__ import annotations

from collections.abc import Callable

import ml_dtypes
import numpy as np
import sympy as sp

from derive.codegen.activations import StableForm
from derive.definitions.activations import x

#: Per 16-bit format: the loops' suffix, the exact conversions of the scalar path, the bits
#: of +inf, and a function giving the bits of a float the format holds exactly.
FORMATS = {
    "f16": ("half_bits_to_float64", "float64_to_half_bits", 0x7C00, np.float16),
    "bf16": ("bfloat16_bits_to_float64", "float64_to_bfloat16_bits", 0x7F80, ml_dtypes.bfloat16),
}
_SIGN, _MAGNITUDE = 0x8000, 0x7FFF


def _hex(bits: int) -> str:
    """``bits`` as the generated code writes it (four uppercase digits, as ruff formats)."""
    return f"0x{bits:04X}"


UNARY = """\
@njit(cache=True, error_model="numpy")
def {q}_{suffix}_block(xs, ys):
    special = 0
    for i in range(xs.size):
        b = xs[i]
        ys[i] = {select}
        special += (b & {magnitude}) > {inf}
    if special:  # NaN inputs: the float64 path
        for i in range(xs.size):
            if (xs[i] & {magnitude}) > {inf}:
                ys[i] = {narrow}({q}_f64({read}(xs[i])))


@njit(cache=True, parallel=True, error_model="numpy")
def {q}_{suffix}_loop(bits, out):
    n = bits.size
    for b in prange((n + BLOCK - 1) // BLOCK):
        lo, hi = b * BLOCK, min(n, (b + 1) * BLOCK)
        {q}_{suffix}_block(bits[lo:hi], out[lo:hi])
"""

VJP = """\
@njit(cache=True, error_model="numpy")
def vjp_{suffix}_block(xs, gs, ys):
    special = 0
    for i in range(xs.size):
        b, gb = xs[i], gs[i]
        ys[i] = {select}
        special += ((b & {magnitude}) > {inf}) | ((gb & {magnitude}) >= {inf})
    if special:  # a NaN x, or a NaN or infinite g: the float64 path
        for i in range(xs.size):
            if ((xs[i] & {magnitude}) > {inf}) | ((gs[i] & {magnitude}) >= {inf}):
                dy = {read}(gs[i])
                d = derivative_f64({read}(xs[i]))
                ys[i] = {narrow}(dy * d)


@njit(cache=True, parallel=True, error_model="numpy")
def vjp_{suffix}_loop(bits, g_bits, out):
    n = bits.size
    for b in prange((n + BLOCK - 1) // BLOCK):
        lo, hi = b * BLOCK, min(n, (b + 1) * BLOCK)
        vjp_{suffix}_block(bits[lo:hi], g_bits[lo:hi], out[lo:hi])
"""

DOC = """

The mixed float16 and bfloat16 loops select on the bits (``derive/codegen/exact.py``): every
value of the form is the input or a constant the format holds, so nothing is rounded. NaN
inputs, and in the VJP a NaN or infinite ``g``, are recomputed with the ``_f64`` function."""


def _condition(condition: sp.Basic, inf: int) -> str | None:
    """The test of ``condition`` on the bits ``b`` of a non-NaN input, or None."""
    if condition == (x > 0):
        return f"(b > 0) & (b <= {_hex(inf)})"
    if condition == (x >= 0):
        return f"(b <= {_hex(inf)}) | (b == {_hex(_SIGN)})"
    return None


def _constant_bits(value: sp.Basic, kind: type) -> int | None:
    """The bits of ``value`` in the format, if it is a number the format holds exactly."""
    if not value.is_Number:
        return None
    as_float = float(value)
    stored = np.array(as_float, dtype=kind)
    if float(stored) != as_float:
        return None
    return int(stored.view(np.uint16))


def _split(form: StableForm) -> tuple[sp.Basic, sp.Basic, sp.Basic] | None:
    """``(condition, value where it holds, value elsewhere)`` of a two-branch Piecewise."""
    expr = form.expr
    if not isinstance(expr, sp.Piecewise) or len(expr.args) != 2 or expr.args[1][1] != sp.true:
        return None
    (first, condition), (second, _) = expr.args
    return condition, first, second


def _value(value: sp.Basic, kind: type) -> str | None:
    """A branch value on the bits ``b``: the input itself, or a constant's bits."""
    if value == x:
        return "b"
    bits = _constant_bits(value, kind)
    return None if bits is None else f"np.uint16({_hex(bits)})"


def _product(value: sp.Basic) -> str | None:
    """``g f'(x)`` on the bits ``gb`` of a finite g, for a derivative value of 0 or 1."""
    if value == 1:
        return "gb"
    if value == 0:  # g * (+0): a zero with the sign of g
        return f"gb & np.uint16({_hex(_SIGN)})"
    return None


def _selection(
    form: StableForm, kind: type, inf: int, value: Callable[[sp.Basic], str | None]
) -> str | None:
    split = _split(form)
    if split is None:
        return None
    condition, first, second = split
    test = _condition(condition, inf)
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
    """Whether the module of these forms gets the loops on bits; ``limits(form)`` gives a
    form's (value at -inf, value at +inf)."""
    for _, _, inf, kind in FORMATS.values():
        if _selection(forward, kind, inf, lambda v, k=kind: _value(v, k)) is None:
            return False
        if _selection(derivative, kind, inf, lambda v, k=kind: _value(v, k)) is None:
            return False
        if _selection(derivative, kind, inf, _product) is None:
            return False
    return all(_limits_selected(form, limits(form)) for form in (forward, derivative))


def loops(forward: StableForm, derivative: StableForm) -> dict[str, str]:
    """The loops on bits, by the name of the generic loop each replaces."""
    out = {}
    for suffix, (read, narrow, inf, kind) in FORMATS.items():
        fields = {
            "suffix": suffix,
            "read": read,
            "narrow": narrow,
            "inf": _hex(inf),
            "magnitude": _hex(_MAGNITUDE),
        }
        for form in (forward, derivative):
            select = _selection(form, kind, inf, lambda v, k=kind: _value(v, k))
            text = UNARY.format(q=form.quantity, select=select, **fields)
            out[f"{form.quantity}_{suffix}_loop"] = text
        select = _selection(derivative, kind, inf, _product)
        out[f"vjp_{suffix}_loop"] = VJP.format(select=select, **fields)
    return out
